/* Row reductions shared by softmax and the norms: sums and maxima over a
 * contiguous float row with KILN_NN_LANES independent accumulators.
 *
 * GCC will not vectorise a plain float sum or max loop in ISO C mode (it
 * may not reassociate), but it does vectorise a fixed-width loop over an
 * array of lane accumulators; 16 lanes fill two AVX2 registers (one AVX-512
 * register), hide the add latency, and sum in a fixed order, so results do
 * not depend on the thread split.
 */
#ifndef KILN_NN_ROW_H
#define KILN_NN_ROW_H

#include <math.h>
#include <stddef.h>

enum { KILN_NN_LANES = 16 };

static inline float kiln_nn_lanes_sum(const float* acc) {
  float s8[8];
  for (int j = 0; j < 8; ++j) s8[j] = acc[j] + acc[j + 8];
  float s4[4];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* Max of x[0, n); -inf for n == 0. NaN is ignored here: callers see it
 * again when they subtract the max, and it then spreads as torch's does. */
static inline float kiln_nn_row_max(size_t n, const float* x) {
  float acc[KILN_NN_LANES];
  for (int j = 0; j < KILN_NN_LANES; ++j) acc[j] = -INFINITY;
  size_t i = 0;
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
    /* Fully unrolled, GCC 12 leaves these 16 selects scalar (SLP misses
     * them); kept as a loop the vectoriser turns them into vmaxps. */
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  }
  float m = -INFINITY;
  for (int j = 0; j < KILN_NN_LANES; ++j) m = acc[j] > m ? acc[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

static inline float kiln_nn_row_sum(size_t n, const float* x) {
  float acc[KILN_NN_LANES] = {0};
  size_t i = 0;
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) acc[j] += x[i + j];
  }
  for (size_t j = 0; i < n; ++i, ++j) acc[j] += x[i];
  return kiln_nn_lanes_sum(acc);
}

/* Sum of x^2. If next is set (the row the caller reads after this one),
 * its lines are prefetched along the way, one per chunk: a pass over a row
 * already in cache is the time to fetch the next, and the jump from row to
 * row outruns the hardware prefetcher. */
static inline float kiln_nn_row_sum_sq(size_t n, const float* x, const float* next) {
  float acc[KILN_NN_LANES] = {0};
  size_t i = 0;
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
    if (next) __builtin_prefetch(next + i);
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) acc[j] += x[i + j] * x[i + j];
  }
  for (size_t j = 0; i < n; ++i, ++j) acc[j] += x[i] * x[i];
  return kiln_nn_lanes_sum(acc);
}

/* Sums of (x - c) and of (x - c)^2 in one pass (prefetching next as
 * kiln_nn_row_sum_sq does): the corrected two-pass moments. */
static inline void kiln_nn_row_dev_moments(size_t n, const float* x, float c, const float* next,
                                           float* out_s1, float* out_s2) {
  float a1[KILN_NN_LANES] = {0}, a2[KILN_NN_LANES] = {0};
  size_t i = 0;
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
    if (next) __builtin_prefetch(next + i);
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) {
      float d = x[i + j] - c;
      a1[j] += d;
      a2[j] += d * d;
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    float d = x[i] - c;
    a1[j] += d;
    a2[j] += d * d;
  }
  *out_s1 = kiln_nn_lanes_sum(a1);
  *out_s2 = kiln_nn_lanes_sum(a2);
}

#endif /* KILN_NN_ROW_H */
