/* Tests of the IR (graph building, shape inference errors, the verifier),
 * the memory planner, the compiler passes and model execution, all from C. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "base/kiln_activation.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"
#include "runtime/kiln_plan.h"

static kiln_graph_t* new_graph(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  return g;
}

static void test_shape_errors(void) {
  kiln_graph_t* g = new_graph();
  int64_t s23[2] = {2, 3}, s4[1] = {4}, s32[2] = {3, 2};
  int32_t a, b, c, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 2, s23, &a));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "b", KILN_F32, 1, s4, &b));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "c", KILN_F32, 2, s32, &c));
  int32_t ab[2] = {a, b};
  kiln_status_t s = kiln_graph_add_node(g, KILN_OP_ADD, ab, 2, NULL, 0, NULL, 0, "x.py:3", &y);
  KILN_EXPECT(kiln_status_code(s) == KILN_INVALID_ARGUMENT, "broadcast mismatch rejected");
  KILN_EXPECT(strstr(kiln_status_message(s), "x.py:3") && strstr(kiln_status_message(s), "broadcast"),
              "message names origin and problem: %s", kiln_status_message(s));
  kiln_status_free(s);
  int32_t ac[2] = {a, c}, aa[2] = {a, a};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, ac, 2, NULL, 0, NULL, 0, NULL, &y));
  KILN_EXPECT(g->values[y].shape[0] == 2 && g->values[y].shape[1] == 2, "matmul shape");
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_MATMUL, aa, 2, NULL, 0, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  int64_t bad_reshape[3] = {1, 5, 0};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_RESHAPE, &a, 1, bad_reshape, 2, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  /* A view that would read past the end of its input. */
  int64_t view[18] = {2, 3, 2, 0, 0, 0, 0, 0, 0, 1, 3};
  view[17] = 1;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &a, 1, view, 18, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  int32_t missing = 99;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_EXP, &missing, 1, NULL, 0, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

static void test_verifier(void) {
  kiln_graph_t* g = new_graph();
  int64_t s4[1] = {4};
  int32_t x, y, z;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 1, s4, &x));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_EXP, &x, 1, NULL, 0, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_NEG, &y, 1, NULL, 0, NULL, 0, NULL, &z));
  KILN_EXPECT_ERROR(kiln_graph_verify(g), KILN_INVALID_ARGUMENT); /* no outputs yet */
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &z, 1));
  KILN_EXPECT_OK(kiln_graph_verify(g));
  /* Break invariants one at a time. */
  g->nodes[0].inputs[0] = z; /* uses a value made later */
  KILN_EXPECT_ERROR(kiln_graph_verify(g), KILN_INVALID_ARGUMENT);
  g->nodes[0].inputs[0] = x;
  g->values[z].shape[0] = 5; /* stored shape disagrees with inference */
  KILN_EXPECT_ERROR(kiln_graph_verify(g), KILN_INVALID_ARGUMENT);
  g->values[z].shape[0] = 4;
  g->values[y].producer = 1; /* wrong producer */
  KILN_EXPECT_ERROR(kiln_graph_verify(g), KILN_INVALID_ARGUMENT);
  g->values[y].producer = 0;
  KILN_EXPECT_OK(kiln_graph_verify(g));
  kiln_graph_release(g);
}

/* y = gelu(x @ W + b) + x, with W (K, N) given dense: the compiler must make
 * one LINEAR with bias, activation and residual, packed. */
