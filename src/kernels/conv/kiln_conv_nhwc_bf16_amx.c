/* The bf16-compute NHWC conv's tile loop on AMX tiles (TDPBF16PS), for
 * groups of a multiple of 32 channels (kiln_conv_nhwc_bf16_internal.h
 * says how the copy and the weights are read as tiles).
 *
 * A block is 2 A tiles (32 virtual pixels) x 2 B tiles (a 32-channel strip)
 * in tmm0-3, A in tmm4-5, B in tmm6-7 (kiln_amx_tiles.h's configuration,
 * the bf16 GEMM's): per 32-K step 4 tile loads and 4 TDPBF16PS. Tasks are
 * (tiles [t0, t1), strips [s0, s1)); per strip, the tiles go in chunks of
 * at most 16 (256 pixels x 32 fp32 parked in a 32 KiB buffer), K in blocks
 * of KSTEPS steps (the strip's 16 KiB of B stays in L1 while the chunk's
 * tiles reuse it; the GEMM's measured choice), and after the last block
 * each tile's rows go to the driver's store in runs of real output pixels
 * (the columns past wo of a unit-stride image are dropped there).
 *
 * Compiled only with the AMX flags (meson: the conv_bf16 family's amx
 * variant) and called only when kiln_cpu_bf16() has KILN_CPU_BF16_AMX. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/kiln_conv_nhwc_bf16_internal.h"
#include "kernels/kiln_amx_tiles.h"

#define KILN_CAMX_AI static inline __attribute__((always_inline))
#define KSTEPS 8
#define CHUNK 16 /* tiles per C block */

/* MT (1, 2) A tiles x NT (1, 2) B tiles over ns steps: a0, a1 the tiles'
 * first rows (rows sa bytes apart), step s at + koff[s]; b0, b1 the
 * strip's panels at the block's first step. C (32 x 32, rows 32 floats
 * apart; the second A tile's rows from c + 16 x 32) starts at zero when
 * first, else from c, and is stored back there. */
