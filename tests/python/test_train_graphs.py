"""What a compiled training step runs, not only what it computes: the graphs
kiln compiles for a transformer layer's forward and backward stay free of
the patterns that cost time outside the GEMMs (issue 6).

- attention's math formulation takes aten._safe_softmax: one SOFTMAX with
  its safe flag, not eq(-inf) / logical_not / any / where over the scores;
- nn.MultiheadAttention's head split (permute, select, reshape, permute,
  transpose) is one strided copy per q, k and v, not three or four;
- gelu's backward is one GELU_BACKWARD, not erf, exp and nine more ops;
- layer_norm's input gradient is one LAYER_NORM_BACKWARD;
- the forward's bias and residual adds run in the GEMMs' epilogues.

Tolerances: gradients rtol 1e-4 / atol 1e-5, as the other training tests —
the math formulation sums the softmax and the matmuls in another order than
eager's fused flash attention; copies are exact.
"""
import copy
import random
import warnings

import pytest
import torch

import kiln
from kiln.module import KilnModule


@pytest.fixture
def compiled_plans(monkeypatch):
    """The kiln.explain text of every KilnModule run, in first-run order."""
    seen = {}
    orig = KilnModule.run_flat

    def run_flat(self, args):
        if id(self) not in seen:
            seen[id(self)] = self.explain()
        return orig(self, args)

    monkeypatch.setattr(KilnModule, "run_flat", run_flat)
    return seen


def _ops(plan):
    ops = []
    for line in plan.splitlines():
        if "= " in line and "(" in line and not line.strip().startswith("input"):
            ops.append(line.split("= ", 1)[1].split("(", 1)[0].strip())
    return ops


class Encoder(torch.nn.Module):
    """The bench's train_transformer model in small: pre-norm encoder layers
    with GELU, batch first, and a regression head."""

    def __init__(self, d=32, heads=4, layers=2, ff=64):
        super().__init__()
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.enc = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, d)

    def forward(self, x, target, mask=None):
        return torch.nn.functional.mse_loss(self.head(self.enc(x, mask=mask)), target)


def _step(model, x, target, mask=None):
    loss = model(x, target, mask)
    loss.backward()
    return loss.detach()


def _compare_grads(model, ref, got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def test_transformer_training_graphs_are_lean(compiled_plans):
    torch.manual_seed(0)
    layers = 2
    model = Encoder(layers=layers)
    ref = copy.deepcopy(model)
    x, target = torch.randn(3, 10, 32), torch.randn(3, 10, 32)
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = _step(torch.compile(model, backend="kiln"), x, target)
    assert not [str(m.message) for m in w if "kiln" in str(m.message)]
    _compare_grads(model, ref, got, _step(ref, x, target))

    plans = list(compiled_plans.values())
    assert len(plans) == 2, "one forward and one backward graph"
    fwd, bwd = (_ops(p) for p in plans)
    # _safe_softmax's decomposition would leave these over the scores.
    for op in ("any", "eq", "logical_not", "where"):
        assert op not in fwd + bwd, f"{op} in the compiled training graphs"
    assert fwd.count("softmax") == layers
    assert bwd.count("gelu_backward") == layers and "erf" not in bwd
    # Two norms per layer; the first layer's first needs no input gradient
    # (x does not require grad), only its weight and bias gradients.
    assert bwd.count("layer_norm_backward") == 2 * layers - 1
    # Per layer in the forward: the layer norm's output to (S, B, E), q, k
    # and v, k transposed after its scale, the heads merged, and the output
    # projection back to (B, S, E): 7 copies (14 before views composed).
    assert fwd.count("strided_copy") <= 7 * layers, fwd.count("strided_copy")
    # The weights are graph inputs, yet every Linear's bias add is in its
    # GEMM's epilogue (and linear2's residual add too): q/k/v, out_proj,
    # linear1 and linear2 per layer and the head are LINEARs, and only the
    # attention residual adds remain.
    assert fwd.count("linear") == 4 * layers + 1, fwd.count("linear")
    assert fwd.count("add") <= layers, fwd.count("add")


class GeluGrad(torch.nn.Module):
    def __init__(self, approximate):
        super().__init__()
        self.approximate = approximate

    def forward(self, dy, x):
        return torch.ops.aten.gelu_backward(dy, x, approximate=self.approximate)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_matches_eager(approximate):
    """The kernel against eager's gelu_backward, with the special values:
    NaN and +-inf give NaN (inf * 0 in eager's formula too), 0 and -0,
    tails where the density underflows, and a tail length of every kind.
    Tolerance: a few float32 ulp of the two terms the gradient sums (the
    CDF, at most 1, and x times the density) times |dy|, so atol 2e-6 at
    |dy| <= 3; rtol 2e-5 for the tails."""
    torch.manual_seed(0)
    x = torch.randn(7, 131) * 4
    x[0, :9] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 12.0, -12.0,
                             1e-30, -0.7517916])
    dy = torch.randn(7, 131)
    module = GeluGrad(approximate)
    k = kiln.trace(module, (dy, x))
    assert "gelu_backward" in k.explain()
    torch.testing.assert_close(k(dy, x), module(dy, x), rtol=2e-5, atol=2e-6, equal_nan=True)


class LayerNormGrad(torch.nn.Module):
    def __init__(self, mask, affine):
        super().__init__()
        self.mask, self.affine = mask, affine

    def forward(self, dy, x, mean, rstd, weight, bias):
        w, b = (weight, bias) if self.affine else (None, None)
        return torch.ops.aten.native_layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, w, b,
                                                          self.mask)


@pytest.mark.parametrize("mask,affine", [([True, True, True], True), ([True, True, False], True),
                                         ([True, False, False], False)])
