/* Depthwise convolution and average pooling, one plane per call, one
 * variant per ISA build of this file (kiln_conv_planes.h). The loops run
 * over whole rows so that GCC vectorises them; the project builds in ISO C
 * mode, where GCC does not contract a * b + c, so KILN_CONV_PLANES_FMA asks
 * for the fused form where the ISA has it. */
#include <math.h>
#include <string.h>

#include "kernels/conv/kiln_conv_planes.h"
#include "kernels/conv/kiln_pool_window.h"

#if defined(__FMA__)
#define KILN_CONV_PLANES_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define KILN_CONV_PLANES_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* ---- depthwise ------------------------------------------------------------ */

/* The epilogue of output row i from acc (Wo floats): residual, activation,
 * store. acc is separate from y, so a residual aliasing y is read intact. */
static inline void kiln_conv_dw_store_row(const kiln_conv2d_f32_args_t* a, int64_t plane,
                                          int64_t i, float* acc) {
  const int64_t Wo = a->wo;
  float* y = a->y + (plane * a->ho + i) * Wo;
  const float* r = a->residual ? a->residual + (plane * a->ho + i) * Wo : NULL;
  if (r && a->residual_before_act) {
    for (int64_t j = 0; j < Wo; ++j) acc[j] += r[j];
    r = NULL;
  }
  if (a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU || a->act == KILN_ACT_RELU6) {
    /* A clamp to [lo, hi] as kiln_activation_scalar's (NaN and -0.0 pass),
     * in loops that vectorise. */
    const float lo = a->act == KILN_ACT_NONE ? -INFINITY : 0.0f;
    const float hi = a->act == KILN_ACT_RELU6 ? 6.0f : INFINITY;
    for (int64_t j = 0; j < Wo; ++j) {
      float v = acc[j] < lo ? lo : acc[j];
      v = v > hi ? hi : v;
      y[j] = r ? v + r[j] : v;
    }
  } else {
    /* No residual adds nothing: + 0.0f would turn an activation's -0.0
     * (hardswish(-3), gelu(-0)) into +0.0. */
    for (int64_t j = 0; j < Wo; ++j) {
      const float v = kiln_activation_scalar(acc[j], a->act);
      y[j] = r ? v + r[j] : v;
    }
  }
}

/* Stride 1, the flat path: the plane copied into a zero-bordered buffer of
 * hp x wp (wp = Wo + (kw - 1) dw), so that output (i, j) at flat index
 * f = i wp + j reads tap (u, v) at f + u dh wp + v dw: each tap is one
 * pass over all Ho x wp outputs (the columns past Wo wrap into the border
 * and are dropped), long contiguous loops, where the row path's 9 passes
 * of 56 columns per output row were mostly loop overhead (MobileNet-sized
 * 8 x 64 x 56 x 56, 3x3: 2.1 ms on one Zen 5 core). The taps and their
 * order are the row path's; a tap over the border adds w * 0, as eager's
 * padded convolution does. */
/* Windows of up to this many taps (7 x 7) are summed output by output. */
#define KILN_CONV_DW_FLAT_TAPS 49

/* acc[f] = b + sum over taps t (in order) of wt[t] * xp[f + off[t]];
 * inlined with taps a constant where the caller knows it (3 x 3). */
static inline __attribute__((always_inline)) void kiln_conv_dw_flat_taps(
    int64_t n, const int64_t taps, const int64_t* off, const float* wt, float b,
    const float* xp, float* restrict acc) {
  for (int64_t f = 0; f < n; ++f) {
    float s = b;
    for (int64_t t = 0; t < taps; ++t) s = KILN_CONV_PLANES_FMA(wt[t], xp[f + off[t]], s);
    acc[f] = s;
  }
}

