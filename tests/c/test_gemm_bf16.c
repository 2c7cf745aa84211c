/* bf16 weights through the compiler and runtime: the pack pass with
 * weights_bf16 stores a LINEAR's weight as KILN_LAYOUT_GEMM_PACKED_B_BF16,
 * the model computes y = x W_bf16 + b in fp32, and the CPU target refuses a
 * bf16-packed constant of the wrong size (a hostile artifact) with an error
 * rather than reading past it. The kernels themselves are held to the
 * scalar reference in test_gemm.c.
 *
 * Tolerance: the reference uses the same bf16-rounded weights and a double
 * sum, so only fp32 summation order differs: K = 40 terms of magnitude
 * <= 0.5 give errors ~1e-6; 1e-5 abs and rel leaves a margin while a wrong
 * weight (off by a bf16 rounding step, ~2e-3 relative) fails. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

enum { BF_M = 3, BF_K = 40, BF_N = 21 };

/* y = x @ W + b, W (K, N) dense. */
static kiln_graph_t* bf16_graph(const float* w, const float* bias) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t sx[2] = {BF_M, BF_K}, sw[2] = {BF_K, BF_N}, sb[1] = {BF_N};
  int32_t vx, vw, vb, mm, out;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w,
                                         sizeof(float) * BF_K * BF_N, &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, bias,
                                         sizeof(float) * BF_N, &vb));
  int32_t i1[2] = {vx, vw};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, i1, 2, NULL, 0, NULL, 0, NULL, &mm));
  int32_t i2[2] = {mm, vb};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, i2, 2, NULL, 0, NULL, 0, NULL, &out));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &out, 1));
  return g;
}

static void test_compile_bf16_weights(void) {
  float w[BF_K * BF_N], bias[BF_N], x[BF_M * BF_K], want[BF_M * BF_N], got[BF_M * BF_N];
  kiln_test_fill_f32(w, BF_K * BF_N, 21, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, BF_N, 22, -0.5f, 0.5f);
  kiln_test_fill_f32(x, BF_M * BF_K, 23, -1, 1);
  for (int i = 0; i < BF_M; ++i)
    for (int j = 0; j < BF_N; ++j) {
      double acc = bias[j];
      for (int p = 0; p < BF_K; ++p)
        acc += (double)x[i * BF_K + p] *
               kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(w[p * BF_N + j]));
      want[i * BF_N + j] = (float)acc;
    }
  kiln_graph_t* g = bf16_graph(w, bias);
  if (!g) return;
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.weights_bf16 = 1;
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  const kiln_value_t* wv = &compiled->values[compiled->nodes[0].inputs[1]];
  KILN_EXPECT(compiled->n_nodes == 1 && compiled->nodes[0].op == KILN_OP_LINEAR, "one linear");
  KILN_EXPECT(wv->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16 && wv->dtype == KILN_F32 &&
                  wv->nbytes == kiln_gemm_bf16_packed_size(BF_K, BF_N),
              "weight packed as bf16 (layout %d, %zu bytes)", (int)wv->layout, wv->nbytes);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (!m) return;
  int64_t sx[2] = {BF_M, BF_K}, sy[2] = {BF_M, BF_N};
  kiln_tensor_t in = {x, KILN_F32, 2, sx}, outt = {got, KILN_F32, 2, sy};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, &outt, 1));
  kiln_test_compare_f32("linear with bf16 weights", got, want, BF_M * BF_N, 1e-5f, 1e-5f);
  kiln_model_release(m);
}

/* A LINEAR whose bf16-packed weight holds too few bytes is refused. */
static void test_bf16_weight_size_checked(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  static uint16_t packed[BF_K * 32]; /* two panels; the right size */
  int64_t sx[2] = {BF_M, BF_K}, sw[2] = {BF_K, BF_N};
  int32_t vx, vw, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &vx));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_GEMM_PACKED_B_BF16,
                                         packed, sizeof packed - 2, &vw));
  int32_t in[2] = {vx, vw};
  const int64_t p[1] = {KILN_ACT_NONE};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, p, 1, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  kiln_model_t* m = NULL;
  KILN_EXPECT_ERROR(kiln_model_create(g, NULL, NULL, &m), KILN_INVALID_ARGUMENT);
  KILN_EXPECT(m == NULL, "no model from a short bf16 weight");
}

void kiln_test_suite_gemm_bf16(void) {
  test_compile_bf16_weights();
  test_bf16_weight_size_checked();
}
