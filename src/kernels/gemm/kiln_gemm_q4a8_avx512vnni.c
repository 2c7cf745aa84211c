/* int4 x int8 on AVX512-VNNI: the GEMV of kiln_gemm_q4a8.c's contract (the
 * rule is in kiln_gemm.h), for decode and for prefill's slabs of 8 rows.
 * Compiled only with the avx512vnni flags (VNNI and VBMI) and called only
 * when kiln_gemm_q4a8.c finds both at the avx512 level.
 *
 * The blob's 64-byte lines hold 8 rows of a group x 16 columns: row pair u
 * in bytes 16u..16u+15, byte 2c + (r & 1) holding column c in its low
 * nibble and column c + 8 in its high one (kiln_gemm_q4_byte). v & 0x0F
 * and (v >> 4) & 0x0F are columns 0-7 and 8-15 as bytes; one VPERMT2B
 * (VBMI, two sources) per quad of rows gathers them into the order
 * VPDPBUSD reads: lane c holds column c's four rows. The nibbles (0..15)
 * are its unsigned operand, each row of A's int8 quad its signed one,
 * broadcast from memory; a group's sums are exact in int32 (at most 4096 x
 * 15 x 127). Per line and row of A: 2 VPDPBUSD, plus the decode the rows
 * share (load, shift, 2 AND, 2 VPERMT2B); AVX2 spends 8 VPMADDUBSW and 8
 * VPADDW there. Per group, the sums are converted once, the zero point's
 * term taken off and the result scaled by scale * d with one FMA, in the
 * rule's order, as the AVX2 kernel: the reference's bits. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q4A8_VNNI_AI static inline __attribute__((always_inline))

/* Sixteen header entries (scales or zero points) from entry i, fp32 or bf16. */
KILN_Q4A8_VNNI_AI __m512 kiln_q4a8_vnni_load16(const uint8_t* blk, int i, int bf16) {
  if (bf16) {
    __m256i h = _mm256_loadu_si256((const __m256i*)(blk + 2 * i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return _mm512_loadu_ps((const float*)(blk + 4 * i));
}

/* VPERMT2B's indices: byte 4c + q of quad h's operand is row r = 4h + q of
 * column c, from the low nibbles (index < 64) for c < 8, from the high
 * ones (64 +) else: (c < 8 ? 0 : 64) + (r / 2) * 16 + 2 * (c & 7) + (r & 1)
 * (kiln_gemm_q4_byte within a line); test_gemm_q4a8 checks every column
 * and row of a group against the reference. */
static _Alignas(64) const int8_t kiln_q4a8_vnni_index[2][64] = {
  {
    0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23,
    8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31,
    64, 65, 80, 81, 66, 67, 82, 83, 68, 69, 84, 85, 70, 71, 86, 87,
    72, 73, 88, 89, 74, 75, 90, 91, 76, 77, 92, 93, 78, 79, 94, 95,
  },
  {
    32, 33, 48, 49, 34, 35, 50, 51, 36, 37, 52, 53, 38, 39, 54, 55,
    40, 41, 56, 57, 42, 43, 58, 59, 44, 45, 60, 61, 46, 47, 62, 63,
    96, 97, 112, 113, 98, 99, 114, 115, 100, 101, 116, 117, 102, 103, 118, 119,
    104, 105, 120, 121, 106, 107, 122, 123, 108, 109, 124, 125, 110, 111, 126, 127,
  }};

KILN_Q4A8_VNNI_AI __m512i kiln_q4a8_vnni_quad(const int8_t* a) {
  int32_t v;
  memcpy(&v, a, 4);
  return _mm512_set1_epi32(v);
}

/* R (1..4, or 8) rows of A by one panel. Up to 2 rows, each row's sums run
 * in two chains (one per quad of a line) so that decode is not bound by
 * VPDPBUSD's latency; 3 and more rows are chains enough, and 8 rows need
 * the registers (8 sums + 8 outputs + the decode's 8). */
KILN_Q4A8_VNNI_AI void kiln_q4a8_vnni_tile(const int R, int64_t kg, int group, int form,
                                           const int8_t* restrict a, int64_t lda,
                                           const float* restrict ad, const int32_t* restrict as,
                                           const uint8_t* restrict b, float* restrict out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const __m512i idx0 = _mm512_load_si512(kiln_q4a8_vnni_index[0]);
  const __m512i idx1 = _mm512_load_si512(kiln_q4a8_vnni_index[1]);
  const __m512i m4 = _mm512_set1_epi8(15);
  const int two = R <= 2;
  __m512 o[8];
  for (int i = 0; i < R; ++i) o[i] = _mm512_setzero_ps();
  for (int64_t g = 0; g < kg; ++g) {
    const uint8_t* blk = b + g * gb;
    const uint8_t* nib = blk + hdr;
    const int8_t* ag = a + g * group;
    __m512i acc[8][2];
    for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_si512();
    for (int x = 0; x < group / 8; ++x) {
      /* The stream's lines, group headers included, KILN_GEMM_QUANT_PREFETCH ahead. */
      _mm_prefetch((const char*)(nib + 64 * x + KILN_GEMM_QUANT_PREFETCH), _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(nib + 64 * x);
      const __m512i lo = _mm512_and_si512(v, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      const __m512i q0 = _mm512_permutex2var_epi8(lo, idx0, hi);
      const __m512i q1 = _mm512_permutex2var_epi8(lo, idx1, hi);
      for (int i = 0; i < R; ++i) {
        acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], q0, kiln_q4a8_vnni_quad(ag + i * lda + 8 * x));
        acc[i][two] =
            _mm512_dpbusd_epi32(acc[i][two], q1, kiln_q4a8_vnni_quad(ag + i * lda + 8 * x + 4));
      }
    }
    /* o = fma(scale * d, dot - z * s, o), as the rule. */
    const __m512 sv = kiln_q4a8_vnni_load16(blk, 0, bf16);
    const __m512 zv = asym ? kiln_q4a8_vnni_load16(blk, 16, bf16) : _mm512_set1_ps(8.0f);
    for (int i = 0; i < R; ++i) {
      __m512i dot = two ? _mm512_add_epi32(acc[i][0], acc[i][1]) : acc[i][0];
      __m512 sum = _mm512_set1_ps((float)as[i * kg + g]);
      __m512 t = _mm512_fnmadd_ps(zv, sum, _mm512_cvtepi32_ps(dot));
      o[i] = _mm512_fmadd_ps(_mm512_mul_ps(sv, _mm512_set1_ps(ad[i * kg + g])), t, o[i]);
    }
  }
  for (int i = 0; i < R; ++i) _mm512_storeu_ps(out + i * 16, o[i]);
}

void kiln_qd8_qb4w_gemv__avx512vnni(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                                    int64_t lda, const float* ad, const int32_t* as,
                                    const uint8_t* b, int panels, float* out) {
  const int64_t pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  /* A whole slab of 8 rows in one pass over a panel, else up to four rows
   * per pass (a second pass finds the panel's lines in L1). */
  for (int s = 0; s < panels; ++s) {
    const uint8_t* bs = b + s * pstride;
    for (int64_t i = 0; i < m; i += 4) {
      const int8_t* ai = a + i * lda;
      const float* di = ad + i * kg;
      const int32_t* si = as + i * kg;
      float* oi = out + s * m * 16 + i * 16;
      if (m - i == 8) {
        kiln_q4a8_vnni_tile(8, kg, group, form, ai, lda, di, si, bs, oi);
        break;
      }
      switch (m - i >= 4 ? 4 : (int)(m - i)) {
        case 4: kiln_q4a8_vnni_tile(4, kg, group, form, ai, lda, di, si, bs, oi); break;
        case 3: kiln_q4a8_vnni_tile(3, kg, group, form, ai, lda, di, si, bs, oi); break;
        case 2: kiln_q4a8_vnni_tile(2, kg, group, form, ai, lda, di, si, bs, oi); break;
        default: kiln_q4a8_vnni_tile(1, kg, group, form, ai, lda, di, si, bs, oi); break;
      }
    }
  }
}
