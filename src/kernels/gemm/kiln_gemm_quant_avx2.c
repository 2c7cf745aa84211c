/* Quantized weights on AVX2 + FMA: the small-M GEMVs (int8, int4) and the
 * dequantizers of the blocked path. Compiled only with the AVX2 flags and
 * called only when kiln_cpu_isa() >= KILN_ISA_AVX2. Layouts and the
 * kernels' contracts: kiln_gemm.h, kiln_gemm_quant_internal.h.
 *
 * int8: VPMOVSXBD widens 8 weights straight from memory, VCVTDQ2PS makes
 * them fp32 (exact), the FMAs sum; the column scales multiply once at the
 * end. Like the fp32 GEMV (kiln_gemm_gemv_avx2.h) it reads several panels
 * side by side (parallel streams) with a software prefetch 1 KiB ahead.
 * int4: a row pair of a panel is 16 bytes; VPMOVZXBD widens 8 of them (4
 * columns' even and odd rows, low nibble, and 4 more columns in the high
 * nibble), an AND and a shift split the nibbles, and each FMA takes A as
 * a broadcast pair (a[p], a[p + 1]) so lanes hold (column, row parity).
 * Per group the pairs are scaled (scales expanded to the lane order by
 * VPERMPS) with the zero point applied once through A's group sums; the
 * lanes of a column are added at the very end (VHADDPS). */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q_AI static inline __attribute__((always_inline))

/* ---- int8 GEMV ------------------------------------------------------------ */

KILN_Q_AI __m256 kiln_q8x8_avx2(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
}

