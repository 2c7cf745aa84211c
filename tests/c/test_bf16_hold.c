/* bf16 weights held as bf16 through constant folding (kiln_pass_fold.c,
 * KILN_LAYOUT_WIDENED_BF16 and _T): a bf16 model's linear layer reaches the
 * compiler as MATMUL(x, CAST(W)^T) (python/kiln/lowp.py), and folding the
 * CAST used to make a float32 copy of every weight. Checked here:
 *   - the fold pass holds W's own bytes (borrowed, not copied) as the
 *     widened value and as its transpose, keyed after W, when the cast is
 *     read only as matmuls' right operand; a cast with another reader is
 *     made float32 as before;
 *   - whole compiles, for every weight form the CPU target has
 *     (kiln_test_weight_forms.h), give the packed weight byte for byte and the
 *     outputs bit for bit that folding to float32 (fold_constants 1) gives:
 *     nn.Linear's layout, a dense (K, N) weight, a gated pair (joined from
 *     the bf16 halves), an odd K and a last panel of 8 columns;
 *   - with the weights read in place (bf16_in_place, the default), the
 *     LINEARs keep W's own bytes (nn.Linear's rows; the gated pair not
 *     joined) where the form neither quantizes nor computes in bf16, and
 *     give the packed compile's outputs within the sums' rounding;
 *   - any other reader of a held constant gets its float32 values (the pack
 *     pass's fallback); before packing the kernels refuse one, the verifier
 *     refuses one whose bytes do not fit its shape, the artifact writer
 *     refuses to write one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_bf16.h"
#include "base/kiln_pool.h"
#include "compiler/kiln_compiler.h"
#include "hal/kiln_hal.h"
#include "ir/kiln_artifact.h"
#include "kiln_test.h"
#include "kiln_test_weight_forms.h"
#include "kernels/gemm/kiln_gemm.h"
#include "runtime/kiln_model.h"

enum { HM = 3, HK = 41, HN = 40 };

typedef enum { HB_LINEAR, HB_DENSE, HB_GLU, HB_OTHER_READER, HB_SHAPES } hb_shape_t;
static const char* const hb_shape_names[HB_SHAPES] = {"nn.Linear", "dense (K, N)", "gated pair",
                                                      "cast read by an add too"};

static int hb_graphs; /* graphs made so far: each keys its weights apart */

/* x (HM, HK) -> MATMUL(x, B) with B made from the bf16 constant W by a
 * CAST to float32: B = CAST(W)^T with W (HN, HK) (nn.Linear), or B = CAST(W)
 * with W (HK, HN) (dense). The gated pair is silu(x Wa^T) * (x Wb^T); the
 * other reader's graph also returns CAST(W) + CAST(W). */
static kiln_graph_t* hb_graph(hb_shape_t shape, kiln_dtype_t xt, const uint16_t* wa,
                              const uint16_t* wb) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  const int dense = shape == HB_DENSE;
  int64_t xs[2] = {HM, HK}, ws[2] = {dense ? HK : HN, dense ? HN : HK};
  int32_t x = -1, y[2] = {-1, -1}, c0 = -1, out[2] = {-1, -1};
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", xt, 2, xs, &x));
  for (int i = 0; i < (shape == HB_GLU ? 2 : 1); ++i) {
    int32_t w = -1, c = -1, b = -1;
    char key[64];
    snprintf(key, sizeof key, "w%d.%d", i, hb_graphs);
    KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, key, KILN_BF16, 2, ws, KILN_LAYOUT_DENSE,
                                                    i ? wb : wa, sizeof(uint16_t) * HN * HK, &w));
    KILN_EXPECT_OK(kiln_graph_set_constant_key(g, w, key));
    int64_t p[KILN_MAX_PARAMS] = {0};
    p[KILN_P(CAST, DTYPE)] = KILN_F32;
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_CAST, &w, 1, p, KILN_MAX_PARAMS, NULL, 0, NULL, &c));
    b = c;
    if (!dense) {
      memset(p, 0, sizeof p);
      p[KILN_P(VIEW, RANK)] = 2;
      p[KILN_P(VIEW, DIMS)] = HK, p[KILN_P(VIEW, DIMS) + 1] = HN;
      p[KILN_P(VIEW, STRIDES)] = 1, p[KILN_P(VIEW, STRIDES) + 1] = HK;
      KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &c, 1, p, KILN_MAX_PARAMS, NULL,
                                         0, NULL, &b));
    }
    int32_t in[2] = {x, b};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, NULL, 0, NULL, 0, NULL, &y[i]));
    if (i == 0) c0 = c;
  }
  int n_out = 1;
  out[0] = y[0];
  if (shape == HB_GLU) {
    int32_t act = -1, in[2];
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SILU, &y[0], 1, NULL, 0, NULL, 0, NULL, &act));
    in[0] = act, in[1] = y[1];
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, in, 2, NULL, 0, NULL, 0, NULL, &out[0]));
  } else if (shape == HB_OTHER_READER) {
    int32_t in[2] = {c0, c0};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, in, 2, NULL, 0, NULL, 0, NULL, &out[1]));
    n_out = 2;
  }
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, out, n_out));
  ++hb_graphs;
  return g;
}

