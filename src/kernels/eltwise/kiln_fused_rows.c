/* The fused interpreter's arithmetic, compare and select loops
 * (kiln_eltwise_fused.c),
 * compiled once per ISA of the eltwise family's list so that GCC
 * vectorises them at the width of the flags (compares into masks, selects
 * into blends); built for the baseline ISA inside the interpreter they ran
 * four floats at a time, and a clamp's program (lt, where, gt, where) or
 * hardtanh, relu6 and leaky ReLU took 5-10x eager's time. A scalar operand
 * (a clamp's bound) is used by value. The loops' results are the scalar
 * rules' (kiln_fused_ref's): compares give 1.0 / 0.0, a select takes x
 * where c is not 0. */
#include "kernels/eltwise/kiln_fused_rows_variants.h"

#include "base/kiln_fused_program.h"

/* out[i] = EXPR(u, v) over u = x[i], v = y[i], an operand flagged scalar
 * read once before its loop: each shape of operands its own loop, which
 * GCC vectorises (an index `x_scalar ? 0 : i` inside one loop kept it
 * scalar: a clamp's compare ran at a tenth of the speed of a select).
 * Inside a switch case; ends with `return`. */
#define KILN_FUSED_ROWS_BINARY(EXPR)                         \
  if (!x_scalar && !y_scalar) {                              \
    for (int64_t i = 0; i < n; ++i) {                        \
      float u = x[i], v = y[i];                              \
      out[i] = (EXPR);                                       \
    }                                                        \
  } else if (!x_scalar) {                                    \
    const float v = y[0];                                    \
    for (int64_t i = 0; i < n; ++i) {                        \
      float u = x[i];                                        \
      out[i] = (EXPR);                                       \
    }                                                        \
  } else if (!y_scalar) {                                    \
    const float u = x[0];                                    \
    for (int64_t i = 0; i < n; ++i) {                        \
      float v = y[i];                                        \
      out[i] = (EXPR);                                       \
    }                                                        \
  } else {                                                   \
    const float u = x[0], v = y[0];                          \
    for (int64_t i = 0; i < n; ++i) out[i] = (EXPR);         \
  }                                                          \
  return

void KILN_ISA_VARIANT(kiln_fused_compare_rows)(uint32_t op, int64_t n, float* restrict out,
                                               const float* x, int x_scalar, const float* y,
                                               int y_scalar) {
  switch (op) {
    case KILN_FUSED_EQ: KILN_FUSED_ROWS_BINARY(u == v ? 1.0f : 0.0f);
    case KILN_FUSED_NE: KILN_FUSED_ROWS_BINARY(u != v ? 1.0f : 0.0f);
    case KILN_FUSED_LT: KILN_FUSED_ROWS_BINARY(u < v ? 1.0f : 0.0f);
    case KILN_FUSED_LE: KILN_FUSED_ROWS_BINARY(u <= v ? 1.0f : 0.0f);
    case KILN_FUSED_GT: KILN_FUSED_ROWS_BINARY(u > v ? 1.0f : 0.0f);
    default: KILN_FUSED_ROWS_BINARY(u >= v ? 1.0f : 0.0f);
  }
}

/* torch.maximum / minimum: NaN from either side wins (kiln_binary's rows). */
#define KILN_FUSED_ROWS_MAX(u, v) ((u) != (u) ? (u) : (v) != (v) ? (v) : (u) > (v) ? (u) : (v))
#define KILN_FUSED_ROWS_MIN(u, v) ((u) != (u) ? (u) : (v) != (v) ? (v) : (u) < (v) ? (u) : (v))

void KILN_ISA_VARIANT(kiln_fused_arith_rows)(uint32_t op, int64_t n, float* restrict out,
                                             const float* x, int x_scalar, const float* y,
                                             int y_scalar) {
  switch (op) {
    case KILN_FUSED_ADD: KILN_FUSED_ROWS_BINARY(u + v);
    case KILN_FUSED_SUB: KILN_FUSED_ROWS_BINARY(u - v);
    case KILN_FUSED_MUL: KILN_FUSED_ROWS_BINARY(u * v);
    case KILN_FUSED_DIV: KILN_FUSED_ROWS_BINARY(u / v);
    case KILN_FUSED_MAXIMUM: KILN_FUSED_ROWS_BINARY(KILN_FUSED_ROWS_MAX(u, v));
    default: KILN_FUSED_ROWS_BINARY(KILN_FUSED_ROWS_MIN(u, v));
  }
}

