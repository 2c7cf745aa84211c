/* fp32 GEMM with a fused epilogue, the hot kernel of every model.
 *
 *   C[b](M, N) = act(A[b](M, K) · B[b](K, N) + bias(N)) + residual[b](M, N)
 *
 * for b in [0, batch). Every operand is addressed by explicit element strides
 * so transposed and broadcast operands (stride 0 over the batch) are read in
 * place: packing absorbs the layout. B is either given as strided memory or
 * pre-packed once by kiln_gemm_f32_pack_b (weights, at compile time). The
 * packed layout does not depend on the ISA, so a packed .kiln artifact runs
 * on any CPU; it is documented beside kiln_gemm_f32_pack_b.
 *
 * Pointers are borrowed for the call. Kernels return void: the runtime
 * validated shapes when it built the plan.
 */
#ifndef KILN_GEMM_H
#define KILN_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_activation.h"

/* Columns of B in one packed panel, in every packed layout below. */
#define KILN_GEMM_PANEL 16

typedef struct kiln_gemm_f32_args_s {
  int64_t batch, m, n, k;
  /* A[b][i][p] = a[b*a_batch_stride + i*a_row_stride + p*a_col_stride] */
  const float* a;
  int64_t a_batch_stride, a_row_stride, a_col_stride;
  /* A in bf16 instead (same element strides), or NULL: used in place of a
   * when set, widened exactly to fp32 as it is packed (bf16 activations). */
  const uint16_t* a_bf16;
  /* 1: A (fp32 a) is rounded to bf16 (nearest even, as kiln_gemm_bf16_from_f32
   * and the CAST kernel) as it is packed: the GEMM reads what a cast to bf16
   * would have written, without that pass over memory (the compiler folds
   * such casts, kiln_pass_casts.c). The packed values, hence C, are the
   * bits the a_bf16 path gives for the cast's output. */
  int a_round_bf16;
  /* Unpacked B: B[b][p][j] = b[b*b_batch_stride + p*b_row_stride + j*b_col_stride].
   * Ignored when b_packed is set. */
  const float* b;
  int64_t b_batch_stride, b_row_stride, b_col_stride;
  /* Unpacked B in bf16 instead (same element strides), or NULL: used in
   * place of b when set, widened exactly to fp32 as it is packed (a bf16
   * graph value, e.g. autocast's bf16 copy of a weight or a saved
   * activation, read without a widening pass over memory). */
  const uint16_t* b_bf16;
  /* 1: the unpacked float32 b is rounded to bf16 as it is packed, as
   * a_round_bf16 does for A (a folded cast of a graph value read as B:
   * autocast's weights and saved activations in the backward). The panels
   * hold the bits b_bf16 would give for the cast's output, and every path
   * that would read such a B in place widens (here: rounds) it first, so C
   * is the same bit for bit. Ignored with any packed B. */
  int b_round_bf16;
  /* 1: b_bf16 is a weight's own bf16 numbers (a bf16 model's linear weight
   * read where torch keeps it, kiln_hal_weights_t.bf16_in_place), not a
   * graph value a folded cast made: no unfused graph's bits to match, so
   * with a bf16 A (a_bf16, unit columns), its (N, K) rows contiguous and
   * one batch, the bf16 engine's dot products over the rows of both
   * (VDPBF16PS, kiln_gemm_bf16_rows) take it at every M where the CPU has
   * them. */
  int b_bf16_weight;
  /* Packed B (one matrix shared by every batch), or NULL. */
  const float* b_packed;
  /* Packed bf16 B (kiln_gemm_bf16_pack_b; shared by every batch), or NULL.
   * Takes precedence over b_packed and b. Widened to fp32 in registers
   * (exact), accumulated in fp32. */
  const uint16_t* b_packed_bf16;
  /* bf16 compute (kiln_gemm_bf16_vnni_pack_b; shared by every batch), or
   * NULL. Takes precedence over every other B. A is rounded to bf16 (nearest
   * even, as torch) and the products are summed in fp32: AMX tiles or
   * VDPBF16PS where kiln_cpu_bf16() allows, else widened to fp32 in
   * registers (the same numbers, fp32 FMAs). Batches and a_bf16 as above. */
  const uint16_t* b_packed_bf16_vnni;
  /* Quantized weights (kiln_gemm_quant_pack_b: int8 per column or int4 in
   * groups along K, scales inside the blob; shared by every batch), or
   * NULL. Takes precedence over every other B. Dequantized in registers
   * (GEMV, M <= 8) or by the fp32 GEMM's tasks a K block of a strip at a
   * time into fp32 panels for the fp32 kernels; accumulated in fp32. A blob flagged for int8
   * activations (kiln_gemm_quant_set_a8) sums integers instead where its
   * rule below applies (int8 and int4: every M). */
  const void* b_packed_q;
  /* C[b][i][j] = c[b*c_batch_stride + i*c_row_stride + j]  (unit column stride) */
  float* c;
  int64_t c_batch_stride, c_row_stride;
  const float* bias; /* (N) or NULL */
  /* residual[b][i][j] = residual[b*r_batch_stride + i*r_row_stride + j], or NULL.
   * May alias c exactly (in-place residual add). */
  const float* residual;
  int64_t r_batch_stride, r_row_stride;
  kiln_activation_t act;
  /* 1: C is rounded to bf16 (nearest even, NaN quiet, as
   * kiln_gemm_bf16_from_f32) after the epilogue and stored as fp32: what a
   * cast of C to bf16 and back would leave, without that pass over memory
   * (the compiler folds such pairs, KILN_MATMUL_ROUND_Y_BF16). The bf16
   * engines round each tile while it is in L1; other paths round C's rows
   * after the product. */
  int c_round_bf16;
} kiln_gemm_f32_args_t;

