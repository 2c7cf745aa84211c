/* A readable listing of a graph (kiln_graph_print: the CLI's `kiln info`,
 * kiln.explain) and the channels-last layout decision read back from it.
 * Part of the IR so that the runtime-only CLI can print a loaded model. */
#include "ir/kiln_graph_print.h"

#include <stdlib.h>

#include "base/kiln_union_find.h"

/* Slots of a conv read in its own layout: x and the residual. */
static int kiln_print_conv_act_slot(int32_t i) { return i == 0 || i == 3; }

static int kiln_print_is_nhwc(kiln_op_t op) {
  return op == KILN_OP_CONV2D_NHWC || op == KILN_OP_MAX_POOL2D_NHWC;
}

void kiln_graph_summarize_layout(const kiln_graph_t* g, int32_t* out_regions, int32_t* out_convs,
                           int32_t* out_conversions) {
  *out_regions = *out_convs = *out_conversions = 0;
  const int32_t nn = g->n_nodes;
  int32_t* parent = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  if (!parent) return;
  for (int32_t ni = 0; ni < nn; ++ni) parent[ni] = ni;
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (n->op == KILN_OP_STRIDED_COPY && n->n_inputs == 1 && n->inputs[0] >= 0) {
      int32_t p = g->values[n->inputs[0]].producer;
      if (p >= 0 && kiln_print_is_nhwc(g->nodes[p].op)) ++*out_conversions;
    }
    if (!kiln_print_is_nhwc(n->op)) continue;
    *out_convs += n->op == KILN_OP_CONV2D_NHWC;
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      if (!kiln_print_conv_act_slot(i) || n->inputs[i] < 0) continue;
      int32_t p = g->values[n->inputs[i]].producer;
      if (p >= 0 && kiln_print_is_nhwc(g->nodes[p].op)) kiln_union_find_join(parent, ni, p);
    }
  }
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (kiln_print_is_nhwc(n->op) && kiln_union_find_root(parent, ni) == ni) ++*out_regions;
  }
  /* Conversions into the layout: copies any CONV2D_NHWC reads as x or
   * residual, each once. */
  char* seen = calloc((size_t)nn + 1, 1);
  for (int32_t ni = 0; seen && ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (!kiln_print_is_nhwc(n->op)) continue;
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      if (!kiln_print_conv_act_slot(i) || n->inputs[i] < 0) continue;
      int32_t p = g->values[n->inputs[i]].producer;
      if (p >= 0 && g->nodes[p].op == KILN_OP_STRIDED_COPY && !seen[p]) {
        seen[p] = 1;
        ++*out_conversions;
      }
    }
  }
  free(seen);
  free(parent);
}

