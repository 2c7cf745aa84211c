/* Depthwise convolution channels-last (groups == C == O), one output row
 * per call, one variant per ISA build of this file (kiln_conv_planes.h).
 *
 * Channels-last, a depthwise conv is a vector FMA per tap over consecutive
 * channels: y[i][j][c] = bias[c] + sum_{u, v} x[i sh - ph + u dh][j sw -
 * pw + v dw][c] * w[c][u][v]. The weight comes transposed to taps-major,
 * wt[(u kw + v) C + c], so a tap's channels are contiguous too. Pixels are
 * taken four at a time with their 4 x 16 channel sums in registers (each
 * tap: one row of 16 weights, four rows of 16 inputs, four FMAs), in
 * intrinsics at AVX2 and AVX-512, in GCC's generic vectors elsewhere (NEON,
 * SSE2); channel tails in plain C, FMA contracted by hand (ISO C mode, as
 * kiln_conv_planes.c).
 *
 * x and y may hold bf16 (CONV2D_NHWC's bf16 storage, kiln_pass_conv_bf16_io.c).
 * Every block takes the flags xb and yb as constants (the row body is
 * inlined once per combination), widens a bf16 input as it loads it
 * (exact) and rounds its sums to bf16 as it stores them (nearest even,
 * base/kiln_bf16.h's rule, in registers): the fp32 kernel's sums of the
 * same values, bit for bit, rounded once. Pointers into x and y are bytes
 * (kiln_dw_xat, kiln_dw_yat), offsets elements.
 *
 * Taps outside the input are skipped, not multiplied by zero: the same
 * sums wherever the weight is finite, and the layout pass runs a depthwise
 * conv channels-last only with a finite constant weight
 * (kiln_pass_layout.c). The row gets bias, sums and a clamp to [lo, hi]
 * (none, relu and relu6 as kiln_activation_scalar computes them); the
 * driver (kiln_conv_nhwc_dw.c) applies other activations and a residual
 * over the row with the GEMM epilogue. */
#include <string.h>

#include "base/kiln_bf16.h"
#include "kernels/conv/kiln_conv_planes.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX2__)
#include "kernels/kiln_bf16_round_avx2.h"
#endif
#if defined(__AVX512F__)
#include "kernels/kiln_bf16_round_avx512.h"
#endif

#if defined(__FMA__)
#include <math.h>
#define KILN_DW_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define KILN_DW_FMA(a, b, c) ((a) * (b) + (c))
#endif

#define KILN_DW_AI static inline __attribute__((always_inline))

enum { KILN_DW_CB = 16, KILN_DW_PX = 4 };

/* Element e of a row of x (bf16 when xb) or y (when yb), as bytes. */
KILN_DW_AI const char* kiln_dw_xat(const int xb, const char* p, int64_t e) {
  return p + e * (xb ? 2 : 4);
}
KILN_DW_AI char* kiln_dw_yat(const int yb, char* p, int64_t e) { return p + e * (yb ? 2 : 4); }

/* One value of x; one value to y (clamped by the caller). */
KILN_DW_AI float kiln_dw_ld1(const int xb, const char* p) {
  if (xb) {
    uint16_t h;
    memcpy(&h, p, 2);
    return kiln_bf16_to_f32(h);
  }
  float f;
  memcpy(&f, p, 4);
  return f;
}
KILN_DW_AI void kiln_dw_st1(const int yb, char* p, float v) {
  if (yb) {
    const uint16_t h = kiln_bf16_from_f32(v);
    memcpy(p, &h, 2);
  } else {
    memcpy(p, &v, 4);
  }
}

#if defined(__AVX512F__)
KILN_DW_AI __m512 kiln_dw_ld16(const int xb, const char* p) {
  if (xb)
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
  return _mm512_loadu_ps((const float*)p);
}
KILN_DW_AI void kiln_dw_st16(const int yb, char* p, __m512 v) {
  if (yb) _mm256_storeu_si256((__m256i*)p, kiln_bf16x16_from_ps_avx512(v));
  else _mm512_storeu_ps((float*)p, v);
}
#elif defined(__AVX2__) && defined(__FMA__)
KILN_DW_AI __m256 kiln_dw_ld8(const int xb, const char* p) {
  if (xb)
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
  return _mm256_loadu_ps((const float*)p);
}
KILN_DW_AI void kiln_dw_st8(const int yb, char* p, __m256 v) {
  if (!yb) {
    _mm256_storeu_ps((float*)p, v);
    return;
  }
  const __m256i r = _mm256_srli_epi32(kiln_bf16x8_round_avx2(_mm256_castps_si256(v)), 16);
  /* packus works per 128-bit half: lanes 0-3 0-3 4-7 4-7, put in order. */
  const __m256i h = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
  _mm_storeu_si128((__m128i*)p, _mm256_castsi256_si128(h));
}
#endif

