/* int8 x int8 on aarch64 ASIMD (NEON), no dot-product extension needed:
 * the blocked microkernel (prefill), the decode GEMV, and the A packer
 * (kiln_gemm_quant_internal.h's contracts; the rule is kiln_gemm.h's
 * int8:a8 rule). Compiled only on aarch64 and called only when
 * kiln_cpu_isa() == KILN_ISA_NEON.
 *
 * The sums are exact in int32, so each kernel gives the portable one's
 * bits; what NEON changes is how many instructions a product takes:
 *   6x16 microkernel: a k pair's two B rows widened to int16 (SXTL x 4),
 *   then per A row 8 SMLAL (by element: the row's int16 pair from the
 *   packed panel) into 4 int32x4 accumulators: 48 SMLAL per 192 products,
 *   24 accumulators + 4 B + 2 A registers of the 32.
 *   GEMV: per k pair and row, SMULL + SMLAL of the two rows' int8 against
 *   A's values (int16 lanes hold two products, at most 2 * 127 * 127 =
 *   32258 < 32767), widened into int32 by SADDW: 8 instructions per 32
 *   products and row, against about 4 per product in the portable loop.
 * Without the dot-product extension (SDOT) a product costs what an fp32
 * FMA lane does; the gain over the fp32 GEMV is the weights' bytes (a
 * quarter) and the conversions the weight-only kernels spend. Tested under
 * qemu-aarch64 only (make test-arm64): never timed on a real Arm core. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q8A8N_AI static inline __attribute__((always_inline))

/* ---- blocked: the 6x16 microkernel ---------------------------------------- */

#define KILN_Q8A8N_ROW(i, av, lane0, lane1, LANE)                        \
  do {                                                                   \
    c[i][0] = vmlal_##LANE##_s16(c[i][0], vget_low_s16(b0l), av, lane0);  \
    c[i][1] = vmlal_high_##LANE##_s16(c[i][1], b0l, av, lane0);           \
    c[i][2] = vmlal_##LANE##_s16(c[i][2], vget_low_s16(b0h), av, lane0);  \
    c[i][3] = vmlal_high_##LANE##_s16(c[i][3], b0h, av, lane0);           \
    c[i][0] = vmlal_##LANE##_s16(c[i][0], vget_low_s16(b1l), av, lane1);  \
    c[i][1] = vmlal_high_##LANE##_s16(c[i][1], b1l, av, lane1);           \
    c[i][2] = vmlal_##LANE##_s16(c[i][2], vget_low_s16(b1h), av, lane1);  \
    c[i][3] = vmlal_high_##LANE##_s16(c[i][3], b1h, av, lane1);           \
  } while (0)

void kiln_qd8_qc8w_gemm_ukernel_6x16__neon(int64_t k, const int16_t* a, const int8_t* b,
                                           int32_t* out) {
  int32x4_t c[6][4];
  for (int i = 0; i < 6; ++i)
    for (int q = 0; q < 4; ++q) c[i][q] = vdupq_n_s32(0);
  const int8x16_t zero = vdupq_n_s8(0);
  /* k pairs; an odd K's last pair has a zero second A value and no second
   * B row (the blob has K rows): a zero row stands in. */
  for (int64_t p = 0; p < k; p += 2) {
    const int8x16_t r0 = vld1q_s8(b + p * 16);
    const int8x16_t r1 = p + 1 < k ? vld1q_s8(b + (p + 1) * 16) : zero;
    const int16x8_t b0l = vmovl_s8(vget_low_s8(r0)), b0h = vmovl_high_s8(r0);
    const int16x8_t b1l = vmovl_s8(vget_low_s8(r1)), b1h = vmovl_high_s8(r1);
    const int16_t* ap = a + (p / 2) * 12; /* rows 0-5, each as (A(i, p), A(i, p + 1)) */
    const int16x8_t a03 = vld1q_s16(ap);
    const int16x4_t a45 = vld1_s16(ap + 8);
    KILN_Q8A8N_ROW(0, a03, 0, 1, laneq);
    KILN_Q8A8N_ROW(1, a03, 2, 3, laneq);
    KILN_Q8A8N_ROW(2, a03, 4, 5, laneq);
    KILN_Q8A8N_ROW(3, a03, 6, 7, laneq);
    KILN_Q8A8N_ROW(4, a45, 0, 1, lane);
    KILN_Q8A8N_ROW(5, a45, 2, 3, lane);
  }
  for (int i = 0; i < 6; ++i)
    for (int q = 0; q < 4; ++q) vst1q_s32(out + i * 16 + 4 * q, c[i][q]);
}
#undef KILN_Q8A8N_ROW

/* The packer quantizes each row by the rule (a scale, then a division and
 * a rounding per element) and lays it out; it is a small share of a
 * prefill's time, and the portable one serves this level. */
