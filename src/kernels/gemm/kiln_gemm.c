/* The GEMM driver: picks the kernels for the running ISA, packs operands,
 * blocks the loops for the caches and spreads the work over the pool.
 *
 * One call runs in chunks (whole batches, or row ranges of one batch when
 * a batch is huge) so the per-call scratch stays bounded. Each chunk is two
 * parallel phases:
 *   1. pack: A into MR-row panels over all of K (shared by every task, so
 *      no thread packs the same rows twice), B into panels if it came
 *      unpacked, and a snapshot of the residual if it aliases C and C will
 *      hold partial sums before the epilogue reads it;
 *   2. compute: tasks are (batch, M tile, N tile). Inside a task the loops
 *      are BLIS's: K blocks of kc (an MR x kc A micro-panel and a kc x NR
 *      B micro-panel live in L1), then NR column strips, then MR row strips
 *      (the mc x kc A block stays in L2 across strips). After the last K
 *      block each tile goes through the epilogue while it is in L1.
 * M <= 8 takes the GEMV path instead: B is the whole cost there, so each
 * task streams a contiguous run of B panels once, all rows of A at a time,
 * several panels per kernel call (parallel streams). An unpacked B stored
 * transposed (a weight given at run time, as torch.compile does) is read
 * in place there, as dot products along its contiguous columns.
 * bf16 B (b_packed_bf16) is widened to fp32 in registers on the GEMV path
 * and a kc x NR micro-panel at a time into an L1 buffer on the blocked
 * path, where every row tile of the strip reuses it; bf16 A is widened as
 * it is packed. Accumulation is fp32 throughout.
 * Quantized weights at M > 8 (kiln_gemm_quant.c) come in through
 * kiln_gemm_f32_fly: the b_fly loops with B dequantized by the tasks, a
 * strip at a time into the L1 buffer when a task has one M block, else a
 * block at a time into the L2 one; the next block's bytes prefetched.
 * bf16 compute (b_packed_bf16_vnni) goes to the bf16 engines
 * (kiln_gemm_bf16_compute.c) when kiln_cpu_bf16() allows one; otherwise it
 * runs here like bf16 weights, from the VNNI panels (widen_vnni, gemv_vnni),
 * with A rounded to bf16 as it is packed. So does a product of two bf16
 * graph values (A and an unpacked B each bf16 or rounded to it: autocast),
 * B then packed into VNNI pairs at run time (kiln_gemm_bf16_compute_values)
 * when there are enough rows to repay it.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

/* One table per ISA level of the family's list (KILN_GEMM_ISAS,
 * kernels/kiln_isa_variant.h). */
static const kiln_gemm_kernels_t kiln_gemm_kernels__generic = {
    .name = "generic", .mr = 4, .nr = 16, .kc = 256, .mc_max = 128,
    .ukernel = kiln_f32_gemm_ukernel_4x16__generic,
    .epilogue = kiln_f32_gemm_epilogue__generic,
    .gemv = kiln_f32_gemv__generic,
    .pack_a = kiln_gemm_pack_a,
    .gemv_bf16 = kiln_f32_bf16w_gemv__generic,
    .widen_bf16 = kiln_bf16w_gemm_widen__generic,
    .pack_b_block = kiln_gemm_pack_b_block,
    .gemv_vnni = kiln_f32_bf16vnni_gemv__generic,
    .widen_vnni = kiln_bf16vnni_gemm_widen__generic,
    .gemv_nt = kiln_f32_gemv_nt__generic,
    .ukernel_vnni = NULL,
    .round_bf16 = kiln_gemm_round_bf16_f32,
};
#ifdef KILN_GEMM_HAVE_X86
static const kiln_gemm_kernels_t kiln_gemm_kernels__avx2 = {
    .name = "avx2", .mr = 6, .nr = 16, .kc = 256, .mc_max = 144,
    .ukernel = kiln_f32_gemm_ukernel_6x16__avx2,
    .epilogue = kiln_f32_gemm_epilogue__avx2,
    .gemv = kiln_f32_gemv__avx2,
    .pack_a = kiln_f32_gemm_pack_a__avx2,
    .gemv_bf16 = kiln_f32_bf16w_gemv__avx2,
    .widen_bf16 = kiln_bf16w_gemm_widen__avx2,
    .pack_b_block = kiln_f32_gemm_pack_b_block__avx2,
    .gemv_vnni = kiln_f32_bf16vnni_gemv__avx2,
    .widen_vnni = kiln_bf16vnni_gemm_widen__avx2,
    .gemv_nt = kiln_f32_gemv_nt__avx2,
    .ukernel_vnni = kiln_f32_bf16vnni_gemm_ukernel_6x16__avx2,
    .round_bf16 = kiln_f32_round_bf16__avx2,
};
/* The (memory-bound) GEMVs gain nothing from zmm: the AVX2 ones, which
 * any AVX-512 CPU runs. The epilogue does (GELU's math): its own. */
static const kiln_gemm_kernels_t kiln_gemm_kernels__avx512 = {
    .name = "avx512", .mr = 8, .nr = 32, .kc = 256, .mc_max = 144,
    .ukernel = kiln_f32_gemm_ukernel_8x32__avx512,
    .epilogue = kiln_f32_gemm_epilogue__avx512,
    .gemv = kiln_f32_gemv__avx2,
    .pack_a = kiln_gemm_pack_a,
    .gemv_bf16 = kiln_f32_bf16w_gemv__avx2,
    .widen_bf16 = kiln_bf16w_gemm_widen__avx2,
    .pack_b_block = kiln_f32_gemm_pack_b_block__avx2,
    .gemv_vnni = kiln_f32_bf16vnni_gemv__avx2,
    .widen_vnni = kiln_bf16vnni_gemm_widen__avx2,
    .gemv_nt = kiln_f32_gemv_nt__avx2,
    .ukernel_vnni = NULL,
    .round_bf16 = kiln_f32_round_bf16__avx2,
};
#endif
#ifdef KILN_GEMM_HAVE_NEON
/* NEON microkernel and GEMVs; packing, epilogue and the bf16 widening stay
 * portable C (which GCC vectorises with ASIMD anyway). */
static const kiln_gemm_kernels_t kiln_gemm_kernels__neon = {
    .name = "neon", .mr = 6, .nr = 16, .kc = 256, .mc_max = 144,
    .ukernel = kiln_f32_gemm_ukernel_6x16__neon,
    .epilogue = kiln_f32_gemm_epilogue__generic,
    .gemv = kiln_f32_gemv__neon,
    .pack_a = kiln_gemm_pack_a,
    .gemv_bf16 = kiln_f32_bf16w_gemv__neon,
    .widen_bf16 = kiln_bf16w_gemm_widen__generic,
    .pack_b_block = kiln_gemm_pack_b_block,
    .gemv_vnni = kiln_f32_bf16vnni_gemv__generic,
    .widen_vnni = kiln_bf16vnni_gemm_widen__generic,
    .gemv_nt = kiln_f32_gemv_nt__generic,
    .ukernel_vnni = NULL,
    .round_bf16 = kiln_gemm_round_bf16_f32,
};
#endif

