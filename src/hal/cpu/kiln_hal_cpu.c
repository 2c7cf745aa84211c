/* The CPU target: maps each IR op to its kernel, computing the geometry
 * (broadcast strides, row/column splits, GEMM strides) from the values'
 * shapes. Kernels never see the graph; this file is the only place that
 * knows both. */
#include <string.h>

#include "hal/kiln_hal.h"
#include "hal/cpu/kiln_hal_cpu_math.h"
#include "hal/cpu/kiln_hal_cpu_nn.h"
#include "hal/cpu/kiln_hal_cpu_movement.h"
#include "hal/cpu/kiln_hal_cpu_sample.h"
#include "hal/cpu/kiln_hal_cpu_fused.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_grouped.h"
#include "kernels/nn/kiln_nn.h"
#include "kernels/nn/kiln_softmax_safe.h"

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)

static const kiln_value_t* out_value(const kiln_graph_t* g, const kiln_node_t* n) {
  return &g->values[n->outputs[0]];
}

kiln_status_t kiln_hal_cpu_supports(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* x = n->n_inputs ? VAL(0) : NULL;
  switch (n->op) {
    case KILN_OP_LINEAR: {
      const kiln_value_t* w = VAL(1);
      if (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_GEMM_PACKED_B &&
          w->layout != KILN_LAYOUT_TRANSPOSED_2D && w->layout != KILN_LAYOUT_GEMM_PACKED_B_BF16 &&
          w->layout != KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI && w->layout != KILN_LAYOUT_GEMM_PACKED_B_Q8 &&
          w->layout != KILN_LAYOUT_GEMM_PACKED_B_Q4)
        return kiln_status_make(KILN_UNSUPPORTED, "linear weight layout %d", (int)w->layout);
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
      /* A quantized table (an embedding packed by the pack pass): rows
       * along axis 0 of a 2-d (N, K) table, its blob B = table^T checked
       * against the shape before any run reads it. */
      if (x->layout != KILN_LAYOUT_GEMM_PACKED_B_Q8 && x->layout != KILN_LAYOUT_GEMM_PACKED_B_Q4)
        return kiln_ok();
      const unsigned char* h = x->data;
      int bits = x->nbytes >= KILN_GEMM_QUANT_HEADER ? h[5] : 0;
      if (x->rank != 2 || n->params[0] != 0 ||
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
      int panel = w->layout == KILN_LAYOUT_CONV2D_PACKED      ? KILN_CONV_PANEL_O
                  : w->layout == KILN_LAYOUT_CONV2D_PACKED_16 ? KILN_CONV_PANEL_WIDE
                                                              : 0;
      if (w->layout != KILN_LAYOUT_DENSE && !panel)
        return kiln_status_make(KILN_UNSUPPORTED, "conv2d weight layout %d", (int)w->layout);
      /* A packed weight's size depends on the node's groups: the loader
       * cannot check it, so it is checked here before any run reads it. */
      /* The product is within the element count (at most 2^44) unless O is 0. */
      int64_t k = w->shape[0] > 0 ? w->shape[1] * w->shape[2] * w->shape[3] : 0;
      size_t want = kiln_conv2d_f32_packed_size(w->shape[0], k, n->params[6], panel);
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

/* Broadcast geometry of up to three inputs onto the output. */
static void nd_for(const kiln_graph_t* g, const kiln_node_t* n, int n_in, kiln_nd_t* nd) {
  const kiln_value_t* y = out_value(g, n);
  memset(nd, 0, sizeof(*nd));
  nd->rank = y->rank;
  memcpy(nd->shape, y->shape, sizeof(y->shape));
  kiln_nd_set_dense_output(nd);
  for (int i = 0; i < n_in; ++i) kiln_nd_set_broadcast(nd, i + 1, VAL(i)->rank, VAL(i)->shape);
}

static int64_t prod(const int64_t* shape, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t d = from; d < to; ++d) p *= shape[d];
  return p;
}

static void run_cat(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                    kiln_pool_t* pool) {
  const kiln_value_t* y = out_value(g, n);
  int32_t axis = (int32_t)n->params[0];
  size_t elem = kiln_dtype_size(y->dtype);
  int64_t inner = prod(y->shape, axis + 1, y->rank);
  int64_t at = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* x = VAL(i);
    kiln_nd_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.rank = x->rank;
    memcpy(nd.shape, x->shape, sizeof(x->shape));
    /* Output strides are y's dense strides; input is dense. */
    int64_t so = 1, sx = 1;
    for (int32_t d = x->rank - 1; d >= 0; --d) {
      nd.strides[0][d] = so;
      nd.strides[1][d] = sx;
      so *= y->shape[d];
      sx *= x->shape[d];
    }
    kiln_strided_copy(y->dtype, &nd, (char*)bufs[n->outputs[0]] + (size_t)(at * inner) * elem,
                      BUF(i), pool);
    at += x->shape[axis];
  }
}

/* Batched matmul with NumPy batch broadcasting: batch dims are folded into
 * one strided GEMM batch where the strides allow, else looped. */
static void run_matmul(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                       kiln_pool_t* pool) {
  const kiln_value_t *a = VAL(0), *b = VAL(1), *y = out_value(g, n);
  int32_t br = y->rank - 2;
  int ta = (n->params[0] & KILN_MATMUL_TRANSPOSE_A) != 0;
  int tb = (n->params[0] & KILN_MATMUL_TRANSPOSE_B) != 0;
  /* A (K, N) constant stored as its (N, K) transpose (the fold pass makes
   * W.t() one) is b read transposed; with read=bT as well, the two cancel. */
  if (b->layout == KILN_LAYOUT_TRANSPOSED_2D) tb = !tb;
  int64_t m = y->shape[br], nn = y->shape[br + 1], k = a->shape[a->rank - 1 - ta];
  kiln_nd_t nd; /* batch geometry: operand 0 = y, 1 = a, 2 = b (in matrices) */
  memset(&nd, 0, sizeof(nd));
  nd.rank = br;
  memcpy(nd.shape, y->shape, (size_t)br * sizeof(int64_t));
  kiln_nd_set_dense_output(&nd);
  kiln_nd_set_broadcast(&nd, 1, a->rank - 2, a->shape);
  kiln_nd_set_broadcast(&nd, 2, b->rank - 2, b->shape);
  /* Merge batch dims contiguous in all three operands (nd_collapse in
   * matrix units); the innermost merged dim becomes the GEMM batch. */
  int64_t batch = 1, sa = 0, sb = 0, sy = 0;
  int64_t outer_shape[KILN_MAX_RANK], outer_sa[KILN_MAX_RANK], outer_sb[KILN_MAX_RANK],
      outer_sy[KILN_MAX_RANK];
  int32_t n_outer = 0;
  for (int32_t d = 0; d < br; ++d) {
    if (nd.shape[d] == 1) continue;
    if (batch > 1 && sy == nd.strides[0][d] * nd.shape[d] && sa == nd.strides[1][d] * nd.shape[d] &&
        sb == nd.strides[2][d] * nd.shape[d]) {
      batch *= nd.shape[d];
      sy = nd.strides[0][d];
      sa = nd.strides[1][d];
      sb = nd.strides[2][d];
      continue;
    }
    if (batch > 1) {
      outer_shape[n_outer] = batch;
      outer_sy[n_outer] = sy;
      outer_sa[n_outer] = sa;
      outer_sb[n_outer] = sb;
      n_outer++;
    }
    batch = nd.shape[d];
    sy = nd.strides[0][d];
    sa = nd.strides[1][d];
    sb = nd.strides[2][d];
  }
  int64_t n_loops = prod(outer_shape, 0, n_outer);
  for (int64_t l = 0; l < n_loops; ++l) {
    int64_t rem = l, oy = 0, oa = 0, ob = 0;
    for (int32_t d = n_outer - 1; d >= 0; --d) {
      int64_t i = rem % outer_shape[d];
      rem /= outer_shape[d];
      oy += i * outer_sy[d];
      oa += i * outer_sa[d];
      ob += i * outer_sb[d];
    }
    kiln_gemm_f32_args_t args;
    memset(&args, 0, sizeof(args));
    args.batch = batch;
    args.m = m;
    args.n = nn;
    args.k = k;
    if (a->dtype == KILN_BF16) /* a bf16 model's operand: widened as it is packed */
      args.a_bf16 = (const uint16_t*)BUF(0) + oa * m * k;
    else
      args.a = (const float*)BUF(0) + oa * m * k;
    args.a_batch_stride = sa * m * k;
    args.a_row_stride = ta ? 1 : k; /* stored (K, M) when transposed */
    args.a_col_stride = ta ? m : 1;
    args.b = (const float*)BUF(1) + ob * k * nn;
    args.b_batch_stride = sb * k * nn;
    args.b_row_stride = tb ? 1 : nn; /* stored (N, K) when transposed */
    args.b_col_stride = tb ? k : 1;
    args.c = (float*)bufs[n->outputs[0]] + oy * m * nn;
    args.c_batch_stride = sy * m * nn;
    args.c_row_stride = nn;
    args.act = KILN_ACT_NONE;
    kiln_gemm_f32(&args, pool);
  }
}

static void run_linear(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                       kiln_pool_t* pool) {
  const kiln_value_t *x = VAL(0), *w = VAL(1);
  int wt = n->params[1] != 0; /* a runtime weight stored (N, K) */
  int64_t k = w->shape[wt], nn = w->shape[1 - wt];
  /* A constant's bytes, or the runtime value's buffer. */
  const float* wdata = w->kind == KILN_VALUE_CONSTANT ? w->data : BUF(1);
  kiln_gemm_f32_args_t args;
  memset(&args, 0, sizeof(args));
  args.batch = 1;
  args.m = kiln_value_numel(x) / (k ? k : 1);
  if (!k) args.m = prod(x->shape, 0, x->rank - 1);
  args.n = nn;
  args.k = k;
  if (x->dtype == KILN_BF16)
    args.a_bf16 = BUF(0);
  else
    args.a = BUF(0);
  args.a_row_stride = k;
  args.a_col_stride = 1;
  if (w->layout == KILN_LAYOUT_GEMM_PACKED_B) {
    args.b_packed = w->data;
  } else if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16) {
    args.b_packed_bf16 = w->data;
  } else if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI) {
    args.b_packed_bf16_vnni = w->data; /* bf16 compute: the layout says so */
  } else if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4) {
    args.b_packed_q = w->data;
  } else if (w->layout == KILN_LAYOUT_TRANSPOSED_2D || wt) {
    args.b = wdata;
    args.b_row_stride = 1;
    args.b_col_stride = k;
  } else {
    args.b = wdata;
    args.b_row_stride = nn;
    args.b_col_stride = 1;
  }
  args.c = bufs[n->outputs[0]];
  args.c_row_stride = nn;
  args.bias = n->n_inputs > 2 ? BUF(2) : NULL;
  if (n->n_inputs > 3 && n->inputs[3] >= 0) {
    args.residual = BUF(3);
    args.r_row_stride = nn;
  }
  args.act = (kiln_activation_t)n->params[0];
  kiln_gemm_f32(&args, pool);
}

