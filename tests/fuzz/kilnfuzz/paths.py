"""Running a resolved program through kiln, and the eager references.

Paths into kiln:
  fast     the program's FX graph of Core ATen ops straight into
           kiln.capture.lower_graph and kiln.module.compile_graph, as
           kiln.dynamo does with AOTAutograd's graphs: about a millisecond
           where torch.export + run_decompositions take 150.
  fast-nhwc  the fast path under KILN_LAYOUT=nhwc (PATH_ENV).
  reference  the fast path on kiln's reference target (the scalar reference
           kernels beside the fast ones, src/hal/reference), held to the
           same rule: a second comparison for every kernel's reference.
  trace    kiln.trace on an nn.Module whose forward makes the same ATen calls
           (parameters as nn.Parameters): torch.export, decompositions,
           fallback and the module's input handling, end to end.
  compile  torch.compile(backend="kiln") in training: forward, a loss,
           backward through AOTAutograd's graphs; outputs and gradients
           (where kiln's fail, torch's own aot_eager backend is judged too).
  dynamic  kiln.trace with every input dimension torch.export.Dim.AUTO: the
           sizes export keeps symbolic make one symbolic artifact, run at a
           sequence of new sizes (run_dynamic) against eager at each.
"""

import contextlib
import dataclasses
import os
import re
import types
from dataclasses import dataclass

import numpy as np
import torch

from kilnfuzz.check import (Audit, ComparedNaNs, ContiguousBatchNormGrad, RoundingNoise, UncheckedShapes, compare,
                            conditioning, nan_at_comparison)
from kilnfuzz.data import make_leaf
from kilnfuzz.program import Eager, interpret


# Test knobs a float32 path compiles under (kiln reads them as it compiles):
# KILN_LAYOUT=nhwc makes every region of convs channels-last, paying or not
# (kiln_pass_layout.c). Only wide convs (ops_nn.Conv2dWide) are candidates,
# and kiln's cost rule makes a region NHWC only for chains of them whose
# inputs are 16 channels wide already: 1 of 201 float32 fuzz graphs with a
# wide conv (seed 77), against 169 under the knob. So the kiln.trace paths
# and half the fast graphs (fast-nhwc) run the fp32 NHWC conv kernels;
# fast, reference and compile keep kiln's own choice.
NHWC = {"KILN_LAYOUT": "nhwc"}
PATH_ENV = {"fast-nhwc": NHWC, "trace": NHWC, "dynamic": NHWC}


def env_for(path):
    """The test knobs `path` compiles under: PATH_ENV's, or for a bf16 path
    bf16.PATH_ENV's."""
    from kilnfuzz.bf16 import PATH_ENV as BF16_PATH_ENV

    return {**PATH_ENV, **BF16_PATH_ENV}.get(path, {})


@contextlib.contextmanager
def path_env(path):
    """The path's knobs (env_for) set in os.environ for the duration."""
    env = env_for(path)
    old = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


class NotApplicable(Exception):
    """The program cannot take this path even in eager PyTorch."""


class ProgramModule(torch.nn.Module):
    """The program as a module: parameters are the param leaves, forward
    takes the input leaves in order."""

    def __init__(self, res, dtype=torch.float32, requires_grad=False):
        super().__init__()
        self._res, self._dtype = res, dtype
        for leaf in res.leaves:
            if leaf.role != "param":
                continue
            t = leaf.tensor.detach().clone()
            if t.is_floating_point() and leaf.spec.trainable:
                self.register_parameter(leaf.name, torch.nn.Parameter(t.to(dtype), requires_grad=requires_grad))
            elif t.is_floating_point():
                self.register_buffer(leaf.name, t.to(dtype))
            else:
                self.register_buffer(leaf.name, t)

    def forward(self, *inputs):
        it = iter(inputs)
        handles = [getattr(self, leaf.name) if leaf.role == "param" else next(it) for leaf in self._res.leaves]
        return tuple(interpret(self._res, Eager(self._dtype), handles))


def leaf_as(leaf, dtype):
    """The leaf's tensor in `dtype` (if float) with the very same strides:
    .to() of a strided or expanded view is contiguous, and a plan may have
    relied on the strides (a view that a reshape could take)."""
    if not leaf.tensor.is_floating_point() or dtype == leaf.tensor.dtype:
        return leaf.tensor
    if leaf.place is None:
        return leaf.tensor.to(dtype)
    fn, args = leaf.place
    return fn(leaf.values.to(dtype), *args)


NOISY_RUNS = 2


