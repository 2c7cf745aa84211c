/* Cast folding for bf16 graphs (torch.autocast, bf16 models): moves the
 * casts python/kiln/lowp.py places where eager rounds so that fewer of them
 * are passes over memory, without changing a bit of any result.
 *
 * A narrowing CAST (float32 -> bfloat16) of x and the views of its result
 * (RESHAPE, STRIDED_COPY, up to KILN_CASTS_MAX_VIEWS deep) form a tree of
 * bf16 values. Each value's readers are served as follows:
 *   - the a of a MATMUL whose b is not a constant: the MATMUL reads x through
 *     the same views and rounds it to bf16 as it packs A
 *     (KILN_MATMUL_ROUND_A_BF16). The cast's pass over memory goes, and the
 *     packing reads fp32 with the fast packers instead of widening bf16 one
 *     element at a time. A constant b keeps the cast: quantized and bf16
 *     weight forms read a as they are told by its dtype (kiln_hal_cpu_constant.c);
 *   - a widening CAST (bfloat16 -> float32): the pair only rounds float32
 *     values to bf16. It is emitted on x itself (CAST, CAST: fuse_eltwise
 *     makes them one ROUND_BF16 instruction, inside the reader's fused
 *     group when it is elementwise), then the views, now on float32, so a
 *     transpose lands next to the MATMUL that reads it and simplify makes it
 *     a transposed read (AOTAutograd's weight and gradient t());
 *   - anything else (a graph output, a MATMUL's b, other ops) reads the bf16
 *     bytes: the cast and the views to that value are emitted, once each,
 *     where the first such reader needs them.
 * The first two read float32 only when it costs no more than the bf16 bytes:
 * when no value of the tree needs its bytes (then the cast is gone), or,
 * for a MATMUL's a, when the views to it are reshapes (free). When the
 * bytes are made anyway, a widening reader widens them: rounding x again
 * would read twice the bytes. Each rounding and each float32 view is
 * emitted once per value, shared by its readers (AOTAutograd's backward
 * reads one bf16 gradient in two GEMMs and a bias sum); where a GEMM reads
 * the float32 views of a value anyway, its rounding is made after them
 * rather than before a second copy of them.
 *
 * Exact: a cast is elementwise, so it commutes with views bit for bit, and
 * a GEMM that rounds A as it packs multiplies the very values the cast would
 * have written (the same rounding, kiln_gemm_bf16_from_f32's, NaN quiet).
 * KILN_CASTS=keep turns the pass (and fuse_eltwise's pairing) off, for A/B
 * runs and the tests that compare the two bit for bit; KILN_CASTS=chains
 * keeps the bytes of every tree but those read once along a single chain
 * (this pass before it decided per value), for A/B runs. */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"

enum { KILN_CASTS_MAX_VIEWS = 8 };

/* A bf16 value of a tree: CAST(src) (parent -1) or a view of parent. */
typedef struct {
  int32_t src;    /* the float32 value at the root (src graph id), or -1: none */
  int32_t root;   /* the tree's root value (the narrowing CAST's output) */
  int32_t parent; /* the value this one is a view of, or -1 */
  int32_t node;   /* the CAST or view node making it */
  int32_t depth;  /* views from the root */
  int32_t reshapes_only;
} kiln_casts_tree_t;

typedef struct {
  const kiln_graph_t* g;
  const kiln_casts_tree_t* t;
  kiln_rewriter_t* rw;  /* rw->remap: the bf16 value's bytes */
  int32_t* rounded;     /* dst id of the value rounded in float32, or -1 */
  int32_t* plain;       /* dst id of the float32 source through the views, or -1 */
  const char* wants_plain; /* the plain form is made for a GEMM (of this value or a view) */
} kiln_casts_t;

static int kiln_casts_is_cast(const kiln_graph_t* g, const kiln_node_t* n, kiln_dtype_t from,
                              kiln_dtype_t to) {
  return n->op == KILN_OP_CAST && n->n_inputs == 1 && g->values[n->inputs[0]].dtype == from &&
         g->values[n->outputs[0]].dtype == to;
}

static int kiln_casts_is_view(const kiln_node_t* n) {
  return (n->op == KILN_OP_RESHAPE || n->op == KILN_OP_STRIDED_COPY) && n->n_inputs == 1;
}

static kiln_status_t kiln_casts_cast(kiln_rewriter_t* rw, const kiln_node_t* like,
                                     kiln_dtype_t to, int32_t* io) {
  int64_t params[KILN_MAX_PARAMS] = {0};
  params[KILN_P(CAST, DTYPE)] = to;
  int32_t in = *io;
  return kiln_graph_add_node(rw->dst, KILN_OP_CAST, &in, 1, params, KILN_MAX_PARAMS, NULL, 0,
                             like->origin, io);
}

