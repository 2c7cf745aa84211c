/* Shape rules of PAD, STRIDED_SCATTER, SCATTER, SCAN and ARGSORT. As in
 * kiln_shape_infer.c, every param is untrusted (it may come from a file) and
 * is bounded without overflow before the kernels rely on it: a verified node
 * cannot make its kernel read or write outside its buffers. */
#include "ir/kiln_shape_common.h"
#include "ir/kiln_shape_rules.h"

#include <string.h>

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* Sizes and pads beyond 2^40 are refused: products of a few stay in int64. */
#define KILN_MV_LIM ((int64_t)1 << 40)

static const kiln_value_t* mv_input(const kiln_graph_t* g, const kiln_node_t* n, int i) {
  if (i >= n->n_inputs || n->inputs[i] < 0 || n->inputs[i] >= g->n_values) return NULL;
  return &g->values[n->inputs[i]];
}

static void mv_set(kiln_value_t* out, kiln_dtype_t dtype, int32_t rank, const int64_t* shape) {
  out->dtype = dtype;
  out->rank = rank;
  memset(out->shape, 0, sizeof(out->shape));
  if (rank) memcpy(out->shape, shape, (size_t)rank * sizeof(int64_t));
}

static kiln_status_t mv_check_axis(int64_t axis, int32_t rank) {
  if (axis < 0 || axis >= (rank ? rank : 1))
    FAIL("axis %lld is outside a rank-%d tensor", (long long)axis, rank);
  return kiln_ok();
}

