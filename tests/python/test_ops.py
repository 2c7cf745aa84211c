"""Every op family of kiln's op table against eager PyTorch.

Each test wraps a few torch calls in a small nn.Module, compiles it with
kiln.trace and compares kiln's outputs with eager's on the same inputs using
torch.testing.assert_close, which also checks that shape and dtype match
exactly. Related ops share one module (one trace, several outputs) where
that keeps the file fast: a trace costs ~0.3 s, almost all of it in
torch.export's decomposition, and the whole file must stay under ~60 s on two
cores. assert_close names the index of the output that differs.

Tolerances, and why:
  EXACT   int / bool results, data movement (views, cat, gather, where) and
          IEEE-exact float ops (add/sub/mul/div/max/min/neg/abs/sqrt, casts):
          bit-for-bit.
  EW      fp32 elementwise chains (a scalar multiply folded in, a**0.5, ...):
          1e-6 rel / 1e-6 abs, a couple of ulp.
  TRANS   transcendental functions (exp, log, tanh, erf, gelu, ...): kiln's
          vectorised polynomials are within 2-3 ulp of the correctly rounded
          result, torch's (SLEEF) within ~1 ulp, so they may differ by ~4 ulp:
          rtol 5e-7 (4 * 2^-23 ~ 4.8e-7); atol 1e-7 for results near zero,
          where a tiny absolute error is a large relative one.
  RED     softmax, norms, reductions: a sum over a row in another order (kiln
          accumulates in blocks): 1e-5 rel / 1e-6 abs.
  gemm(K) matmul / linear / attention: a K-term dot product's rounding error
          grows ~K * eps * sum|a_i b_i|, and kiln's blocking and FMA order
          differ from torch's BLAS: rtol = atol = 1e-6 * K (1e-4 at K = 100).
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import kiln

EXACT = dict(rtol=0.0, atol=0.0)
EW = dict(rtol=1e-6, atol=1e-6)
TRANS = dict(rtol=5e-7, atol=1e-7)
RED = dict(rtol=1e-5, atol=1e-6)


def gemm(k):
    return dict(rtol=max(1e-6 * k, 1e-5), atol=max(1e-6 * k, 1e-5))


class Fn(nn.Module):
    """A module whose forward is `fn(*inputs)`."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def run(model, *inputs):
    """(kiln's outputs, eager's outputs) for `model` on `inputs`."""
    if not isinstance(model, nn.Module):
        model = Fn(model)
    compiled = kiln.trace(model, inputs)
    with torch.no_grad():
        want = model(*inputs)
    got = compiled(*inputs)
    return got, want


def check(model, *inputs, tol=EXACT, equal_nan=False):
    got, want = run(model, *inputs)
    assert_close(got, want, equal_nan=equal_nan, **tol)
    return got


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def randn(*shape):
    return torch.randn(shape)


# ---- matrix products ----------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 24), (2, 5, 24), (2, 1, 3, 24)])
def test_linear(bias, shape):
    lin = nn.Linear(24, 13, bias=bias)
    check(lin, randn(*shape), tol=gemm(24))


def test_linear_large_k():
    # K = 257: a tail after every SIMD/K-block width kiln uses.
    lin = nn.Linear(257, 33)
    check(lin, randn(7, 257), tol=gemm(257))


def test_linear_stack():
    # Two Linears with an activation between: the GEMM-epilogue fusion path.
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 8))
    check(m, randn(3, 16), tol=gemm(32))


@pytest.mark.parametrize("alpha,beta", [(1, 1), (2.0, 0.5), (1, 0)])
def test_addmm(alpha, beta):
    check(lambda b, x, w: torch.addmm(b, x, w, alpha=alpha, beta=beta),
          randn(7), randn(3, 5), randn(5, 7), tol=gemm(5))


def test_mm_bmm():
    check(lambda a, b, c, d: (torch.mm(a, b), torch.bmm(c, d)),
          randn(6, 9), randn(9, 4), randn(3, 5, 9), randn(3, 9, 2), tol=gemm(9))


