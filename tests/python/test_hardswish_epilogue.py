"""Hardswish (nn.Hardswish, F.hardswish) runs in the epilogue of the conv or
linear before it (KILN_ACT_HARDSWISH, format 2.24).

torch decomposes hardswish as x * clamp(x + 3, 0, 6) / 6: an add, the clamp's
two where-compare pairs, a multiply and a divide, seven nodes kiln's fusion
passes take as one activation (kiln_graph_match_hardswish). The epilogues
compute the same operations in the same order, so results equal eager's bit
for bit where the conv's sums do (special values through a 1x1 conv of weight
1 below), and within fp32 conv error otherwise. MobileNetV3 applies it after
most of its convs.
"""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import check_epilogue_activation, isa_params, same_bits

SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, -3.0, -3.0000002, -2.9999998, 3.0,
            2.9999998, 3.0000002, -1e-30, 1e-30, 7.0, -7.0, 0.5, -0.5, 1e20, -1e20, 3e38, -3e38,
            1.2345678, -1.7]


class ConvAct(torch.nn.Module):
    """act(conv(x)), a 1x1 conv of weight 1 whose outputs are x exactly:
    depthwise, or dense from one input channel to 8."""

    def __init__(self, act, depthwise):
        super().__init__()
        c_in, c_out, groups = (8, 8, 8) if depthwise else (1, 8, 1)
        self.conv = torch.nn.Conv2d(c_in, c_out, 1, groups=groups, bias=False)
        with torch.no_grad():
            self.conv.weight.fill_(1.0)
        self.depthwise, self.act = depthwise, act

    def example(self):
        x = torch.tensor(SPECIALS).reshape(1, 1, 2, -1)
        return x.repeat(1, 8, 1, 1) if self.depthwise else x

    def forward(self, x):
        return self.act(self.conv(x))


@pytest.mark.parametrize("isa_level", isa_params(), indirect=True)
@pytest.mark.parametrize("act", [torch.nn.Hardswish(), F.hardswish], ids=["nn.Hardswish", "F.hardswish"])
def test_hardswish_fuses_into_conv_and_keeps_special_values(act, isa_level):
    for depthwise in (False, True):
        model = ConvAct(act, depthwise).eval()
        x = model.example()
        with torch.no_grad():
            m = kiln.trace(model, (x,), fallback=False)
            plan = m.explain()
            assert "act=hardswish" in plan and "eltwise_fused" not in plan, plan
            same_bits(m(x), model(x))


@pytest.mark.parametrize("groups", [1, 16], ids=["dense", "depthwise"])
def test_hardswish_conv_in_a_network_and_after_a_linear(groups):
    """MobileNetV3's blocks and its classifier (Linear, then Hardswish)."""
    check_epilogue_activation(torch.nn.Hardswish, "hardswish", groups)


def test_near_misses_stay_elementwise():
    """x * clamp(x + 3, 0, 6) / 5, and hardsigmoid (no leading x): not
    hardswish; elementwise, correct."""
    for act in (lambda t: t * (t + 3).clamp(0, 6) / 5, F.hardsigmoid):
        model = ConvAct(act, depthwise=False).eval()
        x = model.example()
        with torch.no_grad():
            m = kiln.trace(model, (x,), fallback=False)
            assert "act=hardswish" not in m.explain()
            same_bits(m(x), model(x))


def test_hardswish_in_a_file(tmp_path):
    """A file holding a hardswish epilogue says 2.24 and runs as traced; one
    stamped 2.23 is refused."""
    model = ConvAct(torch.nn.Hardswish(), depthwise=False).eval()
    x = model.example()
    with torch.no_grad():
        m = kiln.trace(model, (x,), fallback=False)
        path = tmp_path / "hardswish.kiln"
        kiln.save(m, str(path))
        data = bytearray(path.read_bytes())
        assert data[:4] == b"KILN" and int.from_bytes(data[6:8], "little") == 24
        same_bits(kiln.load(str(path))(x), model(x))
        data[6:8] = (23).to_bytes(2, "little")
        old = tmp_path / "old.kiln"
        old.write_bytes(bytes(data))
        with pytest.raises(Exception, match="hardswish activation"):
            kiln.load(str(old))
