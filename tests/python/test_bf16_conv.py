"""bf16-compute convolutions: kiln.trace(..., compute_dtype=torch.bfloat16)
on a small ResNet-like net (a 7x7/2 stem with C = 3, batch norms, ReLU, a
residual block, a 1x1/2 downsample).

The contract, as for linear layers (test_bf16_compute.py): each channels-
last conv rounds its input and its (batch-norm folded) weight to bf16,
nearest even, sums the products in fp32 and adds bias, residual and
activation in fp32. Where kiln_cpu_bf16() reports a bf16 engine when the
model is compiled, the convs take the bf16 form (VDPBF16PS); on a CPU
without one they keep the fp32 panels and run as in fp32 (the bf16 form
would only cost there). So the expected numbers depend on the machine,
and the test branches on kiln.machine()['bf16_engine'], never on an
instruction set it assumes.

Reference (bf16 path): float64 arithmetic on the bf16-rounded operands,
layer by layer (each layer's input rounded to bf16 in float64). A product
of two bf16 numbers is exact in fp32 and float64, so one layer differs
only by its fp32 sums: K <= 7 * 7 * 3 = 147 or 3 * 3 * 32 = 288 terms,
error <= K 2^-24 sum |x w| ~ 1e-5 |y|. But the next layer rounds that
layer's output to bf16, and where kiln's fp32 value and the reference's
float64 value straddle a rounding boundary (probability ~ 1e-5 / 2^-8 ~
3e-3 per element) the two round one bf16 step (2^-8 relative) apart; such
an element moves the next layer's outputs by <= 2^-8 |h| max|w| ~ 4e-3 *
3 * 0.3, and the straddles of three layers add: atol 2e-2, rtol 1e-2,
plus a mean error far below one bf16 step (1e-5; measured ~1e-7, the
straddles being rare), which fp32 arithmetic misses by far (its mean
error is ten times larger and more, ~1e-4). Against fp32 eager the cosine similarity is
>= 0.999 (issue 18's bf16 accuracy target).
"""

import math

import pytest
import torch
from torch import nn

import kiln
from kiln import _C


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 7, 2, 3, bias=False)
        self.bn0 = nn.BatchNorm2d(32)
        self.c1 = nn.Conv2d(32, 32, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.c2 = nn.Conv2d(32, 48, 3, 2, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(48)
        self.down = nn.Conv2d(32, 48, 1, 2, 0, bias=False)
        self.bnd = nn.BatchNorm2d(48)

    def forward(self, x):
        h = torch.relu(self.bn0(self.stem(x)))
        h = torch.relu(self.bn1(self.c1(h)) + h)
        return torch.relu(self.bn2(self.c2(h)) + self.bnd(self.down(h)))


def make_model(seed=0):
    torch.manual_seed(seed)
    m = Block().eval()
    with torch.no_grad():
        for bn in (m.bn0, m.bn1, m.bn2, m.bnd):
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
            bn.running_mean.uniform_(-0.1, 0.1)
            bn.running_var.uniform_(0.5, 2.0)
    return m


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float64)


def folded(conv, bn):
    """The conv's weight and bias with the batch norm folded in (fp32)."""
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    return conv.weight * scale[:, None, None, None], bn.bias - bn.running_mean * scale


def ref_bf16(m, x):
    """float64 on bf16-rounded inputs and folded weights, layer by layer."""
    def conv(h, c, bn, res=None):
        w, b = folded(c, bn)
        y = nn.functional.conv2d(bf16(h), bf16(w), b.double(), c.stride, c.padding)
        return y if res is None else y + res

    with torch.no_grad():
        h = torch.relu(conv(x, m.stem, m.bn0))
        h = torch.relu(conv(h, m.c1, m.bn1, h))
        d = conv(h, m.down, m.bnd)
        return torch.relu(conv(h, m.c2, m.bn2, d))


def has_engine():
    return kiln.machine().get("bf16_engine", "none") not in (None, "", "none")


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


@pytest.mark.parametrize("seed,size", [(0, 32), (1, 37)])
def test_conv_net_in_bf16(seed, size):
    m = make_model(seed)
    x = torch.randn(2, 3, size, size)
    compiled = kiln.trace(m, x, compute_dtype=torch.bfloat16)
    got = compiled(x)
    with torch.no_grad():
        eager = m(x)
    assert got.dtype == torch.float32 and got.shape == eager.shape
    assert cosine(got, eager) >= 0.999
    text = compiled.explain()
    if has_engine():
        # The convs run on the bf16 dot-product engine, with bf16 numbers.
        assert "bf16 compute: AVX512_BF16 dot products (VDPBF16PS)" in text or "AMX" in text
        assert text.count("[bf16 compute]") == 4
        want = ref_bf16(m, x)
        torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=2e-2)
        err = (got.double() - want).abs().mean()
        assert err < 1e-5
        # ... and not fp32 ones: fp32 arithmetic is bf16 rounding steps away.
        assert (got.double() - eager.double()).abs().mean() > 10 * err
    else:
        # No engine: the fp32 panels, exactly the fp32 path's numbers class.
        assert "[bf16 compute]" not in text
        assert text.count("fp32: no bf16 engine at compile time") == 4
        torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-4)


