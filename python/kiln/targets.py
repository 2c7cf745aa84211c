"""kiln.compare_targets: one compiled model on two targets, node by node.

The same artifact (graph, packed constants, memory plan) is loaded on a
second target, by default "reference": the scalar reference kernels that
sit beside every fast kernel (src/hal/reference). Both run on the same
inputs with every node's output kept (KilnModule.run_nodes), and each node
is compared: floats within atol + rtol * |reference| (NaN where the other
has NaN, infinities equal), integers and bools exactly. The first node off
is where a fast kernel (or its reference) went wrong, with its op and the
source line it came from; nodes after it may be off only because it was.
"""

import torch

from kiln.module import KilnModule

__all__ = ["compare_targets", "TargetComparison"]


class TargetComparison:
    """rows: one dict per node compared (node, op, origin, max_abs, bad: the
    elements out of tolerance), in run order; first_off: the first row with
    bad > 0, or None; outputs_match: the model outputs agree too."""

    def __init__(self, targets, rows, outputs_match):
        self.targets = targets
        self.rows = rows
        self.outputs_match = outputs_match
        self.first_off = next((r for r in rows if r["bad"]), None)

    @property
    def ok(self):
        return self.first_off is None and self.outputs_match

    def __str__(self):
        a, b = self.targets
        lines = [f"kiln.compare_targets: {a} vs {b}, {len(self.rows)} nodes: "
                 + ("every node agrees" if self.ok else f"first off: node {self.first_off['node']} "
                    f"({self.first_off['op']}, {self.first_off['origin']})" if self.first_off
                    else "the nodes agree but the outputs do not")]
        for r in self.rows:
            lines.append(f"  {r['node']:5d} {r['op']:18s} max_abs {r['max_abs']:10.3g}"
                         + (f"  {r['bad']} off" if r["bad"] else "") + (f"   # {r['origin']}" if r["origin"] else ""))
        return "\n".join(lines)

    __repr__ = __str__


def _mismatch(got, want, rtol, atol):
    """(elements off, max |got - want| over finite pairs)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return max(got.numel(), want.numel(), 1), float("inf")
    if not got.is_floating_point():
        return int((got != want).sum()), float((got.to(torch.float64) - want.to(torch.float64)).abs().max()) if got.numel() else 0.0
    g, w = got.to(torch.float64), want.to(torch.float64)
    nan_g, nan_w = torch.isnan(g), torch.isnan(w)
    inf = torch.isinf(w) | torch.isinf(g)
    finite = ~(nan_g | nan_w | inf)
    diff = (g - w).abs()
    bad = int((nan_g != nan_w).sum()) + int((inf & (g != w) & ~(nan_g | nan_w)).sum())
    bad += int((finite & (diff > atol + rtol * w.abs())).sum())
    return bad, float(diff[finite].max()) if finite.any() else 0.0


def compare_targets(module, *inputs, target="reference", rtol=1e-4, atol=1e-5):
    """Runs a KilnModule (kiln.trace's) and the same artifact loaded on
    `target` on inputs, and compares them node by node; returns a
    TargetComparison (print it; .ok, .first_off)."""
    other = KilnModule.from_bytes(module.to_bytes(), target=target)
    # One generator state for both: a graph's random nodes (dropout, rand)
    # draw from the same seed on either target (kiln/random_ops.py).
    state = torch.get_rng_state()
    outs_a, nodes_a = module.run_nodes(*inputs)
    torch.set_rng_state(state)
    outs_b, nodes_b = other.run_nodes(*inputs)
    info = module._kiln_model.nodes()
    rows = []
    for i, got in nodes_a.items():
        want = nodes_b.get(i)
        if want is None:
            continue
        bad, max_abs = _mismatch(got, want, rtol, atol)
        rows.append({"node": i, "op": info[i][0], "origin": info[i][1] or "", "max_abs": max_abs, "bad": bad})
    outputs_match = all(_mismatch(a, b, rtol, atol)[0] == 0 for a, b in zip(outs_a, outs_b))
    return TargetComparison((module.target, other.target), rows, outputs_match)
