/* Shape rules of the convolution and pooling gradient ops. Every size and
 * parameter is validated with overflow-safe bounds, as for the forward ops:
 * a plan built from a graph that passed cannot index out of bounds. */
#include <string.h>

#include "ir/kiln_shape_infer_nn.h"
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

/* The forward conv's output size from (H, W) equals dy's (Ho, Wo). */
static kiln_status_t nn_check_conv_window(const char* name, const int64_t* p, int64_t h,
                                          int64_t w, int64_t kh, int64_t kw,
                                          const kiln_value_t* dy) {
  int64_t ho = 0, wo = 0;
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, h, kh, p[0], p[2], p[4], 0, &ho));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, w, kw, p[1], p[3], p[5], 0, &wo));
  if (dy->shape[2] != ho || dy->shape[3] != wo)
    FAIL("%s: dy is %lldx%lld but the convolution of a %lldx%lld input gives %lldx%lld", name,
         (long long)dy->shape[2], (long long)dy->shape[3], (long long)h, (long long)w,
         (long long)ho, (long long)wo);
  return kiln_ok();
}

static kiln_status_t nn_check_groups(const char* name, int64_t groups, int64_t c, int64_t o) {
  if (groups < 1 || groups > ((int64_t)1 << 40)) FAIL("%s: groups must be positive", name);
  if (c < 1 || c % groups) FAIL("%s: %lld channels do not split into %lld groups", name,
                                (long long)c, (long long)groups);
  if (o < 1 || o % groups) FAIL("%s: %lld output channels do not split into %lld groups", name,
                                (long long)o, (long long)groups);
  return kiln_ok();
}

static kiln_status_t infer_conv2d_grad(const kiln_graph_t* g, const kiln_node_t* n,
                                       kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const int64_t* p = n->params;
  const kiln_value_t *dy = nn_in(g, n, 0), *other = nn_in(g, n, 1);
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "dy", dy, KILN_F32));
  const int64_t groups = p[6], O = dy->shape[1];
  if (n->op == KILN_OP_CONV2D_GRAD_INPUT) {
    KILN_RETURN_IF_ERROR(nn_check_4d(name, "w", other, KILN_F32));
    if (other->shape[0] != O)
      FAIL("%s: w has %lld output channels, dy %lld", name, (long long)other->shape[0],
           (long long)O);
    if (other->shape[1] < 1 || other->shape[1] > KILN_GRAD_DIM_LIMIT)
      FAIL("%s: w's channels per group must be positive", name);
    if (groups < 1 || groups > ((int64_t)1 << 31)) FAIL("%s: groups must be positive", name);
    const int64_t C = other->shape[1] * groups;
    KILN_RETURN_IF_ERROR(nn_check_groups(name, groups, C, O));
    KILN_RETURN_IF_ERROR(nn_check_size(name, "input height", p[7]));
    KILN_RETURN_IF_ERROR(nn_check_size(name, "input width", p[8]));
    KILN_RETURN_IF_ERROR(
        nn_check_conv_window(name, p, p[7], p[8], other->shape[2], other->shape[3], dy));
    int64_t shape[4] = {dy->shape[0], C, p[7], p[8]};
    nn_set(out, KILN_F32, shape);
    return kiln_ok();
  }
  KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", other, KILN_F32));
  if (other->shape[0] != dy->shape[0])
    FAIL("%s: x has batch %lld, dy %lld", name, (long long)other->shape[0],
         (long long)dy->shape[0]);
  KILN_RETURN_IF_ERROR(nn_check_groups(name, groups, other->shape[1], O));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "kernel height", p[7]));
  KILN_RETURN_IF_ERROR(nn_check_size(name, "kernel width", p[8]));
  KILN_RETURN_IF_ERROR(
      nn_check_conv_window(name, p, other->shape[2], other->shape[3], p[7], p[8], dy));
  int64_t shape[4] = {O, other->shape[1] / groups, p[7], p[8]};
  nn_set(out, KILN_F32, shape);
  return kiln_ok();
}

/* The pooling window over an (H, W) input: params as MAX_POOL2D /
 * AVG_POOL2D (kiln_shape_infer.c's infer_pool2d); (Ho, Wo) out. */
