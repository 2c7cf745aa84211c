/* Geometry of PAD, STRIDED_SCATTER, SCATTER, SCAN and ARGSORT for their
 * kernels (kernels/eltwise/kiln_movement_ops.h). Shapes and params were
 * validated by kiln_shape_infer_movement.c when the node was added. */
#include <string.h>

#include "hal/cpu/kiln_hal_cpu.h"

#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_movement_ops.h"

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)
#define OUT (bufs[n->outputs[0]])

#define MV_VAL(i) (&g->values[n->inputs[i]])
#define MV_BUF(i) (bufs[n->inputs[i]])

/* PAD's fill as x's dtype: the float FILL for floats, the int64 one otherwise. */
void kiln_hal_cpu_pad_fill(const kiln_node_t* n, kiln_dtype_t dtype, unsigned char fill[8]) {
  memset(fill, 0, 8);
  int64_t v = n->params[KILN_P(PAD, INT_FILL)];
  float f = n->fparams[KILN_FP(PAD, FILL)];
  switch (dtype) {
    case KILN_F32: memcpy(fill, &f, 4); break;
    case KILN_F16:
    case KILN_BF16: kiln_cast(KILN_F32, dtype, 1, &f, fill); break;
    case KILN_I64: memcpy(fill, &v, 8); break;
    case KILN_I32: { int32_t t = (int32_t)v; memcpy(fill, &t, 4); break; }
    case KILN_BOOL: fill[0] = v != 0; break;
    default: fill[0] = (unsigned char)v; break; /* int8, uint8: two's complement */
  }
}

#define MV_RUN(e)                                                                       \
  kiln_status_t kiln_hal_cpu_run_##e(const kiln_graph_t* g, const kiln_node_t* n,          \
                                     const void* prep, void* const* bufs, kiln_pool_t* pool)

MV_RUN(pad) {
  (void)prep;
  const kiln_value_t *x = MV_VAL(0), *y = &g->values[n->outputs[0]];
  unsigned char fill[8];
  kiln_hal_cpu_pad_fill(n, x->dtype, fill);
  _Static_assert(KILN_P(PAD, AFTER) == KILN_P(PAD, BEFORE) + 8, "kiln_pad reads before then after");
  kiln_pad((kiln_pad_mode_t)n->params[KILN_P(PAD, MODE)], kiln_dtype_size(x->dtype), x->rank,
           x->shape, y->shape, n->params + KILN_P(PAD, BEFORE), fill, MV_BUF(0),
           bufs[n->outputs[0]], pool);
  return kiln_ok();
}

MV_RUN(strided_scatter) {
  (void)prep, (void)pool;
  const kiln_value_t* y = &g->values[n->outputs[0]];
  const int64_t* p = n->params;
  kiln_strided_scatter(kiln_dtype_size(y->dtype), kiln_value_numel(y), MV_BUF(0),
                       (int32_t)p[KILN_P(VIEW, RANK)], p + KILN_P(VIEW, DIMS),
                       p + KILN_P(VIEW, STRIDES), p[KILN_P(VIEW, OFFSET)], MV_BUF(1),
                       bufs[n->outputs[0]]);
  return kiln_ok();
}

MV_RUN(scatter) {
  (void)prep, (void)pool;
  const kiln_value_t *x = MV_VAL(0), *idx = MV_VAL(1), *src = MV_VAL(2);
  const int64_t* p = n->params;
  const int32_t axis = (int32_t)p[KILN_P(SCATTER, AXIS)];
  int64_t bad = 0;
  KILN_RETURN_IF_ERROR(kiln_scatter((kiln_scatter_reduce_t)p[KILN_P(SCATTER, REDUCE)],
                                    (int)p[KILN_P(SCATTER, INCLUDE_SELF)],
                                    (int)p[KILN_P(SCATTER, WRAP_NEGATIVE)], x->dtype, x->rank,
                                    x->shape, axis, MV_BUF(0), idx->shape, idx->dtype, MV_BUF(1),
                                    src->shape, MV_BUF(2), bufs[n->outputs[0]], &bad));
  if (bad)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "%s: %lld indices are out of range for a dimension of size %lld",
                            n->origin ? n->origin : "scatter", (long long)bad,
                            (long long)x->shape[axis]);
  return kiln_ok();
}

MV_RUN(scan) {
  (void)prep;
  const kiln_value_t* x = MV_VAL(0);
  int64_t outer, len, inner;
  kiln_hal_cpu_axis_split(x, (int32_t)n->params[KILN_P(SCAN, AXIS)], &outer, &len, &inner);
  kiln_scan((int)n->params[KILN_P(SCAN, KIND)], x->dtype, outer, len, inner, MV_BUF(0),
            bufs[n->outputs[0]], pool);
  return kiln_ok();
}

MV_RUN(argsort) {
  (void)prep;
  const kiln_value_t* x = MV_VAL(0);
  int64_t outer, len, inner;
  kiln_hal_cpu_axis_split(x, (int32_t)n->params[KILN_P(ARGSORT, AXIS)], &outer, &len, &inner);
  return kiln_argsort(x->dtype, outer, len, inner, (int)n->params[KILN_P(ARGSORT, DESCENDING)],
                      n->params[KILN_P(ARGSORT, K)], MV_BUF(0), bufs[n->outputs[0]], pool);
}

KILN_HAL_CPU_REF_RUN(pad) {
  (void)prep, (void)pool;
  const kiln_value_t *x = VAL(0), *y = &g->values[n->outputs[0]];
  unsigned char fill[8];
  kiln_hal_cpu_pad_fill(n, x->dtype, fill);
  kiln_pad_reference((kiln_pad_mode_t)n->params[KILN_P(PAD, MODE)], kiln_dtype_size(x->dtype),
                     x->rank, x->shape, y->shape, n->params + KILN_P(PAD, BEFORE), fill, BUF(0),
                     OUT);
  return kiln_ok();
}