/* np (<= KILN_DW_PX) pixels of an output row, channels [c0, c0 + cw),
 * every tap of list t: x at px[p] + toff[t], weights at wt + tw[t]; the
 * portable loops (GCC does not keep a 4 x 16 block of sums in registers
 * across taps from them: the full block has its own per-ISA form below). */
KILN_DW_AI void kiln_dw_block_any(const int xb, const int yb, int64_t np, int64_t cw,
                                  const char* const* px, int64_t taps, const int64_t* toff,
                                  const int64_t* tw, const float* wt, const float* bias,
                                  const float* clamp, char* const* out) {
  float acc[KILN_DW_PX][KILN_DW_CB];
  for (int64_t p = 0; p < np; ++p)
    for (int64_t l = 0; l < cw; ++l) acc[p][l] = bias ? bias[l] : 0.0f;
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t p = 0; p < np; ++p) {
      const char* x = kiln_dw_xat(xb, px[p], toff[t]);
      const float* w = wt + tw[t];
      for (int64_t l = 0; l < cw; ++l)
        acc[p][l] = KILN_DW_FMA(kiln_dw_ld1(xb, kiln_dw_xat(xb, x, l)), w[l], acc[p][l]);
    }
  for (int64_t p = 0; p < np; ++p)
    for (int64_t l = 0; l < cw; ++l) {
      float v = acc[p][l] < clamp[0] ? clamp[0] : acc[p][l]; /* NaN and -0.0 pass */
      kiln_dw_st1(yb, kiln_dw_yat(yb, out[p], l), v > clamp[1] ? clamp[1] : v);
    }
}

/* One pixel x 16 channels in portable C: GCC's generic vectors (SSE2,
 * NEON), four of 4 floats, the sums in registers (from scalar loops GCC
 * unrolled and then did not vectorise). */
typedef float kiln_dw_v4 __attribute__((vector_size(16)));

KILN_DW_AI kiln_dw_v4 kiln_dw_load4(const int xb, const char* p) {
  kiln_dw_v4 v;
  if (xb) {
    for (int l = 0; l < 4; ++l) v[l] = kiln_dw_ld1(1, p + 2 * l);
  } else {
    memcpy(&v, p, sizeof v);
  }
  return v;
}

KILN_DW_AI void kiln_dw_one_portable(const int xb, const int yb, const char* px, int64_t taps,
                                     const int64_t* toff, const int64_t* tw, const float* wt,
                                     const float* bias, const float* clamp, char* out) {
  kiln_dw_v4 acc[4];
  for (int q = 0; q < 4; ++q) {
    acc[q] = (kiln_dw_v4){0, 0, 0, 0};
    if (bias) memcpy(&acc[q], bias + 4 * q, sizeof acc[q]);
  }
  for (int64_t t = 0; t < taps; ++t) {
    const char* x = kiln_dw_xat(xb, px, toff[t]);
    const float* w = wt + tw[t];
    for (int q = 0; q < 4; ++q) {
      kiln_dw_v4 wv;
      memcpy(&wv, w + 4 * q, sizeof wv);
      acc[q] += kiln_dw_load4(xb, kiln_dw_xat(xb, x, 4 * q)) * wv;
    }
  }
  float sums[KILN_DW_CB];
  memcpy(sums, acc, sizeof sums);
  for (int l = 0; l < KILN_DW_CB; ++l) {
    float v = sums[l] < clamp[0] ? clamp[0] : sums[l];
    kiln_dw_st1(yb, kiln_dw_yat(yb, out, l), v > clamp[1] ? clamp[1] : v);
  }
}

