"""The op table's core handlers: views and data movement, elementwise
arithmetic, reductions and normalisation, matmul, linear and attention,
convolution and pooling, and the helpers the other handler modules share.

A handler receives the lowering context and the FX node and returns the kiln
value id of the node's result (or a tuple for multi-output ops). Shapes and
dtypes come from the FX node's metadata (``meta["val"]``); the C core infers
them again and rejects any disagreement, so a wrong handler fails loudly at
compile time. No numerics happen here: handlers only choose kiln ops and
their parameters.
"""

import math
import operator

import torch

from kiln import _C
from kiln import symbolic
from kiln.errors import Unsupported
from kiln.optable.registry import register

OPS = _C.OPS
aten = torch.ops.aten

# torch dtype -> kiln dtype id
DTYPES = {
    torch.float32: _C.DTYPES["float32"],
    torch.float16: _C.DTYPES["float16"],
    torch.bfloat16: _C.DTYPES["bfloat16"],
    torch.int64: _C.DTYPES["int64"],
    torch.int32: _C.DTYPES["int32"],
    torch.int8: _C.DTYPES["int8"],
    torch.uint8: _C.DTYPES["uint8"],
    torch.bool: _C.DTYPES["bool"],
}
TORCH_DTYPES = {v: k for k, v in DTYPES.items()}


def _arg(n, i, name, default=None):
    """Argument i of node n, given by position or as the keyword `name`."""
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _val(node):
    return node.meta["val"]


def _shape(node):
    # Sizes as kiln holds them: ints, or SymDims for symbolic sizes.
    return symbolic.shape(_val(node))


def _dense_strides(shape):
    strides, s = [], 1
    for d in reversed(shape):
        strides.append(s)
        s *= d
    return list(reversed(strides))


def _norm_dim(dim, rank):
    return dim + rank if dim < 0 else dim


def strided_copy(ctx, x, out_shape, strides, offset, origin):
    """A view of dense x (by element strides over out_shape) made dense."""
    shape = list(out_shape)
    return ctx.node("strided_copy", [x], origin=origin, rank=len(shape), dims=shape, strides=list(strides),
                    offset=offset)


def reshape(ctx, x, shape, origin=None):
    shape = list(shape)
    if list(ctx.shape(x)) == shape:
        return x
    return ctx.node("reshape", [x], origin=origin, rank=len(shape), dims=shape)


def broadcast_to(ctx, v, shape, origin=None):
    """Dense v broadcast (trailing-aligned) to shape by a stride-0 copy."""
    src = list(ctx.shape(v))
    if src == list(shape):
        return v
    strides, stride = [], 1
    for d in range(len(shape) - 1, -1, -1):
        sd = d - (len(shape) - len(src))
        strides.insert(0, stride if sd >= 0 and src[sd] != 1 else 0)
        stride *= src[sd] if sd >= 0 else 1
    if not shape:  # a 0-d result of a 0-d or one-element value
        return ctx.node("strided_copy", [v], origin=origin)
    return strided_copy(ctx, v, list(shape), strides, 0, origin)


def dtype_id(dtype):
    """kiln's id for a torch dtype; a dtype kiln lacks (float64, complex)
    makes the op unsupported, so it can fall back."""
    if dtype not in DTYPES:
        raise Unsupported(f"dtype {dtype} (kiln has {', '.join(str(d).replace('torch.', '') for d in DTYPES)})")
    return DTYPES[dtype]


def cast(ctx, x, dtype):
    if ctx.dtype(x) == dtype:
        return x
    return ctx.node("cast", [x], dtype=dtype_id(dtype))


def sym_scalar(ctx, d, dtype):
    """A 0-d tensor holding the value of symbolic size d (computed per call)."""
    y = ctx.node("iota", [], length=1, start=d, step=0, dtype=dtype_id(torch.int64))
    return cast(ctx, reshape(ctx, y, []), dtype)


def _is_size_node(arg):
    """An FX node computing a size (a SymInt, or an int Dynamo specialised:
    min(length, window) of a sliding-window mask), not a tensor."""
    val = arg.meta.get("val")
    return isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool)


def operand(ctx, arg, dtype):
    """A tensor argument as a kiln value of `dtype` (Python scalars and sizes
    become 0-d values)."""
    if (isinstance(arg, torch.fx.Node) and not isinstance(ctx.env.get(arg), symbolic.SymDim)
            and not _is_size_node(arg)):
        return cast(ctx, ctx.value(arg), dtype)
    d = symbolic.size(arg) if isinstance(arg, (torch.fx.Node, torch.SymInt)) else arg
    if isinstance(d, symbolic.SymDim):
        return sym_scalar(ctx, d, dtype)
    return ctx.scalar(d, dtype)


# ---- views and data movement -------------------------------------------------


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default,
          aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
          aten.view_copy.default, aten.flatten.using_ints)
def _reshape(ctx, n):
    return reshape(ctx, ctx.value(n.args[0]), _shape(n), ctx.origin(n))


@register(aten.clone.default, aten.alias.default, aten.contiguous.default,
          aten.lift_fresh_copy.default, aten.detach.default)
def _identity(ctx, n):
    return ctx.value(n.args[0])


@register(aten.dropout.default)
def _dropout(ctx, n):
    # dropout(x, p, train): x in eval mode (or p = 0). In training mode
    # torch's decomposition (native_dropout: a random mask) is kiln's.
    if _arg(n, 2, "train", False) and _arg(n, 1, "p", 0.0) > 0:
        raise Unsupported("dropout in training mode as one op (its decomposition, native_dropout, is kiln's)")
    return ctx.value(n.args[0])


@register(aten._assert_tensor_metadata.default)
def _assert_metadata(ctx, n):
    # torch.export's check of a tensor's dtype/shape (emitted for .to(dtype)
    # and friends): shapes and dtypes are static here and checked at compile.
    return None


@register(aten._to_copy.default, aten.to.dtype, aten.type_as.default)
def _to_copy(ctx, n):
    return cast(ctx, ctx.value(n.args[0]), _val(n).dtype)


@register(aten.permute.default, aten.permute_copy.default)
def _permute(ctx, n):
    x = ctx.value(n.args[0])
    shape = ctx.shape(x)
    dims = [_norm_dim(d, len(shape)) for d in n.args[1]]
    src = _dense_strides(shape)
    return strided_copy(ctx, x, [shape[d] for d in dims], [src[d] for d in dims], 0, ctx.origin(n))


@register(aten.transpose.int)
def _transpose(ctx, n):
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    if len(shape) < 2:  # a 0-d or 1-d tensor's transpose (dims 0 and 0, or -1) is itself
        return x
    a, b = (_norm_dim(d, len(shape)) for d in n.args[1:3])
    dims = list(range(len(shape)))
    dims[a], dims[b] = dims[b], dims[a]
    src = _dense_strides(shape)
    return strided_copy(ctx, x, [shape[d] for d in dims], [src[d] for d in dims], 0, ctx.origin(n))


@register(aten.t.default)
def _t(ctx, n):
    x = ctx.value(n.args[0])
    shape = ctx.shape(x)
    if len(shape) < 2:
        return x
    return strided_copy(ctx, x, [shape[1], shape[0]], [1, shape[1]], 0, ctx.origin(n))


@register(aten.expand.default)
def _expand(ctx, n):
    return _broadcast(ctx, ctx.value(n.args[0]), _shape(n), ctx.origin(n))


def _broadcast(ctx, x, out, origin):
    """x broadcast to shape out (torch's expand: leading dims added, dims
    of 1 repeated)."""
    shape = ctx.shape(x)
    if tuple(out) == tuple(shape):
        return x
    src = _dense_strides(shape)
    lead = len(out) - len(shape)
    strides = [0] * lead + [0 if shape[i] == 1 and out[lead + i] != 1 else src[i] for i in range(len(shape))]
    return strided_copy(ctx, x, out, strides, 0, origin)


@register(aten.slice.Tensor, aten.narrow.default)
def _slice(ctx, n):
    # narrow(x, dim, start, length) reads as slice(x, dim, start, end): the
    # size comes from torch's result either way, the step is 1.
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    dim = _norm_dim(n.args[1] if len(n.args) > 1 else 0, len(shape))
    start = n.args[2] if len(n.args) > 2 and n.args[2] is not None else 0
    step = n.args[4] if len(n.args) > 4 else 1
    size = shape[dim]
    start = symbolic.size(start)
    if isinstance(start, symbolic.SymDim) or isinstance(size, symbolic.SymDim):
        # torch has checked the bounds symbolically: start is in [0, size].
        if isinstance(start, int) and start < 0:
            start = start + size
    else:
        if start < 0:
            start += size
        start = min(max(start, 0), size)
    out = list(_shape(n))
    if out == shape:
        return x
    src = _dense_strides(shape)
    strides = list(src)
    strides[dim] = src[dim] * step
    return strided_copy(ctx, x, out, strides, start * src[dim], ctx.origin(n))


