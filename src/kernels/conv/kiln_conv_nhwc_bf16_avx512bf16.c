/* The bf16-compute NHWC conv's tile loop and microkernel on VDPBF16PS
 * (kiln_conv_nhwc_bf16_internal.h): MR output pixels (each at its own base
 * in the bf16 source) x 32 output channels. Per pair row, two zmm loads of
 * the weights (one pair row of each of the strip's two panels: 16 channels
 * x the couple (c, c + 1) at one (u, v)) and per pixel one 32-bit broadcast
 * of the source's couple, feeding two VDPBF16PS (32 multiply-adds each,
 * summed in pairs into 16 fp32 lanes): 2 MR accumulators, 2 MR dot
 * products per MR + 2 vector loads (MR = 10: kiln_conv_nhwc_bf16_internal.h
 * says why). A strip with one panel left runs a 16-channel variant.
 * Partial sums cross K blocks in fp32. With no activation, relu or relu6
 * (l->out.y or, bf16, l->out.yb set), a finished tile goes from the accumulators to y with its
 * residual, bias and activation, in the store callback's order ((sum +
 * residual) + bias, then the activation; or it then + residual): no trip
 * through a scratch tile and the epilogue call, which was 5-7 % of the
 * stem's time (77 pair rows a tile, one Zen 4 core).
 *
 * Compiled only with the AVX512_BF16 flags (meson: the conv_bf16 family's
 * avx512bf16 variant) and called only when kiln_cpu_bf16() has
 * KILN_CPU_BF16_AVX512. */
#include <immintrin.h>
#include <string.h>

#include "kernels/conv/kiln_conv_nhwc_bf16_internal.h"

#define KILN_CBF_AI static inline __attribute__((always_inline))
#define MR KILN_CONV_BF16_MR

/* acc (MR x 16 NP) = init + sum_{r < rows} w(r) . src couples; init = cin
 * (MR x 32, pixel-major) or zero. NP panels (1 or 2): w0 and w0 + pstep. */
KILN_CBF_AI void kiln_conv_bf16_dots(const int NP, __m512 acc[MR][2], int64_t rows,
                                     const uint16_t* w0, int64_t pstep,
                                     const uint16_t* const* px, const int64_t* off,
                                     const float* cin) {
  for (int i = 0; i < MR; ++i)
    for (int h = 0; h < NP; ++h)
      acc[i][h] = cin ? _mm512_loadu_ps(cin + i * 32 + 16 * h) : _mm512_setzero_ps();
  const uint16_t* w1 = w0 + pstep;
  for (int64_t r = 0; r < rows; ++r) {
    __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)(w0 + r * 32));
    __m512bh b1 = NP > 1 ? (__m512bh)_mm512_loadu_si512((const void*)(w1 + r * 32)) : b0;
    const int64_t o = off[r];
    for (int i = 0; i < MR; ++i) {
      int32_t couple;
      memcpy(&couple, px[i] + o, sizeof(couple));
      __m512bh av = (__m512bh)_mm512_set1_epi32(couple);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
      if (NP > 1) acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
    }
  }
}

/* The sums to out (MR x 32, pixel-major): partial sums, or a tile for the
 * store callback. */
KILN_CBF_AI void kiln_conv_bf16_tile(const int NP, int64_t rows, const uint16_t* w0,
                                     int64_t pstep, const uint16_t* const* px,
                                     const int64_t* off, const float* cin, float* out) {
  __m512 acc[MR][2];
  kiln_conv_bf16_dots(NP, acc, rows, w0, pstep, px, off, cin);
  for (int i = 0; i < MR; ++i)
    for (int h = 0; h < NP; ++h) _mm512_storeu_ps(out + i * 32 + 16 * h, acc[i][h]);
}

/* The sums through l->out's rule (kiln_conv_nhwc_bf16_internal.h) to y:
 * np pixels ldy apart (the residual's too), channels [j0, j0 + cols). */