static const kiln_gemm_kernels_t* const kiln_gemm_variants[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_GEMM_ISAS, &kiln_gemm_kernels);

const kiln_gemm_kernels_t* kiln_gemm_kernels_for(kiln_isa_t isa) {
  return kiln_gemm_variants[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_GEMM_ISAS), isa)];
}

const char* kiln_gemm_bf16_compute_describe(void) {
  unsigned eng = kiln_cpu_bf16();
  if (eng & KILN_CPU_BF16_AMX) return "bf16 compute: AMX tiles (TDPBF16PS)";
  if (eng & KILN_CPU_BF16_AVX512) return "bf16 compute: AVX512_BF16 dot products (VDPBF16PS)";
  const kiln_gemm_kernels_t* kn = kiln_gemm_kernels_for(kiln_cpu_isa());
  if (kn->ukernel_vnni)
    return kn == kiln_gemm_kernels_for(KILN_ISA_AVX2)
               ? "bf16 compute: no bf16 engine: the avx2 fp32 kernels, bf16 pairs widened in "
                 "registers"
               : "bf16 compute: no bf16 engine: the fp32 kernels, bf16 pairs widened in registers";
  return "bf16 compute: no bf16 engine: the fp32 kernels on widened copies of the bf16 weights";
}

const char* kiln_gemm_bf16_values_describe(void) {
  unsigned eng = kiln_cpu_bf16();
  if (eng & KILN_CPU_BF16_AMX)
    return "bf16 products of graph values: AMX tiles (TDPBF16PS), B packed at run time (from 16 "
           "rows and 2^18 multiply-adds; smaller ones on the fp32 kernels)";
  if (eng & KILN_CPU_BF16_AVX512)
    return "bf16 products of graph values: AVX512_BF16 dot products (VDPBF16PS), B packed at run "
           "time (from 16 rows and 2^18 multiply-adds; smaller ones on the fp32 kernels)";
  return "bf16 products of graph values: no bf16 engine: the fp32 kernels on the same bf16 values";
}

const char* kiln_gemm_bf16_in_place_describe(void) {
  if (kiln_cpu_bf16() & KILN_CPU_BF16_AMX)
    return "bf16 weights read in place: AVX512_BF16 dot products (VDPBF16PS) over the rows of x "
           "and of the weight below 16 rows of x; from 16, the weight's rows packed per call "
           "into AMX tiles' pairs (TDPBF16PS)";
  if (kiln_cpu_bf16() & KILN_CPU_BF16_AVX512)
    return "bf16 weights read in place: AVX512_BF16 dot products (VDPBF16PS) over the rows of x "
           "and of the weight (one weight row at a time below 32 rows of x, 4 x 4 tiles from 32)";
  return "bf16 weights read in place: the fp32 kernels widening the rows (a GEMV over them up to "
         "8 rows of x)";
}

const char* kiln_gemm_int8_describe(void) {
  switch (kiln_gemm_int8_engine()) {
    case KILN_GEMM_INT8_VNNI:
      return kiln_gemm_q8a8_amx_tiles()
                 ? "int8 activations: AMX-INT8 tiles (TDPBSSD) for prefill, AVX512-VNNI dot "
                   "products (VPDPBUSD) for decode"
                 : "int8 activations: AVX512-VNNI dot products (VPDPBUSD)";
    case KILN_GEMM_INT8_SDOT:
      return kiln_cpu_features()->neon_i8mm
                 ? "int8 activations: Arm int8 matrix multiply-adds (SMMLA) for prefill, dot "
                   "products (SDOT) for decode"
                 : "int8 activations: Arm dot products (SDOT)";
    default: break;
  }
  switch (kiln_gemm_q8a8_level()) {
    case KILN_ISA_GENERIC: return "int8 activations: the portable integer kernels";
    case KILN_ISA_NEON: return "int8 activations: ASIMD integer multiply-adds (SMLAL)";
    default: return "int8 activations: AVX2 integer dot products (VPMADDWD, VPMADDUBSW)";
  }
}

/* ---- scratch: one cached block, reused call to call ------------------- */

/* Packed-A scratch comes from a one-slot cache (base/kiln_scratch.h) so a
 * steady stream of GEMMs allocates nothing. */
#define KILN_GEMM_CACHE_CAP ((size_t)64 << 20)
/* Per-chunk scratch target, 64 MiB (a build may lower it to exercise the
 * chunking on small shapes). */
#ifndef KILN_GEMM_CHUNK_FLOATS
#define KILN_GEMM_CHUNK_FLOATS ((int64_t)16 << 20)
#endif
static kiln_scratch_cache_t kiln_gemm_scratch_ = KILN_SCRATCH_CACHE_INIT(KILN_GEMM_CACHE_CAP);

static float* kiln_gemm_scratch_get(size_t floats, void** out_block) {
  return kiln_scratch_get(&kiln_gemm_scratch_, floats * sizeof(float), out_block);
}

static void kiln_gemm_scratch_put(void* blk) { kiln_scratch_put(&kiln_gemm_scratch_, blk); }

/* ---- one chunk's shared state ----------------------------------------- */

typedef struct {
  const kiln_gemm_f32_args_t* g;
  const kiln_gemm_kernels_t* kn;
  int gemv;
  int gemv_nt; /* GEMV reading an unpacked B's contiguous columns in place */
  int64_t b0, nb, m0, mlen; /* batches [b0, b0 + nb), rows [m0, m0 + mlen) */
  int64_t kc;
  /* Packed B for batch b0 + bi at bp + bi * bp_bs (bp_bs 0: shared). */
  const float* bp;
  int64_t bp_bs;
  const uint16_t* bp16; /* packed bf16 B (shared by every batch) instead of bp */
  int vnni;             /* bp16 is kiln_gemm_bf16_vnni_pack_b's (A rounded to bf16) */
  float* bp_out; /* non-NULL: phase 1 packs B here */
  /* Unpacked B packed by the compute tasks themselves (bp NULL), a kc x
   * KILN_GEMM_FLY_NB block at a time into a per-thread buffer of fly_slot
   * floats at fly + thread * fly_slot: see kiln_gemm_f32. src: B made
   * by the caller's packer (kiln_gemm_f32_fly) instead of read from g. */
  int b_fly;
  const kiln_gemm_fly_src_t* src;
  float* fly;
  int64_t fly_slot;
  int64_t nb_pack_b;
  /* A: packed panels (blocked) or contiguous rows (GEMV), at ap + bi * ap_bs;
   * NULL on the GEMV path when A is read in place. */
  float* ap;
  int64_t ap_bs;
  /* Residual snapshot (mlen x N per batch) or NULL. */
  float* rsnap;
  /* Phase 1 task counts. */
  int64_t t_a_per_b, t_a, t_b_per_b, t_b, t_r_per_b, t_r;
  /* Phase 2 tiling. */
  int64_t pm, n_m, pn, n_n;
} kiln_gemm_chunk_t;

