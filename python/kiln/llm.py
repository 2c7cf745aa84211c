"""A Hugging Face causal LM as one generation step with its KV cache passed
in: the form kiln.trace compiles whole, writing the cache in place, and
that `kiln generate` (the C runtime alone) and any C API program run.

    step = kiln.llm.StaticCacheStep(model, max_length=2048)
    compiled = step.trace(prompt_ids, weights_dtype="int4:a8")   # prefill and decode
    kiln.save(compiled, "step.kiln", tokenizer=tok)               # kiln generate step.kiln --text ...

    kv = step.empty_cache()
    logits = compiled(prompt_ids, torch.tensor(0), kv)            # the prompt
    logits = compiled(next_id[None], torch.tensor(n), kv)         # then a token at a time

    rows = kiln.llm.StaticCacheStep(model, 2048, batch=4)         # up to four prompts at once,
    kv = rows.empty_cache(ids.shape[0])                           # a cache for the rows run
    logits = rows.trace(ids)(ids, torch.tensor(0), kv, pad)       # left-padded by pad[b] slots

    kiln.llm.compile(model, max_length=2048, weights_dtype="int4:a8")   # generate() runs that step
    out = model.generate(ids, max_new_tokens=64)                  # unchanged, without Dynamo

The step builds transformers' StaticCache over the caller's tensors on each
call, so the model's own attention code writes them (index_copy_), and
torch.export sees the writes as updates of inputs. Nothing here computes:
it is capture glue, as kiln.fastpath is (the cache's layout is read from
what one eager step of the model writes)."""

import inspect
import sys
import warnings

import torch

import kiln  # kiln.trace, at call time (this module is imported by kiln's own __init__)
from kiln.capture import log_enabled
from kiln.errors import KilnError


# Layer kinds whose attention a mask limits to a window of positions.
_WINDOWED = ("sliding_attention", "chunked_attention")


