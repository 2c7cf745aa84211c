/* The program of a fused elementwise chain (the IR's ELTWISE_FUSED): its
 * instruction set, encoding and validation. It sits in base because three
 * layers read it without reading each other: the compiler writes programs,
 * the IR's shape rule validates them (they may come from a hostile file),
 * and the kernel (kernels/eltwise/kiln_eltwise_fused.h) runs them.
 *
 * A program is a list of 32-bit slots, each one instruction
 *     opcode | dst << 8 | a << 16 | b << 24
 * (an IMM instruction is followed by one slot holding its float's bits):
 *   LOAD              reg[dst] = input a, broadcast to the output's shape;
 *   LOAD_ROTATE_HALF  reg[dst] = transformers' rotate_half of input a along
 *                     the last dim (length 2h): cat(-x[..., h:], x[..., :h]);
 *   LOAD_LOW_HALF, LOAD_HIGH_HALF
 *                     reg[dst] = x[..., :h] or x[..., h:] of input a, whose
 *                     last dim (2h) is twice the output's (never broadcast):
 *                     the two halves of a GEMM over concatenated weights
 *                     (kiln_pass_fuse_glu.c), read in place;
 *   IMM               reg[dst] = the float in the next slot;
 *   SELECT            reg[dst] = reg[dst] != 0 ? reg[a] : reg[b] (WHERE, its
 *                     condition already in dst);
 *   ROUND_BF16        reg[dst] = reg[a] rounded to bf16 (nearest even, a NaN
 *                     quiet: the CAST kernel's rule) and widened back, what a
 *                     float32 -> bf16 -> float32 cast pair gives;
 *   an op of KILN_FUSED_OP_LIST
 *                     reg[dst] = op(reg[a]) or op(reg[a], reg[b]), float32;
 *                     a comparison gives 1.0 or 0.0.
 * The last instruction's register is the output. Registers are float32 tiles.
 *
 * The opcode bytes are part of the .kiln format. They were once "8 + the IR
 * op's number", and they keep those values (the compiler checks it
 * statically), but nothing here depends on the IR's op enum. */
#ifndef KILN_FUSED_PROGRAM_H
#define KILN_FUSED_PROGRAM_H

#include <stdint.h>

#include "base/kiln_status.h"

#define KILN_FUSED_MAX_SLOTS 46 /* two per int64 param after the count */
#define KILN_FUSED_MAX_REGS 16
#define KILN_FUSED_MAX_INPUTS 8
#define KILN_FUSED_MAX_RANK 8

/* X(NAME, arity, opcode). Runs of consecutive opcodes follow the kernels'
 * own enums (kiln_binary_t, kiln_unary_t, kiln_math_unary_t,
 * kiln_math_binary_t; the kernel checks each run statically). */
#define KILN_FUSED_OP_LIST(X)                                                         \
  X(ADD, 2, 14) X(SUB, 2, 15) X(MUL, 2, 16) X(DIV, 2, 17) X(POW, 2, 18)               \
  X(MAXIMUM, 2, 19) X(MINIMUM, 2, 20)                                                 \
  X(EQ, 2, 21) X(NE, 2, 22) X(LT, 2, 23) X(LE, 2, 24) X(GT, 2, 25) X(GE, 2, 26)       \
  X(NEG, 1, 29) X(ABS, 1, 30) X(EXP, 1, 31) X(LOG, 1, 32) X(SQRT, 1, 33)              \
  X(RSQRT, 1, 34) X(RECIPROCAL, 1, 35) X(TANH, 1, 36) X(SIGMOID, 1, 37)               \
  X(RELU, 1, 38) X(GELU, 1, 39) X(GELU_TANH, 1, 40) X(SILU, 1, 41) X(ERF, 1, 42)      \
  X(SIN, 1, 43) X(COS, 1, 44)                                                         \
  X(ACOS, 1, 64) X(ACOSH, 1, 65) X(ASIN, 1, 66) X(ASINH, 1, 67) X(ATAN, 1, 68)        \
  X(ATANH, 1, 69) X(COSH, 1, 70) X(SINH, 1, 71) X(TAN, 1, 72) X(EXPM1, 1, 73)         \
  X(LOG10, 1, 74) X(LOG1P, 1, 75) X(LOG2, 1, 76) X(CEIL, 1, 77) X(FLOOR, 1, 78)       \
  X(ROUND, 1, 79) X(TRUNC, 1, 80) X(SIGN, 1, 81)                                      \
  X(ATAN2, 2, 82) X(FMOD, 2, 86) X(REMAINDER, 2, 87) X(DIV_TRUNC, 2, 88)              \
  X(DIV_FLOOR, 2, 89)

