/* bf16-compute channels-last convolution: the CONV2D_NHWC of
 * kiln_conv_nhwc.h (same args struct, same definition) with x rounded to
 * bf16 (nearest even, as kiln_gemm_bf16_from_f32: NaN made quiet,
 * denormals kept) and the weights held as bf16, products summed in fp32,
 * the epilogue (bias, activation, residual) in fp32. What
 * kiln.trace(..., compute_dtype=torch.bfloat16) asks of a conv, run on the
 * CPU's bf16 dot-product engine (VDPBF16PS) where kiln_cpu_bf16() has one.
 *
 * Weights (KILN_LAYOUT_CONV2D_PACKED_16_BF16, args->weight_packed ==
 * KILN_CONV_PACKED_BF16, args->weight pointing at the uint16_t blob): a
 * weight (O, Cg, kh, kw), per group g, per panel q of 16 output channels
 * (nq = ceil(Og / 16) panels a group), taps in (u, v, c) order with Cg
 * padded to even Cg2 (a zero channel), c and c + 1 of the same (u, v) as a
 * VNNI pair: pair row r = (u kw + v) (Cg2 / 2) + c / 2 holds 16 channels x
 * 2 bf16 (64 bytes), element (channel g Og + 16 q + i, c, u, v) at
 *     out[((g nq + q) R + r) 32 + 2 i + c % 2],   R = kh kw Cg2 / 2,
 * channels past Og in a group's last panel zero. In NHWC the two channels
 * of a pair are adjacent in x, so one 32-bit load of the (bf16) source is
 * one VDPBF16PS couple.
 *
 * Paths: with AMX (kiln_cpu_bf16() & KILN_CPU_BF16_AMX), TDPBF16PS tiles
 * (kiln_conv_nhwc_bf16_amx.c); else with an AVX512_BF16 engine
 * (KILN_CPU_BF16_AVX512), the VDPBF16PS tiled kernel (kiln_conv_nhwc_bf16.c,
 * kiln_conv_nhwc_bf16_avx512bf16.c); without one (an artifact compiled on
 * a bf16 CPU run elsewhere, KILN_ISA capped) a portable path giving the
 * same numbers up to fp32 summation order, never a crash.
 *
 * Pointers are borrowed for the call; sizes were validated by shape
 * inference and the target's supports check. */
#ifndef KILN_CONV_NHWC_BF16_H
#define KILN_CONV_NHWC_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/conv/kiln_conv.h"

/* args->weight_packed for the bf16-compute layout (not a panel width). */
#define KILN_CONV_PACKED_BF16 2

/* Bytes of the layout for a weight (o, cg, kh, kw) in `groups` groups; 0
 * for bad sizes or on overflow. */
size_t kiln_conv2d_bf16_packed_size(int64_t o, int64_t cg, int64_t kh, int64_t kw,
                                    int64_t groups);
/* Packs panels [pan0, pan1) (panels of all groups numbered together) of a
 * dense fp32 weight; kiln_conv2d_bf16_pack_weight packs them all. */
void kiln_conv2d_bf16_pack_panels(int64_t o, int64_t cg, int64_t kh, int64_t kw, int64_t groups,
                                  const float* w, int64_t pan0, int64_t pan1, uint16_t* out);
void kiln_conv2d_bf16_pack_weight(int64_t o, int64_t cg, int64_t kh, int64_t kw, int64_t groups,
                                  const float* w, uint16_t* out);

/* The convolution; x is (N, H, W, C), or (N, C, H, W) with x_nchw. */
void kiln_conv2d_bf16_nhwc(const kiln_conv2d_f32_args_t* args, int x_nchw, kiln_pool_t* pool);

/* The scalar reference: x rounded to bf16, the layout's bf16 weights,
 * products summed in double, then the fp32 epilogue's rule. */
void kiln_conv2d_bf16_nhwc_reference(const kiln_conv2d_f32_args_t* args, int x_nchw);

/* 1 when kiln_conv2d_bf16_nhwc runs the VDPBF16PS kernel now. */
int kiln_conv2d_bf16_has_engine(void);
/* What a bf16-compute conv runs on now, in words (KILN_LOG, kiln.explain). */
const char* kiln_conv2d_bf16_describe(void);
/* The path the calling thread's last kiln_conv2d_bf16_nhwc took: "amx",
 * "avx512_bf16" or "fp32" (the portable path); for tests. */
const char* kiln_conv2d_bf16_last_path(void);
/* 1 when that call paired taps along window rows for every image (the
 * stem's C = 3; kiln_conv_nhwc_bf16_internal.h), 0 when it used channel
 * pairs for any (an Inf or NaN in the image, or the shape); for tests. */
int kiln_conv2d_bf16_last_window_pairs(void);

#endif /* KILN_CONV_NHWC_BF16_H */
