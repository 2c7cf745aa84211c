/* Geometry of the training ops from their values' shapes and params (see
 * the op docs in ir/kiln_ops.h), handed to the kernels in
 * kernels/conv/kiln_conv_backward.h. */
#include <string.h>

#include "hal/cpu/kiln_hal_cpu_nn.h"
#include "kernels/conv/kiln_conv_backward.h"
#include "kernels/conv/kiln_conv_nhwc.h"

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)

static void nn_conv_geometry(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                             kiln_conv2d_grad_f32_args_t* a) {
  const kiln_value_t *dy = VAL(0), *other = VAL(1), *out = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  memset(a, 0, sizeof(*a));
  const kiln_value_t *x = n->op == KILN_OP_CONV2D_GRAD_INPUT ? out : other;
  const kiln_value_t *w = n->op == KILN_OP_CONV2D_GRAD_INPUT ? other : out;
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->o = w->shape[0], a->kh = w->shape[2], a->kw = w->shape[3];
  a->ho = dy->shape[2], a->wo = dy->shape[3];
  a->sh = p[0], a->sw = p[1], a->ph = p[2], a->pw = p[3], a->dh = p[4], a->dw = p[5];
  a->groups = p[6];
  a->dy = BUF(0);
  if (n->op == KILN_OP_CONV2D_GRAD_INPUT) {
    a->weight = BUF(1);
    a->dx = bufs[n->outputs[0]];
  } else {
    a->x = BUF(1);
    a->dweight = bufs[n->outputs[0]];
  }
}

/* x is the (N, C, H, W) side, y the (N, C, Ho, Wo) side; p as MAX_POOL2D. */
static void nn_pool_geometry(const kiln_value_t* x, const kiln_value_t* y, const int64_t* p,
                             kiln_pool2d_grad_f32_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->ho = y->shape[2], a->wo = y->shape[3];
  a->kh = p[0], a->kw = p[1], a->sh = p[2], a->sw = p[3], a->ph = p[4], a->pw = p[5];
  a->dh = p[6], a->dw = p[7];
  a->count_include_pad = (int)p[9];
}

void kiln_hal_cpu_conv2d_args(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                              kiln_conv2d_f32_args_t* a) {
  const kiln_value_t* w = VAL(1);
  const int64_t* p = n->params;
  memset(a, 0, sizeof(*a));
  a->o = w->shape[0], a->kh = w->shape[2], a->kw = w->shape[3];
  a->sh = p[0], a->sw = p[1], a->ph = p[2], a->pw = p[3], a->dh = p[4], a->dw = p[5];
  a->groups = p[6], a->act = (kiln_activation_t)p[7], a->residual_before_act = (int)p[8];
  a->weight_packed = w->layout == KILN_LAYOUT_CONV2D_PACKED      ? KILN_CONV_PANEL_O
                     : w->layout == KILN_LAYOUT_CONV2D_PACKED_16 ? KILN_CONV_PANEL_WIDE
                                                                 : 0;
  if (!bufs) return; /* the geometry only */
  a->x = BUF(0), a->weight = BUF(1);
  a->bias = n->n_inputs > 2 ? BUF(2) : NULL;
  a->residual = n->n_inputs > 3 ? BUF(3) : NULL;
  a->y = bufs[n->outputs[0]];
}

