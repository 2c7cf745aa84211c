/* The "writes" section (layout in kiln_writes.h). It may come from a
 * hostile file: every count, index and flag is checked before use, and an
 * output must have its input's dtype and shape exactly (a symbolic
 * dimension the same symbol), so giving it the input's memory can never
 * write outside that memory. */
#include "runtime/kiln_writes.h"

#include <stdlib.h>
#include <string.h>

enum { KILN_WRITES_HEADER = 16, KILN_WRITES_RECORD = 12, KILN_WRITES_VERSION = 1 };

#define BAD(...) return kiln_status_make(KILN_CORRUPT_ARTIFACT, "writes section: " __VA_ARGS__)

static uint32_t kiln_writes_u32(const unsigned char* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void kiln_writes_clear(kiln_writes_t* w) {
  if (!w) return;
  free(w->input);
  free(w->in_place);
  memset(w, 0, sizeof(*w));
}

static kiln_status_t kiln_writes_check(const kiln_graph_t* g, const unsigned char* b, size_t size,
                                       kiln_writes_t* w) {
  if (size < KILN_WRITES_HEADER || memcmp(b, "KILNWRIT", 8) != 0) BAD("bad magic or size %zu", size);
  uint32_t version = kiln_writes_u32(b + 8), n = kiln_writes_u32(b + 12);
  if (version != KILN_WRITES_VERSION) BAD("version %u (this kiln reads 1)", version);
  if (n > (uint32_t)g->n_outputs) BAD("%u writes for a graph of %d outputs", n, (int)g->n_outputs);
  if (size != KILN_WRITES_HEADER + (size_t)n * KILN_WRITES_RECORD)
    BAD("%zu bytes for %u records (expected %zu)", size, n,
        KILN_WRITES_HEADER + (size_t)n * KILN_WRITES_RECORD);
  for (uint32_t k = 0; k < n; ++k) {
    const unsigned char* r = b + KILN_WRITES_HEADER + (size_t)k * KILN_WRITES_RECORD;
    uint32_t o = kiln_writes_u32(r), i = kiln_writes_u32(r + 4), flags = kiln_writes_u32(r + 8);
    if (o >= (uint32_t)g->n_outputs) BAD("record %u: output %u of %d", k, o, (int)g->n_outputs);
    if (i >= (uint32_t)g->n_inputs) BAD("record %u: input %u of %d", k, i, (int)g->n_inputs);
    if (flags > 1) BAD("record %u: unknown flags 0x%x", k, flags);
    if (w->input[o] >= 0) BAD("output %u is named twice", o);
    for (int32_t p = 0; p < g->n_outputs; ++p)
      if (w->input[p] == (int32_t)i) BAD("input %u is named twice", i);
    const kiln_value_t *x = &g->values[g->inputs[i]], *y = &g->values[g->outputs[o]];
    int same = x->dtype == y->dtype && x->rank == y->rank;
    for (int32_t d = 0; same && d < x->rank; ++d) same = x->shape[d] == y->shape[d];
    if (!same) BAD("output %u is not of input %u's dtype and shape", o, i);
    w->input[o] = (int32_t)i;
    w->in_place[o] = (uint8_t)(flags & 1);
  }
  w->n = (int32_t)n;
  return kiln_ok();
}

kiln_status_t kiln_writes_load(const kiln_graph_t* g, const void* bytes, size_t size,
                               kiln_writes_t* out) {
  memset(out, 0, sizeof(*out));
  size_t n_out = g->n_outputs > 0 ? (size_t)g->n_outputs : 1;
  out->input = malloc(n_out * sizeof(int32_t));
  out->in_place = calloc(n_out, 1);
  if (!out->input || !out->in_place) {
    kiln_writes_clear(out);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "writes table");
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) out->input[o] = -1;
  if (!bytes) return kiln_ok();
  kiln_status_t st = kiln_writes_check(g, bytes, size, out);
  if (st) kiln_writes_clear(out);
  return st;
}
