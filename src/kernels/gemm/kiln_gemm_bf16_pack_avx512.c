/* bf16 compute's packers, AVX-512F integer arithmetic:
 *  - A (fp32 activations rounded, or bf16) into the bf16 rows the AMX and
 *    VDPBF16PS kernels read (kiln_gemm_bf16_block_t), from rows of unit
 *    stride or from a transposed A (unit row stride: the dW = dY^T X of a
 *    training step reads dY that way), any other strides element by element;
 *  - B, a graph value (fp32 rounded, or bf16), into the VNNI-pair panels
 *    (kiln_gemm_bf16_vnni_pack_b's layout) at run time, from rows of unit
 *    stride (x W, dY W) or columns of unit stride (x W^T, attention's
 *    Q K^T; turned in registers), others element by element.
 * Rounding is kiln_gemm_bf16_from_f32's to the bit (nearest even, NaN made
 * quiet, denormals kept): VCVTNEPS2BF16 would flush denormal inputs to
 * zero, which torch's rounding does not. So a packed panel holds exactly
 * what the scalar packers (kiln_gemm_bf16.c) write.
 * Compiled with the AVX-512 flags; called only when a bf16 engine is on. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_bf16_round_avx512.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/kiln_transpose_avx512.h"

static inline __m256i kiln_gemm_bf16x16_round_avx512(__m512 x) {
  return _mm512_cvtepi32_epi16(kiln_gemm_bf16x16_round_lanes(x));
}

/* Up to 16 elements (mask) of fp32 (rounded) or bf16 source at `at`, each
 * in the low half of its lane; lanes outside the mask are zero. */
static inline __m512i kiln_gemm_bf16_lanes(const float* f, const uint16_t* h, int64_t at,
                                           __mmask16 m) {
  if (h) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, h + at));
  return kiln_gemm_bf16x16_round_lanes(_mm512_maskz_loadu_ps(m, f + at));
}


/* How far ahead the packers prefetch: rows of a B read across its rows
 * (each row a run of the call's panels), lines down a transposed A's
 * columns. About a memory latency's worth of packing (tuned on Zen 4). */
#define KILN_GEMM_BF16_PF_ROWS 16
#define KILN_GEMM_BF16_PF_LINES 4

static inline __mmask16 kiln_gemm_bf16_mask(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u);
}

void kiln_bf16_gemm_pack_a_t__avx512(int64_t rows, int64_t rows_pad, int64_t k, int64_t ka,
                                     int64_t p0, int64_t p1, const float* a, const uint16_t* a16,
                                     int64_t cs, uint16_t* out) {
  /* 16 rows x 32 columns at a time: columns p and p + 1 of the 16 rows
   * (two loads along A's contiguous columns) make 16 couples, and 16 such
   * vectors turned in registers give each row's 32 bf16 in order, one
   * 64-byte store (ka is a multiple of 32: past K the loads gave zeros).
   * Each block of 32 columns walks down all the rows, so it reads 32 of
   * A's columns (B^T's rows: a dY of a dW = dY^T X) front to back, streams
   * the hardware prefetchers follow within a page, helped by a prefetch
   * KILN_GEMM_BF16_PF_LINES lines ahead in each. (Blocks of rows instead
   * read 64 bytes per column, each column pages apart, which the
   * prefetchers do not follow: inside a product, whose A came from memory,
   * packing took about 3x its time from cache. The dW products of the
   * bench's training step whose A comes from memory are 3-7 % faster.) */
  const size_t esz = a16 ? sizeof(uint16_t) : sizeof(float);
  const int64_t per_line = (int64_t)(64 / esz);
  const char* base = a16 ? (const char*)a16 : (const char*)a;
  for (int64_t c0 = p0; c0 < p1; c0 += 32) {
    const int64_t cols = k - c0 < 32 ? (k - c0 > 0 ? k - c0 : 0) : 32;
    for (int64_t i0 = 0; i0 < rows; i0 += 16) {
      const int64_t ni = rows - i0 < 16 ? rows - i0 : 16, ahead = i0 + KILN_GEMM_BF16_PF_LINES * per_line;
      if (i0 % per_line == 0 && ahead < rows)
        for (int64_t c = 0; c < cols; ++c)
          _mm_prefetch(base + (size_t)(ahead + (c0 + c) * cs) * esz, _MM_HINT_T0);
      __mmask16 mi = kiln_gemm_bf16_mask(ni);
      __m512i v[16];
      for (int q = 0; q < 16; ++q) {
        const int64_t p = c0 + 2 * q;
        __m512i lo = p < k ? kiln_gemm_bf16_lanes(a, a16, i0 + p * cs, mi) : _mm512_setzero_si512();
        __m512i hi = p + 1 < k ? kiln_gemm_bf16_lanes(a, a16, i0 + (p + 1) * cs, mi)
                               : _mm512_setzero_si512();
        v[q] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
      }
      kiln_transpose16x16_epi32_avx512(v);
      for (int64_t i = 0; i < ni; ++i) _mm512_storeu_si512((void*)(out + (i0 + i) * ka + c0), v[i]);
    }
    for (int64_t i = rows; i < rows_pad; ++i)
      memset(out + i * ka + c0, 0, 32 * sizeof(uint16_t));
  }
}

