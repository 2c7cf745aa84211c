/* The tokenizer (runtime/kiln_tokenizer.h) on a section built here: a
 * byte-level vocabulary (the 256 bytes, four merges, a special <bos>) with
 * GPT-2's pattern, whose encodings follow by hand from the merge ranks; the
 * public API over it (kiln_session_has_tokenizer, _tokenize with a short
 * buffer, _token_bytes, _eos_ids, a session without one); and the loader
 * on every truncation and every single-byte change of the section (an
 * error or a working tokenizer, never a crash: this suite runs under ASan
 * in the sanitizer build). Hugging Face's own encodings are the Python
 * tests' reference (tests/python/test_tokenizer.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_artifact.h"
#include "kiln.h"
#include "kiln_test.h"
#include "runtime/kiln_tokenizer.h"

typedef struct {
  uint8_t* p;
  size_t n, cap;
} tok_buf_t;

static void tok_put(tok_buf_t* b, const void* data, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, data, n);
  b->n += n;
}

static void tok_u32(tok_buf_t* b, uint32_t v) { tok_put(b, &v, 4); }

/* ids 0..255 the bytes, 256 "he", 257 "ll", 258 "hell", 259 " w", 260
 * "<bos>" (special: prefix and end id), 261 " 1", 262 "12"; merges in rank
 * order h+e, l+l, he+ll, ' '+w, ' '+1, 1+2; the pre-tokenizing pattern
 * given. */
static tok_buf_t tok_section(uint32_t pattern) {
  static const char* extra[] = {"he", "ll", "hell", " w", "<bos>", " 1", "12"};
  tok_buf_t b = {0};
  tok_put(&b, "KILNTOKN", 8);
  const uint32_t head[] = {1, 1, pattern, 0, 263, 6, 1, (uint32_t)-1, 1, 0, 1};
  for (size_t i = 0; i < sizeof head / sizeof head[0]; ++i) tok_u32(&b, head[i]);
  tok_u32(&b, 260); /* prefix */
  tok_u32(&b, 260); /* end */
  for (int i = 0; i < 256; ++i) tok_u32(&b, 1);
  for (int i = 0; i < 7; ++i) tok_u32(&b, (uint32_t)strlen(extra[i]));
  for (int i = 0; i < 256; ++i) {
    uint8_t c = (uint8_t)i;
    tok_put(&b, &c, 1);
  }
  for (int i = 0; i < 7; ++i) tok_put(&b, extra[i], strlen(extra[i]));
  const uint32_t merges[][2] = {{'h', 'e'}, {'l', 'l'}, {256, 257}, {' ', 'w'}, {' ', '1'}, {'1', '2'}};
  for (int i = 0; i < 6; ++i) tok_u32(&b, merges[i][0]), tok_u32(&b, merges[i][1]);
  tok_u32(&b, 260), tok_u32(&b, 1); /* added, special */
  return b;
}

static int tok_expect(const kiln_tokenizer_t* t, const char* text, int special, const int32_t* want, size_t n) {
  int32_t* ids = NULL;
  size_t count = 0;
  kiln_status_t st = kiln_tokenizer_encode(t, text, strlen(text), special, &ids, &count);
  int ok = !st && count == n && (n == 0 || !memcmp(ids, want, n * sizeof(int32_t)));
  KILN_EXPECT(ok, "'%s': %zu ids, first %d", text, count, count ? (int)ids[0] : -1);
  kiln_status_free(st);
  free(ids);
  return ok;
}

