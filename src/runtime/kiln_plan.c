/* The memory planner: resolve view roots, bind outputs in place where
 * possible, then give each remaining intermediate root an arena offset by
 * greedy best fit (largest first) against the roots whose live ranges
 * overlap. Live ranges are node indices from the root's producer to the last
 * node that reads it or any view of it. */
#include "runtime/kiln_plan.h"

#include <stdlib.h>
#include <string.h>

static int kiln_plan_slot_cmp(const void* a, const void* b) {
  const kiln_plan_slot_t *x = a, *y = b;
  if (x->reserved != y->reserved) return x->reserved < y->reserved ? 1 : -1;
  return x->value - y->value; /* deterministic */
}

/* prev's offsets serve slots when they are the same items and each fits. */
static int kiln_plan_slots_fit(const kiln_plan_t* prev, const kiln_plan_slot_t* slots,
                               int32_t n_slots, int32_t n_values) {
  if (!prev || !prev->slots || prev->n_slots != n_slots || prev->n_values != n_values) return 0;
  for (int32_t i = 0; i < n_slots; ++i) {
    const kiln_plan_slot_t *a = &prev->slots[i], *b = &slots[i];
    if (a->value != b->value || a->first != b->first || a->last != b->last ||
        b->reserved > a->reserved)
      return 0;
  }
  return 1;
}

/* Greedy best fit, largest first: for each item, the lowest offset that
 * clears every placed item whose range overlaps. Placed overlapping items
 * are scanned in offset order by repeated passes (n is small: hundreds). */
static size_t kiln_plan_place(kiln_plan_slot_t* items, int32_t n_items, int64_t* offset) {
  qsort(items, (size_t)n_items, sizeof(items[0]), kiln_plan_slot_cmp);
  size_t arena = 0;
  for (int32_t i = 0; i < n_items; ++i) {
    size_t off = 0;
    for (int moved = 1; moved;) {
      moved = 0;
      for (int32_t j = 0; j < i; ++j) {
        if (items[j].last < items[i].first || items[i].last < items[j].first) continue;
        size_t jo = (size_t)offset[items[j].value];
        if (off < jo + items[j].reserved && jo < off + items[i].reserved) {
          off = jo + items[j].reserved;
          moved = 1;
        }
      }
    }
    offset[items[i].value] = (int64_t)off;
    if (off + items[i].reserved > arena) arena = off + items[i].reserved;
  }
  return arena;
}

/* The rules below (kiln_plan_build_from) checked against p instead of
 * applied: view roots in node order (a node outside `nodes` is as it was
 * when p was built, so by induction each root p holds is the one planning
 * would give), outputs bound in order, then the items' sizes. */
int kiln_plan_fits(const kiln_graph_t* g, const kiln_plan_t* p, const int32_t* nodes,
                   int32_t n_nodes, const int32_t* values, int32_t n_values) {
  if (!p->slots || p->n_values != g->n_values) return 0;
  for (int32_t i = 0; i < n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[nodes[i]];
    int32_t y = n->outputs[0], x = n->inputs[0];
    int64_t bytes;
    if (kiln_node_is_view(g, n, &bytes)) {
      if (p->root[y] != p->root[x] || p->view_offset[y] != p->view_offset[x] + bytes) return 0;
    } else if (p->root[y] != y) {
      return 0;
    }
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) {
    int32_t v = g->outputs[o], r = p->root[v], claimed = p->bound_output[r];
    int bound = g->values[r].kind == KILN_VALUE_INTERMEDIATE && !(claimed >= 0 && claimed < o) &&
                g->values[v].dtype == g->values[r].dtype && p->view_offset[v] == 0 &&
                kiln_value_dense_bytes(&g->values[v]) == kiln_value_dense_bytes(&g->values[r]);
    if (bound ? claimed != o || p->output_copy[o] : !p->output_copy[o]) return 0;
  }
  /* Slots are in value order, as are values: one walk. */
  int32_t k = 0;
  for (int32_t i = 0; i < n_values; ++i) {
    int32_t v = values[i];
    while (k < p->n_slots && p->slots[k].value < v) ++k;
    if (k == p->n_slots) break;
    if (p->slots[k].value != v) continue;
    if (kiln_align_up(kiln_value_dense_bytes(&g->values[v]), KILN_ALIGNMENT) > p->slots[k].reserved)
      return 0;
  }
  return 1;
}

kiln_status_t kiln_plan_copy(const kiln_plan_t* src, int32_t n_outputs, kiln_plan_t* p) {
  memset(p, 0, sizeof(*p));
  size_t nv = (size_t)(src->n_values ? src->n_values : 1);
  p->n_values = src->n_values;
  p->arena_size = src->arena_size;
  p->n_slots = src->n_slots;
  p->root = malloc(sizeof(int32_t) * nv);
  p->view_offset = malloc(sizeof(int64_t) * nv);
  p->offset = malloc(sizeof(int64_t) * nv);
  p->bound_output = malloc(sizeof(int32_t) * nv);
  p->output_copy = malloc(sizeof(int32_t) * ((size_t)n_outputs + 1));
  p->slots = malloc(sizeof(kiln_plan_slot_t) * nv);
  if (!p->root || !p->view_offset || !p->offset || !p->bound_output || !p->output_copy ||
      !p->slots) {
    kiln_plan_deinitialize(p);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "memory plan");
  }
  memcpy(p->root, src->root, sizeof(int32_t) * (size_t)src->n_values);
  memcpy(p->view_offset, src->view_offset, sizeof(int64_t) * (size_t)src->n_values);
  memcpy(p->offset, src->offset, sizeof(int64_t) * (size_t)src->n_values);
  memcpy(p->bound_output, src->bound_output, sizeof(int32_t) * (size_t)src->n_values);
  memcpy(p->output_copy, src->output_copy, sizeof(int32_t) * (size_t)n_outputs);
  if (src->slots) {
    memcpy(p->slots, src->slots, sizeof(kiln_plan_slot_t) * (size_t)src->n_slots);
  } else { /* a loaded plan has none, and its copy must say so */
    free(p->slots);
    p->slots = NULL;
  }
  return kiln_ok();
}

