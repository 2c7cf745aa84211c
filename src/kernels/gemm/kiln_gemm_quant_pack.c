/* Quantizing weights into kiln's int8 / int4 blobs (the rules and the
 * layout are in kiln_gemm.h): the scalar rule, and the fast path every
 * Linear weight takes.
 *
 * The scalar rule (kiln_q8_column, kiln_q4_group) reads any strides and
 * any values. A Linear's weight is (N, K), so each output column's K values
 * are contiguous; there, per column (int8) or group (int4), one pass finds
 * the extremes and whether every value is finite, and a second divides,
 * rounds and clamps, both loops without branches or libm calls that the
 * compiler vectorizes (x86-64 baseline SSE2, per -fopt-info-vec). The fast
 * path takes a column or group only where it provably computes the rule's values: all
 * values finite and a normal (not denormal, not zero) scale, so every
 * quotient is within 16 (int4) or 128 (int8) of zero and the inline
 * rounding is the rule's rounding; anything else falls back to the rule.
 * (The scale test is stricter than needed: a nonzero finite scale already
 * bounds the quotients; a normal one makes that obvious.) The bytes are
 * identical (test_gemm_quant's quant_pack_fast compares them with
 * kiln_gemm_quant_pack_b_reference's, edge values included).
 *
 * Measured on Zen 3, one thread, a 5632 x 2048 weight (fastest of 5, CPU
 * time), before -> now: int4 groups of 32 5.0 -> 2.3 ns per weight,
 * asymmetric 4.4 -> 2.2, groups of 128 4.9 -> 1.6, int8 4.1 -> 1.7; the
 * 1.1B Llama's pack pass (int4:a8, 2 threads) 2.7 s of its first
 * generate(), 3.7 s with the fast path off. The
 * division (the rule's, not a multiply by the reciprocal) and the nibble
 * interleave are what is left. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

static int64_t kiln_qp_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static float kiln_q_clamp(float x, float lo, float hi) { return x < lo ? lo : x > hi ? hi : x; }

/* nearbyintf(x) in the default rounding mode (to nearest, ties to even),
 * inline: adding and taking away 1.5 * 2^23 leaves x rounded for |x| < 2^22
 * (every quotient the rules round is within +-128 of zero unless a scale
 * is denormal; larger ones are whole numbers already or clamp). The libm
 * call per weight made packing a 1.1B-weight model take ~10 s. */
#define KILN_Q_MAGIC 12582912.0f /* 1.5 * 2^23 */
static inline float kiln_q_round(float x) {
  return fabsf(x) < 4194304.0f ? (x + KILN_Q_MAGIC) - KILN_Q_MAGIC : nearbyintf(x);
}

/* Whether the n values src[r * rs] are all finite. A column or group
 * holding a NaN or an infinity dequantizes to NaN throughout (kiln_gemm.h):
 * the rule's max would skip a NaN and quantize the rest to finite values,
 * a silent answer where eager's model has NaN. */
static int kiln_q_finite(int64_t n, const float* src, int64_t rs) {
  for (int64_t r = 0; r < n; ++r)
    if (!isfinite(src[r * rs])) return 0;
  return 1;
}

/* Quantizes one column (k values, src[p * rs]) into an int8 panel column. */
static void kiln_q8_column(int64_t k, const float* src, int64_t rs, int8_t* dst, float* scale) {
  if (!kiln_q_finite(k, src, rs)) {
    *scale = NAN;
    for (int64_t p = 0; p < k; ++p) dst[p * KILN_GEMM_PANEL] = 0;
    return;
  }
  float amax = 0.0f;
  for (int64_t p = 0; p < k; ++p) {
    float a = fabsf(src[p * rs]);
    amax = a > amax ? a : amax;
  }
  float s = amax / 127.0f;
  if (s == 0.0f) s = 1.0f;
  *scale = s;
  for (int64_t p = 0; p < k; ++p)
    dst[p * KILN_GEMM_PANEL] = (int8_t)kiln_q_clamp(kiln_q_round(src[p * rs] / s), -127.0f, 127.0f);
}