static void kiln_conv_dw_plane_flat(const kiln_conv2d_f32_args_t* a, int64_t plane, float* buf,
                                    const float* w, int64_t ws, float b) {
  const int64_t H = a->h, W = a->w, Ho = a->ho, Wo = a->wo, kw = a->kw;
  const int64_t hp = Ho + (a->kh - 1) * a->dh, wp = Wo + (kw - 1) * a->dw;
  const int64_t reach = (kw - 1) * a->dw, n = Ho * wp;
  const float* x = a->x + plane * H * W;
  float* xp = buf;                 /* hp * wp + reach floats */
  float* acc = buf + hp * wp + reach; /* n floats */
  memset(xp, 0, (size_t)(hp * wp + reach) * sizeof(float));
  for (int64_t r = 0; r < H; ++r) {
    const int64_t pr = r + a->ph;
    if (pr < 0 || pr >= hp) continue;
    /* Input columns c land at pw + c; those past the border never meet a tap. */
    int64_t c0 = a->pw < 0 ? -a->pw : 0, c1 = W < wp - a->pw ? W : wp - a->pw;
    if (c1 > c0) memcpy(xp + pr * wp + a->pw + c0, x + r * W + c0, (size_t)(c1 - c0) * sizeof(float));
  }
  const int64_t taps = a->kh * kw;
  if (taps <= KILN_CONV_DW_FLAT_TAPS) {
    /* Each output summed over every tap in a register: one store per
     * output, not one per tap. */
    int64_t off[KILN_CONV_DW_FLAT_TAPS];
    float wt[KILN_CONV_DW_FLAT_TAPS];
    for (int64_t u = 0; u < a->kh; ++u)
      for (int64_t v = 0; v < kw; ++v) {
        off[u * kw + v] = u * a->dh * wp + v * a->dw;
        wt[u * kw + v] = w[(u * kw + v) * ws];
      }
    if (taps == 9)
      kiln_conv_dw_flat_taps(n, 9, off, wt, b, xp, acc);
    else
      kiln_conv_dw_flat_taps(n, taps, off, wt, b, xp, acc);
  } else {
    for (int64_t f = 0; f < n; ++f) acc[f] = b;
    for (int64_t u = 0; u < a->kh; ++u)
      for (int64_t v = 0; v < kw; ++v) {
        const float wv = w[(u * kw + v) * ws];
        const float* src = xp + u * a->dh * wp + v * a->dw;
        for (int64_t f = 0; f < n; ++f) acc[f] = KILN_CONV_PLANES_FMA(wv, src[f], acc[f]);
      }
  }
  for (int64_t i = 0; i < Ho; ++i) kiln_conv_dw_store_row(a, plane, i, acc + i * wp);
}

/* Other strides, the row path: each output row the bias, then one pass
 * over the row per window tap (acc[j] += w * x[row][j * sw + off] over the
 * columns whose tap is inside the input), then the epilogue. At stride 2
 * each input row is first split into its even and odd columns, which turns
 * every tap's pass into a contiguous one: column j * 2 + off is
 * half[off & 1][j + (off - (off & 1)) / 2]. */
