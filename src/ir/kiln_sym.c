/* The expression table of symbolic sizes: canonical constructors, probes,
 * evaluation (see kiln_sym.h). */
#include "ir/kiln_sym.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)
#define KILN_SYM_MAX_TERMS 32

kiln_status_t kiln_sym_table_create(kiln_sym_table_t** out) {
  *out = calloc(1, sizeof(kiln_sym_table_t));
  if (!*out) return kiln_status_make(KILN_OUT_OF_MEMORY, "symbol table");
  (*out)->refs = 1;
  return kiln_ok();
}

kiln_sym_table_t* kiln_sym_table_retain(kiln_sym_table_t* t) {
  if (t) t->refs++;
  return t;
}

void kiln_sym_table_release(kiln_sym_table_t* t) {
  if (!t || --t->refs > 0) return;
  for (int32_t i = 0; i < t->n_vars; ++i) free(t->vars[i].name);
  free(t->exprs);
  free(t->slots);
  free(t->guards);
  free(t);
}

int kiln_sym_dim_valid(const kiln_sym_table_t* t, int64_t d) {
  if (!kiln_dim_is_sym(d)) return d > KILN_SYM_BASE;
  return t && kiln_dim_sym_id(d) < t->n_exprs;
}

int64_t kiln_sym_probe(const kiln_sym_table_t* t, int64_t d, int p) {
  return kiln_dim_is_sym(d) ? t->exprs[kiln_dim_sym_id(d)].probe[p] : d;
}

int kiln_sym_probed(const kiln_sym_table_t* t, int64_t d) {
  return kiln_sym_probe(t, d, 0) != KILN_SYM_NO_PROBE && kiln_sym_probe(t, d, 1) != KILN_SYM_NO_PROBE;
}

