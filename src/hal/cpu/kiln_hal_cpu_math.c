/* The CPU target for the ops of kernels/math: ACOS..SIGN,
 * ATAN2..DIV_FLOOR and RANDOM. Geometry as kiln_hal_cpu.c's binary ops: the output's
 * shape with each input's broadcast strides (prepared for the binary ones). */
#include <string.h>

#include "hal/cpu/kiln_hal_cpu.h"
#include "kernels/math/kiln_math.h"
#include "kernels/math/kiln_random.h"

_Static_assert(KILN_OP_SIGN - KILN_OP_ACOS + 1 == KILN_MATH_UNARY_COUNT && KILN_MATH_ACOS == 0 &&
                   KILN_OP_LOG1P - KILN_OP_ACOS == KILN_MATH_LOG1P,
               "ACOS..SIGN in kiln_math_unary_t order");
_Static_assert(KILN_OP_DIV_FLOOR - KILN_OP_ATAN2 + 1 == KILN_MATH_BINARY_COUNT &&
                   KILN_MATH_ATAN2 == 0 && KILN_OP_FMOD - KILN_OP_ATAN2 == KILN_MATH_FMOD,
               "ATAN2..DIV_FLOOR in kiln_math_binary_t order");

#define VAL(i) (&g->values[n->inputs[i]])
#define BUF(i) (n->inputs[i] >= 0 ? bufs[n->inputs[i]] : NULL)
#define OUT (bufs[n->outputs[0]])

kiln_status_t kiln_hal_cpu_prepare_math(const kiln_graph_t* g, const kiln_node_t* n, void* prep) {
  if (KILN_OP_IS_BINARY_EXT(n->op)) kiln_hal_cpu_nd_for(g, n, 2, prep);
  return kiln_ok();
}

kiln_status_t kiln_hal_cpu_run_math(const kiln_graph_t* g, const kiln_node_t* n,
                                    const void* prep, void* const* bufs, kiln_pool_t* pool) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  void* out = bufs[n->outputs[0]];
  const void* xb = bufs[n->inputs[0]];
  if (KILN_OP_IS_UNARY_EXT(n->op)) {
    size_t numel = (size_t)kiln_value_numel(y);
    if (y->dtype == KILN_F32)
      kiln_math_unary_f32((kiln_math_unary_t)(n->op - KILN_OP_ACOS), numel, xb, out, pool);
    else
      kiln_math_sign_int(y->dtype, numel, xb, out); /* only sign takes integers */
    return kiln_ok();
  }
  int64_t zeros = kiln_math_binary((kiln_math_binary_t)(n->op - KILN_OP_ATAN2), y->dtype, prep,
                                   out, xb, bufs[n->inputs[1]], pool);
  if (zeros)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "ZeroDivisionError: %s: integer division by zero (%lld elements)",
                            n->origin ? n->origin : kiln_op_name(n->op), (long long)zeros);
  return kiln_ok();
}

/* Element offsets of the operands of nd at output element i (row-major). */
static void ref_nd_offsets(const kiln_nd_t* nd, int64_t i, int n_ops, int64_t* off) {
  for (int k = 0; k < n_ops; ++k) off[k] = 0;
  for (int32_t d = nd->rank - 1; d >= 0; --d) {
    int64_t c = i % nd->shape[d];
    i /= nd->shape[d];
    for (int k = 0; k < n_ops; ++k) off[k] += c * nd->strides[k][d];
  }
}

KILN_HAL_CPU_REF_RUN(math) {
  (void)pool;
  const kiln_value_t* y = &g->values[n->outputs[0]];
  const int64_t numel = kiln_value_numel(y);
  if (KILN_OP_IS_UNARY_EXT(n->op)) {
    if (y->dtype == KILN_F32)
      kiln_math_unary_f32_reference((kiln_math_unary_t)(n->op - KILN_OP_ACOS), (size_t)numel,
                                    BUF(0), OUT);
    else
      kiln_math_sign_int(y->dtype, (size_t)numel, BUF(0), OUT); /* a plain loop */
    return kiln_ok();
  }
  const kiln_nd_t* nd = prep;
  const kiln_math_binary_t op = (kiln_math_binary_t)(n->op - KILN_OP_ATAN2);
  int64_t zeros = 0;
  for (int64_t i = 0; i < numel; ++i) {
    int64_t off[3];
    ref_nd_offsets(nd, i, 3, off);
    int zero = 0;
    switch (y->dtype) {
      case KILN_F32:
        ((float*)OUT)[off[0]] = kiln_math_binary_f32_reference(
            op, ((const float*)BUF(0))[off[1]], ((const float*)BUF(1))[off[2]]);
        break;
      case KILN_I64:
        ((int64_t*)OUT)[off[0]] = kiln_math_binary_i64_reference(
            op, ((const int64_t*)BUF(0))[off[1]], ((const int64_t*)BUF(1))[off[2]], &zero);
        break;
      case KILN_I32:
        ((int32_t*)OUT)[off[0]] = (int32_t)kiln_math_binary_i64_reference(
            op, ((const int32_t*)BUF(0))[off[1]], ((const int32_t*)BUF(1))[off[2]], &zero);
        break;
      default: /* bool: the bitwise ops on 0 / 1 */
        ((uint8_t*)OUT)[off[0]] = (uint8_t)kiln_math_binary_i64_reference(
            op, ((const uint8_t*)BUF(0))[off[1]], ((const uint8_t*)BUF(1))[off[2]], &zero);
        break;
    }
    zeros += zero;
  }
  if (zeros)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "ZeroDivisionError: %s: integer division by zero (%lld elements)",
                            n->origin ? n->origin : kiln_op_name(n->op), (long long)zeros);
  return kiln_ok();
}

/* RANDOM: the seed is read per call (an int64 input). */
typedef struct {
  uint64_t seed;
  uint32_t stream;
  kiln_random_dist_t dist;
  float a, b;
  size_t numel;
} random_call_t;

static random_call_t random_call(const kiln_graph_t* g, const kiln_node_t* n, void* const* bufs) {
  int64_t seed;
  memcpy(&seed, bufs[n->inputs[0]], sizeof seed);
  random_call_t c = {(uint64_t)seed, (uint32_t)n->params[KILN_P(RANDOM, STREAM)],
                     (kiln_random_dist_t)n->params[KILN_P(RANDOM, DIST)],
                     n->fparams[KILN_FP(RANDOM, A)], n->fparams[KILN_FP(RANDOM, B)],
                     (size_t)kiln_value_numel(&g->values[n->outputs[0]])};
  return c;
}

kiln_status_t kiln_hal_cpu_run_random(const kiln_graph_t* g, const kiln_node_t* n,
                                      const void* prep, void* const* bufs, kiln_pool_t* pool) {
  (void)prep;
  const random_call_t c = random_call(g, n, bufs);
  kiln_random_f32(c.dist, c.seed, c.stream, c.a, c.b, c.numel, OUT, pool);
  return kiln_ok();
}

KILN_HAL_CPU_REF_RUN(random) {
  (void)prep, (void)pool;
  const random_call_t c = random_call(g, n, bufs);
  kiln_random_f32_reference(c.dist, c.seed, c.stream, c.a, c.b, c.numel, OUT);
  return kiln_ok();
}
