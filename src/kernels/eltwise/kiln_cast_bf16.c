/* float32 -> bfloat16 rounding, the eltwise family's ISA variant
 * (kernels/meson.build): the casts an autocast graph keeps (bf16 tensors
 * saved for backward, a GEMM's bf16 operands) and the fused ROUND_BF16.
 * The rule is base/kiln_bf16.h's: nearest even, a NaN made quiet. The generic build is the plain integer loop (the reference);
 * the AVX2 and AVX-512 builds do the same integer arithmetic 8 lanes at a
 * time with AVX2 intrinsics: GCC's vectorisation of the loop (SSE2 in the core, or AVX2)
 * ran at a third to a half of the speed of a copy of the same bytes (it
 * emulates an unsigned compare for the NaN test and packs twice). Every
 * lane computes what the scalar loop does, so every variant gives the same
 * bits. */
#include "kernels/eltwise/kiln_cast_bf16_variants.h"

#include <string.h>

#include "base/kiln_bf16.h"

#ifdef __AVX2__
#include "kernels/kiln_bf16_round_avx2.h"
#endif

static void kiln_cast_f32_to_bf16_scalar(size_t n, const float* x, uint16_t* y) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &x[i], 4);
    y[i] = kiln_bf16_from_bits(bits);
  }
}

static void kiln_round_bf16_f32_scalar(size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    memcpy(&bits, &x[i], 4);
    bits = (uint32_t)kiln_bf16_from_bits(bits) << 16;
    memcpy(&y[i], &bits, 4);
  }
}

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
