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
