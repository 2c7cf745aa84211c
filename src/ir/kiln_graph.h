/* The kiln graph IR: values (typed, shaped tensors) and nodes (ops over
 * them), in topological order by construction.
 *
 * Values are inputs (bound per call), constants (bytes the graph holds) or
 * intermediates (made by one node). Graph outputs are a list of value ids.
 * Nodes are appended only after their inputs exist, so node order is a valid
 * execution order; passes that rewrite the graph keep that property.
 *
 * Ownership: the graph owns its values' names, its nodes' origins and every
 * constant's bytes unless the constant was added with
 * kiln_graph_add_constant_borrowed (then the caller keeps them alive for the
 * graph's lifetime, which is how a loaded artifact's weights stay in place).
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_alloc.h"
#include "base/kiln_shared.h"
#include "base/kiln_status.h"
#include "base/kiln_dtype.h"
#include "ir/kiln_ops.h"
#include "ir/kiln_sym.h"

#define KILN_MAX_RANK 8
#define KILN_MAX_NODE_INPUTS 8
#define KILN_MAX_NODE_OUTPUTS 1
#define KILN_MAX_PARAMS 24
#define KILN_MAX_FPARAMS 4

typedef enum kiln_value_kind_e {
  KILN_VALUE_INTERMEDIATE = 0,
  KILN_VALUE_INPUT,
  KILN_VALUE_CONSTANT,
  KILN_VALUE_KIND_COUNT
} kiln_value_kind_t;

/* How a constant's bytes are laid out. */
typedef enum kiln_layout_e {
  KILN_LAYOUT_DENSE = 0,       /* row-major, shape as given */
  KILN_LAYOUT_GEMM_PACKED_B,   /* kiln_gemm_f32_pack_b of the (K, N) matrix */
  KILN_LAYOUT_TRANSPOSED_2D,   /* a (K, N) matrix stored as its (N, K) transpose,
                                * row-major: nn.Linear's weight, used in place */
  KILN_LAYOUT_GEMM_PACKED_B_BF16, /* kiln_gemm_bf16_pack_b of the (K, N) matrix: the
                                * value is f32 (K, N) whose elements are bf16-rounded */
  KILN_LAYOUT_CONV2D_PACKED,   /* a conv2d weight (O, C / groups, kh, kw) as
                                * kiln_conv2d_f32_pack_weight lays it out for
                                * its node's groups, panels of 6 channels */
  KILN_LAYOUT_CONV2D_PACKED_16, /* the same with panels of 16 channels */
  KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI, /* kiln_gemm_bf16_vnni_pack_b of the (K, N) matrix:
                                * bf16 compute (A rounded to bf16 too); the value
                                * is f32 (K, N) whose elements are bf16-rounded */
  KILN_LAYOUT_GEMM_PACKED_B_Q8, /* kiln_gemm_quant_pack_b of the (K, N) matrix, int8 per
                                * column (header, scales, panels: kiln_gemm.h); the
                                * value is f32 (K, N) whose elements are dequantized */
  KILN_LAYOUT_GEMM_PACKED_B_Q4, /* the same in int4 with group-wise scales (the group
                                * size and symmetry are in the blob's header) */
  KILN_LAYOUT_QUANT_ROWS,      /* a checkpoint's integers, scales and zero points,
                                * one scale (group) per row of dim 0: a float32
                                * value stored as kiln_quant_const.h says; made
                                * by kiln_graph_add_constant_quant, turned into
                                * its readers' forms by the pack pass, never
                                * read by a kernel nor written to a file */
  KILN_LAYOUT_QUANT_ROWS_T,    /* the same rows read as their 2-d transpose (a
                                * (K, N) value whose N rows are stored: a
                                * quantized nn.Linear weight, W^T) */
  KILN_LAYOUT_JOINED_COLS,     /* a float32 (K, 2N) matrix [A | B] held as pointers
                                * to its two halves' borrowed bytes
                                * (kiln_joined_const.h): made by the gated-MLP
                                * fusion, given its reader's form by the pack
                                * pass, never read by a kernel nor in a file */
  KILN_LAYOUT_CONV2D_PACKED_16_BF16, /* a CONV2D_NHWC weight (O, C / groups, kh, kw)
                                * for bf16 compute (format 2.16): per group and
                                * panel of 16 channels, (u, v, c) taps as VNNI
                                * pairs of channels, bf16 (kiln_conv_nhwc_bf16.h);
                                * the value is f32 whose elements are bf16-rounded */
  KILN_LAYOUT_WIDENED_BF16,    /* a float32 value whose elements are all bf16
                                * values, stored as those bf16 numbers (2 bytes
                                * each, row-major): a bf16 weight's widening
                                * CAST, folded without making the float32 copy
                                * (kiln_pass_fold.c); given its readers' forms
                                * by the pack pass, never read by a kernel nor
                                * written to a file */
  KILN_LAYOUT_WIDENED_BF16_T,  /* the same stored as its 2-d transpose (a bf16
                                * nn.Linear weight read as W^T): torch's (N, K)
                                * rows, which a LINEAR reads in place when the
                                * pack pass keeps them (kiln_hal_weights_t.
                                * bf16_in_place); only such a one is written to
                                * a file (format 2.21) */
  KILN_LAYOUT_COUNT
} kiln_layout_t;

