/* The fast convolution: path choice, im2col into the GEMM's packed-B layout,
 * the 1x1 and depthwise special cases, and the per-row epilogue.
 *
 * Orientation. For each image and group the conv is the GEMM
 *     y(Og, pixels) = W(Og, K) . col(K, pixels),   K = Cg * kh * kw,
 * W as A and the column matrix as B, so y comes out in NCHW rows directly
 * (no transpose pass) and the long dimension (pixels) is the GEMM's N,
 * which its 16/32-wide kernels like. im2col writes B already in
 * kiln_gemm_f32_pack_b's panel layout, so the GEMM reads it as b_packed and
 * the pixels are copied once, not twice (gather, then pack). W is packed by
 * the GEMM each call; that is O * K floats against 2 O K pixels flops, cheap
 * unless the band of pixels is small.
 *
 * Epilogue. The GEMM's bias is per column (per pixel here); a conv's bias is
 * per row (per output channel). Without a bias the activation and residual
 * go through the GEMM's own epilogue; with one, a pass over each finished
 * band adds the bias, applies the activation and the residual while the
 * band is still in cache.
 *
 * Scratch (the column band, a residual snapshot, depthwise row buffers) is
 * one block kept in a one-slot cache between calls, so steady state does
 * not allocate. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_scratch.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

/* Column band target, in floats (8 MiB): large enough that a 224x224 ResNet
 * layer is one band, small enough to stay clear of memory pressure. */
#ifndef KILN_CONV_COL_FLOATS
#define KILN_CONV_COL_FLOATS ((int64_t)2 << 20)
#endif
#define KILN_CONV_CACHE_CAP ((size_t)64 << 20)
#define KILN_CONV_PANELS_PER_TASK 4

/* ---- scratch: im2col columns, cached between calls ------------------------ */

static kiln_scratch_cache_t kiln_conv_scratch_ = KILN_SCRATCH_CACHE_INIT(KILN_CONV_CACHE_CAP);

static float* kiln_conv_scratch_get(size_t floats, void** out_block) {
  return kiln_scratch_get(&kiln_conv_scratch_, floats * sizeof(float), out_block);
}

static void kiln_conv_scratch_put(void* blk) { kiln_scratch_put(&kiln_conv_scratch_, blk); }

/* ---- epilogue over rows of y: act(y + bias[o]) + res ------------------ */

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  const kiln_gemm_kernels_t* kn;
  float* y;         /* row o at y + o * ld */
  const float* res; /* row o at res + o * ld, or NULL */
  const float* bias;
  int64_t rows, len, ld;
} kiln_conv_epi_t;

static void kiln_conv_epi_row(const kiln_conv_epi_t* e, int64_t o) {
  float* y = e->y + o * e->ld;
  const float* r = e->res ? e->res + o * e->ld : NULL;
  const float b = e->bias ? e->bias[o] : 0.0f;
  const int64_t len = e->len;
  kiln_activation_t act = e->a->act;
  if (r && e->a->residual_before_act) {
    /* act(y + b + r): fold the residual in first, then as without one. */
    for (int64_t j = 0; j < len; ++j) y[j] += r[j];
    r = NULL;
  }
  if (act == KILN_ACT_NONE || act == KILN_ACT_RELU) {
    /* Branch-free so the loop vectorises; relu keeps NaN as torch does. */
    const int relu = act == KILN_ACT_RELU;
    if (r) {
      for (int64_t j = 0; j < len; ++j) {
        float v = y[j] + b;
        v = relu && v < 0.0f ? 0.0f : v;
        y[j] = v + r[j];
      }
    } else {
      for (int64_t j = 0; j < len; ++j) {
        float v = y[j] + b;
        y[j] = relu && v < 0.0f ? 0.0f : v;
      }
    }
    return;
  }
  if (b != 0.0f)
    for (int64_t j = 0; j < len; ++j) y[j] += b;
  e->kn->epilogue(1, len, y, len, y, len, NULL, r, len, act);
}

