/* UTF-8 decoding and the code point classes of kiln_unicode.h. */
#include "base/kiln_unicode.h"

uint32_t kiln_utf8_next(const char* s, size_t n, size_t* len) {
  const unsigned char* u = (const unsigned char*)s;
  uint32_t c = u[0];
  *len = 1;
  if (c < 0x80) return c;
  size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
  if (need == 0 || need > n || c > 0xF4) return 0xFFFD;
  uint32_t cp = c & (0x7F >> need);
  for (size_t i = 1; i < need; ++i) {
    if ((u[i] & 0xC0) != 0x80) return 0xFFFD;
    cp = cp << 6 | (u[i] & 0x3F);
  }
  /* Overlong forms, surrogates and code points past U+10FFFF are malformed. */
  if ((need == 3 && cp < 0x800) || (need == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
      (cp >= 0xD800 && cp <= 0xDFFF))
    return 0xFFFD;
  *len = need;
  return cp;
}

int kiln_unicode_in(const kiln_unicode_range_t* r, int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (cp < r[mid].first) hi = mid - 1;
    else if (cp > r[mid].last) lo = mid + 1;
    else return 1;
  }
  return 0;
}

int kiln_unicode_is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return kiln_unicode_in(kiln_unicode_letters, kiln_unicode_letters_count, cp);
}

int kiln_unicode_is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return kiln_unicode_in(kiln_unicode_numbers, kiln_unicode_numbers_count, cp);
}

int kiln_unicode_is_mark(uint32_t cp) {
  return cp >= 0x300 && kiln_unicode_in(kiln_unicode_marks, kiln_unicode_marks_count, cp);
}

int kiln_unicode_is_upper(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z';
  return kiln_unicode_in(kiln_unicode_upper, kiln_unicode_upper_count, cp);
}

int kiln_unicode_is_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'a' && cp <= 'z';
  return kiln_unicode_in(kiln_unicode_lower, kiln_unicode_lower_count, cp);
}

int kiln_unicode_is_punct(uint32_t cp) {
  return kiln_unicode_in(kiln_unicode_punctuation, kiln_unicode_punctuation_count, cp);
}

int kiln_unicode_is_symbol(uint32_t cp) {
  return kiln_unicode_in(kiln_unicode_symbols, kiln_unicode_symbols_count, cp);
}

int kiln_unicode_is_deepseek_letter(uint32_t cp) {
  return kiln_unicode_in(kiln_unicode_deepseek_letters, kiln_unicode_deepseek_letters_count, cp);
}

/* Unicode's White_Space property (PropList.txt), stable for many versions. */
int kiln_unicode_is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}
