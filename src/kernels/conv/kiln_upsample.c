/* Bilinear upsampling (NCHW float32) with torch's source-index rule
 * (area_pixel_compute_source_index): one task per (n, c) plane, the row
 * and column taps and weights computed once per call. */
#include <stdlib.h>
#include <string.h>

#include "kernels/conv/kiln_conv_backward.h"

/* torch's area_pixel_compute_scale, in float as torch computes it for fp32. */
static float kiln_upsample_scale(int64_t in, int64_t out, int align_corners, float scale) {
  if (align_corners) return out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
  return scale > 0.0f ? (float)(1.0 / (double)scale) : (float)in / (float)out;
}

/* Tap t0, step to the second tap (0 or 1) and weights for each output index. */
static void kiln_upsample_taps(int64_t in, int64_t out, int align_corners, float scale,
                               int64_t* t0, int64_t* step, float* l0, float* l1) {
  float s = kiln_upsample_scale(in, out, align_corners, scale);
  for (int64_t d = 0; d < out; ++d) {
    float src = align_corners ? s * (float)d : s * ((float)d + 0.5f) - 0.5f;
    if (src < 0.0f) src = 0.0f;
    int64_t i = (int64_t)src;
    if (i > in - 1) i = in - 1;
    t0[d] = i;
    step[d] = i < in - 1 ? 1 : 0;
    l1[d] = src - (float)i;
    l0[d] = 1.0f - l1[d];
  }
}

typedef struct {
  const kiln_upsample_f32_args_t* a;
  const int64_t *h0, *hs, *w0, *ws;
  const float *hl0, *hl1, *wl0, *wl1;
} kiln_upsample_ctx_t;

static void kiln_upsample_plane(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_upsample_ctx_t* t = p;
  const kiln_upsample_f32_args_t* a = t->a;
  const float* x = a->x + (int64_t)task * a->h * a->w;
  float* y = a->y + (int64_t)task * a->ho * a->wo;
  for (int64_t i = 0; i < a->ho; ++i) {
    const float* r0 = x + t->h0[i] * a->w;
    const float* r1 = r0 + t->hs[i] * a->w;
    for (int64_t j = 0; j < a->wo; ++j) {
      int64_t c0 = t->w0[j], c1 = c0 + t->ws[j];
      y[i * a->wo + j] = t->hl0[i] * (t->wl0[j] * r0[c0] + t->wl1[j] * r0[c1]) +
                         t->hl1[i] * (t->wl0[j] * r1[c0] + t->wl1[j] * r1[c1]);
    }
  }
}

void kiln_upsample_bilinear2d_f32(const kiln_upsample_f32_args_t* a, kiln_pool_t* pool) {
  if (a->ho <= 0 || a->wo <= 0) return;
  size_t nh = (size_t)a->ho, nw = (size_t)a->wo;
  /* Per-call tables, 16 bytes per output row / column. */
  char* mem = malloc((nh + nw) * 2 * (sizeof(int64_t) + sizeof(float)));
  if (!mem) {
    kiln_upsample_bilinear2d_f32_reference(a);
    return;
  }
  int64_t* h0 = (int64_t*)mem;
  int64_t* hs = h0 + nh;
  int64_t* w0 = hs + nh;
  int64_t* ws = w0 + nw;
  float* hl0 = (float*)(ws + nw);
  float* hl1 = hl0 + nh;
  float* wl0 = hl1 + nh;
  float* wl1 = wl0 + nw;
  kiln_upsample_taps(a->h, a->ho, a->align_corners, a->scale_h, h0, hs, hl0, hl1);
  kiln_upsample_taps(a->w, a->wo, a->align_corners, a->scale_w, w0, ws, wl0, wl1);
  kiln_upsample_ctx_t t = {a, h0, hs, w0, ws, hl0, hl1, wl0, wl1};
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_upsample_plane, &t);
  free(mem);
}

/* The same definition, one output element at a time, no tables, double
 * arithmetic for the blend. */
void kiln_upsample_bilinear2d_f32_reference(const kiln_upsample_f32_args_t* a) {
  const float sh = kiln_upsample_scale(a->h, a->ho, a->align_corners, a->scale_h);
  const float sw = kiln_upsample_scale(a->w, a->wo, a->align_corners, a->scale_w);
  for (int64_t p = 0; p < a->n * a->c; ++p)
    for (int64_t i = 0; i < a->ho; ++i)
      for (int64_t j = 0; j < a->wo; ++j) {
        float fy = a->align_corners ? sh * (float)i : sh * ((float)i + 0.5f) - 0.5f;
        float fx = a->align_corners ? sw * (float)j : sw * ((float)j + 0.5f) - 0.5f;
        fy = fy < 0.0f ? 0.0f : fy;
        fx = fx < 0.0f ? 0.0f : fx;
        int64_t y0 = (int64_t)fy < a->h - 1 ? (int64_t)fy : a->h - 1;
        int64_t x0 = (int64_t)fx < a->w - 1 ? (int64_t)fx : a->w - 1;
        int64_t y1 = y0 < a->h - 1 ? y0 + 1 : y0, x1 = x0 < a->w - 1 ? x0 + 1 : x0;
        double ly = (double)(fy - (float)y0), lx = (double)(fx - (float)x0);
        const float* x = a->x + p * a->h * a->w;
        double top = (1.0 - lx) * x[y0 * a->w + x0] + lx * x[y0 * a->w + x1];
        double bot = (1.0 - lx) * x[y1 * a->w + x0] + lx * x[y1 * a->w + x1];
        a->y[(p * a->ho + i) * a->wo + j] = (float)((1.0 - ly) * top + ly * bot);
      }
}
