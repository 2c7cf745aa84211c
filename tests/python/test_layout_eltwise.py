"""Elementwise programs ride along in channels-last regions (kiln_pass_layout.c).

An activation no conv epilogue has (leaky ReLU, ELU) stays an
ELTWISE_FUSED node after its conv. The layout pass once left such a node NCHW,
which cut a MobileNetV3-like network into single convs, none of which paid
for its conversions: every conv ran NCHW. Now the program runs channels-last
with its inputs of the output's shape read NHWC and its broadcast inputs (a
folded batch norm's per-channel scale and shift, a (N, C, 1, 1) gate, an
(H, W) map) reshaped to the NHWC broadcast. Programs that read rows by
halves or rotated (positions along the last dim) stay NCHW.

Outputs are checked against float64 evaluation, within what the float32 convs'
summation order allows, and the plans are checked for where they ran.
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import plan_ops, randomize_batch_norms


def f64_reference(model, x):
    """The model's outputs in float64 (weights and buffers too), as a list."""
    with torch.no_grad():
        out = copy.deepcopy(model).double()(x.double())
    return list(out) if isinstance(out, tuple) else [out]


def _check(model, x, **trace_kw):
    model = model.eval()
    compiled = kiln.trace(model, (x,), fallback=False, **trace_kw)
    with torch.no_grad():
        got = compiled(x)
        want = model(x)
    ref = f64_reference(model, x)[0]
    scale = ref.abs().max().item()
    err = (got.double() - ref).abs().max().item()
    eager_err = (want.double() - ref).abs().max().item()
    # float32 convs of a few hundred terms each, a few layers deep: kiln's
    # summation order differs from eager's; both stay within 1e-5 of the
    # output's scale (eager measured 3e-7 of it here).
    assert err <= 1e-5 * scale + 4 * eager_err, (err, eager_err, scale)
    return compiled


class InvertedResidual(nn.Module):
    """MobileNetV3's block without squeeze-excite, with an activation the
    conv epilogues lack (ELU) or have (hardswish)."""

    def __init__(self, act, c=32, e=96):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), act(),
            nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e), act(),
            nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


def test_elu_blocks_run_channels_last():
    torch.manual_seed(0)
    model = randomize_batch_norms(nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ELU(),
                                        InvertedResidual(nn.ELU), InvertedResidual(nn.ELU)))
    compiled = _check(model, torch.randn(2, 3, 40, 36))
    ops = plan_ops(compiled)
    assert "conv2d" not in ops and ops.count("conv2d_nhwc") == 7, ops
    assert ops.count("eltwise_fused") == 5, ops
    # The region's one conversion: its output back to NCHW.
    assert ops.count("strided_copy") == 1, ops


def test_hardswish_blocks_run_channels_last():
    """Hardswish goes into the conv epilogues (KILN_ACT_HARDSWISH): no
    program is left, and the network is one channels-last region."""
    torch.manual_seed(0)
    model = randomize_batch_norms(nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.Hardswish(),
                                        InvertedResidual(nn.Hardswish), InvertedResidual(nn.Hardswish)))
    compiled = _check(model, torch.randn(2, 3, 40, 36))
    ops = plan_ops(compiled)
    assert ops == ["conv2d_nhwc"] * 7 + ["strided_copy"], ops
    assert compiled.explain().count("act=hardswish") == 5


