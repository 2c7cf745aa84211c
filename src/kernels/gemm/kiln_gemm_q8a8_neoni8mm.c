/* int8 x int8 prefill on Arm's int8 matrix multiply (SMMLA, FEAT_I8MM:
 * Neoverse V1, V2, N2 and later, Graviton 3 onward): the blocked
 * microkernel of the SDOT engine (kiln_gemm_q8a8_neondot.c), on the same
 * 12-row A quad panels, when the CPU also has i8mm. The decode GEMVs stay
 * SDOT's: SMMLA multiplies pairs of rows, half of it idle at one row.
 * Compiled only with the neoni8mm flags and called only when
 * kiln_gemm_q8a8.c's driver sees i8mm beside the SDOT engine.
 *
 * SMMLA multiplies a 2 x 8 int8 matrix (two rows of A, eight K each) by an
 * 8 x 2 one (two columns of B) into a 2 x 2 int32 tile: 32 multiply-adds
 * an instruction, twice SDOT's 16. Both operands signed, sums exact: the
 * kernel gives the scalar reference's bits.
 *
 * B: SMMLA wants each column's eight consecutive K bytes, two columns to a
 * register. The blob holds K rows of 16 columns; a strip is laid out once
 * per task (prep_b: 24 ZIPs per 8 rows, into a buffer that stays in L2)
 * and then read by every row tile of the task, where the SDOT kernel
 * re-zips B in every tile. A: two K quads of the quad panel, zipped as
 * words, are two rows' eight K bytes: no packer of its own.
 *   per 8 K of a 6 x 16 pass: 8 loads of B, 4 loads and 4 ZIPs of A,
 *   24 SMMLA for 768 products: about 0.05 instructions a product, against
 *   the SDOT kernel's 0.10 (38 per 384).
 * Tested under qemu-aarch64 (make test-arm64, `-cpu max` has i8mm); never
 * timed on an Arm core. */
#include <arm_neon.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kernels/gemm/kiln_gemm_quant_neon.h"

/* One 16-column panel of the blob (k rows of 16 int8 at b) laid out for
 * SMMLA: per 8 rows o (rows past k zero), 8 registers of 16 bytes, column
 * pair c at out + o * 128 + c * 16: B(8o .. 8o + 7, 2c), then B(8o ..
 * 8o + 7, 2c + 1). */
/* Eight rows r as SMMLA's eight column pairs at out. */
static inline __attribute__((always_inline)) void kiln_q8a8m_prep8(const int8x16_t r[8], int8_t* out) {
  /* Rows in pairs, then quads (columns' four K bytes, as SDOT's), then
   * the two quads of a column side by side. */
  int16x8_t pl[4], ph[4];
  for (int t = 0; t < 4; ++t) {
    pl[t] = vreinterpretq_s16_s8(vzip1q_s8(r[2 * t], r[2 * t + 1])); /* columns 0-7 */
    ph[t] = vreinterpretq_s16_s8(vzip2q_s8(r[2 * t], r[2 * t + 1])); /* columns 8-15 */
  }
  /* q[h][c4]: rows 4h..4h + 3, columns 4 c4 .. 4 c4 + 3 (a K quad each). */
  int32x4_t q[2][4];
  for (int h = 0; h < 2; ++h) {
    q[h][0] = vreinterpretq_s32_s16(vzip1q_s16(pl[2 * h], pl[2 * h + 1]));
    q[h][1] = vreinterpretq_s32_s16(vzip2q_s16(pl[2 * h], pl[2 * h + 1]));
    q[h][2] = vreinterpretq_s32_s16(vzip1q_s16(ph[2 * h], ph[2 * h + 1]));
    q[h][3] = vreinterpretq_s32_s16(vzip2q_s16(ph[2 * h], ph[2 * h + 1]));
  }
  for (int c4 = 0; c4 < 4; ++c4) {
    vst1q_s8(out + c4 * 32, vreinterpretq_s8_s32(vzip1q_s32(q[0][c4], q[1][c4])));
    vst1q_s8(out + c4 * 32 + 16, vreinterpretq_s8_s32(vzip2q_s32(q[0][c4], q[1][c4])));
  }
}

void kiln_qd8_qc8w_gemm_prep_b__neoni8mm(int64_t k, const int8_t* b, int8_t* out) {
  int8x16_t r[8];
  int64_t p = 0;
  for (; p + 8 <= k; p += 8, out += 128) {
    const int8x16x4_t r03 = vld1q_s8_x4(b + p * 16), r47 = vld1q_s8_x4(b + p * 16 + 64);
    for (int t = 0; t < 4; ++t) r[t] = r03.val[t], r[4 + t] = r47.val[t];
    kiln_q8a8m_prep8(r, out);
  }
  if (p < k) { /* the last rows, zeros past k (the blob ends at row k) */
    for (int t = 0; t < 8; ++t) r[t] = p + t < k ? vld1q_s8(b + (p + t) * 16) : vdupq_n_s8(0);
    kiln_q8a8m_prep8(r, out);
  }
}

/* Accumulators c<pair><column pair>: rows (2 pair, 2 pair + 1) x columns
 * (2 cp, 2 cp + 1) as SMMLA's 2 x 2 tile (row-major). Named variables: GCC
 * 12 keeps an array of them in memory across the loop. */
#define KILN_Q8A8M_DECL(i)                                                                 \
  int32x4_t c##i##0 = vdupq_n_s32(0), c##i##1 = c##i##0, c##i##2 = c##i##0, c##i##3 = c##i##0, \
            c##i##4 = c##i##0, c##i##5 = c##i##0, c##i##6 = c##i##0, c##i##7 = c##i##0
