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

kiln_status_t kiln_graph_sym_sites(const kiln_graph_t* g, kiln_graph_sym_sites_t* out) {
  memset(out, 0, sizeof(*out));
  int32_t n_dims = 0, n_params = 0, n_values = 0, n_nodes = 0;
  for (int32_t v = 0; v < g->n_values; ++v) {
    int any = 0;
    for (int32_t d = 0; d < g->values[v].rank; ++d)
      if (kiln_dim_is_sym(g->values[v].shape[d])) ++n_dims, any = 1;
    n_values += any;
  }
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i) n_params += kiln_dim_is_sym(g->nodes[ni].params[i]);
    n_nodes += kiln_node_is_symbolic(g, &g->nodes[ni]);
  }
  out->dims = malloc(sizeof(kiln_graph_sym_site_t) * (size_t)(n_dims + 1));
  out->params = malloc(sizeof(kiln_graph_sym_site_t) * (size_t)(n_params + 1));
  out->values = malloc(sizeof(int32_t) * (size_t)(n_values + 1));
  out->nodes = malloc(sizeof(int32_t) * (size_t)(n_nodes + 1));
  if (!out->dims || !out->params || !out->values || !out->nodes) {
    kiln_graph_sym_sites_free(out);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "symbolic sites");
  }
  for (int32_t v = 0; v < g->n_values; ++v) {
    const kiln_value_t* x = &g->values[v];
    for (int32_t d = 0; d < x->rank; ++d) {
      if (!kiln_dim_is_sym(x->shape[d])) continue;
      if (!g->syms || !kiln_sym_dim_valid(g->syms, x->shape[d])) {
        kiln_graph_sym_sites_free(out);
        return kiln_status_make(KILN_INVALID_ARGUMENT, "value %d: unknown symbolic size %d", v,
                                kiln_dim_sym_id(x->shape[d]));
      }
      kiln_graph_sym_site_t site = {v, d, kiln_dim_sym_id(x->shape[d])};
      out->dims[out->n_dims++] = site;
    }
    if (kiln_value_is_symbolic(x)) out->values[out->n_values++] = v;
  }
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i) {
      if (!kiln_dim_is_sym(n->params[i])) continue;
      if (!g->syms || !kiln_sym_dim_valid(g->syms, n->params[i])) {
        kiln_graph_sym_sites_free(out);
        return kiln_status_make(KILN_INVALID_ARGUMENT, "node %d: unknown symbolic size %d", ni,
                                kiln_dim_sym_id(n->params[i]));
      }
      kiln_graph_sym_site_t site = {ni, i, kiln_dim_sym_id(n->params[i])};
      out->params[out->n_params++] = site;
    }
    if (kiln_node_is_symbolic(g, n)) out->nodes[out->n_nodes++] = ni;
  }
  return kiln_ok();
}

void kiln_graph_sym_sites_free(kiln_graph_sym_sites_t* s) {
  free(s->dims);
  free(s->params);
  free(s->values);
  free(s->nodes);
  memset(s, 0, sizeof(*s));
}

/* A size past 2^40 (or negative) is an error, not an allocation. */
static kiln_status_t check_dim(int32_t v, int32_t d, int64_t size) {
  if (size >= 0 && size <= ((int64_t)1 << 40)) return kiln_ok();
  return kiln_status_make(KILN_INVALID_ARGUMENT, "value %d: dimension %d is %lld", v, d,
                          (long long)size);
}

/* Node ni's rule again on the instance's sizes, checked against the
 * substituted output. */
static kiln_status_t check_node(const kiln_graph_t* g, const kiln_graph_t* c, int32_t ni) {
  const kiln_node_t* n = &c->nodes[ni];
  kiln_value_t want;
  kiln_status_t s = kiln_shape_infer_concrete(c, n, &want);
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
  return s;
}

kiln_status_t kiln_graph_instance_bind(const kiln_graph_t* g, const int64_t* values,
                                       const kiln_graph_sym_sites_t* sites, kiln_graph_t* c) {
  kiln_status_t s = kiln_ok();
  /* Every rule again on the real sizes: the checks a kernel relies on, and
   * the sizes the symbolic graph derived at the probes. A node with no
   * symbolic size gives the same answer for every binding: checked once,
   * by the full bind that made the instance. */
  if (sites) {
    for (int32_t i = 0; !s && i < sites->n_dims; ++i) {
      const kiln_graph_sym_site_t* x = &sites->dims[i];
      c->values[x->item].shape[x->index] = values[x->expr];
      s = check_dim(x->item, x->index, values[x->expr]);
    }
    for (int32_t i = 0; i < sites->n_params; ++i) {
      const kiln_graph_sym_site_t* x = &sites->params[i];
      c->nodes[x->item].params[x->index] = values[x->expr];
    }
    for (int32_t i = 0; !s && i < sites->n_nodes; ++i) s = check_node(g, c, sites->nodes[i]);
    return s;
  }
  for (int32_t v = 0; !s && v < c->n_values; ++v) {
    kiln_value_t* x = &c->values[v];
    memcpy(x->shape, g->values[v].shape, sizeof(x->shape));
    s = substitute(g->syms, values, x->shape, x->rank);
    for (int32_t d = 0; !s && d < x->rank; ++d) s = check_dim(v, d, x->shape[d]);
  }
  for (int32_t ni = 0; !s && ni < c->n_nodes; ++ni) {
    memcpy(c->nodes[ni].params, g->nodes[ni].params, sizeof(c->nodes[ni].params));
    s = substitute(g->syms, values, c->nodes[ni].params, KILN_MAX_PARAMS);
  }
  for (int32_t ni = 0; !s && ni < c->n_nodes; ++ni) s = check_node(g, c, ni);
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
