/* The BPE tokenizer of kiln_tokenizer.c: loading the section, the
 * pre-tokenizing patterns (hand-written matchers of the regular expressions
 * byte-level models use, in three families: GPT-2's, cl100k's (Llama 3,
 * Qwen2, Qwen3.5) and o200k's (GPT-OSS, Mistral's Tekken), alternative by
 * alternative, with the regex engine's greedy and backtracking choices
 * spelled out; and DeepSeek's sequences of several splits, each splitting
 * the pieces the ones before made), the merges (lowest rank first,
 * leftmost on a tie, as Hugging Face's BPE applies them), and the pieces a
 * token decodes to. */
#include "runtime/kiln_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_unicode.h"

enum { KIND_BYTE_LEVEL = 1, KIND_SENTENCEPIECE = 2 };
enum {
  PATTERN_NONE = 0,
  PATTERN_GPT2 = 1,
  PATTERN_LLAMA3 = 2,
  PATTERN_QWEN2 = 3,
  PATTERN_O200K = 4,
  PATTERN_TEKKEN = 5,
  PATTERN_QWEN35 = 6,
  PATTERN_DEEPSEEK3 = 7,
  PATTERN_DEEPSEEK_LLM = 8,
  PATTERN_DEEPSEEK_CODER = 9,
  PATTERN_COUNT
};

/* What sets each pattern apart within its family. FAMILY_SEQUENCE: a
 * sequence of splits (kiln_tok_sequences, below its matchers). */
enum { FAMILY_NONE, FAMILY_GPT2, FAMILY_CL100K, FAMILY_O200K, FAMILY_SEQUENCE };
static const struct {
  int family;
  int digits;       /* \p{N}{1,3} or \p{N} */
  int marks;        /* cl100k: [\p{L}\p{M}]+ words, marks out of the punctuation class (Qwen3.5) */
  int contractions; /* o200k: (?i:'s|'t|'re|'ve|'m|'ll|'d)? after a word */
  const char* name;
} kiln_tok_patterns[PATTERN_COUNT] = {
    [PATTERN_NONE] = {FAMILY_NONE, 0, 0, 0, ""},
    [PATTERN_GPT2] = {FAMILY_GPT2, 0, 0, 0, " (GPT-2's pattern)"},
    [PATTERN_LLAMA3] = {FAMILY_CL100K, 3, 0, 0, " (Llama 3's pattern)"},
    [PATTERN_QWEN2] = {FAMILY_CL100K, 1, 0, 0, " (Llama 3's pattern, 1-digit numbers)"},
    [PATTERN_O200K] = {FAMILY_O200K, 3, 0, 1, " (o200k's pattern)"},
    [PATTERN_TEKKEN] = {FAMILY_O200K, 1, 0, 0, " (Tekken's pattern)"},
    [PATTERN_QWEN35] = {FAMILY_CL100K, 1, 1, 0, " (Qwen3.5's pattern)"},
    [PATTERN_DEEPSEEK3] = {FAMILY_SEQUENCE, 0, 0, 0, " (DeepSeek V3's patterns)"},
    [PATTERN_DEEPSEEK_LLM] = {FAMILY_SEQUENCE, 0, 0, 0, " (DeepSeek LLM's patterns)"},
    [PATTERN_DEEPSEEK_CODER] = {FAMILY_SEQUENCE, 0, 0, 0, " (DeepSeek Coder's patterns)"},
};
enum {
  FLAG_IGNORE_MERGES = 1,
  FLAG_PREPEND = 2,
  FLAG_PREPEND_UNLESS_THERE = 4,
  FLAG_PREPEND_FIRST = 8,
  FLAG_BYTE_FALLBACK = 16,
  FLAG_FUSE_UNK = 32,
  FLAG_NFC = 64,
  /* ByteLevel's add_prefix_space after Splits: Hugging Face's ByteLevel
   * prepends its space to every piece the splits made (that does not start
   * with one), not once to the text. Patterns 2-9 come only from Splits,
   * so FLAG_PREPEND alone means this for them (files saved before this
   * flag); pattern 1 (GPT-2's) is also ByteLevel's own regex, where the
   * space goes before the text once, so its files say which. */
  FLAG_PREPEND_EACH = 128
};
#define KILN_TOK_MAX_TOKENS (1u << 24)
#define KILN_TOK_MAX_TOKEN_BYTES 1024u
#define KILN_TOK_MAX_AFFIX 16u

typedef struct {
  uint64_t key; /* left << 32 | right, + 1 (0: empty) */
  int32_t rank, result;
} kiln_tok_merge_t;

typedef struct {
  int32_t id; /* ids in [0, T); -1 for an empty slot */
  int32_t special;
} kiln_tok_added_t;

struct kiln_tokenizer_s {
  uint32_t kind, pattern, flags, n_tokens, n_merges, n_added, n_prefix, n_suffix, n_eos;
  int32_t unk;
  int32_t prefix[KILN_TOK_MAX_AFFIX], suffix[KILN_TOK_MAX_AFFIX], eos[KILN_TOK_MAX_AFFIX];
  uint8_t* bytes;   /* the tokens' bytes, concatenated */
  uint64_t* start;  /* token i's bytes: bytes[start[i], start[i + 1]) */
  int32_t* by_text; /* open addressing: token ids by their bytes (-1 empty) */
  uint64_t text_mask;
  kiln_tok_merge_t* merges; /* open addressing by pair */
  uint64_t merge_mask;
  kiln_tok_added_t* added; /* longest first */
  int32_t byte_token[256]; /* byte-level: the token of each byte; SentencePiece: <0xNN>, or -1 */
  char* piece;             /* decoded bytes: token i's at piece + start[i] (never longer) */
  uint16_t* piece_len;     /* (at most KILN_TOK_MAX_TOKEN_BYTES) */
  uint8_t added_first[256]; /* 1 for a byte some added token starts with */
  int bytes_missing;        /* byte-level: some bytes UTF-8 never uses have no token */
};

/* ---- hashing ------------------------------------------------------------ */

