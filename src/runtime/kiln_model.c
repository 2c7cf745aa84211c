/* Model execution on a target (hal/kiln_hal.h): bind buffers (constants,
 * caller inputs and outputs, the arena), run the nodes in order through
 * the target's kernel entries (each node prepared once, when its graph is
 * planned), copy the outputs that could not be written in place. A target
 * with its own memory gets the arena, the constants and buffers for the
 * inputs and outputs in its memory (made once per plan), the inputs copied
 * in and the outputs copied out per call, and is synchronized before the
 * call returns. Nothing is allocated per call. */
#include "runtime/kiln_model.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/kiln_hal.h"
#include "runtime/kiln_plan_io.h"

/* What runs one concrete graph: its plan and buffer table. A concrete
 * model has one, over its own graph; a symbolic model keeps a few, one per
 * binding of its symbols (the instance graph is the exec's). */
typedef struct kiln_model_exec_s {
  kiln_graph_t* graph; /* owned when it is an instance */
  kiln_plan_t plan;
  void** bufs;         /* per value, rebound each call */
  void* bound_arena;   /* the arena bufs were bound to */
  const kiln_hal_entry_t** entry; /* per node: its kernel entry */
  unsigned char* prep;            /* every node's prepared arguments */
  size_t* prep_off;               /* per node: its offset in prep */
  /* A target with its own memory: per value root, its device copy (the
   * constants), and per input / output, its device buffer. */
  void** dev_const;
  void** dev_in;
  void** dev_out;
  int64_t key[KILN_SYM_MAX_VARS];
  uint64_t last_use;
  int used;
} kiln_model_exec_t;

#define KILN_MODEL_EXECS 4

/* A symbolic model's arena items get this many percent more bytes than the
 * binding that placed them needs: a decode step's cache grows by one
 * position, and the items that grow with it then fit for the next ~25 % of
 * growth with the same offsets (kiln_plan_build_from) instead of being
 * placed again every step. */
#define KILN_MODEL_PLAN_HEADROOM 25

struct kiln_model_s {
  const kiln_hal_target_t* target;
  kiln_graph_t* graph; /* concrete, or the symbolic template */
  void* blob;
  kiln_pool_t* pool;
  int symbolic;
  kiln_model_exec_t execs[KILN_MODEL_EXECS];
  int32_t current; /* the exec of the latest call */
  uint64_t clock;
  int64_t* sym_values; /* per expression, for the latest binding */
  kiln_graph_sym_sites_t sites; /* where the template's sizes are symbolic */
  void* arena;         /* shared by the execs: one call runs at a time */
  size_t arena_size;
  pthread_mutex_t lock;
  int profiling;
  uint64_t* times_ns;
  uint64_t* wait_ns; /* per node: host-team barrier wait, not in times_ns */
  int64_t runs;
  int64_t instances;      /* symbolic: instances made (a binding not cached) */
  uint64_t instance_ns;   /* and the time they took: bind to planned */
  int64_t rebinds;        /* of those, an old instance bound again in place */
  int64_t plans_kept;     /* of those, with its plan kept (kiln_plan_fits) */
  int64_t plans_shared;   /* or with another instance's plan, which fit */
};

/* Frees n target buffers (NULL entries skipped) and the array. */
static void kiln_model_free_device(const kiln_hal_target_t* t, void** bufs, int32_t n) {
  for (int32_t i = 0; bufs && i < n; ++i)
    if (bufs[i]) t->free(bufs[i]);
  free(bufs);
}

static void kiln_model_exec_clear(kiln_model_t* m, kiln_model_exec_t* e) {
  if (e->graph) {
    kiln_model_free_device(m->target, e->dev_const, e->graph->n_values);
    kiln_model_free_device(m->target, e->dev_in, e->graph->n_inputs);
    kiln_model_free_device(m->target, e->dev_out, e->graph->n_outputs);
  }
  if (e->graph != m->graph) kiln_graph_release(e->graph);
  kiln_plan_deinitialize(&e->plan);
  free(e->bufs);
  free(e->entry);
  free(e->prep);
  free(e->prep_off);
  memset(e, 0, sizeof(*e));
}

/* Each node's kernel entry and its prepared arguments (64-byte aligned
 * slots in one block): what a call needs beyond its buffers, worked out
 * once per concrete graph. */
