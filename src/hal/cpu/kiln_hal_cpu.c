/* The CPU target's kernel entries for the core ops: each maps a node to its
 * kernel, working out the geometry (broadcast strides, row/column splits,
 * GEMM strides) from the values' shapes once, in its prepare step, so that
 * a run only binds buffers; beside each fast run, its reference run (the
 * scalar reference kernel from the same prepared arguments) where the fast
 * kernel has one. Kernels never see the graph; src/hal is the only place
 * that knows both. The other entries live beside this file, by kind
 * (kiln_hal_cpu_nn.c, _movement.c, _sample.c, _math.c, _fused.c); the table
 * of every entry is at the end. */
#include <math.h>
#include <string.h>

#include "hal/cpu/kiln_hal_cpu.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_grouped.h"
#include "kernels/gemm/kiln_solve_triangular.h"
#include "kernels/nn/kiln_nn.h"
#include "kernels/nn/kiln_softmax_safe.h"

/* Ops map onto the kernels' own enums by subtraction: each IR range is in
 * its kernel enum's order (kiln_ops.h), checked here. */
_Static_assert(KILN_OP_LOGICAL_OR - KILN_OP_ADD == KILN_BINARY_LOGICAL_OR - KILN_BINARY_ADD &&
                   KILN_OP_EQ - KILN_OP_ADD == KILN_BINARY_EQ - KILN_BINARY_ADD &&
                   KILN_BINARY_ADD == 0 && KILN_OP_LOGICAL_OR - KILN_OP_ADD + 1 == KILN_BINARY_COUNT,
               "ADD..LOGICAL_OR in kiln_binary_t order");
_Static_assert(KILN_OP_COS - KILN_OP_NEG + 1 == KILN_UNARY_COUNT && KILN_UNARY_NEG == 0 &&
                   KILN_OP_GELU - KILN_OP_NEG == KILN_UNARY_GELU,
               "NEG..COS in kiln_unary_t order");
_Static_assert(KILN_OP_ANY - KILN_OP_SUM + 1 == KILN_REDUCE_COUNT && KILN_REDUCE_SUM == 0 &&
                   KILN_OP_MAX - KILN_OP_SUM == KILN_REDUCE_MAX,
               "SUM..ANY in kiln_reduce_t order");

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)
#define OUT (bufs[n->outputs[0]])

static const kiln_value_t* out_value(const kiln_graph_t* g, const kiln_node_t* n) {
  return &g->values[n->outputs[0]];
}

static int64_t prod(const int64_t* shape, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t d = from; d < to; ++d) p *= shape[d];
  return p;
}

void kiln_hal_cpu_nd_for(const kiln_graph_t* g, const kiln_node_t* n, int n_in, kiln_nd_t* nd) {
  const kiln_value_t* y = out_value(g, n);
  memset(nd, 0, sizeof(*nd));
  nd->rank = y->rank;
  memcpy(nd->shape, y->shape, sizeof(y->shape));
  kiln_nd_set_dense_output(nd);
  for (int i = 0; i < n_in; ++i) kiln_nd_set_broadcast(nd, i + 1, VAL(i)->rank, VAL(i)->shape);
}

/* ---- elementwise ---- */

static kiln_status_t prepare_nd2(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  kiln_hal_cpu_nd_for(g, n, 2, prep);
  return kiln_ok();
}

static kiln_status_t prepare_nd3(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  kiln_hal_cpu_nd_for(g, n, 3, prep);
  return kiln_ok();
}

static kiln_status_t run_binary(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  kiln_binary((kiln_binary_t)(n->op - KILN_OP_ADD), VAL(0)->dtype, prep, OUT, BUF(0), BUF(1),
              pool);
  return kiln_ok();
}

static kiln_status_t run_unary(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                               void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  const kiln_value_t* y = out_value(g, n);
  size_t numel = (size_t)kiln_value_numel(y);
  if (y->dtype == KILN_F32)
    kiln_unary_f32((kiln_unary_t)(n->op - KILN_OP_NEG), numel, BUF(0), OUT, pool);
  else
    kiln_unary_int(n->op == KILN_OP_NEG ? 0 : n->op == KILN_OP_ABS ? 1 : 2, y->dtype, numel,
                   BUF(0), OUT);
  return kiln_ok();
}

static kiln_status_t run_where(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                               void* const* bufs, kiln_pool_t* pool) {
  kiln_where(out_value(g, n)->dtype, prep, OUT, BUF(0), BUF(1), BUF(2), pool);
  return kiln_ok();
}

static kiln_status_t run_cast(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                              void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  const kiln_value_t* y = out_value(g, n);
  kiln_cast_parallel(VAL(0)->dtype, y->dtype, (size_t)kiln_value_numel(y), BUF(0), OUT, pool);
  return kiln_ok();
}

static kiln_status_t run_logical_not(const kiln_graph_t* g, const kiln_node_t* n,
                                     const void* prep, void* const* bufs, kiln_pool_t* pool) {
  (void)prep, (void)pool;
  kiln_logical_not((size_t)kiln_value_numel(out_value(g, n)), BUF(0), OUT);
  return kiln_ok();
}

static kiln_status_t run_fma_scalar(const kiln_graph_t* g, const kiln_node_t* n,
                                    const void* prep, void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  kiln_fma_scalar_f32((size_t)kiln_value_numel(out_value(g, n)), BUF(0),
                      n->fparams[KILN_FP(FMA, SCALE)], n->fparams[KILN_FP(FMA, SHIFT)], OUT, pool);
  return kiln_ok();
}

