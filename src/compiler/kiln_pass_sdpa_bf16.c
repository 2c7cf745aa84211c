/* compute_dtype=bf16 for attention: every SDPA gets KILN_SDPA_BF16, so it
 * computes by the bf16 rule (q, k, v and the softmax weights rounded to
 * bf16, fp32 sums; kiln_ops.h). The issue asked for GEMMs, convs, bmm and
 * attention in bf16 with fp32 accumulation; linear layers and convs get
 * there through their packed weights (the pack pass), attention has no
 * weight, so it is marked here. Run only with compute_bf16, after fusion
 * (the SDPA nodes fuse_attn rewrites keep the flag either way). */
#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"

kiln_status_t kiln_pass_sdpa_bf16(kiln_graph_t* g, kiln_graph_t** out_graph,
                                  int32_t* out_marked) {
  *out_graph = NULL;
  *out_marked = 0;
  kiln_rewriter_t rw;
  KILN_RETURN_IF_ERROR(kiln_rewriter_initialize(&rw, g));
  kiln_status_t s = kiln_ok();
  for (int32_t i = 0; i < g->n_nodes && !s; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (n->op != KILN_OP_SDPA || (n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16)) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    int64_t params[KILN_MAX_PARAMS];
    for (int32_t p = 0; p < KILN_MAX_PARAMS; ++p) params[p] = n->params[p];
    params[KILN_P(SDPA, FLAGS)] |= KILN_SDPA_BF16;
    s = kiln_rewriter_emit(&rw, n->op, n->inputs, n->n_inputs, params, n->fparams, n->origin,
                           n->outputs[0]);
    ++*out_marked;
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
  return s;
}
