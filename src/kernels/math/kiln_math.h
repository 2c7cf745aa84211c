/* More elementwise math: the unary functions and rounding of the Core ATen
 * opset that kernels/nn does not cover (inverse trig and hyperbolics,
 * expm1/log1p/log2/log10, ceil/floor/round/trunc, sign), and broadcast
 * binary ops (atan2, bitwise and/or/xor, fmod, remainder, and division
 * rounded toward zero or down).
 *
 * Numerics follow PyTorch's CPU kernels: round is half to even; sign(NaN)
 * is 0 and sign(-0.0) is +0; fmod takes the dividend's sign, remainder the
 * divisor's; division rounded down is torch's div_floor (fmod-based, so it
 * is exact where floor(a / b) would round). Each optimised kernel has a
 * scalar reference (the *_reference functions) that tests/c/test_math.c
 * holds it to. Pointers are borrowed.
 */
#ifndef KILN_MATH_H
#define KILN_MATH_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_dtype.h"
#include "kernels/eltwise/kiln_eltwise.h"

/* Same order as the IR's ACOS..SIGN (checked in src/hal/cpu/kiln_hal_cpu_math.c). */
typedef enum kiln_math_unary_e {
  KILN_MATH_ACOS = 0,
  KILN_MATH_ACOSH,
  KILN_MATH_ASIN,
  KILN_MATH_ASINH,
  KILN_MATH_ATAN,
  KILN_MATH_ATANH,
  KILN_MATH_COSH,
  KILN_MATH_SINH,
  KILN_MATH_TAN,
  KILN_MATH_EXPM1,
  KILN_MATH_LOG10,
  KILN_MATH_LOG1P,
  KILN_MATH_LOG2,
  KILN_MATH_CEIL,
  KILN_MATH_FLOOR,
  KILN_MATH_ROUND,
  KILN_MATH_TRUNC,
  KILN_MATH_SIGN,
  KILN_MATH_UNARY_COUNT
} kiln_math_unary_t;

/* Same order as the IR's ATAN2..DIV_FLOOR (checked in src/hal/cpu/kiln_hal_cpu_math.c). */
typedef enum kiln_math_binary_e {
  KILN_MATH_ATAN2 = 0,
  KILN_MATH_BITWISE_AND,
  KILN_MATH_BITWISE_OR,
  KILN_MATH_BITWISE_XOR,
  KILN_MATH_FMOD,
  KILN_MATH_REMAINDER,
  KILN_MATH_DIV_TRUNC,
  KILN_MATH_DIV_FLOOR,
  KILN_MATH_BINARY_COUNT
} kiln_math_binary_t;

/* y[i] = f(x[i]) for n float32 elements; x and y may alias exactly. */
void kiln_math_unary_f32(kiln_math_unary_t op, size_t n, const float* x, float* y,
                         kiln_pool_t* pool);
void kiln_math_unary_f32_reference(kiln_math_unary_t op, size_t n, const float* x, float* y);

/* sign of n int64 or int32 elements (the only integer op of the unary set;
 * the rounding ops of an integer are the identity and never reach a kernel). */
void kiln_math_sign_int(kiln_dtype_t dtype, size_t n, const void* x, void* y);

/* out = a op b over nd (operands 0 = out, 1 = a, 2 = b; out is of dtype).
 * Dtypes: atan2 float32; the bitwise ops int64, int32, bool; the rest
 * float32, int64, int32 (src/ir/kiln_shape_infer.c enforces this; other
 * combinations do nothing).
 * Returns how many elements had an integer divisor of 0 (fmod, remainder
 * and the divisions of int64/int32): their outputs are 0, nothing traps, and
 * the caller turns a non-zero count into an error. Float division by zero
 * follows IEEE (inf or NaN). INT_MIN / -1 wraps, as torch. */
int64_t kiln_math_binary(kiln_math_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd,
                         void* out, const void* a, const void* b, kiln_pool_t* pool);

/* One element of each binary op, the scalar references. *zero_div is set
 * to 1 for an integer division by zero (the result is then 0). */
float kiln_math_binary_f32_reference(kiln_math_binary_t op, float a, float b);
int64_t kiln_math_binary_i64_reference(kiln_math_binary_t op, int64_t a, int64_t b,
                                       int* zero_div);

#endif /* KILN_MATH_H */
