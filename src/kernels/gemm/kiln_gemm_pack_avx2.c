/* AVX2 packing of A into 6-row panels (the 6x16 microkernel's layout),
 * for the common row-major A: eight columns at a time, six row loads are
 * transposed in registers into eight 6-float column groups. Scalar packing
 * of A cost ~3 % of a GEMM; this makes it a fraction of that. A stored
 * transposed (the weight gradient dY^T X reads dY that way) is copied six
 * contiguous floats at a time, every panel of the task per source row so the
 * source is read in order. B panels are packed with 8x8 register transposes
 * when B is stored transposed (y = x W^T reads W (N, K) as B). Other layouts
 * and partial panels fall back to the portable packers. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/kiln_transpose_avx2.h"

/* One full panel: out[p * 6 + i] = a[i * rs + p]. */
static void kiln_gemm_pack_a6_avx2(int64_t k, const float* a, int64_t rs, float* out) {
  const float *r0 = a, *r1 = a + rs, *r2 = a + 2 * rs, *r3 = a + 3 * rs, *r4 = a + 4 * rs,
              *r5 = a + 5 * rs;
  int64_t p = 0;
  /* Each column group is stored as 8 floats, 2 past its 6; the next group's
   * store overwrites them. Stopping while p + 9 <= k keeps the last store of
   * the block inside this panel, so parallel packers never collide. */
  for (; p + 9 <= k; p += 8) {
    __m256 x0 = _mm256_loadu_ps(r0 + p), x1 = _mm256_loadu_ps(r1 + p);
    __m256 x2 = _mm256_loadu_ps(r2 + p), x3 = _mm256_loadu_ps(r3 + p);
    __m256 x4 = _mm256_loadu_ps(r4 + p), x5 = _mm256_loadu_ps(r5 + p);
    /* Transposed as 8 rows, 6 and 7 zero: column c (8 floats, 2 of them
     * padding) goes to o + 6 c. */
    __m256 z = _mm256_setzero_ps();
    __m256 r[8] = {x0, x1, x2, x3, x4, x5, z, z}, c[8];
    kiln_transpose8x8_avx2(r, c);
    float* o = out + p * 6;
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(o + 6 * j, c[j]);
  }
  for (; p < k; ++p) {
    float* o = out + p * 6;
    o[0] = r0[p], o[1] = r1[p], o[2] = r2[p], o[3] = r3[p], o[4] = r4[p], o[5] = r5[p];
  }
}

/* Transposed A (rs == 1): `panels` full panels starting at row a[0];
 * out[r * k * 6 + p * 6 + i] = a[p * cs + 6 r + i]. Row p of the source
 * holds all the panels' columns p contiguously, so the outer loop walks the
 * source in order and each panel's output advances sequentially. */
static void kiln_gemm_pack_a6t_avx2(int64_t k, const float* a, int64_t cs, int64_t panels,
                                    float* out) {
  for (int64_t p = 0; p < k; ++p) {
    const float* s = a + p * cs;
    float* o = out + p * 6;
    /* Source rows are M floats apart (often 4 KiB, a page): no hardware
     * prefetcher follows that, so ask for this task's part of the row 8
     * ahead (about a sixth less time packing at M = K = 1024). */
    if (p + 8 < k) {
      const char* ahead = (const char*)(s + 8 * cs);
      for (int64_t l = 0; l < panels * 24; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
      _mm_prefetch(ahead + panels * 24 - 1, _MM_HINT_T0);
    }
    for (int64_t r = 0; r < panels; ++r) {
      _mm_storeu_ps(o + r * k * 6, _mm_loadu_ps(s + 6 * r));
      /* The last two floats: one 8-byte move (memcpy: the address is only
       * 4-byte aligned, which _mm_load_sd's double* may not be). */
      memcpy(o + r * k * 6 + 4, s + 6 * r + 4, 2 * sizeof(float));
    }
  }
}

void kiln_f32_gemm_pack_a__avx2(int mr, int64_t k, const float* a, int64_t rs, int64_t cs,
                                int64_t row0, int64_t rows, int64_t m_total, float* out) {
  if (mr == 6 && rs == 1 && cs != 1) {
    int64_t live = m_total - row0 < rows ? m_total - row0 : rows;
    int64_t full = live > 0 ? live / 6 : 0;
    if (full) kiln_gemm_pack_a6t_avx2(k, a + row0, cs, full, out);
    if (full * 6 < rows)
      kiln_gemm_pack_a(mr, k, a, rs, cs, row0 + full * 6, rows - full * 6, m_total,
                       out + full * k * 6);
    return;
  }
  if (mr != 6 || cs != 1) {
    kiln_gemm_pack_a(mr, k, a, rs, cs, row0, rows, m_total, out);
    return;
  }
  int64_t i = 0;
  for (; i + 6 <= rows && row0 + i + 6 <= m_total; i += 6)
    kiln_gemm_pack_a6_avx2(k, a + (row0 + i) * rs, rs, out + (i / 6) * k * 6);
  if (i < rows) kiln_gemm_pack_a(mr, k, a, rs, cs, row0 + i, rows - i, m_total, out + (i / 6) * k * 6);
}

void kiln_f32_gemm_pack_b_block__avx2(int64_t kc, int64_t w, const float* b, int64_t rs, int64_t cs,
                                      float* out) {
  const int P = KILN_GEMM_PANEL;
  if (w == P && cs == 1) {
    for (int64_t p = 0; p < kc; ++p) {
      _mm256_storeu_ps(out + p * P, _mm256_loadu_ps(b + p * rs));
      _mm256_storeu_ps(out + p * P + 8, _mm256_loadu_ps(b + p * rs + 8));
    }
    return;
  }
  if (w == P && rs == 1) {
    /* Column j of the panel is b[j * cs + p], contiguous in p: eight
     * columns by eight rows at a time through a register transpose. The
     * columns are often a power of two apart (K = 1024), so all sixteen
     * map to one L1 set: each column's whole 64-byte line (16 rows) is
     * consumed as soon as it is loaded, before the set evicts it. */
    int64_t p = 0;
    for (; p + 16 <= kc; p += 16)
      for (int h = 0; h < 2; ++h) {
        __m256 r[8], o[8], r2[8], o2[8];
        for (int j = 0; j < 8; ++j) {
          r[j] = _mm256_loadu_ps(b + (8 * h + j) * cs + p);
          r2[j] = _mm256_loadu_ps(b + (8 * h + j) * cs + p + 8);
        }
        kiln_transpose8x8_avx2(r, o);
        kiln_transpose8x8_avx2(r2, o2);
        for (int i = 0; i < 8; ++i) {
          _mm256_storeu_ps(out + (p + i) * P + 8 * h, o[i]);
          _mm256_storeu_ps(out + (p + 8 + i) * P + 8 * h, o2[i]);
        }
      }
    for (; p + 8 <= kc; p += 8)
      for (int h = 0; h < 2; ++h) {
        __m256 r[8], o[8];
        for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(b + (8 * h + j) * cs + p);
        kiln_transpose8x8_avx2(r, o);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + (p + i) * P + 8 * h, o[i]);
      }
    if (p < kc) kiln_gemm_pack_b_block(kc - p, w, b + p, rs, cs, out + p * P);
    return;
  }
  kiln_gemm_pack_b_block(kc, w, b, rs, cs, out);
}
