/* The reference target: the CPU target's kernel entries (each node read
 * the same way, from the same prepared arguments) running the scalar
 * reference kernels that sit beside every fast kernel (each entry's
 * reference run, kept beside its fast run in src/hal/cpu), on the calling
 * thread. A model runs on it exactly as on the CPU (same graph, same packed
 * constants: the references read every packed layout), so the two can be
 * compared node by node (kiln_model_run_hooked with kiln_model_value_data;
 * kiln.compare_targets); a difference beyond rounding is a bug in a fast
 * kernel or in its reference, found where it starts.
 *
 * Entries with a reference run: GEMM (matmul, linear: fp32, bf16, int8 and
 * int4 weights, int8 activations), the grouped GEMM of MoE, attention,
 * convolution (NCHW, NHWC, gradients), pooling (max, avg, NHWC max),
 * bilinear upsampling, pad, softmax over the last axis, layer and RMS norm
 * and layer norm's backward, gelu's backward, the unary and math ops, the
 * binary ops (their generic C loops) and the fused elementwise program (one
 * element at a time). The others are data movement, indexing (a quantized
 * embedding's rows too: dequantized by the scalar rule), casts and
 * reductions whose CPU kernels are plain C already: they run the CPU's,
 * without threads. */
#include <pthread.h>

#include "hal/cpu/kiln_hal_cpu.h"

static kiln_hal_entry_t kiln_ref_entries_[KILN_ENTRY_COUNT];
static pthread_once_t kiln_ref_once_ = PTHREAD_ONCE_INIT;

static void kiln_ref_init(void) {
  for (int e = 0; e < KILN_ENTRY_COUNT; ++e) {
    kiln_ref_entries_[e] = kiln_hal_cpu_entries[e];
    if (kiln_hal_cpu_entries[e].reference) kiln_ref_entries_[e].run = kiln_hal_cpu_entries[e].reference;
  }
}

static const char* kiln_ref_node_describe(const kiln_graph_t* g, const kiln_node_t* n) {
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* c = n->inputs[i] >= 0 ? &g->values[n->inputs[i]] : NULL;
    if (!c || c->kind != KILN_VALUE_CONSTANT) continue;
    if (c->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI)
      return "bf16 compute: the scalar reference GEMM (bf16 products, summed in double)";
    if (c->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16)
      return "bf16 compute: the scalar reference conv (bf16 products, summed in double)";
    if (kiln_value_int8_activations(c))
      return "int8 activations: the scalar reference (the rule's integer sums)";
  }
  if (kiln_node_is_bf16_product(g, n))
    return "bf16 products of graph values: the scalar reference GEMM (bf16 products, summed in "
           "double)";
  if (n->op == KILN_OP_SDPA && (n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16))
    return "bf16 attention: the scalar reference (the bf16 rule, summed in double)";
  return NULL;
}

static const kiln_hal_target_t kiln_ref_target_ = {
    .name = "reference",
    .entries = kiln_ref_entries_,
    .supports = kiln_hal_cpu_supports,           /* the same kernels' contracts */
    .constant_form = kiln_hal_cpu_constant_form, /* the references read every packed form */
    .constant_pack = kiln_hal_cpu_constant_pack,
    .node_describe = kiln_ref_node_describe,
    .host_memory = 1,
    .single_thread = 1,
    .alloc = kiln_hal_cpu_alloc, /* the host's memory, as the CPU's */
    .free = kiln_hal_cpu_free,
    .copy = kiln_hal_cpu_copy,
    .synchronize = kiln_hal_cpu_synchronize,
};

const kiln_hal_target_t* kiln_hal_target_reference(void) {
  pthread_once(&kiln_ref_once_, kiln_ref_init);
  return &kiln_ref_target_;
}