/* Python's floor division and modulo (b > 0 is checked by callers). */
static int64_t floordiv_i64(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static int64_t mod_i64(int64_t a, int64_t b) { return a - floordiv_i64(a, b) * b; }

static kiln_status_t apply(kiln_sym_kind_t kind, int64_t a, int64_t b, int64_t* out) {
  switch (kind) {
    case KILN_SYM_ADD:
      if (__builtin_add_overflow(a, b, out)) FAIL("symbolic size overflows: %lld + %lld",
                                                  (long long)a, (long long)b);
      return kiln_ok();
    case KILN_SYM_MUL:
      if (__builtin_mul_overflow(a, b, out)) FAIL("symbolic size overflows: %lld * %lld",
                                                  (long long)a, (long long)b);
      return kiln_ok();
    case KILN_SYM_FLOORDIV:
    case KILN_SYM_MOD:
      if (b <= 0) FAIL("symbolic size divides by %lld", (long long)b);
      *out = kind == KILN_SYM_FLOORDIV ? floordiv_i64(a, b) : mod_i64(a, b);
      return kiln_ok();
    case KILN_SYM_MAX: *out = a > b ? a : b; return kiln_ok();
    case KILN_SYM_MIN: *out = a < b ? a : b; return kiln_ok();
    default: return kiln_status_make(KILN_INTERNAL, "symbolic op %d", (int)kind);
  }
}

static uint32_t slot_hash(int32_t kind, int64_t a, int64_t b) {
  uint64_t h = (uint64_t)kind * 0x9E3779B97F4A7C15ull;
  h ^= (uint64_t)a + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
  h ^= (uint64_t)b + 0x8CB92BA72F3D8DD7ull + (h << 6) + (h >> 2);
  return (uint32_t)(h ^ (h >> 29));
}

static kiln_status_t rehash(kiln_sym_table_t* t, int32_t n_slots) {
  int32_t* slots = malloc(sizeof(int32_t) * (size_t)n_slots);
  if (!slots) return kiln_status_make(KILN_OUT_OF_MEMORY, "symbol table");
  for (int32_t i = 0; i < n_slots; ++i) slots[i] = -1;
  for (int32_t e = 0; e < t->n_exprs; ++e) {
    const kiln_sym_expr_t* x = &t->exprs[e];
    uint32_t h = slot_hash(x->kind, x->a, x->b) & (uint32_t)(n_slots - 1);
    while (slots[h] >= 0) h = (h + 1) & (uint32_t)(n_slots - 1);
    slots[h] = e;
  }
  free(t->slots);
  t->slots = slots;
  t->n_slots = n_slots;
  return kiln_ok();
}

/* The expression (kind, a, b) as it is: found, or appended with its probes. */
static kiln_status_t raw(kiln_sym_table_t* t, kiln_sym_kind_t kind, int64_t a, int64_t b,
                         int64_t* out) {
  if (t->n_slots) {
    uint32_t h = slot_hash(kind, a, b) & (uint32_t)(t->n_slots - 1);
    for (; t->slots[h] >= 0; h = (h + 1) & (uint32_t)(t->n_slots - 1)) {
      const kiln_sym_expr_t* x = &t->exprs[t->slots[h]];
      if (x->kind == (int32_t)kind && x->a == a && x->b == b) {
        *out = kiln_dim_of_sym(t->slots[h]);
        return kiln_ok();
      }
    }
  }
  if (t->n_exprs >= KILN_SYM_MAX_EXPRS) FAIL("more than %d symbolic expressions", KILN_SYM_MAX_EXPRS);
  kiln_sym_expr_t x = {(int32_t)kind, a, b, {0, 0}, KILN_SYM_NO_EXAMPLE};
  if (kind != KILN_SYM_VAR) {
    for (int p = 0; p < 2; ++p) {
      /* Invalid at a probe: a guard's, until the probes are fitted
       * (KILN_SYM_NO_PROBE); a node reading it is refused. */
      const int64_t pa = kiln_sym_probe(t, a, p), pb = kiln_sym_probe(t, b, p);
      x.probe[p] = KILN_SYM_NO_PROBE;
      if (pa == KILN_SYM_NO_PROBE || pb == KILN_SYM_NO_PROBE) continue;
      kiln_status_t s = apply(kind, pa, pb, &x.probe[p]);
      if (s) {
        kiln_status_free(s);
        x.probe[p] = KILN_SYM_NO_PROBE;
      }
    }
    const int64_t ea = kiln_sym_example(t, a), eb = kiln_sym_example(t, b);
    if (ea != KILN_SYM_NO_EXAMPLE && eb != KILN_SYM_NO_EXAMPLE) {
      kiln_status_t s = apply(kind, ea, eb, &x.example);
      if (s) { /* invalid at the example: unchecked there, as if unknown */
        kiln_status_free(s);
        x.example = KILN_SYM_NO_EXAMPLE;
      }
    }
  }
  if (t->n_exprs == t->cap_exprs) {
    int32_t cap = t->cap_exprs ? t->cap_exprs * 2 : 64;
    kiln_sym_expr_t* e = realloc(t->exprs, sizeof(*e) * (size_t)cap);
    if (!e) return kiln_status_make(KILN_OUT_OF_MEMORY, "symbol table");
    t->exprs = e;
    t->cap_exprs = cap;
  }
  if (kind == KILN_SYM_VAR) x.probe[0] = x.probe[1] = 0; /* set by kiln_sym_var */
  t->exprs[t->n_exprs++] = x;
  *out = kiln_dim_of_sym(t->n_exprs - 1);
  if (t->n_exprs * 2 > t->n_slots) return rehash(t, t->n_slots ? t->n_slots * 2 : 128);
  uint32_t h = slot_hash(kind, a, b) & (uint32_t)(t->n_slots - 1);
  while (t->slots[h] >= 0) h = (h + 1) & (uint32_t)(t->n_slots - 1);
  t->slots[h] = t->n_exprs - 1;
  *out = kiln_dim_of_sym(t->n_exprs - 1);
  return kiln_ok();
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

kiln_status_t kiln_sym_var(kiln_sym_table_t* t, const char* name, int64_t lo, int64_t hi,
                           int64_t* out_dim) {
  if (t->n_vars >= KILN_SYM_MAX_VARS) FAIL("more than %d symbols", KILN_SYM_MAX_VARS);
  if (lo < 0 || hi < 1 || lo > hi || hi > KILN_SYM_RANGE_MAX)
    FAIL("symbol %s: range [%lld, %lld] is not inside [0, 2^40]", name ? name : "?",
         (long long)lo, (long long)hi);
  int32_t i = t->n_vars;
  kiln_sym_var_t* v = &t->vars[i];
  char buf[24];
  if (!name) snprintf(buf, sizeof buf, "s%d", i);
  const char* nm = name ? name : buf;
  size_t len = strlen(nm) + 1;
  if (!(v->name = malloc(len))) return kiln_status_make(KILN_OUT_OF_MEMORY, "symbol name");
  memcpy(v->name, nm, len);
  v->lo = lo;
  v->hi = hi;
  kiln_status_t s = raw(t, KILN_SYM_VAR, i, 0, &v->dim);
  if (s) {
    free(v->name);
    v->name = NULL;
    return s;
  }
  /* Probes: moderate multiples of 8 (a reshape into heads or an even split
   * holds at them), distinct per symbol so that a size maps back to the one
   * symbol it came from, the second 8 above the first. Where the range
   * clamps both, they stay up to 8 apart, in the same order (a sum of two
   * clamped symbols must not cancel), and off size 1 (it broadcasts):
   * adjacent probes agree on most floor divisions ((-s)//2 + 22 is 2 at
   * both 40 and 39, fuzzer finding 14), and a size the probes agree on is
   * taken for a number. */
  kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(v->dim)];
  x->probe[0] = clamp(64 + 16 * (int64_t)i, lo, hi);
  x->probe[1] = clamp(72 + 16 * (int64_t)i, lo, hi);
  if (x->probe[0] == x->probe[1] && lo < hi) {
    const int64_t floor = lo < 2 ? 2 : lo;
    if (x->probe[1] == hi) x->probe[0] = clamp(hi - 8, floor, hi);
    else x->probe[1] = clamp(lo + 8, lo, hi);
    if (x->probe[0] == x->probe[1]) x->probe[0] = lo;
  }
  t->n_vars++;
  *out_dim = v->dim;
  return kiln_ok();
}

kiln_status_t kiln_sym_set_example(kiln_sym_table_t* t, int64_t var, int64_t value) {
  if (!kiln_dim_is_sym(var) || kiln_dim_sym_id(var) >= t->n_exprs) FAIL("not a symbol");
  kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(var)];
  if (x->kind != KILN_SYM_VAR) FAIL("not a symbol");
  if (kiln_dim_sym_id(var) != t->n_exprs - 1)
    FAIL("symbol %s: an example value after expressions read it", t->vars[x->a].name);
  const kiln_sym_var_t* v = &t->vars[x->a];
  if (value < v->lo || value > v->hi)
    FAIL("symbol %s: example value %lld is outside its range [%lld, %lld]", v->name,
         (long long)value, (long long)v->lo, (long long)v->hi);
  x->example = value;
  return kiln_ok();
}

