"""The quant mode: kiln.trace(model, xs, weights_dtype=MODE) against eager
with the same quantization done in torch (--quant-every K).

kiln's contract (kiln.trace's docstring, kiln_gemm.h): every linear layer
(a LINEAR node: aten.linear, mm, addmm or matmul whose weight is a 2-d
constant and whose input is not, and a bmm or matmul by a (1, .., 1, K, N)
constant: linear_weight) has its weight quantized by a fixed rule,
and every embedding lookup (embedding, index_select along 0, index with one
index tensor along 0: a gather of rows of a 2-d constant table at run-time
indices) its table; everything else is fp32. Products of two constants are
folded at compile time, in fp32, unquantized; a constant on the left of a
matmul (W @ x) is not a linear layer's weight. The weight-only modes
compute the layer in fp32 on the dequantized weight; the ":a8" modes also
quantize the linear's input per row (int8:a8: scale max|x| / 127 over the
row; int4:a8: per row and weight group of G along K) with round half to
even, and the result is eager's linear on q * s.

The reference (QuantEager) replays the program with those rules at those
calls, from tests/python/quant_reference.py (the tests' statement of the
weight rules, independent of kiln): each such constant operand, computed in
float32 as kiln folds it (its float32 counterpart is kept beside every
constant value), is replaced by its dequantized value; with a8, the input
is replaced by q * s. r is that program in float64 (weights dequantized in
float32, exactly as kiln's packer does: bit for bit), e in float32, and the
noisy runs float64 with rounding noise (check.RoundingNoise), with the
activations' rounding decisions of r replayed in e and the noisy runs: E
then measures the continuous float32 error only.

Tolerance, weight-only: check.py's float32 rule unchanged. kiln's
quantized GEMM dequantizes in registers and sums in fp32, in its own order
(and int4 asym may apply the zero point once per group through the group
sums of A): the products are eager's on the same dequantized weight, and
only the order of the K-long fp32 sum differs, which the rule's L term
(L = K for the linear: 8 eps K (|r| + S / 16)) and 4 E cover as for any
fp32 GEMM. A wrong weight (one quantization step of one element, s =
max|w| / 127 or a group's d) is ~1e-3 of an output, 10^2 to 10^4 times that.

Tolerance, a8: kiln rounds x / s from its own fp32 x, which is off
float64's by about eager's error, so an element of x within that of a
rounding tie (x / s at n + 1/2) may round the other way: a one-step flip
of one activation, moving the linear's output by s |w_k| in row j, then
along the program to the outputs. Such elements ("undecided": |x / s - n -
1/2| <= 4 E_x / s + 2^-12, E_x = max |x32 - x64| over the input, the same 4
as the rule's; 2^-12 of a step is ~16 ulps of the row's max, kiln's own
few-ulp differences where eager's error is nil) are found at every a8
linear. The undecided elements of one row of one linear's input are
flipped together in every combination (kiln's decisions are one of them),
the float64 program run again for each (the later linears rounding their
inputs afresh: a flip moves them by steps of their own), and the output's
tolerance gets, per row, the largest |r_flips - r| over its combinations
added, summed over the rows (as if all happened). Exact within a row,
whatever the program does after the linear: two flips of one row can
together move the next linear's input across a tie that neither moves
alone (seed 20081 graph 175: two exact ties in one row of an int4 table's
lookup, the next a8 linear off by 0.0039 against singles' 0.0012). Flips
of different rows are bounded by the sum of their effects to first order,
and beside it by two runs of many rows' flips at once (every undecided
activation flipped; those float32's own rounding flips), which a later op
mixing the rows before another a8 linear makes act together (_joint_flips).
Elsewhere kiln's sum of integer products
is exact and its scaling one fp32 rounding: the float32 rule again. Where
that sum is 0, kiln's product is +0, as exact arithmetic's, where eager's
float32 sum of the dequantized products is a few roundings off 0 of
either sign: the reference makes it +0 (_exact_zeros), and an op whose
result the sign of that zero decides is ill-conditioned (check.py). A draw
with more than MAX_UNDECIDED undecided elements, or more than MAX_ROW_UNDECIDED
in one row, is ill-conditioned (redrawn); a rounding of the wrong direction everywhere (truncation) or a
wrong scale changes most elements and fails by far.
"""

import contextlib
import os
import sys

import torch
from torch.utils._python_dispatch import _disable_current_modes

