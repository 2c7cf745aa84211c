/* The CPU target's convolution and pooling entries beyond the forward NCHW
 * ones: gradients (kernels/conv/kiln_conv_backward.h), adaptive pooling,
 * bilinear upsampling, and the channels-last conv and max pool
 * (kernels/conv/kiln_conv_nhwc.h). Geometry from the values' shapes and
 * params (the op docs in ir/kiln_ops.h), prepared once where it pays. */
#include <string.h>

#include "hal/cpu/kiln_hal_cpu.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/conv/kiln_conv_planes.h"

/* Shape inference lets a depthwise conv read or store bf16 only where the
 * channels-last depthwise kernel runs it (beyond, the reference would). */
_Static_assert(KILN_CONV2D_NHWC_BF16_DW_TAPS <= KILN_CONV_DW_NHWC_TAPS, "depthwise bf16 reach");

#define OUT (bufs[n->outputs[0]])

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)

static void nn_conv_geometry(const kiln_graph_t* g, const kiln_node_t* n,
                             kiln_conv2d_grad_f32_args_t* a) {
  const kiln_value_t *dy = VAL(0), *other = VAL(1), *out = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  memset(a, 0, sizeof(*a));
  const kiln_value_t *x = n->op == KILN_OP_CONV2D_GRAD_INPUT ? out : other;
  const kiln_value_t *w = n->op == KILN_OP_CONV2D_GRAD_INPUT ? other : out;
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->o = w->shape[0], a->kh = w->shape[2], a->kw = w->shape[3];
  a->ho = dy->shape[2], a->wo = dy->shape[3];
  /* CONV2D's first seven fields (shared by the gradients' layouts). */
  a->sh = p[KILN_P(CONV2D, STRIDE_H)], a->sw = p[KILN_P(CONV2D, STRIDE_W)];
  a->ph = p[KILN_P(CONV2D, PAD_H)], a->pw = p[KILN_P(CONV2D, PAD_W)];
  a->dh = p[KILN_P(CONV2D, DILATION_H)], a->dw = p[KILN_P(CONV2D, DILATION_W)];
  a->groups = p[KILN_P(CONV2D, GROUPS)];
}

/* x is the (N, C, H, W) side, y the (N, C, Ho, Wo) side; p as MAX_POOL2D. */
static void nn_pool_geometry(const kiln_value_t* x, const kiln_value_t* y, const int64_t* p,
                             kiln_pool2d_grad_f32_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->ho = y->shape[2], a->wo = y->shape[3];
  /* POOL2D's first ten fields (shared by AVG_POOL2D_GRAD's layout). */
  a->kh = p[KILN_P(POOL2D, KERNEL_H)], a->kw = p[KILN_P(POOL2D, KERNEL_W)];
  a->sh = p[KILN_P(POOL2D, STRIDE_H)], a->sw = p[KILN_P(POOL2D, STRIDE_W)];
  a->ph = p[KILN_P(POOL2D, PAD_H)], a->pw = p[KILN_P(POOL2D, PAD_W)];
  a->dh = p[KILN_P(POOL2D, DILATION_H)], a->dw = p[KILN_P(POOL2D, DILATION_W)];
  a->count_include_pad = (int)p[KILN_P(POOL2D, COUNT_INCLUDE_PAD)];
}

