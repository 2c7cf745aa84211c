/* Tests of the bf16-compute channels-last convolution
 * (kernels/conv/kiln_conv_nhwc_bf16.h):
 *  - its scalar reference against the fp32 NHWC reference run on the
 *    bf16-rounded x and weights (the definition, not a second opinion);
 *  - the layout's size and element placement;
 *  - a CONV2D_NHWC node reading the layout: run, written to a file (format
 *    2.16) and read back, the file refused when stamped 2.15, a wrong-size
 *    weight refused with a message; the compiler's choice of form
 *    (compute_bf16: the bf16 layout only with an engine at compile time);
 *  - kiln_conv2d_bf16_nhwc against the reference at every ISA level the
 *    machine has, on 1- and 2-thread pools: the VDPBF16PS kernel where
 *    kiln_cpu_bf16() has the engine, and the portable path with the engine
 *    masked off (at every level, so also on AVX2 and generic C); each run
 *    checks the path that ran (kiln_conv2d_bf16_last_path). Edge shapes:
 *    C = 1, 3 (ResNet's 7x7/2 stem), odd C, C not a multiple of 16 or 32,
 *    O = 16, 24, 32, 48, 64 and tails, 1x1 stride 1 and 2, 3x3 stride 1 and
 *    2, dilation, groups > 1 with odd Cg (the pair must not read the next
 *    group's channel), several K blocks and tile blocks, N = 2, residual
 *    before and after the activation (also aliasing y), with and without
 *    bias, x NHWC and NCHW, NaN / Inf / denormal inputs; y has a guard
 *    region past its end, so a stray write shows;
 *  - window-row pairs (kiln_conv_nhwc_bf16_internal.h: C = 1 or 3, x NCHW):
 *    which calls take them (kiln_conv2d_bf16_last_window_pairs, against
 *    the rule restated here), odd and even kw C, row dilation, several K
 *    blocks; and Inf, NaN and a float that rounds to Inf placed exactly
 *    one value past windows that do not hold them (the value a zero weight
 *    multiplies; 0 x Inf is NaN on VDPBF16PS), in every image or only the
 *    second of two: the outputs must be NaN exactly where the reference's
 *    are (eager's rule), and such a call must not report window pairs.
 *    The copy of few NCHW planes (C <= 4, pitch C or C + 1) runs in all
 *    of these and in C = 2, C = 4 and column-dilated C = 3 cases wider than
 *    16 pixels.
 *
 * Tolerance. Products of two bf16 values are exact in fp32 (8 + 8
 * significant bits), so the kernel differs from the double reference only
 * by its fp32 sums: K products summed in fp32 (any order, VDPBF16PS's
 * pairing included) err by at most (K - 1) u sum |x_i w_i| with u = 2^-24,
 * the bias and residual adds and the final rounding by u times their
 * magnitudes more; the activation (none or relu) is 1-Lipschitz. So
 * |got - want| <= K 2^-23 (sum |x_i w_i| + |bias| + |residual|) + 1e-30:
 * each element has its own bound. The tiny term covers VDPBF16PS
 * treating denormal inputs as zero (x's denormals are rounded and kept in
 * the copy, but a denormal times |w| <= 1 is below 1e-37). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/gemm/kiln_gemm.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "ir/kiln_graph.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

/* The bf16 engine mask the suite started with: kiln_cpu_bf16() reads 0
 * below the avx512 level whatever the mask, so the tests mask the engine
 * off with kiln_cpu_bf16_set(0) and restore this, never what they read. */
static unsigned cbf_mask_;

typedef struct {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int bias, residual, res_alias, res_first, special;
  kiln_activation_t act;
  int scale; /* sums scaled per channel (a folded batch norm, CONV2D's scale) */
} cbf_case_t;

#define CBF_GUARD 37

static int64_t cbf_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

static float cbf_round(float x) { return kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(x)); }

/* (N, C, H, W) -> (N, H, W, C). */
static void cbf_to_nhwc(const float* src, float* dst, int64_t n, int64_t c, int64_t hw) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t i = 0; i < hw; ++i) dst[(b * hw + i) * c + ci] = src[(b * c + ci) * hw + i];
}

/* Per element: K 2^-23 (sum |x w| + |bias| + |res|) + tiny, from the
 * rounded operands (x NHWC). */
static void cbf_bounds(const kiln_conv2d_f32_args_t* a, const float* xr, const float* wr,
                       float* bound) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups, k = cg * a->kh * a->kw;
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t i = 0; i < a->ho; ++i)
      for (int64_t j = 0; j < a->wo; ++j)
        for (int64_t o = 0; o < a->o; ++o) {
          const int64_t g = o / og;
          double s = 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < a->kh; ++u) {
              int64_t iy = i * a->sh - a->ph + u * a->dh;
              if (iy < 0 || iy >= a->h) continue;
              for (int64_t v = 0; v < a->kw; ++v) {
                int64_t ix = j * a->sw - a->pw + v * a->dw;
                if (ix < 0 || ix >= a->w) continue;
                s += fabs((double)wr[((o * cg + c) * a->kh + u) * a->kw + v] *
                          xr[((n * a->h + iy) * a->w + ix) * a->c + g * cg + c]);
              }
            }
          int64_t at = ((n * a->ho + i) * a->wo + j) * a->o + o;
          if (a->scale) s *= fabs(a->scale[o]);
          if (a->bias) s += fabs(a->bias[o]);
          if (a->residual) s += fabs(a->residual[at]);
          /* gelu's slope reaches 1.13 (none and relu: 1) */
          const double lip =
              a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU || a->act == KILN_ACT_RELU6 ? 1.0
                                                                                            : 1.2;
          bound[at] = (float)(lip * (double)(k + 2) * ldexp(s, -23) + 1e-30);
        }
}

/* got vs want within each element's bound; NaN must match NaN, infinities
 * exactly; the guard past y untouched. */
static void cbf_compare(const char* what, const float* got, const float* want, const float* bound,
                        size_t ny) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < ny + CBF_GUARD; ++i) {
    float g = got[i], w = want[i];
    int ok;
    if (isnan(w)) ok = isnan(g);
    else if (isinf(w) || i >= ny) ok = g == w || (isnan(g) && isnan(w));
    else ok = !isnan(g) && fabsf(g - w) <= bound[i];
    if (!ok && !bad++) first = i;
  }
  KILN_EXPECT(bad == 0, "%s: %zu of %zu elements off, first [%zu] got %.9g want %.9g bound %.3g",
              what, bad, ny, first, (double)got[first], (double)want[first],
              first < ny ? (double)bound[first] : 0.0);
}

