/* int4 x int8 on AVX2: the decode GEMV and the activations' group quantizer
 * (kiln_gemm_q4a8.c's contracts; the rule is in kiln_gemm.h). Compiled
 * only with the AVX2 flags and called only when kiln_cpu_isa() >=
 * KILN_ISA_AVX2 (also at avx512: the GEMV is bound by reading weights).
 *
 * The blob already pairs K rows per byte: byte l of a row pair's 16 bytes
 * holds rows 2t + (l & 1), column l >> 1 in the low nibble and column
 * (l >> 1) + 8 in the high one. One 32-byte load takes two row pairs (t in
 * lane 0, t + 1 in lane 1); v & 0x0F is then columns 0-7 and (v >> 4) &
 * 0x0F columns 8-15, each column as its (row 2t, row 2t + 1) byte pair:
 * exactly what VPMADDUBSW multiplies (unsigned nibbles) against A's int8
 * pairs (q[2t], q[2t + 1]) in lane 0 and (q[2t + 2], q[2t + 3]) in lane 1
 * (one VPBROADCASTD + VPSHUFB per row, shared by the panels), giving int16
 * column sums; the two lanes are added when widened. Per 64 weights and row
 * of A: 2 VPMADDUBSW + 2 VPADDW, plus the decode shared by the rows (load,
 * VPSRLW, 2 VPAND); the fp32 kernel (kiln_gemm_quant_avx2.c) spends 8 AND,
 * 8 VCVTDQ2PS and 8 FMA there. Counted by callgrind for 1x2816x1024 (M x
 * N x K, g32): 0.65 M instructions per call against 1.99 M (g128: 0.63 M
 * against 1.87 M).
 *
 * No int16 overflow: a pair sum is at most 15 * 127 * 2 = 3810 in
 * magnitude (VPMADDUBSW's own saturation is never reached), and each lane
 * of an int16 accumulator takes 8 pairs, at most 8 * 3810 = 30480 < 32767,
 * before it is widened (VPMOVSXWD) into int32 group sums. Per group, the
 * sums are converted once (exact below 2^24), the zero point's term z *
 * s_ig taken off (exact), and the result scaled by scale * d with one FMA,
 * in the rule's order, so the kernel gives the scalar reference's bits. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_gemv_avx2.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q4A8_AI static inline __attribute__((always_inline))

/* Pins v in a register at this point of the sequence (an empty asm the
 * compiler cannot see through, so it cannot regroup the sums around it). */
KILN_Q4A8_AI void kiln_q4a8_keep(__m256i* v) { __asm__("" : "+x"(*v)); }

/* Pairs per lane of an int16 accumulator (see the bound above). */
#define KILN_Q4A8_CHUNK 8

/* R <= 2 rows x S <= 2 panels; ONE when a group is one chunk (G = 32, the
 * default: its int32 sums then need no registers across chunks). Each step
 * reads two row pairs (t, t + 1: 32 bytes) of a panel in one load: lane 0 holds pair t, lane 1 pair t + 1, so v &
 * 0x0F is columns 0-7 and (v >> 4) & 0x0F columns 8-15, both as (row 2t',
 * row 2t' + 1) byte pairs, and A's operand holds (q[2t], q[2t + 1]) in lane
 * 0 and (q[2t + 2], q[2t + 3]) in lane 1. The two lanes of an int16
 * accumulator are added when it is widened. */
