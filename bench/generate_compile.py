#!/usr/bin/env python3
"""Where the seconds of the first generate() through kiln go (issue 17 item 5).

    .venv/bin/python bench/generate_compile.py [--model gen_llama] [--prompt 32]
                                               [--tokens 8] [--threads 1] [--dynamic]

Builds a generation model of bench/models.py (default: the 8-layer
Llama-style model, 594 MiB of fp32 weights), generates once in eager (the
reference, and warm imports), then compiles its forward with kiln as users
do (model.forward = torch.compile(model.forward, backend="kiln")) and times
the first generate() (every compile happens in it) and a second one (none).
Each figure is given as CPU time of this process (what the work cost; a
shared machine inflates wall time far more) and wall time:

  first generate     the whole first compiled generate()
  Dynamo             tracing the Python (the first generate's time less the
                     backend's and the graphs' runs; includes guard building)
  AOTAutograd        kiln's backend less kiln's compile: functionalization,
                     decomposition to ATen, metadata
  kiln lowering      the FX graph of ATen into kiln IR (Python; a lowering
                     that meets two symbols an op needs equal starts again)
  kiln compile       the C passes, weight packing included
  runs               the compiled graphs running (prefill and decode steps)

and the graphs compiled (Dynamo's frames, kiln's graphs).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class _Clock:
    """Accumulates CPU and wall seconds spent inside wrapped functions
    (outermost calls only, so re-entry is not counted twice)."""

    def __init__(self):
        self.cpu = collections.defaultdict(float)
        self.wall = collections.defaultdict(float)
        self.depth = collections.Counter()

    def wrap(self, owner, name, key):
        fn = getattr(owner, name)

        def timed(*a, **kw):
            self.depth[key] += 1
            c, w = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.depth[key] -= 1
                if not self.depth[key]:
                    self.cpu[key] += time.process_time() - c
                    self.wall[key] += time.perf_counter() - w

        setattr(owner, name, timed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gen_llama")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dynamic", action="store_true", help="torch.compile(..., dynamic=True)")
    args = ap.parse_args()

    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    torch.set_num_threads(args.threads)
    from torch._dynamo.utils import counters

    import kiln.capture
    import kiln.dynamo
    import kiln.module
    from models import MODELS

    clock = _Clock()
    clock.wrap(kiln.dynamo, "kiln_backend", "backend")
    # kiln.dynamo imports these by name: wrap the names it calls.
    clock.wrap(kiln.dynamo, "lower_graph", "kiln lowering")
    clock.wrap(kiln.dynamo, "compile_graph", "kiln compile")
    clock.wrap(kiln.module.KilnModule, "run_described", "runs")  # every run goes through it

    model = MODELS[args.model].build()[0]
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    # An end-of-sequence id no token has: every call decodes args.tokens (generation._never_generated).
    kw = dict(max_new_tokens=args.tokens, eos_token_id=vocab, do_sample=False)

    def timed_generate():
        c, w = time.process_time(), time.perf_counter()
        out = model.generate(ids, **kw)
        return out, time.process_time() - c, time.perf_counter() - w

    with torch.no_grad():
        ref, eager_cpu, eager_wall = timed_generate()
        model.forward = torch.compile(model.forward, backend="kiln", dynamic=True if args.dynamic else None)
        first, cpu, wall = timed_generate()
        runs_cpu, runs_wall = clock.cpu["runs"], clock.wall["runs"]
        second, cpu2, wall2 = timed_generate()
    if not (torch.equal(first, ref) and torch.equal(second, ref)):
        print("tokens differ from eager's", file=sys.stderr)
        sys.exit(1)
    c, w = clock.cpu, clock.wall
    kiln_cpu, kiln_wall = c["kiln lowering"] + c["kiln compile"], w["kiln lowering"] + w["kiln compile"]
    rows = [
        ("first generate", cpu, wall),
        ("Dynamo", cpu - c["backend"] - runs_cpu, wall - w["backend"] - runs_wall),
        ("AOTAutograd", c["backend"] - kiln_cpu, w["backend"] - kiln_wall),
        ("kiln lowering", c["kiln lowering"], w["kiln lowering"]),
        ("kiln compile", c["kiln compile"], w["kiln compile"]),
        ("runs", runs_cpu, runs_wall),
    ]
    print(f"{args.model}: prompt {args.prompt}, {args.tokens} new tokens, {args.threads} thread(s)"
          f"{', dynamic=True' if args.dynamic else ''}; eager generate {eager_cpu:.2f} s CPU "
          f"({eager_wall:.2f} wall); second compiled generate {cpu2:.2f} s CPU ({wall2:.2f} wall)")
    print(f"{'':18s} {'CPU s':>8s} {'wall s':>8s}")
    for name, rc, rw in rows:
        print(f"{name:18s} {rc:8.2f} {rw:8.2f}")
    print(f"graphs: {counters['stats']['unique_graphs']} Dynamo frames, {counters['kiln']['graphs']} kiln graphs "
          f"({counters['kiln']['whole']} whole)")


if __name__ == "__main__":
    main()
