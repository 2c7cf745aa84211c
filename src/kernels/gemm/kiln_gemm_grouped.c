/* Grouped GEMM over row segments (kiln_gemm_grouped.h): the segment walk
 * of transformers' grouped_mm_fallback, each segment one GEMM. */
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_grouped.h"

/* Python's clamp of a slice bound to [0, s]. */
static int64_t kiln_gemm_grouped_bound(int64_t v, int64_t s) {
  if (v < 0) v += s;
  return v < 0 ? 0 : v > s ? s : v;
}

static void kiln_gemm_grouped_walk(const kiln_gemm_grouped_f32_args_t* a, int reference,
                                   kiln_pool_t* pool) {
  memset(a->y, 0, (size_t)(a->s * a->n) * sizeof(float));
  int64_t start = 0;
  for (int64_t e = 0; e < a->experts; ++e) {
    int64_t end = a->offs_i64 ? ((const int64_t*)a->offs)[e] : ((const int32_t*)a->offs)[e];
    if (end == start) continue;
    int64_t lo = kiln_gemm_grouped_bound(start, a->s), hi = kiln_gemm_grouped_bound(end, a->s);
    start = end;
    if (hi <= lo) continue;
    kiln_gemm_f32_args_t g;
    memset(&g, 0, sizeof g);
    g.batch = 1, g.m = hi - lo, g.n = a->n, g.k = a->k;
    g.a = a->x + lo * a->k, g.a_row_stride = a->k, g.a_col_stride = 1;
    g.b = a->w + e * a->k * a->n;
    /* B[p][j]: w[e][p][j], or w[e][j][p] stored transposed. */
    g.b_row_stride = a->w_transposed ? 1 : a->n;
    g.b_col_stride = a->w_transposed ? a->k : 1;
    g.c = a->y + lo * a->n, g.c_row_stride = a->n;
    g.act = KILN_ACT_NONE;
    if (reference)
      kiln_gemm_f32_reference(&g);
    else
      kiln_gemm_f32(&g, pool);
  }
}

void kiln_gemm_grouped_f32(const kiln_gemm_grouped_f32_args_t* args, kiln_pool_t* pool) {
  kiln_gemm_grouped_walk(args, 0, pool);
}

void kiln_gemm_grouped_f32_reference(const kiln_gemm_grouped_f32_args_t* args) {
  kiln_gemm_grouped_walk(args, 1, NULL);
}
