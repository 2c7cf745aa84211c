/* Training-graph support from C: safe softmax (aten._safe_softmax: a row of
 * all -inf gives zeros) and the simplify pass composing chains of strided
 * copies (attention's head split) into one copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph.h"
#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/nn/kiln_nn.h"
#include "kernels/nn/kiln_softmax_safe.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

static kiln_graph_t* new_graph(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  return g;
}

/* g with output y, compiled with the default options, as a model (NULL,
 * with the failure reported, when a step fails). */
static kiln_model_t* compile_model(kiln_graph_t* g, int32_t y) {
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, NULL, &compiled));
  if (!compiled) return NULL;
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  return m;
}

/* Rows: ordinary; all -inf (zeros); -inf first but not all (softmax as
 * usual); a NaN (NaN row, as torch); +inf first (NaN, as torch); one
 * element per tail length. cols 1 and 19 cover size 1 and a vector tail. */
static void check_safe_softmax(kiln_pool_t* pool, const char* where) {
  for (size_t cols = 1; cols <= 19; cols += 18) {
    enum { ROWS = 5 };
    float x[ROWS * 19], got[ROWS * 19], want[ROWS * 19];
    kiln_test_fill_f32(x, ROWS * cols, (unsigned)cols, -4.0f, 4.0f);
    for (size_t i = 0; i < cols; ++i) x[cols + i] = -INFINITY;
    x[2 * cols] = -INFINITY;
    x[3 * cols + cols / 2] = NAN;
    x[4 * cols] = INFINITY;
    kiln_softmax_f32(ROWS, cols, x, got, 0, pool);
    kiln_softmax_zero_masked_f32(ROWS, cols, 1, x, got);
    kiln_softmax_f32_reference(ROWS, cols, x, want, 0);
    for (size_t i = 0; i < cols; ++i) want[cols + i] = 0.0f;
    if (cols == 1) want[2] = 0.0f; /* row 2 is all -inf when it is one long */
    char what[96];
    snprintf(what, sizeof what, "safe softmax cols %zu %s", cols, where);
    kiln_test_compare_f32(what, got, want, ROWS * cols, 1e-6f, 1e-5f);
  }
}

/* Along a middle axis (inner > 1): x (2, 3, 4), softmax over the 3; line
 * (0, :, 1) all -inf becomes zeros, every other line is untouched. */
static void test_safe_softmax_strided(void) {
  float x[24], y[24], before[24];
  kiln_test_fill_f32(x, 24, 7, -2.0f, 2.0f);
  for (int k = 0; k < 3; ++k) x[k * 4 + 1] = -INFINITY;
  x[12 + 2] = -INFINITY; /* a line that only starts with -inf */
  for (int i = 0; i < 24; ++i) y[i] = before[i] = (float)i + 0.5f;
  kiln_softmax_zero_masked_f32(2, 3, 4, x, y);
  int bad = 0;
  for (int o = 0; o < 2; ++o)
    for (int k = 0; k < 3; ++k)
      for (int i = 0; i < 4; ++i) {
        int at = o * 12 + k * 4 + i;
        float want = (o == 0 && i == 1) ? 0.0f : before[at];
        bad += y[at] != want;
      }
  KILN_EXPECT(bad == 0, "strided safe softmax: %d wrong elements", bad);
}

/* The SOFTMAX safe flag through a graph, and its validation. */
static void test_safe_softmax_graph(void) {
  kiln_graph_t* g = new_graph();
  int64_t shape[2] = {2, 3};
  int32_t x, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, shape, &x));
  int64_t bad[2] = {1, 2};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SOFTMAX, &x, 1, bad, 2, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  int64_t log_safe[2] = {1, 1};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LOG_SOFTMAX, &x, 1, log_safe, 2, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  int64_t safe[2] = {1, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SOFTMAX, &x, 1, safe, 2, NULL, 0, NULL, &y));
  kiln_model_t* m = compile_model(g, y);
  if (!m) return;
  float in[6] = {-INFINITY, -INFINITY, -INFINITY, 0.0f, 0.0f, -INFINITY}, out[6];
  kiln_tensor_t ti = {in, KILN_F32, 2, shape}, to = {out, KILN_F32, 2, shape};
  KILN_EXPECT_OK(kiln_model_run(m, &ti, 1, &to, 1));
  float want[6] = {0.0f, 0.0f, 0.0f, 0.5f, 0.5f, 0.0f};
  kiln_test_compare_f32("safe softmax graph", out, want, 6, 1e-6f, 1e-6f);
  kiln_model_release(m);
}

