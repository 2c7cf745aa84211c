/* Shape rules shared by kiln_shape_infer.c and the per-area rule files it
 * dispatches to (kiln_shape_infer_nn.c, kiln_shape_infer_movement.c). */
#ifndef KILN_SHAPE_COMMON_H
#define KILN_SHAPE_COMMON_H

#include "ir/kiln_graph.h"

/* One spatial output size of a window op with every parameter validated. */
kiln_status_t kiln_shape_window_out_size(const char* what, int64_t in, int64_t k, int64_t s,
                                         int64_t p, int64_t d, int ceil_mode, int64_t* out);

/* The element range [*lo, *hi] a strided view touches: params p as
 * STRIDED_COPY's ([1..8] dims, [9..16] strides, [17] offset) over rank r.
 * Offsets and strides beyond 2^44 are refused, and every step is bounded
 * before it is added, so untrusted params cannot overflow int64. */
kiln_status_t kiln_shape_view_extent(const int64_t* p, int32_t r, int64_t* lo, int64_t* hi);

/* The shape rules on concrete sizes (kiln_shape_infer.c);
 * kiln_graph_infer_node runs them directly for a concrete node, at two probe
 * bindings for a symbolic one (kiln_shape_infer_sym.c). */
kiln_status_t kiln_shape_infer_concrete(const kiln_graph_t* graph, const kiln_node_t* node,
                                        kiln_value_t* out);

#endif /* KILN_SHAPE_COMMON_H */
