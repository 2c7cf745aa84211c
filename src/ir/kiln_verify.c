/* The graph verifier: every invariant the compiler and runtime rely on,
 * checked in one place. Run on every graph built from Python, after each
 * compiler pass in debug builds, and on every graph read from a file. */
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_joined_const.h"
#include "ir/kiln_quant_const.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* Does input `i` of `op` read a value stored in `layout`? Every other reader
 * addresses its inputs as dense row-major memory, so a packed or transposed
 * constant reaching it would be read as the wrong numbers with no error:
 * this table is the one place that says which kernels know which layouts. */
static int kiln_verify_input_reads_layout(kiln_op_t op, int32_t i, kiln_layout_t layout) {
  if (layout == KILN_LAYOUT_DENSE) return 1;
  /* A checkpoint's quantized constant stands for its float32 value until
   * the pack pass gives each reader its own form; no kernel reads it
   * (the targets refuse it), so a file holding one fails when a model is
   * made of it, by name. */
  if (kiln_layout_is_quant_const(layout)) return 1;
  /* So does a bf16 weight held narrow (kiln_pass_fold.c). */
  if (kiln_layout_is_widened_bf16(layout)) return 1;
  /* A joined weight too, as the gated-MLP fusion's LINEAR reads it. */
  if (layout == KILN_LAYOUT_JOINED_COLS) return op == KILN_OP_LINEAR && i == 1;
  if (op == KILN_OP_GATHER) /* a quantized embedding table */
    return i == 0 && (layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || layout == KILN_LAYOUT_GEMM_PACKED_B_Q4);
  if (i != 1) return 0;
  switch (op) {
    case KILN_OP_LINEAR:
      return layout == KILN_LAYOUT_GEMM_PACKED_B || layout == KILN_LAYOUT_TRANSPOSED_2D ||
             layout == KILN_LAYOUT_GEMM_PACKED_B_BF16 ||
             layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI ||
             layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || layout == KILN_LAYOUT_GEMM_PACKED_B_Q4;
    case KILN_OP_MATMUL:
      return layout == KILN_LAYOUT_TRANSPOSED_2D;
    case KILN_OP_CONV2D:
      return layout == KILN_LAYOUT_CONV2D_PACKED || layout == KILN_LAYOUT_CONV2D_PACKED_16;
    case KILN_OP_CONV2D_NHWC:
      return layout == KILN_LAYOUT_CONV2D_PACKED_16 || layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16;
    default:
      return 0;
  }
}

