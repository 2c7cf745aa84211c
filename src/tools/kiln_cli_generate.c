/* `kiln generate`: greedy text generation from a traced generation step,
 * through the public C API alone (include/kiln.h): what a C program that
 * embeds kiln writes to run an LLM, with no Python.
 *
 *   kiln generate FILE --prompt IDS [--max-new-tokens N] [--eos ID] [--threads N]
 *
 * FILE is a step saved by kiln.save (kiln.llm.StaticCacheStep
 * makes one from a Hugging Face causal LM):
 *   input 0   int64 [1, T]  the new tokens (T symbolic: the whole prompt at
 *                           once; T fixed at 1: the prompt a token at a time)
 *   input 1   int64 []      how many tokens the cache already holds
 *   inputs 2+ the KV cache, each updated by an output (kiln_session_output_updates)
 *   one other output, float32 [1, V]: the logits of the last new token.
 * The cache is as long as T's maximum (the tokens one call may add); the
 * tokens are printed on stdout as they come, the timing on stderr.
 *
 * Each step prints what went wrong and returns an exit code (2 for a bad
 * command line, 1 otherwise); kiln_cli_generate_main frees everything
 * before it returns one (checked under valgrind). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln.h"
#include "tools/kiln_cli.h"
#include "tools/kiln_cli_generate.h"

typedef struct kiln_gen_options_s {
  const char* file;
  int64_t* prompt;
  int32_t n_prompt;
  int64_t max_new;
  int64_t eos; /* -1: none */
  int32_t threads;
} kiln_gen_options_t;

/* What the step's inputs and outputs are. */
typedef struct kiln_gen_step_s {
  kiln_session_t* session;
  int32_t n_inputs, n_outputs;
  int64_t max_tokens; /* T's maximum: the cache's length */
  int64_t vocab;
  int32_t logits;     /* the output index of the logits */
  int32_t one_by_one; /* T is fixed at 1 */
  kiln_buffer_t* in;  /* n_inputs */
  kiln_buffer_t* out; /* n_outputs */
  void** spare;       /* per output: its buffer when not an input's own (freed here) */
  int32_t* update;    /* per input: the output that updates it, or -1 */
  int64_t (*shapes)[KILN_MAX_DIMS];
  int64_t ids_shape[2];
} kiln_gen_step_t;

static int kiln_gen_fail(kiln_error_t* err, const char* what) {
  fprintf(stderr, "kiln: %s: %s\n", what, kiln_error_message(err));
  kiln_error_free(err);
  return 1;
}

static int kiln_gen_usage(const char* msg, const char* arg) {
  fprintf(stderr, "kiln: generate: %s%s%s\n(run 'kiln help generate' for usage)\n", msg,
          arg ? " " : "", arg ? arg : "");
  return 2;
}

static int kiln_gen_int(const char* text, int64_t lo, int64_t hi, int64_t* out) {
  long long v;
  if (!kiln_cli_parse_int(text, lo, hi, &v)) return 0;
  *out = v;
  return 1;
}

/* "5,17,9" -> ids (malloc'd). */
static int kiln_gen_parse_prompt(const char* text, kiln_gen_options_t* o) {
  size_t n = 1;
  for (const char* p = text; *p; ++p) n += *p == ',';
  o->prompt = malloc(n * sizeof(int64_t));
  if (!o->prompt) return 0;
  char* copy = strdup(text);
  if (!copy) return 0;
  int ok = 1;
  o->n_prompt = 0;
  for (char *tok = copy, *next; ok && tok; tok = next) {
    next = strchr(tok, ',');
    if (next) *next++ = '\0';
    ok = kiln_gen_int(tok, 0, INT64_MAX, &o->prompt[o->n_prompt++]);
  }
  free(copy);
  return ok;
}