/* GELU_BACKWARD's shape rule, and the op through a compiled graph against
 * the kernel's reference. */
static void test_gelu_backward_graph(void) {
  kiln_graph_t* g = new_graph();
  int64_t shape[2] = {3, 5}, other[2] = {5, 3};
  int32_t in[2], wrong, wi, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "dy", KILN_F32, 2, shape, &in[0]));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, shape, &in[1]));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "t", KILN_F32, 2, other, &wrong));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "i", KILN_I64, 2, shape, &wi));
  int64_t approx = 0, bad = 2;
  int32_t mismatched[2] = {in[0], wrong}, ints[2] = {in[0], wi};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GELU_BACKWARD, mismatched, 2, &approx, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GELU_BACKWARD, ints, 2, &approx, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GELU_BACKWARD, in, 2, &bad, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  int64_t tanh_form = 1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GELU_BACKWARD, in, 2, &tanh_form, 1, NULL, 0, NULL, &y));
  kiln_model_t* m = compile_model(g, y);
  if (!m) return;
  float dy[15], x[15], t[15] = {0}, iv[15 * 2] = {0}, out[15], want[15];
  kiln_test_fill_f32(dy, 15, 11, -1.0f, 1.0f);
  kiln_test_fill_f32(x, 15, 12, -4.0f, 4.0f);
  kiln_tensor_t ti[4] = {{dy, KILN_F32, 2, shape}, {x, KILN_F32, 2, shape}, {t, KILN_F32, 2, other},
                         {iv, KILN_I64, 2, shape}};
  kiln_tensor_t to = {out, KILN_F32, 2, shape};
  KILN_EXPECT_OK(kiln_model_run(m, ti, 4, &to, 1));
  kiln_gelu_backward_f32_reference(1, 15, dy, x, want);
  kiln_test_compare_f32("gelu_backward graph", out, want, 15, 1e-6f, 1e-5f);
  kiln_model_release(m);
}

/* LAYER_NORM_BACKWARD's shape rule: one shape for dy and x, a value per
 * row for mean and rstd, cols for gamma, a valid dim count. */
static void test_layer_norm_backward_rule(void) {
  kiln_graph_t* g = new_graph();
  int64_t shape[3] = {2, 3, 4}, rows_shape[3] = {2, 3, 1}, cols_shape[1] = {4}, bad_rows[1] = {5};
  int32_t dy, x, mean, rstd, gamma, wrong_rows, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "dy", KILN_F32, 3, shape, &dy));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 3, shape, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "mean", KILN_F32, 3, rows_shape, &mean));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "rstd", KILN_F32, 3, rows_shape, &rstd));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "gamma", KILN_F32, 1, cols_shape, &gamma));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "r5", KILN_F32, 1, bad_rows, &wrong_rows));
  int64_t one = 1, zero = 0, four = 4;
  int32_t ok[5] = {dy, x, mean, rstd, gamma}, bad_stats[5] = {dy, x, wrong_rows, rstd, gamma},
          bad_gamma[5] = {dy, x, mean, rstd, rstd}, bad_x[5] = {dy, mean, mean, rstd, gamma};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, bad_stats, 5, &one, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, bad_gamma, 5, &one, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, bad_x, 5, &one, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, ok, 5, &zero, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, ok, 5, &four, 1, NULL, 0, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, ok, 4, &one, 1, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LAYER_NORM_BACKWARD, ok, 5, &one, 1, NULL, 0, NULL, &y));
  kiln_graph_release(g);
}

static int count_op(const kiln_graph_t* g, kiln_op_t op) {
  int c = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) c += g->nodes[i].op == op;
  return c;
}