static kiln_status_t kiln_model_exec_prepare(const kiln_model_t* m, kiln_model_exec_t* e) {
  const kiln_graph_t* g = e->graph;
  size_t total = 0;
  e->entry = calloc((size_t)g->n_nodes + 1, sizeof(*e->entry));
  e->prep_off = calloc((size_t)g->n_nodes + 1, sizeof(size_t));
  if (!e->entry || !e->prep_off) return kiln_status_make(KILN_OUT_OF_MEMORY, "model nodes");
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    e->entry[i] = kiln_hal_entry(m->target, &g->nodes[i]);
    e->prep_off[i] = total;
    total += (e->entry[i]->prep_size + 63) & ~(size_t)63;
  }
  if (total && !(e->prep = aligned_alloc(64, total)))
    return kiln_status_make(KILN_OUT_OF_MEMORY, "model: %zu bytes of prepared arguments", total);
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (!e->entry[i]->prepare) continue;
    kiln_status_t s = e->entry[i]->prepare(g, n, e->prep + e->prep_off[i]);
    if (s) return kiln_status_annotate(s, "node %d (%s)", i, kiln_op_name(n->op));
  }
  return kiln_ok();
}

/* A target with its own memory: the constants copied in (each root once),
 * and a buffer per input and output, all made when the graph is planned. */
static kiln_status_t kiln_model_exec_device(const kiln_model_t* m, kiln_model_exec_t* e) {
  const kiln_hal_target_t* t = m->target;
  const kiln_graph_t* g = e->graph;
  e->dev_const = calloc((size_t)g->n_values + 1, sizeof(void*));
  e->dev_in = calloc((size_t)g->n_inputs + 1, sizeof(void*));
  e->dev_out = calloc((size_t)g->n_outputs + 1, sizeof(void*));
  if (!e->dev_const || !e->dev_in || !e->dev_out)
    return kiln_status_make(KILN_OUT_OF_MEMORY, "model: device buffers");
  for (int32_t v = 0; v < g->n_values; ++v) {
    const kiln_value_t* c = &g->values[v];
    if (c->kind != KILN_VALUE_CONSTANT || e->plan.root[v] != v || !c->nbytes) continue;
    KILN_RETURN_IF_ERROR(t->alloc(c->nbytes, &e->dev_const[v]));
    KILN_RETURN_IF_ERROR(t->copy(e->dev_const[v], c->data, c->nbytes, KILN_HAL_COPY_TO_DEVICE));
  }
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    size_t bytes = kiln_value_dense_bytes(&g->values[g->inputs[i]]);
    if (bytes) KILN_RETURN_IF_ERROR(t->alloc(bytes, &e->dev_in[i]));
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) {
    size_t bytes = kiln_value_dense_bytes(&g->values[g->outputs[o]]);
    if (bytes) KILN_RETURN_IF_ERROR(t->alloc(bytes, &e->dev_out[o]));
  }
  return kiln_ok();
}

/* Grows the arena the execs share to hold `size` bytes. */
static kiln_status_t kiln_model_arena_fit(kiln_model_t* m, size_t size) {
  if (size <= m->arena_size) return kiln_ok();
  if (m->arena) m->target->free(m->arena);
  m->arena = NULL;
  m->arena_size = 0;
  KILN_RETURN_IF_ERROR(m->target->alloc(size, &m->arena));
  m->arena_size = size;
  return kiln_ok();
}

/* Checks the target supports every node, plans (or loads a stored plan),
 * grows the shared arena to fit. Takes ownership of an instance graph. */
static kiln_status_t kiln_model_exec_init(kiln_model_t* m, kiln_model_exec_t* e, kiln_graph_t* g,
                                          const void* plan, size_t plan_size) {
  memset(e, 0, sizeof(*e));
  e->graph = g;
  kiln_status_t s = kiln_ok();
  for (int32_t i = 0; !s && i < g->n_nodes; ++i) {
    s = kiln_hal_supports(m->target, g, &g->nodes[i]);
    if (s) s = kiln_status_annotate(s, "node %d (%s%s%s)", i, kiln_op_name(g->nodes[i].op),
                                    g->nodes[i].origin ? " from " : "",
                                    g->nodes[i].origin ? g->nodes[i].origin : "");
  }
  if (!s) s = kiln_model_exec_prepare(m, e);
  /* A stored plan is used once it has passed every check (kiln_plan_io.c). */
  if (!s)
    s = plan ? kiln_plan_load(g, plan, plan_size, &e->plan)
             : kiln_plan_build_from(g, NULL, m->symbolic ? KILN_MODEL_PLAN_HEADROOM : 0, &e->plan);
  if (!s && !(e->bufs = calloc((size_t)g->n_values + 1, sizeof(void*))))
    s = kiln_status_make(KILN_OUT_OF_MEMORY, "model buffers");
  if (!s) s = kiln_model_arena_fit(m, e->plan.arena_size);
  if (!s && !m->target->host_memory) s = kiln_model_exec_device(m, e);
  if (s) {
    kiln_model_exec_clear(m, e);
    return s;
  }
  e->used = 1;
  return kiln_ok();
}

