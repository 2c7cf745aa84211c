"""The systems compared: PyTorch eager, torch.compile (Inductor), ONNX Runtime
CPU (model exported by torch.onnx.export) and kiln.

Each ``prepare_*`` function takes (model, inputs, threads) and returns
``(call, prep_seconds)`` where ``call()`` runs the model once on the example
inputs and returns its outputs, or raises ``Unavailable(reason)`` when the
system cannot run that model.  Training rows use ``prepare_train_*`` instead:
``call()`` is one full step (forward, backward, SGD step).
"""

from __future__ import annotations

import copy
import os
import statistics
import tempfile
import time

import torch


class Unavailable(Exception):
    """The system cannot run this model; the message is the short reason."""


# The order they run in, in each model's process: eager first (the reference),
# kiln next (its output is checked before anything else), Inductor last (its
# compile workers stay alive after it).
SYSTEMS = ("eager", "kiln", "onnxruntime", "inductor")


def short(e: BaseException, n: int = 160) -> str:
    lines = [l.strip() for l in str(e).strip().splitlines() if l.strip()]
    msg = lines[0] if lines else ""
    if msg.endswith(":") and len(lines) > 1:   # e.g. "backend='kiln' raised:"
        msg += " " + lines[1]
    s = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    return s if len(s) <= n else s[: n - 1] + "…"


# --------------------------------------------------------------------------
# Outputs and correctness
# --------------------------------------------------------------------------

def flatten(out) -> list[torch.Tensor]:
    """All tensors in an output (tensor, numpy array, or nested tuple/list/dict)."""
    if isinstance(out, torch.Tensor):
        return [out.detach()]
    if hasattr(out, "__array__") and not isinstance(out, (list, tuple, dict)):
        return [torch.from_numpy(out)]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(flatten(o))
        return res
    if hasattr(out, "to_tuple"):   # transformers ModelOutput
        return flatten(out.to_tuple())
    raise TypeError(f"unexpected output type {type(out).__name__}")


RTOL = 1e-3   # fp32: tolerance relative to the reference's magnitude
ATOL = 1e-5


def compare(ref, out) -> dict:
    """Largest abs error of ``out`` against the eager ``ref`` and pass/fail:
    pass when, for every output tensor, max|out - ref| <= RTOL * max|ref| + ATOL."""
    r, o = flatten(ref), flatten(out)
    if len(r) != len(o):
        return {"err": None, "ok": False,
                "why": f"{len(o)} outputs, eager has {len(r)}"}
    worst, ok, why = 0.0, True, ""
    for i, (a, b) in enumerate(zip(r, o)):
        a = a.float()
        b = b.float()
        if tuple(a.shape) != tuple(b.shape):
            return {"err": None, "ok": False,
                    "why": f"output {i} shape {tuple(b.shape)}, eager {tuple(a.shape)}"}
        if not torch.isfinite(b).all():
            return {"err": float("inf"), "ok": False, "why": f"output {i} not finite"}
        err = float((a - b).abs().max()) if a.numel() else 0.0
        tol = RTOL * (float(a.abs().max()) if a.numel() else 0.0) + ATOL
        worst = max(worst, err)
        if err > tol:
            ok = False
            why = f"output {i}: max abs err {err:.3g} > tol {tol:.3g}"
    return {"err": worst, "ok": ok, "why": why}


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------