KILN_CBF_AI void kiln_conv_bf16_tile_to_y(const int NP, int64_t rows, const uint16_t* w0,
                                          int64_t pstep, const uint16_t* const* px,
                                          const int64_t* off, const float* cin,
                                          const kiln_conv_bf16_loop_t* l, int64_t j0,
                                          int64_t cols, int64_t np, int64_t e) {
  __m512 acc[MR][2], b[2], sc[2];
  __mmask16 m[2];
  kiln_conv_bf16_dots(NP, acc, rows, w0, pstep, px, off, cin);
  kiln_conv_bf16_to_y_strip(&l->out, NP, j0, cols, m, b, sc);
  /* Element e of y (the tile's first pixel, channel j0), float or bf16. */
  float* y = l->out.y ? l->out.y + e : NULL;
  uint16_t* yb = l->out.yb ? l->out.yb + e : NULL;
  const float* res = l->out.res ? l->out.res + e : NULL;
  for (int i = 0; i < MR; ++i) {
    if (i >= np) break;
    const int64_t at = i * l->out.ldy;
    kiln_conv_bf16_to_y_row(&l->out, NP, m, b, sc, acc[i], y ? y + at : NULL, yb ? yb + at : NULL,
                            res ? res + at : NULL);
  }
}

void kiln_bf16_conv_nhwc_run__avx512bf16(const kiln_conv_bf16_loop_t* l, int64_t t0, int64_t t1,
                                         int64_t s0, int64_t s1, int thread) {
  const int64_t R = l->rows, pstep = R * 32;
  _Alignas(64) float tmp[MR * 32];
  float* part = l->part ? l->part + (int64_t)thread * l->part_fl : NULL;
  for (int64_t s = s0; s < s1; ++s) {
    const int64_t j0 = s * 32, cols = l->og - j0 < 32 ? l->og - j0 : 32;
    const uint16_t* wp = l->w + 2 * s * pstep;
    for (int64_t kb = 0; kb < R; kb += l->kc) {
      const int64_t kcur = R - kb < l->kc ? R - kb : l->kc;
      const int first = kb == 0, last = kb + kcur == R;
      /* Pull the next K block's weights (both panels) into L2 a slice per
       * tile while this block runs, as the fp32 loop (kiln_conv_ct.c). */
      const int more = s + 1 < s1 || !last;
      const int64_t nb = last ? 0 : kb + kcur;
      const char* pf0 = (const char*)(last ? l->w + 2 * (s + 1) * pstep : wp + nb * 32);
      const char* pf1 = pf0 + pstep * 2;
      int64_t pf_lines = last ? (R < l->kc ? R : l->kc) : (R - nb < l->kc ? R - nb : l->kc);
      int64_t pf_step = pf_lines / (t1 - t0) + 1, pf_done = 0;
      for (int64_t ti = t0; ti < t1; ++ti) {
        for (int64_t i = 0; more && i < pf_step && pf_done < pf_lines; ++i, ++pf_done) {
          __builtin_prefetch(pf0 + pf_done * 64, 0, 2);
          __builtin_prefetch(pf1 + pf_done * 64, 0, 2);
        }
        const uint16_t* px[MR];
        int64_t np = l->howo - ti * MR < MR ? l->howo - ti * MR : MR;
        for (int64_t i = 0; i < MR; ++i) px[i] = l->src + l->vpos[ti * MR + (i < np ? i : np - 1)];
        float* acc = part ? part + (ti - t0) * MR * 32 : NULL;
        if (last && (l->out.y || l->out.yb)) {
          const int64_t y = ti * MR * l->out.ldy + j0;
          if (cols > 16)
            kiln_conv_bf16_tile_to_y(2, kcur, wp + kb * 32, pstep, px, l->off + kb,
                                     first ? NULL : acc, l, j0, cols, np, y);
          else
            kiln_conv_bf16_tile_to_y(1, kcur, wp + kb * 32, pstep, px, l->off + kb,
                                     first ? NULL : acc, l, j0, cols, np, y);
          continue;
        }
        if (cols > 16)
          kiln_conv_bf16_tile(2, kcur, wp + kb * 32, pstep, px, l->off + kb, first ? NULL : acc,
                              last ? tmp : acc);
        else
          kiln_conv_bf16_tile(1, kcur, wp + kb * 32, pstep, px, l->off + kb, first ? NULL : acc,
                              last ? tmp : acc);
        if (last) l->store(l->store_ctx, j0, cols, ti * MR, np, tmp);
      }
    }
  }
}
