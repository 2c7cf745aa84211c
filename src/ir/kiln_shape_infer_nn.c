/* Shape rules of the convolution and pooling gradient ops, the other pooling
 * ops, bilinear upsampling and the channels-last conv and max pool. Every
 * size and parameter is validated with overflow-safe bounds, as for the
 * forward ops: a plan built from a graph that passed cannot index out of
 * bounds. */
#include <string.h>

#include "ir/kiln_shape_common.h"
#include "ir/kiln_shape_rules.h"
#include "base/kiln_activation.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* Spatial sizes beyond this are rejected (they would overflow products). */
#define KILN_GRAD_DIM_LIMIT ((int64_t)1 << 31)

static const kiln_value_t* nn_in(const kiln_graph_t* g, const kiln_node_t* n, int i) {
  if (i >= n->n_inputs || n->inputs[i] < 0 || n->inputs[i] >= g->n_values) return NULL;
  return &g->values[n->inputs[i]];
}

static void nn_set(kiln_value_t* out, kiln_dtype_t dtype, const int64_t shape[4]) {
  out->dtype = dtype;
  out->rank = 4;
  memset(out->shape, 0, sizeof(out->shape));
  memcpy(out->shape, shape, 4 * sizeof(int64_t));
}

static kiln_status_t nn_check_4d(const char* name, const char* what, const kiln_value_t* v,
                                 kiln_dtype_t dtype) {
  if (!v) FAIL("%s: %s is required", name, what);
  if (v->dtype != dtype)
    FAIL("%s: %s must be %s, got %s", name, what, kiln_dtype_name(dtype), kiln_dtype_name(v->dtype));
  if (v->rank != 4) FAIL("%s: %s must be rank 4, got rank %d", name, what, v->rank);
  if (v->layout != KILN_LAYOUT_DENSE) FAIL("%s: %s must be dense", name, what);
  return kiln_ok();
}

static kiln_status_t nn_check_size(const char* name, const char* what, int64_t v) {
  if (v < 1 || v > KILN_GRAD_DIM_LIMIT)
    FAIL("%s: %s %lld must be in [1, 2^31]", name, what, (long long)v);
  return kiln_ok();
}

/* The forward conv's output size from (H, W) equals dy's (Ho, Wo); p in a
 * CONV2D-like layout (its first seven fields are common to all). */
static kiln_status_t nn_check_conv_window(const char* name, const int64_t* p, int64_t h,
                                          int64_t w, int64_t kh, int64_t kw,
                                          const kiln_value_t* dy) {
  int64_t ho = 0, wo = 0;
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, h, kh, p[KILN_P(CONV2D, STRIDE_H)],
                                                  p[KILN_P(CONV2D, PAD_H)],
                                                  p[KILN_P(CONV2D, DILATION_H)], 0, &ho));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, w, kw, p[KILN_P(CONV2D, STRIDE_W)],
                                                  p[KILN_P(CONV2D, PAD_W)],
                                                  p[KILN_P(CONV2D, DILATION_W)], 0, &wo));
  if (dy->shape[2] != ho || dy->shape[3] != wo)
    FAIL("%s: dy is %lldx%lld but the convolution of a %lldx%lld input gives %lldx%lld", name,
         (long long)dy->shape[2], (long long)dy->shape[3], (long long)h, (long long)w,
         (long long)ho, (long long)wo);
  return kiln_ok();
}

/* CONV2D and its gradients share the first seven fields. */
_Static_assert(KILN_P(CONV2D, GROUPS) == KILN_P(CONV2D_GRAD_INPUT, GROUPS) &&
                   KILN_P(CONV2D, GROUPS) == KILN_P(CONV2D_GRAD_WEIGHT, GROUPS) &&
                   KILN_P(CONV2D, DILATION_W) == KILN_P(CONV2D_GRAD_WEIGHT, DILATION_W),
               "conv layouts share their head");

static kiln_status_t nn_check_groups(const char* name, int64_t groups, int64_t c, int64_t o) {
  if (groups < 1 || groups > ((int64_t)1 << 40)) FAIL("%s: groups must be positive", name);
  if (c < 1 || c % groups) FAIL("%s: %lld channels do not split into %lld groups", name,
                                (long long)c, (long long)groups);
  if (o < 1 || o % groups) FAIL("%s: %lld output channels do not split into %lld groups", name,
                                (long long)o, (long long)groups);
  return kiln_ok();
}

