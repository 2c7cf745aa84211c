/* What the bf16-compute NHWC conv driver (kiln_conv_nhwc_bf16.c) shares
 * with its VDPBF16PS tile loop (kiln_conv_nhwc_bf16_avx512bf16.c).
 *
 * The source is a zero-bordered bf16 copy of one image, cp2 bf16 per pixel
 * (even), each group's Cg channels followed by a zero one when Cg is odd
 * (so that a pair never reads the next group's first channel). Pair row r
 * of output pixel p reads the 32-bit couple at src + vpos[p] + off[r]
 * (bf16 units). A tile is KILN_CONV_BF16_MR consecutive output pixels x a
 * strip of 32 output channels (two 16-channel panels of the packed weight,
 * kiln_conv_nhwc_bf16.h; one when the group's channels end first).
 *
 * Window-row pairs (the stem: C = 3, 7x7): with an odd C the channel pairs
 * of kiln_conv_nhwc_bf16.h waste a product in every pair row (C + 1 = 4
 * values a tap for 3 real ones: 98 pair rows for 147 taps). For C <= 3,
 * one group, column dilation 1 and x given NCHW, the driver instead
 * copies pixels C bf16 apart (no pad channel), so a window row's kw C
 * values are contiguous, and pairs them along that row: pair row
 * r = u rw + j, rw = ceil(kw C / 2), holds values 2j and 2j + 1 of window
 * row u (value e = v C + c), 77 pair rows for the stem. When kw C is odd
 * the row's last pair reads one value past the window (the next pixel's
 * first channel, or past the copy's end: a zero slack), under a zero
 * weight; VDPBF16PS makes 0 x Inf and 0 x NaN a NaN, so the copy checks
 * every rounded value and an image holding an Inf or NaN runs with
 * channel pairs instead (eager's result: finite where the window holds
 * no Inf or NaN). The stored weight stays in kiln_conv_nhwc_bf16.h's
 * layout (artifacts unchanged); the driver reorders it per call (9408
 * bf16 moves for the stem). */
#ifndef KILN_CONV_NHWC_BF16_INTERNAL_H
#define KILN_CONV_NHWC_BF16_INTERNAL_H

#include <stdint.h>

#include "base/kiln_activation.h"

/* Pixels per tile: 2 x MR fp32 accumulators + 2 weight vectors + a
 * broadcast fit the 32 zmm registers up to MR = 14. Measured on Zen 4
 * (ResNet-18's convs, one thread, kiln.profile): MR = 10 and 12 run the
 * large layers alike (both keep VDPBF16PS busy: 20 or 24 independent
 * accumulators), and 10 wastes less on 7x7 outputs (49 pixels: 5 tiles of
 * 10 against 5 of 12), layer4's convs 10-15 % faster. */
#ifndef KILN_CONV_BF16_MR
#define KILN_CONV_BF16_MR 10
#endif

/* Where finished sums go straight to y (no activation, relu or relu6),
 * not through a store callback: y (the group's first channel, pixels ldy
 * apart), the sums times scale (or NULL), with the residual (res, laid out
 * as y, or NULL; added before the activation when res_first), bias (or
 * NULL) and act, in the store callback's order ((sum + residual) + bias,
 * then the GEMM epilogue's max(0, x) / min(6, max(0, x)), NaN and -0.0
 * kept; or the activation then + residual). */
typedef struct kiln_conv_bf16_to_y_s {
  float* y;
  uint16_t* yb; /* y in bf16 instead (then y is NULL and res NULL): rounded to nearest even */
  const float* res;
  const float* bias;
  const float* scale;
  int64_t ldy;
  kiln_activation_t act; /* KILN_ACT_NONE, _RELU or _RELU6 */
  int res_first;
} kiln_conv_bf16_to_y_t;

