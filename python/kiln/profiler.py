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

The cost model (``node_cost``): linear, matmul, conv2d and attention count
2 FLOPs per multiply-add; other ops count one per output element (norms and
softmax a few more); bytes moved are every input's and output's bytes, read
or written once (a lower bound: no cache misses counted twice).
"""

from __future__ import annotations

import json
import math

import torch

from kiln import _C

try:
    from torch._C._profiler import _RecordFunctionFast
except ImportError:  # an older torch: no events, the module still runs
    _RecordFunctionFast = None

_profiler_enabled = torch._C._autograd._profiler_enabled

def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


# Ops whose cost is a few arithmetic operations per element (measured
# kernels do about this much work per element); everything else counts one.
_PER_ELEMENT = {"layer_norm": 5, "rms_norm": 4, "softmax": 5, "log_softmax": 5, "gelu": 8,
                "silu": 4, "layer_norm_backward": 8, "gelu_backward": 10}


def node_cost(op, inputs, outputs, params):
    """(flops, bytes) of one node from its op, its inputs' and outputs'
    (shape, dtype, nbytes, kind) and its params (see nodes())."""
    ins = [v for v in inputs if v is not None]
    nbytes = sum(v[2] for v in ins) + sum(v[2] for v in outputs)
    y = outputs[0][0] if outputs else ()
    if op == "linear" and ins and y:
        k = ins[0][0][-1] if ins[0][0] else 1
        flops = 2 * _numel(y) * k
    elif op == "matmul" and len(ins) >= 2 and y:
        a = ins[0][0]
        k = (a[-2] if params[0] & 1 else a[-1]) if a else 1
        flops = 2 * _numel(y) * k
    elif op in ("conv2d", "conv2d_nhwc") and len(ins) >= 2 and ins[1][0]:
        w = ins[1][0]
        flops = 2 * _numel(y) * (_numel(w) // max(w[0], 1))
    elif op == "sdpa" and len(ins) >= 3:
        if params[1] & 1:  # KILN_SDPA_VIEWS: B, H, Hkv, Sq, Skv, D, Dv in params[2..8]
            b, h, _, sq, skv, d, dv = params[2:9]
        else:
            b, h, sq, d = ins[0][0][-4:] if len(ins[0][0]) >= 4 else (1, 1, 1, 1)
            skv, dv = ins[1][0][-2], ins[2][0][-1]
        flops = 2 * b * h * sq * skv * (d + dv)
    else:
        flops = _PER_ELEMENT.get(op, 1) * max((_numel(o[0]) for o in outputs), default=0)
    return int(flops), int(nbytes)


class _Nodes:
    """Per-model facts the profiler needs, built once per compiled model."""

    def __init__(self, model):
        self.rows = model.nodes()
        self.events = []
        for op, origin, ins, outs, params, kernel in self.rows:
            flops, nbytes = node_cost(op, ins, outs, params)
            meta = [torch.empty(v[0], device="meta") if v is not None else None for v in ins]
            self.events.append((f"kiln::{op}", [m for m in meta if m is not None],
                                {"flops": flops, "bytes": nbytes, "origin": origin or ""}))


def _nodes(module):
    n = module.__dict__.get("_kiln_nodes")
    if n is None:
        n = module.__dict__["_kiln_nodes"] = _Nodes(module._kiln_model)
    return n


def run_with_events(module, args, descs, out_descs):
    """KilnModule.run_flat's C call inside torch.profiler: a kiln::forward
    event around per-node kiln::<op> events."""
    if _RecordFunctionFast is None:
        module._kiln_model.run(descs, out_descs)
        return
    events = _nodes(module).events
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

def _machine():
    from kiln import machine
    return machine()


class ProfileReport:
    """What kiln.profile measured: ``rows`` (one dict per kernel node, slowest
    first), ``totals``, ``machine`` (the peaks used), ``str(report)`` the
    table, ``export_chrome_trace(path)`` and ``plot_roofline(path)``."""

    def __init__(self, rows, totals, machine, trace_events):
        self.rows, self.totals, self.machine = rows, totals, machine
        self._trace = trace_events

    def __repr__(self):
        return self.table()

    __str__ = __repr__

    def table(self, limit=30):
        t = self.totals
        m = self.machine
        lines = [f"kiln profile: {t['runs']} runs, {t['threads']} threads, {m.get('isa', '?')}; "
                 f"per run {t['ms']:.4f} ms in nodes ({t['wait_ms']:.4f} ms more waiting for the "
                 f"host team), wall {t['wall_ms']:.4f} ms; {t['gflops']:.1f} GFLOP/s, {t['gbs']:.1f} GB/s",
                 f"peaks: {m['fma_gflops']:.0f} GFLOP/s fp32 FMA, {m['bandwidth_gbs']:.1f} GB/s read "
                 f"(ridge {self.ridge:.1f} FLOP/byte)",
                 f"{'node':>4}  {'op':<18}{'ms':>9}{'share':>7}{'MFLOP':>10}{'KiB':>9}"
                 f"{'GFLOP/s':>9}{'GB/s':>7}{'%peak':>6}  bound   origin"]
        for r in self.rows[:limit]:
            lines.append(f"{r['node']:>4}  {r['op']:<18}{r['ms']:>9.4f}{100 * r['share']:>6.1f}%"
                         f"{r['flops'] / 1e6:>10.2f}{r['bytes'] / 1024:>9.1f}{r['gflops']:>9.1f}"
                         f"{r['gbs']:>7.1f}{100 * r['peak_fraction']:>5.0f}%  {r['bound']:<7} "
                         f"{r['origin'][:90]}")
        if len(self.rows) > limit:
            lines.append(f"  ... {len(self.rows) - limit} more nodes")
        return "\n".join(lines)

    @property
    def ridge(self):
        return self.machine["fma_gflops"] / max(self.machine["bandwidth_gbs"], 1e-9)

    def export_chrome_trace(self, path):
        """One run's nodes as a Chrome trace (chrome://tracing, Perfetto)."""
        with open(path, "w") as f:
            json.dump({"traceEvents": self._trace, "displayTimeUnit": "ms"}, f)
        return path

    def plot_roofline(self, path):
        """A PNG: every node as a point (arithmetic intensity, GFLOP/s) under
        the machine's roofs (FMA peak, read bandwidth)."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        peak, bw = self.machine["fma_gflops"], self.machine["bandwidth_gbs"]
        pts = [r for r in self.rows if r["bytes"] > 0 and r["flops"] > 0 and r["ms"] > 0]
        lo = min([r["intensity"] for r in pts] + [0.01]) / 2
        hi = max([r["intensity"] for r in pts] + [self.ridge * 8]) * 2
        fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(xs, [min(peak, bw * x) for x in xs], color="black", lw=1.5,
                label=f"roof: {peak:.0f} GFLOP/s, {bw:.1f} GB/s")
        for key in ("bf16_gflops", "int8_gops"):
            v = self.machine.get(key)
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
        ax.set_title("kiln nodes against this machine's roofs (size: share of time)")
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return path


def profile(module, *inputs, runs=10, warmup=2):
    """Runs ``module`` (a KilnModule) on ``inputs`` ``runs`` times with the
    per-node timer on and returns a ProfileReport."""
    import time

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
        times, n = inner.profile()
        waits = inner.profile_wait()
    finally:
        inner.profile(False)
    nodes = _nodes(module)
    mach = _machine()
    peak, bw = mach["fma_gflops"], mach["bandwidth_gbs"]
    total_ns = sum(t[2] for t in times) or 1
    rows = []
    for i, ((op, origin, ins, outs, params, kernel), (_, _, ns), wait) in enumerate(
            zip(nodes.rows, times, waits)):
        if not kernel and ns == 0:
            continue
        flops, nbytes = node_cost(op, ins, outs, params)
        s = ns / max(n, 1) / 1e9
        gflops = flops / s / 1e9 if s > 0 else 0.0
        gbs = nbytes / s / 1e9 if s > 0 else 0.0
        intensity = flops / nbytes if nbytes else math.inf
        bound = "compute" if intensity >= peak / bw else "memory"
        frac = gflops / peak if bound == "compute" else gbs / bw
        rows.append({"node": i, "op": op, "origin": origin or "", "ms": s * 1e3,
                     "wait_ms": wait / max(n, 1) / 1e6, "share": ns / total_ns, "flops": flops,
                     "bytes": nbytes, "gflops": gflops, "gbs": gbs, "intensity": intensity,
                     "bound": bound, "peak_fraction": frac,
                     "input_shapes": [v[0] for v in ins if v is not None],
                     "output_shapes": [v[0] for v in outs]})
    rows.sort(key=lambda r: -r["ms"])
    tot_s = total_ns / max(n, 1) / 1e9
    tf = sum(r["flops"] for r in rows)
    tb = sum(r["bytes"] for r in rows)
    totals = {"runs": n, "threads": inner.threads(), "ms": tot_s * 1e3,
              "wait_ms": sum(waits) / max(n, 1) / 1e6, "wall_ms": wall_ms, "flops": tf, "bytes": tb,
              "gflops": tf / tot_s / 1e9 if tot_s else 0.0, "gbs": tb / tot_s / 1e9 if tot_s else 0.0}
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
    return ProfileReport(rows, totals, mach, trace)


def run_once_with_hook(module, inputs, hook):
    """One call of a KilnModule with a per-node hook(node, end)."""
    flat = [t.contiguous() for t in inputs]
    descs = [(t.data_ptr(), dt, t.shape) for t, (_, dt) in zip(flat, module._fast_in)]
    outs = [make() for make in module._out_makers]
    module._kiln_model.run(descs, [(o.data_ptr(), dtype_id, shape)
                                   for o, (dtype_id, shape) in zip(outs, module._out_ids)], hook)
    return outs