static int64_t kiln_gemm_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t kiln_gemm_align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* bf16 operands (a_bf16, b_bf16: autocast's saved activations, weights
 * and gradients) on the float32 engines. A transposed one was widened
 * element by element as it was packed (kiln_gemm_bf16.c's packers: a
 * gather per element), the GEMM's whole packing cost over again. Here a
 * block is first widened in the source's own order, runs of contiguous
 * elements (a shift GCC vectorises), then packed by the ISA's float32
 * packer (transposes in registers). Widening is exact: the panels hold the
 * bits the element-by-element packers write. KILN_GEMM_WIDEN_K rows of K
 * at a time keep the block in L1. */
enum { KILN_GEMM_WIDEN_K = 128, KILN_GEMM_WIDEN_ROWS = 64 };

static void kiln_gemm_widen_run(const uint16_t* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = (uint32_t)x[i] << 16;
    memcpy(&y[i], &u, sizeof(u));
  }
}

/* As kiln_gemm_pack_a_bf16 (rows [row0, row0 + rows) of A, element (i, p)
 * at a[i * rs + p * cs], into MR-row panels k * mr floats apart). */
static void kiln_gemm_pack_a_widened(const kiln_gemm_kernels_t* kn, int64_t k, const uint16_t* a,
                                     int64_t rs, int64_t cs, int64_t row0, int64_t rows,
                                     int64_t m_total, float* out) {
  const int mr = kn->mr;
  int64_t live = m_total - row0 < rows ? m_total - row0 : rows; /* rows that exist */
  if ((rs != 1 && cs != 1) || rows > KILN_GEMM_WIDEN_ROWS || live <= 0) {
    kiln_gemm_pack_a_bf16(mr, k, a, rs, cs, row0, rows, m_total, out);
    return;
  }
  float tmp[KILN_GEMM_WIDEN_ROWS * KILN_GEMM_WIDEN_K];
  const uint16_t* src = a + row0 * rs;
  for (int64_t p0 = 0; p0 < k; p0 += KILN_GEMM_WIDEN_K) {
    int64_t kb = k - p0 < KILN_GEMM_WIDEN_K ? k - p0 : KILN_GEMM_WIDEN_K;
    if (rs == 1) /* stored (K, M): tmp[p][i], live rows per p */
      for (int64_t p = 0; p < kb; ++p) kiln_gemm_widen_run(src + (p0 + p) * cs, live, tmp + p * live);
    else /* row-major: tmp[i][p] */
      for (int64_t i = 0; i < live; ++i) kiln_gemm_widen_run(src + i * rs + p0, kb, tmp + i * kb);
    for (int64_t i0 = 0; i0 < rows; i0 += mr) {
      const float* blk = rs == 1 ? tmp + i0 : tmp + i0 * kb;
      int64_t panel_rows = rows - i0 < mr ? rows - i0 : mr;
      /* live - i0 <= 0: a panel of padding, zeros. */
      kn->pack_a(mr, kb, blk, rs == 1 ? 1 : kb, rs == 1 ? live : 1, 0, panel_rows, live - i0,
                 out + (i0 / mr) * k * mr + p0 * mr);
    }
  }
}

/* Packs columns [j0, j1) (j0 a multiple of 16) of rows [0, kc) of an
 * unpacked B (element (p, j) at b[p * rs + j * cs]) into panels
 * `panel_stride` floats apart, the first at out. Row-major B goes a few
 * rows at a time across all the panels, so that each source row is read as
 * one contiguous run rather than 16 floats at a time a whole row apart
 * (which the hardware prefetchers do not follow); transposed B goes panel
 * by panel, each source column being contiguous already. */
static void kiln_gemm_pack_b_cols(const kiln_gemm_kernels_t* kn, int64_t kc, const float* b,
                                  const uint16_t* b16, int round, int64_t rs, int64_t cs,
                                  int64_t j0, int64_t j1, int64_t n, int64_t panel_stride,
                                  float* out) {
  const int P = KILN_GEMM_PANEL;
  if (b16 && rs == 1 && cs != 1) {
    /* A transposed bf16 B: each column widened (contiguous in p), then the
     * float32 packer's register transposes (see kiln_gemm_pack_a_widened). */
    float tmp[KILN_GEMM_PANEL * KILN_GEMM_WIDEN_K];
    for (int64_t jq = j0, q = 0; jq < j1; jq += P, ++q) {
      int64_t w = n - jq < P ? n - jq : P;
      for (int64_t p0 = 0; p0 < kc; p0 += KILN_GEMM_WIDEN_K) {
        int64_t kb = kc - p0 < KILN_GEMM_WIDEN_K ? kc - p0 : KILN_GEMM_WIDEN_K;
        for (int64_t j = 0; j < w; ++j) kiln_gemm_widen_run(b16 + (jq + j) * cs + p0, kb, tmp + j * kb);
        kn->pack_b_block(kb, w, tmp, 1, kb, out + q * panel_stride + p0 * P);
      }
    }
    return;
  }
  int64_t pstep = cs == 1 ? 8 : kc;
  for (int64_t p0 = 0; p0 < kc; p0 += pstep) {
    int64_t kb = kc - p0 < pstep ? kc - p0 : pstep;
    for (int64_t jq = j0, q = 0; jq < j1; jq += P, ++q) {
      int64_t w = n - jq < P ? n - jq : P;
      if (b16) /* a bf16 B (b_bf16): widened as it is packed */
        kiln_gemm_pack_b_block_bf16(kb, w, b16 + p0 * rs + jq * cs, rs, cs,
                                    out + q * panel_stride + p0 * P);
      else {
        float* dst = out + q * panel_stride + p0 * P;
        kn->pack_b_block(kb, w, b + p0 * rs + jq * cs, rs, cs, dst);
        /* b_round_bf16: rounded where it was just written (in L1), as A is
         * after pack_a; padding zeros stay zeros. */
        if (round) kn->round_bf16(dst, kb * P);
      }
    }
  }
}

/* Software prefetch of the source of the next block a b_fly task packs,
 * spread over the row tiles of the current block: at small M the packing
 * is a fifth of the time and waits on memory (B is read once per call, so
 * from L3 or DRAM) unless its lines are already on the way. The region is
 * strided: runs of `inner` lines, `stride` bytes apart, `total` lines in
 * all. */
typedef struct {
  const char* base;
  int64_t stride, inner, total, done;
  int64_t at_inner; /* position within the current run (no division per line) */
} kiln_gemm_pf_t;

/* The source of the kc x [j0, j1) block of B at row pc (rows rs apart,
 * columns cs apart): rows of contiguous columns or columns of contiguous
 * rows; other layouts are not prefetched. */
static void kiln_gemm_pf_init(kiln_gemm_pf_t* pf, const float* b, int64_t rs, int64_t cs,
                              int64_t pc, int64_t kc, int64_t j0, int64_t j1) {
  pf->done = 0;
  pf->total = 0;
  pf->at_inner = 0;
  const int64_t F = (int64_t)sizeof(float);
  if (cs == 1) {
    pf->base = (const char*)(b + pc * rs + j0);
    pf->stride = rs * F;
    pf->inner = ((j1 - j0) * F + 63) / 64 + 1; /* + 1: a run may straddle */
    pf->total = kc * pf->inner;
  } else if (rs == 1) {
    pf->base = (const char*)(b + pc + j0 * cs);
    pf->stride = cs * F;
    pf->inner = (kc * F + 63) / 64 + 1;
    pf->total = (j1 - j0) * pf->inner;
  }
}

