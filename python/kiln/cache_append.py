"""A DynamicCache's append without re-copying the past (issue 17).

transformers' DynamicCache grows each layer's keys and values by
``torch.cat([past, new], dim=-2)`` every step: a graph output that copies
the whole past, as eager does. kiln instead keeps each cache tensor in a
buffer with room to grow (its capacity, along the cat's dim) and hands out a
narrow view of it (the first ``length`` rows). The compiled graph takes the
whole buffer as a dense input, writes the new rows after the old ones
(STRIDED_SCATTER into the input's own memory, as a StaticCache's in-place
write: nothing else is copied) and reads the view (attention folds it into
its strides). The cat's result returned to the caller is that view.

Aliasing rule: a buffer records the length of the latest view kiln handed
out and its version counter then (a Buffer, which the view carries as
``_kiln_buffer``). A past is appended to in
place only when it is exactly that view (the buffer's base pointer and
strides, that length, the version unchanged: nobody wrote it through torch)
and the new length fits. Anything else (a cache kept and generated from
twice, beam search's reorder, a crop, a tensor kiln did not make) is copied
into a new buffer first, which is what eager's cat does every step. So two
continuations of one past never write the same rows.

All buffers of one graph share one capacity (one symbol of the kiln
graph): they grow together, by doubling, so a reallocation (one copy) is
rare and Dynamo sees one stride for every cache tensor.
"""

from types import SimpleNamespace

import sympy
import torch
from torch._dynamo.utils import counters

from kiln import symbolic
from kiln.errors import KilnError
from kiln.optable import DTYPES
from kiln.optable.core import _dense_strides, strided_copy
from kiln.optable.movement import _strided_scatter

MIN_CAPACITY = 16


def capacity_for(rows):
    """The capacity of a new buffer that must hold `rows`: the next power of
    two above it (strictly: a view never fills its buffer, so its strides
    never look contiguous to Dynamo's guards)."""
    c = MIN_CAPACITY
    while c <= rows:
        c *= 2
    return c


class Append:
    """One graph output cat([past, new], dim=2) of 4-d tensors (a cache's
    keys or values): past a graph input read by nothing else (pos: its
    placeholder index) or a legacy empty constant (pos None: a new cache)."""

    def __init__(self, index, cat, past, pos, new, dim, shape):
        self.index, self.cat, self.past, self.pos, self.new, self.dim = index, cat, past, pos, new, dim
        self.shape = shape  # [(placeholder index, dim) or int, or (pos, dim, plus)] for each dim of the result
        self.length = shape[dim]  # the result's length along dim: the rows after this call
        self.sized = False  # whether the past's length is a model input (a symbolic size)
        self.scatter = None  # the kiln value written into the buffer


def _is_empty_constant(node):
    aten = torch.ops.aten
    if node.op == "call_function" and node.target is aten.lift_fresh_copy.default:
        node = node.args[0]
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return node.op == "get_attr" and isinstance(v, torch.Tensor) and tuple(v.shape) == (0,)


def _size_getter(expr, sources):
    """(pos, dim, plus) giving a size at run time from a placeholder's dim
    (dim None: a SymInt argument), or an int; None when kiln cannot say."""
    if isinstance(expr, int) or getattr(expr, "is_Integer", False):
        return int(expr)
    plus = 0
    if isinstance(expr, sympy.Add) and len(expr.args) == 2:
        consts = [a for a in expr.args if a.is_Integer]
        if len(consts) == 1:
            plus = int(consts[0])
            expr = next(a for a in expr.args if not a.is_Integer)
    if isinstance(expr, sympy.Symbol) and expr in sources:
        pos, dim = sources[expr]
        return (pos, dim, plus)
    return None


def _sources(phs, example_inputs):
    """sympy symbol -> (placeholder index, dim or None) where the call's
    arguments give it bare."""
    out = {}
    for i, (n, ex) in enumerate(zip(phs, example_inputs)):
        if isinstance(ex, torch.SymInt) and isinstance(ex.node.expr, sympy.Symbol):
            out.setdefault(ex.node.expr, (i, None))
        elif isinstance(ex, torch.Tensor):
            for d, s in enumerate(ex.shape):
                if isinstance(s, torch.SymInt) and isinstance(s.node.expr, sympy.Symbol):
                    out.setdefault(s.node.expr, (i, d))
    return out


