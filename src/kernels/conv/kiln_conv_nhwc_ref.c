/* The scalar reference of the channels-last convolution: the definition in
 * kiln_conv_nhwc.h as plain loops (double accumulation), for the tests to
 * hold kiln_conv2d_f32_nhwc against. A bf16 x is widened as read, a bf16 y
 * rounded as stored (the args' x_bf16, y_bf16). */
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/gemm/kiln_gemm.h"

/* w[o][p] (p = c * kh * kw + u * kw + v), dense or packed in either width. */
static float kiln_conv_nhwc_ref_weight(const kiln_conv2d_f32_args_t* a, int64_t o, int64_t p) {
  const int64_t og = a->o / a->groups, k = a->c / a->groups * a->kh * a->kw;
  if (!a->weight_packed) return a->weight[o * k + p];
  const int64_t P = a->weight_packed, nq = (og + P - 1) / P, g = o / og, r = o % og;
  return a->weight[((g * nq + r / P) * k + p) * P + r % P];
}

static void kiln_conv_nhwc_ref(const kiln_conv2d_f32_args_t* a, int x_nchw) {
  const int64_t cg = a->c / a->groups, og = a->o / a->groups;
  for (int64_t n = 0; n < a->n; ++n)
    for (int64_t i = 0; i < a->ho; ++i)
      for (int64_t j = 0; j < a->wo; ++j)
        for (int64_t o = 0; o < a->o; ++o) {
          const int64_t g = o / og;
          double acc = a->bias ? a->bias[o] : 0.0;
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t u = 0; u < a->kh; ++u) {
              int64_t iy = i * a->sh - a->ph + u * a->dh;
              if (iy < 0 || iy >= a->h) continue;
              for (int64_t v = 0; v < a->kw; ++v) {
                int64_t ix = j * a->sw - a->pw + v * a->dw;
                if (ix < 0 || ix >= a->w) continue;
                int64_t ci = g * cg + c;
                const int64_t xi = x_nchw ? ((n * a->c + ci) * a->h + iy) * a->w + ix
                                          : ((n * a->h + iy) * a->w + ix) * a->c + ci;
                acc += (double)kiln_conv_nhwc_ref_weight(a, o, (c * a->kh + u) * a->kw + v) *
                       kiln_conv2d_nhwc_x_at(a, xi);
              }
            }
          int64_t at = ((n * a->ho + i) * a->wo + j) * a->o + o;
          if (a->residual && a->residual_before_act) acc += a->residual[at];
          float r = kiln_activation_scalar((float)acc, a->act);
          if (a->residual && !a->residual_before_act) r += a->residual[at];
          kiln_conv2d_nhwc_y_put(a, at, r);
        }
}

void kiln_conv2d_f32_nhwc_reference(const kiln_conv2d_f32_args_t* a) { kiln_conv_nhwc_ref(a, 0); }

void kiln_conv2d_f32_nhwc_reference_from_nchw(const kiln_conv2d_f32_args_t* a) {
  kiln_conv_nhwc_ref(a, 1);
}
