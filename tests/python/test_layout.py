"""The compiler's layout pass (src/compiler/kiln_pass_layout.c) through
kiln.trace: a small ResNet-like chain of blocks (built here: torchvision is
not installed) runs its convs and max pool channels-last (CONV2D_NHWC,
MAX_POOL2D_NHWC), its first conv reading the NCHW input itself and one
layout conversion out, matches eager, saves and loads, and explain
shows the decision; KILN_LAYOUT=nchw turns the pass off and gives the same
outputs; a lone conv, and a region needing a conversion per fewer than two
convs, stay NCHW; graph outputs are NCHW either way.

Tolerances: conftest.FP32_TOL (rtol/atol 1e-4). The blocks fold batch norm
into the conv weights (a different rounding order from eager's separate
normalisation) over ~8 stacked convs of at most 288 taps, with outputs of
order 1; layout on vs off is the same arithmetic per output (same tap order
and K blocking), so it is held to the same tolerance, not to equality.
"""
import os

import pytest
import torch
import torch.nn as nn

import kiln
from conftest import FP32_TOL, plan_ops


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        return torch.relu(y + (self.down(x) if self.down is not None else x))


class TinyResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 32, 1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.pool(torch.relu(self.stem(x)))
        x = self.blocks(x)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _model():
    m = TinyResNet().eval()
    for mod in m.modules():  # non-trivial batch norm statistics
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.5, 0.5)
    return m


def _trace(model, x, layout=None, monkeypatch=None):
    if layout:
        monkeypatch.setenv("KILN_LAYOUT", layout)
    else:
        monkeypatch.delenv("KILN_LAYOUT", raising=False)
    return kiln.trace(model, (x,), fallback=False)


def test_resnet_blocks_channels_last(monkeypatch, tmp_path):
    model, x = _model(), torch.randn(2, 3, 24, 24)
    compiled = _trace(model, x, monkeypatch=monkeypatch)
    ops = plan_ops(compiled)
    # The seven block convs (two per block, one downsample) gain from NHWC;
    # the max pool and the 3-channel stem before it ride along in their
    # region. The stem reads the NCHW input itself; one conversion, before
    # the average pool.
    assert ops.count("conv2d_nhwc") == 8, ops
    assert ops.count("max_pool2d_nhwc") == 1, ops
    assert "conv2d" not in ops and "max_pool2d" not in ops, ops
    assert ops.count("strided_copy") == 1, ops
    text = compiled.explain()
    assert "layout: 1 channels-last region (8 convs), 1 layout conversion\n" in text, text
    with torch.no_grad():
        want = model(x)
    got = compiled(x)
    torch.testing.assert_close(got, want, **FP32_TOL)

    # Save and load: the op and its packed weights survive, same outputs.
    path = str(tmp_path / "tiny.kiln")
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    assert plan_ops(loaded).count("conv2d_nhwc") == 8
    assert "layout: 1 channels-last region" in loaded.explain()
    torch.testing.assert_close(loaded(x), got, rtol=0, atol=0)

    # KILN_LAYOUT=nchw: no NHWC conv, no conversion, the same outputs.
    off = _trace(model, x, "nchw", monkeypatch)
    off_ops = plan_ops(off)
    assert "conv2d_nhwc" not in off_ops and "strided_copy" not in off_ops, off_ops
    assert "max_pool2d_nhwc" not in off_ops, off_ops
    assert "layout:" not in off.explain()
    torch.testing.assert_close(off(x), got, **FP32_TOL)


def test_layout_logged(monkeypatch, capfd):
    monkeypatch.setenv("KILN_LOG", "1")
    model, x = _model(), torch.randn(1, 3, 16, 16)
    _trace(model, x, monkeypatch=monkeypatch)
    err = capfd.readouterr().err
    assert "pass layout" in err, err
    assert "1 regions NHWC (8 convs, 1 pools, 0 eltwise, 0 reductions), 1 conversions; 0 kept NCHW (0 convs)" in err, err
    _trace(model, x, "nchw", monkeypatch)
    assert "pass layout     off (KILN_LAYOUT=nchw)" in capfd.readouterr().err


def test_lone_conv_costly_region_and_outputs_stay_nchw(monkeypatch):
    conv = nn.Conv2d(16, 32, 3, padding=1).eval()
    x = torch.randn(1, 16, 12, 12)
    compiled = _trace(conv, x, monkeypatch=monkeypatch)
    assert "conv2d_nhwc" not in plan_ops(compiled)
    torch.testing.assert_close(compiled(x), conv(x).detach(), **FP32_TOL)

    class TwoOut(nn.Module):
        """Four convs; the second one's output is also returned."""

        def __init__(self, last=True):
            super().__init__()
            self.a = nn.Conv2d(16, 16, 3, padding=1)
            self.b = nn.Conv2d(16, 24, 3, stride=2, padding=1)
            self.c = nn.Conv2d(24, 24, 1)
            self.d = nn.Conv2d(24, 24, 3, padding=1) if last else None

        def forward(self, x):
            h = torch.relu(self.b(torch.relu(self.a(x))))
            y = self.c(h)
            return h, (self.d(y) if self.d is not None else y) + h

    # Four gaining convs, two conversions (both outputs): channels-last.
    model = TwoOut().eval()
    compiled = _trace(model, x, monkeypatch=monkeypatch)
    ops = plan_ops(compiled)
    assert ops.count("conv2d_nhwc") == 4 and ops.count("strided_copy") == 2, ops
    got = compiled(x)
    with torch.no_grad():
        want = model(x)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.is_contiguous()
        torch.testing.assert_close(g, w, **FP32_TOL)

    # Three convs and the same two conversions: not two convs per
    # conversion, so the region stays NCHW.
    model = TwoOut(last=False).eval()
    compiled = _trace(model, x, monkeypatch=monkeypatch)
    ops = plan_ops(compiled)
    assert "conv2d_nhwc" not in ops and "strided_copy" not in ops, ops
    torch.testing.assert_close(compiled(x)[1], model(x)[1].detach(), **FP32_TOL)


