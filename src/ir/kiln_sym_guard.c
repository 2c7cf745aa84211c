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

/* ---- probes that satisfy the guards ------------------------------------ */

/* The work kiln_sym_probes_fit may do, in expression evaluations: a few
 * milliseconds, whatever a (possibly hostile) table holds. */
#define KILN_SYM_FIT_BUDGET (INT64_C(1) << 24)
/* How far a probe moves a symbol per step, and the steps it takes: less
 * than the 16 that separates two symbols' probes, so they stay apart. */
#define KILN_SYM_FIT_REACH 7
#define KILN_SYM_FIT_ROUNDS 16
/* The scan of small sizes for guards that pin one or two symbols. */
#define KILN_SYM_FIT_SCAN_1 256
#define KILN_SYM_FIT_SCAN_2 64
#define KILN_SYM_FIT_SCAN_3 24

/* The search's state. It reads only the expressions the guards read
 * (need), so it takes the same path on a table with more expressions: the
 * front end fits before lowering any node, the artifact reader after
 * reading them all, and both must find the same probes. */
typedef struct {
  const kiln_sym_table_t* t;
  const unsigned char* need;
  int64_t n_need; /* expressions one evaluation computes */
  int64_t* values;
  int64_t budget;
  int p;
  int64_t distance; /* the last evaluation's: how far the broken guards are from holding */
} kiln_sym_fit_t;

/* How far a broken guard is from holding, in sizes: |a - b| for ==, what a
 * exceeds b by for < and <= (plus one for <), one for !=. */
static int64_t kiln_sym_fit_gap(kiln_sym_rel_t rel, int64_t a, int64_t b) {
  int64_t d;
  if (__builtin_sub_overflow(a, b, &d)) return INT64_MAX;
  switch (rel) {
    case KILN_SYM_EQ: return d == INT64_MIN ? INT64_MAX : d < 0 ? -d : d;
    case KILN_SYM_NE: return d ? 0 : 1;
    case KILN_SYM_LT: return d < 0 ? 0 : d == INT64_MAX ? d : d + 1;
    default: return d < 0 ? 0 : d;
  }
}

/* Guards broken where the symbols are vars; -1 where an expression they
 * read is invalid there, or the budget is spent. */
static int32_t kiln_sym_fit_broken(kiln_sym_fit_t* f, const int64_t* vars) {
  const kiln_sym_table_t* t = f->t;
  if (f->budget <= 0) return -1;
  f->budget -= f->n_need + t->n_guards + 1;
  kiln_status_t s = kiln_sym_eval_some(t, vars, f->need, f->values);
  if (s) {
    kiln_status_free(s);
    return -1;
  }
  int32_t n = 0;
  f->distance = 0;
  for (int32_t i = 0; i < t->n_guards; ++i) {
    const kiln_sym_guard_t* g = &t->guards[i];
    const int64_t a = kiln_sym_value(f->values, g->a), b = kiln_sym_value(f->values, g->b);
    if (kiln_sym_rel_holds((kiln_sym_rel_t)g->rel, a, b)) continue;
    ++n;
    const int64_t gap = kiln_sym_fit_gap((kiln_sym_rel_t)g->rel, a, b);
    f->distance = gap > INT64_MAX - f->distance ? INT64_MAX : f->distance + gap;
  }
  return n;
}

/* May symbol v take value x at the probe? In its range, off size 1 (it
 * broadcasts) where the range allows, apart from every other symbol's value
 * there but `same` (a size maps back to the one symbol it came from) and,
 * if apart, from its own other probe (two probes that agree make a size a
 * number). same: a symbol that may share the value, or -1. */
static int kiln_sym_fit_allowed(const kiln_sym_fit_t* f, const int64_t* vars, int32_t v,
                                int64_t x, int apart, int32_t same) {
  const kiln_sym_var_t* s = &f->t->vars[v];
  if (x < s->lo || x > s->hi || (x < 2 && s->hi >= 2)) return 0;
  if (apart && x == kiln_sym_probe(f->t, s->dim, 1 - f->p)) return 0;
  for (int32_t w = 0; w < f->t->n_vars; ++w)
    if (w != v && w != same && vars[w] == x) return 0;
  return 1;
}

/* Steps of one symbol by up to KILN_SYM_FIT_REACH, each taken while it
 * breaks fewer guards. The guards still broken. */