void kiln_bf16_gemm_pack_a__avx512(int64_t rows, int64_t rows_pad, int64_t k, int64_t ka,
                                   const float* a, const uint16_t* a16, int64_t rs, int64_t cs,
                                   uint16_t* out) {
  if (cs != 1 && rs == 1 && rows > 0) {
    kiln_bf16_gemm_pack_a_t__avx512(rows, rows_pad, k, ka, 0, ka, a, a16, cs, out);
    return;
  }
  for (int64_t i = 0; i < rows_pad; ++i) {
    uint16_t* dst = out + i * ka;
    int64_t p = 0;
    if (i < rows && cs != 1) {
      for (; p < k; ++p) dst[p] = kiln_gemm_bf16_elem(a, a16, i * rs + p * cs);
    } else if (i < rows) {
      if (a16) {
        memcpy(dst, a16 + i * rs, (size_t)k * sizeof(uint16_t));
        p = k;
      } else {
        const float* src = a + i * rs;
        for (; p + 16 <= k; p += 16)
          _mm256_storeu_si256((__m256i*)(dst + p),
                              kiln_gemm_bf16x16_round_avx512(_mm512_loadu_ps(src + p)));
        for (; p < k; ++p) dst[p] = kiln_gemm_bf16_from_f32(src[p]);
      }
    }
    memset(dst + p, 0, (size_t)(ka - p) * sizeof(uint16_t));
  }
}

void kiln_bf16_gemm_pack_b_vnni__avx512(int64_t k, int64_t n, int64_t q0, int64_t q1,
                                        const float* b, const uint16_t* b16, int64_t rs,
                                        int64_t cs, uint16_t* out) {
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = k + (k & 1);
  if (cs == 1) {
    /* B's rows are contiguous: rows p and p + 1 of each panel's columns,
     * interleaved into one 64-byte VNNI row; all of the range's panels per
     * pair of rows, so a row's run of [q0 P, q1 P) is read at once. Rows
     * are usually pages apart (a 1024-float row is one 4 KiB page), where
     * the hardware prefetchers stop, so the rows KILN_GEMM_BF16_PF_ROWS
     * ahead are asked for here. (A 1024 x 1024 fp32 B packed in 0.17 ms
     * from cache but about 0.7 inside a product, where it came from
     * memory; with the prefetch the product 256 x 1024 x 1024 whose B comes
     * from memory is 6 % faster on one Zen 4 core.) */
    const int64_t j0 = q0 * P, j1 = q1 * P < n ? q1 * P : n;
    const size_t esz = b16 ? sizeof(uint16_t) : sizeof(float);
    const char* base = b16 ? (const char*)b16 : (const char*)b;
    for (int64_t p = 0; p < kp; p += 2) {
      if (p + KILN_GEMM_BF16_PF_ROWS + 1 < k)
        for (int64_t r = p + KILN_GEMM_BF16_PF_ROWS; r < p + KILN_GEMM_BF16_PF_ROWS + 2; ++r)
          for (int64_t j = j0; j < j1; j += (int64_t)(64 / esz))
            _mm_prefetch(base + (size_t)(r * rs + j) * esz, _MM_HINT_T0);
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t jq = q * P, w = n - jq < P ? n - jq : P;
        __mmask16 mj = kiln_gemm_bf16_mask(w);
        __m512i lo = kiln_gemm_bf16_lanes(b, b16, p * rs + jq, mj);
        __m512i hi = p + 1 < k ? kiln_gemm_bf16_lanes(b, b16, (p + 1) * rs + jq, mj)
                               : _mm512_setzero_si512();
        _mm512_storeu_si512((void*)(out + q * kp * P + p * P),
                            _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
    return;
  }
  for (int64_t q = q0; q < q1; ++q) {
    uint16_t* dst = out + q * kp * P;
    const int64_t j0 = q * P, w = n - j0 < P ? n - j0 : P;
    if (rs == 1) {
      /* B's columns are contiguous: 32 rows of a column are 16 VNNI
       * couples in order; the panel's 16 columns of them, turned in
       * registers, are 16 VNNI rows. */
      for (int64_t p0 = 0; p0 < kp; p0 += 32) {
        int64_t np = k - p0 < 32 ? k - p0 : 32, pairs = (kp - p0 < 32 ? kp - p0 : 32) / 2;
        __mmask16 m0 = kiln_gemm_bf16_mask(np), m1 = kiln_gemm_bf16_mask(np > 16 ? np - 16 : 0);
        __m512i v[16];
        for (int64_t jj = 0; jj < P; ++jj) {
          if (jj >= w) {
            v[jj] = _mm512_setzero_si512();
            continue;
          }
          int64_t at = (j0 + jj) * cs + p0;
          __m256i e0 = _mm512_cvtepi32_epi16(kiln_gemm_bf16_lanes(b, b16, at, m0));
          __m256i e1 = _mm512_cvtepi32_epi16(kiln_gemm_bf16_lanes(b, b16, at + 16, m1));
          v[jj] = _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1);
        }
        kiln_transpose16x16_epi32_avx512(v);
        for (int64_t r = 0; r < pairs; ++r)
          _mm512_storeu_si512((void*)(dst + (p0 + 2 * r) * P), v[r]);
      }
    } else {
      for (int64_t p = 0; p < kp; ++p)
        for (int64_t jj = 0; jj < P; ++jj)
          dst[(p / 2) * 2 * P + jj * 2 + (p & 1)] =
              jj < w && p < k ? kiln_gemm_bf16_elem(b, b16, p * rs + (j0 + jj) * cs) : 0;
    }
  }
}