static void test_compile_and_run_fused_linear(void) {
  enum { M = 5, K = 8, N = 8 };
  kiln_graph_t* g = new_graph();
  float w[K * N], bias[N], x[M * K], want[M * N], got[M * N];
  kiln_test_fill_f32(w, K * N, 1, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, N, 2, -0.5f, 0.5f);
  kiln_test_fill_f32(x, M * K, 3, -1, 1);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = bias[j];
      for (int p = 0; p < K; ++p) acc += (double)x[i * K + p] * w[p * N + j];
      want[i * N + j] = (float)(0.5 * acc * (1.0 + erf(acc / sqrt(2.0)))) + x[i * K + j];
    }
  int64_t sx[2] = {M, K}, sw[2] = {K, N}, sb[1] = {N};
  int32_t vx, vw, vb, mm, add, act, out;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, bias, sizeof bias, &vb));
  int32_t i1[2] = {vx, vw};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &mm));
  int32_t i2[2] = {mm, vb};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &add));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GELU, &add, 1, NULL, 0, NULL, 0, NULL, &act));
  int32_t i3[2] = {x[0] > 1e9f ? act : vx, act}; /* residual first, as x + f(x) */
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i3, 2, NULL, 0, NULL, 0, NULL, &out));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));

  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  KILN_EXPECT(compiled->n_nodes == 1 && compiled->nodes[0].op == KILN_OP_LINEAR,
              "one fused linear, got %d nodes", compiled->n_nodes);
  KILN_EXPECT(compiled->nodes[0].params[0] == KILN_ACT_GELU && compiled->nodes[0].n_inputs == 4,
              "gelu, bias and residual absorbed");
  KILN_EXPECT(compiled->values[compiled->nodes[0].inputs[1]].layout == KILN_LAYOUT_GEMM_PACKED_B,
              "weight packed");
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (!m) return;
  kiln_tensor_t in = {x, KILN_F32, 2, sx}, outt = {got, KILN_F32, 2, (int64_t[]){M, N}};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &outt, 1));
  kiln_test_compare_f32("fused linear", got, want, M * N, 1e-5f, 1e-5f);
  /* Wrong shape and dtype name the input and what was expected. */
  int64_t wrong[2] = {M + 1, K};
  kiln_tensor_t bad = {x, KILN_F32, 2, wrong};
  kiln_status_t s = kiln_model_run(m, &bad, 1, &outt, 1);
  KILN_EXPECT(s && strstr(kiln_status_message(s), "input 0 ('x')") &&
                  strstr(kiln_status_message(s), "expected (5, 8) float32, got (6, 8) float32"),
              "message: %s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_tensor_t bad_dtype = {x, KILN_I32, 2, sx};
  KILN_EXPECT_ERROR(kiln_model_run(m, &bad_dtype, 1, &outt, 1), KILN_INVALID_ARGUMENT);
  kiln_model_release(m);
}

/* Constants lent to a graph until compile (kiln_graph_own_lent): the
 * packed weight is made from the lent bytes; the bias, read as it is, is
 * copied into the graph, so scribbling over the lent bytes afterwards
 * changes nothing; a keyed (borrowed for the model's life) constant stays
 * where it is. */
