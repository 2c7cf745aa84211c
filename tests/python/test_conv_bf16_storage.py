"""bf16 storage between convs (kiln_pass_conv_bf16_io.c, format 2.23).

Under compute_dtype=bf16, on a machine whose bf16 engine gives convs the
bf16-compute form, a conv whose every reader is such a conv stores its
output in bf16 (the reader rounds its input to bf16 anyway): exact, the
same bits as without the pass (KILN_CONV_BF16_IO=0). A depthwise conv
reading it, which the pass also lets take a bf16 input under
compute_dtype=bf16, computes from its input rounded to bf16: no longer
fp32's bits, held to the bf16 accuracy target (cosine >= 0.999 against
fp32 eager) and to the same graph without the pass within bf16's error.
Without a bf16 engine the convs keep their fp32 form and nothing is
stored in bf16 (checked too). The tests branch on kiln.machine()'s
bf16_engine, never on an instruction set they assume.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kiln


def _engine():
    return kiln.machine().get("bf16_engine", "none") not in (None, "", "none")


class ResPair(nn.Module):
    """A ResNet basic block: conv, relu, conv, + x, relu."""

    def __init__(self, c=32):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, 1, 1)
        self.c2 = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return F.relu(self.c2(F.relu(self.c1(x))) + x)


class InvRes(nn.Module):
    """A MobileNetV2 block: 1x1 expansion, relu6, 3x3 depthwise, relu6, 1x1
    projection, + x; then a strided one (no residual)."""

    def __init__(self, c=24, t=6):
        super().__init__()
        e = c * t
        self.e1, self.d1, self.p1 = nn.Conv2d(c, e, 1), nn.Conv2d(e, e, 3, 1, 1, groups=e), nn.Conv2d(e, c, 1)
        self.e2, self.d2, self.p2 = nn.Conv2d(c, e, 1), nn.Conv2d(e, e, 3, 2, 1, groups=e), nn.Conv2d(e, 40, 1)

    def forward(self, x):
        h = x + self.p1(F.relu6(self.d1(F.relu6(self.e1(x)))))
        return self.p2(F.relu6(self.d2(F.relu6(self.e2(h)))))


def _trace(model, x, monkeypatch, on):
    if on:
        monkeypatch.delenv("KILN_CONV_BF16_IO", raising=False)
    else:
        monkeypatch.setenv("KILN_CONV_BF16_IO", "0")
    with torch.no_grad():
        return kiln.trace(model, (x,), compute_dtype=torch.bfloat16)


def _bf16_convs(m):
    return [l for l in m.explain().splitlines() if "conv2d_nhwc" in l and ") bfloat16" in l]


def _cos(a, b):
    return F.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0).item()


def test_conv_to_conv_is_exact(monkeypatch):
    """conv1's output goes to conv2 in bf16: the same bits as without."""
    torch.manual_seed(0)
    model = ResPair().eval()
    x = torch.randn(2, 32, 13, 17)
    on, off = _trace(model, x, monkeypatch, True), _trace(model, x, monkeypatch, False)
    assert not _bf16_convs(off)
    if not _engine():
        assert not _bf16_convs(on)
        return
    assert len(_bf16_convs(on)) == 1  # c1; c2 feeds the residual add
    with torch.no_grad():
        y = on(x)
        assert torch.equal(y, off(x))
        assert _cos(y, model(x)) >= 0.999


def test_inverted_residual(monkeypatch, tmp_path):
    """Expansion -> depthwise -> projection in bf16 storage (lossy at the
    depthwise conv's input, within bf16's error), saved and loaded (format
    2.23: a file stamped 2.22 is refused)."""
    torch.manual_seed(1)
    model = InvRes().eval()
    x = torch.randn(1, 24, 28, 28)
    on, off = _trace(model, x, monkeypatch, True), _trace(model, x, monkeypatch, False)
    assert not _bf16_convs(off)
    with torch.no_grad():
        ref = model(x)
        y, y_off = on(x), off(x)
    assert _cos(y, ref) >= 0.999 and _cos(y_off, ref) >= 0.999
    if not _engine():
        assert not _bf16_convs(on) and torch.equal(y, y_off)
        return
    # Both blocks' expansion and depthwise convs (not the projections: one
    # feeds the residual add, the other is the output).
    assert len(_bf16_convs(on)) == 4
    # Against the same graph without the pass: the depthwise convs' inputs
    # are rounded to bf16 (2^-9 relative), each output moved by about that.
    torch.testing.assert_close(y, y_off, rtol=2e-2, atol=2e-2 * y_off.abs().max().item())
    # The reference target runs the same graph (its scalar kernels read and
    # write the bf16 values too), sums in float64: close, not equal.
    monkeypatch.delenv("KILN_CONV_BF16_IO", raising=False)
    with torch.no_grad():
        r = kiln.trace(model, (x,), compute_dtype=torch.bfloat16, target="reference")
        assert len(_bf16_convs(r)) == 4
        assert _cos(r(x), y) >= 0.9999
    path = tmp_path / "ir.kiln"
    kiln.save(on, str(path))
    data = bytearray(path.read_bytes())
    assert data[:4] == b"KILN" and int.from_bytes(data[6:8], "little") == 23
    with torch.no_grad():
        assert torch.equal(kiln.load(str(path))(x), y)
    data[6:8] = (22).to_bytes(2, "little")
    old = tmp_path / "old.kiln"
    old.write_bytes(bytes(data))
    with pytest.raises(Exception, match="bf16"):
        kiln.load(str(old))


def test_fp32_models_keep_fp32(monkeypatch):
    """Without compute_dtype=bf16 nothing is stored in bf16 (depthwise convs
    included: in an fp32 model they must keep fp32's bits)."""
    torch.manual_seed(2)
    model = InvRes().eval()
    x = torch.randn(1, 24, 16, 16)
    with torch.no_grad():
        m = kiln.trace(model, (x,))
        assert not _bf16_convs(m)
        torch.testing.assert_close(m(x), model(x), rtol=1e-4, atol=1e-4)


class StemDw(nn.Module):
    """MobileNetV2's first layers: a 3x3/2 stem on the NCHW image, a
    depthwise conv, a 1x1 projection."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, 2, 1)
        self.dw = nn.Conv2d(32, 32, 3, 1, 1, groups=32)
        self.pw = nn.Conv2d(32, 16, 1)

    def forward(self, x):
        return self.pw(F.relu6(self.dw(F.relu6(self.stem(x)))))


def test_stem_writes_bf16(monkeypatch):
    """The stem gathers its NCHW input and stores bf16 for the depthwise
    conv, which stores bf16 for the projection."""
    torch.manual_seed(3)
    model = StemDw().eval()
    x = torch.randn(2, 3, 34, 30)
    on = _trace(model, x, monkeypatch, True)
    with torch.no_grad():
        y = on(x)
        assert _cos(y, model(x)) >= 0.999
    assert len(_bf16_convs(on)) == (2 if _engine() else 0)
