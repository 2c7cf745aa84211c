"""Op-table handlers for grid sampling (aten.grid_sampler_2d), fold
(aten.col2im) and embedding bags (aten._embedding_bag).

As everywhere in the op table, no numerics happen here: each handler picks one kiln op (GRID_SAMPLER_2D, COL2IM,
EMBEDDING_BAG) and its params; the C shape rules validate them.
"""

import torch

from kiln.errors import Unsupported
from kiln.optable.core import _arg, _shape, aten, reshape
from kiln.optable.registry import register

_F32 = torch.float32
_INDEX_DTYPES = (torch.int64, torch.int32)



@register(aten.grid_sampler_2d.default)
def _grid_sampler_2d(ctx, n):
    x, grid = ctx.value(n.args[0]), ctx.value(n.args[1])
    mode, padding, align = int(n.args[2]), int(n.args[3]), bool(n.args[4])
    if mode not in (0, 1):
        raise Unsupported("bicubic grid sampling")
    if ctx.dtype(x) != _F32 or ctx.dtype(grid) != _F32:
        raise Unsupported(f"grid sampling of {ctx.dtype(x)} with a {ctx.dtype(grid)} grid")
    if 0 in ctx.shape(x)[2:]:
        raise Unsupported("grid sampling an empty image")
    return ctx.node("grid_sampler_2d", [x, grid], origin=ctx.origin(n), mode=mode, padding=padding,
                    align_corners=int(align))


# Kept whole: torch.export's default decompositions break col2im into index
# arithmetic over a zeros constant.
@register(aten.col2im.default, keep_whole=True)
def _col2im(ctx, n):
    x = ctx.value(n.args[0])
    if ctx.dtype(x) != _F32:
        raise Unsupported(f"col2im of {ctx.dtype(x)}")
    size, kernel, dilation, padding, stride = (list(n.args[i]) for i in range(1, 6))
    shape = list(ctx.shape(x))
    if len(shape) == 2:  # unbatched
        x = reshape(ctx, x, [1] + shape)
    size, kernel, dilation, padding, stride = ([int(v) for v in p] for p in (size, kernel, dilation, padding, stride))
    y = ctx.node("col2im", [x], origin=ctx.origin(n), h=size[0], w=size[1], kernel_h=kernel[0],
                 kernel_w=kernel[1], dilation_h=dilation[0], dilation_w=dilation[1], pad_h=padding[0],
                 pad_w=padding[1], stride_h=stride[0], stride_w=stride[1])
    return reshape(ctx, y, _shape(n))


@register(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(ctx, n):
    weight, indices, offsets = (ctx.value(n.args[i]) for i in range(3))
    # scale_grad_by_freq and sparse (args 3 and 5) only change the backward.
    mode = int(_arg(n, 4, "mode", 0))
    psw = _arg(n, 6, "per_sample_weights", None)
    last = bool(_arg(n, 7, "include_last_offset", False))
    padding_idx = _arg(n, 8, "padding_idx", -1)
    padding_idx = -1 if padding_idx is None else int(padding_idx)
    if ctx.dtype(weight) != _F32:
        raise Unsupported(f"embedding_bag over a {ctx.dtype(weight)} table")
    if ctx.dtype(indices) not in _INDEX_DTYPES or ctx.dtype(offsets) not in _INDEX_DTYPES:
        raise Unsupported("embedding_bag indices or offsets that are not int64 or int32")
    if len(ctx.shape(indices)) != 1 or len(ctx.shape(offsets)) != 1:
        raise Unsupported("embedding_bag with indices or offsets that are not 1-d")
    # F.embedding_bag hands the ATen op a padding_idx in [0, rows), or -1 for none.
    if not -1 <= padding_idx < ctx.shape(weight)[0]:
        raise Unsupported(f"embedding_bag padding_idx {padding_idx}")
    inputs = [weight, indices, offsets]
    if psw is not None:
        w = ctx.value(psw)
        if ctx.dtype(w) != _F32:
            raise Unsupported(f"{ctx.dtype(w)} per_sample_weights")
        inputs.append(w)
    y = ctx.node("embedding_bag", inputs, origin=ctx.origin(n), mode=mode, include_last_offset=int(last),
                    padding_idx=padding_idx)
    why = "embedding_bag's offset2bag, bag_size and max_indices outputs"
    return (y,) + tuple(ctx.unsupported_value(n, why) for _ in range(3))
