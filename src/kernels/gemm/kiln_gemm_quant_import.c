/* A checkpoint's quantized weights into kiln's quantized blobs, exactly:
 * its integers, scales and zero points are rearranged (shifted by whole
 * numbers), never quantized again, so the blob's dequantized weights are
 * torch's dequantize_per_channel / _per_channel_group values bit for bit
 * and a LINEAR on them differs from eager's dequantize + linear only in
 * fp32 summation order. The rules (which blob fits which checkpoint) are
 * in kiln_gemm.h beside the blob layout. */
#include <math.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"

static int kiln_qi_int(const kiln_gemm_quant_ints_t* s, int64_t i) {
  return s->q_unsigned ? (int)((const uint8_t*)s->q)[i] : (int)((const int8_t*)s->q)[i];
}

static int64_t kiln_qi_groups(const kiln_gemm_quant_ints_t* s, int64_t k) {
  return s->group ? k / s->group : 1;
}

/* Zero point of row j, group g (0 without zero points). */
static float kiln_qi_zero(const kiln_gemm_quant_ints_t* s, int64_t k, int64_t j, int64_t g) {
  return s->zeros ? s->zeros[j * kiln_qi_groups(s, k) + g] : 0.0f;
}

/* Least and greatest q - z over row j's elements [p0, p1) (z whole). */
static void kiln_qi_range(const kiln_gemm_quant_ints_t* s, int64_t k, int64_t j, int64_t p0,
                          int64_t p1, float z, float* lo, float* hi) {
  float a = INFINITY, b = -INFINITY;
  /* Plain comparisons, not fminf/fmaxf (d is never NaN): aarch64 GCC 12
   * stops with an internal compiler error vectorising that reduction. */
  for (int64_t p = p0; p < p1; ++p) {
    float d = (float)kiln_qi_int(s, j * k + p) - z;
    a = d < a ? d : a;
    b = d > b ? d : b;
  }
  *lo = a, *hi = b;
}

int kiln_gemm_quant_ints_form(int64_t k, int64_t n, const kiln_gemm_quant_ints_t* src, int* bits,
                              int* group, int* asym, const char** why) {
  *bits = *group = *asym = 0;
  *why = NULL;
  if (k < 1 || n < 1 || src->group < 0 || (src->group && k % src->group)) {
    *why = "an empty weight or groups that do not divide its rows";
    return 0;
  }
  const int64_t ng = kiln_qi_groups(src, k), G = src->group ? src->group : k;
  for (int64_t i = 0; src->zeros && i < n * ng; ++i)
    if (src->zeros[i] != nearbyintf(src->zeros[i])) {
      *why = "zero points that are not whole numbers";
      return 0;
    }
  int fits8 = 1, fits4 = 1, spans16 = 1;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t g = 0; g < ng; ++g) {
      float lo, hi;
      kiln_qi_range(src, k, j, g * G, g * G + G, kiln_qi_zero(src, k, j, g), &lo, &hi);
      fits8 &= lo >= -128.0f && hi <= 127.0f;
      fits4 &= lo >= -8.0f && hi <= 7.0f;
      spans16 &= hi - lo <= 15.0f;
    }
  /* One scale per row whose integers fit int4 (PT2E's 4-bit per-channel
   * weights): int4 with the row as its one group, half int8's bytes. */
  if (ng == 1 && (fits4 || spans16) && G % 32 == 0 && G >= 32 && G <= 4096) {
    *bits = 4, *group = (int)G, *asym = !fits4;
    return 1;
  }
  if (ng == 1) { /* one scale per row: int8's */
    if (fits8) {
      *bits = 8;
      return 1;
    }
    *why = "integers minus zero points outside int8's range -128..127";
    return 0;
  }
  if (G % 32 || G < 32 || G > 4096) {
    *why = "scales per group of a size kiln's int4 lacks (a multiple of 32 up to 4096)";
    return 0;
  }
  if (!fits4 && !spans16) {
    *why = "a group's integers spanning more than int4's 16 values (kiln's int8 takes one scale "
           "per output channel, not per group)";
    return 0;
  }
  *bits = 4, *group = (int)G, *asym = !fits4;
  return 1;
}

void kiln_gemm_quant_pack_b_ints(int64_t k, int64_t n, const kiln_gemm_quant_ints_t* src,
                                 int bits, int group, int asym, void* out) {
  /* fp32 scales and zero points: the checkpoint's own, exactly (form bit 0:
   * asym; no KILN_GEMM_QUANT_BF16_SCALES). */
  if (!kiln_gemm_quant_blob_start(k, n, bits, group, asym ? 1 : 0, out)) return;
  uint8_t* body = (uint8_t*)out + KILN_GEMM_QUANT_HEADER;
  const int P = KILN_GEMM_PANEL;
  const int64_t np = (n + P - 1) / P, ng = kiln_qi_groups(src, k);
  if (bits == 8) { /* one scale per row: q - z, exact in int8 (the form said so) */
    float* scales = (float*)body;
    int8_t* data = (int8_t*)(body + np * P * 4);
    for (int64_t j = 0; j < n; ++j) {
      float z = kiln_qi_zero(src, k, j, 0);
      scales[j] = src->scales[j * ng];
      int8_t* col = data + (j / P) * P * k + j % P;
      for (int64_t p = 0; p < k; ++p)
        col[p * P] = (int8_t)((float)kiln_qi_int(src, j * k + p) - z);
    }
    return;
  }
  /* int4: the checkpoint's groups are the blob's (group == src->group). */
  const int form = asym ? 1 : 0;
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form);
  for (int64_t j = 0; j < np * P; ++j) {
    const int c = (int)(j % P);
    for (int64_t g = 0; g < ng; ++g) {
      uint8_t* blk = body + (j / P) * ng * gb + g * gb;
      float* sc = (float*)blk;
      uint8_t* bytes = blk + kiln_gemm_q4_header_bytes(form);
      float z = asym ? 0.0f : 8.0f, shift = 0.0f; /* the nibble is q - shift */
      if (j < n) {
        float zq = kiln_qi_zero(src, k, j, g), lo, hi;
        kiln_qi_range(src, k, j, g * group, g * group + group, 0.0f, &lo, &hi);
        shift = asym ? lo : zq - 8.0f;
        if (asym) z = zq - lo;
        sc[c] = src->scales[j * ng + g];
      } /* else: a padding column, scale 0 and every nibble z (weight 0) */
      if (asym) sc[P + c] = z;
      for (int64_t r = 0; r < group; ++r) {
        uint8_t nib = (uint8_t)(j < n ? (float)kiln_qi_int(src, j * k + g * group + r) - shift : z);
        bytes[kiln_gemm_q4_byte(r, c)] |= (uint8_t)(c < 8 ? nib : nib << 4);
      }
    }
  }
}

void kiln_gemm_quant_ints_dequantize(int64_t k, int64_t n, const kiln_gemm_quant_ints_t* src,
                                     float* out) {
  const int64_t ng = kiln_qi_groups(src, k), G = src->group ? src->group : k;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p) {
      int64_t g = p / G;
      out[j * k + p] =
          ((float)kiln_qi_int(src, j * k + p) - kiln_qi_zero(src, k, j, g)) * src->scales[j * ng + g];
    }
}
