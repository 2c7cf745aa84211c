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
#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "kernels/conv/kiln_conv.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

typedef struct {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int bias, residual, res_alias;
  kiln_activation_t act;
  int res_first; /* residual inside the activation */
  int special;   /* x holds a NaN and an Inf */
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
  if (tc->special) { /* each output sees each at most once: NaN or +-Inf in both */
    x[1] = NAN;
    x[nx / 2] = INFINITY;
  }
  /* got's guard and (for the alias case) body start as the residual. */
  memcpy(got, res, (ny + CONV_GUARD) * sizeof(float));
  memcpy(want, res, (ny + CONV_GUARD) * sizeof(float));
  a.x = x;
  a.weight = w;
  a.bias = tc->bias ? bias : NULL;
  a.residual = tc->residual ? res : NULL;
  a.y = want;
  kiln_conv2d_f32_reference(&a);
  char what[256];
  int64_t k = (a.c / a.groups) * a.kh * a.kw;
  /* The weights dense (packed per call for the kernel the shape picks),
   * then packed ahead in panels of 6 (pixel-vector) and 16 (channel-vector
   * kernel), as the compiler stores them. */
  static const int panels[3] = {0, KILN_CONV_PANEL_O, KILN_CONV_PANEL_WIDE};
  for (int pi = 0; pi < 3; ++pi) {
    float* wp = NULL;
    if (panels[pi]) {
      wp = malloc(kiln_conv2d_f32_packed_size(a.o, k, a.groups, panels[pi]) + sizeof(float));
      kiln_conv2d_f32_pack_weight(a.o, k, a.groups, panels[pi], w, wp);
    }
    memcpy(got, res, (ny + CONV_GUARD) * sizeof(float));
    a.weight = wp ? wp : w;
    a.weight_packed = panels[pi];
    a.residual = tc->residual ? (tc->res_alias ? got : res) : NULL;
    a.y = got;
    kiln_conv2d_f32(&a, pool);
    snprintf(what, sizeof what,
             "%s conv n%lld c%lld %lldx%lld o%lld k%lldx%lld s%lld,%lld p%lld,%lld d%lld,%lld g%lld "
             "bias%d res%d%s%s act%d weights %s",
             where, (long long)a.n, (long long)a.c, (long long)a.h, (long long)a.w, (long long)a.o,
             (long long)a.kh, (long long)a.kw, (long long)a.sh, (long long)a.sw, (long long)a.ph,
             (long long)a.pw, (long long)a.dh, (long long)a.dw, (long long)a.groups, tc->bias,
             tc->residual, tc->res_alias ? "(alias)" : "", tc->res_first ? "(first)" : "",
             (int)tc->act, pi == 0 ? "dense" : pi == 1 ? "panels of 6" : "panels of 16");
    kiln_test_compare_f32(what, got, want, ny + CONV_GUARD, 1e-5f * sqrtf((float)k) + 1e-6f,
                          1e-5f);
    free(wp);
  }
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
      {2, 3, 17, 19, 3, 7, 7, 1, 1, 3, 3, 1, 1, 3},    /* depthwise 7x7 (ConvNeXt) */
      {1, 2, 14, 12, 2, 11, 11, 1, 1, 5, 5, 1, 1, 2},  /* depthwise, taps past the flat sum's */
      {1, 3, 30, 29, 3, 3, 3, 1, 1, 1, 0, 1, 1, 3},    /* depthwise, padding along H only */
      {1, 3, 23, 21, 16, 7, 7, 2, 2, 3, 3, 1, 1, 1},   /* 7x7 stem */
      {1, 1, 5, 5, 3, 5, 5, 1, 1, 0, 0, 1, 1, 1},      /* window = input, 1x1 out */
      {1, 2, 4, 4, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1},      /* stride > 1 with few pixels */
  };
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s)
    for (int v = 0; v < 6; ++v) {
      const int64_t* p = shapes[s];
      conv_case_t tc = {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9], p[10],
                        p[11], p[12], p[13], 0, 0, 0, KILN_ACT_NONE, 0, 0};
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
    conv_case_t tc = {1, 3, 6, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0, 1, 0, (kiln_activation_t)act, 0, 0};
    conv_test_run(&tc, pool, where);
    tc.bias = 1;
    conv_test_run(&tc, pool, where);
    tc.res_first = 1;
    conv_test_run(&tc, pool, where);
  }
  /* Several tile blocks and K blocks in both kernels (K = 576 taps), and
   * whole-row tiles written straight into y (Wo = 66). */
  conv_case_t big = {1, 64, 66, 66, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, KILN_ACT_RELU, 1, 0};
  conv_test_run(&big, pool, where);
  /* Direct row stores with the residual after the relu, aliasing y, and
   * a channel tail (O = 13: panels 6 + 6 + 1, 16 with 3 unused). */
  conv_case_t rows = {1, 8, 20, 40, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, KILN_ACT_RELU, 0, 0};
  conv_test_run(&rows, pool, where);
  /* ResNet's late shapes, scaled: 7x7 outputs, stride 2 and 1x1 stride 2. */
  conv_case_t late[] = {
      {1, 40, 7, 7, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, KILN_ACT_RELU, 1, 0},
      {1, 24, 14, 14, 20, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, KILN_ACT_RELU, 0, 0},
      {1, 24, 14, 14, 20, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1, 0, 0, KILN_ACT_NONE, 0, 0},
  };
  for (size_t i = 0; i < sizeof(late) / sizeof(late[0]); ++i) conv_test_run(&late[i], pool, where);
  /* NaN and Inf in x go through every kernel as the reference has them
   * (relu keeps NaN, as torch). */
  for (int act = 0; act < 2; ++act) {
    conv_case_t sp[] = {
        {1, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, (kiln_activation_t)act, 0, 1},
        {1, 8, 20, 40, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 0, (kiln_activation_t)act, 0, 1},
        {1, 40, 7, 7, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, (kiln_activation_t)act, 0, 1},
    };
    for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]); ++i) conv_test_run(&sp[i], pool, where);
  }
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
      {(int64_t)1 << 40, 3, 2, 2, 0, 1, (int64_t)1 << 40, 1, 0, 0}, /* k x dilation past int64 */
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