static kiln_status_t run_gelu_backward(const kiln_graph_t* g, const kiln_node_t* n,
                                       const void* prep, void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  kiln_gelu_backward_f32((int)n->params[KILN_P(GELU_BACKWARD, APPROXIMATE)],
                         (size_t)kiln_value_numel(out_value(g, n)), BUF(0), BUF(1), OUT, pool);
  return kiln_ok();
}

/* ---- data movement ---- */

static kiln_status_t run_reshape(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                 void* const* bufs, kiln_pool_t* pool) {
  (void)prep, (void)pool;
  /* An alias: the plan gave y x's bytes. If it could not (y is bound to an
   * output buffer), copy. */
  const void* x = bufs[n->inputs[0]];
  if (OUT != x) memcpy(OUT, x, kiln_value_dense_bytes(out_value(g, n)));
  return kiln_ok();
}

static kiln_status_t prepare_strided_copy(const kiln_graph_t* g, const kiln_node_t* n,
                                          void* prep) {
  (void)g;
  kiln_nd_t* nd = prep;
  memset(nd, 0, sizeof(*nd));
  nd->rank = (int32_t)n->params[KILN_P(VIEW, RANK)];
  memcpy(nd->shape, n->params + KILN_P(VIEW, DIMS), (size_t)nd->rank * sizeof(int64_t));
  kiln_nd_set_dense_output(nd);
  memcpy(nd->strides[1], n->params + KILN_P(VIEW, STRIDES), (size_t)nd->rank * sizeof(int64_t));
  return kiln_ok();
}

static kiln_status_t run_strided_copy(const kiln_graph_t* g, const kiln_node_t* n,
                                      const void* prep, void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t* y = out_value(g, n);
  const char* x = (const char*)BUF(0) + n->params[KILN_P(VIEW, OFFSET)] *
                                            (int64_t)kiln_dtype_size(y->dtype);
  kiln_strided_copy(y->dtype, prep, OUT, x, pool);
  return kiln_ok();
}

static kiln_status_t run_cat(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                             void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  const kiln_value_t* y = out_value(g, n);
  int32_t axis = (int32_t)n->params[KILN_P(AXIS, AXIS)];
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
    kiln_strided_copy(y->dtype, &nd, (char*)OUT + (size_t)(at * inner) * elem, BUF(i), pool);
    at += x->shape[axis];
  }
  return kiln_ok();
}

static kiln_status_t run_gather(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  const kiln_value_t *t = VAL(0), *idx = VAL(1);
  int32_t axis = (int32_t)n->params[KILN_P(AXIS, AXIS)];
  /* A quantized embedding table (axis 0, checked by supports): the rows
   * gathered are dequantized by the scalar rule (plain C on both targets). */
  int quant = t->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || t->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4;
  int64_t bad = quant ? kiln_gemm_quant_gather(BUF(0), BUF(1), idx->dtype == KILN_I64,
                                               kiln_value_numel(idx), OUT)
                      : kiln_gather(kiln_dtype_size(t->dtype), BUF(0), prod(t->shape, 0, axis),
                                    t->shape[axis], prod(t->shape, axis + 1, t->rank), BUF(1),
                                    idx->dtype, kiln_value_numel(idx), OUT, pool);
  if (bad)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "%s: %lld indices are out of range for a dimension of size %lld",
                            n->origin ? n->origin : "gather", (long long)bad,
                            (long long)t->shape[axis]);
  return kiln_ok();
}

static kiln_status_t run_gather_elements(const kiln_graph_t* g, const kiln_node_t* n,
                                         const void* prep, void* const* bufs, kiln_pool_t* pool) {
  (void)prep, (void)pool;
  const kiln_value_t *x = VAL(0), *idx = VAL(1);
  int32_t axis = (int32_t)n->params[KILN_P(AXIS, AXIS)];
  int64_t bad = kiln_gather_elements(kiln_dtype_size(x->dtype), BUF(0), x->rank, x->shape, axis,
                                     BUF(1), idx->dtype, idx->shape, OUT);
  if (bad)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "%s: %lld indices are out of range for a dimension of size %lld",
                            n->origin ? n->origin : "gather", (long long)bad,
                            (long long)x->shape[axis]);
  return kiln_ok();
}

static kiln_status_t run_iota(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                              void* const* bufs, kiln_pool_t* pool) {
  (void)prep, (void)pool;
  /* The shape rule bounds |start| + (len - 1) |step| by 2^61: exact in
   * int64 (float32 rounds as torch.arange's float path does for integral
   * steps). */
  const kiln_value_t* y = out_value(g, n);
  const int64_t len = n->params[KILN_P(IOTA, LENGTH)], start = n->params[KILN_P(IOTA, START)];
  const int64_t step = n->params[KILN_P(IOTA, STEP)];
  void* out = OUT;
  for (int64_t i = 0; i < len; ++i) {
    int64_t v = start + i * step;
    if (y->dtype == KILN_I64) ((int64_t*)out)[i] = v;
    else if (y->dtype == KILN_I32) ((int32_t*)out)[i] = (int32_t)v;
    else ((float*)out)[i] = (float)v;
  }
  return kiln_ok();
}

/* ---- reductions and normalisation ---- */

static kiln_status_t run_reduce(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  const kiln_value_t* x = VAL(0);
  kiln_reduce((kiln_reduce_t)(n->op - KILN_OP_SUM), x->dtype, x->rank, x->shape,
              (uint32_t)n->params[KILN_P(REDUCE, AXES)], BUF(0), OUT, pool);
  return kiln_ok();
}

static kiln_status_t run_argmax(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  (void)prep, (void)pool;
  const kiln_value_t* x = VAL(0);
  kiln_argmax(x->dtype, x->rank, x->shape, (int32_t)n->params[KILN_P(ARGMAX, AXIS)], BUF(0), OUT);
  return kiln_ok();
}

