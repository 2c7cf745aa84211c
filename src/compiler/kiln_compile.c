/* The compiler driver: runs the passes in order, verifies between them when
 * asked, and logs what each did. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler/kiln_compiler.h"

void kiln_compile_options_initialize(kiln_compile_options_t* o) {
  const char* fold_bf16 = getenv("KILN_FOLD_BF16");
  o->fold_constants = fold_bf16 && strcmp(fold_bf16, "widen") == 0 ? 1 : 2;
  o->fuse = 1;
  o->pack_weights = 1;
  o->weights_bf16 = 0;
  o->compute_bf16 = 0;
  o->weights_quant = 0;
  o->weights_group = 32;
  o->weights_asym = 0;
  o->weights_a8 = 0;
  const char* bf16w = getenv("KILN_BF16_WEIGHTS"); /* "packed": pack held bf16 weights (A/B) */
  o->bf16_in_place = !(bf16w && strcmp(bf16w, "packed") == 0);
#ifdef NDEBUG
  o->verify_each = 0;
#else
  o->verify_each = 1;
#endif
  o->log = NULL;
  o->on_pass = NULL;
  o->on_pass_ctx = NULL;
  /* "nchw": no channels-last regions (A/B runs); "nhwc": every region with a
   * conv channels-last, paying or not (tests: kiln_pass_layout.c) */
  const char* layout = getenv("KILN_LAYOUT");
  o->layout = !(layout && strcmp(layout, "nchw") == 0);
  const char* glu = getenv("KILN_GLU"); /* "off": each gated pair's GEMMs apart (A/B runs) */
  o->fuse_glu = !(glu && strcmp(glu, "off") == 0);
  /* "keep": no cast folding (A/B runs, exactness tests); "chains": only casts
   * read once along a chain go (kiln_pass_casts.c, for A/B runs). */
  const char* casts = getenv("KILN_CASTS");
  o->fold_casts = casts && strcmp(casts, "keep") == 0 ? 0 : casts && strcmp(casts, "chains") == 0 ? 1 : 2;
  /* "off": compute_bf16 leaves attention in fp32 (A/B runs). */
  const char* attn = getenv("KILN_ATTN_BF16");
  o->sdpa_bf16 = attn && strcmp(attn, "off") == 0 ? 0 : attn && strcmp(attn, "on") == 0 ? 2 : 1;
  o->target = NULL;
}

int kiln_pass_weight_read_in_place(const kiln_graph_t* g, const kiln_node_t* n,
                                   const kiln_hal_target_t* target,
                                   const kiln_hal_weights_t* weights) {
  if (!target || !target->constant_form || !weights || !weights->bf16_in_place ||
      n->op != KILN_OP_LINEAR || n->n_inputs < 2 ||
      g->values[n->inputs[1]].layout != KILN_LAYOUT_WIDENED_BF16_T)
    return 0;
  kiln_hal_constant_form_t f;
  kiln_status_t s = target->constant_form(g, n, 1, weights, &f);
  int kept = !s && f.layout == KILN_LAYOUT_WIDENED_BF16_T;
  kiln_status_free(s);
  return kept;
}

static double kiln_ms_since(struct timespec t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
}

static void kiln_compile_before(const kiln_compile_options_t* o, const char* pass) {
  if (o->on_pass) o->on_pass(o->on_pass_ctx, pass);
}

static kiln_status_t kiln_compile_after(const kiln_compile_options_t* o, const char* pass,
                                        kiln_graph_t* g, struct timespec t0, const char* what) {
  if (o->log) {
    fprintf(o->log, "kiln: pass %-10s %7.2f ms  %s -> %d nodes\n", pass, kiln_ms_since(t0), what,
            g->n_nodes);
  }
  if (!o->verify_each) return kiln_ok();
  kiln_status_t s = kiln_graph_verify(g);
  return s ? kiln_status_annotate(s, "after pass %s", pass) : s;
}

