/* Tests of the channels-last convolution (kernels/conv/kiln_conv_nhwc.h):
 *  - its scalar reference against the NCHW reference on permuted tensors
 *    (so the NHWC definition is the NCHW one, not a second opinion);
 *  - kiln_conv2d_f32_nhwc against that reference at every ISA level the
 *    machine has, on 1- and 2-thread pools, over edge shapes: size 1,
 *    channel and pixel tails (O not a multiple of 16, pixels not of 6),
 *    odd strides, padding (the bordered copy) and none (x read in place),
 *    groups, depthwise, dilation, N = 2, several K blocks, every
 *    activation, residuals before and after the activation (also aliasing
 *    y), NaN and Inf, with the weight dense and packed in 16s, and with x
 *    given NCHW (kiln_conv2d_f32_nhwc_from_nchw); y is compared with a
 *    guard region past its end, so a stray write shows.
 * Tolerance as test_conv.c: atol = 1e-5 sqrt(K) + 1e-6, rtol 1e-5 (fp32
 * sums of K products of values in [-1, 1] against a double reference). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_internal.h"
#include "base/kiln_cpu.h"
#include "ir/kiln_shape_common.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_planes.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kiln_test.h"

typedef struct {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int bias, residual, res_alias, res_first, special;
  kiln_activation_t act;
} nhwc_case_t;

#define NHWC_GUARD 29

static int64_t nhwc_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* (N, C, H, W) -> (N, H, W, C) and back (dir 1). */
static void nhwc_permute(const float* src, float* dst, int64_t n, int64_t c, int64_t h, int64_t w,
                         int back) {
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t i = 0; i < h * w; ++i) {
        int64_t nchw = (b * c + ci) * h * w + i, nhwc = (b * h * w + i) * c + ci;
        if (back) dst[nchw] = src[nhwc];
        else dst[nhwc] = src[nchw];
      }
}