kiln_status_t kiln_hal_cpu_run_nn(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                                  kiln_pool_t* pool) {
  const kiln_value_t* out = &g->values[n->outputs[0]];
  switch (n->op) {
    case KILN_OP_CONV2D_GRAD_INPUT:
    case KILN_OP_CONV2D_GRAD_WEIGHT: {
      kiln_conv2d_grad_f32_args_t a;
      nn_conv_geometry(g, n, bufs, &a);
      if (n->op == KILN_OP_CONV2D_GRAD_INPUT)
        kiln_conv2d_grad_input_f32(&a, pool);
      else
        kiln_conv2d_grad_weight_f32(&a, pool);
      return kiln_ok();
    }
    case KILN_OP_MAX_POOL2D_INDICES: {
      kiln_pool2d_grad_f32_args_t a;
      nn_pool_geometry(VAL(0), out, n->params, &a);
      a.x = BUF(0);
      a.out_indices = bufs[n->outputs[0]];
      kiln_max_pool2d_indices_f32(&a, pool);
      return kiln_ok();
    }
    case KILN_OP_MAX_POOL2D_GRAD: {
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
    case KILN_OP_AVG_POOL2D_GRAD: {
      kiln_pool2d_grad_f32_args_t a;
      nn_pool_geometry(out, VAL(0), n->params, &a);
      a.divisor_override = n->params[12];
      a.dy = BUF(0);
      a.dx = bufs[n->outputs[0]];
      kiln_avg_pool2d_grad_f32(&a, pool);
      return kiln_ok();
    }
    case KILN_OP_ADAPTIVE_AVG_POOL2D:
    case KILN_OP_ADAPTIVE_AVG_POOL2D_GRAD: {
      /* x is the (H, W) side, y the (Ho, Wo) side, whichever way it runs. */
      int fwd = n->op == KILN_OP_ADAPTIVE_AVG_POOL2D;
      const kiln_value_t *x = fwd ? VAL(0) : out, *y = fwd ? out : VAL(0);
      kiln_pool2d_grad_f32_args_t a;
      memset(&a, 0, sizeof(a));
      a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
      a.ho = y->shape[2], a.wo = y->shape[3];
      if (fwd) {
        a.x = BUF(0);
        a.y = bufs[n->outputs[0]];
        kiln_adaptive_avg_pool2d_f32(&a, pool);
      } else {
        a.dy = BUF(0);
        a.dx = bufs[n->outputs[0]];
        kiln_adaptive_avg_pool2d_grad_f32(&a, pool);
      }
      return kiln_ok();
    }
    case KILN_OP_CONV2D_NHWC: {
      /* x (N, H, W, C), w (O, C / groups, kh, kw) -> y (N, Ho, Wo, O). */
      const kiln_value_t* x = VAL(0);
      const int64_t* p = n->params;
      kiln_conv2d_f32_args_t a;
      kiln_hal_cpu_conv2d_args(g, n, bufs, &a);
      const int x_nchw = p[9] == 1; /* x (N, C, H, W), gathered by the kernel */
      a.n = x->shape[0];
      a.h = x->shape[x_nchw ? 2 : 1], a.w = x->shape[x_nchw ? 3 : 2], a.c = x->shape[x_nchw ? 1 : 3];
      a.ho = out->shape[1], a.wo = out->shape[2];
      if (x_nchw) kiln_conv2d_f32_nhwc_from_nchw(&a, pool);
      else kiln_conv2d_f32_nhwc(&a, pool);
      return kiln_ok();
    }
    case KILN_OP_MAX_POOL2D_NHWC: {
      /* x (N, H, W, C) -> y (N, Ho, Wo, C); the geometry as MAX_POOL2D's. */
      const kiln_value_t* x = VAL(0);
      const int64_t* p = n->params;
      kiln_pool2d_f32_args_t a;
      memset(&a, 0, sizeof(a));
      a.n = x->shape[0], a.h = x->shape[1], a.w = x->shape[2], a.c = x->shape[3];
      a.ho = out->shape[1], a.wo = out->shape[2];
      a.kh = p[0], a.kw = p[1], a.sh = p[2], a.sw = p[3], a.ph = p[4], a.pw = p[5];
      a.dh = p[6], a.dw = p[7];
      a.x = BUF(0);
      a.y = bufs[n->outputs[0]];
      kiln_max_pool2d_f32_nhwc(&a, pool);
      return kiln_ok();
    }
    case KILN_OP_UPSAMPLE_BILINEAR2D: {
      const kiln_value_t* x = VAL(0);
      kiln_upsample_f32_args_t a;
      memset(&a, 0, sizeof(a));
      a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
      a.ho = out->shape[2], a.wo = out->shape[3];
      a.align_corners = (int)n->params[2];
      a.scale_h = n->fparams[0], a.scale_w = n->fparams[1];
      a.x = BUF(0);
      a.y = bufs[n->outputs[0]];
      kiln_upsample_bilinear2d_f32(&a, pool);
      return kiln_ok();
    }
    default:
      return kiln_status_make(KILN_INTERNAL, "the CPU target has no training kernel for %s",
                              kiln_op_name(n->op));
  }
}