static void test_lent_constants_owned_after_compile(void) {
  enum { M = 3, K = 8, N = 8 };
  kiln_graph_t* g = new_graph();
  float* lent = malloc((K * N + N) * sizeof(float));
  float keyed[N], x[M * K], want[M * N], got[M * N];
  if (!lent) return;
  float* w = lent;
  float* bias = lent + K * N;
  kiln_test_fill_f32(w, K * N, 4, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, N, 5, -0.5f, 0.5f);
  kiln_test_fill_f32(keyed, N, 6, -0.5f, 0.5f);
  kiln_test_fill_f32(x, M * K, 7, -1, 1);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = bias[j];
      for (int p = 0; p < K; ++p) acc += (double)x[i * K + p] * w[p * N + j];
      want[i * N + j] = (float)(acc * keyed[j]);
    }
  int64_t sx[2] = {M, K}, sw[2] = {K, N}, sb[1] = {N};
  int32_t vx, vw, vb, vk, mm, add, out;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w,
                                                  K * N * sizeof(float), &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, bias,
                                                  N * sizeof(float), &vb));
  KILN_EXPECT_OK(kiln_graph_add_constant_borrowed(g, "k", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, keyed,
                                                  sizeof keyed, &vk));
  KILN_EXPECT_OK(kiln_graph_set_constant_key(g, vk, "test:keyed"));
  int32_t i1[2] = {vx, vw}, i2[2] = {mm = -1, vb};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &mm));
  i2[0] = mm;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &add));
  int32_t i3[2] = {add, vk};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, i3, 2, NULL, 0, NULL, 0, NULL, &out));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, NULL, &compiled));
  if (!compiled) {
    free(lent);
    return;
  }
  kiln_lent_bytes_t range = {lent, (K * N + N) * sizeof(float)};
  KILN_EXPECT_OK(kiln_graph_own_lent(compiled, &range, 1));
  int lent_left = 0, keyed_left = 0;
  for (int32_t i = 0; i < compiled->n_values; ++i) {
    const kiln_value_t* v = &compiled->values[i];
    if (v->kind != KILN_VALUE_CONSTANT || !v->data) continue;
    uintptr_t p = (uintptr_t)v->data;
    lent_left += p >= (uintptr_t)lent && p < (uintptr_t)(lent + K * N + N);
    keyed_left += v->data == keyed;
  }
  KILN_EXPECT(lent_left == 0, "%d constants still read the lent bytes", lent_left);
  KILN_EXPECT(keyed_left == 1, "the keyed constant stays borrowed (%d)", keyed_left);
  KILN_EXPECT_ERROR(kiln_graph_own_lent(compiled, NULL, 1), KILN_INVALID_ARGUMENT);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  for (int i = 0; i < K * N + N; ++i) lent[i] = 1e30f; /* the caller takes its bytes back */
  free(lent);
  if (!m) return;
  kiln_tensor_t in = {x, KILN_F32, 2, sx}, outt = {got, KILN_F32, 2, (int64_t[]){M, N}};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &outt, 1));
  kiln_test_compare_f32("lent constants", got, want, M * N, 1e-5f, 1e-5f);
  kiln_model_release(m);
}

/* Training: y = x @ W^T + b + r with W, b and r graph inputs (W stored
 * (N, K), read transposed). One LINEAR with the bias and residual absorbed
 * and W read in place; without a bias or residual to absorb, the MATMUL
 * stays. The shape rules reject a transposed read of a constant. */
