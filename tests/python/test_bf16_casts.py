"""Cast folding for bf16 training (src/compiler/kiln_pass_casts.c): under
torch.autocast the graphs kiln compiles round to bf16 where eager does
(python/kiln/lowp.py), so a training step had hundreds of casts. The pass
folds a cast read by a matrix product into the GEMM (A rounded, B widened
as they are packed) and makes float32 -> bf16 -> float32 round trips one
fused ROUND_BF16. It must be exact: every test here compiles the same
forward and backward with KILN_CASTS=keep (no folding) and without, and
compares the loss and every gradient bit for bit, NaN payloads included.
The models are small and varied (attention with its transposes, random
stacks of linears and activations, batched products, small M that takes
the GEMV path), on the CPU and the reference target."""

import copy
import random
import warnings

import pytest
import torch
from torch import nn

import kiln
import kiln.module as km


def _bits(t):
    return t.detach().float().contiguous().view(torch.int32)


def _step(model, inputs, keep, monkeypatch, target=None):
    """loss, gradients and the compiled plans of one autocast step."""
    if keep:
        monkeypatch.setenv("KILN_CASTS", "keep")
    else:
        monkeypatch.delenv("KILN_CASTS", raising=False)
    if target:
        monkeypatch.setenv("KILN_TARGET", target)
    plans = []
    init = km.KilnModule.__init__

    def record(self, *a, **k):
        init(self, *a, **k)
        plans.append(self)

    monkeypatch.setattr(km.KilnModule, "__init__", record)
    torch._dynamo.reset()
    m = copy.deepcopy(model)
    fn = torch.compile(m, backend="kiln")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kiln warns when an op falls back to eager
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = fn(*inputs)
        loss = out.float().square().mean()
        loss.backward()
    monkeypatch.setattr(km.KilnModule, "__init__", init)
    grads = [p.grad for p in m.parameters()]
    assert all(g is not None for g in grads)
    return loss, grads, [p.explain() for p in plans]


def _casts(plans):
    return sum(line.count("= cast") for p in plans for line in p.splitlines())


def _check_exact(model, inputs, monkeypatch, target=None):
    loss0, grads0, plans0 = _step(model, inputs, True, monkeypatch, target)
    loss1, grads1, plans1 = _step(model, inputs, False, monkeypatch, target)
    assert torch.equal(_bits(loss0), _bits(loss1)), (loss0, loss1)
    for i, (g0, g1) in enumerate(zip(grads0, grads1)):
        assert torch.equal(_bits(g0), _bits(g1)), f"gradient {i} differs"
    return plans0, plans1


class Block(nn.Module):
    def __init__(self, d=32, heads=4, ff=64):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True,
                                                norm_first=True, activation="gelu")
        self.head = nn.Linear(d, d)

    def forward(self, x):
        return self.head(self.layer(x))


@pytest.mark.parametrize("target", ["cpu", "reference"])
def test_transformer_block_folded_exactly(monkeypatch, target):
    torch.manual_seed(0)
    model = Block().train()
    x = torch.randn(2, 8, 32)
    keep, folded = _check_exact(model, (x,), monkeypatch, target)
    # The fold took most casts away and the GEMMs read bf16 themselves.
    assert _casts(folded) < _casts(keep) / 2, (_casts(keep), _casts(folded))
    assert not any("a=bf16" in p for p in keep)
    assert sum(p.count("a=bf16") for p in folded) >= 6
    assert any("fused[cast cast" in p for p in folded)  # ROUND_BF16 in a fused group


class RandomNet(nn.Module):
    """A random stack: linears (bias or not) with activations and residuals,
    and a batched product of the activations with their own transpose."""

    def __init__(self, seed, d):
        super().__init__()
        rng = random.Random(seed)
        self.layers = nn.ModuleList()
        self.acts = []
        self.residual = []
        width = d
        for _ in range(rng.randint(2, 4)):
            out = rng.choice([d, 16, 40])
            self.layers.append(nn.Linear(width, out, bias=rng.random() < 0.7))
            self.acts.append(rng.choice(["gelu", "relu", "tanh", "none"]))
            self.residual.append(out == width and rng.random() < 0.5)
            width = out
        self.bmm = rng.random() < 0.7
        self.proj = nn.Linear(width, d)

    def forward(self, x):
        for layer, act, res in zip(self.layers, self.acts, self.residual):
            y = layer(x)
            y = {"gelu": nn.functional.gelu, "relu": torch.relu, "tanh": torch.tanh,
                 "none": lambda t: t}[act](y)
            x = x + y if res else y
        if self.bmm:
            att = torch.softmax(x @ x.transpose(-1, -2) / 4.0, -1)
            x = att @ x
        return self.proj(x)


@pytest.mark.parametrize("seed", range(6))
def test_random_nets_folded_exactly(monkeypatch, seed):
    torch.manual_seed(seed)
    rng = random.Random(100 + seed)
    d = rng.choice([8, 24, 32])
    # Row counts from GEMV-sized (a few rows: the small-M path) to blocked.
    shape = rng.choice([(1, 3, d), (2, 5, d), (4, 33, d), (64, d)])
    model = RandomNet(seed, d).train()
    x = torch.randn(*shape)
    _check_exact(model, (x,), monkeypatch)


def test_non_finite_values_round_the_same(monkeypatch):
    """NaN and infinity through the folded casts (ROUND_BF16 keeps the CAST
    kernel's quiet NaN) and the GEMMs that round A / widen B."""
    torch.manual_seed(3)
    model = RandomNet(1, 32).train()
    x = torch.randn(3, 7, 32)
    x[0, 1, 2] = float("nan")
    x[1, 2, 3] = float("inf")
    x[2, 0, 0] = -float("inf")
    x[2, 3] = 3.0e38  # rounds up to infinity in bf16
    _check_exact(model, (x,), monkeypatch)


class Attention(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, -1)
        att = torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1)
        return self.out(att @ v)


def test_folded_casts_saved_and_loaded(tmp_path, monkeypatch):
    """An inference graph traced under autocast keeps its folds through a
    .kiln file (format 2.9: a 2.8 reader refuses what it cannot run), with
    the bits the unfolded graph gives."""
    torch.manual_seed(5)
    model = Attention().eval()
    x = torch.randn(2, 6, 32)
    got = {}
    for keep in (True, False):
        if keep:
            monkeypatch.setenv("KILN_CASTS", "keep")
        else:
            monkeypatch.delenv("KILN_CASTS", raising=False)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            got[keep] = kiln.trace(model, (x,), fallback=False)
    folded = got[False]
    assert "a=bf16" in folded.explain() and "a=bf16" not in got[True].explain()
    path = tmp_path / "attention.kiln"
    kiln.save(folded, str(path))
    data = path.read_bytes()
    assert data[:4] == b"KILN" and int.from_bytes(data[4:6], "little") == 2
    assert int.from_bytes(data[6:8], "little") == 9
    loaded = kiln.load(str(path))
    with torch.no_grad():
        want = got[True](x)
        assert torch.equal(_bits(folded(x)), _bits(want))
        assert torch.equal(_bits(loaded(x)), _bits(want))