static void test_tokenizer_encode(void) {
  tok_buf_t b = tok_section(1);
  kiln_tokenizer_t* t = NULL;
  KILN_EXPECT_OK(kiln_tokenizer_load(b.p, b.n, &t));
  if (!t) return;
  /* "hello" -> he, ll (ranks 0, 1) -> hell (2), o; " world" -> " w" (3) o r l d */
  tok_expect(t, "hello world", 1, (const int32_t[]){260, 258, 'o', 259, 'o', 'r', 'l', 'd'}, 8);
  tok_expect(t, "hello world", 0, (const int32_t[]){258, 'o', 259, 'o', 'r', 'l', 'd'}, 7);
  /* equal ranks: the leftmost pair first */
  tok_expect(t, "lll", 0, (const int32_t[]){257, 'l'}, 2);
  /* "  w": the run's last space goes with the word (\s+(?!\S)) */
  tok_expect(t, "  w", 0, (const int32_t[]){' ', 259}, 2);
  /* the added token is found inside a word */
  tok_expect(t, "he<bos>he", 0, (const int32_t[]){256, 260, 256}, 3);
  /* malformed UTF-8 is bytes like any other */
  tok_expect(t, "\xff\xfe", 0, (const int32_t[]){0xff, 0xfe}, 2);
  tok_expect(t, "", 1, (const int32_t[]){260}, 1);
  size_t len = 9;
  KILN_EXPECT(!strncmp(kiln_tokenizer_piece(t, 258, &len), "hell", 4) && len == 4, "piece of 258");
  kiln_tokenizer_piece(t, 260, &len);
  KILN_EXPECT(len == 0, "a special token prints nothing");
  int32_t n_eos = 0;
  const int32_t* eos = kiln_tokenizer_eos(t, &n_eos);
  KILN_EXPECT(n_eos == 1 && eos[0] == 260, "end ids");
  kiln_tokenizer_free(t);
  free(b.p);
}

/* DeepSeek's sequences of splits (patterns 7 V3, 8 LLM, 9 Coder) against
 * GPT-2's, where the merges ' '+1 (before 1+2) show the pieces: V3 cuts
 * numbers at 3 digits and keeps a space off them, LLM keeps whole numbers,
 * Coder cuts at every digit. A pattern past the last and a prepended space
 * on a sequence are refused. */
