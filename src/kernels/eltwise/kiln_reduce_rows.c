/* The float reductions' row loops, compiled once per ISA of the eltwise
 * family's list (kiln_reduce_rows_variants.h) so that GCC vectorises them
 * at the width of the flags: rows summed in double lanes, rows' extremes,
 * and the column sweep of a leading reduction. kiln_reduce.c splits the
 * work and picks the running level's. Each output is reduced in the same
 * order at every level. */
#include <math.h>
#include <string.h>

#include "kernels/eltwise/kiln_reduce_rows_variants.h"

/* Reduced axes all before kept axes: (n_red, n_out) rows, ld floats apart,
 * accumulate into out row by row (vectorisable; torch also sums these in
 * float). Columns are independent: tasks take column ranges. */
static void kiln_reduce_leading(kiln_reduce_t op, int64_t n_red, int64_t n_out, int64_t ld,
                                const float* x, float* out) {
  memcpy(out, x, (size_t)n_out * sizeof(float));
  int64_t r = 1;
  if (op == KILN_REDUCE_SUM || op == KILN_REDUCE_MEAN) {
    /* Sums start from +0.0, as torch's: a column of -0.0 sums to +0.0
     * (-0 + +0 is +0), which atan2 or 1/x downstream can tell apart. */
    for (int64_t j = 0; j < n_out; ++j) out[j] += 0.0f;
    /* Four rows per sweep: a quarter of the loads and stores of out (the
     * sweep over out was the cost, not the rows' bytes). */
    for (; r + 4 <= n_red; r += 4) {
      const float *a = x + r * ld, *b = a + ld, *c = b + ld, *d = c + ld;
      for (int64_t j = 0; j < n_out; ++j) out[j] += (a[j] + b[j]) + (c[j] + d[j]);
    }
  }
  for (; r < n_red; ++r) {
    const float* row = x + r * ld;
    switch (op) {
      case KILN_REDUCE_SUM:
      case KILN_REDUCE_MEAN:
        for (int64_t j = 0; j < n_out; ++j) out[j] += row[j];
        break;
      case KILN_REDUCE_MAX:
        for (int64_t j = 0; j < n_out; ++j)
          out[j] = (row[j] != row[j] || row[j] > out[j]) && out[j] == out[j] ? row[j] : out[j];
        break;
      case KILN_REDUCE_MIN:
        for (int64_t j = 0; j < n_out; ++j)
          out[j] = (row[j] != row[j] || row[j] < out[j]) && out[j] == out[j] ? row[j] : out[j];
        break;
      default:
        break;
    }
  }
  if (op == KILN_REDUCE_MEAN)
    for (int64_t j = 0; j < n_out; ++j) out[j] /= (float)n_red;
}

/* Row sums (or means) in double, as the reference (kiln_reduce.c), but in
 * KILN_REDUCE_LANES independent accumulators: one double add chain per row
 * costs its latency (4 cycles) per element and is what made layer norm's
 * statistics and its backward's row sums slow; independent lanes pipeline
 * (four chains of eight doubles at AVX-512, eight of four at AVX2; 8
 * lanes, built for SSE2, summed 1024 rows of 768 at a third of eager's
 * speed). Every ISA level sums in the same lanes and adds them up in the
 * same tree, so the results are the same bits on every CPU; they differ
 * from the serial sum only in double rounding, far below float's. */
enum { KILN_REDUCE_LANES = 32 };

#if defined(__AVX512F__)
#include <immintrin.h>

/* Lane j of the 32 is element j of each run of 32: a0 holds lanes 0-7,
 * a1 8-15, a2 16-23, a3 24-31. */
static inline void kiln_reduce_sum_step(__m512 lo, __m512 hi, __m512d* a0, __m512d* a1,
                                        __m512d* a2, __m512d* a3) {
  *a0 = _mm512_add_pd(*a0, _mm512_cvtps_pd(_mm512_castps512_ps256(lo)));
  *a1 = _mm512_add_pd(*a1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(lo, 1)));
  *a2 = _mm512_add_pd(*a2, _mm512_cvtps_pd(_mm512_castps512_ps256(hi)));
  *a3 = _mm512_add_pd(*a3, _mm512_cvtps_pd(_mm512_extractf32x8_ps(hi, 1)));
}

static double kiln_reduce_sum_row(size_t cols, const float* row) {
  __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + KILN_REDUCE_LANES <= cols; i += KILN_REDUCE_LANES)
    kiln_reduce_sum_step(_mm512_loadu_ps(row + i), _mm512_loadu_ps(row + i + 16), &a0, &a1, &a2,
                         &a3);
  if (i < cols) { /* masked loads: the missing lanes add +0 */
    const unsigned left = (unsigned)(cols - i);
    const __mmask16 m0 = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    const __mmask16 m1 = left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : (__mmask16)0;
    kiln_reduce_sum_step(_mm512_maskz_loadu_ps(m0, row + i), _mm512_maskz_loadu_ps(m1, row + i + 16),
                         &a0, &a1, &a2, &a3);
  }
  /* The tree of the portable loop: lanes j += j + 16, + 8, + 4, + 2, + 1. */
  a0 = _mm512_add_pd(_mm512_add_pd(a0, a2), _mm512_add_pd(a1, a3));
  __m256d q = _mm256_add_pd(_mm512_castpd512_pd256(a0), _mm512_extractf64x4_pd(a0, 1));
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
#elif defined(__AVX2__)
#include <immintrin.h>

