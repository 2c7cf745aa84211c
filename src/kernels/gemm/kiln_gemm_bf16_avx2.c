/* bf16 weights on AVX2 + FMA: the small-M GEMV and the micro-panel widening
 * for the blocked path. Compiled only with the AVX2 flags and called only
 * when kiln_cpu_isa() >= KILN_ISA_AVX2.
 *
 * AVX2 has no bf16 arithmetic, but none is needed: a bf16 value is the top
 * half of an fp32 one, so zero-extending 16 bf16 to 32 bits and shifting
 * left by 16 gives the exact fp32 values in two ymm registers. The GEMV is
 * memory-bound, so these two extra instructions per 8 weights are free and
 * the half-size weights stream twice as many columns per second. */
#include <immintrin.h>

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

/* As kiln_gemm_gemv_rows_avx2 (kiln_gemm_ukernel_avx2.c) over a bf16 panel:
 * R <= 4 rows, U-way unrolled over K with separate accumulators. */
static inline __attribute__((always_inline)) void kiln_gemm_gemv_bf16_rows_avx2(
    const int R, const int U, int64_t k, const float* a, int64_t lda, const uint16_t* b,
    float* out, int acc_in) {
  __m256 acc[4][4][2];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i) acc[u][i][0] = acc[u][i][1] = _mm256_setzero_ps();
  if (acc_in)
    for (int i = 0; i < R; ++i) {
      acc[0][i][0] = _mm256_loadu_ps(out + i * 16);
      acc[0][i][1] = _mm256_loadu_ps(out + i * 16 + 8);
    }
  int64_t p = 0;
  for (; p + U <= k; p += U) {
    /* One 64-byte line holds two k steps: prefetch 2 KiB ahead, once per
     * line (U is even whenever it is not 1; with U == 1 every other step
     * asks again, which is harmless). */
    for (int u = 0; u < U; u += 2)
      _mm_prefetch((const char*)(b + (p + u) * 16 + 1024), _MM_HINT_T0);
    for (int u = 0; u < U; ++u) {
      __m256 b0 = kiln_gemm_bf16x8_avx2(b + (p + u) * 16);
      __m256 b1 = kiln_gemm_bf16x8_avx2(b + (p + u) * 16 + 8);
      for (int i = 0; i < R; ++i) {
        __m256 av = _mm256_broadcast_ss(a + i * lda + p + u);
        acc[u][i][0] = _mm256_fmadd_ps(av, b0, acc[u][i][0]);
        acc[u][i][1] = _mm256_fmadd_ps(av, b1, acc[u][i][1]);
      }
    }
  }
  for (; p < k; ++p) {
    __m256 b0 = kiln_gemm_bf16x8_avx2(b + p * 16), b1 = kiln_gemm_bf16x8_avx2(b + p * 16 + 8);
    for (int i = 0; i < R; ++i) {
      __m256 av = _mm256_broadcast_ss(a + i * lda + p);
      acc[0][i][0] = _mm256_fmadd_ps(av, b0, acc[0][i][0]);
      acc[0][i][1] = _mm256_fmadd_ps(av, b1, acc[0][i][1]);
    }
  }
  for (int u = 1; u < U; ++u)
    for (int i = 0; i < R; ++i) {
      acc[0][i][0] = _mm256_add_ps(acc[0][i][0], acc[u][i][0]);
      acc[0][i][1] = _mm256_add_ps(acc[0][i][1], acc[u][i][1]);
    }
  for (int i = 0; i < R; ++i) {
    _mm256_storeu_ps(out + i * 16, acc[0][i][0]);
    _mm256_storeu_ps(out + i * 16 + 8, acc[0][i][1]);
  }
}

static void kiln_gemm_gemv_bf16_rows_avx2_any(int64_t r, int64_t k, const float* a, int64_t lda,
                                              const uint16_t* b, float* out, int acc_in) {
  switch (r) {
    case 1: kiln_gemm_gemv_bf16_rows_avx2(1, 4, k, a, lda, b, out, acc_in); break;
    case 2: kiln_gemm_gemv_bf16_rows_avx2(2, 2, k, a, lda, b, out, acc_in); break;
    case 3: kiln_gemm_gemv_bf16_rows_avx2(3, 2, k, a, lda, b, out, acc_in); break;
    case 4: kiln_gemm_gemv_bf16_rows_avx2(4, 1, k, a, lda, b, out, acc_in); break;
    default: break;
  }
}

void kiln_gemm_gemv_bf16_avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                              const uint16_t* b_panel, float* out) {
  if (k == 0) {
    for (int64_t i = 0; i < m * 16; ++i) out[i] = 0.0f;
    return;
  }
  if (m <= 4) {
    kiln_gemm_gemv_bf16_rows_avx2_any(m, k, a, lda, b_panel, out, 0);
    return;
  }
  /* 5..8 rows: rows 0-3 then 4.. over K blocks of 256, so the second pass
   * finds the 8 KiB block of B in L1 (B still streams from memory once). */
  for (int64_t p0 = 0; p0 < k; p0 += 256) {
    int64_t kb = k - p0 < 256 ? k - p0 : 256;
    kiln_gemm_gemv_bf16_rows_avx2_any(4, kb, a + p0, lda, b_panel + p0 * 16, out, p0 > 0);
    kiln_gemm_gemv_bf16_rows_avx2_any(m - 4, kb, a + 4 * lda + p0, lda, b_panel + p0 * 16,
                                      out + 4 * 16, p0 > 0);
  }
}
