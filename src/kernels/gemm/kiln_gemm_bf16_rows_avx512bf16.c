/* A bf16 model's linear layer with its weight read where torch keeps it
 * (kiln_gemm_f32_args_t.b_bf16 with b_bf16_weight: the (N, K) rows of
 * bf16), on VDPBF16PS, A's rows bf16 (a bf16 model's x, exactly as given):
 * out = A W^T with no packing at all, since the rows of both operands hold
 * K's pairs side by side already. The scalar reference is the portable
 * GEMV over B's columns (kiln_f32_gemv_nt__generic, bf16 kind) and
 * kiln_gemm_f32_reference: the same exact products, summed in another
 * order, with VDPBF16PS's denormals flushed. The driver
 * (kiln_gemm_bf16_rows, kiln_gemm_bf16_compute.c) picks:
 *
 * - few rows of A (decode): one row of W at a time against up to 8 rows of
 *   A, so that W (rows end to end) streams from memory as one sequential
 *   read (see kiln_gemm_ukernel_avx2.c's GEMV over B's columns for why):
 *   per 64 elements two zmm loads of W (a cache line each) and per row of
 *   A two VDPBF16PS into two accumulators, 8 chains at 4 rows; more rows
 *   of A read the W row again from L1;
 * - many rows (a prompt): tiles of 4 rows of A x 4 rows of W (below).
 *
 * The last K % 32 elements go through masked loads (zeros in both
 * operands: nothing added). Compiled only with the AVX512_BF16 flags
 * (meson: isa_avx512bf16_args) and called only when kiln_cpu_bf16() has
 * KILN_CPU_BF16_AVX512. */
#include <immintrin.h>

#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_ROWS_AI static inline __attribute__((always_inline))

/* 32 bf16 from h (the first `live` of them, the rest zero). */
KILN_ROWS_AI __m512bh kiln_rows_load(const uint16_t* h, int64_t live) {
  __m512i v = live >= 32 ? _mm512_loadu_si512((const void*)h)
                         : _mm512_maskz_loadu_epi16((__mmask32)((1ull << live) - 1), h);
  return (__m512bh)v;
}

/* out[i * 16] = A row i . W row w, for i < R. */
KILN_ROWS_AI void kiln_rows_tile(const int R, int64_t k, const uint16_t* a, int64_t lda,
                                 const uint16_t* w, float* out) {
  __m512 acc[2][4];
  for (int u = 0; u < 2; ++u)
    for (int i = 0; i < R; ++i) acc[u][i] = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 64 <= k; p += 64)
    for (int u = 0; u < 2; ++u) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512((const void*)(w + p + 32 * u));
      for (int i = 0; i < R; ++i)
        acc[u][i] = _mm512_dpbf16_ps(
            acc[u][i], (__m512bh)_mm512_loadu_si512((const void*)(a + i * lda + p + 32 * u)), wv);
    }
  for (int u = 0; p < k; p += 32, u ^= 1) {
    const int64_t live = k - p;
    const __m512bh wv = kiln_rows_load(w + p, live);
    for (int i = 0; i < R; ++i)
      acc[u][i] = _mm512_dpbf16_ps(acc[u][i], kiln_rows_load(a + i * lda + p, live), wv);
  }
  for (int i = 0; i < R; ++i)
    out[i * KILN_GEMM_PANEL] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][i], acc[1][i]));
}

/* out[i * 16 + j] = A row i . W row j for i < m (<= 8), j < n (<= 16). */
void kiln_bf16_rows_gemv__avx512bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                     int64_t lda, const uint16_t* w, int64_t ldw, float* out) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; i += 4) {
      const uint16_t* ai = a + i * lda;
      float* o = out + i * KILN_GEMM_PANEL + j;
      switch (m - i < 4 ? m - i : 4) {
        case 1: kiln_rows_tile(1, k, ai, lda, w + j * ldw, o); break;
        case 2: kiln_rows_tile(2, k, ai, lda, w + j * ldw, o); break;
        case 3: kiln_rows_tile(3, k, ai, lda, w + j * ldw, o); break;
        default: kiln_rows_tile(4, k, ai, lda, w + j * ldw, o); break;
      }
    }
}

/* ---- the same for any M: tiles of 4 rows of A x 4 rows of W -----------
 * 16 accumulators (4 x 4 dot products, 16 lanes of partial sums each), per
 * 32 elements of K 4 loads of A and 4 of W feeding 16 VDPBF16PS: the
 * packed kernel's products per instruction with no packing at all (the
 * rows of both operands hold K's pairs side by side already). The 16
 * accumulators reduce to their 16 sums at once (a transpose-add tree: 45
 * instructions against 16 x K / 32 dot products). */

