/* int8 x int8 on Arm's dot-product extension (SDOT, ARMv8.2 dotprod: every
 * Neoverse core, Graviton 2 onward): the int8 engine's blocked microkernel
 * (prefill) and the decode GEMV (kiln_gemm_quant_internal.h's contracts;
 * the rule is kiln_gemm.h's int8:a8 rule). Compiled only with the neondot
 * flags and called only when kiln_gemm_int8_engine() says the CPU has
 * dotprod at the neon level.
 *
 * SDOT by element sums four products of signed bytes into each int32 lane:
 * acc[l] += B quad l . A quad (one of four in another register), 16
 * multiply-adds an instruction, where the ASIMD kernels
 * (kiln_gemm_q8a8_neon.c) take 4 per SMLAL. Both operands are signed, so
 * the sums need no correction (unlike VPDPBUSD's unsigned weights) and are
 * exact: every kernel gives the reference's bits.
 *
 * The blob's 16-column panels hold K rows of 16 bytes; SDOT wants each
 * column's four consecutive K bytes side by side. Four ZIPs of bytes and
 * four of halfwords turn four rows (one 64-byte load) into the four column
 * quad vectors at run time, so the .kiln layout stays the one every CPU
 * reads (as the VNNI kernel's VPERMB does).
 *   microkernel: the engine's 12-row panels of A quads, taken 6 rows at a
 *   time (24 accumulators + 4 B quad vectors + 2 A registers of the 32):
 *   per quad of K, 1 load of B, 8 ZIPs, 2 loads of A and 24 SDOT for 384
 *   products: 38 instructions in the loop (GCC 12), 0.10 a product against
 *   the SMLAL kernel's 0.36;
 *   GEMV: per quad of K and panel, the same 9 to lay B out, then one SDOT
 *   per 4 columns and row (a row's A quad broadcast): 0.24 instructions a
 *   product at one row, 0.14 at four (SMLAL: 0.38 at one).
 * Tested under qemu-aarch64 (make test-arm64); never timed on an Arm core. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kernels/gemm/kiln_gemm_quant_neon.h"

#define KILN_Q8A8D_AI static inline __attribute__((always_inline))

/* Rows r0..r3 (B(p + t, j) for j = 0..15) as four vectors of column quads:
 * q[c] holds columns 4c..4c + 3, each as (B(p, j), .., B(p + 3, j)). */
KILN_Q8A8D_AI void kiln_q8a8d_quads(int8x16_t r0, int8x16_t r1, int8x16_t r2, int8x16_t r3,
                                    int8x16_t q[4]) {
  const int16x8_t t0 = vreinterpretq_s16_s8(vzip1q_s8(r0, r1)); /* (r0, r1) pairs, columns 0-7 */
  const int16x8_t t1 = vreinterpretq_s16_s8(vzip2q_s8(r0, r1)); /* columns 8-15 */
  const int16x8_t t2 = vreinterpretq_s16_s8(vzip1q_s8(r2, r3));
  const int16x8_t t3 = vreinterpretq_s16_s8(vzip2q_s8(r2, r3));
  q[0] = vreinterpretq_s8_s16(vzip1q_s16(t0, t2));
  q[1] = vreinterpretq_s8_s16(vzip2q_s16(t0, t2));
  q[2] = vreinterpretq_s8_s16(vzip1q_s16(t1, t3));
  q[3] = vreinterpretq_s8_s16(vzip2q_s16(t1, t3));
}

/* The last partial quad of B rows (p < k < p + 4) as column quads: rows
 * at or past k are zero and never read (the blob ends at row k). */
KILN_Q8A8D_AI void kiln_q8a8d_tail_quads(const int8_t* b, int64_t p, int64_t k, int8x16_t q[4]) {
  int8x16_t r[4];
  for (int t = 0; t < 4; ++t) r[t] = p + t < k ? vld1q_s8(b + (p + t) * 16) : vdupq_n_s8(0);
  kiln_q8a8d_quads(r[0], r[1], r[2], r[3], q);
}

/* ---- blocked: the 12x16 microkernel, as two passes of 6 rows ------------- */

/* Six rows of a 12-row quad panel (a: row 0 of the six, in the quad at
 * (p / 4) * 48) by one 16-column panel, over all of K, into out (6 x 16). */
/* One quad of K for the four columns of quad vector q: the six rows' quads
 * (a03: rows 0-3, a45: rows 4-5) into accumulators c0j..c5j. */
