"""A fork server for the benchmark's per-model workers.

Every worker used to be a fresh interpreter, and each one paid for
importing torch (about 2.5 s) and transformers' model code (about 6 s for
the first BERT, GPT-2 or Llama built in a process): over a minute of a
QUICK run. The server imports those once and forks one child per model, so
each worker still runs in its own process (its own threads, Inductor cache
and ONNX Runtime sessions) but starts warm.

Forking is only safe if the imports started no thread pool a child would
need: a child of a process whose OpenMP pool had started can hang on its
first parallel op (importing torch and transformers does leave two idle
native threads, which a child does not need). So before it says it is
ready, the server forks a probe child that runs parallel torch ops on two
threads; if that fails or takes over 30 s, it says so and the driver spawns
fresh interpreters as before.

Protocol over the server's stdin/stdout, one JSON object per line:
  server -> driver  {"ready": true} or {"ready": false, "why": "..."}
  driver -> server  {"argv": [...], "env": {...}, "log": path, "timeout": s}
  server -> driver  {"rc": int, "timed_out": bool}
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _preload():
    """The imports every worker would repeat. No tensor work happens here."""
    sys.path.insert(0, str(HERE))
    import torch  # noqa: F401
    import transformers  # noqa: F401
    # transformers imports model code lazily, on first attribute access.
    from transformers import (AutoModel, BertConfig, BertModel, DynamicCache,  # noqa: F401
                              GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM)
    import models  # noqa: F401
    import peers  # noqa: F401


def _probe() -> str:
    """'' when a forked child can run parallel torch ops, else why not."""
    pid = os.fork()
    if pid == 0:
        try:
            import torch
            torch.set_num_threads(2)
            a = torch.randn(512, 512)
            ok = bool(torch.isfinite(torch.nn.functional.gelu(a @ a)).all())
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(1)
    rc, timed_out = _wait(pid, 30.0)
    return "a forked probe hung" if timed_out else "" if rc == 0 else f"a forked probe failed ({rc})"


def _run_child(job) -> None:
    """In the forked child: become the worker process the driver asked for."""
    os.setpgid(0, 0)  # its own group, so a timeout kills its helpers too
    os.environ.update(job["env"])
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = job["argv"]
    rc = 1
    try:
        import run
        rc = run.main() or 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)


def _wait(pid: int, timeout: float, driver: int = 0) -> tuple[int, bool]:
    """The child's exit code and whether it timed out (then killed, with its
    group). With driver (the driver's pid): a driver gone (killed, its
    run abandoned) takes the child's group and this server down with it;
    a worker left running would time nothing and load the machine under
    the next run (two such workers ran beside a later run's rows)."""
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), False
        orphaned = driver and os.getppid() != driver
        if orphaned or time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            if orphaned:
                os._exit(1)
            return -9, True
        time.sleep(0.05)


def serve() -> int:
    out = sys.stdout
    driver = os.getppid()
    try:
        _preload()
    except Exception as e:  # a missing package: the driver spawns instead
        print(json.dumps({"ready": False, "why": f"preload failed: {e}"}), file=out, flush=True)
        return 0
    why = _probe()
    if why:
        print(json.dumps({"ready": False, "why": why}), file=out, flush=True)
        return 0
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(job)
        rc, timed_out = _wait(pid, job["timeout"], driver)
        print(json.dumps({"rc": rc, "timed_out": timed_out}), file=out, flush=True)
    return 0


class ForkServer:
    """The driver's handle: start() once, run() per worker, close() at the end."""

    def __init__(self, env: dict):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], env=env,
                                     cwd=str(HERE.parent), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        hello = json.loads(self.proc.stdout.readline() or '{"ready": false, "why": "no answer"}')
        self.ready = bool(hello.get("ready"))
        self.why = hello.get("why", "")
        if not self.ready:
            self.close()

    def run(self, argv: list, env: dict, log: str, timeout: float) -> tuple[int, bool]:
        job = {"argv": argv, "env": env, "log": log, "timeout": timeout}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        return reply["rc"], reply["timed_out"]

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(serve())
