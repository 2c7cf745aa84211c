/* The quantized-weights GEMM problem of kiln_test_qgemm.h. */
#include "kiln_test_qgemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln_test.h"

static void* qgemm_alloc(size_t bytes) { return aligned_alloc(64, (bytes + 64) & ~(size_t)63); }

void kiln_test_qgemm_init(kiln_test_qgemm_t* t, int64_t batch, int64_t m, int64_t n, int64_t k,
                          int a_strided, int a16, int nan_row, size_t outlier_step, unsigned seed,
                          size_t blob_bytes) {
  memset(t, 0, sizeof(*t));
  t->batch = batch, t->m = m, t->n = n, t->k = k;
  t->acs = a_strided ? 2 : 1;
  t->lda = k * t->acs + 3, t->ldc = n + 2, t->ldr = n + 5;
  t->na = (size_t)(batch * m * t->lda) + 1, t->nb = (size_t)(k * n) + 1;
  t->nc = (size_t)(batch * m * t->ldc) + 1, t->nr = (size_t)(batch * m * t->ldr) + 1;
  t->a = qgemm_alloc(t->na * 4);
  t->w = qgemm_alloc(t->nb * 4);
  t->bias = qgemm_alloc((size_t)n * 4 + 4);
  t->res = qgemm_alloc(t->nr * 4);
  t->c_got = qgemm_alloc(t->nc * 4);
  t->c_want = qgemm_alloc(t->nc * 4);
  t->a16 = a16 ? qgemm_alloc(t->na * 2) : NULL;
  t->blob = qgemm_alloc(blob_bytes);
  kiln_test_fill_f32(t->a, t->na, seed, -2.0f, 2.0f);
  if (outlier_step)
    for (size_t e = 0; e < t->na; e += outlier_step) t->a[e] *= 8.0f;
  kiln_test_fill_f32(t->w, t->nb, seed + 1, -0.5f, 0.5f);
  kiln_test_fill_f32(t->bias, (size_t)n + 1, seed + 2, -1.0f, 1.0f);
  kiln_test_fill_f32(t->res, t->nr, seed + 3, -1.0f, 1.0f);
  kiln_test_fill_f32(t->c_got, t->nc, seed + 4, -1.0f, 1.0f);
  if (nan_row) t->a[(m / 2) * t->lda + (k - 1) * t->acs] = nan_row == 2 ? -INFINITY : NAN;
  if (t->a16)
    for (size_t i = 0; i < t->na; ++i) {
      t->a16[i] = kiln_gemm_bf16_from_f32(t->a[i]);
      t->a[i] = kiln_gemm_bf16_to_f32(t->a16[i]);
    }
  memcpy(t->c_want, t->c_got, t->nc * 4);
}

void kiln_test_qgemm_args(const kiln_test_qgemm_t* t, int bias, int residual, int res_alias,
                          kiln_activation_t act, kiln_gemm_f32_args_t* g, kiln_gemm_f32_args_t* ref) {
  const int64_t M = t->m;
  memset(g, 0, sizeof(*g));
  g->batch = t->batch, g->m = M, g->n = t->n, g->k = t->k;
  g->a = t->a16 ? NULL : t->a;
  g->a_bf16 = t->a16;
  g->a_batch_stride = M * t->lda, g->a_row_stride = t->lda, g->a_col_stride = t->acs;
  g->b_packed_q = t->blob;
  g->c = t->c_got, g->c_batch_stride = M * t->ldc, g->c_row_stride = t->ldc;
  g->bias = bias ? t->bias : NULL;
  g->act = act;
  if (res_alias) {
    g->residual = t->c_got, g->r_batch_stride = M * t->ldc, g->r_row_stride = t->ldc;
  } else if (residual) {
    g->residual = t->res, g->r_batch_stride = M * t->ldr, g->r_row_stride = t->ldr;
  }
  *ref = *g;
  ref->c = t->c_want;
  if (res_alias) ref->residual = t->c_want;
}

void kiln_test_qgemm_free(kiln_test_qgemm_t* t) {
  free(t->a), free(t->w), free(t->bias), free(t->res), free(t->c_got), free(t->c_want);
  free(t->a16), free(t->blob);
  memset(t, 0, sizeof(*t));
}