#define KILN_Q8A8D_COLS(j, q, a03, a45)           \
  c0##j = vdotq_laneq_s32(c0##j, (q), (a03), 0); \
  c1##j = vdotq_laneq_s32(c1##j, (q), (a03), 1); \
  c2##j = vdotq_laneq_s32(c2##j, (q), (a03), 2); \
  c3##j = vdotq_laneq_s32(c3##j, (q), (a03), 3); \
  c4##j = vdotq_lane_s32(c4##j, (q), (a45), 0);  \
  c5##j = vdotq_lane_s32(c5##j, (q), (a45), 1)

/* One quad of K: rows r0..r3 of the panel, laid out as column quads a pair
 * of quad vectors at a time (each pair's SDOTs before the next pair's
 * ZIPs: 24 accumulators, 2 A and at most 6 B registers live). */
#define KILN_Q8A8D_QUAD(r0, r1, r2, r3, a03, a45)                              \
  do {                                                                         \
    const int16x8_t t0 = vreinterpretq_s16_s8(vzip1q_s8((r0), (r1)));          \
    const int16x8_t t2 = vreinterpretq_s16_s8(vzip1q_s8((r2), (r3)));          \
    const int16x8_t t1 = vreinterpretq_s16_s8(vzip2q_s8((r0), (r1)));          \
    const int16x8_t t3 = vreinterpretq_s16_s8(vzip2q_s8((r2), (r3)));          \
    const int8x16_t q0 = vreinterpretq_s8_s16(vzip1q_s16(t0, t2));             \
    const int8x16_t q1 = vreinterpretq_s8_s16(vzip2q_s16(t0, t2));             \
    KILN_Q8A8D_COLS(0, q0, a03, a45);                                          \
    KILN_Q8A8D_COLS(1, q1, a03, a45);                                          \
    const int8x16_t q2 = vreinterpretq_s8_s16(vzip1q_s16(t1, t3));             \
    const int8x16_t q3 = vreinterpretq_s8_s16(vzip2q_s16(t1, t3));             \
    KILN_Q8A8D_COLS(2, q2, a03, a45);                                          \
    KILN_Q8A8D_COLS(3, q3, a03, a45);                                          \
  } while (0)

#define KILN_Q8A8D_ROW_DECL(i) \
  int32x4_t c##i##0 = vdupq_n_s32(0), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0
