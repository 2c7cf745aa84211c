/* Attention fusion: make SDPA read and write the layouts its neighbours
 * already have, and give it one GEMM for Q, K and V.
 *
 * As captured, multi-head attention is
 *     q = permute(reshape(linear_q(x)))  ... k, v alike   (B, S, N) -> (B, H, S, D)
 *     y = sdpa(q, k, v, mask)
 *     o = reshape(permute(y))                              (B, H, S, D) -> (B, S, N)
 * Each permute is a copy. This pass
 *  1. folds each q/k/v STRIDED_COPY used only by the SDPA into SDPA's view
 *     parameters (KILN_SDPA_VIEWS): the kernel reads the source in place;
 *  2. folds a (0, 2, 1, 3) permute of the output into KILN_SDPA_OUT_BSHD:
 *     the kernel writes (B, S, H, D) directly;
 *  3. when q, k and v are views of three LINEARs of one input (no residual,
 *     no activation, dense weights), makes one LINEAR with the weights side
 *     by side and points the three views into its output (not over a bf16
 *     model's weights read where torch keeps them: that would copy them);
 *  4. drops a constant all-zero mask;
 *  5. reads k and v through transformers' repeat_kv (expand a head group
 *     of stride 0, reshape to H heads) as grouped-query attention over the
 *     Hkv heads: the kernel maps q head h to kv head h / (H / Hkv), which is
 *     what the expand did, without writing G copies of the KV cache.
 * It runs before weight packing, so weights are still dense (K, N). */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "base/kiln_activation.h"

typedef struct {
  int32_t src[3];       /* the values q, k, v are read from */
  int64_t view[3][5];   /* offset, strides (b, h, s, d) into src */
  int64_t dims[7];      /* B, H, Hkv, Sq, Skv, D, Dv */
  int32_t out_copy;     /* node index of a folded output permute, or -1 */
  int32_t drop_mask;
  int32_t fused_linear; /* node index of the LINEAR that becomes the fused QKV, or -1 */
  int32_t linears[3];   /* the three LINEARs merged (node indices) */
} kiln_attn_plan_t;

static void dense_strides(const kiln_graph_t* g, const kiln_value_t* v, int64_t* view) {
  int64_t s = 1;
  view[0] = 0;
  for (int d = 3; d >= 0; --d) {
    view[1 + d] = s;
    s = kiln_graph_dim_mul(g, s, v->shape[d]);
  }
}

static int is_zero_constant(const kiln_value_t* v) {
  if (v->kind != KILN_VALUE_CONSTANT || v->dtype != KILN_F32 || !v->data ||
      !kiln_layout_is_dense_sized(v->layout))
    return 0;
  const float* f = v->data;
  for (int64_t i = 0, n = kiln_value_numel(v); i < n; ++i)
    if (f[i] != 0.0f) return 0;
  return 1;
}

/* Maps a view over a dense (rows, n_i) value into the same rows of a wider
 * (rows, n_total) value at column `col`. Fails (returns 0) unless every
 * stride either stays inside a row or steps whole rows. */
static int widen_view(int64_t* view, const int64_t* dims, int64_t n_i, int64_t n_total,
                      int64_t col) {
  int64_t in_row = view[0] % n_i;
  int64_t w[5];
  w[0] = view[0] / n_i * n_total + in_row + col;
  for (int d = 0; d < 4; ++d) {
    int64_t s = view[1 + d];
    if (dims[d] <= 1) {
      w[1 + d] = s;
    } else if (s % n_i == 0) {
      w[1 + d] = s / n_i * n_total;
    } else if (s < n_i) {
      in_row += (dims[d] - 1) * s;
      w[1 + d] = s;
    } else {
      return 0;
    }
  }
  if (in_row >= n_i) return 0;
  memcpy(view, w, sizeof(w));
  return 1;
}

/* SDPA's input views step forwards only: a view with a negative stride (a
 * flip) stays a STRIDED_COPY of its own. A symbolic stride (a view of a
 * DynamicCache's buffer, whose rows are its capacity) counts as forward
 * when it is at both probe bindings: SDPA's shape rule checks every view
 * again with each call's sizes, so a binding that made it negative would be
 * refused, never read out of bounds. */
