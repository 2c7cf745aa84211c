/* A 16 x 16 transpose of 32-bit elements in AVX-512 registers, for the
 * packers that turn rows into columns (the bf16 GEMM's VNNI B and
 * transposed A, the bf16 attention's K tiles: a 32-bit element there is a
 * bf16 couple). Include only from code compiled with the AVX-512 flags. */
#ifndef KILN_TRANSPOSE_AVX512_H
#define KILN_TRANSPOSE_AVX512_H

#include <immintrin.h>

/* r[0..16) as a 16 x 16 matrix, transposed in place: 32-bit then 64-bit
 * interleaves inside 128-bit lanes, then two rounds of 128-bit lane
 * shuffles (a 4 x 4 transpose of lanes). */
static inline void kiln_transpose16x16_epi32_avx512(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  /* u[4a + e], lane L: element 4L + e of rows 4a .. 4a + 3. */
  for (int a = 0; a < 16; a += 4) {
    u[a] = _mm512_unpacklo_epi64(t[a], t[a + 2]);
    u[a + 1] = _mm512_unpackhi_epi64(t[a], t[a + 2]);
    u[a + 2] = _mm512_unpacklo_epi64(t[a + 1], t[a + 3]);
    u[a + 3] = _mm512_unpackhi_epi64(t[a + 1], t[a + 3]);
  }
  for (int e = 0; e < 4; ++e) {
    __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88);
    __m512i v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xdd);
    __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88);
    __m512i v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xdd);
    r[e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[8 + e] = _mm512_shuffle_i32x4(v0, v2, 0xdd);
    r[12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xdd);
  }
}

#endif /* KILN_TRANSPOSE_AVX512_H */
