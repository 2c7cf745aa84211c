/* int8 x int8 GEMM for prefill: the activations of an int8-weight LINEAR
 * quantized per row (token) at run time, integer products summed exactly
 * in int32, then scaled. Used for blobs flagged a8 (KILN_GEMM_QUANT_A8,
 * kiln.trace(weights_dtype="int8:a8")) when M > KILN_GEMM_GEMV_MAX_M (the
 * GEMV, kiln_gemm_q8a8_gemv.c, takes fewer rows by the same rule); the
 * contract (the rule every kernel and the tests follow) is in kiln_gemm.h
 * beside the flag. This file also holds the rule's pieces and its scalar
 * reference.
 *
 * Driver, per batch: (1) A is quantized into packed panels of 6 rows in
 * int16 pairs (row i, columns 2t and 2t + 1 adjacent: what VPMADDWD reads
 * as one 32-bit broadcast), with one fp32 scale per row; (2) tasks of (a
 * block of rows, a run of 16-column strips) run the microkernel over all
 * of K per 6 x 16 tile (an exact int32 sum: no K blocking, so no partial
 * sums to store), convert and scale the tile in fp32 in a fixed order and
 * hand it to the fp32 epilogue (bias, activation, residual). The row block
 * keeps its A panels in L2 (about 256 KiB) while the strips' int8 B
 * panels stream past; each strip's B (K x 16 bytes) is reused by every
 * tile of the block.
 *
 * Which kernel: on AMX-INT8 (kiln_gemm_q8a8_amx_tiles), TDPBSSD tiles over A
 * quantized into rows of int8 (kiln_gemm_q8a8_amx.c), 16-row tiles in
 * blocks of 32 x 32 (on a Sapphire Rapids-class core 1.9-2.2x the VNNI
 * kernel: 714-1015 against 405-452 GOP/s, bench_gemm_q8a8, one thread);
 * else an int8 engine's over 12-row panels of int8 quads where the CPU has
 * one (kiln_gemm_int8_engine): at the avx512 level with VNNI and VBMI,
 * the 12x32 VPDPBUSD kernel (kiln_gemm_q8a8_avx512vnni.c; tiles of two
 * strips); at the neon level with dotprod, the 12x16 SDOT kernel
 * (kiln_gemm_q8a8_neondot.c), or with i8mm too its SMMLA kernel
 * (kiln_gemm_q8a8_neoni8mm.c: each strip laid out once per task for it, in
 * a buffer per thread); otherwise the family's list
 * (kiln_gemm_q8a8_level): AVX2's
 * (kiln_gemm_q8a8_avx2.c) at the avx2 and avx512 levels, else the portable
 * one here. Integer sums are exact, so every kernel gives the same bits as
 * the scalar reference. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

/* ---- the rule ------------------------------------------------------------ */

float kiln_gemm_q8a8_row_scale(int64_t k, const float* a, const uint16_t* a16, int64_t cs) {
  float amax = 0.0f;
  int finite = 1;
  for (int64_t p = 0; p < k; ++p) {
    float x = a16 ? kiln_gemm_bf16_to_f32(a16[p * cs]) : a[p * cs];
    finite &= isfinite(x) != 0;
    amax = fmaxf(amax, fabsf(x));
  }
  if (!finite) return NAN;
  float s = amax / 127.0f;
  return s == 0.0f ? 1.0f : s;
}

int16_t kiln_gemm_q8a8_quantize(float x, float s) {
  if (!(s == s)) return 0; /* a row with a non-finite element: its outputs are NaN */
  float r = nearbyintf(x / s);
  return (int16_t)(r < -127.0f ? -127.0f : r > 127.0f ? 127.0f : r);
}

