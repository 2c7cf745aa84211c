"""Op-table handlers for padding, flips and repeats, diagonals and strided
views, scatters (select/slice/diagonal scatter, scatter, scatter_reduce,
index_put, embedding's backward), scans (cumsum, cumprod, prod), variance,
sort and topk, and indexing by several index tensors.

As everywhere in the op table, no numerics happen here: each
handler picks kiln ops (PAD, STRIDED_COPY, STRIDED_SCATTER, SCATTER, SCAN,
ARGSORT and the elementwise ones) and their params.

Not handled, by design: ops whose output shape depends on values
(nonzero, masked_select, masked_scatter's use of the mask count, boolean
mask indexing): kiln graphs have static shapes.
"""

import math

import torch

from kiln import symbolic
from kiln.errors import Unsupported
from kiln.optable.core import (_arg, _axes_mask, _dense_strides, _norm_dim, _shape, _val, aten,
                               broadcast_to, cast, index_single, operand, reshape, select_index, strided_copy,
                               sym_scalar)
from kiln.optable.registry import register

# Kept whole (register(..., keep_whole=True)): Core ATen ops that
# torch.export's default decompositions would break up but kiln runs whole:
# the pads decompose to index arithmetic with clamp, select_scatter to a
# where over an arange mask, embedding's backward to a zeros constant of the
# whole table's size plus index_put, and take to an index whose
# decomposition guards on the data for a 0-d index (torch 2.13), failing
# where eager runs.

_MAX_RANK = 8
_INDEX_DTYPES = (torch.int64, torch.int32)



# ---- padding ----------------------------------------------------------------------

_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2}