int64_t kiln_sym_example(const kiln_sym_table_t* t, int64_t d) {
  return kiln_dim_is_sym(d) ? t->exprs[kiln_dim_sym_id(d)].example : d;
}

static const kiln_sym_expr_t* expr_of(const kiln_sym_table_t* t, int64_t d) {
  return kiln_dim_is_sym(d) ? &t->exprs[kiln_dim_sym_id(d)] : NULL;
}

/* A sum as a constant plus terms coef * mono (mono: not a number, not a sum,
 * not a product with a number). */
typedef struct {
  int64_t c;
  int32_t n;
  int64_t mono[KILN_SYM_MAX_TERMS], coef[KILN_SYM_MAX_TERMS];
} kiln_sum_t;

static void split_coef(const kiln_sym_table_t* t, int64_t d, int64_t* coef, int64_t* mono) {
  const kiln_sym_expr_t* x = expr_of(t, d);
  if (x && x->kind == KILN_SYM_MUL && !kiln_dim_is_sym(x->b)) {
    *coef = x->b;
    *mono = x->a;
  } else {
    *coef = 1;
    *mono = d;
  }
}

static kiln_status_t split_sum(const kiln_sym_table_t* t, int64_t d, int64_t scale, kiln_sum_t* s) {
  const kiln_sym_expr_t* x = expr_of(t, d);
  int64_t v;
  if (!x) {
    KILN_RETURN_IF_ERROR(apply(KILN_SYM_MUL, d, scale, &v));
    return apply(KILN_SYM_ADD, s->c, v, &s->c);
  }
  if (x->kind == KILN_SYM_ADD) {
    KILN_RETURN_IF_ERROR(split_sum(t, x->a, scale, s));
    return split_sum(t, x->b, scale, s);
  }
  int64_t coef, mono;
  split_coef(t, d, &coef, &mono);
  KILN_RETURN_IF_ERROR(apply(KILN_SYM_MUL, coef, scale, &coef));
  for (int32_t i = 0; i < s->n; ++i)
    if (s->mono[i] == mono) return apply(KILN_SYM_ADD, s->coef[i], coef, &s->coef[i]);
  if (s->n >= KILN_SYM_MAX_TERMS) FAIL("a symbolic sum of more than %d terms", KILN_SYM_MAX_TERMS);
  s->mono[s->n] = mono;
  s->coef[s->n++] = coef;
  return kiln_ok();
}

