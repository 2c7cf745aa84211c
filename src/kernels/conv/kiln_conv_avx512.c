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

/* The channel-vector microkernel (kiln_conv_ukernel_ct_fn): 6 output
 * pixels, each at its own place in the prepared input, x the 16 output
 * channels of one packed panel; per tap one weight row, a broadcast per
 * pixel. The twelve accumulators are named, not an array: with arrays GCC
 * set them up and summed them through the stack, and ResNet-18's NHWC
 * convs took 15.3-15.8 ms against 14.4-14.5 on one Zen 4 core. */
void kiln_f32_conv_ct_ukernel_6x16__avx512(int64_t k, const float* w, const float* const* px,
                                           const int64_t* off, const float* bias16,
                                           const float* cin, float* out) {
  const float *s0 = px[0], *s1 = px[1], *s2 = px[2], *s3 = px[3], *s4 = px[4], *s5 = px[5];
  __m512 e0, e1, e2, e3, e4, e5;
  if (cin) {
    e0 = _mm512_loadu_ps(cin);
    e1 = _mm512_loadu_ps(cin + 16);
    e2 = _mm512_loadu_ps(cin + 32);
    e3 = _mm512_loadu_ps(cin + 48);
    e4 = _mm512_loadu_ps(cin + 64);
    e5 = _mm512_loadu_ps(cin + 80);
  } else {
    e0 = e1 = e2 = e3 = e4 = e5 = _mm512_loadu_ps(bias16);
  }
  __m512 d0 = _mm512_setzero_ps(), d1 = d0, d2 = d0, d3 = d0, d4 = d0, d5 = d0;
  int64_t p = 0;
  for (; p + 2 <= k; p += 2, w += 32) {
    const int64_t a = off[p], b = off[p + 1];
    const __m512 wa = _mm512_loadu_ps(w), wb = _mm512_loadu_ps(w + 16);
    e0 = _mm512_fmadd_ps(_mm512_set1_ps(s0[a]), wa, e0);
    e1 = _mm512_fmadd_ps(_mm512_set1_ps(s1[a]), wa, e1);
    e2 = _mm512_fmadd_ps(_mm512_set1_ps(s2[a]), wa, e2);
    e3 = _mm512_fmadd_ps(_mm512_set1_ps(s3[a]), wa, e3);
    e4 = _mm512_fmadd_ps(_mm512_set1_ps(s4[a]), wa, e4);
    e5 = _mm512_fmadd_ps(_mm512_set1_ps(s5[a]), wa, e5);
    d0 = _mm512_fmadd_ps(_mm512_set1_ps(s0[b]), wb, d0);
    d1 = _mm512_fmadd_ps(_mm512_set1_ps(s1[b]), wb, d1);
    d2 = _mm512_fmadd_ps(_mm512_set1_ps(s2[b]), wb, d2);
    d3 = _mm512_fmadd_ps(_mm512_set1_ps(s3[b]), wb, d3);
    d4 = _mm512_fmadd_ps(_mm512_set1_ps(s4[b]), wb, d4);
    d5 = _mm512_fmadd_ps(_mm512_set1_ps(s5[b]), wb, d5);
  }
  if (p < k) {
    const int64_t a = off[p];
    const __m512 wa = _mm512_loadu_ps(w);
    e0 = _mm512_fmadd_ps(_mm512_set1_ps(s0[a]), wa, e0);
    e1 = _mm512_fmadd_ps(_mm512_set1_ps(s1[a]), wa, e1);
    e2 = _mm512_fmadd_ps(_mm512_set1_ps(s2[a]), wa, e2);
    e3 = _mm512_fmadd_ps(_mm512_set1_ps(s3[a]), wa, e3);
    e4 = _mm512_fmadd_ps(_mm512_set1_ps(s4[a]), wa, e4);
    e5 = _mm512_fmadd_ps(_mm512_set1_ps(s5[a]), wa, e5);
  }
  _mm512_storeu_ps(out, _mm512_add_ps(e0, d0));
  _mm512_storeu_ps(out + 16, _mm512_add_ps(e1, d1));
  _mm512_storeu_ps(out + 32, _mm512_add_ps(e2, d2));
  _mm512_storeu_ps(out + 48, _mm512_add_ps(e3, d3));
  _mm512_storeu_ps(out + 64, _mm512_add_ps(e4, d4));
  _mm512_storeu_ps(out + 80, _mm512_add_ps(e5, d5));
}