static void test_compile_runtime_weight_linear(void) {
  enum { M = 7, K = 9, N = 20 };
  /* with_epilogue 2: a run of 16 views between the GEMM and its bias add
   * (simplification composes them before fusion looks); the result must
   * still be x W^T + b + r. */
  for (int with_epilogue = 0; with_epilogue < 3; ++with_epilogue) {
    kiln_graph_t* g = new_graph();
    float w[N * K], bias[N], x[M * K], r[M * N], want[M * N], got[M * N];
    kiln_test_fill_f32(w, N * K, 1, -0.5f, 0.5f);
    kiln_test_fill_f32(bias, N, 2, -0.5f, 0.5f);
    kiln_test_fill_f32(x, M * K, 3, -1, 1);
    kiln_test_fill_f32(r, M * N, 4, -1, 1);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double acc = with_epilogue ? bias[j] + (double)r[i * N + j] : 0.0;
        for (int p = 0; p < K; ++p) acc += (double)x[i * K + p] * w[j * K + p];
        want[i * N + j] = (float)acc;
      }
    int64_t sx[2] = {M, K}, sw[2] = {N, K}, sb[1] = {N}, sy[2] = {M, N};
    int32_t vx, vw, vb, vr, mm, add, out;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
    KILN_EXPECT_OK(kiln_graph_add_input(g, "w", KILN_F32, 2, sw, &vw));
    KILN_EXPECT_OK(kiln_graph_add_input(g, "b", KILN_F32, 1, sb, &vb));
    KILN_EXPECT_OK(kiln_graph_add_input(g, "r", KILN_F32, 2, sy, &vr));
    int32_t i1[2] = {vx, vw};
    int64_t tb = KILN_MATMUL_TRANSPOSE_B;
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, &tb, 1, NULL, 0, NULL, &mm));
    out = mm;
    if (with_epilogue == 2)
      for (int v = 0; v < 16; ++v) {
        int64_t rs[4] = {v % 2 ? 2 : 3, v % 2 ? M : 1, v % 2 ? N : M, N}; /* ends (M, N) */
        KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RESHAPE, &mm, 1, rs, 1 + rs[0], NULL, 0,
                                           NULL, &mm));
      }
    if (with_epilogue) {
      int32_t i2[2] = {mm, vb};
      KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &add));
      int32_t i3[2] = {vr, add};
      KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i3, 2, NULL, 0, NULL, 0, NULL, &out));
    }
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));
    kiln_compile_options_t o;
    kiln_compile_options_initialize(&o);
    o.verify_each = 1;
    kiln_graph_t* compiled = NULL;
    KILN_EXPECT_OK(kiln_compile(g, &o, &compiled)); /* consumes g */
    if (!compiled) return;
    const kiln_node_t* n0 = &compiled->nodes[0];
    if (with_epilogue == 1)
      KILN_EXPECT(compiled->n_nodes == 1 && n0->op == KILN_OP_LINEAR && n0->n_inputs == 4 &&
                      n0->params[1] == 1 &&
                      compiled->values[n0->inputs[1]].kind == KILN_VALUE_INPUT,
                  "one LINEAR reading the input weight transposed, got %d nodes, op %s",
                  compiled->n_nodes, kiln_op_name(n0->op));
    else if (!with_epilogue)
      KILN_EXPECT(compiled->n_nodes == 1 && n0->op == KILN_OP_MATMUL, "the bare MATMUL stays");
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
    if (m) {
      kiln_tensor_t ins[4] = {{x, KILN_F32, 2, sx}, {w, KILN_F32, 2, sw}, {bias, KILN_F32, 1, sb},
                              {r, KILN_F32, 2, sy}};
      kiln_tensor_t outt = {got, KILN_F32, 2, sy};
      KILN_EXPECT_OK(kiln_model_run(m, ins, 4, &outt, 1));
      kiln_test_compare_f32("runtime-weight linear", got, want, M * N, 1e-5f, 1e-5f);
      kiln_model_release(m); /* the model owns the compiled graph */
    }
  }
  /* Shape rules: params[1] = 1 needs a dense (N, K) value that is not a
   * constant; only 0 and 1 are defined. */
  kiln_graph_t* g = new_graph();
  float wc[6] = {0};
  int64_t sx[2] = {2, 3}, sw[2] = {2, 3};
  int32_t vx, vw, vc, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "w", KILN_F32, 2, sw, &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "wc", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, wc, sizeof wc, &vc));
  int64_t p1[2] = {KILN_ACT_NONE, 1}, p2[2] = {KILN_ACT_NONE, 2};
  int32_t ok_in[2] = {vx, vw}, const_in[2] = {vx, vc};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, ok_in, 2, p1, 2, NULL, 0, NULL, &y));
  KILN_EXPECT(g->values[y].shape[0] == 2 && g->values[y].shape[1] == 2, "(2, 3) x (2, 3)^T -> (2, 2)");
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LINEAR, const_in, 2, p1, 2, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LINEAR, ok_in, 2, p2, 2, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

/* A chain of 40 exp ops over 1 MiB values: liveness lets the planner reuse
 * memory, so the arena holds two values, not forty; and no two values live
 * at once overlap. */