static int forward_strides(const kiln_graph_t* g, const int64_t* strides, int n) {
  for (int d = 0; d < n; ++d) {
    if (!kiln_dim_is_sym(strides[d])) {
      if (strides[d] < 0) return 0;
    } else if (!g->syms || !kiln_sym_dim_valid(g->syms, strides[d]) ||
               kiln_sym_probe(g->syms, strides[d], 0) < 0 || kiln_sym_probe(g->syms, strides[d], 1) < 0) {
      return 0;
    }
  }
  return 1;
}

/* When the expand reads x (B, Hkv, S, D) whole and in order (offset 0, x's
 * dense strides, the group dim of stride 0; through repeat_kv's unsqueeze
 * to (B, Hkv, 1, S, D), a RESHAPE) and x is itself a rank-4 STRIDED_COPY
 * used only there (a DynamicCache's keys as a view of their buffer:
 * python/kiln/cache_append.py), the view composed into that copy's input:
 * *src and view[] replaced, *copy the folded copy and *unsqueeze the
 * RESHAPE or NULL; else unchanged. */
static void compose_view_behind(const kiln_graph_t* g, const kiln_node_t* e, const int32_t* uses,
                                const char* role, int32_t* src, int64_t* view,
                                const kiln_node_t** copy, const kiln_node_t** unsqueeze) {
  int32_t x = e->inputs[0];
  const kiln_value_t* xv = &g->values[x];
  const kiln_node_t* u = NULL;
  if (xv->producer >= 0 && uses[x] == 1 && xv->rank == 5 && xv->shape[2] == 1 &&
      g->nodes[xv->producer].op == KILN_OP_RESHAPE && role[xv->producer] != 1) {
    u = &g->nodes[xv->producer];
    const kiln_value_t* x4 = &g->values[u->inputs[0]];
    if (x4->rank != 4 || x4->shape[0] != xv->shape[0] || x4->shape[1] != xv->shape[1] ||
        x4->shape[2] != xv->shape[3] || x4->shape[3] != xv->shape[4])
      return;
    x = u->inputs[0];
    xv = x4;
  }
  if (xv->producer < 0 || uses[x] != 1 || xv->rank != 4 || role[xv->producer] == 1) return;
  const kiln_node_t* p = &g->nodes[xv->producer];
  const int64_t* pst = p->params + KILN_P(VIEW, STRIDES);
  if (p->op != KILN_OP_STRIDED_COPY || p->params[KILN_P(VIEW, RANK)] != 4 || !forward_strides(g, pst, 4))
    return;
  const int64_t* d = e->params + KILN_P(VIEW, DIMS);
  if (d[0] != xv->shape[0] || d[1] != xv->shape[1] || d[3] != xv->shape[2] || d[4] != xv->shape[3])
    return;
  int64_t dense[5];
  dense_strides(g, xv, dense);
  if (view[0] != 0 || view[1] != dense[1] || view[2] != dense[2] || view[3] != dense[3] ||
      view[4] != dense[4])
    return;
  *src = p->inputs[0];
  view[0] = p->params[KILN_P(VIEW, OFFSET)];
  memcpy(&view[1], pst, 4 * sizeof(int64_t));
  *copy = p;
  *unsqueeze = u;
}

/* k or v = reshape(expand(x)) with x's (B, Hkv, 1, S, D) repeated G times
 * along a stride-0 dim into (B, Hkv * G, S, D): returns the expand node
 * (view[] into its input, *hkv set), or NULL. */
static const kiln_node_t* repeat_kv_behind(const kiln_graph_t* g, int32_t t, const int32_t* uses,
                                           int64_t* view, int64_t* hkv) {
  const kiln_value_t* tv = &g->values[t];
  if (tv->producer < 0 || uses[t] != 1 || tv->rank != 4) return NULL;
  const kiln_node_t* r = &g->nodes[tv->producer];
  const kiln_value_t* ev = &g->values[r->inputs[0]];
  if (r->op != KILN_OP_RESHAPE || ev->producer < 0 || uses[r->inputs[0]] != 1) return NULL;
  const kiln_node_t* e = &g->nodes[ev->producer];
  const int64_t* st = e->params + KILN_P(VIEW, STRIDES);
  if (e->op != KILN_OP_STRIDED_COPY || e->params[KILN_P(VIEW, RANK)] != 5 || st[2] != 0 || !forward_strides(g, st, 5))
    return NULL;
  const int64_t* d = e->params + KILN_P(VIEW, DIMS);
  if (tv->shape[0] != d[0] || tv->shape[1] != kiln_graph_dim_mul(g, d[1], d[2]) || tv->shape[2] != d[3] ||
      tv->shape[3] != d[4])
    return NULL;
  view[0] = e->params[KILN_P(VIEW, OFFSET)];
  view[1] = st[0];
  view[2] = st[1];
  view[3] = st[3];
  view[4] = st[4];
  *hkv = d[1];
  return e;
}

