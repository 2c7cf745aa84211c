/* Weight packing: every constant a node reads is put in the form the
 * target wants for that node (its constant_form: on the CPU, a
 * LINEAR's weight becomes the GEMM's packed panels, in fp32, bf16 or
 * int8 / int4 as the weight options say, and a convolution's its panels),
 * computed once here so that no run ever packs a weight. The pass knows no
 * layout itself: it asks the target for a form per (node, input), makes
 * each distinct (constant, form) once, and points the nodes at it; a node
 * whose form equals the constant's own layout reads the constant as it is.
 * Packing is memory-bound and the weights are independent, so they are
 * packed in parallel over the pool: it is most of a large model's compile
 * time. A constant with a key (a frozen parameter, kiln_graph.h) is packed
 * once per form for every graph made from it (src/base/kiln_shared.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"

typedef struct {
  const kiln_value_t* w;
  kiln_hal_constant_form_t form;
  int32_t packed; /* the packed constant's id in the new graph */
  int32_t next;   /* the next job of the same constant, or -1 */
  int fresh;      /* 1: packed here into out (not found shared) */
  kiln_status_t status; /* the packing's, when it failed */
  char key[320];  /* the packed form's shared key, or "" */
  void* out;
} kiln_pack_job_t;

typedef struct {
  const kiln_hal_target_t* target;
  kiln_pack_job_t* jobs;
} kiln_pack_ctx_t;

static void kiln_pack_task(void* ctx, size_t task, int thread) {
  (void)thread;
  const kiln_pack_ctx_t* c = ctx;
  kiln_pack_job_t* job = &c->jobs[task];
  if (job->fresh) job->status = c->target->constant_pack(job->w, &job->form, job->out);
}

static int kiln_pack_same_form(const kiln_hal_constant_form_t* a,
                               const kiln_hal_constant_form_t* b) {
  return a->layout == b->layout && a->nbytes == b->nbytes && a->detail[0] == b->detail[0] &&
         a->detail[1] == b->detail[1] && a->detail[2] == b->detail[2];
}

static kiln_status_t kiln_pack_add_value(kiln_rewriter_t* rw, const kiln_graph_t* g,
                                         kiln_pack_job_t* j);

/* Adds the packed constant of job j to the new graph: found under its key
 * in the shared registry, or a new buffer to pack into. */
static kiln_status_t kiln_pack_add(kiln_rewriter_t* rw, const kiln_graph_t* g,
                                   kiln_pack_job_t* j) {
  const kiln_value_t* w = j->w;
  j->key[0] = '\0';
  if (w->key)
    snprintf(j->key, sizeof j->key, "%s|pack:%d:%zu:%lld:%lld:%lld", w->key, (int)j->form.layout,
             j->form.nbytes, (long long)j->form.detail[0], (long long)j->form.detail[1],
             (long long)j->form.detail[2]);
  kiln_status_t s = kiln_pack_add_value(rw, g, j);
  if (!s) rw->dst->values[j->packed].note = j->form.note;
  return s;
}

static kiln_status_t kiln_pack_add_value(kiln_rewriter_t* rw, const kiln_graph_t* g,
                                         kiln_pack_job_t* j) {
  const kiln_value_t* w = j->w;
  kiln_shared_t* have = j->key[0] ? kiln_shared_lookup(j->key) : NULL;
  if (have) {
    kiln_status_t s = kiln_graph_add_constant_shared(rw->dst, w->name, w->dtype, w->rank,
                                                     w->shape, j->form.layout, have, &j->packed);
    kiln_shared_release(have);
    if (!s) s = kiln_graph_set_constant_key(rw->dst, j->packed, j->key);
    j->key[0] = '\0'; /* nothing to publish */
    return s;
  }
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, j->form.nbytes, &j->out));
  KILN_RETURN_IF_ERROR(kiln_graph_add_constant_owned(rw->dst, w->name, w->dtype, w->rank,
                                                     w->shape, j->form.layout, j->out,
                                                     j->form.nbytes, &j->packed));
  j->fresh = 1;
  return kiln_ok();
}

/* Publishes job j's packed bytes under its key (another compile may have
 * done so meanwhile: then its bytes are used and ours freed). */
static kiln_status_t kiln_pack_publish(kiln_rewriter_t* rw, const kiln_graph_t* g,
                                       const kiln_pack_job_t* j) {
  kiln_value_t* pv = &rw->dst->values[j->packed];
  kiln_shared_t* entry;
  pv->owned_data = NULL; /* the entry owns the bytes now */
  kiln_status_t s = kiln_shared_publish(j->key, g->allocator, j->out, pv->nbytes, &entry);
  if (s) {
    pv->data = NULL;
    pv->nbytes = 0;
    return s;
  }
  pv->data = kiln_shared_data(entry);
  pv->shared = entry;
  return kiln_graph_set_constant_key(rw->dst, j->packed, j->key);
}