static void test_memory_plan(void) {
  const int failed0 = kiln_test_failed; /* this test's failures, not an earlier one's */
  kiln_graph_t* g = new_graph();
  int64_t shape[1] = {1 << 18};
  int32_t v, x;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 1, shape, &x));
  v = x;
  int32_t ids[41];
  for (int i = 0; i < 40; ++i) {
    KILN_EXPECT_OK(kiln_graph_add_node(g, i % 2 ? KILN_OP_NEG : KILN_OP_ABS, &v, 1, NULL, 0, NULL, 0, NULL, &v));
    ids[i] = v;
  }
  /* A reshape alias of an early value, read at the end, keeps it alive. */
  int64_t rs[3] = {2, 512, 512}; /* params: rank, dims */
  int32_t alias = x, sum = x;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RESHAPE, &ids[1], 1, rs, 3, NULL, 0, NULL, &alias));
  int64_t flat_params[3] = {2, 1, 1 << 18}, flat[2] = {1, 1 << 18};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RESHAPE, &alias, 1, flat_params, 3, NULL, 0, NULL, &alias));
  int32_t two[2] = {alias, v};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, two, 2, NULL, 0, NULL, 0, NULL, &sum));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &sum, 1));
  if (kiln_test_failed != failed0) {
    kiln_graph_release(g);
    return;
  }
  kiln_plan_t p;
  KILN_EXPECT_OK(kiln_plan_build(g, &p));
  size_t one = (size_t)(1 << 18) * 4;
  KILN_EXPECT(p.arena_size <= 3 * one, "arena %zu bytes for 40 values of %zu", p.arena_size, one);
  KILN_EXPECT(p.bound_output[sum] == 0, "the output is written in place");
  KILN_EXPECT(p.root[alias] == ids[1] && p.offset[alias] == p.offset[ids[1]], "aliases share bytes");
  /* ids[1] lives to the end: nothing produced after it may overlap it. */
  int overlap = 0;
  for (int i = 2; i < 40; ++i)
    overlap += p.offset[ids[i]] < p.offset[ids[1]] + (int64_t)one &&
               p.offset[ids[1]] < p.offset[ids[i]] + (int64_t)one;
  KILN_EXPECT(overlap == 0, "%d values overlap a live one", overlap);
  /* Planning again from p: the same items fit, so p's offsets stay; with
   * headroom, each item gets that much more room (no overlap still). */
  kiln_plan_t same, roomy, again;
  KILN_EXPECT_OK(kiln_plan_build_from(g, &p, 25, &same));
  int kept = same.arena_size == p.arena_size;
  for (int32_t v = 0; v < g->n_values; ++v) kept &= same.offset[v] == p.offset[v];
  KILN_EXPECT(kept, "a plan whose items fit keeps the previous offsets");
  KILN_EXPECT_OK(kiln_plan_build_from(g, NULL, 25, &roomy));
  KILN_EXPECT(roomy.arena_size >= p.arena_size + p.arena_size / 5,
              "headroom: arena %zu for %zu", roomy.arena_size, p.arena_size);
  overlap = 0;
  for (int i = 2; i < 40; ++i)
    overlap += roomy.offset[ids[i]] < roomy.offset[ids[1]] + (int64_t)(one + one / 4) &&
               roomy.offset[ids[1]] < roomy.offset[ids[i]] + (int64_t)(one + one / 4);
  KILN_EXPECT(overlap == 0, "%d values overlap a live one's reserved bytes", overlap);
  /* p itself reserved exactly what each needs: a graph needing more is
   * placed anew from roomy's sizes, not p's offsets. */
  KILN_EXPECT_OK(kiln_plan_build_from(g, &roomy, 0, &again));
  KILN_EXPECT(again.arena_size == roomy.arena_size, "roomy's offsets serve the same sizes");
  kiln_plan_deinitialize(&same);
  kiln_plan_deinitialize(&roomy);
  kiln_plan_deinitialize(&again);
  kiln_plan_deinitialize(&p);
  /* And the model computes the right thing through the reused memory. */
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(g, NULL, NULL, &m));
  if (!m) return;
  float* in = malloc(one);
  float* out = malloc(one);
  kiln_test_fill_f32(in, 1 << 18, 7, -2, 2);
  kiln_tensor_t ti = {in, KILN_F32, 1, shape}, to = {out, KILN_F32, 2, flat};
  KILN_EXPECT_OK(kiln_model_run(m, &ti, 1, &to, 1));
  int bad = 0;
  for (int i = 0; i < (1 << 18); ++i) bad += out[i] != -fabsf(in[i]) + -fabsf(in[i]);
  KILN_EXPECT(bad == 0, "%d wrong elements", bad);
  free(in);
  free(out);
  kiln_model_release(m);
}

/* Contiguous slices are views: no kernel, no bytes of their own; a view that
 * is also a graph output is copied out, never bound over its root. */
