/* bf16 weights on AVX2 + FMA: the small-M GEMV (kiln_gemm_gemv_avx2.h) and
 * the micro-panel widening for the blocked path. Compiled only with the AVX2 flags and called only
 * when kiln_cpu_isa() >= KILN_ISA_AVX2.
 *
 * AVX2 has no bf16 arithmetic, but none is needed: a bf16 value is the top
 * half of an fp32 one, so zero-extending 16 bf16 to 32 bits and shifting
 * left by 16 gives the exact fp32 values in two ymm registers. The GEMV is
 * memory-bound, so these two extra instructions per 8 weights are free and
 * the half-size weights stream twice as many columns per second. */
#include <immintrin.h>

#include "kernels/gemm/kiln_gemm_gemv_avx2.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/kiln_bf16_round_avx2.h"

static inline __attribute__((always_inline)) __m256 kiln_gemm_bf16x8_avx2(const uint16_t* p) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

void kiln_bf16w_gemm_widen__avx2(int64_t kc, int64_t k, int panels, const uint16_t* b, float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int q = 0; q < panels; ++q) {
    const uint16_t* src = b + q * k * P;
    float* dst = out + q * kc * P;
    for (int64_t i = 0; i < kc * P; i += 16) {
      _mm256_storeu_ps(dst + i, kiln_gemm_bf16x8_avx2(src + i));
      _mm256_storeu_ps(dst + i + 8, kiln_gemm_bf16x8_avx2(src + i + 8));
    }
  }
}

/* The small-M GEMV: kiln_gemm_gemv_avx2.h's template over bf16 panels. */
void kiln_f32_bf16w_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                               const uint16_t* b_panel, int panels, float* out) {
  kiln_gemv_avx2(1, m, k, a, lda, b_panel, panels, out);
}

/* ---- bf16 compute weights (VNNI pairs) on the fp32 kernels ------------ */

/* A pair row of 8 columns (16 bf16: column j's rows p and p + 1 adjacent)
 * as two fp32 vectors: row p (the low halves, shifted up) and row p + 1
 * (the high halves, masked). Exact. */
#define KILN_VNNI_EVEN(v) _mm256_castsi256_ps(_mm256_slli_epi32((v), 16))
#define KILN_VNNI_ODD(v) _mm256_castsi256_ps(_mm256_and_si256((v), _mm256_set1_epi32((int)0xffff0000u)))

void kiln_bf16vnni_gemm_widen__avx2(int64_t kc, int64_t pc, int64_t kp, int panels,
                                    const uint16_t* b, float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int q = 0; q < panels; ++q) {
    const uint16_t* src = b + q * kp * P;
    float* dst = out + q * kc * P;
    int64_t p = 0;
    for (; p < kc; ++p) {
      int64_t r = pc + p;
      const uint16_t* row = src + (r / 2) * 2 * P;
      __m256i v0 = _mm256_loadu_si256((const __m256i*)row);
      __m256i v1 = _mm256_loadu_si256((const __m256i*)(row + 16));
      if ((r & 1) == 0 && p + 1 < kc) { /* both rows of the pair */
        _mm256_storeu_ps(dst + p * P, KILN_VNNI_EVEN(v0));
        _mm256_storeu_ps(dst + p * P + 8, KILN_VNNI_EVEN(v1));
        _mm256_storeu_ps(dst + (p + 1) * P, KILN_VNNI_ODD(v0));
        _mm256_storeu_ps(dst + (p + 1) * P + 8, KILN_VNNI_ODD(v1));
        ++p;
      } else if ((r & 1) == 0) {
        _mm256_storeu_ps(dst + p * P, KILN_VNNI_EVEN(v0));
        _mm256_storeu_ps(dst + p * P + 8, KILN_VNNI_EVEN(v1));
      } else {
        _mm256_storeu_ps(dst + p * P, KILN_VNNI_ODD(v0));
        _mm256_storeu_ps(dst + p * P + 8, KILN_VNNI_ODD(v1));
      }
    }
  }
}

