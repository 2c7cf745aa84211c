/* The step `kiln generate` runs: signature, buffers, calls
 * (kiln_cli_generate_step.h). Public C API only. */
#include "tools/kiln_cli_generate_step.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kiln_gen_fail(kiln_error_t* err, const char* what) {
  fprintf(stderr, "kiln: %s: %s\n", what, kiln_error_message(err));
  kiln_error_free(err);
  return 1;
}

void kiln_gen_step_free(kiln_gen_step_t* s) {
  /* Inputs 0 and 1 borrow the caller's ids and count; the pad input
   * borrows s->padding; the others are the cache, owned here. */
  for (int32_t i = 2; s->in && i < s->n_inputs; ++i)
    if (i != s->pad) free(s->in[i].data);
  for (int32_t o = 0; s->spare && o < s->n_outputs; ++o) free(s->spare[o]);
  free(s->in);
  free(s->out);
  free(s->spare);
  free(s->update);
  free(s->in_place);
  free(s->shapes);
  free(s->padding);
  kiln_session_release(s->session);
  memset(s, 0, sizeof *s);
}

static void* kiln_gen_zeros(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  void* p = aligned_alloc(64, n ? n : 64);
  if (p) memset(p, 0, n ? n : 64);
  return p;
}

/* A tensor's type and shape for an error message ("int64 [B, N]"; N: symbolic). */
static const char* kiln_gen_shape(const kiln_tensor_info_t* t, char* buf, size_t size) {
  size_t k = (size_t)snprintf(buf, size, "%s [", kiln_element_type_name(t->type));
  for (int32_t d = 0; d < t->rank && k < size; ++d) {
    if (t->shape[d] == KILN_DIM_SYMBOLIC)
      k += (size_t)snprintf(buf + k, size - k, d ? ", N" : "N");
    else
      k += (size_t)snprintf(buf + k, size - k, d ? ", %" PRId64 : "%" PRId64, t->shape[d]);
  }
  if (k < size) snprintf(buf + k, size - k, "]");
  return buf;
}

static int kiln_gen_oom(void) {
  fputs("kiln: generate: out of memory\n", stderr);
  return 1;
}

/* Dimension `d` of input (or output) `index`, of size `size` (its info's),
 * is the rows': B itself, or B's symbol. */
static int kiln_gen_is_rows(const kiln_gen_step_t* s, int output, int32_t index, int32_t d, int64_t size) {
  if (!s->rows) return size == s->batch;
  if (size != KILN_DIM_SYMBOLIC) return 0;
  kiln_dim_info_t info;
  kiln_error_t* err = output ? kiln_session_output_dim(s->session, index, d, &info)
                             : kiln_session_input_dim(s->session, index, d, &info);
  kiln_error_free(err);
  return !err && info.symbol && !strcmp(info.symbol, s->rows);
}

/* An input or output whose only symbolic size, if any, is its first, the rows'. */
static int kiln_gen_fixed_but_rows(const kiln_gen_step_t* s, int output, int32_t index,
                                   const kiln_tensor_info_t* t) {
  for (int32_t d = 0; d < t->rank; ++d)
    if (t->shape[d] == KILN_DIM_SYMBOLIC && (d || !kiln_gen_is_rows(s, output, index, 0, t->shape[0])))
      return 0;
  return 1;
}

/* Inputs 0 and 1: the tokens [B, N or 1] and the count []; B is the
 * step's, or `rows` when symbolic (within its range). */
