#!/usr/bin/env python3
"""kiln's fixed per-call cost on small models, against its kernel time.

    .venv/bin/python bench/overhead.py [--models seed,gpt2_decode] [--threads 2]

Per model, in one process: the median wall time of a KilnModule call (the
Python wrapper and the C call path: argument checks, output allocation, GIL
release, pool wake-up), of the bare C call with prebuilt argument lists, of
an empty-bodied Python call for scale, and the kernels' own time from kiln's
profiler, and the Python wrapper alone (the C run stubbed out: a figure
that does not move with the machine's load).  overhead = call - kernels.  Timings are medians of interleaved
rounds (the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def median_us(fn, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="seed,gpt2_decode")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(args.threads)
    import kiln
    sys.path.insert(0, str(HERE))
    import peers
    from models import MODELS

    for name in args.models.split(","):
        model, inputs = MODELS[name].build()
        with torch.no_grad():
            compiled = kiln.trace(model, tuple(inputs))
        for m in peers._kiln_models(compiled):
            m.set_threads(args.threads)
        km = [m for m in compiled.modules() if hasattr(m, "_kiln_model")]
        if len(km) != 1 or km[0] is not compiled:
            print(f"{name}: kiln partitioned the model; measuring the whole call only")
        cm = km[0]._kiln_model
        flat = list(inputs)
        outs = [torch.empty(s, dtype=d) for d, s in km[0]._out_specs]
        from kiln.optable import DTYPES
        ins_desc = [(t.data_ptr(), DTYPES[t.dtype], tuple(t.shape)) for t in flat]
        outs_desc = [(o.data_ptr(), did, shape) for o, (did, shape) in zip(outs, km[0]._out_ids)]

        def full():
            with torch.no_grad():
                return compiled(*inputs)

        def full_nograd_outside():
            return compiled(*inputs)

        def bare():
            cm.run(ins_desc, outs_desc)

        # profiler: kernel time per run (sum of node times)
        cm.profile(True)
        for _ in range(50):
            bare()
        rows, runs = cm.profile()
        cm.profile(False)
        kern_us = sum(r[2] for r in rows) / max(runs, 1) / 1e3
        res = {"full": [], "call": [], "bare": []}
        for _ in range(args.rounds):
            for k, f in (("full", full), ("call", full_nograd_outside), ("bare", bare)):
                for _ in range(3):
                    f()
                res[k].append(median_us(f, 20))
        med = {k: statistics.median(v) for k, v in res.items()}
        # The Python wrapper alone: the C model's run() swapped for a no-op,
        # so the figure does not move with kernel time (or machine load).
        wrapper = None
        if km[0] is compiled:
            class _NoRun:
                def run(self, ins, outs):
                    pass
            compiled._kiln_model = _NoRun()
            try:
                wrapper = statistics.median(median_us(full_nograd_outside, 200)
                                            for _ in range(args.rounds))
            finally:
                compiled._kiln_model = cm
        print(f"{name} @ {args.threads}t: kernels {kern_us:.1f} us; "
              f"C run (prebuilt args) {med['bare']:.1f} us (+{med['bare'] - kern_us:.1f}); "
              f"module call {med['call']:.1f} us (+{med['call'] - kern_us:.1f}); "
              f"with torch.no_grad() {med['full']:.1f} us"
              + (f"; Python wrapper alone (run stubbed) {wrapper:.1f} us" if wrapper else ""),
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
