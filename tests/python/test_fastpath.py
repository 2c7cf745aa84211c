"""Inference through torch.compile(backend="kiln") where PyTorch takes fused
fast paths: nn.TransformerEncoderLayer's eval fast path
(aten._transformer_encoder_layer_fwd, decomposed by kiln.fastpath) and
scaled_dot_product_attention, which AOTAutograd hands over as the CPU flash
attention kernel. Both ran in eager before; now kiln runs them.

Tolerance: fp32 FP32_TOL (conftest): kiln's GEMMs and attention sum in
another order than torch's."""
import warnings

import pytest
import torch

import kiln  # noqa: F401  (registers the backend)
from kiln.module import KilnModule

from conftest import FP32_TOL


@pytest.fixture
def plans(monkeypatch):
    seen = {}
    orig = KilnModule.run_flat

    def run_flat(self, args):
        seen.setdefault(id(self), self.explain())
        return orig(self, args)

    monkeypatch.setattr(KilnModule, "run_flat", run_flat)
    return seen


def _compiled(model, *x):
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        got = torch.compile(model, backend="kiln")(*x)
        want = model(*x)
    return got, want, [str(m.message) for m in w if "kiln" in str(m.message)]


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer_fast_path_runs_in_kiln(plans, norm_first, activation):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True,
                                             norm_first=norm_first, activation=activation).eval()
    x = torch.randn(2, 7, 32)
    got, want, warned = _compiled(layer, x)
    assert not warned, warned  # the fused op would fall back to eager, with a warning
    torch.testing.assert_close(got, want, **FP32_TOL)
    ops = "\n".join(plans.values())
    assert "sdpa" in ops and "layer_norm" in ops


def test_transformer_encoder_layer_fast_path_with_mask_stays_correct():
    """With a padding mask the fused op is not decomposed: it runs in eager
    (with kiln's warning), and the result is eager's."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 7, 32)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, 5:] = True
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(layer, backend="kiln")(x, src_key_padding_mask=pad)
        want = layer(x, src_key_padding_mask=pad)
    torch.testing.assert_close(got, want, **FP32_TOL, equal_nan=True)


class Attn(torch.nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, mask=None):
        return torch.nn.functional.scaled_dot_product_attention(q * 2, k, v, attn_mask=mask,
                                                                is_causal=self.causal)


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask"])
def test_attention_under_compile_runs_in_kiln(plans, case):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    mask = None
    if case == "bool_mask":
        mask = torch.rand(6, 6) > 0.3
        mask[:, 0] = True  # every query sees a key
    elif case == "float_mask":
        mask = torch.randn(2, 1, 6, 6)
    got, want, warned = _compiled(Attn(causal=case == "causal"), q, k, v, mask)
    assert not warned, warned
    torch.testing.assert_close(got, want, **FP32_TOL)
    assert any("sdpa" in p for p in plans.values())
