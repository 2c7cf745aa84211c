/* Convolution gradients on the GEMM, with im2col / col2im as plain loops
 * (see kiln_conv_backward.h for the orientation). The column matrix of one
 * image and group is scratch from a one-slot cache, so repeated training
 * steps do not allocate. */
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/conv/kiln_conv_backward.h"
#include "kernels/gemm/kiln_gemm.h"

/* Column buffers above this are freed after use rather than cached. */
#define KILN_CONV_GRAD_CACHE_CAP ((size_t)64 << 20)

static kiln_scratch_cache_t kiln_conv_grad_scratch_ =
    KILN_SCRATCH_CACHE_INIT(KILN_CONV_GRAD_CACHE_CAP);

/* [lo, hi) of the j in [0, count) with 0 <= off + j * step < limit. */
static void kiln_conv_grad_range(int64_t off, int64_t step, int64_t limit, int64_t count,
                                 int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + step - 1) / step;
  int64_t h = limit - 1 - off < 0 ? 0 : (limit - 1 - off) / step + 1;
  if (h > count) h = count;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

typedef struct {
  const kiln_conv2d_grad_f32_args_t* a;
  int64_t cg, p;     /* channels per group, pixels Ho * Wo */
  const float* xg;   /* im2col: x's first channel of this image and group */
  float* plane0;     /* col2im: dx's first channel of this image and group */
  float* col;        /* (Cg * kh * kw, P) */
} kiln_conv_grad_col_t;

/* col rows of channel `task`: col[(c kh + u) kw + v][i Wo + j] = x tap or 0. */
static void kiln_conv_grad_im2col_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_grad_col_t* t = p;
  const kiln_conv2d_grad_f32_args_t* a = t->a;
  const int64_t c = (int64_t)task;
  const float* x = t->xg + c * a->h * a->w;
  for (int64_t u = 0; u < a->kh; ++u)
    for (int64_t v = 0; v < a->kw; ++v) {
      float* row = t->col + ((c * a->kh + u) * a->kw + v) * t->p;
      int64_t j0, j1, xoff = v * a->dw - a->pw;
      kiln_conv_grad_range(xoff, a->sw, a->w, a->wo, &j0, &j1);
      for (int64_t i = 0; i < a->ho; ++i) {
        float* out = row + i * a->wo;
        int64_t iy = i * a->sh - a->ph + u * a->dh;
        if (iy < 0 || iy >= a->h) {
          memset(out, 0, (size_t)a->wo * sizeof(float));
          continue;
        }
        const float* xr = x + iy * a->w + xoff;
        for (int64_t j = 0; j < j0; ++j) out[j] = 0.0f;
        for (int64_t j = j0; j < j1; ++j) out[j] = xr[j * a->sw];
        for (int64_t j = j1; j < a->wo; ++j) out[j] = 0.0f;
      }
    }
}

/* Adds channel `task`'s col rows into its dx plane (one task per channel,
 * so no two tasks write the same pixel). */
static void kiln_conv_grad_col2im_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_grad_col_t* t = p;
  const kiln_conv2d_grad_f32_args_t* a = t->a;
  const int64_t c = (int64_t)task;
  float* plane = t->plane0 + c * a->h * a->w;
  for (int64_t u = 0; u < a->kh; ++u)
    for (int64_t v = 0; v < a->kw; ++v) {
      const float* row = t->col + ((c * a->kh + u) * a->kw + v) * t->p;
      int64_t j0, j1, xoff = v * a->dw - a->pw;
      kiln_conv_grad_range(xoff, a->sw, a->w, a->wo, &j0, &j1);
      for (int64_t i = 0; i < a->ho; ++i) {
        int64_t iy = i * a->sh - a->ph + u * a->dh;
        if (iy < 0 || iy >= a->h) continue;
        float* dst = plane + iy * a->w + xoff;
        const float* src = row + i * a->wo;
        for (int64_t j = j0; j < j1; ++j) dst[j * a->sw] += src[j];
      }
    }
}

void kiln_conv2d_grad_input_f32(const kiln_conv2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups;
  const int64_t K = cg * a->kh * a->kw, P = a->ho * a->wo;
  memset(a->dx, 0, (size_t)(a->n * a->c * a->h * a->w) * sizeof(float));
  if (K == 0 || P == 0 || og == 0) return;
  void* blk = NULL;
  /* A column matrix too large to hold (K * P past 2^40 floats) or no memory
   * for it: the reference needs no scratch. */
  float* col = K <= ((int64_t)1 << 40) / P
                   ? kiln_scratch_get(&kiln_conv_grad_scratch_, (size_t)(K * P) * sizeof(float), &blk)
                   : NULL;
  if (!col) {
    kiln_conv2d_grad_input_f32_reference(a);
    return;
  }
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t g = 0; g < a->groups; ++g) {
      kiln_gemm_f32_args_t ga;
      memset(&ga, 0, sizeof(ga));
      ga.batch = 1;
      ga.m = K, ga.n = P, ga.k = og;
      ga.a = a->weight + g * og * K; /* W_g^T: A[i][p] = W[p][i] */
      ga.a_row_stride = 1, ga.a_col_stride = K;
      ga.b = a->dy + (n * a->o + g * og) * P;
      ga.b_row_stride = P, ga.b_col_stride = 1;
      ga.c = col, ga.c_row_stride = P;
      kiln_gemm_f32(&ga, pool);
      kiln_conv_grad_col_t t = {a, cg, P, NULL, a->dx + (n * a->c + g * cg) * a->h * a->w, col};
      kiln_pool_parallel_for(pool, (size_t)cg, kiln_conv_grad_col2im_task, &t);
    }
  kiln_scratch_put(&kiln_conv_grad_scratch_, blk);
}