/* Layouts whose byte size is the dense size of the shape. */
static inline int kiln_layout_is_dense_sized(kiln_layout_t layout) {
  return layout == KILN_LAYOUT_DENSE || layout == KILN_LAYOUT_TRANSPOSED_2D;
}

static inline int kiln_layout_is_widened_bf16(kiln_layout_t layout) {
  return layout == KILN_LAYOUT_WIDENED_BF16 || layout == KILN_LAYOUT_WIDENED_BF16_T;
}

/* Layouts a 2-d constant B of a MATMUL may have for the GEMM fusion to make
 * it a LINEAR's weight: the forms a weight has before the pack pass (plain,
 * stored transposed, a checkpoint's quantized rows, bf16 held narrow). */
static inline int kiln_layout_is_unpacked_weight(kiln_layout_t layout) {
  return layout == KILN_LAYOUT_DENSE || layout == KILN_LAYOUT_TRANSPOSED_2D ||
         layout == KILN_LAYOUT_QUANT_ROWS || layout == KILN_LAYOUT_QUANT_ROWS_T ||
         kiln_layout_is_widened_bf16(layout);
}

typedef struct kiln_value_s {
  kiln_dtype_t dtype;
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  kiln_value_kind_t kind;
  int32_t producer; /* node index for intermediates, else -1 */
  kiln_layout_t layout;
  const void* data; /* constants: nbytes of data */
  size_t nbytes;
  void* owned_data; /* freed with the graph when set */
  char* name;       /* owned, may be NULL */
  /* Constants: a key naming the bytes' contents exactly (owned, may be
   * NULL: kiln_graph_set_constant_key), so graphs derived from the same
   * weights share their packed forms; and the shared entry this value's
   * data lives in (a reference, released with the graph), or NULL. */
  char* key;
  kiln_shared_t* shared;
  /* Constants: why the pack pass gave this one its form, when that is
   * worth saying (a static string from the target, printed by
   * kiln_graph_print and KILN_LOG), or NULL. Not written to files. */
  const char* note;
} kiln_value_t;

/* 1 when constant v is a quantized weight blob (int8 or int4) flagged for
 * int8 activations: its header's flags byte, bit 1 (docs/format.md;
 * KILN_GEMM_QUANT_A8 in kiln_gemm.h). */
static inline int kiln_value_int8_activations(const kiln_value_t* v) {
  return (v->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || v->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4) &&
         v->data && v->nbytes > 6 && (((const unsigned char*)v->data)[6] & 2u);
}

