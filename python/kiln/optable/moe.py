"""Op-table handlers for what a mixture-of-experts layer adds to a graph as
transformers writes it (integrations/moe.py, Mixtral and its kin): the
count of tokens per expert (aten.histc of the sorted expert ids) and the
experts' matmuls over the sorted rows (transformers::grouped_mm_fallback,
kiln's GROUPED_MM).

Imported by kiln.optable. No numerics here: each handler picks kiln ops.
"""

import torch

from kiln.errors import Unsupported
from kiln.optable.core import _arg, _shape, _val, aten, cast, dtype_id, reshape
from kiln.optable.registry import register, register_by_name

# Integers of at most this magnitude are exact in float32.
_F32_EXACT = 1 << 24


def _integer_source(node):
    """The integer tensor node a float32 conversion reads, else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    if node.target not in (aten._to_copy.default, aten.to.dtype, torch.ops.prims.convert_element_type.default):
        return None
    src = node.args[0]
    v = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
    if isinstance(v, torch.Tensor) and not v.dtype.is_floating_point and v.dtype != torch.bool:
        return src
    return None


@register(aten.histc.default)
def _histc(ctx, n):
    """histc(ids.float(), bins=E, min=a, max=b) with b - a + 1 == E: how many
    ids equal each integer a..b (transformers' tokens per expert).

    Only this case: torch's histc places a value by interpolating between
    bin edges computed in floating point, which kiln does not mirror in
    general; for integer values with one bin per integer the bin is exactly
    the value minus a (the edges j * (E-1)/E lie strictly between integers
    until the last, whose bin also takes b). Values outside a..b are not
    counted, as in torch; integers rounded by the cast to float32 stay
    outside a..b when |a|, |b| < 2**24."""
    x_node = n.args[0]
    bins = int(_arg(n, 1, "bins", 100))
    lo, hi = _arg(n, 2, "min", 0), _arg(n, 3, "max", 0)
    if _integer_source(x_node) is None or _val(n).dtype != torch.float32:
        raise Unsupported("histc of values not known to be integers (only integer ids are counted)")
    if lo != int(lo) or hi != int(hi) or int(hi) - int(lo) + 1 != bins:
        raise Unsupported(f"histc with {bins} bins over [{lo}, {hi}] (only one bin per integer)")
    lo, hi = int(lo), int(hi)
    if not (-_F32_EXACT < lo and hi < _F32_EXACT):
        raise Unsupported("histc over integers float32 does not hold exactly")
    x = ctx.value(x_node)
    count = 1
    for d in ctx.shape(x):
        count = count * d
    x = reshape(ctx, x, [count, 1])
    levels = ctx.node("iota", [], length=bins, start=lo, step=1, dtype=dtype_id(torch.float32))
    hits = ctx.node("eq", [x, reshape(ctx, levels, [1, bins])], origin=ctx.origin(n))
    y = ctx.node("sum", [cast(ctx, hits, torch.float32)], origin=ctx.origin(n), axes=1 << 0, keepdim=0)
    return reshape(ctx, y, _shape(n))


def _transposed_source(node):
    """The (E, N, K) tensor a (E, K, N) weight is the transpose of (a
    parameter transformers hands over as weight.transpose(-2, -1)), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    v = node.meta.get("val")
    if not isinstance(v, torch.Tensor) or v.dim() != 3:
        return None
    if node.target is aten.permute.default and [d % 3 for d in node.args[1]] == [0, 2, 1]:
        return node.args[0]
    if node.target is aten.transpose.int and sorted(d % 3 for d in node.args[1:3]) == [1, 2]:
        return node.args[0]
    return None


@register(aten._grouped_mm.default)
def _torch_grouped_mm(ctx, n):
    """torch._grouped_mm(x (S, K), w (E, K, N), offs=...), which transformers
    calls for bf16 experts: on the CPU each segment is what transformers'
    fallback op computes for it (its rows past the last offset eager leaves
    unwritten, torch.empty; GROUPED_MM's are 0). A bias, an output dtype or
    another form of the op (no offsets, 3-d x) is left to eager."""
    if (_arg(n, 3, "bias", None) is not None or _arg(n, 4, "out_dtype", None) is not None
            or _arg(n, 2, "offs", None) is None or _val(n.args[0]).dim() != 2 or _val(n.args[1]).dim() != 3):
        raise Unsupported("torch._grouped_mm other than x (S, K) by w (E, K, N) at offsets")
    return _grouped_mm(ctx, n)


@register_by_name("transformers.grouped_mm_fallback.default")
def _grouped_mm(ctx, n):
    """transformers' grouped_mm_fallback(x (S, K), w (E, K, N), offs (E)):
    the rows of each expert's segment times its weight (GROUPED_MM follows
    its loop exactly, any offsets included). A transposed parameter is read
    where it lies (no copy of every expert's weights)."""
    x_node, w_node = n.args[0], n.args[1]
    offs_node = _arg(n, 2, "offs")
    src = _transposed_source(w_node)
    w = ctx.value(src if src is not None else w_node)
    x, offs = ctx.value(x_node), ctx.value(offs_node)
    # A bf16 model's experts (kiln/lowp.py widens x; a parameter read where
    # it lies is still its bf16 bytes): widened exactly, summed in fp32.
    x, w = (cast(ctx, v, torch.float32) if ctx.dtype(v) in (torch.bfloat16, torch.float16) else v for v in (x, w))
    if ctx.dtype(x) != torch.float32 or ctx.dtype(w) != torch.float32:
        raise Unsupported(f"grouped_mm of {ctx.dtype(x)} by {ctx.dtype(w)} (kiln's is float32)")
    if ctx.dtype(offs) not in (torch.int64, torch.int32):
        raise Unsupported(f"grouped_mm with {ctx.dtype(offs)} offsets")
    return ctx.node("grouped_mm", [x, w, offs], origin=ctx.origin(n), w_transposed=int(src is not None))
