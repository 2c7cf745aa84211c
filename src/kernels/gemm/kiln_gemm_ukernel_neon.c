/* aarch64 ASIMD (NEON) kernels: the 6x16 GEMM microkernel and the small-M
 * GEMV over the ISA-independent packed B (16-float panels). Compiled only
 * on aarch64 (meson: is_aarch64; ASIMD is baseline there, so no extra
 * flags) and called only when kiln_cpu_isa() == KILN_ISA_NEON.
 *
 * 6x16 keeps 24 q accumulators (6 rows x four 4-wide quarters of a packed
 * B panel row), 4 q registers for B and 2 for the six A values of a k step
 * (one q, one d), used lane by lane with FMLA (by element): 30 of the 32
 * vector registers. Per k step: 4 B loads + 2 A loads feed 24 FMAs, enough
 * independent chains to cover the FMA latency of Neoverse cores (4 cycles,
 * 2-4 FMA pipes). Tested under qemu-aarch64 only (make test-arm64): its
 * speed has never been measured on a real Arm core. */
#include <arm_neon.h>

#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_GEMM_N_MR 6

/* One k step: B row at bp (16 floats), A column at ap (6 floats). */
#define KILN_GEMM_N_STEP(ap, bp)                                                     \
  do {                                                                               \
    float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32((bp) + 4), b2 = vld1q_f32((bp) + 8), \
                b3 = vld1q_f32((bp) + 12);                                           \
    float32x4_t a03 = vld1q_f32(ap);                                                 \
    float32x2_t a45 = vld1_f32((ap) + 4);                                            \
    KILN_GEMM_N_ROWQ(c0, a03, 0);                                                    \
    KILN_GEMM_N_ROWQ(c1, a03, 1);                                                    \
    KILN_GEMM_N_ROWQ(c2, a03, 2);                                                    \
    KILN_GEMM_N_ROWQ(c3, a03, 3);                                                    \
    KILN_GEMM_N_ROWD(c4, a45, 0);                                                    \
    KILN_GEMM_N_ROWD(c5, a45, 1);                                                    \
  } while (0)
#define KILN_GEMM_N_ROWQ(c, av, lane)            \
  c##0 = vfmaq_laneq_f32(c##0, b0, av, lane);    \
  c##1 = vfmaq_laneq_f32(c##1, b1, av, lane);    \
  c##2 = vfmaq_laneq_f32(c##2, b2, av, lane);    \
  c##3 = vfmaq_laneq_f32(c##3, b3, av, lane)
#define KILN_GEMM_N_ROWD(c, av, lane)            \
  c##0 = vfmaq_lane_f32(c##0, b0, av, lane);     \
  c##1 = vfmaq_lane_f32(c##1, b1, av, lane);     \
  c##2 = vfmaq_lane_f32(c##2, b2, av, lane);     \
  c##3 = vfmaq_lane_f32(c##3, b3, av, lane)

static inline void kiln_gemm_n_store(float* o, const float* ci, float32x4_t x0, float32x4_t x1,
                                     float32x4_t x2, float32x4_t x3) {
  if (ci) {
    x0 = vaddq_f32(x0, vld1q_f32(ci));
    x1 = vaddq_f32(x1, vld1q_f32(ci + 4));
    x2 = vaddq_f32(x2, vld1q_f32(ci + 8));
    x3 = vaddq_f32(x3, vld1q_f32(ci + 12));
  }
  vst1q_f32(o, x0);
  vst1q_f32(o + 4, x1);
  vst1q_f32(o + 8, x2);
  vst1q_f32(o + 12, x3);
}

void kiln_f32_gemm_ukernel_6x16__neon(int64_t kc, const float* a, const float* b,
                                      const float* b_next, const float* cin, int64_t ldcin,
                                      float* out, int64_t ldout) {
  (void)b_next;
  const float32x4_t z = vdupq_n_f32(0.0f);
  float32x4_t c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z;
  float32x4_t c20 = z, c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z;
  float32x4_t c40 = z, c41 = z, c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
  for (int64_t p = 0; p < kc; ++p) {
    KILN_GEMM_N_STEP(a, b);
    a += KILN_GEMM_N_MR;
    b += 16;
  }
  kiln_gemm_n_store(out, cin, c00, c01, c02, c03);
  kiln_gemm_n_store(out + ldout, cin ? cin + ldcin : NULL, c10, c11, c12, c13);
  kiln_gemm_n_store(out + 2 * ldout, cin ? cin + 2 * ldcin : NULL, c20, c21, c22, c23);
  kiln_gemm_n_store(out + 3 * ldout, cin ? cin + 3 * ldcin : NULL, c30, c31, c32, c33);
  kiln_gemm_n_store(out + 4 * ldout, cin ? cin + 4 * ldcin : NULL, c40, c41, c42, c43);
  kiln_gemm_n_store(out + 5 * ldout, cin ? cin + 5 * ldcin : NULL, c50, c51, c52, c53);
}

/* ---- the small-M GEMV (M <= 8, the decode shape) ------------------------
 * The AVX2 kernel's shape (kiln_gemm_gemv_avx2.h): B is the whole cost, so
 * S panels are read side by side as S sequential streams, prefetched ahead,
 * with R rows x S panels x 4 quarters of accumulators (at most 24 of the 32
 * registers). bf16 weights (kiln_gemm_bf16_pack_b's panels, same layout in
 * uint16) are widened in registers: USHLL by 16 is exact. */