KILN_CAMX_AI void kiln_conv_amx_block(const int MT, const int NT, int first, int64_t ns,
                                      const uint16_t* a0, const uint16_t* a1, int64_t sa,
                                      const int64_t* koff, const uint16_t* b0, const uint16_t* b1,
                                      float* c) {
  kiln_amx_c_begin(MT, NT, first, c, c + 16 * 32, 128);
  for (int64_t s = 0; s < ns; ++s) {
    _tile_loadd(6, b0 + s * 512, 64);
    _tile_loadd(4, a0 + koff[s], sa);
    if (NT > 1) _tile_loadd(7, b1 + s * 512, 64);
    if (MT > 1) _tile_loadd(5, a1 + koff[s], sa);
    _tile_dpbf16ps(0, 4, 6);
    if (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if (MT > 1) _tile_dpbf16ps(2, 5, 6);
    if (MT > 1 && NT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  kiln_amx_c_end(MT, NT, c, c + 16 * 32, 128);
}

static const uint16_t* kiln_conv_amx_tile_src(const kiln_conv_bf16_amx_t* l, int64_t ti) {
  return l->src + (ti / l->tpr) * l->run_pitch + (ti % l->tpr) * 16 * l->px_stride;
}

/* np rows of sums (32 apart at c) to y at output pixel p (rows ldy apart),
 * channels [j0, j0 + cols): times scale, with residual, bias and relu in
 * the store callback's order ((sum + residual) + bias, then x < 0 ? 0 : x,
 * NaN kept; or relu then + residual; kiln_conv_nhwc_bf16_avx512bf16.c's).
 * Each residual element is read before its y element is written. */
static void kiln_conv_amx_run_to_y(const kiln_conv_bf16_amx_t* l, int64_t j0, int64_t cols,
                                   int64_t p, int64_t np, const float* c) {
  const int nh = cols > 16 ? 2 : 1;
  __m512 b[2], sc[2], v[2];
  __mmask16 m[2];
  kiln_conv_bf16_to_y_strip(&l->out, nh, j0, cols, m, b, sc);
  float* y = l->out.y + p * l->out.ldy + j0;
  const float* res = l->out.res ? l->out.res + p * l->out.ldy + j0 : NULL;
  for (int64_t i = 0; i < np; ++i) {
    for (int h = 0; h < nh; ++h) v[h] = _mm512_loadu_ps(c + i * 32 + 16 * h);
    kiln_conv_bf16_to_y_row(&l->out, nh, m, b, sc, v, y + i * l->out.ldy, NULL,
                            res ? res + i * l->out.ldy : NULL);
  }
}

/* Tile ti's rows (16 x 32 at c) to y or the store, in runs of real pixels. */
static void kiln_conv_amx_tile_store(const kiln_conv_bf16_amx_t* l, int64_t ti, int64_t j0,
                                     int64_t cols, float* c) {
  const int64_t r = ti / l->tpr, v0 = (ti % l->tpr) * 16;
  const int64_t n = l->rl - v0 < 16 ? l->rl - v0 : 16;
  for (int64_t i = 0; i < n;) {
    const int64_t v = v0 + i, ox = v % l->ww, oy = r + v / l->ww;
    if (ox >= l->wo) { /* a copy column past the output's last */
      i += l->ww - ox;
      continue;
    }
    const int64_t len = n - i < l->wo - ox ? n - i : l->wo - ox;
    if (l->out.y)
      kiln_conv_amx_run_to_y(l, j0, cols, l->p0 + oy * l->wo + ox, len, c + i * 32);
    else
      l->store(l->store_ctx, j0, cols, l->p0 + oy * l->wo + ox, len, c + i * 32);
    i += len;
  }
}

void kiln_bf16_conv_nhwc_gather__amx(const uint16_t* src, const int64_t* vpos, int64_t n,
                                     const int64_t* seg, int64_t nseg, int64_t ka, uint16_t* dst) {
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t i = 0; i < n; ++i) {
    uint16_t* d = dst + i * ka;
    for (int64_t j = 0; j < ka; j += 32) _mm512_storeu_si512((void*)(d + j), zero);
    const uint16_t* sp = src + vpos[i];
    for (int64_t g = 0; g < nseg; ++g) {
      const uint16_t* s = sp + seg[3 * g];
      uint16_t* o = d + seg[3 * g + 1];
      for (int64_t j = 0; j < seg[3 * g + 2]; j += 32) {
        const int64_t left = seg[3 * g + 2] - j;
        const __mmask32 m = left >= 32 ? 0xffffffffu : (__mmask32)((1u << left) - 1u);
        _mm512_mask_storeu_epi16(o + j, m, _mm512_maskz_loadu_epi16(m, s + j));
      }
    }
  }
}

void kiln_bf16_conv_nhwc_run__amx(const kiln_conv_bf16_amx_t* l, int64_t t0, int64_t t1,
                                  int64_t s0, int64_t s1) {
  _Alignas(64) float cbuf[CHUNK * 16 * 32];
  const int64_t pstep = l->rows * 32, sa = l->px_stride * 2;
  kiln_amx_tiles_configure();
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t j0 = s * 32, cols = l->og - j0 < 32 ? l->og - j0 : 32;
    const int nt = cols > 16 ? 2 : 1;
    const uint16_t* b0 = l->w + 2 * s * pstep;
    const uint16_t* b1 = nt > 1 ? b0 + pstep : b0;
    for (int64_t c0 = t0; c0 < t1; c0 += CHUNK) {
      const int64_t c1 = t1 - c0 < CHUNK ? t1 : c0 + CHUNK;
      for (int64_t k0 = 0; k0 < l->steps; k0 += KSTEPS) {
        const int64_t ns = l->steps - k0 < KSTEPS ? l->steps - k0 : KSTEPS;
        const int first = k0 == 0;
        const uint16_t *p0 = b0 + k0 * 512, *p1 = b1 + k0 * 512;
        for (int64_t ti = c0; ti < c1; ti += 2) {
          const int mt = ti + 1 < c1 ? 2 : 1;
          const uint16_t* a0 = kiln_conv_amx_tile_src(l, ti);
          const uint16_t* a1 = mt > 1 ? kiln_conv_amx_tile_src(l, ti + 1) : a0;
          float* c = cbuf + (ti - c0) * 16 * 32;
          const int64_t* ko = l->koff + k0;
          switch (mt * 2 + nt) {
            case 2 + 1: kiln_conv_amx_block(1, 1, first, ns, a0, a1, sa, ko, p0, p1, c); break;
            case 2 + 2: kiln_conv_amx_block(1, 2, first, ns, a0, a1, sa, ko, p0, p1, c); break;
            case 4 + 1: kiln_conv_amx_block(2, 1, first, ns, a0, a1, sa, ko, p0, p1, c); break;
            default: kiln_conv_amx_block(2, 2, first, ns, a0, a1, sa, ko, p0, p1, c); break;
          }
        }
      }
      for (int64_t ti = c0; ti < c1; ++ti)
        kiln_conv_amx_tile_store(l, ti, j0, cols, cbuf + (ti - c0) * 16 * 32);
    }
  }
  _tile_release();
}