def select_index(ctx, arg, size):
    """select's (and select_scatter's) index argument as a kiln size counted
    from the start of a dim of `size`: a SymInt's node under symbolic sizes
    becomes a kiln size, and torch guarded its sign when it traced the op,
    so its sign at the example is its sign at every call of the graph."""
    index = symbolic.size(arg)
    if isinstance(index, symbolic.SymDim):
        at_example = ctx.graph.example_dims([index.d])[0]
        if at_example is None:
            raise Unsupported(f"a select at a symbolic index ({index}) of unknown sign")
        return index + size if at_example < 0 else index
    return index + size if index < 0 else index


def _at_index(ctx, n):
    """(x, its shape, dense strides, dim, index from the start) of a select
    or narrow node (x, dim, index, ...)."""
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    dim = _norm_dim(n.args[1], len(shape))
    return x, shape, _dense_strides(shape), dim, select_index(ctx, n.args[2], shape[dim])


@register(aten.narrow_copy.default)
def _narrow_copy(ctx, n):
    """x.narrow(dim, start, length) made dense; start may count from the end."""
    x, _, src, dim, start = _at_index(ctx, n)
    return strided_copy(ctx, x, _shape(n), src, start * src[dim], ctx.origin(n))


@register(aten.select.int)
def _select(ctx, n):
    x, shape, src, dim, index = _at_index(ctx, n)
    out = shape[:dim] + shape[dim + 1:]
    strides = src[:dim] + src[dim + 1:]
    return strided_copy(ctx, x, out, strides, index * src[dim], ctx.origin(n))


@register(aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default)
def _split(ctx, n):
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    dim = _norm_dim(n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0), len(shape))
    sizes = n.args[1]
    if isinstance(sizes, int) and not isinstance(shape[dim], symbolic.SymDim):
        sizes = [min(sizes, shape[dim] - i) for i in range(0, shape[dim], sizes)]
    else:
        # Under symbolic sizes (a split size, or the dim, a SymInt): each
        # piece's size as torch's result has it (Dynamo guards their number).
        sizes = [symbolic.shape(v)[dim] for v in _val(n)]
    src = _dense_strides(shape)
    outs, start = [], 0
    for size in sizes:
        out = list(shape)
        out[dim] = size
        outs.append(x if out == shape else strided_copy(ctx, x, out, src, start * src[dim], ctx.origin(n)))
        start += size
    return tuple(outs)


@register(aten.unbind.int, aten.unbind_copy.int)
def _unbind(ctx, n):
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    dim = _norm_dim(n.args[1] if len(n.args) > 1 else 0, len(shape))
    src = _dense_strides(shape)
    out, strides = shape[:dim] + shape[dim + 1:], src[:dim] + src[dim + 1:]
    return tuple(strided_copy(ctx, x, out, strides, i * src[dim], ctx.origin(n)) for i in range(shape[dim]))


@register(aten.cat.default)
def _cat(ctx, n):
    dtype = _val(n).dtype
    xs = [cast(ctx, ctx.value(a), dtype) for a in n.args[0] if 0 not in _shape(a) or len(_shape(a)) != 1]
    if not xs:  # every input was a legacy empty (0,) tensor: so is the result
        return ctx.constant(torch.empty(_shape(n), dtype=dtype))
    rank = len(_shape(n))
    return cat_values(ctx, xs, _norm_dim(n.args[1] if len(n.args) > 1 else 0, rank), ctx.origin(n))


def cat_values(ctx, xs, dim, origin):
    """xs (kiln values of one dtype) concatenated along dim."""
    while len(xs) > 8:  # the IR takes up to 8 inputs per cat
        xs = [ctx.node("cat", xs[i:i + 8], axis=dim) if len(xs[i:i + 8]) > 1 else xs[i]
              for i in range(0, len(xs), 8)]
    if len(xs) == 1:
        return xs[0]
    return ctx.node("cat", xs, origin=origin, axis=dim)


@register(aten.diff.default)
def _diff(ctx, n):
    # torch.export's program before decomposition (kiln/training_ir.py;
    # transformers' masks take it of position ids): x[1:] - x[:-1] along
    # dim, n times, after prepend and append; for bools, a != b.
    dtype = _val(n).dtype
    rank = len(_shape(n))
    dim = _norm_dim(_arg(n, 2, "dim", -1), max(rank, 1))
    parts = [cast(ctx, ctx.value(a), dtype) for a in (_arg(n, 3, "prepend", None), n.args[0], _arg(n, 4, "append", None))
             if a is not None]
    v = parts[0] if len(parts) == 1 else ctx.node("cat", parts, origin=ctx.origin(n), axis=dim)
    for _ in range(_arg(n, 1, "n", 1)):
        shape = list(ctx.shape(v))
        # A symbolic dim is at least 1 wherever the program runs (torch's
        # result, size - 1, is a size): strides and offset follow it.
        if not isinstance(shape[dim], symbolic.SymDim) and shape[dim] == 0:
            break
        src, out = _dense_strides(shape), list(shape)
        out[dim] -= 1
        hi = strided_copy(ctx, v, out, src, src[dim], ctx.origin(n))
        lo = strided_copy(ctx, v, out, src, 0, ctx.origin(n))
        v = ctx.node("ne" if dtype == torch.bool else "sub", [hi, lo], origin=ctx.origin(n))
    return v


@register(aten.embedding.default)
def _embedding(ctx, n):
    return ctx.node("gather", [ctx.value(n.args[0]), ctx.value(n.args[1])], origin=ctx.origin(n), axis=0)


@register(aten.index_select.default)
def _index_select(ctx, n):
    x = ctx.value(n.args[0])
    if not ctx.shape(x):  # a 0-d tensor indexes like a (1,) one
        x = reshape(ctx, x, [1])
    dim = _norm_dim(n.args[1], len(ctx.shape(x)))
    y = ctx.node("gather", [x, ctx.value(n.args[2])], origin=ctx.origin(n), axis=dim)
    return reshape(ctx, y, _shape(n))


@register(aten.gather.default)
def _gather_elements(ctx, n):
    if _val(n).numel() == 0:  # torch accepts an empty index of any integer dtype and rank
        return ctx.constant(torch.empty(_shape(n), dtype=_val(n).dtype))
    x = ctx.value(n.args[0])
    idx = ctx.value(n.args[2])
    if not ctx.shape(x):  # a 0-d tensor gathers like a (1,) one, with a 0-d or (1,) index
        x = reshape(ctx, x, [1])
        idx = reshape(ctx, idx, [1])
    dim = _norm_dim(n.args[1], len(ctx.shape(x)))
    y = ctx.node("gather_elements", [x, idx], origin=ctx.origin(n), axis=dim)
    return reshape(ctx, y, _shape(n))


def index_single(ctx, n):
    """x[idx] with one integer index tensor (at any position, the others
    None): a gather along that axis (aten.index.Tensor's handler,
    movement.py, takes this path for one index tensor)."""
    x = ctx.value(n.args[0])
    axes = [i for i, t in enumerate(n.args[1]) if t is not None]
    if len(axes) != 1:
        raise Unsupported("indexing with more than one index tensor")
    idx = ctx.value(n.args[1][axes[0]])
    if ctx.dtype(idx) not in (torch.int64, torch.int32):
        raise Unsupported(f"indexing with a {ctx.dtype(idx)} index")
    return ctx.node("gather", [x, idx], origin=ctx.origin(n), axis=axes[0])


@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(ctx, n):
    dtype = _val(n).dtype
    cond = operand(ctx, n.args[0], torch.bool)
    return ctx.node("where", [cond, operand(ctx, n.args[1], dtype), operand(ctx, n.args[2], dtype)],
                    origin=ctx.origin(n))


# ---- constants made by ops -------------------------------------------------------


@register(aten.full.default, aten.zeros.default, aten.ones.default, aten.full_like.default,
          aten.zeros_like.default, aten.ones_like.default, aten.scalar_tensor.default,
          aten.arange.default, aten.arange.start, aten.arange.start_step, aten.empty.memory_format,
          aten.empty_permuted.default, aten.empty_like.default, aten.new_zeros.default, aten.new_ones.default,
          aten.new_empty.default)