static kiln_status_t nn_pool_window(const char* name, const int64_t* p, int avg, int64_t h,
                                    int64_t w, int64_t* ho, int64_t* wo) {
  if (avg && (p[6] != 1 || p[7] != 1)) FAIL("%s has no dilation (params 6 and 7 must be 1)", name);
  if ((unsigned long long)p[8] > 1 || (unsigned long long)p[9] > 1)
    FAIL("%s: ceil_mode and count_include_pad are 0 or 1", name);
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, h, p[0], p[2], p[4], p[6], (int)p[8], ho));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size(name, w, p[1], p[3], p[5], p[7], (int)p[8], wo));
  for (int i = 0; i < 2; ++i) {
    /* As the forward: padding at most half the (dilated) kernel. */
    int64_t span = (p[i] - 1) * p[6 + i] + 1;
    if (p[4 + i] > span / 2)
      FAIL("%s: padding %lld is more than half the kernel (%lld)", name, (long long)p[4 + i],
           (long long)span);
  }
  return kiln_ok();
}

kiln_status_t kiln_shape_infer_nn(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const char* name = kiln_op_name(n->op);
  const int64_t* p = n->params;
  const kiln_value_t* x = nn_in(g, n, 0);
  switch (n->op) {
    case KILN_OP_CONV2D_GRAD_INPUT:
    case KILN_OP_CONV2D_GRAD_WEIGHT:
      return infer_conv2d_grad(g, n, out);
    case KILN_OP_MAX_POOL2D_NHWC: {
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
      if (p[10]) FAIL("%s: divisor_override (param 10) must be 0", name);
      int64_t shape[4] = {x->shape[0], 0, 0, x->shape[3]};
      KILN_RETURN_IF_ERROR(
          nn_pool_window(name, p, 0, x->shape[1], x->shape[2], &shape[1], &shape[2]));
      nn_set(out, KILN_F32, shape);
      return kiln_ok();
    }
    case KILN_OP_MAX_POOL2D_INDICES: {
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
      int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
      KILN_RETURN_IF_ERROR(
          nn_pool_window(name, p, 0, x->shape[2], x->shape[3], &shape[2], &shape[3]));
      nn_set(out, KILN_I64, shape);
      return kiln_ok();
    }
    case KILN_OP_MAX_POOL2D_GRAD: {
      const kiln_value_t* idx = nn_in(g, n, 1);
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "dy", x, KILN_F32));
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "indices", idx, KILN_I64));
      for (int d = 0; d < 4; ++d)
        if (idx->shape[d] != x->shape[d]) FAIL("%s: indices must have dy's shape", name);
      KILN_RETURN_IF_ERROR(nn_check_size(name, "input height", p[0]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "input width", p[1]));
      int64_t shape[4] = {x->shape[0], x->shape[1], p[0], p[1]};
      nn_set(out, KILN_F32, shape);
      return kiln_ok();
    }
    case KILN_OP_AVG_POOL2D_GRAD: {
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "dy", x, KILN_F32));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "input height", p[10]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "input width", p[11]));
      if (p[12] < -KILN_GRAD_DIM_LIMIT || p[12] > KILN_GRAD_DIM_LIMIT)
        FAIL("%s: divisor_override %lld is outside [-2^31, 2^31] (0: none)", name, (long long)p[12]);
      int64_t ho = 0, wo = 0;
      KILN_RETURN_IF_ERROR(nn_pool_window(name, p, 1, p[10], p[11], &ho, &wo));
      if (ho != x->shape[2] || wo != x->shape[3])
        FAIL("%s: dy is %lldx%lld but pooling a %lldx%lld input gives %lldx%lld", name,
             (long long)x->shape[2], (long long)x->shape[3], (long long)p[10], (long long)p[11],
             (long long)ho, (long long)wo);
      int64_t shape[4] = {x->shape[0], x->shape[1], p[10], p[11]};
      nn_set(out, KILN_F32, shape);
      return kiln_ok();
    }
    case KILN_OP_ADAPTIVE_AVG_POOL2D:
    case KILN_OP_ADAPTIVE_AVG_POOL2D_GRAD: {
      /* Both spatial sizes (in and out) at most 2^31, so the window bounds'
       * products (out index x in size) stay far from overflow. */
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "height", x->shape[2]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "width", x->shape[3]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "target height", p[0]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "target width", p[1]));
      int64_t shape[4] = {x->shape[0], x->shape[1], p[0], p[1]};
      nn_set(out, KILN_F32, shape);
      return kiln_ok();
    }
    case KILN_OP_UPSAMPLE_BILINEAR2D: {
      KILN_RETURN_IF_ERROR(nn_check_4d(name, "x", x, KILN_F32));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "height", x->shape[2]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "width", x->shape[3]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "target height", p[0]));
      KILN_RETURN_IF_ERROR(nn_check_size(name, "target width", p[1]));
      if ((unsigned long long)p[2] > 1) FAIL("%s: align_corners is 0 or 1", name);
      for (int i = 0; i < 2; ++i)  /* NaN fails both comparisons */
        if (!(n->fparams[i] >= 0.0f && n->fparams[i] <= 1e30f))
          FAIL("%s: scale factor %d must be finite and not negative", name, i);
      int64_t shape[4] = {x->shape[0], x->shape[1], p[0], p[1]};
      nn_set(out, KILN_F32, shape);
      return kiln_ok();
    }
    default:
      return kiln_status_make(KILN_INTERNAL, "no training shape rule for op %s", name);
  }
}