static uint64_t kiln_tok_hash(const void* p, size_t n) {
  const uint8_t* b = p;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static uint64_t kiln_tok_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static uint64_t kiln_tok_table_size(uint64_t n) {
  uint64_t s = 16;
  while (s < 2 * n) s *= 2;
  return s;
}

static int32_t kiln_tok_lookup(const kiln_tokenizer_t* t, const void* text, size_t n) {
  for (uint64_t h = kiln_tok_hash(text, n) & t->text_mask;; h = (h + 1) & t->text_mask) {
    int32_t id = t->by_text[h];
    if (id < 0) return -1;
    if (t->start[id + 1] - t->start[id] == n && !memcmp(t->bytes + t->start[id], text, n)) return id;
  }
}

static const kiln_tok_merge_t* kiln_tok_merge_find(const kiln_tokenizer_t* t, int32_t l, int32_t r) {
  uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
  for (uint64_t h = kiln_tok_mix(key) & t->merge_mask;; h = (h + 1) & t->merge_mask) {
    const kiln_tok_merge_t* m = &t->merges[h];
    if (m->key == 0) return NULL;
    if (m->key == key) return m;
  }
}

/* ---- loading ------------------------------------------------------------ */

typedef struct {
  const uint8_t* p;
  size_t size, at;
} kiln_tok_reader_t;

static int kiln_tok_u32(kiln_tok_reader_t* r, uint32_t* v) {
  if (r->size - r->at < 4) return 0;
  memcpy(v, r->p + r->at, 4);
  r->at += 4;
  return 1;
}

#define BAD(...) \
  do { \
    st = kiln_status_make(KILN_CORRUPT_ARTIFACT, "tokenizer section: " __VA_ARGS__); \
    goto fail; \
  } while (0)

static void kiln_tok_pieces(kiln_tokenizer_t* t, const uint8_t* special) {
  for (uint32_t i = 0; i < t->n_tokens; ++i) {
    const uint8_t* b = t->bytes + t->start[i];
    size_t n = t->start[i + 1] - t->start[i], k = 0;
    char* out = t->piece + t->start[i];
    for (size_t j = 0; j < n && !special[i]; ++j) {
      if (t->kind == KIND_SENTENCEPIECE && j + 2 < n && b[j] == 0xE2 && b[j + 1] == 0x96 && b[j + 2] == 0x81) {
        out[k++] = ' '; /* U+2581 */
        j += 2;
      } else {
        out[k++] = (char)b[j];
      }
    }
    t->piece_len[i] = (uint16_t)k;
  }
  if (t->kind == KIND_SENTENCEPIECE)
    for (int v = 0; v < 256; ++v)
      if (t->byte_token[v] >= 0 && !special[t->byte_token[v]]) {
        t->piece[t->start[t->byte_token[v]]] = (char)v; /* <0xNN>: that byte */
        t->piece_len[t->byte_token[v]] = 1;
      }
}

kiln_status_t kiln_tokenizer_load(const void* bytes, size_t size, kiln_tokenizer_t** out) {
  kiln_status_t st = NULL;
  kiln_tokenizer_t* t = calloc(1, sizeof(*t));
  uint8_t* special = NULL;
  *out = NULL;
  if (!t) return kiln_status_make(KILN_OUT_OF_MEMORY, "tokenizer: out of memory");
  kiln_tok_reader_t r = {bytes, size, 0};
  uint32_t version = 0, unk = 0;
  if (size < 52 || memcmp(bytes, "KILNTOKN", 8)) BAD("no KILNTOKN header");
  r.at = 8;
  kiln_tok_u32(&r, &version);
  kiln_tok_u32(&r, &t->kind);
  kiln_tok_u32(&r, &t->pattern);
  kiln_tok_u32(&r, &t->flags);
  kiln_tok_u32(&r, &t->n_tokens);
  kiln_tok_u32(&r, &t->n_merges);
  kiln_tok_u32(&r, &t->n_added);
  kiln_tok_u32(&r, &unk);
  kiln_tok_u32(&r, &t->n_prefix);
  kiln_tok_u32(&r, &t->n_suffix);
  kiln_tok_u32(&r, &t->n_eos);
  if (version != 1) BAD("version %u (this kiln reads 1)", version);
  if (t->kind != KIND_BYTE_LEVEL && t->kind != KIND_SENTENCEPIECE) BAD("unknown kind %u", t->kind);
  if (t->kind == KIND_BYTE_LEVEL ? t->pattern >= PATTERN_COUNT : t->pattern != PATTERN_NONE)
    BAD("pattern %u for kind %u", t->pattern, t->kind);
  if (t->flags >= 256) BAD("unknown flags 0x%x", t->flags);
  if ((t->flags & FLAG_PREPEND_EACH) && (t->kind != KIND_BYTE_LEVEL || !(t->flags & FLAG_PREPEND)))
    BAD("a space before each piece without one to prepend (flags 0x%x)", t->flags);
  if (t->n_tokens == 0 || t->n_tokens > KILN_TOK_MAX_TOKENS) BAD("%u tokens", t->n_tokens);
  t->unk = (int32_t)unk;
  if (t->unk < -1 || t->unk >= (int32_t)t->n_tokens) BAD("unknown token %d of %u", t->unk, t->n_tokens);
  if (t->n_prefix > KILN_TOK_MAX_AFFIX || t->n_suffix > KILN_TOK_MAX_AFFIX || t->n_eos > KILN_TOK_MAX_AFFIX)
    BAD("%u prefix, %u suffix and %u end ids (at most %u each)", t->n_prefix, t->n_suffix, t->n_eos,
        KILN_TOK_MAX_AFFIX);
  /* Every count is now bounded by what its records need: check them
   * against the bytes left before allocating. */
  uint64_t left = size - r.at;
  if ((uint64_t)t->n_prefix * 4 + (uint64_t)t->n_suffix * 4 + (uint64_t)t->n_eos * 4 + (uint64_t)t->n_tokens * 4 +
          (uint64_t)t->n_merges * 8 + (uint64_t)t->n_added * 8 > left)
    BAD("%u tokens, %u merges and %u added tokens need more than its %zu bytes", t->n_tokens,
        t->n_merges, t->n_added, size);
  for (uint32_t i = 0; i < t->n_prefix + t->n_suffix + t->n_eos; ++i) {
    uint32_t id = UINT32_MAX;
    kiln_tok_u32(&r, &id);
    if (id >= t->n_tokens) BAD("prefix, suffix or end id %u of %u tokens", id, t->n_tokens);
    if (i < t->n_prefix) t->prefix[i] = (int32_t)id;
    else if (i < t->n_prefix + t->n_suffix) t->suffix[i - t->n_prefix] = (int32_t)id;
    else t->eos[i - t->n_prefix - t->n_suffix] = (int32_t)id;
  }
  t->start = malloc(((size_t)t->n_tokens + 1) * sizeof(uint64_t));
  t->piece_len = calloc(t->n_tokens, sizeof(uint16_t));
  special = calloc(t->n_tokens, 1);
  if (!t->start || !t->piece_len || !special) BAD("out of memory");
  t->start[0] = 0;
  for (uint32_t i = 0; i < t->n_tokens; ++i) {
    uint32_t len = 0;
    kiln_tok_u32(&r, &len);
    if (len == 0 || len > KILN_TOK_MAX_TOKEN_BYTES) BAD("token %u is %u bytes long", i, len);
    t->start[i + 1] = t->start[i] + len;
  }
  uint64_t total = t->start[t->n_tokens];
  if (total > size - r.at || (uint64_t)t->n_merges * 8 + (uint64_t)t->n_added * 8 != size - r.at - total)
    BAD("its tokens' %llu bytes, %u merges and %u added tokens are not its %zu bytes",
        (unsigned long long)total, t->n_merges, t->n_added, size);
  t->bytes = malloc((size_t)total);
  if (!t->bytes) BAD("out of memory");
  memcpy(t->bytes, r.p + r.at, (size_t)total);
  r.at += (size_t)total;
  t->piece = malloc((size_t)total);
  if (!t->piece) BAD("out of memory");
  uint64_t ts = kiln_tok_table_size(t->n_tokens);
  t->by_text = malloc(ts * sizeof(int32_t));
  if (!t->by_text) BAD("out of memory");
  memset(t->by_text, 0xff, ts * sizeof(int32_t));
  t->text_mask = ts - 1;
  for (uint32_t i = 0; i < t->n_tokens; ++i) {
    size_t n = t->start[i + 1] - t->start[i];
    if (kiln_tok_lookup(t, t->bytes + t->start[i], n) >= 0) continue; /* the first keeps it */
    uint64_t h = kiln_tok_hash(t->bytes + t->start[i], n) & t->text_mask;
    while (t->by_text[h] >= 0) h = (h + 1) & t->text_mask;
    t->by_text[h] = (int32_t)i;
  }
  uint64_t ms = kiln_tok_table_size(t->n_merges);
  t->merges = calloc(ms, sizeof(kiln_tok_merge_t));
  if (!t->merges) BAD("out of memory");
  t->merge_mask = ms - 1;
  uint8_t joined[2 * KILN_TOK_MAX_TOKEN_BYTES];
  for (uint32_t m = 0; m < t->n_merges; ++m) {
    uint32_t a = UINT32_MAX, b = UINT32_MAX;
    kiln_tok_u32(&r, &a);
    kiln_tok_u32(&r, &b);
    if (a >= t->n_tokens || b >= t->n_tokens) BAD("merge %u of ids %u and %u (%u tokens)", m, a, b, t->n_tokens);
    size_t na = t->start[a + 1] - t->start[a], nb = t->start[b + 1] - t->start[b];
    memcpy(joined, t->bytes + t->start[a], na);
    memcpy(joined + na, t->bytes + t->start[b], nb);
    int32_t res = kiln_tok_lookup(t, joined, na + nb);
    if (res < 0) BAD("merge %u of tokens %u and %u makes no token", m, a, b);
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    uint64_t h = kiln_tok_mix(key) & t->merge_mask;
    while (t->merges[h].key != 0 && t->merges[h].key != key) h = (h + 1) & t->merge_mask;
    if (t->merges[h].key == 0) /* a repeated pair keeps its first rank */
      t->merges[h] = (kiln_tok_merge_t){key, (int32_t)m, res};
  }
  t->added = calloc((size_t)t->n_added + 1, sizeof(kiln_tok_added_t));
  if (!t->added) BAD("out of memory");
  for (uint32_t i = 0; i < t->n_added; ++i) {
    uint32_t id = UINT32_MAX, fl = 0;
    kiln_tok_u32(&r, &id);
    kiln_tok_u32(&r, &fl);
    if (id >= t->n_tokens || fl > 1) BAD("added token %u: id %u, flags %u", i, id, fl);
    t->added[i] = (kiln_tok_added_t){(int32_t)id, (int32_t)fl};
    t->added_first[t->bytes[t->start[id]]] = 1;
    special[id] = (uint8_t)fl;
  }
  /* Longest first: the text's leftmost longest match wins (insertion sort:
   * a few hundred at most in practice; any count is correct). */
  for (uint32_t i = 1; i < t->n_added; ++i) {
    kiln_tok_added_t a = t->added[i];
    uint64_t la = t->start[a.id + 1] - t->start[a.id];
    uint32_t j = i;
    while (j > 0 && t->start[t->added[j - 1].id + 1] - t->start[t->added[j - 1].id] < la) {
      t->added[j] = t->added[j - 1];
      --j;
    }
    t->added[j] = a;
  }
  for (int v = 0; v < 256; ++v) {
    char name[8];
    uint8_t one = (uint8_t)v;
    if (t->kind == KIND_BYTE_LEVEL) {
      t->byte_token[v] = kiln_tok_lookup(t, &one, 1);
    } else {
      snprintf(name, sizeof(name), "<0x%02X>", v);
      t->byte_token[v] = kiln_tok_lookup(t, name, 6);
    }
  }
  /* A byte-level vocabulary has a token for every byte, but DeepSeek LLM's
   * and Coder's lack the 13 that UTF-8 never uses (0xC0, 0xC1, 0xF5-0xFF:
   * their stand-ins are added tokens of their own, matching the text's
   * U+00C0 and the like); a text with one of those is not UTF-8 and is
   * refused at encoding. */
  for (int v = 0; v < 256 && t->kind == KIND_BYTE_LEVEL; ++v) {
    int in_utf8 = v != 0xC0 && v != 0xC1 && v < 0xF5;
    if (t->byte_token[v] < 0 && in_utf8) BAD("byte 0x%02x has no token (a byte-level vocabulary has all 256)", v);
    t->bytes_missing |= t->byte_token[v] < 0;
  }
  kiln_tok_pieces(t, special);
  free(special);
  *out = t;
  return NULL;
fail:
  free(special);
  kiln_tokenizer_free(t);
  return st;
}
#undef BAD

void kiln_tokenizer_free(kiln_tokenizer_t* t) {
  if (!t) return;
  free(t->piece);
  free(t->piece_len);
  free(t->bytes);
  free(t->start);
  free(t->by_text);
  free(t->merges);
  free(t->added);
  free(t);
}

int32_t kiln_tokenizer_size(const kiln_tokenizer_t* t) { return (int32_t)t->n_tokens; }

const char* kiln_tokenizer_describe(const kiln_tokenizer_t* t, char* buf, size_t size) {
  size_t at = (size_t)snprintf(buf, size, "%s BPE%s, %u tokens, %u merges",
                               t->kind == KIND_BYTE_LEVEL ? "byte-level" : "SentencePiece-style",
                               kiln_tok_patterns[t->pattern].name, t->n_tokens, t->n_merges);
  const struct {
    const char* what;
    const int32_t* ids;
    uint32_t n;
  } lists[] = {{"BOS", t->prefix, t->n_prefix}, {"suffix", t->suffix, t->n_suffix}, {"end", t->eos, t->n_eos}};
  for (int l = 0; l < 3; ++l)
    for (uint32_t i = 0; i < lists[l].n && at < size; ++i)
      at += i ? (size_t)snprintf(buf + at, size - at, ",%d", (int)lists[l].ids[i])
              : (size_t)snprintf(buf + at, size - at, ", %s %d", lists[l].what, (int)lists[l].ids[i]);
  return buf;
}

const int32_t* kiln_tokenizer_eos(const kiln_tokenizer_t* t, int32_t* count) {
  *count = (int32_t)t->n_eos;
  return t->eos;
}

const char* kiln_tokenizer_piece(const kiln_tokenizer_t* t, int32_t id, size_t* len) {
  if (id < 0 || (uint32_t)id >= t->n_tokens) {
    *len = 0;
    return "";
  }
  *len = t->piece_len[id];
  return t->piece + t->start[id];
}

/* ---- growing id arrays -------------------------------------------------- */

typedef struct {
  int32_t* v;
  size_t n, cap;
  int oom;
} kiln_tok_ids_t;

static void kiln_tok_push(kiln_tok_ids_t* a, int32_t id) {
  if (a->oom) return;
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 64;
    int32_t* v = realloc(a->v, cap * sizeof(int32_t));
    if (!v) {
      a->oom = 1;
      return;
    }
    a->v = v, a->cap = cap;
  }
  a->v[a->n++] = id;
}