def _constant_op(ctx, n):
    # Ops with static shapes and no tensor data inputs are constants of the
    # graph: their value is fixed at capture, like a parameter. With a
    # symbolic size they are computed per call.
    if symbolic.is_symbolic(_shape(n)) or any(
            isinstance(symbolic.size(a), symbolic.SymDim) for a in n.args
            if isinstance(a, (torch.fx.Node, torch.SymInt))):
        return _symbolic_constant_op(ctx, n)
    if n.target in (aten.empty.memory_format, aten.empty_permuted.default, aten.empty_like.default,
                    aten.new_empty.default):
        # Uninitialised memory (empty_permuted's physical order only changes
        # its strides, and kiln's values are dense): zeros are one reading.
        return ctx.constant(torch.zeros(_shape(n), dtype=_val(n).dtype))
    # A size argument may be a node whose value is a number here (a sliding
    # window's min(size, window), Mistral's and Gemma 3's masks): its value.
    args = [symbolic.size(a) if isinstance(a, (torch.fx.Node, torch.SymInt)) else a for a in n.args]
    kwargs = dict(n.kwargs)
    kwargs.pop("pin_memory", None)
    kwargs.pop("memory_format", None)
    kwargs["device"] = "cpu"
    if n.target in (aten.full_like.default, aten.zeros_like.default, aten.ones_like.default):
        args[0] = torch.empty(_shape(n.args[0]), dtype=_val(n.args[0]).dtype)
    elif n.target in (aten.new_zeros.default, aten.new_ones.default):
        args[0] = torch.empty(0, dtype=_val(n.args[0]).dtype)
    return ctx.constant(n.target(*args, **kwargs))


def _symbolic_constant_op(ctx, n):
    dtype = _val(n).dtype
    out = _shape(n)
    if n.target in (aten.arange.default, aten.arange.start, aten.arange.start_step):
        args = [symbolic.size(a) if isinstance(a, (torch.fx.Node, torch.SymInt)) else a for a in n.args]
        start, step = (args[0], args[2] if len(args) > 2 else 1) if len(args) > 1 else (0, 1)
        if not isinstance(step, int) or isinstance(start, float) or isinstance(step, float):
            raise Unsupported("arange with a symbolic length and a non-integer start or step")
        if dtype not in (torch.int64, torch.int32, torch.float32):
            raise Unsupported(f"arange of {dtype} with a symbolic length")
        return ctx.node("iota", [], origin=ctx.origin(n), length=out[0], start=start, step=step,
                        dtype=dtype_id(dtype))
    if n.target in (aten.full.default, aten.full_like.default, aten.scalar_tensor.default):
        value = n.args[1] if len(n.args) > 1 else n.args[0]
    elif n.target in (aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default,
                      aten.empty.memory_format, aten.empty_permuted.default, aten.empty_like.default,
                      aten.new_empty.default):
        value = 0
    else:
        value = 1
    v = operand(ctx, value, dtype)
    # A stride-0 view of the 0-d value: every element reads it.
    return strided_copy(ctx, v, list(out), [0] * len(out), 0, ctx.origin(n))


@register(operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
          torch.sym_max, torch.sym_min, torch.sym_sum)
def _size_arith(ctx, n):
    # Arithmetic on sizes (Dynamo's s0 * s1 before a view): a size, not a tensor.
    if n.target is torch.sym_sum:  # sym_sum((1, s0)): Dynamo's sum of a list of sizes
        return sum((symbolic.size(a) for a in n.args[0]), 0)
    args = [symbolic.size(a) for a in n.args]
    if n.target is torch.sym_max or n.target is torch.sym_min:
        return symbolic.minmax("max" if n.target is torch.sym_max else "min", *args)
    return n.target(*args)


@register(aten.sym_size.int)
def _sym_size(ctx, n):
    return ctx.shape(ctx.value(n.args[0]))[_norm_dim(n.args[1], len(ctx.shape(ctx.value(n.args[0]))))]


# ---- elementwise ------------------------------------------------------------------

_BINARY = {
    aten.add.Tensor: "add", aten.add.Scalar: "add",
    aten.sub.Tensor: "sub", aten.sub.Scalar: "sub",
    aten.mul.Tensor: "mul", aten.mul.Scalar: "mul",
    aten.div.Tensor: "div", aten.div.Scalar: "div",
    aten.pow.Tensor_Tensor: "pow", aten.pow.Tensor_Scalar: "pow",
    aten.maximum.default: "maximum", aten.minimum.default: "minimum",
    aten.max.other: "maximum", aten.min.other: "minimum",  # torch.max(a, b): torch.export's undecomposed name
    aten.eq.Tensor: "eq", aten.eq.Scalar: "eq", aten.ne.Tensor: "ne", aten.ne.Scalar: "ne",
    aten.lt.Tensor: "lt", aten.lt.Scalar: "lt", aten.le.Tensor: "le", aten.le.Scalar: "le",
    aten.gt.Tensor: "gt", aten.gt.Scalar: "gt", aten.ge.Tensor: "ge", aten.ge.Scalar: "ge",
    aten.logical_and.default: "logical_and", aten.logical_or.default: "logical_or",
}  # bitwise_and/or are elementwise.py's (the bitwise kernels take bool and integers)
_COMPARE = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"}


def _compute_dtype(n, a, b):
    """The dtype both operands are converted to (torch's type promotion)."""
    def as_operand(x):
        if isinstance(x, torch.fx.Node):
            v = _val(x)
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                # A size (a SymInt node under symbolic sizes) as a Python scalar.
                return {torch.SymInt: 0, torch.SymFloat: 0.0, torch.SymBool: False}[type(v)]
            return v if v.dim() > 0 else torch.empty((), dtype=v.dtype)
        return x
    return torch.result_type(as_operand(a), as_operand(b))


@register(*_BINARY)
def _binary(ctx, n):
    op = _BINARY[n.target]
    a, b = n.args[0], n.args[1]
    out_dtype = _val(n).dtype
    dtype = _compute_dtype(n, a, b) if op in _COMPARE else out_dtype
    if op in ("logical_and", "logical_or"):
        dtype = torch.bool
    if n.target in (aten.div.Tensor, aten.div.Scalar) and n.kwargs.get("rounding_mode"):
        raise Unsupported(f"rounding_mode={n.kwargs['rounding_mode']!r}")
    if op == "pow" and not dtype.is_floating_point:
        raise Unsupported(f"pow of {dtype} tensors")
    if op == "pow" and not isinstance(b, torch.fx.Node) and b == 2:
        x = operand(ctx, a, dtype)  # x**2 as x*x: exact, like torch
        return ctx.node("mul", [x, x], origin=ctx.origin(n))
    if op == "pow" and not isinstance(b, torch.fx.Node) and b in (0.5, -0.5):
        # torch computes x**0.5 as sqrt(x) and x**-0.5 as rsqrt(x), which
        # differ from powf at -inf and -0 (sqrt(-inf) is NaN, powf's inf).
        return ctx.node("sqrt" if b == 0.5 else "rsqrt", [operand(ctx, a, dtype)], origin=ctx.origin(n))
    alpha = n.kwargs.get("alpha", 1)
    vb = operand(ctx, b, dtype)
    if alpha != 1:
        vb = ctx.node("mul", [vb, ctx.scalar(alpha, dtype)])
    return ctx.node(op, [operand(ctx, a, dtype), vb], origin=ctx.origin(n))