void kiln_gemm_q8a8_reference(const kiln_gemm_f32_args_t* g) {
  const int64_t K = g->k;
  const uint8_t* body = (const uint8_t*)g->b_packed_q + KILN_GEMM_QUANT_HEADER;
  const int64_t np = (g->n + 15) / 16;
  const float* sw = (const float*)body;
  const int8_t* w = (const int8_t*)(body + np * 16 * 4);
  /* Each activation is quantized where it is used (no buffer): the reference
     is also the fast path's fallback when its scratch cannot be had, so it
     must not need memory of its own to give the same answer. */
  for (int64_t bt = 0; bt < g->batch; ++bt)
    for (int64_t i = 0; i < g->m; ++i) {
      int64_t base = bt * g->a_batch_stride + i * g->a_row_stride;
      const float* a = g->a_bf16 ? NULL : g->a + base;
      const uint16_t* a16 = g->a_bf16 ? g->a_bf16 + base : NULL;
      float sa = kiln_gemm_q8a8_row_scale(K, a, a16, g->a_col_stride);
      float* c = g->c + bt * g->c_batch_stride + i * g->c_row_stride;
      const float* r =
          g->residual ? g->residual + bt * g->r_batch_stride + i * g->r_row_stride : NULL;
      for (int64_t j = 0; j < g->n; ++j) {
        int64_t acc = 0;
        for (int64_t p = 0; p < K; ++p) {
          float v = a16 ? kiln_gemm_bf16_to_f32(a16[p * g->a_col_stride]) : a[p * g->a_col_stride];
          acc += (int64_t)kiln_gemm_q8a8_quantize(v, sa) * w[(j / 16) * 16 * K + p * 16 + j % 16];
        }
        float x = (float)(int32_t)acc * sa * sw[j];
        if (g->bias) x += g->bias[j];
        x = kiln_activation_scalar(x, g->act);
        c[j] = r ? x + r[j] : x;
      }
    }
}

/* ---- the portable kernel -------------------------------------------------- */

void kiln_qd8_qc8w_gemm_ukernel_6x16__generic(int64_t k, const int16_t* a, const int8_t* b,
                                              int32_t* out) {
  int32_t acc[6][16] = {{0}};
  for (int64_t p = 0; p < k; ++p) {
    const int16_t* ap = a + (p / 2) * 12 + (p & 1);
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 16; ++j) acc[i][j] += (int32_t)ap[2 * i] * b[p * 16 + j];
  }
  memcpy(out, acc, sizeof(acc));
}

void kiln_qd8_gemm_pack_a__generic(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                   const uint16_t* a16, int64_t rs, int64_t cs, int16_t* out,
                                   float* scales) {
  const int64_t kp = k + (k & 1);
  for (int64_t i = 0; i < rows_pad; ++i) {
    int16_t* panel = out + (i / 6) * kp * 6 + (i % 6) * 2;
    if (i >= rows) {
      for (int64_t t = 0; t < kp / 2; ++t) panel[t * 12] = panel[t * 12 + 1] = 0;
      continue;
    }
    const float* ar = a ? a + i * rs : NULL;
    const uint16_t* a16r = a16 ? a16 + i * rs : NULL;
    float s = kiln_gemm_q8a8_row_scale(k, ar, a16r, cs);
    scales[i] = s;
    for (int64_t p = 0; p < k; ++p)
      panel[(p / 2) * 12 + (p & 1)] =
          kiln_gemm_q8a8_quantize(a16r ? kiln_gemm_bf16_to_f32(a16r[p * cs]) : ar[p * cs], s);
    if (k & 1) panel[(k / 2) * 12 + 1] = 0;
  }
}

/* The int8 engines' quad layout (kiln_gemm_quant_internal.h), portable:
 * the AVX-512 packer's path for bf16 or strided rows. */
void kiln_qd8_gemm_pack_a_x4__generic(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                      const uint16_t* a16, int64_t rs, int64_t cs, int8_t* out,
                                      float* scales, int32_t* sums) {
  const int64_t quads = (k + 3) / 4;
  for (int64_t i = 0; i < rows_pad; ++i) {
    int8_t* panel = out + (i / 12) * quads * 48 + (i % 12) * 4;
    for (int64_t t = 0; t < quads; ++t) memset(panel + t * 48, 0, 4);
    sums[i] = 0;
    if (i >= rows) {
      scales[i] = 0.0f;
      continue;
    }
    const float* ar = a ? a + i * rs : NULL;
    const uint16_t* a16r = a16 ? a16 + i * rs : NULL;
    float s = kiln_gemm_q8a8_row_scale(k, ar, a16r, cs);
    scales[i] = s;
    int32_t sum = 0;
    for (int64_t p = 0; p < k; ++p) {
      int16_t q =
          kiln_gemm_q8a8_quantize(a16r ? kiln_gemm_bf16_to_f32(a16r[p * cs]) : ar[p * cs], s);
      panel[(p / 4) * 48 + p % 4] = (int8_t)q;
      sum += q;
    }
    sums[i] = sum;
  }
}

