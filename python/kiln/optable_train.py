"""Op-table entries that compiled optimizer steps need.

torch.compile of a function calling opt.step() traces torch's foreach
optimizer code; the decompositions torch.compile applies to lerp and
addcmul (AdamW's moment updates) emit prims.fma. That prim is defined by
torch._inductor.inductor_prims, whose import costs seconds, so it is
registered when the torch.compile backend runs (torch.compile has imported
it by then), not when kiln is imported.
"""

import torch

from kiln.optable import TABLE, _val, operand


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
