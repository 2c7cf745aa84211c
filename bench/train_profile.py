"""Where a training step's time goes: eager vs torch.compile(backend="kiln").

    .venv/bin/python bench/train_profile.py [--models train_mlp,train_transformer]
                                            [--threads 2,1] [--steps 30]

Runs the bench's training rows (bench/models.py, the step of
bench/peers.prepare_train: zero_grad, forward, backward, SGD) with eager and
kiln interleaved step by step in one process per thread count, so both see
the same machine load (the machine is shared: read ratios, not absolute
times). For kiln it splits the step into
  kernels   time inside kiln's C runtime (Model.run: the kernels, and the
            arena/pool bookkeeping around them),
  boundary  the rest of KilnModule.run_flat: input checks, torch.empty of
            outputs, building the argument lists,
  fallback  eager ATen ops between kiln pieces (partitioned graphs),
  other     everything else: Dynamo guards, AOTAutograd's runtime wrappers,
            the autograd engine, the optimizer step,
and lists the slowest kiln nodes (Model.profile).
"""

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


class _Clock:
    def __init__(self):
        self.t = defaultdict(float)
        self.n = defaultdict(int)

    def reset(self):
        self.t.clear()
        self.n.clear()


CLOCK = _Clock()


class _TimedModel:
    """Stands in for a kiln._C.Model, timing run()."""

    def __init__(self, model):
        self._m = model

    def run(self, ins, outs):
        t0 = time.perf_counter()
        r = self._m.run(ins, outs)
        CLOCK.t["kernels"] += time.perf_counter() - t0
        return r

    def __getattr__(self, name):
        return getattr(self._m, name)


def _instrument():
    """Wraps KilnModule.run_flat (boundary) and the partitioner's eager nodes."""
    from kiln.module import KilnModule

    orig_run_flat = KilnModule.run_flat
    modules = []

    def run_flat(self, args):
        if not isinstance(self._kiln_model, _TimedModel):
            self._kiln_model = _TimedModel(self._kiln_model)
            modules.append(self)
        t0 = time.perf_counter()
        r = orig_run_flat(self, args)
        CLOCK.t["run_flat"] += time.perf_counter() - t0
        CLOCK.n["kiln_calls"] += 1
        return r

    KilnModule.run_flat = run_flat

    # Partitioned graphs (some op fell back): time the whole graph; what is
    # not inside a kiln piece ran in eager.
    import kiln.partition as part

    orig_partition = part.partition

    def partition(*a, **k):
        fused, n = orig_partition(*a, **k)
        fwd = fused.forward

        def timed(*args):
            before = CLOCK.t["run_flat"]
            t0 = time.perf_counter()
            r = fwd(*args)
            CLOCK.t["fallback"] += time.perf_counter() - t0 - (CLOCK.t["run_flat"] - before)
            return r
        fused.forward = timed
        return fused, n

    part.partition = partition
    return modules


def _median(xs):
    return statistics.median(xs) if xs else float("nan")


def worker(models, threads, steps, warmup):
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(threads)
    sys.path.insert(0, str(HERE))
    import models as bench_models
    import peers
    import kiln
    modules = _instrument()

    for name in models:
        spec = bench_models.MODELS[name]
        model, inputs = spec.build()
        eager_call, _, _ = peers.prepare_train("eager", model, inputs, threads)
        kiln_call, prep, _ = peers.prepare_train("kiln", model, inputs, threads)
        for _ in range(warmup):
            eager_call()
            kiln_call()
        te, tk = [], []
        parts = defaultdict(list)
        for i in range(steps):
            # Alternate the order so neither system always runs second.
            order = [("e", eager_call), ("k", kiln_call)] if i % 2 == 0 else [("k", kiln_call), ("e", eager_call)]
            for tag, call in order:
                CLOCK.reset()
                t0 = time.perf_counter()
                call()
                dt = time.perf_counter() - t0
                if tag == "e":
                    te.append(dt)
                else:
                    tk.append(dt)
                    parts["kernels"].append(CLOCK.t["kernels"])
                    parts["boundary"].append(CLOCK.t["run_flat"] - CLOCK.t["kernels"])
                    parts["fallback"].append(CLOCK.t["fallback"])
                    parts["other"].append(dt - CLOCK.t["run_flat"] - CLOCK.t["fallback"])
                    parts["kiln_calls"].append(CLOCK.n["kiln_calls"])
        me, mk = _median(te), _median(tk)
        print(f"\n== {name} @ {threads} thread(s): {steps} steps, medians (noisy shared machine)")
        print(f"   eager {me * 1e3:8.2f} ms/step   kiln {mk * 1e3:8.2f} ms/step   "
              f"speed-up eager/kiln {me / mk:5.2f}x   (kiln first step {prep:.1f} s)")
        for k in ("kernels", "boundary", "fallback", "other"):
            v = _median(parts[k])
            print(f"   kiln {k:9s} {v * 1e3:8.2f} ms  {100 * v / mk:5.1f} %")
        print(f"   kiln calls per step: {int(_median(parts['kiln_calls']))}")
        # Which kiln nodes take the time (one more profiled run of each module).
        rows = defaultdict(float)
        for m in modules:
            inner = m._kiln_model
            inner.profile(True)
        kiln_call()
        for m in modules:
            inner = m._kiln_model
            got, n = inner.profile()
            inner.profile(False)
            for op, origin, ns in got:
                rows[(op, (origin or "").split("/")[-1][:40])] += ns / max(n, 1)
        tot = sum(rows.values()) or 1
        print("   slowest kiln nodes (one profiled step):")
        for (op, origin), ns in sorted(rows.items(), key=lambda kv: -kv[1])[:12]:
            print(f"     {ns / 1e6:7.3f} ms {100 * ns / tot:5.1f} %  {op:22s} {origin}")
        modules.clear()
        torch._dynamo.reset()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="train_mlp,train_transformer")
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    models = args.models.split(",")
    if args.worker:
        worker(models, int(args.threads), args.steps, args.warmup)
        return
    for n in args.threads.split(","):
        env = dict(os.environ, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, KILN_NUM_THREADS=n,
                   PYTHONWARNINGS="ignore")
        subprocess.run([sys.executable, __file__, "--worker", "--models", args.models, "--threads", n,
                        "--steps", str(args.steps), "--warmup", str(args.warmup)], env=env, check=True)


if __name__ == "__main__":
    main()
