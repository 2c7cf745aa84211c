"""Op-table entries for the rest of Core ATen's elementwise math: inverse trig
and hyperbolics, expm1/log1p/log2/log10, rounding, sign, the NaN/Inf
predicates, atan2, the bitwise ops, fmod/remainder, division with a rounding
mode, pow with a scalar base, logical_xor, clamps and the simple
activations, and fill.

Most map one-to-one onto kiln ops of kernels/math (ACOS..SIGN,
ATAN2..DIV_FLOOR); the rest are compositions of kiln ops that give eager's
exact answer (clamp = maximum then minimum, isnan = x != x, ...). As in
core.py, no numerics happen here: handlers only choose ops and params.
"""

import torch

from kiln.errors import Unsupported
from kiln.optable.core import _arg, _shape, _val, broadcast_to, cast, operand, reshape, strided_copy
from kiln.optable.registry import register

aten = torch.ops.aten

F32 = torch.float32
INTS = (torch.int64, torch.int32)



# ---- unary float math ---------------------------------------------------------------

_FLOAT_UNARY = {
    aten.acos.default: "acos", aten.acosh.default: "acosh", aten.asin.default: "asin",
    aten.asinh.default: "asinh", aten.atan.default: "atan", aten.atanh.default: "atanh",
    aten.cosh.default: "cosh", aten.sinh.default: "sinh", aten.tan.default: "tan",
    aten.expm1.default: "expm1", aten.log10.default: "log10", aten.log1p.default: "log1p",
    aten.log2.default: "log2",
}


@register(*_FLOAT_UNARY)
def _float_unary(ctx, n):
    dtype = _val(n).dtype  # integer and bool inputs promote to float, as eager
    if dtype != F32:
        raise Unsupported(f"{n.target} of {dtype}")
    return ctx.node(_FLOAT_UNARY[n.target], [cast(ctx, ctx.value(n.args[0]), dtype)], origin=ctx.origin(n))


# ---- rounding, sign and predicates --------------------------------------------------

_ROUNDING = {aten.ceil.default: "ceil", aten.floor.default: "floor", aten.round.default: "round",
             aten.trunc.default: "trunc"}


@register(*_ROUNDING)
def _rounding(ctx, n):
    x = ctx.value(n.args[0])
    if ctx.dtype(x) != F32:
        if ctx.dtype(x) in INTS or ctx.dtype(x) == torch.bool:
            return x  # an integer is already whole: eager returns a copy
        raise Unsupported(f"{n.target} of {ctx.dtype(x)}")
    return ctx.node(_ROUNDING[n.target], [x], origin=ctx.origin(n))


@register(aten.round.decimals)
def _round_decimals(ctx, n):
    # Eager's round_decimals kernel: nearbyint(x * 10^d) / 10^d, or for
    # d < 0, nearbyint(x / 10^-d) * 10^-d, with 10^|d| as a float.
    x = ctx.value(n.args[0])
    d = _arg(n, 1, "decimals", 0)
    if ctx.dtype(x) != F32:
        raise Unsupported(f"round(decimals=...) of {ctx.dtype(x)}")
    if d == 0:
        return ctx.node("round", [x], origin=ctx.origin(n))
    p = ctx.scalar(10.0 ** abs(d), F32)
    origin = ctx.origin(n)
    if d > 0:
        return ctx.node("div", [ctx.node("round", [ctx.node("mul", [x, p])]), p], origin=origin)
    return ctx.node("mul", [ctx.node("round", [ctx.node("div", [x, p])]), p], origin=origin)


@register(aten.sign.default)
def _sign(ctx, n):
    x = ctx.value(n.args[0])
    if ctx.dtype(x) == torch.bool:
        return x  # sign of a bool is itself
    if ctx.dtype(x) not in (F32,) + INTS:
        raise Unsupported(f"sign of {ctx.dtype(x)}")
    return ctx.node("sign", [x], origin=ctx.origin(n))


