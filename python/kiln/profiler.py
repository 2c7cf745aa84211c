"""Seeing what kiln did: its nodes on torch.profiler's timeline, and a
per-node report against this machine's measured peaks (``kiln.profile``).

torch.profiler: a KilnModule called inside ``torch.profiler.profile(...)``
records one event ``kiln::forward`` for the call (its inputs' shapes with
``record_shapes=True``) and, nested in it, one event ``kiln::<op>`` per kernel
node (``kiln::linear``, ``kiln::sdpa``...), with the node's input shapes, and
its FLOPs, bytes and PyTorch origin as event arguments. The events come from
torch's own RecordFunction (``torch._C._profiler._RecordFunctionFast``),
opened and closed by the C runtime's per-node hook, so they sit on the same
clock and thread as the eager ops around them. Outside a profiler the module
pays one check per call (``torch._C._autograd._profiler_enabled()``).

FLOPs, bytes and the report's figures come from the C core (kiln_cost.h,
kiln_profile.h), the same code ``kiln profile FILE`` prints with: linear,
matmul, conv2d and attention count 2 FLOPs per multiply-add, copies 0, other
ops about one per element; bytes are every distinct input and the output
read or written once (a lower bound: no cache misses counted twice).
"""

from __future__ import annotations

import json
import time

import torch

from kiln import _C
from kiln.random_ops import with_seed

try:
    from torch._C._profiler import _RecordFunctionFast
except ImportError:  # an older torch: no events, the module still runs
    _RecordFunctionFast = None

_profiler_enabled = torch._C._autograd._profiler_enabled


class _Nodes:
    """Per-model facts the profiler needs, built once per compiled model (a
    symbolic model: once per binding of its sizes)."""

    def __init__(self, model):
        self.rows = model.nodes()
        self.events = []
        for (op, origin, ins, outs, params, kernel), (flops, nbytes) in zip(self.rows, model.node_costs()):
            meta = [torch.empty(v[0], device="meta") if v is not None else None for v in ins]
            self.events.append((f"kiln::{op}", [m for m in meta if m is not None],
                                {"flops": flops, "bytes": nbytes, "origin": origin or ""}))


def _nodes(module, descs=None):
    """The module's _Nodes; for a symbolic model those of the instance its
    inputs' sizes select (descs: the call's input descriptors; the C model
    binds them, as the call will)."""
    model = module._kiln_model
    if not module._symbolic:
        n = module.__dict__.get("_kiln_nodes")
        if n is None:
            n = module.__dict__["_kiln_nodes"] = _Nodes(model)
        return n
    cache = module.__dict__.setdefault("_kiln_nodes_by_shape", {})
    key = tuple(tuple(d[2]) for d in descs) if descs is not None else None
    n = cache.get(key)
    if n is None:
        if descs is not None:
            model.output_shapes(descs)  # selects the instance these sizes run
        if len(cache) >= 8:
            cache.clear()
        n = cache[key] = _Nodes(model)
    return n


def run_with_events(module, args, descs, out_descs):
    """KilnModule.run_flat's C call inside torch.profiler: a kiln::forward
    event around per-node kiln::<op> events."""
    if _RecordFunctionFast is None:
        module._kiln_model.run(descs, out_descs)
        return
    events = _nodes(module, descs).events
    stack = []

    def hook(node, end):
        if end:
            stack.pop().__exit__(None, None, None)
        else:
            name, ins, kw = events[node]
            r = _RecordFunctionFast(name, ins, kw)
            r.__enter__()
            stack.append(r)

    with _RecordFunctionFast("kiln::forward", list(args), {"nodes": len(events)}):
        module._kiln_model.run(descs, out_descs, hook)


# ---- kiln.profile ----------------------------------------------------------

