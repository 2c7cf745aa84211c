/* AVX-512 GEMM microkernel, 8x32: 16 zmm accumulators (8 rows x two
 * neighbouring 16-wide packed B panels), 2 zmm for B, the A value folded
 * into each FMA as an embedded broadcast. Per k step: 2 B loads + 8
 * broadcast loads feed 16 FMAs, within two load ports, and 16 independent
 * chains cover the FMA latency on two 512-bit FMA units (Intel) as well as
 * on Zen 4's double-pumped ones.
 *
 * Compiled only with the AVX-512 flags (meson: isa_avx512_args) and called
 * only when kiln_cpu_isa() == KILN_ISA_AVX512. NOTE: written without
 * AVX-512 hardware at hand; the tests run it only where the CPU has it. */
#include <immintrin.h>

#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_GEMM_A5_ROW(I, R0, R1)                           \
  do {                                                        \
    __m512 av_ = _mm512_set1_ps(ap_[I]);                      \
    R0 = _mm512_fmadd_ps(av_, b0_, R0);                       \
    R1 = _mm512_fmadd_ps(av_, b1_, R1);                       \
  } while (0)

#define KILN_GEMM_A5_STEP(P)                                  \
  do {                                                        \
    const float* ap_ = a + (P) * 8;                           \
    __m512 b0_ = _mm512_loadu_ps(b + (P) * 16);                \
    __m512 b1_ = _mm512_loadu_ps(bn + (P) * 16);               \
    KILN_GEMM_A5_ROW(0, c00, c01);                            \
    KILN_GEMM_A5_ROW(1, c10, c11);                            \
    KILN_GEMM_A5_ROW(2, c20, c21);                            \
    KILN_GEMM_A5_ROW(3, c30, c31);                            \
    KILN_GEMM_A5_ROW(4, c40, c41);                            \
    KILN_GEMM_A5_ROW(5, c50, c51);                            \
    KILN_GEMM_A5_ROW(6, c60, c61);                            \
    KILN_GEMM_A5_ROW(7, c70, c71);                            \
  } while (0)

void kiln_f32_gemm_ukernel_8x32__avx512(int64_t kc, const float* a, const float* b,
                                        const float* b_next, const float* cin, int64_t ldcin,
                                        float* out, int64_t ldout) {
  const float* bn = b_next;
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  for (int i = 0; i < 8; ++i) {
    _mm_prefetch((const char*)(out + i * ldout), _MM_HINT_T0);
    _mm_prefetch((const char*)(out + i * ldout + 31), _MM_HINT_T0);
  }
  int64_t p = 0;
  for (; p + 2 <= kc; p += 2) {
    KILN_GEMM_A5_STEP(0);
    KILN_GEMM_A5_STEP(1);
    a += 16;
    b += 32;
    bn += 32;
  }
  for (; p < kc; ++p) {
    KILN_GEMM_A5_STEP(0);
    a += 8;
    b += 16;
    bn += 16;
  }
  __m512 acc[16] = {c00, c01, c10, c11, c20, c21, c30, c31,
                    c40, c41, c50, c51, c60, c61, c70, c71};
  for (int i = 0; i < 8; ++i) {
    __m512 lo = acc[2 * i], hi = acc[2 * i + 1];
    if (cin) {
      lo = _mm512_add_ps(lo, _mm512_loadu_ps(cin + i * ldcin));
      hi = _mm512_add_ps(hi, _mm512_loadu_ps(cin + i * ldcin + 16));
    }
    _mm512_storeu_ps(out + i * ldout, lo);
    _mm512_storeu_ps(out + i * ldout + 16, hi);
  }
}
