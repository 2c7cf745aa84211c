/* Gated-linear-unit fusion: the two GEMMs of a SwiGLU / GeGLU MLP (Llama's,
 * Qwen's, Mistral's, Gemma's) become one over their concatenated weights.
 *
 *     a = LINEAR(x, Wa) with an activation     b = LINEAR(x, Wb)
 *     y = MUL(a, b)                            (or MUL(b, a))
 * with Wa, Wb float32 constants of one shape (K, N) and layout (bf16 ones
 * held narrow too, KILN_LAYOUT_WIDENED_BF16(_T): joined as bf16, except
 * torch's rows the target reads in place), no bias,
 * residual or other flag on either, a and b read only by the MUL, becomes
 *     c = LINEAR(x, [Wa | Wb])                 (K, 2N)
 *     y = MUL(act(c[..., :N]), c[..., N:])
 * which eltwise fusion (later) turns into one kernel reading c's two halves
 * in place. x may be two RESHAPEs of one value to one shape (the GEMM
 * fusion's view of x, made once per LINEAR).
 *
 * Why: a decode step runs each GEMM as a GEMV streaming its weight. One GEMV
 * over both weights streams the same bytes with one dispatch to the threads
 * instead of two, quantizes x once (int8 activations) and splits 2N columns
 * over the threads instead of N twice (gen_llama's MLP, int4 g32 with int8
 * activations, 2 threads on Zen 3: 121 us against 2 x 75 us).
 *
 * The concatenated weight is a new constant (its key names both sources', so
 * the graphs made from one model share its packed form) that the pack pass
 * replaces with its packed form: a descriptor of the two weights where they
 * lie when the pack pass will run and they are borrowed (frozen parameters,
 * kiln_joined_const.h), else a transient copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_activation.h"
#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "ir/kiln_joined_const.h"

/* The elementwise op computing activation act, or KILN_OP_COUNT. */
static kiln_op_t kiln_glu_act_op(int64_t act) {
  static const kiln_op_t ops[] = {KILN_OP_RELU, KILN_OP_GELU, KILN_OP_GELU_TANH,
                                  KILN_OP_SILU, KILN_OP_SIGMOID, KILN_OP_TANH};
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); ++i) {
    int64_t a;
    if (kiln_op_as_activation(ops[i], &a) && a == act) return ops[i];
  }
  return KILN_OP_COUNT;
}

/* 1 when x and y are the same value, or RESHAPEs of one value to one type. */
static int kiln_glu_same_x(const kiln_graph_t* g, int32_t x, int32_t y) {
  if (x == y) return 1;
  const kiln_value_t *xv = &g->values[x], *yv = &g->values[y];
  if (xv->kind != KILN_VALUE_INTERMEDIATE || yv->kind != KILN_VALUE_INTERMEDIATE ||
      !kiln_value_same_type(xv, yv))
    return 0;
  const kiln_node_t *p = &g->nodes[xv->producer], *q = &g->nodes[yv->producer];
  return p->op == KILN_OP_RESHAPE && q->op == KILN_OP_RESHAPE && p->inputs[0] == q->inputs[0];
}

/* What the pack pass will ask (kiln_pass_weight_read_in_place). */
typedef struct {
  const kiln_hal_target_t* target;
  const kiln_hal_weights_t* weights;
} kiln_glu_in_place_t;

/* A LINEAR that can take part: a float32 constant weight (K, N) dense or
 * stored transposed (as float32 or bf16 numbers, but not torch's bf16 rows
 * when those are read in place), no bias or residual, a float32 output
 * read once. */
static int kiln_glu_linear(const kiln_graph_t* g, const int32_t* uses,
                           const kiln_glu_in_place_t* ip, int32_t v) {
  const kiln_value_t* y = &g->values[v];
  if (y->kind != KILN_VALUE_INTERMEDIATE || y->dtype != KILN_F32 || uses[v] != 1) return 0;
  const kiln_node_t* n = &g->nodes[y->producer];
  if (n->op != KILN_OP_LINEAR || (n->n_inputs > 2 && n->inputs[2] >= 0) ||
      (n->n_inputs > 3 && n->inputs[3] >= 0) || n->params[KILN_P(LINEAR, ROUND_Y)])
    return 0;
  const kiln_value_t* w = &g->values[n->inputs[1]];
  return w->kind == KILN_VALUE_CONSTANT && w->dtype == KILN_F32 && w->rank == 2 && w->data &&
         (w->layout == KILN_LAYOUT_DENSE || w->layout == KILN_LAYOUT_TRANSPOSED_2D ||
          kiln_layout_is_widened_bf16(w->layout)) &&
         !kiln_pass_weight_read_in_place(g, n, ip->target, ip->weights);
}

/* For a MUL node: its gate LINEAR (with the activation) and its plain one
 * when they pair up, else 0. */
