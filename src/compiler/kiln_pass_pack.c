/* Weight packing: every LINEAR's dense (K, N) weight (or its transpose,
 * KILN_LAYOUT_TRANSPOSED_2D) is replaced by its GEMM-packed form
 * (kiln_gemm_f32_pack_b), and every CONV2D's constant dense weight
 * (except depthwise, whose direct loop reads it dense) by its conv-packed
 * form (kiln_conv2d_f32_pack_weight), computed once here so that no run
 * ever packs a weight. A weight shared by several nodes is packed once.
 * With bf16, LINEAR weights are packed as bf16 instead
 * (kiln_gemm_bf16_pack_b): the model then computes with bf16-rounded
 * weights, in fp32. For bf16 compute (bf16 == 2) they are packed in VNNI
 * pairs (kiln_gemm_bf16_vnni_pack_b, KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI),
 * which also tells the CPU target to round the activations to bf16 and run
 * the bf16 engines. With quant, LINEAR weights are quantized instead
 * (kiln_gemm_quant_pack_b: int8 per output channel, KILN_LAYOUT_GEMM_PACKED_B_Q8,
 * or int4 in groups along K, KILN_LAYOUT_GEMM_PACKED_B_Q4). Packing is memory-bound and the weights are
 * independent, so they are packed in parallel over the pool: it is most of
 * a large model's compile time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/gemm/kiln_gemm.h"

typedef struct {
  const kiln_value_t* w;
  int32_t packed;      /* the packed constant's id in the new graph */
  char key[320];       /* the packed form's shared key, or "" */
  void* out;
  int bf16;
  const int* quant;    /* LINEAR quantized (bits, group, asym), or NULL */
  int64_t conv_groups; /* > 0: a CONV2D weight packed for this many groups */
  int conv_panel;      /* and in panels of this many channels */
} kiln_pack_job_t;

static void kiln_pack_task(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pack_job_t* job = &((const kiln_pack_job_t*)ctx)[task];
  const kiln_value_t* w = job->w;
  if (job->conv_groups > 0) {
    kiln_conv2d_f32_pack_weight(w->shape[0], w->shape[1] * w->shape[2] * w->shape[3],
                                job->conv_groups, job->conv_panel, w->data, job->out);
    return;
  }
  int transposed = w->layout == KILN_LAYOUT_TRANSPOSED_2D;
  if (job->quant)
    kiln_gemm_quant_pack_b(w->shape[0], w->shape[1], w->data, transposed ? 1 : w->shape[1],
                           transposed ? w->shape[0] : 1, job->quant[0], job->quant[1],
                           job->quant[2], job->out);
  else if (job->bf16 == 2)
    kiln_gemm_bf16_vnni_pack_b(w->shape[0], w->shape[1], w->data, transposed ? 1 : w->shape[1],
                               transposed ? w->shape[0] : 1, job->out);
  else if (job->bf16)
    kiln_gemm_bf16_pack_b(w->shape[0], w->shape[1], w->data, transposed ? 1 : w->shape[1],
                          transposed ? w->shape[0] : 1, job->out);
  else
    kiln_gemm_f32_pack_b(w->shape[0], w->shape[1], w->data, transposed ? 1 : w->shape[1],
                         transposed ? w->shape[0] : 1, job->out);
}

/* A CONV2D whose weight is a dense f32 constant, not depthwise: its groups,
 * else 0. */
static int64_t kiln_pack_conv_groups(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_CONV2D) return 0;
  const kiln_value_t *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  int64_t groups = n->params[6];
  if (w->kind != KILN_VALUE_CONSTANT || w->layout != KILN_LAYOUT_DENSE || w->dtype != KILN_F32 ||
      kiln_value_numel(w) == 0)
    return 0;
  if (groups == x->shape[1] && groups == w->shape[0]) return 0; /* depthwise */
  return groups;
}

static int kiln_pack_wanted(const kiln_graph_t* g, const kiln_node_t* n) {
  if (kiln_pack_conv_groups(g, n) > 0) return 1;
  if (n->op != KILN_OP_LINEAR || g->values[n->inputs[1]].kind != KILN_VALUE_CONSTANT) return 0;
  kiln_layout_t l = g->values[n->inputs[1]].layout;
  return l == KILN_LAYOUT_DENSE || l == KILN_LAYOUT_TRANSPOSED_2D;
}

