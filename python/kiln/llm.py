"""A Hugging Face causal LM as one generation step with its KV cache passed
in: the form kiln.trace compiles whole, writing the cache in place, and
that `kiln generate` (the C runtime alone) and any C API program run.

    step = kiln.llm.StaticCacheStep(model, max_length=2048)
    compiled = step.trace(prompt_ids, weights_dtype="int4:a8")   # prefill and decode
    kiln.save(compiled, "step.kiln")                              # kiln generate step.kiln --prompt ...

    kv = step.empty_cache()
    logits = compiled(prompt_ids, torch.tensor(0), kv)            # the prompt
    logits = compiled(next_id[None], torch.tensor(n), kv)         # then a token at a time

The step builds transformers' StaticCache over the caller's tensors on each
call, so the model's own attention code writes them (index_copy_), and
torch.export sees the writes as updates of inputs. Nothing here computes:
it is capture glue, as kiln.fastpath is."""

import torch

import kiln  # kiln.trace, at call time (this module is imported by kiln's own __init__)
from kiln.errors import KilnError


class StaticCacheStep(torch.nn.Module):
    """One generation step of a causal LM (batch 1): (input_ids [1, T],
    past: an int64 scalar, the tokens already in the cache, kv: the keys and
    values of each layer, [1, kv heads, max_length, head dim] each) -> the
    logits of the last of the T tokens, [1, vocabulary]; their keys and
    values written into kv at positions past .. past + T - 1."""

    def __init__(self, model, max_length):
        super().__init__()
        self.model, self.max_length = model, int(max_length)

    def forward(self, input_ids, past, kv):
        from transformers.cache_utils import StaticCache, StaticLayer
        cache = StaticCache(max_cache_len=self.max_length, config=self.model.config)
        if any(type(layer) is not StaticLayer for layer in cache.layers):
            raise KilnError(f"kiln.llm.StaticCacheStep: {type(self.model).__name__} has cache layers other than "
                            f"full attention ({sorted({type(x).__name__ for x in cache.layers})}), which this "
                            "step does not lay out")
        for i, layer in enumerate(cache.layers):
            layer.keys, layer.values = kv[2 * i], kv[2 * i + 1]
            layer.cumulative_length = past.clone()
            layer.device = input_ids.device
            layer.is_initialized = True
        pos = torch.arange(input_ids.shape[1]) + past
        out = self.model(input_ids=input_ids, past_key_values=cache, position_ids=pos[None], cache_position=pos,
                         use_cache=True, logits_to_keep=1)
        return out.logits[:, -1]

    def empty_cache(self):
        """Zeroed keys and values for every layer, in the order forward takes them."""
        cfg = self.model.config.get_text_config()
        heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        dtype = self.model.dtype
        return [torch.zeros(1, heads, self.max_length, dim, dtype=dtype) for _ in range(2 * cfg.num_hidden_layers)]

    def trace(self, example_ids, **options):
        """kiln.trace of this step (options: kiln.trace's, weights_dtype
        and so on), the token count symbolic in 1..max_length: one compiled
        module does prefill and decode."""
        tokens = torch.export.Dim("tokens", min=1, max=self.max_length)
        n_kv = 2 * self.model.config.get_text_config().num_hidden_layers
        return kiln.trace(self, (example_ids, torch.tensor(0), self.empty_cache()),
                          dynamic_shapes=({1: tokens}, None, [None] * n_kv), **options)
