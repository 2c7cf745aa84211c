/* The memory plan stored in an artifact (its "plan" section), and the
 * loader that checks a stored plan against the graph before the runtime
 * uses it. The section may come from a hostile file, so nothing in it is
 * trusted: every root must be the value's real view root (or itself), every
 * view offset what the view node makes and inside its base, every bound
 * output a binding the planner could make, every arena range aligned, inside
 * the arena and disjoint from every range live at the same time. A plan
 * passing these checks is as safe as a freshly built one (and, since the
 * planner is deterministic, one written by this version equals it).
 *
 * Layout (little-endian):
 *   0   8  "KILNPLAN"
 *   8   4  u32 version (1)
 *  12   4  u32 value count V (the graph's)
 *  16   4  u32 output count O (the graph's)
 *  20   4  u32 reserved, 0
 *  24   8  u64 arena size in bytes
 *  32      V records of 24 bytes: i64 arena offset (-1: none), i64 view
 *          byte offset into the root, i32 root value, i32 bound output (-1)
 *          then O i32s: 1 when output o is copied after the run.
 */
#include "runtime/kiln_plan_io.h"

#include <stdlib.h>
#include <string.h>

#include "base/kiln_alloc.h"

enum { KILN_PLAN_HEADER = 32, KILN_PLAN_RECORD = 24, KILN_PLAN_VERSION = 1 };