typedef struct kiln_conv_bf16_loop_s {
  const uint16_t* w;     /* the group's panels, rows x 32 bf16 each */
  const uint16_t* src;   /* the image's copy at the group's first channel */
  const int64_t* vpos;   /* howo pixel bases */
  const int64_t* off;    /* rows pair-row offsets */
  int64_t rows, kc, og, howo;
  float* part;           /* partial sums, part_fl floats per thread, or NULL */
  int64_t part_fl;
  /* A finished run of np consecutive output pixels from pixel p0:
   * channels [j0, j0 + cols), tmp np x 32 pixel-major (the store may
   * overwrite it). */
  void (*store)(const void* ctx, int64_t j0, int64_t cols, int64_t p0, int64_t np, float* tmp);
  const void* store_ctx;
  kiln_conv_bf16_to_y_t out; /* when out.y is set, store is not called */
} kiln_conv_bf16_loop_t;

/* Tiles [t0, t1) x strips [s0, s1) on pool thread `thread`: strip outermost,
 * then K blocks of kc pair rows (partial sums in part between them), then
 * tiles. */
void kiln_bf16_conv_nhwc_run__avx512bf16(const kiln_conv_bf16_loop_t* l, int64_t t0, int64_t t1,
                                         int64_t s0, int64_t s1, int thread);

/* The AMX tile loop (kiln_conv_nhwc_bf16_amx.c), for a group of Cg2 a
 * multiple of 32: then the 16 pair rows of each 32-K step (16s .. 16s + 15)
 * lie in one tap, and a pixel's 32 values of the step are contiguous in
 * the copy (koff[s] = off[16 s]); the weights' 16 pair rows of a panel
 * are one 1 KiB B tile. An A tile is 16 "virtual" pixels at a fixed
 * stride in the copy, so it loads straight from it: the output is cut
 * into runs (run r's virtual pixel v at src + r run_pitch + v px_stride),
 * tiles of 16 consecutive virtual pixels of a run. With unit strides the
 * whole image is one run of the copy's rows back to back, virtual pixel v
 * = (v / ww, v % ww) with ww the copy's width, whose columns past wo are
 * computed and dropped (2 of 58 at 56 wide, 2 of 9 at 7 wide); with other
 * strides each output row is a run (ww = wo). Rows of a tile are
 * independent, so the copy's slack past its end (16 px_stride + 32 bf16,
 * zeroed) is all a last tile needs.
 *
 * Other convs (the stem's window-row pairs, groups of fewer or odd
 * channels) run on AMX from gathered rows: per task, up to 256 output
 * pixels' rows of ka bf16 (kiln_bf16_conv_nhwc_gather__amx: the pair rows
 * in order, zero past them up to ka, a multiple of 32), read as one run of
 * stride ka against the weights' panels copied with rows padded to ka / 2
 * by zero rows. */
typedef struct kiln_conv_bf16_amx_s {
  const uint16_t* w;     /* the group's panels, rows x 32 bf16 each */
  const uint16_t* src;   /* the image's copy at the group's first channel */
  const int64_t* koff;   /* steps offsets (bf16 units) */
  int64_t steps, rows, og;
  int64_t tpr, rl;       /* tiles per run, virtual pixels per run */
  int64_t run_pitch, px_stride, ww, wo;
  int64_t p0; /* the output pixel of run 0's virtual pixel 0 */
  void (*store)(const void* ctx, int64_t j0, int64_t cols, int64_t p0, int64_t np, float* tmp);
  const void* store_ctx;
  kiln_conv_bf16_to_y_t out; /* when out.y is set, store is not called */
} kiln_conv_bf16_amx_t;

/* Tiles [t0, t1) (numbered run by run) x strips [s0, s1). */
void kiln_bf16_conv_nhwc_run__amx(const kiln_conv_bf16_amx_t* l, int64_t t0, int64_t t1,
                                  int64_t s0, int64_t s1);

