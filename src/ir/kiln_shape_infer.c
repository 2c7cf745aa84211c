/* Shape and dtype inference: the rules of the core ops, and the dispatch
 * from each op to its rule (generated from the op records, kiln_ops.h).
 *
 * Each rule checks what the op's kernel will rely on (ranks, matching dims,
 * dtypes, parameter ranges) so that a plan built from a verified graph
 * cannot index out of bounds. Errors say what was expected and what came.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_shape_common.h"
#include "ir/kiln_shape_rules.h"
#include "base/kiln_activation.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

static const kiln_value_t* in_value(const kiln_graph_t* g, const kiln_node_t* n, int i) {
  if (i >= n->n_inputs || n->inputs[i] < 0 || n->inputs[i] >= g->n_values) return NULL;
  return &g->values[n->inputs[i]];
}

static void set_shape(kiln_value_t* out, kiln_dtype_t dtype, int32_t rank, const int64_t* shape) {
  out->dtype = dtype;
  out->rank = rank;
  memset(out->shape, 0, sizeof(out->shape));
  if (rank) memcpy(out->shape, shape, (size_t)rank * sizeof(int64_t));
}

/* NumPy broadcasting of a and b into out (rank and shape only). */
static kiln_status_t broadcast(const kiln_value_t* a, const kiln_value_t* b, kiln_value_t* out) {
  int32_t r = a->rank > b->rank ? a->rank : b->rank;
  int64_t shape[KILN_MAX_RANK];
  for (int32_t d = 0; d < r; ++d) {
    int32_t da = d - (r - a->rank), db = d - (r - b->rank);
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      char ba[96], bb[96];
      FAIL("shapes %s and %s do not broadcast (dimension %d: %lld vs %lld)",
           kiln_value_describe(a, ba, sizeof ba), kiln_value_describe(b, bb, sizeof bb), d,
           (long long)sa, (long long)sb);
    }
    shape[d] = sa == 1 ? sb : sa;
  }
  out->rank = r;
  memcpy(out->shape, shape, (size_t)r * sizeof(int64_t));
  return kiln_ok();
}

static kiln_status_t check_axis(int64_t axis, int32_t rank) {
  if (axis < 0 || axis >= (rank ? rank : 1)) FAIL("axis %lld is outside a rank-%d tensor",
                                                  (long long)axis, rank);
  return kiln_ok();
}

/* Dims from params are untrusted (they may come from a file): each must be in
 * [0, 2^40] and their product at most 2^44, checked without overflow. */
static kiln_status_t check_dims(const int64_t* dims, int32_t rank, int64_t* out_numel) {
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) {
    if (dims[d] < 0 || dims[d] > ((int64_t)1 << 40))
      FAIL("dimension %d has size %lld", d, (long long)dims[d]);
    if (dims[d] && numel > ((int64_t)1 << 44) / dims[d]) FAIL("more than 2^44 elements");
    numel *= dims[d];
  }
  *out_numel = numel;
  return kiln_ok();
}

static kiln_status_t check_rank_param(int64_t rank) {
  if (rank < 0 || rank > KILN_MAX_RANK) FAIL("rank %lld is outside 0..%d", (long long)rank,
                                             KILN_MAX_RANK);
  return kiln_ok();
}

kiln_status_t kiln_shape_view_extent(const int64_t* p, int32_t r, int64_t* out_lo,
                                     int64_t* out_hi) {
  /* With |stride|, |offset| <= 2^44 and dims <= 2^40 over 8 dims the sums
   * could overflow int64, so each step is bounded before it is added. */
  const int64_t lim = (int64_t)1 << 60, offset = p[KILN_P(VIEW, OFFSET)];
  if (offset < 0 || offset > ((int64_t)1 << 44)) FAIL("offset out of range");
  int64_t lo = offset, hi = offset;
  for (int32_t d = 0; d < r; ++d) {
    int64_t dim = p[KILN_P(VIEW, DIMS) + d], stride = p[KILN_P(VIEW, STRIDES) + d];
    if (dim == 0) continue;
    if (stride < -((int64_t)1 << 44) || stride > ((int64_t)1 << 44)) FAIL("stride out of range");
    if (stride && (dim - 1) > lim / (stride < 0 ? -stride : stride)) FAIL("view out of range");
    if (stride >= 0) hi += (dim - 1) * stride;
    else lo += (dim - 1) * stride;
    if (hi > lim || lo < -lim) FAIL("view out of range");
  }
  *out_lo = lo;
  *out_hi = hi;
  return kiln_ok();
}

kiln_status_t kiln_shape_strided_copy(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  const int64_t* p = n->params;
  const int64_t* dims = p + KILN_P(VIEW, DIMS);
  KILN_RETURN_IF_ERROR(check_rank_param(p[KILN_P(VIEW, RANK)]));
  int32_t r = (int32_t)p[KILN_P(VIEW, RANK)];
  int64_t x_numel = kiln_value_numel(x), numel = 0;
  KILN_RETURN_IF_ERROR(check_dims(dims, r, &numel));
  /* Every element read must lie in x. */
  int64_t lo, hi;
  KILN_RETURN_IF_ERROR(kiln_shape_view_extent(p, r, &lo, &hi));
  if (numel && (lo < 0 || hi >= x_numel))
    FAIL("view reads elements %lld..%lld of a tensor of %lld", (long long)lo, (long long)hi,
         (long long)x_numel);
  set_shape(out, x->dtype, r, dims);
  return kiln_ok();
}

