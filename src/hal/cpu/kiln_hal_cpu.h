/* The CPU target's parts, shared by its files (private to src/hal): the
 * table of its kernel entries (kiln_hal_cpu.c), the entries kept in files
 * by kind (_nn.c, _movement.c, _sample.c, _math.c, _fused.c), and the
 * argument builders the reference target (hal/reference) reuses, so that
 * both targets read a node the same way and differ only in the kernels. */
#ifndef KILN_HAL_CPU_H
#define KILN_HAL_CPU_H

#include "hal/kiln_hal.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_backward.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_eltwise_fused.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/nn/kiln_nn.h"

extern const kiln_hal_entry_t kiln_hal_cpu_entries[KILN_ENTRY_COUNT];

/* The CPU target's functions (kiln_hal_target_t's members; the reference
 * target shares its constant forms and most of its checks). */
kiln_status_t kiln_hal_cpu_supports(const kiln_graph_t* g, const kiln_node_t* n);
kiln_status_t kiln_hal_cpu_constant_form(const kiln_graph_t* g, const kiln_node_t* n,
                                         int32_t slot, const kiln_hal_weights_t* weights,
                                         kiln_hal_constant_form_t* out_form);
kiln_status_t kiln_hal_cpu_constant_pack(const kiln_value_t* constant,
                                        const kiln_hal_constant_form_t* form, void* out);
const char* kiln_hal_cpu_node_describe(const kiln_graph_t* g, const kiln_node_t* n);
/* Host memory (the system allocator), synchronous runs. */
kiln_status_t kiln_hal_cpu_alloc(size_t bytes, void** out_ptr);
void kiln_hal_cpu_free(void* ptr);
kiln_status_t kiln_hal_cpu_copy(void* dst, const void* src, size_t bytes, kiln_hal_copy_t kind);
kiln_status_t kiln_hal_cpu_synchronize(void);

/* Broadcast geometry of the node's first n_in inputs onto its output
 * (operand 0 the output, dense). */
void kiln_hal_cpu_nd_for(const kiln_graph_t* g, const kiln_node_t* n, int n_in, kiln_nd_t* nd);

/* CONV2D / CONV2D_NHWC: the convolution kernel's arguments that do not
 * depend on the activation layout (weight geometry, params, packing,
 * buffers; bufs NULL: no buffers); the caller sets n, c, h, w, ho and wo
 * from x's and y's layout. _bind sets the buffers alone. */
void kiln_hal_cpu_conv2d_args(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                              kiln_conv2d_f32_args_t* a);
void kiln_hal_cpu_conv2d_bind(const kiln_node_t* n, void* const* bufs, kiln_conv2d_f32_args_t* a);
/* SDPA: q, k, v (at their views' offsets), mask and out from bufs. */
void kiln_hal_cpu_sdpa_bind(const kiln_node_t* n, void* const* bufs, kiln_attention_args_t* a);

/* LINEAR's GEMM arguments: the prepared ones with the buffers bound. */
void kiln_hal_cpu_linear_bind(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                              void* const* bufs, kiln_gemm_f32_args_t* args);
/* MATMUL: each GEMM of the batch geometry prepared for n, run by gemm. */
typedef void (*kiln_hal_gemm_fn)(const kiln_gemm_f32_args_t* args, kiln_pool_t* pool);
kiln_status_t kiln_hal_cpu_matmul_with(const kiln_node_t* n, const void* prep, void* const* bufs,
                                       kiln_pool_t* pool, kiln_hal_gemm_fn gemm);
/* (outer, len, inner) of x around axis (a 0-d x: 1, 1, 1). */
void kiln_hal_cpu_axis_split(const kiln_value_t* x, int32_t axis, int64_t* outer, int64_t* len,
                             int64_t* inner);
/* (rows, cols) of a norm over the last dims dims of x. */
void kiln_hal_cpu_norm_split(const kiln_value_t* x, int64_t dims, size_t* rows, size_t* cols);

/* ELTWISE_FUSED's prepared form: the decoded program and the geometry
 * (args.code points at code). */
typedef struct {
  kiln_eltwise_fused_args_t args;
  uint32_t code[KILN_FUSED_MAX_SLOTS];
} kiln_hal_cpu_fused_t;

