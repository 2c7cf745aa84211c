/* The memory plan in an artifact's "plan" section: written at save, checked
 * against the graph and used at load (kiln_plan_io.c gives the layout and
 * the checks). Files without the section get a plan built as before. */
#ifndef KILN_PLAN_IO_H
#define KILN_PLAN_IO_H

#include <stddef.h>

#include "runtime/kiln_plan.h"

#define KILN_PLAN_SECTION "plan"

/* The section bytes for plan p of graph g: *out_bytes is freed with free(). */
kiln_status_t kiln_plan_serialize(const kiln_graph_t* g, const kiln_plan_t* p, void** out_bytes,
                                  size_t* out_size);

/* Reads and validates a stored plan for g (a verified graph). A plan that
 * could let any value read or write outside its buffer, or two live values
 * share bytes, is KILN_CORRUPT_ARTIFACT with a message; *out_plan is then
 * empty. */
kiln_status_t kiln_plan_load(const kiln_graph_t* g, const void* bytes, size_t size,
                             kiln_plan_t* out_plan);

/* 1 when two plans are identical (for tests: the planner is deterministic). */
int kiln_plan_equal(const kiln_plan_t* a, const kiln_plan_t* b, int32_t n_outputs);

#endif /* KILN_PLAN_IO_H */
