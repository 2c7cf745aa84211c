/* What a new binding of a symbolic model's sizes costs, piece by piece.
 *
 *   bench_instance FILE.kiln [--reps N] [--fix SYM=V ...] [--from L0] [--step S]
 *                  [--lengths L1,L2,...] [--flush MB]
 *
 * Every symbol not fixed takes the same value L (a decode graph's per-layer
 * cache lengths; an encoder's sequence length), L = L0, L0 + S, ... one per
 * call, so every call is a binding the model has not seen; or, with
 * --lengths, L cycles through the list (more than the model's 4 cached
 * instances: every call a new binding, as an encoder serving mixed
 * lengths). Prints, per
 * piece, the best and median time per binding over N bindings (thread CPU
 * time, 1 thread: the model's selection runs on the calling thread).
 * --flush MB reads that many MB before each piece, as a decode step's
 * kernels stream the weights between two bindings: the pieces then run
 * with cold caches, as they do in generate() (warm, they are 2-3x faster):
 *
 *   select     kiln_model_output_shapes: bind + the model's cached/rebound/
 *              new instance + plan (what a call pays before its kernels)
 *   eval       kiln_sym_eval_all (the expression table)
 *   inst       kiln_graph_instantiate (copy + substitute + every rule)
 *   rebind     kiln_graph_instance_bind in place, symbolic nodes only
 *   prep_sym   HAL supports + prepare, symbolic nodes only
 *   plan       kiln_plan_build (place from scratch)
 *   plan_from  kiln_plan_build_from the previous binding's plan (25 % headroom)
 *   plan_fits  kiln_plan_fits: whether the previous binding's plan serves
 *
 * Only the public API: the pieces are redone here as the runtime does them
 * (src/runtime/kiln_model.c); a rebind is rebind + prep_sym + plan_fits,
 * and plan_from when the plan does not fit. A file to run: kiln.save() of
 * a symbolic KilnModule (the decode graph of bench/gen_profile.py's
 * generate(), or kiln.trace(..., dynamic_shapes=...) of an encoder). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/kiln_hal.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_graph.h"
#include "runtime/kiln_model.h"
#include "runtime/kiln_plan.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

#define PIECES 8
static const char* const piece_names[PIECES] = {"select", "eval",      "inst",     "rebind",
                                                 "prep_sym", "plan", "plan_from", "plan_fits"};

static void die(kiln_status_t s, const char* what) {
  if (!s) return;
  fprintf(stderr, "%s: %s\n", what, kiln_status_message(s));
  exit(1);
}

/* The HAL's per-binding work on the nodes whose sizes are symbolic: what
 * the runtime's rebind redoes (kiln_model_exec_rebind). */
static void prepare_symbolic(const kiln_hal_target_t* target, const kiln_graph_t* inst,
                             const kiln_graph_sym_sites_t* sites, unsigned char** prep,
                             size_t* prep_cap) {
  for (int32_t i = 0; i < sites->n_nodes; ++i) {
    const kiln_node_t* n = &inst->nodes[sites->nodes[i]];
    die(kiln_hal_supports(target, inst, n), "supports");
    const kiln_hal_entry_t* e = kiln_hal_entry(target, n);
    if (e->prep_size > *prep_cap) {
      free(*prep);
      *prep_cap = (e->prep_size + 63) & ~(size_t)63;
      *prep = aligned_alloc(64, *prep_cap);
    }
    if (e->prepare) die(e->prepare(inst, n, *prep), "prepare");
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE.kiln [--reps N] [--fix SYM=V] [--from L0] [--step S]\n",
            argv[0]);
    return 2;
  }
  int reps = 400;
  int64_t l0 = 100, step = 1;
  const char* fix_name[KILN_SYM_MAX_VARS];
  int64_t fix_val[KILN_SYM_MAX_VARS];
  int n_fix = 0;
  size_t flush_mb = 0;
  int64_t lengths[64];
  int n_lengths = 0;
  for (int i = 2; i < argc; ++i) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--from") && i + 1 < argc) l0 = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--step") && i + 1 < argc) step = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--flush") && i + 1 < argc) flush_mb = (size_t)atoll(argv[++i]);
    else if (!strcmp(argv[i], "--lengths") && i + 1 < argc) {
      for (char* a = argv[++i]; *a && n_lengths < 64; a += *a == ',') lengths[n_lengths++] = strtoll(a, &a, 10);
    }
    else if (!strcmp(argv[i], "--fix") && i + 1 < argc && n_fix < KILN_SYM_MAX_VARS) {
      char* a = argv[++i];
      char* eq = strchr(a, '=');
      if (!eq) return 2;
      *eq = 0;
      fix_name[n_fix] = a;
      fix_val[n_fix++] = atoll(eq + 1);
    }
  }
  void* bytes;
  size_t size;
  die(kiln_artifact_load_file(argv[1], &bytes, &size), "load");
  kiln_graph_t* graph;
  die(kiln_artifact_read(bytes, size, kiln_allocator_system(), &graph), "read");
  kiln_model_t* model;
  die(kiln_model_create(graph, bytes, NULL, &model), "model");
  const kiln_graph_t* g = kiln_model_graph(model);
  const kiln_sym_table_t* t = g->syms;
  if (!t || !kiln_model_is_symbolic(model)) {
    fprintf(stderr, "not a symbolic model\n");
    return 1;
  }
  const kiln_hal_target_t* target = kiln_hal_target_find(NULL);
  kiln_graph_sym_sites_t sites;
  die(kiln_graph_sym_sites(g, &sites), "sites");
  printf("%s: %d nodes (%d symbolic), %d values (%d symbolic), %d symbols, %d expressions\n",
         argv[1], g->n_nodes, sites.n_nodes, g->n_values, sites.n_values, t->n_vars, t->n_exprs);

  int64_t vars[KILN_SYM_MAX_VARS];
  int64_t* values = malloc(sizeof(int64_t) * (size_t)(t->n_exprs + 1));
  kiln_tensor_t* in = calloc((size_t)g->n_inputs, sizeof(*in));
  int64_t (*shapes)[KILN_MAX_RANK] = calloc((size_t)g->n_inputs, sizeof(*shapes));
  int64_t* oshapes = calloc((size_t)g->n_outputs * KILN_MAX_RANK + 1, sizeof(int64_t));
  int32_t* oranks = calloc((size_t)g->n_outputs + 1, sizeof(int32_t));
  static char dummy[64];
  double* times[PIECES];
  for (int p = 0; p < PIECES; ++p) times[p] = calloc((size_t)reps, sizeof(double));

  kiln_graph_t* inst = NULL;
  kiln_plan_t prev;
  memset(&prev, 0, sizeof(prev));
  size_t prep_cap = 4096;
  unsigned char* prep = aligned_alloc(64, prep_cap);
  int64_t replaced = 0, kept = 0;
  /* --flush MB: read this many MB before each piece, as a decode step's
   * kernels stream the weights between two bindings (caches cold). */
  volatile unsigned char* flush = flush_mb ? calloc(flush_mb << 20, 1) : NULL;
  unsigned flush_sum = 0;