void kiln_hal_cpu_conv2d_args(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                              kiln_conv2d_f32_args_t* a) {
  const kiln_value_t* w = VAL(1);
  const int64_t* p = n->params;
  memset(a, 0, sizeof(*a));
  a->o = w->shape[0], a->kh = w->shape[2], a->kw = w->shape[3];
  a->sh = p[KILN_P(CONV2D, STRIDE_H)], a->sw = p[KILN_P(CONV2D, STRIDE_W)];
  a->ph = p[KILN_P(CONV2D, PAD_H)], a->pw = p[KILN_P(CONV2D, PAD_W)];
  a->dh = p[KILN_P(CONV2D, DILATION_H)], a->dw = p[KILN_P(CONV2D, DILATION_W)];
  a->groups = p[KILN_P(CONV2D, GROUPS)], a->act = (kiln_activation_t)p[KILN_P(CONV2D, ACT)];
  a->residual_before_act = (int)p[KILN_P(CONV2D, RESIDUAL_BEFORE_ACT)];
  a->weight_packed = w->layout == KILN_LAYOUT_CONV2D_PACKED           ? KILN_CONV_PANEL_O
                     : w->layout == KILN_LAYOUT_CONV2D_PACKED_16      ? KILN_CONV_PANEL_WIDE
                     : w->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16 ? KILN_CONV_PACKED_BF16
                                                                      : 0;
  if (n->op == KILN_OP_CONV2D_NHWC) {
    a->x_bf16 = VAL(0)->dtype == KILN_BF16;
    a->y_bf16 = p[KILN_P(CONV2D_NHWC, Y_BF16)] == 1;
  }
  if (bufs) kiln_hal_cpu_conv2d_bind(n, bufs, a);
}

#define NN_PREPARE(e) \
  kiln_status_t kiln_hal_cpu_prepare_##e(const kiln_graph_t* g, const kiln_node_t* n, void* prep)
#define NN_RUN(e)                                                                       \
  kiln_status_t kiln_hal_cpu_run_##e(const kiln_graph_t* g, const kiln_node_t* n,          \
                                     const void* prep, void* const* bufs, kiln_pool_t* pool)

NN_PREPARE(conv2d_grad) {
  nn_conv_geometry(g, n, prep);
  return kiln_ok();
}

NN_RUN(conv2d_grad) {
  (void)g;
  kiln_conv2d_grad_f32_args_t a = *(const kiln_conv2d_grad_f32_args_t*)prep;
  a.dy = BUF(0);
  if (n->op == KILN_OP_CONV2D_GRAD_INPUT) {
    a.weight = BUF(1);
    a.dx = bufs[n->outputs[0]];
    kiln_conv2d_grad_input_f32(&a, pool);
  } else {
    a.x = BUF(1);
    a.dweight = bufs[n->outputs[0]];
    kiln_conv2d_grad_weight_f32(&a, pool);
  }
  return kiln_ok();
}

NN_PREPARE(max_pool2d_indices) {
  nn_pool_geometry(VAL(0), &g->values[n->outputs[0]], n->params, prep);
  return kiln_ok();
}

NN_RUN(max_pool2d_indices) {
  (void)g;
  kiln_pool2d_grad_f32_args_t a = *(const kiln_pool2d_grad_f32_args_t*)prep;
  a.x = BUF(0);
  a.out_indices = bufs[n->outputs[0]];
  kiln_max_pool2d_indices_f32(&a, pool);
  return kiln_ok();
}

NN_RUN(max_pool2d_grad) {
  (void)prep;
  const kiln_value_t* out = &g->values[n->outputs[0]];
  kiln_pool2d_grad_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = out->shape[0], a.c = out->shape[1], a.h = out->shape[2], a.w = out->shape[3];
  a.ho = VAL(0)->shape[2], a.wo = VAL(0)->shape[3];
  a.dy = BUF(0);
  a.indices = BUF(1);
  a.dx = bufs[n->outputs[0]];
  int64_t bad = kiln_max_pool2d_grad_f32(&a, pool);
  if (bad)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "%s: %lld indices are outside the %lldx%lld input plane",
                            n->origin ? n->origin : "max_pool2d_grad", (long long)bad,
                            (long long)a.h, (long long)a.w);
  return kiln_ok();
}

NN_PREPARE(avg_pool2d_grad) {
  kiln_pool2d_grad_f32_args_t* a = prep;
  nn_pool_geometry(&g->values[n->outputs[0]], VAL(0), n->params, a);
  a->divisor_override = n->params[KILN_P(AVG_POOL2D_GRAD, DIVISOR_OVERRIDE)];
  return kiln_ok();
}