KILN_Q4A8_AI void kiln_q4a8_tile_avx2(const int R, const int S, const int ONE, int64_t kg,
                                      int group, int form,
                                      const int8_t* restrict a, int64_t lda,
                                      const float* restrict ad, const int32_t* restrict as,
                                      const uint8_t* restrict b, int64_t pstride,
                                      float* restrict out, int64_t ostride) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const __m256i m4 = _mm256_set1_epi8(15);
  /* Lane 0: bytes 0, 1 of the dword repeated; lane 1: bytes 2, 3. */
  const __m256i pairs = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3,
                                         2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  __m256 o[2][2][2];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) o[s][i][0] = o[s][i][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < kg; ++g) {
    const uint8_t* gbase = b + g * gb;
    __m256i acc32[2][2][2];
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < R; ++i) acc32[s][i][0] = acc32[s][i][1] = _mm256_setzero_si256();
    const int chunks = ONE ? 1 : group / (4 * KILN_Q4A8_CHUNK);
    for (int ch = 0; ch < chunks; ++ch) {
      const int t0 = ch * 2 * KILN_Q4A8_CHUNK;
      const uint8_t* bt = gbase + hdr + t0 * 16;
      const int8_t* at = a + g * group + 2 * t0;
      __m256i acc16[2][2][2];
      for (int s = 0; s < S; ++s)
        for (int i = 0; i < R; ++i) acc16[s][i][0] = acc16[s][i][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int t = 0; t < 2 * KILN_Q4A8_CHUNK; t += 2) {
        /* Each 64-byte line of the stream, group headers included, gets a
         * prefetch KILN_GEMM_QUANT_PREFETCH bytes ahead. */
        if ((t & 2) == 0)
          for (int s = 0; s < S; ++s)
            _mm_prefetch((const char*)(bt + s * pstride + t * 16 + KILN_GEMM_QUANT_PREFETCH),
                         _MM_HINT_T0);
        __m256i av[2];
        for (int i = 0; i < R; ++i) {
          int32_t quad;
          memcpy(&quad, at + i * lda + 2 * t, 4);
          av[i] = _mm256_shuffle_epi8(_mm256_set1_epi32(quad), pairs);
        }
        for (int s = 0; s < S; ++s) {
          const __m256i v = _mm256_loadu_si256((const __m256i*)(bt + s * pstride + t * 16));
          const __m256i w0 = _mm256_and_si256(v, m4);
          const __m256i w1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          for (int i = 0; i < R; ++i) {
            acc16[s][i][0] = _mm256_add_epi16(acc16[s][i][0], _mm256_maddubs_epi16(w0, av[i]));
            acc16[s][i][1] = _mm256_add_epi16(acc16[s][i][1], _mm256_maddubs_epi16(w1, av[i]));
            /* An empty asm the accumulators pass through: without it GCC
             * reassociates the fully unrolled int16 sums into a tree
             * (integer adds may be regrouped) and spills the products
             * to the stack, ~12 % more instructions per call (callgrind,
             * 1x2816x1024 g32: 0.68 M -> 0.60 M). The sums are the same. */
            kiln_q4a8_keep(&acc16[s][i][0]), kiln_q4a8_keep(&acc16[s][i][1]);
          }
        }
      }
      for (int s = 0; s < S; ++s)
        for (int i = 0; i < R; ++i)
          for (int h = 0; h < 2; ++h)
            acc32[s][i][h] = _mm256_add_epi32(
                acc32[s][i][h],
                _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(acc16[s][i][h])),
                                 _mm256_cvtepi16_epi32(_mm256_extracti128_si256(acc16[s][i][h], 1))));
    }
    /* o = fma(scale * d, dot - z * s, o), columns in order. */
    __m256 dv[2], sumv[2];
    for (int i = 0; i < R; ++i) {
      dv[i] = _mm256_set1_ps(ad[i * kg + g]);
      sumv[i] = _mm256_set1_ps((float)as[i * kg + g]);
    }
    for (int s = 0; s < S; ++s) {
      const uint8_t* sc = gbase + s * pstride; /* fp32 or bf16 scales, zero points */
      for (int h = 0; h < 2; ++h) {
        const __m256 sv = kiln_gemv_load8_avx2(sc, 8 * h, bf16);
        const __m256 zv = asym ? kiln_gemv_load8_avx2(sc, 16 + 8 * h, bf16) : _mm256_set1_ps(8.0f);
        for (int i = 0; i < R; ++i) {
          const __m256 acc = _mm256_fnmadd_ps(zv, sumv[i], _mm256_cvtepi32_ps(acc32[s][i][h]));
          o[s][i][h] = _mm256_fmadd_ps(_mm256_mul_ps(sv, dv[i]), acc, o[s][i][h]);
        }
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      _mm256_storeu_ps(out + s * ostride + i * 16, o[s][i][0]);
      _mm256_storeu_ps(out + s * ostride + i * 16 + 8, o[s][i][1]);
    }
}

