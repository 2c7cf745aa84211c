/* Tests of the convolution kernels: kiln_conv2d_f32 against
 * kiln_conv2d_f32_reference at every ISA level the machine has, on 1- and
 * 2-thread pools, over edge shapes: stride 2, padding, dilation, groups
 * (including depthwise), 1x1 (the in-place GEMM path) and 7x7, odd sizes,
 * N = 2, bias, every activation, residuals (also aliasing y) and a shape big
 * enough to need several im2col bands. y is compared including a guard
 * region past its end, so an out-of-bounds write shows up. Also checks that
 * the IR's shape rule rejects bad parameters with a status.
 *
 * Tolerance: x and w uniform in [-1, 1]; a K-term fp32 sum drifts from the
 * double reference by ~eps * K / sqrt(3) typically (see test_gemm.c), so
 * atol = 1e-5 sqrt(K) + 1e-6 with rtol 1e-5 leaves a wide margin while any
 * wrong or missing tap (an O(0.1) error) fails. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"
#include "kernels/conv/kiln_conv.h"
#include "kiln_test.h"

typedef struct {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int bias, residual, res_alias;
  kiln_activation_t act;
  int res_first; /* residual inside the activation */
} conv_case_t;

static int64_t conv_test_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

#define CONV_GUARD 37

static void conv_test_run(const conv_case_t* tc, kiln_pool_t* pool, const char* where) {
  kiln_conv2d_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = tc->n, a.c = tc->c, a.h = tc->h, a.w = tc->w, a.o = tc->o, a.kh = tc->kh, a.kw = tc->kw;
  a.sh = tc->sh, a.sw = tc->sw, a.ph = tc->ph, a.pw = tc->pw, a.dh = tc->dh, a.dw = tc->dw;
  a.groups = tc->groups, a.act = tc->act, a.residual_before_act = tc->res_first;
  a.ho = conv_test_out(a.h, a.kh, a.sh, a.ph, a.dh);
  a.wo = conv_test_out(a.w, a.kw, a.sw, a.pw, a.dw);
  size_t nx = (size_t)(a.n * a.c * a.h * a.w), nw = (size_t)(a.o * (a.c / a.groups) * a.kh * a.kw);
  size_t ny = (size_t)(a.n * a.o * a.ho * a.wo);
  float* x = malloc((nx + 1) * sizeof(float));
  float* w = malloc((nw + 1) * sizeof(float));
  float* bias = malloc((size_t)(a.o + 1) * sizeof(float));
  float* res = malloc((ny + CONV_GUARD) * sizeof(float));
  float* got = malloc((ny + CONV_GUARD) * sizeof(float));
  float* want = malloc((ny + CONV_GUARD) * sizeof(float));
  unsigned seed = (unsigned)(a.c * 131 + a.h * 17 + a.o * 7 + a.kh + a.groups * 1009);
  kiln_test_fill_f32(x, nx, seed, -1.0f, 1.0f);
  kiln_test_fill_f32(w, nw, seed + 1, -1.0f, 1.0f);
  kiln_test_fill_f32(bias, (size_t)a.o, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(res, ny + CONV_GUARD, seed + 3, -1.0f, 1.0f);
  /* got's guard and (for the alias case) body start as the residual. */
  memcpy(got, res, (ny + CONV_GUARD) * sizeof(float));
  memcpy(want, res, (ny + CONV_GUARD) * sizeof(float));
  a.x = x;
  a.weight = w;
  a.bias = tc->bias ? bias : NULL;
  a.residual = tc->residual ? res : NULL;
  a.y = want;
  kiln_conv2d_f32_reference(&a);
  if (tc->residual && tc->res_alias) a.residual = got;
  a.y = got;
  kiln_conv2d_f32(&a, pool);
  char what[256];
  snprintf(what, sizeof what,
           "%s conv n%lld c%lld %lldx%lld o%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld g%lld "
           "bias%d res%d%s%s act%d",
           where, (long long)a.n, (long long)a.c, (long long)a.h, (long long)a.w, (long long)a.o,
           (long long)a.kh, (long long)a.kw, (long long)a.sh, (long long)a.sw, (long long)a.ph,
           (long long)a.pw, (long long)a.dh, (long long)a.dw, (long long)a.groups, tc->bias,
           tc->residual, tc->res_alias ? "(alias)" : "", tc->res_first ? "(first)" : "", (int)tc->act);
  int64_t k = (a.c / a.groups) * a.kh * a.kw;
  kiln_test_compare_f32(what, got, want, ny + CONV_GUARD, 1e-5f * sqrtf((float)k) + 1e-6f, 1e-5f);
  free(x);
  free(w);
  free(bias);
  free(res);
  free(got);
  free(want);
}

static void conv_test_level(kiln_pool_t* pool, const char* where) {
  /* n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups */
  static const int64_t shapes[][14] = {
      {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},      /* 3x3 same */
      {2, 5, 11, 7, 6, 3, 3, 2, 2, 1, 1, 1, 1, 1},     /* stride 2, odd sizes, N = 2 */
      {1, 4, 10, 13, 5, 3, 2, 1, 2, 2, 0, 2, 1, 1},    /* dilation, mixed */
      {2, 16, 7, 9, 24, 1, 1, 1, 1, 0, 0, 1, 1, 1},    /* 1x1: GEMM in place */
      {1, 16, 8, 8, 8, 1, 1, 2, 2, 0, 0, 1, 1, 1},     /* 1x1 stride 2 (downsample) */
      {1, 8, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 4},     /* groups */
      {2, 6, 8, 8, 6, 1, 1, 1, 1, 0, 0, 1, 1, 2},      /* grouped 1x1 */
      {2, 7, 12, 10, 7, 3, 3, 1, 1, 1, 1, 1, 1, 7},    /* depthwise */
      {1, 5, 13, 11, 5, 5, 5, 2, 2, 2, 2, 1, 1, 5},    /* depthwise 5x5 stride 2 */
      {1, 4, 9, 9, 4, 3, 3, 1, 1, 2, 2, 2, 2, 4},      /* depthwise dilated */
      {1, 3, 23, 21, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1},   /* 7x7 stem */
      {1, 1, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1},      /* window = input, 1x1 out */
      {1, 2, 4, 4, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1},      /* stride > 1 with few pixels */
  };
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int v = 0; v < 6; ++v) {
      const int64_t* p = shapes[s];
      conv_case_t tc = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10],
                        p[11], p[12], p[13], 0, 0, 0, KILN_ACT_NONE, 0};
      tc.bias = v >= 1;
      tc.act = v == 1 ? KILN_ACT_RELU : v == 2 ? KILN_ACT_SILU : v == 3 ? KILN_ACT_RELU
                                                                        : KILN_ACT_NONE;
      tc.residual = v >= 2 || (v == 0 && s % 2);
      tc.res_alias = v == 3 || v == 5;
      if (v >= 4) { /* act(conv + bias? + residual), ResNet's block end */
        tc.residual = 1, tc.res_first = 1, tc.act = KILN_ACT_RELU, tc.bias = v == 4;
      }
      conv_test_run(&tc, pool, where);
    }
  /* Every activation without a bias (through the GEMM's epilogue). */
  for (int act = 0; act < KILN_ACT_COUNT; ++act) {
    conv_case_t tc = {1, 3, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, (kiln_activation_t)act, 0};
    conv_test_run(&tc, pool, where);
    tc.bias = 1;
    conv_test_run(&tc, pool, where);
    tc.res_first = 1;
    conv_test_run(&tc, pool, where);
  }
  /* Several im2col bands: K * Ho * Wo above the 2M-float band target. */
  conv_case_t big = {1, 64, 66, 66, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, KILN_ACT_RELU, 1};
  conv_test_run(&big, pool, where);
}

