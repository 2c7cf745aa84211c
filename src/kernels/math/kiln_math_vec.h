/* Branch-free float math for kernels/math, in the style of
 * kernels/nn/kiln_nn_math.h (whose exp and log it builds on): every path is
 * computed and the answer picked with a select, so GCC vectorises a loop of
 * calls at the width of the ISA the including file is compiled for.
 *
 * Accuracy: within about 4 ulp of the correctly rounded result over the
 * whole float range (tests/c/test_math.c checks each against libm), with
 * IEEE answers at the edges (NaN propagates, the infinities and the poles
 * give what libm gives) and the sign of zero kept by the odd functions.
 * The inverse trig polynomials are Cephes' (S. Moshier) single-precision
 * ones; the rest are identities chosen so that nothing cancels:
 *   log1p(x) = log(u) * x / (u - 1), u = 1 + x   (Goldberg; exact u - 1)
 *   expm1(x) = 2^n (e^r - 1) + (2^n - 1), x = n ln2 + r
 *   sinh(a)  = (m + m / (m + 1)) / 2, m = expm1(a), and e^a / 2 for large a
 *   cosh(a)  = e^a / 2 + 1 / (4 (e^a / 2))
 *   asinh(a) = log1p(a + a^2 / (1 + sqrt(1 + a^2)))
 *   acosh(x) = log1p(t + sqrt(2t + t^2)), t = x - 1 (exact near 1)
 *   atanh(a) = log1p(2a / (1 - a)) / 2
 */
#ifndef KILN_MATH_VEC_H
#define KILN_MATH_VEC_H

#include "kernels/nn/kiln_nn_math.h"

#define KILN_MATH_FMA KILN_NN_FMA

static inline float kiln_math_log2f(float x) {
  float kf;
  float lm = kiln_nn_log_parts(x, &kf);
  /* log2(e) as hi + lo; kf + lm log2(e) with lm's part carried by an FMA. */
  float y = KILN_MATH_FMA(lm, 1.44269502163f, KILN_MATH_FMA(lm, 1.925963033e-08f, kf));
  return kiln_nn_log_edges(x, y);
}

static inline float kiln_math_log10f(float x) {
  float kf;
  float lm = kiln_nn_log_parts(x, &kf);
  /* log10(2) = 0.301025390625 (12 bits, so kf times it is exact) + lo. */
  float t = KILN_MATH_FMA(kf, 4.605038981e-06f, lm * 0.434294492f);
  float y = KILN_MATH_FMA(kf, 0.301025390625f, t);
  return kiln_nn_log_edges(x, y);
}

static inline float kiln_math_log1pf(float x) {
  float u = 1.0f + x;
  float d = u - 1.0f;
  /* x / d corrects for the rounding of 1 + x; d == 0 means u == 1, where
   * log1p(x) = x to float precision (this also keeps -0.0). */
  float y = kiln_nn_logf(u) * (x / (d == 0.0f ? 1.0f : d));
  y = d == 0.0f ? x : y;
  return x == INFINITY ? INFINITY : y;
}

/* e^x / 2, without overflow up to x = 89.4 (kiln_nn_expf's scheme with one
 * less in the exponent). */
static inline float kiln_math_exp_halff(float x) {
  x = x > 89.5f ? 89.5f : x;
  x = x < -104.0f ? -104.0f : x;
  float t;
  float p = kiln_nn_exp_poly(kiln_nn_exp_reduce(x, &t));
  return kiln_nn_exp_scale(p, (int32_t)(kiln_nn_bits(t) - 0x4B400000u) - 1);
}

/* expm1: x = n ln2 + r, |r| <= ln2/2 (kiln_nn_expf's reduction), and
 * e^x - 1 = 2^n (e^r - 1) + (2^n - 1), with e^r - 1 by its Taylor series to
 * degree 8 (the first term left out is below 2^-27 relative there). No
 * term cancels: for n >= 1 both are positive, for n <= -1 the second
 * dominates. Past x = 20 the 1 is below half an ulp and e^x is the answer. */