static void sort_i64(int64_t* k, int64_t* v, int32_t n) {
  for (int32_t i = 1; i < n; ++i)
    for (int32_t j = i; j > 0 && k[j - 1] > k[j]; --j) {
      int64_t tk = k[j], tv = v ? v[j] : 0;
      k[j] = k[j - 1];
      k[j - 1] = tk;
      if (v) {
        v[j] = v[j - 1];
        v[j - 1] = tv;
      }
    }
}

static kiln_status_t build_sum(kiln_sym_table_t* t, kiln_sum_t* s, int64_t* out) {
  /* Drop cancelled terms, order by mono, then a left-deep chain with the
   * constant last. */
  int32_t k = 0;
  for (int32_t i = 0; i < s->n; ++i)
    if (s->coef[i]) {
      s->mono[k] = s->mono[i];
      s->coef[k++] = s->coef[i];
    }
  s->n = k;
  sort_i64(s->mono, s->coef, s->n);
  int64_t acc = 0;
  int have = 0;
  for (int32_t i = 0; i < s->n; ++i) {
    int64_t term = s->mono[i];
    if (s->coef[i] != 1) KILN_RETURN_IF_ERROR(raw(t, KILN_SYM_MUL, term, s->coef[i], &term));
    if (have) KILN_RETURN_IF_ERROR(raw(t, KILN_SYM_ADD, acc, term, &acc));
    else acc = term;
    have = 1;
  }
  if (!have) acc = s->c;
  else if (s->c) KILN_RETURN_IF_ERROR(raw(t, KILN_SYM_ADD, acc, s->c, &acc));
  *out = acc;
  return kiln_ok();
}

kiln_status_t kiln_dim_add(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) return apply(KILN_SYM_ADD, a, b, out);
  kiln_sum_t s = {0};
  KILN_RETURN_IF_ERROR(split_sum(t, a, 1, &s));
  KILN_RETURN_IF_ERROR(split_sum(t, b, 1, &s));
  return build_sum(t, &s, out);
}

kiln_status_t kiln_dim_sub(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) {
    if (__builtin_sub_overflow(a, b, out)) FAIL("symbolic size overflows");
    return kiln_ok();
  }
  kiln_sum_t s = {0};
  KILN_RETURN_IF_ERROR(split_sum(t, a, 1, &s));
  KILN_RETURN_IF_ERROR(split_sum(t, b, -1, &s));
  return build_sum(t, &s, out);
}

/* A product's non-number factors (sorted) and its number. */
static kiln_status_t split_prod(const kiln_sym_table_t* t, int64_t d, int64_t* k, int64_t* f,
                                int32_t* n) {
  const kiln_sym_expr_t* x = expr_of(t, d);
  if (!x) return apply(KILN_SYM_MUL, *k, d, k);
  if (x->kind == KILN_SYM_MUL) {
    KILN_RETURN_IF_ERROR(split_prod(t, x->a, k, f, n));
    return split_prod(t, x->b, k, f, n);
  }
  if (*n >= KILN_SYM_MAX_TERMS) FAIL("a symbolic product of more than %d factors", KILN_SYM_MAX_TERMS);
  f[(*n)++] = d;
  return kiln_ok();
}

kiln_status_t kiln_dim_mul(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) return apply(KILN_SYM_MUL, a, b, out);
  int64_t k = 1, f[KILN_SYM_MAX_TERMS];
  int32_t n = 0;
  KILN_RETURN_IF_ERROR(split_prod(t, a, &k, f, &n));
  KILN_RETURN_IF_ERROR(split_prod(t, b, &k, f, &n));
  if (k == 0 || n == 0) {
    *out = k;
    return kiln_ok();
  }
  const kiln_sym_expr_t* only = n == 1 ? expr_of(t, f[0]) : NULL;
  if (only && only->kind == KILN_SYM_ADD) {
    /* k * (x + y + c) is kept as k*x + k*y + k*c: one form for affine sizes. */
    kiln_sum_t s = {0};
    KILN_RETURN_IF_ERROR(split_sum(t, f[0], k, &s));
    return build_sum(t, &s, out);
  }
  sort_i64(f, NULL, n);
  int64_t acc = f[0];
  for (int32_t i = 1; i < n; ++i) KILN_RETURN_IF_ERROR(raw(t, KILN_SYM_MUL, acc, f[i], &acc));
  if (k != 1) KILN_RETURN_IF_ERROR(raw(t, KILN_SYM_MUL, acc, k, &acc));
  *out = acc;
  return kiln_ok();
}