/* bf16 storage (CONV2D_NHWC's Y_BF16, a bf16 x; format 2.23) on the
 * engine kiln_cpu_bf16() has now: x given as bf16 (rounded here as the
 * kernel rounds it) must give y32, the same engine's y from fp32 x, bit for
 * bit; a bf16 y (no residual) must be y32 rounded, bit for bit, with the
 * guard past it untouched; both together likewise. The 1x1 stride-1 even-C
 * convs read a bf16 x in place (no copy). */
static void cbf_bf16_io(kiln_conv2d_f32_args_t* a, const cbf_case_t* tc, const float* xt,
                        const float* xnchw, const float* res, const float* y32,
                        const float* y32n, const float* want, float* got, size_t ny,
                        kiln_pool_t* pool, const char* what) {
  const size_t nx = (size_t)(a->n * a->c * a->h * a->w);
  uint16_t* xb = malloc((nx + 1) * sizeof(uint16_t));
  uint16_t* yb = malloc((ny + CBF_GUARD) * sizeof(uint16_t));
  if (!xb || !yb) goto done;
  for (size_t i = 0; i < nx; ++i) xb[i] = kiln_gemm_bf16_from_f32(xt[i]);
  kiln_conv2d_f32_args_t b = *a;
  memcpy(got, res, (ny + CBF_GUARD) * sizeof(float));
  b.x = (const float*)(const void*)xb, b.x_bf16 = 1;
  b.residual = tc->residual ? (tc->res_alias ? got : res) : NULL;
  b.y = got;
  kiln_conv2d_bf16_nhwc(&b, 0, pool);
  KILN_EXPECT(!memcmp(got, y32, (ny + CBF_GUARD) * sizeof(float)),
              "%s path %s: x in bf16 = x rounded as read, bit for bit", what,
              kiln_conv2d_bf16_last_path());
  if (tc->residual) goto done; /* a bf16 y has none */
  for (int xbf = 0; xbf < 3; ++xbf) { /* x fp32 NHWC, bf16 NHWC, fp32 NCHW (a stem) */
    for (size_t i = 0; i < ny + CBF_GUARD; ++i) yb[i] = 0xabcd;
    b.x = xbf == 1 ? (const float*)(const void*)xb : xbf == 2 ? xnchw : xt, b.x_bf16 = xbf == 1;
    b.residual = NULL, b.y = (float*)(void*)yb, b.y_bf16 = 1;
    kiln_conv2d_bf16_nhwc(&b, xbf == 2, pool);
    const float* yw = xbf == 2 ? y32n : y32;
    size_t bad = 0, guard = 0;
    for (size_t i = 0; i < ny; ++i) bad += yb[i] != kiln_gemm_bf16_from_f32(yw[i]);
    for (size_t i = ny; i < ny + CBF_GUARD; ++i) guard += yb[i] != 0xabcd;
    KILN_EXPECT(!bad && !guard, "%s path %s: y in bf16%s = y rounded: %zu of %zu differ, %zu "
                "guard values written", what, kiln_conv2d_bf16_last_path(),
                xbf == 1 ? " from x in bf16" : xbf == 2 ? " from x NCHW" : "", bad, ny, guard);
    if (xbf < 2 && !strcmp(kiln_conv2d_bf16_last_path(), "fp32")) { /* the reference, once */
      for (size_t i = 0; i < ny + CBF_GUARD; ++i) yb[i] = 0xabcd;
      kiln_conv2d_bf16_nhwc_reference(&b, 0);
      bad = guard = 0;
      for (size_t i = 0; i < ny; ++i) bad += yb[i] != kiln_gemm_bf16_from_f32(want[i]);
      for (size_t i = ny; i < ny + CBF_GUARD; ++i) guard += yb[i] != 0xabcd;
      KILN_EXPECT(!bad && !guard, "%s: the reference's bf16 y%s = its y rounded: %zu differ, %zu "
                  "guard values written", what, xbf ? " from x in bf16" : "", bad, guard);
    }
  }
done:
  free(xb), free(yb);
}