kiln_status_t kiln_shape_pad(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = mv_input(g, n, 0);
  const int64_t* before = n->params + KILN_P(PAD, BEFORE);
  const int64_t* after = n->params + KILN_P(PAD, AFTER);
  int64_t mode = n->params[KILN_P(PAD, MODE)];
  if (mode < 0 || mode > 2) FAIL("pad mode %lld is not 0 (constant), 1 (reflect), 2 (replicate)",
                                 (long long)mode);
  int64_t shape[KILN_MAX_RANK], numel = 1;
  for (int32_t d = 0; d < KILN_MAX_RANK; ++d) {
    int64_t lo = before[d], hi = after[d];
    if (d >= x->rank) {
      if (lo || hi) FAIL("pad of dimension %d of a rank-%d tensor", d, x->rank);
      continue;
    }
    int64_t size = x->shape[d];
    if (lo < -KILN_MV_LIM || lo > KILN_MV_LIM || hi < -KILN_MV_LIM || hi > KILN_MV_LIM)
      FAIL("pad of dimension %d out of range", d);
    if (mode == 1 && (lo >= size || hi >= size) && (lo || hi))
      FAIL("reflect pads (%lld, %lld) must be less than dimension %d's size %lld", (long long)lo,
           (long long)hi, d, (long long)size);
    if (mode == 2 && size == 0 && (lo || hi)) FAIL("replicate pad of an empty dimension %d", d);
    shape[d] = size + lo + hi;
    if (shape[d] < 0 || shape[d] > KILN_MV_LIM)
      FAIL("dimension %d padded to size %lld", d, (long long)shape[d]);
    if (shape[d] && numel > ((int64_t)1 << 44) / shape[d]) FAIL("more than 2^44 elements");
    numel *= shape[d];
  }
  mv_set(out, x->dtype, x->rank, shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_strided_scatter(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *base = mv_input(g, n, 0), *src = mv_input(g, n, 1);
  const int64_t* p = n->params;
  const int64_t* dims = p + KILN_P(VIEW, DIMS);
  const int64_t rank = p[KILN_P(VIEW, RANK)];
  if (rank < 0 || rank > KILN_MAX_RANK) FAIL("rank %lld is outside 0..%d", (long long)rank,
                                             KILN_MAX_RANK);
  int32_t r = (int32_t)rank;
  if (src->dtype != base->dtype) FAIL("src's dtype differs from base's");
  if (src->rank != r) FAIL("src has rank %d, the view %d", src->rank, r);
  int64_t numel = 1;
  for (int32_t d = 0; d < r; ++d) {
    if (dims[d] != src->shape[d])
      FAIL("src has size %lld in dimension %d, the view %lld", (long long)src->shape[d], d,
           (long long)dims[d]);
    numel *= dims[d]; /* src's shape was itself validated */
  }
  /* Every element written must lie in y (base's shape), bounded as in
   * STRIDED_COPY's rule. */
  int64_t lo, hi;
  KILN_RETURN_IF_ERROR(kiln_shape_view_extent(p, r, &lo, &hi));
  if (numel && (lo < 0 || hi >= kiln_value_numel(base)))
    FAIL("view writes elements %lld..%lld of a tensor of %lld", (long long)lo, (long long)hi,
         (long long)kiln_value_numel(base));
  mv_set(out, base->dtype, base->rank, base->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_scatter(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t *x = mv_input(g, n, 0), *idx = mv_input(g, n, 1), *src = mv_input(g, n, 2);
  int64_t axis = n->params[KILN_P(SCATTER, AXIS)], reduce = n->params[KILN_P(SCATTER, REDUCE)];
  int64_t include_self = n->params[KILN_P(SCATTER, INCLUDE_SELF)];
  int64_t wrap = n->params[KILN_P(SCATTER, WRAP_NEGATIVE)];
  if (idx->dtype != KILN_I64 && idx->dtype != KILN_I32) FAIL("index must be int64 or int32");
  if (x->rank == 0) FAIL("scatter into a 0-d tensor");
  KILN_RETURN_IF_ERROR(mv_check_axis(axis, x->rank));
  if (idx->rank != x->rank || src->rank != x->rank)
    FAIL("x, index and src must have one rank (%d, %d, %d)", x->rank, idx->rank, src->rank);
  if (src->dtype != x->dtype) FAIL("src's dtype differs from x's");
  if (reduce < 0 || reduce > 5) FAIL("unknown scatter reduction %lld", (long long)reduce);
  if (include_self < 0 || include_self > 1) FAIL("include_self is 0 or 1");
  if (wrap < 0 || wrap > 1) FAIL("negative-index mode (wrap_negative) is 0 or 1");
  if (reduce && x->dtype != KILN_F32 && x->dtype != KILN_I64 && x->dtype != KILN_I32 &&
      !(reduce != 3 && x->dtype == KILN_BOOL))
    FAIL("scatter reductions take float32, int64 or int32 (all but mean also bool), not %s",
         kiln_dtype_name(x->dtype));
  for (int32_t d = 0; d < x->rank; ++d) {
    if (idx->shape[d] > src->shape[d])
      FAIL("index dimension %d (%lld) is larger than src's (%lld)", d, (long long)idx->shape[d],
           (long long)src->shape[d]);
    if (d != axis && idx->shape[d] > x->shape[d])
      FAIL("index dimension %d (%lld) is larger than x's (%lld)", d, (long long)idx->shape[d],
           (long long)x->shape[d]);
  }
  mv_set(out, x->dtype, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_scan(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = mv_input(g, n, 0);
  int64_t kind = n->params[KILN_P(SCAN, KIND)];
  KILN_RETURN_IF_ERROR(mv_check_axis(n->params[KILN_P(SCAN, AXIS)], x->rank));
  if (kind < 0 || kind > 1) FAIL("scan op %lld is not 0 (sum) or 1 (product)", (long long)kind);
  if (x->dtype != KILN_F32 && x->dtype != KILN_I64 && x->dtype != KILN_I32)
    FAIL("scan takes float32, int64 or int32, not %s", kiln_dtype_name(x->dtype));
  mv_set(out, x->dtype, x->rank, x->shape);
  return kiln_ok();
}

kiln_status_t kiln_shape_argsort(const kiln_graph_t* g, const kiln_node_t* n, kiln_value_t* out) {
  const kiln_value_t* x = mv_input(g, n, 0);
  int64_t axis = n->params[KILN_P(ARGSORT, AXIS)], k = n->params[KILN_P(ARGSORT, K)];
  int64_t descending = n->params[KILN_P(ARGSORT, DESCENDING)];
  KILN_RETURN_IF_ERROR(mv_check_axis(axis, x->rank));
  if (descending < 0 || descending > 1) FAIL("descending is 0 or 1");
  if (x->dtype != KILN_F32 && x->dtype != KILN_I64 && x->dtype != KILN_I32 &&
      x->dtype != KILN_BOOL)
    FAIL("argsort takes float32, int64, int32 or bool, not %s", kiln_dtype_name(x->dtype));
  int64_t len = x->rank ? x->shape[axis] : 1;
  if (k < 0 || k > len) FAIL("k = %lld is outside 0..%lld", (long long)k, (long long)len);
  mv_set(out, KILN_I64, x->rank, x->shape);
  if (x->rank) out->shape[axis] = k;
  return kiln_ok();
}
