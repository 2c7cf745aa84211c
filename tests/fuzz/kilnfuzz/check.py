"""Comparing kiln's results with eager PyTorch's: the tolerance rule.

Three results per output: k (kiln, float32), e (eager float32, the same ATen
calls) and r (the reference: the same program in float64, inputs and
parameters cast exactly). Exact answers are unknowable, r is their stand-in:
its own rounding (2^-53) is negligible next to float32's.

For each output:
  1. k's shape and dtype equal e's exactly.
  2. bool and integer outputs equal e's exactly. (Comparisons close enough
     to a tie that rounding could flip them are excluded by the audit below.)
  3. float outputs: NaN positions equal e's, and so do +-inf positions and
     signs. Overflow and invalid operations are part of what is checked.
     Where e is NaN and r an infinity (torch's own float32 and float64
     kernels disagree: float32 gelu(inf) is NaN), k may be either.
  4. every finite element satisfies
         |k_i - r_i| <= 4 * E  +  8 * eps * L * (|r_i| + S / 16)
     eps = 2^-23 (float32's machine epsilon);
     E   = max_i |e_i - r_i|, and the same for two runs of the float64
           program with rounding noise (RoundingNoise: every op's arguments
           and results scaled by 1 + u, u uniform in [-eps, eps], the model
           of float32 rounding behind Monte Carlo arithmetic, and the
           perturbation backward-stable kernels are allowed; sums, GEMMs
           and convolutions also add +-[0.5, 1] eps * sum|terms|, their
           partial sums' rounding): how far float32
           rounding takes this program from the answer on this draw. It
           measures the conditioning (cancellation, a steep exp or
           rsqrt, a variance near zero in a norm); eager's own error
           alone may be zero by luck where kiln's order of rounding is
           not. kiln rounds differently (packed GEMM panels, FMA,
           vectorised exp/tanh/erf), so its error may be a few times
           these, not of another order: factor 4;
     L   = the accumulation length along the output's path: the sum over
           its ops of the terms each output element adds up (K for a
           K-long dot product, n for an n-element reduction or softmax or
           norm, 1 for an elementwise op). A sum of L rounded terms in any
           order is within L * eps * sum|terms| of exact (Higham, 2002,
           ch. 4); this term covers draws where eager's error is small by
           luck, and the few-ulp error of each transcendental;
     S   = max_i |r_i|, the output's scale: a value that is small because
           of cancellation is still off by about eps * the size of its
           terms, which S / 16 stands in for; but never less than
           2^-20 * A, A the largest value the output was computed from (an
           output 2^20 times smaller than its ingredients, cancelled or
           underflowed to about zero, is float32 noise at that level:
           torch's gelu(-9) is 0, kiln's more accurate -3e-19).
Drawn data that make the comparison meaningless are "ill-conditioned" and
redrawn (runner): float32 eager itself off by more than 1e-3 * S; e's NaN or
infinity positions not r's (float32 overflow where double is finite); or a
comparison, the argument of log/sqrt/rsqrt/reciprocal, or atan2's arguments
(their distance from its branch cut), within 1e-4 of its threshold
relative to its operands' scale (a rounding error could flip it);
or attention over NaN or infinite scores (torch's CPU kernels give such a
row zero weight where the math says NaN: no reference to hold kiln to); or
an exact zero whose sign decides an op's result (_SIGN_OF_ZERO); or a
comparison whose float operands are NaN at other places in float32 eager
than in float64 (_NAN_AT_COMPARISON: float32 gelu(inf) is NaN, float64's
inf; rule 3 accepts either for a float output, but a comparison makes of
them two different exact bools, and kiln may give either); or a layer or
group norm of finite values whose squared deviations pass float32's range
(_NORM_ROWS: float32's variance is infinite, and what each kernel makes of
that, beta or NaN, is its own).

The bf16 mode (bf16.py: a model in bf16, or traced under autocast) holds
kiln to python/kiln/lowp.py's contract: "its error against a float64
evaluation of the same model (bf16 weights and inputs) is at most eager
bf16's own error plus one bf16 rounding of each output". The inputs and
parameters are drawn as above, then rounded to bf16; e is eager running the
program in bf16 (or under autocast), each op rounding its result to bf16;
r is float64 from the same bf16 values (exact). Rules 1 to 3 as above; 4
becomes
         |k_i - r_i| <= 4 * E  +  u * |r_i|  +  8 * eps * L * (|r_i| + S / 16)
     u   = 2^-8, bf16's unit roundoff: kiln rounds each output to bf16 once
           (eager's own rounding of it is inside E);
     E   = max_i |e_i - r_i|, and the same for two float64 runs under
           RoundingNoise with every op's results at u (eager's bf16
           rounding of each op's result; under autocast, only the results
           of the ops autocast runs in bf16, AUTOCAST_LOW, the others at
           float32's eps), its arguments and partial sums at float32's eps
           (eager's ops compute in fp32 from their bf16 arguments, and
           eager and kiln accumulate in fp32); no noise on exact ops
           (selections, copies, eq: RoundingNoise.EXACT). Noise at u
           on the arguments too would count each rounding twice: E came
           out 5 to 10 times eager's own error, and 4 E up to 14% of an
           output's scale. Factor 4 as
           for float32, and for a reason of the same kind: kiln rounds at
           other places than eager (at most where eager does: a GEMM's
           operand is rounded as it is packed, from kiln's fp32 value, a
           rounding of another number than eager's; an intermediate kiln
           keeps in fp32 is not rounded at all), so each of its roundings
           is one eager also makes, of about the same size, on a value
           within E of eager's, and its error is E's order. What that
           lets through: a bias of one bf16 ulp (truncation instead of
           rounding to nearest even passed every graph); what it catches:
           a wrong element (B's rows swapped in the run-time packer failed
           graphs by 2 to 110 times their tolerance; FINDINGS.md, "The
           bf16 mode") and an error of a sixteenth of the output's scale
           in most outputs (test_fuzz.py);
     eps, L, S as in 4 above (kiln and eager accumulate in fp32).
The ill-conditioned draws are those above, with ILL_RELATIVE_BF16 = 5e-2
(eager bf16 off float64 by more than 5% of an output's scale), plus a
decision at bf16's resolution: an element of a comparison, of the
argument of log, sqrt, rsqrt or reciprocal against zero, or of atan2's
arguments against its branch cut (y = 0 at x <= 0), whose float64 gap
is nonzero and at most 4 times the largest error on it of eager bf16 and
the noisy runs, so kiln's fp32 operand, off by that much, could fall on
its other side (bf16_ties; a gap measured against the whole tensor's error
redrew 13% of the draws). The same rule judges the bf16-compile path's
gradients (L twice the forward's, as for float32) and bf16-compute's
float32 outputs, rounded to bf16 first (compute_dtype=bf16 rounds at most
where eager bf16 does).
"""

