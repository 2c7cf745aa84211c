/* Quantized weights on AVX2 + FMA: the small-M GEMVs (int8, int4) and the
 * dequantizers of the blocked path. Compiled only with the AVX2 flags and
 * called only when kiln_cpu_isa() >= KILN_ISA_AVX2. Layouts and the
 * kernels' contracts: kiln_gemm.h, kiln_gemm_quant_internal.h.
 *
 * int8: VPMOVSXBD widens 8 weights straight from memory, VCVTDQ2PS makes
 * them fp32 (exact), the FMAs sum; the column scales multiply once at the
 * end. Like the fp32 GEMV (kiln_gemm_gemv_avx2.h) it reads several panels
 * side by side (parallel streams) with a software prefetch
 * KILN_GEMM_QUANT_PREFETCH bytes ahead.
 * int4: a row pair of a panel is 16 bytes, broadcast to both halves of a
 * ymm; four ANDs (one shift) leave each weight vector's nibbles in place,
 * at a power of 2 that VCVTDQ2PS keeps exactly, and the lane factors come
 * out once per group (zero point) and once per call (the sums). Per 32
 * weights that is 1 load, 1 shift, 4 AND, 4 VCVTDQ2PS and 4 FMA, against
 * 2 VPMOVZXBD (2 uops each on Zen 3, on the shuffle pipes), 2 AND, 2 shifts,
 * 4 VCVTDQ2PS and 4 FMA when the nibbles were widened byte by byte: about
 * 15% faster with the weights in cache (Zen 3). Lanes hold columns of one
 * row (A a broadcast scalar), so scales and zero points need one VPERMPS
 * per 8 columns; zero points apply once per group through A's group sums. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_gemv_avx2.h"
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
      for (int s = 0; s < S; ++s)
        _mm_prefetch((const char*)(b + s * pstride + p * 16 + KILN_GEMM_QUANT_PREFETCH),
                     _MM_HINT_T0);
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

/* One row, one panel, as kiln_gemm_quant_avx512.c's kiln_q8_row1_avx512:
 * the weights one stream, prefetched as far ahead as four streams were,
 * four sums (p mod 2 x two halves) for the FMA latency. */
KILN_Q_AI void kiln_q8_row1_avx2(int64_t k, const float* a, const int8_t* b,
                                 const float* scales, float* out) {
  __m256 acc[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()},
                      {_mm256_setzero_ps(), _mm256_setzero_ps()}};
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {
    _mm_prefetch((const char*)(b + p * 16 + 4 * KILN_GEMM_QUANT_PREFETCH), _MM_HINT_T0);
    for (int j = 0; j < 4; ++j) {
      const __m256 av = _mm256_broadcast_ss(a + p + j);
      acc[j & 1][0] = _mm256_fmadd_ps(av, kiln_q8x8_avx2(b + (p + j) * 16), acc[j & 1][0]);
      acc[j & 1][1] = _mm256_fmadd_ps(av, kiln_q8x8_avx2(b + (p + j) * 16 + 8), acc[j & 1][1]);
    }
  }
  for (; p < k; ++p) {
    const __m256 av = _mm256_broadcast_ss(a + p);
    acc[p & 1][0] = _mm256_fmadd_ps(av, kiln_q8x8_avx2(b + p * 16), acc[p & 1][0]);
    acc[p & 1][1] = _mm256_fmadd_ps(av, kiln_q8x8_avx2(b + p * 16 + 8), acc[p & 1][1]);
  }
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_add_ps(acc[0][0], acc[1][0]), _mm256_loadu_ps(scales)));
  _mm256_storeu_ps(out + 8,
                   _mm256_mul_ps(_mm256_add_ps(acc[0][1], acc[1][1]), _mm256_loadu_ps(scales + 8)));
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
  if (m == 1) {
    for (int q = 0; q < panels; ++q)
      kiln_q8_row1_avx2(k, a, b + q * 16 * k, scales + q * 16, out + q * ostride);
    return;
  }
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

/* The nibble masks of the four weight vectors made from one row pair's 16
 * bytes broadcast to both 128-bit lanes (lanes 0-3 read dwords 0-3, lanes
 * 4-7 the same dwords again): dword d holds bytes 4d..4d+3, i.e. columns
 * 2d, 2d + 1 (low nibbles) and 2d + 8, 2d + 9 (high ones) of rows
 * (even, odd, even, odd); lanes 0-3 take column 2d's nibble, lanes 4-7
 * column 2d + 1's. With v the bytes and v8 = v >> 8:
 *   w0 = v & M0: even row, columns (0 2 4 6 1 3 5 7) at 2^0 | 2^16;
 *   w1 = v & M1: even row, columns 8 + (0 2 4 6 1 3 5 7) at 2^4 | 2^20;
 *   w2 = v8 & M0: odd row, as w0 (same factors); w3 = v8 & M1: odd, as w1;
 * each converted exactly by VCVTDQ2PS (a nibble times a power of 2 is a
 * float; no mask reaches bit 31, so no sign). Per lane, the sums are the
 * columns' sums times a known power of 2 (at most 2^20: they overflow only
 * past 1e32), which the group epilogue and the final store take out. */
