/* N-d iteration helpers for the elementwise kernels (internal). */
#ifndef KILN_ND_H
#define KILN_ND_H

#include "kernels/eltwise/kiln_eltwise.h"

/* Called once per row of the innermost dimension: offsets[k] is operand k's
 * element offset at the row's start, strides[k] its inner element stride. */
typedef void (*kiln_nd_row_fn)(void* ctx, int64_t n, const int64_t* offsets,
                               const int64_t* strides);

int64_t kiln_nd_numel(const kiln_nd_t* nd);
/* Drops size-1 dims and merges dims that are contiguous in every operand. */
void kiln_nd_collapse(kiln_nd_t* nd, int n_ops);
/* Runs fn over every row, split over the pool. nd must be collapsed. */
void kiln_nd_for_rows(const kiln_nd_t* nd, int n_ops, kiln_nd_row_fn fn, void* ctx,
                      kiln_pool_t* pool);

#endif /* KILN_ND_H */
