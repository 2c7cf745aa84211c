/* `kiln generate`: text generation from a traced generation step, through
 * the public C API alone (include/kiln.h): what a C program that embeds
 * kiln writes to run an LLM, with no Python.
 *
 *   kiln generate FILE (--prompt IDS | --prompt-file PATH) [--max-new-tokens N]
 *                 [--eos ID] [--temperature T [--top-k K] [--top-p P] [--seed S]]
 *                 [--repetition-penalty R] [--threads N]
 *
 * FILE is a step saved by kiln.save (kiln.llm.StaticCacheStep
 * makes one from a Hugging Face causal LM):
 *   input 0   int64 [1, T]  the new tokens (T symbolic: the whole prompt at
 *                           once; T fixed at 1: the prompt a token at a time)
 *   input 1   int64 []      how many tokens the cache already holds
 *   inputs 2+ the KV cache, each updated by an output (kiln_session_output_updates)
 *   one other output, float32 [1, V]: the logits of the last new token.
 * The cache is as long as T's maximum (the tokens one call may add); the
 * tokens are printed on stdout as they come, the timing on stderr. The
 * next token is the most likely one, or with --temperature a seeded draw
 * (kiln_cli_sample.h: generate()'s processors, in its order).
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
#include <unistd.h>

#include "kiln.h"
#include "tools/kiln_cli.h"
#include "tools/kiln_cli_generate.h"
#include "tools/kiln_cli_sample.h"

typedef struct kiln_gen_options_s {
  const char* file;
  int64_t* prompt;
  int32_t n_prompt;
  int64_t max_new;
  int64_t eos; /* -1: none */
  int32_t threads;
  kiln_cli_sampler_t sampler; /* the options; its tables are made in kiln_gen_run */
  int seeded;                 /* --seed given (else one from the clock, printed) */
  const char* sampling_option; /* the first of --top-k/--top-p/--seed given, for its check */
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

static int kiln_gen_real(const char* text, double lo, double hi, double* out) {
  char* end = NULL;
  double v = strtod(text, &end);
  if (!*text || *end || !(v >= lo && v <= hi)) return 0;
  *out = v;
  return 1;
}