/* A region of `runs` runs of `bytes` bytes, `stride` bytes apart. */
static void kiln_gemm_pf_region(kiln_gemm_pf_t* pf, const void* base, int64_t stride,
                                int64_t bytes, int64_t runs) {
  pf->done = 0;
  pf->at_inner = 0;
  pf->base = (const char*)base;
  pf->stride = stride;
  pf->inner = (bytes + 63) / 64 + 1; /* + 1: a run may straddle */
  pf->total = runs * pf->inner;
}

/* Issues up to n more of the region's prefetches (into L2). A prefetch
 * never faults, so the run's straddle line past the end is harmless. */
static inline void kiln_gemm_pf_some(kiln_gemm_pf_t* pf, int64_t n) {
  for (; n > 0 && pf->done < pf->total; --n, ++pf->done) {
    __builtin_prefetch(pf->base + pf->at_inner * 64, 0, 2);
    if (++pf->at_inner == pf->inner) {
      pf->at_inner = 0;
      pf->base += pf->stride;
    }
  }
}

#define KILN_GEMM_A_GROUP 8  /* MR panels per packing task */
#define KILN_GEMM_B_GROUP 16 /* 16-wide panels per packing task */
#define KILN_GEMM_R_GROUP 32 /* residual rows per snapshot task */

static void kiln_gemm_pack_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_chunk_t* ch = p;
  const kiln_gemm_f32_args_t* g = ch->g;
  int64_t t = (int64_t)task;
  if (t < ch->t_a) {
    int64_t bi = t / ch->t_a_per_b, grp = t % ch->t_a_per_b;
    int64_t a_off = (ch->b0 + bi) * g->a_batch_stride + ch->m0 * g->a_row_stride;
    const float* a = g->a_bf16 ? NULL : g->a + a_off;
    const uint16_t* a16 = g->a_bf16 ? g->a_bf16 + a_off : NULL;
    float* out = ch->ap + bi * ch->ap_bs;
    if (ch->gemv) { /* contiguous rows for the GEMV kernel */
      for (int64_t i = 0; i < ch->mlen; ++i)
        for (int64_t q = 0; q < g->k; ++q) {
          int64_t e = i * g->a_row_stride + q * g->a_col_stride;
          out[i * g->k + q] = a16 ? kiln_gemm_bf16_to_f32(a16[e]) : a[e];
        }
      if (ch->vnni || g->a_round_bf16) ch->kn->round_bf16(out, ch->mlen * g->k);
      return;
    }
    int mr = ch->kn->mr;
    int64_t row0 = grp * KILN_GEMM_A_GROUP * mr;
    int64_t rows = ch->mlen - row0 < KILN_GEMM_A_GROUP * mr ? ch->mlen - row0
                                                            : KILN_GEMM_A_GROUP * mr;
    if (a16)
      kiln_gemm_pack_a_widened(ch->kn, g->k, a16, g->a_row_stride, g->a_col_stride, row0, rows,
                               ch->mlen, out + (row0 / mr) * g->k * mr);
    else
      ch->kn->pack_a(mr, g->k, a, g->a_row_stride, g->a_col_stride, row0, rows, ch->mlen,
                     out + (row0 / mr) * g->k * mr);
    if (ch->vnni || g->a_round_bf16)
      ch->kn->round_bf16(out + (row0 / mr) * g->k * mr, (rows + mr - 1) / mr * g->k * mr);
    return;
  }
  t -= ch->t_a;
  if (t < ch->t_b) {
    int64_t bi = t / ch->t_b_per_b, grp = t % ch->t_b_per_b;
    int64_t panels = (g->n + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL;
    int64_t q0 = grp * KILN_GEMM_B_GROUP;
    int64_t q1 = q0 + KILN_GEMM_B_GROUP < panels ? q0 + KILN_GEMM_B_GROUP : panels;
    int64_t j1 = q1 * KILN_GEMM_PANEL < g->n ? q1 * KILN_GEMM_PANEL : g->n;
    int64_t b_off = (ch->b0 + bi) * g->b_batch_stride;
    kiln_gemm_pack_b_cols(ch->kn, g->k, g->b_bf16 ? NULL : g->b + b_off,
                          g->b_bf16 ? g->b_bf16 + b_off : NULL, g->b_round_bf16, g->b_row_stride,
                          g->b_col_stride, q0 * KILN_GEMM_PANEL, j1, g->n,
                          g->k * KILN_GEMM_PANEL,
                          ch->bp_out + bi * ch->bp_bs + q0 * g->k * KILN_GEMM_PANEL);
    return;
  }
  t -= ch->t_b;
  {
    int64_t bi = t / ch->t_r_per_b, grp = t % ch->t_r_per_b;
    int64_t r0 = grp * KILN_GEMM_R_GROUP;
    int64_t r1 = r0 + KILN_GEMM_R_GROUP < ch->mlen ? r0 + KILN_GEMM_R_GROUP : ch->mlen;
    const float* src = g->residual + (ch->b0 + bi) * g->r_batch_stride;
    float* dst = ch->rsnap + bi * ch->mlen * g->n;
    for (int64_t i = r0; i < r1; ++i)
      memcpy(dst + i * g->n, src + (ch->m0 + i) * g->r_row_stride, (size_t)g->n * sizeof(float));
  }
}

/* Where the epilogue reads the residual for batch bi, row i (chunk-relative). */
static const float* kiln_gemm_res_row(const kiln_gemm_chunk_t* ch, int64_t bi, int64_t i,
                                      int64_t* out_ld) {
  const kiln_gemm_f32_args_t* g = ch->g;
  if (!g->residual) {
    *out_ld = 0;
    return NULL;
  }
  if (ch->rsnap) {
    *out_ld = g->n;
    return ch->rsnap + bi * ch->mlen * g->n + i * g->n;
  }
  *out_ld = g->r_row_stride;
  return g->residual + (ch->b0 + bi) * g->r_batch_stride + (ch->m0 + i) * g->r_row_stride;
}

static void kiln_gemm_copy_tile(int64_t m, int64_t n, const float* src, int64_t lds, float* dst,
                                int64_t ldd) {
  for (int64_t i = 0; i < m; ++i) memcpy(dst + i * ldd, src + i * lds, (size_t)n * sizeof(float));
}

