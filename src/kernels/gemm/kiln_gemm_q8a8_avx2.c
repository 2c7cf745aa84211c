/* int8 x int8 on AVX2: the 6x16 integer microkernel and the activation
 * quantizer (kiln_gemm_q8a8.c's contracts; the rule is in kiln_gemm.h).
 * Compiled only with the AVX2 flags and called only when kiln_cpu_isa() >=
 * KILN_ISA_AVX2.
 *
 * Why VPMADDWD on int16 and not VPMADDUBSW on bytes: VPMADDUBSW multiplies
 * unsigned by signed bytes and saturates its pair sums at 16 bits, so a
 * symmetric int8 activation needs the sign trick (|a| and sign(w, a):
 * VPSIGNB per row and B vector) and then VPMADDWD by ones to reach 32 bits.
 * That is two multiplies (and an add) per 32 products, the same multiply-
 * port load as VPMADDWD's one per 16, and on Zen 3 both multiply ports are
 * the limit either way; VPMADDWD needs no sign work and no repacked
 * weights (the blob's int8 rows are widened in registers) and cannot
 * saturate. Per pair of K rows: rows 2t and 2t + 1 of the panel (16 bytes
 * each) interleaved by PUNPCKL/HBW and widened by VPMOVSXBW into two
 * vectors of (column, row parity) int16 lanes; each of the 6 A rows is one
 * 32-bit broadcast of its pair; VPMADDWD + VPADDD per row and vector. 12
 * int32 accumulators + 2 B + broadcast + product = 16 registers. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

#define KILN_Q8A8_AI static inline __attribute__((always_inline))

/* One pair step in assembly text (GCC's allocator spills this intrinsic
 * loop: 16 live ymm of 16); T is the pair within the unrolled group. B's
 * two rows (xmm halves of b0/b1) are interleaved and widened; each row of
 * A is broadcast into t, multiplied into p (b0) and t (b1), and added. */
#define KILN_Q8A8_ROW(T, I, C0, C1)                        \
  "vpbroadcastd 24*" #T "+4*" #I "(%[a]), %[t]\n\t"        \
  "vpmaddwd %[b0], %[t], %[p]\n\t"                         \
  "vpmaddwd %[b1], %[t], %[t]\n\t"                         \
  "vpaddd %[p], %[" #C0 "], %[" #C0 "]\n\t"                \
  "vpaddd %[t], %[" #C1 "], %[" #C1 "]\n\t"
#define KILN_Q8A8_ROWS(T)                                  \
  KILN_Q8A8_ROW(T, 0, c00, c01)                            \
  KILN_Q8A8_ROW(T, 1, c10, c11)                            \
  KILN_Q8A8_ROW(T, 2, c20, c21)                            \
  KILN_Q8A8_ROW(T, 3, c30, c31)                            \
  KILN_Q8A8_ROW(T, 4, c40, c41)                            \
  KILN_Q8A8_ROW(T, 5, c50, c51)
#define KILN_Q8A8_B(T)                                     \
  "vmovdqu 32*" #T "(%[b]), %x[b0]\n\t"                    \
  "vpunpckhbw 32*" #T "+16(%[b]), %x[b0], %x[b1]\n\t"      \
  "vpunpcklbw 32*" #T "+16(%[b]), %x[b0], %x[b0]\n\t"      \
  "vpmovsxbw %x[b0], %[b0]\n\t"                            \
  "vpmovsxbw %x[b1], %[b1]\n\t"

