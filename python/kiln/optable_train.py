"""Op-table entries for training graphs.

aten._safe_softmax: attention's math formulation (what a training graph's
attention becomes, see dynamo._AttentionAsMath) takes this softmax, which
gives zeros for a row of all -inf where softmax gives NaN. Decomposed, it is
softmax plus eq(-inf), two logical_nots, an any and a where over the whole
score tensor; kept whole (capture._KEEP_WHOLE) it is one SOFTMAX with its
safe flag, which checks one element per row. Its backward is plain
softmax's (_softmax_backward_data), so the backward graph is unchanged.

Compiled optimizer steps:

torch.compile of a function calling opt.step() traces torch's foreach
optimizer code; the decompositions torch.compile applies to lerp and
addcmul (AdamW's moment updates) emit prims.fma. That prim is defined by
torch._inductor.inductor_prims, whose import costs seconds, so it is
registered when the torch.compile backend runs (torch.compile has imported
it by then), not when kiln is imported.
"""

import torch

from kiln.optable import TABLE, _norm_dim, _val, cast, operand, register

aten = torch.ops.aten


@register(aten._safe_softmax.default)
def _safe_softmax(ctx, n):
    x = ctx.value(n.args[0])
    # dtype= is the type softmax computes and returns in (the input is cast
    # to it first), as torch's own decomposition does.
    x = cast(ctx, x, torch.float32)
    rank = len(ctx.shape(x))
    y = ctx.node("softmax", [x], [_norm_dim(n.args[1], max(rank, 1)), 1], origin=ctx.origin(n))
    return cast(ctx, y, _val(n).dtype)


def _fma(ctx, n):
    # a * b + c as a mul then an add: two roundings where a fused
    # multiply-add has one, a difference of at most an ulp of the product.
    dtype = _val(n).dtype
    a, b, c = (operand(ctx, x, dtype) for x in n.args[:3])
    return ctx.node("add", [ctx.node("mul", [a, b], origin=ctx.origin(n)), c], origin=ctx.origin(n))


def register_compile_prims():
    """Registers the prims that exist once torch.compile's modules are loaded."""
    if hasattr(torch.ops.prims, "fma"):
        TABLE.setdefault(torch.ops.prims.fma.default, _fma)