def find(gm, example_inputs, placeholders, flat):
    """The graph's appends kiln can do in place (a list of Append)."""
    aten = torch.ops.aten
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    pos = {n: i for i, n in enumerate(phs)}
    sources = _sources(phs, example_inputs)
    found, seen = [], set()
    for o in flat:
        if not isinstance(o, torch.fx.Node) or o in seen or o.op != "call_function" or o.target is not aten.cat.default:
            continue
        seen.add(o)
        parts = o.args[0]
        val = o.meta.get("val")
        # A cache's shape only: (batch, heads, length, head dim) grown along
        # the length, as transformers' caches grow. The result handed out is
        # a narrow view of a buffer (not dense: its .view(-1) raises where
        # eager's dense cat's works), so any other cat of an input that is
        # returned stays a copy, as eager's (fuzzer seed 8989, graph 1991).
        if len(parts) != 2 or not isinstance(val, torch.Tensor) or val.dim() != 4 or val.dtype not in (
                torch.float32, torch.float16, torch.bfloat16):
            continue
        dim = (o.args[1] if len(o.args) > 1 else o.kwargs.get("dim", 0)) % val.dim()
        if dim != 2:
            continue
        past, new = parts
        # cat([x, x]) is no append: the past is lowered as its length alone,
        # so the new rows cannot be the past itself (fuzzer finding 20).
        if not isinstance(past, torch.fx.Node) or not isinstance(new, torch.fx.Node) or new is past:
            continue
        nv = new.meta.get("val")
        if not isinstance(nv, torch.Tensor) or nv.dtype != val.dtype or nv.dim() != val.dim():
            continue
        if past in pos:
            i = pos[past]
            pv = example_inputs[i]
            if placeholders[i][0] != "input" or len(past.users) != 1 or not isinstance(pv, torch.Tensor) \
                    or pv.dtype != val.dtype or pv.dim() != val.dim():
                continue
            p = i
        elif _is_empty_constant(past):
            p = None
        else:
            continue
        shape = [_size_getter(s.node.expr if isinstance(s, torch.SymInt) else s, sources) for s in val.shape]
        if any(s is None for s in shape):
            continue
        found.append(Append(len(found), o, past if p is not None else None, p, new, dim, shape))
    return found


class Lowering:
    """The kiln side of a graph's appends: its placeholder and cat lowerings
    (kiln.capture.lower_graph's "custom" placeholders and overrides) and the
    scatter outputs. One capacity symbol for all buffers."""

    def __init__(self, appends):
        self.appends = appends
        # A capacity always exceeds the rows a call appends up to: where that
        # is a number (a graph Dynamo specialized to one length), the
        # symbol's range says so, so that the scatter's bounds hold at the
        # sizes kiln checks shape rules at (kiln_shape_infer_sym.c's probes).
        self.lo = 1
        for a in appends:
            if isinstance(a.shape[a.dim], int):
                self.lo = max(self.lo, a.shape[a.dim] + 1)

    def _capacity(self, ctx):
        c = getattr(ctx, "_kiln_capacity", None)
        if c is None:
            c = symbolic.wrap(ctx.graph, ctx.graph.sym("cache capacity", self.lo, symbolic.RANGE_MAX, -1))
            ctx._kiln_capacity = c
        return c

    def past(self, a):
        def lower(ctx, n):
            # The past's length, bound per call from a size input; its rows
            # are read through the buffer.
            rows = ctx.size_input(f"{n.name}.rows", n.meta["val"].shape[a.dim])
            a.sized = isinstance(rows, symbolic.SymDim)
            return rows
        return lower

    def cat(self, a):
        def lower(ctx):
            new = ctx.value(a.new)
            shape = list(ctx.shape(new))
            rows = ctx.env[a.past] if a.past is not None else 0
            bshape = shape[:a.dim] + [self._capacity(ctx)] + shape[a.dim + 1:]
            buf = ctx.input(f"{a.cat.name}.buffer", SimpleNamespace(dtype=a.cat.meta["val"].dtype, shape=bshape))
            ctx._kiln_buffers = getattr(ctx, "_kiln_buffers", []) + [a.index]  # the model's input order
            st = _dense_strides(bshape)
            a.scatter = _strided_scatter(ctx, a.cat, buf, new, shape, st, rows * st[a.dim])
            view = list(shape)
            view[a.dim] = rows + shape[a.dim]
            return strided_copy(ctx, a.scatter, view, st, 0, ctx.origin(a.cat))
        return lower

    def output(self, a):
        return lambda ctx: a.scatter


