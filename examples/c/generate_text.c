/* Greedy text generation in plain C with the public API (include/kiln.h)
 * alone: the smallest loop docs/c-api.md ("A generation loop") describes.
 *
 *   generate_text STEP.kiln "Once upon a time" [max_new_tokens]
 *
 * STEP.kiln is a one-row step saved from Python with its tokenizer:
 *
 *   step = kiln.llm.StaticCacheStep(model, max_length=512)
 *   kiln.save(step.trace(ids, weights_dtype="int4:a8"), "step.kiln", tokenizer=tok)
 *
 * Its inputs: the new tokens (int64 [1, T]), the cache slots filled so far
 * (int64 []), then the KV cache, each updated by an output in place; its
 * last output is the logits (float32 [1, vocabulary]). The prompt goes in
 * as one call, then a token a call, each the previous call's argmax,
 * printed as the bytes the tokenizer says it adds, until the tokenizer's
 * end id, max_new_tokens or a full cache. `kiln generate` is the full
 * version (batches, sampling, timing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static int fail(kiln_error_t* e, const char* what) {
  fprintf(stderr, "generate_text: %s: %s\n", what, kiln_error_message(e));
  kiln_error_free(e);
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: generate_text STEP.kiln TEXT [max_new_tokens]\n");
    return 2;
  }
  long max_new = argc > 3 ? strtol(argv[3], NULL, 10) : 32;
  kiln_session_t* s = NULL;
  kiln_error_t* e = kiln_session_create_from_file(argv[1], NULL, &s);
  if (e) return fail(e, argv[1]);
  int rc = 1;
  const int32_t n_in = kiln_session_input_count(s), n_out = kiln_session_output_count(s);
  kiln_buffer_t* in = calloc((size_t)n_in, sizeof(kiln_buffer_t));
  kiln_buffer_t* out = calloc((size_t)n_out, sizeof(kiln_buffer_t));
  int64_t(*shapes)[KILN_MAX_DIMS] = calloc((size_t)(n_in + n_out), sizeof(*shapes));
  int64_t *prompt = NULL, past = 0, token = 0, max_tokens = 0;
  float* logits = NULL;
  size_t n_prompt = 0;
  const int32_t* eos = NULL;
  int32_t n_eos = 0;
  if (!in || !out || !shapes || n_in < 3 || n_out < 2 || !kiln_session_has_tokenizer(s)) {
    fprintf(stderr, "generate_text: %s is not a one-row generation step saved with its tokenizer\n", argv[1]);
    goto done;
  }
  /* The prompt's ids, as tok(text) gives them (BOS first). */
  if ((e = kiln_session_tokenize(s, argv[2], strlen(argv[2]), 1, NULL, 0, &n_prompt)) ||
      !(prompt = malloc(n_prompt * sizeof(int64_t))) ||
      (e = kiln_session_tokenize(s, argv[2], strlen(argv[2]), 1, prompt, n_prompt, &n_prompt)) ||
      (e = kiln_session_eos_ids(s, &eos, &n_eos))) {
    rc = e ? fail(e, "the prompt") : 1;
    goto done;
  }
  /* The cache: zeroed buffers of each cache input's shape (a symbolic
   * dimension here can only be the rows: 1), each also the buffer of the
   * output that updates it. The token input's symbolic length bounds the
   * cache. */
  for (int32_t i = 0; i < n_in; ++i) {
    kiln_tensor_info_t info;
    if ((e = kiln_session_input_info(s, i, &info))) {
      rc = fail(e, "input info");
      goto done;
    }
    size_t bytes = kiln_element_type_size(info.type);
    for (int32_t d = 0; d < info.rank; ++d) {
      shapes[i][d] = info.shape[d] == KILN_DIM_SYMBOLIC ? 1 : info.shape[d];
      bytes *= (size_t)shapes[i][d];
    }
    if (i == 0) {
      kiln_dim_info_t len;
      if ((e = kiln_session_input_dim(s, 0, 1, &len))) {
        rc = fail(e, "the token input");
        goto done;
      }
      max_tokens = len.max;
    }
    in[i] = (kiln_buffer_t){i >= 2 ? calloc(1, bytes + 1) : NULL, bytes, info.type, info.rank, shapes[i]};
    if (i >= 2 && !in[i].data) goto done;
  }
  for (int32_t o = 0; o < n_out; ++o) {
    int32_t updates = -1, in_place = 0;
    kiln_tensor_info_t info;
    if ((e = kiln_session_output_updates(s, o, &updates, &in_place)) || (e = kiln_session_output_info(s, o, &info))) {
      rc = fail(e, "output info");
      goto done;
    }
    if (updates >= 2 && in_place) {
      out[o] = in[updates]; /* the cache is written where it is */
    } else if (o == n_out - 1 && info.rank == 2 && info.type == KILN_ELEMENT_FLOAT32) {
      shapes[n_in + o][0] = 1, shapes[n_in + o][1] = info.shape[1];
      logits = calloc((size_t)info.shape[1], sizeof(float));
      out[o] = (kiln_buffer_t){logits, (size_t)info.shape[1] * sizeof(float), info.type, 2, shapes[n_in + o]};
    } else {
      fprintf(stderr, "generate_text: output %d is neither an in-place cache update nor the logits\n", (int)o);
      goto done;
    }
  }
  if (!logits) goto done;
  for (long made = 0; made < max_new; ++made) {
    /* The prompt in one call, then the last token. */
    const int64_t n = made ? 1 : (int64_t)n_prompt;
    if (past + n > max_tokens) break;
    shapes[0][0] = 1, shapes[0][1] = n;
    in[0] = (kiln_buffer_t){made ? &token : prompt, (size_t)n * sizeof(int64_t), KILN_ELEMENT_INT64, 2, shapes[0]};
    in[1] = (kiln_buffer_t){&past, sizeof past, KILN_ELEMENT_INT64, 0, NULL};
    if ((e = kiln_session_run(s, in, n_in, out, n_out))) {
      rc = fail(e, "a step");
      goto done;
    }
    past += n;
    token = 0; /* greedy: the first largest logit, as torch.argmax */
    for (int64_t v = 1; v < shapes[n_in + n_out - 1][1]; ++v)
      if (logits[v] > logits[token]) token = v;
    size_t len = 0;
    const char* bytes = kiln_session_token_bytes(s, token, &len);
    fwrite(bytes, 1, len, stdout);
    fflush(stdout);
    int end = 0;
    for (int32_t k = 0; k < n_eos; ++k) end |= token == eos[k];
    if (end) break;
  }
  printf("\n");
  rc = 0;
done:
  for (int32_t i = 2; in && i < n_in; ++i) free(in[i].data);
  free(in), free(out), free(shapes), free(prompt), free(logits);
  kiln_session_release(s);
  return rc;
}