static int kiln_glu_match(const kiln_graph_t* g, const int32_t* uses,
                          const kiln_glu_in_place_t* ip, const kiln_node_t* mul,
                          int32_t* out_gate, int32_t* out_up) {
  if (mul->op != KILN_OP_MUL || mul->n_inputs != 2) return 0;
  for (int order = 0; order < 2; ++order) {
    int32_t a = mul->inputs[order], b = mul->inputs[1 - order];
    if (a == b || !kiln_glu_linear(g, uses, ip, a) || !kiln_glu_linear(g, uses, ip, b)) continue;
    const kiln_node_t *na = &g->nodes[g->values[a].producer], *nb = &g->nodes[g->values[b].producer];
    int64_t pa[KILN_MAX_PARAMS];
    memcpy(pa, na->params, sizeof(pa));
    pa[KILN_P(LINEAR, ACT)] = KILN_ACT_NONE;
    const kiln_value_t *wa = &g->values[na->inputs[1]], *wb = &g->values[nb->inputs[1]];
    if (na->params[KILN_P(LINEAR, ACT)] == KILN_ACT_NONE ||
        kiln_glu_act_op(na->params[KILN_P(LINEAR, ACT)]) == KILN_OP_COUNT ||
        memcmp(pa, nb->params, sizeof(pa)) != 0 || !kiln_glu_same_x(g, na->inputs[0], nb->inputs[0]) ||
        !kiln_value_same_type(wa, wb) || wa->layout != wb->layout ||
        !kiln_value_same_type(&g->values[a], &g->values[b]) ||
        !kiln_value_same_type(&g->values[a], &g->values[mul->outputs[0]]))
      continue;
    *out_gate = g->values[a].producer;
    *out_up = g->values[b].producer;
    return 1;
  }
  return 0;
}

/* Bytes the graph owns or shares (may go with the old graph), not borrowed. */
static int kiln_glu_borrowed(const kiln_value_t* w) { return !w->owned_data && !w->shared; }

/* [Wa | Wb] (K, 2N) in the weights' layout, added to dst: a descriptor of
 * the two halves where they lie when `joined` allows one and both are
 * borrowed (they outlive the compile), else a copy. */
static kiln_status_t kiln_glu_concat(kiln_graph_t* dst, const kiln_value_t* wa,
                                     const kiln_value_t* wb, int joined, int32_t* out_id) {
  int64_t k = wa->shape[0], n = wa->shape[1];
  int64_t shape[2] = {k, 2 * n};
  char name[256];
  snprintf(name, sizeof name, "%s+%s", wa->name ? wa->name : "?", wb->name ? wb->name : "?");
  if (joined && kiln_glu_borrowed(wa) && kiln_glu_borrowed(wb)) {
    kiln_joined_const_t* d;
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(dst->allocator, sizeof(*d), (void**)&d));
    memset(d, 0, sizeof(*d));
    d->part[0] = wa->data;
    d->part[1] = wb->data;
    d->layout = wa->layout;
    KILN_RETURN_IF_ERROR(kiln_graph_add_constant_owned(dst, name, KILN_F32, 2, shape,
                                                       KILN_LAYOUT_JOINED_COLS, d, sizeof(*d),
                                                       out_id));
  } else {
    size_t bytes = 2 * (size_t)(k * n) * kiln_joined_elem_bytes(wa->layout);
    void* data;
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(dst->allocator, bytes, &data));
    kiln_joined_const_copy(k, n, wa->layout, wa->data, wb->data, data);
    KILN_RETURN_IF_ERROR(kiln_graph_add_constant_owned(dst, name, KILN_F32, 2, shape, wa->layout,
                                                       data, bytes, out_id));
  }
  if (!wa->key || !wb->key) return kiln_ok();
  size_t len = strlen(wa->key) + strlen(wb->key) + 8;
  char* key = malloc(len);
  if (!key) return kiln_status_make(KILN_OUT_OF_MEMORY, "glu fusion");
  snprintf(key, len, "glu(%s,%s)", wa->key, wb->key);
  kiln_status_t s = kiln_graph_set_constant_key(dst, *out_id, key);
  free(key);
  return s;
}

/* c[..., off : off + n] of c (..., 2n) as a STRIDED_COPY (the form
 * eltwise fusion reads in place), added to dst. */
static kiln_status_t kiln_glu_half(kiln_graph_t* dst, int32_t c, int64_t off, const char* origin,
                                   int32_t* out_id) {
  const kiln_value_t* cv = &dst->values[c];
  int64_t params[KILN_MAX_PARAMS] = {0};
  int32_t r = cv->rank;
  params[KILN_P(VIEW, RANK)] = r;
  int64_t stride = 1;
  for (int32_t d = r - 1; d >= 0; --d) {
    params[KILN_P(VIEW, DIMS) + d] = d == r - 1 ? cv->shape[d] / 2 : cv->shape[d];
    params[KILN_P(VIEW, STRIDES) + d] = stride;
    stride = kiln_graph_dim_mul(dst, stride, cv->shape[d]);
    if (stride == KILN_DIM_INVALID)
      return kiln_status_make(KILN_INTERNAL, "glu fusion: a stride of %s overflows", origin);
  }
  params[KILN_P(VIEW, OFFSET)] = off;
  return kiln_graph_add_node(dst, KILN_OP_STRIDED_COPY, &c, 1, params, KILN_MAX_PARAMS, NULL, 0,
                             origin, out_id);
}