void kiln_plan_deinitialize(kiln_plan_t* p) {
  free(p->root);
  free(p->view_offset);
  free(p->offset);
  free(p->bound_output);
  free(p->output_copy);
  free(p->slots);
  memset(p, 0, sizeof(*p));
}

kiln_status_t kiln_plan_build(const kiln_graph_t* g, kiln_plan_t* p) {
  return kiln_plan_build_from(g, NULL, 0, p);
}

kiln_status_t kiln_plan_build_from(const kiln_graph_t* g, const kiln_plan_t* prev,
                                   int headroom_pct, kiln_plan_t* p) {
  memset(p, 0, sizeof(*p));
  int32_t nv = g->n_values;
  p->n_values = nv;
  p->root = malloc(sizeof(int32_t) * (size_t)(nv ? nv : 1));
  p->offset = malloc(sizeof(int64_t) * (size_t)(nv ? nv : 1));
  p->view_offset = calloc((size_t)(nv ? nv : 1), sizeof(int64_t));
  p->bound_output = malloc(sizeof(int32_t) * (size_t)(nv ? nv : 1));
  p->output_copy = calloc((size_t)g->n_outputs + 1, sizeof(int32_t));
  int32_t* last_use = malloc(sizeof(int32_t) * (size_t)(nv ? nv : 1));
  kiln_plan_slot_t* items = malloc(sizeof(kiln_plan_slot_t) * (size_t)(nv ? nv : 1));
  p->slots = malloc(sizeof(kiln_plan_slot_t) * (size_t)(nv ? nv : 1));
  if (!p->root || !p->offset || !p->view_offset || !p->bound_output || !p->output_copy || !last_use ||
      !items || !p->slots) {
    free(last_use);
    free(items);
    kiln_plan_deinitialize(p);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "memory plan");
  }
  for (int32_t v = 0; v < nv; ++v) {
    p->root[v] = v;
    p->offset[v] = -1;
    p->bound_output[v] = -1;
    last_use[v] = -1;
  }
  /* View roots: a view's output uses its input's root, further in by the
   * view's offset. Values are created in order, so the input's root is
   * final when we get here. */
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int64_t bytes;
    if (!kiln_node_is_view(g, n, &bytes)) continue;
    p->root[n->outputs[0]] = p->root[n->inputs[0]];
    p->view_offset[n->outputs[0]] = p->view_offset[n->inputs[0]] + bytes;
  }
  for (int32_t ni = 0; ni < g->n_nodes; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0) last_use[p->root[n->inputs[i]]] = ni;
  }
  /* Bind outputs: the first output whose root is a fresh intermediate of
   * the same bytes (itself or a reshape of it) gets it; a root claimed twice,
   * a part of a root, or an input/constant, is copied instead. */
  for (int32_t o = 0; o < g->n_outputs; ++o) {
    int32_t v = g->outputs[o], r = p->root[v];
    if (g->values[r].kind == KILN_VALUE_INTERMEDIATE && p->bound_output[r] < 0 &&
        g->values[v].dtype == g->values[r].dtype && p->view_offset[v] == 0 &&
        kiln_value_dense_bytes(&g->values[v]) == kiln_value_dense_bytes(&g->values[r])) {
      p->bound_output[r] = o;
    } else {
      p->output_copy[o] = 1;
    }
  }
  /* Arena items: unbound intermediate roots. An output copied from an
   * intermediate must outlive the last node. */
  for (int32_t o = 0; o < g->n_outputs; ++o)
    if (p->output_copy[o]) last_use[p->root[g->outputs[o]]] = g->n_nodes;
  int32_t n_items = 0;
  for (int32_t v = 0; v < nv; ++v) {
    const kiln_value_t* val = &g->values[v];
    if (val->kind != KILN_VALUE_INTERMEDIATE || p->root[v] != v || p->bound_output[v] >= 0)
      continue;
    size_t need = kiln_align_up(kiln_value_dense_bytes(val), KILN_ALIGNMENT);
    kiln_plan_slot_t it = {v, val->producer, last_use[v] < 0 ? val->producer : last_use[v], need};
    items[n_items++] = it;
  }
  size_t arena;
  if (kiln_plan_slots_fit(prev, items, n_items, nv)) {
    for (int32_t i = 0; i < n_items; ++i) p->offset[items[i].value] = prev->offset[items[i].value];
    memcpy(p->slots, prev->slots, sizeof(items[0]) * (size_t)n_items);
    arena = prev->arena_size;
  } else {
    for (int32_t i = 0; i < n_items; ++i)
      items[i].reserved = kiln_align_up(items[i].reserved + items[i].reserved / 100 * (size_t)headroom_pct,
                                        KILN_ALIGNMENT);
    memcpy(p->slots, items, sizeof(items[0]) * (size_t)n_items);
    arena = kiln_plan_place(items, n_items, p->offset);
  }
  p->n_slots = n_items;
  /* Views inherit their root's offset. */
  for (int32_t v = 0; v < nv; ++v)
    if (p->offset[p->root[v]] >= 0) p->offset[v] = p->offset[p->root[v]] + p->view_offset[v];
  p->arena_size = arena;
  free(last_use);
  free(items);
  return kiln_ok();
}
