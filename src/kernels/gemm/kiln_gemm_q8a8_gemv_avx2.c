/* int8 x int8 decode GEMV on AVX2 (kiln_gemm_q8a8_gemv.c's contract, the
 * rule in kiln_gemm.h). Compiled only with the AVX2 flags and called only
 * when kiln_cpu_isa() >= KILN_ISA_AVX2 (also at avx512).
 *
 * Why: the weight-only int8 GEMV (kiln_gemm_quant_avx2.c) widens every
 * weight to fp32 and spends, per 16 weights and row, 2 VPMOVSXBD, 2
 * VCVTDQ2PS and 2 FMA: with the weights in cache it is bound by those
 * instructions, not by reading them. Here 8 rows x 16 columns of a panel
 * (128 bytes) become, in registers (the blob is not repacked), four
 * vectors of column quads: each dword holds one column's weights of 4
 * rows, the layout VPMADDUBSW + VPMADDWD sum as dot products:
 *   4 loads of 32 bytes (rows 0|1, 2|3, 4|5, 6|7: one row per 128-bit
 *   lane), VPUNPCKL/HBW of (0|1, 2|3) and of (4|5, 6|7), then VPUNPCKL/HWD
 *   of those: lane 0 holds the quads of rows (0, 2, 4, 6), lane 1 of rows
 *   (1, 3, 5, 7), the same 4 columns in both;
 * 8 in-lane shuffles per 128 weights, shared by the rows of A. A first
 * version interleaved rows 0-3 into one lane with VPERMQ (lanes = column
 * halves): on Zen 3 the lane crossing cost about 1 ns per 64 weights, 1.7x
 * the whole step of this one (kernel alone, weights in L2, M = 1: 2.8
 * against 1.65-1.85 ns per 64 weights). The price is 4 int32 accumulators
 * per row and panel (the lanes are added once at the end), so tiles are
 * 1 row x 2 panels or 2 rows x 1 panel.
 * Per row of A, its 8 values are one 64-bit broadcast and a VPSHUFB into
 * the quads' order; the sign trick makes the products unsigned x signed as
 * VPMADDUBSW wants: |w| (VPABSB, shared by the rows) times sign(a, w)
 * (VPSIGNB: a negated where w < 0, zeroed where w = 0) is a * w. Then
 * VPMADDWD by ones adds a dword's two int16 pair sums into int32 and VPADDD
 * accumulates: 4 instructions per 32 products and row. Counted by
 * callgrind (1 thread, whole call): 1x2816x1024 0.87 M instructions
 * against the weight-only GEMV's 1.67 M; 4x2816x1024 2.67 M against
 * 4.44 M; 8x2816x1024 5.31 M against 8.89 M.
 *
 * No saturation: |w| <= 127 (the packer clamps to [-127, 127]; even a
 * stored -128 gives |w| = 128) and |sign(a, w)| <= 127 (the activation
 * rule clamps to [-127, 127]), so a VPMADDUBSW pair sum is at most 2 * 128
 * * 127 = 32512 < 32767 in magnitude; VPMADDWD's int32 sum of two is
 * exact, and the int32 accumulator holds K * 127 * 127 < 2^31 for K <=
 * KILN_GEMM_Q8A8_MAX_K (the path's bound, kiln_gemm_q8a8_applies). The
 * sums are exact, converted once and scaled ((float)acc * s_i) * scale_j
 * as the rule says, so the kernel gives the scalar reference's bits. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q8G_AI static inline __attribute__((always_inline))

/* Rows p..p+7 of a panel (128 bytes at w) as four vectors of column quads:
 * w[g] holds columns 4g..4g+3, lane 0 their rows (p, p+2, p+4, p+6), lane
 * 1 rows (p+1, p+3, p+5, p+7). */
KILN_Q8G_AI void kiln_q8a8_quads_avx2(const int8_t* w, __m256i q[4]) {
  const __m256i x = _mm256_loadu_si256((const __m256i*)w);        /* rows 0 | 1 */
  const __m256i y = _mm256_loadu_si256((const __m256i*)(w + 32)); /* rows 2 | 3 */
  const __m256i z = _mm256_loadu_si256((const __m256i*)(w + 64)); /* rows 4 | 5 */
  const __m256i v = _mm256_loadu_si256((const __m256i*)(w + 96)); /* rows 6 | 7 */
  const __m256i lxy = _mm256_unpacklo_epi8(x, y), lzv = _mm256_unpacklo_epi8(z, v);
  const __m256i hxy = _mm256_unpackhi_epi8(x, y), hzv = _mm256_unpackhi_epi8(z, v);
  q[0] = _mm256_unpacklo_epi16(lxy, lzv);
  q[1] = _mm256_unpackhi_epi16(lxy, lzv);
  q[2] = _mm256_unpacklo_epi16(hxy, hzv);
  q[3] = _mm256_unpackhi_epi16(hxy, hzv);
}

/* A's values p..p+7 of row a in the quads' order: every dword of lane 0
 * (a[p], a[p+2], a[p+4], a[p+6]), of lane 1 (a[p+1], a[p+3], a[p+5],
 * a[p+7]). */
KILN_Q8G_AI __m256i kiln_q8a8_a_avx2(const int8_t* a) {
  const __m256i order = _mm256_setr_epi8(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 1, 3, 5, 7,
                                         1, 3, 5, 7, 1, 3, 5, 7, 1, 3, 5, 7);
  int64_t oct;
  memcpy(&oct, a, 8);
  return _mm256_shuffle_epi8(_mm256_set1_epi64x(oct), order);
}

/* One step of 8 rows of K for R rows of A (av) and one panel (128 bytes at
 * w): acc[i][g] += the column quads' dot products with row i. */
