/* int4 weights with int8 activations, decode and prefill: each row of A is
 * quantized per group of the blob's G at run time and the nibble x int8
 * products are summed exactly in int32 (llama.cpp's q4_0 x q8_0 idea),
 * then scaled per group in fp32. Used for int4 blobs flagged a8
 * (KILN_GEMM_QUANT_A8, kiln.trace(weights_dtype="int4:a8")); the rule, the
 * order of its float operations and why they are exact up to the final
 * sum are in kiln_gemm.h beside kiln_gemm_q4a8_applies.
 *
 * This file holds the rule's pieces (the group quantizer), the scalar
 * reference, the portable kernels and the driver. Driver, per batch and
 * chunk of at most KILN_Q4A8_CHUNK_M rows: the calling thread quantizes the
 * rows of A (widened from bf16 or gathered from strides first) into int8
 * rows padded to whole groups with their per-group scales and sums; then
 * kiln_gemm_gemv_panels_run (the task loop of every GEMV driver:
 * kiln_gemm_quant.c) runs the GEMV kernel of the level (the int8 engine's
 * where kiln_gemm_int8_engine() has one: kiln_gemm_q4a8_avx512vnni.c,
 * kiln_gemm_q4a8_neondot.c) over contiguous
 * panel runs on each slab of up to KILN_GEMM_GEMV_MAX_M rows in turn, the
 * slab loop inside the panel loop so that a few panels' nibbles (tens of
 * KiB) stay in L1/L2 while every slab reads them (prefill: the weights come
 * from memory once per chunk), and hands each 16-column panel to the fp32
 * epilogue. Each row's result depends
 * on that row alone, so a prompt's rows give the bits decode gives them. Every kernel computes
 * the rule's float operations in the rule's order, so each gives the
 * reference's bits before the epilogue. */
#include <math.h>
#include <string.h>

#include "base/kiln_scratch.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

static int64_t kiln_q4a8_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Rows quantized per pass: bounds the scratch (rows x K bytes) whatever the
 * prompt length, and a pass's int8 rows (256 KiB at K = 1024) stay in L2
 * while the slabs read them. */
#define KILN_Q4A8_CHUNK_M 256

int kiln_gemm_q4a8_applies(const kiln_gemm_f32_args_t* g) {
  if (!g->b_packed_q) return 0;
  kiln_gemm_quant_header_t h;
  kiln_gemm_quant_header_read(g->b_packed_q, &h);
  return h.bits == 4 && (h.flags & KILN_GEMM_QUANT_A8) != 0;
}

/* ---- the rule ------------------------------------------------------------ */

/* One group's scale and values are the int8 rule's for a row
 * (kiln_gemm_q8a8_row_scale / _quantize) applied to the group alone. */
void kiln_qd8_quantize_groups__generic(int64_t k, int64_t kg, int group, const float* a, int8_t* q,
                                       float* d, int32_t* s) {
  for (int64_t g = 0; g < kg; ++g) {
    int64_t p0 = g * group, len = k - p0 < group ? k - p0 : group;
    float dg = kiln_gemm_q8a8_row_scale(len, a + p0, NULL, 1);
    int32_t sum = 0;
    for (int64_t r = 0; r < group; ++r) {
      int8_t v = r < len ? (int8_t)kiln_gemm_q8a8_quantize(a[p0 + r], dg) : 0;
      q[p0 + r] = v;
      sum += v;
    }
    d[g] = dg;
    s[g] = sum;
  }
}

