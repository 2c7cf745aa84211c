"""The systems compared: PyTorch eager, torch.compile (Inductor), ONNX Runtime
CPU (model exported by torch.onnx.export), OpenVINO CPU (openvino.convert_model
of the same module, compiled at f32 and at its default precision: bf16 on
CPUs with AMX or AVX512_BF16, f32 elsewhere) and kiln, also with bf16 compute
and int8 / int4 weights, and eager and kiln on the model in bf16 (the low-precision systems, LOWP:
checked by cosine similarity and relative error against eager fp32 instead of
fp32's tolerance).

Each ``prepare_*`` function takes (model, inputs, threads) and returns
``(call, prep_seconds)`` where ``call()`` runs the model once on the example
inputs and returns its outputs, or raises ``Unavailable(reason)`` when the
system cannot run that model.  Training rows use ``prepare_train`` instead:
``call()`` is one full step (forward, backward, SGD step); there the bf16
systems (eager_bf16, kiln_bf16) are the step with its forward under
``torch.autocast("cpu", dtype=torch.bfloat16)``, as PyTorch users train in
bf16 (the model's weights stay fp32).
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
SYSTEMS = ("eager", "kiln", "kiln_bf16", "kiln_int8", "kiln_int4", "kiln_int4a8", "eager_bf16", "kiln_bf16_model",
           "onnxruntime", "openvino", "openvino_default", "inductor")
# kiln's options for its low-precision systems (kiln.trace keywords).
KILN_LOWP = {"kiln_bf16": {"compute_dtype": torch.bfloat16},
             "kiln_int8": {"weights_dtype": "int8:a8"},
             "kiln_int4": {"weights_dtype": "int4"},
             "kiln_int4a8": {"weights_dtype": "int4:a8"}}
LOWP = tuple(KILN_LOWP) + ("eager_bf16", "kiln_bf16_model", "openvino_default")
# A low-precision output fails its check below this cosine to eager fp32 (a
# gross error, not a precision target: the cosine is reported either way),
# unless it is, within fp32's tolerance, the eager model run with the same
# dequantized weights (weight-only quantization, no ":a8": its cosine to fp32
# is then the quantization's own error, 0.87 for int4 on the random-weight
# llama_decode). That reference holds where kiln quantizes exactly the
# nn.Linear / nn.Embedding weights; kiln also quantizes other matmul weights
# (GPT-2's Conv1D) and folds embeddings read at constant positions, so
# elsewhere the floor alone decides. A mode with int8 activations (":a8")
# has no exact reference (a rounding of an activation can flip with fp32's
# last bit), so it is held to the eager model with the same dequantized
# weights by cosine instead: at least LOWP_A8_MIN_COSINE there means the
# activations' quantization added little to the weights' own error
# (marked ~).
LOWP_MIN_COSINE = 0.9
LOWP_A8_MIN_COSINE = 0.99


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


def weight_only_reference(system, model, inputs):
    """The reference of a quantized kiln system: eager's output with every
    nn.Linear / nn.Embedding weight replaced by its dequantized values
    (tests/python/quant_reference.py states kiln's rules in torch; for a
    mode with int8 activations, those of its weights' mode without them);
    None for any other system."""
    kind = KILN_LOWP.get(system, {}).get("weights_dtype")
    if kind is None:
        return None
    kind = ":".join(p for p in str(kind).split(":") if p != "a8")
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "tests", "python"))
    from quant_reference import with_dequantized_linears
    with torch.no_grad():
        return with_dequantized_linears(model, kind)(*inputs)


def compare_lowp(ref, out, exact=None, near=False) -> dict:
    """For a low-precision system: cosine similarity of all outputs (as one
    vector, float64) to eager fp32's and the largest error relative to each
    output's magnitude; ok when every value is finite and the cosine is at
    least LOWP_MIN_COSINE or (exact: weight_only_reference's) out is within
    fp32's tolerance of the system's exact reference, or (near: a mode with
    int8 activations) its cosine to that reference is at least
    LOWP_A8_MIN_COSINE."""
    if exact is not None:
        res = compare_lowp(ref, out)
        if res["ok"] or res.get("cos") is None:
            return res
        if near:
            cos = compare_lowp(exact, out).get("cos")
            if cos is not None and cos >= LOWP_A8_MIN_COSINE:
                res.update(ok=True, why="", near=True)
            else:
                res["why"] += f" and {cos:.4f} to eager with its weights dequantized" if cos is not None else ""
        elif compare(exact, out)["ok"]:
            res.update(ok=True, why="", exact=True)
        return res
    r, o = flatten(ref), flatten(out)
    if len(r) != len(o):
        return {"err": None, "ok": False, "why": f"{len(o)} outputs, eager has {len(r)}"}
    rel, num, na, nb = 0.0, 0.0, 0.0, 0.0
    for i, (a, b) in enumerate(zip(r, o)):
        a, b = a.double(), b.double()
        if tuple(a.shape) != tuple(b.shape):
            return {"err": None, "ok": False,
                    "why": f"output {i} shape {tuple(b.shape)}, eager {tuple(a.shape)}"}
        if not torch.isfinite(b).all():
            return {"err": float("inf"), "ok": False, "why": f"output {i} not finite"}
        if a.numel():
            rel = max(rel, float((a - b).abs().max() / a.abs().max().clamp_min(1e-30)))
            num += float((a * b).sum())
            na += float((a * a).sum())
            nb += float((b * b).sum())
    cos = num / max((na * nb) ** 0.5, 1e-300)
    ok = cos >= LOWP_MIN_COSINE
    return {"err": rel, "cos": cos, "ok": ok,
            "why": "" if ok else f"cosine {cos:.4f} to eager fp32 < {LOWP_MIN_COSINE}"}


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------

def time_call(call, warmup: int, runs: int, budget_s: float, min_runs: int = 3) -> dict:
    """Warm up, then time up to ``runs`` calls (at least ``min_runs``, fewer
    than ``runs`` if ``budget_s`` seconds are used up); median in ms.
    One system alone; the benchmark itself uses time_rounds."""
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
    return _stats(times)


def _stats(times: list[float]) -> dict:
    return {"ms": statistics.median(times), "min_ms": min(times),
            "max_ms": max(times), "runs": len(times)}


# Every block starts with a pause (PAUSE_S); a call shorter than this also
# gets one untimed call at the start of each of its blocks. They absorb what
# the previous system left behind (its spinning threads: torch's OpenMP,
# ORT's and kiln's pools all spin after a call; evicted caches). Longer calls
# dwarf that.
SETTLE_BELOW_MS = 100.0
# Before each block: a pause, long enough for the other systems' threads
# to stop spinning and park, so they do not compete with this block (the
# settling call then pays this system's own wake-up).
PAUSE_S = 0.02
# Timed calls per block: about this many ms of them (at least 1, at most a
# quarter of the runs).
BLOCK_MS = 40.0


def time_rounds(calls: dict, warmup: int, runs: int, budget_s: float,
                min_runs: int = 3) -> dict:
    """Times several systems interleaved: in rounds, each system runs a short
    block of back-to-back calls, the order rotating every round, so that a
    change in the machine's load (it is shared) or one system's leftover
    threads fall on every system alike rather than on whichever ran next.
    Stops when every system has ``runs`` timed calls, or after ``budget_s``
    once every system has ``min_runs``.  Returns {system: stats}; a system
    whose call raises gets {"na": reason} and drops out."""
    res: dict = {}
    live = {}
    est = {}
    for name, call in calls.items():
        try:
            for _ in range(max(warmup, 1)):
                t0 = time.perf_counter()
                call()
                est[name] = (time.perf_counter() - t0) * 1e3
            live[name] = call
        except Exception as e:
            res[name] = {"na": short(e)}
    times = {n: [] for n in live}
    order = list(live)
    start = time.perf_counter()
    r = 0
    while order:
        k = r % len(order)
        for name in order[k:] + order[:k]:
            if len(times[name]) >= runs:
                continue
            call = live[name]
            # At least 4 rounds: a block never takes more than a quarter of the runs.
            block = max(1, min(-(-runs // 4), int(BLOCK_MS / max(est[name], 1e-3))))
            try:
                time.sleep(PAUSE_S)
                if est[name] < SETTLE_BELOW_MS:
                    call()
                for _ in range(min(block, runs - len(times[name]))):
                    t0 = time.perf_counter()
                    call()
                    times[name].append((time.perf_counter() - t0) * 1e3)
            except Exception as e:
                res[name] = {"na": short(e)}
                order.remove(name)
                del times[name]
                break
        r += 1
        if all(len(t) >= runs for t in times.values()):
            break
        if (time.perf_counter() - start > budget_s
                and all(len(t) >= min_runs for t in times.values())):
            break
    for name, t in times.items():
        res[name] = _stats(t) | {"rounds": r}
    return res


# --------------------------------------------------------------------------
# Inference
# --------------------------------------------------------------------------

class Prepared:
    """A system ready to run one model: ``at(n)`` sets its thread count and
    returns the call (raises Unavailable when it cannot run at n threads);
    ``prep`` is its compile/export time; ``phases`` where that time went."""

    def __init__(self, call, prep, at=None, phases=None):
        self.call = call
        self.prep = prep
        self._at = at
        self.phases = phases or {}

    def at(self, n):
        torch.set_num_threads(n)
        return self._at(n) if self._at else self.call


def prepare_eager(model, inputs, threads):
    def call():
        with torch.inference_mode():
            return model(*inputs)
    return Prepared(call, 0.0)


def _in_bf16(model, inputs):
    """``model.to(torch.bfloat16)`` (a copy) and its floating-point inputs in bf16."""
    return copy.deepcopy(model).to(torch.bfloat16), tuple(
        x.to(torch.bfloat16) if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)


def prepare_eager_bf16(model, inputs, threads):
    """Eager PyTorch as a user runs a model in bf16: ``model.to(torch.bfloat16)``
    and its floating-point inputs cast to bf16 (outputs stay bf16; the check
    widens them)."""
    m, args = _in_bf16(model, inputs)

    def call():
        with torch.inference_mode():
            return m(*args)
    return Prepared(call, 0.0)


def prepare_inductor(model, inputs, threads):
    state = {}

    def compile_at(n):
        # Inductor's C++ code fixes its OpenMP thread count at compile time:
        # another thread count needs its own compile.
        torch.set_num_threads(n)
        torch._dynamo.reset()
        compiled = torch.compile(model)   # default backend: Inductor

        def call():
            with torch.no_grad():
                return compiled(*inputs)
        t0 = time.perf_counter()
        call()   # the first call compiles
        state.update(n=n, call=call, prep=time.perf_counter() - t0)
        return call

    def at(n):
        return state["call"] if state.get("n") == n else compile_at(n)

    call = compile_at(threads)
    return Prepared(call, state["prep"], at, {"inductor compile": state["prep"]})


# ONNX files are cached (bench/.cache, gitignored) keyed by the model, the
# bench's model definitions and the exporter's versions: a repeat run skips
# the export. KILN_BENCH_NO_CACHE=1 disables the cache (a fresh machine).
CACHE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")


def _onnx_cache_key(name: str) -> str:
    import hashlib
    import importlib.metadata as md
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for f in ("models.py", "peers.py"):
        with open(os.path.join(here, f), "rb") as fh:
            h.update(fh.read())
    for pkg in ("torch", "onnx", "onnxscript", "onnxruntime", "transformers"):
        try:
            h.update(f"{pkg}={md.version(pkg)};".encode())
        except Exception:
            h.update(f"{pkg}=?;".encode())
    return f"{name}-{h.hexdigest()[:16]}"


# Exporter per model: the legacy TorchScript exporter (dynamo=False) is ~10x
# cheaper to run and ORT runs its graph as fast (measured; see
# bench/README.md); where it fails, the dynamo exporter (with its optimizer;
# optimize=False costs ORT ~40 % at run time).
def export_onnx(model, inputs, name: str, dynamo_first: bool = False) -> tuple[str, dict]:
    """Returns (path of model.onnx, phases)."""
    import logging
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    use_cache = bool(name) and os.environ.get("KILN_BENCH_NO_CACHE", "") in ("", "0")
    if use_cache:
        d = os.path.join(CACHE_DIR, "onnx", _onnx_cache_key(name))
        path = os.path.join(d, "model.onnx")
        if os.path.exists(os.path.join(d, "done")):
            return path, {"ort export (cached)": 0.0}
        os.makedirs(d, exist_ok=True)
    else:
        d = tempfile.mkdtemp(prefix="kiln-bench-onnx-")
        path = os.path.join(d, "model.onnx")
    t0 = time.perf_counter()
    errors = []
    exporter = None
    for dynamo in ((True, False) if dynamo_first else (False, True)):
        try:
            with torch.no_grad():
                if dynamo:
                    torch.onnx.export(model, inputs, path, dynamo=True, external_data=True,
                                      verbose=False)
                else:
                    torch.onnx.export(model, inputs, path, dynamo=False, verbose=False)
            exporter = "dynamo" if dynamo else "legacy"
            break
        except Exception as e:
            errors.append(short(e, 100))
    phases = {"ort export": time.perf_counter() - t0}
    if exporter is None:
        raise Unavailable(f"torch.onnx.export failed: {errors[-1]}")
    if use_cache:
        with open(os.path.join(d, "done"), "w") as fh:
            fh.write(exporter + "\n")
    phases["exporter"] = exporter
    return path, phases


def prepare_onnxruntime(model, inputs, threads, name="", dynamo_first=False):
    try:
        import onnxruntime as ort
    except Exception as e:
        raise Unavailable(f"onnxruntime not installed ({short(e, 60)})")
    t0 = time.perf_counter()
    path, phases = export_onnx(model, inputs, name, dynamo_first)
    arrays = [x.detach().numpy() for x in inputs]
    state = {}

    def session_at(n):
        state.clear()   # one session alive at a time
        t1 = time.perf_counter()
        so = ort.SessionOptions()
        so.intra_op_num_threads = n
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        # ORT's pool threads otherwise keep spinning after a run returns,
        # on the cores the next system in the interleaved rounds then runs
        # on (kiln's ResNet-18 at two threads measured 16 ms beside an ORT
        # session, 8.4 alone): stop them when a run ends. Within a run they
        # spin as by default.
        so.add_session_config_entry("session.force_spinning_stop", "1")
        try:
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        except Exception as e:
            raise Unavailable(f"ORT session failed: {short(e, 100)}")
        names = [i.name for i in sess.get_inputs()]
        if len(names) != len(arrays):
            raise Unavailable(f"exported graph has {len(names)} inputs, model has {len(arrays)}")
        feed = dict(zip(names, arrays))

        def call():
            return sess.run(None, feed)
        phases["ort session"] = phases.get("ort session", 0.0) + time.perf_counter() - t1
        state.update(n=n, call=call)
        return call

    def at(n):
        return state["call"] if state.get("n") == n else session_at(n)

    call = session_at(threads)
    phases["first session"] = phases["ort session"]
    return Prepared(call, time.perf_counter() - t0, at, phases)


def _kiln_models(compiled):
    """The C models inside a kiln.trace result (one, or one per piece when
    some ops fall back to eager)."""
    return [m._kiln_model for m in compiled.modules() if hasattr(m, "_kiln_model")]


def prepare_kiln(model, inputs, threads, **trace_kw):
    """kiln.trace(model, inputs, **trace_kw): the fp32 system, or with a low-
    precision option (KILN_LOWP) one of the low-precision ones."""
    try:
        import kiln
    except Exception as e:
        raise Unavailable(f"kiln unavailable: {short(e, 100)}")
    if not hasattr(kiln, "trace"):
        raise Unavailable("kiln unavailable: kiln.trace not defined")
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            compiled = kiln.trace(model, tuple(inputs), **trace_kw)
    except Exception as e:
        raise Unavailable(f"kiln.trace failed: {short(e, 120)}")
    prep = time.perf_counter() - t0

    def call():
        with torch.no_grad():
            return compiled(*inputs)

    def at(n):
        # The plan does not depend on the thread count: only the pool changes.
        for m in _kiln_models(compiled):
            m.set_threads(n)
        return call
    return Prepared(call, prep, at, {"kiln trace": prep})


_OV_CONVERTED: dict = {}


def prepare_openvino(model, inputs, threads, default_precision=False):
    """openvino.convert_model of the module (once per model, shared by both
    OpenVINO systems), compiled for the CPU at `threads` threads, one stream,
    latency mode; at f32 (INFERENCE_PRECISION_HINT) or, default_precision,
    at whatever OpenVINO picks for this CPU (recorded in phases)."""
    try:
        import openvino as ov
    except Exception as e:
        raise Unavailable(f"openvino not installed ({short(e, 60)})")
    t0 = time.perf_counter()
    phases = {}
    key = id(model)
    if key not in _OV_CONVERTED:
        try:
            with torch.no_grad():
                _OV_CONVERTED[key] = ov.convert_model(model, example_input=tuple(inputs))
        except Exception as e:
            _OV_CONVERTED[key] = Unavailable(f"openvino.convert_model failed: {short(e, 100)}")
        phases["ov convert"] = time.perf_counter() - t0
    converted = _OV_CONVERTED[key]
    if isinstance(converted, Unavailable):
        raise converted
    core = ov.Core()
    arrays = [x.detach().numpy() for x in inputs]
    state = {}

    def compile_at(n):
        state.clear()
        cfg = {"INFERENCE_NUM_THREADS": n, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
        if not default_precision:
            cfg["INFERENCE_PRECISION_HINT"] = "f32"
        try:
            compiled = core.compile_model(converted, "CPU", cfg)
        except Exception as e:
            raise Unavailable(f"openvino compile failed: {short(e, 100)}")
        prec = compiled.get_property("INFERENCE_PRECISION_HINT")
        phases["precision"] = prec.get_type_name() if hasattr(prec, "get_type_name") else str(prec)
        req = compiled.create_infer_request()

        def call():
            return [v for v in req.infer(arrays).values()]
        state.update(n=n, call=call)
        return call

    def at(n):
        return state["call"] if state.get("n") == n else compile_at(n)

    call = compile_at(threads)
    return Prepared(call, time.perf_counter() - t0, at, phases)


def prepare_kiln_bf16_model(model, inputs, threads):
    """kiln.trace of the same bf16 model eager_bf16 runs (``model.to(
    torch.bfloat16)``, bf16 inputs and outputs): kiln's native path for a bf16
    checkpoint (python/kiln/lowp.py), where kiln_bf16 is compute_dtype=bf16
    on the fp32 model."""
    m, args = _in_bf16(model, inputs)
    return prepare_kiln(m, args, threads)


INFER = {"eager": prepare_eager, "inductor": prepare_inductor,
         "onnxruntime": prepare_onnxruntime, "kiln": prepare_kiln,
         "openvino": prepare_openvino, "eager_bf16": prepare_eager_bf16,
         "kiln_bf16_model": prepare_kiln_bf16_model,
         "openvino_default": lambda m, i, t: prepare_openvino(m, i, t, default_precision=True)}
INFER.update({s: (lambda kw: lambda m, i, t: prepare_kiln(m, i, t, **kw))(kw)
              for s, kw in KILN_LOWP.items()})


# --------------------------------------------------------------------------
# Training: one step = zero_grad, forward (returns the loss), backward, SGD.
# Every system gets its own deep copy of the model, started from the same
# weights; correctness compares the loss and all gradients of the first step.
# --------------------------------------------------------------------------

LR = 1e-3


def _step_fn(fwd, model, autocast=False):
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step(inputs):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = fwd(*inputs)
        loss.backward()
        opt.step()
        return loss.detach()
    return step


def _first_step(fwd, model, inputs, autocast=False):
    """Run one step, return (loss, grads) for the correctness check."""
    step = _step_fn(fwd, model, autocast)
    loss = step(inputs)
    grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
             for p in model.parameters()]
    return step, [loss] + grads


def prepare_train(system, model, inputs, threads):
    """Returns (call, prep_s, outputs_of_first_step)."""
    m = copy.deepcopy(model)
    autocast = system in ("eager_bf16", "kiln_bf16")
    if system in ("eager", "eager_bf16"):
        step, outs = _first_step(m, m, inputs, autocast)
        return (lambda: step(inputs)), 0.0, outs
    if system == "inductor":
        torch._dynamo.reset()
        cm = torch.compile(m)
        t0 = time.perf_counter()
        step, outs = _first_step(cm, m, inputs)
        return (lambda: step(inputs)), time.perf_counter() - t0, outs
    if system == "onnxruntime":
        raise Unavailable("n/a: ONNX Runtime CPU runs inference only")
    if system in ("openvino", "openvino_default"):
        raise Unavailable("n/a: OpenVINO runs inference only")
    if system in ("kiln_int8", "kiln_int4", "kiln_int4a8"):
        raise Unavailable("n/a: quantized weights are for inference")
    if system == "kiln_bf16_model":
        raise Unavailable("n/a: training in bf16 is the autocast column")
    if system in ("kiln", "kiln_bf16"):
        try:
            import kiln  # noqa: F401  (registers the "kiln" torch.compile backend)
        except Exception as e:
            raise Unavailable(f"n/a: kiln does not train yet (kiln unavailable: {short(e, 60)})")
        torch._dynamo.reset()
        try:
            cm = torch.compile(m, backend="kiln")
            t0 = time.perf_counter()
            step, outs = _first_step(cm, m, inputs, autocast)
            prep = time.perf_counter() - t0
        except Exception as e:
            raise Unavailable(f"n/a: kiln does not train yet ({short(e, 80)})")
        return (lambda: step(inputs)), prep, outs
    raise ValueError(system)
