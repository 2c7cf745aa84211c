/* GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG as scalar loops (see
 * kiln_sample.h). The grid sampler reproduces eager's CPU arithmetic step
 * for step, because weights computed in another order differ in the last
 * bit and NaN/Inf in the grid must land as eager's do. Eager's AVX2 build
 * fuses two multiply-adds (the align_corners=False unnormalisation and the
 * weighted sum of the four corners); fmaf does the same here (exact with or
 * without an FMA unit), every other step is a separately rounded operation
 * (kiln builds as ISO C11, where GCC does not contract). */
#include "kernels/nn/kiln_sample.h"

#include <math.h>
#include <string.h>

/* ---- GRID_SAMPLER_2D ------------------------------------------------------------ */

/* One spatial axis: grid coordinate in [-1, 1] -> pixel coordinate. */
typedef struct {
  float max_val, scale, low, twice_span;
  int empty, align, padding;
} grid_axis_t;

static grid_axis_t grid_axis_make(int64_t size, int align, int padding) {
  grid_axis_t a;
  a.align = align, a.padding = padding;
  a.max_val = (float)(size - 1);
  if (align) {  /* -1 and 1 are the centres of the corner pixels */
    a.scale = (float)(size - 1) / 2;
    a.low = 0.0f;
    a.twice_span = (float)(size - 1) * 2;
    a.empty = size <= 1;
  } else {  /* -1 and 1 are the outer edges of the corner pixels */
    a.scale = (float)size / 2;
    a.low = -0.5f;
    a.twice_span = (float)size * 2;
    a.empty = size <= 0;
  }
  return a;
}

/* Clamped to [0, max_val]; NaN becomes 0 (eager's operand order does that). */
static float grid_clip(const grid_axis_t* a, float v) {
  v = v > 0.0f ? v : 0.0f;
  return v < a->max_val ? v : a->max_val;
}

/* A NaN-propagating minimum, as eager's vector minimum. */
static float grid_min_nan(float a, float b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a < b ? a : b;
}

static float grid_reflect(const grid_axis_t* a, float v) {
  if (a->align && a->empty) return 0.0f;
  float abs_in = fabsf(v - a->low);
  float flips = truncf(abs_in / a->twice_span);
  float extra = abs_in - flips * a->twice_span;
  return grid_min_nan(extra, a->twice_span - extra) + a->low;
}

static float grid_axis_apply(const grid_axis_t* a, float g) {
  float v = a->align ? (g + 1.0f) * a->scale : fmaf(g + 1.0f, a->scale, -0.5f);
  if (a->padding == KILN_GRID_BORDER) return grid_clip(a, v);
  if (a->padding == KILN_GRID_REFLECTION) return grid_clip(a, grid_reflect(a, v));
  return v;
}

/* An integral float as an index; NaN and values outside int32 become
 * INT32_MIN (as the CPU's conversion does), which no bounds test accepts. */
static int64_t grid_index(float f) {
  return (f >= -2147483648.0f && f < 2147483648.0f) ? (int64_t)f : (int64_t)INT32_MIN;
}

typedef struct {
  kiln_grid_mode_t mode;
  kiln_grid_padding_t padding;
  int align;
  int64_t c, h, w, ho, wo;
  const float* x;
  const float* grid;
  float* y;
} grid_ctx_t;