static kiln_status_t run_softmax(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                 void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  int64_t outer, len, inner;
  kiln_hal_cpu_axis_split(VAL(0), (int32_t)n->params[KILN_P(SOFTMAX, AXIS)], &outer, &len, &inner);
  int log = n->op == KILN_OP_LOG_SOFTMAX;
  if (inner == 1)
    kiln_softmax_f32((size_t)(len ? outer : 0), (size_t)len, BUF(0), OUT, log, pool);
  else
    kiln_softmax_strided_f32(outer, len, inner, BUF(0), OUT, log, pool);
  if (n->params[KILN_P(SOFTMAX, SAFE)])
    kiln_softmax_zero_masked_f32((size_t)outer, (size_t)len, (size_t)inner, BUF(0), OUT);
  return kiln_ok();
}

void kiln_hal_cpu_axis_split(const kiln_value_t* x, int32_t axis, int64_t* outer, int64_t* len,
                             int64_t* inner) {
  *outer = x->rank ? prod(x->shape, 0, axis) : 1;
  *len = x->rank ? x->shape[axis] : 1;
  *inner = x->rank ? prod(x->shape, axis + 1, x->rank) : 1;
}

void kiln_hal_cpu_norm_split(const kiln_value_t* x, int64_t dims, size_t* rows, size_t* cols) {
  int64_t c = prod(x->shape, x->rank - (int32_t)dims, x->rank);
  *cols = (size_t)c;
  *rows = c ? (size_t)kiln_value_numel(x) / (size_t)c : 0;
}

static kiln_status_t run_norm(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                              void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  size_t rows, cols;
  kiln_hal_cpu_norm_split(VAL(0), n->params[KILN_P(NORM, DIMS)], &rows, &cols);
  const float* gamma = n->n_inputs > 1 ? BUF(1) : NULL;
  float eps = n->fparams[KILN_FP(NORM, EPS)];
  if (n->op == KILN_OP_LAYER_NORM)
    kiln_layer_norm_f32(rows, cols, BUF(0), gamma, n->n_inputs > 2 ? BUF(2) : NULL, eps, OUT, pool);
  else
    kiln_rms_norm_f32(rows, cols, BUF(0), gamma, eps, OUT, pool);
  return kiln_ok();
}

static kiln_status_t run_layer_norm_backward(const kiln_graph_t* g, const kiln_node_t* n,
                                             const void* prep, void* const* bufs,
                                             kiln_pool_t* pool) {
  (void)prep;
  size_t rows, cols;
  kiln_hal_cpu_norm_split(VAL(1), n->params[KILN_P(NORM, DIMS)], &rows, &cols);
  kiln_layer_norm_backward_f32(rows, cols, BUF(0), BUF(1), BUF(2), BUF(3),
                               n->n_inputs > 4 ? BUF(4) : NULL, OUT, pool);
  return kiln_ok();
}

/* ---- GEMM and attention ---- */

/* Batched matmul with NumPy batch broadcasting: batch dims are folded into
 * one strided GEMM batch where the strides allow, else looped over the
 * outer dims (in matrices). */
typedef struct {
  kiln_gemm_f32_args_t args; /* without pointers */
  int a_bf16;                /* a is a bf16 model's operand: widened as it is packed */
  int b_bf16;                /* so is b */
  int32_t n_outer;
  int64_t outer_shape[KILN_MAX_RANK], outer_sa[KILN_MAX_RANK], outer_sb[KILN_MAX_RANK],
      outer_sy[KILN_MAX_RANK];
} kiln_cpu_matmul_t;

static kiln_status_t prepare_matmul(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  kiln_cpu_matmul_t* mm = prep;
  const kiln_value_t *a = VAL(0), *b = VAL(1), *y = out_value(g, n);
  const int64_t flags = n->params[KILN_P(MATMUL, FLAGS)];
  int32_t br = y->rank - 2;
  int ta = (flags & KILN_MATMUL_TRANSPOSE_A) != 0;
  int tb = (flags & KILN_MATMUL_TRANSPOSE_B) != 0;
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
  memset(mm, 0, sizeof(*mm));
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
      mm->outer_shape[mm->n_outer] = batch;
      mm->outer_sy[mm->n_outer] = sy * m * nn;
      mm->outer_sa[mm->n_outer] = sa * m * k;
      mm->outer_sb[mm->n_outer] = sb * k * nn;
      mm->n_outer++;
    }
    batch = nd.shape[d];
    sy = nd.strides[0][d];
    sa = nd.strides[1][d];
    sb = nd.strides[2][d];
  }
  kiln_gemm_f32_args_t* args = &mm->args;
  args->batch = batch;
  args->m = m;
  args->n = nn;
  args->k = k;
  args->a_batch_stride = sa * m * k;
  args->a_row_stride = ta ? 1 : k; /* stored (K, M) when transposed */
  args->a_col_stride = ta ? m : 1;
  args->b_batch_stride = sb * k * nn;
  args->b_row_stride = tb ? 1 : nn; /* stored (N, K) when transposed */
  args->b_col_stride = tb ? k : 1;
  args->c_batch_stride = sy * m * nn;
  args->c_row_stride = nn;
  args->act = KILN_ACT_NONE;
  mm->a_bf16 = a->dtype == KILN_BF16;
  mm->b_bf16 = b->dtype == KILN_BF16;
  args->a_round_bf16 = (flags & KILN_MATMUL_ROUND_A_BF16) != 0;
  args->b_round_bf16 = (flags & KILN_MATMUL_ROUND_B_BF16) != 0;
  args->c_round_bf16 = (flags & KILN_MATMUL_ROUND_Y_BF16) != 0;
  return kiln_ok();
}

