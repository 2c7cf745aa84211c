/* The CPU target for ELTWISE_FUSED: the program from the node's params (shape
 * inference validated it), each input's broadcast strides over the output. */
#include "hal/cpu/kiln_hal_cpu_fused.h"

#include <string.h>

#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_eltwise_fused.h"

kiln_status_t kiln_hal_cpu_run_fused(const kiln_graph_t* g, const kiln_node_t* n,
                                     void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  uint32_t code[KILN_FUSED_MAX_SLOTS];
  kiln_eltwise_fused_args_t a;
  memset(&a, 0, sizeof(a));
  a.n_code = (int32_t)n->params[0];
  if (a.n_code < 1 || a.n_code > KILN_FUSED_MAX_SLOTS || n->n_inputs > KILN_FUSED_MAX_INPUTS)
    return kiln_status_make(KILN_INTERNAL, "eltwise_fused: unvalidated program");
  for (int32_t k = 0; k < a.n_code; ++k) code[k] = kiln_fused_slot(n->params, k);
  a.code = code;
  a.rank = y->rank;
  memcpy(a.shape, y->shape, sizeof(int64_t) * (size_t)y->rank);
  a.n_inputs = n->n_inputs;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* x = &g->values[n->inputs[i]];
    kiln_nd_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.rank = y->rank;
    memcpy(nd.shape, y->shape, sizeof(y->shape));
    kiln_nd_set_broadcast(&nd, 1, x->rank, x->shape);
    memcpy(a.strides[i], nd.strides[1], sizeof(int64_t) * KILN_FUSED_MAX_RANK);
    a.inputs[i] = bufs[n->inputs[i]];
  }
  a.out = bufs[n->outputs[0]];
  kiln_eltwise_fused_f32(&a, pool);
  return kiln_ok();
}
