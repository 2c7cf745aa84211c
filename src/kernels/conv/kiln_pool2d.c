/* Max and average pooling over NCHW planes, one task per (n, c) plane.
 * Max pooling is separable (rows, then columns); average pooling runs
 * kiln_conv_planes.c's per-ISA plane kernels, with the direct loop as its
 * reference and the path for very wide planes, and a global average (one
 * window over the whole plane) as row means. Windows are small (2x2, 3x3),
 * so the loop over a window is short; the inner loop runs over the
 * window's in-bounds columns only, so padding costs no branches inside
 * it. */
#include <math.h>

#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_planes.h"
#include "kernels/conv/kiln_pool_window.h"
#include "kernels/eltwise/kiln_eltwise.h"

/* max that keeps NaN (as torch): a when a is NaN, else the larger. Written
 * as a compare and a select, so loops over it vectorise. */
static inline float kiln_pool_max(float a, float b) { return a > b || a != a ? a : b; }

/* Separable max pooling: for each output row, the max over the window's
 * rows of whole input rows (contiguous, vectorised), then the max over the
 * window's columns of that row (kw loads per output instead of kh x kw).
 * The row of maxima sits between -inf borders as wide as the windows reach
 * past the plane (padding, ceil mode), so every output column takes all kw
 * taps with no bounds to work out (a -inf tap never changes the max, NaN
 * included: kiln_pool_max keeps the running NaN), and the column maxima
 * are kw contiguous passes over the row, every sw-th kept. Working out
 * each output's in-bounds taps and taking its max in scalars had cost
 * more than the rows: ResNet's stem pool (64 x 112 x 112, 3x3/2) took
 * 0.67 ms on one Zen 5 core, 0.30 so (0.97 -> 0.17 ms in a model at 2
 * threads). Rows up to KILN_POOL_ROW_MAX wide with their borders; wider
 * planes take the direct loop. */
#define KILN_POOL_ROW_MAX 4096

/* Floats of the bordered row (left border pw), or 0 when it does not fit. */
static int64_t kiln_max_pool_row_span(const kiln_pool2d_f32_args_t* a) {
  const int64_t reach = (a->wo - 1) * a->sw - a->pw + (a->kw - 1) * a->dw + 1;
  const int64_t span = a->pw + (reach > a->w ? reach : a->w);
  return a->pw >= 0 && span <= KILN_POOL_ROW_MAX ? span : 0;
}

static void kiln_max_pool_plane_separable(const kiln_pool2d_f32_args_t* a, size_t task) {
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  float buf[KILN_POOL_ROW_MAX], colmax[KILN_POOL_ROW_MAX];
  const int64_t W = a->w, span = kiln_max_pool_row_span(a), kw = a->kw;
  const int64_t ncol = (a->wo - 1) * a->sw + 1; /* window starts, in buf */
  float* rowmax = buf + a->pw;
  for (int64_t c = 0; c < a->pw; ++c) buf[c] = -INFINITY;
  for (int64_t c = a->pw + W; c < span; ++c) buf[c] = -INFINITY;
  const kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0, u0, u1;
    kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
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
    /* The window's max at every column (kw contiguous passes, which
     * vectorise), then every sw-th of them. */
    for (int64_t c = 0; c < ncol; ++c) colmax[c] = buf[c];
    for (int64_t v = 1; v < kw; ++v) {
      const float* t = buf + v * a->dw;
      for (int64_t c = 0; c < ncol; ++c) colmax[c] = kiln_pool_max(t[c], colmax[c]);
    }
    for (int64_t j = 0; j < a->wo; ++j) y[i * a->wo + j] = colmax[j * a->sw];
  }
}

