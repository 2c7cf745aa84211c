/* The device boundary. A target is a table of functions: which nodes it
 * runs (supports), in which form it keeps a constant a node reads
 * (constant_form, then constant_pack writes that form), what a run of a
 * node needs beyond its buffers (an entry's prepare, once per concrete
 * graph), the run itself, and its memory (alloc, free, copy, synchronize).
 * The runtime and the compiler (constant folding, weight packing) reach a
 * target only through this table; nothing outside src/hal names one.
 *
 * Kernel entries. Every op names one (ir/kiln_ops.h); a target implements
 * the entries it has. prepare works out what a run needs beyond its
 * buffers (the kernel's arguments: geometry, strides, the constants'
 * packed bytes) into prep_size bytes, when a model is made and for each
 * symbolic instance (sizes are concrete there: a symbolic model prepares
 * per binding of its symbols), so that a call only binds buffers; run runs
 * it on bufs[value id] (each value's bytes: dense, row-major, or a
 * constant's packed layout). An entry the target lacks (run NULL) makes the
 * op unsupported: the model is refused when it is made, naming the op.
 *
 * Memory. A target whose memory the host addresses (host_memory 1: the CPU,
 * the reference) runs on the caller's tensors in place. A device with its
 * own memory (host_memory 0) gets its arena from alloc, the caller's inputs
 * copied in and outputs copied out through copy, and may queue its runs:
 * the runtime calls synchronize before it hands results back. Constants
 * stay host bytes in the graph; such a target copies them into its memory
 * in its prepare (the prepared arguments are its own).
 */
#ifndef KILN_HAL_H
#define KILN_HAL_H

#include <stddef.h>
#include <stdio.h>

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"

/* prep: prep_size bytes, 64-byte aligned. run fails only on data-dependent
 * errors (an index out of range); shapes were checked when the graph was
 * verified. */
typedef kiln_status_t (*kiln_hal_prepare_fn)(const kiln_graph_t* graph, const kiln_node_t* node,
                                             void* prep);
typedef kiln_status_t (*kiln_hal_run_fn)(const kiln_graph_t* graph, const kiln_node_t* node,
                                         const void* prep, void* const* bufs, kiln_pool_t* pool);
typedef struct kiln_hal_entry_s {
  kiln_hal_prepare_fn prepare; /* NULL: nothing to prepare (prep_size 0) */
  kiln_hal_run_fn run;         /* NULL: the target lacks this entry */
  size_t prep_size;
  /* run with the scalar reference kernels that sit beside the fast ones,
   * from the same prepared arguments; NULL when run's kernels are plain C
   * already. The reference target runs it. */
  kiln_hal_run_fn reference;
} kiln_hal_entry_t;

/* What the model asks of its weights (the compile options a target reads
 * when it chooses a constant's form). */
typedef struct kiln_hal_weights_s {
  int bf16;        /* LINEAR weights: 1 stored as bf16, 2 bf16 compute; 0 fp32 */
  int quant_bits;  /* LINEAR weights quantized (weight-only): 8 or 4; 0 none.
                    * Wins over bf16 */
  int quant_group; /* int4 group size along K */
  int quant_asym;  /* int4 with zero points */
  int quant_a8;    /* int8 activations (KILN_GEMM_QUANT_A8): int8 and int4, every M */
  int bf16_in_place; /* a bf16 model's linear weights (held as bf16 by the fold,
                      * KILN_LAYOUT_WIDENED_BF16_T) read where they lie, torch's
                      * (N, K) rows, instead of packed: no second copy of the
                      * model (bf16 and fp32 weights only; quant and compute_bf16
                      * still pack) */
} kiln_hal_weights_t;

/* The form a target keeps one constant in for a node that reads it. Two
 * forms equal field by field hold the same bytes for the same constant, so
 * nodes asking for equal forms share one prepared copy. */
typedef struct kiln_hal_constant_form_s {
  kiln_layout_t layout; /* the constant's own layout: keep it as it is */
  size_t nbytes;        /* of the prepared form */
  int64_t detail[3];    /* the target's own (the CPU: conv groups and panel,
                         * int4 group and zero points) */
  const char* note;     /* a static string saying why this form, when that is
                         * worth telling the user (a checkpoint's quantized
                         * weight its kernels cannot take as it is), or NULL */
} kiln_hal_constant_form_t;

