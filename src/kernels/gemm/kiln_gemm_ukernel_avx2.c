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
#include "kernels/kiln_bf16_round_avx2.h"
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
 * One column of B (a contiguous run of K elements: a row of torch's (N, K)
 * weight) at a time against up to 4 rows of A: two ymm accumulators of 8
 * partial sums per row of A (even and odd 8-element halves of each 16),
 * reduced across lanes once at the end. Columns one after another make B,
 * whose rows lie end to end, one sequential stream that the hardware
 * prefetchers follow: reading 4 columns side by side (4 streams 2-4 KiB
 * apart, restarting every 4 rows) ran at 11-17 GB/s on a Zen 4 core, one
 * at a time at 29-30 GB/s, the rate of the packed layout's GEMV. The
 * stream is prefetched 2 KiB ahead, into the next columns: with 4 rows of
 * A the loop is slow enough that the hardware alone fell behind (M = 4,
 * M x N x K 4 x 2816 x 1024, bf16 W, avx2 level of a Zen 4 core: 692 -> 471 us). More
 * rows of A than 4 read the column again from L1. A bf16 B is widened as it is
 * loaded (a shift: exact) and a rounded one rounded, so every kind runs the
 * float32 kind's sums in the same order: bit for bit the same results as
 * the float32 kernel over the widened (rounded) copy. */
static inline __attribute__((always_inline)) float kiln_gemv_nt_hsum(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_movehdup_ps(x));
  return _mm_cvtss_f32(x);
}

/* Eight elements of B from element `at`, as float32s. */
static inline __attribute__((always_inline)) __m256 kiln_gemv_nt_load8(
    const void* bt, int64_t at, const kiln_gemm_nt_elem_t elem) {
  if (elem == KILN_GEMM_NT_BF16) {
    __m128i h = _mm_loadu_si128((const __m128i*)((const uint16_t*)bt + at));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  __m256 x = _mm256_loadu_ps((const float*)bt + at);
  return elem == KILN_GEMM_NT_F32_ROUNDED ? kiln_bf16x8_round_ps_avx2(x) : x;
}

static inline __attribute__((always_inline)) float kiln_gemv_nt_load1(
    const void* bt, int64_t at, const kiln_gemm_nt_elem_t elem) {
  if (elem == KILN_GEMM_NT_BF16) return kiln_bf16_to_f32(((const uint16_t*)bt)[at]);
  float x = ((const float*)bt)[at];
  return elem == KILN_GEMM_NT_F32_ROUNDED ? kiln_bf16_round_f32(x) : x;
}

/* out[i * 16] = A row i . column bt, for i < R. */
static inline __attribute__((always_inline)) void kiln_gemv_nt_tile(
    const int R, int64_t k, const float* a, int64_t lda, const void* bt,
    const kiln_gemm_nt_elem_t elem, float* out) {
  __m256 acc[2][4]; /* [half of 16][row] */
  for (int u = 0; u < 2; ++u)
    for (int i = 0; i < R; ++i) acc[u][i] = _mm256_setzero_ps();
  const size_t esize = elem == KILN_GEMM_NT_BF16 ? sizeof(uint16_t) : sizeof(float);
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    _mm_prefetch((const char*)bt + (size_t)p * esize + 2048, _MM_HINT_T0);
    for (int u = 0; u < 2; ++u) {
      const __m256 bv = kiln_gemv_nt_load8(bt, p + 8 * u, elem);
      for (int i = 0; i < R; ++i)
        acc[u][i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i * lda + p + 8 * u), bv, acc[u][i]);
    }
  }
  for (; p + 8 <= k; p += 8) {
    const __m256 bv = kiln_gemv_nt_load8(bt, p, elem);
    for (int i = 0; i < R; ++i)
      acc[0][i] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i * lda + p), bv, acc[0][i]);
  }
  for (int i = 0; i < R; ++i) {
    float sum = kiln_gemv_nt_hsum(_mm256_add_ps(acc[0][i], acc[1][i]));
    for (int64_t q = p; q < k; ++q) sum += a[i * lda + q] * kiln_gemv_nt_load1(bt, q, elem);
    out[i * KILN_GEMM_PANEL] = sum;
  }
}

static inline __attribute__((always_inline)) void kiln_gemv_nt_avx2(
    int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const void* bt, int64_t ldb,
    const kiln_gemm_nt_elem_t elem, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const void* bj = elem == KILN_GEMM_NT_BF16 ? (const void*)((const uint16_t*)bt + j * ldb)
                                               : (const void*)((const float*)bt + j * ldb);
    for (int64_t i = 0; i < m; i += 4) {
      const float* ai = a + i * lda;
      float* o = out + i * KILN_GEMM_PANEL + j;
      switch (m - i < 4 ? m - i : 4) {
        case 1: kiln_gemv_nt_tile(1, k, ai, lda, bj, elem, o); break;
        case 2: kiln_gemv_nt_tile(2, k, ai, lda, bj, elem, o); break;
        case 3: kiln_gemv_nt_tile(3, k, ai, lda, bj, elem, o); break;
        default: kiln_gemv_nt_tile(4, k, ai, lda, bj, elem, o); break;
      }
    }
  }
}

void kiln_f32_gemv_nt__avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                            const void* bt, int64_t ldb, kiln_gemm_nt_elem_t elem, float* out) {
#define KILN_GEMV_NT_AVX2(e) kiln_gemv_nt_avx2(m, n, k, a, lda, bt, ldb, e, out)
  KILN_GEMM_NT_BY_ELEM(elem, KILN_GEMV_NT_AVX2)
#undef KILN_GEMV_NT_AVX2
}
