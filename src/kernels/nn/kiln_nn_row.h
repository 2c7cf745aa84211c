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
#if defined(__AVX2__)
#include <immintrin.h>
#endif

enum { KILN_NN_LANES = 16 };

/* The lanes' sum in a fixed tree: s8 = acc[j] + acc[j + 8], s4 = s8[j] +
 * s8[j + 4], then (s4[0] + s4[2]) + (s4[1] + s4[3]). The x86 builds add
 * the halves of the vectors in that order (the same bits): GCC turns the C
 * into 16 extracts and scalar adds per call, which in attention's softmax
 * (a row of 64 keys per call) cost as much as the exponentials. */
static inline float kiln_nn_lanes_sum(const float* acc) {
#if defined(__AVX512F__)
  __m512 v = _mm512_loadu_ps(acc);
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v),
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
#elif defined(__AVX2__)
  __m256 s8 = _mm256_add_ps(_mm256_loadu_ps(acc), _mm256_loadu_ps(acc + 8));
#endif
#if defined(__AVX2__)
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4)); /* s4[0] + s4[2], s4[1] + s4[3] */
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
#else
  float s8[8];
  for (int j = 0; j < 8; ++j) s8[j] = acc[j] + acc[j + 8];
  float s4[4];
  for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
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
  /* The lanes hold no NaN, so any order gives the same max (up to the sign
   * of a zero, which no caller sees: x - 0 is x either way). */
#if defined(__AVX512F__)
  float m = _mm512_reduce_max_ps(_mm512_loadu_ps(acc));
#else
  float m = -INFINITY;
  for (int j = 0; j < KILN_NN_LANES; ++j) m = acc[j] > m ? acc[j] : m;
#endif
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
