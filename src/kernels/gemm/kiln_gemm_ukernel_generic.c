/* Portable kernels: the 4x16 microkernel, the small-M GEMV and the
 * epilogue in plain C. This is what non-x86 machines run and what the tests
 * check with the SIMD levels masked off. The loops are written so that a
 * compiler vectorises the 16-wide panel rows (SSE2 on x86-64, NEON on arm64)
 * without any ISA flags. */
#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_GEMM_G_MR 4
#define KILN_GEMM_G_NR 16

void kiln_f32_gemm_ukernel_4x16__generic(int64_t kc, const float* a, const float* b,
                                         const float* b_next, const float* cin, int64_t ldcin,
                                         float* out, int64_t ldout) {
  (void)b_next;
  float acc[KILN_GEMM_G_MR][KILN_GEMM_G_NR] = {{0}};
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b + p * KILN_GEMM_G_NR;
    for (int i = 0; i < KILN_GEMM_G_MR; ++i) {
      float av = a[p * KILN_GEMM_G_MR + i];
      for (int j = 0; j < KILN_GEMM_G_NR; ++j) acc[i][j] += av * bp[j];
    }
  }
  for (int i = 0; i < KILN_GEMM_G_MR; ++i)
    for (int j = 0; j < KILN_GEMM_G_NR; ++j)
      out[i * ldout + j] = (cin ? cin[i * ldcin + j] : 0.0f) + acc[i][j];
}

static void kiln_gemm_gemv_generic_1(int64_t m, int64_t k, const float* a, int64_t lda,
                                     const float* b_panel, float* out) {
  float acc[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_G_NR] = {{0}};
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b_panel + p * KILN_GEMM_G_NR;
    for (int64_t i = 0; i < m; ++i) {
      float av = a[i * lda + p];
      for (int j = 0; j < KILN_GEMM_G_NR; ++j) acc[i][j] += av * bp[j];
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int j = 0; j < KILN_GEMM_G_NR; ++j) out[i * KILN_GEMM_G_NR + j] = acc[i][j];
}

void kiln_f32_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda, const float* b_panel,
                            int panels, float* out) {
  for (int q = 0; q < panels; ++q)
    kiln_gemm_gemv_generic_1(m, k, a, lda, b_panel + q * k * KILN_GEMM_G_NR,
                             out + q * m * KILN_GEMM_G_NR);
}

/* Element `at` of B read as `elem` says (kiln_gemm_nt_elem_t). */
static inline float kiln_gemv_nt_elem(const void* bt, int64_t at, const kiln_gemm_nt_elem_t elem) {
  if (elem == KILN_GEMM_NT_BF16) return kiln_bf16_to_f32(((const uint16_t*)bt)[at]);
  float x = ((const float*)bt)[at];
  return elem == KILN_GEMM_NT_F32_ROUNDED ? kiln_bf16_round_f32(x) : x;
}

/* Dot products over columns of B stored as contiguous rows (see
 * kiln_gemm_gemv_nt_fn): eight partial sums per dot product, so the
 * compiler can vectorise the inner loop without reassociating a sum. Each
 * element kind gets its own copy of the loop (elem a constant there). */
static inline __attribute__((always_inline)) void kiln_gemv_nt_generic(
    int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const void* bt, int64_t ldb,
    const kiln_gemm_nt_elem_t elem, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const int64_t b = j * ldb;
    for (int64_t i = 0; i < m; ++i) {
      const float* ai = a + i * lda;
      float acc[8] = {0};
      int64_t p = 0;
      for (; p + 8 <= k; p += 8)
        for (int l = 0; l < 8; ++l) acc[l] += ai[p + l] * kiln_gemv_nt_elem(bt, b + p + l, elem);
      float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; p < k; ++p) sum += ai[p] * kiln_gemv_nt_elem(bt, b + p, elem);
      out[i * KILN_GEMM_G_NR + j] = sum;
    }
  }
}

void kiln_f32_gemv_nt__generic(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                               const void* bt, int64_t ldb, kiln_gemm_nt_elem_t elem, float* out) {
#define KILN_GEMV_NT_GENERIC(e) kiln_gemv_nt_generic(m, n, k, a, lda, bt, ldb, e, out)
  KILN_GEMM_NT_BY_ELEM(elem, KILN_GEMV_NT_GENERIC)
#undef KILN_GEMV_NT_GENERIC
}

void kiln_f32_gemm_epilogue__generic(int64_t m, int64_t n, const float* src, int64_t lds,
                                     float* dst, int64_t ldd, const float* bias, const float* res,
                                     int64_t ldr, kiln_activation_t act) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float x = src[i * lds + j];
      if (bias) x += bias[j];
      x = kiln_activation_scalar(x, act);
      if (res) x += res[i * ldr + j];
      dst[i * ldd + j] = x;
    }
  }
}
