/* GEMM epilogue fusion and weight packing.
 *
 * The pattern, as captured from nn.Linear (addmm, or matmul then add):
 *     y0 = MATMUL(x, W)           W a constant (K, N) (or (1, .., 1, K, N),
 *                                 x of at least its rank), or a 2-d graph
 *                                 value read as (K, N) or transposed
 *                                 (training)
 *     y1 = ADD(y0, bias)          bias N elements                 (optional)
 *     y2 = ACT(y1)                relu, gelu, silu, sigmoid, tanh (optional)
 *     y3 = ADD(y2, r)             r of y2's shape                 (optional)
 * becomes one LINEAR(x, W', bias, r) with the activation as a parameter,
 * emitted where the chain ends. Reshapes that keep the last dim N may sit
 * anywhere in the chain (transformers' Conv1D: addmm, then view): x is
 * reshaped instead (free: a view), so the LINEAR makes the final shape. Each step is absorbed only if the previous
 * value has exactly one user (and is not a graph output), so nothing else
 * sees the skipped intermediates. W stays dense here; kiln_pass_pack_weights
 * packs it once the other passes are done with it. A W that is not a
 * constant (a training graph's weight) makes a LINEAR only when the chain
 * absorbs something: the bias add after the forward GEMM, or the gradient
 * sum after a backward one (dX = dY W + the other path's dX), each a pass
 * over a cold (M, N) tensor otherwise.
 *
 * With fold_round, a round trip through bf16 after the GEMM's result (a
 * CAST to bf16 read only by a CAST back to float32: autocast's bf16 product
 * read in float32, a weight's gradient or the scores before softmax) is the
 * last step of any MATMUL or chain: LINEAR's ROUND_Y, MATMUL's
 * KILN_MATMUL_ROUND_Y_BF16. The GEMM rounds C where it writes it, instead
 * of a pass that reads and writes C again (3 x 8 MiB a step for the bench's
 * MLP). Exact: the same fp32 C, rounded by the same rule. */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "base/kiln_activation.h"

typedef struct {
  int32_t matmul; /* node index of the MATMUL starting the chain, or -1 */
  int32_t bias, residual;
  int32_t reshaped; /* the value whose shape the LINEAR makes, or -1 */
  int64_t act;
  int32_t x_reshape; /* a RESHAPE making x that the LINEAR looks through, or -1 */
  int w_transposed;  /* W is a graph value stored (N, K) */
  int round_y;       /* the chain ends in a bf16 round trip */
} kiln_fuse_chain_t;

static int kiln_fuse_gemm_is_cast(const kiln_graph_t* g, const kiln_node_t* n, kiln_dtype_t from,
                                  kiln_dtype_t to) {
  return n->op == KILN_OP_CAST && n->n_inputs == 1 && g->values[n->inputs[0]].dtype == from &&
         g->values[n->outputs[0]].dtype == to;
}

/* The node index of the CAST back to float32 when value v's only reader
 * is a CAST to bf16 whose only reader is that CAST, else -1. */
static int32_t kiln_fuse_gemm_round_trip(const kiln_graph_t* g, const int32_t* uses,
                                         const int32_t* user, int32_t v) {
  if (uses[v] != 1 || user[v] < 0) return -1;
  const kiln_node_t* down = &g->nodes[user[v]];
  if (!kiln_fuse_gemm_is_cast(g, down, KILN_F32, KILN_BF16)) return -1;
  int32_t h = down->outputs[0];
  if (uses[h] != 1 || user[h] < 0) return -1;
  return kiln_fuse_gemm_is_cast(g, &g->nodes[user[h]], KILN_BF16, KILN_F32) ? user[h] : -1;
}

/* N floats laid out along the last axis: (N), (1, N), ... */
static int kiln_is_bias(const kiln_value_t* v, int64_t n) {
  if (v->dtype != KILN_F32 || v->layout != KILN_LAYOUT_DENSE || v->rank < 1 ||
      v->shape[v->rank - 1] != n)
    return 0;
  return kiln_value_numel(v) == n;
}

/* The RESHAPE node making x when x has no other user (so the LINEAR can view
 * its source directly), else -1. */
