/* The bf16-compute driver: C = act(round_bf16(A) . B_bf16 + bias) + residual
 * with fp32 sums, on the bf16 engines kiln_cpu_bf16() allows (AMX tiles,
 * VDPBF16PS), for a B packed by kiln_gemm_bf16_vnni_pack_b at compile time
 * (a weight) or, kiln_gemm_bf16_compute_values, for two bf16 graph values
 * (autocast's products in training: x W^T, dY W, dY^T X), B then packed
 * into the same VNNI pairs here, once or per batch, in parallel over its
 * panels.
 *
 * Per batch, two parallel phases (three when B is packed here): A (rows of
 * unit stride, transposed, or any strides) is rounded into bf16 rows (64
 * rows per task; rows padded with zeros to a multiple of 16 and columns to
 * ka, a multiple of 32, which is what the tile loads read), then tasks of
 * (M block, run of 32-column strips) each compute their block over all of
 * K and store it through the fp32 epilogue. A batch of small products (at
 * least one per thread, each at most 2^24 multiply-adds: attention's per
 * head) instead runs a batch per task, packing and computing in the
 * thread's own slot of scratch. The M block keeps its A rows (mc x ka
 * bf16, about 512 KiB) in L2 while the strips' B panels stream past; each
 * strip's B (32 columns x K) is reused by every row tile of the block.
 *
 * Which engine: AMX whenever allowed, even for a few rows: measured on a
 * Sapphire Rapids core, N = K = 3072, AMX's 16-row tiles (mostly padding)
 * still beat VDPBF16PS at M = 8 (222 against 112 GFLOP/s) and tie at M = 1
 * (both read B at the memory's rate).
 * Neither allowed: kiln_gemm_bf16_compute returns 0 and kiln_gemm_f32 runs
 * its fp32 kernels on the weights widened in registers (the same products:
 * bf16 x bf16 is exact in fp32). */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

static _Thread_local const char* kiln_gemm_bf16_engine_ = "none";

void kiln_gemm_bf16_note_engine(const char* name) { kiln_gemm_bf16_engine_ = name; }
const char* kiln_gemm_bf16_last_engine(void) { return kiln_gemm_bf16_engine_; }

#ifdef KILN_GEMM_HAVE_X86

static kiln_scratch_cache_t kiln_gemm_bf16_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)64 << 20);

typedef struct {
  kiln_gemm_bf16_block_t blk;
  kiln_gemm_bf16_block_fn block;
  const float* a;
  const uint16_t* a16;
  int64_t a_rs, a_cs, m, m_pad;
  uint16_t* a_out;
  int64_t mc, n_m, strips, n_n;
  /* B packed at run time (kiln_gemm_bf16_compute_values): the current
   * batch's source and the panels each packing task takes. */
  const float* b;
  const uint16_t* b16;
  int64_t b_rs, b_cs, b_per;
  uint16_t* b_out;
} kiln_gemm_bf16_chunk_t;

#define KILN_GEMM_BF16_A_ROWS 64
#define KILN_GEMM_BF16_A_COLS 64
#define KILN_GEMM_BF16_VALUES_MIN_M 16
#define KILN_GEMM_BF16_VALUES_MIN_MACS ((int64_t)1 << 18)
/* Products of at most this many multiply-adds (~0.1 ms on a core) in a
 * batch of at least one per thread go a batch per task. */
#define KILN_GEMM_BF16_BATCH_MACS ((int64_t)1 << 24)
/* Panels of B per packing task: 4 x K x 64 bytes (256 KiB at K = 1024). */
#define KILN_GEMM_BF16_B_PANELS 4
/* A bf16 weight's rows read in place (kiln_gemm_bf16_rows): below this many
 * rows of A, one row of W at a time against up to 8 of A (W streams from
 * memory as one sequential read: 4 rows side by side, 4 short streams,
 * ran M = 4 at half the speed on a Zen 4 core); from it, tiles of 4 x 4
 * (compute-bound: 0.83-0.87x the packed engine at 128 rows). */
