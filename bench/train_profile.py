"""Where a training step's time goes: eager vs torch.compile(backend="kiln").

    .venv/bin/python bench/train_profile.py [--models train_mlp,train_transformer]
                                            [--threads 2,1] [--steps 30]
    .venv/bin/python bench/train_profile.py --autocast [--models train_transformer]
                                            [--variants fp32,autocast,autocast@KILN_CASTS=keep]

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

--autocast compares kiln with kiln instead: the same step compiled in fp32
and with its forward (and loss) under torch.autocast("cpu", bfloat16), each
variant its own copy of the model (eager-fp32 and eager-autocast: the same
step in eager PyTorch, for scale), interleaved step by step (the order
rotates), fastest and median step of each, in wall time and in the
process's CPU time (on a shared machine the other processes' work stretches
the wall time, not the CPU time; at 1 thread the two agree on a quiet
machine). A variant "NAME@VAR=VALUE" is
compiled with that one environment variable set (the compiler reads KILN_CASTS
and friends when a graph is compiled), so a pass can be A/B'd in one run.
Then, per variant, where the time goes by node kind (each node's fastest of
5 profiled steps) and
how many cast nodes each compiled graph has, standalone or inside fused
groups.
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


def _autocast_step(fwd, model, autocast):
    import torch
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step(inputs):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = fwd(*inputs)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _cast_counts(explain):
    """(standalone cast nodes, casts inside fused groups) of one plan."""
    alone = fused = 0
    for line in explain.splitlines():
        if "= cast " in line:
            alone += 1
        elif "fused[" in line:
            fused += line.split("fused[", 1)[1].split("]", 1)[0].split().count("cast")
    return alone, fused


def _node_kind(op, origin):
    return "cast" if op == "cast" else ("gemm" if op in ("matmul", "linear") else op)


def _own_code(model, i):
    """model wrapped in a module whose forward is a code object of its own.
    Dynamo caches compiled graphs per code object and, inlining nn.Modules,
    guards on the parameters' properties rather than on the module, so
    copies of one model would share the first copy's graphs (compiled under
    its environment)."""
    import types
    from torch import nn

    def forward(self, *args):
        return self.inner(*args)

    code = forward.__code__.replace(co_name=f"forward_variant_{i}")
    cls = type(f"Variant{i}", (nn.Module,), {"forward": types.FunctionType(code, globals(), code.co_name)})
    w = cls()
    w.inner = model
    return w


def worker_autocast(models, threads, steps, warmup, variants):
    import copy
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(threads)
    sys.path.insert(0, str(HERE))
    import models as bench_models
    import kiln  # noqa: F401
    import kiln.module as km

    for name in models:
        model, inputs = bench_models.MODELS[name].build()
        torch._dynamo.reset()
        runs = []
        for i, v in enumerate(variants):
            label, _, env = v.partition("@")
            m = copy.deepcopy(model)
            if label.startswith("eager"):  # eager PyTorch, for scale: no plans to profile
                step = _autocast_step(m, m, label != "eager-fp32")
                runs.append((v, step, [], float(step(inputs))))
                continue
            step = _autocast_step(torch.compile(_own_code(m, i), backend="kiln"), m, label != "fp32")
            plans = []
            init = km.KilnModule.__init__

            def record(self, *a, _plans=plans, **k):
                init(self, *a, **k)
                _plans.append(self)

            km.KilnModule.__init__ = record
            saved = {}
            if env:
                key, _, val = env.partition("=")
                saved[key] = os.environ.get(key)
                os.environ[key] = val
            try:
                loss = step(inputs)  # compiles the forward and backward graphs
            finally:
                km.KilnModule.__init__ = init
                for key, val in saved.items():
                    if val is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = val
            runs.append((v, step, plans, float(loss)))
        for _ in range(warmup):
            for _, step, _, _ in runs:
                step(inputs)
        times = [[] for _ in runs]
        cpu = [[] for _ in runs]  # the process's CPU time: what a busy machine's other work does not add
        for i in range(steps):
            k = i % len(runs)  # rotate the order so no variant always runs first
            for j in list(range(k, len(runs))) + list(range(k)):
                c0, t0 = time.process_time(), time.perf_counter()
                runs[j][1](inputs)
                times[j].append(time.perf_counter() - t0)
                cpu[j].append(time.process_time() - c0)
        load = os.getloadavg()
        print(f"\n== {name} @ {threads} thread(s): {steps} interleaved steps per variant; "
              f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        base = min(times[0])
        cbase = min(cpu[0])
        for (v, _, plans, loss), ts, cs in zip(runs, times, cpu):
            casts = [_cast_counts(p.explain()) for p in plans]
            print(f"   {v:28s} wall fastest {min(ts) * 1e3:7.2f} median {_median(ts) * 1e3:7.2f} ms "
                  f"({min(ts) / base:5.3f}x first's); cpu fastest {min(cs) * 1e3:7.2f} median "
                  f"{_median(cs) * 1e3:7.2f} ms ({min(cs) / cbase:5.3f}x); first loss {loss:.6g}; "
                  f"casts (alone+fused) per graph: {', '.join(f'{a}+{f}' for a, f in casts)}")
        # Where each variant's time goes, by node kind: each node's fastest
        # of 5 profiled steps (the machine is shared).
        kinds = []
        for v, step, plans, _ in runs:
            if not plans:
                kinds.append({})
                continue
            best = {}
            for _ in range(5):
                for p in plans:
                    p._kiln_model.profile(True)
                step(inputs)
                for gi, p in enumerate(plans):
                    got, n = p._kiln_model.profile()
                    p._kiln_model.profile(False)
                    for ni, (op, origin, ns) in enumerate(got):
                        key = (gi, ni)
                        t = ns / max(n, 1)
                        if key not in best or t < best[key][1]:
                            best[key] = (_node_kind(op, origin), t)
            rows = defaultdict(float)
            for kind, t in best.values():
                rows[kind] += t
            kinds.append(rows)
        kiln_runs = [r for r, k in zip(runs, kinds) if k]
        kinds = [k for k in kinds if k]
        names = sorted(set().union(*kinds), key=lambda k: -max(r.get(k, 0) for r in kinds))
        print("   kiln node time by kind, ms (each node's fastest of 5 profiled steps): "
              + " | ".join(v for v, *_ in kiln_runs))
        for k in names[:14]:
            print(f"     {k:22s} " + "  ".join(f"{r.get(k, 0) / 1e6:8.2f}" for r in kinds))
        print(f"     {'total':22s} " + "  ".join(f"{sum(r.values()) / 1e6:8.2f}" for r in kinds))
        torch._dynamo.reset()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="train_mlp,train_transformer")
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--autocast", action="store_true",
                    help="kiln fp32 vs kiln under torch.autocast bf16 (see --variants)")
    ap.add_argument("--variants", default="fp32,autocast",
                    help="with --autocast: comma-separated fp32 or autocast (kiln), each optionally "
                         "@VAR=VALUE, or eager-fp32 / eager-autocast (eager PyTorch)")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.autocast and args.models == ap.get_default("models"):
        args.models = "train_transformer"
    models = args.models.split(",")
    if args.worker:
        if args.autocast:
            worker_autocast(models, int(args.threads), args.steps, args.warmup,
                            args.variants.split(","))
        else:
            worker(models, int(args.threads), args.steps, args.warmup)
        return
    for n in args.threads.split(","):
        env = dict(os.environ, OMP_NUM_THREADS=n, MKL_NUM_THREADS=n, KILN_NUM_THREADS=n,
                   PYTHONWARNINGS="ignore")
        extra = ["--autocast", "--variants", args.variants] if args.autocast else []
        subprocess.run([sys.executable, __file__, "--worker", "--models", args.models, "--threads", n,
                        "--steps", str(args.steps), "--warmup", str(args.warmup)] + extra,
                       env=env, check=True)


if __name__ == "__main__":
    main()
