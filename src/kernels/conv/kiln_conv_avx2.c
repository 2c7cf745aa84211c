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
#include "kernels/gemm/kiln_gemm_act_avx2.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/kiln_transpose_avx2.h"

#define KILN_CONV_A2_ROW(P, I, C0, C1)                     \
  "vbroadcastss 24*" #P "+4*" #I "(%[w]), %[t]\n\t"        \
  "vfmadd231ps %[b0], %[t], %[" #C0 "]\n\t"                \
  "vfmadd231ps %[b1], %[t], %[" #C1 "]\n\t"
#define KILN_CONV_A2_STEP(P)                               \
  "mov 8*" #P "(%[off]), %[o]\n\t"                         \
  "vmovups (%[src],%[o],4), %[b0]\n\t"                     \
  "vmovups 32(%[src],%[o],4), %[b1]\n\t"                   \
  KILN_CONV_A2_ROW(P, 0, c00, c01)                         \
  KILN_CONV_A2_ROW(P, 1, c10, c11)                         \
  KILN_CONV_A2_ROW(P, 2, c20, c21)                         \
  KILN_CONV_A2_ROW(P, 3, c30, c31)                         \
  KILN_CONV_A2_ROW(P, 4, c40, c41)                         \
  KILN_CONV_A2_ROW(P, 5, c50, c51)
#define KILN_CONV_A2_INIT(I, C0, C1)                       \
  "vbroadcastss 4*" #I "(%[init]), %[" #C0 "]\n\t"         \
  "vmovaps %[" #C0 "], %[" #C1 "]\n\t"
#define KILN_CONV_A2_LOAD(I, C0, C1)                       \
  "vmovups 64*" #I "(%[init]), %[" #C0 "]\n\t"             \
  "vmovups 64*" #I "+32(%[init]), %[" #C1 "]\n\t"
/* The k loop after the accumulators are set (the same text for both
 * initialisations). */
#define KILN_CONV_A2_LOOP                                                      \
  "test %[n4], %[n4]\n\t"                                                     \
  "jz 2f\n\t"                                                                 \
  "1:\n\t"                                                                    \
  KILN_CONV_A2_STEP(0) KILN_CONV_A2_STEP(1) KILN_CONV_A2_STEP(2) KILN_CONV_A2_STEP(3) \
  "add $96, %[w]\n\t"                                                         \
  "add $32, %[off]\n\t"                                                       \
  "dec %[n4]\n\t"                                                             \
  "jnz 1b\n\t"                                                                \
  "2:\n\t"                                                                    \
  "test %[n1], %[n1]\n\t"                                                     \
  "jz 4f\n\t"                                                                 \
  "3:\n\t"                                                                    \
  KILN_CONV_A2_STEP(0)                                                         \
  "add $24, %[w]\n\t"                                                         \
  "add $8, %[off]\n\t"                                                        \
  "dec %[n1]\n\t"                                                             \
  "jnz 3b\n\t"                                                                \
  "4:\n\t"
#define KILN_CONV_A2_OPERANDS                                                      \
  : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),       \
    [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),       \
    [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),       \
    [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [w] "+r"(w), [off] "+r"(off),   \
    [n4] "+r"(n4), [n1] "+r"(n1), [o] "=&r"(o)                                    \
  : [src] "r"(src), [init] "r"(init)                                              \
  : "cc", "memory"

/* Row I of the tile: residual and relu as st asks, then two stores. */
#define KILN_CONV_A2_STORE(I, C0, C1)                                        \
  do {                                                                       \
    __m256 v0 = C0, v1 = C1;                                                 \
    float* d = st->out + (I) * st->ldo;                                      \
    const float* r = st->res ? st->res + (I) * st->ldr : NULL;               \
    if (r && st->res_first) {                                                \
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(r));                            \
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(r + 8));                        \
    }                                                                        \
    if (st->relu) { /* max(0, v) returns v when v is NaN, as torch */        \
      v0 = _mm256_max_ps(_mm256_setzero_ps(), v0);                           \
      v1 = _mm256_max_ps(_mm256_setzero_ps(), v1);                           \
    }                                                                        \
    if (r && !st->res_first) {                                               \
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(r));                            \
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(r + 8));                        \
    }                                                                        \
    _mm256_storeu_ps(d, v0);                                                 \
    _mm256_storeu_ps(d + 8, v1);                                             \
  } while (0)

