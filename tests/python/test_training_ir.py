"""kiln.trace lowers torch.export's program without the decomposition
re-trace where single-node rewrites make it what kiln lowers
(kiln/training_ir.py), else decomposes it as before. Each case checks
which path was taken (export_program(fast=True)'s kiln_training_ir) and
that the compiled model gives eager's answer, inputs written included.

Values: the graphs here move and add float32 values (cache writes, adds of
ones, a 16-wide linear): rtol 1e-5 / atol 1e-6, the linear's few-ulp sums.
"""

import copy
import random

import pytest
import torch

import kiln
from conftest import Fn
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


class PositionDiffs(torch.nn.Module):
    """transformers' masks: diff of position ids along the (symbolic)
    sequence dim, prepended, and twice over."""

    def forward(self, ids, x):
        return (torch.diff(ids, prepend=ids[:, :1] - 1), torch.diff(x, n=2, dim=1) * 1.0)


def test_diff_along_a_symbolic_dim_as_exported():
    """A diff along a symbolic dim once refused the exported program's
    lowering (falcon's masks: the whole program then decomposed, 4 s of a
    dynamic trace); its size is s - 1, its offsets symbolic. Exact."""
    m = PositionDiffs()
    ids, x = torch.arange(16).view(2, 8), torch.randn(2, 8, 3)
    dyn = ({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO}, {0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO})
    with torch.no_grad():
        ep = export_program(m, (ids, x), dynamic_shapes=dyn, fast=True)
    assert getattr(ep, "kiln_training_ir", False)
    kiln.capture.lower_exported(ep)  # refused before: "diff along a symbolic dim"
    k = kiln.trace(m, (ids, x), dynamic_shapes=dyn)
    for rows, t in ((2, 8), (3, 5), (4, 19)):
        a, b = torch.randint(0, 50, (rows, t)), torch.randn(rows, t, 3)
        for g, w in zip(k(a, b), m(a, b), strict=True):
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


class ScaledByAConstant(torch.nn.Module):
    """Gemma's embedding scale: an fp32 constant type_as'd to the bf16
    hidden states (a bf16 result of an fp32 and a bf16 operand: not
    autocast's work)."""

    def forward(self, x):
        return x * torch.tensor(8.0).type_as(x)


def test_type_as_in_a_bf16_model_is_not_taken_for_autocast():
    x = torch.randn(2, 5, dtype=torch.bfloat16)
    m = ScaledByAConstant()
    assert _fast(m, (x,))
    got = kiln.trace(m, (x,))(x)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, m(x), rtol=0, atol=0)


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


F = torch.nn.functional
_COMPOSITES = {
    # name: (function of the inputs, inputs); movement and selection: exact
    "pad-constant": (lambda x: F.pad(x, (1, 2, 0, 1), value=-3.5), lambda: (torch.randn(2, 3, 4),)),
    "pad-reflect": (lambda x: F.pad(x, (2, 1), mode="reflect"), lambda: (torch.randn(2, 3, 5),)),
    "pad-replicate": (lambda x: F.pad(x, (1, 1, 2, 0), mode="replicate"), lambda: (torch.randn(1, 2, 3, 4),)),
    "pad-circular": (lambda x: F.pad(x, (1, 2), mode="circular"), lambda: (torch.randn(1, 2, 5),)),
    "masked_fill": (lambda x, m: x.masked_fill(m, -7.0) + x.masked_fill(m[0], torch.tensor(2.0)),
                    lambda: (torch.randn(3, 4), torch.rand(3, 4) > 0.5)),
    "masked_fill-int": (lambda x, m: x.masked_fill(m, 5), lambda: (torch.arange(12).view(3, 4), torch.rand(4) > 0.5)),
    "where-scalars": (lambda x: (torch.where(x > 0, x, 0.5), torch.where(x > 0, -1.0, x), torch.where(x > 0, 1.0, 0.0)),
                      lambda: (torch.randn(3, 4),)),
    "type_as": (lambda x, i: (x.type_as(i), i.type_as(x) * 0.5), lambda: (torch.randn(3) * 9, torch.arange(3))),
    "numpy_T": (lambda x, v: (x.T * 2.0, v.T + 1.0), lambda: (torch.randn(2, 3, 4), torch.randn(5))),
    "chunk": (lambda x: [c * (i + 1.0) for i, c in enumerate(torch.chunk(x, 3, dim=-1))], lambda: (torch.randn(2, 7),)),
    "meshgrid": (lambda a, b, c: [g * 1.0 for g in torch.meshgrid(a, b, c, indexing="ij")]
                 + [g * 1.0 for g in torch.meshgrid(a, b, c, indexing="xy")],
                 lambda: (torch.randn(2), torch.randn(3), torch.randn(())),),
    "repeat_interleave": (lambda x: (x.repeat_interleave(3, dim=1) * 1.0, x.repeat_interleave(2) * 1.0,
                                     x.repeat_interleave(2, dim=-1) * 1.0), lambda: (torch.randn(2, 3),)),
    "stack": (lambda a, b: (torch.stack([a, b]), torch.stack([a, b * 2.0, a], dim=-1)),
              lambda: (torch.randn(2, 3), torch.randn(2, 3))),
    "max-min-other": (lambda a, b: (torch.max(a, b), torch.min(a, b)),
                      # (no -0 against +0: eager's own answer then depends on its vector or scalar loop)
                      lambda: (torch.tensor([1.0, float("nan"), -2.0, 3.0]), torch.tensor([2.0, 1.0, 0.0, float("nan")]))),
    # arithmetic: a few fp32 roundings apart from eager's at most
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b, 1e-4), lambda: (torch.randn(2, 4, 3, 3), torch.randn(4),
                                                                          torch.randn(4))),
    "baddbmm": (lambda i, a, b: (torch.baddbmm(i, a, b), torch.baddbmm(i, a, b, beta=0.5, alpha=2.0)),
                lambda: (torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))),
    "weight_norm": (lambda v, g, x: x @ torch._weight_norm(v, g, 0).t(),
                    lambda: (torch.randn(5, 4), torch.rand(5, 1) + 0.5, torch.randn(3, 4))),
    "softplus": (lambda x: (F.softplus(x), F.softplus(x, beta=2.0, threshold=5.0)),
                 lambda: (torch.randn(4, 6) * 8,)),
    "new_empty": (lambda x: torch.cat([x, x.new_empty((0, 4))]) * 2.0, lambda: (torch.randn(3, 4),)),
    "narrow": (lambda x: (x.narrow(1, 1, 2) * 2.0, x.narrow(-1, -3, 2) + 1.0, x.narrow(0, 0, 2) * 1.0),
               lambda: (torch.randn(3, 4, 5),)),
}
_EXACT = {"pad-constant", "pad-reflect", "pad-replicate", "pad-circular", "masked_fill", "masked_fill-int",
          "where-scalars", "type_as", "numpy_T", "chunk", "meshgrid", "repeat_interleave", "stack", "max-min-other",
          "new_empty", "narrow"}


