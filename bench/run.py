#!/usr/bin/env python3
"""kiln's model benchmark driver.

    .venv/bin/python bench/run.py [--quick] [--threads 2,1] [--models a,b]

Runs every model in its own process, once per thread count, and in that
process: eager (the reference), kiln (its output checked against eager
first), ONNX Runtime and torch.compile (Inductor).  Each system is warmed up
and then timed; the median is reported.  Then prints the table and writes
bench/results.json, bench/results.png and bench/results.md (see report.py).

--quick: fewer timed runs, and the 1-thread pass only while the whole run
stays inside a five-minute budget (rows that do not fit say so).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

QUICK_BUDGET_S = 285.0
QUICK_SKIP = "skipped in QUICK: Inductor's compile does not fit the 5-minute budget"


def timing_params(quick: bool, heavy: bool) -> dict:
    if quick:
        return {"warmup": 1, "runs": 10, "budget_s": 1.0 if heavy else 0.5}
    return {"warmup": 5, "runs": 50, "budget_s": 15.0 if heavy else 8.0}


# --------------------------------------------------------------------------
# Worker: one model, one thread count, one process.
# --------------------------------------------------------------------------

def worker(args) -> int:
    threads = args.threads_one
    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    torch.set_num_threads(threads)
    try:
        import transformers
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    except Exception:
        pass
    sys.path.insert(0, str(HERE))
    import peers
    from models import MODELS

    spec = MODELS[args.worker]
    tp = timing_params(args.quick, spec.heavy)
    row = {"model": spec.name, "about": spec.about, "threads": threads,
           "train": spec.train, "quick": args.quick, "timing": tp, "systems": {}}
    out_path = Path(args.out)

    def save():
        out_path.write_text(json.dumps(row, indent=1))

    t0 = time.perf_counter()
    model, inputs = spec.build()
    row["build_s"] = time.perf_counter() - t0
    save()

    skip_inductor = args.skip_inductor
    for system in peers.SYSTEMS:
        cell: dict = {}
        row["systems"][system] = cell
        if system == "inductor" and skip_inductor:
            cell["na"] = skip_inductor
            save()
            continue
        t_sys = time.perf_counter()
        try:
            if spec.train:
                call, prep, first = peers.prepare_train(system, model, inputs, threads)
                if system == "eager":
                    ref = first
                else:
                    cell.update(peers.compare(ref, first))
            else:
                prep_fn = peers.INFER[system]
                call, prep = prep_fn(model, inputs, threads)
                out = call()
                if system == "eager":
                    ref = out
                else:
                    cell.update(peers.compare(ref, out))
            cell["prep_s"] = prep
            if system != "eager" and not cell.get("ok", True):
                cell["fail"] = cell.get("why") or "wrong output"
            else:
                cell.update(peers.time_call(call, **tp))
        except peers.Unavailable as e:
            cell["na"] = str(e)
        except Exception as e:   # a crash in one system must not lose the row
            cell["na"] = ("n/a: kiln does not train yet (" + peers.short(e, 80) + ")"
                          if spec.train and system == "kiln" else peers.short(e))
            if system == "eager":
                save()
                raise
        cell["wall_s"] = time.perf_counter() - t_sys
        save()
    row["done"] = True
    save()
    return 0


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

def run_one(name, threads, quick, skip_inductor, timeout):
    env = dict(os.environ)
    n = str(threads)
    env.update({"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "KILN_NUM_THREADS": n,
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore",
                "TRANSFORMERS_VERBOSITY": "error"})
    # A fresh Inductor cache per process: the reported compile time is a
    # cold compile, and no model's compile helps another's.
    cache = tempfile.mkdtemp(prefix="kiln-bench-inductor-")
    env["TORCHINDUCTOR_CACHE_DIR"] = cache
    env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    fd, out = tempfile.mkstemp(prefix=f"kiln-bench-{name}-{n}-", suffix=".json")
    os.close(fd)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
           "--threads", n, "--out", out]
    if quick:
        cmd.append("--quick")
    if skip_inductor:
        cmd += ["--skip-inductor", skip_inductor]
    t0 = time.perf_counter()
    err = ""
    try:
        p = subprocess.run(cmd, env=env, cwd=str(ROOT), timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if p.returncode != 0:
            tail = [l for l in p.stdout.strip().splitlines() if l.strip()][-1:] or ["?"]
            err = f"worker exited {p.returncode}: {tail[0][:150]}"
    except subprocess.TimeoutExpired:
        err = f"timed out after {timeout:.0f}s"
    wall = time.perf_counter() - t0
    try:
        row = json.loads(Path(out).read_text())
    except Exception:
        row = {"model": name, "threads": threads, "systems": {}}
    finally:
        os.unlink(out)
        shutil.rmtree(cache, ignore_errors=True)
    row["wall_s"] = wall
    if err:
        row["error"] = err
        # Systems the worker never reached say why.
        for s in ("eager", "kiln", "onnxruntime", "inductor"):
            c = row["systems"].setdefault(s, {})
            if not any(k in c for k in ("ms", "na", "fail")):
                c["na"] = f"not run: {err}"
    return row


def driver(args) -> int:
    sys.path.insert(0, str(HERE))
    from models import MODELS
    import report

    names = list(MODELS) if not args.models else [m.strip() for m in args.models.split(",")]
    bad = [m for m in names if m not in MODELS]
    if bad:
        print(f"unknown model(s): {', '.join(bad)}; known: {', '.join(MODELS)}")
        return 2
    threads = [int(t) for t in args.threads.split(",")]
    quick = args.quick
    timeout = 240 if quick else 1800
    start = time.perf_counter()
    busy0, own0 = report.busy_cpu_seconds(), report.own_cpu_seconds()
    rows = []
    first_wall: dict = {}
    for ti, n in enumerate(threads):
        for name in names:
            spec = MODELS[name]
            skip = ""
            if quick and spec.quick_skip_inductor:
                skip = QUICK_SKIP
            elapsed = time.perf_counter() - start
            if quick and ti > 0:
                # Later thread counts only while the five-minute budget holds.
                est = 1.3 * first_wall.get(name, 30.0)
                if elapsed + est > QUICK_BUDGET_S:
                    rows.append({"model": name, "about": spec.about, "threads": n,
                                 "train": spec.train, "skipped":
                                 "skipped in QUICK (time budget)", "systems": {}})
                    print(f"[{elapsed:6.1f}s] {name} @ {n} thread(s): skipped (QUICK budget)",
                          flush=True)
                    continue
                # Inductor's cold compile dominates; QUICK runs it at the
                # first thread count only.
                skip = skip or QUICK_SKIP
            print(f"[{elapsed:6.1f}s] {name} @ {n} thread(s) ...", end="", flush=True)
            row = run_one(name, n, quick, skip, timeout)
            first_wall.setdefault(name, row["wall_s"])
            rows.append(row)
            print(f" {row['wall_s']:.1f}s" + (f"  ({row['error']})" if row.get("error") else ""),
                  flush=True)
    total = time.perf_counter() - start
    busy1, own1 = report.busy_cpu_seconds(), report.own_cpu_seconds()
    other = None
    if busy0 is not None and busy1 is not None:
        # CPU that processes other than this benchmark used, in cores.
        other = round(max(0.0, (busy1 - busy0) - (own1 - own0)) / total, 2)
    meta = report.machine_meta(threads, quick, total, other)
    results = {"meta": meta, "rows": rows}
    out_dir = Path(args.out_dir)
    report.write_all(results, out_dir)
    print(f"\ntotal {total:.0f}s; wrote {out_dir}/results.json, results.png, results.md")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="fewer runs; 1-thread pass only within a 5-minute budget")
    ap.add_argument("--threads", default="2,1", help="thread counts, e.g. 2,1")
    ap.add_argument("--models", default="", help="comma-separated subset of models")
    ap.add_argument("--out-dir", default=str(HERE), help="where results.* go")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    # internal: the per-model worker process
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--skip-inductor", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        sys.path.insert(0, str(HERE))
        from models import MODELS
        for s in MODELS.values():
            print(f"{s.name:18s} {s.about}")
        return 0
    if args.worker:
        args.threads_one = int(args.threads)
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
