/* int4 x int8 on aarch64 ASIMD (NEON): the GEMV (decode, and prefill in
 * slabs of 8 rows: kiln_gemm_q4a8.c) and the activations' group quantizer,
 * kiln_gemm_q4a8.c's contracts (the rule is in kiln_gemm.h). Compiled only
 * on aarch64 (ASIMD is baseline, no dot-product extension needed) and
 * called only when kiln_cpu_isa() == KILN_ISA_NEON.
 *
 * The blob pairs K rows per byte: byte l of a row pair's 16 bytes holds
 * rows 2t + (l & 1), column l >> 1 in the low nibble and column (l >> 1) +
 * 8 in the high one. So v & 0x0F and v >> 4 are signed-safe int8 lanes
 * (0..15) in (column, row parity) order, and A enters as its pair (q[2t],
 * q[2t + 1]) repeated over the 16 lanes: SMLAL / SMLAL2 multiply and add
 * into int16 lanes, and SADALP adds each column's two parities into its
 * int32 group sum. Per 32 weights and row: 4 SMLAL; shared by the rows:
 * one load, AND, USHR; about 0.25 instructions per weight at one row,
 * against about 1.2 for the fp32 GEMV of kiln_gemm_quant_neon.c.
 *
 * No int16 overflow: a product is at most 15 * 127 = 1905 in magnitude and
 * an int16 lane takes 16 (one per row pair) before SADALP widens it, at
 * most 30480 < 32767. Per group the int32 sums are converted once (exact
 * below 2^24), z * s_ig taken off in int32, and scale * d applied by one
 * FMA, in the rule's order: the kernel gives the scalar reference's bits.
 * Tested under qemu-aarch64 only (make test-arm64): its speed on a real
 * Arm core has never been measured. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_quant_internal.h"
#include "kernels/gemm/kiln_gemm_quant_neon.h"

#define KILN_Q4A8N_AI static inline __attribute__((always_inline))

/* Row pairs per int16 accumulator (the bound above). */
#define KILN_Q4A8N_CHUNK 16

/* A's pair (q[p], q[p + 1]) in every 16-bit lane. */
KILN_Q4A8N_AI int8x16_t kiln_q4a8_pair_neon(const int8_t* p) {
  int16_t v;
  memcpy(&v, p, sizeof v);
  return vreinterpretq_s8_s16(vdupq_n_s16(v));
}

/* R (1 or 2) rows x one panel; sums per row: [0] columns 0-3, [1] 4-7
 * (low nibbles), [2] 8-11, [3] 12-15 (high nibbles). */
KILN_Q4A8N_AI void kiln_q4a8_tile_neon(const int R, int64_t kg, int group, int form,
                                       const int8_t* a, int64_t lda, const float* ad,
                                       const int32_t* as, const uint8_t* b, float* out) {
  const int64_t gb = kiln_gemm_q4_group_bytes(group, form), hdr = kiln_gemm_q4_header_bytes(form);
  const int asym = kiln_gemm_q4_asym(form), bf16 = (form & KILN_GEMM_QUANT_BF16_SCALES) != 0;
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  float32x4_t o[2][4];
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < 4; ++u) o[i][u] = vdupq_n_f32(0.0f);
  for (int64_t g = 0; g < kg; ++g) {
    const uint8_t* blk = b + g * gb;
    const uint8_t* bytes = blk + hdr;
    int32x4_t dot[2][4];
    for (int i = 0; i < R; ++i)
      for (int u = 0; u < 4; ++u) dot[i][u] = vdupq_n_s32(0);
    for (int t0 = 0; t0 < group / 2; t0 += KILN_Q4A8N_CHUNK) {
      int16x8_t h[2][4];
      for (int i = 0; i < R; ++i)
        for (int u = 0; u < 4; ++u) h[i][u] = vdupq_n_s16(0);
      for (int t = t0; t < t0 + KILN_Q4A8N_CHUNK; ++t) {
        const uint8x16_t v = vld1q_u8(bytes + 16 * t);
        const int8x16_t lo = vreinterpretq_s8_u8(vandq_u8(v, m4));
        const int8x16_t hi = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
        for (int i = 0; i < R; ++i) {
          const int8x16_t av = kiln_q4a8_pair_neon(a + i * lda + g * group + 2 * t);
          h[i][0] = vmlal_s8(h[i][0], vget_low_s8(lo), vget_low_s8(av));
          h[i][1] = vmlal_high_s8(h[i][1], lo, av);
          h[i][2] = vmlal_s8(h[i][2], vget_low_s8(hi), vget_low_s8(av));
          h[i][3] = vmlal_high_s8(h[i][3], hi, av);
        }
      }
      for (int i = 0; i < R; ++i)
        for (int u = 0; u < 4; ++u) dot[i][u] = vpadalq_s16(dot[i][u], h[i][u]);
    }
    KILN_Q4A8_NEON_GROUP_END(R, blk, asym, bf16, ad, as, kg, g, dot, o);
  }
  for (int i = 0; i < R; ++i)
    for (int u = 0; u < 4; ++u) vst1q_f32(out + i * 16 + 4 * u, o[i][u]);
}