static void cbf_run(const cbf_case_t* tc, kiln_pool_t* pool, const char* where) {
  kiln_conv2d_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = tc->n, a.c = tc->c, a.h = tc->h, a.w = tc->w, a.o = tc->o, a.kh = tc->kh, a.kw = tc->kw;
  a.sh = tc->sh, a.sw = tc->sw, a.ph = tc->ph, a.pw = tc->pw, a.dh = tc->dh, a.dw = tc->dw;
  a.groups = tc->groups, a.act = tc->act, a.residual_before_act = tc->res_first;
  a.ho = cbf_out(a.h, a.kh, a.sh, a.ph, a.dh);
  a.wo = cbf_out(a.w, a.kw, a.sw, a.pw, a.dw);
  const int64_t cg = a.c / a.groups, k = cg * a.kh * a.kw;
  size_t nx = (size_t)(a.n * a.c * a.h * a.w), nw = (size_t)(a.o * k);
  size_t ny = (size_t)(a.n * a.o * a.ho * a.wo), wb = kiln_conv2d_bf16_packed_size(a.o, cg, a.kh, a.kw, a.groups);
  float* x = malloc((nx + 1) * sizeof(float));    /* NCHW */
  float* xt = malloc((nx + 1) * sizeof(float));   /* NHWC */
  float* xr = malloc((nx + 1) * sizeof(float));   /* NHWC, rounded */
  float* w = malloc((nw + 1) * sizeof(float));
  float* wr = malloc((nw + 1) * sizeof(float));
  float* bias = malloc((size_t)(a.o + 1) * sizeof(float));
  float* scale = malloc((size_t)(a.o + 1) * sizeof(float));
  float* res = malloc((ny + CBF_GUARD) * sizeof(float));
  float* want = malloc((ny + CBF_GUARD) * sizeof(float));
  float* want32 = malloc((ny + CBF_GUARD) * sizeof(float));
  float* got = malloc((ny + CBF_GUARD) * sizeof(float));
  float* got32 = malloc((ny + CBF_GUARD) * sizeof(float)); /* this engine's y, x NHWC */
  float* got32n = malloc((ny + CBF_GUARD) * sizeof(float)); /* and x NCHW */
  float* bound = malloc((ny + CBF_GUARD) * sizeof(float));
  uint16_t* wp = malloc(wb + 64);
  KILN_EXPECT(wb > 0 && wb % 64 == 0, "packed size %zu", wb);
  unsigned seed = (unsigned)(a.c * 131 + a.h * 17 + a.o * 7 + a.kh + a.groups * 1009 + a.sw);
  kiln_test_fill_f32(x, nx, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(w, nw, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, (size_t)a.o, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(scale, (size_t)a.o, seed + 4, -2.0f, 2.0f);
  kiln_test_fill_f32(res, ny + CBF_GUARD, seed + 3, -1.0f, 1.0f);
  if (tc->special >= 2) { /* one past windows that do not hold them */
    const int64_t past = a.sw + (a.kw - 1) * a.dw + 1 - a.pw; /* x column past output 1's row */
    const int64_t hw = a.h * a.w;
    for (int64_t b = tc->special == 3 ? a.n - 1 : 0; b < a.n; ++b) {
      float* p0 = x + b * a.c * hw; /* channel 0 of image b, NCHW */
      if (past >= 0 && past < a.w) p0[(a.h / 2) * a.w + past] = NAN;
      if (past >= 0 && past < a.w) p0[(a.h - 1) * a.w + past] = -INFINITY;
      if (past + 2 * a.sw < a.w) p0[past + 2 * a.sw] = INFINITY;
      p0[a.w - 1] = 3.4028235e38f; /* rounds to bf16 Inf */
    }
  } else if (tc->special) {
    x[1] = NAN;
    x[nx / 2] = INFINITY;
    x[nx / 3] = 3e-39f;                 /* a denormal, kept as bf16 0x0021 */
    if (nx > 5) x[nx - 2] = 1.00390625f; /* a tie: 1 + 2^-8 rounds to even, 1 */
  }
  cbf_to_nhwc(x, xt, a.n, a.c, a.h * a.w);
  int finite = 1;
  for (size_t i = 0; i < nx; ++i) {
    xr[i] = cbf_round(xt[i]);
    finite &= isfinite(xr[i]) != 0;
  }
  for (size_t i = 0; i < nw; ++i) wr[i] = cbf_round(w[i]);
  kiln_conv2d_bf16_pack_weight(a.o, cg, a.kh, a.kw, a.groups, w, wp);

  char what[256];
  snprintf(what, sizeof what,
           "%s bf16 nhwc n%lld c%lld %lldx%lld o%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld "
           "g%lld bias%d res%d%s%s act%d special%d scale%d",
           where, (long long)a.n, (long long)a.c, (long long)a.h, (long long)a.w, (long long)a.o,
           (long long)a.kh, (long long)a.kw, (long long)a.sh, (long long)a.sw, (long long)a.ph,
           (long long)a.pw, (long long)a.dh, (long long)a.dw, (long long)a.groups, tc->bias,
           tc->residual, tc->res_alias ? "(alias)" : "", tc->res_first ? "(first)" : "",
           (int)tc->act, tc->special, tc->scale);
  char what2[320];

  /* The reference is the fp32 reference on the rounded operands. */
  a.bias = tc->bias ? bias : NULL;
  a.residual = tc->residual ? res : NULL;
  a.x = xr, a.weight = wr, a.y = want32;
  memcpy(want32, res, (ny + CBF_GUARD) * sizeof(float));
  kiln_conv2d_f32_nhwc_reference(&a);
  a.x = xt, a.weight = (const float*)(const void*)wp, a.weight_packed = KILN_CONV_PACKED_BF16;
  a.y = want;
  memcpy(want, res, (ny + CBF_GUARD) * sizeof(float));
  kiln_conv2d_bf16_nhwc_reference(&a, 0);
  snprintf(what2, sizeof what2, "%s: reference vs fp32 reference on rounded operands", what);
  kiln_test_compare_f32(what2, want, want32, ny + CBF_GUARD, 0.0f, 0.0f);
  if (tc->scale) {
    /* Scaled sums: the reference's own rule (sum times scale, then bias,
     * residual, activation) against its unscaled self on a scaled-only
     * check: with every scale 1 it must give the unscaled result exactly. */
    for (int64_t o = 0; o < a.o; ++o) scale[o] = 1.0f;
    a.scale = scale;
    memcpy(want32, res, (ny + CBF_GUARD) * sizeof(float));
    a.y = want32;
    kiln_conv2d_bf16_nhwc_reference(&a, 0);
    snprintf(what2, sizeof what2, "%s: reference with unit scales", what);
    kiln_test_compare_f32(what2, want32, want, ny + CBF_GUARD, 0.0f, 0.0f);
    kiln_test_fill_f32(scale, (size_t)a.o, seed + 4, -2.0f, 2.0f);
    memcpy(want, res, (ny + CBF_GUARD) * sizeof(float));
    a.y = want;
    kiln_conv2d_bf16_nhwc_reference(&a, 0);
  }
  a.x = xr;
  cbf_bounds(&a, xr, wr, bound);

  /* Each engine the machine has, then none: AMX (tiles from the copy when
   * a group's Cg2 is a multiple of 32, else from gathered rows), VDPBF16PS
   * alone, the portable path. */
  const unsigned has = kiln_cpu_bf16();
  const unsigned masks[3] = {has & KILN_CPU_BF16_AMX ? has : 0u, has & KILN_CPU_BF16_AVX512, 0u};
  for (int e = 0; e < 3; ++e) {
    if (e < 2 && !masks[e]) continue;
    const int eng = e < 2;
    kiln_cpu_bf16_set(masks[e]);
    const char* path = !eng ? "fp32" : e == 0 ? "amx" : "avx512_bf16";
    for (int nchw = 0; nchw < 2; ++nchw) {
      memcpy(got, res, (ny + CBF_GUARD) * sizeof(float));
      a.x = nchw ? x : xt;
      a.residual = tc->residual ? (tc->res_alias ? got : res) : NULL;
      a.y = got;
      kiln_conv2d_bf16_nhwc(&a, nchw, pool);
      snprintf(what2, sizeof what2, "%s path %s x %s", what, path, nchw ? "NCHW" : "NHWC");
      cbf_compare(what2, got, want, bound, ny);
      KILN_EXPECT(!strcmp(kiln_conv2d_bf16_last_path(), path), "%s: ran %s", what2,
                  kiln_conv2d_bf16_last_path());
      /* Window-row pairs exactly for the rule's shapes with finite x (any
       * x on AMX: its gathered rows hold a zero past each window row). */
      const int pairs = eng && nchw && a.c <= 3 && a.c % 2 && a.groups == 1 && a.dw == 1 &&
                        a.kw > 1 && (finite || e == 0);
      KILN_EXPECT(kiln_conv2d_bf16_last_window_pairs() == pairs, "%s: window pairs %d, want %d",
                  what2, kiln_conv2d_bf16_last_window_pairs(), pairs);
      memcpy(nchw ? got32n : got32, got, (ny + CBF_GUARD) * sizeof(float));
    }
    cbf_bf16_io(&a, tc, xt, x, res, got32, got32n, want, got, ny, pool, what);
    if (!eng) { /* the reference reads NCHW x the same */
      memcpy(got, res, (ny + CBF_GUARD) * sizeof(float));
      a.x = x, a.residual = tc->residual ? res : NULL;
      kiln_conv2d_bf16_nhwc_reference(&a, 1);
      snprintf(what2, sizeof what2, "%s: reference from NCHW x", what);
      kiln_test_compare_f32(what2, got, want, ny + CBF_GUARD, 0.0f, 0.0f);
    }
  }
  kiln_cpu_bf16_set(cbf_mask_);
  free(scale);
  free(x), free(xt), free(xr), free(w), free(wr), free(bias), free(res), free(want);
  free(want32), free(got), free(got32), free(got32n), free(bound), free(wp);
}

static void cbf_level(kiln_pool_t* pool, const char* where) {
  /* n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups */
  static const int64_t shapes[][14] = {
      {1, 3, 10, 11, 20, 4, 4, 1, 1, 2, 1, 1, 1, 1},   /* window pairs, kw C even */
      {1, 3, 12, 19, 16, 3, 3, 1, 1, 1, 1, 2, 1, 1},   /* window pairs, row dilation */
      {2, 1, 9, 8, 17, 2, 2, 1, 1, 0, 1, 1, 1, 1},     /* window pairs, C = 1, kw 2 */
      {1, 3, 30, 30, 40, 11, 11, 4, 4, 2, 2, 1, 1, 1}, /* window pairs, 187 rows: 2 K blocks */
      {1, 3, 13, 40, 16, 3, 3, 1, 1, 1, 1, 1, 2, 1},   /* column dilation: channel pairs */
      {1, 4, 9, 37, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* 4 planes, pitch 4, 37 wide */
      {1, 2, 6, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* 2 planes, pitch 2, 40 wide */
      {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1},      /* size 1 */
      {1, 3, 23, 21, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1},   /* ResNet's stem, C = 3 */
      {1, 3, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},     /* 3x3 s1 p1, O = 16 */
      {2, 5, 11, 7, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1},    /* 3x3 s2, odd C, O = 24, N = 2 */
      {1, 20, 10, 13, 48, 3, 2, 3, 1, 2, 0, 2, 1, 1},  /* stride 3x1, dilation, O = 48 */
      {1, 6, 11, 12, 17, 3, 3, 1, 3, 0, 1, 1, 2, 1},   /* stride 1x3, dilation 1x2 */
      {2, 16, 7, 9, 32, 1, 1, 1, 1, 0, 0, 1, 1, 1},    /* 1x1 s1 p0, O = 32 */
      {1, 64, 8, 8, 48, 1, 1, 2, 2, 0, 0, 1, 1, 1},    /* 1x1 s2 (a downsample) */
      {1, 33, 9, 9, 64, 1, 1, 1, 1, 0, 0, 1, 1, 1},    /* 1x1, odd C > 32 */
      {1, 10, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 2},    /* groups, odd Cg = 5 */
      {2, 6, 8, 8, 6, 1, 1, 1, 1, 0, 0, 1, 1, 3},      /* grouped 1x1, Cg = 2 */
      {1, 12, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1, 4},    /* groups 4, Cg 3, Og 10 */
      {1, 1, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1},      /* window = input, 1x1 out */
      {1, 2, 4, 4, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1},      /* stride > 1 with few pixels */
      {1, 40, 7, 7, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* 7x7 out, O = 33 (tail 1) */
      /* AMX (Cg2 a multiple of 32): unit strides are one run of the copy's
       * rows (columns past wo dropped), other strides a run per row. */
      {1, 32, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* one run, 11-wide copy */
      {1, 63, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* C 63: the pad channel in a step */
      {1, 64, 12, 11, 40, 3, 3, 1, 1, 2, 1, 2, 2, 2},  /* groups of 32, dilation, pad 2x1 */
      {1, 32, 5, 17, 32, 2, 3, 1, 2, 0, 1, 1, 1, 1},   /* stride 1x2: a run per row */
      {2, 32, 6, 5, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1},    /* 1x1: the copy is the image */
  };
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int v = 0; v < 6; ++v) {
      const int64_t* p = shapes[s];
      cbf_case_t tc = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10],
                       p[11], p[12], p[13], 0, 0, 0, 0, 0, KILN_ACT_NONE, 0};
      tc.bias = v >= 1 && v != 4;
      tc.act = v == 5 ? KILN_ACT_RELU6 : v == 1 || v >= 3 ? KILN_ACT_RELU : KILN_ACT_NONE;
      tc.residual = v >= 2 || (v == 0 && s % 2);
      tc.res_alias = v == 3;
      tc.res_first = v == 4;
      cbf_run(&tc, pool, where);
    }
  /* Several K blocks (64 x 9 / 2 = 288 pair rows), several tile blocks,
   * one strip of one panel, 2 strips. */
  cbf_case_t big = {1, 64, 30, 30, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, KILN_ACT_RELU, 0};
  cbf_run(&big, pool, where);
  cbf_case_t big2 = {1, 96, 14, 14, 64, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, KILN_ACT_RELU, 0};
  cbf_run(&big2, pool, where);
  cbf_case_t big3 = {2, 256, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, KILN_ACT_NONE, 0};
  cbf_run(&big3, pool, where);
  /* Inf and NaN one value past windows that do not hold them (special 2:
   * every image; 3: the second of two). */
  for (int ai = 0; ai < 3; ++ai) {
    const int act = ai == 2 ? KILN_ACT_RELU6 : ai;
    cbf_case_t past[] = {
        {1, 3, 23, 21, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1, 0, 0, 0, 2, (kiln_activation_t)act, 0},
        {2, 3, 23, 21, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1, 1, 0, 0, 3, (kiln_activation_t)act, 0},
        {1, 1, 9, 12, 16, 5, 5, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 2, (kiln_activation_t)act, 0},
        {2, 3, 9, 13, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 3, (kiln_activation_t)act, 0},
        /* no residual: the second image's run again, storing bf16 too */
        {2, 3, 23, 21, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1, 0, 0, 0, 3, (kiln_activation_t)act, 0},
    };
    for (size_t i = 0; i < sizeof(past) / sizeof(past[0]); ++i) cbf_run(&past[i], pool, where);
  }
  /* Sums scaled per channel (a folded batch norm): straight to y (none,
   * relu) and through the store callback (gelu); residual before and
   * after; groups; several K blocks. */
  for (int act = 0; act < 3; ++act) {
    const kiln_activation_t f = act == 2 ? KILN_ACT_GELU : (kiln_activation_t)act;
    cbf_case_t sc[] = {
        {1, 16, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, f, 1},
        {2, 5, 11, 7, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, f, 1},
        {1, 3, 23, 21, 64, 7, 7, 2, 2, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, f, 1},
        {1, 12, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1, 4, 0, 1, 1, 0, 0, f, 1},
        {1, 64, 30, 30, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, f, 1},
    };
    for (size_t i = 0; i < sizeof(sc) / sizeof(sc[0]); ++i) cbf_run(&sc[i], pool, where);
  }
  for (int act = 0; act < 2; ++act) {
    cbf_case_t sp[] = {
        {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, (kiln_activation_t)act, 0},
        {1, 8, 20, 21, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, (kiln_activation_t)act, 0},
        {1, 16, 8, 8, 20, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, (kiln_activation_t)act, 0},
    };
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); ++i) cbf_run(&sp[i], pool, where);
  }
}

/* The layout's size and bytes: O = 20 in 2 groups (Og 10: one panel of 16
 * per group, 6 zero rows), Cg = 3 padded to 4, 2x2 taps: 4 x 2 = 8 pair
 * rows a panel. */
static void cbf_layout(void) {
  const int64_t o = 20, cg = 3, kh = 2, kw = 2, G = 2;
  KILN_EXPECT(kiln_conv2d_bf16_packed_size(o, cg, kh, kw, G) == (size_t)(2 * 1 * 8 * 64),
              "size %zu", kiln_conv2d_bf16_packed_size(o, cg, kh, kw, G));
  KILN_EXPECT(kiln_conv2d_bf16_packed_size(21, cg, kh, kw, G) == 0, "O not a multiple of groups");
  KILN_EXPECT(kiln_conv2d_bf16_packed_size((int64_t)1 << 40, (int64_t)1 << 30, 1 << 20, 1, 1) == 0,
              "overflow");
  float w[20 * 3 * 2 * 2];
  for (int i = 0; i < 20 * 12; ++i) w[i] = (float)(i + 1);
  uint16_t out[2 * 8 * 32];
  kiln_conv2d_bf16_pack_weight(o, cg, kh, kw, G, w, out);
  int bad = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t i = 0; i < 16; ++i)
        for (int e = 0; e < 2; ++e) {
          int64_t uv = r / 2, c = (r % 2) * 2 + e; /* Cg2 / 2 = 2 pairs per (u, v) */
          float want = i < 10 && c < cg ? w[((g * 10 + i) * cg + c) * 4 + uv] : 0.0f;
          bad += kiln_gemm_bf16_to_f32(out[(g * 8 + r) * 32 + 2 * i + e]) != want;
        }
  KILN_EXPECT(bad == 0, "%d packed elements misplaced", bad);
}

/* x (1, 6, 6, C) NHWC -> CONV2D_NHWC 3x3 p1 relu, the weight a constant
 * of the bf16 layout holding `bytes` of wp; NULL when the graph API
 * refuses. */
enum { CBF_C = 5, CBF_O = 20 };
/* A graph of one 3x3 CONV2D_NHWC on the bf16 layout with bias and relu,
 * reading x as bf16 when round_x is 1 (ROUND_X; another value is refused:
 * the status in *out_status and no graph). */
static kiln_graph_t* cbf_graph_round_x(const uint16_t* wp, size_t bytes, const float* bias,
                                       int64_t round_x, kiln_status_t* out_status) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t sx[4] = {1, 6, 6, CBF_C}, sw[4] = {CBF_O, CBF_C, 3, 3}, sb[1] = {CBF_O};
  int32_t vx, vw, vb, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, sw, KILN_LAYOUT_CONV2D_PACKED_16_BF16,
                                         wp, bytes, &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, bias,
                                         CBF_O * sizeof(float), &vb));
  int32_t in[3] = {vx, vw, vb};
  int64_t p[KILN_P_COUNT(CONV2D_NHWC)] = {1, 1, 1, 1, 1, 1, 1, KILN_ACT_RELU, 0, 0};
  p[KILN_P(CONV2D_NHWC, ROUND_X)] = round_x;
  *out_status = kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, in, 3, p, KILN_P_COUNT(CONV2D_NHWC),
                                    NULL, 0, "c", &y);
  if (*out_status) {
    kiln_graph_release(g);
    return NULL;
  }
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  return g;
}

