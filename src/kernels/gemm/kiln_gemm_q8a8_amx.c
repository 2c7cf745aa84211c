/* int8 x int8 prefill on AMX-INT8 tiles (TDPBSSD): kiln_gemm_q8a8.c's
 * contract (the rule is in kiln_gemm.h), the activations quantized per row
 * and the products summed exactly in int32, so the same bits as the
 * scalar reference.
 *
 * TDPBSSD multiplies signed bytes by signed bytes, the rule's two sides as
 * they are (VPDPBUSD's kernel must bias the weights to unsigned and undo
 * it). A is quantized into rows of kp bytes (K rounded up to 64, zero past
 * K; rows padded to 16 with zeros); each 16-column panel of the blob (K
 * rows of 16 bytes) is laid out per task as AMX wants B, kp / 4 rows of 16
 * columns x 4 consecutive K bytes, by one VPERMB per 4 rows (the VNNI
 * kernel's transpose), so the .kiln layout stays the one every CPU reads.
 * Blocks of 32 rows x 32 columns in tmm0-3 (int32), A in tmm4-5, B in
 * tmm6-7 (kiln_amx_tiles.h's configuration): per 64-K step 4 tile loads
 * and 4 TDPBSSD (16 x 16 x 64 multiply-adds each). K goes in blocks of
 * KSTEPS steps (a strip's 16 KiB of B in L1 while the block's rows reuse
 * it), the sums parked in the caller's int32 buffer between them: integer
 * sums, so blocking changes no bit.
 *
 * Compiled only with the AMX flags (amx-tile, amx-bf16, amx-int8 and
 * AVX-512 with VBMI) and called only when kiln_gemm_q8a8_amx_tiles() says the
 * CPU has AMX-INT8 and VBMI and AMX is allowed. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_q8a8_quant_avx512.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kernels/kiln_amx_tiles.h"

#define KSTEPS 8

void kiln_qd8_gemm_pack_a_rows__amx(int64_t rows, int64_t rows_pad, int64_t k, int64_t kp,
                                    const float* a, const uint16_t* a16, int64_t rs, int64_t cs,
                                    int8_t* out, float* scales) {
  for (int64_t i = 0; i < rows_pad; ++i) {
    int8_t* row = out + i * kp;
    if (i >= rows) {
      memset(row, 0, (size_t)kp);
      scales[i] = 0.0f;
      continue;
    }
    const float* x = a ? a + i * rs : NULL;
    const uint16_t* x16 = a16 ? a16 + i * rs : NULL;
    if (cs == 1) {
      scales[i] = kiln_q8a8_row_scale_avx512(x, x16, k);
      kiln_q8a8_row_quantize_with_avx512(x, x16, k, kp, scales[i], row);
      continue;
    }
    /* Strided rows (a transposed operand): the scalar rule. */
    const float s = kiln_gemm_q8a8_row_scale(k, x, x16, cs);
    scales[i] = s;
    for (int64_t p = 0; p < k; ++p) {
      const float v = x16 ? kiln_gemm_bf16_to_f32(x16[p * cs]) : x[p * cs];
      row[p] = (int8_t)kiln_gemm_q8a8_quantize(v, s);
    }
    memset(row + k, 0, (size_t)(kp - k));
  }
}

/* Byte 4j + q of the result is byte 16q + j of the load: column j's rows
 * p..p+3 side by side (kiln_gemm_q8a8_avx512vnni.c's table). */
static _Alignas(64) const int8_t kiln_q8a8_amx_transpose[64] = {
    0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51,
    4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55,
    8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
    12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63,
};

void kiln_qd8_qc8w_prep_b__amx(int64_t k, int64_t kp, const int8_t* b, int8_t* out) {
  const __m512i idx = _mm512_load_si512(kiln_q8a8_amx_transpose);
  for (int64_t p = 0; p < kp; p += 4) {
    __m512i v = _mm512_setzero_si512();
    if (p + 4 <= k) {
      v = _mm512_loadu_si512((const void*)(b + p * 16));
    } else if (p < k) { /* the last rows of K; nothing past the panel is read */
      const __mmask64 m = ((__mmask64)1 << ((k - p) * 16)) - 1;
      v = _mm512_maskz_loadu_epi8(m, b + p * 16);
    }
    _mm512_storeu_si512((void*)(out + p * 16), _mm512_permutexvar_epi8(idx, v));
  }
}

#define KILN_Q8A8_AMX_AI static inline __attribute__((always_inline))

/* MT x NT (1, 2) tiles over ns steps from a (rows lda bytes apart) and the
 * prepped panels b0, b1; C (rows 32 int32 apart, the second A tile's rows
 * from c + 16 x 32) from zero when first, else from c, stored back. */
KILN_Q8A8_AMX_AI void kiln_q8a8_amx_tile(const int MT, const int NT, int first, int64_t ns,
                                         const int8_t* a, int64_t lda, const int8_t* b0,
                                         const int8_t* b1, int32_t* c) {
  const int8_t* a1 = a + 16 * lda;
  kiln_amx_c_begin(MT, NT, first, c, c + 16 * 32, 128);
  for (int64_t s = 0; s < ns; ++s) {
    _tile_loadd(6, b0 + s * 1024, 64);
    _tile_loadd(4, a + s * 64, lda);
    if (NT > 1) _tile_loadd(7, b1 + s * 1024, 64);
    if (MT > 1) _tile_loadd(5, a1 + s * 64, lda);
    _tile_dpbssd(0, 4, 6);
    if (NT > 1) _tile_dpbssd(1, 4, 7);
    if (MT > 1) _tile_dpbssd(2, 5, 6);
    if (MT > 1 && NT > 1) _tile_dpbssd(3, 5, 7);
  }
  kiln_amx_c_end(MT, NT, c, c + 16 * 32, 128);
}

void kiln_qd8_qc8w_gemm_block__amx(int64_t m, int64_t kp, const int8_t* a, const int8_t* b0,
                                   const int8_t* b1, int np, int32_t* c) {
  const int64_t steps = kp / 64;
  kiln_amx_tiles_configure();
  for (int64_t k0 = 0; k0 < steps; k0 += KSTEPS) {
    const int64_t ns = steps - k0 < KSTEPS ? steps - k0 : KSTEPS;
    const int first = k0 == 0;
    const int8_t *p0 = b0 + k0 * 1024, *p1 = b1 + k0 * 1024;
    for (int64_t i = 0; i < m; i += 32) {
      const int mt = m - i > 16 ? 2 : 1;
      const int8_t* ai = a + i * kp + k0 * 64;
      switch (mt * 2 + np) {
        case 2 + 1: kiln_q8a8_amx_tile(1, 1, first, ns, ai, kp, p0, p1, c + i * 32); break;
        case 2 + 2: kiln_q8a8_amx_tile(1, 2, first, ns, ai, kp, p0, p1, c + i * 32); break;
        case 4 + 1: kiln_q8a8_amx_tile(2, 1, first, ns, ai, kp, p0, p1, c + i * 32); break;
        default: kiln_q8a8_amx_tile(2, 2, first, ns, ai, kp, p0, p1, c + i * 32); break;
      }
    }
  }
  _tile_release();
}
