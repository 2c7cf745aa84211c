/* Quantized weights (weight-only int8 and int4; blobs flagged for int8
 * activations go to kiln_gemm_q8a8.c, kiln_gemm_q8a8_gemv.c and
 * kiln_gemm_q4a8.c where their rules apply): the blob's size and header,
 * a weight read back by the scalar rule (kiln_gemm_quant_weight), the
 * portable kernels, the driver, and the task loop that every GEMV driver
 * shares (kiln_gemm_gemv_panels_run); quantizing is kiln_gemm_quant_pack.c's.
 * The blob layout and the quantization rules are documented in
 * kiln_gemm.h; the rules are the ones tests/python/test_quant_weights.py
 * repeats in torch.
 *
 * Driver, per call:
 *   M <= KILN_GEMM_GEMV_MAX_M (decode): the weights are the whole cost, so
 *     they are read once, as int8 or nibbles, and dequantized in registers
 *     by the GEMV kernels of the running ISA; A's rows are first copied
 *     (widened from bf16, zero-padded to whole int4 groups) with their
 *     per-group sums; tasks are contiguous runs of panels, as in the fp32
 *     GEMV, and each panel goes through the fp32 epilogue.
 *   larger M: the weights are reused M times, so the fp32 GEMM runs (its
 *     own blocking, threads, epilogue) with B made by its compute tasks as
 *     they go (kiln_gemm_f32_fly): each dequantizes the kc x 16 strip (or
 *     kc x 256 block) its row tiles use next straight into its L1 (L2)
 *     buffer, so no fp32 copy of the weights is written out and read back;
 *     the dequantization is O(K N) (per M block at most) against the
 *     GEMM's O(M K N). On Zen 3 (one thread) that runs at 0.95-1.04x the
 *     fp32 GEMM on packed fp32 weights at M 128 and 512, where dequantizing
 *     4 MiB strips of fp32 panels first ran at 0.87-1.01x.
 * The dequantized values are exactly the scalar rule's; only the summation
 * order (and, for int4, applying the zero point once per group) separates
 * a kernel from the reference. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

static int64_t kiln_q_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void kiln_q_header(const void* blob, kiln_gemm_quant_header_t* h) {
  kiln_gemm_quant_header_read(blob, h);
}

static int kiln_q_valid_choice(int bits, int group, int asym) {
  if (bits == 8) return group == 0 && !asym;
  if (bits == 4) return group >= 32 && group <= 4096 && group % 32 == 0;
  return 0;
}

/* form: asym (bit 0) and, for int4, KILN_GEMM_QUANT_BF16_SCALES. */
static size_t kiln_q_size(int64_t k, int64_t n, int bits, int group, int form) {
  if (!kiln_q_valid_choice(bits, group, form & 1) || k < 0 || n < 0) return 0;
  int64_t np = kiln_q_cdiv(n, KILN_GEMM_PANEL);
  if (bits == 8) return KILN_GEMM_QUANT_HEADER + (size_t)(np * 16) * (4 + (size_t)k);
  return KILN_GEMM_QUANT_HEADER +
         (size_t)np * (size_t)kiln_q_cdiv(k, group) * (size_t)kiln_gemm_q4_group_bytes(group, form);
}

/* kiln's own int4 blobs keep bf16 scales (kiln_gemm.h); a checkpoint's
 * keep its fp32 ones. */
int kiln_gemm_quant_own_form(int bits, int asym) {
  return (asym ? 1 : 0) | (bits == 4 ? (int)KILN_GEMM_QUANT_BF16_SCALES : 0);
}

size_t kiln_gemm_quant_packed_size(int64_t k, int64_t n, int bits, int group, int asym) {
  return kiln_q_size(k, n, bits, group, kiln_gemm_quant_own_form(bits, asym));
}

size_t kiln_gemm_quant_ints_packed_size(int64_t k, int64_t n, int bits, int group, int asym) {
  return kiln_q_size(k, n, bits, group, asym ? 1 : 0);
}