/* The right operand of the graph's first MATMUL or LINEAR, or NULL. */
static const kiln_value_t* hb_weight(const kiln_graph_t* g) {
  for (int32_t i = 0; i < g->n_nodes; ++i)
    if (g->nodes[i].op == KILN_OP_MATMUL || g->nodes[i].op == KILN_OP_LINEAR)
      return &g->values[g->nodes[i].inputs[1]];
  return NULL;
}

/* The fold pass alone: W's bytes held, or a float32 copy for a cast with
 * another reader. */
static void hb_fold(const uint16_t* w) {
  for (int shape = 0; shape < HB_SHAPES; ++shape) {
    if (shape == HB_GLU) continue; /* two of the nn.Linear case */
    kiln_graph_t *g = hb_graph((hb_shape_t)shape, KILN_F32, w, w), *next = NULL;
    if (!g) return;
    int32_t folded = 0, dead = 0;
    KILN_EXPECT_OK(kiln_pass_fold(g, kiln_hal_target_find(NULL), kiln_pool_default(), 2, &next,
                                  &folded, &dead));
    kiln_graph_release(g); /* the held value must not need the old graph */
    if (!next) return;
    KILN_EXPECT_OK(kiln_graph_verify(next));
    const kiln_value_t* b = hb_weight(next);
    if (!b) {
      KILN_EXPECT(0, "%s: no MATMUL after folding", hb_shape_names[shape]);
      kiln_graph_release(next);
      continue;
    }
    char key[64];
    snprintf(key, sizeof key, "w0.%d|f32%s", hb_graphs - 1, shape == HB_DENSE ? "" : "|T");
    if (shape == HB_OTHER_READER) {
      KILN_EXPECT(b->layout == KILN_LAYOUT_TRANSPOSED_2D && b->data != (const void*)w &&
                      b->nbytes == sizeof(float) * HN * HK,
                  "%s: a float32 copy (layout %d, %zu bytes)", hb_shape_names[shape],
                  (int)b->layout, b->nbytes);
    } else {
      kiln_layout_t want = shape == HB_DENSE ? KILN_LAYOUT_WIDENED_BF16 : KILN_LAYOUT_WIDENED_BF16_T;
      KILN_EXPECT(b->layout == want && b->dtype == KILN_F32 && b->data == (const void*)w &&
                      !b->owned_data && b->nbytes == sizeof(uint16_t) * HN * HK && b->key &&
                      !strcmp(b->key, key),
                  "%s: W's own bytes held (layout %d, %zu bytes, key %s; want layout %d, %s)",
                  hb_shape_names[shape], (int)b->layout, b->nbytes, b->key ? b->key : "(none)",
                  (int)want, key);
      /* Before the pack pass no file holds it, and no kernel reads it
       * (kiln_model_create takes the graph, made or not). */
      void* bytes = NULL;
      size_t size = 0;
      KILN_EXPECT_ERROR(kiln_artifact_write(next, NULL, 0, &bytes, &size), KILN_INVALID_ARGUMENT);
      free(bytes);
      kiln_model_t* m = NULL;
      KILN_EXPECT_ERROR(kiln_model_create(next, NULL, NULL, &m), KILN_UNSUPPORTED);
      KILN_EXPECT(m == NULL, "%s: a model whose MATMUL reads held bf16", hb_shape_names[shape]);
      continue;
    }
    kiln_graph_release(next);
  }
}