kiln_status_t kiln_shape_cat(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x0 = in_value(g, n, 0);
  int64_t axis = n->params[KILN_P(AXIS, AXIS)];
  KILN_RETURN_IF_ERROR(check_axis(axis, x0->rank));
  if (x0->rank == 0) FAIL("cat of 0-d tensors");
  int64_t total = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* x = in_value(g, n, i);
    if (!x) FAIL("input %d is missing", i);
    if (x->rank != x0->rank || x->dtype != x0->dtype) FAIL("input %d's rank or dtype differs", i);
    for (int32_t d = 0; d < x->rank; ++d)
      if (d != axis && x->shape[d] != x0->shape[d])
        FAIL("input %d has size %lld in dimension %d, input 0 has %lld", i,
             (long long)x->shape[d], d, (long long)x0->shape[d]);
    total += x->shape[axis];
  }
  set_shape(out, x0->dtype, x0->rank, x0->shape);
  out->shape[axis] = total;
  return kiln_ok();
}

kiln_status_t kiln_shape_gather(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *t = in_value(g, n, 0), *idx = in_value(g, n, 1);
  int64_t axis = n->params[KILN_P(AXIS, AXIS)];
  if (idx->dtype != KILN_I64 && idx->dtype != KILN_I32) FAIL("index must be int64 or int32");
  KILN_RETURN_IF_ERROR(check_axis(axis, t->rank));
  if (t->rank == 0) FAIL("gather from a 0-d tensor");
  int32_t r = t->rank - 1 + idx->rank;
  if (r > KILN_MAX_RANK) FAIL("result rank %d is over %d", r, KILN_MAX_RANK);
  int64_t shape[KILN_MAX_RANK];
  int32_t k = 0;
  for (int32_t d = 0; d < axis; ++d) shape[k++] = t->shape[d];
  for (int32_t d = 0; d < idx->rank; ++d) shape[k++] = idx->shape[d];
  for (int32_t d = (int32_t)axis + 1; d < t->rank; ++d) shape[k++] = t->shape[d];
  set_shape(out, t->dtype, r, shape);
  return kiln_ok();
}

