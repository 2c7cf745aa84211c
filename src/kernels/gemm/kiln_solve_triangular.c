/* Triangular solve (kiln_solve_triangular.h): tasks of one pair's column
 * block each, on the pool, run by the ISA variant of
 * kiln_solve_triangular_block.c that kiln_cpu_isa() picks at the call; the
 * reference, one column at a time. */
#include "kernels/gemm/kiln_solve_triangular.h"
#include "kernels/kiln_isa_variant.h"

static void (*const kiln_trsm_variants[KILN_ISA_COUNT])(const kiln_solve_triangular_f32_args_t*,
                                                        int64_t, int64_t, int64_t) =
    KILN_ISA_VARIANT_TABLE(KILN_SOLVE_ISAS, kiln_solve_triangular_block);

typedef struct {
  const kiln_solve_triangular_f32_args_t* p;
  int64_t blocks; /* column blocks per pair */
  void (*block)(const kiln_solve_triangular_f32_args_t*, int64_t, int64_t, int64_t);
} kiln_trsm_job_t;

static void kiln_trsm_task(void* arg, size_t task, int thread) {
  (void)thread;
  const kiln_trsm_job_t* j = arg;
  const int64_t b = (int64_t)task / j->blocks, blk = (int64_t)task % j->blocks;
  const int64_t c0 = blk * KILN_TRSM_COLS;
  const int64_t c1 = c0 + KILN_TRSM_COLS < j->p->k ? c0 + KILN_TRSM_COLS : j->p->k;
  j->block(j->p, b, c0, c1);
}

void kiln_solve_triangular_f32(const kiln_solve_triangular_f32_args_t* p, kiln_pool_t* pool) {
  if (p->batch <= 0 || p->n <= 0 || p->k <= 0) return;
  kiln_trsm_job_t job = {p, (p->k + KILN_TRSM_COLS - 1) / KILN_TRSM_COLS,
                         kiln_trsm_variants[kiln_isa_variant_level(
                             KILN_ISA_VARIANT_MASK(KILN_SOLVE_ISAS), kiln_cpu_isa())]};
  kiln_pool_parallel_for(pool, (size_t)(p->batch * job.blocks), kiln_trsm_task, &job);
}

void kiln_solve_triangular_f32_reference(const kiln_solve_triangular_f32_args_t* p) {
  const int64_t n = p->n, k = p->k;
  for (int64_t pair = 0; pair < p->batch; ++pair) {
    const float* a = p->a + pair * n * n;
    const float* b = p->b + pair * n * k;
    float* x = p->x + pair * n * k;
    for (int64_t c = 0; c < k; ++c) {
      for (int64_t r = 0; r < n; ++r) {
        const int64_t i = p->upper ? n - 1 - r : r;
        const int64_t j0 = p->upper ? i + 1 : 0, j1 = p->upper ? n : i;
        double acc = b[i * k + c];
        for (int64_t j = j0; j < j1; ++j) acc -= (double)a[i * n + j] * (double)x[j * k + c];
        x[i * k + c] = (float)(acc / (p->unit ? 1.0 : (double)a[i * n + i]));
      }
    }
  }
}
