"""Op-table handlers for training CNNs: batch and group norm with batch
statistics, and the convolution (also transposed) and pooling backward ops.

As everywhere in the op table, handlers only choose kiln ops and their parameters: the statistics
of the norms are composed from MEAN, SUB, MUL and RSQRT; the gradients of
convolution and pooling are kiln's CONV2D_GRAD_INPUT / CONV2D_GRAD_WEIGHT,
MAX_POOL2D_INDICES / MAX_POOL2D_GRAD and AVG_POOL2D_GRAD ops. Also here:
adaptive average pooling of any split (ADAPTIVE_AVG_POOL2D and its
gradient), nearest upsampling (two gathers) and bilinear upsampling
(UPSAMPLE_BILINEAR2D).

native_layer_norm_backward is kept whole (registered keep_whole): its input
gradient is one LAYER_NORM_BACKWARD pass (the decomposition took two
multiplies, two row sums and a seven-op chain over the activations); the
weight and bias gradients stay plain sums. The other norms' backward ops
(native_group_norm_backward, native_batch_norm_backward) never reach kiln:
the Core ATen decompositions rewrite them into elementwise ops and sums.
"""

import math
import operator

import torch

from kiln import symbolic
from kiln.errors import Unsupported
from kiln.optable.core import (_arg, _as_nchw, _avg_pool_args, _axes_mask, _dense_strides, _ints,
                               _max_pool_args, _pool_params, _shape, _val, adaptive_avg_pool2d_even, adaptive_even,
                               aten, cast, dtype_id, operand, reshape, strided_copy, sym_scalar)
from kiln.optable.rng import dropout
from kiln.optable.registry import register

F32 = torch.float32


def _out_shape(n, i):
    return symbolic.shape(n.meta["val"][i])



def _require_f32(n, what):
    v = n.args[0]
    dtype = _val(v).dtype if isinstance(v, torch.fx.Node) else None
    if dtype != F32:
        raise Unsupported(f"{what} of {dtype}")


# ---- batch norm and group norm with batch statistics ----------------------------


def _batch_stats(ctx, xv, eps):
    """Per-channel (dim 1) mean and 1/sqrt(biased var + eps) of x, both kept
    as (1, C, 1, ...), and x - mean."""
    rank = len(ctx.shape(xv))
    mask = _axes_mask([d for d in range(rank) if d != 1], rank)
    mean = ctx.node("mean", [xv], axes=mask, keepdim=1)
    centred = ctx.node("sub", [xv, mean])
    var = ctx.node("mean", [ctx.node("mul", [centred, centred])], axes=mask, keepdim=1)
    rstd = ctx.node("rsqrt", [ctx.node("add", [var, ctx.scalar(float(eps), F32)])])
    return mean, var, rstd, centred


def _affine(ctx, y, weight, bias, per_channel, origin):
    if weight is not None:
        y = ctx.node("mul", [y, reshape(ctx, ctx.value(weight), per_channel)], origin=origin)
    if bias is not None:
        y = ctx.node("add", [y, reshape(ctx, ctx.value(bias), per_channel)], origin=origin)
    return y


def _batch_norm_train(ctx, n, x, weight, bias, eps):
    """(y, mean, rstd, biased var, element count per channel) with batch
    statistics; mean and rstd are (C,) as torch saves them."""
    xv = ctx.value(x)
    shape = ctx.shape(xv)
    if len(shape) < 2:
        raise Unsupported("batch norm of a rank-1 input")
    c = shape[1]
    origin = ctx.origin(n)
    mean, var, rstd, centred = _batch_stats(ctx, xv, eps)
    y = ctx.node("mul", [centred, rstd], origin=origin)
    y = _affine(ctx, y, weight, bias, [c] + [1] * (len(shape) - 2), origin)
    count = math.prod([shape[0]] + list(shape[2:]))  # elements per channel (a size: maybe symbolic)
    return y, reshape(ctx, mean, [c]), reshape(ctx, rstd, [c]), reshape(ctx, var, [c]), count


def _running_update(ctx, running, batch, momentum):
    """(1 - momentum) * running + momentum * batch: torch's update."""
    keep = ctx.node("mul", [ctx.value(running), ctx.scalar(1.0 - float(momentum), F32)])
    return ctx.node("add", [keep, ctx.node("mul", [batch, ctx.scalar(float(momentum), F32)])])


