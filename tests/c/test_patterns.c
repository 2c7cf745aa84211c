/* The simplify pass's pattern rewrites on their own (kiln_simplify_patterns.c):
 * decomposed layer_norm (both variance forms, rsqrt or sqrt-div, with and
 * without gamma and beta), rms_norm, GELU (erf) and SiLU each become one
 * node; near misses (a negative eps, a mean over another axis, a second
 * user of an intermediate) are left alone; and the compiled result runs and
 * matches a double-precision reference of the decomposed formula. Also a
 * gated pair, silu(x Wa) * (x Wb) with dense (K, N) weights, compiled whole:
 * one GEMM over [Wa | Wb] and one fused kernel (kiln_pass_fuse_glu.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

enum { ROWS = 5, COLS = 37 };

typedef struct {
  kiln_graph_t* g;
  int32_t x, gamma, beta;
} pat_graph_t;

static int32_t pat_scalar(kiln_graph_t* g, float v) {
  int32_t id = -1;
  KILN_EXPECT_OK(kiln_graph_add_constant(g, NULL, KILN_F32, 0, NULL, KILN_LAYOUT_DENSE, &v,
                                         sizeof v, &id));
  return id;
}

static int32_t pat_node(kiln_graph_t* g, kiln_op_t op, int32_t a, int32_t b) {
  int32_t ins[2] = {a, b}, y = -1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, op, ins, b >= 0 ? 2 : 1, NULL, 0, NULL, 0, NULL, &y));
  return y;
}

/* mean over axis `axis` of a rank-2 value, keepdim. */
static int32_t pat_mean(kiln_graph_t* g, int32_t v, int axis) {
  int64_t p[2] = {(int64_t)1 << axis, 1};
  int32_t y = -1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MEAN, &v, 1, p, 2, NULL, 0, NULL, &y));
  return y;
}

static pat_graph_t pat_graph_new(const float* gamma, const float* beta) {
  pat_graph_t p = {NULL, -1, -1, -1};
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &p.g));
  if (!p.g) return p;
  int64_t xs[2] = {ROWS, COLS}, ws[1] = {COLS};
  KILN_EXPECT_OK(kiln_graph_add_input(p.g, "x", KILN_F32, 2, xs, &p.x));
  if (gamma)
    KILN_EXPECT_OK(kiln_graph_add_constant(p.g, "gamma", KILN_F32, 1, ws, KILN_LAYOUT_DENSE, gamma,
                                           COLS * sizeof(float), &p.gamma));
  if (beta)
    KILN_EXPECT_OK(kiln_graph_add_constant(p.g, "beta", KILN_F32, 1, ws, KILN_LAYOUT_DENSE, beta,
                                           COLS * sizeof(float), &p.beta));
  return p;
}

/* Layer norm as torch decomposes it. pow_form: var = mean(pow(d, 2)), else
 * mean(d * d); div_form: d / sqrt(var + eps), else d * rsqrt(var + eps).
 * mean_axis 1 is the normalised (last) axis; 0 is a near miss. */
static int32_t pat_layer_norm(pat_graph_t* p, int pow_form, int div_form, float eps, int mean_axis) {
  kiln_graph_t* g = p->g;
  int32_t d = pat_node(g, KILN_OP_SUB, p->x, pat_mean(g, p->x, mean_axis));
  int32_t sq = pow_form ? pat_node(g, KILN_OP_POW, d, pat_scalar(g, 2.0f)) : pat_node(g, KILN_OP_MUL, d, d);
  int32_t ve = pat_node(g, KILN_OP_ADD, pat_mean(g, sq, 1), pat_scalar(g, eps));
  int32_t y = div_form ? pat_node(g, KILN_OP_DIV, d, pat_node(g, KILN_OP_SQRT, ve, -1))
                       : pat_node(g, KILN_OP_MUL, d, pat_node(g, KILN_OP_RSQRT, ve, -1));
  if (p->gamma >= 0) y = pat_node(g, KILN_OP_MUL, y, p->gamma);
  if (p->beta >= 0) y = pat_node(g, KILN_OP_ADD, y, p->beta);
  return y;
}

