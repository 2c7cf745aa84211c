/* Internals of the simplify pass (kiln_pass_simplify), shared by its files. */
#ifndef KILN_SIMPLIFY_H
#define KILN_SIMPLIFY_H

#include "ir/kiln_graph.h"

/* The value of a one-element dense constant (float32, int64 or int32). */
int kiln_simplify_scalar(const kiln_graph_t* graph, int32_t v, double* out);

/* Rewrites node n in place into the fused op it computes when it is the root
 * of a recognised decomposed form (GELU, GELU-tanh, SiLU, RMSNorm). nodes is
 * the pass's working copy of the graph's nodes (inputs already canonical),
 * n one of them; uses: the readers of each value (kiln_graph_count_uses).
 * Returns 1 when n changed. */
int kiln_simplify_match_pattern(const kiln_graph_t* graph, kiln_node_t* nodes,
                                const int32_t* uses, kiln_node_t* n);

/* Rewrites a STRIDED_COPY of a (reshaped) STRIDED_COPY of x into one
 * STRIDED_COPY of x when the views compose, and a RESHAPE of a single-use
 * (uses: per value of graph) STRIDED_COPY into a STRIDED_COPY when that
 * removes a copy (kiln_simplify_views.c). Returns 1 when n changed. */
int kiln_simplify_compose_views(const kiln_graph_t* graph, const kiln_node_t* nodes,
                                const int32_t* uses, kiln_node_t* n);

/* Points an operand of an elementwise binary or WHERE that is a pure
 * expand (a STRIDED_COPY of stride-0 dims) at the expand's source, the op
 * broadcasting it itself (kiln_simplify_broadcast.c). Returns 1 when n
 * changed. */
int kiln_simplify_fold_expand(const kiln_graph_t* graph, const kiln_node_t* nodes, kiln_node_t* n);

/* Rewrites a CONV2D reading a PAD of zeros on H and W, the same on both
 * sides, into the conv of the PAD's input with that much more padding
 * (kiln_simplify_conv_pad.c). Returns 1 when n changed. */
int kiln_simplify_fold_conv_pad(const kiln_graph_t* graph, const kiln_node_t* nodes, kiln_node_t* n);

#endif /* KILN_SIMPLIFY_H */