/* The compiler packs conv weights for the kernel each shape picks (a deep
 * 14x14 conv: panels of 16; a shallow 40-wide one: panels of 6), the
 * model runs them, and a packed weight of the wrong size for its node (a
 * hostile or corrupt artifact) is refused when the model is created. */
static void conv_test_compiled(void) {
  const int64_t sx[2][4] = {{1, 32, 14, 14}, {1, 3, 40, 40}};
  const int64_t sw[2][4] = {{24, 32, 3, 3}, {8, 3, 3, 3}};
  const kiln_layout_t want_layout[2] = {KILN_LAYOUT_CONV2D_PACKED_16, KILN_LAYOUT_CONV2D_PACKED};
  for (int c = 0; c < 2; ++c) {
    int64_t nx = sx[c][1] * sx[c][2] * sx[c][3], nw = sw[c][0] * sw[c][1] * 9;
    int64_t ny = sw[c][0] * sx[c][2] * sx[c][3], ys[4] = {1, sw[c][0], sx[c][2], sx[c][3]};
    float* x = malloc((size_t)nx * sizeof(float));
    float* w = malloc((size_t)nw * sizeof(float));
    float* b = malloc((size_t)sw[c][0] * sizeof(float));
    float* got = malloc((size_t)ny * sizeof(float));
    float* want = malloc((size_t)ny * sizeof(float));
    kiln_test_fill_f32(x, (size_t)nx, 11, -1, 1);
    kiln_test_fill_f32(w, (size_t)nw, 12, -1, 1);
    kiln_test_fill_f32(b, (size_t)sw[c][0], 13, -1, 1);
    kiln_conv2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 1, a.c = sx[c][1], a.h = sx[c][2], a.w = sx[c][3], a.o = sw[c][0], a.kh = a.kw = 3;
    a.ho = a.h, a.wo = a.w, a.sh = a.sw = a.ph = a.pw = a.dh = a.dw = a.groups = 1;
    a.act = KILN_ACT_RELU, a.x = x, a.weight = w, a.bias = b, a.y = want;
    kiln_conv2d_f32_reference(&a);
    kiln_graph_t* g = NULL;
    int32_t xi, wi, bi, y;
    KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
    KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, sx[c], &xi));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, sw[c], KILN_LAYOUT_DENSE, w,
                                           (size_t)nw * sizeof(float), &wi));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sw[c], KILN_LAYOUT_DENSE, b,
                                           (size_t)sw[c][0] * sizeof(float), &bi));
    int32_t ins[3] = {xi, wi, bi};
    int64_t params[9] = {1, 1, 1, 1, 1, 1, 1, KILN_ACT_RELU, 0};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, ins, 3, params, 9, NULL, 0, "c", &y));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    kiln_graph_t* cg = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &cg));
    if (cg) {
      const kiln_node_t* n = &cg->nodes[cg->n_nodes - 1];
      KILN_EXPECT(n->op == KILN_OP_CONV2D && cg->values[n->inputs[1]].layout == want_layout[c],
                  "case %d: weight layout %d, want %d", c, (int)cg->values[n->inputs[1]].layout,
                  (int)want_layout[c]);
      kiln_model_t* m = NULL;
      KILN_EXPECT_OK(kiln_model_create(cg, NULL, NULL, &m));
      if (m) {
        kiln_tensor_t in = {x, KILN_F32, 4, sx[c]}, out = {got, KILN_F32, 4, ys};
        KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &out, 1));
        kiln_test_compare_f32("compiled conv", got, want, (size_t)ny, 1e-4f, 1e-5f);
        kiln_model_release(m);
      }
    }
    /* Packed bytes that do not fit the node: one float short, and a
     * groups-1 packing under a groups-2 node. */
    for (int bad = 0; bad < 2; ++bad) {
      kiln_graph_t* h = NULL;
      KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &h));
      if (!h) break;
      int64_t k = sw[c][1] * 9, groups = bad ? 2 : 1;
      int64_t wsh[4] = {sw[c][0], sw[c][1] / groups, 3, 3}, xsh[4] = {1, sw[c][1], 6, 6};
      if (bad && sw[c][1] % 2) wsh[1] = sw[c][1], xsh[1] = 2 * sw[c][1];
      size_t right = kiln_conv2d_f32_packed_size(sw[c][0], k, 1, KILN_CONV_PANEL_WIDE);
      size_t bytes = bad ? right : right - sizeof(float);
      float* wp = calloc(1, right);
      KILN_EXPECT_OK(kiln_graph_add_input(h, "x", KILN_F32, 4, xsh, &xi));
      KILN_EXPECT_OK(kiln_graph_add_constant(h, "w", KILN_F32, 4, wsh, KILN_LAYOUT_CONV2D_PACKED_16,
                                             wp, bytes, &wi));
      int32_t hin[2] = {xi, wi};
      int64_t hp[9] = {1, 1, 1, 1, 1, 1, groups, 0, 0};
      KILN_EXPECT_OK(kiln_graph_add_node(h, KILN_OP_CONV2D, hin, 2, hp, 9, NULL, 0, "c", &y));
      KILN_EXPECT_OK(kiln_graph_set_outputs(h, &y, 1));
      kiln_model_t* m = NULL;
      kiln_status_t s = kiln_model_create(h, NULL, NULL, &m);
      KILN_EXPECT(s && kiln_status_code(s) == KILN_INVALID_ARGUMENT &&
                      strstr(kiln_status_message(s), "packed conv2d weight"),
                  "case %d/%d: a wrong-size packed weight must be refused: %s", c, bad,
                  s ? kiln_status_message(s) : "accepted");
      kiln_status_free(s);
      if (m) kiln_model_release(m);
      free(wp);
    }
    free(x), free(w), free(b), free(got), free(want);
  }
}