kiln_status_t kiln_hal_cpu_matmul_with(const kiln_node_t* n, const void* prep, void* const* bufs,
                                       kiln_pool_t* pool, kiln_hal_gemm_fn gemm) {
  const kiln_cpu_matmul_t* mm = prep;
  int64_t n_loops = prod(mm->outer_shape, 0, mm->n_outer);
  for (int64_t l = 0; l < n_loops; ++l) {
    int64_t rem = l, oy = 0, oa = 0, ob = 0;
    for (int32_t d = mm->n_outer - 1; d >= 0; --d) {
      int64_t i = rem % mm->outer_shape[d];
      rem /= mm->outer_shape[d];
      oy += i * mm->outer_sy[d];
      oa += i * mm->outer_sa[d];
      ob += i * mm->outer_sb[d];
    }
    kiln_gemm_f32_args_t args = mm->args;
    if (mm->a_bf16)
      args.a_bf16 = (const uint16_t*)BUF(0) + oa;
    else
      args.a = (const float*)BUF(0) + oa;
    if (mm->b_bf16)
      args.b_bf16 = (const uint16_t*)BUF(1) + ob;
    else
      args.b = (const float*)BUF(1) + ob;
    args.c = (float*)OUT + oy;
    gemm(&args, pool);
  }
  return kiln_ok();
}

static kiln_status_t run_matmul(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  (void)g;
  return kiln_hal_cpu_matmul_with(n, prep, bufs, pool, kiln_gemm_f32);
}

static kiln_status_t prepare_linear(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  const kiln_value_t *x = VAL(0), *w = VAL(1);
  int wt = n->params[KILN_P(LINEAR, W_TRANSPOSED)] != 0; /* a runtime weight stored (N, K) */
  int64_t k = w->shape[wt], nn = w->shape[1 - wt];
  kiln_gemm_f32_args_t* args = prep;
  memset(args, 0, sizeof(*args));
  args->batch = 1;
  args->m = k ? kiln_value_numel(x) / k : prod(x->shape, 0, x->rank - 1);
  args->n = nn;
  args->k = k;
  args->a_row_stride = k;
  args->a_col_stride = 1;
  /* A constant's packed bytes never move: bound here, once. */
  if (w->layout == KILN_LAYOUT_GEMM_PACKED_B) {
    args->b_packed = w->data;
  } else if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16) {
    args->b_packed_bf16 = w->data;
  } else if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI) {
    args->b_packed_bf16_vnni = w->data; /* bf16 compute: the layout says so */
  } else if (w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q8 || w->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4) {
    args->b_packed_q = w->data;
  } else if (w->layout == KILN_LAYOUT_TRANSPOSED_2D || w->layout == KILN_LAYOUT_WIDENED_BF16_T ||
             wt) { /* (N, K) rows: float32, or a bf16 model's own bf16 rows (bound below) */
    args->b_row_stride = 1;
    args->b_col_stride = k;
  } else {
    args->b_row_stride = nn;
    args->b_col_stride = 1;
  }
  args->c_row_stride = nn;
  if (n->n_inputs > 3 && n->inputs[3] >= 0) args->r_row_stride = nn;
  args->act = (kiln_activation_t)n->params[KILN_P(LINEAR, ACT)];
  args->a_round_bf16 = n->params[KILN_P(LINEAR, ROUND_A)] != 0;
  args->b_round_bf16 = n->params[KILN_P(LINEAR, ROUND_B)] != 0;
  args->c_round_bf16 = n->params[KILN_P(LINEAR, ROUND_Y)] != 0;
  return kiln_ok();
}

void kiln_hal_cpu_linear_bind(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                              void* const* bufs, kiln_gemm_f32_args_t* args) {
  *args = *(const kiln_gemm_f32_args_t*)prep;
  const kiln_value_t* w = VAL(1);
  if (VAL(0)->dtype == KILN_BF16) /* a bf16 model's x: widened as it is packed */
    args->a_bf16 = BUF(0);
  else
    args->a = BUF(0);
  if (w->dtype == KILN_BF16) /* a graph value (the shape rule says so): widened as packed */
    args->b_bf16 = BUF(1);
  else if (w->layout == KILN_LAYOUT_WIDENED_BF16_T) /* torch's bf16 rows, read in place */
    args->b_bf16 = w->data, args->b_bf16_weight = 1;
  else if (!args->b_packed && !args->b_packed_bf16 && !args->b_packed_bf16_vnni && !args->b_packed_q)
    args->b = w->kind == KILN_VALUE_CONSTANT ? w->data : BUF(1);
  args->c = OUT;
  args->bias = n->n_inputs > 2 ? BUF(2) : NULL;
  args->residual = n->n_inputs > 3 ? BUF(3) : NULL;
}

static kiln_status_t run_linear(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  kiln_gemm_f32_args_t args;
  kiln_hal_cpu_linear_bind(g, n, prep, bufs, &args);
  kiln_gemm_f32(&args, pool);
  return kiln_ok();
}

/* SOLVE_TRIANGULAR: the pairs' sizes from b (x's shape), the flags. */
static kiln_status_t prepare_solve_triangular(const kiln_graph_t* g, const kiln_node_t* n,
                                              void* prep) {
  const kiln_value_t* y = out_value(g, n);
  kiln_solve_triangular_f32_args_t* a = prep;
  memset(a, 0, sizeof(*a));
  a->n = y->shape[y->rank - 2];
  a->k = y->shape[y->rank - 1];
  a->batch = 1;
  for (int d = 0; d < y->rank - 2; ++d) a->batch *= y->shape[d];
  a->upper = n->params[KILN_P(SOLVE_TRIANGULAR, UPPER)] == 1;
  a->unit = n->params[KILN_P(SOLVE_TRIANGULAR, UNIT)] == 1;
  return kiln_ok();
}

