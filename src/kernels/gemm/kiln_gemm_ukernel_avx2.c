/* AVX2 + FMA kernels: the 6x16 GEMM microkernel and the small-M GEMV.
 * Compiled only with the AVX2 flags (meson: isa_avx2_args) and called only
 * when kiln_cpu_isa() >= KILN_ISA_AVX2.
 *
 * 6x16 keeps 12 ymm accumulators (6 rows x two 8-wide halves of a packed B
 * panel row), 2 ymm for B and 1 for the broadcast A value: 15 of 16
 * registers. Per k step: 2 B loads + 6 broadcasts feed 12 FMAs, which fits
 * Zen's and Intel's load ports while the 12 independent chains cover the
 * 4-cycle FMA latency at 2 FMAs per cycle. */
#include <immintrin.h>

#include "kernels/gemm/kiln_gemm_internal.h"

/* One k step in assembly text: P is the step within the unrolled group.
 * The loop is written as inline assembly because GCC's register allocator
 * reshuffles this intrinsic loop into spills (15 live ymm of 16), which
 * costs a quarter of the throughput; here every accumulator is pinned to a
 * register for the whole loop. Each unrolled group also prefetches the A
 * micro-panel 16 k steps ahead: A panels stream in from L2 one tile after
 * another, B stays in L1 across the tiles of a strip. */
#define KILN_GEMM_A2_ROW(P, I, C0, C1)                     \
  "vbroadcastss 24*" #P "+4*" #I "(%[a]), %[t]\n\t"        \
  "vfmadd231ps %[b0], %[t], %[" #C0 "]\n\t"                \
  "vfmadd231ps %[b1], %[t], %[" #C1 "]\n\t"
#define KILN_GEMM_A2_STEP(P)                               \
  "vmovups 64*" #P "(%[b]), %[b0]\n\t"                     \
  "vmovups 64*" #P "+32(%[b]), %[b1]\n\t"                  \
  KILN_GEMM_A2_ROW(P, 0, c00, c01)                         \
  KILN_GEMM_A2_ROW(P, 1, c10, c11)                         \
  KILN_GEMM_A2_ROW(P, 2, c20, c21)                         \
  KILN_GEMM_A2_ROW(P, 3, c30, c31)                         \
  KILN_GEMM_A2_ROW(P, 4, c40, c41)                         \
  KILN_GEMM_A2_ROW(P, 5, c50, c51)

