/* Geometry of PAD, STRIDED_SCATTER, SCATTER, SCAN and ARGSORT for their
 * kernels (kernels/eltwise/kiln_movement_ops.h). Shapes and params were
 * validated by kiln_shape_infer_movement.c when the node was added. */
#include "hal/cpu/kiln_hal_cpu_movement.h"

#include <string.h>

#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/eltwise/kiln_movement_ops.h"

#define MV_VAL(i) (&g->values[n->inputs[i]])
#define MV_BUF(i) (bufs[n->inputs[i]])

static int64_t mv_prod(const int64_t* shape, int32_t from, int32_t to) {
  int64_t p = 1;
  for (int32_t d = from; d < to; ++d) p *= shape[d];
  return p;
}

/* PAD's fill as x's dtype: fparams[0] for floats, params[17] otherwise. */
static void mv_pad_fill(const kiln_node_t* n, kiln_dtype_t dtype, unsigned char fill[8]) {
  memset(fill, 0, 8);
  int64_t v = n->params[17];
  float f = n->fparams[0];
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

kiln_status_t kiln_hal_cpu_run_movement(const kiln_graph_t* g, const kiln_node_t* n,
                                        void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t *x = MV_VAL(0), *y = &g->values[n->outputs[0]];
  void* out = bufs[n->outputs[0]];
  const int64_t* p = n->params;
  switch (n->op) {
    case KILN_OP_PAD: {
      unsigned char fill[8];
      mv_pad_fill(n, x->dtype, fill);
      kiln_pad((kiln_pad_mode_t)p[0], kiln_dtype_size(x->dtype), x->rank, x->shape, y->shape,
               p + 1, fill, MV_BUF(0), out, pool);
      return kiln_ok();
    }
    case KILN_OP_STRIDED_SCATTER:
      kiln_strided_scatter(kiln_dtype_size(y->dtype), kiln_value_numel(y), MV_BUF(0),
                           (int32_t)p[0], p + 1, p + 9, p[17], MV_BUF(1), out);
      return kiln_ok();
    case KILN_OP_SCATTER: {
      const kiln_value_t *idx = MV_VAL(1), *src = MV_VAL(2);
      int64_t bad = 0;
      KILN_RETURN_IF_ERROR(kiln_scatter((kiln_scatter_reduce_t)p[1], (int)p[2], (int)p[3], x->dtype, x->rank,
                                        x->shape, (int32_t)p[0], MV_BUF(0), idx->shape,
                                        idx->dtype, MV_BUF(1), src->shape, MV_BUF(2), out,
                                        &bad));
      if (bad)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "%s: %lld indices are out of range for a dimension of size %lld",
                                n->origin ? n->origin : "scatter", (long long)bad,
                                (long long)x->shape[p[0]]);
      return kiln_ok();
    }
    case KILN_OP_SCAN:
    case KILN_OP_ARGSORT: {
      int32_t axis = (int32_t)p[0];
      int64_t outer = x->rank ? mv_prod(x->shape, 0, axis) : 1;
      int64_t len = x->rank ? x->shape[axis] : 1;
      int64_t inner = x->rank ? mv_prod(x->shape, axis + 1, x->rank) : 1;
      if (n->op == KILN_OP_SCAN) {
        kiln_scan((int)p[1], x->dtype, outer, len, inner, MV_BUF(0), out, pool);
        return kiln_ok();
      }
      return kiln_argsort(x->dtype, outer, len, inner, (int)p[1], p[2], MV_BUF(0), out, pool);
    }
    default:
      return kiln_status_make(KILN_INTERNAL, "no movement kernel for %s", kiln_op_name(n->op));
  }
}