static void nhwc_run(const nhwc_case_t* tc, kiln_pool_t* pool, const char* where) {
  kiln_conv2d_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = tc->n, a.c = tc->c, a.h = tc->h, a.w = tc->w, a.o = tc->o, a.kh = tc->kh, a.kw = tc->kw;
  a.sh = tc->sh, a.sw = tc->sw, a.ph = tc->ph, a.pw = tc->pw, a.dh = tc->dh, a.dw = tc->dw;
  a.groups = tc->groups, a.act = tc->act, a.residual_before_act = tc->res_first;
  a.ho = nhwc_out(a.h, a.kh, a.sh, a.ph, a.dh);
  a.wo = nhwc_out(a.w, a.kw, a.sw, a.pw, a.dw);
  const int64_t k = a.c / a.groups * a.kh * a.kw;
  size_t nx = (size_t)(a.n * a.c * a.h * a.w), nw = (size_t)(a.o * k);
  size_t ny = (size_t)(a.n * a.o * a.ho * a.wo);
  float* x = malloc((nx + 1) * sizeof(float));
  float* xt = malloc((nx + 1) * sizeof(float));
  float* w = malloc((nw + 1) * sizeof(float));
  float* bias = malloc((size_t)(a.o + 1) * sizeof(float));
  float* res = malloc((ny + NHWC_GUARD) * sizeof(float));
  float* rest = malloc((ny + NHWC_GUARD) * sizeof(float));
  float* want = malloc((ny + NHWC_GUARD) * sizeof(float));
  float* want_nchw = malloc((ny + NHWC_GUARD) * sizeof(float));
  float* got = malloc((ny + NHWC_GUARD) * sizeof(float));
  float* wp = malloc(kiln_conv2d_f32_packed_size(a.o, k, a.groups, KILN_CONV_PANEL_WIDE) + 4);
  unsigned seed = (unsigned)(a.c * 131 + a.h * 17 + a.o * 7 + a.kh + a.groups * 1009 + a.sw);
  kiln_test_fill_f32(x, nx, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(w, nw, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, (size_t)a.o, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(res, ny + NHWC_GUARD, seed + 3, -1.0f, 1.0f);
  if (tc->special) {
    x[1] = NAN;
    x[nx / 2] = INFINITY;
  }
  nhwc_permute(x, xt, a.n, a.c, a.h, a.w, 0);
  memcpy(rest, res, (ny + NHWC_GUARD) * sizeof(float));
  nhwc_permute(res, rest, a.n, a.o, a.ho, a.wo, 0);

  /* The NHWC reference is the NCHW one on permuted tensors. */
  a.x = x, a.weight = w, a.bias = tc->bias ? bias : NULL;
  a.residual = tc->residual ? res : NULL;
  memcpy(want_nchw, res, (ny + NHWC_GUARD) * sizeof(float));
  a.y = want_nchw;
  kiln_conv2d_f32_reference(&a);
  a.x = xt, a.residual = tc->residual ? rest : NULL;
  memcpy(want, rest, (ny + NHWC_GUARD) * sizeof(float));
  a.y = want;
  kiln_conv2d_f32_nhwc_reference(&a);
  nhwc_permute(want, got, a.n, a.o, a.ho, a.wo, 1);
  char what[256];
  snprintf(what, sizeof what,
           "%s nhwc n%lld c%lld %lldx%lld o%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld g%lld "
           "bias%d res%d%s%s act%d nan%d",
           where, (long long)a.n, (long long)a.c, (long long)a.h, (long long)a.w, (long long)a.o,
           (long long)a.kh, (long long)a.kw, (long long)a.sh, (long long)a.sw, (long long)a.ph,
           (long long)a.pw, (long long)a.dh, (long long)a.dw, (long long)a.groups, tc->bias,
           tc->residual, tc->res_alias ? "(alias)" : "", tc->res_first ? "(first)" : "",
           (int)tc->act, tc->special);
  char what2[300];
  snprintf(what2, sizeof what2, "%s: reference vs NCHW reference", what);
  kiln_test_compare_f32(what2, got, want_nchw, ny, 1e-6f, 1e-6f);

  kiln_conv2d_f32_pack_weight(a.o, k, a.groups, KILN_CONV_PANEL_WIDE, w, wp);
  for (int packed = 0; packed < 2; ++packed) {
    memcpy(got, rest, (ny + NHWC_GUARD) * sizeof(float));
    a.weight = packed ? wp : w;
    a.weight_packed = packed ? KILN_CONV_PANEL_WIDE : 0;
    a.residual = tc->residual ? (tc->res_alias ? got : rest) : NULL;
    a.y = got;
    kiln_conv2d_f32_nhwc(&a, pool);
    snprintf(what2, sizeof what2, "%s weights %s", what, packed ? "packed 16" : "dense");
    kiln_test_compare_f32(what2, got, want, ny + NHWC_GUARD, 1e-5f * sqrtf((float)k) + 1e-6f,
                          1e-5f);
    /* x given NCHW (CONV2D_NHWC's param 9): the same y. */
    memcpy(got, rest, (ny + NHWC_GUARD) * sizeof(float));
    a.x = x;
    kiln_conv2d_f32_nhwc_from_nchw(&a, pool);
    snprintf(what2, sizeof what2, "%s weights %s, x NCHW", what, packed ? "packed 16" : "dense");
    kiln_test_compare_f32(what2, got, want, ny + NHWC_GUARD, 1e-5f * sqrtf((float)k) + 1e-6f,
                          1e-5f);
    if (!packed) { /* the reference's NCHW-x reading too */
      memcpy(got, rest, (ny + NHWC_GUARD) * sizeof(float));
      kiln_conv2d_f32_nhwc_reference_from_nchw(&a);
      snprintf(what2, sizeof what2, "%s: reference from NCHW x", what);
      kiln_test_compare_f32(what2, got, want, ny + NHWC_GUARD, 0.0f, 0.0f);
    }
    a.x = xt;
  }
  free(x), free(xt), free(w), free(bias), free(res), free(rest), free(want), free(want_nchw);
  free(got), free(wp);
}

static void nhwc_level(kiln_pool_t* pool, const char* where) {
  /* n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups */
  static const int64_t shapes[][14] = {
      {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1},      /* size 1 */
      {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},      /* 3x3 same, padded */
      {2, 5, 11, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1},     /* stride 2, odd sizes, N = 2 */
      {1, 4, 10, 13, 5, 3, 2, 3, 1, 2, 0, 2, 1, 1},    /* odd stride 3, dilation, mixed */
      {1, 6, 11, 12, 17, 3, 3, 1, 3, 0, 1, 1, 2, 1},   /* stride 1x3, dilation 1x2 */
      {2, 16, 7, 9, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1},    /* 1x1: GEMM on x in place */
      {1, 16, 8, 8, 8, 1, 1, 2, 2, 0, 0, 1, 1, 1},     /* 1x1 stride 2, in place */
      {1, 8, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 4},     /* groups */
      {2, 6, 8, 8, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2},      /* grouped 1x1 */
      {2, 7, 12, 10, 7, 3, 3, 1, 1, 1, 1, 1, 1, 7},    /* depthwise */
      {1, 3, 23, 21, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1},   /* 7x7 stem */
      {1, 1, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1},      /* window = input, 1x1 out */
      {1, 2, 4, 4, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1},      /* stride > 1 with few pixels */
      {1, 40, 7, 7, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* 7x7 out, O = 33 (tail 1) */
      /* Depthwise (groups == C == O) with a dense weight: its own kernel
       * (kiln_conv_nhwc_dw.c), channel tails, pixel tails, borders. */
      {2, 20, 9, 11, 20, 3, 3, 1, 1, 1, 1, 1, 1, 20},  /* C = 20: a tail of 4 */
      {1, 32, 12, 13, 32, 3, 3, 2, 2, 1, 1, 1, 1, 32}, /* stride 2 */
      /* 3 wide at stride 1 and 2 (AVX-512: blocks of 8 pixels, then 4,
       * then the channel tail of the 8-pixel blocks' columns). */
      {2, 20, 5, 29, 20, 3, 3, 1, 1, 1, 1, 1, 1, 20},  /* 27 interior columns */
      {1, 24, 7, 37, 24, 3, 3, 2, 2, 1, 1, 1, 1, 24},  /* 18 interior columns */
      {1, 16, 4, 40, 16, 3, 3, 2, 1, 0, 0, 1, 1, 16},  /* no border column, no tail */
      {1, 48, 10, 13, 48, 5, 5, 1, 1, 2, 2, 1, 1, 48}, /* 5x5 */
      {1, 16, 9, 9, 16, 3, 3, 1, 1, 2, 2, 2, 2, 16},   /* dilation 2 */
      {1, 17, 3, 2, 17, 3, 3, 1, 1, 1, 1, 1, 1, 17},   /* no interior column */
      {1, 16, 6, 20, 16, 7, 7, 1, 1, 3, 3, 1, 1, 16},  /* 7x7: 49 taps */
      {1, 16, 8, 9, 16, 3, 3, 1, 2, 0, 1, 1, 1, 16},   /* strides and pads by axis */
      {1, 8, 12, 12, 8, 9, 9, 1, 1, 4, 4, 1, 1, 8},    /* 81 taps: the general path */
      {1, 1, 5, 6, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1},      /* C = 1 */
  };
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int v = 0; v < 6; ++v) {
      const int64_t* p = shapes[s];
      nhwc_case_t tc = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10],
                        p[11], p[12], p[13], 0, 0, 0, 0, 0, KILN_ACT_NONE};
      tc.bias = v >= 1;
      tc.act = v == 1 || v == 3 ? KILN_ACT_RELU : v == 2 ? KILN_ACT_SILU : KILN_ACT_NONE;
      tc.residual = v >= 2 || (v == 0 && s % 2);
      tc.res_alias = v == 3 || v == 5;
      if (v >= 4) tc.residual = 1, tc.res_first = 1, tc.act = KILN_ACT_RELU, tc.bias = v == 4;
      nhwc_run(&tc, pool, where);
    }
  for (int act = 0; act < KILN_ACT_COUNT; ++act) {
    nhwc_case_t tc = {1, 3, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0,
                      (kiln_activation_t)act};
    nhwc_run(&tc, pool, where);
    tc.res_first = 1;
    nhwc_run(&tc, pool, where);
    nhwc_case_t dw = {1, 24, 7, 9, 24, 3, 3, 1, 1, 1, 1, 1, 1, 24, 1, 1, 0, 0, 0,
                      (kiln_activation_t)act}; /* depthwise: the row epilogue */
    nhwc_run(&dw, pool, where);
    dw.res_first = 1, dw.special = 1;
    nhwc_run(&dw, pool, where);
    /* 1x1, 35 pixels: whole tiles straight to y (AVX-512), the last
     * through the epilogue; a pair with a partial panel, then one panel. */
    nhwc_case_t pw = {1, 8, 5, 7, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1,
                      (kiln_activation_t)act};
    nhwc_run(&pw, pool, where);
    pw.res_first = 1, pw.o = 16, pw.special = 0;
    nhwc_run(&pw, pool, where);
  }
  /* Several K blocks (K = 64 * 9 = 576 taps) and tile blocks. */
  nhwc_case_t big = {1, 64, 30, 30, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, KILN_ACT_RELU};
  nhwc_run(&big, pool, where);
  nhwc_case_t big2 = {1, 96, 14, 14, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, KILN_ACT_RELU};
  nhwc_run(&big2, pool, where);
  for (int act = 0; act < 2; ++act) {
    nhwc_case_t sp[] = {
        {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, (kiln_activation_t)act},
        {1, 8, 20, 21, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, (kiln_activation_t)act},
        {1, 16, 8, 8, 20, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, (kiln_activation_t)act},
    };
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); ++i) nhwc_run(&sp[i], pool, where);
  }
}