/* Lane j of the 32 is element j of each run of 32: a[k] holds lanes 4k to
 * 4k + 3. */
static inline void kiln_reduce_sum_step8(__m256 v, __m256d* lo, __m256d* hi) {
  *lo = _mm256_add_pd(*lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
  *hi = _mm256_add_pd(*hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

static double kiln_reduce_sum_row(size_t cols, const float* row) {
  __m256d a[8];
  for (int k = 0; k < 8; ++k) a[k] = _mm256_setzero_pd();
  size_t i = 0;
  for (; i + KILN_REDUCE_LANES <= cols; i += KILN_REDUCE_LANES)
    for (int k = 0; k < 4; ++k)
      kiln_reduce_sum_step8(_mm256_loadu_ps(row + i + 8 * k), &a[2 * k], &a[2 * k + 1]);
  if (i < cols) { /* masked loads: the missing lanes add +0 */
    const int left = (int)(cols - i);
    for (int k = 0; k < 4; ++k) {
      const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left - 8 * k), idx);
      kiln_reduce_sum_step8(_mm256_maskload_ps(row + i + 8 * k, m), &a[2 * k], &a[2 * k + 1]);
    }
  }
  /* The tree of the portable loop: lanes j += j + 16, + 8, + 4, + 2, + 1. */
  for (int k = 0; k < 4; ++k) a[k] = _mm256_add_pd(a[k], a[k + 4]);
  for (int k = 0; k < 2; ++k) a[k] = _mm256_add_pd(a[k], a[k + 2]);
  __m256d q = _mm256_add_pd(a[0], a[1]);
  __m128d h = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
#else
static double kiln_reduce_sum_row(size_t cols, const float* row) {
  double acc[KILN_REDUCE_LANES] = {0};
  size_t i = 0;
  for (; i + KILN_REDUCE_LANES <= cols; i += KILN_REDUCE_LANES)
    for (int j = 0; j < KILN_REDUCE_LANES; ++j) acc[j] += row[i + j];
  for (int j = 0; i < cols; ++i, ++j) acc[j] += row[i];
  /* The lanes halved pairwise, a tree (the order the vector levels keep). */
  for (int w = KILN_REDUCE_LANES / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  return acc[0];
}
#endif

static void kiln_reduce_sum_rows(size_t rows, size_t cols, int mean, const float* x, float* out) {
  for (size_t r = 0; r < rows; ++r) {
    double a = kiln_reduce_sum_row(cols, x + r * cols);
    out[r] = (float)(mean ? a / (double)cols : a);
  }
}

/* Row maxima (max 1) or minima of float rows, NaN if the row holds one (as
 * torch's amax / amin): 16 lanes of running extremes and of sums, in loops
 * the vectoriser turns into vmaxps and vaddps (kiln_nn_row.h's pattern),
 * where one serial chain through the generic loop's double steps took
 * 2.3 ms for 1024 rows of 768 (2 threads). A NaN makes the sum NaN; so do
 * infinities of both signs, so a NaN sum sends the row to the exact scalar
 * check. The extreme does not depend on the order; only which of +0 and
 * -0 a row of both gives may (as in torch's vectorised loop). */
enum { KILN_REDUCE_MM_LANES = 16 };

static float kiln_reduce_minmax_row(int max, int64_t cols, const float* row) {
  float m[KILN_REDUCE_MM_LANES], sum[KILN_REDUCE_MM_LANES];
  for (int j = 0; j < KILN_REDUCE_MM_LANES; ++j) m[j] = max ? -INFINITY : INFINITY, sum[j] = 0.0f;
  int64_t i = 0;
  if (max)
    for (; i + KILN_REDUCE_MM_LANES <= cols; i += KILN_REDUCE_MM_LANES) {
#pragma GCC unroll 1
      for (int j = 0; j < KILN_REDUCE_MM_LANES; ++j) {
        m[j] = row[i + j] > m[j] ? row[i + j] : m[j];
        sum[j] += row[i + j];
      }
    }
  else
    for (; i + KILN_REDUCE_MM_LANES <= cols; i += KILN_REDUCE_MM_LANES) {
#pragma GCC unroll 1
      for (int j = 0; j < KILN_REDUCE_MM_LANES; ++j) {
        m[j] = row[i + j] < m[j] ? row[i + j] : m[j];
        sum[j] += row[i + j];
      }
    }
  float e = m[0], t = 0.0f;
  for (int j = 0; j < KILN_REDUCE_MM_LANES; ++j) {
    e = (max ? m[j] > e : m[j] < e) ? m[j] : e;
    t += sum[j];
  }
  for (; i < cols; ++i) {
    e = (max ? row[i] > e : row[i] < e) ? row[i] : e;
    t += row[i];
  }
  if (t != t)
    for (i = 0; i < cols; ++i)
      if (row[i] != row[i]) return NAN;
  return e;
}

static void kiln_reduce_minmax_rows(int max, int64_t rows, int64_t cols, const float* x,
                                    float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = kiln_reduce_minmax_row(max, cols, x + r * cols);
}

const kiln_reduce_rows_kernels_t KILN_ISA_VARIANT(kiln_reduce_rows_kernels) = {
    kiln_reduce_sum_rows, kiln_reduce_minmax_rows, kiln_reduce_leading};