static int kiln_gen_step_check_ids(kiln_gen_step_t* s, const char* file, kiln_dim_info_t* t_dim,
                                   int64_t rows) {
  kiln_tensor_info_t ids, past;
  char buf[128];
  kiln_error_t* err;
  if (s->n_inputs < 2) {
    fprintf(stderr, "kiln: generate: '%s' takes %d input(s); a generation step takes the new "
                    "tokens, the count of cached tokens and the cache\n", file, (int)s->n_inputs);
    return 1;
  }
  if ((err = kiln_session_input_info(s->session, 0, &ids)) ||
      (err = kiln_session_input_info(s->session, 1, &past)))
    return kiln_gen_fail(err, "generate");
  if (ids.type != KILN_ELEMENT_INT64 || ids.rank != 2 ||
      (ids.shape[0] != KILN_DIM_SYMBOLIC && ids.shape[0] < 1) ||
      (ids.shape[1] != KILN_DIM_SYMBOLIC && ids.shape[1] != 1)) {
    fprintf(stderr, "kiln: generate: input 0 ('%s') of '%s' should be the new tokens, int64 "
                    "[B, N] (B rows, N symbolic or 1), got %s\n", ids.name, file,
            kiln_gen_shape(&ids, buf, sizeof buf));
    return 1;
  }
  if (past.type != KILN_ELEMENT_INT64 || past.rank != 0) {
    fprintf(stderr, "kiln: generate: input 1 ('%s') of '%s' should be the count of cached tokens, "
                    "int64 [], got %s\n", past.name, file, kiln_gen_shape(&past, buf, sizeof buf));
    return 1;
  }
  s->batch = ids.shape[0];
  if (s->batch == KILN_DIM_SYMBOLIC) {
    kiln_dim_info_t b;
    if ((err = kiln_session_input_dim(s->session, 0, 0, &b))) return kiln_gen_fail(err, "generate");
    if (rows < b.min || rows > b.max) {
      fprintf(stderr, "kiln: generate: %" PRId64 " prompts for a step of %" PRId64 "..%" PRId64
                      " rows (kiln.llm.StaticCacheStep(model, max_length, batch=%" PRId64
                      ") makes one for them)\n", rows, b.min, b.max, rows);
      return 1;
    }
    s->batch = rows;
    s->rows = b.symbol;
  }
  s->one_by_one = ids.shape[1] == 1;
  if (!s->one_by_one && (err = kiln_session_input_dim(s->session, 0, 1, t_dim)))
    return kiln_gen_fail(err, "generate");
  return 0;
}

/* The outputs: which input each updates, and the logits [B, V]. */
static int kiln_gen_step_check_outputs(kiln_gen_step_t* s, const char* file) {
  kiln_tensor_info_t info;
  char buf[128];
  kiln_error_t* err;
  s->logits = -1;
  for (int32_t o = 0; o < s->n_outputs; ++o) {
    int32_t input = -1, in_place = 0;
    if ((err = kiln_session_output_updates(s->session, o, &input, &in_place)) ||
        (err = kiln_session_output_info(s->session, o, &info)))
      return kiln_gen_fail(err, "generate");
    if (input >= 2) {
      s->update[input] = o;
      s->in_place[input] = (uint8_t)(in_place != 0);
      continue;
    }
    if (input >= 0) {
      fprintf(stderr, "kiln: generate: output %d of '%s' updates input %d, which should be %s\n",
              (int)o, file, (int)input, input ? "the count of cached tokens" : "the new tokens");
      return 1;
    }
    if (s->logits >= 0 || info.type != KILN_ELEMENT_FLOAT32 || info.rank != 2 ||
        !kiln_gen_is_rows(s, 1, o, 0, info.shape[0]) || info.shape[1] <= 0) {
      fprintf(stderr, "kiln: generate: '%s' should have one output besides the cache's, the "
                      "logits, float32 [%" PRId64 ", vocabulary]; output %d ('%s') is %s\n",
              file, s->batch, (int)o, info.name, kiln_gen_shape(&info, buf, sizeof buf));
      return 1;
    }
    s->logits = o;
    s->vocab = info.shape[1];
  }
  if (s->logits < 0) {
    fprintf(stderr, "kiln: generate: '%s' has no logits output (every output updates an input)\n", file);
    return 1;
  }
  return 0;
}

/* Inputs 2+: the cache (zeroed buffers, each updated by its output) and
 * at most one int64 [B] that no output updates: the rows' padding. */
