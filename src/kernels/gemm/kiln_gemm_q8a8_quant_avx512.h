/* The int8 x int8 rule's activation quantizer (kiln_gemm.h, beside
 * KILN_GEMM_QUANT_A8) for one row on AVX-512: bit for bit the scalar
 * kiln_gemm_q8a8_row_scale and kiln_gemm_q8a8_quantize (amax / 127, or 1
 * for an all-zero row, NaN for a row holding an Inf or NaN; IEEE division,
 * round to nearest even, clamp to +-127). Shared by the AVX512-VNNI packer
 * (kiln_gemm_q8a8_avx512vnni.c) and the AMX-INT8 one
 * (kiln_gemm_q8a8_amx.c); include only from files compiled with AVX-512. */
#ifndef KILN_GEMM_Q8A8_QUANT_AVX512_H
#define KILN_GEMM_Q8A8_QUANT_AVX512_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

/* 16 elements p.. of a row of fp32 (x) or bf16 (x16), zero past k. */
static inline __m512 kiln_q8a8_row_load16(const float* x, const uint16_t* x16, int64_t p,
                                          int64_t k) {
  __mmask16 m = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1);
  if (x) return _mm512_maskz_loadu_ps(m, x + p);
  __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x16 + p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* A row's scale (x or x16, unit stride, k elements): NaN when it holds an
 * Inf or NaN. */
static inline float kiln_q8a8_row_scale_avx512(const float* x, const uint16_t* x16, int64_t k) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512 big = _mm512_set1_ps(INFINITY);
  __m512 mx = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t p = 0; p < k; p += 16) {
    __m512 v = _mm512_and_ps(kiln_q8a8_row_load16(x, x16, p, k), absmask);
    bad |= _mm512_cmp_ps_mask(v, big, _CMP_NLT_UQ); /* inf or NaN */
    mx = _mm512_max_ps(mx, v);
  }
  const float s = _mm512_reduce_max_ps(mx) / 127.0f;
  return bad ? NAN : s == 0.0f ? 1.0f : s;
}

/* k elements of a row quantized with its scale s into out[0, kq) (kq >=
 * k, a multiple of 16; zero past k; all zero when s is NaN); returns the
 * sum of the quantized values. */
static inline int32_t kiln_q8a8_row_quantize_with_avx512(const float* x, const uint16_t* x16,
                                                         int64_t k, int64_t kq, float s,
                                                         int8_t* out) {
  const __m512 lim = _mm512_set1_ps(127.0f), nlim = _mm512_set1_ps(-127.0f);
  const __m512 sv = _mm512_set1_ps(s);
  const int bad = s != s;
  __m512i acc = _mm512_setzero_si512();
  for (int64_t p = 0; p < kq; p += 16) {
    __m512i q = _mm512_setzero_si512();
    if (!bad && p < k) {
      __m512 r = _mm512_roundscale_ps(_mm512_div_ps(kiln_q8a8_row_load16(x, x16, p, k), sv),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(r, nlim), lim));
    }
    acc = _mm512_add_epi32(acc, q);
    _mm_storeu_si128((__m128i*)(void*)(out + p), _mm512_cvtepi32_epi8(q));
  }
  return _mm512_reduce_add_epi32(acc);
}

#endif /* KILN_GEMM_Q8A8_QUANT_AVX512_H */
