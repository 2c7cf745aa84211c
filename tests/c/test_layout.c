/* Tests of the layout pass (compiler/kiln_pass_layout.c) on small hand-built
 * graphs of convs, compiled with the pass on and off from the same graph:
 *  - a chain of convs goes channels-last with one conversion, out (its
 *    first conv reads the NCHW input itself); a residual read inside the
 *    region needs none; an input read both as x and as a residual is
 *    converted once; a max pool between convs
 *    joins their region (MAX_POOL2D_NHWC);
 *  - a single conv, a region whose convs do not gain (3-channel input,
 *    grouped), and one needing a conversion per two gaining convs or more
 *    (every output a graph output) stay NCHW with no conversion;
 *  - graph outputs keep NCHW shapes, also an intermediate conv's output;
 *  - the compiled model's outputs match the NCHW compile (the same
 *    arithmetic up to summation order: tolerance 1e-4 on outputs of order
 *    1, from weights U(-1, 1) / sqrt(K) and x U(-1, 1));
 *  - CONV2D_NHWC's shape rule: the (N, Ho, Wo, O) output, and bad params,
 *    a weight packed in panels of 6 and a mismatched residual refused;
 *  - a bf16 model's convs (ROUND_X, bf16 weights) each followed by a batch
 *    norm's per-channel MUL and ADD, the second reading the first's output
 *    as its residual: with a bf16 engine each keeps its weight in the bf16
 *    form and takes the norm's scale as its fifth input, channels-last
 *    (fuse_conv, layout and pack agreeing), else the norm folds into the
 *    weight; the model runs, within bf16 rounding of x of the fp32 graph. */
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/gemm/kiln_gemm.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "ir/kiln_graph_print.h"
#include "kernels/conv/kiln_conv.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

#define LT_NONE (-2)
#define LT_INPUT (-1)

typedef struct {
  int x, res;      /* LT_INPUT, or an earlier conv's index; res may be LT_NONE */
  int64_t o, k, s, groups;
} lt_conv_t;

typedef struct {
  const char* name;
  int64_t c, hw;          /* input (1, c, hw, hw) */
  int n_convs;
  lt_conv_t convs[6];
  int n_outputs;
  int outputs[3];         /* conv indices */
  int want_nhwc, want_copies;
} lt_case_t;

/* Builds the case's graph; out_shapes gets each output's (NCHW) shape. */
static kiln_graph_t* lt_build(const lt_case_t* tc, int64_t out_shapes[][4]) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t xs[4] = {1, tc->c, tc->hw, tc->hw};
  int32_t x, ys[6];
  int64_t shapes[6][4];
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  for (int i = 0; i < tc->n_convs; ++i) {
    const lt_conv_t* cv = &tc->convs[i];
    const int64_t* in = cv->x == LT_INPUT ? xs : shapes[cv->x];
    if (cv->k == 0) { /* a max pool, 3x3 stride 2 pad 1 (ResNet's) */
      int64_t pp[11] = {3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0};
      int32_t pin = cv->x == LT_INPUT ? x : ys[cv->x];
      KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D, &pin, 1, pp, 11, NULL, 0, "pool",
                                         &ys[i]));
      memcpy(shapes[i], g->values[ys[i]].shape, sizeof(shapes[i]));
      continue;
    }
    int64_t ws[4] = {cv->o, in[1] / cv->groups, cv->k, cv->k}, K = ws[1] * cv->k * cv->k;
    size_t nw = (size_t)(cv->o * K);
    float* w = malloc(nw * sizeof(float));
    float* b = malloc((size_t)cv->o * sizeof(float));
    kiln_test_fill_f32(w, nw, (unsigned)(100 + i), -1.0f, 1.0f);
    for (size_t j = 0; j < nw; ++j) w[j] /= sqrtf((float)K);
    kiln_test_fill_f32(b, (size_t)cv->o, (unsigned)(200 + i), -0.5f, 0.5f);
    int32_t wi, bi, y;
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, ws, KILN_LAYOUT_DENSE, w,
                                           nw * sizeof(float), &wi));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, ws, KILN_LAYOUT_DENSE, b,
                                           (size_t)cv->o * sizeof(float), &bi));
    free(w);
    free(b);
    int32_t ins[4] = {cv->x == LT_INPUT ? x : ys[cv->x], wi, bi,
                      cv->res == LT_NONE ? -1 : cv->res == LT_INPUT ? x : ys[cv->res]};
    int64_t p = cv->k / 2;
    int64_t params[9] = {cv->s, cv->s, p, p, 1, 1, cv->groups, KILN_ACT_RELU, cv->res != LT_NONE};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, ins, cv->res == LT_NONE ? 3 : 4, params,
                                       9, NULL, 0, "conv", &y));
    ys[i] = y;
    memcpy(shapes[i], g->values[y].shape, sizeof(shapes[i]));
  }
  int32_t outs[3];
  for (int i = 0; i < tc->n_outputs; ++i) {
    outs[i] = ys[tc->outputs[i]];
    memcpy(out_shapes[i], shapes[tc->outputs[i]], sizeof(out_shapes[i]));
  }
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, outs, tc->n_outputs));
  return g;
}

