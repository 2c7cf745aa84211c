/* Simplification: one forward sweep of local rewrites over a working copy of
 * the nodes, then emission of what the graph outputs still reach.
 *
 * Per node, in order:
 *   1. its inputs become their canonical values (what earlier rewrites
 *      replaced them by);
 *   2. a reshape of a reshape reads the first reshape's input, and chains
 *      of strided copies and reshapes become one strided copy when the
 *      views compose (kiln_simplify_views.c);
 *   3. identities make the node's output its input: a where of a constant
 *      condition its branch, a reshape or strided
 *      copy to the same shape, a cast to the same dtype, x·1, x/1, x−0,
 *      x+(−0), and x+0 for integers (x+0 in floating point is not folded:
 *      −0 + 0 is +0, so it is not an identity bit for bit), and a transpose
 *      of a transpose (AOTAutograd's t(t(dW)));
 *   4. decomposed GELU, SiLU and RMSNorm become the fused op
 *      (kiln_simplify_patterns.c); a matmul operand that is a transpose of
 *      the last two dims is read transposed in place (the GEMM packs through
 *      strides), which removes every weight and gradient transpose copy of
 *      a training graph (not A's when B is a 2-d constant: that MATMUL is a
 *      linear layer, which kiln_pass_fuse_gemm makes a LINEAR on x as laid
 *      out, its weight packed and quantized ahead of time); a conv reading a
 *      symmetric zero pad takes it as its own padding
 *      (kiln_simplify_conv_pad.c); an elementwise binary reads an expand's
 *      source, broadcasting it itself (kiln_simplify_broadcast.c);
 *   5. common subexpressions: a node equal to an earlier one (op, canonical
 *      inputs, params) is replaced by it. Every kiln op is pure.
 * Nodes no graph output reaches any more are dropped. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "compiler/kiln_simplify.h"

static int kiln_simplify_is_identity(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  const kiln_value_t* x = &g->values[n->inputs[0]];
  if (!kiln_value_same_type(x, y)) return 0;
  int64_t bytes;
  double c;
  switch (n->op) {
    case KILN_OP_RESHAPE:
    case KILN_OP_CAST:
      return 1;
    case KILN_OP_STRIDED_COPY:
      return kiln_node_is_view(g, n, &bytes) && bytes == 0;
    case KILN_OP_MUL:
    case KILN_OP_DIV:
      return kiln_simplify_scalar(g, n->inputs[1], &c) && c == 1.0;
    case KILN_OP_SUB:
      return kiln_simplify_scalar(g, n->inputs[1], &c) && c == 0.0;
    case KILN_OP_ADD:
      return kiln_simplify_scalar(g, n->inputs[1], &c) && c == 0.0 &&
             (!kiln_dtype_is_float(y->dtype) || signbit(c));
    case KILN_OP_FMA_SCALAR:
      return n->fparams[KILN_FP(FMA, SCALE)] == 1.0f && n->fparams[KILN_FP(FMA, SHIFT)] == 0.0f &&
             signbit(n->fparams[KILN_FP(FMA, SHIFT)]);
    default:
      return 0;
  }
}

/* The input WHERE node n picks whatever its data: a constant one-element
 * bool condition, the picked branch of n's result type; else -1. */
static int32_t kiln_simplify_constant_where(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_WHERE || n->n_inputs != 3) return -1;
  const kiln_value_t* c = &g->values[n->inputs[0]];
  if (c->kind != KILN_VALUE_CONSTANT || c->dtype != KILN_BOOL || c->layout != KILN_LAYOUT_DENSE ||
      kiln_value_numel(c) != 1 || !c->data || c->nbytes < 1)
    return -1;
  const int32_t pick = ((const uint8_t*)c->data)[0] ? n->inputs[1] : n->inputs[2];
  return kiln_value_same_type(&g->values[pick], &g->values[n->outputs[0]]) ? pick : -1;
}

/* MUL and ADD by a constant on the left: swap so the identity check sees it
 * on the right (both commute exactly). */
static void kiln_simplify_constant_right(const kiln_graph_t* g, kiln_node_t* n) {
  double c;
  if ((n->op == KILN_OP_MUL || n->op == KILN_OP_ADD) && kiln_simplify_scalar(g, n->inputs[0], &c) &&
      !kiln_simplify_scalar(g, n->inputs[1], &c)) {
    int32_t t = n->inputs[0];
    n->inputs[0] = n->inputs[1];
    n->inputs[1] = t;
  }
}

