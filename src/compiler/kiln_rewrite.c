/* The rewriter shared by every compiler pass. */
#include "compiler/kiln_rewrite.h"

#include "base/kiln_activation.h"

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
