/* AVX-512 convolution kernels. Compiled only with the AVX-512 flags (meson:
 * isa_avx512_args) and called only when kiln_cpu_isa() >= KILN_ISA_AVX512.
 *
 * Why: until these, the AVX-512 level ran the AVX2 kernels
 * (kiln_conv_avx2.c), whose ymm FMAs reach at most half the FMA peak of a
 * core with two 512-bit FMA units (an Intel Xeon measured 240 GFLOP/s a
 * core with zmm, so 120 with ymm); Zen 4 splits a zmm FMA over its two
 * 256-bit units, and there both reach its peak. The channel-vector tile
 * (6 pixels x 16 output channels: every NHWC conv, and the NCHW convs with
 * 16 or more output channels) keeps the AVX2 kernel's shape and semantics
 * (kiln_conv_internal.h), so the drivers, the packed panels and the stores
 * are unchanged: 16 channels are one zmm, and consecutive taps alternate
 * between two sets of six accumulators (even and odd taps, added at the
 * end), so that twelve independent chains cover the latency of two FMA
 * units. Each output is then the sum of two partial
 * sums: another order than the AVX2 kernel's, with the same fp32 accuracy
 * (the tests hold every level to a double reference).
 *
 * Intrinsics rather than the AVX2 file's inline assembly: 32 zmm registers
 * leave room for the 12 accumulators, the weights and the broadcasts, and
 * GCC folds each broadcast into its FMA (an embedded broadcast: one
 * fused load per FMA). */
#include <immintrin.h>

#include "kernels/conv/kiln_conv_internal.h"
#include "kernels/gemm/kiln_gemm_act_avx512.h"
#include "kernels/gemm/kiln_gemm_internal.h"

/* The implicit-GEMM microkernel (kiln_conv_ukernel_fn: 6 output channels
 * x 16 output pixels of a prepared row) stays the AVX2 one: its 16 pixels
 * start at any float of the row, and one zmm load of them crosses a cache
 * line 15 times in 16 where the AVX2 kernel's two ymm halves cross half as
 * often. A zmm version with two sets of accumulators measured 5 % slower
 * on Zen 4 (ResNet-18's NCHW stem, 2.59 against 2.46 ms on one core). */
void kiln_f32_conv_ukernel_6x16__avx512(int64_t k, const float* w, const float* src,
                                        const int64_t* off, const float* bias6, const float* cin,
                                        const kiln_conv_store_t* st) {
  kiln_f32_conv_ukernel_6x16__avx2(k, w, src, off, bias6, cin, st);
}

/* The channel-vector microkernels: 6 output pixels, each at its own place
 * in the prepared input, x the 16 output channels of one packed panel
 * (kiln_conv_ukernel_ct_fn) or of two (kiln_conv_ukernel_ct2_fn, panel 1's
 * weights at w + w_next); per tap one weight row per panel, a broadcast
 * per pixel. Two panels: each broadcast feeds two FMAs; one load per FMA
 * was the single-panel kernel's bound on a core with two 512-bit FMA units
 * (Zen 5: ResNet-18's 3x3 convs at 63 % of the FMA peak on two threads).
 * Even and odd taps sum in chains of their own, added at the end, in both,
 * so a panel's values do not depend on whether it ran paired: 24
 * accumulators, four weight vectors and a broadcast fill 29 of the 32 zmm.
 * The accumulators are named, not an array: with arrays GCC set them up
 * and summed them through the stack (ResNet-18's NHWC convs 15.3-15.8 ms
 * against 14.4-14.5 on one Zen 4 core). */
#define KILN_CT2_INIT(E, CIN, B)                                   \
  E##0 = CIN ? _mm512_loadu_ps(CIN) : _mm512_loadu_ps(B);           \
  E##1 = CIN ? _mm512_loadu_ps(CIN + 16) : E##0;                    \
  E##2 = CIN ? _mm512_loadu_ps(CIN + 32) : E##0;                    \
  E##3 = CIN ? _mm512_loadu_ps(CIN + 48) : E##0;                    \
  E##4 = CIN ? _mm512_loadu_ps(CIN + 64) : E##0;                    \
  E##5 = CIN ? _mm512_loadu_ps(CIN + 80) : E##0
