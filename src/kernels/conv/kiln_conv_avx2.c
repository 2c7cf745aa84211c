/* AVX2 + FMA convolution kernels. Compiled only with the AVX2 flags (meson:
 * isa_avx2_args) and called only when kiln_cpu_isa() >= KILN_ISA_AVX2.
 *
 * The 6x16 implicit-GEMM microkernel is the GEMM's 6x16 kernel
 * (kiln_gemm_ukernel_avx2.c) with B read from the prepared input at a
 * per-tap offset instead of from a packed panel: 12 ymm accumulators, 2 ymm
 * for the 16 input pixels of a tap, 1 for the broadcast weight. It is
 * inline assembly for the same reason as the GEMM's: with 15 of 16 ymm live,
 * GCC spills an intrinsic version of this loop. */
#include <immintrin.h>

#include "kernels/conv/kiln_conv_internal.h"

#define KILN_CONV_A2_ROW(P, I, C0, C1)                     \
  "vbroadcastss 24*" #P "+4*" #I "(%[w]), %[t]\n\t"        \
  "vfmadd231ps %[b0], %[t], %[" #C0 "]\n\t"                \
  "vfmadd231ps %[b1], %[t], %[" #C1 "]\n\t"
#define KILN_CONV_A2_STEP(P)                               \
  "mov 8*" #P "(%[off]), %[o]\n\t"                         \
  "vmovups (%[src],%[o],4), %[b0]\n\t"                     \
  "vmovups 32(%[src],%[o],4), %[b1]\n\t"                   \
  "prefetcht0 124(%[src],%[o],4)\n\t"                      \
  KILN_CONV_A2_ROW(P, 0, c00, c01)                         \
  KILN_CONV_A2_ROW(P, 1, c10, c11)                         \
  KILN_CONV_A2_ROW(P, 2, c20, c21)                         \
  KILN_CONV_A2_ROW(P, 3, c30, c31)                         \
  KILN_CONV_A2_ROW(P, 4, c40, c41)                         \
  KILN_CONV_A2_ROW(P, 5, c50, c51)
#define KILN_CONV_A2_INIT(I, C0, C1)                       \
  "vbroadcastss 4*" #I "(%[bias]), %[" #C0 "]\n\t"         \
  "vmovaps %[" #C0 "], %[" #C1 "]\n\t"

void kiln_conv_ukernel_6x16_avx2(int64_t k, const float* w, const float* src,
                                 const int64_t* off, const float* bias6, float* out) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t;
  int64_t n4 = k / 4, n1 = k % 4, o;
  __asm__ volatile(
      KILN_CONV_A2_INIT(0, c00, c01)
      KILN_CONV_A2_INIT(1, c10, c11)
      KILN_CONV_A2_INIT(2, c20, c21)
      KILN_CONV_A2_INIT(3, c30, c31)
      KILN_CONV_A2_INIT(4, c40, c41)
      KILN_CONV_A2_INIT(5, c50, c51)
      "test %[n4], %[n4]\n\t"
      "jz 2f\n\t"
      "1:\n\t"
      KILN_CONV_A2_STEP(0) KILN_CONV_A2_STEP(1) KILN_CONV_A2_STEP(2) KILN_CONV_A2_STEP(3)
      "add $96, %[w]\n\t"
      "add $32, %[off]\n\t"
      "dec %[n4]\n\t"
      "jnz 1b\n\t"
      "2:\n\t"
      "test %[n1], %[n1]\n\t"
      "jz 4f\n\t"
      "3:\n\t"
      KILN_CONV_A2_STEP(0)
      "add $24, %[w]\n\t"
      "add $8, %[off]\n\t"
      "dec %[n1]\n\t"
      "jnz 3b\n\t"
      "4:\n\t"
      : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),
        [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),
        [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),
        [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [w] "+r"(w), [off] "+r"(off),
        [n4] "+r"(n4), [n1] "+r"(n1), [o] "=&r"(o)
      : [src] "r"(src), [bias] "r"(bias6)
      : "cc", "memory");
  __m256 acc[12] = {c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51};
  for (int i = 0; i < 12; ++i) _mm256_storeu_ps(out + i * 8, acc[i]);
}
