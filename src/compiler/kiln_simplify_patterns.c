/* Decomposed forms recognised by the simplify pass and turned back into the
 * fused ops that kiln's kernels (and GEMM epilogues) run in one pass:
 *
 *   GELU (tanh)  0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))   transformers'
 *                NewGELU / gelu_new (GPT-2), FastGELU-style code
 *   GELU (erf)   0.5·x·(1 + erf(x/√2))
 *   SiLU         x·sigmoid(x)
 *   RMSNorm      x·rsqrt(mean(x², -1, keepdim) + eps), then ·w   (Llama's,
 *                T5's hand-written norms); x / sqrt(…) too
 *   LayerNorm    d = x - mean(x, -1, keepdim); d·rsqrt(mean(d², -1, keepdim)
 *                + eps), or d / sqrt(…), then ·w, then +b   (BERT-era and
 *                ConvNeXt-style hand-written norms)
 *
 * Matching is structural over canonical values, with ADD and MUL commutative
 * and scalar constants compared to a relative 1e-6 (the constants come from
 * Python floats rounded to float32). Only the root node is rewritten: the
 * intermediates become dead unless something else reads them. A norm
 * whose rstd (or x - mean) something else reads is left decomposed: its
 * kernel would compute its own statistics, rounded otherwise than the
 * graph's, and a training graph saves that rstd for its backward, which
 * recomputes x·rstd·w from it and compares the result with the forward's
 * (amax's backward: x == max): with the kernel's numbers no element equals
 * the max and the gradient is 0/0 (fuzzer seed 4041 graph 4199). */
#include <math.h>
#include <string.h>

#include "compiler/kiln_simplify.h"

/* The node that makes v, or NULL for inputs and constants. */
static kiln_node_t* kiln_pat_producer(const kiln_graph_t* g, kiln_node_t* nodes, int32_t v) {
  if (v < 0 || g->values[v].kind != KILN_VALUE_INTERMEDIATE) return NULL;
  return &nodes[g->values[v].producer];
}

int kiln_simplify_scalar(const kiln_graph_t* g, int32_t v, double* out) {
  if (v < 0) return 0;
  const kiln_value_t* c = &g->values[v];
  if (c->kind != KILN_VALUE_CONSTANT || c->layout != KILN_LAYOUT_DENSE || kiln_value_numel(c) != 1)
    return 0;
  switch (c->dtype) {
    case KILN_F32: *out = *(const float*)c->data; return 1;
    case KILN_I64: *out = (double)*(const int64_t*)c->data; return 1;
    case KILN_I32: *out = *(const int32_t*)c->data; return 1;
    default: return 0;
  }
}

static int kiln_pat_is_const(const kiln_graph_t* g, int32_t v, double want) {
  double c;
  return kiln_simplify_scalar(g, v, &c) && fabs(c - want) <= 1e-6 * fabs(want) + 1e-12;
}

/* v = op(other, want) (either order when op commutes): *other set. */
static int kiln_pat_with_const(const kiln_graph_t* g, kiln_node_t* nodes, int32_t v,
                               kiln_op_t op, double want, int32_t* other) {
  const kiln_node_t* n = kiln_pat_producer(g, nodes, v);
  if (!n || n->op != op) return 0;
  if (kiln_pat_is_const(g, n->inputs[1], want)) {
    *other = n->inputs[0];
    return 1;
  }
  int commutes = op == KILN_OP_ADD || op == KILN_OP_MUL;
  if (commutes && kiln_pat_is_const(g, n->inputs[0], want)) {
    *other = n->inputs[1];
    return 1;
  }
  return 0;
}

/* v = unary(x): *x set. */
static int kiln_pat_unary(const kiln_graph_t* g, kiln_node_t* nodes, int32_t v, kiln_op_t op,
                          int32_t* x) {
  const kiln_node_t* n = kiln_pat_producer(g, nodes, v);
  if (!n || n->op != op) return 0;
  *x = n->inputs[0];
  return 1;
}

/* x³ as pow(x, 3), x·x·x in either grouping. */
static int kiln_pat_is_cube_of(const kiln_graph_t* g, kiln_node_t* nodes, int32_t v, int32_t x) {
  int32_t b;
  if (kiln_pat_with_const(g, nodes, v, KILN_OP_POW, 3.0, &b)) return b == x;
  const kiln_node_t* n = kiln_pat_producer(g, nodes, v);
  if (!n || n->op != KILN_OP_MUL) return 0;
  for (int side = 0; side < 2; ++side) {
    const kiln_node_t* sq = kiln_pat_producer(g, nodes, n->inputs[1 - side]);
    if (n->inputs[side] == x && sq && sq->op == KILN_OP_MUL && sq->inputs[0] == x &&
        sq->inputs[1] == x)
      return 1;
  }
  return 0;
}