/* Compiles g (taking it) with fold_constants `fold` and form f, runs it on
 * x into y (HM x HN floats) and returns the model (which owns the graph). */
static kiln_model_t* hb_compile_run(const kiln_test_weight_form_t* f, int fold, int in_place,
                                    kiln_graph_t* g, const void* x, float* y, float* z) {
  kiln_compile_options_t o;
  kiln_test_weight_form_options(f, &o);
  o.fold_constants = fold;
  o.bf16_in_place = in_place;
  kiln_graph_t* c = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &c));
  if (!c) return NULL;
  for (int32_t i = 0; i < c->n_values && !in_place; ++i)
    KILN_EXPECT(!kiln_layout_is_widened_bf16(c->values[i].layout),
                "%s: value %d still held as bf16 after packing", f->name, i);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(c, NULL, NULL, &m));
  if (!m) return NULL;
  int64_t xs[2] = {HM, HK}, ys[2] = {HM, HN}, zs[2] = {HN, HK};
  kiln_tensor_t in = {(void*)x, f->bf16_x ? KILN_BF16 : KILN_F32, 2, xs};
  kiln_tensor_t out[2] = {{y, KILN_F32, 2, ys}, {z, KILN_F32, 2, zs}};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, out, z ? 2 : 1));
  return m;
}

/* Whole compiles: held (fold 2) and packed against widened to float32
 * (fold 1). */
static void hb_compile(const float* x, const uint16_t* x16, const uint16_t* wa, const uint16_t* wb) {
  for (size_t fi = 0; fi < kiln_test_n_weight_forms; ++fi)
    for (int shape = 0; shape < HB_SHAPES; ++shape) {
      const kiln_test_weight_form_t* f = &kiln_test_weight_forms[fi];
      static float y[2][HM * HN], z[2][HN * HK];
      kiln_model_t* m[2] = {NULL, NULL};
      const void* xin = f->bf16_x ? (const void*)x16 : (const void*)x;
      for (int held = 0; held < 2; ++held) {
        kiln_graph_t* g = hb_graph((hb_shape_t)shape, f->bf16_x ? KILN_BF16 : KILN_F32, wa, wb);
        if (!g) return;
        m[held] = hb_compile_run(f, held ? 2 : 1, 0, g, xin, y[held],
                                 shape == HB_OTHER_READER ? z[held] : NULL);
      }
      if (m[0] && m[1]) {
        const kiln_value_t *w0 = hb_weight(kiln_model_graph(m[0])), *w1 = hb_weight(kiln_model_graph(m[1]));
        KILN_EXPECT(w0 && w1 && w0->layout == w1->layout && w0->nbytes == w1->nbytes &&
                        !memcmp(w0->data, w1->data, w0->nbytes),
                    "%s, %s: the packed weight differs from the float32 fold's (layout %d %zu bytes "
                    "against %d %zu)", f->name, hb_shape_names[shape], w1 ? (int)w1->layout : -1,
                    w1 ? w1->nbytes : 0, w0 ? (int)w0->layout : -1, w0 ? w0->nbytes : 0);
        KILN_EXPECT(!memcmp(y[0], y[1], sizeof y[0]), "%s, %s: outputs differ", f->name,
                    hb_shape_names[shape]);
        if (shape == HB_OTHER_READER)
          KILN_EXPECT(!memcmp(z[0], z[1], sizeof z[0]), "%s: CAST(W) + CAST(W) differs", f->name);
      }
      if (m[1] && fi == 0 && shape == HB_LINEAR) { /* fp32: the numbers themselves, in double */
        double worst = 0.0;
        for (int i = 0; i < HM; ++i)
          for (int j = 0; j < HN; ++j) {
            double want = 0.0;
            for (int p = 0; p < HK; ++p) want += (double)x[i * HK + p] * kiln_bf16_to_f32(wa[j * HK + p]);
            double e = fabs(y[1][i * HN + j] - want) / (1e-6 + fabs(want));
            worst = e > worst ? e : worst;
          }
        KILN_EXPECT(worst < 1e-4, "fp32 linear on held bf16 off by %g relative", worst);
      }
      kiln_model_release(m[0]);
      kiln_model_release(m[1]);
    }
}

