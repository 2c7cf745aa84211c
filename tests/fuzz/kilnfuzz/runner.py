"""The fuzzing loop and its command line (tests/fuzz/kiln_fuzz.py).

Graph i of run S is program_for(S, i): the same program on every machine,
so `--seed S --only I` reruns one graph. Which path it takes is also a
function of i: every `trace_every`-th graph goes through kiln.trace, every
`compile_every`-th through torch.compile(backend="kiln") with a training
step, every `dynamic_every`-th through kiln.trace with symbolic sizes (run
at several sizes), the rest through the fast path, half of those as
fast-nhwc (the fast path with every conv region channels-last:
paths.PATH_ENV); every tenth graph runs kiln with two
threads, the others with one (kernels split work differently). With
--bf16-every K, every K-th graph runs in bf16 instead (bf16.py), its path
taken in turn from BF16_TURNS (and bf16-compile every BF16_COMPILE_EVERY-th turn).
With --quant-every K, every K-th graph (before any other path) is drawn from
the quant mode's kinds, with at least one linear layer or embedding kiln
quantizes, and goes through kiln.trace with weights_dtype taken in turn
from quant.MODES (quant.py: the "quant:<mode>" paths).

Graphs run in worker processes (--jobs), so a crash or a hang in kiln's C
code is caught, named and shrunk instead of ending the run. A failure is
shrunk (shrink.py) and written as a standalone script (repro.py) under
--out; the script is checked to fail on its own.
"""

import argparse
import multiprocessing as mp
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from kilnfuzz.known import ACTIVE, KNOWN

from kiln.progress import Progress

CRASH_TIMEOUT = 120.0  # seconds one graph may take before it counts as a hang


@dataclass
class Config:
    seed: int = 0
    trace_every: int = 20
    compile_every: int = 200
    reference_every: int = 0  # graphs on the reference target too (0: none)
    dynamic_every: int = 40  # graphs through kiln.trace with symbolic sizes (0: none)
    skip_known: tuple = ACTIVE
    shrink: bool = True
    out: str = "build/fuzz"
    verify: bool = True  # run each reproducer script to check it fails
    shrink_seconds: float = 120.0  # per failure
    bf16_every: int = 0  # graphs in bf16 (bf16.py; 1: every graph; 0: none)
    # float32 graphs draw wide convolutions and half the fast ones run as
    # fast-nhwc (session 18); False (--narrow): the programs and paths of
    # the float32 runs before, to rerun their graphs (ops.NARROW_KINDS)
    wide: bool = True
    quant_every: int = 0  # graphs through kiln.trace with quantized weights (quant.py; 0: none)


# A bf16 graph's path, by its turn among the bf16 graphs (index // bf16_every);
# every BF16_COMPILE_EVERY-th turn trains under autocast (bf16-compile; none
# with --compile-every 0).
BF16_TURNS = ("bf16", "bf16-trace", "bf16-engine", "bf16-autocast", "bf16-compute")
BF16_COMPILE_EVERY = 20


