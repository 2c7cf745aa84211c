/* The CPU target's GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG (dispatched
 * from kiln_hal_cpu_run_node). */
#ifndef KILN_HAL_CPU_SAMPLE_H
#define KILN_HAL_CPU_SAMPLE_H

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

kiln_status_t kiln_hal_cpu_run_sample(const kiln_graph_t* g, const kiln_node_t* n,
                                      void* const* bufs, kiln_pool_t* pool);

#endif /* KILN_HAL_CPU_SAMPLE_H */