@dataclass
class Reference:
    e32: list  # float32 eager outputs (the bf16 mode's: eager bf16's)
    r64: list  # float64 outputs
    noisy: list  # per output, its float64 values from each RoundingNoise run
    ill: str = None  # why the draw is ill-conditioned, or None
    extra: list = None  # per output, a tolerance per element added to the rule's, or None (quant.py)


def reference(res):
    """Eager float32, float64 and float64 with rounding noise (check.py)."""
    e32 = [res.val(r) for r in res.outputs]
    audit = Audit()
    leaves64 = [leaf_as(leaf, torch.float64) for leaf in res.leaves]
    r64 = interpret(res, Eager(torch.float64, audit, at_plan_sizes=True), leaves64)
    runs = []
    for k in range(NOISY_RUNS):
        with RoundingNoise([res.program.salt, 11, k]):
            runs.append(interpret(res, Eager(torch.float64, at_plan_sizes=True), leaves64))
    noisy = [[run[j] for run in runs] for j in range(len(e32))]
    ill = audit.reason
    if not ill and audit.compared.seen:  # a comparison: its operands' NaNs in float32 too
        run32 = ComparedNaNs()
        interpret(res, Eager(torch.float32, run32, at_plan_sizes=True), [leaf.tensor for leaf in res.leaves])
        ill = nan_at_comparison(run32, audit.compared)
    for e, r, p in zip(e32, r64, noisy):
        ill = ill or conditioning(e, r, p)
    return Reference(e32, r64, noisy, ill)


def compare_all(got, ref, accs, what="output", mags=None, who="kiln", lowp=False):
    if len(got) != len(ref.e32):
        return f"{who} returned {len(got)} outputs, eager {len(ref.e32)}"
    for j, (k, e, r, p) in enumerate(zip(got, ref.e32, ref.r64, ref.noisy)):
        why = compare(k, e, r, accs[j], f"{what} {j}", p, mags[j] if mags else 0.0, who, lowp,
                      ref.extra[j] if ref.extra else None)
        if why:
            return why
    return None


def run_fast(res, target=None):
    from kiln.capture import lower_graph
    from kiln.module import KilnModule, compile_graph

    placeholders = [("input", leaf.name) if leaf.role == "input" else ("constant", leaf.tensor)
                    for leaf in res.leaves]
    ctx = lower_graph(types.SimpleNamespace(graph=res.graph), placeholders, [res.nodes[r] for r in res.outputs])
    mod = KilnModule(compile_graph(ctx, target=target), [leaf.name for leaf in res.inputs], None, "kiln-fuzz")
    return mod.run_flat([leaf.tensor for leaf in res.inputs])


def run_trace(res):
    import kiln

    model = ProgramModule(res).eval()
    xs = tuple(leaf.tensor for leaf in res.inputs)
    try:
        compiled = kiln.trace(model, xs)
    except Exception:
        _torch_can(lambda: torch.export.export(model, xs), "torch.export")
        raise
    return list(compiled(*xs))


# The dynamic path's sizes, as steps from the example's size of each symbol
# (clamped to the symbol's range): growing by one and by a few (an instance
# rebound in place, its plan reused), shrinking, a jump past the plan's
# headroom (placed again), a size seen before (a cached binding) and the
# example's own size last, after all of them.
DYNAMIC_STEPS = (1, 3, -1, 17, 1, 0)


def _symbolic_dims(ep):
    """{(input position, dim): sympy expression} for the user inputs' sizes
    torch.export kept symbolic."""
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    dims = {}
    for i, name in enumerate(ep.graph_signature.user_inputs):
        val = placeholders[name].meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                if isinstance(size, torch.SymInt):
                    dims[(i, d)] = size.node.expr
    return dims