/* y = x.transpose(-1, -2) for a dense x, nothing else moved. */
static int kiln_simplify_is_last2_transpose(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_STRIDED_COPY || n->params[KILN_P(VIEW, OFFSET)] != 0) return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  const kiln_value_t* y = &g->values[n->outputs[0]];
  int32_t r = y->rank;
  if (r < 2 || x->rank != r) return 0;
  int64_t strides[KILN_MAX_RANK], s = 1;
  for (int32_t d = r - 1; d >= 0; --d) {
    strides[d] = s;
    s = kiln_graph_dim_mul(g, s, x->shape[d]);
  }
  for (int32_t d = 0; d < r; ++d) {
    int32_t src = d == r - 1 ? r - 2 : d == r - 2 ? r - 1 : d;
    if (y->shape[d] != x->shape[src]) return 0;
    if (y->shape[d] != 1 && n->params[KILN_P(VIEW, STRIDES) + d] != strides[src]) return 0;
  }
  return 1;
}

/* A MATMUL by a constant weight is a linear layer
 * (kiln_matmul_has_linear_weight: kiln_pass_fuse_gemm makes it a LINEAR, B
 * packed ahead of time, quantized or bf16 as the weight options say, the
 * epilogue fused). LINEAR reads x as it lies, so A's transpose is kept as a
 * copy there: absorbed, the MATMUL stayed one and its constant weight was
 * neither packed nor quantized (nn.Linear on x.transpose(-1, -2) under
 * weights_dtype="int4" ran in fp32: fuzzer seed 2 graph 30 of the quant
 * mode; a bmm by a (1, K, N) constant of a permuted x likewise: seed 20116
 * graph 25940). */
static int kiln_simplify_matmul_transposes(const kiln_graph_t* g, const kiln_node_t* nodes,
                                           kiln_node_t* n) {
  int changed = 0;
  for (int i = 0; n->op == KILN_OP_MATMUL && i < 2; ++i) {
    const kiln_value_t* v = &g->values[n->inputs[i]];
    if (v->kind != KILN_VALUE_INTERMEDIATE) continue;
    if (i == 0 && kiln_matmul_has_linear_weight(g, n)) continue;
    const kiln_node_t* t = &nodes[v->producer];
    if (!kiln_simplify_is_last2_transpose(g, t)) continue;
    n->inputs[i] = t->inputs[0];
    n->params[KILN_P(MATMUL, FLAGS)] ^= i == 0 ? KILN_MATMUL_TRANSPOSE_A : KILN_MATMUL_TRANSPOSE_B;
    changed = 1;
  }
  return changed;
}

static uint64_t kiln_simplify_hash(const kiln_node_t* n) {
  uint64_t h = 1469598103934665603ull;
#define KILN_MIX(x) h = (h ^ (uint64_t)(x)) * 1099511628211ull
  KILN_MIX(n->op);
  KILN_MIX(n->n_inputs);
  for (int32_t i = 0; i < n->n_inputs; ++i) KILN_MIX((uint32_t)n->inputs[i]);
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i) KILN_MIX(n->params[i]);
  for (int32_t i = 0; i < KILN_MAX_FPARAMS; ++i) {
    uint32_t bits;
    memcpy(&bits, &n->fparams[i], sizeof bits);
    KILN_MIX(bits);
  }
#undef KILN_MIX
  return h;
}

static int kiln_simplify_same_node(const kiln_node_t* a, const kiln_node_t* b) {
  return a->op == b->op && a->n_inputs == b->n_inputs &&
         !memcmp(a->inputs, b->inputs, sizeof(int32_t) * (size_t)a->n_inputs) &&
         !memcmp(a->params, b->params, sizeof(a->params)) &&
         !memcmp(a->fparams, b->fparams, sizeof(a->fparams));
}