typedef struct kiln_node_s {
  kiln_op_t op;
  int32_t n_inputs;
  int32_t n_outputs;
  int32_t inputs[KILN_MAX_NODE_INPUTS]; /* -1: an absent optional input */
  int32_t outputs[KILN_MAX_NODE_OUTPUTS];
  int64_t params[KILN_MAX_PARAMS];
  float fparams[KILN_MAX_FPARAMS];
  char* origin; /* owned, may be NULL: what the node came from, for errors */
} kiln_node_t;

typedef struct kiln_graph_s {
  kiln_allocator_t allocator;
  kiln_value_t* values;
  int32_t n_values, cap_values;
  kiln_node_t* nodes;
  int32_t n_nodes, cap_nodes;
  int32_t* inputs; /* value ids, in call order */
  int32_t n_inputs, cap_inputs;
  int32_t* outputs; /* value ids, in return order (may repeat) */
  int32_t n_outputs;
  /* Symbolic sizes (kiln_sym.h): NULL for a concrete graph. Shared with the
   * graphs passes derive from this one. */
  kiln_sym_table_t* syms;
  /* An instance (kiln_graph_instantiate): names, origins and constants'
   * bytes belong to the graph it was made from. */
  int borrowed;
} kiln_graph_t;

kiln_status_t kiln_graph_create(kiln_allocator_t allocator, kiln_graph_t** out_graph);
void kiln_graph_release(kiln_graph_t* graph);

/* Number of elements of a value (product of its shape); -1 when a
 * dimension is symbolic. */
int64_t kiln_value_numel(const kiln_value_t* value);
/* 1 when some dimension of the value is symbolic. */
int kiln_value_is_symbolic(const kiln_value_t* value);
/* 1 when some value dimension or node param of the graph is symbolic (the
 * runtime then plans per binding; a file needs a "syms" section). */
int kiln_graph_is_symbolic(const kiln_graph_t* graph);
/* 1 when some input dimension or param of the node is symbolic. */
int kiln_node_is_symbolic(const kiln_graph_t* graph, const kiln_node_t* node);

/* a*b and a+b for sizes that may be symbolic (through the graph's table):
 * what passes use where they compute a size or a stride. Overflow, or a
 * symbol in a graph without a table, gives KILN_DIM_INVALID, which equals
 * no size or param (so a pattern using it does not match). */
#define KILN_DIM_INVALID INT64_MIN
int64_t kiln_graph_dim_mul(const kiln_graph_t* graph, int64_t a, int64_t b);
int64_t kiln_graph_dim_add(const kiln_graph_t* graph, int64_t a, int64_t b);

/* The graph's symbol table, created on first use. */
kiln_status_t kiln_graph_syms(kiln_graph_t* graph, kiln_sym_table_t** out);

/* A concrete copy of a symbolic graph for one binding of its symbols
 * (values[i]: expression i's value, from kiln_sym_eval_all): every shape and
 * param substituted, every node's shape rule re-run on the concrete sizes
 * and checked against the substituted ones (a mismatch is an error naming
 * the node). The copy borrows names, origins and constants' bytes from
 * `graph`, which must outlive it. */
kiln_status_t kiln_graph_instantiate(const kiln_graph_t* graph, const int64_t* values,
                                     kiln_graph_t** out_graph);
/* Where a symbolic graph's sizes are: each value dimension and node param
 * that is symbolic, as (value or node id, dim or param index, expression
 * id); the values with a symbolic dimension and the nodes whose rule reads
 * one (kiln_node_is_symbolic), ids in increasing order. Everything else is
 * the same at every binding. What binding an instance again redoes. */
