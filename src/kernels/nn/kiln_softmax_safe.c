/* Safe softmax's masked-row fix-up. The softmax kernels give NaN for a row
 * that is all -inf (-inf - -inf), as torch's softmax does; _safe_softmax
 * gives zeros there. Rather than a flag threaded through every ISA variant
 * of the row kernel, a fully masked row is found afterwards from x: such a
 * row starts with -inf, which unmasked rows almost never do, so the check
 * costs one load per row and a scan only of rows that start masked. Plain
 * C: there is no inner loop worth vectorising (a scan stops at the first
 * element that is not -inf). */
#include "kernels/nn/kiln_softmax_safe.h"

#include <math.h>
#include <string.h>

void kiln_softmax_zero_masked_f32(size_t outer, size_t len, size_t inner, const float* x,
                                  float* y) {
  for (size_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < inner; ++i) {
      const float* xl = x + o * len * inner + i;
      float* yl = y + o * len * inner + i;
      if (len == 0 || !(isinf(xl[0]) && xl[0] < 0)) continue;
      size_t k = 1;
      while (k < len && isinf(xl[k * inner]) && xl[k * inner] < 0) ++k;
      if (k < len) continue;
      if (inner == 1) {
        memset(yl, 0, len * sizeof(float));
      } else {
        for (k = 0; k < len; ++k) yl[k * inner] = 0.0f;
      }
    }
  }
}
