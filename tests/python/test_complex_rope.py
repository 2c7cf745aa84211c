"""Rotary embeddings written with complex numbers (Llama 4, DeepSeek V2:
torch.polar, view_as_complex, a complex product, view_as_real) compile
whole in kiln: kiln/complex_ops.py rewrites the graph's complex values as
pairs of reals. Before it, those ops ran in eager PyTorch between kiln's
pieces (a survey of transformers' causal LMs found DeepSeek V2's graphs
partitioned at aten.polar, view_as_complex, view_as_real and the product).

Each model's own rotary class and apply_rotary_emb (transformers' code,
tiny config) are checked against eager in fp32: the rewrite computes what
the complex ops compute, (ar br - ai bi, ar bi + ai br) and r (cos a, sin a),
so the outputs agree to float32 rounding (1e-5 on values of order 1, the
positions' angles up to 60 radians)."""

import pytest
import torch
import transformers
from torch._dynamo.utils import counters

import kiln
from kiln.complex_ops import lower_complex

ATOL = 1e-5


def _rope(kind):
    if kind == "llama4":
        from transformers.models.llama4 import modeling_llama4 as mod
        cfg = transformers.Llama4TextConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                            max_position_embeddings=256)
        rotary = mod.Llama4TextRotaryEmbedding(cfg)
    else:
        from transformers.models.deepseek_v2 import modeling_deepseek_v2 as mod
        cfg = transformers.DeepseekV2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                            qk_rope_head_dim=16, max_position_embeddings=256)
        rotary = mod.DeepseekV2RotaryEmbedding(cfg)

    class Rope(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rotary = rotary

        def forward(self, q, k, position_ids):
            freqs_cis = self.rotary(q, position_ids)
            if kind == "llama4":  # [batch, seq, heads, dim] with freqs_cis[:, :, None, :]
                return mod.apply_rotary_emb(q, k, freqs_cis)
            return mod.apply_rotary_emb(q, k, freqs_cis)  # [batch, heads, seq, dim], unsqueeze(1)

    return Rope().eval()


def _inputs(kind, batch, seq):
    g = torch.Generator().manual_seed(seq)
    shape_q, shape_k = ((batch, seq, 4, 16), (batch, seq, 2, 16)) if kind == "llama4" else \
        ((batch, 4, seq, 16), (batch, 2, seq, 16))
    pos = (torch.arange(seq) + 50 - seq).expand(batch, seq).contiguous()  # angles up to 60 radians
    return torch.randn(shape_q, generator=g), torch.randn(shape_k, generator=g), pos


@pytest.mark.parametrize("kind", ["llama4", "deepseek_v2"])
def test_complex_rotary_embedding_traces_whole(kind):
    model = _rope(kind)
    args = _inputs(kind, 2, 7)
    with torch.no_grad():
        ref = model(*args)
        got = kiln.trace(model, args, fallback=False)(*args)  # raises if any op is left to eager
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype and g.shape == r.shape
        torch.testing.assert_close(g, r, rtol=0, atol=ATOL)


@pytest.mark.usefixtures("fresh_dynamo")
@pytest.mark.parametrize("kind", ["llama4", "deepseek_v2"])
def test_complex_rotary_embedding_through_torch_compile(kind):
    """Symbolic sizes (dynamic=True): one graph for every length, whole."""
    model = _rope(kind)
    compiled = torch.compile(model, backend="kiln", dynamic=True)
    with torch.no_grad():
        for batch, seq in ((3, 7), (3, 11), (5, 5)):  # (no size equal to a head count: duck sizing)
            args = _inputs(kind, batch, seq)
            for r, g in zip(model(*args), compiled(*args)):
                torch.testing.assert_close(g, r, rtol=0, atol=ATOL)
    assert counters["kiln"]["graphs"] == counters["kiln"]["whole"] == 1, dict(counters["kiln"])
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])


class _ComplexOut(torch.nn.Module):
    """Complex values kiln is not told how to handle: returned as they are,
    and read by abs()."""

    def forward(self, x):
        c = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2)) * 2
        return c, c.abs()


def test_complex_values_it_cannot_rewrite_are_left_to_eager():
    """A graph returning a complex tensor, or reading one with an op the
    rewrite does not cover, is left unchanged: its complex ops run in eager
    (the fallback), with eager's values."""
    x = torch.randn(3, 8)
    ep = torch.export.export(_ComplexOut(), (x,))
    assert not lower_complex(ep.graph_module)
    with pytest.warns(UserWarning, match="CPU fallback"):
        compiled = kiln.trace(_ComplexOut(), (x,))
    for r, g in zip(_ComplexOut()(x), compiled(x)):
        torch.testing.assert_close(g, r)