/* x rounded to bf16 (to nearest even): the scales int4 blobs store. */
static float kiln_q_bf16(float x) { return kiln_gemm_bf16_to_f32(kiln_gemm_bf16_from_f32(x)); }

/* Quantizes rows [p0, p0 + len) of one column into nibbles (index r within
 * the group) plus its scale (a bf16 value: the rule quantizes with the
 * scale it stores) and zero point. */
static void kiln_q4_group(int64_t len, int group, int asym, const float* src, int64_t rs,
                          uint8_t* nib, float* scale, float* zero) {
  float s, z;
  if (!kiln_q_finite(len, src, rs)) { /* weight (z - z) * NaN */
    z = asym ? 0.0f : 8.0f;
    memset(nib, (int)z, (size_t)group);
    *scale = NAN;
    *zero = z;
    return;
  }
  if (asym) {
    float lo = 0.0f, hi = 0.0f;
    for (int64_t r = 0; r < len; ++r) {
      float x = src[r * rs];
      lo = x < lo ? x : lo;
      hi = x > hi ? x : hi;
    }
    s = kiln_q_bf16((hi - lo) / 15.0f);
    if (s == 0.0f) s = 1.0f;
    z = kiln_q_clamp(kiln_q_round(-lo / s), 0.0f, 15.0f);
    for (int64_t r = 0; r < group; ++r)
      nib[r] = r < len ? (uint8_t)kiln_q_clamp(kiln_q_round(src[r * rs] / s) + z, 0.0f, 15.0f)
                       : (uint8_t)z;
  } else {
    float m = 0.0f;
    for (int64_t r = 0; r < len; ++r)
      if (fabsf(src[r * rs]) > fabsf(m)) m = src[r * rs];
    s = kiln_q_bf16(m / -8.0f);
    z = 8.0f;
    for (int64_t r = 0; r < group; ++r) {
      float q = r < len && s != 0.0f ? kiln_q_clamp(kiln_q_round(src[r * rs] / s), -8.0f, 7.0f) : 0.0f;
      nib[r] = (uint8_t)(q + 8.0f);
    }
  }
  *scale = s;
  *zero = z;
}

/* ---- the fast path: contiguous, finite values, a normal scale --------- */

/* hi = max(0, max x), lo = min(0, min x) over n contiguous values, and
 * whether all are finite. Compared as integers, so the loop vectorizes
 * (the float comparisons' NaN rules keep the compiler from it): key(v) =
 * v's bits with the magnitude bits flipped when negative orders finite
 * floats as they compare, except that -0 sorts below +0: lo may be -0
 * where the rule's is +0, which no result sees (the symmetric rule then
 * has m = 0 and takes the scalar path; the asymmetric one's -lo / s
 * rounds to +0 either way). */
static int32_t kiln_q_flip(int32_t b) { return b ^ (int32_t)((uint32_t)(b >> 31) >> 1); }

/* The key of v, and the value of a key: the flip keeps the sign bit, so it
 * is its own inverse. */
static int32_t kiln_q_key(float v) {
  int32_t b;
  memcpy(&b, &v, 4);
  return kiln_q_flip(b);
}

static float kiln_q_unkey(int32_t k) {
  int32_t b = kiln_q_flip(k);
  float v;
  memcpy(&v, &b, 4);
  return v;
}

static int kiln_q_scan(int64_t n, const float* x, float* hi_out, float* lo_out) {
  int32_t hi = 0, lo = 0, inf = 0;
  for (int64_t r = 0; r < n; ++r) {
    int32_t k = kiln_q_key(x[r]), e;
    memcpy(&e, &x[r], 4);
    hi = k > hi ? k : hi;
    lo = k < lo ? k : lo;
    inf |= (e & 0x7f800000) == 0x7f800000; /* inf or NaN */
  }
  *hi_out = kiln_q_unkey(hi);
  *lo_out = kiln_q_unkey(lo);
  return !inf;
}

static int kiln_q_normal(float s) { return fabsf(s) >= FLT_MIN && fabsf(s) <= FLT_MAX; }

/* kiln_q8_column for a contiguous column; 0 (nothing written) where the
 * rule must run. q is the column's K values, then scattered to the panel. */
