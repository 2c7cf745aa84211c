/* The rewriter shared by every compiler pass. */
#include "compiler/kiln_rewrite.h"

#include "base/kiln_activation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

kiln_status_t kiln_rewriter_initialize(kiln_rewriter_t* rw, kiln_graph_t* src) {
  memset(rw, 0, sizeof(*rw));
  rw->src = src;
  rw->remap = malloc(sizeof(int32_t) * (size_t)(src->n_values + 1));
  if (!rw->remap) return kiln_status_make(KILN_OUT_OF_MEMORY, "rewriter");
  for (int32_t v = 0; v < src->n_values; ++v) rw->remap[v] = -1;
  kiln_status_t s = kiln_graph_create(src->allocator, &rw->dst);
  if (!s) rw->dst->syms = kiln_sym_table_retain(src->syms);
  for (int32_t i = 0; !s && i < src->n_inputs; ++i) {
    const kiln_value_t* v = &src->values[src->inputs[i]];
    s = kiln_graph_add_input(rw->dst, v->name, v->dtype, v->rank, v->shape,
                             &rw->remap[src->inputs[i]]);
  }
  if (s) kiln_rewriter_deinitialize(rw);
  return s;
}

void kiln_rewriter_deinitialize(kiln_rewriter_t* rw) {
  kiln_graph_release(rw->dst);
  free(rw->remap);
  memset(rw, 0, sizeof(*rw));
}

kiln_status_t kiln_rewriter_value(kiln_rewriter_t* rw, int32_t v, int32_t* out_id) {
  *out_id = -1;
  if (v < 0) return kiln_ok();
  if (rw->remap[v] >= 0) {
    *out_id = rw->remap[v];
    return kiln_ok();
  }
  kiln_value_t* val = &rw->src->values[v];
  if (val->kind != KILN_VALUE_CONSTANT)
    return kiln_status_make(KILN_INTERNAL, "value %d used before it was emitted", v);
  kiln_status_t s;
  if (val->owned_data) {
    /* Move the bytes: the old graph keeps `data` readable until released,
     * which later folding in the same pass may still need. */
    s = kiln_graph_add_constant_owned(rw->dst, val->name, val->dtype, val->rank, val->shape,
                                      val->layout, val->owned_data, val->nbytes, &rw->remap[v]);
    val->owned_data = NULL;
  } else {
    s = kiln_graph_add_constant_borrowed(rw->dst, val->name, val->dtype, val->rank, val->shape,
                                         val->layout, val->data, val->nbytes, &rw->remap[v]);
    /* A shared entry's reference moves with the bytes, as owned bytes do. */
    if (!s) {
      rw->dst->values[rw->remap[v]].shared = val->shared;
      val->shared = NULL;
    }
  }
  if (!s) rw->dst->values[rw->remap[v]].note = val->note;
  if (!s && val->key) s = kiln_graph_set_constant_key(rw->dst, rw->remap[v], val->key);
  *out_id = rw->remap[v];
  return s;
}

kiln_status_t kiln_rewriter_emit(kiln_rewriter_t* rw, kiln_op_t op, const int32_t* src_inputs,
                                 int32_t n_inputs, const int64_t* params, const float* fparams,
                                 const char* origin, int32_t result) {
  int32_t ins[KILN_MAX_NODE_INPUTS];
  for (int32_t i = 0; i < n_inputs; ++i)
    KILN_RETURN_IF_ERROR(kiln_rewriter_value(rw, src_inputs[i], &ins[i]));
  return kiln_graph_add_node(rw->dst, op, ins, n_inputs, params, KILN_MAX_PARAMS, fparams,
                             KILN_MAX_FPARAMS, origin, &rw->remap[result]);
}

kiln_status_t kiln_rewriter_copy_node(kiln_rewriter_t* rw, const kiln_node_t* n) {
  return kiln_rewriter_emit(rw, n->op, n->inputs, n->n_inputs, n->params, n->fparams, n->origin,
                            n->outputs[0]);
}