@register(aten.isnan.default)
def _isnan(ctx, n):
    x = ctx.value(n.args[0])
    return ctx.node("ne", [x, x], origin=ctx.origin(n))  # only NaN differs from itself


@register(aten.fmax.default, aten.fmin.default)
def _fmax(ctx, n):
    """fmax / fmin: maximum / minimum, except that a NaN operand yields the
    other one (NaN only when both are)."""
    dtype = _val(n).dtype
    a, b = operand(ctx, n.args[0], dtype), operand(ctx, n.args[1], dtype)
    op = "maximum" if n.target == aten.fmax.default else "minimum"
    o = ctx.origin(n)
    y = ctx.node(op, [a, b], origin=o)
    if not dtype.is_floating_point:  # no NaN to skip
        return y
    y = ctx.node("where", [ctx.node("ne", [a, a], origin=o), b, y], origin=o)
    return ctx.node("where", [ctx.node("ne", [b, b], origin=o), a, y], origin=o)


@register(aten.isinf.default)
def _isinf(ctx, n):
    x = ctx.value(n.args[0])
    if ctx.dtype(x) != F32:  # integers are never infinite: x != x is all false
        return ctx.node("ne", [x, x], origin=ctx.origin(n))
    a = ctx.node("abs", [x])
    return ctx.node("eq", [a, ctx.scalar(float("inf"), F32)], origin=ctx.origin(n))


# ---- binary ---------------------------------------------------------------------------

_BINARY_EXT = {
    aten.atan2.default: "atan2",
    aten.bitwise_and.Tensor: "bitwise_and", aten.bitwise_and.Scalar: "bitwise_and",
    aten.bitwise_or.Tensor: "bitwise_or", aten.bitwise_or.Scalar: "bitwise_or",
    aten.bitwise_xor.Tensor: "bitwise_xor", aten.bitwise_xor.Scalar: "bitwise_xor",
    aten.fmod.Tensor: "fmod", aten.fmod.Scalar: "fmod",
    aten.remainder.Tensor: "remainder", aten.remainder.Scalar: "remainder",
    aten.remainder.Scalar_Tensor: "remainder",
    aten.floor_divide.default: "div_floor",
}
# Which dtypes each kiln op takes (kiln_ops.h); others are unsupported here
# rather than a shape-inference error.
_TAKES = {
    "atan2": (F32,), "bitwise_and": INTS + (torch.bool,), "bitwise_or": INTS + (torch.bool,),
    "bitwise_xor": INTS + (torch.bool,), "fmod": (F32,) + INTS, "remainder": (F32,) + INTS,
    "div_trunc": (F32,) + INTS, "div_floor": (F32,) + INTS,
}


def _binary_ext_node(ctx, n, op, a, b):
    dtype = _val(n).dtype  # torch's type promotion of a and b
    if dtype not in _TAKES[op]:
        raise Unsupported(f"{n.target} of {dtype}")
    return ctx.node(op, [operand(ctx, a, dtype), operand(ctx, b, dtype)], origin=ctx.origin(n))


# bitwise_and/or.Tensor are these bitwise ops for bool too (the kernels take
# bool and the integer types alike), not logical_and/or.
@register(*_BINARY_EXT)
def _binary_ext(ctx, n):
    return _binary_ext_node(ctx, n, _BINARY_EXT[n.target], n.args[0], n.args[1])


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(ctx, n):
    mode = _arg(n, 2, "rounding_mode")
    a, b = n.args[0], n.args[1]
    if mode is None:  # true division
        dtype = _val(n).dtype
        if dtype != F32:
            raise Unsupported(f"division of {dtype}")
        return ctx.node("div", [operand(ctx, a, dtype), operand(ctx, b, dtype)], origin=ctx.origin(n))
    if mode not in ("trunc", "floor"):
        raise Unsupported(f"rounding_mode={mode!r}")
    return _binary_ext_node(ctx, n, "div_" + mode, a, b)