static inline float kiln_math_expm1f(float x) {
  float xc = x > 20.0f ? 20.0f : x; /* NaN fails both tests and stays NaN */
  xc = xc < -18.0f ? -18.0f : xc;
  float t;
  float r = kiln_nn_exp_reduce(xc, &t);
  float p = 2.48015873e-05f; /* 1/8! */
  p = KILN_MATH_FMA(p, r, 1.98412698e-04f);
  p = KILN_MATH_FMA(p, r, 1.38888889e-03f);
  p = KILN_MATH_FMA(p, r, 8.33333333e-03f);
  p = KILN_MATH_FMA(p, r, 4.16666667e-02f);
  p = KILN_MATH_FMA(p, r, 1.66666667e-01f);
  p = KILN_MATH_FMA(p, r, 0.5f);
  float em = KILN_MATH_FMA(p * r, r, r);
  /* 2^n for n in [-26, 29]; unsigned arithmetic, NaN gives garbage bits. */
  float s = kiln_nn_from_bits((kiln_nn_bits(t) - 0x4B400000u + 127u) << 23);
  float y = KILN_MATH_FMA(s, em, s - 1.0f);
  y = x > 20.0f ? kiln_nn_expf(x) : y;
  y = x < -18.0f ? -1.0f : y;  /* e^x below half an ulp of 1 */
  return x == 0.0f ? x : y;    /* keeps -0.0 */
}

static inline float kiln_math_sinhf(float x) {
  float a = fabsf(x);
  float m = kiln_math_expm1f(a);
  float small = 0.5f * (m + m / (m + 1.0f));
  float big = kiln_math_exp_halff(a); /* e^-a is below an ulp here */
  return copysignf(a < 9.0f ? small : big, x);
}

static inline float kiln_math_coshf(float x) {
  float h = kiln_math_exp_halff(fabsf(x));
  return h + 0.25f / h;
}

static inline float kiln_math_asinhf(float x) {
  float a = fabsf(x);
  float a2 = a * a;
  float mid = kiln_math_log1pf(a + a2 / (1.0f + sqrtf(1.0f + a2)));
  /* Beyond 2^28, asinh(a) = log(2a) to float precision (and a^2 would
   * overflow further on). */
  float big = kiln_nn_logf(a) + 0.693147182f;
  return copysignf(a > 268435456.0f ? big : mid, x);
}

static inline float kiln_math_acoshf(float x) {
  float t = x - 1.0f;
  float mid = kiln_math_log1pf(t + sqrtf(KILN_MATH_FMA(t, t, 2.0f * t)));
  float big = kiln_nn_logf(x) + 0.693147182f;
  float y = x > 268435456.0f ? big : mid;
  return x < 1.0f ? NAN : y; /* NaN stays NaN through mid */
}

static inline float kiln_math_atanhf(float x) {
  float a = fabsf(x);
  float y = 0.5f * kiln_math_log1pf(2.0f * a / (1.0f - a));
  return copysignf(y, x); /* a > 1 gives NaN through log1p of < -1 */
}

/* atan (Cephes atanf): reduce to |t| <= tan(pi/8) with atan(a) = pi/2 +
 * atan(-1/a) above tan(3pi/8) and pi/4 + atan((a-1)/(a+1)) above tan(pi/8). */
static inline float kiln_math_atanf(float x) {
  float a = fabsf(x);
  int hi = a > 2.414213562373095f;
  int mid = a > 0.4142135623730950f;
  float t = hi ? -1.0f / a : mid ? (a - 1.0f) / (a + 1.0f) : a;
  float base = hi ? 1.5707963267948966f : mid ? 0.7853981633974483f : 0.0f;
  float z = t * t;
  float p = 8.05374449538e-2f;
  p = KILN_MATH_FMA(p, z, -1.38776856032e-1f);
  p = KILN_MATH_FMA(p, z, 1.99777106478e-1f);
  p = KILN_MATH_FMA(p, z, -3.33329491539e-1f);
  float y = base + KILN_MATH_FMA(p * z, t, t);
  return copysignf(y, x); /* NaN: t is NaN, so is y */
}

/* asin (Cephes asinf): a polynomial below 1/2, and asin(a) = pi/2 -
 * 2 asin(sqrt((1 - a)/2)) above. */