void kiln_graph_print(const kiln_graph_t* g, FILE* out) {
  char buf[160];
  size_t const_bytes = 0;
  for (int32_t v = 0; v < g->n_values; ++v)
    if (g->values[v].kind == KILN_VALUE_CONSTANT) const_bytes += g->values[v].nbytes;
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* v = &g->values[g->inputs[i]];
    fprintf(out, "  input  %%%d %s %s\n", g->inputs[i], v->name ? v->name : "",
            kiln_graph_describe_value(g, v, buf, sizeof buf));
  }
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    fprintf(out, "  %%%-4d = %-12s(", n->outputs[0], kiln_op_name(n->op));
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      int32_t id = n->inputs[i];
      if (id < 0) fprintf(out, "%s-", i ? ", " : "");
      else if (g->values[id].kind == KILN_VALUE_CONSTANT) {
        const kiln_value_t* c = &g->values[id];
        const char* tag =
            c->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16 ? "packed bf16"
            : c->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI ||
                    c->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16
                ? "bf16 compute"
            : c->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8
                ? (kiln_value_int8_activations(c) ? "int8, int8 activations" : "int8")
            : c->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4
                ? (kiln_value_int8_activations(c) ? "int4, int8 activations" : "int4")
            : c->layout == KILN_LAYOUT_GEMM_PACKED_B || c->layout == KILN_LAYOUT_CONV2D_PACKED ||
                    c->layout == KILN_LAYOUT_CONV2D_PACKED_16
                ? "packed"
            : c->layout == KILN_LAYOUT_QUANT_ROWS || c->layout == KILN_LAYOUT_QUANT_ROWS_T
                ? "checkpoint-quantized"
            : c->layout == KILN_LAYOUT_JOINED_COLS ? "joined"
            : kiln_layout_is_widened_bf16(c->layout) ? "bf16 held"
                                                   : "";
        /* The pack pass's note says why the constant has its form (a
         * checkpoint's quantized weight: its own integers, or fp32 and why). */
        if (c->note)
          fprintf(out, "%sconst%%%d[%s: %s]", i ? ", " : "", id, *tag ? tag : "fp32", c->note);
        else
          fprintf(out, "%sconst%%%d%s%s%s", i ? ", " : "", id, *tag ? "[" : "", tag, *tag ? "]" : "");
      }
      else fprintf(out, "%s%%%d", i ? ", " : "", id);
    }
    fprintf(out, ") -> %s", kiln_graph_describe_value(g, &g->values[n->outputs[0]], buf, sizeof buf));
    _Static_assert(KILN_P(CONV2D, ACT) == KILN_P(CONV2D_NHWC, ACT), "conv layouts");
    int64_t act = n->op == KILN_OP_LINEAR ? n->params[KILN_P(LINEAR, ACT)]
                  : n->op == KILN_OP_CONV2D || n->op == KILN_OP_CONV2D_NHWC
                      ? n->params[KILN_P(CONV2D, ACT)]
                      : 0;
    if (act) {
      static const char* const acts[] = {"", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
                                           "relu6", "hardswish"};
      if ((unsigned long long)act < sizeof(acts) / sizeof(acts[0]))
        fprintf(out, " act=%s", acts[act]);
    }
    const int64_t mm = n->op == KILN_OP_MATMUL ? n->params[KILN_P(MATMUL, FLAGS)] : 0;
    if (mm & (KILN_MATMUL_TRANSPOSE_A | KILN_MATMUL_TRANSPOSE_B))
      fprintf(out, " read=%s", (mm & KILN_MATMUL_TRANSPOSE_A)
                                   ? ((mm & KILN_MATMUL_TRANSPOSE_B) ? "aT,bT" : "aT")
                                   : "bT");
    if ((n->op == KILN_OP_MATMUL && (mm & KILN_MATMUL_ROUND_A_BF16)) ||
        (n->op == KILN_OP_LINEAR && n->params[KILN_P(LINEAR, ROUND_A)]))
      fprintf(out, " a=bf16");
    if ((n->op == KILN_OP_MATMUL && (mm & KILN_MATMUL_ROUND_B_BF16)) ||
        (n->op == KILN_OP_LINEAR && n->params[KILN_P(LINEAR, ROUND_B)]))
      fprintf(out, " b=bf16");
    if ((n->op == KILN_OP_MATMUL && (mm & KILN_MATMUL_ROUND_Y_BF16)) ||
        (n->op == KILN_OP_LINEAR && n->params[KILN_P(LINEAR, ROUND_Y)]))
      fprintf(out, " y=bf16");
    if (n->op == KILN_OP_SDPA && (n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16))
      fprintf(out, " compute=bf16");
    if (n->op == KILN_OP_SDPA && (n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_EVERY_KEY))
      fprintf(out, " every_key");
    if (n->origin) fprintf(out, "   # %s", n->origin);
    fputc('\n', out);
  }
  fprintf(out, "  outputs:");
  for (int32_t o = 0; o < g->n_outputs; ++o) fprintf(out, " %%%d", g->outputs[o]);
  int32_t regions, convs, conversions;
  kiln_graph_summarize_layout(g, &regions, &convs, &conversions);
  if (convs)
    fprintf(out, "\n  layout: %d channels-last region%s (%d convs), %d layout conversion%s",
            regions, regions == 1 ? "" : "s", convs, conversions, conversions == 1 ? "" : "s");
  fprintf(out, "\n  %d nodes, %d values, constants %.2f MiB\n", g->n_nodes, g->n_values,
          (double)const_bytes / (1 << 20));
}