static void run_sdpa(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                     kiln_pool_t* pool) {
  const int64_t* p = n->params;
  kiln_attention_args_t a;
  memset(&a, 0, sizeof(a));
  int64_t* strides[3] = {a.q_strides, a.k_strides, a.v_strides};
  const float* base[3] = {BUF(0), BUF(1), BUF(2)};
  if (p[1] & KILN_SDPA_VIEWS) {
    a.batch = p[2], a.heads = p[3], a.kv_heads = p[4], a.q_len = p[5], a.kv_len = p[6];
    a.head_dim = p[7], a.v_head_dim = p[8];
    for (int i = 0; i < 3; ++i) {
      base[i] += p[9 + 5 * i];
      memcpy(strides[i], p + 10 + 5 * i, 4 * sizeof(int64_t));
    }
  } else {
    const kiln_value_t *q = VAL(0), *k = VAL(1), *v = VAL(2);
    a.batch = q->shape[0], a.heads = q->shape[1], a.kv_heads = k->shape[1];
    a.q_len = q->shape[2], a.kv_len = k->shape[2], a.head_dim = q->shape[3];
    a.v_head_dim = v->shape[3];
    const kiln_value_t* vals[3] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
      int64_t s = 1;
      for (int d = 3; d >= 0; --d) {
        strides[i][d] = s;
        s *= vals[i]->shape[d];
      }
    }
  }
  a.q = base[0];
  a.k = base[1];
  a.v = base[2];
  if (n->n_inputs > 3 && n->inputs[3] >= 0) {
    const kiln_value_t* m = VAL(3);
    kiln_nd_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.rank = 4;
    nd.shape[0] = a.batch, nd.shape[1] = a.heads, nd.shape[2] = a.q_len, nd.shape[3] = a.kv_len;
    kiln_nd_set_broadcast(&nd, 1, m->rank, m->shape);
    memcpy(a.mask_strides, nd.strides[1], sizeof(a.mask_strides));
    a.mask = BUF(3);
  }
  a.out = bufs[n->outputs[0]];
  if (p[1] & KILN_SDPA_OUT_BSHD) {
    a.out_strides[0] = a.q_len * a.heads * a.v_head_dim;
    a.out_strides[1] = a.v_head_dim;
    a.out_strides[2] = a.heads * a.v_head_dim;
  }
  a.scale = n->fparams[0];
  a.causal = (int)p[0];
  a.causal_offset = 0;
  kiln_attention_f32(&a, pool);
}