kiln_status_t kiln_graph_verify(const kiln_graph_t* g) {
  if (g->n_outputs < 1) FAIL("the graph has no outputs");
  for (int32_t i = 0; i < g->n_values; ++i) {
    const kiln_value_t* v = &g->values[i];
    if ((unsigned)v->kind >= KILN_VALUE_KIND_COUNT) FAIL("value %d: unknown kind", i);
    if ((unsigned)v->dtype >= KILN_DTYPE_COUNT) FAIL("value %d: unknown dtype", i);
    if (v->rank < 0 || v->rank > KILN_MAX_RANK) FAIL("value %d: rank %d", i, v->rank);
    for (int32_t d = 0; d < v->rank; ++d) {
      if (kiln_dim_is_sym(v->shape[d]) ? !kiln_sym_dim_valid(g->syms, v->shape[d])
                                       : v->shape[d] < 0)
        FAIL("value %d: dimension %d is %s", i, d,
             kiln_dim_is_sym(v->shape[d]) ? "an unknown symbolic size" : "negative");
      if (kiln_dim_is_sym(v->shape[d]) && v->kind == KILN_VALUE_CONSTANT)
        FAIL("constant %d has a symbolic size", i);
    }
    if (v->kind == KILN_VALUE_CONSTANT) {
      if (!v->data && v->nbytes) FAIL("constant %d has no data", i);
      if ((unsigned)v->layout >= KILN_LAYOUT_COUNT) FAIL("constant %d: unknown layout", i);
      if (v->layout == KILN_LAYOUT_TRANSPOSED_2D && v->rank != 2)
        FAIL("constant %d: a transposed constant must be 2-d", i);
      kiln_quant_const_view_t qv;
      if (kiln_layout_is_quant_const(v->layout) && kiln_quant_const_view(v, &qv))
        FAIL("constant %d: not a well-formed quantized constant of its shape (%zu bytes)", i,
             v->nbytes);
      kiln_joined_const_t jv;
      if (v->layout == KILN_LAYOUT_JOINED_COLS && kiln_joined_const_view(v, &jv))
        FAIL("constant %d: not a well-formed joined weight", i);
      if (kiln_layout_is_widened_bf16(v->layout) &&
          (v->dtype != KILN_F32 || (v->layout == KILN_LAYOUT_WIDENED_BF16_T && v->rank != 2) ||
           v->nbytes != kiln_value_dense_bytes(v) / 2))
        FAIL("constant %d: not a float32 value held as %zu bytes of bf16 of its shape (%zu bytes)",
             i, kiln_value_dense_bytes(v) / 2, v->nbytes);
      if (kiln_layout_is_dense_sized(v->layout) && v->nbytes != kiln_value_dense_bytes(v))
        FAIL("constant %d holds %zu bytes, its shape needs %zu", i, v->nbytes,
             kiln_value_dense_bytes(v));
    } else if (v->layout != KILN_LAYOUT_DENSE) {
      FAIL("value %d: only constants may be packed", i);
    }
    if (v->kind == KILN_VALUE_INTERMEDIATE) {
      if (v->producer < 0 || v->producer >= g->n_nodes)
        FAIL("intermediate %d has no producing node", i);
      const kiln_node_t* p = &g->nodes[v->producer];
      int found = 0;
      for (int32_t o = 0; o < p->n_outputs; ++o) found |= p->outputs[o] == i;
      if (!found) FAIL("value %d names node %d as producer, which does not make it", i,
                       v->producer);
    } else if (v->producer != -1) {
      FAIL("value %d is an input or constant with a producer", i);
    }
  }
  for (int32_t i = 0; i < g->n_inputs; ++i)
    if (g->inputs[i] < 0 || g->inputs[i] >= g->n_values ||
        g->values[g->inputs[i]].kind != KILN_VALUE_INPUT)
      FAIL("graph input %d is not an input value", i);
  for (int32_t i = 0; i < g->n_outputs; ++i)
    if (g->outputs[i] < 0 || g->outputs[i] >= g->n_values) FAIL("graph output %d is out of range", i);

  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    const char* name = kiln_op_name(n->op);
    if ((unsigned)n->op >= KILN_OP_COUNT) FAIL("node %d: unknown op %d", ni, (int)n->op);
    if (n->n_inputs < kiln_op_min_inputs(n->op) || n->n_inputs > kiln_op_max_inputs(n->op))
      FAIL("node %d (%s): %d inputs", ni, name, n->n_inputs);
    if (n->n_outputs != 1) FAIL("node %d (%s): %d outputs", ni, name, n->n_outputs);
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      int32_t id = n->inputs[i];
      if (id == -1) continue;
      if (id < 0 || id >= g->n_values) FAIL("node %d (%s): input %d out of range", ni, name, i);
      const kiln_value_t* v = &g->values[id];
      /* Topological order: an intermediate input was made by an earlier node. */
      if (v->kind == KILN_VALUE_INTERMEDIATE && v->producer >= ni)
        FAIL("node %d (%s) uses value %d before node %d makes it", ni, name, id, v->producer);
      if (!kiln_verify_input_reads_layout(n->op, i, v->layout))
        FAIL("node %d (%s): input %d is constant %d in layout %d, which it does not read", ni,
             name, i, id, (int)v->layout);
    }
    int32_t out_id = n->outputs[0];
    if (out_id < 0 || out_id >= g->n_values || g->values[out_id].producer != ni)
      FAIL("node %d (%s): output is not a value it produces", ni, name);
    kiln_value_t want;
    kiln_status_t s = kiln_graph_infer_node(g, n, &want);
    if (s) return kiln_status_annotate(s, "node %d (%s)", ni, name);
    if (!kiln_value_same_type(&want, &g->values[out_id])) {
      char a[96], b[96];
      FAIL("node %d (%s): output is %s, its inputs give %s", ni, name,
           kiln_graph_describe_value(g, &g->values[out_id], a, sizeof a),
           kiln_graph_describe_value(g, &want, b, sizeof b));
    }
  }
  return kiln_ok();
}
