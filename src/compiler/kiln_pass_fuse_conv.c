/* Convolution epilogue fusion: batch norm folding, activation, residual.
 *
 * The pattern, as captured from Conv2d -> BatchNorm2d (eval) -> ReLU -> +skip:
 *     y0 = CONV2D(x, W, b?)        W (and b) constants, no epilogue yet
 *     y1 = MUL(y0, s) / ADD(y1, t) any run of these, s and t constants that
 *                                  vary only along channels: (O, 1, 1),
 *                                  (1, O, 1, 1) or scalars (batch norm's
 *                                  scale and shift, once folded)
 *     y2 = ACT(y1)                 relu, gelu, silu, sigmoid, tanh, or the
 *                                  four nodes of relu6 (optional)
 *     y3 = ADD(y2, r)              r of y2's shape                 (optional)
 * or with the residual before the activation (ResNet: relu(bn(conv) + x)),
 * becomes one CONV2D(x, W', b', r) with the activation as a parameter,
 * emitted where the chain ends. Per channel o, a MUL by s scales W[o] and
 * b[o] by s[o]; an ADD of t adds t[o] to b[o]: W' and b' are new constants
 * computed here (this is constant folding on weights, not on activations).
 * Except for a bf16 model's conv (ROUND_X) whose weight holds bf16 values
 * and which the target would run on a bf16 engine channels-last (its
 * constant form as a CONV2D_NHWC is the bf16 layout): scaling W would take
 * it off bf16, and rounding it back measured a larger error than eager's
 * (ResNet-18, rms 0.029 against 0.025), so W stays and s becomes the
 * conv's scale input (its sums times s, before the bias; b' as above): the
 * products stay eager's. The layout pass then runs it channels-last, the
 * only place a scale runs.
 * As in fuse_gemm, each step is absorbed only when the previous value has
 * exactly one user and is not a graph output. */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "base/kiln_activation.h"

typedef struct {
  int32_t conv; /* node index of the CONV2D starting the chain, or -1 */
  int32_t residual;
  int64_t act, residual_first; /* residual_first: CONV2D's residual_before_act */
  float* scale; /* (O) or NULL: no MUL/ADD absorbed */
  float* shift;
} kiln_conv_chain_t;

/* A dense f32 constant that, broadcast against (N, O, H, W), varies only
 * along O: returns its stride per channel (1, or 0 for a scalar), else -1. */
static int kiln_conv_channel_stride(const kiln_value_t* v, int64_t o) {
  if (v->kind != KILN_VALUE_CONSTANT || v->dtype != KILN_F32 || v->layout != KILN_LAYOUT_DENSE ||
      v->rank > 4)
    return -1;
  int64_t numel = kiln_value_numel(v);
  if (numel == 1) return 0;
  if (numel != o) return -1;
  /* Right-aligned to 4-d, the O elements must sit on dim 1. */
  int32_t chan = 1 - (4 - v->rank);
  return chan >= 0 && v->shape[chan] == o ? 1 : -1;
}

/* Whether conv cv (a CONV2D with ROUND_X) keeps its weight and takes the
 * batch norm's scale as its scale input: the target's form for it as a
 * CONV2D_NHWC is the bf16 layout (which also says the weight holds bf16
 * values), with 16 or more output channels a group (the layout pass's
 * candidates). */
static int kiln_conv_keeps_bf16_weight(const kiln_graph_t* g, const kiln_node_t* cv,
                                       const kiln_hal_target_t* target,
                                       const kiln_hal_weights_t* weights) {
  const int64_t groups = cv->params[KILN_P(CONV2D, GROUPS)];
  return cv->params[KILN_P(CONV2D, ROUND_X)] && cv->n_inputs <= 3 && groups >= 1 &&
         g->values[cv->inputs[1]].shape[0] / groups >= 16 &&
         kiln_conv_takes_bf16_form(g, cv, target, weights);
}