/* The 6x16 microkernel over a VNNI panel itself (kiln_f32_gemm_ukernel_6x16__avx2
 * with B in bf16 pairs): no widened copy of the micro-panel is written and
 * read back, and B occupies half the cache. b is the panel at an even row
 * pc, so pair t (rows pc + 2t, pc + 2t + 1 of 16 columns, 64 bytes) is at
 * b + 32 t. Per pair: a load and a shift (row pc + 2t: the low halves moved
 * up; VEX has no shift of a memory operand) and an and with the memory
 * operand (row pc + 2t + 1: the high halves) make the two fp32 B rows in the
 * registers the fp32 kernel loads them into, so the
 * register budget is the same (12 accumulators, 2 B, 1 broadcast) plus the
 * mask: all 16. An odd kc ends with the even row of its last pair alone.
 * Exact: the same fp32 values the widened copy holds, the same FMAs in the
 * same order. */
#define KILN_VNNI_A2_ROW(Q, I, C0, C1)                     \
  "vbroadcastss 24*" #Q "+4*" #I "(%[a]), %[t]\n\t"        \
  "vfmadd231ps %[b0], %[t], %[" #C0 "]\n\t"                \
  "vfmadd231ps %[b1], %[t], %[" #C1 "]\n\t"
#define KILN_VNNI_A2_ROWS(Q)                                \
  KILN_VNNI_A2_ROW(Q, 0, c00, c01)                         \
  KILN_VNNI_A2_ROW(Q, 1, c10, c11)                         \
  KILN_VNNI_A2_ROW(Q, 2, c20, c21)                         \
  KILN_VNNI_A2_ROW(Q, 3, c30, c31)                         \
  KILN_VNNI_A2_ROW(Q, 4, c40, c41)                         \
  KILN_VNNI_A2_ROW(Q, 5, c50, c51)
#define KILN_VNNI_A2_EVEN(T)                               \
  "vmovdqu 64*" #T "(%[b]), %[b0]\n\t"                     \
  "vmovdqu 64*" #T "+32(%[b]), %[b1]\n\t"                  \
  "vpslld $16, %[b0], %[b0]\n\t"                           \
  "vpslld $16, %[b1], %[b1]\n\t"
#define KILN_VNNI_A2_ODD(T)                                \
  "vpand 64*" #T "(%[b]), %[m], %[b0]\n\t"                 \
  "vpand 64*" #T "+32(%[b]), %[m], %[b1]\n\t"