def _pad(ctx, n, x, pad, mode, value=0):
    """PAD with torch's pad list: (before, after) pairs from the last dim back."""
    shape = ctx.shape(x)
    rank = len(shape)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise Unsupported(f"a pad list of {len(pad)} for a rank-{rank} tensor")
    before, after = [0] * 8, [0] * 8
    for i in range(len(pad) // 2):
        before[rank - 1 - i], after[rank - 1 - i] = symbolic.size(pad[2 * i]), symbolic.size(pad[2 * i + 1])
    if all(isinstance(p, int) and p == 0 for p in before + after):
        # Nothing added in any mode: x (a copy in eager, the same values).
        # Hugging Face's TF-style padding pads every 1x1 conv's input by 0.
        return x
    dtype = ctx.dtype(x)
    fill_f, fill_i = 0.0, 0
    if mode == "constant":
        if dtype.is_floating_point:
            fill_f = float(value)
        elif dtype == torch.bool:
            fill_i = int(bool(value))
        else:
            if value != int(value):
                raise Unsupported(f"a non-integer fill {value!r} for a {dtype} tensor")
            fill_i = int(value)
    return ctx.node("pad", [x], origin=ctx.origin(n), mode=_PAD_MODES[mode], before=before, after=after,
                    int_fill=fill_i, fill=fill_f)


@register(aten.constant_pad_nd.default)
def _constant_pad_nd(ctx, n):
    return _pad(ctx, n, ctx.value(n.args[0]), list(n.args[1]), "constant", _arg(n, 2, "value", 0))


@register(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
          keep_whole=True)
def _reflection_pad(ctx, n):
    return _pad(ctx, n, ctx.value(n.args[0]), list(n.args[1]), "reflect")


@register(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default,
          keep_whole=True)
def _replication_pad(ctx, n):
    return _pad(ctx, n, ctx.value(n.args[0]), list(n.args[1]), "replicate")


# ---- views made dense: flip, repeat, diagonal, as_strided ------------------------------


@register(aten.flip.default)
def _flip(ctx, n):
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    rank = len(shape)
    strides = _dense_strides(shape)
    offset = 0
    for d in {_norm_dim(d, max(rank, 1)) for d in n.args[1]}:
        if rank == 0:
            continue
        # Read the dim backwards from its last element; a symbolic size too
        # (at 1 that reads the one element: offset 0, the stride unused).
        if isinstance(shape[d], symbolic.SymDim) or shape[d] > 1:
            offset += (shape[d] - 1) * strides[d]
            strides[d] = -strides[d]
    if offset == 0 or 0 in shape:
        return x
    return strided_copy(ctx, x, shape, strides, offset, ctx.origin(n))


@register(aten.repeat.default)
def _repeat(ctx, n):
    # x.repeat(r) reads x through a view with a stride-0 dim of size r_d in
    # front of each dim d: (r0, s0, r1, s1, ...), then reshapes.
    x = ctx.value(n.args[0])
    reps = [symbolic.size(r) for r in n.args[1]]  # a SymInt's node under symbolic sizes
    shape = [1] * (len(reps) - len(ctx.shape(x))) + list(ctx.shape(x))
    src = _dense_strides(shape)
    dims, strides = [], []
    for r, s, st in zip(reps, shape, src):
        if r != 1:
            dims.append(r)
            strides.append(0)
        if s != 1:
            dims.append(s)
            strides.append(st)
    if len(dims) > _MAX_RANK:
        raise Unsupported(f"repeat needing a rank-{len(dims)} view")
    y = strided_copy(ctx, x, dims, strides, 0, ctx.origin(n))
    return reshape(ctx, y, _shape(n))


def _diagonal_view(shape, offset, d1, d2):
    """(dims, strides, element offset) of torch.diagonal's view of a dense
    tensor; sizes may be symbolic (the length a max/min of them, the
    strides their products)."""
    rank = len(shape)
    d1, d2 = _norm_dim(d1, rank), _norm_dim(d2, rank)
    src = _dense_strides(shape)
    if offset >= 0:
        length = symbolic.minmax("max", 0, symbolic.minmax("min", shape[d1], shape[d2] - offset))
        start = offset * src[d2]
    else:
        length = symbolic.minmax("max", 0, symbolic.minmax("min", shape[d1] + offset, shape[d2]))
        start = -offset * src[d1]
    keep = [d for d in range(rank) if d not in (d1, d2)]
    dims = [shape[d] for d in keep] + [length]
    strides = [src[d] for d in keep] + [src[d1] + src[d2]]
    # An empty diagonal starts at 0 (its start may lie past the end). Where
    # the length is symbolic the start stays: kiln checks a view's reach
    # only when it has elements.
    return dims, strides, 0 if isinstance(length, int) and length == 0 else start


@register(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(ctx, n):
    x = ctx.value(n.args[0])
    dims, strides, start = _diagonal_view(list(ctx.shape(x)), _arg(n, 1, "offset", 0),
                                          _arg(n, 2, "dim1", 0), _arg(n, 3, "dim2", 1))
    return strided_copy(ctx, x, dims, strides, start, ctx.origin(n))


@register(aten.unfold.default)
def _unfold(ctx, n):
    # x.unfold(dim, size, step): windows of `size` along dim, `step` apart,
    # as a new last dim: dim's length becomes (length - size) // step + 1
    # and its stride step times its own; the new dim walks dim's stride.
    x = ctx.value(n.args[0])
    shape = list(ctx.shape(x))
    size, step = n.args[2], n.args[3]
    if not isinstance(size, int) or not isinstance(step, int):
        raise Unsupported("unfold by a symbolic window or step")
    if not shape:  # a 0-d x: torch allows one window of its one element
        if size != 1:
            raise Unsupported(f"unfold of a 0-d tensor by {size}")
        return reshape(ctx, x, [1])
    dim = _norm_dim(n.args[1], len(shape))
    if len(shape) + 1 > _MAX_RANK:
        raise Unsupported(f"unfold to rank {len(shape) + 1}")
    src = _dense_strides(shape)
    dims, strides = list(shape), list(src)
    dims[dim] = (shape[dim] - size) // step + 1
    strides[dim] = src[dim] * step
    return strided_copy(ctx, x, dims + [size], strides + [src[dim]], 0, ctx.origin(n))


def _is_view_op(target):
    """Does the op's output alias its first argument (slice, view, permute...)?"""
    schema = getattr(target, "_schema", None)
    ret = schema.returns[0].alias_info if schema is not None and schema.returns else None
    return ret is not None and not ret.is_write


def _storage_root(node):
    """The node whose value owns the storage `node`'s value lives in: node
    itself, or the first non-view op up its chain of views."""
    while node.op == "call_function" and _is_view_op(node.target) and node.args:
        node = node.args[0]
    return node


def _owns_dense_storage(node):
    """Is node's value exactly its storage, row-major from element 0 (so an
    offset and strides into the storage are offsets and strides into its
    elements)? With symbolic sizes the example's fake strides need not
    hold at other sizes: eager lays out an op's result after its inputs'
    strides (atan2 of a strided input and a permuted one: row-major in the
    trace, not in eager at other sizes; fuzzer seed 8787, graph 793), so an
    op's result counts only when everything it is made from is row-major."""
    t = node.meta.get("val")
    if not isinstance(t, torch.Tensor):
        return False
    if not (t.is_contiguous() and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == t.numel() * t.element_size()):
        return False
    return not any(isinstance(d, torch.SymInt) for d in t.shape) or _row_major_at_every_size(node)


def _row_major_at_every_size(node, depth=0):
    """node's value is row-major at every size: an input given so, or an
    op's result whose layout sources all are (a layout-following op then
    gives row-major too). Views (a permute, an expand) are not."""
    t = node.meta.get("val")
    if not isinstance(t, torch.Tensor) or not t.is_contiguous():
        return False
    if node.op != "call_function":
        return True
    if depth > 64 or _is_view_op(node.target):
        return False
    return all(_row_major_at_every_size(a, depth + 1) for a in _layout_sources(node))


# Ops whose result eager makes row-major whatever their operands' layouts.
_FRESH_LAYOUT = {aten.mm.default, aten.bmm.default, aten.full.default, aten.zeros.default, aten.ones.default,
                 aten.arange.default, aten.arange.start, aten.arange.start_step, aten.scalar_tensor.default,
                 aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
                 aten._softmax.default, aten._log_softmax.default, aten.softmax.int, aten.log_softmax.int}
# Ops whose result is a clone of their first operand, written into: its layout.
_SELF_LAYOUT = {aten.index_put.default, aten.scatter.src, aten.scatter.value, aten.scatter.reduce,
                aten.scatter.value_reduce, aten.scatter_add.default, aten.scatter_reduce.two,
                aten.index_copy.default, aten.index_add.default, aten.index_fill.int_Scalar,
                aten.index_fill.int_Tensor, aten.select_scatter.default, aten.slice_scatter.default,
                aten.diagonal_scatter.default, aten.as_strided_scatter.default}


def _layout_sources(node):
    """The nodes whose memory layout in eager decides node's (an
    elementwise op follows its operands' strides; index_put, its first
    operand's; mm makes a fresh row-major result): every tensor operand
    unless the op is known to look at fewer."""
    if node.op != "call_function" or node.target in _FRESH_LAYOUT:
        return []
    if node.target in _SELF_LAYOUT or _is_view_op(node.target):
        return [node.args[0]] if isinstance(node.args[0], torch.fx.Node) else []
    return [a for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]


def _read_as_laid_out(ctx, root):
    """root's storage is read as eager lays it out: each input whose
    layout decides root's must come to every call as it came to the trace
    (ctx.layout_read; the module checks it): root itself, row-major from
    its storage's start; an input root is computed from, in its example's
    stride order and density (which decide eager's layout of the result,
    whatever the input's offset)."""
    seen, todo = set(), [root]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            if n.op == "placeholder":
                ctx.layout_read(n, storage=n is root)
            todo.extend(_layout_sources(n))


@register(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(ctx, n):
    # as_strided addresses its input's storage, not its elements: for
    # x[1:] it reads from x's first element. kiln values are dense, so the
    # size, strides and offset apply to the storage's owner (the first
    # non-view node up the chain) when eager holds that owner dense from its
    # first element, as a fresh result, a parameter or a contiguous input
    # is. Otherwise the answer depends on eager's own memory layout:
    # eager computes it, and everything it reads.
    root = _storage_root(n.args[0])
    if not _owns_dense_storage(root) or root.meta["val"].dtype != _val(n).dtype:
        raise Unsupported("as_strided of a tensor whose storage is laid out as eager holds it "
                          "(non-contiguous, offset or reinterpreted)", with_inputs=True)
    _read_as_laid_out(ctx, root)
    x = ctx.value(root)
    # Sizes, strides and offset may be SymInts (FX nodes) under symbolic sizes.
    size, stride = [symbolic.size(d) for d in n.args[1]], [symbolic.size(d) for d in n.args[2]]
    offset = _arg(n, 3, "storage_offset", None)
    if offset is None:  # as_strided keeps the input view's own offset by default
        offset = _val(n.args[0]).storage_offset()
    offset = symbolic.size(offset)
    if len(size) > _MAX_RANK:
        raise Unsupported(f"a rank-{len(size)} as_strided")
    return strided_copy(ctx, x, size, stride, offset, ctx.origin(n))


@register(aten.take.default, keep_whole=True)
def _take(ctx, n):
    # x.take(i) is x.flatten()[i]: a gather along the one axis of the
    # flattened x (negative indices count from the end, as in eager).
    x, idx = ctx.value(n.args[0]), ctx.value(n.args[1])
    if ctx.dtype(idx) not in _INDEX_DTYPES:
        raise Unsupported(f"take with a {ctx.dtype(idx)} index")
    flat = reshape(ctx, x, [math.prod(ctx.shape(x))], ctx.origin(n))
    return ctx.node("gather", [flat, idx], origin=ctx.origin(n), axis=0)


@register(aten.copy.default, aten.copy_.default)
def _copy(ctx, n):
    # copy_ (an inference graph's write-back of a mutated input, kept in the
    # graph by keep_inference_input_mutations) is the new value; the write
    # itself is the caller's (kiln.dynamo binds it to the input's memory).
    # The source is cast before it is broadcast: the cast touches the
    # smaller tensor.
    x, src = ctx.value(n.args[0]), ctx.value(n.args[1])
    return broadcast_to(ctx, cast(ctx, src, ctx.dtype(x)), ctx.shape(x), ctx.origin(n))


@register(aten.empty_strided.default, aten.new_empty_strided.default)
def _empty_strided(ctx, n):
    # Values are undefined; zeros are a deterministic choice (dense layout:
    # kiln values have no strides).
    return ctx.constant(torch.zeros(_shape(n), dtype=_val(n).dtype))


# ---- scatters through views --------------------------------------------------------


def _strided_scatter(ctx, n, x, src, dims, strides, offset):
    src = cast(ctx, src, ctx.dtype(x))
    if 0 in dims:
        return x
    src = reshape(ctx, src, dims)
    return ctx.node("strided_scatter", [x, src], origin=ctx.origin(n), rank=len(dims), dims=list(dims),
                    strides=list(strides), offset=offset)


@register(aten.select_scatter.default, keep_whole=True)
def _select_scatter(ctx, n):
    x, src = ctx.value(n.args[0]), ctx.value(n.args[1])
    shape = list(ctx.shape(x))
    dim = _norm_dim(n.args[2], len(shape))
    index = select_index(ctx, n.args[3], shape[dim])
    st = _dense_strides(shape)
    return _strided_scatter(ctx, n, x, src, shape[:dim] + shape[dim + 1:], st[:dim] + st[dim + 1:],
                            index * st[dim])


@register(aten.slice_scatter.default)
def _slice_scatter(ctx, n):
    x, src = ctx.value(n.args[0]), ctx.value(n.args[1])
    shape = list(ctx.shape(x))
    dim = _norm_dim(_arg(n, 2, "dim", 0), len(shape))
    start = _arg(n, 3, "start", None)
    step = _arg(n, 5, "step", 1)
    size = shape[dim]
    start = 0 if start is None else symbolic.size(start)
    if isinstance(start, symbolic.SymDim) or isinstance(size, symbolic.SymDim):
        # As _slice: torch has checked the bounds symbolically, start is in [0, size].
        if isinstance(start, int) and start < 0:
            start = start + size
    else:
        start = start + size if start < 0 else start
        start = min(max(start, 0), size)
    if not isinstance(step, int):
        raise Unsupported(f"slice_scatter by a symbolic step ({step})")
    st = _dense_strides(shape)
    strides = list(st)
    strides[dim] = st[dim] * step
    return _strided_scatter(ctx, n, x, src, list(ctx.shape(src)), strides, start * st[dim])


@register(aten.diagonal_scatter.default)
def _diagonal_scatter(ctx, n):
    x, src = ctx.value(n.args[0]), ctx.value(n.args[1])
    dims, strides, start = _diagonal_view(list(ctx.shape(x)), _arg(n, 2, "offset", 0),
                                          _arg(n, 3, "dim1", 0), _arg(n, 4, "dim2", 1))
    return _strided_scatter(ctx, n, x, src, dims, strides, start)


@register(aten.as_strided_scatter.default)
def _as_strided_scatter(ctx, n):
    # Eager writes src into a clone of x through x's storage: the clone
    # keeps x's strides, and the offset counts from the storage's start,
    # so x[2:]'s element 0 is offset 2. kiln's x is dense from element 0:
    # x must be row-major, its storage row-major from the start (as for
    # as_strided), and the offset is taken relative to x's own.
    view = _val(n.args[0])
    root = _storage_root(n.args[0])
    if (not view.is_contiguous() or not isinstance(view.storage_offset(), int)
            or not _owns_dense_storage(root) or root.meta["val"].dtype != view.dtype
            or (any(isinstance(d, torch.SymInt) for d in view.shape) and not _row_major_at_every_size(n.args[0]))):
        raise Unsupported("as_strided_scatter into a tensor whose storage is laid out as eager holds it "
                          "(non-contiguous or reinterpreted)", with_inputs=True)
    _read_as_laid_out(ctx, root)
    x, src = ctx.value(n.args[0]), ctx.value(n.args[1])
    size, stride = [symbolic.size(d) for d in n.args[2]], [symbolic.size(d) for d in n.args[3]]
    given = _arg(n, 4, "storage_offset", None)
    offset = symbolic.size(0 if given is None else given - view.storage_offset())
    if len(size) > _MAX_RANK:
        raise Unsupported(f"a rank-{len(size)} as_strided_scatter")
    return _strided_scatter(ctx, n, x, src, size, stride, offset)


# ---- scatter, scatter_reduce, index_put, embedding backward --------------------------

_SCATTER_REDUCE = {None: 0, "sum": 1, "add": 1, "prod": 2, "multiply": 2, "mean": 3, "amax": 4, "amin": 5}


def _scatter(ctx, n, x, dim, index, src, reduce, include_self=True):
    """torch.scatter and friends: a negative index is out of range, as eager."""
    dtype = ctx.dtype(x)
    if ctx.dtype(index) not in _INDEX_DTYPES:
        raise Unsupported(f"a {ctx.dtype(index)} scatter index")
    if reduce and dtype not in (torch.float32, torch.int64, torch.int32) and not (
            dtype == torch.bool and reduce != "mean"):
        raise Unsupported(f"scatter reduction {reduce!r} of a {dtype} tensor")
    out_shape = list(ctx.shape(x))
    if not out_shape:  # 0-d: as (1,)
        x, index, src = (reshape(ctx, v, [1]) for v in (x, index, src))
        dim = 0
    else:
        dim = _norm_dim(dim, len(out_shape))
    y = ctx.node("scatter", [x, index, cast(ctx, src, dtype)], origin=ctx.origin(n), axis=dim,
                 reduce=_SCATTER_REDUCE[reduce], include_self=int(bool(include_self)))
    return reshape(ctx, y, out_shape)


@register(aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce)
def _scatter_op(ctx, n):
    x, dim, index = ctx.value(n.args[0]), n.args[1], ctx.value(n.args[2])
    src = n.args[3]
    if isinstance(src, torch.fx.Node):
        src = ctx.value(src)
    else:  # a scalar: broadcast over index's shape
        src = broadcast_to(ctx, ctx.scalar(src, ctx.dtype(x)), ctx.shape(index), ctx.origin(n))
    reduce = _arg(n, 4, "reduce", None)
    return _scatter(ctx, n, x, dim, index, src, reduce)


@register(aten.scatter_add.default)
def _scatter_add(ctx, n):
    return _scatter(ctx, n, ctx.value(n.args[0]), n.args[1], ctx.value(n.args[2]),
                    ctx.value(n.args[3]), "sum")


@register(aten.scatter_reduce.two)
def _scatter_reduce(ctx, n):
    return _scatter(ctx, n, ctx.value(n.args[0]), n.args[1], ctx.value(n.args[2]),
                    ctx.value(n.args[3]), n.args[4], _arg(n, 5, "include_self", True))


def _linear_index(ctx, n, x_shape, axes, idxs):
    """One index into the indexed axes of x flattened together, from the
    index tensors (broadcast together): sum of idx_k * stride_k with each
    idx_k's negative values counted from the end. An index out of range in
    any axis makes the whole linear index -(L + 1), which GATHER and
    SCATTER report as out of range (their run-time error) instead of it
    aliasing a valid element. Returns (value, L)."""
    sizes = [x_shape[a] for a in axes]
    L = math.prod(sizes)
    if len(idxs) == 1:  # GATHER / SCATTER check the range themselves
        return cast(ctx, idxs[0], torch.int64), L
    i64 = torch.int64
    lin, bad = None, None
    stride = 1
    for size, idx in reversed(list(zip(sizes, idxs))):
        idx = cast(ctx, idx, i64)
        size_v = operand(ctx, size, i64)  # a symbolic size is computed per call
        neg = ctx.node("lt", [idx, ctx.scalar(0, i64)])
        idx = ctx.node("where", [neg, ctx.node("add", [idx, size_v]), idx])
        out = ctx.node("logical_or", [ctx.node("lt", [idx, ctx.scalar(0, i64)]),
                                      ctx.node("ge", [idx, size_v])])
        term = idx if isinstance(stride, int) and stride == 1 else ctx.node("mul", [idx, operand(ctx, stride, i64)])
        lin = term if lin is None else ctx.node("add", [lin, term])
        bad = out if bad is None else ctx.node("logical_or", [bad, out])
        stride *= size
    lin = ctx.node("where", [bad, operand(ctx, -(L + 1), i64), lin], origin=ctx.origin(n))
    return lin, L


def _index_plan(ctx, n, x, indices):
    """How x[indices] (a tuple with None for whole axes) becomes one GATHER /
    SCATTER axis: returns (x viewed with the indexed axes merged into one,
    that axis, the linear index, broadcast index shape B, permuted) where
    permuted says the indexed axes were moved to the front (they were not
    adjacent: torch then puts B first)."""
    shape = list(ctx.shape(x))
    axes = [i for i, t in enumerate(indices) if t is not None]
    idxs = [ctx.value(indices[a]) for a in axes]
    for v in idxs:
        if ctx.dtype(v) not in _INDEX_DTYPES:
            raise Unsupported(f"indexing with a {ctx.dtype(v)} index (a mask's result shape "
                              "depends on its values)")
    bshape = symbolic.broadcast_shapes(*(ctx.shape(v) for v in idxs))
    lin, L = _linear_index(ctx, n, shape, axes, idxs)
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    rest = [d for d in range(len(shape)) if d not in axes]
    if adjacent:
        axis = axes[0]
        merged = shape[:axis] + [L] + shape[axes[-1] + 1:]
        xv = reshape(ctx, x, merged)
    else:
        order = axes + rest
        src = _dense_strides(shape)
        xv = strided_copy(ctx, x, [shape[d] for d in order], [src[d] for d in order], 0, ctx.origin(n))
        axis = 0
        xv = reshape(ctx, xv, [L] + [shape[d] for d in rest])
    if len(ctx.shape(lin)) != len(bshape) or list(ctx.shape(lin)) != bshape:
        lin = broadcast_to(ctx, lin, bshape, ctx.origin(n))
    return xv, axis, lin, bshape, not adjacent, axes, rest


@register(aten.index.Tensor)
def _index_multi(ctx, n):
    indices = list(n.args[1])
    if sum(t is not None for t in indices) <= 1:
        return index_single(ctx, n)
    x = ctx.value(n.args[0])
    xv, axis, lin, bshape, _, _, _ = _index_plan(ctx, n, x, indices)
    y = ctx.node("gather", [xv, lin], origin=ctx.origin(n), axis=axis)
    return reshape(ctx, y, _shape(n))


@register(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(ctx, n):
    x = ctx.value(n.args[0])
    indices = list(n.args[1])
    values = ctx.value(n.args[2])
    accumulate = bool(_arg(n, 3, "accumulate", False))
    shape = list(ctx.shape(x))
    if not any(t is not None for t in indices):
        raise Unsupported("index_put without an index tensor")
    masks = [t for t in indices if t is not None and _val(t).dtype in (torch.bool, torch.uint8)]
    if masks:
        return _index_put_mask(ctx, n, x, indices, values, accumulate)
    if accumulate and ctx.dtype(x) not in (torch.float32, torch.int64, torch.int32, torch.bool):
        raise Unsupported(f"index_put accumulate of a {ctx.dtype(x)} tensor")
    if not shape:
        raise Unsupported("index_put into a 0-d tensor")
    xv, axis, lin, bshape, permuted, axes, rest = _index_plan(ctx, n, x, indices)
    vshape = list(ctx.shape(xv))
    nidx = math.prod(bshape)
    # The indexing result's shape: B in place of the indexed axes, or first.
    if permuted:
        res_shape = bshape + vshape[1:]
    else:
        res_shape = vshape[:axis] + bshape + vshape[axis + 1:]
    vals = broadcast_to(ctx, cast(ctx, values, ctx.dtype(x)), res_shape, ctx.origin(n))
    src_shape = vshape[:axis] + [nidx] + vshape[axis + 1:]
    vals = reshape(ctx, vals, src_shape)
    # SCATTER's index has src's shape: the linear index stretched over the other axes.
    lin = reshape(ctx, lin, [1] * axis + [nidx] + [1] * (len(vshape) - axis - 1))
    lin = broadcast_to(ctx, lin, src_shape, ctx.origin(n))
    y = ctx.node("scatter", [xv, lin, vals], origin=ctx.origin(n), axis=axis, reduce=1 if accumulate else 0,
                 include_self=1, wrap_negative=1)
    if not permuted:
        return reshape(ctx, y, shape)
    order = axes + rest
    pshape = [shape[d] for d in order]
    y = reshape(ctx, y, pshape)
    inverse = [order.index(d) for d in range(len(shape))]
    src = _dense_strides(pshape)
    return strided_copy(ctx, y, shape, [src[i] for i in inverse], 0, ctx.origin(n))


def _index_put_mask(ctx, n, x, indices, values, accumulate):
    """x[mask] = values (or +=) with one boolean mask: the number of selected
    elements depends on the mask's values, but the result's shape does not,
    so when values do not depend on that count (their dim for it is absent
    or 1) this is a WHERE over the mask: y = where(mask, values, x), or
    x + where(mask, values, 0) when accumulating."""
    axes = [i for i, t in enumerate(indices) if t is not None]
    if len(axes) != 1:
        raise Unsupported("index_put with a boolean mask and other index tensors")
    p = axes[0]
    mask = cast(ctx, ctx.value(indices[p]), torch.bool)
    shape = list(ctx.shape(x))
    m = len(ctx.shape(mask))
    if list(ctx.shape(mask)) != shape[p:p + m]:
        raise Unsupported("a boolean mask whose shape differs from the dims it indexes")
    post = shape[p + m:]
    dtype = ctx.dtype(x)
    v = cast(ctx, values, dtype)
    vshape = list(ctx.shape(v))
    if len(vshape) > len(post):  # v has the selected-count dim: it must be 1
        k = len(vshape) - len(post) - 1
        if vshape[k] != 1:
            raise Unsupported("index_put values that depend on how many elements a mask selects")
        v = reshape(ctx, v, vshape[:k] + [1] * m + vshape[k + 1:])
    mask = reshape(ctx, mask, list(ctx.shape(mask)) + [1] * len(post))
    o = ctx.origin(n)
    if not accumulate:
        y = ctx.node("where", [mask, v, x], origin=o)
    else:
        if dtype not in (torch.float32, torch.int64, torch.int32, torch.bool):
            raise Unsupported(f"index_put accumulate of a {dtype} tensor")
        zero = ctx.scalar(False if dtype == torch.bool else 0, dtype)
        add = ctx.node("where", [mask, v, zero], origin=o)
        y = ctx.node("logical_or" if dtype == torch.bool else "add", [x, add], origin=o)
    if list(ctx.shape(y)) != shape:
        raise Unsupported("index_put values larger than the indexed tensor")
    return y


@register(aten.embedding_dense_backward.default, keep_whole=True)
def _embedding_dense_backward(ctx, n):
    grad, indices, num_weights, padding_idx, scale_by_freq = n.args[:5]
    if scale_by_freq:
        raise Unsupported("embedding backward with scale_grad_by_freq")
    g = ctx.value(grad)
    idx = cast(ctx, ctx.value(indices), torch.int64)
    dtype = ctx.dtype(g)
    count = math.prod(ctx.shape(idx))
    dim = ctx.shape(g)[-1] if len(ctx.shape(g)) > len(ctx.shape(idx)) else 1
    g = reshape(ctx, g, [count, dim])
    idx = reshape(ctx, idx, [count, 1])
    if padding_idx is not None and padding_idx >= 0:  # that row gets no gradient
        keep = ctx.node("ne", [idx, ctx.scalar(int(padding_idx), torch.int64)])
        g = ctx.node("where", [keep, g, ctx.scalar(0.0 if dtype.is_floating_point else 0, dtype)])
    # Zeros made at run time (a stride-0 view of one zero), not a
    # num_weights x dim constant in the graph.
    zeros = broadcast_to(ctx, ctx.scalar(0.0 if dtype.is_floating_point else 0, dtype),
                          [num_weights, dim], ctx.origin(n))
    y = ctx.node("scatter", [zeros, broadcast_to(ctx, idx, [count, dim], ctx.origin(n)), g],
                 origin=ctx.origin(n), axis=0, reduce=1, include_self=1, wrap_negative=1)
    return reshape(ctx, y, _shape(n))


# ---- scans and products ---------------------------------------------------------------

_SCAN_DTYPES = (torch.float32, torch.int64, torch.int32)


def _scan(ctx, n, x, dim, op, out_dtype):
    if out_dtype not in _SCAN_DTYPES:
        raise Unsupported(f"a scan giving {out_dtype}")
    x = cast(ctx, x, out_dtype)
    shape = list(ctx.shape(x))
    if not shape:
        return reshape(ctx, ctx.node("scan", [reshape(ctx, x, [1])], origin=ctx.origin(n), axis=0, kind=op), [])
    return ctx.node("scan", [x], origin=ctx.origin(n), axis=_norm_dim(dim, len(shape)), kind=op)


@register(aten.cumsum.default, aten.cumprod.default)
def _cumsum(ctx, n):
    op = 0 if n.target == aten.cumsum.default else 1
    return _scan(ctx, n, ctx.value(n.args[0]), n.args[1], op, _val(n).dtype)


def _last_along(ctx, n, y, dim, keepdim):
    """The last slice of y along dim (a product's total after a SCAN)."""
    shape = list(ctx.shape(y))
    src = _dense_strides(shape)
    if keepdim:
        out = shape[:dim] + [1] + shape[dim + 1:]
        strides = src
    else:
        out, strides = shape[:dim] + shape[dim + 1:], src[:dim] + src[dim + 1:]
    return strided_copy(ctx, y, out, strides, (shape[dim] - 1) * src[dim], ctx.origin(n))


@register(aten.prod.default, aten.prod.dim_int)
def _prod(ctx, n):
    x = ctx.value(n.args[0])
    out_dtype = _val(n).dtype
    out_shape = _shape(n)
    if n.target == aten.prod.default:
        numel = math.prod(ctx.shape(x))
        x = reshape(ctx, x, [numel])
        dim, keep = 0, False
    else:
        dim = n.args[1]
        keep = bool(_arg(n, 2, "keepdim", False))
    shape = list(ctx.shape(x))
    if not shape:
        return cast(ctx, x, out_dtype)
    dim = _norm_dim(dim, len(shape))
    if shape[dim] == 0:  # the empty product
        return ctx.constant(torch.ones(out_shape, dtype=out_dtype))
    # A bool product (all) as an int64 product of 0s and 1s: exact. torch
    # converts to the requested dtype first (a float is true when non-zero).
    if out_dtype == torch.bool:
        x = cast(ctx, x, torch.bool)
    y = _scan(ctx, n, x, dim, 1, torch.int64 if out_dtype == torch.bool else out_dtype)
    return cast(ctx, reshape(ctx, _last_along(ctx, n, y, dim, keep), out_shape), out_dtype)


# ---- variance ---------------------------------------------------------------------------


def _variance(ctx, n, x, dims, correction, keepdim):
    """The corrected two-pass algorithm (Chan, Golub and LeVeque): d = x -
    mean, var = (sum(d^2) - sum(d)^2 / N) / (N - correction). A float32 mean
    of values with a large common offset carries a rounding error e, and
    sum(d^2) alone would be off by N e^2; the sum(d) term removes it, so the
    result is as accurate as eager's (which accumulates in double)."""
    if ctx.dtype(x) != torch.float32:
        raise Unsupported(f"variance of a {ctx.dtype(x)} tensor")
    shape = list(ctx.shape(x))
    rank = len(shape)
    mask = _axes_mask(dims, rank)
    count = math.prod(shape[d] for d in range(rank) if mask >> d & 1)
    o = ctx.origin(n)
    keep = 1  # the callers reshape to torch's keepdim shape
    f32 = torch.float32
    mean = ctx.node("mean", [x], origin=o, axes=mask, keepdim=1)
    d = ctx.node("sub", [x, mean], origin=o)
    s2 = ctx.node("sum", [ctx.node("mul", [d, d], origin=o)], origin=o, axes=mask, keepdim=keep)
    s1 = ctx.node("sum", [d], origin=o, axes=mask, keepdim=keep)
    # N, and the divisor max(N - correction, 0): a number, or under symbolic
    # sizes a 0-d tensor computed per call from the symbolic count.
    if isinstance(count, symbolic.SymDim):
        n_t = sym_scalar(ctx, count, f32)
        if isinstance(correction, int) and not isinstance(correction, bool):
            div_t = sym_scalar(ctx, symbolic.minmax("max", count - correction, 0), f32)
        else:  # a float correction: max(N - c, 0) in float32, as torch's
            div_t = ctx.node("maximum", [ctx.node("sub", [n_t, ctx.scalar(float(correction), f32)], origin=o),
                                         ctx.scalar(0.0, f32)], origin=o)
    else:
        n_t = ctx.scalar(float(count), f32)
        div_t = ctx.scalar(float(max(count - correction, 0)), f32)
    fix = ctx.node("div", [ctx.node("mul", [s1, s1], origin=o), n_t], origin=o)
    s = ctx.node("sub", [s2, fix], origin=o)
    var = ctx.node("div", [s, div_t], origin=o)
    # The mean, corrected by the same term (var_mean returns it).
    mean = ctx.node("add", [mean, ctx.node("div", [s1, n_t])], origin=o)
    return var, mean


def _var_args(n):
    if n.target in (aten.var.correction, aten.var_mean.correction):
        dims = _arg(n, 1, "dim", None)
        correction = n.kwargs.get("correction", 1)
        correction = 1 if correction is None else correction
    else:  # var.dim: unbiased flag
        dims = _arg(n, 1, "dim", None)
        correction = 1 if _arg(n, 2, "unbiased", True) else 0
    keepdim = bool(n.kwargs.get("keepdim", n.args[3] if len(n.args) > 3 else False))
    return dims, correction, keepdim


@register(aten.var.correction, aten.var.dim)
def _var(ctx, n):
    dims, correction, keepdim = _var_args(n)
    var, _ = _variance(ctx, n, ctx.value(n.args[0]), dims, correction, keepdim)
    return reshape(ctx, var, _shape(n))


@register(aten.var_mean.correction)
def _var_mean(ctx, n):
    dims, correction, keepdim = _var_args(n)
    var, mean = _variance(ctx, n, ctx.value(n.args[0]), dims, correction, keepdim)
    out_shape = symbolic.shape(_val(n)[1])
    return reshape(ctx, var, out_shape), reshape(ctx, mean, out_shape)


# ---- sort and topk ------------------------------------------------------------------------

_SORT_DTYPES = (torch.float32, torch.int64, torch.int32, torch.bool)


def _sorted(ctx, n, x, dim, descending, k=None):
    if ctx.dtype(x) not in _SORT_DTYPES:
        raise Unsupported(f"sorting a {ctx.dtype(x)} tensor")
    shape = list(ctx.shape(x))
    if not shape:  # a 0-d tensor sorts to itself, index 0
        return x, ctx.scalar(0, torch.int64)
    dim = _norm_dim(dim, len(shape))
    k = shape[dim] if k is None else k
    idx = ctx.node("argsort", [x], origin=ctx.origin(n), axis=dim, descending=int(bool(descending)), k=k)
    values = ctx.node("gather_elements", [x, idx], origin=ctx.origin(n), axis=dim)
    return values, idx


@register(aten.sort.default)
def _sort(ctx, n):
    return _sorted(ctx, n, ctx.value(n.args[0]), _arg(n, 1, "dim", -1), _arg(n, 2, "descending", False))


@register(aten.sort.stable)
def _sort_stable(ctx, n):
    # kiln's sort is always stable, which is also a valid unstable sort.
    return _sorted(ctx, n, ctx.value(n.args[0]), n.kwargs.get("dim", -1),
                   n.kwargs.get("descending", False))


@register(aten.topk.default)
def _topk(ctx, n):
    x = ctx.value(n.args[0])
    k = symbolic.size(n.args[1])  # a SymInt's node under symbolic sizes: a kiln size
    return _sorted(ctx, n, x, _arg(n, 2, "dim", -1), _arg(n, 3, "largest", True), k)
