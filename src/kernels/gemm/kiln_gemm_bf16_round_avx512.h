/* fp32 -> bf16 rounding in AVX-512F integer arithmetic, to the bit
 * kiln_gemm_bf16_from_f32's (nearest even, NaN made quiet, denormals kept;
 * VCVTNEPS2BF16 would flush denormal inputs to zero). Shared by the bf16
 * packers (kiln_gemm_bf16_pack_avx512.c) and the bf16 conv's NCHW copy
 * (kiln_conv_nhwc_bf16_copy_avx512bf16.c); include it only from
 * translation units compiled with the AVX-512 flags. */
#ifndef KILN_GEMM_BF16_ROUND_AVX512_H
#define KILN_GEMM_BF16_ROUND_AVX512_H

#include <immintrin.h>

/* 16 floats rounded to bf16, each in the low half of its 32-bit lane. */
static inline __m512i kiln_gemm_bf16x16_round_lanes(__m512 x) {
  __m512i bits = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, bits, _mm512_set1_epi32(0x400000));
  return _mm512_srli_epi32(r, 16);
}

#endif /* KILN_GEMM_BF16_ROUND_AVX512_H */
