/* FLOPs and bytes of a node (kiln_cost.h): the one cost model behind every
 * profile kiln prints. The rules are in the header; this file only applies
 * them to each op's shapes and params. */
#include "runtime/kiln_cost.h"

#include <stdlib.h>


#include "base/kiln_fused_program.h"

static int64_t kiln_cost_numel(const kiln_graph_t* g, int32_t id) {
  if (id < 0) return 0;
  int64_t n = kiln_value_numel(&g->values[id]);
  return n > 0 ? n : 0;
}

static int64_t kiln_cost_value_bytes(const kiln_graph_t* g, int32_t id) {
  const kiln_value_t* v = &g->values[id];
  if (v->kind == KILN_VALUE_CONSTANT) return (int64_t)v->nbytes;
  return kiln_value_numel(v) > 0 ? (int64_t)kiln_value_dense_bytes(v) : 0;
}

/* Bytes node n reads of its input i: all of it, except where the node picks
 * parts of a table (gathers, embedding bags, slices and other strided
 * copies): at most what it writes (an embedding reads a token's row, not
 * the vocabulary). */
static int64_t kiln_cost_input_bytes(const kiln_graph_t* g, const kiln_node_t* n, int32_t i) {
  int64_t b = kiln_cost_value_bytes(g, n->inputs[i]);
  int64_t picked = -1;
  if (i == 0 && (n->op == KILN_OP_GATHER || n->op == KILN_OP_GATHER_ELEMENTS ||
                 n->op == KILN_OP_STRIDED_COPY))
    picked = kiln_cost_value_bytes(g, n->outputs[0]);
  else if (i == 0 && n->op == KILN_OP_EMBEDDING_BAG && g->values[n->inputs[0]].rank == 2)
    picked = kiln_cost_numel(g, n->inputs[1]) * g->values[n->inputs[0]].shape[1] *
             (int64_t)kiln_dtype_size(g->values[n->inputs[0]].dtype);
  return picked >= 0 && picked < b ? picked : b;
}

/* Operations per element of an ELTWISE_FUSED program: its arithmetic
 * instructions (loads and immediates are not arithmetic). */
static int64_t kiln_cost_fused_ops(const kiln_node_t* n) {
  int32_t slots = (int32_t)n->params[KILN_P(FUSED, N_SLOTS)], ops = 0;
  if (slots < 1 || slots > KILN_FUSED_MAX_SLOTS) return 1;
  for (int32_t k = 0; k < slots; ++k) {
    uint32_t code = kiln_fused_slot(n->params, k) & 255u;
    if (code == KILN_FUSED_IMM) ++k; /* its data slot */
    else if (code == KILN_FUSED_SELECT || kiln_fused_op_arity(code) > 0) ++ops;
  }
  return ops > 0 ? ops : 1;
}