void kiln_gemm_q4a8_reference(const kiln_gemm_f32_args_t* g) {
  kiln_gemm_quant_header_t h;
  kiln_gemm_quant_header_read(g->b_packed_q, &h);
  const int P = KILN_GEMM_PANEL, group = (int)h.group, form = h.flags & KILN_GEMM_Q4_FORM_MASK;
  const int64_t K = g->k, kg = kiln_q4a8_cdiv(K, group);
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const uint8_t* body = (const uint8_t*)g->b_packed_q + KILN_GEMM_QUANT_HEADER;
  const int64_t cs = g->a_col_stride;
  /* Activations are quantized where they are used (no buffer): this is also
     the driver's fallback when its scratch cannot be had. */
  for (int64_t bt = 0; bt < g->batch; ++bt)
    for (int64_t i = 0; i < g->m; ++i) {
      int64_t base = bt * g->a_batch_stride + i * g->a_row_stride;
      const float* a = g->a_bf16 ? NULL : g->a + base;
      const uint16_t* a16 = g->a_bf16 ? g->a_bf16 + base : NULL;
      float* c = g->c + bt * g->c_batch_stride + i * g->c_row_stride;
      const float* r =
          g->residual ? g->residual + bt * g->r_batch_stride + i * g->r_row_stride : NULL;
      for (int64_t j = 0; j < g->n; ++j) {
        const int col = (int)(j % P);
        float o = 0.0f;
        for (int64_t q = 0; q < kg; ++q) {
          int64_t p0 = q * group, len = K - p0 < group ? K - p0 : group;
          float d = kiln_gemm_q8a8_row_scale(len, a ? a + p0 * cs : NULL, a16 ? a16 + p0 * cs : NULL,
                                             cs);
          const uint8_t* blk = body + ((j / P) * kg + q) * gb;
          const float z = kiln_gemm_q4_zero(blk, form, col);
          int32_t dot = 0, sum = 0;
          for (int64_t t = 0; t < len; ++t) {
            int64_t e = (p0 + t) * cs;
            int32_t v = kiln_gemm_q8a8_quantize(a16 ? kiln_gemm_bf16_to_f32(a16[e]) : a[e], d);
            uint8_t byte = blk[hdr + kiln_gemm_q4_byte(t, col)];
            dot += v * (col < 8 ? byte & 15 : byte >> 4);
            sum += v;
          }
          /* dot - z * sum: an integer below 2^24 in magnitude, exact in fp32. */
          float acc = (float)(dot - (int32_t)z * sum);
          o = fmaf(kiln_gemm_q4_scale(blk, form, col) * d, acc, o);
        }
        float x = o;
        if (g->bias) x += g->bias[j];
        x = kiln_activation_scalar(x, g->act);
        c[j] = r ? x + r[j] : x;
      }
    }
}

/* ---- the portable kernel -------------------------------------------------- */

void kiln_qd8_qb4w_gemv__generic(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                                 int64_t lda, const float* ad, const int32_t* as, const uint8_t* b,
                                 int panels, float* out) {
  const int P = KILN_GEMM_PANEL;
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  for (int s = 0; s < panels; ++s) {
    float o[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
    for (int64_t g = 0; g < kg; ++g) {
      const uint8_t* blk = b + ((int64_t)s * kg + g) * gb;
      int32_t dot[KILN_GEMM_GEMV_MAX_M][KILN_GEMM_PANEL] = {{0}};
      for (int64_t r = 0; r < group; ++r)
        for (int c = 0; c < P; ++c) {
          uint8_t byte = blk[hdr + kiln_gemm_q4_byte(r, c)];
          int32_t w = c < 8 ? byte & 15 : byte >> 4;
          for (int64_t i = 0; i < m; ++i) dot[i][c] += w * a[i * lda + g * group + r];
        }
      for (int64_t i = 0; i < m; ++i)
        for (int c = 0; c < P; ++c) {
          int32_t z = (int32_t)kiln_gemm_q4_zero(blk, form, c);
          float acc = (float)(dot[i][c] - z * as[i * kg + g]);
          o[i][c] = fmaf(kiln_gemm_q4_scale(blk, form, c) * ad[i * kg + g], acc, o[i][c]);
        }
    }
    for (int64_t i = 0; i < m; ++i) memcpy(out + (s * m + i) * P, o[i], sizeof(o[i]));
  }
}

/* ---- the driver ------------------------------------------------------------ */

typedef struct {
  kiln_gemm_q4a8_gemv_fn gemv;
  int group, form; /* form: kiln_gemm_q4_* */
  int64_t kg, kpad, gb;
  const uint8_t* body;
  const int8_t* aq;
  const float* ad;
  const int32_t* as;
} kiln_q4a8_t;

static void kiln_q4a8_panels(const void* p, int64_t i0, int64_t m, int64_t q, int np, float* out) {
  const kiln_q4a8_t* t = p;
  t->gemv(m, t->kg, t->group, t->form, t->aq + i0 * t->kpad, t->kpad, t->ad + i0 * t->kg,
          t->as + i0 * t->kg, t->body + q * t->kg * t->gb, np, out);
}

/* The variants of the family's list (KILN_GEMM_Q4A8_ISAS,
 * kernels/kiln_isa_variant.h); the avx2 one also runs at avx512. */
static const kiln_gemm_q4a8_gemv_fn kiln_gemm_q4a8_gemvs[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_GEMM_Q4A8_ISAS, kiln_qd8_qb4w_gemv);
static const kiln_gemm_q4a8_quantize_fn kiln_gemm_q4a8_quantizers[KILN_ISA_COUNT] =
    KILN_ISA_VARIANT_TABLE(KILN_GEMM_Q4A8_ISAS, kiln_qd8_quantize_groups);

kiln_isa_t kiln_gemm_q4a8_level(void) {
  return kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_GEMM_Q4A8_ISAS), kiln_cpu_isa());
}

