/* bf16 compute: A (fp32 activations, or bf16) into the bf16 rows the AMX and
 * VDPBF16PS kernels read (kiln_gemm_bf16_block_t), 16 at a time with
 * AVX-512F integer arithmetic. Rounding is kiln_gemm_bf16_from_f32's to the
 * bit (nearest even, NaN made quiet, denormals kept): VCVTNEPS2BF16 would
 * flush denormal inputs to zero, which torch's rounding does not.
 * Compiled with the AVX-512 flags; called only when a bf16 engine is on. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

static inline __m256i kiln_gemm_bf16x16_round_avx512(__m512 x) {
  __m512i bits = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_or_epi32(r, nan, bits, _mm512_set1_epi32(0x400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

void kiln_bf16_gemm_pack_a__avx512(int64_t rows, int64_t rows_pad, int64_t k, int64_t ka,
                                   const float* a, const uint16_t* a16, int64_t rs, uint16_t* out) {
  for (int64_t i = 0; i < rows_pad; ++i) {
    uint16_t* dst = out + i * ka;
    int64_t p = 0;
    if (i < rows) {
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