kiln_status_t kiln_pass_pack_weights(kiln_graph_t* g, const kiln_hal_target_t* target,
                                     kiln_pool_t* pool, const kiln_hal_weights_t* weights,
                                     kiln_graph_t** out_graph, int32_t* out_packed) {
  *out_graph = NULL;
  *out_packed = 0;
  const size_t slots = (size_t)g->n_nodes * KILN_MAX_NODE_INPUTS + 1;
  int32_t* first_job = malloc(sizeof(int32_t) * (size_t)(g->n_values + 1));
  int32_t* job_of = malloc(sizeof(int32_t) * slots); /* per (node, input): a job or -1 */
  kiln_pack_job_t* jobs = NULL;
  int32_t n_jobs = 0, cap_jobs = 0, n_fresh = 0;
  kiln_rewriter_t rw;
  kiln_status_t s = !first_job || !job_of
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "pack pass")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) {
    free(first_job);
    free(job_of);
    free(jobs);
    return s;
  }
  /* Ask the target for each constant input's form; add one packed constant
   * per distinct (constant, form); then pack them all at once. */
  for (int32_t v = 0; v < g->n_values; ++v) first_job[v] = -1;
  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs && !s; ++i) {
      int32_t v = n->inputs[i], *slot = &job_of[(size_t)ni * KILN_MAX_NODE_INPUTS + (size_t)i];
      *slot = -1;
      if (v < 0 || g->values[v].kind != KILN_VALUE_CONSTANT) continue;
      kiln_hal_constant_form_t form;
      s = target->constant_form(g, n, i, weights, &form);
      if (s || form.layout == g->values[v].layout) continue;
      int32_t j = first_job[v];
      while (j >= 0 && !kiln_pack_same_form(&jobs[j].form, &form)) j = jobs[j].next;
      if (j < 0 && n_jobs == cap_jobs) {
        cap_jobs = cap_jobs ? 2 * cap_jobs : 16;
        kiln_pack_job_t* grown = realloc(jobs, sizeof(kiln_pack_job_t) * (size_t)cap_jobs);
        if (!grown) {
          s = kiln_status_make(KILN_OUT_OF_MEMORY, "pack pass");
          break;
        }
        jobs = grown;
      }
      if (j < 0) {
        j = n_jobs++;
        memset(&jobs[j], 0, sizeof(jobs[j]));
        jobs[j].w = &g->values[v];
        jobs[j].form = form;
        jobs[j].next = first_job[v];
        first_job[v] = j;
        s = kiln_pack_add(&rw, g, &jobs[j]);
        n_fresh += jobs[j].fresh;
      }
      *slot = j;
    }
  }
  kiln_pack_ctx_t ctx = {target, jobs};
  if (!s) kiln_pool_parallel_for(pool, (size_t)n_jobs, kiln_pack_task, &ctx);
  for (int32_t j = 0; j < n_jobs; ++j) { /* the first failure, by name; the others freed */
    if (jobs[j].status && !s)
      s = kiln_status_annotate(jobs[j].status, "packing constant '%s'",
                               jobs[j].w->name ? jobs[j].w->name : "?");
    else
      kiln_status_free(jobs[j].status);
  }
  for (int32_t j = 0; j < n_jobs && !s; ++j)
    if (jobs[j].key[0]) s = kiln_pack_publish(&rw, g, &jobs[j]);
  *out_packed = n_fresh;
  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    const int32_t* slot = &job_of[(size_t)ni * KILN_MAX_NODE_INPUTS];
    int32_t ins[KILN_MAX_NODE_INPUTS], any = 0;
    for (int32_t i = 0; i < n->n_inputs; ++i) any |= slot[i] >= 0;
    if (!any) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    for (int32_t i = 0; i < n->n_inputs && !s; ++i) {
      if (slot[i] >= 0) ins[i] = jobs[slot[i]].packed;
      else s = kiln_rewriter_value(&rw, n->inputs[i], &ins[i]);
    }
    if (!s)
      s = kiln_graph_add_node(rw.dst, n->op, ins, n->n_inputs, n->params, KILN_MAX_PARAMS,
                              n->fparams, KILN_MAX_FPARAMS, n->origin, &rw.remap[n->outputs[0]]);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
  free(first_job);
  free(job_of);
  free(jobs);
  return s;
}