static int32_t kiln_sym_fit_steps(kiln_sym_fit_t* f, int64_t* vars) {
  const kiln_sym_table_t* t = f->t;
  int32_t broken = kiln_sym_fit_broken(f, vars);
  for (int round = 0; broken > 0 && round < KILN_SYM_FIT_ROUNDS; ++round) {
    int32_t best = broken, best_v = -1;
    int64_t best_x = 0;
    for (int32_t v = 0; v < t->n_vars; ++v) {
      if (t->vars[v].lo == t->vars[v].hi) continue;
      const int64_t was = vars[v];
      for (int step = 1; step <= 2 * KILN_SYM_FIT_REACH; ++step) {
        /* +1, -1, +2, -2, ...: the nearest values first. */
        const int64_t x = was + (step % 2 ? (step + 1) / 2 : -(step / 2));
        if (!kiln_sym_fit_allowed(f, vars, v, x, 1, -1)) continue;
        vars[v] = x;
        int32_t b = kiln_sym_fit_broken(f, vars);
        vars[v] = was;
        if (b >= 0 && b < best) best = b, best_v = v, best_x = x;
      }
    }
    if (best_v < 0) break;
    vars[best_v] = best_x;
    broken = best;
  }
  return broken;
}

/* The symbols the broken guards read, at most max, into vs; their count,
 * or -1 for more. */
static int kiln_sym_fit_pinned(kiln_sym_fit_t* f, const int64_t* vars, int32_t* vs, int max) {
  const kiln_sym_table_t* t = f->t;
  if (kiln_sym_fit_broken(f, vars) < 0) return -1;
  unsigned char* reads = calloc((size_t)t->n_exprs + 1, 1);
  if (!reads) return -1;
  for (int32_t i = 0; i < t->n_guards; ++i) {
    const kiln_sym_guard_t* g = &t->guards[i];
    if (kiln_sym_rel_holds((kiln_sym_rel_t)g->rel, kiln_sym_value(f->values, g->a),
                           kiln_sym_value(f->values, g->b)))
      continue;
    if (kiln_dim_is_sym(g->a)) reads[kiln_dim_sym_id(g->a)] = 1;
    if (kiln_dim_is_sym(g->b)) reads[kiln_dim_sym_id(g->b)] = 1;
  }
  int n = 0;
  for (int32_t e = t->n_exprs - 1; e >= 0 && n >= 0; --e) {
    if (!reads[e]) continue;
    const kiln_sym_expr_t* x = &t->exprs[e];
    if (x->kind == KILN_SYM_VAR) {
      if (n == max) n = -1;
      else vs[n++] = (int32_t)x->a;
      continue;
    }
    if (kiln_dim_is_sym(x->a)) reads[kiln_dim_sym_id(x->a)] = 1;
    if (kiln_dim_is_sym(x->b)) reads[kiln_dim_sym_id(x->b)] = 1;
  }
  free(reads);
  return n;
}

/* Does every binding next to vars (the two symbols vs each moved by -1, 0
 * or +1, in their ranges) break a guard? Guards that hold there too do not
 * pin the symbols to vars (s16 == s27 holds along the diagonal). 0 as well
 * when the budget runs out. */
static int kiln_sym_fit_isolated(kiln_sym_fit_t* f, int64_t* vars, const int32_t* vs) {
  const int64_t was[2] = {vars[vs[0]], vars[vs[1]]};
  int isolated = 1;
  for (int da = -1; da <= 1 && isolated; ++da) {
    for (int db = -1; db <= 1 && isolated; ++db) {
      const int64_t x = was[0] + da, y = was[1] + db;
      const kiln_sym_var_t *a = &f->t->vars[vs[0]], *b = &f->t->vars[vs[1]];
      if ((!da && !db) || x < a->lo || x > a->hi || y < b->lo || y > b->hi) continue;
      vars[vs[0]] = x, vars[vs[1]] = y;
      const int32_t broken = kiln_sym_fit_broken(f, vars);
      if (broken == 0 || (broken < 0 && f->budget <= 0)) isolated = 0;
    }
  }
  vars[vs[0]] = was[0], vars[vs[1]] = was[1];
  return isolated;
}

/* Guards that pin one or two symbols far from the probes (s0*s6 == 21
 * with 3 not dividing s6: (3, 7) alone) are out of reach of steps: scan
 * their small sizes, in order, for the first where every guard holds;
 * apart from the other probe if any is, else the same (the sizes those
 * symbols give are then taken for numbers: right while the guards pin
 * them, and checked at every bind). Taken for numbers, two symbols may
 * also share a size where the guards pin both to it (4*s0*s25 == 36, both
 * at least 2: (3, 3) alone; fuzzer seed 19019 graph 1945), which apart
 * they may not: only where every binding next to it breaks a guard, not
 * where the guards only make them equal (s16 == s27, a prompt's length
 * twice: numbers there would fix the length). 1 when found (vars hold
 * it). */
