/* Guards: relations of sizes the symbols must satisfy beyond their ranges
 * (see kiln_sym.h). Checked at every bind, so each costs two table lookups
 * and a comparison per call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_sym.h"

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

static const char* const kiln_sym_rel_names[KILN_SYM_REL_COUNT] = {"==", "!=", "<", "<="};

static int kiln_sym_rel_holds(kiln_sym_rel_t rel, int64_t a, int64_t b) {
  switch (rel) {
    case KILN_SYM_EQ: return a == b;
    case KILN_SYM_NE: return a != b;
    case KILN_SYM_LT: return a < b;
    default: return a <= b;
  }
}

const char* kiln_sym_guard_describe(const kiln_sym_table_t* t, const kiln_sym_guard_t* g,
                                    char* buf, size_t size) {
  char a[160], b[160];
  snprintf(buf, size, "%s %s %s", kiln_sym_describe(t, g->a, a, sizeof a),
           g->rel >= 0 && g->rel < KILN_SYM_REL_COUNT ? kiln_sym_rel_names[g->rel] : "?",
           kiln_sym_describe(t, g->b, b, sizeof b));
  return buf;
}

kiln_status_t kiln_sym_guard_add(kiln_sym_table_t* t, kiln_sym_rel_t rel, int64_t a, int64_t b) {
  if ((int)rel < 0 || rel >= KILN_SYM_REL_COUNT) FAIL("unknown guard relation %d", (int)rel);
  if (!kiln_sym_dim_valid(t, a) || !kiln_sym_dim_valid(t, b))
    FAIL("a guard on a size that is neither a number nor an expression of the table");
  kiln_sym_guard_t g = {(int32_t)rel, a, b};
  char text[352];
  if (a == b) {
    /* Equal ids are equal sizes at every binding. */
    if (rel == KILN_SYM_EQ || rel == KILN_SYM_LE) return kiln_ok();
    FAIL("the guard %s can never hold", kiln_sym_guard_describe(t, &g, text, sizeof text));
  }
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) {
    if (kiln_sym_rel_holds(rel, a, b)) return kiln_ok();
    FAIL("the guard %s can never hold", kiln_sym_guard_describe(t, &g, text, sizeof text));
  }
  int64_t ea = kiln_sym_example(t, a), eb = kiln_sym_example(t, b);
  if (ea != KILN_SYM_NO_EXAMPLE && eb != KILN_SYM_NO_EXAMPLE && !kiln_sym_rel_holds(rel, ea, eb))
    FAIL("the guard %s does not hold at the example sizes (%lld %s %lld)",
         kiln_sym_guard_describe(t, &g, text, sizeof text), (long long)ea,
         kiln_sym_rel_names[rel], (long long)eb);
  for (int32_t i = 0; i < t->n_guards; ++i)
    if (t->guards[i].rel == g.rel && t->guards[i].a == a && t->guards[i].b == b) return kiln_ok();
  if (t->n_guards >= KILN_SYM_MAX_GUARDS) FAIL("more than %d guards", KILN_SYM_MAX_GUARDS);
  if (t->n_guards == t->cap_guards) {
    int32_t cap = t->cap_guards ? 2 * t->cap_guards : 8;
    kiln_sym_guard_t* grown = realloc(t->guards, sizeof(kiln_sym_guard_t) * (size_t)cap);
    if (!grown) return kiln_status_make(KILN_OUT_OF_MEMORY, "symbolic guards");
    t->guards = grown;
    t->cap_guards = cap;
  }
  t->guards[t->n_guards++] = g;
  return kiln_ok();
}

kiln_status_t kiln_sym_guards_check(const kiln_sym_table_t* t, const int64_t* values) {
  for (int32_t i = 0; i < t->n_guards; ++i) {
    const kiln_sym_guard_t* g = &t->guards[i];
    int64_t a = kiln_sym_value(values, g->a), b = kiln_sym_value(values, g->b);
    if (kiln_sym_rel_holds((kiln_sym_rel_t)g->rel, a, b)) continue;
    char text[352], vars[256];
    size_t at = 0;
    vars[0] = 0;
    for (int32_t v = 0; v < t->n_vars && at < sizeof vars; ++v) {
      int n = snprintf(vars + at, sizeof vars - at, "%s%s = %lld", v ? ", " : "", t->vars[v].name,
                       (long long)kiln_sym_value(values, t->vars[v].dim));
      at = n < 0 ? sizeof vars : at + (size_t)n;
    }
    FAIL("the input sizes break a condition the program was traced under: %s (here %lld %s "
         "%lld, with %s); trace again at sizes like these for a program that runs there",
         kiln_sym_guard_describe(t, g, text, sizeof text), (long long)a,
         kiln_sym_rel_names[g->rel], (long long)b, vars);
  }
  return kiln_ok();
}
