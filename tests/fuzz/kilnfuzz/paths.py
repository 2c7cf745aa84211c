"""Running a resolved program through kiln, and the eager references.

Four paths into kiln:
  fast     the program's FX graph of Core ATen ops straight into
           kiln.capture.lower_graph and kiln.module.compile_graph, as
           kiln.dynamo does with AOTAutograd's graphs: about a millisecond
           where torch.export + run_decompositions take 150.
  reference  the fast path on kiln's reference target (the scalar reference
           kernels beside the fast ones, src/hal/reference), held to the
           same rule: a second comparison for every kernel's reference.
  trace    kiln.trace on an nn.Module whose forward makes the same ATen calls
           (parameters as nn.Parameters): torch.export, decompositions,
           fallback and the module's input handling, end to end.
  compile  torch.compile(backend="kiln") in training: forward, a loss,
           backward through AOTAutograd's graphs; outputs and gradients
           (where kiln's fail, torch's own aot_eager backend is judged too).
"""

import types
from dataclasses import dataclass

import numpy as np
import torch

from kilnfuzz.check import Audit, ComparedNaNs, RoundingNoise, compare, conditioning, nan_at_comparison
from kilnfuzz.program import Eager, interpret


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
    e32: list  # float32 eager outputs
    r64: list  # float64 outputs
    noisy: list  # per output, its float64 values from each RoundingNoise run
    ill: str = None  # why the draw is ill-conditioned, or None


def reference(res):
    """Eager float32, float64 and float64 with rounding noise (check.py)."""
    e32 = [res.val(r) for r in res.outputs]
    audit = Audit()
    leaves64 = [leaf_as(leaf, torch.float64) for leaf in res.leaves]
    r64 = interpret(res, Eager(torch.float64, audit), leaves64)
    runs = []
    for k in range(NOISY_RUNS):
        with RoundingNoise([res.program.salt, 11, k]):
            runs.append(interpret(res, Eager(torch.float64), leaves64))
    noisy = [[run[j] for run in runs] for j in range(len(e32))]
    ill = audit.reason
    if not ill and audit.compared.seen:  # a comparison: its operands' NaNs in float32 too
        run32 = ComparedNaNs()
        interpret(res, Eager(torch.float32, run32), [leaf.tensor for leaf in res.leaves])
        ill = nan_at_comparison(run32, audit.compared)
    for e, r, p in zip(e32, r64, noisy):
        ill = ill or conditioning(e, r, p)
    return Reference(e32, r64, noisy, ill)


def compare_all(got, ref, accs, what="output", mags=None, who="kiln"):
    if len(got) != len(ref.e32):
        return f"{who} returned {len(got)} outputs, eager {len(ref.e32)}"
    for j, (k, e, r, p) in enumerate(zip(got, ref.e32, ref.r64, ref.noisy)):
        why = compare(k, e, r, accs[j], f"{what} {j}", p, mags[j] if mags else 0.0, who)
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


def _train(module, res, dtype, compiled):
    """One forward and backward: (outputs, gradients) in leaf order.
    compiled: False (eager), True (torch.compile with kiln) or a backend name."""
    xs = []
    for leaf in res.inputs:
        t = leaf_as(leaf, dtype).detach()
        xs.append(t.requires_grad_() if t.is_floating_point() else t)
    fn = torch.compile(module, backend=compiled if isinstance(compiled, str) else "kiln") if compiled else module
    outs = fn(*xs)
    weights = _loss_weights(res, outs)
    loss = sum((o * w.to(dtype)).sum() for o, w in zip(outs, weights) if w is not None)
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
        e_out, e_grad = _train(ProgramModule(res, requires_grad=True), res, torch.float32, False)
        r_out, r_grad = _train(ProgramModule(res, torch.float64, requires_grad=True), res, torch.float64, False)
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
    judge = _TrainingJudge(res, accs, e_out, e_grad, r_out, r_grad)
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
    return why


class _TrainingJudge:
    """(where, why) for one training run's outputs and gradients against
    eager and float64: where names the first output or gradient that fails
    the rule (None if all pass)."""

    def __init__(self, res, accs, e_out, e_grad, r_out, r_grad):
        self.accs, self.mags = accs, [res.mags[r] for r in res.outputs]
        self.e_out, self.e_grad, self.r_out, self.r_grad = e_out, e_grad, r_out, r_grad

    def __call__(self, outs, grads, who="kiln"):
        why = compare_all(outs, Reference(self.e_out, self.r_out, [()] * len(self.e_out)), self.accs,
                          "forward output", self.mags, who)
        if why:
            return why.split(":")[0], why
        if not all(torch.isfinite(o).all() for o in self.e_out if o.is_floating_point()):
            return None, None  # NaN outputs make every gradient NaN: nothing more to learn
        gacc = 2 * max(self.accs) + 1  # backward runs the forward's reductions again, transposed
        for j, (k, e, r) in enumerate(zip(grads, self.e_grad, self.r_grad)):
            if conditioning(e, r):
                continue
            why = compare(k, e, r, gacc, f"gradient {j}", who=who)
            if why:
                return f"gradient {j}", why
        return None, None