const char* kiln_gemm_q4a8_engine(void) {
  switch (kiln_gemm_int8_engine()) {
    case KILN_GEMM_INT8_VNNI: return "avx512vnni";
    case KILN_GEMM_INT8_SDOT: return "neondot";
    default: return kiln_cpu_isa_name(kiln_gemm_q4a8_level());
  }
}

kiln_gemm_q4a8_quantize_fn kiln_gemm_q4a8_quantizer(void) {
  return kiln_gemm_q4a8_quantizers[kiln_gemm_q4a8_level()];
}

static kiln_scratch_cache_t kiln_q4a8_scratch_ = KILN_SCRATCH_CACHE_INIT((size_t)16 << 20);

int kiln_gemm_q4a8(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool) {
  kiln_gemm_quant_header_t h;
  kiln_gemm_quant_header_read(g->b_packed_q, &h);
  const int64_t M = g->m, K = g->k;
  kiln_q4a8_t t;
  memset(&t, 0, sizeof(t));
  t.gemv = kiln_gemm_q4a8_gemvs[kiln_gemm_q4a8_level()];
#ifdef KILN_GEMM_HAVE_X86
  if (kiln_gemm_int8_engine() == KILN_GEMM_INT8_VNNI) t.gemv = kiln_qd8_qb4w_gemv__avx512vnni;
#endif
#ifdef KILN_GEMM_HAVE_NEON
  if (kiln_gemm_int8_engine() == KILN_GEMM_INT8_SDOT) t.gemv = kiln_qd8_qb4w_gemv__neondot;
#endif
  kiln_gemm_q4a8_quantize_fn quantize = kiln_gemm_q4a8_quantizer();
  t.group = (int)h.group, t.form = h.flags & KILN_GEMM_Q4_FORM_MASK;
  t.kg = kiln_q4a8_cdiv(K, t.group), t.kpad = t.kg * t.group;
  t.gb = kiln_gemm_q4_group_bytes(t.group, t.form);
  t.body = (const uint8_t*)g->b_packed_q + KILN_GEMM_QUANT_HEADER;
  /* Scratch: one fp32 row (A widened or gathered), the int8 rows of a pass,
   * then per (row, group) the scales and sums. */
  const int64_t rows = M < KILN_Q4A8_CHUNK_M ? M : KILN_Q4A8_CHUNK_M;
  size_t row_bytes = ((size_t)K * sizeof(float) + 63) & ~(size_t)63;
  size_t q_bytes = ((size_t)(rows * t.kpad) + 63) & ~(size_t)63;
  size_t g_bytes = (size_t)(rows * t.kg) * 4;
  void* blk = NULL;
  char* scratch = kiln_scratch_get(&kiln_q4a8_scratch_, row_bytes + q_bytes + 2 * g_bytes, &blk);
  if (!scratch) return 0;
  float* row = (float*)scratch;
  int8_t* aq = (int8_t*)(scratch + row_bytes);
  float* ad = (float*)(scratch + row_bytes + q_bytes);
  int32_t* as = (int32_t*)(scratch + row_bytes + q_bytes + g_bytes);
  t.aq = aq, t.ad = ad, t.as = as;
  for (int64_t bt = 0; bt < g->batch; ++bt) {
    for (int64_t r0 = 0; r0 < M; r0 += rows) {
      const int64_t m = M - r0 < rows ? M - r0 : rows;
      for (int64_t i = 0; i < m; ++i)
        quantize(K, t.kg, t.group, kiln_gemm_quant_a_row(g, bt, r0 + i, row), aq + i * t.kpad,
                 ad + i * t.kg, as + i * t.kg);
      kiln_gemm_gemv_panels_run(
          g, m, g->c + bt * g->c_batch_stride + r0 * g->c_row_stride,
          g->residual ? g->residual + bt * g->r_batch_stride + r0 * g->r_row_stride : NULL, pool,
          kiln_q4a8_panels, &t);
    }
  }
  kiln_scratch_put(&kiln_q4a8_scratch_, blk);
  return 1;
}