/* Bytes of the packed form of a (K, N) B matrix. */
size_t kiln_gemm_f32_packed_size(int64_t k, int64_t n);

/* Packs B[p][j] = b[p*row_stride + j*col_stride] (p < K, j < N) into `out`
 * (kiln_gemm_f32_packed_size bytes, 64-byte aligned). nn.Linear's weight
 * W(N, K) is B = W^T: row_stride 1, col_stride K.
 *
 * Layout (the same for every ISA): column panels of 16; panel q holds
 * columns [16q, 16q + 16) as K rows of 16 floats, so B[p][j] is at
 * out[(j / 16) * K * 16 + p * 16 + j % 16]; columns past N are zero. */
void kiln_gemm_f32_pack_b(int64_t k, int64_t n, const float* b, int64_t row_stride,
                          int64_t col_stride, float* out);

/* Every packer below also reads B from a source: B[p][j] at col(j)[p * rs]
 * with col(j) = a + j * cs for j < split, else b + (j - split) * cs. One
 * strided matrix is {b, NULL, N, rs, cs}; a joined [A | B] whose halves lie
 * apart (the gated-MLP fusion's, kiln_joined_const.h) is {A, B, N_A, ...},
 * packed as their concatenation without making it. */
typedef struct {
  const float* a;
  const float* b;
  int64_t split, rs, cs;
} kiln_gemm_b_src_t;
static inline const float* kiln_gemm_b_col(const kiln_gemm_b_src_t* s, int64_t j) {
  return j < s->split ? s->a + j * s->cs : s->b + (j - s->split) * s->cs;
}
void kiln_gemm_f32_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src, float* out);

/* bf16 weights: the same panel layout as kiln_gemm_f32_pack_b with 2-byte
 * elements (B[p][j] at out[(j / 16) * K * 16 + p * 16 + j % 16]), each the
 * fp32 value rounded to nearest even (NaN stays NaN, quiet). Half the bytes:
 * the memory-bound small-M path streams twice as many weights per second. */
size_t kiln_gemm_bf16_packed_size(int64_t k, int64_t n);
void kiln_gemm_bf16_pack_b(int64_t k, int64_t n, const float* b, int64_t row_stride,
                           int64_t col_stride, uint16_t* out);
void kiln_gemm_bf16_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src,
                               uint16_t* out);
/* bf16 compute weights, in VNNI pairs (the layout both TDPBF16PS and
 * VDPBF16PS read directly; ISA independent): with Kp = K rounded up to even,
 * column panels of 16, panel q at out + q * Kp * 16, and inside a panel K
 * rows two at a time, each pair of rows as 16 adjacent (row p, row p + 1)
 * couples:  B[p][j] at out[(j / 16) * Kp * 16 + (p / 2) * 32 + (j % 16) * 2 + p % 2].
 * Columns past N and the row past an odd K are zero. Elements are rounded
 * to nearest even as kiln_gemm_bf16_pack_b's. */