/* ---- the driver ------------------------------------------------------------ */

#define KILN_Q8A8_PACK_ROWS 48 /* rows per quantizing task (a multiple of both tile heights, 6 and 12) */

/* Two kernel kinds share the driver: the level's 6x16 kernel over int16
 * pairs (x4 = 0) and an int8 engine's over 12-row panels of int8 quads
 * (x4 = 1: VPDPBUSD, whose unsigned weights sums[] undo (biased = 1), or
 * SDOT, signed, exact as it is). */
typedef struct {
  const kiln_gemm_f32_args_t* g;
  kiln_gemm_epilogue_fn epilogue;
  int x4, biased, mr, amx;
  kiln_gemm_q8a8_ukernel_fn ukernel;
  kiln_gemm_q8a8_pack_a_fn pack_a;
  kiln_gemm_q8a8_ukernel_x4_fn ukernel_x4;
  kiln_gemm_q8a8_pack_a_x4_fn pack_a_x4;
  /* SMMLA (kiln_gemm_q8a8_neoni8mm.c): each strip laid out by prep_b into
   * the task's thread's buffer (prep + thread * prep_bytes) before its row
   * tiles run. */
  void (*prep_b)(int64_t k, const int8_t* b, int8_t* out);
  void (*ukernel_prep)(int64_t k, const int8_t* a, const int8_t* bp, int32_t* out);
  int8_t* prep;
  int64_t prep_bytes;
  int64_t row_bytes, m_pad, mc, n_m, strips, n_n;
  const int8_t* w;
  const float* sw;
  const float* a;
  const uint16_t* a16;
  char* ap;
  float* sa;
  int32_t* sums;
  float* c;
  const float* res;
} kiln_q8a8_t;

static int64_t kiln_q8a8_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void kiln_q8a8_pack_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_q8a8_t* t = p;
  const kiln_gemm_f32_args_t* g = t->g;
  int64_t r0 = (int64_t)task * KILN_Q8A8_PACK_ROWS;
  int64_t r1 = r0 + KILN_Q8A8_PACK_ROWS < t->m_pad ? r0 + KILN_Q8A8_PACK_ROWS : t->m_pad;
  int64_t live = g->m - r0 < 0 ? 0 : g->m - r0 < r1 - r0 ? g->m - r0 : r1 - r0;
  int64_t off = r0 * g->a_row_stride;
  const float* a = t->a ? t->a + off : NULL;
  const uint16_t* a16 = t->a16 ? t->a16 + off : NULL;
  char* panels = t->ap + r0 * t->row_bytes;
#ifdef KILN_GEMM_HAVE_X86
  if (t->amx)
    kiln_qd8_gemm_pack_a_rows__amx(live, r1 - r0, g->k, t->row_bytes, a, a16, g->a_row_stride,
                                   g->a_col_stride, (int8_t*)panels, t->sa + r0);
  else
#endif
  if (t->x4)
    t->pack_a_x4(live, r1 - r0, g->k, a, a16, g->a_row_stride, g->a_col_stride,
                 (int8_t*)panels, t->sa + r0, t->sums + r0);
  else
    t->pack_a(live, r1 - r0, g->k, a, a16, g->a_row_stride, g->a_col_stride, (int16_t*)panels,
              t->sa + r0);
}

/* One 16-column piece of a tile out: rows [i, i + mr), columns [j, j + nr)
 * from the int32 sums acc (16 per row; minus 128 * sums[row] for the
 * engine's biased weights, in wrapping arithmetic), scaled in the rule's
 * order ((float)sum * row scale) * column scale, through the epilogue. */
static void kiln_q8a8_tile_out(const kiln_q8a8_t* t, int64_t i, int64_t mr, int64_t j,
                               int64_t nr, const int32_t* acc, int64_t lda) {
  const kiln_gemm_f32_args_t* g = t->g;
  _Alignas(64) float tile[12 * 16];
  const float* sw = t->sw + j;
  for (int64_t r = 0; r < mr; ++r) {
    uint32_t bias = t->biased ? (uint32_t)t->sums[i + r] << 7 : 0u;
    for (int c = 0; c < 16; ++c)
      tile[r * 16 + c] = (float)(int32_t)((uint32_t)acc[r * lda + c] - bias) * t->sa[i + r] * sw[c];
  }
  t->epilogue(mr, nr, tile, 16, t->c + i * g->c_row_stride + j, g->c_row_stride,
              g->bias ? g->bias + j : NULL, t->res ? t->res + i * g->r_row_stride + j : NULL,
              g->r_row_stride, g->act);
}

