/* What the quantized-weights driver (kiln_gemm_quant.c) and its per-ISA
 * kernels share. The blob layout is documented in kiln_gemm.h.
 *
 * GEMV kernels (M <= KILN_GEMM_GEMV_MAX_M) compute, for `panels`
 * consecutive 16-column panels s, out[s * m * 16 + i * 16 + j] = sum_p
 * A[i][p] * B[p][16 s + j], the weights dequantized in registers:
 *   int8: per panel, K rows of 16 int8 (panel s at b + s * 16 * k) and its
 *     16 scales at scales + 16 s; the sum is taken over the integers and
 *     scaled once at the end (per-column scales factor out of the sum);
 *   int4: A's rows are zero-padded to kg * group columns; asum holds, per
 *     row i and group g, the sums of A over the group's even and odd rows
 *     at asum[i * kg * 2 + 2 g + {0, 1}]; per group the kernel sums A times
 *     the raw nibbles (0..15; AVX2 keeps each at a power of 2, which factors
 *     out exactly), then adds scale * (sum - z * asum): the zero point (8
 *     when symmetric) is applied once per group, not per weight.
 * Dequantizers (the blocked path, M > 8) write rows [p0, p0 + kc) of
 * `panels` consecutive panels (the first at b: int8 panel s at b + s * 16
 * * k with its scales at scales + 16 s; int4 at b + s * kg * group bytes)
 * as fp32 panels of kc rows, kiln_gemm_f32_pack_b's layout cut to the K
 * block: out[s * kc * 16 + (p - p0) * 16 + j] = B[p][16 s + j], exactly
 * the scalar rule's values. p0 and kc need not line up with int4 groups
 * (nor be even). The fp32 driver calls them through kiln_gemm_f32_fly for
 * each kc x KILN_GEMM_FLY_NB block a compute task packs. */
#ifndef KILN_GEMM_QUANT_INTERNAL_H
#define KILN_GEMM_QUANT_INTERNAL_H

/* How far ahead of its read position a quantized GEMV prefetches its weight
 * stream, in bytes. With 1 KiB ahead in each of its panel streams, a Zen 5
 * core ran one row's int4 GEMV on weights from DRAM at half its speed on
 * weights in L2 (32 against 58 G weights/s), bound by the lines in flight,
 * not by its instructions or the bandwidth. 3 KiB, weights from DRAM, 1
 * thread, 1x4096x4096: int4 g32 424 -> 337 us, int8 561 -> 457, int4:a8
 * 293 -> 266; 1.1-1.4x at 4 and 8 rows;
 * bench/kernels/bench_gemm_quant; AVX2 kernels 1.0-1.24x). int8:a8's GEMV
 * (kiln_gemm_q8a8_gemv*.c) already reads at the core's bandwidth at one
 * row and lost 4 % at 2 KiB: it keeps 1 KiB. */
#define KILN_GEMM_QUANT_PREFETCH 3072

#include <stdint.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

typedef void (*kiln_gemm_gemv_q8_fn)(int64_t m, int64_t k, const float* a, int64_t lda,
                                     const int8_t* b, const float* scales, int panels,
                                     float* out);
typedef void (*kiln_gemm_gemv_q4_fn)(int64_t m, int64_t kg, int group, int form, const float* a,
                                     int64_t lda, const float* asum, const uint8_t* b,
                                     int panels, float* out);
typedef void (*kiln_gemm_dequant_q8_fn)(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                                        const float* scales, int panels, float* out);
typedef void (*kiln_gemm_dequant_q4_fn)(int64_t kg, int group, int form, int64_t p0,
                                        int64_t kc, const uint8_t* b, int panels, float* out);

/* Named as kiln_gemm_internal.h says: dtype f32_qc8w (fp32 A, int8 weights
 * with per-column scales), f32_qb4w (fp32 A, int4 weights in groups: block
 * scales), qd8_qc8w (int8 A quantized per row at run time, int8 weights);
 * one table per level of KILN_GEMM_QUANT_ISAS (kiln_gemm_quant.c) and the
 * q8a8 kernels per level of KILN_GEMM_Q8A8_ISAS (kiln_gemm_q8a8.c). */
