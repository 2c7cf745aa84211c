#!/usr/bin/env python3
"""What seeing kiln costs: a KilnModule call with no profiler, inside
torch.profiler.profile() (kiln::forward and one kiln::<op> event per node),
and with kiln's own per-node timer on (what kiln.profile and `kiln profile`
run with), on a one-node model and on a chain of 32 small linears (nodes of
about a microsecond, so the per-node cost is not lost in kernel time).

    .venv/bin/python bench/profiler_overhead.py [--calls 2000] [--threads 1]

Each figure is the fastest of --calls calls (wall clock, perf_counter_ns),
the three modes interleaved in rounds so that they see the same machine:
on a shared machine the fastest call is the one nobody interrupted. Also
the cost of the check a call makes when no profiler is active
(torch._C._autograd._profiler_enabled()). The README quotes these figures.
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def fastest_ns(fn, calls):
    best = None
    for _ in range(calls):
        t0 = time.perf_counter_ns()
        fn()
        dt = time.perf_counter_ns() - t0
        best = dt if best is None or dt < best else best
    return best


def models():
    import torch

    import kiln

    torch.manual_seed(0)
    x = torch.randn(1, 16)
    lin = torch.nn.Linear(16, 16).eval()
    yield "Linear(16,16), 1 row", kiln.trace(lin, x), (x,)
    # 32 kernel nodes of about a microsecond each: the per-node cost shows.
    chain = torch.nn.Sequential(*[torch.nn.Linear(16, 16) for _ in range(32)]).eval()
    yield "32 x Linear(16,16), 1 row", kiln.trace(chain, x), (x,)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per mode per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", str(a.threads))
    import torch

    torch.set_num_threads(a.threads)
    check = torch._C._autograd._profiler_enabled
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")),
               platform.processor())
    print(f"{cpu}; {a.threads} thread(s); load average {os.getloadavg()[0]:.1f}; "
          f"fastest of {a.calls} calls x {a.rounds} rounds")
    empty = fastest_ns(int, a.calls * a.rounds)  # the timing loop's own cost, for scale
    print(f"no-profiler check (_profiler_enabled): {fastest_ns(check, a.calls * a.rounds)} ns "
          f"(an empty call, int(), in the same loop: {empty} ns)")
    for name, mod, args in models():
        inner = mod._kiln_model
        nodes = sum(1 for r in inner.nodes() if r[5])
        calls = a.calls
        best = {"plain": None, "torch.profiler": None, "kiln timer": None}

        def keep(key, ns):
            best[key] = ns if best[key] is None or ns < best[key] else best[key]

        for _ in range(a.rounds):
            keep("plain", fastest_ns(lambda: mod(*args), calls))
            with torch.profiler.profile() as prof:
                keep("torch.profiler", fastest_ns(lambda: mod(*args), calls))
            del prof
            inner.profile(True)
            try:
                keep("kiln timer", fastest_ns(lambda: mod(*args), calls))
            finally:
                inner.profile(False)
        plain = best["plain"]
        print(f"{name} ({nodes} kernel nodes): plain {plain / 1e3:.1f} us; "
              f"inside torch.profiler {best['torch.profiler'] / 1e3:.1f} us "
              f"(+{(best['torch.profiler'] - plain) / 1e3:.1f} us, "
              f"{(best['torch.profiler'] - plain) / nodes / 1e3:.2f} us per node); "
              f"kiln's per-node timer {best['kiln timer'] / 1e3:.1f} us "
              f"(+{(best['kiln timer'] - plain) / 1e3:.1f} us)")


if __name__ == "__main__":
    main()
