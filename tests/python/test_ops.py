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
          IEEE-exact float ops (add/sub/mul/div/max/min/neg/abs, casts):
          bit-for-bit.
  EW      fp32 elementwise chains (a scalar multiply folded in, a**0.5, ...):
          1e-6 rel / 1e-6 abs, a couple of ulp.
  TRANS   transcendental functions (exp, log, tanh, erf, sigmoid, silu, sin,
          cos, rsqrt, pow): judged against the op evaluated in float64 and
          rounded to float32 (check_f64, conftest.assert_close_f64), not
          against eager float32, whose error depends on the CPU torch runs on.
          kiln's polynomials are within 2.2 ulp of that on every ISA level
          (measured over 3e5 points per function: silu 2.0, sigmoid 1.8, erf
          1.5, the rest ~1): 3 ulp relative, rtol 3 * 2^-23. The absolute
          floor is the smallest normal float32, so only a subnormal result
          flushed to zero passes on it: a tail that is wrong by any
          representable amount fails.
  CR      correctly rounded ops (sqrt; relu, neg, abs, reciprocal): float64
          rounded once to float32 is the correctly rounded float32 result,
          and kiln's is too: bit for bit against float64. (This torch build's
          own float32 sqrt, MKL VML, is 1 ulp off for ~15% of inputs, so
          eager float32 could not be the reference.)
  GELU    gelu, exact and tanh forms: TRANS, with an absolute floor of 1e-15
          for the float64 reference's own error: torch computes it as
          x/2 (1 + erf(x/sqrt2)) (or 1 + tanh(...)), which for x < 0 cancels
          to an absolute error of about |x|/2 * 2^-53 (~5e-16 at most on
          these inputs), and is exactly 0 below x ~ -8.3, where the true value
          is below 3e-16. kiln's erfc form does not cancel. (Eager float32
          cancels in float32: on an AVX-512 Xeon gelu(-6) = -0.0 where the
          truth is -5.9e-9, its relative error is 1e-3 near x = -4, and
          gelu(inf) is NaN.)
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
from conftest import Fn, assert_close_f64, ulps

EXACT = dict(rtol=0.0, atol=0.0)
EW = dict(rtol=1e-6, atol=1e-6)
RED = dict(rtol=1e-5, atol=1e-6)
# Against float64 (check_f64): see the docstring.
TRANS = ulps(3)
CR = ulps(0, atol=0.0)
GELU = ulps(3, atol=1e-15)


def gemm(k):
    return dict(rtol=max(1e-6 * k, 1e-5), atol=max(1e-6 * k, 1e-5))


def run(model, *inputs):
    """(kiln's outputs, eager's outputs) for `model` on `inputs`."""
    if not isinstance(model, nn.Module):
        model = Fn(model)
    compiled = kiln.trace(model, inputs, fallback=False)  # an unsupported op must raise, not run in eager
    with torch.no_grad():
        want = model(*inputs)
    got = compiled(*inputs)
    return got, want


def check(model, *inputs, tol=EXACT, equal_nan=False):
    got, want = run(model, *inputs)
    assert_close(got, want, equal_nan=equal_nan, **tol)
    return got


def check_f64(model, *inputs, tol):
    """kiln's float32 outputs against the model evaluated in float64 (and its
    int/bool outputs against eager's, exactly); NaN must match NaN."""
    if not isinstance(model, nn.Module):
        model = Fn(model)
    compiled = kiln.trace(model, inputs, fallback=False)
    got = compiled(*inputs)
    assert_close_f64(got, model, inputs, tol)
    return got


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def randn(*shape):
    return torch.randn(shape)


# ---- matrix products ----------------------------------------------------------------