kiln_status_t kiln_compile(kiln_graph_t* g, const kiln_compile_options_t* options,
                           kiln_graph_t** out_graph) {
  *out_graph = NULL;
  kiln_compile_options_t defaults;
  kiln_compile_options_initialize(&defaults);
  const kiln_compile_options_t* o = options ? options : &defaults;
  char what[128];
  struct timespec t0;

  clock_gettime(CLOCK_MONOTONIC, &t0);
  kiln_status_t s = kiln_graph_verify(g);
  if (s) {
    kiln_graph_release(g);
    return kiln_status_annotate(s, "the captured graph is malformed");
  }
  if (o->log) fprintf(o->log, "kiln: input graph: %d nodes, %d values\n", g->n_nodes, g->n_values);

  const kiln_hal_target_t* target = kiln_hal_target_find(o->target);
  if (!target) {
    kiln_graph_release(g);
    return kiln_status_make(KILN_INVALID_ARGUMENT, "no target %s (cpu, reference)",
                            o->target ? o->target : getenv("KILN_TARGET"));
  }
  kiln_graph_t* next = NULL;
  int32_t a = 0, b = 0;
  kiln_compile_before(o, "fold");
  clock_gettime(CLOCK_MONOTONIC, &t0);
  s = kiln_pass_fold(g, target, kiln_pool_default(), o->fold_constants, &next, &a, &b);
  kiln_graph_release(g);
  if (s) return kiln_status_annotate(s, "constant folding");
  g = next;
  /* bf16 weights the fold held as their bf16 numbers (kiln_pass_fold.c). */
  int32_t held = 0;
  size_t held_bytes = 0;
  for (int32_t i = 0; o->log && i < g->n_values; ++i)
    if (g->values[i].kind == KILN_VALUE_CONSTANT && kiln_layout_is_widened_bf16(g->values[i].layout)) {
      ++held;
      held_bytes += g->values[i].nbytes;
    }
  if (held)
    snprintf(what, sizeof what, "%d folded (%d bf16 weights held as bf16, %.1f MiB), %d dead removed",
             a, held, (double)held_bytes / (1 << 20), b);
  else
    snprintf(what, sizeof what, "%d folded, %d dead removed", a, b);
  s = kiln_compile_after(o, "fold", g, t0, what);

  /* Each pass consumes g and yields the next graph. */
#define KILN_RUN_PASS(name, call, fmt)                              \
  if (!s) {                                                         \
    kiln_compile_before(o, name);                                   \
    clock_gettime(CLOCK_MONOTONIC, &t0);                            \
    a = 0;                                                          \
    s = (call);                                                     \
    kiln_graph_release(g);                                          \
    g = next;                                                       \
    if (s) return kiln_status_annotate(s, "pass %s", name);         \
    snprintf(what, sizeof what, fmt, a);                            \
    s = kiln_compile_after(o, name, g, t0, what);                   \
  }
  const kiln_hal_weights_t weights = {o->compute_bf16 ? 2 : o->weights_bf16, o->weights_quant,
                                       o->weights_group, o->weights_asym, o->weights_a8,
                                       o->bf16_in_place && !o->compute_bf16 && !o->weights_quant};
  KILN_RUN_PASS("simplify", kiln_pass_simplify(g, &next, &a), "%d rewrites")
  /* After simplify's CSE (lowp.py widens a bf16 value once per reader), and
   * before it again: the views the casts pass moves next to the GEMMs become
   * transposed reads there. */
  if (o->fuse && o->fold_casts) {
    KILN_RUN_PASS("casts", kiln_pass_casts(g, o->fold_casts, &next, &a), "%d casts folded")
    KILN_RUN_PASS("simplify", kiln_pass_simplify(g, &next, &a), "%d rewrites")
  }
  if (o->fuse) {
    KILN_RUN_PASS("fuse_gemm", kiln_pass_fuse_gemm(g, o->fold_casts, &next, &a), "%d GEMMs fused")
    if (o->fuse_glu)
      KILN_RUN_PASS("fuse_glu", kiln_pass_fuse_glu(g, o->pack_weights, target, &weights, &next, &a), "%d gated pairs fused")
    /* No target without the layout pass: a conv that keeps its bf16
     * weight (a scale input) runs only channels-last. */
    KILN_RUN_PASS("fuse_conv", kiln_pass_fuse_conv(g, o->layout ? target : NULL, &weights, &next, &a),
                  "%d convs fused")
    KILN_RUN_PASS("fuse_attn", kiln_pass_fuse_attention(g, target, &weights, &next, &a), "%d attentions fused")
    KILN_RUN_PASS("fuse_elt", kiln_pass_fuse_eltwise(g, o->fold_casts, &next, &a), "%d eltwise groups fused")
  }
  /* compute_dtype=bf16: attention too (linear layers and convs get there
   * through their packed weights below). */
  if (o->compute_bf16 && o->sdpa_bf16)
    KILN_RUN_PASS("sdpa_bf16", kiln_pass_sdpa_bf16(g, o->sdpa_bf16 == 2, &next, &a), "%d attentions in bf16")
  if (o->fuse && o->layout && !s) {
    kiln_layout_stats_t ls;
    kiln_compile_before(o, "layout");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    s = kiln_pass_layout(g, target, &weights, &next, &ls);
    kiln_graph_release(g);
    g = next;
    if (s) return kiln_status_annotate(s, "pass layout");
    snprintf(what, sizeof what,
             "%d regions NHWC (%d convs, %d pools, %d eltwise, %d reductions), %d conversions; "
             "%d kept NCHW (%d convs)",
             ls.regions, ls.convs, ls.pools, ls.eltwise, ls.reductions, ls.conversions,
             ls.regions_kept, ls.convs_kept);
    s = kiln_compile_after(o, "layout", g, t0, what);
  } else if (o->log && !s) {
    fprintf(o->log, "kiln: pass layout     off%s\n", o->fuse ? " (KILN_LAYOUT=nchw)" : "");
  }
  if (o->pack_weights)
    KILN_RUN_PASS("pack", kiln_pass_pack_weights(g, target, kiln_pool_default(), &weights, &next, &a), "%d weights packed")
  if (o->pack_weights && o->fuse)
    KILN_RUN_PASS("conv_bf16_io", kiln_pass_conv_bf16_io(g, o->compute_bf16, &next, &a), "%d convs store y in bf16")
#undef KILN_RUN_PASS
  /* Why a constant has its form, where the target said (a checkpoint's
   * quantized weight run on its own integers, or dequantized and why). */
  for (int32_t i = 0; !s && o->log && i < g->n_values; ++i)
    if (g->values[i].note)
      fprintf(o->log, "kiln: constant %%%d %s: %s\n", i, g->values[i].name ? g->values[i].name : "",
              g->values[i].note);
  if (!s && o->log) kiln_hal_describe_engines(target, g, "kiln: ", o->log);
  if (s) {
    kiln_graph_release(g);
    return s;
  }
  *out_graph = g;
  return kiln_ok();
}
