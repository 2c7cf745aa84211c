/* Max and average pooling over NCHW planes: direct loops, one task per
 * (n, c) plane. Windows are small (2x2, 3x3), so the loop over a window is
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

static void kiln_max_pool_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_f32_args_t* a = ctx;
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
      y[i * a->wo + j] = count > 0 ? s / (float)count : 0.0f;
    }
  }
}

void kiln_max_pool2d_f32(const kiln_pool2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_max_pool_plane, (void*)a);
}

void kiln_avg_pool2d_f32(const kiln_pool2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_avg_pool_plane, (void*)a);
}
