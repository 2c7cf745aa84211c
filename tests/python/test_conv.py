"""Convolution, pooling and batch norm through kiln.trace, compared with
eager PyTorch: F.conv2d variants (stride, padding, dilation, groups,
depthwise, 1x1, 7x7, 1-d), max/avg pooling (ceil_mode, count_include_pad,
dilation), adaptive average pooling, a small CNN with batch norm and residual
blocks, and a ResNet-18 (defined here: torchvision is not installed).

Tolerances: fp32 with rtol/atol 1e-4 (conftest.FP32_TOL) for single ops,
whose dot products are at most a few hundred terms of N(0, 1) inputs times
U(-1/sqrt(K), 1/sqrt(K)) weights. Whole networks stack ~20 convolutions and
fold batch norm into the weights (a different rounding order from eager's
separate normalisation), so they use rtol/atol 1e-3 on outputs of order 1.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import FP32_TOL, isa_params, randomize_batch_norms
from kiln.module import KilnModule

NET_TOL = dict(rtol=1e-3, atol=1e-3)


class Fn(nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList([nn.Parameter(p, requires_grad=False) for p in params])

    def forward(self, x):
        return self.fn(x, *self.params)


def check(model, x, **tol):
    model.eval()
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    got = compiled(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, **(tol or FP32_TOL))
    return compiled


def _w(o, cg, kh, kw):
    return torch.empty(o, cg, kh, kw).uniform_(-1, 1) / (cg * kh * kw) ** 0.5


CONV_CASES = [
    # (N, C, H, W), O, k, kwargs
    ((1, 3, 16, 16), 8, 3, dict(padding=1)),
    ((2, 5, 11, 9), 6, 3, dict(stride=2, padding=1)),
    ((1, 4, 13, 10), 5, (3, 2), dict(stride=(1, 2), padding=(2, 0), dilation=(2, 1))),
    ((2, 16, 7, 9), 24, 1, dict()),
    ((1, 16, 8, 8), 8, 1, dict(stride=2)),
    ((1, 8, 9, 9), 12, 3, dict(padding=1, groups=4)),
    ((2, 7, 12, 10), 7, 3, dict(padding=1, groups=7)),
    ((1, 6, 15, 15), 6, 5, dict(stride=2, padding=2, groups=6)),
    ((1, 3, 33, 31), 16, 7, dict(stride=2, padding=3)),
    ((1, 4, 10, 10), 8, 3, dict(padding="same", dilation=2)),
    # patch embeddings (kernel = stride: one GEMM over gathered patches), with
    # pixels past the last whole patch dropped, and rectangular patches
    ((2, 3, 33, 30), 16, 4, dict(stride=4)),
    ((1, 5, 12, 12), 7, (2, 3), dict(stride=(2, 3))),
]


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv2d(case):
    shape, o, k, kw = CONV_CASES[case]
    bias = case % 2 == 1
    kh, kwid = (k, k) if isinstance(k, int) else k
    w = _w(o, shape[1] // kw.get("groups", 1), kh, kwid)
    params = [w] + ([torch.randn(o)] if bias else [])
    fn = (lambda x, w, b: F.conv2d(x, w, b, **kw)) if bias else (lambda x, w: F.conv2d(x, w, **kw))
    check(Fn(fn, *params), torch.randn(*shape))


def test_conv1d():
    w = torch.randn(6, 4, 3) / 12 ** 0.5
    check(Fn(lambda x, w: F.conv1d(x, w, stride=2, padding=1), w), torch.randn(2, 4, 17))


def test_unbatched_conv2d():
    check(Fn(lambda x, w: F.conv2d(x, w, padding=1), _w(4, 3, 3, 3)), torch.randn(3, 8, 8))


CONV3D_CASES = [
    # (N, C, D, H, W) or unbatched (C, D, H, W), O, k, kwargs
    ((2, 3, 5, 9, 8), 8, 3, dict(padding=1)),
    ((1, 4, 7, 10, 9), 6, (2, 3, 3), dict(stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1), groups=2)),
    ((1, 6, 6, 5, 5), 6, 3, dict(padding=2, dilation=(2, 1, 1), groups=6)),
    ((3, 5, 4, 4), 4, 1, dict()),
    ((2, 3, 5, 9, 8), 6, (2, 4, 4), dict(stride=(2, 4, 4))),  # a clip's patches, leftovers dropped
    # Qwen2-VL's patch embedding: 2 frames of 14 x 14 pixels per patch, kernel = stride.
    ((10, 3, 2, 14, 14), 32, (2, 14, 14), dict(stride=(2, 14, 14))),
]


@pytest.mark.parametrize("case", range(len(CONV3D_CASES)))
def test_conv3d_runs_whole_in_kiln(case):
    """conv3d as one conv2d over the output depths (optable/core.py:
    _convolution3d), against float64 (sums of up to 392 products of
    ~N(0, 1) inputs and weights scaled by 1/sqrt(K): FP32_TOL)."""
    shape, o, k, kw = CONV3D_CASES[case]
    bias = case % 2 == 0
    m = nn.Conv3d(shape[-4], o, k, bias=bias, **kw).eval()
    x = torch.randn(*shape)
    compiled = kiln.trace(m, x)
    assert isinstance(compiled, KilnModule)  # whole: no eager pieces
    want = F.conv3d(x.double(), m.weight.double(), None if m.bias is None else m.bias.double(), m.stride,
                    m.padding, m.dilation, m.groups)
    got = compiled(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, **FP32_TOL)


def test_conv3d_over_symbolic_sizes():
    """One graph for video clips of any batch, length and frame size: the
    depth gather, the batch of N * Do images and the conv2d all take
    kiln's size expressions."""
    from torch._dynamo.utils import counters
    m = nn.Sequential(nn.Conv3d(3, 8, 3, padding=1, stride=(2, 1, 1)), nn.ReLU(),
                      nn.Conv3d(8, 4, (2, 3, 3), stride=(1, 2, 2))).eval()
    torch._dynamo.reset()
    counters.clear()
    g = torch.compile(m, backend="kiln", dynamic=True)
    with torch.no_grad():
        for shape in ((2, 3, 6, 9, 8), (3, 3, 9, 12, 7)):
            x = torch.randn(*shape)
            h = F.relu(F.conv3d(x.double(), m[0].weight.double(), m[0].bias.double(), (2, 1, 1), 1))
            want = F.conv3d(h, m[2].weight.double(), m[2].bias.double(), (1, 2, 2))
            torch.testing.assert_close(g(x).double(), want, **FP32_TOL)
    assert counters["kiln"]["whole"] == 1 and counters["kiln"]["graphs"] == 1, dict(counters["kiln"])
    torch._dynamo.reset()


