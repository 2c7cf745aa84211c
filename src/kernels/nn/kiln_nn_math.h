/* Branch-free scalar float math that GCC vectorises when it is called in a
 * loop over an array (every path is computed and the answer picked with a
 * select, there are no table look-ups and no float-to-int conversions).
 *
 * Each function is within about 2-3 ulp of the correctly rounded result on
 * the whole float range, propagates NaN, and gets the IEEE answer at the
 * edges: exp overflows to +inf and underflows through the denormals to 0,
 * tanh and sigmoid saturate, log(0) = -inf, log(x < 0) = NaN. The polynomial
 * coefficients were fitted for this file (relative least squares on
 * Chebyshev nodes against mpmath, then rounded to float).
 *
 * The project builds in ISO C mode, where GCC does not contract a*b+c into
 * an FMA, so KILN_NN_FMA asks for one explicitly when the ISA has it and
 * falls back to a multiply-add otherwise (fmaf without hardware FMA is a
 * slow libm call).
 */
#ifndef KILN_NN_MATH_H
#define KILN_NN_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* x86: the AVX2 builds (-mfma). aarch64: the NEON build (meson's
 * isa_neon_args define KILN_ISA_NEON_VARIANT; FMA is baseline there, and
 * GCC inlines and vectorises fmaf as FMLA); the generic builds multiply and
 * add on every architecture. */
#if defined(__FMA__) || (defined(KILN_ISA_NEON_VARIANT) && defined(__ARM_FEATURE_FMA))
#define KILN_NN_HAVE_FMA 1
#endif

#if defined(KILN_NN_HAVE_FMA)
#define KILN_NN_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define KILN_NN_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline uint32_t kiln_nn_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

static inline float kiln_nn_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* hi + lo = a * b exactly (lo is the rounding error of the product). */
static inline float kiln_nn_two_prod(float a, float b, float* lo) {
  float hi = a * b;
#if defined(KILN_NN_HAVE_FMA)
  *lo = fmaf(a, b, -hi);
#else
  /* Veltkamp split: each half has at most 12 significant bits, so the
   * partial products are exact. */
  float ca = 4097.0f * a, cb = 4097.0f * b;
  float ah = ca - (ca - a), al = a - ah;
  float bh = cb - (cb - b), bl = b - bh;
  *lo = ((ah * bh - hi) + ah * bl + al * bh) + al * bl;
#endif
  return hi;
}

/* The exponential's range reduction, shared by every e^x variant here and
 * in kernels/math/kiln_math_vec.h: x = n ln2 + r with |r| <= ln2/2
 * (Cody-Waite split of ln2 so r is exact). Adding 1.5 * 2^23 rounds x log2 e
 * to the integer n and leaves it in the low bits of *t, from which the
 * callers build 2^n. */
static inline float kiln_nn_exp_reduce(float x, float* t) {
  const float shifter = 12582912.0f;
  *t = KILN_NN_FMA(x, 1.44269504089f, shifter);
  float n = *t - shifter;
  float r = KILN_NN_FMA(n, -0.693359375f, x);
  return KILN_NN_FMA(n, 2.12194440e-4f, r);
}

/* e^r for |r| <= ln2/2: the degree-7 polynomial of expf. */
static inline float kiln_nn_exp_poly(float r) {
  float p = 1.984951959e-04f;
  p = KILN_NN_FMA(p, r, 1.393358805e-03f);
  p = KILN_NN_FMA(p, r, 8.333372883e-03f);
  p = KILN_NN_FMA(p, r, 4.166646674e-02f);
  p = KILN_NN_FMA(p, r, 1.666666716e-01f);
  p = KILN_NN_FMA(p, r, 0.5f);
  return KILN_NN_FMA(p * r, r, r) + 1.0f;
}

/* p 2^ni, with 2^ni applied as two factors so that results in the denormal
 * range are rounded once and correctly. Any split with both halves in
 * [-126, 127] does: n1 = floor(ni / 2) by an arithmetic shift (ni in
 * [-150, 128]) is two instructions fewer than C's truncating ni / 2. */