void kiln_qd8_qb4w_gemv__neon(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                              int64_t lda, const float* ad, const int32_t* as, const uint8_t* b,
                              int panels, float* out) {
  const int64_t pstride = kg * kiln_gemm_q4_group_bytes(group, form);
  /* Rows two at a time: 2 x (4 int16 + 4 int32 + 4 fp32) accumulators. */
  for (int q = 0; q < panels; ++q)
    for (int64_t i0 = 0; i0 < m; i0 += 2) {
      const int8_t* ar = a + i0 * lda;
      const float* dr = ad + i0 * kg;
      const int32_t* sr = as + i0 * kg;
      float* oq = out + q * m * 16 + i0 * 16;
      if (m - i0 >= 2)
        kiln_q4a8_tile_neon(2, kg, group, form, ar, lda, dr, sr, b + q * pstride, oq);
      else
        kiln_q4a8_tile_neon(1, kg, group, form, ar, lda, dr, sr, b + q * pstride, oq);
    }
}

/* The group rule of kiln_qd8_quantize_groups__generic, four lanes at a
 * time: IEEE division and round-to-nearest-even (FRINTN) as the scalar
 * rule's x / d and nearbyintf, so the values are the same bits. */
void kiln_qd8_quantize_groups__neon(int64_t k, int64_t kg, int group, const float* a, int8_t* q,
                                    float* d, int32_t* s) {
  const float32x4_t lim = vdupq_n_f32(127.0f), nlim = vdupq_n_f32(-127.0f);
  const float32x4_t inf = vdupq_n_f32(INFINITY);
  for (int64_t g = 0; g < kg; ++g) {
    const int64_t p0 = g * group;
    if (k - p0 < group) {
      kiln_qd8_quantize_groups__generic(k - p0, 1, group, a + p0, q + p0, d + g, s + g);
      continue;
    }
    const float* x = a + p0;
    float32x4_t mx = vdupq_n_f32(0.0f);
    uint32x4_t ok = vdupq_n_u32(~0u);
    for (int p = 0; p < group; p += 4) {
      const float32x4_t v = vabsq_f32(vld1q_f32(x + p));
      ok = vandq_u32(ok, vcltq_f32(v, inf)); /* false for an infinity or a NaN */
      mx = vmaxq_f32(mx, v);
    }
    if (vminvq_u32(ok) == 0) {
      memset(q + p0, 0, (size_t)group);
      d[g] = NAN;
      s[g] = 0;
      continue;
    }
    float dg = vmaxvq_f32(mx) / 127.0f;
    if (dg == 0.0f) dg = 1.0f;
    const float32x4_t dv = vdupq_n_f32(dg);
    int32x4_t sum = vdupq_n_s32(0);
    for (int p = 0; p < group; p += 8) {
      float32x4_t r0 = vrndnq_f32(vdivq_f32(vld1q_f32(x + p), dv));
      float32x4_t r1 = vrndnq_f32(vdivq_f32(vld1q_f32(x + p + 4), dv));
      const int32x4_t i0 = vcvtq_s32_f32(vminq_f32(vmaxq_f32(r0, nlim), lim));
      const int32x4_t i1 = vcvtq_s32_f32(vminq_f32(vmaxq_f32(r1, nlim), lim));
      sum = vaddq_s32(sum, vaddq_s32(i0, i1));
      vst1_s8(q + p0 + p, vmovn_s16(vcombine_s16(vmovn_s32(i0), vmovn_s32(i1))));
    }
    d[g] = dg;
    s[g] = vaddvq_s32(sum);
  }
}
