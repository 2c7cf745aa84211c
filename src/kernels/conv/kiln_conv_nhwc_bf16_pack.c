/* The bf16-compute conv weight layout (kiln_conv_nhwc_bf16.h,
 * KILN_LAYOUT_CONV2D_PACKED_16_BF16): its size and its packer, which
 * rounds each fp32 weight (already batch-norm folded by the compiler) to
 * bf16, nearest even, and lays the (u, v, c) taps out as VNNI pairs of
 * channels. Packed once at compile time (the pack pass) or by the tests. */
#include <string.h>

#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/gemm/kiln_gemm.h"

size_t kiln_conv2d_bf16_packed_size(int64_t o, int64_t cg, int64_t kh, int64_t kw,
                                    int64_t groups) {
  if (o < 0 || cg < 0 || kh < 0 || kw < 0 || groups < 1 || o % groups) return 0;
  const int64_t lim = (int64_t)1 << 44; /* far past any weight, far from overflow */
  if (cg > lim || kh > lim || kw > lim) return 0;
  const int64_t nq = (o / groups + 15) / 16, cg2 = cg + (cg & 1);
  if (kh && kw && (kh > lim / kw || cg2 > lim / (kh * kw))) return 0;
  const int64_t rows = kh * kw * cg2 / 2; /* pair rows of one panel */
  if (nq && groups > lim / nq) return 0;
  if (rows && groups * nq > lim / rows) return 0;
  return (size_t)(groups * nq * rows) * 64;
}

void kiln_conv2d_bf16_pack_panels(int64_t o, int64_t cg, int64_t kh, int64_t kw, int64_t groups,
                                  const float* w, int64_t pan0, int64_t pan1, uint16_t* out) {
  const int64_t og = o / groups, nq = (og + 15) / 16, cg2 = cg + (cg & 1), hw = kh * kw;
  const int64_t rows = hw * cg2 / 2, k = cg * hw;
  for (int64_t pan = pan0; pan < pan1; ++pan) {
    const int64_t g = pan / nq, q = pan % nq;
    uint16_t* dst = out + pan * rows * 32;
    memset(dst, 0, (size_t)(rows * 32) * sizeof(uint16_t));
    for (int64_t i = 0; i < 16 && q * 16 + i < og; ++i) {
      const float* src = w + (g * og + q * 16 + i) * k; /* (cg, kh, kw) */
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t uv = 0; uv < hw; ++uv) {
          int64_t r = uv * (cg2 / 2) + c / 2;
          dst[r * 32 + 2 * i + (c & 1)] = kiln_gemm_bf16_from_f32(src[c * hw + uv]);
        }
    }
  }
}

void kiln_conv2d_bf16_pack_weight(int64_t o, int64_t cg, int64_t kh, int64_t kw, int64_t groups,
                                  const float* w, uint16_t* out) {
  const int64_t nq = (o / groups + 15) / 16;
  kiln_conv2d_bf16_pack_panels(o, cg, kh, kw, groups, w, 0, groups * nq, out);
}
