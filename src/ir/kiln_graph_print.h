/* Printing a graph: a listing for people (the CLI's `kiln info`,
 * kiln.explain), and the layout decision the compiler left in it. */
#ifndef KILN_GRAPH_PRINT_H
#define KILN_GRAPH_PRINT_H

#include <stdio.h>

#include "ir/kiln_graph.h"

/* Writes a readable listing of the graph: one line per node with shapes and
 * origin, then totals. */
void kiln_graph_print(const kiln_graph_t* graph, FILE* out);

/* The channels-last decision as a graph holds it: regions of CONV2D_NHWC
 * and MAX_POOL2D_NHWC (joined through x / residual), their convs, and the
 * copies into and out of them. */
void kiln_graph_summarize_layout(const kiln_graph_t* graph, int32_t* out_regions,
                                 int32_t* out_convs, int32_t* out_conversions);

#endif /* KILN_GRAPH_PRINT_H */