int kiln_gemm_quant_check(const void* blob, size_t nbytes, int64_t k, int64_t n) {
  if (!blob || nbytes < KILN_GEMM_QUANT_HEADER) return 1;
  kiln_gemm_quant_header_t h;
  kiln_q_header(blob, &h);
  if (h.magic != KILN_GEMM_QUANT_MAGIC || h.version != 1 || h.k != k || h.n != n) return 1;
  if ((h.flags & ~(1u | KILN_GEMM_QUANT_A8 | KILN_GEMM_QUANT_BF16_SCALES)) ||
      !kiln_q_valid_choice(h.bits, (int)h.group, h.flags & 1) ||
      ((h.flags & KILN_GEMM_QUANT_BF16_SCALES) && h.bits != 4))
    return 1;
  return nbytes != kiln_q_size(k, n, h.bits, (int)h.group, h.flags & KILN_GEMM_Q4_FORM_MASK);
}

int kiln_gemm_quant_blob_start(int64_t k, int64_t n, int bits, int group, int form, void* out) {
  size_t size = kiln_q_size(k, n, bits, group, form);
  if (!size) return 0;
  memset(out, 0, size);
  kiln_gemm_quant_header_t h;
  memset(&h, 0, sizeof(h));
  h.magic = KILN_GEMM_QUANT_MAGIC;
  h.version = 1;
  h.bits = (uint8_t)bits;
  h.flags = (uint8_t)(form & KILN_GEMM_Q4_FORM_MASK);
  h.group = (uint32_t)group;
  h.k = k;
  h.n = n;
  memcpy(out, &h, sizeof(h));
  return 1;
}

void kiln_gemm_quant_set_a8(void* blob) {
  kiln_gemm_quant_header_t h;
  kiln_q_header(blob, &h);
  h.flags |= KILN_GEMM_QUANT_A8;
  memcpy(blob, &h, sizeof(h));
}

float kiln_gemm_quant_weight(const void* blob, int64_t p, int64_t j) {
  kiln_gemm_quant_header_t h;
  kiln_q_header(blob, &h);
  const uint8_t* body = (const uint8_t*)blob + KILN_GEMM_QUANT_HEADER;
  const int P = KILN_GEMM_PANEL;
  int64_t np = kiln_q_cdiv(h.n, P);
  if (h.bits == 8) {
    const float* scales = (const float*)body;
    const int8_t* data = (const int8_t*)(body + np * P * 4);
    return (float)data[(j / P) * P * h.k + p * P + j % P] * scales[j];
  }
  int group = (int)h.group, form = h.flags & KILN_GEMM_Q4_FORM_MASK;
  int64_t kg = kiln_q_cdiv(h.k, group), gb = kiln_gemm_q4_group_bytes(group, form);
  const uint8_t* blk = body + (j / P) * kg * gb + (p / group) * gb;
  int c = (int)(j % P);
  uint8_t byte = blk[kiln_gemm_q4_header_bytes(form) + kiln_gemm_q4_byte(p % group, c)];
  int q = c < 8 ? byte & 15 : byte >> 4;
  return ((float)q - kiln_gemm_q4_zero(blk, form, c)) * kiln_gemm_q4_scale(blk, form, c);
}

/* ---- embeddings: rows of a table packed as B = table^T -------------------- */

int64_t kiln_gemm_quant_gather(const void* blob, const void* index, int index_i64, int64_t n_index,
                               float* out) {
  kiln_gemm_quant_header_t h;
  kiln_q_header(blob, &h);
  const uint8_t* body = (const uint8_t*)blob + KILN_GEMM_QUANT_HEADER;
  const int P = KILN_GEMM_PANEL;
  const int64_t K = h.k, N = h.n, np = kiln_q_cdiv(N, P);
  const int group = (int)h.group, form = h.flags & KILN_GEMM_Q4_FORM_MASK;
  const int64_t kg = h.bits == 4 ? kiln_q_cdiv(K, group) : 0;
  const int64_t gb = h.bits == 4 ? kiln_gemm_q4_group_bytes(group, form) : 0;
  int64_t bad = 0;
  for (int64_t i = 0; i < n_index; ++i) {
    int64_t j = index_i64 ? ((const int64_t*)index)[i] : ((const int32_t*)index)[i];
    if (j < 0) j += N;
    float* row = out + i * K;
    if (j < 0 || j >= N) {
      memset(row, 0, (size_t)K * sizeof(float));
      ++bad;
      continue;
    }
    const int c = (int)(j % P);
    if (h.bits == 8) { /* column j of B: one byte every 16, times its scale */
      const float s = ((const float*)body)[j];
      const int8_t* col = (const int8_t*)(body + np * P * 4) + (j / P) * P * K + c;
      for (int64_t p = 0; p < K; ++p) row[p] = (float)col[p * P] * s;
      continue;
    }
    for (int64_t g = 0; g < kg; ++g) {
      const uint8_t* blk = body + (j / P) * kg * gb + g * gb;
      const float z = kiln_gemm_q4_zero(blk, form, c), sc = kiln_gemm_q4_scale(blk, form, c);
      const uint8_t* bytes = blk + kiln_gemm_q4_header_bytes(form);
      for (int64_t r = 0; r < group && g * group + r < K; ++r) {
        uint8_t byte = bytes[kiln_gemm_q4_byte(r, c)];
        row[g * group + r] = ((float)(c < 8 ? byte & 15 : byte >> 4) - z) * sc;
      }
    }
  }
  return bad;
}

