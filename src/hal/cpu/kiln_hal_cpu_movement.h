/* The CPU target's PAD, STRIDED_SCATTER, SCATTER, SCAN and ARGSORT
 * (dispatched from kiln_hal_cpu_run_node). */
#ifndef KILN_HAL_CPU_MOVEMENT_H
#define KILN_HAL_CPU_MOVEMENT_H

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

kiln_status_t kiln_hal_cpu_run_movement(const kiln_graph_t* g, const kiln_node_t* n,
                                        void* const* bufs, kiln_pool_t* pool);

#endif /* KILN_HAL_CPU_MOVEMENT_H */