static int kiln_gen_is_separator(char c) {
  return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* "5,17,9" or "5 17 9" (any run of commas and white space separates) ->
 * ids (malloc'd); 0 for anything else or no ids. */
static int kiln_gen_parse_prompt(const char* text, kiln_gen_options_t* o) {
  size_t n = 1;
  for (const char* p = text; *p; ++p) n += kiln_gen_is_separator(*p);
  free(o->prompt);
  o->prompt = malloc(n * sizeof(int64_t));
  char* copy = strdup(text);
  int ok = o->prompt && copy;
  o->n_prompt = 0;
  for (char* p = copy; ok && p && *p;) {
    while (kiln_gen_is_separator(*p)) ++p;
    if (!*p) break;
    char* end = p;
    while (*end && !kiln_gen_is_separator(*end)) ++end;
    const char was = *end;
    *end = '\0';
    ok = o->n_prompt < INT32_MAX && kiln_gen_int(p, 0, INT64_MAX, &o->prompt[o->n_prompt++]);
    p = was ? end + 1 : end;
  }
  free(copy);
  return ok && o->n_prompt > 0;
}

/* The whole of PATH ("-": standard input) as a string; NULL after printing
 * why not. Prompts are token ids, so 64 MiB is far beyond any cache. */
static char* kiln_gen_read_text(const char* path) {
  const size_t cap = (size_t)64 << 20;
  FILE* f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) {
    fprintf(stderr, "kiln: generate: cannot open --prompt-file '%s'\n", path);
    return NULL;
  }
  size_t size = 0, have = 4096;
  char* text = malloc(have + 1);
  for (size_t got = 1; text && got;) {
    if (size == have) {
      char* more = have < cap ? realloc(text, 2 * have + 1) : NULL;
      if (!more) {
        fprintf(stderr, "kiln: generate: --prompt-file '%s' is %s\n", path,
                have < cap ? "too large for memory" : "over 64 MiB");
        free(text);
        text = NULL;
        break;
      }
      text = more;
      have *= 2;
    }
    got = fread(text + size, 1, have - size, f);
    size += got;
  }
  if (text && ferror(f)) {
    fprintf(stderr, "kiln: generate: reading --prompt-file '%s' failed\n", path);
    free(text);
    text = NULL;
  }
  if (f != stdin) fclose(f);
  if (text) text[size] = '\0';
  return text;
}

static int kiln_gen_parse(int argc, char** argv, kiln_gen_options_t* o) {
  o->max_new = 32;
  o->eos = -1;
  o->sampler.top_p = 1;
  o->sampler.repetition_penalty = 1;
  const char* prompt_file = NULL;
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
      if (!kiln_gen_parse_prompt(v, o))
        return kiln_gen_usage("--prompt wants token ids like 5,17,9, got", v);
    } else if (!strcmp(a, "--prompt-file")) {
      prompt_file = v;
    } else if (!strcmp(a, "--temperature")) {
      if (!kiln_gen_real(v, 0, 1e6, &o->sampler.temperature))
        return kiln_gen_usage("--temperature wants a number from 0 (greedy), got", v);
    } else if (!strcmp(a, "--top-k")) {
      if (!kiln_gen_int(v, 1, INT64_MAX, &o->sampler.top_k))
        return kiln_gen_usage("--top-k wants a whole number from 1, got", v);
      if (!o->sampling_option) o->sampling_option = a;
    } else if (!strcmp(a, "--top-p")) {
      if (!kiln_gen_real(v, 0, 1, &o->sampler.top_p) || o->sampler.top_p == 0)
        return kiln_gen_usage("--top-p wants a number in (0, 1], got", v);
      if (!o->sampling_option) o->sampling_option = a;
    } else if (!strcmp(a, "--seed")) {
      int64_t seed;
      if (!kiln_gen_int(v, 0, INT64_MAX, &seed))
        return kiln_gen_usage("--seed wants a whole number from 0, got", v);
      o->sampler.rng = (uint64_t)seed;
      o->seeded = 1;
      if (!o->sampling_option) o->sampling_option = a;
    } else if (!strcmp(a, "--repetition-penalty")) {
      if (!kiln_gen_real(v, 1e-6, 1e6, &o->sampler.repetition_penalty))
        return kiln_gen_usage("--repetition-penalty wants a positive number (1: off), got", v);
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
  if (o->prompt && prompt_file) return kiln_gen_usage("give --prompt or --prompt-file, not both", NULL);
  if (prompt_file) {
    char* text = kiln_gen_read_text(prompt_file);
    if (!text) return 1;
    const int ok = kiln_gen_parse_prompt(text, o);
    free(text);
    if (!ok)
      return kiln_gen_usage("--prompt-file wants token ids separated by commas or white space:",
                            prompt_file);
  }
  if (!o->prompt) return kiln_gen_usage("no --prompt given", NULL);
  /* Top-k, top-p and a seed shape a draw; greedy has none to shape. */
  if (o->sampling_option && !(o->sampler.temperature > 0))
    return kiln_gen_usage("sampling options need --temperature above 0 (0 is greedy):",
                          o->sampling_option);
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

/* A seed when none is given: the clock and the process, printed so the
 * run can be repeated. */
static uint64_t kiln_gen_fresh_seed(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  uint64_t x = (uint64_t)t.tv_sec * 1000000007ull ^ (uint64_t)t.tv_nsec ^ ((uint64_t)getpid() << 32);
  return kiln_cli_splitmix64(&x) >> 1; /* fits --seed's range */
}

/* How the tokens are chosen, for the summary line. */
static void kiln_gen_print_choice(const kiln_gen_options_t* o, uint64_t seed) {
  const kiln_cli_sampler_t* c = &o->sampler;
  if (!(c->temperature > 0)) {
    fputs("; greedy", stderr);
  } else {
    fprintf(stderr, "; sampled at temperature %g", c->temperature);
    if (c->top_k > 0) fprintf(stderr, ", top-k %" PRId64, c->top_k);
    if (c->top_p < 1) fprintf(stderr, ", top-p %g", c->top_p);
    fprintf(stderr, ", seed %" PRIu64, seed);
  }
  if (c->repetition_penalty != 1) fprintf(stderr, ", repetition penalty %g", c->repetition_penalty);
}

static int kiln_gen_run(kiln_gen_step_t* s, kiln_gen_options_t* o) {
  if (o->n_prompt > s->max_tokens) {
    fprintf(stderr, "kiln: generate: the prompt has %d tokens; the cache holds %" PRId64 "\n",
            (int)o->n_prompt, s->max_tokens);
    return 1;
  }
  kiln_cli_sampler_t* pick = &o->sampler;
  if (!o->seeded) pick->rng = kiln_gen_fresh_seed();
  const uint64_t seed = pick->rng;
  if (!kiln_cli_sampler_initialize(pick, s->vocab)) {
    fputs("kiln: generate: out of memory\n", stderr);
    return 1;
  }
  for (int32_t i = 0; i < o->n_prompt; ++i) kiln_cli_sampler_see(pick, o->prompt[i]);
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
    /* A token's time: choosing it, then the step that reads it. */
    double t1 = kiln_gen_now();
    if ((tok = kiln_cli_sampler_pick(pick, s->out[s->logits].data)) < 0) break;
    kiln_cli_sampler_see(pick, tok);
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
    if ((err = kiln_gen_call(s, &tok, 1, past++))) break;
    steps[n_steps++] = kiln_gen_now() - t1;
  }
  printf("\n");
  fflush(stdout);
  if (err || tok < 0) {
    free(steps);
    if (err) return kiln_gen_fail(err, "generate: a decode step");
    fprintf(stderr, "kiln: generate: nothing to sample from after %" PRId64 " new tokens: the "
                    "logits hold a NaN or +inf, or are all -inf\n", made);
    return 1;
  }
  double median = 0;
  if (n_steps) {
    qsort(steps, (size_t)n_steps, sizeof(double), kiln_gen_cmp);
    median = n_steps % 2 ? steps[n_steps / 2] : 0.5 * (steps[n_steps / 2 - 1] + steps[n_steps / 2]);
  }
  free(steps);
  fprintf(stderr, "kiln: generate: prompt %d tokens in %.1f ms; %" PRId64 " new tokens (stopped by %s)",
          (int)o->n_prompt, 1e3 * prompt_s, made, stop);
  kiln_gen_print_choice(o, seed);
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
  kiln_cli_sampler_deinitialize(&o.sampler);
  free(o.prompt);
  return rc;
}