static void kiln_plan_put(unsigned char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t kiln_plan_get(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

kiln_status_t kiln_plan_serialize(const kiln_graph_t* g, const kiln_plan_t* p, void** out_bytes,
                                  size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  KILN_CHECK_ARG(p->n_values == g->n_values, "plan of %d values for a graph of %d", p->n_values,
                 g->n_values);
  size_t size = KILN_PLAN_HEADER + (size_t)g->n_values * KILN_PLAN_RECORD +
                (size_t)g->n_outputs * 4;
  unsigned char* b = calloc(size, 1);
  if (!b) return kiln_status_make(KILN_OUT_OF_MEMORY, "plan section");
  memcpy(b, "KILNPLAN", 8);
  kiln_plan_put(b + 8, KILN_PLAN_VERSION, 4);
  kiln_plan_put(b + 12, (uint32_t)g->n_values, 4);
  kiln_plan_put(b + 16, (uint32_t)g->n_outputs, 4);
  kiln_plan_put(b + 24, (uint64_t)p->arena_size, 8);
  for (int32_t v = 0; v < g->n_values; ++v) {
    unsigned char* r = b + KILN_PLAN_HEADER + (size_t)v * KILN_PLAN_RECORD;
    kiln_plan_put(r, (uint64_t)p->offset[v], 8);
    kiln_plan_put(r + 8, (uint64_t)p->view_offset[v], 8);
    kiln_plan_put(r + 16, (uint32_t)p->root[v], 4);
    kiln_plan_put(r + 20, (uint32_t)p->bound_output[v], 4);
  }
  unsigned char* oc = b + KILN_PLAN_HEADER + (size_t)g->n_values * KILN_PLAN_RECORD;
  for (int32_t o = 0; o < g->n_outputs; ++o) kiln_plan_put(oc + 4 * o, (uint32_t)p->output_copy[o], 4);
  *out_bytes = b;
  *out_size = size;
  return kiln_ok();
}

#define BAD(...) return kiln_status_make(KILN_CORRUPT_ARTIFACT, "plan section: " __VA_ARGS__)

/* Every check but allocation; p's arrays are filled from the bytes. */
static kiln_status_t kiln_plan_check(const kiln_graph_t* g, const unsigned char* b, size_t size,
                                     kiln_plan_t* p, int32_t* last_use) {
  int32_t nv = g->n_values, no = g->n_outputs;
  for (int32_t v = 0; v < nv; ++v) {
    const unsigned char* r = b + KILN_PLAN_HEADER + (size_t)v * KILN_PLAN_RECORD;
    p->offset[v] = (int64_t)kiln_plan_get(r, 8);
    p->view_offset[v] = (int64_t)kiln_plan_get(r + 8, 8);
    p->root[v] = (int32_t)(uint32_t)kiln_plan_get(r + 16, 4);
    p->bound_output[v] = (int32_t)(uint32_t)kiln_plan_get(r + 20, 4);
  }
  const unsigned char* oc = b + KILN_PLAN_HEADER + (size_t)nv * KILN_PLAN_RECORD;
  for (int32_t o = 0; o < no; ++o) {
    uint64_t c = kiln_plan_get(oc + 4 * o, 4);
    if (c > 1) BAD("output %d copy flag %llu", o, (unsigned long long)c);
    p->output_copy[o] = (int32_t)c;
  }
  (void)size;
  /* Roots and view offsets: exactly the graph's view structure (values are
   * in topological order, so an input's root is checked before its view). */
  for (int32_t v = 0; v < nv; ++v) {
    const kiln_value_t* val = &g->values[v];
    int32_t r = p->root[v];
    if (r < 0 || r >= nv) BAD("value %d has root %d of %d values", v, r, nv);
    int64_t bytes = 0;
    const kiln_node_t* n = val->kind == KILN_VALUE_INTERMEDIATE ? &g->nodes[val->producer] : NULL;
    if (n && kiln_node_is_view(g, n, &bytes)) {
      int32_t in = n->inputs[0];
      if (r != p->root[in] || p->view_offset[v] != p->view_offset[in] + bytes)
        BAD("value %d is a view of value %d but its root or offset differs", v, in);
    } else if (r != v || p->view_offset[v] != 0) {
      BAD("value %d is not a view but has root %d, offset %lld", v, r,
          (long long)p->view_offset[v]);
    }
    /* Inside the base (the view's own extent was checked by the graph). */
    uint64_t vb = kiln_value_dense_bytes(val), rb = kiln_value_dense_bytes(&g->values[r]);
    if (p->view_offset[v] < 0 || (uint64_t)p->view_offset[v] > rb ||
        vb > rb - (uint64_t)p->view_offset[v])
      BAD("value %d's view [%lld, +%llu) leaves its base of %llu bytes", v,
          (long long)p->view_offset[v], (unsigned long long)vb, (unsigned long long)rb);
  }
  /* Bound outputs: only roots the planner could bind. */
  for (int32_t v = 0; v < nv; ++v) {
    int32_t o = p->bound_output[v];
    if (o == -1) continue;
    if (o < 0 || o >= no || p->root[v] != v || g->values[v].kind != KILN_VALUE_INTERMEDIATE)
      BAD("value %d binds output %d", v, o);
    int32_t ov = g->outputs[o];
    if (p->root[ov] != v || p->view_offset[ov] != 0 || g->values[ov].dtype != g->values[v].dtype ||
        kiln_value_dense_bytes(&g->values[ov]) != kiln_value_dense_bytes(&g->values[v]) ||
        p->output_copy[o])
      BAD("value %d cannot be bound to output %d", v, o);
    for (int32_t w = 0; w < v; ++w)
      if (p->bound_output[w] == o) BAD("output %d is bound twice", o);
  }
  for (int32_t o = 0; o < no; ++o)
    if (!p->output_copy[o] && p->bound_output[p->root[g->outputs[o]]] != o)
      BAD("output %d is neither bound nor copied", o);
  /* Live ranges, as the planner computes them. */
  for (int32_t v = 0; v < nv; ++v) last_use[v] = -1;
  for (int32_t ni = 0; ni < g->n_nodes; ++ni)
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i)
      if (g->nodes[ni].inputs[i] >= 0) last_use[p->root[g->nodes[ni].inputs[i]]] = ni;
  for (int32_t o = 0; o < no; ++o)
    if (p->output_copy[o]) last_use[p->root[g->outputs[o]]] = g->n_nodes;
  /* Arena ranges. */
  for (int32_t v = 0; v < nv; ++v) {
    int32_t r = p->root[v];
    int in_arena = g->values[r].kind == KILN_VALUE_INTERMEDIATE && p->bound_output[r] < 0;
    if (!in_arena) {
      if (p->offset[v] != -1) BAD("value %d has arena offset %lld but is not in the arena", v,
                                  (long long)p->offset[v]);
      continue;
    }
    if (r != v) {
      if (p->offset[v] != p->offset[r] + p->view_offset[v])
        BAD("view %d's arena offset is not its root's plus its view offset", v);
      continue;
    }
    uint64_t sz = kiln_align_up(kiln_value_dense_bytes(&g->values[v]), KILN_ALIGNMENT);
    if (p->offset[v] < 0 || p->offset[v] % KILN_ALIGNMENT ||
        (uint64_t)p->offset[v] > p->arena_size || sz > p->arena_size - (uint64_t)p->offset[v])
      BAD("value %d's range [%lld, +%llu) is misaligned or outside the %zu-byte arena", v,
          (long long)p->offset[v], (unsigned long long)sz, p->arena_size);
  }
  /* No two roots live at once may share bytes. */
  for (int32_t v = 0; v < nv; ++v) {
    if (p->root[v] != v || p->offset[v] < 0) continue;
    int32_t vf = g->values[v].producer, vl = last_use[v] < 0 ? vf : last_use[v];
    uint64_t vo = (uint64_t)p->offset[v];
    uint64_t vs = kiln_align_up(kiln_value_dense_bytes(&g->values[v]), KILN_ALIGNMENT);
    for (int32_t w = v + 1; w < nv; ++w) {
      if (p->root[w] != w || p->offset[w] < 0) continue;
      int32_t wf = g->values[w].producer, wl = last_use[w] < 0 ? wf : last_use[w];
      if (vl < wf || wl < vf) continue;
      uint64_t wo = (uint64_t)p->offset[w];
      uint64_t ws = kiln_align_up(kiln_value_dense_bytes(&g->values[w]), KILN_ALIGNMENT);
      if (vs && ws && vo < wo + ws && wo < vo + vs)
        BAD("values %d and %d are live together and overlap in the arena", v, w);
    }
  }
  return kiln_ok();
}

kiln_status_t kiln_plan_load(const kiln_graph_t* g, const void* bytes, size_t size,
                             kiln_plan_t* p) {
  memset(p, 0, sizeof(*p));
  const unsigned char* b = bytes;
  if (!b || size < KILN_PLAN_HEADER || memcmp(b, "KILNPLAN", 8) != 0)
    BAD("%zu bytes without the KILNPLAN header", size);
  uint64_t version = kiln_plan_get(b + 8, 4), nv = kiln_plan_get(b + 12, 4),
           no = kiln_plan_get(b + 16, 4), reserved = kiln_plan_get(b + 20, 4);
  if (version != KILN_PLAN_VERSION) BAD("version %llu, this reader knows %d",
                                        (unsigned long long)version, KILN_PLAN_VERSION);
  if (reserved) BAD("reserved bytes are not zero");
  if (nv != (uint64_t)g->n_values || no != (uint64_t)g->n_outputs)
    BAD("%llu values and %llu outputs, the graph has %d and %d", (unsigned long long)nv,
        (unsigned long long)no, g->n_values, g->n_outputs);
  if (size != KILN_PLAN_HEADER + nv * KILN_PLAN_RECORD + no * 4)
    BAD("%zu bytes, expected %llu", size,
        (unsigned long long)(KILN_PLAN_HEADER + nv * KILN_PLAN_RECORD + no * 4));
  /* The arena never needs more than every intermediate side by side. */
  uint64_t arena = kiln_plan_get(b + 24, 8), bound = 0;
  for (int32_t v = 0; v < g->n_values; ++v)
    if (g->values[v].kind == KILN_VALUE_INTERMEDIATE)
      bound += kiln_align_up(kiln_value_dense_bytes(&g->values[v]), KILN_ALIGNMENT);
  if (arena > bound) BAD("arena of %llu bytes, more than the %llu all intermediates take",
                         (unsigned long long)arena, (unsigned long long)bound);
  int32_t n = g->n_values;
  p->n_values = n;
  p->arena_size = (size_t)arena;
  p->root = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  p->offset = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  p->view_offset = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  p->bound_output = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  p->output_copy = calloc((size_t)g->n_outputs + 1, sizeof(int32_t));
  int32_t* last_use = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  kiln_status_t s = (!p->root || !p->offset || !p->view_offset || !p->bound_output ||
                     !p->output_copy || !last_use)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "memory plan")
                        : kiln_plan_check(g, b, size, p, last_use);
  free(last_use);
  if (s) kiln_plan_deinitialize(p);
  return s;
}

int kiln_plan_equal(const kiln_plan_t* a, const kiln_plan_t* b, int32_t n_outputs) {
  if (a->n_values != b->n_values || a->arena_size != b->arena_size) return 0;
  size_t n = (size_t)a->n_values;
  return !memcmp(a->root, b->root, n * sizeof(int32_t)) &&
         !memcmp(a->offset, b->offset, n * sizeof(int64_t)) &&
         !memcmp(a->view_offset, b->view_offset, n * sizeof(int64_t)) &&
         !memcmp(a->bound_output, b->bound_output, n * sizeof(int32_t)) &&
         !memcmp(a->output_copy, b->output_copy, (size_t)n_outputs * sizeof(int32_t));
}
