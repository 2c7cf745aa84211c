/* The generation step `kiln generate` runs (kiln_cli_generate.c), through
 * the public C API: its signature checked, the KV cache and the other
 * buffers made, one call at a time.
 *
 * A step (kiln.llm.StaticCacheStep saves one) takes
 *   input 0   int64 [B, T]  the new tokens of B rows (B fixed, or symbolic:
 *                           as many as the prompts; T symbolic: a whole
 *                           prompt at once; T fixed at 1: a token a call)
 *   input 1   int64 []      how many slots of the cache earlier calls filled
 *   the KV cache: inputs each updated by an output (kiln_session_output_updates)
 *   optionally int64 [B]    each row's left padding: the slots before its
 *                           prompt, masked out (rows of different lengths)
 * and gives, besides the cache's updates, one output float32 [B, V]: the
 * logits of each row's last new token. */
#ifndef KILN_CLI_GENERATE_STEP_H
#define KILN_CLI_GENERATE_STEP_H

#include <stdint.h>

#include "kiln.h"

typedef struct kiln_gen_step_s {
  kiln_session_t* session;
  int32_t n_inputs, n_outputs;
  int64_t batch;      /* B: the step's rows, or the prompts' count when it is symbolic */
  const char* rows;   /* B's symbol when symbolic (borrowed from the session), else NULL */
  int64_t max_tokens; /* T's maximum (the cache's length), or INT64_MAX when T is 1 */
  int64_t vocab;
  int32_t logits;     /* the output index of the logits */
  int32_t pad;        /* the input index of the rows' padding, or -1 */
  int32_t one_by_one; /* T is fixed at 1 */
  int64_t* padding;   /* B: the values the pad input passes (set by the caller) */
  kiln_buffer_t* in;  /* n_inputs */
  kiln_buffer_t* out; /* n_outputs */
  void** spare;       /* per output: its buffer when not an input's own (freed here) */
  int32_t* update;    /* per input: the output that updates it, or -1 */
  uint8_t* in_place;  /* per input: that output may be given the input's own buffer */
  int64_t (*shapes)[KILN_MAX_DIMS];
  int64_t ids_shape[2];
} kiln_gen_step_t;

/* Prints "kiln: WHAT: <the error's message>", frees err; returns 1. */
int kiln_gen_fail(kiln_error_t* err, const char* what);

/* Checks s->session's signature (the step of FILE) for `rows` prompts and
 * makes the zeroed cache and the other buffers. Returns 0, or 1 having
 * said what is wrong. */
int kiln_gen_step_prepare(kiln_gen_step_t* s, const char* file, int64_t rows);

/* One call: ids [B, n] (row-major) at slots past.., then the cache updates
 * not made in place copied into their inputs. */
kiln_error_t* kiln_gen_step_call(kiln_gen_step_t* s, const int64_t* ids, int64_t n, int64_t past);

/* Row r's logits after a call. */
static inline const float* kiln_gen_step_logits(const kiln_gen_step_t* s, int64_t r) {
  return (const float*)s->out[s->logits].data + r * s->vocab;
}

/* Frees the buffers and releases the session. */
void kiln_gen_step_free(kiln_gen_step_t* s);

#endif /* KILN_CLI_GENERATE_STEP_H */