static void kiln_q8a8_compute_task(void* p, size_t task, int thread) {
  const kiln_q8a8_t* t = p;
  const kiln_gemm_f32_args_t* g = t->g;
  const int64_t K = g->k, N = g->n;
  int64_t im = (int64_t)task / t->n_n, jn = (int64_t)task % t->n_n;
  int64_t i0 = im * t->mc, i1 = i0 + t->mc < g->m ? i0 + t->mc : g->m;
  int64_t s0 = jn * t->strips / t->n_n, s1 = (jn + 1) * t->strips / t->n_n;
  _Alignas(64) int32_t acc[2 * 12 * 16];
  const int mr_tile = t->mr, ns_tile = t->x4 && !t->prep_b ? 2 : 1;
  int8_t* prep = t->prep_b ? t->prep + (int64_t)thread * t->prep_bytes : NULL;
  for (int64_t s = s0; s < s1; s += ns_tile) {
    int ns = s1 - s < ns_tile ? (int)(s1 - s) : ns_tile;
    const int8_t* b = t->w + s * 16 * K;
    if (prep) t->prep_b(K, b, prep);
    for (int64_t i = i0; i < i1; i += mr_tile) {
      int64_t mr = i1 - i < mr_tile ? i1 - i : mr_tile;
      const char* a = t->ap + i * t->row_bytes;
      if (prep)
        t->ukernel_prep(K, (const int8_t*)a, prep, acc);
      else if (t->x4)
        t->ukernel_x4(K, (const int8_t*)a, b, 16 * K, ns, acc);
      else
        t->ukernel(K, (const int16_t*)a, b, acc);
      for (int q = 0; q < ns; ++q) {
        int64_t j = (s + q) * 16, nr = N - j < 16 ? N - j : 16;
        kiln_q8a8_tile_out(t, i, mr, j, nr, acc + q * 192, 16);
      }
    }
  }
}

#ifdef KILN_GEMM_HAVE_X86
/* AMX: per strip pair, both panels laid out for the tiles in the thread's
 * buffer, then the task's rows in blocks of at most 240 (the int32 sums,
 * 32 a row, after the panels in the buffer). */
static void kiln_q8a8_amx_task(void* p, size_t task, int thread) {
  const kiln_q8a8_t* t = p;
  const kiln_gemm_f32_args_t* g = t->g;
  const int64_t K = g->k, N = g->n, kp = t->row_bytes;
  int64_t im = (int64_t)task / t->n_n, jn = (int64_t)task % t->n_n;
  int64_t i0 = im * t->mc, i1 = i0 + t->mc < g->m ? i0 + t->mc : g->m;
  int64_t s0 = jn * t->strips / t->n_n, s1 = (jn + 1) * t->strips / t->n_n;
  int8_t* prep = t->prep + (int64_t)thread * t->prep_bytes;
  int32_t* acc = (int32_t*)(void*)(prep + 2 * kp * 16);
  for (int64_t s = s0; s < s1; s += 2) {
    const int np = s1 - s < 2 ? 1 : 2;
    for (int q = 0; q < np; ++q)
      kiln_qd8_qc8w_prep_b__amx(K, kp, t->w + (s + q) * 16 * K, prep + q * kp * 16);
    for (int64_t ib = i0; ib < i1; ib += 240) {
      const int64_t m = i1 - ib < 240 ? i1 - ib : 240;
      kiln_qd8_qc8w_gemm_block__amx(m, kp, (const int8_t*)t->ap + ib * kp, prep, prep + kp * 16,
                                    np, acc);
      for (int q = 0; q < np; ++q) {
        const int64_t j = (s + q) * 16, nr = N - j < 16 ? N - j : 16;
        for (int64_t r = 0; r < m; r += 12)
          kiln_q8a8_tile_out(t, ib + r, m - r < 12 ? m - r : 12, j, nr, acc + r * 32 + q * 16, 32);
      }
    }
  }
}
#endif