/* CONV2D: x (N, C, H, W), w (O, C / groups, kh, kw) -> y (N, O, Ho, Wo). */
static void run_conv2d(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                       kiln_pool_t* pool) {
  const kiln_value_t *x = VAL(0), *y = out_value(g, n);
  kiln_conv2d_f32_args_t a;
  kiln_hal_cpu_conv2d_args(g, n, bufs, &a);
  a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
  a.ho = y->shape[2], a.wo = y->shape[3];
  kiln_conv2d_f32(&a, pool);
}

/* MAX_POOL2D / AVG_POOL2D: x (N, C, H, W) -> y (N, C, Ho, Wo). */
static void run_pool2d(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs,
                       kiln_pool_t* pool) {
  const kiln_value_t *x = VAL(0), *y = out_value(g, n);
  const int64_t* p = n->params;
  kiln_pool2d_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = x->shape[0], a.c = x->shape[1], a.h = x->shape[2], a.w = x->shape[3];
  a.ho = y->shape[2], a.wo = y->shape[3];
  a.kh = p[0], a.kw = p[1], a.sh = p[2], a.sw = p[3], a.ph = p[4], a.pw = p[5];
  a.dh = p[6], a.dw = p[7];
  a.count_include_pad = (int)p[9];
  a.divisor_override = p[10];
  a.x = BUF(0);
  a.y = bufs[n->outputs[0]];
  if (n->op == KILN_OP_MAX_POOL2D)
    kiln_max_pool2d_f32(&a, pool);
  else
    kiln_avg_pool2d_f32(&a, pool);
}

