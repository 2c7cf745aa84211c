"""Op-table entries for training graphs.

aten._safe_softmax: attention's math formulation (what a training graph's
attention becomes, see dynamo._AttentionAsMath) takes this softmax, which
gives zeros for a row of all -inf where softmax gives NaN. Decomposed, it is
softmax plus eq(-inf), two logical_nots, an any and a where over the whole
score tensor; kept whole (registered keep_whole) it is one SOFTMAX with its
safe flag, which checks one element per row. Its backward is plain
softmax's (_softmax_backward_data), so the backward graph is unchanged.

aten.gelu_backward: decomposed, it is erf, exp and nine more elementwise
ops; kept whole it is GELU_BACKWARD, one pass that shares one exponential
between gelu's normal CDF and density (5.0 ms -> 1.9 ms on the bench
transformer's (8, 128, 1024) activations, two threads; eager 1.6 ms).

Compiled optimizer steps:

torch.compile of a function calling opt.step() traces torch's foreach
optimizer code; the decompositions torch.compile applies to lerp and
addcmul (AdamW's moment updates) emit prims.fma. That prim is defined by
torch._inductor.inductor_prims, whose import costs seconds, so it is
registered when the torch.compile backend runs (torch.compile has imported
it by then), not when kiln is imported.
"""

import operator

import torch

from kiln import symbolic
from kiln.errors import Unsupported
from kiln.optable.core import _norm_dim, _val, attention_mask, cast, operand, reshape, sdpa_scale
from kiln.optable.registry import TABLE, register

aten = torch.ops.aten


@register(aten._safe_softmax.default, keep_whole=True)
def _safe_softmax(ctx, n):
    x = ctx.value(n.args[0])
    # dtype= is the type softmax computes and returns in (the input is cast
    # to it first), as torch's own decomposition does.
    x = cast(ctx, x, torch.float32)
    rank = len(ctx.shape(x))
    y = ctx.node("softmax", [x], origin=ctx.origin(n), axis=_norm_dim(n.args[1], max(rank, 1)), safe=1)
    return cast(ctx, y, _val(n).dtype)


@register(aten.gelu_backward.default, keep_whole=True)
def _gelu_backward(ctx, n):
    dy, x = (ctx.value(a) for a in n.args[:2])
    approx = n.kwargs.get("approximate", n.args[2] if len(n.args) > 2 else "none")
    if ctx.shape(dy) != ctx.shape(x):
        raise Unsupported("gelu_backward with broadcast operands")
    for v in (dy, x):
        if ctx.dtype(v) != torch.float32:
            raise Unsupported(f"gelu_backward in {ctx.dtype(v)}")
    return ctx.node("gelu_backward", [dy, x], origin=ctx.origin(n), approximate=1 if approx == "tanh" else 0)


@register(aten._scaled_dot_product_flash_attention_for_cpu.default)
def _flash_attention_cpu(ctx, n):
    """What F.scaled_dot_product_attention becomes under torch.compile in
    inference (AOTAutograd decomposes the public op to the CPU kernel it
    would pick): kiln's SDPA. Its second output, the logsumexp a backward
    needs, is not computed: a graph that reads it is refused (training
    graphs take attention's math formulation instead, see dynamo.py).

    Grouped-query attention (transformers' Llama and Qwen2 with fewer key
    heads) arrives with k and v of Hkv heads: the CPU kernel maps query head
    h to key head h // (H / Hkv), as kiln's SDPA does. A decode step is
    q (B, H, 1, D) against the whole cache; is_causal is top-left aligned in
    both (query i sees keys j <= i)."""
    if any(u.target is not operator.getitem or u.args[1] != 0 for u in n.users):
        raise Unsupported("the CPU flash attention's logsumexp output")
    q, k, v = (ctx.value(x) for x in n.args[:3])
    dropout = n.args[3] if len(n.args) > 3 else n.kwargs.get("dropout_p", 0.0)
    causal = n.args[4] if len(n.args) > 4 else n.kwargs.get("is_causal", False)
    mask, scale = n.kwargs.get("attn_mask"), n.kwargs.get("scale")
    if dropout:
        raise Unsupported("attention dropout")
    if any(len(ctx.shape(t)) != 4 for t in (q, k, v)):
        raise Unsupported("CPU flash attention other than (B, H, S, D)")
    hq, hk = ctx.shape(q)[1], ctx.shape(k)[1]
    # Equal head counts (the same symbol under symbolic sizes) need no
    # division; a symbolic count dividing another would need a guard.
    grouped = hq != hk and (not isinstance(hq, int) or not isinstance(hk, int) or hq % hk)
    if hk != ctx.shape(v)[1] or grouped:
        raise Unsupported("CPU flash attention whose query heads are no multiple of its key heads")
    inputs = [q, k, v]
    if mask is not None:
        inputs.append(attention_mask(ctx, mask))
    y = ctx.node("sdpa", inputs, origin=ctx.origin(n), causal=int(bool(causal)),
                 **sdpa_scale(ctx.shape(q)[-1], scale))
    return (reshape(ctx, y, symbolic.shape(n.meta["val"][0])), None)


def _fma(ctx, n):
    # a * b + c as a mul then an add: two roundings where a fused
    # multiply-add has one, a difference of at most an ulp of the product.
    dtype = _val(n).dtype
    a, b, c = (operand(ctx, x, dtype) for x in n.args[:3])
    return ctx.node("add", [ctx.node("mul", [a, b], origin=ctx.origin(n)), c], origin=ctx.origin(n))


def register_compile_prims():
    """Registers the prims that exist once torch.compile's modules are
    loaded (once: later calls find them registered)."""
    if hasattr(torch.ops.prims, "fma") and torch.ops.prims.fma.default not in TABLE:
        register(torch.ops.prims.fma.default)(_fma)
