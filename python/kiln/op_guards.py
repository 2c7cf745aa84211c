"""Conditions an exported program holds only under, which torch.export
checks at the example alone: as_strided's extent (its meta function reads
the storage, which fake tensors size at the example; gather's index sizes
and a convolution's window, by contrast, are among torch's guards). Where
the program's sizes are symbolic a dim may shrink past the extent: eager
fails there, and kiln's shape rule refused its probe, so the whole graph ran
in eager (fuzzer seed 20104, graph 5914). As guards of the graph
(symbolic.add_guards) they move the probes where the program is valid,
every call in range runs in kiln, and one out of range is refused by the
guard's message, as eager would refuse it.

Each is a sympy relation over the sizes' symbols, added only where it reads
a symbol; one that holds for an empty operand (eager checks nothing there)
says so with an Or."""

import sympy
import torch

from kiln.optable.core import _arg, _val, aten
from kiln.optable.movement import _storage_root

_AS_STRIDED = (aten.as_strided.default, aten.as_strided_copy.default, aten.as_strided_scatter.default)


def of_program(gm):
    """Every such condition of gm's nodes, in graph order."""
    out = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target not in _AS_STRIDED:
            continue
        try:
            conds = _as_strided_extent(n)
        except (TypeError, AttributeError, KeyError):
            continue  # an argument neither an int nor a SymInt: the shape rule decides
        out += [c for c in conds if c is not sympy.true and c.free_symbols]
    return out


def _expr(d):
    return d.node.expr if isinstance(d, torch.SymInt) else sympy.Integer(d)


def _shape(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(v, torch.Tensor):
        raise KeyError(node)
    return [_expr(d) for d in v.shape]


def _empty_or(cond, sizes):
    """cond, or any of sizes 0 (an empty operand reads nothing)."""
    return sympy.Or(cond, *[sympy.Eq(d, 0) for d in sizes if d.free_symbols])


def _as_strided_extent(n):
    # The view's last element lies inside the tensor kiln's strided rule
    # addresses: the storage's owner for as_strided, the view written into
    # for the scatter (whose offset counts from that view's own).
    scatter = n.target is aten.as_strided_scatter.default
    base = n.args[0] if scatter else _storage_root(n.args[0])
    sizes, strides = n.args[2:4] if scatter else n.args[1:3]
    offset = _arg(n, 4 if scatter else 3, "storage_offset", None)
    if offset is None:
        offset = 0 if scatter else _val(n.args[0]).storage_offset()
    elif scatter:
        offset = offset - _val(n.args[0]).storage_offset()
    sizes, strides = [_expr(d) for d in sizes], [_expr(d) for d in strides]
    if any(d == 0 for d in sizes):
        return []
    last = _expr(offset) + sum(((d - 1) * s for d, s in zip(sizes, strides)), sympy.Integer(0))
    return [_empty_or(sympy.Lt(last, sympy.Mul(*_shape(base))), sizes)]