@register(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(ctx, n):
    dtype = _val(n).dtype
    alpha = n.kwargs.get("alpha", 1)
    a = operand(ctx, n.args[0], dtype)
    if alpha != 1:
        a = ctx.node("mul", [a, ctx.scalar(alpha, dtype)])
    return ctx.node("sub", [operand(ctx, n.args[1], dtype), a], origin=ctx.origin(n))


_UNARY = {
    aten.neg.default: "neg", aten.abs.default: "abs", aten.exp.default: "exp",
    aten.log.default: "log", aten.sqrt.default: "sqrt", aten.rsqrt.default: "rsqrt",
    aten.reciprocal.default: "reciprocal", aten.tanh.default: "tanh",
    aten.sigmoid.default: "sigmoid", aten.relu.default: "relu", aten.silu.default: "silu",
    aten.erf.default: "erf", aten.sin.default: "sin", aten.cos.default: "cos",
    aten.logical_not.default: "logical_not", aten.bitwise_not.default: "logical_not",
}


# silu is kept whole: decomposed it is x * sigmoid(x), two ops for one.
@register(*(t for t in _UNARY if t is not aten.silu.default))
@register(aten.silu.default, keep_whole=True)
def _unary(ctx, n):
    op = _UNARY[n.target]
    x = ctx.value(n.args[0])
    if op == "logical_not":
        if ctx.dtype(x) != torch.bool and n.target == aten.bitwise_not.default:
            raise Unsupported("bitwise_not of a non-bool tensor")
        return ctx.node(op, [cast(ctx, x, torch.bool)], origin=ctx.origin(n))
    return ctx.node(op, [cast(ctx, x, _val(n).dtype)], origin=ctx.origin(n))


@register(aten.gelu.default)
def _gelu(ctx, n):
    approx = n.kwargs.get("approximate", n.args[1] if len(n.args) > 1 else "none")
    return ctx.node("gelu_tanh" if approx == "tanh" else "gelu", [ctx.value(n.args[0])], origin=ctx.origin(n))


# ---- reductions and normalisation --------------------------------------------------


def _axes_mask(dims, rank):
    if rank == 0:  # torch allows dim 0 / -1 on a 0-d tensor: nothing to reduce
        return 0
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        dims = range(rank)
    if isinstance(dims, int):
        dims = [dims]
    mask = 0
    for d in dims:
        mask |= 1 << _norm_dim(d, rank)
    return mask


def _reduce(op):
    def handler(ctx, n):
        x = ctx.value(n.args[0])
        rank = len(ctx.shape(x))
        dims = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        if n.kwargs.get("dtype") is not None:
            x = cast(ctx, x, n.kwargs["dtype"])
        if op == "any":
            x = cast(ctx, x, torch.bool)
        elif op in ("sum", "mean") and ctx.dtype(x) != _val(n).dtype:
            x = cast(ctx, x, _val(n).dtype)
        y = ctx.node(op, [x], origin=ctx.origin(n), axes=_axes_mask(dims, rank), keepdim=int(bool(keep)))
        return reshape(ctx, y, _shape(n))
    return handler


register(aten.sum.dim_IntList)(_reduce("sum"))
register(aten.mean.dim)(_reduce("mean"))
register(aten.amax.default)(_reduce("max"))
register(aten.amin.default)(_reduce("min"))
register(aten.any.dim, aten.any.dims, aten.any.default)(_reduce("any"))


@register(aten.linalg_vector_norm.default)
def _vector_norm(ctx, n):
    """torch.linalg.vector_norm (F.normalize's, torch.norm's) as eager
    computes it: a plain sum over |x|^ord, no rescaling (a sum of squares
    that overflows is inf in eager too), the root taken once."""
    x = ctx.value(n.args[0])
    order = _arg(n, 1, "ord", 2)
    dims, keep = _arg(n, 2, "dim", None), bool(_arg(n, 3, "keepdim", False))
    if ctx.dtype(x) != torch.float32 or n.kwargs.get("dtype") not in (None, torch.float32):
        raise Unsupported(f"a vector norm of {ctx.dtype(x)} in {n.kwargs.get('dtype')}")
    if not isinstance(order, (int, float)) or isinstance(order, bool):
        raise Unsupported(f"a vector norm of order {order!r}")
    return reshape(ctx, vector_norm(ctx, x, order, _axes_mask(dims, len(ctx.shape(x))), keep, ctx.origin(n)),
                   _shape(n))


@register(aten.dist.default)
def _dist(ctx, n):
    """torch.dist(a, b, p): the p-norm of a - b (broadcast) over all of it."""
    order = _arg(n, 2, "p", 2)
    if _val(n).dtype != torch.float32 or not isinstance(order, (int, float)) or isinstance(order, bool):
        raise Unsupported(f"dist of {_val(n).dtype} with p={order!r}")
    d = ctx.node("sub", [operand(ctx, n.args[0], torch.float32), operand(ctx, n.args[1], torch.float32)],
                 origin=ctx.origin(n))
    return reshape(ctx, vector_norm(ctx, d, order, _axes_mask(None, len(ctx.shape(d))), False, ctx.origin(n)), [])


def vector_norm(ctx, x, order, axes, keep, origin):
    """The order-norm of float32 x over the axes mask, as eager's
    linalg.vector_norm computes it (see _vector_norm)."""
    def reduce(op, v):
        return ctx.node(op, [v], origin=origin, axes=axes, keepdim=int(keep))

    a = ctx.node("abs", [x], origin=origin)
    if order == math.inf:
        y = reduce("max", a)
    elif order == -math.inf:
        y = reduce("min", a)
    elif order == 0:  # how many are nonzero
        y = reduce("sum", cast(ctx, ctx.node("ne", [x, ctx.scalar(0.0, torch.float32)], origin=origin),
                               torch.float32))
    elif order == 1:
        y = reduce("sum", a)
    elif order == 2:
        y = ctx.node("sqrt", [reduce("sum", ctx.node("mul", [x, x], origin=origin))], origin=origin)
    else:
        p = ctx.scalar(float(order), torch.float32)
        y = ctx.node("pow", [reduce("sum", ctx.node("pow", [a, p], origin=origin)),
                             ctx.scalar(1.0 / float(order), torch.float32)], origin=origin)
    return y


@register(aten.sum.default, aten.mean.default)
def _reduce_all(ctx, n):
    x = ctx.value(n.args[0])
    op = "sum" if n.target == aten.sum.default else "mean"
    x = cast(ctx, x, _val(n).dtype)
    return ctx.node(op, [x], origin=ctx.origin(n), axes=_axes_mask(None, len(ctx.shape(x))))


@register(aten.max.default, aten.min.default)
def _max_all(ctx, n):
    x = ctx.value(n.args[0])
    op = "max" if n.target == aten.max.default else "min"
    return ctx.node(op, [x], origin=ctx.origin(n), axes=_axes_mask(None, len(ctx.shape(x))))


def _argmin_input(ctx, n, x):
    # argmin(x) = argmax(-x): the first index of the minimum; NaN still wins.
    if ctx.dtype(x) not in (torch.float32, torch.int64, torch.int32):
        raise Unsupported(f"the index of the minimum of a {ctx.dtype(x)} tensor")
    return ctx.node("neg", [x], origin=ctx.origin(n))


@register(aten.max.dim, aten.min.dim)
def _max_dim(ctx, n):
    x = ctx.value(n.args[0])
    rank = len(ctx.shape(x))
    if rank == 0:  # dim 0 / -1 of a 0-d tensor: the value itself, index 0
        return x, ctx.scalar(0, torch.int64)
    dim = _norm_dim(n.args[1], rank)
    keep = int(bool(n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)))
    is_max = n.target == aten.max.dim
    values = ctx.node("max" if is_max else "min", [x], origin=ctx.origin(n), axes=1 << dim, keepdim=keep)
    src = x if is_max else _argmin_input(ctx, n, x)
    return values, ctx.node("argmax", [src], origin=ctx.origin(n), axis=dim, keepdim=keep)


@register(aten.argmax.default, aten.argmin.default)
def _argmax(ctx, n):
    x = ctx.value(n.args[0])
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
    keep = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
    if dim is None:
        x = reshape(ctx, x, [math.prod(ctx.shape(x))])
        dim = 0
    if n.target == aten.argmin.default:
        x = _argmin_input(ctx, n, x)
    y = ctx.node("argmax", [x], origin=ctx.origin(n), axis=_norm_dim(dim, max(len(ctx.shape(x)), 1)),
                 keepdim=int(bool(keep)))
    return reshape(ctx, y, _shape(n))


@register(aten._softmax.default, aten._log_softmax.default, aten.softmax.int, aten.log_softmax.int)
def _softmax(ctx, n):
    x = cast(ctx, ctx.value(n.args[0]), torch.float32)
    rank = len(ctx.shape(x))
    log = n.target in (aten._log_softmax.default, aten.log_softmax.int)
    y = ctx.node("log_softmax" if log else "softmax", [x], origin=ctx.origin(n),
                 axis=_norm_dim(n.args[1], max(rank, 1)))
    return cast(ctx, y, _val(n).dtype)


def _layer_norm_node(ctx, n, x, normalized_shape, weight, bias, eps):
    inputs = [ctx.value(x)]
    inputs.append(ctx.value(weight) if weight is not None else -1)
    inputs.append(ctx.value(bias) if bias is not None else -1)
    while inputs[-1] == -1:
        inputs.pop()
    return ctx.node("layer_norm", inputs, origin=ctx.origin(n), dims=len(normalized_shape), eps=eps)


@register(aten.layer_norm.default)
def _layer_norm_output(ctx, n):
    # torch.export's program before decomposition (kiln/training_ir.py):
    # native_layer_norm's first output alone.
    return _layer_norm_node(ctx, n, n.args[0], n.args[1], _arg(n, 2, "weight", None), _arg(n, 3, "bias", None),
                            _arg(n, 4, "eps", 1e-5))


@register(aten.native_layer_norm.default)
def _layer_norm(ctx, n):
    x, normalized_shape, weight, bias, eps = n.args[:5]
    xv = ctx.value(x)
    y = _layer_norm_node(ctx, n, x, normalized_shape, weight, bias, eps)
    # mean and rstd (outputs 1 and 2) are what training saves for backward.
    # Built from plain ops; dead-code elimination drops them in inference.
    rank = len(ctx.shape(xv))
    mask = _axes_mask(list(range(rank - len(normalized_shape), rank)), rank)
    mean = ctx.node("mean", [xv], axes=mask, keepdim=1)
    centred = ctx.node("sub", [xv, mean])
    var = ctx.node("mean", [ctx.node("mul", [centred, centred])], axes=mask, keepdim=1)
    rstd = ctx.node("rsqrt", [ctx.node("add", [var, ctx.scalar(float(eps), torch.float32)])])
    return (y, reshape(ctx, mean, _shape_of_output(n, 1)), reshape(ctx, rstd, _shape_of_output(n, 2)))