def run_dynamic(res, accs, mags):
    """kiln.trace(model, xs, dynamic_shapes=Dim.AUTO everywhere), then the one
    artifact at each size of DYNAMIC_STEPS, judged against eager float32 and
    float64 at that size by the rule (check.compare, with rounding-noise
    runs at that size). None, or why it fails.

    New inputs are drawn from the same specs at the new shape; a size where
    eager itself fails (an index now out of range) is left out. The
    tolerance's accumulation length is scaled by the sizes' growth (a
    symbolic dimension may be a reduction's)."""
    import kiln
    from torch.export import Dim

    model = ProgramModule(res).eval()
    xs = tuple(leaf.tensor for leaf in res.inputs)
    if not xs:
        raise NotApplicable("no inputs: nothing can be symbolic")
    # forward(*inputs): one var-positional argument, a tuple of tensors.
    spec = (tuple({d: Dim.AUTO for d in range(x.dim())} for x in xs),)
    try:
        ep = torch.export.export(model, xs, dynamic_shapes=spec)
    except Exception as e:  # noqa: BLE001
        raise NotApplicable(f"torch.export with Dim.AUTO fails: {type(e).__name__}: {str(e)[:200]}") from None
    dims = _symbolic_dims(ep)
    symbols = {}
    for (i, d), expr in dims.items():
        if expr.is_Symbol:
            symbols.setdefault(expr, xs[i].shape[d])
    if not symbols:
        raise NotApplicable("torch.export keeps no size symbolic")
    try:
        compiled = kiln.trace(model, xs, dynamic_shapes=spec)
    except Exception:
        _torch_can(lambda: torch.export.export(model, xs, dynamic_shapes=spec).run_decompositions(),
                   "torch.export(Dim.AUTO) + run_decompositions")
        raise
    model64 = ProgramModule(res, torch.float64).eval()
    # The program kiln compiles is torch.export's after the Core ATen
    # decomposition, whose retrace can add guards of its own (a slice's
    # length kept nonzero: seed 5150 graph 5636): refusals are judged
    # against that program's guards.
    try:
        from kiln.capture import decomposition_table
        exported = ep.run_decompositions(decomposition_table()).module()
    except Exception:  # noqa: BLE001 -- kiln.trace, which succeeded, did this; fall back to the plain program
        exported = ep.module()
    ran = refused = 0
    for step, off in enumerate(DYNAMIC_STEPS):
        binding = {}
        for sym, v in symbols.items():
            r = ep.range_constraints.get(sym)
            lo, hi = 2, v + 64
            if r is not None:
                lo = int(r.lower)
                try:
                    hi = min(hi, int(r.upper))
                except (TypeError, ValueError, AttributeError, OverflowError):  # no upper bound
                    pass
            binding[sym] = min(max(v + off, lo), hi)
        new = []
        for i, (leaf, x) in enumerate(zip(res.inputs, xs)):
            shape = [int(dims[(i, d)].subs(binding)) if (i, d) in dims else x.shape[d] for d in range(x.dim())]
            if tuple(shape) == tuple(x.shape):
                new.append(x)
            else:
                spec_i = dataclasses.replace(leaf.spec, shape=tuple(shape))
                new.append(make_leaf(spec_i, (res.program.salt, 9000 + step, i)))
        with torch.no_grad():
            new64 = [t.double() if t.is_floating_point() else t for t in new]
            try:
                with UncheckedShapes():
                    e32 = list(model(*new))
                r64 = list(model64(*new64))
            except Exception:  # noqa: BLE001 -- eager cannot run these sizes (an index out of range)
                continue
            # float64 with float32-sized rounding noise at these sizes (the
            # rule's E, as the static paths have it): a cancellation the
            # new inputs make worse than the example's shows here.
            noisy_runs = []
            for k in range(NOISY_RUNS):
                with RoundingNoise([res.program.salt, 17, step, k]):
                    noisy_runs.append(list(model64(*new64)))
            sizes = ", ".join(f"{s}={v}" for s, v in binding.items())
            torch_error = _exported_error(exported, new)
            torch_refused = "Guard failed" in torch_error
            try:
                got = list(compiled(*new))
            except Exception as e:  # noqa: BLE001
                if torch_refused or _layout_refusal(e, new, xs) or (torch_error and str(e) == torch_error):
                    # torch's own program refuses these sizes too: a guard
                    # beyond the ranges, which kiln checks as well. Or
                    # kiln refuses an input it reads as laid out in memory
                    # (as_strided) that comes in another layout than at
                    # trace time: eager's answer then depends on memory
                    # kiln never sees (seed 20099 graph 1078). Or kiln's
                    # fallback ran torch's own program's ops in eager and
                    # they fail as that program does: its view of an
                    # input traced contiguous along the viewed dims, given
                    # strided at the new sizes (seed 20106 graph 434).
                    refused += 1
                    continue
                return f"at {sizes}: kiln raised {type(e).__name__}: {str(e)[:300]}"
            # Where torch refuses and kiln runs (a guard on strides only,
            # which kiln's program does not depend on), kiln's answer is
            # judged against eager's like any other: never a silent wrong one.
        growth = 1.0
        for sym, v in symbols.items():
            growth *= max(1.0, binding[sym] / v)
        if len(got) != len(e32):
            return f"at {sizes}: kiln returned {len(got)} outputs, eager {len(e32)}"
        for j, (k, e, r) in enumerate(zip(got, e32, r64)):
            # Drawn at a new size without the reference's audit: outputs where
            # float32 and float64 eager disagree (an ill-conditioned draw, a
            # comparison that rounding flips) are not judged.
            noisy = [run[j] for run in noisy_runs]
            if conditioning(e, r, noisy) if e.is_floating_point() else not all(
                    torch.equal(e, x.to(e.dtype)) for x in (r, *noisy)):
                # A bool that float32-sized noise flips in float64 (a value
                # compared near its threshold) is ill-conditioned as well.
                continue
            why = compare(k, e, r, int(accs[j] * growth) + 1, f"output {j} at {sizes}", noisy, mags[j])
            if why:
                return why
        ran += 1
    if not ran and not refused:
        raise NotApplicable("eager runs none of the new sizes")
    return None