void KILN_ISA_VARIANT(kiln_f32_conv_dw_plane)(const kiln_conv2d_f32_args_t* a, int64_t plane,
                                              float* acc) {
  const int64_t ch = plane % a->c;
  const int64_t H = a->h, W = a->w, Wo = a->wo;
  const float* x = a->x + plane * H * W;
  /* Packed weights of a depthwise conv are one panel per channel with only
   * row 0 used (see kiln_conv.h). */
  const int64_t ws = a->weight_packed ? a->weight_packed : 1;
  const float* w = a->weight + ch * a->kh * a->kw * ws;
  const float b = a->bias ? a->bias[ch] : 0.0f;
  if (kiln_conv_dw_flat_floats(a)) {
    kiln_conv_dw_plane_flat(a, plane, acc, w, ws, b);
    return;
  }
  float half[2][KILN_CONV_PLANES_ROW_MAX / 2];
  const int split = a->sw == 2 && W <= KILN_CONV_PLANES_ROW_MAX;
  for (int64_t i = 0; i < a->ho; ++i) {
    for (int64_t j = 0; j < Wo; ++j) acc[j] = b;
    for (int64_t u = 0; u < a->kh; ++u) {
      int64_t iy = i * a->sh - a->ph + u * a->dh;
      if (iy < 0 || iy >= H) continue;
      const float* row = x + iy * W;
      if (split) {
        for (int64_t c = 0; c < W / 2; ++c) {
          half[0][c] = row[2 * c];
          half[1][c] = row[2 * c + 1];
        }
        if (W & 1) half[0][W / 2] = row[W - 1];
      }
      for (int64_t v = 0; v < a->kw; ++v) {
        /* Output columns whose tap lies inside the row: ix = j*sw + off. */
        const float wv = w[(u * a->kw + v) * ws];
        int64_t off = v * a->dw - a->pw;
        int64_t j0 = off >= 0 ? 0 : (-off + a->sw - 1) / a->sw;
        int64_t j1 = W - 1 - off < 0 ? 0 : (W - 1 - off) / a->sw + 1;
        if (j1 > Wo) j1 = Wo;
        if (a->sw == 1) {
          const float* src = row + off;
          for (int64_t j = j0; j < j1; ++j) acc[j] = KILN_CONV_PLANES_FMA(wv, src[j], acc[j]);
        } else if (split) {
          const float* h = half[off & 1];
          const int64_t q = (off - (off & 1)) / 2; /* j + q >= 0 for j >= j0 */
          for (int64_t j = j0; j < j1; ++j) acc[j] = KILN_CONV_PLANES_FMA(wv, h[j + q], acc[j]);
        } else {
          const int64_t sw = a->sw;
          for (int64_t j = j0; j < j1; ++j)
            acc[j] = KILN_CONV_PLANES_FMA(wv, row[j * sw + off], acc[j]);
        }
      }
    }
    kiln_conv_dw_store_row(a, plane, i, acc);
  }
}

/* ---- average pooling ------------------------------------------------------ */

/* Per output row: rowsum = the sum of the window's in-bounds input rows
 * (whole rows, vectorised), then each output the sum of rowsum over its
 * window's in-bounds columns, over torch's divisor. The columns whose
 * window lies wholly inside the row share one divisor and are summed as
 * kw passes over a row of outputs (vectorised for stride 1); the few at
 * the edges take the general formula. */
void KILN_ISA_VARIANT(kiln_f32_avg_pool_plane)(const kiln_pool2d_f32_args_t* a, int64_t plane) {
  float rowsum[KILN_CONV_PLANES_ROW_MAX];
  float colsum[KILN_CONV_PLANES_ROW_MAX];
  const int64_t W = a->w, Wo = a->wo, sw = a->sw, kw = a->kw;
  const float* x = a->x + plane * a->h * W;
  float* y = a->y + plane * a->ho * Wo;
  kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  g.dh = g.dw = 1; /* average pooling has no dilation */
  /* Interior columns: x0 = j sw - pw >= 0 and x0 + kw <= W. */
  int64_t jlo = (a->pw + sw - 1) / sw;
  int64_t jhi = W - kw + a->pw >= 0 ? (W - kw + a->pw) / sw + 1 : 0;
  if (jhi > Wo) jhi = Wo;
  if (jlo > jhi) jlo = jhi;
  for (int64_t i = 0; i < a->ho; ++i) {
    float* yr = y + i * Wo;
    int64_t y0, u0, u1;
    kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
    if (u0 >= u1) { /* no row inside (ceil mode): the reference's 0 / count */
      for (int64_t j = 0; j < Wo; ++j) yr[j] = 0.0f;
      continue;
    }
    const float* r0 = x + (y0 + u0) * W;
    for (int64_t c = 0; c < W; ++c) rowsum[c] = r0[c];
    for (int64_t u = u0 + 1; u < u1; ++u) {
      const float* r = x + (y0 + u) * W;
      for (int64_t c = 0; c < W; ++c) rowsum[c] += r[c];
    }
    /* Interior: colsum[j] = sum over v of rowsum[j sw - pw + v]. */
    if (jlo < jhi) {
      const int64_t pw = a->pw;
      if (sw == 1) {
        for (int64_t j = jlo; j < jhi; ++j) colsum[j] = rowsum[j - pw];
        for (int64_t v = 1; v < kw; ++v) {
          const int64_t o = v - pw;
          for (int64_t j = jlo; j < jhi; ++j) colsum[j] += rowsum[j + o];
        }
      } else {
        for (int64_t j = jlo; j < jhi; ++j) colsum[j] = rowsum[j * sw - pw];
        for (int64_t v = 1; v < kw; ++v) {
          const int64_t o = v - pw;
          for (int64_t j = jlo; j < jhi; ++j) colsum[j] += rowsum[j * sw + o];
        }
      }
      int64_t x0 = jlo * sw - a->pw;
      const float cnt = (float)kiln_pool_avg_count(&g, y0, u0, u1, x0, 0, kw);
      for (int64_t j = jlo; j < jhi; ++j) yr[j] = colsum[j] / cnt;
    }
    /* Edges: windows that are clipped by the row's ends. */
    for (int64_t j = 0; j < Wo; ++j) {
      if (j == jlo) j = jhi;
      if (j >= Wo) break;
      int64_t x0, v0, v1;
      kiln_pool_window_cols(&g, j, &x0, &v0, &v1);
      float s = 0.0f;
      for (int64_t v = v0; v < v1; ++v) s += rowsum[x0 + v];
      int64_t count = kiln_pool_avg_count(&g, y0, u0, u1, x0, v0, v1);
      yr[j] = count != 0 ? s / (float)count : 0.0f;
    }
  }
}

