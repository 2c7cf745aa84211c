"""Op-level tests of the training ops (kiln/optable/nn.py) against eager:
batch norm with batch statistics (and its running-stat update), group norm
with its saved mean / rstd, convolution_backward, max pooling's indices and
the max / average / adaptive-average pooling backward ops. Each module calls
the ATen op directly, is compiled by kiln.trace(fallback=False) (so an
unsupported op fails the test) and must match eager.

Tolerances: fp32 rtol 1e-5 / atol 1e-5 for elementwise-and-small-sum ops
(batch statistics over <= 512 elements, pooling), atol 1e-4 for the
convolution gradients (sums of up to a few hundred products of O(1) values
in another order than torch's: ~1e-6 absolute). Indices must match exactly.
"""
import pytest
import torch

import kiln

aten = torch.ops.aten


class Call(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def check(fn, *args, rtol=1e-5, atol=1e-5, exact=()):
    want = fn(*args)
    mod = kiln.trace(Call(fn), args, fallback=False)
    got = mod(*args)
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        if i in exact or not w.dtype.is_floating_point:
            assert g.dtype == w.dtype and torch.equal(g, w), (i, g, w)
        else:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True, msg=lambda m: f"output {i}: {m}")
    return mod


# ---- batch norm / group norm ----------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (2, 5), (3, 4, 7), (1, 2, 1, 1, 3)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_functional_training(shape, affine):
    torch.manual_seed(0)
    c = shape[1]
    x = torch.randn(shape) * 3 + 1
    w, b = (torch.randn(c), torch.randn(c)) if affine else (None, None)
    rm, rv = torch.randn(c), torch.rand(c) + 0.5

    def fn(x, rm, rv, *wb):
        wt, bs = wb if wb else (None, None)
        return aten._native_batch_norm_legit_functional.default(x, wt, bs, rm, rv, True, 0.1, 1e-5)

    check(fn, x, rm, rv, *((w, b) if affine else ()))


def test_batch_norm_functional_eval():
    torch.manual_seed(0)
    x, w, b, rm, rv = torch.randn(2, 3, 4, 4), torch.randn(3), torch.randn(3), torch.randn(3), torch.rand(3) + 0.5
    fn = lambda x, w, b, rm, rv: aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, False, 0.1, 1e-5)
    check(fn, x, w, b, rm, rv)


@pytest.mark.parametrize("shape", [(4, 3, 5, 6), (6, 4)])
def test_batch_norm_no_stats(shape):
    torch.manual_seed(0)
    c = shape[1]
    x, w, b = torch.randn(shape), torch.randn(c), torch.randn(c)
    fn = lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)
    check(fn, x, w, b)
    # F.batch_norm without running statistics reaches the same op.
    check(lambda x, w, b: torch.nn.functional.batch_norm(x, None, None, w, b, training=True), x, w, b)