@pytest.mark.parametrize("name", sorted(_COMPOSITES))
def test_composite_ops_as_exported(name):
    """Composite ops torch.export keeps whole in its program (F.pad, chunk,
    meshgrid, ...; kiln/optable/composite.py) lower without the
    decomposition re-trace, to eager's values: data movement and selection
    exactly (NaN and -0 included), the norms and products within fp32
    rounding (rtol 1e-5). F.pad's circular mode the handler declines: the
    program then decomposes, to the same values."""
    fn, make = _COMPOSITES[name]
    torch.manual_seed(7)
    xs = make()
    m = Fn(fn)
    assert _fast(m, xs)
    got, want = kiln.trace(m, xs)(*xs), m(*xs)
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        if name in _EXACT:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(torch.signbit(g), torch.signbit(w)) if g.is_floating_point() else True
        else:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_chunk_and_pad_as_exported_under_symbolic_sizes():
    """chunk's pieces take their sizes from torch's result, which under a
    symbolic dim are SymInts; pad's widths stay numbers."""
    class ChunkPad(torch.nn.Module):
        def forward(self, x):
            return [F.pad(c, (1, 0)) * 2.0 for c in torch.chunk(x, 2, dim=0)]

    m = ChunkPad()
    x = torch.randn(6, 3)
    dyn = ({0: torch.export.Dim.AUTO},)
    with torch.no_grad():
        ep = export_program(m, (x,), dynamic_shapes=dyn, fast=True)
    assert getattr(ep, "kiln_training_ir", False)
    k = kiln.trace(m, (x,), dynamic_shapes=dyn)
    for rows in (6, 4, 9):  # 9: pieces of 5 and 4
        a = torch.randn(rows, 3)
        for g, w in zip(k(a), m(a), strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
    with pytest.raises(ValueError, match="traced under"):  # 2 rows: pieces of 1, which torch's guards exclude
        k(torch.randn(2, 3))


# Writes into fresh buffers read afterwards (kiln/training_ir.py's
# fresh_buffer_writes): the write's functional op scattered back into the
# buffer. Each case: its name, the function, whether the fast path takes it.
FRESH_BUFFER_WRITES = {
    # DeepSeek-V3's keys: a new_empty filled by two slices, then read whole
    "slices": (lambda a, b: _filled(a.new_empty(2, 3, 8), a, b) * 2.0, True),
    # a write whose result depends on the old values (mul_ of a slice of a clone)
    "mul_slice": (lambda a, b: _scaled(a.clone()), True),
    # through a select, into zeros; and into the whole buffer
    "select": (lambda a, b: _row(torch.zeros(4, 3), b[0, 0]) + 1.0, True),
    "whole": (lambda a, b: _whole(torch.zeros_like(b), b) * 3.0, True),
    # through a select of a slice, then a select of a select (scattered back view by view)
    "nested": (lambda a, b: _nested(torch.zeros(3, 3, 4), b) * 1.0, True),
    # a view made before the write and read after it holds the old value: declined
    "view_before": (lambda a, b: _view_before(a.clone(), b), False),
    # a buffer no factory made (a product's): declined, as before
    "not_fresh": (lambda a, b: _filled(torch.cat([a, b], -1), a * 2.0, b) * 1.0, False),
}


def _filled(k, a, b):
    k[..., :5].copy_(a)
    k[..., 5:].copy_(b)
    return k


def _scaled(k):
    k[:, :, 1:4].mul_(3.0)
    k[:, 1].add_(1.0)
    return k.sum(0)


def _row(z, r):
    z[2].copy_(r)
    return z


def _whole(z, b):
    z.copy_(b)
    z.add_(2.0)
    return z


def _nested(z, b):
    z[1:][:, :, 0].copy_(b[0, :2])
    z[0][1].add_(1.0)
    z[:, 2][1:].mul_(2.0)
    return z


def _view_before(k, b):
    v = k[..., :2]
    k[..., 2:].copy_(b[..., :3])
    return v * 1.0, k


@pytest.mark.parametrize("name", sorted(FRESH_BUFFER_WRITES))
def test_writes_into_fresh_buffers_read_after_them(name):
    fn, fast = FRESH_BUFFER_WRITES[name]
    m = Fn(fn)
    a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 3)
    assert _fast(m, (a, b)) is fast
    k = kiln.trace(m, (a, b))
    for _ in range(2):
        got, want = k(a, b), m(a, b)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 3)


