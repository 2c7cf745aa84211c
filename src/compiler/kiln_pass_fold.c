/* Dead-code elimination and constant folding in one sweep.
 *
 * A node is dead when nothing reachable from the outputs reads it. A live
 * node whose inputs are all constants is run once now, through the CPU
 * target, and its output becomes a constant: weight transposes and
 * reshapes, constant masks, scalar arithmetic. Folding is skipped when the
 * result would be much larger than its inputs (an expand of a scalar to a
 * big mask costs memory and saves nothing). */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "hal/kiln_hal.h"

static int kiln_fold_worth_it(const kiln_graph_t* g, const kiln_node_t* n) {
  size_t in_bytes = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0) in_bytes += g->values[n->inputs[i]].nbytes;
  size_t out_bytes = kiln_value_dense_bytes(&g->values[n->outputs[0]]);
  return out_bytes <= (1u << 20) || out_bytes <= 2 * in_bytes;
}

kiln_status_t kiln_pass_fold(kiln_graph_t* g, kiln_pool_t* pool, int fold,
                             kiln_graph_t** out_graph, int32_t* out_folded, int32_t* out_dead) {
  *out_graph = NULL;
  *out_folded = *out_dead = 0;
  int32_t nv = g->n_values;
  char* live = calloc((size_t)nv + 1, 1);
  void** data = calloc((size_t)nv + 1, sizeof(void*)); /* const/folded bytes per value */
  kiln_rewriter_t rw;
  kiln_status_t s = (!live || !data) ? kiln_status_make(KILN_OUT_OF_MEMORY, "fold pass")
                                     : kiln_rewriter_initialize(&rw, g);
  if (s) {
    free(live);
    free(data);
    return s;
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) live[g->outputs[o]] = 1;
  for (int32_t ni = g->n_nodes - 1; ni >= 0; --ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (!live[n->outputs[0]]) continue;
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0) live[n->inputs[i]] = 1;
  }
  for (int32_t v = 0; v < nv; ++v)
    if (g->values[v].kind == KILN_VALUE_CONSTANT) data[v] = (void*)g->values[v].data;

  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int32_t y = n->outputs[0];
    if (!live[y]) {
      ++*out_dead;
      continue;
    }
    int all_const = fold;
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0 && !data[n->inputs[i]]) all_const = 0;
    if (all_const && kiln_fold_worth_it(g, n)) {
      kiln_status_t unsupported = kiln_hal_cpu_supports(g, n);
      all_const = unsupported == NULL;
      kiln_status_free(unsupported);
    }
    if (all_const && kiln_fold_worth_it(g, n)) {
      kiln_value_t* yv = &g->values[y];
      void* bytes;
      s = kiln_allocator_malloc(g->allocator, kiln_value_dense_bytes(yv), &bytes);
      if (s) break;
      data[y] = bytes;
      s = kiln_hal_cpu_run_node(g, n, data, pool);
      if (s) {
        kiln_allocator_free(g->allocator, bytes);
        data[y] = NULL;
        break;
      }
      /* The folded value becomes a constant of the source graph so the
       * rewriter emits it on first use (and later folds can read it). */
      yv->kind = KILN_VALUE_CONSTANT;
      yv->producer = -1;
      yv->data = bytes;
      yv->owned_data = bytes;
      yv->nbytes = kiln_value_dense_bytes(yv);
      ++*out_folded;
      continue;
    }
    s = kiln_rewriter_copy_node(&rw, n);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
  free(live);
  free(data);
  return s;
}
