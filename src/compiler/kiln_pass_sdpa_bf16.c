/* compute_dtype=bf16 for attention: an SDPA gets KILN_SDPA_BF16, so it
 * computes by the bf16 rule (q, k, v and the softmax weights rounded to
 * bf16, fp32 sums; kiln_ops.h). The issue asked for GEMMs, convs, bmm and
 * attention in bf16 with fp32 accumulation; linear layers and convs get
 * there through their packed weights (the pack pass), attention has no
 * weight, so it is marked here. Run only with compute_bf16, after fusion
 * (the SDPA nodes fuse_attn rewrites keep the flag either way).
 *
 * Which SDPAs (all: 1, mode KILN_ATTN_BF16=on, for tests; else only where
 * the rule pays): where the compiling CPU has a bf16 engine (AVX512_BF16
 * or AMX), and not a decode step's (at most 8 rows per kv head, known at
 * compile time). Elsewhere the rule would only cost: without an engine it
 * runs on the fp32 kernels with the roundings added (1.13-1.18x fp32's
 * time, Zen 4 with its engine masked), and a decode step reads K and V on
 * the fp32 kernels either way (1.3x fp32's time, rounding them). So on such
 * a CPU, and for decode steps, attention stays fp32 (the README's "bf16 is
 * never slower than fp32"), as convolutions do (kiln_hal_cpu_constant.c);
 * a file compiled where the engine is still runs the rule on any CPU. */
#include "base/kiln_cpu.h"
#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"

kiln_status_t kiln_pass_sdpa_bf16(kiln_graph_t* g, int all, kiln_graph_t** out_graph,
                                  int32_t* out_marked) {
  *out_graph = NULL;
  *out_marked = 0;
  kiln_rewriter_t rw;
  KILN_RETURN_IF_ERROR(kiln_rewriter_initialize(&rw, g));
  kiln_status_t s = kiln_ok();
  for (int32_t i = 0; i < g->n_nodes && !s; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (n->op != KILN_OP_SDPA || (n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16) ||
        (!all && (!kiln_cpu_bf16() || kiln_node_is_sdpa_decode(g, n)))) {
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
