/* Model execution: bind buffers (constants, caller inputs and outputs, the
 * arena), run the nodes in order through the CPU target, copy the outputs
 * that could not be written in place. Nothing is allocated per call. */
#include "runtime/kiln_model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/kiln_hal.h"
#include "runtime/kiln_plan_io.h"

struct kiln_model_s {
  kiln_graph_t* graph;
  void* blob;
  kiln_pool_t* pool;
  kiln_plan_t plan;
  void* arena;
  void** bufs; /* per value, rebound each call */
  pthread_mutex_t lock;
  int profiling;
  uint64_t* times_ns;
  uint64_t* wait_ns; /* per node: host-team barrier wait, not in times_ns */
  int64_t runs;
};

kiln_status_t kiln_model_create(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                kiln_model_t** out_model) {
  return kiln_model_create_with_plan(graph, blob, pool, NULL, 0, out_model);
}

kiln_status_t kiln_model_create_with_plan(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                          const void* plan, size_t plan_size,
                                          kiln_model_t** out_model) {
  *out_model = NULL;
  kiln_allocator_t sys = kiln_allocator_system();
  kiln_model_t* m = calloc(1, sizeof(*m));
  if (!m) {
    kiln_graph_release(graph);
    kiln_allocator_free(sys, blob);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "model");
  }
  m->graph = graph;
  m->blob = blob;
  pthread_mutex_init(&m->lock, NULL);
  kiln_status_t s = kiln_graph_verify(graph);
  for (int32_t i = 0; !s && i < graph->n_nodes; ++i) {
    s = kiln_hal_cpu_supports(graph, &graph->nodes[i]);
    if (s) s = kiln_status_annotate(s, "node %d (%s%s%s)", i, kiln_op_name(graph->nodes[i].op),
                                    graph->nodes[i].origin ? " from " : "",
                                    graph->nodes[i].origin ? graph->nodes[i].origin : "");
  }
  /* A stored plan is used once it has passed every check (kiln_plan_io.c). */
  if (!s) s = plan ? kiln_plan_load(graph, plan, plan_size, &m->plan) : kiln_plan_build(graph, &m->plan);
  if (!s) s = kiln_allocator_malloc(sys, m->plan.arena_size, &m->arena);
  if (!s) {
    m->bufs = calloc((size_t)graph->n_values + 1, sizeof(void*));
    m->times_ns = calloc((size_t)graph->n_nodes + 1, sizeof(uint64_t));
    m->wait_ns = calloc((size_t)graph->n_nodes + 1, sizeof(uint64_t));
    if (!m->bufs || !m->times_ns || !m->wait_ns) s = kiln_status_make(KILN_OUT_OF_MEMORY, "model buffers");
  }
  if (s) {
    kiln_model_release(m);
    return s;
  }
  m->pool = pool ? pool : kiln_pool_default();
  /* Constants and arena values never move: bind them once. */
  for (int32_t v = 0; v < graph->n_values; ++v) {
    const kiln_value_t* root = &graph->values[m->plan.root[v]];
    if (root->kind == KILN_VALUE_CONSTANT)
      m->bufs[v] = (char*)root->data + m->plan.view_offset[v];
    else if (m->plan.offset[v] >= 0) m->bufs[v] = (char*)m->arena + m->plan.offset[v];
  }
  *out_model = m;
  return kiln_ok();
}

