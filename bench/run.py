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

Generation rows (model.generate(): time to first token, decode tokens/s,
the weight-streaming roofline) and varying-shape rows (one symbolic kiln
artifact at many shapes) have their own workers and tables: see
bench/generation.py.
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
# In QUICK, generation and varying-shape rows run after every other row, each
# only if its estimated cost (seconds: build, eager references, kiln's
# compile, a few calls; batch 1 at the first thread count) still fits.
QUICK_OPTIONAL = {"generate": 45.0, "shapes": 30.0}
QUICK_SKIP = "skipped in QUICK: Inductor's compile does not fit the 5-minute budget"
QUICK_SKIP_LATER = ("skipped in QUICK: Inductor compiles for one thread count; "
                    "another costs a second compile")


def timing_params(quick: bool, heavy: bool) -> dict:
    """For time_rounds: the budget covers all systems of one thread count."""
    if quick:
        return {"warmup": 1, "runs": 10, "budget_s": 3.0 if heavy else 1.5}
    return {"warmup": 5, "runs": 50, "budget_s": 45.0 if heavy else 24.0}


# --------------------------------------------------------------------------
# Worker: one model, in one process, at every thread count.
#
# Inference rows prepare each system once (build, eager reference, kiln
# trace, ONNX export, Inductor compile) and then, per thread count, switch
# every system to it (torch.set_num_threads, kiln's Model.set_threads, an
# ORT session per count) and time them interleaved (peers.time_rounds).
# Training rows run one thread count per process: kiln's torch.compile
# backend has no handle to switch its pool.
# --------------------------------------------------------------------------

# Where each system's preparation (import, trace/export/compile, first call,
# output check) is counted.
PREP_PHASE = {"eager": "eager ref", "kiln": "kiln", "onnxruntime": "ort",
              "inductor": "inductor", "kiln_bf16": "kiln low precision",
              "kiln_int8": "kiln low precision", "kiln_int4": "kiln low precision",
              "kiln_int4a8": "kiln low precision",
              "eager_bf16": "eager ref", "kiln_bf16_model": "kiln low precision",
              "openvino": "openvino", "openvino_default": "openvino"}


def check(system, ref, out, exact=None) -> dict:
    """The output check of one system: fp32's tolerance, or for a
    low-precision system its cosine and relative error (peers.compare_lowp;
    a quantized one held to exact, its dequantized-weights reference)."""
    import peers
    if system not in peers.LOWP:
        return peers.compare(ref, out)
    near = "a8" in str(peers.KILN_LOWP.get(system, {}).get("weights_dtype", "")).split(":")
    return peers.compare_lowp(ref, out, exact, near)


class Phases:
    """Where a worker's wall time goes, in seconds."""

    def __init__(self):
        self.t = {}

    def add(self, name, secs):
        self.t[name] = self.t.get(name, 0.0) + secs

    def merge(self, d):
        for k, v in d.items():
            if isinstance(v, (int, float)):
                self.add(k, v)


