/* Shape inference over symbolic sizes without a symbolic variant of each
 * rule: the concrete rule runs at the table's two probe bindings (every
 * symbol given a value, every expression evaluated) and each output size is
 * mapped back to the expression that has its two probe values: one of the
 * node's input dims or params (a reshape's target, a view's sizes), or for
 * a concatenation the sum along its axis (a pad: the size plus its pads; a
 * convolution or pooling: its window's output size). A size equal at both probes is a
 * number. Whatever this derives is checked again, on real sizes, by the
 * instance each call runs (kiln_graph_instantiate), so a mapping the probes
 * got wrong is an error there, never a wrong result. */
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_shape_common.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* A candidate matches when it has the output size's value at both probes
 * and, where both are known, at the example (v[2]): two symbols whose
 * ranges clamp their probes alike are told apart there (seed 6161 graph
 * 2666: a matmul's (s0, s1, 3) from two index dims with equal probes). */
static int matches(const kiln_sym_table_t* t, int64_t cand, const int64_t v[3]) {
  if (!kiln_dim_is_sym(cand) || kiln_sym_probe(t, cand, 0) != v[0] ||
      kiln_sym_probe(t, cand, 1) != v[1])
    return 0;
  int64_t e = kiln_sym_example(t, cand);
  return v[2] == KILN_SYM_NO_EXAMPLE || e == KILN_SYM_NO_EXAMPLE || e == v[2];
}

/* Whether symbolic size a is preferred to b (derive_dim). */
static int sym_preferred(const kiln_sym_table_t* t, int64_t a, int64_t b) {
  int va = t->exprs[kiln_dim_sym_id(a)].kind == KILN_SYM_VAR;
  int vb = t->exprs[kiln_dim_sym_id(b)].kind == KILN_SYM_VAR;
  return va != vb ? va : kiln_dim_sym_id(a) < kiln_dim_sym_id(b);
}

/* A sliding window's geometry along output dim d of a convolution or
 * pooling node: the input's size there, kernel, stride, padding, dilation,
 * ceil mode (pooling's); 0 when d is not a spatial dim of such a node. */
static int window_of(const kiln_graph_t* g, const kiln_node_t* n, int32_t d, int64_t* size,
                     int64_t* kernel, int64_t* stride, int64_t* pad, int64_t* dilation, int* ceil) {
  const int64_t* p = n->params;
  int nhwc = n->op == KILN_OP_CONV2D_NHWC || n->op == KILN_OP_MAX_POOL2D_NHWC;
  int32_t i = d - (nhwc ? 1 : 2); /* 0: height, 1: width */
  if (i < 0 || i > 1 || n->n_inputs < 1 || n->inputs[0] < 0) return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  if (x->rank != 4) return 0;
  int x_nchw = n->op == KILN_OP_CONV2D_NHWC && p[KILN_P(CONV2D_NHWC, X_NCHW)] == 1;
  *size = x->shape[(nhwc && !x_nchw ? 1 : 2) + i];
  *ceil = 0;
  switch (n->op) {
    case KILN_OP_CONV2D:
    case KILN_OP_CONV2D_NHWC: {
      if (n->n_inputs < 2 || n->inputs[1] < 0 || g->values[n->inputs[1]].rank != 4) return 0;
      *kernel = g->values[n->inputs[1]].shape[2 + i];
      *stride = p[KILN_P(CONV2D, STRIDE_H) + i];
      *pad = p[KILN_P(CONV2D, PAD_H) + i];
      *dilation = p[KILN_P(CONV2D, DILATION_H) + i];
      return 1;
    }
    case KILN_OP_MAX_POOL2D:
    case KILN_OP_AVG_POOL2D:
    case KILN_OP_MAX_POOL2D_INDICES:
    case KILN_OP_MAX_POOL2D_NHWC:
      *ceil = p[KILN_P(POOL2D, CEIL_MODE)] != 0;
      *kernel = p[KILN_P(POOL2D, KERNEL_H) + i];
      *stride = p[KILN_P(POOL2D, STRIDE_H) + i];
      *pad = p[KILN_P(POOL2D, PAD_H) + i];
      *dilation = p[KILN_P(POOL2D, DILATION_H) + i];
      return 1;
    default:
      return 0;
  }
}

/* The window's output size (size + 2 pad - dilation (kernel - 1) - 1) //
 * stride + 1 as an expression, or 0 when it is none (bad geometry). The
 * size, and a convolution's kernel (a weight that is an input of symbolic
 * size: fuzz seed 20088 graph 2022), may be symbolic; stride, padding and
 * dilation are numbers. In ceil mode the division rounds up, and torch
 * drops a last window that would start in the right padding: that never
 * happens when pad + stride <= the dilated kernel's span (the last start is
 * below size + pad), the usual geometry (3 by 2, padding 1); other
 * ceil-mode windows, and ceil mode over a symbolic kernel, are no
 * expression of kiln's (0). */
static int64_t window_dim(kiln_sym_table_t* t, int64_t size, int64_t kernel, int64_t stride,
                          int64_t pad, int64_t dilation, int ceil) {
  const int64_t big = (int64_t)1 << 20;
  int sym_kernel = kiln_dim_is_sym(kernel);
  if ((!sym_kernel && (kernel < 1 || kernel > big)) || (sym_kernel && ceil) || stride < 1 ||
      pad < 0 || dilation < 1 || stride > big || pad > big || dilation > big)
    return 0;
  int64_t a = 0, q = 0, y = 0;
  kiln_status_t s;
  if (!sym_kernel) {
    int64_t span = dilation * (kernel - 1) + 1;
    if (ceil && pad + stride > span) return 0;
    s = kiln_dim_add(t, size, 2 * pad - span + (ceil ? stride - 1 : 0), &a);
  } else {
    /* size - dilation kernel + 2 pad + dilation - 1 */
    s = kiln_dim_mul(t, kernel, -dilation, &a);
    if (!s) s = kiln_dim_add(t, size, a, &a);
    if (!s) s = kiln_dim_add(t, a, 2 * pad + dilation - 1, &a);
  }
  if (!s) s = kiln_dim_floordiv(t, a, stride, &q);
  if (!s) s = kiln_dim_add(t, q, 1, &y);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  return y;
}

/* Among the inputs' symbolic dims, the one matching v chosen by what it is
 * (derive_dim), or 0. With aligned set, only the dims aligned with output
 * dim d of a rank-r output from the right (as broadcasting aligns them):
 * an image's height and width expressions can have the same values at the
 * probes and at the example (a square example), and an elementwise op's
 * width is its inputs' width. */
static int64_t input_dim_match(const kiln_graph_t* g, const kiln_node_t* n, const int64_t v[3],
                               int aligned, int32_t d, int32_t r) {
  int64_t best = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    if (n->inputs[i] < 0) continue;
    const kiln_value_t* x = &g->values[n->inputs[i]];
    for (int32_t k = 0; k < x->rank; ++k)
      if ((!aligned || k == d - (r - x->rank)) && matches(g->syms, x->shape[k], v) &&
          (!best || sym_preferred(g->syms, x->shape[k], best)))
        best = x->shape[k];
  }
  return best;
}

