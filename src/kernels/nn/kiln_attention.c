/* Flash-style scaled dot-product attention, one ISA variant per build of
 * this file (see kiln_nn_internal.h for how work is cut into tasks).
 *
 * A task owns a block of rows (query head of a GQA group × query) of one
 * (batch, kv head). It packs its queries, pre-scaled, into a contiguous
 * tile, then walks the keys in tiles: K is packed transposed (D, Bk) and V
 * as (Bk, Dv) rows (V is read in place when it is contiguous and needs no
 * padding), so permuted or strided inputs are read where they lie, once per
 * task, and the two products are small dense GEMMs on one 6 x 16 register
 * kernel (6 x 32 at avx512 where the columns allow): S = Q·Kt (rows × Bk)
 * and O += P·V. The softmax is online: each row
 * keeps its running max m and sum l, and O is rescaled by e^(m_old - m_new)
 * when the max grows, so the (Sq, Skv) score matrix never exists.
 *
 * Decode steps (one query, or a few, per GQA group of 4 or 8 query heads)
 * have few rows per kv head: the register kernel then has 4 rows instead
 * of 6 (no FMAs on padding rows), and at AVX2 the scores of a block of <= 8
 * rows are taken straight from K's rows, summed across lanes, instead of
 * packing K transposed (the pack cost more than the products there). K and
 * V of a decode step come from DRAM (a step of weights streamed through the
 * caches since they were read), so that path prefetches ahead of the walk.
 * When batch x kv heads x row blocks are fewer than twice the threads, the
 * keys are split into parts too (flash-decoding, kiln_nn_internal.h): each
 * part leaves its rows' unnormalised O, max m and sum l, and the block's
 * last part to finish rescales and sums the parts exactly as the online
 * softmax does tiles.
 *
 * All tiles live in one stack buffer of KILN_NN_ATTN_SCRATCH floats (80 KiB);
 * tile sizes shrink to fit the head dims. Head dims above
 * KILN_ATTENTION_MAX_HEAD_DIM take an untiled row-at-a-time path that needs
 * no scratch (the output row is the accumulator): correct, slower.
 *
 * Hidden keys are not read: a key tile that no row of the task may see
 * (past every row's causal limit, or -inf in every row's mask over the
 * tile) is skipped whole: no packing, no products. So decode over a static
 * cache (one query, the mask -inf past the valid length) costs what the
 * valid keys cost, not the cache size. Skipping changes no finite result
 * (such a tile adds e^-inf = 0 to every row); NaN or Inf in k or v at keys
 * so hidden does not reach the output, where torch's kernel, which reads
 * every key the mask hides, gives NaN (torch's causal path skips as kiln
 * does). A tile with any visible key is computed whole, as torch does.
 * Attention torch runs on its math path (a value head dim unlike the
 * query's, rank-3 inputs, shared key heads without enable_gqa) reads every
 * key; kiln marks it (args->every_key), and kiln_attention_f32 runs these
 * kernels only when skipping is exact there (finite q, k, v, no score
 * near overflow), the reference otherwise.
 *
 * Masked rows: a row that no key may see (all -inf mask, or causal with
 * i + offset < 0) outputs zeros. That is what torch 2.13's CPU
 * F.scaled_dot_product_attention returns for a fully -inf float mask (its
 * fused kernel, and its math path's safe softmax), so kiln matches the
 * kernel users see. NaN in q, k, v or the mask gives NaN in the affected
 * rows.
 *
 * bf16 (args->bf16, the rule in kiln_attention_bf16.h): the same walk with
 * q, k, v rounded to bf16 as they are packed (or read, for a decode step's
 * scores and V), the scale applied to the fp32 scores, and the softmax
 * weights rounded for P·V against a reference point that is a multiple of
 * ln2 (the running max rounded up to one), so the online softmax's
 * rescaling is by powers of two and commutes with the rounding. At avx512
 * with AVX512_BF16 the tiles are bf16 and both products VDPBF16PS tiles
 * (kiln_attention_bf16_avx512bf16.c), with key tiles of up to 128 (half
 * the bytes); elsewhere, and for decode steps, the fp32 kernels run on the
 * rounded values. Masked rows and NaN behave as above.
 */
#include <math.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "kernels/nn/kiln_attention_bf16.h"
#include "kernels/nn/kiln_nn_internal.h"
#include "kernels/nn/kiln_nn_math.h"
#include "kernels/nn/kiln_nn_row.h"

#if defined(__AVX2__) && defined(__FMA__)
#include "kernels/kiln_bf16_round_avx2.h"
#include "kernels/kiln_transpose_avx2.h"
#define KILN_NN_ATTN_AVX2 1
#endif
/* The avx512 build runs the bf16 rule on VDPBF16PS when the CPU has it
 * (kiln_attention_bf16_avx512bf16.c); every build runs it on its fp32
 * kernels over the rounded values otherwise. */
#if defined(__AVX512F__) && defined(KILN_HAVE_X86)
#define KILN_NN_ATTN_BF16_ENGINE 1
#include "kernels/gemm/kiln_gemm_bf16_round_avx512.h"
#endif

/* KILN_NN_ATTN_MAX_ROWS: the most rows a task handles (its per-row tables
 * are that long); the plan never makes a larger row block.
 * KILN_NN_ATTN_SUB: on the bf16 engine a key tile's scores and weights are
 * taken for SUB rows at a time (a multiple of both mr), so S and P stay in
 * L1 however many rows the task has, and a task can take all of a head's
 * rows: K and V are packed once per head instead of once per row block
 * (MiniLM's 128 queries: one block of 132 rows, not two of 66). */
enum { KILN_NN_ATTN_SCRATCH = 20480, KILN_NN_ATTN_MR = 6, KILN_NN_ATTN_NR = 16,
       KILN_NN_ATTN_MAX_ROWS = 132, KILN_NN_ATTN_SUB = 24 };

static int64_t kiln_nn_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* The scratch tiles of a task, in floats: Q (bq, d), Kt (d, bk), V (bk,
 * dvp), S (sb, bk), O (bq, dvp), m, l, where sb, the rows whose scores are
 * taken at once, is bq except on the bf16 engine (eng: at most
 * KILN_NN_ATTN_SUB). On the engine Q, Kt and V hold bf16 (half the floats,
 * d rounded up to even) and P (sb, bk) bf16 follows, or takes Kt's place
 * when it fits there and no later row needs Kt (one sub-block, bq <= d). */
typedef struct kiln_nn_attn_layout_s {
  int64_t q, k, v, s, o, total, sb;
  int p_in_k;
} kiln_nn_attn_layout_t;

static kiln_nn_attn_layout_t kiln_nn_attn_layout(int64_t bq, int64_t bk, int64_t d, int64_t dvp,
                                                 int eng) {
  kiln_nn_attn_layout_t t;
  int64_t dp = (d + 1) / 2 * 2;
  t.sb = eng && bq > KILN_NN_ATTN_SUB ? KILN_NN_ATTN_SUB : bq;
  t.q = eng ? bq * dp / 2 : bq * d;
  t.k = eng ? dp / 2 * bk : d * bk;
  t.v = eng ? bk * dvp / 2 : bk * dvp;
  t.s = t.sb * bk;
  t.o = bq * dvp;
  t.p_in_k = eng && t.sb == bq && bq <= dp;
  t.total = t.q + t.k + t.v + t.s + t.o + 3 * bq + (eng && !t.p_in_k ? t.sb * bk / 2 : 0);
  return t;
}

