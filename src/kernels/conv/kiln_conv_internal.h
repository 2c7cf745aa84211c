/* What the convolution driver (kiln_conv.c) shares with its per-ISA
 * kernels (kiln_conv_avx2.c) and the tests.
 *
 * The implicit-GEMM microkernel computes one tile of 6 output channels x 16
 * consecutive "virtual" output pixels over k taps:
 *     out[i][l] = init[i][l] + sum_{p < k} w[p * 6 + i] * src[off[p] + l]
 * with init = cin (6 x 16, a partial sum from earlier taps; may alias the
 * output) or, when cin is NULL, bias6[i]. w is (the part at the first tap
 * of) one packed weight panel (kiln_conv.h), src points at the tile's first
 * pixel in the prepared input and off[p] is tap p's offset from it
 * (see kiln_conv.c: the prepared input is laid out so that every tap of
 * every pixel is such a constant offset). The tile is then written as st
 * says: row i to st->out + i * st->ldo, with st->res's row i (ldr apart)
 * added before or after a relu when given (it may alias the output: each
 * element is read before it is written). A plain 6 x 16 tile is
 * {buf, 16, NULL, 0, 0, 0}. */
#ifndef KILN_CONV_INTERNAL_H
#define KILN_CONV_INTERNAL_H

#include <stdint.h>

#include "base/kiln_cpu.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/kiln_isa_variant.h"

#define KILN_CONV_TILE_W 16

typedef struct kiln_conv_store_s {
  float* out;
  int64_t ldo;
  const float* res; /* or NULL */
  int64_t ldr;
  int relu;      /* max(0, x), NaN kept */
  int res_first; /* residual added before the relu */
} kiln_conv_store_t;

typedef void (*kiln_conv_ukernel_fn)(int64_t k, const float* w, const float* src,
                                     const int64_t* off, const float* bias6, const float* cin,
                                     const kiln_conv_store_t* st);

/* The channel-vector microkernel: 6 output pixels x 16 output channels,
 *     out[i][j] = init[i][j] + sum_{p < k} w[p * 16 + j] * px[i][off[p]]
 * with init = cin (6 x 16) or, when cin is NULL, bias16[j]; w is (the part
 * at the first tap of) one 16-channel packed panel, px[i] points at pixel
 * i's place in the prepared input. out is 6 x 16 row-major (pixel-major);
 * the driver scatters it into NCHW. Used where the pixel-vector tiles
 * would waste lanes (small or narrow outputs). */
typedef void (*kiln_conv_ukernel_ct_fn)(int64_t k, const float* w, const float* const* px,
                                        const int64_t* off, const float* bias16,
                                        const float* cin, float* out);
/* The same for two panels at once: panel 1's weights at w + w_next, its
 * biases at bias32 + 16, its init cin1 and its tile out1; each panel's
 * values exactly the single kernel's (the same sums in the same order).
 * Only where a level has one (kiln_conv_ukernel_ct2_for: AVX-512's 32
 * registers hold both panels' accumulators). */
typedef void (*kiln_conv_ukernel_ct2_fn)(int64_t k, const float* w, int64_t w_next,
                                         const float* const* px, const int64_t* off,
                                         const float* bias32, const float* cin0,
                                         const float* cin1, float* out0, float* out1);
/* Where a pair kernel may write a finished tile straight into y (the
 * channels-last driver, whose tiles are 6 consecutive pixels ldy floats
 * apart): for pixel i < np and channel j < 32 of the pair (16 of a panel
 * alone; the pair's second panel's first cols1),
 *     y[i * ldy + j] = act(t + res[i * ldy + j]) (res_first), or
 *                      act(t) + res[i * ldy + j],
 * t the pair kernel's out value; res NULL: no residual (res may alias y).
 * The same operations in the same order as the tile through the GEMM
 * epilogue (kiln_gemm_epilogue_fn), so the bits do not depend on the path,
 * without the tile's round trip through memory and the call per panel:
 * MobileNet-style 1x1 convs with 16-32 input channels spent as long
 * storing their tiles as computing them. */