static int kiln_sym_fit_scan(kiln_sym_fit_t* f, int64_t* vars) {
  int32_t vs[2];
  const int n = kiln_sym_fit_pinned(f, vars, vs, 2);
  if (n <= 0) return 0;
  const int64_t reach = n == 1 ? KILN_SYM_FIT_SCAN_1 : KILN_SYM_FIT_SCAN_2;
  const int64_t was[2] = {vars[vs[0]], n == 2 ? vars[vs[1]] : 0};
  for (int apart = 1; apart >= 0; --apart) {
    const kiln_sym_var_t* a = &f->t->vars[vs[0]];
    const kiln_sym_var_t* b = n == 2 ? &f->t->vars[vs[1]] : NULL;
    for (int64_t i = 0; i < reach && a->lo + i <= a->hi; ++i) {
      vars[vs[0]] = a->lo + i;
      for (int64_t j = 0; j < (b ? reach : 1) && (!b || b->lo + j <= b->hi); ++j) {
        if (b) vars[vs[1]] = b->lo + j;
        const int32_t same0 = b && !apart ? vs[1] : -1, same1 = !apart ? vs[0] : -1;
        if (!kiln_sym_fit_allowed(f, vars, vs[0], vars[vs[0]], apart, same0)) continue;
        if (b && !kiln_sym_fit_allowed(f, vars, vs[1], vars[vs[1]], apart, same1)) continue;
        const int32_t broken = kiln_sym_fit_broken(f, vars);
        if (broken == 0 && (!b || vars[vs[0]] != vars[vs[1]] || kiln_sym_fit_isolated(f, vars, vs)))
          return 1;
        if (broken <= 0 && f->budget <= 0) goto out;
      }
    }
  }
out:
  vars[vs[0]] = was[0];
  if (n == 2) vars[vs[1]] = was[1];
  return 0;
}

/* The nearest value to x that symbol v may take (kiln_sym_fit_allowed,
 * apart), x clamped to its range first and then moved by up to
 * KILN_SYM_FIT_REACH; 0 when there is none. */
static int kiln_sym_fit_nearest(const kiln_sym_fit_t* f, const int64_t* vars, int32_t v, int64_t x,
                                int64_t* out) {
  const kiln_sym_var_t* s = &f->t->vars[v];
  x = x < s->lo ? s->lo : x > s->hi ? s->hi : x;
  for (int step = 0; step <= 2 * KILN_SYM_FIT_REACH; ++step) {
    const int64_t y = x + (step % 2 ? (step + 1) / 2 : -(step / 2));
    if (kiln_sym_fit_allowed(f, vars, v, y, 1, -1)) return *out = y, 1;
  }
  return 0;
}

/* Equalities of several symbols far from the probes: a split's pieces sum
 * to the dim split (a + b + c + d == 48, Dynamo's guard on sizes a graph
 * break handed over from .tolist()). A step of one symbol leaves the guard
 * as broken as before, and the scan moves two at most, so neither fits it.
 * Here each move is judged by the guards broken, then by how far they are
 * from holding (kiln_sym_fit_gap), and a broken equality's gap, where it
 * changes by c != 0 as one symbol goes up by 1, proposes moving that symbol
 * by -gap / c (rounded, clamped to its range, then to the nearest value it
 * may take): s0 + s1 == s2 closes in one move, a sum of four pieces to 48
 * in four. Runs after the steps and the scan, whose probes it leaves as
 * they were wherever those fit the guards: a table an older kiln fitted
 * gets the same probes. The guards still broken. */
static int32_t kiln_sym_fit_descend(kiln_sym_fit_t* f, int64_t* vars) {
  const kiln_sym_table_t* t = f->t;
  int32_t broken = kiln_sym_fit_broken(f, vars);
  int64_t distance = f->distance;
  for (int round = 0; broken > 0 && round < 4 * KILN_SYM_FIT_ROUNDS; ++round) {
    int32_t best = broken, best_v = -1;
    int64_t best_d = distance, best_x = 0;
    for (int32_t i = 0; i < t->n_guards; ++i) {
      const kiln_sym_guard_t* g = &t->guards[i];
      if (g->rel != KILN_SYM_EQ || kiln_sym_fit_broken(f, vars) < 0) continue;
      const int64_t a = kiln_sym_value(f->values, g->a), b = kiln_sym_value(f->values, g->b);
      int64_t gap, moved, c, x;
      if (a == b || __builtin_sub_overflow(a, b, &gap)) continue;
      for (int32_t v = 0; v < t->n_vars; ++v) {
        const int64_t was = vars[v];
        if (t->vars[v].lo == t->vars[v].hi || was == INT64_MAX) continue;
        vars[v] = was + 1;
        const int ok = kiln_sym_fit_broken(f, vars) >= 0 &&
                       !__builtin_sub_overflow(kiln_sym_value(f->values, g->a),
                                               kiln_sym_value(f->values, g->b), &moved);
        vars[v] = was;
        if (!ok || __builtin_sub_overflow(moved, gap, &c) || !c || (c == -1 && gap == INT64_MIN) ||
            __builtin_sub_overflow(was, gap / c, &x) || !kiln_sym_fit_nearest(f, vars, v, x, &x))
          continue;
        vars[v] = x;
        const int32_t n = kiln_sym_fit_broken(f, vars);
        vars[v] = was;
        if (n >= 0 && (n < best || (n == best && f->distance < best_d)))
          best = n, best_d = f->distance, best_v = v, best_x = x;
      }
    }
    if (best_v < 0) break;
    vars[best_v] = best_x;
    broken = best;
    distance = best_d;
  }
  return broken;
}