void kiln_gemm_ukernel_6x16_avx2(int64_t kc, const float* a, const float* b,
                                 const float* b_next, const float* cin, int64_t ldcin,
                                 float* out, int64_t ldout) {
  (void)b_next;
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t;
  /* The output rows are written right after the loop: ask for their lines
   * now so the stores do not stall on read-for-ownership misses. */
  for (int i = 0; i < 6; ++i) {
    _mm_prefetch((const char*)(out + i * ldout), _MM_HINT_T0);
    _mm_prefetch((const char*)(out + i * ldout + 15), _MM_HINT_T0);
  }
  int64_t n4 = kc / 4, n1 = kc % 4;
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
      "test %[n4], %[n4]\n\t"
      "jz 2f\n\t"
      "1:\n\t"
      "prefetcht0 384(%[a])\n\t"
      KILN_GEMM_A2_STEP(0) KILN_GEMM_A2_STEP(1) KILN_GEMM_A2_STEP(2) KILN_GEMM_A2_STEP(3)
      "add $96, %[a]\n\t"
      "add $256, %[b]\n\t"
      "dec %[n4]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "test %[n1], %[n1]\n\t"
      "jz 4f\n\t"
      "3:\n\t"
      KILN_GEMM_A2_STEP(0)
      "add $24, %[a]\n\t"
      "add $64, %[b]\n\t"
      "dec %[n1]\n\t"
      "jnz 3b\n\t"
      "4:\n\t"
      : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),
        [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),
        [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),
        [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [a] "+r"(a), [b] "+r"(b),
        [n4] "+r"(n4), [n1] "+r"(n1)
      :
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

/* GEMV over one 16-wide panel for R <= 4 rows. U-way unrolled over K with
 * separate accumulators (R * 2 * U of them) so that enough FMA chains are
 * in flight to stream B at memory speed even for a single row. acc_in:
 * accumulate onto out (the K-blocked 5..8-row case). */
static inline __attribute__((always_inline)) void kiln_gemm_gemv_rows_avx2(
    const int R, const int U, int64_t k, const float* a, int64_t lda, const float* b,
    float* out, int acc_in) {
  __m256 acc[4][4][2];
  for (int u = 0; u < U; ++u)
    for (int i = 0; i < R; ++i) acc[u][i][0] = acc[u][i][1] = _mm256_setzero_ps();
  if (acc_in)
    for (int i = 0; i < R; ++i) {
      acc[0][i][0] = _mm256_loadu_ps(out + i * 16);
      acc[0][i][1] = _mm256_loadu_ps(out + i * 16 + 8);
    }
  int64_t p = 0;
  for (; p + U <= k; p += U) {
    /* B streams from DRAM once: ask for it 2 KiB ahead, beyond what the
     * hardware prefetcher keeps in flight for a single stream. */
    for (int u = 0; u < U; ++u) _mm_prefetch((const char*)(b + (p + u) * 16 + 512), _MM_HINT_T0);
    for (int u = 0; u < U; ++u) {
      __m256 b0 = _mm256_loadu_ps(b + (p + u) * 16), b1 = _mm256_loadu_ps(b + (p + u) * 16 + 8);
      for (int i = 0; i < R; ++i) {
        __m256 av = _mm256_broadcast_ss(a + i * lda + p + u);
        acc[u][i][0] = _mm256_fmadd_ps(av, b0, acc[u][i][0]);
        acc[u][i][1] = _mm256_fmadd_ps(av, b1, acc[u][i][1]);
      }
    }
  }
  for (; p < k; ++p) {
    __m256 b0 = _mm256_loadu_ps(b + p * 16), b1 = _mm256_loadu_ps(b + p * 16 + 8);
    for (int i = 0; i < R; ++i) {
      __m256 av = _mm256_broadcast_ss(a + i * lda + p);
      acc[0][i][0] = _mm256_fmadd_ps(av, b0, acc[0][i][0]);
      acc[0][i][1] = _mm256_fmadd_ps(av, b1, acc[0][i][1]);
    }
  }
  for (int u = 1; u < U; ++u)
    for (int i = 0; i < R; ++i) {
      acc[0][i][0] = _mm256_add_ps(acc[0][i][0], acc[u][i][0]);
      acc[0][i][1] = _mm256_add_ps(acc[0][i][1], acc[u][i][1]);
    }
  for (int i = 0; i < R; ++i) {
    _mm256_storeu_ps(out + i * 16, acc[0][i][0]);
    _mm256_storeu_ps(out + i * 16 + 8, acc[0][i][1]);
  }
}

static void kiln_gemm_gemv_rows_avx2_any(int64_t r, int64_t k, const float* a, int64_t lda,
                                         const float* b, float* out, int acc_in) {
  switch (r) {
    case 1: kiln_gemm_gemv_rows_avx2(1, 4, k, a, lda, b, out, acc_in); break;
    case 2: kiln_gemm_gemv_rows_avx2(2, 2, k, a, lda, b, out, acc_in); break;
    case 3: kiln_gemm_gemv_rows_avx2(3, 1, k, a, lda, b, out, acc_in); break;
    case 4: kiln_gemm_gemv_rows_avx2(4, 1, k, a, lda, b, out, acc_in); break;
    default: break;
  }
}

void kiln_gemm_gemv_avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                         const float* b_panel, float* out) {
  if (m <= 4) {
    kiln_gemm_gemv_rows_avx2_any(m, k, a, lda, b_panel, out, 0);
    return;
  }
  /* 5..8 rows need more accumulators than ymm registers exist: do rows
   * 0-3 and 4.. in turn over K blocks of 256, so the second pass finds the
   * 16 KiB block of B in L1 and B still streams from memory once. */
  for (int64_t p0 = 0; p0 < k; p0 += 256) {
    int64_t kb = k - p0 < 256 ? k - p0 : 256;
    kiln_gemm_gemv_rows_avx2_any(4, kb, a + p0, lda, b_panel + p0 * 16, out, p0 > 0);
    kiln_gemm_gemv_rows_avx2_any(m - 4, kb, a + 4 * lda + p0, lda, b_panel + p0 * 16,
                                 out + 4 * 16, p0 > 0);
  }
  if (k == 0)
    for (int64_t i = 0; i < m * 16; ++i) out[i] = 0.0f;
}