void KILN_ISA_VARIANT(kiln_fused_select_rows)(int64_t n, float* restrict out, const float* c,
                                              int c_scalar, const float* x, int x_scalar,
                                              const float* y, int y_scalar) {
  if (c_scalar) { /* one arm throughout */
    const float* arm = c[0] != 0.0f ? x : y;
    if (c[0] != 0.0f ? x_scalar : y_scalar) {
      const float v = arm[0];
      for (int64_t i = 0; i < n; ++i) out[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] = arm[i];
    }
    return;
  }
  /* Both arms loaded unconditionally, so the loops are blends. */
  if (!x_scalar && !y_scalar) {
    for (int64_t i = 0; i < n; ++i) {
      float xv = x[i], yv = y[i];
      out[i] = c[i] != 0.0f ? xv : yv;
    }
  } else if (x_scalar && !y_scalar) {
    const float xv = x[0];
    for (int64_t i = 0; i < n; ++i) {
      float yv = y[i];
      out[i] = c[i] != 0.0f ? xv : yv;
    }
  } else if (!x_scalar) {
    const float yv = y[0];
    for (int64_t i = 0; i < n; ++i) {
      float xv = x[i];
      out[i] = c[i] != 0.0f ? xv : yv;
    }
  } else {
    const float xv = x[0], yv = y[0];
    for (int64_t i = 0; i < n; ++i) out[i] = c[i] != 0.0f ? xv : yv;
  }
}

/* out[i] = (x[i] OP y[i]) ? p[i] : q[i], a compare and the select that
 * reads it in one pass (a clamp's lt/where and gt/where, leaky ReLU's
 * gt/where): each combination of operand shapes and each op its own
 * instance of one inlined loop, so the flags fold and GCC vectorises every
 * loop. x is a tile; y, p and q a tile or a scalar. Both arms are loaded
 * unconditionally: a blend, as the select loop above. */
static inline __attribute__((always_inline)) void kiln_fused_cmp_sel_loop(
    int op, int64_t n, float* restrict out, const float* x, const float* y, int ys,
    const float* p, int ps, const float* q, int qs) {
  const float y0 = y[0], p0 = p[0], q0 = q[0];
  for (int64_t i = 0; i < n; ++i) {
    float u = x[i], v = ys ? y0 : y[i], a = ps ? p0 : p[i], b = qs ? q0 : q[i];
    int c = op == KILN_FUSED_EQ   ? u == v
            : op == KILN_FUSED_LT ? u < v
            : op == KILN_FUSED_LE ? u <= v
            : op == KILN_FUSED_GT ? u > v
                                  : u >= v;
    out[i] = c ? a : b;
  }
}

#define KILN_FUSED_CMP_SEL_SHAPES(OP)                                                 \
  switch (shape) {                                                                    \
    case 0: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 0, p, 0, q, 0); return;         \
    case 1: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 0, p, 0, q, 1); return;         \
    case 2: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 0, p, 1, q, 0); return;         \
    case 3: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 0, p, 1, q, 1); return;         \
    case 4: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 1, p, 0, q, 0); return;         \
    case 5: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 1, p, 0, q, 1); return;         \
    case 6: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 1, p, 1, q, 0); return;         \
    default: kiln_fused_cmp_sel_loop(OP, n, out, x, y, 1, p, 1, q, 1); return;        \
  }

void KILN_ISA_VARIANT(kiln_fused_compare_select_rows)(uint32_t op, int64_t n, float* restrict out,
                                                      const float* x, const float* y,
                                                      int y_scalar, const float* p, int p_scalar,
                                                      const float* q, int q_scalar) {
  if (op == KILN_FUSED_NE) { /* x != y is exactly !(x == y), NaN too: the arms swap */
    const float* t = p;
    int ts = p_scalar;
    p = q, p_scalar = q_scalar, q = t, q_scalar = ts;
    op = KILN_FUSED_EQ;
  }
  const int shape = (y_scalar ? 4 : 0) | (p_scalar ? 2 : 0) | (q_scalar ? 1 : 0);
  switch (op) {
    case KILN_FUSED_EQ: KILN_FUSED_CMP_SEL_SHAPES(KILN_FUSED_EQ)
    case KILN_FUSED_LT: KILN_FUSED_CMP_SEL_SHAPES(KILN_FUSED_LT)
    case KILN_FUSED_LE: KILN_FUSED_CMP_SEL_SHAPES(KILN_FUSED_LE)
    case KILN_FUSED_GT: KILN_FUSED_CMP_SEL_SHAPES(KILN_FUSED_GT)
    default: KILN_FUSED_CMP_SEL_SHAPES(KILN_FUSED_GE)
  }
}
