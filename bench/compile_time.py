#!/usr/bin/env python3
"""Compile time: kiln against torch.compile with Inductor, in one run (issue 4).

    .venv/bin/python bench/compile_time.py [--model bert_base] [--runs 3]

For one bench model (bench/models.py; default BERT-base: 12 layers, hidden
768, sequence 128), in this order:
  export        torch.export plus the Core ATen decomposition (export_program),
                which kiln.trace starts with;
  kiln          kiln from torch.export's output: lowering to kiln IR in Python
                (lower_exported) and the C compiler (compile_graph);
  kiln.trace    kiln.trace end to end (export included);
  inductor      torch.compile(model, backend="inductor")'s first call, in a
                fresh process with an empty Inductor cache (its compile), minus
                nothing: that call also runs the model once (a few hundred ms).
kiln's figures are medians of --runs; Inductor's is one run (a fresh cache
each time costs minutes). Wall times; the machine may be shared, so read the
ratio, which is measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _inductor_first_call(model_name, threads):
    """Seconds of torch.compile(..., backend="inductor")'s first call, in a
    fresh interpreter with an empty cache."""
    code = f"""
import sys, time, warnings, logging, json
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
sys.path.insert(0, {str(HERE)!r})
import torch
torch.set_num_threads({threads})
from models import MODELS
model, inputs = MODELS[{model_name!r}].build()
compiled = torch.compile(model, backend="inductor")
t0 = time.perf_counter()
with torch.no_grad():
    compiled(*inputs)
print(json.dumps({{"seconds": time.perf_counter() - t0}}))
"""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=cache)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                             check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="bert_base")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    torch.set_num_threads(args.threads)
    import kiln
    from kiln.capture import export_program, lower_exported
    from kiln.module import compile_graph
    sys.path.insert(0, str(HERE))
    from models import MODELS

    model, inputs = MODELS[args.model].build()
    times = {"export": [], "kiln lower": [], "kiln C compile": [], "kiln": [], "kiln.trace": []}
    for _ in range(args.runs):
        t0 = time.perf_counter()
        with torch.no_grad():
            ep = export_program(model, inputs)
        t1 = time.perf_counter()
        ctx, _, _ = lower_exported(ep)
        t2 = time.perf_counter()
        compile_graph(ctx, False)
        t3 = time.perf_counter()
        kiln.trace(model, inputs)
        t4 = time.perf_counter()
        times["export"].append(t1 - t0)
        times["kiln lower"].append(t2 - t1)
        times["kiln C compile"].append(t3 - t2)
        times["kiln"].append(t3 - t1)
        times["kiln.trace"].append(t4 - t3)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.model}, {args.threads} threads, kiln medians of {args.runs} runs:")
    for k, v in med.items():
        print(f"  {k:<16} {v:7.3f} s   (runs: {', '.join(f'{x:.3f}' for x in times[k])})")
    result = {"model": args.model, "threads": args.threads, "kiln": med}
    if not args.no_inductor:
        ind = _inductor_first_call(args.model, args.threads)
        result["inductor_first_call"] = ind
        print(f"  {'inductor':<16} {ind:7.3f} s   (first call, empty cache)")
        print(f"  inductor / kiln (from export's output): {ind / med['kiln']:.1f}x;"
              f" inductor / kiln.trace (end to end): {ind / med['kiln.trace']:.1f}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
