/* The device boundary. A target answers two questions about a node of a
 * verified graph: can you run it (supports), and run it on these buffers.
 * The runtime and the constant folder only talk to targets through this.
 * Buffers: bufs[value id] points at each value's bytes (dense, row-major,
 * or the constant's packed layout), bound by the runtime for the call.
 */
#ifndef KILN_HAL_H
#define KILN_HAL_H

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

/* OK when the CPU target has a kernel for this node's op, dtypes and
 * parameters; otherwise KILN_UNSUPPORTED with the reason. */
kiln_status_t kiln_hal_cpu_supports(const kiln_graph_t* graph, const kiln_node_t* node);

/* Runs one node. Fails only on data-dependent errors (an index out of
 * range); shapes were checked when the graph was verified. */
kiln_status_t kiln_hal_cpu_run_node(const kiln_graph_t* graph, const kiln_node_t* node,
                                    void* const* bufs, kiln_pool_t* pool);

#endif /* KILN_HAL_H */
