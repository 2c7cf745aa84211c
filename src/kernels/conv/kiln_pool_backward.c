/* Max pooling's indices and the max / average pooling gradients: direct
 * loops, one task per (n, c) plane (planes never share a pixel, so the
 * scatter-adds need no synchronisation). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "kernels/conv/kiln_conv_backward.h"
#include "kernels/conv/kiln_pool_window.h"

static void kiln_max_pool_indices_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_grad_f32_args_t* a = ctx;
  const float* x = a->x + (int64_t)task * a->h * a->w;
  int64_t* idx = a->out_indices + (int64_t)task * a->ho * a->wo;
  const kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0, u0, u1;
    kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0, v0, v1;
      kiln_pool_window_cols(&g, j, &x0, &v0, &v1);
      /* torch's rule: strictly greater wins (the first maximum stays), a
       * NaN always wins (the last NaN stays); start at the first tap. */
      float m = -INFINITY;
      int64_t at = (y0 + u0 * a->dh) * a->w + x0 + v0 * a->dw;
      for (int64_t u = u0; u < u1; ++u) {
        int64_t r = (y0 + u * a->dh) * a->w + x0;
        for (int64_t v = v0; v < v1; ++v) {
          float t = x[r + v * a->dw];
          if (t > m || t != t) {
            m = t;
            at = r + v * a->dw;
          }
        }
      }
      idx[i * a->wo + j] = at;
    }
  }
}

void kiln_max_pool2d_indices_f32(const kiln_pool2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_max_pool_indices_plane, (void*)a);
}

typedef struct {
  const kiln_pool2d_grad_f32_args_t* a;
  _Atomic int64_t bad;
} kiln_max_pool_grad_t;

static void kiln_max_pool_grad_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_max_pool_grad_t* t = ctx;
  const kiln_pool2d_grad_f32_args_t* a = t->a;
  const int64_t hw = a->h * a->w, cells = a->ho * a->wo;
  float* dx = a->dx + (int64_t)task * hw;
  const float* dy = a->dy + (int64_t)task * cells;
  const int64_t* idx = a->indices + (int64_t)task * cells;
  memset(dx, 0, (size_t)hw * sizeof(float));
  int64_t bad = 0;
  for (int64_t k = 0; k < cells; ++k) {
    int64_t at = idx[k];
    if (at < 0 || at >= hw) {
      ++bad;
      continue;
    }
    dx[at] += dy[k];
  }
  if (bad) atomic_fetch_add(&t->bad, bad);
}

int64_t kiln_max_pool2d_grad_f32(const kiln_pool2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  kiln_max_pool_grad_t t;
  t.a = a;
  atomic_init(&t.bad, 0);
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_max_pool_grad_plane, &t);
  return atomic_load(&t.bad);
}

static void kiln_avg_pool_grad_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_grad_f32_args_t* a = ctx;
  float* dx = a->dx + (int64_t)task * a->h * a->w;
  const float* dy = a->dy + (int64_t)task * a->ho * a->wo;
  memset(dx, 0, (size_t)(a->h * a->w) * sizeof(float));
  kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  g.dh = g.dw = 1; /* average pooling has no dilation (its dh, dw are ignored) */
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t y0, u0, u1;
    kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t x0, v0, v1;
      kiln_pool_window_cols(&g, j, &x0, &v0, &v1);
      /* The forward's divisor (kiln_pool_window.h). */
      int64_t count = kiln_pool_avg_count(&g, y0, u0, u1, x0, v0, v1);
      if (count == 0) continue;
      float g = dy[i * a->wo + j] / (float)count;
      for (int64_t u = u0; u < u1; ++u) {
        float* row = dx + (y0 + u) * a->w + x0;
        for (int64_t v = v0; v < v1; ++v) row[v] += g;
      }
    }
  }
}

void kiln_avg_pool2d_grad_f32(const kiln_pool2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_avg_pool_grad_plane, (void*)a);
}
