"""bf16 weights: kiln.trace(..., weights_dtype=torch.bfloat16).

The contract: linear weights are stored packed as bf16 (rounded to nearest
even, as Tensor.to(torch.bfloat16)) and the arithmetic stays fp32, so the
compiled model equals the eager model whose linear weights were rounded to
bf16 (and back to fp32), up to fp32 summation order. Hence the tolerance:
torch.testing's fp32 default (rtol 1.3e-6, atol 1e-5) — the weights are
identical, only the order of additions differs (K <= 300 terms of
magnitude <= ~1: errors ~1e-6). Each case also checks that the result is
far from the unrounded fp32 model's, so the test fails if the option is
ignored.
"""

import copy

import pytest
import torch
from torch import nn

import kiln
from conftest import isa_params


def round_linear_weights(model):
    """The eager twin: every nn.Linear weight rounded to bf16 and back."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for m in twin.modules():
            if isinstance(m, nn.Linear):
                m.weight.copy_(m.weight.to(torch.bfloat16).to(torch.float32))
    return twin.eval()


class MLP(nn.Module):
    def __init__(self, d_in=96, d_hidden=300, d_out=40):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden, bias=False)
        self.fc3 = nn.Linear(d_hidden, d_out)
        self.norm = nn.LayerNorm(d_hidden)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = h + torch.relu(self.fc2(h))  # residual add fused into the GEMM
        return self.fc3(self.norm(h))


# Every ISA level (conftest.isa_params: one this CPU or KILN_ISA rules out is
# skipped, with the reason). M = 1 and 5 take the small-M (GEMV) path,
# 3 x 17 = 51 rows the blocked one.
@pytest.mark.parametrize("isa_level", isa_params(), indirect=True)
@pytest.mark.parametrize("shape", [(1, 96), (5, 96), (3, 17, 96)])
def test_mlp_matches_eager_with_rounded_weights(isa_level, shape):
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(*shape)
    compiled = kiln.trace(model, x, weights_dtype=torch.bfloat16)
    assert "[packed bf16]" in compiled.explain()
    with torch.no_grad():
        want = round_linear_weights(model)(x)
        full = model(x)
    got = compiled(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)
    # The rounding is visible: bf16 keeps 8 bits of mantissa, so outputs of
    # magnitude ~1 move by ~1e-3, far beyond the tolerance above.
    assert (got - full).abs().max() > 1e-4


def test_default_and_float32_keep_fp32_weights():
    torch.manual_seed(1)
    model = MLP().eval()
    x = torch.randn(4, 96)
    with torch.no_grad():
        want = model(x)
    for dtype in (None, torch.float32):
        compiled = kiln.trace(model, x, weights_dtype=dtype)
        assert "[packed bf16]" not in compiled.explain() and "[packed]" in compiled.explain()
        torch.testing.assert_close(compiled(x), want)


def test_bf16_weights_halve_the_constant_bytes():
    torch.manual_seed(2)
    model = nn.Linear(256, 512, bias=False).eval()  # 512 = 32 whole panels of 16
    x = torch.randn(1, 256)
    f32 = kiln.trace(model, x).stats()["constant_bytes"]
    bf16 = kiln.trace(model, x, weights_dtype=torch.bfloat16).stats()["constant_bytes"]
    assert f32 == 256 * 512 * 4
    assert bf16 == f32 // 2


def test_artifact_round_trip(tmp_path):
    torch.manual_seed(3)
    model = MLP().eval()
    x = torch.randn(2, 96)
    compiled = kiln.trace(model, x, weights_dtype=torch.bfloat16)
    path = tmp_path / "mlp_bf16.kiln"
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    assert "[packed bf16]" in loaded.explain()
    assert torch.equal(loaded(x), compiled(x))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), round_linear_weights(model)(x))


def test_nonfinite_weights_propagate():
    # Inf and NaN survive the rounding: the outputs they reach are Inf/NaN
    # exactly where eager's are.
    model = nn.Linear(40, 33).eval()
    with torch.no_grad():
        model.weight[3, 7] = float("inf")
        model.weight[10, 0] = float("nan")
    x = torch.rand(2, 40) + 0.5  # positive, so Inf stays +Inf
    compiled = kiln.trace(model, x, weights_dtype=torch.bfloat16)
    with torch.no_grad():
        want = round_linear_weights(model)(x)
    got = compiled(x)
    assert torch.isinf(got[:, 3]).all() and torch.isnan(got[:, 10]).all()
    torch.testing.assert_close(got, want, equal_nan=True)


def test_rejects_other_dtypes():
    model = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="weights_dtype"):
        kiln.trace(model, torch.randn(1, 4), weights_dtype=torch.float16)