/* The entries kept beside kiln_hal_cpu.c. */
#define KILN_HAL_CPU_PREPARE(e)                                                            \
  kiln_status_t kiln_hal_cpu_prepare_##e(const kiln_graph_t* g, const kiln_node_t* n, \
                                         void* prep);
#define KILN_HAL_CPU_RUN(e)                                                            \
  kiln_status_t kiln_hal_cpu_run_##e(const kiln_graph_t* g, const kiln_node_t* n,  \
                                     const void* prep, void* const* bufs, kiln_pool_t* pool);
/* kiln_hal_cpu_math.c: ACOS..SIGN and ATAN2..DIV_FLOOR (an integer division
 * by zero fails with a message that starts "ZeroDivisionError"). */
KILN_HAL_CPU_PREPARE(math)
KILN_HAL_CPU_RUN(math)
KILN_HAL_CPU_RUN(random)
/* kiln_hal_cpu_nn.c: convolution and pooling gradients, adaptive pooling,
 * bilinear upsampling, channels-last conv and max pool. */
KILN_HAL_CPU_PREPARE(conv2d_grad)
KILN_HAL_CPU_RUN(conv2d_grad)
KILN_HAL_CPU_PREPARE(max_pool2d_indices)
KILN_HAL_CPU_RUN(max_pool2d_indices)
KILN_HAL_CPU_RUN(max_pool2d_grad)
KILN_HAL_CPU_PREPARE(avg_pool2d_grad)
KILN_HAL_CPU_RUN(avg_pool2d_grad)
KILN_HAL_CPU_RUN(adaptive_avg_pool2d)
KILN_HAL_CPU_RUN(adaptive_avg_pool2d_grad)
KILN_HAL_CPU_PREPARE(upsample_bilinear2d)
KILN_HAL_CPU_RUN(upsample_bilinear2d)
KILN_HAL_CPU_PREPARE(conv2d_nhwc)
KILN_HAL_CPU_RUN(conv2d_nhwc)
KILN_HAL_CPU_PREPARE(max_pool2d_nhwc)
KILN_HAL_CPU_RUN(max_pool2d_nhwc)
/* kiln_hal_cpu_movement.c; PAD's fill in x's dtype (8 bytes). */
void kiln_hal_cpu_pad_fill(const kiln_node_t* n, kiln_dtype_t dtype, unsigned char fill[8]);
KILN_HAL_CPU_RUN(pad)
KILN_HAL_CPU_RUN(strided_scatter)
KILN_HAL_CPU_RUN(scatter)
KILN_HAL_CPU_RUN(scan)
KILN_HAL_CPU_RUN(argsort)
/* kiln_hal_cpu_sample.c */
KILN_HAL_CPU_RUN(grid_sampler)
KILN_HAL_CPU_RUN(col2im)
KILN_HAL_CPU_RUN(embedding_bag)
/* kiln_hal_cpu_fused.c */
KILN_HAL_CPU_PREPARE(eltwise_fused)
KILN_HAL_CPU_RUN(eltwise_fused)
/* The reference runs beside them (kiln_hal_entry_t's reference). */
#define KILN_HAL_CPU_REF_RUN(e)                                                           \
  kiln_status_t kiln_hal_cpu_ref_##e(const kiln_graph_t* g, const kiln_node_t* n,         \
                                     const void* prep, void* const* bufs, kiln_pool_t* pool)
KILN_HAL_CPU_REF_RUN(math);
KILN_HAL_CPU_REF_RUN(random);
KILN_HAL_CPU_REF_RUN(conv2d_grad);
KILN_HAL_CPU_REF_RUN(upsample_bilinear2d);
KILN_HAL_CPU_REF_RUN(conv2d_nhwc);
KILN_HAL_CPU_REF_RUN(max_pool2d_nhwc);
KILN_HAL_CPU_REF_RUN(pad);
KILN_HAL_CPU_REF_RUN(eltwise_fused);
#undef KILN_HAL_CPU_PREPARE
#undef KILN_HAL_CPU_RUN

#endif /* KILN_HAL_CPU_H */