typedef struct kiln_graph_sym_site_s {
  int32_t item, index, expr;
} kiln_graph_sym_site_t;
typedef struct kiln_graph_sym_sites_s {
  kiln_graph_sym_site_t* dims;
  int32_t n_dims;
  kiln_graph_sym_site_t* params;
  int32_t n_params;
  int32_t* values;
  int32_t n_values;
  int32_t* nodes;
  int32_t n_nodes;
} kiln_graph_sym_sites_t;
/* An expression id the graph's table lacks is KILN_INVALID_ARGUMENT. */
kiln_status_t kiln_graph_sym_sites(const kiln_graph_t* graph, kiln_graph_sym_sites_t* out_sites);
void kiln_graph_sym_sites_free(kiln_graph_sym_sites_t* sites);
/* Binds an instance of `graph` (made by kiln_graph_instantiate) to other
 * values of its symbols, in place: the sizes and parameters at `sites`
 * (kiln_graph_sym_sites of `graph`) are substituted again and the rules of
 * its nodes checked again (NULL sites: every value and node, from `graph`).
 * On an error the instance is left half bound and must not be run. */
kiln_status_t kiln_graph_instance_bind(const kiln_graph_t* graph, const int64_t* values,
                                       const kiln_graph_sym_sites_t* sites,
                                       kiln_graph_t* instance);
/* Dense byte size of a value (numel × dtype size). */
size_t kiln_value_dense_bytes(const kiln_value_t* value);
/* Same dtype, rank and shape. */
int kiln_value_same_type(const kiln_value_t* a, const kiln_value_t* b);

/* Adds a call input. name is copied (may be NULL). */
kiln_status_t kiln_graph_add_input(kiln_graph_t* graph, const char* name, kiln_dtype_t dtype,
                                   int32_t rank, const int64_t* shape, int32_t* out_id);

/* Adds a constant, copying nbytes of data (must equal the dense size for
 * KILN_LAYOUT_DENSE). */
kiln_status_t kiln_graph_add_constant(kiln_graph_t* graph, const char* name,
                                      kiln_dtype_t dtype, int32_t rank, const int64_t* shape,
                                      kiln_layout_t layout, const void* data, size_t nbytes,
                                      int32_t* out_id);
/* As above but borrows data: it must outlive the graph. */
kiln_status_t kiln_graph_add_constant_borrowed(kiln_graph_t* graph, const char* name,
                                               kiln_dtype_t dtype, int32_t rank,
                                               const int64_t* shape, kiln_layout_t layout,
                                               const void* data, size_t nbytes,
                                               int32_t* out_id);
/* As above but takes ownership of `data` (allocated with graph->allocator). */
kiln_status_t kiln_graph_add_constant_owned(kiln_graph_t* graph, const char* name,
                                            kiln_dtype_t dtype, int32_t rank,
                                            const int64_t* shape, kiln_layout_t layout,
                                            void* data, size_t nbytes, int32_t* out_id);

/* Bytes lent to a graph only while it compiles: [start, start + nbytes). */
typedef struct {
  const void* start;
  size_t nbytes;
} kiln_lent_bytes_t;

/* Copies into the graph's own memory every constant whose bytes lie in one
 * of the n lent ranges and that neither owns them nor holds a shared entry
 * or key: what a compile left borrowed from its caller (an unpacked
 * weight, a table), so the caller may take its bytes back. A compiler
 * reading weights where they are instead of copying each into the graph
 * first saves a copy of every packed one (kiln.trace: ~0.3 s a GiB, most of
 * it the kernel mapping fresh pages). */
kiln_status_t kiln_graph_own_lent(kiln_graph_t* graph, const kiln_lent_bytes_t* lent, int32_t n);

/* Adds a float32 constant held as a checkpoint's integers (layout
 * KILN_LAYOUT_QUANT_ROWS, kiln_quant_const.h): the value torch's
 * dequantize gives, ((float)q - zero) * scale per element, of the existing
 * constants q (int8 or uint8, rank >= 1, dense: its rows are dim 0),
 * scales (float32: one element for the whole tensor, one per row, or with
 * group > 0 one per `group` consecutive elements of a row, q then 2-d)
 * and zeros (-1 for none; else as many elements as scales, of an integer
 * dtype or float32, each a whole number of magnitude at most 2^24 when
 * integer). The bytes are copied; q, scales and zeros are left as they
 * are (dead-code elimination drops them). The value has q's shape. An
 * input that is not such a constant is KILN_UNSUPPORTED, naming it. */
