/* Quantized weights on AVX-512: the small-M GEMVs. Compiled only with the
 * AVX-512 flags and called only when kiln_cpu_isa() == KILN_ISA_AVX512.
 * The same scheme as kiln_gemm_quant_avx2.c with one zmm per 16 weights:
 * unlike the fp32 GEMV, these kernels spend several instructions per
 * weight (widen, convert, FMA), so the wider vectors matter: at one row
 * the int4 GEMV is bound by those instructions, not by memory.
 *   int8: VPMOVSXBD zmm from 16 bytes (one panel row), VCVTDQ2PS, FMA.
 *   int4, 3..8 rows: VPMOVZXBD zmm from a row pair's 16 bytes, AND / shift
 *   for the two nibbles (columns 0-7 and 8-15, lanes (column, row
 *   parity)), A as a VBROADCASTSD pair; per group, scale and zero point
 *   (expanded to the lane order by VPERMPS) once; pairs folded by
 *   VPERMT2PS at the end. Registers: R rows x S panels x 2 accumulators
 *   <= 16 of the 32 zmm.
 *   int4, 1..2 rows (decode): kiln_q4_tile8_avx512, a nibble looked up
 *   by VPERMPS in place of AND and conversion. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q_AI static inline __attribute__((always_inline))

/* ---- int8 ----------------------------------------------------------------- */

KILN_Q_AI void kiln_q8_tile_avx512(const int R, const int S, int64_t k, const float* a,
                                   int64_t lda, const int8_t* b, int64_t pstride,
                                   const float* scales, float* out, int64_t ostride) {
  __m512 acc[4][8];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) acc[s][i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    if ((p & 3) == 0)
      for (int s = 0; s < S; ++s)
        _mm_prefetch((const char*)(b + s * pstride + p * 16 + KILN_GEMM_QUANT_PREFETCH),
                     _MM_HINT_T0);
    for (int s = 0; s < S; ++s) {
      __m512 w = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + s * pstride + p * 16))));
      for (int i = 0; i < R; ++i)
        acc[s][i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i * lda + p]), w, acc[s][i]);
    }
  }
  for (int s = 0; s < S; ++s) {
    __m512 sv = _mm512_loadu_ps(scales + s * 16);
    for (int i = 0; i < R; ++i)
      _mm512_storeu_ps(out + s * ostride + i * 16, _mm512_mul_ps(acc[s][i], sv));
  }
}

/* One row, one panel: the weights one stream (four panels side by side
 * restarted three cold streams every 4 x 16 K bytes: 16 KiB at K = 1024),
 * the FMA latency hidden by four sums over p mod 4 instead, and the one
 * stream prefetched as far ahead as the four were together. Zen 5, from
 * DRAM (bench_gemm_quant, GB/s, 1 / 2 threads): 1x5632x1024 29.5 / 38 ->
 * 37.5 / 49.5, 1x1024x2816 35 / 45 both ways, 1x4096x14336 40.5 / 48.5 ->
 * 37.5 / 48.6 (3 KiB ahead alone: 33.5 at one thread). */
#define KILN_Q8_ROW1_PF (4 * KILN_GEMM_QUANT_PREFETCH)
KILN_Q_AI void kiln_q8_row1_avx512(int64_t k, const float* a, const int8_t* b,
                                   const float* scales, float* out) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                   _mm512_setzero_ps()};
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {
    _mm_prefetch((const char*)(b + p * 16 + KILN_Q8_ROW1_PF), _MM_HINT_T0);
    for (int j = 0; j < 4; ++j) {
      __m512 w = _mm512_cvtepi32_ps(
          _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + (p + j) * 16))));
      acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(a[p + j]), w, acc[j]);
    }
  }
  for (; p < k; ++p) {
    __m512 w =
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(b + p * 16))));
    acc[p & 3] = _mm512_fmadd_ps(_mm512_set1_ps(a[p]), w, acc[p & 3]);
  }
  __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  _mm512_storeu_ps(out, _mm512_mul_ps(sum, _mm512_loadu_ps(scales)));
}

