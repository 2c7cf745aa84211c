/* ELTWISE_FUSED: program validation (hostile programs are refused by shape
 * inference, never run), and the tiled kernel against its scalar reference
 * and against the same chain run as separate unfused kernels, at every ISA
 * level with 1 and 2 threads, over shapes with tails, broadcasts (bias over
 * the last dim, a [.., 1] column, a scalar) and NaN/Inf inputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_eltwise_fused.h"
#include "kernels/math/kiln_math.h"
#include "kernels/nn/kiln_nn.h"
#include "kiln_test.h"

#define W kiln_fused_word
#define OP(o) ((uint32_t)KILN_FUSED_##o)

static uint32_t kiln_test_fbits(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  return b;
}

/* An ELTWISE_FUSED node that shape inference must refuse. */
static void kiln_test_fused_refused(kiln_graph_t* g, const int32_t* ins, int32_t n,
                                    const int64_t* params) {
  int32_t y = -1;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_ELTWISE_FUSED, ins, n, params, KILN_MAX_PARAMS,
                                        NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
}

static void kiln_test_fused_validate(void) {
  kiln_fused_loads_t rot;
  uint32_t ok[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0),
                   W(OP(MUL), 2, 0, 1), W(KILN_FUSED_IMM, 3, 0, 0), kiln_test_fbits(2.0f),
                   W(OP(ADD), 0, 2, 3), W(OP(EXP), 0, 0, 0)};
  KILN_EXPECT_OK(kiln_fused_program_validate(ok, 7, 2, &rot));
  KILN_EXPECT(rot.rotated == 0 && rot.halved == 0, "no rotated loads");
  uint32_t r1[] = {W(KILN_FUSED_LOAD_ROTATE_HALF, 0, 1, 0), W(KILN_FUSED_LOAD, 1, 0, 0),
                   W(OP(ADD), 1, 0, 1)};
  KILN_EXPECT_OK(kiln_fused_program_validate(r1, 3, 2, &rot));
  KILN_EXPECT(rot.rotated == 2u, "input 1 rotated: %u", rot.rotated);
  /* Halves: both of one input (a gated pair's GEMM output), never with a
   * whole load of the same input. */
  uint32_t h1[] = {W(KILN_FUSED_LOAD_LOW_HALF, 0, 0, 0), W(OP(SILU), 0, 0, 0),
                   W(KILN_FUSED_LOAD_HIGH_HALF, 1, 0, 0), W(KILN_FUSED_LOAD, 2, 1, 0),
                   W(OP(MUL), 0, 0, 1), W(OP(ADD), 0, 0, 2)};
  KILN_EXPECT_OK(kiln_fused_program_validate(h1, 6, 2, &rot));
  KILN_EXPECT(rot.halved == 1u && rot.rotated == 0, "input 0 by halves: %u", rot.halved);
  uint32_t h2[] = {W(KILN_FUSED_LOAD_HIGH_HALF, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 0, 0),
                   W(OP(MUL), 0, 0, 1)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(h2, 3, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t h3[] = {W(KILN_FUSED_LOAD_ROTATE_HALF, 0, 0, 0), W(KILN_FUSED_LOAD_LOW_HALF, 1, 0, 0),
                   W(OP(MUL), 0, 0, 1)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(h3, 3, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t h4[] = {W(KILN_FUSED_LOAD_LOW_HALF, 0, 0, 1)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(h4, 1, 1, &rot), KILN_INVALID_ARGUMENT);

  /* Hostile programs. */
  KILN_EXPECT_ERROR(kiln_fused_program_validate(ok, 0, 2, &rot), KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_fused_program_validate(ok, 1, 9, &rot), KILN_INVALID_ARGUMENT);
  uint32_t bad_reg[] = {W(KILN_FUSED_LOAD, 16, 0, 0)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(bad_reg, 1, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t bad_read[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(OP(ADD), 1, 0, 5)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(bad_read, 2, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t far_read[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(OP(NEG), 1, 200, 0)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(far_read, 2, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t bad_input[] = {W(KILN_FUSED_LOAD, 0, 1, 0)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(bad_input, 1, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t unloaded[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(OP(NEG), 0, 0, 0)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(unloaded, 2, 2, &rot), KILN_INVALID_ARGUMENT);
  uint32_t imm_end[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_IMM, 1, 0, 0)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(imm_end, 2, 1, &rot), KILN_INVALID_ARGUMENT);
  /* Unknown opcodes: the gaps of the list (where cat, logical_and,
   * logical_not and sum would be in the old numbering) and past its end
   * (4 is ROUND_BF16 now, a unary instruction outside the list). */
  uint32_t ops[] = {7, 8, 10, 27, 28, 45, 46, 63, 83, 84, 85, 90, 255};
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); ++i) {
    uint32_t p[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(ops[i], 1, 0, 0)};
    KILN_EXPECT_ERROR(kiln_fused_program_validate(p, 2, 1, &rot), KILN_INVALID_ARGUMENT);
  }
  /* SELECT reads its condition from dst: dst must be written before. */
  uint32_t sel_ok[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(OP(LT), 1, 0, 0), W(KILN_FUSED_SELECT, 1, 0, 0)};
  KILN_EXPECT_OK(kiln_fused_program_validate(sel_ok, 3, 1, &rot));
  uint32_t sel_bad[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_SELECT, 2, 0, 0)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(sel_bad, 2, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t sel_far[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_SELECT, 0, 0, 99)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(sel_far, 2, 1, &rot), KILN_INVALID_ARGUMENT);
  uint32_t unary_b[] = {W(KILN_FUSED_LOAD, 0, 0, 0), W(OP(EXP), 1, 0, 3)};
  KILN_EXPECT_ERROR(kiln_fused_program_validate(unary_b, 2, 1, &rot), KILN_INVALID_ARGUMENT);

  /* Through the graph: shape inference refuses bad params and shapes. */
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t s4[] = {2, 3, 4}, s5[] = {2, 3, 5}, col[] = {2, 3, 1};
  int32_t x, odd, c, idx, y = -1;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 3, s4, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "odd", KILN_F32, 3, s5, &odd));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "c", KILN_F32, 3, col, &c));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "i", KILN_I64, 3, s4, &idx));
  int64_t p[KILN_MAX_PARAMS] = {3};
  p[1] = (int64_t)((uint64_t)W(KILN_FUSED_LOAD, 0, 0, 0) | (uint64_t)W(KILN_FUSED_LOAD, 1, 1, 0) << 32);
  p[2] = W(OP(MUL), 2, 0, 1);
  int32_t ins[2] = {x, c};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ELTWISE_FUSED, ins, 2, p, KILN_MAX_PARAMS, NULL,
                                     0, NULL, &y));
  if (y >= 0)
    KILN_EXPECT(g->values[y].rank == 3 && g->values[y].shape[2] == 4, "broadcast output shape");
  int32_t bad_shapes[2] = {x, odd};
  kiln_test_fused_refused(g, bad_shapes, 2, p);
  int32_t bad_dtype[2] = {x, idx};
  kiln_test_fused_refused(g, bad_dtype, 2, p);
  int64_t counts[] = {0, -1, 47, INT64_MAX, INT64_MIN};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); ++i) {
    int64_t q[KILN_MAX_PARAMS];
    memcpy(q, p, sizeof(q));
    q[0] = counts[i];
    kiln_test_fused_refused(g, ins, 2, q);
  }
  /* Rotating an odd last dim, or one that is broadcast. */
  int64_t r[KILN_MAX_PARAMS] = {1, W(KILN_FUSED_LOAD_ROTATE_HALF, 0, 0, 0)};
  kiln_test_fused_refused(g, &odd, 1, r);
  int64_t rc[KILN_MAX_PARAMS] = {3};
  rc[1] = (int64_t)((uint64_t)W(KILN_FUSED_LOAD_ROTATE_HALF, 0, 1, 0) |
                    (uint64_t)W(KILN_FUSED_LOAD, 1, 0, 0) << 32);
  rc[2] = W(OP(ADD), 0, 0, 1);
  kiln_test_fused_refused(g, ins, 2, rc);
  /* Halves: of an odd last dim, of a last dim that is not twice the
   * output's (broadcast), and a valid one (its output is the half). */
  int64_t hp[KILN_MAX_PARAMS] = {1, W(KILN_FUSED_LOAD_HIGH_HALF, 0, 0, 0)};
  kiln_test_fused_refused(g, &odd, 1, hp);
  int64_t hx[KILN_MAX_PARAMS] = {3};
  hx[1] = (int64_t)((uint64_t)W(KILN_FUSED_LOAD_LOW_HALF, 0, 0, 0) |
                    (uint64_t)W(KILN_FUSED_LOAD, 1, 1, 0) << 32);
  hx[2] = W(OP(ADD), 0, 0, 1);
  int32_t half_x[2] = {x, x}; /* (2, 3, 2) against (2, 3, 4): not one shape */
  kiln_test_fused_refused(g, half_x, 2, hx);
  int32_t half_c[2] = {x, c}; /* (2, 3, 2) and a column: fine */
  y = -1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ELTWISE_FUSED, half_c, 2, hx, KILN_MAX_PARAMS,
                                     NULL, 0, NULL, &y));
  if (y >= 0) KILN_EXPECT(g->values[y].shape[2] == 2, "a half's shape: %lld", (long long)g->values[y].shape[2]);
  int64_t s2[] = {2, 3, 2};
  int32_t two, bcast[2];
  KILN_EXPECT_OK(kiln_graph_add_input(g, "two", KILN_F32, 3, s2, &two));
  bcast[0] = c, bcast[1] = two; /* halves of c's last dim 1 */
  kiln_test_fused_refused(g, bcast, 2, hx);
  int64_t s8[] = {2, 3, 8};
  int32_t eight;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "eight", KILN_F32, 3, s8, &eight));
  bcast[0] = eight, bcast[1] = two; /* a half of 8 (4) against 2: no broadcast */
  kiln_test_fused_refused(g, bcast, 2, hx);
  int64_t s1[] = {2, 3, 1};
  int32_t one_col;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "col1", KILN_F32, 3, s1, &one_col));
  bcast[0] = x, bcast[1] = one_col; /* x's half (2) broadcast over a column: fine */
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ELTWISE_FUSED, bcast, 2, hx, KILN_MAX_PARAMS,
                                     NULL, 0, NULL, &y));
  /* Random programs: never a crash, and whatever passes re-validates. */
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  int accepted = 0;
  for (int t = 0; t < 2000; ++t) {
    int64_t q[KILN_MAX_PARAMS];
    for (int k = 0; k < KILN_MAX_PARAMS; ++k) {
      seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
      /* Small fields so that some programs are valid. */
      q[k] = (int64_t)(seed & 0x0f0f0f3f0f0f0f3full);
    }
    q[0] = (int64_t)(seed % 6) + 1;
    int32_t y2 = -1;
    kiln_status_t st = kiln_graph_add_node(g, KILN_OP_ELTWISE_FUSED, ins, 2, q, KILN_MAX_PARAMS,
                                           NULL, 0, NULL, &y2);
    if (!st) ++accepted;
    kiln_status_free(st);
  }
  KILN_EXPECT(accepted < 2000, "random programs are mostly refused (%d accepted)", accepted);
  kiln_graph_release(g);
}