kiln_status_t kiln_pass_simplify(kiln_graph_t* g, kiln_graph_t** out_graph, int32_t* out_rewrites) {
  *out_graph = NULL;
  *out_rewrites = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  size_t table_size = 16;
  while (table_size < 2 * (size_t)nn) table_size *= 2;
  kiln_node_t* nodes = malloc(sizeof(kiln_node_t) * (size_t)(nn + 1));
  int32_t* canon = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  char* live = calloc((size_t)nv + 1, 1);
  int32_t* table = malloc(sizeof(int32_t) * table_size); /* node index, or -1 */
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  kiln_rewriter_t rw;
  kiln_status_t s = (!nodes || !canon || !live || !table || !uses)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "simplify pass")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done_early;
  if (nn) memcpy(nodes, g->nodes, sizeof(kiln_node_t) * (size_t)nn);
  for (int32_t v = 0; v < nv; ++v) canon[v] = v;
  kiln_graph_count_uses(g, uses);
  for (size_t i = 0; i < table_size; ++i) table[i] = -1;

  for (int32_t ni = 0; ni < nn; ++ni) {
    kiln_node_t* n = &nodes[ni];
    int32_t y = n->outputs[0];
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0) n->inputs[i] = canon[n->inputs[i]];
    if (n->op == KILN_OP_RESHAPE) {
      const kiln_value_t* x = &g->values[n->inputs[0]];
      if (x->kind == KILN_VALUE_INTERMEDIATE && nodes[x->producer].op == KILN_OP_RESHAPE) {
        n->inputs[0] = nodes[x->producer].inputs[0];
        ++*out_rewrites;
      }
    }
    kiln_simplify_constant_right(g, n);
    /* Not when n would vanish anyway (an identity, or a transpose a matmul
     * reads in place): composed, it might become a copy. */
    if (!kiln_simplify_is_identity(g, n) && !kiln_simplify_is_last2_transpose(g, n))
      *out_rewrites += kiln_simplify_compose_views(g, nodes, uses, n);
    const kiln_value_t* x0 = &g->values[n->inputs[0]];
    if (kiln_simplify_is_last2_transpose(g, n) && x0->kind == KILN_VALUE_INTERMEDIATE &&
        kiln_simplify_is_last2_transpose(g, &nodes[x0->producer]) &&
        kiln_value_same_type(&g->values[nodes[x0->producer].inputs[0]], &g->values[y])) {
      canon[y] = nodes[x0->producer].inputs[0];
      ++*out_rewrites;
      continue;
    }
    /* A bf16 or fp16 value widened to fp32 and cast back is itself: the
     * widening is exact and the narrowing of a value it holds exactly
     * rounds to that value (autocast's graphs round a tensor, widen it for
     * one reader and narrow it again for another). */
    if (n->op == KILN_OP_CAST && x0->kind == KILN_VALUE_INTERMEDIATE &&
        nodes[x0->producer].op == KILN_OP_CAST && x0->dtype == KILN_F32 &&
        (g->values[y].dtype == KILN_BF16 || g->values[y].dtype == KILN_F16) &&
        kiln_value_same_type(&g->values[nodes[x0->producer].inputs[0]], &g->values[y])) {
      canon[y] = nodes[x0->producer].inputs[0];
      ++*out_rewrites;
      continue;
    }
    if (kiln_simplify_is_identity(g, n)) {
      canon[y] = n->inputs[0];
      ++*out_rewrites;
      continue;
    }
    /* where of a constant scalar condition (torch.lerp's decomposition
     * tests its scalar weight < 0.5): the branch it picks, when that has
     * the result's type; the other branch dies. */
    const int32_t picked = kiln_simplify_constant_where(g, n);
    if (picked >= 0) {
      canon[y] = picked;
      ++*out_rewrites;
      continue;
    }
    *out_rewrites += kiln_simplify_fold_expand(g, nodes, n);
    *out_rewrites += kiln_simplify_match_pattern(g, nodes, uses, n);
    *out_rewrites += kiln_simplify_fold_conv_pad(g, nodes, n);
    *out_rewrites += kiln_simplify_matmul_transposes(g, nodes, n);
    uint64_t h = kiln_simplify_hash(n);
    for (size_t slot = h & (table_size - 1);; slot = (slot + 1) & (table_size - 1)) {
      if (table[slot] < 0) {
        table[slot] = ni;
        break;
      }
      if (kiln_simplify_same_node(&nodes[table[slot]], n)) {
        canon[y] = nodes[table[slot]].outputs[0];
        ++*out_rewrites;
        break;
      }
    }
  }

  /* What the outputs reach, through the rewritten nodes. */
  for (int32_t o = 0; o < g->n_outputs; ++o) live[canon[g->outputs[o]]] = 1;
  for (int32_t ni = nn - 1; ni >= 0; --ni) {
    const kiln_node_t* n = &nodes[ni];
    if (canon[n->outputs[0]] != n->outputs[0] || !live[n->outputs[0]]) continue;
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0) live[n->inputs[i]] = 1;
  }
  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &nodes[ni];
    if (canon[n->outputs[0]] != n->outputs[0] || !live[n->outputs[0]]) continue;
    s = kiln_rewriter_emit(&rw, n->op, n->inputs, n->n_inputs, n->params, n->fparams, n->origin,
                           n->outputs[0]);
  }
  /* Outputs that were replaced read their replacement. */
  for (int32_t o = 0; o < g->n_outputs && !s; ++o) {
    int32_t v = g->outputs[o];
    if (canon[v] != v) s = kiln_rewriter_value(&rw, canon[v], &rw.remap[v]);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
done_early:
  free(nodes);
  free(canon);
  free(live);
  free(table);
  free(uses);
  return s;
}
