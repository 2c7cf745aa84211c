/* The fp32 -> bf16 rounding rule, the one every kiln path follows (casts,
 * the GEMMs' rounded operands and results, bf16 attention, the packers):
 * torch's c10::BFloat16, round to nearest even, a NaN made quiet (its top
 * mantissa bit set), denormals kept, a value past the largest bf16 to
 * infinity. In base so kernels of every family and the references share
 * it; the vector forms (kernels/kiln_bf16_round_avx2.h,
 * kernels/gemm/kiln_gemm_bf16_round_avx512.h) give these bits. */
#ifndef KILN_BF16_H
#define KILN_BF16_H

#include <stdint.h>
#include <string.h>

/* float32 bits to bf16 bits. */
static inline uint16_t kiln_bf16_from_bits(uint32_t bits) {
  uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  uint32_t quiet = (bits >> 16) | 0x40u;
  return (uint16_t)((bits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

static inline uint16_t kiln_bf16_from_f32(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  return kiln_bf16_from_bits(bits);
}

static inline float kiln_bf16_to_f32(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* x rounded to bf16, as a float. */
static inline float kiln_bf16_round_f32(float x) { return kiln_bf16_to_f32(kiln_bf16_from_f32(x)); }

#endif /* KILN_BF16_H */