size_t kiln_gemm_bf16_vnni_packed_size(int64_t k, int64_t n);
void kiln_gemm_bf16_vnni_pack_b(int64_t k, int64_t n, const float* b, int64_t row_stride,
                                int64_t col_stride, uint16_t* out);
void kiln_gemm_bf16_vnni_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src,
                                    uint16_t* out);
/* A source of bf16 numbers (a bf16 model's weights, held as they are:
 * KILN_LAYOUT_WIDENED_BF16), addressed as kiln_gemm_b_src_t's. */
typedef struct {
  const uint16_t* a;
  const uint16_t* b;
  int64_t split, rs, cs;
} kiln_gemm_b_src16_t;
void kiln_gemm_bf16_vnni_pack_b_src16(int64_t k, int64_t n, const kiln_gemm_b_src16_t* src,
                                      uint16_t* out);
/* Panels [q0, q1) of the VNNI layout from fp32 b (rounded) or bf16 b16
 * (when set), element (p, j) at [p * rs + j * cs], into out (the whole
 * matrix's): the ISA's packer (AVX-512: pairs of rows interleaved, or
 * columns turned, in registers); the same bytes at every level. */
void kiln_gemm_bf16_vnni_pack_b_panels(int64_t k, int64_t n, int64_t q0, int64_t q1,
                                       const float* b, const uint16_t* b16, int64_t rs, int64_t cs,
                                       uint16_t* out);
/* Which engine the last bf16-compute GEMM of this thread ran: "amx",
 * "avx512_bf16", or the fp32 kernels' ISA name (widened); for tests. */
const char* kiln_gemm_bf16_last_engine(void);
/* What a bf16-compute GEMM of M > 8 rows runs on now, in words, for
 * KILN_LOG and kiln.explain ("bf16 compute: ..."): AMX tiles, AVX512_BF16
 * dot products, or (no bf16 engine) the fp32 kernels of the ISA level in
 * use, reading the bf16 pairs in registers (AVX2) or from widened copies
 * (other levels). */
const char* kiln_gemm_bf16_compute_describe(void);
/* The same for a product of two bf16 graph values (autocast's; B packed at
 * run time: kiln_gemm_bf16_compute_values). */
const char* kiln_gemm_bf16_values_describe(void);
/* The same for a bf16 model's linear layer whose weight is read where
 * torch keeps it (b_bf16 with b_bf16_weight: its (N, K) rows;
 * kiln_hal_weights_t.bf16_in_place). */
const char* kiln_gemm_bf16_in_place_describe(void);
/* The same for int8 activations (weights_dtype "...:a8"): "int8
 * activations: AVX512-VNNI dot products (VPDPBUSD)", AVX2's, or the
 * portable kernels'. */
const char* kiln_gemm_int8_describe(void);
/* fp32 -> bf16, round to nearest even, as torch's .to(torch.bfloat16). */
uint16_t kiln_gemm_bf16_from_f32(float x);
float kiln_gemm_bf16_to_f32(uint16_t x);