@pytest.mark.parametrize("sa,sb", [
    ((2, 3, 4, 16), (16, 5)),        # batched @ matrix (b broadcast over the batch)
    ((4, 16), (2, 16, 5)),           # matrix @ batched (a broadcast)
    ((2, 1, 4, 16), (1, 3, 16, 5)),  # both broadcast
    ((3, 4, 130), (3, 130, 6)),      # K past a block boundary
    ((16,), (16, 5)),                # 1-d @ 2-d
    ((2, 3, 16), (16,)),             # 3-d @ 1-d
    ((16,), (16,)),                  # dot product: 0-d result
])
def test_matmul(sa, sb):
    check(lambda a, b: torch.matmul(a, b), randn(*sa), randn(*sb), tol=gemm(sa[-1]))


# ---- binary elementwise ---------------------------------------------------------------


def _arith(a, b):
    return a + b, a - b, a * b, a / b, torch.maximum(a, b), torch.minimum(a, b)


@pytest.mark.parametrize("sa,sb", [
    ((3, 4), (3, 4)),
    ((2, 3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((5, 1, 1, 3), (1, 4, 2, 1)),
])
def test_binary_broadcast(sa, sb):
    check(_arith, randn(*sa), randn(*sb) + 0.1, tol=EXACT)


def test_binary_python_scalars():
    def f(a, b):
        return (a + 2.5, 2.5 - a, a * -3, a / 7, 3 / a, a - 1, 1 + a,
                torch.add(a, b, alpha=2), torch.sub(a, b, alpha=0.5), torch.rsub(a, b, alpha=3))
    # alpha multiplies before adding: one extra rounding vs torch's fused a + alpha*b.
    check(f, randn(3, 4), randn(3, 4), tol=EW)


def test_pow():
    def f(a, p, b):
        return a ** 2, a ** 3, p ** 0.5, p ** -1.5, torch.pow(p, b), p ** b
    check(f, randn(4, 5), torch.rand(4, 5) + 0.1, randn(5), tol=TRANS)


def test_int64_arithmetic():
    def f(a, b):
        return (a + b, a - b, a * b, a + 3, a * -2, 7 - a, -a, a.abs(), torch.maximum(a, b),
                torch.minimum(a, b), a / b, a * 0.5)
    a = torch.randint(-50, 50, (3, 4))
    b = torch.randint(1, 9, (4,))
    check(f, a, b, tol=EW)  # int results exact; a / b and a * 0.5 promote to float


class PositionIds(nn.Module):
    """The usual decoder prologue: position ids from arange + a past length."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(32, 6)

    def forward(self, x, past):
        seq = x.shape[1]
        ids = torch.arange(seq) + past          # int64 (B, S)
        ids2 = torch.arange(seq, dtype=torch.long).unsqueeze(0) + 2
        return ids, ids2, self.pos(ids), x + self.pos(ids)


def test_position_ids():
    check(PositionIds(), randn(2, 5, 6), torch.tensor([[0], [7]]), tol=EXACT)


# ---- comparisons, where, logical ----------------------------------------------------


def _compare(a, b):
    return a == b, a != b, a < b, a <= b, a > b, a >= b, a > 0, a <= 1, a == 2, a != 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_comparisons(dtype):
    a = torch.randint(-2, 3, (4, 5)).to(dtype)
    b = torch.randint(-2, 3, (5,)).to(dtype)
    check(_compare, a, b)


def test_compare_mixed_dtypes():
    # int tensor vs float tensor / float scalar: compare in the promoted type.
    check(lambda i, x: (i < x, i == 1.5, x > i), torch.randint(-2, 3, (6,)), randn(6))


def test_where():
    def f(c, a, b, i):
        return (torch.where(c, a, b), torch.where(a > 0, a, 0.0), torch.where(c, 1.0, b),
                torch.where(c, i, -1), torch.where(a > b, a, b.unsqueeze(0)))
    c = torch.rand(3, 4) > 0.5
    check(f, c, randn(3, 4), randn(4), torch.randint(0, 9, (3, 4)))


def test_logical():
    def f(a, b):
        return (torch.logical_and(a, b), torch.logical_or(a, b), torch.logical_not(a),
                a & b, a | b, ~a)
    check(f, torch.rand(4, 5) > 0.5, torch.rand(5) > 0.5)


def test_logical_not_of_float():
    check(lambda x: torch.logical_not(x), torch.tensor([0.0, -0.0, 1.0, float("nan"), -2.0]))


# ---- unary math -------------------------------------------------------------------


def _wide(n=200):
    """A spread of values plus the edges the polynomials must get right."""
    edges = torch.tensor([0.0, -0.0, 1e-6, -1e-6, 1e-30, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 9.0, -9.0,
                          20.0, -20.0, 50.0, -50.0, 88.0, -88.0, 100.0, -100.0])
    return torch.cat([torch.randn(n) * 4, edges])


def _pos(n=200):
    return torch.cat([torch.rand(n) * 10, torch.tensor([1e-30, 1e-6, 0.5, 1.0, 2.0, 1e6, 1e30])])


UNARY = [
    ("relu", torch.relu, _wide, EXACT),
    ("neg", torch.neg, _wide, EXACT),
    ("abs", torch.abs, _wide, EXACT),
    ("sqrt", torch.sqrt, _pos, EXACT),
    ("rsqrt", torch.rsqrt, _pos, TRANS),
    ("reciprocal", torch.reciprocal, _wide, EXACT),
    ("exp", torch.exp, _wide, TRANS),
    ("log", torch.log, _pos, TRANS),
    ("tanh", torch.tanh, _wide, TRANS),
    ("sigmoid", torch.sigmoid, _wide, TRANS),
    ("silu", F.silu, _wide, TRANS),
    ("gelu", lambda x: F.gelu(x), _wide, TRANS),
    ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), _wide, TRANS),
    ("erf", torch.erf, _wide, TRANS),
    ("sin", torch.sin, _wide, TRANS),
    ("cos", torch.cos, _wide, TRANS),
]


@pytest.mark.parametrize("name,fn,domain,tol", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, fn, domain, tol):
    x = domain()
    check(fn, x.reshape(-1, 3) if x.numel() % 3 == 0 else x, tol=tol)


def test_activation_modules():
    m = nn.Sequential(nn.GELU(approximate="tanh"), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.ReLU())
    check(m, randn(4, 33), tol=TRANS)


# ---- softmax, norms ----------------------------------------------------------------


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_softmax(dim):
    check(lambda x: (torch.softmax(x, dim), torch.log_softmax(x, dim), F.softmax(x * 3, dim=dim)),
          randn(3, 4, 37), tol=RED)


def test_softmax_long_row_large_values():
    # exp would overflow without the max subtraction.
    x = randn(2, 1000) * 50
    check(lambda x: (x.softmax(-1), x.log_softmax(-1)), x, tol=dict(rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("norm_shape", [(48,), (3, 48)])
def test_layer_norm(affine, norm_shape):
    ln = nn.LayerNorm(norm_shape, elementwise_affine=affine, eps=1e-5)
    if affine:
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
    check(ln, randn(2, 3, 48) * 3 + 1, tol=RED)


def test_layer_norm_no_bias():
    ln = nn.LayerNorm(40, bias=False)
    with torch.no_grad():
        ln.weight.normal_()
    check(ln, randn(5, 40), tol=RED)


@pytest.mark.parametrize("weight", [True, False])
def test_rms_norm(weight):
    w = torch.randn(40) if weight else None
    check(lambda x: F.rms_norm(x, (40,), w, eps=1e-6), randn(3, 5, 40), tol=RED)


def test_rms_norm_module():
    m = nn.RMSNorm(24)
    with torch.no_grad():
        m.weight.normal_()
    check(m, randn(4, 24), tol=RED)


# ---- views and data movement ---------------------------------------------------------


def test_view_reshape_flatten():
    def f(x):
        return (x.view(6, 20), x.reshape(-1), x.reshape(2, 3, 4, 5).flatten(1, 2), x.flatten(),
                x.view(2, 3, 20).flatten(-2), x.unsqueeze(0), x.unsqueeze(-1), x.unsqueeze(1),
                x.view(2, 1, 3, 1, 20).squeeze(), x.view(2, 1, 60).squeeze(1))
    check(f, randn(2, 3, 20))


@pytest.mark.parametrize("dims", [(1, 0, 2), (2, 0, 1), (0, 2, 1, 3), (-1, -2, 0, 1)])
def test_permute(dims):
    x = randn(*(2, 3, 4, 5)[:len(dims)])
    check(lambda x: (x.permute(*dims), x.permute(*dims) + 1.0), x)


def test_transpose_t():
    check(lambda x, m: (x.transpose(0, 2), x.transpose(-1, -2), x.transpose(1, 1), m.t(),
                        m.T.contiguous()), randn(2, 3, 4), randn(5, 6))


def test_expand():
    check(lambda x, y: (x.expand(3, 4, 5), x.expand(-1, 4, -1).contiguous(), y.expand(2, 3),
                        y.expand(4, 2, 3)), randn(3, 1, 5), randn(3))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(dim):
    xs = [randn(2, 3, 4) for _ in range(3)]
    check(lambda a, b, c: (torch.cat([a, b, c], dim), torch.cat([a, b], dim), torch.cat([a], dim)), *xs)


def test_cat_many_and_mixed():
    # More than the 8 inputs the IR's CAT takes; different sizes along dim;
    # int64 pieces; the legacy empty (0,) tensor that cat ignores.
    def f(*xs):
        parts = [x for x in xs[:10]]
        return (torch.cat(parts, 1), torch.cat([xs[10], xs[11]], 0), torch.cat([xs[0], xs[12]], 0))
    xs = [randn(2, i + 1) for i in range(10)] + [torch.arange(6).view(2, 3), torch.arange(3).view(1, 3),
                                                   torch.zeros(0)]
    check(f, *xs)


def test_slice():
    def f(x):
        return (x[1:3], x[:, ::2], x[:, 1::3], x[-2:], x[:, -3:-1], x[..., 1:7:2], x[:, :100],
                x[:, -100:2], x[2:2], x[:, 5:], x[::2, ::4])
    check(f, randn(4, 8, 9))


def test_select_and_index():
    def f(x):
        return x[0], x[-1], x[:, 2], x[:, -1], x[..., -2], x.select(1, 3), x[1, 2, 3]
    check(f, randn(3, 4, 5))


def test_embedding_index_select():
    emb = nn.Embedding(10, 7)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = emb

        def forward(self, ids, x, idx):
            return (self.emb(ids), torch.index_select(x, 0, idx), torch.index_select(x, 1, idx),
                    torch.index_select(x, -1, idx[:2]), x[idx])
    check(M(), torch.tensor([[1, 9, 0], [3, 3, 2]]), randn(4, 5, 6), torch.tensor([3, 0, 1, 3]))


def test_embedding_out_of_range_is_an_error():
    emb = nn.Embedding(10, 4)
    compiled = kiln.trace(emb, (torch.tensor([1, 2]),))
    with pytest.raises(kiln.KilnError, match="out of range"):
        compiled(torch.tensor([1, 10]))


# ---- reductions --------------------------------------------------------------------


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dims", [-1, 0, (0, 2), (1, -1), (0, 1, 2)])
def test_reductions(dims, keepdim):
    def f(x):
        return (x.sum(dims, keepdim=keepdim), x.mean(dims, keepdim=keepdim),
                x.amax(dims, keepdim=keepdim), x.amin(dims, keepdim=keepdim))
    check(f, randn(3, 4, 50), tol=RED)


def test_reductions_whole_tensor():
    check(lambda x, i, b: (x.sum(), x.mean(), x.amax(), i.sum(), b.sum(), i.sum(-1), b.any(), b.any(0),
                           torch.max(x), torch.min(x), x.max(-1).values),
          randn(4, 33), torch.randint(-99, 99, (4, 7)), torch.rand(4, 7) > 0.5, tol=RED)


@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False), (None, False)])
def test_argmax(dim, keepdim):
    x = torch.randint(0, 5, (3, 4, 6)).float()  # ties: the first index wins, as torch
    check(lambda x, i: (torch.argmax(x, dim, keepdim=keepdim), torch.argmax(i, dim, keepdim=keepdim)),
          x, torch.randint(-5, 5, (3, 4, 6)))


# ---- attention -----------------------------------------------------------------------


def _qkv(b=2, h=3, sq=5, skv=5, d=16, hkv=None, dv=None):
    return randn(b, h, sq, d), randn(b, hkv or h, skv, d), randn(b, hkv or h, skv, dv or d)


SDPA = {
    "plain": (dict(), {}),
    "causal": (dict(is_causal=True), {}),
    "causal_sq_lt_skv": (dict(is_causal=True), dict(sq=3, skv=7)),
    "scale": (dict(scale=0.3), {}),
    "dv": (dict(), dict(dv=8, skv=9)),
    "long_kv": (dict(), dict(sq=2, skv=300)),
}


@pytest.mark.parametrize("case", list(SDPA))
def test_sdpa(case):
    kw, shapes = SDPA[case]
    q, k, v = _qkv(**shapes)
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), q, k, v, tol=gemm(64))


@pytest.mark.parametrize("mask_shape", [(5, 5), (2, 1, 5, 5), (2, 3, 5, 5)])
def test_sdpa_float_mask(mask_shape):
    q, k, v = _qkv()
    mask = randn(*mask_shape)
    mask[..., 1] = float("-inf")  # a dropped key in every row
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask,
          tol=gemm(64))


def test_sdpa_bool_mask():
    q, k, v = _qkv()
    mask = torch.rand(5, 5) > 0.4
    mask[:, 0] = True  # no fully masked row (torch gives NaN there, by design)
    check(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, mask,
          tol=gemm(64))


def test_sdpa_gqa():
    q, k, v = _qkv(h=6, hkv=2)
    check(lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                           F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
          q, k, v, tol=gemm(64))


def test_sdpa_3d():
    q, k, v = randn(2, 5, 8), randn(2, 6, 8), randn(2, 6, 8)
    check(lambda q, k, v, m: (F.scaled_dot_product_attention(q, k, v),
                              F.scaled_dot_product_attention(q, k, v, attn_mask=m)),
          q, k, v, randn(2, 5, 6), tol=gemm(64))


class TinyAttention(nn.Module):
    """The attention block as models write it: projections, head split, SDPA."""

    def __init__(self, d=32, h=4):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


def test_attention_block():
    check(TinyAttention(), randn(2, 7, 32), tol=gemm(96))


# ---- dtype casts ---------------------------------------------------------------------


def test_casts():
    def f(x, i, b):
        return (x.long(), x.int(), x.to(torch.bool), i.float(), i.to(torch.bool), b.float(), b.long(),
                x.to(torch.float32), (x > 0).to(x.dtype), i.to(torch.int32).to(torch.int64))
    x = torch.tensor([0.0, -0.0, 0.4, -0.4, 1.5, -1.5, 2.9, -2.9, 1e6, -7.0, 0.5, 3.0])
    check(f, x, torch.tensor([-3, 0, 1, 2, 0, 5, 9, -1, 0, 4, 2, 1]), x > 0)


def test_half_casts():
    # fp16 / bf16 round to nearest even, as torch.
    x = randn(64) * 100
    check(lambda x: (x.half(), x.bfloat16(), x.half().float(), x.bfloat16().float()), x)


# ---- NaN / Inf ------------------------------------------------------------------------


def test_nan_inf_propagation():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([nan, inf, -inf, 0.0, 1.0, -1.0, nan, 2.0])
    y = torch.tensor([1.0, 1.0, 1.0, nan, inf, -inf, nan, -inf])

    def f(x, y):
        return (x + y, x * y, x - y, x / y, torch.relu(x), torch.exp(x), torch.tanh(x), torch.sigmoid(x),
                torch.maximum(x, y), torch.minimum(x, y), x > y, x == x, torch.where(x > 0, x, y),
                F.gelu(x), F.silu(x), torch.log(x), torch.sqrt(x), torch.erf(x), x.abs(), -x)
    check(f, x, y, tol=TRANS, equal_nan=True)


def test_nan_inf_reductions():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, 0.0], [1.0, 2.0, inf, -inf], [-inf, -inf, 0.0, 1.0],
                      [1.0, 5.0, 2.0, 5.0]])
    check(lambda x: (x.sum(-1), x.amax(-1), x.amin(-1), x.argmax(-1), x.softmax(-1), x.mean(0),
                     F.layer_norm(x, (4,))),
          x, tol=RED, equal_nan=True)


def test_softmax_fully_masked_row():
    # A row of -inf: torch gives NaN for the whole row.
    x = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, 2.0]])
    check(lambda x: (x.softmax(-1), x.log_softmax(-1)), x, tol=RED, equal_nan=True)


# ---- zero-size dimensions ----------------------------------------------------------------
# Every case gives torch's result (recorded: kiln handles each of these; none
# raises).

ZERO = {
    "add": (lambda a, b: a + b * 2, (randn(0, 4), randn(4))),
    "unary": (lambda a: (torch.exp(a), F.gelu(a), a.abs()), (randn(3, 0),)),
    "sum_over_empty": (lambda a: (a.sum(0), a.amax(1), a.mean(1), a.sum()), (randn(0, 4),)),
    "mean_over_empty": (lambda a: a.mean(0), (randn(0, 4),)),  # NaN, as torch
    "softmax": (lambda a: (a.softmax(-1), a.softmax(0)), (randn(0, 4),)),
    "layer_norm": (lambda a: F.layer_norm(a, (4,)), (randn(0, 4),)),
    "cat": (lambda a, b: torch.cat([a, b], 0), (randn(0, 4), randn(2, 4))),
    "linear": (nn.Linear(4, 3), (randn(0, 4),)),
    "matmul_k0": (lambda a, b: a @ b, (randn(2, 0), randn(0, 3))),
    "slice_empty": (lambda a: a[:, 3:3] + 1, (randn(2, 4),)),
    "sdpa_q0": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                (randn(1, 2, 0, 8), randn(1, 2, 5, 8), randn(1, 2, 5, 8))),
    "embedding": (nn.Embedding(5, 3), (torch.zeros(2, 0, dtype=torch.long),)),
}


@pytest.mark.parametrize("case", list(ZERO))
def test_zero_size(case):
    fn, args = ZERO[case]
    check(fn, *args, tol=RED, equal_nan=True)


# ---- with the ISA capped to the generic (scalar C) kernels -----------------------------------


@pytest.fixture
def generic_isa():
    before = kiln.isa()
    kiln.isa("generic")
    assert kiln.isa() == "generic"
    try:
        yield
    finally:
        kiln.isa("avx512")  # caps at what this CPU has
        assert kiln.isa() == before


GENERIC = {
    "linear": (nn.Linear(40, 24), (randn(5, 40),), gemm(40)),
    "matmul": (lambda a, b: a @ b, (randn(2, 6, 33), randn(33, 9)), gemm(33)),
    "softmax": (lambda x: (x.softmax(-1), x.log_softmax(-1), x.softmax(0)), (randn(4, 37),), RED),
    "gelu": (lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), torch.exp(x), torch.tanh(x)),
             (_wide(),), TRANS),
    "layer_norm": (nn.LayerNorm(37), (randn(3, 37),), RED),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), _qkv(), gemm(64)),
}


@pytest.mark.parametrize("case", list(GENERIC))
def test_generic_isa(case, generic_isa):
    fn, args, tol = GENERIC[case]
    check(fn, *args, tol=tol)
