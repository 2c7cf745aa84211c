/* Static memory planning: one arena for every intermediate, offsets from
 * liveness. Computed once per compiled model; no allocation per call.
 *
 * Views (kiln_node_is_view: reshapes, contiguous slices) share their root
 * value's bytes at a byte offset. A graph output whose root is an
 * intermediate made for it alone is written straight into the caller's
 * output buffer ("bound"); other outputs are copied at the end.
 */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "ir/kiln_graph.h"

/* An arena item: an intermediate root with its live range (node indices)
 * and the bytes reserved for it at its offset. */
typedef struct kiln_plan_slot_s {
  int32_t value;
  int32_t first, last;
  size_t reserved;
} kiln_plan_slot_t;

typedef struct kiln_plan_s {
  int32_t n_values;
  int32_t* root;        /* per value: the value whose bytes it uses */
  int64_t* view_offset; /* per value: byte offset into its root's bytes */
  int64_t* offset;      /* per value: arena byte offset, or -1 (not in the arena) */
  int32_t* bound_output; /* per value: graph output index written in place, or -1 */
  int32_t* output_copy; /* per graph output: 1 when it must be copied after the run */
  size_t arena_size;
  int32_t n_slots;
  kiln_plan_slot_t* slots; /* the arena items, in value order */
} kiln_plan_t;

kiln_status_t kiln_plan_build(const kiln_graph_t* graph, kiln_plan_t* out_plan);
/* Plans graph as kiln_plan_build does, but keeps prev's arena offsets when
 * graph's arena items are prev's (the same values with the same live
 * ranges: another binding of the same symbolic graph) and each fits in what
 * prev reserved for it; otherwise places them anew, reserving headroom_pct
 * percent more than each needs, so that the next sizes of a growing symbol
 * (a decode step's cache length) usually fit without placing again. prev
 * may be NULL; it is only read. */
kiln_status_t kiln_plan_build_from(const kiln_graph_t* graph, const kiln_plan_t* prev,
                                   int headroom_pct, kiln_plan_t* out_plan);
/* 1 when `plan`, built (kiln_plan_build_from) for another binding of the
 * symbolic graph `graph` is an instance of, is right as it stands for
 * graph's sizes now: planning again would give the same roots, view
 * offsets and bound outputs, and each arena item fits the bytes the plan
 * reserved for it (so its offsets serve). nodes and values (ascending ids)
 * are the nodes and values whose sizes the binding can change
 * (kiln_graph_sym_sites); every other node is a view or not, at the same
 * offset, at every binding. Reads only those, the outputs and the plan's
 * slots: how a decode step whose cache grew by one keeps its plan without
 * planning. A plan without slots (loaded from a file) is never kept. */
int kiln_plan_fits(const kiln_graph_t* graph, const kiln_plan_t* plan, const int32_t* nodes,
                   int32_t n_nodes, const int32_t* values, int32_t n_values);
/* A copy of src (which stays as it is) into *out_plan. */
kiln_status_t kiln_plan_copy(const kiln_plan_t* src, int32_t n_outputs, kiln_plan_t* out_plan);
void kiln_plan_deinitialize(kiln_plan_t* plan);

#endif /* KILN_PLAN_H */