from kilnfuzz.check import (FACTOR_E, Audit, ComparedNaNs, RoundingNoise, conditioning, nan_at_comparison)
from kilnfuzz.program import Eager, _map_dtype, interpret

_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
from quant_reference import dequantized, quantize_activations  # noqa: E402

aten = torch.ops.aten

# The modes, in the order the quant graphs take them (graph i's by its turn
# i // quant_every); torch.int8 is "int8" spelled as a dtype.
MODES = (torch.int8, "int8:a8", "int4", "int4:g128", "int4:asym", "int4:g128:asym", "int4:a8", "int4:g128:a8",
         "int4:asym:a8")
PREFIX = "quant:"
MAX_UNDECIDED = 12
MAX_ROW_UNDECIDED = 4  # 15 combinations
TIE_MARGIN = 2.0 ** -12  # of a step


def mode_name(mode):
    return "int8" if mode is torch.int8 else mode


def path_of(mode):
    return PREFIX + mode_name(mode)


def mode_of(path):
    """The weights_dtype a quant path passes (torch.int8 for quant:int8)."""
    name = path[len(PREFIX):]
    return torch.int8 if name == "int8" else name


def is_quant(path):
    return path.startswith(PREFIX)


def parse(name):
    """(weight kind for quant_reference.dequantized, a8, activation group or
    None for one per row)."""
    parts = name.split(":")
    a8 = "a8" in parts
    base = ":".join(p for p in parts if p != "a8")
    group = next((int(p[1:]) for p in parts[1:] if p.startswith("g")), 32)
    return base, a8, (group if parts[0] == "int4" else None) if a8 else None


# Which operand of each call is a linear layer's weight (its layout: "nk"
# an (N, K) weight, as nn.Linear's; "kn" a (K, N) one), and which is its input.
_LINEAR = {aten.linear.default: (1, 0, "nk"), aten.mm.default: (1, 0, "kn"), aten.addmm.default: (2, 1, "kn"),
           aten.matmul.default: (1, 0, "kn"), aten.bmm.default: (1, 0, "kn")}


def linear_weight(w, x, layout):
    """True when w, a constant, is a linear layer's weight for input x: 2-d,
    or (1, .., 1, K, N) with x of at least its rank (a bmm or matmul by a
    batch-1 constant: torch's matmul of a 3-d x it cannot fold to 2-d, by a
    (K, N) weight, is an expand and a bmm). A 2-d one over K = 1 is not:
    kiln computes that product (eager's mm) as a multiply, each element one
    product as in eager (optable/core.py, _product); a bmm's stays a GEMM."""
    if w.dim() == 2:
        return w.shape[-1 if layout == "nk" else -2] != 1
    return w.dim() >= 3 and x.dim() >= w.dim() and all(d == 1 for d in w.shape[:-2])
# The ops by which torch's matmul of a 3-d x by a (K, N) weight W reaches a
# bmm: expand(W, (B, K, N)) and value-keeping views. kiln reads W itself at
# such a bmm (optable/core.py, _expanded_matrix): a linear layer's weight.
_SAME_VALUES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default)


def broadcast_origin(op, src_shape, src_dtype, out_shape, src, src_origin):
    """For a constant op's result: the (1, .., 1, K, N) constant it
    broadcasts (src itself after an expand, src's origin through a view
    that keeps the last two dims), else None. kiln's _expanded_matrix
    follows the same chain back from a bmm's operand (float32 only; the
    reference's float64 run stands for the float32 program)."""
    src_shape, out_shape = tuple(src_shape), tuple(out_shape)
    if op is aten.expand.default:
        if (src_dtype in (torch.float32, torch.float64) and len(src_shape) >= 2 and src_shape[-2:] == out_shape[-2:]
                and all(d == 1 for d in src_shape[:-2])):
            return src
        return None
    if op in _SAME_VALUES and src_origin is not None and src_shape[-2:] == out_shape[-2:]:
        return src_origin
    return None


# Embedding lookups: the table's operand, the indices'; (N, D) tables, rows as output channels.
_TABLE = {aten.embedding.default: (0, 1), aten.index_select.default: (0, 2), aten.index.Tensor: (0, 1)}


