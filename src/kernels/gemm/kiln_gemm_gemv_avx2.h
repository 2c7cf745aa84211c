/* The AVX2 small-M GEMV (M <= 8, the decode shape), shared by the fp32 and
 * the bf16-weight kernels: one template, specialised at compile time on the
 * weight type, so that both stream B the same way. Included only by files
 * compiled with the AVX2 flags.
 *
 * B is the whole cost here (each weight is used M times, once per row of
 * A), so the kernel is shaped around the memory system, not the FMA units:
 *   - several panels at once: a panel is one contiguous K x 16 run (917 KB
 *     at K = 14336), so reading S panels side by side keeps S sequential
 *     streams in flight; one stream alone leaves DRAM bandwidth unused (the
 *     hardware prefetchers track each stream with a bounded look-ahead);
 *   - software prefetch KILN_GEMV_PREFETCH ahead in each stream, once per
 *     cache line;
 *   - enough independent accumulators (R rows x S panels x 2 halves >= 8)
 *     to hide the FMA latency at one row.
 * bf16 weights are widened in registers (zero-extend, shift left by 16:
 * exact), two instructions per 8 weights, free in a memory-bound loop. */
#ifndef KILN_GEMM_GEMV_AVX2_H
#define KILN_GEMM_GEMV_AVX2_H

#include <immintrin.h>

#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_GEMV_AI static inline __attribute__((always_inline))
/* Bytes a stream is prefetched ahead. 2 KiB, not 1: on a Zen 5 core
 * (weights from DRAM, 1 thread, bench_gemm_quant) the bf16 GEMV went from
 * 31 to 36 GB/s at 1x4096x4096 (1.14-1.20x at M = 1, 1.15-1.22x at M = 2
 * to 8); fp32, at the read bandwidth at M = 1, 1.0-1.16x. */
#define KILN_GEMV_PREFETCH 2048

/* 8 consecutive weights at element i of b, as fp32. */
KILN_GEMV_AI __m256 kiln_gemv_load8_avx2(const void* b, int64_t i, const int bf16) {
  if (bf16) {
    __m128i h = _mm_loadu_si128((const __m128i*)((const uint16_t*)b + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  return _mm256_loadu_ps((const float*)b + i);
}

KILN_GEMV_AI void kiln_gemv_prefetch_avx2(const void* b, int64_t i, const int bf16) {
  if (bf16)
    _mm_prefetch((const char*)((const uint16_t*)b + i) + KILN_GEMV_PREFETCH, _MM_HINT_T0);
  else
    _mm_prefetch((const char*)((const float*)b + i) + KILN_GEMV_PREFETCH, _MM_HINT_T0);
}

/* out[s * ostride + i * 16 + j] (+)= sum_p a[i * lda + p] * B_s[p][j] for
 * R rows and S panels, panel s at element s * pstride of b. */
KILN_GEMV_AI void kiln_gemv_tile_avx2(const int R, const int S, const int bf16, int64_t k,
                                      const float* a, int64_t lda, const void* b,
                                      int64_t pstride, float* out, int64_t ostride, int acc_in) {
  __m256 acc[4][4][2];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      if (acc_in) {
        acc[s][i][0] = _mm256_loadu_ps(out + s * ostride + i * 16);
        acc[s][i][1] = _mm256_loadu_ps(out + s * ostride + i * 16 + 8);
      } else {
        acc[s][i][0] = acc[s][i][1] = _mm256_setzero_ps();
      }
    }
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    /* Two k steps are 128 bytes of fp32 (two lines) or 64 of bf16 (one). */
    for (int s = 0; s < S; ++s) {
      kiln_gemv_prefetch_avx2(b, s * pstride + p * 16, bf16);
      if (!bf16) kiln_gemv_prefetch_avx2(b, s * pstride + p * 16 + 16, bf16);
    }
    for (int u = 0; u < 2; ++u)
      for (int s = 0; s < S; ++s) {
        __m256 b0 = kiln_gemv_load8_avx2(b, s * pstride + (p + u) * 16, bf16);
        __m256 b1 = kiln_gemv_load8_avx2(b, s * pstride + (p + u) * 16 + 8, bf16);
        for (int i = 0; i < R; ++i) {
          __m256 av = _mm256_broadcast_ss(a + i * lda + p + u);
          acc[s][i][0] = _mm256_fmadd_ps(av, b0, acc[s][i][0]);
          acc[s][i][1] = _mm256_fmadd_ps(av, b1, acc[s][i][1]);
        }
      }
  }
  for (; p < k; ++p)
    for (int s = 0; s < S; ++s) {
      __m256 b0 = kiln_gemv_load8_avx2(b, s * pstride + p * 16, bf16);
      __m256 b1 = kiln_gemv_load8_avx2(b, s * pstride + p * 16 + 8, bf16);
      for (int i = 0; i < R; ++i) {
        __m256 av = _mm256_broadcast_ss(a + i * lda + p);
        acc[s][i][0] = _mm256_fmadd_ps(av, b0, acc[s][i][0]);
        acc[s][i][1] = _mm256_fmadd_ps(av, b1, acc[s][i][1]);
      }
    }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      _mm256_storeu_ps(out + s * ostride + i * 16, acc[s][i][0]);
      _mm256_storeu_ps(out + s * ostride + i * 16 + 8, acc[s][i][1]);
    }
}

