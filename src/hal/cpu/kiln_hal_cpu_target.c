/* The CPU target as the HAL sees it (kiln_hal_target_cpu): its kernel
 * entries (kiln_hal_cpu.c), what it takes beyond having an entry
 * (dtypes, and constant layouts whose byte counts a loaded file could get
 * wrong), its constant forms (kiln_hal_cpu_constant.c) and host memory. */
#include <stdlib.h>
#include <string.h>

#include "hal/cpu/kiln_hal_cpu.h"
#include "ir/kiln_quant_const.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/nn/kiln_attention_bf16.h"

#define VAL(i) (&g->values[n->inputs[i]])

/* What the CPU kernels take beyond having an entry: dtypes and constant
 * layouts (whose byte counts a loaded file could get wrong). */
kiln_status_t kiln_hal_cpu_supports(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* x = n->n_inputs ? VAL(0) : NULL;
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0 && kiln_layout_is_quant_const(VAL(i)->layout))
      return kiln_status_make(KILN_UNSUPPORTED,
                              "%s reads a checkpoint's quantized constant (layout %d) that the "
                              "pack pass has not given a form", kiln_op_name(n->op),
                              (int)VAL(i)->layout);
  /* A LINEAR reads a bf16 weight held as torch's (N, K) rows in place; no
   * other kernel reads a held weight. */
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0 && kiln_layout_is_widened_bf16(VAL(i)->layout) &&
        !(n->op == KILN_OP_LINEAR && i == 1 && VAL(i)->layout == KILN_LAYOUT_WIDENED_BF16_T))
      return kiln_status_make(KILN_UNSUPPORTED,
                              "%s reads a bf16 weight held narrow (layout %d) that the pack pass "
                              "has not given a form", kiln_op_name(n->op), (int)VAL(i)->layout);
  switch (n->op) {
    case KILN_OP_LINEAR: {
      const kiln_value_t* w = VAL(1);
      if (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_GEMM_PACKED_B &&
          w->layout != KILN_LAYOUT_TRANSPOSED_2D && w->layout != KILN_LAYOUT_GEMM_PACKED_B_BF16 &&
          w->layout != KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI && w->layout != KILN_LAYOUT_GEMM_PACKED_B_Q8 &&
          w->layout != KILN_LAYOUT_GEMM_PACKED_B_Q4 && w->layout != KILN_LAYOUT_WIDENED_BF16_T)
        return kiln_status_make(KILN_UNSUPPORTED, "linear weight layout %d", (int)w->layout);
      if (w->layout == KILN_LAYOUT_WIDENED_BF16_T &&
          (w->kind != KILN_VALUE_CONSTANT || w->rank != 2 ||
           w->nbytes != kiln_value_dense_bytes(w) / 2))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "bf16 weight read in place has %zu bytes, expected %zu", w->nbytes,
                                kiln_value_dense_bytes(w) / 2);
      if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4) {
        /* The header says bits and group: it must match the layout, the
         * shape and the byte count before any run reads the blob. */
        const unsigned char* h = w->data;
        int bits = w->nbytes >= KILN_GEMM_QUANT_HEADER ? h[5] : 0;
        if (kiln_gemm_quant_check(w->data, w->nbytes, w->shape[0], w->shape[1]) ||
            bits != (w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4))
          return kiln_status_make(KILN_INVALID_ARGUMENT,
                                  "quantized weight (%zu bytes) is not a well-formed (%lld, %lld) "
                                  "int%d blob", w->nbytes, (long long)w->shape[0],
                                  (long long)w->shape[1],
                                  w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4);
      }
      if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI &&
          w->nbytes != kiln_gemm_bf16_vnni_packed_size(w->shape[0], w->shape[1]))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "bf16-compute weight has %zu bytes, expected %zu", w->nbytes,
                                kiln_gemm_bf16_vnni_packed_size(w->shape[0], w->shape[1]));
      if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16 &&
          w->nbytes != kiln_gemm_bf16_packed_size(w->shape[0], w->shape[1]))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "bf16-packed weight has %zu bytes, expected %zu", w->nbytes,
                                kiln_gemm_bf16_packed_size(w->shape[0], w->shape[1]));
      if (w->layout == KILN_LAYOUT_GEMM_PACKED_B &&
          w->nbytes != kiln_gemm_f32_packed_size(w->shape[0], w->shape[1]))
        return kiln_status_make(KILN_INVALID_ARGUMENT, "packed weight has %zu bytes, expected %zu",
                                w->nbytes, kiln_gemm_f32_packed_size(w->shape[0], w->shape[1]));
      return kiln_ok();
    }
    case KILN_OP_GATHER: {
      /* A quantized table (an embedding the constant form packed): rows
       * along axis 0 of a 2-d (N, K) table, its blob B = table^T checked
       * against the shape before any run reads it. */
      if (x->layout != KILN_LAYOUT_GEMM_PACKED_B_Q8 && x->layout != KILN_LAYOUT_GEMM_PACKED_B_Q4)
        return kiln_ok();
      const unsigned char* h = x->data;
      int bits = x->nbytes >= KILN_GEMM_QUANT_HEADER ? h[5] : 0;
      if (x->rank != 2 || n->params[KILN_P(AXIS, AXIS)] != 0 ||
          kiln_gemm_quant_check(x->data, x->nbytes, x->shape[1], x->shape[0]) ||
          bits != (x->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "quantized gather table (%zu bytes) is not a well-formed (%lld, "
                                "%lld) int%d blob read along axis 0", x->nbytes,
                                (long long)(x->rank == 2 ? x->shape[0] : -1),
                                (long long)(x->rank == 2 ? x->shape[1] : -1),
                                x->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 ? 8 : 4);
      return kiln_ok();
    }
    case KILN_OP_SDPA:
      return kiln_ok();
    case KILN_OP_CONV2D_NHWC: /* the same weight checks (its layouts: shape inference) */
    case KILN_OP_CONV2D: {
      const kiln_value_t* w = VAL(1);
      /* Sums scaled per channel: the bf16 conv's epilogue only (the
       * compiler makes them for it alone, kiln_pass_fuse_conv). */
      if (n->n_inputs > 4 && n->inputs[4] >= 0 &&
          (n->op != KILN_OP_CONV2D_NHWC || w->layout != KILN_LAYOUT_CONV2D_PACKED_16_BF16))
        return kiln_status_make(KILN_UNSUPPORTED,
                                "a conv with scaled sums runs channels-last on the bf16 weight form");
      if (w->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16) {
        /* Shape inference let only CONV2D_NHWC read it; its size depends
         * on the groups too. */
        size_t want = kiln_conv2d_bf16_packed_size(w->shape[0], w->shape[1], w->shape[2],
                                                   w->shape[3], n->params[KILN_P(CONV2D, GROUPS)]);
        if (n->op != KILN_OP_CONV2D_NHWC || want == 0 || w->nbytes != want)
          return kiln_status_make(KILN_INVALID_ARGUMENT,
                                  "bf16-compute conv2d weight has %zu bytes, expected %zu",
                                  w->nbytes, want);
        return kiln_ok();
      }
      int panel = w->layout == KILN_LAYOUT_CONV2D_PACKED      ? KILN_CONV_PANEL_O
                  : w->layout == KILN_LAYOUT_CONV2D_PACKED_16 ? KILN_CONV_PANEL_WIDE
                                                              : 0;
      if (w->layout != KILN_LAYOUT_DENSE && !panel)
        return kiln_status_make(KILN_UNSUPPORTED, "conv2d weight layout %d", (int)w->layout);
      /* A packed weight's size depends on the node's groups: the loader
       * cannot check it, so it is checked here before any run reads it. */
      /* The product is within the element count (at most 2^44) unless O is 0. */
      int64_t k = w->shape[0] > 0 ? w->shape[1] * w->shape[2] * w->shape[3] : 0;
      size_t want = kiln_conv2d_f32_packed_size(w->shape[0], k, n->params[KILN_P(CONV2D, GROUPS)], panel);
      if (panel && (want == 0 || w->nbytes != want))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "packed conv2d weight has %zu bytes, expected %zu", w->nbytes, want);
      return kiln_ok();
    }
    case KILN_OP_CAST:
    case KILN_OP_SUM:
    case KILN_OP_MEAN:
    case KILN_OP_MAX:
    case KILN_OP_MIN:
    case KILN_OP_ARGMAX:
      if (x->dtype == KILN_F16 || x->dtype == KILN_BF16) {
        if (n->op != KILN_OP_CAST)
          return kiln_status_make(KILN_UNSUPPORTED, "%s on %s", kiln_op_name(n->op),
                                  kiln_dtype_name(x->dtype));
      }
      return kiln_ok();
    default:
      break;
  }
  if (KILN_OP_IS_BINARY(n->op)) {
    if (x->dtype == KILN_F16 || x->dtype == KILN_BF16)
      return kiln_status_make(KILN_UNSUPPORTED, "%s on %s", kiln_op_name(n->op),
                              kiln_dtype_name(x->dtype));
    if ((n->op == KILN_OP_DIV || n->op == KILN_OP_POW) && x->dtype != KILN_F32)
      return kiln_status_make(KILN_UNSUPPORTED, "%s on %s", kiln_op_name(n->op),
                              kiln_dtype_name(x->dtype));
  }
  return kiln_ok();
}

