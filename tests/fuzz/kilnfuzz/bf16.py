"""The bf16 mode: the program run by kiln in bf16, judged against eager bf16
and float64 (python/kiln/lowp.py's contract; check.py states the rule).
Its programs are drawn from ops.BF16_KINDS, the float32 mode's kinds (wide
convolutions among them: 16 output channels a group and more, which kiln's
NHWC kernels take; the float32 mode drew them only from session 18 on).

Every float leaf (input or parameter) is drawn as in float32 and rounded to
bf16 (nearest even); r, the float64 run, starts from those bf16 values
(exact in float64). Three paths:
  bf16           the program's FX graph built in bf16 (every float32 of the
                 program bf16: values, casts) straight into kiln's lowering,
                 as kiln.dynamo gets AOTAutograd's graphs of a bf16 model;
  bf16-trace     kiln.trace of the program as an nn.Module moved to bf16
                 (model.to(torch.bfloat16), bf16 inputs), with
                 KILN_LAYOUT=nhwc (see bf16-compute);
  bf16-engine    the bf16 path with KILN_BF16_VALUES=all: every product of
                 two bf16 graph values on the bf16 engine (AVX512_BF16 or
                 AMX, B packed at run time: kiln_gemm_bf16_compute.c), which
                 otherwise takes only products of 16 rows and 2^18
                 multiply-adds up, bigger than the fuzzer's graphs make;
  bf16-autocast  kiln.trace of the float32 module (bf16-valued parameters
                 and inputs) under torch.autocast("cpu", dtype=bfloat16):
                 e is eager under the same autocast, so its outputs are
                 bf16 or float32 as autocast makes them;
  bf16-compute   kiln.trace(model, xs, compute_dtype=torch.bfloat16) of the
                 float32 module (bf16-valued parameters and inputs), with
                 KILN_LAYOUT=nhwc (convolutions channels-last, which only
                 chains of wide ones are otherwise, on the bf16 NHWC conv
                 kernels, a single conv of 16 channels up included): kiln
                 rounds the inputs of products by constants (linear layers,
                 convolutions: the bf16 engines, bf16 NHWC convs) and keeps
                 everything else in fp32, float32 outputs. Judged against
                 eager bf16 (every op rounded, so at least every rounding
                 kiln makes), its outputs rounded to bf16 for the rule;
  bf16-compile   torch.compile(backend="kiln") of that module, trained one
                 step under autocast (paths.run_compile's loss): outputs and
                 gradients against eager autocast training and float64
                 training (with bf16-sized rounding noise, for E).
"""

import contextlib

import torch

from kilnfuzz.check import (AUTOCAST_LOW, EPS_BF16, ILL_RELATIVE_BF16, Audit, ComparedNaNs, ContiguousBatchNormGrad,
                            Decisions, LowPrecisionCalls, RoundingNoise, bf16_ties, compare, conditioning, nan_at_comparison)
from kilnfuzz.program import Eager, FxBuilder, _map_dtype, interpret

BF16 = torch.bfloat16
PATHS = ("bf16", "bf16-trace", "bf16-engine", "bf16-autocast", "bf16-compute", "bf16-compile")
# Test knobs a path compiles under (kiln reads them as it compiles and runs;
# evaluate sets them: paths.path_env, which also has the float32 paths'):
# every product of graph values on the bf16 engine; every region of convs
# channels-last, so bf16-compute's convs take the bf16 NHWC kernels and
# bf16-trace's the fp32 NHWC ones (the bf16 path keeps kiln's own choice).
PATH_ENV = {"bf16-engine": {"KILN_BF16_VALUES": "all"}, "bf16-compute": {"KILN_LAYOUT": "nhwc"},
            "bf16-trace": {"KILN_LAYOUT": "nhwc"}}
AUTOCAST = ("bf16-autocast", "bf16-compile")
FLOAT32_MODULE = AUTOCAST + ("bf16-compute",)  # a float32 module holding bf16 values


def autocast():
    return torch.autocast("cpu", dtype=BF16)


def _context(path):
    return autocast() if path in AUTOCAST else contextlib.nullcontext()


def noise(seed, path, calls=None):
    """check.RoundingNoise as eager rounds on `path`: every op's result to
    bf16, or under autocast those of the calls eager's own run gave bf16
    results (calls: LowPrecisionCalls' record), else of the ops autocast
    runs in bf16."""
    return RoundingNoise(seed, EPS_BF16, AUTOCAST_LOW if path in AUTOCAST else None, calls if path in AUTOCAST else None)