static void kiln_gemm_compute_task(void* p, size_t task, int thread) {
  const kiln_gemm_chunk_t* ch = p;
  const kiln_gemm_f32_args_t* g = ch->g;
  const kiln_gemm_kernels_t* kn = ch->kn;
  const int MR = kn->mr, NR = kn->nr, P = KILN_GEMM_PANEL;
  const int64_t K = g->k, N = g->n;
  int64_t per_b = ch->n_m * ch->n_n;
  int64_t bi = (int64_t)task / per_b, im = (int64_t)task % per_b / ch->n_n,
          jn = (int64_t)task % ch->n_n;
  /* Even splits of whole MR row panels and NR column strips. */
  int64_t i0 = im * ch->pm / ch->n_m * MR, i1 = (im + 1) * ch->pm / ch->n_m * MR;
  int64_t j0 = jn * ch->pn / ch->n_n * NR, j1 = (jn + 1) * ch->pn / ch->n_n * NR;
  if (i1 > ch->mlen) i1 = ch->mlen;
  if (j1 > N) j1 = N;
  if (i0 >= i1 || j0 >= j1) return;

  int64_t b = ch->b0 + bi;
  const float* A = ch->ap + bi * ch->ap_bs;
  const float* B = ch->bp ? ch->bp + bi * ch->bp_bs : NULL;
  const int from_g = ch->b_fly && !ch->src;
  const float* Bsrc = from_g && !g->b_bf16 ? g->b + b * g->b_batch_stride : NULL;
  const uint16_t* Bsrc16 = from_g && g->b_bf16 ? g->b_bf16 + b * g->b_batch_stride : NULL;
  const int64_t brs = g->b_row_stride, bcs = g->b_col_stride;
  float* fly = ch->b_fly ? ch->fly + (int64_t)thread * ch->fly_slot : NULL;
  /* Column blocks: KILN_GEMM_FLY_NB wide when packing B here, else one. */
  const int64_t jstep = fly ? KILN_GEMM_FLY_NB : j1 - j0;
  float* C = g->c + b * g->c_batch_stride + ch->m0 * g->c_row_stride;
  const int64_t ldc = g->c_row_stride;
  /* The bias goes in with the first K block, as that block's C input with
   * a row stride of 0 (every row adds the same bias row): a bias-only GEMM
   * then stores straight from the kernel, without the epilogue's pass. */
  const int has_epi = g->act != KILN_ACT_NONE || g->residual;
  _Alignas(64) float tmp[8 * 32]; /* MR x NR for the largest kernel */
  _Alignas(64) float bias_tile[32];
  /* bf16 B: each kc x NR micro-panel widened to fp32 once per strip (kc is
   * at most 256, NR at most 32: 32 KiB), then reused by every row tile. */
  _Alignas(64) float wide[256 * 32];
  /* A B from src, when the task has one M block (each strip used by one
   * run of row tiles): made a strip at a time into wide, whose lines stay
   * in L1 from strip to strip, rather than a block at a time into the L2
   * buffer; the stores then hit L1 instead of waiting on L2. */
  const int src_strips = ch->src && i1 - i0 <= kn->mc_max && ch->kc <= 256;

  for (int64_t pc = 0; pc < K; pc += ch->kc) {
    int64_t kcur = K - pc < ch->kc ? K - pc : ch->kc;
    int first = pc == 0, last = pc + kcur == K;
    for (int64_t jb = j0; jb < j1; jb += jstep) {
      int64_t jb1 = j1 - jb < jstep ? j1 : jb + jstep;
      kiln_gemm_pf_t fpf = {0};
      int64_t fpf_step = 0;
      if (fly) {
        if (src_strips)
          ; /* strip by strip, below */
        else if (ch->src)
          ch->src->pack(ch->src->ctx, pc, kcur, jb, jb1, fly);
        else
          kiln_gemm_pack_b_cols(kn, kcur, Bsrc ? Bsrc + pc * brs : NULL,
                                Bsrc16 ? Bsrc16 + pc * brs : NULL, g->b_round_bf16, brs, bcs, jb,
                                jb1, N, kcur * P, fly);
        /* The next block, rows [npc, npc + nk) of columns [nj0, nj1): the
         * next columns, else the first of the next K block. Its source is
         * prefetched while this block's tiles run (fp32 sources: the
         * prefetcher counts 4-byte elements; a src says where its bytes
         * lie). */
        int64_t npc = -1, nk = 0, nj0 = 0, nj1 = 0;
        if (jb1 < j1) {
          npc = pc, nk = kcur, nj0 = jb1, nj1 = j1 - jb1 < jstep ? j1 : jb1 + jstep;
        } else if (pc + kcur < K) {
          npc = pc + kcur, nk = K - npc < ch->kc ? K - npc : ch->kc;
          nj0 = j0, nj1 = j1 - j0 < jstep ? j1 : j0 + jstep;
        }
        if (npc >= 0 && ch->src) {
          kiln_gemm_fly_region_t r;
          ch->src->where(ch->src->ctx, npc, nk, nj0, nj1, &r);
          kiln_gemm_pf_region(&fpf, r.base, r.stride, r.bytes, r.runs);
        } else if (npc >= 0 && Bsrc) {
          kiln_gemm_pf_init(&fpf, Bsrc, brs, bcs, npc, nk, nj0, nj1);
        }
        /* Row tiles in this block (each M block may end in a partial one). */
        int64_t tiles = kiln_gemm_cdiv(jb1 - jb, NR) *
                        (kiln_gemm_cdiv(i1 - i0, MR) + kiln_gemm_cdiv(i1 - i0, kn->mc_max));
        fpf_step = fpf.total / tiles + 1;
      }
      /* M blocks of at most mc_max rows (the A block stays in L2): a b_fly
       * task covers all of M, the others one block. */
      for (int64_t ib = i0; ib < i1; ib += kn->mc_max) {
        int64_t ib1 = i1 - ib < kn->mc_max ? i1 : ib + kn->mc_max;
        for (int64_t j = jb; j < jb1; j += NR) {
          int64_t nr = jb1 - j < NR ? jb1 - j : NR;
          /* The first K block's C input: nothing, or the strip's bias row
           * (a partial strip's padded to NR in bias_tile so the kernel's
           * full-width loads stay in bounds). */
          const float* bias_row = NULL;
          if (first && g->bias) {
            bias_row = g->bias + j;
            if (nr < NR) {
              memset(bias_tile, 0, sizeof(bias_tile));
              memcpy(bias_tile, g->bias + j, (size_t)nr * sizeof(float));
              bias_row = bias_tile;
            }
          }
          const float *bpan, *bnext;
          /* VNNI panels at an even row: the kernel reads them in place. */
          const uint16_t* bvnni = NULL;
          if (ch->vnni && kn->ukernel_vnni && (pc & 1) == 0) {
            bvnni = ch->bp16 + (j / P) * (K + (K & 1)) * P + pc * P;
            bpan = bnext = NULL;
          } else if (ch->bp16) {
            int panels = nr > P ? 2 : 1;
            if (ch->vnni)
              kn->widen_vnni(kcur, pc, K + (K & 1), panels, ch->bp16 + (j / P) * (K + (K & 1)) * P,
                             wide);
            else
              kn->widen_bf16(kcur, K, panels, ch->bp16 + (j / P) * K * P + pc * P, wide);
            bpan = wide;
            bnext = panels > 1 ? wide + kcur * P : wide;
          } else if (src_strips) {
            ch->src->pack(ch->src->ctx, pc, kcur, j, j + nr, wide);
            bpan = wide;
            bnext = nr > P ? wide + kcur * P : wide;
          } else if (fly) {
            bpan = fly + ((j - jb) / P) * kcur * P;
            bnext = nr > P ? bpan + kcur * P : bpan;
          } else {
            bpan = B + (j / P) * K * P + pc * P;
            /* A 32-wide kernel reads the next panel too; past the last one it
             * re-reads this one (in bounds) and the extra columns are dropped. */
            bnext = nr > P ? bpan + K * P : bpan;
          }
          /* While this strip's tiles run, pull the next strip's B micro-panel
           * (kcur x NR) into L2 a slice per tile, so the strip after does not
           * start on L3 misses. */
          const char* pf = j + NR < j1 && B
                               ? (const char*)(B + ((j + NR) / P) * K * P + pc * P) : NULL;
          int64_t pf_lines = kcur * P * (int64_t)sizeof(float) / 64, pf_done = 0;
          if (bvnni && j + NR < j1) { /* the next strip's VNNI micro-panel, half the lines */
            pf = (const char*)(bvnni + (K + (K & 1)) * P);
            pf_lines = kcur * P * (int64_t)sizeof(uint16_t) / 64;
          }
          int64_t pf_step = pf_lines / ((ib1 - ib + MR - 1) / MR) + 1;
          for (int64_t i = ib; i < ib1; i += MR) {
            int64_t mr = ib1 - i < MR ? ib1 - i : MR;
            kiln_gemm_pf_some(&fpf, fpf_step);
            if (pf) {
              for (int64_t l = 0; l < pf_step && pf_done < pf_lines; ++l, ++pf_done) {
                __builtin_prefetch(pf + pf_done * 64, 0, 2);
                if (NR > P)
                  __builtin_prefetch(pf + K * P * (int64_t)sizeof(float) + pf_done * 64, 0, 2);
              }
            }
            const float* apan = A + (i / MR) * K * MR + pc * MR;
            float* c = C + i * ldc + j;
            int full = mr == MR && nr == NR;
            if (full && (!last || !has_epi)) {
              if (bvnni)
                kn->ukernel_vnni(kcur, apan, bvnni, first ? bias_row : c, first ? 0 : ldc, c, ldc);
              else if (first)
                kn->ukernel(kcur, apan, bpan, bnext, bias_row, 0, c, ldc);
              else
                kn->ukernel(kcur, apan, bpan, bnext, c, ldc, c, ldc);
              continue;
            }
            const float* cin = bias_row;
            int64_t ldcin = first ? 0 : NR;
            if (!first) {
              if (full) {
                cin = c;
                ldcin = ldc;
              } else {
                kiln_gemm_copy_tile(mr, nr, c, ldc, tmp, NR);
                cin = tmp;
              }
            }
            if (last) /* the kernel prefetches the rows it writes, here tmp: ask
                       * for C's, which the epilogue stores, while it runs */
              for (int64_t r = 0; r < mr; ++r) {
                __builtin_prefetch(c + r * ldc, 1, 3);
                __builtin_prefetch(c + r * ldc + nr - 1, 1, 3);
              }
            if (bvnni)
              kn->ukernel_vnni(kcur, apan, bvnni, cin, ldcin, tmp, NR);
            else
              kn->ukernel(kcur, apan, bpan, bnext, cin, ldcin, tmp, NR);
            if (!last) {
              kiln_gemm_copy_tile(mr, nr, tmp, NR, c, ldc);
            } else {
              int64_t ldr;
              const float* r = kiln_gemm_res_row(ch, bi, i, &ldr);
              kn->epilogue(mr, nr, tmp, NR, c, ldc, NULL, r ? r + j : NULL, ldr, g->act);
            }
          }
        }
      }
    }
  }
}