/* Channels-last max pooling: the fast loop equals the direct one exactly
 * (max is exact), and both equal the NCHW reference on permuted tensors;
 * NaN and -Inf in x, ResNet's 3x3/2 pad 1, ceil mode windows hanging past
 * the input, dilation, C = 1 and odd C, N = 2. */
static void nhwc_pool_level(kiln_pool_t* pool, const char* where) {
  /* n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, ceil */
  static const int64_t cases[][13] = {
      {1, 64, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 0}, {2, 17, 9, 7, 2, 2, 2, 2, 0, 0, 1, 1, 1},
      {1, 5, 11, 10, 3, 2, 1, 2, 1, 1, 2, 3, 0},  {1, 1, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1, 0},
      {2, 3, 8, 1, 3, 1, 3, 1, 1, 0, 1, 1, 1},    {1, 33, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1},
  };
  for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ++ci) {
    const int64_t* p = cases[ci];
    kiln_pool2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = p[0], a.c = p[1], a.h = p[2], a.w = p[3], a.kh = p[4], a.kw = p[5], a.sh = p[6];
    a.sw = p[7], a.ph = p[8], a.pw = p[9], a.dh = p[10], a.dw = p[11];
    KILN_EXPECT_OK(kiln_shape_window_out_size("h", a.h, a.kh, a.sh, a.ph, a.dh, (int)p[12], &a.ho));
    KILN_EXPECT_OK(kiln_shape_window_out_size("w", a.w, a.kw, a.sw, a.pw, a.dw, (int)p[12], &a.wo));
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* xt = malloc(nx * sizeof(float));
    float* want_nchw = malloc(ny * sizeof(float));
    float* want = malloc((ny + NHWC_GUARD) * sizeof(float));
    float* got = malloc((ny + NHWC_GUARD) * sizeof(float));
    float* back = malloc(ny * sizeof(float));
    kiln_test_fill_f32(x, nx, (unsigned)(ci + 5), -1.0f, 1.0f);
    x[nx / 3] = NAN;
    x[nx / 2] = -INFINITY;
    nhwc_permute(x, xt, a.n, a.c, a.h, a.w, 0);
    a.x = x, a.y = want_nchw;
    kiln_max_pool2d_f32_reference(&a);
    kiln_test_fill_f32(want, ny + NHWC_GUARD, 3, -1.0f, 1.0f);
    memcpy(got, want, (ny + NHWC_GUARD) * sizeof(float));
    a.x = xt, a.y = want;
    kiln_max_pool2d_f32_nhwc_reference(&a);
    nhwc_permute(want, back, a.n, a.c, a.ho, a.wo, 1);
    char what[160];
    snprintf(what, sizeof what, "%s max pool nhwc case %zu: reference vs NCHW reference", where, ci);
    kiln_test_compare_f32(what, back, want_nchw, ny, 0.0f, 0.0f);
    a.y = got;
    kiln_max_pool2d_f32_nhwc(&a, pool);
    snprintf(what, sizeof what, "%s max pool nhwc case %zu", where, ci);
    kiln_test_compare_f32(what, got, want, ny + NHWC_GUARD, 0.0f, 0.0f);
    free(x), free(xt), free(want_nchw), free(want), free(got), free(back);
  }
}

