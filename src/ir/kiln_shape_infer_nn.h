/* Shape rules of the training ops (convolution and pooling gradients), kept
 * beside kiln_shape_infer.c, which dispatches to them. */
#ifndef KILN_SHAPE_INFER_NN_H
#define KILN_SHAPE_INFER_NN_H

#include "ir/kiln_graph.h"

#include "ir/kiln_shape_common.h"

/* CONV2D_GRAD_INPUT, CONV2D_GRAD_WEIGHT, MAX_POOL2D_INDICES, MAX_POOL2D_GRAD,
 * AVG_POOL2D_GRAD, ADAPTIVE_AVG_POOL2D, ADAPTIVE_AVG_POOL2D_GRAD. */
kiln_status_t kiln_shape_infer_nn(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out);

/* CONV2D_NHWC (channels-last CONV2D). */
kiln_status_t kiln_shape_infer_conv2d_nhwc(const kiln_graph_t* g, const kiln_node_t* n,
                                           kiln_value_t* out);

#endif /* KILN_SHAPE_INFER_NN_H */