/* nn.MultiheadAttention's head split for k: x (S, B, 3E) -> select k
 * (S, B, E) -> reshape (S, B*H, D) -> permute (B*H, S, D) -> reshape
 * (B, H, S, D) -> neg. Three copies in the graph; composed, one strided
 * copy of x, and y[b, h, s, d] = -x[s, b, E + h*D + d]. With `split` 0 the
 * last reshape is absent (the permute's (B*H) merge does not compose by
 * itself), and the result must still be right. */
static void test_compose_head_split(int split) {
  enum { S = 3, B = 2, H = 2, D = 4, E = H * D };
  kiln_graph_t* g = new_graph();
  int64_t xs[3] = {S, B, 3 * E};
  int32_t x, c0, r0, c1, r1, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 3, xs, &x));
  int64_t sel[18] = {3, S, B, E, 0, 0, 0, 0, 0, B * 3 * E, 3 * E, 1};
  sel[17] = E;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &x, 1, sel, 18, NULL, 0, NULL, &c0));
  int64_t rs0[4] = {3, S, B * H, D};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RESHAPE, &c0, 1, rs0, 4, NULL, 0, NULL, &r0));
  int64_t perm[18] = {3, B * H, S, D, 0, 0, 0, 0, 0, D, B * H * D, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &r0, 1, perm, 18, NULL, 0, NULL, &c1));
  r1 = c1;
  if (split) {
    int64_t rs1[5] = {4, B, H, S, D};
    KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RESHAPE, &c1, 1, rs1, 5, NULL, 0, NULL, &r1));
  }
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_NEG, &r1, 1, NULL, 0, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.fuse = 0; /* count the copies themselves */
  kiln_graph_t* compiled = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &compiled));
  if (!compiled) return;
  int copies = count_op(compiled, KILN_OP_STRIDED_COPY);
  KILN_EXPECT(copies == (split ? 1 : 2), "head split (reshape after: %d): %d strided copies", split,
              copies);
  kiln_model_t* m = NULL;
  KILN_EXPECT_OK(kiln_model_create(compiled, NULL, NULL, &m));
  if (!m) return;
  float in[S * B * 3 * E], out[S * B * E], want[S * B * E];
  kiln_test_fill_f32(in, S * B * 3 * E, 3, -1.0f, 1.0f);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int s = 0; s < S; ++s)
        for (int d = 0; d < D; ++d)
          want[((b * H + h) * S + s) * D + d] = -in[(s * B + b) * 3 * E + E + h * D + d];
  int64_t ys4[4] = {B, H, S, D}, ys3[3] = {B * H, S, D};
  kiln_tensor_t ti = {in, KILN_F32, 3, xs}, to = {out, KILN_F32, split ? 4 : 3, split ? ys4 : ys3};
  KILN_EXPECT_OK(kiln_model_run(m, &ti, 1, &to, 1));
  kiln_test_compare_f32(split ? "composed head split" : "uncomposed head split", out, want,
                        S * B * E, 0.0f, 0.0f);
  kiln_model_release(m);
}

/* Row sums and means (layer norm statistics, its backward's row sums)
 * against the serial reference: every tail length around the lane count,
 * one element, and rows holding NaN or +-Inf. Both sum in double; the lane
 * order changes only double rounding. */
static const size_t kiln_test_sum_rows_lens[] = {1,  2,  7,  8,  9,  15, 16,  17,
                                                  31, 32, 33, 47, 49, 64, 65, 256};
enum { KILN_TEST_SUM_ROWS_N = sizeof kiln_test_sum_rows_lens / sizeof kiln_test_sum_rows_lens[0] };
/* The portable level's results, [length][mean][row]: every level's bits. */
static float kiln_test_sum_rows_portable[KILN_TEST_SUM_ROWS_N][2][5];

