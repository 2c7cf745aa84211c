/* 2-d convolution and pooling over NCHW float32 tensors.
 *
 * Convolution:
 *   y[n][o][i][j] = act(bias[o] + sum_{c, u, v} w[o][c][u][v] *
 *                       x[n][g * Cg + c][i*sh - ph + u*dh][j*sw - pw + v*dw])
 *                   + residual[n][o][i][j]
 * with g = o / Og the group of o, Cg = C / groups, Og = O / groups, and taps
 * that fall in the padding reading 0. Shapes: x (N, C, H, W), w (O, Cg, kh,
 * kw) dense, bias (O) or NULL, residual (N, O, Ho, Wo) or NULL (it may alias
 * y exactly), y (N, O, Ho, Wo) dense.
 *
 * kiln_conv2d_f32 picks a path per call: depthwise convs (groups == C == O)
 * a direct loop over output rows; everything else an implicit GEMM over a
 * padded (and, for stride > 1, phase-split) copy of x, in which every tap is
 * a constant offset from the output pixel, with the weights in the packed
 * layout below (packed at compile time, or per call when given dense). See
 * kiln_conv.c. The per-call scratch is a cached block reused call to call.
 *
 * Pooling: y[n][c][i][j] = max or mean over the kh x kw window at
 * (i*sh - ph, j*sw - pw) (dilated for max). Max propagates NaN, as torch.
 * Average divides by the window's in-bounds size, or with count_include_pad
 * by its size clipped to the padded input (torch's rule, which matters with
 * ceil_mode).
 *
 * Pointers are borrowed for the call. Kernels return void: the IR's shape
 * rules validated every size and parameter before a plan was built.
 */
#ifndef KILN_CONV_H
#define KILN_CONV_H

#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_activation.h"

typedef struct kiln_conv2d_f32_args_s {
  int64_t n, c, h, w;       /* x (N, C, H, W) */
  int64_t o, kh, kw;        /* w (O, C / groups, kh, kw) */
  int64_t ho, wo;           /* y (N, O, Ho, Wo) */
  int64_t sh, sw, ph, pw, dh, dw, groups;
  const float* x;
  const float* weight;
  const float* bias;     /* (O) or NULL */
  const float* residual; /* (N, O, Ho, Wo) or NULL; may alias y */
  const float* scale;    /* (O) or NULL: each sum times scale[o] before the bias
                          * (the bf16 NHWC conv only: CONV2D's scale input) */
  float* y;
  kiln_activation_t act;
  int residual_before_act; /* 1: y = act(conv + bias + residual) */
  int weight_packed;       /* 0: dense; else the panel width of
                            * kiln_conv2d_f32_pack_weight's output */
  /* Channels-last only (CONV2D_NHWC's bf16 storage, format 2.23): x holds
   * bf16 (uint16) values (the bf16-compute conv); y is stored as bf16,
   * rounded to nearest even (the bf16-compute and the depthwise conv; no
   * residual). The pointers keep their float types, as a packed weight's. */
  int x_bf16, y_bf16;
} kiln_conv2d_f32_args_t;

void kiln_conv2d_f32(const kiln_conv2d_f32_args_t* args, kiln_pool_t* pool);

/* Packed weights (the same on every ISA, so a packed .kiln artifact runs
 * anywhere). With K = Cg * kh * kw taps in (c, u, v) order, Og = O / groups
 * and panels of `panel` (6 or 16) output channels per group
 * (nq = ceil(Og / panel)), the weight of output channel g * Og + panel * q + i
 * at tap p sits at
 *     out[((g * nq + q) * K + p) * panel + i]
 * and rows past Og in a group's last panel are zero. Panels of 6 feed the
 * pixel-vector microkernel (6 channels broadcast against 16 pixels), panels
 * of 16 the channel-vector one (16 channels a vector, 6 pixels broadcast).
 * kiln_conv2d_f32_panel_for picks the better for a shape (args' sizes,
 * strides, padding, dilation and groups; no pointers); the compiler packs
 * for its choice, and a dense weight is packed per call for it.
 * kiln_conv2d_f32_packed_size returns 0 for a bad panel or when the size
 * would overflow (the caller treats it as a mismatch). */
#define KILN_CONV_PANEL_O 6
#define KILN_CONV_PANEL_WIDE 16
int kiln_conv2d_f32_panel_for(const kiln_conv2d_f32_args_t* args);
size_t kiln_conv2d_f32_packed_size(int64_t o, int64_t k, int64_t groups, int panel);
void kiln_conv2d_f32_pack_weight(int64_t o, int64_t k, int64_t groups, int panel,
                                 const float* w, float* out);

/* The scalar reference: seven plain loops, double accumulation (reads
 * packed weights too). */
void kiln_conv2d_f32_reference(const kiln_conv2d_f32_args_t* args);

typedef struct kiln_pool2d_f32_args_s {
  int64_t n, c, h, w, ho, wo;
  int64_t kh, kw, sh, sw, ph, pw, dh, dw; /* dh = dw = 1 for average */
  int count_include_pad;                 /* average only */
  int64_t divisor_override;              /* average only: > 0 replaces the count */
  const float* x;
  float* y;
} kiln_pool2d_f32_args_t;

/* Parallel over (N, C) planes. */
void kiln_max_pool2d_f32(const kiln_pool2d_f32_args_t* args, kiln_pool_t* pool);
/* The direct window loop, for the tests (max is exact: results equal). */
void kiln_max_pool2d_f32_reference(const kiln_pool2d_f32_args_t* args);
void kiln_avg_pool2d_f32(const kiln_pool2d_f32_args_t* args, kiln_pool_t* pool);
/* The direct window loop (the scalar reference of the vectorised planes). */
void kiln_avg_pool2d_f32_reference(const kiln_pool2d_f32_args_t* args);

#endif /* KILN_CONV_H */
