/* Geometry of GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG for their kernels
 * (kernels/nn/kiln_sample.h). Shapes and params were validated by
 * kiln_shape_infer_sample.c when the node was added. */
#include "hal/cpu/kiln_hal_cpu_sample.h"

#include "kernels/nn/kiln_sample.h"

#define SP_VAL(i) (&g->values[n->inputs[i]])
#define SP_BUF(i) (n->n_inputs > (i) && n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)

kiln_status_t kiln_hal_cpu_run_sample(const kiln_graph_t* g, const kiln_node_t* n,
                                      void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  void* out = bufs[n->outputs[0]];
  const int64_t* p = n->params;
  switch (n->op) {
    case KILN_OP_GRID_SAMPLER_2D: {
      const kiln_value_t* x = SP_VAL(0);
      kiln_grid_sample_2d_f32((kiln_grid_mode_t)p[0], (kiln_grid_padding_t)p[1], (int)p[2],
                              x->shape[0], x->shape[1], x->shape[2], x->shape[3], y->shape[2],
                              y->shape[3], SP_BUF(0), SP_BUF(1), out, pool);
      return kiln_ok();
    }
    case KILN_OP_COL2IM: {
      const kiln_value_t* x = SP_VAL(0);
      kiln_col2im_args_t a = {y->shape[0], y->shape[1], p[0], p[1], p[2], p[3], p[4], p[5],
                              p[6], p[7], p[8], p[9], 0, 0};
      a.lh = (p[0] + 2 * p[6] - p[4] * (p[2] - 1) - 1) / p[8] + 1;
      a.lw = x->shape[2] / a.lh;
      kiln_col2im_f32(&a, SP_BUF(0), out, pool);
      return kiln_ok();
    }
    case KILN_OP_EMBEDDING_BAG: {
      const kiln_value_t *w = SP_VAL(0), *idx = SP_VAL(1), *off = SP_VAL(2);
      return kiln_embedding_bag_f32((int)p[0], (int)p[1], p[2], w->shape[0], w->shape[1],
                                    SP_BUF(0), idx->dtype, idx->shape[0], SP_BUF(1), off->dtype,
                                    off->shape[0], SP_BUF(2), SP_BUF(3), out);
    }
    default:
      return kiln_status_make(KILN_INTERNAL, "no sampling kernel for %s", kiln_op_name(n->op));
  }
}