/* The variants of the family's list (KILN_GEMM_Q8A8_ISAS,
 * kernels/kiln_isa_variant.h); the avx2 one also runs at avx512. */
static const kiln_gemm_q8a8_ukernel_fn kiln_gemm_q8a8_ukernels[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_GEMM_Q8A8_ISAS, kiln_qd8_qc8w_gemm_ukernel_6x16);
static const kiln_gemm_q8a8_pack_a_fn kiln_gemm_q8a8_pack_as[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_GEMM_Q8A8_ISAS, kiln_qd8_gemm_pack_a);

kiln_isa_t kiln_gemm_q8a8_level(void) {
  return kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_GEMM_Q8A8_ISAS), kiln_cpu_isa());
}

kiln_gemm_int8_engine_t kiln_gemm_int8_engine(void) {
#ifdef KILN_GEMM_HAVE_X86
  const kiln_cpu_features_t* f = kiln_cpu_features();
  if (kiln_cpu_isa() == KILN_ISA_AVX512 && f->avx512_vnni && f->avx512_vbmi)
    return KILN_GEMM_INT8_VNNI;
#endif
#ifdef KILN_GEMM_HAVE_NEON
  if (kiln_cpu_isa() == KILN_ISA_NEON && kiln_cpu_features()->neon_dotprod)
    return KILN_GEMM_INT8_SDOT;
#endif
  return KILN_GEMM_INT8_LEVEL;
}

/* The SMMLA kernel's prepared strip (16 bytes a K row) stays in L2 up to
 * this K; past it the SDOT kernel, which needs no buffer. */
#define KILN_Q8A8_I8MM_MAX_K 16384

static int kiln_q8a8_i8mm(int64_t k) {
#ifdef KILN_GEMM_HAVE_NEON
  return kiln_gemm_int8_engine() == KILN_GEMM_INT8_SDOT && kiln_cpu_features()->neon_i8mm &&
         k <= KILN_Q8A8_I8MM_MAX_K;
#else
  (void)k;
  return 0;
#endif
}

const char* kiln_gemm_q8a8_engine(void) {
  switch (kiln_gemm_int8_engine()) {
    case KILN_GEMM_INT8_VNNI: return "avx512vnni";
    case KILN_GEMM_INT8_SDOT: return "neondot";
    default: return kiln_cpu_isa_name(kiln_gemm_q8a8_level());
  }
}

int kiln_gemm_q8a8_amx_tiles(void) {
#ifdef KILN_GEMM_HAVE_X86
  const kiln_cpu_features_t* f = kiln_cpu_features();
  return kiln_cpu_isa() == KILN_ISA_AVX512 && f->amx_int8 && f->avx512_vbmi &&
         (kiln_cpu_bf16() & KILN_CPU_BF16_AMX);
#else
  return 0;
#endif
}

const char* kiln_gemm_q8a8_blocked_engine(int64_t k) {
  return kiln_gemm_q8a8_amx_tiles() ? "amx" : kiln_q8a8_i8mm(k) ? "neoni8mm" : kiln_gemm_q8a8_engine();
}

static kiln_scratch_cache_t kiln_q8a8_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)64 << 20);

