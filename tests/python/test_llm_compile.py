"""kiln.llm.compile: a Hugging Face causal LM's generate(), unchanged, run by
its traced StaticCacheStep (kiln.llm.GenerationForward as the model's
forward, a KilnCache as generate()'s cache), without Dynamo. Each test
compares with the same generate() in eager PyTorch, and counts which calls
the step ran and which the model's own forward ran (on the same cache)."""

import warnings

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import kiln
from kiln.errors import KilnError

CAP = 40


def _tiny_llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, head_dim=16)
    return LlamaForCausalLM(cfg).eval()


def _left_padded(lengths, seed=3):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, width - n:] = torch.randint(1, 256, (n,), generator=g)
        mask[b, width - n:] = 1
    return ids, mask


def _pair(batch=1):
    """(eager model, the same weights compiled by kiln.llm.compile)."""
    eager, compiled = _tiny_llama(), _tiny_llama()
    return eager, kiln.llm.compile(compiled, max_length=CAP, batch=batch, fallback=False)


def _greedy(model, ids, mask=None, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, do_sample=False, pad_token_id=0, **kw)


@pytest.fixture(scope="module")
def batch4():
    return _pair(batch=4)


def test_generate_runs_the_step_for_every_token():
    """One prompt: each of generate()'s calls (the prompt, then each token)
    is the step's, never Dynamo's (no frame is compiled), with eager's
    tokens."""
    import torch._dynamo.utils as du
    eager, model = _pair()
    ids = torch.randint(1, 256, (1, 7), generator=torch.Generator().manual_seed(1))
    frames = du.counters["frames"]["total"]
    got = _greedy(model, ids, max_new_tokens=12)
    assert torch.equal(got, _greedy(eager, ids, max_new_tokens=12))
    assert (model.forward.steps, model.forward.eager_calls) == (12, 0)
    assert du.counters["frames"]["total"] == frames
    kiln.llm.uncompile(model)  # the model's own forward again
    assert torch.equal(_greedy(model, ids, max_new_tokens=12), got)
    # Compiled twice: the second replaces the first (it traces the model's own forward).
    kiln.llm.compile(kiln.llm.compile(model, max_length=CAP), max_length=CAP + 8, fallback=False)
    assert torch.equal(_greedy(model, ids, max_new_tokens=12), got)
    assert model.forward.step.max_length == CAP + 8 and model.forward.steps == 12


def test_left_padded_prompts_of_different_lengths(batch4):
    """Three prompts of 5, 2 and 7 tokens, left-padded, in a step compiled
    for up to four rows: eager's tokens for each, every call the step's."""
    eager, model = batch4
    ids, mask = _left_padded([5, 2, 7])
    model.forward.steps = model.forward.eager_calls = 0
    got = _greedy(model, ids, mask, max_new_tokens=10)
    assert torch.equal(got, _greedy(eager, ids, mask, max_new_tokens=10))
    assert (model.forward.steps, model.forward.eager_calls) == (10, 0)


def test_beam_search_reorders_the_steps_cache(batch4):
    """Two prompts with two beams each (four rows): beam search reorders
    the cache's rows, and their padding with them, every step."""
    eager, model = batch4
    ids, mask = _left_padded([4, 6], seed=5)
    model.forward.steps = model.forward.eager_calls = 0
    got = _greedy(model, ids, mask, max_new_tokens=8, num_beams=2)
    assert torch.equal(got, _greedy(eager, ids, mask, max_new_tokens=8, num_beams=2))
    assert model.forward.eager_calls == 0 and model.forward.steps == 8


def test_a_static_cache_implementation_is_the_steps_too(batch4):
    """cache_implementation="static" (Gemma's generation configs ask for
    "hybrid"): generate() makes a StaticCache and, for it, would build a 4D
    mask each token. The step still runs every call, with eager's tokens."""
    eager, model = batch4
    ids, mask = _left_padded([5, 3], seed=19)
    model.forward.steps = model.forward.eager_calls = 0
    got = _greedy(model, ids, mask, max_new_tokens=7, cache_implementation="static")
    assert torch.equal(got, _greedy(eager, ids, mask, max_new_tokens=7, cache_implementation="static"))
    assert (model.forward.steps, model.forward.eager_calls) == (7, 0)