void KILN_ISA_VARIANT(kiln_nn_attention_plan)(const kiln_attention_args_t* a, int n_threads,
                                              kiln_nn_attention_plan_t* plan) {
  plan->args = a;
  plan->group = a->kv_heads > 0 ? a->heads / a->kv_heads : 1;
  plan->partial = NULL;
  plan->pending = NULL;
  plan->bf16_engine = 0;
#if defined(KILN_NN_ATTN_BF16_ENGINE)
  plan->bf16_engine = a->bf16 && (kiln_cpu_bf16() & KILN_CPU_BF16_AVX512) != 0;
  /* A decode step (a few rows per kv head) is bound by reading K and V:
   * its scores come from K's rows (kiln_nn_attn_scores_rows, over a
   * rounded copy), faster than packing K into pairs. */
  if (plan->group * a->q_len <= 8 && a->k_strides[3] == 1 && a->head_dim % 8 == 0)
    plan->bf16_engine = 0;
#endif
  int64_t rows = plan->group * a->q_len;
  int64_t d = a->head_dim, dvp = kiln_nn_round_up(a->v_head_dim, KILN_NN_ATTN_NR);
  /* The register kernel's rows: 6 (12 FMAs per 8 loads) unless 4 pads the
   * few rows of a decode step less, as for a GQA group of 4 or 8 (4 rows
   * is 8 FMAs per 6 loads: still FMA-bound, and no FMA on padding). Many
   * rows pad only their last block: 6 there. */
  int64_t rows1 = rows > 0 ? rows : 1;
  plan->mr = rows1 <= 16 && kiln_nn_round_up(rows1, 4) < kiln_nn_round_up(rows1, 6)
                 ? 4
                 : KILN_NN_ATTN_MR;
  /* (rows, keys): rows a multiple of 6 (of 12 up to 48), halvable down to
   * mr. The bf16 engine's tiles are half the bytes and its scores are
   * taken KILN_NN_ATTN_SUB rows at a time: it can take all 128 keys of a
   * BERT row at once (one max, one rescale per row instead of two) and,
   * for small head dims, all 128 queries of a head (K and V packed once). */
  static const int64_t tiles[][2] = {{132, 128}, {66, 128}, {48, 128}, {24, 128}, {48, 64},
                                     {48, 32},   {24, 32},  {12, 32},  {12, 16},  {6, 16}};
  plan->q_block = 12;
  plan->k_block = 0;
  if (d <= KILN_ATTENTION_MAX_HEAD_DIM && a->v_head_dim <= KILN_ATTENTION_MAX_HEAD_DIM) {
    for (size_t t = 0; t < sizeof tiles / sizeof tiles[0]; ++t) {
      if (tiles[t][0] <= KILN_NN_ATTN_MAX_ROWS &&
          (plan->bf16_engine || (tiles[t][1] <= 64 && tiles[t][0] <= 48)) &&
          kiln_nn_attn_layout(tiles[t][0], tiles[t][1], d, dvp, plan->bf16_engine).total <=
              KILN_NN_ATTN_SCRATCH) {
        plan->q_block = tiles[t][0];
        plan->k_block = tiles[t][1];
        break;
      }
    }
  }
  /* Row blocks are multiples of mr; the tiles' rows are multiples of 6. */
  if (plan->q_block % plan->mr) plan->mr = KILN_NN_ATTN_MR;
  int64_t bh = a->batch * a->kv_heads, want = 2 * (int64_t)n_threads;
  int64_t rows_pad = kiln_nn_round_up(rows > 0 ? rows : 1, plan->mr);
  if (plan->q_block > rows_pad) plan->q_block = rows_pad;
  /* Too few blocks to share out (decode with few kv heads): split the keys
   * first, since every row block re-reads all of its K and V while key
   * parts read them once between them; parts of at least one tile. Then
   * smaller row blocks if that is still not enough. */
  int64_t keys = a->causal ? a->q_len + a->causal_offset : a->kv_len;
  keys = keys < a->kv_len ? keys : a->kv_len;
  plan->kv_parts = 1;
  plan->kv_part = 0;
  int64_t blocks = bh * ((rows + plan->q_block - 1) / plan->q_block);
  if (plan->k_block > 0 && blocks < want && keys > plan->k_block) {
    int64_t parts = (want + blocks - 1) / blocks;
    int64_t tiles_n = (keys + plan->k_block - 1) / plan->k_block;
    parts = parts < tiles_n ? parts : tiles_n;
    plan->kv_part = (tiles_n + parts - 1) / parts * plan->k_block;
    plan->kv_parts = (keys + plan->kv_part - 1) / plan->kv_part;
  }
  while (plan->q_block > plan->mr && blocks * plan->kv_parts < want) {
    int64_t half = kiln_nn_round_up(plan->q_block / 2, plan->mr);
    if (half >= plan->q_block) break;
    plan->q_block = half;
    blocks = bh * ((rows + plan->q_block - 1) / plan->q_block);
  }
  plan->q_blocks = (rows + plan->q_block - 1) / plan->q_block;
}

/* C(mr, 16) (+)= A(mr, K) · B(K, 16) for mr = 6 or 4; A, B, C row-major
 * with the given row strides. The inner kernel of both products: two
 * accumulators per row cover the FMA latency and leave registers for B and
 * the broadcast (16 ymm in all at 6 rows); per step of K it issues 2 mr
 * FMAs for mr broadcasts and 2 loads. Inlined with a constant mr, so each
 * row count is its own unrolled kernel. */
#define KILN_NN_ATTN_INLINE static inline __attribute__((always_inline))
/* NAME(mr, ..., round_b): KERNEL instantiated with constant rows (4 or 6)
 * and rounding, each its own unrolled kernel. */
#define KILN_NN_ATTN_DISPATCH(NAME, KERNEL)                                                      \
  static void NAME(int mr, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, \
                   float* c, int64_t ldc, int accumulate, int round_b) {                         \
    if (round_b && mr == 4)                                                                      \
      KERNEL(4, k, a, lda, b, ldb, c, ldc, accumulate, 1);                                       \
    else if (round_b)                                                                            \
      KERNEL(6, k, a, lda, b, ldb, c, ldc, accumulate, 1);                                       \
    else if (mr == 4)                                                                            \
      KERNEL(4, k, a, lda, b, ldb, c, ldc, accumulate, 0);                                       \
    else                                                                                         \
      KERNEL(6, k, a, lda, b, ldb, c, ldc, accumulate, 0);                                       \
  }
#if defined(KILN_NN_ATTN_AVX2)
#if defined(__AVX512F__)
/* The avx512 build: the 16 columns are one zmm, and consecutive steps of K
 * alternate between two sets of mr accumulators (added at the end), so
 * 2 mr independent chains cover the latency of two 512-bit FMA units
 * (the ymm kernel below ran both products at half their FMA peak there:
 * MiniLM's SDPAs at 24 % of it on Zen 5). round_b as below. */
KILN_NN_ATTN_INLINE __m512 kiln_nn_attn_round16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(kiln_gemm_bf16x16_round_lanes(x), 16));
}

