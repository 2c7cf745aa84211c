/* Unary float math, one ISA variant per build of this file (see
 * kiln_math_internal.h). As in kernels/nn/kiln_unary.c, each op is a plain
 * loop over a branch-free function (kiln_math_vec.h) that GCC vectorises,
 * and results go through a stack tile so that the vectorised loop never
 * stores to a possibly-aliasing y.
 *
 * tan stays on libm: an accurate vector tan needs a multi-part reduction by
 * pi/2 (Payne-Hanek for large arguments), and the op is rare in models (as
 * sin and cos, which kernels/nn leaves on libm too). ceil, floor, trunc and
 * nearbyint (half to even in the default rounding mode) are single
 * instructions (vroundps) at AVX2.
 */
#include <math.h>
#include <string.h>

#include "kernels/math/kiln_math_internal.h"
#include "kernels/math/kiln_math_vec.h"

enum { KILN_MATH_TILE = 256 };

#define KILN_MATH_UNARY_LOOP(expr)                                 \
  for (size_t i = 0; i < n; i += KILN_MATH_TILE) {                 \
    size_t m = n - i < KILN_MATH_TILE ? n - i : KILN_MATH_TILE;    \
    const float* xs = x + i;                                       \
    for (size_t j = 0; j < m; ++j) {                               \
      float v = xs[j];                                             \
      tile[j] = (expr);                                            \
    }                                                              \
    memcpy(y + i, tile, m * sizeof(float));                        \
  }                                                                \
  break

void KILN_MATH_FN(kiln_math_unary_range)(kiln_math_unary_t op, size_t n, const float* x,
                                         float* y) {
  float tile[KILN_MATH_TILE];
  switch (op) {
    case KILN_MATH_ACOS: KILN_MATH_UNARY_LOOP(kiln_math_acosf(v));
    case KILN_MATH_ACOSH: KILN_MATH_UNARY_LOOP(kiln_math_acoshf(v));
    case KILN_MATH_ASIN: KILN_MATH_UNARY_LOOP(kiln_math_asinf(v));
    case KILN_MATH_ASINH: KILN_MATH_UNARY_LOOP(kiln_math_asinhf(v));
    case KILN_MATH_ATAN: KILN_MATH_UNARY_LOOP(kiln_math_atanf(v));
    case KILN_MATH_ATANH: KILN_MATH_UNARY_LOOP(kiln_math_atanhf(v));
    case KILN_MATH_COSH: KILN_MATH_UNARY_LOOP(kiln_math_coshf(v));
    case KILN_MATH_SINH: KILN_MATH_UNARY_LOOP(kiln_math_sinhf(v));
    case KILN_MATH_TAN: KILN_MATH_UNARY_LOOP(tanf(v));
    case KILN_MATH_EXPM1: KILN_MATH_UNARY_LOOP(kiln_math_expm1f(v));
    case KILN_MATH_LOG10: KILN_MATH_UNARY_LOOP(kiln_math_log10f(v));
    case KILN_MATH_LOG1P: KILN_MATH_UNARY_LOOP(kiln_math_log1pf(v));
    case KILN_MATH_LOG2: KILN_MATH_UNARY_LOOP(kiln_math_log2f(v));
    case KILN_MATH_CEIL: KILN_MATH_UNARY_LOOP(ceilf(v));
    case KILN_MATH_FLOOR: KILN_MATH_UNARY_LOOP(floorf(v));
    case KILN_MATH_ROUND: KILN_MATH_UNARY_LOOP(nearbyintf(v));
    case KILN_MATH_TRUNC: KILN_MATH_UNARY_LOOP(truncf(v));
    case KILN_MATH_SIGN: KILN_MATH_UNARY_LOOP(kiln_math_signf(v));
    case KILN_MATH_UNARY_COUNT: break;
  }
}
