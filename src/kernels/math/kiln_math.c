/* The public entry points of kernels/math: pick the ISA variant from
 * kiln_cpu_isa() on every call (so kiln_cpu_isa_set in tests takes effect at
 * once) and share unary work out over the pool. */
#include "base/kiln_cpu.h"
#include "kernels/math/kiln_math_internal.h"

/* Tasks of at least this many elements: below it a hand-off to a pool
 * thread costs more than it saves. */
enum { KILN_MATH_MIN_TASK = 16384 };

typedef void (*kiln_math_unary_fn)(kiln_math_unary_t, size_t, const float*, float*);

typedef int64_t (*kiln_math_binary_fn)(kiln_math_binary_t, kiln_dtype_t, const kiln_nd_t*,
                                        void*, const void*, const void*, kiln_pool_t*);

static const kiln_math_unary_fn kiln_math_unary_variants[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_MATH_ISAS, kiln_math_unary_range);
static const kiln_math_binary_fn kiln_math_binary_variants[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_MATH_ISAS, kiln_math_binary);

static kiln_isa_t kiln_math_level(void) {
  return kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_MATH_ISAS), kiln_cpu_isa());
}

static kiln_math_unary_fn kiln_math_unary_pick(void) {
  return kiln_math_unary_variants[kiln_math_level()];
}

typedef struct {
  kiln_math_unary_fn fn;
  kiln_math_unary_t op;
  size_t n, per_task;
  const float* x;
  float* y;
} kiln_math_unary_ctx_t;

static void kiln_math_unary_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_math_unary_ctx_t* c = p;
  size_t lo = task * c->per_task;
  size_t hi = lo + c->per_task < c->n ? lo + c->per_task : c->n;
  c->fn(c->op, hi - lo, c->x + lo, c->y + lo);
}

void kiln_math_unary_f32(kiln_math_unary_t op, size_t n, const float* x, float* y,
                         kiln_pool_t* pool) {
  if ((unsigned)op >= KILN_MATH_UNARY_COUNT || n == 0) return;
  kiln_math_unary_ctx_t c = {kiln_math_unary_pick(), op, n, n, x, y};
  size_t threads = (size_t)kiln_pool_size(pool);
  if (threads > 1 && n >= 2 * KILN_MATH_MIN_TASK) {
    size_t per = (n + threads * 4 - 1) / (threads * 4);
    per = per < KILN_MATH_MIN_TASK ? KILN_MATH_MIN_TASK : per;
    c.per_task = (per + 63) / 64 * 64; /* whole cache lines per task */
  }
  kiln_pool_parallel_for(pool, (n + c.per_task - 1) / c.per_task, kiln_math_unary_task, &c);
}

void kiln_math_sign_int(kiln_dtype_t dtype, size_t n, const void* x, void* y) {
  if (dtype == KILN_I64) {
    const int64_t* xs = x;
    int64_t* ys = y;
    for (size_t i = 0; i < n; ++i) ys[i] = (xs[i] > 0) - (xs[i] < 0);
  } else if (dtype == KILN_I32) {
    const int32_t* xs = x;
    int32_t* ys = y;
    for (size_t i = 0; i < n; ++i) ys[i] = (xs[i] > 0) - (xs[i] < 0);
  }
}

int64_t kiln_math_binary(kiln_math_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd,
                         void* out, const void* a, const void* b, kiln_pool_t* pool) {
  return kiln_math_binary_variants[kiln_math_level()](op, dtype, nd, out, a, b, pool);
}