def leaf_rounded(leaf, dtype):
    """The leaf's values rounded to bf16, then held in `dtype` (bf16, or
    float32 / float64: exact), with the leaf's memory layout."""
    if not leaf.tensor.is_floating_point():
        return leaf.tensor
    v = leaf.values.to(BF16).to(dtype)
    if leaf.place is None:
        return v
    fn, args = leaf.place
    return fn(v, *args)


class _LowFxBuilder(FxBuilder):
    """FxBuilder whose program computes in `dtype`: every float32 dtype
    argument (a cast's) becomes it, as Eager(dtype) does."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def call(self, op, *args, **kwargs):
        return super().call(op, *_map_dtype(args, self.dtype), **_map_dtype(kwargs, self.dtype))


def reference_bf16(res, path):
    """paths.Reference for a bf16 path: e eager bf16 (or eager under
    autocast: bf16-autocast and bf16-compile), r float64 and float64 with bf16-sized rounding noise, all
    from the bf16-rounded leaves; ill as check.py's bf16 rule says."""
    from kilnfuzz.paths import NOISY_RUNS, NotApplicable, Reference

    auto = path in AUTOCAST
    leaves_e = [leaf_rounded(leaf, torch.float32 if auto else BF16) for leaf in res.leaves]
    leaves64 = [leaf_rounded(leaf, torch.float64) for leaf in res.leaves]
    seen_e, dec_e = ComparedNaNs(), Decisions()

    def watch_e(*a):
        seen_e(*a)
        dec_e(*a)

    record = LowPrecisionCalls()
    with torch.no_grad(), _context(path), record:
        try:
            e16 = interpret(res, Eager(torch.float32 if auto else BF16, watch_e, at_plan_sizes=True), leaves_e)
        except RuntimeError as e:
            if not auto:
                raise
            # autocast casts at aten::conv2d, not at the Core ATen convolution
            # the program calls: a bf16 activation meets a float32 weight
            raise NotApplicable(f"eager under autocast fails: {str(e)[:200]}") from None
    audit, dec64 = Audit(), Decisions()

    def watch64(*a):
        audit(*a)
        dec64(*a)

    r64 = interpret(res, Eager(torch.float64, watch64, at_plan_sizes=True), leaves64)
    runs, decs = [], [dec_e]
    for k in range(NOISY_RUNS):
        d = Decisions()
        with noise([res.program.salt, 11, k], path, record.calls):
            runs.append(interpret(res, Eager(torch.float64, d, at_plan_sizes=True), leaves64))
        decs.append(d)
    noisy = [[run[j] for run in runs] for j in range(len(e16))]
    ill = audit.reason
    if not ill and audit.compared.seen:
        ill = nan_at_comparison(seen_e, audit.compared)
    ill = ill or bf16_ties(decs, dec64)
    for e, r, p in zip(e16, r64, noisy):
        ill = ill or conditioning(e, r, p, ILL_RELATIVE_BF16)
    return Reference(list(e16), r64, noisy, ill)


def run_bf16_fast(res):
    """The program's graph built in bf16, through kiln's lowering (the fast
    path's seam: kiln.capture.lower_graph)."""
    from kiln.capture import lower_graph
    from kiln.module import KilnModule, compile_graph

    b = _LowFxBuilder(BF16)
    leaves = [leaf_rounded(leaf, BF16) for leaf in res.leaves]
    handles = [b.placeholder(leaf.name, t) for leaf, t in zip(res.leaves, leaves)]
    outs = interpret(res, b, handles)
    b.graph.output(tuple(outs))
    placeholders = [("input", leaf.name) if leaf.role == "input" else ("constant", t)
                    for leaf, t in zip(res.leaves, leaves)]
    ctx = lower_graph(b, placeholders, outs)
    mod = KilnModule(compile_graph(ctx), [leaf.name for leaf in res.inputs], None, "kiln-fuzz")
    return mod.run_flat([t for leaf, t in zip(res.leaves, leaves) if leaf.role == "input"])


def bf16_module(res, path):
    """The program as an nn.Module for a trace path, and its inputs: in bf16
    (bf16-trace), or float32 holding bf16 values (FLOAT32_MODULE's paths)."""
    from kilnfuzz.paths import ProgramModule

    if path in FLOAT32_MODULE:
        model = ProgramModule(res).eval()
        with torch.no_grad():
            for t in list(model.parameters()) + list(model.buffers()):
                if t.is_floating_point():
                    t.copy_(t.to(BF16))
        return model, tuple(leaf_rounded(leaf, torch.float32) for leaf in res.inputs)
    return ProgramModule(res, BF16).eval(), tuple(leaf_rounded(leaf, BF16) for leaf in res.inputs)