static void kiln_gemm_gemv_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_chunk_t* ch = p;
  const kiln_gemm_f32_args_t* g = ch->g;
  const int P = KILN_GEMM_PANEL;
  int64_t bi = (int64_t)task / ch->n_n, grp = (int64_t)task % ch->n_n;
  int64_t q0 = grp * ch->pn / ch->n_n, q1 = (grp + 1) * ch->pn / ch->n_n;
  int64_t b = ch->b0 + bi;
  const float* a;
  int64_t lda;
  if (ch->ap) {
    a = ch->ap + bi * ch->ap_bs;
    lda = g->k;
  } else {
    a = g->a + b * g->a_batch_stride;
    lda = g->a_row_stride;
  }
  const float* B = ch->bp ? ch->bp + bi * ch->bp_bs : NULL;
  float* C = g->c + b * g->c_batch_stride;
  int64_t ldr;
  const float* r = kiln_gemm_res_row(ch, bi, 0, &ldr);
  _Alignas(64) float tmp[KILN_GEMM_GEMV_PANELS * KILN_GEMM_GEMV_MAX_M * 16];
  if (ch->gemv_nt) { /* 16 columns of C at a time, B read where it lies */
    const kiln_gemm_nt_elem_t elem = g->b_bf16 ? KILN_GEMM_NT_BF16
                                     : g->b_round_bf16 ? KILN_GEMM_NT_F32_ROUNDED
                                                       : KILN_GEMM_NT_F32;
    for (int64_t j = q0 * P; j < q1 * P && j < g->n; j += P) {
      int64_t nr = g->n - j < P ? g->n - j : P, at = b * g->b_batch_stride + j * g->b_col_stride;
      const void* bt = g->b_bf16 ? (const void*)(g->b_bf16 + at) : (const void*)(g->b + at);
      ch->kn->gemv_nt(ch->mlen, nr, g->k, a, lda, bt, g->b_col_stride, elem, tmp);
      ch->kn->epilogue(ch->mlen, nr, tmp, P, C + j, g->c_row_stride, g->bias ? g->bias + j : NULL,
                       r ? r + j : NULL, ldr, g->act);
    }
    return;
  }
  for (int64_t q = q0; q < q1; q += KILN_GEMM_GEMV_PANELS) {
    int np = q1 - q < KILN_GEMM_GEMV_PANELS ? (int)(q1 - q) : KILN_GEMM_GEMV_PANELS;
    if (ch->vnni)
      ch->kn->gemv_vnni(ch->mlen, g->k, a, lda, ch->bp16 + q * (g->k + (g->k & 1)) * P, np, tmp);
    else if (ch->bp16)
      ch->kn->gemv_bf16(ch->mlen, g->k, a, lda, ch->bp16 + q * g->k * P, np, tmp);
    else
      ch->kn->gemv(ch->mlen, g->k, a, lda, B + q * g->k * P, np, tmp);
    for (int s = 0; s < np; ++s) {
      int64_t j = (q + s) * P, nr = g->n - j < P ? g->n - j : P;
      ch->kn->epilogue(ch->mlen, nr, tmp + s * ch->mlen * P, P, C + j, g->c_row_stride,
                       g->bias ? g->bias + j : NULL, r ? r + j : NULL, ldr, g->act);
    }
  }
}

