"""grid_sample (aten.grid_sampler_2d), fold (aten.col2im) and embedding_bag
(aten._embedding_bag) through kiln against eager.

Each module is compiled with kiln.trace(fallback=False), so an op kiln does
not run natively fails the test instead of running in eager. Tolerances:
  EXACT  nearest sampling and bag max move values; col2im adds in eager's
         order: bit for bit.
  GRID   bilinear sampling: kiln reproduces eager's CPU arithmetic (with
         the two multiply-adds eager's build fuses), so it agrees bit for
         bit on this machine's torch; a torch built without those fusions
         would differ by a few ulp, which 2e-6 relative / 1e-6 absolute covers
         for values O(1).
  BAG    bag sums and means: eager may sum through fbgemm (fused multiply-
         adds for per-sample weights) or divide by the count instead of
         multiplying: 1e-6 relative / 1e-6 absolute.
NaN and Inf are placed in grids, images, tables and columns; equal_nan.
"""

import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import kiln
from conftest import Fn

EXACT = dict(rtol=0.0, atol=0.0)
GRID = dict(rtol=2e-6, atol=1e-6)
BAG = dict(rtol=1e-6, atol=1e-6)


def check(fn, *inputs, tol=EXACT):
    model = Fn(fn)
    compiled = kiln.trace(model, inputs, fallback=False)
    got, want = compiled(*inputs), model(*inputs)
    assert_close(got, want, equal_nan=True, **tol)
    return compiled


def _grid(n, ho, wo, seed):
    g = torch.Generator().manual_seed(seed)
    grid = torch.randn(n, ho, wo, 2, generator=g) * 1.6  # many points outside [-1, 1]
    grid[0, 0, 0] = torch.tensor([float("nan"), 0.2])
    grid[0, 0, 1] = torch.tensor([float("inf"), -0.3])
    grid[0, 1, 0] = torch.tensor([0.1, -float("inf")])
    grid[-1, -1, -1] = torch.tensor([1e10, -1e10])
    grid[-1, 0, 0] = torch.tensor([-1.0, 1.0])  # the corners exactly
    grid[-1, 0, 1] = torch.tensor([1.0, -1.0])
    return grid


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["bilinear", "nearest"], ["zeros", "border", "reflection"], [False, True])))
def test_grid_sample_matches_eager(mode, padding, align):
    # A 1-pixel axis is the degenerate case of align_corners (no span).
    for h, w in [(5, 7), (1, 4)] + ([(1, 1)] if align else []):
        x = torch.randn(2, 3, h, w)
        x[1, 2, 0, 0] = float("inf")
        check(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align),
              x, _grid(2, 4, 6, h * 10 + w), tol=GRID if mode == "bilinear" else EXACT)