def test_batch_norm_legit_in_place_training_updates_the_callers_statistics():
    """export functionalises the running-stat update into user-input
    mutations: one kiln graph (no fallback) that writes the caller's
    statistics, as eager does."""
    torch.manual_seed(2)
    x = torch.randn(2, 3, 4)
    model = Call(lambda x, rm, rv: aten._native_batch_norm_legit.default(x, None, None, rm, rv, True, 0.1, 1e-5))
    compiled = kiln.trace(model, (x, torch.zeros(3), torch.ones(3)), fallback=False)
    assert isinstance(compiled, kiln.KilnModule)
    got_m, got_v, want_m, want_v = torch.zeros(3), torch.ones(3), torch.zeros(3), torch.ones(3)
    for _ in range(2):
        x = torch.randn(2, 3, 4) * 2 + 1
        for g, w in zip(compiled(x, got_m, got_v), model(x, want_m, want_v)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_m, want_m, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(got_v, want_v, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got_m, torch.zeros(3))


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 5), 3), ((3, 4, 7), 2), ((2, 8), 4), ((1, 6, 2, 2, 2), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_native_group_norm(shape, groups, affine):
    torch.manual_seed(0)
    n, c = shape[:2]
    hxw = 1
    for s in shape[2:]:
        hxw *= s
    x = torch.randn(shape) * 2 - 1
    w, b = (torch.randn(c), torch.randn(c)) if affine else (None, None)

    def fn(x, *wb):
        wt, bs = wb if wb else (None, None)
        return aten.native_group_norm.default(x, wt, bs, n, c, hxw, groups, 1e-5)

    check(fn, x, *((w, b) if affine else ()))


# ---- convolution backward ---------------------------------------------------------

CONV_CASES = [
    # x shape, w shape, stride, padding, dilation, groups
    ((2, 3, 9, 9), (8, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1),
    ((2, 4, 11, 8), (6, 4, 3, 3), [2, 2], [1, 1], [1, 1], 1),
    ((1, 4, 10, 12), (4, 2, 3, 2), [1, 2], [2, 0], [2, 1], 2),
    ((2, 6, 7, 7), (6, 1, 3, 3), [1, 1], [1, 1], [1, 1], 6),   # depthwise
    ((2, 8, 6, 6), (4, 8, 1, 1), [2, 2], [0, 0], [1, 1], 1),   # 1x1 stride 2
    ((2, 3, 10), (5, 3, 3), [2], [1], [1], 1),                 # 1-d
    ((1, 3, 8, 8), (2, 3, 8, 8), [1, 1], [0, 0], [1, 1], 1),   # window = input
]


MASKS = [(True, True, True), (True, False, False), (False, True, True), (False, True, False)]


@pytest.mark.parametrize("case", CONV_CASES)
def test_convolution_backward(case):
    xs, ws, stride, padding, dilation, groups = case
    torch.manual_seed(len(xs) + ws[0])
    x, w = torch.randn(xs), torch.randn(ws)
    y = torch.nn.functional.conv2d if len(xs) == 4 else torch.nn.functional.conv1d
    dy = torch.randn(y(x, w, None, stride, padding, dilation, groups).shape)

    def fn(dy, x, w):  # every output_mask in one module (one trace)
        outs = []
        for mask in MASKS:
            outs += aten.convolution_backward.default(dy, x, w, [ws[0]], stride, padding, dilation, False,
                                                      [0] * len(stride), groups, list(mask))
        return tuple(o for o in outs if o is not None)  # a module returns tensors only

    check(fn, dy, x, w, rtol=1e-4, atol=1e-4)


def test_conv_training_grads_match_eager():
    # The gradients autograd asks for, end to end through torch.compile.
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    ref = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    ref.load_state_dict(conv.state_dict())
    x = torch.randn(2, 4, 9, 9, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    torch._dynamo.reset()
    torch.compile(conv, backend="kiln")(x).square().sum().backward()
    ref(xr).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(conv.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(conv.bias.grad, ref.bias.grad, rtol=1e-4, atol=1e-4)


# ---- pooling ---------------------------------------------------------------------

POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    ([2, 2], [2, 2], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [1, 1], True),
    ([3, 2], [1, 2], [1, 0], [2, 1], False),
    ([2, 2], [], [0, 0], [1, 1], False),  # stride [] = kernel
]


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (3, 7, 7)])
def test_max_pool2d_with_indices_and_backward(case, shape):
    kernel, stride, padding, dilation, ceil = case
    torch.manual_seed(1)
    # Few distinct values: ties, where torch keeps the first maximum.
    x = torch.randint(-3, 3, shape).float()
    _, idx = aten.max_pool2d_with_indices.default(x, kernel, stride, padding, dilation, ceil)
    dy = torch.randn(idx.shape)

    def fn(x, dy, idx):  # forward (values, indices) and backward in one trace
        fw = aten.max_pool2d_with_indices.default(x, kernel, stride, padding, dilation, ceil)
        bw = aten.max_pool2d_with_indices_backward.default(dy, x, kernel, stride, padding, dilation, ceil, idx)
        return fw + (bw,)

    check(fn, x, dy, idx)


def test_max_pool2d_indices_nan_and_inf():
    x = torch.randn(1, 2, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 0, 1] = float("nan")
    x[0, 1] = float("-inf")
    check(lambda x: aten.max_pool2d_with_indices.default(x, [3, 3], [2, 2], [1, 1]), x)


def test_max_pool2d_backward_bad_index_is_an_error():
    x, dy = torch.randn(1, 1, 4, 4), torch.randn(1, 1, 2, 2)
    idx = torch.tensor([[[[0, 3], [8, 15]]]])
    bw = lambda dy, x, idx: aten.max_pool2d_with_indices_backward.default(dy, x, [2, 2], [2, 2], [0, 0], [1, 1],
                                                                          False, idx)
    mod = check(bw, dy, x, idx)
    with pytest.raises(Exception, match="outside"):
        mod(dy, x, torch.tensor([[[[0, 3], [16, -1]]]]))


@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[3] == [1, 1]])
@pytest.mark.parametrize("shape", [(2, 3, 9, 8), (3, 7, 7)])
def test_avg_pool2d_backward(case, shape):
    kernel, stride, padding, _, ceil = case
    torch.manual_seed(2)
    x = torch.randn(shape)
    y = aten.avg_pool2d.default(x, kernel, stride, padding, ceil, True)
    dy = torch.randn(y.shape)
    check(lambda dy, x: tuple(aten.avg_pool2d_backward.default(dy, x, kernel, stride, padding, ceil, include, None)
                              for include in (True, False)), dy, x)