#define KILN_GEMV_NAI static inline __attribute__((always_inline))

KILN_GEMV_NAI float32x4_t kiln_gemv_load4_neon(const void* b, int64_t i, const int bf16) {
  if (bf16)
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t*)b + i), 16));
  return vld1q_f32((const float*)b + i);
}

KILN_GEMV_NAI void kiln_gemv_tile_neon(const int R, const int S, const int bf16, int64_t k,
                                       const float* a, int64_t lda, const void* b,
                                       int64_t pstride, float* out, int64_t ostride,
                                       int acc_in) {
  float32x4_t acc[4][4][4];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int h = 0; h < 4; ++h)
        acc[s][i][h] = acc_in ? vld1q_f32(out + s * ostride + i * 16 + 4 * h) : vdupq_n_f32(0.0f);
  for (int64_t p = 0; p < k; ++p) {
    if ((p & 1) == 0)
      for (int s = 0; s < S; ++s) {
        /* 1 KiB ahead in each stream (two k steps: 128 B fp32, 64 B bf16). */
        const char* pb = bf16 ? (const char*)((const uint16_t*)b + s * pstride + p * 16 + 512)
                              : (const char*)((const float*)b + s * pstride + p * 16 + 256);
        __builtin_prefetch(pb);
        if (!bf16) __builtin_prefetch(pb + 64);
      }
    for (int s = 0; s < S; ++s) {
      float32x4_t bv[4];
      for (int h = 0; h < 4; ++h) bv[h] = kiln_gemv_load4_neon(b, s * pstride + p * 16 + 4 * h, bf16);
      for (int i = 0; i < R; ++i) {
        float32x4_t av = vdupq_n_f32(a[i * lda + p]);
        for (int h = 0; h < 4; ++h) acc[s][i][h] = vfmaq_f32(acc[s][i][h], av, bv[h]);
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i)
      for (int h = 0; h < 4; ++h) vst1q_f32(out + s * ostride + i * 16 + 4 * h, acc[s][i][h]);
}

KILN_GEMV_NAI void kiln_gemv_rows_neon(const int bf16, int64_t r, int panels, int64_t k,
                                       const float* a, int64_t lda, const void* b, float* out,
                                       int64_t ostride, int acc_in) {
  const int64_t pstride = k * KILN_GEMM_PANEL;
  const int s_max = r == 1 ? 4 : r <= 3 ? 2 : 1;
  for (int q = 0; q < panels;) {
    int s = panels - q < s_max ? panels - q : s_max;
    const void* bq = bf16 ? (const void*)((const uint16_t*)b + q * pstride)
                          : (const void*)((const float*)b + q * pstride);
    float* oq = out + q * ostride;
    switch (r * 8 + s) {
      case 8 + 1: kiln_gemv_tile_neon(1, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 2: kiln_gemv_tile_neon(1, 2, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 3: kiln_gemv_tile_neon(1, 3, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 4: kiln_gemv_tile_neon(1, 4, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 16 + 1: kiln_gemv_tile_neon(2, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 16 + 2: kiln_gemv_tile_neon(2, 2, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 24 + 1: kiln_gemv_tile_neon(3, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 24 + 2: kiln_gemv_tile_neon(3, 2, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 32 + 1: kiln_gemv_tile_neon(4, 1, bf16, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      default: break;
    }
    q += s;
  }
}

KILN_GEMV_NAI void kiln_gemv_neon(const int bf16, int64_t m, int64_t k, const float* a,
                                  int64_t lda, const void* b, int panels, float* out) {
  const int64_t ostride = m * KILN_GEMM_PANEL, pstride = k * KILN_GEMM_PANEL;
  if (m <= 4) {
    kiln_gemv_rows_neon(bf16, m, panels, k, a, lda, b, out, ostride, 0);
    return;
  }
  /* 5..8 rows: per panel, rows 0-3 then 4.. over K blocks of 256, so the
   * second pass finds the block of B in L1 (as the AVX2 kernel). */
  for (int q = 0; q < panels; ++q) {
    const void* bq = bf16 ? (const void*)((const uint16_t*)b + q * pstride)
                          : (const void*)((const float*)b + q * pstride);
    float* oq = out + q * ostride;
    if (k == 0)
      for (int64_t i = 0; i < ostride; ++i) oq[i] = 0.0f;
    for (int64_t p0 = 0; p0 < k; p0 += 256) {
      int64_t kb = k - p0 < 256 ? k - p0 : 256;
      const void* bk = bf16 ? (const void*)((const uint16_t*)bq + p0 * 16)
                            : (const void*)((const float*)bq + p0 * 16);
      kiln_gemv_rows_neon(bf16, 4, 1, kb, a + p0, lda, bk, oq, ostride, p0 > 0);
      kiln_gemv_rows_neon(bf16, m - 4, 1, kb, a + 4 * lda + p0, lda, bk, oq + 4 * 16, ostride,
                          p0 > 0);
    }
  }
}

void kiln_f32_gemv__neon(int64_t m, int64_t k, const float* a, int64_t lda, const float* b_panel,
                         int panels, float* out) {
  kiln_gemv_neon(0, m, k, a, lda, b_panel, panels, out);
}

void kiln_f32_bf16w_gemv__neon(int64_t m, int64_t k, const float* a, int64_t lda,
                               const uint16_t* b_panel, int panels, float* out) {
  kiln_gemv_neon(1, m, k, a, lda, b_panel, panels, out);
}