static kiln_status_t derive_dim(const kiln_graph_t* g, const kiln_node_t* n, int32_t d,
                                int32_t rank, const int64_t v[3], int64_t* out) {
  kiln_sym_table_t* t = g->syms;
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i)
    if (matches(t, n->params[i], v)) return (*out = n->params[i]), kiln_ok();
  /* Among the inputs' dims, one matching expression chosen by what it is,
   * not by where it was found: two sizes a guard makes equal (a broadcast
   * of s0 against (s1 - 1) // 2 + 1) both match, and the choice must not
   * depend on the inputs' order, which fusion changes (fuzzer finding 22:
   * an elementwise group whose inferred shape differed from its chain's).
   * A bare symbol first (an input's own size, which a call binds), then
   * the lowest id. */
  int64_t best = input_dim_match(g, n, v, 1, d, rank);
  if (!best) best = input_dim_match(g, n, v, 0, d, 0);
  if (best) return (*out = best), kiln_ok();
  if (n->op == KILN_OP_CAT) {
    int64_t axis = n->params[KILN_P(AXIS, AXIS)], sum = 0;
    for (int32_t i = 0; i < n->n_inputs; ++i)
      KILN_RETURN_IF_ERROR(kiln_dim_add(t, sum, g->values[n->inputs[i]].shape[axis], &sum));
    if (matches(t, sum, v)) return (*out = sum), kiln_ok();
  }
  if (n->op == KILN_OP_PAD && n->n_inputs >= 1 && n->inputs[0] >= 0 &&
      d < g->values[n->inputs[0]].rank) {
    /* the size plus its symbolic pads (a mask padded to the cache's length) */
    int64_t size = 0;
    KILN_RETURN_IF_ERROR(kiln_dim_add(t, g->values[n->inputs[0]].shape[d],
                                      n->params[KILN_P(PAD, BEFORE) + d], &size));
    KILN_RETURN_IF_ERROR(kiln_dim_add(t, size, n->params[KILN_P(PAD, AFTER) + d], &size));
    if (matches(t, size, v)) return (*out = size), kiln_ok();
  }
  FAIL("%s: output dimension %d depends on symbolic sizes in a way kiln cannot express yet",
       kiln_op_name(n->op), d);
}

/* A size at binding p: probe 0 or 1, or (p == 2) the example, where
 * KILN_SYM_NO_EXAMPLE is possible. */