/* CONV2D_NHWC: CONV2D's rule with x (N, H, W, C) (or (N, C, H, W) when
 * param 9 is 1) and y, residual (N, Ho, Wo, O); w dense or packed in panels
 * of 16 (the only packing the channels-last kernel reads). Every param as
 * CONV2D validates it. */
kiln_status_t kiln_shape_infer_conv2d_nhwc(const kiln_graph_t* g, const kiln_node_t* n,
                                           kiln_value_t* out) {
  const kiln_value_t *x = nn_in(g, n, 0), *w = nn_in(g, n, 1);
  const kiln_value_t *bias = nn_in(g, n, 2), *res = nn_in(g, n, 3);
  const int64_t* p = n->params;
  if (!x || !w) FAIL("conv2d_nhwc: x and w are required");
  if (x->dtype != KILN_F32 || w->dtype != KILN_F32) FAIL("conv2d_nhwc takes float32");
  if (x->rank != 4) FAIL("conv2d_nhwc's x must be (N, H, W, C), got rank %d", x->rank);
  if (w->rank != 4 || (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_CONV2D_PACKED_16))
    FAIL("conv2d_nhwc's w must be dense or packed in 16s (O, C / groups, kh, kw)");
  if ((unsigned long long)p[9] > 1) FAIL("conv2d_nhwc: x's layout (param 9) is 0 (NHWC) or 1 (NCHW)");
  const int x_nchw = p[9] == 1;
  int64_t groups = p[6], O = w->shape[0];
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
  if ((unsigned long long)p[7] >= KILN_ACT_COUNT) FAIL("conv2d_nhwc: unknown activation");
  if ((unsigned long long)p[8] > 1) FAIL("conv2d_nhwc: residual placement (param 8) is 0 or 1");
  int64_t shape[4] = {x->shape[0], 0, 0, O};
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size("conv2d_nhwc height", H, w->shape[2], p[0],
                                                  p[2], p[4], 0, &shape[1]));
  KILN_RETURN_IF_ERROR(kiln_shape_window_out_size("conv2d_nhwc width", W, w->shape[3], p[1], p[3],
                                                  p[5], 0, &shape[2]));
  nn_set(out, KILN_F32, shape);
  if (bias && (bias->dtype != KILN_F32 || kiln_value_numel(bias) != O))
    FAIL("conv2d_nhwc: bias must be float32 with %lld elements", (long long)O);
  if (res) {
    if (res->dtype != KILN_F32 || res->rank != 4) FAIL("conv2d_nhwc: residual must match y");
    for (int32_t d = 0; d < 4; ++d)
      if (res->shape[d] != shape[d]) FAIL("conv2d_nhwc: residual must match y's shape");
  }
  return kiln_ok();
}