static int kiln_gen_parse(int argc, char** argv, kiln_gen_options_t* o) {
  o->max_new = 32;
  o->eos = -1;
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-') {
      if (o->file) return kiln_gen_usage("more than one FILE:", a);
      o->file = a;
      continue;
    }
    if (!v) return kiln_gen_usage("a value is missing after", a);
    ++i;
    if (!strcmp(a, "--prompt")) {
      free(o->prompt);
      o->prompt = NULL;
      if (!kiln_gen_parse_prompt(v, o))
        return kiln_gen_usage("--prompt wants token ids like 5,17,9, got", v);
    } else if (!strcmp(a, "--max-new-tokens")) {
      if (!kiln_gen_int(v, 1, 1 << 24, &o->max_new))
        return kiln_gen_usage("--max-new-tokens wants a whole number from 1, got", v);
    } else if (!strcmp(a, "--eos")) {
      if (!kiln_gen_int(v, 0, INT64_MAX, &o->eos))
        return kiln_gen_usage("--eos wants a token id, got", v);
    } else if (!strcmp(a, "--threads")) {
      int64_t n;
      if (!kiln_gen_int(v, 1, 4096, &n))
        return kiln_gen_usage("--threads wants a whole number from 1 to 4096, got", v);
      o->threads = (int32_t)n;
    } else {
      return kiln_gen_usage("unknown option", a);
    }
  }
  if (!o->file) return kiln_gen_usage("no FILE given", NULL);
  if (!o->prompt) return kiln_gen_usage("no --prompt given", NULL);
  return 0;
}

static void kiln_gen_step_free(kiln_gen_step_t* s) {
  for (int32_t i = 2; s->in && i < s->n_inputs; ++i) free(s->in[i].data);
  for (int32_t o = 0; s->spare && o < s->n_outputs; ++o) free(s->spare[o]);
  free(s->in);
  free(s->out);
  free(s->spare);
  free(s->update);
  free(s->shapes);
  kiln_session_release(s->session);
}

static void* kiln_gen_zeros(size_t bytes) {
  size_t n = (bytes + 63) / 64 * 64;
  void* p = aligned_alloc(64, n ? n : 64);
  if (p) memset(p, 0, n ? n : 64);
  return p;
}

/* A tensor's type and shape for an error message ("int64 [1, N]"; N: symbolic). */
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

/* Checks the step's signature and makes the cache. Returns 0 or prints
 * and returns 1. */