typedef enum kiln_hal_copy_e {
  KILN_HAL_COPY_TO_DEVICE = 0, /* host bytes into the target's memory */
  KILN_HAL_COPY_TO_HOST,       /* the target's memory into host bytes */
  KILN_HAL_COPY_ON_DEVICE,     /* within the target's memory */
} kiln_hal_copy_t;

typedef struct kiln_hal_target_s kiln_hal_target_t;
struct kiln_hal_target_s {
  const char* name;
  /* [KILN_ENTRY_COUNT]: the kernel entries (run NULL where it has none). */
  const kiln_hal_entry_t* entries;
  /* OK when the target takes this node's dtypes and constant layouts (it
   * has the node's entry: checked before); else KILN_UNSUPPORTED, or
   * KILN_INVALID_ARGUMENT for a constant whose bytes do not match its
   * layout (a loaded file may say anything). */
  kiln_status_t (*supports)(const kiln_graph_t* graph, const kiln_node_t* node);
  /* The form the target wants for input `slot` of node (a constant), given
   * the weight options; fails when they ask for a form it cannot make (an
   * unsupported quantization). */
  kiln_status_t (*constant_form)(const kiln_graph_t* graph, const kiln_node_t* node, int32_t slot,
                                 const kiln_hal_weights_t* weights,
                                 kiln_hal_constant_form_t* out_form);
  /* Writes constant's bytes in form (constant_form gave it) into out
   * (form->nbytes host bytes). Thread-safe: constants pack in parallel.
   * Fails only when working memory runs out (a bf16 weight widened for
   * a quantized form). */
  kiln_status_t (*constant_pack)(const kiln_value_t* constant,
                                 const kiln_hal_constant_form_t* form, void* out);
  /* In words, what the target runs node n on, when that depends on the
   * machine (the CPU: bf16 compute's engine for a packed bf16 weight or a
   * product of two bf16 graph values, the int8 engine of int8
   * activations), as "what: how" ("bf16 compute: AVX512_BF16 dot products
   * (VDPBF16PS)"), for KILN_LOG and kiln.explain (kiln_hal_describe_engines);
   * NULL when there is nothing to say. May be NULL. */
  const char* (*node_describe)(const kiln_graph_t* g, const kiln_node_t* n);
  /* 1: buffers are host pointers (the caller's tensors are bound in place). */
  int host_memory;
  /* 1: runs take no pool (the target's kernels run on the calling thread). */
  int single_thread;
  kiln_status_t (*alloc)(size_t bytes, void** out_ptr);
  void (*free)(void* ptr);
  kiln_status_t (*copy)(void* dst, const void* src, size_t bytes, kiln_hal_copy_t kind);
  /* Waits for every run and copy queued so far. */
  kiln_status_t (*synchronize)(void);
};

/* The targets: "cpu" (the fast kernels, at the ISA level kiln_cpu_isa()
 * allows, threaded over the pool) and "reference" (the scalar reference
 * kernels beside them, on the calling thread: the yardstick any model can
 * be compared with, node by node). */
const kiln_hal_target_t* kiln_hal_target_cpu(void);
const kiln_hal_target_t* kiln_hal_target_reference(void);
/* By name; NULL or "" is the default: $KILN_TARGET when set, else "cpu".
 * NULL for an unknown name. */
const kiln_hal_target_t* kiln_hal_target_find(const char* name);
/* Prints, once each, the lines target->node_describe gives for g's nodes,
 * each after prefix ("  " in kiln.explain, "kiln: " in KILN_LOG). */
void kiln_hal_describe_engines(const kiln_hal_target_t* target, const kiln_graph_t* g,
                               const char* prefix, FILE* out);
/* A target whose memory is the host's, for work that must make host bytes
 * (constant folding) whatever the model's target. */
const kiln_hal_target_t* kiln_hal_target_host(void);

/* The node's entry on target t, or NULL for an op out of range. */
const kiln_hal_entry_t* kiln_hal_entry(const kiln_hal_target_t* t, const kiln_node_t* node);

/* OK when t has the node's entry and takes its dtypes and layouts; else
 * KILN_UNSUPPORTED naming the op and the target. */
kiln_status_t kiln_hal_supports(const kiln_hal_target_t* t, const kiln_graph_t* graph,
                                const kiln_node_t* node);

/* Prepares and runs one node once, on host buffers (the constant folder's
 * way; a model prepares each node when it is made, then runs it per call). */
kiln_status_t kiln_hal_run_node_once(const kiln_hal_target_t* t, const kiln_graph_t* graph,
                                     const kiln_node_t* node, void* const* bufs,
                                     kiln_pool_t* pool);

#endif /* KILN_HAL_H */