kiln_status_t kiln_rewriter_finish(kiln_rewriter_t* rw, kiln_graph_t** out_graph) {
  *out_graph = NULL;
  kiln_graph_t* src = rw->src;
  int32_t* outs = malloc(sizeof(int32_t) * (size_t)(src->n_outputs + 1));
  if (!outs) return kiln_status_make(KILN_OUT_OF_MEMORY, "outputs");
  kiln_status_t s = kiln_ok();
  for (int32_t o = 0; !s && o < src->n_outputs; ++o)
    s = kiln_rewriter_value(rw, src->outputs[o], &outs[o]);
  if (!s) s = kiln_graph_set_outputs(rw->dst, outs, src->n_outputs);
  free(outs);
  if (s) return s;
  *out_graph = rw->dst;
  rw->dst = NULL;
  return kiln_ok();
}

void kiln_graph_count_uses(const kiln_graph_t* g, int32_t* counts) {
  memset(counts, 0, sizeof(int32_t) * (size_t)g->n_values);
  for (int32_t ni = 0; ni < g->n_nodes; ++ni)
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i)
      if (g->nodes[ni].inputs[i] >= 0) counts[g->nodes[ni].inputs[i]]++;
  for (int32_t o = 0; o < g->n_outputs; ++o) counts[g->outputs[o]]++;
}

int kiln_op_as_activation(kiln_op_t op, int64_t* act) {
  switch (op) {
    case KILN_OP_RELU: *act = KILN_ACT_RELU; return 1;
    case KILN_OP_GELU: *act = KILN_ACT_GELU; return 1;
    case KILN_OP_GELU_TANH: *act = KILN_ACT_GELU_TANH; return 1;
    case KILN_OP_SILU: *act = KILN_ACT_SILU; return 1;
    case KILN_OP_SIGMOID: *act = KILN_ACT_SIGMOID; return 1;
    case KILN_OP_TANH: *act = KILN_ACT_TANH; return 1;
    default: return 0;
  }
}

int kiln_value_is_finite_constant(const kiln_value_t* v) {
  if (v->kind != KILN_VALUE_CONSTANT || v->dtype != KILN_F32 || v->layout != KILN_LAYOUT_DENSE ||
      !v->data)
    return 0;
  const float* d = v->data;
  const int64_t n = kiln_value_numel(v);
  for (int64_t i = 0; i < n; ++i)
    if (!isfinite(d[i])) return 0;
  return 1;
}

/* 1 when value id is a float32 scalar constant with k's bits. */
static int kiln_value_is_scalar(const kiln_graph_t* g, int32_t id, float k) {
  if (id < 0) return 0;
  const kiln_value_t* c = &g->values[id];
  if (c->kind != KILN_VALUE_CONSTANT || c->dtype != KILN_F32 || c->layout != KILN_LAYOUT_DENSE ||
      kiln_value_numel(c) != 1 || !c->data || c->nbytes < sizeof(float))
    return 0;
  return memcmp(c->data, &k, sizeof k) == 0;
}

/* One bound of the clamp: WHERE(CMP(v, k), k, v), v read by these two
 * alone, the compare by the WHERE alone. The WHERE's node index, or -1. */
static int32_t kiln_match_clamp_bound(const kiln_graph_t* g, const int32_t* uses,
                                      const int32_t* user, int32_t v, kiln_op_t cmp, float k,
                                      int32_t* cmp_node) {
  if (uses[v] != 2 || user[v] < 0 || g->values[v].dtype != KILN_F32) return -1;
  const kiln_node_t* w = &g->nodes[user[v]];
  if (w->op != KILN_OP_WHERE || w->n_inputs != 3 || w->inputs[2] != v ||
      !kiln_value_is_scalar(g, w->inputs[1], k) || w->inputs[0] < 0 || uses[w->inputs[0]] != 1 ||
      !kiln_value_same_type(&g->values[w->outputs[0]], &g->values[v]))
    return -1;
  int32_t c = g->values[w->inputs[0]].producer;
  if (c < 0) return -1;
  const kiln_node_t* cn = &g->nodes[c];
  if (cn->op != cmp || cn->n_inputs != 2 || cn->inputs[0] != v || !kiln_value_is_scalar(g, cn->inputs[1], k))
    return -1;
  *cmp_node = c;
  return user[v];
}