def _shape_of_output(n, i):
    return symbolic.shape(n.meta["val"][i])


@register(aten.rms_norm.default, keep_whole=True)
def _rms_norm(ctx, n):
    x, normalized_shape = n.args[:2]
    weight = n.args[2] if len(n.args) > 2 else n.kwargs.get("weight")
    eps = n.args[3] if len(n.args) > 3 else n.kwargs.get("eps")
    if eps is None:
        eps = torch.finfo(_val(n).dtype).eps
    inputs = [ctx.value(x)] + ([ctx.value(weight)] if weight is not None else [])
    return ctx.node("rms_norm", inputs, origin=ctx.origin(n), dims=len(normalized_shape), eps=eps)


# ---- matrix products -----------------------------------------------------------------


_SAME_VALUES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default)


def _expanded_matrix(b):
    """The FX node of the (K, N) matrix (2-d, or with batch dims of 1) that
    bmm operand b expands, else None. torch's matmul of a 3-d x it does not
    fold to 2-d (x's batch dims do not collapse, a permuted or expanded x,
    and the weight needs no gradient) by a (K, N) weight W is expand(W, (B,
    K, N)), a view and a bmm: a matmul by a constant matrix, which reading
    W itself makes one LINEAR on W (packed, quantized as weights_dtype
    says) instead of a MATMUL on B copies of it in fp32 (quant fuzzer, seed
    4 graph 166)."""
    if _val(b).dtype != torch.float32:
        # a bf16 model's operand: lowp.py reads B its own way (a constant
        # widened, a value rounded), which this shortcut would skip (fuzzer
        # seed 20021: "matmul takes ... a bfloat16 b that is not a constant")
        return None
    want = tuple(_val(b).shape)
    for _ in range(4):
        if not (isinstance(b, torch.fx.Node) and b.op == "call_function" and b.target in _SAME_VALUES):
            break
        if tuple(_val(b).shape[-2:]) != want[-2:]:
            return None
        b = b.args[0]
    if not (isinstance(b, torch.fx.Node) and b.op == "call_function" and b.target is aten.expand.default):
        return None
    src = b.args[0]
    shape = tuple(_val(src).shape)
    if _val(src).dtype != torch.float32 or len(shape) < 2 or shape[-2:] != want[-2:] or any(d != 1 for d in shape[:-2]):
        return None
    if not all(isinstance(d, int) for d in shape + want):
        return None
    return src


def _product(ctx, a, b, origin, blas=True, folds=True):
    """a (.., M, K) @ b (.., K, N), batch dims broadcast. Over K = 1 eager's
    fp32 mm (MKL's sgemm, whichever ISA path MKL_ENABLE_INSTRUCTIONS picks)
    returns each element as its one product: +0 times a negative is -0,
    where a GEMM summing from a +0 accumulator gives +0 (pow(-1) then takes
    the other infinity: fuzzer seed 20097, graph 3688). Its sums over K >= 2
    start at +0, as do its own loops for bmm and for bf16 operands at any K
    (blas False, or a bf16 operand): those stay GEMMs. A matmul by a 2-d b
    whose x eager cannot fold into rows (folds False, _eager_folds) is a
    bmm in eager: over K = 1 the product plus +0 (-0 becomes +0; seed 20116
    graph 13498), still a multiply, so that a 2-d weight over one input
    feature is never a GEMM's (quantized) weight, whatever x's layout
    (seed 20117 graphs 6785, 8140, 9200)."""
    if blas and ctx.shape(a)[-1] == 1 and ctx.dtype(a) == ctx.dtype(b) == torch.float32:
        y = ctx.node("mul", [a, b], origin=origin)  # broadcast: an outer product
        return y if folds else ctx.node("add", [y, ctx.scalar(0.0, torch.float32)], origin=origin)
    return ctx.node("matmul", [a, b], origin=origin)


def _static_layout(val):
    """(shape, strides) as ints, or None where any is symbolic: reading a
    SymInt as a number would specialize its symbol (a guard kiln never
    asked for: the artifact then refused other sizes)."""
    shape, strides = tuple(val.shape), tuple(val.stride())
    if all(type(d) is int for d in shape + strides):
        return shape, strides
    return None


def _contiguous(val):
    """Contiguous as traced; symbolic layouts count as contiguous."""
    layout = _static_layout(val)
    return layout is None or val.is_contiguous()


def _eager_folds(x, b):
    """Whether eager's matmul of x (>= 3-d) by a 2-d b (FX nodes) folds x's
    leading dims into rows and calls mm (ATen's should_fold), rather than
    expanding b and calling bmm: always where b requires grad, else where
    x's dims but the last are laid out as one block (x's layout as traced:
    a `where` or permute result may not be). A symbolic layout counts as
    folding, the common case."""
    xv, bv = _val(x), _val(b)
    layout = _static_layout(xv)
    if getattr(bv, "requires_grad", False) or layout is None or xv.numel() == 0:
        return True
    shape, strides = layout
    return all(strides[i] == strides[i + 1] * shape[i + 1] for i in range(len(shape) - 2))


@register(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(ctx, n):
    a, b = ctx.value(n.args[0]), ctx.value(n.args[1])
    src = _expanded_matrix(n.args[1]) if n.target is aten.bmm.default else None
    if src is not None:
        b = reshape(ctx, ctx.value(src), list(_val(src).shape[-2:]))
    if len(ctx.shape(a)) < 2 or len(ctx.shape(b)) < 2:
        raise Unsupported("matmul of a 1-d operand")
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"matmul of {_val(n).dtype}")
    # matmul by a 2-d b is eager's mm where its batch dims fold into rows, else a bmm.
    blas = n.target is aten.mm.default or (n.target is aten.matmul.default and _val(n.args[1]).dim() == 2)
    folds = n.target is aten.mm.default or _val(n.args[0]).dim() <= 2 or _eager_folds(n.args[0], n.args[1])
    return _product(ctx, a, b, ctx.origin(n), blas, folds)


def _swap_last_two(ctx, x, origin):
    shape = list(ctx.shape(x))
    src = _dense_strides(shape)
    return strided_copy(ctx, x, shape[:-2] + [shape[-1], shape[-2]], src[:-2] + [src[-1], src[-2]], 0, origin)


@register(aten.linalg_solve_triangular.default)
def _solve_triangular(ctx, n):
    """A X = B (left) or X A = B, A triangular: SOLVE_TRIANGULAR, left's
    form; X A = B is A^T X^T = B^T, the other triangle. A and B are
    broadcast to the result's batch dims first."""
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"solve_triangular of {_val(n).dtype}")
    origin = ctx.origin(n)
    upper, left = bool(n.kwargs["upper"]), bool(n.kwargs.get("left", True))
    unit = bool(n.kwargs.get("unitriangular", False))
    batch = list(_shape(n))[:-2]
    a, b = (ctx.value(x) for x in n.args[:2])
    a = _broadcast(ctx, a, batch + list(ctx.shape(a))[-2:], origin)
    b = _broadcast(ctx, b, batch + list(ctx.shape(b))[-2:], origin)
    if not left:
        a, b, upper = _swap_last_two(ctx, a, origin), _swap_last_two(ctx, b, origin), not upper
    x = ctx.node("solve_triangular", [a, b], origin=origin, upper=int(upper), unit=int(unit))
    return x if left else _swap_last_two(ctx, x, origin)


def _beta_input_plus_alpha(ctx, n, product):
    """beta * input + alpha * product, the addmm family's result (input is
    n.args[0]). With beta 0 torch ignores input, NaN and inf included."""
    beta, alpha = n.kwargs.get("beta", 1), n.kwargs.get("alpha", 1)
    origin = ctx.origin(n)
    if alpha != 1:
        product = ctx.node("mul", [product, ctx.scalar(float(alpha), torch.float32)], origin=origin)
    if beta == 0:
        return reshape(ctx, product, _shape(n))
    bias = ctx.value(n.args[0])
    if beta != 1:
        bias = ctx.node("mul", [bias, ctx.scalar(float(beta), torch.float32)], origin=origin)
    return reshape(ctx, ctx.node("add", [product, bias], origin=origin), _shape(n))


@register(aten.addmm.default)
def _addmm(ctx, n):
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"addmm of {_val(n).dtype}")
    a, b = ctx.value(n.args[1]), ctx.value(n.args[2])
    return _beta_input_plus_alpha(ctx, n, _product(ctx, a, b, ctx.origin(n)))


