/* Text in and out of a generation loop (the C API's kiln_session_tokenize
 * and kiln_session_token_bytes, `kiln generate --text`, `kiln tokenize`): a
 * BPE tokenizer carried in the artifact's "tokenizer" section, which
 * kiln.save(..., tokenizer=) writes
 * from a Hugging Face tokenizer (python/kiln/tokenizer.py). It encodes as
 * Hugging Face's tokenizers library does for the two families most causal
 * LMs use, and decodes a token at a time:
 *   byte-level BPE (GPT-2, Llama 3, Qwen2, Qwen3.5, GPT-OSS, Mistral's
 *     Tekken, DeepSeek V3, LLM and Coder): the text split by the model's
 *     pattern (DeepSeek's: several, each splitting the pieces of the one
 *     before), each piece's bytes merged;
 *   SentencePiece-style BPE (Llama 2, TinyLlama, Mistral v0.1): spaces as
 *     U+2581 with one prepended (the Prepend normalizer, or Metaspace), the
 *     characters merged, bytes for characters outside the vocabulary
 *     (<0x41>), else the unknown token.
 * Added tokens (<|begin_of_text|>, </s>) are found in the text first, as
 * whole tokens; the prefix and suffix ids (BOS) are the tokenizer's own.
 *
 * Section layout (little-endian; the loader checks every count, id and
 * length against the section, which is exactly as long as they say):
 *   0   8  "KILNTOKN"
 *   8   4  u32 version (1)
 *  12   4  u32 kind: 1 byte-level, 2 SentencePiece-style
 *  16   4  u32 pattern (byte-level): 1 GPT-2, 2 Llama 3 (cl100k: numbers of
 *          1-3 digits), 3 Llama 3's with 1-digit numbers (Qwen2), 4 o200k
 *          (GPT-OSS), 5 Tekken (o200k's words without contractions, 1-digit
 *          numbers: Mistral Nemo and later), 6 Qwen3.5 (Qwen2's with
 *          combining marks in words), 7 DeepSeek V3 (and R1: \p{N}{1,3},
 *          CJK and kana runs, then words, punctuation and symbols, space),
 *          8 DeepSeek LLM (six splits, an explicit letter class), 9
 *          DeepSeek Coder (five splits); else 0
 *  20   4  u32 flags: bit 0 a word found whole in the vocabulary is not
 *          merged (ignore_merges); bit 1 a space is prepended to each piece
 *          of text (byte-level add_prefix_space) or U+2581 (SentencePiece);
 *          bit 2 U+2581 only where the text does not start with one (the
 *          Metaspace form); bit 3 only before the text's first piece
 *          (prepend_scheme "first"); bit 4 byte fallback; bit 5 consecutive
 *          unknown characters make one unknown token (fuse_unk); bit 6 the
 *          tokenizer normalizes to NFC (Qwen2): the text between added
 *          tokens is normalized first, as tokenizers does (text needing it
 *          that holds a code point tokenizers' older Unicode data
 *          normalizes otherwise is refused: kiln_unicode_nfc)
 *  24   4  u32 tokens T (at most 2^24)
 *  28   4  u32 merges M
 *  32   4  u32 added tokens A
 *  36   4  i32 the unknown token's id, or -1
 *  40   4  u32 prefix ids P (at most 16)
 *  44   4  u32 suffix ids S (at most 16)
 *  48   4  u32 end-of-sequence ids E (at most 16; `kiln generate`'s default --eos)
 *  52      P, S then E u32 ids; T u32 byte lengths (each at most 1024); the
 *          T tokens' bytes (byte-level: the raw bytes, not GPT-2's
 *          printable stand-ins; every byte has a token, but those UTF-8
 *          never uses, 0xC0, 0xC1 and 0xF5-0xFF, may lack one, as DeepSeek
 *          LLM's and Coder's do); M records (u32 left, u32 right) in rank
 *          order, each pair's bytes a token; A records (u32 id, u32 flags:
 *          bit 0 special, skipped when decoding). */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_status.h"

#define KILN_TOKENIZER_SECTION "tokenizer"

typedef struct kiln_tokenizer_s kiln_tokenizer_t;

/* Builds a tokenizer from a section's bytes (copied). Anything malformed is
 * KILN_CORRUPT_ARTIFACT saying what; *out is then NULL. */
kiln_status_t kiln_tokenizer_load(const void* bytes, size_t size, kiln_tokenizer_t** out);
void kiln_tokenizer_free(kiln_tokenizer_t* t);

int32_t kiln_tokenizer_size(const kiln_tokenizer_t* t);
/* "byte-level BPE (Llama 3's pattern), 128256 tokens, 280147 merges, BOS
 * 128000, end 128001" into buf. */
const char* kiln_tokenizer_describe(const kiln_tokenizer_t* t, char* buf, size_t size);

/* The end-of-sequence ids (borrowed) and their count. */
const int32_t* kiln_tokenizer_eos(const kiln_tokenizer_t* t, int32_t* count);

/* The ids of n bytes of text (UTF-8; a malformed byte is a character of no
 * class, or KILN_INVALID_ARGUMENT when the vocabulary has no token for it),
 * with the prefix and suffix ids when add_special. *out_ids is a
 * new array (free()) of *out_count ids. */
kiln_status_t kiln_tokenizer_encode(const kiln_tokenizer_t* t, const char* text, size_t n,
                                        int add_special, int32_t** out_ids, size_t* out_count);

/* The bytes token id adds to a decoded text after other tokens (a special
 * token none; SentencePiece's U+2581 a space, <0x0A> its byte; a token may
 * end inside a UTF-8 character, which the next ones finish). Borrowed. */
const char* kiln_tokenizer_piece(const kiln_tokenizer_t* t, int32_t id, size_t* len);

#endif /* KILN_TOKENIZER_H */
