/* Shape rule of ELTWISE_FUSED (kiln_shape_infer.c dispatches to it). */
#ifndef KILN_SHAPE_INFER_FUSED_H
#define KILN_SHAPE_INFER_FUSED_H

#include "ir/kiln_graph.h"

kiln_status_t kiln_graph_infer_eltwise_fused(const kiln_graph_t* g, const kiln_node_t* n,
                                             kiln_value_t* out);

#endif /* KILN_SHAPE_INFER_FUSED_H */