static kiln_graph_t* cbf_graph(const uint16_t* wp, size_t bytes, const float* bias) {
  kiln_status_t s = NULL;
  kiln_graph_t* g = cbf_graph_round_x(wp, bytes, bias, 0, &s);
  KILN_EXPECT_OK(s);
  return g;
}

/* Shape inference's rule for bf16 storage (format 2.23): Y_BF16 makes y
 * bfloat16 for the bf16-compute form or a depthwise conv's dense weight,
 * never with a residual, never 2; a bfloat16 x only NHWC, read by those. */
static void cbf_bf16_storage_rules(const uint16_t* wp, size_t bytes) {
  static const float wd[CBF_O * CBF_C * 9], wdw[CBF_C * 9];
  /* weight: 0 bf16 form, 1 dense groups 1, 2 dense depthwise (O = C) */
  static const struct { int xbf, weight, ybf, residual, ok; const char* what; } cases[] = {
      {0, 0, 1, 0, 1, "a bf16-compute conv storing y in bf16"},
      {1, 0, 1, 0, 1, "a bf16-compute conv reading and storing bf16"},
      {1, 2, 1, 0, 1, "a depthwise conv reading and storing bf16"},
      {0, 0, 1, 1, 0, "a bf16 y with a residual"},
      {0, 0, 2, 0, 0, "y_bf16 2"},
      {0, 1, 1, 0, 0, "a bf16 y from an fp32 conv that is not depthwise"},
      {1, 1, 0, 0, 0, "a bf16 x read by an fp32 conv that is not depthwise"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    kiln_graph_t* g = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    if (!g) return;
    const int dw = cases[i].weight == 2;
    const int64_t o = dw ? CBF_C : CBF_O, sx[4] = {1, 6, 6, CBF_C}, sw[4] = {o, dw ? 1 : CBF_C, 3, 3};
    const int64_t sy[4] = {1, 6, 6, o};
    int32_t vx, vw, vr, y;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "x", cases[i].xbf ? KILN_BF16 : KILN_F32, 4, sx, &vx));
    if (cases[i].weight == 0)
      KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, sw,
                                             KILN_LAYOUT_CONV2D_PACKED_16_BF16, wp, bytes, &vw));
    else
      KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, sw, KILN_LAYOUT_DENSE,
                                             dw ? wdw : wd, (size_t)(o * sw[1] * 9) * 4, &vw));
    KILN_EXPECT_OK(kiln_graph_add_input(g, "r", KILN_F32, 4, sy, &vr));
    int32_t in[4] = {vx, vw, -1, vr};
    int64_t p[KILN_P_COUNT(CONV2D_NHWC)] = {1, 1, 1, 1, 1, 1, dw ? CBF_C : 1, KILN_ACT_RELU, 0, 0};
    p[KILN_P(CONV2D_NHWC, Y_BF16)] = cases[i].ybf;
    kiln_status_t s = kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, in, cases[i].residual ? 4 : 2, p,
                                          KILN_P_COUNT(CONV2D_NHWC), NULL, 0, "c", &y);
    if (cases[i].ok)
      KILN_EXPECT(!s && g->values[y].dtype == (cases[i].ybf ? KILN_BF16 : KILN_F32),
                  "%s is accepted, y %s: %s", cases[i].what, cases[i].ybf ? "bf16" : "fp32",
                  s ? kiln_status_message(s) : "ok");
    else
      KILN_EXPECT(s && strstr(kiln_status_message(s), "conv2d_nhwc"), "%s is refused: %s",
                  cases[i].what, s ? kiln_status_message(s) : "accepted");
    kiln_status_free(s);
    kiln_graph_release(g);
  }
}

