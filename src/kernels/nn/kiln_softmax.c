/* Softmax and log-softmax over rows, one ISA variant per build of this file.
 *
 * Three passes over a row that stays in L1/L2 (one row is at most a few
 * tens of KiB in practice): the max, then e^(x - max) and its sum, then the
 * scale (or, for log-softmax, x - max - log(sum)). Subtracting the max keeps
 * e^ in range; a row that is all -inf gets -inf - -inf = NaN everywhere, as
 * torch does, and a NaN anywhere makes the row NaN.
 *
 * The inner loops work on fixed chunks of KILN_NN_LANES elements so that
 * GCC vectorises them whether or not y aliases x.
 */
#include "kernels/nn/kiln_nn_internal.h"
#include "kernels/nn/kiln_nn_math.h"
#include "kernels/nn/kiln_nn_row.h"

/* next (or NULL) is the following row: its cache lines are prefetched
 * during the in-cache passes over this row, so the max pass of the next row
 * does not stall on DRAM (the row-to-row jump defeats the hardware
 * prefetcher's run-ahead). */
static void kiln_nn_softmax_row(size_t n, const float* x, float* y, int log_softmax,
                                const float* next) {
  float m = kiln_nn_row_max(n, x);
  float acc[KILN_NN_LANES] = {0};
  size_t i = 0;
  if (log_softmax) {
    for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
      if (next) __builtin_prefetch(next + i);
      for (int j = 0; j < KILN_NN_LANES; ++j) acc[j] += kiln_nn_expf(x[i + j] - m);
    }
    for (size_t j = 0; i < n; ++i, ++j) acc[j] += kiln_nn_expf(x[i] - m);
    /* (x - m) - log(sum), in torch's order: x - (m + log(sum)) gave -0.0
     * for x = m = -0.0 (a row of one), where torch's x - m is +0.0. */
    float lse = logf(kiln_nn_lanes_sum(acc));
    for (i = 0; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
      float t[KILN_NN_LANES];
#pragma GCC unroll 1
      for (int j = 0; j < KILN_NN_LANES; ++j) t[j] = (x[i + j] - m) - lse;
#pragma GCC unroll 1
      for (int j = 0; j < KILN_NN_LANES; ++j) y[i + j] = t[j];
    }
    for (; i < n; ++i) y[i] = (x[i] - m) - lse;
    return;
  }
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
    if (next) __builtin_prefetch(next + i);
    float e[KILN_NN_LANES];
    for (int j = 0; j < KILN_NN_LANES; ++j) e[j] = kiln_nn_expf(x[i + j] - m);
    /* Unrolled, GCC 12 leaves these adds scalar; as a loop they vectorise. */
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) {
      acc[j] += e[j];
      y[i + j] = e[j];
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    y[i] = kiln_nn_expf(x[i] - m);
    acc[j] += y[i];
  }
  float r = 1.0f / kiln_nn_lanes_sum(acc);
  for (i = 0; i < n; ++i) y[i] *= r;
}

void KILN_ISA_VARIANT(kiln_nn_softmax_rows)(size_t r0, size_t r1, size_t cols, const float* x,
                                            float* y, int log_softmax) {
  for (size_t r = r0; r < r1; ++r)
    kiln_nn_softmax_row(cols, x + r * cols, y + r * cols, log_softmax,
                        r + 1 < r1 ? x + (r + 1) * cols : NULL);
}
