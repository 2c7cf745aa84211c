/* A zero PAD read by a CONV2D becomes the conv's own padding.
 *
 * Hugging Face's TF-style convolutions (MobileNetV2, EfficientNet ports)
 * pad explicitly with F.pad and convolve with padding 0; each PAD was a
 * copy of the conv's input (MobileNetV2 at 224 x 224: 18 of them, 1 ms of
 * 7). When the pad is zeros on H and W only, the same on both sides, the
 * conv with that much more padding computes the same sums: the padded
 * elements were +0.0, and the conv kernels' implicit padding adds w * 0
 * over the border as well. Asymmetric pads (a stride-2 conv's "same"
 * padding: one more at the end) stay, as does a pad past the window's
 * reach. The conv's weight must be finite, so that w * 0 is 0 whichever
 * way a kernel treats its border. */
#include <string.h>

#include "compiler/kiln_rewrite.h"
#include "compiler/kiln_simplify.h"
#include "ir/kiln_sym.h"

int kiln_simplify_fold_conv_pad(const kiln_graph_t* g, const kiln_node_t* nodes, kiln_node_t* n) {
  if (n->op != KILN_OP_CONV2D || n->n_inputs < 2) return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  if (x->kind != KILN_VALUE_INTERMEDIATE || x->rank != 4) return 0;
  const kiln_node_t* pad = &nodes[x->producer];
  const kiln_value_t* src = &g->values[pad->inputs[0]];
  if (pad->op != KILN_OP_PAD || pad->params[KILN_P(PAD, MODE)] != 0 || src->dtype != KILN_F32 ||
      src->rank != 4)
    return 0;
  float fill = pad->fparams[KILN_FP(PAD, FILL)], zero = 0.0f;
  if (memcmp(&fill, &zero, sizeof zero) != 0) return 0; /* +0.0 only */
  const int64_t* before = &pad->params[KILN_P(PAD, BEFORE)];
  const int64_t* after = &pad->params[KILN_P(PAD, AFTER)];
  if (before[0] || after[0] || before[1] || after[1]) return 0;
  int64_t* p = n->params;
  const kiln_value_t* w = &g->values[n->inputs[1]];
  for (int d = 0; d < 2; ++d) {
    int64_t add = before[2 + d], k = w->shape[2 + d];
    int64_t have = p[d ? KILN_P(CONV2D, PAD_W) : KILN_P(CONV2D, PAD_H)];
    int64_t dil = p[d ? KILN_P(CONV2D, DILATION_W) : KILN_P(CONV2D, DILATION_H)];
    if (kiln_dim_is_sym(add) || add != after[2 + d] || add < 0 || have < 0 || dil < 1 ||
        k < 1 || have + add > dil * (k - 1))
      return 0;
  }
  if (!kiln_value_is_finite_constant(w)) return 0;
  p[KILN_P(CONV2D, PAD_H)] += before[2];
  p[KILN_P(CONV2D, PAD_W)] += before[3];
  n->inputs[0] = pad->inputs[0];
  return 1;
}
