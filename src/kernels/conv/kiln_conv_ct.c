/* The channel-vector tile loop, shared by the NCHW driver (kiln_conv.c)
 * and the NHWC one (kiln_conv_nhwc.c): they differ only in where a pixel's
 * input lies (vpos) and in how a finished tile is stored.
 *
 * Tile ti is output pixels [6 ti, 6 ti + 6) (the last one padded by
 * repeating its last pixel: computed, never stored). Panel outermost, then
 * K blocks, then tiles: the panel's kc x 16 weights stay in L1 across the
 * tiles (the GEMM's order, the weights as its packed B), and partial sums
 * wait in part, per tile, between K blocks. Where the level has a kernel
 * for two panels (AVX-512), panels go in pairs: each pixel's broadcast then
 * feeds both. */
#include <stddef.h>

#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_internal.h"

/* y_direct at tile ti (np pixels), panel q; the pair's second panel has
 * cols1 real channels. */
static inline kiln_conv_ct_y_t kiln_conv_ct_y_at(const kiln_conv_ct_loop_t* l, int64_t q,
                                                 int64_t ti, int64_t np, int64_t cols1) {
  kiln_conv_ct_y_t yt = l->y_direct;
  const int64_t at = ti * 6 * yt.ldy + q * KILN_CONV_PANEL_WIDE;
  yt.y += at;
  if (yt.res) yt.res += at;
  yt.cols1 = (int)cols1;
  yt.np = (int)np;
  return yt;
}

/* pairs is a constant in each instance, so the one-panel loop (levels with
 * no pair kernel) carries none of the pairs' branches. */
static inline __attribute__((always_inline)) void kiln_conv_ct_loop(
    const kiln_conv_ct_loop_t* l, int64_t t0, int64_t t1, int64_t q0, int64_t q1, int thread,
    const int pairs) {
  const int64_t W = KILN_CONV_PANEL_WIDE, M = 6, K = l->k;
  _Alignas(64) float tmp[2][6 * KILN_CONV_PANEL_WIDE];
  float bias32[2 * KILN_CONV_PANEL_WIDE];
  float* part = l->part ? l->part + (int64_t)thread * l->part_fl : NULL;
  const int64_t pitch = kiln_conv_ct_part_tile(l->ukernel2);
  for (int64_t q = q0; q < q1;) {
    /* Two panels at a time where the level has a kernel for it. */
    const int64_t nq = pairs && q + 1 < q1 ? 2 : 1;
    const float* wp = l->w + q * K * W;
    int64_t rows[2];
    for (int64_t s = 0; s < nq; ++s) {
      rows[s] = l->og - (q + s) * W < W ? l->og - (q + s) * W : W;
      for (int64_t j = 0; j < W; ++j)
        bias32[s * W + j] = l->bias && j < rows[s] ? l->bias[(q + s) * W + j] : 0.0f;
    }
    for (int64_t kb = 0; kb < K; kb += l->kc) {
      int64_t kcur = K - kb < l->kc ? K - kb : l->kc;
      int first = kb == 0, last = kb + kcur == K;
      /* While the block's tiles run, pull the next weights into L2 a slice
       * per tile: the next K block of each panel in use, or after the last
       * block the next panel's first (panels are contiguous). The late
       * layers' weights come from memory once, and without this the first
       * tile of each block waits for them. */
      const char* pf[2] = {NULL, NULL};
      if (!last)
        for (int64_t s = 0; s < nq; ++s) pf[s] = (const char*)(wp + s * K * W + (kb + kcur) * W);
      else if (q + nq < q1)
        pf[0] = (const char*)(wp + nq * K * W);
      const int64_t pf_lines = (pf[1] ? 2 : pf[0] ? 1 : 0) * kcur,
                    pf_step = pf_lines / (t1 - t0) + 1;
      int64_t pf_done = 0;
      for (int64_t ti = t0; ti < t1; ++ti) {
        for (int64_t i = 0; i < pf_step && pf_done < pf_lines; ++i, ++pf_done)
          __builtin_prefetch(pf_done < kcur ? pf[0] + pf_done * 64 : pf[1] + (pf_done - kcur) * 64,
                             0, 2);
        const float* px[6];
        int64_t np = l->howo - ti * M < M ? l->howo - ti * M : M;
        for (int64_t i = 0; i < M; ++i) px[i] = l->src + l->vpos[ti * M + (i < np ? i : np - 1)];
        float* acc = part ? part + (ti - t0) * pitch : NULL;
        /* A tile whose first panel is whole: straight to y (a partial
         * tile computes only its pixels there). */
        const int direct = last && l->y_direct.y && rows[0] == W;
        if (pairs && nq == 2) {
          float* acc1 = acc ? acc + M * W : NULL;
          if (direct && l->ukernel2_y) {
            kiln_conv_ct_y_t yt = kiln_conv_ct_y_at(l, q, ti, np, rows[1]);
            l->ukernel2_y(kcur, wp + kb * W, K * W, px, l->off + kb, bias32, first ? NULL : acc,
                          first ? NULL : acc1, &yt);
            continue;
          }
          if (np < M && l->ukernel2_np)
            l->ukernel2_np((int)np, kcur, wp + kb * W, K * W, px, l->off + kb, bias32,
                           first ? NULL : acc, first ? NULL : acc1, last ? tmp[0] : acc,
                           last ? tmp[1] : acc1);
          else
            l->ukernel2(kcur, wp + kb * W, K * W, px, l->off + kb, bias32, first ? NULL : acc,
                        first ? NULL : acc1, last ? tmp[0] : acc, last ? tmp[1] : acc1);
        } else {
          if (direct && l->ukernel_y) {
            kiln_conv_ct_y_t yt = kiln_conv_ct_y_at(l, q, ti, np, W);
            l->ukernel_y(kcur, wp + kb * W, px, l->off + kb, bias32, first ? NULL : acc, &yt);
            continue;
          }
          if (np < M && l->ukernel_np)
            l->ukernel_np((int)np, kcur, wp + kb * W, px, l->off + kb, bias32, first ? NULL : acc,
                          last ? tmp[0] : acc);
          else
            l->ukernel(kcur, wp + kb * W, px, l->off + kb, bias32, first ? NULL : acc,
                       last ? tmp[0] : acc);
        }
        if (last)
          for (int64_t s = 0; s < nq; ++s) l->store(l->store_ctx, q + s, rows[s], ti, np, tmp[s]);
      }
    }
    q += nq;
  }
}

void kiln_conv_ct_run(const kiln_conv_ct_loop_t* l, int64_t t0, int64_t t1, int64_t q0,
                      int64_t q1, int thread) {
  if (l->ukernel2)
    kiln_conv_ct_loop(l, t0, t1, q0, q1, thread, 1);
  else
    kiln_conv_ct_loop(l, t0, t1, q0, q1, thread, 0);
}
