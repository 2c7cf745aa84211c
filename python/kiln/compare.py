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

A model with ops kiln lacks runs as kiln.trace's fallback runs it: kiln's
pieces, each with every intermediate kept, and the missing ops in eager
PyTorch between them (on kiln's values). Their rows say "eager" and are
never the off node: an eager op only carries the error it was handed. The
report names the pieces and the eager ops.

Random ops (torch.rand, dropout in training) draw kiln's own numbers, not
eager's: eager replays kiln's draws at those nodes (their rows say so), so
the ops after them are compared on the same numbers.
"""

import copy
import math
import operator

import torch
from torch.export.graph_signature import InputKind

from kiln.capture import export_program, lower_exported, module_path, source_location
from kiln.errors import KilnError, UnsupportedOpError
from kiln.module import KilnModule, compile_graph
from kiln.options import as_tuple, weights_quant
from kiln.partition import _KilnPiece, drop_size_range_asserts, partition
from kiln.support import unsupported_ops

__all__ = ["compare", "CompareReport"]


def _values_of_placeholders(ep, args):
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


# Ops whose values are random draws: kiln's are its own (kiln/random_ops.py),
# so eager replays kiln's draws at these nodes and the ops after them are
# compared on the same numbers.
_RANDOM_OPS = {torch.ops.aten.rand.default, torch.ops.aten.rand_like.default, torch.ops.aten.randn.default,
               torch.ops.aten.randn_like.default, torch.ops.aten.uniform.default, torch.ops.aten.bernoulli.p,
               torch.ops.aten.bernoulli.default, torch.ops.aten.native_dropout.default}


def _random_nodes(gm):
    """The random nodes of gm and, per node, the FX nodes whose kiln values
    replay it: the node itself, or a tuple op's getitems (added here when
    the program drops one: dropout's mask in an inference export)."""
    out = {}
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in _RANDOM_OPS:
            continue
        if not isinstance(n.meta.get("val"), (tuple, list)):
            out[n] = n
            continue
        items = {u.args[1]: u for u in n.users if u.target is operator.getitem}
        for i, v in enumerate(n.meta["val"]):
            if i not in items:
                with gm.graph.inserting_after(n):
                    items[i] = gm.graph.call_function(operator.getitem, (n, i))
                items[i].meta["val"] = v
        out[n] = tuple(items[i] for i in range(len(n.meta["val"])))
    gm.recompile()
    return out


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm, replay):
        super().__init__(gm)
        self.values = {}  # node name -> value
        self.replay = replay  # {random node's name: its value(s) as kiln drew them}

    def run_node(self, n):
        out = self.replay[n.name] if n.name in self.replay else super().run_node(n)
        self.values[n.name] = out
        return out


def _eager_values(ep, gm, args, dtype, replay):
    """Each node's value (by name) running gm, the program as exported (the
    partitioned run rewrites ep's own), in eager at dtype."""
    vals = _values_of_placeholders(ep, args)
    if dtype is not None:
        vals = [v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in vals]
        replay = {n: tuple(t.to(dtype) if t.is_floating_point() else t for t in v) if isinstance(v, tuple)
                  else v.to(dtype) for n, v in replay.items()}
    rec = _Recorder(gm, replay)
    with torch.no_grad():
        rec.run(*vals)
    return rec.values


class CompareReport:
    """rows: one per compared node, in program order: dict(node, op, where,
    module, shape, max_abs, max_rel, eager_abs, off, engine). engine is
    "kiln", or "eager" for an op kiln lacks that ran in eager PyTorch between
    kiln's pieces (never off: it shows the error it was handed). first_off:
    the first off row or None. pieces and eager_ops: for a model that
    partitions, its kiln pieces and the ops between them (0 and [] when kiln
    compiles it whole). str(report) is a table around first_off."""

    def __init__(self, rows, reference, pieces=0, eager_ops=()):
        self.rows = rows
        self.reference = reference
        self.pieces, self.eager_ops = pieces, list(eager_ops)
        self.first_off = next((r for r in rows if r["off"]), None)

    @property
    def ok(self):
        return self.first_off is None

    def __str__(self):
        head = (f"kiln.compare: {len(self.rows)} nodes against {self.reference}; "
                + ("all within tolerance" if self.ok else
                   f"first off: {self.first_off['node']} ({self.first_off['op']})"
                   + (f" at {self.first_off['where']}" if self.first_off['where'] else "")))
        lines = [head]
        if self.eager_ops:
            lines.append(f"partitioned: {self.pieces} kiln piece{'s' if self.pieces != 1 else ''}; "
                         f"in eager between them: {', '.join(self.eager_ops)}")
        lines.append(f"{'node':28s} {'op':34s} {'shape':18s} {'kiln err':>10s} {'eager err':>10s}")
        show = self.rows
        if not self.ok:
            i = self.rows.index(self.first_off)
            show = self.rows[max(0, i - 3):i + 4]
        for r in show[:40]:
            lines.append(f"{r['node'][:28]:28s} {r['op'][:34]:34s} {str(r['shape'])[:18]:18s} "
                         f"{r['max_abs']:10.3g} {r['eager_abs']:10.3g}" + ("  <- off" if r["off"] else "")
                         + ("  (ran in eager)" if r["engine"] == "eager" else "")
                         + ("  (kiln's random draw, replayed in eager)" if r["engine"] == "random" else ""))
        return "\n".join(lines)

    __repr__ = __str__


