/* The few Unicode facts the tokenizer's pre-tokenizing patterns need:
 * UTF-8 decoding and whether a code point is a letter (\p{L}; upper or
 * title case: \p{Lu}\p{Lt}; lower case: \p{Ll}), a number (\p{N}), a
 * mark (\p{M}), punctuation (\p{P}), a symbol (\p{S}), one of DeepSeek
 * LLM's letters (an explicit class) or white space (\s: the White_Space
 * property, as the regex engine of Hugging Face's tokenizers reads it),
 * and a text's NFC form (a tokenizer with an NFC normalizer,
 * kiln_unicode_nfc.c). The tables are generated
 * (kiln_unicode_gen.py -> kiln_unicode_tables.c). */
#ifndef KILN_UNICODE_H
#define KILN_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t first, last;
} kiln_unicode_range_t;

typedef struct {
  uint32_t first, last;
  uint8_t cls; /* the canonical combining class (1..254) */
} kiln_unicode_class_range_t;

extern const kiln_unicode_range_t kiln_unicode_letters[];
extern const int kiln_unicode_letters_count;
extern const kiln_unicode_range_t kiln_unicode_numbers[];
extern const int kiln_unicode_numbers_count;
extern const kiln_unicode_range_t kiln_unicode_marks[];
extern const int kiln_unicode_marks_count;
extern const kiln_unicode_range_t kiln_unicode_punctuation[];
extern const int kiln_unicode_punctuation_count;
extern const kiln_unicode_range_t kiln_unicode_symbols[];
extern const int kiln_unicode_symbols_count;
extern const kiln_unicode_range_t kiln_unicode_deepseek_letters[];
extern const int kiln_unicode_deepseek_letters_count;
extern const kiln_unicode_range_t kiln_unicode_upper[];
extern const int kiln_unicode_upper_count;
extern const kiln_unicode_range_t kiln_unicode_lower[];
extern const int kiln_unicode_lower_count;
extern const kiln_unicode_range_t kiln_unicode_nfc_no[];
extern const int kiln_unicode_nfc_no_count;
extern const kiln_unicode_range_t kiln_unicode_nfc_maybe[];
extern const int kiln_unicode_nfc_maybe_count;
extern const kiln_unicode_class_range_t kiln_unicode_combining[];
extern const int kiln_unicode_combining_count;

/* A full canonical decomposition: parts[at, at + n) of
 * kiln_unicode_decomposition_parts (Hangul's syllables are computed). */
typedef struct {
  uint32_t cp;
  uint16_t at;
  uint8_t n;
} kiln_unicode_decomposition_t;
extern const kiln_unicode_decomposition_t kiln_unicode_decompositions[];
extern const int kiln_unicode_decompositions_count;
extern const uint32_t kiln_unicode_decomposition_parts[];

/* A pair NFC composes (a primary composite), sorted by (first, second). */
typedef struct {
  uint32_t first, second, composite;
} kiln_unicode_composition_t;
extern const kiln_unicode_composition_t kiln_unicode_compositions[];
extern const int kiln_unicode_compositions_count;

/* Code points whose normalization Hugging Face's tokenizers (its older
 * Unicode data) does not share with these tables' (Unicode 16.0). */
extern const kiln_unicode_range_t kiln_unicode_nfc_unlike[];
extern const int kiln_unicode_nfc_unlike_count;

/* 1 when cp is in one of the n sorted ranges r. */
int kiln_unicode_in(const kiln_unicode_range_t* r, int n, uint32_t cp);

/* The code point starting at s[0] (n > 0 bytes available) and its length
 * in bytes. A malformed or truncated sequence is one byte long and decodes
 * to U+FFFD (no class), so every byte of any input is consumed once. */
uint32_t kiln_utf8_next(const char* s, size_t n, size_t* len);

int kiln_unicode_is_letter(uint32_t cp);
int kiln_unicode_is_number(uint32_t cp);
int kiln_unicode_is_space(uint32_t cp);
int kiln_unicode_is_mark(uint32_t cp);
int kiln_unicode_is_upper(uint32_t cp); /* Lu or Lt */
int kiln_unicode_is_lower(uint32_t cp); /* Ll */
int kiln_unicode_is_punct(uint32_t cp);  /* P* */
int kiln_unicode_is_symbol(uint32_t cp); /* S* */
/* DeepSeek LLM's letters: the bracket its tokenizer spells out (A-Z, a-z,
 * U+00B5, U+00C0-U+00D6, ...: 84 ranges of Latin, Greek, Cyrillic,
 * Armenian, Georgian, Cherokee ... letters), not a Unicode category. */
int kiln_unicode_is_deepseek_letter(uint32_t cp);

/* The canonical combining class of cp (0 for a starter). */
int kiln_unicode_combining_class(uint32_t cp);

/* UAX #15's NFC quick check of n bytes of UTF-8: 1 when NFC leaves the text
 * as it is (every character NFC_Quick_Check=Yes, combining classes in
 * order); 0 when it might change it, with *at the byte offset of the
 * first character that decided so. */
int kiln_unicode_is_nfc(const char* s, size_t n, size_t* at);

/* The NFC form (UAX #15) of n bytes of UTF-8 s, as Hugging Face's
 * tokenizers normalizes text: KILN_UNICODE_NFC_OK with *out a malloc'd
 * copy of *out_n bytes (the caller frees it), or *out NULL where the
 * quick check finds the text NFC already. Bytes that are not UTF-8 stay as
 * they are, each a boundary nothing composes across.
 * KILN_UNICODE_NFC_UNLIKE: the text holds a code point whose normalization
 * tokenizers does not share with Unicode 16.0 (kiln_unicode_nfc_unlike), at
 * byte *at; KILN_UNICODE_NFC_NO_MEMORY: out of memory. */
enum { KILN_UNICODE_NFC_OK = 0, KILN_UNICODE_NFC_UNLIKE = 1, KILN_UNICODE_NFC_NO_MEMORY = 2 };
int kiln_unicode_nfc(const char* s, size_t n, char** out, size_t* out_n, size_t* at);

#endif /* KILN_UNICODE_H */