class StaticCacheStep(torch.nn.Module):
    """One generation step of a causal LM: (input_ids [B, T], past: an
    int64 scalar, the cache slots filled so far, kv: the keys and values of
    each layer, [B, heads, max_length, dim] each (cache_layout(): kv heads
    and head dim, or a latent attention's own), and for batch > 1
    (B then any row count up to batch) pad [B]: the slots before each row's
    prompt, which is left-padded) ->
    the logits of each row's last token, [B, vocabulary] (with
    all_logits, every token's: [B, T, vocabulary], what assisted decoding
    verifies its candidates with); the keys and values written into kv at
    slots past .. past + T - 1. A padded row's
    positions count from its first token and its padding is masked out, as
    generate() does with a left-padded batch and its attention mask. Layers with
    full, sliding-window or chunked attention (Mistral, Gemma 2 and 3, Qwen2's
    sliding layers, Llama 4's chunks): a sliding or chunked layer's cache is
    as long as the others'."""

    def __init__(self, model, max_length, batch=1, all_logits=False):
        super().__init__()
        if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
            # Its decoder reads the encoder's output and a cross-attention
            # cache beside its own: not this step's inputs.
            raise KilnError(f"kiln.llm takes causal (decoder-only) language models; {type(model).__name__} is an "
                            "encoder-decoder model: compile its forward for generate() with "
                            "model.forward = torch.compile(model.forward, backend=\"kiln\") instead")
        self.model, self.max_length, self.batch = model, int(max_length), int(batch)
        self.all_logits = bool(all_logits)
        self.training = model.training  # the model's mode, not a new module's (training)

    def forward(self, input_ids, past, kv, pad=None):
        from transformers.cache_utils import StaticCache, StaticLayer, get_layer_types_and_kwargs
        config = self.model.config
        cache = StaticCache(max_cache_len=self.max_length, config=config)
        # A sliding-window (or chunked: Llama 4) layer keeps only its window
        # and rolls it, on a Python count (a branch per step that no one
        # traced graph holds). Here it keeps every position as a full layer
        # does; the model's own sliding-window or chunk mask, built from
        # absolute positions, limits what it attends to: the same attention,
        # over max_length rows.
        kinds = get_layer_types_and_kwargs(config.get_text_config(decoder=True))[0]
        cache.layers = [StaticLayer(self.max_length) if kind in _WINDOWED else layer
                        for kind, layer in zip(kinds, cache.layers)]
        other = sorted({kind for kind, layer in zip(kinds, cache.layers) if type(layer) is not StaticLayer})
        if other or len(kinds) != len(cache.layers):
            raise KilnError(f"kiln.llm.StaticCacheStep: {type(self.model).__name__} has layers of kinds other than "
                            f"full or sliding-window attention ({other}), whose caches this step does not lay out")
        for i, layer in enumerate(cache.layers):
            layer.keys, layer.values = kv[2 * i], kv[2 * i + 1]
            layer.cumulative_length = past.clone()
            layer.device = input_ids.device
            layer.is_initialized = True
        pos = torch.arange(input_ids.shape[1]) + past
        if pad is None:
            positions, mask = pos[None], None
        else:
            # Row b's prompt starts pad[b] slots in: what generate() gives a
            # left-padded batch, its positions counted from its first token
            # and the slots before it masked out.
            positions = (pos[None] - pad[:, None]).clamp(min=0)
            mask = (torch.arange(self.max_length)[None] >= pad[:, None]).long()
        out = self.model(input_ids=input_ids, **{_cache_arg(self.model): cache}, position_ids=positions,
                         cache_position=pos, attention_mask=mask, use_cache=True,
                         logits_to_keep=0 if self.all_logits else 1)
        return out.logits if self.all_logits else out.logits[:, -1]

    def empty_cache(self, rows=None):
        """Zeroed keys and values for every layer, in the order forward
        takes them, for `rows` rows (default: the most, batch)."""
        dtype = self.model.dtype
        return [torch.zeros(rows or self.batch, heads, self.max_length, dim, dtype=dtype)
                for heads, dim in self.cache_layout()]

    def cache_layout(self):
        """(heads, dim) of each cache tensor, keys then values per layer, as
        the model writes them: DeepSeek V2's latent attention caches its
        compressed latent and the keys' rotary part (one head each), Gemma
        4's full layers keys of their own head_dim. Read from what one step
        of the model writes, else from the config's head_dim."""
        if getattr(self, "_layout", None) is None:
            self._layout = _written_layout(self.model)
        if self._layout is None:
            cfg = self.model.config.get_text_config()
            heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
            dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
            self._layout = [(heads, dim)] * (2 * cfg.num_hidden_layers)
        return self._layout

    def trace(self, example_ids, **options):
        """kiln.trace of this step (options: kiln.trace's, weights_dtype
        and so on), the token count symbolic in 1..max_length: one compiled
        module does prefill and decode. With batch > 1 the row count is
        symbolic too, 1..batch (1..3 for batch=2; the cache made for as many
        rows as a call has), and the rows' padding is the last input. example_ids' values
        and sizes only seed the trace."""
        tokens = torch.export.Dim("tokens", min=1, max=self.max_length)
        n_kv = len(self.cache_layout())
        if self.batch == 1:
            return kiln.trace(self, (example_ids[:1], torch.tensor(0), self.empty_cache()),
                              dynamic_shapes=({1: tokens}, None, [None] * n_kv), **options)
        # Two example rows: torch.export takes a size of 1 as fixed. And a
        # range reaching past the example: at its maximum, export gives
        # every input its own symbol for the rows (each cache then needs a
        # check, and is written out of place), so batch=2 traces 1..3.
        rows = torch.export.Dim("rows", min=1, max=max(self.batch, 3))
        ids = example_ids[:1].expand(2, -1).contiguous()
        return kiln.trace(self, (ids, torch.tensor(0), self.empty_cache(2), torch.zeros(2, dtype=torch.long)),
                          dynamic_shapes=({0: rows, 1: tokens}, None, [{0: rows}] * n_kv, {0: rows}), **options)