def table_lookup(op, args):
    """For a lookup op of _TABLE: (table index, the index argument) when it
    reads rows along dim 0 (as kiln quantizes a table: an embedding's
    rows), else None. Shared by the evaluator and the reproducer writer."""
    ti, ii = _TABLE[op]
    along0 = (op is not aten.index_select.default or args[1] in (0, -2)) and (
        op is not aten.index.Tensor or (len(args[1]) == 1 and args[1][0] is not None))
    if not along0:
        return None
    return ti, args[ii][0] if op is aten.index.Tensor else args[ii]


def runs_a_layer(op_name):
    """True when kiln's fallback warning's op name (aten.linear.default, ...)
    is one QuantEager may quantize."""
    return any(f"aten.{name}." in op_name for name in ("linear", "mm", "addmm", "matmul", "bmm", "embedding",
                                                       "index_select", "index"))


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for a in x for t in _tensors(a)]
    if isinstance(x, dict):
        return [t for a in x.values() for t in _tensors(a)]
    return []


class QuantEager(Eager):
    """Eager with kiln's quantization rules at its linear layers and lookups.

    consts: the leaf handles that are constants (parameters). A value is
    constant when every tensor it is computed from is; its float32
    counterpart (as kiln folds it) is kept. decisions: the a8 rounding
    decisions (q per a8 linear, in call order) to replay, or None to make
    them; flips: (call, flat element, +-1) each, to move some of them a step.
    Records, per a8 linear: its input x, scale s and decisions q."""

    def __init__(self, float_dtype, mode, consts, audit=None, decisions=None, flips=()):
        super().__init__(float_dtype, audit, at_plan_sizes=True)
        self.kind, self.a8, self.group = parse(mode_name(mode))
        self.c32 = {}  # id(constant handle) -> (handle, its float32 value)
        self.origin = {}  # id(constant handle) -> (handle, the constant it broadcasts: broadcast_origin)
        for t in consts:
            self.c32[id(t)] = (t, t.float() if t.is_floating_point() else t)
        self.decisions, self.flips = decisions, flips
        self.xs, self.ss, self.qs = [], [], []
        self.quantized = 0  # weights and tables quantized (the reference's own count)

    def _const(self, t):
        e = self.c32.get(id(t))
        return e is not None and e[0] is t

    def _origin(self, t):
        e = self.origin.get(id(t))
        return e[1] if e is not None and e[0] is t else None

    def _f32(self, t):
        return self.c32[id(t)][1]

    def _weight(self, t, layout):
        """The constant weight's dequantized value, from its float32 one."""
        w = self._f32(t)
        w = w.reshape(w.shape[-2:])
        if layout == "kn":
            w = w.t()
        with _disable_current_modes():
            d = dequantized(w.contiguous(), self.kind)
        self.quantized += 1
        d = d.t() if layout == "kn" else d
        return d.reshape(t.shape).to(t.dtype)

    def _activations(self, x):
        with _disable_current_modes():
            k = len(self.qs)
            q, s = quantize_activations(x, self.group)
            q = q.contiguous()  # (x may be strided: flips index q's elements in order)
            if self.decisions is not None:
                q = self.decisions[k].to(x.dtype, copy=True)
            for c, j, d in self.flips:
                if c == k:
                    q.view(-1)[j] += d
            self.xs.append(x.detach().clone())
            self.ss.append(s)
            self.qs.append(q)
            return _dequant_activations(q, s, x.shape[-1], self.group)

    def call(self, op, *args, **kwargs):
        ins = _tensors((args, kwargs))
        # A call of constants is one; so is one of none (scalar_tensor(-inf):
        # kiln folds it, and what it feeds; seed 20084 graph 8005 quantized a
        # linear of a constant chain through an attention mask's -inf).
        if all(self._const(t) for t in ins):
            out = super().call(op, *args, **kwargs)
            with _disable_current_modes():
                a32 = _map_dtype(_swap(args, self._f32), torch.float32)
                k32 = _map_dtype(_swap(kwargs, self._f32), torch.float32)
                o32 = op(*a32, **k32)
            outs = out if isinstance(out, tuple) else (out,)
            o32s = tuple(o32) if isinstance(o32, (list, tuple)) else (o32,)
            for o, o3 in zip(outs, o32s):
                if isinstance(o, torch.Tensor):
                    self.c32[id(o)] = (o, o3)
            src = args[0] if args else None
            if isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor):
                o = broadcast_origin(op, src.shape, src.dtype, out.shape, src, self._origin(src))
                if o is not None:
                    self.origin[id(out)] = (out, o)
            return out
        args = list(args)
        exact_zeros = False
        if op in _LINEAR:
            wi, xi, layout = _LINEAR[op]
            w, x = args[wi], args[xi]
            if (isinstance(w, torch.Tensor) and self._const(w) and w.is_floating_point()
                    and isinstance(x, torch.Tensor) and not self._const(x) and x.is_floating_point()):
                src = self._origin(w) if op is aten.bmm.default else None
                if linear_weight(w, x, layout):
                    args[wi] = self._weight(w, layout)
                elif src is not None:  # a bmm by an expanded (K, N) weight
                    # (src may have more leading 1s than w has dims: seed 20072 graph 7077)
                    args[wi] = self._weight(src, layout).reshape(src.shape[-2:]).expand(w.shape)
                if self.a8 and (linear_weight(w, x, layout) or src is not None):
                    args[xi] = self._activations(x)
                    exact_zeros = True
        elif op in _TABLE and (found := table_lookup(op, args)) is not None:
            ti, idx = found
            t = args[ti]
            if (isinstance(t, torch.Tensor) and self._const(t) and t.dim() == 2
                    and t.is_floating_point() and t.numel() and isinstance(idx, torch.Tensor)
                    and not self._const(idx)):
                args[ti] = self._weight(t, "nk")
        out = super().call(op, *args, **kwargs)
        return _exact_zeros(op, args, kwargs, out) if exact_zeros else out