typedef struct {
  float* y;
  const float* res;
  int64_t ldy;
  int res_first;
  kiln_activation_t act;
  int cols1; /* the pair's second panel: its first cols1 (1..16) channels */
  int np;    /* the tile's first np (1..6) pixels */
} kiln_conv_ct_y_t;
typedef void (*kiln_conv_ukernel_ct_y_fn)(int64_t k, const float* w, const float* const* px,
                                          const int64_t* off, const float* bias16,
                                          const float* cin, const kiln_conv_ct_y_t* y);
typedef void (*kiln_conv_ukernel_ct2_y_fn)(int64_t k, const float* w, int64_t w_next,
                                           const float* const* px, const int64_t* off,
                                           const float* bias32, const float* cin0,
                                           const float* cin1, const kiln_conv_ct_y_t* y);
/* The one- and two-panel kernels for a tile's first np (1..6) pixels:
 * out's first np rows, the same values as the whole tile's (the partial
 * tile of a 7x7 map computes 1 pixel, not 6). Where a level has them. */
typedef void (*kiln_conv_ukernel_ct_np_fn)(int np, int64_t k, const float* w,
                                           const float* const* px, const int64_t* off,
                                           const float* bias16, const float* cin, float* out);
typedef void (*kiln_conv_ukernel_ct2_np_fn)(int np, int64_t k, const float* w, int64_t w_next,
                                            const float* const* px, const int64_t* off,
                                            const float* bias32, const float* cin0,
                                            const float* cin1, float* out0, float* out1);
#if defined(__x86_64__) || defined(__i386__)
void kiln_f32_conv_ct_ukernel_6x16_np__avx512(int np, int64_t k, const float* w,
                                              const float* const* px, const int64_t* off,
                                              const float* bias16, const float* cin, float* out);
void kiln_f32_conv_ct_ukernel_6x32_np__avx512(int np, int64_t k, const float* w, int64_t w_next,
                                              const float* const* px, const int64_t* off,
                                              const float* bias32, const float* cin0,
                                              const float* cin1, float* out0, float* out1);
void kiln_f32_conv_ct_ukernel_6x32__avx512(int64_t k, const float* w, int64_t w_next,
                                           const float* const* px, const int64_t* off,
                                           const float* bias32, const float* cin0,
                                           const float* cin1, float* out0, float* out1);
void kiln_f32_conv_ct_ukernel_6x16_y__avx2(int64_t k, const float* w, const float* const* px,
                                           const int64_t* off, const float* bias16,
                                           const float* cin, const kiln_conv_ct_y_t* y);
void kiln_f32_conv_ct_ukernel_6x16_y__avx512(int64_t k, const float* w, const float* const* px,
                                             const int64_t* off, const float* bias16,
                                             const float* cin, const kiln_conv_ct_y_t* y);
void kiln_f32_conv_ct_ukernel_6x32_y__avx512(int64_t k, const float* w, int64_t w_next,
                                             const float* const* px, const int64_t* off,
                                             const float* bias32, const float* cin0,
                                             const float* cin1, const kiln_conv_ct_y_t* y);
#endif
/* Floats of partial sums a tile keeps between K blocks (kiln_conv_ct_run):
 * one panel's 6 x 16, or a pair's where panels go in pairs (ukernel2). */
static inline int64_t kiln_conv_ct_part_tile(kiln_conv_ukernel_ct2_fn ukernel2) {
  return (ukernel2 ? 2 : 1) * 6 * KILN_CONV_PANEL_WIDE;
}

/* Writes a channel-vector tile whose 6 pixels are consecutive in y: for
 * channel j < rows, y[j * ldy + i] = f(tmp[i * 16 + j]) (i < 6) with f the
 * residual res[j * ldy + i] (or none) added before or after a relu (or
 * none). res may alias y. */
typedef void (*kiln_conv_ct_store6_fn)(const float* tmp, float* y, int64_t ldy, int64_t rows,
                                       const float* res, int res_first, int relu);

/* Each variant of the list (KILN_CONV_ISAS, kernels/kiln_isa_variant.h):
 * generic is portable C (kiln_conv.c), avx2 is AVX2 + FMA
 * (kiln_conv_avx2.c), avx512 the same tiles in zmm (kiln_conv_avx512.c). */
