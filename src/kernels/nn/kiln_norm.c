/* LayerNorm and RMSNorm over rows, one ISA variant per build of this file.
 *
 * Statistics are fp32 and two-pass: the mean, then the sums of deviations
 * and of squared deviations about it (the corrected two-pass algorithm),
 * both over a row that the first pass left in cache. Two passes avoid the
 * cancellation of E[x^2] - E[x]^2 when |mean| >> std at the price of one
 * extra read from L1/L2, which is free next to the DRAM traffic of the row
 * itself. Lane accumulators (kiln_nn_row.h) keep the sum
 * order fixed and vectorised.
 */
#include <math.h>

#include "kernels/nn/kiln_nn_internal.h"
#include "kernels/nn/kiln_nn_row.h"

void KILN_ISA_VARIANT(kiln_nn_layer_norm_rows)(size_t r0, size_t r1, size_t n, const float* x,
                                               const float* gamma, const float* beta, float eps,
                                               float* y) {
  if (n == 0) return;
  for (size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float mean0 = kiln_nn_row_sum(n, xr) / (float)n;
    const float* next = r + 1 < r1 ? xr + n : NULL;
    float s1, s2;
    kiln_nn_row_dev_moments(n, xr, mean0, next, &s1, &s2);
    /* The first mean is off by its rounding, d; the deviations about it
     * sum to n*d, which corrects both moments. A row of equal values then
     * has its exact mean and no variance, so it normalises to 0 (beta), as
     * torch's Welford mean gives, not to rounding noise times 1/sqrt(eps)
     * (fuzzer finding 16). */
    float mean = mean0 + s1 / (float)n;
    float var = (s2 - s1 * (s1 / (float)n)) / (float)n;
    if (!(var > 0.0f)) var = var == var ? 0.0f : var; /* rounding below 0; NaN stays NaN */
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
 * g = dy gamma, dx = rstd (g - mean(g) - xh mean(g xh)). Three lane-summed
 * reductions, then a pass that writes dx last in each iteration (dx may
 * alias dy or x). has_gamma is a constant at each call, so each case is its
 * own branch-free vector loop.
 *
 * The saved mean mu is the float32 rounding of the row's mean, off by up to
 * an ulp of |mean|; the xh made from it do not sum to zero but to n c rstd,
 * c = mean(x - mu), and the last term then shifts every dx of the row by
 * rstd^2 c mean(g xh): an error of |mean| / std ulps of dx, where the exact
 * gradient of a shift-invariant norm sums to zero (a consumer that adds
 * near-equal multiples of the row's dx, such as the gradient of a value
 * every element of the row depends on alike, sees only that shift). So the
 * deviations are centred again, d = x - mu - c: their sum is then off by
 * rounding relative to the row's spread, not to its mean (the corrected
 * two-pass of Chan, Golub and LeVeque, 1983). With d0 = x - mu,
 * mean(g d) = mean(g d0) - c mean(g), so the one reduction pass also
 * gives c. */
static inline void kiln_nn_layer_norm_backward_row(size_t n, const float* dy, const float* x,
                                                   float mu, float rs, const float* gamma,
                                                   int has_gamma, float* dx) {
  float a1[KILN_NN_LANES] = {0}, a2[KILN_NN_LANES] = {0}, a3[KILN_NN_LANES] = {0};
  size_t i = 0;
  for (; i + KILN_NN_LANES <= n; i += KILN_NN_LANES) {
#pragma GCC unroll 1
    for (int j = 0; j < KILN_NN_LANES; ++j) {
      float g = has_gamma ? dy[i + j] * gamma[i + j] : dy[i + j];
      float d = x[i + j] - mu;
      a1[j] += g;
      a2[j] += g * d;
      a3[j] += d;
    }
  }
  for (size_t j = 0; i < n; ++i, ++j) {
    float g = has_gamma ? dy[i] * gamma[i] : dy[i];
    float d = x[i] - mu;
    a1[j] += g;
    a2[j] += g * d;
    a3[j] += d;
  }
  float m1 = kiln_nn_lanes_sum(a1) / (float)n, c = kiln_nn_lanes_sum(a3) / (float)n;
  float m2 = (kiln_nn_lanes_sum(a2) / (float)n - c * m1) * rs; /* mean(g xh) */
  /* (x - mu) - c, not x - (mu + c): mu + c would round c away. */
  for (i = 0; i < n; ++i) {
    float g = has_gamma ? dy[i] * gamma[i] : dy[i];
    dx[i] = rs * (g - m1 - ((x[i] - mu) - c) * rs * m2);
  }
}

void KILN_ISA_VARIANT(kiln_nn_layer_norm_backward_rows)(size_t r0, size_t r1, size_t n,
                                                        const float* dy, const float* x,
                                                        const float* mean, const float* rstd,
                                                        const float* gamma, float* dx) {
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

void KILN_ISA_VARIANT(kiln_nn_rms_norm_rows)(size_t r0, size_t r1, size_t n, const float* x,
                                             const float* gamma, float eps, float* y) {
  if (n == 0) return;
  for (size_t r = r0; r < r1; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    const float* next = r + 1 < r1 ? xr + n : NULL;
    float rstd = 1.0f / sqrtf(kiln_nn_row_sum_sq(n, xr, next) / (float)n + eps);
    if (gamma)
      for (size_t i = 0; i < n; ++i) yr[i] = xr[i] * rstd * gamma[i];
    else
      for (size_t i = 0; i < n; ++i) yr[i] = xr[i] * rstd;
  }
}