static inline float kiln_nn_exp_scale(float p, int32_t ni) {
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float s1 = kiln_nn_from_bits((uint32_t)(n1 + 127) << 23);
  float s2 = kiln_nn_from_bits((uint32_t)(n2 + 127) << 23);
  return p * s1 * s2;
}

/* e^x: kiln_nn_exp_reduce, e^r by kiln_nn_exp_poly, then kiln_nn_exp_scale. */
static inline float kiln_nn_expf(float x) {
  x = x > 88.8f ? 88.8f : x; /* NaN fails both tests and stays NaN */
  x = x < -104.0f ? -104.0f : x;
  float t;
  float p = kiln_nn_exp_poly(kiln_nn_exp_reduce(x, &t));
  /* Unsigned arithmetic: NaN inputs give garbage bits here but no overflow. */
  return kiln_nn_exp_scale(p, (int32_t)(kiln_nn_bits(t) - 0x4B400000u));
}

/* e^x for x <= 0 as the online softmax of attention needs it (arguments
 * are score - running max): a shorter polynomial (relative error 1.4e-7
 * before rounding) and results below e^-87 flushed to 0, which is exact
 * enough for weights that are summed against a largest weight of 1, and
 * keeps e^-inf = 0 for masked keys. NaN propagates. */
static inline float kiln_nn_exp_negf(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  float t;
  float r = kiln_nn_exp_reduce(xc, &t);
  float p = 1.389383222e-03f;
  p = KILN_NN_FMA(p, r, 8.363130502e-03f);
  p = KILN_NN_FMA(p, r, 4.166694358e-02f);
  p = KILN_NN_FMA(p, r, 1.666657776e-01f);
  p = KILN_NN_FMA(p, r, 0.5f);
  p = KILN_NN_FMA(p * r, r, r) + 1.0f;
  float s = kiln_nn_from_bits((kiln_nn_bits(t) - 0x4B400000u + 127u) << 23);
  return x < -87.0f ? 0.0f : p * s;
}

/* log x = kf ln2 + (returned) log m: x = 2^k m with m in [sqrt(1/2),
 * sqrt 2), log m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172.
 * Denormals are scaled up first. The two parts are kept apart for
 * kernels/math's log2 and log10, which weight them differently. Valid for
 * finite x > 0; kiln_nn_log_edges patches the rest. */
static inline float kiln_nn_log_parts(float x, float* kf) {
  int sub = x < 1.17549435e-38f;
  float xs = sub ? x * 8388608.0f : x;
  uint32_t u = kiln_nn_bits(xs);
  int32_t k = (int32_t)(u - 0x3F3504F3u) >> 23;
  float m = kiln_nn_from_bits(u - ((uint32_t)k << 23));
  *kf = (float)k - (sub ? 23.0f : 0.0f);
  float f = m - 1.0f;
  float s = f / (m + 1.0f);
  float s2 = s * s;
  float p = 2.329804599e-01f;
  p = KILN_NN_FMA(p, s2, 2.855239511e-01f);
  p = KILN_NN_FMA(p, s2, 4.000010192e-01f);
  p = KILN_NN_FMA(p, s2, 6.666666865e-01f);
  return KILN_NN_FMA(p * s2, s, 2.0f * s);
}

/* A logarithm's answers at the edges, over y computed for the finite
 * positive case: log(inf) = inf, log(0) = -inf, log(x < 0) = NaN. */
static inline float kiln_nn_log_edges(float x, float y) {
  y = x == INFINITY ? INFINITY : y;
  y = x == 0.0f ? -INFINITY : y;
  y = x < 0.0f ? NAN : y;
  return x != x ? x : y;
}

static inline float kiln_nn_logf(float x) {
  float kf;
  float lm = kiln_nn_log_parts(x, &kf);
  float y = KILN_NN_FMA(kf, 0.693359375f, KILN_NN_FMA(kf, -2.12194440e-4f, lm));
  return kiln_nn_log_edges(x, y);
}