POOL_CASES = [
    (F.max_pool2d, dict(kernel_size=3, stride=2, padding=1)),
    (F.max_pool2d, dict(kernel_size=2)),
    (F.max_pool2d, dict(kernel_size=3, stride=2, ceil_mode=True)),
    (F.max_pool2d, dict(kernel_size=3, stride=1, padding=1, dilation=2)),
    (F.max_pool2d, dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0))),
    (F.avg_pool2d, dict(kernel_size=2)),
    (F.avg_pool2d, dict(kernel_size=3, stride=2, padding=1)),
    (F.avg_pool2d, dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    (F.avg_pool2d, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    (F.avg_pool2d, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
]


@pytest.mark.parametrize("fn,kw", POOL_CASES)
def test_pool2d(fn, kw):
    check(Fn(lambda x: fn(x, **kw)), torch.randn(2, 3, 11, 12))


@pytest.mark.parametrize("fn,kw", [(F.max_pool2d, dict(kernel_size=3, stride=2, ceil_mode=True)),
                                   (F.avg_pool2d, dict(kernel_size=3, stride=2, ceil_mode=True)),
                                   (F.avg_pool2d, dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                                       count_include_pad=False))])
def test_ceil_mode_window_longer_than_the_input(fn, kw):
    """In ceil mode torch pools 2 rows with a 3-row window (one output row,
    the window hanging past the end). kiln's shape rule refused it: such
    inputs ran in eager, and a graph compiled with dynamic sizes raised at
    the new size (fuzzer seed 8484, graph 994)."""
    x = torch.randn(2, 3, 2, 6)
    compiled = check(Fn(lambda x: fn(x, **kw)), x)
    assert isinstance(compiled, KilnModule)
    torch._dynamo.reset()
    g = torch.compile(lambda x: fn(x, **kw), backend="kiln", dynamic=True)
    for shape in ((1, 3, 7, 9), (1, 3, 2, 6), (2, 1, 2, 2)):
        x = torch.randn(*shape)
        torch.testing.assert_close(g(x), fn(x, **kw), **FP32_TOL)


def test_max_pool_propagates_nan():
    x = torch.randn(1, 2, 6, 6)
    x[0, 1, 2, 3] = float("nan")
    check(Fn(lambda x: F.max_pool2d(x, 3, 2, 1)), x, equal_nan=True, **FP32_TOL)


@pytest.mark.parametrize("out", [1, 2, (3, 2), (None, 3)])
def test_adaptive_avg_pool2d(out):
    check(nn.AdaptiveAvgPool2d(out), torch.randn(2, 4, 6, 6))


@pytest.mark.filterwarnings("ignore")
def test_adaptive_avg_pool2d_uneven_falls_back():
    # Overlapping windows (6 -> 4) are not an avg pool: kiln runs that op eagerly.
    check(nn.AdaptiveAvgPool2d(4), torch.randn(1, 2, 6, 6))


def test_conv_bn_relu_is_one_kernel():
    model = randomize_batch_norms(nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16),
                                        nn.ReLU()))
    compiled = check(model, torch.randn(1, 3, 20, 20))
    assert compiled.stats()["kernel_calls"] == 1, compiled.explain()
    assert "conv2d" in compiled.explain() and "act=relu" in compiled.explain()