/* The panel width the conv kernel picks for node n's shape. */
static int kiln_pack_conv_panel(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  const kiln_value_t* y = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  kiln_conv2d_f32_args_t a = {0};
  a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
  a.o = w->shape[0], a.kh = w->shape[2], a.kw = w->shape[3], a.ho = y->shape[2], a.wo = y->shape[3];
  a.sh = p[0], a.sw = p[1], a.ph = p[2], a.pw = p[3], a.dh = p[4], a.dw = p[5], a.groups = p[6];
  return kiln_conv2d_f32_panel_for(&a);
}

/* Whether node n's conv weight was packed for n's groups and panel. */
static int kiln_pack_job_fits(const kiln_pack_job_t* jobs, int32_t n_jobs, const kiln_graph_t* g,
                              const kiln_node_t* n) {
  for (int32_t j = 0; j < n_jobs; ++j)
    if (jobs[j].w == &g->values[n->inputs[1]])
      return jobs[j].conv_groups == n->params[6] && jobs[j].conv_panel == kiln_pack_conv_panel(g, n);
  return 0;
}

kiln_status_t kiln_pass_pack_weights(kiln_graph_t* g, kiln_pool_t* pool, int bf16,
                                     const int* quant, kiln_graph_t** out_graph,
                                     int32_t* out_packed) {
  *out_graph = NULL;
  *out_packed = 0;
  int32_t* packed_of = malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  kiln_pack_job_t* jobs = malloc(sizeof(kiln_pack_job_t) * (size_t)(g->n_nodes + 1));
  int32_t n_jobs = 0;
  kiln_rewriter_t rw;
  kiln_status_t s = !packed_of || !jobs ? kiln_status_make(KILN_OUT_OF_MEMORY, "pack pass")
                                        : kiln_rewriter_initialize(&rw, g);
  if (s) {
    free(packed_of);
    free(jobs);
    return s;
  }
  /* Allocate every packed buffer and add it as a constant, then pack them
   * all at once, then emit the nodes. */
  for (int32_t v = 0; v < g->n_values; ++v) packed_of[v] = -1;
  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int32_t wid = n->inputs[1];
    if (!kiln_pack_wanted(g, n) || packed_of[wid] >= 0) continue;
    const kiln_value_t* w = &g->values[wid];
    int64_t conv_groups = kiln_pack_conv_groups(g, n);
    int conv_panel = conv_groups > 0 ? kiln_pack_conv_panel(g, n) : 0;
    int job_bf16 = conv_groups == 0 ? bf16 : 0;
    const int* job_quant = conv_groups == 0 && quant && quant[0] ? quant : NULL;
    size_t bytes = job_bf16 == 2 ? kiln_gemm_bf16_vnni_packed_size(w->shape[0], w->shape[1])
                   : job_bf16    ? kiln_gemm_bf16_packed_size(w->shape[0], w->shape[1])
                                 : kiln_gemm_f32_packed_size(w->shape[0], w->shape[1]);
    if (job_quant) {
      bytes = kiln_gemm_quant_packed_size(w->shape[0], w->shape[1], job_quant[0], job_quant[1],
                                          job_quant[2]);
      if (!bytes) {
        s = kiln_status_make(KILN_INVALID_ARGUMENT, "weights: int%d with group %d%s is not a "
                             "supported quantization", job_quant[0], job_quant[1],
                             job_quant[2] ? " (asymmetric)" : "");
        break;
      }
    }
    if (conv_groups > 0)
      bytes = kiln_conv2d_f32_packed_size(w->shape[0], w->shape[1] * w->shape[2] * w->shape[3],
                                          conv_groups, conv_panel);
    kiln_layout_t layout = conv_panel == KILN_CONV_PANEL_WIDE ? KILN_LAYOUT_CONV2D_PACKED_16
                           : conv_panel ? KILN_LAYOUT_CONV2D_PACKED
                           : job_quant ? (job_quant[0] == 8 ? KILN_LAYOUT_GEMM_PACKED_B_Q8
                                                            : KILN_LAYOUT_GEMM_PACKED_B_Q4)
                           : job_bf16 == 2 ? KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI
                           : job_bf16   ? KILN_LAYOUT_GEMM_PACKED_B_BF16
                                        : KILN_LAYOUT_GEMM_PACKED_B;
    /* A weight whose contents have a key (a frozen parameter) is packed
     * once per form for every graph made from it. */
    char key[320] = "";
    if (w->key && conv_groups == 0) /* (a conv weight's fit is checked per job below) */
      snprintf(key, sizeof key, "%s|pack:%d:%lld:%d:%d:%d:%d", w->key, (int)layout,
               (long long)conv_groups, conv_panel, job_quant ? job_quant[0] : 0,
               job_quant ? job_quant[1] : 0, job_quant ? job_quant[2] : 0);
    kiln_shared_t* have = key[0] ? kiln_shared_lookup(key) : NULL;
    if (have) {
      s = kiln_graph_add_constant_shared(rw.dst, w->name, KILN_F32, w->rank, w->shape, layout,
                                         have, &packed_of[wid]);
      kiln_shared_release(have);
      if (!s) s = kiln_graph_set_constant_key(rw.dst, packed_of[wid], key);
      if (s) break;
      continue;
    }
    void* buf;
    s = kiln_allocator_malloc(g->allocator, bytes, &buf);
    if (s) break;
    s = kiln_graph_add_constant_owned(rw.dst, w->name, KILN_F32, w->rank, w->shape, layout, buf,
                                      bytes, &packed_of[wid]);
    if (s) break;
    jobs[n_jobs].packed = packed_of[wid];
    memcpy(jobs[n_jobs].key, key, sizeof key);
    jobs[n_jobs].w = w;
    jobs[n_jobs].out = buf;
    jobs[n_jobs].bf16 = job_bf16;
    jobs[n_jobs].quant = job_quant;
    jobs[n_jobs].conv_groups = conv_groups;
    jobs[n_jobs].conv_panel = conv_panel;
    n_jobs++;
  }
  if (!s) kiln_pool_parallel_for(pool, (size_t)n_jobs, kiln_pack_task, jobs);
  /* Publish the keyed forms once packed (another compile may have done so
   * meanwhile: then its bytes are used and ours freed). */
  for (int32_t j = 0; j < n_jobs && !s; ++j) {
    if (!jobs[j].key[0]) continue;
    kiln_value_t* pv = &rw.dst->values[jobs[j].packed];
    kiln_shared_t* entry;
    pv->owned_data = NULL; /* the entry owns the bytes now */
    s = kiln_shared_publish(jobs[j].key, g->allocator, jobs[j].out, pv->nbytes, &entry);
    if (s) {
      pv->data = NULL;
      pv->nbytes = 0;
      break;
    }
    pv->data = kiln_shared_data(entry);
    pv->shared = entry;
    s = kiln_graph_set_constant_key(rw.dst, jobs[j].packed, jobs[j].key);
  }
  *out_packed = n_jobs;
  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    /* A weight shared by convs of different groups or shapes was packed
     * for the first: the others keep it dense. */
    if (!kiln_pack_wanted(g, n) ||
        (kiln_pack_conv_groups(g, n) > 0 && !kiln_pack_job_fits(jobs, n_jobs, g, n))) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    int32_t ins[KILN_MAX_NODE_INPUTS];
    for (int32_t i = 0; i < n->n_inputs && !s; ++i) {
      if (i == 1) ins[1] = packed_of[n->inputs[1]];
      else s = kiln_rewriter_value(&rw, n->inputs[i], &ins[i]);
    }
    if (!s)
      s = kiln_graph_add_node(rw.dst, n->op, ins, n->n_inputs, n->params, KILN_MAX_PARAMS,
                              n->fparams, KILN_MAX_FPARAMS, n->origin, &rw.remap[n->outputs[0]]);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
  free(packed_of);
  free(jobs);
  return s;
}
