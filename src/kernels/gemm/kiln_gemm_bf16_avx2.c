/* bf16 weights on AVX2 + FMA: the small-M GEMV (kiln_gemm_gemv_avx2.h) and
 * the micro-panel widening for the blocked path. Compiled only with the AVX2 flags and called only
 * when kiln_cpu_isa() >= KILN_ISA_AVX2.
 *
 * AVX2 has no bf16 arithmetic, but none is needed: a bf16 value is the top
 * half of an fp32 one, so zero-extending 16 bf16 to 32 bits and shifting
 * left by 16 gives the exact fp32 values in two ymm registers. The GEMV is
 * memory-bound, so these two extra instructions per 8 weights are free and
 * the half-size weights stream twice as many columns per second. */
#include <immintrin.h>

#include "kernels/gemm/kiln_gemm_gemv_avx2.h"
#include "kernels/gemm/kiln_gemm_internal.h"

static inline __attribute__((always_inline)) __m256 kiln_gemm_bf16x8_avx2(const uint16_t* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

void kiln_gemm_widen_bf16_avx2(int64_t kc, int64_t k, int panels, const uint16_t* b,
                               float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int q = 0; q < panels; ++q) {
    const uint16_t* src = b + q * k * P;
    float* dst = out + q * kc * P;
    for (int64_t i = 0; i < kc * P; i += 16) {
      _mm256_storeu_ps(dst + i, kiln_gemm_bf16x8_avx2(src + i));
      _mm256_storeu_ps(dst + i + 8, kiln_gemm_bf16x8_avx2(src + i + 8));
    }
  }
}

/* The small-M GEMV: kiln_gemm_gemv_avx2.h's template over bf16 panels. */
void kiln_gemm_gemv_bf16_avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                              const uint16_t* b_panel, int panels, float* out) {
  kiln_gemv_avx2(1, m, k, a, lda, b_panel, panels, out);
}
