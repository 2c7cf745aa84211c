/* SCAN: inclusive cumulative sum / product along the middle axis of a dense
 * (outer, len, inner) tensor. float32 accumulates in double, as torch's CPU
 * cumsum/cumprod (at::acc_type<float, false> is double), so long scans of
 * large values stay as accurate as eager's. Integers wrap through unsigned
 * arithmetic (no signed-overflow UB). Split over the pool by outer slices. */
#include "kernels/eltwise/kiln_movement_ops.h"

typedef struct {
  int op;
  kiln_dtype_t dtype;
  int64_t len, inner;
  const void* x;
  void* y;
} kiln_scan_job_t;

static void kiln_scan_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_scan_job_t* j = p;
  int64_t base = (int64_t)task * j->len * j->inner;
  for (int64_t c = 0; c < j->inner; ++c) {
    int64_t at = base + c;
    switch (j->dtype) {
      case KILN_F32: {
        const float* x = j->x;
        float* y = j->y;
        double acc = j->op ? 1.0 : 0.0;
        for (int64_t i = 0; i < j->len; ++i, at += j->inner) {
          acc = j->op ? acc * (double)x[at] : acc + (double)x[at];
          y[at] = (float)acc;
        }
        break;
      }
      case KILN_I64: {
        const int64_t* x = j->x;
        int64_t* y = j->y;
        uint64_t acc = j->op ? 1 : 0;
        for (int64_t i = 0; i < j->len; ++i, at += j->inner) {
          acc = j->op ? acc * (uint64_t)x[at] : acc + (uint64_t)x[at];
          y[at] = (int64_t)acc;
        }
        break;
      }
      case KILN_I32: {
        const int32_t* x = j->x;
        int32_t* y = j->y;
        uint32_t acc = j->op ? 1 : 0;
        for (int64_t i = 0; i < j->len; ++i, at += j->inner) {
          acc = j->op ? acc * (uint32_t)x[at] : acc + (uint32_t)x[at];
          y[at] = (int32_t)acc;
        }
        break;
      }
      default:
        return;
    }
  }
}

void kiln_scan(int op, kiln_dtype_t dtype, int64_t outer, int64_t len, int64_t inner,
               const void* x, void* y, kiln_pool_t* pool) {
  if (outer <= 0 || len <= 0 || inner <= 0) return;
  kiln_scan_job_t j = {op, dtype, len, inner, x, y};
  kiln_pool_parallel_for(outer > 1 && len * inner * outer > 32768 ? pool : NULL, (size_t)outer,
                         kiln_scan_task, &j);
}
