/* kiln_random_f32 (kiln_random.h): the running ISA's variant of
 * kiln_random.c shared over the pool, and the scalar reference. */
#include "base/kiln_cpu.h"
#include "kernels/math/kiln_random_internal.h"

/* Elements per task: a multiple of 32 (tasks start on a group, not that
 * the result depends on it) large enough to outweigh a hand-off. */
enum { KILN_RANDOM_TASK = 16384 };

typedef void (*kiln_random_range_fn)(kiln_random_dist_t, uint64_t, uint32_t, float, float,
                                     uint64_t, size_t, float*);

static const kiln_random_range_fn kiln_random_variants[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_MATH_ISAS, kiln_random_range);

typedef struct {
  kiln_random_range_fn fn;
  kiln_random_dist_t dist;
  uint64_t seed;
  uint32_t stream;
  float a, b;
  size_t n;
  float* y;
} kiln_random_ctx_t;

static void kiln_random_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_random_ctx_t* c = p;
  size_t lo = task * KILN_RANDOM_TASK;
  size_t hi = lo + KILN_RANDOM_TASK < c->n ? lo + KILN_RANDOM_TASK : c->n;
  c->fn(c->dist, c->seed, c->stream, c->a, c->b, lo, hi - lo, c->y + lo);
}

void kiln_random_f32(kiln_random_dist_t dist, uint64_t seed, uint32_t stream, float a, float b,
                     size_t n, float* y, kiln_pool_t* pool) {
  if ((unsigned)dist >= KILN_RANDOM_DIST_COUNT || n == 0) return;
  kiln_isa_t level = kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_MATH_ISAS), kiln_cpu_isa());
  kiln_random_ctx_t c = {kiln_random_variants[level], dist, seed, stream, a, b, n, y};
  kiln_pool_parallel_for(pool, (n + KILN_RANDOM_TASK - 1) / KILN_RANDOM_TASK, kiln_random_task, &c);
}

void kiln_random_f32_reference(kiln_random_dist_t dist, uint64_t seed, uint32_t stream, float a,
                               float b, size_t n, float* y) {
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  for (size_t i = 0; i < n; ++i) {
    const uint64_t block = kiln_random_block(i);
    const int word = kiln_random_word(i);
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), stream, 0};
    uint32_t w[4];
    kiln_philox4x32_10(ctr, key, w);
    if (dist == KILN_RANDOM_UNIFORM)
      y[i] = a + (b - a) * kiln_random_unit(w[word]);
    else
      y[i] = a + b * kiln_random_normal_of(w[word & 2], w[word | 1], word & 1);
  }
}
