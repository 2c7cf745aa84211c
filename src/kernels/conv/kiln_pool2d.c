/* Max and average pooling over NCHW planes, one task per (n, c) plane.
 * Max pooling is separable (rows, then columns); average pooling is a
 * direct loop. Windows are small (2x2, 3x3), so the loop over a window is
 * short; the inner loop runs over the window's in-bounds columns only, so
 * padding costs no branches inside it. */
#include <math.h>

#include "kernels/conv/kiln_conv.h"

/* [lo, hi) of window taps t (position base + t * step) inside [0, size). */
static void kiln_pool_tap_range(int64_t base, int64_t step, int64_t taps, int64_t size,
                                int64_t* lo, int64_t* hi) {
  int64_t l = 0, h = taps;
  while (l < h && base + l * step < 0) ++l;
  while (h > l && base + (h - 1) * step >= size) --h;
  *lo = l;
  *hi = h;
}

/* max that keeps NaN (as torch): a when a is NaN, else the larger. Written
 * as a compare and a select, so loops over it vectorise. */
static inline float kiln_pool_max(float a, float b) { return a > b || a != a ? a : b; }

/* Separable max pooling: for each output row, the max over the window's
 * rows of whole input rows (contiguous, vectorised), then the max over the
 * window's columns of that row (kw loads per output instead of kh x kw).
 * Rows up to KILN_POOL_ROW_MAX wide; wider planes take the direct loop. */
#define KILN_POOL_ROW_MAX 4096

static void kiln_max_pool_plane_separable(const kiln_pool2d_f32_args_t* a, size_t task) {
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  float rowmax[KILN_POOL_ROW_MAX];
  const int64_t W = a->w;
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0 = i * a->sh - a->ph, u0, u1;
    kiln_pool_tap_range(y0, a->dh, a->kh, a->h, &u0, &u1);
    if (u0 >= u1) { /* no row of the window is inside: torch's -inf */
      for (int64_t j = 0; j < a->wo; ++j) y[i * a->wo + j] = -INFINITY;
      continue;
    }
    const float* r0 = x + (y0 + u0 * a->dh) * W;
    for (int64_t c = 0; c < W; ++c) rowmax[c] = r0[c];
    for (int64_t u = u0 + 1; u < u1; ++u) {
      const float* r = x + (y0 + u * a->dh) * W;
      for (int64_t c = 0; c < W; ++c) rowmax[c] = kiln_pool_max(r[c], rowmax[c]);
    }
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0 = j * a->sw - a->pw, v0, v1;
      kiln_pool_tap_range(x0, a->dw, a->kw, W, &v0, &v1);
      float m = -INFINITY;
      for (int64_t v = v0; v < v1; ++v) m = kiln_pool_max(rowmax[x0 + v * a->dw], m);
      y[i * a->wo + j] = m;
    }
  }
}

/* The direct loop: the reference, and the path for very wide planes. */
static void kiln_max_pool_plane_direct(const kiln_pool2d_f32_args_t* a, size_t task) {
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0 = i * a->sh - a->ph, u0, u1;
    kiln_pool_tap_range(y0, a->dh, a->kh, a->h, &u0, &u1);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0 = j * a->sw - a->pw, v0, v1;
      kiln_pool_tap_range(x0, a->dw, a->kw, a->w, &v0, &v1);
      float m = -INFINITY;
      int nan = 0;
      for (int64_t u = u0; u < u1; ++u) {
        const float* row = x + (y0 + u * a->dh) * a->w + x0;
        for (int64_t v = v0; v < v1; ++v) {
          float t = row[v * a->dw];
          m = t > m ? t : m;
          nan |= t != t;
        }
      }
      y[i * a->wo + j] = nan ? NAN : m;
    }
  }
}

static void kiln_avg_pool_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_f32_args_t* a = ctx;
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0 = i * a->sh - a->ph, u0, u1;
    kiln_pool_tap_range(y0, 1, a->kh, a->h, &u0, &u1);
    /* torch's divisor with count_include_pad: the window clipped to the
     * padded input (ceil_mode windows can hang past it). */
    int64_t pad_end_h = y0 + a->kh < a->h + a->ph ? y0 + a->kh : a->h + a->ph;
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0 = j * a->sw - a->pw, v0, v1;
      kiln_pool_tap_range(x0, 1, a->kw, a->w, &v0, &v1);
      float s = 0.0f;
      for (int64_t u = u0; u < u1; ++u) {
        const float* row = x + (y0 + u) * a->w + x0;
        for (int64_t v = v0; v < v1; ++v) s += row[v];
      }
      int64_t count;
      if (a->count_include_pad) {
        int64_t pad_end_w = x0 + a->kw < a->w + a->pw ? x0 + a->kw : a->w + a->pw;
        count = (pad_end_h - y0) * (pad_end_w - x0);
      } else {
        count = (u1 - u0) * (v1 - v0);
      }
      if (a->divisor_override > 0) count = a->divisor_override;
      y[i * a->wo + j] = count > 0 ? s / (float)count : 0.0f;
    }
  }
}

static void kiln_max_pool_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_f32_args_t* a = ctx;
  if (a->w <= KILN_POOL_ROW_MAX) kiln_max_pool_plane_separable(a, task);
  else kiln_max_pool_plane_direct(a, task);
}

void kiln_max_pool2d_f32_reference(const kiln_pool2d_f32_args_t* a) {
  if (a->ho <= 0 || a->wo <= 0) return;
  for (int64_t p = 0; p < a->n * a->c; ++p) kiln_max_pool_plane_direct(a, (size_t)p);
}

void kiln_max_pool2d_f32(const kiln_pool2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_max_pool_plane, (void*)a);
}

void kiln_avg_pool2d_f32(const kiln_pool2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_avg_pool_plane, (void*)a);
}