#define KILN_CONV_DECLARE_(isa, LEVEL, unused)                                                \
  void kiln_f32_conv_ct_store6__##isa(const float* tmp, float* y, int64_t ldy, int64_t rows, \
                                      const float* res, int res_first, int relu);           \
  void kiln_f32_conv_ct_ukernel_6x16__##isa(int64_t k, const float* w,                      \
                                            const float* const* px, const int64_t* off,     \
                                            const float* bias16, const float* cin,          \
                                            float* out);                                    \
  void kiln_f32_conv_ukernel_6x16__##isa(int64_t k, const float* w, const float* src,       \
                                         const int64_t* off, const float* bias6,            \
                                         const float* cin, const kiln_conv_store_t* st);
KILN_CONV_ISAS(KILN_CONV_DECLARE_, ~)

/* One channel-vector computation over a block of tiles and a range of
 * panels (kiln_conv_ct.c): panel q of the packed weights at w + q * k * 16
 * (biases from bias + 16 q, or none), og real output channels; pixel p's
 * input at src + vpos[p] for p < howo, tap p at off[p]; K blocks of kc,
 * partial sums in part (part_fl floats per thread,
 * kiln_conv_ct_part_tile(ukernel2) per tile of the block; NULL with one
 * block). Panels go two at a time
 * through ukernel2 where there is one.
 * Each finished tile goes to store(store_ctx, q, rows, ti, np, tmp): panel
 * q, its first `rows` channels real, tile ti's first np pixels, tmp 6 x 16
 * pixel-major (the store may overwrite it); or, with y_direct.y set, a
 * tile whose first panel is whole straight to y_direct.y
 * + (6 ti) ldy + 16 q (the residual at the same offset from y_direct.res)
 * through ukernel_y / ukernel2_y. */
typedef struct kiln_conv_ct_loop_s {
  kiln_conv_ukernel_ct_fn ukernel;
  kiln_conv_ukernel_ct2_fn ukernel2; /* or NULL: panels one at a time */
  const float* w;
  const float* bias;
  const float* src;
  const int64_t* vpos;
  const int64_t* off;
  int64_t k, kc, og, howo;
  float* part;
  int64_t part_fl;
  void (*store)(const void* store_ctx, int64_t q, int64_t rows, int64_t ti, int64_t np,
                float* tmp);
  const void* store_ctx;
  kiln_conv_ukernel_ct_np_fn ukernel_np;   /* or NULL: partial tiles as whole ones */
  kiln_conv_ukernel_ct2_np_fn ukernel2_np; /* or NULL */
  kiln_conv_ukernel_ct_y_fn ukernel_y;   /* or NULL */
  kiln_conv_ukernel_ct2_y_fn ukernel2_y; /* or NULL */
  kiln_conv_ct_y_t y_direct;             /* y NULL: every tile through store */
} kiln_conv_ct_loop_t;

/* Tiles [t0, t1) x panels [q0, q1) on pool thread `thread`. */
void kiln_conv_ct_run(const kiln_conv_ct_loop_t* l, int64_t t0, int64_t t1, int64_t q0,
                      int64_t q1, int thread);

/* The microkernels for an ISA level (never NULL). */
kiln_conv_ukernel_fn kiln_conv_ukernel_for(kiln_isa_t isa);
kiln_conv_ukernel_ct_fn kiln_conv_ukernel_ct_for(kiln_isa_t isa);
kiln_conv_ukernel_ct2_fn kiln_conv_ukernel_ct2_for(kiln_isa_t isa); /* NULL: none */
kiln_conv_ukernel_ct_np_fn kiln_conv_ukernel_ct_np_for(kiln_isa_t isa);   /* NULL: none */
kiln_conv_ukernel_ct2_np_fn kiln_conv_ukernel_ct2_np_for(kiln_isa_t isa); /* NULL: none */
kiln_conv_ukernel_ct_y_fn kiln_conv_ukernel_ct_y_for(kiln_isa_t isa);   /* NULL: none */
kiln_conv_ukernel_ct2_y_fn kiln_conv_ukernel_ct2_y_for(kiln_isa_t isa); /* NULL: none */
kiln_conv_ct_store6_fn kiln_conv_ct_store6_for(kiln_isa_t isa);

#endif /* KILN_CONV_INTERNAL_H */