/* The full block, 4 pixels x 16 channels, its sums in registers: the same
 * products and additions in the same order as kiln_dw_block_any. */
KILN_DW_AI void kiln_dw_block_full(const int xb, const int yb, const char* const* px,
                                   int64_t taps, const int64_t* toff, const int64_t* tw,
                                   const float* wt, const float* bias, const float* clamp,
                                   char* const* out) {
#if defined(__AVX512F__)
  __m512 b = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  __m512 a0 = b, a1 = b, a2 = b, a3 = b;
  for (int64_t t = 0; t < taps; ++t) {
    const __m512 w = _mm512_loadu_ps(wt + tw[t]);
    const int64_t o = toff[t];
    a0 = _mm512_fmadd_ps(kiln_dw_ld16(xb, kiln_dw_xat(xb, px[0], o)), w, a0);
    a1 = _mm512_fmadd_ps(kiln_dw_ld16(xb, kiln_dw_xat(xb, px[1], o)), w, a1);
    a2 = _mm512_fmadd_ps(kiln_dw_ld16(xb, kiln_dw_xat(xb, px[2], o)), w, a2);
    a3 = _mm512_fmadd_ps(kiln_dw_ld16(xb, kiln_dw_xat(xb, px[3], o)), w, a3);
  }
  /* max / min return their second operand on NaN or equal zeros: the
   * scalar clamp's answers. */
  const __m512 lo = _mm512_set1_ps(clamp[0]), hi = _mm512_set1_ps(clamp[1]);
  kiln_dw_st16(yb, out[0], _mm512_min_ps(hi, _mm512_max_ps(lo, a0)));
  kiln_dw_st16(yb, out[1], _mm512_min_ps(hi, _mm512_max_ps(lo, a1)));
  kiln_dw_st16(yb, out[2], _mm512_min_ps(hi, _mm512_max_ps(lo, a2)));
  kiln_dw_st16(yb, out[3], _mm512_min_ps(hi, _mm512_max_ps(lo, a3)));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 bl = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  __m256 bh = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
  __m256 a[4] = {bl, bl, bl, bl}, c[4] = {bh, bh, bh, bh};
  for (int64_t t = 0; t < taps; ++t) {
    const __m256 wl = _mm256_loadu_ps(wt + tw[t]), wh = _mm256_loadu_ps(wt + tw[t] + 8);
    const int64_t o = toff[t];
    for (int p = 0; p < 4; ++p) {
      const char* x = kiln_dw_xat(xb, px[p], o);
      a[p] = _mm256_fmadd_ps(kiln_dw_ld8(xb, x), wl, a[p]);
      c[p] = _mm256_fmadd_ps(kiln_dw_ld8(xb, kiln_dw_xat(xb, x, 8)), wh, c[p]);
    }
  }
  const __m256 lo = _mm256_set1_ps(clamp[0]), hi = _mm256_set1_ps(clamp[1]);
  for (int p = 0; p < 4; ++p) {
    kiln_dw_st8(yb, out[p], _mm256_min_ps(hi, _mm256_max_ps(lo, a[p])));
    kiln_dw_st8(yb, kiln_dw_yat(yb, out[p], 8), _mm256_min_ps(hi, _mm256_max_ps(lo, c[p])));
  }
#else
  for (int p = 0; p < KILN_DW_PX; ++p)
    kiln_dw_one_portable(xb, yb, px[p], taps, toff, tw, wt, bias, clamp, out[p]);
#endif
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define KILN_DW_K3S1 1
/* The full block of a stride-1, 3-wide, undilated window (MobileNet's
 * stride-1 layers): the taps come as `rows` triples of neighbouring
 * columns, so the 4 pixels' 3 taps of an input row read 6 columns, each
 * loaded once (6 + 3 loads for 12 FMAs where the block above loads 15).
 * Each pixel's sums in kiln_dw_block_any's order (taps row by row, column
 * by column): the same bits. AVX2 runs the two 8-channel halves in turn
 * (4 sums, 3 weights and 6 columns fill 13 of its 16 registers). */
KILN_DW_AI void kiln_dw_block_full_k3s1(const int xb, const int yb, const char* px0, int64_t C,
                                        int64_t rows, const int64_t* toff, const int64_t* tw,
                                        const float* wt, const float* bias, const float* clamp,
                                        char* const* out) {
#if defined(__AVX512F__)
  __m512 b = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  __m512 a0 = b, a1 = b, a2 = b, a3 = b;
  for (int64_t g = 0; g < rows; ++g) {
    const char* x = kiln_dw_xat(xb, px0, toff[3 * g]);
    const float* w = wt + tw[3 * g];
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + C), w2 = _mm512_loadu_ps(w + 2 * C);
    __m512 xv[6];
    for (int q = 0; q < 6; ++q) xv[q] = kiln_dw_ld16(xb, kiln_dw_xat(xb, x, q * C));
    a0 = _mm512_fmadd_ps(xv[0], w0, a0), a1 = _mm512_fmadd_ps(xv[1], w0, a1);
    a2 = _mm512_fmadd_ps(xv[2], w0, a2), a3 = _mm512_fmadd_ps(xv[3], w0, a3);
    a0 = _mm512_fmadd_ps(xv[1], w1, a0), a1 = _mm512_fmadd_ps(xv[2], w1, a1);
    a2 = _mm512_fmadd_ps(xv[3], w1, a2), a3 = _mm512_fmadd_ps(xv[4], w1, a3);
    a0 = _mm512_fmadd_ps(xv[2], w2, a0), a1 = _mm512_fmadd_ps(xv[3], w2, a1);
    a2 = _mm512_fmadd_ps(xv[4], w2, a2), a3 = _mm512_fmadd_ps(xv[5], w2, a3);
  }
  const __m512 lo = _mm512_set1_ps(clamp[0]), hi = _mm512_set1_ps(clamp[1]);
  kiln_dw_st16(yb, out[0], _mm512_min_ps(hi, _mm512_max_ps(lo, a0)));
  kiln_dw_st16(yb, out[1], _mm512_min_ps(hi, _mm512_max_ps(lo, a1)));
  kiln_dw_st16(yb, out[2], _mm512_min_ps(hi, _mm512_max_ps(lo, a2)));
  kiln_dw_st16(yb, out[3], _mm512_min_ps(hi, _mm512_max_ps(lo, a3)));
#else
  const __m256 lo = _mm256_set1_ps(clamp[0]), hi = _mm256_set1_ps(clamp[1]);
  for (int h = 0; h < 16; h += 8) {
    __m256 b = bias ? _mm256_loadu_ps(bias + h) : _mm256_setzero_ps();
    __m256 a0 = b, a1 = b, a2 = b, a3 = b;
    for (int64_t g = 0; g < rows; ++g) {
      const char* x = kiln_dw_xat(xb, px0, toff[3 * g] + h);
      const float* w = wt + tw[3 * g] + h;
      const __m256 w0 = _mm256_loadu_ps(w), w1 = _mm256_loadu_ps(w + C),
                   w2 = _mm256_loadu_ps(w + 2 * C);
      __m256 xv[6];
      for (int q = 0; q < 6; ++q) xv[q] = kiln_dw_ld8(xb, kiln_dw_xat(xb, x, q * C));
      a0 = _mm256_fmadd_ps(xv[0], w0, a0), a1 = _mm256_fmadd_ps(xv[1], w0, a1);
      a2 = _mm256_fmadd_ps(xv[2], w0, a2), a3 = _mm256_fmadd_ps(xv[3], w0, a3);
      a0 = _mm256_fmadd_ps(xv[1], w1, a0), a1 = _mm256_fmadd_ps(xv[2], w1, a1);
      a2 = _mm256_fmadd_ps(xv[3], w1, a2), a3 = _mm256_fmadd_ps(xv[4], w1, a3);
      a0 = _mm256_fmadd_ps(xv[2], w2, a0), a1 = _mm256_fmadd_ps(xv[3], w2, a1);
      a2 = _mm256_fmadd_ps(xv[4], w2, a2), a3 = _mm256_fmadd_ps(xv[5], w2, a3);
    }
    kiln_dw_st8(yb, kiln_dw_yat(yb, out[0], h), _mm256_min_ps(hi, _mm256_max_ps(lo, a0)));
    kiln_dw_st8(yb, kiln_dw_yat(yb, out[1], h), _mm256_min_ps(hi, _mm256_max_ps(lo, a1)));
    kiln_dw_st8(yb, kiln_dw_yat(yb, out[2], h), _mm256_min_ps(hi, _mm256_max_ps(lo, a2)));
    kiln_dw_st8(yb, kiln_dw_yat(yb, out[3], h), _mm256_min_ps(hi, _mm256_max_ps(lo, a3)));
  }
#endif
}
#endif