static kiln_solve_triangular_f32_args_t bind_solve_triangular(const kiln_node_t* n, const void* prep,
                                                              void* const* bufs) {
  kiln_solve_triangular_f32_args_t a = *(const kiln_solve_triangular_f32_args_t*)prep;
  a.a = BUF(0);
  a.b = BUF(1);
  a.x = OUT;
  return a;
}

static kiln_status_t run_solve_triangular(const kiln_graph_t* g, const kiln_node_t* n,
                                          const void* prep, void* const* bufs, kiln_pool_t* pool) {
  (void)g;
  const kiln_solve_triangular_f32_args_t a = bind_solve_triangular(n, prep, bufs);
  kiln_solve_triangular_f32(&a, pool);
  return kiln_ok();
}

/* GROUPED_MM: the grouped GEMM's sizes; offs's values are read per run. */
static kiln_status_t prepare_grouped_mm(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  const kiln_value_t *x = VAL(0), *w = VAL(1), *offs = VAL(2), *y = out_value(g, n);
  kiln_gemm_grouped_f32_args_t* a = prep;
  memset(a, 0, sizeof(*a));
  a->s = x->shape[0];
  a->k = x->shape[1];
  a->n = y->shape[1];
  a->experts = w->shape[0];
  a->w_transposed = n->params[KILN_P(GROUPED_MM, W_TRANSPOSED)] == 1;
  a->offs_i64 = offs->dtype == KILN_I64;
  return kiln_ok();
}

static void bind_grouped_mm(const kiln_node_t* n, const void* prep, void* const* bufs,
                            kiln_gemm_grouped_f32_args_t* a) {
  *a = *(const kiln_gemm_grouped_f32_args_t*)prep;
  a->x = BUF(0);
  a->w = BUF(1);
  a->offs = BUF(2);
  a->y = OUT;
}

static kiln_status_t run_grouped_mm(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                    void* const* bufs, kiln_pool_t* pool) {
  (void)g;
  kiln_gemm_grouped_f32_args_t a;
  bind_grouped_mm(n, prep, bufs, &a);
  kiln_gemm_grouped_f32(&a, pool);
  return kiln_ok();
}

static kiln_status_t prepare_sdpa(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  const int64_t* p = n->params;
  const int64_t flags = p[KILN_P(SDPA, FLAGS)];
  kiln_attention_args_t* a = prep;
  memset(a, 0, sizeof(*a));
  int64_t* strides[3] = {a->q_strides, a->k_strides, a->v_strides};
  if (flags & KILN_SDPA_VIEWS) {
    a->batch = p[KILN_P(SDPA, BATCH)], a->heads = p[KILN_P(SDPA, HEADS)];
    a->kv_heads = p[KILN_P(SDPA, KV_HEADS)], a->q_len = p[KILN_P(SDPA, Q_LEN)];
    a->kv_len = p[KILN_P(SDPA, KV_LEN)], a->head_dim = p[KILN_P(SDPA, HEAD_DIM)];
    a->v_head_dim = p[KILN_P(SDPA, V_HEAD_DIM)];
    const int strides_at[3] = {KILN_P(SDPA, Q_STRIDES), KILN_P(SDPA, K_STRIDES),
                               KILN_P(SDPA, V_STRIDES)};
    for (int i = 0; i < 3; ++i) memcpy(strides[i], p + strides_at[i], 4 * sizeof(int64_t));
  } else {
    const kiln_value_t *q = VAL(0), *k = VAL(1), *v = VAL(2);
    a->batch = q->shape[0], a->heads = q->shape[1], a->kv_heads = k->shape[1];
    a->q_len = q->shape[2], a->kv_len = k->shape[2], a->head_dim = q->shape[3];
    a->v_head_dim = v->shape[3];
    const kiln_value_t* vals[3] = {q, k, v};
    for (int i = 0; i < 3; ++i) {
      int64_t s = 1;
      for (int d = 3; d >= 0; --d) {
        strides[i][d] = s;
        s *= vals[i]->shape[d];
      }
    }
  }
  if (n->n_inputs > 3 && n->inputs[3] >= 0) {
    const kiln_value_t* m = VAL(3);
    kiln_nd_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.rank = 4;
    nd.shape[0] = a->batch, nd.shape[1] = a->heads, nd.shape[2] = a->q_len, nd.shape[3] = a->kv_len;
    kiln_nd_set_broadcast(&nd, 1, m->rank, m->shape);
    memcpy(a->mask_strides, nd.strides[1], sizeof(a->mask_strides));
  }
  if (flags & KILN_SDPA_OUT_BSHD) {
    a->out_strides[0] = a->q_len * a->heads * a->v_head_dim;
    a->out_strides[1] = a->v_head_dim;
    a->out_strides[2] = a->heads * a->v_head_dim;
  }
  /* torch's default, 1 / sqrt(D) in double, then float (sdp::calculate_scale). */
  a->scale = (flags & KILN_SDPA_SCALE_HEAD_DIM) ? (float)(1.0 / sqrt((double)a->head_dim))
                                                : n->fparams[KILN_FP(SDPA, SCALE)];
  a->causal = (int)p[KILN_P(SDPA, CAUSAL)];
  a->causal_offset = 0;
  a->bf16 = (flags & KILN_SDPA_BF16) != 0;
  a->every_key = (flags & KILN_SDPA_EVERY_KEY) != 0;
  return kiln_ok();
}

