/* The gated-MLP fusion's joined weights (kiln_joined_const.h): a gated pair
 * silu(x Wa) * (x Wb) whose weights are borrowed (frozen parameters) gets
 * [Wa | Wb] as a descriptor of the two weights where they lie, and the
 * pack pass packs it from there. Checked here, for every weight form the
 * CPU target has (fp32, bf16 weights, bf16 compute, int8, int4 symmetric
 * and asymmetric, with and without int8 activations, and a bf16 model's
 * bf16 x, which takes bf16 compute unasked), both weight layouts
 * (dense (K, N) and nn.Linear's transpose) and a width that fills whole
 * 16-column panels (32) and one whose halves meet inside a panel (24):
 *   - the pass makes the descriptor only for borrowed weights and only when
 *     asked (the pack pass will run); owned weights are copied as before;
 *   - the compiled graph's packed weight is byte for byte the one packed
 *     from a copy of [Wa | Wb], no joined constant is left, and the
 *     outputs are bit for bit the same;
 *   - a graph still holding a joined weight cannot be written to a file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_activation.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_joined_const.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kiln_test.h"
#include "kiln_test_weight_forms.h"
#include "runtime/kiln_model.h"

enum { JM = 3, JK = 40, JN_MAX = 32 };

/* x (JM, JK) -> LINEAR(x, Wa, silu) * LINEAR(x, Wb): Wa, Wb (JK, n) stored
 * as `layout` says, borrowed or copied into the graph. */
static int jw_graphs; /* graphs made so far */

static kiln_graph_t* jw_graph(int64_t n, kiln_layout_t layout, int borrowed, kiln_dtype_t xt,
                              const float* wa, const float* wb) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t xs[2] = {JM, JK}, ws[2] = {JK, n};
  size_t bytes = (size_t)(JK * n) * sizeof(float);
  int32_t x = -1, w[2] = {-1, -1}, h[2] = {-1, -1}, y = -1;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", xt, 2, xs, &x));
  for (int i = 0; i < 2; ++i) {
    const float* d = i ? wb : wa;
    const char* name = i ? "wb" : "wa";
    KILN_EXPECT_OK(borrowed ? kiln_graph_add_constant_borrowed(g, name, KILN_F32, 2, ws, layout, d,
                                                               bytes, &w[i])
                            : kiln_graph_add_constant(g, name, KILN_F32, 2, ws, layout, d, bytes,
                                                      &w[i]));
    /* Keys name the bytes (kiln_graph.h): each graph its own, or the
     * second compile would find the first's packed weight shared. */
    char key[64];
    snprintf(key, sizeof key, "%s.%d", name, jw_graphs);
    KILN_EXPECT_OK(kiln_graph_set_constant_key(g, w[i], key));
    int32_t in[2] = {x, w[i]};
    const int64_t p[1] = {i ? KILN_ACT_NONE : KILN_ACT_SILU};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, p, 1, NULL, 0, NULL, &h[i]));
  }
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, h, 2, NULL, 0, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  ++jw_graphs;
  return g;
}

/* The weight of the graph's only LINEAR, or NULL. */
static const kiln_value_t* jw_linear_weight(const kiln_graph_t* g) {
  const kiln_value_t* w = NULL;
  int linears = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (g->nodes[i].op == KILN_OP_LINEAR) {
      ++linears;
      w = &g->values[g->nodes[i].inputs[1]];
    }
  KILN_EXPECT(linears == 1, "%d LINEARs, want the pair's one", linears);
  return linears == 1 ? w : NULL;
}

