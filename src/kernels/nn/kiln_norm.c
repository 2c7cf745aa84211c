/* LayerNorm and RMSNorm over rows, one ISA variant per build of this file.
 *
 * Statistics are fp32 and two-pass: the mean, then the sum of squared
 * deviations about it, both over a row that the first pass left in cache.
 * Two passes avoid the cancellation of E[x^2] - E[x]^2 when |mean| >> std
 * at the price of one extra read from L1/L2, which is free next to the DRAM
 * traffic of the row itself. Lane accumulators (kiln_nn_row.h) keep the sum
 * order fixed and vectorised.
 */
#include <math.h>

#include "kernels/nn/kiln_nn_internal.h"
#include "kernels/nn/kiln_nn_row.h"

void KILN_NN_FN(kiln_nn_layer_norm_rows)(size_t r0, size_t r1, size_t n, const float* x,
                                         const float* gamma, const float* beta, float eps,
                                         float* y) {
  if (n == 0) return;
  for (size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float mean = kiln_nn_row_sum(n, xr) / (float)n;
    const float* next = r + 1 < r1 ? xr + n : NULL;
    float var = kiln_nn_row_sum_sq(n, xr, mean, next) / (float)n;
    float rstd = 1.0f / sqrtf(var + eps);
    /* One loop per case keeps each branch-free and vectorised; writes go
     * last in each iteration so y may alias x. */
    if (gamma && beta)
      for (size_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    else if (gamma)
      for (size_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * rstd * gamma[i];
    else if (beta)
      for (size_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * rstd + beta[i];
    else
      for (size_t i = 0; i < n; ++i) yr[i] = (xr[i] - mean) * rstd;
  }
}

/* One row of layer_norm's input gradient: with xh = (x - mean) rstd and
 * g = dy gamma, dx = rstd (g - mean(g) - xh mean(g xh)). Two lane-summed
 * reductions, then a pass that writes dx last in each iteration (dx may
 * alias dy or x). has_gamma is a constant at each call, so each case is its
 * own branch-free vector loop. */
static inline void kiln_nn_layer_norm_backward_row(size_t n, const float* dy, const float* x,
                                                   float mu, float rs, const float* gamma,
                                                   int has_gamma, float* dx) {
  float a1[KILN_NN_LANES] = {0}, a2[KILN_NN_LANES] = {0};
  size_t i = 0;
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) {
      float g = has_gamma ? dy[i + j] * gamma[i + j] : dy[i + j];
      a1[j] += g;
      a2[j] += g * ((x[i + j] - mu) * rs);
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    float g = has_gamma ? dy[i] * gamma[i] : dy[i];
    a1[j] += g;
    a2[j] += g * ((x[i] - mu) * rs);
  }
  float m1 = kiln_nn_lanes_sum(a1) / (float)n, m2 = kiln_nn_lanes_sum(a2) / (float)n;
  for (i = 0; i < n; ++i) {
    float g = has_gamma ? dy[i] * gamma[i] : dy[i];
    dx[i] = rs * (g - m1 - (x[i] - mu) * rs * m2);
  }
}

void KILN_NN_FN(kiln_nn_layer_norm_backward_rows)(size_t r0, size_t r1, size_t n, const float* dy,
                                                  const float* x, const float* mean,
                                                  const float* rstd, const float* gamma,
                                                  float* dx) {
  if (n == 0) return;
  for (size_t r = r0; r < r1; ++r) {
    if (gamma)
      kiln_nn_layer_norm_backward_row(n, dy + r * n, x + r * n, mean[r], rstd[r], gamma, 1,
                                      dx + r * n);
    else
      kiln_nn_layer_norm_backward_row(n, dy + r * n, x + r * n, mean[r], rstd[r], NULL, 0,
                                      dx + r * n);
  }
}

void KILN_NN_FN(kiln_nn_rms_norm_rows)(size_t r0, size_t r1, size_t n, const float* x,
                                       const float* gamma, float eps, float* y) {
  if (n == 0) return;
  for (size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float* next = r + 1 < r1 ? xr + n : NULL;
    float rstd = 1.0f / sqrtf(kiln_nn_row_sum_sq(n, xr, 0.0f, next) / (float)n + eps);
    if (gamma)
      for (size_t i = 0; i < n; ++i) yr[i] = xr[i] * rstd * gamma[i];
    else
      for (size_t i = 0; i < n; ++i) yr[i] = xr[i] * rstd;
  }
}
