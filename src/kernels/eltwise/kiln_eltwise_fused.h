/* A fused chain of elementwise ops (the IR's ELTWISE_FUSED): a small register
 * program evaluated over L1-sized tiles, so that the intermediates of the
 * chain live in registers of a few KiB each and never reach memory.
 *
 * The program is a list of 32-bit slots, each one instruction
 *     opcode | dst << 8 | a << 16 | b << 24
 * (an IMM instruction is followed by one slot holding its float's bits):
 *   LOAD              reg[dst] = input a, broadcast to the output's shape;
 *   LOAD_ROTATE_HALF  reg[dst] = transformers' rotate_half of input a along
 *                     the last dim (length 2h): cat(-x[..., h:], x[..., :h]);
 *   IMM               reg[dst] = the float in the next slot;
 *   SELECT            reg[dst] = reg[dst] != 0 ? reg[a] : reg[b] (WHERE, its
 *                     condition already in dst);
 *   OP_BASE + op      reg[dst] = op(reg[a]) or op(reg[a], reg[b]) for a kiln
 *                     float unary op (NEG..COS but LOGICAL_NOT, ACOS..SIGN) or
 *                     binary op (ADD..MINIMUM, ATAN2..DIV_FLOOR), float32, or
 *                     a comparison (EQ..GE) giving 1.0 or 0.0.
 * The last instruction's register is the output. Registers are float32 tiles.
 * kiln_eltwise_fused_validate checks a program before anything runs it (it
 * may come from a file). */
#ifndef KILN_ELTWISE_FUSED_H
#define KILN_ELTWISE_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_status.h"

#define KILN_FUSED_MAX_SLOTS 46 /* two per int64 param after the count */
#define KILN_FUSED_MAX_REGS 16
#define KILN_FUSED_MAX_INPUTS 8
#define KILN_FUSED_MAX_RANK 8

enum {
  KILN_FUSED_LOAD = 0,
  KILN_FUSED_LOAD_ROTATE_HALF = 1,
  KILN_FUSED_IMM = 2,
  KILN_FUSED_SELECT = 3,
  KILN_FUSED_OP_BASE = 8 /* + a kiln_op_t */
};

static inline uint32_t kiln_fused_word(uint32_t opcode, uint32_t dst, uint32_t a, uint32_t b) {
  return (opcode & 255u) | (dst & 255u) << 8 | (a & 255u) << 16 | (b & 255u) << 24;
}

/* Slot k of a node's params ([0] the slot count, then two slots per param,
 * the low half first). k must be below KILN_FUSED_MAX_SLOTS. */
static inline uint32_t kiln_fused_slot(const int64_t* params, int32_t k) {
  return (uint32_t)((uint64_t)params[1 + k / 2] >> (32 * (k % 2)));
}

/* 1 for the kiln ops a program may use as OP_BASE + op, with their arity in
 * *arity (1 or 2). */
int kiln_fused_op_arity(int32_t op, int* arity);

typedef struct kiln_eltwise_fused_args_s {
  const uint32_t* code; /* n_code slots */
  int32_t n_code;
  int32_t rank; /* the output's */
  int64_t shape[KILN_FUSED_MAX_RANK];
  int32_t n_inputs;
  const float* inputs[KILN_FUSED_MAX_INPUTS];
  /* strides[i][d]: input i's element stride along output dim d (0 where it
   * broadcasts). */
  int64_t strides[KILN_FUSED_MAX_INPUTS][KILN_FUSED_MAX_RANK];
  float* out; /* dense, never one of the inputs */
} kiln_eltwise_fused_args_t;

/* Checks a program: slot count in [1, KILN_FUSED_MAX_SLOTS], known opcodes,
 * registers below KILN_FUSED_MAX_REGS and written before read, input indices
 * below n_inputs, every input loaded, no IMM without its data slot, the last
 * instruction not a data slot. *out_rotates gets a bitmask of the inputs
 * loaded rotated (the caller checks their last dim). */
kiln_status_t kiln_eltwise_fused_validate(const uint32_t* code, int32_t n_code,
                                          int32_t n_inputs, uint32_t* out_rotates);

/* Runs a validated program over the output, threaded over the pool. */
void kiln_eltwise_fused_f32(const kiln_eltwise_fused_args_t* args, kiln_pool_t* pool);
/* The scalar reference: one element at a time, through the scalar
 * references of each op. */
void kiln_eltwise_fused_f32_reference(const kiln_eltwise_fused_args_t* args);

#endif /* KILN_ELTWISE_FUSED_H */