static void test_views(void) {
  const int failed0 = kiln_test_failed; /* this test's failures, not an earlier one's */
  kiln_graph_t* g = new_graph();
  int64_t shape[2] = {4, 6};
  int32_t x, row2, absx, row1, sum, tr;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, shape, &x));
  /* params: rank, dims[8], strides[8], offset */
  int64_t sel2[18] = {1, 6, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 12};
  int64_t sel1[18] = {2, 1, 6, 0, 0, 0, 0, 0, 0, 6, 1, 0, 0, 0, 0, 0, 0, 6};
  int64_t trans[18] = {2, 6, 4, 0, 0, 0, 0, 0, 0, 1, 6, 0, 0, 0, 0, 0, 0, 0};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &x, 1, sel2, 18, NULL, 0, NULL, &row2));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ABS, &x, 1, NULL, 0, NULL, 0, NULL, &absx));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &absx, 1, sel1, 18, NULL, 0, NULL, &row1));
  int32_t two[2] = {row2, row1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, two, 2, NULL, 0, NULL, 0, NULL, &sum));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &x, 1, trans, 18, NULL, 0, NULL, &tr));
  int32_t outs[3] = {sum, row1, tr};
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, outs, 3));
  if (kiln_test_failed != failed0) {
    kiln_graph_release(g);
    return;
  }
  int64_t bytes;
  KILN_EXPECT(kiln_node_is_view(g, &g->nodes[0], &bytes) && bytes == 48, "a row is a view");
  KILN_EXPECT(!kiln_node_is_view(g, &g->nodes[4], &bytes), "a transpose is not a view");
  kiln_plan_t p;
  KILN_EXPECT_OK(kiln_plan_build(g, &p));
  KILN_EXPECT(p.root[row2] == x && p.view_offset[row2] == 48, "row 2 views the input");
  KILN_EXPECT(p.root[row1] == absx && p.view_offset[row1] == 24, "row 1 views |x|");
  KILN_EXPECT(p.bound_output[absx] < 0 && p.output_copy[1], "a part of a root is copied out");
  kiln_plan_deinitialize(&p);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(g, NULL, NULL, &m));
  if (!m) return;
  float in[24], o_sum[6], o_row[6], o_tr[24];
  kiln_test_fill_f32(in, 24, 3, -2, 2);
  int64_t s6[2] = {1, 6}, s64[2] = {6, 4};
  kiln_tensor_t ti = {in, KILN_F32, 2, shape};
  kiln_tensor_t to[3] = {{o_sum, KILN_F32, 2, s6}, {o_row, KILN_F32, 2, s6}, {o_tr, KILN_F32, 2, s64}};
  KILN_EXPECT_OK(kiln_model_run(m, &ti, 1, to, 3));
  int bad = 0;
  for (int j = 0; j < 6; ++j) {
    bad += o_sum[j] != in[12 + j] + fabsf(in[6 + j]);
    bad += o_row[j] != fabsf(in[6 + j]);
    for (int i = 0; i < 4; ++i) bad += o_tr[j * 4 + i] != in[i * 6 + j];
  }
  KILN_EXPECT(bad == 0, "%d wrong elements through views", bad);
  kiln_model_release(m);
}

/* The simplify pass on its own: CSE, a constant moved right, x*1 dropped,
 * and what no output reaches removed. */
