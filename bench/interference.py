#!/usr/bin/env python3
"""Evidence for the benchmark's timing method: one model, one process, the
systems timed both ways, alternately, several times.

    .venv/bin/python bench/interference.py [--model seed] [--threads 2] [--reps 6]

  sequential: each system's whole timing loop in turn (the old method:
              eager's loop, then kiln's, then ORT's), peers.time_call;
  rounds:     peers.time_rounds (short blocks, rotating order, an untimed
              settling call per block for short calls).

Prints each repetition's kiln/eager and kiln/onnxrt ratios and, per method,
their spread (max/min over repetitions): the method whose ratios move less
between repetitions measures the systems, not the order they ran in.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="seed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    sys.path.insert(0, str(HERE))
    import peers
    from models import MODELS

    model, inputs = MODELS[args.model].build()
    prepared = {"eager": peers.prepare_eager(model, inputs, args.threads),
                "kiln": peers.prepare_kiln(model, inputs, args.threads),
                "onnxruntime": peers.prepare_onnxruntime(model, inputs, args.threads,
                                                         name=args.model)}
    calls = {s: p.at(args.threads) for s, p in prepared.items()}
    budget = 1e9   # stop on run counts only: both methods make the same calls
    ratios = {"sequential": [], "rounds": []}
    for rep in range(args.reps):
        for method in ("sequential", "rounds") if rep % 2 == 0 else ("rounds", "sequential"):
            if method == "sequential":
                ms = {s: peers.time_call(c, warmup=1, runs=args.runs, budget_s=budget)["ms"]
                      for s, c in calls.items()}
            else:
                ms = {s: r["ms"] for s, r in peers.time_rounds(
                    calls, warmup=1, runs=args.runs, budget_s=budget).items()}
            ke, ko = ms["eager"] / ms["kiln"], ms["onnxruntime"] / ms["kiln"]
            ratios[method].append((ke, ko))
            print(f"rep {rep} {method:10s} eager {ms['eager']:8.3f}  kiln {ms['kiln']:8.3f}  "
                  f"onnxrt {ms['onnxruntime']:8.3f} ms   kiln/eager {ke:5.2f}x  "
                  f"kiln/onnxrt {ko:5.2f}x", flush=True)
    print(f"{args.model} @ {args.threads} thread(s), {args.reps} repetitions of {args.runs} runs:")
    for method, rs in ratios.items():
        for k, label in ((0, "kiln/eager"), (1, "kiln/onnxrt")):
            v = [r[k] for r in rs]
            print(f"  {method:10s} {label:11s} median {statistics.median(v):5.2f}x  "
                  f"range {min(v):5.2f}-{max(v):5.2f}  spread {max(v) / min(v):5.2f}")


if __name__ == "__main__":
    sys.exit(main())