KILN_NN_ATTN_INLINE void kiln_nn_attn_kernel_n(int mr, int64_t k, const float* a, int64_t lda,
                                               const float* b, int64_t ldb, float* c, int64_t ldc,
                                               int accumulate, const int round_b) {
  __m512 e[6], d[6];
#pragma GCC unroll 6
  for (int r = 0; r < mr; ++r) {
    e[r] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    d[r] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    __m512 b0 = _mm512_loadu_ps(b + p * ldb), b1 = _mm512_loadu_ps(b + (p + 1) * ldb);
    if (round_b) {
      b0 = kiln_nn_attn_round16(b0);
      b1 = kiln_nn_attn_round16(b1);
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) {
      e[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), b0, e[r]);
      d[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p + 1]), b1, d[r]);
    }
  }
  if (p < k) {
    __m512 b0 = _mm512_loadu_ps(b + p * ldb);
    if (round_b) b0 = kiln_nn_attn_round16(b0);
#pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) e[r] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * lda + p]), b0, e[r]);
  }
#pragma GCC unroll 6
  for (int r = 0; r < mr; ++r) _mm512_storeu_ps(c + r * ldc, _mm512_add_ps(e[r], d[r]));
}

/* The same for 32 columns (two zmm): each broadcast of A feeds two FMAs,
 * where the kernel above spends one load per FMA (with the vector
 * reductions of kiln_nn_row.h: MiniLM b8's six SDPAs 7.3-7.5 -> 5.8-5.9
 * ms, BERT-base's 2.7 -> 2.2, on a Zen 5). Each 16-column half keeps the order of the
 * kernel above (even steps in e, odd in d, e + d at the end), so a
 * column's value does not depend on whether it ran in a pair. */
#define KILN_NN_ATTN_PAIRS 1
KILN_NN_ATTN_INLINE void kiln_nn_attn_kernel_n2(int mr, int64_t k, const float* a, int64_t lda,
                                                const float* b, int64_t ldb, float* c,
                                                int64_t ldc, int accumulate, const int round_b) {
  __m512 e[6][2], d[6][2];
#pragma GCC unroll 6
  for (int r = 0; r < mr; ++r) {
    e[r][0] = accumulate ? _mm512_loadu_ps(c + r * ldc) : _mm512_setzero_ps();
    e[r][1] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16) : _mm512_setzero_ps();
    d[r][0] = d[r][1] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 2 <= k; p += 2) {
    __m512 b00 = _mm512_loadu_ps(b + p * ldb), b01 = _mm512_loadu_ps(b + p * ldb + 16);
    __m512 b10 = _mm512_loadu_ps(b + (p + 1) * ldb), b11 = _mm512_loadu_ps(b + (p + 1) * ldb + 16);
    if (round_b) {
      b00 = kiln_nn_attn_round16(b00);
      b01 = kiln_nn_attn_round16(b01);
      b10 = kiln_nn_attn_round16(b10);
      b11 = kiln_nn_attn_round16(b11);
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) {
      __m512 a0 = _mm512_set1_ps(a[r * lda + p]), a1 = _mm512_set1_ps(a[r * lda + p + 1]);
      e[r][0] = _mm512_fmadd_ps(a0, b00, e[r][0]);
      e[r][1] = _mm512_fmadd_ps(a0, b01, e[r][1]);
      d[r][0] = _mm512_fmadd_ps(a1, b10, d[r][0]);
      d[r][1] = _mm512_fmadd_ps(a1, b11, d[r][1]);
    }
  }
  if (p < k) {
    __m512 b00 = _mm512_loadu_ps(b + p * ldb), b01 = _mm512_loadu_ps(b + p * ldb + 16);
    if (round_b) {
      b00 = kiln_nn_attn_round16(b00);
      b01 = kiln_nn_attn_round16(b01);
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) {
      __m512 a0 = _mm512_set1_ps(a[r * lda + p]);
      e[r][0] = _mm512_fmadd_ps(a0, b00, e[r][0]);
      e[r][1] = _mm512_fmadd_ps(a0, b01, e[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < mr; ++r) {
    _mm512_storeu_ps(c + r * ldc, _mm512_add_ps(e[r][0], d[r][0]));
    _mm512_storeu_ps(c + r * ldc + 16, _mm512_add_ps(e[r][1], d[r][1]));
  }
}

KILN_NN_ATTN_DISPATCH(kiln_nn_attn_kernel2, kiln_nn_attn_kernel_n2)
#else
/* round_b: B's values rounded to bf16 as loaded (decode's P·V over V in
 * place; a larger row block packs V rounded once instead). */
KILN_NN_ATTN_INLINE void kiln_nn_attn_kernel_n(int mr, int64_t k, const float* a, int64_t lda,
                                               const float* b, int64_t ldb, float* c, int64_t ldc,
                                               int accumulate, const int round_b) {
  __m256 acc[6][2];
#pragma GCC unroll 6
  for (int r = 0; r < mr; ++r) {
    acc[r][0] = accumulate ? _mm256_loadu_ps(c + r * ldc) : _mm256_setzero_ps();
    acc[r][1] = accumulate ? _mm256_loadu_ps(c + r * ldc + 8) : _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
    if (round_b) {
      b0 = kiln_bf16x8_round_ps_avx2(b0);
      b1 = kiln_bf16x8_round_ps_avx2(b1);
    }
#pragma GCC unroll 6
    for (int r = 0; r < mr; ++r) {
      __m256 av = _mm256_broadcast_ss(a + r * lda + p);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < mr; ++r) {
    _mm256_storeu_ps(c + r * ldc, acc[r][0]);
    _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
  }
}

#endif /* __AVX512F__ */

/* kt[e][c] = K[c][e] for an 8 x 8 block: rows of 8 floats in, transposed
 * in registers, 8 vectors out (the scalar version is one store per float);
 * bf: rounded to bf16 on the way (the bf16 rule's k). */
static inline void kiln_nn_attn_transpose8(const float* src, int64_t lds, float* dst,
                                           int64_t ldd, int bf) {
  __m256 r[8], o[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * lds);
  if (bf)
    for (int i = 0; i < 8; ++i) r[i] = kiln_bf16x8_round_ps_avx2(r[i]);
  kiln_transpose8x8_avx2(r, o);
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ldd, o[i]);
}

/* Row r's scores against 4 keys from 4 accumulators of 8 partial sums each:
 * horizontal sums, 4 results in one vector. */
static inline __m128 kiln_nn_attn_hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* S = Q·Kt for few rows, straight from K's rows: no transposed pack of the
 * tile, which for a decode step (4 rows of a GQA group) costs more than
 * the products. Two rows by four keys at a time: 8 accumulators of
 * D / 8 FMAs each, summed across lanes at the end (hadd), so every K row
 * is loaded once per row pair and the q rows come from L1. Rows nrp (even;
 * the padding rows of qp are zeros), keys [0, nk) of K at kb (row stride
 * k_row, unit element stride), d % 8 == 0. Keys past nk read key nk - 1
 * again; their scores land in columns the caller overwrites with -inf. */
/* Memory: a decode step's K and V were last read a whole step of weight
 * streaming ago, so they come from DRAM; one core's demand misses plus the
 * hardware prefetcher leave it latency-bound. So while the scores of keys
 * [c, c + 4) are computed, K rows KILN_NN_ATTN_PF keys ahead and the V
 * rows of these keys (read by O += P·V after the tile's scores) are
 * prefetched: up to keys_left keys past the tile's first (prefetches of
 * other addresses are harmless but waste bandwidth). vb is NULL when V's
 * rows are not contiguous. */
enum { KILN_NN_ATTN_PF = 32 };

static inline void kiln_nn_attn_prefetch_row(const float* row, int64_t n) {
  for (int64_t e = 0; e < n; e += 16) _mm_prefetch((const char*)(row + e), _MM_HINT_T0);
}

static void kiln_nn_attn_scores_rows(int64_t nrp, int64_t nk, int64_t d, const float* qp,
                                     const float* kb, int64_t k_row, float* s, int64_t lds,
                                     const float* vb, int64_t v_row, int64_t dv,
                                     int64_t keys_left) {
  for (int64_t c = 0; c < nk; c += 4) {
    const float* kr[4];
    for (int j = 0; j < 4; ++j) kr[j] = kb + (c + j < nk ? c + j : nk - 1) * k_row;
    for (int64_t j = c; j < c + 4; ++j) {
      if (j + KILN_NN_ATTN_PF < keys_left) kiln_nn_attn_prefetch_row(kb + (j + KILN_NN_ATTN_PF) * k_row, d);
      if (vb && j < nk) kiln_nn_attn_prefetch_row(vb + j * v_row, dv);
    }
    for (int64_t r = 0; r < nrp; r += 2) {
      const float *q0 = qp + r * d, *q1 = q0 + d;
      __m256 a[8];
      for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_ps();
      for (int64_t e = 0; e < d; e += 8) {
        __m256 x0 = _mm256_loadu_ps(q0 + e), x1 = _mm256_loadu_ps(q1 + e);
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          __m256 y = _mm256_loadu_ps(kr[j] + e);
          a[j] = _mm256_fmadd_ps(x0, y, a[j]);
          a[4 + j] = _mm256_fmadd_ps(x1, y, a[4 + j]);
        }
      }
      _mm_storeu_ps(s + r * lds + c, kiln_nn_attn_hsum4(a[0], a[1], a[2], a[3]));
      _mm_storeu_ps(s + (r + 1) * lds + c, kiln_nn_attn_hsum4(a[4], a[5], a[6], a[7]));
    }
  }
}

/* The bf16 rule's scores for few rows, as kiln_nn_attn_scores_rows: each
 * K vector is rounded to bf16 once, in registers, and used by R (2 or 4)
 * rows (the q rows in qp are rounded already); two keys at a time, 2 R
 * accumulators. Rounding as read costs less than a rounded copy of K:
 * a decode step reads K once, from DRAM. */
KILN_NN_ATTN_INLINE void kiln_nn_attn_scores_bf16_rows(const int R, int64_t d, const float* q,
                                                       const float* k0, const float* k1, float* s,
                                                       int64_t lds) {
  __m256 acc[4][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t e = 0; e < d; e += 8) {
    __m256 y0 = kiln_bf16x8_round_ps_avx2(_mm256_loadu_ps(k0 + e));
    __m256 y1 = kiln_bf16x8_round_ps_avx2(_mm256_loadu_ps(k1 + e));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      __m256 x = _mm256_loadu_ps(q + r * d + e);
      acc[r][0] = _mm256_fmadd_ps(x, y0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, y1, acc[r][1]);
    }
  }
  /* (row r, key 0), (r, 1), (r + 1, 0), (r + 1, 1) per horizontal sum */
  for (int r = 0; r < R; r += 2) {
    __m128 t = kiln_nn_attn_hsum4(acc[r][0], acc[r][1], acc[r + 1][0], acc[r + 1][1]);
    _mm_storel_pi((__m64*)(void*)(s + r * lds), t);
    _mm_storeh_pi((__m64*)(void*)(s + (r + 1) * lds), t);
  }
}