def _cache_arg(model):
    """The name forward takes the cache by: "cache" (transformers 5.2x,
    where past_key_values is deprecated), else past_key_values."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _written_layout(model):
    """[(heads, dim)] of the keys and values each layer of `model` caches,
    read from the cache of a one-token step in eager PyTorch (the cost of
    one decode step); None when that step fails."""
    from transformers.cache_utils import DynamicCache
    try:
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            model(input_ids=torch.zeros(1, 1, dtype=torch.long), **{_cache_arg(model): cache}, use_cache=True)
            return [(t.shape[1], t.shape[3]) for layer in cache.layers for t in (layer.keys, layer.values)]
    except Exception:  # noqa: BLE001 (any failure: the config's sizes)
        return None


def compile(model, max_length, batch=1, **options):  # noqa: A001 (kiln.llm.compile, beside torch.compile)
    """Compiles `model` (a Hugging Face causal LM) for its own generate():
    traces its StaticCacheStep (prefill and decode in one module, `options`
    as kiln.trace takes them: weights_dtype and so on) and makes it the
    model's forward, so model.generate() runs it, unchanged, for any prompt
    and up to max_length tokens in all, up to `batch` prompts at once (left
    padded). Returns the model; kiln.llm.uncompile(model) undoes it (and
    a second compile replaces the first).

    Beside torch.compile(model.forward, backend="kiln"), a step has no
    Dynamo frame to enter (its guards over every parameter and the cache
    cost ~0.3 ms a token) and runs the same module as `kiln generate`.
    A call the step does not cover runs the model's own forward, correctly,
    on the same cache (see GenerationForward)."""
    uncompile(model)  # the step traces the model's own forward
    step = StaticCacheStep(model, max_length, batch)
    compiled = step.trace(_EXAMPLE_IDS, **options)
    model.forward = forward = GenerationForward(model, step, compiled, options)
    model.prepare_inputs_for_generation = _PlainMasks(model, forward)
    return model


# Two tokens: torch.export takes an example size of 1 as fixed.
_EXAMPLE_IDS = torch.ones(1, 2, dtype=torch.long)


def uncompile(model):
    """Undoes kiln.llm.compile: the model's own forward again."""
    for name in ("forward", "prepare_inputs_for_generation"):
        model.__dict__.pop(name, None)
    return model


class _PlainMasks:
    """The model's prepare_inputs_for_generation, except for a KilnCache:
    the cache generate() made for a generation beginning becomes one
    (GenerationForward.adopt) before the inputs are prepared, and the step
    gets generate()'s 2D attention mask as it is. For a compileable cache
    (a StaticCache, which a model's generation_config may ask for:
    Gemma's "hybrid") generate() builds a 4D mask each token (~90 us for
    the bench's Llama), which the step would not read, and checking it
    would cost more. (The KilnCache stays compileable to everything else:
    the model's own forward must mask it as any static cache.)"""

    def __init__(self, model, forward):
        self.inner = type(model).prepare_inputs_for_generation.__get__(model)
        self.forward = forward
        self.__signature__ = inspect.signature(self.inner)  # generate() reads its parameters

    def __call__(self, *args, **kw):
        cache = kw.get("cache")
        if type(cache) is not _cache_class():
            ids = args[0] if args else kw.get("input_ids")
            embeds = kw.get("inputs_embeds")
            adopted = None
            if _empty(cache) and (_embedded(ids, embeds) or type(ids) is torch.Tensor and ids.dim() == 2):
                adopted = self.forward.adopt(cache, ids, kw.get("attention_mask"), embeds)
            if adopted is None:
                return self.inner(*args, **kw)
            kw["cache"] = cache = adopted
        cache.plain_masks = True
        try:
            return self.inner(*args, **kw)
        finally:
            cache.plain_masks = False


def _embedded(ids, embeds):
    """Whether a prompt comes as embeddings [B, T, hidden] (generate() then
    passes ids with no columns, or none)."""
    return (type(embeds) is torch.Tensor and embeds.dim() == 3
            and (ids is None or type(ids) is torch.Tensor and ids.dim() == 2 and ids.shape[1] == 0))


def _empty(cache):
    """Whether `cache` is a transformers Cache holding no tokens yet."""
    return getattr(cache, "get_seq_length", None) is not None and int(cache.get_seq_length()) == 0


class KilnCache:
    pass  # replaced below, once transformers is imported (it is not a dependency of `import kiln`)


