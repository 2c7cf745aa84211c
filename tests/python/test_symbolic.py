"""Symbolic sizes through torch.compile (issue 17): one compile serves every
size in range, with no eager fallback; HF generate() with the default
DynamicCache compiles a bounded number of graphs for any number of tokens."""

import torch
import torch.nn as nn
import pytest

import kiln  # noqa: F401  (registers the backend)


@pytest.fixture
def counters():
    from torch._dynamo.utils import counters as c

    torch._dynamo.reset()
    c.clear()
    yield c
    torch._dynamo.reset()


class _Block(nn.Module):
    """Linear, a head split, attention, an arange over the length, a norm:
    sizes flow through views (B*T), a permute's strides and an iota."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.lin(x).view(B, T, 2, 8).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        pos = torch.arange(T, dtype=torch.float32)
        return self.norm(a.transpose(1, 2).reshape(B, T, 16)) + pos[None, :, None]


def test_dynamic_compile_serves_every_size(counters):
    torch.manual_seed(0)
    m = _Block().eval()
    f = torch.compile(m, backend="kiln", dynamic=True)
    with torch.no_grad():
        for B, T in [(2, 5), (3, 7), (2, 64), (5, 3), (4, 33)]:
            x = torch.randn(B, T, 16)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    # One symbolic graph for all five sizes.
    assert counters["kiln"]["graphs"] == 1, dict(counters["kiln"])


def test_symbolic_model_checks_sizes(counters):
    """Inputs whose sizes disagree about one symbol are refused with the
    input and the symbol named, not run."""
    m = nn.Sequential(nn.Linear(8, 8)).eval()

    def f(a, b):
        return m(a) + b

    g = torch.compile(f, backend="kiln", dynamic=True)
    with torch.no_grad():
        a, b = torch.randn(3, 8), torch.randn(3, 8)
        torch.testing.assert_close(g(a, b), f(a, b), atol=1e-5, rtol=1e-5)
        a, b = torch.randn(6, 8), torch.randn(6, 8)
        torch.testing.assert_close(g(a, b), f(a, b), atol=1e-5, rtol=1e-5)
    assert counters["kiln"]["graphs"] == 1


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


def test_generate_dynamic_cache_without_recompiles(counters):
    """The default DynamicCache: the cache length grows every token; after
    Dynamo's automatic dynamic the graph is symbolic and stays one compile.
    Greedy tokens equal eager's for 64 new tokens."""
    m = _tiny_llama()
    ids = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        m.forward = torch.compile(m.forward, backend="kiln")
        out = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        graphs = counters["kiln"]["graphs"]
        out2 = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
    assert torch.equal(out, ref)
    assert torch.equal(out2, ref)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    # Prefill and the first decode step at their sizes, then one symbolic
    # graph for every later length: no compile per token, none on a rerun.
    assert graphs <= 3, dict(counters["kiln"])
    assert counters["kiln"]["graphs"] == graphs


def test_trace_dynamic_shapes_one_artifact():
    """kiln.trace takes torch.export's dynamic_shapes unchanged: one compile
    for every batch and length in range; out of range is a clear error."""
    from torch.export import Dim

    torch.manual_seed(0)
    m = _Block().eval()
    k = kiln.trace(m, (torch.randn(2, 5, 16),),
                   dynamic_shapes={"x": {0: Dim("batch", max=16), 1: Dim("seq", max=512)}})
    with torch.no_grad():
        for b, t in [(2, 5), (2, 40), (4, 32), (3, 384), (8, 2), (2, 5)]:
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(k(x), m(x), atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match=r"input 0 \('x'\): dimension 1 \(\w+\) is 600, expected 2\.\.512"):
        k(torch.randn(2, 600, 16))


def test_generate_padded_batch_sizes_as_arguments(counters):
    """Batch 2 with left padding: the mask's length reaches a partition as a
    size argument (Dynamo's SymInt), which the kiln piece must be given, not
    guess (a guessed length once made a 3-long mask of a 12-long cache)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=256)).eval()
    ids = torch.randint(0, 256, (2, 10))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        ref = m.generate(ids, attention_mask=mask, max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
        m.forward = torch.compile(m.forward, backend="kiln")
        out = m.generate(ids, attention_mask=mask, max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
    assert torch.equal(out, ref)
    assert counters["kiln"]["eager"] == 0
    assert counters["kiln"]["graphs"] <= 3, dict(counters["kiln"])


def test_generate_static_cache_written_in_place(counters, monkeypatch):
    """cache_implementation="static": the decode graph's index_put into the
    cache is written straight into the cache's memory (an output kiln writes
    into the input), not a new cache copied back by AOTAutograd. Tokens equal
    eager's; prefill and decode compile once each."""
    from kiln.module import KilnModule

    written = []
    orig = KilnModule.run_flat

    def spy(self, args, given=None):
        if given:
            written.append(len(given))
        return orig(self, args, given)

    monkeypatch.setattr(KilnModule, "run_flat", spy)
    m = _tiny_llama()
    ids = torch.randint(0, 256, (2, 7))
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=40, min_new_tokens=40, do_sample=False, cache_implementation="static")
        m.forward = torch.compile(m.forward, backend="kiln")
        out = m.generate(ids, max_new_tokens=40, min_new_tokens=40, do_sample=False, cache_implementation="static")
    assert torch.equal(out, ref)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    assert counters["kiln"]["graphs"] <= 2, dict(counters["kiln"])
    # Every decode step writes each layer's keys and values in place.
    assert len(written) >= 39 and min(written) >= 2 * 2, written[:5]
