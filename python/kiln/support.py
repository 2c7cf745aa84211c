"""Which nodes of an FX graph kiln runs: the one answer kiln.analyze reports
and CPU fallback partitions by.

per_node_support lowers the graph node by node (as kiln.trace would),
standing in a fresh kiln input for each node kiln will not run so that what
reads it is still checked, and gives each node's reason or None;
KilnSupport is the same decision as torch's partitioner asks it, with the
nodes a handler refused.
"""

import torch
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.fx.passes.operator_support import OperatorSupportBase

from kiln import symbolic
from kiln.capture import LoweringContext, graph_attribute, source_location
from kiln.errors import KilnError, Unsupported, UnsupportedOpError, lowering_failure
from kiln.guards import of_values as guards_of_values
from kiln.optable import DTYPES, TABLE


class KilnSupport(OperatorSupportBase):
    """Ops kiln lowers. `refused` holds nodes whose handler declined this
    particular use (an op kiln has, with arguments it lacks)."""

    def __init__(self, refused=()):
        super().__init__()
        self.refused = set(refused)

    def is_node_supported(self, submodules, node):
        if node.op != "call_function" or node.target not in TABLE or node in self.refused:
            return False
        if node.target is torch.ops.aten.copy_.default:
            return False  # a write into an input: the glue does it, in place
        val = node.meta.get("val")
        vals = list(val) if isinstance(val, (tuple, list)) else [val]
        # Data-dependent shapes and dtypes kiln lacks stay in eager: of the outputs,
        # and of the inputs too (a sum of masked_select's data-dependent
        # result has a static shape, but a kiln piece cannot take its input).
        for a in node.all_input_nodes:
            v = a.meta.get("val")
            vals += list(v) if isinstance(v, (tuple, list)) else [v]
        if not isinstance(val, (torch.Tensor, tuple, list)):
            return False  # size arithmetic runs in the glue; pieces read sizes as symbols
        for v in vals:
            if isinstance(v, torch.Tensor):
                if v.dtype not in DTYPES or free_unbacked_symbols(v.shape):
                    return False
        return True


def _stand_in(ctx, n):
    """A fresh kiln input in place of an op kiln will not run: with fallback
    its result comes from eager PyTorch, so what reads it is still checked."""
    val = n.meta.get("val")
    try:
        if isinstance(val, torch.Tensor):
            return ctx.input(n.name, val)
        if isinstance(val, (tuple, list)):
            return tuple(ctx.input(f"{n.name}_{i}", v) if isinstance(v, torch.Tensor) else v
                         for i, v in enumerate(val))
    except KilnError as e:
        return ctx.unsupported_value(n, str(e))
    return ctx.unsupported_value(n, "a non-tensor result of an unsupported op")


def _data_dependent(n):
    """True when n reads or makes a tensor whose shape depends on the data
    (an unbacked symbol, after nonzero or masked_select): handlers read
    static sizes and would trip torch's guard on such a dim."""
    vals = [n.meta.get("val")] + [a.meta.get("val") for a in n.all_input_nodes]
    for v in vals:
        for t in (v if isinstance(v, (tuple, list)) else [v]):
            # Backed symbols (dynamic shapes) are sizes kiln holds; unbacked
            # ones (u0: a count nonzero found) are not.
            if isinstance(t, torch.Tensor) and free_unbacked_symbols(t.shape):
                return True
    return False


def per_node_support(gm, aliases=None):
    """{node: reason or None} by lowering the graph node by node. aliases:
    a dict that gets the symbols the lowering took as others (for the
    pieces' own lowerings, symbolic.lowering)."""
    return symbolic.lowering(LoweringContext, lambda ctx: _per_node_support(ctx, gm), aliases=aliases)


def _per_node_support(ctx, gm):
    status = {}
    fitted = False
    for n in gm.graph.nodes:
        if n.op != "placeholder" and not fitted:
            # The probes where the program's guards hold, as lower_graph fits
            # them (a reshape(-1, 3) checks its element count there).
            fitted = True
            vals = [p.meta.get("val") for p in gm.graph.nodes if p.op == "placeholder"]
            symbolic.add_guards(ctx, guards_of_values(vals), strict=False)
            ctx.graph.sym_fit_probes()
        if n.op == "placeholder":
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor):
                try:
                    ctx.env[n] = ctx.input(n.name, val)
                except KilnError as e:
                    ctx.env[n] = ctx.unsupported_value(n, str(e))
            elif isinstance(val, torch.SymInt):
                try:
                    ctx.env[n] = symbolic.size(val)
                except Unsupported as e:
                    ctx.env[n] = ctx.unsupported_value(n, str(e))
            else:
                ctx.env[n] = val
        elif n.op == "get_attr":
            ctx.env[n] = graph_attribute(ctx, gm, n)
        elif n.op == "call_function":
            if n.target not in TABLE:
                status[n] = "no kiln lowering for this op"
                ctx.env[n] = _stand_in(ctx, n)
                continue
            if _data_dependent(n):
                status[n] = "a data-dependent shape (kiln compiles static shapes)"
                ctx.env[n] = _stand_in(ctx, n)
                continue
            try:
                ctx.env[n] = TABLE[n.target](ctx, n)
                symbolic.check_at_example(ctx, n, ctx.env[n])
                status[n] = None
            except symbolic.Unify:
                raise  # not a failure: the lowering starts over with two symbols as one
            except Exception as e:
                if not isinstance(e, (Unsupported, UnsupportedOpError, KilnError)):
                    e = lowering_failure(str(n.target), source_location(n), e)
                reason = getattr(e, "reason", None) or str(e)
                status[n] = reason
                ctx.env[n] = _stand_in(ctx, n)
                if getattr(e, "with_inputs", False):
                    for a in _ancestors(n):
                        if a.op == "call_function":
                            status[a] = f"feeds {n.target}, which needs eager's own memory layout of it"
    return status


def _ancestors(n):
    seen, todo = set(), list(n.all_input_nodes)
    while todo:
        a = todo.pop()
        if a not in seen:
            seen.add(a)
            todo.extend(a.all_input_nodes)
    return seen


def refused_nodes(gm):
    """Nodes kiln's op table would refuse, found by lowering node by node."""
    return {n for n, why in per_node_support(gm).items() if why}


def unsupported_ops(gm, refused=None):
    support = KilnSupport(refused_nodes(gm) if refused is None else refused)
    # Size arithmetic (a SymInt result) is the glue's by design, not a fallback.
    return sorted({str(n.target) for n in gm.graph.nodes
                   if n.op == "call_function" and not support.is_node_supported({}, n)
                   and not isinstance(n.meta.get("val"), (torch.SymInt, int, float, bool))})