static int kiln_gen_step_make_cache(kiln_gen_step_t* s, const char* file) {
  kiln_tensor_info_t info;
  kiln_error_t* err;
  s->pad = -1;
  for (int32_t i = 2; i < s->n_inputs; ++i) {
    if ((err = kiln_session_input_info(s->session, i, &info))) return kiln_gen_fail(err, "generate");
    if (s->update[i] < 0 && s->pad < 0 && info.type == KILN_ELEMENT_INT64 && info.rank == 1 &&
        kiln_gen_is_rows(s, 0, i, 0, info.shape[0])) {
      s->pad = i;
      s->shapes[i][0] = s->batch;
      s->in[i] = (kiln_buffer_t){s->padding, sizeof(int64_t) * (size_t)s->batch, KILN_ELEMENT_INT64,
                                 1, s->shapes[i]};
      continue;
    }
    const int fixed = kiln_gen_fixed_but_rows(s, 0, i, &info);
    if (s->update[i] < 0 || !fixed) {
      fprintf(stderr, "kiln: generate: input %d ('%s') of '%s' should be part of the KV cache: "
                      "fixed in shape but for its rows, and updated by an output%s, or the rows' "
                      "padding, int64 [B]\n",
              (int)i, info.name, file, !fixed ? " (it has other symbolic sizes)" : " (none updates it)");
      return 1;
    }
    size_t bytes = kiln_element_type_size(info.type);
    for (int32_t d = 0; d < info.rank; ++d) {
      s->shapes[i][d] = info.shape[d] == KILN_DIM_SYMBOLIC ? s->batch : info.shape[d];
      bytes *= (size_t)s->shapes[i][d];
    }
    s->in[i] = (kiln_buffer_t){kiln_gen_zeros(bytes), bytes, info.type, info.rank, s->shapes[i]};
    /* In place: the output is the input's own buffer. Otherwise a second
     * buffer, copied back after each call. */
    const int32_t o = s->update[i];
    s->out[o] = s->in[i];
    if (!s->in_place[i]) s->out[o].data = s->spare[o] = kiln_gen_zeros(bytes);
    if (!s->in[i].data || !s->out[o].data) {
      fputs("kiln: generate: out of memory for the KV cache\n", stderr);
      return 1;
    }
  }
  return 0;
}

int kiln_gen_step_prepare(kiln_gen_step_t* s, const char* file, int64_t rows) {
  s->n_inputs = kiln_session_input_count(s->session);
  s->n_outputs = kiln_session_output_count(s->session);
  kiln_dim_info_t t_dim = {0};
  if (kiln_gen_step_check_ids(s, file, &t_dim, rows)) return 1;
  s->in = calloc((size_t)s->n_inputs, sizeof(kiln_buffer_t));
  s->out = calloc((size_t)s->n_outputs, sizeof(kiln_buffer_t));
  s->spare = calloc((size_t)s->n_outputs, sizeof(void*));
  s->shapes = calloc((size_t)(s->n_inputs + s->n_outputs), sizeof(*s->shapes));
  s->update = malloc(sizeof(int32_t) * (size_t)s->n_inputs);
  s->in_place = calloc((size_t)s->n_inputs, 1);
  s->padding = calloc((size_t)s->batch, sizeof(int64_t));
  if (!s->in || !s->out || !s->spare || !s->shapes || !s->update || !s->in_place || !s->padding)
    return kiln_gen_oom();
  for (int32_t i = 0; i < s->n_inputs; ++i) s->update[i] = -1;
  if (kiln_gen_step_check_outputs(s, file) || kiln_gen_step_make_cache(s, file)) return 1;
  /* T at 1: the cache's length is not known here; a call past it fails
   * (the write's indices out of range) and says so. */
  s->max_tokens = s->one_by_one ? INT64_MAX : t_dim.max;
  int64_t* shape = s->shapes[s->n_inputs + s->logits];
  shape[0] = s->batch;
  shape[1] = s->vocab;
  size_t bytes = sizeof(float) * (size_t)s->batch * (size_t)s->vocab;
  s->out[s->logits] = (kiln_buffer_t){kiln_gen_zeros(bytes), bytes, KILN_ELEMENT_FLOAT32, 2, shape};
  s->spare[s->logits] = s->out[s->logits].data; /* freed with the spares */
  return s->out[s->logits].data ? 0 : kiln_gen_oom();
}

kiln_error_t* kiln_gen_step_call(kiln_gen_step_t* s, const int64_t* ids, int64_t n, int64_t past) {
  s->ids_shape[0] = s->batch;
  s->ids_shape[1] = n;
  s->in[0] = (kiln_buffer_t){(void*)ids, sizeof(int64_t) * (size_t)(s->batch * n), KILN_ELEMENT_INT64,
                             2, s->ids_shape};
  s->in[1] = (kiln_buffer_t){&past, sizeof past, KILN_ELEMENT_INT64, 0, NULL};
  kiln_error_t* err = kiln_session_run(s->session, s->in, s->n_inputs, s->out, s->n_outputs);
  for (int32_t i = 2; !err && i < s->n_inputs; ++i)
    if (s->update[i] >= 0 && s->out[s->update[i]].data != s->in[i].data)
      memcpy(s->in[i].data, s->out[s->update[i]].data, s->in[i].size);
  return err;
}