/* Two panels at once (kiln_conv_ukernel_ct2_fn): 6 pixels x 32 output
 * channels, panel 1's weights at w + w_next. Each pixel's broadcast now
 * feeds two FMAs: one load per FMA was the single-panel kernel's bound on
 * a core with two 512-bit FMA units (Zen 5: ResNet-18's 3x3 convs at 63 %
 * of the FMA peak on two threads). Each output keeps the single kernel's
 * order exactly (even and odd taps in their own chains, added at the end),
 * so a panel's values do not depend on whether it ran paired: 24
 * accumulators, four weight vectors and a broadcast fill 29 of the 32 zmm. */
#define KILN_CT2_INIT(E, CIN, B)                                   \
  E##0 = CIN ? _mm512_loadu_ps(CIN) : _mm512_loadu_ps(B);           \
  E##1 = CIN ? _mm512_loadu_ps(CIN + 16) : E##0;                    \
  E##2 = CIN ? _mm512_loadu_ps(CIN + 32) : E##0;                    \
  E##3 = CIN ? _mm512_loadu_ps(CIN + 48) : E##0;                    \
  E##4 = CIN ? _mm512_loadu_ps(CIN + 64) : E##0;                    \
  E##5 = CIN ? _mm512_loadu_ps(CIN + 80) : E##0
#define KILN_CT2_TAP(S, X, E, F, WE, WF)   \
  do {                                      \
    const __m512 bc = _mm512_set1_ps(S[X]); \
    E = _mm512_fmadd_ps(bc, WE, E);         \
    F = _mm512_fmadd_ps(bc, WF, F);         \
  } while (0)
/* Tap X of the six pixels into accumulator sets E and F. */
#define KILN_CT2_TAPS(X, E, F, WE, WF)    \
  KILN_CT2_TAP(s0, X, E##0, F##0, WE, WF); \
  KILN_CT2_TAP(s1, X, E##1, F##1, WE, WF); \
  KILN_CT2_TAP(s2, X, E##2, F##2, WE, WF); \
  KILN_CT2_TAP(s3, X, E##3, F##3, WE, WF); \
  KILN_CT2_TAP(s4, X, E##4, F##4, WE, WF); \
  KILN_CT2_TAP(s5, X, E##5, F##5, WE, WF)
#define KILN_CT2_STORE(OUT, E, D)                               \
  _mm512_storeu_ps(OUT, _mm512_add_ps(E##0, D##0));            \
  _mm512_storeu_ps(OUT + 16, _mm512_add_ps(E##1, D##1));       \
  _mm512_storeu_ps(OUT + 32, _mm512_add_ps(E##2, D##2));       \
  _mm512_storeu_ps(OUT + 48, _mm512_add_ps(E##3, D##3));       \
  _mm512_storeu_ps(OUT + 64, _mm512_add_ps(E##4, D##4));       \
  _mm512_storeu_ps(OUT + 80, _mm512_add_ps(E##5, D##5))

void kiln_f32_conv_ct_ukernel_6x32__avx512(int64_t k, const float* w, int64_t w_next,
                                           const float* const* px, const int64_t* off,
                                           const float* bias32, const float* cin0,
                                           const float* cin1, float* out0, float* out1) {
  const float *s0 = px[0], *s1 = px[1], *s2 = px[2], *s3 = px[3], *s4 = px[4], *s5 = px[5];
  const float* v = w + w_next;
  /* e / d: panel 0's even / odd taps; f / g: panel 1's. */
  __m512 e0, e1, e2, e3, e4, e5, f0, f1, f2, f3, f4, f5;
  KILN_CT2_INIT(e, cin0, bias32);
  KILN_CT2_INIT(f, cin1, bias32 + 16);
  __m512 d0 = _mm512_setzero_ps(), d1 = d0, d2 = d0, d3 = d0, d4 = d0, d5 = d0;
  __m512 g0 = d0, g1 = d0, g2 = d0, g3 = d0, g4 = d0, g5 = d0;
  int64_t p = 0;
  for (; p + 2 <= k; p += 2, w += 32, v += 32) {
    const int64_t a = off[p], b = off[p + 1];
    const __m512 wa = _mm512_loadu_ps(w), va = _mm512_loadu_ps(v);
    KILN_CT2_TAPS(a, e, f, wa, va);
    const __m512 wb = _mm512_loadu_ps(w + 16), vb = _mm512_loadu_ps(v + 16);
    KILN_CT2_TAPS(b, d, g, wb, vb);
  }
  if (p < k) {
    const int64_t a = off[p];
    const __m512 wa = _mm512_loadu_ps(w), va = _mm512_loadu_ps(v);
    KILN_CT2_TAPS(a, e, f, wa, va);
  }
  KILN_CT2_STORE(out0, e, d);
  KILN_CT2_STORE(out1, f, g);
}
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
