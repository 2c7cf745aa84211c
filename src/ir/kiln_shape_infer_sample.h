/* Shape rules of GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG, kept apart from
 * kiln_shape_infer.c, which dispatches to them. */
#ifndef KILN_SHAPE_INFER_SAMPLE_H
#define KILN_SHAPE_INFER_SAMPLE_H

#include "ir/kiln_graph.h"

kiln_status_t kiln_graph_infer_sample(const kiln_graph_t* g, const kiln_node_t* n,
                                      kiln_value_t* out);

#endif /* KILN_SHAPE_INFER_SAMPLE_H */