/* Column pair j of the 8 K rows at bp, by the three row pairs. */
#define KILN_Q8A8M_COL(j)                               \
  do {                                                  \
    const int8x16_t bj = vld1q_s8(bp + 16 * (j));       \
    c0##j = vmmlaq_s32(c0##j, a01, bj);                 \
    c1##j = vmmlaq_s32(c1##j, a23, bj);                 \
    c2##j = vmmlaq_s32(c2##j, a45, bj);                 \
  } while (0)
/* The eight column pairs of the 8 K rows at bp. */
#define KILN_Q8A8M_COLS() \
  KILN_Q8A8M_COL(0);      \
  KILN_Q8A8M_COL(1);      \
  KILN_Q8A8M_COL(2);      \
  KILN_Q8A8M_COL(3);      \
  KILN_Q8A8M_COL(4);      \
  KILN_Q8A8M_COL(5);      \
  KILN_Q8A8M_COL(6);      \
  KILN_Q8A8M_COL(7)
/* Row pair i's tiles out as two rows of 16: the 2 x 2 tiles' halves. */
#define KILN_Q8A8M_STORE(i)                                                                 \
  do {                                                                                      \
    int32_t* r0 = out + 32 * (i);                                                           \
    int32_t* r1 = r0 + 16;                                                                  \
    vst1q_s32(r0 + 0, vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(c##i##0),      \
                                                        vreinterpretq_s64_s32(c##i##1))));  \
    vst1q_s32(r1 + 0, vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(c##i##0),      \
                                                        vreinterpretq_s64_s32(c##i##1))));  \
    vst1q_s32(r0 + 4, vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(c##i##2),      \
                                                        vreinterpretq_s64_s32(c##i##3))));  \
    vst1q_s32(r1 + 4, vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(c##i##2),      \
                                                        vreinterpretq_s64_s32(c##i##3))));  \
    vst1q_s32(r0 + 8, vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(c##i##4),      \
                                                        vreinterpretq_s64_s32(c##i##5))));  \
    vst1q_s32(r1 + 8, vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(c##i##4),      \
                                                        vreinterpretq_s64_s32(c##i##5))));  \
    vst1q_s32(r0 + 12, vreinterpretq_s32_s64(vzip1q_s64(vreinterpretq_s64_s32(c##i##6),     \
                                                         vreinterpretq_s64_s32(c##i##7)))); \
    vst1q_s32(r1 + 12, vreinterpretq_s32_s64(vzip2q_s64(vreinterpretq_s64_s32(c##i##6),     \
                                                         vreinterpretq_s64_s32(c##i##7)))); \
  } while (0)

/* Rows 4 and 5 of a pass: 8 bytes (their two quads) at q and at q + 48. */
static inline __attribute__((always_inline)) int8x16_t kiln_q8a8m_pair45(int8x8_t m0, int8x8_t m1) {
  const int32x2_t x = vreinterpret_s32_s8(m0), y = vreinterpret_s32_s8(m1);
  return vreinterpretq_s8_s32(vcombine_s32(vzip1_s32(x, y), vzip2_s32(x, y)));
}

/* Six rows of a 12-row quad panel (a: row 0 of the six, in the quad at
 * (p / 4) * 48; quads = ceil(k / 4) of them) by one prepared 16-column
 * panel bp, over all of K, into out (6 x 16). The loop takes two quads (8
 * K) a step; an odd last quad pairs with zeros (the panel ends there). */
KILN_NEON_NO_PRESCHEDULE static void kiln_q8a8m_6x16(int64_t k, const int8_t* a,
                                                     const int8_t* bp, int32_t* out) {
  KILN_Q8A8M_DECL(0);
  KILN_Q8A8M_DECL(1);
  KILN_Q8A8M_DECL(2);
  const int64_t quads = (k + 3) / 4;
  int64_t q = 0;
  for (; q + 2 <= quads; q += 2, a += 96, bp += 128) {
    const int32x4_t l0 = vreinterpretq_s32_s8(vld1q_s8(a)), l1 = vreinterpretq_s32_s8(vld1q_s8(a + 48));
    const int8x16_t a01 = vreinterpretq_s8_s32(vzip1q_s32(l0, l1));
    const int8x16_t a23 = vreinterpretq_s8_s32(vzip2q_s32(l0, l1));
    const int8x16_t a45 = kiln_q8a8m_pair45(vld1_s8(a + 16), vld1_s8(a + 64));
    KILN_Q8A8M_COLS();
  }
  if (q < quads) {
    const int32x4_t l0 = vreinterpretq_s32_s8(vld1q_s8(a)), l1 = vdupq_n_s32(0);
    const int8x16_t a01 = vreinterpretq_s8_s32(vzip1q_s32(l0, l1));
    const int8x16_t a23 = vreinterpretq_s8_s32(vzip2q_s32(l0, l1));
    const int8x16_t a45 = kiln_q8a8m_pair45(vld1_s8(a + 16), vdup_n_s8(0));
    KILN_Q8A8M_COLS();
  }
  KILN_Q8A8M_STORE(0);
  KILN_Q8A8M_STORE(1);
  KILN_Q8A8M_STORE(2);
}
#undef KILN_Q8A8M_STORE
#undef KILN_Q8A8M_COLS
#undef KILN_Q8A8M_COL
#undef KILN_Q8A8M_DECL

void kiln_qd8_qc8w_gemm_ukernel_12x16__neoni8mm(int64_t k, const int8_t* a, const int8_t* bp,
                                                int32_t* out) {
  kiln_q8a8m_6x16(k, a, bp, out);
  kiln_q8a8m_6x16(k, a + 24, bp, out + 96);
}