static kiln_graph_t* lt_compile(const lt_case_t* tc, int layout, int64_t out_shapes[][4]) {
  kiln_graph_t* g = lt_build(tc, out_shapes);
  if (!g) return NULL;
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.layout = layout;
  kiln_graph_t* cg = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &cg));
  return cg;
}

/* Runs a compiled graph on x into outs[i] (each shapes[i] big). */
static void lt_run(kiln_graph_t* cg, const lt_case_t* tc, const float* x, float** outs,
                   int64_t shapes[][4]) {
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(cg, NULL, NULL, &m));
  if (!m) return;
  int64_t xs[4] = {1, tc->c, tc->hw, tc->hw};
  kiln_tensor_t in = {(void*)x, KILN_F32, 4, xs};
  kiln_tensor_t out[3];
  for (int i = 0; i < tc->n_outputs; ++i) {
    kiln_tensor_t t = {outs[i], KILN_F32, 4, shapes[i]};
    out[i] = t;
  }
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, out, tc->n_outputs));
  kiln_model_release(m);
}

static void lt_check(const lt_case_t* tc) {
  int64_t shapes[3][4], shapes_off[3][4];
  kiln_graph_t* on = lt_compile(tc, 1, shapes);
  kiln_graph_t* off = lt_compile(tc, 0, shapes_off);
  if (!on || !off) {
    KILN_EXPECT(0, "%s: did not compile", tc->name);
    if (on) kiln_graph_release(on);
    if (off) kiln_graph_release(off);
    return;
  }
  int nhwc = 0, copies = 0, nchw_convs = 0, off_nhwc = 0, off_copies = 0, pools_nhwc = 0;
  for (int32_t i = 0; i < on->n_nodes; ++i) pools_nhwc += on->nodes[i].op == KILN_OP_MAX_POOL2D_NHWC;
  for (int32_t i = 0; i < on->n_nodes; ++i) {
    kiln_op_t op = on->nodes[i].op;
    nhwc += op == KILN_OP_CONV2D_NHWC || op == KILN_OP_MAX_POOL2D_NHWC;
    copies += op == KILN_OP_STRIDED_COPY;
    nchw_convs += op == KILN_OP_CONV2D || op == KILN_OP_MAX_POOL2D;
  }
  for (int32_t i = 0; i < off->n_nodes; ++i) {
    off_nhwc += off->nodes[i].op == KILN_OP_CONV2D_NHWC || off->nodes[i].op == KILN_OP_MAX_POOL2D_NHWC;
    off_copies += off->nodes[i].op == KILN_OP_STRIDED_COPY;
  }
  KILN_EXPECT(nhwc == tc->want_nhwc && copies == tc->want_copies &&
                  nhwc + nchw_convs == tc->n_convs,
              "%s: %d conv2d_nhwc (want %d), %d conversions (want %d), %d conv2d", tc->name, nhwc,
              tc->want_nhwc, copies, tc->want_copies, nchw_convs);
  KILN_EXPECT(off_nhwc == 0 && off_copies == 0, "%s: layout off still made %d nhwc, %d copies",
              tc->name, off_nhwc, off_copies);
  int32_t regions, convs, conversions;
  kiln_graph_summarize_layout(on, &regions, &convs, &conversions);
  KILN_EXPECT(convs == nhwc - pools_nhwc && conversions == copies &&
                  (nhwc == 0) == (regions == 0),
              "%s: summary %d regions, %d convs, %d conversions", tc->name, regions, convs,
              conversions);
  /* Graph outputs keep their NCHW shapes. */
  for (int i = 0; i < tc->n_outputs; ++i) {
    const kiln_value_t* v = &on->values[on->outputs[i]];
    KILN_EXPECT(v->rank == 4 && memcmp(v->shape, shapes[i], sizeof(shapes[i])) == 0,
                "%s: output %d is (%lld, %lld, %lld, %lld)", tc->name, i, (long long)v->shape[0],
                (long long)v->shape[1], (long long)v->shape[2], (long long)v->shape[3]);
  }
  size_t nx = (size_t)(tc->c * tc->hw * tc->hw);
  float* x = malloc(nx * sizeof(float));
  kiln_test_fill_f32(x, nx, 7, -1.0f, 1.0f);
  float *got[3], *want[3];
  size_t ny[3];
  for (int i = 0; i < tc->n_outputs; ++i) {
    ny[i] = (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2] * shapes[i][3]);
    got[i] = calloc(ny[i], sizeof(float));
    want[i] = calloc(ny[i], sizeof(float));
  }
  lt_run(on, tc, x, got, shapes);
  lt_run(off, tc, x, want, shapes);
  for (int i = 0; i < tc->n_outputs; ++i) {
    char what[128];
    snprintf(what, sizeof what, "%s: output %d, layout on vs off", tc->name, i);
    kiln_test_compare_f32(what, got[i], want[i], ny[i], 1e-4f, 1e-4f);
    free(got[i]);
    free(want[i]);
  }
  free(x);
}

