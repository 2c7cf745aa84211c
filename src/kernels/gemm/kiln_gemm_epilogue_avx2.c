/* The AVX2 GEMM epilogue: dst = act(src + bias) + residual, 8 floats at a
 * time, with small vectorised exp/erf/tanh written for it. Run on a C tile
 * just after its last K block, while the tile is in L1. The AVX-512 level
 * has its own (kiln_gemm_epilogue_avx512.c: the same functions at 16 lanes;
 * for GELU the epilogue is not a sliver of a layer's time).
 *
 * Accuracy (vs the libm-based reference, fp32 inputs):
 *   exp: Cody-Waite reduction to |r| <= ln2/2 and the degree-7 Taylor
 *        polynomial (truncation < 1e-8 relative): ~1-2 ulp.
 *   sigmoid = 1 / (1 + exp(-x)), silu = x * sigmoid(x): ~2-3 ulp.
 *   tanh: odd Taylor series to x^15 for |x| < 0.5 (next term < 1e-8
 *        relative there), else (1 - e) / (1 + e) with e = exp(-2|x|), which
 *        has no cancellation once |x| >= 0.5: ~3 ulp.
 *   gelu (exact): 0.5 x (1 + erf(x / sqrt 2)) with a Chebyshev erfc of
 *        fractional error < 1.2e-7, written as x >= 0 ? 2 - erfc : erfc so
 *        the negative side has no cancellation: <= 1.1e-6 relative to the
 *        true value for x >= -3 and <= 6e-6 below (rounding of z^2 inside
 *        exp), where the erff reference is far worse (1 + erff cancels).
 *   gelu_tanh: 0.5 x (1 + tanh u) = x / (1 + exp(-2u)): <= 8e-7 relative
 *        for x >= -3, <= 1e-5 below (u's rounding, amplified by exp).
 * NaN propagates through every activation (min/max operand order below is
 * chosen so that a NaN input is returned, not the clamp bound). */
#include <immintrin.h>
#include <math.h>

#include "kernels/gemm/kiln_gemm_act_avx2.h"
#include "kernels/gemm/kiln_gemm_internal.h"

static inline __m256i kiln_gemm_tail_mask_avx2(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The rows with one activation (a constant once inlined), two vectors a
 * step so that one's exp and polynomial chains overlap the other's. */
static inline __attribute__((always_inline)) void kiln_gemm_rows_avx2(
    int64_t m, int64_t n, const float* src, int64_t lds, float* dst, int64_t ldd,
    const float* bias, const float* res, int64_t ldr, const kiln_activation_t act) {
  for (int64_t i = 0; i < m; ++i) {
    const float* s = src + i * lds;
    float* d = dst + i * ldd;
    const float* r = res ? res + i * ldr : NULL;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
      /* Both loads before either store: dst may be src (in place). */
      __m256 x0 = _mm256_loadu_ps(s + j), x1 = _mm256_loadu_ps(s + j + 8);
      if (bias) {
        x0 = _mm256_add_ps(x0, _mm256_loadu_ps(bias + j));
        x1 = _mm256_add_ps(x1, _mm256_loadu_ps(bias + j + 8));
      }
      x0 = kiln_gemm_act_avx2(x0, act);
      x1 = kiln_gemm_act_avx2(x1, act);
      if (r) {
        x0 = _mm256_add_ps(x0, _mm256_loadu_ps(r + j));
        x1 = _mm256_add_ps(x1, _mm256_loadu_ps(r + j + 8));
      }
      _mm256_storeu_ps(d + j, x0);
      _mm256_storeu_ps(d + j + 8, x1);
    }
    /* A whole vector left unmasked: VMASKMOVPS's store is microcoded on
     * AMD, many times a plain store's cost. */
    if (j + 8 <= n) {
      __m256 x = _mm256_loadu_ps(s + j);
      if (bias) x = _mm256_add_ps(x, _mm256_loadu_ps(bias + j));
      x = kiln_gemm_act_avx2(x, act);
      if (r) x = _mm256_add_ps(x, _mm256_loadu_ps(r + j));
      _mm256_storeu_ps(d + j, x);
      j += 8;
    }
    for (; j < n; j += 8) {
      /* Masked loads never touch (or fault on) the lanes past n. */
      __m256i mask = kiln_gemm_tail_mask_avx2(n - j);
      __m256 x = _mm256_maskload_ps(s + j, mask);
      if (bias) x = _mm256_add_ps(x, _mm256_maskload_ps(bias + j, mask));
      x = kiln_gemm_act_avx2(x, act);
      if (r) x = _mm256_add_ps(x, _mm256_maskload_ps(r + j, mask));
      _mm256_maskstore_ps(d + j, mask, x);
    }
  }
}

void kiln_f32_gemm_epilogue__avx2(int64_t m, int64_t n, const float* src, int64_t lds, float* dst,
                                  int64_t ldd, const float* bias, const float* res, int64_t ldr,
                                  kiln_activation_t act) {
#define KILN_EP_ROWS(A) kiln_gemm_rows_avx2(m, n, src, lds, dst, ldd, bias, res, ldr, A)
  KILN_GEMM_EPILOGUE_BY_ACT(act, KILN_EP_ROWS)
#undef KILN_EP_ROWS
}