static void kiln_conv_epi_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_epi_t* e = p;
  /* Tasks of a few rows each (at least ~4K floats) keep hand-out cheap. */
  int64_t per = e->len >= 4096 ? 1 : 4096 / e->len;
  int64_t o0 = (int64_t)task * per, o1 = o0 + per < e->rows ? o0 + per : e->rows;
  for (int64_t o = o0; o < o1; ++o) kiln_conv_epi_row(e, o);
}

static void kiln_conv_epilogue(kiln_conv_epi_t* e, kiln_pool_t* pool) {
  if (!e->bias && !e->res && e->a->act == KILN_ACT_NONE) return;
  int64_t per = e->len >= 4096 ? 1 : 4096 / (e->len > 0 ? e->len : 1);
  kiln_pool_parallel_for(pool, (size_t)((e->rows + per - 1) / per), kiln_conv_epi_task, e);
}

/* ---- im2col into packed-B panels --------------------------------------- */

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  const float* xg; /* x's first channel of this image and group */
  int64_t cg, k, oy0, ncols, panels;
  float* col;
} kiln_conv_im2col_t;

static void kiln_conv_im2col_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_im2col_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t H = a->h, W = a->w, P = KILN_GEMM_PANEL;
  int64_t q0 = (int64_t)task * KILN_CONV_PANELS_PER_TASK;
  int64_t q1 = q0 + KILN_CONV_PANELS_PER_TASK < t->panels ? q0 + KILN_CONV_PANELS_PER_TASK
                                                          : t->panels;
  for (int64_t q = q0; q < q1; ++q) {
    /* Top-left input tap of each of the panel's 16 output pixels; columns
     * past the band get a position far outside so every tap reads 0. */
    int64_t iy0[KILN_GEMM_PANEL], ix0[KILN_GEMM_PANEL];
    int contiguous = a->sw == 1;
    for (int64_t jj = 0; jj < P; ++jj) {
      int64_t j = q * P + jj;
      if (j < t->ncols) {
        int64_t oy = t->oy0 + j / a->wo, ox = j % a->wo;
        iy0[jj] = oy * a->sh - a->ph;
        ix0[jj] = ox * a->sw - a->pw;
      } else {
        iy0[jj] = -((int64_t)1 << 60);
        ix0[jj] = 0;
      }
      if (jj && (iy0[jj] != iy0[0] || ix0[jj] != ix0[0] + jj)) contiguous = 0;
    }
    float* out = t->col + q * t->k * P;
    for (int64_t c = 0; c < t->cg; ++c) {
      const float* xc = t->xg + c * H * W;
      for (int64_t u = 0; u < a->kh; ++u) {
        for (int64_t v = 0; v < a->kw; ++v, out += P) {
          int64_t du = u * a->dh, dv = v * a->dw;
          /* Common case: 16 pixels of one output row at stride 1, all taps
           * inside the input: one 64-byte copy. */
          if (contiguous && (uint64_t)(iy0[0] + du) < (uint64_t)H && ix0[0] + dv >= 0 &&
              ix0[0] + dv + P <= W) {
            memcpy(out, xc + (iy0[0] + du) * W + ix0[0] + dv, P * sizeof(float));
            continue;
          }
          for (int64_t jj = 0; jj < P; ++jj) {
            int64_t iy = iy0[jj] + du, ix = ix0[jj] + dv;
            int in = (uint64_t)iy < (uint64_t)H && (uint64_t)ix < (uint64_t)W;
            out[jj] = in ? xc[iy * W + ix] : 0.0f;
          }
        }
      }
    }
  }
}

/* ---- depthwise: direct loop per (n, c) plane --------------------------- */

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  float* tmp; /* one Wo row per thread */
} kiln_conv_dw_t;

