/* The AVX-512 GEMM epilogue: dst = act(src + bias) + residual, 16 floats at
 * a time. The same functions as kiln_gemm_epilogue_avx2.c (its accuracy
 * notes hold here), at twice the width and with e^x scaled by VSCALEFPS:
 * one instruction that multiplies by 2^n with a single rounding, so e^x
 * overflows to +inf past ln(FLT_MAX) and rounds through the denormals
 * without the AVX2 version's clamps and blend.
 *
 * Why a copy at all: for GELU the epilogue is not a sliver. A BERT-style
 * intermediate layer (K = 384 or 768, a GELU on each of its outputs) spent
 * a third of its bf16 product's time in the AVX2 GELU: 3.7 TSC ticks per
 * element on Zen 4, 1.85 here (gelu_tanh 2.05 -> 1.09, silu 1.74 -> 0.84).
 * Each activation's loop is compiled on its own (kiln_gemm_rows_avx512
 * with a constant act) and takes two vectors per step, so the long exp and
 * polynomial chains of one overlap the other's. */
#include <immintrin.h>
#include <math.h>

#include "kernels/gemm/kiln_gemm_act_avx512.h"
#include "kernels/gemm/kiln_gemm_internal.h"

/* One vector's epilogue at column j of a row (mask: its lanes). */
KILN_EP_AI void kiln_gemm_ep16_avx512(const float* s, float* d, const float* bias,
                                      const float* r, int64_t j, __mmask16 mask,
                                      const kiln_activation_t act) {
  __m512 x = _mm512_maskz_loadu_ps(mask, s + j);
  if (bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, bias + j));
  x = kiln_gemm_act_avx512(x, act);
  if (r) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, r + j));
  _mm512_mask_storeu_ps(d + j, mask, x);
}

KILN_EP_AI void kiln_gemm_rows_avx512(int64_t m, int64_t n, const float* src, int64_t lds,
                                      float* dst, int64_t ldd, const float* bias,
                                      const float* res, int64_t ldr,
                                      const kiln_activation_t act) {
  for (int64_t i = 0; i < m; ++i) {
    const float* s = src + i * lds;
    float* d = dst + i * ldd;
    const float* r = res ? res + i * ldr : NULL;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
      /* Both loads before either store: dst may be src (in place). */
      __m512 x0 = _mm512_loadu_ps(s + j), x1 = _mm512_loadu_ps(s + j + 16);
      if (bias) {
        x0 = _mm512_add_ps(x0, _mm512_loadu_ps(bias + j));
        x1 = _mm512_add_ps(x1, _mm512_loadu_ps(bias + j + 16));
      }
      x0 = kiln_gemm_act_avx512(x0, act);
      x1 = kiln_gemm_act_avx512(x1, act);
      if (r) {
        x0 = _mm512_add_ps(x0, _mm512_loadu_ps(r + j));
        x1 = _mm512_add_ps(x1, _mm512_loadu_ps(r + j + 16));
      }
      _mm512_storeu_ps(d + j, x0);
      _mm512_storeu_ps(d + j + 16, x1);
    }
    /* A whole vector left unmasked: a masked store costs far more than a
     * plain one on Zen (a conv's 6 x 16 NHWC tiles, all of whose rows
     * end here: 2x the time of the store of a 1x1 conv with 16 input
     * channels in one address alignment of 4). */
    if (j + 16 <= n) {
      __m512 x = _mm512_loadu_ps(s + j);
      if (bias) x = _mm512_add_ps(x, _mm512_loadu_ps(bias + j));
      x = kiln_gemm_act_avx512(x, act);
      if (r) x = _mm512_add_ps(x, _mm512_loadu_ps(r + j));
      _mm512_storeu_ps(d + j, x);
      j += 16;
    }
    if (j < n) {
      /* Masked lanes are neither read (nor fault) nor written. */
      __mmask16 mask = (__mmask16)((1u << (n - j)) - 1u);
      kiln_gemm_ep16_avx512(s, d, bias, r, j, mask, act);
    }
  }
}

void kiln_f32_gemm_epilogue__avx512(int64_t m, int64_t n, const float* src, int64_t lds,
                                    float* dst, int64_t ldd, const float* bias, const float* res,
                                    int64_t ldr, kiln_activation_t act) {
#define KILN_EP_ROWS(A) kiln_gemm_rows_avx512(m, n, src, lds, dst, ldd, bias, res, ldr, A)
  KILN_GEMM_EPILOGUE_BY_ACT(act, KILN_EP_ROWS)
#undef KILN_EP_ROWS
}
