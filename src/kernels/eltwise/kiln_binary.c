/* Broadcast binary ops for every dtype. The inner row loop is specialised
 * for the three stride patterns that matter (both dense, one side a
 * broadcast scalar) so the compiler vectorises them; anything else takes the
 * strided loop. Compiled once per ISA of the eltwise family's list
 * (KILN_ELTWISE_ISAS, kernels/kiln_isa_variant.h); kiln_binary
 * (kiln_binary_dispatch.c) picks by kiln_cpu_isa(). */
#include <math.h>
#include <string.h>

#include "kernels/eltwise/kiln_binary_variants.h"
#include "kernels/eltwise/kiln_nd.h"

typedef struct {
  char* out;
  const char* a;
  const char* b;
  void (*row)(int64_t n, void* out, const void* a, int64_t sa, const void* b, int64_t sb);
  size_t out_size, in_size;
} kiln_binary_ctx_t;

/* torch.maximum/minimum propagate NaN. */
#define KILN_FMAX(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) > (y) ? (x) : (y))
#define KILN_FMIN(x, y) ((x) != (x) ? (x) : (y) != (y) ? (y) : (x) < (y) ? (x) : (y))
#define KILN_IMAX(x, y) ((x) > (y) ? (x) : (y))
#define KILN_IMIN(x, y) ((x) < (y) ? (x) : (y))

#define KILN_DEFINE_ROW(name, TI, TO, EXPR)                                          \
  static void name(int64_t n, void* out_, const void* a_, int64_t sa, const void* b_,  \
                   int64_t sb) {                                                     \
    TO* restrict out = out_;                                                         \
    const TI* restrict a = a_;                                                       \
    const TI* restrict b = b_;                                                       \
    if (sa == 1 && sb == 1) {                                                        \
      for (int64_t i = 0; i < n; ++i) { TI x = a[i], y = b[i]; out[i] = (TO)(EXPR); } \
    } else if (sa == 0 && sb == 1) {                                                 \
      TI x = a[0];                                                                   \
      for (int64_t i = 0; i < n; ++i) { TI y = b[i]; out[i] = (TO)(EXPR); }          \
    } else if (sa == 1 && sb == 0) {                                                 \
      TI y = b[0];                                                                   \
      for (int64_t i = 0; i < n; ++i) { TI x = a[i]; out[i] = (TO)(EXPR); }          \
    } else {                                                                         \
      for (int64_t i = 0; i < n; ++i) {                                              \
        TI x = a[i * sa], y = b[i * sb];                                             \
        out[i] = (TO)(EXPR);                                                         \
      }                                                                              \
    }                                                                                \
  }

