/* int8 x int8 on AVX512-VNNI: the 12x32 integer microkernel and its
 * activation quantizer (kiln_gemm_q8a8.c's contracts; the rule is in
 * kiln_gemm.h). Compiled only with the avx512vnni flags (VNNI and VBMI)
 * and called only when kiln_gemm_q8a8.c's kiln_q8a8_vnni() says the CPU
 * has both at the avx512 level.
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
#include "kernels/gemm/kiln_gemm_quant_internal.h"

/* Byte 4j + q of the result is byte 16q + j of the load: column j's rows
 * p..p+3 side by side. */
static inline __m512i kiln_q8a8_vnni_transpose_index(void) {
  _Alignas(64) int8_t idx[64];
  for (int j = 0; j < 16; ++j)
    for (int q = 0; q < 4; ++q) idx[4 * j + q] = (int8_t)(16 * q + j);
  return _mm512_load_si512(idx);
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
  if (a16 || cs != 1) {
    kiln_qd8_gemm_pack_a_x4__generic(rows, rows_pad, k, a, a16, rs, cs, out, scales, sums);
    return;
  }
  const int64_t quads = (k + 3) / 4;
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
  const __m512 big = _mm512_set1_ps(INFINITY);
  for (int64_t i = 0; i < rows_pad; ++i) {
    int8_t* panel = out + (i / 12) * quads * 48 + (i % 12) * 4;
    if (i >= rows) {
      for (int64_t t = 0; t < quads; ++t) memset(panel + t * 48, 0, 4);
      scales[i] = 0.0f;
      sums[i] = 0;
      continue;
    }
    const float* x = a + i * rs;
    __m512 mx = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int64_t p = 0; p < k; p += 16) {
      __mmask16 m = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1);
      __m512 v = _mm512_and_ps(_mm512_maskz_loadu_ps(m, x + p), absmask);
      bad |= _mm512_cmp_ps_mask(v, big, _CMP_NLT_UQ); /* inf or NaN */
      mx = _mm512_max_ps(mx, v);
    }
    float s = _mm512_reduce_max_ps(mx) / 127.0f;
    s = bad ? NAN : s == 0.0f ? 1.0f : s;
    scales[i] = s;
    if (bad) {
      for (int64_t t = 0; t < quads; ++t) memset(panel + t * 48, 0, 4);
      sums[i] = 0;
      continue;
    }
    const __m512 sv = _mm512_set1_ps(s);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t p = 0; p < k; p += 16) {
      __mmask16 m = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1);
      __m512 r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(m, x + p), sv),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, nlim), lim));
      sum = _mm512_add_epi32(sum, q);
      int32_t four[4];
      _mm_storeu_si128((__m128i*)four, _mm512_cvtepi32_epi8(q));
      /* Lanes past K are zero (masked loads): the last quad's padding. */
      int64_t n = quads - p / 4 < 4 ? quads - p / 4 : 4;
      for (int64_t u = 0; u < n; ++u) memcpy(panel + (p / 4 + u) * 48, &four[u], 4);
    }
    sums[i] = _mm512_reduce_add_epi32(sum);
  }
}