/* K == 0: C = act(bias) + residual, elementwise (residual may be C). */
static void kiln_gemm_k0(const kiln_gemm_f32_args_t* g) {
  for (int64_t b = 0; b < g->batch; ++b)
    for (int64_t i = 0; i < g->m; ++i) {
      float* c = g->c + b * g->c_batch_stride + i * g->c_row_stride;
      const float* r =
          g->residual ? g->residual + b * g->r_batch_stride + i * g->r_row_stride : NULL;
      for (int64_t j = 0; j < g->n; ++j)
        c[j] = kiln_activation_scalar(g->bias ? g->bias[j] : 0.0f, g->act) + (r ? r[j] : 0.0f);
    }
}


static void kiln_gemm_f32_run(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool,
                              const kiln_gemm_fly_src_t* src);

/* c_round_bf16 on a path that does not round its tiles: C's rows rounded
 * in place after the product, a run of rows per task. */
typedef struct {
  const kiln_gemm_f32_args_t* g;
  kiln_gemm_round_bf16_fn round;
  int64_t rows_per;
} kiln_gemm_round_c_t;

static void kiln_gemm_round_c_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_round_c_t* r = p;
  const kiln_gemm_f32_args_t* g = r->g;
  int64_t q0 = (int64_t)task * r->rows_per, q1 = q0 + r->rows_per;
  if (q1 > g->batch * g->m) q1 = g->batch * g->m;
  for (int64_t q = q0; q < q1; ++q)
    r->round(g->c + (q / g->m) * g->c_batch_stride + (q % g->m) * g->c_row_stride, g->n);
}

static void kiln_gemm_round_c(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  /* ~64 Ki elements a task: a pass over memory, worth splitting only when big. */
  int64_t rows = g->batch * g->m, per = ((int64_t)1 << 16) / g->n + 1;
  kiln_gemm_round_c_t r = {g, kiln_gemm_kernels_for(kiln_cpu_isa())->round_bf16, per};
  kiln_pool_parallel_for(pool, (size_t)((rows + per - 1) / per), kiln_gemm_round_c_task, &r);
}

/* The product by whichever path fits; returns 1 when that path rounded C
 * already (c_round_bf16: the bf16 engines round each tile in L1). */
static int kiln_gemm_f32_dispatch(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool);

void kiln_gemm_f32(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0) return;
  if (!kiln_gemm_f32_dispatch(g, pool) && g->c_round_bf16) kiln_gemm_round_c(g, pool);
}

static int kiln_gemm_f32_dispatch(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  if (g->k <= 0) {
    kiln_gemm_k0(g);
    return 0;
  }
  if (g->b_packed_q) {
    kiln_gemm_quant(g, pool);
    return 0;
  }
  if (g->b_packed_bf16_vnni && kiln_gemm_bf16_compute(g, pool)) return 1;
  const int b_unpacked_f32 = g->b && !g->b_packed && !g->b_packed_bf16 && !g->b_bf16;
  /* Two bf16 values (autocast's operands, cast or rounded as packed): the
   * bf16 engines where the CPU has one, B packed at run time. */
  const int a_bf16_valued = g->a_bf16 || g->a_round_bf16;
  const int b_bf16_valued = !g->b_packed_bf16_vnni && !g->b_packed_bf16 && !g->b_packed &&
                            (g->b_bf16 || (g->b_round_bf16 && b_unpacked_f32));
  /* A bf16 model's weight read in place: VDPBF16PS over the rows of both
   * where the CPU has it (else the fp32 paths below widen them). */
  if (g->b_bf16_weight && kiln_gemm_bf16_rows(g, pool)) return 1;
  if (a_bf16_valued && b_bf16_valued && kiln_gemm_bf16_compute_values(g, pool)) return 1;
  kiln_gemm_f32_run(g, pool, NULL);
  return 0;
}

void kiln_gemm_f32_fly(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool,
                       const kiln_gemm_fly_src_t* src) {
  if (g->batch <= 0 || g->m <= 0 || g->n <= 0) return;
  if (g->k <= 0)
    kiln_gemm_k0(g);
  else
    kiln_gemm_f32_run(g, pool, src);
  if (g->c_round_bf16) kiln_gemm_round_c(g, pool);
}

