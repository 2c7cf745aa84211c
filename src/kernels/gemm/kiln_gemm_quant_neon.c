/* Quantized weights on aarch64 ASIMD (NEON): the small-M GEMVs of LLM
 * decode, and the dequantizers that feed the fp32 NEON GEMM for M > 8
 * (prefill), on the blob layout of kiln_gemm.h (kiln_gemm_quant_internal.h
 * gives their contracts). Compiled only on aarch64 (ASIMD is baseline
 * there) and called only when kiln_cpu_isa() == KILN_ISA_NEON.
 *
 * Why: the portable kernels assemble a nibble at a time (GCC 12 -O3: about
 * 70 instructions per 16 int4 weights and row, accumulators in memory), so
 * int4 decode on an Arm server would run slower than fp32 (whose NEON GEMV
 * is bound by memory) instead of faster. Here a weight costs about one
 * instruction at one row:
 *   int8: per 16 weights (one panel row) SXTL x 6 and SCVTF x 4 widen them
 *   to four fp32 quarters, and each row does 4 FMLA by element with A.
 *   int4: per 32 weights (a row pair's 16 bytes) AND / AND for the two
 *   nibbles (the high one kept at 16 x its value: the factor goes into the
 *   group's scale, exactly, a power of two), UXTL x 12 and UCVTF x 8; the
 *   lanes stay in the blob's order, (column, row parity) pairs, so A enters
 *   as (a[2t], a[2t+1], a[2t], a[2t+1]) and each row does 8 FMLA; a group
 *   ends with pairwise adds (the two parities of a column) and scale * (sum
 *   - z * A's group sum), as the other levels do.
 *   Dequantizers: a panel row's 16 weights as (q - z) * scale (int4: UZP1 /
 *   UZP2 of the two nibble vectors give row 2t's and row 2t + 1's columns
 *   in order), the scalar rule's values exactly.
 * Tested under qemu-aarch64 only (make test-arm64, against the scalar
 * reference at every shape of tests/c/test_gemm_quant.c): the speed on a
 * real Arm core has never been measured. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kernels/gemm/kiln_gemm_quant_neon.h"

#define KILN_QN_AI static inline __attribute__((always_inline))

/* ---- int8 ----------------------------------------------------------------- */