/* The LINEAR (node index) whose output `v` is, through RESHAPE aliases. */
static int32_t linear_behind(const kiln_graph_t* g, int32_t v, const int32_t* uses) {
  while (v >= 0 && g->values[v].producer >= 0) {
    const kiln_node_t* p = &g->nodes[g->values[v].producer];
    if (p->op == KILN_OP_LINEAR) return g->values[v].producer;
    if (p->op != KILN_OP_RESHAPE || uses[p->inputs[0]] != 1) return -1;
    v = p->inputs[0];
  }
  return -1;
}

kiln_status_t kiln_pass_fuse_attention(kiln_graph_t* g, const kiln_hal_target_t* target,
                                       const kiln_hal_weights_t* weights,
                                       kiln_graph_t** out_graph, int32_t* out_fused) {
  *out_graph = NULL;
  *out_fused = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* user = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  kiln_attn_plan_t* plan = calloc((size_t)nn + 1, sizeof(kiln_attn_plan_t));
  char* role = calloc((size_t)nn + 1, 1); /* 1: skip; 2: sdpa with a plan; 3: fused QKV linear */
  int32_t* sdpa_of = malloc(sizeof(int32_t) * (size_t)(nn + 1)); /* fused linear -> its sdpa */
  kiln_rewriter_t rw;
  kiln_status_t s = (!uses || !user || !plan || !role || !sdpa_of)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "attention pass")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done_early;
  kiln_graph_count_uses(g, uses);
  for (int32_t v = 0; v < nv; ++v) user[v] = -1;
  for (int32_t ni = 0; ni < nn; ++ni) {
    sdpa_of[ni] = -1;
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i)
      if (g->nodes[ni].inputs[i] >= 0) user[g->nodes[ni].inputs[i]] = ni;
  }

  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    /* Not yet fused; the bf16 rule (a bf16 model's attention) and
     * reading every key (eager's math path), both set by the front end,
     * carry over. */
    if (n->op != KILN_OP_SDPA ||
        (n->params[KILN_P(SDPA, FLAGS)] & ~(int64_t)(KILN_SDPA_BF16 | KILN_SDPA_EVERY_KEY)) != 0)
      continue;
    kiln_attn_plan_t* pl = &plan[ni];
    const kiln_value_t *q = &g->values[n->inputs[0]], *k = &g->values[n->inputs[1]],
                       *v = &g->values[n->inputs[2]];
    int64_t dims[7] = {q->shape[0], q->shape[1], k->shape[1], q->shape[2],
                       k->shape[2], q->shape[3], v->shape[3]};
    memcpy(pl->dims, dims, sizeof(dims));
    pl->out_copy = -1;
    pl->fused_linear = -1;
    /* 5. repeat_kv on both k and v, with one group size. */
    int64_t kv_view[2][5], hkv[2];
    const kiln_node_t* rep[2] = {repeat_kv_behind(g, n->inputs[1], uses, kv_view[0], &hkv[0]),
                                 repeat_kv_behind(g, n->inputs[2], uses, kv_view[1], &hkv[1])};
    int grouped = rep[0] && rep[1] && hkv[0] == hkv[1] && !kiln_dim_is_sym(dims[1]) &&
                  !kiln_dim_is_sym(hkv[0]) && hkv[0] > 0 && dims[1] % hkv[0] == 0;
    if (grouped) pl->dims[2] = hkv[0];
    /* 1. Input views. */
    for (int i = 0; i < 3; ++i) {
      int32_t t = n->inputs[i];
      if (grouped && i > 0) {
        const kiln_node_t *e = rep[i - 1], *copy = NULL, *unsqueeze = NULL;
        pl->src[i] = e->inputs[0];
        memcpy(pl->view[i], kv_view[i - 1], sizeof(kv_view[0]));
        compose_view_behind(g, e, uses, role, &pl->src[i], pl->view[i], &copy, &unsqueeze);
        if (copy) role[copy - g->nodes] = 1;
        if (unsqueeze) role[unsqueeze - g->nodes] = 1;
        role[g->values[t].producer] = 1;
        role[g->values[e->outputs[0]].producer] = 1;
        continue;
      }
      const kiln_value_t* tv = &g->values[t];
      const kiln_node_t* p = tv->producer >= 0 ? &g->nodes[tv->producer] : NULL;
      /* Not a copy an earlier SDPA already took as its output permute
       * (sdpa -> permute -> sdpa): that SDPA writes the copy's value in
       * place and never makes the copy's input, so it cannot be read. */
      if (p && p->op == KILN_OP_STRIDED_COPY && p->params[KILN_P(VIEW, RANK)] == 4 && uses[t] == 1 &&
          forward_strides(g, p->params + KILN_P(VIEW, STRIDES), 4) && role[tv->producer] != 1) {
        pl->src[i] = p->inputs[0];
        pl->view[i][0] = p->params[KILN_P(VIEW, OFFSET)];
        memcpy(&pl->view[i][1], p->params + KILN_P(VIEW, STRIDES), 4 * sizeof(int64_t));
        role[tv->producer] = 1;
      } else {
        pl->src[i] = t;
        dense_strides(g, tv, pl->view[i]);
      }
    }
    /* 2. Output permute (0, 2, 1, 3) of a contiguous (B, H, S, Dv). */
    int32_t y = n->outputs[0];
    if (uses[y] == 1 && user[y] >= 0 && g->nodes[user[y]].op == KILN_OP_STRIDED_COPY) {
      const kiln_node_t* c = &g->nodes[user[y]];
      int64_t B = dims[0], H = dims[1], S = dims[3], Dv = dims[6];
      const int64_t SDv = kiln_graph_dim_mul(g, S, Dv);
      const int64_t want[9] = {4, B, S, H, Dv, kiln_graph_dim_mul(g, H, SDv), Dv, SDv, 1};
      int ok = c->params[KILN_P(VIEW, OFFSET)] == 0;
      for (int j = 0; j < 4 && ok; ++j)
        ok = c->params[KILN_P(VIEW, DIMS) + j] == want[1 + j] &&
             (want[1 + j] == 1 || c->params[KILN_P(VIEW, STRIDES) + j] == want[5 + j]);
      if (ok && c->params[KILN_P(VIEW, RANK)] == 4) {
        pl->out_copy = user[y];
        role[user[y]] = 1;
      }
    }
    /* 4. A constant zero mask adds nothing. */
    if (n->n_inputs > 3 && n->inputs[3] >= 0 && is_zero_constant(&g->values[n->inputs[3]]))
      pl->drop_mask = 1;
    /* 3. One GEMM for Q, K and V. */
    int32_t lin[3];
    int ok = 1;
    for (int i = 0; i < 3 && ok; ++i) {
      lin[i] = linear_behind(g, pl->src[i], uses);
      ok = lin[i] >= 0 && uses[g->nodes[lin[i]].outputs[0]] == 1;
    }
    if (ok) {
      const kiln_node_t* l0 = &g->nodes[lin[0]];
      int64_t n_total = 0, K = g->values[l0->inputs[1]].shape[0];
      for (int i = 0; i < 3 && ok; ++i) {
        const kiln_node_t* l = &g->nodes[lin[i]];
        const kiln_value_t* w = &g->values[l->inputs[1]];
        ok = l->inputs[0] == l0->inputs[0] && l->params[KILN_P(LINEAR, ACT)] == KILN_ACT_NONE &&
             !l->params[KILN_P(LINEAR, ROUND_Y)] &&
             (l->n_inputs < 4 || l->inputs[3] < 0) &&
             w->kind == KILN_VALUE_CONSTANT && w->layout == g->values[l0->inputs[1]].layout &&
             (w->layout == KILN_LAYOUT_DENSE || w->layout == KILN_LAYOUT_TRANSPOSED_2D ||
              kiln_layout_is_widened_bf16(w->layout)) &&
             !kiln_pass_weight_read_in_place(g, l, target, weights) &&
             w->shape[0] == K && (l->n_inputs > 2 && l->inputs[2] >= 0) == (l0->n_inputs > 2 && l0->inputs[2] >= 0) &&
             (i == 0 || lin[i] != lin[i - 1]);
        n_total += w->shape[1];
      }
      int64_t views[3][5], col = 0;
      memcpy(views, pl->view, sizeof(views));
      const int64_t vd[3][4] = {{pl->dims[0], pl->dims[1], pl->dims[3], pl->dims[5]},
                                {pl->dims[0], pl->dims[2], pl->dims[4], pl->dims[5]},
                                {pl->dims[0], pl->dims[2], pl->dims[4], pl->dims[6]}};
      /* Widening divides offsets and strides: numbers only. */
      for (int i = 0; i < 3 && ok; ++i)
        for (int j = 0; j < 5 && ok; ++j) ok = !kiln_dim_is_sym(views[i][j]);
      for (int i = 0; i < 3 && ok; ++i)
        for (int j = 0; j < 4 && ok; ++j) ok = !kiln_dim_is_sym(vd[i][j]);
      for (int i = 0; i < 3 && ok; ++i) {
        int64_t n_i = g->values[g->nodes[lin[i]].inputs[1]].shape[1];
        ok = widen_view(views[i], vd[i], n_i, n_total, col);
        col += n_i;
      }
      /* The fused GEMM is emitted where the last of the three was. */
      int32_t last = lin[0] > lin[1] ? lin[0] : lin[1];
      last = last > lin[2] ? last : lin[2];
      if (ok) {
        memcpy(pl->view, views, sizeof(views));
        memcpy(pl->linears, lin, sizeof(lin));
        pl->fused_linear = last;
        for (int i = 0; i < 3; ++i) role[lin[i]] = 1;
        role[last] = 3;
        sdpa_of[last] = ni;
        /* The reshapes between the linears and the views go too. */
        for (int i = 0; i < 3; ++i)
          for (int32_t v2 = pl->src[i]; v2 >= 0 && g->values[v2].producer != lin[i];
               v2 = g->nodes[g->values[v2].producer].inputs[0])
            role[g->values[v2].producer] = 1;
      }
    }
    role[ni] = 2;
    ++*out_fused;
  }

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (role[ni] == 1) continue;
    if (role[ni] == 3) {
      /* Concatenate the weights (K, N_i) and biases side by side, the
       * weights in their layout (float32, or bf16 numbers held narrow). */
      const kiln_attn_plan_t* pl = &plan[sdpa_of[ni]];
      const kiln_value_t* w0 = &g->values[g->nodes[pl->linears[0]].inputs[1]];
      int64_t K = w0->shape[0], n_total = 0;
      for (int i = 0; i < 3; ++i) n_total += g->values[g->nodes[pl->linears[i]].inputs[1]].shape[1];
      int has_bias = g->nodes[pl->linears[0]].n_inputs > 2 && g->nodes[pl->linears[0]].inputs[2] >= 0;
      const size_t e = kiln_layout_is_widened_bf16(w0->layout) ? 2 : sizeof(float);
      char* w = NULL;
      float* b = NULL;
      s = kiln_allocator_malloc(g->allocator, (size_t)(K * n_total) * e, (void**)&w);
      if (!s && has_bias)
        s = kiln_allocator_malloc(g->allocator, (size_t)n_total * sizeof(float), (void**)&b);
      if (s) {
        kiln_allocator_free(g->allocator, w);
        break;
      }
      int64_t col = 0;
      kiln_layout_t layout = w0->layout;
      for (int i = 0; i < 3; ++i) {
        const kiln_node_t* l = &g->nodes[pl->linears[i]];
        const kiln_value_t* wi = &g->values[l->inputs[1]];
        int64_t n_i = wi->shape[1];
        if (layout == KILN_LAYOUT_TRANSPOSED_2D || layout == KILN_LAYOUT_WIDENED_BF16_T)
          memcpy(w + (size_t)(col * K) * e, wi->data, (size_t)(n_i * K) * e); /* (N_i, K) blocks stack */
        else /* (K, N_i) blocks sit side by side */
          for (int64_t r = 0; r < K; ++r)
            memcpy(w + (size_t)(r * n_total + col) * e, (const char*)wi->data + (size_t)(r * n_i) * e,
                   (size_t)n_i * e);
        if (b) memcpy(b + col, g->values[l->inputs[2]].data, (size_t)n_i * sizeof(float));
        col += n_i;
      }
      int32_t ins[3], wid, bid = -1;
      int64_t wshape[2] = {K, n_total};
      s = kiln_rewriter_value(&rw, n->inputs[0], &ins[0]);
      if (!s)
        s = kiln_graph_add_constant_owned(rw.dst, "qkv_weight", KILN_F32, 2, wshape, layout, w, (size_t)(K * n_total) * e, &wid);
      else
        kiln_allocator_free(g->allocator, w);
      if (!s && b)
        s = kiln_graph_add_constant_owned(rw.dst, "qkv_bias", KILN_F32, 1, &n_total,
                                          KILN_LAYOUT_DENSE, b, (size_t)n_total * sizeof(float), &bid);
      else if (b)
        kiln_allocator_free(g->allocator, b);
      if (s) break;
      ins[1] = wid;
      ins[2] = bid;
      int32_t fused;
      int64_t params[KILN_MAX_PARAMS] = {KILN_ACT_NONE};
      s = kiln_graph_add_node(rw.dst, KILN_OP_LINEAR, ins, b ? 3 : 2, params, 1, NULL, 0,
                              "q, k and v projections, fused", &fused);
      /* Each of q, k, v now reads the fused output. */
      for (int i = 0; i < 3 && !s; ++i) rw.remap[g->nodes[pl->linears[i]].outputs[0]] = fused;
      for (int i = 0; i < 3 && !s; ++i) rw.remap[pl->src[i]] = fused;
      continue;
    }
    if (role[ni] == 2) {
      const kiln_attn_plan_t* pl = &plan[ni];
      int64_t params[KILN_MAX_PARAMS] = {0};
      params[KILN_P(SDPA, CAUSAL)] = n->params[KILN_P(SDPA, CAUSAL)];
      params[KILN_P(SDPA, FLAGS)] = KILN_SDPA_VIEWS | (pl->out_copy >= 0 ? KILN_SDPA_OUT_BSHD : 0) |
                                    (n->params[KILN_P(SDPA, FLAGS)] &
                                     (KILN_SDPA_SCALE_HEAD_DIM | KILN_SDPA_BF16 | KILN_SDPA_EVERY_KEY));
      /* dims: BATCH..V_HEAD_DIM in order; each view: its OFFSET, then STRIDES. */
      _Static_assert(KILN_P(SDPA, V_HEAD_DIM) - KILN_P(SDPA, BATCH) == 6 &&
                         KILN_P(SDPA, K_OFFSET) == KILN_P(SDPA, Q_OFFSET) + 5 &&
                         KILN_P(SDPA, V_OFFSET) == KILN_P(SDPA, Q_OFFSET) + 10,
                     "sdpa's view fields");
      memcpy(params + KILN_P(SDPA, BATCH), pl->dims, sizeof(pl->dims));
      for (int i = 0; i < 3; ++i)
        memcpy(params + KILN_P(SDPA, Q_OFFSET) + 5 * i, pl->view[i], 5 * sizeof(int64_t));
      int32_t ins[4] = {pl->src[0], pl->src[1], pl->src[2], n->n_inputs > 3 ? n->inputs[3] : -1};
      int32_t n_in = (n->n_inputs > 3 && n->inputs[3] >= 0 && !pl->drop_mask) ? 4 : 3;
      int32_t result = pl->out_copy >= 0 ? g->nodes[pl->out_copy].outputs[0] : n->outputs[0];
      s = kiln_rewriter_emit(&rw, KILN_OP_SDPA, ins, n_in, params, n->fparams, n->origin, result);
      continue;
    }
    s = kiln_rewriter_copy_node(&rw, n);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
done_early:
  free(uses);
  free(user);
  free(plan);
  free(role);
  free(sdpa_of);
  return s;
}