static int64_t at(const kiln_sym_table_t* t, int64_t d, int p) {
  return p < 2 ? kiln_sym_probe(t, d, p) : kiln_sym_example(t, d);
}

/* The concrete rule on node n over its inputs alone, every size at binding
 * p; *missing set (and nothing run) when a size has no example value. */
static kiln_status_t infer_at(const kiln_graph_t* g, const kiln_node_t* n, int p,
                              kiln_value_t* out, int* missing) {
  kiln_value_t in[KILN_MAX_NODE_INPUTS];
  kiln_node_t pn = *n;
  *missing = 0;
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i)
    if ((pn.params[i] = at(g->syms, n->params[i], p)) == KILN_SYM_NO_EXAMPLE) *missing = 1;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    if (n->inputs[i] < -1 || n->inputs[i] >= g->n_values) FAIL("input %d does not exist", i);
    pn.inputs[i] = n->inputs[i] < 0 ? -1 : i;
    if (n->inputs[i] < 0) continue;
    in[i] = g->values[n->inputs[i]];
    for (int32_t k = 0; k < in[i].rank && k < KILN_MAX_RANK; ++k)
      if ((in[i].shape[k] = at(g->syms, in[i].shape[k], p)) == KILN_SYM_NO_EXAMPLE) *missing = 1;
  }
  /* (A probe's size is never missing: kiln_graph_infer_node and the
   * values' checks refuse one invalid there, KILN_SYM_NO_PROBE.) */
  if (*missing && p < 2) FAIL("%s: a symbolic size invalid at probe %d", kiln_op_name(n->op), p);
  if (*missing) return kiln_ok();
  kiln_graph_t pg;
  memset(&pg, 0, sizeof(pg));
  pg.values = in;
  pg.n_values = n->n_inputs;
  return kiln_shape_infer_concrete(&pg, &pn, out);
}

/* The derived sizes against the concrete rule at the example (which the
 * traced program ran at): the two probes may agree on a number that an
 * expression is not there (max_pool of s in [33, 40] by 3: (s - 3)//3 + 1
 * is 13 at both probes, 11 at 33), or map a size back to the wrong
 * expression. Such a node is refused (its op runs in eager) rather than
 * made into a graph that refuses the very sizes it was traced at. */
static kiln_status_t check_example(const kiln_graph_t* g, const kiln_node_t* n,
                                   const kiln_value_t* out) {
  kiln_value_t ex;
  int missing;
  kiln_status_t s = infer_at(g, n, 2, &ex, &missing);
  if (missing) return kiln_ok();
  if (s) return kiln_status_annotate(s, "%s at the example's sizes", kiln_op_name(n->op));
  if (ex.rank != out->rank) FAIL("%s: the output's rank differs at the example's sizes", kiln_op_name(n->op));
  for (int32_t d = 0; d < out->rank; ++d) {
    int64_t mine = kiln_sym_example(g->syms, out->shape[d]);
    if (mine == KILN_SYM_NO_EXAMPLE || mine == ex.shape[d]) continue;
    char buf[128];
    if (!kiln_dim_is_sym(out->shape[d]))
      FAIL("%s: output dimension %d is %lld at the example's sizes, where both probes gave %lld: "
           "it depends on symbolic sizes in a way kiln cannot express yet",
           kiln_op_name(n->op), d, (long long)ex.shape[d], (long long)mine);
    FAIL("%s: output dimension %d is %lld at the example's sizes, where kiln's %s is %lld: it "
         "depends on symbolic sizes in a way kiln cannot express yet", kiln_op_name(n->op), d,
         (long long)ex.shape[d], kiln_sym_describe(g->syms, out->shape[d], buf, sizeof buf),
         (long long)mine);
  }
  return kiln_ok();
}

