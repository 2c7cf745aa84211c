/* The shape rules, one per op record (kiln_ops.h names its rule): each
 * checks what the op's kernel will rely on (ranks, matching dims, dtypes,
 * parameter ranges) and writes the result's dtype and shape into out
 * (zeroed by the caller, kiln_shape_infer_concrete, which has checked the
 * node's input ids and required inputs). Rules of several ops of one kind
 * share a file: kiln_shape_infer.c (the core ops), _nn.c (convolution and
 * pooling gradients, channels-last), _movement.c, _sample.c, _fused.c. */
#ifndef KILN_SHAPE_RULES_H
#define KILN_SHAPE_RULES_H

#include "ir/kiln_graph.h"

#define KILN_SHAPE_RULE_DECL(e, name, lo, hi, family, P, FP, shape, entry) \
  kiln_status_t kiln_shape_##shape(const kiln_graph_t* graph, const kiln_node_t* node, \
                                   kiln_value_t* out);
KILN_OP_LIST(KILN_SHAPE_RULE_DECL)
#undef KILN_SHAPE_RULE_DECL

#endif /* KILN_SHAPE_RULES_H */