# A product of an a8 linear is an exact zero where it is below this share of
# the sum of its terms' magnitudes in float64 (see _exact_zeros).
EXACT_ZERO = 1e-12


def _exact_zeros(op, args, kwargs, out):
    """An a8 linear's output with +0 (plus its bias) where the product is
    zero in exact arithmetic. kiln sums each group's integer products
    exactly, so a row and column whose sums are all 0 give +0, as exact
    arithmetic does; eager's sum of the dequantized products in float32
    (and float64's, finer) is a few of its roundings off 0, of either
    sign, and a later division by it makes an infinity of one sign or the
    other (seed 20095 graph 1345: kiln +inf, eager and float64 -1e8 and
    -1e17, which a maximum then dropped). A nonzero exact sum is at least
    one lattice step (the two scales' product), above 1 / (127 * 15 * K)
    of the terms' magnitudes; float64 leaves of an exact zero under 1e-15
    of them: EXACT_ZERO between the two tells them apart, from the
    operands without the noise of the noisy runs."""
    wi, xi, _ = _LINEAR[op]
    with _disable_current_modes():
        x, w = args[xi].double(), args[wi].double()
        mm = aten.linear.default if op is aten.linear.default else aten.matmul.default
        product, terms = mm(x, w), mm(x.abs(), w.abs())
        zero = product.abs() <= EXACT_ZERO * terms
        if not bool(zero.any()):
            return out
        bias = 0.0
        if op is aten.linear.default and len(args) > 2 and args[2] is not None:
            bias = args[2]
        elif op is aten.addmm.default:
            bias = args[0] * kwargs.get("beta", 1)
        fixed = torch.where(zero, (torch.zeros_like(out) + bias).to(out.dtype) + 0.0, out)
    return fixed


def _swap(x, f):
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_swap(a, f) for a in x)
    if isinstance(x, dict):
        return {k: _swap(v, f) for k, v in x.items()}
    return x


def _dequant_activations(q, s, k, group):
    """q * s for activations quantized per row (group None: s (..., 1)) or
    per row and group (q (..., groups, G), s (..., groups, 1)), as x's shape."""
    if group is None:
        return q * s
    return (q * s).reshape(*q.shape[:-2], -1)[..., :k]


def _undecided(x64, s64, x32, group):
    """(flat index into q, direction) of each activation kiln's fp32 x could
    round the other way (see the module's docstring)."""
    xg = _grouped(x64, group)
    t = xg / s64
    frac = t - torch.floor(t)
    err = (x32.double() - x64).abs()
    err = err[torch.isfinite(err)]
    e = float(err.max()) if err.numel() else 0.0
    margin = FACTOR_E * e / s64 + TIE_MARGIN
    near = ((frac - 0.5).abs() <= margin) & torch.isfinite(t) & (t.abs() < 127)
    flat = near.reshape(-1).nonzero().flatten().tolist()
    q = torch.round(t).reshape(-1)
    tf = t.reshape(-1)
    return [(j, 1 if float(tf[j]) > float(q[j]) else -1) for j in flat]


