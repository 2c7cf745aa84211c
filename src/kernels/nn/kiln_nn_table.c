/* The kernel table of one ISA variant (this file is compiled once per ISA,
 * like the kernels it lists; kiln_nn.c picks a table at run time). */
#include "kernels/nn/kiln_nn_internal.h"

const kiln_nn_kernels_t KILN_ISA_VARIANT(kiln_nn_kernels) = {
    .unary = KILN_ISA_VARIANT(kiln_nn_unary),
    .activation = KILN_ISA_VARIANT(kiln_nn_activation),
    .gelu_backward = KILN_ISA_VARIANT(kiln_nn_gelu_backward),
    .softmax_rows = KILN_ISA_VARIANT(kiln_nn_softmax_rows),
    .layer_norm_rows = KILN_ISA_VARIANT(kiln_nn_layer_norm_rows),
    .rms_norm_rows = KILN_ISA_VARIANT(kiln_nn_rms_norm_rows),
    .layer_norm_backward_rows = KILN_ISA_VARIANT(kiln_nn_layer_norm_backward_rows),
    .attention_plan = KILN_ISA_VARIANT(kiln_nn_attention_plan),
    .attention_task = KILN_ISA_VARIANT(kiln_nn_attention_task),
};