#define KILN_CT2_TAP(I, X, E, F, WE, WF)         \
  do {                                            \
    if (R > I) {                                  \
      const __m512 bc = _mm512_set1_ps(s##I[X]);  \
      E = _mm512_fmadd_ps(bc, WE, E);             \
      if (two) F = _mm512_fmadd_ps(bc, WF, F);    \
    }                                             \
  } while (0)
/* Tap X of the first R of the six pixels into accumulator sets E and F. */
#define KILN_CT2_TAPS(X, E, F, WE, WF)   \
  KILN_CT2_TAP(0, X, E##0, F##0, WE, WF); \
  KILN_CT2_TAP(1, X, E##1, F##1, WE, WF); \
  KILN_CT2_TAP(2, X, E##2, F##2, WE, WF); \
  KILN_CT2_TAP(3, X, E##3, F##3, WE, WF); \
  KILN_CT2_TAP(4, X, E##4, F##4, WE, WF); \
  KILN_CT2_TAP(5, X, E##5, F##5, WE, WF)
#define KILN_CT2_STORE(OUT, E, D)                               \
  _mm512_storeu_ps(OUT, _mm512_add_ps(E##0, D##0));            \
  _mm512_storeu_ps(OUT + 16, _mm512_add_ps(E##1, D##1));       \
  _mm512_storeu_ps(OUT + 32, _mm512_add_ps(E##2, D##2));       \
  _mm512_storeu_ps(OUT + 48, _mm512_add_ps(E##3, D##3));       \
  _mm512_storeu_ps(OUT + 64, _mm512_add_ps(E##4, D##4));       \
  _mm512_storeu_ps(OUT + 80, _mm512_add_ps(E##5, D##5))

/* One panel (two 0) or two, then the tiles to out0 / out1 (6 x 16 each)
 * or, with yd, the first R pixels to y (kiln_conv_ct_y_t: yd->np == R);
 * two and R are constants in each instance, the activation is a switch
 * over the stores alone. A partial tile (the last of a 7x7 map: 49 = 8 x
 * 6 + 1) computes only its R pixels. */
static inline __attribute__((always_inline)) void kiln_conv_ct_6x32_avx512(
    const int two, const int R, int64_t k, const float* w, int64_t w_next,
    const float* const* px, const int64_t* off, const float* bias32, const float* cin0,
    const float* cin1, float* out0, float* out1, const kiln_conv_ct_y_t* yd) {
  const float *s0 = px[0], *s1 = px[1], *s2 = px[2], *s3 = px[3], *s4 = px[4], *s5 = px[5];
  const float* v = w + w_next;
  /* e / d: panel 0's even / odd taps; f / g: panel 1's. */
  __m512 e0, e1, e2, e3, e4, e5, f0, f1, f2, f3, f4, f5;
  KILN_CT2_INIT(e, cin0, bias32);
  __m512 d0 = _mm512_setzero_ps(), d1 = d0, d2 = d0, d3 = d0, d4 = d0, d5 = d0;
  __m512 g0 = d0, g1 = d0, g2 = d0, g3 = d0, g4 = d0, g5 = d0;
  if (two) {
    KILN_CT2_INIT(f, cin1, bias32 + 16);
  } else {
    f0 = f1 = f2 = f3 = f4 = f5 = d0;
  }
  int64_t p = 0;
  for (; p + 2 <= k; p += 2, w += 32, v += 32) {
    const int64_t a = off[p], b = off[p + 1];
    const __m512 wa = _mm512_loadu_ps(w), va = two ? _mm512_loadu_ps(v) : wa;
    KILN_CT2_TAPS(a, e, f, wa, va);
    const __m512 wb = _mm512_loadu_ps(w + 16), vb = two ? _mm512_loadu_ps(v + 16) : wb;
    KILN_CT2_TAPS(b, d, g, wb, vb);
  }
  if (p < k) {
    const int64_t a = off[p];
    const __m512 wa = _mm512_loadu_ps(w), va = two ? _mm512_loadu_ps(v) : wa;
    KILN_CT2_TAPS(a, e, f, wa, va);
  }
  if (!yd) {
    KILN_CT2_STORE(out0, e, d);
    if (two) {
      KILN_CT2_STORE(out1, f, g);
    }
    return;
  }
  /* Panel 1's first cols1 channels are real (its last lanes masked). Both
   * loads of a row before its stores: res may be y. */
  float* y = yd->y;
  const float* r = yd->res;
  const int64_t ld = yd->ldy;
  const int rf = yd->res_first;
  const __mmask16 m1 = (__mmask16)((1u << yd->cols1) - 1u);
#define KILN_CT2_Y_ROW(I, ACT)                                                      \
  do {                                                                              \
    if (R > I) {                                                                    \
      __m512 x0 = _mm512_add_ps(e##I, d##I), x1 = _mm512_add_ps(f##I, g##I);       \
      __m512 r0 = x0, r1 = x1;                                                      \
      if (r) {                                                                      \
        r0 = _mm512_loadu_ps(r + I * ld);                                           \
        if (two) r1 = _mm512_maskz_loadu_ps(m1, r + I * ld + 16);                   \
      }                                                                             \
      if (r && rf) x0 = _mm512_add_ps(x0, r0), x1 = _mm512_add_ps(x1, r1);          \
      x0 = kiln_gemm_act_avx512(x0, ACT);                                           \
      if (two) x1 = kiln_gemm_act_avx512(x1, ACT);                                  \
      if (r && !rf) x0 = _mm512_add_ps(x0, r0), x1 = _mm512_add_ps(x1, r1);         \
      _mm512_storeu_ps(y + I * ld, x0);                                             \
      if (two) {                                                                    \
        if (m1 == 0xFFFF)                                                           \
          _mm512_storeu_ps(y + I * ld + 16, x1);                                    \
        else                                                                        \
          _mm512_mask_storeu_ps(y + I * ld + 16, m1, x1);                           \
      }                                                                             \
    }                                                                               \
  } while (0)
#define KILN_CT2_Y_ROWS(ACT) \
  KILN_CT2_Y_ROW(0, ACT);    \
  KILN_CT2_Y_ROW(1, ACT);    \
  KILN_CT2_Y_ROW(2, ACT);    \
  KILN_CT2_Y_ROW(3, ACT);    \
  KILN_CT2_Y_ROW(4, ACT);    \
  KILN_CT2_Y_ROW(5, ACT)
  KILN_GEMM_EPILOGUE_BY_ACT(yd->act, KILN_CT2_Y_ROWS)
#undef KILN_CT2_Y_ROWS
#undef KILN_CT2_Y_ROW
}

/* Each pixel count its own function: one body per function keeps GCC's
 * register allocation of the loop as tight as the plain kernel's (with the
 * six instances in one function it kept a pixel's base in a vector
 * register, a VMOVQ per tap pair: 2-3 % on ResNet-18's 56x56 convs). */
#define KILN_CT_Y_FN(TWO, R)                                                                  \
  static __attribute__((noinline)) void kiln_conv_ct_y_##TWO##_##R(                          \
      int64_t k, const float* w, int64_t w_next, const float* const* px, const int64_t* off, \
      const float* bias, const float* cin0, const float* cin1, const kiln_conv_ct_y_t* y) {  \
    kiln_conv_ct_6x32_avx512(TWO, R, k, w, w_next, px, off, bias, cin0, cin1, NULL, NULL, y); \
  }
#define KILN_CT_Y_FNS(TWO) \
  KILN_CT_Y_FN(TWO, 1)     \
  KILN_CT_Y_FN(TWO, 2)     \
  KILN_CT_Y_FN(TWO, 3)     \
  KILN_CT_Y_FN(TWO, 4)     \
  KILN_CT_Y_FN(TWO, 5)     \
  KILN_CT_Y_FN(TWO, 6)
KILN_CT_Y_FNS(0)
KILN_CT_Y_FNS(1)
#undef KILN_CT_Y_FNS
#undef KILN_CT_Y_FN
/* The same for partial tiles through out0 / out1 (their first R rows),
 * where the driver keeps partial sums between K blocks. */
#define KILN_CT_T_FN(TWO, R)                                                                  \
  static __attribute__((noinline)) void kiln_conv_ct_t_##TWO##_##R(                          \
      int64_t k, const float* w, int64_t w_next, const float* const* px, const int64_t* off, \
      const float* bias, const float* cin0, const float* cin1, float* out0, float* out1) {   \
    kiln_conv_ct_6x32_avx512(TWO, R, k, w, w_next, px, off, bias, cin0, cin1, out0, out1,    \
                             NULL);                                                           \
  }
#define KILN_CT_T_FNS(TWO) \
  KILN_CT_T_FN(TWO, 1)     \
  KILN_CT_T_FN(TWO, 2)     \
  KILN_CT_T_FN(TWO, 3)     \
  KILN_CT_T_FN(TWO, 4)     \
  KILN_CT_T_FN(TWO, 5)
KILN_CT_T_FNS(0)
KILN_CT_T_FNS(1)
#undef KILN_CT_T_FNS
#undef KILN_CT_T_FN
/* np 1..5 (a whole tile's callers take the plain kernels). */
#define KILN_CT_T_BY_NP(TWO, NP, ARGS)             \
  switch (NP) {                                   \
    case 1: kiln_conv_ct_t_##TWO##_1 ARGS; break; \
    case 2: kiln_conv_ct_t_##TWO##_2 ARGS; break; \
    case 3: kiln_conv_ct_t_##TWO##_3 ARGS; break; \
    case 4: kiln_conv_ct_t_##TWO##_4 ARGS; break; \
    default: kiln_conv_ct_t_##TWO##_5 ARGS;       \
  }
#define KILN_CT_BY_NP(TWO, NP, ARGS)             \
  switch (NP) {                                 \
    case 1: kiln_conv_ct_y_##TWO##_1 ARGS; break; \
    case 2: kiln_conv_ct_y_##TWO##_2 ARGS; break; \
    case 3: kiln_conv_ct_y_##TWO##_3 ARGS; break; \
    case 4: kiln_conv_ct_y_##TWO##_4 ARGS; break; \
    case 5: kiln_conv_ct_y_##TWO##_5 ARGS; break; \
    default: kiln_conv_ct_y_##TWO##_6 ARGS;       \
  }

void kiln_f32_conv_ct_ukernel_6x16__avx512(int64_t k, const float* w, const float* const* px,
                                           const int64_t* off, const float* bias16,
                                           const float* cin, float* out) {
  kiln_conv_ct_6x32_avx512(0, 6, k, w, 0, px, off, bias16, cin, NULL, out, NULL, NULL);
}

void kiln_f32_conv_ct_ukernel_6x32__avx512(int64_t k, const float* w, int64_t w_next,
                                           const float* const* px, const int64_t* off,
                                           const float* bias32, const float* cin0,
                                           const float* cin1, float* out0, float* out1) {
  kiln_conv_ct_6x32_avx512(1, 6, k, w, w_next, px, off, bias32, cin0, cin1, out0, out1, NULL);
}

void kiln_f32_conv_ct_ukernel_6x16_y__avx512(int64_t k, const float* w, const float* const* px,
                                             const int64_t* off, const float* bias16,
                                             const float* cin, const kiln_conv_ct_y_t* y) {
  KILN_CT_BY_NP(0, y->np, (k, w, 0, px, off, bias16, cin, NULL, y))
}

void kiln_f32_conv_ct_ukernel_6x32_y__avx512(int64_t k, const float* w, int64_t w_next,
                                             const float* const* px, const int64_t* off,
                                             const float* bias32, const float* cin0,
                                             const float* cin1, const kiln_conv_ct_y_t* y) {
  KILN_CT_BY_NP(1, y->np, (k, w, w_next, px, off, bias32, cin0, cin1, y))
}

void kiln_f32_conv_ct_ukernel_6x16_np__avx512(int np, int64_t k, const float* w,
                                              const float* const* px, const int64_t* off,
                                              const float* bias16, const float* cin, float* out) {
  if (np >= 6) {
    kiln_f32_conv_ct_ukernel_6x16__avx512(k, w, px, off, bias16, cin, out);
    return;
  }
  KILN_CT_T_BY_NP(0, np, (k, w, 0, px, off, bias16, cin, NULL, out, NULL))
}

void kiln_f32_conv_ct_ukernel_6x32_np__avx512(int np, int64_t k, const float* w, int64_t w_next,
                                              const float* const* px, const int64_t* off,
                                              const float* bias32, const float* cin0,
                                              const float* cin1, float* out0, float* out1) {
  if (np >= 6) {
    kiln_f32_conv_ct_ukernel_6x32__avx512(k, w, w_next, px, off, bias32, cin0, cin1, out0, out1);
    return;
  }
  KILN_CT_T_BY_NP(1, np, (k, w, w_next, px, off, bias32, cin0, cin1, out0, out1))
}
#undef KILN_CT_T_BY_NP
#undef KILN_CT_BY_NP
#undef KILN_CT2_INIT
#undef KILN_CT2_TAP
#undef KILN_CT2_TAPS
#undef KILN_CT2_STORE

/* The channel-vector tile's store into NCHW: a transpose and masked
 * stores, bound by memory, not by vector width: the AVX2 one serves. */
void kiln_f32_conv_ct_store6__avx512(const float* tmp, float* y, int64_t ldy, int64_t rows,
                                     const float* res, int res_first, int relu) {
  kiln_f32_conv_ct_store6__avx2(tmp, y, ldy, rows, res, res_first, relu);
}