static void kiln_conv_dw_task(void* p, size_t task, int thread) {
  const kiln_conv_dw_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t plane = (int64_t)task, ch = plane % a->c;
  const int64_t H = a->h, W = a->w, Wo = a->wo;
  const float* x = a->x + plane * H * W;
  const float* w = a->weight + ch * a->kh * a->kw;
  const float b = a->bias ? a->bias[ch] : 0.0f;
  float* acc = t->tmp + (int64_t)thread * Wo;
  for (int64_t i = 0; i < a->ho; ++i) {
    for (int64_t j = 0; j < Wo; ++j) acc[j] = b;
    for (int64_t u = 0; u < a->kh; ++u) {
      int64_t iy = i * a->sh - a->ph + u * a->dh;
      if (iy < 0 || iy >= H) continue;
      const float* row = x + iy * W;
      for (int64_t v = 0; v < a->kw; ++v) {
        /* Output columns whose tap lies inside the row: ix = j*sw + off. */
        const float wv = w[u * a->kw + v];
        int64_t off = v * a->dw - a->pw;
        int64_t j0 = off >= 0 ? 0 : (-off + a->sw - 1) / a->sw;
        int64_t j1 = W - 1 - off < 0 ? 0 : (W - 1 - off) / a->sw + 1;
        if (j1 > Wo) j1 = Wo;
        if (a->sw == 1) {
          const float* src = row + off;
          for (int64_t j = j0; j < j1; ++j) acc[j] += wv * src[j];
        } else {
          for (int64_t j = j0; j < j1; ++j) acc[j] += wv * row[j * a->sw + off];
        }
      }
    }
    /* acc is separate from y, so a residual aliasing y is read intact. */
    float* y = a->y + (plane * a->ho + i) * Wo;
    const float* r = a->residual ? a->residual + (plane * a->ho + i) * Wo : NULL;
    if (r && a->residual_before_act) {
      for (int64_t j = 0; j < Wo; ++j) acc[j] += r[j];
      r = NULL;
    }
    if (a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU) {
      const int relu = a->act == KILN_ACT_RELU;
      for (int64_t j = 0; j < Wo; ++j) {
        float v = relu && acc[j] < 0.0f ? 0.0f : acc[j];
        y[j] = r ? v + r[j] : v;
      }
    } else {
      for (int64_t j = 0; j < Wo; ++j)
        y[j] = kiln_activation_scalar(acc[j], a->act) + (r ? r[j] : 0.0f);
    }
  }
}

/* ---- the driver --------------------------------------------------------- */

static void kiln_conv_gemm_setup(const kiln_conv2d_f32_args_t* a, kiln_gemm_f32_args_t* g) {
  memset(g, 0, sizeof(*g));
  g->batch = 1;
  g->a_col_stride = 1;
  g->act = a->bias || (a->residual && a->residual_before_act) ? KILN_ACT_NONE : a->act;
}

