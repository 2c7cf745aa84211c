/* Padding, scatters, scans and sorts: the kernels of PAD, STRIDED_SCATTER,
 * SCATTER, SCAN and ARGSORT. Leaves like the rest of kernels/eltwise: they
 * see pointers, shapes and strides already validated by the IR's shape rules
 * (kiln_shape_infer_movement.c), never the graph. Data-dependent indices
 * (SCATTER's) are checked here, per element, before any write. */
#ifndef KILN_MOVEMENT_OPS_H
#define KILN_MOVEMENT_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_status.h"
#include "base/kiln_dtype.h"

typedef enum kiln_pad_mode_e {
  KILN_PAD_CONSTANT = 0,
  KILN_PAD_REFLECT,
  KILN_PAD_REPLICATE,
  KILN_PAD_MODE_COUNT
} kiln_pad_mode_t;

/* y (rank, y_shape) = x (rank, x_shape) with before[d] elements added in
 * front of dim d (negative: removed) and y_shape[d] - x_shape[d] - before[d]
 * after. Constant mode writes the elem_size bytes at `fill`; reflect mirrors
 * about the edge element (pad < size); replicate repeats the edge. Any
 * element size. kiln_pad works row by row (memcpy of the interior) over the
 * pool; kiln_pad_reference maps every element on its own. */
void kiln_pad(kiln_pad_mode_t mode, size_t elem_size, int32_t rank, const int64_t* x_shape,
              const int64_t* y_shape, const int64_t* before, const void* fill, const void* x,
              void* y, kiln_pool_t* pool);
void kiln_pad_reference(kiln_pad_mode_t mode, size_t elem_size, int32_t rank,
                        const int64_t* x_shape, const int64_t* y_shape, const int64_t* before,
                        const void* fill, const void* x, void* y);

/* y (y_numel elements) = base, then the dense src (rank, shape) written at
 * y[offset + sum(i_d * strides[d])], in row-major order of src (so the last
 * write wins where the view overlaps itself). */
void kiln_strided_scatter(size_t elem_size, int64_t y_numel, const void* base, int32_t rank,
                          const int64_t* shape, const int64_t* strides, int64_t offset,
                          const void* src, void* y);

typedef enum kiln_scatter_reduce_e {
  KILN_SCATTER_ASSIGN = 0,
  KILN_SCATTER_SUM,
  KILN_SCATTER_PROD,
  KILN_SCATTER_MEAN,
  KILN_SCATTER_AMAX,
  KILN_SCATTER_AMIN,
  KILN_SCATTER_REDUCE_COUNT
} kiln_scatter_reduce_t;

/* torch.scatter / scatter_reduce along `axis` of dense x, index and src of
 * one rank: y = x, then for each position p of index, y[p, p[axis] =
 * index[p]] (reduce)= src[p]. Reductions take float32, int64 and int32, and
 * all but mean take bool (sum and amax are or, prod and amin and, as
 * torch's); assignment any dtype; without include_self a target starts from the
 * reduction's identity. Mean divides by the number of contributions (floor
 * division for integers, as torch). amax/amin propagate NaN. *out_bad gets
 * the number of indices outside [-size, size) (negative ones count from the
 * end) when wrap_negative, else outside [0, size): nothing is written for
 * them and the caller reports an error.
 * Fails only when mean's count array cannot be allocated. */
kiln_status_t kiln_scatter(kiln_scatter_reduce_t reduce, int include_self, int wrap_negative,
                           kiln_dtype_t dtype,
                           int32_t rank, const int64_t* x_shape, int32_t axis, const void* x,
                           const int64_t* index_shape, kiln_dtype_t index_dtype,
                           const void* index, const int64_t* src_shape, const void* src, void* y,
                           int64_t* out_bad);

/* Inclusive scan (op 0 sum, 1 product) along the middle axis of a dense
 * (outer, len, inner) tensor of float32 (accumulated in double, as torch's
 * CPU cumsum), int64 or int32 (wrapping on overflow). */
void kiln_scan(int op, kiln_dtype_t dtype, int64_t outer, int64_t len, int64_t inner,
               const void* x, void* y, kiln_pool_t* pool);

/* Indices of a stable sort along the middle axis of a dense (outer, len,
 * inner) tensor of float32, int64, int32 or bool; NaN sorts as the largest
 * value. y (outer, k, inner) keeps the first k. Fails only when scratch
 * memory cannot be allocated. */
kiln_status_t kiln_argsort(kiln_dtype_t dtype, int64_t outer, int64_t len, int64_t inner,
                           int descending, int64_t k, const void* x, int64_t* y,
                           kiln_pool_t* pool);

#endif /* KILN_MOVEMENT_OPS_H */