class InvertedResidual(nn.Module):
    """MobileNetV2's block as Hugging Face's TF-style port writes it: 1x1
    expand, an explicit F.pad then a depthwise 3x3 (asymmetric at stride
    2), 1x1 project, batch norms, ReLU6, a residual at stride 1."""

    def __init__(self, cin, cout, stride, expand=4):
        super().__init__()
        mid = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6())
        self.dw = nn.Conv2d(mid, mid, 3, stride, 0, groups=mid, bias=False)
        self.bn = nn.BatchNorm2d(mid)
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.stride, self.residual = stride, stride == 1 and cin == cout

    def forward(self, x):
        y = self.expand(x)
        y = nn.functional.pad(y, (1, 1, 1, 1) if self.stride == 1 else (0, 1, 0, 1))
        y = self.project(torch.clamp(self.bn(self.dw(y)), 0, 6))
        return x + y if self.residual else y


class TfPad(nn.Module):
    def forward(self, x):
        return nn.functional.pad(x, (0, 1, 0, 1))


def _mobilenet_like():
    m = nn.Sequential(TfPad(), nn.Conv2d(3, 16, 3, 2, 0), nn.ReLU6(), InvertedResidual(16, 16, 1),
                      InvertedResidual(16, 24, 2), InvertedResidual(24, 24, 1)).eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    return m


def test_mobilenet_blocks_channels_last(monkeypatch):
    """Depthwise convs and pads ride along in the 1x1 convs' region: every
    conv channels-last (the depthwise ones on their own kernel), the
    stride-1 pads folded into the depthwise convs by simplify, the
    stride-2 one (one more at the end) by the layout pass (CONV2D_NHWC's
    end padding); one conversion, out. The stem's pad stays NCHW (a pad
    never enters a region: the stem conv gathers its NCHW output).
    Same outputs as eager and as KILN_LAYOUT=nchw."""
    torch.manual_seed(0)
    model, x = _mobilenet_like(), torch.randn(2, 3, 32, 32)
    compiled = _trace(model, x, monkeypatch=monkeypatch)
    ops = plan_ops(compiled)
    assert ops.count("conv2d_nhwc") == 10 and "conv2d" not in ops, ops
    assert ops.count("pad") == 1 and ops.count("strided_copy") == 1, ops
    with torch.no_grad():
        want = model.double()(x.double())
    torch.testing.assert_close(compiled(x).double(), want, **FP32_TOL)
    off = _trace(model.float(), x, "nchw", monkeypatch)
    assert "conv2d_nhwc" not in plan_ops(off)
    torch.testing.assert_close(off(x), compiled(x), **FP32_TOL)


def test_depthwise_with_an_infinite_weight_stays_nchw(monkeypatch):
    """The channels-last depthwise kernel skips padded taps; eager adds
    w * 0 there (NaN for an infinite w), so such a conv keeps NCHW."""
    torch.manual_seed(0)
    model = _mobilenet_like()
    with torch.no_grad():
        model[3].dw.weight[0, 0, 0, 0] = float("inf")
    x = torch.randn(1, 3, 32, 32)
    compiled = _trace(model, x, monkeypatch=monkeypatch)
    assert "conv2d" in plan_ops(compiled)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, equal_nan=True, **FP32_TOL)


def test_end_padding_survives_a_file(monkeypatch, tmp_path):
    """A depthwise conv with end padding (format 2.22) saves, loads and
    runs as traced."""
    torch.manual_seed(0)
    model, x = _mobilenet_like(), torch.randn(1, 3, 32, 32)
    compiled = _trace(model, x, monkeypatch=monkeypatch)
    path = str(tmp_path / "mobilenet_like.kiln")
    kiln.save(compiled, path)
    with open(path, "rb") as f:
        head = f.read(8)
    assert int.from_bytes(head[6:8], "little") == 22
    torch.testing.assert_close(kiln.load(path)(x), compiled(x), rtol=0, atol=0)
    # Stamped 2.21, the file is refused: no writer of 2.21 made either.
    data = bytearray(open(path, "rb").read())
    data[6:8] = (21).to_bytes(2, "little")
    older = str(tmp_path / "older.kiln")
    with open(older, "wb") as f:
        f.write(bytes(data))
    with pytest.raises(Exception, match=r"format 2\.22\) in a file of format 2\.21"):
        kiln.load(older)