/* Constants and arena values never move within an arena: bound once per
 * arena. */
static void kiln_model_exec_bind_fixed(kiln_model_t* m, kiln_model_exec_t* e) {
  if (e->bound_arena == m->arena && e->bound_arena) return;
  const kiln_graph_t* g = e->graph;
  for (int32_t v = 0; v < g->n_values; ++v) {
    const int32_t r = e->plan.root[v];
    const kiln_value_t* root = &g->values[r];
    if (root->kind == KILN_VALUE_CONSTANT)
      e->bufs[v] = (char*)(e->dev_const ? e->dev_const[r] : root->data) + e->plan.view_offset[v];
    else if (e->plan.offset[v] >= 0) e->bufs[v] = (char*)m->arena + e->plan.offset[v];
  }
  e->bound_arena = m->arena;
}

kiln_status_t kiln_model_create(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                kiln_model_t** out_model) {
  return kiln_model_create_with_plan(graph, blob, pool, NULL, 0, out_model);
}


kiln_status_t kiln_model_create_with_plan(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                          const void* plan, size_t plan_size,
                                          kiln_model_t** out_model) {
  return kiln_model_create_on(graph, blob, pool, plan, plan_size, NULL, out_model);
}

kiln_status_t kiln_model_create_on(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                   const void* plan, size_t plan_size,
                                   const kiln_hal_target_t* target, kiln_model_t** out_model) {
  *out_model = NULL;
  kiln_allocator_t sys = kiln_allocator_system();
  kiln_model_t* m = calloc(1, sizeof(*m));
  if (!m) {
    kiln_graph_release(graph);
    kiln_allocator_free(sys, blob);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "model");
  }
  m->target = target ? target : kiln_hal_target_find(NULL);
  m->graph = graph;
  m->blob = blob;
  m->current = -1;
  pthread_mutex_init(&m->lock, NULL);
  if (!m->target) {
    kiln_model_release(m);
    return kiln_status_make(KILN_INVALID_ARGUMENT, "KILN_TARGET=%s is not a target (cpu, reference)",
                            getenv("KILN_TARGET"));
  }
  kiln_status_t s = kiln_graph_verify(graph);
  m->symbolic = !s && kiln_graph_is_symbolic(graph);
  if (!s && m->symbolic && plan)
    s = kiln_status_make(KILN_CORRUPT_ARTIFACT, "a stored plan for a graph with symbolic sizes");
  if (!s && m->symbolic &&
      !(m->sym_values = calloc((size_t)graph->syms->n_exprs + 1, sizeof(int64_t))))
    s = kiln_status_make(KILN_OUT_OF_MEMORY, "model");
  if (!s && m->symbolic) s = kiln_graph_sym_sites(graph, &m->sites);
  /* A concrete model plans now; a symbolic one per binding, at its first call. */
  if (!s && !m->symbolic) {
    s = kiln_model_exec_init(m, &m->execs[0], graph, plan, plan_size);
    if (!s) m->current = 0;
  }
  if (!s) {
    m->times_ns = calloc((size_t)graph->n_nodes + 1, sizeof(uint64_t));
    m->wait_ns = calloc((size_t)graph->n_nodes + 1, sizeof(uint64_t));
    if (!m->times_ns || !m->wait_ns) s = kiln_status_make(KILN_OUT_OF_MEMORY, "model buffers");
  }
  if (s) {
    kiln_model_release(m);
    return s;
  }
  m->pool = pool ? pool : kiln_pool_default();
  *out_model = m;
  return kiln_ok();
}