/* The inner argument of the tanh in GELU-tanh, as a function of x. */
static int kiln_pat_gelu_tanh_arg(const kiln_graph_t* g, kiln_node_t* nodes, int32_t u,
                                  int32_t x) {
  int32_t w, a;
  if (!kiln_pat_with_const(g, nodes, u, KILN_OP_MUL, 0.7978845608028654, &w)) return 0;
  const kiln_node_t* add = kiln_pat_producer(g, nodes, w);
  if (!add || add->op != KILN_OP_ADD) return 0;
  for (int side = 0; side < 2; ++side)
    if (add->inputs[side] == x &&
        kiln_pat_with_const(g, nodes, add->inputs[1 - side], KILN_OP_MUL, 0.044715, &a) &&
        kiln_pat_is_cube_of(g, nodes, a, x))
      return 1;
  return 0;
}

/* t = 1 + f(g(x)) with f tanh (GELU-tanh) or erf (GELU): the op, or 0. */
static kiln_op_t kiln_pat_gelu_bracket(const kiln_graph_t* g, kiln_node_t* nodes, int32_t t,
                                       int32_t x) {
  int32_t f, u, xs;
  if (!kiln_pat_with_const(g, nodes, t, KILN_OP_ADD, 1.0, &f)) return 0;
  if (kiln_pat_unary(g, nodes, f, KILN_OP_TANH, &u) && kiln_pat_gelu_tanh_arg(g, nodes, u, x))
    return KILN_OP_GELU_TANH;
  if (kiln_pat_unary(g, nodes, f, KILN_OP_ERF, &u) &&
      ((kiln_pat_with_const(g, nodes, u, KILN_OP_MUL, 0.7071067811865476, &xs) && xs == x) ||
       (kiln_pat_with_const(g, nodes, u, KILN_OP_DIV, 1.4142135623730951, &xs) && xs == x)))
    return KILN_OP_GELU;
  return 0;
}

/* Root MUL: (x·0.5)·t, or (x·t)·0.5, with t the GELU bracket of x. */
static kiln_op_t kiln_pat_gelu(const kiln_graph_t* g, kiln_node_t* nodes, const kiln_node_t* n,
                               int32_t* x) {
  for (int side = 0; side < 2; ++side) {
    int32_t a = n->inputs[side], b = n->inputs[1 - side];
    kiln_op_t op;
    if (kiln_pat_with_const(g, nodes, a, KILN_OP_MUL, 0.5, x) &&
        (op = kiln_pat_gelu_bracket(g, nodes, b, *x)))
      return op;
    if (kiln_pat_is_const(g, b, 0.5)) {
      const kiln_node_t* m = kiln_pat_producer(g, nodes, a);
      for (int s2 = 0; m && m->op == KILN_OP_MUL && s2 < 2; ++s2) {
        *x = m->inputs[s2];
        if ((op = kiln_pat_gelu_bracket(g, nodes, m->inputs[1 - s2], *x))) return op;
      }
    }
  }
  return 0;
}

/* mean(x², last axis, keepdim) + eps, as r's argument: *eps set. */
static int kiln_pat_mean_square_plus_eps(const kiln_graph_t* g, kiln_node_t* nodes, int32_t v,
                                         int32_t x, double* eps) {
  int32_t m, sq;
  const kiln_node_t* add = kiln_pat_producer(g, nodes, v);
  if (!add || add->op != KILN_OP_ADD) return 0;
  for (int side = 0; side < 2; ++side) {
    if (!kiln_simplify_scalar(g, add->inputs[1 - side], eps) || !(*eps >= 0)) continue;
    m = add->inputs[side];
    const kiln_node_t* mean = kiln_pat_producer(g, nodes, m);
    int32_t rank = g->values[x].rank;
    if (!mean || mean->op != KILN_OP_MEAN || rank < 1 ||
        mean->params[KILN_P(REDUCE, AXES)] != ((int64_t)1 << (rank - 1)) ||
        mean->params[KILN_P(REDUCE, KEEPDIM)] != 1)
      continue;
    sq = mean->inputs[0];
    int32_t b;
    const kiln_node_t* s = kiln_pat_producer(g, nodes, sq);
    if ((kiln_pat_with_const(g, nodes, sq, KILN_OP_POW, 2.0, &b) && b == x) ||
        (s && s->op == KILN_OP_MUL && s->inputs[0] == x && s->inputs[1] == x))
      return 1;
  }
  return 0;
}