#define FLUSH()                                                                 \
  do {                                                                          \
    for (size_t k = 0; flush && k < (flush_mb << 20); k += 64) flush_sum += flush[k]; \
  } while (0)
  for (int r = -1; r < reps; ++r) {
    int64_t L = n_lengths ? lengths[(r + 1) % n_lengths] : l0 + step * (r + 1);
    for (int32_t v = 0; v < t->n_vars; ++v) {
      vars[v] = L;
      for (int f = 0; f < n_fix; ++f)
        if (!strcmp(fix_name[f], t->vars[v].name)) vars[v] = fix_val[f];
    }
    double dt[PIECES], t0;
#define PIECE(i, stmt) \
  do {                 \
    FLUSH();           \
    t0 = now_ns();     \
    stmt;              \
    dt[i] = now_ns() - t0; \
  } while (0)
    PIECE(1, die(kiln_sym_eval_all(t, vars, values), "eval"));
    for (int32_t i = 0; i < g->n_inputs; ++i) {
      const kiln_value_t* x = &g->values[g->inputs[i]];
      for (int32_t d = 0; d < x->rank; ++d) shapes[i][d] = kiln_sym_value(values, x->shape[d]);
      in[i].data = dummy;
      in[i].dtype = x->dtype;
      in[i].rank = x->rank;
      in[i].shape = shapes[i];
    }
    PIECE(0, die(kiln_model_output_shapes(model, in, g->n_inputs, oshapes, oranks), "select"));
    kiln_graph_t* fresh = NULL;
    PIECE(2, die(kiln_graph_instantiate(g, values, &fresh), "instantiate"));
    if (!inst) {
      inst = fresh;
      fresh = NULL;
    }
    PIECE(3, die(kiln_graph_instance_bind(g, values, &sites, inst), "rebind"));
    PIECE(4, prepare_symbolic(target, inst, &sites, &prep, &prep_cap));
    kiln_plan_t full, next;
    PIECE(5, die(kiln_plan_build(inst, &full), "plan"));
    PIECE(6, die(kiln_plan_build_from(inst, prev.root ? &prev : NULL, 25, &next), "plan_from"));
    int fits = 0;
    PIECE(7, fits = prev.root && kiln_plan_fits(inst, &prev, sites.nodes, sites.n_nodes,
                                                 sites.values, sites.n_values));
    kept += fits;
    replaced += prev.root &&
                memcmp(next.offset, prev.offset, sizeof(int64_t) * (size_t)next.n_values) != 0;
    kiln_plan_deinitialize(&prev);
    prev = next;
    kiln_plan_deinitialize(&full);
    if (fresh) kiln_graph_release(fresh);
    if (r < 0) continue;
    for (int p = 0; p < PIECES; ++p) times[p][r] = dt[p];
  }
  uint64_t ns;
  int64_t n_inst = kiln_model_instances(model, &ns);
  printf("L = %lld.. step %lld, %d bindings; model: %lld instances, mean %.1f us (wall)\n",
         (long long)l0, (long long)step, reps, (long long)n_inst,
         n_inst ? (double)ns / 1e3 / (double)n_inst : 0.0);
  int64_t m_rebinds, m_kept, m_shared;
  kiln_model_instance_counts(model, &m_rebinds, &m_kept, &m_shared);
  printf("model: %lld rebinds, %lld kept their plan, %lld took another's\n", (long long)m_rebinds,
         (long long)m_kept, (long long)m_shared);
  printf("plan_from moved offsets in %lld of %d bindings; plan_fits kept %lld\n",
         (long long)replaced, reps, (long long)kept);
  printf("%-10s %9s %9s   (us, thread CPU time)\n", "piece", "best", "median");
  for (int p = 0; p < PIECES; ++p) {
    qsort(times[p], (size_t)reps, sizeof(double), cmp_d);
    printf("%-10s %9.2f %9.2f\n", piece_names[p], times[p][0] / 1e3, times[p][reps / 2] / 1e3);
  }
  if (flush_sum == 1) printf(" ");
  kiln_plan_deinitialize(&prev);
  kiln_graph_release(inst);
  kiln_graph_sym_sites_free(&sites);
  kiln_model_release(model);
  return 0;
}
