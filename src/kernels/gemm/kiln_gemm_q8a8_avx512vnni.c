/* int8 x int8 on AVX512-VNNI: the 12x32 integer microkernel, its
 * activation quantizer and the decode GEMV (kiln_gemm_q8a8.c's and
 * kiln_gemm_q8a8_gemv.c's contracts; the rule is in kiln_gemm.h). Compiled
 * only with the avx512vnni flags (VNNI and VBMI) and called only when
 * kiln_gemm_int8_engine() says the CPU has both at the avx512 level.
 *
 * VPDPBUSD sums four products of an unsigned byte by a signed byte into
 * each int32 lane: one instruction for 64 multiply-adds, where AVX2 needs
 * VPMADDWD + VPADDD for 16. Its unsigned operand must be a register and
 * the signed one may be a 32-bit memory broadcast, so the weights are the
 * unsigned side: w + 128 (XOR 0x80 of the blob's symmetric int8 byte, in
 * [1, 255]) and each activation quad is broadcast straight from the packed
 * panel. That adds 128 * (the row's sum of quantized activations) to every
 * column of a row; the packer computes the sum and the driver subtracts it
 * (in wrapping 32-bit arithmetic: the biased sum may pass 2^31 at the
 * largest K, the true one cannot, KILN_GEMM_Q8A8_MAX_K). The results are
 * the exact integer sums, so this kernel gives the reference's bits.
 *
 * The blob's 16-column panels hold K rows of 16 bytes; VPDPBUSD wants each
 * column's four consecutive K bytes in one lane. One VPERMB (VBMI)
 * transposes a 64-byte load (4 rows x 16 columns) into that order at run
 * time, so the .kiln layout stays the one every CPU reads. Per quad of K:
 * 2 panel loads, 2 VPERMB, 2 XOR and 24 VPDPBUSD into 24 accumulators
 * (12 rows x 2 panels); the last partial quad loads with a byte mask, so
 * nothing past the panel is read. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_q8a8_quant_avx512.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

/* Byte 4j + q of the result is byte 16q + j of the load: column j's rows
 * p..p+3 side by side. */
static _Alignas(64) const int8_t kiln_q8a8_vnni_transpose[64] = {
    0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51,
    4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55,
    8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
    12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63,
};

static inline __m512i kiln_q8a8_vnni_transpose_index(void) {
  return _mm512_load_si512(kiln_q8a8_vnni_transpose);
}

static inline __m512i kiln_q8a8_vnni_a(const int8_t* a) {
  int32_t v;
  memcpy(&v, a, 4);
  return _mm512_set1_epi32(v);
}

/* NS panels (1 or 2, a constant after inlining) of one tile. */
static inline __attribute__((always_inline)) void kiln_q8a8_vnni_tile(int64_t k, const int8_t* a,
                                                                      const int8_t* b,
                                                                      int64_t b_next, int ns,
                                                                      int32_t* out) {
  const __m512i idx = kiln_q8a8_vnni_transpose_index();
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  __m512i c0[12], c1[12];
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) c0[i] = c1[i] = _mm512_setzero_si512();
  const int64_t quads = k / 4, rest = k % 4;
  for (int64_t t = 0; t <= quads; ++t) {
    __m512i b0, b1 = flip;
    if (t < quads) {
      b0 = _mm512_loadu_si512(b + 64 * t);
      if (ns == 2) b1 = _mm512_loadu_si512(b + b_next + 64 * t);
    } else {
      if (!rest) break;
      /* The last rows alone; A is zero past K, so the masked-off lanes
         (128 after the flip) multiply zeros. */
      __mmask64 m = ((__mmask64)1 << (16 * rest)) - 1;
      b0 = _mm512_maskz_loadu_epi8(m, b + 64 * t);
      if (ns == 2) b1 = _mm512_maskz_loadu_epi8(m, b + b_next + 64 * t);
    }
    b0 = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, b0), flip);
    if (ns == 2) b1 = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, b1), flip);
    const int8_t* at = a + 48 * t;
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) {
      __m512i ai = kiln_q8a8_vnni_a(at + 4 * i);
      c0[i] = _mm512_dpbusd_epi32(c0[i], b0, ai);
      if (ns == 2) c1[i] = _mm512_dpbusd_epi32(c1[i], b1, ai);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) {
    _mm512_storeu_si512(out + 16 * i, c0[i]);
    if (ns == 2) _mm512_storeu_si512(out + 192 + 16 * i, c1[i]);
  }
}