def _size(spec, args):
    if isinstance(spec, int):
        return spec
    pos, dim, plus = spec
    a = args[pos]
    return (int(a) if dim is None else a.shape[dim]) + plus


class Buffer:
    """A buffer kiln appends into, and what it last handed out of it: the
    latest view's length (rows) and the buffer's version counter then. What
    never changes is kept, so that a call reads from torch only what can:
    the descriptor kiln's C call takes (data pointer, dtype id, shape), the
    pointer and strides every view of it has."""

    __slots__ = ("tensor", "dim", "cap", "desc", "ptr", "strides", "view_shape", "rows", "version")

    def __init__(self, tensor, dim):
        self.tensor, self.dim, self.cap = tensor, dim, tensor.shape[dim]
        self.ptr, self.strides = tensor.data_ptr(), tensor.stride()
        self.desc = (self.ptr, DTYPES[tensor.dtype], tuple(tensor.shape))
        self.view_shape = list(tensor.shape)  # the latest view's, once commit set its length
        self.rows = self.version = -1  # no view handed out yet


def latest_buffer(past, dim):
    """The Buffer past is the latest view of (kiln may append after it in
    place), or None. The view kiln handed out carries its Buffer
    (_kiln_buffer); a tensor derived from it (a crop, a reorder) does not.
    A view's metadata changed in place (t_, as_strided_, resize_, set_)
    moves the version counter it shares with the buffer; `.data =` moves
    its pointer or strides."""
    b = past.__dict__.get("_kiln_buffer")
    if b is None or past.shape[dim] != b.rows or b.tensor._version != b.version \
            or past.data_ptr() != b.ptr or past.stride() != b.strides:
        return None
    return b


def _new_buffer(a, args, shape, cap):
    """A Buffer of capacity cap holding the past's rows (copied)."""
    bshape = list(shape)
    bshape[a.dim] = cap
    buf = torch.empty(bshape, dtype=a.cat.meta["val"].dtype)
    if a.pos is not None:
        past = args[a.pos]
        if [d for i, d in enumerate(past.shape) if i != a.dim] != [d for i, d in enumerate(shape) if i != a.dim]:
            raise KilnError(f"the cache input of {a.cat.name} is {tuple(past.shape)}: it must match "
                            f"{tuple(shape)} in every dim but {a.dim}")
        if past.shape[a.dim]:
            buf.narrow(a.dim, 0, past.shape[a.dim]).copy_(past)
    return Buffer(buf, a.dim)


def buffers(appends, args):
    """For one call: [(Buffer, past rows, new length)] per append, the
    buffers all of one capacity; a past that is not its buffer's latest view,
    or that does not fit, is copied into a new buffer."""
    lengths = [_size(a.length, args) for a in appends]
    need = max(lengths)
    latest = [latest_buffer(args[a.pos], a.dim) if a.pos is not None else None for a in appends]
    caps = {b.cap for b in latest if b is not None}
    cap = next(iter(caps)) if len(caps) == 1 and need < next(iter(caps)) else capacity_for(need)
    out, used, in_place, copied = [], set(), 0, 0
    for a, n, b in zip(appends, lengths, latest):
        if b is not None and b.cap == cap and b not in used:
            rows = b.rows
            in_place += 1
        else:
            rows = args[a.pos].shape[a.dim] if a.pos is not None else 0
            b = _new_buffer(a, args, [_size(s, args) for s in a.shape], cap)
            copied += a.pos is not None
        used.add(b)
        out.append((b, rows, n))
    # What each append to a past did, counted beside kiln's other counters
    # (torch._dynamo.utils.counters["kiln_cache"]): "in_place" after the
    # past's rows in its buffer, or "copied" into a new buffer (a
    # reallocation, or a past that was not its buffer's latest view).
    done = counters["kiln_cache"]
    done["in_place"] += in_place
    done["copied"] += copied
    return out


def commit(b, length):
    """The view of the Buffer's first `length` rows, recorded as its latest.
    as_strided, not narrow: the same view (a view of the buffer, sharing its
    version counter) at half narrow's cost, which is per cache tensor per
    token."""
    b.view_shape[b.dim] = length
    view = b.tensor.as_strided(b.view_shape, b.strides)
    b.rows, b.version = length, b.tensor._version
    view._kiln_buffer = b
    view._dynamo_propagated_dynamic_indices = {b.dim}
    return view