@pytest.mark.parametrize("shape,out", [((2, 3, 8, 6), (1, 1)), ((2, 3, 8, 6), (4, 3)), ((3, 6, 6), (2, 3))])
def test_adaptive_avg_pool2d_backward(shape, out):
    torch.manual_seed(3)
    x, dy = torch.randn(shape), torch.randn(shape[:-2] + out)
    check(lambda dy, x: aten._adaptive_avg_pool2d_backward.default(dy, x), dy, x)


@pytest.mark.parametrize("shape,out", [((1, 2, 7, 5), (3, 2)), ((2, 3, 4), (6, 5)), ((2, 2, 9, 9), (4, 9))])
def test_adaptive_avg_pool2d_uneven_forward_and_backward(shape, out):
    # Uneven and overlapping (growing) windows: kiln's ADAPTIVE_AVG_POOL2D ops.
    torch.manual_seed(4)
    x, dy = torch.randn(shape), torch.randn(shape[:-2] + out)
    check(lambda dy, x: (aten._adaptive_avg_pool2d.default(x, list(out)),
                         aten._adaptive_avg_pool2d_backward.default(dy, x)), dy, x)


@pytest.mark.parametrize("shape,reps", [((3,), (4,)), ((2, 3), (2, 1, 3)), ((2, 1, 3), (1, 4, 2)), ((), (2, 3)),
                                        ((2, 3), (1, 1))])
def test_repeat(shape, reps):
    x = torch.randn(shape)
    check(lambda x: x.repeat(*reps), x)


@pytest.mark.parametrize("size,scale", [(None, 2.0), (None, (1.5, 0.75)), ((7, 5), None), ((3, 2), None),
                                        (None, 1.0 / 3)])
def test_upsample_nearest2d(size, scale):
    x = torch.randn(2, 3, 6, 4)
    x[0, 0, 0, 0] = float("inf")
    check(lambda x: torch.nn.functional.interpolate(x, size=size, scale_factor=scale, mode="nearest"), x)


@pytest.mark.parametrize("size,scale", [(None, 2.0), (None, 3.0), ((12, 8), None), (None, (2.0, 1.0))])
def test_upsample_nearest2d_by_whole_factors_is_one_copy(size, scale):
    """Source indices that repeat each row and column a whole number of
    times (torch's own, checked) lower to one copy of a stride-0 view, not
    two gathers; bit for bit as eager."""
    x = torch.randn(2, 3, 6, 4)
    fn = lambda x: torch.nn.functional.interpolate(x, size=size, scale_factor=scale, mode="nearest")  # noqa: E731
    k = kiln.trace(Call(fn), (x,), fallback=False)
    assert torch.equal(k(x), fn(x))
    ops = str(kiln.explain(k))
    assert "gather" not in ops and "strided_copy" in ops, ops


