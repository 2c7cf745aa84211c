/* Activation functions a kernel can apply in its epilogue. Shared by the
 * GEMM epilogue, the unary kernels and the IR (LINEAR's and CONV2D's
 * activation param): in base, so that neither of those layers includes the
 * other. */
#ifndef KILN_ACTIVATION_H
#define KILN_ACTIVATION_H

#include <math.h>

typedef enum kiln_activation_e {
  KILN_ACT_NONE = 0,
  KILN_ACT_RELU,
  KILN_ACT_GELU,      /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
  KILN_ACT_GELU_TANH, /* tanh approximation, as torch's approximate="tanh" */
  KILN_ACT_SILU,
  KILN_ACT_SIGMOID,
  KILN_ACT_TANH,
  KILN_ACT_RELU6, /* clamp to [0, 6]: nn.ReLU6, hardtanh(0, 6) (format 2.22) */
  KILN_ACT_HARDSWISH, /* x relu6(x + 3) / 6: nn.Hardswish (format 2.24) */
  KILN_ACT_COUNT
} kiln_activation_t;

/* One element, with torch's formulas (relu keeps NaN, gelu via erff,
 * gelu_tanh via tanhf): the scalar reference of every fused epilogue. */
static inline float kiln_activation_scalar(float x, kiln_activation_t act) {
  switch (act) {
    case KILN_ACT_RELU:
      return x < 0.0f ? 0.0f : x; /* NaN < 0 is false: NaN passes, as in torch */
    case KILN_ACT_GELU:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case KILN_ACT_GELU_TANH: {
      float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + tanhf(u));
    }
    case KILN_ACT_SILU:
      return x / (1.0f + expf(-x));
    case KILN_ACT_SIGMOID:
      return 1.0f / (1.0f + expf(-x));
    case KILN_ACT_TANH:
      return tanhf(x);
    case KILN_ACT_RELU6: /* torch's hardtanh: NaN and -0.0 pass */
      x = x < 0.0f ? 0.0f : x;
      return x > 6.0f ? 6.0f : x;
    case KILN_ACT_HARDSWISH: { /* torch's order: x * clamp(x + 3, 0, 6) / 6 */
      float t = x + 3.0f;
      t = t < 0.0f ? 0.0f : t;
      t = t > 6.0f ? 6.0f : t;
      return x * t / 6.0f;
    }
    default:
      return x;
  }
}

#endif /* KILN_ACTIVATION_H */