/* The divisors the guards' expressions take a floor division or modulo
 * by (numbers from 2 to 2^20), and their least common multiple where it is
 * new and within that bound, into m; their count (at most
 * KILN_SYM_FIT_MODULI). */
#define KILN_SYM_FIT_MODULI 16
static int kiln_sym_fit_moduli(const kiln_sym_fit_t* f, int64_t* m) {
  const kiln_sym_table_t* t = f->t;
  int n = 0;
  int64_t lcm = 1;
  for (int32_t e = 0; e < t->n_exprs && n < KILN_SYM_FIT_MODULI - 1; ++e) {
    const kiln_sym_expr_t* x = &t->exprs[e];
    if (!f->need[e] || (x->kind != KILN_SYM_MOD && x->kind != KILN_SYM_FLOORDIV) || kiln_dim_is_sym(x->b) ||
        x->b < 2 || x->b > ((int64_t)1 << 20))
      continue;
    int k = 0;
    while (k < n && m[k] != x->b) ++k;
    if (k < n) continue;
    m[n++] = x->b;
    int64_t a = lcm, b = x->b;
    while (b) { /* lcm := lcm * b / gcd(lcm, b), while it stays small */
      const int64_t r = a % b;
      a = b, b = r;
    }
    lcm = lcm > (((int64_t)1 << 20) * a) / x->b ? 0 : lcm / a * x->b;
    if (!lcm) break;
  }
  int k = 0;
  while (k < n && m[k] != lcm) ++k;
  if (lcm > 1 && k == n) m[n++] = lcm;
  return n;
}

/* Values symbol v may move to from vars[v] (kiln_sym_fit_multiples), into
 * x (room for 2 + 4 n_m); their count. */
static int kiln_sym_fit_candidates(const kiln_sym_fit_t* f, const int64_t* vars, int32_t v,
                                   const int64_t* m, int n_m, int64_t* x) {
  const int64_t was = vars[v];
  int n = 0;
  if (f->t->vars[v].lo == f->t->vars[v].hi || was < 0 || was > ((int64_t)1 << 40)) return 0;
  for (int k = -1; k < n_m; ++k) {
    /* k = -1: one up and one down; else the multiples of m[k] below and
     * above was, and the next ones out (the nearest may be the other
     * probe's or another symbol's value). */
    for (int j = 0; j < (k < 0 ? 2 : 4); ++j) {
      const int64_t y = k < 0 ? was + (j ? -1 : 1) : was / m[k] * m[k] + (j - 1) * m[k];
      int dup = y == was;
      for (int i = 0; i < n && !dup; ++i) dup = x[i] == y;
      if (!dup && kiln_sym_fit_allowed(f, vars, v, y, 1, -1)) x[n++] = y;
    }
  }
  return n;
}

/* Divisibility of several symbols (fuzz seed 20089 graph 1226: x.view(3,
 * -1, 80) of an (s0, s1, s2) input guards s0*s1*s2 % 240 == 0, s0 % 3 !=
 * 0 and s0*s1 % 3 != 0): no step of 7 nor the descent's solving of one
 * equality reaches a multiple of 240, and the scan moves two symbols at
 * most, from small sizes. Here a move takes one symbol to a nearby multiple
 * of a divisor the guards' expressions use (or their lcm), or by one, and
 * where no such move breaks fewer guards (or as many, nearer to holding:
 * the descent's order), two such moves of two symbols at once (s0 off a
 * multiple of 3 while s2 becomes one of 240). Deterministic in the table
 * alone (no example values, which a saved file does not hold): the
 * artifact reader finds the same probes. Runs after the descent, so
 * probes the earlier stages fit stay as they were. The guards still
 * broken. */