#if defined(__AVX512F__)
#define KILN_DW_K3_8 1
/* Eight pixels of a 3-wide undilated window at stride S (1 or 2: every
 * MobileNet depthwise layer), AVX-512 only (8 sums, 3 weights and the
 * row's 7 S + 3 columns fit its 32 registers): per input row 7 S + 6
 * loads for 24 FMAs, and eight independent chains of sums where four
 * leave FMA issue slots idle behind the FMA latency (with the
 * channels-inner order below, MobileNetV2's ten depthwise shapes 0.616 ->
 * 0.441 ms on one Zen 5 core, bench_conv_dw). Pixel p's tap v reads column
 * p S + v. Each sum in
 * kiln_dw_block_any's order: the same bits. */
KILN_DW_AI void kiln_dw_block_k3_8(const int xb, const int yb, const int S, const char* px0,
                                   int64_t C, int64_t rows, const int64_t* toff,
                                   const int64_t* tw, const float* wt, const float* bias,
                                   const float* clamp, char* y) {
  const __m512 b = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  __m512 acc[8];
  for (int p = 0; p < 8; ++p) acc[p] = b;
  for (int64_t g = 0; g < rows; ++g) {
    const char* x = kiln_dw_xat(xb, px0, toff[3 * g]);
    const float* w = wt + tw[3 * g];
    __m512 wv[3], xv[7 * 2 + 3];
    for (int v = 0; v < 3; ++v) wv[v] = _mm512_loadu_ps(w + v * C);
    for (int q = 0; q < 7 * S + 3; ++q) xv[q] = kiln_dw_ld16(xb, kiln_dw_xat(xb, x, q * C));
    for (int v = 0; v < 3; ++v)
      for (int p = 0; p < 8; ++p) acc[p] = _mm512_fmadd_ps(xv[p * S + v], wv[v], acc[p]);
  }
  const __m512 lo = _mm512_set1_ps(clamp[0]), hi = _mm512_set1_ps(clamp[1]);
  for (int p = 0; p < 8; ++p)
    kiln_dw_st16(yb, kiln_dw_yat(yb, y, p * C), _mm512_min_ps(hi, _mm512_max_ps(lo, acc[p])));
}
#endif