void kiln_conv2d_grad_weight_f32(const kiln_conv2d_grad_f32_args_t* a, kiln_pool_t* pool) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups;
  const int64_t K = cg * a->kh * a->kw, P = a->ho * a->wo;
  memset(a->dweight, 0, (size_t)(a->o * K) * sizeof(float));
  if (K == 0 || P == 0 || og == 0) return;
  void* blk = NULL;
  /* A column matrix too large to hold (K * P past 2^40 floats) or no memory
   * for it: the reference needs no scratch. */
  float* col = K <= ((int64_t)1 << 40) / P
                   ? kiln_scratch_get(&kiln_conv_grad_scratch_, (size_t)(K * P) * sizeof(float), &blk)
                   : NULL;
  if (!col) {
    kiln_conv2d_grad_weight_f32_reference(a);
    return;
  }
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t g = 0; g < a->groups; ++g) {
      kiln_conv_grad_col_t t = {a, cg, P, a->x + (n * a->c + g * cg) * a->h * a->w, NULL, col};
      kiln_pool_parallel_for(pool, (size_t)cg, kiln_conv_grad_im2col_task, &t);
      kiln_gemm_f32_args_t ga;
      memset(&ga, 0, sizeof(ga));
      ga.batch = 1;
      ga.m = og, ga.n = K, ga.k = P;
      ga.a = a->dy + (n * a->o + g * og) * P;
      ga.a_row_stride = P, ga.a_col_stride = 1;
      ga.b = col; /* col^T: B[p][j] = col[j][p] */
      ga.b_row_stride = 1, ga.b_col_stride = P;
      ga.c = a->dweight + g * og * K, ga.c_row_stride = K;
      if (n > 0) { /* accumulate over images in place */
        ga.residual = ga.c;
        ga.r_row_stride = K;
      }
      kiln_gemm_f32(&ga, pool);
    }
  kiln_scratch_put(&kiln_conv_grad_scratch_, blk);
}

void kiln_conv2d_grad_input_f32_reference(const kiln_conv2d_grad_f32_args_t* a) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups;
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t ch = 0; ch < a->c; ++ch) {
      const int64_t g = ch / cg, c = ch % cg;
      for (int64_t iy = 0; iy < a->h; ++iy)
        for (int64_t ix = 0; ix < a->w; ++ix) {
          double acc = 0.0;
          for (int64_t o = g * og; o < (g + 1) * og; ++o)
            for (int64_t u = 0; u < a->kh; ++u) {
              int64_t ty = iy + a->ph - u * a->dh;
              if (ty < 0 || ty % a->sh || ty / a->sh >= a->ho) continue;
              for (int64_t v = 0; v < a->kw; ++v) {
                int64_t tx = ix + a->pw - v * a->dw;
                if (tx < 0 || tx % a->sw || tx / a->sw >= a->wo) continue;
                acc += (double)a->weight[((o * cg + c) * a->kh + u) * a->kw + v] *
                       a->dy[((n * a->o + o) * a->ho + ty / a->sh) * a->wo + tx / a->sw];
              }
            }
          a->dx[((n * a->c + ch) * a->h + iy) * a->w + ix] = (float)acc;
        }
    }
}

void kiln_conv2d_grad_weight_f32_reference(const kiln_conv2d_grad_f32_args_t* a) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups;
  for (int64_t o = 0; o < a->o; ++o)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t u = 0; u < a->kh; ++u)
        for (int64_t v = 0; v < a->kw; ++v) {
          const int64_t ch = (o / og) * cg + c;
          double acc = 0.0;
          for (int64_t n = 0; n < a->n; ++n)
            for (int64_t i = 0; i < a->ho; ++i) {
              int64_t iy = i * a->sh - a->ph + u * a->dh;
              if (iy < 0 || iy >= a->h) continue;
              for (int64_t j = 0; j < a->wo; ++j) {
                int64_t ix = j * a->sw - a->pw + v * a->dw;
                if (ix < 0 || ix >= a->w) continue;
                acc += (double)a->dy[((n * a->o + o) * a->ho + i) * a->wo + j] *
                       a->x[((n * a->c + ch) * a->h + iy) * a->w + ix];
              }
            }
          a->dweight[((o * cg + c) * a->kh + u) * a->kw + v] = (float)acc;
        }
}
