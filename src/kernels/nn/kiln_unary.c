/* Elementwise unary math and the in-place activations, one ISA variant per
 * build of this file (see kiln_nn_internal.h).
 *
 * Each op is a plain loop over kiln_nn_math.h's branch-free functions, which
 * GCC vectorises at the width of the ISA the file is compiled for. The
 * input is processed in tiles written to a stack buffer and copied out, so
 * the loop the vectoriser sees never has a possibly-aliasing store (x and y
 * may be the same array, and GCC would otherwise fall back to scalar code
 * when its run-time overlap check fails).
 */
#include <math.h>
#include <string.h>

#include "kernels/nn/kiln_nn_internal.h"
#include "kernels/nn/kiln_nn_math.h"

enum { KILN_NN_UNARY_TILE = 256 };

#define KILN_NN_UNARY_LOOP(expr)                                   \
  for (size_t i = 0; i < n; i += KILN_NN_UNARY_TILE) {             \
    size_t m = n - i < KILN_NN_UNARY_TILE ? n - i : KILN_NN_UNARY_TILE; \
    const float* xs = x + i;                                       \
    for (size_t j = 0; j < m; ++j) {                               \
      float v = xs[j];                                             \
      tile[j] = (expr);                                            \
    }                                                              \
    memcpy(y + i, tile, m * sizeof(float));                        \
  }                                                                \
  break

void KILN_NN_FN(kiln_nn_unary)(kiln_unary_t op, size_t n, const float* x, float* y) {
  float tile[KILN_NN_UNARY_TILE];
  switch (op) {
    case KILN_UNARY_NEG: KILN_NN_UNARY_LOOP(-v);
    case KILN_UNARY_ABS: KILN_NN_UNARY_LOOP(fabsf(v));
    case KILN_UNARY_EXP: KILN_NN_UNARY_LOOP(kiln_nn_expf(v));
    case KILN_UNARY_LOG: KILN_NN_UNARY_LOOP(kiln_nn_logf(v));
    case KILN_UNARY_SQRT: KILN_NN_UNARY_LOOP(sqrtf(v));
    /* An exact divide, not the 12-bit rsqrt estimate: the op is rare and
     * memory-bound, and exact keeps it equal to the reference. */
    case KILN_UNARY_RSQRT: KILN_NN_UNARY_LOOP(1.0f / sqrtf(v));
    case KILN_UNARY_RECIPROCAL: KILN_NN_UNARY_LOOP(1.0f / v);
    case KILN_UNARY_TANH: KILN_NN_UNARY_LOOP(kiln_nn_tanhf(v));
    case KILN_UNARY_SIGMOID: KILN_NN_UNARY_LOOP(kiln_nn_sigmoidf(v));
    /* v < 0 ? 0 : v keeps NaN, as torch.relu does. */
    case KILN_UNARY_RELU: KILN_NN_UNARY_LOOP(v < 0.0f ? 0.0f : v);
    case KILN_UNARY_GELU: KILN_NN_UNARY_LOOP(kiln_nn_geluf(v));
    case KILN_UNARY_GELU_TANH: KILN_NN_UNARY_LOOP(kiln_nn_gelu_tanhf(v));
    case KILN_UNARY_SILU: KILN_NN_UNARY_LOOP(kiln_nn_siluf(v));
    case KILN_UNARY_ERF: KILN_NN_UNARY_LOOP(kiln_nn_erff(v));
    /* Rare ops: libm is accurate and these are not worth a vector version. */
    case KILN_UNARY_SIN: KILN_NN_UNARY_LOOP(sinf(v));
    case KILN_UNARY_COS: KILN_NN_UNARY_LOOP(cosf(v));
    case KILN_UNARY_COUNT: break;
  }
}

void KILN_NN_FN(kiln_nn_activation)(kiln_activation_t act, size_t n, float* x) {
  switch (act) {
    case KILN_ACT_NONE: break;
    case KILN_ACT_RELU: KILN_NN_FN(kiln_nn_unary)(KILN_UNARY_RELU, n, x, x); break;
    case KILN_ACT_GELU: KILN_NN_FN(kiln_nn_unary)(KILN_UNARY_GELU, n, x, x); break;
    case KILN_ACT_GELU_TANH: KILN_NN_FN(kiln_nn_unary)(KILN_UNARY_GELU_TANH, n, x, x); break;
    case KILN_ACT_SILU: KILN_NN_FN(kiln_nn_unary)(KILN_UNARY_SILU, n, x, x); break;
    case KILN_ACT_SIGMOID: KILN_NN_FN(kiln_nn_unary)(KILN_UNARY_SIGMOID, n, x, x); break;
    case KILN_ACT_TANH: KILN_NN_FN(kiln_nn_unary)(KILN_UNARY_TANH, n, x, x); break;
    case KILN_ACT_COUNT: break;
  }
}