/* For each of n output pixels a row of ka bf16 at dst + i ka: zero, then
 * nseg segments, segment g (seg[3g], seg[3g + 1], seg[3g + 2]) the
 * seg[3g + 2] values at src + vpos[i] + seg[3g] to the row's position
 * seg[3g + 1]. */
void kiln_bf16_conv_nhwc_gather__amx(const uint16_t* src, const int64_t* vpos, int64_t n,
                                     const int64_t* seg, int64_t nseg, int64_t ka, uint16_t* dst);

#ifdef __AVX512F__
#include <immintrin.h>

#include "kernels/kiln_bf16_round_avx512.h"
/* A strip's channels [j0, j0 + 16 nh) for kiln_conv_bf16_to_y_row: the
 * masks m of its first cols, and their biases b and scales sc (zero where
 * out has none). */
static inline __attribute__((always_inline)) void kiln_conv_bf16_to_y_strip(
    const kiln_conv_bf16_to_y_t* o, int nh, int64_t j0, int64_t cols, __mmask16 m[2],
    __m512 b[2], __m512 sc[2]) {
  const int64_t c1 = cols > 16 ? cols - 16 : 0;
  m[0] = (__mmask16)(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
  m[1] = (__mmask16)(c1 >= 16 ? 0xffffu : (1u << c1) - 1u);
  for (int h = 0; h < nh; ++h) {
    b[h] = o->bias ? _mm512_maskz_loadu_ps(m[h], o->bias + j0 + 16 * h) : _mm512_setzero_ps();
    sc[h] = o->scale ? _mm512_maskz_loadu_ps(m[h], o->scale + j0 + 16 * h) : _mm512_setzero_ps();
  }
}

/* One pixel's sums v[0, nh) (16 channels each) through out's rule to y
 * (float y, or bf16 yb when out has one), its residual at res (read before
 * y is written: they may alias). */
static inline __attribute__((always_inline)) void kiln_conv_bf16_to_y_row(
    const kiln_conv_bf16_to_y_t* o, int nh, const __mmask16 m[2], const __m512 b[2],
    const __m512 sc[2], const __m512* v, float* y, uint16_t* yb, const float* res) {
  const __m512 zero = _mm512_setzero_ps();
  for (int h = 0; h < nh; ++h) {
    __m512 x = o->scale ? _mm512_mul_ps(v[h], sc[h]) : v[h], r = zero;
    if (res) r = _mm512_maskz_loadu_ps(m[h], res + 16 * h);
    if (res && o->res_first) x = _mm512_add_ps(x, r);
    if (o->bias) x = _mm512_add_ps(x, b[h]);
    /* max / min return their second operand on NaN or equality. */
    if (o->act == KILN_ACT_RELU) x = _mm512_max_ps(zero, x);
    if (o->act == KILN_ACT_RELU6) x = _mm512_min_ps(_mm512_set1_ps(6.0f), _mm512_max_ps(zero, x));
    if (res && !o->res_first) x = _mm512_add_ps(x, r);
    if (yb) _mm256_mask_storeu_epi16(yb + 16 * h, m[h], kiln_bf16x16_from_ps_avx512(x));
    else _mm512_mask_storeu_ps(y + 16 * h, m[h], x);
  }
}
#endif

/* n pixels of c <= 4 NCHW planes (value (ch, q) at x[ch * plane + q])
 * rounded to bf16 into d[q * pitch + ch], pitch in [c, 4], channels
 * [c, pitch) zero; 1 when a rounded value is Inf or NaN, else 0.
 * (kiln_conv_nhwc_bf16_copy_avx512bf16.c; its portable counterpart is the
 * driver's rounded run and spread, which it replaces for these shapes.) */
int kiln_bf16_conv_interleave__avx512bf16(const float* x, int64_t plane, int64_t c, int64_t n,
                                          int64_t pitch, uint16_t* d);

#endif /* KILN_CONV_NHWC_BF16_INTERNAL_H */