/* ---- kernel checks ---- */

typedef struct {
  const char* name;
  int32_t rank;
  int64_t shape[4];
  int32_t n_inputs;
  int64_t in_shape[3][4]; /* trailing-aligned, rank `rank` with 1s where broadcast */
  uint32_t code[KILN_FUSED_MAX_SLOTS];
  int32_t n_code;
} kiln_test_fused_case_t;

static int64_t kiln_test_numel(const int64_t* s, int32_t r) {
  int64_t n = 1;
  for (int32_t d = 0; d < r; ++d) n *= s[d];
  return n;
}

static void kiln_test_fused_args(const kiln_test_fused_case_t* tc, float* const* in, float* out,
                                 kiln_eltwise_fused_args_t* a) {
  memset(a, 0, sizeof(*a));
  a->code = tc->code;
  a->n_code = tc->n_code;
  a->rank = tc->rank;
  memcpy(a->shape, tc->shape, sizeof(int64_t) * (size_t)tc->rank);
  a->n_inputs = tc->n_inputs;
  for (int i = 0; i < tc->n_inputs; ++i) {
    kiln_nd_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.rank = tc->rank;
    memcpy(nd.shape, tc->shape, sizeof(int64_t) * (size_t)tc->rank);
    kiln_nd_set_broadcast(&nd, 1, tc->rank, tc->in_shape[i]);
    memcpy(a->strides[i], nd.strides[1], sizeof(a->strides[i]));
    a->inputs[i] = in[i];
  }
  a->out = out;
}

