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

/* Pixels per tile: 2 x MR fp32 accumulators + 2 weight vectors + a
 * broadcast fit the 32 zmm registers up to MR = 14. Measured on Zen 4
 * (ResNet-18's convs, one thread, kiln.profile): MR = 10 and 12 run the
 * large layers alike (both keep VDPBF16PS busy: 20 or 24 independent
 * accumulators), and 10 wastes less on 7x7 outputs (49 pixels: 5 tiles of
 * 10 against 5 of 12), layer4's convs 10-15 % faster. */
#ifndef KILN_CONV_BF16_MR
#define KILN_CONV_BF16_MR 10
#endif

typedef struct kiln_conv_bf16_loop_s {
  const uint16_t* w;     /* the group's panels, rows x 32 bf16 each */
  const uint16_t* src;   /* the image's copy at the group's first channel */
  const int64_t* vpos;   /* howo pixel bases */
  const int64_t* off;    /* rows pair-row offsets */
  int64_t rows, kc, og, howo;
  float* part;           /* partial sums, part_fl floats per thread, or NULL */
  int64_t part_fl;
  /* A finished tile: channels [j0, j0 + cols) of tile ti's first np
   * pixels, tmp MR x 32 pixel-major (the store may overwrite it). */
  void (*store)(const void* ctx, int64_t j0, int64_t cols, int64_t ti, int64_t np, float* tmp);
  const void* store_ctx;
  /* Or, when y is set (no activation or relu): tiles go straight to y
   * (the group's first channel, pixels ldy apart), the sums times scale
   * (or NULL), with the residual (res, laid out as y, or NULL; added
   * before the relu when res_first), bias (or NULL) and relu when relu is
   * 1, and store is not called. */
  float* y;
  const float* res;
  const float* bias;
  const float* scale;
  int64_t ldy;
  int relu, res_first;
} kiln_conv_bf16_loop_t;

/* Tiles [t0, t1) x strips [s0, s1) on pool thread `thread`: strip outermost,
 * then K blocks of kc pair rows (partial sums in part between them), then
 * tiles. */
void kiln_bf16_conv_nhwc_run__avx512bf16(const kiln_conv_bf16_loop_t* l, int64_t t0, int64_t t1,
                                         int64_t s0, int64_t s1, int thread);

/* n pixels of c <= 4 NCHW planes (value (ch, q) at x[ch * plane + q])
 * rounded to bf16 into d[q * pitch + ch], pitch in [c, 4], channels
 * [c, pitch) zero; 1 when a rounded value is Inf or NaN, else 0.
 * (kiln_conv_nhwc_bf16_copy_avx512bf16.c; its portable counterpart is the
 * driver's rounded run and spread, which it replaces for these shapes.) */
int kiln_bf16_conv_interleave__avx512bf16(const float* x, int64_t plane, int64_t c, int64_t n,
                                          int64_t pitch, uint16_t* d);

#endif /* KILN_CONV_NHWC_BF16_INTERNAL_H */