#define KILN_GEMM_BF16_ROWS_TILE_M 32
/* ... except on AMX from this many rows (prompts): there VDPBF16PS's peak is
 * half the fp32 FMA's, and the rows kernels ran 128-row products at 0.09-
 * 0.16x the packed AMX GEMM (a Sapphire Rapids-class core). W's rows are
 * packed into VNNI pairs per call instead, as graph values are, in column
 * chunks of at most KILN_GEMM_BF16_ROWS_AMX_CHUNK bytes (an lm_head's
 * 32000 x 2048 would otherwise take 131 MB of scratch), and AMX tiles run. */
#define KILN_GEMM_BF16_ROWS_AMX_MIN_M 16
#define KILN_GEMM_BF16_ROWS_AMX_CHUNK ((int64_t)8 << 20)

static void kiln_gemm_bf16_pack_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_bf16_chunk_t* ch = p;
  int64_t r0 = (int64_t)task * KILN_GEMM_BF16_A_ROWS;
  int64_t r1 = r0 + KILN_GEMM_BF16_A_ROWS < ch->m_pad ? r0 + KILN_GEMM_BF16_A_ROWS : ch->m_pad;
  int64_t live = ch->m - r0 < 0 ? 0 : ch->m - r0 < r1 - r0 ? ch->m - r0 : r1 - r0;
  kiln_bf16_gemm_pack_a__avx512(live, r1 - r0, ch->blk.k, ch->blk.ka,
                               ch->a ? ch->a + r0 * ch->a_rs : NULL,
                               ch->a16 ? ch->a16 + r0 * ch->a_rs : NULL, ch->a_rs, ch->a_cs,
                               ch->a_out + r0 * ch->blk.ka);
}

/* A transposed (dW = dY^T X's dY^T): KILN_GEMM_BF16_A_COLS columns of
 * every row per task (kiln_bf16_gemm_pack_a_t__avx512 says why). */
static void kiln_gemm_bf16_pack_t_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_bf16_chunk_t* ch = p;
  int64_t p0 = (int64_t)task * KILN_GEMM_BF16_A_COLS;
  int64_t p1 = p0 + KILN_GEMM_BF16_A_COLS < ch->blk.ka ? p0 + KILN_GEMM_BF16_A_COLS : ch->blk.ka;
  kiln_bf16_gemm_pack_a_t__avx512(ch->m, ch->m_pad, ch->blk.k, ch->blk.ka, p0, p1, ch->a, ch->a16,
                                  ch->a_cs, ch->a_out);
}

static void kiln_gemm_bf16_pack_b_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_bf16_chunk_t* ch = p;
  int64_t q0 = (int64_t)task * ch->b_per, q1 = q0 + ch->b_per;
  int64_t panels = (ch->blk.n + KILN_GEMM_PANEL - 1) / KILN_GEMM_PANEL;
  if (q1 > panels) q1 = panels;
  kiln_bf16_gemm_pack_b_vnni__avx512(ch->blk.k, ch->blk.n, q0, q1, ch->b, ch->b16, ch->b_rs,
                                     ch->b_cs, ch->b_out);
}

static void kiln_gemm_bf16_compute_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_bf16_chunk_t* ch = p;
  int64_t im = (int64_t)task / ch->n_n, jn = (int64_t)task % ch->n_n;
  int64_t i0 = im * ch->mc, i1 = i0 + ch->mc < ch->m ? i0 + ch->mc : ch->m;
  int64_t s0 = jn * ch->strips / ch->n_n, s1 = (jn + 1) * ch->strips / ch->n_n;
  int64_t j0 = s0 * 32, j1 = s1 * 32 < ch->blk.n ? s1 * 32 : ch->blk.n;
  if (i0 >= i1 || j0 >= j1) return;
  ch->block(&ch->blk, i0, i1, j0, j1);
}

static int64_t kiln_gemm_bf16_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* One batch whole, in the thread's slot of scratch (its own B when B has a
 * batch stride, then its A): the by-batch split of kiln_gemm_bf16_run. */
typedef struct {
  const kiln_gemm_bf16_chunk_t* proto;
  const kiln_gemm_f32_args_t* g;
  unsigned char* slots;
  size_t slot_bytes, b_bytes; /* b_bytes 0: B shared, packed at proto's b_out */
} kiln_gemm_bf16_batches_t;

