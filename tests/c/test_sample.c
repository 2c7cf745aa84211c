/* Tests of the GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG kernels and shape
 * rules, and of AVG_POOL2D's divisor_override. The kernels are scalar (no optimized variant to compare with), so
 * they are checked against values worked out by hand and against
 * straightforward references written here, on 1- and 2-thread pools;
 * bit-for-bit agreement with eager is tested in Python
 * (tests/python/test_ops_sample.py). Bad runtime indices must come back as
 * a status, and the shape rules must refuse hostile params. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_pool.h"
#include "ir/kiln_graph.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_backward.h"
#include "kernels/nn/kiln_sample.h"
#include "kiln_test.h"

/* ---- GRID_SAMPLER_2D ---------------------------------------------------------- */

static void grid_test_level(kiln_pool_t* pool, const char* where) {
  /* x: one 2x3 plane 1..6 and a second plane of its negatives. */
  const float x[12] = {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6};
  /* With align_corners, (-1, -1) is pixel (0, 0) and (1, 1) is (2, 1);
   * (0, 0) is the centre (1, 0.5): the mean of pixels 2, 5 (and 2, 5). */
  const float grid[5 * 2] = {-1, -1, 1, 1, 0, 0, 3, 0, NAN, 0};
  float y[2 * 5 + 1];
  y[10] = 12345.0f; /* guard */
  kiln_grid_sample_2d_f32(KILN_GRID_BILINEAR, KILN_GRID_ZEROS, 1, 1, 2, 2, 3, 1, 5, x, grid, y,
                          pool);
  KILN_EXPECT(y[0] == 1.0f && y[1] == 6.0f && y[2] == 3.5f, "%s bilinear corners %g %g %g", where,
              y[0], y[1], y[2]);
  /* x = 3 is pixel column 4, outside: every corner reads 0. */
  KILN_EXPECT(y[3] == 0.0f, "%s zeros padding %g", where, y[3]);
  /* A NaN coordinate gives NaN weights: NaN, as eager. */
  KILN_EXPECT(isnan(y[4]) && y[5] == -1.0f && y[7] == -3.5f, "%s NaN / second plane", where);
  KILN_EXPECT(y[10] == 12345.0f, "%s wrote past the end", where);
  /* Border: x = 3 clamps to the last column (row 0.5: mean of 3 and 6);
   * NaN clamps to 0 (pixel column 0, mean of 1 and 4). */
  kiln_grid_sample_2d_f32(KILN_GRID_BILINEAR, KILN_GRID_BORDER, 1, 1, 2, 2, 3, 1, 5, x, grid, y,
                          pool);
  KILN_EXPECT(y[3] == 4.5f && y[4] == 2.5f, "%s border %g %g", where, y[3], y[4]);
  /* Reflection with align_corners: x = 3 is column 4, reflected about 2 to
   * column 0 (mean of 1 and 4). */
  kiln_grid_sample_2d_f32(KILN_GRID_BILINEAR, KILN_GRID_REFLECTION, 1, 1, 2, 2, 3, 1, 5, x, grid,
                          y, pool);
  KILN_EXPECT(y[3] == 2.5f, "%s reflection %g", where, y[3]);
  /* Nearest without align_corners: (-1, -1) is the outer corner, pixel
   * coordinate (-0.5, -0.5), which rounds (half to even) to (0, 0)... of
   * -0.0: in bounds. (0, 0) is (1, 0.5) -> row 0 (half to even), column 1. */
  kiln_grid_sample_2d_f32(KILN_GRID_NEAREST, KILN_GRID_ZEROS, 0, 1, 2, 2, 3, 1, 5, x, grid, y,
                          pool);
  KILN_EXPECT(y[0] == 1.0f && y[2] == 2.0f && y[3] == 0.0f && y[4] == 0.0f,
              "%s nearest %g %g %g %g", where, y[0], y[2], y[3], y[4]);
  /* A 1x1 image with align_corners: everything samples the single pixel
   * under border and reflection. */
  const float one = 7.0f, g1[4] = {0.3f, -0.9f, 1e30f, -1e30f};
  float y1[2];
  kiln_grid_sample_2d_f32(KILN_GRID_BILINEAR, KILN_GRID_REFLECTION, 1, 1, 1, 1, 1, 1, 2, &one, g1,
                          y1, pool);
  KILN_EXPECT(y1[0] == 7.0f && y1[1] == 7.0f, "%s 1x1 reflection %g %g", where, y1[0], y1[1]);
}

