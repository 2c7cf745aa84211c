/* float32 -> bfloat16 rounding, the eltwise family's ISA variant
 * (kernels/meson.build): the casts an autocast graph keeps (bf16 tensors
 * saved for backward, a GEMM's bf16 operands) and the fused ROUND_BF16.
 * The rule is kiln_f32_to_bf16's (kiln_movement.c): nearest even, a NaN
 * made quiet. The generic build is the plain integer loop (the reference);
 * the AVX2 build does the same integer arithmetic 8 lanes at a time with
 * intrinsics: GCC's vectorisation of the loop (SSE2 in the core, or AVX2)
 * ran at a third to a half of the speed of a copy of the same bytes (it
 * emulates an unsigned compare for the NaN test and packs twice). Every
 * lane computes what the scalar loop does, so every variant gives the same
 * bits. */
#include "kernels/eltwise/kiln_cast_bf16_variants.h"

#include <string.h>

#ifdef __AVX2__
#include <immintrin.h>
#endif

static void kiln_cast_f32_to_bf16_scalar(size_t n, const float* x, uint16_t* y) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &x[i], 4);
    y[i] = kiln_bf16_round_bits(bits);
  }
}

static void kiln_round_bf16_f32_scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &x[i], 4);
    bits = (uint32_t)kiln_bf16_round_bits(bits) << 16;
    memcpy(&y[i], &bits, 4);
  }
}

#ifdef __AVX2__
/* 8 lanes of the scalar rule, the bf16 in each lane's high half. The NaN
 * test compares |bits| (below 2^31) signed, which AVX2 has. */
static inline __m256i kiln_bf16x8_round_avx2(__m256i bits) {
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff)), lsb);
  __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
  __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                   _mm256_set1_epi32(0x7f800000));
  return _mm256_and_si256(_mm256_blendv_epi8(rounded, quiet, nan),
                          _mm256_set1_epi32((int)0xffff0000u));
}
#endif

void KILN_ISA_VARIANT(kiln_cast_f32_to_bf16)(size_t n, const float* x, uint16_t* y) {
  size_t i = 0;
#ifdef __AVX2__
  for (; i + 16 <= n; i += 16) {
    __m256i a = _mm256_srli_epi32(kiln_bf16x8_round_avx2(_mm256_loadu_si256((const __m256i*)(x + i))), 16);
    __m256i b =
        _mm256_srli_epi32(kiln_bf16x8_round_avx2(_mm256_loadu_si256((const __m256i*)(x + i + 8))), 16);
    /* packus works per 128-bit half: lanes a0-3 b0-3 a4-7 b4-7, put back in order. */
    _mm256_storeu_si256((__m256i*)(y + i),
                        _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8));
  }
#endif
  kiln_cast_f32_to_bf16_scalar(n - i, x + i, y + i);
}

void KILN_ISA_VARIANT(kiln_round_bf16_f32)(size_t n, const float* x, float* y) {
  size_t i = 0;
#ifdef __AVX2__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_si256((__m256i*)(y + i),
                        kiln_bf16x8_round_avx2(_mm256_loadu_si256((const __m256i*)(x + i))));
#endif
  kiln_round_bf16_f32_scalar(n - i, x + i, y + i);
}