static void kiln_gemm_bf16_batch_task(void* p, size_t task, int thread) {
  const kiln_gemm_bf16_batches_t* t = p;
  const kiln_gemm_f32_args_t* g = t->g;
  kiln_gemm_bf16_chunk_t ch = *t->proto;
  const int64_t b = (int64_t)task, a_off = b * g->a_batch_stride;
  unsigned char* slot = t->slots + (size_t)thread * t->slot_bytes;
  ch.a_out = (uint16_t*)(void*)(slot + t->b_bytes);
  ch.blk.a = ch.a_out;
  ch.blk.c = g->c + b * g->c_batch_stride;
  ch.blk.res = g->residual ? g->residual + b * g->r_batch_stride : NULL;
  if (t->b_bytes) {
    int64_t b_off = b * g->b_batch_stride;
    ch.b_out = (uint16_t*)(void*)slot;
    ch.blk.b = ch.b_out;
    kiln_bf16_gemm_pack_b_vnni__avx512(ch.blk.k, ch.blk.n, 0, kiln_gemm_bf16_cdiv(ch.blk.n, KILN_GEMM_PANEL),
                                       g->b_bf16 ? NULL : g->b + b_off,
                                       g->b_bf16 ? g->b_bf16 + b_off : NULL, ch.b_rs, ch.b_cs,
                                       ch.b_out);
  }
  kiln_bf16_gemm_pack_a__avx512(ch.m, ch.m_pad, ch.blk.k, ch.blk.ka, g->a_bf16 ? NULL : g->a + a_off,
                               g->a_bf16 ? g->a_bf16 + a_off : NULL, ch.a_rs, ch.a_cs, ch.a_out);
  for (int64_t i0 = 0; i0 < ch.m; i0 += ch.mc)
    ch.block(&ch.blk, i0, i0 + ch.mc < ch.m ? i0 + ch.mc : ch.m, 0, ch.blk.n);
}

/* Both entries: B packed (g->b_packed_bf16_vnni) or, with `values`, g's
 * unpacked B packed here, once or per batch when it has a batch stride. */