/* ---- portable kernels --------------------------------------------------- */

void kiln_f32_qc8w_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                                 const float* scales, int panels, float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int s = 0; s < panels; ++s) {
    float acc[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
    const int8_t* bq = b + (int64_t)s * P * k;
    for (int64_t p = 0; p < k; ++p) {
      float w[KILN_GEMM_PANEL];
      for (int j = 0; j < P; ++j) w[j] = (float)bq[p * P + j];
      for (int64_t i = 0; i < m; ++i) {
        float av = a[i * lda + p];
        for (int j = 0; j < P; ++j) acc[i][j] += av * w[j];
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int j = 0; j < P; ++j) out[(s * m + i) * P + j] = acc[i][j] * scales[s * P + j];
  }
}

void kiln_f32_qb4w_gemv__generic(int64_t m, int64_t kg, int group, int form, const float* a,
                                 int64_t lda, const float* asum, const uint8_t* b, int panels,
                                 float* out) {
  const int P = KILN_GEMM_PANEL;
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form);
  for (int s = 0; s < panels; ++s) {
    float o[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
    for (int64_t g = 0; g < kg; ++g) {
      const uint8_t* blk = b + ((int64_t)s * kg + g) * gb;
      const uint8_t* bytes = blk + kiln_gemm_q4_header_bytes(form);
      float acc[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
      for (int64_t r = 0; r < group; ++r) {
        float w[KILN_GEMM_PANEL];
        for (int c = 0; c < P; ++c) {
          uint8_t byte = bytes[kiln_gemm_q4_byte(r, c)];
          w[c] = (float)(c < 8 ? byte & 15 : byte >> 4);
        }
        for (int64_t i = 0; i < m; ++i) {
          float av = a[i * lda + g * group + r];
          for (int c = 0; c < P; ++c) acc[i][c] += av * w[c];
        }
      }
      for (int64_t i = 0; i < m; ++i) {
        float as = asum[i * kg * 2 + 2 * g] + asum[i * kg * 2 + 2 * g + 1];
        for (int c = 0; c < P; ++c) {
          float z = kiln_gemm_q4_zero(blk, form, c);
          o[i][c] += kiln_gemm_q4_scale(blk, form, c) * (acc[i][c] - z * as);
        }
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int c = 0; c < P; ++c) out[(s * m + i) * P + c] = o[i][c];
  }
}

void kiln_qc8w_dequant__generic(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                                const float* scales, int panels, float* out) {
  const int P = KILN_GEMM_PANEL;
  for (int s = 0; s < panels; ++s)
    for (int64_t p = 0; p < kc; ++p)
      for (int j = 0; j < P; ++j)
        out[(s * kc + p) * P + j] = (float)b[(s * k + p0 + p) * P + j] * scales[s * P + j];
}

void kiln_qb4w_dequant__generic(int64_t kg, int group, int form, int64_t p0, int64_t kc,
                                const uint8_t* b, int panels, float* out) {
  const int P = KILN_GEMM_PANEL;
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form);
  for (int s = 0; s < panels; ++s)
    for (int64_t p = p0; p < p0 + kc; ++p) {
      const int64_t g = p / group, r = p % group;
      const uint8_t* blk = b + ((int64_t)s * kg + g) * gb;
      const uint8_t* bytes = blk + kiln_gemm_q4_header_bytes(form);
      for (int c = 0; c < P; ++c) {
        uint8_t byte = bytes[kiln_gemm_q4_byte(r, c)];
        float z = kiln_gemm_q4_zero(blk, form, c);
        out[(s * kc + p - p0) * P + c] =
            ((float)(c < 8 ? byte & 15 : byte >> 4) - z) * kiln_gemm_q4_scale(blk, form, c);
      }
    }
}

/* ---- dispatch ------------------------------------------------------------ */

/* One table per ISA level of the family's list (KILN_GEMM_QUANT_ISAS,
 * kernels/kiln_isa_variant.h). */
static const kiln_gemm_quant_kernels_t kiln_gemm_quant_kernels__generic = {
    .name = "generic",
    .gemv_q8 = kiln_f32_qc8w_gemv__generic,
    .gemv_q4 = kiln_f32_qb4w_gemv__generic,
    .dequant_q8 = kiln_qc8w_dequant__generic,
    .dequant_q4 = kiln_qb4w_dequant__generic,
};
#ifdef KILN_GEMM_HAVE_X86
static const kiln_gemm_quant_kernels_t kiln_gemm_quant_kernels__avx2 = {
    .name = "avx2",
    .gemv_q8 = kiln_f32_qc8w_gemv__avx2,
    .gemv_q4 = kiln_f32_qb4w_gemv__avx2,
    .dequant_q8 = kiln_qc8w_dequant__avx2,
    .dequant_q4 = kiln_qb4w_dequant__avx2,
};
/* The dequantizers are store-bound: AVX2's serve AVX-512 too. */
static const kiln_gemm_quant_kernels_t kiln_gemm_quant_kernels__avx512 = {
    .name = "avx512",
    .gemv_q8 = kiln_f32_qc8w_gemv__avx512,
    .gemv_q4 = kiln_f32_qb4w_gemv__avx512,
    .dequant_q8 = kiln_qc8w_dequant__avx2,
    .dequant_q4 = kiln_qb4w_dequant__avx2,
};
#endif
#ifdef KILN_GEMM_HAVE_NEON
static const kiln_gemm_quant_kernels_t kiln_gemm_quant_kernels__neon = {
    .name = "neon",
    .gemv_q8 = kiln_f32_qc8w_gemv__neon,
    .gemv_q4 = kiln_f32_qb4w_gemv__neon,
    .dequant_q8 = kiln_qc8w_dequant__neon,
    .dequant_q4 = kiln_qb4w_dequant__neon,
};
#endif

static const kiln_gemm_quant_kernels_t* kiln_gemm_quant_kernels_for(kiln_isa_t isa) {
  static const kiln_gemm_quant_kernels_t* const v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_GEMM_QUANT_ISAS, &kiln_gemm_quant_kernels);
  return v[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_GEMM_QUANT_ISAS), isa)];
}