static int32_t kiln_sym_fit_multiples(kiln_sym_fit_t* f, int64_t* vars) {
  int64_t m[KILN_SYM_FIT_MODULI], x1[2 + 4 * KILN_SYM_FIT_MODULI], x2[2 + 4 * KILN_SYM_FIT_MODULI];
  int32_t vs[KILN_SYM_MAX_VARS];
  const int n_m = kiln_sym_fit_moduli(f, m);
  int32_t broken = kiln_sym_fit_broken(f, vars);
  int64_t distance = f->distance;
  for (int round = 0; n_m && broken > 0 && round < KILN_SYM_FIT_ROUNDS; ++round) {
    /* The first symbol to move is one the broken guards read; the second
     * (a pair) any other: the guard broken may hold only once it moves
     * (a % 3 != 0 broken, a off 3's multiples breaks a*b*c % 240 == 0
     * unless c moves too). */
    const int nv = kiln_sym_fit_pinned(f, vars, vs, KILN_SYM_MAX_VARS);
    const int32_t n_vars = f->t->n_vars;
    int32_t best = broken, best_v[2] = {-1, -1};
    int64_t best_d = distance, best_x[2] = {0, 0};
    for (int pairs = 0; pairs < 2 && best_v[0] < 0 && f->budget > 0; ++pairs)
      for (int a = 0; a < nv && f->budget > 0; ++a) {
        const int32_t v = vs[a];
        const int64_t was = vars[v];
        const int n1 = kiln_sym_fit_candidates(f, vars, v, m, n_m, x1);
        for (int i = 0; i < n1 && f->budget > 0; ++i) {
          vars[v] = x1[i];
          for (int32_t b = pairs ? 0 : n_vars; b <= n_vars && f->budget > 0; ++b) {
            /* b == n_vars: v's move alone */
            const int32_t w = b < n_vars ? b : -1;
            if (w == v) continue;
            const int64_t had = w >= 0 ? vars[w] : 0;
            const int n2 = w >= 0 ? kiln_sym_fit_candidates(f, vars, w, m, n_m, x2) : 1;
            for (int j = 0; j < n2; ++j) {
              if (w >= 0) vars[w] = x2[j];
              const int32_t nb = kiln_sym_fit_broken(f, vars);
              if (nb < 0 && f->budget <= 0) break;
              if (nb >= 0 && (nb < best || (nb == best && f->distance < best_d)))
                best = nb, best_d = f->distance, best_v[0] = v, best_x[0] = x1[i], best_v[1] = w,
                best_x[1] = w >= 0 ? x2[j] : 0;
            }
            if (w >= 0) vars[w] = had;
          }
        }
        vars[v] = was;
      }
    if (best_v[0] < 0) break;
    vars[best_v[0]] = best_x[0];
    if (best_v[1] >= 0) vars[best_v[1]] = best_x[1];
    broken = best;
    distance = best_d;
  }
  return broken;
}

/* Guards that pin three symbols to small sizes (a view of an (a, b, c)
 * input to (3, 2, 80), a bmm then fixing its middle dim: a*b*c == 480,
 * with a % 3 != 0 and a*b % 3 != 0 from the example; fuzz seed 20089
 * graph 1226): the scan's search over three, KILN_SYM_FIT_SCAN_3 sizes
 * each from the bottom of their ranges, apart from every other value.
 * Runs after the multiples, so probes the earlier stages fit stay as they
 * were. 1 when found (vars hold it). */
static int kiln_sym_fit_scan3(kiln_sym_fit_t* f, int64_t* vars) {
  int32_t vs[3];
  if (kiln_sym_fit_pinned(f, vars, vs, 3) != 3) return 0;
  const kiln_sym_var_t* r[3] = {&f->t->vars[vs[0]], &f->t->vars[vs[1]], &f->t->vars[vs[2]]};
  const int64_t was[3] = {vars[vs[0]], vars[vs[1]], vars[vs[2]]};
  for (int64_t i = 0; i < KILN_SYM_FIT_SCAN_3 && r[0]->lo + i <= r[0]->hi; ++i)
    for (int64_t j = 0; j < KILN_SYM_FIT_SCAN_3 && r[1]->lo + j <= r[1]->hi; ++j)
      for (int64_t k = 0; k < KILN_SYM_FIT_SCAN_3 && r[2]->lo + k <= r[2]->hi; ++k) {
        vars[vs[0]] = r[0]->lo + i, vars[vs[1]] = r[1]->lo + j, vars[vs[2]] = r[2]->lo + k;
        int ok = 1;
        for (int q = 0; q < 3 && ok; ++q) ok = kiln_sym_fit_allowed(f, vars, vs[q], vars[vs[q]], 1, -1);
        if (!ok) continue;
        const int32_t broken = kiln_sym_fit_broken(f, vars);
        if (broken == 0) return 1;
        if (broken < 0 && f->budget <= 0) goto out;
      }
out:
  for (int q = 0; q < 3; ++q) vars[vs[q]] = was[q];
  return 0;
}

/* Marks in need the expressions guard g compares. */
static void kiln_sym_fit_need_guard(const kiln_sym_guard_t* g, unsigned char* need) {
  if (kiln_dim_is_sym(g->a)) need[kiln_dim_sym_id(g->a)] = 1;
  if (kiln_dim_is_sym(g->b)) need[kiln_dim_sym_id(g->b)] = 1;
}

/* Marks in need the expressions the marked ones read, in turn (an
 * expression reads only ones made before it: one pass, last to first). */