/* ---- COL2IM ------------------------------------------------------------------- */

/* The gather form: each output pixel sums the columns that cover it. */
static void col2im_reference(const kiln_col2im_args_t* a, const float* x, float* y) {
  const int64_t kk = a->kh * a->kw, cols = a->lh * a->lw;
  for (int64_t b = 0; b < a->n; ++b)
    for (int64_t c = 0; c < a->c; ++c)
      for (int64_t h = 0; h < a->h; ++h)
        for (int64_t w = 0; w < a->w; ++w) {
          float s = 0.0f;
          for (int64_t i = 0; i < a->kh; ++i)
            for (int64_t j = 0; j < a->kw; ++j) {
              int64_t th = h + a->ph - i * a->dh, tw = w + a->pw - j * a->dw;
              if (th < 0 || tw < 0 || th % a->sh || tw % a->sw) continue;
              int64_t hc = th / a->sh, wc = tw / a->sw;
              if (hc >= a->lh || wc >= a->lw) continue;
              s += x[((b * a->c + c) * kk + i * a->kw + j) * cols + hc * a->lw + wc];
            }
          y[((b * a->c + c) * a->h + h) * a->w + w] = s;
        }
}

static void col2im_test_level(kiln_pool_t* pool, const char* where) {
  const kiln_col2im_args_t cases[] = {
      /* n c  h  w  kh kw dh dw ph pw sh sw lh lw */
      {2, 3, 5, 6, 2, 3, 1, 1, 0, 0, 1, 1, 4, 4},
      {1, 2, 7, 5, 3, 2, 2, 1, 1, 0, 2, 3, 3, 2},
      {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},
      {3, 1, 4, 4, 2, 2, 1, 1, 1, 1, 2, 2, 3, 3},
  };
  for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); ++t) {
    const kiln_col2im_args_t* a = &cases[t];
    size_t xn = (size_t)(a->n * a->c * a->kh * a->kw * a->lh * a->lw);
    size_t yn = (size_t)(a->n * a->c * a->h * a->w);
    float* x = malloc(xn * sizeof(float));
    float* got = malloc((yn + 1) * sizeof(float));
    float* want = malloc(yn * sizeof(float));
    if (!x || !got || !want) {
      KILN_EXPECT(0, "out of memory");
      free(x), free(got), free(want);
      return;
    }
    /* Small integers: every order of summation is exact. */
    for (size_t i = 0; i < xn; ++i) x[i] = (float)((int)(i * 7 % 13) - 6);
    got[yn] = 12345.0f;
    kiln_col2im_f32(a, x, got, pool);
    col2im_reference(a, x, want);
    KILN_EXPECT(kiln_test_compare_f32(where, got, want, yn, 0.0f, 0.0f) == 0, "%s col2im case %zu",
                where, t);
    KILN_EXPECT(got[yn] == 12345.0f, "%s col2im case %zu wrote past the end", where, t);
    /* An Inf and a NaN reach exactly the pixels they cover (an identity
     * GEMM would spread NaN = Inf * 0 everywhere). */
    x[0] = INFINITY;
    x[xn - 1] = NAN;
    kiln_col2im_f32(a, x, got, pool);
    col2im_reference(a, x, want);
    KILN_EXPECT(kiln_test_compare_f32(where, got, want, yn, 0.0f, 0.0f) == 0,
                "%s col2im case %zu with Inf/NaN", where, t);
    free(x), free(got), free(want);
  }
}

/* ---- EMBEDDING_BAG ------------------------------------------------------------ */

