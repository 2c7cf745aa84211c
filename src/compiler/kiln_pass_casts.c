/* Cast folding for bf16 graphs (torch.autocast, bf16 models): moves the
 * casts python/kiln/lowp.py places where eager rounds so that fewer of them
 * are passes over memory, without changing a bit of any result.
 *
 * A narrowing CAST (float32 -> bfloat16) of x whose result is read once
 * (not a graph output), possibly through a chain of views and copies each
 * read once (RESHAPE, STRIDED_COPY: at most KILN_CASTS_MAX_VIEWS), by
 *   - the a of a MATMUL whose b is not a constant: the MATMUL reads x through
 *     the same views and rounds it to bf16 as it packs A
 *     (KILN_MATMUL_ROUND_A_BF16). The cast's pass over memory goes, and the
 *     packing reads fp32 with the fast packers instead of widening bf16 one
 *     element at a time. A constant b keeps the cast: quantized and bf16
 *     weight forms read a as they are told by its dtype (kiln_hal_cpu_constant.c);
 *   - a widening CAST (bfloat16 -> float32): the pair only rounds float32
 *     values to bf16. It is emitted on x itself (CAST, CAST: fuse_eltwise
 *     makes them one ROUND_BF16 instruction), then the views, now on float32,
 *     so a transpose lands next to the MATMUL that reads it and simplify
 *     makes it a transposed read (AOTAutograd's weight and gradient t()).
 * Any other reader gets the cast back where it was (then its views, on
 * bf16 bytes).
 *
 * Exact: a cast is elementwise, so it commutes with views bit for bit, and
 * a GEMM that rounds A as it packs multiplies the very values the cast would
 * have written (the same rounding, kiln_gemm_bf16_from_f32's, NaN quiet).
 * KILN_CASTS=keep turns the pass (and fuse_eltwise's pairing) off, for A/B
 * runs and the tests that compare the two bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"

enum { KILN_CASTS_MAX_VIEWS = 8 };

/* A bf16 value made as CAST(src) then views[0..n_views). */
typedef struct {
  int32_t src;     /* the float32 value (src graph id), or -1: none */
  int32_t pending; /* not emitted yet: the chain is read once */
  int32_t reshapes_only;
  int32_t n_views;
  int32_t views[KILN_CASTS_MAX_VIEWS]; /* node indices */
} kiln_casts_pending_t;

static int kiln_casts_is_cast(const kiln_graph_t* g, const kiln_node_t* n, kiln_dtype_t from,
                              kiln_dtype_t to) {
  return n->op == KILN_OP_CAST && n->n_inputs == 1 && g->values[n->inputs[0]].dtype == from &&
         g->values[n->outputs[0]].dtype == to;
}

/* Emits node `view`'s op (a RESHAPE or STRIDED_COPY) on dst value *io,
 * replacing *io by its result. */
static kiln_status_t kiln_casts_view(kiln_rewriter_t* rw, const kiln_node_t* view, int32_t* io) {
  int32_t in = *io;
  return kiln_graph_add_node(rw->dst, view->op, &in, 1, view->params, KILN_MAX_PARAMS,
                             view->fparams, KILN_MAX_FPARAMS, view->origin, io);
}

/* Emits CAST(src -> dtype) (when dtype >= 0) and then the views, leaving
 * the final dst value in *out. origin: the narrowing cast's. */
static kiln_status_t kiln_casts_replay(kiln_rewriter_t* rw, const kiln_casts_pending_t* p,
                                       const kiln_node_t* cast, int round, int32_t* out) {
  KILN_RETURN_IF_ERROR(kiln_rewriter_value(rw, p->src, out));
  if (cast) {
    int64_t params[KILN_MAX_PARAMS] = {0};
    params[KILN_P(CAST, DTYPE)] = KILN_BF16;
    int32_t in = *out;
    KILN_RETURN_IF_ERROR(kiln_graph_add_node(rw->dst, KILN_OP_CAST, &in, 1, params,
                                             KILN_MAX_PARAMS, NULL, 0, cast->origin, out));
    if (round) {
      params[KILN_P(CAST, DTYPE)] = KILN_F32;
      in = *out;
      KILN_RETURN_IF_ERROR(kiln_graph_add_node(rw->dst, KILN_OP_CAST, &in, 1, params,
                                               KILN_MAX_PARAMS, NULL, 0, cast->origin, out));
    }
  }
  return kiln_ok();
}

/* Emits pending value v as it was (its CAST, then its views on bf16
 * bytes), once. */
static kiln_status_t kiln_casts_materialize(kiln_rewriter_t* rw, const kiln_graph_t* g,
                                            const kiln_casts_pending_t* pend,
                                            const int32_t* cast_of, int32_t v) {
  if (v < 0 || !pend[v].pending || rw->remap[v] >= 0) return kiln_ok();
  int32_t d;
  kiln_status_t s = kiln_casts_replay(rw, &pend[v], &g->nodes[cast_of[v]], 0, &d);
  for (int32_t k = 0; k < pend[v].n_views && !s; ++k)
    s = kiln_casts_view(rw, &g->nodes[pend[v].views[k]], &d);
  if (!s) rw->remap[v] = d;
  return s;
}

/* 1 when value v is read once, through views each read once, as a MATMUL's
 * b. reader[v]: the node reading v when it has one reader, else -1. */
