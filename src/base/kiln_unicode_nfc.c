/* NFC (UAX #15) of UTF-8 text, as Hugging Face's tokenizers normalizes it
 * (Qwen2's tokenizers and others carry an NFC normalizer): the quick check,
 * then, for each stretch it cannot rule on, the canonical decomposition,
 * the canonical ordering of combining marks and the canonical composition,
 * from Unicode 16.0's tables (kiln_unicode_gen.py). tokenizers' own data
 * is older; the generator asks it which code points it normalizes otherwise
 * (kiln_unicode_nfc_unlike), and text holding one that NFC would touch is
 * refused rather than guessed at. */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_unicode.h"

/* Hangul syllables (The Unicode Standard, 3.12): computed, not tabled. */
#define KILN_HANGUL_S 0xAC00u
#define KILN_HANGUL_L 0x1100u
#define KILN_HANGUL_V 0x1161u
#define KILN_HANGUL_T 0x11A7u
#define KILN_HANGUL_L_COUNT 19u
#define KILN_HANGUL_V_COUNT 21u
#define KILN_HANGUL_T_COUNT 28u
#define KILN_HANGUL_N_COUNT (KILN_HANGUL_V_COUNT * KILN_HANGUL_T_COUNT)
#define KILN_HANGUL_S_COUNT (KILN_HANGUL_L_COUNT * KILN_HANGUL_N_COUNT)

int kiln_unicode_combining_class(uint32_t cp) {
  if (cp < 0x300) return 0; /* below U+0300 every character is a starter */
  int lo = 0, hi = kiln_unicode_combining_count - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < kiln_unicode_combining[mid].first) hi = mid - 1;
    else if (cp > kiln_unicode_combining[mid].last) lo = mid + 1;
    else return kiln_unicode_combining[mid].cls;
  }
  return 0;
}

/* NFC_Quick_Check is No or Maybe. */
static int kiln_nfc_unsure(uint32_t cp) {
  return cp >= 0x300 && (kiln_unicode_in(kiln_unicode_nfc_no, kiln_unicode_nfc_no_count, cp) ||
                         kiln_unicode_in(kiln_unicode_nfc_maybe, kiln_unicode_nfc_maybe_count, cp));
}

int kiln_unicode_is_nfc(const char* s, size_t n, size_t* at) {
  int last = 0;
  for (size_t i = 0; i < n;) {
    size_t len;
    uint32_t cp = kiln_utf8_next(s + i, n - i, &len);
    int cls = kiln_unicode_combining_class(cp);
    if ((cls && last > cls) || kiln_nfc_unsure(cp)) {
      *at = i;
      return 0;
    }
    last = cls;
    i += len;
  }
  return 1;
}

/* A growing array of code points, and one of bytes. */
typedef struct {
  uint32_t* v;
  size_t n, cap;
} kiln_nfc_cps_t;

typedef struct {
  char* v;
  size_t n, cap;
} kiln_nfc_bytes_t;

static int kiln_nfc_grow(void** v, size_t* cap, size_t need, size_t size) {
  if (need <= *cap) return 1;
  size_t cap2 = *cap ? *cap : 64;
  while (cap2 < need) {
    if (cap2 > SIZE_MAX / 2 / size) return 0;
    cap2 *= 2;
  }
  void* grown = realloc(*v, cap2 * size);
  if (!grown) return 0;
  *v = grown;
  *cap = cap2;
  return 1;
}

static int kiln_nfc_push(kiln_nfc_cps_t* c, uint32_t cp) {
  if (!kiln_nfc_grow((void**)&c->v, &c->cap, c->n + 1, sizeof(uint32_t))) return 0;
  c->v[c->n++] = cp;
  return 1;
}

static int kiln_nfc_append(kiln_nfc_bytes_t* b, const char* s, size_t n) {
  if (!kiln_nfc_grow((void**)&b->v, &b->cap, b->n + n + 1, 1)) return 0;
  if (n) memcpy(b->v + b->n, s, n);
  b->n += n;
  return 1;
}

