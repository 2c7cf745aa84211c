/* Simplify: chains of views become one strided copy.
 *
 * Attention's head split in a training graph is a chain of views that each
 * become a STRIDED_COPY: nn.MultiheadAttention permutes the packed q/k/v
 * projection, selects q, k and v, reshapes to (S, B*H, D), permutes heads to
 * the front, reshapes to (B, H, S, D), and the scores matmul transposes k.
 * Each copy is a pass over the activations. Composed, each of q, k and v is
 * one copy of the projection, and the intermediate copies are dead.
 *
 * A view here is (dims, element strides, offset) over the dense buffer of a
 * value, as STRIDED_COPY's params. A view over the output of
 * inner = STRIDED_COPY(x) (read through any reshape: the flat order is the
 * same) composes into a view of x when every one of its dims steps one
 * digit of inner's output index (a multiple of that dim's dense stride) and
 * no digit runs past its dim's end for any element (the digits' maxima,
 * summed over the view dims stepping them, stay in range): then no carry
 * happens and the flat-to-x map is affine over the view. Inner dims that are
 * contiguous in x count as one digit (carries between them are affine). Permute, select,
 * slice, expand and the splitting of a dim (heads out of the hidden dim)
 * all compose; a merge of dims that are not contiguous in x does not.
 *
 * (B*H) in (S, B*H, D) is such a merge, so the permute to (B*H, S, D) does
 * not compose by itself; the reshape to (B, H, S, D) after it does, as a
 * strided copy of its own: a RESHAPE of a single-use STRIDED_COPY becomes a
 * STRIDED_COPY when that composes two levels down (so a copy is removed,
 * never added). */
#include <string.h>

#include "compiler/kiln_simplify.h"

typedef struct {
  int32_t rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK];
  int64_t offset;
  int32_t input; /* the value the view reads */
} kiln_view_t;

static void kiln_view_from_params(const kiln_node_t* n, kiln_view_t* v) {
  v->rank = (int32_t)n->params[KILN_P(VIEW, RANK)];
  memcpy(v->dims, n->params + KILN_P(VIEW, DIMS), sizeof(int64_t) * KILN_MAX_RANK);
  memcpy(v->strides, n->params + KILN_P(VIEW, STRIDES), sizeof(int64_t) * KILN_MAX_RANK);
  v->offset = n->params[KILN_P(VIEW, OFFSET)];
  v->input = n->inputs[0];
}

/* Whether every reader of value id is a view (STRIDED_COPY or RESHAPE) and
 * it is no graph output: only then can composing its readers leave it dead.
 * A copy that another op reads stays anyway, and its views are left as they
 * are: composing them would save nothing, and would hide patterns that
 * later passes match on the copy (RoPE's rotate_half: slices of the permuted
 * q feeding the same elementwise chain as q). */
static int kiln_view_read_only_by_views(const kiln_graph_t* g, const kiln_node_t* nodes, int32_t id) {
  for (int32_t i = 0; i < g->n_outputs; ++i)
    if (g->outputs[i] == id) return 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* u = &nodes[i];
    if (u->op == KILN_OP_STRIDED_COPY || u->op == KILN_OP_RESHAPE) continue;
    for (int32_t k = 0; k < u->n_inputs; ++k)
      if (u->inputs[k] == id) return 0;
  }
  return 1;
}

/* One level: v reads the output of a STRIDED_COPY (directly or through a
 * RESHAPE) that only views read; on success v reads that copy's input
 * instead. */
