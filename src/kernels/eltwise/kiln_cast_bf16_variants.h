/* The ISA variants of the float32 -> bfloat16 rounding loops
 * (kiln_cast_bf16.c, compiled once per ISA of the eltwise family's list as
 * kiln_cast_f32_to_bf16__generic, __avx2, ...). kiln_cast_f32_to_bf16
 * writes bf16 bytes; kiln_round_bf16_f32 writes the rounded values as
 * float32 (the fused ROUND_BF16: a CAST to bf16 and back). Both pick the
 * variant of the running ISA level on every call (kiln_movement.c). */
#ifndef KILN_CAST_BF16_VARIANTS_H
#define KILN_CAST_BF16_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kiln_isa_variant.h"

#define KILN_CAST_BF16_DECLARE_(isa, LEVEL, unused)                                            \
  void kiln_cast_f32_to_bf16__##isa(size_t n, const float* x, uint16_t* y); \
  void kiln_round_bf16_f32__##isa(size_t n, const float* x, float* y);
KILN_ELTWISE_ISAS(KILN_CAST_BF16_DECLARE_, ~)

/* The running level's variants (kiln_movement.c). y may be x (in place). */
void kiln_cast_f32_to_bf16(size_t n, const float* x, uint16_t* y);
void kiln_round_bf16_f32(size_t n, const float* x, float* y);

#endif /* KILN_CAST_BF16_VARIANTS_H */
