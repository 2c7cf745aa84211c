/* Sampling and bag kernels: GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG (see
 * ir/kiln_ops.h). Scalar C: these ops are rare in inference graphs and
 * correctness against eager comes first. Geometry has been validated by
 * kiln_shape_infer_sample.c; values that only exist at run time (indices,
 * offsets) are checked here and reported, never used to read out of bounds. */
#ifndef KILN_SAMPLE_H
#define KILN_SAMPLE_H

#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_status.h"
#include "base/kiln_dtype.h"

typedef enum { KILN_GRID_BILINEAR = 0, KILN_GRID_NEAREST = 1 } kiln_grid_mode_t;
typedef enum { KILN_GRID_ZEROS = 0, KILN_GRID_BORDER = 1, KILN_GRID_REFLECTION = 2 } kiln_grid_padding_t;

/* y (n, c, ho, wo) sampled from x (n, c, h, w) at grid (n, ho, wo, 2) (x, y
 * in [-1, 1]) as torch.nn.functional.grid_sample on the CPU: the same
 * unnormalisation, padding and masking arithmetic, so results match eager's
 * bit for bit, NaN and Inf in the grid included. */
void kiln_grid_sample_2d_f32(kiln_grid_mode_t mode, kiln_grid_padding_t padding, int align_corners,
                             int64_t n, int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo,
                             const float* x, const float* grid, float* y, kiln_pool_t* pool);

/* torch.nn.functional.fold: y (n, c, h, w) = the sum of x's (n, c * kh * kw,
 * lh * lw) columns placed back at their windows (k: kernel, d: dilation, p:
 * padding, s: stride per dim; lh, lw the number of windows). Sums run in
 * torch's order (channel-column, then window row, then window column), so
 * results match eager's, infinities and NaN included. */
typedef struct {
  int64_t n, c, h, w, kh, kw, dh, dw, ph, pw, sh, sw, lh, lw;
} kiln_col2im_args_t;
void kiln_col2im_f32(const kiln_col2im_args_t* a, const float* x, float* y, kiln_pool_t* pool);

/* torch.nn.functional.embedding_bag: y (bags, dim), bag b reducing rows
 * weight[indices[i]] for i in [offsets[b], offsets[b + 1]) (the last bag
 * ends at n_indices unless include_last_offset). mode 0 sum (times
 * per_sample_weights[i] when given), 1 mean, 2 max; rows equal to
 * padding_idx (-1: none) are skipped and not counted; an empty bag is 0.
 * Indices and offsets are int64 or int32 (index_dtype, offset_dtype).
 * Returns KILN_INVALID_ARGUMENT when an index is outside [0, rows) or the
 * offsets do not start at 0, decrease or pass n_indices, or (with
 * include_last_offset) the last offset is not n_indices: nothing out of
 * bounds is read. */
kiln_status_t kiln_embedding_bag_f32(int mode, int include_last_offset, int64_t padding_idx,
                                     int64_t rows, int64_t dim, const float* weight,
                                     kiln_dtype_t index_dtype, int64_t n_indices,
                                     const void* indices, kiln_dtype_t offset_dtype,
                                     int64_t n_offsets, const void* offsets,
                                     const float* per_sample_weights, float* y);

#endif /* KILN_SAMPLE_H */