static int kiln_gemm_bf16_run(const kiln_gemm_f32_args_t* g, int values, kiln_pool_t* pool) {
  unsigned eng = kiln_cpu_bf16();
  if (!eng) return 0;
  const int64_t M = g->m, N = g->n, K = g->k, T = kiln_pool_size(pool);
  int amx = (eng & KILN_CPU_BF16_AMX) != 0;
  kiln_gemm_bf16_chunk_t ch;
  memset(&ch, 0, sizeof(ch));
  ch.block = amx ? kiln_bf16_gemm_block__amx : kiln_bf16_gemm_block__avx512bf16;
  ch.blk.k = K;
  ch.blk.kp = K + (K & 1);
  ch.blk.ka = (K + 31) & ~(int64_t)31;
  ch.blk.n = N;
  ch.blk.b = g->b_packed_bf16_vnni;
  ch.blk.ldc = g->c_row_stride;
  ch.blk.bias = g->bias;
  ch.blk.ldr = g->r_row_stride;
  ch.blk.act = g->act;
  ch.blk.epilogue = kiln_gemm_kernels_for(KILN_ISA_AVX512)->epilogue;
  ch.blk.round = g->c_round_bf16 ? kiln_gemm_kernels_for(KILN_ISA_AVX512)->round_bf16 : NULL;
  ch.m = M;
  ch.m_pad = (M + 15) & ~(int64_t)15;
  ch.a_rs = g->a_row_stride;
  ch.a_cs = g->a_col_stride;
  /* M blocks whose A rows fit about 512 KiB of L2, in whole 32-row tiles. */
  int64_t mc = ((int64_t)512 << 10) / (ch.blk.ka * 2) / 32 * 32;
  ch.mc = mc < 32 ? 32 : mc > 256 ? 256 : mc;
  ch.n_m = kiln_gemm_bf16_cdiv(M, ch.mc);
  ch.strips = kiln_gemm_bf16_cdiv(N, 32);
  /* Strip runs: at most 1024 columns, then more until every thread has two. */
  ch.n_n = kiln_gemm_bf16_cdiv(N, 1024);
  while (ch.n_m * ch.n_n < 2 * T && ch.n_n < ch.strips) ch.n_n++;
  /* Whole rounds: a task count that is not a multiple of the threads
   * leaves threads idle through the last round (MiniLM's output layer,
   * 1024 x 384 x 1536: 7 blocks of 160 rows on 2 threads ran at 0.88x
   * twice one thread's speed). Thinner row blocks, in whole 32-row tiles,
   * until the count divides, while threads keep at most 4 tasks each and
   * the last block is at least half as tall as the others. */
  for (int64_t nm = ch.n_m + 1; T > 1 && (ch.n_m * ch.n_n) % T && nm * ch.n_n <= 4 * T; ++nm) {
    int64_t mc2 = (kiln_gemm_bf16_cdiv(M, nm) + 31) / 32 * 32, nm2 = kiln_gemm_bf16_cdiv(M, mc2);
    if ((nm2 * ch.n_n) % T == 0 && 2 * (M - (nm2 - 1) * mc2) >= mc2) {
      ch.mc = mc2;
      ch.n_m = nm2;
    }
  }
  ch.b_rs = g->b_row_stride;
  ch.b_cs = g->b_col_stride;
  ch.b_per = KILN_GEMM_BF16_B_PANELS;
  const int64_t panels = kiln_gemm_bf16_cdiv(N, KILN_GEMM_PANEL);

  const size_t a_bytes = (size_t)(ch.m_pad * ch.blk.ka) * sizeof(uint16_t);
  const size_t b_bytes = values ? (kiln_gemm_bf16_vnni_packed_size(K, N) + 63) & ~(size_t)63 : 0;
  /* Many small products (attention's per-head ones): a task per batch,
   * each packing and computing its own in its thread's slot, instead of
   * three parallel phases per batch whose hand-offs would cost more than
   * the products. */
  const int by_batch = g->batch > 1 && g->batch >= T && M * N * K <= KILN_GEMM_BF16_BATCH_MACS;
  const int b_own = values && g->b_batch_stride != 0; /* B packed per batch */
  const size_t b_shared = values && !b_own ? b_bytes : 0;
  const size_t slot = by_batch ? (b_own ? b_bytes : 0) + a_bytes : 0;
  const size_t total = by_batch ? b_shared + slot * (size_t)T : b_bytes + a_bytes;
  void* scratch_blk = NULL;
  unsigned char* buf = kiln_scratch_get(&kiln_gemm_bf16_scratch_, total, &scratch_blk);
  if (!buf) return 0; /* no memory: the fp32 path needs none for the rounding */
  ch.a_out = (uint16_t*)(void*)(buf + b_bytes);
  ch.blk.a = ch.a_out;
  if (values) {
    ch.b_out = (uint16_t*)(void*)buf;
    ch.blk.b = ch.b_out;
  }
  if (by_batch) {
    if (b_shared) { /* one B for every batch: packed once, in parallel */
      ch.b = g->b_bf16 ? NULL : g->b;
      ch.b16 = g->b_bf16;
      kiln_pool_parallel_for(pool, (size_t)kiln_gemm_bf16_cdiv(panels, ch.b_per),
                             kiln_gemm_bf16_pack_b_task, &ch);
    }
    kiln_gemm_bf16_batches_t bt = {&ch, g, buf + b_shared, slot, b_own ? b_bytes : 0};
    kiln_pool_parallel_for(pool, (size_t)g->batch, kiln_gemm_bf16_batch_task, &bt);
  }
  for (int64_t b = 0; b < g->batch && !by_batch; ++b) {
    int64_t a_off = b * g->a_batch_stride;
    ch.a = g->a_bf16 ? NULL : g->a + a_off;
    ch.a16 = g->a_bf16 ? g->a_bf16 + a_off : NULL;
    ch.blk.c = g->c + b * g->c_batch_stride;
    ch.blk.res = g->residual ? g->residual + b * g->r_batch_stride : NULL;
    if (values && (b == 0 || g->b_batch_stride)) {
      int64_t b_off = b * g->b_batch_stride;
      ch.b = g->b_bf16 ? NULL : g->b + b_off;
      ch.b16 = g->b_bf16 ? g->b_bf16 + b_off : NULL;
      kiln_pool_parallel_for(pool, (size_t)kiln_gemm_bf16_cdiv(panels, ch.b_per),
                             kiln_gemm_bf16_pack_b_task, &ch);
    }
    if (ch.a_rs == 1 && ch.a_cs != 1)
      kiln_pool_parallel_for(pool, (size_t)kiln_gemm_bf16_cdiv(ch.blk.ka, KILN_GEMM_BF16_A_COLS),
                             kiln_gemm_bf16_pack_t_task, &ch);
    else
      kiln_pool_parallel_for(pool, (size_t)kiln_gemm_bf16_cdiv(ch.m_pad, KILN_GEMM_BF16_A_ROWS),
                             kiln_gemm_bf16_pack_task, &ch);
    kiln_pool_parallel_for(pool, (size_t)(ch.n_m * ch.n_n), kiln_gemm_bf16_compute_task, &ch);
  }
  kiln_scratch_put(&kiln_gemm_bf16_scratch_, scratch_blk);
  kiln_gemm_bf16_note_engine(amx ? "amx" : "avx512_bf16");
  return 1;
}