import math

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

EPS32 = 2.0 ** -23
EPS_BF16 = 2.0 ** -8  # bf16's unit roundoff (half its machine epsilon 2^-7)
FACTOR_E = 4.0
FACTOR_L = 8.0
ILL_RELATIVE = 1e-3
ILL_RELATIVE_BF16 = 5e-2
TIE_RELATIVE = 1e-4

aten = torch.ops.aten
_COMPARISONS = {aten.gt.Tensor, aten.gt.Scalar, aten.lt.Tensor, aten.lt.Scalar, aten.ge.Tensor, aten.ge.Scalar,
                aten.le.Tensor, aten.le.Scalar}
_DOMAIN_AT_ZERO = {aten.log.default, aten.sqrt.default, aten.rsqrt.default, aten.reciprocal.default,
                   aten.pow.Tensor_Scalar, aten.log1p.default}
# Where the domain's edge is not zero: log1p is NaN below -1 (seed 20116
# graph 25791: an attention output of -1.00017 in float64 that bf16 eager
# rounds to -1, -inf, and kiln's bf16 rule to -0.996, finite).
_DOMAIN_EDGE = {aten.log1p.default: -1.0}


def _domain_gap(op, x):
    """x's distance past the domain's edge of op (float64)."""
    return x.double() - _DOMAIN_EDGE.get(op, 0.0)


# Ops whose result flips with the sign of an exact zero: atan2(+-0, y < 0) is
# +-pi, x / +-0, 1 / +-0 and rsqrt(+-0) are +-inf. The sign of a zero made by a sum is
# not defined consistently by eager itself (its mm gives -0.0 for K = 1 and
# +0.0 for K = 4; its conv gives -0.0 in the padding), so such a draw has no
# reference to hold kiln to and is redrawn. Signs of zeros made elementwise
# (tanh(-0), a sum of -0s) are still checked wherever no such op reads them.
_SIGN_OF_ZERO = {aten.atan2.default, aten.div.Tensor, aten.reciprocal.default, aten.rsqrt.default}