static _Thread_local char kiln_gemm_quant_path_[32] = "none";
const char* kiln_gemm_quant_last_path(void) { return kiln_gemm_quant_path_; }

static kiln_scratch_cache_t kiln_gemm_quant_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)64 << 20);

/* ---- the GEMV path -------------------------------------------------------- */

typedef struct {
  const kiln_gemm_f32_args_t* g;
  kiln_gemm_gemv_panels_fn fn;
  const void* ctx;
  int64_t m;
  float* c;
  const float* res;
  kiln_gemm_epilogue_fn epilogue;
  int64_t np, n_tasks;
} kiln_gemm_gemv_run_t;

static void kiln_gemm_gemv_run_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_gemm_gemv_run_t* t = p;
  const kiln_gemm_f32_args_t* g = t->g;
  const int P = KILN_GEMM_PANEL;
  int64_t q0 = (int64_t)task * t->np / t->n_tasks, q1 = ((int64_t)task + 1) * t->np / t->n_tasks;
  _Alignas(64) float tmp[KILN_GEMM_GEMV_PANELS * KILN_GEMM_GEMV_MAX_M * 16];
  for (int64_t q = q0; q < q1; q += KILN_GEMM_GEMV_PANELS) {
    int np = q1 - q < KILN_GEMM_GEMV_PANELS ? (int)(q1 - q) : KILN_GEMM_GEMV_PANELS;
    for (int64_t i0 = 0; i0 < t->m; i0 += KILN_GEMM_GEMV_MAX_M) {
      int64_t m = t->m - i0 < KILN_GEMM_GEMV_MAX_M ? t->m - i0 : KILN_GEMM_GEMV_MAX_M;
      t->fn(t->ctx, i0, m, q, np, tmp);
      for (int s = 0; s < np; ++s) {
        int64_t j = (q + s) * P, nr = g->n - j < P ? g->n - j : P;
        t->epilogue(m, nr, tmp + s * m * P, P, t->c + i0 * g->c_row_stride + j, g->c_row_stride,
                    g->bias ? g->bias + j : NULL,
                    t->res ? t->res + i0 * g->r_row_stride + j : NULL, g->r_row_stride, g->act);
      }
    }
  }
}