static int kiln_nfc_append_utf8(kiln_nfc_bytes_t* b, uint32_t cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xC0 | cp >> 6);
    u[1] = (char)(0x80 | (cp & 0x3F));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xE0 | cp >> 12);
    u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[2] = (char)(0x80 | (cp & 0x3F));
    n = 3;
  } else {
    u[0] = (char)(0xF0 | cp >> 18);
    u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    u[3] = (char)(0x80 | (cp & 0x3F));
    n = 4;
  }
  return kiln_nfc_append(b, u, n);
}

/* cp's full canonical decomposition (itself if none) onto c. */
static int kiln_nfc_decompose(uint32_t cp, kiln_nfc_cps_t* c) {
  if (cp - KILN_HANGUL_S < KILN_HANGUL_S_COUNT) {
    const uint32_t s = cp - KILN_HANGUL_S, t = s % KILN_HANGUL_T_COUNT;
    return kiln_nfc_push(c, KILN_HANGUL_L + s / KILN_HANGUL_N_COUNT) &&
           kiln_nfc_push(c, KILN_HANGUL_V + s % KILN_HANGUL_N_COUNT / KILN_HANGUL_T_COUNT) &&
           (!t || kiln_nfc_push(c, KILN_HANGUL_T + t));
  }
  int lo = 0, hi = kiln_unicode_decompositions_count - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    const kiln_unicode_decomposition_t* d = &kiln_unicode_decompositions[mid];
    if (cp < d->cp) hi = mid - 1;
    else if (cp > d->cp) lo = mid + 1;
    else {
      for (int k = 0; k < d->n; ++k)
        if (!kiln_nfc_push(c, kiln_unicode_decomposition_parts[d->at + k])) return 0;
      return 1;
    }
  }
  return kiln_nfc_push(c, cp);
}

/* The primary composite of (a, b), or 0. */
static uint32_t kiln_nfc_compose(uint32_t a, uint32_t b) {
  if (a - KILN_HANGUL_L < KILN_HANGUL_L_COUNT && b - KILN_HANGUL_V < KILN_HANGUL_V_COUNT)
    return KILN_HANGUL_S + ((a - KILN_HANGUL_L) * KILN_HANGUL_V_COUNT + (b - KILN_HANGUL_V)) * KILN_HANGUL_T_COUNT;
  if (a - KILN_HANGUL_S < KILN_HANGUL_S_COUNT && (a - KILN_HANGUL_S) % KILN_HANGUL_T_COUNT == 0 &&
      b - KILN_HANGUL_T - 1 < KILN_HANGUL_T_COUNT - 1)
    return a + (b - KILN_HANGUL_T);
  int lo = 0, hi = kiln_unicode_compositions_count - 1;
  while (lo <= hi) {
    const int mid = (lo + hi) / 2;
    const kiln_unicode_composition_t* p = &kiln_unicode_compositions[mid];
    if (a < p->first || (a == p->first && b < p->second)) hi = mid - 1;
    else if (a > p->first || b > p->second) lo = mid + 1;
    else return p->composite;
  }
  return 0;
}

static int kiln_nfc_key_cmp(const void* x, const void* y) {
  const uint64_t a = *(const uint64_t*)x, b = *(const uint64_t*)y;
  return a < b ? -1 : a > b;
}

/* The canonical ordering: each run of marks sorted by class, stably. A
 * run as long as the text (hostile input) costs n log n: its marks packed
 * as (class, position, code point) and sorted whole. keys: n scratch. */
static void kiln_nfc_order(kiln_nfc_cps_t* c, uint64_t* keys) {
  for (size_t i = 0; i < c->n;) {
    if (!kiln_unicode_combining_class(c->v[i])) {
      ++i;
      continue;
    }
    size_t j = i, sorted = 1;
    int last = 0;
    for (; j < c->n; ++j) {
      const int cls = kiln_unicode_combining_class(c->v[j]);
      if (!cls) break;
      sorted &= cls >= last;
      last = cls;
      keys[j - i] = (uint64_t)cls << 56 | (uint64_t)(j - i) << 21 | c->v[j];
    }
    if (!sorted) {
      qsort(keys, j - i, sizeof(uint64_t), kiln_nfc_key_cmp);
      for (size_t k = i; k < j; ++k) c->v[k] = (uint32_t)(keys[k - i] & 0x1FFFFF);
    }
    i = j;
  }
}

/* The canonical composition, in place (UAX #15's: a mark joins the last
 * starter unless a character between them is a starter or of a class at
 * least its own). */
