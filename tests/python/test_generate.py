"""HF transformers generate() through torch.compile(backend="kiln") (issue 17).

Tiny models from transformers configs (hidden 64, 2 layers, vocab 256, random
weights), one per attention family: GPT-2 (learned positions, fused qkv,
GELU, LayerNorm, one key head per query head), Llama-style (RoPE, GQA 4/2,
SwiGLU, RMSNorm) and Qwen2-style (the same with q/k/v biases). Greedy
tokens must equal eager's exactly in fp32, and no graph of the generation
may fall back to eager PyTorch: kiln counts what it did with each graph in
torch._dynamo.utils.counters (see kiln/dynamo.py), which
assert_all_in_kiln reads; test_a_fallback_is_seen checks that it can fail.

Sizes are Dynamo's: by default (automatic dynamic) a size becomes symbolic
once it has changed, but kiln marks the outputs that a graph grows by
concatenating something it was given (the DynamicCache's keys and values)
as varying along that dim, so the first decode step is already traced
with a symbolic cache length: prefill and one decode graph for every
length. A new prompt length compiles prefill once more, symbolic; none
after. torch.compile(dynamic=True) makes sizes symbolic from the start:
one prefill graph for every prompt length and batch size (> 1, which
Dynamo specializes), one decode graph. Tests count Dynamo's compiles
(counters["stats"]["unique_graphs"]) and kiln's graphs.
"""

import pytest
import torch
import transformers
from torch._dynamo.utils import counters

import kiln  # noqa: F401  (registers the backend)

VOCAB = 256


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


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compiles():
    """Frames Dynamo compiled (each recompile is one more)."""
    return counters["stats"]["unique_graphs"]


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


def _generate(model, ids, mask, seed=None, **kw):
    kw = dict(attention_mask=mask, do_sample=seed is not None, pad_token_id=0, **kw)
    if seed is not None:  # sampling: the same draws in eager and in kiln
        torch.manual_seed(seed)
    with torch.no_grad():
        return model.generate(ids, **kw)


def _generate_both(model, ids, mask, **kw):
    ref = _generate(model, ids, mask, **kw)
    model.forward = torch.compile(model.forward, backend="kiln")
    return ref, _generate(model, ids, mask, **kw)


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


def test_generate_static_cache_new_batch_size():
    """StaticCache at batch 1, then 4, then 3 in one process: at the second
    batch Dynamo makes the batch symbolic and the graph returns it (a size
    output, worked out from the arguments at each call: kiln's graphs return
    tensors). It failed with "a non-tensor argument input_ids.size()[0]"
    (found by make bench's gen_llama batch-4 row). Tokens equal eager's; the
    third batch compiles nothing new."""
    model = _model("llama")
    prompts = [_prompt(b) for b in (1, 4, 3)]
    kw = dict(max_new_tokens=16, min_new_tokens=16, cache_implementation="static")
    refs = [_generate(model, *p, **kw) for p in prompts]
    model.forward = torch.compile(model.forward, backend="kiln")
    got = [_generate(model, *p, **kw) for p in prompts[:2]]
    graphs = counters["kiln"]["graphs"]
    got.append(_generate(model, *prompts[2], **kw))
    for g, r in zip(got, refs):
        assert torch.equal(g, r)
    assert_all_in_kiln()
    assert counters["kiln"]["graphs"] == graphs, dict(counters["kiln"])


@pytest.mark.parametrize("kind,batch", [("gpt2", 1), ("llama", 2), ("qwen2", 1)])
def test_generate_dynamic_cache(kind, batch):
    """The default DynamicCache under Dynamo's automatic dynamic, 64 greedy
    tokens then 24 sampled ones (fixed seed): keys and values start as
    empty tensors that Dynamo lifts into the graph (get_attr constants) and
    grow by cat. At batch 1 there is no mask and Llama/Qwen2 attention takes
    enable_gqa (k and v with 2 heads for 4 query heads); batch 2 is left
    padded, its mask indexed by batch and position (aten.index.Tensor with
    symbolic sizes). Two compiles, prefill and a decode graph symbolic in
    the cache length from its first step, serve all 64 lengths; none for
    the sampled run. Llama: another prompt length compiles prefill once
    more (now symbolic), a third none."""
    model = _model(kind)
    ids, mask = _prompt(batch)
    n, sampled = dict(max_new_tokens=64, min_new_tokens=64), dict(max_new_tokens=24, min_new_tokens=24)
    ref, ref_sampled = _generate(model, ids, mask, **n), _generate(model, ids, mask, seed=7, **sampled)
    longer, shorter = _prompt(batch, length=12), _prompt(batch, length=5)
    short = dict(max_new_tokens=8, min_new_tokens=8)
    ref_other = [_generate(model, *p, **short) for p in (longer, shorter)] if kind == "llama" else []
    model.forward = torch.compile(model.forward, backend="kiln")
    got = _generate(model, ids, mask, **n)
    assert got.shape == (batch, 9 + 64)
    assert torch.equal(got, ref)
    assert compiles() == 2 and counters["kiln"]["graphs"] == 2, (compiles(), dict(counters["kiln"]))
    assert torch.equal(_generate(model, ids, mask, seed=7, **sampled), ref_sampled)
    assert compiles() == 2, compiles()  # the same frames: nothing compiled again
    for p, want, total in zip((longer, shorter), ref_other, (3, 3)):
        assert torch.equal(_generate(model, *p, **short), want)
        assert compiles() == total, compiles()
    assert_all_in_kiln()