class PreActBlock(nn.Module):
    """BN -> leaky ReLU -> conv, BN -> ELU -> scale and shift -> conv, then
    a gate: the batch norms fold to per-channel scale and shift inputs of
    the programs ((1, C, 1, 1) constants, permuted channels-last), a
    (C, 1, 1) buffer, an (H, W) map broadcast over N and C, and a
    (N, C, 1, 1) gate made outside the region (from the network's input),
    read NCHW and reshaped."""

    def __init__(self, c=24, h=12, w=10):
        super().__init__()
        self.bn1, self.bn2 = nn.BatchNorm2d(c), nn.BatchNorm2d(c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.register_buffer("chw", torch.rand(c, 1, 1) + 0.5)
        self.register_buffer("hw", torch.rand(h, w))

    def forward(self, x, gate):
        y = self.conv1(F.leaky_relu(self.bn1(x), 0.1))
        y = self.conv2(F.elu(self.bn2(y)) * self.chw + self.hw)
        return x + y * gate


class PreActNet(nn.Module):
    def __init__(self, c=24):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.fc = nn.Linear(3, c)
        self.blocks = nn.ModuleList([PreActBlock(c), PreActBlock(c)])

    def forward(self, x):
        gate = torch.sigmoid(self.fc(x.mean((2, 3))))[:, :, None, None]
        y = self.stem(x)
        for b in self.blocks:
            y = b(y, gate)
        return y


def test_broadcast_inputs_are_permuted():
    torch.manual_seed(1)
    compiled = _check(randomize_batch_norms(PreActNet()), torch.randn(2, 3, 12, 10))
    ops = plan_ops(compiled)
    assert "conv2d" not in ops and ops.count("conv2d_nhwc") == 5, ops
    assert "reshape" in ops, ops  # a broadcast input, channels last
    assert ops.count("strided_copy") == 1, ops


def test_squeeze_excite_runs_channels_last():
    """A squeeze-excite gate from the block's own output: the global mean
    rides along (its axes permuted: it sums whole pixels), the excitation's
    1x1 convs read it channels-last, and the gate multiplies channels-last:
    every conv runs NHWC."""

    class SE(nn.Module):
        def __init__(self, c=32):
            super().__init__()
            self.a = nn.Conv2d(c, c, 3, padding=1)
            self.fc1, self.fc2 = nn.Conv2d(c, 16, 1), nn.Conv2d(16, c, 1)
            self.b = nn.Conv2d(c, c, 1)

        def forward(self, x):
            y = F.hardswish(self.a(x))
            g = F.hardsigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(y, 1)))))
            return self.b(F.hardswish(y * g))

    torch.manual_seed(4)
    compiled = _check(nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), SE(), SE()), torch.randn(2, 3, 9, 11))
    ops = plan_ops(compiled)
    assert "conv2d" not in ops and ops.count("conv2d_nhwc") == 9, ops
    assert ops.count("mean") == 2, ops
    assert "(2, 1, 1, 32)" in compiled.explain()  # the means, channels-last


def test_program_output_read_by_the_caller_and_by_a_conv():
    """A program's output that is a graph output and a conv's input: the
    conv reads it channels-last, the caller gets it NCHW."""

    class TwoOut(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(16, 32, 3, padding=1)
            self.b = nn.Conv2d(32, 32, 1)
            self.c = nn.Conv2d(32, 32, 3, padding=1)
            self.d = nn.Conv2d(32, 32, 1)

        def forward(self, x):
            h = F.hardswish(self.a(x))
            return self.d(F.hardswish(self.c(F.hardswish(self.b(h))))), h

    torch.manual_seed(2)
    model = TwoOut().eval()
    x = torch.randn(1, 16, 14, 14)
    compiled = kiln.trace(model, (x,), fallback=False)
    with torch.no_grad():
        got = compiled(x)
    ref = f64_reference(model, x)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.is_contiguous()
        assert (g.double() - r).abs().max().item() <= 1e-5 * r.abs().max().item()
    assert "conv2d_nhwc" in plan_ops(compiled)


class _Chain(nn.Module):
    """conv, hardswish, 1x1 conv, hardswish (a channels-last region), then
    mid(y), then two more 1x1 convs: a program between channels-last convs."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(16, 32, 3, padding=1)
        self.b = nn.Conv2d(32, 32, 1)
        self.c = nn.Conv2d(32, 32, 1)
        self.d = nn.Conv2d(32, 32, 1)

    def forward(self, x):
        y = F.hardswish(self.b(F.hardswish(self.a(x))))
        return self.d(F.hardswish(self.c(self.mid(y))))


def test_programs_over_rotated_rows_stay_nchw():
    """transformers' rotate_half over W (a LOAD_ROTATE_HALF program) reads
    positions along the last dim: channels-last that would rotate C. The
    program stays NCHW between channels-last convs."""

    def rotate_half(t):
        h = t.shape[-1] // 2
        return torch.cat([-t[..., h:], t[..., :h]], -1)

    class Rope(_Chain):
        def __init__(self):
            super().__init__()
            self.register_buffer("cos", torch.rand(10))
            self.register_buffer("sin", torch.rand(10))

        def mid(self, y):
            return y * self.cos + rotate_half(y) * self.sin

    torch.manual_seed(3)
    _check(Rope(), torch.randn(1, 16, 10, 10))


def test_inputs_laid_out_otherwise_stay_nchw():
    """A (1, C, H, W) map broadcast over the batch is not the same memory
    channels-last: its program stays NCHW, the results hold."""

    class PosMap(_Chain):
        def __init__(self):
            super().__init__()
            self.register_buffer("pos", torch.randn(1, 32, 6, 7))

        def mid(self, y):
            return F.elu(y + self.pos)

    torch.manual_seed(5)
    _check(PosMap(), torch.randn(3, 16, 6, 7))