# Norms whose squared deviations can pass float32's range while every value
# is finite (a group norm of values up to 7e36: seed 20092 graph 344). The
# variance is then infinite in float32, and what a kernel makes of that is
# its own: eager's Welford cascade gives beta (rstd 0) for some rows and NaN
# for others (inf - inf where it merges partial sums of mixed signs), in its
# layer_norm and group_norm alike; kiln's two-pass sums give NaN. No
# reference to hold kiln to. Judged by each row's spread, max - min: it
# bounds every deviation any order of updates meets, so a running mean's
# intermediate deviations too.
_NORM_ROWS = {aten.native_layer_norm.default: lambda x, args: x.reshape(-1, math.prod(args[1]) or 1),
              aten.native_group_norm.default: lambda x, args: x.reshape(args[3] * args[6], -1)}
_FLOAT32_MAX = float(torch.finfo(torch.float32).max)


def _norm_overflows(op, args):
    """True when some row `op` normalizes has finite values whose squared
    deviations could add up past float32's range: n * spread^2 above a
    quarter of float32's largest value (the margin covers rounding and
    any order of summing)."""
    x = args[0]
    if x.numel() == 0:
        return False
    rows = _NORM_ROWS[op](x.detach().double(), args)
    spread = rows.amax(1) - rows.amin(1)
    finite = torch.isfinite(spread)
    return bool((finite & (spread.square() * rows.shape[1] > _FLOAT32_MAX / 4)).any())


def _double(v):
    """A tensor or a Python number as a float64 tensor."""
    return v.double() if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=torch.float64)


def _atan2_cut_gap(y, x):
    """How far each (x, y) of atan2(y, x) is from where its result jumps:
    the branch cut, y = 0 at x <= 0 (pi to -pi), origin included. Beside
    the cut a rounding of y flips the result by 2 pi; atan2(v, v) of a
    cancelled v (seed 20089 graph 227: v 6e-5 of its terms) by pi."""
    y, x = _double(y), _double(x)
    return torch.where(x <= 0, y.abs(), torch.hypot(x, y))


def _zero_decides(op, args):
    t = args[1] if op is aten.div.Tensor else args[0]
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return False
    zero = t == 0
    if op is aten.atan2.default and isinstance(args[1], torch.Tensor):
        zero = zero & (args[1] <= 0)  # atan2(+-0, x > 0) is +-0: a zero's sign, still checked
    return bool(zero.any())


# A NaN/inf ambiguity reaching a comparison: where torch's float32 and
# float64 kernels disagree between NaN and a number or an infinity (float32
# gelu(inf) is NaN, float64 gives inf; kiln gives inf too), rule 3 accepts
# either in a float output; through a comparison the two become different
# exact bools (NaN > p is False, inf > p True), with no reference to hold
# kiln to: the draw is redrawn. Found as the NaN positions of every
# comparison's float operands, in call order, in the float32 and float64
# runs (ComparedNaNs).
_NAN_AT_COMPARISON = "a comparison's operand is NaN in float32 eager where float64 is not, or the reverse"


def _nan_positions(args):
    return tuple(torch.isnan(a) if isinstance(a, torch.Tensor) else torch.tensor(a != a)
                 for a in args[:2] if not isinstance(a, torch.Tensor) or a.is_floating_point())


class ComparedNaNs:
    """Records the NaN positions of the float operands of each comparison one
    run makes (an Eager audit)."""

    def __init__(self):
        self.seen = []

    def __call__(self, op, args, kwargs, out):
        if op in _COMPARISONS and args[0].is_floating_point():
            self.seen.append(_nan_positions(args))


def nan_at_comparison(run32, run64):
    """_NAN_AT_COMPARISON if two ComparedNaNs (float32 and float64 runs of
    one program) disagree, else None."""
    if len(run32.seen) != len(run64.seen):
        return _NAN_AT_COMPARISON
    for a, b in zip(run32.seen, run64.seen):
        if len(a) != len(b) or not all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b)):
            return _NAN_AT_COMPARISON
    return None


