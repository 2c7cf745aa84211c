/* Attention computed in bf16 with fp32 sums (kiln_attention_args_t.bf16,
 * the SDPA flag KILN_SDPA_BF16 that compute_dtype=bf16 sets): the rule,
 * its scalar helpers, and the VDPBF16PS pieces the avx512 build of
 * kiln_attention.c calls on a CPU with AVX512_BF16.
 *
 * The rule (kiln_ops.h's SDPA comment says it for users; the scalar
 * reference, kiln_attention_f32_reference, computes it in double):
 *   q', k', v' = q, k, v rounded to bf16 (nearest even, NaN kept);
 *   s_j = (q' . k'_j) * scale + mask_j: the products exact, summed in fp32,
 *     the scale applied to the fp32 sum (as torch's CPU flash kernel does
 *     for bf16 inputs, which are already rounded: it scales qk in fp32);
 *   p_j = e^(s_j - c), with c = K ln2 for an integer K >= max_j s_j log2 e
 *     (the row's reference point), and l = sum_j bf16(p_j) in fp32;
 *   out = sum_j bf16(p_j) v'_j / l, summed in fp32.
 * l sums the rounded weights (torch sums them unrounded) so that out is a
 * weighted mean of the v'_j whatever the rounding: when one key dominates
 * a row, its weight's rounding (up to 2^-9 of it, as the reference point
 * leaves the largest weight anywhere in (1/2, 1]) cancels instead of
 * scaling the output (fuzz seed 20115's graph 2012: head dim 8, scale 1).
 * Torch rounds e^(s_j - m) with m the running max of its key blocks (512
 * keys, so the row max below that); kiln's reference point is a multiple
 * of ln2 instead, because then moving it (a larger max in a later key tile,
 * or the flash-decoding parts each with their own) scales every p_j by a
 * power of two, which bf16 rounding commutes with: the rounded weights do
 * not depend on how the keys are tiled, split or threaded, and every
 * kernel computes the reference's numbers up to fp32 summation order. Each
 * weight keeps 8 significant bits, as torch's. fp32 rounding differences in s_j can still move a weight
 * across a bf16 rounding boundary (rarely: about 1 weight in 10^4): that
 * weight then differs by one bf16 ulp, 2^-8 of itself.
 */
#ifndef KILN_ATTENTION_BF16_H
#define KILN_ATTENTION_BF16_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/kiln_bf16.h"


/* The reference point for a running max m (finite or +inf; NaN stays NaN):
 * ceil(m log2 e) ln2, a multiple of ln2 at or just above m. */
static inline float kiln_attn_bf16_ref_point(float m) {
  return ceilf(m * 1.44269504f) * 0.693147182f;
}

/* What runs a flagged SDPA on this machine (kiln.explain's line); decode:
 * a decode step's (few rows per kv head), which the fp32 kernels run. */
const char* kiln_attention_bf16_describe(int decode);

#if defined(KILN_HAVE_X86)
/* The VDPBF16PS pieces (kiln_attention_bf16_avx512bf16.c; call only when
 * kiln_cpu_bf16() has KILN_CPU_BF16_AVX512). Layouts, all bf16 bits:
 *  - rows (Q, P): row r at r * ld, an even number of values (a zero pads
 *    an odd count), read as 32-bit couples;
 *  - VNNI pairs (Kt, V): pair row p holds, for each column c, the two
 *    values (2p, 2p + 1) of the reduction at 2 (p * cols + c), cols a
 *    multiple of 16. */
/* rows x d values at src (row stride rs, element stride es) rounded into
 * dst (row stride ld >= d rounded up to even; the pad is zero). */
void kiln_attn_bf16_pack_rows__avx512bf16(int64_t rows, int64_t d, const float* src, int64_t rs,
                                          int64_t es, uint16_t* dst, int64_t ld);
/* Kt: keys [0, nk) of K (row stride k_row, element stride k_col, d values)
 * as VNNI pairs over d (d rounded up to even) with cols = ldk columns, of
 * which nkp are written (keys past nk zero). */
void kiln_attn_bf16_pack_kt__avx512bf16(const float* kb, int64_t k_row, int64_t k_col, int64_t d,
                                        int64_t nk, int64_t nkp, uint16_t* kt, int64_t ldk);
/* V: keys [0, nk) (row stride v_row, element stride v_col, dv values) as
 * VNNI pairs over keys with cols = dvp columns, zero past nk and dv, nkp
 * (even) keys in all. */
void kiln_attn_bf16_pack_v__avx512bf16(const float* vb, int64_t v_row, int64_t v_col, int64_t dv,
                                       int64_t dvp, int64_t nk, int64_t nkp, uint16_t* vp);
/* C(m, n) (+)= A(m, 2 pairs) . B(pairs, n) with m % mr == 0 (mr 4 or 6),
 * n % 16 == 0, A in rows (stride lda), B in VNNI pairs (cols ldb), C fp32
 * (stride ldc); without accumulate, C = scale x the fp32 sums. lim[g]: the keys row group g of mr rows sees. lim_cols:
 * columns at or past lim[g] are skipped (the scores, overwritten with
 * -inf after); else the reduction stops at pair ceil(lim[g] / 2) (P·V,
 * where P is 0 past lim[g]; so with an odd lim[g] the group also reads the
 * V row of key lim[g], causally hidden from it: NaN or Inf there reaches
 * the group's rows, as the fp32 kernel's row groups already read keys
 * hidden from some of their rows). */
void kiln_attn_bf16_gemm__avx512bf16(int mr, int64_t m, int64_t n, int64_t pairs,
                                     const uint16_t* a, int64_t lda, const uint16_t* b,
                                     int64_t ldb, float* c, int64_t ldc, int accumulate,
                                     float scale, const int64_t* lim, int lim_cols);
/* The same on AMX tiles (kiln_attention_bf16_amx.c; call only when
 * kiln_cpu_bf16() has KILN_CPU_BF16_AMX). */
void kiln_attn_bf16_gemm__amx(int mr, int64_t m, int64_t n, int64_t pairs, const uint16_t* a,
                              int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
                              int accumulate, float scale, const int64_t* lim, int lim_cols);
#endif

#endif /* KILN_ATTENTION_BF16_H */