static int cbf_model_run(kiln_graph_t* g, float* x, float* y) {
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(g, NULL, NULL, &m));
  if (!m) return 0;
  int64_t sx[4] = {1, 6, 6, CBF_C}, sy[4] = {1, 6, 6, CBF_O};
  kiln_tensor_t in = {x, KILN_F32, 4, sx}, out = {y, KILN_F32, 4, sy};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &out, 1));
  kiln_model_release(m);
  return 1;
}

static void cbf_graph_and_file(void) {
  enum { NX = 36 * CBF_C, NY = 36 * CBF_O, NW = CBF_O * CBF_C * 9 };
  static float x[NX], w[NW], bias[CBF_O], want[NY], got[NY], got2[NY];
  kiln_test_fill_f32(x, NX, 51, -1, 1);
  kiln_test_fill_f32(w, NW, 52, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, CBF_O, 53, -0.5f, 0.5f);
  const size_t wb = kiln_conv2d_bf16_packed_size(CBF_O, CBF_C, 3, 3, 1);
  uint16_t* wp = aligned_alloc(64, wb);
  kiln_conv2d_bf16_pack_weight(CBF_O, CBF_C, 3, 3, 1, w, wp);
  kiln_conv2d_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = 1, a.c = CBF_C, a.h = a.w = 6, a.o = CBF_O, a.kh = a.kw = 3, a.ho = a.wo = 6;
  a.sh = a.sw = a.ph = a.pw = a.dh = a.dw = a.groups = 1, a.act = KILN_ACT_RELU;
  a.x = x, a.weight = (const float*)(const void*)wp, a.bias = bias, a.y = want;
  a.weight_packed = KILN_CONV_PACKED_BF16;
  kiln_conv2d_bf16_nhwc_reference(&a, 0);
  /* K = 45 products of |x w| <= 0.5: fp32 sums within 45 * 2^-23 * 23 < 2e-4. */
  cbf_bf16_storage_rules(wp, wb);
  kiln_graph_t* g = cbf_graph(wp, wb, bias);
  if (g) {
    void* bytes = NULL;
    size_t size = 0;
    KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
    if (cbf_model_run(g, x, got))
      kiln_test_compare_f32("graph with a bf16-compute conv weight", got, want, NY, 2e-4f, 0.0f);
    if (bytes) {
      KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) ==
                      KILN_FORMAT_MINOR_CONV_BF16,
                  "a file with a bf16-compute conv weight says 2.16");
      kiln_graph_t* back = NULL;
      KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &back));
      if (back) {
        const kiln_value_t* v = &back->values[back->nodes[0].inputs[1]];
        KILN_EXPECT(v->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16 && v->nbytes == wb &&
                        !memcmp(v->data, wp, wb),
                    "the weight round-trips (layout %d, %zu bytes)", (int)v->layout, v->nbytes);
        if (cbf_model_run(back, x, got2))
          kiln_test_compare_f32("the same graph read back", got2, got, NY, 0.0f, 0.0f);
      }
      /* Stamped 2.15: no writer of 2.15 made this layout. */
      kiln_format_put_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR, KILN_FORMAT_MINOR_CONV_BF16 - 1);
      back = NULL;
      kiln_status_t s = kiln_artifact_read(bytes, size, kiln_allocator_system(), &back);
      KILN_EXPECT(s && kiln_status_code(s) == KILN_CORRUPT_ARTIFACT &&
                      strstr(kiln_status_message(s), "bf16-compute conv weight"),
                  "a 2.15 file with layout 12 is refused: %s", s ? kiln_status_message(s) : "read");
      kiln_status_free(s);
      if (back) kiln_graph_release(back);
      free(bytes);
    }
  }
  /* Read as bf16 (ROUND_X: a bf16 model's conv, format 2.19): the same
   * numbers (the layout rounds x already), the file stamped 2.19, refused
   * when stamped older; ROUND_X 2 and an NCHW conv's X_NCHW refused. */
  kiln_status_t s2 = NULL;
  g = cbf_graph_round_x(wp, wb, bias, 1, &s2);
  KILN_EXPECT(!s2, "round_x 1 is accepted: %s", s2 ? kiln_status_message(s2) : "");
  kiln_status_free(s2);
  if (g) {
    void* bytes = NULL;
    size_t size = 0;
    KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
    if (cbf_model_run(g, x, got2)) /* the model takes the graph */
      kiln_test_compare_f32("a conv reading x as bf16", got2, want, NY, 2e-4f, 0.0f);
    if (bytes) {
      KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) ==
                      KILN_FORMAT_MINOR_CONV_ROUND_X,
                  "a file with a conv reading x as bf16 says 2.19");
      kiln_graph_t* back = NULL;
      KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &back));
      KILN_EXPECT(back && back->nodes[0].params[KILN_P(CONV2D_NHWC, ROUND_X)] == 1,
                  "round_x round-trips");
      if (back) kiln_graph_release(back);
      back = NULL;
      kiln_format_put_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR, KILN_FORMAT_MINOR_CONV_ROUND_X - 1);
      kiln_status_t s = kiln_artifact_read(bytes, size, kiln_allocator_system(), &back);
      KILN_EXPECT(s && kiln_status_code(s) == KILN_CORRUPT_ARTIFACT &&
                      strstr(kiln_status_message(s), "reads x as bf16"),
                  "a 2.18 file with round_x is refused: %s", s ? kiln_status_message(s) : "read");
      kiln_status_free(s);
      if (back) kiln_graph_release(back);
      free(bytes);
    }
  }
  g = cbf_graph_round_x(wp, wb, bias, 2, &s2);
  KILN_EXPECT(!g && s2 && strstr(kiln_status_message(s2), "round_x is 0 or 1"),
              "round_x 2 is refused: %s", s2 ? kiln_status_message(s2) : "accepted");
  kiln_status_free(s2);
  {
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &h));
    int64_t sx[4] = {1, CBF_C, 6, 6}, sw[4] = {CBF_O, CBF_C, 3, 3};
    int32_t in[2], y;
    KILN_EXPECT_OK(kiln_graph_add_input(h, "x", KILN_F32, 4, sx, &in[0]));
    KILN_EXPECT_OK(kiln_graph_add_constant(h, "w", KILN_F32, 4, sw, KILN_LAYOUT_DENSE, w,
                                           sizeof w, &in[1]));
    int64_t p[KILN_P_COUNT(CONV2D)] = {1, 1, 1, 1, 1, 1, 1, 0, 0};
    p[KILN_P(CONV2D, X_NCHW)] = 1;
    kiln_status_t s = kiln_graph_add_node(h, KILN_OP_CONV2D, in, 2, p, KILN_P_COUNT(CONV2D), NULL,
                                          0, "c", &y);
    KILN_EXPECT(s && strstr(kiln_status_message(s), "x_nchw"),
                "an NCHW conv2d with x_nchw 1 is refused: %s", s ? kiln_status_message(s) : "accepted");
    kiln_status_free(s);
    kiln_graph_release(h);
  }
  /* A weight 64 bytes short (one pair row), and one with a pair row too many. */
  for (int bad = 0; bad < 2; ++bad) {
    uint16_t* big = aligned_alloc(64, wb + 64);
    memcpy(big, wp, wb);
    g = cbf_graph(big, bad ? wb + 64 : wb - 64, bias);
    if (g) {
      kiln_model_t* m = NULL;
      kiln_status_t s = kiln_model_create(g, NULL, NULL, &m);
      KILN_EXPECT(s && kiln_status_code(s) == KILN_INVALID_ARGUMENT &&
                      strstr(kiln_status_message(s), "bf16-compute conv2d weight has"),
                  "a wrong-size bf16 conv weight is refused: %s", s ? kiln_status_message(s) : "accepted");
      kiln_status_free(s);
      if (m) kiln_model_release(m);
    }
    free(big);
  }
  free(wp);
}