static void kiln_sym_fit_need_close(const kiln_sym_table_t* t, unsigned char* need) {
  for (int32_t e = t->n_exprs - 1; e >= 0; --e) {
    const kiln_sym_expr_t* x = &t->exprs[e];
    if (!need[e] || x->kind == KILN_SYM_VAR) continue;
    if (kiln_dim_is_sym(x->a)) need[kiln_dim_sym_id(x->a)] = 1;
    if (kiln_dim_is_sym(x->b)) need[kiln_dim_sym_id(x->b)] = 1;
  }
}

/* The symbols guard g reads, as a bit set over the first 64 (all a table
 * holds, KILN_SYM_MAX_VARS); reads: scratch of n_exprs + 1 bytes. */
static uint64_t kiln_sym_fit_guard_vars(kiln_sym_fit_t* f, const kiln_sym_guard_t* g, unsigned char* reads) {
  const kiln_sym_table_t* t = f->t;
  uint64_t set = 0;
  memset(reads, 0, (size_t)t->n_exprs + 1);
  kiln_sym_fit_need_guard(g, reads);
  kiln_sym_fit_need_close(t, reads);
  f->budget -= t->n_exprs;
  for (int32_t e = 0; e < t->n_exprs; ++e)
    if (reads[e] && t->exprs[e].kind == KILN_SYM_VAR && t->exprs[e].a >= 0 && t->exprs[e].a < 64)
      set |= (uint64_t)1 << t->exprs[e].a;
  return set;
}

/* The expressions the guards reading only symbols of block read, into
 * need (n_exprs + 1 bytes). */
static void kiln_sym_fit_block_need(kiln_sym_fit_t* f, const uint64_t* sets, uint64_t block,
                                    unsigned char* need) {
  const kiln_sym_table_t* t = f->t;
  memset(need, 0, (size_t)t->n_exprs + 1);
  for (int32_t g = 0; g < t->n_guards; ++g)
    if (sets[g] && !(sets[g] & ~block)) kiln_sym_fit_need_guard(&t->guards[g], need);
  kiln_sym_fit_need_close(t, need);
  f->budget -= t->n_exprs;
}

/* Whether every guard reading only symbols of block holds at vars, those
 * guards' expressions alone evaluated (need: kiln_sym_fit_block_need): an
 * expression of a symbol outside the block may be invalid there (a modulo
 * by a size the probes made negative), which is no concern of the block's.
 * 0 where one of theirs is invalid or the budget is spent. */
static int kiln_sym_fit_block_holds(kiln_sym_fit_t* f, const int64_t* vars, const uint64_t* sets,
                                    uint64_t block, const unsigned char* need) {
  const kiln_sym_table_t* t = f->t;
  if (f->budget <= 0) return 0;
  f->budget -= f->n_need + t->n_guards + 1;
  kiln_status_t s = kiln_sym_eval_some(t, vars, need, f->values);
  if (s) {
    kiln_status_free(s);
    return 0;
  }
  for (int32_t g = 0; g < t->n_guards; ++g)
    if (sets[g] && (sets[g] & ~block) == 0 &&
        !kiln_sym_rel_holds((kiln_sym_rel_t)t->guards[g].rel, kiln_sym_value(f->values, t->guards[g].a),
                            kiln_sym_value(f->values, t->guards[g].b)))
      return 0;
  return 1;
}

/* Whether the block's guards pin its n symbols vs at vars: every binding
 * next to it (each symbol moved by -1, 0 or +1, in range, not all 0)
 * breaks one. P == Q does not pin (2, 2): (3, 3) holds too. */
static int kiln_sym_fit_block_pinned(kiln_sym_fit_t* f, int64_t* vars, const uint64_t* sets,
                                     uint64_t block, const unsigned char* need, const int32_t* vs, int n) {
  int64_t was[3];
  int pinned = 1, count = 1;
  for (int q = 0; q < n; ++q) was[q] = vars[vs[q]], count *= 3;
  for (int k = 0; k < count && pinned; ++k) {
    int in_range = 1, moved = 0;
    for (int q = 0, c = k; q < n; ++q, c /= 3) {
      const int64_t x = was[q] + (c % 3) - 1;
      moved |= x != was[q];
      in_range &= x >= f->t->vars[vs[q]].lo && x <= f->t->vars[vs[q]].hi;
      vars[vs[q]] = x;
    }
    if (moved && in_range && kiln_sym_fit_block_holds(f, vars, sets, block, need)) pinned = 0;
  }
  for (int q = 0; q < n; ++q) vars[vs[q]] = was[q];
  return pinned;
}

/* kiln_sym_fit_allowed (apart), or at the second probe, a value another
 * symbol has there where the two differ at the first probe: the pair of
 * probes still tells them apart (a kernel height in {2, 3, 4} beside a
 * pinned (2, 3): 4 at the first probe, 3 at the second). */