static inline float kiln_math_asin_posf(float a) {
  int big = a > 0.5f;
  float z = big ? 0.5f * (1.0f - a) : a * a;
  float s = big ? sqrtf(z) : a;
  float p = 4.2163199048e-2f;
  p = KILN_MATH_FMA(p, z, 2.4181311049e-2f);
  p = KILN_MATH_FMA(p, z, 4.5470025998e-2f);
  p = KILN_MATH_FMA(p, z, 7.4953002686e-2f);
  p = KILN_MATH_FMA(p, z, 1.6666752422e-1f);
  float r = KILN_MATH_FMA(p * z, s, s);
  return big ? 1.5707963267948966f - 2.0f * r : r;
}

static inline float kiln_math_asinf(float x) {
  float a = fabsf(x);
  float y = kiln_math_asin_posf(a);
  return a > 1.0f ? NAN : copysignf(y, x);
}

/* acos: 2 asin(sqrt((1 - x)/2)) above 1/2, pi - that of -x below -1/2,
 * pi/2 - asin(x) between (Cephes acosf). */
static inline float kiln_math_acosf(float x) {
  float a = fabsf(x);
  float s = kiln_math_asin_posf(sqrtf(0.5f * (1.0f - a))); /* NaN past |x| > 1 */
  float mid = 1.5707963267948966f - copysignf(kiln_math_asin_posf(a), x);
  float pos = 2.0f * s;
  float neg = 3.14159265358979f - 2.0f * s;
  float y = x > 0.5f ? pos : x < -0.5f ? neg : mid;
  return a > 1.0f || x != x ? NAN : y;
}

/* As torch: (0 < x) - (x < 0), so sign(NaN) = 0 and sign(-0.0) = +0. */
static inline float kiln_math_signf(float x) {
  return (float)((0.0f < x) - (x < 0.0f));
}

/* tan for |x| < KILN_MATH_TAN_MAX (the caller sends larger arguments, inf
 * and NaN to libm), evaluated branch-free in double so GCC vectorises it
 * (four lanes of double per ymm). Cody-Waite reduction x = n pi/2 + r:
 * pi/2 is split as PIO2_HI (pi/2 rounded down to 25 significant bits, so
 * n * PIO2_HI is exact for n < 2^28) plus PIO2_LO = pi/2 - PIO2_HI. Then
 * tan(r) on |r| <= pi/4 as r + r^3 p(r^2), and -1/tan(r) for odd n. p has
 * 7 coefficients fitted by us for minimax relative error of tan (iteratively
 * reweighted least squares against 40-digit mpmath tan, 4000 Chebyshev
 * points): 2^-29.4, far below float's 2^-24, so the one rounding to float
 * dominates and results are within 1 ulp (tests/c/test_math.c checks every
 * 13th float). The sign of zero is kept: r = x - 0 for n = 0. */
#define KILN_MATH_TAN_MAX 268435456.0f /* 2^28 */

static inline float kiln_math_tan_mediumf(float x) {
  const double two_over_pi = 6.36619772367581382433e-01;
  const double pio2_hi = 1.57079631090164184570e+00; /* 0x1.921fb5p+0 */
  const double pio2_lo = 1.58932547735281960548e-08;
  /* Adding 1.5 * 2^52 rounds to the nearest integer and leaves it in the
   * low bits (|x| 2/pi < 2^28 here; larger lanes are replaced anyway). */
  const double shifter = 6755399441055744.0;
  double xd = x;
  double t = xd * two_over_pi + shifter;
  double fn = t - shifter;
  uint64_t tb;
  memcpy(&tb, &t, sizeof tb);
  double r = (xd - fn * pio2_hi) - fn * pio2_lo;
  double z = r * r, z2 = z * z;
  /* Estrin's scheme: three independent pairs, then combine (shorter
   * dependency chain than Horner). */
  double p01 = 3.33333509159640218e-01 + z * 1.33326226692570937e-01;
  double p23 = 5.40644442899790023e-02 + z * 2.12594624217419120e-02;
  double p45 = 1.08929169958072638e-02 + z * 1.93409935275497963e-05;
  double p6 = 4.40989362962833104e-03;
  double p = (p01 + z2 * p23) + (z2 * z2) * (p45 + z2 * p6);
  double tr = r + (z * r) * p;
  return (float)((tb & 1) ? -1.0 / tr : tr);
}

#endif /* KILN_MATH_VEC_H */
