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
#include "kernels/kiln_activation.h"

typedef struct kiln_gemm_f32_args_s {
  int64_t batch, m, n, k;
  /* A[b][i][p] = a[b*a_batch_stride + i*a_row_stride + p*a_col_stride] */
  const float* a;
  int64_t a_batch_stride, a_row_stride, a_col_stride;
  /* A in bf16 instead (same element strides), or NULL: used in place of a
   * when set, widened exactly to fp32 as it is packed (bf16 activations). */
  const uint16_t* a_bf16;
  /* Unpacked B: B[b][p][j] = b[b*b_batch_stride + p*b_row_stride + j*b_col_stride].
   * Ignored when b_packed is set. */
  const float* b;
  int64_t b_batch_stride, b_row_stride, b_col_stride;
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
  /* C[b][i][j] = c[b*c_batch_stride + i*c_row_stride + j]  (unit column stride) */
  float* c;
  int64_t c_batch_stride, c_row_stride;
  const float* bias; /* (N) or NULL */
  /* residual[b][i][j] = residual[b*r_batch_stride + i*r_row_stride + j], or NULL.
   * May alias c exactly (in-place residual add). */
  const float* residual;
  int64_t r_batch_stride, r_row_stride;
  kiln_activation_t act;
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

/* bf16 weights: the same panel layout as kiln_gemm_f32_pack_b with 2-byte
 * elements (B[p][j] at out[(j / 16) * K * 16 + p * 16 + j % 16]), each the
 * fp32 value rounded to nearest even (NaN stays NaN, quiet). Half the bytes:
 * the memory-bound small-M path streams twice as many weights per second. */
size_t kiln_gemm_bf16_packed_size(int64_t k, int64_t n);
void kiln_gemm_bf16_pack_b(int64_t k, int64_t n, const float* b, int64_t row_stride,
                           int64_t col_stride, uint16_t* out);
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
/* Which engine the last bf16-compute GEMM of this thread ran: "amx",
 * "avx512_bf16", or the fp32 kernels' ISA name (widened); for tests. */
const char* kiln_gemm_bf16_last_engine(void);
/* fp32 -> bf16, round to nearest even, as torch's .to(torch.bfloat16). */
uint16_t kiln_gemm_bf16_from_f32(float x);
float kiln_gemm_bf16_to_f32(uint16_t x);

/* Runs the GEMM over the pool (NULL: on the caller alone). Picks the ISA from
 * kiln_cpu_isa() and the small-M (GEMV) path when M is small. */
void kiln_gemm_f32(const kiln_gemm_f32_args_t* args, kiln_pool_t* pool);

/* The scalar reference: same contract, obviously correct, slow. */
void kiln_gemm_f32_reference(const kiln_gemm_f32_args_t* args);

#endif /* KILN_GEMM_H */