/* One tile call, its ONE chosen at run time. */
#define KILN_Q4A8_TILE(R, S, ...)                                          \
  (group == 4 * KILN_Q4A8_CHUNK ? kiln_q4a8_tile_avx2(R, S, 1, __VA_ARGS__) \
                                : kiln_q4a8_tile_avx2(R, S, 0, __VA_ARGS__))

void kiln_qd8_qb4w_gemv__avx2(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                              int64_t lda, const float* ad, const int32_t* as, const uint8_t* b,
                              int panels, float* out) {
  const int64_t ostride = m * 16, pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  /* Two panels by up to two rows at a time (more spill the 16 ymm; rows
   * past 2 find the panels in L1 / L2). Counted by callgrind at M = 4
   * (4x2816x1024, g32): 2.21 M instructions per call, against 2.31 M for
   * 4 rows x 1 panel and 2.43 M for 2 rows x 1 panel. */
  for (int q = 0; q < panels; q += 2) {
    const int two = q + 2 <= panels;
    const uint8_t* bq = b + q * pstride;
    for (int64_t i = 0; i < m; i += 2) {
      const int8_t* ai = a + i * lda;
      const float* di = ad + i * kg;
      const int32_t* si = as + i * kg;
      float* oi = out + q * ostride + i * 16;
      if (m - i >= 2 && two)
        KILN_Q4A8_TILE(2, 2, kg, group, form, ai, lda, di, si, bq, pstride, oi, ostride);
      else if (m - i >= 2)
        KILN_Q4A8_TILE(2, 1, kg, group, form, ai, lda, di, si, bq, pstride, oi, ostride);
      else if (two)
        KILN_Q4A8_TILE(1, 2, kg, group, form, ai, lda, di, si, bq, pstride, oi, ostride);
      else
        KILN_Q4A8_TILE(1, 1, kg, group, form, ai, lda, di, si, bq, pstride, oi, ostride);
    }
  }
}

/* The quantizer: per whole group, the scale (max |x| and a finiteness
 * check, 8 lanes at a time), then x / d (IEEE division, as the rule),
 * rounded half to even, clamped, packed to int8 and summed. A partial last
 * group takes the scalar rule. */
void kiln_qd8_quantize_groups__avx2(int64_t k, int64_t kg, int group, const float* a, int8_t* q,
                                    float* d, int32_t* s) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
  const __m256 big = _mm256_set1_ps(INFINITY);
  for (int64_t g = 0; g < kg; ++g) {
    const int64_t p0 = g * group;
    if (k - p0 < group) {
      kiln_qd8_quantize_groups__generic(k - p0, 1, group, a + p0, q + p0, d + g, s + g);
      continue;
    }
    const float* x = a + p0;
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int p = 0; p < group; p += 8) {
      __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + p), absmask);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, big, _CMP_NLT_UQ)); /* inf or NaN */
      mx = _mm256_max_ps(mx, v);
    }
    __m128 m2 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m2 = _mm_max_ps(m2, _mm_movehl_ps(m2, m2));
    m2 = _mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1));
    float dg = _mm_cvtss_f32(m2) / 127.0f;
    if (dg == 0.0f) dg = 1.0f;
    if (_mm256_movemask_ps(bad)) {
      memset(q + p0, 0, (size_t)group);
      d[g] = NAN;
      s[g] = 0;
      continue;
    }
    const __m256 dv = _mm256_set1_ps(dg);
    __m256i sum = _mm256_setzero_si256();
    for (int p = 0; p < group; p += 8) {
      __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + p), dv),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m256i q32 = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, nlim), lim));
      sum = _mm256_add_epi32(sum, q32);
      __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
      _mm_storel_epi64((__m128i*)(q + p0 + p), _mm_packs_epi16(q16, q16));
    }
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    d[g] = dg;
    s[g] = _mm_cvtsi128_si32(s4);
  }
}