kiln_status_t kiln_pass_fuse_conv(kiln_graph_t* g, const kiln_hal_target_t* target,
                                  const kiln_hal_weights_t* weights, kiln_graph_t** out_graph,
                                  int32_t* out_fused) {
  *out_graph = NULL;
  *out_fused = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* user = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  kiln_conv_chain_t* end_of = calloc((size_t)nn + 1, sizeof(kiln_conv_chain_t));
  char* skip = calloc((size_t)nn + 1, 1);
  float* wbuf = NULL;
  kiln_rewriter_t rw;
  int rw_ready = 0;
  kiln_status_t s = (!uses || !user || !end_of || !skip)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "conv fusion pass")
                        : kiln_ok();
  if (!s) {
    s = kiln_rewriter_initialize(&rw, g);
    rw_ready = !s;
  }
  if (s) goto done;
  kiln_graph_count_uses(g, uses);
  for (int32_t v = 0; v < nv; ++v) user[v] = -1;
  for (int32_t ni = 0; ni < nn; ++ni) {
    end_of[ni].conv = -1;
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i)
      if (g->nodes[ni].inputs[i] >= 0) user[g->nodes[ni].inputs[i]] = ni;
  }

  /* Find chains. */
  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (n->op != KILN_OP_CONV2D || n->params[KILN_P(CONV2D, ACT)] != KILN_ACT_NONE) continue;
    if (n->n_inputs > 3 && n->inputs[3] >= 0) continue; /* already has a residual */
    const kiln_value_t* w = &g->values[n->inputs[1]];
    const kiln_value_t* b = n->n_inputs > 2 && n->inputs[2] >= 0 ? &g->values[n->inputs[2]] : NULL;
    /* Batch norm folds only into constant weights and bias. */
    int affine_ok = w->kind == KILN_VALUE_CONSTANT && w->layout == KILN_LAYOUT_DENSE &&
                    (!b || (b->kind == KILN_VALUE_CONSTANT && b->layout == KILN_LAYOUT_DENSE));
    const int64_t O = w->shape[0];
    kiln_conv_chain_t c = {ni, -1, KILN_ACT_NONE, 0, NULL, NULL};
    int32_t cur = n->outputs[0], end = ni;
    /* 0: MUL/ADD by channel constants, 1: activation, 2: residual, 3: done */
    int stage = 0;
    /* skip[] doubles as "claimed by a chain": a residual ADD joining two
     * conv branches goes to the first chain that reaches it, never both. */
    while (stage < 3) {
      int32_t r6[4], hs[7];
      if (stage <= 1 && kiln_graph_match_hardswish(g, uses, user, cur, hs)) {
        int free_nodes = end_of[hs[6]].conv < 0;
        for (int i = 0; i < 7; ++i) free_nodes &= !skip[hs[i]];
        if (free_nodes) {
          c.act = KILN_ACT_HARDSWISH; /* seven nodes: torch's x * clamp(x + 3, 0, 6) / 6 */
          stage = 2;
          skip[end] = 1;
          for (int i = 0; i < 6; ++i) skip[hs[i]] = 1;
          end = hs[6];
          cur = g->nodes[end].outputs[0];
          continue;
        }
      }
      if (stage <= 1 && kiln_graph_match_relu6(g, uses, user, cur, r6) && !skip[r6[0]] &&
          !skip[r6[1]] && !skip[r6[2]] && !skip[r6[3]] && end_of[r6[3]].conv < 0) {
        c.act = KILN_ACT_RELU6; /* four nodes: the clamp the front end spells */
        stage = 2;
        skip[end] = skip[r6[0]] = skip[r6[1]] = skip[r6[2]] = 1;
        end = r6[3];
        cur = g->nodes[end].outputs[0];
        continue;
      }
      if (uses[cur] != 1 || user[cur] < 0 || skip[user[cur]] || end_of[user[cur]].conv >= 0) break;
      const kiln_node_t* u = &g->nodes[user[cur]];
      int32_t other = -1;
      if (u->op == KILN_OP_ADD || u->op == KILN_OP_MUL)
        other = u->inputs[0] == cur ? u->inputs[1] : u->inputs[0];
      if (other == cur) break; /* x + x, x * x */
      const kiln_value_t* uv = &g->values[u->outputs[0]];
      int64_t act;
      int cs = other >= 0 ? kiln_conv_channel_stride(&g->values[other], O) : -1;
      if (stage == 0 && affine_ok && cs >= 0 && kiln_value_same_type(uv, &g->values[cur])) {
        if (!c.scale) {
          c.scale = malloc(sizeof(float) * (size_t)O * 2);
          if (!c.scale) {
            s = kiln_status_make(KILN_OUT_OF_MEMORY, "conv fusion pass");
            break;
          }
          c.shift = c.scale + O;
          for (int64_t o = 0; o < O; ++o) c.scale[o] = 1.0f, c.shift[o] = 0.0f;
        }
        const float* t = g->values[other].data;
        /* (y * s + t) * s2 = y * (s s2) + t s2;  (y * s + t) + t2 = y * s + (t + t2). */
        for (int64_t o = 0; o < O; ++o) {
          float k = t[o * cs];
          if (u->op == KILN_OP_MUL) {
            c.scale[o] *= k;
            c.shift[o] *= k;
          } else {
            c.shift[o] += k;
          }
        }
      } else if (stage <= 1 && kiln_op_as_activation(u->op, &act)) {
        /* stage 1 after a residual: the activation wraps it. */
        c.act = act;
        stage = 2;
      } else if (u->op == KILN_OP_ADD && c.residual < 0 &&
                 kiln_value_same_type(&g->values[other], &g->values[cur]) &&
                 kiln_value_same_type(uv, &g->values[cur])) {
        c.residual = other;
        /* Before any activation, one may still follow: act(conv + r). */
        c.residual_first = stage == 0;
        stage = stage == 0 ? 1 : 3;
      } else {
        break;
      }
      skip[end] = 1;
      end = user[cur];
      cur = u->outputs[0];
    }
    if (end == ni) {
      free(c.scale);
      continue; /* nothing absorbed: the node is copied as it is */
    }
    end_of[end] = c;
    ++*out_fused;
  }

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (skip[ni]) continue;
    kiln_conv_chain_t* c = &end_of[ni];
    if (c->conv < 0) {
      s = kiln_rewriter_copy_node(&rw, n);
      continue;
    }
    const kiln_node_t* cv = &g->nodes[c->conv];
    int32_t bias = cv->n_inputs > 2 ? cv->inputs[2] : -1;
    int32_t ins[5] = {-1, -1, -1, -1, -1};
    s = kiln_rewriter_value(&rw, cv->inputs[0], &ins[0]);
    const int keep_w = c->scale && kiln_conv_keeps_bf16_weight(g, cv, target, weights);
    if (!s && (!c->scale || keep_w))
      s = kiln_rewriter_value(&rw, cv->inputs[1], &ins[1]);
    if (!s && !c->scale) {
      if (bias >= 0) s = kiln_rewriter_value(&rw, bias, &ins[2]);
    } else if (!s) {
      /* W'[o] = W[o] * scale[o] (or W kept, scale[o] the conv's scale
       * input); b'[o] = b[o] * scale[o] + shift[o]. */
      const kiln_value_t* w = &g->values[cv->inputs[1]];
      const int64_t O = w->shape[0], per = kiln_value_numel(w) / (O ? O : 1);
      const float* wd = w->data;
      const float* bd = bias >= 0 ? g->values[bias].data : NULL;
      wbuf = malloc(sizeof(float) * (size_t)((keep_w ? 0 : O * per) + O));
      if (!wbuf) {
        s = kiln_status_make(KILN_OUT_OF_MEMORY, "conv fusion pass");
        break;
      }
      float* bb = wbuf + (keep_w ? 0 : O * per);
      for (int64_t o = 0; o < O; ++o) {
        for (int64_t i = 0; !keep_w && i < per; ++i) wbuf[o * per + i] = wd[o * per + i] * c->scale[o];
        bb[o] = (bd ? bd[o] : 0.0f) * c->scale[o] + c->shift[o];
      }
      if (!keep_w)
        s = kiln_graph_add_constant(rw.dst, w->name, KILN_F32, w->rank, w->shape, KILN_LAYOUT_DENSE,
                                    wbuf, sizeof(float) * (size_t)(O * per), &ins[1]);
      if (!s)
        s = kiln_graph_add_constant(rw.dst, NULL, KILN_F32, 1, &O, KILN_LAYOUT_DENSE, bb,
                                    sizeof(float) * (size_t)O, &ins[2]);
      if (!s && keep_w)
        s = kiln_graph_add_constant(rw.dst, NULL, KILN_F32, 1, &O, KILN_LAYOUT_DENSE, c->scale,
                                    sizeof(float) * (size_t)O, &ins[4]);
      free(wbuf);
      wbuf = NULL;
    }
    if (!s && c->residual >= 0) s = kiln_rewriter_value(&rw, c->residual, &ins[3]);
    if (s) break;
    int32_t n_in = ins[4] >= 0 ? 5 : ins[3] >= 0 ? 4 : ins[2] >= 0 ? 3 : 2;
    int64_t params[KILN_MAX_PARAMS];
    memcpy(params, cv->params, sizeof(params));
    params[KILN_P(CONV2D, ACT)] = c->act;
    params[KILN_P(CONV2D, RESIDUAL_BEFORE_ACT)] = c->residual_first;
    s = kiln_graph_add_node(rw.dst, KILN_OP_CONV2D, ins, n_in, params, KILN_P_COUNT(CONV2D), NULL, 0, cv->origin,
                            &rw.remap[n->outputs[0]]);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
done:
  if (rw_ready) kiln_rewriter_deinitialize(&rw);
  if (end_of)
    for (int32_t ni = 0; ni < nn; ++ni) free(end_of[ni].scale);
  free(uses);
  free(user);
  free(end_of);
  free(skip);
  return s;
}