class Decisions:
    """Records, in call order, the float64 gap of every decision one run
    makes: a comparison's a - b, the argument of log, sqrt, rsqrt,
    reciprocal or a pow that needs a positive one (its gap to zero), or
    atan2's arguments' distance from its branch cut. An
    Eager audit for the bf16 mode's tie check (bf16_ties)."""

    def __init__(self):
        self.gaps = []

    def __call__(self, op, args, kwargs, out):
        if not (isinstance(args[0], torch.Tensor) and args[0].is_floating_point()):
            return
        if op in _COMPARISONS:
            b = args[1].double() if isinstance(args[1], torch.Tensor) else float(args[1])
            self.gaps.append(args[0].double() - b)
        elif op is aten.atan2.default:
            self.gaps.append(_atan2_cut_gap(args[0], args[1]))
        elif op in _DOMAIN_AT_ZERO:
            if op is aten.pow.Tensor_Scalar and float(args[1]) == int(args[1]) and args[1] >= 0:
                return
            self.gaps.append(_domain_gap(op, args[0]))


def bf16_ties(runs, exact):
    """Why the bf16 draw is ill-conditioned at a decision, or None. runs:
    Decisions of eager bf16 and of the noisy float64 runs; exact: of the
    float64 run. An element of a decision whose float64 gap is nonzero
    and within FACTOR_E times the runs' largest error on it is one kiln's
    fp32 operands, off by up to that much, could decide the other way."""
    for run in runs:
        if len(run.gaps) != len(exact.gaps):
            return "the bf16 and float64 runs make different decisions"
    for i, g64 in enumerate(exact.gaps):
        err = torch.zeros_like(g64)
        for run in runs:
            g = run.gaps[i]
            if g.shape != g64.shape:
                return "the bf16 and float64 runs make different decisions"
            d = (g - g64).abs()
            err = torch.maximum(err, torch.where(torch.isfinite(d), d, torch.zeros_like(d)))
        near = (g64 != 0) & (g64.abs() <= FACTOR_E * err) & torch.isfinite(g64)
        if bool(near.any()):
            j = int(near.flatten().nonzero()[0])
            return (f"a decision (comparison or domain) within {FACTOR_E:g} x eager bf16's error of a tie "
                    f"(gap {float(g64.flatten()[j]):.3g}, error {float(err.flatten()[j]):.3g})")
    return None


def _near(a, b):
    """True when some pair a_i, b_i differs, but by less than TIE_RELATIVE of
    their scale: a flip from rounding is possible."""
    a, b = _double(a), _double(b)
    with torch.no_grad():
        d = (a - b).abs()
        finite = torch.isfinite(d)
        scale = max(_amax(a), _amax(b), 1e-30)
        return bool(((d > 0) & (d < TIE_RELATIVE * scale) & finite).any())


def _amax(t):
    f = t[torch.isfinite(t)]
    return float(f.abs().max()) if f.numel() else 0.0


class Audit:
    """Watches the float64 run for decisions close to a tie (see above)."""

    def __init__(self):
        self.reason = None
        self.compared = ComparedNaNs()

    def __call__(self, op, args, kwargs, out):
        self.compared(op, args, kwargs, out)
        if self.reason is not None:
            return
        if op is aten.scaled_dot_product_attention.default:
            if not all(bool(torch.isfinite(t).all()) for t in args[:3]):
                self.reason = "attention over non-finite values"
            return
        if op in _COMPARISONS and args[0].is_floating_point():
            if _near(args[0], args[1]):
                self.reason = f"{op} has operands within {TIE_RELATIVE} of a tie"
        if op in _NORM_ROWS and args[0].is_floating_point() and _norm_overflows(op, args):
            self.reason = f"{op} normalizes values whose squared deviations pass float32's range"
            return
        if op in _SIGN_OF_ZERO and _zero_decides(op, args):
            self.reason = f"{op} meets an exact zero whose sign decides its result"
            return
        if op is aten.atan2.default and args[0].is_floating_point():
            gap = _atan2_cut_gap(args[0], args[1])
            scale = max(_amax(gap), 1e-30)
            if bool(((gap > 0) & (gap < TIE_RELATIVE * scale) & torch.isfinite(gap)).any()):
                self.reason = f"{op} has arguments within {TIE_RELATIVE} of its branch cut"
        if op in _DOMAIN_AT_ZERO and args[0].is_floating_point():
            if op is aten.pow.Tensor_Scalar and float(args[1]) == int(args[1]) and args[1] >= 0:
                return
            if _near(_domain_gap(op, args[0]), 0.0):
                self.reason = f"{op} has an argument within {TIE_RELATIVE} of its domain's edge"


