/* The ISA variants of the broadcast binary ops: kiln_binary.c compiled once
 * per ISA of the eltwise family's list (KILN_ELTWISE_ISAS,
 * kernels/kiln_isa_variant.h) as kiln_binary__generic, kiln_binary__avx2,
 * ...; kiln_binary_dispatch.c picks one. */
#ifndef KILN_BINARY_VARIANTS_H
#define KILN_BINARY_VARIANTS_H

#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/kiln_isa_variant.h"

typedef void (*kiln_binary_fn)(kiln_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd,
                               void* out, const void* a, const void* b, kiln_pool_t* pool);

#define KILN_BINARY_DECLARE_(isa, LEVEL, unused)                                           \
  void kiln_binary__##isa(kiln_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd,       \
                          void* out, const void* a, const void* b, kiln_pool_t* pool);
KILN_ELTWISE_ISAS(KILN_BINARY_DECLARE_, ~)

#endif /* KILN_BINARY_VARIANTS_H */
