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

typedef struct kiln_plan_s {
  int32_t n_values;
  int32_t* root;        /* per value: the value whose bytes it uses */
  int64_t* view_offset; /* per value: byte offset into its root's bytes */
  int64_t* offset;      /* per value: arena byte offset, or -1 (not in the arena) */
  int32_t* bound_output; /* per value: graph output index written in place, or -1 */
  int32_t* output_copy; /* per graph output: 1 when it must be copied after the run */
  size_t arena_size;
} kiln_plan_t;

kiln_status_t kiln_plan_build(const kiln_graph_t* graph, kiln_plan_t* out_plan);
void kiln_plan_deinitialize(kiln_plan_t* plan);

#endif /* KILN_PLAN_H */