class UncheckedShapes(TorchDispatchMode):
    """Raises where eager runs a program its kernels do not check: attention
    whose keys and values differ in length (torch's CPU kernel reads past
    the shorter one). At the dynamic path's new sizes a key length can move
    while a value's stays (seed 8787, graphs 3973 and 4876): eager's answer
    there is undefined, and kiln's refusal, naming the input, is right."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # (the public op is composite: the mode sees the kernel it picks)
        if "scaled_dot_product" in func.name() and len(args) > 2 and args[1].shape[-2] != args[2].shape[-2]:
            raise ValueError(f"attention with {args[1].shape[-2]} keys and {args[2].shape[-2]} values")
        return func(*args, **kwargs)


class RoundingNoise(TorchDispatchMode):
    """Every op that computes (not views, not in-place ops) sees its float64
    arguments, and gives its float64 results, scaled by 1 + u, u ~
    U[-EPS32, EPS32] per element: the float64 program rounded as if in
    float32, with reproducible noise. The arguments' noise is what makes the
    runs see an op's own conditioning: a backward-stable float32 kernel
    returns the exact result for arguments that much off (layer_norm of a
    row of equal values is all noise, its output's rounding alone is not).
    An op that adds up terms (a GEMM, a convolution, a sum) also rounds each
    partial sum, an error relative to the terms, not to the result: its
    results get an absolute error of size EPS32 * T, T the same op on the
    arguments' absolute values (sum |terms| per element), times a random
    sign and a factor in [0.5, 1]. Without it, a cancelled sum that a later
    op divides by carries only the relative noise of its rounded result,
    and a kernel whose partial sums round in another order than eager's
    (0.3 eps * T here: seed 1201 graph 30991) looks 7x off."""

    ACCUMULATING = {"mm", "addmm", "bmm", "baddbmm", "linear", "matmul", "convolution", "sum", "mean"}
    # Ops whose results are their arguments' elements (selections, sign
    # changes, copies) and exact comparisons: exact in any dtype, so no
    # noise at all. Noise on the eq(input, result) of amax's backward made
    # it find no maximum: NaN gradients in every noisy training run, so E
    # was eager's error alone (bf16 mode, seed 5 graph 4719).
    EXACT = {"amax", "amin", "max", "min", "maximum", "minimum", "clamp", "clamp_min", "clamp_max", "hardtanh",
             "relu", "abs", "neg", "where", "gather", "index_select", "index", "embedding", "cat", "clone", "flip",
             "repeat", "constant_pad_nd", "split", "split_with_sizes", "max_pool2d_with_indices", "_to_copy",
             "eq", "ne"}

    def __init__(self, seed, eps_out=EPS32, low_ops=None, low_calls=None):
        """eps_out: the results' relative noise: EPS32, or EPS_BF16 for a
        bf16 program, whose ops compute in fp32 (arguments' noise and
        partial sums at EPS32) and round each result to bf16. low_ops: the
        only ops (by name) whose results get eps_out, the others EPS32 (a
        program under autocast: AUTOCAST_LOW). low_calls: what
        LowPrecisionCalls recorded of the program's own run (op name ->
        whether each call's result was bf16), which decides before low_ops
        for the calls it has: under autocast, the ops a bf16 activation
        flows through compute in bf16 too."""
        super().__init__()
        self.rng = np.random.default_rng(seed)
        self.eps, self.eps_out, self.low_ops = EPS32, eps_out, low_ops
        self.low_calls = {k: list(v) for k, v in (low_calls or {}).items()}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view or func._schema.is_mutable or func.overloadpacket.__name__ in self.EXACT:
            return func(*args, **(kwargs or {}))
        args, kwargs = tree_map(self._noise, (args, kwargs or {}))
        calls = self.low_calls.get(func.overloadpacket.__name__)
        low = calls.pop(0) if calls else self.low_ops is None or func.overloadpacket.__name__ in self.low_ops
        out = tree_map(lambda t: self._noise(t, self.eps_out if low else EPS32), func(*args, **kwargs))
        if func.overloadpacket.__name__ in self.ACCUMULATING and isinstance(out, torch.Tensor):
            absolute = tree_map(lambda t: t.abs() if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                                (args, kwargs))
            out = out + self._spread(func(*absolute[0], **absolute[1]))
        elif func.overloadpacket.__name__ in self.ATTENTION:
            out = self._attention_spread(func, args, kwargs, out, self.eps_out if low else EPS32)
        return out

    # Attention's P.V is a weighted sum of v whose weights (positive) are
    # rounded, to bf16 in a bf16 program as torch's and kiln's kernels do:
    # an absolute error of eps * T with T the same attention of |v|. Its
    # result rounding alone missed it where the sum cancels (seed 20115
    # graph 2012: atan2 of an output 0.0106 with |v| ~ 1, kiln 2.1e-3 off
    # and eager 0.4e-3, both within their mean error, amplified 42x).
    ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu"}

    def _attention_spread(self, func, args, kwargs, out, eps):
        if not (isinstance(out, tuple) and len(args) >= 3 and isinstance(args[2], torch.Tensor)):
            return out
        terms = func(args[0], args[1], args[2].abs(), *args[3:], **kwargs)[0]
        return (out[0] + self._spread(terms, eps), *out[1:])

    def _noise(self, t, eps=None):
        eps = self.eps if eps is None else eps
        if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and t.numel():
            return t * torch.from_numpy(np.asarray(1.0 + self.rng.uniform(-eps, eps, size=tuple(t.shape))))
        return t

    def _spread(self, terms, eps=EPS32):
        if terms.dtype != torch.float64 or not terms.numel():
            return torch.zeros_like(terms)
        size = tuple(terms.shape)
        u = self.rng.uniform(0.5, 1.0, size=size) * self.rng.choice([-1.0, 1.0], size=size)
        # (an infinite term makes the result infinite or NaN already: no
        # partial sum of it to round; inf - inf would make a NaN of an inf)
        return torch.where(torch.isfinite(terms), eps * terms * torch.from_numpy(np.asarray(u)), 0.0)


class LowPrecisionCalls(TorchDispatchMode):
    """Records, per op name in call order, whether each call RoundingNoise
    would give noise (not a view, not in place, not EXACT) returned a bf16
    or float16 result. Under autocast the ops a bf16 activation flows
    through (an add, sigmoid's backward, the sum of a broadcast gradient)
    compute and round in bf16 as well, which the op names of AUTOCAST_LOW
    alone do not tell: the noisy float64 runs gave them float32-sized noise
    and the rule a tolerance below one bf16 step (seed 20116 graph 416).
    RoundingNoise(low_calls=calls) replays the record."""

    def __init__(self):
        super().__init__()
        self.calls = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if not (func.is_view or func._schema.is_mutable or name in RoundingNoise.EXACT):
            low = []
            tree_map(lambda t: low.append(isinstance(t, torch.Tensor) and t.dtype in (torch.bfloat16, torch.float16)),
                     out)
            self.calls.setdefault(name, []).append(any(low))
        return out


class ContiguousBatchNormGrad(TorchDispatchMode):
    """Gives native_batch_norm_backward a contiguous grad_out and input, for
    eager's training runs (the reference). torch 2.13's CPU kernel misreads
    a grad_out laid out channels-last when its input is NCHW (or the other
    way round) and a size-1 dim makes one pass as channels-last contiguous:
    the gradient of bn(x).permute(0, 3, 2, 1) at (1, 2, 1, 2) comes back
    transposed, in float32 and float64 alike (seed 20118 graphs 7451 and
    20533; the math, and the kernel on contiguous copies, agree with kiln)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.native_batch_norm_backward.default:
            args = (args[0].contiguous(), args[1].contiguous()) + tuple(args[2:])
        return func(*args, **(kwargs or {}))


# The ops CPU autocast runs in bf16 (its lower-precision list), as the
# dispatcher shows them (linear and matmul decomposed), and their backward.
AUTOCAST_LOW = frozenset({"mm", "bmm", "addmm", "baddbmm", "convolution", "_convolution", "convolution_backward",
                          "_scaled_dot_product_flash_attention_for_cpu",
                          "_scaled_dot_product_flash_attention_for_cpu_backward"})


def spread(e, r, noisy=()):
    """E of the rule: the largest distance from r of e and the noisy runs,
    each over the elements where it and r are finite (a noisy run can be
    NaN where e is not: seed 2 graph 33 of the bf16 mode, a convolution
    of infinities, whose noise was NaN everywhere; an intersection of the
    masks left E = 0)."""
    rd = r.double()
    big = 0.0
    for x in (e, *noisy):
        fin = torch.isfinite(x) & torch.isfinite(r)
        if fin.any():
            big = max(big, float((x.double()[fin] - rd[fin]).abs().max()))
    return big


def conditioning(e, r, noisy=(), ill_relative=ILL_RELATIVE):
    """Why (e, r) make a meaningless comparison, or None."""
    if not (isinstance(e, torch.Tensor) and e.is_floating_point()):
        return None
    ne, nr = ~torch.isfinite(e), ~torch.isfinite(r)
    if not torch.equal(ne, nr):
        return "eager is non-finite where float64 is not (overflow), or the reverse"
    fin = ~ne
    if fin.any():
        err = spread(e, r, noisy)
        scale = float(r[fin].abs().max())
        if err > ill_relative * max(scale, 1e-30):
            return f"eager is {err:.3g} off float64 at scale {scale:.3g}"
    return None


def compare(k, e, r, acc, what="output", noisy=(), mag=0.0, who="kiln", lowp=False, extra=None):
    """None if kiln's k (or who's) passes against (e, r) by the rule above,
    else why not. lowp: the bf16 mode's rule (e eager bf16). extra: a
    tolerance per element added to the rule's (r's shape; the quant mode's
    activation flips, quant.py)."""
    if not isinstance(k, torch.Tensor):
        return f"{what}: {who} returned {type(k).__name__}, not a tensor"
    if tuple(k.shape) != tuple(e.shape):
        return f"{what}: shape {tuple(k.shape)}, eager {tuple(e.shape)}"
    if k.dtype != e.dtype:
        return f"{what}: dtype {k.dtype}, eager {e.dtype}"
    if not e.is_floating_point():
        # Where float32 and float64 eager disagree (a comparison whose
        # operands are equal in exact arithmetic, float32's rounding making
        # them differ), either is right, as for NaN against infinity below
        # (seed 9090 graph 1137: x - mean(x) of a row of equal values is 0
        # in float64 and in kiln, a few ulps in float32 eager, then < 0).
        differ = k != e
        if isinstance(r, torch.Tensor) and r.shape == e.shape and r.dtype == e.dtype:
            differ &= k != r
        if bool(differ.any()):
            bad = int(differ.sum())
            return f"{what}: {bad} of {e.numel()} elements differ from eager (exact dtype {e.dtype})"
        return None
    kn, en, rn = torch.isnan(k), torch.isnan(e), torch.isnan(r)
    # Where eager's float32 and float64 kernels disagree between NaN and an
    # infinity (float32 gelu(inf) is NaN, float64 inf), either is right.
    amb = en != rn
    bad = (kn != en) & ~amb
    if bool(bad.any()):
        return f"{what}: NaN at {int((bad & kn).sum())} places eager is not, missing at {int((bad & en).sum())}"
    if bool((amb & ~(kn | (k.double() == r))).any()):
        return f"{what}: neither eager's float32 NaN nor its float64 value where the two disagree"
    ki, ei = torch.isinf(k) & ~amb, torch.isinf(e) & ~amb
    if not torch.equal(ki, ei) or not torch.equal(k[ki], e[ei]):
        return f"{what}: infinities differ from eager's ({int(ki.sum())} vs {int(ei.sum())})"
    fin = torch.isfinite(e)
    if not fin.any():
        return None
    kd, rd, ed = k.double()[fin], r.double()[fin], e.double()[fin]
    err = (kd - rd).abs()
    big_e = spread(e, r, noisy)
    scale = max(float(rd.abs().max()), mag * 2.0 ** -20)
    tol = FACTOR_E * big_e + FACTOR_L * EPS32 * max(acc, 1) * (rd.abs() + scale / 16)
    if lowp:
        tol = tol + EPS_BF16 * rd.abs()
    if extra is not None:
        tol = tol + extra.double()[fin]
    bad = err > tol
    if bool(bad.any()):
        i = int((err - tol).argmax())
        n = int(bad.sum())
        return (f"{what}: {n} of {int(fin.sum())} elements off; worst {who} {float(kd[i]):.7g} vs float64 "
                f"{float(rd[i]):.7g} (eager {str(e.dtype)[6:]} {float(ed[i]):.7g}), error {float(err[i]):.3g} > "
                f"tolerance {float(tol[i]):.3g} (E {big_e:.3g}, L {acc}, S {scale:.3g})")
    return None