static void kiln_nn_attn_scores_bf16(int64_t nrp, int64_t nk, int64_t d, const float* qp,
                                     const float* kb, int64_t k_row, float* s, int64_t lds,
                                     const float* vb, int64_t v_row, int64_t dv,
                                     int64_t keys_left) {
  for (int64_t c = 0; c < nk; c += 2) {
    const float* k0 = kb + c * k_row;
    const float* k1 = kb + (c + 1 < nk ? c + 1 : c) * k_row;
    for (int64_t j = c; j < c + 2; ++j) {
      if (j + KILN_NN_ATTN_PF < keys_left)
        kiln_nn_attn_prefetch_row(kb + (j + KILN_NN_ATTN_PF) * k_row, d);
      if (vb && j < nk) kiln_nn_attn_prefetch_row(vb + j * v_row, dv);
    }
    for (int64_t r = 0; r < nrp; r += 4) {
      if (nrp - r >= 4)
        kiln_nn_attn_scores_bf16_rows(4, d, qp + r * d, k0, k1, s + r * lds + c, lds);
      else
        kiln_nn_attn_scores_bf16_rows(2, d, qp + r * d, k0, k1, s + r * lds + c, lds);
    }
  }
}
#else
KILN_NN_ATTN_INLINE void kiln_nn_attn_kernel_n(int mr, int64_t k, const float* a, int64_t lda,
                                               const float* b, int64_t ldb, float* c, int64_t ldc,
                                               int accumulate, const int round_b) {
  (void)round_b; /* only the AVX2 builds read V in place under the bf16 rule */
  float acc[6][16];
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < 16; ++j) acc[r][j] = accumulate ? c[r * ldc + j] : 0.0f;
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    for (int r = 0; r < mr; ++r) {
      float av = a[r * lda + p];
      for (int j = 0; j < 16; ++j) acc[r][j] = KILN_NN_FMA(av, bp[j], acc[r][j]);
    }
  }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < 16; ++j) c[r * ldc + j] = acc[r][j];
}
#endif

/* The bf16 rule's weights: p[0, n) (n % 16 == 0) rounded to bf16, and
 * added into the lanes acc[j] += p[c + j] in order (the sum l takes); the
 * rounded weights go back to p as floats, or (bits, the bf16 engine's P
 * tile) to pb instead. In vectors where the build has them: GCC leaves the
 * scalar rounding (an integer add and a NaN select per weight)
 * unvectorised, which cost the bf16 engine's attention 15 %. */