/* One pixel x 16 channels (border pixels, a row's last pixels), in
 * registers as the full block. */
KILN_DW_AI void kiln_dw_block_one(const int xb, const int yb, const char* px, int64_t taps,
                                  const int64_t* toff, const int64_t* tw, const float* wt,
                                  const float* bias, const float* clamp, char* out) {
#if defined(__AVX512F__)
  __m512 a = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t)
    a = _mm512_fmadd_ps(kiln_dw_ld16(xb, kiln_dw_xat(xb, px, toff[t])),
                        _mm512_loadu_ps(wt + tw[t]), a);
  kiln_dw_st16(yb, out, _mm512_min_ps(_mm512_set1_ps(clamp[1]),
                                      _mm512_max_ps(_mm512_set1_ps(clamp[0]), a)));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 a = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
  __m256 c = bias ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const char* x = kiln_dw_xat(xb, px, toff[t]);
    a = _mm256_fmadd_ps(kiln_dw_ld8(xb, x), _mm256_loadu_ps(wt + tw[t]), a);
    c = _mm256_fmadd_ps(kiln_dw_ld8(xb, kiln_dw_xat(xb, x, 8)), _mm256_loadu_ps(wt + tw[t] + 8), c);
  }
  const __m256 lo = _mm256_set1_ps(clamp[0]), hi = _mm256_set1_ps(clamp[1]);
  kiln_dw_st8(yb, out, _mm256_min_ps(hi, _mm256_max_ps(lo, a)));
  kiln_dw_st8(yb, kiln_dw_yat(yb, out, 8), _mm256_min_ps(hi, _mm256_max_ps(lo, c)));
#else
  kiln_dw_one_portable(xb, yb, px, taps, toff, tw, wt, bias, clamp, out);
