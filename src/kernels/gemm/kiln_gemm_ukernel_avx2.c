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

#include "kernels/gemm/kiln_gemm_gemv_avx2.h"
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

void kiln_f32_gemm_ukernel_6x16__avx2(int64_t kc, const float* a, const float* b,
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

/* The small-M GEMV: kiln_gemm_gemv_avx2.h's template over fp32 panels. */
void kiln_f32_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda, const float* b_panel,
                         int panels, float* out) {
  kiln_gemv_avx2(0, m, k, a, lda, b_panel, panels, out);
}

/* ---- small-M GEMV over B stored transposed (kiln_gemm_gemv_nt_fn) ------
 * R rows of A against S columns of B (each a contiguous run of K floats) at
 * a time: R * S ymm accumulators of 8 partial sums each, reduced across
 * lanes once at the end. Per 8 k steps: S loads of B, R of A, R * S FMAs;
 * B is what streams from memory (each column once per R rows; with R = 2
 * at most, the second pair of rows finds the columns in L1/L2), so S = 4
 * columns keep four sequential streams in flight, each prefetched 1 KiB
 * ahead. One row alone (decode at batch 1) uses two accumulators per
 * column so that eight independent FMA chains hide the latency. */
static inline __attribute__((always_inline)) float kiln_gemv_nt_hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

static inline __attribute__((always_inline)) void kiln_gemv_nt_tile(
    const int R, const int S, int64_t k, const float* a, int64_t lda, const float* bt,
    int64_t ldb, float* out) {
  __m256 acc[2][2][4]; /* [unroll half (R == 1 only)][row][column] */
  for (int u = 0; u < 2; ++u)
    for (int i = 0; i < R; ++i)
      for (int s = 0; s < S; ++s) acc[u][i][s] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    for (int s = 0; s < S; ++s) _mm_prefetch((const char*)(bt + s * ldb + p + 256), _MM_HINT_T0);
    for (int u = 0; u < 2; ++u) {
      const int h = R == 1 ? u : 0;
      __m256 bv[4];
      for (int s = 0; s < S; ++s) bv[s] = _mm256_loadu_ps(bt + s * ldb + p + 8 * u);
      for (int i = 0; i < R; ++i) {
        __m256 av = _mm256_loadu_ps(a + i * lda + p + 8 * u);
        for (int s = 0; s < S; ++s) acc[h][i][s] = _mm256_fmadd_ps(av, bv[s], acc[h][i][s]);
      }
    }
  }
  for (; p + 8 <= k; p += 8)
    for (int i = 0; i < R; ++i) {
      __m256 av = _mm256_loadu_ps(a + i * lda + p);
      for (int s = 0; s < S; ++s)
        acc[0][i][s] = _mm256_fmadd_ps(av, _mm256_loadu_ps(bt + s * ldb + p), acc[0][i][s]);
    }
  for (int i = 0; i < R; ++i)
    for (int s = 0; s < S; ++s) {
      __m256 v = R == 1 ? _mm256_add_ps(acc[0][i][s], acc[1][i][s]) : acc[0][i][s];
      float sum = kiln_gemv_nt_hsum(v);
      for (int64_t q = p; q < k; ++q) sum += a[i * lda + q] * bt[s * ldb + q];
      out[i * KILN_GEMM_PANEL + s] = sum;
    }
}

void kiln_f32_gemv_nt__avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                            const float* bt, int64_t ldb, float* out) {
  for (int64_t j = 0; j < n; j += 4) {
    int s = n - j < 4 ? (int)(n - j) : 4;
    const float* b = bt + j * ldb;
    for (int64_t i = 0; i < m; i += 2) {
      int r = m - i < 2 ? 1 : 2;
      const float* ai = a + i * lda;
      float* o = out + i * KILN_GEMM_PANEL + j;
      switch (r * 8 + s) {
        case 8 + 1: kiln_gemv_nt_tile(1, 1, k, ai, lda, b, ldb, o); break;
        case 8 + 2: kiln_gemv_nt_tile(1, 2, k, ai, lda, b, ldb, o); break;
        case 8 + 3: kiln_gemv_nt_tile(1, 3, k, ai, lda, b, ldb, o); break;
        case 8 + 4: kiln_gemv_nt_tile(1, 4, k, ai, lda, b, ldb, o); break;
        case 16 + 1: kiln_gemv_nt_tile(2, 1, k, ai, lda, b, ldb, o); break;
        case 16 + 2: kiln_gemv_nt_tile(2, 2, k, ai, lda, b, ldb, o); break;
        case 16 + 3: kiln_gemv_nt_tile(2, 3, k, ai, lda, b, ldb, o); break;
        default: kiln_gemv_nt_tile(2, 4, k, ai, lda, b, ldb, o); break;
      }
    }
  }
}
