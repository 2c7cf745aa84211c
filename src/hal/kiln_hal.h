/* The device boundary. A target answers questions about a node of a
 * verified graph: can you run it (supports), in which form do you keep a
 * constant it reads (constant_form, then constant_pack writes that form),
 * and run it on these buffers. The runtime and the compiler (constant
 * folding, weight packing) only talk to targets through this.
 * Buffers: bufs[value id] points at each value's bytes (dense, row-major,
 * or the constant's packed layout), bound by the runtime for the call.
 */
#ifndef KILN_HAL_H
#define KILN_HAL_H

#include <stddef.h>

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

/* OK when the CPU target has a kernel for this node's op, dtypes and
 * parameters; otherwise KILN_UNSUPPORTED with the reason. */
kiln_status_t kiln_hal_cpu_supports(const kiln_graph_t* graph, const kiln_node_t* node);

/* Runs one node. Fails only on data-dependent errors (an index out of
 * range); shapes were checked when the graph was verified. */
kiln_status_t kiln_hal_cpu_run_node(const kiln_graph_t* graph, const kiln_node_t* node,
                                    void* const* bufs, kiln_pool_t* pool);

/* What the model asks of its weights (the compile options a target reads
 * when it chooses a constant's form). */
typedef struct kiln_hal_weights_s {
  int bf16;        /* LINEAR weights: 1 stored as bf16, 2 bf16 compute; 0 fp32 */
  int quant_bits;  /* LINEAR weights quantized (weight-only): 8 or 4; 0 none.
                    * Wins over bf16 */
  int quant_group; /* int4 group size along K */
  int quant_asym;  /* int4 with zero points */
  int quant_a8;    /* int8 with int8 activations for M > 8 (KILN_GEMM_QUANT_A8) */
} kiln_hal_weights_t;

/* The form a target keeps one constant in for a node that reads it. Two
 * forms equal field by field hold the same bytes for the same constant, so
 * nodes asking for equal forms share one prepared copy. */
typedef struct kiln_hal_constant_form_s {
  kiln_layout_t layout; /* the constant's own layout: keep it as it is */
  size_t nbytes;        /* of the prepared form */
  int64_t detail[3];    /* the target's own (the CPU: conv groups and panel,
                         * int4 group and zero points) */
} kiln_hal_constant_form_t;

/* The form the CPU target wants for input `slot` of node (a constant), given
 * the weight options. Fails when the options ask for a form the target
 * cannot make (an unsupported quantization). */
kiln_status_t kiln_hal_cpu_constant_form(const kiln_graph_t* graph, const kiln_node_t* node,
                                         int32_t slot, const kiln_hal_weights_t* weights,
                                         kiln_hal_constant_form_t* out_form);
/* Writes constant's bytes in `form` (one kiln_hal_cpu_constant_form gave
 * for it) into out (form->nbytes bytes). Thread-safe: constants are packed
 * in parallel. */
/* What the CPU target runs bf16 compute (KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI
 * weights) on now, in words, for KILN_LOG and kiln.explain. */
const char* kiln_hal_cpu_bf16_compute_describe(void);
void kiln_hal_cpu_constant_pack(const kiln_value_t* constant, const kiln_hal_constant_form_t* form,
                                void* out);

#endif /* KILN_HAL_H */
