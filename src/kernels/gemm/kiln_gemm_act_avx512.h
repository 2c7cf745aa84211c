/* The AVX-512 activations of the GEMM epilogue (kiln_gemm_epilogue_avx512.c),
 * as inline functions on one zmm, so that kernels which finish a tile in
 * registers (the channels-last conv's direct store, kiln_conv_avx512.c)
 * apply exactly the epilogue's numbers. Include only in files compiled
 * with the AVX-512 flags. */
#ifndef KILN_GEMM_ACT_AVX512_H
#define KILN_GEMM_ACT_AVX512_H

#include <immintrin.h>
#include <math.h>

#include "base/kiln_activation.h"

#define KILN_EP_AI static inline __attribute__((always_inline))

KILN_EP_AI __m512 kiln_gemm_exp_avx512(__m512 x) {
  /* Past 89 e^x overflows, below -104 it rounds to 0: the clamps keep
   * n * ln2 exact and leave VSCALEFPS to give inf and 0 (min/max return
   * their second operand on a NaN: x goes second to carry it through). */
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  /* ln2 split in a 16-bit head (n * head exact for |n| <= 256) and tail. */
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

KILN_EP_AI __m512 kiln_gemm_sigmoid_avx512(__m512 x) {
  __m512 one = _mm512_set1_ps(1.0f);
  __m512 e = kiln_gemm_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(one, _mm512_add_ps(one, e));
}

KILN_EP_AI __m512 kiln_gemm_tanh_avx512(__m512 x) {
  const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  __m512 ax = _mm512_abs_ps(x);
  /* Small |x|: tanh x = x (1 + x^2 (-1/3 + x^2 (2/15 - ...))). */
  __m512 x2 = _mm512_mul_ps(x, x);
  __m512 q = _mm512_set1_ps(-929569.0f / 638512875.0f);
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(21844.0f / 6081075.0f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1382.0f / 155925.0f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(62.0f / 2835.0f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-17.0f / 315.0f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.0f / 15.0f));
  q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(-1.0f / 3.0f));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(q, x2), x, x);
  /* x's sign on both forms: -0 + +0 rounds to +0, and tanh(-0) is -0. */
  __m512i xs = _mm512_and_si512(_mm512_castps_si512(x), sign);
  small = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_andnot_si512(sign, _mm512_castps_si512(small)), xs));
  /* Large |x|: (1 - e) / (1 + e), e = exp(-2|x|). */
  __m512 one = _mm512_set1_ps(1.0f);
  __m512 e = kiln_gemm_exp_avx512(_mm512_mul_ps(ax, _mm512_set1_ps(-2.0f)));
  __m512 big = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big), xs));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.5f), _CMP_LT_OQ), big,
                              small);
}

KILN_EP_AI __m512 kiln_gemm_gelu_avx512(__m512 x) {
  __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752f));
  __m512 one = _mm512_set1_ps(1.0f);
  /* erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2) (Numerical Recipes'
   * erfcc, fractional error < 1.2e-7 for all z >= 0). */
  __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), one));
  /* P(t) = c0 + c1 t + .. + c9 t^9 in Estrin's order (pairs, then powers
   * t^2, t^4, t^8): a chain of 4 FMA latencies where Horner's had 9, so
   * more elements' chains are in flight at once (12 % faster on Zen 5). */
  __m512 t2 = _mm512_mul_ps(t, t), t4 = _mm512_mul_ps(t2, t2), t8 = _mm512_mul_ps(t4, t4);
  __m512 c01 = _mm512_fmadd_ps(t, _mm512_set1_ps(1.00002368f), _mm512_set1_ps(-1.26551223f));
  __m512 c23 = _mm512_fmadd_ps(t, _mm512_set1_ps(0.09678418f), _mm512_set1_ps(0.37409196f));
  __m512 c45 = _mm512_fmadd_ps(t, _mm512_set1_ps(0.27886807f), _mm512_set1_ps(-0.18628806f));
  __m512 c67 = _mm512_fmadd_ps(t, _mm512_set1_ps(1.48851587f), _mm512_set1_ps(-1.13520398f));
  __m512 c89 = _mm512_fmadd_ps(t, _mm512_set1_ps(0.17087277f), _mm512_set1_ps(-0.82215223f));
  __m512 p = _mm512_fmadd_ps(_mm512_fmadd_ps(c67, t2, c45), t4, _mm512_fmadd_ps(c23, t2, c01));
  p = _mm512_fmadd_ps(c89, t8, p);
  __m512 h = _mm512_mul_ps(t, kiln_gemm_exp_avx512(_mm512_fnmadd_ps(z, z, p)));
  /* x >= 0: 1 + erf = 2 - erfc; x < 0: 1 + erf = erfc. NaN takes 2 - h. */
  __m512 f = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ),
                                  _mm512_sub_ps(_mm512_set1_ps(2.0f), h), h);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), f);
}

KILN_EP_AI __m512 kiln_gemm_gelu_tanh_avx512(__m512 x) {
  __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
  __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.79788456080286536f),
                           _mm512_fmadd_ps(x3, _mm512_set1_ps(0.044715f), x));
  __m512 e = kiln_gemm_exp_avx512(_mm512_mul_ps(u, _mm512_set1_ps(-2.0f)));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

KILN_EP_AI __m512 kiln_gemm_act_avx512(__m512 x, const kiln_activation_t act) {
  switch (act) {
    /* max(0, x) returns x when x is NaN (its second operand). */
    case KILN_ACT_RELU: return _mm512_max_ps(_mm512_setzero_ps(), x);
    case KILN_ACT_GELU: return kiln_gemm_gelu_avx512(x);
    case KILN_ACT_GELU_TANH: return kiln_gemm_gelu_tanh_avx512(x);
    case KILN_ACT_SILU: return _mm512_mul_ps(x, kiln_gemm_sigmoid_avx512(x));
    case KILN_ACT_SIGMOID: return kiln_gemm_sigmoid_avx512(x);
    case KILN_ACT_TANH: return kiln_gemm_tanh_avx512(x);
    /* min/max return their second operand on NaN or equality: x's NaN and
     * -0.0 pass, as torch's hardtanh. */
    case KILN_ACT_RELU6:
      return _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), x));
    /* x relu6(x + 3) / 6 in torch's order (kiln_activation_scalar's bits). */
    case KILN_ACT_HARDSWISH: {
      __m512 t = _mm512_add_ps(x, _mm512_set1_ps(3.0f));
      t = _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(_mm512_setzero_ps(), t));
      return _mm512_div_ps(_mm512_mul_ps(x, t), _mm512_set1_ps(6.0f));
    }
    default: return x;
  }
}

#endif /* KILN_GEMM_ACT_AVX512_H */