KILN_Q_AI void kiln_q8_tile_avx2(const int R, const int S, int64_t k, const float* a,
                                 int64_t lda, const int8_t* b, int64_t pstride,
                                 const float* scales, float* out, int64_t ostride) {
  __m256 acc[4][4][2];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) acc[s][i][0] = acc[s][i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    if ((p & 3) == 0)
      for (int s = 0; s < S; ++s) _mm_prefetch((const char*)(b + s * pstride + p * 16 + 1024), _MM_HINT_T0);
    for (int s = 0; s < S; ++s) {
      __m256 w0 = kiln_q8x8_avx2(b + s * pstride + p * 16);
      __m256 w1 = kiln_q8x8_avx2(b + s * pstride + p * 16 + 8);
      for (int i = 0; i < R; ++i) {
        __m256 av = _mm256_broadcast_ss(a + i * lda + p);
        acc[s][i][0] = _mm256_fmadd_ps(av, w0, acc[s][i][0]);
        acc[s][i][1] = _mm256_fmadd_ps(av, w1, acc[s][i][1]);
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    __m256 s0 = _mm256_loadu_ps(scales + s * 16), s1 = _mm256_loadu_ps(scales + s * 16 + 8);
    for (int i = 0; i < R; ++i) {
      _mm256_storeu_ps(out + s * ostride + i * 16, _mm256_mul_ps(acc[s][i][0], s0));
      _mm256_storeu_ps(out + s * ostride + i * 16 + 8, _mm256_mul_ps(acc[s][i][1], s1));
    }
  }
}

/* R <= 4 rows over `panels` panels, S at a time (R * S * 2 <= 12 accumulators). */
static void kiln_q8_rows_avx2(int64_t r, int panels, int64_t k, const float* a, int64_t lda,
                              const int8_t* b, const float* scales, float* out, int64_t ostride) {
  const int64_t pstride = 16 * k;
  const int s_max = r == 1 ? 4 : r <= 3 ? 2 : 1;
  for (int q = 0; q < panels;) {
    int s = panels - q < s_max ? panels - q : s_max;
    const int8_t* bq = b + q * pstride;
    const float* sq = scales + q * 16;
    float* oq = out + q * ostride;
    switch (r * 8 + s) {
      case 8 + 1: kiln_q8_tile_avx2(1, 1, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 8 + 2: kiln_q8_tile_avx2(1, 2, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 8 + 3: kiln_q8_tile_avx2(1, 3, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 8 + 4: kiln_q8_tile_avx2(1, 4, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 16 + 1: kiln_q8_tile_avx2(2, 1, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 16 + 2: kiln_q8_tile_avx2(2, 2, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 24 + 1: kiln_q8_tile_avx2(3, 1, k, a, lda, bq, pstride, sq, oq, ostride); break;
      case 24 + 2: kiln_q8_tile_avx2(3, 2, k, a, lda, bq, pstride, sq, oq, ostride); break;
      default: kiln_q8_tile_avx2(4, 1, k, a, lda, bq, pstride, sq, oq, ostride); break;
    }
    q += s;
  }
}

void kiln_f32_qc8w_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                              const float* scales, int panels, float* out) {
  const int64_t ostride = m * 16;
  if (m <= 4) {
    kiln_q8_rows_avx2(m, panels, k, a, lda, b, scales, out, ostride);
    return;
  }
  /* 5..8 rows: rows 0-3, then the rest, panel by panel (the second pass
   * finds the panel in L2). */
  for (int q = 0; q < panels; ++q) {
    kiln_q8_rows_avx2(4, 1, k, a, lda, b + q * 16 * k, scales + q * 16, out + q * ostride, ostride);
    kiln_q8_rows_avx2(m - 4, 1, k, a + 4 * lda, lda, b + q * 16 * k, scales + q * 16,
                      out + q * ostride + 4 * 16, ostride);
  }
}

/* ---- int4 GEMV ------------------------------------------------------------ */

KILN_Q_AI __m256 kiln_q_pair_avx2(const float* p) {
  double d;
  memcpy(&d, p, sizeof d);
  return _mm256_castpd_ps(_mm256_set1_pd(d));
}

/* Lane sums of (column, parity) pairs into 16 columns: o holds 4 vectors of
 * 8 lanes (columns 0-3, 4-7, 8-11, 12-15, each as (even, odd) pairs). */
KILN_Q_AI void kiln_q4_fold_avx2(const float* o, float* out) {
  __m256 lo = _mm256_hadd_ps(_mm256_loadu_ps(o), _mm256_loadu_ps(o + 8));
  __m256 hi = _mm256_hadd_ps(_mm256_loadu_ps(o + 16), _mm256_loadu_ps(o + 24));
  _mm256_storeu_ps(out, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(lo), 0xD8)));
  _mm256_storeu_ps(out + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(hi), 0xD8)));
}

KILN_Q_AI void kiln_q4_tile_avx2(const int R, const int S, int64_t kg, int group, int asym,
                                 const float* a, int64_t lda, const float* asum, const uint8_t* b,
                                 int64_t pstride, float* out, int64_t ostride) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, asym), hdr = 64 * (1 + (asym != 0));
  const __m256i m4 = _mm256_set1_epi32(15);
  const __m256i ilo = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  const __m256i ihi = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
  _Alignas(32) float o[4][2][32];
  memset(o, 0, sizeof o);
  for (int64_t g = 0; g < kg; ++g) {
    __m256 acc[2][2][4];
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < R; ++i)
        for (int u = 0; u < 4; ++u) acc[s][i][u] = _mm256_setzero_ps();
    const uint8_t* gbase = b + g * gb;
    const float* ag = a + g * group;
    for (int t = 0; t < group / 2; ++t) {
      if ((t & 3) == 0)
        for (int s = 0; s < S; ++s)
          _mm_prefetch((const char*)(gbase + s * pstride + hdr + t * 16 + 1024), _MM_HINT_T0);
      for (int s = 0; s < S; ++s) {
        const uint8_t* nb = gbase + s * pstride + hdr + t * 16;
        __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)nb));
        __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(nb + 8)));
        __m256 w0 = _mm256_cvtepi32_ps(_mm256_and_si256(v0, m4));
        __m256 w1 = _mm256_cvtepi32_ps(_mm256_and_si256(v1, m4));
        __m256 w2 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v0, 4));
        __m256 w3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(v1, 4));
        for (int i = 0; i < R; ++i) {
          __m256 av = kiln_q_pair_avx2(ag + i * lda + 2 * t);
          acc[s][i][0] = _mm256_fmadd_ps(av, w0, acc[s][i][0]);
          acc[s][i][1] = _mm256_fmadd_ps(av, w1, acc[s][i][1]);
          acc[s][i][2] = _mm256_fmadd_ps(av, w2, acc[s][i][2]);
          acc[s][i][3] = _mm256_fmadd_ps(av, w3, acc[s][i][3]);
        }
      }
    }
    for (int s = 0; s < S; ++s) {
      const float* sc = (const float*)(gbase + s * pstride);
      __m256 sv[4], zv[4];
      for (int u = 0; u < 4; ++u) {
        __m256 src = _mm256_loadu_ps(sc + (u >> 1) * 8);
        sv[u] = _mm256_permutevar8x32_ps(src, (u & 1) ? ihi : ilo);
        zv[u] = asym ? _mm256_permutevar8x32_ps(_mm256_loadu_ps(sc + 16 + (u >> 1) * 8),
                                                (u & 1) ? ihi : ilo)
                     : _mm256_set1_ps(8.0f);
      }
      for (int i = 0; i < R; ++i) {
        __m256 as = kiln_q_pair_avx2(asum + (i * kg + g) * 2);
        for (int u = 0; u < 4; ++u) {
          __m256 t0 = _mm256_fnmadd_ps(zv[u], as, acc[s][i][u]);
          __m256 ov = _mm256_loadu_ps(o[s][i] + u * 8);
          _mm256_storeu_ps(o[s][i] + u * 8, _mm256_fmadd_ps(sv[u], t0, ov));
        }
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) kiln_q4_fold_avx2(o[s][i], out + s * ostride + i * 16);
}

