/* Activation functions a kernel can apply in its epilogue. Shared by the
 * GEMM epilogue, the unary kernels and the IR (LINEAR's activation param). */
#ifndef KILN_ACTIVATION_H
#define KILN_ACTIVATION_H

typedef enum kiln_activation_e {
  KILN_ACT_NONE = 0,
  KILN_ACT_RELU,
  KILN_ACT_GELU,      /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
  KILN_ACT_GELU_TANH, /* tanh approximation, as torch's approximate="tanh" */
  KILN_ACT_SILU,
  KILN_ACT_SIGMOID,
  KILN_ACT_TANH,
  KILN_ACT_COUNT
} kiln_activation_t;

#endif /* KILN_ACTIVATION_H */
