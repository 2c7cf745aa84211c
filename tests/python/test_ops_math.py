"""The elementwise math of python/kiln/optable/elementwise.py (kernels/math) against
eager PyTorch: inverse trig and hyperbolics, expm1/log1p/log2/log10,
rounding, sign, isnan/isinf, atan2, bitwise ops, fmod/remainder, division
with a rounding mode, pow with a scalar base, logical_xor, clamps,
hardtanh/elu/leaky_relu and fill. Every module is compiled with
kiln.trace(fallback=False), so each op must run natively.

Inputs include NaN, +-inf, -0.0, halves (rounding ties), integer edge values
and broadcasting. Related ops share one module to keep the file fast.

Tolerances, and why:
  EXACT  rounding, sign, predicates, integer ops, fmod/remainder/div_floor/
         div_trunc (exact in IEEE: fmod is exact and torch's div_floor is
         built on it), clamps: bit-for-bit.
  MATH   the vectorised transcendental functions (and pow, atan2, elu/selu/
         celu), judged against the op evaluated in float64 and rounded once
         to float32 (check_f64, conftest.assert_close_f64), not against eager
         float32, whose error depends on the CPU torch runs on (eager's
         vectorised cosh and sinh overflow below float32's limit, for one).
         kiln's are within 2.2 ulp of that on every ISA level (measured over
         2e4-3e4 inputs each: acosh 2.2, asinh 2.2, atanh/asin 1.9, log1p
         1.9, log10 1.6, celu 1.3, the rest ~1; elu's negative arm is
         alpha * expm1(x), one rounding more): 3 ulp relative, rtol
         3 * 2^-23; the absolute floor, the smallest normal float32, accepts
         only a subnormal result flushed to zero. The sign of a zero result
         is checked too.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import kiln
from conftest import Fn, assert_close_f64, ulps

EXACT = dict(rtol=0.0, atol=0.0)
MATH = ulps(3)  # against float64 (check_f64): see the docstring

NAN, INF = float("nan"), float("inf")
I64_MIN, I64_MAX = -(2 ** 63), 2 ** 63 - 1


def run(fn, *inputs):
    """kiln's and eager's outputs of fn(*inputs), kiln with no fallback."""
    compiled = kiln.trace(Fn(fn), tuple(inputs), fallback=False)
    got = compiled(*[x.clone() for x in inputs])
    want = fn(*[x.clone() for x in inputs])
    return got, want


def check(fn, *inputs, tol=EXACT):
    got, want = run(fn, *inputs)
    if isinstance(want, torch.Tensor):
        got, want = (got,), (want,)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, equal_nan=True, **tol, msg=lambda m: f"output {i}: {m}")
        if w.is_floating_point():  # assert_close does not see the sign of zero
            z = w == 0
            assert torch.equal(torch.signbit(g[z]), torch.signbit(w[z])), f"output {i}: sign of zero"


def check_f64(fn, *inputs, tol=MATH):
    """kiln's float32 outputs against fn in float64 (int/bool outputs against
    eager's, exactly), NaN matching NaN, with the sign of zeros."""
    compiled = kiln.trace(Fn(fn), tuple(inputs), fallback=False)
    got = compiled(*[x.clone() for x in inputs])
    assert_close_f64(got, fn, [x.clone() for x in inputs], tol, zero_sign=True)


SPECIALS = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-30, 1e-7, 3e-39, 88.5, 89.6,
            -100.0, 1e10, -1e10, 3e38]