static void pat_layer_norm_reference(const float* x, const float* gamma, const float* beta,
                                     float eps, float* y) {
  for (int r = 0; r < ROWS; ++r) {
    const float* xr = x + r * COLS;
    double mean = 0, var = 0;
    for (int c = 0; c < COLS; ++c) mean += xr[c];
    mean /= COLS;
    for (int c = 0; c < COLS; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= COLS;
    for (int c = 0; c < COLS; ++c) {
      double v = (xr[c] - mean) / sqrt(var + eps);
      if (gamma) v *= gamma[c];
      if (beta) v += beta[c];
      y[r * COLS + c] = (float)v;
    }
  }
}

/* Runs simplify alone; returns the number of nodes and sets *op to the op of
 * the node that makes the output. */
static int32_t pat_simplify(pat_graph_t* p, int32_t y, kiln_op_t* op, kiln_node_t* out_node) {
  *op = KILN_OP_COUNT;
  const int failed0 = kiln_test_failed; /* this graph's failures, not an earlier test's */
  KILN_EXPECT_OK(kiln_graph_set_outputs(p->g, &y, 1));
  if (kiln_test_failed != failed0) return -1;
  kiln_graph_t* s = NULL;
  int32_t rewrites = 0;
  KILN_EXPECT_OK(kiln_pass_simplify(p->g, &s, &rewrites));
  if (!s) return -1;
  KILN_EXPECT_OK(kiln_graph_verify(s));
  int32_t n = s->n_nodes;
  if (n > 0) {
    *op = s->nodes[n - 1].op;
    if (out_node) *out_node = s->nodes[n - 1];
  }
  kiln_graph_release(s);
  return n;
}

/* Compiles (every pass, verified) and runs p's graph on x into got. */
static void pat_compile_run(pat_graph_t* p, int32_t y, const float* x, float* got) {
  KILN_EXPECT_OK(kiln_graph_set_outputs(p->g, &y, 1));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  kiln_graph_t* cg = NULL;
  KILN_EXPECT_OK(kiln_compile(p->g, &o, &cg));
  p->g = NULL; /* kiln_compile consumes it */
  if (!cg) return;
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(cg, NULL, NULL, &m));
  if (m) {
    int64_t shape[2] = {ROWS, COLS};
    kiln_tensor_t in = {(void*)x, KILN_F32, 2, shape}, out = {got, KILN_F32, 2, shape};
    KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &out, 1));
    kiln_model_release(m);
  }
}

static void test_layer_norm_patterns(const float* x, const float* gamma, const float* beta) {
  float got[ROWS * COLS], want[ROWS * COLS];
  for (int form = 0; form < 8; ++form) {
    int pow_form = form & 1, div_form = (form >> 1) & 1, affine = (form >> 2) & 1;
    const float* gm = affine ? gamma : NULL;
    const float* bt = affine ? beta : NULL;
    const float eps = 1e-5f;
    pat_graph_t p = pat_graph_new(gm, bt);
    if (!p.g) return;
    kiln_op_t op;
    kiln_node_t node;
    int32_t n = pat_simplify(&p, pat_layer_norm(&p, pow_form, div_form, eps, 1), &op, &node);
    KILN_EXPECT(n == 1 && op == KILN_OP_LAYER_NORM && node.n_inputs == (affine ? 3 : 1) &&
                    node.params[0] == 1 && node.fparams[0] == eps,
                "layer_norm form %d: %d nodes, last op %s, %d inputs", form, n,
                op < KILN_OP_COUNT ? kiln_op_name(op) : "-", node.n_inputs);
    kiln_graph_release(p.g);
    /* Compiled and run: the fused kernel against the formula in double. */
    p = pat_graph_new(gm, bt);
    if (!p.g) return;
    pat_compile_run(&p, pat_layer_norm(&p, pow_form, div_form, eps, 1), x, got);
    pat_layer_norm_reference(x, gm, bt, eps, want);
    char what[64];
    snprintf(what, sizeof what, "layer_norm form %d compiled", form);
    kiln_test_compare_f32(what, got, want, ROWS * COLS, 1e-5f, 1e-5f);
    kiln_graph_release(p.g);
  }
  /* Near misses stay decomposed: a negative eps (the matcher takes only
   * eps >= 0, as torch's norms have), a mean over the other axis. */
  for (int miss = 0; miss < 2; ++miss) {
    pat_graph_t p = pat_graph_new(NULL, NULL);
    if (!p.g) return;
    kiln_op_t op;
    int32_t n = pat_simplify(&p, pat_layer_norm(&p, 1, 0, miss ? 1e-5f : -1e-5f, miss ? 0 : 1), &op, NULL);
    KILN_EXPECT(n > 1 && op != KILN_OP_LAYER_NORM, "layer_norm near miss %d left alone (%d nodes)",
                miss, n);
    kiln_graph_release(p.g);
  }
}