static void test_sum_rows_level(kiln_pool_t* pool, const char* where) {
  (void)pool;
  const int portable = kiln_cpu_isa() == KILN_ISA_GENERIC;
  for (size_t li = 0; li < KILN_TEST_SUM_ROWS_N; ++li) {
    size_t cols = kiln_test_sum_rows_lens[li], rows = 5;
    float x[5 * 256], got[5], want[5];
    kiln_test_fill_f32(x, rows * cols, (unsigned)cols, -3.0f, 3.0f);
    x[1 * cols + cols / 2] = NAN;
    x[2 * cols] = INFINITY;
    x[3 * cols + cols - 1] = -INFINITY;
    for (int mean = 0; mean < 2; ++mean) {
      kiln_reduce_sum_rows_f32(rows, cols, mean, x, got);
      kiln_reduce_sum_rows_f32_reference(rows, cols, mean, x, want);
      char what[96];
      snprintf(what, sizeof what, "row %s, %zu long %s", mean ? "means" : "sums", cols, where);
      kiln_test_compare_f32(what, got, want, rows, 1e-6f, 1e-6f);
      if (portable)
        memcpy(kiln_test_sum_rows_portable[li][mean], got, sizeof got);
      else
        KILN_EXPECT(memcmp(kiln_test_sum_rows_portable[li][mean], got, sizeof got) == 0,
                    "%s: not the portable level's bits", what);
    }
  }
}

/* Row sums and means at every level: the portable level runs first
 * (kiln_test_each_isa_and_pool's order), and the vector levels, which sum
 * in the same lanes and tree, must give its bits. */
static void test_sum_rows(void) { kiln_test_each_isa_and_pool(test_sum_rows_level); }

/* Sums over leading axes (bias gradients: over the batch rows), four rows
 * per sweep and the rest one by one: against a double reference. */
static void test_sum_leading(void) {
  static const int64_t reds[] = {1, 3, 4, 5, 9};
  for (size_t k = 0; k < sizeof reds / sizeof reds[0]; ++k) {
    int64_t shape[2] = {reds[k], 13};
    float x[9 * 13], got[13], want[13];
    kiln_test_fill_f32(x, (size_t)(reds[k] * 13), (unsigned)k, -2.0f, 2.0f);
    if (reds[k] > 2) x[2 * 13 + 4] = NAN;
    for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_MEAN; ++op) {
      kiln_reduce((kiln_reduce_t)op, KILN_F32, 2, shape, 1u, x, got, NULL);
      for (int j = 0; j < 13; ++j) {
        double a = 0.0;
        for (int64_t r = 0; r < reds[k]; ++r) a += x[r * 13 + j];
        want[j] = (float)(op == KILN_REDUCE_MEAN ? a / (double)reds[k] : a);
      }
      char what[64];
      snprintf(what, sizeof what, "leading %s of %lld rows", op == KILN_REDUCE_MEAN ? "mean" : "sum",
               (long long)reds[k]);
      kiln_test_compare_f32(what, got, want, 13, 1e-5f, 1e-5f);
    }
  }
}

/* Float reductions split over a pool (rows of a trailing reduction,
 * column ranges of a leading one): bitwise equal to the serial run, for
 * sums, means, maxima and minima, with ragged last tasks. */
static void test_reduce_parallel(void) {
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(3, &pool));
  if (!pool) return;
  enum { R = 301, C = 517 };
  float* x = malloc(R * C * sizeof(float));
  float* a = malloc(R * C * sizeof(float));
  float* b = malloc(R * C * sizeof(float));
  if (x && a && b) {
    kiln_test_fill_f32(x, R * C, 99u, -5.0f, 5.0f);
    x[7 * C + 11] = NAN;
    int64_t shape[2] = {R, C};
    for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_MIN; ++op) {
      for (uint32_t mask = 1; mask <= 2; ++mask) {
        size_t n = mask == 1 ? C : R;
        kiln_reduce((kiln_reduce_t)op, KILN_F32, 2, shape, mask, x, a, NULL);
        kiln_reduce((kiln_reduce_t)op, KILN_F32, 2, shape, mask, x, b, pool);
        KILN_EXPECT(memcmp(a, b, n * sizeof(float)) == 0,
                    "reduce op %d over axis %s: 3 threads differ from 1", op,
                    mask == 1 ? "0 (leading)" : "1 (trailing)");
      }
    }
  }
  free(x);
  free(a);
  free(b);
  kiln_pool_release(pool);
}

/* Float reductions over runs of consecutive axes, x as (outer, reduce,
 * inner) per run: trailing, leading and middle runs (a size-1 kept axis
 * inside the run does not break it) and two runs, against a double
 * reference that walks each output's elements; maxima and minima exactly, NaN kept, and rows holding
 * both infinities (their sum is NaN, their maximum is not). */