def time_call(call, warmup: int, runs: int, budget_s: float, min_runs: int = 3) -> dict:
    """Warm up, then time up to ``runs`` calls (at least ``min_runs``, fewer
    than ``runs`` if ``budget_s`` seconds are used up); median in ms."""
    for _ in range(warmup):
        call()
    times = []
    start = time.perf_counter()
    while len(times) < runs:
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
        if len(times) >= min_runs and time.perf_counter() - start > budget_s:
            break
    return {"ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "runs": len(times)}


# --------------------------------------------------------------------------
# Inference
# --------------------------------------------------------------------------

def prepare_eager(model, inputs, threads):
    def call():
        with torch.inference_mode():
            return model(*inputs)
    return call, 0.0


def prepare_inductor(model, inputs, threads):
    torch._dynamo.reset()
    compiled = torch.compile(model)   # default backend: Inductor

    def call():
        with torch.no_grad():
            return compiled(*inputs)
    t0 = time.perf_counter()
    call()   # the first call compiles
    return call, time.perf_counter() - t0


def prepare_onnxruntime(model, inputs, threads):
    try:
        import onnxruntime as ort
    except Exception as e:
        raise Unavailable(f"onnxruntime not installed ({short(e, 60)})")
    tmp = tempfile.mkdtemp(prefix="kiln-bench-onnx-")
    path = os.path.join(tmp, "model.onnx")
    t0 = time.perf_counter()
    try:
        import logging
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        with torch.no_grad():
            torch.onnx.export(model, inputs, path, dynamo=True, external_data=True,
                              verbose=False)
    except Exception as e:
        raise Unavailable(f"torch.onnx.export failed: {short(e, 100)}")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    except Exception as e:
        raise Unavailable(f"ORT session failed: {short(e, 100)}")
    names = [i.name for i in sess.get_inputs()]
    arrays = [x.detach().numpy() for x in inputs]
    if len(names) != len(arrays):
        raise Unavailable(f"exported graph has {len(names)} inputs, model has {len(arrays)}")
    feed = dict(zip(names, arrays))
    prep = time.perf_counter() - t0

    def call():
        return sess.run(None, feed)
    return call, prep


def prepare_kiln(model, inputs, threads):
    try:
        import kiln
    except Exception as e:
        raise Unavailable(f"kiln unavailable: {short(e, 100)}")
    if not hasattr(kiln, "trace"):
        raise Unavailable("kiln unavailable: kiln.trace not defined")
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            compiled = kiln.trace(model, tuple(inputs))
    except Exception as e:
        raise Unavailable(f"kiln.trace failed: {short(e, 120)}")
    prep = time.perf_counter() - t0

    def call():
        with torch.no_grad():
            return compiled(*inputs)
    return call, prep


INFER = {"eager": prepare_eager, "inductor": prepare_inductor,
         "onnxruntime": prepare_onnxruntime, "kiln": prepare_kiln}


# --------------------------------------------------------------------------
# Training: one step = zero_grad, forward (returns the loss), backward, SGD.
# Every system gets its own deep copy of the model, started from the same
# weights; correctness compares the loss and all gradients of the first step.
# --------------------------------------------------------------------------

LR = 1e-3


def _step_fn(fwd, model):
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step(inputs):
        opt.zero_grad(set_to_none=True)
        loss = fwd(*inputs)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _first_step(fwd, model, inputs):
    """Run one step, return (loss, grads) for the correctness check."""
    step = _step_fn(fwd, model)
    loss = step(inputs)
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
             for p in model.parameters()]
    return step, [loss] + grads


def prepare_train(system, model, inputs, threads):
    """Returns (call, prep_s, outputs_of_first_step)."""
    m = copy.deepcopy(model)
    if system == "eager":
        t0 = time.perf_counter()
        step, outs = _first_step(m, m, inputs)
        return (lambda: step(inputs)), 0.0, outs
    if system == "inductor":
        torch._dynamo.reset()
        cm = torch.compile(m)
        t0 = time.perf_counter()
        step, outs = _first_step(cm, m, inputs)
        return (lambda: step(inputs)), time.perf_counter() - t0, outs
    if system == "onnxruntime":
        raise Unavailable("n/a: ONNX Runtime CPU runs inference only")
    if system == "kiln":
        try:
            import kiln  # noqa: F401  (registers the "kiln" torch.compile backend)
        except Exception as e:
            raise Unavailable(f"n/a: kiln does not train yet (kiln unavailable: {short(e, 60)})")
        torch._dynamo.reset()
        try:
            cm = torch.compile(m, backend="kiln")
            t0 = time.perf_counter()
            step, outs = _first_step(cm, m, inputs)
            prep = time.perf_counter() - t0
        except Exception as e:
            raise Unavailable(f"n/a: kiln does not train yet ({short(e, 80)})")
        return (lambda: step(inputs)), prep, outs
    raise ValueError(system)