static void kiln_nfc_compose_all(kiln_nfc_cps_t* c) {
  if (!c->n) return;
  size_t starter = 0, kept = 1;
  int last = kiln_unicode_combining_class(c->v[0]) ? 256 : 0;
  for (size_t i = 1; i < c->n; ++i) {
    const uint32_t cp = c->v[i];
    const int cls = kiln_unicode_combining_class(cp);
    const uint32_t composite = kiln_nfc_compose(c->v[starter], cp);
    if (composite && (last < cls || last == 0)) {
      c->v[starter] = composite;
      continue;
    }
    if (!cls) starter = kept;
    last = cls;
    c->v[kept++] = cp;
  }
  c->n = kept;
}

/* A malformed byte: kiln_utf8_next's U+FFFD of one byte (the real U+FFFD
 * is three). */
static int kiln_nfc_malformed(uint32_t cp, size_t len) { return cp == 0xFFFD && len == 1; }

int kiln_unicode_nfc(const char* s, size_t n, char** out, size_t* out_n, size_t* at) {
  *out = NULL;
  *out_n = 0;
  *at = 0;
  size_t first;
  if (kiln_unicode_is_nfc(s, n, &first)) return KILN_UNICODE_NFC_OK;
  /* Text 16.0's quick check passes is NFC to tokenizers too (its classes
   * are 16.0's or 0, its compositions a subset); elsewhere its data must be
   * 16.0's for every character. */
  for (size_t i = 0; i < n;) {
    size_t len;
    const uint32_t cp = kiln_utf8_next(s + i, n - i, &len);
    if (cp >= 0x300 && kiln_unicode_in(kiln_unicode_nfc_unlike, kiln_unicode_nfc_unlike_count, cp)) {
      *at = i;
      return KILN_UNICODE_NFC_UNLIKE;
    }
    i += len;
  }
  kiln_nfc_bytes_t o = {0};
  kiln_nfc_cps_t seg = {0};
  uint64_t* keys = NULL;
  size_t keys_cap = 0, copied = 0, safe = 0; /* safe: where a stretch may start */
  int last = 0, ok = 1;
  for (size_t i = 0; i < n && ok;) {
    size_t len;
    const uint32_t cp = kiln_utf8_next(s + i, n - i, &len);
    if (kiln_nfc_malformed(cp, len)) { /* left as it is: nothing joins across it */
      safe = i + 1;
      last = 0;
      ++i;
      continue;
    }
    const int cls = kiln_unicode_combining_class(cp);
    if (!(cls && last > cls) && !kiln_nfc_unsure(cp)) {
      if (!cls) safe = i;
      last = cls;
      i += len;
      continue;
    }
    /* The stretch NFC may change: from the last starter it leaves as it
     * is (nothing before one joins anything after it) to the next. */
    size_t end = i + len;
    while (end < n) {
      size_t l2;
      const uint32_t c2 = kiln_utf8_next(s + end, n - end, &l2);
      if (kiln_nfc_malformed(c2, l2) || (!kiln_unicode_combining_class(c2) && !kiln_nfc_unsure(c2))) break;
      end += l2;
    }
    seg.n = 0;
    for (size_t k = safe; k < end && ok;) {
      size_t l2;
      ok = kiln_nfc_decompose(kiln_utf8_next(s + k, end - k, &l2), &seg);
      k += l2;
    }
    ok = ok && kiln_nfc_grow((void**)&keys, &keys_cap, seg.n, sizeof(uint64_t));
    if (!ok) break;
    kiln_nfc_order(&seg, keys);
    kiln_nfc_compose_all(&seg);
    ok = kiln_nfc_append(&o, s + copied, safe - copied);
    for (size_t k = 0; k < seg.n && ok; ++k) ok = kiln_nfc_append_utf8(&o, seg.v[k]);
    copied = safe = i = end;
    last = 0;
  }
  ok = ok && kiln_nfc_append(&o, s + copied, n - copied);
  free(seg.v);
  free(keys);
  if (!ok) {
    free(o.v);
    *at = n;
    return KILN_UNICODE_NFC_NO_MEMORY;
  }
  *out = o.v;
  *out_n = o.n;
  return KILN_UNICODE_NFC_OK;
}