/* 1 when every coefficient of a's sum form is divisible by c (c > 0). */
static int divisible_terms(const kiln_sum_t* s, int64_t c) {
  for (int32_t i = 0; i < s->n; ++i)
    if (s->coef[i] % c) return 0;
  return 1;
}

kiln_status_t kiln_dim_floordiv(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) return apply(KILN_SYM_FLOORDIV, a, b, out);
  if (!kiln_dim_is_sym(b)) {
    if (b <= 0) FAIL("symbolic size divided by %lld", (long long)b);
    if (b == 1) {
      *out = a;
      return kiln_ok();
    }
    kiln_sum_t s = {0};
    KILN_RETURN_IF_ERROR(split_sum(t, a, 1, &s));
    if (divisible_terms(&s, b)) {
      /* (b*x + c) // b == x + c // b exactly. */
      for (int32_t i = 0; i < s.n; ++i) s.coef[i] /= b;
      s.c = floordiv_i64(s.c, b);
      return build_sum(t, &s, out);
    }
    /* (x // p + c) // b == (x + c*p) // (p*b) for integers x, c and p, b > 0
     * (x // p + c is (x + c*p) // p, and floor(floor(y / p) / b) is
     * floor(y / (p*b))): one form for a size halved twice, as torch writes
     * it ((h - 1)//8 + 1 after three stride-2 windows, not (h - 1)//4//2 + 1),
     * so a symbolic ResNet's branches meet at the same expression. */
    const kiln_sym_expr_t* in = s.n == 1 && s.coef[0] == 1 ? expr_of(t, s.mono[0]) : NULL;
    int64_t cp, pb, num;
    if (in && in->kind == KILN_SYM_FLOORDIV && !kiln_dim_is_sym(in->b) && in->b > 0 &&
        !__builtin_mul_overflow(s.c, in->b, &cp) && !__builtin_mul_overflow(in->b, b, &pb)) {
      KILN_RETURN_IF_ERROR(kiln_dim_add(t, in->a, cp, &num));
      return kiln_dim_floordiv(t, num, pb, out);
    }
  }
  return raw(t, KILN_SYM_FLOORDIV, a, b, out);
}

kiln_status_t kiln_dim_mod(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) return apply(KILN_SYM_MOD, a, b, out);
  if (!kiln_dim_is_sym(b)) {
    if (b <= 0) FAIL("symbolic size modulo %lld", (long long)b);
    kiln_sum_t s = {0};
    KILN_RETURN_IF_ERROR(split_sum(t, a, 1, &s));
    if (divisible_terms(&s, b)) {
      *out = mod_i64(s.c, b);
      return kiln_ok();
    }
  }
  return raw(t, KILN_SYM_MOD, a, b, out);
}

static kiln_status_t minmax(kiln_sym_table_t* t, kiln_sym_kind_t kind, int64_t a, int64_t b,
                            int64_t* out) {
  if (!kiln_dim_is_sym(a) && !kiln_dim_is_sym(b)) return apply(kind, a, b, out);
  if (a == b) {
    *out = a;
    return kiln_ok();
  }
  return a < b ? raw(t, kind, a, b, out) : raw(t, kind, b, a, out);
}

kiln_status_t kiln_dim_max(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  return minmax(t, KILN_SYM_MAX, a, b, out);
}
kiln_status_t kiln_dim_min(kiln_sym_table_t* t, int64_t a, int64_t b, int64_t* out) {
  return minmax(t, KILN_SYM_MIN, a, b, out);
}

