/* N-d iteration shared by the elementwise kernels: stride set-up, dimension
 * collapsing (so a broadcast add over (8, 128, 768) runs as one long row when
 * strides allow), and a row loop split over the thread pool. */
#include "kernels/eltwise/kiln_nd.h"

#include <string.h>

void kiln_nd_set_broadcast(kiln_nd_t* nd, int k, int32_t rank, const int64_t* shape) {
  int64_t stride = 1;
  for (int32_t d = nd->rank - 1; d >= 0; --d) {
    int32_t sd = d - (nd->rank - rank);
    if (sd < 0 || shape[sd] == 1) {
      nd->strides[k][d] = 0;
    } else {
      nd->strides[k][d] = stride;
    }
    if (sd >= 0) stride *= shape[sd];
  }
}

void kiln_nd_set_dense_output(kiln_nd_t* nd) {
  int64_t stride = 1;
  for (int32_t d = nd->rank - 1; d >= 0; --d) {
    nd->strides[0][d] = stride;
    stride *= nd->shape[d];
  }
}

int64_t kiln_nd_numel(const kiln_nd_t* nd) {
  int64_t n = 1;
  for (int32_t d = 0; d < nd->rank; ++d) n *= nd->shape[d];
  return n;
}

void kiln_nd_collapse(kiln_nd_t* nd, int n_ops) {
  kiln_nd_t c;
  memset(&c, 0, sizeof(c));
  for (int32_t d = 0; d < nd->rank; ++d) {
    if (nd->shape[d] == 1) continue; /* size-1 dims contribute nothing */
    if (c.rank > 0) {
      int32_t last = c.rank - 1;
      int mergeable = 1;
      for (int k = 0; k < n_ops; ++k)
        mergeable &= c.strides[k][last] == nd->strides[k][d] * nd->shape[d];
      if (mergeable) {
        c.shape[last] *= nd->shape[d];
        for (int k = 0; k < n_ops; ++k) c.strides[k][last] = nd->strides[k][d];
        continue;
      }
    }
    c.shape[c.rank] = nd->shape[d];
    for (int k = 0; k < n_ops; ++k) c.strides[k][c.rank] = nd->strides[k][d];
    c.rank++;
  }
  if (c.rank == 0) { /* a scalar: one row of one element */
    c.rank = 1;
    c.shape[0] = 1;
    for (int k = 0; k < n_ops; ++k) c.strides[k][0] = 1;
  }
  *nd = c;
}

/* Elements a task is given at least: below ~32K a thread hand-off costs
 * more than it saves. */
#define KILN_ND_MIN_TASK 32768

typedef struct {
  const kiln_nd_t* nd;
  int n_ops;
  int64_t rows, rows_per_task;
  int64_t pieces, piece; /* each row cut in `pieces` runs of `piece` elements, or 1 */
  kiln_nd_row_fn fn;
  void* ctx;
} kiln_nd_job_t;

/* Task = (row, piece) when rows are cut: the row's offsets by division,
 * then the piece's start along the inner stride. */
static void kiln_nd_piece_task(const kiln_nd_job_t* job, size_t task) {
  const kiln_nd_t* nd = job->nd;
  int64_t row = (int64_t)task / job->pieces, j0 = (int64_t)task % job->pieces * job->piece;
  int32_t outer = nd->rank - 1;
  int64_t inner = nd->shape[outer];
  int64_t n = inner - j0 < job->piece ? inner - j0 : job->piece;
  int64_t offsets[KILN_ND_MAX_OPERANDS], inner_strides[KILN_ND_MAX_OPERANDS];
  for (int k = 0; k < job->n_ops; ++k) {
    inner_strides[k] = nd->strides[k][outer];
    offsets[k] = j0 * inner_strides[k];
  }
  for (int32_t d = outer - 1; d >= 0; --d) {
    for (int k = 0; k < job->n_ops; ++k) offsets[k] += row % nd->shape[d] * nd->strides[k][d];
    row /= nd->shape[d];
  }
  job->fn(job->ctx, n, offsets, inner_strides);
}

static void kiln_nd_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_nd_job_t* job = p;
  if (job->pieces > 1) {
    kiln_nd_piece_task(job, task);
    return;
  }
  const kiln_nd_t* nd = job->nd;
  int64_t r0 = (int64_t)task * job->rows_per_task;
  int64_t r1 = r0 + job->rows_per_task < job->rows ? r0 + job->rows_per_task : job->rows;
  int32_t outer = nd->rank - 1;
  int64_t inner = nd->shape[outer];
  int64_t inner_strides[KILN_ND_MAX_OPERANDS];
  for (int k = 0; k < job->n_ops; ++k) inner_strides[k] = nd->strides[k][outer];
  /* The first row's index by division, then an odometer: rows can be
   * short (a patch embedding's gather copies 14 floats a row), where a
   * division per dim per row cost more than the copy. */
  int64_t offsets[KILN_ND_MAX_OPERANDS] = {0}, idx[KILN_ND_MAX_RANK] = {0};
  int64_t rem = r0;
  for (int32_t d = outer - 1; d >= 0; --d) {
    idx[d] = rem % nd->shape[d];
    rem /= nd->shape[d];
    for (int k = 0; k < job->n_ops; ++k) offsets[k] += idx[d] * nd->strides[k][d];
  }
  for (int64_t r = r0; r < r1; ++r) {
    job->fn(job->ctx, inner, offsets, inner_strides);
    for (int32_t d = outer - 1; d >= 0; --d) {
      for (int k = 0; k < job->n_ops; ++k) offsets[k] += nd->strides[k][d];
      if (++idx[d] < nd->shape[d]) break;
      for (int k = 0; k < job->n_ops; ++k) offsets[k] -= nd->shape[d] * nd->strides[k][d];
      idx[d] = 0;
    }
  }
}

void kiln_nd_for_rows(const kiln_nd_t* nd, int n_ops, kiln_nd_row_fn fn, void* ctx,
                      kiln_pool_t* pool) {
  int64_t inner = nd->shape[nd->rank - 1];
  int64_t numel = kiln_nd_numel(nd);
  if (numel == 0) return;
  kiln_nd_job_t job = {nd, n_ops, numel / inner, 0, 1, inner, fn, ctx};
  int threads = kiln_pool_size(pool);
  const int64_t want = (int64_t)threads * 4;
  if (threads > 1 && job.rows < want && inner >= 2 * KILN_ND_MIN_TASK) {
    /* Fewer rows than tasks wanted, and long ones (a contiguous op
     * collapses to a single row): cut each row in pieces, whole 64-byte
     * lines of a float output where the row is dense, so every thread
     * gets work. As one row, a (8, 128, 768) add ran on one thread. */
    int64_t pieces = (want + job.rows - 1) / job.rows, most = inner / KILN_ND_MIN_TASK;
    if (pieces > most) pieces = most;
    job.piece = ((inner + pieces - 1) / pieces + 15) & ~(int64_t)15;
    job.pieces = (inner + job.piece - 1) / job.piece;
    kiln_pool_parallel_for(pool, (size_t)(job.rows * job.pieces), kiln_nd_task, &job);
    return;
  }
  int64_t min_rows = (KILN_ND_MIN_TASK + inner - 1) / inner;
  int64_t per = (job.rows + want - 1) / want;
  job.rows_per_task = per < min_rows ? min_rows : per;
  size_t tasks = (size_t)((job.rows + job.rows_per_task - 1) / job.rows_per_task);
  kiln_pool_parallel_for(pool, tasks, kiln_nd_task, &job);
}
