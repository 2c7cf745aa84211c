/* The ISA variants of the fused interpreter's arithmetic, compare and
 * select loops
 * (kiln_fused_rows.c, compiled once per ISA of the eltwise family's list as
 * kiln_fused_compare_rows__generic, __avx2, ...). kiln_eltwise_fused.c
 * picks the running level's on every call. out may not alias an operand. */
#ifndef KILN_FUSED_ROWS_VARIANTS_H
#define KILN_FUSED_ROWS_VARIANTS_H

#include <stdint.h>

#include "kernels/kiln_isa_variant.h"

/* out[i] = x[i] op y[i] as 1.0 / 0.0 (op a KILN_FUSED_EQ..GE opcode); an
 * operand flagged scalar is read at [0] throughout. */
typedef void (*kiln_fused_compare_rows_fn)(uint32_t op, int64_t n, float* out, const float* x,
                                           int x_scalar, const float* y, int y_scalar);
/* out[i] = x[i] op y[i] for op KILN_FUSED_ADD, SUB, MUL, DIV, MAXIMUM or
 * MINIMUM (kiln_binary's float rules), scalar flags as above. */
typedef void (*kiln_fused_arith_rows_fn)(uint32_t op, int64_t n, float* out, const float* x,
                                         int x_scalar, const float* y, int y_scalar);
/* out[i] = (x[i] op y[i]) ? p[i] : q[i], op KILN_FUSED_EQ..GE; x a tile,
 * y, p and q tiles or scalars (flags as above). */
typedef void (*kiln_fused_compare_select_rows_fn)(uint32_t op, int64_t n, float* out,
                                                  const float* x, const float* y, int y_scalar,
                                                  const float* p, int p_scalar, const float* q,
                                                  int q_scalar);
/* out[i] = c[i] != 0 ? x[i] : y[i], scalar flags as above. */
typedef void (*kiln_fused_select_rows_fn)(int64_t n, float* out, const float* c, int c_scalar,
                                          const float* x, int x_scalar, const float* y,
                                          int y_scalar);

#define KILN_FUSED_ROWS_DECLARE_(isa, LEVEL, unused)                                          \
  void kiln_fused_compare_rows__##isa(uint32_t op, int64_t n, float* out, const float* x,     \
                                      int x_scalar, const float* y, int y_scalar);            \
  void kiln_fused_arith_rows__##isa(uint32_t op, int64_t n, float* out, const float* x,       \
                                    int x_scalar, const float* y, int y_scalar);              \
  void kiln_fused_compare_select_rows__##isa(uint32_t op, int64_t n, float* out,             \
                                             const float* x, const float* y, int y_scalar,   \
                                             const float* p, int p_scalar, const float* q,   \
                                             int q_scalar);                                  \
  void kiln_fused_select_rows__##isa(int64_t n, float* out, const float* c, int c_scalar,     \
                                     const float* x, int x_scalar, const float* y,            \
                                     int y_scalar);
KILN_ELTWISE_ISAS(KILN_FUSED_ROWS_DECLARE_, ~)

#endif /* KILN_FUSED_ROWS_VARIANTS_H */