void kiln_qd8_qc8w_gemm_ukernel_12x32__avx512vnni(int64_t k, const int8_t* a, const int8_t* b,
                                                  int64_t b_next, int ns, int32_t* out) {
  if (ns == 2)
    kiln_q8a8_vnni_tile(k, a, b, b_next, 2, out);
  else
    kiln_q8a8_vnni_tile(k, a, b, 0, 1, out);
}

/* The quantizer: per row, the scale (the rule's: max of |x| and a
 * finiteness check, 16 lanes at a time), then 16 elements at a time x / s
 * (IEEE division, as the rule), rounded half to even, clamped, narrowed to
 * bytes and stored as four quads into the panel, the int32 sum beside. A
 * strided or bf16 row takes the portable packer. */
void kiln_qd8_gemm_pack_a_x4__avx512vnni(int64_t rows, int64_t rows_pad, int64_t k,
                                         const float* a, const uint16_t* a16, int64_t rs,
                                         int64_t cs, int8_t* out, float* scales, int32_t* sums) {
  if (cs != 1) {
    kiln_qd8_gemm_pack_a_x4__generic(rows, rows_pad, k, a, a16, rs, cs, out, scales, sums);
    return;
  }
  const int64_t quads = (k + 3) / 4;
  int8_t row[256]; /* a row quantized 256 values at a time (the quantizer's scale first) */
  for (int64_t i = 0; i < rows_pad; ++i) {
    int8_t* panel = out + (i / 12) * quads * 48 + (i % 12) * 4;
    if (i >= rows) {
      for (int64_t t = 0; t < quads; ++t) memset(panel + t * 48, 0, 4);
      scales[i] = 0.0f;
      sums[i] = 0;
      continue;
    }
    const float* x = a ? a + i * rs : NULL;
    const uint16_t* x16 = a16 ? a16 + i * rs : NULL;
    const float s = kiln_q8a8_row_scale_avx512(x, x16, k);
    scales[i] = s;
    int32_t sum = 0;
    for (int64_t p0 = 0; p0 < k; p0 += 256) { /* zero past k, and all of a non-finite row */
      const int64_t n = k - p0 < 256 ? k - p0 : 256, nq = (n + 3) / 4;
      sum += kiln_q8a8_row_quantize_with_avx512(x ? x + p0 : NULL, x16 ? x16 + p0 : NULL, n,
                                                (n + 15) / 16 * 16, s, row);
      for (int64_t u = 0; u < nq; ++u) memcpy(panel + (p0 / 4 + u) * 48, row + 4 * u, 4);
    }
    sums[i] = sum;
  }
}

/* ---- the decode GEMV -------------------------------------------------------
 * kiln_gemm_q8a8_gemv.c's contract plus the rows' sums (sums[i], for the
 * biased weights, as above): the same transpose and VPDPBUSD per quad of K,
 * R (<= 8) rows of A by S panels read as parallel streams, R * S <= 16
 * accumulators (one flat array: GCC keeps it in registers, where a 4 x 8
 * one spilled every step). On a Zen 4 core the AVX2 GEMV (VPMADDUBSW, the
 * sign trick, VPMADDWD, VPADDD: 4 instructions per 32 products and row) is
 * bound by its instructions from about 4 rows up; here it is 1 per 64. */

/* One quad of K (v: each panel's 64 bytes, loaded) into the sums. */
static inline __attribute__((always_inline)) void kiln_q8a8_vnni_gemv_step(
    const int R, const int S, const __m512i* v, const int8_t* a, int64_t lda, __m512i idx,
    __m512i flip, __m512i acc[16]) {
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    const __m512i w = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, v[s]), flip);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
      acc[s * R + i] = _mm512_dpbusd_epi32(acc[s * R + i], w, kiln_q8a8_vnni_a(a + i * lda));
  }
}

