"""kiln.analyze: which ops of a model kiln supports, and why not.

Captures the model as kiln.trace does, then looks at every ATen op: is it in
kiln's op table, and does its lowering accept this particular use (a handler
may refuse a parameter, such as a rounding mode). Reports counts, the
supported share, each unsupported op with its reason and source line, and
the number of kiln pieces CPU fallback would run.
"""

import collections

import torch

from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from kiln.capture import describe_node, export_program, source_location
from kiln.support import KilnSupport, per_node_support, unsupported_ops


def analyze_model(model, args, kwargs=None):
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
        refused = {n for n, why in status.items() if why}
        pieces = len(CapabilityBasedPartitioner(gm, KilnSupport(refused), allows_single_node_partition=True)
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