/* x (1, 16, 10, 10) -> conv A 16->32 -> *s + t -> conv B 32->32 with
 * residual A's norm output -> *s2 + t2; weights bf16 values; round_x as
 * given. */
static kiln_graph_t* lt_bf16_graph(int round_x) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t xs[4] = {1, 16, 10, 10}, wa[4] = {32, 16, 3, 3}, wb[4] = {32, 32, 3, 3};
  int64_t cs[4] = {1, 32, 1, 1};
  static float w1[32 * 16 * 9], w2[32 * 32 * 9], sc[2][32], sh[2][32];
  kiln_test_fill_f32(w1, 32 * 16 * 9, 301, -0.25f, 0.25f);
  kiln_test_fill_f32(w2, 32 * 32 * 9, 302, -0.2f, 0.2f);
  for (int i = 0; i < 32 * 16 * 9; ++i) w1[i] = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(w1[i]));
  for (int i = 0; i < 32 * 32 * 9; ++i) w2[i] = kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(w2[i]));
  kiln_test_fill_f32(sc[0], 64, 303, 0.3f, 1.7f);
  kiln_test_fill_f32(sh[0], 64, 304, -0.3f, 0.3f);
  int32_t x, c1, c2, s0, s1, t0, t1, y1, y2, y3, y4, y5, y6;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w1", KILN_F32, 4, wa, KILN_LAYOUT_DENSE, w1, sizeof w1, &c1));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w2", KILN_F32, 4, wb, KILN_LAYOUT_DENSE, w2, sizeof w2, &c2));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "s0", KILN_F32, 4, cs, KILN_LAYOUT_DENSE, sc[0], 128, &s0));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "s1", KILN_F32, 4, cs, KILN_LAYOUT_DENSE, sc[1], 128, &s1));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "t0", KILN_F32, 4, cs, KILN_LAYOUT_DENSE, sh[0], 128, &t0));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "t1", KILN_F32, 4, cs, KILN_LAYOUT_DENSE, sh[1], 128, &t1));
  int64_t p[KILN_P_COUNT(CONV2D)] = {1, 1, 1, 1, 1, 1, 1, 0, 0};
  p[KILN_P(CONV2D, ROUND_X)] = round_x;
  int32_t a_in[2] = {x, c1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, a_in, 2, p, KILN_P_COUNT(CONV2D), NULL, 0, "a", &y1));
  int32_t m1[2] = {y1, s0}, a1[2];
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, m1, 2, NULL, 0, NULL, 0, "bn a", &y2));
  a1[0] = y2, a1[1] = t0;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, a1, 2, NULL, 0, NULL, 0, "bn a", &y3));
  int32_t b_in[2] = {y3, c2};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D, b_in, 2, p, KILN_P_COUNT(CONV2D), NULL, 0, "b", &y4));
  int32_t m2[2] = {y4, s1}, a2[2];
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, m2, 2, NULL, 0, NULL, 0, "bn b", &y5));
  a2[0] = y5, a2[1] = t1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, a2, 2, NULL, 0, NULL, 0, "bn b", &y6));
  int32_t r[2] = {y6, y3};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, r, 2, NULL, 0, NULL, 0, "residual", &y1));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y1, 1));
  return g;
}

