/* Structural and elementwise kernels: broadcast binary ops, strided copies
 * (every view op materialised), concatenation, gather, where, casts,
 * reductions. Leaves: they see pointers, shapes and element strides, never
 * the graph. Shapes arrive already validated by the plan.
 *
 * Geometry is passed as a kiln_nd_t: an output shape plus each operand's
 * element strides over that shape (0 where the operand broadcasts).
 */
#ifndef KILN_ELTWISE_H
#define KILN_ELTWISE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_dtype.h"

#define KILN_ND_MAX_RANK 8
#define KILN_ND_MAX_OPERANDS 4

typedef struct kiln_nd_s {
  int32_t rank;
  int64_t shape[KILN_ND_MAX_RANK];
  /* strides[k][d]: operand k's element stride along output dim d. Operand 0
   * is the output (dense row-major). */
  int64_t strides[KILN_ND_MAX_OPERANDS][KILN_ND_MAX_RANK];
} kiln_nd_t;

/* Same order as the IR's ADD..LOGICAL_OR (checked in src/hal/cpu/kiln_hal_cpu.c). */
typedef enum kiln_binary_e {
  KILN_BINARY_ADD = 0,
  KILN_BINARY_SUB,
  KILN_BINARY_MUL,
  KILN_BINARY_DIV,
  KILN_BINARY_POW,
  KILN_BINARY_MAXIMUM,
  KILN_BINARY_MINIMUM,
  KILN_BINARY_EQ,
  KILN_BINARY_NE,
  KILN_BINARY_LT,
  KILN_BINARY_LE,
  KILN_BINARY_GT,
  KILN_BINARY_GE,
  KILN_BINARY_LOGICAL_AND,
  KILN_BINARY_LOGICAL_OR,
  KILN_BINARY_COUNT
} kiln_binary_t;

typedef enum kiln_reduce_e {
  KILN_REDUCE_SUM = 0,
  KILN_REDUCE_MEAN,
  KILN_REDUCE_MAX,
  KILN_REDUCE_MIN,
  KILN_REDUCE_ANY,
  KILN_REDUCE_COUNT
} kiln_reduce_t;

/* Fills nd's strides for operand k reading a dense tensor of `rank`/`shape`
 * broadcast (trailing-aligned) to nd's shape. */
void kiln_nd_set_broadcast(kiln_nd_t* nd, int k, int32_t rank, const int64_t* shape);
/* Fills operand 0's dense strides from nd's shape. */
void kiln_nd_set_dense_output(kiln_nd_t* nd);

/* out = a op b (operands 0 = out, 1 = a, 2 = b). `dtype` is the operands'
 * type; comparisons write bool. */
void kiln_binary(kiln_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd, void* out,
                 const void* a, const void* b, kiln_pool_t* pool);
/* The reference: the generic C build of the same loops (no ISA-specific
 * code; elementwise IEEE arithmetic, so any vectorisation the compiler does
 * gives the same numbers), on the calling thread. */
void kiln_binary_reference(kiln_binary_t op, kiln_dtype_t dtype, const kiln_nd_t* nd, void* out,
                           const void* a, const void* b);

/* out = x read through operand 1's strides (plus an element offset already
 * applied to x). Any dtype. */
void kiln_strided_copy(kiln_dtype_t dtype, const kiln_nd_t* nd, void* out, const void* x,
                       kiln_pool_t* pool);

/* out = cond ? a : b (operands 0 = out, 1 = cond (bool), 2 = a, 3 = b). */
void kiln_where(kiln_dtype_t dtype, const kiln_nd_t* nd, void* out, const uint8_t* cond,
                const void* a, const void* b, kiln_pool_t* pool);

/* Element-for-element conversion of n dense elements. */
void kiln_cast(kiln_dtype_t from, kiln_dtype_t to, size_t n, const void* x, void* y);
/* The same over the pool (NULL: the caller alone) in chunks of 32 Ki elements. */
void kiln_cast_parallel(kiln_dtype_t from, kiln_dtype_t to, size_t n, const void* x, void* y,
                        kiln_pool_t* pool);

/* Rows of table (outer, axis_len, inner) picked by index: out (outer, n_index,
 * inner). Returns the number of indices out of [-axis_len, axis_len) (then
 * nothing is read for them and their rows are zero-filled); the caller turns
 * a non-zero count into an error. Negative indices count from the end. */
int64_t kiln_gather(size_t elem_size, const void* table, int64_t outer, int64_t axis_len,
                    int64_t inner, const void* index, kiln_dtype_t index_dtype, int64_t n_index,
                    void* out, kiln_pool_t* pool);

/* torch.gather along `axis` of a dense (rank, shape) x: out has index's
 * (rank, index_shape). Returns the count of indices out of range (their
 * outputs are zero-filled, nothing is read for them). */
int64_t kiln_gather_elements(size_t elem_size, const void* x, int32_t rank, const int64_t* shape,
                             int32_t axis, const void* index, kiln_dtype_t index_dtype,
                             const int64_t* index_shape, void* out);

/* Sum (or mean when `mean`) of each of `rows` rows of `cols` floats, in
 * double; the optimized form kiln_reduce uses and its serial reference. */
void kiln_reduce_sum_rows_f32(size_t rows, size_t cols, int mean, const float* x, float* out);
void kiln_reduce_sum_rows_f32_reference(size_t rows, size_t cols, int mean, const float* x,
                                        float* out);
/* Reduces the axes set in `mask` of a dense (rank, shape) tensor; out is
 * dense over the kept axes. Float sums, means, maxima and minima over all
 * trailing or all leading axes run on the pool (may be NULL); the result
 * does not depend on the thread count. */
void kiln_reduce(kiln_reduce_t op, kiln_dtype_t dtype, int32_t rank, const int64_t* shape,
                 uint32_t mask, const void* x, void* out, kiln_pool_t* pool);
/* Index of the first maximum along axis (NaN counts as the maximum, as torch). */
void kiln_argmax(kiln_dtype_t dtype, int32_t rank, const int64_t* shape, int32_t axis,
                 const void* x, int64_t* out);

/* y = x * scale + shift over n dense floats. */
void kiln_fma_scalar_f32(size_t n, const float* x, float scale, float shift, float* y,
                         kiln_pool_t* pool);

/* Integer unary ops (neg, abs, relu) for int64/int32. op: 0 neg, 1 abs, 2 relu. */
void kiln_unary_int(int op, kiln_dtype_t dtype, size_t n, const void* x, void* y);

/* Logical not of n bools. */
void kiln_logical_not(size_t n, const uint8_t* x, uint8_t* y);

#endif /* KILN_ELTWISE_H */