def test_a_cache_the_caller_made_runs_eager_and_says_why(batch4):
    """A DynamicCache passed to generate() is the caller's to read: the
    model's own forward fills it, with a warning naming the cache."""
    from transformers.cache_utils import DynamicCache
    eager, model = batch4
    ids, mask = _left_padded([4, 4], seed=23)
    with pytest.warns(UserWarning, match="generate.. was given a DynamicCache"):
        got = _greedy(model, ids, mask, max_new_tokens=4, cache=DynamicCache(config=model.config))
    assert torch.equal(got, _greedy(eager, ids, mask, max_new_tokens=4))


def test_a_generation_continues_from_the_returned_cache(batch4):
    """generate() returns the KilnCache when asked; a second generate()
    given it and the tokens so far continues where the first stopped, as
    eager continues from its DynamicCache."""
    eager, model = batch4
    ids, mask = _left_padded([3, 5], seed=7)
    outs = []
    for m in (eager, model):
        with torch.no_grad():
            first = m.generate(ids, attention_mask=mask, do_sample=False, pad_token_id=0, max_new_tokens=5,
                               return_dict_in_generate=True)
            seq = first.sequences
            more = m.generate(seq, attention_mask=torch.cat([mask, torch.ones(2, 5, dtype=torch.long)], 1),
                              cache=first.cache, do_sample=False, pad_token_id=0, max_new_tokens=6)
        outs.append((first.cache, more))
    assert type(outs[1][0]).__name__ == "_KilnCache"
    assert torch.equal(outs[0][1], outs[1][1])


def test_calls_the_step_does_not_cover_run_the_models_forward():
    """Eager PyTorch runs what the step cannot give: more rows than it was
    compiled for, a mask that is not left padding, hidden states. Each gives
    eager's tokens; and mid-generation, the model's own forward writes the
    step's cache as the step does."""
    eager, model = _pair(batch=2)
    f = model.forward
    ids, mask = _left_padded([3, 6, 4], seed=9)  # three rows, compiled for two
    with pytest.warns(UserWarning, match=r"kiln.llm: 3 rows, compiled for batch=2.*eager") as seen:
        got = _greedy(model, ids, mask, max_new_tokens=6)
    assert torch.equal(got, _greedy(eager, ids, mask, max_new_tokens=6))
    assert f.steps == 0 and f.eager_calls == 6
    assert sum("kiln.llm" in str(w.message) for w in seen) == 1  # said once, not each token
    right = torch.ones(2, 6, dtype=torch.long)
    right[0, 4:] = 0  # right padding: positions the step does not compute
    ids2 = ids[1:]
    with pytest.warns(UserWarning, match="not left padding"):
        got = _greedy(model, ids2, right, max_new_tokens=4)
    assert torch.equal(got, _greedy(eager, ids2, right, max_new_tokens=4))
    assert f.steps == 0

    # The prompt in the step, one token in the model's own forward (it asks
    # for hidden states), then the step again: eager's logits at each.
    from transformers.cache_utils import DynamicCache
    ids3, mask3 = _left_padded([4, 6], seed=11)
    kw = dict(use_cache=True, logits_to_keep=1, return_dict=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the refusals' warnings, seen above
        # Padded rows without position ids: the model counts positions from
        # slot 0, padding included, where the step counts from each row's
        # first token. The model's forward runs it.
        eager_calls = f.eager_calls
        model(input_ids=ids3, attention_mask=mask3, cache=DynamicCache(config=model.config), **kw)
        assert f.eager_calls == eager_calls + 1
        # With generate()'s position ids, the step runs the prompt.
        pos = (mask3.cumsum(1) - 1).clamp(min=0)
        ours = model(input_ids=ids3, attention_mask=mask3, position_ids=pos, cache=DynamicCache(config=model.config), **kw)
        theirs = eager(input_ids=ids3, attention_mask=mask3, position_ids=pos, cache=DynamicCache(config=model.config),
                       **kw)
        pos = pos[:, -1:] + 1
        for extra in ({"output_hidden_states": True}, {}):
            tok = theirs.logits[:, -1:].argmax(-1)
            mask3 = torch.cat([mask3, torch.ones(2, 1, dtype=torch.long)], 1)
            ours = model(input_ids=tok, attention_mask=mask3, position_ids=pos, cache=ours.cache, **kw, **extra)
            theirs = eager(input_ids=tok, attention_mask=mask3, position_ids=pos, cache=theirs.cache, **kw)
            torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-4, atol=1e-5)
            pos = pos + 1
    assert f.steps == 2 and f.eager_calls == 6 + 4 + 2