#endif
}

KILN_DW_AI void kiln_dw_block(const int xb, const int yb, int64_t np, int64_t cw,
                              const char* const* px, int64_t taps, const int64_t* toff,
                              const int64_t* tw, const float* wt, const float* bias,
                              const float* clamp, char* const* out) {
  if (cw < KILN_DW_CB) /* a channel tail */
    kiln_dw_block_any(xb, yb, np, cw, px, taps, toff, tw, wt, bias, clamp, out);
  else if (np == KILN_DW_PX)
    kiln_dw_block_full(xb, yb, px, taps, toff, tw, wt, bias, clamp, out);
  else
    for (int64_t p = 0; p < np; ++p)
      kiln_dw_block_one(xb, yb, px[p], taps, toff, tw, wt, bias, clamp, out[p]);
}

/* Output row i of image n into yrow (bytes: fp32, or bf16 when yb). */
KILN_DW_AI void kiln_dw_row(const int xb, const int yb, const kiln_conv2d_f32_args_t* a,
                            const float* wt, int64_t n, int64_t i, const float* clamp,
                            char* yrow) {
  const int64_t C = a->c, H = a->h, W = a->w, Wo = a->wo, kh = a->kh, kw = a->kw;
  const char* xn = kiln_dw_xat(xb, (const char*)(const void*)a->x, n * H * W * C);
  /* The row's taps whose input row is inside: their offsets from a
   * pixel's column base (x at column j sw - pw of row 0) and weight rows.
   * kh * kw is at most KILN_CONV_DW_NHWC_TAPS (the driver's check). */
  int64_t toff[KILN_CONV_DW_NHWC_TAPS], tw[KILN_CONV_DW_NHWC_TAPS], tcol[KILN_CONV_DW_NHWC_TAPS];
  int64_t taps = 0;
  for (int64_t u = 0; u < kh; ++u) {
    const int64_t hi = i * a->sh - a->ph + u * a->dh;
    if (hi < 0 || hi >= H) continue;
    for (int64_t v = 0; v < kw; ++v, ++taps) {
      tcol[taps] = v * a->dw;
      toff[taps] = (hi * W + v * a->dw) * C;
      tw[taps] = (u * kw + v) * C;
    }
  }
  /* Interior columns: every tap's column inside, [jl, jh). */
  const int64_t reach = (kw - 1) * a->dw;
  int64_t jl = (a->pw + a->sw - 1) / a->sw, jh = jl;
  if (W - 1 - reach + a->pw >= 0) jh = (W - 1 - reach + a->pw) / a->sw + 1;
  if (jh > Wo) jh = Wo;
  if (jl > jh) jl = jh;
#ifdef KILN_DW_K3S1
  /* Stride 1, 3 wide, undilated: every row's taps are column triples. */
  const int k3s1 = kw == 3 && a->sw == 1 && a->dw == 1;
#endif
  /* Interior pixels in blocks, each block's channels in turn: a block
   * then reads whole pixels, each row of the window one run, where taking
   * the channels outermost read 64 bytes of every pixel per pass. */
  int64_t j = jl;
#ifdef KILN_DW_K3_8
  if (kw == 3 && a->dw == 1 && (a->sw == 1 || a->sw == 2)) {
    for (; j + 8 <= jh; j += 8)
      for (int64_t c0 = 0; c0 + KILN_DW_CB <= C; c0 += KILN_DW_CB) {
        const char* x0 = kiln_dw_xat(xb, xn, (j * a->sw - a->pw) * C + c0);
        const float* b = a->bias ? a->bias + c0 : NULL;
        char* y0 = kiln_dw_yat(yb, yrow, j * C + c0);
        if (a->sw == 1)
          kiln_dw_block_k3_8(xb, yb, 1, x0, C, taps / 3, toff, tw, wt + c0, b, clamp, y0);
        else
          kiln_dw_block_k3_8(xb, yb, 2, x0, C, taps / 3, toff, tw, wt + c0, b, clamp, y0);
      }
    if (C % KILN_DW_CB) /* those pixels' channel tail, in blocks of 4 */
      for (int64_t jt = jl; jt < j; jt += KILN_DW_PX) {
        const int64_t c0 = C - C % KILN_DW_CB;
        const char* px[KILN_DW_PX];
        char* out[KILN_DW_PX];
        for (int64_t p = 0; p < KILN_DW_PX; ++p) {
          px[p] = kiln_dw_xat(xb, xn, ((jt + p) * a->sw - a->pw) * C + c0);
          out[p] = kiln_dw_yat(yb, yrow, (jt + p) * C + c0);
        }
        kiln_dw_block(xb, yb, KILN_DW_PX, C - c0, px, taps, toff, tw, wt + c0,
                      a->bias ? a->bias + c0 : NULL, clamp, out);
      }
  }
#endif
  for (; j < jh; j += KILN_DW_PX) {
    const int64_t np = jh - j < KILN_DW_PX ? jh - j : KILN_DW_PX;
    int64_t pe[KILN_DW_PX]; /* the pixels' first elements in x and y */
    int64_t ye[KILN_DW_PX];
    for (int64_t p = 0; p < KILN_DW_PX; ++p) {
      const int64_t jj = j + (p < np ? p : 0);
      pe[p] = (jj * a->sw - a->pw) * C;
      ye[p] = jj * C;
    }
    for (int64_t c0 = 0; c0 < C; c0 += KILN_DW_CB) {
      const int64_t cw = C - c0 < KILN_DW_CB ? C - c0 : KILN_DW_CB;
      const float* bias = a->bias ? a->bias + c0 : NULL;
      const char* pc[KILN_DW_PX];
      char* oc[KILN_DW_PX];
      for (int p = 0; p < KILN_DW_PX; ++p) {
        pc[p] = kiln_dw_xat(xb, xn, pe[p] + c0);
        oc[p] = kiln_dw_yat(yb, yrow, ye[p] + c0);
      }
#ifdef KILN_DW_K3S1
      if (k3s1 && np == KILN_DW_PX && cw == KILN_DW_CB) {
        kiln_dw_block_full_k3s1(xb, yb, pc[0], C, taps / 3, toff, tw, wt + c0, bias, clamp, oc);
        continue;
      }
#endif
      kiln_dw_block(xb, yb, np, cw, pc, taps, toff, tw, wt + c0, bias, clamp, oc);
    }
  }
  /* Border columns: the taps whose column is inside, pixel by pixel. */
  for (j = 0; j < Wo; ++j) {
    if (j == jl) j = jh;
    if (j >= Wo) break;
    const int64_t col = j * a->sw - a->pw;
    int64_t boff[KILN_CONV_DW_NHWC_TAPS], bw[KILN_CONV_DW_NHWC_TAPS], nb = 0;
    for (int64_t t = 0; t < taps; ++t)
      if (col + tcol[t] >= 0 && col + tcol[t] < W) boff[nb] = toff[t] + col * C, bw[nb++] = tw[t];
    for (int64_t c0 = 0; c0 < C; c0 += KILN_DW_CB) {
      const int64_t cw = C - c0 < KILN_DW_CB ? C - c0 : KILN_DW_CB;
      const char* px[1] = {kiln_dw_xat(xb, xn, c0)};
      char* out[1] = {kiln_dw_yat(yb, yrow, j * C + c0)};
      kiln_dw_block(xb, yb, 1, cw, px, nb, boff, bw, wt + c0, a->bias ? a->bias + c0 : NULL,
                    clamp, out);
    }
  }
}

/* yrow: Wo x C floats, or bf16 when a->y_bf16 and bf16_y (the driver asks
 * for fp32 rows to finish with the epilogue). x as a->x_bf16 says. */
void KILN_ISA_VARIANT(kiln_f32_conv_dw_nhwc_row)(const kiln_conv2d_f32_args_t* a, const float* wt,
                                                 int64_t n, int64_t i, const float* clamp,
                                                 void* yrow, int bf16_y) {
  char* y = yrow;
  if (a->x_bf16) {
    if (bf16_y) kiln_dw_row(1, 1, a, wt, n, i, clamp, y);
    else kiln_dw_row(1, 0, a, wt, n, i, clamp, y);
  } else {
    if (bf16_y) kiln_dw_row(0, 1, a, wt, n, i, clamp, y);
    else kiln_dw_row(0, 0, a, wt, n, i, clamp, y);
  }
}