def wide(n=4000):
    """Uniform values, log-uniform magnitudes from 2^-30 to 2^30, and the specials."""
    u = torch.empty(n // 2).uniform_(-12, 12)
    m = torch.exp2(torch.empty(n // 2).uniform_(-30, 30)) * torch.where(torch.rand(n // 2) < 0.5, -1.0, 1.0)
    return torch.cat([torch.tensor(SPECIALS), u, m])


def test_unary_float_math():
    x = wide(4200)
    unit = torch.cat([torch.tensor(SPECIALS), torch.empty(3000).uniform_(-1.05, 1.05),
                      torch.tensor([0.9999999, -0.9999999, 0.5000001])])
    big = torch.cat([torch.tensor(SPECIALS), 1.0 + torch.exp2(torch.empty(3000).uniform_(-24, 40))])
    check_f64(lambda x, u, b: (torch.asinh(x), torch.atan(x), torch.cosh(x), torch.sinh(x), torch.tan(x),
                               torch.expm1(x), torch.log10(x), torch.log1p(x), torch.log2(x),
                               torch.acos(u), torch.asin(u), torch.atanh(u), torch.acosh(b)),
              x, unit, big)


def test_cosh_sinh_near_overflow():
    # Between e^88.7 and FLT_MAX (|x| up to 89.41) cosh and sinh are finite.
    # Eager's vectorised cosh overflows there (cosh(89.2) is inf for tensors
    # of 8 or more elements, finite for a 0-d one), so kiln is held to
    # float64 eager instead, as every MATH check is.
    x = torch.tensor([88.8, 89.0, 89.2, 89.4, -89.4, 89.41, 89.42, 90.0] * 2)
    got = kiln.trace(Fn(lambda x: (torch.cosh(x), torch.sinh(x))), (x,), fallback=False)(x)
    assert_close_f64(got, lambda x: (torch.cosh(x), torch.sinh(x)), (x,), MATH)
    assert torch.isfinite(got[0][:6]).all() and torch.isinf(got[0][7])


def test_unary_float_math_promotes_integers_and_bools():
    i = torch.tensor([-3, -1, 0, 1, 2, 10])
    b = torch.tensor([True, False, True])
    check_f64(lambda i, b: (torch.atan(i), torch.log1p(i), torch.expm1(b), torch.cosh(b)), i, b)


def test_rounding_sign_and_predicates_float():
    ties = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 8388607.5, -8388607.5,
            8388608.0, 1e30, -1e-30, 2.0 ** -149]
    x = torch.cat([torch.tensor(SPECIALS + ties), torch.empty(1000).uniform_(-20, 20)])
    check(lambda x: (torch.ceil(x), torch.floor(x), torch.round(x), torch.trunc(x), torch.sign(x),
                     torch.isnan(x), torch.isinf(x)), x)


def test_round_decimals():
    x = torch.cat([torch.tensor([0.125, 0.135, -2.675, 1234.5, 1250.0, -1350.0, NAN, INF, -0.0]),
                   torch.empty(500).uniform_(-5000, 5000)])
    check(lambda x: (torch.round(x, decimals=2), torch.round(x, decimals=-2), torch.round(x, decimals=0)), x)


def test_rounding_sign_and_predicates_integer():
    i = torch.tensor([I64_MIN, I64_MIN + 1, -7, -1, 0, 1, 5, I64_MAX])
    b = torch.tensor([True, False])
    check(lambda i, b: (torch.ceil(i), torch.floor(i), torch.round(i), torch.trunc(i), torch.sign(i),
                        torch.isnan(i), torch.isinf(i), torch.sign(b), torch.isnan(b), torch.isinf(b)), i, b)


def _pairs():
    """Every pair of special floats, as (a, b)."""
    # No huge dividends: eager's vectorised fmod is a - trunc(a / b) * b,
    # which is NaN or inexact once a / b passes 2^24 (fmod(3e38, 0.3) is NaN
    # there, 0.1665 in its scalar path); kiln's is C's fmod, always exact.
    vals = [NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 0.3, -0.3, 1e-30, 1e5, 5.0]
    a = torch.tensor(vals).repeat_interleave(len(vals))
    b = torch.tensor(vals).repeat(len(vals))
    return a, b


def test_binary_float_specials():
    a, b = _pairs()
    check(lambda a, b: (torch.fmod(a, b), torch.remainder(a, b), torch.div(a, b, rounding_mode="trunc"),
                        torch.div(a, b, rounding_mode="floor"), torch.floor_divide(a, b)), a, b)
    check_f64(lambda a, b: torch.atan2(a, b), a, b)


def test_binary_float_broadcast_and_scalars():
    a = torch.randn(5, 1, 7) * 10
    b = torch.randn(3, 1) * 3
    check(lambda a, b: (torch.fmod(a, b), torch.remainder(a, b), torch.div(a, b, rounding_mode="trunc"),
                        torch.div(a, b, rounding_mode="floor"), torch.fmod(a, -1.5), torch.remainder(a, 2.25),
                        torch.div(a, 0.7, rounding_mode="floor"), torch.div(a, -3.0, rounding_mode="trunc"),
                        torch.remainder(4.5, b), torch.div(a, b, rounding_mode=None)), a, b)
    check_f64(lambda a, b: (torch.atan2(a, b), torch.atan2(b, a)), a, b)


def test_binary_integer():
    vals = [I64_MIN, I64_MIN + 1, -9, -3, -1, 1, 2, 3, 7, I64_MAX]
    a = torch.tensor(vals).repeat_interleave(len(vals))
    b = torch.tensor(vals).repeat(len(vals))
    check(lambda a, b: (torch.fmod(a, b), torch.remainder(a, b), torch.div(a, b, rounding_mode="floor"),
                        torch.floor_divide(a, b), torch.bitwise_and(a, b), torch.bitwise_or(a, b),
                        torch.bitwise_xor(a, b)), a, b)
    # Eager's div(rounding_mode="trunc") of INT64_MIN by -1 dies of SIGFPE
    # (an x86 idiv overflow), so that pair is left out of the comparison;
    # kiln wraps to INT64_MIN, as eager's floor division does.
    keep = ~((a == I64_MIN) & (b == -1))
    check(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a[keep], b[keep])
    a, b = torch.tensor([I64_MIN, I64_MIN]), torch.tensor([-1, 1])
    trunc = kiln.trace(Fn(lambda a, b: torch.div(a, b, rounding_mode="trunc")), (a, b), fallback=False)
    assert trunc(a, b).tolist() == [I64_MIN, I64_MIN]


def test_binary_integer_broadcast_and_scalars():
    a = torch.randint(-100, 100, (4, 1, 6))
    b = torch.randint(1, 9, (5, 1)) * torch.where(torch.rand(5, 1) < 0.5, -1, 1)
    check(lambda a, b: (torch.remainder(a, b), torch.fmod(a, b), torch.div(a, b, rounding_mode="floor"),
                        a & 12, a | -3, a ^ 0x55, torch.bitwise_xor(a, b), torch.remainder(a, -7),
                        torch.div(a, 4, rounding_mode="trunc"), torch.fmod(a, 3), torch.remainder(17, b)), a, b)


def test_bitwise_bool_and_logical_xor():
    p = torch.tensor([True, True, False, False])
    q = torch.tensor([True, False, True, False])
    f = torch.tensor([0.0, NAN, -0.0, 2.0])
    i = torch.tensor([0, 3, 0, -1])
    check(lambda p, q, f, i: (p & q, p | q, p ^ q, torch.bitwise_and(p, True), torch.bitwise_xor(p, True),
                              torch.logical_xor(p, q), torch.logical_xor(f, i), torch.logical_xor(i, p)),
          p, q, f, i)


def test_integer_division_by_zero_raises():
    a = torch.tensor([5, -5, 7])
    b = torch.tensor([2, 0, 3])
    for fn in (torch.remainder, torch.fmod, lambda a, b: torch.div(a, b, rounding_mode="floor"),
               lambda a, b: torch.div(a, b, rounding_mode="trunc")):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(a, b)  # eager
        compiled = kiln.trace(Fn(fn), (a, b), fallback=False)
        with pytest.raises(ValueError, match="ZeroDivisionError"):  # kiln's data errors
            compiled(a, b)
        ok = torch.tensor([2, -3, 3])  # the same compiled model runs on good divisors
        assert_close(compiled(a, ok), fn(a, ok), **EXACT)


def test_float_division_by_zero_is_ieee():
    a = torch.tensor([1.0, -1.0, 0.0, NAN, 5.5])
    b = torch.zeros(5)
    check(lambda a, b: (torch.remainder(a, b), torch.fmod(a, b), torch.div(a, b, rounding_mode="floor"),
                        torch.div(a, b, rounding_mode="trunc"), torch.div(a, -b, rounding_mode="floor")), a, b)


def test_pow_scalar_base():
    x = torch.cat([torch.tensor([NAN, INF, -INF, 0.0, -0.0, 1.0, -1.0, 0.5, 3.0]), torch.empty(500).uniform_(-20, 20)])
    i = torch.arange(-4, 5)
    check_f64(lambda x, i: (2.0 ** x, 0.5 ** x, torch.pow(3, x), 1.0 ** x, 2.0 ** i), x, i)


def test_clamp_and_hardtanh():
    x = torch.cat([torch.tensor([NAN, INF, -INF, -0.0, 0.0, 1.0, -1.0]), torch.randn(200) * 3])
    lo = torch.randn(1) - 1
    hi = torch.randn(207) + 1
    check(lambda x, lo, hi: (torch.clamp(x, -0.5, 0.75), torch.clamp(x, min=0.1), torch.clamp(x, max=-0.2),
                             torch.clamp(x, 2.0, -2.0), torch.clamp(x, lo, hi), torch.clamp(x, min=lo),
                             torch.clamp(x, max=hi), x.clamp_min(0.3), x.clamp_max(0.3),
                             F.hardtanh(x), F.hardtanh(x, -2.0, 0.5), F.relu6(x)), x, lo, hi)


def test_clamp_integer():
    i = torch.tensor([I64_MIN, -100, -3, 0, 4, 100, I64_MAX])
    lo = torch.tensor([-5])
    check(lambda i, lo: (torch.clamp(i, -10, 10), torch.clamp(i, min=lo), torch.clamp(i, max=0),
                         torch.clamp(i, lo, lo + 9), i.clamp_min(lo), torch.clamp(i, min=2.5)), i, lo)


def test_elu_and_leaky_relu():
    x = torch.cat([torch.tensor([NAN, INF, -INF, -0.0, 0.0, -1e-30, -1e-6, 1e-6]), torch.randn(300) * 4])
    check_f64(lambda x: (F.elu(x), F.elu(x, alpha=0.5), F.selu(x), F.celu(x, alpha=1.5),
                         torch.ops.aten.elu(x, 1.2, 0.8, 2.0)), x)
    check(lambda x: (F.leaky_relu(x), F.leaky_relu(x, 0.2), F.leaky_relu(x, -1.5)), x)


def test_fill():
    x = torch.randn(3, 4)
    i = torch.tensor([[1, 2], [3, 4]])
    b = torch.tensor([True, False, True])
    s = torch.tensor(2.5)
    v = torch.tensor(-7.25)
    fill = torch.ops.aten.fill
    check(lambda x, i, b, s, v: (fill(x, 3.5), fill(i, -9), fill(b, False), fill(s, NAN), fill(x, v),
                                 fill(i, 2.9), fill(b, 2), fill(i, v)), x, i, b, s, v)
    row = torch.tensor([1.0, 2.0, 3.0, 4.0])
    check(lambda x, row, i: (x.clone().copy_(row), i.clone().copy_(torch.tensor(5)), x.clone().copy_(x * 2)),
          x, row, i)


def test_ops_are_native():
    # The targets these handlers cover are in the table (no fallback needed).
    from kiln.optable import TABLE

    aten = torch.ops.aten
    for op in (aten.acos.default, aten.log1p.default, aten.round.decimals, aten.sign.default,
               aten.atan2.default, aten.bitwise_xor.Tensor, aten.bitwise_and.Scalar, aten.fmod.Scalar,
               aten.remainder.Tensor, aten.div.Tensor_mode, aten.div.Scalar_mode, aten.pow.Scalar,
               aten.logical_xor.default, aten.clamp.default, aten.clamp.Tensor, aten.hardtanh.default,
               aten.elu.default, aten.leaky_relu.default, aten.fill.Scalar, aten.isnan.default,
               aten.isinf.default):
        assert op in TABLE, op


def test_erfinv_against_float64():
    """erfinv as elementwise kiln ops (Giles' single-precision
    approximation, optable/elementwise.py): within 4 ulp of float64 over
    (-1, 1) (measured: 2.2 ulp at most, eager's own 0.5), tails near +-1
    included; +-inf at +-1, NaN beyond and for NaN, zeros with their sign."""
    torch.manual_seed(0)
    x = torch.cat([torch.tensor([0.0, -0.0, 1.0, -1.0, 1.5, -2.0, NAN, INF, -INF, 1 - 2 ** -24, -1 + 2 ** -24,
                                 1e-30, -1e-30, 1e-8, 0.95]),
                   torch.empty(6000).uniform_(-1, 1),
                   1 - torch.exp2(torch.empty(1000).uniform_(-24, -1)),
                   -1 + torch.exp2(torch.empty(1000).uniform_(-24, -1))])
    check_f64(torch.erfinv, x, tol=ulps(4))


def test_gemma3n_activation_sparsity_runs_in_kiln():
    """Gemma 3n's MLP keeps the top 5% of its gate by a cutoff at
    erfinv(2 * 0.95 - 1) standard deviations (torch.distributions' Normal
    icdf): one kiln graph, no eager op, eager's values."""
    import transformers as T
    from transformers.models.gemma3n.modeling_gemma3n import Gemma3nTextMLP

    cfg = T.Gemma3nTextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                              activation_sparsity_pattern=[0.95])
    torch.manual_seed(0)
    mlp = Gemma3nTextMLP(cfg, layer_idx=0).eval()
    x = torch.randn(2, 5, 64)
    traced = kiln.trace(mlp, (x,), fallback=False)
    with torch.no_grad():
        assert_close(traced(x), mlp(x), rtol=1e-5, atol=1e-5)