/* The blocked and GEMV driver proper; src: B from the caller's packer. */
static void kiln_gemm_f32_run(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool,
                              const kiln_gemm_fly_src_t* src) {
  const kiln_gemm_kernels_t* kn = kiln_gemm_kernels_for(kiln_cpu_isa());
  if (g->b_packed_bf16_vnni) kiln_gemm_bf16_note_engine(kn->name);
  const int64_t M = g->m, N = g->n, K = g->k, T = kiln_pool_size(pool);
  const int MR = kn->mr;
  kiln_gemm_chunk_t ch;
  memset(&ch, 0, sizeof(ch));
  ch.g = g;
  ch.kn = kn;
  ch.gemv = M <= KILN_GEMM_GEMV_MAX_M && !src;
  ch.src = src;
  /* Even K blocks of at most kc: 768 -> 3 x 256, 1000 -> 4 x 250. */
  ch.kc = kiln_gemm_cdiv(K, kiln_gemm_cdiv(K, kn->kc));

  /* What one batch needs in scratch, in floats. */
  const int64_t pfl = kiln_gemm_cdiv(N, KILN_GEMM_PANEL) * K * KILN_GEMM_PANEL;
  const int unpacked_b = !src && g->b_packed == NULL && g->b_packed_bf16 == NULL &&
                         g->b_packed_bf16_vnni == NULL;
  /* Unpacked B (training: the weights are graph inputs, not constants): a
   * separate packing pass writes all of B out and reads it back, which at
   * small M (each packed element used by only M / MR row tiles) costs as
   * much as the arithmetic. Instead tasks split N only, and each packs its
   * own columns of B a kc x KILN_GEMM_FLY_NB block at a time into an
   * L2-resident buffer right before every M block's row tiles use it, so B
   * is read once and never written out. A B broadcast over several batches
   * is still packed once, up front, and so is B when N has too few strips
   * to keep every thread busy without splitting M, or when B is much
   * narrower than A is tall (splitting N would have every task re-read an
   * A many times the size of B). */
  const int b_fly = src || (unpacked_b && !ch.gemv && (g->batch == 1 || g->b_batch_stride != 0) &&
                           (M <= kn->mc_max ||
                            (kiln_gemm_cdiv(N, kn->nr) * g->batch >= 2 * T && 4 * N >= M)));
  /* At small M an unpacked B whose columns are contiguous (a weight W(N, K)
   * read as W^T, float32 or bf16) needs no packing at all: the GEMV takes
   * dot products of A's rows with W's rows where they lie, so B is read
   * once. */
  const int gemv_nt = ch.gemv && unpacked_b && g->b_row_stride == 1;
  ch.gemv_nt = gemv_nt;
  const int pack_b = unpacked_b && !b_fly && !gemv_nt;
  const int b_per_batch = pack_b && g->b_batch_stride != 0 && g->batch > 1;
  const int a_copy =
      ch.gemv ? (g->a_col_stride != 1 || g->a_bf16 != NULL || g->a_round_bf16 ||
                 g->b_packed_bf16_vnni != NULL)
              : 1;
  /* In-place residual: the first K block overwrites C with partial sums, so
   * the epilogue needs a copy unless one K block does it all (the tile is
   * then read into the epilogue before C is written). */
  const int snap = !ch.gemv && g->residual == g->c && K > ch.kc;
  int64_t per_row = (a_copy ? K : 0) + (snap ? N : 0); /* floats per row of A */
  int64_t m_pad = ch.gemv ? M : kiln_gemm_cdiv(M, MR) * MR;
  int64_t per_batch = kiln_gemm_align16(m_pad * per_row) + (b_per_batch ? pfl : 0);
  int64_t nb, mchunk;
  if (per_batch <= KILN_GEMM_CHUNK_FLOATS || ch.gemv) {
    nb = per_batch > 0 ? KILN_GEMM_CHUNK_FLOATS / per_batch : g->batch;
    if (nb < 1) nb = 1;
    if (nb > g->batch) nb = g->batch;
    mchunk = M;
  } else {
    nb = 1;
    int64_t room = KILN_GEMM_CHUNK_FLOATS - (b_per_batch ? pfl : 0);
    mchunk = room / (per_row > 0 ? per_row : 1) / kn->mc_max * kn->mc_max;
    if (mchunk < kn->mc_max) mchunk = kn->mc_max;
    if (mchunk > M) mchunk = M;
  }
  int64_t a_fl = kiln_gemm_align16((ch.gemv ? M : kiln_gemm_cdiv(mchunk, MR) * MR) * K);
  int64_t r_fl = snap ? kiln_gemm_align16(mchunk * N) : 0;
  int64_t b_fl = pack_b ? (b_per_batch ? nb : 1) * pfl : 0;
  const int64_t fly_slot = b_fly ? ch.kc * KILN_GEMM_FLY_NB : 0;
  b_fl += T * fly_slot;
  size_t total = (size_t)(b_fl + nb * ((a_copy ? a_fl : 0) + r_fl));
  void* blk = NULL;
  float* scratch = total ? kiln_gemm_scratch_get(total, &blk) : NULL;
  if (total && !scratch) {
    /* No memory for packing: stay correct, if slow. */
    kiln_gemm_f32_reference(g);
    return;
  }
  float* bp_region = scratch;
  float* ap_region = scratch ? scratch + b_fl : NULL;
  float* r_region = scratch ? ap_region + nb * (a_copy ? a_fl : 0) : NULL;

  for (int64_t b0 = 0; b0 < g->batch; b0 += nb) {
    int64_t nbc = g->batch - b0 < nb ? g->batch - b0 : nb;
    for (int64_t m0 = 0; m0 < M; m0 += mchunk) {
      int64_t mlen = M - m0 < mchunk ? M - m0 : mchunk;
      ch.b0 = b0;
      ch.nb = nbc;
      ch.m0 = m0;
      ch.mlen = mlen;
      /* Phase 1: pack. */
      ch.bp16 = g->b_packed_bf16_vnni ? g->b_packed_bf16_vnni : g->b_packed_bf16;
      ch.vnni = g->b_packed_bf16_vnni != NULL;
      ch.b_fly = b_fly;
      ch.fly = fly_slot ? bp_region + b_fl - T * fly_slot : NULL;
      ch.fly_slot = fly_slot;
      if (b_fly) {
        ch.bp = NULL;
        ch.bp_bs = 0;
        ch.bp_out = NULL;
      } else if (!pack_b) {
        ch.bp = g->b_packed;
        ch.bp_bs = 0;
        ch.bp_out = NULL;
      } else {
        ch.bp = bp_region;
        ch.bp_bs = b_per_batch ? pfl : 0;
        /* Unpacked B is packed once per batch (once in all if broadcast). */
        int need = m0 == 0 && (b_per_batch || b0 == 0);
        ch.bp_out = need ? bp_region : NULL;
      }
      ch.ap = a_copy ? ap_region : NULL;
      ch.ap_bs = a_fl;
      ch.rsnap = snap ? r_region : NULL;
      ch.t_a_per_b = !a_copy ? 0 : ch.gemv ? 1
                                           : kiln_gemm_cdiv(kiln_gemm_cdiv(mlen, MR), KILN_GEMM_A_GROUP);
      ch.t_a = ch.t_a_per_b * nbc;
      ch.t_b_per_b = ch.bp_out ? kiln_gemm_cdiv(kiln_gemm_cdiv(N, KILN_GEMM_PANEL), KILN_GEMM_B_GROUP) : 0;
      ch.t_b = ch.t_b_per_b * (b_per_batch ? nbc : 1);
      ch.t_r_per_b = snap ? kiln_gemm_cdiv(mlen, KILN_GEMM_R_GROUP) : 0;
      ch.t_r = ch.t_r_per_b * nbc;
      kiln_pool_parallel_for(pool, (size_t)(ch.t_a + ch.t_b + ch.t_r), kiln_gemm_pack_task, &ch);

      /* Phase 2: compute. */
      if (ch.gemv) {
        ch.pn = kiln_gemm_cdiv(N, KILN_GEMM_PANEL);
        /* A few tasks per thread so the atomic hand-out evens them out;
         * each is a contiguous run of panels, one long sequential read. */
        ch.n_n = T > 1 ? kiln_gemm_cdiv(4 * T, nbc) : 1;
        if (ch.n_n > ch.pn) ch.n_n = ch.pn;
        kiln_pool_parallel_for(pool, (size_t)(nbc * ch.n_n), kiln_gemm_gemv_task, &ch);
        continue;
      }
      ch.pm = kiln_gemm_cdiv(mlen, MR);
      /* b_fly: tasks split N only, so each packs its own columns of B once;
       * a B from src (always b_fly) splits M too when N has too few strips
       * for the threads: a block is then made once per M block, which for
       * quantized weights (a few KiB read per block) costs little. */
      ch.n_m = kiln_gemm_cdiv(ch.pm, kn->mc_max / MR);
      if (b_fly && !(src && kiln_gemm_cdiv(N, kn->nr) * nbc < 2 * T)) ch.n_m = 1;
      ch.pn = kiln_gemm_cdiv(N, kn->nr);
      /* Columns per task: bounded so a task's C block does not dwarf the
       * caches, then split further until the tasks divide evenly over the
       * threads, two at least per thread so that one thread delayed by the
       * OS does not idle the other for a whole half. A is packed once and
       * shared, so N-splitting costs only L2 refills of the A block; this is
       * how small-M GEMMs (M = 128) get their parallelism. */
      ch.n_n = kiln_gemm_cdiv(N, 2048);
      int64_t units = nbc * ch.n_m;
      while (T > 1 && ((units * ch.n_n) % T != 0 || units * ch.n_n < 2 * T) && ch.n_n < ch.pn)
        ch.n_n++;
      if (ch.n_n > ch.pn) ch.n_n = ch.pn;
      kiln_pool_parallel_for(pool, (size_t)(nbc * ch.n_m * ch.n_n), kiln_gemm_compute_task, &ch);
    }
  }
  kiln_gemm_scratch_put(blk);
}