def path_for(index, cfg):
    if cfg.quant_every and index % cfg.quant_every == 0:
        from kilnfuzz.quant import MODES, path_of

        return path_of(MODES[(index // cfg.quant_every) % len(MODES)])
    if cfg.bf16_every and index % cfg.bf16_every == cfg.bf16_every // 2:
        turn = index // cfg.bf16_every
        if cfg.compile_every and turn % BF16_COMPILE_EVERY == BF16_COMPILE_EVERY - 1:
            return "bf16-compile"
        return BF16_TURNS[turn % len(BF16_TURNS)]
    if cfg.compile_every and index % cfg.compile_every == cfg.compile_every - 1:
        return "compile"
    if cfg.trace_every and index % cfg.trace_every == cfg.trace_every // 2:
        return "trace"
    if cfg.dynamic_every and index % cfg.dynamic_every == cfg.dynamic_every * 5 // 8:
        return "dynamic"
    if cfg.reference_every and index % cfg.reference_every == cfg.reference_every // 3:
        return "reference"
    return "fast-nhwc" if cfg.wide and index % 4 >= 2 else "fast"


def threads_for(index, cfg=None):
    """Every tenth graph runs with two threads; every tenth bf16 graph (by
    its turn among them) too, whatever --bf16-every is."""
    if cfg is not None and cfg.bf16_every and path_for(index, cfg).startswith("bf16"):
        index //= cfg.bf16_every
    return 2 if index % 10 == 3 else 1


@dataclass
class Result:
    index: int
    status: str
    path: str
    detail: str = ""
    unsupported: tuple = ()
    repro: str = ""  # the reproducer's file
    steps: int = 0


def run_one(index, cfg, log=None, stage=None):
    """Evaluates graph `index`; on failure shrinks it and writes the script.
    stage(name), if given, hears where the work is ("eager", "kiln",
    "shrink"): a worker's last stage says whose code a crash was in."""
    import torch

    from kilnfuzz.evaluate import evaluate

    torch.set_num_threads(threads_for(index, cfg))
    path = path_for(index, cfg)
    try:
        program = program_of(index, cfg, path)
        out = evaluate(program, path, cfg.skip_known, stage=stage)
    except Exception:  # noqa: BLE001 -- a bug of the fuzzer's own, not kiln's: report it as one
        import traceback

        return Result(index, "fuzzer-error", path, traceback.format_exc(limit=-3))
    res = Result(index, out.status, path, out.detail, out.unsupported, steps=len(program.steps))
    if out.status == "fail" and cfg.shrink:
        if stage:
            stage("shrink")
        res.repro, res.steps = report_failure(out, cfg, f"graph {index}", lambda p: evaluate(p, path, (), 1), log)
    return res


def program_of(index, cfg, path):
    """Graph `index`'s program on `path`: generate.program_for from the
    path's kinds; a quant path's the first draw with a layer kiln
    quantizes."""
    from kilnfuzz.generate import program_for
    from kilnfuzz.ops import kinds_for

    if path.startswith("quant:"):
        from kilnfuzz.quant import program_for_quant

        return program_for_quant(cfg.seed, index)
    return program_for(cfg.seed, index, kinds_for(path, cfg.wide))


def report_failure(out, cfg, what, evaluate_one, log=None):
    """Shrinks a failure and writes its reproducer; (file, steps)."""
    from kilnfuzz.evaluate import Outcome
    from kilnfuzz.shrink import shrink

    sig = out.signature

    def same(p):
        o = evaluate_one(p)
        return o.status == out.status and o.signature == sig

    small, evals = shrink(out.program, same, seconds=cfg.shrink_seconds, log=log)
    final = evaluate_one(small)
    if final.status != out.status:  # cannot happen unless kiln is nondeterministic
        small, final = out.program, out
    return write_repro(small, final if isinstance(final, Outcome) else out, cfg, what, evals), len(small.steps)


def write_repro(program, outcome, cfg, what, evals=0):
    from kilnfuzz.ops import KINDS
    from kilnfuzz.program import resolve
    from kilnfuzz.repro import reproduces, script

    os.makedirs(cfg.out, exist_ok=True)
    res = resolve(program, KINDS)
    # A dynamic-path failure is at sizes the fuzzer drew: its script (a
    # trace at the example's) may not reproduce it; --only reruns the graph.
    hows = {"compile": ["compile"], "reference": ["reference"], "dynamic": ["trace"], "bf16": ["export", "trace"],
            "bf16-engine": ["export", "trace"], "bf16-trace": ["trace"], "bf16-autocast": ["trace"],
            "bf16-compute": ["trace"], "bf16-compile": ["compile"]}.get(outcome.path, ["trace", "export"])
    if outcome.path.startswith("quant:"):
        hows = ["quant"]
    base = os.path.join(cfg.out, f"repro_seed{cfg.seed}_{what.replace(' ', '')}")
    header = (f"kiln fuzz reproducer: seed {cfg.seed}, {what}, {outcome.path} path "
              f"(shrunk in {evals} evaluations; rerun with --seed {cfg.seed} --only {what.split()[-1]}).")
    for how in hows:
        path = f"{base}.py"
        with open(path, "w") as f:
            f.write(script(res, outcome, header + f" Compiled with: {how}.", how))
        if not cfg.verify or reproduces(path):
            return path
    with open(path, "a") as f:
        f.write("# NOTE: this script did not reproduce the failure outside the fuzzer.\n")
    return path


# ---- worker processes ---------------------------------------------------------


def _worker(conn, cfg):
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    import warnings

    warnings.filterwarnings("ignore")
    import kiln  # noqa: F401 -- fail here, before "ready", if kiln does not import (a broken build)

    conn.send(("stage", "ready"))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, payload = msg
        if kind == "graph":
            conn.send(run_one(payload, cfg, stage=lambda name: conn.send(("stage", name))))
        else:  # ("eval", (program, path)): one shrinking step of a crash
            from kilnfuzz.evaluate import evaluate

            o = evaluate(payload[0], payload[1], (), 1)
            conn.send((o.status, o.signature))


class Worker:
    def __init__(self, ctx, cfg):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, cfg), daemon=True)
        self.proc.start()
        child.close()
        self.task, self.started, self.stage, self.ready = None, 0.0, "", False

    def send(self, kind, payload):
        self.task, self.started, self.stage = (kind, payload), time.monotonic(), ""
        try:
            self.conn.send((kind, payload))
        except OSError:  # it died: the supervision loop sees its sentinel
            pass

    def receive(self):
        """The task's result, or None after a stage report (recorded)."""
        try:
            msg = self.conn.recv()
        except OSError:
            raise EOFError from None
        if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "stage":
            if msg[1] == "ready":
                self.ready = True
            else:
                self.stage = msg[1]
            return None
        return msg

    def stop(self, kill=False):
        if kill:
            self.proc.kill()
        else:
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def _crash_evaluator(ctx, cfg, path):
    """evaluate_one for the shrinker that survives crashes: each program in
    a worker; a dead worker means the program crashed it."""
    from kilnfuzz.evaluate import Outcome

    state = {"w": None}

    def evaluate_one(program):
        if state["w"] is None:
            state["w"] = Worker(ctx, cfg)
        w = state["w"]
        w.send("eval", (program, path))
        deadline = time.monotonic() + CRASH_TIMEOUT
        try:
            while w.conn.poll(max(deadline - time.monotonic(), 0)):
                r = w.receive()
                if r is not None:
                    return Outcome(r[0], "", path, signature=r[1], program=program)
        except EOFError:
            pass
        w.stop(kill=True)
        state["w"] = None
        return Outcome("crash", "the process died", path, signature="crash", program=program)

    return evaluate_one, lambda: state["w"] and state["w"].stop()


def run_parallel(indices, cfg, jobs, budget, on_result):
    ctx = mp.get_context("spawn")
    todo = list(indices)[::-1]
    workers = [Worker(ctx, cfg) for _ in range(jobs)]
    start = time.monotonic()
    try:
        while True:
            for i, w in enumerate(workers):
                if w.task is None and todo and (budget is None or time.monotonic() - start < budget):
                    w.send("graph", todo.pop())
            busy = [w for w in workers if w.task is not None]
            if not busy:
                break
            ready = mp.connection.wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
            for j, w in enumerate(workers):
                if w.task is None:
                    continue
                index = w.task[1]
                dead = w.proc.sentinel in ready and not w.conn.poll()
                hung = time.monotonic() - w.started > CRASH_TIMEOUT * (4 if cfg.shrink else 1)
                if w.conn in ready and w.conn.poll():
                    try:
                        r = w.receive()
                        while r is None and w.conn.poll():
                            r = w.receive()
                        if r is not None:
                            on_result(r)
                            w.task = None
                        continue
                    except EOFError:
                        dead = True
                if dead and not w.ready:
                    raise RuntimeError("a fuzzing worker died before it was ready (does `import kiln` work? "
                                       "its error is above)")
                if dead or hung:
                    stage = w.stage
                    w.stop(kill=True)
                    workers[j] = Worker(ctx, cfg)
                    on_result(_crash_result(index, cfg, ctx, "hang" if hung else "crash", stage))
    finally:
        for w in workers:
            w.stop()


def _crash_result(index, cfg, ctx, status, stage):
    """A worker died or hung on graph `index` during `stage`. A crash in kiln
    is shrunk with each candidate in a worker of its own; one in eager
    PyTorch or the generator ("eager") is the fuzzer's to avoid, and is not
    replayed here: this process must survive it."""
    from kilnfuzz.evaluate import Outcome

    path = path_for(index, cfg)
    res = Result(index, status, path, f"the worker process {'hung' if status == 'hang' else 'died'} "
                                      f"(stage: {stage or 'generating'})")
    if stage in ("", "eager"):
        res.status = "fuzzer-error"
        res.detail += ": eager PyTorch or the generator, not kiln; rerun with --only to see it"
        return res
    if cfg.shrink and status == "crash" and stage == "kiln":
        evaluate_one, close = _crash_evaluator(ctx, cfg, path)
        try:
            program = program_of(index, cfg, path)
            out = Outcome("crash", res.detail, path, signature="crash", program=program)
            res.repro, res.steps = report_failure(out, cfg, f"graph {index}", evaluate_one)
        finally:
            close()
    return res


# ---- the command line -----------------------------------------------------------


# Statuses that count as failed: kiln's failures, and errors of the fuzzer
# itself (which must not pass unnoticed either).
FAILED = ("fail", "crash", "hang", "fuzzer-error")


@dataclass
class Tally:
    status: Counter = field(default_factory=Counter)
    paths: Counter = field(default_factory=Counter)
    unsupported: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    by_path: Counter = field(default_factory=Counter)  # (path, status)

    def add(self, r):
        self.status[r.status] += 1
        self.paths[r.path] += 1
        self.by_path[(r.path, r.status)] += 1
        self.unsupported.update(r.unsupported)
        if r.status in FAILED:
            self.failures.append(r)

    @property
    def n(self):
        return sum(self.status.values())

    @property
    def failed(self):
        return sum(self.status[s] for s in FAILED)

    def summary(self, seconds):
        s = self.status
        paths = ", ".join(f"{k} {v}" for k, v in sorted(self.paths.items()))
        return (f"{s['pass']} passed, {self.failed} failed ({s['unsupported']} unsupported, "
                f"{s['ill']} ill-conditioned, {s['known']} known-bug skipped, {s['skipped']} not applicable; {paths}; "
                f"{self.n / max(seconds, 1e-9):.1f} graphs/s)")

    def per_path(self):
        """One line per path: its graphs by status."""
        lines = []
        for path in sorted(self.paths):
            parts = [f"{st} {n}" for (p, st), n in sorted(self.by_path.items()) if p == path]
            lines.append(f"  {path}: {', '.join(parts)}")
        return "\n".join(lines)


def describe(r):
    text = f"FAIL graph {r.index} [{r.path}] {r.status}: {r.detail}"
    if r.repro:
        text += f"\n  reproducer ({r.steps} steps): {r.repro}"
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description="kiln's random-graph differential fuzzer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", type=int, default=1000, help="graphs to run")
    ap.add_argument("--start", type=int, default=0, help="first graph index")
    ap.add_argument("--only", type=int, default=None, help="run graph I alone, in this process")
    ap.add_argument("--time-budget", type=float, default=None, help="stop starting graphs after SEC seconds")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (0: run in this process)")
    ap.add_argument("--trace-every", type=int, default=20)
    ap.add_argument("--compile-every", type=int, default=200)
    ap.add_argument("--dynamic-every", type=int, default=40,
                    help="every N-th graph through kiln.trace with symbolic sizes, run at several (0: none)")
    ap.add_argument("--reference-every", type=int, default=0,
                    help="run 1 graph in K on kiln's reference target (the scalar reference kernels)")
    ap.add_argument("--bf16-every", type=int, default=0,
                    help="every K-th graph in bf16 (1: every graph), through the bf16, bf16-trace, bf16-engine, "
                         "bf16-autocast and bf16-compute paths in turn, and bf16-compile "
                         "(tests/fuzz/kilnfuzz/bf16.py)")
    ap.add_argument("--quant-every", type=int, default=0,
                    help="every K-th graph with a linear layer or embedding, through kiln.trace with "
                         "weights_dtype int8, int8:a8, int4, int4:g128, int4:asym, ... in turn "
                         "(tests/fuzz/kilnfuzz/quant.py)")
    ap.add_argument("--narrow", action="store_true",
                    help="float32 graphs as before session 18: no wide convolutions, no fast-nhwc path "
                         "(to rerun a graph of an earlier run with --only)")
    ap.add_argument("--skip-known", default=",".join(ACTIVE),
                    help=f"known bugs to skip, comma-separated (known: {', '.join(KNOWN) or 'none'})")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--no-verify", action="store_true", help="do not run reproducers to check them")
    ap.add_argument("--out", default="build/fuzz", help="where reproducers are written")
    ap.add_argument("--progress", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--show", action="store_true", help="with --only: print the reproducer script")
    a = ap.parse_args(argv)
    skip = tuple(s for s in a.skip_known.split(",") if s)
    for s in skip:
        if s not in KNOWN:
            ap.error(f"unknown known-bug name {s!r} (known: {', '.join(KNOWN) or 'none'})")
    cfg = Config(a.seed, a.trace_every, a.compile_every, a.reference_every, a.dynamic_every, skip,
                 not a.no_shrink, a.out, not a.no_verify, bf16_every=a.bf16_every, wide=not a.narrow,
                 quant_every=a.quant_every)
    if a.only is not None:
        return _only(a.only, cfg, a.show)
    tally, t0 = Tally(), time.monotonic()
    bar = Progress(a.n, "fuzz", enabled={"on": True, "off": False}.get(a.progress), interval=0.5)

    def on_result(r):
        tally.add(r)
        if r.status in FAILED:
            bar.write(describe(r))
        bar.update(status=tally.summary(time.monotonic() - t0))

    indices = range(a.start, a.start + a.n)
    try:
        if a.jobs <= 0:
            import warnings

            warnings.filterwarnings("ignore")
            for i in indices:
                if a.time_budget is not None and time.monotonic() - t0 > a.time_budget:
                    break
                on_result(run_one(i, cfg))
        else:
            run_parallel(indices, cfg, a.jobs, a.time_budget, on_result)
    finally:
        bar.close()
    if tally.unsupported:
        print("unsupported ops: " + ", ".join(f"{k} x{v}" for k, v in tally.unsupported.most_common()))
    print(tally.per_path())
    print(tally.summary(time.monotonic() - t0))
    return 1 if tally.failed else 0


def _only(index, cfg, show):
    import warnings

    warnings.filterwarnings("ignore")
    r = run_one(index, cfg, log=print)
    print(describe(r) if r.status in FAILED else f"graph {index} [{r.path}]: {r.status} {r.detail}")
    if show or r.repro:
        from kilnfuzz.ops import KINDS
        from kilnfuzz.program import resolve

        if show and not r.repro:
            from kilnfuzz.evaluate import Outcome
            from kilnfuzz.repro import script

            res = resolve(program_of(index, cfg, r.path), KINDS)
            how = {"bf16": "export", "bf16-engine": "export", "bf16-compile": "compile"}.get(r.path, "trace")
            if r.path.startswith("quant:"):
                how = "quant"
            print(script(res, Outcome(r.status, r.detail, r.path), f"graph {index}", how))
        elif r.repro:
            print(open(r.repro).read())
    return 1 if r.status in FAILED else 0
