/* The scalar reference of the bf16-compute channels-last convolution
 * (kiln_conv_nhwc_bf16.h): x rounded to bf16 as it is read, the weights
 * read from their packed bf16 layout, products summed in double, then the
 * epilogue's rule (bias first, the residual before or after the
 * activation). The tests hold the kernel and the portable path against it;
 * the reference target runs it; and it is the kernel's last resort when
 * no scratch memory is to be had. */
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/gemm/kiln_gemm.h"

static double kiln_conv_bf16_ref_round(float x) {
  return (double)kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(x));
}

/* The packed weight of output channel o at tap (c, u, v). */
static double kiln_conv_bf16_ref_weight(const kiln_conv2d_f32_args_t* a, int64_t o, int64_t c,
                                        int64_t u, int64_t v) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups, nq = (og + 15) / 16;
  const int64_t cg2 = cg + (cg & 1), rows = a->kh * a->kw * cg2 / 2;
  const int64_t g = o / og, q = o % og / 16, i = o % og % 16;
  const int64_t r = (u * a->kw + v) * (cg2 / 2) + c / 2;
  const uint16_t* w = (const uint16_t*)(const void*)a->weight;
  return (double)kiln_gemm_bf16_to_f32(w[((g * nq + q) * rows + r) * 32 + 2 * i + (c & 1)]);
}

void kiln_conv2d_bf16_nhwc_reference(const kiln_conv2d_f32_args_t* a, int x_nchw) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups;
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t i = 0; i < a->ho; ++i)
      for (int64_t j = 0; j < a->wo; ++j)
        for (int64_t o = 0; o < a->o; ++o) {
          const int64_t g = o / og;
          double acc = 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < a->kh; ++u) {
              int64_t iy = i * a->sh - a->ph + u * a->dh;
              if (iy < 0 || iy >= a->h) continue;
              for (int64_t v = 0; v < a->kw; ++v) {
                int64_t ix = j * a->sw - a->pw + v * a->dw;
                if (ix < 0 || ix >= a->w) continue;
                int64_t ci = g * cg + c;
                float x = kiln_conv2d_nhwc_x_at(
                    a, x_nchw ? ((n * a->c + ci) * a->h + iy) * a->w + ix
                              : ((n * a->h + iy) * a->w + ix) * a->c + ci);
                acc += kiln_conv_bf16_ref_weight(a, o, c, u, v) * kiln_conv_bf16_ref_round(x);
              }
            }
          if (a->scale) acc *= a->scale[o];
          if (a->bias) acc += a->bias[o];
          int64_t at = ((n * a->ho + i) * a->wo + j) * a->o + o;
          if (a->residual && a->residual_before_act) acc += a->residual[at];
          float r = kiln_activation_scalar((float)acc, a->act);
          if (a->residual && !a->residual_before_act) r += a->residual[at];
          kiln_conv2d_nhwc_y_put(a, at, r);
        }
}
