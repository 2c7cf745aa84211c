/* What a node costs, for the roofline profile (kiln.profile, `kiln profile`,
 * torch.profiler's event arguments): the FLOPs it does and the bytes it
 * moves, counted from its op, shapes and params alone. One definition, used
 * by the C command line and by Python through the extension.
 *
 * FLOPs: GEMMs (LINEAR, MATMUL), convolutions and their gradients, and
 * attention count 2 per multiply-add (eager's flop counter's rule); pure
 * data movement (copies, gathers, casts, padding, scatter without a
 * reduction) counts 0; an ELTWISE_FUSED node counts one per instruction per
 * output element; norms, softmax, GELU and their backward a few per element
 * (about what their kernels do); every other op one per output element
 * (reductions: per input element). Bytes: each distinct input value and the
 * output once, constants at their stored size (packed, bf16 or quantized
 * weights as stored), others dense, except that a gather, embedding bag or
 * strided copy reads at most what it writes of its table (a token's row,
 * not the vocabulary): a lower bound (nothing read twice). A
 * view node costs nothing. Symbolic sizes cost 0: pass a concrete graph (a
 * symbolic model's kiln_model_last_graph after a call). */
#ifndef KILN_COST_H
#define KILN_COST_H

#include <stdint.h>

#include "ir/kiln_graph.h"

typedef struct kiln_node_cost_s {
  int64_t flops;
  int64_t bytes;
  int64_t constant_bytes; /* of those bytes, the constants' (weights) */
} kiln_node_cost_t;

void kiln_node_cost(const kiln_graph_t* graph, const kiln_node_t* node, kiln_node_cost_t* out);

/* What a call streams from the weights: the bytes of every constant a
 * non-view node reads, each constant once, at the most one node reads of it
 * (an embedding table: the rows gathered). The least a call can move, so
 * bandwidth / these bytes bounds calls per second from above; -1 when out
 * of memory. *out_rows: the rows (M) of the LINEAR with the largest weight,
 * the tokens one call computes in a decode step (0 without a LINEAR reading
 * a constant weight); *out_flops: the FLOPs of the nodes that read
 * constants. */
int64_t kiln_graph_weight_bytes(const kiln_graph_t* graph, int64_t* out_rows, int64_t* out_flops);

#endif /* KILN_COST_H */