@register(aten.pow.Scalar)
def _pow_scalar(ctx, n):
    # A scalar base and a tensor exponent: kiln's pow with a 0-d base.
    dtype = _val(n).dtype
    if dtype != F32:
        raise Unsupported(f"pow of {dtype}")
    base, exponent = n.args[0], n.args[1]
    return ctx.node("pow", [ctx.scalar(base, dtype), operand(ctx, exponent, dtype)], origin=ctx.origin(n))


@register(aten.exp2.default)
def _exp2(ctx, n):
    # 2^x: kiln's pow with base 2 (torch's pow(2, x) is its exp2 too).
    dtype = _val(n).dtype
    if dtype != F32:
        raise Unsupported(f"exp2 of {dtype}")
    return ctx.node("pow", [ctx.scalar(2.0, dtype), operand(ctx, n.args[0], dtype)], origin=ctx.origin(n))


@register(aten.logical_xor.default)
def _logical_xor(ctx, n):
    # a xor b of their truth values: two bools differ.
    a, b = (operand(ctx, x, torch.bool) for x in n.args[:2])
    return ctx.node("ne", [a, b], origin=ctx.origin(n))


# ---- clamps and activations -------------------------------------------------------------


def _clamp(ctx, n, x, lo, hi):
    """x clamped to whichever bounds are given, as eager computes it.

    Scalar bounds (clamp.default, clamp_min/max, hardtanh): eager's kernel
    is max_ps(lo, x) then min_ps(hi, .), which keeps x when it compares
    equal to a bound (-0.0 stays -0.0 against a bound of 0) or is NaN, and
    ignores a NaN bound: that is x < lo ? lo : x, then y > hi ? hi : y.
    Tensor bounds (clamp.Tensor, clamp_min/max.Tensor): eager's kernel is
    torch.maximum then torch.minimum (NaN from either side propagates), which
    are kiln ops. lo > hi gives hi either way, as eager.
    """
    dtype = _val(n).dtype
    if dtype not in (F32,) + INTS:
        raise Unsupported(f"clamp of {dtype}")
    if lo is None and hi is None:
        raise Unsupported("clamp without bounds")
    y = operand(ctx, x, dtype)
    origin = ctx.origin(n)
    for bound, cmp, tensor_op in ((lo, "lt", "maximum"), (hi, "gt", "minimum")):
        if bound is None:
            continue
        b = operand(ctx, bound, dtype)
        if isinstance(bound, torch.fx.Node):
            y = ctx.node(tensor_op, [y, b], origin=origin)
        else:
            y = ctx.node("where", [ctx.node(cmp, [y, b]), b, y], origin=origin)
    return y


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp_op(ctx, n):
    return _clamp(ctx, n, n.args[0], _arg(n, 1, "min"), _arg(n, 2, "max"))


@register(aten.clamp_min.default, aten.clamp_min.Tensor)
def _clamp_min(ctx, n):
    return _clamp(ctx, n, n.args[0], n.args[1], None)


@register(aten.clamp_max.default, aten.clamp_max.Tensor)
def _clamp_max(ctx, n):
    return _clamp(ctx, n, n.args[0], None, n.args[1])


@register(aten.hardtanh.default)
def _hardtanh(ctx, n):
    return _clamp(ctx, n, n.args[0], _arg(n, 1, "min_val", -1.0), _arg(n, 2, "max_val", 1.0))


def _float_input(ctx, n):
    x = ctx.value(n.args[0])
    if ctx.dtype(x) != F32 or _val(n).dtype != F32:
        raise Unsupported(f"{n.target} of {ctx.dtype(x)}")
    return x