/* The reduction of x over the axes in mask (keep: as size 1). */
static kiln_status_t reduce_shape(const kiln_node_t* n, const kiln_value_t* x, int64_t mask,
                                  int64_t keep, kiln_value_t* out) {
  if (mask < 0 || mask >= ((int64_t)1 << (x->rank ? x->rank : 1)))
    FAIL("reduced axes 0x%llx do not fit a rank-%d tensor", (long long)mask, x->rank);
  if (n->op == KILN_OP_ANY && x->dtype != KILN_BOOL) FAIL("any takes bool");
  if ((n->op == KILN_OP_MEAN) && !kiln_dtype_is_float(x->dtype)) FAIL("mean takes a float");
  int64_t shape[KILN_MAX_RANK];
  int32_t r = 0;
  for (int32_t d = 0; d < x->rank; ++d) {
    if (mask & ((int64_t)1 << d)) {
      if (keep) shape[r++] = 1;
    } else {
      shape[r++] = x->shape[d];
    }
  }
  set_shape(out, x->dtype, r, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_matmul(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *a = in_value(g, n, 0), *b = in_value(g, n, 1);
  int64_t flags = n->params[KILN_P(MATMUL, FLAGS)];
  char ba[96], bb[96];
  if (a->rank < 2 || b->rank < 2) FAIL("matmul needs rank >= 2 operands");
  /* a and b may be bf16 (a bf16 model's product, read widened: exact); a
   * bf16 b is a graph value (constants are packed from float32). */
  if ((a->dtype != KILN_F32 && a->dtype != KILN_BF16) ||
      (b->dtype != KILN_F32 && (b->dtype != KILN_BF16 || b->kind == KILN_VALUE_CONSTANT)))
    FAIL("matmul takes a float32 or bfloat16 a and a float32 b (or a bfloat16 b that is not a constant)");
  if (flags & ~(int64_t)(KILN_MATMUL_TRANSPOSE_A | KILN_MATMUL_TRANSPOSE_B | KILN_MATMUL_ROUND_A_BF16 |
                         KILN_MATMUL_ROUND_B_BF16 | KILN_MATMUL_ROUND_Y_BF16))
    FAIL("unknown matmul flags %lld", (long long)flags);
  if ((flags & KILN_MATMUL_ROUND_A_BF16) && a->dtype != KILN_F32)
    FAIL("a matmul rounds a float32 a to bf16, not a %s one", kiln_dtype_name(a->dtype));
  if ((flags & KILN_MATMUL_ROUND_B_BF16) && (b->dtype != KILN_F32 || b->kind == KILN_VALUE_CONSTANT))
    FAIL("a matmul rounds a float32 b that is not a constant to bf16");
  int ta = (flags & KILN_MATMUL_TRANSPOSE_A) != 0, tb = (flags & KILN_MATMUL_TRANSPOSE_B) != 0;
  int64_t m = a->shape[a->rank - 2 + ta], k = a->shape[a->rank - 1 - ta];
  int64_t kb = b->shape[b->rank - 2 + tb], nn = b->shape[b->rank - 1 - tb];
  if (k != kb)
    FAIL("inner dimensions differ: %s times %s", kiln_value_describe(a, ba, sizeof ba),
         kiln_value_describe(b, bb, sizeof bb));
  kiln_value_t ab = *a, bbv = *b;
  ab.rank -= 2;
  bbv.rank -= 2;
  KILN_RETURN_IF_ERROR(broadcast(&ab, &bbv, out));
  if (out->rank + 2 > KILN_MAX_RANK) FAIL("rank too large");
  out->shape[out->rank] = m;
  out->shape[out->rank + 1] = nn;
  out->rank += 2;
  out->dtype = KILN_F32;
  return kiln_ok();
}

kiln_status_t kiln_shape_linear(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *w = in_value(g, n, 1);
  const kiln_value_t *bias = in_value(g, n, 2), *res = in_value(g, n, 3);
  if (!x || !w) FAIL("x and w are required");
  if ((x->dtype != KILN_F32 && x->dtype != KILN_BF16) ||
      (w->dtype != KILN_F32 && (w->dtype != KILN_BF16 || w->kind == KILN_VALUE_CONSTANT)))
    FAIL("linear takes a float32 or bfloat16 x and a float32 w (or a bfloat16 w that is not a constant)");
  if (w->rank != 2) FAIL("w must be 2-d");
  const int64_t w_transposed = n->params[KILN_P(LINEAR, W_TRANSPOSED)];
  int wt = w_transposed != 0; /* a dense value stored (N, K) */
  if (wt && (w_transposed != 1 || w->kind == KILN_VALUE_CONSTANT))
    FAIL("a transposed read is for a dense (N, K) value");
  if (w->kind != KILN_VALUE_CONSTANT && w->layout != KILN_LAYOUT_DENSE)
    FAIL("a weight that is not a constant must be dense");
  int64_t k = w->shape[wt], ncols = w->shape[1 - wt];
  if (x->rank < 1 || x->shape[x->rank - 1] != k)
    FAIL("x's last dimension must equal w's K (%lld)", (long long)k);
  if ((unsigned long long)n->params[KILN_P(LINEAR, ACT)] >= KILN_ACT_COUNT)
    FAIL("unknown activation");
  const int64_t round_a = n->params[KILN_P(LINEAR, ROUND_A)];
  if (round_a != 0 && (round_a != 1 || x->dtype != KILN_F32))
    FAIL("ROUND_A is 1 for a float32 x, or 0");
  const int64_t round_b = n->params[KILN_P(LINEAR, ROUND_B)];
  if (round_b != 0 && (round_b != 1 || w->dtype != KILN_F32 || w->kind == KILN_VALUE_CONSTANT))
    FAIL("ROUND_B is 1 for a float32 w that is not a constant, or 0");
  const int64_t round_y = n->params[KILN_P(LINEAR, ROUND_Y)];
  if (round_y != 0 && round_y != 1) FAIL("ROUND_Y is 1 or 0");
  set_shape(out, KILN_F32, x->rank, x->shape);
  out->shape[x->rank - 1] = ncols;
  if (bias && (bias->dtype != KILN_F32 || kiln_value_numel(bias) != ncols ||
               bias->rank < 1 || bias->shape[bias->rank - 1] != ncols))
    FAIL("bias must be float32 with %lld elements", (long long)ncols);
  if (res) {
    if (res->dtype != KILN_F32 || res->rank != out->rank) FAIL("residual must match y");
    for (int32_t d = 0; d < out->rank; ++d)
      if (res->shape[d] != out->shape[d]) FAIL("residual must match y's shape");
  }
  return kiln_ok();
}

/* GROUPED_MM: x (S, K) and w (E, K, N) (stored (E, N, K) with
 * W_TRANSPOSED) float32, offs (E) int64/int32 -> (S, N). offs's values are
 * read at run time by the kernel, which never reads past S rows or E
 * experts. */
kiln_status_t kiln_shape_grouped_mm(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *w = in_value(g, n, 1), *offs = in_value(g, n, 2);
  const int64_t w_transposed = n->params[KILN_P(GROUPED_MM, W_TRANSPOSED)];
  if (x->dtype != KILN_F32 || w->dtype != KILN_F32) FAIL("grouped_mm takes float32 x and w");
  if (offs->dtype != KILN_I64 && offs->dtype != KILN_I32) FAIL("grouped_mm's offs must be int64 or int32");
  if (x->rank != 2 || w->rank != 3 || offs->rank != 1)
    FAIL("grouped_mm takes x (S, K), w (E, K, N) and offs (E), got ranks %d, %d, %d", x->rank,
         w->rank, offs->rank);
  if (w_transposed != 0 && w_transposed != 1) FAIL("grouped_mm's W_TRANSPOSED is 0 or 1");
  int wt = w_transposed == 1;
  int64_t k = w->shape[1 + wt], ncols = w->shape[2 - wt];
  if (x->shape[1] != k)
    FAIL("grouped_mm: x has %lld columns, w's experts take %lld", (long long)x->shape[1],
         (long long)k);
  if (offs->shape[0] != w->shape[0])
    FAIL("grouped_mm: %lld offsets for %lld experts", (long long)offs->shape[0],
         (long long)w->shape[0]);
  int64_t shape[2] = {x->shape[0], ncols};
  set_shape(out, KILN_F32, 2, shape);
  return kiln_ok();
}

/* SOLVE_TRIANGULAR: a (..., n, n) and b (..., n, k) float32 of the same
 * batch dims -> x as b. */
kiln_status_t kiln_shape_solve_triangular(const kiln_graph_t* g, const kiln_node_t* n,
                                          kiln_value_t* out) {
  const kiln_value_t *a = in_value(g, n, 0), *b = in_value(g, n, 1);
  const int64_t upper = n->params[KILN_P(SOLVE_TRIANGULAR, UPPER)];
  const int64_t unit = n->params[KILN_P(SOLVE_TRIANGULAR, UNIT)];
  if (a->dtype != KILN_F32 || b->dtype != KILN_F32) FAIL("solve_triangular takes float32 a and b");
  if (a->rank < 2 || b->rank != a->rank)
    FAIL("solve_triangular takes a (..., n, n) and b (..., n, k) of one rank, got ranks %d and %d",
         a->rank, b->rank);
  if ((upper != 0 && upper != 1) || (unit != 0 && unit != 1))
    FAIL("solve_triangular's UPPER and UNIT are 0 or 1");
  const int r = a->rank;
  if (a->shape[r - 1] != a->shape[r - 2] || b->shape[r - 2] != a->shape[r - 1])
    FAIL("solve_triangular: a is %lld x %lld, b has %lld rows", (long long)a->shape[r - 2],
         (long long)a->shape[r - 1], (long long)b->shape[r - 2]);
  for (int d = 0; d < r - 2; ++d)
    if (a->shape[d] != b->shape[d])
      FAIL("solve_triangular: a's and b's batch dim %d differ (%lld, %lld)", d,
           (long long)a->shape[d], (long long)b->shape[d]);
  set_shape(out, KILN_F32, b->rank, b->shape);
  return kiln_ok();
}

/* Checks that a view (offset, strides over dims) stays inside a value. */
static kiln_status_t check_view(const char* what, const kiln_value_t* src, const int64_t* dims,
                                const int64_t* view) {
  int64_t numel = 0;
  KILN_RETURN_IF_ERROR(check_dims(dims, 4, &numel));
  if (!numel) return kiln_ok();
  const int64_t lim = (int64_t)1 << 60;
  if (view[0] < 0 || view[0] > lim) FAIL("%s view offset out of range", what);
  int64_t hi = view[0];
  for (int d = 0; d < 4; ++d) {
    int64_t st = view[1 + d];
    if (st < 0 || st > ((int64_t)1 << 44) || (st && dims[d] - 1 > lim / st))
      FAIL("%s view stride %d out of range", what, d);
    hi += (dims[d] - 1) * st;
    if (hi > lim) FAIL("%s view out of range", what);
  }
  if (hi >= kiln_value_numel(src))
    FAIL("%s view reads element %lld of a tensor of %lld", what, (long long)hi,
         (long long)kiln_value_numel(src));
  return kiln_ok();
}

kiln_status_t kiln_shape_sdpa(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *q = in_value(g, n, 0), *k = in_value(g, n, 1), *v = in_value(g, n, 2);
  const kiln_value_t* mask = in_value(g, n, 3);
  const int64_t* p = n->params;
  const int64_t flags = p[KILN_P(SDPA, FLAGS)];
  if (!q || !k || !v) FAIL("q, k and v are required");
  if (q->dtype != KILN_F32 || k->dtype != KILN_F32 || v->dtype != KILN_F32)
    FAIL("sdpa takes float32");
  if ((unsigned long long)flags >
      (KILN_SDPA_VIEWS | KILN_SDPA_OUT_BSHD | KILN_SDPA_SCALE_HEAD_DIM | KILN_SDPA_BF16 |
       KILN_SDPA_EVERY_KEY))
    FAIL("unknown flags");
  int64_t B, H, Hkv, Sq, Skv, D, Dv;
  if (flags & KILN_SDPA_VIEWS) {
    B = p[KILN_P(SDPA, BATCH)], H = p[KILN_P(SDPA, HEADS)], Hkv = p[KILN_P(SDPA, KV_HEADS)];
    Sq = p[KILN_P(SDPA, Q_LEN)], Skv = p[KILN_P(SDPA, KV_LEN)], D = p[KILN_P(SDPA, HEAD_DIM)];
    Dv = p[KILN_P(SDPA, V_HEAD_DIM)];
    const int64_t qd[4] = {B, H, Sq, D}, kd[4] = {B, Hkv, Skv, D}, vd[4] = {B, Hkv, Skv, Dv};
    /* Each view is its OFFSET then its four STRIDES. */
    _Static_assert(KILN_P(SDPA, Q_STRIDES) == KILN_P(SDPA, Q_OFFSET) + 1 &&
                       KILN_P(SDPA, K_STRIDES) == KILN_P(SDPA, K_OFFSET) + 1 &&
                       KILN_P(SDPA, V_STRIDES) == KILN_P(SDPA, V_OFFSET) + 1,
                   "sdpa views");
    KILN_RETURN_IF_ERROR(check_view("q", q, qd, p + KILN_P(SDPA, Q_OFFSET)));
    KILN_RETURN_IF_ERROR(check_view("k", k, kd, p + KILN_P(SDPA, K_OFFSET)));
    KILN_RETURN_IF_ERROR(check_view("v", v, vd, p + KILN_P(SDPA, V_OFFSET)));
  } else {
    if (q->rank != 4 || k->rank != 4 || v->rank != 4) FAIL("q, k, v must be (B, H, S, D)");
    B = q->shape[0], H = q->shape[1], Hkv = k->shape[1], Sq = q->shape[2], Skv = k->shape[2];
    D = q->shape[3], Dv = v->shape[3];
    if (k->shape[0] != B || v->shape[0] != B) FAIL("batch sizes differ");
    if (v->shape[1] != Hkv) FAIL("key and value heads differ");
    if (v->shape[2] != Skv) FAIL("key and value lengths differ");
    if (k->shape[3] != D) FAIL("query and key head sizes differ");
  }
  if (Hkv <= 0 || H % Hkv)
    FAIL("query heads (%lld) must be a multiple of key/value heads (%lld)", (long long)H,
         (long long)Hkv);
  if (mask) {
    if (mask->dtype != KILN_F32) FAIL("mask must be float32 (additive)");
    if (mask->rank > 4) FAIL("mask rank over 4");
    const int64_t want[4] = {B, H, Sq, Skv};
    for (int32_t d = 0; d < mask->rank; ++d) {
      int64_t s = mask->shape[d], w = want[4 - mask->rank + d];
      if (s != 1 && s != w) FAIL("mask does not broadcast to (B, H, Sq, Skv)");
    }
  }
  int64_t bhsd[4] = {B, H, Sq, Dv}, bshd[4] = {B, Sq, H, Dv};
  set_shape(out, KILN_F32, 4, (flags & KILN_SDPA_OUT_BSHD) ? bshd : bhsd);
  return kiln_ok();
}

kiln_status_t kiln_shape_norm(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  int64_t k = n->params[KILN_P(NORM, DIMS)];
  if (x->dtype != KILN_F32) FAIL("norms take float32");
  if (k < 1 || k > x->rank) FAIL("cannot normalise %lld trailing dims of rank %d", (long long)k,
                                 x->rank);
  int64_t cols = 1;
  for (int32_t d = x->rank - (int32_t)k; d < x->rank; ++d) cols *= x->shape[d];
  for (int i = 1; i < n->n_inputs; ++i) {
    const kiln_value_t* p = in_value(g, n, i);
    if (p && (p->dtype != KILN_F32 || kiln_value_numel(p) != cols))
      FAIL("weight/bias %d must have %lld float32 elements", i, (long long)cols);
  }
  set_shape(out, x->dtype, x->rank, x->shape);
  return kiln_ok();
}

/* One spatial output size of a convolution or pooling window, with every
 * parameter validated (they may come from a file). ceil_mode follows torch:
 * the last window must start inside the input or its left padding, and a
 * window may hang past the input's end (a 3-wide pool over 2 rows by
 * stride 2 gives 1 row: max of the two), so only the rounded-up count must
 * reach 1. */
static kiln_status_t window_out_size(const char* what, int64_t in, int64_t k, int64_t s,
                                     int64_t p, int64_t d, int ceil_mode, int64_t* out) {
  /* Kernel size and dilation are multiplied below: each is held to 2^31 so
   * the span stays far inside int64 whatever a file says. */
  const int64_t lim = (int64_t)1 << 40, klim = (int64_t)1 << 31;
  if (k < 1 || k > klim) FAIL("%s: kernel size %lld is outside [1, 2^31]", what, (long long)k);
  if (s < 1 || s > lim) FAIL("%s: stride %lld is outside [1, 2^40]", what, (long long)s);
  if (d < 1 || d > klim) FAIL("%s: dilation %lld is outside [1, 2^31]", what, (long long)d);
  if (p < 0 || p > lim) FAIL("%s: padding %lld is outside [0, 2^40]", what, (long long)p);
  int64_t span = d * (k - 1) + 1, room = in + 2 * p - span + (ceil_mode ? s - 1 : 0);
  if (room < 0)
    FAIL("%s: the window (%lld with dilation) is larger than the padded input (%lld)", what,
         (long long)span, (long long)(in + 2 * p));
  int64_t o = room / s + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  if (o < 1)
    FAIL("%s: no window fits an input of %lld (window %lld with dilation, padding %lld)", what,
         (long long)in, (long long)span, (long long)p);
  *out = o;
  return kiln_ok();
}

kiln_status_t kiln_shape_window_out_size(const char* what, int64_t in, int64_t k, int64_t s,
                                         int64_t p, int64_t d, int ceil_mode, int64_t* out) {
  return window_out_size(what, in, k, s, p, d, ceil_mode, out);
}

kiln_status_t kiln_shape_conv2d(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *w = in_value(g, n, 1);
  const kiln_value_t *bias = in_value(g, n, 2), *res = in_value(g, n, 3);
  const int64_t* p = n->params;
  if (!x || !w) FAIL("x and w are required");
  if (x->dtype != KILN_F32 || w->dtype != KILN_F32) FAIL("conv2d takes float32");
  if (x->rank != 4) FAIL("conv2d's x must be (N, C, H, W), got rank %d", x->rank);
  /* w is usually a constant, but may be computed (a 1-d conv's reshaped
   * weight before folding, or a weight that really is an activation). */
  if (w->rank != 4 || (w->layout != KILN_LAYOUT_DENSE && w->layout != KILN_LAYOUT_CONV2D_PACKED &&
                       w->layout != KILN_LAYOUT_CONV2D_PACKED_16))
    FAIL("conv2d's w must be dense or packed (O, C / groups, kh, kw), got rank %d", w->rank);
  int64_t groups = p[KILN_P(CONV2D, GROUPS)], C = x->shape[1], O = w->shape[0];
  if (groups < 1 || groups > ((int64_t)1 << 40))
    FAIL("conv2d: groups %lld must be positive", (long long)groups);
  if (C < 1 || C % groups || w->shape[1] != C / groups)
    FAIL("conv2d: x has %lld channels; w expects %lld per group x %lld groups", (long long)C,
         (long long)w->shape[1], (long long)groups);
  if (O < 1 || O % groups) FAIL("conv2d: %lld output channels do not split into %lld groups",
                                (long long)O, (long long)groups);
  if ((unsigned long long)p[KILN_P(CONV2D, ACT)] >= KILN_ACT_COUNT)
    FAIL("conv2d: unknown activation");
  if ((unsigned long long)p[KILN_P(CONV2D, RESIDUAL_BEFORE_ACT)] > 1)
    FAIL("conv2d: residual placement (residual_before_act) is 0 or 1");
  if (p[KILN_P(CONV2D, X_NCHW)] != 0) FAIL("conv2d: x_nchw is conv2d_nhwc's (0 here)");
  if ((unsigned long long)p[KILN_P(CONV2D, ROUND_X)] > 1) FAIL("conv2d: round_x is 0 or 1");
  int64_t shape[4] = {x->shape[0], O, 0, 0};
  KILN_RETURN_IF_ERROR(
      window_out_size("conv2d height", x->shape[2], w->shape[2], p[KILN_P(CONV2D, STRIDE_H)],
                      p[KILN_P(CONV2D, PAD_H)], p[KILN_P(CONV2D, DILATION_H)], 0, &shape[2]));
  KILN_RETURN_IF_ERROR(
      window_out_size("conv2d width", x->shape[3], w->shape[3], p[KILN_P(CONV2D, STRIDE_W)],
                      p[KILN_P(CONV2D, PAD_W)], p[KILN_P(CONV2D, DILATION_W)], 0, &shape[3]));
  set_shape(out, KILN_F32, 4, shape);
  if (bias && (bias->dtype != KILN_F32 || kiln_value_numel(bias) != O))
    FAIL("conv2d: bias must be float32 with %lld elements", (long long)O);
  if (res) {
    if (res->dtype != KILN_F32 || res->rank != 4) FAIL("conv2d: residual must match y");
    for (int32_t d = 0; d < 4; ++d)
      if (res->shape[d] != shape[d]) FAIL("conv2d: residual must match y's shape");
  }
  const kiln_value_t* scale = in_value(g, n, 4);
  if (scale && (scale->dtype != KILN_F32 || scale->rank != 1 || scale->shape[0] != O))
    FAIL("conv2d: scale must be float32 (%lld)", (long long)O);
  if (scale && w->layout != KILN_LAYOUT_DENSE)
    FAIL("conv2d: a scaled conv's weight is dense (the bf16 form is channels-last's)");
  return kiln_ok();
}

kiln_status_t kiln_shape_pool2d(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  const int64_t* p = n->params;
  const char* name = kiln_op_name(n->op);
  if (x->dtype != KILN_F32) FAIL("%s takes float32", name);
  if (x->rank != 4) FAIL("%s's x must be (N, C, H, W), got rank %d", name, x->rank);
  enum { KH = KILN_P(POOL2D, KERNEL_H), SH = KILN_P(POOL2D, STRIDE_H), PH = KILN_P(POOL2D, PAD_H),
         DH = KILN_P(POOL2D, DILATION_H), CEIL = KILN_P(POOL2D, CEIL_MODE),
         INCL = KILN_P(POOL2D, COUNT_INCLUDE_PAD), DIV = KILN_P(POOL2D, DIVISOR_OVERRIDE) };
  if (n->op == KILN_OP_AVG_POOL2D && (p[DH] != 1 || p[DH + 1] != 1))
    FAIL("avg_pool2d has no dilation (dilation must be 1)");
  if ((unsigned long long)p[CEIL] > 1 || (unsigned long long)p[INCL] > 1)
    FAIL("%s: ceil_mode and count_include_pad are 0 or 1", name);
  if (p[DIV] < -((int64_t)1 << 31) || p[DIV] > ((int64_t)1 << 31) || (n->op != KILN_OP_AVG_POOL2D && p[DIV]))
    FAIL("%s: divisor_override %lld is outside [-2^31, 2^31] (0: none; average only)", name,
         (long long)p[DIV]);
  int64_t shape[4] = {x->shape[0], x->shape[1], 0, 0};
  KILN_RETURN_IF_ERROR(window_out_size(name, x->shape[2], p[KH], p[SH], p[PH], p[DH], (int)p[CEIL],
                                       &shape[2]));
  KILN_RETURN_IF_ERROR(window_out_size(name, x->shape[3], p[KH + 1], p[SH + 1], p[PH + 1],
                                       p[DH + 1], (int)p[CEIL], &shape[3]));
  for (int i = 0; i < 2; ++i) {
    /* As torch: padding at most half the (dilated) kernel, so no window lies
     * wholly in the padding (max would be -inf, avg a division by zero).
     * (H and W fields are adjacent: kiln_shape_infer_nn.c checks.) */
    int64_t span = (p[KH + i] - 1) * p[DH + i] + 1;
    if (p[PH + i] > span / 2)
      FAIL("%s: padding %lld is more than half the kernel (%lld)", name, (long long)p[PH + i],
           (long long)span);
  }
  set_shape(out, KILN_F32, 4, shape);
  return kiln_ok();
}

static int same_shape(const kiln_value_t* a, const kiln_value_t* b) {
  return a->rank == b->rank && !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->rank);
}

/* ACOS..SIGN and ATAN2..DIV_FLOOR (kernels/math): elementwise, one dtype
 * in and out; which dtypes each takes is documented in kiln_ops.h. */
kiln_status_t kiln_shape_math_unary(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  kiln_dtype_t t = x->dtype;
  if (t != KILN_F32 && !(n->op == KILN_OP_SIGN && (t == KILN_I64 || t == KILN_I32)))
    FAIL("%s does not take %s", kiln_op_name(n->op), kiln_dtype_name(t));
  set_shape(out, t, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_math_binary(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *b = in_value(g, n, 1);
  kiln_op_t op = n->op;
  kiln_dtype_t t = x->dtype;
  int is_int = t == KILN_I64 || t == KILN_I32;
  if (t != b->dtype)
    FAIL("operand dtypes differ: %s and %s", kiln_dtype_name(t), kiln_dtype_name(b->dtype));
  int ok = op == KILN_OP_ATAN2 ? t == KILN_F32
           : op <= KILN_OP_BITWISE_XOR ? is_int || t == KILN_BOOL
                                        : is_int || t == KILN_F32;
  if (!ok) FAIL("%s does not take %s", kiln_op_name(op), kiln_dtype_name(t));
  KILN_RETURN_IF_ERROR(broadcast(x, b, out));
  out->dtype = t;
  return kiln_ok();
}

kiln_status_t kiln_shape_binary(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *b = in_value(g, n, 1);
  kiln_op_t op = n->op;
  if (x->dtype != b->dtype)
    FAIL("operand dtypes differ: %s and %s", kiln_dtype_name(x->dtype), kiln_dtype_name(b->dtype));
  if ((op == KILN_OP_LOGICAL_AND || op == KILN_OP_LOGICAL_OR) && x->dtype != KILN_BOOL)
    FAIL("logical ops take bool");
  if (op == KILN_OP_POW && !kiln_dtype_is_float(x->dtype)) FAIL("pow takes floats");
  KILN_RETURN_IF_ERROR(broadcast(x, b, out));
  out->dtype = KILN_OP_IS_COMPARE(op) ? KILN_BOOL : x->dtype;
  return kiln_ok();
}

kiln_status_t kiln_shape_unary(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  kiln_op_t op = n->op;
  int int_ok = op == KILN_OP_NEG || op == KILN_OP_ABS || op == KILN_OP_RELU;
  if (x->dtype != KILN_F32 && !(int_ok && (x->dtype == KILN_I64 || x->dtype == KILN_I32)))
    FAIL("%s does not take %s", kiln_op_name(op), kiln_dtype_name(x->dtype));
  set_shape(out, x->dtype, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_reduce(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  return reduce_shape(n, in_value(g, n, 0), n->params[KILN_P(REDUCE, AXES)],
                      n->params[KILN_P(REDUCE, KEEPDIM)], out);
}

kiln_status_t kiln_shape_reshape(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  const int64_t rank = n->params[KILN_P(RESHAPE, RANK)];
  const int64_t* dims = n->params + KILN_P(RESHAPE, DIMS);
  KILN_RETURN_IF_ERROR(check_rank_param(rank));
  int64_t numel = 0;
  KILN_RETURN_IF_ERROR(check_dims(dims, (int32_t)rank, &numel));
  set_shape(out, x->dtype, (int32_t)rank, dims);
  if (numel != kiln_value_numel(x))
    FAIL("reshape changes the element count from %lld to %lld", (long long)kiln_value_numel(x),
         (long long)kiln_value_numel(out));
  return kiln_ok();
}

kiln_status_t kiln_shape_where(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *a = in_value(g, n, 1), *b = in_value(g, n, 2);
  if (x->dtype != KILN_BOOL) FAIL("where's condition must be bool");
  if (a->dtype != b->dtype) FAIL("where's branches differ in dtype");
  kiln_value_t ab;
  KILN_RETURN_IF_ERROR(broadcast(a, b, &ab));
  KILN_RETURN_IF_ERROR(broadcast(x, &ab, out));
  out->dtype = a->dtype;
  return kiln_ok();
}

kiln_status_t kiln_shape_cast(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  int64_t dtype = n->params[KILN_P(CAST, DTYPE)];
  if ((unsigned long long)dtype >= KILN_DTYPE_COUNT) FAIL("unknown target dtype");
  set_shape(out, (kiln_dtype_t)dtype, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_logical_not(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  if (x->dtype != KILN_BOOL) FAIL("logical_not takes bool");
  set_shape(out, KILN_BOOL, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_argmax(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  int64_t axis = n->params[KILN_P(ARGMAX, AXIS)];
  KILN_RETURN_IF_ERROR(check_axis(axis, x->rank));
  KILN_RETURN_IF_ERROR(reduce_shape(n, x, x->rank ? (int64_t)1 << axis : 0,
                                    n->params[KILN_P(ARGMAX, KEEPDIM)], out));
  out->dtype = KILN_I64;
  return kiln_ok();
}

kiln_status_t kiln_shape_softmax(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  int64_t safe = n->params[KILN_P(SOFTMAX, SAFE)];
  if (x->dtype != KILN_F32) FAIL("softmax takes float32");
  KILN_RETURN_IF_ERROR(check_axis(n->params[KILN_P(SOFTMAX, AXIS)], x->rank));
  if (safe != 0 && (n->op != KILN_OP_SOFTMAX || safe != 1))
    FAIL("softmax's safe flag is 0 or 1 (log_softmax has none)");
  set_shape(out, x->dtype, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_gather_elements(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = in_value(g, n, 0), *idx = in_value(g, n, 1);
  int64_t axis = n->params[KILN_P(AXIS, AXIS)];
  if (idx->dtype != KILN_I64 && idx->dtype != KILN_I32) FAIL("index must be int64 or int32");
  if (idx->rank != x->rank) FAIL("index rank %d differs from input rank %d", idx->rank, x->rank);
  KILN_RETURN_IF_ERROR(check_axis(axis, x->rank));
  for (int32_t d = 0; d < x->rank; ++d)
    if (d != axis && idx->shape[d] > x->shape[d])
      FAIL("index dimension %d (%lld) is larger than the input's (%lld)", d,
           (long long)idx->shape[d], (long long)x->shape[d]);
  set_shape(out, x->dtype, idx->rank, idx->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_layer_norm_backward(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  /* (dy, x, mean, rstd, gamma?) */
  const kiln_value_t *dy = in_value(g, n, 0), *x = in_value(g, n, 1);
  int64_t k = n->params[KILN_P(NORM, DIMS)];
  if (dy->dtype != KILN_F32 || x->dtype != KILN_F32)
    FAIL("layer_norm_backward takes float32, got %s and %s", kiln_dtype_name(dy->dtype),
         kiln_dtype_name(x->dtype));
  if (!same_shape(dy, x)) FAIL("layer_norm_backward: the gradient and the input differ in shape");
  if (k < 1 || k > dy->rank)
    FAIL("layer_norm_backward: cannot normalise %lld trailing dims of rank %d", (long long)k,
         dy->rank);
  int64_t cols = 1;
  for (int32_t d = dy->rank - (int32_t)k; d < dy->rank; ++d) cols *= dy->shape[d];
  int64_t rows = cols ? kiln_value_numel(dy) / cols : 0;
  for (int i = 2; i < n->n_inputs; ++i) {
    const kiln_value_t* p = in_value(g, n, i);
    int64_t want = i < 4 ? rows : cols;
    if (p && (p->dtype != KILN_F32 || kiln_value_numel(p) != want))
      FAIL("layer_norm_backward: input %d (%s) must have %lld float32 elements", i,
           i == 2 ? "mean" : i == 3 ? "rstd" : "gamma", (long long)want);
  }
  set_shape(out, KILN_F32, dy->rank, dy->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_gelu_backward(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *dy = in_value(g, n, 0), *v = in_value(g, n, 1);
  int64_t approximate = n->params[KILN_P(GELU_BACKWARD, APPROXIMATE)];
  if (dy->dtype != KILN_F32 || v->dtype != KILN_F32)
    FAIL("gelu_backward takes float32, got %s and %s", kiln_dtype_name(dy->dtype),
         kiln_dtype_name(v->dtype));
  if (!same_shape(dy, v)) FAIL("gelu_backward: the gradient and the input differ in shape");
  if (approximate != 0 && approximate != 1)
    FAIL("gelu_backward: approximate is 0 (none) or 1 (tanh), got %lld", (long long)approximate);
  set_shape(out, KILN_F32, dy->rank, dy->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_iota(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  (void)g;
  const int64_t len = n->params[KILN_P(IOTA, LENGTH)], start = n->params[KILN_P(IOTA, START)];
  const int64_t step = n->params[KILN_P(IOTA, STEP)], dtype = n->params[KILN_P(IOTA, DTYPE)];
  const int64_t lim = (int64_t)1 << 44;
  if (len < 0 || len > ((int64_t)1 << 40)) FAIL("iota of %lld elements", (long long)len);
  if (start < -lim || start > lim || step < -lim || step > lim)
    FAIL("iota's start and step must lie in [-2^44, 2^44]");
  int64_t mag = step < 0 ? -step : step;
  if (mag && len > 1 && len - 1 > (((int64_t)1 << 60) / mag))
    FAIL("iota's last value is out of range");
  if (dtype != KILN_I64 && dtype != KILN_I32 && dtype != KILN_F32)
    FAIL("iota makes int64, int32 or float32");
  set_shape(out, (kiln_dtype_t)dtype, 1, &len);
  return kiln_ok();
}

kiln_status_t kiln_shape_random(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* seed = in_value(g, n, 0);
  const int64_t* p = n->params;
  if (!seed || seed->dtype != KILN_I64 || kiln_value_numel(seed) != 1) {
    char b[96];
    FAIL("random's seed must be one int64, got %s", seed ? kiln_value_describe(seed, b, sizeof b) : "none");
  }
  KILN_RETURN_IF_ERROR(check_rank_param(p[KILN_P(RANDOM, RANK)]));
  const int32_t r = (int32_t)p[KILN_P(RANDOM, RANK)];
  int64_t numel;
  KILN_RETURN_IF_ERROR(check_dims(p + KILN_P(RANDOM, DIMS), r, &numel));
  const int64_t dist = p[KILN_P(RANDOM, DIST)], stream = p[KILN_P(RANDOM, STREAM)];
  if (dist < 0 || dist > 1) FAIL("random's distribution %lld is not 0 (uniform) or 1 (normal)", (long long)dist);
  if (stream < 0 || stream > (int64_t)UINT32_MAX) FAIL("random's stream %lld is outside [0, 2^32)", (long long)stream);
  const float a = n->fparams[KILN_FP(RANDOM, A)], b = n->fparams[KILN_FP(RANDOM, B)];
  if (!isfinite(a) || !isfinite(b)) FAIL("random's parameters must be finite, got %g and %g", a, b);
  if (dist == 1 && b < 0) FAIL("random's normal standard deviation %g is negative", b);
  set_shape(out, KILN_F32, r, p + KILN_P(RANDOM, DIMS));
  return kiln_ok();
}

kiln_status_t kiln_shape_fma_scalar(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = in_value(g, n, 0);
  if (x->dtype != KILN_F32) FAIL("fma_scalar takes float32");
  set_shape(out, x->dtype, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_infer_concrete(const kiln_graph_t* g, const kiln_node_t* n,
                                        kiln_value_t* out) {
  memset(out, 0, sizeof(*out));
  out->producer = -1;
  /* What the op's record fixes: its arity, and zeros past its layouts. */
  if ((unsigned)n->op >= KILN_OP_COUNT) FAIL("unknown op %d", (int)n->op);
  if (n->n_inputs < kiln_op_min_inputs(n->op) || n->n_inputs > kiln_op_max_inputs(n->op))
    FAIL("%s takes %d to %d inputs, got %d", kiln_op_name(n->op), kiln_op_min_inputs(n->op),
         kiln_op_max_inputs(n->op), n->n_inputs);
  for (int32_t i = kiln_op_n_params(n->op); i < KILN_MAX_PARAMS; ++i)
    if (n->params[i]) FAIL("%s has %d params, param %d is set", kiln_op_name(n->op),
                           kiln_op_n_params(n->op), i);
  for (int32_t i = kiln_op_n_fparams(n->op); i < KILN_MAX_FPARAMS; ++i)
    if (n->fparams[i] != 0.0f) FAIL("%s has %d float params, float param %d is set",
                                    kiln_op_name(n->op), kiln_op_n_fparams(n->op), i);
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    if (n->inputs[i] < -1 || n->inputs[i] >= g->n_values) FAIL("input %d does not exist", i);
    /* Only trailing optional inputs may be absent. */
    if (n->inputs[i] == -1 && i < kiln_op_min_inputs(n->op)) FAIL("input %d is required", i);
  }
  switch (n->op) {
#define KILN_SHAPE_CASE(e, name, lo, hi, family, P, FP, shape, entry) \
  case KILN_OP_##e:                                                   \
    return kiln_shape_##shape(g, n, out);
    KILN_OP_LIST(KILN_SHAPE_CASE)
#undef KILN_SHAPE_CASE
    default:
      break;
  }
  return kiln_status_make(KILN_INTERNAL, "no shape rule for op %d", (int)n->op);
}