@pytest.mark.parametrize("size,scale", [((7, 5), None), ((3, 2), None), (None, 2.0), (None, (1.5, 0.75)),
                                        ((1, 1), None), (None, 1.0 / 3)])
@pytest.mark.parametrize("align", [False, True])
def test_upsample_bilinear2d(size, scale, align):
    torch.manual_seed(5)
    x = torch.randn(2, 3, 6, 4)
    check(lambda x: torch.nn.functional.interpolate(x, size=size, scale_factor=scale, mode="bilinear",
                                                    align_corners=align), x)


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,include", [
    (3, 1, 0, False, True), (4, 2, 1, True, False), (2, None, 1, False, True)])
def test_avg_pool1d(kernel, stride, padding, ceil_mode, include):
    x = torch.randn(2, 3, 17)
    check(lambda t: torch.nn.functional.avg_pool1d(t, kernel, stride, padding, ceil_mode, include), x)


@pytest.mark.parametrize("out", [1, 5, 7, 17])
def test_adaptive_avg_pool1d(out):
    check(lambda t: torch.nn.functional.adaptive_avg_pool1d(t, out), torch.randn(2, 3, 17))
    check(lambda t: torch.nn.functional.adaptive_avg_pool1d(t, out), torch.randn(3, 17))


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.5, float("inf")])
def test_cdist_and_pdist(p):
    torch.manual_seed(0)
    a, b = torch.randn(2, 5, 7), torch.randn(2, 4, 7)
    check(lambda x, y: torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist"), a, b, rtol=1e-4)
    check(lambda x: torch.nn.functional.pdist(x, p=p), torch.randn(6, 3), rtol=1e-4)


def test_dropout_that_drops_nothing_is_exact():
    # No random node: the mask is all true (random dropout: test_random.py).
    check(lambda t: torch.ops.aten.native_dropout(t, 0.0, True), torch.randn(4, 5))


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode,include", [
    ((2, 2, 2), None, 0, False, True), ((2, 3, 4), (1, 2, 2), (0, 1, 2), True, True),
    ((3, 3, 2), (2, 1, 2), (1, 1, 1), True, False), (2, 1, 1, False, False)])
def test_avg_pool3d_is_two_separable_2d_pools(kernel, stride, padding, ceil_mode, include):
    x = torch.randn(2, 3, 5, 6, 7)
    check(lambda t: torch.nn.functional.avg_pool3d(t, kernel, stride, padding, ceil_mode, include), x)


@pytest.mark.parametrize("out", [(1, 1, 1), (2, 3, 4), (5, 6, 7), (3, None, 2)])
def test_adaptive_avg_pool3d(out):
    check(lambda t: torch.nn.functional.adaptive_avg_pool3d(t, out), torch.randn(2, 3, 5, 6, 7))
    check(lambda t: torch.nn.functional.adaptive_avg_pool3d(t, out), torch.randn(3, 5, 6, 7))


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", [
    (2, None, 0, 1, False), ((3, 2, 3), (2, 1, 2), (1, 1, 0), 1, True), (3, 2, 1, (2, 1, 1), False)])
def test_max_pool3d_values_are_two_separable_2d_pools(kernel, stride, padding, dilation, ceil_mode):
    x = torch.randn(2, 3, 7, 6, 7)
    x[0, 1, 2, 3, 4] = float("nan")
    check(lambda t: torch.nn.functional.max_pool3d(t, kernel, stride, padding, dilation, ceil_mode), x)
    with pytest.raises(kiln.UnsupportedOpError, match="indices"):
        kiln.trace(Call(lambda t: torch.nn.functional.max_pool3d(t, kernel, stride, padding, dilation, ceil_mode,
                                                                 return_indices=True)), (x,), fallback=False)