typedef struct {
  const char* name;
  kiln_gemm_gemv_q8_fn gemv_q8;
  kiln_gemm_gemv_q4_fn gemv_q4;
  kiln_gemm_dequant_q8_fn dequant_q8;
  kiln_gemm_dequant_q4_fn dequant_q4;
} kiln_gemm_quant_kernels_t;

/* int8 x int8 (kiln_gemm_q8a8.c). Packed A: rows in panels of 6, each
 * panel kp = K rounded up to even columns as kp / 2 pairs of 6 rows x 2
 * int16: element (i, p) of a panel at (p / 2) * 12 + 2 i + p % 2 (zero
 * past K and in rows past M), so one 32-bit load is a row's pair. The
 * microkernel sums, over all K, out[i * 16 + j] = sum_p A(i, p) * B(p, j)
 * for a 6-row panel a and one 16-column int8 panel b (K rows of 16, the
 * blob's layout) exactly in int32. The packer quantizes rows [0, rows) of A
 * (element (i, p) at a[i * rs + p * cs], or a16) by the rule in kiln_gemm.h
 * into rows_pad rows (a multiple of 6, zero past rows) and their scales. */
typedef void (*kiln_gemm_q8a8_ukernel_fn)(int64_t k, const int16_t* a, const int8_t* b,
                                          int32_t* out);
typedef void (*kiln_gemm_q8a8_pack_a_fn)(int64_t rows, int64_t rows_pad, int64_t k,
                                         const float* a, const uint16_t* a16, int64_t rs,
                                         int64_t cs, int16_t* out, float* scales);
/* The rule's pieces: a row's scale (NaN when the row holds a non-finite
 * element) and one element's quantized value. */
float kiln_gemm_q8a8_row_scale(int64_t k, const float* a, const uint16_t* a16, int64_t cs);
int16_t kiln_gemm_q8a8_quantize(float x, float s);
/* The level whose q8a8 kernels run now (kiln_cpu_isa(), the family's list). */
kiln_isa_t kiln_gemm_q8a8_level(void);
/* The int8 engine the q8a8 kernels run on now (kiln_gemm_q8a8.c): VNNI is
 * VPDPBUSD (and VPERMB / VPERMT2B for its transposes), at the avx512 level
 * of a CPU with AVX512-VNNI and VBMI; SDOT is Arm's dot product, at the
 * neon level of a CPU with dotprod; LEVEL, the level's kernels (so
 * KILN_ISA=avx2, or generic on Arm, keeps those). */
typedef enum { KILN_GEMM_INT8_LEVEL, KILN_GEMM_INT8_VNNI, KILN_GEMM_INT8_SDOT } kiln_gemm_int8_engine_t;
kiln_gemm_int8_engine_t kiln_gemm_int8_engine(void);
/* 1 when the blocked (prefill) q8a8 kernel runs on AMX-INT8 tiles: the
 * avx512 level, AMX-INT8 and VBMI, and AMX allowed (kiln_cpu_bf16()'s
 * KILN_CPU_BF16_AMX: the one switch for AMX tiles, which KILN_ISA and the
 * tests turn off). The decode GEMV keeps the int8 engine's kernels. */
int kiln_gemm_q8a8_amx_tiles(void);
/* What the q8a8 kernels (blocked and GEMV) run on now: "avx512vnni",
 * "neondot" (the engines), else the level's name. */
const char* kiln_gemm_q8a8_engine(void);
/* What the blocked (prefill) q8a8 kernel runs on for K: "amx" (above),
 * "neoni8mm" where
 * the SDOT engine's CPU also has i8mm (kiln_gemm_q8a8_neoni8mm.c; K up to
 * 16384, its buffer's bound), else kiln_gemm_q8a8_engine(). */