/* ---- BPE over one word -------------------------------------------------- */

typedef struct {
  int32_t rank, pos; /* the pair's rank; its left symbol's first position */
  int32_t result;
} kiln_tok_cand_t;

static int kiln_tok_before(const kiln_tok_cand_t* a, const kiln_tok_cand_t* b) {
  return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void kiln_tok_heap_push(kiln_tok_cand_t* h, size_t* n, kiln_tok_cand_t c) {
  size_t i = (*n)++;
  while (i > 0 && kiln_tok_before(&c, &h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = c;
}

static kiln_tok_cand_t kiln_tok_heap_pop(kiln_tok_cand_t* h, size_t* n) {
  kiln_tok_cand_t top = h[0], last = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && kiln_tok_before(&h[c + 1], &h[c])) ++c;
    if (!kiln_tok_before(&h[c], &last)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = last;
  return top;
}

/* The pair starting at symbol l, if it merges, as a candidate. */
static void kiln_tok_offer(const kiln_tokenizer_t* t, const int32_t* sym, const int32_t* next, int32_t l,
                           kiln_tok_cand_t* heap, size_t* n) {
  if (l < 0 || next[l] < 0) return;
  const kiln_tok_merge_t* m = kiln_tok_merge_find(t, sym[l], sym[next[l]]);
  if (m) kiln_tok_heap_push(heap, n, (kiln_tok_cand_t){m->rank, l, m->result});
}

/* Merges the symbols sym[0, n) (the lowest-ranked adjacent pair first, the
 * leftmost of equal ranks, until no pair merges) and appends the result,
 * as Hugging Face's BPE does it: a heap of candidate pairs over a linked
 * list of symbols, a candidate dropped when popped if its pair has changed
 * since. O(n log n): a SentencePiece text is one word, a prompt long.
 * work: 2 n int32 of scratch; heap: room for 3 n candidates. */
static void kiln_tok_merge_word(const kiln_tokenizer_t* t, int32_t* sym, size_t n, int32_t* work,
                                kiln_tok_cand_t* heap, kiln_tok_ids_t* out) {
  int32_t *next = work, *prev = work + n;
  size_t nh = 0;
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    prev[i] = (int32_t)i - 1;
  }
  for (size_t i = 0; i + 1 < n; ++i) kiln_tok_offer(t, sym, next, (int32_t)i, heap, &nh);
  while (nh) {
    kiln_tok_cand_t c = kiln_tok_heap_pop(heap, &nh);
    int32_t l = c.pos, r = next[l];
    if (sym[l] < 0 || r < 0) continue;
    const kiln_tok_merge_t* m = kiln_tok_merge_find(t, sym[l], sym[r]);
    if (!m || m->result != c.result) continue; /* stale: the pair changed */
    sym[l] = c.result;
    sym[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    kiln_tok_offer(t, sym, next, prev[l], heap, &nh);
    kiln_tok_offer(t, sym, next, l, heap, &nh);
  }
  for (int32_t i = n ? 0 : -1; i >= 0; i = next[i]) kiln_tok_push(out, sym[i]);
}

/* ---- byte-level words --------------------------------------------------- */

typedef struct {
  const uint32_t* cp; /* code points of the piece of text */
  const size_t* at;   /* their byte offsets (at[n]: the end) */
  size_t n;
} kiln_tok_text_t;

static int kiln_tok_is_l(uint32_t c) { return kiln_unicode_is_letter(c); }
static int kiln_tok_is_n(uint32_t c) { return kiln_unicode_is_number(c); }
static int kiln_tok_is_s(uint32_t c) { return kiln_unicode_is_space(c); }
static int kiln_tok_is_other(uint32_t c) { return !kiln_tok_is_s(c) && !kiln_tok_is_l(c) && !kiln_tok_is_n(c); }
static int kiln_tok_is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
static int kiln_tok_is_crlf_slash(uint32_t c) { return c == '\r' || c == '\n' || c == '/'; }
/* Qwen3.5's classes: marks join words and leave punctuation. */
static int kiln_tok_is_lm(uint32_t c) { return kiln_tok_is_l(c) || kiln_unicode_is_mark(c); }
static int kiln_tok_is_other_m(uint32_t c) { return kiln_tok_is_other(c) && !kiln_unicode_is_mark(c); }
/* o200k's: U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}]. */
static int kiln_tok_is_u(uint32_t c) {
  return kiln_unicode_is_mark(c) || (kiln_tok_is_l(c) && !kiln_unicode_is_lower(c));
}
static int kiln_tok_is_w(uint32_t c) {
  return kiln_unicode_is_mark(c) || (kiln_tok_is_l(c) && !kiln_unicode_is_upper(c));
}

static size_t kiln_tok_run(const kiln_tok_text_t* x, size_t i, int (*in)(uint32_t)) {
  size_t j = i;
  while (j < x->n && in(x->cp[j])) ++j;
  return j - i;
}

/* At most max of a run (\p{N}{1,3}): a long run is not read to its end at
 * each of its pieces, which would be quadratic in its length. */
static size_t kiln_tok_run_upto(const kiln_tok_text_t* x, size_t i, int (*in)(uint32_t), size_t max) {
  size_t j = i;
  while (j < x->n && j - i < max && in(x->cp[j])) ++j;
  return j - i;
}

/* Case folding as (?i:...) matches the contractions' letters: ASCII, and
 * U+017F LATIN SMALL LETTER LONG S, which folds to s. */
static uint32_t kiln_tok_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c == 0x17F ? 's' : c; }

/* 's 't 're 've 'm 'll 'd (case-insensitive for Llama 3's (?i:...)). */
static size_t kiln_tok_contraction(const kiln_tok_text_t* x, size_t i, int fold) {
  if (x->cp[i] != '\'' || i + 1 >= x->n) return 0;
  uint32_t a = x->cp[i + 1], b = i + 2 < x->n ? x->cp[i + 2] : 0;
  if (fold) a = kiln_tok_lower(a), b = kiln_tok_lower(b);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

/* \s+(?!\S) then \s+: a run of white space, less its last character when
 * a non-space follows it (that one goes with the next word), unless the
 * run is a single character. */
static size_t kiln_tok_spaces(const kiln_tok_text_t* x, size_t i) {
  size_t r = kiln_tok_run(x, i, kiln_tok_is_s);
  if (r == 0) return 0;
  return i + r < x->n && r > 1 ? r - 1 : r;
}

/* \s*[\r\n]+ (through the run's last CR or LF), else \s+(?!\S)|\s+. */
static size_t kiln_tok_newlines_or_spaces(const kiln_tok_text_t* x, size_t i) {
  size_t s = kiln_tok_run(x, i, kiln_tok_is_s);
  for (size_t j = s; j > 0; --j)
    if (kiln_tok_is_crlf(x->cp[i + j - 1])) return j;
  return kiln_tok_spaces(x, i);
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t kiln_tok_match_gpt2(const kiln_tok_text_t* x, size_t i) {
  size_t k = kiln_tok_contraction(x, i, 0);
  if (k) return k;
  int (*classes[3])(uint32_t) = {kiln_tok_is_l, kiln_tok_is_n, kiln_tok_is_other};
  for (int c = 0; c < 3; ++c) {
    size_t sp = x->cp[i] == ' ' && i + 1 < x->n && classes[c](x->cp[i + 1]);
    size_t r = kiln_tok_run(x, i + sp, classes[c]);
    if (r) return sp + r;
  }
  return kiln_tok_spaces(x, i);
}

/* The alternatives cl100k's and o200k's families end with, from i:
 * \p{N}{1,digits}| ?other+trail*|\s*[\r\n]+|\s+(?!\S)|\s+ (trail: [\r\n],
 * or o200k's [\r\n/]). */
static size_t kiln_tok_match_rest(const kiln_tok_text_t* x, size_t i, size_t digits, int (*other)(uint32_t),
                                  int (*trail)(uint32_t)) {
  uint32_t c = x->cp[i];
  if (kiln_tok_is_n(c)) return kiln_tok_run_upto(x, i, kiln_tok_is_n, digits);
  size_t sp = c == ' ' && i + 1 < x->n && other(x->cp[i + 1]);
  size_t r = kiln_tok_run(x, i + sp, other);
  if (r) return sp + r + kiln_tok_run(x, i + sp + r, trail);
  return kiln_tok_newlines_or_spaces(x, i);
}

/* cl100k's family: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
 * \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ (Llama 3);
 * Qwen2's numbers are \p{N} (digits 1); Qwen3.5's words are [\p{L}\p{M}]+
 * and its punctuation [^\s\p{L}\p{M}\p{N}]+ (marks). The lead class stays
 * [^\r\n\p{L}\p{N}], marks included. */
static size_t kiln_tok_match_cl100k(const kiln_tok_text_t* x, size_t i, size_t digits, int marks) {
  int (*word)(uint32_t) = marks ? kiln_tok_is_lm : kiln_tok_is_l;
  int (*other)(uint32_t) = marks ? kiln_tok_is_other_m : kiln_tok_is_other;
  size_t k = kiln_tok_contraction(x, i, 1);
  if (k) return k;
  uint32_t c = x->cp[i];
  int lead = !kiln_tok_is_crlf(c) && !kiln_tok_is_l(c) && !kiln_tok_is_n(c);
  if (lead && i + 1 < x->n && word(x->cp[i + 1])) return 1 + kiln_tok_run(x, i + 1, word);
  if (word(c)) return kiln_tok_run(x, i, word);
  return kiln_tok_match_rest(x, i, digits, other, kiln_tok_is_crlf);
}

/* o200k's words, from i: [^\r\n\p{L}\p{N}]?U*W+C? | [^\r\n\p{L}\p{N}]?U+W*C?
 * with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], W = [\p{Ll}\p{Lm}\p{Lo}\p{M}] (Lm, Lo
 * and marks in both) and C the optional contraction; 0 when neither
 * matches. The lead is taken first, then left out (the engine's order for
 * ?). U*W+: U* takes its whole run; if W cannot follow, the engine gives
 * back one U at a time until W+ can start on one that is also a W, which
 * then ends the match (the U after it is no W). */
static size_t kiln_tok_o200k_word(const kiln_tok_text_t* x, size_t i, int contractions) {
  uint32_t c = x->cp[i];
  int lead = !kiln_tok_is_crlf(c) && !kiln_tok_is_l(c) && !kiln_tok_is_n(c);
  size_t end = 0;
  for (int l = lead; l >= 0 && !end; --l) {
    size_t s = i + (size_t)l, j = s + kiln_tok_run(x, s, kiln_tok_is_u);
    if (j < x->n && kiln_tok_is_w(x->cp[j])) {
      end = j + kiln_tok_run(x, j, kiln_tok_is_w);
    } else {
      for (size_t e = j; e > s && !end; --e)
        if (kiln_tok_is_w(x->cp[e - 1])) end = e;
    }
  }
  for (int l = lead; l >= 0 && !end; --l) {
    size_t s = i + (size_t)l, r = kiln_tok_run(x, s, kiln_tok_is_u);
    if (r) end = s + r + kiln_tok_run(x, s + r, kiln_tok_is_w);
  }
  if (end && contractions && end < x->n) end += kiln_tok_contraction(x, end, 1);
  return end ? end - i : 0;
}

/* o200k (GPT-OSS): the words above with contractions, then \p{N}{1,3}|
 * ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+. Tekken (Mistral):
 * the same without contractions and with \p{N}. */
static size_t kiln_tok_match_o200k(const kiln_tok_text_t* x, size_t i, size_t digits, int contractions) {
  size_t k = kiln_tok_o200k_word(x, i, contractions);
  return k ? k : kiln_tok_match_rest(x, i, digits, kiln_tok_is_other, kiln_tok_is_crlf_slash);
}

/* ---- sequences of splits (DeepSeek) ------------------------------------- */

/* DeepSeek's classes, as their brackets spell them. [!"#$%&'()*+,\-./:;<=>?
 * @\[\\\]^_`{|}~]: ASCII's 32 characters that are neither letters, digits,
 * space nor controls. */
static int kiln_tok_is_ascii_punct(uint32_t c) {
  return c > ' ' && c < 0x7F && !kiln_tok_is_l(c) && !(c >= '0' && c <= '9');
}
static int kiln_tok_is_ascii_letter(uint32_t c) { return c < 0x80 && kiln_tok_is_l(c); }
static int kiln_tok_is_p(uint32_t c) { return kiln_unicode_is_punct(c); }
static int kiln_tok_is_ps(uint32_t c) { return kiln_unicode_is_punct(c) || kiln_unicode_is_symbol(c); }
/* V3's [U+4E00-U+9FA5 U+3040-U+309F U+30A0-U+30FF]: CJK ideographs, hiragana
 * and katakana. */
static int kiln_tok_is_ds3_cjk(uint32_t c) { return (c >= 0x4E00 && c <= 0x9FA5) || (c >= 0x3040 && c <= 0x30FF); }
/* LLM's and Coder's [U+4E00-U+9FA5 U+0800-U+4E00 U+AC00-U+D7FF]: its second
 * range, which reaches the first, takes in every script from Samaritan to
 * CJK (Indic, Thai, Hangul jamo, CJK punctuation, kana ...). */
static int kiln_tok_is_ds_cjk(uint32_t c) { return (c >= 0x800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF); }
/* LLM's [!-/:-~ U+FF01-U+FF0F U+FF1A-U+FF5E U+2018-U+201F U+3000-U+3002]:
 * ASCII's punctuation and symbols, their full-width forms, quotation marks,
 * the ideographic space, comma and full stop. */
static int kiln_tok_is_ds_punct(uint32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x7E) || (c >= 0xFF01 && c <= 0xFF0F) ||
         (c >= 0xFF1A && c <= 0xFF5E) || (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
}
static int kiln_tok_is_ds_letter(uint32_t c) { return kiln_unicode_is_deepseek_letter(c); }

/* \s?X+ from i: one white space joins the run of X after it (else the
 * engine gives the space back and X+ must start at i); 0 when no X. */
static size_t kiln_tok_space_then(const kiln_tok_text_t* x, size_t i, int (*in)(uint32_t)) {
  size_t sp = kiln_tok_is_s(x->cp[i]) && i + 1 < x->n && in(x->cp[i + 1]);
  size_t r = kiln_tok_run(x, i + sp, in);
  return r ? sp + r : 0;
}

/* \s+$ from i: $ holds at the piece's end and before a line feed (the
 * regex engine's Ruby syntax; not before CR, U+0085 or U+2028), so \s+
 * backs off from the end of its run to the last place $ holds, past the
 * run's first character; 0 when there is none. */
static size_t kiln_tok_trailing_spaces(const kiln_tok_text_t* x, size_t i) {
  size_t r = kiln_tok_run(x, i, kiln_tok_is_s);
  for (size_t e = i + r; e > i; --e)
    if (e == x->n || x->cp[e] == '\n') return e - i;
  return 0;
}

/* V3's third split: [ASCII punct][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
 * ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+. The first alternative
 * keeps one ASCII punctuation character with the ASCII letters after it
 * ('s, .com, #include); words take marks and one leading character that is
 * no letter, punctuation, symbol, CR or LF (a space, a tab, a mark, a
 * control); the rest is cl100k's tail with punctuation and symbols for the
 * "other" class. No \p{N} reaches it (the first split took them all): a
 * number here matches nothing, as in the regex (the tail's digits are 0). */
static size_t kiln_tok_ds3_words(const kiln_tok_text_t* x, size_t i) {
  uint32_t c = x->cp[i];
  int next = i + 1 < x->n;
  if (kiln_tok_is_ascii_punct(c) && next && kiln_tok_is_ascii_letter(x->cp[i + 1]))
    return 1 + kiln_tok_run(x, i + 1, kiln_tok_is_ascii_letter);
  int lead = !kiln_tok_is_crlf(c) && !kiln_tok_is_l(c) && !kiln_tok_is_ps(c);
  if (lead && next && kiln_tok_is_lm(x->cp[i + 1])) return 1 + kiln_tok_run(x, i + 1, kiln_tok_is_lm);
  if (kiln_tok_is_lm(c)) return kiln_tok_run(x, i, kiln_tok_is_lm);
  return kiln_tok_match_rest(x, i, 0, kiln_tok_is_ps, kiln_tok_is_crlf);
}

/* One split of a sequence, as its regular expression's form over a class. */
enum {
  SPLIT_ONE,             /* X */
  SPLIT_UPTO3,           /* X{1,3} */
  SPLIT_RUN,             /* X+ */
  SPLIT_SPACE_RUN,       /* \s?X+ */
  SPLIT_TRAILING_SPACES, /* \s+$ */
  SPLIT_DS3_WORDS        /* V3's third (kiln_tok_ds3_words) */
};
typedef struct {
  int form;
  int (*in)(uint32_t); /* X */
} kiln_tok_split_t;

/* Each pattern's splits, applied in order to every piece the ones before
 * made (their matches too), as Hugging Face's Sequence of Split
 * pre-tokenizers (behavior Isolated) applies them; ByteLevel follows. */
#define KILN_TOK_MAX_SPLITS 6
static const struct {
  int n;
  kiln_tok_split_t split[KILN_TOK_MAX_SPLITS];
} kiln_tok_sequences[PATTERN_COUNT] = {
    /* \p{N}{1,3}, [CJK kana]+, the words above */
    [PATTERN_DEEPSEEK3] = {3,
                           {{SPLIT_UPTO3, kiln_tok_is_n}, {SPLIT_RUN, kiln_tok_is_ds3_cjk}, {SPLIT_DS3_WORDS, NULL}}},
    /* [\r\n], \s?[letters]+, \s?[punctuation]+, \s+$, [CJK ...]+, \p{N}+ */
    [PATTERN_DEEPSEEK_LLM] = {6,
                              {{SPLIT_ONE, kiln_tok_is_crlf},
                               {SPLIT_SPACE_RUN, kiln_tok_is_ds_letter},
                               {SPLIT_SPACE_RUN, kiln_tok_is_ds_punct},
                               {SPLIT_TRAILING_SPACES, NULL},
                               {SPLIT_RUN, kiln_tok_is_ds_cjk},
                               {SPLIT_RUN, kiln_tok_is_n}}},
    /* [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK ...]+, \p{N} */
    [PATTERN_DEEPSEEK_CODER] = {5,
                                {{SPLIT_ONE, kiln_tok_is_crlf},
                                 {SPLIT_SPACE_RUN, kiln_tok_is_l},
                                 {SPLIT_SPACE_RUN, kiln_tok_is_p},
                                 {SPLIT_RUN, kiln_tok_is_ds_cjk},
                                 {SPLIT_ONE, kiln_tok_is_n}}},
};

/* The length of the split's match at i of the piece x, 0 when none starts
 * there. None is empty. */
static size_t kiln_tok_split_at(const kiln_tok_split_t* s, const kiln_tok_text_t* x, size_t i) {
  switch (s->form) {
    case SPLIT_ONE: return s->in(x->cp[i]) ? 1 : 0;
    case SPLIT_UPTO3: return kiln_tok_run_upto(x, i, s->in, 3);
    case SPLIT_RUN: return kiln_tok_run(x, i, s->in);
    case SPLIT_SPACE_RUN: return kiln_tok_space_then(x, i, s->in);
    case SPLIT_TRAILING_SPACES: return kiln_tok_trailing_spaces(x, i);
    case SPLIT_DS3_WORDS: return kiln_tok_ds3_words(x, i);
    default: return 0;
  }
}

/* The leftmost match at or after i (its start; x->n when none), *len its
 * length, as the regex engine searches. */
static size_t kiln_tok_split_find(const kiln_tok_split_t* s, const kiln_tok_text_t* x, size_t i, size_t* len) {
  for (; i < x->n; ++i) {
    *len = kiln_tok_split_at(s, x, i);
    if (*len) return i;
    /* \s+$ failing at a space fails through the rest of its run (every
     * start there reaches the same ends): skip it, so that a long run
     * costs its length once, not its square. */
    if (s->form == SPLIT_TRAILING_SPACES) {
      size_t r = kiln_tok_run(x, i, kiln_tok_is_s);
      if (r) i += r - 1;
    }
  }
  *len = 0;
  return x->n;
}

/* Scratch for merging words of up to m + 1 symbols (a piece of a text of
 * m bytes with a space prepended); spaced: that piece's bytes. */
typedef struct {
  int32_t *sym, *work;
  kiln_tok_cand_t* heap;
  uint8_t* spaced;
} kiln_tok_scratch_t;

static int kiln_tok_scratch_make(kiln_tok_scratch_t* w, size_t m) {
  w->sym = malloc((m + 1) * sizeof(int32_t));
  w->work = malloc(2 * (m + 1) * sizeof(int32_t));
  w->heap = malloc(3 * (m + 1) * sizeof(kiln_tok_cand_t)); /* n - 1 pairs, then 2 per merge */
  w->spaced = malloc(m + 1);
  return w->sym && w->work && w->heap && w->spaced;
}

static void kiln_tok_scratch_free(kiln_tok_scratch_t* w) {
  free(w->sym), free(w->work), free(w->heap), free(w->spaced);
}

static void kiln_tok_bytes_word(const kiln_tokenizer_t* t, const uint8_t* b, size_t n, kiln_tok_scratch_t* w,
                                kiln_tok_ids_t* out) {
  if (t->flags & FLAG_IGNORE_MERGES) {
    int32_t id = kiln_tok_lookup(t, b, n);
    if (id >= 0) {
      kiln_tok_push(out, id);
      return;
    }
  }
  for (size_t j = 0; j < n; ++j) w->sym[j] = t->byte_token[b[j]];
  kiln_tok_merge_word(t, w->sym, n, w->work, w->heap, out);
}

/* Whether each piece gets ByteLevel's space (FLAG_PREPEND_EACH), rather
 * than the text once. */
static int kiln_tok_prepend_each(const kiln_tokenizer_t* t) {
  return (t->flags & FLAG_PREPEND) && ((t->flags & FLAG_PREPEND_EACH) || t->pattern >= PATTERN_LLAMA3);
}

/* A piece b[0, n) as BPE words it: with a space before it where each
 * piece gets one and it does not start with one. */
static void kiln_tok_piece_word(const kiln_tokenizer_t* t, const uint8_t* b, size_t n, kiln_tok_scratch_t* w,
                                kiln_tok_ids_t* out) {
  if (n > 0 && b[0] != ' ' && kiln_tok_prepend_each(t)) {
    w->spaced[0] = ' ';
    memcpy(w->spaced + 1, b, n);
    b = w->spaced, ++n;
  }
  kiln_tok_bytes_word(t, b, n, w, out);
}

/* The length in code points of the piece of text at i (at least 1). */
static size_t kiln_tok_match(const kiln_tokenizer_t* t, const kiln_tok_text_t* x, size_t i) {
  size_t digits = (size_t)kiln_tok_patterns[t->pattern].digits, len = x->n - i;
  switch (kiln_tok_patterns[t->pattern].family) {
    case FAMILY_GPT2: len = kiln_tok_match_gpt2(x, i); break;
    case FAMILY_CL100K: len = kiln_tok_match_cl100k(x, i, digits, kiln_tok_patterns[t->pattern].marks); break;
    case FAMILY_O200K: len = kiln_tok_match_o200k(x, i, digits, kiln_tok_patterns[t->pattern].contractions); break;
    default: break; /* no pattern: the text is one piece */
  }
  return len ? len : 1; /* (every character matches some alternative) */
}

/* Splits the piece x[from, to) of the text b by split k of the pattern's
 * sequence: its matches and the gaps between them are pieces (Isolated),
 * each split further by the splits after k; past the last split, a piece
 * is a word for BPE. Each split sees its piece alone: the matchers stop at
 * its end (a lookahead or $ there finds nothing after it). Recursion as
 * deep as the splits are many (at most KILN_TOK_MAX_SPLITS). */
static void kiln_tok_split_piece(const kiln_tokenizer_t* t, const kiln_tok_text_t* x, size_t from, size_t to, int k,
                                 const uint8_t* b, kiln_tok_scratch_t* w, kiln_tok_ids_t* out) {
  if (from == to) return;
  if (k == kiln_tok_sequences[t->pattern].n) {
    kiln_tok_piece_word(t, b + x->at[from], x->at[to] - x->at[from], w, out);
    return;
  }
  const kiln_tok_split_t* s = &kiln_tok_sequences[t->pattern].split[k];
  kiln_tok_text_t piece = {x->cp + from, x->at + from, to - from};
  size_t gap = 0;
  while (gap < piece.n) {
    size_t len, i = kiln_tok_split_find(s, &piece, gap, &len);
    kiln_tok_split_piece(t, &piece, gap, i, k + 1, b, w, out);
    if (i == piece.n) break;
    kiln_tok_split_piece(t, &piece, i, i + len, k + 1, b, w, out);
    gap = i + len;
  }
}

static int kiln_tok_encode_byte_level(const kiln_tokenizer_t* t, const char* s, size_t n, kiln_tok_ids_t* out) {
  int prefix = (t->flags & FLAG_PREPEND) && !kiln_tok_prepend_each(t) && n > 0 && s[0] != ' ';
  size_t m = n + (size_t)prefix;
  uint8_t* b = malloc(m + 1);
  uint32_t* cp = malloc((m + 1) * sizeof(uint32_t));
  size_t* at = malloc((m + 1) * sizeof(size_t));
  kiln_tok_scratch_t w;
  if (!kiln_tok_scratch_make(&w, m) || !b || !cp || !at) {
    free(b), free(cp), free(at), kiln_tok_scratch_free(&w);
    return 0;
  }
  if (prefix) b[0] = ' ';
  memcpy(b + prefix, s, n);
  size_t k = 0;
  for (size_t i = 0; i < m;) {
    size_t len;
    cp[k] = kiln_utf8_next((const char*)b + i, m - i, &len);
    at[k++] = i;
    i += len;
  }
  at[k] = m;
  kiln_tok_text_t x = {cp, at, k};
  if (kiln_tok_patterns[t->pattern].family == FAMILY_SEQUENCE) {
    kiln_tok_split_piece(t, &x, 0, k, 0, b, &w, out);
  } else {
    for (size_t i = 0; i < k;) {
      size_t len = kiln_tok_match(t, &x, i);
      kiln_tok_piece_word(t, b + at[i], at[i + len] - at[i], &w, out);
      i += len;
    }
  }
  free(b), free(cp), free(at), kiln_tok_scratch_free(&w);
  return 1;
}

/* ---- SentencePiece-style ------------------------------------------------ */

static int kiln_tok_encode_sentencepiece(const kiln_tokenizer_t* t, const char* s, size_t n, int first,
                                         kiln_tok_ids_t* out) {
  static const char mark[3] = {(char)0xE2, (char)0x96, (char)0x81}; /* U+2581 */
  size_t spaces = 0;
  for (size_t i = 0; i < n; ++i) spaces += s[i] == ' ';
  int prepend = (t->flags & FLAG_PREPEND) && n > 0 && (first || !(t->flags & FLAG_PREPEND_FIRST));
  if (prepend && (t->flags & FLAG_PREPEND_UNLESS_THERE) && (s[0] == ' ' || (n >= 3 && !memcmp(s, mark, 3))))
    prepend = 0;
  size_t m = n + 2 * spaces + 3 * (size_t)prepend;
  char* b = malloc(m + 1);
  kiln_tok_scratch_t w;
  if (!kiln_tok_scratch_make(&w, m) || !b) {
    free(b), kiln_tok_scratch_free(&w);
    return 0;
  }
  int32_t* sym = w.sym;
  size_t k = 0;
  if (prepend) memcpy(b, mark, 3), k = 3;
  for (size_t i = 0; i < n; ++i)
    if (s[i] == ' ') memcpy(b + k, mark, 3), k += 3;
    else b[k++] = s[i];
  size_t ns = 0;
  for (size_t i = 0; i < k;) {
    size_t len;
    kiln_utf8_next(b + i, k - i, &len);
    int32_t id = kiln_tok_lookup(t, b + i, len);
    if (id < 0 && (t->flags & FLAG_BYTE_FALLBACK)) {
      int all = 1;
      for (size_t j = 0; j < len; ++j) all &= t->byte_token[(uint8_t)b[i + j]] >= 0;
      if (all) {
        for (size_t j = 0; j < len; ++j) sym[ns++] = t->byte_token[(uint8_t)b[i + j]];
        i += len;
        continue;
      }
    }
    if (id < 0) {
      id = t->unk;
      if (id < 0) { /* no unknown token: the character is dropped, as Hugging Face's BPE drops it */
        i += len;
        continue;
      }
      if ((t->flags & FLAG_FUSE_UNK) && ns > 0 && sym[ns - 1] == id) {
        i += len;
        continue;
      }
    }
    sym[ns++] = id;
    i += len;
  }
  kiln_tok_merge_word(t, sym, ns, w.work, w.heap, out);
  free(b), kiln_tok_scratch_free(&w);
  return 1;
}

/* ---- the text ----------------------------------------------------------- */

/* The longest added token at s[0, n), or -1. */
static int32_t kiln_tok_added_at(const kiln_tokenizer_t* t, const char* s, size_t n) {
  if (!t->added_first[(uint8_t)s[0]]) return -1; /* most bytes start none */
  for (uint32_t a = 0; a < t->n_added; ++a) {
    int32_t id = t->added[a].id;
    size_t len = t->start[id + 1] - t->start[id];
    if (len <= n && (uint8_t)s[0] == t->bytes[t->start[id]] && !memcmp(s, t->bytes + t->start[id], len)) return id;
  }
  return -1;
}

kiln_status_t kiln_tokenizer_encode(const kiln_tokenizer_t* t, const char* text, size_t n,
                                        int add_special, int32_t** out_ids, size_t* out_count) {
  kiln_tok_ids_t ids = {0};
  *out_ids = NULL;
  *out_count = 0;
  for (size_t i = 0; i < n && t->bytes_missing; ++i)
    if (t->byte_token[(uint8_t)text[i]] < 0)
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "the text is not UTF-8 at byte %zu (0x%02x), a byte the tokenizer has no token for",
                              i, (unsigned)(uint8_t)text[i]);
  if (add_special)
    for (uint32_t i = 0; i < t->n_prefix; ++i) kiln_tok_push(&ids, t->prefix[i]);
  int ok = 1;
  size_t from = 0;
  for (size_t i = 0; i <= n && ok;) {
    int32_t added = i < n ? kiln_tok_added_at(t, text + i, n - i) : -1;
    if (i < n && added < 0) {
      ++i;
      continue;
    }
    /* The normalizer sees the text between added tokens (tokenizers'
     * order): NFC, where the tokenizer has it. */
    char* nfc = NULL;
    size_t nfc_n = 0, at = 0;
    const int r = i > from && (t->flags & FLAG_NFC) ? kiln_unicode_nfc(text + from, i - from, &nfc, &nfc_n, &at)
                                                      : KILN_UNICODE_NFC_OK;
    if (r == KILN_UNICODE_NFC_UNLIKE) {
      size_t len;
      uint32_t cp = kiln_utf8_next(text + from + at, i - from - at, &len);
      free(ids.v);
      return kiln_status_make(KILN_UNSUPPORTED,
                              "the text needs Unicode's NFC normalization, and at byte %zu holds U+%04X, "
                              "which the tokenizers library normalizes with older Unicode data than "
                              "kiln's (a mark or composition added since Unicode 11-13): kiln does not "
                              "guess which; pass the text normalized (Python: "
                              "tokenizer.backend_tokenizer.normalizer.normalize_str(text))",
                              from + at, (unsigned)cp);
    }
    ok = r == KILN_UNICODE_NFC_OK;
    const char* piece = nfc ? nfc : text + from;
    const size_t piece_n = nfc ? nfc_n : i - from;
    if (ok && i > from)
      ok = t->kind == KIND_BYTE_LEVEL ? kiln_tok_encode_byte_level(t, piece, piece_n, &ids)
                                      : kiln_tok_encode_sentencepiece(t, piece, piece_n, from == 0, &ids);
    free(nfc);
    if (added < 0) break;
    kiln_tok_push(&ids, added);
    i += t->start[added + 1] - t->start[added];
    from = i;
  }
  if (add_special)
    for (uint32_t i = 0; i < t->n_suffix; ++i) kiln_tok_push(&ids, t->suffix[i]);
  if (!ok || ids.oom) {
    free(ids.v);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "tokenizer: out of memory encoding %zu bytes", n);
  }
  *out_ids = ids.v;
  *out_count = ids.n;
  return NULL;
}