void kiln_model_release(kiln_model_t* m) {
  if (!m) return;
  kiln_allocator_t sys = kiln_allocator_system();
  for (int i = 0; m->target && i < KILN_MODEL_EXECS; ++i) kiln_model_exec_clear(m, &m->execs[i]);
  kiln_graph_release(m->graph);
  kiln_allocator_free(sys, m->blob);
  if (m->arena) m->target->free(m->arena);
  free(m->sym_values);
  kiln_graph_sym_sites_free(&m->sites);
  free(m->times_ns);
  free(m->wait_ns);
  pthread_mutex_destroy(&m->lock);
  free(m);
}

const kiln_graph_t* kiln_model_graph(const kiln_model_t* m) { return m->graph; }
const char* kiln_model_target_name(const kiln_model_t* m) { return m->target->name; }

const void* kiln_model_value_data(const kiln_model_t* m, int32_t value) {
  if (!m->target->host_memory || m->current < 0) return NULL;
  const kiln_model_exec_t* e = &m->execs[m->current];
  return value >= 0 && value < e->graph->n_values ? e->bufs[value] : NULL;
}
int kiln_model_is_symbolic(const kiln_model_t* m) { return m->symbolic; }

const kiln_graph_t* kiln_model_last_graph(const kiln_model_t* m) {
  return m->current >= 0 ? m->execs[m->current].graph : m->graph;
}
const kiln_plan_t* kiln_model_plan(const kiln_model_t* m) {
  return m->current >= 0 ? &m->execs[m->current].plan : NULL;
}

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

/* The symbols' values from the inputs' sizes: a dimension that is a bare
 * symbol defines it (the first one) or must agree with it; every other
 * dimension must equal its expression's value. Errors name the input, the
 * dimension, the symbol and its range. */
static kiln_status_t kiln_model_bind(kiln_model_t* m, const kiln_tensor_t* inputs,
                                     int64_t* vars) {
  const kiln_graph_t* g = m->graph;
  const kiln_sym_table_t* t = g->syms;
  int32_t from[KILN_SYM_MAX_VARS];
  for (int32_t i = 0; i < t->n_vars; ++i) vars[i] = -1, from[i] = -1;
  char e[96];
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* want = &g->values[g->inputs[i]];
    const kiln_tensor_t* got = &inputs[i];
    if (got->dtype != want->dtype || got->rank != want->rank || (!got->data && got->rank < 0)) {
      char wbuf[128];
      return kiln_status_make(KILN_INVALID_ARGUMENT, "input %d%s%s%s: expected %s, got rank %d %s",
                              i, want->name ? " ('" : "", want->name ? want->name : "",
                              want->name ? "')" : "",
                              kiln_graph_describe_value(g, want, wbuf, sizeof wbuf), got->rank,
                              kiln_dtype_name(got->dtype));
    }
    for (int32_t d = 0; d < want->rank; ++d) {
      int64_t w = want->shape[d], have = got->shape[d];
      if (!kiln_dim_is_sym(w)) continue;
      const kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(w)];
      if (x->kind != KILN_SYM_VAR) continue;
      const kiln_sym_var_t* var = &t->vars[x->a];
      if (have < var->lo || have > var->hi)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "input %d%s%s%s: dimension %d (%s) is %lld, expected %lld..%lld", i,
                                want->name ? " ('" : "", want->name ? want->name : "",
                                want->name ? "')" : "", d, var->name, (long long)have,
                                (long long)var->lo, (long long)var->hi);
      if (vars[x->a] < 0) {
        vars[x->a] = have;
        from[x->a] = i;
      }
    }
  }
  /* A symbol no size gives bare, from a size k*s or s + c. */
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* want = &g->values[g->inputs[i]];
    for (int32_t d = 0; d < want->rank; ++d) {
      int64_t w = want->shape[d], have = inputs[i].shape[d];
      if (!kiln_dim_is_sym(w)) continue;
      const kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(w)];
      if ((x->kind != KILN_SYM_ADD && x->kind != KILN_SYM_MUL) || kiln_dim_is_sym(x->b) ||
          !kiln_dim_is_sym(x->a))
        continue;
      const kiln_sym_expr_t* v = &t->exprs[kiln_dim_sym_id(x->a)];
      if (v->kind != KILN_SYM_VAR || vars[v->a] >= 0) continue;
      if (x->kind == KILN_SYM_ADD) vars[v->a] = have - x->b;
      else if (x->b > 0 && have % x->b == 0) vars[v->a] = have / x->b;
      from[v->a] = i;
    }
  }
  for (int32_t i = 0; i < t->n_vars; ++i) {
    /* A symbol no input size gives is an error: guessing it could size a
     * result wrongly with no check to catch it. */
    if (vars[i] < 0)
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "symbolic size %s is not given by any input's size", t->vars[i].name);
    if (vars[i] < t->vars[i].lo || vars[i] > t->vars[i].hi)
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "input %d: the sizes give %s = %lld, expected %lld..%lld", from[i],
                              t->vars[i].name, (long long)vars[i], (long long)t->vars[i].lo,
                              (long long)t->vars[i].hi);
  }
  KILN_RETURN_IF_ERROR(kiln_sym_eval_all(t, vars, m->sym_values));
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* want = &g->values[g->inputs[i]];
    for (int32_t d = 0; d < want->rank; ++d) {
      int64_t w = kiln_sym_value(m->sym_values, want->shape[d]), have = inputs[i].shape[d];
      if (w == have) continue;
      int64_t sd = want->shape[d];
      const kiln_sym_expr_t* x = kiln_dim_is_sym(sd) ? &t->exprs[kiln_dim_sym_id(sd)] : NULL;
      if (x && x->kind == KILN_SYM_VAR)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "input %d%s%s%s: dimension %d (%s) is %lld, but input %d gave %s = %lld",
                                i, want->name ? " ('" : "", want->name ? want->name : "",
                                want->name ? "')" : "", d, t->vars[x->a].name, (long long)have,
                                from[x->a], t->vars[x->a].name, (long long)w);
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "input %d%s%s%s: dimension %d is %lld, expected %s = %lld", i,
                              want->name ? " ('" : "", want->name ? want->name : "",
                              want->name ? "')" : "", d, (long long)have,
                              kiln_sym_describe(t, sd, e, sizeof e), (long long)w);
    }
  }
  /* Last: a dimension the inputs disagree on is named above, more precisely. */
  return kiln_sym_guards_check(t, m->sym_values);
}