static int kiln_q8_column_fast(int64_t k, const float* src, int8_t* dst, float* scale) {
  float hi, lo;
  if (!kiln_q_scan(k, src, &hi, &lo)) return 0;
  float amax = hi > -lo ? hi : -lo;
  float s = amax / 127.0f;
  if (!kiln_q_normal(s)) return 0;
  *scale = s;
  int8_t q[256];
  for (int64_t p0 = 0; p0 < k; p0 += 256) {
    int64_t n = k - p0 < 256 ? k - p0 : 256;
    for (int64_t p = 0; p < n; ++p) {
      int32_t v = (int32_t)((src[p0 + p] / s + KILN_Q_MAGIC) - KILN_Q_MAGIC); /* whole */
      q[p] = (int8_t)(v < -127 ? -127 : v > 127 ? 127 : v);
    }
    for (int64_t p = 0; p < n; ++p) dst[(p0 + p) * KILN_GEMM_PANEL] = q[p];
  }
  return 1;
}

/* kiln_q4_group for a whole contiguous group; 0 (nothing written) where the
 * rule must run. The symmetric rule's m is the first element of largest
 * magnitude: hi or lo, unless they tie in magnitude (then the first). */
static int kiln_q4_group_fast(int group, int asym, const float* src, uint8_t* nib, float* scale,
                              float* zero) {
  float hi, lo;
  if (!kiln_q_scan(group, src, &hi, &lo)) return 0;
  if (asym) {
    float s = kiln_q_bf16((hi - lo) / 15.0f);
    if (!kiln_q_normal(s)) return 0;
    float z = kiln_q_clamp((-lo / s + KILN_Q_MAGIC) - KILN_Q_MAGIC, 0.0f, 15.0f);
    int32_t zi = (int32_t)z;
    for (int r = 0; r < group; ++r) {
      int32_t v = (int32_t)((src[r] / s + KILN_Q_MAGIC) - KILN_Q_MAGIC) + zi;
      nib[r] = (uint8_t)(v < 0 ? 0 : v > 15 ? 15 : v);
    }
    *scale = s;
    *zero = z;
    return 1;
  }
  float m = hi > -lo ? hi : lo;
  if (hi == -lo)
    for (int r = 0; r < group; ++r)
      if (fabsf(src[r]) == hi) {
        m = src[r];
        break;
      }
  float s = kiln_q_bf16(m / -8.0f);
  if (!kiln_q_normal(s)) return 0;
  for (int r = 0; r < group; ++r) {
    int32_t v = (int32_t)((src[r] / s + KILN_Q_MAGIC) - KILN_Q_MAGIC);
    nib[r] = (uint8_t)((v < -8 ? -8 : v > 7 ? 7 : v) + 8);
  }
  *scale = s;
  *zero = 8.0f;
  return 1;
}

/* ---- packing, panel by panel ------------------------------------------ */

/* One packing job (each panel writes its own columns' scales and bytes).
 * Serial: the pack pass runs its weights' jobs on the pool already, and a
 * parallel_for inside one of its tasks would wait on its own pool. */
typedef struct {
  int64_t k, n, rs, np, kg, gb;
  const kiln_gemm_b_src_t* src;
  int bits, group, asym, form, fast;
  uint8_t* body;
} kiln_q_pack_job_t;

static void kiln_q8_pack_panel(const kiln_q_pack_job_t* jb, int64_t panel) {
  const int P = KILN_GEMM_PANEL;
  float* scales = (float*)jb->body;
  int8_t* data = (int8_t*)(jb->body + jb->np * P * 4);
  for (int64_t j = panel * P; j < jb->n && j < (panel + 1) * P; ++j) {
    const float* col = kiln_gemm_b_col(jb->src, j);
    int8_t* dst = data + panel * P * jb->k + j % P;
    if (!(jb->fast && kiln_q8_column_fast(jb->k, col, dst, &scales[j])))
      kiln_q8_column(jb->k, col, jb->rs, dst, &scales[j]);
  }
}