def test_grid_sample_bicubic_falls_back():
    x, g = torch.randn(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1
    fn = Fn(lambda x, g: F.grid_sample(x, g, mode="bicubic", align_corners=False))
    with pytest.raises(kiln.UnsupportedOpError, match="grid_sampler_2d"):
        kiln.trace(fn, (x, g), fallback=False)
    with pytest.warns(UserWarning):
        compiled = kiln.trace(fn, (x, g))
    assert_close(compiled(x, g), fn(x, g), rtol=0, atol=0)


@pytest.mark.parametrize("out,kernel,dilation,padding,stride", [
    ((5, 6), (2, 3), 1, 0, 1),
    ((7, 5), (3, 2), (2, 1), (1, 0), (2, 3)),
    ((4, 4), 2, 1, 1, 2),
    ((1, 1), 1, 1, 0, 1),
])
def test_fold_matches_eager(out, kernel, dilation, padding, stride):
    kw = dict(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    blocks = F.unfold(torch.zeros(1, 1, *out), **kw).shape[-1]
    k = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    x = torch.randn(2, 3 * k[0] * k[1], blocks)
    x[0, 0, 0] = float("inf")
    x[1, -1, -1] = float("nan")
    check(lambda x: F.fold(x, out, **kw), x)
    check(lambda x: F.fold(x, out, **kw), x[1])  # unbatched


def test_fold_unfold_round_trip():
    x = torch.randn(2, 3, 6, 6)
    check(lambda x: F.fold(F.unfold(x, 3, padding=1), (6, 6), 3, padding=1), x)


def _bags():
    weight = torch.randn(12, 5)
    weight[3, 1] = float("nan")
    weight[4, 2] = float("inf")
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 11, 0, 1, 7])
    return weight, indices


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 4])
def test_embedding_bag_matches_eager(mode, last, padding_idx):
    weight, indices = _bags()
    index_dtype = torch.int32 if last else torch.int64  # both index dtypes, half the traces
    indices = indices.to(index_dtype)
    offsets = torch.tensor([0, 3, 3, 7] + ([11] if last else []), dtype=index_dtype)
    tol = EXACT if mode == "max" else BAG
    check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, include_last_offset=last,
                                          padding_idx=padding_idx), weight, indices, offsets, tol=tol)
    if mode == "sum":
        psw = torch.rand(len(indices))
        check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode=mode, include_last_offset=last,
                                                 padding_idx=padding_idx, per_sample_weights=p),
              weight, indices, offsets, psw, tol=tol)


def test_embedding_bag_2d_input_and_module():
    bag = nn.EmbeddingBag(10, 4, mode="mean")
    x = torch.randint(0, 10, (3, 5))
    compiled = kiln.trace(bag, (x,), fallback=False)
    assert_close(compiled(x), bag(x), **BAG)


def test_embedding_bag_bad_indices_are_errors():
    weight, indices = _bags()
    offsets = torch.tensor([0, 3, 3, 7])
    compiled = check(lambda w, i, o: F.embedding_bag(i, w, o), weight, indices, offsets, tol=BAG)
    for bad in (12, -1, 1 << 40):
        idx = indices.clone()
        idx[5] = bad
        with pytest.raises(ValueError, match="out of range"):
            compiled(weight, idx, offsets)
    with pytest.raises(ValueError, match="offsets"):
        compiled(weight, indices, torch.tensor([0, 3, 2, 7]))
    with pytest.raises(ValueError, match="offsets"):
        compiled(weight, indices, torch.tensor([0, 3, 3, 12]))


# ---- avg_pool2d / avg_pool3d with divisor_override (AVG_POOL2D param 10) ----------------
# A window sum in kiln's order (3-d: two separable passes) divided by the
# override: 1e-5 relative / 1e-6 absolute, as the other pooling tests.
POOL = dict(rtol=1e-5, atol=1e-6)
aten = torch.ops.aten


@pytest.mark.parametrize("kernel,stride,padding,ceil,include,divisor", [
    (3, 2, 1, False, True, 5), (2, 1, 0, True, False, 3), (3, 1, 1, True, True, 7), (2, 2, 0, False, True, 1),
    (2, 1, 1, True, False, -2)])  # eager divides by a negative override too
def test_avg_pool_divisor_override(kernel, stride, padding, ceil, include, divisor):
    x = torch.randn(2, 3, 7, 6)
    x[0, 0, 0, 0] = float("inf")
    x[1, 1, 2, 2] = float("nan")
    check(lambda t: F.avg_pool2d(t, kernel, stride, padding, ceil, include, divisor_override=divisor), x, tol=POOL)
    check(lambda t: F.avg_pool3d(t, kernel, stride, padding, ceil, include, divisor_override=divisor),
          torch.randn(2, 3, 5, 7, 6), tol=POOL)
    k2, s2, p2 = [kernel] * 2, [stride] * 2, [padding] * 2
    dy = torch.randn(F.avg_pool2d(x, kernel, stride, padding, ceil, include).shape)
    check(lambda dy, x: aten.avg_pool2d_backward.default(dy, x, k2, s2, p2, ceil, include, divisor),
          dy, torch.randn(2, 3, 7, 6), tol=POOL)