/* q, k, v from their buffers, at their views' offsets (KILN_SDPA_VIEWS). */
void kiln_hal_cpu_sdpa_bind(const kiln_node_t* n, void* const* bufs, kiln_attention_args_t* a) {
  const int64_t* p = n->params;
  int views = (p[KILN_P(SDPA, FLAGS)] & KILN_SDPA_VIEWS) != 0;
  a->q = (const float*)BUF(0) + (views ? p[KILN_P(SDPA, Q_OFFSET)] : 0);
  a->k = (const float*)BUF(1) + (views ? p[KILN_P(SDPA, K_OFFSET)] : 0);
  a->v = (const float*)BUF(2) + (views ? p[KILN_P(SDPA, V_OFFSET)] : 0);
  a->mask = n->n_inputs > 3 ? BUF(3) : NULL;
  a->out = OUT;
}

static kiln_status_t run_sdpa(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                              void* const* bufs, kiln_pool_t* pool) {
  (void)g;
  kiln_attention_args_t a = *(const kiln_attention_args_t*)prep;
  kiln_hal_cpu_sdpa_bind(n, bufs, &a);
  kiln_attention_f32(&a, pool);
  return kiln_ok();
}

/* ---- convolution and pooling ---- */

/* CONV2D: x (N, C, H, W), w (O, C / groups, kh, kw) -> y (N, O, Ho, Wo). */
static kiln_status_t prepare_conv2d(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  const kiln_value_t *x = VAL(0), *y = out_value(g, n);
  kiln_conv2d_f32_args_t* a = prep;
  kiln_hal_cpu_conv2d_args(g, n, NULL, a);
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->ho = y->shape[2], a->wo = y->shape[3];
  return kiln_ok();
}

void kiln_hal_cpu_conv2d_bind(const kiln_node_t* n, void* const* bufs, kiln_conv2d_f32_args_t* a) {
  a->x = BUF(0), a->weight = BUF(1);
  a->bias = n->n_inputs > 2 ? BUF(2) : NULL;
  a->residual = n->n_inputs > 3 ? BUF(3) : NULL;
  a->scale = n->n_inputs > 4 ? BUF(4) : NULL;
  a->y = OUT;
}

static kiln_status_t run_conv2d(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  (void)g;
  kiln_conv2d_f32_args_t a = *(const kiln_conv2d_f32_args_t*)prep;
  kiln_hal_cpu_conv2d_bind(n, bufs, &a);
  kiln_conv2d_f32(&a, pool);
  return kiln_ok();
}

/* MAX_POOL2D / AVG_POOL2D: x (N, C, H, W) -> y (N, C, Ho, Wo). */
static kiln_status_t prepare_pool2d(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  const kiln_value_t *x = VAL(0), *y = out_value(g, n);
  const int64_t* p = n->params;
  kiln_pool2d_f32_args_t* a = prep;
  memset(a, 0, sizeof(*a));
  a->n = x->shape[0], a->c = x->shape[1], a->h = x->shape[2], a->w = x->shape[3];
  a->ho = y->shape[2], a->wo = y->shape[3];
  a->kh = p[KILN_P(POOL2D, KERNEL_H)], a->kw = p[KILN_P(POOL2D, KERNEL_W)];
  a->sh = p[KILN_P(POOL2D, STRIDE_H)], a->sw = p[KILN_P(POOL2D, STRIDE_W)];
  a->ph = p[KILN_P(POOL2D, PAD_H)], a->pw = p[KILN_P(POOL2D, PAD_W)];
  a->dh = p[KILN_P(POOL2D, DILATION_H)], a->dw = p[KILN_P(POOL2D, DILATION_W)];
  a->count_include_pad = (int)p[KILN_P(POOL2D, COUNT_INCLUDE_PAD)];
  a->divisor_override = p[KILN_P(POOL2D, DIVISOR_OVERRIDE)];
  return kiln_ok();
}

static kiln_status_t run_pool2d(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                void* const* bufs, kiln_pool_t* pool) {
  (void)g;
  kiln_pool2d_f32_args_t a = *(const kiln_pool2d_f32_args_t*)prep;
  a.x = BUF(0);
  a.y = OUT;
  if (n->op == KILN_OP_MAX_POOL2D)
    kiln_max_pool2d_f32(&a, pool);
  else
    kiln_avg_pool2d_f32(&a, pool);
  return kiln_ok();
}

/* ---- the scalar references (the reference target's runs) ---- */

#define REF_RUN(e)                                                                        \
  static kiln_status_t ref_##e(const kiln_graph_t* g, const kiln_node_t* n, const void* prep, \
                               void* const* bufs, kiln_pool_t* pool)

REF_RUN(binary) {
  (void)pool;
  kiln_binary_reference((kiln_binary_t)(n->op - KILN_OP_ADD), VAL(0)->dtype, prep, OUT, BUF(0),
                        BUF(1));
  return kiln_ok();
}

REF_RUN(solve_triangular) {
  (void)g, (void)pool;
  const kiln_solve_triangular_f32_args_t a = bind_solve_triangular(n, prep, bufs);
  kiln_solve_triangular_f32_reference(&a);
  return kiln_ok();
}

REF_RUN(unary) {
  (void)prep, (void)pool;
  const kiln_value_t* y = &g->values[n->outputs[0]];
  size_t numel = (size_t)kiln_value_numel(y);
  if (y->dtype == KILN_F32)
    kiln_unary_f32_reference((kiln_unary_t)(n->op - KILN_OP_NEG), numel, BUF(0), OUT);
  else /* neg, abs, relu of integers: one plain loop */
    kiln_unary_int(n->op == KILN_OP_NEG ? 0 : n->op == KILN_OP_ABS ? 1 : 2, y->dtype, numel, BUF(0),
                   OUT);
  return kiln_ok();
}

