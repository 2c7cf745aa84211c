/* kiln_bf16_from_bits's rule (base/kiln_bf16.h) on 16 lanes of AVX-512F:
 * nearest even, a NaN made quiet; the bf16 values out as 16 uint16. The
 * integer arithmetic, not VCVTNEPS2BF16 (AVX512_BF16), whose denormal
 * handling differs: every rounding of an activation kiln stores or copies
 * must give the same bits (kiln_pass_conv_bf16_io.c's exactness). Shared by
 * the depthwise rows and the bf16-compute conv's stores; include only from
 * code compiled with AVX-512F. AVX2's eight lanes: kiln_bf16_round_avx2.h. */
#ifndef KILN_BF16_ROUND_AVX512_H
#define KILN_BF16_ROUND_AVX512_H

#include <immintrin.h>

static inline __attribute__((always_inline)) __m256i kiln_bf16x16_from_ps_avx512(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(bits, _mm512_set1_epi32(0x400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

#endif /* KILN_BF16_ROUND_AVX512_H */
