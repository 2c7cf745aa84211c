/* Triangular solve (torch.linalg.solve_triangular with left=True): for
 * each of `batch` pairs, X with A X = B, A (n, n) triangular, B and X
 * (n, k), all dense row-major float32. Lower: forward substitution,
 *
 *   X[i] = (B[i] - sum_{j < i} A[i, j] X[j]) / A[i, i]
 *
 * upper: the same from the last row up (j > i). unit: the diagonal is
 * taken as 1 and never read. Only the triangle named is read. Each sum is
 * taken in double over the rows already solved (as stored, in float32),
 * so the result is at least as accurate as float32 forward substitution;
 * a zero on the diagonal gives inf or NaN, as LAPACK's trsm does (torch
 * does not check). Gated delta-rule attention (Qwen3-Next, Qwen3.5) solves
 * unit lower systems of its chunk size (64) in prefill. */
#ifndef KILN_SOLVE_TRIANGULAR_H
#define KILN_SOLVE_TRIANGULAR_H

#include <stdint.h>

#include "base/kiln_pool.h"
#include "kernels/kiln_isa_lists.h"

typedef struct {
  int64_t batch, n, k;
  int upper, unit;
  const float* a; /* (batch, n, n) */
  const float* b; /* (batch, n, k) */
  float* x;       /* (batch, n, k); may not alias a or b */
} kiln_solve_triangular_f32_args_t;

/* Split over the pool by (batch, column block). */
void kiln_solve_triangular_f32(const kiln_solve_triangular_f32_args_t* args, kiln_pool_t* pool);
/* The same arithmetic, one column at a time, on the calling thread. */
void kiln_solve_triangular_f32_reference(const kiln_solve_triangular_f32_args_t* args);

/* Columns [c0, c1) of pair `pair`, at most KILN_TRSM_COLS of them, per ISA
 * (kiln_solve_triangular_block.c). */
#define KILN_TRSM_COLS 64
#define KILN_TRSM_DECLARE_(isa, LEVEL, unused)                                                  \
  void kiln_solve_triangular_block__##isa(const kiln_solve_triangular_f32_args_t* args,        \
                                          int64_t pair, int64_t c0, int64_t c1);
KILN_SOLVE_ISAS(KILN_TRSM_DECLARE_, ~)
#undef KILN_TRSM_DECLARE_

#endif /* KILN_SOLVE_TRIANGULAR_H */
