/* Symbolic sizes (issue 17): a dimension or a size-like node param may be an
 * expression of named symbols with ranges (batch, sequence, cache length)
 * instead of a number.
 *
 * Encoding: a size is an int64_t as everywhere else. Values at or above
 * KILN_SYM_BASE + KILN_SYM_MAX_EXPRS are numbers (every real size and param
 * is far above: shape rules cap them at +-2^44); values in
 * [KILN_SYM_BASE, KILN_SYM_BASE + KILN_SYM_MAX_EXPRS) name entry
 * (value - KILN_SYM_BASE) of the graph's expression table. The table is
 * hash-consed and every expression is built in a canonical form (constants
 * folded, sums collected into sorted terms, products into sorted factors
 * times one constant), so equal expressions are equal ids and passes that
 * compare dims with == keep working.
 *
 * Each expression also holds its value at two probe bindings of the
 * symbols: shape inference runs the concrete shape rules at both probes and
 * maps each output size back to the expression whose probe values it has
 * (kiln_shape_infer_sym.c), so the rules need no symbolic variant. Where
 * the symbols have example values (the sizes a graph was traced at, which
 * satisfy every guard), each expression holds its value there too, and
 * shape inference checks what it derived against the concrete rule at the
 * example (the probes may agree on a number an expression is not).
 *
 * A table is shared (reference-counted) by a graph and the graphs the
 * compiler's passes derive from it; it only grows. */
#ifndef KILN_SYM_H
#define KILN_SYM_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_status.h"

#define KILN_SYM_BASE (-(INT64_C(1) << 62))
#define KILN_SYM_MAX_EXPRS (1 << 20)
#define KILN_SYM_MAX_VARS 64
/* The largest value a symbol's range may reach (shape rules cap dims at 2^40). */
#define KILN_SYM_RANGE_MAX (INT64_C(1) << 40)

static inline int kiln_dim_is_sym(int64_t d) {
  return d >= KILN_SYM_BASE && d < KILN_SYM_BASE + KILN_SYM_MAX_EXPRS;
}
static inline int32_t kiln_dim_sym_id(int64_t d) { return (int32_t)(d - KILN_SYM_BASE); }
static inline int64_t kiln_dim_of_sym(int32_t id) { return KILN_SYM_BASE + id; }

typedef enum kiln_sym_kind_e {
  KILN_SYM_VAR = 0, /* a: the symbol's index */
  KILN_SYM_ADD,     /* a + b */
  KILN_SYM_MUL,     /* a * b */
  KILN_SYM_FLOORDIV, /* floor(a / b), b > 0 */
  KILN_SYM_MOD,     /* a mod b (Python's: the sign of b), b > 0 */
  KILN_SYM_MAX,
  KILN_SYM_MIN,
  KILN_SYM_KIND_COUNT
} kiln_sym_kind_t;

typedef struct kiln_sym_expr_s {
  int32_t kind;
  int64_t a, b;       /* operands: numbers or encoded expressions of lower id */
  int64_t probe[2];   /* the value at each probe binding */
  int64_t example;    /* the value at the example binding, or KILN_SYM_NO_EXAMPLE */
} kiln_sym_expr_t;

/* An expression's example value where a symbol it reads has none (or the
 * example makes it invalid: a division by a non-positive value). */
#define KILN_SYM_NO_EXAMPLE INT64_MIN

typedef struct kiln_sym_var_s {
  char* name; /* owned: "s0", or the name torch gave */
  int64_t lo, hi;
  int64_t dim; /* the VAR expression, encoded */
} kiln_sym_var_t;

/* A relation of two sizes the symbols must satisfy beyond their ranges: one
 * of the guards torch.export's ShapeEnv traced the program under (a view to
 * 40 columns of an (s0, s1, s2) input holds only where s1*s2 == 40; a
 * broadcast traced with s != 1 is another program at s == 1). The exported
 * program refuses a call that breaks one; so does a kiln model, at bind. */
typedef enum kiln_sym_rel_e {
  KILN_SYM_EQ = 0, /* a == b */
  KILN_SYM_NE,     /* a != b */
  KILN_SYM_LT,     /* a < b */
  KILN_SYM_LE,     /* a <= b */
  KILN_SYM_REL_COUNT
} kiln_sym_rel_t;

typedef struct kiln_sym_guard_s {
  int32_t rel;
  int64_t a, b; /* numbers or encoded expressions of the table */
} kiln_sym_guard_t;

#define KILN_SYM_MAX_GUARDS 4096

typedef struct kiln_sym_table_s {
  int32_t refs;
  kiln_sym_expr_t* exprs;
  int32_t n_exprs, cap_exprs;
  kiln_sym_var_t vars[KILN_SYM_MAX_VARS];
  int32_t n_vars;
  int32_t* slots; /* open-addressed hash of expression ids, -1 empty */
  int32_t n_slots;
  kiln_sym_guard_t* guards; /* in the order added; see kiln_sym_guard_add */
  int32_t n_guards, cap_guards;
} kiln_sym_table_t;

kiln_status_t kiln_sym_table_create(kiln_sym_table_t** out);
kiln_sym_table_t* kiln_sym_table_retain(kiln_sym_table_t* t);
void kiln_sym_table_release(kiln_sym_table_t* t);