kiln_status_t kiln_hal_cpu_run_node(const kiln_graph_t* g, const kiln_node_t* n,
                                    void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t* y = out_value(g, n);
  void* out = bufs[n->outputs[0]];
  size_t numel = (size_t)kiln_value_numel(y);
  kiln_op_t op = n->op;
  kiln_nd_t nd;
  if (KILN_OP_IS_BINARY(op)) {
    nd_for(g, n, 2, &nd);
    kiln_binary((kiln_binary_t)(op - KILN_OP_ADD), VAL(0)->dtype, &nd, out, BUF(0), BUF(1), pool);
    return kiln_ok();
  }
  if (KILN_OP_IS_UNARY_MATH(op)) {
    if (y->dtype == KILN_F32)
      kiln_unary_f32((kiln_unary_t)(op - KILN_OP_NEG), numel, BUF(0), out, pool);
    else
      kiln_unary_int(op == KILN_OP_NEG ? 0 : op == KILN_OP_ABS ? 1 : 2, y->dtype, numel, BUF(0),
                     out);
    return kiln_ok();
  }
  if (KILN_OP_IS_UNARY_EXT(op) || KILN_OP_IS_BINARY_EXT(op))
    return kiln_hal_cpu_run_math(g, n, bufs, pool);
  if (KILN_OP_IS_REDUCE(op)) {
    const kiln_value_t* x = VAL(0);
    kiln_reduce((kiln_reduce_t)(op - KILN_OP_SUM), x->dtype, x->rank, x->shape,
                (uint32_t)n->params[0], BUF(0), out, pool);
    return kiln_ok();
  }
  switch (op) {
    case KILN_OP_RESHAPE:
      /* An alias: the plan gave y x's bytes. If it could not (y is bound to
       * an output buffer), copy. */
    {
      const void* x = bufs[n->inputs[0]];
      if (out != x) memcpy(out, x, kiln_value_dense_bytes(y));
      return kiln_ok();
    }
    case KILN_OP_STRIDED_COPY: {
      memset(&nd, 0, sizeof(nd));
      nd.rank = (int32_t)n->params[0];
      memcpy(nd.shape, n->params + 1, (size_t)nd.rank * sizeof(int64_t));
      kiln_nd_set_dense_output(&nd);
      memcpy(nd.strides[1], n->params + 9, (size_t)nd.rank * sizeof(int64_t));
      const char* x = (const char*)BUF(0) + n->params[17] * (int64_t)kiln_dtype_size(y->dtype);
      kiln_strided_copy(y->dtype, &nd, out, x, pool);
      return kiln_ok();
    }
    case KILN_OP_CAT:
      run_cat(g, n, bufs, pool);
      return kiln_ok();
    case KILN_OP_GATHER: {
      const kiln_value_t *t = VAL(0), *idx = VAL(1);
      int32_t axis = (int32_t)n->params[0];
      int64_t bad = t->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || t->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4
          ? kiln_gemm_quant_gather(t->data, BUF(1), idx->dtype == KILN_I64, kiln_value_numel(idx), out)
          : kiln_gather(kiln_dtype_size(t->dtype), BUF(0), prod(t->shape, 0, axis),
                                t->shape[axis], prod(t->shape, axis + 1, t->rank), BUF(1),
                                idx->dtype, kiln_value_numel(idx), out, pool);
      if (bad)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "%s: %lld indices are out of range for a dimension of size %lld",
                                n->origin ? n->origin : "gather", (long long)bad,
                                (long long)t->shape[axis]);
      return kiln_ok();
    }
    case KILN_OP_GATHER_ELEMENTS: {
      const kiln_value_t *x = VAL(0), *idx = VAL(1);
      int64_t bad = kiln_gather_elements(kiln_dtype_size(x->dtype), BUF(0), x->rank, x->shape,
                                         (int32_t)n->params[0], BUF(1), idx->dtype, idx->shape,
                                         out);
      if (bad)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "%s: %lld indices are out of range for a dimension of size %lld",
                                n->origin ? n->origin : "gather", (long long)bad,
                                (long long)x->shape[n->params[0]]);
      return kiln_ok();
    }
    case KILN_OP_WHERE:
      nd_for(g, n, 3, &nd);
      kiln_where(y->dtype, &nd, out, BUF(0), BUF(1), BUF(2), pool);
      return kiln_ok();
    case KILN_OP_CAST:
      kiln_cast_parallel(VAL(0)->dtype, y->dtype, (size_t)numel, BUF(0), out, pool);
      return kiln_ok();
    case KILN_OP_LOGICAL_NOT:
      kiln_logical_not(numel, BUF(0), out);
      return kiln_ok();
    case KILN_OP_ARGMAX:
      kiln_argmax(VAL(0)->dtype, VAL(0)->rank, VAL(0)->shape, (int32_t)n->params[0], BUF(0), out);
      return kiln_ok();
    case KILN_OP_SOFTMAX:
    case KILN_OP_LOG_SOFTMAX: {
      const kiln_value_t* x = VAL(0);
      int32_t axis = (int32_t)n->params[0];
      int64_t len = x->rank ? x->shape[axis] : 1;
      int64_t inner = x->rank ? prod(x->shape, axis + 1, x->rank) : 1;
      if (inner == 1) {
        kiln_softmax_f32((size_t)(numel / (len ? len : 1)), (size_t)len, BUF(0), out,
                         op == KILN_OP_LOG_SOFTMAX, pool);
      } else {
        kiln_softmax_strided_f32(prod(x->shape, 0, axis), len, inner, BUF(0), out,
                                 op == KILN_OP_LOG_SOFTMAX);
      }
      if (n->params[1])
        kiln_softmax_zero_masked_f32((size_t)prod(x->shape, 0, axis), (size_t)len, (size_t)inner,
                                     BUF(0), out);
      return kiln_ok();
    }
    case KILN_OP_LAYER_NORM:
    case KILN_OP_RMS_NORM: {
      const kiln_value_t* x = VAL(0);
      int64_t cols = prod(x->shape, x->rank - (int32_t)n->params[0], x->rank);
      size_t rows = cols ? numel / (size_t)cols : 0;
      const float* gamma = n->n_inputs > 1 ? BUF(1) : NULL;
      if (op == KILN_OP_LAYER_NORM)
        kiln_layer_norm_f32(rows, (size_t)cols, BUF(0), gamma, n->n_inputs > 2 ? BUF(2) : NULL,
                            n->fparams[0], out, pool);
      else
        kiln_rms_norm_f32(rows, (size_t)cols, BUF(0), gamma, n->fparams[0], out, pool);
      return kiln_ok();
    }
    case KILN_OP_MATMUL:
      run_matmul(g, n, bufs, pool);
      return kiln_ok();
    case KILN_OP_LINEAR:
      run_linear(g, n, bufs, pool);
      return kiln_ok();
    case KILN_OP_SDPA:
      run_sdpa(g, n, bufs, pool);
      return kiln_ok();
    case KILN_OP_LAYER_NORM_BACKWARD: {
      const kiln_value_t* x = VAL(1);
      int64_t cols = prod(x->shape, x->rank - (int32_t)n->params[0], x->rank);
      size_t rows = cols ? numel / (size_t)cols : 0;
      kiln_layer_norm_backward_f32(rows, (size_t)cols, BUF(0), BUF(1), BUF(2), BUF(3),
                                   n->n_inputs > 4 ? BUF(4) : NULL, out, pool);
      return kiln_ok();
    }
    case KILN_OP_GELU_BACKWARD:
      kiln_gelu_backward_f32((int)n->params[0], numel, BUF(0), BUF(1), out, pool);
      return kiln_ok();
    case KILN_OP_IOTA: {
      /* The shape rule bounds |start| + (len - 1) |step| by 2^61: exact
       * in int64 (float32 rounds as torch.arange's float path does for
       * integral steps). */
      const int64_t len = n->params[0], start = n->params[1], step = n->params[2];
      for (int64_t i = 0; i < len; ++i) {
        int64_t v = start + i * step;
        if (y->dtype == KILN_I64) ((int64_t*)out)[i] = v;
        else if (y->dtype == KILN_I32) ((int32_t*)out)[i] = (int32_t)v;
        else ((float*)out)[i] = (float)v;
      }
      return kiln_ok();
    }
    case KILN_OP_GROUPED_MM: {
      const kiln_value_t *x = VAL(0), *w = VAL(1), *offs = VAL(2);
      kiln_gemm_grouped_f32_args_t a = {x->shape[0], x->shape[1], y->shape[1], w->shape[0],
                                        BUF(0), BUF(1), n->params[0] == 1, BUF(2),
                                        offs->dtype == KILN_I64, out};
      kiln_gemm_grouped_f32(&a, pool);
      return kiln_ok();
    }
    case KILN_OP_FMA_SCALAR:
      kiln_fma_scalar_f32(numel, BUF(0), n->fparams[0], n->fparams[1], out, pool);
      return kiln_ok();
    case KILN_OP_CONV2D:
      run_conv2d(g, n, bufs, pool);
      return kiln_ok();
    case KILN_OP_MAX_POOL2D:
    case KILN_OP_AVG_POOL2D:
      run_pool2d(g, n, bufs, pool);
      return kiln_ok();
    case KILN_OP_CONV2D_GRAD_INPUT:
    case KILN_OP_CONV2D_GRAD_WEIGHT:
    case KILN_OP_MAX_POOL2D_INDICES:
    case KILN_OP_MAX_POOL2D_GRAD:
    case KILN_OP_AVG_POOL2D_GRAD:
    case KILN_OP_ADAPTIVE_AVG_POOL2D:
    case KILN_OP_ADAPTIVE_AVG_POOL2D_GRAD:
    case KILN_OP_UPSAMPLE_BILINEAR2D:
    case KILN_OP_CONV2D_NHWC:
    case KILN_OP_MAX_POOL2D_NHWC:
      return kiln_hal_cpu_run_nn(g, n, bufs, pool);
    case KILN_OP_PAD:
    case KILN_OP_STRIDED_SCATTER:
    case KILN_OP_SCATTER:
    case KILN_OP_SCAN:
    case KILN_OP_ARGSORT:
      return kiln_hal_cpu_run_movement(g, n, bufs, pool);
    case KILN_OP_GRID_SAMPLER_2D:
    case KILN_OP_COL2IM:
    case KILN_OP_EMBEDDING_BAG:
      return kiln_hal_cpu_run_sample(g, n, bufs, pool);
    case KILN_OP_ELTWISE_FUSED:
      return kiln_hal_cpu_run_fused(g, n, bufs, pool);
    default:
      return kiln_status_make(KILN_INTERNAL, "the CPU target has no kernel for %s",
                              kiln_op_name(op));
  }
}
