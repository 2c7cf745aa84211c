/* Geometry of GRID_SAMPLER_2D, COL2IM and EMBEDDING_BAG for their kernels
 * (kernels/nn/kiln_sample.h). Shapes and params were validated by
 * kiln_shape_infer_sample.c when the node was added. */
#include "hal/cpu/kiln_hal_cpu.h"
#include "kernels/nn/kiln_sample.h"

#define SP_VAL(i) (&g->values[n->inputs[i]])
#define SP_BUF(i) (n->n_inputs > (i) && n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)

#define SP_RUN(e)                                                                       \
  kiln_status_t kiln_hal_cpu_run_##e(const kiln_graph_t* g, const kiln_node_t* n,          \
                                     const void* prep, void* const* bufs, kiln_pool_t* pool)

SP_RUN(grid_sampler) {
  (void)prep;
  const kiln_value_t *x = SP_VAL(0), *y = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  kiln_grid_sample_2d_f32((kiln_grid_mode_t)p[KILN_P(GRID_SAMPLER, MODE)],
                          (kiln_grid_padding_t)p[KILN_P(GRID_SAMPLER, PADDING)],
                          (int)p[KILN_P(GRID_SAMPLER, ALIGN_CORNERS)], x->shape[0], x->shape[1],
                          x->shape[2], x->shape[3], y->shape[2], y->shape[3], SP_BUF(0),
                          SP_BUF(1), bufs[n->outputs[0]], pool);
  return kiln_ok();
}

SP_RUN(col2im) {
  (void)prep;
  const kiln_value_t *x = SP_VAL(0), *y = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  kiln_col2im_args_t a = {y->shape[0], y->shape[1], p[KILN_P(COL2IM, H)], p[KILN_P(COL2IM, W)],
                          p[KILN_P(COL2IM, KERNEL_H)], p[KILN_P(COL2IM, KERNEL_W)],
                          p[KILN_P(COL2IM, DILATION_H)], p[KILN_P(COL2IM, DILATION_W)],
                          p[KILN_P(COL2IM, PAD_H)], p[KILN_P(COL2IM, PAD_W)],
                          p[KILN_P(COL2IM, STRIDE_H)], p[KILN_P(COL2IM, STRIDE_W)], 0, 0};
  a.lh = (a.h + 2 * a.ph - a.dh * (a.kh - 1) - 1) / a.sh + 1;
  a.lw = x->shape[2] / a.lh;
  kiln_col2im_f32(&a, SP_BUF(0), bufs[n->outputs[0]], pool);
  return kiln_ok();
}

SP_RUN(embedding_bag) {
  (void)prep, (void)pool;
  const kiln_value_t *w = SP_VAL(0), *idx = SP_VAL(1), *off = SP_VAL(2);
  const int64_t* p = n->params;
  return kiln_embedding_bag_f32((int)p[KILN_P(EMBEDDING_BAG, MODE)],
                                (int)p[KILN_P(EMBEDDING_BAG, INCLUDE_LAST_OFFSET)],
                                p[KILN_P(EMBEDDING_BAG, PADDING_IDX)], w->shape[0], w->shape[1],
                                SP_BUF(0), idx->dtype, idx->shape[0], SP_BUF(1), off->dtype,
                                off->shape[0], SP_BUF(2), SP_BUF(3), bufs[n->outputs[0]]);
}