/* x·rsqrt(ms + eps) or x / sqrt(ms + eps). */
static int kiln_pat_rms_core(const kiln_graph_t* g, kiln_node_t* nodes, const int32_t* uses,
                             const kiln_node_t* n, int32_t* x, double* eps) {
  int32_t r;
  if (n->op == KILN_OP_DIV) {
    *x = n->inputs[0];
    return uses[n->inputs[1]] == 1 && kiln_pat_unary(g, nodes, n->inputs[1], KILN_OP_SQRT, &r) &&
           kiln_pat_mean_square_plus_eps(g, nodes, r, *x, eps);
  }
  for (int side = 0; side < 2; ++side) {
    *x = n->inputs[side];
    if (uses[n->inputs[1 - side]] == 1 &&
        kiln_pat_unary(g, nodes, n->inputs[1 - side], KILN_OP_RSQRT, &r) &&
        kiln_pat_mean_square_plus_eps(g, nodes, r, *x, eps))
      return 1;
  }
  return 0;
}

/* mean(v, last axis, keepdim) of a rank-`rank` value: *arg set. */
static int kiln_pat_mean_last(const kiln_graph_t* g, kiln_node_t* nodes, int32_t v, int32_t rank,
                              int32_t* arg) {
  const kiln_node_t* mean = kiln_pat_producer(g, nodes, v);
  if (!mean || mean->op != KILN_OP_MEAN || rank < 1 ||
      mean->params[KILN_P(REDUCE, AXES)] != ((int64_t)1 << (rank - 1)) ||
      mean->params[KILN_P(REDUCE, KEEPDIM)] != 1)
    return 0;
  *arg = mean->inputs[0];
  return 1;
}

/* The layer-norm core over the last dim: d·rsqrt(var + eps) or
 * d / sqrt(var + eps), with d = x - mean(x) and var = mean(d²) (d² as
 * pow(d, 2) or d·d). *x and *eps set. */
static int kiln_pat_ln_core(const kiln_graph_t* g, kiln_node_t* nodes, const int32_t* uses,
                            const kiln_node_t* n, int32_t* x, double* eps) {
  for (int side = 0; side < 2; ++side) {
    if (n->op == KILN_OP_DIV && side) break;
    int32_t d = n->inputs[side], r, ve, var, sq, b, mx;
    if (uses[n->inputs[n->op == KILN_OP_DIV ? 1 : 1 - side]] != 1) continue; /* the rstd */
    if (n->op == KILN_OP_DIV ? !kiln_pat_unary(g, nodes, n->inputs[1], KILN_OP_SQRT, &ve)
                             : !kiln_pat_unary(g, nodes, n->inputs[1 - side], KILN_OP_RSQRT, &ve))
      continue;
    const kiln_node_t* sub = kiln_pat_producer(g, nodes, d);
    if (!sub || sub->op != KILN_OP_SUB) continue;
    *x = sub->inputs[0];
    int32_t rank = g->values[*x].rank;
    if (!kiln_pat_mean_last(g, nodes, sub->inputs[1], rank, &mx) || mx != *x) continue;
    const kiln_node_t* add = kiln_pat_producer(g, nodes, ve);
    if (!add || add->op != KILN_OP_ADD) continue;
    for (int s2 = 0; s2 < 2; ++s2) {
      if (!kiln_simplify_scalar(g, add->inputs[1 - s2], eps) || !(*eps >= 0)) continue;
      var = add->inputs[s2];
      if (!kiln_pat_mean_last(g, nodes, var, rank, &sq)) continue;
      const kiln_node_t* s = kiln_pat_producer(g, nodes, sq);
      /* d read by n and its square only (d·d reads it twice). */
      if ((kiln_pat_with_const(g, nodes, sq, KILN_OP_POW, 2.0, &b) && b == d && uses[d] == 2) ||
          (s && s->op == KILN_OP_MUL && s->inputs[0] == d && s->inputs[1] == d && uses[d] == 3))
        return 1;
    }
    (void)r;
  }
  return 0;
}

static void kiln_pat_set(kiln_node_t* n, kiln_op_t op, int32_t a, int32_t b) {
  n->op = op;
  n->inputs[0] = a;
  n->inputs[1] = b;
  n->n_inputs = b >= 0 ? 2 : 1;
  for (int32_t i = 2; i < KILN_MAX_NODE_INPUTS; ++i) n->inputs[i] = -1;
}

