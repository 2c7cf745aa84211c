"""F.pad before a conv (Hugging Face's TF-style padding) folds into the
conv's padding when it is zeros on H and W, the same on both sides
(kiln_simplify_conv_pad.c); other pads stay PAD nodes. Either way the
result is eager's within fp32 conv error (against float64: sums of at most
3 x 3 x 16 products of values below 4, 1e-5 is ~50x their rounding)."""
import pytest
import torch
import torch.nn.functional as F

import kiln


class PadConv(torch.nn.Module):
    def __init__(self, pad, value=0.0, groups=1, dilation=1, padding=0, inf_weight=False):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(16, 16, 3, groups=groups, dilation=dilation, padding=padding)
        if inf_weight:
            with torch.no_grad():
                self.conv.weight[0, 0, 0, 0] = float("inf")
        self.pad, self.value = pad, value

    def forward(self, x):
        return self.conv(F.pad(x, self.pad, value=self.value))


CASES = {
    "symmetric": (dict(pad=(1, 1, 1, 1)), True),
    "depthwise": (dict(pad=(1, 1, 1, 1), groups=16), True),
    "rows only, and the conv's own padding": (dict(pad=(0, 0, 1, 1), padding=1), True),
    "dilated": (dict(pad=(2, 2, 2, 2), dilation=2), True),
    "asymmetric (stride-2 'same')": (dict(pad=(0, 1, 0, 1)), False),
    "a fill of 1": (dict(pad=(1, 1, 1, 1), value=1.0), False),
    "a crop": (dict(pad=(-1, -1, 1, 1)), False),
    "past the window": (dict(pad=(3, 3, 3, 3)), False),
    "an infinite weight": (dict(pad=(1, 1, 1, 1), inf_weight=True), False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pad_before_conv(name):
    kw, folds = CASES[name]
    model = PadConv(**kw).eval()
    x = 4 * torch.rand(2, 16, 9, 11) - 2
    with torch.no_grad():
        m = kiln.trace(model, (x,), fallback=False)
        plan = m.explain()
        assert ("= pad" not in plan) == folds, plan
        want = model.double()(x.double())
        torch.testing.assert_close(m(x).double(), want, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_pad_read_elsewhere_stays_for_that_reader():
    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 4, 3)

        def forward(self, x):
            p = F.pad(x, (1, 1, 1, 1))
            return self.conv(p), p.sum()

    model = Both().eval()
    x = torch.randn(1, 4, 6, 6)
    with torch.no_grad():
        m = kiln.trace(model, (x,), fallback=False)
        for got, want in zip(m(x), model(x)):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
