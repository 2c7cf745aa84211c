"""ReLU6 (nn.ReLU6, F.relu6, hardtanh(0, 6), clamp(0, 6)) runs in the
epilogue of the conv or linear before it (KILN_ACT_RELU6, format 2.22).

The front end spells a scalar clamp as where(x < 0, 0, x) then
where(y > 6, 6, y), torch's own kernel order (NaN and -0.0 pass); the conv
and GEMM fusion passes take those four nodes as one activation, so
MobileNetV2's 35 ReLU6 passes over its feature maps disappear. The
epilogue clamps with the same comparisons: results equal eager's bit for
bit where the conv's sums do (the special values through a 1x1 conv of
weight 1 below), and within fp32 conv error otherwise.
"""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import check_epilogue_activation, isa_params, same_bits

# Not -0.0: a conv's sum of one product starts from +0.0 in kiln, so its
# result is +0.0 before any activation (the epilogue keeps -0.0: test_gemm_epilogue.c).
SPECIALS = [float("nan"), float("inf"), -float("inf"), 0.0, 5.999999, 6.0, 6.000001, -1e-30, 7.0, -3.0, 2.5, 1e-30]


def _relu6_variants():
    return {
        "nn.ReLU6": torch.nn.ReLU6(),
        "F.relu6": F.relu6,
        "hardtanh(0, 6)": lambda t: F.hardtanh(t, 0.0, 6.0),
        "clamp(0, 6)": lambda t: t.clamp(0, 6),
    }


class ConvAct(torch.nn.Module):
    """act(conv(x)) with a 1x1 conv of weight 1 whose outputs are x exactly:
    depthwise (each channel its own), or dense from one input channel to 8
    (each output channel x's one channel)."""

    def __init__(self, act, depthwise):
        super().__init__()
        c_in, c_out, groups = (8, 8, 8) if depthwise else (1, 8, 1)
        self.conv = torch.nn.Conv2d(c_in, c_out, 1, groups=groups, bias=False)
        with torch.no_grad():
            self.conv.weight.fill_(1.0)
        self.depthwise, self.act = depthwise, act

    def example(self):
        x = torch.tensor(SPECIALS).reshape(1, 1, 3, -1)
        return x.repeat(1, 8, 1, 1) if self.depthwise else x

    def forward(self, x):
        return self.act(self.conv(x))


@pytest.mark.parametrize("isa_level", isa_params(), indirect=True)
@pytest.mark.parametrize("name", list(_relu6_variants()))
def test_relu6_fuses_into_conv_and_keeps_special_values(name, isa_level):
    for depthwise in (False, True):
        model = ConvAct(_relu6_variants()[name], depthwise).eval()
        x = model.example()
        with torch.no_grad():
            m = kiln.trace(model, (x,), fallback=False)
            assert "act=relu6" in m.explain(), m.explain()
            same_bits(m(x), model(x))


@pytest.mark.parametrize("groups", [1, 16], ids=["dense", "depthwise"])
def test_relu6_conv_in_a_network_and_after_a_linear(groups):
    check_epilogue_activation(torch.nn.ReLU6, "relu6", groups)


def test_other_bounds_stay_a_clamp():
    """hardtanh(-1, 1) and clamp(0, 5) are not relu6: elementwise, correct."""
    for act in (F.hardtanh, lambda t: t.clamp(0, 5)):
        model = ConvAct(act, depthwise=False).eval()
        x = model.example()
        with torch.no_grad():
            m = kiln.trace(model, (x,), fallback=False)
            assert "act=relu6" not in m.explain()
            same_bits(m(x), model(x))


def test_relu6_in_a_file(tmp_path):
    """A file holding a relu6 epilogue says 2.22 and runs as traced."""
    model = ConvAct(torch.nn.ReLU6(), depthwise=False).eval()
    x = model.example()
    with torch.no_grad():
        m = kiln.trace(model, (x,), fallback=False)
        path = tmp_path / "relu6.kiln"
        kiln.save(m, str(path))
        data = path.read_bytes()
        assert data[:4] == b"KILN" and int.from_bytes(data[6:8], "little") == 22
        same_bits(kiln.load(str(path))(x), model(x))