def _layout_refusal(error, inputs, traced=()):
    """Is error kiln's refusal of an input it reads through its storage
    (KilnModule._check_input), and does that input's layout indeed differ
    from the traced example's: not row-major from its storage's start, or
    row-major where the example was not (a permuted example, then a fresh
    input at new sizes: seed 20121 graph 8498)?"""
    m = re.match(r"input (\d+) \('[^']*'\): the model reads its memory as laid out at trace time", str(error))
    from kiln.errors import KilnError
    if not isinstance(error, KilnError) or m is None or int(m.group(1)) >= len(inputs):
        return False
    i = int(m.group(1))

    def row_major(t):
        return t.is_contiguous() and t.storage_offset() == 0

    return not row_major(inputs[i]) or (i < len(traced) and not row_major(traced[i]))


def _exported_error(exported, inputs):
    """torch's message (else "") when torch's exported program itself fails
    on these inputs. A "Guard failed" is a guard beyond the symbols' ranges
    (view(-1, 1, 40) of (s0, 1, s1, s2) traced as (s0, 1, s1*s2), guarding
    s1*s2 == 40), which eager, running the module's code, never checks: at
    these sizes the traced program is not the module. kiln checks the same
    guards on sizes (FINDINGS.md, 15) and may refuse such a call; if it
    runs one (torch's guard was on strides), its answer must equal eager's."""
    try:
        exported(*inputs)
    except Exception as e:  # noqa: BLE001
        return str(e)
    return ""


