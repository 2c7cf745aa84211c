/* kernels/math's random numbers (kiln_random.h): Philox4x32-10 against
 * Random123's published known answers, every ISA variant and thread count
 * against the scalar reference bit for bit (a counter-based generator: the
 * split must not change a number), ranges that start mid-block, and the
 * moments of both distributions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_op_params.h"
#include "kernels/math/kiln_random.h"
#include "kiln_test.h"

static void kiln_test_random_known_answers(void) {
  /* Random123 tests/kat_vectors, philox4x32 10 rounds. */
  static const uint32_t cases[3][10] = {
      {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
      {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x408f276du,
       0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
      {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0xd16cfe09u,
       0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int c = 0; c < 3; ++c) {
    uint32_t out[4];
    kiln_philox4x32_10(cases[c], cases[c] + 4, out);
    KILN_EXPECT(memcmp(out, cases[c] + 6, sizeof out) == 0,
                "philox4x32-10 known answer %d: %08x %08x %08x %08x", c, out[0], out[1], out[2],
                out[3]);
  }
}

enum { KILN_TEST_RANDOM_N = 100003 }; /* no multiple of a block or of a task */

static void kiln_test_random_level(kiln_pool_t* pool, const char* where) {
  float* got = malloc(KILN_TEST_RANDOM_N * sizeof(float));
  float* want = malloc(KILN_TEST_RANDOM_N * sizeof(float));
  if (!got || !want) {
    KILN_EXPECT(0, "out of memory");
    free(got), free(want);
    return;
  }
  const uint64_t seed = 0x0123456789abcdefull;
  for (int dist = 0; dist < KILN_RANDOM_DIST_COUNT; ++dist) {
    const float a = dist ? 0.5f : -2.0f, b = dist ? 3.0f : 5.0f;
    kiln_random_f32_reference((kiln_random_dist_t)dist, seed, 7, a, b, KILN_TEST_RANDOM_N, want);
    const size_t sizes[] = {1, 3, 5, 67, KILN_TEST_RANDOM_N};
    for (int s = 0; s < 5; ++s) {
      memset(got, 0, KILN_TEST_RANDOM_N * sizeof(float));
      kiln_random_f32((kiln_random_dist_t)dist, seed, 7, a, b, sizes[s], got, pool);
      KILN_EXPECT(memcmp(got, want, sizes[s] * sizeof(float)) == 0,
                  "random dist %d %s n=%zu: not the reference's numbers", dist, where, sizes[s]);
      KILN_EXPECT(sizes[s] == KILN_TEST_RANDOM_N || got[sizes[s]] == 0.0f,
                  "random dist %d %s n=%zu wrote past its end", dist, where, sizes[s]);
    }
    /* Another stream or seed gives other numbers. */
    kiln_random_f32((kiln_random_dist_t)dist, seed, 8, a, b, 64, got, pool);
    KILN_EXPECT(memcmp(got, want, 64 * sizeof(float)) != 0, "random dist %d %s: stream ignored",
                dist, where);
    kiln_random_f32((kiln_random_dist_t)dist, seed ^ (1ull << 40), 7, a, b, 64, got, pool);
    KILN_EXPECT(memcmp(got, want, 64 * sizeof(float)) != 0,
                "random dist %d %s: the seed's high word ignored", dist, where);
  }
  free(got), free(want);
}

/* The moments of 10^6 numbers: uniform on [0, 1) has mean 1/2, variance
 * 1/12, every value in range; normal has mean 0, variance 1, skew 0, kurtosis
 * 3. Bounds are 6 standard errors of each estimate (a false failure about
 * once in 10^9 seeds; the seed is fixed, so the test is deterministic). */
static void kiln_test_random_moments(void) {
  enum { N = 1000000 };
  float* y = malloc(N * sizeof(float));
  if (!y) {
    KILN_EXPECT(0, "out of memory");
    return;
  }
  kiln_random_f32(KILN_RANDOM_UNIFORM, 42, 0, 0.0f, 1.0f, N, y, NULL);
  double m = 0, v = 0;
  int in_range = 1;
  for (int i = 0; i < N; ++i) {
    m += y[i];
    in_range &= y[i] >= 0.0f && y[i] < 1.0f;
  }
  m /= N;
  for (int i = 0; i < N; ++i) v += (y[i] - m) * (y[i] - m);
  v /= N;
  KILN_EXPECT(in_range, "uniform: a value outside [0, 1)");
  KILN_EXPECT(fabs(m - 0.5) < 6 * sqrt(1.0 / 12 / N), "uniform mean %.6f", m);
  KILN_EXPECT(fabs(v - 1.0 / 12) < 6 * sqrt(1.0 / 180 / N), "uniform variance %.6f", v);
  /* Lag-1 correlation of neighbours (words of one block and across blocks). */
  double c = 0;
  for (int i = 1; i < N; ++i) c += (y[i] - 0.5) * (y[i - 1] - 0.5);
  c = c / (N - 1) / (1.0 / 12);
  KILN_EXPECT(fabs(c) < 6 / sqrt((double)N), "uniform lag-1 correlation %.5f", c);

  kiln_random_f32(KILN_RANDOM_NORMAL, 42, 1, 0.0f, 1.0f, N, y, NULL);
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  int finite = 1;
  for (int i = 0; i < N; ++i) {
    double x = y[i];
    finite &= isfinite(y[i]);
    s1 += x, s2 += x * x, s3 += x * x * x, s4 += x * x * x * x;
  }
  s1 /= N, s2 /= N, s3 /= N, s4 /= N;
  KILN_EXPECT(finite, "normal: a value that is not finite");
  KILN_EXPECT(fabs(s1) < 6 / sqrt((double)N), "normal mean %.5f", s1);
  KILN_EXPECT(fabs(s2 - 1) < 6 * sqrt(2.0 / N), "normal variance %.5f", s2);
  KILN_EXPECT(fabs(s3) < 6 * sqrt(15.0 / N), "normal third moment %.5f", s3);
  KILN_EXPECT(fabs(s4 - 3) < 6 * sqrt(96.0 / N), "normal fourth moment %.5f", s4);
  free(y);
}

/* The shape rule refuses what the kernel would misread (params may come
 * from a file): a seed that is not one int64, a distribution or stream out
 * of range, non-finite parameters, a negative standard deviation. */
static void kiln_test_random_shape_rule(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  int64_t two[1] = {2};
  int32_t seed, wide, fseed, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "seed", KILN_I64, 0, NULL, &seed));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "wide", KILN_I64, 1, two, &wide));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "fseed", KILN_F32, 0, NULL, &fseed));
  int64_t p[12] = {0};
  float fp[2] = {0.0f, 1.0f};
  p[KILN_P(RANDOM, RANK)] = 2;
  p[KILN_P(RANDOM, DIMS)] = 3;
  p[KILN_P(RANDOM, DIMS) + 1] = 5;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RANDOM, &seed, 1, p, 12, fp, 2, NULL, &y));
  KILN_EXPECT(g->values[y].dtype == KILN_F32 && g->values[y].rank == 2 && g->values[y].shape[1] == 5,
              "random's output: float32 (3, 5)");
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_RANDOM, &wide, 1, p, 12, fp, 2, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_RANDOM, &fseed, 1, p, 12, fp, 2, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  const int64_t bad[][2] = {{KILN_P(RANDOM, DIST), 2},
                            {KILN_P(RANDOM, DIST), -1},
                            {KILN_P(RANDOM, STREAM), -1},
                            {KILN_P(RANDOM, STREAM), (int64_t)1 << 32},
                            {KILN_P(RANDOM, RANK), 9},
                            {KILN_P(RANDOM, DIMS), -3}};
  for (int i = 0; i < 6; ++i) {
    int64_t q[12];
    memcpy(q, p, sizeof q);
    q[bad[i][0]] = bad[i][1];
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_RANDOM, &seed, 1, q, 12, fp, 2, NULL, &y),
                      KILN_INVALID_ARGUMENT);
  }
  const float bad_f[][2] = {{NAN, 1.0f}, {0.0f, INFINITY}};
  for (int i = 0; i < 2; ++i)
    KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_RANDOM, &seed, 1, p, 12, bad_f[i], 2, NULL, &y),
                      KILN_INVALID_ARGUMENT);
  p[KILN_P(RANDOM, DIST)] = KILN_RANDOM_NORMAL;
  const float negative_std[2] = {0.0f, -1.0f};
  KILN_EXPECT_ERROR(kiln_graph_add_node(g, KILN_OP_RANDOM, &seed, 1, p, 12, negative_std, 2, NULL, &y),
                    KILN_INVALID_ARGUMENT);
  kiln_graph_release(g);
}

void kiln_test_suite_random(void) {
  kiln_test_random_shape_rule();
  kiln_test_random_known_answers();
  kiln_test_each_isa_and_pool(kiln_test_random_level);
  kiln_test_random_moments();
}