def run_bf16_trace(res, path):
    import kiln

    from kilnfuzz.paths import _torch_can

    model, xs = bf16_module(res, path)
    with _context(path):
        try:
            compiled = kiln.trace(model, xs, compute_dtype=BF16 if path == "bf16-compute" else None)
        except Exception:
            _torch_can(lambda: torch.export.export(model, xs), "torch.export")
            raise
        with torch.no_grad():
            outs = list(compiled(*xs))
    if path == "bf16-compute":
        # float32 outputs (checked here), judged as bf16 against eager bf16
        bad = [o.dtype for o in outs if o.is_floating_point() and o.dtype != torch.float32]
        if bad:
            raise AssertionError(f"kiln.trace(compute_dtype=bf16) returned {bad[0]}, not float32")
        outs = [o.to(BF16) if o.is_floating_point() else o for o in outs]
    return outs


def _train(res, dtype, compiled, path="bf16-compile"):
    """One forward (under autocast unless dtype is float64) and backward:
    (outputs, gradients of the parameters and float inputs). compiled:
    False (eager), True (torch.compile with kiln) or a backend's name."""
    from kilnfuzz.paths import ProgramModule, train_step

    model = ProgramModule(res, dtype, requires_grad=True)
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.copy_(t.to(BF16))
    xs = [leaf_rounded(leaf, dtype).detach() for leaf in res.inputs]
    xs = [x.requires_grad_() if x.is_floating_point() else x for x in xs]
    return train_step(model, res, xs, dtype, compiled, _context(path) if dtype != torch.float64 else None)


def _judge_training(res, ref, accs, mags, outs, grads, e_grad, r_grad, noisy, who="kiln"):
    """(where, why) for a training run against eager autocast and float64
    training, by the bf16 rule; where is None when it passes."""
    from kilnfuzz.paths import compare_all

    why = compare_all(outs, ref, accs, "forward output", mags, who, lowp=True)
    if why:
        return why.split(":")[0], why
    if not all(torch.isfinite(o).all() for o in ref.e32 if o.is_floating_point()):
        return None, None  # NaN outputs make every gradient NaN
    gacc = 2 * max(accs) + 1
    for j, (k, e, r) in enumerate(zip(grads, e_grad, r_grad)):
        p = [run[j] for run in noisy]
        if conditioning(e, r, p, ILL_RELATIVE_BF16):
            continue
        why = compare(k, e, r, gacc, f"gradient {j}", p, who=who, lowp=True)
        if why:
            return f"gradient {j}", why
    return None, None


def run_bf16_compile(res, ref, accs, mags):
    """torch.compile(backend="kiln") trained under autocast; None or why it
    fails. Where kiln fails, torch.compile(backend="aot_eager") is judged
    the same way, as paths.run_compile does: failing at the same place, the
    difference is torch's own stack's (AOTAutograd's graphs under
    autocast), not kiln's."""
    import torch._dynamo

    from kilnfuzz.paths import NOISY_RUNS, NotApplicable, _torch_can

    try:
        with ContiguousBatchNormGrad(), LowPrecisionCalls() as record:
            _, e_grad = _train(res, torch.float32, False)
        with ContiguousBatchNormGrad():
            _, r_grad = _train(res, torch.float64, False)
        noisy = []
        for k in range(NOISY_RUNS):
            with ContiguousBatchNormGrad(), noise([res.program.salt, 13, k], "bf16-compile", record.calls):
                noisy.append(_train(res, torch.float64, False)[1])
    except RuntimeError as e:
        raise NotApplicable(f"eager training under autocast fails: {str(e)[:200]}") from None
    torch._dynamo.reset()
    try:
        k_out, k_grad = _train(res, torch.float32, True)
    except Exception:
        torch._dynamo.reset()
        _torch_can(lambda: _train(res, torch.float32, "aot_eager"), "torch.compile(backend='aot_eager')")
        raise
    where, why = _judge_training(res, ref, accs, mags, k_out, k_grad, e_grad, r_grad, noisy)
    if why is None:
        return None
    torch._dynamo.reset()
    try:
        a_out, a_grad = _train(res, torch.float32, "aot_eager")
    except Exception as e:  # noqa: BLE001
        return why + f" (torch.compile(backend='aot_eager') raises {type(e).__name__})"
    finally:
        torch._dynamo.reset()
    a_where, a_why = _judge_training(res, ref, accs, mags, a_out, a_grad, e_grad, r_grad, noisy, "aot_eager")
    if a_where == where:
        raise NotApplicable(f"torch.compile(backend='aot_eager') alone disagrees with eager: {a_why}")
    return why


def run_bf16(res, path):
    return run_bf16_fast(res) if path in ("bf16", "bf16-engine") else run_bf16_trace(res, path)