static int kiln_gen_prepare(kiln_gen_step_t* s, const char* file) {
  kiln_session_t* ses = s->session;
  s->n_inputs = kiln_session_input_count(ses);
  s->n_outputs = kiln_session_output_count(ses);
  kiln_tensor_info_t ids, past, info;
  char buf[128];
  kiln_error_t* err;
  if (s->n_inputs < 2) {
    fprintf(stderr, "kiln: generate: '%s' takes %d input(s); a generation step takes the new "
                    "tokens, the count of cached tokens and the cache\n", file, (int)s->n_inputs);
    return 1;
  }
  if ((err = kiln_session_input_info(ses, 0, &ids)) || (err = kiln_session_input_info(ses, 1, &past)))
    return kiln_gen_fail(err, "generate");
  kiln_dim_info_t t_dim = {0};
  if (ids.type != KILN_ELEMENT_INT64 || ids.rank != 2 || ids.shape[0] != 1 ||
      (ids.shape[1] != KILN_DIM_SYMBOLIC && ids.shape[1] != 1)) {
    fprintf(stderr, "kiln: generate: input 0 ('%s') of '%s' should be the new tokens, int64 "
                    "[1, N] (N symbolic, or 1), got %s\n", ids.name, file, kiln_gen_shape(&ids, buf, sizeof buf));
    return 1;
  }
  if (past.type != KILN_ELEMENT_INT64 || past.rank != 0) {
    fprintf(stderr, "kiln: generate: input 1 ('%s') of '%s' should be the count of cached tokens, "
                    "int64 [], got %s\n", past.name, file, kiln_gen_shape(&past, buf, sizeof buf));
    return 1;
  }
  s->one_by_one = ids.shape[1] == 1;
  if (!s->one_by_one && (err = kiln_session_input_dim(ses, 0, 1, &t_dim)))
    return kiln_gen_fail(err, "generate");
  s->in = calloc((size_t)s->n_inputs, sizeof(kiln_buffer_t));
  s->out = calloc((size_t)s->n_outputs, sizeof(kiln_buffer_t));
  s->spare = calloc((size_t)s->n_outputs, sizeof(void*));
  s->shapes = calloc((size_t)(s->n_inputs + s->n_outputs), sizeof(*s->shapes));
  if (!s->in || !s->out || !s->spare || !s->shapes) {
    fputs("kiln: generate: out of memory\n", stderr);
    return 1;
  }
  /* Each cache input: its own zeroed buffer, updated by one output. */
  int32_t* updated_by = s->update = malloc(sizeof(int32_t) * (size_t)s->n_inputs);
  if (!updated_by) {
    fputs("kiln: generate: out of memory\n", stderr);
    return 1;
  }
  for (int32_t i = 0; i < s->n_inputs; ++i) updated_by[i] = -1;
  s->logits = -1;
  int rc = 0;
  for (int32_t o = 0; !rc && o < s->n_outputs; ++o) {
    int32_t input = -1, in_place = 0;
    if ((err = kiln_session_output_updates(ses, o, &input, &in_place)) ||
        (err = kiln_session_output_info(ses, o, &info))) {
      rc = kiln_gen_fail(err, "generate");
      break;
    }
    if (input >= 2) {
      updated_by[input] = o;
      continue;
    }
    if (input >= 0) {
      fprintf(stderr, "kiln: generate: output %d of '%s' updates input %d, which should be %s\n", (int)o,
              file, (int)input, input ? "the count of cached tokens" : "the new tokens");
      rc = 1;
      break;
    }
    if (s->logits >= 0 || info.type != KILN_ELEMENT_FLOAT32 || info.rank != 2 || info.shape[0] != 1 ||
        info.shape[1] <= 0) {
      fprintf(stderr, "kiln: generate: '%s' should have one output besides the cache's, the "
                      "logits, float32 [1, vocabulary]; output %d ('%s') is %s\n",
              file, (int)o, info.name, kiln_gen_shape(&info, buf, sizeof buf));
      rc = 1;
      break;
    }
    s->logits = o;
    s->vocab = info.shape[1];
  }
  if (!rc && s->logits < 0) {
    fprintf(stderr, "kiln: generate: '%s' has no logits output (every output updates an input)\n", file);
    rc = 1;
  }
  for (int32_t i = 2; !rc && i < s->n_inputs; ++i) {
    if ((err = kiln_session_input_info(ses, i, &info))) {
      rc = kiln_gen_fail(err, "generate");
      break;
    }
    if (updated_by[i] < 0 || info.symbolic) {
      fprintf(stderr, "kiln: generate: input %d ('%s') of '%s' should be part of the KV cache: "
                      "fixed in shape and updated by an output%s\n",
              (int)i, info.name, file, info.symbolic ? " (it has symbolic sizes)" : " (none updates it)");
      rc = 1;
      break;
    }
    size_t bytes = kiln_element_type_size(info.type);
    for (int32_t d = 0; d < info.rank; ++d) {
      bytes *= (size_t)info.shape[d];
      s->shapes[i][d] = info.shape[d];
    }
    s->in[i] = (kiln_buffer_t){kiln_gen_zeros(bytes), bytes, info.type, info.rank, s->shapes[i]};
    int32_t o = updated_by[i], input = -1, in_place = 0;
    kiln_error_free(kiln_session_output_updates(ses, o, &input, &in_place));
    /* In place: the output is the input's own buffer. Otherwise a second
     * buffer, copied back after each run. */
    if (!in_place) s->spare[o] = kiln_gen_zeros(bytes);
    s->out[o] = s->in[i];
    if (!in_place) s->out[o].data = s->spare[o];
    if (!s->in[i].data || (!in_place && !s->spare[o])) {
      fputs("kiln: generate: out of memory for the KV cache\n", stderr);
      rc = 1;
    }
  }
  if (rc) return rc;
  /* T at 1: the cache's length is not known here; a call past it fails
   * (the write's indices out of range) and says so. */
  s->max_tokens = s->one_by_one ? INT64_MAX : t_dim.max;
  s->shapes[s->n_inputs + s->logits][0] = 1;
  s->shapes[s->n_inputs + s->logits][1] = s->vocab;
  size_t lbytes = sizeof(float) * (size_t)s->vocab;
  s->out[s->logits] = (kiln_buffer_t){kiln_gen_zeros(lbytes), lbytes, KILN_ELEMENT_FLOAT32, 2,
                                      s->shapes[s->n_inputs + s->logits]};
  s->spare[s->logits] = s->out[s->logits].data; /* freed with the spares */
  if (!s->out[s->logits].data) {
    fputs("kiln: generate: out of memory\n", stderr);
    return 1;
  }
  return 0;
}

/* torch.argmax's choice: the first maximum, a NaN counting as the largest. */
static int64_t kiln_gen_argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (isnan(x[i])) return i;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

static double kiln_gen_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int kiln_gen_cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One call: tokens ids[0..n) at positions past.. (then the updates not
 * in place are copied into their inputs). */