int kiln_gemm_bf16_compute(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  return kiln_gemm_bf16_run(g, 0, pool);
}

/* kiln_gemm_bf16_rows: tasks of (M block, run of 16-column chunks); per
 * chunk (16 rows of W, which stay in L1/L2) every 4-row tile of the M
 * block (its A rows stay in L2) into a 4 x 16 tile of sums, then through
 * the fp32 epilogue and the rounding into C. */
typedef struct {
  const kiln_gemm_f32_args_t* g;
  int64_t mc, n_m, chunks, n_n;
  int by_row; /* one row of W at a time (kiln_bf16_rows_gemv__avx512bf16): few rows of A */
  kiln_gemm_epilogue_fn epilogue;
  kiln_gemm_round_bf16_fn round;
} kiln_gemm_bf16_rows_t;

static void kiln_gemm_bf16_rows_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_bf16_rows_t* r = p;
  const kiln_gemm_f32_args_t* g = r->g;
  const int P = KILN_GEMM_PANEL;
  int64_t im = (int64_t)task / r->n_n, jn = (int64_t)task % r->n_n;
  int64_t i0 = im * r->mc, i1 = i0 + r->mc < g->m ? i0 + r->mc : g->m;
  int64_t c0 = jn * r->chunks / r->n_n, c1 = (jn + 1) * r->chunks / r->n_n;
  _Alignas(64) float tile[KILN_GEMM_GEMV_MAX_M * KILN_GEMM_PANEL];
  const int64_t step = r->by_row ? KILN_GEMM_GEMV_MAX_M : 4;
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t j = c * P, nr = g->n - j < P ? g->n - j : P;
    const uint16_t* w = g->b_bf16 + j * g->b_col_stride;
    for (int64_t i = i0; i < i1; i += step) {
      const int64_t mr = i1 - i < step ? i1 - i : step;
      const uint16_t* a = g->a_bf16 + i * g->a_row_stride;
      if (r->by_row)
        kiln_bf16_rows_gemv__avx512bf16(mr, nr, g->k, a, g->a_row_stride, w, g->b_col_stride, tile);
      else
        kiln_bf16_rows_gemm__avx512bf16(mr, nr, g->k, a, g->a_row_stride, w, g->b_col_stride,
                                        tile, P);
      float* cij = g->c + i * g->c_row_stride + j;
      r->epilogue(mr, nr, tile, P, cij, g->c_row_stride, g->bias ? g->bias + j : NULL,
                  g->residual ? g->residual + i * g->r_row_stride + j : NULL, g->r_row_stride,
                  g->act);
      for (int64_t q = 0; r->round && q < mr; ++q) r->round(cij + q * g->c_row_stride, nr);
    }
  }
}

static void kiln_gemm_bf16_rows_vdp(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool);