static void lt_bf16_model_convs(void) {
  static float x[16 * 100], want[32 * 100], got[32 * 100];
  kiln_test_fill_f32(x, 16 * 100, 305, -1.0f, 1.0f);
  int64_t xs[4] = {1, 16, 10, 10}, ys[4] = {1, 32, 10, 10};
  float* outs[2] = {want, got};
  for (int round_x = 0; round_x < 2; ++round_x) {
    kiln_graph_t* g = lt_bf16_graph(round_x);
    if (!g) return;
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    kiln_graph_t* cg = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &cg));
    if (!cg) return;
    int scaled = 0, bf16 = 0, convs = 0;
    for (int32_t i = 0; i < cg->n_nodes; ++i) {
      const kiln_node_t* n = &cg->nodes[i];
      if (n->op != KILN_OP_CONV2D && n->op != KILN_OP_CONV2D_NHWC) continue;
      convs++;
      scaled += n->n_inputs > 4 && n->inputs[4] >= 0;
      bf16 += cg->values[n->inputs[1]].layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16;
    }
    const int want_bf16 = round_x && kiln_conv2d_bf16_has_engine() ? 2 : 0;
    KILN_EXPECT(convs == 2 && scaled == want_bf16 && bf16 == want_bf16,
                "round_x %d: %d convs, %d scaled, %d in bf16 form (want %d)", round_x, convs,
                scaled, bf16, want_bf16);
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(cg, NULL, NULL, &m));
    if (!m) return;
    kiln_tensor_t in = {x, KILN_F32, 4, xs}, out = {outs[round_x], KILN_F32, 4, ys};
    KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &out, 1));
    kiln_model_release(m);
  }
  /* x rounded to bf16 (2^-9 relative) in both convs: outputs of order 1. */
  kiln_test_compare_f32("bf16 model convs vs fp32", got, want, 32 * 100, 0.05f, 0.02f);
}

static void lt_shape_rule(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[4] = {2, 9, 7, 16}, ws[4] = {20, 8, 3, 3}, rs[4] = {2, 5, 4, 20};
  static float wd[20 * 8 * 9], rd[2 * 5 * 4 * 20];
  int32_t x, w, r, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 4, ws, KILN_LAYOUT_DENSE, wd,
                                         sizeof wd, &w));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "r", KILN_F32, 4, rs, KILN_LAYOUT_DENSE, rd,
                                         sizeof rd, &r));
  int32_t ins[4] = {x, w, -1, r};
  int64_t ok[9] = {2, 2, 1, 1, 1, 1, 2, KILN_ACT_RELU, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, ins, 4, ok, 9, NULL, 0, "ok", &y));
  const int64_t* s = g->values[y].shape;
  KILN_EXPECT(s[0] == 2 && s[1] == 5 && s[2] == 4 && s[3] == 20,
              "conv2d_nhwc shape (%lld, %lld, %lld, %lld), want (2, 5, 4, 20)", (long long)s[0],
              (long long)s[1], (long long)s[2], (long long)s[3]);
  int64_t bad[][9] = {
      {0, 2, 1, 1, 1, 1, 2, 0, 0},  /* zero stride */
      {2, 2, 1, 1, 1, 1, 3, 0, 0},  /* groups do not divide C */
      {2, 2, 1, 1, 1, 1, 1, 0, 0},  /* w's C / groups mismatch */
      {2, 2, 1, 1, 1, 1, 2, 99, 0}, /* unknown activation */
      {2, 2, 1, 1, 1, 1, 2, 0, 2},  /* residual placement */
      {1, 1, 1, 1, 1, 1, 2, 0, 0},  /* residual no longer matches y */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, ins, 4, bad[i], 9, NULL, 0,
                                          "bad", &y),
                      KILN_INVALID_ARGUMENT);
  /* Param 9: x (N, C, H, W) gives the same y; only 0 and 1 are layouts. */
  int64_t xs_nchw[4] = {2, 16, 9, 7};
  int32_t xn;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "xn", KILN_F32, 4, xs_nchw, &xn));
  int32_t insn[4] = {xn, w, -1, r};
  int64_t from_nchw[10] = {2, 2, 1, 1, 1, 1, 2, KILN_ACT_RELU, 1, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, insn, 4, from_nchw, 10, NULL, 0,
                                     "nchw x", &y));
  s = g->values[y].shape;
  KILN_EXPECT(s[0] == 2 && s[1] == 5 && s[2] == 4 && s[3] == 20,
              "conv2d_nhwc from NCHW x: (%lld, %lld, %lld, %lld)", (long long)s[0], (long long)s[1],
              (long long)s[2], (long long)s[3]);
  from_nchw[9] = 2;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, insn, 4, from_nchw, 10, NULL, 0,
                                        "bad layout", &y),
                    KILN_INVALID_ARGUMENT);
  /* Panels of 6 are the NCHW pixel-vector kernel's: refused. */
  size_t b6 = kiln_conv2d_f32_packed_size(20, 8 * 9, 2, KILN_CONV_PANEL_O);
  float* w6 = calloc(1, b6);
  int32_t wp6;
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w6", KILN_F32, 4, ws, KILN_LAYOUT_CONV2D_PACKED, w6,
                                         b6, &wp6));
  int32_t ins6[2] = {x, wp6};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_CONV2D_NHWC, ins6, 2, ok, 9, NULL, 0, "p6", &y),
                    KILN_INVALID_ARGUMENT);
  free(w6);
  /* MAX_POOL2D_NHWC: (N, H, W, C) -> (N, Ho, Wo, C); MAX_POOL2D's rules. */
  int64_t pp[11] = {3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_NHWC, &x, 1, pp, 11, NULL, 0, "mp", &y));
  s = g->values[y].shape;
  KILN_EXPECT(s[0] == 2 && s[1] == 5 && s[2] == 4 && s[3] == 16,
              "max_pool2d_nhwc shape (%lld, %lld, %lld, %lld), want (2, 5, 4, 16)", (long long)s[0],
              (long long)s[1], (long long)s[2], (long long)s[3]);
  int64_t pbad[][11] = {
      {3, 3, 2, 2, 2, 1, 1, 1, 0, 0, 0}, /* padding over half the kernel */
      {3, 3, 0, 2, 1, 1, 1, 1, 0, 0, 0}, /* zero stride */
      {3, 3, 2, 2, 1, 1, 1, 1, 0, 0, 4}, /* a divisor on a max pool */
      {10, 3, 1, 1, 0, 0, 1, 1, 0, 0, 0}, /* window past the input (H = 9) */
  };
  for (size_t i = 0; i < sizeof(pbad) / sizeof(pbad[0]); ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D_NHWC, &x, 1, pbad[i], 11, NULL, 0,
                                          "bad", &y),
                      KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

