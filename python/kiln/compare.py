"""kiln.compare: where kiln's numbers leave eager's, node by node (issue 20).

Runs the exported program in eager PyTorch (float32, and float64 as the
reference where it runs) and in kiln on the same inputs, with every
intermediate of the program kept as an output of kiln's graph so each ATen
node's value can be read, and names the first node whose kiln value is off:
its ATen op, module, source line, shape and largest differences.

A node is off when kiln's distance to the float64 value exceeds both the
tolerance (atol + rtol * |reference|) and 4x eager's own distance there, so
one CPU's inexact eager is no reference (the fuzzer's rule, in short). With
weights_dtype or compute_dtype, each node's error is what it adds: the first
off node is where the low precision enters (each row's error is the total
up to that node, not what the node alone adds). Keeping every intermediate
limits what the compiler can fuse, so this checks each op's numbers, not
the fused kernels of the model kiln.trace makes (their outputs are compared
by the last rows).
"""

import math
import operator

import torch

__all__ = ["compare", "CompareReport"]


def _values_of_placeholders(ep, args):
    from torch.export.graph_signature import InputKind

    state = ep.state_dict
    consts = getattr(ep, "constants", {}) or {}
    user = iter(args)
    vals = []
    for spec in ep.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            vals.append(next(user))
        else:
            vals.append(state[spec.target] if spec.target in state else consts[spec.target])
    return vals


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values = {}

    def run_node(self, n):
        out = super().run_node(n)
        self.values[n] = out
        return out


def _eager_values(ep, args, dtype):
    vals = _values_of_placeholders(ep, args)
    if dtype is not None:
        vals = [v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in vals]
    rec = _Recorder(ep.graph_module)
    with torch.no_grad():
        rec.run(*vals)
    return rec.values


class CompareReport:
    """rows: one per compared node, in program order: dict(node, op, where,
    shape, max_abs, max_rel, eager_abs, off). first_off: the first off row or
    None. str(report) is a table around it."""

    def __init__(self, rows, reference):
        self.rows = rows
        self.reference = reference
        self.first_off = next((r for r in rows if r["off"]), None)

    @property
    def ok(self):
        return self.first_off is None

    def __str__(self):
        head = (f"kiln.compare: {len(self.rows)} nodes against {self.reference}; "
                + ("all within tolerance" if self.ok else
                   f"first off: {self.first_off['node']} ({self.first_off['op']})"
                   + (f" at {self.first_off['where']}" if self.first_off['where'] else "")))
        lines = [head, f"{'node':28s} {'op':34s} {'shape':18s} {'kiln err':>10s} {'eager err':>10s}"]
        show = self.rows
        if not self.ok:
            i = self.rows.index(self.first_off)
            show = self.rows[max(0, i - 3):i + 4]
        for r in show[:40]:
            lines.append(f"{r['node'][:28]:28s} {r['op'][:34]:34s} {str(r['shape'])[:18]:18s} "
                         f"{r['max_abs']:10.3g} {r['eager_abs']:10.3g}" + ("  <- off" if r["off"] else ""))
        return "\n".join(lines)

    __repr__ = __str__


def compare(model, example_inputs, *, rtol=1e-4, atol=1e-5, weights_dtype=None, compute_dtype=None,
            example_kwargs=None):
    """Compares kiln with eager node by node on example_inputs; returns a
    CompareReport (print it; .first_off names the first off node)."""
    from kiln import _as_tuple, _weights_quant
    from kiln.capture import export_program, lower_exported, source_location, module_path
    from kiln.module import KilnModule, compile_graph

    args = _as_tuple(example_inputs)
    if isinstance(model, torch.nn.Module):
        model.eval()
    with torch.no_grad():
        ep = export_program(model, args, example_kwargs)
    gm = ep.graph_module
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"
             and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].is_floating_point()]
    eager = _eager_values(ep, args, None)
    try:
        ref = _eager_values(ep, args, torch.float64)
        reference = "float64 eager"
    except Exception:  # an op without a float64 kernel: eager float32 is the reference
        ref, reference = eager, "float32 eager"
    ctx, names, _ = lower_exported(ep, nodes)
    quant = _weights_quant(weights_dtype)
    weights = quant if quant is not None else weights_dtype == torch.bfloat16
    mod = KilnModule(compile_graph(ctx, weights, compute_dtype == torch.bfloat16), names, None, "compare")
    flat_user = [a for a in args if isinstance(a, torch.Tensor)]
    outs = mod.run_flat(flat_user)
    n_user = len(outs) - len(nodes)
    rows = []
    for n, got in zip(nodes, outs[n_user:]):
        want, e32 = ref[n], eager[n]
        if not isinstance(want, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            continue
        w = want.double()
        d = (got.double() - w).abs()
        de = (e32.double() - w).abs() if isinstance(e32, torch.Tensor) else torch.zeros_like(d)
        finite = torch.isfinite(w)
        bound = atol + rtol * w.abs()
        bad_elem = (d > bound) & (d > 4 * de) & finite
        bad_elem |= ~finite & ~((got.double() == w) | (torch.isnan(got.double()) & torch.isnan(w)))
        max_abs = float(d[finite].max()) if finite.any() else 0.0
        scale = float(w[finite].abs().max()) if finite.any() else 0.0
        op = (f"{n.args[0].target}[{n.args[1]}]" if n.target is operator.getitem
              and isinstance(n.args[0], torch.fx.Node) else str(n.target))
        rows.append({
            "node": n.name, "op": op, "where": source_location(n), "module": module_path(n),
            "shape": tuple(got.shape), "max_abs": max_abs,
            "max_rel": max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf),
            "eager_abs": float(de[finite].max()) if finite.any() else 0.0,
            "off": bool(bad_elem.any()),
        })
    return CompareReport(rows, reference)