static int kiln_sym_fit_allowed_late(const kiln_sym_fit_t* f, const int64_t* vars, int32_t v, int64_t x) {
  const kiln_sym_table_t* t = f->t;
  if (kiln_sym_fit_allowed(f, vars, v, x, 1, -1)) return 1;
  const kiln_sym_var_t* s = &t->vars[v];
  if (f->p != 1 || x < s->lo || x > s->hi || (x < 2 && s->hi >= 2) || x == kiln_sym_probe(t, s->dim, 0))
    return 0;
  for (int32_t w = 0; w < t->n_vars; ++w)
    if (w != v && vars[w] == x && kiln_sym_probe(t, t->vars[w].dim, 0) == kiln_sym_probe(t, s->dim, 0)) return 0;
  return 1;
}

/* The scan of one block (kiln_sym_fit_blocks): the n symbols vs from the
 * bottom of their ranges, the first fastest, until every guard of the
 * block holds with each symbol apart from every other size
 * (kiln_sym_fit_allowed_late) or the block pinned by its guards. 1 and
 * vars set where found (*pinned: the block is pinned), else 0 and vars as
 * they were. */
static int kiln_sym_fit_block_scan(kiln_sym_fit_t* f, int64_t* vars, const uint64_t* sets, uint64_t block,
                                   const unsigned char* need, const int32_t* vs, int n, int* pinned) {
  const kiln_sym_table_t* t = f->t;
  const int64_t reach = n == 1 ? KILN_SYM_FIT_SCAN_1 : n == 2 ? KILN_SYM_FIT_SCAN_2 : KILN_SYM_FIT_SCAN_3;
  const int64_t was[3] = {vars[vs[0]], n > 1 ? vars[vs[1]] : 0, n > 2 ? vars[vs[2]] : 0};
  int64_t i[3] = {0, 0, 0};
  for (;;) {
    int ok = 1;
    for (int q = 0; q < n; ++q) {
      vars[vs[q]] = t->vars[vs[q]].lo + i[q];
      ok &= vars[vs[q]] <= t->vars[vs[q]].hi && !(vars[vs[q]] < 2 && t->vars[vs[q]].hi >= 2);
    }
    /* Each symbol apart from every other value, or the block pinned by
     * its guards (its sizes are numbers then), sharing them. */
    if (ok && kiln_sym_fit_block_holds(f, vars, sets, block, need)) {
      for (int q = 0; q < n && ok; ++q) ok = kiln_sym_fit_allowed_late(f, vars, vs[q], vars[vs[q]]);
      if (ok || (*pinned = kiln_sym_fit_block_pinned(f, vars, sets, block, need, vs, n))) return 1;
    }
    if (f->budget <= 0) break;
    int q = 0;
    while (q < n && (++i[q] >= reach || t->vars[vs[q]].lo + i[q] > t->vars[vs[q]].hi)) i[q++] = 0;
    if (q == n) break;
  }
  for (int q = 0; q < n; ++q) vars[vs[q]] = was[q];
  return 0;
}

/* Guards broken in groups over many symbols, each group over a few (fuzz
 * seed 20090 graph 4482: a view pins s4*s40 == 6 with s4 % 3 != 0, a
 * convolution's kernel width s74 must give (5 - s74)//2 + 1 == 2, and its
 * height s71 is bounded by s4*s40: four symbols read by broken guards,
 * beyond the scans of two and three). Block by block: the guard that
 * does not hold reading the fewest symbols (at most three; symbols an
 * earlier block pinned stay), its symbols scanned
 * (kiln_sym_fit_block_scan); then the next block. Runs last, so probes
 * the other stages fit stay as they were. settle (a second pass, where
 * the first fails, so probes the first fit stay too): a block's symbols
 * an earlier block fitted keep their sizes where the others alone can
 * make it hold (the full graph 4482: s22*s35 == 1056 fitted, then the
 * kernel height s8 <= (s22*s35)//352 + 4, which a scan of all three from
 * the bottom never reaches), and a guard is a block by the symbols no
 * block fitted yet (seed 20091 graph 394: s74 == (s22*s23*s35)//12, one
 * symbol once the product is). The guards still broken. */