def test_bf16_conv_artifact_runs_without_the_engine():
    """A model compiled with the engine, run with it capped (as an artifact
    made on Zen 4 run on an AVX2 CPU): the portable path, same numbers."""
    if not has_engine():
        pytest.skip("needs a bf16 engine to compile the bf16 form")
    m = make_model(2)
    x = torch.randn(1, 3, 29, 29)
    compiled = kiln.trace(m, x, compute_dtype=torch.bfloat16)
    want = ref_bf16(m, x)
    fast = compiled(x)
    start = kiln.isa()
    try:
        for level in ("avx2", "generic"):
            if kiln.isa(level) != level:
                continue
            got = compiled(x)
            torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=2e-2)
            assert (got.double() - want).abs().mean() < 1e-5
            assert (got - fast).abs().max() < 2e-2
    finally:
        kiln.isa(start)


def test_no_engine_at_compile_time_keeps_fp32_convs():
    """With the bf16 engines off when compiling (KILN_ISA capped, or a CPU
    without one) compute_dtype=bf16 convs take the fp32 panels."""
    m = make_model(3)
    x = torch.randn(1, 3, 24, 24)
    start = kiln.isa()
    try:
        kiln.isa("avx2" if kiln.isa("avx2") == "avx2" else "generic")
        compiled = kiln.trace(m, x, compute_dtype=torch.bfloat16)
        text = compiled.explain()
        assert "[bf16 compute]" not in text
        assert text.count("fp32: no bf16 engine at compile time") == 4
        got = compiled(x)
    finally:
        kiln.isa(start)
    with torch.no_grad():
        torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-4)


def test_reference_target_reads_the_bf16_conv_layout():
    """The artifact (to_bytes / from_bytes: format 2.16 where the bf16 form
    was chosen) runs on the reference target, whose conv reads the bf16
    layout with double sums; node by node within the bf16 tolerance above
    (the two targets' fp32 and double values may round one bf16 step
    apart at the next layer)."""
    m = make_model(4)
    x = torch.randn(1, 3, 21, 21)
    compiled = kiln.trace(m, x, compute_dtype=torch.bfloat16)
    report = kiln.compare_targets(compiled, x, rtol=1e-2, atol=2e-2)
    assert report.ok and report.outputs_match, str(report)
    assert sum(r["op"] == "conv2d_nhwc" for r in report.rows) == 4


class Stem(nn.Module):
    """The stem then two 1x1 convs: a channels-last region (two convs that
    gain, kiln_pass_layout.c) that spreads nothing across pixels, so each
    output pixel shows its stem window's result."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 7, 2, 3)
        self.c1 = nn.Conv2d(32, 16, 1)
        self.c2 = nn.Conv2d(16, 16, 1)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(torch.relu(self.stem(x)))))


def test_stem_inf_and_nan_one_past_the_windows():
    """The stem (C = 3, 7x7/2) pairs its taps along window rows on the bf16
    engine, one value past each window row under a zero weight
    (kiln_conv_nhwc_bf16_internal.h); 0 x Inf is NaN on VDPBF16PS. Inf,
    -Inf, NaN and a float that rounds to bf16 Inf, each placed exactly one
    value past the windows of some stem outputs (channel 0, x column
    2 ox + 4 for output column ox): kiln's outputs are NaN and infinite
    exactly where eager's conv2d on the same bf16-rounded inputs gives them
    (layer by layer in float64), finite values within the bf16 tolerance
    above; a clean image alongside, in the same batch."""
    if not has_engine():
        pytest.skip("the window-row pairs are the bf16 engine's (fp32 panels elsewhere)")
    torch.manual_seed(5)
    m = Stem().eval()
    x = torch.randn(2, 3, 33, 31)
    x[0, 0, 10, 6] = float("nan")  # one past output column 1's window rows
    x[0, 0, 3, 10] = float("inf")  # ... column 3's
    x[0, 0, 20, 6] = -float("inf")
    x[0, 0, 0, 14] = torch.finfo(torch.float32).max  # rounds to bf16 Inf; column 5's
    compiled = kiln.trace(m, x, compute_dtype=torch.bfloat16)
    got = compiled(x)
    assert "[bf16 compute]" in compiled.explain()
    with torch.no_grad():
        f = nn.functional
        h = torch.relu(f.conv2d(bf16(x), bf16(m.stem.weight), m.stem.bias.double(), 2, 3))
        h = torch.relu(f.conv2d(bf16(h), bf16(m.c1.weight), m.c1.bias.double()))
        want = f.conv2d(bf16(h), bf16(m.c2.weight), m.c2.bias.double())
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.isinf(), want.isinf())
    assert got.isnan().any() and not got[0].isnan().all()  # placed where they count
    torch.testing.assert_close(got.double(), want, rtol=1e-2, atol=2e-2, equal_nan=True)
    assert torch.isfinite(got[1]).all()  # the clean image