void kiln_conv2d_f32(const kiln_conv2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->n <= 0 || a->o <= 0 || a->ho <= 0 || a->wo <= 0) return;
  const int64_t G = a->groups, cg = a->c / G, og = a->o / G, HoWo = a->ho * a->wo;
  const int64_t K = cg * a->kh * a->kw;
  const kiln_gemm_kernels_t* kn = kiln_gemm_kernels_for(kiln_cpu_isa());
  const int depthwise = G == a->c && G == a->o;
  const int one_by_one = a->kh == 1 && a->kw == 1 && a->sh == 1 && a->sw == 1 && a->ph == 0 &&
                         a->pw == 0;
  /* The post-GEMM epilogue reads the residual after the GEMM wrote y: a
   * residual aliasing y needs a snapshot of each image first. */
  /* The GEMM's epilogue is act(acc + column bias) + residual: a bias per
   * row, or a residual inside the activation, need the pass of our own. */
  const int post = a->bias != NULL || (a->residual && a->residual_before_act);
  const int snap = post && a->residual == a->y && !depthwise;
  int64_t rows = 0, panels = 0;
  size_t floats = 0;
  if (depthwise) {
    floats = (size_t)(kiln_pool_size(pool) * a->wo);
  } else if (!one_by_one) {
    rows = KILN_CONV_COL_FLOATS / (K * a->wo);
    if (rows < 1) rows = 1;
    if (rows > a->ho) rows = a->ho;
    panels = (rows * a->wo + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL;
    floats = (size_t)(panels * K * KILN_GEMM_PANEL);
  }
  size_t col_floats = floats;
  if (snap) floats += (size_t)(a->o * HoWo);
  void* blk = NULL;
  float* scratch = floats ? kiln_conv_scratch_get(floats, &blk) : NULL;
  if (floats && !scratch) {
    /* No memory for the fast path: stay correct, if slow. */
    kiln_conv2d_f32_reference(a);
    return;
  }
  float* rsnap = snap ? scratch + col_floats : NULL;

  if (depthwise) {
    kiln_conv_dw_t t = {a, scratch};
    kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_conv_dw_task, &t);
    kiln_conv_scratch_put(blk);
    return;
  }

  for (int64_t n = 0; n < a->n; ++n) {
    float* yn = a->y + n * a->o * HoWo;
    const float* rn = a->residual ? a->residual + n * a->o * HoWo : NULL;
    if (snap) {
      memcpy(rsnap, rn, (size_t)(a->o * HoWo) * sizeof(float));
      rn = rsnap;
    }
    kiln_gemm_f32_args_t g;
    if (one_by_one) {
      /* x's (Cg, H*W) slab is B as it stands; the groups are the batch. */
      kiln_conv_gemm_setup(a, &g);
      g.batch = G;
      g.m = og, g.n = HoWo, g.k = cg;
      g.a = a->weight, g.a_batch_stride = og * cg, g.a_row_stride = cg;
      g.b = a->x + n * a->c * HoWo, g.b_batch_stride = cg * HoWo, g.b_row_stride = HoWo;
      g.b_col_stride = 1;
      g.c = yn, g.c_batch_stride = og * HoWo, g.c_row_stride = HoWo;
      if (!post && rn) g.residual = rn, g.r_batch_stride = og * HoWo, g.r_row_stride = HoWo;
      kiln_gemm_f32(&g, pool);
      if (post) {
        kiln_conv_epi_t e = {a, kn, yn, rn, a->bias, a->o, HoWo, HoWo};
        kiln_conv_epilogue(&e, pool);
      }
      continue;
    }
    for (int64_t gi = 0; gi < G; ++gi) {
      for (int64_t oy0 = 0; oy0 < a->ho; oy0 += rows) {
        int64_t nrows = a->ho - oy0 < rows ? a->ho - oy0 : rows;
        int64_t ncols = nrows * a->wo, np = (ncols + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL;
        kiln_conv_im2col_t t = {a, a->x + (n * a->c + gi * cg) * a->h * a->w, cg, K, oy0,
                                ncols, np, scratch};
        kiln_pool_parallel_for(
            pool, (size_t)((np + KILN_CONV_PANELS_PER_TASK - 1) / KILN_CONV_PANELS_PER_TASK),
            kiln_conv_im2col_task, &t);
        float* c = yn + gi * og * HoWo + oy0 * a->wo;
        const float* r = rn ? rn + gi * og * HoWo + oy0 * a->wo : NULL;
        kiln_conv_gemm_setup(a, &g);
        g.m = og, g.n = ncols, g.k = K;
        g.a = a->weight + gi * og * K, g.a_row_stride = K;
        g.b_packed = scratch;
        g.c = c, g.c_row_stride = HoWo;
        if (!post && r) g.residual = r, g.r_row_stride = HoWo;
        kiln_gemm_f32(&g, pool);
        if (post) {
          kiln_conv_epi_t e = {a, kn, c, r, a->bias ? a->bias + gi * og : NULL, og, ncols,
                              HoWo};
          kiln_conv_epilogue(&e, pool);
        }
      }
    }
  }
  kiln_conv_scratch_put(blk);
}
