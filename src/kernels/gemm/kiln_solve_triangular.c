/* Triangular solve (kiln_solve_triangular.h). The task owns columns
 * [c0, c1) of one pair: rows are solved in order, each row's columns
 * together so A's row is read once per row and X's solved rows stream. */
#include "kernels/gemm/kiln_solve_triangular.h"

#define KILN_TRSM_COLS 64 /* columns a task solves together (a row of sums on the stack) */

static void kiln_trsm_block(const kiln_solve_triangular_f32_args_t* p, int64_t b, int64_t c0,
                            int64_t c1) {
  const int64_t n = p->n, k = p->k;
  const float* a = p->a + b * n * n;
  const float* bb = p->b + b * n * k;
  float* x = p->x + b * n * k;
  double acc[KILN_TRSM_COLS];
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = p->upper ? n - 1 - r : r;
    for (int64_t c = c0; c < c1; ++c) acc[c - c0] = bb[i * k + c];
    const int64_t j0 = p->upper ? i + 1 : 0, j1 = p->upper ? n : i;
    for (int64_t j = j0; j < j1; ++j) {
      const double aij = a[i * n + j];
      const float* xj = x + j * k;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] -= aij * (double)xj[c];
    }
    const double d = p->unit ? 1.0 : (double)a[i * n + i];
    for (int64_t c = c0; c < c1; ++c) x[i * k + c] = (float)(acc[c - c0] / d);
  }
}

typedef struct {
  const kiln_solve_triangular_f32_args_t* p;
  int64_t blocks; /* column blocks per pair */
} kiln_trsm_job_t;

static void kiln_trsm_task(void* arg, size_t task, int thread) {
  (void)thread;
  const kiln_trsm_job_t* j = arg;
  const int64_t b = (int64_t)task / j->blocks, blk = (int64_t)task % j->blocks;
  const int64_t c0 = blk * KILN_TRSM_COLS;
  const int64_t c1 = c0 + KILN_TRSM_COLS < j->p->k ? c0 + KILN_TRSM_COLS : j->p->k;
  kiln_trsm_block(j->p, b, c0, c1);
}

void kiln_solve_triangular_f32(const kiln_solve_triangular_f32_args_t* p, kiln_pool_t* pool) {
  if (p->batch <= 0 || p->n <= 0 || p->k <= 0) return;
  kiln_trsm_job_t job = {p, (p->k + KILN_TRSM_COLS - 1) / KILN_TRSM_COLS};
  kiln_pool_parallel_for(pool, (size_t)(p->batch * job.blocks), kiln_trsm_task, &job);
}

void kiln_solve_triangular_f32_reference(const kiln_solve_triangular_f32_args_t* p) {
  for (int64_t b = 0; b < p->batch; ++b)
    for (int64_t c = 0; c < p->k; ++c) kiln_trsm_block(p, b, c, c + 1);
}
