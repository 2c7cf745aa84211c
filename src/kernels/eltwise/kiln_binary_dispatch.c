/* kiln_binary: the variant of kiln_binary.c for the running ISA level
 * (checked on every call, so kiln_cpu_isa_set in tests takes effect at
 * once). The reference is the generic variant on one thread. */
#include "kernels/eltwise/kiln_binary_variants.h"

static const kiln_binary_fn kiln_binary_variants[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_binary);

void kiln_binary(kiln_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd, void* out,
                 const void* a, const void* b, kiln_pool_t* pool) {
  kiln_isa_t level =
      kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_ELTWISE_ISAS), kiln_cpu_isa());
  kiln_binary_variants[level](op, dtype, nd, out, a, b, pool);
}

void kiln_binary_reference(kiln_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd, void* out,
                           const void* a, const void* b) {
  kiln_binary__generic(op, dtype, nd, out, a, b, NULL);
}
