/* bf16 attention's two small products on AMX tiles (TDPBF16PS):
 * kiln_attn_bf16_gemm__avx512bf16's contract (kiln_attention_bf16.h), so
 * the flash kernel's packing and its softmax rule stay as they are. On a
 * Sapphire Rapids-class core VDPBF16PS peaks at half the fp32 FMA's rate;
 * the tiles do 16 x 16 x 32 products an instruction.
 *
 * Blocks of up to 32 rows (two A tiles, the second's rows and the first's
 * set per block by kiln_amx_tiles_configure_rows, so nothing past row m is
 * read or written) x 32 columns (two B tiles: 16 pair rows of 16 columns,
 * one 64-byte row a pair row, read in place from the VNNI-pair operand at
 * its stride). Reduction steps of 16 pairs; a last partial step is copied
 * with zeros past it, for A once per block and for B once per column
 * chunk, so nothing past the operands is read and 0 x (what follows) adds
 * no NaN. A block's reduction stops at the pairs the most-seeing row group
 * in it sees (lim), its score columns at the most it sees (the caller
 * overwrites hidden scores with -inf); rows that see fewer keys read the
 * V rows of keys hidden from them times P = 0, as the VDPBF16PS kernel's
 * row groups do for an odd lim (a NaN or Inf in such a V row would reach
 * them). Like VDPBF16PS, the tiles take bf16 denormals as zero and flush
 * denormal sums: the rule's values there differ by less than 1.2e-38.
 *
 * Compiled only with the AMX flags (meson: the nn_bf16 family's amx
 * variant) and called by the avx512 build of kiln_attention.c only when
 * kiln_cpu_bf16() has KILN_CPU_BF16_AMX. */
#include <immintrin.h>
#include <string.h>

#include "kernels/kiln_amx_tiles.h"
#include "kernels/nn/kiln_attention_bf16.h"

#define KILN_ATTN_AMX_AI static inline __attribute__((always_inline))

/* MT (1, 2) A tiles x NT (1, 2) B tiles, C at c (rows ldc floats apart;
 * the second A tile's rows 16 rows down), from zero or from c; steps full
 * steps from a0/a1 (rows sa bytes apart) and b0/b1 (pair rows sb bytes
 * apart), then the tail step from at0/at1 and bt0/bt1 when at0 is set. */