kiln_status_t kiln_shape_conv2d_grad(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const int64_t* p = n->params;
  const kiln_value_t *dy = nn_in(g, n, 0), *other = nn_in(g, n, 1);
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "dy", dy, KILN_F32));
  const int64_t groups = p[KILN_P(CONV2D, GROUPS)], O = dy->shape[1];
  if (n->op == KILN_OP_CONV2D_GRAD_INPUT) {
    const int64_t h = p[KILN_P(CONV2D_GRAD_INPUT, H)], w = p[KILN_P(CONV2D_GRAD_INPUT, W)];
    KILN_RETURN_IF_ERROR(nn_check_4d(name, "w", other, KILN_F32));
    if (other->shape[0] != O)
      FAIL("%s: w has %lld output channels, dy %lld", name, (long long)other->shape[0],
           (long long)O);
    if (other->shape[1] < 1 || other->shape[1] > KILN_GRAD_DIM_LIMIT)
      FAIL("%s: w's channels per group must be positive", name);
    if (groups < 1 || groups > ((int64_t)1 << 31)) FAIL("%s: groups must be positive", name);
    const int64_t C = other->shape[1] * groups;
    KILN_RETURN_IF_ERROR(nn_check_groups(name, groups, C, O));
    KILN_RETURN_IF_ERROR(nn_check_size(name, "input height", h));
    KILN_RETURN_IF_ERROR(nn_check_size(name, "input width", w));
    KILN_RETURN_IF_ERROR(nn_check_conv_window(name, p, h, w, other->shape[2], other->shape[3], dy));
    int64_t shape[4] = {dy->shape[0], C, h, w};
    nn_set(out, KILN_F32, shape);
    return kiln_ok();
  }
  const int64_t kh = p[KILN_P(CONV2D_GRAD_WEIGHT, KERNEL_H)];
  const int64_t kw = p[KILN_P(CONV2D_GRAD_WEIGHT, KERNEL_W)];
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", other, KILN_F32));
  if (other->shape[0] != dy->shape[0])
    FAIL("%s: x has batch %lld, dy %lld", name, (long long)other->shape[0],
         (long long)dy->shape[0]);
  KILN_RETURN_IF_ERROR(nn_check_groups(name, groups, other->shape[1], O));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "kernel height", kh));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "kernel width", kw));
  KILN_RETURN_IF_ERROR(nn_check_conv_window(name, p, other->shape[2], other->shape[3], kh, kw, dy));
  int64_t shape[4] = {O, other->shape[1] / groups, kh, kw};
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

/* The pooling window over an (H, W) input: p in a POOL2D-like layout (the
 * first ten fields are common to all); (Ho, Wo) out. */
static kiln_status_t nn_pool_window(const char* name, const int64_t* p, int avg, int64_t h,
                                    int64_t w, int64_t* ho, int64_t* wo) {
  enum { KH = KILN_P(POOL2D, KERNEL_H), SH = KILN_P(POOL2D, STRIDE_H), PH = KILN_P(POOL2D, PAD_H),
         DH = KILN_P(POOL2D, DILATION_H), CEIL = KILN_P(POOL2D, CEIL_MODE),
         INCL = KILN_P(POOL2D, COUNT_INCLUDE_PAD) };
  if (avg && (p[DH] != 1 || p[DH + 1] != 1)) FAIL("%s has no dilation (dilation must be 1)", name);
  if ((unsigned long long)p[CEIL] > 1 || (unsigned long long)p[INCL] > 1)
    FAIL("%s: ceil_mode and count_include_pad are 0 or 1", name);
  KILN_RETURN_IF_ERROR(
      kiln_shape_window_out_size(name, h, p[KH], p[SH], p[PH], p[DH], (int)p[CEIL], ho));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, w, p[KH + 1], p[SH + 1], p[PH + 1],
                                                  p[DH + 1], (int)p[CEIL], wo));
  for (int i = 0; i < 2; ++i) {
    /* As the forward: padding at most half the (dilated) kernel. */
    int64_t span = (p[KH + i] - 1) * p[DH + i] + 1;
    if (p[PH + i] > span / 2)
      FAIL("%s: padding %lld is more than half the kernel (%lld)", name, (long long)p[PH + i],
           (long long)span);
  }
  return kiln_ok();
}