static const kiln_test_fused_case_t* kiln_test_fused_cur;

static void kiln_test_fused_run(kiln_pool_t* pool, const char* where) {
  const kiln_test_fused_case_t* tc = kiln_test_fused_cur;
  int64_t n = kiln_test_numel(tc->shape, tc->rank);
  float* in[3] = {NULL, NULL, NULL};
  for (int i = 0; i < tc->n_inputs; ++i) {
    int64_t m = kiln_test_numel(tc->in_shape[i], tc->rank);
    in[i] = malloc(sizeof(float) * (size_t)m);
    kiln_test_fill_f32(in[i], (size_t)m, 7u + (unsigned)i, -3.0f, 3.0f);
    /* Specials where there is room. */
    if (m > 5) {
      in[i][1] = NAN;
      in[i][2] = INFINITY;
      in[i][3] = -INFINITY;
      in[i][4] = -0.0f;
    }
  }
  float* got = malloc(sizeof(float) * (size_t)(n + 1));
  float* want = malloc(sizeof(float) * (size_t)(n + 1));
  kiln_eltwise_fused_args_t a;
  kiln_test_fused_args(tc, in, got, &a);
  kiln_eltwise_fused_f32(&a, pool);
  a.out = want;
  kiln_eltwise_fused_f32_reference(&a);
  char what[160];
  snprintf(what, sizeof what, "fused %s %s", tc->name, where);
  kiln_test_compare_f32(what, got, want, (size_t)n, 1e-6f, 2e-6f);
  for (int i = 0; i < 3; ++i) free(in[i]);
  free(got);
  free(want);
}