static kiln_error_t* kiln_gen_call(kiln_gen_step_t* s, int64_t* ids, int64_t n, int64_t past) {
  s->ids_shape[0] = 1;
  s->ids_shape[1] = n;
  s->in[0] = (kiln_buffer_t){ids, sizeof(int64_t) * (size_t)n, KILN_ELEMENT_INT64, 2, s->ids_shape};
  s->in[1] = (kiln_buffer_t){&past, sizeof past, KILN_ELEMENT_INT64, 0, NULL};
  kiln_error_t* err = kiln_session_run(s->session, s->in, s->n_inputs, s->out, s->n_outputs);
  for (int32_t i = 2; !err && i < s->n_inputs; ++i)
    if (s->out[s->update[i]].data != s->in[i].data)
      memcpy(s->in[i].data, s->out[s->update[i]].data, s->in[i].size);
  return err;
}

static int kiln_gen_run(kiln_gen_step_t* s, const kiln_gen_options_t* o) {
  if (o->n_prompt > s->max_tokens) {
    fprintf(stderr, "kiln: generate: the prompt has %d tokens; the cache holds %" PRId64 "\n",
            (int)o->n_prompt, s->max_tokens);
    return 1;
  }
  int64_t past = 0, tok = 0;
  double t0 = kiln_gen_now();
  kiln_error_t* err = NULL;
  if (s->one_by_one) {
    for (int32_t i = 0; !err && i < o->n_prompt; ++i, ++past) err = kiln_gen_call(s, &o->prompt[i], 1, past);
  } else {
    err = kiln_gen_call(s, o->prompt, o->n_prompt, 0);
    past = o->n_prompt;
  }
  if (err) return kiln_gen_fail(err, "generate: the prompt");
  double prompt_s = kiln_gen_now() - t0;
  double* steps = malloc(sizeof(double) * (size_t)o->max_new);
  if (!steps) {
    fputs("kiln: generate: out of memory\n", stderr);
    return 1;
  }
  int64_t made = 0, n_steps = 0;
  const char* stop = "--max-new-tokens";
  for (;;) {
    tok = kiln_gen_argmax(s->out[s->logits].data, s->vocab);
    printf(made ? " %" PRId64 : "%" PRId64, tok);
    fflush(stdout);
    if (++made == o->max_new) break;
    if (tok == o->eos) {
      stop = "--eos";
      break;
    }
    if (past + 1 > s->max_tokens) {
      stop = "the cache's length";
      break;
    }
    double t1 = kiln_gen_now();
    if ((err = kiln_gen_call(s, &tok, 1, past++))) break;
    steps[n_steps++] = kiln_gen_now() - t1;
  }
  printf("\n");
  fflush(stdout);
  if (err) {
    free(steps);
    return kiln_gen_fail(err, "generate: a decode step");
  }
  double median = 0;
  if (n_steps) {
    qsort(steps, (size_t)n_steps, sizeof(double), kiln_gen_cmp);
    median = n_steps % 2 ? steps[n_steps / 2] : 0.5 * (steps[n_steps / 2 - 1] + steps[n_steps / 2]);
  }
  free(steps);
  fprintf(stderr, "kiln: generate: prompt %d tokens in %.1f ms; %" PRId64 " new tokens (stopped by %s)",
          (int)o->n_prompt, 1e3 * prompt_s, made, stop);
  if (n_steps)
    fprintf(stderr, "; decode %.2f ms per token, median of %" PRId64 " (%.1f tokens/s)", 1e3 * median,
            n_steps, 1.0 / median);
  fputc('\n', stderr);
  return 0;
}

int kiln_cli_generate_main(int argc, char** argv) {
  kiln_gen_options_t o;
  memset(&o, 0, sizeof o);
  int rc = kiln_gen_parse(argc, argv, &o);
  if (rc) {
    free(o.prompt);
    return rc;
  }
  kiln_load_options_t lo;
  kiln_load_options_initialize(&lo);
  lo.num_threads = o.threads;
  kiln_gen_step_t s;
  memset(&s, 0, sizeof s);
  kiln_error_t* err = kiln_session_create_from_file(o.file, &lo, &s.session);
  if (err) {
    free(o.prompt);
    return kiln_gen_fail(err, "generate");
  }
  rc = kiln_gen_prepare(&s, o.file);
  if (!rc) rc = kiln_gen_run(&s, &o);
  kiln_gen_step_free(&s);
  free(o.prompt);
  return rc;
}