/* Task: one output row (batch item, output row i). */
static void grid_row(void* vctx, size_t task, int thread) {
  (void)thread;
  const grid_ctx_t* k = vctx;
  const int64_t b = (int64_t)task / k->ho, i = (int64_t)task % k->ho;
  const grid_axis_t ax = grid_axis_make(k->w, k->align, k->padding);
  const grid_axis_t ay = grid_axis_make(k->h, k->align, k->padding);
  const int64_t plane = k->h * k->w, oplane = k->ho * k->wo;
  const float* xb = k->x + b * k->c * plane;
  float* yb = k->y + b * k->c * oplane + i * k->wo;
  for (int64_t j = 0; j < k->wo; ++j) {
    const float* g = k->grid + ((b * k->ho + i) * k->wo + j) * 2;
    const float fx = grid_axis_apply(&ax, g[0]), fy = grid_axis_apply(&ay, g[1]);
    if (k->mode == KILN_GRID_NEAREST) {
      const int64_t ix = grid_index(nearbyintf(fx)), iy = grid_index(nearbyintf(fy));
      const int ok = ix >= 0 && ix < k->w && iy >= 0 && iy < k->h;
      for (int64_t ch = 0; ch < k->c; ++ch)
        yb[ch * oplane + j] = ok ? xb[ch * plane + iy * k->w + ix] : 0.0f;
      continue;
    }
    const float x_w = floorf(fx), y_n = floorf(fy);
    const float we = fx - x_w, ea = 1.0f - we, no = fy - y_n, so = 1.0f - no;
    const float nw = so * ea, ne = so * we, sw = no * ea, se = no * we;
    const int64_t ixw = grid_index(x_w), iyn = grid_index(y_n), ixe = ixw + 1, iys = iyn + 1;
    const int w_ok = ixw >= 0 && ixw < k->w, e_ok = ixe >= 0 && ixe < k->w;
    const int n_ok = iyn >= 0 && iyn < k->h, s_ok = iys >= 0 && iys < k->h;
    for (int64_t ch = 0; ch < k->c; ++ch) {
      const float* xc = xb + ch * plane;
      /* A corner outside the image reads as 0 (times its weight, so an
       * infinite weight still gives NaN, as eager). */
      const float vnw = (n_ok && w_ok) ? xc[iyn * k->w + ixw] : 0.0f;
      const float vne = (n_ok && e_ok) ? xc[iyn * k->w + ixe] : 0.0f;
      const float vsw = (s_ok && w_ok) ? xc[iys * k->w + ixw] : 0.0f;
      const float vse = (s_ok && e_ok) ? xc[iys * k->w + ixe] : 0.0f;
      yb[ch * oplane + j] = fmaf(vse, se, fmaf(vsw, sw, fmaf(vne, ne, vnw * nw)));
    }
  }
}

void kiln_grid_sample_2d_f32(kiln_grid_mode_t mode, kiln_grid_padding_t padding, int align_corners,
                             int64_t n, int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo,
                             const float* x, const float* grid, float* y, kiln_pool_t* pool) {
  grid_ctx_t k = {mode, padding, align_corners, c, h, w, ho, wo, x, grid, y};
  if (n * ho == 0) return;
  kiln_pool_parallel_for(pool, (size_t)(n * ho), grid_row, &k);
}

/* ---- COL2IM --------------------------------------------------------------------- */

typedef struct {
  const kiln_col2im_args_t* a;
  const float* x;
  float* y;
} col2im_ctx_t;

/* Task: one (batch item, channel) plane of y. */
static void col2im_plane(void* vctx, size_t task, int thread) {
  (void)thread;
  const col2im_ctx_t* k = vctx;
  const kiln_col2im_args_t* a = k->a;
  const int64_t b = (int64_t)task / a->c, c = (int64_t)task % a->c;
  const int64_t kk = a->kh * a->kw, cols = a->lh * a->lw;
  float* y = k->y + ((b * a->c) + c) * a->h * a->w;
  const float* x = k->x + (b * a->c * kk) * cols;
  memset(y, 0, (size_t)(a->h * a->w) * sizeof(float));
  for (int64_t cc = c * kk; cc < (c + 1) * kk; ++cc) {
    const int64_t w_off = cc % a->kw, h_off = (cc / a->kw) % a->kh;
    for (int64_t hc = 0; hc < a->lh; ++hc) {
      const int64_t hi = hc * a->sh - a->ph + h_off * a->dh;
      if (hi < 0 || hi >= a->h) continue;
      const float* xr = x + (cc * a->lh + hc) * a->lw;
      for (int64_t wc = 0; wc < a->lw; ++wc) {
        const int64_t wi = wc * a->sw - a->pw + w_off * a->dw;
        if (wi >= 0 && wi < a->w) y[hi * a->w + wi] += xr[wc];
      }
    }
  }
}