#define KILN_Q8A8D_ROW_STORE(i)                 \
  vst1q_s32(out + (i) * 16 + 0, c##i##0);       \
  vst1q_s32(out + (i) * 16 + 4, c##i##1);       \
  vst1q_s32(out + (i) * 16 + 8, c##i##2);       \
  vst1q_s32(out + (i) * 16 + 12, c##i##3)

/* Six rows of a 12-row quad panel (a: row 0 of the six, in the quad at
 * (p / 4) * 48) by one 16-column panel, over all of K, into out (6 x 16).
 * The accumulators are named variables and the whole quads' loop has no
 * branch (GCC 12 keeps an array of them in memory, storing all 24 every
 * quad); the partial quad follows the loop. GCC's first scheduling pass
 * hoists every load and ZIP above the SDOTs and spills an accumulator
 * (a load and a store each quad); without it the loop is the 38
 * instructions above, none to the stack. */
KILN_NEON_NO_PRESCHEDULE static void kiln_q8a8d_6x16(int64_t k, const int8_t* a, const int8_t* b,
                                                     int32_t* out) {
  KILN_Q8A8D_ROW_DECL(0);
  KILN_Q8A8D_ROW_DECL(1);
  KILN_Q8A8D_ROW_DECL(2);
  KILN_Q8A8D_ROW_DECL(3);
  KILN_Q8A8D_ROW_DECL(4);
  KILN_Q8A8D_ROW_DECL(5);
  int64_t p = 0;
  for (; p + 4 <= k; p += 4, a += 48, b += 64) {
    const int8x16x4_t r = vld1q_s8_x4(b);
    KILN_Q8A8D_QUAD(r.val[0], r.val[1], r.val[2], r.val[3], vld1q_s8(a), vld1_s8(a + 16));
  }
  if (p < k) {
    const int8x16_t z = vdupq_n_s8(0);
    const int8x16_t r0 = vld1q_s8(b), r1 = k - p > 1 ? vld1q_s8(b + 16) : z,
                    r2 = k - p > 2 ? vld1q_s8(b + 32) : z;
    KILN_Q8A8D_QUAD(r0, r1, r2, z, vld1q_s8(a), vld1_s8(a + 16));
  }
  KILN_Q8A8D_ROW_STORE(0);
  KILN_Q8A8D_ROW_STORE(1);
  KILN_Q8A8D_ROW_STORE(2);
  KILN_Q8A8D_ROW_STORE(3);
  KILN_Q8A8D_ROW_STORE(4);
  KILN_Q8A8D_ROW_STORE(5);
}
#undef KILN_Q8A8D_ROW_STORE
#undef KILN_Q8A8D_ROW_DECL
#undef KILN_Q8A8D_QUAD
#undef KILN_Q8A8D_COLS

void kiln_qd8_qc8w_gemm_ukernel_12x16__neondot(int64_t k, const int8_t* a, const int8_t* b,
                                               int64_t b_next, int ns, int32_t* out) {
  for (int s = 0; s < ns; ++s)
    for (int h = 0; h < 2; ++h) kiln_q8a8d_6x16(k, a + 24 * h, b + s * b_next, out + s * 192 + 96 * h);
}

/* The engine's quad packer: the portable one (each element is a division
 * and a rounding by the rule; a small share of a prefill's time). The
 * sums it also writes are not needed here (signed sums need no
 * correction). */
void kiln_qd8_gemm_pack_a_x4__neondot(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                      const uint16_t* a16, int64_t rs, int64_t cs, int8_t* out,
                                      float* scales, int32_t* sums) {
  kiln_qd8_gemm_pack_a_x4__generic(rows, rows_pad, k, a, a16, rs, cs, out, scales, sums);
}

/* ---- decode: the GEMV ------------------------------------------------------ */

/* One quad of K (rows p.. of each panel; whole: p + 4 <= k) for R rows x
 * S panels into acc. */
KILN_Q8A8D_AI void kiln_q8a8d_gemv_quad(const int R, const int S, const int whole, int64_t p,
                                        int64_t k, const int8_t* a, int64_t lda, const int8_t* b,
                                        int64_t pstride, int32x4_t acc[4][4][4]) {
  int8x8_t av[4];
  for (int i = 0; i < R; ++i) {
    int32_t w;
    memcpy(&w, a + i * lda + p, 4);
    av[i] = vreinterpret_s8_s32(vdup_n_s32(w));
  }
  for (int s = 0; s < S; ++s) {
    int8x16_t q[4];
    if (whole) {
      const int8x16x4_t r = vld1q_s8_x4(b + s * pstride + p * 16);
      kiln_q8a8d_quads(r.val[0], r.val[1], r.val[2], r.val[3], q);
    } else {
      kiln_q8a8d_tail_quads(b + s * pstride, p, k, q);
    }
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < 4; ++j) acc[s][i][j] = vdotq_lane_s32(acc[s][i][j], q[j], av[i], 0);
  }
}

/* R rows x S panels, R * S * 4 int32 accumulators (at most 16). A's rows
 * are zero-padded to k rounded up to 8, so a quad starting below k is
 * whole. */
KILN_Q8A8D_AI void kiln_q8a8d_tile(const int R, const int S, int64_t k, const int8_t* a,
                                   int64_t lda, const float* sa, const int8_t* b,
                                   int64_t pstride, const float* scales, float* out,
                                   int64_t ostride) {
  int32x4_t acc[4][4][4];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < 4; ++j) acc[s][i][j] = vdupq_n_s32(0);
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) kiln_q8a8d_gemv_quad(R, S, 1, p, k, a, lda, b, pstride, acc);
  if (p < k) kiln_q8a8d_gemv_quad(R, S, 0, p, k, a, lda, b, pstride, acc);
  /* (float)acc * s_i * scale_j, left to right as the rule. */
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      const float32x4_t si = vdupq_n_f32(sa[i]);
      for (int j = 0; j < 4; ++j)
        vst1q_f32(out + s * ostride + i * 16 + 4 * j,
                  vmulq_f32(vmulq_f32(vcvtq_f32_s32(acc[s][i][j]), si),
                            vld1q_f32(scales + s * 16 + 4 * j)));
    }
}

#define KILN_Q8A8D_CASE(R, S)                                                   \
  case (R) * 8 + (S):                                                           \
    kiln_q8a8d_tile((R), (S), k, ar, lda, sr, bq, pstride, sq, oq, ostride);    \
    break;

void kiln_qd8_qc8w_gemv__neondot(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                 const float* sa, const int8_t* b, const float* scales, int panels,
                                 float* out) {
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
        KILN_Q8A8D_CASE(1, 1) KILN_Q8A8D_CASE(1, 2) KILN_Q8A8D_CASE(1, 3) KILN_Q8A8D_CASE(1, 4)
        KILN_Q8A8D_CASE(2, 1) KILN_Q8A8D_CASE(2, 2) KILN_Q8A8D_CASE(3, 1) KILN_Q8A8D_CASE(4, 1)
        default: break;
      }
      q += S;
    }
  }
}
