"""A/B of the compiler's layout pass on ResNet-18 (bench/models.py's bench
row model, batch 1, 224x224): the same model traced with channels-last conv
regions (the default) and with KILN_LAYOUT=nchw, outputs compared, then
both timed interleaved call by call in one process (so both see the same
machine), median of many calls, at 1 and 2 threads.

    .venv/bin/python bench/layout_ab.py [--calls 60] [--threads 1,2]
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

import kiln  # noqa: E402


def trace(model, x, layout):
    old = os.environ.get("KILN_LAYOUT")
    if layout == "nchw":
        os.environ["KILN_LAYOUT"] = "nchw"
    else:
        os.environ.pop("KILN_LAYOUT", None)
    try:
        return kiln.trace(model, x, fallback=False)
    finally:
        if old is None:
            os.environ.pop("KILN_LAYOUT", None)
        else:
            os.environ["KILN_LAYOUT"] = old


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    model, x = models.build_resnet18()
    on = trace(model, x, "auto")
    off = trace(model, x, "nchw")
    layout_line = [ln for ln in on.explain().splitlines() if ln.strip().startswith("layout:")]
    print("layout pass:", layout_line[0].strip() if layout_line else "no channels-last region")
    with torch.no_grad():
        want = model(*x)
    a, b = on(*x), off(*x)
    print("max |on - eager| %.2e, |off - eager| %.2e, |on - off| %.2e" % (
        (a - want).abs().max().item(), (b - want).abs().max().item(), (a - b).abs().max().item()))
    for n in [int(t) for t in args.threads.split(",")]:
        on._kiln_model.set_threads(n)
        off._kiln_model.set_threads(n)
        # Wall time, and with one thread also the process's CPU time (time
        # sliced away to other processes on a shared machine does not count).
        t = {(k, c): [] for k in ("on", "off") for c in ("wall", "cpu")}
        for _ in range(5):
            on(*x), off(*x)
        for i in range(args.calls):
            order = (("on", on), ("off", off)) if i % 2 == 0 else (("off", off), ("on", on))
            for name, m in order:
                c0, t0 = time.process_time(), time.perf_counter()
                m(*x)
                t[name, "wall"].append(time.perf_counter() - t0)
                t[name, "cpu"].append(time.process_time() - c0)
        for clock in ("wall", "cpu") if n == 1 else ("wall",):
            m_on, m_off = statistics.median(t["on", clock]), statistics.median(t["off", clock])
            print("%d thread(s), %s: layout on %.2f ms, off (KILN_LAYOUT=nchw) %.2f ms, median of"
                  " %d calls (min %.2f / %.2f); off/on %.2fx" % (
                      n, clock, m_on * 1e3, m_off * 1e3, args.calls, min(t["on", clock]) * 1e3,
                      min(t["off", clock]) * 1e3, m_off / m_on))


if __name__ == "__main__":
    main()
