/* The CPU target's part for kernels/math (private to src/hal/cpu). */
#ifndef KILN_HAL_CPU_MATH_H
#define KILN_HAL_CPU_MATH_H

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

/* Runs an ACOS..SIGN or ATAN2..DIV_FLOOR node. Fails on an integer division
 * by zero (the message starts "ZeroDivisionError", as eager's). */
kiln_status_t kiln_hal_cpu_run_math(const kiln_graph_t* g, const kiln_node_t* n,
                                    void* const* bufs, kiln_pool_t* pool);

#endif /* KILN_HAL_CPU_MATH_H */