def _batch_norm_eval(ctx, n, x, weight, bias, running_mean, running_var, eps):
    xv = ctx.value(x)
    shape = ctx.shape(xv)
    if len(shape) < 2:
        raise Unsupported("batch norm of a rank-1 input")
    per_channel = [shape[1]] + [1] * (len(shape) - 2)
    origin = ctx.origin(n)
    rstd = ctx.node("rsqrt", [ctx.node("add", [ctx.value(running_var), ctx.scalar(float(eps), F32)])])
    y = ctx.node("sub", [xv, reshape(ctx, ctx.value(running_mean), per_channel)], origin=origin)
    y = ctx.node("mul", [y, reshape(ctx, rstd, per_channel)], origin=origin)
    return _affine(ctx, y, weight, bias, per_channel, origin)


def _empty(ctx, n, i):
    return ctx.constant(torch.empty(_out_shape(n, i), dtype=n.meta["val"][i].dtype))


@register(aten._native_batch_norm_legit_functional.default)
def _batch_norm_functional(ctx, n):
    # What training graphs hold (AOTAutograd and export functionalise the
    # in-place running-stat update): outputs y, save_mean, save_rstd and the
    # new running_mean / running_var, which the caller copies back.
    x, weight, bias, running_mean, running_var, training, momentum, eps = n.args[:8]
    _require_f32(n, "batch norm")
    if not training:
        y = _batch_norm_eval(ctx, n, x, weight, bias, running_mean, running_var, eps)
        return (y, _empty(ctx, n, 1), _empty(ctx, n, 2), ctx.value(running_mean), ctx.value(running_var))
    y, mean, rstd, var, count = _batch_norm_train(ctx, n, x, weight, bias, eps)
    # The running variance takes the unbiased estimate: var * n / (n - 1).
    if isinstance(count, symbolic.SymDim):  # n computed per call; n == 1 divides by zero, as torch
        unbiased = ctx.node("div", [ctx.node("mul", [var, sym_scalar(ctx, count, F32)]),
                                    sym_scalar(ctx, count - 1, F32)])
    elif count > 1:
        unbiased = ctx.node("mul", [var, ctx.scalar(count / (count - 1), F32)])
    else:  # torch divides by zero here
        unbiased = ctx.node("mul", [var, ctx.scalar(float("inf"), F32)])
    new_mean = _running_update(ctx, running_mean, mean, momentum)
    new_var = _running_update(ctx, running_var, unbiased, momentum)
    return (y, mean, rstd, new_mean, new_var)


@register(aten._native_batch_norm_legit.no_stats)
def _batch_norm_no_stats(ctx, n):
    x, weight, bias, training, momentum, eps = n.args[:6]
    _require_f32(n, "batch norm")
    if not training:
        raise Unsupported("batch norm in eval mode without running statistics")
    y, mean, rstd, _, _ = _batch_norm_train(ctx, n, x, weight, bias, eps)
    return (y, mean, rstd)


@register(aten._native_batch_norm_legit.default)
def _batch_norm_legit(ctx, n):
    # The in-place form: in training it writes the running statistics back
    # into its inputs, which a kiln graph cannot do (functionalised graphs
    # use _native_batch_norm_legit_functional instead).
    x, weight, bias, running_mean, running_var, training, momentum, eps = n.args[:8]
    _require_f32(n, "batch norm")
    if training:
        raise Unsupported("batch norm updating its running statistics in place")
    y = _batch_norm_eval(ctx, n, x, weight, bias, running_mean, running_var, eps)
    return (y, _empty(ctx, n, 1), _empty(ctx, n, 2))


@register(aten.native_group_norm.default)
def _native_group_norm(ctx, n):
    x, weight, bias, _, _, _, group, eps = n.args[:8]
    return _group_norm(ctx, n, x, weight, bias, group, eps)


@register(aten.group_norm.default)
def _group_norm_output(ctx, n):
    # torch.export's program before decomposition (kiln/training_ir.py):
    # native_group_norm's first output alone.
    return _group_norm(ctx, n, n.args[0], _arg(n, 2, "weight", None), _arg(n, 3, "bias", None), n.args[1],
                       _arg(n, 4, "eps", 1e-5))[0]


