/* Safe softmax (aten._safe_softmax, the softmax of attention's math path):
 * a softmax row whose inputs are all -inf is all zeros instead of NaN. */
#ifndef KILN_KERNELS_NN_KILN_SOFTMAX_SAFE_H_
#define KILN_KERNELS_NN_KILN_SOFTMAX_SAFE_H_

#include <stddef.h>

/* x and y are (outer, len, inner), the softmax taken along len; y already
 * holds softmax(x). Zeroes y along every line of len elements whose x is all
 * -inf (a fully masked attention row). Lines whose first element is not -inf
 * are left alone after reading that one element, so the cost for unmasked
 * data is one load per line. */
void kiln_softmax_zero_masked_f32(size_t outer, size_t len, size_t inner, const float* x,
                                  float* y);

#endif /* KILN_KERNELS_NN_KILN_SOFTMAX_SAFE_H_ */