static void embedding_bag_test(void) {
  /* 4 rows of dim 2: row r = (r, -r), except row 2 = (NaN, 5). */
  const float w[8] = {0, 0, 1, -1, NAN, 5, 3, -3};
  const int64_t idx[6] = {1, 3, 2, 3, 0, 1};
  const int32_t off32[3] = {0, 2, 2}; /* bags [0,2), [2,2), [2,6) */
  const float psw[6] = {2, 1, 1, 1, 1, 0.5f};
  float y[3 * 2 + 1];
  y[6] = 12345.0f;
  KILN_EXPECT_OK(kiln_embedding_bag_f32(0, 0, -1, 4, 2, w, KILN_I64, 6, idx, KILN_I32, 3, off32,
                                        NULL, y));
  KILN_EXPECT(y[0] == 4 && y[1] == -4 && y[2] == 0 && y[3] == 0 && isnan(y[4]) && y[5] == 1,
              "sum %g %g %g %g %g %g", y[0], y[1], y[2], y[3], y[4], y[5]);
  KILN_EXPECT(y[6] == 12345.0f, "embedding_bag wrote past the end");
  KILN_EXPECT_OK(kiln_embedding_bag_f32(0, 0, -1, 4, 2, w, KILN_I64, 6, idx, KILN_I32, 3, off32,
                                        psw, y));
  KILN_EXPECT(y[0] == 5 && y[1] == -5 && y[5] == 1.5f, "weighted sum %g %g %g", y[0], y[1], y[5]);
  /* mean with padding_idx 2: the last bag averages rows 3, 0, 1. */
  KILN_EXPECT_OK(kiln_embedding_bag_f32(1, 0, 2, 4, 2, w, KILN_I64, 6, idx, KILN_I32, 3, off32,
                                        NULL, y));
  KILN_EXPECT(y[0] == 2 && y[4] == 4.0f / 3 && y[5] == -4.0f / 3, "mean %g %g %g", y[0], y[4],
              y[5]);
  /* max: the NaN of row 2 comes first in the last bag and stays (eager's
   * rule: a later value replaces it only when greater, which NaN never is). */
  KILN_EXPECT_OK(kiln_embedding_bag_f32(2, 0, -1, 4, 2, w, KILN_I64, 6, idx, KILN_I32, 3, off32,
                                        NULL, y));
  KILN_EXPECT(y[0] == 3 && y[1] == -1 && isnan(y[4]) && y[5] == 5, "max %g %g %g %g", y[0], y[1],
              y[4], y[5]);
  /* include_last_offset: offsets {0, 2, 6} are two bags. */
  const int64_t off_last[3] = {0, 2, 6};
  KILN_EXPECT_OK(kiln_embedding_bag_f32(0, 1, 2, 4, 2, w, KILN_I64, 6, idx, KILN_I64, 3, off_last,
                                        NULL, y));
  KILN_EXPECT(y[0] == 4 && y[2] == 4 && y[3] == -4, "include_last_offset %g %g %g", y[0], y[2],
              y[3]);
  /* Errors, never reads: an index out of range (both signs), offsets not
   * starting at 0, decreasing, past the end, a last offset short of the end. */
  const int64_t idx_bad[2][6] = {{1, 3, 4, 0, 0, 0}, {1, -1, 0, 0, 0, 0}};
  for (int i = 0; i < 2; ++i)
    KILN_EXPECT_ERROR(kiln_embedding_bag_f32(0, 0, -1, 4, 2, w, KILN_I64, 6, idx_bad[i], KILN_I32,
                                             3, off32, NULL, y),
                      KILN_INVALID_ARGUMENT);
  const int64_t off_bad[4][3] = {{1, 2, 3}, {0, 3, 2}, {0, 2, 7}, {0, 2, 5}};
  for (int i = 0; i < 4; ++i)
    KILN_EXPECT_ERROR(kiln_embedding_bag_f32(0, i == 3, -1, 4, 2, w, KILN_I64, 6, idx, KILN_I64, 3,
                                             off_bad[i], NULL, y),
                      KILN_INVALID_ARGUMENT);
}

/* ---- shape rules -------------------------------------------------------------- */