/* The RoPE-like chain as fused and as separate kernels (rotate_half built
 * by hand): the fused result must equal the unfused one exactly, since the
 * same row kernels run on the same values. */
static void kiln_test_fused_vs_unfused(kiln_pool_t* pool, const char* where) {
  const int64_t rows = 37, d = 64;
  const int64_t n = rows * d;
  float* x = malloc(sizeof(float) * (size_t)n);
  float* cs = malloc(sizeof(float) * (size_t)d);
  float* sn = malloc(sizeof(float) * (size_t)d);
  float* rot = malloc(sizeof(float) * (size_t)n);
  float* t1 = malloc(sizeof(float) * (size_t)n);
  float* t2 = malloc(sizeof(float) * (size_t)n);
  float* want = malloc(sizeof(float) * (size_t)n);
  float* got = malloc(sizeof(float) * (size_t)n);
  kiln_test_fill_f32(x, (size_t)n, 3, -2.0f, 2.0f);
  kiln_test_fill_f32(cs, (size_t)d, 4, -1.0f, 1.0f);
  kiln_test_fill_f32(sn, (size_t)d, 5, -1.0f, 1.0f);
  x[5] = NAN;
  x[70] = INFINITY;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < d; ++j)
      rot[r * d + j] = j < d / 2 ? -x[r * d + j + d / 2] : x[r * d + j - d / 2];
  kiln_nd_t nd;
  memset(&nd, 0, sizeof(nd));
  nd.rank = 2;
  nd.shape[0] = rows;
  nd.shape[1] = d;
  kiln_nd_set_dense_output(&nd);
  int64_t full[2] = {rows, d}, bias[1] = {d};
  kiln_nd_set_broadcast(&nd, 1, 2, full);
  kiln_nd_set_broadcast(&nd, 2, 1, bias);
  kiln_binary(KILN_BINARY_MUL, KILN_F32, &nd, t1, x, cs, pool);
  kiln_binary(KILN_BINARY_MUL, KILN_F32, &nd, t2, rot, sn, pool);
  kiln_nd_set_broadcast(&nd, 2, 2, full);
  kiln_binary(KILN_BINARY_ADD, KILN_F32, &nd, t1, t1, t2, pool);
  kiln_unary_f32(KILN_UNARY_SILU, (size_t)n, t1, want, pool);

  kiln_test_fused_case_t tc = {"rope+silu", 2, {rows, d}, 3, {{rows, d}, {1, d}, {1, d}},
                               {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0),
                                W(OP(MUL), 0, 0, 1), W(KILN_FUSED_LOAD_ROTATE_HALF, 1, 0, 0),
                                W(KILN_FUSED_LOAD, 2, 2, 0), W(OP(MUL), 1, 1, 2),
                                W(OP(ADD), 0, 0, 1), W(OP(SILU), 0, 0, 0)},
                               8};
  float* ins[3] = {x, cs, sn};
  kiln_eltwise_fused_args_t a;
  kiln_test_fused_args(&tc, ins, got, &a);
  kiln_eltwise_fused_f32(&a, pool);
  char what[128];
  snprintf(what, sizeof what, "fused vs unfused rope %s", where);
  kiln_test_compare_f32(what, got, want, (size_t)n, 0.0f, 0.0f);
  free(x), free(cs), free(sn), free(rot), free(t1), free(t2), free(want), free(got);
}