/* A new symbol with range [lo, hi] (1 <= hi <= KILN_SYM_RANGE_MAX), named
 * `name` (copied; NULL gives "s<index>"). */
kiln_status_t kiln_sym_var(kiln_sym_table_t* t, const char* name, int64_t lo, int64_t hi,
                           int64_t* out_dim);

/* Gives symbol `var` (kiln_sym_var's out_dim) its example value, a size in
 * its range that the graph was traced at (a check only: probes still derive
 * every size). Only while no expression reads the symbol yet: expressions
 * take their example values when they are built. */
kiln_status_t kiln_sym_set_example(kiln_sym_table_t* t, int64_t var, int64_t value);
/* d's example value: numbers are themselves; KILN_SYM_NO_EXAMPLE if none. */
int64_t kiln_sym_example(const kiln_sym_table_t* t, int64_t d);

/* Canonical constructors. Operands are numbers or encoded expressions of t;
 * with number operands they compute the number (an overflow is an error),
 * so concrete sizes never touch the table. */
kiln_status_t kiln_dim_add(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
kiln_status_t kiln_dim_sub(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
kiln_status_t kiln_dim_mul(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
kiln_status_t kiln_dim_floordiv(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
kiln_status_t kiln_dim_mod(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
kiln_status_t kiln_dim_max(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
kiln_status_t kiln_dim_min(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out);
/* One constructor by kind (the artifact reader and the Python binding). */
kiln_status_t kiln_dim_op(kiln_sym_table_t* t, kiln_sym_kind_t kind, int64_t a, int64_t b,
                          int64_t* out);

/* 1 when d is a number or an expression of t. */
int kiln_sym_dim_valid(const kiln_sym_table_t* t, int64_t d);
/* An expression's value at a probe binding that makes it invalid (a
 * division by a size made non-positive there, an overflow). Only a guard's
 * expressions may be: torch's guards read sizes no node has (1 % (s39 *
 * ((s22*s35//352 - s8)//2 + 3)) != 0, a convolution's output height whose
 * kernel height the first probes make larger than the input), and they are
 * built before kiln_sym_probes_fit moves the probes where they hold. A
 * value's size or a node's param invalid at a probe is refused
 * (kiln_sym_probed). */
#define KILN_SYM_NO_PROBE INT64_MIN
/* d's value at probe binding p (0 or 1), or KILN_SYM_NO_PROBE; numbers are
 * themselves. */
int64_t kiln_sym_probe(const kiln_sym_table_t* t, int64_t d, int p);
/* 1 when d is a number, or an expression of t valid at both probes. */
int kiln_sym_probed(const kiln_sym_table_t* t, int64_t d);

/* Every expression's value for symbol values vars[0..n_vars) into
 * values[0..n_exprs) (an overflow, or a division by a non-positive value, is
 * an error naming the expression). */
kiln_status_t kiln_sym_eval_all(const kiln_sym_table_t* t, const int64_t* vars,
                                int64_t* values);
/* kiln_sym_eval_all for the expressions with need[id] set alone (NULL:
 * all); need must hold every operand of a needed expression. */
kiln_status_t kiln_sym_eval_some(const kiln_sym_table_t* t, const int64_t* vars,
                                 const unsigned char* need, int64_t* values);
/* d's value given kiln_sym_eval_all's values; numbers are themselves. */
static inline int64_t kiln_sym_value(const int64_t* values, int64_t d) {
  return kiln_dim_is_sym(d) ? values[kiln_dim_sym_id(d)] : d;
}

/* Adds the guard `a rel b` (kiln_sym_rel_t). One that holds for every
 * binding as written (two equal sizes, two numbers that satisfy it) or
 * repeats one already there adds nothing; two numbers that break it, or a
 * guard the symbols' example values break, are an error (the program was
 * traced where every guard held). */
kiln_status_t kiln_sym_guard_add(kiln_sym_table_t* t, kiln_sym_rel_t rel, int64_t a, int64_t b);
/* OK when every guard holds for kiln_sym_eval_all's values; else an error
 * naming the first guard broken, its two sides' values and the symbols'. */
kiln_status_t kiln_sym_guards_check(const kiln_sym_table_t* t, const int64_t* values);
/* Moves the probe bindings, where a guard breaks at one, to sizes where
 * every guard holds (a view to (s0*s1)//3 rows checks its element count
 * only where 3 divides s0*s1), and re-evaluates every expression's probes
 * there: nearby sizes, or for guards that pin one or two symbols, the
 * smallest sizes that satisfy them. Call it once the guards are in and
 * before any shape is derived at the probes (the front end before lowering
 * nodes, the artifact reader after its guards section): it reads only what
 * the guards read, so both find the same probes. A probe nothing found
 * fits, within a fixed budget of work, stays as it was: a rule that fails
 * there refuses its node, as before. */
void kiln_sym_probes_fit(kiln_sym_table_t* t);
/* "s1*s2 == 40" into buf; returns buf. */
const char* kiln_sym_guard_describe(const kiln_sym_table_t* t, const kiln_sym_guard_t* g,
                                    char* buf, size_t size);

/* "s0*768 + 1", "L + T" into buf; returns buf. */
const char* kiln_sym_describe(const kiln_sym_table_t* t, int64_t d, char* buf, size_t size);

#endif /* KILN_SYM_H */