typedef enum kiln_fused_opcode_e {
  KILN_FUSED_LOAD = 0,
  KILN_FUSED_LOAD_ROTATE_HALF = 1,
  KILN_FUSED_IMM = 2,
  KILN_FUSED_SELECT = 3,
  KILN_FUSED_ROUND_BF16 = 4, /* unary, outside the op list: no IR op of its own */
  KILN_FUSED_LOAD_LOW_HALF = 5,
  KILN_FUSED_LOAD_HIGH_HALF = 6,
#define KILN_FUSED_OPCODE_ENUM(name, arity, code) KILN_FUSED_##name = code,
  KILN_FUSED_OP_LIST(KILN_FUSED_OPCODE_ENUM)
#undef KILN_FUSED_OPCODE_ENUM
} kiln_fused_opcode_t;

static inline uint32_t kiln_fused_word(uint32_t opcode, uint32_t dst, uint32_t a, uint32_t b) {
  return (opcode & 255u) | (dst & 255u) << 8 | (a & 255u) << 16 | (b & 255u) << 24;
}

/* Slot k of a node's params ([0] the slot count, then two slots per param,
 * the low half first). k must be below KILN_FUSED_MAX_SLOTS. */
static inline uint32_t kiln_fused_slot(const int64_t* params, int32_t k) {
  return (uint32_t)((uint64_t)params[1 + k / 2] >> (32 * (k % 2)));
}

/* The arity (1 or 2) of an op opcode of KILN_FUSED_OP_LIST or ROUND_BF16;
 * 0 for any other byte (LOAD, IMM, SELECT and unknown opcodes). */
int kiln_fused_op_arity(uint32_t opcode);

/* 1 for the load opcodes (LOAD, LOAD_ROTATE_HALF, LOAD_LOW_HALF,
 * LOAD_HIGH_HALF). */
static inline int kiln_fused_is_load(uint32_t opcode) {
  return opcode == KILN_FUSED_LOAD || opcode == KILN_FUSED_LOAD_ROTATE_HALF ||
         opcode == KILN_FUSED_LOAD_LOW_HALF || opcode == KILN_FUSED_LOAD_HIGH_HALF;
}

/* How a program loads its inputs: bitmasks over input indices. */
typedef struct kiln_fused_loads_s {
  uint32_t rotated; /* loaded by LOAD_ROTATE_HALF (maybe also by LOAD) */
  uint32_t halved;  /* loaded by LOAD_LOW_HALF / LOAD_HIGH_HALF only */
} kiln_fused_loads_t;

/* Checks a program: slot count in [1, KILN_FUSED_MAX_SLOTS], known opcodes,
 * registers below KILN_FUSED_MAX_REGS and written before read, input indices
 * below n_inputs, every input loaded, an input loaded by halves loaded by
 * nothing else, no IMM without its data slot, the last instruction not a
 * data slot. *out_loads says which inputs are loaded rotated or by halves
 * (the caller checks their last dims). */
kiln_status_t kiln_fused_program_validate(const uint32_t* code, int32_t n_code, int32_t n_inputs,
                                          kiln_fused_loads_t* out_loads);

#endif /* KILN_FUSED_PROGRAM_H */