int kiln_graph_match_relu6(const kiln_graph_t* g, const int32_t* uses, const int32_t* user,
                           int32_t v, int32_t nodes[4]) {
  nodes[1] = kiln_match_clamp_bound(g, uses, user, v, KILN_OP_LT, 0.0f, &nodes[0]);
  if (nodes[1] < 0) return 0;
  nodes[3] = kiln_match_clamp_bound(g, uses, user, g->nodes[nodes[1]].outputs[0], KILN_OP_GT, 6.0f,
                                    &nodes[2]);
  return nodes[3] >= 0;
}

int kiln_graph_match_hardswish(const kiln_graph_t* g, const int32_t* uses, const int32_t* user,
                               int32_t v, int32_t nodes[7]) {
  if (v < 0 || uses[v] != 2 || g->values[v].dtype != KILN_F32) return 0;
  /* v's two readers: the ADD and the MUL. */
  int32_t add = -1, mul = -1;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      if (n->inputs[i] != v) continue;
      if (n->op == KILN_OP_ADD && add < 0) add = ni;
      else if (n->op == KILN_OP_MUL && mul < 0) mul = ni;
      else return 0;
      break;
    }
  }
  if (add < 0 || mul < 0) return 0;
  const kiln_node_t* a = &g->nodes[add];
  if (a->n_inputs != 2 || a->inputs[0] != v || !kiln_value_is_scalar(g, a->inputs[1], 3.0f) ||
      !kiln_value_same_type(&g->values[a->outputs[0]], &g->values[v]))
    return 0;
  int32_t r6[4];
  if (!kiln_graph_match_relu6(g, uses, user, a->outputs[0], r6)) return 0;
  const int32_t r = g->nodes[r6[3]].outputs[0];
  const kiln_node_t* m = &g->nodes[mul];
  if (m->n_inputs != 2 || uses[r] != 1 ||
      !((m->inputs[0] == v && m->inputs[1] == r) || (m->inputs[0] == r && m->inputs[1] == v)) ||
      !kiln_value_same_type(&g->values[m->outputs[0]], &g->values[v]))
    return 0;
  const int32_t p = m->outputs[0];
  if (uses[p] != 1 || user[p] < 0) return 0;
  const kiln_node_t* d = &g->nodes[user[p]];
  if (d->op != KILN_OP_DIV || d->n_inputs != 2 || d->inputs[0] != p ||
      !kiln_value_is_scalar(g, d->inputs[1], 6.0f) ||
      !kiln_value_same_type(&g->values[d->outputs[0]], &g->values[v]))
    return 0;
  nodes[0] = add;
  for (int i = 0; i < 4; ++i) nodes[1 + i] = r6[i];
  nodes[5] = mul;
  nodes[6] = user[p];
  return 1;
}

int kiln_matmul_has_linear_weight(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_MATMUL || n->params[KILN_P(MATMUL, FLAGS)] != 0) return 0;
  const kiln_value_t* w = &g->values[n->inputs[1]];
  const kiln_value_t* x = &g->values[n->inputs[0]];
  if (w->kind != KILN_VALUE_CONSTANT) return 0;
  if (w->rank == 2) return kiln_layout_is_unpacked_weight(w->layout);
  if (w->rank < 3 || x->rank < w->rank || w->layout != KILN_LAYOUT_DENSE || w->dtype != KILN_F32) return 0;
  for (int32_t d = 0; d < w->rank - 2; ++d)
    if (w->shape[d] != 1) return 0;
  return 1;
}
