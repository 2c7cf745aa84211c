/* What the NEON kernels of the quantized families (kiln_gemm_quant_neon.c,
 * kiln_gemm_q4a8_neon.c and the neondot engine's two files) share.
 * Included only by aarch64 sources. */
#ifndef KILN_GEMM_QUANT_NEON_H
#define KILN_GEMM_QUANT_NEON_H

#include <arm_neon.h>
#include <stdint.h>

/* GCC's first scheduling pass hoists a kernel's loads above its dot
 * products until accumulators spill (the neondot kernels say where); off
 * for those functions. Other compilers schedule their own way: nothing. */
#if defined(__GNUC__) && !defined(__clang__)
#define KILN_NEON_NO_PRESCHEDULE __attribute__((optimize("no-schedule-insns")))
#else
#define KILN_NEON_NO_PRESCHEDULE
#endif

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

/* The int4:a8 rule's step at the end of group g (kiln_gemm.h), for R rows
 * of one panel: with the group's scales s_u and zero points z_u (8 when
 * symmetric) from its header at blk, o[i][u] += (s_u * d_ig) * (dot[i][u]
 * - z_u * s_ig) for A's group scale d_ig = ad[i * kg + g] and sum s_ig =
 * as[i * kg + g]; z * s_ig comes off in int32 (exact), as the scalar
 * reference does. Both q4a8 GEMVs (ASIMD and SDOT) end a group with it. A
 * macro, not an inline function taking the accumulators' address: given
 * that, GCC 12 kept the SDOT GEMV's accumulators in memory through its
 * inner loop (9 stores per 64 SDOT). */
#define KILN_Q4A8_NEON_GROUP_END(R, blk, asym, bf16, ad, as, kg, g, dot, o)                 \
  do {                                                                                     \
    float32x4_t sv_[4];                                                                    \
    int32x4_t zv_[4];                                                                      \
    kiln_q4_header16_neon((blk), 0, (bf16), sv_);                                          \
    if (asym) {                                                                            \
      float32x4_t zf_[4];                                                                  \
      kiln_q4_header16_neon((blk), 16, (bf16), zf_);                                       \
      for (int u_ = 0; u_ < 4; ++u_) zv_[u_] = vcvtq_s32_f32(zf_[u_]); /* whole: exact */ \
    } else {                                                                               \
      for (int u_ = 0; u_ < 4; ++u_) zv_[u_] = vdupq_n_s32(8);                             \
    }                                                                                      \
    for (int i_ = 0; i_ < (R); ++i_) {                                                     \
      const int32x4_t sg_ = vdupq_n_s32((as)[i_ * (kg) + (g)]);                            \
      const float32x4_t dg_ = vdupq_n_f32((ad)[i_ * (kg) + (g)]);                          \
      for (int u_ = 0; u_ < 4; ++u_) {                                                     \
        const float32x4_t acc_ = vcvtq_f32_s32(vmlsq_s32(dot[i_][u_], zv_[u_], sg_));      \
        o[i_][u_] = vfmaq_f32(o[i_][u_], vmulq_f32(sv_[u_], dg_), acc_);                   \
      }                                                                                    \
    }                                                                                      \
  } while (0)

#endif /* KILN_GEMM_QUANT_NEON_H */