/* The two-panel channel-vector kernel (AVX-512) against two calls of the
 * one-panel kernel at the same level: bit for bit (the same sums in the
 * same order, so a panel's values do not depend on whether it ran paired),
 * from the biases or from partial sums, for odd and even tap counts. */
static void nhwc_ct2_matches_ct(void) {
  if (kiln_cpu_isa() != KILN_ISA_AVX512) return;
  kiln_conv_ukernel_ct2_fn two = kiln_conv_ukernel_ct2_for(KILN_ISA_AVX512);
  kiln_conv_ukernel_ct_fn one = kiln_conv_ukernel_ct_for(KILN_ISA_AVX512);
  KILN_EXPECT(two != NULL, "AVX-512 has a two-panel channel-vector kernel");
  if (!two) return;
  const int64_t K = 37, W = KILN_CONV_PANEL_WIDE, pitch = 211;
  float* w = malloc(sizeof(float) * (size_t)(2 * K * W));
  float* src = malloc(sizeof(float) * (size_t)(6 * pitch));
  int64_t off[37];
  float bias[32], cin[2][96], got[2][96], want[2][96];
  uint32_t r = 12345u;
  for (int64_t i = 0; i < 2 * K * W; ++i) w[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
  for (int64_t i = 0; i < 6 * pitch; ++i) src[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
  for (int i = 0; i < 32; ++i) bias[i] = (float)i * 0.125f - 2.0f;
  for (int i = 0; i < 192; ++i) cin[i / 96][i % 96] = (float)(i % 17) * 0.37f - 3.0f;
  for (int64_t p = 0; p < K; ++p) off[p] = (p * 29) % pitch;
  const float* px[6];
  for (int i = 0; i < 6; ++i) px[i] = src + i * pitch;
  for (int64_t k = 1; k <= K; k += 9)
    for (int from_cin = 0; from_cin < 2; ++from_cin) {
      two(k, w, K * W, px, off, bias, from_cin ? cin[0] : NULL, from_cin ? cin[1] : NULL, got[0],
          got[1]);
      one(k, w, px, off, bias, from_cin ? cin[0] : NULL, want[0]);
      one(k, w + K * W, px, off, bias + 16, from_cin ? cin[1] : NULL, want[1]);
      KILN_EXPECT(!memcmp(got, want, sizeof got), "two panels = two single panels, k %lld, %s",
                  (long long)k, from_cin ? "from partial sums" : "from the biases");
      /* A partial tile's kernels: its first np rows, the same bits. */
      kiln_conv_ukernel_ct2_np_fn two_np = kiln_conv_ukernel_ct2_np_for(KILN_ISA_AVX512);
      kiln_conv_ukernel_ct_np_fn one_np = kiln_conv_ukernel_ct_np_for(KILN_ISA_AVX512);
      KILN_EXPECT(two_np && one_np, "AVX-512 has the partial-tile kernels");
      for (int np = 1; np <= 6 && two_np && one_np; ++np) {
        float part[2][96], part1[96];
        two_np(np, k, w, K * W, px, off, bias, from_cin ? cin[0] : NULL, from_cin ? cin[1] : NULL,
               part[0], part[1]);
        one_np(np, k, w + K * W, px, off, bias + 16, from_cin ? cin[1] : NULL, part1);
        KILN_EXPECT(!memcmp(part[0], got[0], sizeof(float) * 16 * (size_t)np) &&
                        !memcmp(part[1], got[1], sizeof(float) * 16 * (size_t)np) &&
                        !memcmp(part1, want[1], sizeof(float) * 16 * (size_t)np),
                    "a tile's first %d pixels = the whole tile's, k %lld", np, (long long)k);
      }
    }
  free(w), free(src);
}

/* The depthwise conv with bf16 storage (args' x_bf16, y_bf16: CONV2D_NHWC's
 * format 2.23): from x in bf16, y must be the fp32 kernel's y from x
 * widened, bit for bit; a bf16 y must be that y rounded, bit for bit, the
 * guard past it untouched; and the reference likewise. Blocks of 8, 4 and
 * 1 pixels, channel tails, strides 1 and 2, 5x5, relu6 (clamped as stored)
 * and silu (the epilogue's row), NaN, N = 2. */
static void nhwc_dw_bf16_io(kiln_pool_t* pool, const char* where) {
  /* n, c, h, w, k, s, act */
  static const int64_t cases[][7] = {{2, 20, 5, 29, 3, 1, KILN_ACT_RELU6},
                                     {1, 24, 7, 37, 3, 2, KILN_ACT_RELU6},
                                     {1, 32, 6, 13, 3, 2, KILN_ACT_NONE},
                                     {1, 48, 6, 11, 5, 1, KILN_ACT_SILU},
                                     {1, 16, 4, 40, 3, 1, KILN_ACT_SILU},
                                     {1, 7, 5, 9, 3, 1, KILN_ACT_RELU}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
    const int64_t* p = cases[ci];
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof a);
    a.n = p[0], a.c = a.o = a.groups = p[1], a.h = p[2], a.w = p[3], a.kh = a.kw = p[4];
    a.sh = a.sw = p[5], a.ph = a.pw = p[4] / 2, a.dh = a.dw = 1, a.act = (kiln_activation_t)p[6];
    a.ho = nhwc_out(a.h, a.kh, a.sh, a.ph, 1), a.wo = nhwc_out(a.w, a.kw, a.sw, a.pw, 1);
    const size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.o * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    uint16_t* xb = malloc(nx * sizeof(uint16_t));
    float* w = malloc((size_t)(a.c * a.kh * a.kw) * sizeof(float));
    float* bias = malloc((size_t)a.o * sizeof(float));
    float* y32 = malloc(ny * sizeof(float));
    float* yref = malloc(ny * sizeof(float));
    uint16_t* yb = malloc((ny + NHWC_GUARD) * sizeof(uint16_t));
    if (!x || !xb || !w || !bias || !y32 || !yref || !yb) goto next;
    kiln_test_fill_f32(x, nx, (unsigned)(81 + ci), -4.0f, 4.0f);
    kiln_test_fill_f32(w, (size_t)(a.c * a.kh * a.kw), (unsigned)(82 + ci), -1.0f, 1.0f);
    kiln_test_fill_f32(bias, (size_t)a.o, (unsigned)(83 + ci), -1.0f, 1.0f);
    x[nx / 3] = NAN;
    for (size_t i = 0; i < nx; ++i) {
      xb[i] = kiln_gemm_bf16_from_f32(x[i]);
      x[i] = kiln_gemm_bf16_to_f32(xb[i]); /* x widened from its bf16 */
    }
    a.weight = w, a.bias = ci % 2 ? NULL : bias;
    for (int io = 1; io < 4; ++io) { /* 1: x bf16, 2: y bf16, 3: both */
      const int xbf = io & 1, ybf = io >> 1;
      char what[200];
      snprintf(what, sizeof what, "%s depthwise bf16 storage c%lld %lldx%lld k%lld s%lld act%d: x %s, y %s",
               where, (long long)a.c, (long long)a.h, (long long)a.w, (long long)a.kh,
               (long long)a.sh, (int)a.act, xbf ? "bf16" : "fp32", ybf ? "bf16" : "fp32");
      for (int ref = 0; ref < 2; ++ref) {
        kiln_conv2d_f32_args_t b = a;
        b.x = x, b.y = y32;
        if (ref) b.y = yref, kiln_conv2d_f32_nhwc_reference(&b);
        else kiln_conv2d_f32_nhwc(&b, pool);
        for (size_t i = 0; i < ny + NHWC_GUARD; ++i) yb[i] = 0xabcd;
        b.x = xbf ? (const float*)(const void*)xb : x, b.x_bf16 = xbf;
        b.y = ybf ? (float*)(void*)yb : (ref ? yref : y32), b.y_bf16 = ybf;
        float* want = ref ? yref : y32;
        if (!ybf) { /* y in place of the fp32 run's: compare against a copy */
          float* copy = malloc(ny * sizeof(float));
          if (!copy) continue;
          memcpy(copy, want, ny * sizeof(float));
          if (ref) kiln_conv2d_f32_nhwc_reference(&b);
          else kiln_conv2d_f32_nhwc(&b, pool);
          KILN_EXPECT(!memcmp(copy, want, ny * sizeof(float)), "%s%s: = from x widened, bit for bit",
                      what, ref ? " (reference)" : "");
          free(copy);
          continue;
        }
        if (ref) kiln_conv2d_f32_nhwc_reference(&b);
        else kiln_conv2d_f32_nhwc(&b, pool);
        size_t bad = 0, guard = 0;
        for (size_t i = 0; i < ny; ++i) bad += yb[i] != kiln_gemm_bf16_from_f32(want[i]);
        for (size_t i = ny; i < ny + NHWC_GUARD; ++i) guard += yb[i] != 0xabcd;
        KILN_EXPECT(!bad && !guard, "%s%s: = the fp32 y rounded: %zu of %zu differ, %zu guard "
                    "values written", what, ref ? " (reference)" : "", bad, ny, guard);
      }
    }
  next:
    free(x), free(xb), free(w), free(bias), free(y32), free(yref), free(yb);
  }
  /* Rounding ties and denormals: a centre-only weight of 1 makes y = x
   * exactly, so the bf16 y must be x rounded by the rule: 1 + 2^-8 to 1,
   * 1 + 3 2^-8 up to 1 + 2^-6 (ties to even), denormals kept (NaN: the
 * random cases above). */
  enum { TC = 32, TW = 21 };
  static const float vals[] = {1.00390625f, 1.01171875f, -1.00390625f, 3e-39f, -1e-40f, 65535.0f};
  float tx[3 * TW * TC], tw[9 * TC];
  uint16_t ty[3 * TW * TC + NHWC_GUARD];
  for (int i = 0; i < 3 * TW * TC; ++i) tx[i] = vals[i % 6];
  for (int i = 0; i < 9 * TC; ++i) tw[i] = i % 9 == 4 ? 1.0f : 0.0f;
  for (int i = 0; i < 3 * TW * TC + NHWC_GUARD; ++i) ty[i] = 0xabcd;
  kiln_conv2d_f32_args_t a;
  memset(&a, 0, sizeof a);
  a.n = 1, a.c = a.o = a.groups = TC, a.h = 3, a.w = TW, a.kh = a.kw = 3, a.sh = a.sw = 1;
  a.ph = a.pw = 1, a.dh = a.dw = 1, a.ho = 3, a.wo = TW, a.act = KILN_ACT_NONE;
  a.x = tx, a.weight = tw, a.y = (float*)(void*)ty, a.y_bf16 = 1;
  kiln_conv2d_f32_nhwc(&a, pool);
  size_t bad = 0;
  for (int i = 0; i < 3 * TW * TC; ++i) bad += ty[i] != kiln_gemm_bf16_from_f32(tx[i]);
  for (int i = 3 * TW * TC; i < 3 * TW * TC + NHWC_GUARD; ++i) bad += ty[i] != 0xabcd;
  KILN_EXPECT(bad == 0, "%s depthwise bf16 y: ties to even, denormals: %zu values wrong", where,
              bad);
}

/* The depthwise rows at AVX-512 (3-wide windows in blocks of 8 pixels)
 * against AVX2's (blocks of 4): bit for bit (each sum's taps in the same
 * order, both fused multiply-adds), strides 1 and 2, a channel tail,
 * border columns, NaN, relu6's clamp. */
static void nhwc_dw_rows_agree(void) {
  if (kiln_cpu_isa() != KILN_ISA_AVX512) return;
  kiln_conv_dw_nhwc_row_fn r512 = kiln_conv_dw_nhwc_row_for(KILN_ISA_AVX512);
  kiln_conv_dw_nhwc_row_fn r256 = kiln_conv_dw_nhwc_row_for(KILN_ISA_AVX2);
  enum { C = 40, H = 5, W = 43 };
  float* x = malloc(sizeof(float) * C * H * W);
  float wt[9 * C], bias[C], got[W * C], want[W * C];
  kiln_test_fill_f32(x, (size_t)(C * H * W), 71, -3.0f, 3.0f);
  kiln_test_fill_f32(wt, 9 * C, 72, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, C, 73, -1.0f, 1.0f);
  x[2 * W * C + 9 * C + 3] = NAN;
  const float clamp[2] = {0.0f, 6.0f};
  for (int64_t s = 1; s <= 2; ++s) {
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof a);
    a.n = 1, a.c = a.o = a.groups = C, a.h = H, a.w = W, a.kh = a.kw = 3, a.sh = a.sw = s;
    a.ph = a.pw = 1, a.dh = a.dw = 1, a.x = x, a.bias = bias, a.act = KILN_ACT_RELU6;
    a.ho = nhwc_out(H, 3, s, 1, 1), a.wo = nhwc_out(W, 3, s, 1, 1);
    for (int64_t i = 0; i < a.ho; ++i) {
      r512(&a, wt, 0, i, clamp, got, 0);
      r256(&a, wt, 0, i, clamp, want, 0);
      KILN_EXPECT(!memcmp(got, want, sizeof(float) * (size_t)(a.wo * C)),
                  "depthwise row %lld, stride %lld: AVX-512 = AVX2 bit for bit", (long long)i,
                  (long long)s);
    }
  }
  free(x);
}

