/* Private to kernels/math: the per-ISA functions. kiln_math_unary.c and
 * kiln_math_binary.c are compiled once per ISA of the family's list
 * (KILN_MATH_ISAS, kernels/kiln_isa_variant.h); kiln_math.c picks one from
 * kiln_cpu_isa() on every call. */
#ifndef KILN_MATH_INTERNAL_H
#define KILN_MATH_INTERNAL_H

#include "kernels/kiln_isa_variant.h"
#include "kernels/math/kiln_math.h"

#define KILN_MATH_DECLARE_(isa, LEVEL, unused)                                            \
  void kiln_math_unary_range__##isa(kiln_math_unary_t op, size_t n, const float* x,       \
                                    float* y);                                            \
  int64_t kiln_math_binary__##isa(kiln_math_binary_t op, kiln_dtype_t dtype,              \
                                  const kiln_nd_t* nd, void* out, const void* a,          \
                                  const void* b, kiln_pool_t* pool);
KILN_MATH_ISAS(KILN_MATH_DECLARE_, ~)

#endif /* KILN_MATH_INTERNAL_H */