/* Whole compiles with the held weights read in place (bf16_in_place, the
 * default): where the form neither quantizes nor computes in bf16,
 * nn.Linear's layout and both weights of the gated pair (not joined) stay
 * W's own bytes, torch's rows, which the LINEARs read (no packed copy);
 * the dense (K, N) layout, which has no rows to read, packs as before.
 * Outputs: the float32 fold's (packed) within the float32 sums' rounding
 * (2^-14 of sum |x w| per output: 41 terms, exact products), for x read as
 * float32 and as bf16 (VDPBF16PS where the CPU has it). */
static void hb_in_place(const float* x, const uint16_t* x16, const uint16_t* wa, const uint16_t* wb) {
  for (size_t fi = 0; fi < kiln_test_n_weight_forms; ++fi)
    for (int shape = 0; shape <= HB_GLU; ++shape) {
      const kiln_test_weight_form_t* f = &kiln_test_weight_forms[fi];
      const int rows = !f->quant && !f->compute_bf16 && shape != HB_DENSE;
      static float y[2][HM * HN];
      kiln_model_t* m[2] = {NULL, NULL};
      const void* xin = f->bf16_x ? (const void*)x16 : (const void*)x;
      for (int in_place = 0; in_place < 2; ++in_place) {
        kiln_graph_t* g = hb_graph((hb_shape_t)shape, f->bf16_x ? KILN_BF16 : KILN_F32, wa, wb);
        if (!g) return;
        m[in_place] = hb_compile_run(f, in_place ? 2 : 1, in_place, g, xin, y[in_place], NULL);
      }
      if (m[1]) {
        const kiln_graph_t* c = kiln_model_graph(m[1]);
        int kept = 0, joined = 0;
        for (int32_t i = 0; i < c->n_values; ++i) {
          const kiln_value_t* v = &c->values[i];
          kept += v->layout == KILN_LAYOUT_WIDENED_BF16_T && (v->data == wa || v->data == wb);
          joined += v->kind == KILN_VALUE_CONSTANT && v->rank == 2 && v->shape[1] == 2 * HN;
        }
        const int want = rows ? (shape == HB_GLU ? 2 : 1) : 0;
        KILN_EXPECT(kept == want, "%s, %s: %d weights read in place, want %d", f->name,
                    hb_shape_names[shape], kept, want);
        KILN_EXPECT(!(rows && joined), "%s, %s: the gated pair's weights were joined (copied)",
                    f->name, hb_shape_names[shape]);
      }
      if (m[0] && m[1]) {
        const float* xs = f->bf16_x ? NULL : x;
        int bad = 0;
        for (int i = 0; i < HM; ++i)
          for (int j = 0; j < HN; ++j) {
            double mag = 0.0;
            for (int p = 0; p < HK; ++p)
              mag += fabs((double)(xs ? xs[i * HK + p] : kiln_bf16_to_f32(x16[i * HK + p]))) *
                     (fabs((double)kiln_bf16_to_f32(wa[j * HK + p])) +
                      fabs((double)kiln_bf16_to_f32(wb[j * HK + p])));
            bad += !(fabs((double)y[1][i * HN + j] - (double)y[0][i * HN + j]) <=
                     ldexp(mag * (1.0 + fabs((double)y[0][i * HN + j])), -14));
          }
        KILN_EXPECT(bad == 0, "%s, %s: %d outputs read in place differ from the packed ones",
                    f->name, hb_shape_names[shape], bad);
      }
      kiln_model_release(m[0]);
      kiln_model_release(m[1]);
    }
}

/* A held constant read by other ops: the pack pass gives them its float32
 * values (dense for an ADD; stored transposed for a MATMUL the fusion
 * passes did not make a LINEAR). */