KILN_Q8G_AI void kiln_q8a8_step_avx2(const int R, const int8_t* w, const __m256i* av,
                                     __m256i acc[2][4]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i q[4];
  kiln_q8a8_quads_avx2(w, q);
  for (int g = 0; g < 4; ++g) {
    const __m256i u = _mm256_abs_epi8(q[g]);
    for (int i = 0; i < R; ++i)
      acc[i][g] = _mm256_add_epi32(
          acc[i][g], _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(av[i], q[g])), ones));
  }
}

/* The last k % 8 rows of S panels, copied so as not to read past a panel
 * (the last panel ends the blob); A is zero past k. Out of line: the main
 * loop keeps its accumulators in registers. */
static __attribute__((noinline)) void kiln_q8a8_tail_avx2(int R, int S, int64_t k,
                                                          const int8_t* a, int64_t lda,
                                                          const int8_t* b, int64_t pstride,
                                                          __m256i acc[2][2][4]) {
  _Alignas(32) int8_t tail[128] = {0};
  const int64_t k8 = k & ~(int64_t)7;
  __m256i av[2];
  for (int i = 0; i < R; ++i) av[i] = kiln_q8a8_a_avx2(a + i * lda + k8);
  for (int s = 0; s < S; ++s) {
    memcpy(tail, b + s * pstride + 16 * k8, (size_t)(k & 7) * 16);
    if (R == 1)
      kiln_q8a8_step_avx2(1, tail, av, acc[s]);
    else
      kiln_q8a8_step_avx2(2, tail, av, acc[s]);
  }
}

/* R rows x S panels, R * S <= 2 (4 int32 accumulators each: 8 of the 16
 * ymm). */
KILN_Q8G_AI void kiln_q8a8_gemv_tile_avx2(const int R, const int S, int64_t k, const int8_t* a,
                                          int64_t lda, const float* sa, const int8_t* b,
                                          int64_t pstride, const float* scales, float* out,
                                          int64_t ostride) {
  __m256i acc[2][2][4];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int g = 0; g < 4; ++g) acc[s][i][g] = _mm256_setzero_si256();
  const int64_t k8 = k / 8;
  for (int64_t t = 0; t < k8; ++t) {
    __m256i av[2];
    for (int i = 0; i < R; ++i) av[i] = kiln_q8a8_a_avx2(a + i * lda + 8 * t);
    for (int s = 0; s < S; ++s) {
      const int8_t* w = b + s * pstride + 128 * t;
      _mm_prefetch((const char*)(w + 1024), _MM_HINT_T0);
      _mm_prefetch((const char*)(w + 1088), _MM_HINT_T0);
      kiln_q8a8_step_avx2(R, w, av, acc[s]);
    }
  }
  __m256i sums[2][2][4];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int g = 0; g < 4; ++g) sums[s][i][g] = acc[s][i][g];
  if (k & 7) kiln_q8a8_tail_avx2(R, S, k, a, lda, b, pstride, sums);
  for (int s = 0; s < S; ++s) {
    const __m256 s0 = _mm256_loadu_ps(scales + s * 16), s1 = _mm256_loadu_ps(scales + s * 16 + 8);
    for (int i = 0; i < R; ++i) {
      /* Each group's two lanes (even and odd rows) added: columns 0-7 from
       * groups 0 and 1, 8-15 from 2 and 3. */
      const __m256i* c = sums[s][i];
      const __m256i lo = _mm256_add_epi32(_mm256_permute2x128_si256(c[0], c[1], 0x20),
                                          _mm256_permute2x128_si256(c[0], c[1], 0x31));
      const __m256i hi = _mm256_add_epi32(_mm256_permute2x128_si256(c[2], c[3], 0x20),
                                          _mm256_permute2x128_si256(c[2], c[3], 0x31));
      const __m256 si = _mm256_set1_ps(sa[i]);
      _mm256_storeu_ps(out + s * ostride + i * 16,
                       _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(lo), si), s0));
      _mm256_storeu_ps(out + s * ostride + i * 16 + 8,
                       _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hi), si), s1));
    }
  }
}

void kiln_qd8_qc8w_gemv__avx2(int64_t m, int64_t k, const int8_t* a, int64_t lda, const float* sa,
                              const int8_t* b, const float* scales, int panels, float* out) {
  const int64_t ostride = m * 16, pstride = 16 * k;
  if (m == 1) {
    /* Two panels at a time: two streams. */
    int q = 0;
    for (; q + 2 <= panels; q += 2)
      kiln_q8a8_gemv_tile_avx2(1, 2, k, a, lda, sa, b + q * pstride, pstride, scales + q * 16,
                               out + q * ostride, ostride);
    if (q < panels)
      kiln_q8a8_gemv_tile_avx2(1, 1, k, a, lda, sa, b + q * pstride, pstride, scales + q * 16,
                               out + q * ostride, ostride);
    return;
  }
  /* Two rows at a time, panel by panel (later pairs find the panel in L1 /
   * L2). */
  for (int q = 0; q < panels; ++q)
    for (int64_t i = 0; i < m; i += 2) {
      const int8_t* bq = b + q * pstride;
      float* oi = out + q * ostride + i * 16;
      if (m - i >= 2)
        kiln_q8a8_gemv_tile_avx2(2, 1, k, a + i * lda, lda, sa + i, bq, pstride, scales + q * 16,
                                 oi, ostride);
      else
        kiln_q8a8_gemv_tile_avx2(1, 1, k, a + i * lda, lda, sa + i, bq, pstride, scales + q * 16,
                                 oi, ostride);
    }
}