def _cache_class():
    """KilnCache: transformers' StaticCache over a compiled step's tensors,
    made on first use (transformers is imported lazily)."""
    global KilnCache
    if getattr(KilnCache, "_made", False):
        return KilnCache
    from transformers.cache_utils import Cache, StaticCache, StaticLayer

    class _KilnCache(StaticCache):
        """The cache a compiled step writes: one StaticLayer per layer over
        the step's tensors (every layer full-length, as the step lays them
        out), each row's left padding, and the slots filled so far (each
        layer's cumulative_length, as StaticLayer keeps it). The model's
        own forward runs on it unchanged (a call the step does not cover).

        Compileable, as a StaticCache is (the model's own forward then
        masks the slots not yet written), except to generate()'s input
        preparation under kiln.llm.compile (_PlainMasks), which then passes
        the 2D attention mask the step checks."""

        _made = True
        plain_masks = False

        @property
        def is_compileable(self):
            return not self.plain_masks

        def __init__(self, layout, max_length, rows, pad, dtype):
            Cache.__init__(self, layers=[StaticLayer(max_length) for _ in range(len(layout) // 2)])
            for layer, (hk, dk), (hv, dv) in zip(self.layers, layout[0::2], layout[1::2]):
                layer.lazy_initialization(torch.empty(rows, hk, 0, dk, dtype=dtype),
                                          torch.empty(rows, hk, 0, dv, dtype=dtype))
                if hv != hk:
                    layer.values = torch.zeros(rows, hv, max_length, dv, dtype=dtype)
            self.pad, self.padded = pad, bool(pad.any())
            # Each layer's count of filled slots is a view of one tensor, so
            # a step advances them all at once; the model's own forward
            # (StaticLayer.update) still advances each layer's own.
            self.lengths = torch.zeros(len(self.layers), dtype=torch.long)
            for i, layer in enumerate(self.layers):
                layer.cumulative_length = self.lengths[i]

        def reorder_cache(self, beam_idx):
            super().reorder_cache(beam_idx)
            self.pad = self.pad.index_select(0, beam_idx)

        def batch_repeat_interleave(self, repeats):
            super().batch_repeat_interleave(repeats)
            self.pad = self.pad.repeat_interleave(repeats, dim=0)

        def batch_select_indices(self, indices):
            super().batch_select_indices(indices)
            self.pad = self.pad[indices]

    KilnCache = _KilnCache
    return KilnCache


# generate()'s keyword arguments a step covers (any value; and the cache's,
# by the model's name for it), and those it covers at their defaults only.
_STEP_ARGS = ("input_ids", "attention_mask", "position_ids", "return_dict", "logits_to_keep", "use_cache")
_STEP_DEFAULTS = {"output_attentions": (None, False), "output_hidden_states": (None, False),
                  "inputs_embeds": (None,), "labels": (None,)}


class GenerationForward:
    """A causal LM's forward as generate() calls it, run by its compiled
    StaticCacheStep: each call writes the tokens' keys and values into a
    KilnCache and returns the last token's logits ([B, 1, vocabulary]) and
    the cache. generate()'s first call brings the empty cache it made
    (DynamicCache or StaticCache); the step answers it with a KilnCache,
    which generate() then passes back each token (and returns when asked,
    and takes again to continue a generation).

    The step computes positions and masks from each row's left padding, so
    a call is the step's only where that is what the model would compute:
    the attention mask (if any) is a left-padded one over every slot
    filled, position ids (if any) count from each row's first token, the
    rows fit the step's batch and the slots its max_length, and the
    logits asked for are the last token's or the last n of the call's
    (assisted decoding's: a second step, StaticCacheStep's all_logits,
    traced with the same options on the first such call). Any
    other call runs the model's own forward on the same cache (a
    StaticCache to it), as does beam search's reordering, which the cache
    follows."""

    def __init__(self, model, step, compiled, options=None):
        self.model = model
        self.eager = type(model).forward.__get__(model)
        self.step, self.compiled = step, compiled
        self.options = dict(options or {})
        self.every_token = None  # the all_logits step: None until first use, False if it failed to compile
        self.cache_arg = _cache_arg(model)
        self.args = frozenset(_STEP_ARGS + (self.cache_arg,))
        self.steps = self.eager_calls = 0  # calls the step ran, calls the model's forward ran
        self.warned = set()  # why a generation ran in eager, each said once
        self.layout = step.cache_layout()
        self.dtype = model.dtype
        # generate() reads forward's parameters (the cache's name, logits_to_keep).
        self.__signature__ = inspect.signature(self.eager)
        from transformers.modeling_outputs import CausalLMOutputWithPast
        self.output = CausalLMOutputWithPast
        self.cache_field = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

    def __call__(self, *args, **kw):
        cache = kw.get(self.cache_arg)
        ids = kw.get("input_ids")
        want = None if args else self._covers(kw, ids)
        if want is None:
            return self._eager(*args, **kw)
        if type(cache) is not _cache_class():
            # A generation beginning (an empty cache), or the caller's cache
            # (said once why it runs eager); a cache the model's own forward
            # has filled stays with it, as the warning at its start said.
            fresh = cache is not None and (getattr(cache, "_is_user_defined", False) or _empty(cache))
            cache = self.adopt(cache, ids, kw.get("attention_mask")) if fresh else None
            if cache is None:
                return self._eager(**kw)
        past = cache.layers[0].cumulative_length
        filled, t = int(past), ids.shape[1]
        if filled + t > self.step.max_length:
            raise KilnError(f"kiln.llm: this generation reaches {filled + t} tokens; the model was compiled "
                            f"for max_length={self.step.max_length} (kiln.llm.compile's argument)")
        if not self._masks_agree(cache, kw, ids, filled, t):
            return self._eager(**kw)
        kv = [x for layer in cache.layers for x in (layer.keys, layer.values)]
        compiled = self.compiled if want == "last" else self._every_token()
        if compiled is None:
            return self._eager(**kw)
        if self.step.batch == 1:
            logits = compiled(ids, past, kv)
        else:
            logits = compiled(ids, past, kv, cache.pad)
        cache.lengths.add_(t)
        self.steps += 1
        # (Every token's logits, of which the call keeps the last `want`:
        # what more the lm_head computes is the first call's, the prompt.)
        out = self.output(logits=logits[:, None] if want == "last" else logits[:, t - want:],
                          **{self.cache_field: cache})
        return out if kw.get("return_dict", True) is not False else out.to_tuple()

    def _eager(self, *args, **kw):
        self.eager_calls += 1
        return self.eager(*args, **kw)

    def _covers(self, kw, ids):
        """Which logits a call whose arguments are the step's asks for:
        "last" (the last token's), the count of last tokens whose logits it
        keeps (more than one: assisted decoding's prompt, its candidates
        and their verifications), or None (not the step's call). Their
        values are checked against the cache later."""
        for k, v in kw.items():
            if k not in self.args and (k not in _STEP_DEFAULTS or not any(v is d for d in _STEP_DEFAULTS[k])):
                return None
        if type(ids) is not torch.Tensor or ids.dim() != 2 or ids.dtype != torch.long or kw.get("use_cache") is False:
            return None
        keep, t = kw.get("logits_to_keep", 0), ids.shape[1]
        if type(keep) is not int:  # a tensor of the positions to keep
            return None
        if keep == 1 or (keep == 0 and t == 1):
            return "last"
        return t if keep == 0 else keep if 1 < keep <= t else None

    def _every_token(self):
        """The step returning every token's logits, traced on first use with
        compile's options (the model's own forward in place while it
        traces, as compile has it); None where that trace failed (said
        once: such calls then run the model's own forward)."""
        if self.every_token is False:
            return None
        if self.every_token is None:
            if log_enabled():
                print("kiln.llm: a call asks for more than the last token's logits (assisted decoding): "
                      "tracing the step that returns them, once", file=sys.stderr)
            mine = {k: self.model.__dict__.pop(k) for k in ("forward", "prepare_inputs_for_generation")
                    if k in self.model.__dict__}
            try:
                step = StaticCacheStep(self.model, self.step.max_length, self.step.batch, all_logits=True)
                step._layout = self.layout
                self.every_token = step.trace(_EXAMPLE_IDS, **self.options)
            except Exception as e:  # noqa: BLE001 (any failure: the model's own forward, as before)
                self.every_token = False
                warnings.warn(f"kiln.llm: the step returning every token's logits did not compile ({e}); calls "
                              "asking for several tokens' logits run the model's own forward", stacklevel=3)
                return None
            finally:
                self.model.__dict__.update(mine)
        return self.every_token

    def adopt(self, cache, ids, mask, embeds=None):
        """A KilnCache for a generation beginning, or None (and a warning,
        once for each reason: a generation then runs in eager PyTorch, a
        cliff no one should meet unawares). `cache` must be the empty
        DynamicCache or StaticCache generate() made (not one the caller
        passed: they may read it afterwards), the rows must fit and the
        mask must be left padding. A prompt given as embeddings (embeds,
        [B, T, hidden], with no ids: a multimodal model's) is measured by
        them; the model's own forward runs it, and the step the tokens after."""
        rows, t = tuple(embeds.shape[:2]) if _embedded(ids, embeds) else tuple(ids.shape)
        why = self._adopt_refusal(cache, rows, t, mask)
        if why is None:
            return _cache_class()(self.layout, self.step.max_length, rows, self._pad(rows, t, mask), self.dtype)
        if why not in self.warned:
            self.warned.add(why)
            warnings.warn(f"kiln.llm: {why}: this generation runs the model's own forward (eager PyTorch)",
                          stacklevel=3)
        return None

    @staticmethod
    def _pad(rows, t, mask):
        if mask is None:
            return torch.zeros(rows, dtype=torch.long)
        return t - mask.long().sum(1)

    def _adopt_refusal(self, cache, rows, t, mask):
        from transformers.cache_utils import DynamicCache, StaticCache
        if getattr(cache, "_is_user_defined", False):
            return (f"generate() was given a {type(cache).__name__} (kiln's step writes a KilnCache of its own; "
                    "pass none, or one an earlier generate() returned)")
        if type(cache) not in (DynamicCache, StaticCache):
            return f"a {type(cache).__name__} is not a cache the step writes"
        if int(cache.get_seq_length()) != 0:
            return f"a {type(cache).__name__} that already holds tokens"
        if rows > self.step.batch:
            return f"{rows} rows, compiled for batch={self.step.batch} (kiln.llm.compile's argument)"
        if mask is None:
            return None
        if mask.dim() != 2 or tuple(mask.shape) != (rows, t):
            return f"an attention mask of shape {tuple(mask.shape)} for input ids of {(rows, t)}"
        pad = self._pad(rows, t, mask)
        # A row of padding alone has nothing to attend to; a step without a
        # padding input (batch 1) has none at all.
        if bool((pad >= t).any()):
            return "a row of padding alone"
        if self.step.batch == 1 and bool(pad.any()):
            return "padded rows, compiled for batch=1 (compile with batch >= 2 for left-padded prompts)"
        if not torch.equal(mask.bool(), torch.arange(t)[None] >= pad[:, None]):
            return "an attention mask that is not left padding"
        return None

    def _masks_agree(self, cache, kw, ids, filled, t):
        """Whether the call's rows, mask and positions are those the step
        computes from the cache's padding. (Checked every call, in a few
        microseconds where no row is padded: what generate() appends
        could be anything a caller passes.)"""
        pad, rows = cache.pad, ids.shape[0]
        if rows != pad.shape[0]:
            return False
        mask = kw.get("attention_mask")
        if mask is not None:
            if mask.dim() != 2 or mask.shape[0] != rows or mask.shape[1] != filled + t:
                return False
            if not (bool(mask.all()) if not cache.padded else
                    torch.equal(mask.bool(), torch.arange(filled + t)[None] >= pad[:, None])):
                return False
        elif cache.padded:
            return False
        positions = kw.get("position_ids")
        if positions is None:  # the model counts from slot 0, padded or not
            return not cache.padded
        if positions.dim() != 2 or positions.shape[1] != t or positions.shape[0] not in (1, rows):
            return False
        if t == 1 and not cache.padded:
            return bool((positions == filled).all())
        expect = (torch.arange(filled, filled + t)[None] - pad[:, None]).clamp(min=0)
        return torch.equal(positions.expand_as(expect), expect)