def _group_norm(ctx, n, x, weight, bias, group, eps):
    # x (N, C, *) as (N, G, C / G * HxW): statistics over the last axis;
    # mean and rstd come out (N, G) as torch saves them.
    # N, C and HxW come from x's own kiln shape: under symbolic sizes the
    # node's arguments are FX nodes (SymInts), and x's shape holds them as
    # kiln sizes. The group's width C / G needs C as a number.
    _require_f32(n, "group norm")
    xv = ctx.value(x)
    shape = list(ctx.shape(xv))
    if len(shape) < 2 or not isinstance(group, int) or group <= 0:
        raise Unsupported(f"group norm of {shape} in {group} groups")
    N, C = shape[0], shape[1]
    if isinstance(C, symbolic.SymDim) and group != 1:
        raise Unsupported(f"group norm over a symbolic channel count ({C}) in {group} groups")
    if group != 1 and C % group:
        raise Unsupported(f"group norm of {shape} in {group} groups")
    HxW = 1
    for d in shape[2:]:
        HxW = d * HxW
    origin = ctx.origin(n)
    xg = reshape(ctx, xv, [N, group, (C // group) * HxW])
    mean = ctx.node("mean", [xg], axes=1 << 2, keepdim=1)
    centred = ctx.node("sub", [xg, mean])
    var = ctx.node("mean", [ctx.node("mul", [centred, centred])], axes=1 << 2, keepdim=1)
    rstd = ctx.node("rsqrt", [ctx.node("add", [var, ctx.scalar(float(eps), F32)])])
    y = reshape(ctx, ctx.node("mul", [centred, rstd], origin=origin), [N, C, HxW])
    y = _affine(ctx, y, weight, bias, [C, 1], origin)
    return (reshape(ctx, y, shape), reshape(ctx, mean, [N, group]), reshape(ctx, rstd, [N, group]))


# ---- convolution backward ------------------------------------------------------


@register(aten.native_layer_norm_backward.default, keep_whole=True)
def _layer_norm_backward(ctx, n):
    dy, x, normalized_shape, mean, rstd, weight, bias, mask = n.args[:8]
    for v in (dy, x, mean, rstd):
        if _val(v).dtype != F32:
            raise Unsupported(f"layer_norm backward of {_val(v).dtype}")
    origin = ctx.origin(n)
    k = len(normalized_shape)
    dyv, xv, meanv, rstdv = (ctx.value(v) for v in (dy, x, mean, rstd))
    rank = len(ctx.shape(xv))
    outs = [None, None, None]
    if mask[0]:
        inputs = [dyv, xv, meanv, rstdv] + ([ctx.value(weight)] if weight is not None else [])
        outs[0] = ctx.node("layer_norm_backward", inputs, origin=origin, dims=k)
    leading = _axes_mask(list(range(rank - k)), rank) if rank > k else 0
    if mask[1] and weight is not None:
        xhat = ctx.node("mul", [ctx.node("sub", [xv, meanv]), rstdv], origin=origin)
        dw = ctx.node("sum", [ctx.node("mul", [dyv, xhat], origin=origin)], origin=origin, axes=leading)
        outs[1] = reshape(ctx, dw, _out_shape(n, 1))
    if mask[2] and bias is not None:
        db = ctx.node("sum", [dyv], origin=origin, axes=leading)
        outs[2] = reshape(ctx, db, _out_shape(n, 2))
    return tuple(outs)


@register(aten.convolution_backward.default)
def _convolution_backward(ctx, n):
    (dy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
     mask) = n.args[:11]
    if _val(dy).dtype != F32:
        raise Unsupported(f"convolution backward of {_val(dy).dtype}")
    spatial = len(_val(w).shape) - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d convolution backward")
    stride, padding, dilation = (_ints(v, spatial) for v in (stride, padding, dilation))
    if transposed and any(op >= s for op, s in zip(_ints(output_padding, spatial), stride)):
        raise Unsupported("the backward of a transposed convolution whose output padding is not "
                          "below its stride")
    x_shape = list(_shape(x))
    w_shape = list(_shape(w))
    if spatial == 1:  # (N, C, L) as (N, C, 1, L), as the forward lowers it
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
        w4 = w_shape[:2] + [1] + w_shape[2:]
    else:
        w4 = w_shape
    conv = dict(stride_h=stride[0], stride_w=stride[1], pad_h=padding[0], pad_w=padding[1],
                dilation_h=dilation[0], dilation_w=dilation[1], groups=groups)
    origin = ctx.origin(n)
    dyv = _as_nchw(ctx, ctx.value(dy), spatial)
    outs = [None, None, None]
    # A transposed convolution y = conv_transpose(x, w) is the input
    # gradient of conv(., w) taken at x (core._transposed_convolution): its
    # dx is that convolution applied to dy, its dw the convolution's weight
    # gradient with dy as the input and x as the output gradient.
    if mask[0]:
        wv = reshape(ctx, ctx.value(w), w4)
        if transposed:
            dx = ctx.node("conv2d", [dyv, wv], origin=origin, **conv)
        else:
            h, wd = ctx.shape(_as_nchw(ctx, ctx.value(x), spatial))[2:]  # only x's shape is used
            dx = ctx.node("conv2d_grad_input", [dyv, wv], origin=origin, h=h, w=wd, **conv)
        outs[0] = reshape(ctx, dx, x_shape)
    if mask[1]:
        xv = _as_nchw(ctx, ctx.value(x), spatial)
        grad, inp = (xv, dyv) if transposed else (dyv, xv)
        dw = ctx.node("conv2d_grad_weight", [grad, inp], origin=origin, kernel_h=w4[2], kernel_w=w4[3], **conv)
        outs[1] = reshape(ctx, dw, w_shape)
    if mask[2]:
        db = ctx.node("sum", [dyv], origin=origin, axes=_axes_mask([0, 2, 3], 4))
        outs[2] = reshape(ctx, db, _out_shape(n, 2))
    return tuple(outs)


# ---- pooling: indices and backward ------------------------------------------------


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d_with_indices(ctx, n):
    _require_f32(n, "max_pool2d")
    params = _max_pool_args(n)
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 2)
    origin = ctx.origin(n)
    y = ctx.node("max_pool2d", [xv], origin=origin, **params)
    # Only training (the backward) and max_unpool read the indices; in
    # inference dead-code elimination drops this node.
    idx = ctx.node("max_pool2d_indices", [xv], origin=origin, **params)
    return (reshape(ctx, y, _out_shape(n, 0)), reshape(ctx, idx, _out_shape(n, 1)))


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(ctx, n):
    dy, x = n.args[0], n.args[1]
    indices = _arg(n, 7, "indices")
    _require_f32(n, "max_pool2d backward")
    x_shape = _shape(x)
    h, w = x_shape[-2:]
    dyv = _as_nchw(ctx, ctx.value(dy), 2)
    iv = reshape(ctx, ctx.value(indices), list(ctx.shape(dyv)))
    dx = ctx.node("max_pool2d_grad", [dyv, iv], origin=ctx.origin(n), h=h, w=w)
    return reshape(ctx, dx, x_shape)


@register(aten.avg_pool2d_backward.default)
def _avg_pool2d_backward(ctx, n):
    dy, x, kernel, stride, padding, ceil_mode, include, divisor = (list(n.args) + [None] * 8)[:8]
    divisor = 0 if divisor is None else int(divisor)  # 0: none
    _require_f32(n, "avg_pool2d backward")
    x_shape = _shape(x)
    h, w = x_shape[-2:]
    dx = ctx.node("avg_pool2d_grad", [_as_nchw(ctx, ctx.value(dy), 2)], origin=ctx.origin(n), h=h, w=w,
                  divisor_override=divisor, **_pool_params(kernel, stride, padding, 1, ceil_mode, include))
    return reshape(ctx, dx, x_shape)


@register(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(ctx, n):
    # An even split into equal blocks is an average pool with kernel =
    # stride = the block, so is its gradient; other splits have their op.
    dy, x = n.args[:2]
    _require_f32(n, "adaptive_avg_pool2d backward")
    x_shape = _shape(x)
    h, w = x_shape[-2:]
    oh, ow = _shape(dy)[-2:]
    dyv = _as_nchw(ctx, ctx.value(dy), 2)
    if oh <= 0 or ow <= 0 or h % oh or w % ow:  # overlapping or uneven windows
        dx = ctx.node("adaptive_avg_pool2d_grad", [dyv], origin=ctx.origin(n), h=h, w=w)
        return reshape(ctx, dx, x_shape)
    k = [h // oh, w // ow]
    dx = ctx.node("avg_pool2d_grad", [dyv], origin=ctx.origin(n), h=h, w=w, **_pool_params(k, k, 0, 1, False, True))
    return reshape(ctx, dx, x_shape)


# ---- nearest upsampling ---------------------------------------------------------------


@register(aten.upsample_nearest2d.vec)
def _upsample_nearest2d(ctx, n):
    # A gather along H, then along W, of source indices that torch itself
    # computes (by upsampling a ramp of row / column numbers with the same
    # arguments), so the rounding of the scale is torch's by construction.
    x, output_size, scales = (list(n.args) + [None, None])[:3]
    if output_size is None:
        output_size = n.kwargs.get("output_size")
    if scales is None:
        scales = n.kwargs.get("scale_factors")
    if _val(x).dtype != F32:
        raise Unsupported(f"upsample_nearest2d of {_val(x).dtype}")
    xv = _as_nchw(ctx, ctx.value(x), 2)
    origin = ctx.origin(n)
    hw = ctx.shape(xv)[2:]
    out = [symbolic.size(o) if isinstance(o, (torch.fx.Node, torch.SymInt)) else o for o in output_size or ()]
    if any(isinstance(d, symbolic.SymDim) for d in (*hw, *out)):
        # Symbolic sizes (an image of any size brought to a fixed one, or to
        # a skip connection's): the source indices computed per call, as
        # torch computes them.
        if len(out) != 2 or any(s is not None for s in (scales or ())):
            raise Unsupported("upsample_nearest2d by scale factors with a symbolic size")
        src_h, src_w = (_nearest_source(ctx, i, o, origin) for i, o in zip(hw, out))
    else:
        # The source indices are constants computed here by torch itself.
        h, w = (int(d) for d in hw)
        rows = torch.arange(h, dtype=F32).view(1, 1, h, 1).expand(1, 1, h, w)
        cols = torch.arange(w, dtype=F32).view(1, 1, 1, w).expand(1, 1, h, w)
        idx_h = aten.upsample_nearest2d.vec(rows.contiguous(), output_size, scales)[0, 0, :, 0].to(torch.int64)
        idx_w = aten.upsample_nearest2d.vec(cols.contiguous(), output_size, scales)[0, 0, 0, :].to(torch.int64)
        fh, fw = _repeat_factor(idx_h, h), _repeat_factor(idx_w, w)
        if fh and fw and all(isinstance(d, int) for d in ctx.shape(xv)[:2]):
            # Each source row and column repeated a whole number of times (x2
            # in a UNet or an FPN): one copy of a stride-0 view, where two
            # gathers read an index per element (4x eager's time).
            n_, c_ = ctx.shape(xv)[:2]
            y = strided_copy(ctx, xv, [n_, c_, h, fh, w, fw], [c_ * h * w, h * w, w, 0, 1, 0], 0, origin)
            return reshape(ctx, y, _shape(n))
        src_h, src_w = ctx.constant(idx_h), ctx.constant(idx_w)
    y = ctx.node("gather", [xv, src_h], origin=origin, axis=2)
    y = ctx.node("gather", [y, src_w], origin=origin, axis=3)
    return reshape(ctx, y, _shape(n))


def _repeat_factor(idx, size):
    """f when the source indices are 0 (f times), 1 (f times), ..., size - 1
    (exactly torch's, checked element by element), else None."""
    if idx.numel() % size:
        return None
    f = idx.numel() // size
    return f if torch.equal(idx, torch.arange(size).repeat_interleave(f)) else None


def _nearest_source(ctx, size, out, origin):
    """The source index of each of `out` outputs along a dim of `size`
    (either symbolic), as ATen's nearest_idx takes it without a scale:
    min(floor(i * (float(size) / out)), size - 1) in float32 (its cases out
    == size and out == 2 * size are exact in this form too: a scale of 1
    or 0.5)."""
    i = ctx.node("iota", [], origin=origin, length=out, start=0, step=1, dtype=dtype_id(F32))
    scale = ctx.node("div", [operand(ctx, size, F32), operand(ctx, out, F32)], origin=origin)
    src = cast(ctx, ctx.node("floor", [ctx.node("mul", [i, scale], origin=origin)], origin=origin), torch.int64)
    return ctx.node("minimum", [src, operand(ctx, size - 1, torch.int64)], origin=origin)


# ---- adaptive average pooling (any split) --------------------------------------------


def _adaptive_target(n, h, w):
    oh, ow = (o if o is not None else s for o, s in zip(_ints(n.args[1]), (h, w)))
    return oh, ow


@register(aten._adaptive_avg_pool2d.default, aten.adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d_any(ctx, n):
    # An even split is a plain average pool (which the conv fusion and the
    # pool kernels already know); any other split is kiln's
    # ADAPTIVE_AVG_POOL2D with torch's overlapping windows.
    _require_f32(n, "adaptive_avg_pool2d")
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 2)
    h, w = ctx.shape(xv)[2:]
    oh, ow = _adaptive_target(n, h, w)
    if adaptive_even(h, oh) and adaptive_even(w, ow):
        return adaptive_avg_pool2d_even(ctx, n)
    y = ctx.node("adaptive_avg_pool2d", [xv], origin=ctx.origin(n), h=oh, w=ow)
    return reshape(ctx, y, _shape(n))


@register(aten.adaptive_max_pool2d.default)
def _adaptive_max_pool2d(ctx, n):
    # An even split (a global max pool among them) is a max pool with
    # kernel = stride = the block: the same windows, the same maximum (NaN
    # wins in both). Other splits, and a graph that reads the indices,
    # run in eager.
    _require_f32(n, "adaptive_max_pool2d")
    if any(u.target is not operator.getitem or u.args[1] != 0 for u in n.users):
        raise Unsupported("adaptive_max_pool2d's indices")
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 2)
    h, w = ctx.shape(xv)[2:]
    oh, ow = _adaptive_target(n, h, w)
    if not (adaptive_even(h, oh) and adaptive_even(w, ow)):
        raise Unsupported(f"adaptive_max_pool2d from {h}x{w} to {oh}x{ow} (not an even split)")
    k = [1 if oh == h else h // oh, 1 if ow == w else w // ow]
    y = ctx.node("max_pool2d", [xv], origin=ctx.origin(n), **_pool_params(k, k, 0, 1, False, False))
    return reshape(ctx, y, symbolic.shape(_val(n)[0])), None


# ---- bilinear upsampling -----------------------------------------------------------------


@register(aten.upsample_bilinear2d.vec)
def _upsample_bilinear2d(ctx, n):
    x, output_size, align_corners, scales = (list(n.args) + [None, None, None])[:4]
    output_size = output_size if output_size is not None else n.kwargs.get("output_size")
    align_corners = align_corners if align_corners is not None else n.kwargs.get("align_corners", False)
    scales = scales if scales is not None else n.kwargs.get("scale_factors")
    if _val(x).dtype != F32:
        raise Unsupported(f"upsample_bilinear2d of {_val(x).dtype}")
    xv = _as_nchw(ctx, ctx.value(x), 2)
    ho, wo = _shape(n)[-2:]
    # torch uses the caller's scale factors (not the size ratio) when given.
    scale_h, scale_w = [float(s) for s in scales] if scales is not None and output_size is None else [0.0, 0.0]
    y = ctx.node("upsample_bilinear2d", [xv], origin=ctx.origin(n), out_h=ho, out_w=wo,
                 align_corners=int(bool(align_corners)), scale_h=scale_h, scale_w=scale_w)
    return reshape(ctx, y, _shape(n))


# ---- 1-d pooling, as 2-d pooling over (N, C, 1, L) ------------------------------------


@register(aten.avg_pool1d.default)
def _avg_pool1d(ctx, n):
    kernel, stride, padding, ceil_mode, include, _ = _avg_pool_args(n, 1)
    _require_f32(n, "avg_pool1d")
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 1)
    y = ctx.node("avg_pool2d", [xv], origin=ctx.origin(n),
                 **_pool_params([1] + kernel, [1] + stride, [0] + padding, 1, ceil_mode, include))
    return reshape(ctx, y, _shape(n))


@register(aten.adaptive_avg_pool1d.default)
def _adaptive_avg_pool1d(ctx, n):
    _require_f32(n, "adaptive_avg_pool1d")
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 1)
    (out,) = _ints(n.args[1], 1)
    length = ctx.shape(xv)[3]
    if out > 0 and length % out == 0:
        k = length // out
        y = ctx.node("avg_pool2d", [xv], origin=ctx.origin(n), **_pool_params([1, k], [1, k], [0, 0], 1, False, True))
    else:
        y = ctx.node("adaptive_avg_pool2d", [xv], origin=ctx.origin(n), h=1, w=out)
    return reshape(ctx, y, _shape(n))


# ---- pairwise distances, composed from broadcast arithmetic and reductions ------------


def _p_norm_last(ctx, d, p, origin):
    """The p-norm of d over its last axis (as torch.cdist's p: 0 counts
    non-zeros, inf takes the largest magnitude)."""
    rank = len(ctx.shape(d))
    last = 1 << (rank - 1)
    if p == 0:
        nz = ctx.node("ne", [d, ctx.scalar(0.0, F32)], origin=origin)
        return ctx.node("sum", [ctx.node("cast", [nz], origin=origin, dtype=dtype_id(F32))], origin=origin, axes=last)
    a = ctx.node("abs", [d], origin=origin)
    if math.isinf(p):
        return ctx.node("max", [a], origin=origin, axes=last)
    if p == 1:
        return ctx.node("sum", [a], origin=origin, axes=last)
    if p == 2:
        return ctx.node("sqrt", [ctx.node("sum", [ctx.node("mul", [d, d], origin=origin)], origin=origin, axes=last)],
                        origin=origin)
    s = ctx.node("sum", [ctx.node("pow", [a, ctx.scalar(float(p), F32)], origin=origin)], origin=origin, axes=last)
    return ctx.node("pow", [s, ctx.scalar(1.0 / p, F32)], origin=origin)


@register(aten._cdist_forward.default)
def _cdist(ctx, n):
    x1, x2, p = n.args[0], n.args[1], float(n.args[2])
    _require_f32(n, "cdist")
    if p < 0:
        raise Unsupported("cdist with p < 0")
    a, b = ctx.value(x1), ctx.value(x2)
    sa, sb = list(ctx.shape(a)), list(ctx.shape(b))
    origin = ctx.origin(n)
    # (..., P, 1, M) - (..., 1, R, M) -> (..., P, R, M), normed over M.
    d = ctx.node("sub", [reshape(ctx, a, sa[:-1] + [1, sa[-1]]), reshape(ctx, b, sb[:-2] + [1] + sb[-2:])],
                 origin=origin)
    return reshape(ctx, _p_norm_last(ctx, d, p, origin), _shape(n))


@register(aten._pdist_forward.default)
def _pdist(ctx, n):
    x, p = n.args[0], float(n.args[1]) if len(n.args) > 1 else 2.0
    _require_f32(n, "pdist")
    if p < 0:
        raise Unsupported("pdist with p < 0")
    xv = ctx.value(x)
    rows, m = ctx.shape(xv)
    origin = ctx.origin(n)
    # Pairs i < j in row-major order, as torch lists them: gather both rows.
    pairs = [(i, j) for i in range(rows) for j in range(i + 1, rows)]
    if not pairs:
        return ctx.constant(torch.zeros(0))
    left = ctx.constant(torch.tensor([i for i, _ in pairs], dtype=torch.int64))
    right = ctx.constant(torch.tensor([j for _, j in pairs], dtype=torch.int64))
    d = ctx.node("sub", [ctx.node("gather", [xv, left], origin=origin, axis=0),
                         ctx.node("gather", [xv, right], origin=origin, axis=0)], origin=origin)
    return reshape(ctx, _p_norm_last(ctx, d, p, origin), _shape(n))


@register(aten.native_dropout.default)
def _native_dropout(ctx, n):
    # Dropping nothing (eval, or p = 0) is exact and needs no numbers.
    x, p = n.args[0], float(n.args[1])
    train = n.args[2] if len(n.args) > 2 else n.kwargs.get("train")
    xv = ctx.value(x)
    if train is not False and p != 0.0:
        return dropout(ctx, n, xv, p)
    shape = list(ctx.shape(xv))
    keep = strided_copy(ctx, ctx.scalar(True, torch.bool), shape, [0] * len(shape), 0, ctx.origin(n))
    return xv, keep


# ---- 3-d average pooling: separable, as two 2-d poolings ------------------------------
# An average over a (kd, kh, kw) box is the average over (kh, kw) and then
# over kd; the divisors multiply per axis too (both count_include_pad modes,
# ceil_mode windows included), exactly as torch computes them.


def _as_ncdhw(ctx, n, x):
    xv = ctx.value(x)
    shape = list(ctx.shape(xv))
    if len(shape) == 4:
        shape = [1] + shape
    if len(shape) != 5:
        raise Unsupported(f"a rank-{len(ctx.shape(xv))} input to a 3-d pool")
    return xv, shape


@register(aten.avg_pool3d.default)
def _avg_pool3d(ctx, n):
    # divisor_override: the first pass only sums (divisor 1), the second
    # divides the 3-d window's sum by the override.
    kernel, stride, padding, ceil_mode, include, divisor = _avg_pool_args(n, 3)
    _require_f32(n, "avg_pool3d")
    xv, (b, c, d, h, w) = _as_ncdhw(ctx, n, n.args[0])
    origin = ctx.origin(n)
    hw = ctx.node("avg_pool2d", [reshape(ctx, xv, [b, c * d, h, w])], origin=origin,
                  divisor_override=1 if divisor else 0,
                  **_pool_params(kernel[1:], stride[1:], padding[1:], 1, ceil_mode, include))
    ho, wo = ctx.shape(hw)[2:]
    y = ctx.node("avg_pool2d", [reshape(ctx, hw, [b * c, 1, d, ho * wo])], origin=origin, divisor_override=divisor,
                 **_pool_params([kernel[0], 1], [stride[0], 1], [padding[0], 0], 1, ceil_mode, include))
    return reshape(ctx, y, _shape(n))


@register(aten._adaptive_avg_pool3d.default, aten.adaptive_avg_pool3d.default)
def _adaptive_avg_pool3d(ctx, n):
    _require_f32(n, "adaptive_avg_pool3d")
    xv, (b, c, d, h, w) = _as_ncdhw(ctx, n, n.args[0])
    od, oh, ow = (int(o) if o is not None else s for o, s in zip(_ints(n.args[1], 3), (d, h, w)))
    origin = ctx.origin(n)
    hw = ctx.node("adaptive_avg_pool2d", [reshape(ctx, xv, [b, c * d, h, w])], origin=origin, h=oh, w=ow)
    # Along D only: the second axis's windows are single columns.
    y = ctx.node("adaptive_avg_pool2d", [reshape(ctx, hw, [b * c, 1, d, oh * ow])], origin=origin, h=od, w=oh * ow)
    return reshape(ctx, y, _shape(n))


@register(aten.max_pool3d_with_indices.default)
def _max_pool3d_with_indices(ctx, n):
    # The max over a box is the max over (kh, kw), then over kd (with -inf
    # padding and ceil_mode windows per axis, as torch sizes them). The
    # indices output (backward, max_unpool) is not composable this way.
    args = list(n.args) + [None] * 6
    kernel = _ints(args[1], 3)
    stride = _ints(args[2], 3) if args[2] else kernel
    padding = _ints(args[3] if args[3] is not None else 0, 3)
    dilation = _ints(args[4] if args[4] is not None else 1, 3)
    ceil_mode = bool(args[5]) if args[5] is not None else False
    _require_f32(n, "max_pool3d")
    xv, (b, c, d, h, w) = _as_ncdhw(ctx, n, n.args[0])
    origin = ctx.origin(n)
    hw = ctx.node("max_pool2d", [reshape(ctx, xv, [b, c * d, h, w])], origin=origin,
                  **_pool_params(kernel[1:], stride[1:], padding[1:], dilation[1:], ceil_mode, 0))
    ho, wo = ctx.shape(hw)[2:]
    y = ctx.node("max_pool2d", [reshape(ctx, hw, [b * c, 1, d, ho * wo])], origin=origin,
                 **_pool_params([kernel[0], 1], [stride[0], 1], [padding[0], 0], [dilation[0], 1], ceil_mode, 0))
    return (reshape(ctx, y, _out_shape(n, 0)), ctx.unsupported_value(n, "max_pool3d's indices output"))
