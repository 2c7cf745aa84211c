/* A transpose of 4-byte elements (bits unchanged): o[i * orow + j] =
 * x[j * ld + i] for i < ni, j < nj. Its ISA variants (kiln_transpose.c,
 * compiled once per ISA of the eltwise family's list as
 * kiln_transpose_tile_f32__generic, __avx2, ...) move 8x8 blocks through
 * registers where the ISA has AVX2. */
#ifndef KILN_TRANSPOSE_VARIANTS_H
#define KILN_TRANSPOSE_VARIANTS_H

#include <stdint.h>

#include "kernels/kiln_isa_variant.h"

#define KILN_TRANSPOSE_DECLARE_(isa, LEVEL, unused)                                           \
  void kiln_transpose_tile_f32__##isa(const int32_t* bt, int64_t ld, int64_t ni, int64_t nj, \
                                      int32_t* o, int64_t orow);
KILN_ELTWISE_ISAS(KILN_TRANSPOSE_DECLARE_, ~)

/* The running level's variant (kiln_movement.c): the write half of the
 * strided copy's tiles, and the bf16 conv's copy of NCHW planes into
 * pixels (kiln_conv_nhwc_bf16.c). */
void kiln_transpose_f32(const void* x, int64_t ld, int64_t ni, int64_t nj, void* o, int64_t orow);

#endif /* KILN_TRANSPOSE_VARIANTS_H */