kiln_status_t kiln_hal_cpu_alloc(size_t bytes, void** out) {
  return kiln_allocator_malloc(kiln_allocator_system(), bytes, out);
}

void kiln_hal_cpu_free(void* p) { kiln_allocator_free(kiln_allocator_system(), p); }

kiln_status_t kiln_hal_cpu_copy(void* dst, const void* src, size_t bytes, kiln_hal_copy_t kind) {
  (void)kind; /* one memory */
  if (bytes) memmove(dst, src, bytes);
  return kiln_ok();
}

kiln_status_t kiln_hal_cpu_synchronize(void) { return kiln_ok(); } /* runs are synchronous */

const char* kiln_hal_cpu_node_describe(const kiln_graph_t* g, const kiln_node_t* n) {
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    if (n->inputs[i] < 0 || VAL(i)->kind != KILN_VALUE_CONSTANT) continue;
    if (VAL(i)->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI) return kiln_gemm_bf16_compute_describe();
    if (VAL(i)->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16) return kiln_conv2d_bf16_describe();
    if (kiln_value_int8_activations(VAL(i))) return kiln_gemm_int8_describe();
  }
  if (n->op == KILN_OP_LINEAR && VAL(1)->layout == KILN_LAYOUT_WIDENED_BF16_T)
    return kiln_gemm_bf16_in_place_describe();
  if (kiln_node_is_bf16_product(g, n)) return kiln_gemm_bf16_values_describe();
  if (n->op == KILN_OP_SDPA && (n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16))
    return kiln_attention_bf16_describe(!kiln_node_is_bf16_attention_prefill(g, n));
  return NULL;
}

static const kiln_hal_target_t kiln_hal_cpu_target_ = {
    .name = "cpu",
    .entries = kiln_hal_cpu_entries,
    .supports = kiln_hal_cpu_supports,
    .constant_form = kiln_hal_cpu_constant_form,
    .constant_pack = kiln_hal_cpu_constant_pack,
    .node_describe = kiln_hal_cpu_node_describe,
    .host_memory = 1,
    .single_thread = 0,
    .alloc = kiln_hal_cpu_alloc,
    .free = kiln_hal_cpu_free,
    .copy = kiln_hal_cpu_copy,
    .synchronize = kiln_hal_cpu_synchronize,
};

const kiln_hal_target_t* kiln_hal_target_cpu(void) { return &kiln_hal_cpu_target_; }