/* Rebinds an instance exec of a symbolic model to the latest binding
 * (m->sym_values) in place: only what depends on the symbols is redone (the
 * symbolic sizes, their nodes' checks and prepared arguments). The plan
 * stays as it is when it still fits (kiln_plan_fits: the arena items fit
 * what was reserved, views and bound outputs unchanged), and the buffers
 * bound to the arena with it; otherwise it is made again from the old one,
 * whose offsets stay when the items still fit. Cheaper than a new instance
 * by the copies, the checks of the nodes that cannot change and the
 * placing. Only for a target in host memory (a device's buffers are sized
 * per instance). On an error the exec is cleared. */
static kiln_status_t kiln_model_exec_rebind(kiln_model_t* m, kiln_model_exec_t* e) {
  kiln_graph_t* g = e->graph;
  const kiln_graph_sym_sites_t* sites = &m->sites;
  kiln_status_t s = kiln_graph_instance_bind(m->graph, m->sym_values, sites, g);
  for (int32_t i = 0; !s && i < sites->n_nodes; ++i) {
    const int32_t ni = sites->nodes[i];
    const kiln_node_t* n = &g->nodes[ni];
    s = kiln_hal_supports(m->target, g, n);
    if (!s && e->entry[ni]->prepare) s = e->entry[ni]->prepare(g, n, e->prep + e->prep_off[ni]);
  }
  if (!s && kiln_plan_fits(g, &e->plan, sites->nodes, sites->n_nodes, sites->values,
                           sites->n_values)) {
    m->plans_kept++;
    return kiln_ok();
  }
  /* Another instance's plan, made for other sizes of the same graph, may
   * fit (one placed for a longer cache than this one's): copying it is
   * cheaper than placing, and lets the instances share one placement per
   * headroom's growth instead of each placing its own. */
  const kiln_plan_t* other = NULL;
  for (int32_t i = 0; !s && !other && i < KILN_MODEL_EXECS; ++i) {
    const kiln_model_exec_t* x = &m->execs[i];
    if (x != e && x->used && kiln_plan_fits(g, &x->plan, sites->nodes, sites->n_nodes,
                                            sites->values, sites->n_values))
      other = &x->plan;
  }
  kiln_plan_t plan;
  if (!s && other) {
    s = kiln_plan_copy(other, g->n_outputs, &plan);
    m->plans_shared += !s;
  } else if (!s) {
    s = kiln_plan_build_from(g, &e->plan, KILN_MODEL_PLAN_HEADROOM, &plan);
  }
  if (!s) {
    kiln_plan_deinitialize(&e->plan);
    e->plan = plan;
    e->bound_arena = NULL; /* offsets may have moved: bind again */
    s = kiln_model_arena_fit(m, plan.arena_size);
  }
  if (s) kiln_model_exec_clear(m, e);
  return s;
}

