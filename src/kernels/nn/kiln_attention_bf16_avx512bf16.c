/* The VDPBF16PS pieces of bf16 attention (kiln_attention_bf16.h): packing
 * q, k, v and P into bf16 with the rule's rounding, and one register
 * kernel for both small products of a key tile, S = Q·Kt and O += P·V.
 *
 * The kernel is the bf16 GEMM engine's tile (kiln_gemm_bf16_ukernel_
 * avx512bf16.c) cut to attention's shapes: mr (4 or 6, the flash plan's
 * row groups) rows x 32 columns, per reduction pair one 32-bit broadcast
 * of A's couple per row and two VDPBF16PS (32 products summed into 16 fp32
 * lanes each); 16 columns when only 16 are left. A bf16 product is exact
 * in fp32 and the instruction adds the two of a pair in turn, so S and O
 * are the fp32 sums of the rule (in another order than the scalar
 * reference's double sums). VDPBF16PS treats bf16 denormals (below 1.2e-38)
 * as zero and flushes denormal results: the rule's values there differ by
 * less than 1.2e-38.
 *
 * Rounding is kiln_gemm_bf16x16_round_lanes' (integer nearest even, NaN
 * made quiet, denormals kept), not VCVTNE2PS2BF16, which flushes denormals.
 * Compiled only with the AVX512_BF16 flags (meson: the nn_bf16 family) and
 * called from the avx512 build of kiln_attention.c only when kiln_cpu_bf16()
 * has KILN_CPU_BF16_AVX512. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_bf16_round_avx512.h"
#include "kernels/kiln_transpose_avx512.h"
#include "kernels/nn/kiln_attention_bf16.h"

#define KILN_ATTN_BF16_AI static inline __attribute__((always_inline))

static inline __mmask16 kiln_attn_bf16_mask16(int64_t n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* n <= 32 unit-stride floats rounded into 32 bf16 words in order (zeros
 * past n): two 16-lane roundings, then the low words of both gathered. */
static inline __m512i kiln_attn_bf16_round32(const float* x, int64_t n) {
  __m512i lo = kiln_gemm_bf16x16_round_lanes(_mm512_maskz_loadu_ps(kiln_attn_bf16_mask16(n), x));
  __m512i hi =
      kiln_gemm_bf16x16_round_lanes(_mm512_maskz_loadu_ps(kiln_attn_bf16_mask16(n - 16), x + 16));
  const __m512i idx = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34,
                                       32, 30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2,
                                       0);
  return _mm512_permutex2var_epi16(lo, idx, hi);
}

void kiln_attn_bf16_pack_rows__avx512bf16(int64_t rows, int64_t d, const float* src, int64_t rs,
                                          int64_t es, uint16_t* dst, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * rs;
    uint16_t* y = dst + r * ld;
    int64_t e = 0;
    if (es == 1)
      for (; e < d; e += 32) {
        int64_t n = d - e < 32 ? d - e : 32;
        _mm512_mask_storeu_epi16(y + e, n >= 32 ? ~(__mmask32)0 : ((__mmask32)1 << n) - 1u,
                                 kiln_attn_bf16_round32(x + e, n));
      }
    else
      for (; e < d; ++e) y[e] = kiln_bf16_from_f32(x[e * es]);
    if (d & 1) y[d] = 0; /* the odd count's pad: its couple is read whole */
  }
}

void kiln_attn_bf16_pack_kt__avx512bf16(const float* kb, int64_t k_row, int64_t k_col, int64_t d,
                                        int64_t nk, int64_t nkp, uint16_t* kt, int64_t ldk) {
  const int64_t pairs = (d + 1) / 2;
  uint32_t* kt32 = (uint32_t*)(void*)kt; /* couple p of key c at p * ldk + c */
  int64_t c0 = 0;
  if (k_col == 1) {
    /* 16 keys x 32 head dims at a time: each key's 16 couples in one
     * register, transposed so each couple index has its 16 keys. */
    for (; c0 + 16 <= nk; c0 += 16)
      for (int64_t e = 0; e < d; e += 32) {
        int64_t n = d - e < 32 ? d - e : 32, np = (n + 1) / 2;
        __m512i r[16];
        for (int i = 0; i < 16; ++i) r[i] = kiln_attn_bf16_round32(kb + (c0 + i) * k_row + e, n);
        kiln_transpose16x16_epi32_avx512(r);
        for (int64_t p = 0; p < np; ++p)
          _mm512_storeu_si512((void*)(kt32 + (e / 2 + p) * ldk + c0), r[p]);
      }
  }
  for (int64_t c = c0; c < nkp; ++c)
    for (int64_t p = 0; p < pairs; ++p) {
      uint32_t lo = 0, hi = 0;
      if (c < nk) {
        lo = kiln_bf16_from_f32(kb[c * k_row + 2 * p * k_col]);
        hi = 2 * p + 1 < d ? kiln_bf16_from_f32(kb[c * k_row + (2 * p + 1) * k_col]) : 0u;
      }
      kt32[p * ldk + c] = lo | hi << 16;
    }
}