REF_RUN(softmax) {
  int64_t outer, len, inner;
  kiln_hal_cpu_axis_split(VAL(0), (int32_t)n->params[KILN_P(SOFTMAX, AXIS)], &outer, &len, &inner);
  if (inner != 1) /* not the last axis: the CPU's plain strided loop */
    return run_softmax(g, n, prep, bufs, pool);
  kiln_softmax_f32_reference((size_t)(len ? outer : 0), (size_t)len, BUF(0), OUT,
                             n->op == KILN_OP_LOG_SOFTMAX);
  if (n->params[KILN_P(SOFTMAX, SAFE)])
    kiln_softmax_zero_masked_f32((size_t)outer, (size_t)len, 1, BUF(0), OUT);
  return kiln_ok();
}

REF_RUN(norm) {
  (void)prep, (void)pool;
  size_t rows, cols;
  kiln_hal_cpu_norm_split(VAL(0), n->params[KILN_P(NORM, DIMS)], &rows, &cols);
  const float* gamma = n->n_inputs > 1 ? BUF(1) : NULL;
  float eps = n->fparams[KILN_FP(NORM, EPS)];
  if (n->op == KILN_OP_LAYER_NORM)
    kiln_layer_norm_f32_reference(rows, cols, BUF(0), gamma, n->n_inputs > 2 ? BUF(2) : NULL, eps,
                                  OUT);
  else
    kiln_rms_norm_f32_reference(rows, cols, BUF(0), gamma, eps, OUT);
  return kiln_ok();
}

REF_RUN(layer_norm_backward) {
  (void)prep, (void)pool;
  size_t rows, cols;
  kiln_hal_cpu_norm_split(VAL(1), n->params[KILN_P(NORM, DIMS)], &rows, &cols);
  kiln_layer_norm_backward_f32_reference(rows, cols, BUF(0), BUF(1), BUF(2), BUF(3),
                                         n->n_inputs > 4 ? BUF(4) : NULL, OUT);
  return kiln_ok();
}

REF_RUN(gelu_backward) {
  (void)prep, (void)pool;
  kiln_gelu_backward_f32_reference((int)n->params[KILN_P(GELU_BACKWARD, APPROXIMATE)],
                                   (size_t)kiln_value_numel(&g->values[n->outputs[0]]), BUF(0),
                                   BUF(1), OUT);
  return kiln_ok();
}

static void ref_gemm(const kiln_gemm_f32_args_t* args, kiln_pool_t* pool) {
  (void)pool;
  kiln_gemm_f32_reference(args);
}

REF_RUN(matmul) {
  (void)g;
  return kiln_hal_cpu_matmul_with(n, prep, bufs, pool, ref_gemm);
}

REF_RUN(linear) {
  (void)pool;
  kiln_gemm_f32_args_t args;
  kiln_hal_cpu_linear_bind(g, n, prep, bufs, &args);
  kiln_gemm_f32_reference(&args);
  return kiln_ok();
}

REF_RUN(grouped_mm) {
  (void)g, (void)pool;
  kiln_gemm_grouped_f32_args_t a;
  bind_grouped_mm(n, prep, bufs, &a);
  kiln_gemm_grouped_f32_reference(&a);
  return kiln_ok();
}

REF_RUN(sdpa) {
  (void)g, (void)pool;
  kiln_attention_args_t a = *(const kiln_attention_args_t*)prep;
  kiln_hal_cpu_sdpa_bind(n, bufs, &a);
  kiln_attention_f32_reference(&a);
  return kiln_ok();
}

REF_RUN(conv2d) {
  (void)g, (void)pool;
  kiln_conv2d_f32_args_t a = *(const kiln_conv2d_f32_args_t*)prep;
  kiln_hal_cpu_conv2d_bind(n, bufs, &a);
  kiln_conv2d_f32_reference(&a);
  return kiln_ok();
}

REF_RUN(pool2d) {
  (void)g, (void)pool;
  kiln_pool2d_f32_args_t a = *(const kiln_pool2d_f32_args_t*)prep;
  a.x = BUF(0);
  a.y = OUT;
  if (n->op == KILN_OP_MAX_POOL2D)
    kiln_max_pool2d_f32_reference(&a);
  else
    kiln_avg_pool2d_f32_reference(&a);
  return kiln_ok();
}

/* ---- the table ---- */

