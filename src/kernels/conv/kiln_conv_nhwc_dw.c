/* The driver of the channels-last depthwise conv (kiln_conv_dw_nhwc.c's
 * per-ISA rows): the weight transposed taps-major once per call, output
 * rows shared over the pool, each row's activation and residual applied
 * by the GEMM epilogue from a per-thread row of sums (the residual may
 * alias y: the epilogue reads each element before it writes it). bf16
 * storage (args' x_bf16, y_bf16; no residual with a bf16 y): the rows
 * widen x and round y in registers (kiln_conv_dw_nhwc.c); a row finished
 * by the epilogue is rounded after it (kiln_cast_f32_to_bf16, the same
 * rule). */
#include <math.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_scratch.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_planes.h"
#include "kernels/eltwise/kiln_cast_bf16_variants.h"
#include "kernels/gemm/kiln_gemm_internal.h"

/* Rows a task takes: about this many output floats. */
#define KILN_CONV_NHWC_DW_TASK_FLOATS ((int64_t)32 << 10)

static kiln_scratch_cache_t kiln_conv_nhwc_dw_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)4 << 20);

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  const float* wt;
  float* rows; /* a row of sums per thread */
  kiln_conv_dw_nhwc_row_fn row;
  kiln_gemm_epilogue_fn epilogue;
  int64_t rows_per_task, row_floats;
} kiln_conv_nhwc_dw_ctx_t;

static void kiln_conv_nhwc_dw_task(void* p, size_t task, int thread) {
  const kiln_conv_nhwc_dw_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t all = a->n * a->ho, len = t->row_floats;
  const int64_t r0 = (int64_t)task * t->rows_per_task;
  const int64_t r1 = r0 + t->rows_per_task < all ? r0 + t->rows_per_task : all;
  /* none, relu and relu6 without a residual: clamped as stored. */
  const int plain = !a->residual && (a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU ||
                                     a->act == KILN_ACT_RELU6);
  const float clamp[2] = {plain && a->act != KILN_ACT_NONE ? 0.0f : -INFINITY,
                          plain && a->act == KILN_ACT_RELU6 ? 6.0f : INFINITY};
  for (int64_t r = r0; r < r1; ++r) {
    if (plain) { /* clamped as stored, rounded to bf16 in registers when y is bf16 */
      void* y = a->y_bf16 ? (void*)((uint16_t*)(void*)a->y + r * len) : (void*)(a->y + r * len);
      t->row(a, t->wt, r / a->ho, r % a->ho, clamp, y, a->y_bf16);
      continue;
    }
    /* The row of sums, then act(sums) + residual into y (a bf16 y, which
     * has no residual: act(sums) in place, then rounded into y). */
    float* sums = t->rows + (int64_t)thread * len;
    t->row(a, t->wt, r / a->ho, r % a->ho, clamp, sums, 0);
    if (a->y_bf16) {
      t->epilogue(1, len, sums, len, sums, len, NULL, NULL, len, a->act);
      kiln_cast_f32_to_bf16((size_t)len, sums, (uint16_t*)(void*)a->y + r * len);
      continue;
    }
    float* y = a->y + r * len;
    const float* res = a->residual ? a->residual + r * len : NULL;
    if (res && a->residual_before_act) {
      for (int64_t k = 0; k < len; ++k) sums[k] += res[k];
      res = NULL;
    }
    t->epilogue(1, len, sums, len, y, len, NULL, res, len, a->act);
  }
}

int kiln_conv2d_f32_nhwc_depthwise(const kiln_conv2d_f32_args_t* a, kiln_pool_t* pool) {
  const int64_t C = a->c, taps = a->kh * a->kw;
  if (a->groups != C || a->o != C || a->weight_packed || a->scale || taps > KILN_CONV_DW_NHWC_TAPS ||
      taps < 1 || (a->y_bf16 && a->residual))
    return 0;
  const int threads = kiln_pool_size(pool) > 0 ? kiln_pool_size(pool) : 1;
  kiln_conv_nhwc_dw_ctx_t t = {.a = a, .row_floats = a->wo * C};
  void* blk = NULL;
  float* wt = kiln_scratch_get(&kiln_conv_nhwc_dw_scratch_,
                               (size_t)(taps * C + threads * t.row_floats) * sizeof(float), &blk);
  if (!wt) return 0;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < taps; ++k) wt[k * C + c] = a->weight[c * taps + k];
  t.wt = wt;
  t.rows = wt + taps * C;
  t.row = kiln_conv_dw_nhwc_row_for(kiln_cpu_isa());
  t.epilogue = kiln_gemm_kernels_for(kiln_cpu_isa())->epilogue;
  const int64_t all = a->n * a->ho;
  t.rows_per_task = KILN_CONV_NHWC_DW_TASK_FLOATS / (t.row_floats > 0 ? t.row_floats : 1);
  if (t.rows_per_task < 1) t.rows_per_task = 1;
  /* At least 4 tasks a thread where there are rows enough, for balance. */
  if (threads > 1 && (all + t.rows_per_task - 1) / t.rows_per_task < 4 * threads)
    t.rows_per_task = (all + 4 * threads - 1) / (4 * threads);
  kiln_pool_parallel_for(pool, (size_t)((all + t.rows_per_task - 1) / t.rows_per_task),
                         kiln_conv_nhwc_dw_task, &t);
  kiln_scratch_put(&kiln_conv_nhwc_dw_scratch_, blk);
  return 1;
}