/* Height and width are adjacent in every layout, and the pooling layouts
 * share their first ten fields. */
_Static_assert(KILN_P(POOL2D, KERNEL_W) == KILN_P(POOL2D, KERNEL_H) + 1 &&
                   KILN_P(POOL2D, STRIDE_W) == KILN_P(POOL2D, STRIDE_H) + 1 &&
                   KILN_P(POOL2D, PAD_W) == KILN_P(POOL2D, PAD_H) + 1 &&
                   KILN_P(POOL2D, DILATION_W) == KILN_P(POOL2D, DILATION_H) + 1 &&
                   KILN_P(AVG_POOL2D_GRAD, COUNT_INCLUDE_PAD) == KILN_P(POOL2D, COUNT_INCLUDE_PAD),
               "pool layouts");

kiln_status_t kiln_shape_max_pool2d_nhwc(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const kiln_value_t* x = nn_in(g, n, 0);
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
  if (n->params[KILN_P(POOL2D, DIVISOR_OVERRIDE)]) FAIL("%s: divisor_override must be 0", name);
  int64_t shape[4] = {x->shape[0], 0, 0, x->shape[3]};
  KILN_RETURN_IF_ERROR(
      nn_pool_window(name, n->params, 0, x->shape[1], x->shape[2], &shape[1], &shape[2]));
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_max_pool2d_indices(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const kiln_value_t* x = nn_in(g, n, 0);
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
  int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
  KILN_RETURN_IF_ERROR(
      nn_pool_window(name, n->params, 0, x->shape[2], x->shape[3], &shape[2], &shape[3]));
  nn_set(out, KILN_I64, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_max_pool2d_grad(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const kiln_value_t *x = nn_in(g, n, 0), *idx = nn_in(g, n, 1);
  const int64_t h = n->params[KILN_P(SIZE2D, H)], w = n->params[KILN_P(SIZE2D, W)];
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "dy", x, KILN_F32));
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "indices", idx, KILN_I64));
  for (int d = 0; d < 4; ++d)
    if (idx->shape[d] != x->shape[d]) FAIL("%s: indices must have dy's shape", name);
  KILN_RETURN_IF_ERROR(nn_check_size(name, "input height", h));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "input width", w));
  int64_t shape[4] = {x->shape[0], x->shape[1], h, w};
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_avg_pool2d_grad(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const kiln_value_t* x = nn_in(g, n, 0);
  const int64_t* p = n->params;
  const int64_t h = p[KILN_P(AVG_POOL2D_GRAD, H)], w = p[KILN_P(AVG_POOL2D_GRAD, W)];
  const int64_t divisor = p[KILN_P(AVG_POOL2D_GRAD, DIVISOR_OVERRIDE)];
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "dy", x, KILN_F32));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "input height", h));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "input width", w));
  if (divisor < -KILN_GRAD_DIM_LIMIT || divisor > KILN_GRAD_DIM_LIMIT)
    FAIL("%s: divisor_override %lld is outside [-2^31, 2^31] (0: none)", name, (long long)divisor);
  int64_t ho = 0, wo = 0;
  KILN_RETURN_IF_ERROR(nn_pool_window(name, p, 1, h, w, &ho, &wo));
  if (ho != x->shape[2] || wo != x->shape[3])
    FAIL("%s: dy is %lldx%lld but pooling a %lldx%lld input gives %lldx%lld", name,
         (long long)x->shape[2], (long long)x->shape[3], (long long)h, (long long)w,
         (long long)ho, (long long)wo);
  int64_t shape[4] = {x->shape[0], x->shape[1], h, w};
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_adaptive_pool2d(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  /* ADAPTIVE_AVG_POOL2D (H, W: the output's) and its gradient (the
   * input's). Both spatial sizes (in and out) at most 2^31, so the window
   * bounds' products (out index x in size) stay far from overflow. */
  const char* name = kiln_op_name(n->op);
  const kiln_value_t* x = nn_in(g, n, 0);
  const int64_t h = n->params[KILN_P(SIZE2D, H)], w = n->params[KILN_P(SIZE2D, W)];
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "height", x->shape[2]));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "width", x->shape[3]));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "target height", h));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "target width", w));
  int64_t shape[4] = {x->shape[0], x->shape[1], h, w};
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_upsample_bilinear2d(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const kiln_value_t* x = nn_in(g, n, 0);
  const int64_t h = n->params[KILN_P(UPSAMPLE, OUT_H)], w = n->params[KILN_P(UPSAMPLE, OUT_W)];
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "height", x->shape[2]));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "width", x->shape[3]));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "target height", h));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "target width", w));
  if ((unsigned long long)n->params[KILN_P(UPSAMPLE, ALIGN_CORNERS)] > 1)
    FAIL("%s: align_corners is 0 or 1", name);
  for (int i = 0; i < 2; ++i) { /* SCALE_H, SCALE_W; NaN fails both comparisons */
    float scale = n->fparams[KILN_FP(UPSAMPLE, SCALE_H) + i];
    if (!(scale >= 0.0f && scale <= 1e30f))
      FAIL("%s: scale factor %d must be finite and not negative", name, i);
  }
  int64_t shape[4] = {x->shape[0], x->shape[1], h, w};
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