#define KILN_Q8_CASE(R, S)                                                              \
  case (R) * 8 + (S):                                                                   \
    kiln_q8_tile_avx512((R), (S), k, a, lda, bq, pstride, sq, oq, ostride);             \
    break;

void kiln_f32_qc8w_gemv__avx512(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                                const float* scales, int panels, float* out) {
  const int64_t pstride = 16 * k, ostride = m * 16;
  const int s_max = m <= 4 ? 4 : 2;
  if (m == 1) {
    for (int q = 0; q < panels; ++q)
      kiln_q8_row1_avx512(k, a, b + q * pstride, scales + q * 16, out + q * ostride);
    return;
  }
  for (int q = 0; q < panels;) {
    int s = panels - q < s_max ? panels - q : s_max;
    const int8_t* bq = b + q * pstride;
    const float* sq = scales + q * 16;
    float* oq = out + q * ostride;
    switch ((int)m * 8 + s) {
      KILN_Q8_CASE(1, 1) KILN_Q8_CASE(1, 2) KILN_Q8_CASE(1, 3) KILN_Q8_CASE(1, 4)
      KILN_Q8_CASE(2, 1) KILN_Q8_CASE(2, 2) KILN_Q8_CASE(2, 3) KILN_Q8_CASE(2, 4)
      KILN_Q8_CASE(3, 1) KILN_Q8_CASE(3, 2) KILN_Q8_CASE(3, 3) KILN_Q8_CASE(3, 4)
      KILN_Q8_CASE(4, 1) KILN_Q8_CASE(4, 2) KILN_Q8_CASE(4, 3) KILN_Q8_CASE(4, 4)
      KILN_Q8_CASE(5, 1) KILN_Q8_CASE(5, 2) KILN_Q8_CASE(6, 1) KILN_Q8_CASE(6, 2)
      KILN_Q8_CASE(7, 1) KILN_Q8_CASE(7, 2) KILN_Q8_CASE(8, 1) KILN_Q8_CASE(8, 2)
      default: break;
    }
    q += s;
  }
}

/* ---- int4 ----------------------------------------------------------------- */

KILN_Q_AI __m512 kiln_q_pair_avx512(const float* p) {
  double d;
  memcpy(&d, p, sizeof d);
  return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* 16 consecutive entries of a group block's header (scales at 0, zero
 * points at 16) as fp32: fp32 as stored, or bf16 widened (exact). */
KILN_Q_AI __m512 kiln_q4_header16_avx512(const uint8_t* blk, int e, int bf16) {
  if (bf16)
    return _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(blk + 2 * e))), 16));
  return _mm512_loadu_ps((const float*)blk + e);
}