@register(aten.elu.default)
def _elu(ctx, n):
    # Eager: x > 0 ? x * scale : expm1(x * input_scale) * (alpha * scale),
    # the coefficient a float product. NaN fails x > 0 and stays NaN.
    x = _float_input(ctx, n)
    alpha = _arg(n, 1, "alpha", 1.0)
    scale = _arg(n, 2, "scale", 1.0)
    input_scale = _arg(n, 3, "input_scale", 1.0)
    xi = x if input_scale == 1 else ctx.node("mul", [x, ctx.scalar(float(input_scale), F32)])
    coef = ctx.scalar(float(alpha), F32)
    if scale != 1:
        coef = ctx.node("mul", [coef, ctx.scalar(float(scale), F32)])  # folded at compile time
    neg = ctx.node("mul", [ctx.node("expm1", [xi]), coef])
    pos = x if scale == 1 else ctx.node("mul", [x, ctx.scalar(float(scale), F32)])
    return ctx.node("where", [ctx.node("gt", [x, ctx.scalar(0.0, F32)]), pos, neg], origin=ctx.origin(n))


@register(aten.leaky_relu.default)
def _leaky_relu(ctx, n):
    # Eager: x > 0 ? x : x * negative_slope (NaN takes the second arm, stays NaN).
    x = _float_input(ctx, n)
    slope = _arg(n, 1, "negative_slope", 0.01)
    neg = ctx.node("mul", [x, ctx.scalar(float(slope), F32)])
    return ctx.node("where", [ctx.node("gt", [x, ctx.scalar(0.0, F32)]), x, neg], origin=ctx.origin(n))


# Giles' single-precision erfinv ("Approximating the erfinv function", GPU
# Computing Gems, 2011): x * p(w), w = -log((1 - x)(1 + x)), p a polynomial
# in w - 2.5 below w = 5 and in sqrt(w) - 3 above; relative error within
# 4e-7 (three float ulps) over (-1, 1). Highest degree first.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


@register(aten.erfinv.default)
def _erfinv(ctx, n):
    """erfinv(x) of float32 x as elementwise kiln ops (fused into one
    kernel; folded at compile time on a constant, as Gemma 3n's activation
    sparsity takes it): Giles' approximation above, +-inf at +-1 and NaN
    beyond, as eager."""
    x = _float_input(ctx, n)
    o = ctx.origin(n)

    def horner(coefs, t):
        p = ctx.scalar(coefs[0], F32)
        for c in coefs[1:]:
            p = ctx.node("add", [ctx.node("mul", [p, t]), ctx.scalar(c, F32)])
        return p

    one = ctx.scalar(1.0, F32)
    w = ctx.node("neg", [ctx.node("log", [ctx.node("mul", [ctx.node("sub", [one, x]), ctx.node("add", [one, x])])])])
    central = horner(_ERFINV_CENTRAL, ctx.node("sub", [w, ctx.scalar(2.5, F32)]))
    tail = horner(_ERFINV_TAIL, ctx.node("sub", [ctx.node("sqrt", [w]), ctx.scalar(3.0, F32)]))
    p = ctx.node("where", [ctx.node("lt", [w, ctx.scalar(5.0, F32)]), central, tail])
    y = ctx.node("mul", [p, x])
    edge = ctx.node("eq", [ctx.node("abs", [x]), one])  # w is inf there: x * inf, as eager
    return ctx.node("where", [edge, ctx.node("mul", [x, ctx.scalar(float("inf"), F32)]), y], origin=o)


# ---- fill -------------------------------------------------------------------------------


# torch.export's default decompositions turn fill.Scalar into full_like (a
# constant, core.py) and fill.Tensor into copy (movement.py); fill itself
# reaches the table from torch.compile graphs.
@register(aten.fill.Scalar, aten.fill.Tensor)
def _fill(ctx, n):
    # The value (a scalar, or a tensor broadcastable to the input, in the
    # input's dtype) over the input's shape: no constant of the full size.
    dtype = _val(n).dtype
    return broadcast_to(ctx, operand(ctx, n.args[1], dtype), _shape(n), ctx.origin(n))