static inline void kiln_nn_attn_round_sum(int64_t n, float* p, float* acc, uint16_t* pb) {
#if defined(KILN_NN_ATTN_AVX2) && defined(__AVX512F__)
  __m512 s = _mm512_loadu_ps(acc);
  for (int64_t c = 0; c < n; c += 16) {
    __m512i lanes = kiln_gemm_bf16x16_round_lanes(_mm512_loadu_ps(p + c));
    __m512 x = _mm512_castsi512_ps(_mm512_slli_epi32(lanes, 16));
    if (pb)
      _mm256_storeu_si256((__m256i*)(void*)(pb + c), _mm512_cvtepi32_epi16(lanes));
    else
      _mm512_storeu_ps(p + c, x);
    s = _mm512_add_ps(s, x);
  }
  _mm512_storeu_ps(acc, s);
#elif defined(KILN_NN_ATTN_AVX2)
  __m256 s0 = _mm256_loadu_ps(acc), s1 = _mm256_loadu_ps(acc + 8);
  for (int64_t c = 0; c < n; c += 16) {
    __m256 x0 = kiln_bf16x8_round_ps_avx2(_mm256_loadu_ps(p + c));
    __m256 x1 = kiln_bf16x8_round_ps_avx2(_mm256_loadu_ps(p + c + 8));
    _mm256_storeu_ps(p + c, x0);
    _mm256_storeu_ps(p + c + 8, x1);
    s0 = _mm256_add_ps(s0, x0);
    s1 = _mm256_add_ps(s1, x1);
  }
  _mm256_storeu_ps(acc, s0);
  _mm256_storeu_ps(acc + 8, s1);
#else
  for (int64_t c = 0; c < n; c += KILN_NN_LANES)
    for (int j = 0; j < KILN_NN_LANES; ++j) {
      p[c + j] = kiln_bf16_round_f32(p[c + j]);
      acc[j] += p[c + j];
    }
#endif
#if !(defined(KILN_NN_ATTN_AVX2) && defined(__AVX512F__))
  (void)pb; /* the engine (avx512 only) passes it */
#endif
}

KILN_NN_ATTN_DISPATCH(kiln_nn_attn_kernel, kiln_nn_attn_kernel_n)

/* C(m, n) (+)= A(m, k) · B(k, n) with m % mr == 0 and n % 16 == 0, skipping
 * what causal masking hides: group g of mr rows sees only the first lim[g]
 * keys of the tile. For S = Q·Kt (lim_cols) that skips column chunks at or
 * past lim[g] (the caller overwrites them with -inf); for O += P·V it
 * shortens the reduction to lim[g] keys (P is 0 past it). Column chunks
 * outside so each chunk of B stays in L1 across the row groups. */
static void kiln_nn_attn_gemm(int mr, int64_t m, int64_t n, int64_t k, const float* a,
                              int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                              int accumulate, const int64_t* lim, int lim_cols, int round_b) {
  int64_t j = 0;
#if defined(KILN_NN_ATTN_PAIRS)
  /* Pairs of chunks (a pair whose second half the causal limit hides runs
   * as single chunks: the kernel's values are the same either way). */
  for (; j + 32 <= n; j += 32)
    for (int64_t i = 0, g = 0; i < m; i += mr, ++g) {
      int64_t kk = lim_cols ? k : (lim[g] < k ? lim[g] : k);
      if ((lim_cols && j >= lim[g]) || kk == 0) continue;
      if (lim_cols && j + 16 >= lim[g])
        kiln_nn_attn_kernel(mr, kk, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc,
                            accumulate, round_b);
      else
        kiln_nn_attn_kernel2(mr, kk, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc,
                             accumulate, round_b);
    }
#endif
  for (; j < n; j += 16)
    for (int64_t i = 0, g = 0; i < m; i += mr, ++g) {
      int64_t kk = lim_cols ? k : (lim[g] < k ? lim[g] : k);
      if ((lim_cols && j >= lim[g]) || kk == 0) continue;
      kiln_nn_attn_kernel(mr, kk, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, accumulate,
                          round_b);
    }
}

/* kt(d, bk) = the transpose of keys [j0, j0 + nk) of K (rows at k_row,
 * elements at k_col), zero-padded to nkp columns; bf: rounded to bf16. */
static void kiln_nn_attn_pack_k(const float* kb, int64_t k_row, int64_t k_col, int64_t d,
                                int64_t nk, int64_t nkp, float* kt, int64_t bk, int bf) {
  int64_t c0 = 0;
#if defined(KILN_NN_ATTN_AVX2)
  if (k_col == 1) {
    int64_t d8 = d / 8 * 8;
    for (; c0 + 8 <= nk; c0 += 8) {
      for (int64_t e = 0; e < d8; e += 8)
        kiln_nn_attn_transpose8(kb + c0 * k_row + e, k_row, kt + e * bk + c0, bk, bf);
      for (int64_t c = c0; c < c0 + 8; ++c)
        for (int64_t e = d8; e < d; ++e)
          kt[e * bk + c] = bf ? kiln_bf16_round_f32(kb[c * k_row + e]) : kb[c * k_row + e];
    }
  }
#endif
  for (int64_t c = c0; c < nkp; ++c) {
    if (c < nk && bf)
      for (int64_t e = 0; e < d; ++e) kt[e * bk + c] = kiln_bf16_round_f32(kb[c * k_row + e * k_col]);
    else if (c < nk)
      for (int64_t e = 0; e < d; ++e) kt[e * bk + c] = kb[c * k_row + e * k_col];
    else
      for (int64_t e = 0; e < d; ++e) kt[e * bk + c] = 0.0f;
  }
}

/* Where row r of a task reads its query and mask and writes its output. */
typedef struct kiln_nn_attn_row_s {
  const float* q;
  const float* mask;
  float* out;
  int64_t last_key; /* keys j > last_key are causally hidden */
} kiln_nn_attn_row_t;

/* The rows of block `block` (batch, kv head, row block). */
static void kiln_nn_attn_rows(const kiln_nn_attention_plan_t* plan, size_t block, int64_t* b,
                              int64_t* kvh, int64_t* n_rows, kiln_nn_attn_row_t* rows,
                              int64_t max_rows) {
  const kiln_attention_args_t* a = plan->args;
  int64_t bh_count = a->batch * a->kv_heads;
  /* The last row blocks see the most keys under causal masking: hand them
   * out first so the pool's counter balances the tail. Without causal
   * masking every block costs the same: a head's blocks go out one after
   * another, so its K and V are still in the caches for the next block. */
  int64_t blk, bh;
  if (a->causal) {
    blk = plan->q_blocks - 1 - (int64_t)block / bh_count;
    bh = (int64_t)block % bh_count;
  } else {
    blk = (int64_t)block % plan->q_blocks;
    bh = (int64_t)block / plan->q_blocks;
  }
  *b = bh / a->kv_heads;
  *kvh = bh % a->kv_heads;
  int64_t total = plan->group * a->q_len, r0 = blk * plan->q_block;
  int64_t n = total - r0 < plan->q_block ? total - r0 : plan->q_block;
  if (n > max_rows) n = max_rows;
  *n_rows = n;
  for (int64_t r = 0; r < n; ++r) {
    int64_t rho = r0 + r, qi = rho / plan->group;
    int64_t h = *kvh * plan->group + rho % plan->group;
    rows[r].q = a->q + *b * a->q_strides[0] + h * a->q_strides[1] + qi * a->q_strides[2];
    rows[r].mask = a->mask ? a->mask + *b * a->mask_strides[0] + h * a->mask_strides[1] +
                                 qi * a->mask_strides[2]
                           : NULL;
    rows[r].out = a->out + kiln_attention_out_offset(a, *b, h, qi);
    rows[r].last_key = a->causal ? qi + a->causal_offset : INT64_MAX;
  }
}

/* 1 when every one of the first n mask values (stride ms) is -inf. */
static int kiln_nn_attn_all_hidden(const float* mask, int64_t ms, int64_t n) {
  for (int64_t c = 0; c < n; ++c)
    if (mask[c * ms] != -INFINITY) return 0;
  return 1;
}