KILN_Q_AI void kiln_q4_tile_avx512(const int R, const int S, int64_t kg, int group, int form,
                                   const float* a, int64_t lda, const float* asum,
                                   const uint8_t* b, int64_t pstride, float* out,
                                   int64_t ostride) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const __m512i m4 = _mm512_set1_epi32(15);
  const __m512i ilo = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m512i ihi = _mm512_setr_epi32(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
  /* Per (panel, row): columns 0-7 and 8-15 as (column, parity) lanes. */
  __m512 o[4][8][2];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) o[s][i][0] = o[s][i][1] = _mm512_setzero_ps();
  for (int64_t g = 0; g < kg; ++g) {
    __m512 acc[4][8][2];
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < R; ++i) acc[s][i][0] = acc[s][i][1] = _mm512_setzero_ps();
    const uint8_t* gbase = b + g * gb;
    const float* ag = a + g * group;
    for (int t = 0; t < group / 2; ++t) {
      if ((t & 3) == 0)
        for (int s = 0; s < S; ++s)
          _mm_prefetch((const char*)(gbase + s * pstride + hdr + t * 16 + KILN_GEMM_QUANT_PREFETCH),
                       _MM_HINT_T0);
      for (int s = 0; s < S; ++s) {
        __m512i v = _mm512_cvtepu8_epi32(
            _mm_loadu_si128((const __m128i*)(gbase + s * pstride + hdr + t * 16)));
        __m512 wl = _mm512_cvtepi32_ps(_mm512_and_si512(v, m4));
        __m512 wh = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        for (int i = 0; i < R; ++i) {
          __m512 av = kiln_q_pair_avx512(ag + i * lda + 2 * t);
          acc[s][i][0] = _mm512_fmadd_ps(av, wl, acc[s][i][0]);
          acc[s][i][1] = _mm512_fmadd_ps(av, wh, acc[s][i][1]);
        }
      }
    }
    for (int s = 0; s < S; ++s) {
      const uint8_t* sc = gbase + s * pstride; /* fp32 or bf16 scales, zero points */
      __m512 sv = kiln_q4_header16_avx512(sc, 0, bf16);
      __m512 sl = _mm512_permutexvar_ps(ilo, sv), sh = _mm512_permutexvar_ps(ihi, sv);
      __m512 zl = _mm512_set1_ps(8.0f), zh = zl;
      if (asym) {
        __m512 zv = kiln_q4_header16_avx512(sc, 16, bf16);
        zl = _mm512_permutexvar_ps(ilo, zv);
        zh = _mm512_permutexvar_ps(ihi, zv);
      }
      for (int i = 0; i < R; ++i) {
        __m512 as = kiln_q_pair_avx512(asum + (i * kg + g) * 2);
        o[s][i][0] = _mm512_fmadd_ps(sl, _mm512_fnmadd_ps(zl, as, acc[s][i][0]), o[s][i][0]);
        o[s][i][1] = _mm512_fmadd_ps(sh, _mm512_fnmadd_ps(zh, as, acc[s][i][1]), o[s][i][1]);
      }
    }
  }
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      _mm512_storeu_ps(out + s * ostride + i * 16,
                       _mm512_add_ps(_mm512_permutex2var_ps(o[s][i][0], ev, o[s][i][1]),
                                     _mm512_permutex2var_ps(o[s][i][0], od, o[s][i][1])));
}

/* One or two rows (decode at batch 1 and 2): the tile above spends 7
 * vector instructions on 32 weights (widen, AND, shift, two conversions,
 * two FMAs), enough to leave it bound by them at one thread, not by
 * memory. This one reads 8 rows of the group at once, the 64 bytes of four
 * row pairs, and converts a nibble by a table lookup that needs no mask
 * (VPERMPS reads only an index's low 4 bits): 7 shifts, 8 lookups and 8
 * FMAs per 128 weights and row, 5.75 instructions per 32.
 * Lanes: dword j of the 64 bytes is pair L = j / 4's bytes 4 (j % 4) + b,
 * b = 0..3; its nibble (b, h) at bit 8 b + 4 h is row 2 L + (b & 1) of the
 * block, column 2 (j % 4) + (b >> 1) + 8 h (the blob's byte layout). So
 * accumulator u = (b >> 1) + 2 h gathers, in lane j, column
 * kiln_q4_col(u, j % 4) over rows 2 L + {0, 1}, and A enters as two
 * vectors, lane j holding A's row 2 (j / 4) + r (r = b & 1). The four
 * partial sums of a column (L = 0..3) are added once, after the last group.
 * Symmetric groups look up nibble - 8 (exact, no zero-point term);
 * asymmetric ones the nibble, with z * (A's group sum) subtracted once per
 * column (in lanes L = 0 only). */
#define kiln_q4_col(u, m) (2 * (m) + ((u) & 1) + 8 * ((u) >> 1))

