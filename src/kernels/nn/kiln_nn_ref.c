/* Scalar references for the nn kernels: obviously correct, slow, and the
 * ground truth of tests/c/test_nn.c.
 *
 * The unary functions that libm has (expf, logf, tanhf, erff, ...) call it
 * in float. The composite ones (sigmoid, silu, gelu, gelu_tanh) are
 * evaluated in double and rounded once, in the forms that do not cancel
 * (gelu via erfc, the sigmoid as 1/(1 + e^-x)), so the reference is within
 * an ulp of the true value even in the tails where float formulas lose
 * everything. Softmax, the norms and attention accumulate in double.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/nn/kiln_nn.h"

static float kiln_nn_ref_unary1(kiln_unary_t op, float x) {
  double d = x;
  switch (op) {
    case KILN_UNARY_NEG: return -x;
    case KILN_UNARY_ABS: return fabsf(x);
    case KILN_UNARY_EXP: return expf(x);
    case KILN_UNARY_LOG: return logf(x);
    case KILN_UNARY_SQRT: return sqrtf(x);
    case KILN_UNARY_RSQRT: return 1.0f / sqrtf(x);
    case KILN_UNARY_RECIPROCAL: return 1.0f / x;
    case KILN_UNARY_TANH: return tanhf(x);
    case KILN_UNARY_SIGMOID: return (float)(1.0 / (1.0 + exp(-d)));
    case KILN_UNARY_RELU: return x < 0.0f ? 0.0f : x;
    case KILN_UNARY_GELU: return (float)(0.5 * d * erfc(-d * M_SQRT1_2));
    case KILN_UNARY_GELU_TANH: {
      double w = 2.0 * sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d);
      return (float)(d / (1.0 + exp(-w)));
    }
    case KILN_UNARY_SILU: return (float)(d / (1.0 + exp(-d)));
    case KILN_UNARY_ERF: return erff(x);
    case KILN_UNARY_SIN: return sinf(x);
    case KILN_UNARY_COS: return cosf(x);
    case KILN_UNARY_COUNT: break;
  }
  return NAN;
}

void kiln_unary_f32_reference(kiln_unary_t op, size_t n, const float* x, float* y) {
  for (size_t i = 0; i < n; ++i) y[i] = kiln_nn_ref_unary1(op, x[i]);
}

/* In double, by the formulas of gelu's derivative: erf form
 * Phi(x) + x phi(x); tanh form (1 + T)/2 + x/2 (1 - T^2) sqrt(2/pi) (1 + 3k x^2). */
void kiln_gelu_backward_f32_reference(int tanh_form, size_t n, const float* dy, const float* x,
                                      float* dx) {
  for (size_t i = 0; i < n; ++i) {
    double v = x[i], d;
    if (tanh_form) {
      const double beta = 0.7978845608028654, kappa = 0.044715;
      double t = tanh(beta * (v + kappa * v * v * v));
      d = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * beta * (1.0 + 3.0 * kappa * v * v);
    } else {
      d = 0.5 * erfc(-v / sqrt(2.0)) + v * exp(-0.5 * v * v) * 0.3989422804014327;
    }
    dx[i] = (float)((double)dy[i] * d);
  }
}

void kiln_layer_norm_backward_f32_reference(size_t rows, size_t cols, const float* dy,
                                            const float* x, const float* mean, const float* rstd,
                                            const float* gamma, float* dx) {
  for (size_t r = 0; r < rows; ++r) {
    const float *g = dy + r * cols, *xr = x + r * cols;
    /* xh about the row's own mean: the saved float mean is its rounding,
     * corrected here in double so that xh sums to zero (kiln_norm.c) */
    double c = 0.0, s1 = 0.0, s2 = 0.0;
    for (size_t i = 0; i < cols; ++i) c += (double)xr[i] - mean[r];
    double mu = mean[r] + c / (double)cols;
    for (size_t i = 0; i < cols; ++i) {
      double gg = (double)g[i] * (gamma ? gamma[i] : 1.0f);
      s1 += gg;
      s2 += gg * (((double)xr[i] - mu) * rstd[r]);
    }
    for (size_t i = 0; i < cols; ++i) {
      double gg = (double)g[i] * (gamma ? gamma[i] : 1.0f);
      double xh = ((double)xr[i] - mu) * rstd[r];
      dx[r * cols + i] = (float)(rstd[r] * (gg - s1 / (double)cols - xh * s2 / (double)cols));
    }
  }
}

void kiln_softmax_f32_reference(size_t rows, size_t cols, const float* x, float* y,
                                int log_softmax) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double m = -INFINITY, s = 0.0;
    for (size_t i = 0; i < cols; ++i) m = xr[i] > m ? xr[i] : m;
    for (size_t i = 0; i < cols; ++i) s += exp(xr[i] - m);
    for (size_t i = 0; i < cols; ++i)
      yr[i] = log_softmax ? (float)(xr[i] - m - log(s)) : (float)(exp(xr[i] - m) / s);
  }
}

void kiln_softmax_strided_f32_reference(int64_t outer, int64_t len, int64_t inner,
                                        const float* x, float* y, int log_softmax) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      const float* xr = x + o * len * inner + j;
      float* yr = y + o * len * inner + j;
      double m = -INFINITY, s = 0.0;
      for (int64_t i = 0; i < len; ++i) m = xr[i * inner] > m ? xr[i * inner] : m;
      for (int64_t i = 0; i < len; ++i) s += exp(xr[i * inner] - m);
      for (int64_t i = 0; i < len; ++i)
        yr[i * inner] = log_softmax ? (float)(xr[i * inner] - m - log(s))
                            : (float)(exp(xr[i * inner] - m) / s);
    }
}