static void test_reduce_runs(void) {
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(2, &pool));
  enum { A = 3, B = 40, D = 1, E = 37 };
  static float x[A * B * D * E];
  float got[A * B * D * E], want[A * B * D * E];
  kiln_test_fill_f32(x, A * B * D * E, 7u, -4.0f, 4.0f);
  x[1 * B * E + 5 * E + 3] = NAN;          /* (1, 5, 0, 3) */
  x[2 * B * E + 9 * E + 0] = INFINITY;     /* row (2, 9) holds both infinities */
  x[2 * B * E + 9 * E + 20] = -INFINITY;
  int64_t shape[4] = {A, B, D, E};
  /* One run each, then two runs (axes 0 and 3, 0 and 2-3: a kept axis
   * between), which reduce run by run through a buffer. */
  static const uint32_t masks[] = {1u << 1, 1u << 3, (1u << 2) | (1u << 3), 1u | 2u, 2u | 8u,
                                   1u | 8u, 1u | 4u | 8u};
  for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; ++mi) {
    const uint32_t mask = masks[mi];
    for (int op = KILN_REDUCE_SUM; op <= KILN_REDUCE_MIN; ++op) {
      /* The reference: for each output (kept index), every reduced index. */
      int64_t n_out = 0;
      for (int64_t a = 0; a < A; ++a)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t d = 0; d < D; ++d)
            for (int64_t e = 0; e < E; ++e) {
              const int64_t idx[4] = {a, b, d, e};
              int first = 1;
              for (int k = 0; k < 4; ++k)
                if ((mask & (1u << k)) && idx[k] != 0) first = 0;
              if (!first) continue; /* one output per kept index */
              double acc = op == KILN_REDUCE_MAX ? -INFINITY : op == KILN_REDUCE_MIN ? INFINITY : 0.0;
              int64_t cnt = 0;
              for (int64_t a2 = 0; a2 < A; ++a2)
                for (int64_t b2 = 0; b2 < B; ++b2)
                  for (int64_t d2 = 0; d2 < D; ++d2)
                    for (int64_t e2 = 0; e2 < E; ++e2) {
                      const int64_t j[4] = {a2, b2, d2, e2};
                      int same = 1;
                      for (int k = 0; k < 4; ++k)
                        if (!(mask & (1u << k)) && j[k] != idx[k]) same = 0;
                      if (!same) continue;
                      double v = x[((a2 * B + b2) * D + d2) * E + e2];
                      ++cnt;
                      if (op <= KILN_REDUCE_MEAN) acc += v;
                      else if (v != v || acc != acc) acc = NAN;
                      else if (op == KILN_REDUCE_MAX ? v > acc : v < acc) acc = v;
                    }
              want[n_out++] = (float)(op == KILN_REDUCE_MEAN ? acc / (double)cnt : acc);
            }
      kiln_reduce((kiln_reduce_t)op, KILN_F32, 4, shape, mask, x, got, pool);
      char what[64];
      snprintf(what, sizeof what, "reduce op %d mask %u", op, mask);
      kiln_test_compare_f32(what, got, want, (size_t)n_out, op <= KILN_REDUCE_MEAN ? 1e-5f : 0.0f,
                            op <= KILN_REDUCE_MEAN ? 1e-5f : 0.0f);
    }
  }
  kiln_pool_release(pool);
}

/* any over bools, every single run of axes: against a walk of each
 * output's elements; bytes other than 0 and 1 count as true. */