int kiln_gemm_q8a8(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  const int64_t M = g->m, N = g->n, K = g->k, T = kiln_pool_size(pool);
  if (K > KILN_GEMM_Q8A8_MAX_K) return 0;
  kiln_q8a8_t t;
  memset(&t, 0, sizeof(t));
  kiln_isa_t isa = kiln_cpu_isa();
  t.g = g;
  t.epilogue = kiln_gemm_kernels_for(isa)->epilogue;
  switch (kiln_gemm_int8_engine()) {
#ifdef KILN_GEMM_HAVE_X86
    case KILN_GEMM_INT8_VNNI:
      t.x4 = 1, t.biased = 1;
      t.ukernel_x4 = kiln_qd8_qc8w_gemm_ukernel_12x32__avx512vnni;
      t.pack_a_x4 = kiln_qd8_gemm_pack_a_x4__avx512vnni;
      break;
#endif
#ifdef KILN_GEMM_HAVE_NEON
    case KILN_GEMM_INT8_SDOT:
      t.x4 = 1;
      t.ukernel_x4 = kiln_qd8_qc8w_gemm_ukernel_12x16__neondot;
      t.pack_a_x4 = kiln_qd8_gemm_pack_a_x4__neondot;
      if (kiln_q8a8_i8mm(K)) {
        t.prep_b = kiln_qd8_qc8w_gemm_prep_b__neoni8mm;
        t.ukernel_prep = kiln_qd8_qc8w_gemm_ukernel_12x16__neoni8mm;
        t.prep_bytes = ((K + 7) / 8 * 128 + 63) & ~(int64_t)63;
      }
      break;
#endif
    default: break;
  }
#ifdef KILN_GEMM_HAVE_X86
  if (kiln_gemm_q8a8_amx_tiles()) {
    t.amx = 1, t.x4 = 0, t.biased = 0;
    t.mr = 16;
    t.row_bytes = (K + 63) / 64 * 64;
    t.prep_bytes = 2 * t.row_bytes * 16 + 240 * 32 * (int64_t)sizeof(int32_t);
  } else
#endif
  if (t.x4) {
    t.mr = 12;
    t.row_bytes = (K + 3) / 4 * 4;
  } else {
    t.mr = 6;
    t.ukernel = kiln_gemm_q8a8_ukernels[kiln_gemm_q8a8_level()];
    t.pack_a = kiln_gemm_q8a8_pack_as[kiln_gemm_q8a8_level()];
    t.row_bytes = (K + (K & 1)) * 2;
  }
  const int64_t np = kiln_q8a8_cdiv(N, 16);
  const uint8_t* body = (const uint8_t*)g->b_packed_q + KILN_GEMM_QUANT_HEADER;
  t.sw = (const float*)body;
  t.w = (const int8_t*)(body + np * 16 * 4);
  t.m_pad = kiln_q8a8_cdiv(M, t.mr) * t.mr;
  /* Row blocks whose A panels fit about 256 KiB of L2, whole tiles (240 is
     a multiple of the tile heights 6, 12 and 16, as is the packer's 48). */
  int64_t mc = ((int64_t)256 << 10) / t.row_bytes / t.mr * t.mr;
  t.mc = mc < t.mr ? t.mr : mc > 240 ? 240 : mc;
  t.n_m = kiln_q8a8_cdiv(M, t.mc);
  t.strips = np;
  /* Strip runs: at most 64 strips, then more until every thread has two. */
  t.n_n = kiln_q8a8_cdiv(np, 64);
  while (t.n_m * t.n_n < 2 * T && t.n_n < t.strips) t.n_n++;
  void* blk = NULL;
  size_t panel_bytes = ((size_t)(t.m_pad * t.row_bytes) + 63) & ~(size_t)63;
  size_t sums_bytes = ((size_t)t.m_pad * (sizeof(float) + sizeof(int32_t)) + 63) & ~(size_t)63;
  size_t bytes = panel_bytes + sums_bytes + (size_t)(T * t.prep_bytes);
  char* scratch = kiln_scratch_get(&kiln_q8a8_scratch_, bytes, &blk);
  if (!scratch) return 0;
  t.ap = scratch;
  t.sa = (float*)(scratch + panel_bytes);
  t.sums = (int32_t*)(t.sa + t.m_pad);
  t.prep = t.prep_bytes ? (int8_t*)(scratch + panel_bytes + sums_bytes) : NULL;
  for (int64_t bt = 0; bt < g->batch; ++bt) {
    int64_t a_off = bt * g->a_batch_stride;
    t.a = g->a_bf16 ? NULL : g->a + a_off;
    t.a16 = g->a_bf16 ? g->a_bf16 + a_off : NULL;
    t.c = g->c + bt * g->c_batch_stride;
    t.res = g->residual ? g->residual + bt * g->r_batch_stride : NULL;
    kiln_pool_parallel_for(pool, (size_t)kiln_q8a8_cdiv(t.m_pad, KILN_Q8A8_PACK_ROWS),
                           kiln_q8a8_pack_task, &t);
#ifdef KILN_GEMM_HAVE_X86
    if (t.amx) {
      kiln_pool_parallel_for(pool, (size_t)(t.n_m * t.n_n), kiln_q8a8_amx_task, &t);
      continue;
    }
#endif
    kiln_pool_parallel_for(pool, (size_t)(t.n_m * t.n_n), kiln_q8a8_compute_task, &t);
  }
  kiln_scratch_put(&kiln_q8a8_scratch_, blk);
  return 1;
}
