/* Grouped GEMM: a mixture of experts' expert layer, where the rows of x
 * (tokens, sorted by expert) fall into consecutive segments and segment e
 * is multiplied by expert e's weight. The segments are given at run time
 * as cumulative row ends (transformers' grouped_mm_fallback, whose
 * semantics GROUPED_MM follows exactly; see KILN_OP_GROUPED_MM in
 * ir/kiln_ops.h):
 *
 *   y = 0; start = 0;
 *   for e in 0..E-1:
 *     if offs[e] != start:
 *       rows of x[start:offs[e]] (Python slicing) · w[e] -> those rows of y
 *       start = offs[e]
 *
 * Each segment is one kiln_gemm_f32 call (so decode's few rows take the
 * GEMV path, reading a transposed w in place), one after another; any
 * offsets are safe (a slice clamps to [0, S] as Python's does). */
#ifndef KILN_GEMM_GROUPED_H
#define KILN_GEMM_GROUPED_H

#include <stdint.h>

#include "base/kiln_pool.h"

typedef struct kiln_gemm_grouped_f32_args_s {
  int64_t s, k, n, experts;
  const float* x; /* (S, K) dense */
  const float* w; /* (E, K, N) dense, or (E, N, K) dense when w_transposed */
  int w_transposed;
  const void* offs; /* (E) int64 (offs_i64) or int32 */
  int offs_i64;
  float* y; /* (S, N) dense; every element is written */
} kiln_gemm_grouped_f32_args_t;

void kiln_gemm_grouped_f32(const kiln_gemm_grouped_f32_args_t* args, kiln_pool_t* pool);
/* The same walk over kiln_gemm_f32_reference. */
void kiln_gemm_grouped_f32_reference(const kiln_gemm_grouped_f32_args_t* args);

#endif /* KILN_GEMM_GROUPED_H */