const char* kiln_gemm_q8a8_blocked_engine(int64_t k);
void kiln_qd8_qc8w_gemm_ukernel_6x16__generic(int64_t k, const int16_t* a, const int8_t* b,
                                              int32_t* out);
void kiln_qd8_gemm_pack_a__generic(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                   const uint16_t* a16, int64_t rs, int64_t cs, int16_t* out,
                                   float* scales);
/* The int8 engines' layout (VPDPBUSD, kiln_gemm_q8a8_avx512vnni.c; SDOT,
 * kiln_gemm_q8a8_neondot.c): rows in panels of 12, each panel quads =
 * ceil(K / 4) quads of 12 rows x 4 int8: element (i, p) at (p / 4) * 48 +
 * 4 i + p % 4 (zero past K and in rows past M), so one 32-bit broadcast is
 * a row's quad; sums[i] is row i's sum of quantized values (the driver's
 * correction for VPDPBUSD's unsigned weights). The microkernel sums, over
 * all K, one 12-row panel a by ns (1 or 2) 16-column panels at b and b +
 * b_next: out[s * 192 + i * 16 + j] = sum_p A(i, p) * (B_s(p, j) + bias),
 * exact modulo 2^32, bias 128 for VPDPBUSD's kernel and 0 for SDOT's. */
typedef void (*kiln_gemm_q8a8_ukernel_x4_fn)(int64_t k, const int8_t* a, const int8_t* b,
                                             int64_t b_next, int ns, int32_t* out);
typedef void (*kiln_gemm_q8a8_pack_a_x4_fn)(int64_t rows, int64_t rows_pad, int64_t k,
                                            const float* a, const uint16_t* a16, int64_t rs,
                                            int64_t cs, int8_t* out, float* scales,
                                            int32_t* sums);
void kiln_qd8_gemm_pack_a_x4__generic(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                      const uint16_t* a16, int64_t rs, int64_t cs, int8_t* out,
                                      float* scales, int32_t* sums);
#ifdef KILN_GEMM_HAVE_X86
/* kiln_gemm_q8a8_avx512vnni.c (AVX512-VNNI + VBMI flags). */
void kiln_qd8_qc8w_gemm_ukernel_12x32__avx512vnni(int64_t k, const int8_t* a, const int8_t* b,
                                                  int64_t b_next, int ns, int32_t* out);
/* AMX-INT8 (kiln_gemm_q8a8_amx.c; kiln_gemm_q8a8_amx_tiles() says when): A
 * quantized into rows of kp bytes (K rounded up to 64, zero past K; rows
 * [rows, rows_pad) zero, their scales 0); one 16-column panel of the blob
 * laid out as AMX's B (kp / 4 rows of 16 columns x 4 K bytes, zero past
 * K); C[i][j] = the exact int32 sums of rows [0, m) of a (m <= 256, rows
 * kp apart, readable up to m rounded to 16) by np (1, 2) prepped panels
 * b0, b1, at c + i * 32 + 16 q + j for panel q. */
void kiln_qd8_gemm_pack_a_rows__amx(int64_t rows, int64_t rows_pad, int64_t k, int64_t kp,
                                    const float* a, const uint16_t* a16, int64_t rs, int64_t cs,
                                    int8_t* out, float* scales);
void kiln_qd8_qc8w_prep_b__amx(int64_t k, int64_t kp, const int8_t* b, int8_t* out);
void kiln_qd8_qc8w_gemm_block__amx(int64_t m, int64_t kp, const int8_t* a, const int8_t* b0,
                                   const int8_t* b1, int np, int32_t* c);
void kiln_qd8_gemm_pack_a_x4__avx512vnni(int64_t rows, int64_t rows_pad, int64_t k,
                                         const float* a, const uint16_t* a16, int64_t rs,
                                         int64_t cs, int8_t* out, float* scales, int32_t* sums);
/* The decode GEMV of kiln_gemm_q8a8_gemv_fn's contract, given also each
 * row's sum of quantized values (sums[i]; the same file). */
