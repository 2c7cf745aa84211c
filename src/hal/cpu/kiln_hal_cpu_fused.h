/* The CPU target's part for ELTWISE_FUSED (private to src/hal/cpu). */
#ifndef KILN_HAL_CPU_FUSED_H
#define KILN_HAL_CPU_FUSED_H

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

kiln_status_t kiln_hal_cpu_run_fused(const kiln_graph_t* g, const kiln_node_t* n,
                                     void* const* bufs, kiln_pool_t* pool);

#endif /* KILN_HAL_CPU_FUSED_H */