@register(aten.addmv.default)
def _addmv(ctx, n):
    """input + mat @ vec, the vector as a one-column matrix."""
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"addmv of {_val(n).dtype}")
    mat, vec = ctx.value(n.args[1]), ctx.value(n.args[2])
    col = reshape(ctx, vec, [ctx.shape(vec)[0], 1])
    product = ctx.node("matmul", [mat, col], origin=ctx.origin(n))
    return _beta_input_plus_alpha(ctx, n, reshape(ctx, product, [ctx.shape(mat)[0]]))


@register(aten.addbmm.default)
def _addbmm(ctx, n):
    """input + sum_i batch1[i] @ batch2[i]: one (n, B m) x (B m, p) product,
    batch1's batches laid side by side along K."""
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"addbmm of {_val(n).dtype}")
    b1, b2 = ctx.value(n.args[1]), ctx.value(n.args[2])
    B, rows, k = ctx.shape(b1)
    p = ctx.shape(b2)[2]
    sb, sr, _ = _dense_strides([B, rows, k])
    a = reshape(ctx, strided_copy(ctx, b1, [rows, B, k], [sr, sb, 1], 0, ctx.origin(n)), [rows, B * k])
    b = reshape(ctx, b2, [B * k, p])
    return _beta_input_plus_alpha(ctx, n, ctx.node("matmul", [a, b], origin=ctx.origin(n)))


@register(aten.linear.default, keep_whole=True)
def _linear(ctx, n):
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"linear of {_val(n).dtype}")
    x, w = ctx.value(n.args[0]), ctx.value(n.args[1])
    if len(ctx.shape(w)) != 2:
        raise Unsupported("linear with a 1-d weight")
    out_features, in_features = ctx.shape(w)
    if len(ctx.shape(x)) == 1:  # a single (K,) row: as (1, K), then back
        x = reshape(ctx, x, [1, in_features])
    # y = x @ w^T: the transpose of a constant weight folds away at compile
    # time (over one input feature, w is its own transpose's memory).
    wt = strided_copy(ctx, w, [in_features, out_features], [1, in_features], 0, ctx.origin(n)) \
        if in_features != 1 else reshape(ctx, w, [1, out_features], ctx.origin(n))
    # Eager's linear: addmm or mm (a 2-d x, or a contiguous one with a bias),
    # else matmul(x, w.t()), an mm only where x folds (seed 20116 graph
    # 13498: a K = 1 product of +0 then gave eager's bmm's +0, not -0).
    bias = len(n.args) > 2 and n.args[2] is not None
    xv = _val(n.args[0])
    folds = xv.dim() <= 2 or (bias and _contiguous(xv)) or _eager_folds(n.args[0], n.args[1])
    y = _product(ctx, x, wt, ctx.origin(n), folds=folds)
    if bias:
        y = ctx.node("add", [y, ctx.value(n.args[2])], origin=ctx.origin(n))
    return reshape(ctx, y, _shape(n))


def attention_mask(ctx, mask):
    """SDPA's attn_mask as kiln's additive float32 mask: a bool mask keeps
    where true (0) and masks where false (-inf)."""
    m = ctx.value(mask)
    if ctx.dtype(m) == torch.bool:
        m = ctx.node("where", [m, ctx.scalar(0.0, torch.float32), ctx.scalar(float("-inf"), torch.float32)])
    return cast(ctx, m, torch.float32)


_SDPA_SCALE_HEAD_DIM = 4  # KILN_SDPA_SCALE_HEAD_DIM (kiln_ops.h)
_SDPA_BF16 = 8  # KILN_SDPA_BF16: the bf16 rule (kiln_ops.h)
_SDPA_EVERY_KEY = 16  # KILN_SDPA_EVERY_KEY: every key read, as torch's math path (kiln_ops.h)


def sdpa_scale(head_dim, scale):
    """SDPA's scale params: the given scale, else torch's default 1 / sqrt(D)
    (in double, as sdp::calculate_scale), which for a symbolic D the kernel
    takes from the call's D (KILN_SDPA_SCALE_HEAD_DIM)."""
    if scale is not None:
        return dict(scale=scale)
    if isinstance(head_dim, symbolic.SymDim):
        return dict(scale=0.0, flags=_SDPA_SCALE_HEAD_DIM)
    return dict(scale=1.0 / math.sqrt(head_dim))


def _sdpa_on_math_path(args, causal, scale, gqa):
    """Whether torch's CPU dispatch runs this attention on its math path
    (torch._fused_sdp_choice: 0), asked of empty tensors of the example's
    sizes, strides and dtypes (their memory is never touched). The math
    path reads every key: a NaN score at a causally hidden key reaches the
    row, where the fused kernel skips hidden keys (KILN_SDPA_EVERY_KEY)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    def probe(x, is_mask=False):
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor):
            return None
        sizes, strides = ([int(optimization_hint(d)) for d in dims] for dims in (val.shape, val.stride()))
        if is_mask:  # only its shape counts: one element, broadcast (an (S, S) mask of a long prompt)
            return torch.empty(1, dtype=val.dtype).expand(sizes)
        return torch.empty_strided(sizes, strides, dtype=val.dtype)

    with unset_fake_temporarily():
        q, k, v, mask = probe(args[0]), probe(args[1]), probe(args[2]), probe(args[3], is_mask=True)
        if q is None or k is None or v is None:
            return False
        kw = {"scale": scale} if scale is not None else {}
        return torch._fused_sdp_choice(q, k, v, mask, 0.0, bool(causal), enable_gqa=bool(gqa), **kw) == 0


@register(aten.scaled_dot_product_attention.default, keep_whole=True)
def _sdpa(ctx, n):
    q, k, v = (ctx.value(x) for x in n.args[:3])
    mask = n.args[3] if len(n.args) > 3 else n.kwargs.get("attn_mask")
    dropout = n.args[4] if len(n.args) > 4 else n.kwargs.get("dropout_p", 0.0)
    causal = n.args[5] if len(n.args) > 5 else n.kwargs.get("is_causal", False)
    scale = n.kwargs.get("scale", n.args[6] if len(n.args) > 6 else None)
    gqa = n.kwargs.get("enable_gqa", False)
    if dropout:
        raise Unsupported("attention dropout")
    rank = len(ctx.shape(q))
    if rank not in (3, 4):
        raise Unsupported(f"attention on rank-{rank} tensors")
    if len(ctx.shape(k)) != rank or len(ctx.shape(v)) != rank or ctx.shape(k)[0] != ctx.shape(q)[0] \
            or ctx.shape(v)[0] != ctx.shape(q)[0]:
        # torch broadcasts the batch dims (a rank-3 q against rank-4 k and v);
        # kiln's SDPA takes one batch for all three.
        raise Unsupported("attention whose q, k and v broadcast their batch dimensions")
    if rank == 3:  # (B, S, D) is one head: (B, 1, S, D)
        q, k, v = (reshape(ctx, t, [ctx.shape(t)[0], 1] + list(ctx.shape(t)[1:])) for t in (q, k, v))
    if ctx.shape(v)[1] != ctx.shape(k)[1]:
        raise Unsupported("attention whose key and value head counts differ")
    if not gqa and ctx.shape(k)[1] != ctx.shape(q)[1] and ctx.shape(k)[1] != 1:
        # One key/value head broadcasts to every query head (Falcon's
        # multi-query attention): kiln's grouped heads map them alike.
        raise Unsupported("key/value heads differ from query heads without enable_gqa")
    inputs = [q, k, v]
    if mask is not None:
        m = attention_mask(ctx, mask)
        if rank == 3 and len(ctx.shape(m)) == 3:
            m = reshape(ctx, m, [ctx.shape(m)[0], 1] + list(ctx.shape(m)[1:]))
        inputs.append(m)
    params = sdpa_scale(ctx.shape(q)[-1], scale)
    if getattr(ctx, "sdpa_bf16", False):  # a bf16 model's attention (lowp.attention_in_bf16)
        params["flags"] = params.get("flags", 0) | _SDPA_BF16
    if _sdpa_on_math_path((n.args[0], n.args[1], n.args[2], mask), causal, scale, gqa):
        params["flags"] = params.get("flags", 0) | _SDPA_EVERY_KEY
    y = ctx.node("sdpa", inputs, origin=ctx.origin(n), causal=int(bool(causal)), **params)
    return reshape(ctx, y, _shape(n))


# ---- convolution, pooling and batch norm ----------------------------------------


def _ints(v, n=2):
    """An int or a list of one or n ints as a list of n ints."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    # A size argument may be a SymInt's FX node under symbolic sizes (an
    # adaptive pool's output size that is its input's): a kiln size then.
    v = [symbolic.size(i) if isinstance(i, (torch.fx.Node, torch.SymInt)) else i for i in v]
    return v * n if len(v) == 1 else [i if isinstance(i, symbolic.SymDim) else int(i) for i in v]


