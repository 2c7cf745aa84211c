/* An 8 x 8 float transpose in AVX2 registers, for the kernels that turn
 * rows into columns while they pack (the GEMM's transposed A and B, the
 * attention's K tiles). Include only from code compiled with the AVX2
 * flags. */
#ifndef KILN_TRANSPOSE_AVX2_H
#define KILN_TRANSPOSE_AVX2_H

#include <immintrin.h>

/* o[i] lane j = r[j] lane i: 4 x 4 blocks by unpacks and shuffles, then the
 * 128-bit halves exchanged (24 shuffles for 64 floats). */
static inline void kiln_transpose8x8_avx2(const __m256 r[8], __m256 o[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  o[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  o[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  o[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  o[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  o[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  o[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  o[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  o[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

#endif /* KILN_TRANSPOSE_AVX2_H */