def worker(args) -> int:
    t_enter = time.time()
    threads = [int(t) for t in args.threads.split(",")]
    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    import torch
    torch.set_num_threads(threads[0])
    sys.path.insert(0, str(HERE))
    import peers
    from models import MODELS

    spec = MODELS[args.worker]
    tp = timing_params(args.quick, spec.heavy)
    ph = Phases()
    ph.add("startup", t_enter - (args.spawned or t_enter))
    ph.add("imports", time.time() - t_enter)
    if spec.kind in ("generate", "shapes"):
        return generation_worker(spec, args, threads, ph)
    rows = {n: {"model": spec.name, "about": spec.about, "threads": n, "train": spec.train,
                "quick": args.quick, "timing": tp, "systems": {}} for n in threads}
    out_path = Path(args.out)
    extra = {}

    def save():
        out_path.write_text(json.dumps({"rows": [rows[n] for n in threads],
                                        "phases": ph.t, "saved_at": time.time()} | extra,
                                       indent=1))

    t0 = time.perf_counter()
    model, inputs = spec.build()   # imports transformers when the model needs it
    if "transformers" in sys.modules:
        import transformers
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    ph.add("build", time.perf_counter() - t0)
    for r in rows.values():
        r["build_s"] = ph.t["build"]
    save()

    first = threads[0]
    prepared = {}
    ref = None
    exact = {}   # a weight-only quantized system's exact reference (peers.compare_lowp)
    # Prepare every system at the first thread count; check its output.
    for system in peers.SYSTEMS:
        cell = rows[first]["systems"].setdefault(system, {})
        if system == "inductor" and args.skip_inductor:
            cell["na"] = args.skip_inductor
            continue
        t_sys = time.perf_counter()
        try:
            if spec.train:
                call, prep, out = peers.prepare_train(system, model, inputs, first)
                p = peers.Prepared(call, prep)
            else:
                if system == "onnxruntime":
                    p = peers.prepare_onnxruntime(model, inputs, first, name=spec.name,
                                                  dynamo_first=spec.onnx_dynamo_first)
                else:
                    p = peers.INFER[system](model, inputs, first)
                t_out = time.perf_counter()
                out = p.call()
                ph.add(f"{system} first call", time.perf_counter() - t_out)
            if spec.train and system in ("kiln", "kiln_bf16", "inductor"):
                ph.add(PREP_PHASE[system] + " compile", p.prep)
            if "exporter" in p.phases:
                extra["exporter"] = p.phases["exporter"]
            cell["prep_s"] = p.prep
            if "precision" in p.phases:
                cell["precision"] = p.phases["precision"]
            if system == "eager":
                ref = out
            else:
                exact[system] = peers.weight_only_reference(system, model, inputs)
                cell.update(check(system, ref, out, exact[system]))
                if not cell.get("ok", True):
                    cell["fail"] = cell.get("why") or "wrong output"
            prepared[system] = p
        except peers.Unavailable as e:
            cell["na"] = str(e)
        except Exception as e:   # a crash in one system must not lose the row
            cell["na"] = ("n/a: kiln does not train yet (" + peers.short(e, 80) + ")"
                          if spec.train and system == "kiln" else peers.short(e))
            if system == "eager":
                save()
                raise
        cell["wall_s"] = time.perf_counter() - t_sys
        ph.add(PREP_PHASE[system], cell["wall_s"])
        save()

    for n in threads:
        row = rows[n]
        if n != first:
            if args.deadline and time.time() > args.deadline:
                row["skipped"] = "skipped in QUICK (time budget)"
                row["systems"] = {}
                save()
                continue
            # Later thread counts: same prepared systems, switched over.
            for system in peers.SYSTEMS:
                src = rows[first]["systems"].get(system, {})
                cell = row["systems"].setdefault(system, {})
                if system not in prepared:
                    cell.update({k: src[k] for k in ("na", "fail") if k in src})
                    continue
                if system == "inductor" and args.quick:
                    cell["na"] = QUICK_SKIP_LATER
                    continue
                cell["prep_s"] = src.get("prep_s", 0.0)
                if "precision" in src:
                    cell["precision"] = src["precision"]
                if "fail" in src:
                    cell["fail"] = src["fail"]
        calls = {}
        t_sw = time.perf_counter()
        sess0 = sum(p.phases.get("ort session", 0.0) for p in prepared.values())
        for system, p in prepared.items():
            cell = row["systems"][system]
            if any(k in cell for k in ("na", "fail")):
                continue
            try:
                calls[system] = p.at(n)
                if n != first and system != "eager" and not spec.train:
                    # The output is checked again at this thread count.
                    cell.update(check(system, ref, calls[system](), exact.get(system)))
                    if not cell.get("ok", True):
                        cell["fail"] = cell.get("why") or "wrong output"
                        del calls[system]
            except peers.Unavailable as e:
                cell["na"] = str(e)
            except Exception as e:
                cell["na"] = peers.short(e)
        sess1 = sum(p.phases.get("ort session", 0.0) for p in prepared.values())
        if n != first:   # the first count's switch is free; its check was above
            ph.add("switch+check", time.perf_counter() - t_sw - (sess1 - sess0))
        t_time = time.perf_counter()
        # All systems now run at n threads (torch's count is process-wide and
        # every Prepared.at set it to n).
        timed = peers.time_rounds(calls, **tp)
        ph.add(f"timing {n}t", time.perf_counter() - t_time)
        for system, res in timed.items():
            row["systems"][system].update(res)
        save()
    for p in prepared.values():
        if "ort export" in p.phases:
            ph.add("ort export", p.phases["ort export"])
        if "ort session" in p.phases:   # the sessions after the first count's
            ph.add("ort session later", p.phases["ort session"] - p.phases.get("first session", 0))
    for r in rows.values():
        r["done"] = True
    save()
    return 0