int kiln_simplify_match_pattern(const kiln_graph_t* g, kiln_node_t* nodes, const int32_t* uses,
                                kiln_node_t* n) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  if (y->dtype != KILN_F32 || n->n_inputs != 2) return 0;
  int32_t x;
  double eps;
  kiln_op_t op = 0;
  if (n->op == KILN_OP_MUL) op = kiln_pat_gelu(g, nodes, n, &x);
  if (op && kiln_value_same_type(&g->values[x], y)) {
    kiln_pat_set(n, op, x, -1);
    memset(n->params, 0, sizeof(n->params));
    memset(n->fparams, 0, sizeof(n->fparams));
    return 1;
  }
  if (n->op == KILN_OP_MUL) {
    for (int side = 0; side < 2; ++side) {
      int32_t s;
      if (kiln_pat_unary(g, nodes, n->inputs[1 - side], KILN_OP_SIGMOID, &s) &&
          s == n->inputs[side] && kiln_value_same_type(&g->values[s], y)) {
        kiln_pat_set(n, KILN_OP_SILU, s, -1);
        memset(n->params, 0, sizeof(n->params));
        memset(n->fparams, 0, sizeof(n->fparams));
        return 1;
      }
    }
  }
  /* Before RMSNorm: a layer norm is an RMSNorm of x - mean(x). */
  if ((n->op == KILN_OP_MUL || n->op == KILN_OP_DIV) && kiln_pat_ln_core(g, nodes, uses, n, &x, &eps) &&
      kiln_value_same_type(&g->values[x], y)) {
    kiln_pat_set(n, KILN_OP_LAYER_NORM, x, -1);
    memset(n->params, 0, sizeof(n->params));
    memset(n->fparams, 0, sizeof(n->fparams));
    n->params[KILN_P(NORM, DIMS)] = 1;
    n->fparams[KILN_FP(NORM, EPS)] = (float)eps;
    return 1;
  }
  if ((n->op == KILN_OP_MUL || n->op == KILN_OP_DIV) && kiln_pat_rms_core(g, nodes, uses, n, &x, &eps) &&
      kiln_value_same_type(&g->values[x], y)) {
    kiln_pat_set(n, KILN_OP_RMS_NORM, x, -1);
    memset(n->params, 0, sizeof(n->params));
    memset(n->fparams, 0, sizeof(n->fparams));
    n->params[KILN_P(NORM, DIMS)] = 1;
    n->fparams[KILN_FP(NORM, EPS)] = (float)eps;
    return 1;
  }
  /* layer_norm(x) · w, then layer_norm(x, w) + b, with w and b of the
   * normalised dim's length: its gamma and beta. */
  for (int side = 0; side < 2 && (n->op == KILN_OP_MUL || n->op == KILN_OP_ADD); ++side) {
    const kiln_node_t* norm = kiln_pat_producer(g, nodes, n->inputs[1 - side]);
    const kiln_value_t* w = &g->values[n->inputs[side]];
    int want_inputs = n->op == KILN_OP_MUL ? 1 : 2;
    if (!norm || norm->op != KILN_OP_LAYER_NORM || norm->n_inputs != want_inputs ||
        norm->params[KILN_P(NORM, DIMS)] != 1 || (want_inputs == 2 && norm->inputs[1] < 0))
      continue;
    const kiln_value_t* nx = &g->values[norm->inputs[0]];
    if (w->dtype != KILN_F32 || w->rank != 1 || nx->rank < 1 ||
        w->shape[0] != nx->shape[nx->rank - 1] || !kiln_value_same_type(nx, y))
      continue;
    int32_t xin = norm->inputs[0], gamma = want_inputs == 2 ? norm->inputs[1] : n->inputs[side];
    int32_t beta = want_inputs == 2 ? n->inputs[side] : -1;
    float eps_f = norm->fparams[KILN_FP(NORM, EPS)];
    kiln_pat_set(n, KILN_OP_LAYER_NORM, xin, gamma);
    if (beta >= 0) {
      n->inputs[2] = beta;
      n->n_inputs = 3;
    }
    memset(n->params, 0, sizeof(n->params));
    memset(n->fparams, 0, sizeof(n->fparams));
    n->params[KILN_P(NORM, DIMS)] = 1;
    n->fparams[KILN_FP(NORM, EPS)] = eps_f;
    return 1;
  }
  /* w · rms_norm(x) with w of the normalised dim's length: the norm's gamma. */
  if (n->op == KILN_OP_MUL) {
    for (int side = 0; side < 2; ++side) {
      const kiln_node_t* norm = kiln_pat_producer(g, nodes, n->inputs[1 - side]);
      const kiln_value_t* w = &g->values[n->inputs[side]];
      if (!norm || norm->op != KILN_OP_RMS_NORM || norm->n_inputs != 1 ||
          norm->params[KILN_P(NORM, DIMS)] != 1)
        continue;
      const kiln_value_t* nx = &g->values[norm->inputs[0]];
      if (w->dtype != KILN_F32 || w->rank != 1 || w->shape[0] != nx->shape[nx->rank - 1] ||
          !kiln_value_same_type(nx, y))
        continue;
      int64_t params[KILN_MAX_PARAMS];
      float fparams[KILN_MAX_FPARAMS];
      memcpy(params, norm->params, sizeof(params));
      memcpy(fparams, norm->fparams, sizeof(fparams));
      kiln_pat_set(n, KILN_OP_RMS_NORM, norm->inputs[0], n->inputs[side]);
      memcpy(n->params, params, sizeof(params));
      memcpy(n->fparams, fparams, sizeof(fparams));
      return 1;
    }
  }
  return 0;
}