void kiln_f32_bf16vnni_gemm_ukernel_6x16__avx2(int64_t kc, const float* a, const uint16_t* b,
                                               const float* cin, int64_t ldcin, float* out,
                                               int64_t ldout) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t;
  __m256i m = _mm256_set1_epi32((int)0xffff0000u);
  for (int i = 0; i < 6; ++i) {
    _mm_prefetch((const char*)(out + i * ldout), _MM_HINT_T0);
    _mm_prefetch((const char*)(out + i * ldout + 15), _MM_HINT_T0);
  }
  int64_t n2 = kc / 4, n1 = (kc % 4) / 2, odd = kc & 1;
  __asm__ volatile(
      "vxorps %[c00], %[c00], %[c00]\n\t"
      "vxorps %[c01], %[c01], %[c01]\n\t"
      "vxorps %[c10], %[c10], %[c10]\n\t"
      "vxorps %[c11], %[c11], %[c11]\n\t"
      "vxorps %[c20], %[c20], %[c20]\n\t"
      "vxorps %[c21], %[c21], %[c21]\n\t"
      "vxorps %[c30], %[c30], %[c30]\n\t"
      "vxorps %[c31], %[c31], %[c31]\n\t"
      "vxorps %[c40], %[c40], %[c40]\n\t"
      "vxorps %[c41], %[c41], %[c41]\n\t"
      "vxorps %[c50], %[c50], %[c50]\n\t"
      "vxorps %[c51], %[c51], %[c51]\n\t"
      "test %[n2], %[n2]\n\t"
      "jz 2f\n\t"
      "1:\n\t"
      "prefetcht0 384(%[a])\n\t"
      KILN_VNNI_A2_EVEN(0) KILN_VNNI_A2_ROWS(0) KILN_VNNI_A2_ODD(0) KILN_VNNI_A2_ROWS(1)
      KILN_VNNI_A2_EVEN(1) KILN_VNNI_A2_ROWS(2) KILN_VNNI_A2_ODD(1) KILN_VNNI_A2_ROWS(3)
      "add $96, %[a]\n\t"
      "add $128, %[b]\n\t"
      "dec %[n2]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "test %[n1], %[n1]\n\t"
      "jz 3f\n\t"
      KILN_VNNI_A2_EVEN(0) KILN_VNNI_A2_ROWS(0) KILN_VNNI_A2_ODD(0) KILN_VNNI_A2_ROWS(1)
      "add $48, %[a]\n\t"
      "add $64, %[b]\n\t"
      "3:\n\t"
      "test %[odd], %[odd]\n\t"
      "jz 4f\n\t"
      KILN_VNNI_A2_EVEN(0) KILN_VNNI_A2_ROWS(0)
      "4:\n\t"
      : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),
        [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),
        [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),
        [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [a] "+r"(a), [b] "+r"(b),
        [n2] "+r"(n2), [n1] "+r"(n1), [odd] "+r"(odd)
      : [m] "x"(m)
      : "cc", "memory");
  __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int i = 0; i < 6; ++i) {
    __m256 lo = acc[2 * i], hi = acc[2 * i + 1];
    if (cin) {
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(cin + i * ldcin));
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(cin + i * ldcin + 8));
    }
    _mm256_storeu_ps(out + i * ldout, lo);
    _mm256_storeu_ps(out + i * ldout + 8, hi);
  }
}

/* x[i] = x[i] rounded to bf16 (nearest even; a NaN stays NaN, quiet), as
 * kiln_gemm_round_bf16_f32: 8 at a time, the tail by the scalar rule. */
void kiln_f32_round_bf16__avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, kiln_bf16x8_round_ps_avx2(_mm256_loadu_ps(x + i)));
  kiln_gemm_round_bf16_f32(x + i, n - i);
}

/* out[s](R, 16) = A(R, k) . panel s, for S panels pstride apart; acc_in adds
 * to out. k here is a multiple of 2 except at the very end of K (odd K:
 * the last pair's second row is padding and is skipped). */
static inline __attribute__((always_inline)) void kiln_gemv_vnni_tile_avx2(
    const int R, const int S, int64_t k, const float* a, int64_t lda, const uint16_t* b,
    int64_t pstride, float* out, int64_t ostride, int acc_in) {
  __m256 acc[4][4][2];
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      if (acc_in) {
        acc[s][i][0] = _mm256_loadu_ps(out + s * ostride + i * 16);
        acc[s][i][1] = _mm256_loadu_ps(out + s * ostride + i * 16 + 8);
      } else {
        acc[s][i][0] = acc[s][i][1] = _mm256_setzero_ps();
      }
    }
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    for (int s = 0; s < S; ++s) {
      const uint16_t* row = b + s * pstride + p * 16;
      _mm_prefetch((const char*)(row + 512), _MM_HINT_T0);
      __m256i v0 = _mm256_loadu_si256((const __m256i*)row);
      __m256i v1 = _mm256_loadu_si256((const __m256i*)(row + 16));
      __m256 e0 = KILN_VNNI_EVEN(v0), e1 = KILN_VNNI_EVEN(v1);
      __m256 o0 = KILN_VNNI_ODD(v0), o1 = KILN_VNNI_ODD(v1);
      for (int i = 0; i < R; ++i) {
        __m256 a0 = _mm256_broadcast_ss(a + i * lda + p);
        __m256 a1 = _mm256_broadcast_ss(a + i * lda + p + 1);
        acc[s][i][0] = _mm256_fmadd_ps(a0, e0, acc[s][i][0]);
        acc[s][i][1] = _mm256_fmadd_ps(a0, e1, acc[s][i][1]);
        acc[s][i][0] = _mm256_fmadd_ps(a1, o0, acc[s][i][0]);
        acc[s][i][1] = _mm256_fmadd_ps(a1, o1, acc[s][i][1]);
      }
    }
  }
  if (p < k)
    for (int s = 0; s < S; ++s) {
      const uint16_t* row = b + s * pstride + p * 16;
      __m256i v0 = _mm256_loadu_si256((const __m256i*)row);
      __m256i v1 = _mm256_loadu_si256((const __m256i*)(row + 16));
      for (int i = 0; i < R; ++i) {
        __m256 a0 = _mm256_broadcast_ss(a + i * lda + p);
        acc[s][i][0] = _mm256_fmadd_ps(a0, KILN_VNNI_EVEN(v0), acc[s][i][0]);
        acc[s][i][1] = _mm256_fmadd_ps(a0, KILN_VNNI_EVEN(v1), acc[s][i][1]);
      }
    }
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < R; ++i) {
      _mm256_storeu_ps(out + s * ostride + i * 16, acc[s][i][0]);
      _mm256_storeu_ps(out + s * ostride + i * 16 + 8, acc[s][i][1]);
    }
}