KILN_Q_AI __m256i kiln_q4_mask_avx2(int hi) {
  return _mm256_setr_epi32(15 << (4 * hi), 15 << (4 * hi), 15 << (4 * hi), 15 << (4 * hi),
                           15 << (16 + 4 * hi), 15 << (16 + 4 * hi), 15 << (16 + 4 * hi),
                           15 << (16 + 4 * hi));
}

/* Per lane, the factor of w0 / w2 (hi 0) or w1 / w3 (hi 1). */
KILN_Q_AI __m256 kiln_q4_factor_avx2(int hi, int inverse) {
  float lo = hi ? 16.0f : 1.0f, up = hi ? 1048576.0f : 65536.0f;
  if (inverse) lo = 1.0f / lo, up = 1.0f / up;
  return _mm256_setr_ps(lo, lo, lo, lo, up, up, up, up);
}

/* R rows x one panel; P = 2 keeps even and odd rows in separate
 * accumulators (more independent FMA chains when R is small). One panel at
 * a time keeps the weights one stream in memory order: two panels at once
 * (one row, sharing A's broadcasts) ran 1.25x slower on weights from DRAM
 * at K = 1024 (Zen 5 at KILN_ISA=avx2: two streams restarting cold every
 * 10 KiB), as fast at K = 4096 and on weights in cache. */
KILN_Q_AI void kiln_q4_tile_avx2(const int R, const int P, int64_t kg, int group, int form,
                                 const float* a, int64_t lda, const float* asum,
                                 const uint8_t* b, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const __m256i m0 = kiln_q4_mask_avx2(0), m1 = kiln_q4_mask_avx2(1);
  /* Lane l of a weight vector holds column cols[l] (of its half). */
  const __m256i cols = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  __m256 o[4][2];
  for (int i = 0; i < R; ++i) o[i][0] = o[i][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < kg; ++g) {
    __m256 acc[4][2][2];
    for (int i = 0; i < R; ++i)
      for (int h = 0; h < 2; ++h) acc[i][h][0] = acc[i][h][1] = _mm256_setzero_ps();
    const uint8_t* gbase = b + g * gb;
    const float* ag = a + g * group;
    /* Two row pairs (32 bytes) a step, so that each 64-byte line of the
     * stream, group headers included, gets one prefetch
     * KILN_GEMM_QUANT_PREFETCH bytes ahead without a branch (groups are
     * multiples of 32 rows). */
    for (int t = 0; t < group / 2; t += 2) {
      _mm_prefetch((const char*)(gbase + hdr + t * 16 + KILN_GEMM_QUANT_PREFETCH), _MM_HINT_T0);
      for (int u = t; u < t + 2; ++u) {
        const __m256i v =
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(gbase + hdr + u * 16)));
        const __m256i v8 = _mm256_srli_epi32(v, 8);
        const __m256 w0 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m0));
        const __m256 w1 = _mm256_cvtepi32_ps(_mm256_and_si256(v, m1));
        const __m256 w2 = _mm256_cvtepi32_ps(_mm256_and_si256(v8, m0));
        const __m256 w3 = _mm256_cvtepi32_ps(_mm256_and_si256(v8, m1));
        for (int i = 0; i < R; ++i) {
          const __m256 ae = _mm256_broadcast_ss(ag + i * lda + 2 * u);
          const __m256 ao = _mm256_broadcast_ss(ag + i * lda + 2 * u + 1);
          acc[i][0][0] = _mm256_fmadd_ps(ae, w0, acc[i][0][0]);
          acc[i][1][0] = _mm256_fmadd_ps(ae, w1, acc[i][1][0]);
          acc[i][0][P - 1] = _mm256_fmadd_ps(ao, w2, acc[i][0][P - 1]);
          acc[i][1][P - 1] = _mm256_fmadd_ps(ao, w3, acc[i][1][P - 1]);
        }
      }
    }
    /* o += scale * (sum - z * (A's group sum)), in the lanes' units: the
     * zero point is scaled by the lane factors, the result unscaled at the
     * end. */
    const uint8_t* sc = gbase; /* fp32 or bf16 scales, zero points */
    for (int h = 0; h < 2; ++h) {
      const __m256 sv = _mm256_permutevar8x32_ps(kiln_gemv_load8_avx2(sc, 8 * h, bf16), cols);
      const __m256 zv =
          asym ? _mm256_mul_ps(_mm256_permutevar8x32_ps(kiln_gemv_load8_avx2(sc, 16 + 8 * h, bf16), cols),
                               kiln_q4_factor_avx2(h, 0))
               : _mm256_mul_ps(_mm256_set1_ps(8.0f), kiln_q4_factor_avx2(h, 0));
      for (int i = 0; i < R; ++i) {
        const float* as = asum + (i * kg + g) * 2;
        __m256 sum = P == 2 ? _mm256_add_ps(acc[i][h][0], acc[i][h][1]) : acc[i][h][0];
        sum = _mm256_fnmadd_ps(zv, _mm256_set1_ps(as[0] + as[1]), sum);
        o[i][h] = _mm256_fmadd_ps(sv, sum, o[i][h]);
      }
    }
  }
  /* Lanes back to column order: column c sits in lane back[c]. */
  const __m256i back = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h)
      _mm256_storeu_ps(out + i * 16 + 8 * h,
                       _mm256_permutevar8x32_ps(_mm256_mul_ps(o[i][h], kiln_q4_factor_avx2(h, 1)), back));
}