/* Separable max pooling equals the direct window loop exactly, NaN and
 * -Inf included, over ResNet's 3x3/2 pad 1, ceil-mode windows that hang
 * past the input, dilation, 1-wide and odd planes. */
static void pool_test_level(kiln_pool_t* pool, const char* where) {
  /* c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, ceil */
  static const int64_t cases[][12] = {
      {5, 12, 13, 3, 3, 2, 2, 1, 1, 1, 1, 0}, {3, 9, 7, 2, 2, 2, 2, 0, 0, 1, 1, 1},
      {2, 11, 10, 3, 2, 1, 2, 1, 1, 2, 3, 0}, {4, 1, 17, 1, 3, 1, 1, 0, 1, 1, 1, 0},
      {2, 8, 1, 3, 1, 3, 1, 1, 0, 1, 1, 1},   {1, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    const int64_t* p = cases[i];
    kiln_pool2d_f32_args_t a;
    memset(&a, 0, sizeof(a));
    a.n = 2, a.c = p[0], a.h = p[1], a.w = p[2], a.kh = p[3], a.kw = p[4], a.sh = p[5];
    a.sw = p[6], a.ph = p[7], a.pw = p[8], a.dh = p[9], a.dw = p[10];
    int64_t eh = a.h + 2 * a.ph - a.dh * (a.kh - 1) - 1, ew = a.w + 2 * a.pw - a.dw * (a.kw - 1) - 1;
    a.ho = (p[11] ? (eh + a.sh - 1) / a.sh : eh / a.sh) + 1;
    a.wo = (p[11] ? (ew + a.sw - 1) / a.sw : ew / a.sw) + 1;
    size_t nx = (size_t)(a.n * a.c * a.h * a.w), ny = (size_t)(a.n * a.c * a.ho * a.wo);
    float* x = malloc(nx * sizeof(float));
    float* got = malloc((ny + CONV_GUARD) * sizeof(float));
    float* want = malloc((ny + CONV_GUARD) * sizeof(float));
    kiln_test_fill_f32(x, nx, (unsigned)(i + 5), -1, 1);
    x[nx / 3] = NAN;
    x[nx / 2] = -INFINITY;
    for (size_t j = 0; j < ny + CONV_GUARD; ++j) got[j] = want[j] = (float)j;
    a.x = x, a.y = want;
    kiln_max_pool2d_f32_reference(&a);
    a.y = got;
    kiln_max_pool2d_f32(&a, pool);
    char what[128];
    snprintf(what, sizeof what, "%s max pool case %zu", where, i);
    kiln_test_compare_f32(what, got, want, ny + CONV_GUARD, 0, 0);
    free(x), free(got), free(want);
  }
}

void kiln_test_suite_conv(void) {
  kiln_test_each_isa_and_pool(conv_test_level);
  kiln_test_each_isa_and_pool(pool_test_level);
  conv_test_shape_rules();
  conv_test_compiled();
}