kiln_status_t kiln_graph_infer_node(const kiln_graph_t* g, const kiln_node_t* n,
                                    kiln_value_t* out) {
  if (!kiln_node_is_symbolic(g, n)) return kiln_shape_infer_concrete(g, n, out);
  memset(out, 0, sizeof(*out));
  if (!g->syms) FAIL("a symbolic size in a graph without symbols");
  if (n->n_inputs < 0 || n->n_inputs > KILN_MAX_NODE_INPUTS) FAIL("bad input count");
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i) {
    if (!kiln_sym_dim_valid(g->syms, n->params[i])) FAIL("param %d names an unknown symbolic size", i);
    if (!kiln_sym_probed(g->syms, n->params[i]))
      FAIL("%s: param %d is a symbolic size invalid at the probe sizes kiln derives shapes at",
           kiln_op_name(n->op), i);
  }
  kiln_value_t probe_out[2];
  for (int p = 0; p < 2; ++p) {
    int missing;
    KILN_RETURN_IF_ERROR(infer_at(g, n, p, &probe_out[p], &missing));
  }
  if (probe_out[0].rank != probe_out[1].rank || probe_out[0].dtype != probe_out[1].dtype)
    FAIL("%s: the output's rank or dtype depends on symbolic sizes", kiln_op_name(n->op));
  *out = probe_out[0];
  if (n->op == KILN_OP_RESHAPE || n->op == KILN_OP_STRIDED_COPY) {
    /* Their output dims are their DIMS params by definition (the rules set
     * them so, and the artifact reader checks it): taken as they are, not
     * from the probes, which may agree on a number an expression is not
     * (torch's (-s)//2 + 22 for a slice [-10:33:2] is 2 at both probes of a
     * range [33, 40], and 5 at 33; fuzzer finding 14). */
    _Static_assert(KILN_P(RESHAPE, DIMS) == KILN_P(VIEW, DIMS), "reshape and view share dims");
    for (int32_t d = 0; d < out->rank; ++d) out->shape[d] = n->params[KILN_P(VIEW, DIMS) + d];
  } else if (n->op == KILN_OP_STRIDED_SCATTER) {
    /* Its base (input 0) with src written through the view: the base's
     * sizes by definition. Its params are the view's, and one may have a
     * base size's values at both probes and the example: a diagonal's
     * length min(s1, s2 - 1) of a (3, 4, 6) example, taken for the base's
     * s1, refused the next call's (4, 7, 5). */
    if (n->inputs[0] < 0 || g->values[n->inputs[0]].rank != out->rank)
      FAIL("strided_scatter: the output's rank is not its base's");
    for (int32_t d = 0; d < out->rank; ++d) out->shape[d] = g->values[n->inputs[0]].shape[d];
  } else {
    /* The example's sizes, where every size has one and the rule runs
     * there (else check_example reports it): they pick between candidates
     * the probes cannot tell apart. */
    kiln_value_t ex;
    int missing = 1;
    kiln_status_t es = infer_at(g, n, 2, &ex, &missing);
    int have_ex = !es && !missing && ex.rank == out->rank;
    kiln_status_free(es);
    for (int32_t d = 0; d < out->rank; ++d) {
      const int64_t v[3] = {probe_out[0].shape[d], probe_out[1].shape[d],
                            have_ex ? ex.shape[d] : KILN_SYM_NO_EXAMPLE};
      /* A window over a symbolic size is its expression even where the
       * probes agree on a number (after four stride-2 layers, 64 and 72
       * are both 3; 224 is 7: ResNet's layer4 with dynamic image sizes). */
      int64_t size, kernel, stride, pad, dilation, y;
      int ceil;
      if (window_of(g, n, d, &size, &kernel, &stride, &pad, &dilation, &ceil) &&
          (kiln_dim_is_sym(size) || kiln_dim_is_sym(kernel)) &&
          (y = window_dim(g->syms, size, kernel, stride, pad, dilation, ceil)) != 0 &&
          matches(g->syms, y, v)) {
        out->shape[d] = y;
        continue;
      }
      /* Likewise a concatenation of symbolic sizes is their sum: two
       * windows' (s - 5) // 2 + 1 each, 2 at both probes, made the sum a
       * number 4 (fuzz seed 20123 graph 14006: refused at other sizes). */
      if (n->op == KILN_OP_CAT && d == n->params[KILN_P(AXIS, AXIS)]) {
        int64_t sum = 0;
        int any_sym = 0;
        for (int32_t i = 0; i < n->n_inputs; ++i) {
          any_sym |= kiln_dim_is_sym(g->values[n->inputs[i]].shape[d]);
          KILN_RETURN_IF_ERROR(kiln_dim_add(g->syms, sum, g->values[n->inputs[i]].shape[d], &sum));
        }
        if (any_sym && matches(g->syms, sum, v)) {
          out->shape[d] = sum;
          continue;
        }
      }
      if (v[0] == v[1]) {
        /* A number, unless an input's symbolic size has these values (and
         * the example's): the probes of an expression can agree (a size
         * divided by 32), and an op keeping its input's size keeps its
         * expression (the batch norm and ReLU after ResNet's layer4 conv). */
        int64_t same = input_dim_match(g, n, v, 1, d, out->rank);
        /* Where the example shows the number wrong, an input's dim of any
         * position with all three values: a matmul's N from a transposed B
         * is B's dim -2, not aligned with it (bmm(x, x^T) of an x whose
         * guards give s1 one value at both probes: fuzz seed 20117 graph
         * 9486, refused in the simplify pass that absorbed the transpose). */
        if (!same && v[2] != KILN_SYM_NO_EXAMPLE && v[2] != v[0]) same = input_dim_match(g, n, v, 0, d, 0);
        if (same) out->shape[d] = same;
        continue;
      }
      KILN_RETURN_IF_ERROR(derive_dim(g, n, d, out->rank, v, &out->shape[d]));
    }
  }
  return check_example(g, n, out);
}