/* The exec for the inputs' sizes: the concrete model's one, or a cached
 * instance of the symbolic graph (made on a miss, replacing the least
 * recently used). Called with the lock held. */
static kiln_status_t kiln_model_select(kiln_model_t* m, const kiln_tensor_t* inputs,
                                       kiln_model_exec_t** out) {
  *out = NULL;
  if (!m->symbolic) {
    *out = &m->execs[0];
    return kiln_ok();
  }
  int64_t vars[KILN_SYM_MAX_VARS];
  KILN_RETURN_IF_ERROR(kiln_model_bind(m, inputs, vars));
  int32_t nv = m->graph->syms->n_vars, victim = 0;
  for (int32_t i = 0; i < KILN_MODEL_EXECS; ++i) {
    kiln_model_exec_t* e = &m->execs[i];
    if (e->used && !memcmp(e->key, vars, sizeof(int64_t) * (size_t)nv)) {
      e->last_use = ++m->clock;
      m->current = i;
      *out = e;
      return kiln_ok();
    }
    if (!e->used || (m->execs[victim].used && e->last_use < m->execs[victim].last_use)) victim = i;
  }
  kiln_model_exec_t* e = &m->execs[victim];
  if (m->current == victim) m->current = -1;
  uint64_t t0 = kiln_now_ns();
  /* The least recently used instance, bound again to these sizes; when
   * that fails (or there is none), a new instance, whose errors name what
   * is wrong. */
  int rebound = 0;
  if (e->used && m->target->host_memory) {
    kiln_status_t s = kiln_model_exec_rebind(m, e);
    rebound = !s;
    m->rebinds += rebound;
    kiln_status_free(s);
  }
  if (!rebound) {
    kiln_model_exec_clear(m, e);
    kiln_graph_t* inst = NULL;
    KILN_RETURN_IF_ERROR(kiln_graph_instantiate(m->graph, m->sym_values, &inst));
    KILN_RETURN_IF_ERROR(kiln_model_exec_init(m, e, inst, NULL, 0));
  }
  m->instances++;
  m->instance_ns += kiln_now_ns() - t0;
  memcpy(e->key, vars, sizeof(int64_t) * (size_t)nv);
  e->last_use = ++m->clock;
  m->current = victim;
  *out = e;
  return kiln_ok();
}

kiln_status_t kiln_model_output_shapes(kiln_model_t* m, const kiln_tensor_t* inputs,
                                       int32_t n_inputs, int64_t* shapes, int32_t* ranks) {
  const kiln_graph_t* g = m->graph;
  KILN_CHECK_ARG(n_inputs == g->n_inputs, "the model takes %d inputs, got %d", g->n_inputs,
                 n_inputs);
  pthread_mutex_lock(&m->lock);
  kiln_model_exec_t* e;
  kiln_status_t s = kiln_model_select(m, inputs, &e);
  for (int32_t o = 0; !s && o < g->n_outputs; ++o) {
    const kiln_value_t* v = &e->graph->values[e->graph->outputs[o]];
    ranks[o] = v->rank;
    memcpy(shapes + (size_t)o * KILN_MAX_RANK, v->shape, sizeof(int64_t) * (size_t)v->rank);
  }
  pthread_mutex_unlock(&m->lock);
  return s;
}


kiln_status_t kiln_model_run(kiln_model_t* m, const kiln_tensor_t* inputs, int32_t n_inputs,
                             const kiln_tensor_t* outputs, int32_t n_outputs) {
  return kiln_model_run_hooked(m, inputs, n_inputs, outputs, n_outputs, NULL, NULL);
}