/* Quantized weights (weight-only; activations and sums stay fp32). A blob
 * is a 64-byte header then the body, ISA independent (docs/format.md):
 *   header: u32 magic KILN_GEMM_QUANT_MAGIC, u8 version (1), u8 bits (8 or
 *   4), u8 flags (bit 0: asymmetric, int4 only; bit 1: int8 activations,
 *   KILN_GEMM_QUANT_A8; bit 2: bf16 scales and zero points, int4 only,
 *   KILN_GEMM_QUANT_BF16_SCALES), u8 0, u32 group (0 for
 *   int8, else the int4 group size along K), u32 0, i64 K, i64 N, zeros.
 * With Np = N rounded up to 16 (16-column panels as kiln_gemm_f32_pack_b):
 *   int8: Np fp32 scales (column j's at j; 0 past N), then panel q at
 *   Np * 4 + q * 16 * K bytes: K rows of 16 int8, B[p][j] = q8 * scale[j];
 *   int4: Kg = ceil(K / G) groups; panel q at q * Kg * gb bytes, gb = e *
 *   16 * (1 + asym) + 8 * G, e = 2 (bf16) or 4 (fp32): per group, 16
 *   scales, (asym) 16 zero points, then G / 2 row pairs of 16 bytes; byte l of pair t holds rows
 *   2t + (l & 1) of the group: column l >> 1 in its low nibble and column
 *   (l >> 1) + 8 in its high one. B[p][j] = (nibble - z) * scale, z = 8
 *   (symmetric) or the stored zero point. Rows past K hold z (weight 0);
 *   columns past N have scale 0.
 * Quantization (kiln_gemm_quant_pack_b; tests/python/test_quant_weights.py
 * repeats it in torch), all in fp32, rounding half to even:
 *   int8 (per output column j): s = max_p |B[p][j]| / 127 (1 if 0),
 *     q = clamp(round(w / s), -127, 127);
 *   int4 symmetric (llama.cpp q4_0's rule, per group of G rows of one
 *     column, its scale kept in 16 bits as q4_0's): m = the element of
 *     largest magnitude (the first such), d = bf16(m / -8), q =
 *     clamp(round(w / d), -8, 7) (0 if d == 0), stored as q + 8; weight q
 *     * d;
 *   int4 asymmetric: lo = min(min w, 0), hi = max(max w, 0), s =
 *     bf16((hi - lo) / 15) (1 if 0), z = clamp(round(-lo / s), 0, 15), q =
 *     clamp(round(w / s) + z, 0, 15); weight (q - z) * s.
 *   bf16() rounds to the nearest bf16 (even on ties): 32 bytes of scales
 *   per 512 weights instead of 64 (0.5625 bytes per weight at G = 32, as
 *   q4_0, against 0.625), for a scale within 2^-8 of the fp32 one,
 *   relatively (a weight's own rounding is up to half a step).
 * A column (int8) or group (int4) holding a NaN or an infinity dequantizes
 * to NaN throughout: scale NaN, q 0 (stored 8 symmetric, 0 with z 0
 * asymmetric), as the rules give in torch, whose max propagates a NaN (and
 * an infinite scale makes 0 * inf). */
#define KILN_GEMM_QUANT_MAGIC 0x544e514bu /* "KQNT" */
#define KILN_GEMM_QUANT_HEADER 64
/* Bytes of the blob (0 for an unsupported choice: bits 8 with group 0 and
 * no asym, or bits 4 with group a multiple of 32 in [32, 4096]). */
size_t kiln_gemm_quant_packed_size(int64_t k, int64_t n, int bits, int group, int asym);
/* Quantizes B (as kiln_gemm_f32_pack_b reads it) into `out`
 * (kiln_gemm_quant_packed_size bytes). */
void kiln_gemm_quant_pack_b(int64_t k, int64_t n, const float* b, int64_t row_stride,
                            int64_t col_stride, int bits, int group, int asym, void* out);
void kiln_gemm_quant_pack_b_src(int64_t k, int64_t n, const kiln_gemm_b_src_t* src, int bits,
                                int group, int asym, void* out);
/* 0 when blob (nbytes) is a well-formed quantized (K, N) matrix. */
int kiln_gemm_quant_check(const void* blob, size_t nbytes, int64_t k, int64_t n);
/* The dequantized B[p][j] of a blob (the scalar rule; slow, for the
 * reference and tests). */
float kiln_gemm_quant_weight(const void* blob, int64_t p, int64_t j);
/* int8 weights with int8 activations (header flags bit 1 on an int8 blob; set
 * by kiln_gemm_quant_set_a8, kiln.trace(weights_dtype="int8:a8")): at every
 * M the activations are quantized per row at run time and the products
 * summed in integers, by one rule for prefill and decode: M >
 * KILN_GEMM_GEMV_MAX_M (8) runs the blocked kernel (kiln_gemm_q8a8.c;
 * faster than weight-only at every M from 9 to 512 on Zen 3), M <= 8 the
 * GEMV (kiln_gemm_q8a8_gemv.c). The weight-only GEMV is not bound by
 * reading the weights on an AVX2 core when they come from the caches: it
 * widens and converts each weight to fp32; the integer GEMV runs about
 * half the instructions (callgrind, 1x2816x1024: 0.87 M against 1.67 M)
 * and takes 0.63x the time with the weights in L3 (Zen 3); from DRAM both
 * run at the read bandwidth. The rule, for row i of A and column j, all
 * in fp32:
 *   s_i = max_p |A[i][p]| / 127 (1 if 0), q_ip = clamp(round(A[i][p] / s_i),
 *   -127, 127) (half to even), acc = sum_p q_ip * w_pj exactly (int32),
 *   C[i][j] = act((float)acc * s_i * scale_j + bias_j) + residual
 * (left to right). A row holding a NaN or an infinity gives NaN
 * throughout (its scale is NaN). */