void kiln_qd8_qc8w_gemv__avx512vnni(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                    const float* sa, const int32_t* sums, const int8_t* b,
                                    const float* scales, int panels, float* out);
/* kiln_gemm_q8a8_avx2.c (AVX2 flags): VPMADDWD on int16 pairs. */
void kiln_qd8_qc8w_gemm_ukernel_6x16__avx2(int64_t k, const int16_t* a, const int8_t* b,
                                           int32_t* out);
void kiln_qd8_gemm_pack_a__avx2(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                const uint16_t* a16, int64_t rs, int64_t cs, int16_t* out,
                                float* scales);
#endif

/* The GEMV drivers' one task loop (weight-only int8 / int4, q4a8, q8a8):
 * fn computes, for the slab of m <= KILN_GEMM_GEMV_MAX_M rows starting at
 * row i0 of the pass, `np` (<= KILN_GEMM_GEMV_PANELS) consecutive 16-column
 * panels starting at panel q into out (panel s at out + s * m * 16, m x 16
 * each, before bias). kiln_gemm_gemv_panels_run splits the panels into
 * contiguous runs over the pool (4 tasks per thread, for balance), runs the
 * slabs of the pass's m rows inside each run of panels (the panels' weights
 * stay in L1/L2 while every slab reads them), and hands each panel to the
 * fp32 epilogue: C and the residual of the pass's first row at c and res
 * (g's row strides; res may be NULL). */
typedef void (*kiln_gemm_gemv_panels_fn)(const void* ctx, int64_t i0, int64_t m, int64_t q,
                                         int np, float* out);
void kiln_gemm_gemv_panels_run(const kiln_gemm_f32_args_t* g, int64_t m, float* c,
                               const float* res, kiln_pool_t* pool, kiln_gemm_gemv_panels_fn fn,
                               const void* ctx);

/* Row i of batch bt of A as contiguous fp32: in place when it is fp32 with
 * unit column stride, else widened (bf16) or gathered into row (K floats). */
const float* kiln_gemm_quant_a_row(const kiln_gemm_f32_args_t* g, int64_t bt, int64_t i,
                                   float* row);

/* The blob's header (kiln_gemm.h), as it lies in the first bytes. */
typedef struct {
  uint32_t magic;
  uint8_t version, bits, flags, pad0;
  uint32_t group, pad1;
  int64_t k, n;
} kiln_gemm_quant_header_t;

/* Zeroes blob `out` (kiln_gemm_quant_packed_size bytes) and writes its
 * header; 0 (nothing written) for an unsupported choice. */
int kiln_gemm_quant_blob_start(int64_t k, int64_t n, int bits, int group, int form, void* out);
/* The form bits (kiln_gemm_quant_blob_start's form) of kiln's own blobs. */
int kiln_gemm_quant_own_form(int bits, int asym);
/* kiln_gemm_quant_pack_b by the scalar rule alone (no fast path): the
 * reference test_gemm_quant compares the packed bytes with. */
void kiln_gemm_quant_pack_b_reference(int64_t k, int64_t n, const float* b, int64_t rs, int64_t cs,
                                      int bits, int group, int asym, void* out);

static inline void kiln_gemm_quant_header_read(const void* blob, kiln_gemm_quant_header_t* h) {
  memcpy(h, blob, sizeof(*h));
}

/* Where row r (within a group) and column c (within a panel) sit in a
 * group's nibble bytes; c < 8 in the low nibble, else the high one. */
static inline int64_t kiln_gemm_q4_byte(int64_t r, int c) {
  return (r / 2) * 16 + 2 * (c & 7) + (r & 1);
}

/* int4 x int8 (kiln_gemm_q4a8.c; the rule is in kiln_gemm.h). The
 * quantizer takes one contiguous fp32 row of A (k elements) and writes its
 * kg * group int8 values (zero past k), and per group g its scale d[g]
 * (NaN when the group holds a non-finite element; its values are then 0)
 * and the sum of its values s[g]. The GEMV kernel computes, for `panels`
 * consecutive 16-column panels of an int4 blob's body (b: panel s at b + s
 * * kg * group bytes), out[s * m * 16 + i * 16 + c] = o_ic of the rule
 * (before bias), for m <= KILN_GEMM_GEMV_MAX_M rows of int8 A (lda apart,
 * padded to kg * group) with d and s of row i at ad / as + i * kg. */
