"""HF transformers generate() through torch.compile(backend="kiln") (issue 17).

Tiny models from transformers configs (hidden 64, 2 layers, vocab 256, random
weights), one per attention family: GPT-2 (learned positions, fused qkv,
GELU, LayerNorm, one key head per query head), Llama-style (RoPE, GQA 4/2,
SwiGLU, RMSNorm) and Qwen2-style (the same with q/k/v biases). Greedy
tokens must equal eager's exactly in fp32, and no graph of the generation
may fall back to eager PyTorch: kiln counts what it did with each graph in
torch._dynamo.utils.counters (see kiln/dynamo.py), which
assert_all_in_kiln reads; test_a_fallback_is_seen checks that it can fail.

Shapes are concrete here: torch._dynamo.config.automatic_dynamic_shapes
is off, so Dynamo compiles one graph per shape instead of handing kiln a
symbolic one after the first recompile (tests/python/test_symbolic.py covers
that path). With the default DynamicCache every decode step is then a new
shape and a new compile (about a second each, mostly Dynamo's trace), so
those tests generate few tokens. TODO(symbolic shapes, issue 17): once the
symbolic graphs of these cases run whole in kiln (the padded batch's
aten.index.Tensor still falls back there), drop the automatic_dynamic_shapes
patch, generate 64 tokens with the dynamic cache too and assert one prefill
and one decode compile.
"""

import pytest
import torch
import torch._dynamo
import transformers
from torch._dynamo.utils import counters

import kiln  # noqa: F401  (registers the backend)

VOCAB = 256
DYNAMIC_CACHE_TOKENS = 4  # TODO(symbolic shapes): 64, once decode compiles once for all lengths


def _model(kind):
    common = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=256, **common)
        m = transformers.GPT2LMHeadModel(cfg)
    else:
        cls, mcls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                     "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM)}[kind]
        cfg = cls(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, **common)
        m = mcls(cfg)
    return m.eval()


def _prompt(batch, length=9):
    ids = torch.randint(1, VOCAB, (batch, length))
    mask = torch.ones_like(ids)
    if batch > 1:  # left padding: row 1's first three tokens are padding
        ids[1, :3] = 0
        mask[1, :3] = 0
    return ids, mask


@pytest.fixture(autouse=True)
def _concrete_dynamo():
    # TODO(symbolic shapes): remove automatic_dynamic_shapes=False.
    torch._dynamo.reset()
    with torch._dynamo.config.patch(automatic_dynamic_shapes=False, cache_size_limit=256):
        counters.clear()
        yield
    torch._dynamo.reset()


def assert_all_in_kiln():
    """Every graph Dynamo handed kiln was compiled whole (no op ran in eager
    PyTorch between kiln pieces, no graph ran eager), and Dynamo split the
    forward nowhere (a graph break runs the code between graphs eagerly)."""
    done = dict(counters["kiln"])
    assert done.get("graphs", 0) > 0, f"kiln compiled no graph: {done}"
    assert done.get("whole", 0) == done["graphs"], (
        f"graphs not compiled whole by kiln: {done}; eager: {dict(counters['kiln_fallback'])}")
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])
    assert not counters["graph_break"], dict(counters["graph_break"])


def _generate_both(model, ids, mask, **kw):
    kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0, **kw)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        model.forward = torch.compile(model.forward, backend="kiln")
        got = model.generate(ids, **kw)
    return ref, got


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_generate_static_cache_padded_batch(kind):
    """StaticCache, batch 2 with left padding and an attention mask, 64
    greedy tokens: prefill (q 9 tokens) and decode (q 1 token against the
    whole cache, masked past the valid length) each compile once."""
    model = _model(kind)
    ids, mask = _prompt(2)
    ref, got = _generate_both(model, ids, mask, max_new_tokens=64, cache_implementation="static")
    assert got.shape == (2, 9 + 64)
    assert torch.equal(got, ref)
    assert_all_in_kiln()
    assert counters["kiln"]["graphs"] == 2  # prefill and decode


@pytest.mark.parametrize("kind,batch", [("gpt2", 1), ("llama", 2), ("qwen2", 1)])
def test_generate_dynamic_cache(kind, batch):
    """The default DynamicCache: keys and values start as empty tensors that
    Dynamo lifts into the graph (get_attr constants) and grow by cat. At
    batch 1 there is no mask and Llama/Qwen2 attention takes enable_gqa (k
    and v with 2 heads for 4 query heads); with a mask transformers repeats
    k and v to 4 heads itself."""
    model = _model(kind)
    ids, mask = _prompt(batch)
    ref, got = _generate_both(model, ids, mask, max_new_tokens=DYNAMIC_CACHE_TOKENS)
    assert got.shape == (batch, 9 + DYNAMIC_CACHE_TOKENS)
    assert torch.equal(got, ref)
    assert_all_in_kiln()


def test_a_fallback_is_seen(monkeypatch):
    """assert_all_in_kiln fails when attention falls back to eager."""
    from kiln.optable import TABLE

    monkeypatch.delitem(TABLE, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
    model = _model("llama")
    ids, mask = _prompt(1)
    with pytest.warns(UserWarning, match="eager PyTorch"):
        ref, got = _generate_both(model, ids, mask, max_new_tokens=2, cache_implementation="static")
    assert torch.equal(got, ref)
    assert counters["kiln"]["partitioned"] == 2
    assert counters["kiln_fallback"]["aten._scaled_dot_product_flash_attention_for_cpu.default"] == 2
    with pytest.raises(AssertionError, match="not compiled whole"):
        assert_all_in_kiln()
