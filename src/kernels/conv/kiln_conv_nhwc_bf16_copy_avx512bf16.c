/* The bf16-compute NHWC conv's copy of an NCHW x with few channels (the
 * stem's C = 3) into its bordered pixel-major source
 * (kiln_conv_nhwc_bf16.c): 16 pixels of each plane rounded to bf16
 * (kiln_gemm_bf16_from_f32's rule, kiln_gemm_bf16_round_avx512.h) and
 * interleaved by two-source word permutes, two stores per 16 pixels. It
 * replaces, for these shapes, the portable rounding of a channel's run
 * then a store per element, which was a tenth of the stem's time on one
 * Zen 4 core (0.18 of 1.8 ms) and did not scale to 2 threads.
 *
 * It also says whether a rounded value is Inf or NaN: pairing the taps
 * along a window row (kiln_conv_nhwc_bf16_internal.h) multiplies one
 * element past a window row by a zero weight, which is right only when
 * that element is finite (VDPBF16PS gives 0 x Inf = NaN).
 *
 * Compiled with the conv_bf16 family's avx512bf16 flags (AVX-512BW among
 * them) and called only when kiln_cpu_bf16() has KILN_CPU_BF16_AVX512. */
#include <immintrin.h>

#include "kernels/conv/kiln_conv_nhwc_bf16_internal.h"
#include "kernels/gemm/kiln_gemm_bf16_round_avx512.h"

int kiln_bf16_conv_interleave__avx512bf16(const float* x, int64_t plane, int64_t c, int64_t n,
                                          int64_t pitch, uint16_t* d) {
  /* Output word k of a group of 16 pixels is pixel k / pitch, channel
   * k % pitch, taken from a = (plane 0 | plane 1) or b = (plane 2 |
   * plane 3), 16 words each; channels [c, pitch) from word 48, b's upper
   * half, zero whenever c < pitch (then c <= 3). */
  uint16_t ix[64];
  for (int k = 0; k < 64; ++k) {
    const int px = k / (int)pitch, ch = k % (int)pitch;
    ix[k] = (uint16_t)(ch < c && px < 16 ? ch * 16 + px : 48);
  }
  const __m512i ix0 = _mm512_loadu_si512((const void*)ix);
  const __m512i ix1 = _mm512_loadu_si512((const void*)(ix + 32));
  const __m512i inf = _mm512_set1_epi32(0x7f80);
  __mmask16 bad = 0;
  for (int64_t q = 0; q < n; q += 16) {
    const int64_t len = n - q < 16 ? n - q : 16, words = len * pitch;
    const __mmask16 m = (__mmask16)(len == 16 ? 0xffffu : (1u << len) - 1u);
    __m256i h[4];
    for (int64_t ch = 0; ch < 4; ++ch) {
      __m512i r = _mm512_setzero_si512();
      if (ch < c) r = kiln_gemm_bf16x16_round_lanes(_mm512_maskz_loadu_ps(m, x + ch * plane + q));
      bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(r, inf), inf); /* exponent all ones */
      h[ch] = _mm512_cvtepi32_epi16(r);
    }
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1);
    const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(h[2]), h[3], 1);
    uint16_t* dq = d + q * pitch;
    const int64_t w0 = words < 32 ? words : 32, w1 = words - w0;
    _mm512_mask_storeu_epi16(dq, (__mmask32)(w0 == 32 ? 0xffffffffu : (1u << w0) - 1u),
                             _mm512_permutex2var_epi16(a, ix0, b));
    if (w1 > 0)
      _mm512_mask_storeu_epi16(dq + 32, (__mmask32)(w1 == 32 ? 0xffffffffu : (1u << w1) - 1u),
                               _mm512_permutex2var_epi16(a, ix1, b));
  }
  return bad != 0;
}