def _as_nchw(ctx, x, spatial):
    """x with `spatial` trailing spatial dims as a 4-d (N, C, H, W) value:
    unbatched inputs gain N = 1, 1-d inputs gain H = 1."""
    shape = list(ctx.shape(x))
    if len(shape) == spatial + 1:
        shape = [1] + shape
    if spatial == 1:
        shape = shape[:2] + [1] + shape[2:]
    if len(shape) != 4:
        raise Unsupported(f"a rank-{len(ctx.shape(x))} input to a {spatial}-d op")
    return reshape(ctx, x, shape)


def _transposed_convolution(ctx, n):
    """conv_transpose{1,2}d: the gradient of the convolution it transposes
    with respect to that convolution's input (CONV2D_GRAD_INPUT), x in the
    place of dy: its weight (C_in, C_out / groups, kh, kw) is that
    convolution's, and its output size (H - 1) stride - 2 pad +
    dilation (k - 1) + output_padding + 1 is an input size the
    convolution maps back to H while output_padding < stride."""
    x, w, bias, stride, padding, dilation, _, output_padding, groups = n.args[:9]
    spatial = len(_val(w).shape) - 2
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d transposed convolution")
    stride, padding, dilation, output_padding = (_ints(v, spatial)
                                                 for v in (stride, padding, dilation, output_padding))
    wv = ctx.value(w)
    if spatial == 1:  # (N, C, L) as (N, C, 1, L)
        ci, cog, k = ctx.shape(wv)
        wv = reshape(ctx, wv, [ci, cog, 1, k], ctx.origin(n))
        stride, padding, dilation, output_padding = ([1] + stride, [0] + padding, [1] + dilation,
                                                     [0] + output_padding)
    if any(op >= s for op, s in zip(output_padding, stride)):
        # torch allows it below the dilation too; that size is not one the
        # convolution maps back (its extra positions are past its reach).
        raise Unsupported(f"a transposed convolution whose output padding {output_padding} is not "
                          f"below its stride {stride}")
    xv = _as_nchw(ctx, ctx.value(x), spatial)
    kh, kw = ctx.shape(wv)[2:]
    h, wd = ((size - 1) * s - 2 * p + d * (k - 1) + op + 1
             for size, s, p, d, k, op in zip(ctx.shape(xv)[2:], stride, padding, dilation, (kh, kw),
                                             output_padding))
    y = ctx.node("conv2d_grad_input", [xv, wv], origin=ctx.origin(n), h=h, w=wd, stride_h=stride[0],
                 stride_w=stride[1], pad_h=padding[0], pad_w=padding[1], dilation_h=dilation[0],
                 dilation_w=dilation[1], groups=groups)
    if bias is not None:
        b = ctx.value(bias)
        y = ctx.node("add", [y, reshape(ctx, b, [ctx.shape(b)[0], 1, 1])], origin=ctx.origin(n))
    return reshape(ctx, y, _shape(n))


@register(aten.convolution.default)
def _convolution(ctx, n):
    x, w, bias, stride, padding, dilation, transposed, _, groups = n.args[:9]
    if transposed and _val(n).dtype == torch.float32:
        return _transposed_convolution(ctx, n)
    if transposed:
        raise Unsupported(f"transposed convolution of {_val(n).dtype}")
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"convolution of {_val(n).dtype}")
    spatial = len(_val(w).shape) - 2
    if spatial == 3:
        return _convolution3d(ctx, n)
    if spatial not in (1, 2):
        raise Unsupported(f"{spatial}-d convolution")
    stride, padding, dilation = (_ints(v, spatial) for v in (stride, padding, dilation))
    if spatial == 2 and _is_patchify(ctx, x, w, stride, padding, dilation, groups):
        return _patchify(ctx, n, ctx.value(x), ctx.value(w), bias)
    wv = ctx.value(w)
    if spatial == 1:  # (N, C, L) as (N, C, 1, L); the weight's reshape folds away
        o, cg, k = ctx.shape(wv)
        wv = reshape(ctx, wv, [o, cg, 1, k], ctx.origin(n))
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
    inputs = [_as_nchw(ctx, ctx.value(x), spatial), wv]
    if bias is not None:
        inputs.append(ctx.value(bias))
    # round_x: a bf16 model's conv (kiln/lowp.py), whose x eager reads rounded to bf16.
    y = ctx.node("conv2d", inputs, origin=ctx.origin(n), stride_h=stride[0], stride_w=stride[1],
                 pad_h=padding[0], pad_w=padding[1], dilation_h=dilation[0], dilation_w=dilation[1],
                 groups=groups, round_x=int(getattr(ctx, "conv_round_x", False)))
    return reshape(ctx, y, _shape(n))


def _is_patchify(ctx, x, w, stride, padding, dilation, groups):
    """A convolution whose windows tile the input without overlap or gaps
    (kernel = stride, no padding, dilation, groups) over static image
    sizes: a vision transformer's patch embedding. (Symbolic image sizes
    take the convolution, whose output sizes are expressions.)"""
    kernel = ctx.shape(ctx.value(w))[2:]
    return (groups == 1 and list(kernel) == list(stride) and not any(padding) and all(d == 1 for d in dilation)
            and all(isinstance(k, int) and k > 1 for k in kernel)
            and not symbolic.is_symbolic(ctx.shape(ctx.value(x))[-len(kernel):]))


