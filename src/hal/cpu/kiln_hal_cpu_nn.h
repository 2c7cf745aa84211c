/* The CPU target's training ops (convolution and pooling gradients), kept
 * apart from kiln_hal_cpu.c, which dispatches to them. */
#ifndef KILN_HAL_CPU_NN_H
#define KILN_HAL_CPU_NN_H

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"
#include "kernels/conv/kiln_conv.h"

/* CONV2D_GRAD_INPUT, CONV2D_GRAD_WEIGHT, MAX_POOL2D_INDICES, MAX_POOL2D_GRAD,
 * AVG_POOL2D_GRAD, ADAPTIVE_AVG_POOL2D(_GRAD) on a verified graph's node. */
/* CONV2D / CONV2D_NHWC: the convolution kernel's arguments that do not
 * depend on the activation layout (weight geometry, params, packing,
 * buffers; bufs NULL: no buffers); the caller sets n, c, h, w, ho and wo
 * from x's and y's layout. */
void kiln_hal_cpu_conv2d_args(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                              kiln_conv2d_f32_args_t* a);

kiln_status_t kiln_hal_cpu_run_nn(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                                  kiln_pool_t* pool);

#endif /* KILN_HAL_CPU_NN_H */
