/* Broadcast binary ops of kernels/math, one ISA variant per build of this
 * file (see kiln_math_internal.h). As kernels/eltwise/kiln_binary.c, the
 * row loop is specialised for the stride patterns that vectorise (both
 * dense, either side a broadcast scalar); the integer divisions cannot
 * vectorise on x86 and take one strided loop.
 *
 * Integer division never traps: a zero divisor gives 0 and is counted (the
 * caller reports the count as an error, eager raises), and a divisor of -1
 * is done as a wrapping negation, since INT_MIN / -1 overflows (SIGFPE on
 * x86) where torch wraps to INT_MIN.
 */
#include <math.h>
#include <stdatomic.h>

#include "kernels/eltwise/kiln_nd.h"
#include "kernels/math/kiln_math_internal.h"

typedef int64_t (*kiln_math_row_fn)(int64_t n, void* out, const void* a, int64_t sa,
                                    const void* b, int64_t sb);

/* Rows that vectorise: the four stride patterns, no divisor count. */
#define KILN_MATH_ROW(name, T, EXPR)                                                  \
  static int64_t name(int64_t n, void* out_, const void* a_, int64_t sa, const void* b_, \
                      int64_t sb) {                                                   \
    T* restrict out = out_;                                                           \
    const T* restrict a = a_;                                                         \
    const T* restrict b = b_;                                                         \
    if (sa == 1 && sb == 1) {                                                         \
      for (int64_t i = 0; i < n; ++i) { T x = a[i], y = b[i]; out[i] = (EXPR); }      \
    } else if (sa == 0 && sb == 1) {                                                  \
      T x = a[0];                                                                     \
      for (int64_t i = 0; i < n; ++i) { T y = b[i]; out[i] = (EXPR); }                \
    } else if (sa == 1 && sb == 0) {                                                  \
      T y = b[0];                                                                     \
      for (int64_t i = 0; i < n; ++i) { T x = a[i]; out[i] = (EXPR); }                \
    } else {                                                                          \
      for (int64_t i = 0; i < n; ++i) { T x = a[i * sa], y = b[i * sb]; out[i] = (EXPR); } \
    }                                                                                 \
    return 0;                                                                         \
  }

/* Integer division rows: y == 0 and y == -1 are taken out before the
 * divide (see the file comment). EXPR gives the result from the quotient q
 * and remainder r of x / y; EXPR_M1 the result for y == -1 from neg, x
 * negated with wrap-around (through U, T's unsigned type). */
#define KILN_MATH_IDIV_ROW(name, T, U, EXPR, EXPR_M1)                                 \
  static int64_t name(int64_t n, void* out_, const void* a_, int64_t sa, const void* b_, \
                      int64_t sb) {                                                   \
    T* restrict out = out_;                                                           \
    const T* restrict a = a_;                                                         \
    const T* restrict b = b_;                                                         \
    int64_t zeros = 0;                                                                \
    for (int64_t i = 0; i < n; ++i) {                                                 \
      T x = a[i * sa], y = b[i * sb];                                                 \
      if (y == 0) {                                                                   \
        out[i] = 0;                                                                   \
        ++zeros;                                                                      \
      } else if (y == -1) {                                                           \
        T neg = (T)(0u - (U)x);                                                       \
        (void)neg; /* unused by fmod and remainder */                                 \
        out[i] = (EXPR_M1);                                                           \
      } else {                                                                        \
        T q = x / y, r = x % y;                                                       \
        (void)q; /* each op uses q or r or both */                                    \
        (void)r;                                                                      \
        out[i] = (EXPR);                                                              \
      }                                                                               \
    }                                                                                 \
    return zeros;                                                                     \
  }

/* r moved into y's sign (remainder), and q rounded down (div_floor). */
#define KILN_MATH_REM_I (r != 0 && ((r < 0) != (y < 0)) ? r + y : r)
#define KILN_MATH_DIVF_I (r != 0 && ((r < 0) != (y < 0)) ? q - 1 : q)

