/* Adaptive average pooling and its gradient: direct loops, one task per
 * (n, c) plane. Window bounds and the order of the divisions follow torch's
 * CPU kernel (sum / kh / kw), so results agree to rounding of the sum. */
#include <string.h>

#include "kernels/conv/kiln_conv_backward.h"

/* Window [start, end) of output cell a of b over an input of size c. */
static int64_t kiln_adaptive_start(int64_t a, int64_t b, int64_t c) {
  return (a / b) * c + ((a % b) * c) / b;
}
static int64_t kiln_adaptive_end(int64_t a, int64_t b, int64_t c) {
  return 1 + ((a + 1) * c - 1) / b;
}

static void kiln_adaptive_avg_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_grad_f32_args_t* a = ctx;
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t h0 = kiln_adaptive_start(i, a->ho, a->h), h1 = kiln_adaptive_end(i, a->ho, a->h);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t w0 = kiln_adaptive_start(j, a->wo, a->w), w1 = kiln_adaptive_end(j, a->wo, a->w);
      float s = 0.0f;
      for (int64_t u = h0; u < h1; ++u)
        for (int64_t v = w0; v < w1; ++v) s += x[u * a->w + v];
      y[i * a->wo + j] = s / (float)(h1 - h0) / (float)(w1 - w0);
    }
  }
}

static void kiln_adaptive_avg_grad_plane(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pool2d_grad_f32_args_t* a = ctx;
  float* dx = a->dx + (int64_t)task * a->h * a->w;
  const float* dy = a->dy + (int64_t)task * a->ho * a->wo;
  memset(dx, 0, (size_t)(a->h * a->w) * sizeof(float));
  for (int64_t i = 0; i < a->ho; ++i) {
    int64_t h0 = kiln_adaptive_start(i, a->ho, a->h), h1 = kiln_adaptive_end(i, a->ho, a->h);
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t w0 = kiln_adaptive_start(j, a->wo, a->w), w1 = kiln_adaptive_end(j, a->wo, a->w);
      float g = dy[i * a->wo + j] / (float)(h1 - h0) / (float)(w1 - w0);
      for (int64_t u = h0; u < h1; ++u)
        for (int64_t v = w0; v < w1; ++v) dx[u * a->w + v] += g;
    }
  }
}

void kiln_adaptive_avg_pool2d_f32(const kiln_pool2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_adaptive_avg_plane, (void*)a);
}

void kiln_adaptive_avg_pool2d_grad_f32(const kiln_pool2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_adaptive_avg_grad_plane, (void*)a);
}