kiln_status_t kiln_model_run_hooked(kiln_model_t* m, const kiln_tensor_t* inputs,
                                    int32_t n_inputs, const kiln_tensor_t* outputs,
                                    int32_t n_outputs, kiln_model_node_hook_fn hook,
                                    void* hook_ctx) {
  KILN_CHECK_ARG(n_inputs == m->graph->n_inputs, "the model takes %d inputs, got %d",
                 m->graph->n_inputs, n_inputs);
  KILN_CHECK_ARG(n_outputs == m->graph->n_outputs, "the model has %d outputs, got %d buffers",
                 m->graph->n_outputs, n_outputs);
  pthread_mutex_lock(&m->lock);
  kiln_model_exec_t* e;
  kiln_status_t s = kiln_model_select(m, inputs, &e);
  const kiln_graph_t* g = e ? e->graph : m->graph;
  for (int32_t i = 0; !s && i < n_inputs; ++i)
    s = kiln_model_check("input", i, &g->values[g->inputs[i]], &inputs[i]);
  for (int32_t o = 0; !s && o < n_outputs; ++o)
    s = kiln_model_check("output", o, &g->values[g->outputs[o]], &outputs[o]);
  if (s) {
    pthread_mutex_unlock(&m->lock);
    return s;
  }
  kiln_model_exec_bind_fixed(m, e);
  const kiln_hal_target_t* t = m->target;
  const kiln_plan_t* p = &e->plan;
  void** bufs = e->bufs;
  kiln_pool_t* pool = t->single_thread ? NULL : m->pool;
  for (int32_t i = 0; i < n_inputs; ++i) {
    if (!e->dev_in) {
      bufs[g->inputs[i]] = inputs[i].data;
      continue;
    }
    bufs[g->inputs[i]] = e->dev_in[i];
    size_t bytes = kiln_value_dense_bytes(&g->values[g->inputs[i]]);
    if (!s && bytes) s = t->copy(e->dev_in[i], inputs[i].data, bytes, KILN_HAL_COPY_TO_DEVICE);
  }
  for (int32_t v = 0; v < g->n_values; ++v) {
    int32_t r = p->root[v], o = p->bound_output[r];
    if (o >= 0)
      bufs[v] = (char*)(e->dev_out ? e->dev_out[o] : outputs[o].data) + p->view_offset[v];
    else if (g->values[r].kind == KILN_VALUE_INPUT)
      bufs[v] = (char*)bufs[r] + p->view_offset[v];
  }
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
      s = e->entry[ni]->run(g, n, e->prep + e->prep_off[ni], bufs, pool);
      uint64_t dt = kiln_now_ns() - t0;
      kiln_pool_set_wait_counter(NULL);
      if (wait > dt) wait = dt;
      m->times_ns[ni] += dt - wait;
      m->wait_ns[ni] += wait;
    } else {
      s = e->entry[ni]->run(g, n, e->prep + e->prep_off[ni], bufs, pool);
    }
    if (hook) hook(hook_ctx, ni, 1);
  }
  for (int32_t o = 0; o < n_outputs && !s; ++o) {
    size_t bytes = kiln_value_dense_bytes(&g->values[g->outputs[o]]);
    if (e->dev_out) { /* every output comes back from the target's memory */
      if (bytes) s = t->copy(outputs[o].data, bufs[g->outputs[o]], bytes, KILN_HAL_COPY_TO_HOST);
      continue;
    }
    if (!p->output_copy[o]) continue;
    if (bytes && outputs[o].data != bufs[g->outputs[o]])
      memmove(outputs[o].data, bufs[g->outputs[o]], bytes);
  }
  if (!t->host_memory) {
    kiln_status_t w = t->synchronize();
    if (!s) s = w;
    else kiln_status_free(w);
  }
  if (m->profiling) m->runs++;
  pthread_mutex_unlock(&m->lock);
  return s;
}

void kiln_model_set_profiling(kiln_model_t* m, int on) { m->profiling = on; }

int64_t kiln_model_instances(const kiln_model_t* m, uint64_t* out_ns) {
  if (out_ns) *out_ns = m->instance_ns;
  return m->instances;
}

void kiln_model_instance_counts(const kiln_model_t* m, int64_t* out_rebinds,
                                int64_t* out_plans_kept, int64_t* out_plans_shared) {
  *out_rebinds = m->rebinds;
  *out_plans_kept = m->plans_kept;
  *out_plans_shared = m->plans_shared;
}

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