static int32_t kiln_sym_fit_blocks(kiln_sym_fit_t* f, int64_t* vars, int settle) {
  const kiln_sym_table_t* t = f->t;
  unsigned char* reads = malloc((size_t)t->n_exprs + 1);
  unsigned char* need = malloc((size_t)t->n_exprs + 1);
  uint64_t* sets = calloc((size_t)t->n_guards + 1, sizeof(uint64_t)); /* 0: not read (budget spent) */
  int32_t broken = kiln_sym_fit_broken(f, vars);
  if (!reads || !need || !sets || broken == 0) goto out;
  for (int32_t i = 0; i < t->n_guards && f->budget > 0; ++i)
    sets[i] = kiln_sym_fit_guard_vars(f, &t->guards[i], reads);
  uint64_t tried = 0; /* symbols of the blocks scanned without success (a set within is not tried again) */
  uint64_t fixed = 0; /* symbols a block's guards pinned */
  uint64_t fitted = 0; /* symbols of the blocks found (settle) */
  for (int round = 0; round < KILN_SYM_FIT_ROUNDS && broken != 0 && f->budget > 0; ++round) {
    /* The smallest symbol set of a guard that does not hold, not tried
     * yet (each judged on its own expressions: the whole table may be
     * invalid at vars). */
    uint64_t best = 0;
    int best_n = 4;
    for (int32_t i = 0; i < t->n_guards && f->budget > 0; ++i) {
      /* (Settling, a guard counts the symbols no block fitted yet: s74 ==
       * (a*b*c)//12 is a block of one once a*b*c == 384 is fitted.) */
      const int n = __builtin_popcountll(settle ? sets[i] & ~(fitted | fixed) : sets[i]);
      if (!n || n >= best_n || (tried & sets[i]) == sets[i]) continue;
      kiln_sym_fit_block_need(f, sets, sets[i], need);
      if (!kiln_sym_fit_block_holds(f, vars, sets, sets[i], need)) best = sets[i], best_n = n;
    }
    if (!best) break;
    kiln_sym_fit_block_need(f, sets, best, need);
    /* Symbols an earlier block pinned keep their sizes (numbers now);
     * settling, those it fitted first keep theirs too. */
    int found = 0, pinned = 0;
    for (int pass = settle ? 0 : 1; pass < 2 && !found; ++pass) {
      const uint64_t scan = best & ~fixed & (pass ? ~(uint64_t)0 : ~fitted);
      if (!scan || (!pass && scan == (best & ~fixed)) || __builtin_popcountll(scan) > 3) continue;
      int32_t vs[3] = {0, 0, 0};
      int n = 0;
      for (int32_t v = 0; v < t->n_vars && v < 64; ++v)
        if (scan >> v & 1) vs[n++] = v;
      found = kiln_sym_fit_block_scan(f, vars, sets, best, need, vs, n, &pinned);
    }
    if (!found) {
      tried |= best;
      continue;
    }
    if (pinned) fixed |= best & ~fixed;
    fitted |= best;
    broken = kiln_sym_fit_broken(f, vars);
  }
  if (broken < 0) broken = 1;
out:
  free(reads);
  free(need);
  free(sets);
  return broken;
}

/* kiln_sym_fit_blocks, then where it fails, from the same sizes, its
 * settling pass. */
static int32_t kiln_sym_fit_blocks_settled(kiln_sym_fit_t* f, int64_t* vars) {
  int64_t was[KILN_SYM_MAX_VARS];
  memcpy(was, vars, sizeof(int64_t) * (size_t)f->t->n_vars);
  if (kiln_sym_fit_blocks(f, vars, 0) == 0) return 0;
  memcpy(vars, was, sizeof(int64_t) * (size_t)f->t->n_vars);
  return kiln_sym_fit_blocks(f, vars, 1);
}

void kiln_sym_probes_fit(kiln_sym_table_t* t) {
  if (!t || !t->n_guards || !t->n_vars) return;
  unsigned char* need = calloc((size_t)t->n_exprs + 1, 1);
  int64_t* values = malloc(sizeof(int64_t) * ((size_t)t->n_exprs + 1));
  kiln_sym_fit_t f = {t, need, 0, values, KILN_SYM_FIT_BUDGET, 0, 0};
  if (!need || !values) goto done; /* the probes stay: a refusal at worst, never a wrong size */
  for (int32_t i = 0; i < t->n_guards; ++i) kiln_sym_fit_need_guard(&t->guards[i], need);
  kiln_sym_fit_need_close(t, need);
  for (int32_t e = 0; e < t->n_exprs; ++e) f.n_need += need[e];
  for (int p = 0; p < 2; ++p) {
    int64_t vars[KILN_SYM_MAX_VARS];
    f.p = p;
    for (int32_t v = 0; v < t->n_vars; ++v) vars[v] = kiln_sym_probe(t, t->vars[v].dim, p);
    if (kiln_sym_fit_steps(&f, vars) != 0 && !kiln_sym_fit_scan(&f, vars) &&
        kiln_sym_fit_descend(&f, vars) != 0 && kiln_sym_fit_multiples(&f, vars) != 0 &&
        !kiln_sym_fit_scan3(&f, vars) && kiln_sym_fit_blocks_settled(&f, vars) != 0)
      continue;
    /* Every expression at the new probe; the nodes' were built at it (the
     * front end) or will be checked against it (the reader). */
    kiln_status_t s = kiln_sym_eval_some(t, vars, NULL, values);
    if (s) {
      kiln_status_free(s);
      continue;
    }
    for (int32_t e = 0; e < t->n_exprs; ++e) t->exprs[e].probe[p] = values[e];
  }
done:
  free(need);
  free(values);
}
