/* bf16 compute with VDPBF16PS (_mm512_dpbf16_ps): C(fp32) += A(bf16) . B(bf16).
 *
 * MR x 32 tiles (MR 1..8): per K pair, two zmm loads of B (one VNNI pair
 * row of each of the strip's two panels: 16 columns x 2 K values, exactly
 * kiln_gemm_bf16_vnni_pack_b's layout), and per row one 32-bit broadcast of
 * A's (p, p + 1) couple feeding two VDPBF16PS, each 32 multiply-adds summed
 * into 16 fp32 lanes. 16 accumulators at MR = 8 cover the instruction's
 * latency. C goes through the fp32 epilogue once, after all of K. An odd K
 * reads the zero row B's packing adds and the zero column of A's.
 *
 * A whole tile (32 columns) whose activation is none or relu goes from the
 * accumulators straight to C: + bias, relu (max(0, x): NaN passes, as the
 * epilogue's), + residual, then rounded to bf16 when the block says so
 * (c_round_bf16: the rule of kiln_gemm_bf16_round_avx512.h, the bits
 * kiln_gemm_round_bf16_f32 gives), the epilogue's operations in its order,
 * so the same bits. No copy through the tile buffer and no second pass
 * over the tile: at K = 64 (a weight's gradient at batch 64) those cost a
 * quarter of the tile's time (one core, 1024 x 1024 x 64: 150 -> 209
 * GFLOP/s). Other activations take the tile buffer and the epilogue.
 *
 * Compiled only with the AVX512_BF16 flags (meson: isa_avx512bf16_args) and
 * called only when kiln_cpu_bf16() has KILN_CPU_BF16_AVX512. Executed and
 * tested on a Sapphire Rapids Xeon (where it has the fp32 FMA's throughput
 * in products, half its bytes of B; Zen 4 runs it at twice the rate). */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_bf16_round_avx512.h"
#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_DP_AI static inline __attribute__((always_inline))

/* x rounded to bf16, kept as fp32 (the low half zero). */
KILN_DP_AI __m512 kiln_gemm_dp_round(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(kiln_gemm_bf16x16_round_lanes(x), 16));
}

/* What a tile stored straight to C applies: bias (32 floats) or NULL,
 * relu, residual rows (ldr apart; may alias C) or NULL, rounding. */
typedef struct {
  const float* bias;
  int relu;
  const float* res;
  int64_t ldr;
  int round;
} kiln_gemm_dp_out_t;

/* The tile into c (rows ldc apart): the tile buffer (ldc 32, o NULL) or C
 * itself through o's steps. */
KILN_DP_AI void kiln_gemm_dp_tile(const int MR, int64_t pairs, const uint16_t* a, int64_t lda,
                                  const uint16_t* b0, const uint16_t* b1, float* c, int64_t ldc,
                                  const kiln_gemm_dp_out_t* o) {
  __m512 acc[8][2];
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t r = 0; r < pairs; ++r) {
    __m512bh bv0 = (__m512bh)_mm512_loadu_si512((const void*)(b0 + r * 32));
    __m512bh bv1 = (__m512bh)_mm512_loadu_si512((const void*)(b1 + r * 32));
    for (int i = 0; i < MR; ++i) {
      int32_t couple;
      memcpy(&couple, a + i * lda + 2 * r, sizeof(couple));
      __m512bh av = (__m512bh)_mm512_set1_epi32(couple);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, bv0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, bv1);
    }
  }
  if (o) {
    if (o->bias) {
      __m512 b0v = _mm512_loadu_ps(o->bias), b1v = _mm512_loadu_ps(o->bias + 16);
      for (int i = 0; i < MR; ++i) {
        acc[i][0] = _mm512_add_ps(acc[i][0], b0v);
        acc[i][1] = _mm512_add_ps(acc[i][1], b1v);
      }
    }
    if (o->relu)
      for (int i = 0; i < MR; ++i) {
        acc[i][0] = _mm512_max_ps(_mm512_setzero_ps(), acc[i][0]);
        acc[i][1] = _mm512_max_ps(_mm512_setzero_ps(), acc[i][1]);
      }
    if (o->res)
      for (int i = 0; i < MR; ++i) {
        acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(o->res + i * o->ldr));
        acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(o->res + i * o->ldr + 16));
      }
    if (o->round)
      for (int i = 0; i < MR; ++i) {
        acc[i][0] = kiln_gemm_dp_round(acc[i][0]);
        acc[i][1] = kiln_gemm_dp_round(acc[i][1]);
      }
  }
  for (int i = 0; i < MR; ++i) {
    _mm512_storeu_ps(c + i * ldc, acc[i][0]);
    _mm512_storeu_ps(c + i * ldc + 16, acc[i][1]);
  }
}

void kiln_bf16_gemm_block__avx512bf16(const kiln_gemm_bf16_block_t* t, int64_t i0, int64_t i1,
                                      int64_t j0, int64_t j1) {
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = t->kp, pairs = kp / 2;
  _Alignas(64) float ctile[8 * 32];
  const int plain = t->act == KILN_ACT_NONE || t->act == KILN_ACT_RELU;
  for (int64_t j = j0; j < j1; j += 32) {
    int64_t nr = j1 - j < 32 ? j1 - j : 32;
    const uint16_t* b0 = t->b + (j / P) * kp * P;
    /* One panel left: read it twice and drop the copy's columns. */
    const uint16_t* b1 = nr > P ? b0 + kp * P : b0;
    const int direct = plain && nr == 32;
    for (int64_t i = i0; i < i1; i += 8) {
      int64_t mr = i1 - i < 8 ? i1 - i : 8;
      const uint16_t* a = t->a + i * t->ka;
      float* c = direct ? t->c + i * t->ldc + j : ctile;
      int64_t ldc = direct ? t->ldc : 32;
      kiln_gemm_dp_out_t out = {t->bias ? t->bias + j : NULL, t->act == KILN_ACT_RELU,
                                t->res ? t->res + i * t->ldr + j : NULL, t->ldr, t->round != NULL};
      const kiln_gemm_dp_out_t* o = direct ? &out : NULL;
      switch (mr) {
        case 1: kiln_gemm_dp_tile(1, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        case 2: kiln_gemm_dp_tile(2, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        case 3: kiln_gemm_dp_tile(3, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        case 4: kiln_gemm_dp_tile(4, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        case 5: kiln_gemm_dp_tile(5, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        case 6: kiln_gemm_dp_tile(6, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        case 7: kiln_gemm_dp_tile(7, pairs, a, t->ka, b0, b1, c, ldc, o); break;
        default: kiln_gemm_dp_tile(8, pairs, a, t->ka, b0, b1, c, ldc, o); break;
      }
      if (direct) continue;
      t->epilogue(mr, nr, ctile, 32, t->c + i * t->ldc + j, t->ldc, t->bias ? t->bias + j : NULL,
                  t->res ? t->res + i * t->ldr + j : NULL, t->ldr, t->act);
      kiln_gemm_bf16_block_round(t, mr, nr, t->c + i * t->ldc + j);
    }
  }
}
