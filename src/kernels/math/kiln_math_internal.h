/* Private to kernels/math: the per-ISA functions. kiln_math_unary.c and
 * kiln_math_binary.c are compiled once generically and once with the AVX2
 * flags (KILN_MATH_SUFFIX names the variant, as kiln_nn_internal.h does);
 * kiln_math.c picks one from kiln_cpu_isa() on every call. */
#ifndef KILN_MATH_INTERNAL_H
#define KILN_MATH_INTERNAL_H

#include "kernels/math/kiln_math.h"

#ifndef KILN_MATH_SUFFIX
#define KILN_MATH_SUFFIX _generic
#endif
#define KILN_MATH_CAT2_(a, b) a##b
#define KILN_MATH_CAT_(a, b) KILN_MATH_CAT2_(a, b)
#define KILN_MATH_FN(name) KILN_MATH_CAT_(name, KILN_MATH_SUFFIX)

#define KILN_MATH_DECLARE_VARIANT(sfx)                                                     \
  void kiln_math_unary_range##sfx(kiln_math_unary_t op, size_t n, const float* x,          \
                                  float* y);                                               \
  int64_t kiln_math_binary##sfx(kiln_math_binary_t op, kiln_dtype_t dtype,                 \
                                const kiln_nd_t* nd, void* out, const void* a,             \
                                const void* b, kiln_pool_t* pool);

KILN_MATH_DECLARE_VARIANT(_generic)
KILN_MATH_DECLARE_VARIANT(_avx2)
KILN_MATH_DECLARE_VARIANT(_neon)

#endif /* KILN_MATH_INTERNAL_H */
