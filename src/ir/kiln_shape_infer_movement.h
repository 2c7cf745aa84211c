/* Shape rules of the padding, scatter, scan and sort ops (PAD,
 * STRIDED_SCATTER, SCATTER, SCAN, ARGSORT), kept apart from
 * kiln_shape_infer.c, which dispatches to them. */
#ifndef KILN_SHAPE_INFER_MOVEMENT_H
#define KILN_SHAPE_INFER_MOVEMENT_H

#include "ir/kiln_graph.h"

kiln_status_t kiln_graph_infer_movement(const kiln_graph_t* g, const kiln_node_t* n,
                                        kiln_value_t* out);

#endif /* KILN_SHAPE_INFER_MOVEMENT_H */