void kiln_col2im_f32(const kiln_col2im_args_t* a, const float* x, float* y, kiln_pool_t* pool) {
  col2im_ctx_t k = {a, x, y};
  if (a->n * a->c == 0) return;
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), col2im_plane, &k);
}

/* ---- EMBEDDING_BAG -------------------------------------------------------------- */

static int64_t bag_load(kiln_dtype_t dtype, const void* p, int64_t i) {
  if (dtype == KILN_I32) return ((const int32_t*)p)[i];
  return ((const int64_t*)p)[i];
}

kiln_status_t kiln_embedding_bag_f32(int mode, int include_last_offset, int64_t padding_idx,
                                     int64_t rows, int64_t dim, const float* weight,
                                     kiln_dtype_t index_dtype, int64_t n_indices,
                                     const void* indices, kiln_dtype_t offset_dtype,
                                     int64_t n_offsets, const void* offsets,
                                     const float* per_sample_weights, float* y) {
  const int64_t bags = include_last_offset ? n_offsets - 1 : n_offsets;
  /* Everything is checked before any row is read. */
  for (int64_t i = 0; i < n_indices; ++i) {
    int64_t v = bag_load(index_dtype, indices, i);
    if (v < 0 || v >= rows)
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "embedding_bag: index %lld is out of range for %lld rows",
                              (long long)v, (long long)rows);
  }
  for (int64_t b = 0; b < n_offsets; ++b) {
    int64_t o = bag_load(offset_dtype, offsets, b);
    int64_t prev = b ? bag_load(offset_dtype, offsets, b - 1) : 0;
    if ((b == 0 && o != 0) || o < prev || o > n_indices)
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "embedding_bag: offsets must start at 0 and not decrease nor "
                              "pass the %lld indices; offsets[%lld] = %lld",
                              (long long)n_indices, (long long)b, (long long)o);
  }
  /* With include_last_offset the last offset closes the last bag; torch
   * documents it as len(indices), and eager's kernels disagree when it is
   * not (some stop there, some run on to the end): refused, not guessed. */
  if (include_last_offset && n_offsets > 0 &&
      bag_load(offset_dtype, offsets, n_offsets - 1) != n_indices)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "embedding_bag: with include_last_offset the last offset must be "
                            "the number of indices (%lld), got %lld",
                            (long long)n_indices,
                            (long long)bag_load(offset_dtype, offsets, n_offsets - 1));
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t start = bag_load(offset_dtype, offsets, b);
    const int64_t end = b + 1 < n_offsets ? bag_load(offset_dtype, offsets, b + 1) : n_indices;
    float* out = y + b * dim;
    memset(out, 0, (size_t)dim * sizeof(float));
    int64_t count = 0;
    for (int64_t i = start; i < end; ++i) {
      const int64_t r = bag_load(index_dtype, indices, i);
      if (r == padding_idx) continue;
      const float* row = weight + r * dim;
      if (mode == 2) {  /* max: a later NaN never replaces a number (eager's rule) */
        for (int64_t d = 0; d < dim; ++d)
          if (count == 0 || row[d] > out[d]) out[d] = row[d];
      } else if (per_sample_weights) {
        const float s = per_sample_weights[i];
        for (int64_t d = 0; d < dim; ++d) out[d] += s * row[d];
      } else {
        for (int64_t d = 0; d < dim; ++d) out[d] += row[d];
      }
      ++count;
    }
    if (mode == 1 && count > 0)
      for (int64_t d = 0; d < dim; ++d) out[d] /= (float)count;
  }
  return kiln_ok();
}