KILN_ATTN_AMX_AI void kiln_attn_amx_block(const int MT, const int NT, int accumulate,
                                          int64_t steps, const uint16_t* a0, const uint16_t* a1,
                                          int64_t sa, const uint16_t* b0, const uint16_t* b1,
                                          int64_t sb, const uint16_t* at0, const uint16_t* at1,
                                          const uint16_t* bt0, const uint16_t* bt1, float* c,
                                          int64_t ldc) {
  const int64_t sc = ldc * 4;
  float* c1 = c + 16 * ldc;
  kiln_amx_c_begin(MT, NT, !accumulate, c, c1, sc);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(6, b0 + s * 16 * (sb / 2), sb);
    _tile_loadd(4, a0 + s * 32, sa);
    if (NT > 1) _tile_loadd(7, b1 + s * 16 * (sb / 2), sb);
    if (MT > 1) _tile_loadd(5, a1 + s * 32, sa);
    _tile_dpbf16ps(0, 4, 6);
    if (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if (MT > 1) _tile_dpbf16ps(2, 5, 6);
    if (MT > 1 && NT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  if (at0) {
    _tile_loadd(6, bt0, 64);
    _tile_loadd(4, at0, 64);
    if (NT > 1) _tile_loadd(7, bt1, 64);
    if (MT > 1) _tile_loadd(5, at1, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if (MT > 1) _tile_dpbf16ps(2, 5, 6);
    if (MT > 1 && NT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  kiln_amx_c_end(MT, NT, c, c1, sc);
}

/* rows x (2 rem) bf16 from src (rows ld apart) into a zeroed 16 x 32 tile. */
static void kiln_attn_amx_tail(int64_t rows, int64_t rem, const uint16_t* src, int64_t ld,
                               uint16_t* tile) {
  memset(tile, 0, 16 * 32 * sizeof(uint16_t));
  for (int64_t r = 0; r < rows; ++r) memcpy(tile + r * 32, src + r * ld, (size_t)(4 * rem));
}

void kiln_attn_bf16_gemm__amx(int mr, int64_t m, int64_t n, int64_t pairs, const uint16_t* a,
                              int64_t lda, const uint16_t* b, int64_t ldb, float* c, int64_t ldc,
                              int accumulate, float scale, const int64_t* lim, int lim_cols) {
  _Alignas(64) uint16_t at[2][16 * 32], bt[2][16 * 32];
  const __m512 sv = _mm512_set1_ps(scale);
  for (int64_t i = 0; i < m; i += 32) {
    const int64_t ra = m - i < 16 ? m - i : 16;
    const int64_t rb = m - i <= 16 ? 0 : m - i - 16 < 16 ? m - i - 16 : 16;
    /* The most keys any row group overlapping the block sees. */
    int64_t most = 0;
    for (int64_t g = i / mr; g * mr < i + ra + rb; ++g) most = lim[g] > most ? lim[g] : most;
    const int64_t pp = lim_cols ? pairs : (most + 1) / 2 < pairs ? (most + 1) / 2 : pairs;
    const int64_t cols = lim_cols ? most : n;
    if (pp == 0 || cols == 0) continue;
    const int64_t steps = pp / 16, rem = pp % 16;
    const uint16_t* a0 = a + i * lda;
    const uint16_t* a1 = a0 + 16 * lda;
    if (rem) {
      kiln_attn_amx_tail(ra, rem, a0 + steps * 32, lda, at[0]);
      if (rb) kiln_attn_amx_tail(rb, rem, a1 + steps * 32, lda, at[1]);
    }
    kiln_amx_tiles_configure_rows((int)ra, rb ? (int)rb : 16);
    for (int64_t j = 0; j < n && j < cols; j += 32) {
      const int nt = n - j >= 32 ? 2 : 1;
      const uint16_t* b0 = b + 2 * j;
      const uint16_t* b1 = b0 + 32;
      if (rem) {
        kiln_attn_amx_tail(rem, 16, b0 + steps * 16 * 2 * ldb, 2 * ldb, bt[0]);
        if (nt > 1) kiln_attn_amx_tail(rem, 16, b1 + steps * 16 * 2 * ldb, 2 * ldb, bt[1]);
      }
      const uint16_t *t0 = rem ? at[0] : NULL, *t1 = at[1], *u0 = bt[0], *u1 = bt[1];
      float* cj = c + i * ldc + j;
      const int64_t sa = lda * 2, sb = ldb * 4;
#define KILN_ATTN_AMX_CALL(MT, NT) \
  kiln_attn_amx_block(MT, NT, accumulate, steps, a0, a1, sa, b0, b1, sb, t0, t1, u0, u1, cj, ldc)
      switch ((rb ? 2 : 0) + nt) {
        case 1: KILN_ATTN_AMX_CALL(1, 1); break;
        case 2: KILN_ATTN_AMX_CALL(1, 2); break;
        case 3: KILN_ATTN_AMX_CALL(2, 1); break;
        default: KILN_ATTN_AMX_CALL(2, 2); break;
      }
#undef KILN_ATTN_AMX_CALL
      /* The scores' scale, on the fp32 sums as the rule says (one rounding). */
      if (!accumulate)
        for (int64_t r = 0; r < ra + rb; ++r)
          for (int h = 0; h < nt; ++h) {
            float* p = cj + r * ldc + 16 * h;
            _mm512_storeu_ps(p, _mm512_mul_ps(_mm512_loadu_ps(p), sv));
          }
    }
  }
  _tile_release();
}