def test_the_models_forward_masks_the_slots_the_step_has_not_written():
    """One unpadded prompt, then single tokens alternating between the
    model's own forward (asked for hidden states) and the step: the cache
    stays compileable to the model, which therefore masks the slots past
    those written (an unmasked decode would attend to every slot), and the
    slots either writes are the other's to read. Eager's logits each time."""
    from transformers.cache_utils import DynamicCache
    eager, model = _pair()
    ids = torch.randint(1, 256, (1, 6), generator=torch.Generator().manual_seed(13))
    kw = dict(use_cache=True, logits_to_keep=1, return_dict=True)
    with torch.no_grad():
        ours = model(input_ids=ids, cache=DynamicCache(config=model.config), **kw)
        theirs = eager(input_ids=ids, cache=DynamicCache(config=model.config), **kw)
        for extra in ({"output_hidden_states": True}, {}, {"output_hidden_states": True}, {}):
            tok = theirs.logits[:, -1:].argmax(-1)
            ours = model(input_ids=tok, cache=ours.cache, **kw, **extra)
            theirs = eager(input_ids=tok, cache=theirs.cache, **kw)
            torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-4, atol=1e-5)
    assert (model.forward.steps, model.forward.eager_calls) == (3, 2)
    assert ours.cache.is_compileable and int(ours.cache.get_seq_length()) == 10


def test_assisted_decoding_runs_the_step_that_keeps_every_tokens_logits():
    """Assisted (speculative) decoding with a draft model, and prompt lookup:
    the prompt and each verification ask for several tokens' logits, which
    a second step (StaticCacheStep's all_logits, traced on the first such
    call) computes on the KilnCache; rejected candidates are cropped from
    it (StaticLayer.crop). Eager's tokens, and no call in the model's own
    forward."""
    from transformers import LlamaConfig, LlamaForCausalLM
    eager, model = _pair()
    torch.manual_seed(5)
    assistant = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, vocab_size=256,
                                             head_dim=16)).eval()
    ids = torch.randint(1, 256, (1, 6), generator=torch.Generator().manual_seed(2))
    kw = dict(max_new_tokens=12, eos_token_id=256)
    got = _greedy(model, ids, assistant_model=assistant, **kw)
    assert torch.equal(got, _greedy(eager, ids, assistant_model=assistant, **kw))
    assert torch.equal(got, _greedy(eager, ids, **kw))
    assert model.forward.every_token is not None and model.forward.eager_calls == 0
    ids = torch.tensor([[5, 6, 7, 8, 9] * 3])   # n-grams for the lookup to find
    got = _greedy(model, ids, prompt_lookup_num_tokens=4, **kw)
    assert torch.equal(got, _greedy(eager, ids, prompt_lookup_num_tokens=4, **kw))
    assert torch.equal(got, _greedy(eager, ids, **kw))
    assert model.forward.eager_calls == 0


