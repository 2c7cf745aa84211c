/* What the NEON kernels of the quantized families (kiln_gemm_quant_neon.c,
 * kiln_gemm_q4a8_neon.c, kiln_gemm_q4a8_neondot.c) share. Included only by
 * aarch64 sources. */
#ifndef KILN_GEMM_QUANT_NEON_H
#define KILN_GEMM_QUANT_NEON_H

#include <arm_neon.h>
#include <stdint.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"

/* 16 entries of an int4 group block's header from entry `first` (16
 * scales at 0, 16 zero points at 16), fp32 or bf16 (widened exactly). */
static inline __attribute__((always_inline)) void kiln_q4_header16_neon(const uint8_t* blk,
                                                                         int first, int bf16,
                                                                         float32x4_t v[4]) {
  if (bf16) {
    const uint16x8_t h0 = vld1q_u16((const uint16_t*)(blk + 2 * first));
    const uint16x8_t h1 = vld1q_u16((const uint16_t*)(blk + 2 * first + 16));
    v[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
    v[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
    v[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
    v[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
  } else {
    for (int q = 0; q < 4; ++q) v[q] = vld1q_f32((const float*)(blk + 4 * first) + 4 * q);
  }
}

/* One row's int4 x int8 group (kiln_gemm_q4a8.c's rule) into its fp32
 * sums o (columns 0-3, 4-7, 8-11, 12-15): dot the group's exact int32
 * sums of nibble x A products, sg the row's sum of A's quantized values in
 * the group and dg A's group scale. z * sg comes off in int32 (z the zero
 * points, 8 when symmetric), then o += (scale * dg) * (float)sum by one
 * FMA: the rule's order, so the scalar reference's bits. */
static inline __attribute__((always_inline)) void kiln_q4a8_group_out_neon(
    const uint8_t* blk, int form, const int32x4_t dot[4], int32_t sg, float dg,
    float32x4_t o[4]) {
  const int bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  float32x4_t sv[4];
  int32x4_t zv[4];
  kiln_q4_header16_neon(blk, 0, bf16, sv);
  if (kiln_gemm_q4_asym(form)) {
    float32x4_t zf[4];
    kiln_q4_header16_neon(blk, 16, bf16, zf);
    for (int u = 0; u < 4; ++u) zv[u] = vcvtq_s32_f32(zf[u]); /* whole numbers: exact */
  } else {
    for (int u = 0; u < 4; ++u) zv[u] = vdupq_n_s32(8);
  }
  const int32x4_t sgv = vdupq_n_s32(sg);
  const float32x4_t dgv = vdupq_n_f32(dg);
  for (int u = 0; u < 4; ++u) {
    const float32x4_t acc = vcvtq_f32_s32(vmlsq_s32(dot[u], zv[u], sgv));
    o[u] = vfmaq_f32(o[u], vmulq_f32(sv[u], dgv), acc);
  }
}

#endif /* KILN_GEMM_QUANT_NEON_H */
