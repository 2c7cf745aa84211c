/* Gradients of 2-d convolution and pooling over NCHW float32 tensors: what
 * training a CNN needs from the backward pass (plus adaptive average
 * pooling and bilinear upsampling, which share the pooling geometry).
 *
 * Convolution (the forward is in kiln_conv.h, same geometry and names):
 *   grad input:  dx[n][g*Cg + c][iy][ix] = sum over (o in group g, i, j, u, v)
 *                with iy = i*sh - ph + u*dh, ix = j*sw - pw + v*dw of
 *                w[o][c][u][v] * dy[n][o][i][j]
 *   grad weight: dw[o][c][u][v] = sum over (n, i, j) of
 *                dy[n][o][i][j] * x[n][g*Cg + c][iy][ix]  (0 in the padding)
 * The bias gradient is a plain sum of dy over (N, Ho, Wo): a SUM op.
 *
 * Both run on the GEMM: per image and group, with K = Cg * kh * kw and
 * P = Ho * Wo pixels,
 *   grad input:  col(K, P) = W_g^T(K, Og) . dy_g(Og, P), then col2im adds
 *                each column entry into the input pixel it came from;
 *   grad weight: dW_g(Og, K) += dy_g(Og, P) . im2col(x_g)^T(P, K), the
 *                images accumulated through the GEMM's in-place residual.
 * The column matrix is per-call scratch (one cached block); without memory
 * for it the kernels run the scalar references instead (correct, slow).
 *
 * Pooling:
 *   max indices: for each output cell, the flat index (iy * W + ix) within
 *                its (n, c) plane of the window's maximum, torch's choice:
 *                the first maximum in row-major window order, the last NaN
 *                if there is one, the first in-bounds tap if all are -inf.
 *   max grad:    dx[plane][idx] += dy[plane][k] for each output cell k;
 *                an index outside [0, H*W) is counted and skipped, never
 *                written (the caller turns the count into an error).
 *   avg grad:    each dy cell spread evenly (divided by the forward's
 *                divisor) over its window's in-bounds taps.
 *   adaptive average (forward and grad): output cell (i, j) averages rows
 *                [floor(i H / Ho), ceil((i + 1) H / Ho)) and the columns
 *                likewise (torch's adaptive windows: never empty, may
 *                overlap); the grad spreads each dy cell over its window.
 *
 * Pointers are borrowed for the call; outputs are fully overwritten. The
 * IR's shape rules validated sizes and parameters before a plan was built.
 */
#ifndef KILN_CONV_BACKWARD_H
#define KILN_CONV_BACKWARD_H

#include <stdint.h>

#include "base/kiln_pool.h"

typedef struct kiln_conv2d_grad_f32_args_s {
  int64_t n, c, h, w; /* x (N, C, H, W) */
  int64_t o, kh, kw;  /* w (O, C / groups, kh, kw) */
  int64_t ho, wo;     /* dy (N, O, Ho, Wo) */
  int64_t sh, sw, ph, pw, dh, dw, groups;
  const float* dy;
  const float* x;      /* grad weight's input */
  const float* weight; /* grad input's input */
  float* dx;           /* grad input's output (N, C, H, W) */
  float* dweight;      /* grad weight's output (O, C / groups, kh, kw) */
} kiln_conv2d_grad_f32_args_t;

void kiln_conv2d_grad_input_f32(const kiln_conv2d_grad_f32_args_t* args, kiln_pool_t* pool);
void kiln_conv2d_grad_weight_f32(const kiln_conv2d_grad_f32_args_t* args, kiln_pool_t* pool);

/* Scalar references: the definitions above as plain loops, double sums. */
void kiln_conv2d_grad_input_f32_reference(const kiln_conv2d_grad_f32_args_t* args);
void kiln_conv2d_grad_weight_f32_reference(const kiln_conv2d_grad_f32_args_t* args);

typedef struct kiln_pool2d_grad_f32_args_s {
  int64_t n, c, h, w, ho, wo;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw; /* dh = dw = 1 for average */
  int count_include_pad;                 /* average only */
  int64_t divisor_override;              /* average only: > 0 replaces the count */
  const float* x;         /* max indices: the forward input */
  const float* dy;        /* grads: (N, C, Ho, Wo) */
  const int64_t* indices; /* max: (N, C, Ho, Wo), flat within the plane */
  int64_t* out_indices;   /* max indices' output */
  float* dx;              /* grads' output (N, C, H, W) */
  float* y;               /* adaptive average's output (N, C, Ho, Wo) */
} kiln_pool2d_grad_f32_args_t;

/* Parallel over (N, C) planes. */
void kiln_max_pool2d_indices_f32(const kiln_pool2d_grad_f32_args_t* args, kiln_pool_t* pool);
/* Returns how many indices were out of range (0 when all were valid). */
int64_t kiln_max_pool2d_grad_f32(const kiln_pool2d_grad_f32_args_t* args, kiln_pool_t* pool);
void kiln_avg_pool2d_grad_f32(const kiln_pool2d_grad_f32_args_t* args, kiln_pool_t* pool);
/* Adaptive average pooling: x (N, C, H, W) -> y (N, C, Ho, Wo), and its
 * gradient dy -> dx. Only n, c, h, w, ho, wo and the pointers are read. */
void kiln_adaptive_avg_pool2d_f32(const kiln_pool2d_grad_f32_args_t* args, kiln_pool_t* pool);
void kiln_adaptive_avg_pool2d_grad_f32(const kiln_pool2d_grad_f32_args_t* args, kiln_pool_t* pool);

/* Bilinear upsampling x (N, C, H, W) -> y (N, C, Ho, Wo) with torch's rule:
 * source row of output i is s * i (align_corners) or max(s (i + 0.5) - 0.5,
 * 0), s = (H - 1) / (Ho - 1) with align_corners (0 when Ho = 1), else
 * 1 / scale_h when scale_h > 0 (the caller's scale factor), else H / Ho;
 * y blends the two neighbouring rows (the last row with itself) and
 * likewise columns, in float as torch does for fp32. */
typedef struct kiln_upsample_f32_args_s {
  int64_t n, c, h, w, ho, wo;
  int align_corners;
  float scale_h, scale_w; /* torch's scale_factors, or 0 */
  const float* x;
  float* y;
} kiln_upsample_f32_args_t;

void kiln_upsample_bilinear2d_f32(const kiln_upsample_f32_args_t* args, kiln_pool_t* pool);
void kiln_upsample_bilinear2d_f32_reference(const kiln_upsample_f32_args_t* args);

#endif /* KILN_CONV_BACKWARD_H */