void kiln_test_suite_fused(void) {
  kiln_test_fused_validate();
  float half = 0.5f;
  uint32_t hb = kiln_test_fbits(half);
  static kiln_test_fused_case_t cases[24];
  int nc = 0;
  /* x * 0.5 + bias, then tanh, times a column: bias over the last dim, a
   * [.., 1] column, an immediate; last dim 37 leaves vector tails. */
  cases[nc++] = (kiln_test_fused_case_t){
      "bias-col", 3, {3, 5, 37}, 3, {{3, 5, 37}, {1, 1, 37}, {3, 5, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_IMM, 1, 0, 0), hb, W(OP(MUL), 0, 0, 1),
       W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(ADD), 0, 0, 1), W(OP(TANH), 0, 0, 0),
       W(KILN_FUSED_LOAD, 2, 2, 0), W(OP(MUL), 0, 2, 0)},
      9};
  /* RoPE over more than one tile and the parallel threshold. */
  cases[nc++] = (kiln_test_fused_case_t){
      "rope", 3, {12, 50, 64}, 3, {{12, 50, 64}, {1, 50, 64}, {1, 50, 64}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(MUL), 2, 0, 1),
       W(KILN_FUSED_LOAD_ROTATE_HALF, 3, 0, 0), W(KILN_FUSED_LOAD, 4, 2, 0),
       W(OP(MUL), 3, 3, 4), W(OP(ADD), 0, 2, 3)},
      7};
  /* A scalar tensor input, the ext ops, a result that is a load's register
   * reused, and one element. */
  cases[nc++] = (kiln_test_fused_case_t){
      "ext-scalar", 2, {7, 129}, 2, {{7, 129}, {1, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(FMOD), 2, 0, 1),
       W(OP(ATAN), 2, 2, 0), W(OP(FLOOR), 3, 0, 0), W(OP(MAXIMUM), 2, 2, 3),
       W(OP(DIV), 2, 2, 1), W(OP(EXP), 2, 2, 0), W(OP(MINIMUM), 2, 2, 0)},
      9};
  cases[nc++] = (kiln_test_fused_case_t){
      "one", 1, {1}, 2, {{1}, {1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(SUB), 0, 0, 1),
       W(OP(ABS), 0, 0, 0)},
      4};
  /* Only scalars: the result is filled. */
  cases[nc++] = (kiln_test_fused_case_t){
      "scalar-fill", 2, {3, 300}, 2, {{3, 300}, {1, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(KILN_FUSED_IMM, 2, 0, 0), hb,
       W(OP(POW), 2, 1, 2), W(OP(MUL), 3, 0, 2), W(OP(SQRT), 0, 2, 0), W(OP(ADD), 0, 0, 3)},
      8};
  /* clamp(x, -1, c) as torch lowers it: lt/where, gt/where, with NaN kept
   * (x < -1 is false for NaN, so the where keeps x); c a column. */
  uint32_t m1 = kiln_test_fbits(-1.0f);
  cases[nc++] = (kiln_test_fused_case_t){
      "clamp-where", 3, {2, 3, 45}, 2, {{2, 3, 45}, {2, 3, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_IMM, 1, 0, 0), m1, W(OP(LT), 2, 0, 1),
       W(KILN_FUSED_SELECT, 2, 1, 0), W(KILN_FUSED_LOAD, 3, 1, 0), W(OP(GT), 4, 2, 3),
       W(OP(EQ), 5, 2, 3), W(OP(ADD), 4, 4, 5), W(KILN_FUSED_SELECT, 4, 3, 2)},
      10};
  /* ReLU's backward as torch lowers it: where(y <= 0, 0, g), the condition
   * and one arm broadcast scalars, over tiles and a tail (5 x 1031). */
  uint32_t zero = kiln_test_fbits(0.0f);
  cases[nc++] = (kiln_test_fused_case_t){
      "relu-backward", 2, {5, 1031}, 2, {{5, 1031}, {5, 1031}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_IMM, 1, 0, 0), zero, W(OP(LE), 2, 0, 1),
       W(KILN_FUSED_LOAD, 3, 1, 0), W(KILN_FUSED_SELECT, 2, 1, 3)},
      6};
  /* A select whose condition, arms and result are all scalars (a column
   * input broadcast to the rows after the select). */
  cases[nc++] = (kiln_test_fused_case_t){
      "select-scalars", 2, {4, 600}, 2, {{4, 600}, {1, 1}},
      {W(KILN_FUSED_LOAD, 0, 1, 0), W(KILN_FUSED_IMM, 1, 0, 0), zero, W(OP(GT), 2, 0, 1),
       W(KILN_FUSED_SELECT, 2, 0, 1), W(KILN_FUSED_LOAD, 3, 0, 0), W(OP(ADD), 2, 2, 3)},
      8};
  /* A gated pair's halves: silu(x[..., :h]) * x[..., h:] over rows (a row
   * of x is 2h: the loads gather), over the parallel threshold, and in one
   * row (the loads read x in place, the high half from h on) beside a
   * broadcast bias. */
  cases[nc++] = (kiln_test_fused_case_t){
      "glu-rows", 2, {7, 300}, 1, {{7, 600}},
      {W(KILN_FUSED_LOAD_LOW_HALF, 0, 0, 0), W(OP(SILU), 0, 0, 0),
       W(KILN_FUSED_LOAD_HIGH_HALF, 1, 0, 0), W(OP(MUL), 0, 0, 1)},
      4};
  cases[nc++] = (kiln_test_fused_case_t){
      "glu-parallel", 3, {2, 20, 704}, 1, {{2, 20, 1408}},
      {W(KILN_FUSED_LOAD_HIGH_HALF, 0, 0, 0), W(KILN_FUSED_LOAD_LOW_HALF, 1, 0, 0),
       W(OP(GELU), 1, 1, 0), W(OP(MUL), 0, 0, 1)},
      4};
  cases[nc++] = (kiln_test_fused_case_t){
      "glu-one-row", 3, {1, 1, 1411}, 2, {{1, 1, 2822}, {1, 1, 1411}},
      {W(KILN_FUSED_LOAD_LOW_HALF, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(ADD), 0, 0, 1),
       W(OP(SIGMOID), 0, 0, 0), W(KILN_FUSED_LOAD_HIGH_HALF, 2, 0, 0), W(OP(MUL), 0, 2, 0)},
      6};
  /* Batch norm over NCHW as folded: x * scale[c] + shift[c], then a
   * compare and a select against the per-channel shift. H and W merge into
   * rows of 667 floats (tiles then stop at row ends and each channel's
   * values are scalars per tile), over the parallel threshold. */
  cases[nc++] = (kiln_test_fused_case_t){
      "bn-nchw", 4, {4, 8, 23, 29}, 3, {{4, 8, 23, 29}, {1, 8, 1, 1}, {1, 8, 1, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(MUL), 0, 0, 1),
       W(KILN_FUSED_LOAD, 2, 2, 0), W(OP(GT), 3, 0, 2), W(KILN_FUSED_SELECT, 3, 0, 2),
       W(OP(ADD), 0, 3, 1)},
      7};
  /* A size-1 dim dropped, rows of 40 (too short for row tiles: the column
   * is filled, row by row, across tiles). */
  cases[nc++] = (kiln_test_fused_case_t){
      "col-short-rows", 4, {2, 1, 6, 40}, 2, {{2, 1, 6, 40}, {1, 1, 6, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(SUB), 0, 0, 1),
       W(OP(ABS), 0, 0, 0)},
      4};
  /* Halves keep the last dim; a column beside them, rows of 1500 (more
   * than a tile: tiles cut at row ends). */
  cases[nc++] = (kiln_test_fused_case_t){
      "halves-col", 3, {4, 3, 1500}, 2, {{4, 3, 3000}, {4, 3, 1}},
      {W(KILN_FUSED_LOAD_LOW_HALF, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(MUL), 0, 0, 1),
       W(KILN_FUSED_LOAD_HIGH_HALF, 2, 0, 0), W(OP(ADD), 0, 0, 2)},
      5};
  /* Compares with the select that reads them (one pass each): a scalar
   * left of a tile (the op mirrored), NE (the arms swapped), tile and
   * scalar arms, a load between (hoisted) and one that writes the
   * compare's operand (not hoisted), a select reading the compare as an
   * arm (two steps), the pair as the last step and not. */
  uint32_t two = kiln_test_fbits(2.0f);
  cases[nc++] = (kiln_test_fused_case_t){
      "cmp-sel-mirror", 2, {9, 700}, 2, {{9, 700}, {1, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(LT), 2, 1, 0),
       W(KILN_FUSED_SELECT, 2, 0, 1), W(OP(LE), 3, 1, 2), W(KILN_FUSED_SELECT, 3, 2, 0),
       W(OP(NE), 2, 3, 0), W(KILN_FUSED_IMM, 1, 0, 0), two, W(KILN_FUSED_SELECT, 2, 1, 3),
       W(OP(GE), 0, 2, 3), W(KILN_FUSED_SELECT, 0, 3, 2)},
      12};
  cases[nc++] = (kiln_test_fused_case_t){
      "cmp-sel-loads", 2, {5, 1031}, 3, {{5, 1031}, {5, 1031}, {5, 1}},
      {W(KILN_FUSED_LOAD, 0, 0, 0), W(KILN_FUSED_LOAD, 1, 1, 0), W(OP(GT), 2, 0, 1),
       W(KILN_FUSED_LOAD, 3, 2, 0), W(KILN_FUSED_IMM, 4, 0, 0), two,
       W(KILN_FUSED_SELECT, 2, 3, 4), W(OP(EQ), 5, 2, 0), W(KILN_FUSED_LOAD, 0, 2, 0),
       W(KILN_FUSED_SELECT, 5, 0, 1), W(OP(LT), 6, 5, 0), W(KILN_FUSED_SELECT, 6, 6, 5),
       W(OP(ADD), 6, 6, 2)},
      13};
  for (int i = 0; i < nc; ++i) {
    kiln_test_fused_cur = &cases[i];
    kiln_test_each_isa_and_pool(kiln_test_fused_run);
  }
  kiln_test_each_isa_and_pool(kiln_test_fused_vs_unfused);
}