void kiln_qd8_qc8w_gemm_ukernel_6x16__avx2(int64_t k, const int16_t* a, const int8_t* b,
                                           int32_t* out) {
  __m256i c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t, p;
  int64_t n2 = k / 4, n1 = (k % 4) / 2, odd = k & 1;
  __asm__ volatile(
      "vpxor %[c00], %[c00], %[c00]\n\t"
      "vpxor %[c01], %[c01], %[c01]\n\t"
      "vpxor %[c10], %[c10], %[c10]\n\t"
      "vpxor %[c11], %[c11], %[c11]\n\t"
      "vpxor %[c20], %[c20], %[c20]\n\t"
      "vpxor %[c21], %[c21], %[c21]\n\t"
      "vpxor %[c30], %[c30], %[c30]\n\t"
      "vpxor %[c31], %[c31], %[c31]\n\t"
      "vpxor %[c40], %[c40], %[c40]\n\t"
      "vpxor %[c41], %[c41], %[c41]\n\t"
      "vpxor %[c50], %[c50], %[c50]\n\t"
      "vpxor %[c51], %[c51], %[c51]\n\t"
      "test %[n2], %[n2]\n\t"
      "jz 2f\n\t"
      "1:\n\t"
      "prefetcht0 512(%[b])\n\t"
      KILN_Q8A8_B(0) KILN_Q8A8_ROWS(0) KILN_Q8A8_B(1) KILN_Q8A8_ROWS(1)
      "add $48, %[a]\n\t"
      "add $64, %[b]\n\t"
      "dec %[n2]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "test %[n1], %[n1]\n\t"
      "jz 3f\n\t"
      KILN_Q8A8_B(0) KILN_Q8A8_ROWS(0)
      "add $24, %[a]\n\t"
      "add $32, %[b]\n\t"
      "3:\n\t"
      "test %[odd], %[odd]\n\t"
      "jz 4f\n\t"
      /* The last row alone: the panel ends there (A's pair is (x, 0)). */
      "vmovdqu (%[b]), %x[b0]\n\t"
      "vpxor %[p], %[p], %[p]\n\t"
      "vpunpckhbw %x[p], %x[b0], %x[b1]\n\t"
      "vpunpcklbw %x[p], %x[b0], %x[b0]\n\t"
      "vpmovsxbw %x[b0], %[b0]\n\t"
      "vpmovsxbw %x[b1], %[b1]\n\t"
      KILN_Q8A8_ROWS(0)
      "4:\n\t"
      : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),
        [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),
        [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),
        [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [p] "=&x"(p), [a] "+r"(a), [b] "+r"(b),
        [n2] "+r"(n2), [n1] "+r"(n1), [odd] "+r"(odd)
      :
      : "cc", "memory");
  __m256i acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int i = 0; i < 12; ++i) _mm256_storeu_si256((__m256i*)(out + 8 * i), acc[i]);
}

/* The quantizer: per row, the scale (the scalar rule's, vectorised: max of
 * |x| and a finiteness check), then 8 elements at a time x / s (IEEE
 * division, as the rule), rounded half to even, clamped, stored as int16
 * into the row's pair slots. A strided or bf16 row takes the scalar rule. */
void kiln_qd8_gemm_pack_a__avx2(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                const uint16_t* a16, int64_t rs, int64_t cs, int16_t* out,
                                float* scales) {
  const int64_t kp = k + (k & 1);
  if (a16 || cs != 1) {
    kiln_qd8_gemm_pack_a__generic(rows, rows_pad, k, a, a16, rs, cs, out, scales);
    return;
  }
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
  const __m256 big = _mm256_set1_ps(INFINITY);
  for (int64_t i = 0; i < rows_pad; ++i) {
    int16_t* panel = out + (i / 6) * kp * 6 + (i % 6) * 2;
    if (i >= rows) {
      for (int64_t t = 0; t < kp / 2; ++t) panel[t * 12] = panel[t * 12 + 1] = 0;
      scales[i] = 0.0f;
      continue;
    }
    const float* x = a + i * rs;
    __m256 mx = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    int64_t p = 0;
    for (; p + 8 <= k; p += 8) {
      __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + p), absmask);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, big, _CMP_NLT_UQ)); /* inf or NaN */
      mx = _mm256_max_ps(mx, v);
    }
    float lanes[8], amax = 0.0f;
    int finite = _mm256_movemask_ps(bad) == 0;
    _mm256_storeu_ps(lanes, mx);
    for (int l = 0; l < 8; ++l) amax = fmaxf(amax, lanes[l]);
    for (; p < k; ++p) {
      finite &= isfinite(x[p]) != 0;
      amax = fmaxf(amax, fabsf(x[p]));
    }
    float s = amax / 127.0f;
    s = !finite ? NAN : s == 0.0f ? 1.0f : s;
    scales[i] = s;
    if (!finite) {
      for (int64_t t = 0; t < kp / 2; ++t) panel[t * 12] = panel[t * 12 + 1] = 0;
      continue;
    }
    const __m256 sv = _mm256_set1_ps(s);
    for (p = 0; p + 8 <= k; p += 8) {
      __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + p), sv),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm256_min_ps(_mm256_max_ps(r, nlim), lim);
      __m256i q32 = _mm256_cvtps_epi32(r);
      __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
      int32_t pairs[4];
      _mm_storeu_si128((__m128i*)pairs, q16);
      for (int u = 0; u < 4; ++u) memcpy(panel + (p / 2 + u) * 12, &pairs[u], 4);
    }
    for (; p < k; ++p) panel[(p / 2) * 12 + (p & 1)] = kiln_gemm_q8a8_quantize(x[p], s);
    if (k & 1) panel[(k / 2) * 12 + 1] = 0;
  }
}