void kiln_f32_conv_ukernel_6x16__avx2(int64_t k, const float* w, const float* src,
                                      const int64_t* off, const float* bias6, const float* cin,
                                      const kiln_conv_store_t* st) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t;
  int64_t n4 = k / 4, n1 = k % 4, o;
  const float* init = cin ? cin : bias6;
  /* The output rows are written right after the loop: when they are y
   * (not a cached tile) ask for their lines now, so the stores do not
   * stall on read-for-ownership misses. */
  if (st->ldo != KILN_CONV_TILE_W)
    for (int i = 0; i < 6; ++i) {
      _mm_prefetch((const char*)(st->out + i * st->ldo), _MM_HINT_T0);
      _mm_prefetch((const char*)(st->out + i * st->ldo + 15), _MM_HINT_T0);
    }
  if (cin) {
    __asm__ volatile(
        KILN_CONV_A2_LOAD(0, c00, c01) KILN_CONV_A2_LOAD(1, c10, c11)
        KILN_CONV_A2_LOAD(2, c20, c21) KILN_CONV_A2_LOAD(3, c30, c31)
        KILN_CONV_A2_LOAD(4, c40, c41) KILN_CONV_A2_LOAD(5, c50, c51)
        KILN_CONV_A2_LOOP
        KILN_CONV_A2_OPERANDS);
  } else {
    __asm__ volatile(
        KILN_CONV_A2_INIT(0, c00, c01) KILN_CONV_A2_INIT(1, c10, c11)
        KILN_CONV_A2_INIT(2, c20, c21) KILN_CONV_A2_INIT(3, c30, c31)
        KILN_CONV_A2_INIT(4, c40, c41) KILN_CONV_A2_INIT(5, c50, c51)
        KILN_CONV_A2_LOOP
        KILN_CONV_A2_OPERANDS);
  }
  KILN_CONV_A2_STORE(0, c00, c01);
  KILN_CONV_A2_STORE(1, c10, c11);
  KILN_CONV_A2_STORE(2, c20, c21);
  KILN_CONV_A2_STORE(3, c30, c31);
  KILN_CONV_A2_STORE(4, c40, c41);
  KILN_CONV_A2_STORE(5, c50, c51);
}

/* The channel-vector microkernel: 6 output pixels (any six, each at its
 * own place in the prepared input) x 16 output channels, the weights a
 * 16-wide panel row per tap, the pixels broadcast. 12 ymm accumulators
 * (pixel i: channels 0-7 and 8-15), 2 ymm for the weight row, 1 for the
 * broadcast; six base registers, one per pixel. */
#define KILN_CONV_CT_ROW(I, C0, C1)                        \
  "vbroadcastss (%[s" #I "],%[o],4), %[t]\n\t"             \
  "vfmadd231ps %[b0], %[t], %[" #C0 "]\n\t"                \
  "vfmadd231ps %[b1], %[t], %[" #C1 "]\n\t"
#define KILN_CONV_CT_STEP(P)                               \
  "mov 8*" #P "(%[off]), %[o]\n\t"                         \
  "vmovups 64*" #P "(%[w]), %[b0]\n\t"                     \
  "vmovups 64*" #P "+32(%[w]), %[b1]\n\t"                  \
  KILN_CONV_CT_ROW(0, c00, c01)                            \
  KILN_CONV_CT_ROW(1, c10, c11)                            \
  KILN_CONV_CT_ROW(2, c20, c21)                            \
  KILN_CONV_CT_ROW(3, c30, c31)                            \
  KILN_CONV_CT_ROW(4, c40, c41)                            \
  KILN_CONV_CT_ROW(5, c50, c51)
#define KILN_CONV_CT_INIT(I, C0, C1)                       \
  "vmovups (%[init]), %[" #C0 "]\n\t"                      \
  "vmovups 32(%[init]), %[" #C1 "]\n\t"
/* One counter (k itself) for both loops: GCC allows 30 asm operands and
 * the six pixel bases use up the second. */