static void test_tokenizer_sequences(void) {
  static const struct {
    uint32_t pattern;
    size_t n;
    int32_t ids[8];
  } cases[] = {
      {1, 4, {262, 262, 261, '2'}},          /* 1212, " 12" */
      {7, 5, {262, '1', '2', ' ', 262}},     /* 121, 2, " ", 12 */
      {8, 4, {262, 262, ' ', 262}},          /* 1212, " ", 12 */
      {9, 7, {'1', '2', '1', '2', ' ', '1', '2'}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    tok_buf_t b = tok_section(cases[c].pattern);
    kiln_tokenizer_t* t = NULL;
    KILN_EXPECT_OK(kiln_tokenizer_load(b.p, b.n, &t));
    if (t) tok_expect(t, "1212 12", 0, cases[c].ids, cases[c].n);
    if (t) tok_expect(t, "hello world", 0, (const int32_t[]){258, 'o', 259, 'o', 'r', 'l', 'd'}, 7);
    kiln_tokenizer_free(t);
    free(b.p);
  }
  /* ByteLevel's space (flags 2): before the text once with GPT-2's own
   * pattern; before each piece (that does not start with one) where it
   * follows Splits: flag 128 for GPT-2's pattern as a Split, implied for
   * patterns 2 and up (files saved before the flag). */
  static const struct {
    uint32_t pattern, flags;
    size_t n;
    int32_t ids[12];
  } spaced[] = {
      {1, 2, 9, {' ', 258, 'o', ',', 'w', 'o', 'r', 'l', 'd'}},         /* " hello" "," "world" */
      {1, 2 | 128, 10, {' ', 258, 'o', ' ', ',', 259, 'o', 'r', 'l', 'd'}}, /* " hello" " ," " world" */
      {2, 2, 10, {' ', 258, 'o', ' ', ',', 'w', 'o', 'r', 'l', 'd'}},     /* " hello" " ,world" */
      {7, 2, 10, {' ', 258, 'o', ' ', ',', 'w', 'o', 'r', 'l', 'd'}},
  };
  for (size_t c = 0; c < sizeof spaced / sizeof spaced[0]; ++c) {
    tok_buf_t b = tok_section(spaced[c].pattern);
    memcpy(b.p + 20, &spaced[c].flags, 4);
    kiln_tokenizer_t* t = NULL;
    KILN_EXPECT_OK(kiln_tokenizer_load(b.p, b.n, &t));
    if (t) tok_expect(t, "hello,world", 0, spaced[c].ids, spaced[c].n);
    kiln_tokenizer_free(t);
    free(b.p);
  }
  static const struct {
    uint32_t pattern, flags;
    const char* why;
  } bad[] = {{10, 0, "pattern"}, {1, 128, "each piece"}, {7, 256, "unknown flags"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    tok_buf_t b = tok_section(bad[i].pattern);
    memcpy(b.p + 20, &bad[i].flags, 4);
    kiln_tokenizer_t* t = NULL;
    kiln_status_t st = kiln_tokenizer_load(b.p, b.n, &t);
    KILN_EXPECT(st && kiln_status_code(st) == KILN_CORRUPT_ARTIFACT && !t && strstr(kiln_status_message(st), bad[i].why),
                "pattern %u, flags %u: %s", bad[i].pattern, bad[i].flags, st ? kiln_status_message(st) : "loaded");
    kiln_status_free(st);
    kiln_tokenizer_free(t);
    free(b.p);
  }
}

/* A byte-level vocabulary may lack the bytes UTF-8 never uses (0xC0, 0xC1,
 * 0xF5-0xFF: DeepSeek LLM's and Coder's): it loads, and a text with one is
 * refused; any other byte missing is a corrupt section. Token v < 256 is
 * byte v, at the section's 52 + 2 * 4 (BOS and end ids) + 263 * 4. */
static void test_tokenizer_missing_bytes(void) {
  static const struct {
    uint8_t byte;
    int loads;
  } cases[] = {{0xFF, 1}, {0xC0, 1}, {0xF5, 1}, {0xF4, 0}, {0xC2, 0}, {'A', 0}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    tok_buf_t b = tok_section(7);
    b.p[52 + 8 + 263 * 4 + cases[c].byte] = 'h'; /* a second "h": the byte has no token */
    kiln_tokenizer_t* t = NULL;
    kiln_status_t st = kiln_tokenizer_load(b.p, b.n, &t);
    KILN_EXPECT((st == NULL) == cases[c].loads, "byte 0x%02x missing: %s", cases[c].byte, kiln_status_message(st));
    kiln_status_free(st);
    if (t) {
      tok_expect(t, "hello world", 0, (const int32_t[]){258, 'o', 259, 'o', 'r', 'l', 'd'}, 7);
      char text[] = "he?";
      text[2] = (char)cases[c].byte;
      int32_t* ids = NULL;
      size_t count = 0;
      st = kiln_tokenizer_encode(t, text, 3, 0, &ids, &count);
      KILN_EXPECT(kiln_status_code(st) == KILN_INVALID_ARGUMENT && strstr(kiln_status_message(st), "not UTF-8") && !ids,
                  "byte 0x%02x in the text: %s", cases[c].byte, kiln_status_message(st));
      kiln_status_free(st);
      free(ids);
    }
    kiln_tokenizer_free(t);
    free(b.p);
  }
}

/* Every truncation and every byte changed to 3 values: refused with a
 * message, or loaded and usable. */
static void test_tokenizer_hostile(void) {
  tok_buf_t b = tok_section(1);
  int refused = 0, loaded = 0;
  for (size_t n = 0; n < b.n; ++n) {
    kiln_tokenizer_t* t = NULL;
    kiln_status_t st = kiln_tokenizer_load(b.p, n, &t);
    refused += st != NULL && kiln_status_code(st) == KILN_CORRUPT_ARTIFACT && t == NULL;
    kiln_status_free(st);
    kiln_tokenizer_free(t);
  }
  KILN_EXPECT(refused == (int)b.n, "%d of %zu truncations refused", refused, b.n);
  static const uint8_t values[] = {0x00, 0xff, 0x80};
  for (size_t i = 0; i < b.n; ++i)
    for (int v = 0; v < 3; ++v) {
      uint8_t keep = b.p[i];
      b.p[i] = values[v];
      kiln_tokenizer_t* t = NULL;
      kiln_status_t st = kiln_tokenizer_load(b.p, b.n, &t);
      if (!st) {
        int32_t* ids = NULL;
        size_t count = 0;
        static const char text[] = "hello  world<bos>\xe4\xbd";
        kiln_status_free(kiln_tokenizer_encode(t, text, sizeof text - 1, 1, &ids, &count));
        free(ids);
        ++loaded;
      }
      KILN_EXPECT(!st == (t != NULL), "byte %zu = %d: a status and a tokenizer", i, values[v]);
      kiln_status_free(st);
      kiln_tokenizer_free(t);
      b.p[i] = keep;
    }
  KILN_EXPECT(loaded > 0, "some changes (a token's byte) still load");
  free(b.p);
}

/* A one-node model, with the section or without. */
static void* tok_artifact(const tok_buf_t* section, size_t* size) {
  kiln_graph_t* g = NULL;
  void* bytes = NULL;
  int32_t x = -1, y = -1;
  const int64_t shape[1] = {2};
  kiln_status_t s = kiln_graph_create(kiln_allocator_system(), &g);
  if (!s) s = kiln_graph_add_input(g, "x", KILN_F32, 1, shape, &x);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_EXP, &x, 1, NULL, 0, NULL, 0, "exp", &y);
  if (!s) s = kiln_graph_set_outputs(g, &y, 1);
  kiln_artifact_section_t extra = {KILN_TOKENIZER_SECTION, section ? section->p : NULL, section ? section->n : 0};
  if (!s) s = kiln_artifact_write(g, &extra, section ? 1 : 0, &bytes, size);
  KILN_EXPECT_OK(s);
  kiln_graph_release(g);
  return bytes;
}

static void test_tokenizer_api(void) {
  tok_buf_t b = tok_section(1);
  size_t size = 0;
  void* bytes = tok_artifact(&b, &size);
  kiln_session_t* s = NULL;
  kiln_error_t* e = bytes ? kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, NULL, &s) : NULL;
  KILN_EXPECT(!e && s, "session: %s", kiln_error_message(e));
  kiln_error_free(e);
  if (s) {
    KILN_EXPECT(kiln_session_has_tokenizer(s) == 1, "has a tokenizer");
    int64_t ids[3] = {-1, -1, -1};
    size_t n = 0;
    e = kiln_session_tokenize(s, "hello world", 11, 1, ids, 2, &n);
    KILN_EXPECT(!e && n == 8 && ids[0] == 260 && ids[1] == 258 && ids[2] == -1, "a short buffer: %zu ids", n);
    kiln_error_free(e);
    e = kiln_session_tokenize(s, "hello", 5, 0, NULL, 0, &n);
    KILN_EXPECT(!e && n == 2, "a count alone: %zu", n);
    kiln_error_free(e);
    e = kiln_session_tokenize(s, "hello", 5, 0, ids, 3, NULL);
    KILN_EXPECT(kiln_error_code(e) == KILN_ERROR_INVALID_ARGUMENT, "out_count NULL");
    kiln_error_free(e);
    size_t len = 0;
    KILN_EXPECT(!memcmp(kiln_session_token_bytes(s, 259, &len), " w", 2) && len == 2, "bytes of 259");
    kiln_session_token_bytes(s, 100000, &len);
    KILN_EXPECT(len == 0, "an id past the vocabulary prints nothing");
    const int32_t* eos = NULL;
    int32_t n_eos = 0;
    e = kiln_session_eos_ids(s, &eos, &n_eos);
    KILN_EXPECT(!e && n_eos == 1 && eos[0] == 260, "end ids");
    kiln_error_free(e);
    kiln_session_release(s);
  }
  free(bytes);
  /* Without a section: none, and asking is an error saying so. */
  bytes = tok_artifact(NULL, &size);
  s = NULL;
  e = bytes ? kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, NULL, &s) : NULL;
  kiln_error_free(e);
  if (s) {
    size_t n = 0;
    KILN_EXPECT(kiln_session_has_tokenizer(s) == 0, "no tokenizer");
    e = kiln_session_tokenize(s, "x", 1, 1, NULL, 0, &n);
    KILN_EXPECT(kiln_error_code(e) == KILN_ERROR_INVALID_ARGUMENT && strstr(kiln_error_message(e), "no tokenizer"),
                "tokenize without a tokenizer: %s", kiln_error_message(e));
    kiln_error_free(e);
    kiln_session_release(s);
  }
  free(bytes);
  /* A damaged section makes the model a corrupt artifact. */
  b.p[8] = 9; /* version */
  bytes = tok_artifact(&b, &size);
  s = NULL;
  e = bytes ? kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, NULL, &s) : NULL;
  KILN_EXPECT(kiln_error_code(e) == KILN_ERROR_CORRUPT_FILE && !s && strstr(kiln_error_message(e), "tokenizer"),
              "damaged section: %s", kiln_error_message(e));
  kiln_error_free(e);
  free(bytes);
  free(b.p);
}

void kiln_test_suite_tokenizer(void) {
  test_tokenizer_encode();
  test_tokenizer_sequences();
  test_tokenizer_missing_bytes();
  test_tokenizer_hostile();
  test_tokenizer_api();
}