/* One row function per (op, dtype). */
#define KILN_DEFINE_ARITH(T, tag, MAX, MIN)                  \
  KILN_DEFINE_ROW(add_##tag, T, T, x + y)                    \
  KILN_DEFINE_ROW(sub_##tag, T, T, x - y)                    \
  KILN_DEFINE_ROW(mul_##tag, T, T, x * y)                    \
  KILN_DEFINE_ROW(max_##tag, T, T, MAX(x, y))                \
  KILN_DEFINE_ROW(min_##tag, T, T, MIN(x, y))                \
  KILN_DEFINE_ROW(eq_##tag, T, uint8_t, x == y)              \
  KILN_DEFINE_ROW(ne_##tag, T, uint8_t, x != y)              \
  KILN_DEFINE_ROW(lt_##tag, T, uint8_t, x < y)               \
  KILN_DEFINE_ROW(le_##tag, T, uint8_t, x <= y)              \
  KILN_DEFINE_ROW(gt_##tag, T, uint8_t, x > y)               \
  KILN_DEFINE_ROW(ge_##tag, T, uint8_t, x >= y)

KILN_DEFINE_ARITH(float, f32, KILN_FMAX, KILN_FMIN)
KILN_DEFINE_ARITH(int64_t, i64, KILN_IMAX, KILN_IMIN)
KILN_DEFINE_ARITH(int32_t, i32, KILN_IMAX, KILN_IMIN)
KILN_DEFINE_ARITH(int8_t, i8, KILN_IMAX, KILN_IMIN)
KILN_DEFINE_ARITH(uint8_t, u8, KILN_IMAX, KILN_IMIN)
KILN_DEFINE_ROW(div_f32, float, float, x / y)
KILN_DEFINE_ROW(pow_f32, float, float, powf(x, y))
KILN_DEFINE_ROW(and_u8, uint8_t, uint8_t, (x != 0) & (y != 0))
KILN_DEFINE_ROW(or_u8, uint8_t, uint8_t, (x != 0) | (y != 0))

typedef void (*kiln_binary_row_fn)(int64_t, void*, const void*, int64_t, const void*, int64_t);

static kiln_binary_row_fn kiln_binary_row_pick(kiln_binary_t op, kiln_dtype_t dtype) {
#define KILN_ROWS(tag)                                                                    \
  {add_##tag, sub_##tag, mul_##tag, NULL, NULL, max_##tag, min_##tag, eq_##tag, ne_##tag, \
   lt_##tag, le_##tag, gt_##tag, ge_##tag, NULL, NULL}
  static const kiln_binary_row_fn f32[KILN_BINARY_COUNT] = KILN_ROWS(f32);
  static const kiln_binary_row_fn i64[KILN_BINARY_COUNT] = KILN_ROWS(i64);
  static const kiln_binary_row_fn i32[KILN_BINARY_COUNT] = KILN_ROWS(i32);
  static const kiln_binary_row_fn i8[KILN_BINARY_COUNT] = KILN_ROWS(i8);
  static const kiln_binary_row_fn u8[KILN_BINARY_COUNT] = KILN_ROWS(u8);
#undef KILN_ROWS
  if ((unsigned)op >= KILN_BINARY_COUNT) return NULL;
  switch (dtype) {
    case KILN_F32:
      if (op == KILN_BINARY_DIV) return div_f32;
      if (op == KILN_BINARY_POW) return pow_f32;
      return f32[op];
    case KILN_I64: return i64[op];
    case KILN_I32: return i32[op];
    case KILN_I8: return i8[op];
    case KILN_U8: return u8[op];
    case KILN_BOOL:
      if (op == KILN_BINARY_LOGICAL_AND || op == KILN_BINARY_MUL || op == KILN_BINARY_MINIMUM)
        return and_u8;
      if (op == KILN_BINARY_LOGICAL_OR || op == KILN_BINARY_ADD || op == KILN_BINARY_MAXIMUM)
        return or_u8;
      return u8[op];
    default: return NULL;
  }
}

static void kiln_binary_row(void* p, int64_t n, const int64_t* off, const int64_t* st) {
  const kiln_binary_ctx_t* c = p;
  c->row(n, c->out + off[0] * (int64_t)c->out_size, c->a + off[1] * (int64_t)c->in_size, st[1],
         c->b + off[2] * (int64_t)c->in_size, st[2]);
}

void KILN_ISA_VARIANT(kiln_binary)(kiln_binary_t op, kiln_dtype_t dtype,
                                   const kiln_nd_t* nd_in, void* out, const void* a,
                                   const void* b, kiln_pool_t* pool) {
  kiln_binary_ctx_t c;
  c.row = kiln_binary_row_pick(op, dtype);
  if (!c.row) return; /* the plan rejected this combination already */
  c.out = out;
  c.a = a;
  c.b = b;
  c.in_size = kiln_dtype_size(dtype);
  c.out_size = op >= KILN_BINARY_EQ ? 1 : c.in_size;
  kiln_nd_t nd = *nd_in;
  kiln_nd_collapse(&nd, 3);
  kiln_nd_for_rows(&nd, 3, kiln_binary_row, &c, pool);
}