/* The compiler: a channels-last region's conv (C = O = 32) under
 * compute_bf16 gets the bf16 layout exactly when kiln_cpu_bf16() has the
 * engine at compile time, else the fp32 panels of 16; both runs match
 * their contract. */
static void cbf_compile(int with_engine) {
  enum { C = 32, O = 32, HW = 8 };
  static float x[C * HW * HW], w[O * C * 9], want[O * HW * HW], got[O * HW * HW];
  kiln_test_fill_f32(x, C * HW * HW, 61, -1, 1);
  kiln_test_fill_f32(w, O * C * 9, 62, -0.2f, 0.2f);
  if (!with_engine) kiln_cpu_bf16_set(0);
  const int engine = (kiln_cpu_bf16() & KILN_CPU_BF16_AVX512) != 0;
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  int64_t sx[4] = {1, C, HW, HW}, sw[4] = {O, C, 3, 3};
  int32_t vx, vw, y1, y2;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
  int32_t in[2] = {vx, vw};
  const int64_t p[9] = {1, 1, 1, 1, 1, 1, 1, KILN_ACT_RELU, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, in, 2, p, 9, NULL, 0, "c1", &y1));
  int32_t in2[2] = {y1, vw};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, in2, 2, p, 9, NULL, 0, "c2", &y2));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y2, 1));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.compute_bf16 = 1;
  kiln_graph_t* c = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &c)); /* consumes g */
  if (c) {
    int n_bf16 = 0, n_nhwc = 0, n_f32 = 0;
    for (int32_t i = 0; i < c->n_nodes; ++i) {
      if (c->nodes[i].op != KILN_OP_CONV2D_NHWC) continue;
      ++n_nhwc;
      kiln_layout_t l = c->values[c->nodes[i].inputs[1]].layout;
      n_bf16 += l == KILN_LAYOUT_CONV2D_PACKED_16_BF16;
      n_f32 += l == KILN_LAYOUT_CONV2D_PACKED_16;
    }
    KILN_EXPECT(n_nhwc == 2 && n_bf16 == (engine ? 2 : 0) && n_f32 == (engine ? 0 : 2),
                "engine %d: %d NHWC convs, %d bf16 forms, %d fp32 forms", engine, n_nhwc, n_bf16,
                n_f32);
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(c, NULL, NULL, &m));
    if (m) {
      int64_t sy[4] = {1, O, HW, HW};
      kiln_tensor_t ti = {x, KILN_F32, 4, sx}, to = {got, KILN_F32, 4, sy};
      KILN_EXPECT_OK(kiln_model_run(m, &ti, 1, &to, 1));
      kiln_model_release(m);
      /* Two fp32 (or, with the engine, bf16) convs in float64 (NCHW). */
      static float h[O * HW * HW];
      for (int layer = 0; layer < 2; ++layer) {
        const float* src = layer ? h : x;
        float* dst = layer ? want : h;
        for (int oc = 0; oc < O; ++oc)
          for (int i = 0; i < HW; ++i)
            for (int j = 0; j < HW; ++j) {
              double acc = 0;
              for (int ci = 0; ci < C; ++ci)
                for (int u = 0; u < 3; ++u)
                  for (int v = 0; v < 3; ++v) {
                    int iy = i - 1 + u, ix = j - 1 + v;
                    if (iy < 0 || iy >= HW || ix < 0 || ix >= HW) continue;
                    float xv = src[(ci * HW + iy) * HW + ix], wv = w[((oc * C + ci) * 3 + u) * 3 + v];
                    if (engine) xv = cbf_round(xv), wv = cbf_round(wv);
                    acc += (double)xv * wv;
                  }
              dst[(oc * HW + i) * HW + j] = acc > 0 ? (float)acc : 0.0f;
            }
      }
      /* fp32: K = 288 sums; bf16: the second layer's input may round one
       * step (2^-8) apart where fp32 and double straddle a boundary. */
      kiln_test_compare_f32(engine ? "compiled convs, bf16 form" : "compiled convs, fp32 form", got,
                            want, O * HW * HW, engine ? 2e-2f : 1e-4f, engine ? 1e-2f : 1e-4f);
    }
  }
  kiln_cpu_bf16_set(cbf_mask_);
}

