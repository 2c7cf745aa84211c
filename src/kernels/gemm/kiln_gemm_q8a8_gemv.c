/* int8 x int8 for decode (M <= KILN_GEMM_GEMV_MAX_M): the GEMV of an int8
 * blob flagged a8 (KILN_GEMM_QUANT_A8, kiln.trace(weights_dtype="int8:a8")).
 * The numbers are those of the blocked q8a8 path (kiln_gemm_q8a8.c) and of
 * its scalar reference, kiln_gemm_q8a8_reference: one rule (kiln_gemm.h)
 * for prefill and decode; only how the integer sums are taken differs.
 *
 * Driver, per batch: the calling thread quantizes the M rows of A (widened
 * from bf16 or gathered from strides first) into int8 rows zero-padded to
 * K rounded up to 8, one fp32 scale per row (the q4a8 family's group
 * quantizer with one group per row: the row rule); then
 * kiln_gemm_gemv_panels_run splits the panels over the pool, the level's
 * kernel sums each 16-column panel exactly in int32 and scales it, and the
 * fp32 epilogue adds bias, activation and residual. Integer sums are exact
 * and every kernel scales them in the rule's order, so each gives the
 * reference's bits. */
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

void kiln_qd8_qc8w_gemv__generic(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                 const float* sa, const int8_t* b, const float* scales, int panels,
                                 float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int s = 0; s < panels; ++s) {
    const int8_t* bq = b + (int64_t)s * P * k;
    for (int64_t i = 0; i < m; ++i) {
      int32_t acc[KILN_GEMM_PANEL] = {0};
      for (int64_t p = 0; p < k; ++p)
        for (int c = 0; c < P; ++c) acc[c] += (int32_t)a[i * lda + p] * bq[p * P + c];
      for (int c = 0; c < P; ++c)
        out[(s * m + i) * P + c] = (float)acc[c] * sa[i] * scales[s * P + c];
    }
  }
}

typedef struct {
  kiln_gemm_q8a8_gemv_fn gemv;
  int vnni; /* the int8 engine's GEMV instead (it reads the rows' sums) */
  int64_t k, lda;
  const int8_t* aq;
  const float* sa;
  const int32_t* sums;
  const int8_t* w;
  const float* sw;
} kiln_q8a8_gemv_t;

static void kiln_q8a8_gemv_panels(const void* p, int64_t i0, int64_t m, int64_t q, int np,
                                  float* out) {
  const kiln_q8a8_gemv_t* t = p;
  const int8_t* w = t->w + q * KILN_GEMM_PANEL * t->k;
  const float* sw = t->sw + q * KILN_GEMM_PANEL;
#ifdef KILN_GEMM_HAVE_X86
  if (t->vnni) {
    kiln_qd8_qc8w_gemv__avx512vnni(m, t->k, t->aq + i0 * t->lda, t->lda, t->sa + i0,
                                   t->sums + i0, w, sw, np, out);
    return;
  }
#endif
  t->gemv(m, t->k, t->aq + i0 * t->lda, t->lda, t->sa + i0, w, sw, np, out);
}

/* The variants of the family's list (KILN_GEMM_Q8A8_ISAS); the avx2 one
 * also runs at avx512. The int8 engines (kiln_gemm_int8_engine) have their
 * own GEMVs. */
static const kiln_gemm_q8a8_gemv_fn kiln_gemm_q8a8_gemvs[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_GEMM_Q8A8_ISAS, kiln_qd8_qc8w_gemv);

static kiln_scratch_cache_t kiln_q8a8_gemv_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)16 << 20);

int kiln_gemm_q8a8_gemv(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  const int64_t M = g->m, K = g->k, np = (g->n + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL;
  /* A row padded to a multiple of 8 (at least 8): whole vectors for the
   * quantizer, and zeros under the AVX2 kernel's last partial quad of K. */
  const int64_t kpad = K < 8 ? 8 : (K + 7) & ~(int64_t)7;
  kiln_q8a8_gemv_t t;
  memset(&t, 0, sizeof(t));
  t.gemv = kiln_gemm_q8a8_gemvs[kiln_gemm_q8a8_level()];
  t.vnni = kiln_gemm_int8_engine() == KILN_GEMM_INT8_VNNI;
#ifdef KILN_GEMM_HAVE_NEON
  if (kiln_gemm_int8_engine() == KILN_GEMM_INT8_SDOT) t.gemv = kiln_qd8_qc8w_gemv__neondot;
#endif
  t.k = K, t.lda = kpad;
  const uint8_t* body = (const uint8_t*)g->b_packed_q + KILN_GEMM_QUANT_HEADER;
  t.sw = (const float*)body;
  t.w = (const int8_t*)(body + np * KILN_GEMM_PANEL * 4);
  kiln_gemm_q4a8_quantize_fn quantize = kiln_gemm_q4a8_quantizer();
  /* Scratch: one fp32 row (A widened or gathered), the int8 rows, their
   * scales and sums. */
  size_t row_bytes = ((size_t)K * sizeof(float) + 63) & ~(size_t)63;
  size_t q_bytes = ((size_t)(M * kpad) + 63) & ~(size_t)63;
  void* blk = NULL;
  char* scratch =
      kiln_scratch_get(&kiln_q8a8_gemv_scratch_, row_bytes + q_bytes + (size_t)M * 8, &blk);
  if (!scratch) return 0;
  float* row = (float*)scratch;
  int8_t* aq = (int8_t*)(scratch + row_bytes);
  float* sa = (float*)(scratch + row_bytes + q_bytes);
  int32_t* sums = (int32_t*)(sa + M);
  t.aq = aq, t.sa = sa, t.sums = sums;
  for (int64_t bt = 0; bt < g->batch; ++bt) {
    for (int64_t i = 0; i < M; ++i)
      quantize(K, 1, (int)kpad, kiln_gemm_quant_a_row(g, bt, i, row), aq + i * kpad, sa + i,
               sums + i);
    kiln_gemm_gemv_panels_run(g, M, g->c + bt * g->c_batch_stride,
                              g->residual ? g->residual + bt * g->r_batch_stride : NULL, pool,
                              kiln_q8a8_gemv_panels, &t);
  }
  kiln_scratch_put(&kiln_q8a8_gemv_scratch_, blk);
  return 1;
}