def compare(model, example_inputs, *, rtol=1e-4, atol=1e-5, weights_dtype=None, compute_dtype=None,
            example_kwargs=None):
    """Compares kiln with eager node by node on example_inputs; returns a
    CompareReport (print it; .first_off names the first off node). A model
    with ops kiln lacks is compared as kiln.trace runs it: kiln's pieces
    with every intermediate kept, the missing ops in eager between them."""
    args = as_tuple(example_inputs)
    if isinstance(model, torch.nn.Module):
        model.eval()
    with torch.no_grad():
        ep = export_program(model, args, example_kwargs)
    gm = ep.graph_module
    random = _random_nodes(gm)
    program = copy.deepcopy(gm)  # as exported: eager runs it after kiln's run
    replayed = [m for r in random.values() for m in (r if isinstance(r, tuple) else (r,))]
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"
             and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].is_floating_point()]
    extra = nodes + [m for m in replayed if m not in nodes]
    quant = weights_quant(weights_dtype)
    weights = quant if quant is not None else weights_dtype == torch.bfloat16
    compute_bf16 = compute_dtype == torch.bfloat16
    try:
        ctx, names, _ = lower_exported(ep, extra)
    except (UnsupportedOpError, KilnError):
        got, engines, pieces, missing = _run_partitioned(ep, args, extra, weights, compute_bf16)
    else:
        mod = KilnModule(compile_graph(ctx, weights, compute_bf16), names, None, "compare",
                         layout_inputs=ctx.layout_inputs)
        outs = mod.run_flat([a for a in args if isinstance(a, torch.Tensor)])
        got, engines, pieces, missing = outs[len(outs) - len(extra):], {}, 0, []
    value = dict(zip(extra, got))
    # Replayed wherever they ran (an eager random op between kiln's pieces
    # drew its numbers once too: the pieces after it read those).
    replay = {n.name: tuple(value[m] for m in r) if isinstance(r, tuple) else value[r]
              for n, r in random.items()}
    for n in random:
        if engines.get(n.name, "kiln") == "kiln":
            engines[n.name] = "random"
    eager = _eager_values(ep, program, args, None, replay)
    try:
        ref = _eager_values(ep, program, args, torch.float64, replay)
        reference = "float64 eager"
    except Exception:  # an op without a float64 kernel: eager float32 is the reference
        ref, reference = eager, "float32 eager"
    # A getitem of a replayed op is the replay itself: its row says so.
    for n, r in random.items():
        for m in (r if isinstance(r, tuple) else ()):
            if n.name in engines and engines[n.name] == "random":
                engines[m.name] = "random"
    rows = [_row(n, value[n], ref[n.name], eager[n.name], rtol, atol, engines.get(n.name, "kiln"))
            for n in nodes]
    return CompareReport([r for r in rows if r is not None], reference, pieces, missing)


def _run_partitioned(ep, args, nodes, weights, compute_bf16):
    """Runs the program as kiln.trace's fallback would, with every compared
    node an output of the piece that computes it. Returns (values of nodes,
    {node name: "kiln" | "eager"}, kiln pieces, ops run in eager)."""
    gm = ep.graph_module  # exported by compare() for itself: rewritten in place
    values = _values_of_placeholders(ep, args)
    # Parameters and buffers are constants of the pieces (packed, quantized).
    consts = {ph.name: v for spec, ph, v in zip(ep.graph_signature.input_specs,
                                                [n for n in gm.graph.nodes if n.op == "placeholder"], values)
              if spec.kind != InputKind.USER_INPUT}
    # Each compared node becomes a graph output, so the partitioner makes it
    # an output of its piece.
    out = next(n for n in gm.graph.nodes if n.op == "output")
    kept = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    out.args = (tuple(kept + list(nodes)),)
    gm.recompile()
    drop_size_range_asserts(gm)
    missing = unsupported_ops(gm)
    fused, pieces = partition(gm, lambda n: consts.get(n.name) if n.op == "placeholder" else None,
                              warn=False, what="kiln.compare", weights_bf16=weights, compute_bf16=compute_bf16)
    in_kiln = set()  # nodes of the pieces kiln compiled (a piece it refused ran in eager)
    for child in fused.children():
        if isinstance(child, _KilnPiece):
            in_kiln |= child.node_names
    with torch.no_grad():
        outs = fused(*values)
    engines = {n.name: ("kiln" if n.name in in_kiln else "eager") for n in nodes}
    return list(outs)[len(kept):], engines, pieces, missing


def _row(n, got, want, e32, rtol, atol, engine):
    """One compared node's row, or None when the values cannot be compared.
    engine: "kiln", "eager" (ran in eager between kiln's pieces) or "random"
    (kiln's draw, which eager replays): only a "kiln" row can be off."""
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor) \
            or tuple(got.shape) != tuple(want.shape):
        return None
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
    return {
        "node": n.name, "op": op, "where": source_location(n), "module": module_path(n),
        "shape": tuple(got.shape), "max_abs": max_abs,
        "max_rel": max_abs / scale if scale else (0.0 if max_abs == 0 else math.inf),
        "eager_abs": float(de[finite].max()) if finite.any() else 0.0,
        "off": engine == "kiln" and bool(bad_elem.any()), "engine": engine,
    }
