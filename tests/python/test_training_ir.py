"""kiln.trace lowers torch.export's program without the decomposition
re-trace where single-node rewrites make it what kiln lowers
(kiln/training_ir.py), else decomposes it as before. Each case checks
which path was taken (export_program(fast=True)'s kiln_training_ir) and
that the compiled model gives eager's answer, inputs written included.

Values: the graphs here move and add float32 values (cache writes, adds of
ones, a 16-wide linear): rtol 1e-5 / atol 1e-6, the linear's few-ulp sums.
"""

import copy

import pytest
import torch

import kiln
from kiln.capture import export_program

TOL = dict(rtol=1e-5, atol=1e-6)


def _fast(model, args):
    with torch.no_grad():
        return bool(getattr(export_program(model.eval(), args, fast=True), "kiln_training_ir", False))


class CacheStep(torch.nn.Module):
    """A KV-cache step: index_copy_ into the cache input, then attention-like
    reads of the written cache; a counter bumped in place and never read."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, x, pos, cache):
        k = self.proj(x)
        cache.index_copy_(1, pos, k)
        n = pos.clone()
        n.add_(1)  # a write nothing reads afterwards
        return cache.sum(1) * 2.0


def test_cache_write_in_place_without_the_decomposition_retrace():
    torch.manual_seed(0)
    m = CacheStep().eval()
    x, pos = torch.randn(2, 3, 16), torch.tensor([1, 4, 5])
    assert _fast(m, (x, pos, torch.zeros(2, 8, 16)))
    cache, want_cache = torch.zeros(2, 8, 16), torch.zeros(2, 8, 16)
    k = kiln.trace(m, (x, pos, cache.clone()))
    got = k(x, pos, cache)
    want = m(x, pos, want_cache)
    torch.testing.assert_close(got, want, **TOL)
    torch.testing.assert_close(cache, want_cache, **TOL)  # the caller's cache is written
    pos2 = torch.tensor([0, 2, 7])
    torch.testing.assert_close(k(x, pos2, cache), m(x, pos2, want_cache), **TOL)
    torch.testing.assert_close(cache, want_cache, **TOL)


class ReadAfterWrite(torch.nn.Module):
    """y is read through a view made before y is written: eager's read sees
    the write (functionalization's job, not a single-node rewrite)."""

    def forward(self, x):
        y = x * 2.0
        v = y[0]
        y.add_(1.0)
        return v * 3.0, y


class WriteThroughView(torch.nn.Module):
    """An input written through a view of it: the write is a scatter into
    the input (functionalization's)."""

    def forward(self, x):
        x[0].add_(1.0)
        return x * 2.0


class TrainingDropout(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.dropout(x, 0.5, True)


def test_dropout_in_training_mode_is_not_an_identity():
    """dropout(x, 0.5, train=True) reaches kiln whole in torch.export's
    program; its handler declines it (it is x only in eval mode), and the
    decomposed program's random mask runs: each element 0 or 2x."""
    m, x = TrainingDropout(), torch.ones(64, 64)
    assert _fast(m, (x,))
    y = kiln.trace(m, (x,))(x)
    assert bool(((y == 0) | (y == 2)).all())
    assert 0.3 < float((y == 0).float().mean()) < 0.7


@pytest.mark.parametrize("model,fast", [(ReadAfterWrite(), False), (WriteThroughView(), False)])
def test_programs_a_single_node_rewrite_cannot_take(model, fast):
    """Aliased writes leave the program to the decomposition (the rewrite
    declines), which gives eager's answer and the input's new value."""
    x = torch.randn(3, 4)
    assert _fast(model, (x.clone(),)) is fast
    k = kiln.trace(model, (x.clone(),))
    a, b = x.clone(), x.clone()
    got, want = k(a), model(b)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, **TOL)
    torch.testing.assert_close(a, b, **TOL)


class WriteReadThroughSplit(torch.nn.Module):
    """A piece of split(y) read after y is written: eager's piece sees it."""

    def forward(self, x):
        y = x * 2.0
        a, b = y.split(2, 0)
        y.add_(1.0)
        return a * 3.0


class IntegerWrittenWithAFloat(torch.nn.Module):
    """An int32 tensor add_-ed an int64 one: int32 in place (add would make
    it int64)."""

    def forward(self, x):
        n = (x * 4.0).int()
        n.add_(torch.arange(3))
        return n * 2


@pytest.mark.parametrize("model", [WriteReadThroughSplit(), IntegerWrittenWithAFloat()])
def test_writes_a_functional_op_would_get_wrong_are_decomposed(model):
    x = torch.randn(4, 3)
    assert not _fast(model, (x,))
    torch.testing.assert_close(kiln.trace(model, (x,))(x), model(x), **TOL)


class Diffs(torch.nn.Module):
    def forward(self, x, ids, flags):
        return (torch.diff(x, dim=0), torch.diff(x, n=2, prepend=x[:, :1] * 0.5),
                torch.diff(ids, prepend=torch.zeros_like(ids[:, :1])), torch.diff(flags, dim=-1),
                torch.diff(ids, n=0))


def test_diff_as_exported():
    """torch.diff reaches kiln whole in torch.export's program (transformers'
    masks take it of position ids): eager's values, exactly (differences of
    small integers and of floats are one subtraction each)."""
    x, ids = torch.randn(5, 4), torch.tensor([[0, 1, 2, 5, 6], [3, 3, 4, 7, 9]])
    flags = torch.tensor([[True, False, False, True]])
    m = Diffs()
    assert _fast(m, (x, ids, flags))
    for g, w in zip(kiln.trace(m, (x, ids, flags))(x, ids, flags), m(x, ids, flags)):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=0, atol=0)