def test_layer_norm_backward_matches_eager(mask, affine):
    """The input gradient (kernel) and the weight and bias gradients (plain
    sums) against eager, with a row-length tail (33) and rows far from zero
    mean. Tolerance: float32 row sums of 33 terms, 1e-5."""
    torch.manual_seed(0)
    x = torch.randn(4, 7, 33) * 3 + 1
    dy, w, b = torch.randn(4, 7, 33), torch.randn(33), torch.randn(33)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [33], w, b, 1e-5)
    module, args = LayerNormGrad(mask, affine), (dy, x, mean, rstd, w, b)
    k = kiln.trace(module, args)
    assert "layer_norm_backward" in k.explain()
    for got, want in zip(k(*args), module(*args)):
        assert (got is None) == (want is None)
        if want is not None:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class MaskedAttention(torch.nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x, target, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = self.out(a.transpose(1, 2).reshape(b, s, d))
        return torch.nn.functional.mse_loss(y, target)


@pytest.mark.parametrize("masked", ["row", "part"])
def test_boolean_masked_attention_trains_like_eager(compiled_plans, masked):
    """A boolean mask (True = may attend) in training, where attention runs
    as its math formulation. "row": query 2 sees no key at all; eager gives
    zeros (and zero gradients) there, and so must the safe softmax, not NaN.
    "part": query 2 sees half the keys (the mask must be applied as -inf,
    not added as 0/1)."""
    torch.manual_seed(0)
    model = MaskedAttention()
    ref = copy.deepcopy(model)
    x, target = torch.randn(2, 6, 32), torch.randn(2, 6, 32)
    mask = torch.ones(6, 6, dtype=torch.bool)
    if masked == "row":
        mask[2] = False
    else:
        mask[2, :3] = False
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = _step(torch.compile(model, backend="kiln"), x, target, mask)
    assert not [str(m.message) for m in w if "kiln" in str(m.message)]
    want = _step(ref, x, target, mask)
    assert torch.isfinite(got)
    _compare_grads(model, ref, got, want)
    plans = list(compiled_plans.values())
    assert len(plans) == 2 and "softmax" in _ops(plans[0]), [_ops(p) for p in plans]


# --------------------------------------------------------------------------
# Composed views, checked exactly against eager on random chains of views.
# --------------------------------------------------------------------------

def _random_view_chain(rng, x):
    """A chain of 2-5 random views of x (permute, select, narrow, expand,
    transpose, reshape when torch can view), ending in a negation that
    makes kiln materialise it."""
    for _ in range(rng.randint(2, 5)):
        r = x.dim()
        kind = rng.choice(["permute", "select", "narrow", "expand", "transpose", "reshape"])
        if kind == "permute" and r >= 2:
            p = list(range(r))
            rng.shuffle(p)
            x = x.permute(p)
        elif kind == "select" and r >= 2:
            d = rng.randrange(r)
            x = x.select(d, rng.randrange(x.shape[d]))
        elif kind == "narrow":
            d = rng.randrange(r)
            n = x.shape[d]
            if n > 1:
                start = rng.randrange(n - 1)
                x = x.narrow(d, start, rng.randint(1, n - start))
        elif kind == "expand":
            d = rng.randrange(r)
            if x.shape[d] == 1:
                shape = list(x.shape)
                shape[d] = 3
                x = x.expand(shape)
            else:
                x = x.unsqueeze(d).expand(*x.shape[:d], 2, *x.shape[d:])
        elif kind == "transpose" and r >= 2:
            x = x.transpose(rng.randrange(r), rng.randrange(r))
        elif kind == "reshape":
            # Split a dim in two, or merge two neighbours: a copy when the
            # strides do not allow a view (kiln must get either right).
            d = rng.randrange(r)
            shape = list(x.shape)
            if shape[d] % 2 == 0 and shape[d] > 2:
                shape[d:d + 1] = [2, shape[d] // 2]
            elif d + 1 < r:
                shape[d:d + 2] = [shape[d] * shape[d + 1]]
            x = x.reshape(shape)
    return -x


@pytest.mark.parametrize("seed", range(40))
def test_random_view_chains_match_eager(seed):
    rng = random.Random(seed)
    shape = [rng.choice([2, 3, 4, 6]) for _ in range(rng.randint(2, 4))]
    x = torch.randn(*shape)

    class Chain(torch.nn.Module):
        def forward(self, t):
            return _random_view_chain(random.Random(seed), t)

    compiled = kiln.trace(Chain().eval(), (x,), fallback=False)
    want = Chain()(x)
    # Copies are exact: equal bit for bit.
    torch.testing.assert_close(compiled(x), want, rtol=0, atol=0)


def test_head_split_chain_is_one_copy():
    """select -> reshape (S, B*H, D) -> permute -> reshape (B, H, S, D): the
    (B*H) merge alone is not a view of x, the whole chain is."""
    S, B, H, D = 5, 3, 2, 4

    class Split(torch.nn.Module):
        def forward(self, qkv):
            k = qkv.unflatten(-1, (3, H * D)).permute(2, 0, 1, 3)[1]
            return -(k.reshape(S, B * H, D).transpose(0, 1).reshape(B, H, S, D))

    x = torch.randn(S, B, 3 * H * D)
    compiled = kiln.trace(Split().eval(), (x,), fallback=False)
    torch.testing.assert_close(compiled(x), Split()(x), rtol=0, atol=0)
    ops = _ops(compiled.explain())
    assert ops.count("strided_copy") + ops.count("eltwise_fused") <= 2, ops
    assert ops.count("strided_copy") <= 1, ops