#define KILN_GEMM_QUANT_A8 2u
/* Header flags bit 2 (int4): scales and zero points stored as bf16 (what
 * kiln_gemm_quant_pack_b writes); without it fp32 (a checkpoint's exact
 * scales, kiln_gemm_quant_pack_b_ints, and blobs written before 2.11). */
#define KILN_GEMM_QUANT_BF16_SCALES 4u
/* Exact int32 sums need K * 127 * 127 < 2^31. */
#define KILN_GEMM_Q8A8_MAX_K 131072
/* Flags a blob (int8 or int4) for int8 activations. */
void kiln_gemm_quant_set_a8(void* blob);
/* The blocked int8 x int8 path (M > 8 is the caller's choice): returns 1
 * when it ran g (an a8 blob), 0 when it could not (no scratch memory, K too
 * large for exact int32 sums). */
int kiln_gemm_q8a8(const kiln_gemm_f32_args_t* g, kiln_pool_t* pool);
/* Its scalar reference (the rule at any M; same contract). */
void kiln_gemm_q8a8_reference(const kiln_gemm_f32_args_t* g);
/* 1 when kiln_gemm_f32 takes the int8 x int8 rule for g (an int8 a8 blob, K
 * small enough for exact int32 sums); the scalar reference follows the
 * same choice. */
int kiln_gemm_q8a8_applies(const kiln_gemm_f32_args_t* g);

/* int4 weights with int8 activations (header flags bit 1 on an int4 blob;
 * kiln_gemm_quant_set_a8, kiln.trace(weights_dtype="int4:a8")): at every M
 * each row of A is quantized per group of G along K (the blob's group) at
 * run time and the nibble x int8 products are summed exactly in int32
 * (kiln_gemm_q4a8.c): for decode (M <= 8) 3x fewer instructions per weight
 * than dequantizing to fp32 (AVX2), so the GEMV comes near the speed of
 * reading the weights; for prefill the same kernel runs on slabs of 8 rows
 * (1.1-1.3x the weight-only blocked path on a Zen 3 core). A row's result
 * depends on that row alone. The rule, for row i, group g (rows p in [g G,
 * min(g G + G, K))) and column j, every step in fp32:
 *   d_ig = max_p |A[i][p]| / 127 (1 if 0), q_ip = clamp(round(A[i][p] /
 *   d_ig), -127, 127) (half to even), s_ig = sum_p q_ip,
 *   acc_igj = sum_p nib_pj * q_ip - z_gj * s_ig   (exact: an integer of
 *     magnitude <= 15 * 127 * G < 2^24 for G <= 4096, so exact as a float),
 *   o_ij = 0; for g = 0, 1, ... in order: o_ij = fma(scale_gj * d_ig,
 *     acc_igj, o_ij)   (the product rounded, then one fused multiply-add),
 *   C[i][j] = act(o_ij + bias_j) + residual
 * with nib the stored nibble (0..15), z_gj 8 (symmetric) or the stored zero
 * point, scale_gj the group's scale. Every kernel follows that order, so
 * all of them give the scalar reference's bits (up to the ISA's activation
 * function). A group holding a NaN or an infinity makes its d NaN and the
 * row's outputs NaN. |C - C_weight-only| <= sum_p |B[p][j]| d_ig(p) / 2
 * (plus fp32 rounding): each q_ip d_ig is within d_ig / 2 of A[i][p]. */
/* 1 when kiln_gemm_f32 takes the int4 x int8 path for g (an int4 a8 blob,
 * any M); the scalar reference follows the same choice. */
int kiln_gemm_q4a8_applies(const kiln_gemm_f32_args_t* g);
/* Its scalar reference (the rule above, written out; no scratch memory). */
void kiln_gemm_q4a8_reference(const kiln_gemm_f32_args_t* g);