class Convs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv1d(3, 4, 3, padding=1)
        self.c2 = torch.nn.Conv2d(3, 6, 3, stride=2, padding=1, groups=3, bias=False)
        self.c3 = torch.nn.Conv3d(2, 2, (1, 3, 3), dilation=(1, 2, 1))
        self.bn = torch.nn.BatchNorm2d(6)

    def forward(self, a, b, c):
        return self.c1(a), torch.relu(self.bn(self.c2(b))), self.c3(c)


def test_convolutions_as_exported():
    """conv1d/2d/3d (nn.Conv*'s ops in torch.export's program) of batched
    inputs become convolution, as the decomposition makes them; an
    unbatched conv2d is left to the decomposition. Sums of <= 27 products:
    rtol 1e-5."""
    torch.manual_seed(3)
    m = Convs().eval()
    xs = (torch.randn(2, 3, 9), torch.randn(2, 3, 8, 8), torch.randn(1, 2, 2, 9, 7))
    assert _fast(m, xs)
    for g, w in zip(kiln.trace(m, xs)(*xs), m(*xs)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)

    class Unbatched(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.conv2d(x, torch.ones(2, 3, 3, 3))

    u = torch.randn(3, 6, 6)
    assert not _fast(Unbatched(), (u,))
    torch.testing.assert_close(kiln.trace(Unbatched(), (u,))(u), Unbatched()(u), rtol=1e-5, atol=1e-5)


class Bf16Block(torch.nn.Module):
    """A bf16 model's block: a norm, a linear with bias, an activation, a
    product of two activations and a residual add."""

    def __init__(self):
        super().__init__()
        self.norm, self.up, self.down = torch.nn.LayerNorm(32), torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)

    def forward(self, x):
        h = self.up(self.norm(x))
        return x + self.down(torch.nn.functional.gelu(h) * h.sigmoid())


def test_a_bf16_model_as_exported_agrees_with_its_decomposed_program(monkeypatch):
    """A model in bf16 (model.to(torch.bfloat16)) is lowered as exported:
    lowp's rules read its linear, layer_norm and gelu as they read the
    decomposed ops. Both paths compute each op in fp32 and round where
    eager rounds, or not at all: their outputs are within one bf16 rounding
    of each other (2^-8 relative), and the exported one within eager's."""
    torch.manual_seed(5)
    m = Bf16Block().eval().to(torch.bfloat16)
    x = torch.randn(2, 6, 32, dtype=torch.bfloat16)
    assert _fast(m, (x,))
    fast = kiln.trace(m, (x,))(x)
    monkeypatch.setattr(kiln.capture.training_ir, "functional_in_place", lambda ep, t: "off")
    assert not _fast(m, (x,))
    slow = kiln.trace(m, (x,))(x)
    assert fast.dtype == slow.dtype == torch.bfloat16
    torch.testing.assert_close(fast.float(), slow.float(), rtol=2 ** -7, atol=2 ** -7)
    ref = copy.deepcopy(m).double()(x.double())
    err = lambda y: float((y.double() - ref).abs().max())
    assert err(fast) <= err(m(x)) + 2 ** -7 * float(ref.abs().max())


def test_autocast_programs_are_decomposed():
    """torch.export's training IR is recorded above autocast: its conv2d of
    an fp32 x and fp32 weight has a bf16 result and no cast. Lowered as
    exported, autocast would be silently dropped; such programs decompose
    (the re-trace records autocast's casts), whether autocast is still on
    when kiln looks or not."""
    m = Convs().eval()
    xs = (torch.randn(2, 3, 9), torch.randn(2, 3, 8, 8), torch.randn(1, 2, 2, 9, 7))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert not _fast(m, xs)
        ep = torch.export.export(m, xs)
        y = kiln.trace(m, xs)(*xs)
    why = kiln.capture.training_ir.functional_in_place(ep, kiln.capture.TABLE)
    assert why is not None and "autocast" in why, why
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = m(*xs)
    for g, w in zip(y, want):
        assert g.dtype == w.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w.float(), rtol=2 ** -6, atol=2 ** -6)  # a bf16 ulp or two