def _rows_of(flips, qs, group):
    """flips ((call, flat element of q, direction)) gathered by the row of
    the linear's input each belongs to, in order."""
    rows = {}
    for c, j, d in flips:
        q = qs[c]
        per_row = q.shape[-1] * (q.shape[-2] if group is not None and q.dim() >= 2 else 1)
        rows.setdefault((c, j // per_row), []).append((c, j, d))
    return list(rows.values())


def _grouped(x, group):
    """x as quantize_activations groups it: (..., K) per row (group None), or
    zero-padded to (..., groups, group)."""
    if group is None:
        return x
    k = x.shape[-1]
    n = -(-k // group)
    xp = torch.zeros(*x.shape[:-1], n * group, dtype=x.dtype)
    xp[..., :k] = x
    return xp.view(*x.shape[:-1], n, group)


def reference_quant(res, path):
    """paths.Reference for a quant path, with per-output extra tolerance
    (the a8 flips); ill as the float32 rule says, or too many undecided
    activations."""
    from kilnfuzz.paths import NOISY_RUNS, Reference, leaf_as

    mode = mode_of(path)
    leaves64 = [leaf_as(leaf, torch.float64) for leaf in res.leaves]
    params64 = [t for leaf, t in zip(res.leaves, leaves64) if leaf.role == "param"]
    audit = Audit()
    q64 = QuantEager(torch.float64, mode, params64, audit)
    with torch.no_grad():
        r64 = interpret(res, q64, leaves64)
        leaves32 = [leaf.tensor for leaf in res.leaves]
        params32 = [t for leaf, t in zip(res.leaves, leaves32) if leaf.role == "param"]
        run32 = ComparedNaNs()
        q32 = QuantEager(torch.float32, mode, params32, run32, decisions=q64.qs)
        e32 = interpret(res, q32, leaves32)
        runs = []
        for k in range(NOISY_RUNS):
            with RoundingNoise([res.program.salt, 11, k]):
                runs.append(interpret(res, QuantEager(torch.float64, mode, params64, decisions=q64.qs), leaves64))
        noisy = [[run[j] for run in runs] for j in range(len(e32))]
        ill = audit.reason
        if not ill and audit.compared.seen:
            ill = nan_at_comparison(run32, audit.compared)
        for e, r, p in zip(e32, r64, noisy):
            ill = ill or conditioning(e, r, p)
        extra = [torch.zeros(r.shape, dtype=torch.float64) if r.is_floating_point() else None for r in r64]
        flips = []
        for c, (x64, s64, x32) in enumerate(zip(q64.xs, q64.ss, q32.xs)):
            flips += [(c, j, d) for j, d in _undecided(x64, s64, x32, q64.group)]
        rows = _rows_of(flips, q64.qs, q64.group)
        if not ill and len(flips) > MAX_UNDECIDED:
            ill = f"{len(flips)} activations within kiln's rounding error of a tie (a8)"
        if not ill and max(map(len, rows), default=0) > MAX_ROW_UNDECIDED:
            ill = f"{max(map(len, rows))} activations of one row within kiln's rounding error of a tie (a8)"
        if not ill:
            for row in rows:
                worst = [torch.zeros_like(e) if e is not None else None for e in extra]
                for n in range(1, 2 ** len(row)):
                    # r's own decisions up to the flipped ones (the same values
                    # make them), fresh ones after: a flip moves the next
                    # linear's input by a step of s |w|, often several of its
                    # own steps, and kiln rounds what it gets (seed 20020
                    # graph 7878: three int4:a8 linears, an exact tie at the
                    # second's input; with the third's decisions replayed the
                    # flip's effect was 0.0008, kiln's 0.0014)
                    chosen = [f for b, f in enumerate(row) if n >> b & 1]
                    out = interpret(res, QuantEager(torch.float64, mode, params64, flips=chosen), leaves64)
                    for j, (o, r) in enumerate(zip(out, r64)):
                        if worst[j] is not None:
                            d = (o - r).abs()
                            worst[j] = torch.maximum(worst[j], torch.where(torch.isfinite(d), d, torch.zeros_like(d)))
                extra = [e + w if e is not None else None for e, w in zip(extra, worst)]
            extra = _joint_flips(res, mode, params64, leaves64, r64, q64, flips, extra, params32, leaves32)
    ref = Reference(list(e32), r64, noisy, ill)
    ref.extra = extra
    ref.quantized = q64.quantized
    ref.flips = len(flips)
    return ref


def _joint_flips(res, mode, params64, leaves64, r64, q64, flips, extra, params32, leaves32):
    """extra, raised to cover two outcomes of many rows' flips at once,
    which the sum of each row's worst does not bound where a later op mixes
    the rows and a later linear requantizes what it gets (a new scale, new
    decisions): every undecided activation flipped, and those float32's
    own rounding flips (what eager float32 and kiln, from the same float32
    values, do: seed 20096 graph 960, an int4 table's rows each with an
    exact tie at 63.5, which float32 rounds from 63.49999 down in every
    row, a softmax across the rows, then a second a8 linear: 0.00077 off
    float64's decisions, each row's own flips 3e-5). Each is a float64
    run with those flips, later linears rounding afresh; the tolerance
    per element is the larger of the rows' sum and each joint run's."""
    if len(flips) < 2:
        return extra
    own = QuantEager(torch.float32, mode, params32)
    interpret(res, own, leaves32)
    mine = [f for f in flips if _own_flip(own.qs, q64.qs, f)]
    for chosen in {tuple(flips), tuple(mine)}:
        if len(chosen) < 2:
            continue
        out = interpret(res, QuantEager(torch.float64, mode, params64, flips=list(chosen)), leaves64)
        for j, (o, r) in enumerate(zip(out, r64)):
            if extra[j] is not None:
                d = (o - r).abs()
                extra[j] = torch.maximum(extra[j], torch.where(torch.isfinite(d), d, torch.zeros_like(d)))
    return extra


def _own_flip(qs32, qs64, flip):
    """Whether float32's own decision at a flip's element is not float64's."""
    c, j, _ = flip
    if c >= len(qs32) or qs32[c].numel() != qs64[c].numel():
        return False
    return float(qs32[c].reshape(-1)[j]) != float(qs64[c].reshape(-1)[j])


def run_quant(res, path):
    """kiln.trace(ProgramModule, inputs, weights_dtype=the path's mode): its outputs."""
    import kiln

    from kilnfuzz.paths import NotApplicable, ProgramModule, _torch_can

    model = ProgramModule(res).eval()
    xs = tuple(leaf.tensor for leaf in res.inputs)
    try:
        compiled = kiln.trace(model, xs, weights_dtype=mode_of(path))
    except Exception:
        _torch_can(lambda: torch.export.export(model, xs), "torch.export")
        raise
    if not xs:
        raise NotApplicable("no inputs: kiln folds the whole program, unquantized")
    with torch.no_grad():
        return list(compiled(*xs))


def has_quantized_op(res):
    """True when the program has a linear layer or a lookup kiln quantizes
    (by QuantEager's rule, on a float32 replay)."""
    consts = [leaf.tensor for leaf in res.leaves if leaf.role == "param"]
    q = QuantEager(torch.float32, "int8", consts)
    with torch.no_grad(), contextlib.suppress(Exception):
        interpret(res, q, [leaf.tensor for leaf in res.leaves])
    return q.quantized > 0


def program_for_quant(seed, index):
    """Graph `index` of run `seed` in the quant mode: drawn from
    ops.QUANT_KINDS until a program has a layer kiln quantizes (the same
    on every machine)."""
    import random

    from kilnfuzz.generate import generate
    from kilnfuzz.ops import KINDS, QUANT_KINDS
    from kilnfuzz.program import Invalid, resolve

    rng = random.Random(f"kiln-fuzz-quant:{seed}:{index}")
    for _ in range(200):
        p = generate(rng, QUANT_KINDS)
        if p is None:
            continue
        try:
            res = resolve(p, KINDS)
        except Invalid:
            continue
        if has_quantized_op(res):
            return p
    raise RuntimeError(f"no quant program for seed {seed} index {index}")


# ---- reproducer scripts (repro.py, how "quant") -------------------------------


class QuantSource:
    """Mixin for repro's SourceBuilder: at each call QuantEager would
    quantize, a line passing the weight (or table) through qw(...) and, with
    a8, the input through qx(...), which are identities unless the module
    was made with a quantization (the reference's Repro(QUANT))."""

    def setup_quant(self, const_names):
        self.consts = set(const_names)
        self.origin = {}  # constant name -> the constant it broadcasts (broadcast_origin)

    def _is_const(self, a):
        return isinstance(a, str) and a in self.consts

    def _bind_line(self, text, val):
        name = f"q{len(self.lines)}"
        self.lines.append(f"{name} = {text}")
        return self.bind(name, val)

    def call(self, op, *args, **kwargs):
        from kilnfuzz.program import Name

        def names(x):
            if isinstance(x, Name):
                return [x]
            if isinstance(x, (list, tuple)):
                return [n for a in x for n in names(a)]
            return []

        ins = [n for n in names((list(args), list(kwargs.values()))) if isinstance(self.vals.get(n), torch.Tensor)]
        if all(self._is_const(n) for n in ins):
            out = super().call(op, *args, **kwargs)
            for n in (out if isinstance(out, tuple) else (out,)):
                self.consts.add(n)
            src = args[0] if args else None
            if isinstance(out, str) and isinstance(src, str) and isinstance(self.vals.get(src), torch.Tensor):
                o = broadcast_origin(op, self.vals[src].shape, self.vals[src].dtype, self.vals[out].shape, src,
                                     self.origin.get(src))
                if o is not None:
                    self.origin[out] = o
            return out
        args = list(args)
        if op in _LINEAR:
            wi, xi, layout = _LINEAR[op]
            w, x = args[wi], args[xi]
            if (self._is_const(w) and self.vals[w].is_floating_point() and isinstance(x, str)
                    and not self._is_const(x) and self.vals[x].is_floating_point()):
                src = self.origin.get(w) if op is aten.bmm.default else None
                if linear_weight(self.vals[w], self.vals[x], layout):
                    args[wi] = self._bind_line(f"qw({w}, {layout!r}, self.quant)", self.vals[w])
                elif src is not None:  # a bmm by an expanded (K, N) weight
                    shape = tuple(self.vals[w].shape)
                    args[wi] = self._bind_line(f"qw({src}, {layout!r}, self.quant).expand({shape})",
                                               self.vals[w])
                if linear_weight(self.vals[w], self.vals[x], layout) or src is not None:
                    args[xi] = self._bind_line(f"qx({x}, self.quant)", self.vals[x])
        elif op in _TABLE and (found := table_lookup(op, args)) is not None:
            ti, idx = found
            t = args[ti]
            if (self._is_const(t) and self.vals[t].dim() == 2 and self.vals[t].is_floating_point()
                    and isinstance(idx, str) and not self._is_const(idx)):
                args[ti] = self._bind_line(f"qw({t}, 'nk', self.quant)", self.vals[t])
        return super().call(op, *args, **kwargs)


def qw(w, layout, quant):
    """The reproducer's weight rule: w's dequantized value (from its float32
    value), or w itself when quant is None."""
    if quant is None:
        return w
    w32 = w.float().reshape(w.shape[-2:])
    w32 = w32.t() if layout == "kn" else w32
    d = dequantized(w32.contiguous(), quant[0])
    return (d.t() if layout == "kn" else d).reshape(w.shape).to(w.dtype)


def qx(x, quant):
    """The reproducer's activation rule: q * s with a8, else x."""
    if quant is None or not quant[1]:
        return x
    q, s = quantize_activations(x, quant[2])
    return q * s if quant[2] is None else (q * s).reshape(*q.shape[:-2], -1)[..., :x.shape[-1]]


MAIN_QUANT = '''\
def main():
    """The quant mode (tests/fuzz/kilnfuzz/quant.py): kiln.trace with
    weights_dtype=MODE against the module whose linear weights (and, with
    a8, inputs) go through kiln's quantization rules (qw, qx: Repro(QUANT)).
    Not here: the fuzzer's allowance for an activation within rounding of a
    tie (a8), a8's exact zeros (_exact_zeros), and the float32 folding of a
    computed weight; the fuzzer's --only run of the graph is the judge."""
    model = Repro().eval()
    xs = inputs()
    with torch.no_grad():
        eager = Repro(QUANT)(*xs)
        model64, xs64 = Repro(QUANT).double(), inputs(torch.float64)
        ref = model64(*xs64)
        noisy = []
        for k in range(2):  # float64 with float32-sized rounding noise: the rule's E
            with RoundingNoise([SALT, 11, k]):
                noisy.append(model64(*xs64))
        got = kiln.trace(model, xs, weights_dtype=MODE)(*xs)
    bad = [why for j, (k, e, r) in enumerate(zip(got, eager, ref))
           if (why := compare(k, e, r, ACC[j], f"output {j}", [n[j] for n in noisy], MAG[j]))]
    print("\\n".join(bad) or "kiln agrees with eager")
    return 1 if bad else 0
'''