/* int4, per group block: each column's nibbles, then the block's bytes
 * (byte (r / 2) * 16 + 2 c + (r & 1) holds row r of columns c and c + 8):
 * for groups up to 128 rows all 16 columns first and each byte written
 * once, for wider ones column by column into its half of each byte. */
static void kiln_q4_pack_panel(const kiln_q_pack_job_t* jb, int64_t panel) {
  const int P = KILN_GEMM_PANEL, group = jb->group, asym = jb->asym;
  uint8_t nib[KILN_GEMM_PANEL][128], wide[4096];
  for (int64_t g0 = 0; g0 < jb->kg; ++g0) {
    uint8_t* blk = jb->body + panel * jb->kg * jb->gb + g0 * jb->gb;
    uint16_t* sc = (uint16_t*)blk; /* bf16 scales, then (asym) zero points */
    uint8_t* bytes = blk + kiln_gemm_q4_header_bytes(jb->form);
    int64_t p0 = g0 * group, len = jb->k - p0 < group ? jb->k - p0 : group;
    for (int c = 0; c < P; ++c) {
      int64_t j = panel * P + c;
      uint8_t* dst = group <= 128 ? nib[c] : wide;
      float s = 0.0f, z = asym ? 0.0f : 8.0f;
      if (j < jb->n) {
        const float* col = kiln_gemm_b_col(jb->src, j) + p0 * jb->rs;
        if (!(jb->fast && len == group && kiln_q4_group_fast(group, asym, col, dst, &s, &z)))
          kiln_q4_group(len, group, asym, col, jb->rs, dst, &s, &z);
      } else {
        memset(dst, (int)z, (size_t)group);
      }
      sc[c] = kiln_gemm_bf16_from_f32(s); /* exact: s is a bf16 value */
      if (asym) sc[P + c] = kiln_gemm_bf16_from_f32(z); /* 0..15: exact */
      if (group > 128)
        for (int64_t r = 0; r < group; ++r)
          bytes[kiln_gemm_q4_byte(r, c)] |= (uint8_t)(c < 8 ? wide[r] : wide[r] << 4);
    }
    if (group <= 128)
      for (int64_t r = 0; r < group; ++r)
        for (int c = 0; c < 8; ++c)
          bytes[kiln_gemm_q4_byte(r, c)] = (uint8_t)(nib[c][r] | nib[c + 8][r] << 4);
  }
}

static void kiln_q_pack(int64_t k, int64_t n, const kiln_gemm_b_src_t* src, int bits, int group,
                        int asym, int fast, void* out) {
  const int form = kiln_gemm_quant_own_form(bits, asym);
  if (!kiln_gemm_quant_blob_start(k, n, bits, group, form, out)) return;
  kiln_q_pack_job_t jb = {k,    n,     src->rs, kiln_qp_cdiv(n, KILN_GEMM_PANEL), 0, 0, src, bits,
                          group, asym, form,    fast && src->rs == 1, (uint8_t*)out + KILN_GEMM_QUANT_HEADER};
  if (bits == 4) {
    jb.kg = kiln_qp_cdiv(k, group);
    jb.gb = kiln_gemm_q4_group_bytes(group, form);
  }
  for (int64_t p = 0; p < jb.np; ++p) {
    if (bits == 8)
      kiln_q8_pack_panel(&jb, p);
    else
      kiln_q4_pack_panel(&jb, p);
  }
}

void kiln_gemm_quant_pack_b(int64_t k, int64_t n, const float* b, int64_t rs, int64_t cs,
                            int bits, int group, int asym, void* out) {
  const kiln_gemm_b_src_t src = {b, NULL, n, rs, cs};
  kiln_q_pack(k, n, &src, bits, group, asym, 1, out);
}

void kiln_gemm_quant_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src, int bits,
                                int group, int asym, void* out) {
  kiln_q_pack(k, n, src, bits, group, asym, 1, out);
}

void kiln_gemm_quant_pack_b_reference(int64_t k, int64_t n, const float* b, int64_t rs, int64_t cs,
                                      int bits, int group, int asym, void* out) {
  const kiln_gemm_b_src_t src = {b, NULL, n, rs, cs};
  kiln_q_pack(k, n, &src, bits, group, asym, 0, out);
}