static int32_t kiln_fuse_gemm_reshape_source(const kiln_graph_t* g, const int32_t* uses,
                                             int32_t x) {
  const kiln_value_t* v = &g->values[x];
  if (v->kind != KILN_VALUE_INTERMEDIATE || uses[x] != 1) return -1;
  const kiln_node_t* p = &g->nodes[v->producer];
  return p->op == KILN_OP_RESHAPE && p->inputs[0] >= 0 ? v->producer : -1;
}

kiln_status_t kiln_pass_fuse_gemm(kiln_graph_t* g, int fold_round, kiln_graph_t** out_graph,
                                  int32_t* out_fused) {
  *out_graph = NULL;
  *out_fused = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* user = malloc(sizeof(int32_t) * (size_t)(nv + 1)); /* the sole user node */
  kiln_fuse_chain_t* end_of = malloc(sizeof(kiln_fuse_chain_t) * (size_t)(nn + 1));
  char* skip = calloc((size_t)nn + 1, 1);
  /* A MATMUL that stays one but rounds y: the CAST back it ends at, or -1. */
  int32_t* round_at = malloc(sizeof(int32_t) * (size_t)(nn + 1));
  kiln_rewriter_t rw;
  kiln_status_t s = (!uses || !user || !end_of || !skip || !round_at)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "fusion pass")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done_early;
  kiln_graph_count_uses(g, uses);
  for (int32_t v = 0; v < nv; ++v) user[v] = -1;
  for (int32_t ni = 0; ni < nn; ++ni) {
    end_of[ni].matmul = -1;
    round_at[ni] = -1;
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i)
      if (g->nodes[ni].inputs[i] >= 0) user[g->nodes[ni].inputs[i]] = ni;
  }

  /* Find chains. */
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (n->op != KILN_OP_MATMUL) continue;
    const kiln_value_t* w = &g->values[n->inputs[1]];
    int wconst = w->kind == KILN_VALUE_CONSTANT;
    const int64_t flags = n->params[KILN_P(MATMUL, FLAGS)];
    /* A constant weight: 2-d, or (1, .., 1, K, N), whose LINEAR takes it as
     * (K, N) (the same bytes; a copy of them when other nodes read the
     * constant as it is: fuzzer seed 20020 graph 420), so that it is packed
     * and quantized as the weight options say (it used to stay a MATMUL on
     * the fp32 constant: fuzzer seed 3 graph 239 of the quant mode). The
     * result's batch dims are x's either way. */
    if (wconst ? !kiln_matmul_has_linear_weight(g, n)
               : w->rank != 2 || (flags & ~(int64_t)(KILN_MATMUL_TRANSPOSE_B | KILN_MATMUL_ROUND_A_BF16 |
                                                     KILN_MATMUL_ROUND_B_BF16)) != 0 ||
                     w->layout != KILN_LAYOUT_DENSE)
      continue;
    int wt = !wconst && (flags & KILN_MATMUL_TRANSPOSE_B) != 0;
    int64_t ncols = w->shape[w->rank - 1 - wt];
    kiln_fuse_chain_t c = {ni, -1, -1, -1, KILN_ACT_NONE, -1, wt, 0};
    int32_t cur = n->outputs[0], end = ni;
    int32_t walked[16], n_walked = 0; /* nodes marked skip, to undo for nothing absorbed */
    int stage = 0; /* 0: bias next, 1: activation next, 2: residual next */
    /* At most 16 steps (a longer run of views ends the chain), so that a
     * chain that absorbs nothing can be undone. */
    while (stage < 3 && n_walked < 16) {
      int32_t r6[4], hs[7];
      if (stage <= 1 && n_walked <= 9 && kiln_graph_match_hardswish(g, uses, user, cur, hs)) {
        int free_nodes = end_of[hs[6]].matmul < 0;
        for (int i = 0; i < 7; ++i) free_nodes &= !skip[hs[i]];
        if (free_nodes) {
          c.act = KILN_ACT_HARDSWISH; /* seven nodes: torch's x * clamp(x + 3, 0, 6) / 6 */
          stage = 2;
          walked[n_walked++] = end;
          for (int i = 0; i < 6; ++i) walked[n_walked++] = hs[i];
          skip[end] = 1;
          for (int i = 0; i < 6; ++i) skip[hs[i]] = 1;
          end = hs[6];
          cur = g->nodes[end].outputs[0];
          continue;
        }
      }
      if (stage <= 1 && n_walked <= 12 && kiln_graph_match_relu6(g, uses, user, cur, r6) && !skip[r6[0]] &&
          !skip[r6[1]] && !skip[r6[2]] && !skip[r6[3]] && end_of[r6[3]].matmul < 0) {
        c.act = KILN_ACT_RELU6; /* four nodes: the clamp the front end spells */
        stage = 2;
        walked[n_walked++] = end;
        for (int i = 0; i < 3; ++i) walked[n_walked++] = r6[i];
        skip[end] = skip[r6[0]] = skip[r6[1]] = skip[r6[2]] = 1;
        end = r6[3];
        cur = g->nodes[end].outputs[0];
        continue;
      }
      if (uses[cur] != 1 || user[cur] < 0) break;
      /* A node another chain absorbed (an add of two linears, q(x) + k(x),
       * is a residual for both) belongs to that chain: this one ends here,
       * so its LINEAR is emitted before the node that reads it. */
      if (skip[user[cur]] || end_of[user[cur]].matmul >= 0) break;
      const kiln_node_t* u = &g->nodes[user[cur]];
      int32_t other = -1;
      if (u->op == KILN_OP_ADD) other = u->inputs[0] == cur ? u->inputs[1] : u->inputs[0];
      if (u->op == KILN_OP_ADD && other == cur) break; /* x + x */
      const kiln_value_t* uv = &g->values[u->outputs[0]];
      int64_t act;
      if (u->op == KILN_OP_RESHAPE) {
        if (uv->rank < 1 || uv->shape[uv->rank - 1] != ncols) break;
        c.reshaped = u->outputs[0];
      } else if (stage == 0 && u->op == KILN_OP_ADD && kiln_is_bias(&g->values[other], ncols) &&
          kiln_value_same_type(uv, &g->values[cur])) {
        c.bias = other;
        stage = 1;
      } else if (stage <= 1 && kiln_op_as_activation(u->op, &act)) {
        c.act = act;
        stage = 2;
      } else if (u->op == KILN_OP_ADD && kiln_value_same_type(&g->values[other], &g->values[cur]) &&
                 kiln_value_same_type(uv, &g->values[cur])) {
        c.residual = other;
        stage = 3;
      } else {
        break;
      }
      walked[n_walked++] = end;
      skip[end] = 1;
      end = user[cur];
      cur = u->outputs[0];
    }
    if (!wconst && c.bias < 0 && c.residual < 0 && c.act == KILN_ACT_NONE) {
      while (n_walked) skip[walked[--n_walked]] = 0; /* stays a MATMUL */
      continue;
    }
    int32_t back = fold_round ? kiln_fuse_gemm_round_trip(g, uses, user, cur) : -1;
    if (back >= 0 && !skip[user[cur]] && end_of[user[cur]].matmul < 0) {
      skip[end] = 1;
      skip[user[cur]] = 1; /* the CAST to bf16 */
      end = back;
      c.round_y = 1;
    }
    c.x_reshape = -1;
    if (c.reshaped >= 0) {
      /* Not when that reshape ends another chain (its LINEAR must stay). */
      int32_t xp = kiln_fuse_gemm_reshape_source(g, uses, n->inputs[0]);
      if (xp >= 0 && end_of[xp].matmul < 0 && !skip[xp]) {
        skip[xp] = 1;
        c.x_reshape = xp;
      }
    }
    end_of[end] = c;
    ++*out_fused;
  }

  /* MATMULs no chain took (or whose chain absorbed nothing): the round
   * trip alone. */
  for (int32_t ni = 0; ni < nn && fold_round; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (n->op != KILN_OP_MATMUL || skip[ni] || end_of[ni].matmul >= 0) continue;
    int32_t back = kiln_fuse_gemm_round_trip(g, uses, user, n->outputs[0]);
    if (back < 0 || skip[back] || end_of[back].matmul >= 0) continue;
    round_at[ni] = back;
    skip[user[n->outputs[0]]] = skip[back] = 1;
    ++*out_fused;
  }

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (skip[ni]) continue;
    kiln_fuse_chain_t c = end_of[ni];
    if (round_at[ni] >= 0) {
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, n->params, sizeof(params));
      params[KILN_P(MATMUL, FLAGS)] |= KILN_MATMUL_ROUND_Y_BF16;
      s = kiln_rewriter_emit(&rw, KILN_OP_MATMUL, n->inputs, n->n_inputs, params, n->fparams,
                             n->origin, g->nodes[round_at[ni]].outputs[0]);
      continue;
    }
    if (c.matmul < 0) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    const kiln_node_t* mm = &g->nodes[c.matmul];
    int32_t ins[4];
    /* x, or the source of the reshape making x when the chain looks
     * through it (that reshape was skipped). */
    s = kiln_rewriter_value(&rw, c.x_reshape >= 0 ? g->nodes[c.x_reshape].inputs[0] : mm->inputs[0],
                            &ins[0]);
    if (!s) s = kiln_rewriter_value(&rw, mm->inputs[1], &ins[1]);
    if (!s && rw.dst->values[ins[1]].rank > 2) { /* batch-1 weight: its (K, N), the same bytes */
      kiln_value_t* wv = &rw.dst->values[ins[1]];
      int64_t kn[2] = {wv->shape[wv->rank - 2], wv->shape[wv->rank - 1]};
      if (uses[mm->inputs[1]] == 1) { /* this LINEAR's alone: viewed in place */
        wv->shape[0] = kn[0], wv->shape[1] = kn[1];
        wv->rank = 2;
      } else { /* read by other nodes too, as it is: a 2-d copy for the LINEAR */
        const void* data = wv->data;
        s = kiln_graph_add_constant(rw.dst, wv->name, KILN_F32, 2, kn, KILN_LAYOUT_DENSE, data,
                                    wv->nbytes, &ins[1]);
      }
    }
    if (!s) s = kiln_rewriter_value(&rw, c.bias, &ins[2]);
    if (!s) s = kiln_rewriter_value(&rw, c.residual, &ins[3]);
    if (!s && c.reshaped >= 0) {
      /* x (..., K) viewed with the chain's final leading dims. When x is
       * itself a reshape used only here, its source is viewed instead
       * (ins[0] above), and when the shapes agree, no view at all: the
       * listing then shows no reshape of a reshape. */
      const kiln_value_t* r = &g->values[c.reshaped];
      int64_t shape[1 + KILN_MAX_RANK] = {r->rank};
      memcpy(shape + 1, r->shape, sizeof(int64_t) * (size_t)r->rank);
      shape[r->rank] = g->values[mm->inputs[0]].shape[g->values[mm->inputs[0]].rank - 1];
      const kiln_value_t* xv = &rw.dst->values[ins[0]];
      if (!s && (xv->rank != r->rank ||
                 memcmp(xv->shape, shape + 1, sizeof(int64_t) * (size_t)r->rank) != 0))
        s = kiln_graph_add_node(rw.dst, KILN_OP_RESHAPE, &ins[0], 1, shape, 1 + r->rank, NULL, 0,
                                mm->origin, &ins[0]);
    }
    if (s) break;
    int32_t n_in = c.residual >= 0 ? 4 : c.bias >= 0 ? 3 : 2;
    int64_t params[KILN_MAX_PARAMS] = {0};
    params[KILN_P(LINEAR, ACT)] = c.act;
    params[KILN_P(LINEAR, W_TRANSPOSED)] = c.w_transposed;
    params[KILN_P(LINEAR, ROUND_A)] = (mm->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_A_BF16) != 0;
    params[KILN_P(LINEAR, ROUND_B)] = (mm->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_B_BF16) != 0;
    params[KILN_P(LINEAR, ROUND_Y)] = c.round_y;
    s = kiln_graph_add_node(rw.dst, KILN_OP_LINEAR, ins, n_in, params, KILN_MAX_PARAMS, NULL, 0,
                            mm->origin, &rw.remap[n->outputs[0]]);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
done_early:
  free(uses);
  free(user);
  free(end_of);
  free(skip);
  free(round_at);
  return s;
}
