/* The ELTWISE_FUSED kernel: runs a fused elementwise program
 * (base/kiln_fused_program.h: the instruction set and its validation) over
 * L1-sized tiles, so that the intermediates of the chain live in registers
 * of a few KiB each and never reach memory. Programs must have passed
 * kiln_fused_program_validate. */
#ifndef KILN_ELTWISE_FUSED_H
#define KILN_ELTWISE_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_fused_program.h"
#include "base/kiln_pool.h"
#include "base/kiln_status.h"

typedef struct kiln_eltwise_fused_args_s {
  const uint32_t* code; /* n_code slots */
  int32_t n_code;
  int32_t rank; /* the output's */
  int64_t shape[KILN_FUSED_MAX_RANK];
  int32_t n_inputs;
  const float* inputs[KILN_FUSED_MAX_INPUTS];
  /* strides[i][d]: input i's element stride along output dim d (0 where it
   * broadcasts). An input loaded by halves has the output's last dim as its
   * half and its own strides (a row is twice as long). */
  int64_t strides[KILN_FUSED_MAX_INPUTS][KILN_FUSED_MAX_RANK];
  float* out; /* dense, never one of the inputs */
} kiln_eltwise_fused_args_t;

/* Runs a validated program over the output, threaded over the pool. */
void kiln_eltwise_fused_f32(const kiln_eltwise_fused_args_t* args, kiln_pool_t* pool);
/* The scalar reference: one element at a time, through the scalar
 * references of each op. */
void kiln_eltwise_fused_f32_reference(const kiln_eltwise_fused_args_t* args);

#endif /* KILN_ELTWISE_FUSED_H */