/* The pass alone: a descriptor exactly when asked and both are borrowed. */
static void jw_pass(const float* wa, const float* wb) {
  for (int layout = 0; layout < 2; ++layout)
    for (int borrowed = 0; borrowed < 2; ++borrowed)
      for (int joined = 0; joined < 2; ++joined) {
        kiln_layout_t lay = layout ? KILN_LAYOUT_TRANSPOSED_2D : KILN_LAYOUT_DENSE;
        kiln_graph_t *g = jw_graph(JN_MAX, lay, borrowed, KILN_F32, wa, wb), *next = NULL;
        if (!g) return;
        int32_t fused = 0;
        KILN_EXPECT_OK(kiln_pass_fuse_glu(g, joined, NULL, NULL, &next, &fused));
        kiln_graph_release(g); /* the descriptor must not need the old graph */
        if (!next) return;
        KILN_EXPECT_OK(kiln_graph_verify(next));
        const kiln_value_t* w = jw_linear_weight(next);
        KILN_EXPECT(fused == 1 && w, "layout %d borrowed %d joined %d: %d fused", layout, borrowed,
                    joined, fused);
        if (!w) {
          kiln_graph_release(next);
          continue;
        }
        char key[64];
        snprintf(key, sizeof key, "glu(wa.%d,wb.%d)", jw_graphs - 1, jw_graphs - 1);
        KILN_EXPECT(w->shape[0] == JK && w->shape[1] == 2 * JN_MAX && w->key && !strcmp(w->key, key),
                    "the pair's weight is (%lld, %lld) keyed %s", (long long)w->shape[0],
                    (long long)w->shape[1], w->key ? w->key : "(none)");
        kiln_joined_const_t d;
        if (joined && borrowed) {
          KILN_EXPECT(w->layout == KILN_LAYOUT_JOINED_COLS && !kiln_joined_const_view(w, &d) &&
                          d.part[0] == wa && d.part[1] == wb && d.layout == (int64_t)lay,
                      "layout %d: a descriptor of the borrowed weights (layout %d)", layout,
                      (int)w->layout);
          /* Written to a file it would be pointers: the writer refuses. */
          void* bytes = NULL;
          size_t size = 0;
          KILN_EXPECT_ERROR(kiln_artifact_write(next, NULL, 0, &bytes, &size),
                            KILN_INVALID_ARGUMENT);
          free(bytes);
        } else {
          static float want[JK * 2 * JN_MAX];
          kiln_joined_const_copy(JK, JN_MAX, lay, wa, wb, want);
          KILN_EXPECT(w->layout == lay && w->nbytes == sizeof want &&
                          !memcmp(w->data, want, sizeof want),
                      "layout %d borrowed %d joined %d: [wa | wb] copied (layout %d)", layout,
                      borrowed, joined, (int)w->layout);
        }
        kiln_graph_release(next);
      }
}

/* Compiles (taking g) and runs the pair into y; the model in *out (which
 * owns the compiled graph) and its LINEAR's weight in *w. 0 when it ran. */
static int jw_compile_run(const kiln_test_weight_form_t* f, kiln_graph_t* g, const void* x, float* y,
                          kiln_model_t** out, const kiln_value_t** w) {
  kiln_compile_options_t o;
  kiln_test_weight_form_options(f, &o);
  o.fuse_glu = 1;
  kiln_graph_t* c = NULL;
  *out = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &c));
  if (!c) return 1;
  *w = jw_linear_weight(c);
  for (int32_t i = 0; i < c->n_values; ++i)
    KILN_EXPECT(c->values[i].layout != KILN_LAYOUT_JOINED_COLS,
                "%s: value %d still joined after packing", f->name, i);
  if (!*w) {
    kiln_graph_release(c);
    return 1;
  }
  int64_t xs[2] = {JM, JK}, ys[2] = {JM, (*w)->shape[1] / 2};
  KILN_EXPECT_OK(kiln_model_create(c, NULL, NULL, out));
  if (!*out) return 1;
  kiln_tensor_t in = {(void*)x, f->bf16_x ? KILN_BF16 : KILN_F32, 2, xs}, ot = {y, KILN_F32, 2, ys};
  KILN_EXPECT_OK(kiln_model_run(*out, &in, 1, &ot, 1));
  return 0;
}