KILN_Q_AI void kiln_q4_tile8_avx512(const int R, int64_t kg, int group, int form,
                                    const float* a, int64_t lda, const float* asum,
                                    const uint8_t* b, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const __m512 table = asym ? _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
                            : _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i ia0 = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
  const __m512i ia1 = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
  __m512i iu[4];
  for (int u = 0; u < 4; ++u)
    iu[u] = _mm512_setr_epi32(kiln_q4_col(u, 0), kiln_q4_col(u, 1), kiln_q4_col(u, 2),
                              kiln_q4_col(u, 3), kiln_q4_col(u, 0), kiln_q4_col(u, 1),
                              kiln_q4_col(u, 2), kiln_q4_col(u, 3), kiln_q4_col(u, 0),
                              kiln_q4_col(u, 1), kiln_q4_col(u, 2), kiln_q4_col(u, 3),
                              kiln_q4_col(u, 0), kiln_q4_col(u, 1), kiln_q4_col(u, 2),
                              kiln_q4_col(u, 3));
  __m512 o[2][4];
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < 4; ++u) o[i][u] = _mm512_setzero_ps();
  for (int64_t g = 0; g < kg; ++g) {
    __m512 acc[2][4];
    for (int i = 0; i < R; ++i)
      for (int u = 0; u < 4; ++u) acc[i][u] = _mm512_setzero_ps();
    const uint8_t* gbase = b + g * gb + hdr;
    for (int t = 0; t < group / 8; ++t) {
      __m512 a0[2], a1[2];
      for (int i = 0; i < R; ++i) {
        __m512 a8 = _mm512_castps256_ps512(_mm256_loadu_ps(a + i * lda + g * group + 8 * t));
        a0[i] = _mm512_permutexvar_ps(ia0, a8);
        a1[i] = _mm512_permutexvar_ps(ia1, a8);
      }
      const uint8_t* src = gbase + 64 * t;
      _mm_prefetch((const char*)(src + KILN_GEMM_QUANT_PREFETCH), _MM_HINT_T0);
      __m512i v = _mm512_loadu_si512(src);
      /* One load, in a register: GCC would fold it into each shift, 8
       * 64-byte loads where the L1 serves one a cycle. */
      __asm__("" : "+v"(v));
#define KILN_Q4_NIBBLE(SHIFT, U, AV)                                                       \
  do {                                                                                     \
    __m512 w = _mm512_permutexvar_ps((SHIFT) ? _mm512_srli_epi32(v, (SHIFT)) : v, table); \
    for (int i = 0; i < R; ++i) acc[i][U] = _mm512_fmadd_ps(AV[i], w, acc[i][U]);         \
  } while (0)
      KILN_Q4_NIBBLE(0, 0, a0);  /* b 0, h 0 */
      KILN_Q4_NIBBLE(4, 2, a0);  /* b 0, h 1 */
      KILN_Q4_NIBBLE(8, 0, a1);  /* b 1, h 0 */
      KILN_Q4_NIBBLE(12, 2, a1); /* b 1, h 1 */
      KILN_Q4_NIBBLE(16, 1, a0); /* b 2, h 0 */
      KILN_Q4_NIBBLE(20, 3, a0); /* b 2, h 1 */
      KILN_Q4_NIBBLE(24, 1, a1); /* b 3, h 0 */
      KILN_Q4_NIBBLE(28, 3, a1); /* b 3, h 1 */
#undef KILN_Q4_NIBBLE
    }
    const uint8_t* sc = b + g * gb;
    const __m512 sv = kiln_q4_header16_avx512(sc, 0, bf16);
    __m512 zv = _mm512_setzero_ps();
    if (asym) zv = kiln_q4_header16_avx512(sc, 16, bf16);
    for (int u = 0; u < 4; ++u) {
      const __m512 su = _mm512_permutexvar_ps(iu[u], sv);
      const __m512 zu = _mm512_maskz_permutexvar_ps(0x000F, iu[u], zv);
      for (int i = 0; i < R; ++i) {
        __m512 x = acc[i][u];
        if (asym) {
          const float* as = asum + (i * kg + g) * 2;
          x = _mm512_fnmadd_ps(zu, _mm512_set1_ps(as[0] + as[1]), x);
        }
        o[i][u] = _mm512_fmadd_ps(su, x, o[i][u]);
      }
    }
  }
  /* Per accumulator, the sum of its four 128-bit quarters (L = 0..3), then
   * columns interleaved back: u 0 / 1 hold the even / odd of 0-7, u 2 / 3
   * those of 8-15. */
  for (int i = 0; i < R; ++i) {
    __m128 q[4];
    for (int u = 0; u < 4; ++u) {
      __m512 x = o[i][u];
      __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x),
                               _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
      q[u] = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    }
    float* dst = out + i * 16;
    _mm_storeu_ps(dst, _mm_unpacklo_ps(q[0], q[1]));
    _mm_storeu_ps(dst + 4, _mm_unpackhi_ps(q[0], q[1]));
    _mm_storeu_ps(dst + 8, _mm_unpacklo_ps(q[2], q[3]));
    _mm_storeu_ps(dst + 12, _mm_unpackhi_ps(q[2], q[3]));
  }
}