void kiln_qd8_gemm_pack_a__neon(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                const uint16_t* a16, int64_t rs, int64_t cs, int16_t* out,
                                float* scales) {
  kiln_qd8_gemm_pack_a__generic(rows, rows_pad, k, a, a16, rs, cs, out, scales);
}

/* ---- decode: the GEMV ------------------------------------------------------ */

/* R rows x S panels, R * S * 4 int32 accumulators (at most 16). */
KILN_Q8A8N_AI void kiln_q8a8_tile_neon(const int R, const int S, int64_t k, const int8_t* a,
                                       int64_t lda, const float* sa, const int8_t* b,
                                       int64_t pstride, const float* scales, float* out,
                                       int64_t ostride) {
  int32x4_t acc[4][4][4];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int q = 0; q < 4; ++q) acc[s][i][q] = vdupq_n_s32(0);
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    int8x16_t a0[4], a1[4];
    for (int i = 0; i < R; ++i) {
      a0[i] = vld1q_dup_s8(a + i * lda + p);
      a1[i] = vld1q_dup_s8(a + i * lda + p + 1);
    }
    for (int s = 0; s < S; ++s) {
      const int8x16_t w0 = vld1q_s8(b + s * pstride + p * 16);
      const int8x16_t w1 = vld1q_s8(b + s * pstride + (p + 1) * 16);
      for (int i = 0; i < R; ++i) {
        int16x8_t lo = vmull_s8(vget_low_s8(w0), vget_low_s8(a0[i]));
        int16x8_t hi = vmull_high_s8(w0, a0[i]);
        lo = vmlal_s8(lo, vget_low_s8(w1), vget_low_s8(a1[i]));
        hi = vmlal_high_s8(hi, w1, a1[i]);
        acc[s][i][0] = vaddw_s16(acc[s][i][0], vget_low_s16(lo));
        acc[s][i][1] = vaddw_high_s16(acc[s][i][1], lo);
        acc[s][i][2] = vaddw_s16(acc[s][i][2], vget_low_s16(hi));
        acc[s][i][3] = vaddw_high_s16(acc[s][i][3], hi);
      }
    }
  }
  if (p < k)
    for (int s = 0; s < S; ++s) {
      const int8x16_t w0 = vld1q_s8(b + s * pstride + p * 16);
      for (int i = 0; i < R; ++i) {
        const int8x16_t a0 = vld1q_dup_s8(a + i * lda + p);
        const int16x8_t lo = vmull_s8(vget_low_s8(w0), vget_low_s8(a0));
        const int16x8_t hi = vmull_high_s8(w0, a0);
        acc[s][i][0] = vaddw_s16(acc[s][i][0], vget_low_s16(lo));
        acc[s][i][1] = vaddw_high_s16(acc[s][i][1], lo);
        acc[s][i][2] = vaddw_s16(acc[s][i][2], vget_low_s16(hi));
        acc[s][i][3] = vaddw_high_s16(acc[s][i][3], hi);
      }
    }
  /* (float)acc * s_i * scale_j, left to right as the rule. */
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      const float32x4_t si = vdupq_n_f32(sa[i]);
      for (int q = 0; q < 4; ++q)
        vst1q_f32(out + s * ostride + i * 16 + 4 * q,
                  vmulq_f32(vmulq_f32(vcvtq_f32_s32(acc[s][i][q]), si),
                            vld1q_f32(scales + s * 16 + 4 * q)));
    }
}

#define KILN_Q8A8N_CASE(R, S)                                                      \
  case (R) * 8 + (S):                                                              \
    kiln_q8a8_tile_neon((R), (S), k, ar, lda, sr, bq, pstride, sq, oq, ostride);   \
    break;

void kiln_qd8_qc8w_gemv__neon(int64_t m, int64_t k, const int8_t* a, int64_t lda, const float* sa,
                              const int8_t* b, const float* scales, int panels, float* out) {
  const int64_t ostride = m * 16, pstride = 16 * k;
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const int R = m - i0 < 4 ? (int)(m - i0) : 4;
    const int s_max = R == 1 ? 4 : R == 2 ? 2 : 1;
    const int8_t* ar = a + i0 * lda;
    const float* sr = sa + i0;
    for (int q = 0; q < panels;) {
      const int S = panels - q < s_max ? panels - q : s_max;
      const int8_t* bq = b + q * pstride;
      const float* sq = scales + q * 16;
      float* oq = out + q * ostride + i0 * 16;
      switch (R * 8 + S) {
        KILN_Q8A8N_CASE(1, 1) KILN_Q8A8N_CASE(1, 2) KILN_Q8A8N_CASE(1, 3) KILN_Q8A8N_CASE(1, 4)
        KILN_Q8A8N_CASE(2, 1) KILN_Q8A8N_CASE(2, 2) KILN_Q8A8N_CASE(3, 1) KILN_Q8A8N_CASE(4, 1)
        default: break;
      }
      q += S;
    }
  }
}
