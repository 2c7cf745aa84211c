/* The CPU target for ELTWISE_FUSED: the program from the node's params (shape
 * inference validated it) and each input's broadcast strides over the
 * output, decoded once when the node is prepared. */
#include <string.h>

#include "hal/cpu/kiln_hal_cpu.h"

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)
#define OUT (bufs[n->outputs[0]])

kiln_status_t kiln_hal_cpu_prepare_eltwise_fused(const kiln_graph_t* g, const kiln_node_t* n,
                                                 void* prep) {
  kiln_hal_cpu_fused_t* f = prep;
  kiln_eltwise_fused_args_t* a = &f->args;
  const kiln_value_t* y = &g->values[n->outputs[0]];
  memset(f, 0, sizeof(*f));
  a->n_code = (int32_t)n->params[KILN_P(FUSED, N_SLOTS)];
  if (a->n_code < 1 || a->n_code > KILN_FUSED_MAX_SLOTS || n->n_inputs > KILN_FUSED_MAX_INPUTS)
    return kiln_status_make(KILN_INTERNAL, "eltwise_fused: unvalidated program");
  for (int32_t k = 0; k < a->n_code; ++k) f->code[k] = kiln_fused_slot(n->params, k);
  a->code = f->code;
  a->rank = y->rank;
  memcpy(a->shape, y->shape, sizeof(int64_t) * (size_t)y->rank);
  a->n_inputs = n->n_inputs;
  for (int32_t i = 0; i < n->n_inputs; ++i) {
    const kiln_value_t* x = &g->values[n->inputs[i]];
    kiln_nd_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.rank = y->rank;
    memcpy(nd.shape, y->shape, sizeof(y->shape));
    kiln_nd_set_broadcast(&nd, 1, x->rank, x->shape);
    memcpy(a->strides[i], nd.strides[1], sizeof(int64_t) * KILN_FUSED_MAX_RANK);
  }
  return kiln_ok();
}

kiln_status_t kiln_hal_cpu_run_eltwise_fused(const kiln_graph_t* g, const kiln_node_t* n,
                                             const void* prep, void* const* bufs,
                                             kiln_pool_t* pool) {
  (void)g;
  kiln_eltwise_fused_args_t a = ((const kiln_hal_cpu_fused_t*)prep)->args;
  for (int32_t i = 0; i < n->n_inputs; ++i) a.inputs[i] = bufs[n->inputs[i]];
  a.out = bufs[n->outputs[0]];
  kiln_eltwise_fused_f32(&a, pool);
  return kiln_ok();
}

KILN_HAL_CPU_REF_RUN(eltwise_fused) {
  (void)g, (void)pool;
  kiln_eltwise_fused_args_t a = ((const kiln_hal_cpu_fused_t*)prep)->args;
  for (int32_t i = 0; i < n->n_inputs; ++i) a.inputs[i] = bufs[n->inputs[i]];
  a.out = OUT;
  kiln_eltwise_fused_f32_reference(&a);
  return kiln_ok();
}