#define ENTRY(e, prep_type) {prepare_##e, run_##e, sizeof(prep_type), NULL}
#define ENTRY_REF(e, prep_type) {prepare_##e, run_##e, sizeof(prep_type), ref_##e}
#define ENTRY_RUN(e) {NULL, run_##e, 0, NULL}
#define ENTRY_RUN_REF(e) {NULL, run_##e, 0, ref_##e}
#define KILN_CPU(prepare, e, prep_type, ref) \
  {prepare, kiln_hal_cpu_run_##e, prep_type, ref}
const kiln_hal_entry_t kiln_hal_cpu_entries[KILN_ENTRY_COUNT] = {
    [KILN_ENTRY_reshape] = ENTRY_RUN(reshape),
    [KILN_ENTRY_strided_copy] = ENTRY(strided_copy, kiln_nd_t),
    [KILN_ENTRY_cat] = ENTRY_RUN(cat),
    [KILN_ENTRY_gather] = ENTRY_RUN(gather),
    [KILN_ENTRY_where] = {prepare_nd3, run_where, sizeof(kiln_nd_t), NULL},
    [KILN_ENTRY_cast] = ENTRY_RUN(cast),
    [KILN_ENTRY_binary] = {prepare_nd2, run_binary, sizeof(kiln_nd_t), ref_binary},
    [KILN_ENTRY_unary] = ENTRY_RUN_REF(unary),
    [KILN_ENTRY_logical_not] = ENTRY_RUN(logical_not),
    [KILN_ENTRY_reduce] = ENTRY_RUN(reduce),
    [KILN_ENTRY_argmax] = ENTRY_RUN(argmax),
    [KILN_ENTRY_softmax] = ENTRY_RUN_REF(softmax),
    [KILN_ENTRY_norm] = ENTRY_RUN_REF(norm),
    [KILN_ENTRY_matmul] = ENTRY_REF(matmul, kiln_cpu_matmul_t),
    [KILN_ENTRY_linear] = ENTRY_REF(linear, kiln_gemm_f32_args_t),
    [KILN_ENTRY_sdpa] = ENTRY_REF(sdpa, kiln_attention_args_t),
    [KILN_ENTRY_fma_scalar] = ENTRY_RUN(fma_scalar),
    [KILN_ENTRY_gather_elements] = ENTRY_RUN(gather_elements),
    [KILN_ENTRY_conv2d] = ENTRY_REF(conv2d, kiln_conv2d_f32_args_t),
    [KILN_ENTRY_pool2d] = ENTRY_REF(pool2d, kiln_pool2d_f32_args_t),
    [KILN_ENTRY_math] = KILN_CPU(kiln_hal_cpu_prepare_math, math, sizeof(kiln_nd_t),
                                 kiln_hal_cpu_ref_math),
    [KILN_ENTRY_conv2d_grad] = KILN_CPU(kiln_hal_cpu_prepare_conv2d_grad, conv2d_grad,
                                        sizeof(kiln_conv2d_grad_f32_args_t),
                                        kiln_hal_cpu_ref_conv2d_grad),
    [KILN_ENTRY_max_pool2d_indices] = KILN_CPU(kiln_hal_cpu_prepare_max_pool2d_indices,
                                               max_pool2d_indices,
                                               sizeof(kiln_pool2d_grad_f32_args_t), NULL),
    [KILN_ENTRY_max_pool2d_grad] = KILN_CPU(NULL, max_pool2d_grad, 0, NULL),
    [KILN_ENTRY_avg_pool2d_grad] = KILN_CPU(kiln_hal_cpu_prepare_avg_pool2d_grad, avg_pool2d_grad,
                                            sizeof(kiln_pool2d_grad_f32_args_t), NULL),
    [KILN_ENTRY_adaptive_avg_pool2d] = KILN_CPU(NULL, adaptive_avg_pool2d, 0, NULL),
    [KILN_ENTRY_adaptive_avg_pool2d_grad] = KILN_CPU(NULL, adaptive_avg_pool2d_grad, 0, NULL),
    [KILN_ENTRY_upsample_bilinear2d] = KILN_CPU(kiln_hal_cpu_prepare_upsample_bilinear2d,
                                                upsample_bilinear2d,
                                                sizeof(kiln_upsample_f32_args_t),
                                                kiln_hal_cpu_ref_upsample_bilinear2d),
    [KILN_ENTRY_pad] = KILN_CPU(NULL, pad, 0, kiln_hal_cpu_ref_pad),
    [KILN_ENTRY_strided_scatter] = KILN_CPU(NULL, strided_scatter, 0, NULL),
    [KILN_ENTRY_scatter] = KILN_CPU(NULL, scatter, 0, NULL),
    [KILN_ENTRY_scan] = KILN_CPU(NULL, scan, 0, NULL),
    [KILN_ENTRY_argsort] = KILN_CPU(NULL, argsort, 0, NULL),
    [KILN_ENTRY_grid_sampler] = KILN_CPU(NULL, grid_sampler, 0, NULL),
    [KILN_ENTRY_col2im] = KILN_CPU(NULL, col2im, 0, NULL),
    [KILN_ENTRY_embedding_bag] = KILN_CPU(NULL, embedding_bag, 0, NULL),
    [KILN_ENTRY_eltwise_fused] = KILN_CPU(kiln_hal_cpu_prepare_eltwise_fused, eltwise_fused,
                                          sizeof(kiln_hal_cpu_fused_t),
                                          kiln_hal_cpu_ref_eltwise_fused),
    [KILN_ENTRY_conv2d_nhwc] = KILN_CPU(kiln_hal_cpu_prepare_conv2d_nhwc, conv2d_nhwc,
                                        sizeof(kiln_conv2d_f32_args_t),
                                        kiln_hal_cpu_ref_conv2d_nhwc),
    [KILN_ENTRY_max_pool2d_nhwc] = KILN_CPU(kiln_hal_cpu_prepare_max_pool2d_nhwc, max_pool2d_nhwc,
                                            sizeof(kiln_pool2d_f32_args_t),
                                            kiln_hal_cpu_ref_max_pool2d_nhwc),
    [KILN_ENTRY_gelu_backward] = ENTRY_RUN_REF(gelu_backward),
    [KILN_ENTRY_layer_norm_backward] = ENTRY_RUN_REF(layer_norm_backward),
    [KILN_ENTRY_iota] = ENTRY_RUN(iota),
    [KILN_ENTRY_grouped_mm] = ENTRY_REF(grouped_mm, kiln_gemm_grouped_f32_args_t),
    [KILN_ENTRY_random] = KILN_CPU(NULL, random, 0, kiln_hal_cpu_ref_random),
    [KILN_ENTRY_solve_triangular] = ENTRY_REF(solve_triangular, kiln_solve_triangular_f32_args_t),
};
#undef ENTRY
#undef ENTRY_REF
#undef ENTRY_RUN
#undef ENTRY_RUN_REF
#undef KILN_CPU
