/* int4 x int8 on Arm's dot-product extension (SDOT, ARMv8.2 dotprod): the
 * GEMV of kiln_gemm_q4a8.c's contract (decode, and prefill in slabs of up
 * to 8 rows), the int8 engine's at the neon level of a CPU with dotprod
 * (kiln_gemm_int8_engine). Compiled only with the neondot flags.
 *
 * The blob pairs K rows per byte (kiln_gemm_q4a8_neon.c says how): v &
 * 0x0F and v >> 4 of a row pair's 16 bytes are int8 lanes 0..15 in
 * (column, row parity) order, columns 0-7 and 8-15. Two consecutive row
 * pairs' lanes, zipped as halfwords, are four columns' quads of K rows
 * (rows 2t, 2t + 1 of the first pair, then the second's): what SDOT by
 * element multiplies with A's quad. Per 4 K rows x 16 columns: 2 loads,
 * 2 AND, 2 USHR and 4 ZIPs shared by the rows, then 4 SDOT per row: about
 * 0.22 instructions per weight at one row (the SMLAL kernel's 0.27) and
 * 0.11 per weight and row at four (the SMLAL kernel works two rows at a
 * time, at about 0.19).
 *
 * The sums are int32 from the start (no int16 stage to bound) and exact;
 * per group, z * s_ig is taken off in int32 and scale * d applied by one
 * FMA in the rule's order, as the ASIMD kernel does: the same bits as the
 * scalar reference. Tested under qemu-aarch64 (make test-arm64); never
 * timed on an Arm core. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kernels/gemm/kiln_gemm_quant_neon.h"

#define KILN_Q4A8D_AI static inline __attribute__((always_inline))

/* R (1..4) rows x one panel; dot per row: [0] columns 0-3, [1] 4-7, [2]
 * 8-11, [3] 12-15. */
KILN_Q4A8D_AI void kiln_q4a8d_tile(const int R, int64_t kg, int group, int form, const int8_t* a,
                                   int64_t lda, const float* ad, const int32_t* as,
                                   const uint8_t* b, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t o[4][4];
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < 4; ++u) o[i][u] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < kg; ++g) {
    const uint8_t* blk = b + g * gb;
    const uint8_t* bytes = blk + hdr;
    const int8_t* ag = a + g * group;
    int32x4_t dot[4][4];
    for (int i = 0; i < R; ++i)
      for (int u = 0; u < 4; ++u) dot[i][u] = vdupq_n_s32(0);
    /* 16 K rows (8 row pairs, 128 bytes) a step: one 16-byte load of each
     * A row gives its four quads, taken by lane (group % 32 == 0). */
    for (int p = 0; p < group; p += 16) {
      int8x16_t av[4];
      for (int i = 0; i < R; ++i) av[i] = vld1q_s8(ag + i * lda + p);
      /* Rows p + 4 LANE.. (two row pairs, 32 bytes) by A's quad LANE. */
#define KILN_Q4A8D_STEP(LANE)                                                              \
  do {                                                                                     \
    const uint8x16x2_t v = vld1q_u8_x2(bytes + 8 * p + 32 * (LANE));                       \
    const int16x8_t l0 = vreinterpretq_s16_u8(vandq_u8(v.val[0], m4));                     \
    const int16x8_t l1 = vreinterpretq_s16_u8(vandq_u8(v.val[1], m4));                     \
    const int16x8_t h0 = vreinterpretq_s16_u8(vshrq_n_u8(v.val[0], 4));                    \
    const int16x8_t h1 = vreinterpretq_s16_u8(vshrq_n_u8(v.val[1], 4));                    \
    const int8x16_t q0 = vreinterpretq_s8_s16(vzip1q_s16(l0, l1));                         \
    const int8x16_t q1 = vreinterpretq_s8_s16(vzip2q_s16(l0, l1));                         \
    const int8x16_t q2 = vreinterpretq_s8_s16(vzip1q_s16(h0, h1));                         \
    const int8x16_t q3 = vreinterpretq_s8_s16(vzip2q_s16(h0, h1));                         \
    for (int i = 0; i < R; ++i) {                                                          \
      dot[i][0] = vdotq_laneq_s32(dot[i][0], q0, av[i], LANE);                             \
      dot[i][1] = vdotq_laneq_s32(dot[i][1], q1, av[i], LANE);                             \
      dot[i][2] = vdotq_laneq_s32(dot[i][2], q2, av[i], LANE);                             \
      dot[i][3] = vdotq_laneq_s32(dot[i][3], q3, av[i], LANE);                             \
    }                                                                                      \
  } while (0)
      KILN_Q4A8D_STEP(0);
      KILN_Q4A8D_STEP(1);
      KILN_Q4A8D_STEP(2);
      KILN_Q4A8D_STEP(3);
#undef KILN_Q4A8D_STEP
    }
    KILN_Q4A8_NEON_GROUP_END(R, blk, asym, bf16, ad, as, kg, g, dot, o);
  }
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < 4; ++u) vst1q_f32(out + i * 16 + 4 * u, o[i][u]);
}

/* Without GCC's first scheduling pass: it hoists every step's loads above
 * the SDOTs and spills accumulators at four rows (7 loads and stores per 16
 * K rows); without it none. */
KILN_NEON_NO_PRESCHEDULE void kiln_qd8_qb4w_gemv__neondot(int64_t m, int64_t kg, int group,
                                                          int form, const int8_t* a, int64_t lda,
                                                          const float* ad, const int32_t* as,
                                                          const uint8_t* b, int panels,
                                                          float* out) {
  const int64_t pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  /* Rows four at a time: 4 x (4 int32 + 4 fp32) accumulators. */
  for (int q = 0; q < panels; ++q)
    for (int64_t i0 = 0; i0 < m; i0 += 4) {
      const int8_t* ar = a + i0 * lda;
      const float* dr = ad + i0 * kg;
      const int32_t* sr = as + i0 * kg;
      const uint8_t* bq = b + q * pstride;
      float* oq = out + q * m * 16 + i0 * 16;
      switch (m - i0 >= 4 ? 4 : (int)(m - i0)) {
        case 4: kiln_q4a8d_tile(4, kg, group, form, ar, lda, dr, sr, bq, oq); break;
        case 3: kiln_q4a8d_tile(3, kg, group, form, ar, lda, dr, sr, bq, oq); break;
        case 2: kiln_q4a8d_tile(2, kg, group, form, ar, lda, dr, sr, bq, oq); break;
        default: kiln_q4a8d_tile(1, kg, group, form, ar, lda, dr, sr, bq, oq); break;
      }
    }
}