/* Panel row p (16 int8 at b) as four fp32 quarters. */
KILN_QN_AI void kiln_q8_widen_neon(const int8_t* b, float32x4_t w[4]) {
  const int8x16_t v = vld1q_s8(b);
  const int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
  w[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
  w[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
  w[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
  w[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

/* R rows x S panels: R * S * 4 accumulators (at most 16). */
KILN_QN_AI void kiln_q8_tile_neon(const int R, const int S, int64_t k, const float* a, int64_t lda,
                                  const int8_t* b, int64_t pstride, const float* scales,
                                  float* out, int64_t ostride) {
  float32x4_t acc[4][4][4];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int q = 0; q < 4; ++q) acc[s][i][q] = vdupq_n_f32(0.0f);
  int64_t p = 0;
  /* Four rows of B a step: A's four values of each row in one q register,
   * used lane by lane. */
  for (; p + 4 <= k; p += 4) {
    float32x4_t av[4];
    for (int i = 0; i < R; ++i) av[i] = vld1q_f32(a + i * lda + p);
#define KILN_Q8_STEP(L)                                                          \
  for (int s = 0; s < S; ++s) {                                                  \
    float32x4_t w[4];                                                            \
    kiln_q8_widen_neon(b + s * pstride + (p + (L)) * 16, w);                     \
    for (int i = 0; i < R; ++i)                                                  \
      for (int q = 0; q < 4; ++q) acc[s][i][q] = vfmaq_laneq_f32(acc[s][i][q], w[q], av[i], L); \
  }
    KILN_Q8_STEP(0)
    KILN_Q8_STEP(1)
    KILN_Q8_STEP(2)
    KILN_Q8_STEP(3)
#undef KILN_Q8_STEP
  }
  for (; p < k; ++p)
    for (int s = 0; s < S; ++s) {
      float32x4_t w[4];
      kiln_q8_widen_neon(b + s * pstride + p * 16, w);
      for (int i = 0; i < R; ++i)
        for (int q = 0; q < 4; ++q) acc[s][i][q] = vfmaq_n_f32(acc[s][i][q], w[q], a[i * lda + p]);
    }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int q = 0; q < 4; ++q)
        vst1q_f32(out + s * ostride + i * 16 + 4 * q,
                  vmulq_f32(acc[s][i][q], vld1q_f32(scales + s * 16 + 4 * q)));
}

#define KILN_Q8N_CASE(R, S)                                                     \
  case (R) * 8 + (S):                                                           \
    kiln_q8_tile_neon((R), (S), k, ar, lda, bq, pstride, sq, oq, ostride);      \
    break;

void kiln_f32_qc8w_gemv__neon(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                              const float* scales, int panels, float* out) {
  const int64_t ostride = m * 16, pstride = 16 * k;
  /* Rows four at a time (a row block's panels are read again from L1/L2
   * by the next block: m > 4 only at batch 5..8). */
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const int R = m - i0 < 4 ? (int)(m - i0) : 4;
    const int s_max = R == 1 ? 4 : R == 2 ? 2 : 1;
    const float* ar = a + i0 * lda;
    for (int q = 0; q < panels;) {
      const int S = panels - q < s_max ? panels - q : s_max;
      const int8_t* bq = b + q * pstride;
      const float* sq = scales + q * 16;
      float* oq = out + q * ostride + i0 * 16;
      switch (R * 8 + S) {
        KILN_Q8N_CASE(1, 1) KILN_Q8N_CASE(1, 2) KILN_Q8N_CASE(1, 3) KILN_Q8N_CASE(1, 4)
        KILN_Q8N_CASE(2, 1) KILN_Q8N_CASE(2, 2) KILN_Q8N_CASE(3, 1) KILN_Q8N_CASE(4, 1)
        default: break;
      }
      q += S;
    }
  }
}

/* ---- int4 ----------------------------------------------------------------- */

/* Four fp32 quarters of 16 bytes (values 0..255). */
KILN_QN_AI void kiln_q4_widen_neon(uint8x16_t v, float32x4_t w[4]) {
  const uint16x8_t lo = vmovl_u8(vget_low_u8(v)), hi = vmovl_high_u8(v);
  w[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
  w[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
  w[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
  w[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* R (1 or 2) rows x one panel. acc[i][h * 4 + q], lane e: column 2 q + e /
 * 2 (+ 8 when h, the high nibbles, held at 16 x), row parity e % 2. */
KILN_QN_AI void kiln_q4_tile_neon(const int R, int64_t kg, int group, int form, const float* a,
                                  int64_t lda, const float* asum, const uint8_t* b, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const uint8x16_t m_lo = vdupq_n_u8(0x0F), m_hi = vdupq_n_u8(0xF0);
  float32x4_t o[2][4];
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < 4; ++q) o[i][q] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < kg; ++g) {
    const uint8_t* blk = b + g * gb;
    const uint8_t* bytes = blk + hdr;
    float32x4_t acc[2][8];
    for (int i = 0; i < R; ++i)
      for (int u = 0; u < 8; ++u) acc[i][u] = vdupq_n_f32(0.0f);
    for (int t = 0; t < group / 2; ++t) {
      const uint8x16_t v = vld1q_u8(bytes + 16 * t);
      float32x4_t w[8];
      kiln_q4_widen_neon(vandq_u8(v, m_lo), w);
      kiln_q4_widen_neon(vandq_u8(v, m_hi), w + 4);
      for (int i = 0; i < R; ++i) {
        const float32x2_t a2 = vld1_f32(a + i * lda + g * group + 2 * t);
        const float32x4_t av = vcombine_f32(a2, a2);
        for (int u = 0; u < 8; ++u) acc[i][u] = vfmaq_f32(acc[i][u], w[u], av);
      }
    }
    float32x4_t sv[4], zv[4];
    kiln_q4_header16_neon(blk, 0, bf16, sv);
    if (asym) kiln_q4_header16_neon(blk, 16, bf16, zv);
    else
      for (int q = 0; q < 4; ++q) zv[q] = vdupq_n_f32(8.0f);
    const float32x4_t sixteenth = vdupq_n_f32(1.0f / 16.0f);
    for (int i = 0; i < R; ++i) {
      const float* as = asum + (i * kg + g) * 2;
      const float32x4_t asv = vdupq_n_f32(as[0] + as[1]);
      /* Columns 0-3, 4-7 (low nibbles), 8-11, 12-15 (high, times 16). */
      for (int q = 0; q < 4; ++q) {
        float32x4_t sum = vpaddq_f32(acc[i][2 * q], acc[i][2 * q + 1]);
        if (q >= 2) sum = vmulq_f32(sum, sixteenth);
        o[i][q] = vfmaq_f32(o[i][q], sv[q], vfmsq_f32(sum, zv[q], asv));
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int q = 0; q < 4; ++q) vst1q_f32(out + i * 16 + 4 * q, o[i][q]);
}

void kiln_f32_qb4w_gemv__neon(int64_t m, int64_t kg, int group, int form, const float* a,
                              int64_t lda, const float* asum, const uint8_t* b, int panels,
                              float* out) {
  const int64_t ostride = m * 16, pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  /* Rows two at a time: 2 x (8 group + 4 running) accumulators and 8
   * widened weights fit the 32 q registers. */
  for (int q = 0; q < panels; ++q)
    for (int64_t i0 = 0; i0 < m; i0 += 2) {
      const float* ar = a + i0 * lda;
      const float* sr = asum + i0 * kg * 2;
      float* oq = out + q * ostride + i0 * 16;
      if (m - i0 >= 2)
        kiln_q4_tile_neon(2, kg, group, form, ar, lda, sr, b + q * pstride, oq);
      else
        kiln_q4_tile_neon(1, kg, group, form, ar, lda, sr, b + q * pstride, oq);
    }
}

/* ---- dequantizers (the blocked path) --------------------------------------- */

void kiln_qc8w_dequant__neon(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                             const float* scales, int panels, float* out) {
  for (int s = 0; s < panels; ++s) {
    float32x4_t sv[4];
    for (int q = 0; q < 4; ++q) sv[q] = vld1q_f32(scales + s * 16 + 4 * q);
    const int8_t* bs = b + ((int64_t)s * k + p0) * 16;
    float* os = out + (int64_t)s * 16 * kc;
    for (int64_t p = 0; p < kc; ++p) {
      float32x4_t w[4];
      kiln_q8_widen_neon(bs + p * 16, w);
      for (int q = 0; q < 4; ++q) vst1q_f32(os + p * 16 + 4 * q, vmulq_f32(w[q], sv[q]));
    }
  }
}

/* Rows [p0, p0 + kc) may start and end inside a group and on an odd row:
 * the groups at the ends are walked by whole row pairs and the rows
 * outside the range skipped. */
void kiln_qb4w_dequant__neon(int64_t kg, int group, int form, int64_t p0, int64_t kc,
                             const uint8_t* b, int panels, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  const int64_t p1 = p0 + kc;
  for (int s = 0; s < panels; ++s)
    for (int64_t g = p0 / group; g * group < p1; ++g) {
      const uint8_t* blk = b + ((int64_t)s * kg + g) * gb;
      float32x4_t sv[4], zv[4];
      kiln_q4_header16_neon(blk, 0, bf16, sv);
      if (asym) kiln_q4_header16_neon(blk, 16, bf16, zv);
      else
        for (int q = 0; q < 4; ++q) zv[q] = vdupq_n_f32(8.0f);
      /* Rows [lo, hi) of this group, written at og + (row - lo) * 16. */
      const int64_t base = g * group;
      const int64_t lo = p0 > base ? p0 - base : 0, hi = p1 - base < group ? p1 - base : group;
      float* og = out + ((int64_t)s * kc + base + lo - p0) * 16;
      for (int64_t t = lo / 2; 2 * t < hi; ++t) {
        const uint8x16_t v = vld1q_u8(blk + hdr + t * 16);
        const uint8x16_t l = vandq_u8(v, m4), h = vshrq_n_u8(v, 4);
        for (int r = 0; r < 2; ++r) {
          const int64_t row = 2 * t + r;
          if (row < lo || row >= hi) continue;
          /* Bytes (column c, parity r) at 2c + r: this row's columns 0-7
           * from the low nibbles, 8-15 from the high ones. */
          float32x4_t w[4];
          kiln_q4_widen_neon(r ? vuzp2q_u8(l, h) : vuzp1q_u8(l, h), w);
          for (int q = 0; q < 4; ++q)
            vst1q_f32(og + (row - lo) * 16 + 4 * q, vmulq_f32(vsubq_f32(w[q], zv[q]), sv[q]));
        }
      }
    }
}
