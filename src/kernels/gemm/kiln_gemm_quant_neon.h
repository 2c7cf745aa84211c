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

#endif /* KILN_GEMM_QUANT_NEON_H */
