/* Tests of the grouped GEMM (GROUPED_MM, a mixture of experts' expert
 * layers): kiln_gemm_grouped_f32 against its reference walk over
 * kiln_gemm_f32_reference at every ISA level and pool, for segments as
 * transformers makes them (sorted ids: cumulative counts, empty experts)
 * and for any offsets eager accepts (repeated, decreasing, negative, past
 * S: Python slicing), w as (E, K, N) or stored (E, N, K), int64 and int32
 * offsets; y is compared with a guard element past its end (never
 * written) and rows no segment covers must be 0. Then the shape rule.
 * Tolerance as test_gemm.c's: atol 1e-5 sqrt(K) + 1e-6 for K-term sums of
 * products in [-1, 1]. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_alloc.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "ir/kiln_graph.h"
#include "kernels/gemm/kiln_gemm_grouped.h"
#include "kiln_test.h"

typedef struct {
  const char* name;
  int64_t s, k, n, e;
  int64_t offs[6];
  int transposed, i32;
} grouped_case_t;

static void grouped_test_run(const grouped_case_t* c, kiln_pool_t* pool, const char* where) {
  size_t nx = (size_t)(c->s * c->k), nw = (size_t)(c->e * c->k * c->n), ny = (size_t)(c->s * c->n);
  float* x = malloc((nx + 1) * sizeof(float));
  float* w = malloc((nw + 1) * sizeof(float));
  float* got = malloc((ny + 1) * sizeof(float));
  float* want = malloc((ny + 1) * sizeof(float));
  if (!x || !w || !got || !want) goto done;
  kiln_test_fill_f32(x, nx, 11, -1.0f, 1.0f);
  kiln_test_fill_f32(w, nw, 12, -1.0f, 1.0f);
  int64_t o64[6];
  int32_t o32[6];
  for (int64_t i = 0; i < c->e; ++i) o64[i] = c->offs[i], o32[i] = (int32_t)c->offs[i];
  for (size_t i = 0; i <= ny; ++i) got[i] = want[i] = 12345.0f; /* every element written, none past */
  kiln_gemm_grouped_f32_args_t a = {c->s, c->k, c->n, c->e, x, w, c->transposed,
                                    c->i32 ? (const void*)o32 : (const void*)o64, !c->i32, got};
  kiln_gemm_grouped_f32(&a, pool);
  a.y = want;
  kiln_gemm_grouped_f32_reference(&a);
  char what[160];
  snprintf(what, sizeof what, "%s grouped_mm %s%s%s", where, c->name, c->transposed ? " w^T" : "",
           c->i32 ? " int32" : "");
  kiln_test_compare_f32(what, got, want, ny + 1, 1e-5f * sqrtf((float)c->k) + 1e-6f, 0.0f);
  /* The reference against the loop written out: rows [lo, hi) of segment e
   * as Python slices them, each element a plain sum. */
  int64_t start = 0, err_rows = 0;
  float* by_hand = calloc(ny + 1, sizeof(float));
  if (!by_hand) goto done;
  for (int64_t e = 0; e < c->e; ++e) {
    int64_t end = c->offs[e];
    if (end == start) continue;
    int64_t lo = start < 0 ? start + c->s : start, hi = end < 0 ? end + c->s : end;
    lo = lo < 0 ? 0 : lo > c->s ? c->s : lo;
    hi = hi < 0 ? 0 : hi > c->s ? c->s : hi;
    start = end;
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t j = 0; j < c->n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < c->k; ++p)
          acc += (double)x[i * c->k + p] *
                 w[e * c->k * c->n + (c->transposed ? j * c->k + p : p * c->n + j)];
        by_hand[i * c->n + j] = (float)acc;
      }
  }
  for (size_t i = 0; i < ny; ++i) err_rows += fabsf(by_hand[i] - want[i]) > 1e-5f * sqrtf((float)c->k) + 1e-6f;
  KILN_EXPECT(err_rows == 0, "%s: the reference differs from the loop written out at %lld elements",
              what, (long long)err_rows);
  free(by_hand);
done:
  free(x);
  free(w);
  free(got);
  free(want);
}

