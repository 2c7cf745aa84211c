/* Shape inference over symbolic sizes without a symbolic variant of each
 * rule: the concrete rule runs at the table's two probe bindings (every
 * symbol given a value, every expression evaluated) and each output size is
 * mapped back to the expression that has its two probe values: one of the
 * node's input dims or params (a reshape's target, a view's sizes), or for
 * a concatenation the sum along its axis. A size equal at both probes is a
 * number. Whatever this derives is checked again, on real sizes, by the
 * instance each call runs (kiln_graph_instantiate), so a mapping the probes
 * got wrong is an error there, never a wrong result. */
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_shape_common.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* A candidate matches when it has the output size's value at both probes. */
static int matches(const kiln_sym_table_t* t, int64_t cand, const int64_t v[2]) {
  return kiln_dim_is_sym(cand) && kiln_sym_probe(t, cand, 0) == v[0] &&
         kiln_sym_probe(t, cand, 1) == v[1];
}

static kiln_status_t derive_dim(const kiln_graph_t* g, const kiln_node_t* n, int32_t d,
                                const int64_t v[2], int64_t* out) {
  kiln_sym_table_t* t = g->syms;
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i)
    if (matches(t, n->params[i], v)) return (*out = n->params[i]), kiln_ok();
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    if (n->inputs[i] < 0) continue;
    const kiln_value_t* x = &g->values[n->inputs[i]];
    for (int32_t k = 0; k < x->rank; ++k)
      if (matches(t, x->shape[k], v)) return (*out = x->shape[k]), kiln_ok();
  }
  if (n->op == KILN_OP_CAT) {
    int64_t axis = n->params[KILN_P(AXIS, AXIS)], sum = 0;
    for (int32_t i = 0; i < n->n_inputs; ++i)
      KILN_RETURN_IF_ERROR(kiln_dim_add(t, sum, g->values[n->inputs[i]].shape[axis], &sum));
    if (matches(t, sum, v)) return (*out = sum), kiln_ok();
  }
  FAIL("%s: output dimension %d depends on symbolic sizes in a way kiln cannot express yet",
       kiln_op_name(n->op), d);
}

kiln_status_t kiln_graph_infer_node(const kiln_graph_t* g, const kiln_node_t* n,
                                    kiln_value_t* out) {
  if (!kiln_node_is_symbolic(g, n)) return kiln_shape_infer_concrete(g, n, out);
  memset(out, 0, sizeof(*out));
  if (!g->syms) FAIL("a symbolic size in a graph without symbols");
  if (n->n_inputs < 0 || n->n_inputs > KILN_MAX_NODE_INPUTS) FAIL("bad input count");
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i)
    if (!kiln_sym_dim_valid(g->syms, n->params[i])) FAIL("param %d names an unknown symbolic size", i);
  kiln_value_t probe_in[KILN_MAX_NODE_INPUTS], probe_out[2];
  for (int p = 0; p < 2; ++p) {
    /* The node over its inputs alone, every size at probe p. */
    kiln_node_t pn = *n;
    for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i) pn.params[i] = kiln_sym_probe(g->syms, n->params[i], p);
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      if (n->inputs[i] < -1 || n->inputs[i] >= g->n_values) FAIL("input %d does not exist", i);
      pn.inputs[i] = n->inputs[i] < 0 ? -1 : i;
      if (n->inputs[i] < 0) continue;
      probe_in[i] = g->values[n->inputs[i]];
      for (int32_t k = 0; k < probe_in[i].rank && k < KILN_MAX_RANK; ++k)
        probe_in[i].shape[k] = kiln_sym_probe(g->syms, probe_in[i].shape[k], p);
    }
    kiln_graph_t pg;
    memset(&pg, 0, sizeof(pg));
    pg.values = probe_in;
    pg.n_values = n->n_inputs;
    KILN_RETURN_IF_ERROR(kiln_shape_infer_concrete(&pg, &pn, &probe_out[p]));
  }
  if (probe_out[0].rank != probe_out[1].rank || probe_out[0].dtype != probe_out[1].dtype)
    FAIL("%s: the output's rank or dtype depends on symbolic sizes", kiln_op_name(n->op));
  *out = probe_out[0];
  for (int32_t d = 0; d < out->rank; ++d) {
    const int64_t v[2] = {probe_out[0].shape[d], probe_out[1].shape[d]};
    if (v[0] == v[1]) continue; /* a number */
    KILN_RETURN_IF_ERROR(derive_dim(g, n, d, v, &out->shape[d]));
  }
  return kiln_ok();
}