def test_several_tokens_logits_are_eagers():
    """The every-token step's logits, kept as logits_to_keep asks (the last
    n of the call, n up to the call's tokens), equal eager's on the same
    tokens; a logits_to_keep over the call's tokens, or a tensor of
    positions, runs the model's own forward."""
    from transformers.cache_utils import DynamicCache
    eager, model = _pair()
    f = model.forward
    ids = torch.randint(1, 256, (1, 9), generator=torch.Generator().manual_seed(4))
    kw = dict(use_cache=True, return_dict=True)
    with torch.no_grad():
        ours = model(input_ids=ids[:, :5], cache=DynamicCache(config=model.config), logits_to_keep=3, **kw)
        theirs = eager(input_ids=ids[:, :5], cache=DynamicCache(config=model.config), logits_to_keep=3, **kw)
        assert ours.logits.shape == (1, 3, 256) and f.steps == 1
        torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-4, atol=1e-5)
        pos = torch.arange(5, 9)[None]
        ours = model(input_ids=ids[:, 5:], position_ids=pos, cache=ours.cache, logits_to_keep=0, **kw)
        theirs = eager(input_ids=ids[:, 5:], position_ids=pos, cache=theirs.cache, logits_to_keep=0, **kw)
        assert ours.logits.shape == (1, 4, 256) and f.steps == 2
        torch.testing.assert_close(ours.logits, theirs.logits, rtol=1e-4, atol=1e-5)
        for keep in (3, torch.tensor([0])):
            model(input_ids=ids[:, :2], cache=DynamicCache(config=model.config), logits_to_keep=keep, **kw)
    assert f.steps == 2 and f.eager_calls == 2


def test_a_generation_past_max_length_is_refused_by_name():
    eager, model = _pair()
    ids = torch.randint(1, 256, (1, CAP - 3))
    with pytest.raises(KilnError, match=f"reaches {CAP + 1} tokens.*max_length={CAP}"):
        _greedy(model, ids, max_new_tokens=8, eos_token_id=256)  # no end of sequence: every token decoded


def test_an_encoder_decoder_model_is_refused_by_name():
    """kiln.llm's step is a causal LM's: an encoder-decoder model (T5) once
    failed inside transformers ("You must specify exactly one of input_ids
    or inputs_embeds"); now the error says what it is and what runs it
    (torch.compile of its forward, which generates as eager does)."""
    import transformers as T
    torch.manual_seed(0)
    t5 = T.T5ForConditionalGeneration(T.T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16,
                                                  vocab_size=128, decoder_start_token_id=0)).eval()
    with pytest.raises(KilnError, match=r"T5ForConditionalGeneration is an encoder-decoder model.*torch\.compile"):
        kiln.llm.compile(t5, max_length=CAP)
    assert "forward" not in t5.__dict__  # the model is left as it was


def _tiny(kind):
    import transformers as T
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256)
    torch.manual_seed(0)
    return {
        "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256)),
        "mistral": lambda: T.MistralForCausalLM(T.MistralConfig(**small, sliding_window=4)),
        "gemma2": lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**small, head_dim=16, sliding_window=4)),
    }[kind]().eval()


@pytest.mark.parametrize("kind", ["gpt2", "mistral", "gemma2"])
def test_other_architectures_generate_as_eager_does(kind):
    """Learned positions (GPT-2), sliding-window attention over a window
    the generation passes (Mistral; Gemma 2's alternating layers), two
    prompts, one left-padded."""
    eager, model = _tiny(kind), kiln.llm.compile(_tiny(kind), max_length=CAP, batch=2, fallback=False)
    # Left in eval mode (GPT-2's dropout would change eager's tokens), as the step traced it.
    assert not any(m.training for m in model.modules())
    ids, mask = _left_padded([6, 9], seed=17)
    got = _greedy(model, ids, mask, max_new_tokens=12, eos_token_id=256)
    assert torch.equal(got, _greedy(eager, ids, mask, max_new_tokens=12, eos_token_id=256))
    assert (model.forward.steps, model.forward.eager_calls) == (12, 0)