static int kiln_view_compose_once(const kiln_graph_t* g, const kiln_node_t* nodes,
                                  kiln_view_t* v) {
  const kiln_value_t* mid = &g->values[v->input];
  if (mid->kind != KILN_VALUE_INTERMEDIATE) return 0;
  const kiln_node_t* q = &nodes[mid->producer];
  if (q->op == KILN_OP_RESHAPE) {
    const kiln_value_t* w = &g->values[q->inputs[0]];
    if (w->kind != KILN_VALUE_INTERMEDIATE || !kiln_view_read_only_by_views(g, nodes, v->input))
      return 0;
    q = &nodes[w->producer];
  }
  if (q->op != KILN_OP_STRIDED_COPY || !kiln_view_read_only_by_views(g, nodes, q->outputs[0])) return 0;
  /* Composing divides offsets and strides: numbers only. */
  if (kiln_node_is_symbolic(g, q)) return 0;
  for (int32_t d = 0; d < v->rank && d < KILN_MAX_RANK; ++d)
    if (kiln_dim_is_sym(v->dims[d]) || kiln_dim_is_sym(v->strides[d])) return 0;
  if (kiln_dim_is_sym(v->offset)) return 0;
  int32_t rq = (int32_t)q->params[KILN_P(VIEW, RANK)];
  if (rq < 1 || rq > KILN_MAX_RANK || v->rank < 1 || v->rank > KILN_MAX_RANK) return 0;
  /* q's view coalesced: size-1 dims dropped, and a dim merged into the next
   * finer one where the two are contiguous in x (same flat-to-x map, and a
   * view dim may then step across both). */
  int64_t d1[KILN_MAX_RANK], s1[KILN_MAX_RANK];
  int32_t r1 = 0;
  for (int32_t k = 0; k < rq; ++k) {
    int64_t dk = q->params[KILN_P(VIEW, DIMS) + k], sk = q->params[KILN_P(VIEW, STRIDES) + k];
    if (dk == 1) continue;
    if (r1 && s1[r1 - 1] == dk * sk) {
      d1[r1 - 1] *= dk;
      s1[r1 - 1] = sk;
    } else {
      d1[r1] = dk;
      s1[r1++] = sk;
    }
  }
  if (r1 == 0) {
    d1[0] = 1;
    s1[0] = 0;
    r1 = 1;
  }
  int64_t dense[KILN_MAX_RANK], digit[KILN_MAX_RANK], total = 1;
  for (int32_t k = r1 - 1; k >= 0; --k) {
    if (d1[k] < 1) return 0;
    dense[k] = total;
    digit[k] = (v->offset / total) % d1[k];
    total *= d1[k];
  }
  if (v->offset < 0 || v->offset >= total) return 0;
  int64_t strides[KILN_MAX_RANK], offset = q->params[KILN_P(VIEW, OFFSET)];
  for (int32_t k = 0; k < r1; ++k) offset += digit[k] * s1[k];
  for (int32_t d = 0; d < v->rank; ++d) {
    int64_t size = v->dims[d], step = v->strides[d];
    if (size == 1 || step == 0) {
      strides[d] = 0;
      continue;
    }
    if (step < 0) return 0;
    /* The coarsest digit whose dense stride is at most step. */
    int32_t k = r1 - 1;
    while (k > 0 && dense[k - 1] <= step) --k;
    if (step % dense[k]) return 0;
    int64_t m = step / dense[k];
    digit[k] += (size - 1) * m;
    if (digit[k] >= d1[k]) return 0;
    strides[d] = m * s1[k];
  }
  memcpy(v->strides, strides, sizeof(int64_t) * (size_t)v->rank);
  v->offset = offset;
  v->input = q->inputs[0];
  return 1;
}

static void kiln_view_to_node(const kiln_view_t* v, kiln_node_t* n) {
  n->op = KILN_OP_STRIDED_COPY;
  n->inputs[0] = v->input;
  memset(n->params, 0, sizeof(n->params));
  n->params[KILN_P(VIEW, RANK)] = v->rank;
  memcpy(n->params + KILN_P(VIEW, DIMS), v->dims, sizeof(int64_t) * (size_t)v->rank);
  memcpy(n->params + KILN_P(VIEW, STRIDES), v->strides, sizeof(int64_t) * (size_t)v->rank);
  n->params[KILN_P(VIEW, OFFSET)] = v->offset;
}

int kiln_simplify_compose_views(const kiln_graph_t* g, const kiln_node_t* nodes,
                                const int32_t* uses, kiln_node_t* n) {
  kiln_view_t v;
  if (n->op == KILN_OP_STRIDED_COPY) {
    kiln_view_from_params(n, &v);
    int composed = 0;
    /* Inner copies were composed when they were visited, so this is
     * usually one step; the bound only guards the loop. */
    for (int i = 0; i < 2 * KILN_MAX_RANK && kiln_view_compose_once(g, nodes, &v); ++i) composed = 1;
    if (composed) kiln_view_to_node(&v, n);
    return composed;
  }
  if (n->op != KILN_OP_RESHAPE || kiln_node_is_symbolic(g, n)) return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  const kiln_value_t* y = &g->values[n->outputs[0]];
  if (x->kind != KILN_VALUE_INTERMEDIATE || nodes[x->producer].op != KILN_OP_STRIDED_COPY ||
      uses[n->inputs[0]] != 1 || y->rank < 1 || y->rank > KILN_MAX_RANK)
    return 0;
  v.rank = y->rank;
  v.offset = 0;
  v.input = n->inputs[0];
  int64_t s = 1;
  for (int32_t d = y->rank - 1; d >= 0; --d) {
    v.dims[d] = y->shape[d];
    v.strides[d] = s;
    s *= y->shape[d];
  }
  if (!kiln_view_compose_once(g, nodes, &v) || !kiln_view_compose_once(g, nodes, &v)) return 0;
  while (kiln_view_compose_once(g, nodes, &v)) {
  }
  kiln_view_to_node(&v, n);
  return 1;
}