/* Large head dims: one row at a time, the output row as the accumulator. */
static void kiln_nn_attn_task_untiled(const kiln_nn_attention_plan_t* plan, size_t task) {
  const kiln_attention_args_t* a = plan->args;
  kiln_nn_attn_row_t rows[KILN_NN_ATTN_MAX_ROWS];
  int64_t b, kvh, n_rows;
  kiln_nn_attn_rows(plan, task, &b, &kvh, &n_rows, rows, KILN_NN_ATTN_MAX_ROWS);
  const float* kb = a->k + b * a->k_strides[0] + kvh * a->k_strides[1];
  const float* vb = a->v + b * a->v_strides[0] + kvh * a->v_strides[1];
  int64_t dv = a->v_head_dim;
  const int bf = a->bf16; /* the bf16 rule, kiln_attention_bf16.h, values rounded as read */
  for (int64_t r = 0; r < n_rows; ++r) {
    float* o = rows[r].out;
    for (int64_t e = 0; e < dv; ++e) o[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int64_t end = rows[r].last_key < a->kv_len - 1 ? rows[r].last_key + 1 : a->kv_len;
    for (int64_t j = 0; j < end; ++j) {
      /* A key the mask hides is not read (see the file's comment). */
      if (rows[r].mask && rows[r].mask[j * a->mask_strides[3]] == -INFINITY) continue;
      const float* kj = kb + j * a->k_strides[2];
      float s = 0.0f;
      if (bf)
        for (int64_t e = 0; e < a->head_dim; ++e)
          s = KILN_NN_FMA(kiln_bf16_round_f32(rows[r].q[e * a->q_strides[3]]),
                          kiln_bf16_round_f32(kj[e * a->k_strides[3]]), s);
      else
        for (int64_t e = 0; e < a->head_dim; ++e)
          s = KILN_NN_FMA(rows[r].q[e * a->q_strides[3]], kj[e * a->k_strides[3]], s);
      s *= a->scale;
      if (rows[r].mask) s += rows[r].mask[j * a->mask_strides[3]];
      if (s == -INFINITY) continue;
      if (s > m) {
        /* bf16: m is the row's reference point, a multiple of ln2 */
        float m_new = bf ? kiln_attn_bf16_ref_point(s) : s;
        float alpha = kiln_nn_expf(m - m_new);
        l *= alpha;
        for (int64_t e = 0; e < dv; ++e) o[e] *= alpha;
        m = m_new;
      }
      float p = kiln_nn_expf(s - m); /* NaN s (or m) spreads through p */
      if (bf) p = kiln_bf16_round_f32(p); /* l sums the rounded weights */
      l += p;
      const float* vj = vb + j * a->v_strides[2];
      if (bf) {
        for (int64_t e = 0; e < dv; ++e)
          o[e] = KILN_NN_FMA(p, kiln_bf16_round_f32(vj[e * a->v_strides[3]]), o[e]);
      } else {
        for (int64_t e = 0; e < dv; ++e) o[e] = KILN_NN_FMA(p, vj[e * a->v_strides[3]], o[e]);
      }
    }
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    for (int64_t e = 0; e < dv; ++e) o[e] *= inv;
  }
}

/* The parts of a block combined as the online softmax combines tiles: with
 * M the largest part max, O = sum_p e^(m_p - M) O_p / sum_p e^(m_p - M) l_p.
 * A part that saw no key has m = -inf and adds 0; a row no part saw gets
 * zeros; NaN in any part's m, l or O reaches the row. */
static void kiln_nn_attn_merge(const kiln_nn_attention_plan_t* plan, size_t block) {
  const kiln_attention_args_t* a = plan->args;
  kiln_nn_attn_row_t rows[KILN_NN_ATTN_MAX_ROWS];
  int64_t b, kvh, nr;
  kiln_nn_attn_rows(plan, block, &b, &kvh, &nr, rows, KILN_NN_ATTN_MAX_ROWS);
  const int64_t dv = a->v_head_dim, np = plan->kv_parts;
  const int64_t stride = kiln_nn_attention_partial_floats(plan);
  const float* p0 = plan->partial + (int64_t)block * np * stride;
  for (int64_t r = 0; r < nr; ++r) {
    float mx = -INFINITY;
    for (int64_t p = 0; p < np; ++p) {
      float mp = p0[p * stride + plan->q_block * dv + r];
      mx = mp > mx ? mp : mx;
    }
    float m_use = mx == -INFINITY ? 0.0f : mx;
    float* out = rows[r].out;
    float lsum = 0.0f;
    for (int64_t p = 0; p < np; ++p) {
      const float* pp = p0 + p * stride;
      float w = kiln_nn_exp_negf(pp[plan->q_block * dv + r] - m_use);
      lsum += w * pp[plan->q_block * dv + plan->q_block + r];
      const float* orow = pp + r * dv;
      if (p == 0)
        for (int64_t e = 0; e < dv; ++e) out[e] = w * orow[e];
      else
        for (int64_t e = 0; e < dv; ++e) out[e] = KILN_NN_FMA(w, orow[e], out[e]);
    }
    float inv = lsum == 0.0f ? 0.0f : 1.0f / lsum;
    for (int64_t e = 0; e < dv; ++e) out[e] *= inv;
  }
}

void KILN_ISA_VARIANT(kiln_nn_attention_task)(const kiln_nn_attention_plan_t* plan, size_t task) {
  if (plan->k_block == 0) {
    kiln_nn_attn_task_untiled(plan, task);
    return;
  }
  const kiln_attention_args_t* a = plan->args;
  kiln_nn_attn_row_t rows[KILN_NN_ATTN_MAX_ROWS];
  int64_t vis[KILN_NN_ATTN_MAX_ROWS], lim[KILN_NN_ATTN_MAX_ROWS / 4 + 1];
  int64_t b, kvh, nr;
  /* Parts of one block are consecutive tasks: they start together. */
  const int64_t part = (int64_t)task % plan->kv_parts;
  kiln_nn_attn_rows(plan, task / (size_t)plan->kv_parts, &b, &kvh, &nr, rows,
                    KILN_NN_ATTN_MAX_ROWS);
  const int mr = (int)plan->mr;
  const int64_t d = a->head_dim, dv = a->v_head_dim;
  const int64_t dvp = kiln_nn_round_up(dv, KILN_NN_ATTN_NR), bk = plan->k_block;
  const int64_t nrp = kiln_nn_round_up(nr, mr);
  /* The bf16 rule (kiln_attention_bf16.h): q, k, v rounded as packed, the
   * scale applied to the fp32 scores, P rounded before P·V. On VDPBF16PS
   * (eng) the tiles are bf16: Q rows of dp (d rounded up to even) values,
   * Kt and V as VNNI pairs, P in pb. */
  const int bf = a->bf16;
#if defined(KILN_NN_ATTN_BF16_ENGINE)
  const int eng = plan->bf16_engine;
#else
  const int eng = 0;
#endif
  const int64_t dp = (d + 1) / 2 * 2;
  const kiln_nn_attn_layout_t lay = kiln_nn_attn_layout(nrp, bk, d, dvp, eng);
#if defined(KILN_NN_ATTN_BF16_ENGINE)
  /* The engine's two products: AMX tiles where allowed, else VDPBF16PS. */
  void (*const bf16_gemm)(int, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                          const uint16_t*, int64_t, float*, int64_t, int, float, const int64_t*,
                          int) = (kiln_cpu_bf16() & KILN_CPU_BF16_AMX)
                                     ? kiln_attn_bf16_gemm__amx
                                     : kiln_attn_bf16_gemm__avx512bf16;
#endif
  _Alignas(64) float scratch[KILN_NN_ATTN_SCRATCH];
  float* qp = scratch;      /* (nrp, d), pre-scaled (bf16 rule: rounded, not scaled) */
  float* kt = qp + lay.q;   /* (d, bk) */
  float* vp = kt + lay.k;   /* (bk, dvp) */
  float* s = vp + lay.v;    /* (sb, bk): scores, then probabilities */
  float* o = s + lay.s;     /* (nrp, dvp) */
  float* m = o + lay.o;     /* running max per row (bf16: its reference point) */
  float* l = m + nrp;       /* running sum per row */
  uint16_t* pb = (uint16_t*)(void*)(lay.p_in_k ? kt : l + nrp); /* (sb, bk) bf16, eng only */
  const int64_t sb = lay.sb; /* rows of S and P: nrp off the engine */
  (void)pb;

  int64_t kv_end = 0;
  for (int64_t r = 0; r < nrp; ++r) {
    if (r < nr) {
      if (!eng && bf && a->q_strides[3] == 1)
        for (int64_t e = 0; e < d; ++e) qp[r * d + e] = kiln_bf16_round_f32(rows[r].q[e]);
      else if (!eng)
        for (int64_t e = 0; e < d; ++e) {
          float x = rows[r].q[e * a->q_strides[3]];
          qp[r * d + e] = bf ? kiln_bf16_round_f32(x) : x * a->scale;
        }
      int64_t end = rows[r].last_key < a->kv_len - 1 ? rows[r].last_key + 1 : a->kv_len;
      kv_end = end > kv_end ? end : kv_end;
    } else if (eng) {
      memset((uint16_t*)(void*)qp + r * dp, 0, (size_t)dp * sizeof(uint16_t));
    } else {
      for (int64_t e = 0; e < d; ++e) qp[r * d + e] = 0.0f;
    }
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
#if defined(KILN_NN_ATTN_BF16_ENGINE)
  if (eng) {
    /* One call when the rows are evenly spaced (no GQA group: consecutive
     * queries), else one per row (a group's heads, then its queries). */
    int64_t rs = nr > 1 ? rows[1].q - rows[0].q : 0;
    int even = 1;
    for (int64_t r = 2; r < nr && even; ++r) even = rows[r].q - rows[r - 1].q == rs;
    if (even)
      kiln_attn_bf16_pack_rows__avx512bf16(nr, d, rows[0].q, rs, a->q_strides[3],
                                           (uint16_t*)(void*)qp, dp);
    else
      for (int64_t r = 0; r < nr; ++r)
        kiln_attn_bf16_pack_rows__avx512bf16(1, d, rows[r].q, 0, a->q_strides[3],
                                             (uint16_t*)(void*)qp + r * dp, dp);
  }
#endif
  memset(o, 0, (size_t)(nrp * dvp) * sizeof(float));
  /* This part's keys: [kv_lo, kv_hi), whole tiles of the unsplit walk. */
  const int64_t kv_lo = plan->kv_parts > 1 ? part * plan->kv_part : 0;
  if (plan->kv_parts > 1 && kv_lo + plan->kv_part < kv_end) kv_end = kv_lo + plan->kv_part;
#if defined(KILN_NN_ATTN_AVX2)
  /* Few rows: scores from K's rows in place (kiln_nn_attn_scores_rows). */
  const int direct = nrp <= 8 && a->k_strides[3] == 1 && d % 8 == 0 && !eng;
#else
  const int direct = 0;
#endif

  const float* kb = a->k + b * a->k_strides[0] + kvh * a->k_strides[1];
  const float* vb = a->v + b * a->v_strides[0] + kvh * a->v_strides[1];
#if defined(KILN_NN_ATTN_AVX2)
  /* The first keys the scores' prefetch does not reach ahead of. */
  if (direct)
    for (int64_t j = kv_lo; j < kv_lo + KILN_NN_ATTN_PF && j < kv_end; ++j)
      kiln_nn_attn_prefetch_row(kb + j * a->k_strides[2], d);
#endif
  for (int64_t j0 = kv_lo; j0 < kv_end; j0 += bk) {
    int64_t nk = kv_end - j0 < bk ? kv_end - j0 : bk;
    int64_t nkp = kiln_nn_round_up(nk, KILN_NN_ATTN_NR);
    /* Keys of the tile each row may see: past the causal limit, and the
     * padding, are hidden; lim is the most any row of a group of mr sees. */
    int hidden = 1;
    const float* checked = NULL; /* rows of a GQA group often share one mask row */
    int64_t checked_vis = 0;
    for (int64_t r = 0; r < nrp; ++r) {
      int64_t lk = r < nr ? rows[r].last_key : -1; /* INT64_MAX when not causal */
      vis[r] = lk >= j0 + nk - 1 ? nk : lk < j0 ? 0 : lk - j0 + 1;
      if (r % mr == 0) lim[r / mr] = 0;
      if (vis[r] > lim[r / mr]) lim[r / mr] = vis[r];
      if (!hidden || vis[r] == 0) continue;
      const float* mrow = rows[r].mask ? rows[r].mask + j0 * a->mask_strides[3] : NULL;
      if (mrow && mrow == checked && vis[r] <= checked_vis) continue;
      hidden = mrow && kiln_nn_attn_all_hidden(mrow, a->mask_strides[3], vis[r]);
      checked = mrow;
      checked_vis = vis[r];
    }
    /* No row may see a key of the tile: it would add e^-inf = 0 to each. */
    if (hidden) continue;
#if defined(KILN_NN_ATTN_AVX2)
    if (direct && bf) {
      kiln_nn_attn_scores_bf16(nrp, nk, d, qp, kb + j0 * a->k_strides[2], a->k_strides[2], s, bk,
                               a->v_strides[3] == 1 ? vb + j0 * a->v_strides[2] : NULL,
                               a->v_strides[2], dv, kv_end - j0);
    } else if (direct) {
      kiln_nn_attn_scores_rows(nrp, nk, d, qp, kb + j0 * a->k_strides[2], a->k_strides[2], s, bk,
                               a->v_strides[3] == 1 ? vb + j0 * a->v_strides[2] : NULL,
                               a->v_strides[2], dv, kv_end - j0);
    } else
#endif
#if defined(KILN_NN_ATTN_BF16_ENGINE)
    if (eng) {
      /* The scores are taken per sub-block, below. */
      kiln_attn_bf16_pack_kt__avx512bf16(kb + j0 * a->k_strides[2], a->k_strides[2],
                                         a->k_strides[3], d, nk, nkp, (uint16_t*)(void*)kt, bk);
    } else
#endif
    {
      (void)direct;
      /* K packed transposed, zero-filled past nk. */
      kiln_nn_attn_pack_k(kb + j0 * a->k_strides[2], a->k_strides[2], a->k_strides[3], d, nk,
                          nkp, kt, bk, bf);
      kiln_nn_attn_gemm(mr, nrp, nkp, d, qp, d, kt, bk, s, bk, 0, lim, 1, 0);
    }
    /* V is packed (zero-filling the padding so 0 · pad = 0) unless full
     * tiles of a contiguous V with Dv % 16 == 0 can be read in place; after
     * the scores, whose walk over K prefetches V's rows (decode: V comes
     * from DRAM). */
    const float* vt = vb + j0 * a->v_strides[2];
    int64_t ldv = a->v_strides[2];
    /* A decode step under the bf16 rule reads V in place too, rounded as
     * the P·V kernel loads it (its one row group reads each value once). */
    const int v_in_place = nk == nkp && dv == dvp && a->v_strides[3] == 1;
    const int round_v = bf && direct && v_in_place;
#if defined(KILN_NN_ATTN_BF16_ENGINE)
    if (eng) {
      kiln_attn_bf16_pack_v__avx512bf16(vt, a->v_strides[2], a->v_strides[3], dv, dvp, nk, nkp,
                                        (uint16_t*)(void*)vp);
    } else
#endif
    if ((bf && !round_v) || !v_in_place) {
      vt = vp;
      ldv = dvp;
      for (int64_t c = 0; c < nkp; ++c) {
        const float* vr = vb + (j0 + c) * a->v_strides[2];
        int64_t e = 0;
        if (c < nk && bf && a->v_strides[3] == 1)
          for (; e < dv; ++e) vp[c * dvp + e] = kiln_bf16_round_f32(vr[e]);
        else if (c < nk && bf)
          for (; e < dv; ++e) vp[c * dvp + e] = kiln_bf16_round_f32(vr[e * a->v_strides[3]]);
        else if (c < nk)
          for (; e < dv; ++e) vp[c * dvp + e] = vr[e * a->v_strides[3]];
        for (; e < dvp; ++e) vp[c * dvp + e] = 0.0f;
      }
    }

    /* Rows in sub-blocks of sb (all nrp off the engine), each through its
     * scores, weights and P·V while its S and P are in L1. */
    for (int64_t rb = 0; rb < nrp; rb += sb) {
      const int64_t re = nrp - rb < sb ? nrp : rb + sb;
#if defined(KILN_NN_ATTN_BF16_ENGINE)
      if (eng)
        bf16_gemm(mr, re - rb, nkp, dp / 2,
                                        (const uint16_t*)(void*)qp + rb * dp, dp,
                                        (const uint16_t*)(void*)kt, bk, s, bk, 0, a->scale,
                                        lim + rb / mr, 1);
#endif
      for (int64_t r = rb; r < re; ++r) {
        float* sr = s + (r - rb) * bk;
        /* The rule scales the fp32 sums (q was packed unscaled; the engine's
         * tile scales as it stores), then adds the mask: two roundings. */
        if (bf && !eng && r < nr && rows[r].mask && a->mask_strides[3] == 1) {
          const float* mk = rows[r].mask + j0;
          for (int64_t c = 0; c < vis[r]; ++c) sr[c] = sr[c] * a->scale + mk[c];
        } else if (bf && !eng) {
          for (int64_t c = 0; c < vis[r]; ++c) sr[c] *= a->scale;
        }
        if (r < nr && rows[r].mask && !(bf && !eng && a->mask_strides[3] == 1)) {
          const float* mk = rows[r].mask + j0 * a->mask_strides[3];
          int64_t ms = a->mask_strides[3];
          if (ms == 1)
            for (int64_t c = 0; c < vis[r]; ++c) sr[c] += mk[c];
          else
            for (int64_t c = 0; c < vis[r]; ++c) sr[c] += mk[c * ms];
        }
        for (int64_t c = vis[r]; c < nkp; ++c) sr[c] = -INFINITY;
        float m_new = kiln_nn_row_max((size_t)nkp, sr);
        /* bf16: the weights are taken against a reference point, a multiple
         * of ln2, moved only when a score passes it (kiln_attention_bf16.h). */
        if (bf && m_new > m[r]) m_new = kiln_attn_bf16_ref_point(m_new);
        m_new = m_new > m[r] ? m_new : m[r];
        /* While every key so far is hidden the max is -inf; subtracting 0
         * instead keeps e^(-inf) = 0 rather than e^(-inf + inf) = NaN. */
        float m_use = m_new == -INFINITY ? 0.0f : m_new;
        float alpha = kiln_nn_exp_negf(m[r] - m_use);
        float acc[KILN_NN_LANES] = {0};
        if (bf) { /* P rounded to bf16 for P·V; l sums it rounded */
          for (int64_t c = 0; c < nkp; ++c) sr[c] = kiln_nn_exp_negf(sr[c] - m_use);
#if defined(KILN_NN_ATTN_BF16_ENGINE)
          kiln_nn_attn_round_sum(nkp, sr, acc, eng ? pb + (r - rb) * bk : NULL);
#else
          kiln_nn_attn_round_sum(nkp, sr, acc, NULL);
#endif
        } else {
          for (int64_t c = 0; c < nkp; c += KILN_NN_LANES)
            for (int j = 0; j < KILN_NN_LANES; ++j) {
              float p = kiln_nn_exp_negf(sr[c + j] - m_use);
              sr[c + j] = p;
              acc[j] += p;
            }
        }
        l[r] = l[r] * alpha + kiln_nn_lanes_sum(acc);
        m[r] = m_new;

        if (alpha != 1.0f) {
          float* orow = o + r * dvp;
          for (int64_t e = 0; e < dvp; ++e) orow[e] *= alpha;
        }
      }
#if defined(KILN_NN_ATTN_BF16_ENGINE)
      if (eng)
        bf16_gemm(mr, re - rb, dvp, nkp / 2, pb, bk,
                                        (const uint16_t*)(void*)vp, dvp, o + rb * dvp, dvp, 1, 1.0f,
                                        lim + rb / mr, 0);
      else
#endif
        kiln_nn_attn_gemm(mr, nrp, dvp, nkp, s, bk, vt, ldv, o, dvp, 1, lim, 0, round_v);
    }
  }

  if (plan->kv_parts > 1) {
    /* Unnormalised rows, m and l for the merge (kiln_nn_internal.h). */
    float* pp = plan->partial + (int64_t)task * kiln_nn_attention_partial_floats(plan);
    float *pm = pp + plan->q_block * dv, *pl = pm + plan->q_block;
    for (int64_t r = 0; r < nr; ++r) {
      memcpy(pp + r * dv, o + r * dvp, (size_t)dv * sizeof(float));
      pm[r] = m[r];
      pl[r] = l[r];
    }
    /* The block's last part to finish merges it (acq_rel: it sees every
     * other part's writes). */
    size_t block = task / (size_t)plan->kv_parts;
    if (atomic_fetch_sub_explicit(&plan->pending[block], 1, memory_order_acq_rel) == 1)
      kiln_nn_attn_merge(plan, block);
    return;
  }
  for (int64_t r = 0; r < nr; ++r) {
    float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    for (int64_t e = 0; e < dv; ++e) rows[r].out[e] = o[r * dvp + e] * inv;
  }
}