def _torch_can(fn, what):
    """After kiln failed: raise NotApplicable if torch alone fails too (its
    fake-tensor strides disagree with eager's, say), so that the failure is
    torch's and not kiln's."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        raise NotApplicable(f"{what} itself fails: {type(e).__name__}: {str(e)[:200]}") from None


def _loss_weights(res, outs):
    rng = np.random.default_rng([res.program.salt, 7, len(outs)])
    return [torch.from_numpy(rng.standard_normal(size=tuple(o.shape)).astype(np.float32))
            if o.is_floating_point() else None for o in outs]


def _train(module, res, dtype, compiled, contiguous=False):
    """One forward and backward: (outputs, gradients) in leaf order.
    compiled: False (eager), True (torch.compile with kiln) or a backend name.
    contiguous: the inputs as contiguous copies, not in their layouts."""
    xs = []
    for leaf in res.inputs:
        t = leaf_as(leaf, dtype).detach()
        if contiguous:
            t = t.contiguous()
        xs.append(t.requires_grad_() if t.is_floating_point() else t)
    return train_step(module, res, xs, dtype, compiled)


def train_step(module, res, xs, dtype, compiled, context=None):
    """The forward (inside `context`, if given: the bf16 mode's autocast),
    the loss in `dtype` and the backward: (outputs, gradients of the
    module's parameters and the float inputs, in that order)."""
    fn = torch.compile(module, backend=compiled if isinstance(compiled, str) else "kiln") if compiled else module
    with context if context is not None else contextlib.nullcontext():
        outs = fn(*xs)
    weights = _loss_weights(res, outs)
    loss = sum((o.to(dtype) * w.to(dtype)).sum() for o, w in zip(outs, weights) if w is not None)
    grads = []
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        loss.backward()
        tensors = [p for _, p in module.named_parameters()] + [x for x in xs if x.is_floating_point()]
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in tensors]
    return [o.detach() for o in outs], [g.detach() for g in grads]


def run_compile(res, accs):
    """torch.compile(backend="kiln") in training; None or why it fails.

    When kiln's results fail the rule, torch's own compile stack is judged
    the same way: torch.compile(backend="aot_eager") (AOTAutograd's graphs
    run by eager ATen, no kiln). If it fails on the same output or gradient,
    the difference is torch's (AOTAutograd's backward of an overlapping
    as_strided differs from eager's), kiln inherits it from the graphs it is
    given, and the graph is not applicable."""
    import torch._dynamo

    try:
        with ContiguousBatchNormGrad():  # eager as the math has it, not torch's misread layout
            e_out, e_grad = _train(ProgramModule(res, requires_grad=True), res, torch.float32, False)
            r_out, r_grad = _train(ProgramModule(res, torch.float64, requires_grad=True), res, torch.float64,
                                   False)
        # The float64 training run rounded as if in float32 (check.RoundingNoise, forward and backward):
        # a gradient that cancels exactly in float64 (a repeat's sum of two terms that are negatives of
        # each other) is rounding noise of its terms' size in any float32 run, eager's or kiln's, and
        # these runs give it that size (fuzzer finding 18).
        noisy_grads = []
        for k in range(NOISY_RUNS):
            with ContiguousBatchNormGrad(), RoundingNoise([res.program.salt, 13, k]):
                noisy_grads.append(_train(ProgramModule(res, torch.float64, requires_grad=True), res,
                                          torch.float64, False)[1])
    except RuntimeError as e:  # eager cannot train this program (an op without a derivative)
        raise NotApplicable(f"eager training fails: {e}") from None

    def train_with(backend):
        return _train(ProgramModule(res, requires_grad=True), res, torch.float32, backend)

    torch._dynamo.reset()
    try:
        k_out, k_grad = train_with("kiln")
    except Exception:
        torch._dynamo.reset()
        _torch_can(lambda: train_with("aot_eager"), "torch.compile(backend='aot_eager')")
        raise
    judge = _TrainingJudge(res, accs, e_out, e_grad, r_out, r_grad, noisy_grads)
    where, why = judge(k_out, k_grad)
    if why is None:
        return None
    torch._dynamo.reset()
    try:
        a_out, a_grad = train_with("aot_eager")
    except Exception as e:  # noqa: BLE001 -- torch's stack cannot run it: kiln's result stands judged
        return why + f" (torch.compile(backend='aot_eager') raises {type(e).__name__})"
    finally:
        torch._dynamo.reset()
    a_where, a_why = judge(a_out, a_grad, "aot_eager")
    if a_where == where:
        raise NotApplicable(f"torch.compile(backend='aot_eager') alone disagrees with eager: {a_why}")
    # The inputs' memory layouts cannot change the math. Where eager's own
    # result depends on them and kiln's agrees with eager's (and float64's)
    # on contiguous copies, the difference is torch's: its CPU gather's
    # backward (scatter_add) with an expanded, stride-0 index is wrong in
    # torch 2.13 (FINDINGS.md, seed 4242 graph 2045).
    if any(leaf.place is not None for leaf in res.inputs):
        c_out, c_grad = _train(ProgramModule(res, requires_grad=True), res, torch.float32, False, True)
        rc_out, rc_grad = _train(ProgramModule(res, torch.float64, requires_grad=True), res, torch.float64,
                                 False, True)
        c_judge = _TrainingJudge(res, accs, c_out, c_grad, rc_out, rc_grad)
        if c_judge(k_out, k_grad)[0] is None and c_judge(e_out, e_grad, "eager")[0] is not None:
            raise NotApplicable(f"eager's own result depends on the inputs' memory layouts, kiln's agrees "
                                f"with eager on contiguous copies: {why}")
    return why


class _TrainingJudge:
    """(where, why) for one training run's outputs and gradients against
    eager and float64: where names the first output or gradient that fails
    the rule (None if all pass)."""

    def __init__(self, res, accs, e_out, e_grad, r_out, r_grad, noisy_grads=()):
        self.accs, self.mags = accs, [res.mags[r] for r in res.outputs]
        self.e_out, self.e_grad, self.r_out, self.r_grad = e_out, e_grad, r_out, r_grad
        # per gradient, its values from each noisy float64 run (empty: none)
        self.noisy = [[run[j] for run in noisy_grads] for j in range(len(r_grad))]

    def __call__(self, outs, grads, who="kiln"):
        why = compare_all(outs, Reference(self.e_out, self.r_out, [()] * len(self.e_out)), self.accs,
                          "forward output", self.mags, who)
        if why:
            return why.split(":")[0], why
        if not all(torch.isfinite(o).all() for o in self.e_out if o.is_floating_point()):
            return None, None  # NaN outputs make every gradient NaN: nothing more to learn
        gacc = 2 * max(self.accs) + 1  # backward runs the forward's reductions again, transposed
        for j, (k, e, r, p) in enumerate(zip(grads, self.e_grad, self.r_grad, self.noisy)):
            if conditioning(e, r, p):
                continue
            why = compare(k, e, r, gacc, f"gradient {j}", p, who=who)
            if why:
                return f"gradient {j}", why
        return None, None