static void hb_fallback(const float* x, const uint16_t* w) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t cs[2] = {HN, HK}, xs[2] = {HM, HK}, bs[2] = {HK, HN};
  int32_t xa = -1, xm = -1, c = -1, ct = -1, out[2] = {-1, -1};
  KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 2, cs, &xa));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, xs, &xm));
  /* Bytes that do not fit the shape: the verifier says so. */
  int32_t bad = -1;
  KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, "bad", KILN_F32, 2, cs, KILN_LAYOUT_WIDENED_BF16,
                                                  w, sizeof(uint16_t) * HN * HK - 2, &bad));
  KILN_EXPECT_ERROR(kiln_graph_verify(g), KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
  g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 2, cs, &xa));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, xs, &xm));
  KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, "c", KILN_F32, 2, cs, KILN_LAYOUT_WIDENED_BF16,
                                                  w, sizeof(uint16_t) * HN * HK, &c));
  KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, "ct", KILN_F32, 2, bs,
                                                  KILN_LAYOUT_WIDENED_BF16_T, w,
                                                  sizeof(uint16_t) * HN * HK, &ct));
  int32_t in[2] = {xa, c};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, in, 2, NULL, 0, NULL, 0, NULL, &out[0]));
  in[0] = xm, in[1] = ct;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, NULL, 0, NULL, 0, NULL, &out[1]));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, out, 2));
  KILN_EXPECT_OK(kiln_graph_verify(g));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.fuse = 0; /* the MATMUL stays one */
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (!m) return;
  static float a[HN * HK], s[HN * HK], y[HM * HN];
  kiln_test_fill_f32(a, HN * HK, 91, -1.0f, 1.0f);
  int64_t ys[2] = {HM, HN};
  kiln_tensor_t ins[2] = {{a, KILN_F32, 2, cs}, {(void*)x, KILN_F32, 2, xs}};
  kiln_tensor_t outs[2] = {{s, KILN_F32, 2, cs}, {y, KILN_F32, 2, ys}};
  KILN_EXPECT_OK(kiln_model_run(m, ins, 2, outs, 2));
  int wrong = 0;
  for (int i = 0; i < HN * HK; ++i) wrong += s[i] != a[i] + kiln_bf16_to_f32(w[i]);
  KILN_EXPECT(wrong == 0, "a + held c: %d of %d elements wrong", wrong, HN * HK);
  double worst = 0.0;
  for (int i = 0; i < HM; ++i)
    for (int j = 0; j < HN; ++j) { /* ct (HK, HN) is w (HN, HK) read transposed */
      double want = 0.0;
      for (int p = 0; p < HK; ++p) want += (double)x[i * HK + p] * kiln_bf16_to_f32(w[j * HK + p]);
      double e = fabs(y[i * HN + j] - want) / (1e-6 + fabs(want));
      worst = e > worst ? e : worst;
    }
  KILN_EXPECT(worst < 1e-4, "x @ held ct^T off by %g relative", worst);
  kiln_model_release(m);
}

/* The VNNI-layout packer the held weights (and every constant bf16-compute
 * weight) go through, at each ISA level, against the layout's definition
 * element by element: fp32 sources (rounded; NaN, infinities, denormals,
 * -0 and rounding ties among them) and bf16 ones, row-major, transposed
 * and strided both ways, plain or joined with the halves meeting at and
 * inside a panel, odd and even K, partial last panels. */