#define KILN_Q4_CASE(R, S)                                                                 \
  case (R) * 8 + (S):                                                                      \
    kiln_q4_tile_avx512((R), (S), kg, group, form, a, lda, asum, bq, pstride, oq, ostride); \
    break;

void kiln_f32_qb4w_gemv__avx512(int64_t m, int64_t kg, int group, int form, const float* a,
                                int64_t lda, const float* asum, const uint8_t* b, int panels,
                                float* out) {
  const int64_t ostride = m * 16, pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  /* R * S <= 6: 2 group and 2 running accumulators each, within 32 zmm. */
  const int s_max = m == 3 ? 2 : 1;
  if (m > 6) {
    /* 7..8 rows: rows 0-3 and then the rest, panel by panel (the second
     * pass finds the panel in L2). */
    for (int q = 0; q < panels; ++q) {
      kiln_f32_qb4w_gemv__avx512(4, kg, group, form, a, lda, asum, b + q * pstride, 1,
                               out + q * ostride);
      _Alignas(64) float tmp[4 * 16];
      kiln_f32_qb4w_gemv__avx512(m - 4, kg, group, form, a + 4 * lda, lda, asum + 4 * kg * 2,
                               b + q * pstride, 1, tmp);
      memcpy(out + q * ostride + 4 * 16, tmp, (size_t)(m - 4) * 16 * sizeof(float));
    }
    return;
  }
  if (m <= 2) {
    /* kiln_q4_tile8_avx512, one panel at a time: the weights one stream in
     * memory order. Three panels at once (the A permutes shared) ran as
     * fast on weights in L2 but 1.3x slower from DRAM at K = 1024 (10 KiB
     * panels: two of three streams restart cold at every step). */
    for (int q = 0; q < panels; ++q) {
      if (m == 1)
        kiln_q4_tile8_avx512(1, kg, group, form, a, lda, asum, b + q * pstride, out + q * ostride);
      else
        kiln_q4_tile8_avx512(2, kg, group, form, a, lda, asum, b + q * pstride, out + q * ostride);
    }
    return;
  }
  for (int q = 0; q < panels;) {
    int s = panels - q < s_max ? panels - q : s_max;
    const uint8_t* bq = b + q * pstride;
    float* oq = out + q * ostride;
    switch ((int)m * 8 + s) {
      KILN_Q4_CASE(3, 1) KILN_Q4_CASE(3, 2)
      KILN_Q4_CASE(4, 1) KILN_Q4_CASE(5, 1) KILN_Q4_CASE(6, 1)
      default: break;
    }
    q += s;
  }
}