/* Emits view node `view`'s op on dst value in, into *out. */
static kiln_status_t kiln_casts_view(kiln_rewriter_t* rw, const kiln_node_t* view, int32_t in,
                                     int32_t* out) {
  return kiln_graph_add_node(rw->dst, view->op, &in, 1, view->params, KILN_MAX_PARAMS,
                             view->fparams, KILN_MAX_FPARAMS, view->origin, out);
}

/* The dst value of tree value v in one of three forms, each emitted once:
 * form 0 its bf16 bytes (rw->remap), 1 rounded in float32, 2 the float32
 * source unrounded (for a GEMM that rounds as it packs). */
static kiln_status_t kiln_casts_form(kiln_casts_t* c, int32_t v, int form, int32_t* out) {
  int32_t* memo = form == 0 ? c->rw->remap : form == 1 ? c->rounded : c->plain;
  if (memo[v] >= 0) {
    *out = memo[v];
    return kiln_ok();
  }
  const kiln_casts_tree_t* t = &c->t[v];
  const kiln_node_t* n = &c->g->nodes[t->node];
  int32_t d;
  if (form == 1 && c->wants_plain[v] && t->parent >= 0) {
    /* The float32 views are made for a GEMM anyway: round after them rather
     * than copy the views a second time. */
    KILN_RETURN_IF_ERROR(kiln_casts_form(c, v, 2, &d));
    KILN_RETURN_IF_ERROR(kiln_casts_cast(c->rw, n, KILN_BF16, &d));
    KILN_RETURN_IF_ERROR(kiln_casts_cast(c->rw, n, KILN_F32, &d));
  } else if (t->parent < 0) {
    KILN_RETURN_IF_ERROR(kiln_rewriter_value(c->rw, t->src, &d));
    if (form != 2) KILN_RETURN_IF_ERROR(kiln_casts_cast(c->rw, n, KILN_BF16, &d));
    if (form == 1) KILN_RETURN_IF_ERROR(kiln_casts_cast(c->rw, n, KILN_F32, &d));
  } else {
    int32_t in;
    KILN_RETURN_IF_ERROR(kiln_casts_form(c, t->parent, form, &in));
    KILN_RETURN_IF_ERROR(kiln_casts_view(c->rw, n, in, &d));
  }
  memo[v] = d;
  *out = d;
  return kiln_ok();
}

/* Node n's inputs that are tree values, with their bytes. */
static kiln_status_t kiln_casts_bytes_of_inputs(kiln_casts_t* c, const kiln_node_t* n) {
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    int32_t v = n->inputs[i], d;
    if (v >= 0 && c->t[v].src >= 0) KILN_RETURN_IF_ERROR(kiln_casts_form(c, v, 0, &d));
  }
  return kiln_ok();
}

/* 1 when value v is read once, through views each read once, as a MATMUL's
 * b. reader[v]: the node reading v when it has one reader, else -1. */
static int kiln_casts_feeds_b(const kiln_graph_t* g, const int32_t* reader, int32_t v) {
  for (int hops = 0; hops <= KILN_CASTS_MAX_VIEWS && reader[v] >= 0; ++hops) {
    const kiln_node_t* r = &g->nodes[reader[v]];
    if (r->op == KILN_OP_MATMUL) return r->inputs[1] == v && r->inputs[0] != v;
    if (!kiln_casts_is_view(r)) return 0;
    v = r->outputs[0];
  }
  return 0;
}

/* A MATMUL that can read its a in float32 rounding it as it packs. */
static int kiln_casts_rounds_a(const kiln_graph_t* g, const kiln_node_t* n) {
  return n->op == KILN_OP_MATMUL && n->inputs[0] != n->inputs[1] &&
         g->values[n->inputs[1]].kind != KILN_VALUE_CONSTANT &&
         !(n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_A_BF16);
}

/* Likewise its b (never a constant: a tree value is a CAST's or a view's
 * output, and its float32 source is no constant either after folding). */
static int kiln_casts_rounds_b(const kiln_graph_t* g, const kiln_node_t* n) {
  (void)g;
  return n->op == KILN_OP_MATMUL && n->inputs[0] != n->inputs[1] &&
         !(n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_B_BF16);
}

/* Node n reads its input i, a tree value, in float32 rounding it (a
 * MATMUL's a or b). */