/* ---- channels-last max pooling -------------------------------------------- */

/* max that keeps NaN (as torch): t when t is NaN, else the larger. Once m
 * is NaN it stays (t > NaN is false). */
static inline float kiln_pool_nhwc_max(float t, float m) { return t > m || t != t ? t : m; }

/* Channels [c0, c0 + KILN_POOL_NHWC_CB) of one output pixel over its
 * window's taps: the running maxima are a local array of constant length,
 * which GCC keeps in vector registers across the taps (written through
 * the output pointer instead, every tap paid a load and a store, as the
 * pointers may alias). */
#define KILN_POOL_NHWC_CB 32

void KILN_ISA_VARIANT(kiln_f32_max_pool_nhwc_row)(const kiln_pool2d_f32_args_t* a, int64_t n,
                                                  int64_t i) {
  const int64_t C = a->c;
  const kiln_pool_geom_t g = KILN_POOL_GEOM(a);
  int64_t y0, u0, u1;
  kiln_pool_window_rows(&g, i, &y0, &u0, &u1);
  float* yrow = a->y + (n * a->ho + i) * a->wo * C;
  for (int64_t j = 0; j < a->wo; ++j) {
    int64_t x0, v0, v1;
    kiln_pool_window_cols(&g, j, &x0, &v0, &v1);
    float* d = yrow + j * C;
    int64_t c0 = 0;
    for (; c0 + KILN_POOL_NHWC_CB <= C; c0 += KILN_POOL_NHWC_CB) {
      float m[KILN_POOL_NHWC_CB];
      for (int c = 0; c < KILN_POOL_NHWC_CB; ++c) m[c] = -INFINITY; /* empty window: -inf */
      for (int64_t u = u0; u < u1; ++u) {
        const float* row = a->x + ((n * a->h + y0 + u * a->dh) * a->w + x0) * C + c0;
        for (int64_t v = v0; v < v1; ++v) {
          const float* t = row + v * a->dw * C;
          for (int c = 0; c < KILN_POOL_NHWC_CB; ++c) m[c] = kiln_pool_nhwc_max(t[c], m[c]);
        }
      }
      memcpy(d + c0, m, sizeof m);
    }
    if (c0 == C) continue;
    for (int64_t c = c0; c < C; ++c) d[c] = -INFINITY;
    for (int64_t u = u0; u < u1; ++u) {
      const float* row = a->x + ((n * a->h + y0 + u * a->dh) * a->w + x0) * C;
      for (int64_t v = v0; v < v1; ++v) {
        const float* t = row + v * a->dw * C;
        for (int64_t c = c0; c < C; ++c) d[c] = kiln_pool_nhwc_max(t[c], d[c]);
      }
    }
  }
}