/* The direct loop: the reference, and the path for very wide planes. */
static void kiln_max_pool_plane_direct(const kiln_pool2d_f32_args_t* a, size_t task) {
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  const kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0, u0, u1;
    kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0, v0, v1;
      kiln_pool_window_cols(&g, j, &x0, &v0, &v1);
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

/* The direct loop: the reference, and the path for very wide planes. */
static void kiln_avg_pool_plane_direct(const kiln_pool2d_f32_args_t* a, size_t task) {
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  g.dh = g.dw = 1; /* average pooling has no dilation (its dh, dw are ignored) */
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0, u0, u1;
    kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0, v0, v1;
      kiln_pool_window_cols(&g, j, &x0, &v0, &v1);
      float s = 0.0f;
      for (int64_t u = u0; u < u1; ++u) {
        const float* row = x + (y0 + u) * a->w + x0;
        for (int64_t v = v0; v < v1; ++v) s += row[v];
      }
      int64_t count = kiln_pool_avg_count(&g, y0, u0, u1, x0, v0, v1);
      y[i * a->wo + j] = count != 0 ? s / (float)count : 0.0f;
    }
  }
}

static void kiln_max_pool_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_f32_args_t* a = ctx;
  if (kiln_max_pool_row_span(a)) kiln_max_pool_plane_separable(a, task);
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

typedef struct {
  const kiln_pool2d_f32_args_t* a;
  kiln_avg_pool_plane_fn plane; /* NULL: the direct loop */
} kiln_avg_pool_t;

static void kiln_avg_pool_task(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_avg_pool_t* t = ctx;
  if (t->plane) t->plane(t->a, (int64_t)task);
  else kiln_avg_pool_plane_direct(t->a, task);
}

void kiln_avg_pool2d_f32_reference(const kiln_pool2d_f32_args_t* a) {
  if (a->ho <= 0 || a->wo <= 0) return;
  for (int64_t p = 0; p < a->n * a->c; ++p) kiln_avg_pool_plane_direct(a, (size_t)p);
}

/* A global average: planes [task * per, ...) as row means. */
typedef struct {
  const kiln_pool2d_f32_args_t* a;
  int64_t per;
} kiln_avg_pool_global_t;

static void kiln_avg_pool_global_task(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_avg_pool_global_t* t = ctx;
  const int64_t planes = t->a->n * t->a->c, hw = t->a->h * t->a->w;
  int64_t p0 = (int64_t)task * t->per, p1 = p0 + t->per < planes ? p0 + t->per : planes;
  kiln_reduce_sum_rows_f32((size_t)(p1 - p0), (size_t)hw, 1, t->a->x + p0 * hw, t->a->y + p0);
}

void kiln_avg_pool2d_f32(const kiln_pool2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  const int64_t hw = a->h * a->w;
  if (a->ho == 1 && a->wo == 1 && a->kh == a->h && a->kw == a->w && a->ph == 0 && a->pw == 0 &&
      hw > 0 && (a->divisor_override <= 0 || a->divisor_override == hw)) {
    /* One window over each whole plane (a CNN's global pool): the planes'
     * means in double lanes (kiln_reduce_sum_rows_f32), tasks of many
     * planes. A plane a task, each summed in one float chain, took 46 us
     * for MobileNetV2's 1280 planes of 7 x 7 at one thread, 0.035 ms at
     * two (eager 0.01). The sum is more accurate than torch's float one. */
    const int64_t planes = a->n * a->c;
    int threads = kiln_pool_size(pool);
    int64_t tasks = threads > 1 ? (int64_t)threads * 4 : 1, most = planes * hw / 16384;
    if (tasks > most) tasks = most;
    if (tasks < 1) tasks = 1;
    kiln_avg_pool_global_t t = {a, (planes + tasks - 1) / tasks};
    kiln_pool_parallel_for(pool, (size_t)((planes + t.per - 1) / t.per), kiln_avg_pool_global_task,
                           &t);
    return;
  }
  kiln_avg_pool_t t = {a, NULL};
  if (a->w <= KILN_CONV_PLANES_ROW_MAX && a->wo <= KILN_CONV_PLANES_ROW_MAX)
    t.plane = kiln_avg_pool_plane_for(kiln_cpu_isa());
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_avg_pool_task, &t);
}