void kiln_gemm_gemv_panels_run(const kiln_gemm_f32_args_t* g, int64_t m, float* c,
                               const float* res, kiln_pool_t* pool, kiln_gemm_gemv_panels_fn fn,
                               const void* ctx) {
  const int64_t T = kiln_pool_size(pool);
  kiln_gemm_gemv_run_t t;
  t.g = g, t.fn = fn, t.ctx = ctx, t.m = m, t.c = c, t.res = res;
  t.epilogue = kiln_gemm_kernels_for(kiln_cpu_isa())->epilogue;
  t.np = kiln_q_cdiv(g->n, KILN_GEMM_PANEL);
  t.n_tasks = T > 1 ? 4 * T : 1;
  if (t.n_tasks > t.np) t.n_tasks = t.np;
  if (t.n_tasks < 1) return;
  kiln_pool_parallel_for(pool, (size_t)t.n_tasks, kiln_gemm_gemv_run_task, &t);
}

const float* kiln_gemm_quant_a_row(const kiln_gemm_f32_args_t* g, int64_t bt, int64_t i,
                                   float* row) {
  const int64_t base = bt * g->a_batch_stride + i * g->a_row_stride, cs = g->a_col_stride;
  if (!g->a_bf16 && cs == 1) return g->a + base;
  for (int64_t p = 0; p < g->k; ++p)
    row[p] = g->a_bf16 ? kiln_gemm_bf16_to_f32(g->a_bf16[base + p * cs]) : g->a[base + p * cs];
  return row;
}

typedef struct {
  const kiln_gemm_f32_args_t* g;
  const kiln_gemm_quant_kernels_t* qk;
  int bits, group, form; /* form: kiln_gemm_q4_* */
  int64_t kg, kpad, gb, np;
  const uint8_t* body;
  const float* a; /* m rows, kpad apart */
  const float* asum;
} kiln_gemm_quant_gemv_t;

static void kiln_gemm_quant_gemv_panels(const void* p, int64_t i0, int64_t m, int64_t q, int np,
                                        float* out) {
  (void)i0; /* one slab: M <= KILN_GEMM_GEMV_MAX_M */
  const kiln_gemm_quant_gemv_t* t = p;
  const kiln_gemm_f32_args_t* g = t->g;
  const int P = KILN_GEMM_PANEL;
  if (t->bits == 8)
    t->qk->gemv_q8(m, g->k, t->a, t->kpad,
                   (const int8_t*)(t->body + t->np * P * 4) + q * P * g->k,
                   (const float*)t->body + q * P, np, out);
  else
    t->qk->gemv_q4(m, t->kg, t->group, t->form, t->a, t->kpad, t->asum,
                   t->body + q * t->kg * t->gb, np, out);
}

/* ---- the blocked path ----------------------------------------------------- */

/* The fp32 driver's B source (kiln_gemm_f32_fly): each compute task
 * dequantizes the kc x KILN_GEMM_FLY_NB block its row tiles are about to
 * use into its L2 buffer, reading a few KiB of the blob. */
typedef struct {
  const kiln_gemm_quant_kernels_t* qk;
  int bits, group, form; /* form: kiln_gemm_q4_* */
  int64_t k, kg, gb, np;
  const uint8_t* body;
} kiln_gemm_quant_fly_t;

static void kiln_gemm_quant_fly_pack(const void* p, int64_t p0, int64_t kc, int64_t j0, int64_t j1,
                                     float* out) {
  const kiln_gemm_quant_fly_t* t = p;
  const int P = KILN_GEMM_PANEL;
  const int64_t q = j0 / P;
  const int panels = (int)kiln_q_cdiv(j1 - j0, P);
  if (t->bits == 8)
    t->qk->dequant_q8(t->k, p0, kc, (const int8_t*)(t->body + t->np * P * 4) + q * P * t->k,
                      (const float*)t->body + q * P, panels, out);
  else
    t->qk->dequant_q4(t->kg, t->group, t->form, p0, kc, t->body + q * t->kg * t->gb, panels, out);
}