#define KILN_MATH_INT_ROWS(T, U, tag)                            \
  KILN_MATH_ROW(and_##tag, T, (T)(x & y))                        \
  KILN_MATH_ROW(or_##tag, T, (T)(x | y))                         \
  KILN_MATH_ROW(xor_##tag, T, (T)(x ^ y))                        \
  KILN_MATH_IDIV_ROW(fmod_##tag, T, U, r, 0)                     \
  KILN_MATH_IDIV_ROW(rem_##tag, T, U, KILN_MATH_REM_I, 0)        \
  KILN_MATH_IDIV_ROW(divt_##tag, T, U, q, neg)                   \
  KILN_MATH_IDIV_ROW(divf_##tag, T, U, KILN_MATH_DIVF_I, neg)

KILN_MATH_INT_ROWS(int64_t, uint64_t, i64)
KILN_MATH_INT_ROWS(int32_t, uint32_t, i32)
/* bool is one byte, 0 or 1: the bitwise ops keep it so. */
KILN_MATH_ROW(and_u8, uint8_t, (uint8_t)(x & y))
KILN_MATH_ROW(or_u8, uint8_t, (uint8_t)(x | y))
KILN_MATH_ROW(xor_u8, uint8_t, (uint8_t)(x ^ y))

/* fmod without libm, in loops GCC vectorises (glibc's fmodf took 16-33 ns
 * an element: torch.remainder 30x slower than eager). With |x| < 2^23 |y|
 * the quotient's float q = trunc(|x| / |y|) is the true one's integer part
 * k or k + 1 (rounding is monotone and k is a float), and |x| - q |y| is
 * then exact in one FMA: the true remainder r (a float: fmod is exact), or
 * r - |y|, which Sterbenz's lemma makes exact too (q = k + 1 only when r is
 * within half an ulp of the quotient of |y|), and adding |y| back is exact
 * as its sum r is a float. The sign is x's, as fmod's. Other lanes (a
 * quotient of 2^23 or more, y zero or not finite, x not finite) are
 * flagged by kiln_math_fmod_fast and redone with fmodf (kiln_math_fmod_fix).
 * Without hardware FMA the product would round: libm throughout. */
#if defined(__FMA__)
#define KILN_MATH_FAST_FMOD 1
static inline int kiln_math_fmod_fast_ok(float x, float y) {
  const float ax = fabsf(x), ay = fabsf(y);
  return ay > 0.0f && ay <= 3.4028234663852886e38f && ax < 0x1p23f * ay;
}
static inline float kiln_math_fmod_fast(float x, float y) {
  const float ax = fabsf(x), ay = fabsf(y);
  const float q = truncf(ax / ay);
  float r = fmaf(-q, ay, ax);
  r = r < 0.0f ? r + ay : r;
  return copysignf(r, x);
}
#else
#define kiln_math_fmod_fast(x, y) fmodf((x), (y))
#endif

/* torch's remainder: fmod, moved into the divisor's sign. */
static inline float kiln_math_rem_of(float m, float y) {
  return m != 0.0f && ((y < 0.0f) != (m < 0.0f)) ? m + y : m;
}
static inline float kiln_math_remf(float x, float y) { return kiln_math_rem_of(fmodf(x, y), y); }
static inline float kiln_math_remf_fast(float x, float y) {
  return kiln_math_rem_of(kiln_math_fmod_fast(x, y), y);
}

/* torch's div_floor_floating: (x - fmod(x, y)) / y is exact where it is
 * representable, corrected by one when fmod and y differ in sign, then
 * rounded to the nearer integer (the division can land a hair off one);
 * a zero quotient takes the sign of x / y, and y == 0 is plain x / y. */
static inline float kiln_math_div_floor_of(float m, float x, float y) {
  float d = (x - m) / y;
  d = m != 0.0f && ((y < 0.0f) != (m < 0.0f)) ? d - 1.0f : d;
  float f = floorf(d);
  f = d - f > 0.5f ? f + 1.0f : f;
  float q = d != 0.0f ? f : copysignf(0.0f, x / y);
  return y == 0.0f ? x / y : q;
}
static inline float kiln_math_div_floorf(float x, float y) {
  return kiln_math_div_floor_of(fmodf(x, y), x, y);
}
static inline float kiln_math_div_floorf_fast(float x, float y) {
  return kiln_math_div_floor_of(kiln_math_fmod_fast(x, y), x, y);
}

KILN_MATH_ROW(divt_f32, float, truncf(x / y))
#if defined(KILN_MATH_FAST_FMOD)
/* The fast rows, then the lanes OK refuses again with libm. */
#define KILN_MATH_FMOD_ROWS(name, FAST, SLOW, OK)                                           \
  KILN_MATH_ROW(name##_fast, float, FAST(x, y))                                             \
  static int64_t name(int64_t n, void* out_, const void* a_, int64_t sa, const void* b_,    \
                      int64_t sb) {                                                         \
    name##_fast(n, out_, a_, sa, b_, sb);                                                   \
    float* out = out_;                                                                      \
    const float *a = a_, *b = b_;                                                           \
    int bad = 0;                                                                            \
    for (int64_t i = 0; i < n; ++i) bad |= !OK(a[i * sa], b[i * sb]);                       \
    for (int64_t i = 0; bad && i < n; ++i)                                                  \
      if (!OK(a[i * sa], b[i * sb])) out[i] = SLOW(a[i * sa], b[i * sb]);                   \
    return 0;                                                                               \
  }
KILN_MATH_FMOD_ROWS(fmod_f32, kiln_math_fmod_fast, fmodf, kiln_math_fmod_fast_ok)
KILN_MATH_FMOD_ROWS(rem_f32, kiln_math_remf_fast, kiln_math_remf, kiln_math_fmod_fast_ok)
KILN_MATH_FMOD_ROWS(divf_f32, kiln_math_div_floorf_fast, kiln_math_div_floorf, kiln_math_fmod_fast_ok)

/* atan2(a, b) (a the ordinate, as torch.atan2(input, other)) in loops GCC
 * vectorises, where glibc's atan2f ran at 0.06x eager. t = min / max of
 * |a| and |b| in [0, 1]; above tan(pi/8), atan(t) = pi/4 + atan((t - 1) /
 * (t + 1)); atan(u) = u + u z P(z), z = u^2 <= tan^2(pi/8), P of degree 4
 * fitted here (least squares on Chebyshev nodes, weighted for relative
 * error: 0.63 ulp on the reduced range in float); then pi/2 - a, pi - a as
 * the octant says, with pi/4, pi/2 and pi in two floats each, and a's sign.
 * 2.4 ulp at most against double atan2 over 2 million pairs spanning 2^-29
 * to 2^29 (eager's Sleef_atan2f_u10: 1; glibc's: under 1). Both zero,
 * infinite or NaN operands are flagged and redone with atan2f (the signed
 * zeros and infinities' quadrant rules). */
static inline int kiln_math_atan2_fast_ok(float a, float b) {
  const float m = fabsf(a) > fabsf(b) ? fabsf(a) : fabsf(b);
  return m > 0.0f && m <= 3.4028234663852886e38f && a == a && b == b;
}
static inline float kiln_math_atan2_fast(float a, float b) {
  const float ay = fabsf(a), ax = fabsf(b);
  const float mx = ax > ay ? ax : ay, mn = ax > ay ? ay : ax;
  const float t = mn / mx;
  const int big = t > 0.41421356f;
  const float u = big ? (t - 1.0f) / (t + 1.0f) : t;
  const float z = u * u;
  float p = fmaf(-0.060713041573762894f, z, 0.10590773075819016f);
  p = fmaf(p, z, -0.1424306482076645f);
  p = fmaf(p, z, 0.19998441636562347f);
  p = fmaf(p, z, -0.3333331346511841f);
  float r = fmaf(u * z, p, u);
  r = big ? 0.78539818525314331f + (r + -2.1855694e-08f) : r;         /* pi/4 */
  r = ay > ax ? (1.5707963705062866f - r) + -4.3711388e-08f : r;      /* pi/2 - r */
  r = signbit(b) ? (3.1415927410125732f - r) + -8.7422777e-08f : r;   /* pi - r */
  return copysignf(r, a);
}
KILN_MATH_FMOD_ROWS(atan2_f32, kiln_math_atan2_fast, atan2f, kiln_math_atan2_fast_ok)
#else
KILN_MATH_ROW(atan2_f32, float, atan2f(x, y))
KILN_MATH_ROW(fmod_f32, float, fmodf(x, y))
KILN_MATH_ROW(rem_f32, float, kiln_math_remf(x, y))
KILN_MATH_ROW(divf_f32, float, kiln_math_div_floorf(x, y))
#endif

static kiln_math_row_fn kiln_math_row_pick(kiln_math_binary_t op, kiln_dtype_t dtype) {
  /* In kiln_math_binary_t order. */
  static const kiln_math_row_fn f32[KILN_MATH_BINARY_COUNT] = {
      atan2_f32, NULL, NULL, NULL, fmod_f32, rem_f32, divt_f32, divf_f32};
  static const kiln_math_row_fn i64[KILN_MATH_BINARY_COUNT] = {
      NULL, and_i64, or_i64, xor_i64, fmod_i64, rem_i64, divt_i64, divf_i64};
  static const kiln_math_row_fn i32[KILN_MATH_BINARY_COUNT] = {
      NULL, and_i32, or_i32, xor_i32, fmod_i32, rem_i32, divt_i32, divf_i32};
  static const kiln_math_row_fn u8[KILN_MATH_BINARY_COUNT] = {
      NULL, and_u8, or_u8, xor_u8, NULL, NULL, NULL, NULL};
  if ((unsigned)op >= KILN_MATH_BINARY_COUNT) return NULL;
  switch (dtype) {
    case KILN_F32: return f32[op];
    case KILN_I64: return i64[op];
    case KILN_I32: return i32[op];
    case KILN_BOOL: return u8[op];
    default: return NULL;
  }
}

typedef struct {
  char* out;
  const char* a;
  const char* b;
  size_t size;
  kiln_math_row_fn row;
  atomic_llong zeros;
} kiln_math_binary_ctx_t;

static void kiln_math_binary_row(void* p, int64_t n, const int64_t* off, const int64_t* st) {
  kiln_math_binary_ctx_t* c = p;
  int64_t z = c->row(n, c->out + off[0] * (int64_t)c->size, c->a + off[1] * (int64_t)c->size,
                     st[1], c->b + off[2] * (int64_t)c->size, st[2]);
  if (z) atomic_fetch_add_explicit(&c->zeros, (long long)z, memory_order_relaxed);
}

int64_t KILN_ISA_VARIANT(kiln_math_binary)(kiln_math_binary_t op, kiln_dtype_t dtype,
                                           const kiln_nd_t* nd_in, void* out, const void* a,
                                           const void* b, kiln_pool_t* pool) {
  kiln_math_binary_ctx_t c;
  c.row = kiln_math_row_pick(op, dtype);
  if (!c.row) return 0; /* the shape rules rejected this combination already */
  c.out = out;
  c.a = a;
  c.b = b;
  c.size = kiln_dtype_size(dtype);
  atomic_init(&c.zeros, 0);
  kiln_nd_t nd = *nd_in;
  kiln_nd_collapse(&nd, 3);
  kiln_nd_for_rows(&nd, 3, kiln_math_binary_row, &c, pool);
  return (int64_t)atomic_load(&c.zeros);
}
