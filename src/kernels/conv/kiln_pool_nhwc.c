/* Max pooling over channels-last (NHWC) float32 activations, so that a max
 * pool between convs can sit inside a channels-last region (the layout
 * pass): y[n][i][j][c] = max over the window at (i*sh - ph, j*sw - pw)
 * (dilated) of x[n][.][.][c], NaN propagating as torch. Every tap of the
 * window is a run of C contiguous floats, so the max runs over whole
 * pixels (a compare and select per channel, vectorised in the conv
 * family's per-ISA builds: kiln_conv_planes.c) with no separable pass. One
 * task per (image, output row). */
#include <math.h>

#include "base/kiln_cpu.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_planes.h"

typedef struct {
  const kiln_pool2d_f32_args_t* a;
  kiln_max_pool_nhwc_row_fn row;
} kiln_max_pool_nhwc_ctx_t;

static void kiln_max_pool_nhwc_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_max_pool_nhwc_ctx_t* t = p;
  t->row(t->a, (int64_t)task / t->a->ho, (int64_t)task % t->a->ho);
}

void kiln_max_pool2d_f32_nhwc(const kiln_pool2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->n <= 0 || a->c <= 0 || a->ho <= 0 || a->wo <= 0) return;
  kiln_max_pool_nhwc_ctx_t t = {a, kiln_max_pool_nhwc_row_for(kiln_cpu_isa())};
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->ho), kiln_max_pool_nhwc_task, &t);
}

void kiln_max_pool2d_f32_nhwc_reference(const kiln_pool2d_f32_args_t* a) {
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t i = 0; i < a->ho; ++i)
      for (int64_t j = 0; j < a->wo; ++j)
        for (int64_t c = 0; c < a->c; ++c) {
          float m = -INFINITY;
          int nan = 0;
          for (int64_t u = 0; u < a->kh; ++u) {
            int64_t iy = i * a->sh - a->ph + u * a->dh;
            if (iy < 0 || iy >= a->h) continue;
            for (int64_t v = 0; v < a->kw; ++v) {
              int64_t ix = j * a->sw - a->pw + v * a->dw;
              if (ix < 0 || ix >= a->w) continue;
              float t = a->x[((n * a->h + iy) * a->w + ix) * a->c + c];
              m = t > m ? t : m;
              nan |= t != t;
            }
          }
          a->y[((n * a->ho + i) * a->wo + j) * a->c + c] = nan ? NAN : m;
        }
}
