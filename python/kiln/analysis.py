"""kiln.analyze: which ops of a model kiln supports, and why not.

Captures the model as kiln.trace does, then looks at every ATen op: is it in
kiln's op table, and does its lowering accept this particular use (a handler
may refuse a parameter, such as a rounding mode). Reports counts, the
supported share, each unsupported op with its reason and source line, and
the number of kiln pieces CPU fallback would run.
"""

import collections

import torch

from kiln.capture import LoweringContext, describe_node, export_program, graph_attribute, source_location
from kiln.errors import KilnError, UnsupportedOpError
from kiln import symbolic
from kiln.optable import TABLE, Unsupported


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
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    vals = [n.meta.get("val")] + [a.meta.get("val") for a in n.all_input_nodes]
    for v in vals:
        for t in (v if isinstance(v, (tuple, list)) else [v]):
            # Backed symbols (dynamic shapes) are sizes kiln holds; unbacked
            # ones (u0: a count nonzero found) are not.
            if isinstance(t, torch.Tensor) and free_unbacked_symbols(t.shape):
                return True
    return False


def per_node_support(gm):
    """{node: reason or None} by lowering the graph node by node."""
    return symbolic.lowering(LoweringContext, lambda ctx: _per_node_support(ctx, gm))


def _per_node_support(ctx, gm):
    status = {}
    for n in gm.graph.nodes:
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
                status[n] = None
            except (Unsupported, UnsupportedOpError, KilnError) as e:
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


def analyze_model(model, args, kwargs=None):
    from kiln.partition import unsupported_ops

    if isinstance(model, torch.nn.Module):
        model.eval()
    with torch.no_grad():
        ep = export_program(model, args, kwargs)
    gm = ep.graph_module
    status = per_node_support(gm)
    counts = collections.Counter(str(n.target) for n in status)
    bad = collections.Counter(str(n.target) for n, why in status.items() if why)
    total = sum(counts.values())
    supported = total - sum(bad.values())
    unsupported = []
    for n, why in status.items():
        if why and not any(u["op"] == str(n.target) and u["where"] == source_location(n) for u in unsupported):
            unsupported.append({"op": str(n.target), "reason": why, "where": source_location(n),
                                "node": describe_node(n)})
    pieces = 0
    if unsupported:
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

        from kiln.partition import _KilnSupport

        refused = {n for n, why in status.items() if why}
        pieces = len(CapabilityBasedPartitioner(gm, _KilnSupport(refused), allows_single_node_partition=True)
                     .propose_partitions())
    lines = [f"kiln.analyze: {type(model).__name__}: {total} ATen ops, {supported} supported "
             f"({100.0 * supported / max(total, 1):.1f}%)", "", f"{'op':45s} {'count':>6s}  supported"]
    for op, c in counts.most_common():
        lines.append(f"{op:45s} {c:6d}  {'no' if bad.get(op) == c else 'partly' if bad.get(op) else 'yes'}")
    if unsupported:
        lines += ["", "unsupported:"]
        for u in unsupported:
            lines.append(f"  {u['op']}: {u['reason']}")
            if u["where"]:
                lines.append(f"      at {u['where']}")
        lines += ["", f"with CPU fallback: {pieces} kiln pieces, eager PyTorch for "
                      f"{', '.join(unsupported_ops(gm, {n for n, why in status.items() if why}))}"]
    else:
        lines += ["", "every op runs in kiln: one compiled graph, no fallback"]
    return {"total_ops": total, "supported_ops": supported,
            "supported_percent": 100.0 * supported / max(total, 1),
            "op_counts": dict(counts), "unsupported": unsupported, "fallback_pieces": pieces,
            "text": "\n".join(lines)}
