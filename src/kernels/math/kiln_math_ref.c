/* Scalar references for kernels/math: obviously correct, slow, and the
 * ground truth of tests/c/test_math.c. The unary functions call libm in
 * double and round once (so each is within half an ulp of the true value);
 * the binary ones are torch's scalar CPU code, element by element. */
#include <math.h>

#include "kernels/math/kiln_math.h"

static float kiln_math_ref_unary1(kiln_math_unary_t op, float x) {
  double d = x;
  switch (op) {
    case KILN_MATH_ACOS: return (float)acos(d);
    case KILN_MATH_ACOSH: return (float)acosh(d);
    case KILN_MATH_ASIN: return (float)asin(d);
    case KILN_MATH_ASINH: return (float)asinh(d);
    case KILN_MATH_ATAN: return (float)atan(d);
    case KILN_MATH_ATANH: return (float)atanh(d);
    case KILN_MATH_COSH: return (float)cosh(d);
    case KILN_MATH_SINH: return (float)sinh(d);
    case KILN_MATH_TAN: return (float)tan(d);
    case KILN_MATH_EXPM1: return (float)expm1(d);
    case KILN_MATH_LOG10: return (float)log10(d);
    case KILN_MATH_LOG1P: return (float)log1p(d);
    case KILN_MATH_LOG2: return (float)log2(d);
    case KILN_MATH_CEIL: return ceilf(x);
    case KILN_MATH_FLOOR: return floorf(x);
    case KILN_MATH_ROUND: {
      /* Half to even, spelled out. */
      float f = floorf(x), diff = x - f;
      if (diff > 0.5f || (diff == 0.5f && fmodf(f, 2.0f) != 0.0f)) f += 1.0f;
      return f == 0.0f ? copysignf(0.0f, x) : f; /* round(-0.3) is -0.0 */
    }
    case KILN_MATH_TRUNC: return truncf(x);
    case KILN_MATH_SIGN: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : 0.0f;
    case KILN_MATH_UNARY_COUNT: break;
  }
  return NAN;
}

void kiln_math_unary_f32_reference(kiln_math_unary_t op, size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = kiln_math_ref_unary1(op, x[i]);
}

float kiln_math_binary_f32_reference(kiln_math_binary_t op, float a, float b) {
  switch (op) {
    case KILN_MATH_ATAN2: return (float)atan2((double)a, (double)b);
    case KILN_MATH_FMOD: return fmodf(a, b);
    case KILN_MATH_REMAINDER: {
      float m = fmodf(a, b);
      if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) m += b;
      return m;
    }
    case KILN_MATH_DIV_TRUNC: return truncf(a / b);
    case KILN_MATH_DIV_FLOOR: {
      if (b == 0.0f) return a / b;
      float m = fmodf(a, b);
      float d = (a - m) / b;
      if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;
      if (d == 0.0f) return copysignf(0.0f, a / b);
      float f = floorf(d);
      if (d - f > 0.5f) f += 1.0f;
      return f;
    }
    default: break;
  }
  return NAN;
}

int64_t kiln_math_binary_i64_reference(kiln_math_binary_t op, int64_t a, int64_t b,
                                       int* zero_div) {
  *zero_div = 0;
  switch (op) {
    case KILN_MATH_BITWISE_AND: return a & b;
    case KILN_MATH_BITWISE_OR: return a | b;
    case KILN_MATH_BITWISE_XOR: return a ^ b;
    default: break;
  }
  if (b == 0) {
    *zero_div = 1;
    return 0;
  }
  /* INT64_MIN / -1 wraps to INT64_MIN (two's complement, as torch). */
  int64_t q = (b == -1) ? (int64_t)(0u - (uint64_t)a) : a / b;
  int64_t r = (b == -1) ? 0 : a % b;
  switch (op) {
    case KILN_MATH_FMOD: return r;
    case KILN_MATH_REMAINDER: return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
    case KILN_MATH_DIV_TRUNC: return q;
    case KILN_MATH_DIV_FLOOR: return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
    default: break;
  }
  return 0;
}