/* R <= 4 rows over `panels` panels, S at a time: as many streams as the 16
 * ymm registers allow (R * S * 2 accumulators, at most 12, plus 2 for B and
 * 1 for A). */
KILN_GEMV_AI void kiln_gemv_rows_avx2(const int bf16, int64_t r, int panels, int64_t k,
                                      const float* a, int64_t lda, const void* b, float* out,
                                      int64_t ostride, int acc_in) {
  const int64_t pstride = k * KILN_GEMM_PANEL;
  const int s_max = r == 1 ? 4 : r <= 3 ? 2 : 1;
  for (int q = 0; q < panels;) {
    int s = panels - q < s_max ? panels - q : s_max;
    const void* bq = bf16 ? (const void*)((const uint16_t*)b + q * pstride)
                          : (const void*)((const float*)b + q * pstride);
    float* oq = out + q * ostride;
    switch (r * 8 + s) {
      case 8 + 1: kiln_gemv_tile_avx2(1, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 2: kiln_gemv_tile_avx2(1, 2, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 3: kiln_gemv_tile_avx2(1, 3, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 4: kiln_gemv_tile_avx2(1, 4, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 16 + 1: kiln_gemv_tile_avx2(2, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 16 + 2: kiln_gemv_tile_avx2(2, 2, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 24 + 1: kiln_gemv_tile_avx2(3, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 24 + 2: kiln_gemv_tile_avx2(3, 2, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 32 + 1: kiln_gemv_tile_avx2(4, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      default: break;
    }
    q += s;
  }
}

/* The kernel-table entry (see kiln_gemm_gemv_fn). */
KILN_GEMV_AI void kiln_gemv_avx2(const int bf16, int64_t m, int64_t k, const float* a,
                                 int64_t lda, const void* b, int panels, float* out) {
  const int64_t ostride = m * KILN_GEMM_PANEL, pstride = k * KILN_GEMM_PANEL;
  if (m <= 4) {
    kiln_gemv_rows_avx2(bf16, m, panels, k, a, lda, b, out, ostride, 0);
    return;
  }
  /* 5..8 rows need more accumulators than there are registers: per panel,
   * rows 0-3 and then 4.. over K blocks of 256, so the second pass finds
   * the block of B in L1 and B still streams from memory once. */
  for (int q = 0; q < panels; ++q) {
    const void* bq = bf16 ? (const void*)((const uint16_t*)b + q * pstride)
                          : (const void*)((const float*)b + q * pstride);
    float* oq = out + q * ostride;
    if (k == 0)
      for (int64_t i = 0; i < ostride; ++i) oq[i] = 0.0f;
    for (int64_t p0 = 0; p0 < k; p0 += 256) {
      int64_t kb = k - p0 < 256 ? k - p0 : 256;
      const void* bk = bf16 ? (const void*)((const uint16_t*)bq + p0 * 16)
                            : (const void*)((const float*)bq + p0 * 16);
      kiln_gemv_rows_avx2(bf16, 4, 1, kb, a + p0, lda, bk, oq, ostride, p0 > 0);
      kiln_gemv_rows_avx2(bf16, m - 4, 1, kb, a + 4 * lda + p0, lda, bk, oq + 4 * 16, ostride,
                          p0 > 0);
    }
  }
}

#endif /* KILN_GEMM_GEMV_AVX2_H */
