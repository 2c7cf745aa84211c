/* bf16 compute with VDPBF16PS (_mm512_dpbf16_ps): C(fp32) += A(bf16) . B(bf16).
 *
 * MR x 32 tiles (MR 1..8): per K pair, two zmm loads of B (one VNNI pair
 * row of each of the strip's two panels: 16 columns x 2 K values, exactly
 * kiln_gemm_bf16_vnni_pack_b's layout), and per row one 32-bit broadcast of
 * A's (p, p + 1) couple feeding two VDPBF16PS, each 32 multiply-adds summed
 * into 16 fp32 lanes. 16 accumulators at MR = 8 cover the instruction's
 * latency. C goes through the fp32 epilogue once, after all of K. An odd K
 * reads the zero row B's packing adds and the zero column of A's.
 *
 * Compiled only with the AVX512_BF16 flags (meson: isa_avx512bf16_args) and
 * called only when kiln_cpu_bf16() has KILN_CPU_BF16_AVX512. Executed and
 * tested on a Sapphire Rapids Xeon (where it has the fp32 FMA's throughput
 * in products, half its bytes of B; Zen 4 runs it at twice the rate). */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_DP_AI static inline __attribute__((always_inline))

KILN_DP_AI void kiln_gemm_dp_tile(const int MR, int64_t pairs, const uint16_t* a, int64_t lda,
                                  const uint16_t* b0, const uint16_t* b1, float* c) {
  __m512 acc[8][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t r = 0; r < pairs; ++r) {
    __m512bh bv0 = (__m512bh)_mm512_loadu_si512((const void*)(b0 + r * 32));
    __m512bh bv1 = (__m512bh)_mm512_loadu_si512((const void*)(b1 + r * 32));
    for (int i = 0; i < MR; ++i) {
      int32_t couple;
      memcpy(&couple, a + i * lda + 2 * r, sizeof(couple));
      __m512bh av = (__m512bh)_mm512_set1_epi32(couple);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, bv0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, bv1);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * 32, acc[i][0]);
    _mm512_storeu_ps(c + i * 32 + 16, acc[i][1]);
  }
}

void kiln_bf16_gemm_block__avx512bf16(const kiln_gemm_bf16_block_t* t, int64_t i0, int64_t i1,
                                      int64_t j0, int64_t j1) {
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = t->kp, pairs = kp / 2;
  _Alignas(64) float ctile[8 * 32];
  for (int64_t j = j0; j < j1; j += 32) {
    int64_t nr = j1 - j < 32 ? j1 - j : 32;
    const uint16_t* b0 = t->b + (j / P) * kp * P;
    /* One panel left: read it twice and drop the copy's columns. */
    const uint16_t* b1 = nr > P ? b0 + kp * P : b0;
    for (int64_t i = i0; i < i1; i += 8) {
      int64_t mr = i1 - i < 8 ? i1 - i : 8;
      const uint16_t* a = t->a + i * t->ka;
      switch (mr) {
        case 1: kiln_gemm_dp_tile(1, pairs, a, t->ka, b0, b1, ctile); break;
        case 2: kiln_gemm_dp_tile(2, pairs, a, t->ka, b0, b1, ctile); break;
        case 3: kiln_gemm_dp_tile(3, pairs, a, t->ka, b0, b1, ctile); break;
        case 4: kiln_gemm_dp_tile(4, pairs, a, t->ka, b0, b1, ctile); break;
        case 5: kiln_gemm_dp_tile(5, pairs, a, t->ka, b0, b1, ctile); break;
        case 6: kiln_gemm_dp_tile(6, pairs, a, t->ka, b0, b1, ctile); break;
        case 7: kiln_gemm_dp_tile(7, pairs, a, t->ka, b0, b1, ctile); break;
        default: kiln_gemm_dp_tile(8, pairs, a, t->ka, b0, b1, ctile); break;
      }
      t->epilogue(mr, nr, ctile, 32, t->c + i * t->ldc + j, t->ldc, t->bias ? t->bias + j : NULL,
                  t->res ? t->res + i * t->ldr + j : NULL, t->ldr, t->act);
    }
  }
}