/* CONV2D_NHWC: CONV2D's rule with x (N, H, W, C) (or (N, C, H, W) when
 * X_NCHW is 1) and y, residual (N, Ho, Wo, O); w dense, packed in panels
 * of 16 (the fp32 channels-last kernel's packing) or for bf16 compute
 * (KILN_LAYOUT_CONV2D_PACKED_16_BF16). Every param as
 * CONV2D validates it. bf16 storage (format 2.23): x may be bf16 (NHWC)
 * and Y_BF16 makes y bf16 for the bf16-compute form or a depthwise conv's
 * dense weight (at most KILN_CONV2D_NHWC_BF16_DW_TAPS taps), y without a
 * residual (the kernels: kiln_conv_nhwc_bf16.c, kiln_conv_nhwc_dw.c). */
kiln_status_t kiln_shape_conv2d_nhwc(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = nn_in(g, n, 0), *w = nn_in(g, n, 1);
  const kiln_value_t *bias = nn_in(g, n, 2), *res = nn_in(g, n, 3);
  const int64_t* p = n->params;
  if (!x || !w) FAIL("conv2d_nhwc: x and w are required");
  const int bf16_form = w->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16;
  if ((x->dtype != KILN_F32 && x->dtype != KILN_BF16) || w->dtype != KILN_F32)
    FAIL("conv2d_nhwc takes float32 (x also bfloat16)");
  if (x->rank != 4) FAIL("conv2d_nhwc's x must be (N, H, W, C), got rank %d", x->rank);
  if (w->rank != 4 || (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_CONV2D_PACKED_16 &&
                       w->layout != KILN_LAYOUT_CONV2D_PACKED_16_BF16))
    FAIL("conv2d_nhwc's w must be dense, packed in 16s or packed for bf16 compute (O, C / groups, "
         "kh, kw)");
  if ((unsigned long long)p[KILN_P(CONV2D_NHWC, X_NCHW)] > 1)
    FAIL("conv2d_nhwc: x's layout (x_nchw) is 0 (NHWC) or 1 (NCHW)");
  const int x_nchw = p[KILN_P(CONV2D_NHWC, X_NCHW)] == 1;
  int64_t groups = p[KILN_P(CONV2D_NHWC, GROUPS)], O = w->shape[0];
  int64_t C = x_nchw ? x->shape[1] : x->shape[3], H = x_nchw ? x->shape[2] : x->shape[1];
  int64_t W = x_nchw ? x->shape[3] : x->shape[2];
  if (groups < 1 || groups > ((int64_t)1 << 40))
    FAIL("conv2d_nhwc: groups %lld must be positive", (long long)groups);
  if (C < 1 || C % groups || w->shape[1] != C / groups)
    FAIL("conv2d_nhwc: x has %lld channels; w expects %lld per group x %lld groups", (long long)C,
         (long long)w->shape[1], (long long)groups);
  if (O < 1 || O % groups)
    FAIL("conv2d_nhwc: %lld output channels do not split into %lld groups", (long long)O,
         (long long)groups);
  if ((unsigned long long)p[KILN_P(CONV2D_NHWC, ACT)] >= KILN_ACT_COUNT)
    FAIL("conv2d_nhwc: unknown activation");
  if ((unsigned long long)p[KILN_P(CONV2D_NHWC, RESIDUAL_BEFORE_ACT)] > 1)
    FAIL("conv2d_nhwc: residual placement (residual_before_act) is 0 or 1");
  if ((unsigned long long)p[KILN_P(CONV2D_NHWC, ROUND_X)] > 1)
    FAIL("conv2d_nhwc: round_x is 0 or 1");
  /* bf16 storage: the kernels that read and write it. */
  const int dw_dense = w->layout == KILN_LAYOUT_DENSE && groups == C && O == C &&
                       !nn_in(g, n, 4) && w->shape[2] * w->shape[3] <= KILN_CONV2D_NHWC_BF16_DW_TAPS;
  if (x->dtype == KILN_BF16 && (x_nchw || !(bf16_form || dw_dense)))
    FAIL("conv2d_nhwc: a bfloat16 x is NHWC, read by a bf16-compute weight or a depthwise conv's "
         "dense one");
  const int y_bf16 = p[KILN_P(CONV2D_NHWC, Y_BF16)] == 1;
  if ((unsigned long long)p[KILN_P(CONV2D_NHWC, Y_BF16)] > 1)
    FAIL("conv2d_nhwc: y_bf16 is 0 or 1");
  if (y_bf16 && (res || !(bf16_form || dw_dense)))
    FAIL("conv2d_nhwc: a bfloat16 y takes a bf16-compute weight or a depthwise conv's dense "
         "one, and no residual");
  const int64_t end_h = p[KILN_P(CONV2D_NHWC, PAD_H_END)], end_w = p[KILN_P(CONV2D_NHWC, PAD_W_END)];
  if (end_h || end_w) {
    if (end_h < 0 || end_w < 0 || end_h > ((int64_t)1 << 40) || end_w > ((int64_t)1 << 40))
      FAIL("conv2d_nhwc: end padding %lld, %lld is outside [0, 2^40]", (long long)end_h,
           (long long)end_w);
    if (kiln_dim_is_sym(H) || kiln_dim_is_sym(W))
      FAIL("conv2d_nhwc: end padding takes an x of concrete height and width");
    H += end_h, W += end_w; /* the window sees that many more rows and columns */
  }
  int64_t shape[4] = {x->shape[0], 0, 0, O};
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(
      "conv2d_nhwc height", H, w->shape[2], p[KILN_P(CONV2D_NHWC, STRIDE_H)],
      p[KILN_P(CONV2D_NHWC, PAD_H)], p[KILN_P(CONV2D_NHWC, DILATION_H)], 0, &shape[1]));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(
      "conv2d_nhwc width", W, w->shape[3], p[KILN_P(CONV2D_NHWC, STRIDE_W)],
      p[KILN_P(CONV2D_NHWC, PAD_W)], p[KILN_P(CONV2D_NHWC, DILATION_W)], 0, &shape[2]));
  nn_set(out, y_bf16 ? KILN_BF16 : KILN_F32, shape);
  if (bias && (bias->dtype != KILN_F32 || kiln_value_numel(bias) != O))
    FAIL("conv2d_nhwc: bias must be float32 with %lld elements", (long long)O);
  if (res) {
    if (res->dtype != KILN_F32 || res->rank != 4) FAIL("conv2d_nhwc: residual must match y");
    for (int32_t d = 0; d < 4; ++d)
      if (res->shape[d] != shape[d]) FAIL("conv2d_nhwc: residual must match y's shape");
  }
  const kiln_value_t* scale = nn_in(g, n, 4);
  if (scale && (scale->dtype != KILN_F32 || scale->rank != 1 || scale->shape[0] != O))
    FAIL("conv2d_nhwc: scale must be float32 (%lld)", (long long)O);
  if (scale && w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_CONV2D_PACKED_16_BF16)
    FAIL("conv2d_nhwc: a scaled conv's weight is dense or in the bf16 form");
  return kiln_ok();
}