void kiln_layer_norm_f32_reference(size_t rows, size_t cols, const float* x,
                                   const float* gamma, const float* beta, float eps, float* y) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double mean = 0.0, var = 0.0;
    for (size_t i = 0; i < cols; ++i) mean += xr[i];
    mean /= (double)cols;
    for (size_t i = 0; i < cols; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= (double)cols;
    double rstd = 1.0 / sqrt(var + eps);
    for (size_t i = 0; i < cols; ++i)
      y[r * cols + i] =
          (float)((xr[i] - mean) * rstd * (gamma ? gamma[i] : 1.0f) + (beta ? beta[i] : 0.0f));
  }
}

void kiln_rms_norm_f32_reference(size_t rows, size_t cols, const float* x,
                                 const float* gamma, float eps, float* y) {
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double ms = 0.0;
    for (size_t i = 0; i < cols; ++i) ms += (double)xr[i] * xr[i];
    double rstd = 1.0 / sqrt(ms / (double)cols + eps);
    for (size_t i = 0; i < cols; ++i)
      y[r * cols + i] = (float)(xr[i] * rstd * (gamma ? gamma[i] : 1.0f));
  }
}

/* x rounded to bf16 (nearest even, NaN kept), in double. */
static double kiln_nn_ref_bf16(double x) {
  float f = (float)x;
  uint32_t b;
  memcpy(&b, &f, sizeof b);
  if ((b & 0x7fffffffu) > 0x7f800000u) return x;
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  memcpy(&f, &b, sizeof f);
  return f;
}

/* Materialises one row of scores at a time (kv_len doubles). With
 * a->bf16, the bf16 rule of kiln_attention_bf16.h in double: q, k, v and
 * the weights rounded, the weights taken against the reference point
 * ceil(m log2 e) ln2 of the row max m, their (rounded) sum the divisor. */
void kiln_attention_f32_reference(const kiln_attention_args_t* a) {
  if (a->batch <= 0 || a->heads <= 0 || a->kv_heads <= 0 || a->q_len <= 0 ||
      a->heads % a->kv_heads)
    return;
  double* s = malloc((size_t)(a->kv_len > 0 ? a->kv_len : 1) * sizeof(double));
  if (!s) return;
  int64_t group = a->heads / a->kv_heads;
  for (int64_t b = 0; b < a->batch; ++b)
    for (int64_t h = 0; h < a->heads; ++h)
      for (int64_t i = 0; i < a->q_len; ++i) {
        const float* q = a->q + b * a->q_strides[0] + h * a->q_strides[1] + i * a->q_strides[2];
        const float* kb = a->k + b * a->k_strides[0] + (h / group) * a->k_strides[1];
        const float* vb = a->v + b * a->v_strides[0] + (h / group) * a->v_strides[1];
        double m = -INFINITY;
        int any_nan = 0;
        for (int64_t j = 0; j < a->kv_len; ++j) {
          double dot = 0.0;
          if (a->bf16)
            for (int64_t e = 0; e < a->head_dim; ++e)
              dot += kiln_nn_ref_bf16(q[e * a->q_strides[3]]) *
                     kiln_nn_ref_bf16(kb[j * a->k_strides[2] + e * a->k_strides[3]]);
          else
            for (int64_t e = 0; e < a->head_dim; ++e)
              dot += (double)q[e * a->q_strides[3]] * kb[j * a->k_strides[2] + e * a->k_strides[3]];
          dot *= a->scale;
          /* torch's math path holds scores in float32: past its range, Inf */
          if (a->every_key) dot = (double)(float)dot;
          if (a->mask)
            dot += a->mask[b * a->mask_strides[0] + h * a->mask_strides[1] +
                           i * a->mask_strides[2] + j * a->mask_strides[3]];
          /* Hidden: added (NaN and +Inf stay NaN, torch's math path) or set. */
          if (a->causal && j > i + a->causal_offset)
            dot = a->every_key ? dot - INFINITY : -INFINITY;
          s[j] = dot;
          if (dot != dot) any_nan = 1;
          m = dot > m ? dot : m;
        }
        float* out = a->out + kiln_attention_out_offset(a, b, h, i);
        double sum = 0.0;
        if (a->bf16) m = ceil(m * 1.4426950408889634) * 0.6931471805599453;
        for (int64_t j = 0; j < a->kv_len; ++j) {
          s[j] = m == -INFINITY ? 0.0 : exp(s[j] - m);
          if (a->bf16) s[j] = kiln_nn_ref_bf16(s[j]);
          sum += s[j];
        }
        for (int64_t e = 0; e < a->v_head_dim; ++e) {
          double o = 0.0;
          if (a->bf16)
            for (int64_t j = 0; j < a->kv_len; ++j)
              o += s[j] * kiln_nn_ref_bf16(vb[j * a->v_strides[2] + e * a->v_strides[3]]);
          else
            for (int64_t j = 0; j < a->kv_len; ++j)
              o += s[j] * vb[j * a->v_strides[2] + e * a->v_strides[3]];
          /* No visible key: zeros, as torch's CPU SDPA kernel and its math
           * path's safe softmax (whose zero weights still multiply every
           * value: NaN for a non-finite one). */
          out[e] = any_nan                             ? NAN
                   : sum == 0.0                        ? (a->every_key && o != o ? NAN : 0.0f)
                                                       : (float)(o / sum);
        }
      }
  free(s);
}