static int64_t kiln_cost_flops(const kiln_graph_t* g, const kiln_node_t* n) {
  const int32_t* in = n->inputs;
  int64_t y = kiln_cost_numel(g, n->outputs[0]);
  const kiln_value_t* x = in[0] >= 0 && n->n_inputs > 0 ? &g->values[in[0]] : NULL;
  switch (n->op) {
    case KILN_OP_LINEAR:     /* x (..., K) */
    case KILN_OP_GROUPED_MM: /* x (S, K): each row by one expert, at most */
      return x && x->rank ? 2 * y * x->shape[x->rank - 1] : 0;
    case KILN_OP_SOLVE_TRIANGULAR: /* x (..., n, k): each element a dot over its row's half of a */
      return x && x->rank >= 2 ? y * x->shape[x->rank - 1] : 0;
    case KILN_OP_MATMUL: /* a (..., M, K), or (..., K, M) read transposed */
      if (!x || x->rank < 1) return 0;
      if (n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_TRANSPOSE_A) return x->rank >= 2 ? 2 * y * x->shape[x->rank - 2] : 0;
      return 2 * y * x->shape[x->rank - 1];
    case KILN_OP_CONV2D:
    case KILN_OP_CONV2D_NHWC:
    case KILN_OP_CONV2D_GRAD_INPUT: { /* each of y's (or dy's) cells: C / groups * kh * kw MACs */
      const kiln_value_t* w = &g->values[in[1]];
      int64_t per = w->rank == 4 && w->shape[0] > 0 ? kiln_cost_numel(g, in[1]) / w->shape[0] : 0;
      int64_t cells = n->op == KILN_OP_CONV2D_GRAD_INPUT ? kiln_cost_numel(g, in[0]) : y;
      return 2 * cells * per;
    }
    case KILN_OP_CONV2D_GRAD_WEIGHT: { /* dy (N, O, Ho, Wo) -> dw (O, C / groups, kh, kw) */
      const kiln_value_t* dw = &g->values[n->outputs[0]];
      int64_t per = dw->rank == 4 && dw->shape[0] > 0 ? y / dw->shape[0] : 0;
      return 2 * kiln_cost_numel(g, in[0]) * per;
    }
    case KILN_OP_SDPA: {
      int64_t b, h, sq, skv, d, dv;
      const int64_t* p = n->params;
      if (p[KILN_P(SDPA, FLAGS)] & KILN_SDPA_VIEWS) {
        b = p[KILN_P(SDPA, BATCH)], h = p[KILN_P(SDPA, HEADS)], sq = p[KILN_P(SDPA, Q_LEN)];
        skv = p[KILN_P(SDPA, KV_LEN)], d = p[KILN_P(SDPA, HEAD_DIM)], dv = p[KILN_P(SDPA, V_HEAD_DIM)];
      } else {
        const kiln_value_t* k = &g->values[in[1]];
        const kiln_value_t* v = &g->values[in[2]];
        if (x->rank != 4 || k->rank != 4 || v->rank != 4) return 0;
        b = x->shape[0], h = x->shape[1], sq = x->shape[2], d = x->shape[3];
        skv = k->shape[2], dv = v->shape[3];
      }
      return 2 * b * h * sq * skv * (d + dv);
    }
    case KILN_OP_RESHAPE:
    case KILN_OP_STRIDED_COPY:
    case KILN_OP_CAT:
    case KILN_OP_GATHER:
    case KILN_OP_GATHER_ELEMENTS:
    case KILN_OP_CAST:
    case KILN_OP_PAD:
    case KILN_OP_STRIDED_SCATTER:
      return 0;
    case KILN_OP_SCATTER: /* assignment moves data; a reduction adds per source element */
      return n->params[KILN_P(SCATTER, REDUCE)] ? kiln_cost_numel(g, in[2]) : 0;
    case KILN_OP_MAX_POOL2D:
    case KILN_OP_AVG_POOL2D:
    case KILN_OP_MAX_POOL2D_NHWC:
    case KILN_OP_MAX_POOL2D_INDICES:
      return y * n->params[KILN_P(POOL2D, KERNEL_H)] * n->params[KILN_P(POOL2D, KERNEL_W)];
    case KILN_OP_ELTWISE_FUSED: return y * kiln_cost_fused_ops(n);
    case KILN_OP_LAYER_NORM: return 5 * y;
    case KILN_OP_RMS_NORM: return 4 * y;
    case KILN_OP_SOFTMAX:
    case KILN_OP_LOG_SOFTMAX: return 5 * y;
    case KILN_OP_GELU:
    case KILN_OP_GELU_TANH: return 8 * y;
    case KILN_OP_SILU: return 4 * y;
    case KILN_OP_LAYER_NORM_BACKWARD: return 8 * y;
    case KILN_OP_GELU_BACKWARD: return 10 * y;
    default:
      if (KILN_OP_IS_REDUCE(n->op) || n->op == KILN_OP_ARGMAX || n->op == KILN_OP_SCAN ||
          n->op == KILN_OP_ARGSORT || n->op == KILN_OP_COL2IM)
        return kiln_cost_numel(g, in[0]);
      return y;
  }
}

void kiln_node_cost(const kiln_graph_t* g, const kiln_node_t* n, kiln_node_cost_t* out) {
  out->flops = out->bytes = out->constant_bytes = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    int32_t id = n->inputs[i], seen = 0;
    if (id < 0) continue;
    for (int32_t j = 0; j < i; ++j) seen |= n->inputs[j] == id;
    if (seen) continue; /* attention reading q, k and v through views of one value */
    int64_t b = kiln_cost_input_bytes(g, n, i);
    out->bytes += b;
    if (g->values[id].kind == KILN_VALUE_CONSTANT) out->constant_bytes += b;
  }
  for (int32_t o = 0; o < n->n_outputs; ++o) out->bytes += kiln_cost_value_bytes(g, n->outputs[o]);
  int64_t view_bytes;
  if (kiln_node_is_view(g, n, &view_bytes)) return; /* a copy at most: no arithmetic */
  out->flops = kiln_cost_flops(g, n);
}

int64_t kiln_graph_weight_bytes(const kiln_graph_t* g, int64_t* out_rows, int64_t* out_flops) {
  int64_t total = 0, rows = 0, flops = 0, largest = -1;
  /* Per constant, the most any one node reads of it. */
  int64_t* read = calloc((size_t)g->n_values + 1, sizeof(int64_t));
  if (!read) return -1;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int64_t view_bytes;
    if (kiln_node_is_view(g, n, &view_bytes)) continue;
    int reads = 0;
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      int32_t id = n->inputs[i];
      if (id < 0 || g->values[id].kind != KILN_VALUE_CONSTANT) continue;
      reads = 1;
      int64_t b = kiln_cost_input_bytes(g, n, i);
      if (b > read[id]) read[id] = b;
      if (n->op == KILN_OP_LINEAR && i == 1 && b > largest) {
        const kiln_value_t* x = &g->values[n->inputs[0]];
        int64_t k = x->rank ? x->shape[x->rank - 1] : 0;
        largest = b;
        rows = k > 0 ? kiln_cost_numel(g, n->inputs[0]) / k : 0;
      }
    }
    if (reads) flops += kiln_cost_flops(g, n);
  }
  for (int32_t v = 0; v < g->n_values; ++v) total += read[v];
  free(read);
  if (out_rows) *out_rows = rows;
  if (out_flops) *out_flops = flops;
  return total;
}