class ProfileReport:
    """What kiln.profile measured: ``rows`` (one dict per kernel node, slowest
    first: node, op, origin, ms, wait_ms, share, flops, bytes, gflops, gbs,
    intensity, bound, peak_fraction, input_shapes, output_shapes; roof:
    the compute roof peak_fraction is of, "fp32", "bf16" for a linear on the
    bf16 engine, "int8" for one with int8 activations on VPDPBUSD, and
    roof_gflops its peak),
    ``totals`` (with the roofs used: peak_gflops, bandwidth_gbs, ridge;
    bandwidth_how "sampled": the read bandwidth is the best of three probe
    reads right after the runs, a shared machine's of the same minutes,
    not kiln.machine()'s cached peak; and
    the weights: weight_bytes one call reads, weight_rows (M of the largest
    linear), weight_bound (their FLOPs per byte are below the ridge: a decode
    step) and then the ceilings calls_per_s = bandwidth / weight_bytes and
    tokens_per_s = calls_per_s * weight_rows, else 0),
    ``machine`` (kiln.machine()), ``str(report)`` the table (the lines
    ``kiln profile FILE`` prints, made by the same C code),
    ``export_chrome_trace(path)`` and ``plot_roofline(path)``."""

    def __init__(self, rows, totals, machine, trace_events, header, footer):
        self.rows, self.totals, self.machine = rows, totals, machine
        self._trace = trace_events
        self._header, self._footer = header, footer

    def __repr__(self):
        return self.table()

    __str__ = __repr__

    def table(self, limit=30):
        lines = ["kiln profile: " + self._header]
        lines += [r["line"] for r in self.rows[:limit]]
        if len(self.rows) > limit:
            lines.append(f"  ... {len(self.rows) - limit} more nodes")
        lines.append(self._footer)
        return "\n".join(lines)

    @property
    def ridge(self):
        return self.totals["ridge"]

    def export_chrome_trace(self, path):
        """One run's nodes as a Chrome trace (chrome://tracing, Perfetto)."""
        with open(path, "w") as f:
            json.dump({"traceEvents": self._trace, "displayTimeUnit": "ms"}, f)
        return path

    def plot_roofline(self, path, title=None):
        """A PNG: every node as a point (arithmetic intensity, GFLOP/s) under
        the machine's roofs (FMA peak, read bandwidth)."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        peak, bw = self.totals["peak_gflops"], self.totals["bandwidth_gbs"]
        pts = [r for r in self.rows if r["bytes"] > 0 and r["flops"] > 0 and r["ms"] > 0]
        lo = min([r["intensity"] for r in pts] + [0.01]) / 2
        hi = max([r["intensity"] for r in pts] + [self.ridge * 8]) * 2
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(xs, [min(peak, bw * x) for x in xs], color="black", lw=1.5,
                label=f"roof: {peak:.0f} GFLOP/s, {bw:.1f} GB/s")
        one = self.totals["threads"] == 1
        for key in ("bf16_gflops", "int8_gops"):
            v = self.machine.get(key + "_1" if one else key)
            if v:
                ax.plot(xs, [min(v, bw * x) for x in xs], ls="--", lw=1, label=f"{key}: {v:.0f}")
        ops = sorted({r["op"] for r in pts})
        for op in ops:
            rs = [r for r in pts if r["op"] == op]
            ax.scatter([r["intensity"] for r in rs], [r["gflops"] for r in rs],
                       s=[20 + 300 * r["share"] for r in rs], alpha=0.7, label=op)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / byte)")
        ax.set_ylabel("GFLOP/s")
        ax.set_title(title or "kiln nodes against this machine's roofs (size: share of time)", fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path


def profile(module, *inputs, runs=10, warmup=2):
    """Runs ``module`` (a KilnModule) on ``inputs`` ``runs`` times with the
    per-node timer on and returns a ProfileReport."""
    inner = getattr(module, "_kiln_model", None)
    if inner is None:
        raise TypeError("kiln.profile takes a module made by kiln.trace (a KilnModule)")
    for _ in range(warmup):
        module(*inputs)
    t0 = time.perf_counter()
    for _ in range(max(runs, 1)):
        module(*inputs)
    wall_ms = (time.perf_counter() - t0) * 1e3 / max(runs, 1)
    # One traced run: node start and end times for the Chrome trace.
    spans = []
    inner.profile(True)
    try:
        clock = time.perf_counter_ns

        def hook(node, end):
            spans.append((node, end, clock()))

        run_once_with_hook(module, inputs, hook)
        inner.profile(True)  # resets: the traced run is not in the figures
        for _ in range(runs):
            module(*inputs)
        rows, totals, header, footer = inner.profile_report(wall_ms)
    finally:
        inner.profile(False)
    nodes = _Nodes(inner)  # of the graph these runs ran (a symbolic model's instance)
    for r in rows:
        op, origin, ins, outs, _, _ = nodes.rows[r["node"]]
        r.update(op=op, origin=origin or "", input_shapes=[v[0] for v in ins if v is not None],
                 output_shapes=[v[0] for v in outs])
    trace = []
    base = spans[0][2] if spans else 0
    opened = {}
    for node, end, t in spans:
        if not end:
            opened[node] = t
            continue
        name, _, kw = nodes.events[node]
        start = opened.pop(node, t)
        trace.append({"name": name, "ph": "X", "pid": 0, "tid": 0, "cat": "kiln",
                      "ts": (start - base) / 1e3, "dur": (t - start) / 1e3,
                      "args": dict(kw, node=node)})
    return ProfileReport(rows, totals, _machine(), trace, header, footer)


def _machine():
    return _C.machine(False)  # kiln.machine(): measured once, then cached


def run_once_with_hook(module, inputs, hook):
    """One call of a KilnModule with a per-node hook(node, end)."""
    flat = module._check_inputs(list(inputs))  # contiguous, and checked as a call checks them
    descs = [(t.data_ptr(), dt, t.shape) for t, (_, dt) in zip(flat, module._fast_in)]
    seed = None
    if module._seed_at is not None:
        descs, seed = with_seed(descs, module._seed_at)  # seed: alive until C returns
    model = module._kiln_model
    shapes = model.output_shapes(descs) if module._symbolic else [s for _, s in module._out_ids]
    outs = [torch.empty(s, dtype=dt) for s, (dt, _) in zip(shapes, module._out_specs)]
    model.run(descs, [(o.data_ptr(), dtype_id, s)
                      for o, s, (dtype_id, _) in zip(outs, shapes, module._out_ids)], hook)
    return outs
