/* Elementwise unary math and the in-place activations, one ISA variant per
 * build of this file (see kiln_nn_internal.h).
 *
 * Each op is kiln_nn_math.h's loop (KILN_NN_UNARY_LOOP) over one of
 * its branch-free functions, which GCC vectorises at the width of the ISA
 * the file is compiled for.
 */
#include <math.h>
#include <string.h>

#include "kernels/nn/kiln_nn_internal.h"
#include "kernels/nn/kiln_nn_math.h"

/* One case: the loop of kiln_nn_math.h over this function's x and y. */
#define KILN_NN_UNARY_CASE(expr) KILN_NN_UNARY_LOOP(n, x, y, expr)

void KILN_ISA_VARIANT(kiln_nn_unary)(kiln_unary_t op, size_t n, const float* x, float* y) {
  switch (op) {
    case KILN_UNARY_NEG: KILN_NN_UNARY_CASE(-v);
    case KILN_UNARY_ABS: KILN_NN_UNARY_CASE(fabsf(v));
    case KILN_UNARY_EXP: KILN_NN_UNARY_CASE(kiln_nn_expf(v));
    case KILN_UNARY_LOG: KILN_NN_UNARY_CASE(kiln_nn_logf(v));
    case KILN_UNARY_SQRT: KILN_NN_UNARY_CASE(sqrtf(v));
    /* An exact divide, not the 12-bit rsqrt estimate: the op is rare and
     * memory-bound, and exact keeps it equal to the reference. */
    case KILN_UNARY_RSQRT: KILN_NN_UNARY_CASE(1.0f / sqrtf(v));
    case KILN_UNARY_RECIPROCAL: KILN_NN_UNARY_CASE(1.0f / v);
    case KILN_UNARY_TANH: KILN_NN_UNARY_CASE(kiln_nn_tanhf(v));
    case KILN_UNARY_SIGMOID: KILN_NN_UNARY_CASE(kiln_nn_sigmoidf(v));
    /* v < 0 ? 0 : v keeps NaN, as torch.relu does. */
    case KILN_UNARY_RELU: KILN_NN_UNARY_CASE(v < 0.0f ? 0.0f : v);
    case KILN_UNARY_GELU: KILN_NN_UNARY_CASE(kiln_nn_geluf(v));
    case KILN_UNARY_GELU_TANH: KILN_NN_UNARY_CASE(kiln_nn_gelu_tanhf(v));
    case KILN_UNARY_SILU: KILN_NN_UNARY_CASE(kiln_nn_siluf(v));
    case KILN_UNARY_ERF: KILN_NN_UNARY_CASE(kiln_nn_erff(v));
    /* Rare ops: libm is accurate and these are not worth a vector version. */
    case KILN_UNARY_SIN: KILN_NN_UNARY_CASE(sinf(v));
    case KILN_UNARY_COS: KILN_NN_UNARY_CASE(cosf(v));
    case KILN_UNARY_COUNT: break;
  }
}

/* As the unary loop, over two inputs: each tile is computed into the stack
 * buffer before it is stored, so dx may alias dy or x. */
void KILN_ISA_VARIANT(kiln_nn_gelu_backward)(int tanh_form, size_t n, const float* dy,
                                             const float* x, float* dx) {
  float tile[KILN_NN_UNARY_TILE];
  for (size_t i = 0; i < n; i += KILN_NN_UNARY_TILE) {
    size_t m = n - i < KILN_NN_UNARY_TILE ? n - i : KILN_NN_UNARY_TILE;
    const float *g = dy + i, *v = x + i;
    if (tanh_form)
      for (size_t j = 0; j < m; ++j) tile[j] = g[j] * kiln_nn_gelu_tanh_gradf(v[j]);
    else
      for (size_t j = 0; j < m; ++j) tile[j] = g[j] * kiln_nn_gelu_gradf(v[j]);
    memcpy(dx + i, tile, m * sizeof(float));
  }
}

void KILN_ISA_VARIANT(kiln_nn_activation)(kiln_activation_t act, size_t n, float* x) {
  switch (act) {
    case KILN_ACT_NONE: break;
    case KILN_ACT_RELU: KILN_ISA_VARIANT(kiln_nn_unary)(KILN_UNARY_RELU, n, x, x); break;
    case KILN_ACT_GELU: KILN_ISA_VARIANT(kiln_nn_unary)(KILN_UNARY_GELU, n, x, x); break;
    case KILN_ACT_GELU_TANH: KILN_ISA_VARIANT(kiln_nn_unary)(KILN_UNARY_GELU_TANH, n, x, x); break;
    case KILN_ACT_SILU: KILN_ISA_VARIANT(kiln_nn_unary)(KILN_UNARY_SILU, n, x, x); break;
    case KILN_ACT_SIGMOID: KILN_ISA_VARIANT(kiln_nn_unary)(KILN_UNARY_SIGMOID, n, x, x); break;
    case KILN_ACT_TANH: KILN_ISA_VARIANT(kiln_nn_unary)(KILN_UNARY_TANH, n, x, x); break;
    case KILN_ACT_RELU6:
      for (size_t i = 0; i < n; ++i) x[i] = kiln_activation_scalar(x[i], KILN_ACT_RELU6);
      break;
    case KILN_ACT_HARDSWISH:
      for (size_t i = 0; i < n; ++i) x[i] = kiln_activation_scalar(x[i], KILN_ACT_HARDSWISH);
      break;
    case KILN_ACT_COUNT: break;
  }
}