/* The blob bytes of a block: per panel, int8's kc rows of 16 bytes (its 64
 * bytes of scales are a few lines, left to the hardware), int4's whole
 * groups that hold rows [p0, p0 + kc). */
static void kiln_gemm_quant_fly_where(const void* p, int64_t p0, int64_t kc, int64_t j0,
                                      int64_t j1, kiln_gemm_fly_region_t* r) {
  const kiln_gemm_quant_fly_t* t = p;
  const int P = KILN_GEMM_PANEL;
  const int64_t q = j0 / P;
  r->runs = kiln_q_cdiv(j1 - j0, P);
  if (t->bits == 8) {
    r->base = t->body + t->np * P * 4 + (q * t->k + p0) * P;
    r->stride = P * t->k;
    r->bytes = kc * P;
  } else {
    int64_t g0 = p0 / t->group, g1 = (p0 + kc - 1) / t->group;
    r->base = t->body + (q * t->kg + g0) * t->gb;
    r->stride = t->kg * t->gb;
    r->bytes = (g1 - g0 + 1) * t->gb;
  }
}

int kiln_gemm_q8a8_applies(const kiln_gemm_f32_args_t* g) {
  if (!g->b_packed_q || g->k > KILN_GEMM_Q8A8_MAX_K) return 0;
  kiln_gemm_quant_header_t h;
  kiln_q_header(g->b_packed_q, &h);
  return h.bits == 8 && (h.flags & KILN_GEMM_QUANT_A8) != 0;
}

/* Whether every element of A is finite. The int4 GEMV sums a . q per group
 * and subtracts z . sum(a) once (the offset form): an infinite a makes that
 * inf - inf = NaN where eager's product with the dequantized weight is
 * +-inf (fuzzer known bug quant-int4-inf). Such a call takes the blocked
 * path, which dequantizes the weight first, as eager does. One batch (a
 * decode step) is checked on the group sums the GEMV makes anyway (a
 * double sum of finite floats stays finite); this scan is for batches. */
static int kiln_gemm_quant_a_finite(const kiln_gemm_f32_args_t* g) {
  for (int64_t bt = 0; bt < g->batch; ++bt)
    for (int64_t i = 0; i < g->m; ++i) {
      const int64_t base = bt * g->a_batch_stride + i * g->a_row_stride;
      for (int64_t p = 0; p < g->k; ++p) {
        const float v = g->a_bf16 ? kiln_gemm_bf16_to_f32(g->a_bf16[base + p * g->a_col_stride])
                                  : g->a[base + p * g->a_col_stride];
        if (!isfinite(v)) return 0;
      }
    }
  return 1;
}