def test_batch_norm_alone():
    # Not after a conv: stays a per-channel multiply-add with folded constants.
    check(randomize_batch_norms(nn.Sequential(nn.BatchNorm2d(5))), torch.randn(2, 5, 4, 4))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        idn = x if self.down is None else self.down(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + idn)


class ResNet18(nn.Module):
    """torchvision's resnet18 architecture (BasicBlock, [2, 2, 2, 2])."""

    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout)))
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def test_small_cnn_with_residual_blocks():
    model = randomize_batch_norms(nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        BasicBlock(8, 8), BasicBlock(8, 16, stride=2), nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10)))
    compiled = check(model, torch.randn(2, 3, 24, 24), **NET_TOL)
    # Each conv absorbs its batch norm, relu and the block's residual add.
    explain = compiled.explain()
    assert explain.count("conv2d") == 6, explain
    assert "batch_norm" not in explain.replace("_native_batch_norm", "")


def test_resnet18():
    model = randomize_batch_norms(ResNet18())
    compiled = check(model, torch.randn(1, 3, 64, 64), **NET_TOL)
    stats = compiled.stats()
    # 20 convs (each with its bn/relu/residual), max pool, mean, fc, reshape,
    # and the layout pass's two conversions around its channels-last convs.
    assert stats["kernel_calls"] <= 26, compiled.explain()


class _UNet(nn.Module):
    """Two resolutions joined by a transposed convolution and a skip."""

    def __init__(self):
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.e2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.up3 = nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.d1 = nn.Conv2d(48, 3, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(a)
        return self.d1(torch.cat([self.up(b), self.up3(b), a], 1))


def test_unet_with_transposed_convolutions_runs_whole():
    """nn.ConvTranspose2d (here also grouped, with output padding) runs in
    kiln as the input gradient of the convolution it transposes, where it
    ran in eager: the network is one kiln program."""
    compiled = check(_UNet(), torch.randn(2, 3, 24, 20))
    text = compiled.explain()
    assert "conv2d_grad_input" in text and "eager" not in text, text


class _TwoKernels(nn.Module):
    """A shallow wide conv (K = 27 taps, 40 wide: the pixel-vector kernel,
    weights in panels of 6) feeding a deep narrow one (K = 8 * 9 * 9 = 648
    after the pool: the channel-vector kernel, panels of 16)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 72, 3, padding=1)
        self.pool = nn.MaxPool2d(3)
        self.b = nn.Conv2d(72, 20, 3, padding=1, stride=2)

    def forward(self, x):
        return self.b(torch.relu(self.pool(self.a(x))))


@pytest.mark.parametrize("isa_level", isa_params(), indirect=True)
def test_packed_conv_weights_every_isa_and_saved(tmp_path, isa_level):
    # The weights are packed at compile time for the kernel each shape
    # picks; the artifact stores them packed and the loaded model gives the
    # same bits. Each ISA level runs both kernels (conftest.isa_params: a
    # level this CPU lacks is skipped with the reason; the isa_level fixture
    # restores the cap).
    torch.manual_seed(0)
    model = _TwoKernels().eval()
    x = torch.randn(1, 3, 40, 40)
    compiled = check(model, x, **FP32_TOL)
    assert compiled.explain().count("[packed]") == 2, compiled.explain()
    path = tmp_path / "two.kiln"
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    assert torch.equal(loaded(x), compiled(x))


def test_patch_embedding_over_symbolic_image_sizes():
    """A patch embedding (kernel = stride) under dynamic=True keeps the
    convolution's size expressions (the GEMM form needs static sizes): one
    graph, whole in kiln, at two image sizes."""
    from torch._dynamo.utils import counters
    m = nn.Conv2d(3, 8, 4, 4).eval()
    torch._dynamo.reset()
    counters.clear()
    g = torch.compile(m, backend="kiln", dynamic=True)
    with torch.no_grad():
        for shape in ((2, 3, 16, 20), (3, 3, 24, 12)):
            x = torch.randn(*shape)
            torch.testing.assert_close(g(x), m(x), **FP32_TOL)
    assert counters["kiln"]["whole"] == 1 and counters["kiln"]["graphs"] == 1, dict(counters["kiln"])
    torch._dynamo.reset()