NN_RUN(avg_pool2d_grad) {
  (void)g;
  kiln_pool2d_grad_f32_args_t a = *(const kiln_pool2d_grad_f32_args_t*)prep;
  a.dy = BUF(0);
  a.dx = bufs[n->outputs[0]];
  kiln_avg_pool2d_grad_f32(&a, pool);
  return kiln_ok();
}

/* x is the (H, W) side, y the (Ho, Wo) side, whichever way it runs. */
static void nn_adaptive_geometry(const kiln_value_t* x, const kiln_value_t* y,
                                 kiln_pool2d_grad_f32_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->ho = y->shape[2], a->wo = y->shape[3];
}

NN_RUN(adaptive_avg_pool2d) {
  (void)prep;
  kiln_pool2d_grad_f32_args_t a;
  nn_adaptive_geometry(VAL(0), &g->values[n->outputs[0]], &a);
  a.x = BUF(0);
  a.y = bufs[n->outputs[0]];
  kiln_adaptive_avg_pool2d_f32(&a, pool);
  return kiln_ok();
}

NN_RUN(adaptive_avg_pool2d_grad) {
  (void)prep;
  kiln_pool2d_grad_f32_args_t a;
  nn_adaptive_geometry(&g->values[n->outputs[0]], VAL(0), &a);
  a.dy = BUF(0);
  a.dx = bufs[n->outputs[0]];
  kiln_adaptive_avg_pool2d_grad_f32(&a, pool);
  return kiln_ok();
}

/* x (N, H, W, C), w (O, C / groups, kh, kw) -> y (N, Ho, Wo, O); with
 * X_NCHW, x is (N, C, H, W), gathered by the kernel. */
NN_PREPARE(conv2d_nhwc) {
  const kiln_value_t *x = VAL(0), *out = &g->values[n->outputs[0]];
  kiln_conv2d_f32_args_t* a = prep;
  kiln_hal_cpu_conv2d_args(g, n, NULL, a);
  const int x_nchw = n->params[KILN_P(CONV2D_NHWC, X_NCHW)] == 1;
  a->n = x->shape[0];
  a->h = x->shape[x_nchw ? 2 : 1], a->w = x->shape[x_nchw ? 3 : 2], a->c = x->shape[x_nchw ? 1 : 3];
  a->ho = out->shape[1], a->wo = out->shape[2];
  return kiln_ok();
}

NN_RUN(conv2d_nhwc) {
  (void)g;
  kiln_conv2d_f32_args_t a = *(const kiln_conv2d_f32_args_t*)prep;
  kiln_hal_cpu_conv2d_bind(n, bufs, &a);
  if (a.weight_packed == KILN_CONV_PACKED_BF16) /* bf16 compute */
    kiln_conv2d_bf16_nhwc(&a, n->params[KILN_P(CONV2D_NHWC, X_NCHW)] == 1, pool);
  else if (n->params[KILN_P(CONV2D_NHWC, X_NCHW)] == 1)
    kiln_conv2d_f32_nhwc_from_nchw(&a, pool);
  else
    kiln_conv2d_f32_nhwc(&a, pool);
  return kiln_ok();
}

/* x (N, H, W, C) -> y (N, Ho, Wo, C); the geometry as MAX_POOL2D's. */
NN_PREPARE(max_pool2d_nhwc) {
  const kiln_value_t *x = VAL(0), *out = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  kiln_pool2d_f32_args_t* a = prep;
  memset(a, 0, sizeof(*a));
  a->n = x->shape[0], a->h = x->shape[1], a->w = x->shape[2], a->c = x->shape[3];
  a->ho = out->shape[1], a->wo = out->shape[2];
  a->kh = p[KILN_P(POOL2D, KERNEL_H)], a->kw = p[KILN_P(POOL2D, KERNEL_W)];
  a->sh = p[KILN_P(POOL2D, STRIDE_H)], a->sw = p[KILN_P(POOL2D, STRIDE_W)];
  a->ph = p[KILN_P(POOL2D, PAD_H)], a->pw = p[KILN_P(POOL2D, PAD_W)];
  a->dh = p[KILN_P(POOL2D, DILATION_H)], a->dw = p[KILN_P(POOL2D, DILATION_W)];
  return kiln_ok();
}

