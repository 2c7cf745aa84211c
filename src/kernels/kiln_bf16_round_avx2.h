/* kiln_bf16_from_bits's rule (base/kiln_bf16.h) on 8 lanes of AVX2: each
 * float32's bits in, the bf16 in the lane's high half out (the low half
 * zero: the rounded value as a float32). The NaN test compares |bits|
 * (below 2^31) signed, which AVX2 has. Shared by the cast kernel, the fp32
 * GEMM's rounding of bf16 operands and results, and bf16 attention's
 * fallback; include only from code compiled with the AVX2 flags. */
#ifndef KILN_BF16_ROUND_AVX2_H
#define KILN_BF16_ROUND_AVX2_H

#include <immintrin.h>

static inline __m256i kiln_bf16x8_round_avx2(__m256i bits) {
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
  __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  return _mm256_and_si256(_mm256_blendv_epi8(rounded, quiet, nan),
                          _mm256_set1_epi32((int)0xffff0000u));
}

/* x rounded to bf16, as float32s. */
static inline __m256 kiln_bf16x8_round_ps_avx2(__m256 x) {
  return _mm256_castsi256_ps(kiln_bf16x8_round_avx2(_mm256_castps_si256(x)));
}

#endif /* KILN_BF16_ROUND_AVX2_H */