static void test_reduce_any(void) {
  enum { A = 3, B = 5, E = 37 };
  uint8_t x[A * B * E], got[A * B * E], want[A * B * E];
  for (int i = 0; i < A * B * E; ++i) x[i] = (i * 7919) % 53 == 0 ? (uint8_t)(i % 3 + 1) : 0;
  int64_t shape[3] = {A, B, E};
  static const uint32_t masks[] = {1u, 2u, 4u, 3u, 6u, 7u};
  for (size_t mi = 0; mi < sizeof masks / sizeof masks[0]; ++mi) {
    const uint32_t mask = masks[mi];
    int64_t n = 0;
    for (int64_t a = 0; a < A; ++a)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t e = 0; e < E; ++e) {
          const int64_t idx[3] = {a, b, e};
          int first = 1;
          for (int k = 0; k < 3; ++k)
            if ((mask & (1u << k)) && idx[k] != 0) first = 0;
          if (!first) continue;
          uint8_t any = 0;
          for (int64_t a2 = 0; a2 < A; ++a2)
            for (int64_t b2 = 0; b2 < B; ++b2)
              for (int64_t e2 = 0; e2 < E; ++e2) {
                const int64_t j[3] = {a2, b2, e2};
                int same = 1;
                for (int k = 0; k < 3; ++k)
                  if (!(mask & (1u << k)) && j[k] != idx[k]) same = 0;
                if (same && x[(a2 * B + b2) * E + e2]) any = 1;
              }
          want[n++] = any;
        }
    kiln_reduce(KILN_REDUCE_ANY, KILN_BOOL, 3, shape, mask, x, got, NULL);
    KILN_EXPECT(memcmp(got, want, (size_t)n) == 0, "any over mask %u differs", mask);
  }
}

/* int64 reductions are exact: INT64_MAX (masked reductions' fill) and
 * values past 2^53 survive min, max, sum and argmax, over trailing, leading
 * and mixed axes; sums wrap as torch's. Through double they rounded, and
 * INT64_MAX came back as INT64_MIN (OpInfo masked.amin, int64). */
static void test_reduce_int64_exact(void) {
  const int64_t big = (int64_t)1 << 53;
  int64_t x[2][3] = {{INT64_MAX, big + 1, -5}, {INT64_MAX, big, INT64_MIN}};
  int64_t shape[2] = {2, 3}, out[3];
  kiln_reduce(KILN_REDUCE_MIN, KILN_I64, 2, shape, 1u, x, out, NULL); /* leading */
  KILN_EXPECT(out[0] == INT64_MAX && out[1] == big && out[2] == INT64_MIN, "int64 min over rows: %lld %lld %lld",
              (long long)out[0], (long long)out[1], (long long)out[2]);
  kiln_reduce(KILN_REDUCE_MAX, KILN_I64, 2, shape, 1u, x, out, NULL);
  KILN_EXPECT(out[0] == INT64_MAX && out[1] == big + 1 && out[2] == -5, "int64 max over rows");
  kiln_reduce(KILN_REDUCE_MAX, KILN_I64, 2, shape, 2u, x, out, NULL); /* trailing */
  KILN_EXPECT(out[0] == INT64_MAX && out[1] == INT64_MAX, "int64 max over columns");
  kiln_reduce(KILN_REDUCE_SUM, KILN_I64, 2, shape, 2u, x, out, NULL);
  KILN_EXPECT(out[0] == (int64_t)((uint64_t)INT64_MAX + (uint64_t)(big + 1) - 5u),
              "int64 sum wraps as torch's");
  int64_t y[2][2][2] = {{{big + 1, 1}, {big, 2}}, {{INT64_MAX, 3}, {0, 4}}}, s3[3] = {2, 2, 2}, o2[2];
  kiln_reduce(KILN_REDUCE_MIN, KILN_I64, 3, s3, 5u, y, o2, NULL); /* axes 0 and 2: mixed */
  KILN_EXPECT(o2[0] == 1 && o2[1] == 0, "int64 min over mixed axes");
  kiln_reduce(KILN_REDUCE_MAX, KILN_I64, 3, s3, 5u, y, o2, NULL);
  KILN_EXPECT(o2[0] == INT64_MAX && o2[1] == big, "int64 max over mixed axes");
  int64_t idx[3];
  kiln_argmax(KILN_I64, 2, shape, 0, x, idx);
  KILN_EXPECT(idx[0] == 0 && idx[1] == 0 && idx[2] == 0, "argmax keeps big + 1 over big, first of ties");
}

void kiln_test_suite_train_ops(void) {
  test_reduce_parallel();
  test_reduce_runs();
  test_reduce_any();
  test_reduce_int64_exact();
  test_sum_rows();
  test_sum_leading();
  kiln_test_each_isa_and_pool(check_safe_softmax);
  test_safe_softmax_strided();
  test_safe_softmax_graph();
  test_gelu_backward_graph();
  test_layer_norm_backward_rule();
  test_compose_head_split(1);
  test_compose_head_split(0);
}