static void grouped_test_level(kiln_pool_t* pool, const char* where) {
  static const grouped_case_t cases[] = {
      /* transformers: cumulative counts of sorted ids, some experts empty */
      {"decode top-2 of 4", 2, 64, 48, 4, {0, 1, 1, 2}, 0, 0},
      {"prefill 18 rows", 18, 64, 256, 4, {5, 5, 12, 18}, 0, 0},
      {"tails k31 n17", 23, 31, 17, 3, {7, 16, 23}, 0, 0},
      {"large m", 70, 40, 33, 2, {33, 70}, 0, 0},
      {"rows past the last end are 0", 12, 16, 16, 3, {2, 2, 9}, 0, 0},
      /* offsets eager accepts although no sort makes them */
      {"decreasing", 10, 16, 20, 3, {6, 3, 9}, 0, 0},
      {"negative end", 10, 8, 16, 3, {4, -2, 10}, 0, 0},
      {"past S", 5, 8, 16, 2, {3, 40}, 0, 0},
      {"all empty", 4, 8, 16, 2, {0, 0}, 0, 0},
      {"no rows", 0, 8, 16, 2, {0, 0}, 0, 0},
      {"six experts", 30, 24, 24, 6, {4, 4, 11, 20, 20, 29}, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int t = 0; t < 2; ++t) {
      grouped_case_t c = cases[i];
      c.transposed = t;
      c.i32 = (int)(i % 2);
      grouped_test_run(&c, pool, where);
    }
}

static void grouped_test_shape_rule(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[2] = {9, 8}, ws[3] = {4, 8, 16}, wts[3] = {4, 16, 8}, os[1] = {4}, o3[1] = {3};
  int32_t x, w, wt, offs, offs3, offs_f, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "w", KILN_F32, 3, ws, &w));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "wt", KILN_F32, 3, wts, &wt));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "offs", KILN_I32, 1, os, &offs));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "offs3", KILN_I64, 1, o3, &offs3));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "offs_f", KILN_F32, 1, os, &offs_f));
  int64_t plain = 0, transposed = 1, bad = 2;
  int32_t in[3] = {x, w, offs}, in_t[3] = {x, wt, offs};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in, 3, &plain, 1, NULL, 0, "gm", &y));
  KILN_EXPECT(g->values[y].rank == 2 && g->values[y].shape[0] == 9 && g->values[y].shape[1] == 16,
              "grouped_mm shape");
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in_t, 3, &transposed, 1, NULL, 0, "gmt", &y));
  KILN_EXPECT(g->values[y].shape[1] == 16, "grouped_mm transposed shape");
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in_t, 3, &plain, 1, NULL, 0, "k", &y),
                    KILN_INVALID_ARGUMENT); /* K 16 against x's 8 */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in, 3, &bad, 1, NULL, 0, "flag", &y),
                    KILN_INVALID_ARGUMENT);
  int32_t in3[3] = {x, w, offs3}, in_f[3] = {x, w, offs_f}, in_r[3] = {w, w, offs};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in3, 3, &plain, 1, NULL, 0, "e", &y),
                    KILN_INVALID_ARGUMENT); /* 3 offsets for 4 experts */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in_f, 3, &plain, 1, NULL, 0, "f", &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GROUPED_MM, in_r, 3, &plain, 1, NULL, 0, "r", &y),
                    KILN_INVALID_ARGUMENT);
  /* A file using it is stamped 2.8 and reads back with the node's flag. */
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
  if (bytes) {
    KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) ==
                    KILN_FORMAT_MINOR_GROUPED_MM, "a file with grouped_mm is version 2.8");
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h));
    int found = 0;
    for (int32_t i = 0; h && i < h->n_nodes; ++i)
      found += h->nodes[i].op == KILN_OP_GROUPED_MM &&
               h->nodes[i].params[KILN_P(GROUPED_MM, W_TRANSPOSED)] == 1;
    KILN_EXPECT(found == 1, "grouped_mm read back with its flag (%d)", found);
    kiln_graph_release(h);
    free(bytes);
  }
  kiln_graph_release(g);
}

void kiln_test_suite_gemm_grouped(void) {
  kiln_test_each_isa_and_pool(grouped_test_level);
  grouped_test_shape_rule();
}