#define KILN_CONV_CT_LOOP                                                      \
  "cmp $4, %[k]\n\t"                                                          \
  "jb 2f\n\t"                                                                 \
  "1:\n\t"                                                                    \
  KILN_CONV_CT_STEP(0) KILN_CONV_CT_STEP(1) KILN_CONV_CT_STEP(2) KILN_CONV_CT_STEP(3) \
  "add $256, %[w]\n\t"                                                        \
  "add $32, %[off]\n\t"                                                       \
  "sub $4, %[k]\n\t"                                                          \
  "cmp $4, %[k]\n\t"                                                          \
  "jae 1b\n\t"                                                                \
  "2:\n\t"                                                                    \
  "test %[k], %[k]\n\t"                                                       \
  "jz 4f\n\t"                                                                 \
  "3:\n\t"                                                                    \
  KILN_CONV_CT_STEP(0)                                                        \
  "add $64, %[w]\n\t"                                                         \
  "add $8, %[off]\n\t"                                                        \
  "dec %[k]\n\t"                                                              \
  "jnz 3b\n\t"                                                                \
  "4:\n\t"
#define KILN_CONV_CT_OPERANDS                                                      \
  : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),       \
    [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),       \
    [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),       \
    [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [w] "+r"(w), [off] "+r"(off),   \
    [k] "+r"(k), [o] "=&r"(o)                                                     \
  : [s0] "r"(px[0]), [s1] "r"(px[1]), [s2] "r"(px[2]), [s3] "r"(px[3]),           \
    [s4] "r"(px[4]), [s5] "r"(px[5]), [init] "r"(init)                            \
  : "cc", "memory"

/* The tile, then either out (6 x 16) or, with yd, its first yd->np pixels
 * to y (kiln_conv_ct_y_t: a whole panel) through act, a constant in each
 * instance. */
static inline __attribute__((always_inline)) void kiln_conv_ct_6x16_avx2(
    int64_t k, const float* w, const float* const* px, const int64_t* off, const float* bias16,
    const float* cin, float* out, const kiln_conv_ct_y_t* yd, const kiln_activation_t act) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, b0, b1, t;
  int64_t o;
  const float* init = bias16;
  if (cin) {
    __asm__ volatile(
        KILN_CONV_A2_LOAD(0, c00, c01) KILN_CONV_A2_LOAD(1, c10, c11)
        KILN_CONV_A2_LOAD(2, c20, c21) KILN_CONV_A2_LOAD(3, c30, c31)
        KILN_CONV_A2_LOAD(4, c40, c41) KILN_CONV_A2_LOAD(5, c50, c51)
        KILN_CONV_CT_LOOP
        : [c00] "=&x"(c00), [c01] "=&x"(c01), [c10] "=&x"(c10), [c11] "=&x"(c11),
          [c20] "=&x"(c20), [c21] "=&x"(c21), [c30] "=&x"(c30), [c31] "=&x"(c31),
          [c40] "=&x"(c40), [c41] "=&x"(c41), [c50] "=&x"(c50), [c51] "=&x"(c51),
          [b0] "=&x"(b0), [b1] "=&x"(b1), [t] "=&x"(t), [w] "+r"(w), [off] "+r"(off),
          [k] "+r"(k), [o] "=&r"(o)
        : [s0] "r"(px[0]), [s1] "r"(px[1]), [s2] "r"(px[2]), [s3] "r"(px[3]),
          [s4] "r"(px[4]), [s5] "r"(px[5]), [init] "r"(cin)
        : "cc", "memory");
  } else {
    __asm__ volatile(
        KILN_CONV_CT_INIT(0, c00, c01) KILN_CONV_CT_INIT(1, c10, c11)
        KILN_CONV_CT_INIT(2, c20, c21) KILN_CONV_CT_INIT(3, c30, c31)
        KILN_CONV_CT_INIT(4, c40, c41) KILN_CONV_CT_INIT(5, c50, c51)
        KILN_CONV_CT_LOOP
        KILN_CONV_CT_OPERANDS);
  }
  if (!yd) {
    _mm256_storeu_ps(out + 0, c00);
    _mm256_storeu_ps(out + 8, c01);
    _mm256_storeu_ps(out + 16, c10);
    _mm256_storeu_ps(out + 24, c11);
    _mm256_storeu_ps(out + 32, c20);
    _mm256_storeu_ps(out + 40, c21);
    _mm256_storeu_ps(out + 48, c30);
    _mm256_storeu_ps(out + 56, c31);
    _mm256_storeu_ps(out + 64, c40);
    _mm256_storeu_ps(out + 72, c41);
    _mm256_storeu_ps(out + 80, c50);
    _mm256_storeu_ps(out + 88, c51);
    return;
  }
  /* Both loads of a row before its stores: res may be y. */
  float* y = yd->y;
  const float* r = yd->res;
  const int64_t ld = yd->ldy;
  const int rf = yd->res_first;
#define KILN_CT_Y_ROW(I, X0, X1)                                                   \
  do {                                                                             \
    if (I >= yd->np) break;                                                        \
    __m256 x0 = X0, x1 = X1, r0 = x0, r1 = x1;                                     \
    if (r) r0 = _mm256_loadu_ps(r + I * ld), r1 = _mm256_loadu_ps(r + I * ld + 8); \
    if (r && rf) x0 = _mm256_add_ps(x0, r0), x1 = _mm256_add_ps(x1, r1);           \
    x0 = kiln_gemm_act_avx2(x0, act);                                              \
    x1 = kiln_gemm_act_avx2(x1, act);                                              \
    if (r && !rf) x0 = _mm256_add_ps(x0, r0), x1 = _mm256_add_ps(x1, r1);          \
    _mm256_storeu_ps(y + I * ld, x0);                                              \
    _mm256_storeu_ps(y + I * ld + 8, x1);                                          \
  } while (0)
  KILN_CT_Y_ROW(0, c00, c01);
  KILN_CT_Y_ROW(1, c10, c11);
  KILN_CT_Y_ROW(2, c20, c21);
  KILN_CT_Y_ROW(3, c30, c31);
  KILN_CT_Y_ROW(4, c40, c41);
  KILN_CT_Y_ROW(5, c50, c51);
#undef KILN_CT_Y_ROW
}

