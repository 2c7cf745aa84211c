/* Tests of the triangular solve (SOLVE_TRIANGULAR: gated delta-rule
 * attention's prefill, torch.linalg.solve_triangular): the pooled kernel
 * against its one-column reference (the same sums in the same order: equal
 * bits), at every ISA level and pool, for lower and upper, unit and not,
 * one column to several column blocks; the triangle not named (and a unit
 * diagonal) hold NaN, which must never be read; the answer must solve the
 * system (residual |A X - B| in double within 1e-5 of B's scale, A well
 * conditioned: off-diagonal in [-0.5, 0.5] over n <= 70 rows, diagonal
 * in [1.5, 2.5]); a guard past x stays untouched. Then the shape rule and
 * a 2.20 file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_alloc.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "ir/kiln_graph.h"
#include "kernels/gemm/kiln_solve_triangular.h"
#include "kiln_test.h"

typedef struct {
  int64_t batch, n, k;
  int upper, unit;
} trsm_case_t;

static void trsm_test_run(const trsm_case_t* c, kiln_pool_t* pool, const char* where) {
  const size_t na = (size_t)(c->batch * c->n * c->n), nb = (size_t)(c->batch * c->n * c->k);
  float* a = malloc(na * sizeof(float));
  float* b = malloc(nb * sizeof(float));
  float* got = malloc((nb + 1) * sizeof(float));
  float* want = malloc((nb + 1) * sizeof(float));
  if (!a || !b || !got || !want) goto done;
  kiln_test_fill_f32(a, na, 21, -0.5f, 0.5f);
  kiln_test_fill_f32(b, nb, 22, -1.0f, 1.0f);
  for (int64_t p = 0; p < c->batch; ++p)
    for (int64_t i = 0; i < c->n; ++i)
      for (int64_t j = 0; j < c->n; ++j) {
        float* e = a + (p * c->n + i) * c->n + j;
        if (i == j) *e = c->unit ? NAN : 2.0f + *e * 2.0f * 0.5f;
        else if ((j > i) != c->upper) *e = NAN; /* the other triangle */
      }
  got[nb] = want[nb] = 12345.0f;
  kiln_solve_triangular_f32_args_t args = {c->batch, c->n, c->k, c->upper, c->unit, a, b, got};
  kiln_solve_triangular_f32(&args, pool);
  args.x = want;
  kiln_solve_triangular_f32_reference(&args);
  KILN_EXPECT(memcmp(got, want, nb * sizeof(float)) == 0 && got[nb] == 12345.0f,
              "%s: solve_triangular %lldx%lldx%lld upper %d unit %d: the kernel's bits are its "
              "reference's, the guard untouched", where, (long long)c->batch, (long long)c->n,
              (long long)c->k, c->upper, c->unit);
  double worst = 0;
  for (int64_t p = 0; p < c->batch; ++p)
    for (int64_t i = 0; i < c->n; ++i)
      for (int64_t col = 0; col < c->k; ++col) {
        double s = 0;
        for (int64_t j = 0; j < c->n; ++j) {
          if ((j > i) != c->upper && j != i) continue;
          double aij = j == i && c->unit ? 1.0 : a[(p * c->n + i) * c->n + j];
          s += aij * got[(p * c->n + j) * c->k + col];
        }
        double r = fabs(s - b[(p * c->n + i) * c->k + col]);
        worst = r > worst || r != r ? r : worst;
      }
  KILN_EXPECT(worst <= 1e-5, "%s: solve_triangular %lldx%lldx%lld upper %d unit %d: residual %g",
              where, (long long)c->batch, (long long)c->n, (long long)c->k, c->upper, c->unit, worst);
done:
  free(a), free(b), free(got), free(want);
}

static void trsm_test_level(kiln_pool_t* pool, const char* where) {
  static const trsm_case_t shapes[] = {{1, 1, 1, 0, 0}, {3, 5, 3, 0, 0}, {2, 64, 64, 0, 0},
                                       {1, 17, 130, 0, 0}, {4, 70, 9, 0, 0}, {2, 3, 1, 0, 0}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int f = 0; f < 4; ++f) {
      trsm_case_t c = shapes[i];
      c.upper = f & 1;
      c.unit = f >> 1;
      trsm_test_run(&c, pool, where);
    }
}

static void trsm_test_shape_rule(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t as[3] = {2, 6, 6}, bs[3] = {2, 6, 4}, b5[3] = {2, 5, 4}, ob[3] = {3, 6, 4}, rect[3] = {2, 6, 5},
          b2[2] = {6, 4};
  int32_t a, b, bad_rows, other_batch, nonsquare, low_rank, ai, y = -1;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 3, as, &a));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "b", KILN_F32, 3, bs, &b));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "b5", KILN_F32, 3, b5, &bad_rows));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "ob", KILN_F32, 3, ob, &other_batch));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "rect", KILN_F32, 3, rect, &nonsquare));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "b2", KILN_F32, 2, b2, &low_rank));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "ai", KILN_I64, 3, as, &ai));
  int64_t lower_unit[2] = {0, 1}, upper[2] = {1, 0}, bad_flag[2] = {2, 0};
  int32_t in[2] = {a, b};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SOLVE_TRIANGULAR, in, 2, upper, 2, NULL, 0, "u", &y));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SOLVE_TRIANGULAR, in, 2, lower_unit, 2, NULL, 0, "l", &y));
  KILN_EXPECT(y >= 0 && g->values[y].rank == 3 && g->values[y].shape[1] == 6 && g->values[y].shape[2] == 4,
              "solve_triangular's x has b's shape");
  const int32_t bad[][2] = {{a, bad_rows}, {a, other_batch}, {nonsquare, b}, {a, low_rank}, {ai, b}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    int32_t z;
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SOLVE_TRIANGULAR, bad[i], 2, upper, 2, NULL, 0, "bad", &z),
                      KILN_INVALID_ARGUMENT);
  }
  int32_t z;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_SOLVE_TRIANGULAR, in, 2, bad_flag, 2, NULL, 0, "flag", &z),
                    KILN_INVALID_ARGUMENT);
  /* A file using it says 2.20 and reads back with the node's flags. */
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
  if (bytes) {
    KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) == KILN_FORMAT_MINOR_SOLVE_TRIANGULAR,
                "a file with solve_triangular is version 2.20");
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h));
    int found = 0;
    for (int32_t i = 0; h && i < h->n_nodes; ++i)
      found += h->nodes[i].op == KILN_OP_SOLVE_TRIANGULAR &&
               h->nodes[i].params[KILN_P(SOLVE_TRIANGULAR, UPPER)] == 0 &&
               h->nodes[i].params[KILN_P(SOLVE_TRIANGULAR, UNIT)] == 1;
    KILN_EXPECT(found == 1, "solve_triangular read back with its flags (%d)", found);
    kiln_graph_release(h);
    free(bytes);
  }
  kiln_graph_release(g);
}

void kiln_test_suite_solve_triangular(void) {
  kiln_test_each_isa_and_pool(trsm_test_level);
  trsm_test_shape_rule();
}