/* The direct stores (kiln_conv_ct_y_t: the channels-last driver's whole
 * tiles, AVX2 and AVX-512) against the tile through the GEMM epilogue of the same
 * level, as the driver's other tiles go: bit for bit, for every
 * activation, no residual / after / before the activation / aliasing y,
 * a pair with a whole and with a partial second panel (masked lanes, and
 * the floats between rows, left as they were) and a single panel, tiles
 * of 6, 4 and 1 pixels (the rows past them left as they were), from the
 * biases or from partial sums. */
static void nhwc_direct_level(kiln_isa_t isa) {
  kiln_conv_ukernel_ct2_fn two = kiln_conv_ukernel_ct2_for(isa);
  kiln_conv_ukernel_ct2_y_fn two_y = kiln_conv_ukernel_ct2_y_for(isa);
  kiln_conv_ukernel_ct_fn one = kiln_conv_ukernel_ct_for(isa);
  kiln_conv_ukernel_ct_y_fn one_y = kiln_conv_ukernel_ct_y_for(isa);
  kiln_gemm_epilogue_fn ep = kiln_gemm_kernels_for(isa)->epilogue;
  KILN_EXPECT(one_y && (two_y || !two), "%s has the direct-store kernels", kiln_cpu_isa_name(isa));
  if (!one_y || (two && !two_y)) return;
  enum { K = 23, W = KILN_CONV_PANEL_WIDE, PITCH = 97, LDY = 45 };
  float w[2 * K * W], src[6 * PITCH], bias[32], cin[2][96], tmp[2][96];
  float res[6 * LDY], got[6 * LDY], want[6 * LDY];
  int64_t off[K];
  uint32_t r = 777u;
#define NHWC_RAND() ((float)((r = r * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f)
  for (int i = 0; i < 2 * K * W; ++i) w[i] = NHWC_RAND();
  for (int i = 0; i < 6 * PITCH; ++i) src[i] = 3.0f * NHWC_RAND();
  for (int i = 0; i < 32; ++i) bias[i] = NHWC_RAND();
  for (int i = 0; i < 192; ++i) cin[i / 96][i % 96] = 4.0f * NHWC_RAND();
  for (int i = 0; i < 6 * LDY; ++i) res[i] = 2.0f * NHWC_RAND();
  src[5] = NAN, src[PITCH + 7] = INFINITY; /* a NaN and an Inf through each activation */
  for (int p = 0; p < K; ++p) off[p] = (p * 13) % PITCH;
  const float* px[6];
  for (int i = 0; i < 6; ++i) px[i] = src + i * PITCH;
  int bad = 0, cases = 0;
  for (int act = 0; act < KILN_ACT_COUNT; ++act)
    for (int mode = 0; mode < 4; ++mode) /* no residual, after, before, aliasing y */
      for (int cols = two ? 0 : 2; cols < 3; ++cols) { /* second panel 16, 5; one panel */
        const int pair = cols < 2, cols1 = cols == 0 ? 16 : 5;
        for (int64_t k = 1; k <= K; k += 11)
          for (int v = 0; v < 6; ++v) {
            const int from_cin = v & 1, np = v < 2 ? 6 : v < 4 ? 4 : 1; /* pixels stored */
            const int first = mode == 2;
            for (int i = 0; i < 6 * LDY; ++i) got[i] = want[i] = mode == 3 ? res[i] : -7.0f;
            const float* c0 = from_cin ? cin[0] : NULL;
            const float* c1 = from_cin ? cin[1] : NULL;
            /* Through memory, as kiln_conv_nhwc_store does. */
            if (pair) two(k, w, K * W, px, off, bias, c0, c1, tmp[0], tmp[1]);
            else one(k, w, px, off, bias, c0, tmp[0]);
            const float* rw = mode == 0 ? NULL : mode == 3 ? want : res;
            for (int s = 0; s < 1 + pair; ++s) {
              const int64_t rows = s ? cols1 : W;
              const float* rr = rw ? rw + s * W : NULL;
              if (rr && first) {
                for (int i = 0; i < np; ++i)
                  for (int j = 0; j < rows; ++j) tmp[s][i * W + j] += rr[i * LDY + j];
                rr = NULL;
              }
              ep(np, rows, tmp[s], W, want + s * W, LDY, NULL, rr, LDY, (kiln_activation_t)act);
            }
            kiln_conv_ct_y_t yd = {got, mode == 0 ? NULL : mode == 3 ? got : res, LDY, first,
                                   (kiln_activation_t)act, cols1, np};
            if (pair) two_y(k, w, K * W, px, off, bias, c0, c1, &yd);
            else one_y(k, w, px, off, bias, c0, &yd);
            cases++;
            if (memcmp(got, want, sizeof got)) bad++;
          }
      }
#undef NHWC_RAND
  KILN_EXPECT(bad == 0, "%s: direct stores = the tile through the epilogue: %d of %d cases differ",
              kiln_cpu_isa_name(isa), bad, cases);
}