/* tanh: odd polynomial below 0.625 (where 1 - 2/(e^2x + 1) cancels),
 * the exp form above; exp saturates to inf so large |x| gives exactly 1. */
static inline float kiln_nn_tanhf(float x) {
  float a = fabsf(x);
  float x2 = x * x;
  float p = 2.308035968e-03f;
  p = KILN_NN_FMA(p, x2, -8.359977044e-03f);
  p = KILN_NN_FMA(p, x2, 2.177495882e-02f);
  p = KILN_NN_FMA(p, x2, -5.396023393e-02f);
  p = KILN_NN_FMA(p, x2, 1.333331019e-01f);
  p = KILN_NN_FMA(p, x2, -3.333333433e-01f);
  /* x's sign on both forms: x + x^3 p rounds -0 + +0 to +0, and tanh(-0)
   * is -0 (atan2 or 1/x downstream tell them apart). */
  float small = copysignf(KILN_NN_FMA(p * x2, x, x), x);
  float e = kiln_nn_expf(2.0f * a);
  float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
  return a < 0.625f ? small : big;
}

/* sigmoid: 1/(1 + e^-x) for x >= 0 and e^x/(1 + e^x) below, so the left
 * tail keeps full relative precision down to the denormals. */
static inline float kiln_nn_sigmoidf(float x) {
  float e = kiln_nn_expf(-fabsf(x));
  float s = 1.0f / (1.0f + e);
  return x >= 0.0f ? s : e * s;
}

/* erfc(t) e^(t^2) for t >= 0: (1 + 2t)^-1 P((t - 2)/(t + 2)), where P was
 * fitted to (1 + 2t) e^(t^2) erfc(t) over t in [0, 10.1]. */
static inline float kiln_nn_erfc_scaledf(float th) {
  float u = (th - 2.0f) / (th + 2.0f);
  float p = 8.064725262e-05f;
  p = KILN_NN_FMA(p, u, 1.718902204e-04f);
  p = KILN_NN_FMA(p, u, -4.007925163e-04f);
  p = KILN_NN_FMA(p, u, -1.423520036e-03f);
  p = KILN_NN_FMA(p, u, 1.251808484e-03f);
  p = KILN_NN_FMA(p, u, 8.710130118e-03f);
  p = KILN_NN_FMA(p, u, -8.030437864e-03f);
  p = KILN_NN_FMA(p, u, -5.421798676e-02f);
  p = KILN_NN_FMA(p, u, 1.640509814e-01f);
  p = KILN_NN_FMA(p, u, -1.660305113e-01f);
  p = KILN_NN_FMA(p, u, -9.276381880e-02f);
  p = KILN_NN_FMA(p, u, 1.276978374e+00f);
  return p / KILN_NN_FMA(2.0f, th, 1.0f);
}

/* erfc(t) for t >= 0, t given as th + tl (tl refines th; erfc's relative
 * condition number is 2t^2, so gelu passes x/sqrt(2) in two parts):
 * e^(-t^2) times kiln_nn_erfc_scaledf, with e^(-t^2) evaluated as
 * e^(-hi) (1 - lo) where t^2 = hi + lo exact to float-float precision. */
static inline float kiln_nn_erfcf_pos(float th, float tl) {
  float q = kiln_nn_erfc_scaledf(th);
  float lo;
  float hi = kiln_nn_two_prod(th, th, &lo);
  lo = KILN_NN_FMA(2.0f * th, tl, lo);
  float y = kiln_nn_expf(-hi) * q;
  y = KILN_NN_FMA(-y, lo, y);
  return th > 10.5f ? 0.0f : y; /* beyond 10.06 erfc is below the denormals */
}