static inline __attribute__((always_inline)) void kiln_q8a8_vnni_gemv_tile(
    const int R, const int S, int64_t k, const int8_t* a, int64_t lda, const float* sa,
    const int32_t* sums, const int8_t* b, const float* scales, float* out, int64_t ostride) {
  const __m512i idx = kiln_q8a8_vnni_transpose_index();
  const __m512i flip = _mm512_set1_epi8((char)0x80);
  const int64_t pstride = 16 * k;
  __m512i acc[16], v[4]; /* acc[s * R + i]: R * S <= 16 */
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s)
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) acc[s * R + i] = _mm512_setzero_si512();
  const int64_t quads = k / 4, rest = k % 4;
  for (int64_t t = 0; t < quads; ++t) {
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) {
      const int8_t* w = b + s * pstride + 64 * t;
      _mm_prefetch((const char*)(w + 1024), _MM_HINT_T0);
      v[s] = _mm512_loadu_si512(w);
    }
    kiln_q8a8_vnni_gemv_step(R, S, v, a + 4 * t, lda, idx, flip, acc);
  }
  if (rest) {
    /* The last rows alone, loaded under a mask (A is zero past K). */
    const __mmask64 m = ((__mmask64)1 << (16 * rest)) - 1;
#pragma GCC unroll 4
    for (int s = 0; s < S; ++s) v[s] = _mm512_maskz_loadu_epi8(m, b + s * pstride + 64 * quads);
    kiln_q8a8_vnni_gemv_step(R, S, v, a + 4 * quads, lda, idx, flip, acc);
  }
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
    const __m512 sw = _mm512_loadu_ps(scales + 16 * s);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      /* acc - 128 * sum, wrapping; then ((float)acc * sa) * scale. */
      __m512i d = _mm512_sub_epi32(acc[s * R + i], _mm512_set1_epi32((int32_t)((uint32_t)sums[i] << 7)));
      _mm512_storeu_ps(out + s * ostride + i * 16,
                       _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(sa[i])), sw));
    }
  }
}

/* One tile call with R = m, S panels, R * S <= 16. */
#define KILN_Q8A8_VNNI_TILE(R, S)                                                        \
  kiln_q8a8_vnni_gemv_tile(R, S, k, a, lda, sa, sums, b + q * pstride, scales + 16 * q, \
                           out + q * ostride, ostride)

void kiln_qd8_qc8w_gemv__avx512vnni(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                    const float* sa, const int32_t* sums, const int8_t* b,
                                    const float* scales, int panels, float* out) {
  const int64_t ostride = m * 16, pstride = 16 * k;
  /* All rows at once; four panels as streams up to 4 rows, two beyond, the
   * last ones alone. */
  const int wide = m <= 4 ? 4 : 2;
  int q = 0;
  for (; q + wide <= panels; q += wide) switch (m) {
      case 1: KILN_Q8A8_VNNI_TILE(1, 4); break;
      case 2: KILN_Q8A8_VNNI_TILE(2, 4); break;
      case 3: KILN_Q8A8_VNNI_TILE(3, 4); break;
      case 4: KILN_Q8A8_VNNI_TILE(4, 4); break;
      case 5: KILN_Q8A8_VNNI_TILE(5, 2); break;
      case 6: KILN_Q8A8_VNNI_TILE(6, 2); break;
      case 7: KILN_Q8A8_VNNI_TILE(7, 2); break;
      default: KILN_Q8A8_VNNI_TILE(8, 2); break;
    }
  for (; q < panels; ++q) switch (m) {
      case 1: KILN_Q8A8_VNNI_TILE(1, 1); break;
      case 2: KILN_Q8A8_VNNI_TILE(2, 1); break;
      case 3: KILN_Q8A8_VNNI_TILE(3, 1); break;
      case 4: KILN_Q8A8_VNNI_TILE(4, 1); break;
      case 5: KILN_Q8A8_VNNI_TILE(5, 1); break;
      case 6: KILN_Q8A8_VNNI_TILE(6, 1); break;
      case 7: KILN_Q8A8_VNNI_TILE(7, 1); break;
      default: KILN_Q8A8_VNNI_TILE(8, 1); break;
    }
}