@pytest.mark.parametrize("kind", ["int8", "int4:g128:asym"])
def test_quantized_weights_generate_as_eager_on_their_dequantized_values(kind):
    """kiln.llm.compile's options reach the step: weights_dtype stores every
    linear layer, the lm_head and the embedding quantized (kiln_gemm.h's
    rules), so generate() gives the tokens of the eager model whose weights
    are their dequantized values (quant_reference.py); fp32 summation order
    is all that separates the two. Three prompts, left-padded."""
    from quant_reference import with_dequantized_linears

    ids, mask = _left_padded([7, 4, 9])
    want = _greedy(with_dequantized_linears(_tiny_llama(), kind), ids, mask, max_new_tokens=16,
                   eos_token_id=256)
    wd = torch.int8 if kind == "int8" else kind
    model = kiln.llm.compile(_tiny_llama(), max_length=CAP, batch=4, fallback=False, weights_dtype=wd)
    # Every linear layer's and the embedding's constant is stored quantized
    # (explain marks it so), the lm_head's among them.
    tag = "[" + kind.split(":")[0] + "]"
    nodes = [ln for ln in kiln.explain(model.forward.compiled).splitlines()
             if " = linear " in ln or (" = gather " in ln and "(const" in ln)]
    assert len(nodes) >= 3 and all(tag in ln for ln in nodes), nodes
    assert any("lm_head" in ln for ln in nodes) and any("embed_tokens" in ln for ln in nodes)
    assert torch.equal(_greedy(model, ids, mask, max_new_tokens=16, eos_token_id=256), want)
    assert (model.forward.steps, model.forward.eager_calls) == (16, 0)


def test_an_every_token_step_that_fails_to_compile_leaves_those_calls_to_eager(monkeypatch):
    """Where the every-token step does not compile, assisted decoding runs
    its calls in the model's own forward, as before it existed (said once),
    and the last-token calls still run the step."""
    eager, model = _pair()

    def refuse(self, *a, **k):
        raise KilnError("no such step here")
    monkeypatch.setattr(kiln.llm.StaticCacheStep, "trace", refuse)
    ids = torch.tensor([[5, 6, 7, 8, 9] * 3])
    kw = dict(max_new_tokens=8, eos_token_id=256, prompt_lookup_num_tokens=4)
    with pytest.warns(UserWarning, match="every token's logits did not compile .*no such step here") as seen:
        got = _greedy(model, ids, **kw)
    assert sum("did not compile" in str(w.message) for w in seen) == 1
    assert torch.equal(got, _greedy(eager, ids, **kw))
    assert model.forward.every_token is False and model.forward.eager_calls >= 1


def test_a_prompt_given_as_embeddings_then_decodes_in_the_step(batch4):
    """generate(inputs_embeds=...), as a multimodal model's prompt comes:
    the model's own forward runs the prompt on a KilnCache (generate() gives
    no ids to count it by: the embeddings and the mask do), and the step
    every token after. Eager's tokens, left-padded rows and one row alone."""
    eager, model = batch4
    f = model.forward
    ids, mask = _left_padded([7, 4, 9])
    kw = dict(do_sample=False, pad_token_id=0, max_new_tokens=10, eos_token_id=256)
    for rows, m in ((slice(None), mask), (slice(2, 3), None)):
        emb = eager.get_input_embeddings()(ids[rows]).detach()
        steps, eager_calls = f.steps, f.eager_calls
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")  # no refusal
            got = model.generate(inputs_embeds=emb, attention_mask=None if m is None else m[rows], **kw)
        want = eager.generate(inputs_embeds=emb, attention_mask=None if m is None else m[rows], **kw)
        assert torch.equal(got, want)
        assert (f.steps - steps, f.eager_calls - eager_calls) == (9, 1)