/* R <= 4 rows over `panels` panels, S at a time (R * S <= 4: 8 accumulators,
 * 4 B vectors, 2 A broadcasts). */
static void kiln_gemv_vnni_rows_avx2(int64_t r, int panels, int64_t k, int64_t pstride,
                                     const float* a, int64_t lda, const uint16_t* b, float* out,
                                     int64_t ostride, int acc_in) {
  const int s_max = r == 1 ? 4 : r == 2 ? 2 : 1;
  for (int q = 0; q < panels;) {
    int s = panels - q < s_max ? panels - q : s_max;
    const uint16_t* bq = b + q * pstride;
    float* oq = out + q * ostride;
    switch (r * 8 + s) {
      case 8 + 1: kiln_gemv_vnni_tile_avx2(1, 1, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 2: kiln_gemv_vnni_tile_avx2(1, 2, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 3: kiln_gemv_vnni_tile_avx2(1, 3, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 8 + 4: kiln_gemv_vnni_tile_avx2(1, 4, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 16 + 1: kiln_gemv_vnni_tile_avx2(2, 1, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 16 + 2: kiln_gemv_vnni_tile_avx2(2, 2, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      case 24 + 1: kiln_gemv_vnni_tile_avx2(3, 1, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
      default: kiln_gemv_vnni_tile_avx2(4, 1, k, a, lda, bq, pstride, oq, ostride, acc_in); break;
    }
    q += s;
  }
}

void kiln_f32_bf16vnni_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                                  const uint16_t* b_panel, int panels, float* out) {
  const int64_t ostride = m * KILN_GEMM_PANEL, pstride = (k + (k & 1)) * KILN_GEMM_PANEL;
  if (m <= 4) {
    kiln_gemv_vnni_rows_avx2(m, panels, k, pstride, a, lda, b_panel, out, ostride, 0);
    return;
  }
  /* 5..8 rows: rows 0-3 then the rest over K blocks of 256 (even, so pairs
   * stay whole), the second pass finding the block of B in L1. */
  for (int q = 0; q < panels; ++q) {
    const uint16_t* bq = b_panel + q * pstride;
    float* oq = out + q * ostride;
    for (int64_t p0 = 0; p0 < k; p0 += 256) {
      int64_t kb = k - p0 < 256 ? k - p0 : 256;
      kiln_gemv_vnni_rows_avx2(4, 1, kb, pstride, a + p0, lda, bq + p0 * 16, oq, ostride, p0 > 0);
      kiln_gemv_vnni_rows_avx2(m - 4, 1, kb, pstride, a + 4 * lda + p0, lda, bq + p0 * 16,
                               oq + 4 * 16, ostride, p0 > 0);
    }
  }
}