static void nhwc_direct_matches_epilogue(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_cpu_isa() >= KILN_ISA_AVX2) nhwc_direct_level(KILN_ISA_AVX2);
  if (kiln_cpu_isa() >= KILN_ISA_AVX512) nhwc_direct_level(KILN_ISA_AVX512);
#else
  (void)nhwc_direct_level; /* x86 kernels only */
#endif
}

/* End padding (CONV2D_NHWC's PAD_H_END / PAD_W_END): y's size counts the
 * extra rows and columns of zeros, which the kernels read as taps past the
 * input. Against the reference on an explicitly zero-padded x: the
 * depthwise kernel (dense weight) and the general one (groups 1), strides
 * 2 and 1, end pads of 1 and 2 rows and 1 column. */
static void nhwc_end_padding(kiln_pool_t* pool, const char* where) {
  /* c, o, groups, h, w, k, stride, pad, end_h, end_w */
  static const int64_t cases[][10] = {{32, 32, 32, 12, 12, 3, 2, 0, 1, 1},
                                      {24, 24, 24, 9, 10, 3, 1, 1, 2, 1},
                                      {16, 24, 1, 11, 8, 3, 2, 0, 1, 1}};
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci) {
    const int64_t* p = cases[ci];
    const int64_t C = p[0], O = p[1], G = p[2], H = p[3], W = p[4], K = p[5], S = p[6], P = p[7];
    const int64_t eh = p[8], ew = p[9], Hp = H + 2 * P + eh, Wp = W + 2 * P + ew;
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof a);
    a.n = 1, a.c = C, a.h = H, a.w = W, a.o = O, a.kh = a.kw = K, a.sh = a.sw = S;
    a.ph = a.pw = P, a.dh = a.dw = 1, a.groups = G, a.act = KILN_ACT_RELU6;
    a.ho = nhwc_out(H + eh, K, S, P, 1), a.wo = nhwc_out(W + ew, K, S, P, 1);
    const size_t nx = (size_t)(H * W * C), nxp = (size_t)(Hp * Wp * C), nw = (size_t)(O * C / G * K * K);
    const size_t ny = (size_t)(a.ho * a.wo * O);
    float* x = malloc(nx * sizeof(float));
    float* xp = calloc(nxp, sizeof(float));
    float* w = malloc(nw * sizeof(float));
    float* bias = malloc((size_t)O * sizeof(float));
    float* got = malloc(ny * sizeof(float));
    float* want = malloc(ny * sizeof(float));
    if (!x || !xp || !w || !bias || !got || !want) goto done;
    kiln_test_fill_f32(x, nx, 91, -1.0f, 8.0f);
    kiln_test_fill_f32(w, nw, 92, -1.0f, 1.0f);
    kiln_test_fill_f32(bias, (size_t)O, 93, -1.0f, 1.0f);
    for (int64_t i = 0; i < H; ++i)
      memcpy(xp + ((i + P) * Wp + P) * C, x + i * W * C, (size_t)(W * C) * sizeof(float));
    a.weight = w, a.bias = bias;
    kiln_conv2d_f32_args_t r = a;
    r.x = xp, r.h = Hp, r.w = Wp, r.ph = r.pw = 0, r.y = want;
    kiln_conv2d_f32_nhwc_reference(&r);
    a.x = x, a.y = got;
    kiln_conv2d_f32_nhwc(&a, pool);
    char what[160];
    snprintf(what, sizeof what, "%s nhwc end padding c%lld g%lld s%lld p%lld end %lld,%lld", where,
             (long long)C, (long long)G, (long long)S, (long long)P, (long long)eh, (long long)ew);
    kiln_test_compare_f32(what, got, want, ny, 1e-5f, 1e-5f);
    a.y = got; /* the reference reads the same args */
    kiln_conv2d_f32_nhwc_reference(&a);
    snprintf(what, sizeof what, "%s nhwc end padding reference c%lld g%lld", where, (long long)C,
             (long long)G);
    kiln_test_compare_f32(what, got, want, ny, 1e-6f, 1e-6f);
  done:
    free(x), free(xp), free(w), free(bias), free(got), free(want);
  }
}

void kiln_test_suite_conv_nhwc(void) {
  kiln_test_each_isa_and_pool(nhwc_end_padding);
  kiln_test_each_isa_and_pool(nhwc_level);
  kiln_test_each_isa_and_pool(nhwc_pool_level);
  kiln_test_each_isa_and_pool(nhwc_dw_bf16_io);
  nhwc_ct2_matches_ct();
  nhwc_direct_matches_epilogue();
  nhwc_dw_rows_agree();
}