static void test_rms_gelu_silu_patterns(void) {
  const float eps = 1e-6f;
  for (int form = 0; form < 2; ++form) { /* x * rsqrt(mean(x*x) + eps), x / sqrt(...) */
    pat_graph_t p = pat_graph_new(NULL, NULL);
    if (!p.g) return;
    kiln_graph_t* g = p.g;
    int32_t sq = form ? pat_node(g, KILN_OP_POW, p.x, pat_scalar(g, 2.0f)) : pat_node(g, KILN_OP_MUL, p.x, p.x);
    int32_t ve = pat_node(g, KILN_OP_ADD, pat_mean(g, sq, 1), pat_scalar(g, eps));
    int32_t y = form ? pat_node(g, KILN_OP_DIV, p.x, pat_node(g, KILN_OP_SQRT, ve, -1))
                     : pat_node(g, KILN_OP_MUL, pat_node(g, KILN_OP_RSQRT, ve, -1), p.x);
    kiln_op_t op;
    kiln_node_t node;
    int32_t n = pat_simplify(&p, y, &op, &node);
    KILN_EXPECT(n == 1 && op == KILN_OP_RMS_NORM && node.fparams[0] == eps,
                "rms_norm form %d: %d nodes", form, n);
    kiln_graph_release(p.g);
  }
  for (int form = 0; form < 2; ++form) { /* (x * 0.5) * (1 + erf(x * 1/sqrt2)); x / sqrt2 */
    pat_graph_t p = pat_graph_new(NULL, NULL);
    if (!p.g) return;
    kiln_graph_t* g = p.g;
    int32_t u = form ? pat_node(g, KILN_OP_DIV, p.x, pat_scalar(g, 1.4142135623730951f))
                     : pat_node(g, KILN_OP_MUL, p.x, pat_scalar(g, 0.7071067811865476f));
    int32_t t = pat_node(g, KILN_OP_ADD, pat_node(g, KILN_OP_ERF, u, -1), pat_scalar(g, 1.0f));
    int32_t y = pat_node(g, KILN_OP_MUL, pat_node(g, KILN_OP_MUL, p.x, pat_scalar(g, 0.5f)), t);
    kiln_op_t op;
    int32_t n = pat_simplify(&p, y, &op, NULL);
    KILN_EXPECT(n == 1 && op == KILN_OP_GELU, "gelu form %d: %d nodes", form, n);
    kiln_graph_release(p.g);
  }
  {
    pat_graph_t p = pat_graph_new(NULL, NULL);
    if (!p.g) return;
    int32_t y = pat_node(p.g, KILN_OP_MUL, p.x, pat_node(p.g, KILN_OP_SIGMOID, p.x, -1));
    kiln_op_t op;
    int32_t n = pat_simplify(&p, y, &op, NULL);
    KILN_EXPECT(n == 1 && op == KILN_OP_SILU, "silu: %d nodes", n);
    kiln_graph_release(p.g);
  }
  { /* x * sigmoid(z) with z != x is not SiLU */
    pat_graph_t p = pat_graph_new(NULL, NULL);
    if (!p.g) return;
    int32_t z = pat_node(p.g, KILN_OP_NEG, p.x, -1);
    int32_t y = pat_node(p.g, KILN_OP_MUL, p.x, pat_node(p.g, KILN_OP_SIGMOID, z, -1));
    kiln_op_t op;
    int32_t n = pat_simplify(&p, y, &op, NULL);
    KILN_EXPECT(n == 3 && op == KILN_OP_MUL, "x * sigmoid(-x) left alone: %d nodes", n);
    kiln_graph_release(p.g);
  }
}