/* erf(x) / x for |x| < 0.875, as a polynomial in x^2. */
static inline float kiln_nn_erf_smallf(float x) {
  float x2 = x * x;
  float p = 8.714052092e-05f;
  p = KILN_NN_FMA(p, x2, -8.220516029e-04f);
  p = KILN_NN_FMA(p, x2, 5.207621492e-03f);
  p = KILN_NN_FMA(p, x2, -2.686196938e-02f);
  p = KILN_NN_FMA(p, x2, 1.128374115e-01f);
  p = KILN_NN_FMA(p, x2, -3.761263788e-01f);
  return KILN_NN_FMA(p, x2, 1.128379226e+00f);
}

/* erf: x P(x^2) below 0.875, 1 - erfc(|x|) (with x's sign) above. */
static inline float kiln_nn_erff(float x) {
  float a = fabsf(x);
  float small = kiln_nn_erf_smallf(x) * x;
  float big = copysignf(1.0f - kiln_nn_erfcf_pos(a, 0.0f), x);
  return a < 0.875f ? small : big;
}

/* e^(-x^2/2) for the gelu pair below, and erfc(|x|/sqrt2) from it: x^2/2
 * is carried exactly as hi + lo (x times the exact x/2 by kiln_nn_two_prod),
 * so e^-hi (1 - lo) keeps the relative accuracy erfc's tail needs (its
 * relative condition number is x^2); the rational factor
 * kiln_nn_erfc_scaledf is well conditioned and takes |x|/sqrt2 rounded.
 * Beyond |x|/sqrt2 = 10.5 erfc is below the denormals: 0. */
static inline float kiln_nn_gelu_parts(float x, float* erfc) {
  float a = fabsf(x), ha = 0.5f * a;
  float lo;
  float hi = kiln_nn_two_prod(a, ha, &lo);
  float e = kiln_nn_expf(-hi);
  e = KILN_NN_FMA(-e, lo, e);
  e = hi > 104.0f ? 0.0f : e; /* below the denormals; x = inf still gives inf * 0 = NaN */
  float th = a * 0.707106769f;
  *erfc = th > 10.5f ? 0.0f : e * kiln_nn_erfc_scaledf(th);
  return e;
}

/* gelu (exact) = x Phi(x), Phi(x) = erfc(-x/sqrt2)/2: for x < 0 x/2
 * erfc(|x|/sqrt2), which keeps its relative accuracy down the left tail;
 * for x >= 0 x - x/2 erfc(x/sqrt2), one rounding of a difference that does
 * not cancel (erfc <= 1 there). gelu(inf) = inf, gelu(-inf) = NaN, as
 * torch. */
static inline float kiln_nn_geluf(float x) {
  float erfc;
  (void)kiln_nn_gelu_parts(x, &erfc);
  float hx = 0.5f * x;
  float pos = erfc == 0.0f ? x : KILN_NN_FMA(-hx, erfc, x);
  return x > 0.0f ? pos : hx * erfc; /* -0 takes x/2 erfc: -0, as x Phi(x) */
}

/* d gelu(x)/dx = Phi(x) + x phi(x), phi(x) = e^(-x^2/2)/sqrt(2 pi): one
 * e^(-x^2/2) (kiln_nn_gelu_parts) serves both. At +-inf the result is NaN,
 * as torch's (inf * 0); huge finite x gives 1 or 0. */
static inline float kiln_nn_gelu_gradf(float x) {
  float erfc;
  float e = kiln_nn_gelu_parts(x, &erfc);
  float cdf = x >= 0.0f ? KILN_NN_FMA(-0.5f, erfc, 1.0f) : 0.5f * erfc;
  return KILN_NN_FMA(x, e * 0.398942280f, cdf);
}

/* d gelu_tanh(x)/dx, in the order of torch's formula: with
 * u = sqrt(2/pi) (x + 0.044715 x^3) and T = tanh(u),
 * (1 + T)/2 + x/2 (1 - T^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2). */