/* Whole compiles: borrowed (joined) against copied, byte for byte. */
static void jw_compile(const float* x, const float* wa, const float* wb) {
  static const int64_t widths[2] = {JN_MAX, 24};
  /* The bf16 model's inputs: x and the weights rounded to bf16. */
  static uint16_t x16[JM * JK];
  static float wa16[JK * JN_MAX], wb16[JK * JN_MAX];
  for (int i = 0; i < JM * JK; ++i) x16[i] = kiln_gemm_bf16_from_f32(x[i]);
  for (int i = 0; i < JK * JN_MAX; ++i) {
    uint32_t u[2] = {(uint32_t)kiln_gemm_bf16_from_f32(wa[i]) << 16,
                     (uint32_t)kiln_gemm_bf16_from_f32(wb[i]) << 16};
    memcpy(&wa16[i], &u[0], 4);
    memcpy(&wb16[i], &u[1], 4);
  }
  for (size_t fi = 0; fi < kiln_test_n_weight_forms; ++fi)
    for (int layout = 0; layout < 2; ++layout)
      for (int wi = 0; wi < 2; ++wi) {
        const kiln_test_weight_form_t* f = &kiln_test_weight_forms[fi];
        const int64_t n = widths[wi];
        kiln_layout_t lay = layout ? KILN_LAYOUT_TRANSPOSED_2D : KILN_LAYOUT_DENSE;
        float got[2][JM * JN_MAX];
        kiln_model_t* m[2] = {NULL, NULL};
        const kiln_value_t* w[2] = {NULL, NULL};
        int bad = 0;
        for (int borrowed = 0; borrowed < 2; ++borrowed) {
          kiln_graph_t* g = f->bf16_x ? jw_graph(n, lay, borrowed, KILN_BF16, wa16, wb16)
                                      : jw_graph(n, lay, borrowed, KILN_F32, wa, wb);
          if (!g) return;
          bad |= jw_compile_run(f, g, f->bf16_x ? (const void*)x16 : (const void*)x, got[borrowed],
                                &m[borrowed], &w[borrowed]); /* takes g */
        }
        if (!bad) {
          KILN_EXPECT(w[0]->data != w[1]->data, "%s: one packed weight shared by both", f->name);
          KILN_EXPECT(w[0]->layout == w[1]->layout && w[0]->nbytes == w[1]->nbytes &&
                          !memcmp(w[0]->data, w[1]->data, w[0]->nbytes),
                      "%s, layout %d, N %lld: packed weight differs from the copy's (layout %d "
                      "%zu bytes against %d %zu)", f->name, layout, (long long)n,
                      (int)w[1]->layout, w[1]->nbytes, (int)w[0]->layout, w[0]->nbytes);
          KILN_EXPECT(!memcmp(got[0], got[1], sizeof(float) * (size_t)(JM * n)),
                      "%s, layout %d, N %lld: outputs differ", f->name, layout, (long long)n);
          KILN_EXPECT(f->bf16_x ? w[1]->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI
                                : w[1]->layout != lay,
                      "%s, N %lld: weight layout %d", f->name, (long long)n, (int)w[1]->layout);
        }
        if (!bad && fi == 0) { /* fp32: the numbers themselves, in double */
          double worst = 0.0;
          for (int i = 0; i < JM; ++i)
            for (int j = 0; j < n; ++j) {
              double a = 0.0, b = 0.0;
              for (int p = 0; p < JK; ++p) {
                double xv = x[i * JK + p];
                a += xv * (layout ? wa[j * JK + p] : wa[p * n + j]);
                b += xv * (layout ? wb[j * JK + p] : wb[p * n + j]);
              }
              double want = a / (1.0 + exp(-a)) * b;
              double e = fabs(got[1][i * n + j] - want) / (1e-6 + fabs(want));
              worst = e > worst ? e : worst;
            }
          KILN_EXPECT(worst < 1e-4, "layout %d, N %lld: fp32 pair off by %g relative", layout,
                      (long long)n, worst);
        }
        kiln_model_release(m[0]);
        kiln_model_release(m[1]);
      }
}

void kiln_test_suite_glu_joined(void) {
  static float x[JM * JK], wa[JK * JN_MAX], wb[JK * JN_MAX];
  kiln_test_fill_f32(x, JM * JK, 71, -2.0f, 2.0f);
  kiln_test_fill_f32(wa, JK * JN_MAX, 72, -0.5f, 0.5f);
  kiln_test_fill_f32(wb, JK * JN_MAX, 73, -0.5f, 0.5f);
  jw_pass(wa, wb);
  jw_compile(x, wa, wb);
}