int kiln_gemm_bf16_rows(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  if (!(kiln_cpu_bf16() & KILN_CPU_BF16_AVX512) || g->batch != 1 || !g->a_bf16 ||
      g->a_col_stride != 1 || !g->b_bf16 || !g->b_bf16_weight || g->b_row_stride != 1 ||
      g->k <= 0)
    return 0;
  if (!(kiln_cpu_bf16() & KILN_CPU_BF16_AMX) || g->m < KILN_GEMM_BF16_ROWS_AMX_MIN_M) {
    kiln_gemm_bf16_rows_vdp(g, pool);
    return 1;
  }
  /* AMX: W's rows in column chunks, each packed and run on the tiles (a
   * chunk whose scratch cannot be had runs on the rows kernels). */
  int64_t nc = KILN_GEMM_BF16_ROWS_AMX_CHUNK / (2 * g->k) / 32 * 32;
  if (nc < 32) nc = 32;
  for (int64_t n0 = 0; n0 < g->n; n0 += nc) {
    kiln_gemm_f32_args_t c = *g;
    c.n = g->n - n0 < nc ? g->n - n0 : nc;
    c.b_bf16 = g->b_bf16 + n0 * g->b_col_stride;
    c.c = g->c + n0;
    c.bias = g->bias ? g->bias + n0 : NULL;
    c.residual = g->residual ? g->residual + n0 : NULL;
    if (!kiln_gemm_bf16_run(&c, 1, pool)) kiln_gemm_bf16_rows_vdp(&c, pool);
  }
  return 1;
}

/* The rows kernels (VDPBF16PS), no packing. */
static void kiln_gemm_bf16_rows_vdp(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  const int64_t T = kiln_pool_size(pool);
  kiln_gemm_bf16_rows_t r;
  r.g = g;
  /* M blocks whose A rows fit about 512 KiB of L2, in whole 4-row tiles. */
  int64_t mc = ((int64_t)512 << 10) / (g->k * 2) / 4 * 4;
  r.mc = mc < 4 ? 4 : mc > 256 ? 256 : mc;
  r.n_m = kiln_gemm_bf16_cdiv(g->m, r.mc);
  r.chunks = kiln_gemm_bf16_cdiv(g->n, KILN_GEMM_PANEL);
  /* Runs of at most 512 columns, then more until every thread has two. */
  r.n_n = kiln_gemm_bf16_cdiv(g->n, 512);
  while (r.n_m * r.n_n < 2 * T && r.n_n < r.chunks) r.n_n++;
  r.by_row = g->m < KILN_GEMM_BF16_ROWS_TILE_M;
  r.epilogue = kiln_gemm_kernels_for(KILN_ISA_AVX512)->epilogue;
  r.round = g->c_round_bf16 ? kiln_gemm_kernels_for(KILN_ISA_AVX512)->round_bf16 : NULL;
  kiln_pool_parallel_for(pool, (size_t)(r.n_m * r.n_n), kiln_gemm_bf16_rows_task, &r);
  kiln_gemm_bf16_note_engine("avx512_bf16");
}

int kiln_gemm_bf16_compute_values(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  /* Packing B costs about what M / 16 rows of products do: below 16 rows
   * (decode's steps) and for tiny products the fp32 kernels, which read B
   * in place, are as fast. KILN_BF16_VALUES=all (for tests: the fuzzer's
   * bf16-engine path) sends every such product to the engine, so small,
   * odd shapes exercise its run-time packing. The fp32 kernels compute the
   * same products (bf16 x bf16 is exact in fp32) in another order. */
  if (g->m < KILN_GEMM_BF16_VALUES_MIN_M || g->m * g->n * g->k < KILN_GEMM_BF16_VALUES_MIN_MACS) {
    const char* all = getenv("KILN_BF16_VALUES"); /* only below the thresholds: a test knob */
    if (!all || strcmp(all, "all")) return 0;
  }
  return kiln_gemm_bf16_run(g, 1, pool);
}

#else

int kiln_gemm_bf16_compute(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  (void)g;
  (void)pool;
  return 0;
}

int kiln_gemm_bf16_compute_values(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  (void)g;
  (void)pool;
  return 0;
}

int kiln_gemm_bf16_rows(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  (void)g;
  (void)pool;
  return 0;
}

#endif
