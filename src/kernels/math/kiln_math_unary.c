/* Unary float math, one ISA variant per build of this file (see
 * kiln_math_internal.h). As in kernels/nn/kiln_unary.c, each op is
 * kiln_nn_math.h's loop (KILN_NN_UNARY_LOOP) over a branch-free
 * function (kiln_math_vec.h) that GCC vectorises.
 *
 * tan is vectorised below 2^28 (kiln_math_tan_mediumf, a reduction by pi/2
 * in double); larger arguments need Payne-Hanek's multi-word reduction and
 * go to libm, one by one, after the vector pass (so do inf and NaN, which
 * give NaN). ceil, floor, trunc and
 * nearbyint (half to even in the default rounding mode) are single
 * instructions (vroundps) at AVX2.
 */
#include <math.h>
#include <string.h>

#include "kernels/math/kiln_math_internal.h"
#include "kernels/math/kiln_math_vec.h"

/* One case: kiln_nn_math.h's loop over this function's x and y. */
#define KILN_MATH_UNARY_CASE(expr) KILN_NN_UNARY_LOOP(n, x, y, expr)

/* tan over x into y: the vector path over a tile, then libm for the lanes
 * it does not cover (read from x before y is written: they may alias). */
static void kiln_math_tan_range(size_t n, const float* x, float* y, float* tile) {
  for (size_t i = 0; i < n; i += KILN_NN_UNARY_TILE) {
    size_t m = n - i < KILN_NN_UNARY_TILE ? n - i : KILN_NN_UNARY_TILE;
    const float* xs = x + i;
    for (size_t j = 0; j < m; ++j) tile[j] = kiln_math_tan_mediumf(xs[j]);
    for (size_t j = 0; j < m; ++j)
      if (!(fabsf(xs[j]) < KILN_MATH_TAN_MAX)) tile[j] = tanf(xs[j]);
    memcpy(y + i, tile, m * sizeof(float));
  }
}

void KILN_ISA_VARIANT(kiln_math_unary_range)(kiln_math_unary_t op, size_t n, const float* x,
                                             float* y) {
  float tile[KILN_NN_UNARY_TILE];
  switch (op) {
    case KILN_MATH_ACOS: KILN_MATH_UNARY_CASE(kiln_math_acosf(v));
    case KILN_MATH_ACOSH: KILN_MATH_UNARY_CASE(kiln_math_acoshf(v));
    case KILN_MATH_ASIN: KILN_MATH_UNARY_CASE(kiln_math_asinf(v));
    case KILN_MATH_ASINH: KILN_MATH_UNARY_CASE(kiln_math_asinhf(v));
    case KILN_MATH_ATAN: KILN_MATH_UNARY_CASE(kiln_math_atanf(v));
    case KILN_MATH_ATANH: KILN_MATH_UNARY_CASE(kiln_math_atanhf(v));
    case KILN_MATH_COSH: KILN_MATH_UNARY_CASE(kiln_math_coshf(v));
    case KILN_MATH_SINH: KILN_MATH_UNARY_CASE(kiln_math_sinhf(v));
    case KILN_MATH_TAN: kiln_math_tan_range(n, x, y, tile); break;
    case KILN_MATH_EXPM1: KILN_MATH_UNARY_CASE(kiln_math_expm1f(v));
    case KILN_MATH_LOG10: KILN_MATH_UNARY_CASE(kiln_math_log10f(v));
    case KILN_MATH_LOG1P: KILN_MATH_UNARY_CASE(kiln_math_log1pf(v));
    case KILN_MATH_LOG2: KILN_MATH_UNARY_CASE(kiln_math_log2f(v));
    case KILN_MATH_CEIL: KILN_MATH_UNARY_CASE(ceilf(v));
    case KILN_MATH_FLOOR: KILN_MATH_UNARY_CASE(floorf(v));
    case KILN_MATH_ROUND: KILN_MATH_UNARY_CASE(nearbyintf(v));
    case KILN_MATH_TRUNC: KILN_MATH_UNARY_CASE(truncf(v));
    case KILN_MATH_SIGN: KILN_MATH_UNARY_CASE(kiln_math_signf(v));
    case KILN_MATH_UNARY_COUNT: break;
  }
}