typedef void (*kiln_gemm_q4a8_gemv_fn)(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                                       int64_t lda, const float* ad, const int32_t* as,
                                       const uint8_t* b, int panels, float* out);
typedef void (*kiln_gemm_q4a8_quantize_fn)(int64_t k, int64_t kg, int group, const float* a,
                                           int8_t* q, float* d, int32_t* s);
/* The level whose q4a8 kernels run now (kiln_cpu_isa(), the family's list). */
kiln_isa_t kiln_gemm_q4a8_level(void);
/* What the q4a8 GEMV runs on now: "avx512vnni", "neondot" (the int8
 * engines, kiln_gemm_int8_engine), else the level's name. */
const char* kiln_gemm_q4a8_engine(void);
/* The int4 x int8 GEMV driver: 1 when it ran g, 0 when it had no scratch. */
int kiln_gemm_q4a8(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool);
void kiln_qd8_qb4w_gemv__generic(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                                 int64_t lda, const float* ad, const int32_t* as, const uint8_t* b,
                                 int panels, float* out);
void kiln_qd8_quantize_groups__generic(int64_t k, int64_t kg, int group, const float* a, int8_t* q,
                                       float* d, int32_t* s);
#ifdef KILN_GEMM_HAVE_X86
/* kiln_gemm_q4a8_avx2.c (AVX2 + FMA flags): VPMADDUBSW on nibble pairs. */
void kiln_qd8_qb4w_gemv__avx2(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                              int64_t lda, const float* ad, const int32_t* as, const uint8_t* b,
                              int panels, float* out);
void kiln_qd8_quantize_groups__avx2(int64_t k, int64_t kg, int group, const float* a, int8_t* q,
                                    float* d, int32_t* s);
/* kiln_gemm_q4a8_avx512vnni.c (AVX512-VNNI + VBMI flags): VPDPBUSD on
 * nibbles gathered by VPERMT2B. */
void kiln_qd8_qb4w_gemv__avx512vnni(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                                    int64_t lda, const float* ad, const int32_t* as,
                                    const uint8_t* b, int panels, float* out);
#endif
#ifdef KILN_GEMM_HAVE_NEON
/* kiln_gemm_q8a8_neon.c (aarch64 ASIMD): SMLAL / SMULL, no SDOT. */
void kiln_qd8_qc8w_gemm_ukernel_6x16__neon(int64_t k, const int16_t* a, const int8_t* b,
                                           int32_t* out);
void kiln_qd8_gemm_pack_a__neon(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                const uint16_t* a16, int64_t rs, int64_t cs, int16_t* out,
                                float* scales);
void kiln_qd8_qc8w_gemv__neon(int64_t m, int64_t k, const int8_t* a, int64_t lda, const float* sa,
                              const int8_t* b, const float* scales, int panels, float* out);
/* kiln_gemm_q8a8_neondot.c (ASIMD + dotprod): the SDOT engine's
 * microkernel and packer (the quad layout above, bias 0) and its GEMV
 * (kiln_gemm_q8a8_gemv_fn's contract). */
void kiln_qd8_qc8w_gemm_ukernel_12x16__neondot(int64_t k, const int8_t* a, const int8_t* b,
                                               int64_t b_next, int ns, int32_t* out);
void kiln_qd8_gemm_pack_a_x4__neondot(int64_t rows, int64_t rows_pad, int64_t k, const float* a,
                                      const uint16_t* a16, int64_t rs, int64_t cs, int8_t* out,
                                      float* scales, int32_t* sums);
void kiln_qd8_qc8w_gemv__neondot(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                 const float* sa, const int8_t* b, const float* scales, int panels,
                                 float* out);