void kiln_f32_qb4w_gemv__avx2(int64_t m, int64_t kg, int group, int asym, const float* a,
                              int64_t lda, const float* asum, const uint8_t* b, int panels,
                              float* out) {
  const int64_t ostride = m * 16, pstride = kg * kiln_gemm_q4_group_bytes(group, asym);
  if (m == 1) {
    int q = 0;
    for (; q + 2 <= panels; q += 2)
      kiln_q4_tile_avx2(1, 2, kg, group, asym, a, lda, asum, b + q * pstride, pstride,
                        out + q * ostride, ostride);
    if (q < panels)
      kiln_q4_tile_avx2(1, 1, kg, group, asym, a, lda, asum, b + q * pstride, pstride,
                        out + q * ostride, ostride);
    return;
  }
  /* Rows two at a time, panel by panel (later passes find it in L2). */
  for (int q = 0; q < panels; ++q)
    for (int64_t i = 0; i < m; i += 2) {
      const float* ai = a + i * lda;
      const float* si = asum + i * kg * 2;
      float* oi = out + q * ostride + i * 16;
      if (m - i >= 2)
        kiln_q4_tile_avx2(2, 1, kg, group, asym, ai, lda, si, b + q * pstride, pstride, oi, ostride);
      else
        kiln_q4_tile_avx2(1, 1, kg, group, asym, ai, lda, si, b + q * pstride, pstride, oi, ostride);
    }
}

/* ---- dequantizers --------------------------------------------------------- */

void kiln_qc8w_dequant__avx2(int64_t k, const int8_t* b, const float* scales, int panels,
                             float* out) {
  for (int s = 0; s < panels; ++s) {
    __m256 s0 = _mm256_loadu_ps(scales + s * 16), s1 = _mm256_loadu_ps(scales + s * 16 + 8);
    const int8_t* bs = b + (int64_t)s * 16 * k;
    float* os = out + (int64_t)s * 16 * k;
    for (int64_t p = 0; p < k; ++p) {
      _mm256_storeu_ps(os + p * 16, _mm256_mul_ps(kiln_q8x8_avx2(bs + p * 16), s0));
      _mm256_storeu_ps(os + p * 16 + 8, _mm256_mul_ps(kiln_q8x8_avx2(bs + p * 16 + 8), s1));
    }
  }
}

void kiln_qb4w_dequant__avx2(int64_t k, int64_t kg, int group, int asym, const uint8_t* b,
                             int panels, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, asym), hdr = 64 * (1 + (asym != 0));
  const __m128i m4 = _mm_set1_epi8(15);
  /* Bytes (column c, parity r) at 2c + r -> even rows' columns, then odd's. */
  const __m128i deint = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int s = 0; s < panels; ++s)
    for (int64_t g = 0; g < kg; ++g) {
      const uint8_t* blk = b + ((int64_t)s * kg + g) * gb;
      const float* sc = (const float*)blk;
      __m256 s0 = _mm256_loadu_ps(sc), s1 = _mm256_loadu_ps(sc + 8);
      __m256 z0 = asym ? _mm256_loadu_ps(sc + 16) : _mm256_set1_ps(8.0f);
      __m256 z1 = asym ? _mm256_loadu_ps(sc + 24) : _mm256_set1_ps(8.0f);
      float* og = out + ((int64_t)s * k + g * group) * 16;
      int64_t rows = k - g * group < group ? k - g * group : group;
      for (int64_t t = 0; 2 * t < rows; ++t) {
        __m128i x = _mm_loadu_si128((const __m128i*)(blk + hdr + t * 16));
        __m128i lo = _mm_shuffle_epi8(_mm_and_si128(x, m4), deint);
        __m128i hi = _mm_shuffle_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m4), deint);
        for (int r = 0; r < 2 && 2 * t + r < rows; ++r) {
          __m128i l8 = r ? _mm_srli_si128(lo, 8) : lo, h8 = r ? _mm_srli_si128(hi, 8) : hi;
          __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(l8));
          __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h8));
          _mm256_storeu_ps(og + (2 * t + r) * 16, _mm256_mul_ps(_mm256_sub_ps(f0, z0), s0));
          _mm256_storeu_ps(og + (2 * t + r) * 16 + 8, _mm256_mul_ps(_mm256_sub_ps(f1, z1), s1));
        }
      }
    }
}