def _patchify(ctx, n, x, w, bias):
    """A patch embedding as one GEMM: each patch's pixels gathered into a
    row (a strided copy: the windows do not overlap, so every pixel is read
    once), times the weight as a (C k..., O) matrix, then the output's
    channels moved before its positions. Spatial sizes past the last whole
    patch are dropped, as the convolution drops them."""
    o = ctx.origin(n)
    shape = list(ctx.shape(x))
    if len(shape) == len(ctx.shape(w)) - 1:  # unbatched
        shape = [1] + shape
        x = reshape(ctx, x, shape, o)
    N, C, sizes = shape[0], shape[1], shape[2:]
    O, k = ctx.shape(w)[0], list(ctx.shape(w)[2:])
    outs = [s // kk for s, kk in zip(sizes, k)]
    src = _dense_strides(shape)
    # rows (n, patch position...), columns (c, offset in the patch...)
    dims = [N] + outs + [C] + k
    strides = [src[0]] + [src[2 + i] * k[i] for i in range(len(k))] + [src[1]] + src[2:]
    cols = reshape(ctx, strided_copy(ctx, x, dims, strides, 0, o), [N * math.prod(outs), C * math.prod(k)], o)
    K = C * math.prod(k)
    wt = strided_copy(ctx, reshape(ctx, w, [O, K], o), [K, O], [1, K], 0, o)
    y = ctx.node("matmul", [cols, wt], origin=o)
    if bias is not None:
        y = ctx.node("add", [y, ctx.value(bias)], origin=o)
    P = math.prod(outs)
    y = strided_copy(ctx, y, [N, O, P], [P * O, 1, O], 0, o)
    return reshape(ctx, y, _shape(n), o)


def _convolution3d(ctx, n):
    """conv3d as one conv2d over the output depths: each output depth od
    reads kd input depths od * sd + t * dd (t < kd) of the depth-padded
    input; gathered side by side as channels (group, tap, channel) of an
    (N * Do)-image batch, they meet the weight's taps in the same order
    (a constant permute, folded), and the conv2d's groups stay the
    groups. The gather copies the input kd / sd times (once for a video
    model's patch embedding, kernel = stride); the output's depth moves
    back behind its channels. Backward stays eager."""
    x, w, bias, stride, padding, dilation, _, _, groups = n.args[:9]
    stride, padding, dilation = (_ints(v, 3) for v in (stride, padding, dilation))
    if _is_patchify(ctx, x, w, stride, padding, dilation, groups):
        return _patchify(ctx, n, ctx.value(x), ctx.value(w), bias)
    o = ctx.origin(n)
    xv, wv = ctx.value(x), ctx.value(w)
    shape = list(ctx.shape(xv))
    if len(shape) == 4:  # unbatched (C, D, H, W)
        shape = [1] + shape
        xv = reshape(ctx, xv, shape, o)
    if len(shape) != 5:
        raise Unsupported(f"a rank-{len(ctx.shape(ctx.value(x)))} input to a 3-d convolution")
    N, C, D, H, W = shape
    O, cg, kd, kh, kw = ctx.shape(wv)
    sd, pd, dd = stride[0], padding[0], dilation[0]
    dp = D + 2 * pd
    do = (dp - dd * (kd - 1) - 1) // sd + 1
    if (isinstance(do, int) and do <= 0) or groups <= 0 or C != cg * groups:
        raise Unsupported(f"a 3-d convolution of a {tuple(shape)} input by a {(O, cg, kd, kh, kw)} weight")
    if pd:
        xv = ctx.node("pad", [xv], origin=o, mode=0, before=[0, 0, pd, 0, 0, 0, 0, 0],
                      after=[0, 0, pd, 0, 0, 0, 0, 0], int_fill=0, fill=0.0)
    sn, sc, sdp, _ = _dense_strides([N, C, dp, H * W])
    cols = strided_copy(ctx, xv, [N, do, groups, kd, cg, H * W],
                        [sn, sd * sdp, cg * sc, dd * sdp, sc, 1], 0, o)
    cols = reshape(ctx, cols, [N * do, groups * kd * cg, H, W], o)
    so, sc_w, st, _ = _dense_strides([O, cg, kd, kh * kw])
    w2 = strided_copy(ctx, wv, [O, kd, cg, kh * kw], [so, st, sc_w, 1], 0, o)
    w2 = reshape(ctx, w2, [O, kd * cg, kh, kw], o)
    inputs = [cols, w2] + ([ctx.value(bias)] if bias is not None else [])
    y = ctx.node("conv2d", inputs, origin=o, stride_h=stride[1], stride_w=stride[2], pad_h=padding[1],
                 pad_w=padding[2], dilation_h=dilation[1], dilation_w=dilation[2], groups=groups)
    ho, wo = ctx.shape(y)[2:]
    sb, sq, _ = _dense_strides([N, do, O * ho * wo])
    y = strided_copy(ctx, y, [N, O, do, ho * wo], [sb, ho * wo, sq, 1], 0, o)
    return reshape(ctx, y, _shape(n), o)


def _pool_params(kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    """A pooling window's named params (kiln's pool layouts share them)."""
    kernel = _ints(kernel)
    stride = _ints(stride) if stride else kernel  # [] means "the kernel size"
    padding, dilation = _ints(padding), _ints(dilation)
    return dict(kernel_h=kernel[0], kernel_w=kernel[1], stride_h=stride[0], stride_w=stride[1],
                pad_h=padding[0], pad_w=padding[1], dilation_h=dilation[0], dilation_w=dilation[1],
                ceil_mode=int(bool(ceil_mode)), count_include_pad=int(bool(count_include_pad)))


def _pool_arg(args, n, i, name, default):
    """Argument i of a pooling node (args: n.args padded with None), by
    position or keyword; None reads as the default."""
    return args[i] if args[i] is not None else n.kwargs.get(name, default)


def _max_pool_args(n):
    """kiln's pool params of an aten.max_pool2d / max_pool2d_with_indices node
    (x, kernel_size, stride, padding, dilation, ceil_mode)."""
    args = list(n.args) + [None] * 6
    return _pool_params(args[1], _pool_arg(args, n, 2, "stride", None), _pool_arg(args, n, 3, "padding", 0),
                        _pool_arg(args, n, 4, "dilation", 1), _pool_arg(args, n, 5, "ceil_mode", False), 0)


def _avg_pool_args(n, rank):
    """(kernel, stride, padding, ceil_mode, count_include_pad, divisor) of an
    aten.avg_pool{1,2,3}d node (x, kernel_size, stride, padding, ceil_mode,
    count_include_pad, divisor_override), sizes as lists of `rank` ints;
    divisor 0 when there is no override (eager rejects an override of 0)."""
    args = list(n.args) + [None] * 7
    kernel = _ints(args[1], rank)
    stride = _pool_arg(args, n, 2, "stride", None)
    stride = _ints(stride, rank) if stride else kernel  # [] means "the kernel size"
    divisor = _pool_arg(args, n, 6, "divisor_override", None)
    return (kernel, stride, _ints(_pool_arg(args, n, 3, "padding", 0), rank),
            bool(_pool_arg(args, n, 4, "ceil_mode", False)), bool(_pool_arg(args, n, 5, "count_include_pad", True)),
            0 if divisor is None else int(divisor))


# max_pool2d_with_indices (the indices are a second output) is nn.py's.
@register(aten.max_pool2d.default)
def _max_pool2d(ctx, n):
    if _val(n.args[0]).dtype != torch.float32:
        raise Unsupported(f"max_pool2d of {_val(n.args[0]).dtype}")
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 2)
    y = ctx.node("max_pool2d", [xv], origin=ctx.origin(n), **_max_pool_args(n))
    return reshape(ctx, y, _shape(n))


@register(aten.avg_pool2d.default)
def _avg_pool2d(ctx, n):
    kernel, stride, padding, ceil_mode, include, divisor = _avg_pool_args(n, 2)
    if _val(n).dtype != torch.float32:
        raise Unsupported(f"avg_pool2d of {_val(n).dtype}")
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 2)
    y = ctx.node("avg_pool2d", [xv], origin=ctx.origin(n), divisor_override=divisor,
                 **_pool_params(kernel, stride, padding, 1, ceil_mode, include))
    return reshape(ctx, y, _shape(n))


def adaptive_even(size, out):
    """Whether an adaptive pool of size to out splits evenly (a symbolic
    size pooled to itself does; other symbolic tests raise Unsupported)."""
    if out == size:
        return True
    return out > 0 and size % out == 0


def adaptive_avg_pool2d_even(ctx, n):
    """adaptive_avg_pool2d when it is a plain average pool: each output cell
    averages an equal, non-overlapping block (this includes the global
    mean). The op's handler (nn.py) takes this path for an even split."""
    xv = _as_nchw(ctx, ctx.value(n.args[0]), 2)
    h, w = ctx.shape(xv)[2:]
    oh, ow = (o if o is not None else s for o, s in zip(_ints(n.args[1]), (h, w)))
    if _val(n).dtype != torch.float32 or not (adaptive_even(h, oh) and adaptive_even(w, ow)):
        raise Unsupported(f"adaptive_avg_pool2d from {h}x{w} to {oh}x{ow} (not an even split)")
    k = [1 if oh == h else h // oh, 1 if ow == w else w // ow]
    y = ctx.node("avg_pool2d", [xv], origin=ctx.origin(n), **_pool_params(k, k, 0, 1, False, True))
    return reshape(ctx, y, _shape(n))


@register(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_eval(ctx, n):
    x, weight, bias, mean, var, _, eps = n.args[:7]
    y = _batch_norm_eval_value(ctx, n, x, weight, bias, mean, var, eps, _val(n)[0].dtype)
    why = "batch norm's saved mean/rstd outputs (training only)"
    return (y, ctx.unsupported_value(n, why), ctx.unsupported_value(n, why))


@register(aten.batch_norm.default)
def _batch_norm_composite(ctx, n):
    # torch.export's program before decomposition (kiln/training_ir.py):
    # in eval mode, the normalized output alone.
    x, weight, bias, mean, var, training, _, eps = n.args[:8]
    if training or mean is None or var is None:
        raise Unsupported("batch norm in training mode (batch statistics) as one op")
    return _batch_norm_eval_value(ctx, n, x, weight, bias, mean, var, eps, _val(n).dtype)


def _batch_norm_eval_value(ctx, n, x, weight, bias, mean, var, eps, dtype):
    # y = x * scale + shift per channel (dim 1), scale = weight / sqrt(var + eps),
    # shift = bias - mean * scale. The parameters are constants, so the
    # compiler folds scale and shift into two (C, 1, ...) constants, and the
    # conv fusion pass then folds them into a preceding convolution.
    if dtype != torch.float32:
        raise Unsupported(f"batch norm of {dtype}")
    xv = ctx.value(x)
    rank = len(ctx.shape(xv))
    if rank < 2:
        raise Unsupported("batch norm of a rank-1 input")
    c = ctx.shape(xv)[1]
    f32 = torch.float32
    origin = ctx.origin(n)
    scale = ctx.node("rsqrt", [ctx.node("add", [ctx.value(var), ctx.scalar(float(eps), f32)])])
    if weight is not None:
        scale = ctx.node("mul", [scale, ctx.value(weight)])
    shift = ctx.node("neg", [ctx.node("mul", [ctx.value(mean), scale])])
    if bias is not None:
        shift = ctx.node("add", [shift, ctx.value(bias)])
    per_channel = [c] + [1] * (rank - 2)
    y = ctx.node("mul", [xv, reshape(ctx, scale, per_channel)], origin=origin)
    return ctx.node("add", [y, reshape(ctx, shift, per_channel)], origin=origin)


@register(operator.getitem)
def _getitem(ctx, n):
    v = ctx.env[n.args[0]]
    if not isinstance(v, (tuple, list)) and hasattr(v, "why"):
        # An item of a node kiln holds no value for (its stand-in failed: a
        # capture._Poison): refused with that reason, not a TypeError.
        raise Unsupported(f"an item of {n.args[0].target}, which kiln cannot hold: {v.why}")
    return v[n.args[1]]
