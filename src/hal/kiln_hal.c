/* What every target shares: finding one by name (KILN_TARGET picks the
 * default), a node's entry, the supports check that names the op and the
 * target, and a one-off prepare-and-run for the constant folder. */
#include "hal/kiln_hal.h"

#include <stdlib.h>
#include <string.h>

const kiln_hal_target_t* kiln_hal_target_find(const char* name) {
  if (!name || !*name) {
    name = getenv("KILN_TARGET");
    if (!name || !*name) return kiln_hal_target_cpu();
  }
  if (strcmp(name, "cpu") == 0) return kiln_hal_target_cpu();
  if (strcmp(name, "reference") == 0) return kiln_hal_target_reference();
  return NULL;
}

const kiln_hal_target_t* kiln_hal_target_host(void) { return kiln_hal_target_cpu(); }

void kiln_hal_describe_engines(const kiln_hal_target_t* target, const kiln_graph_t* g,
                               const char* prefix, FILE* out) {
  if (!target || !target->node_describe) return;
  const char* said[8]; /* the distinct lines so far (a target has a few engines) */
  int n_said = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const char* d = target->node_describe(g, &g->nodes[i]);
    int seen = !d;
    for (int k = 0; !seen && k < n_said; ++k) seen = !strcmp(said[k], d);
    if (seen) continue;
    fprintf(out, "%s%s\n", prefix, d);
    if (n_said < 8) said[n_said++] = d;
  }
}

const kiln_hal_entry_t* kiln_hal_entry(const kiln_hal_target_t* t, const kiln_node_t* n) {
  return (unsigned)n->op < KILN_OP_COUNT ? &t->entries[kiln_op_entry(n->op)] : NULL;
}

kiln_status_t kiln_hal_supports(const kiln_hal_target_t* t, const kiln_graph_t* g,
                                const kiln_node_t* n) {
  const kiln_hal_entry_t* e = kiln_hal_entry(t, n);
  if (!e || !e->run)
    return kiln_status_make(KILN_UNSUPPORTED, "the %s target has no kernel for %s", t->name,
                            kiln_op_name(n->op));
  return t->supports(g, n);
}

kiln_status_t kiln_hal_run_node_once(const kiln_hal_target_t* t, const kiln_graph_t* g,
                                     const kiln_node_t* n, void* const* bufs, kiln_pool_t* pool) {
  const kiln_hal_entry_t* e = kiln_hal_entry(t, n);
  if (!e || !e->run)
    return kiln_status_make(KILN_UNSUPPORTED, "the %s target has no kernel for %s", t->name,
                            kiln_op_name(n->op));
  /* 64-byte aligned, as a model's prepared arguments are. */
  void* prep = NULL;
  if (e->prep_size && !(prep = aligned_alloc(64, (e->prep_size + 63) & ~(size_t)63)))
    return kiln_status_make(KILN_OUT_OF_MEMORY, "%s: prepared arguments", kiln_op_name(n->op));
  kiln_status_t s = e->prepare ? e->prepare(g, n, prep) : kiln_ok();
  if (!s) s = e->run(g, n, prep, bufs, t->single_thread ? NULL : pool);
  free(prep);
  return s;
}