void kiln_f32_qb4w_gemv__avx2(int64_t m, int64_t kg, int group, int form, const float* a,
                              int64_t lda, const float* asum, const uint8_t* b, int panels,
                              float* out) {
  const int64_t ostride = m * 16, pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  if (m == 1) {
    for (int q = 0; q < panels; ++q)
      kiln_q4_tile_avx2(1, 2, kg, group, form, a, lda, asum, b + q * pstride, out + q * ostride);
    return;
  }
  /* Up to 4 rows at a time, panel by panel (rows past 4 find the panel in
   * L1 / L2). */
  for (int q = 0; q < panels; ++q)
    for (int64_t i = 0; i < m; i += 4) {
      const float* ai = a + i * lda;
      const float* si = asum + i * kg * 2;
      const uint8_t* bq = b + q * pstride;
      float* oi = out + q * ostride + i * 16;
      switch (m - i >= 4 ? 4 : (int)(m - i)) {
        case 1: kiln_q4_tile_avx2(1, 2, kg, group, form, ai, lda, si, bq, oi); break;
        case 2: kiln_q4_tile_avx2(2, 2, kg, group, form, ai, lda, si, bq, oi); break;
        case 3: kiln_q4_tile_avx2(3, 1, kg, group, form, ai, lda, si, bq, oi); break;
        default: kiln_q4_tile_avx2(4, 1, kg, group, form, ai, lda, si, bq, oi); break;
      }
    }
}

/* ---- dequantizers --------------------------------------------------------- */

void kiln_qc8w_dequant__avx2(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                             const float* scales, int panels, float* out) {
  for (int s = 0; s < panels; ++s) {
    __m256 s0 = _mm256_loadu_ps(scales + s * 16), s1 = _mm256_loadu_ps(scales + s * 16 + 8);
    const int8_t* bs = b + ((int64_t)s * k + p0) * 16;
    float* os = out + (int64_t)s * 16 * kc;
    for (int64_t p = 0; p < kc; ++p) {
      _mm256_storeu_ps(os + p * 16, _mm256_mul_ps(kiln_q8x8_avx2(bs + p * 16), s0));
      _mm256_storeu_ps(os + p * 16 + 8, _mm256_mul_ps(kiln_q8x8_avx2(bs + p * 16 + 8), s1));
    }
  }
}

/* Rows [p0, p0 + kc) may start and end inside a group and on an odd row:
 * the groups at the ends are walked by whole row pairs (one 16-byte load
 * each) and the rows outside the range skipped. */
void kiln_qb4w_dequant__avx2(int64_t kg, int group, int form, int64_t p0, int64_t kc,
                             const uint8_t* b, int panels, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const __m128i m4 = _mm_set1_epi8(15);
  /* Bytes (column c, parity r) at 2c + r -> even rows' columns, then odd's. */
  const __m128i deint = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const int64_t p1 = p0 + kc;
  for (int s = 0; s < panels; ++s)
    for (int64_t g = p0 / group; g * group < p1; ++g) {
      const uint8_t* blk = b + ((int64_t)s * kg + g) * gb;
      __m256 s0 = kiln_gemv_load8_avx2(blk, 0, bf16), s1 = kiln_gemv_load8_avx2(blk, 8, bf16);
      __m256 z0 = asym ? kiln_gemv_load8_avx2(blk, 16, bf16) : _mm256_set1_ps(8.0f);
      __m256 z1 = asym ? kiln_gemv_load8_avx2(blk, 24, bf16) : _mm256_set1_ps(8.0f);
      /* Rows [lo, hi) of this group, written at og + (row - lo) * 16. */
      const int64_t base = g * group;
      const int64_t lo = p0 > base ? p0 - base : 0, hi = p1 - base < group ? p1 - base : group;
      float* og = out + ((int64_t)s * kc + base + lo - p0) * 16;
      for (int64_t t = lo / 2; 2 * t < hi; ++t) {
        __m128i x = _mm_loadu_si128((const __m128i*)(blk + hdr + t * 16));
        __m128i l = _mm_shuffle_epi8(_mm_and_si128(x, m4), deint);
        __m128i h = _mm_shuffle_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), m4), deint);
        for (int r = 0; r < 2; ++r) {
          const int64_t row = 2 * t + r;
          if (row < lo || row >= hi) continue;
          __m128i l8 = r ? _mm_srli_si128(l, 8) : l, h8 = r ? _mm_srli_si128(h, 8) : h;
          __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(l8));
          __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h8));
          _mm256_storeu_ps(og + (row - lo) * 16, _mm256_mul_ps(_mm256_sub_ps(f0, z0), s0));
          _mm256_storeu_ps(og + (row - lo) * 16 + 8, _mm256_mul_ps(_mm256_sub_ps(f1, z1), s1));
        }
      }
    }
}
