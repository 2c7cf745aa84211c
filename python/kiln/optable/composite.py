"""Composite ops as torch.export's program holds them: kiln/training_ir.py
lowers that program without the decomposition re-trace, so an op the
decomposition would have expanded (F.pad's pad, masked_fill, chunk,
meshgrid, repeat_interleave by a number, numpy's .T, stack, baddbmm,
weight norm, softplus) reaches kiln whole.
Each is lowered as its decomposition computes it, from the kiln ops the
decomposed forms already use; none is kept whole from the decomposition
(the slow path never sees them). Other such ops share their decomposed
relative's handler where it reads the node alike: type_as with _to_copy,
where's scalar forms with where.self, torch.max(a, b) with maximum, narrow with slice (core.py), group_norm with
native_group_norm (nn.py), layer_norm with native_layer_norm (core.py)."""

import math

import torch

from kiln import symbolic
from kiln.errors import Unsupported
from kiln.optable.core import (_arg, _axes_mask, _beta_input_plus_alpha, _dense_strides, _norm_dim, _product, _val,
                               aten, broadcast_to, cast, cat_values, operand, reshape, strided_copy, vector_norm)
from kiln.optable.movement import _PAD_MODES, _pad
from kiln.optable.registry import register


@register(aten.pad.default)
def _pad_any_mode(ctx, n):
    mode = _arg(n, 2, "mode", "constant")
    if mode not in _PAD_MODES:
        raise Unsupported(f"F.pad in {mode!r} mode")
    value = _arg(n, 3, "value", None)
    return _pad(ctx, n, ctx.value(n.args[0]), list(n.args[1]), mode, 0 if value is None else value)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(ctx, n):
    # where(mask, value, x) in x's dtype, as the decomposition computes it.
    dtype = _val(n).dtype
    x = ctx.value(n.args[0])
    mask = operand(ctx, n.args[1], torch.bool)
    out = ctx.node("where", [mask, operand(ctx, n.args[2], dtype), x], origin=ctx.origin(n))
    return broadcast_to(ctx, out, list(ctx.shape(x)), ctx.origin(n))


@register(aten.numpy_T.default)
def _numpy_t(ctx, n):
    # x.T: every dim reversed.
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    if len(shape) < 2:
        return x
    src = _dense_strides(shape)
    return strided_copy(ctx, x, shape[::-1], src[::-1], 0, ctx.origin(n))


@register(aten.chunk.default)
def _chunk(ctx, n):
    # Pieces of the sizes torch's result has (the last may be shorter;
    # there may be fewer than asked): each a slice of x along dim.
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    dim = _norm_dim(_arg(n, 2, "dim", 0), len(shape))
    src = _dense_strides(shape)
    outs, start = [], 0
    for piece in _val(n):
        out = symbolic.shape(piece)
        outs.append(x if out == shape else strided_copy(ctx, x, out, src, start * src[dim], ctx.origin(n)))
        start = start + out[dim]
    return tuple(outs)


@register(aten.meshgrid.indexing, aten.meshgrid.default)
def _meshgrid(ctx, n):
    # Output i holds input i (0-d or 1-d) along its own dim, broadcast over
    # the others: dim i for "ij"; "xy" swaps the first two dims.
    tensors = list(n.args[0])
    indexing = _arg(n, 1, "indexing", "ij")
    outs = []
    for i, (t, val) in enumerate(zip(tensors, _val(n))):
        out = symbolic.shape(val)
        along = {0: 1, 1: 0}.get(i, i) if indexing == "xy" and len(tensors) > 1 else i
        v = ctx.value(t)
        lone = [1] * len(out)
        lone[along] = out[along]
        outs.append(broadcast_to(ctx, reshape(ctx, v, lone), out, ctx.origin(n)))
    return outs


@register(aten.repeat_interleave.self_int)
def _repeat_interleave(ctx, n):
    # Each element repeated in place along dim (x flattened without one):
    # x unsqueezed after dim, broadcast there to `repeats`, merged back.
    repeats = n.args[1]
    if not isinstance(repeats, int):
        raise Unsupported(f"repeat_interleave by a symbolic count ({repeats})")
    x = ctx.value(n.args[0])
    dim = _arg(n, 2, "dim", None)
    if dim is None:
        x = reshape(ctx, x, [math.prod(ctx.shape(x))])
        dim = 0
    shape = list(ctx.shape(x))
    dim = _norm_dim(dim, len(shape))
    wide = shape[:dim + 1] + [1] + shape[dim + 1:]
    grown = broadcast_to(ctx, reshape(ctx, x, wide), shape[:dim + 1] + [repeats] + shape[dim + 1:], ctx.origin(n))
    return reshape(ctx, grown, symbolic.shape(_val(n)), ctx.origin(n))


@register(aten.stack.default)
def _stack(ctx, n):
    # cat of the inputs, each with a size-1 dim at dim.
    dtype = _val(n).dtype
    out = symbolic.shape(_val(n))
    dim = _norm_dim(_arg(n, 1, "dim", 0), len(out))
    xs = []
    for a in n.args[0]:
        x = cast(ctx, ctx.value(a), dtype)
        shape = list(ctx.shape(x))
        xs.append(reshape(ctx, x, shape[:dim] + [1] + shape[dim:]))
    return cat_values(ctx, xs, dim, ctx.origin(n))


@register(aten.baddbmm.default)
def _baddbmm(ctx, n):
    # beta * input + alpha * (batch1 @ batch2), as addmm's family.
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"baddbmm of {_val(n).dtype}")
    a, b = ctx.value(n.args[1]), ctx.value(n.args[2])
    return _beta_input_plus_alpha(ctx, n, _product(ctx, a, b, ctx.origin(n), False))


@register(aten._weight_norm.default)
def _weight_norm(ctx, n):
    # v * (g / ||v||), the norm over every dim but dim (all of them for
    # dim -1), as torch's decomposition computes it (norm_except_dim).
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"weight norm of {_val(n).dtype}")
    v, g = ctx.value(n.args[0]), ctx.value(n.args[1])
    rank = len(ctx.shape(v))
    dim = _arg(n, 2, "dim", 0)
    dims = None if dim == -1 else [d for d in range(rank) if d != _norm_dim(dim, rank)]
    norm = vector_norm(ctx, v, 2, _axes_mask(dims, rank), True, ctx.origin(n))
    scale = ctx.node("div", [g, norm], origin=ctx.origin(n))
    return ctx.node("mul", [v, scale], origin=ctx.origin(n))


@register(aten.softplus.default)
def _softplus(ctx, n):
    # torch's reference: where(beta x > threshold, x, log1p(exp(beta x)) / beta).
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"softplus of {_val(n).dtype}")
    beta, threshold = float(_arg(n, 1, "beta", 1.0)), float(_arg(n, 2, "threshold", 20.0))
    x = ctx.value(n.args[0])
    o = ctx.origin(n)
    scaled = x if beta == 1.0 else ctx.node("mul", [x, ctx.scalar(beta, torch.float32)], origin=o)
    soft = ctx.node("log1p", [ctx.node("exp", [scaled], origin=o)], origin=o)
    if beta != 1.0:
        soft = ctx.node("div", [soft, ctx.scalar(beta, torch.float32)], origin=o)
    above = ctx.node("gt", [scaled, ctx.scalar(threshold, torch.float32)], origin=o)
    return ctx.node("where", [above, x, soft], origin=o)