/* x's rounding to the bit, through a conv whose result is bf16(x) exactly
 * (one exact product with weight 1, plus exact zeros): C = 1, O = 1, w = 1
 * (each pixel's copy: the value and the pad channel), and C = 2, O = 2
 * with the identity weight (1, 0; 0, 1: whole rows rounded as one run),
 * NHWC and NCHW x, at every pixel: nearest even on ties, NaN stays NaN,
 * +-Inf, -0, the largest floats (rounding up to Inf past the last bf16).
 * The identity case takes only values whose bf16 is finite (0 x Inf is
 * NaN). Denormals: rounded and kept by the copy, but VDPBF16PS and AMX
 * treat denormal inputs as zero, so through an engine y is 0 there; the
 * portable path (fp32 FMAs) keeps them. */
static void cbf_rounding(kiln_pool_t* pool, const char* where) {
  enum { H = 5, W = 7, N = H * W * 2 };
  static const float special[] = {1.00390625f, 1.01171875f, -1.00390625f, 3e-39f, -1e-40f,
                                  1.1754942e-38f, 3.3895314e38f, 3.4028235e38f, -0.0f,
                                  INFINITY, -INFINITY, NAN, 0.1f, -2.7182817f, 65504.0f};
  const size_t ns = sizeof(special) / sizeof(special[0]);
  const int engine = (kiln_cpu_bf16() & KILN_CPU_BF16_AVX512) != 0;
  for (int C = 1; C <= 2; ++C) {
    float x[N], xn[N], y[N + CBF_GUARD], w[4] = {1, 0, 0, 1};
    for (int i = 0, j = 0; i < H * W * C; ++j) {
      float v = special[(size_t)j % ns] * (j % 3 == 2 ? 0.75f : 1.0f);
      if (C == 1 || isfinite(cbf_round(v))) x[i++] = v;
    }
    for (int c = 0; c < C; ++c)
      for (int p = 0; p < H * W; ++p) xn[c * H * W + p] = x[p * C + c];
    uint16_t wp[64];
    kiln_conv2d_bf16_pack_weight(C, C, 1, 1, 1, w, wp);
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = C, a.h = a.ho = H, a.w = a.wo = W, a.o = C, a.kh = a.kw = 1;
    a.sh = a.sw = a.dh = a.dw = a.groups = 1;
    a.weight = (const float*)(const void*)wp, a.weight_packed = KILN_CONV_PACKED_BF16, a.y = y;
    for (int nchw = 0; nchw < 2; ++nchw) {
      for (int i = 0; i < CBF_GUARD; ++i) y[H * W * C + i] = -7.0f;
      a.x = nchw ? xn : x;
      kiln_conv2d_bf16_nhwc(&a, nchw, pool);
      int bad = 0, first = -1;
      for (int i = 0; i < H * W * C; ++i) {
        float want = cbf_round(x[i]);
        if (engine && fpclassify(want) == FP_SUBNORMAL) want = 0.0f;
        int ok = isnan(want) ? isnan(y[i]) : memcmp(&want, &y[i], 4) == 0 || (want == 0 && y[i] == 0);
        if (!ok && !bad++) first = i;
      }
      for (int i = 0; i < CBF_GUARD; ++i) bad += y[H * W * C + i] != -7.0f;
      const char* path = !engine ? "fp32"
                         : kiln_cpu_bf16() & KILN_CPU_BF16_AMX ? "amx" : "avx512_bf16";
      KILN_EXPECT(bad == 0 && !strcmp(kiln_conv2d_bf16_last_path(), path),
                  "%s rounding through an identity conv (C %d, %s x, path %s): %d off, first [%d] "
                  "x %.9g got %.9g want %.9g", where, C, nchw ? "NCHW" : "NHWC",
                  kiln_conv2d_bf16_last_path(), bad, first, first >= 0 ? (double)x[first] : 0.0,
                  first >= 0 ? (double)y[first] : 0.0, first >= 0 ? (double)cbf_round(x[first]) : 0.0);
    }
  }
}

static void cbf_level_all(kiln_pool_t* pool, const char* where) {
  cbf_rounding(pool, where);
  if (kiln_cpu_bf16()) { /* the portable path at this level too */
    kiln_cpu_bf16_set(0);
    cbf_rounding(pool, where);
    kiln_cpu_bf16_set(cbf_mask_);
  }
  cbf_level(pool, where);
  KILN_EXPECT(kiln_cpu_isa() != KILN_ISA_AVX512 || kiln_cpu_bf16() == cbf_mask_,
              "%s: the engine mask is restored", where);
}

void kiln_test_suite_conv_nhwc_bf16(void) {
  cbf_mask_ = kiln_cpu_bf16();
  cbf_layout();
  cbf_graph_and_file();
  cbf_compile(1);
  cbf_compile(0);
  kiln_test_each_isa_and_pool(cbf_level_all);
  kiln_cpu_bf16_set(cbf_mask_);
}
