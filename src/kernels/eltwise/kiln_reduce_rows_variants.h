/* The ISA variants of the float reductions' row loops (kiln_reduce_rows.c,
 * compiled once per ISA of the eltwise family's list as
 * kiln_reduce_rows_kernels__generic, __avx2, ...); kiln_reduce.c picks the
 * running level's on every call. */
#ifndef KILN_REDUCE_ROWS_VARIANTS_H
#define KILN_REDUCE_ROWS_VARIANTS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/eltwise/kiln_eltwise.h"
#include "kernels/kiln_isa_variant.h"

typedef struct {
  /* out[r] = the sum (mean) of row r of `rows` rows of `cols` floats. */
  void (*sum_rows)(size_t rows, size_t cols, int mean, const float* x, float* out);
  /* out[r] = the row's max (max 1) or min; NaN if it holds one. */
  void (*minmax_rows)(int max, int64_t rows, int64_t cols, const float* x, float* out);
  /* out[j] = op over the n_red rows (ld floats apart) of column j < n_out;
   * op KILN_REDUCE_SUM, MEAN, MAX or MIN. */
  void (*leading)(kiln_reduce_t op, int64_t n_red, int64_t n_out, int64_t ld, const float* x,
                  float* out);
} kiln_reduce_rows_kernels_t;

#define KILN_REDUCE_ROWS_DECLARE_(isa, LEVEL, unused) \
  extern const kiln_reduce_rows_kernels_t kiln_reduce_rows_kernels__##isa;
KILN_ELTWISE_ISAS(KILN_REDUCE_ROWS_DECLARE_, ~)

#endif /* KILN_REDUCE_ROWS_VARIANTS_H */