static void sample_test_shape_rules(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[4] = {2, 3, 5, 6}, gs[4] = {2, 4, 7, 2}, gbad[4] = {2, 4, 7, 3};
  int64_t cs[3] = {2, 3 * 6, 16}, ws[2] = {10, 4}, is[1] = {7}, os[1] = {3};
  int32_t x, grid, grid_bad, cols, w, idx, off, idx_f, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "grid", KILN_F32, 4, gs, &grid));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "grid_bad", KILN_F32, 4, gbad, &grid_bad));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "cols", KILN_F32, 3, cs, &cols));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "w", KILN_F32, 2, ws, &w));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "idx", KILN_I64, 1, is, &idx));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "off", KILN_I32, 1, os, &off));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "idx_f", KILN_F32, 1, is, &idx_f));
  /* GRID_SAMPLER_2D */
  int32_t gin[2] = {x, grid}, gin_bad[2] = {x, grid_bad};
  int64_t gp[3] = {1, 2, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GRID_SAMPLER_2D, gin, 2, gp, 3, NULL, 0, "gs", &y));
  KILN_EXPECT(g->values[y].shape[1] == 3 && g->values[y].shape[2] == 4 && g->values[y].shape[3] == 7,
              "grid_sampler shape");
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GRID_SAMPLER_2D, gin_bad, 2, gp, 3, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  int64_t gp_bad[][3] = {{2, 0, 0}, {0, 3, 0}, {0, 0, 2}, {-1, 0, 0}};
  for (size_t i = 0; i < 4; ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_GRID_SAMPLER_2D, gin, 2, gp_bad[i], 3, NULL, 0, "bad", &y),
                      KILN_INVALID_ARGUMENT);
  /* COL2IM: (2, 3*2*3, 16) -> (2, 3, 5, 6) with a 2x3 kernel: 4x4 windows. */
  int64_t cp[10] = {5, 6, 2, 3, 1, 1, 0, 0, 1, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_COL2IM, &cols, 1, cp, 10, NULL, 0, "c2i", &y));
  KILN_EXPECT(g->values[y].shape[1] == 3 && g->values[y].shape[2] == 5 && g->values[y].shape[3] == 6,
              "col2im shape");
  int64_t cp_bad[][10] = {
      {5, 7, 2, 3, 1, 1, 0, 0, 1, 1},                 /* 4x5 windows, not 16 */
      {5, 6, 4, 3, 1, 1, 0, 0, 1, 1},                 /* 18 rows are not a multiple of 12 */
      {5, 6, 2, 3, 1, 1, -1, 0, 1, 1},                /* negative padding */
      {5, 6, 2, 3, 1, 1, 0, 0, 0, 1},                 /* zero stride */
      {(int64_t)1 << 40, 6, 2, 3, 1, 1, 0, 0, 1, 1},  /* huge height */
      {5, 6, 2, 3, (int64_t)1 << 62, 1, 0, 0, 1, 1},  /* huge dilation */
      {5, 6, 2, 3, 1, 1, 0, 0, (int64_t)1 << 62, 1},  /* huge stride */
      {5, 6, 2, 3, 1, 1, INT64_MAX, 0, 1, 1},         /* huge padding */
  };
  for (size_t i = 0; i < sizeof(cp_bad) / sizeof(cp_bad[0]); ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_COL2IM, &cols, 1, cp_bad[i], 10, NULL, 0, "bad", &y),
                      KILN_INVALID_ARGUMENT);
  /* EMBEDDING_BAG */
  int32_t ein[4] = {w, idx, off, idx_f};
  int64_t ep[3] = {0, 1, -1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_EMBEDDING_BAG, ein, 4, ep, 3, NULL, 0, "eb", &y));
  KILN_EXPECT(g->values[y].shape[0] == 2 && g->values[y].shape[1] == 4, "embedding_bag shape");
  int64_t ep_bad[][3] = {{3, 0, -1}, {0, 2, -1}, {0, 0, 10}, {0, 0, -2}, {2, 0, -1}};
  for (size_t i = 0; i < sizeof(ep_bad) / sizeof(ep_bad[0]); ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_EMBEDDING_BAG, ein, 4, ep_bad[i], 3, NULL, 0, "bad", &y),
                      KILN_INVALID_ARGUMENT); /* the last: weights with max */
  int32_t ein_f[3] = {w, idx_f, off}; /* float indices */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_EMBEDDING_BAG, ein_f, 3, ep, 3, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

/* ---- AVG_POOL2D's divisor_override (param 10; AVG_POOL2D_GRAD's 12) ------------- */