kiln_status_t kiln_dim_op(kiln_sym_table_t* t, kiln_sym_kind_t kind, int64_t a, int64_t b,
                          int64_t* out) {
  if (!kiln_sym_dim_valid(t, a) || !kiln_sym_dim_valid(t, b)) FAIL("unknown symbolic operand");
  switch (kind) {
    case KILN_SYM_ADD: return kiln_dim_add(t, a, b, out);
    case KILN_SYM_MUL: return kiln_dim_mul(t, a, b, out);
    case KILN_SYM_FLOORDIV: return kiln_dim_floordiv(t, a, b, out);
    case KILN_SYM_MOD: return kiln_dim_mod(t, a, b, out);
    case KILN_SYM_MAX: return kiln_dim_max(t, a, b, out);
    case KILN_SYM_MIN: return kiln_dim_min(t, a, b, out);
    default: FAIL("unknown symbolic op %d", (int)kind);
  }
}

kiln_status_t kiln_sym_eval_all(const kiln_sym_table_t* t, const int64_t* vars, int64_t* values) {
  return kiln_sym_eval_some(t, vars, NULL, values);
}

kiln_status_t kiln_sym_eval_some(const kiln_sym_table_t* t, const int64_t* vars,
                                 const unsigned char* need, int64_t* values) {
  for (int32_t e = 0; e < t->n_exprs; ++e) {
    const kiln_sym_expr_t* x = &t->exprs[e];
    if (need && !need[e]) continue;
    if (x->kind == KILN_SYM_VAR) {
      values[e] = vars[x->a];
      continue;
    }
    kiln_status_t s = apply((kiln_sym_kind_t)x->kind, kiln_sym_value(values, x->a),
                            kiln_sym_value(values, x->b), &values[e]);
    if (s) {
      char buf[128];
      return kiln_status_annotate(s, "evaluating %s",
                                  kiln_sym_describe(t, kiln_dim_of_sym(e), buf, sizeof buf));
    }
  }
  return kiln_ok();
}

/* Stops at a full buffer or past KILN_SYM_DESCRIBE_DEPTH levels, so that a
 * deep or heavily shared expression (from a hostile file, say) costs no more
 * than the text it prints. */
#define KILN_SYM_DESCRIBE_DEPTH 64
static size_t describe(const kiln_sym_table_t* t, int64_t d, char* buf, size_t size, int paren,
                       int depth) {
  if (size <= 1) return 0;
  if (depth > KILN_SYM_DESCRIBE_DEPTH) {
    int n = snprintf(buf, size, "...");
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
  }
  const kiln_sym_expr_t* x = expr_of(t, d);
  if (!x || !t || kiln_dim_sym_id(d) >= t->n_exprs) {
    int n = snprintf(buf, size, "%lld", (long long)d);
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
  }
  size_t at = 0;
#define PUT(...)                                                               \
  do {                                                                         \
    int n_ = snprintf(buf + at, size - at, __VA_ARGS__);                       \
    at += n_ < 0 ? 0 : (size_t)n_ < size - at ? (size_t)n_ : size - at - 1;    \
  } while (0)
  switch (x->kind) {
    case KILN_SYM_VAR: PUT("%s", t->vars[x->a].name); break;
    case KILN_SYM_ADD:
      if (paren) PUT("(");
      at += describe(t, x->a, buf + at, size - at, 0, depth + 1);
      if (!kiln_dim_is_sym(x->b) && x->b < 0) PUT(" - %lld", -(long long)x->b);
      else {
        PUT(" + ");
        at += describe(t, x->b, buf + at, size - at, 0, depth + 1);
      }
      if (paren) PUT(")");
      break;
    case KILN_SYM_MUL:
    case KILN_SYM_FLOORDIV:
    case KILN_SYM_MOD:
      at += describe(t, x->a, buf + at, size - at, 1, depth + 1);
      PUT("%s", x->kind == KILN_SYM_MUL ? "*" : x->kind == KILN_SYM_FLOORDIV ? "//" : "%");
      at += describe(t, x->b, buf + at, size - at, 1, depth + 1);
      break;
    default:
      PUT("%s(", x->kind == KILN_SYM_MAX ? "max" : "min");
      at += describe(t, x->a, buf + at, size - at, 0, depth + 1);
      PUT(", ");
      at += describe(t, x->b, buf + at, size - at, 0, depth + 1);
      PUT(")");
  }
#undef PUT
  return at;
}

const char* kiln_sym_describe(const kiln_sym_table_t* t, int64_t d, char* buf, size_t size) {
  if (size) buf[0] = 0;
  describe(t, d, buf, size, 0, 0);
  return buf;
}
