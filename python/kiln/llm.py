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

The step builds transformers' StaticCache over the caller's tensors on each
call, so the model's own attention code writes them (index_copy_), and
torch.export sees the writes as updates of inputs. Nothing here computes:
it is capture glue, as kiln.fastpath is (the cache's layout is read from
what one eager step of the model writes)."""

import inspect

import torch

import kiln  # kiln.trace, at call time (this module is imported by kiln's own __init__)
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
    the logits of each row's last token, [B, vocabulary]; the keys and
    values written into kv at slots past .. past + T - 1. A padded row's
    positions count from its first token and its padding is masked out, as
    generate() does with a left-padded batch and its attention mask. Layers with
    full, sliding-window or chunked attention (Mistral, Gemma 2 and 3, Qwen2's
    sliding layers, Llama 4's chunks): a sliding or chunked layer's cache is
    as long as the others'."""

    def __init__(self, model, max_length, batch=1):
        super().__init__()
        self.model, self.max_length, self.batch = model, int(max_length), int(batch)

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
                         cache_position=pos, attention_mask=mask, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1]

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
