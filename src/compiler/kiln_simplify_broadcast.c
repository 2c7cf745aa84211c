/* An expand copied only to be read by a broadcasting op is read as it is.
 *
 * torch decompositions spell broadcasts out: F.normalize divides x by
 * norm.clamp_min(eps).expand_as(x), and an expand becomes a STRIDED_COPY
 * with stride-0 dims, a pass writing the whole (B, S, N) tensor that the
 * division then reads again (a quarter of F.normalize's time). kiln's
 * elementwise binaries and WHERE broadcast their operands themselves, so
 * such an operand is replaced by the copy's source when the copy is a pure
 * expand of it (offset 0; each dim the source's dense stride, or stride 0
 * over a source dim of 1 or a new leading dim) and the op's output keeps
 * its shape and rank (the operands still broadcast to it). The copy then dies
 * unless something else reads it. Concrete sizes only. */
#include "compiler/kiln_simplify.h"
#include "ir/kiln_sym.h"

/* 1 when STRIDED_COPY node p's view is a pure expand of its (dense) input. */
static int kiln_simplify_is_expand(const kiln_graph_t* g, const kiln_node_t* p) {
  const kiln_value_t* s = &g->values[p->inputs[0]];
  const int64_t r = p->params[KILN_P(VIEW, RANK)];
  const int64_t* dims = &p->params[KILN_P(VIEW, DIMS)];
  const int64_t* st = &p->params[KILN_P(VIEW, STRIDES)];
  if (p->params[KILN_P(VIEW, OFFSET)] != 0 || r < s->rank || r > KILN_MAX_RANK ||
      !kiln_layout_is_dense_sized(s->layout))
    return 0;
  int64_t dense = 1;
  for (int64_t d = r - 1; d >= 0; --d) {
    const int64_t sd = d - (r - s->rank);
    if (kiln_dim_is_sym(dims[d]) || kiln_dim_is_sym(st[d])) return 0;
    if (sd < 0) {
      if (st[d] != 0 && dims[d] != 1) return 0;
      continue;
    }
    const int64_t n = s->shape[sd];
    if (kiln_dim_is_sym(n)) return 0;
    if (n == dims[d]) {
      if (n != 1 && st[d] != dense) return 0;
    } else if (n != 1 || st[d] != 0) {
      return 0;
    }
    dense *= n;
  }
  return 1;
}

int kiln_simplify_fold_expand(const kiln_graph_t* g, const kiln_node_t* nodes, kiln_node_t* n) {
  if (!KILN_OP_IS_BINARY(n->op) && !KILN_OP_IS_BINARY_EXT(n->op) && n->op != KILN_OP_WHERE)
    return 0;
  const kiln_value_t* y = &g->values[n->outputs[0]];
  int changed = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* x = &g->values[n->inputs[i]];
    if (x->kind != KILN_VALUE_INTERMEDIATE) continue;
    const kiln_node_t* p = &nodes[x->producer];
    if (p->op != KILN_OP_STRIDED_COPY || !kiln_simplify_is_expand(g, p)) continue;
    /* The operands with the source in x's place must still broadcast to y. */
    int32_t ins[3];
    for (int32_t k = 0; k < n->n_inputs; ++k) ins[k] = k == i ? p->inputs[0] : n->inputs[k];
    /* ... to y's rank too: some operand keeps it (the result's rank is
     * the operands' largest: fuzzer seed 16 graph 191, (1, 16, 3) -> (16, 3)). */
    int same = 0;
    for (int32_t k = 0; k < n->n_inputs; ++k) same |= g->values[ins[k]].rank == y->rank;
    for (int32_t d = 0; d < y->rank && same; ++d) {
      int64_t out = 1;
      for (int32_t k = 0; k < n->n_inputs; ++k) {
        const kiln_value_t* v = &g->values[ins[k]];
        const int32_t vd = d - (y->rank - v->rank);
        const int64_t e = vd >= 0 ? v->shape[vd] : 1;
        if (kiln_dim_is_sym(e)) same = 0;
        else if (e != 1) out = e;
      }
      same = same && out == y->shape[d];
    }
    if (!same) continue;
    n->inputs[i] = p->inputs[0];
    changed = 1;
  }
  return changed;
}