def generation_worker(spec, args, threads, ph) -> int:
    """Generation and varying-shape rows (bench/generation.py): one process
    per model, every batch or shape and thread count in it."""
    import generation
    if "transformers" in sys.modules or spec.kind == "generate":
        import transformers
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
    rows = []
    out_path = Path(args.out)

    def save():
        out_path.write_text(json.dumps({"rows": rows, "phases": ph.t, "saved_at": time.time()},
                                       indent=1))

    run = generation.gen_worker if spec.kind == "generate" else generation.shapes_worker
    rc = run(spec, args, threads, rows, ph, save)
    save()
    return rc


# --------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------

# Fork servers (bench/forkserver.py) by OMP_NUM_THREADS, which OpenMP reads
# once at load: workers fork from a process that has torch and transformers
# imported. KILN_BENCH_NO_FORK=1, or a server that cannot fork safely, falls
# back to a fresh interpreter per worker.
_SERVERS: dict = {}


def _fork_server(env, n):
    if os.environ.get("KILN_BENCH_NO_FORK") == "1":
        return None
    if n not in _SERVERS:
        from forkserver import ForkServer
        server = ForkServer(env)
        if not server.ready:
            print(f"(fork server unavailable: {server.why}; spawning workers)", flush=True)
        _SERVERS[n] = server if server.ready else None
    return _SERVERS[n]


def _close_fork_servers():
    for server in _SERVERS.values():
        if server:
            server.close()
    _SERVERS.clear()