NN_RUN(max_pool2d_nhwc) {
  (void)g;
  kiln_pool2d_f32_args_t a = *(const kiln_pool2d_f32_args_t*)prep;
  a.x = BUF(0);
  a.y = bufs[n->outputs[0]];
  kiln_max_pool2d_f32_nhwc(&a, pool);
  return kiln_ok();
}

NN_PREPARE(upsample_bilinear2d) {
  const kiln_value_t *x = VAL(0), *out = &g->values[n->outputs[0]];
  kiln_upsample_f32_args_t* a = prep;
  memset(a, 0, sizeof(*a));
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->ho = out->shape[2], a->wo = out->shape[3];
  a->align_corners = (int)n->params[KILN_P(UPSAMPLE, ALIGN_CORNERS)];
  a->scale_h = n->fparams[KILN_FP(UPSAMPLE, SCALE_H)];
  a->scale_w = n->fparams[KILN_FP(UPSAMPLE, SCALE_W)];
  return kiln_ok();
}

NN_RUN(upsample_bilinear2d) {
  (void)g;
  kiln_upsample_f32_args_t a = *(const kiln_upsample_f32_args_t*)prep;
  a.x = BUF(0);
  a.y = bufs[n->outputs[0]];
  kiln_upsample_bilinear2d_f32(&a, pool);
  return kiln_ok();
}

/* ---- the scalar references ---- */

KILN_HAL_CPU_REF_RUN(conv2d_nhwc) {
  (void)g, (void)pool;
  kiln_conv2d_f32_args_t a = *(const kiln_conv2d_f32_args_t*)prep;
  kiln_hal_cpu_conv2d_bind(n, bufs, &a);
  if (a.weight_packed == KILN_CONV_PACKED_BF16)
    kiln_conv2d_bf16_nhwc_reference(&a, n->params[KILN_P(CONV2D_NHWC, X_NCHW)] == 1);
  else if (n->params[KILN_P(CONV2D_NHWC, X_NCHW)] == 1)
    kiln_conv2d_f32_nhwc_reference_from_nchw(&a);
  else
    kiln_conv2d_f32_nhwc_reference(&a);
  return kiln_ok();
}

KILN_HAL_CPU_REF_RUN(max_pool2d_nhwc) {
  (void)g, (void)pool;
  kiln_pool2d_f32_args_t a = *(const kiln_pool2d_f32_args_t*)prep;
  a.x = BUF(0);
  a.y = OUT;
  kiln_max_pool2d_f32_nhwc_reference(&a);
  return kiln_ok();
}

KILN_HAL_CPU_REF_RUN(conv2d_grad) {
  (void)g, (void)pool;
  kiln_conv2d_grad_f32_args_t a = *(const kiln_conv2d_grad_f32_args_t*)prep;
  a.dy = BUF(0);
  if (n->op == KILN_OP_CONV2D_GRAD_INPUT) {
    a.weight = BUF(1);
    a.dx = OUT;
    kiln_conv2d_grad_input_f32_reference(&a);
  } else {
    a.x = BUF(1);
    a.dweight = OUT;
    kiln_conv2d_grad_weight_f32_reference(&a);
  }
  return kiln_ok();
}

KILN_HAL_CPU_REF_RUN(upsample_bilinear2d) {
  (void)g, (void)pool;
  kiln_upsample_f32_args_t a = *(const kiln_upsample_f32_args_t*)prep;
  a.x = BUF(0);
  a.y = OUT;
  kiln_upsample_bilinear2d_f32_reference(&a);
  return kiln_ok();
}