static int kiln_casts_feeds_b(const kiln_graph_t* g, const int32_t* reader, int32_t v) {
  for (int hops = 0; hops <= KILN_CASTS_MAX_VIEWS && reader[v] >= 0; ++hops) {
    const kiln_node_t* r = &g->nodes[reader[v]];
    if (r->op == KILN_OP_MATMUL) return r->inputs[1] == v && r->inputs[0] != v;
    if ((r->op != KILN_OP_RESHAPE && r->op != KILN_OP_STRIDED_COPY) || r->n_inputs != 1) return 0;
    v = r->outputs[0];
  }
  return 0;
}

kiln_status_t kiln_pass_casts(kiln_graph_t* g, kiln_graph_t** out_graph, int32_t* out_folded) {
  *out_graph = NULL;
  *out_folded = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  char* is_output = calloc((size_t)nv + 1, 1);
  kiln_casts_pending_t* pend = malloc(sizeof(kiln_casts_pending_t) * (size_t)(nv + 1));
  int32_t* cast_of = malloc(sizeof(int32_t) * (size_t)(nv + 1)); /* the narrowing CAST node */
  int32_t* reader = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  kiln_rewriter_t rw;
  memset(&rw, 0, sizeof(rw));
  kiln_status_t s = (!uses || !is_output || !pend || !cast_of || !reader)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "cast folding")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done;
  kiln_graph_count_uses(g, uses);
  for (int32_t o = 0; o < g->n_outputs; ++o) is_output[g->outputs[o]] = 1;
  for (int32_t v = 0; v < nv; ++v) {
    pend[v].src = -1;
    pend[v].pending = 0;
    reader[v] = -1;
  }
  for (int32_t ni = 0; ni < nn; ++ni)
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i) {
      int32_t v = g->nodes[ni].inputs[i];
      if (v >= 0 && uses[v] == 1 && !is_output[v]) reader[v] = ni;
    }

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int32_t y = n->outputs[0];
    int single = uses[y] == 1 && !is_output[y];
    int32_t x = n->n_inputs > 0 ? n->inputs[0] : -1;
    /* Where bf16 values come from; a chain read once is not emitted yet. */
    if (kiln_casts_is_cast(g, n, KILN_F32, KILN_BF16)) {
      pend[y].src = n->inputs[0];
      pend[y].pending = single;
      pend[y].reshapes_only = 1;
      pend[y].n_views = 0;
      cast_of[y] = ni;
      if (single) continue;
    } else if ((n->op == KILN_OP_RESHAPE || n->op == KILN_OP_STRIDED_COPY) && n->n_inputs == 1 &&
               pend[x].src >= 0 && pend[x].n_views < KILN_CASTS_MAX_VIEWS &&
               (pend[x].pending || n->op == KILN_OP_RESHAPE)) {
      pend[y] = pend[x];
      pend[y].pending = pend[x].pending && single;
      pend[y].reshapes_only &= n->op == KILN_OP_RESHAPE;
      pend[y].views[pend[y].n_views++] = ni;
      cast_of[y] = cast_of[x];
      if (pend[y].pending) continue;
    }
    /* A widening CAST read only as a MATMUL's b (through views): the GEMM
     * reads the bf16 value and widens it as it packs B; the views, now on
     * bf16 bytes, move half the bytes or become a transposed read. */
    if (kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32) && kiln_casts_feeds_b(g, reader, y)) {
      s = kiln_casts_materialize(&rw, g, pend, cast_of, x);
      if (!s) s = kiln_rewriter_value(&rw, x, &rw.remap[y]);
      ++*out_folded;
      continue;
    }
    /* A reader of a pending value. */
    if (x >= 0 && pend[x].pending && kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32)) {
      int32_t v;
      s = kiln_casts_replay(&rw, &pend[x], &g->nodes[cast_of[x]], 1, &v);
      for (int32_t k = 0; k < pend[x].n_views && !s; ++k)
        s = kiln_casts_view(&rw, &g->nodes[pend[x].views[k]], &v);
      rw.remap[y] = v;
      ++*out_folded;
      continue;
    }
    /* A MATMUL's a: the float32 source through the views, rounded by the
     * GEMM. When the bf16 value has other readers too it is made for them
     * as well, and only views that are free (reshapes) are repeated. */
    if (x >= 0 && pend[x].src >= 0 && (pend[x].pending || pend[x].reshapes_only) &&
        n->op == KILN_OP_MATMUL &&
        g->values[n->inputs[1]].kind != KILN_VALUE_CONSTANT &&
        !(n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_A_BF16)) {
      int32_t v;
      s = kiln_casts_replay(&rw, &pend[x], NULL, 0, &v);
      for (int32_t k = 0; k < pend[x].n_views && !s; ++k)
        s = kiln_casts_view(&rw, &g->nodes[pend[x].views[k]], &v);
      int32_t ins[2] = {v, -1};
      if (!s) s = kiln_rewriter_value(&rw, n->inputs[1], &ins[1]);
      if (s) break;
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, n->params, sizeof(params));
      params[KILN_P(MATMUL, FLAGS)] |= KILN_MATMUL_ROUND_A_BF16;
      s = kiln_graph_add_node(rw.dst, n->op, ins, 2, params, KILN_MAX_PARAMS, n->fparams,
                              KILN_MAX_FPARAMS, n->origin, &rw.remap[y]);
      ++*out_folded;
      continue;
    }
    /* Anything else: the cast and its views where they were. */
    for (int32_t i = 0; i < n->n_inputs && !s; ++i)
      s = kiln_casts_materialize(&rw, g, pend, cast_of, n->inputs[i]);
    if (!s) s = kiln_rewriter_copy_node(&rw, n);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
done:
  kiln_rewriter_deinitialize(&rw);
  free(uses);
  free(is_output);
  free(pend);
  free(cast_of);
  free(reader);
  return s;
}