/* The 16 lane sums of v[0..15], in order. */
KILN_ROWS_AI __m512 kiln_rows_reduce16(const __m512* v) {
  __m512 a[8], b[4];
  for (int q = 0; q < 8; ++q)
    a[q] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * q], v[2 * q + 1]),
                         _mm512_unpackhi_ps(v[2 * q], v[2 * q + 1]));
  for (int q = 0; q < 4; ++q)
    b[q] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * q], a[2 * q + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(a[2 * q], a[2 * q + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  __m512 d0 = _mm512_add_ps(_mm512_shuffle_f32x4(b[0], b[1], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_f32x4(b[0], b[1], _MM_SHUFFLE(3, 2, 3, 2)));
  __m512 d1 = _mm512_add_ps(_mm512_shuffle_f32x4(b[2], b[3], _MM_SHUFFLE(1, 0, 1, 0)),
                            _mm512_shuffle_f32x4(b[2], b[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(d0, d1, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(d0, d1, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* out[i * ldo + s] = A row i . W row s for i < R, s < S. */
KILN_ROWS_AI void kiln_rows_tile4(const int R, const int S, int64_t k, const uint16_t* a,
                                  int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                                  int64_t ldo) {
  __m512 acc[16];
  for (int q = 0; q < 16; ++q) acc[q] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p += 32) {
    const int64_t live = k - p;
    __m512bh av[4];
    for (int i = 0; i < R; ++i) av[i] = kiln_rows_load(a + i * lda + p, live);
    for (int s = 0; s < S; ++s) {
      const __m512bh wv = kiln_rows_load(w + s * ldw + p, live);
      for (int i = 0; i < R; ++i) acc[i * 4 + s] = _mm512_dpbf16_ps(acc[i * 4 + s], av[i], wv);
    }
  }
  const __m512 r = kiln_rows_reduce16(acc);
  const __mmask8 keep = (__mmask8)((1u << S) - 1);
  for (int i = 0; i < R; ++i) {
    __m128 row = i == 0 ? _mm512_castps512_ps128(r)
                 : i == 1 ? _mm512_extractf32x4_ps(r, 1)
                 : i == 2 ? _mm512_extractf32x4_ps(r, 2)
                          : _mm512_extractf32x4_ps(r, 3);
    _mm_mask_storeu_ps(out + i * ldo, keep, row);
  }
}

void kiln_bf16_rows_gemm__avx512bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                     int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                                     int64_t ldo) {
  for (int64_t i = 0; i < m; i += 4)
    for (int64_t s = 0; s < n; s += 4) {
      const int64_t r = m - i < 4 ? m - i : 4, c = n - s < 4 ? n - s : 4;
      const uint16_t* ai = a + i * lda;
      const uint16_t* ws = w + s * ldw;
      float* o = out + i * ldo + s;
      switch (r * 4 + c - 5) { /* (r, c) in 1..4 */
        case 0: kiln_rows_tile4(1, 1, k, ai, lda, ws, ldw, o, ldo); break;
        case 1: kiln_rows_tile4(1, 2, k, ai, lda, ws, ldw, o, ldo); break;
        case 2: kiln_rows_tile4(1, 3, k, ai, lda, ws, ldw, o, ldo); break;
        case 3: kiln_rows_tile4(1, 4, k, ai, lda, ws, ldw, o, ldo); break;
        case 4: kiln_rows_tile4(2, 1, k, ai, lda, ws, ldw, o, ldo); break;
        case 5: kiln_rows_tile4(2, 2, k, ai, lda, ws, ldw, o, ldo); break;
        case 6: kiln_rows_tile4(2, 3, k, ai, lda, ws, ldw, o, ldo); break;
        case 7: kiln_rows_tile4(2, 4, k, ai, lda, ws, ldw, o, ldo); break;
        case 8: kiln_rows_tile4(3, 1, k, ai, lda, ws, ldw, o, ldo); break;
        case 9: kiln_rows_tile4(3, 2, k, ai, lda, ws, ldw, o, ldo); break;
        case 10: kiln_rows_tile4(3, 3, k, ai, lda, ws, ldw, o, ldo); break;
        case 11: kiln_rows_tile4(3, 4, k, ai, lda, ws, ldw, o, ldo); break;
        case 12: kiln_rows_tile4(4, 1, k, ai, lda, ws, ldw, o, ldo); break;
        case 13: kiln_rows_tile4(4, 2, k, ai, lda, ws, ldw, o, ldo); break;
        case 14: kiln_rows_tile4(4, 3, k, ai, lda, ws, ldw, o, ldo); break;
        default: kiln_rows_tile4(4, 4, k, ai, lda, ws, ldw, o, ldo); break;
      }
    }
}
