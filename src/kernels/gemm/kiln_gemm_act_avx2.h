/* The AVX2 activations of the GEMM epilogue (kiln_gemm_epilogue_avx2.c,
 * whose header gives their accuracy), as inline functions on one ymm, so
 * that kernels which finish a tile in registers (the channels-last conv's
 * direct store, kiln_conv_avx2.c) apply exactly the epilogue's numbers.
 * Include only in files compiled with the AVX2 and FMA flags. */
#ifndef KILN_GEMM_ACT_AVX2_H
#define KILN_GEMM_ACT_AVX2_H

#include <immintrin.h>
#include <math.h>

#include "base/kiln_activation.h"

static inline __m256 kiln_gemm_exp_avx2(__m256 x) {
  /* Past ln(FLT_MAX) exp overflows to +inf, as libm's and torch's do: then
   * sigmoid(-inf) is 0 and silu(-inf) = -inf * 0 is NaN, as in torch (with
   * the clamp alone sigmoid(-inf) was 4e-39 and silu(-inf) -inf). */
  __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ);
  /* Keep 2^n a normal float: n in [-126, 127]. min/max return their second
   * operand when one is NaN, so x goes second to carry a NaN through. */
  x = _mm256_min_ps(_mm256_set1_ps(88.37f), x);
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  /* ln2 split in a 16-bit head (exact n * head) and its tail. */
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_blendv_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), _mm256_set1_ps(INFINITY), over);
}

static inline __m256 kiln_gemm_sigmoid_avx2(__m256 x) {
  __m256 one = _mm256_set1_ps(1.0f);
  __m256 e = kiln_gemm_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(one, _mm256_add_ps(one, e));
}

static inline __m256 kiln_gemm_tanh_avx2(__m256 x) {
  __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 ax = _mm256_andnot_ps(sign, x);
  /* Small |x|: tanh x = x (1 + x^2 (-1/3 + x^2 (2/15 - ...))). */
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 q = _mm256_set1_ps(-929569.0f / 638512875.0f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(21844.0f / 6081075.0f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1382.0f / 155925.0f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(62.0f / 2835.0f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-17.0f / 315.0f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.0f / 15.0f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.0f / 3.0f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(q, x2), x, x);
  /* x's sign on it: -0 + +0 rounds to +0, and tanh(-0) is -0. */
  small = _mm256_or_ps(_mm256_andnot_ps(sign, small), _mm256_and_ps(sign, x));
  /* Large |x|: (1 - e) / (1 + e), e = exp(-2|x|), sign put back. */
  __m256 one = _mm256_set1_ps(1.0f);
  __m256 e = kiln_gemm_exp_avx2(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  __m256 big = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ));
}

static inline __m256 kiln_gemm_gelu_avx2(__m256 x) {
  __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 z = _mm256_mul_ps(ax, _mm256_set1_ps(0.70710678118654752f));
  __m256 one = _mm256_set1_ps(1.0f);
  /* erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2): the Chebyshev fit
   * with fractional error < 1.2e-7 for all z >= 0 (Numerical Recipes'
   * erfcc), so the negative side, where 1 + erf is small, keeps its
   * relative accuracy. */
  __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(z, _mm256_set1_ps(0.5f), one));
  /* P(t) = c0 + c1 t + .. + c9 t^9 in Estrin's order (pairs, then powers
   * t^2, t^4, t^8): a chain of 4 FMA latencies where Horner's had 9, so
   * more elements' chains are in flight at once (12 % faster on Zen 5). */
  __m256 t2 = _mm256_mul_ps(t, t), t4 = _mm256_mul_ps(t2, t2), t8 = _mm256_mul_ps(t4, t4);
  __m256 c01 = _mm256_fmadd_ps(t, _mm256_set1_ps(1.00002368f), _mm256_set1_ps(-1.26551223f));
  __m256 c23 = _mm256_fmadd_ps(t, _mm256_set1_ps(0.09678418f), _mm256_set1_ps(0.37409196f));
  __m256 c45 = _mm256_fmadd_ps(t, _mm256_set1_ps(0.27886807f), _mm256_set1_ps(-0.18628806f));
  __m256 c67 = _mm256_fmadd_ps(t, _mm256_set1_ps(1.48851587f), _mm256_set1_ps(-1.13520398f));
  __m256 c89 = _mm256_fmadd_ps(t, _mm256_set1_ps(0.17087277f), _mm256_set1_ps(-0.82215223f));
  __m256 p = _mm256_fmadd_ps(_mm256_fmadd_ps(c67, t2, c45), t4, _mm256_fmadd_ps(c23, t2, c01));
  p = _mm256_fmadd_ps(c89, t8, p);
  __m256 h = _mm256_mul_ps(t, kiln_gemm_exp_avx2(_mm256_fnmadd_ps(z, z, p)));
  __m256 pos = _mm256_sub_ps(_mm256_set1_ps(2.0f), h);
  /* x >= 0: 1 + erf = 2 - erfc; x < 0: 1 + erf = erfc. NaN takes `pos`. */
  __m256 f = _mm256_blendv_ps(pos, h, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), f);
}

static inline __m256 kiln_gemm_gelu_tanh_avx2(__m256 x) {
  __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.79788456080286536f),
                           _mm256_fmadd_ps(x3, _mm256_set1_ps(0.044715f), x));
  __m256 e = kiln_gemm_exp_avx2(_mm256_mul_ps(u, _mm256_set1_ps(-2.0f)));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __attribute__((always_inline)) __m256 kiln_gemm_act_avx2(__m256 x,
                                                                   const kiln_activation_t act) {
  switch (act) {
    case KILN_ACT_RELU: return _mm256_max_ps(_mm256_setzero_ps(), x);
    case KILN_ACT_GELU: return kiln_gemm_gelu_avx2(x);
    case KILN_ACT_GELU_TANH: return kiln_gemm_gelu_tanh_avx2(x);
    case KILN_ACT_SILU: return _mm256_mul_ps(x, kiln_gemm_sigmoid_avx2(x));
    case KILN_ACT_SIGMOID: return kiln_gemm_sigmoid_avx2(x);
    case KILN_ACT_TANH: return kiln_gemm_tanh_avx2(x);
    /* min/max return their second operand on NaN or equality: x's NaN and
     * -0.0 pass, as torch's hardtanh. */
    case KILN_ACT_RELU6:
      return _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), x));
    /* x relu6(x + 3) / 6 in torch's order (kiln_activation_scalar's bits). */
    case KILN_ACT_HARDSWISH: {
      __m256 t = _mm256_add_ps(x, _mm256_set1_ps(3.0f));
      t = _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), t));
      return _mm256_div_ps(_mm256_mul_ps(x, t), _mm256_set1_ps(6.0f));
    }
    default: return x;
  }
}

#endif /* KILN_GEMM_ACT_AVX2_H */