kiln_status_t kiln_pass_fuse_glu(kiln_graph_t* g, int joined, const kiln_hal_target_t* target,
                                 const kiln_hal_weights_t* weights, kiln_graph_t** out_graph,
                                 int32_t* out_fused) {
  const kiln_glu_in_place_t ip = {target, weights};
  *out_graph = NULL;
  *out_fused = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* pair = malloc(sizeof(int32_t) * (size_t)(nn + 1)); /* per LINEAR: its MUL, or -1 */
  int32_t* fused = malloc(sizeof(int32_t) * (size_t)(nn + 1)); /* per MUL: c's dst id, or -1 */
  char* skip = calloc((size_t)nn + 1, 1);
  kiln_rewriter_t rw;
  memset(&rw, 0, sizeof(rw));
  kiln_status_t s = !uses || !pair || !fused || !skip
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "glu fusion")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done;
  kiln_graph_count_uses(g, uses);
  for (int32_t ni = 0; ni < nn; ++ni) pair[ni] = fused[ni] = -1;
  for (int32_t ni = 0; ni < nn; ++ni) {
    int32_t gate, up;
    if (!kiln_glu_match(g, uses, &ip, &g->nodes[ni], &gate, &up) || pair[gate] >= 0 || pair[up] >= 0)
      continue;
    pair[gate] = pair[up] = ni;
    /* The later LINEAR is not emitted, nor the RESHAPE making its x when
     * that is its only reader (the earlier one's x serves both). */
    int32_t later = gate > up ? gate : up, lx = g->nodes[later].inputs[0];
    skip[later] = 1;
    if (lx != g->nodes[gate == later ? up : gate].inputs[0] && uses[lx] == 1)
      skip[g->values[lx].producer] = 1;
  }
  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (skip[ni]) continue;
    if (pair[ni] >= 0) { /* the earlier LINEAR of a pair: the GEMM over both weights */
      const kiln_node_t* mul = &g->nodes[pair[ni]];
      int32_t gate, up, ins[2];
      (void)kiln_glu_match(g, uses, &ip, mul, &gate, &up);
      const kiln_node_t *ng = &g->nodes[gate], *nu = &g->nodes[up];
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, ng->params, sizeof(params));
      params[KILN_P(LINEAR, ACT)] = KILN_ACT_NONE;
      s = kiln_rewriter_value(&rw, n->inputs[0], &ins[0]);
      if (!s) s = kiln_glu_concat(rw.dst, &g->values[ng->inputs[1]], &g->values[nu->inputs[1]], joined,
                                 &ins[1]);
      if (!s)
        s = kiln_graph_add_node(rw.dst, KILN_OP_LINEAR, ins, 2, params, KILN_MAX_PARAMS, n->fparams,
                                KILN_MAX_FPARAMS, ng->origin, &fused[pair[ni]]);
      ++*out_fused;
      continue;
    }
    if (fused[ni] < 0) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    /* The MUL: act(c's first half) times its second, in the MUL's order. */
    int32_t gate, up, lo, hi, act, ins[2];
    (void)kiln_glu_match(g, uses, &ip, n, &gate, &up);
    const kiln_node_t* ng = &g->nodes[gate];
    int64_t n_half = g->values[ng->outputs[0]].shape[g->values[ng->outputs[0]].rank - 1];
    s = kiln_glu_half(rw.dst, fused[ni], 0, ng->origin, &lo);
    if (!s) s = kiln_glu_half(rw.dst, fused[ni], n_half, g->nodes[up].origin, &hi);
    if (!s)
      s = kiln_graph_add_node(rw.dst, kiln_glu_act_op(ng->params[KILN_P(LINEAR, ACT)]), &lo, 1,
                              NULL, 0, NULL, 0, ng->origin, &act);
    if (s) break;
    int gate_first = n->inputs[0] == ng->outputs[0];
    ins[0] = gate_first ? act : hi;
    ins[1] = gate_first ? hi : act;
    s = kiln_graph_add_node(rw.dst, KILN_OP_MUL, ins, 2, n->params, KILN_MAX_PARAMS, n->fparams,
                            KILN_MAX_FPARAMS, n->origin, &rw.remap[n->outputs[0]]);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
done:
  kiln_rewriter_deinitialize(&rw);
  free(uses);
  free(pair);
  free(fused);
  free(skip);
  return s;
}