static inline float kiln_nn_gelu_tanh_gradf(float x) {
  const float beta = 0.797884561f, kappa = 0.044715f;
  float x2 = x * x;
  float t = kiln_nn_tanhf(beta * (x + kappa * x2 * x));
  float d = 1.0f - t * t;
  /* Once tanh has saturated the term is 0, also where x^2 overflows
   * (torch's float formula gives 0 * inf = NaN there); x = inf stays NaN. */
  float right = d == 0.0f ? 0.0f * x : 0.5f * x * d * beta * (1.0f + 3.0f * kappa * x2);
  return 0.5f * (1.0f + t) + right;
}

/* sigmoid(wh + wl), where wl refines wh: e^-|w| = e^-|wh| (1 -+ wl). Used
 * where w is the result of arithmetic whose rounding the sigmoid's tail
 * would amplify (relative condition number |w|). */
static inline float kiln_nn_sigmoid2f(float wh, float wl) {
  float e = kiln_nn_expf(-fabsf(wh));
  float c = wh >= 0.0f ? wl : -wl;
  c = fabsf(wh) < 256.0f ? c : 0.0f; /* e is 0 there; avoids 0 * inf */
  e = KILN_NN_FMA(-e, c, e);
  float s = 1.0f / (1.0f + e);
  return wh >= 0.0f ? s : e * s;
}

/* gelu, tanh approximation: x/2 (1 + tanh(z)) = x sigmoid(2z) with
 * z = sqrt(2/pi) (x + 0.044715 x^3); the sigmoid form does not cancel, and
 * 2z is formed in double and passed on as float-float so that the left
 * tail keeps its relative accuracy. gelu_tanh(-inf) = NaN, as torch. */
static inline float kiln_nn_gelu_tanhf(float x) {
  double xd = x;
  double wd = xd * (1.5957691216057308 + 0.07135481627159294 * (xd * xd));
  float wh = (float)wd;
  float wl = (float)(wd - (double)wh);
  return x * kiln_nn_sigmoid2f(wh, wl);
}

static inline float kiln_nn_siluf(float x) { return x * kiln_nn_sigmoidf(x); }

/* The loop that applies one of these functions over an array, shared by
 * kernels/nn/kiln_unary.c and kernels/math/kiln_math_unary.c: y[i] =
 * EXPR(v) with v = x[i] for i < n, inside a switch case (it ends with
 * `break`). x and y are the same array (in-place activations) or disjoint,
 * and each has its own loop: in place the vectoriser sees one pointer;
 * apart, GCC's run-time overlap check passes and the vector loop runs
 * (it fails when x == y, and GCC then ran the scalar loop). A partial
 * overlap, which no caller makes, is moved into place first. The former
 * loop went through a stack tile and a memcpy per 256 floats: relu at one
 * thread ran at half the speed of a binary op over the same bytes. */
enum { KILN_NN_UNARY_TILE = 256 };

#define KILN_NN_UNARY_LOOP(n, x, y, expr)                                          \
  {                                                                                \
    const float* xs_ = (x);                                                        \
    float* ys_ = (y);                                                              \
    const size_t n_ = (n);                                                         \
    uintptr_t xa_ = (uintptr_t)xs_, ya_ = (uintptr_t)ys_, nb_ = n_ * sizeof(float); \
    if (xa_ != ya_ && xa_ < ya_ + nb_ && ya_ < xa_ + nb_) {                        \
      memmove(ys_, xs_, nb_);                                                      \
      xs_ = ys_;                                                                   \
    }                                                                              \
    if (xs_ == ys_) {                                                              \
      for (size_t j_ = 0; j_ < n_; ++j_) {                                         \
        float v = ys_[j_];                                                         \
        ys_[j_] = (expr);                                                          \
      }                                                                            \
    } else {                                                                       \
      for (size_t j_ = 0; j_ < n_; ++j_) {                                         \
        float v = xs_[j_];                                                         \
        ys_[j_] = (expr);                                                          \
      }                                                                            \
    }                                                                              \
  }                                                                                \
  break

#endif /* KILN_NN_MATH_H */