def test_generate_dynamic_shapes_compile_once():
    """torch.compile(dynamic=True): one prefill and one decode graph serve
    every prompt length, every cache length and every batch size in range
    (3 and 5 here, left padded), greedy and sampled. (Dynamo specializes a
    size of 1, and its duck sizing gives a batch equal to the key heads
    (2) their symbol, which the concatenation then pins to 2: sizes that
    collide with none of the model's are what Dynamo keeps dynamic.)
    The graphs' Python floats (RMSNorm's eps, RoPE's scaling) reach kiln as
    float64 0-d inputs that the graph rounds to float32: a prelude does
    that, and every tensor op runs in kiln."""
    model = _model("llama")
    ids, mask = _prompt(3)
    ids5, mask5 = _prompt(5, length=12)
    mask5[4, :5] = 0
    n, short = dict(max_new_tokens=24, min_new_tokens=24), dict(max_new_tokens=8, min_new_tokens=8)
    eager = [_generate(model, ids, mask, **n), _generate(model, ids, mask, seed=3, **short),
             _generate(model, ids5, mask5, **short)]
    model.forward = torch.compile(model.forward, backend="kiln", dynamic=True)
    assert torch.equal(_generate(model, ids, mask, **n), eager[0])
    assert compiles() == 2 and counters["kiln"]["graphs"] == 2, (compiles(), dict(counters["kiln"]))
    assert torch.equal(_generate(model, ids, mask, seed=3, **short), eager[1])
    assert torch.equal(_generate(model, ids5, mask5, **short), eager[2])
    assert compiles() == 2, compiles()  # another batch size and prompt length: no recompile
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


@pytest.mark.parametrize("kind", ["mistral", "gemma3"])
def test_generate_sliding_window_cache(kind):
    """Mistral's and Gemma 3's sliding-window layers (window 16, 12 prompt
    tokens + 6 new): their masks take arange(min(length, window)) and a
    size in arithmetic, which crashed torch.compile (BackendCompilerFailed:
    a size's FX node passed to arange, and one read as a tensor). Dynamo
    recompiles as the window's counters change; in one graph it specialises
    the key cache's length and leaves the value cache's a symbol plus one,
    which kiln's attention (one key length) now pins to the keys' number
    (that graph ran in eager). Every graph whole, eager's tokens."""
    common = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=0, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256, sliding_window=16)
    if kind == "mistral":
        m = transformers.MistralForCausalLM(transformers.MistralConfig(**common))
    else:
        m = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(head_dim=16, **common))
    ids, mask = _prompt(2, 12)
    ref, got = _generate_both(m.eval(), ids, mask, max_new_tokens=6)
    assert torch.equal(got, ref)
    assert_all_in_kiln()


_ARCHS = {
    # soft-capped logits, sliding-window layers and eager attention
    "gemma2": (transformers.Gemma2Config, dict(head_dim=16, sliding_window=8), "eager"),
    # ALiBi position biases, eager attention
    "bloom": (transformers.BloomConfig, dict(n_layer=2, n_head=4), "eager"),
    # fused qkv and gate_up projections
    "phi3": (transformers.Phi3Config, {}, "sdpa"),
    # mixture of experts with attention sinks
    "gpt_oss": (transformers.GptOssConfig, dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                                                sliding_window=8), "eager"),
}


@pytest.mark.parametrize("kind", sorted(_ARCHS))
def test_generate_other_architectures_whole_in_kiln(kind):
    """More of the LLMs users run, each with what sets it apart: generate()
    through torch.compile gives eager's tokens, with every graph whole in
    kiln (a survey of 25 transformers architectures in session 13 found
    all whole, these, T5 and the sliding windows above among them)."""
    cls, extra, attn = _ARCHS[kind]
    common = dict(vocab_size=VOCAB, bos_token_id=None, eos_token_id=None, pad_token_id=0, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=256)
    common.update(extra)
    m = transformers.AutoModelForCausalLM.from_config(cls(**common), attn_implementation=attn)
    ids, mask = _prompt(2, 12)
    ref, got = _generate_both(m.eval(), ids, mask, max_new_tokens=6)
    assert torch.equal(got, ref)
    assert_all_in_kiln()


def test_generate_t5_whole_in_kiln():
    """An encoder-decoder: T5's decoder graphs attend to the encoder's keys
    (a static length, as their mask) and values (a length Dynamo left
    symbolic); they ran in eager until the value length's symbol was taken
    as that number (symbolic.Symbols.unify_after_failure)."""
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                                decoder_start_token_id=0, pad_token_id=0)
    m = transformers.T5ForConditionalGeneration(cfg).eval()
    ids, mask = _prompt(2, 12)
    ref, got = _generate_both(m, ids, mask, max_new_tokens=6)
    assert torch.equal(got, ref)
    assert_all_in_kiln()
