/* A concrete instance of a symbolic graph for one binding of its symbols
 * (kiln_graph.h): what the runtime plans and runs for a call's sizes. */
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_shape_common.h"

static kiln_status_t substitute(const kiln_sym_table_t* t, const int64_t* values, int64_t* dims,
                                int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    if (!kiln_dim_is_sym(dims[i])) continue;
    if (!kiln_sym_dim_valid(t, dims[i]))
      return kiln_status_make(KILN_INVALID_ARGUMENT, "unknown symbolic size %d",
                              kiln_dim_sym_id(dims[i]));
    dims[i] = values[kiln_dim_sym_id(dims[i])];
  }
  return kiln_ok();
}

kiln_status_t kiln_graph_instance_bind(const kiln_graph_t* g, const int64_t* values,
                                       const unsigned char* symbolic_node, kiln_graph_t* c) {
  kiln_status_t s = kiln_ok();
  for (int32_t v = 0; !s && v < c->n_values; ++v) {
    const kiln_value_t* from = &g->values[v];
    if (symbolic_node && !kiln_value_is_symbolic(from)) continue;
    kiln_value_t* x = &c->values[v];
    memcpy(x->shape, from->shape, sizeof(x->shape));
    s = substitute(g->syms, values, x->shape, x->rank);
    for (int32_t d = 0; !s && d < x->rank; ++d)
      if (x->shape[d] < 0 || x->shape[d] > ((int64_t)1 << 40))
        s = kiln_status_make(KILN_INVALID_ARGUMENT, "value %d: dimension %d is %lld", v, d,
                             (long long)x->shape[d]);
  }
  for (int32_t ni = 0; !s && ni < c->n_nodes; ++ni) {
    if (symbolic_node && !symbolic_node[ni]) continue;
    memcpy(c->nodes[ni].params, g->nodes[ni].params, sizeof(c->nodes[ni].params));
    s = substitute(g->syms, values, c->nodes[ni].params, KILN_MAX_PARAMS);
  }
  /* Every rule again on the real sizes: the checks a kernel relies on, and
   * the sizes the symbolic graph derived at the probes. A node with no
   * symbolic size gives the same answer for every binding: checked once. */
  for (int32_t ni = 0; !s && ni < c->n_nodes; ++ni) {
    if (symbolic_node && !symbolic_node[ni]) continue;
    const kiln_node_t* n = &c->nodes[ni];
    kiln_value_t want;
    s = kiln_shape_infer_concrete(c, n, &want);
    const kiln_value_t* got = &c->values[n->outputs[0]];
    if (!s && !kiln_value_same_type(&want, got)) {
      char a[128], b[128];
      s = kiln_status_make(KILN_INVALID_ARGUMENT, "the call's sizes give %s where the graph has %s",
                           kiln_value_describe(&want, a, sizeof a),
                           kiln_graph_describe_value(g, &g->values[n->outputs[0]], b, sizeof b));
    }
    if (s)
      s = kiln_status_annotate(s, "node %d (%s%s%s)", ni, kiln_op_name(n->op),
                               n->origin ? " from " : "", n->origin ? n->origin : "");
  }
  return s;
}

kiln_status_t kiln_graph_instantiate(const kiln_graph_t* g, const int64_t* values,
                                     kiln_graph_t** out_graph) {
  *out_graph = NULL;
  kiln_graph_t* c = calloc(1, sizeof(*c));
  if (!c) return kiln_status_make(KILN_OUT_OF_MEMORY, "graph instance");
  c->allocator = g->allocator;
  c->borrowed = 1;
  c->values = malloc(sizeof(kiln_value_t) * (size_t)(g->n_values + 1));
  c->nodes = malloc(sizeof(kiln_node_t) * (size_t)(g->n_nodes + 1));
  c->inputs = malloc(sizeof(int32_t) * (size_t)(g->n_inputs + 1));
  c->outputs = malloc(sizeof(int32_t) * (size_t)(g->n_outputs + 1));
  if (!c->values || !c->nodes || !c->inputs || !c->outputs) {
    kiln_graph_release(c);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "graph instance");
  }
  memcpy(c->values, g->values, sizeof(kiln_value_t) * (size_t)g->n_values);
  memcpy(c->nodes, g->nodes, sizeof(kiln_node_t) * (size_t)g->n_nodes);
  memcpy(c->inputs, g->inputs, sizeof(int32_t) * (size_t)g->n_inputs);
  memcpy(c->outputs, g->outputs, sizeof(int32_t) * (size_t)g->n_outputs);
  c->n_values = c->cap_values = g->n_values;
  c->n_nodes = c->cap_nodes = g->n_nodes;
  c->n_inputs = c->cap_inputs = g->n_inputs;
  c->n_outputs = g->n_outputs;
  kiln_status_t s = kiln_graph_instance_bind(g, values, NULL, c);
  if (s) {
    kiln_graph_release(c);
    return s;
  }
  *out_graph = c;
  return kiln_ok();
}