/* The shape rule rejects bad parameters with a status, never a crash. */
static void conv_test_shape_rules(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[4] = {1, 4, 8, 8}, ws[4] = {6, 2, 3, 3};
  float wdata[6 * 2 * 9] = {0};
  int32_t x, w, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, ws, KILN_LAYOUT_DENSE, wdata,
                                         sizeof wdata, &w));
  int32_t ins[2] = {x, w};
  int64_t ok[9] = {1, 1, 1, 1, 1, 1, 2, 0, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, ins, 2, ok, 9, NULL, 0, "ok", &y));
  KILN_EXPECT(g->values[y].shape[1] == 6 && g->values[y].shape[2] == 8, "conv2d output shape");
  int64_t bad[][9] = {
      {0, 1, 1, 1, 1, 1, 2, 0},  /* zero stride */
      {1, 1, -1, 1, 1, 1, 2, 0}, /* negative padding */
      {1, 1, 1, 1, 0, 1, 2, 0},  /* zero dilation */
      {1, 1, 1, 1, 1, 1, 3, 0},  /* groups do not divide C */
      {1, 1, 1, 1, 1, 1, 1, 0},  /* w's C / groups mismatch */
      {1, 1, 1, 1, 1, 1, 2, 99}, /* unknown activation */
      {1, 1, 0, 0, 5, 5, 2, 0},  /* dilated window larger than input */
      {1, 1, 1, 1, 1, 1, 2, 0, 2}, /* residual placement not 0/1 */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_CONV2D, ins, 2, bad[i], 9, NULL, 0, "bad", &y),
                      KILN_INVALID_ARGUMENT);
  int64_t pool_ok[10] = {3, 3, 2, 2, 1, 1, 1, 1, 1, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D, &x, 1, pool_ok, 10, NULL, 0, "mp", &y));
  KILN_EXPECT(g->values[y].shape[2] == 5, "ceil-mode max pool height %lld",
              (long long)g->values[y].shape[2]);
  int64_t pool_bad[][10] = {
      {3, 3, 2, 2, 2, 1, 1, 1, 0, 0}, /* padding over half the kernel */
      {0, 3, 2, 2, 0, 1, 1, 1, 0, 0}, /* zero kernel */
      {3, 3, 0, 2, 1, 1, 1, 1, 0, 0}, /* zero stride */
      {3, 3, 2, 2, 1, 1, 1, 1, 2, 0}, /* ceil_mode not 0/1 */
  };
  for (size_t i = 0; i < sizeof(pool_bad) / sizeof(pool_bad[0]); ++i)
    KILN_EXPECT_ERROR(
        kiln_graph_add_node(g, KILN_OP_MAX_POOL2D, &x, 1, pool_bad[i], 10, NULL, 0, "bad", &y),
        KILN_INVALID_ARGUMENT);
  int64_t avg_dil[10] = {3, 3, 2, 2, 1, 1, 2, 1, 0, 0};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D, &x, 1, avg_dil, 10, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

void kiln_test_suite_conv(void) {
  kiln_test_each_isa_and_pool(conv_test_level);
  conv_test_shape_rules();
}