/* kiln_gemm_q8a8_neoni8mm.c (ASIMD + dotprod + i8mm): the SDOT engine's
 * prefill on SMMLA where the CPU has i8mm. prep_b lays one 16-column blob
 * panel (k rows) out for SMMLA into 16 * ceil(k / 8) * 8 bytes (the file
 * says how); the microkernel sums one 12-row quad panel a by one prepared
 * panel bp over all of K into out (12 x 16), exact, bias 0. */
void kiln_qd8_qc8w_gemm_prep_b__neoni8mm(int64_t k, const int8_t* b, int8_t* out);
void kiln_qd8_qc8w_gemm_ukernel_12x16__neoni8mm(int64_t k, const int8_t* a, const int8_t* bp,
                                                int32_t* out);
/* kiln_gemm_q4a8_neon.c (aarch64 ASIMD): SMLAL on nibbles, SADALP. */
void kiln_qd8_qb4w_gemv__neon(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                              int64_t lda, const float* ad, const int32_t* as, const uint8_t* b,
                              int panels, float* out);
void kiln_qd8_quantize_groups__neon(int64_t k, int64_t kg, int group, const float* a, int8_t* q,
                                    float* d, int32_t* s);
/* kiln_gemm_q4a8_neondot.c (ASIMD + dotprod): SDOT on zipped nibbles. */
void kiln_qd8_qb4w_gemv__neondot(int64_t m, int64_t kg, int group, int form, const int8_t* a,
                                 int64_t lda, const float* ad, const int32_t* as,
                                 const uint8_t* b, int panels, float* out);
#endif

/* The level's group quantizer of the q4a8 family; the q8a8 GEMV uses it
 * with one group (of K rounded up to 8) per row: the int8 row rule. */
kiln_gemm_q4a8_quantize_fn kiln_gemm_q4a8_quantizer(void);

/* int8 x int8 decode GEMV (kiln_gemm_q8a8_gemv.c; the rule is kiln_gemm.h's
 * int8:a8 rule, the same as the blocked q8a8 path's). For `panels`
 * consecutive 16-column panels of an int8 blob's body (panel s at b + s *
 * 16 * k: k rows of 16 int8) and m <= KILN_GEMM_GEMV_MAX_M rows of int8 A
 * (row i at a + i * lda, zero-padded to k rounded up to 8) with row scales
 * sa: out[s * m * 16 + i * 16 + c] = ((float)acc_ic * sa[i]) * scales[16 s
 * + c], acc the exact int32 sum over the k rows (before bias). */
typedef void (*kiln_gemm_q8a8_gemv_fn)(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                       const float* sa, const int8_t* b, const float* scales,
                                       int panels, float* out);
/* The decode driver: 1 when it ran g (M <= KILN_GEMM_GEMV_MAX_M), 0 when
 * it had no scratch. */
int kiln_gemm_q8a8_gemv(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool);
void kiln_qd8_qc8w_gemv__generic(int64_t m, int64_t k, const int8_t* a, int64_t lda,
                                 const float* sa, const int8_t* b, const float* scales, int panels,
                                 float* out);
#ifdef KILN_GEMM_HAVE_X86
/* kiln_gemm_q8a8_gemv_avx2.c (AVX2 flags): VPMADDUBSW with the sign trick. */
void kiln_qd8_qc8w_gemv__avx2(int64_t m, int64_t k, const int8_t* a, int64_t lda, const float* sa,
                              const int8_t* b, const float* scales, int panels, float* out);
#endif

/* An int4 blob's form, as the kernels take it: the header's flags bits 0
 * (asymmetric: zero points stored) and 2 (scales and zero points stored as
 * bf16, KILN_GEMM_QUANT_BF16_SCALES; else fp32). */
#define KILN_GEMM_Q4_FORM_MASK (1u | KILN_GEMM_QUANT_BF16_SCALES)
static inline int kiln_gemm_q4_asym(int form) { return form & 1; }