static void test_simplify_pass(void) {
  const int failed0 = kiln_test_failed; /* this test's failures, not an earlier one's */
  kiln_graph_t* g = new_graph();
  int64_t shape[1] = {8};
  float one = 1.0f;
  int32_t x, c1, a, b, m, d, dead;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 1, shape, &x));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "one", KILN_F32, 0, NULL, KILN_LAYOUT_DENSE, &one,
                                         sizeof one, &c1));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SIN, &x, 1, NULL, 0, NULL, 0, NULL, &a));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SIN, &x, 1, NULL, 0, NULL, 0, NULL, &b));
  int32_t ma[2] = {c1, a};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MUL, ma, 2, NULL, 0, NULL, 0, NULL, &m));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_COS, &x, 1, NULL, 0, NULL, 0, NULL, &dead));
  int32_t mb[2] = {m, b};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, mb, 2, NULL, 0, NULL, 0, NULL, &d));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &d, 1));
  if (kiln_test_failed != failed0) {
    kiln_graph_release(g);
    return;
  }
  kiln_graph_t* out = NULL;
  int32_t rewrites = 0;
  KILN_EXPECT_OK(kiln_pass_simplify(g, &out, &rewrites));
  kiln_graph_release(g);
  if (!out) return;
  KILN_EXPECT_OK(kiln_graph_verify(out));
  KILN_EXPECT(out->n_nodes == 2 && out->nodes[0].op == KILN_OP_SIN &&
                  out->nodes[1].op == KILN_OP_ADD &&
                  out->nodes[1].inputs[0] == out->nodes[0].outputs[0] &&
                  out->nodes[1].inputs[1] == out->nodes[0].outputs[0],
              "sin(x)*1 + sin(x) becomes s + s (%d nodes, %d rewrites)", out->n_nodes, rewrites);
  kiln_graph_release(out);
}

/* A (K, N) constant stored transposed (KILN_LAYOUT_TRANSPOSED_2D, what the
 * fold pass makes of W.t()) is read right by a MATMUL, alone and with a
 * transposed A (the pair nn.Linear on x.transpose(-1, -2) lowers to; it used
 * to read the constant as dense (K, N) memory), and a node that does not
 * read that layout is refused by the verifier instead of reading the wrong
 * numbers. */
static void test_transposed_constant_readers(void) {
  enum { M = 5, K = 7, N = 3 };
  float wt[N * K], x[M * K], xt[K * M], want[M * N], got[M * N];
  kiln_test_fill_f32(wt, N * K, 11, -1, 1);
  kiln_test_fill_f32(x, M * K, 12, -1, 1);
  for (int i = 0; i < M; ++i)
    for (int p = 0; p < K; ++p) xt[p * M + i] = x[i * K + p];
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int p = 0; p < K; ++p) acc += (double)x[i * K + p] * wt[j * K + p];
      want[i * N + j] = (float)acc;
    }
  int64_t sw[2] = {K, N}, sy[2] = {M, N};
  for (int ta = 0; ta < 2; ++ta) {
    kiln_graph_t* g = new_graph();
    int64_t sx[2] = {ta ? K : M, ta ? M : K}, flags = ta ? KILN_MATMUL_TRANSPOSE_A : 0;
    int32_t vx, vw, y;
    KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
    KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_TRANSPOSED_2D, wt,
                                           sizeof wt, &vw));
    int32_t in[2] = {vx, vw};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, &flags, 1, NULL, 0, NULL, &y));
    KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(g, NULL, NULL, &m));
    if (m) {
      kiln_tensor_t tin = {ta ? xt : x, KILN_F32, 2, sx}, tout = {got, KILN_F32, 2, sy};
      memset(got, 0, sizeof got);
      KILN_EXPECT_OK(kiln_model_run(m, &tin, 1, &tout, 1));
      kiln_test_compare_f32(ta ? "matmul aT, transposed constant b" : "matmul, transposed constant b",
                            got, want, M * N, 1e-5f, 1e-5f);
      kiln_model_release(m);
    } /* the model owns the graph, released on failure too */
  }
  /* exp reads dense memory: a transposed constant reaching it is refused. */
  kiln_graph_t* g = new_graph();
  int32_t vw, y;
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_TRANSPOSED_2D, wt,
                                         sizeof wt, &vw));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_EXP, &vw, 1, NULL, 0, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  kiln_status_t s = kiln_graph_verify(g);
  KILN_EXPECT(s && strstr(kiln_status_message(s), "does not read"), "verify: %s",
              s ? kiln_status_message(s) : "ok");
  kiln_status_free(s);
  kiln_graph_release(g);
}

void kiln_test_suite_ir(void) {
  test_transposed_constant_readers();
  test_simplify_pass();
  test_views();
  test_shape_errors();
  test_verifier();
  test_compile_and_run_fused_linear();
  test_lent_constants_owned_after_compile();
  test_compile_runtime_weight_linear();
  test_memory_plan();
}