void kiln_attn_bf16_pack_v__avx512bf16(const float* vb, int64_t v_row, int64_t v_col, int64_t dv,
                                       int64_t dvp, int64_t nk, int64_t nkp, uint16_t* vp) {
  uint32_t* vp32 = (uint32_t*)(void*)vp; /* couple of keys (2c, 2c + 1) at column e: c * dvp + e */
  for (int64_t c = 0; c < nkp; c += 2) {
    const float* r0 = c < nk ? vb + c * v_row : NULL;
    const float* r1 = c + 1 < nk ? vb + (c + 1) * v_row : NULL;
    uint32_t* out = vp32 + (c / 2) * dvp;
    if (v_col == 1) {
      for (int64_t e = 0; e < dvp; e += 16) {
        __mmask16 m = kiln_attn_bf16_mask16(dv - e);
        __m512i a = r0 ? kiln_gemm_bf16x16_round_lanes(_mm512_maskz_loadu_ps(m, r0 + e))
                       : _mm512_setzero_si512();
        __m512i b = r1 ? kiln_gemm_bf16x16_round_lanes(_mm512_maskz_loadu_ps(m, r1 + e))
                       : _mm512_setzero_si512();
        _mm512_storeu_si512((void*)(out + e), _mm512_or_si512(a, _mm512_slli_epi32(b, 16)));
      }
    } else {
      for (int64_t e = 0; e < dvp; ++e) {
        uint32_t lo = r0 && e < dv ? kiln_bf16_from_f32(r0[e * v_col]) : 0u;
        uint32_t hi = r1 && e < dv ? kiln_bf16_from_f32(r1[e * v_col]) : 0u;
        out[e] = lo | hi << 16;
      }
    }
  }
}

/* C(MR, 16 NV) (+)= A(MR, 2 pairs) . B: the register tile. */
KILN_ATTN_BF16_AI void kiln_attn_bf16_tile(const int MR, const int NV, int64_t pairs,
                                           const uint16_t* a, int64_t lda, const uint16_t* b,
                                           int64_t ldb, float* c, int64_t ldc, int accumulate,
                                           float scale) {
  __m512 acc[6][2];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = accumulate ? _mm512_loadu_ps(c + i * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[2];
    for (int v = 0; v < NV; ++v)
      bv[v] = (__m512bh)_mm512_loadu_si512((const void*)(b + 2 * (p * ldb + 16 * v)));
    for (int i = 0; i < MR; ++i) {
      int32_t couple;
      memcpy(&couple, a + i * lda + 2 * p, sizeof couple);
      __m512bh av = (__m512bh)_mm512_set1_epi32(couple);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], av, bv[v]);
    }
  }
  /* The scores' scale, on the fp32 sums as the rule says (one rounding). */
  if (!accumulate)
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_mul_ps(acc[i][v], _mm512_set1_ps(scale));
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
}

void kiln_attn_bf16_gemm__avx512bf16(int mr, int64_t m, int64_t n, int64_t pairs,
                                     const uint16_t* a, int64_t lda, const uint16_t* b,
                                     int64_t ldb, float* c, int64_t ldc, int accumulate,
                                     float scale, const int64_t* lim, int lim_cols) {
  /* Column chunks outside, so a chunk of B stays in L1 across row groups. */
  for (int64_t j = 0; j < n; j += 32) {
    const int wide = n - j >= 32;
    for (int64_t i = 0, g = 0; i < m; i += mr, ++g) {
      int64_t pp = lim_cols ? pairs : ((lim[g] + 1) / 2 < pairs ? (lim[g] + 1) / 2 : pairs);
      if ((lim_cols && j >= lim[g]) || pp == 0) continue;
      const uint16_t* ai = a + i * lda;
      const uint16_t* bj = b + 2 * j;
      float* ci = c + i * ldc + j;
      if (mr == 4) {
        if (wide) kiln_attn_bf16_tile(4, 2, pp, ai, lda, bj, ldb, ci, ldc, accumulate, scale);
        else kiln_attn_bf16_tile(4, 1, pp, ai, lda, bj, ldb, ci, ldc, accumulate, scale);
      } else {
        if (wide) kiln_attn_bf16_tile(6, 2, pp, ai, lda, bj, ldb, ci, ldc, accumulate, scale);
        else kiln_attn_bf16_tile(6, 1, pp, ai, lda, bj, ldb, ci, ldc, accumulate, scale);
      }
    }
  }
}
