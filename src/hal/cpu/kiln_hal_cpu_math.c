/* The CPU target for the ops of kernels/math: ACOS..SIGN and
 * ATAN2..DIV_FLOOR. Geometry as kiln_hal_cpu.c's binary ops: the output's
 * shape with each input's broadcast strides. */
#include "hal/cpu/kiln_hal_cpu_math.h"

#include <string.h>

#include "kernels/math/kiln_math.h"

kiln_status_t kiln_hal_cpu_run_math(const kiln_graph_t* g, const kiln_node_t* n,
                                    void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  const kiln_value_t* x = &g->values[n->inputs[0]];
  void* out = bufs[n->outputs[0]];
  const void* xb = bufs[n->inputs[0]];
  if (KILN_OP_IS_UNARY_EXT(n->op)) {
    size_t numel = (size_t)kiln_value_numel(y);
    if (y->dtype == KILN_F32)
      kiln_math_unary_f32((kiln_math_unary_t)(n->op - KILN_OP_ACOS), numel, xb, out, pool);
    else
      kiln_math_sign_int(y->dtype, numel, xb, out); /* only sign takes integers */
    return kiln_ok();
  }
  const kiln_value_t* b = &g->values[n->inputs[1]];
  kiln_nd_t nd;
  memset(&nd, 0, sizeof(nd));
  nd.rank = y->rank;
  memcpy(nd.shape, y->shape, sizeof(y->shape));
  kiln_nd_set_dense_output(&nd);
  kiln_nd_set_broadcast(&nd, 1, x->rank, x->shape);
  kiln_nd_set_broadcast(&nd, 2, b->rank, b->shape);
  int64_t zeros = kiln_math_binary((kiln_math_binary_t)(n->op - KILN_OP_ATAN2), y->dtype, &nd,
                                   out, xb, bufs[n->inputs[1]], pool);
  if (zeros)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "ZeroDivisionError: %s: integer division by zero (%lld elements)",
                            n->origin ? n->origin : kiln_op_name(n->op), (long long)zeros);
  return kiln_ok();
}