static void divisor_override_test_level(kiln_pool_t* pool, const char* where) {
  /* A 3x3 plane of ones, kernel 2, stride 2, padding 1, without
   * count_include_pad: windows hold 1, 2, 2 and 4 ones; the override 3
   * divides every sum by 3 instead of the counts. */
  float x[9], y[4 + 1], dx[9 + 1];
  for (int i = 0; i < 9; ++i) x[i] = 1.0f;
  y[4] = dx[9] = 12345.0f;
  kiln_pool2d_f32_args_t a;
  memset(&a, 0, sizeof(a));
  a.n = a.c = 1, a.h = a.w = 3, a.ho = a.wo = 2, a.kh = a.kw = a.sh = a.sw = 2, a.ph = a.pw = 1;
  a.dh = a.dw = 1, a.divisor_override = 3, a.x = x, a.y = y;
  kiln_avg_pool2d_f32(&a, pool);
  KILN_EXPECT(y[0] == 1.0f / 3 && y[1] == 2.0f / 3 && y[3] == 4.0f / 3 && y[4] == 12345.0f,
              "%s avg_pool2d divisor_override %g %g %g", where, y[0], y[1], y[3]);
  kiln_pool2d_grad_f32_args_t b;
  memset(&b, 0, sizeof(b));
  b.n = b.c = 1, b.h = b.w = 3, b.ho = b.wo = 2, b.kh = b.kw = b.sh = b.sw = 2, b.ph = b.pw = 1;
  b.dh = b.dw = 1, b.divisor_override = 3, b.dy = x, b.dx = dx;
  kiln_avg_pool2d_grad_f32(&b, pool);
  /* Every pixel is in exactly one window: each gets 1/3. */
  int bad = 0;
  for (int i = 0; i < 9; ++i) bad += dx[i] != 1.0f / 3;
  KILN_EXPECT(bad == 0 && dx[9] == 12345.0f, "%s avg_pool2d_grad divisor_override", where);
  /* A negative override divides too, as eager's does. */
  a.divisor_override = -2;
  kiln_avg_pool2d_f32(&a, pool);
  KILN_EXPECT(y[0] == -0.5f && y[1] == -1.0f && y[3] == -2.0f && y[4] == 12345.0f,
              "%s avg_pool2d divisor_override -2: %g %g %g", where, y[0], y[1], y[3]);
  b.divisor_override = -2;
  kiln_avg_pool2d_grad_f32(&b, pool);
  bad = 0;
  for (int i = 0; i < 9; ++i) bad += dx[i] != -0.5f;
  KILN_EXPECT(bad == 0 && dx[9] == 12345.0f, "%s avg_pool2d_grad divisor_override -2", where);
}

static void divisor_override_shape_rules(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t xs[4] = {1, 2, 5, 5};
  int32_t x, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 4, xs, &x));
  int64_t p[11] = {2, 2, 2, 2, 0, 0, 1, 1, 0, 1, 7};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D, &x, 1, p, 11, NULL, 0, "avg", &y));
  p[10] = -1; /* eager divides by a negative override too */
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D, &x, 1, p, 11, NULL, 0, "neg", &y));
  p[10] = INT64_MIN;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D, &x, 1, p, 11, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  p[10] = INT64_MAX;
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D, &x, 1, p, 11, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  p[10] = 3; /* max pooling has no divisor */
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_MAX_POOL2D, &x, 1, p, 11, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  int64_t gp[13] = {2, 2, 2, 2, 0, 0, 1, 1, 0, 1, 4, 4, -((int64_t)1 << 32)};
  int64_t dys[4] = {1, 2, 2, 2};
  int32_t dy;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "dy", KILN_F32, 4, dys, &dy));
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D_GRAD, &dy, 1, gp, 13, NULL, 0, "bad", &y),
                    KILN_INVALID_ARGUMENT);
  gp[12] = 5;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_AVG_POOL2D_GRAD, &dy, 1, gp, 13, NULL, 0, "grad", &y));
  kiln_graph_release(g);
}

static void sample_test_level(kiln_pool_t* pool, const char* where) {
  grid_test_level(pool, where);
  col2im_test_level(pool, where);
  divisor_override_test_level(pool, where);
}

void kiln_test_suite_sample(void) {
  kiln_test_each_isa_and_pool(sample_test_level);
  embedding_bag_test();
  sample_test_shape_rules();
  divisor_override_shape_rules();
}