enum { GLU_N = 24 };

static void test_gated_pair(const float* x) {
  float wa[COLS * GLU_N], wb[COLS * GLU_N], got[ROWS * GLU_N];
  kiln_test_fill_f32(wa, COLS * GLU_N, 21, -0.5f, 0.5f);
  kiln_test_fill_f32(wb, COLS * GLU_N, 22, -0.5f, 0.5f);
  pat_graph_t p = pat_graph_new(NULL, NULL);
  if (!p.g) return;
  int64_t ws[2] = {COLS, GLU_N};
  int32_t a = -1, b = -1;
  KILN_EXPECT_OK(kiln_graph_add_constant(p.g, "wa", KILN_F32, 2, ws, KILN_LAYOUT_DENSE, wa, sizeof wa, &a));
  KILN_EXPECT_OK(kiln_graph_add_constant(p.g, "wb", KILN_F32, 2, ws, KILN_LAYOUT_DENSE, wb, sizeof wb, &b));
  int32_t gate = pat_node(p.g, KILN_OP_SILU, pat_node(p.g, KILN_OP_MATMUL, p.x, a), -1);
  int32_t y = pat_node(p.g, KILN_OP_MUL, pat_node(p.g, KILN_OP_MATMUL, p.x, b), gate);
  KILN_EXPECT_OK(kiln_graph_set_outputs(p.g, &y, 1));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.fuse_glu = 1;
  kiln_graph_t* cg = NULL;
  KILN_EXPECT_OK(kiln_compile(p.g, &o, &cg));
  if (!cg) return;
  int linears = 0, fused = 0;
  for (int32_t i = 0; i < cg->n_nodes; ++i) {
    linears += cg->nodes[i].op == KILN_OP_LINEAR;
    fused += cg->nodes[i].op == KILN_OP_ELTWISE_FUSED;
  }
  KILN_EXPECT(linears == 1 && fused == 1 && cg->n_nodes == 2, "gated pair: %d nodes, %d linear, %d fused",
              cg->n_nodes, linears, fused);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(cg, NULL, NULL, &m));
  if (!m) return;
  int64_t xs[2] = {ROWS, COLS}, ys[2] = {ROWS, GLU_N};
  kiln_tensor_t in = {(void*)x, KILN_F32, 2, xs}, out = {got, KILN_F32, 2, ys};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &out, 1));
  kiln_model_release(m);
  for (int r = 0; r < ROWS; ++r)
    for (int n = 0; n < GLU_N; ++n) {
      double g = 0, u = 0;
      for (int k = 0; k < COLS; ++k) {
        g += (double)x[r * COLS + k] * wa[k * GLU_N + n];
        u += (double)x[r * COLS + k] * wb[k * GLU_N + n];
      }
      double want = u * (g / (1.0 + exp(-g)));
      KILN_EXPECT(fabs(got[r * GLU_N + n] - want) <= 1e-5 + 1e-5 * fabs(want),
                  "gated pair [%d, %d]: %g, want %g", r, n, (double)got[r * GLU_N + n], want);
    }
}

void kiln_test_suite_patterns(void) {
  float x[ROWS * COLS], gamma[COLS], beta[COLS];
  kiln_test_fill_f32(x, ROWS * COLS, 11, -3.0f, 5.0f);
  kiln_test_fill_f32(gamma, COLS, 12, 0.5f, 1.5f);
  kiln_test_fill_f32(beta, COLS, 13, -1.0f, 1.0f);
  test_layer_norm_patterns(x, gamma, beta);
  test_rms_gelu_silu_patterns();
  test_gated_pair(x);
}
