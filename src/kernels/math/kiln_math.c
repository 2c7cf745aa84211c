/* The public entry points of kernels/math: pick the ISA variant from
 * kiln_cpu_isa() on every call (so kiln_cpu_isa_set in tests takes effect at
 * once) and share unary work out over the pool. The AVX2 build also serves
 * AVX-512 machines. */
#include "base/kiln_cpu.h"
#include "kernels/math/kiln_math_internal.h"

/* Tasks of at least this many elements: below it a hand-off to a pool
 * thread costs more than it saves. */
enum { KILN_MATH_MIN_TASK = 16384 };

typedef void (*kiln_math_unary_fn)(kiln_math_unary_t, size_t, const float*, float*);

static kiln_math_unary_fn kiln_math_unary_pick(void) {
#if defined(KILN_HAVE_X86)
  if (kiln_cpu_isa() >= KILN_ISA_AVX2) return kiln_math_unary_range_avx2;
#elif defined(__aarch64__)
  if (kiln_cpu_isa() == KILN_ISA_NEON) return kiln_math_unary_range_neon;
#endif
  return kiln_math_unary_range_generic;
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
#if defined(KILN_HAVE_X86)
  if (kiln_cpu_isa() >= KILN_ISA_AVX2)
    return kiln_math_binary_avx2(op, dtype, nd, out, a, b, pool);
#elif defined(__aarch64__)
  if (kiln_cpu_isa() == KILN_ISA_NEON)
    return kiln_math_binary_neon(op, dtype, nd, out, a, b, pool);
#endif
  return kiln_math_binary_generic(op, dtype, nd, out, a, b, pool);
}
