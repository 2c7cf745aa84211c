#!/usr/bin/env python3
"""Where a decode step's time goes when kiln runs model.generate().

    .venv/bin/python bench/gen_profile.py [--model gen_llama] [--batch 1] [--threads 2]
                                          [--cache dynamic|static] [--tokens 65]
                                          [--weights int8|int4|...]

Builds a generation model of bench/models.py, compiles its forward with kiln
as users do (model.forward = torch.compile(model.forward, backend="kiln")),
generates once (the compiles), then generates again with kiln's per-node
profiler on in every compiled graph and prints:

  * the wall time of the decode steps (a streamer's stamps) beside the time
    kiln's kernels took in them: the rest is Python, Dynamo's guards,
    generate()'s own work and the runtime's per-call work (binding, plans for
    new sizes);
  * the plans made for new sizes (kiln_model instances) and their time;
  * per decode call, from timestamps taken in a generate() without the
    profiler (the backend is kiln's, wrapped to stamp its calls: Stamps):
    Dynamo's entry (its guards), kiln's Python before and after the C call,
    the C call, Dynamo's exit, and generate()'s own work per step;
  * the decode graph's nodes grouped by op (ms per step, share, GB/s of the
    weights they stream where the op reads a constant), and its top nodes;
  * eager PyTorch's decode steps under torch.profiler, by aten op, for
    comparison.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def profiled_generate(model, system, ids, mask, new):
    """One generate() of a compiled system with kiln's per-node profiler on
    in every live kiln graph: (its metrics, [(module, rows, runs, stats, new
    plans)] of the graphs it ran, the most-called first: the decode graph,
    run once per step)."""
    import generation
    mods = generation._kiln_modules()
    inst0 = {id(m): m.stats().get("instances", 0) for m in mods}
    for m in mods:
        m._kiln_model.profile(True)
    try:
        _, km = generation._generate(model, system, ids, mask, new)
    finally:
        graphs = []
        for m in mods:
            rows, runs = m._kiln_model.profile()
            m._kiln_model.profile(False)
            st = m.stats()
            graphs.append((m, rows, runs, st, st.get("instances", 0) - inst0[id(m)]))
    graphs = [g_ for g_ in graphs if g_[2] > 0]
    graphs.sort(key=lambda g_: -g_[2])
    return km, graphs


class Stamps:
    """Where one compiled forward call's time goes, from timestamps: Dynamo
    (the call to the backend's function: its guards over the model and the
    cache, then its bytecode), kiln's Python before and after the C call
    (the torch.compile wrapper: cache buffers, descriptors, the views it
    hands back) and the C call itself, then Dynamo's bytecode after the graph
    (the outputs and the cache's attributes set). The C call's time includes
    its kernels; generate()'s own work is what the step has beyond forward."""

    def __init__(self):
        import kiln.dynamo as kd
        import kiln.module as kmod
        self.calls, self.cur = [], {}
        now, cur = time.perf_counter_ns, self.cur
        run_described = kmod.KilnModule.run_described

        def described(mod, *a, **k):
            cur["c0"] = now()
            try:
                return run_described(mod, *a, **k)
            finally:
                cur["c1"] = now()
        kmod.KilnModule.run_described = described

        def backend(gm, example_inputs, options=None):
            inner = kd.kiln_backend(gm, example_inputs, options=options)

            def call(*args):
                cur["b0"] = now()
                try:
                    return inner(*args)
                finally:
                    cur["b1"] = now()
            # AOTAutograd's function takes its arguments as one list
            # (_boxed_call), which it may free as it goes: so does this one.
            call._boxed_call = getattr(inner, "_boxed_call", False)
            return call
        self.backend = backend

    def wrap(self, fwd):
        now, cur, calls = time.perf_counter_ns, self.cur, self.calls

        @functools.wraps(fwd)   # generate() reads forward's signature to choose its arguments
        def call(*a, **k):
            cur.clear()
            cur["f0"] = now()
            try:
                return fwd(*a, **k)
            finally:
                cur["f1"] = now()
                calls.append(dict(cur))
        return call

    def report(self, calls, step_ms):
        import statistics
        done = [c for c in calls[1:] if len(c) == 6]   # decode calls (the first is prefill)
        if not done:
            return
        med = lambda a, b: statistics.median((c[b] - c[a]) / 1e3 for c in done)  # noqa: E731
        dyn, pre, run = med("f0", "b0"), med("b0", "c0"), med("c0", "c1")
        post, out, fwd = med("c1", "b1"), med("b1", "f1"), med("f0", "f1")
        print(f"\nper decode call, median us ({len(done)} calls, no node profiler): Dynamo in {dyn:.0f} | "
              f"kiln Python before {pre:.0f} | C run {run:.0f} | kiln Python after {post:.0f} | "
              f"Dynamo out {out:.0f} | forward {fwd:.0f}; generate()'s own per step "
              f"{1e3 * step_ms - fwd:.0f}")


def decode_kernel_ms(graphs):
    """The time kiln's kernels took per decode step: the decode graph's
    profiled node times over its calls (None when no graph ran)."""
    if not graphs:
        return None
    _, rows, runs, _, _ = graphs[0]
    return sum(r[2] for r in rows) / 1e6 / runs


def print_by_op(rows, runs, total_ms, top, unit):
    """A graph's profiled nodes grouped by op (ms per call, share, nodes),
    then its top nodes."""
    by_op = defaultdict(lambda: [0.0, 0])
    for op, origin, ns in rows:
        by_op[op][0] += ns / 1e6 / runs
        by_op[op][1] += 1
    print(f"\n{'op':28s} {unit:>8s} {'share':>6s} {'nodes':>6s}")
    for op, (ms, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0]):
        if ms < 0.005:
            continue
        print(f"{op:28s} {ms:8.3f} {100 * ms / total_ms:5.1f}% {n:6d}")
    print(f"\ntop {top} nodes:")
    for op, origin, ns in sorted(rows, key=lambda r: -r[2])[:top]:
        print(f"  {ns / 1e6 / runs:7.3f} ms  {op:22s} {origin[:90] if origin else ''}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gen_llama")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cache", default="dynamic", choices=("dynamic", "static"))
    ap.add_argument("--tokens", type=int, default=65, help="max_new_tokens (decode steps + 1)")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--no-eager", action="store_true", help="skip eager's torch.profiler table")
    ap.add_argument("--prefill", action="store_true", help="also the prefill graph's nodes by op")
    ap.add_argument("--weights", default=None,
                    help="kiln's weights_dtype option (int8, int8:a8, int4, int4:g128, bf16)")
    args = ap.parse_args()

    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    torch.set_num_threads(args.threads)
    import transformers
    transformers.logging.set_verbosity_error()
    import generation
    from models import MODELS
    import kiln  # noqa: F401

    model = MODELS[args.model].build()[0]
    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(1000 + args.batch)
    ids = torch.randint(3, vocab, (args.batch, 128), generator=g)
    mask = torch.ones_like(ids)
    new = args.tokens - 1
    cache = "static" if args.cache == "static" else None
    eager = generation.GenSystem("eager", None, cache, None)
    wd = {"bf16": torch.bfloat16, "int8": torch.int8}.get(args.weights, args.weights)
    stamps = Stamps()
    fwd = torch.compile(model.forward, backend=functools.partial(
        stamps.backend, options={"weights_dtype": wd} if wd is not None else None))
    ksys = generation.GenSystem("kiln", stamps.wrap(fwd), cache, "eager")

    ref, em = generation._generate(model, eager, ids, mask, new)
    t0 = time.perf_counter()
    out, _ = generation._generate(model, ksys, ids, mask, new)
    print(f"compile generate(): {time.perf_counter() - t0:.1f} s; tokens "
          f"{generation._tokens_check(ref, out, 128).get('tokens')}")
    _, km = generation._generate(model, ksys, ids, mask, new)   # warm
    _, em = generation._generate(model, eager, ids, mask, new)

    stamps.calls.clear()
    _, sm = generation._generate(model, ksys, ids, mask, new)
    stamped = list(stamps.calls)
    km, graphs = profiled_generate(model, ksys, ids, mask, new)
    steps = km["steps"]
    per_step_wall = 1e3 * args.batch / km["decode_tps"]
    print(f"\n{args.model} batch {args.batch}, {args.threads} thread(s), {args.cache} cache: "
          f"eager {em['decode_tps']:.1f} tok/s, kiln {km['decode_tps']:.1f} tok/s "
          f"({per_step_wall:.2f} ms per decode step; TTFT eager {em['ttft_ms']:.0f} ms, "
          f"kiln {km['ttft_ms']:.0f} ms)")
    total_kernel_decode = 0.0
    for m, rows, runs, st, new_inst in graphs:
        tot = sum(r[2] for r in rows) / 1e6
        print(f"  graph: {st['nodes']} nodes, {runs} calls, kernels {tot / runs:.2f} ms per call; "
              f"{'symbolic' if st.get('symbolic') else 'concrete'}; plans for new sizes during "
              f"this generate(): {new_inst} (mean {st.get('instance_us_mean', 0):.0f} us each)")
    if not graphs:
        return
    m, rows, runs, st, new_inst = graphs[0]   # the decode graph: called once per step
    kern = decode_kernel_ms(graphs)
    total_kernel_decode = kern
    print(f"\ndecode step: wall {per_step_wall:.2f} ms, kiln kernels {kern:.2f} ms "
          f"({100 * kern / per_step_wall:.0f} %), replanning "
          f"{new_inst * st.get('instance_us_mean', 0) / 1e3 / max(steps, 1):.2f} ms, "
          f"the rest (Python, Dynamo, generate(), runtime per call) "
          f"{per_step_wall - kern - new_inst * st.get('instance_us_mean', 0) / 1e3 / max(steps, 1):.2f} ms")
    stamps.report(stamped, 1e3 * args.batch / sm["decode_tps"])
    print_by_op(rows, runs, kern, args.top, "ms/step")
    if args.prefill and len(graphs) > 1:
        _, prows, pruns, _, _ = graphs[1]
        ptot = sum(r[2] for r in prows) / 1e6 / pruns
        print(f"\nprefill graph: kernels {ptot:.2f} ms per call")
        print_by_op(prows, pruns, ptot, args.top, "ms/call")

    if args.no_eager:
        return
    model.__dict__.pop("forward", None)
    with torch.profiler.profile() as prof:
        generation._generate(model, eager, ids, mask, new)
    print("\neager generate() under torch.profiler (prefill included), by self CPU time:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