/* Quantized embeddings: a (N, K) table packed as the blob of B = table^T
 * (column j of B is row j of the table, so a token's row is dequantized
 * with the per-column rules above: int8 one scale per row, int4 groups
 * along the row). out[i * K + p] = B[p][index[i]] (the scalar rule's
 * values), index int64 (index_i64) or int32, negative counting from N.
 * Returns how many indices were out of range (their rows are zeros). */
int64_t kiln_gemm_quant_gather(const void* blob, const void* index, int index_i64, int64_t n_index,
                               float* out);

/* A checkpoint quantized the PyTorch way (torch's dequantize_per_channel
 * with axis 0, _per_channel_group or _per_tensor of an nn.Linear weight
 * W (N, K) = B^T): n rows of k int8 or uint8 integers q, float32 scales
 * s and optional float32 zero points z, one per row (group 0) or one per
 * `group` consecutive elements of a row; B[p][j] = ((float)q[j][p] - z) *
 * s, torch's values exactly. The blobs above hold such a B exactly, with
 * the checkpoint's integers and scales (no quantization again), when:
 *   int8: one scale per row (or one group per row), zero points whole
 *     numbers and every q - z in [-128, 127] (stored as q - z);
 *   int4 symmetric: groups of G (a multiple of 32 up to 4096), every
 *     q - z in [-8, 7] (stored as q - z + 8);
 *   int4 asymmetric: the same groups, zero points whole numbers and each
 *     group's integers spanning at most 16 values (stored as q - m with m
 *     the group's least, zero point z - m).
 * One scale per row (per channel or per tensor) takes int4 with the row
 * as its one group when the integers fit int4 as above and k is a multiple
 * of 32 up to 4096 (PT2E's 4-bit per-channel weights: half int8's bytes,
 * the same values), else int8. */
typedef struct {
  const void* q;        /* n x k integers, row j = column j of B */
  int q_unsigned;       /* uint8 (else int8) */
  const float* scales;  /* n x ng (ng = group ? k / group : 1) */
  const float* zeros;   /* n x ng, or NULL (0) */
  int64_t group;        /* 0 or a divisor of k */
} kiln_gemm_quant_ints_t;
/* 1 and the blob's bits, group and asym when one holds src exactly; else
 * 0 and *why, a static phrase saying what does not fit. */
int kiln_gemm_quant_ints_form(int64_t k, int64_t n, const kiln_gemm_quant_ints_t* src, int* bits,
                              int* group, int* asym, const char** why);
/* Bytes of a checkpoint's blob: as kiln_gemm_quant_packed_size, with fp32
 * scales (the checkpoint's, exactly). */
size_t kiln_gemm_quant_ints_packed_size(int64_t k, int64_t n, int bits, int group, int asym);
/* Packs src into `out` (kiln_gemm_quant_ints_packed_size(k, n, bits,
 * group, asym) bytes) with the form kiln_gemm_quant_ints_form gave. */
void kiln_gemm_quant_pack_b_ints(int64_t k, int64_t n, const kiln_gemm_quant_ints_t* src,
                                 int bits, int group, int asym, void* out);
/* src's rows dequantized by torch's rule into out, row-major (n, k): W,
 * i.e. B stored transposed. */
void kiln_gemm_quant_ints_dequantize(int64_t k, int64_t n, const kiln_gemm_quant_ints_t* src,
                                     float* out);

/* Which path the last quantized GEMM of this thread ran ("gemv-avx512",
 * "blocked-avx2", "q8a8-avx2", "q4a8-generic", ...; for tests). */
const char* kiln_gemm_quant_last_path(void);
/* The quantized-weights GEMM (kiln_gemm_f32 calls it for b_packed_q). */
void kiln_gemm_quant(const kiln_gemm_f32_args_t* args, kiln_pool_t* pool);

/* Runs the GEMM over the pool (NULL: on the caller alone). Picks the ISA from
 * kiln_cpu_isa() and the small-M (GEMV) path when M is small. */
void kiln_gemm_f32(const kiln_gemm_f32_args_t* args, kiln_pool_t* pool);

/* The scalar reference: same contract, obviously correct, slow. */
void kiln_gemm_f32_reference(const kiln_gemm_f32_args_t* args);

#endif /* KILN_GEMM_H */
