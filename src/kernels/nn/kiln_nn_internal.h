/* Private to the nn family: the per-ISA kernel table.
 *
 * kiln_unary.c, kiln_softmax.c, kiln_norm.c, kiln_attention.c and
 * kiln_nn_table.c are compiled once per ISA of the family's list
 * (KILN_NN_ISAS, kernels/kiln_isa_variant.h), so the same portable C is
 * auto-vectorised for each target. The single-threaded "range" kernels live
 * there; kiln_nn.c (core build) splits the work over the pool and picks a
 * table from kiln_cpu_isa().
 */
#ifndef KILN_NN_INTERNAL_H
#define KILN_NN_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kiln_isa_variant.h"
#include "kernels/nn/kiln_nn.h"

/* Attention work is cut into tasks of (batch, kv head, block of rows),
 * where the rows of a kv head are its group's query heads times the
 * queries, query-major: the heads that share K and V share its tiles (for a
 * decode step, Sq = 1, the group is the whole block).
 *
 * When those blocks are too few to share out (decode: batch x kv heads
 * blocks), the keys are split into kv_parts ranges too (flash-decoding):
 * each part task leaves its rows' unnormalised output, running max m and
 * sum l in `partial`, and the block's last part to finish combines the
 * parts as the online softmax combines key tiles. */
typedef struct kiln_nn_attention_plan_s {
  const kiln_attention_args_t* args;
  int64_t group;     /* query heads per kv head */
  int64_t q_block;   /* rows per task; a row is a (query head of the group, query) pair */
  int64_t q_blocks;  /* per (batch, kv head) */
  int64_t k_block;   /* keys per tile; 0 selects the untiled path for large head dims */
  int64_t mr;        /* rows of the register kernel (4 or 6); q_block is a multiple */
  int64_t kv_parts;  /* key ranges per block (1: no split, no merge) */
  int64_t kv_part;   /* keys per range, a multiple of k_block */
  int bf16_engine;   /* args->bf16 on VDPBF16PS (the avx512 build, kiln_cpu_bf16()) */
  /* With kv_parts > 1: per part task (kiln_nn_attention_partial_floats
   * each), q_block rows of v_head_dim outputs, then q_block m, q_block l;
   * and per block the count of its parts still running, kv_parts at the
   * start: the part that takes it to 0 merges the block (no second pass
   * over the pool). Set by the caller before the tasks run. */
  float* partial;
  atomic_int* pending;
} kiln_nn_attention_plan_t;

/* Floats of `partial` one part task needs. */
static inline int64_t kiln_nn_attention_partial_floats(const kiln_nn_attention_plan_t* plan) {
  return plan->q_block * (plan->args->v_head_dim + 2);
}

typedef struct kiln_nn_kernels_s {
  /* y = f(x) over n elements; x and y may alias exactly. */
  void (*unary)(kiln_unary_t op, size_t n, const float* x, float* y);
  void (*activation)(kiln_activation_t act, size_t n, float* x);
  /* dx = dy * gelu'(x) over n elements (tanh_form: gelu's tanh approximation). */
  void (*gelu_backward)(int tanh_form, size_t n, const float* dy, const float* x, float* dx);
  /* Rows [r0, r1) of the row-wise kernels. */
  void (*softmax_rows)(size_t r0, size_t r1, size_t cols, const float* x, float* y, int log);
  void (*layer_norm_rows)(size_t r0, size_t r1, size_t cols, const float* x,
                          const float* gamma, const float* beta, float eps, float* y);
  void (*rms_norm_rows)(size_t r0, size_t r1, size_t cols, const float* x,
                        const float* gamma, float eps, float* y);
  void (*layer_norm_backward_rows)(size_t r0, size_t r1, size_t cols, const float* dy,
                                   const float* x, const float* mean, const float* rstd,
                                   const float* gamma, float* dx);
  /* Picks the query block for the shapes in args (fills plan). */
  void (*attention_plan)(const kiln_attention_args_t* args, int n_threads,
                         kiln_nn_attention_plan_t* plan);
  /* One task: task indexes (batch, kv head, row block, key part), heaviest first. */
  void (*attention_task)(const kiln_nn_attention_plan_t* plan, size_t task);
} kiln_nn_kernels_t;

/* This build's kernels (kiln_nn_table.c lists them). */
#ifdef KILN_ISA_SUFFIX
void KILN_ISA_VARIANT(kiln_nn_unary)(kiln_unary_t op, size_t n, const float* x, float* y);
void KILN_ISA_VARIANT(kiln_nn_activation)(kiln_activation_t act, size_t n, float* x);
void KILN_ISA_VARIANT(kiln_nn_gelu_backward)(int tanh_form, size_t n, const float* dy,
                                             const float* x, float* dx);
void KILN_ISA_VARIANT(kiln_nn_softmax_rows)(size_t r0, size_t r1, size_t cols, const float* x,
                                            float* y, int log);
void KILN_ISA_VARIANT(kiln_nn_layer_norm_rows)(size_t r0, size_t r1, size_t cols,
                                               const float* x, const float* gamma,
                                               const float* beta, float eps, float* y);
void KILN_ISA_VARIANT(kiln_nn_rms_norm_rows)(size_t r0, size_t r1, size_t cols, const float* x,
                                             const float* gamma, float eps, float* y);
void KILN_ISA_VARIANT(kiln_nn_layer_norm_backward_rows)(size_t r0, size_t r1, size_t cols,
                                                        const float* dy, const float* x,
                                                        const float* mean, const float* rstd,
                                                        const float* gamma, float* dx);
void KILN_ISA_VARIANT(kiln_nn_attention_plan)(const kiln_attention_args_t* args, int n_threads,
                                              kiln_nn_attention_plan_t* plan);
void KILN_ISA_VARIANT(kiln_nn_attention_task)(const kiln_nn_attention_plan_t* plan, size_t task);
#endif

/* Every variant's table: kiln_nn_kernels__generic, __avx2, ... */
#define KILN_NN_DECLARE_(isa, LEVEL, unused) extern const kiln_nn_kernels_t kiln_nn_kernels__##isa;
KILN_NN_ISAS(KILN_NN_DECLARE_, ~)

#endif /* KILN_NN_INTERNAL_H */
