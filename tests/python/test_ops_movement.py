"""Padding, flips/repeats/diagonals, strided views, scatters, scans,
products, variance, sort/topk and multi-tensor indexing against eager.

As in test_ops.py, each module is compiled with kiln.trace(fallback=False),
so an op kiln cannot run natively fails the test instead of running in
eager, and related ops share one trace. Tolerances:
  EXACT  data movement, integer results, sorting, scatter assignment: bit
         for bit.
  SCAN   float cumsum/cumprod/prod: kiln accumulates in double as torch's
         CPU scan does, but torch's prod reduction accumulates in float and
         in another order: 1e-6 relative.
  RED    variance and scatter sums/means: a sum in another order,
         1e-5 rel / 1e-6 abs (as test_ops.py).
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import kiln
from conftest import Fn

EXACT = dict(rtol=0.0, atol=0.0)
SCAN = dict(rtol=1e-6, atol=1e-6)
RED = dict(rtol=1e-5, atol=1e-6)
aten = torch.ops.aten


def check(fn, *inputs, tol=EXACT, equal_nan=False):
    model = fn if isinstance(fn, nn.Module) else Fn(fn)
    compiled = kiln.trace(model, inputs, fallback=False)
    with torch.no_grad():
        want = model(*inputs)
    got = compiled(*inputs)
    assert_close(got, want, equal_nan=equal_nan, **tol)
    return compiled


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def randn(*shape):
    return torch.randn(shape)


def ints(*shape, lo=-9, hi=10):
    return torch.randint(lo, hi, shape)


# ---- padding ---------------------------------------------------------------------


def test_constant_pad_float():
    def fn(x, e):
        return (F.pad(x, (1, 2)), F.pad(x, (1, 2, 0, 3, 2, 0), value=-1.5),
                F.pad(x, (-1, 2, 1, -2)),           # crop and pad in one
                F.pad(x, (-1, -2, -1, 0, 0, -1)),   # crop only
                F.pad(e, (2, 1, 1, 1), value=3.0),  # a zero-size dim padded
                F.pad(x, (0, 0)))
    check(fn, randn(3, 4, 5), torch.empty(2, 0, 3))


def test_constant_pad_int_bool():
    def fn(x, b):
        return F.pad(x, (2, 1, -1, 1), value=7), F.pad(b, (1, 1), value=True), F.pad(b, (0, 2, 1, 0))
    check(fn, ints(3, 4), torch.rand(2, 3) > 0.5)


def test_reflect_replicate_pad():
    def fn(x1, x2, x3):
        return (F.pad(x1, (3, 2), mode="reflect"), F.pad(x2, (1, 2, 3, 0), mode="reflect"),
                F.pad(x3, (1, 1, 2, 0, 0, 1), mode="reflect"),
                F.pad(x1, (4, 0), mode="replicate"), F.pad(x2, (2, 5, 1, 1), mode="replicate"),
                F.pad(x3, (1, 2, 0, 3, 2, 1), mode="replicate"))
    check(fn, randn(2, 3, 5), randn(2, 3, 4, 6), randn(1, 2, 3, 4, 5))
    check(lambda x: F.pad(x, (-1, 1, -2, 1), mode="reflect"), randn(1, 3, 4, 4))  # crops too


def test_replicate_pad_int_and_size_one():
    def fn(x, y):
        return F.pad(x, (2, 3, 1, 1), mode="replicate"), F.pad(y, (2, 2, 2, 2), mode="replicate")
    check(fn, ints(1, 2, 3, 4).float(), randn(1, 1, 1, 1))
    check(lambda x: aten.replication_pad2d(x, [1, 2, 2, 1]), ints(2, 3, 4))
    check(lambda x: F.pad(x, (-1, 2, 1, -2), mode="replicate"), randn(1, 3, 4))  # crops too


# ---- flip, repeat, diagonal, as_strided, copy, empty_strided ---------------------------


def test_roll_is_slices_bit_for_bit():
    """torch.roll lowers to two slices and a cat per rolled dim (kiln's
    copies, not a gather through a computed index): one dim, several, a
    negative shift, a shift past the size, a shift of 0 and no dims (the
    flattened roll), integers too."""
    x = torch.randn(3, 5, 7)
    check(lambda t: (t.roll(3, -1), t.roll((2, -4), (1, 2)), t.roll(-1, 0), t.roll(5 + 2, 1),
                     t.roll(0, 1), t.roll(4)), x)
    check(lambda t: t.roll(2, 0), torch.arange(10, dtype=torch.int64).reshape(5, 2))
    ep = kiln.capture.export_program(Fn(lambda t: t.roll(3, -1)), (x,))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert "aten.cat.default" in targets and not any("index" in t or "gather" in t for t in targets), targets


def test_flip_repeat_diagonal():
    def fn(x, v, i, b):
        return (torch.flip(x, (0, -1)), torch.flip(x, (1,)), torch.flip(v, (0,)),
                torch.flip(i, (0, 1)), torch.flip(b, (-1,)),
                x.repeat(2, 1, 3), x.repeat(2, 1, 1, 2), v.repeat(0, 2), i.repeat(1, 3), b.repeat(2, 2),
                torch.diagonal(x), torch.diagonal(x, 1, -1, 0), torch.diagonal(x, -2, 1, 2),
                torch.diagonal(x, 9), torch.diagonal(i, -1))
    check(fn, randn(3, 1, 4), randn(5), ints(3, 4), torch.rand(2, 3) > 0.5)


def test_as_strided_copy_empty_strided():
    def fn(x, s, i):
        return (torch.as_strided(x, (3, 2), (1, 4)), torch.as_strided(x, (2, 2, 2), (6, 1, 3), 1),
                aten.copy(x, s), aten.copy(i.float(), i), aten.copy(i, x))
    check(fn, randn(3, 4), randn(4), ints(3, 4))
    # empty_strided's values are undefined: compare shape and dtype only.
    m = Fn(lambda x: x + torch.empty_strided((2, 3), (1, 2), dtype=torch.int64))
    got = kiln.trace(m, (ints(2, 3),), fallback=False)(ints(2, 3))
    assert got.shape == (2, 3) and got.dtype == torch.int64


def test_select_slice_diagonal_scatter():
    def fn(x, r, c, s, d, i):
        return (torch.select_scatter(x, r, 0, 1), torch.select_scatter(x, c, -1, -1),
                torch.slice_scatter(x, s, 1, 1, None, 2), torch.slice_scatter(x, x[1:], 0, 1),
                torch.diagonal_scatter(x, d, 1), torch.select_scatter(i, r.long(), 0, 0))
    check(fn, randn(3, 5), randn(5), randn(3), randn(3, 2), randn(3), ints(3, 5))


# ---- scans, products, variance ------------------------------------------------------------


def test_cumsum_cumprod():
    def fn(x, big, i, b, s):
        return (torch.cumsum(x, 0), torch.cumsum(x, -1), torch.cumsum(big, 0), torch.cumprod(x, 1),
                torch.cumsum(i, 1), torch.cumsum(b, 0), torch.cumsum(s, 0), torch.cumprod(i, 0))
    big = torch.full((4096,), 1000.0) + torch.rand(4096)  # a long sum of large values
    tol = dict(rtol=1e-6, atol=1e-6)
    check(fn, randn(4, 5), big, ints(3, 6), torch.rand(5, 2) > 0.5, torch.tensor(2.5), tol=tol)


def test_prod():
    def fn(x, i, b, e):
        return (torch.prod(x), torch.prod(x, 1), torch.prod(x, -1, keepdim=True), torch.prod(i),
                torch.prod(i, 0), torch.prod(b, 1), torch.prod(e, 1), torch.prod(e),
                torch.prod(x[0, 0]), torch.prod(b, 0, dtype=torch.bool), torch.prod(x, 1, dtype=torch.bool))
    x = torch.rand(3, 4) + 0.5
    x[1, 2] = 0.0
    check(fn, x, ints(3, 4, lo=-3, hi=4), torch.rand(2, 3) > 0.3, torch.empty(2, 0), tol=SCAN)


def test_var():
    def fn(x, big):
        return (torch.var(x), torch.var(x, 1), torch.var(x, (0, 2), keepdim=True),
                torch.var(x, -1, correction=0), torch.var(x, 1, correction=2), torch.var(big, 0),
                torch.var(x[:, :1], 1), *torch.var_mean(x, 1))
    # A large common offset: a one-pass E[x^2] - E[x]^2 would lose it all.
    big = 1e4 + torch.randn(1000, 3)
    check(fn, randn(3, 4, 5), big, tol=RED, equal_nan=True)
    want = torch.var(big.double(), 0).float()
    got = kiln.trace(Fn(lambda t: torch.var(t, 0)), (big,), fallback=False)(big)
    assert_close(got, want, rtol=1e-3, atol=0.0)  # eager's own float32 error is ~1e-4 here


# ---- scatter, scatter_reduce, index_put, embedding backward --------------------------------


def test_scatter():
    def fn(x, idx, src, i, isrc):
        return (torch.scatter(x, 0, idx, src), torch.scatter(x, 1, idx[:, :3], 2.5),
                torch.scatter_add(x, 0, idx, src), torch.scatter_add(i, 1, idx[:2, :2], isrc),
                torch.scatter(i, 0, idx[:1, :4], isrc))
    x = randn(4, 5)
    idx = torch.tensor([[0, 1, 2, 3, 0], [3, 1, 0, 2, 1], [1, 2, 3, 0, 3]])  # duplicates
    uniq = torch.tensor([[0, 1, 2, 3, 0], [3, 2, 0, 2, 1], [1, 0, 3, 0, 3]])
    check(lambda x, s: torch.scatter(x, 0, uniq, s), x, randn(3, 5))
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), x, idx, randn(3, 6), tol=RED)
    check(fn, x, uniq, randn(3, 6), ints(4, 5), ints(3, 4), tol=RED)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(reduce):
    def fn(x, idx, src, i, isrc):
        return (torch.scatter_reduce(x, 0, idx, src, reduce), torch.scatter_reduce(x, 0, idx, src, reduce, include_self=False),
                torch.scatter_reduce(x, 1, idx[:, :2], src, reduce),
                torch.scatter_reduce(i, 0, idx, isrc, reduce), torch.scatter_reduce(i, 0, idx, isrc, reduce, include_self=False))
    idx = torch.tensor([[0, 1, 2, 3, 0], [3, 1, 0, 2, 1], [0, 2, 3, 0, 3]])
    check(fn, randn(4, 5), idx, randn(3, 5), ints(4, 5), ints(3, 5), tol=RED)
    if reduce != "mean":  # bool: sum and amax are or, prod and amin and (eager has no bool mean)
        b = torch.rand(4, 5) > 0.5
        check(lambda x, s: (torch.scatter_reduce(x, 0, idx, s, reduce),
                            torch.scatter_reduce(x, 0, idx, s, reduce, include_self=False)),
              b, torch.rand(3, 5) > 0.5)


def test_scatter_out_of_range_is_an_error():
    m = Fn(lambda x, i, s: torch.scatter_add(x, 0, i, s))
    x, s = randn(4, 3), randn(2, 3)
    compiled = kiln.trace(m, (x, torch.zeros(2, 3, dtype=torch.long), s), fallback=False)
    with pytest.raises(ValueError, match="out of range"):
        compiled(x, torch.tensor([[0, 1, 4], [0, 0, 0]]), s)
    with pytest.raises(ValueError, match="out of range"):
        compiled(x, torch.tensor([[0, 1, 2], [-1, 0, 0]]), s)  # negative: out of range, as eager


def test_index_put():
    def fn(x, i, j, k, v, w, vi):
        put = aten.index_put.default
        return (put(x, [i], v[:3, :1], True),                  # duplicates summed
                put(x, [i, j], w, True),                       # two adjacent indices
                put(x, [None, k], w[:1, None]),                # a None first
                put(x, [i[:1], None, j[:1]], w[:1], True),     # not adjacent: B goes first
                put(x, [torch.tensor([2, 0])], v[:2]),         # distinct: assignment
                put(vi, [i, j], vi[0, :3, :1], True))
    i = torch.tensor([0, 2, 0])
    j = torch.tensor([1, -1, 1])
    check(fn, randn(3, 4, 5), i, j, torch.tensor([3, 1]), randn(3, 4, 5), randn(3, 1), ints(3, 4, 5), tol=RED)


def test_index_put_mask_and_bool():
    # A boolean mask: the result's shape does not depend on the mask's values.
    def fn(x, m, m2, v, b, bi):
        put = aten.index_put.default
        return (put(x, [m], v), put(x, [m], v[:1], True), put(x, [None, m2], v[:1, :1]),
                put(x, [m], torch.tensor(2.5)),
                put(b, [bi], b[:2], True),                     # bool accumulate: or
                put(b, [m[:3]], b[0]))
    m = torch.tensor([True, False, True, True])
    check(fn, randn(4, 5), m, torch.tensor([False, True, True, False, True]), randn(1, 5),
          torch.rand(3, 5) > 0.5, torch.tensor([0, 0]), tol=RED)


def test_index_put_out_of_range_is_an_error():
    m = Fn(lambda x, i, j, v: torch.index_put(x, (i, j), v, accumulate=True))
    x, v = randn(3, 4), randn(2)
    ok = (torch.tensor([0, 1]), torch.tensor([0, 3]))
    compiled = kiln.trace(m, (x, *ok, v), fallback=False)
    assert_close(compiled(x, *ok, v), m(x, *ok, v), **RED)
    # (0, 4) would alias element (1, 0) of the flattened axes: still an error.
    with pytest.raises(ValueError, match="out of range"):
        compiled(x, torch.tensor([0, 1]), torch.tensor([4, 0]), v)


def test_index_multi():
    def fn(x, i, j, k):
        return x[i, j], x[i, :, j], x[:, i, j], x[i.view(3, 1), j], x[i, j, k], x[:, i, None], x[i, -1]
    i, j = torch.tensor([0, 2, -1]), torch.tensor([1, 0, 3])
    check(fn, randn(3, 4, 5), i, j, torch.tensor([4, 0, 2]))
    compiled = kiln.trace(Fn(lambda x, a, b: x[a, b]), (randn(3, 4), i, j), fallback=False)
    with pytest.raises(ValueError, match="out of range"):
        compiled(randn(3, 4), torch.tensor([0, 3, 1]), j)


def test_embedding_dense_backward():
    def fn(g, idx):
        return (aten.embedding_dense_backward(g, idx, 10, -1, False),
                aten.embedding_dense_backward(g, idx, 10, 3, False))
    idx = torch.tensor([[1, 3, 1], [9, 0, 3]])
    check(fn, randn(2, 3, 6), idx, tol=RED)


def test_embedding_training_grad_native():
    # The weight gradient of an embedding: its backward graph must run in kiln
    # (no fallback) and agree with eager's.
    emb = nn.Embedding(12, 5, padding_idx=0)
    idx = torch.tensor([[1, 0, 4, 4], [11, 2, 1, 0]])
    ref = nn.Embedding(12, 5, padding_idx=0)
    ref.load_state_dict(emb.state_dict())
    gw = torch.randn(2, 4, 5)
    g = torch.ops.aten.embedding_dense_backward(gw, idx, 12, 0, False)
    (ref(idx) * gw).sum().backward()
    assert_close(g, ref.weight.grad)
    got = kiln.trace(Fn(lambda a, b: aten.embedding_dense_backward(a, b, 12, 0, False)), (gw, idx),
                     fallback=False)(gw, idx)
    assert_close(got, ref.weight.grad, **RED)


# ---- sort and topk ---------------------------------------------------------------------------


def test_sort_topk():
    def fn(x, i, b):
        return (*torch.sort(x), *torch.sort(x, 0, descending=True), *torch.sort(x, stable=True, dim=0),
                *torch.sort(i, dim=-1, stable=True), *torch.sort(i, dim=1, descending=True, stable=True),
                *torch.sort(b, dim=0, stable=True), *torch.topk(x, 3), *torch.topk(x, 2, 0, largest=False),
                *torch.topk(x, 0))
    x = randn(5, 7)
    x[1, 2] = x[3, 4] = float("nan")
    x[0, :3] = -5.0  # ties (kept out of the top-k, where eager's tie order is unspecified)
    check(fn, x, ints(4, 9, lo=-2, hi=3), torch.rand(6, 2) > 0.5, equal_nan=True)
    # topk among equal integers: eager's choice is not specified; compare values.
    m = Fn(lambda t: torch.topk(t, 4, 1)[0])
    t = ints(3, 8, lo=-2, hi=2)
    check(m, t)


def test_embedding_training_has_no_fallback():
    # torch.compile training: the backward graph's embedding_dense_backward
    # (kept whole, registered keep_whole in optable/movement.py) runs in kiln, so kiln
    # warns about no CPU fallback, and SGD steps match eager's.
    import copy
    import warnings

    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(20, 8, padding_idx=1), nn.Flatten(), nn.Linear(24, 5))
    ref = copy.deepcopy(model)
    batches = [(torch.randint(0, 20, (4, 3)), torch.randint(0, 5, (4,))) for _ in range(3)]

    def train(m):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for x, y in batches:
            opt.zero_grad()
            F.cross_entropy(m(x), y).backward()
            opt.step()

    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(torch.compile(model, backend="kiln"))
    train(ref)
    fallbacks = [str(w.message) for w in caught if "fallback" in str(w.message)]
    assert not fallbacks, fallbacks
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_new_ops_survive_save_and_load(tmp_path):
    # PAD, STRIDED_SCATTER, SCATTER, SCAN and ARGSORT go through the .kiln
    # file (their params re-validated by the reader's shape inference).
    def fn(x, idx):
        return (F.pad(x, (1, 2), mode="reflect"), torch.slice_scatter(x, x[:, :2] * 2, 1, 0, 2),
                torch.scatter_add(x, 1, idx, x), torch.cumsum(x, 0), torch.sort(x, 1)[1])
    x, idx = randn(3, 4), torch.tensor([[0, 0, 3, 1]] * 3)
    compiled = kiln.trace(Fn(fn), (x, idx), fallback=False)
    path = tmp_path / "movement.kiln"
    kiln.save(compiled, path)
    assert_close(kiln.load(path)(x, idx), fn(x, idx), **RED)