void kiln_model_release(kiln_model_t* m) {
  if (!m) return;
  kiln_allocator_t sys = kiln_allocator_system();
  kiln_graph_release(m->graph);
  kiln_allocator_free(sys, m->blob);
  kiln_plan_deinitialize(&m->plan);
  kiln_allocator_free(sys, m->arena);
  free(m->bufs);
  free(m->times_ns);
  free(m->wait_ns);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

const kiln_graph_t* kiln_model_graph(const kiln_model_t* m) { return m->graph; }
const kiln_plan_t* kiln_model_plan(const kiln_model_t* m) { return &m->plan; }

static kiln_status_t kiln_model_check(const char* what, int32_t index,
                                      const kiln_value_t* want, const kiln_tensor_t* got) {
  int same = got->dtype == want->dtype && got->rank == want->rank && got->data != NULL;
  for (int32_t d = 0; same && d < want->rank; ++d) same = got->shape[d] == want->shape[d];
  if (same) return kiln_ok();
  if (!got->data && kiln_value_numel(want) == 0) return kiln_ok();
  char wbuf[128], gbuf[128];
  kiln_value_t as_value;
  memset(&as_value, 0, sizeof(as_value));
  as_value.dtype = got->dtype;
  as_value.rank = got->rank >= 0 && got->rank <= KILN_MAX_RANK ? got->rank : 0;
  if (got->shape) memcpy(as_value.shape, got->shape, (size_t)as_value.rank * sizeof(int64_t));
  return kiln_status_make(KILN_INVALID_ARGUMENT, "%s %d%s%s%s: expected %s, got %s%s", what, index,
                          want->name ? " ('" : "", want->name ? want->name : "",
                          want->name ? "')" : "", kiln_value_describe(want, wbuf, sizeof wbuf),
                          kiln_value_describe(&as_value, gbuf, sizeof gbuf),
                          got->data ? "" : " (no data)");
}

static uint64_t kiln_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

kiln_status_t kiln_model_run(kiln_model_t* m, const kiln_tensor_t* inputs, int32_t n_inputs,
                             const kiln_tensor_t* outputs, int32_t n_outputs) {
  return kiln_model_run_hooked(m, inputs, n_inputs, outputs, n_outputs, NULL, NULL);
}

kiln_status_t kiln_model_run_hooked(kiln_model_t* m, const kiln_tensor_t* inputs,
                                    int32_t n_inputs, const kiln_tensor_t* outputs,
                                    int32_t n_outputs, kiln_model_node_hook_fn hook,
                                    void* hook_ctx) {
  const kiln_graph_t* g = m->graph;
  KILN_CHECK_ARG(n_inputs == g->n_inputs, "the model takes %d inputs, got %d", g->n_inputs,
                 n_inputs);
  KILN_CHECK_ARG(n_outputs == g->n_outputs, "the model has %d outputs, got %d buffers",
                 g->n_outputs, n_outputs);
  for (int32_t i = 0; i < n_inputs; ++i)
    KILN_RETURN_IF_ERROR(
        kiln_model_check("input", i, &g->values[g->inputs[i]], &inputs[i]));
  for (int32_t o = 0; o < n_outputs; ++o)
    KILN_RETURN_IF_ERROR(
        kiln_model_check("output", o, &g->values[g->outputs[o]], &outputs[o]));

  pthread_mutex_lock(&m->lock);
  const kiln_plan_t* p = &m->plan;
  void** bufs = m->bufs;
  for (int32_t i = 0; i < n_inputs; ++i) bufs[g->inputs[i]] = inputs[i].data;
  for (int32_t v = 0; v < g->n_values; ++v) {
    int32_t r = p->root[v];
    if (p->bound_output[r] >= 0)
      bufs[v] = (char*)outputs[p->bound_output[r]].data + p->view_offset[v];
    else if (g->values[r].kind == KILN_VALUE_INPUT)
      bufs[v] = (char*)bufs[r] + p->view_offset[v];
  }
  kiln_status_t s = kiln_ok();
  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    /* A view the plan realised needs no kernel. */
    int64_t view_bytes;
    if (kiln_node_is_view(g, n, &view_bytes) &&
        bufs[n->outputs[0]] == (char*)bufs[n->inputs[0]] + view_bytes)
      continue;
    if (hook) hook(hook_ctx, ni, 0);
    if (m->profiling) {
      /* The wait at the host team's closing barrier is the scheduler's, not
       * the kernel's: counted apart (kiln_pool_set_wait_counter). */
      uint64_t wait = 0;
      kiln_pool_set_wait_counter(&wait);
      uint64_t t0 = kiln_now_ns();
      s = kiln_hal_cpu_run_node(g, n, bufs, m->pool);
      uint64_t dt = kiln_now_ns() - t0;
      kiln_pool_set_wait_counter(NULL);
      if (wait > dt) wait = dt;
      m->times_ns[ni] += dt - wait;
      m->wait_ns[ni] += wait;
    } else {
      s = kiln_hal_cpu_run_node(g, n, bufs, m->pool);
    }
    if (hook) hook(hook_ctx, ni, 1);
  }
  for (int32_t o = 0; o < n_outputs && !s; ++o) {
    if (!p->output_copy[o]) continue;
    size_t bytes = kiln_value_dense_bytes(&g->values[g->outputs[o]]);
    if (bytes && outputs[o].data != bufs[g->outputs[o]])
      memmove(outputs[o].data, bufs[g->outputs[o]], bytes);
  }
  if (m->profiling) m->runs++;
  pthread_mutex_unlock(&m->lock);
  return s;
}

void kiln_model_set_profiling(kiln_model_t* m, int on) { m->profiling = on; }

void kiln_model_set_pool(kiln_model_t* m, kiln_pool_t* pool) {
  pthread_mutex_lock(&m->lock);
  m->pool = pool ? pool : kiln_pool_default();
  pthread_mutex_unlock(&m->lock);
}

kiln_pool_t* kiln_model_pool(const kiln_model_t* m) { return m->pool; }

const uint64_t* kiln_model_profile(const kiln_model_t* m, int64_t* out_runs) {
  *out_runs = m->runs;
  return m->times_ns;
}

const uint64_t* kiln_model_profile_wait(const kiln_model_t* m) { return m->wait_ns; }

void kiln_model_profile_reset(kiln_model_t* m) {
  memset(m->times_ns, 0, sizeof(uint64_t) * (size_t)(m->graph->n_nodes + 1));
  memset(m->wait_ns, 0, sizeof(uint64_t) * (size_t)(m->graph->n_nodes + 1));
  m->runs = 0;
}
