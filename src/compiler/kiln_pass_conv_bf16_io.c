/* bf16 storage between convs (CONV2D_NHWC's Y_BF16, format 2.23): a conv
 * whose every reader is a bf16-compute conv (its weight in the
 * KILN_LAYOUT_CONV2D_PACKED_16_BF16 form) reading it as x stores y in bf16.
 *
 * Exact: such a reader rounds its x to bf16 (nearest even) as it copies it,
 * and the writer now rounds the same fp32 values by the same rule as it
 * stores them, so every product is the same. What changes is the traffic:
 * the writer stores half the bytes, and the reader copies bf16 (a 1x1 conv
 * at stride 1 with even channels reads it in place, no copy at all). In a
 * MobileNet block under compute_dtype=bf16 the depthwise conv's output goes
 * to the projection conv this way; in a ResNet basic block the first
 * conv's to the second.
 *
 * With lossy (compute_dtype=bf16) a depthwise conv reading x is such a
 * reader too: it then computes from x rounded to bf16 (fp32 weights and
 * sums), the conv in bf16 the mode asks for, no longer fp32's bits. So a
 * MobileNet block's expansion conv writes bf16 for its depthwise conv,
 * which writes bf16 for the projection: the block's two largest tensors at
 * half the bytes.
 *
 * Writers: a conv with the bf16-compute weight (x NHWC or NCHW: a stem),
 * or a depthwise conv with its dense fp32 weight (kiln_conv_nhwc_dw.c) and
 * NHWC x; no residual (the residual stream stays fp32) and no scale. Not a
 * graph output, read by at least one conv. KILN_CONV_BF16_IO=0 turns the pass off (A/B runs, and
 * the tests that hold the two bit for bit). Run after the pack pass (the
 * weight forms are known then). */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"

/* Whether conv node n is a depthwise conv the channels-last kernel runs
 * from its dense fp32 weight (kiln_conv2d_f32_nhwc_depthwise's reach, and
 * shape inference's rule for bf16 storage). */
static int kiln_bf16_io_depthwise(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_CONV2D_NHWC || n->params[KILN_P(CONV2D_NHWC, X_NCHW)] != 0 ||
      n->inputs[1] < 0 || (n->n_inputs > 4 && n->inputs[4] >= 0))
    return 0;
  const kiln_value_t *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  if (x->rank != 4 || w->rank != 4) return 0;
  const int64_t C = x->shape[3], groups = n->params[KILN_P(CONV2D_NHWC, GROUPS)];
  return w->layout == KILN_LAYOUT_DENSE && w->dtype == KILN_F32 && groups == C &&
         w->shape[0] == C && w->shape[2] * w->shape[3] <= KILN_CONV2D_NHWC_BF16_DW_TAPS;
}

/* Whether conv node n reads a bf16 x exactly as it would round an fp32 one
 * (a bf16-compute conv), or, with lossy (compute_dtype=bf16), computes from
 * a bf16 x as the mode asks (a depthwise conv: x rounded, fp32 weights and
 * sums). */
static int kiln_bf16_io_reader(const kiln_graph_t* g, const kiln_node_t* n, int lossy) {
  if (n->op != KILN_OP_CONV2D_NHWC || n->params[KILN_P(CONV2D_NHWC, X_NCHW)] != 0 ||
      n->inputs[1] < 0)
    return 0;
  return g->values[n->inputs[1]].layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16 ||
         (lossy && kiln_bf16_io_depthwise(g, n));
}

/* Whether conv node n can store its y in bf16 (shape inference's rule, and
 * the depthwise kernel's reach: kiln_conv2d_f32_nhwc_depthwise). */
static int kiln_bf16_io_writer(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_CONV2D_NHWC || n->params[KILN_P(CONV2D_NHWC, Y_BF16)] != 0 ||
      n->inputs[1] < 0 || (n->n_inputs > 3 && n->inputs[3] >= 0) ||
      (n->n_inputs > 4 && n->inputs[4] >= 0))
    return 0;
  /* The bf16-compute conv also when it gathers an NCHW x (a network's
   * stem, at the layout region's edge). */
  return g->values[n->inputs[1]].layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16 ||
         kiln_bf16_io_depthwise(g, n);
}

kiln_status_t kiln_pass_conv_bf16_io(kiln_graph_t* g, int lossy, kiln_graph_t** out_graph,
                                     int32_t* out_marked) {
  *out_graph = NULL;
  *out_marked = 0;
  const char* env = getenv("KILN_CONV_BF16_IO");
  const int off = env && env[0] == '0';
  /* Per value: its reads, and how many are a bf16 reader's x. */
  int32_t* reads = calloc((size_t)g->n_values * 2 + 1, sizeof(int32_t));
  if (!reads) return kiln_status_make(KILN_OUT_OF_MEMORY, "conv_bf16_io: no memory");
  int32_t* as_x = reads + g->n_values;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    for (int32_t j = 0; j < n->n_inputs; ++j)
      if (n->inputs[j] >= 0) {
        ++reads[n->inputs[j]];
        if (j == 0 && kiln_bf16_io_reader(g, n, lossy)) ++as_x[n->inputs[j]];
      }
  }
  for (int32_t i = 0; i < g->n_outputs; ++i) ++reads[g->outputs[i]]; /* never bf16 */
  kiln_rewriter_t rw;
  kiln_status_t s = kiln_rewriter_initialize(&rw, g);
  for (int32_t i = 0; i < g->n_nodes && !s; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    const int32_t y = n->outputs[0];
    if (off || !kiln_bf16_io_writer(g, n) || reads[y] == 0 || as_x[y] != reads[y]) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    int64_t params[KILN_MAX_PARAMS];
    memcpy(params, n->params, sizeof params);
    params[KILN_P(CONV2D_NHWC, Y_BF16)] = 1;
    s = kiln_rewriter_emit(&rw, n->op, n->inputs, n->n_inputs, params, n->fparams, n->origin, y);
    ++*out_marked;
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
  free(reads);
  return s;
}
