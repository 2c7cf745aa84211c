/* Validation of fused elementwise programs (kiln_fused_program.h): every
 * program a graph carries passes here before any kernel runs it. */
#include "base/kiln_fused_program.h"

int kiln_fused_op_arity(uint32_t opcode) {
  switch (opcode) {
#define KILN_FUSED_ARITY_CASE(name, arity, code) \
  case code:                                     \
    return arity;
    KILN_FUSED_OP_LIST(KILN_FUSED_ARITY_CASE)
#undef KILN_FUSED_ARITY_CASE
    case KILN_FUSED_ROUND_BF16:
      return 1;
    default:
      return 0;
  }
}

kiln_status_t kiln_fused_program_validate(const uint32_t* code, int32_t n_code, int32_t n_inputs,
                                          kiln_fused_loads_t* out_loads) {
  out_loads->rotated = out_loads->halved = 0;
  if (n_code < 1 || n_code > KILN_FUSED_MAX_SLOTS)
    return kiln_status_make(KILN_INVALID_ARGUMENT, "eltwise_fused: %lld slots, expected 1..%d",
                            (long long)n_code, KILN_FUSED_MAX_SLOTS);
  if (n_inputs < 0 || n_inputs > KILN_FUSED_MAX_INPUTS)
    return kiln_status_make(KILN_INVALID_ARGUMENT, "eltwise_fused: %d inputs", n_inputs);
  uint32_t defined = 0, loaded = 0, whole = 0; /* whole: loaded by LOAD or LOAD_ROTATE_HALF */
  for (int32_t k = 0; k < n_code; ++k) {
    uint32_t w = code[k], opc = w & 255u, dst = w >> 8 & 255u, a = w >> 16 & 255u,
             b = w >> 24 & 255u;
    if (dst >= KILN_FUSED_MAX_REGS)
      return kiln_status_make(KILN_INVALID_ARGUMENT, "eltwise_fused: slot %d writes register %u",
                              k, dst);
    if (kiln_fused_is_load(opc)) {
      if (a >= (uint32_t)n_inputs || b != 0)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "eltwise_fused: slot %d loads input %u of %d", k, a, n_inputs);
      loaded |= 1u << a;
      if (opc == KILN_FUSED_LOAD_ROTATE_HALF) out_loads->rotated |= 1u << a;
      if (opc == KILN_FUSED_LOAD_LOW_HALF || opc == KILN_FUSED_LOAD_HIGH_HALF)
        out_loads->halved |= 1u << a;
      else
        whole |= 1u << a;
      if (whole & out_loads->halved)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "eltwise_fused: slot %d loads input %u both whole and by halves",
                                k, a);
    } else if (opc == KILN_FUSED_SELECT) {
      if (!(defined >> dst & 1u) || a >= KILN_FUSED_MAX_REGS || !(defined >> a & 1u) ||
          b >= KILN_FUSED_MAX_REGS || !(defined >> b & 1u))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "eltwise_fused: slot %d selects from a register not written before", k);
    } else if (opc == KILN_FUSED_IMM) {
      if (a != 0 || b != 0 || k + 1 >= n_code)
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "eltwise_fused: slot %d is an IMM without its value", k);
      ++k; /* the data slot: any bits are a float */
    } else {
      int arity = kiln_fused_op_arity(opc);
      if (!arity)
        return kiln_status_make(KILN_INVALID_ARGUMENT, "eltwise_fused: slot %d has opcode %u", k,
                                opc);
      if (a >= KILN_FUSED_MAX_REGS || !(defined >> a & 1u) ||
          (arity == 2 ? b >= KILN_FUSED_MAX_REGS || !(defined >> b & 1u) : b != 0))
        return kiln_status_make(KILN_INVALID_ARGUMENT,
                                "eltwise_fused: slot %d reads a register not written before", k);
    }
    defined |= 1u << dst;
  }
  if (n_inputs > 0 && loaded != (1u << n_inputs) - 1u)
    return kiln_status_make(KILN_INVALID_ARGUMENT, "eltwise_fused: an input is never loaded");
  return kiln_ok();
}