/* Bytes of one int4 group block's header: 16 scales, then (asym) 16 zero
 * points, fp32 or bf16. */
static inline int64_t kiln_gemm_q4_header_bytes(int form) {
  return ((form & KILN_GEMM_QUANT_BF16_SCALES) ? 32 : 64) * (1 + kiln_gemm_q4_asym(form));
}

/* Bytes of one int4 group block (scales, zero points, nibbles). */
static inline int64_t kiln_gemm_q4_group_bytes(int group, int form) {
  return kiln_gemm_q4_header_bytes(form) + 8 * (int64_t)group;
}

/* Entry i of a group block's header (0..15 scales, 16..31 zero points). */
static inline float kiln_gemm_q4_header_at(const uint8_t* blk, int form, int i) {
  if (form & KILN_GEMM_QUANT_BF16_SCALES) {
    uint16_t h;
    memcpy(&h, blk + 2 * i, sizeof h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
  }
  float f;
  memcpy(&f, blk + 4 * i, sizeof f);
  return f;
}

/* Column c's scale and zero point (8 when symmetric) in a group block. */
static inline float kiln_gemm_q4_scale(const uint8_t* blk, int form, int c) {
  return kiln_gemm_q4_header_at(blk, form, c);
}
static inline float kiln_gemm_q4_zero(const uint8_t* blk, int form, int c) {
  return kiln_gemm_q4_asym(form) ? kiln_gemm_q4_header_at(blk, form, 16 + c) : 8.0f;
}

void kiln_f32_qc8w_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                                 const float* scales, int panels, float* out);
void kiln_f32_qb4w_gemv__generic(int64_t m, int64_t kg, int group, int form, const float* a,
                                 int64_t lda, const float* asum, const uint8_t* b, int panels,
                                 float* out);
void kiln_qc8w_dequant__generic(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                                const float* scales, int panels, float* out);
void kiln_qb4w_dequant__generic(int64_t kg, int group, int form, int64_t p0, int64_t kc,
                                const uint8_t* b, int panels, float* out);
#ifdef KILN_GEMM_HAVE_X86
/* kiln_gemm_quant_avx2.c (AVX2 + FMA flags). */
void kiln_f32_qc8w_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                              const float* scales, int panels, float* out);
void kiln_f32_qb4w_gemv__avx2(int64_t m, int64_t kg, int group, int form, const float* a,
                              int64_t lda, const float* asum, const uint8_t* b, int panels,
                              float* out);
void kiln_qc8w_dequant__avx2(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                             const float* scales, int panels, float* out);
void kiln_qb4w_dequant__avx2(int64_t kg, int group, int form, int64_t p0, int64_t kc,
                             const uint8_t* b, int panels, float* out);
/* kiln_gemm_quant_avx512.c (AVX-512 flags). */
void kiln_f32_qc8w_gemv__avx512(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                                const float* scales, int panels, float* out);
void kiln_f32_qb4w_gemv__avx512(int64_t m, int64_t kg, int group, int form, const float* a,
                                int64_t lda, const float* asum, const uint8_t* b, int panels,
                                float* out);
#endif
#ifdef KILN_GEMM_HAVE_NEON
/* kiln_gemm_quant_neon.c (aarch64 ASIMD). */
void kiln_f32_qc8w_gemv__neon(int64_t m, int64_t k, const float* a, int64_t lda, const int8_t* b,
                              const float* scales, int panels, float* out);
void kiln_f32_qb4w_gemv__neon(int64_t m, int64_t kg, int group, int form, const float* a,
                              int64_t lda, const float* asum, const uint8_t* b, int panels,
                              float* out);
void kiln_qc8w_dequant__neon(int64_t k, int64_t p0, int64_t kc, const int8_t* b,
                             const float* scales, int panels, float* out);
void kiln_qb4w_dequant__neon(int64_t kg, int group, int form, int64_t p0, int64_t kc,
                             const uint8_t* b, int panels, float* out);
#endif

#endif /* KILN_GEMM_QUANT_INTERNAL_H */