static int kiln_casts_rounds(const kiln_graph_t* g, const kiln_node_t* n, int32_t i) {
  return i == 0 ? kiln_casts_rounds_a(g, n) : i == 1 && kiln_casts_rounds_b(g, n);
}

kiln_status_t kiln_pass_casts(kiln_graph_t* g, int mode, kiln_graph_t** out_graph,
                              int32_t* out_folded) {
  *out_graph = NULL;
  *out_folded = 0;
  int32_t nv = g->n_values, nn = g->n_nodes;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  kiln_casts_tree_t* t = malloc(sizeof(kiln_casts_tree_t) * (size_t)(nv + 1));
  int32_t* reader = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* memo = malloc(sizeof(int32_t) * 2 * (size_t)(nv + 1));
  /* Per root: some value of the tree is read as bf16 bytes. */
  char* needs_bytes = calloc((size_t)nv + 1, 1);
  char* wants_plain = calloc((size_t)nv + 1, 1);
  char* bytes_read = calloc((size_t)nv + 1, 1); /* the value's own bytes are read */
  /* A float32 value (a folded widening CAST's, and views of it) that the
   * MATMUL reading it as b is to round to bf16 as it packs. */
  char* round_b = calloc((size_t)nv + 1, 1);
  kiln_rewriter_t rw;
  memset(&rw, 0, sizeof(rw));
  kiln_status_t s = (!uses || !t || !reader || !memo || !needs_bytes || !wants_plain || !bytes_read ||
                     !round_b)
                        ? kiln_status_make(KILN_OUT_OF_MEMORY, "cast folding")
                        : kiln_rewriter_initialize(&rw, g);
  if (s) goto done;
  kiln_casts_t c = {g, t, &rw, memo, memo + nv + 1, wants_plain};
  kiln_graph_count_uses(g, uses);
  for (int32_t v = 0; v < nv; ++v) {
    t[v].src = -1;
    reader[v] = -1;
    memo[v] = memo[nv + 1 + v] = -1;
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) uses[g->outputs[o]] += nv + 1; /* never "read once" */
  for (int32_t ni = 0; ni < nn; ++ni)
    for (int32_t i = 0; i < g->nodes[ni].n_inputs; ++i) {
      int32_t v = g->nodes[ni].inputs[i];
      if (v >= 0 && uses[v] == 1) reader[v] = ni;
    }

  /* The trees. */
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int32_t y = n->outputs[0], x = n->n_inputs > 0 ? n->inputs[0] : -1;
    if (kiln_casts_is_cast(g, n, KILN_F32, KILN_BF16)) {
      t[y] = (kiln_casts_tree_t){n->inputs[0], y, -1, ni, 0, 1};
    } else if (kiln_casts_is_view(n) && x >= 0 && t[x].src >= 0 &&
               t[x].depth < KILN_CASTS_MAX_VIEWS) {
      t[y] = (kiln_casts_tree_t){t[x].src, t[x].root, x, ni, t[x].depth + 1,
                                 t[x].reshapes_only && n->op == KILN_OP_RESHAPE};
    }
  }
  /* Which trees' bytes someone reads. A view of a tree value is in the tree
   * (its own readers decide); chains mode: any tree not a chain read once. */
  for (int32_t o = 0; o < g->n_outputs; ++o)
    if (t[g->outputs[o]].src >= 0) bytes_read[g->outputs[o]] = needs_bytes[t[g->outputs[o]].root] = 1;
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      int32_t v = n->inputs[i];
      if (v < 0 || t[v].src < 0) continue;
      int32_t y = n->outputs[0];
      int served = (t[y].src >= 0 && t[y].parent == v) ||
                   kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32) ||
                   kiln_casts_rounds(g, n, i);
      if (!served || (mode == 1 && uses[v] != 1)) needs_bytes[t[v].root] = 1;
    }
  }
  /* Then which values' own bytes are read (made where the value was), and
   * whose float32 views a GEMM reads (see the MATMUL case below; their
   * parents' too). */
  for (int32_t ni = 0; ni < nn; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    for (int32_t i = 0; i < n->n_inputs; ++i) {
      int32_t v = n->inputs[i], y = n->outputs[0];
      if (v < 0 || t[v].src < 0 || (t[y].src >= 0 && t[y].parent == v)) continue;
      int lazy = !needs_bytes[t[v].root];
      if (((lazy || t[v].reshapes_only) && kiln_casts_rounds(g, n, i)) ||
          (lazy && kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32) && kiln_casts_feeds_b(g, reader, y)))
        for (int32_t p = v; p >= 0 && !wants_plain[p]; p = t[p].parent) wants_plain[p] = 1;
      else if (!(lazy && kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32)))
        bytes_read[v] = 1;
    }
  }

  for (int32_t ni = 0; ni < nn && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int32_t y = n->outputs[0];
    int32_t x = n->n_inputs > 0 ? n->inputs[0] : -1;
    if (t[y].src >= 0) {
      /* A tree value: its bytes are made here when something reads them (a
       * graph output: AOTAutograd's bf16 tensors saved for backward), while
       * its source is fresh in cache, else when a reader needs them. */
      int32_t d;
      if (bytes_read[y]) s = kiln_casts_form(&c, y, 0, &d);
      continue;
    }
    int lazy = x >= 0 && t[x].src >= 0 && !needs_bytes[t[x].root];
    if (lazy && kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32) && kiln_casts_feeds_b(g, reader, y) &&
        g->values[t[x].src].kind != KILN_VALUE_CONSTANT) {
      /* A widening CAST read only as a MATMUL's b, of a value whose bytes
       * nobody reads: the float32 source through the tree's views; the views
       * after the CAST stay on float32 (as in the graph) and the MATMUL
       * rounds b as it packs (KILN_MATMUL_ROUND_B_BF16). The cast goes. */
      s = kiln_casts_form(&c, x, 2, &rw.remap[y]);
      round_b[y] = 1;
      ++*out_folded;
      continue;
    }
    if (kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32) && kiln_casts_feeds_b(g, reader, y)) {
      /* A widening CAST read only as a MATMUL's b (through views): the GEMM
       * reads the bf16 value and widens it as it packs B; the views, now on
       * bf16 bytes, move half the bytes or become a transposed read. */
      if (x >= 0 && t[x].src >= 0) s = kiln_casts_form(&c, x, 0, &rw.remap[x]);
      if (!s) s = kiln_rewriter_value(&rw, x, &rw.remap[y]);
      ++*out_folded;
      continue;
    }
    if (lazy && kiln_casts_is_cast(g, n, KILN_BF16, KILN_F32)) {
      /* A round trip: the source rounded in float32, through the views. */
      s = kiln_casts_form(&c, x, 1, &rw.remap[y]);
      ++*out_folded;
      continue;
    }
    if (kiln_casts_is_view(n) && round_b[x]) round_b[y] = 1; /* on the way to the MATMUL's b */
    int round[2] = {0, 0};
    for (int32_t i = 0; i < 2 && n->op == KILN_OP_MATMUL; ++i) {
      int32_t v = n->inputs[i];
      round[i] = t[v].src >= 0 && (!needs_bytes[t[v].root] || t[v].reshapes_only) &&
                 kiln_casts_rounds(g, n, i);
    }
    if (n->op == KILN_OP_MATMUL && round_b[n->inputs[1]]) round[1] = 2; /* b is float32 already */
    if (round[0] || round[1]) {
      /* A MATMUL's a or b (or both): the float32 source through the views,
       * rounded by the GEMM as it packs. */
      int32_t ins[2] = {-1, -1};
      for (int32_t i = 0; i < 2 && !s; ++i) {
        int32_t v = n->inputs[i];
        if (t[v].src >= 0) s = kiln_casts_form(&c, v, round[i] == 1 ? 2 : 0, &ins[i]);
        else s = kiln_rewriter_value(&rw, v, &ins[i]);
      }
      if (s) break;
      int64_t params[KILN_MAX_PARAMS];
      memcpy(params, n->params, sizeof(params));
      if (round[0]) params[KILN_P(MATMUL, FLAGS)] |= KILN_MATMUL_ROUND_A_BF16;
      if (round[1]) params[KILN_P(MATMUL, FLAGS)] |= KILN_MATMUL_ROUND_B_BF16;
      s = kiln_graph_add_node(rw.dst, n->op, ins, 2, params, KILN_MAX_PARAMS, n->fparams,
                              KILN_MAX_FPARAMS, n->origin, &rw.remap[y]);
      ++*out_folded;
      continue;
    }
    /* Anything else reads the bf16 bytes. */
    s = kiln_casts_bytes_of_inputs(&c, n);
    if (!s) s = kiln_rewriter_copy_node(&rw, n);
  }
  for (int32_t o = 0; o < g->n_outputs && !s; ++o) {
    int32_t v = g->outputs[o], d;
    if (t[v].src >= 0) s = kiln_casts_form(&c, v, 0, &d);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
done:
  kiln_rewriter_deinitialize(&rw);
  free(uses);
  free(t);
  free(reader);
  free(memo);
  free(needs_bytes);
  free(wants_plain);
  free(bytes_read);
  free(round_b);
  return s;
}