void kiln_f32_conv_ct_ukernel_6x16__avx2(int64_t k, const float* w, const float* const* px,
                                         const int64_t* off, const float* bias16, const float* cin,
                                         float* out) {
  kiln_conv_ct_6x16_avx2(k, w, px, off, bias16, cin, out, NULL, KILN_ACT_NONE);
}

void kiln_f32_conv_ct_ukernel_6x16_y__avx2(int64_t k, const float* w, const float* const* px,
                                           const int64_t* off, const float* bias16,
                                           const float* cin, const kiln_conv_ct_y_t* y) {
#define KILN_CT_Y(A) kiln_conv_ct_6x16_avx2(k, w, px, off, bias16, cin, NULL, y, A)
  KILN_GEMM_EPILOGUE_BY_ACT(y->act, KILN_CT_Y)
#undef KILN_CT_Y
}

void kiln_f32_conv_ct_store6__avx2(const float* tmp, float* y, int64_t ldy, int64_t rows,
                                   const float* res, int res_first, int relu) {
  const __m256i mask = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t h = 0; h < rows; h += 8) {
    __m256 r[8];
    for (int i = 0; i < 6; ++i) r[i] = _mm256_loadu_ps(tmp + i * 16 + h);
    r[6] = r[7] = zero;
    __m256 c[8]; /* c[j]: channel h + j of the six pixels */
    kiln_transpose8x8_avx2(r, c);
    int64_t n = rows - h < 8 ? rows - h : 8;
    for (int64_t j = 0; j < n; ++j) {
      __m256 v = c[j];
      float* d = y + (h + j) * ldy;
      __m256 rv = res ? _mm256_maskload_ps(res + (h + j) * ldy, mask) : zero;
      if (res_first) v = _mm256_add_ps(v, rv);
      if (relu) v = _mm256_max_ps(zero, v); /* NaN kept */
      if (!res_first) v = _mm256_add_ps(v, rv);
      _mm256_maskstore_ps(d, mask, v);
    }
  }
}