void kiln_test_suite_layout(void) {
  static const lt_case_t cases[] = {
      {"chain", 16, 10, 3,
       {{LT_INPUT, LT_NONE, 16, 3, 1, 1}, {0, LT_NONE, 16, 3, 1, 1}, {1, LT_NONE, 32, 3, 2, 1}},
       1, {2}, 3, 1},
      {"resnet block pair", 16, 9, 5,
       {{LT_INPUT, LT_NONE, 16, 3, 1, 1}, {0, LT_INPUT, 16, 3, 1, 1}, {1, LT_NONE, 32, 3, 2, 1},
        {1, LT_NONE, 32, 1, 2, 1}, {2, 3, 32, 3, 1, 1}},
       1, {4}, 5, 2},
      {"single conv", 16, 8, 1, {{LT_INPUT, LT_NONE, 32, 3, 1, 1}}, 1, {0}, 0, 0},
      {"3-channel pair", 3, 8, 2, {{LT_INPUT, LT_NONE, 16, 3, 1, 1}, {0, LT_NONE, 8, 3, 1, 1}},
       1, {1}, 0, 0},
      {"grouped pair", 32, 8, 2, {{LT_INPUT, LT_NONE, 32, 3, 1, 2}, {0, LT_NONE, 32, 3, 1, 2}},
       1, {1}, 0, 0},
      {"max pool inside", 16, 12, 4,
       {{LT_INPUT, LT_NONE, 16, 3, 1, 1}, {0, LT_NONE, 0, 0, 0, 1}, {1, LT_NONE, 16, 3, 1, 1},
        {2, 1, 16, 3, 1, 1}},
       1, {3}, 4, 1},
      {"max pool outside a lone conv", 16, 12, 2,
       {{LT_INPUT, LT_NONE, 0, 0, 0, 1}, {0, LT_NONE, 32, 3, 1, 1}}, 1, {1}, 0, 0},
      /* Six gaining convs, three conversions: the input (read as x and
       * as a residual) and the two outputs. */
      {"outputs keep nchw", 16, 7, 6,
       {{LT_INPUT, LT_NONE, 16, 3, 1, 1}, {0, LT_INPUT, 16, 3, 1, 1}, {1, LT_NONE, 24, 1, 1, 1},
        {2, LT_NONE, 24, 3, 1, 1}, {3, 2, 24, 3, 1, 1}, {4, LT_NONE, 16, 1, 1, 1}},
       2, {1, 5}, 6, 3},
      /* Every conv's output is a graph output (a training forward graph
       * saving activations): three conversions for three convs. */
      {"every output leaves", 16, 7, 3,
       {{LT_INPUT, LT_NONE, 16, 3, 1, 1}, {0, LT_NONE, 16, 3, 1, 1}, {1, LT_NONE, 24, 1, 1, 1}},
       3, {0, 1, 2}, 0, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) lt_check(&cases[i]);
  lt_shape_rule();
  lt_bf16_model_convs();
}
