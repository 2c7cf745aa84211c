/* 2-d convolution over channels-last (NHWC) float32 activations.
 *
 * The same arithmetic as kiln_conv2d_f32 (kiln_conv.h) and the same args
 * struct, with the activations stored channels-last:
 *   x (N, H, W, C), y and residual (N, Ho, Wo, O), all dense;
 *   y[n][i][j][o] = act(bias[o] + sum_{c, u, v} w[o][c][u][v] *
 *                   x[n][i*sh - ph + u*dh][j*sw - pw + v*dw][g * Cg + c])
 *                   + residual[n][i][j][o]
 * (or with the residual added before the activation, residual_before_act).
 * The weight is dense (O, Cg, kh, kw) or packed in panels of 16
 * (weight_packed == KILN_CONV_PANEL_WIDE, kiln_conv2d_f32_pack_weight's
 * layout); panels of 6 are not accepted here (the compiler packs NHWC convs
 * in 16s; kiln_conv2d_f32_nhwc falls back to the reference for them).
 *
 * Why: in NHWC the channel-vector microkernel's 6 x 16 tile (6 pixels x 16
 * output channels) is already y's layout, so it is stored with no
 * transpose; each tap's broadcast reads consecutive channels of one pixel
 * (one cache line serves 16 taps); and a conv with no padding reads x in
 * place (a 1x1 stride-1 conv is a plain GEMM on x), with no prepared copy.
 * With padding, x is copied once into a zero-bordered buffer (no phase
 * split: a stride only moves each pixel's base).
 *
 * Pointers are borrowed for the call; sizes were validated by shape
 * inference (CONV2D_NHWC). */
#ifndef KILN_CONV_NHWC_H
#define KILN_CONV_NHWC_H

#include "kernels/conv/kiln_conv.h"
#include "kernels/gemm/kiln_gemm.h"

/* Element i of x, widened when x holds bf16 (args' x_bf16); element i of
 * y set to r, rounded to nearest even when y holds bf16: the scalar
 * references' reads and writes. */
static inline float kiln_conv2d_nhwc_x_at(const kiln_conv2d_f32_args_t* a, int64_t i) {
  return a->x_bf16 ? kiln_gemm_bf16_to_f32(((const uint16_t*)(const void*)a->x)[i]) : a->x[i];
}
static inline void kiln_conv2d_nhwc_y_put(const kiln_conv2d_f32_args_t* a, int64_t i, float r) {
  if (a->y_bf16) ((uint16_t*)(void*)a->y)[i] = kiln_gemm_bf16_from_f32(r);
  else a->y[i] = r;
}

void kiln_conv2d_f32_nhwc(const kiln_conv2d_f32_args_t* args, kiln_pool_t* pool);
/* The same with x given NCHW (N, C, H, W) (y and residual still NHWC): the
 * bordered copy gathers it, so the first conv of a channels-last region
 * needs no separate layout conversion of its input. */
void kiln_conv2d_f32_nhwc_from_nchw(const kiln_conv2d_f32_args_t* args, kiln_pool_t* pool);

/* The depthwise conv (groups == C == O, a dense weight, at most 49 taps)
 * by its own kernel (kiln_conv_nhwc_dw.c): a vector FMA per tap over
 * consecutive channels. 0 when it does not take the conv (or has no
 * memory); kiln_conv2d_f32_nhwc tries it first. */
int kiln_conv2d_f32_nhwc_depthwise(const kiln_conv2d_f32_args_t* args, kiln_pool_t* pool);

/* The scalar reference (seven plain loops, double accumulation; reads
 * dense or packed weights of either panel width). */
void kiln_conv2d_f32_nhwc_reference(const kiln_conv2d_f32_args_t* args);
/* ... with x given NCHW. */
void kiln_conv2d_f32_nhwc_reference_from_nchw(const kiln_conv2d_f32_args_t* args);

/* Max pooling channels-last (kiln_pool_nhwc.c): x (N, H, W, C) -> y
 * (N, Ho, Wo, C), args as kiln_max_pool2d_f32's (n, c, h, w, ho, wo the
 * sizes); the window, dilation and NaN rule as MAX_POOL2D. */
void kiln_max_pool2d_f32_nhwc(const kiln_pool2d_f32_args_t* args, kiln_pool_t* pool);
/* The direct window loop, for the tests (max is exact: results equal). */
void kiln_max_pool2d_f32_nhwc_reference(const kiln_pool2d_f32_args_t* args);

#endif /* KILN_CONV_NHWC_H */