class Linears(nn.Module):
    """With and without bias, and K = 257: a tail after every SIMD/K-block width."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(24, 13)
        self.b = nn.Linear(24, 13, bias=False)
        self.c = nn.Linear(257, 33)

    def forward(self, x, y):
        return self.a(x), self.b(x), self.c(y)


@pytest.mark.parametrize("lead", [(4,), (2, 5), (2, 1, 3)], ids=["2d", "3d", "4d"])
def test_linear(lead):
    check(Linears(), randn(*lead, 24), randn(*lead, 257), tol=gemm(257))


def test_linear_stack():
    # Two Linears with an activation between: the GEMM-epilogue fusion path.
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.ReLU(), nn.Linear(8, 8))
    check(m, randn(3, 16), tol=gemm(32))


def test_addmm_mm_bmm():
    def f(b, x, w, c, d):
        return (torch.addmm(b, x, w), torch.addmm(b, x, w, alpha=2.0, beta=0.5),
                torch.addmm(b, x, w, beta=0), torch.mm(x, w), torch.bmm(c, d))
    check(f, randn(7), randn(3, 9), randn(9, 7), randn(3, 5, 9), randn(3, 9, 2), tol=gemm(9))


def test_addmm_family_with_beta_zero_ignores_the_input():
    """beta = 0: torch ignores the input, NaN and inf included (kiln's addmm
    multiplied it by 0, giving NaN); addmv and addbmm as matrix products."""
    nan = torch.full((3, 7), float("nan"))
    inf = torch.full((3,), float("inf"))

    def f(b, x, w, v, c, d, e):
        return (torch.addmm(nan, x, w, beta=0), torch.addmm(nan, x, w, beta=0, alpha=-2.0),
                torch.addmv(inf, x, v, beta=0), torch.addmv(c, x, v, alpha=0.5, beta=2.0),
                torch.addbmm(b, d, e), torch.addbmm(nan, d, e, beta=0, alpha=3.0))
    check(f, randn(7), randn(3, 9), randn(9, 7), randn(9), randn(3), randn(4, 3, 9), randn(4, 9, 7),
          tol=gemm(36))


def test_fmax_fmin_dist_narrow_copy():
    """fmax / fmin take the number where one side is NaN; dist is the p-norm
    of a - b; narrow_copy counts a negative start from the end."""
    a, b = randn(4, 5), randn(5)
    a[0, 0] = a[1, 1] = float("nan")
    b[1] = b[2] = float("nan")

    def f(a, b):
        return (torch.fmax(a, b), torch.fmin(a, b), torch.fmax(a.int(), b.nan_to_num().int()),
                torch.narrow_copy(a, 1, -3, 2), torch.narrow_copy(b, 0, 1, 3))
    check(f, a, b, equal_nan=True)

    def g(a, b):
        return torch.dist(a, b), torch.dist(a, b, 1), torch.dist(a, b, float("inf")), torch.dist(a, b, 3.5)
    check(g, randn(4, 5), randn(5), tol=RED)


def test_exp2_and_logaddexp2():
    """2^x over float32's whole exponent range (subnormal results included)
    against float64, and logaddexp2 (torch composes it of exp2 and log2)."""
    x = torch.cat([torch.rand(4000) * 280 - 150, randn(100)])
    check_f64(lambda x, y: (torch.exp2(x), torch.logaddexp2(x, y)), x, x.flip(0), tol=TRANS)


MATMUL = {
    "broadcast": [
        ((2, 3, 4, 16), (16, 5)),        # batched @ matrix (b broadcast over the batch)
        ((4, 16), (2, 16, 5)),           # matrix @ batched (a broadcast)
        ((2, 1, 4, 16), (1, 3, 16, 5)),  # both broadcast
        ((3, 4, 130), (3, 130, 6)),      # K past a block boundary
    ],
    "vector": [
        ((16,), (16, 5)),                # 1-d @ 2-d
        ((2, 3, 16), (16,)),             # 3-d @ 1-d
        ((16,), (16,)),                  # dot product: 0-d result
    ],
}


@pytest.mark.parametrize("case", list(MATMUL))
def test_matmul(case):
    shapes = MATMUL[case]
    args = [randn(*s) for pair in shapes for s in pair]
    check(lambda *xs: tuple(torch.matmul(xs[i], xs[i + 1]) for i in range(0, len(xs), 2)), *args,
          tol=gemm(130))


# ---- binary elementwise ---------------------------------------------------------------


def _arith(a, b):
    return a + b, a - b, a * b, a / b, torch.maximum(a, b), torch.minimum(a, b)


@pytest.mark.parametrize("shapes", [
    [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1))],
    [((), (2, 3)), ((5, 1, 1, 3), (1, 4, 2, 1)), ((3, 1), ())],
], ids=["same_trailing_outer", "scalar_4d"])
def test_binary_broadcast(shapes):
    args = [randn(*s) + 0.1 for pair in shapes for s in pair]
    check(lambda *xs: tuple(r for i in range(0, len(xs), 2) for r in _arith(xs[i], xs[i + 1])), *args)


def test_binary_python_scalars():
    def f(a, b):
        return (a + 2.5, 2.5 - a, a * -3, a / 7, 3 / a, a - 1, 1 + a,
                torch.add(a, b, alpha=2), torch.sub(a, b, alpha=0.5), torch.rsub(a, b, alpha=3))
    # alpha multiplies before adding: one extra rounding vs torch's fused a + alpha*b.
    check(f, randn(3, 4), randn(3, 4), tol=EW)


def test_pow():
    def f(a, p, b):
        return a ** 2, a ** 3, p ** 0.5, p ** -1.5, torch.pow(p, b), p ** b
    check_f64(f, randn(4, 5), torch.rand(4, 5) + 0.1, randn(5), tol=TRANS)


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


def test_comparisons():
    # float, int64, and mixed (int vs float tensor / scalar: compared in the promoted type).
    a, b = torch.randint(-2, 3, (4, 5)), torch.randint(-2, 3, (5,))
    check(lambda fa, fb, ia, ib, x: _compare(fa, fb) + _compare(ia, ib) + (ia < x, ia == 1.5, x > ia),
          a.float(), b.float(), a, b, randn(5))


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


# Grouped by domain and tolerance: one trace per group.
UNARY = {
    "exact": ([torch.relu, torch.neg, torch.abs, torch.reciprocal], _wide, CR),
    "sqrt": ([torch.sqrt], _pos, CR),
    "positive": ([torch.rsqrt, torch.log], _pos, TRANS),
    "exp_tanh_sigmoid_silu": ([torch.exp, torch.tanh, torch.sigmoid, F.silu], _wide, TRANS),
    "erf_sin_cos": ([torch.erf, torch.sin, torch.cos], _wide, TRANS),
    "gelu": ([F.gelu, lambda x: F.gelu(x, approximate="tanh")], _wide, GELU),
}


@pytest.mark.parametrize("group", list(UNARY))
def test_unary(group):
    fns, domain, tol = UNARY[group]
    x = domain()
    check_f64(lambda x: tuple(f(x) for f in fns), x.reshape(-1, 3) if x.numel() % 3 == 0 else x, tol=tol)


def test_activation_modules():
    m = nn.Sequential(nn.GELU(approximate="tanh"), nn.SiLU(), nn.Tanh(), nn.Sigmoid(), nn.ReLU())
    # Chains, against the whole chain in float64: each stage adds its own
    # error (<= 2.2 ulp) to the previous stage's times its condition number
    # |x f'(x) / f(x)|, which is <= 1 for silu, tanh, sigmoid and relu on
    # these inputs: 1 ulp more than one function (measured: 1.0 and 2.6 ulp
    # over 1.3e5 inputs).
    check_f64(m, randn(4, 33), tol=ulps(4))
    check_f64(nn.Sequential(nn.GELU(), nn.Tanh()), randn(4, 33), tol=ulps(4, atol=GELU["atol"]))


# ---- softmax, norms ----------------------------------------------------------------


def test_softmax():
    # Last dim (the row kernel) and non-last dims (the strided kernel).
    check(lambda x: tuple(f(x * s, d) for d in (-1, 1, 0) for f in (torch.softmax, torch.log_softmax)
                          for s in (1, 3)),
          randn(3, 4, 37), tol=RED)


def test_softmax_long_row_large_values():
    # exp would overflow without the max subtraction.
    x = randn(2, 1000) * 50
    check(lambda x: (x.softmax(-1), x.log_softmax(-1)), x, tol=dict(rtol=1e-5, atol=1e-5))


class Norms(nn.Module):
    def __init__(self, norm_shape):
        super().__init__()
        self.affine = nn.LayerNorm(norm_shape, eps=1e-5)
        self.plain = nn.LayerNorm(norm_shape, elementwise_affine=False)
        self.no_bias = nn.LayerNorm(norm_shape, bias=False, eps=1e-3)
        self.rms = nn.RMSNorm(norm_shape)
        self.rms_plain = nn.RMSNorm(norm_shape, elementwise_affine=False, eps=1e-6)
        with torch.no_grad():
            for p in self.parameters():
                p.normal_()

    def forward(self, x):
        return (self.affine(x), self.plain(x), self.no_bias(x), self.rms(x), self.rms_plain(x),
                F.rms_norm(x, x.shape[-1:], eps=None))


@pytest.mark.parametrize("norm_shape", [(48,), (3, 48)], ids=["last", "last2"])
def test_layer_rms_norm(norm_shape):
    check(Norms(norm_shape), randn(2, 3, 48) * 3 + 1, tol=RED)


def test_layer_norm_of_equal_values_is_its_bias():
    """A row of equal values has no variance: torch's Welford mean is exact
    for it and layer_norm gives beta exactly, where a mean off by its
    rounding gave noise times 1/sqrt(eps) (~300x the rounding; fuzzer
    finding 16). Rows of 3 to 100 values, at magnitudes whose sums round."""
    for n in (3, 7, 17, 100):
        x = (torch.randn(64, 1) * 10 ** torch.randint(-3, 4, (64, 1))).expand(64, n).contiguous()
        norm = nn.LayerNorm(n)
        with torch.no_grad():
            norm.weight.normal_(), norm.bias.normal_()
        got = kiln.trace(norm.eval(), (x,))(x)
        torch.testing.assert_close(got, norm.bias.detach().expand(64, n), rtol=0, atol=0)


# ---- views and data movement ---------------------------------------------------------


def test_view_reshape_flatten():
    def f(x):
        return (x.view(6, 20), x.reshape(-1), x.reshape(2, 3, 4, 5).flatten(1, 2), x.flatten(),
                x.view(2, 3, 20).flatten(-2), x.unsqueeze(0), x.unsqueeze(-1), x.unsqueeze(1),
                x.view(2, 1, 3, 1, 20).squeeze(), x.view(2, 1, 60).squeeze(1))
    check(f, randn(2, 3, 20))


def test_permute():
    dims = [(1, 0, 2, 3), (2, 0, 1, 3), (0, 2, 1, 3), (-1, -2, 0, 1), (3, 2, 1, 0)]
    check(lambda x, y: tuple(x.permute(*d) for d in dims) + (y.permute(2, 0, 1) + 1.0,),
          randn(2, 3, 4, 5), randn(2, 3, 4))


def test_transpose_t():
    check(lambda x, m: (x.transpose(0, 2), x.transpose(-1, -2), x.transpose(1, 1), m.t(),
                        m.T.contiguous()), randn(2, 3, 4), randn(5, 6))


def test_expand():
    check(lambda x, y: (x.expand(3, 4, 5), x.expand(-1, 4, -1).contiguous(), y.expand(2, 3),
                        y.expand(4, 2, 3)), randn(3, 1, 5), randn(3))


def test_cat():
    xs = [randn(2, 3, 4) for _ in range(3)]
    check(lambda a, b, c: tuple(torch.cat(ys, dim) for dim in (0, 1, -1) for ys in ([a, b, c], [a, b], [a])),
          *xs)


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
                    torch.index_select(x, -1, idx[:2]), x[idx], x[:, idx], x[..., idx[:2]], x[idx.view(2, 2)])
    check(M(), torch.tensor([[1, 9, 0], [3, 3, 2]]), randn(4, 5, 6), torch.tensor([3, 0, 1, 3]))


def test_embedding_out_of_range_is_an_error():
    emb = nn.Embedding(10, 4)
    compiled = kiln.trace(emb, (torch.tensor([1, 2]),), fallback=False)
    # The run-time check raises ValueError (kiln's type for bad input data).
    with pytest.raises(ValueError, match="out of range"):
        compiled(torch.tensor([1, 10]))


# ---- reductions --------------------------------------------------------------------


@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions(keepdim):
    def f(x):
        return tuple(r(x, dims, keepdim=keepdim) for dims in (-1, 0, (0, 2), (1, -1), (0, 1, 2))
                     for r in (torch.sum, torch.mean, torch.amax, torch.amin))
    check(f, randn(3, 4, 50), tol=RED)


def test_reductions_whole_tensor():
    check(lambda x, i, b: (x.sum(), x.mean(), x.amax(), i.sum(), b.sum(), i.sum(-1), b.any(), b.any(0),
                           torch.max(x), torch.min(i), i.amax(0), i.amin(-1, keepdim=True)),
          randn(4, 33), torch.randint(-99, 99, (4, 7)), torch.rand(4, 7) > 0.5, tol=RED)


def test_max_min_dim():
    # (values, indices); ties and the minimum's index via argmax(-x): first wins.
    def f(x, i):
        return (x.max(-1), x.min(0, keepdim=True), i.max(1), i.min(-1), torch.argmin(x, 1),
                torch.argmin(i), torch.argmin(x, 0, keepdim=True))
    check(f, torch.randint(0, 4, (3, 6)).float(), torch.randint(-3, 3, (3, 6)))


def test_argmax():
    x = torch.randint(0, 5, (3, 4, 6)).float()  # ties: the first index wins, as torch
    cases = [(-1, False), (0, True), (1, False), (None, False), (None, True)]
    check(lambda x, i: tuple(torch.argmax(t, d, keepdim=k) for d, k in cases for t in (x, i)),
          x, torch.randint(-5, 5, (3, 4, 6)))


# ---- attention -----------------------------------------------------------------------


def _qkv(b=2, h=3, sq=5, skv=5, d=16, hkv=None, dv=None):
    return randn(b, h, sq, d), randn(b, hkv or h, skv, d), randn(b, hkv or h, skv, dv or d)


SDPA = {
    "square": [dict(), dict(is_causal=True), dict(scale=0.3)],
    "causal_sq_lt_skv": [dict(is_causal=True), dict()],
    "dv_long_kv": [dict(), dict(is_causal=True)],
}
SDPA_SHAPES = {"square": {}, "causal_sq_lt_skv": dict(sq=3, skv=7), "dv_long_kv": dict(sq=2, skv=300, dv=8)}


@pytest.mark.parametrize("case", list(SDPA))
def test_sdpa(case):
    q, k, v = _qkv(**SDPA_SHAPES[case])
    check(lambda q, k, v: tuple(F.scaled_dot_product_attention(q, k, v, **kw) for kw in SDPA[case]),
          q, k, v, tol=gemm(64))


def test_sdpa_float_mask():
    q, k, v = _qkv()
    masks = [randn(5, 5), randn(2, 1, 5, 5), randn(2, 3, 5, 5), randn(2, 1, 1, 5)]
    for m in masks:
        m[..., 1] = float("-inf")  # a dropped key in every row
    check(lambda q, k, v, *ms: tuple(F.scaled_dot_product_attention(q, k, v, attn_mask=m) for m in ms),
          q, k, v, *masks, tol=gemm(64))


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
    # Against float64: eager float32's gelu(inf) is NaN on an AVX-512 Xeon;
    # the answer (float64's, and kiln's) is inf.
    check_f64(f, x, y, tol=GELU)


def test_nan_inf_reductions():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, 0.0], [1.0, 2.0, inf, -inf], [-inf, -inf, 0.0, 1.0],
                      [1.0, 5.0, 2.0, 5.0]])
    check(lambda x: (x.sum(-1), x.amax(-1), x.amin(-1), x.argmax(-1), x.softmax(-1), x.mean(0),
                     F.layer_norm(x, (4,)), x.max(-1), x.min(-1), x.argmin(-1)),
          x, tol=RED, equal_nan=True)


def test_sums_of_negative_zeros_are_positive_zero():
    # torch's sums start from +0.0, so a sum of -0.0s is +0.0 over any axes;
    # kiln's leading-axes sum started from the first row and kept -0.0 (the
    # fuzzer saw it as atan2(mean(x, 0), y) = -pi against eager's pi).
    x = torch.full((3, 4), -0.0)

    def f(x):
        return x.sum(0), x.mean(0), x.sum(1), x.sum(), x[:1].sum(0), torch.atan2(x.mean(0), -torch.ones(4))

    got, want = run(f, x)
    for g, w in zip(got, want):
        assert torch.equal(g, w) and torch.equal(torch.signbit(g), torch.signbit(w)), (g, w)


def test_softmax_fully_masked_row():
    # A row of -inf: torch gives NaN for the whole row.
    x = torch.tensor([[float("-inf")] * 4, [0.0, float("-inf"), 1.0, 2.0]])
    check(lambda x: (x.softmax(-1), x.log_softmax(-1)), x, tol=RED, equal_nan=True)


# ---- zero-size dimensions ----------------------------------------------------------------
# Every case gives torch's result (recorded: kiln handles each of these, none
# raises a KilnError).

class ZeroLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.emb = nn.Embedding(5, 3)

    def forward(self, x, a, b, ids):
        return self.lin(x), a @ b, self.emb(ids)


ZERO = {
    "eltwise": (lambda a, b, c: (a + b * 2, torch.exp(c), F.gelu(c), c.abs(), a[:, 3:3] + 1,
                                 torch.cat([a, b.expand(2, 4)], 0)),
                (randn(0, 4), randn(4), randn(3, 0))),
    # sum over an empty dim is 0, amax over an empty result is empty, the mean
    # of nothing is NaN: all as torch.
    "reduce_norm": (lambda a: (a.sum(0), a.amax(1), a.mean(1), a.sum(), a.mean(0), a.softmax(-1),
                               a.softmax(0), F.layer_norm(a, (4,))),
                    (randn(0, 4),)),
    "gemm_gather": (ZeroLinear(), (randn(0, 4), randn(2, 0), randn(0, 3), torch.zeros(2, 0, dtype=torch.long))),
    # torch.gather takes an empty index of any integer dtype and rank, and a
    # 0-d input with a 0-d or (1,) index (OpInfo gather samples 3-6).
    "gather_edges": (lambda x, s, i1, i0: (torch.gather(x, 0, torch.zeros(2, 0, dtype=torch.uint8)),
                                           torch.gather(s, 0, i1), torch.gather(s, 0, i0)),
                     (randn(5), torch.tensor(1.5), torch.zeros(1, dtype=torch.long),
                      torch.zeros((), dtype=torch.long))),
    "sdpa_q0": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                (randn(1, 2, 0, 8), randn(1, 2, 5, 8), randn(1, 2, 5, 8))),
}


@pytest.mark.parametrize("case", list(ZERO))
def test_zero_size(case):
    fn, args = ZERO[case]
    check(fn, *args, tol=RED, equal_nan=True)


# ---- with the ISA capped to the generic (scalar C) kernels -----------------------------------


@pytest.fixture
def generic_isa():
    # Generic runs on every CPU; the fixture puts back the level the test
    # started at (conftest.isa_level).
    before = kiln.isa()
    kiln.isa("generic")
    try:
        assert kiln.isa() == "generic"
        yield
    finally:
        kiln.isa(before)
        assert kiln.isa() == before


class GenericMix(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(40, 24)
        self.ln = nn.LayerNorm(40)

    def forward(self, x, a, b):
        return (self.lin(x), a @ b, x.softmax(-1), x.log_softmax(-1), x.softmax(0), self.ln(x),
                F.rms_norm(x, (40,)))


GENERIC = {
    "linear_matmul_softmax_norm": (GenericMix(), (randn(5, 40), randn(2, 6, 33), randn(33, 9)), gemm(40)),
    # Transcendentals: against float64 (GELU: TRANS plus the float64 gelu's
    # own cancellation floor), as test_unary.
    "gelu_exp_tanh": (lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), torch.exp(x), torch.tanh(x),
                                 torch.sigmoid(x), F.silu(x), torch.erf(x)),
                      (_wide(),), GELU),
    "sdpa": (lambda q, k, v: (F.scaled_dot_product_attention(q, k, v, is_causal=True),
                              F.scaled_dot_product_attention(q, k, v)), _qkv(), gemm(64)),
}


@pytest.mark.parametrize("case", list(GENERIC))
def test_generic_isa(case, generic_isa):
    fn, args, tol = GENERIC[case]
    if case == "gelu_exp_tanh":
        check_f64(fn, *args, tol=tol)
    else:
        check(fn, *args, tol=tol)