def test_fresh_buffer_writes_under_symbolic_sizes():
    """DeepSeek-V3's key building with batch and length symbolic."""
    class Keys(torch.nn.Module):
        def forward(self, a, b):
            return _filled(a.new_empty(a.shape[0], a.shape[1], 8), a, b) * 2.0

    m = Keys()
    a, b = torch.randn(2, 3, 5), torch.randn(2, 3, 3)
    dyn = ({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},) * 2
    with torch.no_grad():
        ep = export_program(m, (a, b), dynamic_shapes=dyn, fast=True)
    assert getattr(ep, "kiln_training_ir", False)
    k = kiln.trace(m, (a, b), dynamic_shapes=dyn)
    for shape in ((2, 3), (4, 7), (3, 2)):
        a, b = torch.randn(*shape, 5), torch.randn(*shape, 3)
        torch.testing.assert_close(k(a, b), m(a, b), rtol=0, atol=0)


class _RandomWrites(torch.nn.Module):
    """A fresh buffer (zeros_like, clone or new_empty then fill_) written
    1-4 times through 0-2 slices and selects (copy_ of the same view of x
    doubled, add_ of it, mul_ and add_ of numbers), then read whole; with
    `early`, a view of the buffer made before the writes is returned too
    (its old value in eager: the rewrite must decline it)."""

    def __init__(self, seed):
        super().__init__()
        rng = random.Random(seed)
        self.shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 3))]
        self.make = rng.choice(("zeros_like", "clone", "new_empty"))
        self.writes = []
        for _ in range(rng.randint(1, 4)):
            chain, cur = [], list(self.shape)
            for _ in range(rng.randint(0, 2)):
                d = rng.randrange(len(cur)) if cur else None
                if d is None:
                    break
                if rng.random() < 0.4:
                    chain.append(("select", d, rng.randrange(-cur[d], cur[d])))
                    cur.pop(d)
                else:
                    start = rng.randrange(cur[d])
                    end, step = rng.randint(start + 1, cur[d]), rng.choice((1, 1, 2))
                    chain.append(("slice", d, start, end, step))
                    cur[d] = len(range(start, end, step))
            self.writes.append((chain, rng.choice(("copy", "add", "mul", "add_number"))))
        self.early = rng.random() < 0.2

    @staticmethod
    def _view(t, chain):
        for c in chain:
            t = t.select(c[1], c[2]) if c[0] == "select" else t[(slice(None),) * c[1] + (slice(c[2], c[3], c[4]),)]
        return t

    def forward(self, x):
        buf = torch.zeros_like(x) if self.make == "zeros_like" else x.clone() if self.make == "clone" else x.new_empty(x.shape)
        if self.make == "new_empty":
            buf.fill_(0.5)
        early = buf[0] if self.early else None
        for chain, op in self.writes:
            v, src = self._view(buf, chain), self._view(x, chain)
            if op == "copy":
                v.copy_(src * 2.0)
            elif op == "add":
                v.add_(src)
            elif op == "mul":
                v.mul_(1.5)
            else:
                v.add_(0.25)
        out = buf * 1.0
        return (out, early * 1.0) if self.early else out


@pytest.mark.parametrize("seed", range(40))
def test_random_writes_into_fresh_buffers(seed):
    """Random write sequences into fresh buffers: the exported path takes
    each one (none with a view made before the writes) and gives eager's
    values exactly (copies, adds and multiplies round once each, as in
    eager)."""
    m = _RandomWrites(seed)
    x = torch.randn(*m.shape)
    assert _fast(m, (x,)) is not m.early
    k = kiln.trace(m, (x,))
    x2 = torch.randn(*m.shape)
    for inp in (x, x2):
        got, want = k(inp), m(inp)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
