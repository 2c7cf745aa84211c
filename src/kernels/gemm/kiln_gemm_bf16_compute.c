/* The bf16-compute driver: C = act(round_bf16(A) . B_bf16 + bias) + residual
 * with fp32 sums, on the bf16 engines kiln_cpu_bf16() allows (AMX tiles,
 * VDPBF16PS), for a B packed by kiln_gemm_bf16_vnni_pack_b.
 *
 * Per batch, two parallel phases: A is rounded into bf16 rows (64 rows per
 * task; rows padded with zeros to a multiple of 16 and columns to ka, a
 * multiple of 32, which is what the tile loads read), then tasks of (M
 * block, run of 32-column strips) each compute their block over all of K
 * and store it through the fp32 epilogue. The M block keeps its A rows
 * (mc x ka bf16, about 512 KiB) in L2 while the strips' B panels stream
 * past; each strip's B (32 columns x K) is reused by every row tile of the
 * block.
 *
 * Which engine: AMX whenever allowed, even for a few rows: measured on a
 * Sapphire Rapids core, N = K = 3072, AMX's 16-row tiles (mostly padding)
 * still beat VDPBF16PS at M = 8 (222 against 112 GFLOP/s) and tie at M = 1
 * (both read B at the memory's rate).
 * Neither allowed: kiln_gemm_bf16_compute returns 0 and kiln_gemm_f32 runs
 * its fp32 kernels on the weights widened in registers (the same products:
 * bf16 x bf16 is exact in fp32). */
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
  int64_t a_rs, m, m_pad;
  uint16_t* a_out;
  int64_t mc, n_m, strips, n_n;
} kiln_gemm_bf16_chunk_t;

#define KILN_GEMM_BF16_A_ROWS 64

static void kiln_gemm_bf16_pack_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_bf16_chunk_t* ch = p;
  int64_t r0 = (int64_t)task * KILN_GEMM_BF16_A_ROWS;
  int64_t r1 = r0 + KILN_GEMM_BF16_A_ROWS < ch->m_pad ? r0 + KILN_GEMM_BF16_A_ROWS : ch->m_pad;
  int64_t live = ch->m - r0 < 0 ? 0 : ch->m - r0 < r1 - r0 ? ch->m - r0 : r1 - r0;
  kiln_bf16_gemm_pack_a__avx512(live, r1 - r0, ch->blk.k, ch->blk.ka,
                               ch->a ? ch->a + r0 * ch->a_rs : NULL,
                               ch->a16 ? ch->a16 + r0 * ch->a_rs : NULL, ch->a_rs,
                               ch->a_out + r0 * ch->blk.ka);
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

int kiln_gemm_bf16_compute(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
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
  ch.m = M;
  ch.m_pad = (M + 15) & ~(int64_t)15;
  ch.a_rs = g->a_row_stride;
  /* M blocks whose A rows fit about 512 KiB of L2, in whole 32-row tiles. */
  int64_t mc = ((int64_t)512 << 10) / (ch.blk.ka * 2) / 32 * 32;
  ch.mc = mc < 32 ? 32 : mc > 256 ? 256 : mc;
  ch.n_m = kiln_gemm_bf16_cdiv(M, ch.mc);
  ch.strips = kiln_gemm_bf16_cdiv(N, 32);
  /* Strip runs: at most 1024 columns, then more until every thread has two. */
  ch.n_n = kiln_gemm_bf16_cdiv(N, 1024);
  while (ch.n_m * ch.n_n < 2 * T && ch.n_n < ch.strips) ch.n_n++;
  if (g->a_col_stride != 1) return 0; /* the packer reads unit-stride rows */

  void* scratch_blk = NULL;
  uint16_t* abuf = kiln_scratch_get(&kiln_gemm_bf16_scratch_,
                                    (size_t)(ch.m_pad * ch.blk.ka) * sizeof(uint16_t), &scratch_blk);
  if (!abuf) return 0; /* no memory: the fp32 path needs none for A's rounding */
  ch.a_out = abuf;
  ch.blk.a = abuf;
  for (int64_t b = 0; b < g->batch; ++b) {
    int64_t a_off = b * g->a_batch_stride;
    ch.a = g->a_bf16 ? NULL : g->a + a_off;
    ch.a16 = g->a_bf16 ? g->a_bf16 + a_off : NULL;
    ch.blk.c = g->c + b * g->c_batch_stride;
    ch.blk.res = g->residual ? g->residual + b * g->r_batch_stride : NULL;
    kiln_pool_parallel_for(pool, (size_t)kiln_gemm_bf16_cdiv(ch.m_pad, KILN_GEMM_BF16_A_ROWS),
                           kiln_gemm_bf16_pack_task, &ch);
    kiln_pool_parallel_for(pool, (size_t)(ch.n_m * ch.n_n), kiln_gemm_bf16_compute_task, &ch);
  }
  kiln_scratch_put(&kiln_gemm_bf16_scratch_, scratch_blk);
  kiln_gemm_bf16_note_engine(amx ? "amx" : "avx512_bf16");
  return 1;
}

#else

int kiln_gemm_bf16_compute(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  (void)g;
  (void)pool;
  return 0;
}

#endif