void kiln_gemm_quant(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  kiln_gemm_quant_header_t h;
  kiln_q_header(g->b_packed_q, &h);
  const int P = KILN_GEMM_PANEL;
  const int64_t M = g->m, N = g->n, K = g->k;
  const kiln_gemm_quant_kernels_t* qk = kiln_gemm_quant_kernels_for(kiln_cpu_isa());
  const int bits = h.bits, group = (int)h.group, form = h.flags & KILN_GEMM_Q4_FORM_MASK;
  if (kiln_gemm_q4a8_applies(g)) {
    /* As below: without scratch, the same rule's reference. */
    if (kiln_gemm_q4a8(g, pool))
      snprintf(kiln_gemm_quant_path_, sizeof kiln_gemm_quant_path_, "q4a8-%s",
               kiln_gemm_q4a8_engine());
    else {
      kiln_gemm_q4a8_reference(g);
      snprintf(kiln_gemm_quant_path_, sizeof kiln_gemm_quant_path_, "q4a8-reference");
    }
    return;
  }
  if (kiln_gemm_q8a8_applies(g)) {
    /* The GEMV (decode) or the blocked kernel, one rule. Without its scratch
       the fast kernel gives way to the scalar rule, never to the weight-only
       loop below: that would be another answer. */
    int gemv = M <= KILN_GEMM_GEMV_MAX_M;
    if (gemv ? kiln_gemm_q8a8_gemv(g, pool) : kiln_gemm_q8a8(g, pool))
      snprintf(kiln_gemm_quant_path_, sizeof kiln_gemm_quant_path_, "q8a8-%s%s",
               gemv ? "gemv-" : "",
               gemv ? kiln_gemm_q8a8_engine() : kiln_gemm_q8a8_blocked_engine(K));
    else {
      kiln_gemm_q8a8_reference(g);
      snprintf(kiln_gemm_quant_path_, sizeof kiln_gemm_quant_path_, "q8a8-reference");
    }
    return;
  }
  const int64_t np = kiln_q_cdiv(N, P);
  const int64_t kg = bits == 4 ? kiln_q_cdiv(K, group) : 0;
  const int64_t gb = bits == 4 ? kiln_gemm_q4_group_bytes(group, form) : 0;
  const uint8_t* body = (const uint8_t*)g->b_packed_q + KILN_GEMM_QUANT_HEADER;
  int gemv = M <= KILN_GEMM_GEMV_MAX_M && (bits != 4 || g->batch == 1 || kiln_gemm_quant_a_finite(g));
  snprintf(kiln_gemm_quant_path_, sizeof kiln_gemm_quant_path_, "%s-%s",
           gemv ? "gemv" : "blocked", qk->name);
  void* blk = NULL;

  if (gemv) {
    const int64_t kpad = bits == 4 ? kg * group : K;
    size_t floats = (size_t)(M * kpad + M * kg * 2);
    float* scratch = kiln_scratch_get(&kiln_gemm_quant_scratch_, floats * sizeof(float), &blk);
    if (!scratch) {
      kiln_gemm_f32_reference(g);
      return;
    }
    float* arow = scratch;
    float* asum = scratch + M * kpad;
    kiln_gemm_quant_gemv_t t;
    memset(&t, 0, sizeof(t));
    t.g = g, t.qk = qk, t.bits = bits, t.group = group, t.form = form;
    t.kg = kg, t.kpad = kpad, t.gb = gb, t.np = np, t.body = body, t.a = arow, t.asum = asum;
    int finite = 1;
    for (int64_t bt = 0; bt < g->batch; ++bt) {
      for (int64_t i = 0; i < M; ++i) {
        int64_t base = bt * g->a_batch_stride + i * g->a_row_stride;
        float* dst = arow + i * kpad;
        if (g->a_bf16)
          for (int64_t p = 0; p < K; ++p)
            dst[p] = kiln_gemm_bf16_to_f32(g->a_bf16[base + p * g->a_col_stride]);
        else if (g->a_col_stride == 1)
          memcpy(dst, g->a + base, (size_t)K * sizeof(float));
        else
          for (int64_t p = 0; p < K; ++p) dst[p] = g->a[base + p * g->a_col_stride];
        memset(dst + K, 0, (size_t)(kpad - K) * sizeof(float));
        for (int64_t q = 0; q < kg; ++q) {
          double se = 0.0, so = 0.0;
          for (int64_t r = 0; r < group; r += 2) {
            se += dst[q * group + r];
            so += dst[q * group + r + 1];
          }
          asum[(i * kg + q) * 2] = (float)se;
          asum[(i * kg + q) * 2 + 1] = (float)so;
          finite = finite && isfinite(se + so);
        }
      }
      if (!finite) break; /* one batch (else A was scanned): nothing written yet */
      kiln_gemm_gemv_panels_run(g, M, g->c + bt * g->c_batch_stride,
                                g->residual ? g->residual + bt * g->r_batch_stride : NULL, pool,
                                kiln_gemm_quant_gemv_panels, &t);
    }
    kiln_scratch_put(&kiln_gemm_quant_scratch_, blk);
    if (finite) return;
    snprintf(kiln_gemm_quant_path_, sizeof kiln_gemm_quant_path_, "blocked-%s", qk->name);
  }

  /* Blocked: the fp32 GEMM (its blocking, threads and epilogue), whose
   * compute tasks dequantize B block by block as they go (the fly path). */
  kiln_gemm_quant_fly_t f;
  memset(&f, 0, sizeof(f));
  f.qk = qk, f.bits = bits, f.group = group, f.form = form;
  f.k = K, f.kg = kg, f.gb = gb, f.np = np, f.body = body;
  const kiln_gemm_fly_src_t src = {kiln_gemm_quant_fly_pack, kiln_gemm_quant_fly_where, &f};
  kiln_gemm_f32_fly(g, pool, &src);
}
