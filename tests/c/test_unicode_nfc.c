/* NFC (base/kiln_unicode_nfc.c) on texts whose normal form follows by hand
 * from UAX #15: a composition, Hangul's jamo, marks reordered by class and
 * a composition across a lower class, text NFC already (no copy), bytes
 * that are not UTF-8 left as they are, a code point tokenizers normalizes
 * otherwise (refused with its offset), and a hostile run of 200,000 marks
 * out of order (sorted in n log n). tokenizers' own normal forms are the
 * Python tests' reference (tests/python/test_tokenizer.py). */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_unicode.h"
#include "kiln_test.h"

static void expect_nfc(const char* in, size_t n, const char* want, size_t want_n) {
  char* out = NULL;
  size_t out_n = 0, at = 0;
  KILN_EXPECT(kiln_unicode_nfc(in, n, &out, &out_n, &at) == KILN_UNICODE_NFC_OK, "NFC of %zu bytes", n);
  const char* got = out ? out : in;
  const size_t got_n = out ? out_n : n;
  KILN_EXPECT(got_n == want_n && !memcmp(got, want, want_n), "NFC: %zu bytes, want %zu", got_n, want_n);
  free(out);
}

#define NFC(in, want) expect_nfc(in, sizeof(in) - 1, want, sizeof(want) - 1)

static void test_nfc_forms(void) {
  NFC("cafe\xCC\x81!", "caf\xC3\xA9!");                              /* e + U+0301: U+00E9 */
  NFC("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81");        /* U+1100 U+1161 U+11A8: U+AC01 */
  NFC("\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81");                    /* U+AC00 + U+11A8 */
  NFC("a\xCC\x81\xCC\x96x", "\xC3\xA1\xCC\x96x");                     /* 301 (230) after 316 (220), then a + 301 */
  NFC("\xE2\x84\xAB", "\xC3\x85");                                    /* U+212B (a singleton): U+00C5 */
  NFC("\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC");                    /* U+0958 stays decomposed (excluded) */
  NFC("e\xCC\x81\xCC\x81", "\xC3\xA9\xCC\x81");                       /* the second acute is blocked */
  /* Not UTF-8: the byte stays, and nothing joins across it. */
  NFC("e\xFF\xCC\x81 e\xCC\x81", "e\xFF\xCC\x81 \xC3\xA9");
  NFC("\xFF" "e\xCC\x81", "\xFF\xC3\xA9");
  char* out = (char*)1;
  size_t out_n = 9, at = 0;
  KILN_EXPECT(kiln_unicode_nfc("caf\xC3\xA9", 5, &out, &out_n, &at) == KILN_UNICODE_NFC_OK && !out && !out_n,
              "NFC text is not copied");
  /* U+1ABF (Unicode 14.0): a mark tokenizers' data does not know. */
  KILN_EXPECT(kiln_unicode_nfc("e\xCC\x81 x\xE1\xAA\xBF", 8, &out, &out_n, &at) == KILN_UNICODE_NFC_UNLIKE &&
                  at == 5 && !out,
              "U+1ABF refused at byte 5 (got %zu)", at);
}

static void test_nfc_hostile_run(void) {
  const size_t pairs = 100000, n = 1 + 4 * pairs;
  char* in = malloc(n);
  if (!in) return;
  in[0] = 'a';
  for (size_t i = 0; i < pairs; ++i) memcpy(in + 1 + 4 * i, "\xCC\x81\xCC\x96", 4); /* 301 316 ... */
  char* out = NULL;
  size_t out_n = 0, at = 0;
  KILN_EXPECT(kiln_unicode_nfc(in, n, &out, &out_n, &at) == KILN_UNICODE_NFC_OK && out, "NFC of the run");
  /* Every 316 (220) before every 301 (230); a + the first 301 compose. */
  int ok = out && out_n == n - 1 && !memcmp(out, "\xC3\xA1", 2);
  for (size_t i = 0; ok && i < pairs; ++i) ok = !memcmp(out + 2 + 2 * i, "\xCC\x96", 2);
  for (size_t i = 0; ok && i + 1 < pairs; ++i) ok = !memcmp(out + 2 + 2 * pairs + 2 * i, "\xCC\x81", 2);
  KILN_EXPECT(ok, "the run's marks sorted by class");
  free(out);
  free(in);
}

void kiln_test_suite_unicode_nfc(void) {
  test_nfc_forms();
  test_nfc_hostile_run();
}