static void hb_vnni_case(const char* where, int64_t k, int64_t n, int64_t split, int layout,
                         int bf16) {
  enum { MAXE = 2 * 70 * 40 };
  static float f[2][MAXE];
  static uint16_t h[2][MAXE], got[70 * 48], want[70 * 48];
  const int64_t half[2] = {split < n ? split : n, split < n ? n - split : 0};
  for (int s = 0; s < 2; ++s) {
    kiln_test_fill_f32(f[s], MAXE, 100 + (unsigned)s, -3.0f, 3.0f);
    const uint32_t special[6] = {0x7fc00001u, 0xff800000u, 0x00000123u, 0x80000000u,
                                 0x3f808000u /* a tie: 1 + 2^-8 */, 0x3f818000u};
    for (int i = 0; i < 6; ++i) memcpy(&f[s][(i * 37 + s * 11) % MAXE], &special[i], 4);
    for (int i = 0; i < MAXE; ++i) h[s][i] = kiln_bf16_from_f32(f[s][i]);
  }
  /* Element (p, j) of a half with `cols` columns at p * rs + j * cs. */
  int64_t cols = half[0], rs, cs;
  if (layout == 0) rs = cols, cs = 1;          /* row-major (K, N) */
  else if (layout == 1) rs = 1, cs = k;        /* stored transposed: nn.Linear's */
  else rs = 2 * cols, cs = 2;                  /* both strided */
  if (half[1] && half[1] != cols) return;     /* the halves share a shape */
  const int64_t kp = k + (k & 1), panels = (n + 15) / 16;
  for (int64_t i = 0; i < panels * kp * 16; ++i) want[i] = 0, got[i] = 0xdead;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) {
      int s = j >= half[0];
      int64_t at = p * rs + (s ? j - half[0] : j) * cs;
      want[(j / 16) * kp * 16 + (p / 2) * 32 + (j % 16) * 2 + (p & 1)] =
          bf16 ? h[s][at] : kiln_bf16_from_f32(f[s][at]);
    }
  if (bf16) {
    kiln_gemm_b_src16_t src = {h[0], h[1], half[0], rs, cs};
    kiln_gemm_bf16_vnni_pack_b_src16(k, n, &src, got);
  } else {
    kiln_gemm_b_src_t src = {f[0], f[1], half[0], rs, cs};
    kiln_gemm_bf16_vnni_pack_b_src(k, n, &src, got);
  }
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < panels * kp * 16; ++i)
    if (got[i] != want[i]) bad++, first = first < 0 ? i : first;
  KILN_EXPECT(bad == 0, "%s VNNI pack k %lld n %lld split %lld layout %d %s: %lld of %lld wrong "
              "(first at %lld)", where, (long long)k, (long long)n, (long long)split, layout,
              bf16 ? "bf16" : "fp32", (long long)bad, (long long)(panels * kp * 16), (long long)first);
}

static void hb_vnni_pack(kiln_pool_t* pool, const char* where) {
  (void)pool;
  static const int64_t ks[] = {1, 2, 31, 33, 64, 67}, ns[] = {1, 15, 16, 17, 40};
  for (size_t a = 0; a < sizeof ks / sizeof ks[0]; ++a)
    for (size_t b = 0; b < sizeof ns / sizeof ns[0]; ++b)
      for (int layout = 0; layout < 3; ++layout)
        for (int bf16 = 0; bf16 < 2; ++bf16) {
          hb_vnni_case(where, ks[a], ns[b], ns[b], layout, bf16); /* one matrix */
          if (ns[b] % 2 == 0) hb_vnni_case(where, ks[a], ns[b], ns[b] / 2, layout, bf16);
        }
  /* Halves meeting at a panel's edge: 2 x 16 and 2 x 24 columns. */
  for (int layout = 0; layout < 3; ++layout)
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      hb_vnni_case(where, 33, 32, 16, layout, bf16);
      hb_vnni_case(where, 33, 48, 24, layout, bf16);
    }
}

void kiln_test_suite_bf16_hold(void) {
  static float x[HM * HK], wf[2][HN * HK];
  static uint16_t x16[HM * HK], w16[2][HN * HK];
  kiln_test_fill_f32(x, HM * HK, 81, -2.0f, 2.0f);
  kiln_test_fill_f32(wf[0], HN * HK, 82, -0.5f, 0.5f);
  kiln_test_fill_f32(wf[1], HN * HK, 83, -0.5f, 0.5f);
  for (int i = 0; i < HM * HK; ++i) x16[i] = kiln_bf16_from_f32(x[i]);
  for (int k = 0; k < 2; ++k)
    for (int i = 0; i < HN * HK; ++i) w16[k][i] = kiln_bf16_from_f32(wf[k][i]);
  hb_fold(w16[0]);
  hb_compile(x, x16, w16[0], w16[1]);
  hb_in_place(x, x16, w16[0], w16[1]);
  hb_fallback(x, w16[0]);
  kiln_test_each_isa_and_pool(hb_vnni_pack);
}