kiln_status_t kiln_graph_add_constant_quant(kiln_graph_t* graph, const char* name, int32_t q,
                                            int32_t scales, int32_t zeros, int64_t group,
                                            int32_t* out_id);

/* Names constant id's contents (kiln_value_t.key): key is copied. */
kiln_status_t kiln_graph_set_constant_key(kiln_graph_t* graph, int32_t id, const char* key);
/* Adds a constant whose bytes are those of a shared entry: the value holds
 * its own reference to it. */
kiln_status_t kiln_graph_add_constant_shared(kiln_graph_t* graph, const char* name,
                                             kiln_dtype_t dtype, int32_t rank,
                                             const int64_t* shape, kiln_layout_t layout,
                                             kiln_shared_t* entry, int32_t* out_id);

/* Appends a node; infers its output's dtype and shape (an error names the op,
 * the origin and what is wrong). params may be NULL (all zero); n_params and
 * n_fparams give how many are set. origin is copied (may be NULL). */
kiln_status_t kiln_graph_add_node(kiln_graph_t* graph, kiln_op_t op, const int32_t* inputs,
                                  int32_t n_inputs, const int64_t* params, int32_t n_params,
                                  const float* fparams, int32_t n_fparams, const char* origin,
                                  int32_t* out_id);

kiln_status_t kiln_graph_set_outputs(kiln_graph_t* graph, const int32_t* ids, int32_t n);

/* Runs shape inference for an existing node into `out` (used by the
 * verifier and by passes that rewrite a node). */
kiln_status_t kiln_graph_infer_node(const kiln_graph_t* graph, const kiln_node_t* node,
                                    kiln_value_t* out);

/* Checks every structural invariant: ids in range, topological order, each
 * intermediate made by exactly one node, shapes and dtypes re-inferred equal,
 * constants' byte sizes, outputs set. */
kiln_status_t kiln_graph_verify(const kiln_graph_t* graph);

/* 1 when node n's output is a contiguous run of its input's bytes, so the
 * memory plan can make it a view instead of running a kernel: every RESHAPE,
 * and a STRIDED_COPY whose strides are dense for its shape (a slice or
 * select along the leading dims, a permute of size-1 dims). *out_bytes is
 * the run's byte offset into the input. */
int kiln_node_is_view(const kiln_graph_t* graph, const kiln_node_t* n, int64_t* out_bytes);

/* 1 when n is a MATMUL or LINEAR whose A and graph-valued B are both bf16
 * values: bf16 tensors, or float32 ones its flags round as they are packed
 * (autocast's products; the CPU runs them on its bf16 engine). */
int kiln_node_is_bf16_product(const kiln_graph_t* graph, const kiln_node_t* n);

/* 1 when n is an SDPA computed in bf16 (KILN_SDPA_BF16) whose rows per kv
 * head (query heads of a group x queries) are more than 8, the shapes the
 * CPU runs on its bf16 engine; a decode step's (or symbolic sizes') run on
 * the fp32 kernels over rounded values (kernels/nn/kiln_attention.c). */
int kiln_node_is_bf16_attention_prefill(const kiln_graph_t* graph, const kiln_node_t* n);
/* 1 when n is an SDPA known (no symbolic size) to have at most 8 rows per
 * kv head: a decode step's, which reading K and V bounds. */
int kiln_node_is_sdpa_decode(const kiln_graph_t* graph, const kiln_node_t* n);

/* "(1, 128, 768) float32" into buf; returns buf. A symbolic dimension
 * prints as "?"; kiln_graph_describe_value prints its expression. */
const char* kiln_value_describe(const kiln_value_t* value, char* buf, size_t size);
const char* kiln_graph_describe_value(const kiln_graph_t* graph, const kiln_value_t* value,
                                      char* buf, size_t size);

#endif /* KILN_GRAPH_H */