def run_one(name, threads, quick, skip_inductor, timeout, deadline=0.0):
    """One worker process: model `name` at each of `threads` (a list);
    returns (rows, info) where info has the phases and the wall time."""
    env = dict(os.environ)
    n = str(max(threads))
    env.update({"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "KILN_NUM_THREADS": n,
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore",
                "TRANSFORMERS_VERBOSITY": "error"})
    # A fresh Inductor cache per process: the reported compile time is a
    # cold compile, and no model's compile helps another's.
    cache = tempfile.mkdtemp(prefix="kiln-bench-inductor-")
    env["TORCHINDUCTOR_CACHE_DIR"] = cache
    env["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
    tlist = ",".join(map(str, threads))
    fd, out = tempfile.mkstemp(prefix=f"kiln-bench-{name}-{tlist.replace(',', '_')}-",
                               suffix=".json")
    os.close(fd)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name,
           "--threads", tlist, "--out", out, "--spawned", repr(time.time())]
    if quick:
        cmd.append("--quick")
    if skip_inductor:
        cmd += ["--skip-inductor", skip_inductor]
    if deadline:
        cmd += ["--deadline", repr(deadline)]
    t0 = time.perf_counter()
    err = ""
    server = _fork_server(env, n)
    if server:
        fd, log = tempfile.mkstemp(prefix=f"kiln-bench-{name}-", suffix=".log")
        os.close(fd)
        rc, timed_out = server.run(cmd[1:], env, log, timeout)
        text = Path(log).read_text(errors="replace")
        os.unlink(log)
        if timed_out:
            err = f"timed out after {timeout:.0f}s"
        elif rc != 0:
            tail = [l for l in text.strip().splitlines() if l.strip()][-1:] or ["?"]
            err = f"worker exited {rc}: {tail[0][:150]}"
    else:
        try:
            p = subprocess.run(cmd, env=env, cwd=str(ROOT), timeout=timeout,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if p.returncode != 0:
                tail = [l for l in p.stdout.strip().splitlines() if l.strip()][-1:] or ["?"]
                err = f"worker exited {p.returncode}: {tail[0][:150]}"
        except subprocess.TimeoutExpired:
            err = f"timed out after {timeout:.0f}s"
    wall = time.perf_counter() - t0
    t_end = time.time()
    try:
        got = json.loads(Path(out).read_text())
    except Exception:
        got = {}
    finally:
        os.unlink(out)
        shutil.rmtree(cache, ignore_errors=True)
    rows = got.get("rows") or _placeholder_rows(name, threads)
    for row in rows:
        if err:
            row["error"] = err
            # Systems the worker never reached say why.
            for s in row.get("system_names", ("eager", "kiln", "onnxruntime", "inductor")):
                c = row["systems"].setdefault(s, {})
                if not row.get("skipped") and not any(k in c for k in ("ms", "decode_tps", "na",
                                                                       "fail")):
                    c["na"] = f"not run: {err}"
    info = {"model": name, "threads": threads, "wall_s": wall,
            "phases": got.get("phases", {}), "exporter": got.get("exporter")}
    if got.get("saved_at"):   # the worker's exit (Inductor's compile workers stop then)
        info["exit_s"] = max(0.0, t_end - got["saved_at"])
    for row in rows:
        row["wall_s"] = wall
    return rows, info


def _placeholder_rows(name, threads, skipped=""):
    """The rows a worker would have written, for one that wrote none (it
    failed early, or QUICK skipped it)."""
    sys.path.insert(0, str(HERE))
    from models import MODELS
    spec = MODELS[name]
    base = {"model": name, "about": spec.about, "train": spec.train, "systems": {}}
    if skipped:
        base["skipped"] = skipped
    if spec.kind == "generate":
        return [dict(base, kind="generate", threads=t, batch=b, systems={})
                for t in threads for b in spec.params["batches"]]
    if spec.kind == "shapes":
        return [dict(base, kind="shapes", threads=t, shape=list(s), systems={})
                for t in threads for s in spec.params["shapes"]]
    return [dict(base, threads=t, systems={}) for t in threads]


# Rough cost of a model's first thread count in QUICK on a fresh, quiet
# machine, seconds (from the budget table: start + imports ~4, build up to 7,
# trace ~5-8, legacy ONNX export + session ~3-8, timing ~3, Inductor's cold
# compile ~10 where QUICK runs it). Only used to decide whether QUICK has
# room for a model's later thread counts; scaled by how the models so far
# compared with their estimates (a loaded machine is slower throughout).
def _estimate(spec) -> float:
    if spec.kind in QUICK_OPTIONAL:
        return QUICK_OPTIONAL[spec.kind]
    base = 25.0 if spec.heavy else 12.0
    return base + (0.0 if spec.quick_skip_inductor else 10.0)


BUDGET_COLS = ("startup", "imports", "build", "eager ref", "kiln", "ort", "ort export",
               "inductor", "switch+check", "ort session later")
BUDGET_SHORT = {"startup": "start", "imports": "import", "build": "build", "eager ref": "eager",
                "kiln": "kiln", "ort": "ort", "ort export": "(export)", "inductor": "inductor",
                "switch+check": "switch", "ort session later": "ort sess"}


def phase_line(info) -> str:
    """One worker's phases on one line (printed as the run goes)."""
    ph = dict(info["phases"])
    if info.get("exit_s"):
        ph["exit"] = info["exit_s"]
    return "  ".join(f"{k} {v:.1f}" for k, v in ph.items() if v >= 0.05)


def budget_table(infos, total) -> str:
    """Where the run's time went, per worker process (seconds). kiln, ort and
    inductor: preparing that system (import, trace / export + session /
    compile, first call, output check); (export) is the part of ort that
    torch.onnx.export took; ort sess: sessions for later thread counts."""
    tcols = sorted({k for i in infos for k in i["phases"] if k.startswith("timing ")},
                   key=lambda k: -int(k.split()[1].rstrip("t")))
    heads = (["model", "thr"] + [BUDGET_SHORT[c] for c in BUDGET_COLS] + tcols
             + ["exit", "other", "wall"])
    lines = []
    sums = [0.0] * (len(heads) - 2)
    for i in infos:
        ph = i["phases"]
        vals = [ph.get(c, 0.0) for c in BUDGET_COLS] + [ph.get(c, 0.0) for c in tcols]
        counted = sum(vals) - ph.get("ort export", 0.0)   # export is inside ort
        vals += [i.get("exit_s", 0.0)]
        counted += i.get("exit_s", 0.0)
        vals += [i["wall_s"] - counted, i["wall_s"]]
        sums = [a + b for a, b in zip(sums, vals)]
        lines.append([i["model"], ",".join(map(str, i["threads"]))] + [f"{v:.1f}" for v in vals])
    lines.append(["sum", ""] + [f"{v:.1f}" for v in sums])
    w = [max(len(h), *(len(l[k]) for l in lines)) for k, h in enumerate(heads)]
    fmt = lambda cells: "  ".join(c.ljust(w[k]) if k < 2 else c.rjust(w[k])
                                  for k, c in enumerate(cells))
    out = [f"time budget, seconds (wall {total:.0f}; noisy when the machine is shared):",
           fmt(heads)]
    out += [fmt(l) for l in lines]
    return "\n".join(out)


def driver(args) -> int:
    sys.path.insert(0, str(HERE))
    from models import MODELS
    import report

    from kiln.progress import Progress

    names = list(MODELS) if not args.models else [m.strip() for m in args.models.split(",")]
    bad = [m for m in names if m not in MODELS]
    if bad:
        print(f"unknown model(s): {', '.join(bad)}; known: {', '.join(MODELS)}")
        return 2
    threads = [int(t) for t in args.threads.split(",")]
    quick = args.quick
    timeout = 240 if quick else 3600
    start = time.perf_counter()
    t_start = time.time()
    busy0, own0 = report.busy_cpu_seconds(), report.own_cpu_seconds()
    rows, infos = [], []
    slow, est_sum, wall_sum = 1.0, 0.0, 0.0
    later = []   # training rows' later thread counts: their own processes, at the end
    optional = [m for m in names if MODELS[m].kind in QUICK_OPTIONAL] if quick else []
    names_now = [m for m in names if m not in optional]
    steps = len(names_now) + len(optional) + sum(len(threads) - 1 for m in names_now if MODELS[m].train)
    bar = Progress(steps, "bench", ticker=True, interval=0.5)
    try:
        for k, name in enumerate(names_now):
            spec = MODELS[name]
            skip = QUICK_SKIP if quick and spec.quick_skip_inductor else ""
            elapsed = time.perf_counter() - start
            if spec.train:
                run_threads, deadline = threads[:1], 0.0
                later += [(name, n) for n in threads[1:]]
            else:
                run_threads = threads
                # QUICK: later thread counts only if the models still to come fit.
                rest = slow * sum(_estimate(MODELS[m]) for m in names_now[k + 1:])
                deadline = t_start + QUICK_BUDGET_S - rest if quick else 0.0
            head = f"[{elapsed:6.1f}s] {name} @ {','.join(map(str, run_threads))} thread(s) ..."
            bar.stage(f"{name} @ {','.join(map(str, run_threads))}t")
            got, info = run_one(name, run_threads, quick, skip, timeout, deadline)
            rows += got
            infos.append(info)
            first_only = info["wall_s"] - sum(v for k, v in info["phases"].items()
                                              if k in ("switch+check", "ort session later")
                                              or (k.startswith("timing ") and k != f"timing {threads[0]}t"))
            est_sum += _estimate(spec)
            wall_sum += first_only
            slow = max(0.8, wall_sum / est_sum)
            bar.write(head + f" {info['wall_s']:.1f}s" + (f"  ({got[0]['error']})" if got[0].get("error") else "")
                      + "".join(f"  [{r['threads']}t skipped: budget]" for r in got if r.get("skipped")))
            bar.write("    " + phase_line(info))
            bar.update()
        first_wall = {i["model"]: i["wall_s"] for i in infos}
        for name, n in later:
            spec = MODELS[name]
            elapsed = time.perf_counter() - start
            if quick and elapsed + 1.2 * first_wall.get(name, 30.0) > QUICK_BUDGET_S:
                rows.append({"model": name, "about": spec.about, "threads": n, "train": spec.train,
                             "skipped": "skipped in QUICK (time budget)", "systems": {}})
                bar.write(f"[{elapsed:6.1f}s] {name} @ {n} thread(s): skipped (QUICK budget)")
                bar.update()
                continue
            bar.stage(f"{name} @ {n}t")
            got, info = run_one(name, [n], quick, QUICK_SKIP if quick else "", timeout)
            rows += got
            infos.append(info)
            bar.write(f"[{elapsed:6.1f}s] {name} @ {n} thread(s) ... {info['wall_s']:.1f}s")
            bar.write("    " + phase_line(info))
            bar.update()
        for name in optional:   # QUICK: what still fits
            spec = MODELS[name]
            elapsed = time.perf_counter() - start
            if elapsed + slow * _estimate(spec) > QUICK_BUDGET_S:
                rows += _placeholder_rows(name, threads, "skipped in QUICK (time budget)")
                bar.write(f"[{elapsed:6.1f}s] {name}: skipped (QUICK budget)")
                bar.update()
                continue
            head = f"[{elapsed:6.1f}s] {name} @ {','.join(map(str, threads))} thread(s) ..."
            bar.stage(f"{name} @ {','.join(map(str, threads))}t")
            # Cut off at the budget's end (what it saved by then is kept).
            left = max(30.0, QUICK_BUDGET_S - elapsed + 10)
            got, info = run_one(name, threads, quick, "", left, t_start + QUICK_BUDGET_S - 10)
            rows += got
            infos.append(info)
            bar.write(head + f" {info['wall_s']:.1f}s" + (f"  ({got[0]['error']})" if got[0].get("error") else ""))
            bar.write("    " + phase_line(info))
            bar.update()
    finally:
        bar.close()
    # The table lists every model at the first thread count, then the next.
    order = {n: k for k, n in enumerate(names)}
    rows.sort(key=lambda r: (threads.index(r["threads"]) if r["threads"] in threads else 99,
                             order.get(r["model"], 99), r.get("batch", 0),
                             tuple(r.get("shape", ()))))
    # Before the CPU accounting: a server's workers count as this run's
    # once the server has been waited for.
    _close_fork_servers()
    total = time.perf_counter() - start
    busy1, own1 = report.busy_cpu_seconds(), report.own_cpu_seconds()
    other = None
    if busy0 is not None and busy1 is not None:
        # CPU that processes other than this benchmark used, in cores.
        other = round(max(0.0, (busy1 - busy0) - (own1 - own0)) / total, 2)
    meta = report.machine_meta(threads, quick, total, other)
    meta["budget"] = [{"model": i["model"], "threads": i["threads"],
                       "wall_s": round(i["wall_s"], 2), "exporter": i.get("exporter"),
                       "exit_s": round(i.get("exit_s", 0.0), 2),
                       "phases": {k: round(v, 2) for k, v in i["phases"].items()}}
                      for i in infos]
    results = {"meta": meta, "rows": rows}
    out_dir = Path(args.out_dir)
    report.write_all(results, out_dir)
    print()
    print(budget_table(infos, total))
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
    ap.add_argument("--spawned", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        sys.path.insert(0, str(HERE))
        from models import MODELS
        for s in MODELS.values():
            print(f"{s.name:18s} {s.about}")
        return 0
    if args.worker:
        rc = worker(args)
        # Everything is saved: skip interpreter teardown (torch's, ORT's and
        # Inductor's compile workers' shutdown cost seconds per process).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
