/* `kiln generate`: text generation from a traced generation step, through
 * the public C API alone (include/kiln.h): what a C program that embeds
 * kiln writes to run an LLM, with no Python.
 *
 *   kiln generate FILE (--text TEXT ... | --chat TEXT ... | --text-file PATH | --prompt IDS ... |
 *                 --prompt-file PATH) [--max-new-tokens N] [--eos IDS] [--temperature T
 *                 [--top-k K] [--top-p P] [--seed S]] [--repetition-penalty R] [--ids]
 *                 [--threads N]
 *
 * FILE is a step saved by kiln.save (kiln.llm.StaticCacheStep makes one
 * from a Hugging Face causal LM; kiln_cli_generate_step.h has its
 * signature): B rows, each a prompt, left-padded to the longest. The
 * prompts run in one call (or a token a call), then each row's next token
 * is chosen (kiln_cli_sample.h: greedy, or generate()'s processors and a
 * seeded draw) and the rows decode together until --max-new-tokens, every
 * row's --eos, or a full cache. One row's tokens are printed as they come;
 * several rows' at the end, a line each. A step saved with its tokenizer
 * (kiln_session_tokenize) takes text prompts and prints text (its end ids
 * the default --eos). The timing goes to stderr.
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
#include "tools/kiln_cli_generate_step.h"
#include "tools/kiln_cli_sample.h"

typedef struct kiln_gen_ids_s {
  int64_t* ids;
  int32_t n;
} kiln_gen_ids_t;

typedef struct kiln_gen_options_s {
  const char* file;
  kiln_gen_ids_t* prompts; /* one per row given */
  int32_t n_prompts;
  int64_t max_new;
  kiln_gen_ids_t eos; /* the ids that end a row (none: n 0) */
  int32_t threads;
  kiln_cli_sampler_t sampler;  /* the options; each row's copy gets its own tables */
  int seeded;                  /* --seed given (else one from the clock, printed) */
  const char* sampling_option; /* the first of --top-k/--top-p/--seed given, for its check */
  char** texts;                /* --text prompts (the last, --text-file's: owned), a row each */
  int32_t n_texts;
  char* text_read;             /* --text-file's contents (owned) */
  int print_ids;               /* --ids: token ids even when the file has a tokenizer */
  int chat;                    /* the texts are --chat messages (the file's chat template around each) */
  char** chat_texts;           /* the rendered --chat prompts (owned) */
  const kiln_session_t* text_of; /* the session whose tokenizer prints tokens as text, or NULL */
} kiln_gen_options_t;

static int kiln_gen_usage(const char* msg, const char* arg) {
  fprintf(stderr, "kiln: generate: %s%s%s\n(run 'kiln help generate' for usage)\n", msg,
          arg ? " " : "", arg ? arg : "");
  return 2;
}

/* Out of memory is no usage error: exit 1 (a failure), not 2. */
static int kiln_gen_no_memory(const char* where) {
  fprintf(stderr, "kiln: generate: out of memory%s%s\n", where ? " at " : "", where ? where : "");
  return 1;
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

/* "5,17,9" or "5 17 9" (any run of commas and white space separates) into
 * *out (its ids malloc'd); 0 for anything else, no ids, or out of memory. */
static int kiln_gen_parse_ids(const char* text, kiln_gen_ids_t* out) {
  size_t n = 1;
  for (const char* p = text; *p; ++p) n += kiln_gen_is_separator(*p);
  out->ids = malloc(n * sizeof(int64_t));
  out->n = 0;
  char* copy = strdup(text);
  int ok = out->ids && copy;
  for (char* p = copy; ok && *p;) {
    while (kiln_gen_is_separator(*p)) ++p;
    if (!*p) break;
    char* end = p;
    while (*end && !kiln_gen_is_separator(*end)) ++end;
    const char was = *end;
    *end = '\0';
    ok = out->n < INT32_MAX && kiln_gen_int(p, 0, INT64_MAX, &out->ids[out->n++]);
    p = was ? end + 1 : end;
  }
  free(copy);
  return ok && out->n > 0;
}

/* Adds a prompt (a row); 0 as kiln_gen_parse_ids. */
static int kiln_gen_add_prompt(const char* text, kiln_gen_options_t* o) {
  kiln_gen_ids_t* more = realloc(o->prompts, sizeof(kiln_gen_ids_t) * (size_t)(o->n_prompts + 1));
  if (!more) return 0;
  o->prompts = more;
  return kiln_gen_parse_ids(text, &o->prompts[o->n_prompts++]);
}

/* Each line of text with an id on it is a prompt (a row). */
static int kiln_gen_add_prompt_lines(char* text, kiln_gen_options_t* o) {
  int any = 0;
  for (char *line = text, *next; line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    const char* p = line;
    while (*p && kiln_gen_is_separator(*p)) ++p;
    if (!*p) continue; /* blank */
    if (!kiln_gen_add_prompt(line, o)) return 0;
    any = 1;
  }
  return any;
}

/* The whole of PATH ("-": standard input) as a string; NULL after printing
 * why not. */
static char* kiln_gen_read_text(const char* what, const char* path, size_t max, size_t* size) {
  char* text = NULL;
  kiln_status_t st = kiln_cli_read_text(what, path, max, &text, size);
  if (st) {
    fprintf(stderr, "kiln: generate: %s\n", kiln_status_message(st));
    kiln_status_free(st);
  }
  return text;
}

static int kiln_gen_parse(int argc, char** argv, kiln_gen_options_t* o) {
  o->max_new = 32;
  o->sampler.top_p = 1;
  o->sampler.repetition_penalty = 1;
  const char *prompt_file = NULL, *text_file = NULL;
  for (int i = 2; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-') {
      if (o->file) return kiln_gen_usage("more than one FILE:", a);
      o->file = a;
      continue;
    }
    if (!strcmp(a, "--ids")) {
      o->print_ids = 1;
      continue;
    }
    if (!v) return kiln_gen_usage("a value is missing after", a);
    ++i;
    if (!strcmp(a, "--text") || !strcmp(a, "--chat")) {
      if (o->n_texts && o->chat != !strcmp(a, "--chat")) return kiln_gen_usage("give --text or --chat, not both", NULL);
      o->chat = !strcmp(a, "--chat");
      char** more = realloc(o->texts, sizeof(char*) * (size_t)(o->n_texts + 1));
      if (!more) return kiln_gen_no_memory(a);
      o->texts = more;
      o->texts[o->n_texts++] = (char*)v;
    } else if (!strcmp(a, "--text-file")) {
      text_file = v;
    } else if (!strcmp(a, "--prompt")) {
      if (!kiln_gen_add_prompt(v, o))
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
      free(o->eos.ids);
      if (!kiln_gen_parse_ids(v, &o->eos))
        return kiln_gen_usage("--eos wants token ids like 2 or 128001,128009, got", v);
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
  if (o->n_prompts && prompt_file) return kiln_gen_usage("give --prompt or --prompt-file, not both", NULL);
  if ((o->n_prompts || prompt_file) && (o->n_texts || text_file))
    return kiln_gen_usage("give token ids (--prompt, --prompt-file) or text (--text, --text-file), not both", NULL);
  if (o->n_texts && text_file) return kiln_gen_usage("give --text (or --chat) or --text-file, not both", NULL);
  if (text_file) {
    size_t size;
    o->text_read = kiln_gen_read_text("--text-file", text_file, (size_t)1 << 30, &size);
    if (!o->text_read) return 1;
    if (strlen(o->text_read) != size) return kiln_gen_usage("--text-file holds a NUL byte:", text_file);
    o->texts = malloc(sizeof(char*));
    if (!o->texts) return kiln_gen_no_memory(text_file);
    o->texts[o->n_texts++] = o->text_read;
  }
  if (prompt_file) {
    size_t size; /* prompts are token ids: 64 MiB is far beyond any cache */
    char* text = kiln_gen_read_text("--prompt-file", prompt_file, (size_t)64 << 20, &size);
    if (!text) return 1;
    const int ok = kiln_gen_add_prompt_lines(text, o);
    free(text);
    if (!ok)
      return kiln_gen_usage("--prompt-file wants a prompt a line, token ids separated by commas or "
                            "spaces:", prompt_file);
  }
  if (!o->n_prompts && !o->n_texts) return kiln_gen_usage("no --prompt or --text given", NULL);
  /* Top-k, top-p and a seed shape a draw; greedy has none to shape. */
  if (o->sampling_option && !(o->sampler.temperature > 0))
    return kiln_gen_usage("sampling options need --temperature above 0 (0 is greedy):",
                          o->sampling_option);
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

/* The rows of a generation: prompts, samplers, new tokens. Rows past the
 * prompts given run prompt 0 again (a step's batch is fixed) and are
 * neither printed nor waited for. */
typedef struct kiln_gen_rows_s {
  int64_t batch, width;     /* the step's rows; the longest prompt */
  int64_t* ids;             /* batch x width: the prompts, left-padded with id 0 */
  int64_t* next;            /* batch: the tokens the next call reads */
  int64_t* made;            /* step-major, batch a step: row i's k-th new token at k * batch + i */
  size_t made_cap;          /* entries made has room for (it grows: --max-new-tokens may be huge) */
  int64_t* n_made;          /* batch: the row's new tokens (it adds none once done) */
  uint8_t* done;            /* batch: the row made --eos */
  kiln_cli_sampler_t* pick; /* batch: the options, each row's own tables and stream */
} kiln_gen_rows_t;

static void kiln_gen_rows_free(kiln_gen_rows_t* r) {
  for (int64_t i = 0; r->pick && i < r->batch; ++i) kiln_cli_sampler_deinitialize(&r->pick[i]);
  free(r->ids);
  free(r->next);
  free(r->made);
  free(r->n_made);
  free(r->done);
  free(r->pick);
}

static const kiln_gen_ids_t* kiln_gen_row_prompt(const kiln_gen_options_t* o, int64_t row) {
  return &o->prompts[row < o->n_prompts ? row : 0];
}

/* Checks the prompts against the step and lays them out; row r's stream
 * is seeded with seed + r. Returns 0, or 1 having said why not. */
static int kiln_gen_rows_make(kiln_gen_rows_t* r, const kiln_gen_step_t* s,
                              const kiln_gen_options_t* o, uint64_t seed) {
  memset(r, 0, sizeof *r);
  r->batch = s->batch;
  if (o->n_prompts > s->batch) {
    fprintf(stderr, "kiln: generate: %d prompts for a step of batch %" PRId64
                    " (kiln.llm.StaticCacheStep(model, max_length, batch=%d) makes one for them)\n",
            (int)o->n_prompts, s->batch, (int)o->n_prompts);
    return 1;
  }
  for (int64_t i = 0; i < r->batch; ++i) {
    const int32_t n = kiln_gen_row_prompt(o, i)->n;
    if (n != o->prompts[0].n && s->pad < 0) {
      fprintf(stderr, "kiln: generate: the step has no input for the rows' padding, so its prompts "
                      "must be of one length; prompt %d has %d tokens, prompt 1 has %d\n",
              (int)i + 1, (int)n, (int)o->prompts[0].n);
      return 1;
    }
    if (n > r->width) r->width = n;
  }
  if (r->width > s->max_tokens) {
    fprintf(stderr, "kiln: generate: the prompt has %d tokens; the cache holds %" PRId64 "\n",
            (int)r->width, s->max_tokens);
    return 1;
  }
  const size_t b = (size_t)r->batch;
  r->ids = calloc(b * (size_t)r->width, sizeof(int64_t));
  r->next = calloc(b, sizeof(int64_t));
  r->n_made = calloc(b, sizeof(int64_t));
  r->done = calloc(b, 1);
  r->pick = calloc(b, sizeof(kiln_cli_sampler_t));
  if (!r->ids || !r->next || !r->n_made || !r->done || !r->pick) return kiln_gen_no_memory(NULL);
  for (int64_t i = 0; i < r->batch; ++i) {
    const kiln_gen_ids_t* pr = kiln_gen_row_prompt(o, i);
    const int64_t pad = r->width - pr->n;
    memcpy(r->ids + i * r->width + pad, pr->ids, sizeof(int64_t) * (size_t)pr->n);
    s->padding[i] = pad;
    r->pick[i] = o->sampler;
    r->pick[i].rng = seed + (uint64_t)i;
    if (!kiln_cli_sampler_initialize(&r->pick[i], s->vocab)) return kiln_gen_no_memory(NULL);
    for (int32_t k = 0; k < pr->n; ++k) kiln_cli_sampler_see(&r->pick[i], pr->ids[k]);
  }
  return 0;
}

/* The prompts: in one call, or a column a call when T is fixed at 1. */
static kiln_error_t* kiln_gen_prefill(kiln_gen_step_t* s, kiln_gen_rows_t* r) {
  if (!s->one_by_one) return kiln_gen_step_call(s, r->ids, r->width, 0);
  kiln_error_t* err = NULL;
  for (int64_t c = 0; !err && c < r->width; ++c) {
    for (int64_t i = 0; i < r->batch; ++i) r->next[i] = r->ids[i * r->width + c];
    err = kiln_gen_step_call(s, r->next, 1, c);
  }
  return err;
}

/* Room for n items of `size` bytes in *data, whose capacity *cap doubles
 * as needed; 0 when out of memory (*data is then as it was). */
static int kiln_gen_reserve(void** data, size_t* cap, size_t n, size_t size) {
  if (n <= *cap) return 1;
  size_t want = *cap ? *cap : 256;
  while (want < n) want *= 2;
  void* p = realloc(*data, want * size);
  if (!p) return 0;
  *data = p;
  *cap = want;
  return 1;
}

/* Each unfinished row's token of decode step k: -1 when a row has nothing
 * to draw from, 0 when out of memory, 1 otherwise. */
static int kiln_gen_choose(kiln_gen_step_t* s, kiln_gen_rows_t* r, const kiln_gen_options_t* o, int64_t k) {
  void* made = r->made;
  if (!kiln_gen_reserve(&made, &r->made_cap, (size_t)((k + 1) * r->batch), sizeof(int64_t))) return 0;
  r->made = made;
  for (int64_t i = 0; i < r->batch; ++i) {
    if (r->done[i]) continue;
    const int64_t tok = kiln_cli_sampler_pick(&r->pick[i], kiln_gen_step_logits(s, i));
    if (tok < 0) return -1;
    kiln_cli_sampler_see(&r->pick[i], tok);
    r->made[k * r->batch + i] = tok;
    r->n_made[i]++;
    r->next[i] = tok;
    for (int32_t e = 0; e < o->eos.n; ++e) r->done[i] |= tok == o->eos.ids[e];
  }
  return 1;
}

static int kiln_gen_all_done(const kiln_gen_rows_t* r, const kiln_gen_options_t* o) {
  for (int32_t i = 0; i < o->n_prompts; ++i)
    if (!r->done[i]) return 0;
  return 1;
}

static void kiln_gen_print_summary(const kiln_gen_rows_t* r, const kiln_gen_options_t* o, double prompt_s,
                                   int64_t made, const char* stop, uint64_t seed, const double* steps,
                                   int64_t n_steps) {
  if (r->batch == 1) {
    fprintf(stderr, "kiln: generate: prompt %d tokens in %.1f ms; %" PRId64 " new tokens (stopped by %s)",
            (int)o->prompts[0].n, 1e3 * prompt_s, made, stop);
  } else {
    fprintf(stderr, "kiln: generate: %d prompt%s (", (int)o->n_prompts, o->n_prompts == 1 ? "" : "s");
    for (int32_t i = 0; i < o->n_prompts; ++i) fprintf(stderr, i ? ", %d" : "%d", (int)o->prompts[i].n);
    fprintf(stderr, " tokens) in one batch of %" PRId64 " in %.1f ms; up to %" PRId64
                    " new tokens each (stopped by %s)", r->batch, 1e3 * prompt_s, made, stop);
  }
  kiln_gen_print_choice(o, seed);
  if (n_steps) {
    const double median = n_steps % 2 ? steps[n_steps / 2] : 0.5 * (steps[n_steps / 2 - 1] + steps[n_steps / 2]);
    if (r->batch == 1)
      fprintf(stderr, "; decode %.2f ms per token, median of %" PRId64 " (%.1f tokens/s)", 1e3 * median,
              n_steps, 1.0 / median);
    else
      fprintf(stderr, "; decode %.2f ms per step, median of %" PRId64 " (%.1f tokens/s over %d prompt%s)",
              1e3 * median, n_steps, o->n_prompts / median, (int)o->n_prompts, o->n_prompts == 1 ? "" : "s");
  }
  fputc('\n', stderr);
}

/* A new token on stdout: its text (the bytes it adds; special tokens none)
 * when the file has a tokenizer and --ids was not asked for, else its id. */
static void kiln_gen_print_token(const kiln_gen_options_t* o, int64_t id, int first) {
  if (o->text_of) {
    size_t len;
    const char* piece = kiln_session_token_bytes(o->text_of, id, &len);
    fwrite(piece, 1, len, stdout);
  } else {
    printf(first ? "%" PRId64 : " %" PRId64, id);
  }
}

static int kiln_gen_run(kiln_gen_step_t* s, kiln_gen_options_t* o) {
  const uint64_t seed = o->seeded ? o->sampler.rng : kiln_gen_fresh_seed();
  kiln_gen_rows_t r;
  double* steps = NULL; /* each decode step's seconds */
  size_t steps_cap = 0;
  int rc = kiln_gen_rows_make(&r, s, o, seed);
  if (rc) {
    kiln_gen_rows_free(&r);
    return rc;
  }
  double t0 = kiln_gen_now();
  kiln_error_t* err = kiln_gen_prefill(s, &r);
  const double prompt_s = kiln_gen_now() - t0;
  int64_t past = r.width, made = 0, n_steps = 0;
  int drawn = 1;
  const char* stop = "--max-new-tokens";
  while (!err) {
    /* A step's time: choosing its tokens, then the call that reads them. */
    const double t1 = kiln_gen_now();
    void* grown = steps;
    if ((drawn = kiln_gen_choose(s, &r, o, made)) != 1 ||
        !(drawn = kiln_gen_reserve(&grown, &steps_cap, (size_t)n_steps + 1, sizeof(double))))
      break;
    steps = grown;
    if (r.batch == 1) { /* one row: its tokens as they come */
      kiln_gen_print_token(o, r.next[0], made == 0);
      fflush(stdout);
    }
    if (++made == o->max_new) break;
    if (kiln_gen_all_done(&r, o)) {
      stop = "--eos";
      break;
    }
    if (past + 1 > s->max_tokens) {
      stop = "the cache's length";
      break;
    }
    if ((err = kiln_gen_step_call(s, r.next, 1, past++))) break;
    steps[n_steps++] = kiln_gen_now() - t1;
  }
  for (int32_t i = 0; i < o->n_prompts; ++i) { /* several rows: a line (or text) each, at the end */
    if (r.batch > 1 && o->text_of) printf("%s--- prompt %d ---\n", i ? "\n" : "", (int)i + 1);
    for (int64_t k = 0; r.batch > 1 && k < r.n_made[i]; ++k) kiln_gen_print_token(o, r.made[k * r.batch + i], k == 0);
    if (r.batch > 1 || made) printf("\n");
  }
  fflush(stdout);
  if (err) {
    rc = kiln_gen_fail(err, made ? "generate: a decode step" : "generate: the prompt");
  } else if (drawn < 0) {
    fprintf(stderr, "kiln: generate: nothing to sample from after %" PRId64 " new tokens: the "
                    "logits hold a NaN or +inf, or are all -inf\n", made);
    rc = 1;
  } else if (!drawn) {
    rc = kiln_gen_no_memory(NULL);
  } else {
    qsort(steps, (size_t)n_steps, sizeof(double), kiln_gen_cmp);
    kiln_gen_print_summary(&r, o, prompt_s, made, stop, seed, steps, n_steps);
  }
  free(steps);
  kiln_gen_rows_free(&r);
  return rc;
}

static void kiln_gen_options_free(kiln_gen_options_t* o) {
  for (int32_t i = 0; i < o->n_prompts; ++i) free(o->prompts[i].ids);
  free(o->prompts);
  free(o->eos.ids);
  for (int32_t i = 0; o->chat_texts && i < o->n_texts; ++i) free(o->chat_texts[i]);
  free(o->chat_texts);
  free(o->texts);
  free(o->text_read);
}

/* --chat: each message put in the file's chat template (its "chat"
 * section, python/kiln/tokenizer.py: "KILNCHAT", u32 version 1, u32 bytes
 * before B, u32 bytes after A, the B then A bytes), as
 * apply_chat_template([{"role": "user", ...}], add_generation_prompt=True)
 * renders it. The rendered texts replace the messages (owned by
 * o->chat_texts). 0, or an exit code after printing why. */
static int kiln_gen_chat(kiln_session_t* session, kiln_gen_options_t* o) {
  const unsigned char* c = NULL;
  size_t size = 0;
  kiln_error_t* err = kiln_session_section(session, "chat", (const void**)&c, &size);
  if (err) return kiln_gen_fail(err, "generate");
  uint32_t head[3] = {0, 0, 0};
  if (c && size >= 20) memcpy(head, c + 8, sizeof head);
  if (!c) {
    fprintf(stderr, "kiln: generate: '%s' has no chat template, so --chat cannot be used: its tokenizer had "
                    "none when saved (give the prompt as it should be with --text)\n", o->file);
    return 1;
  }
  if (size < 20 || memcmp(c, "KILNCHAT", 8) || head[0] != 1 || (uint64_t)head[1] + head[2] != size - 20) {
    fprintf(stderr, "kiln: generate: corrupt artifact '%s': its chat section is malformed\n", o->file);
    return 1;
  }
  o->chat_texts = calloc((size_t)o->n_texts, sizeof(char*));
  if (!o->chat_texts) return kiln_gen_no_memory(NULL);
  for (int32_t r = 0; r < o->n_texts; ++r) {
    const size_t n = strlen(o->texts[r]);
    char* t = malloc((size_t)head[1] + n + head[2] + 1);
    if (!t) return kiln_gen_no_memory(NULL);
    memcpy(t, c + 20, head[1]);
    memcpy(t + head[1], o->texts[r], n);
    memcpy(t + head[1] + n, c + 20 + head[1], head[2]);
    t[head[1] + n + head[2]] = '\0';
    o->texts[r] = o->chat_texts[r] = t;
  }
  return 0;
}

/* The --text prompts through the file's tokenizer (with its BOS, as the
 * tokenizer gives them in Python), whose end ids are the default --eos and
 * which prints the new tokens as text unless --ids. 0, or an exit code
 * after printing why. */
static int kiln_gen_texts(kiln_session_t* session, kiln_gen_options_t* o) {
  if (!kiln_session_has_tokenizer(session)) {
    if (!o->n_texts) return 0;
    fprintf(stderr, "kiln: generate: '%s' has no tokenizer, so --text cannot be read: save the step with "
                    "kiln.save(compiled, path, tokenizer=...), or give token ids with --prompt\n", o->file);
    return 1;
  }
  if (!o->print_ids) o->text_of = session;
  if (!o->eos.n) {
    const int32_t* eos = NULL;
    int32_t n = 0;
    kiln_error_t* err = kiln_session_eos_ids(session, &eos, &n);
    if (err) return kiln_gen_fail(err, "generate");
    if (n && !(o->eos.ids = malloc(sizeof(int64_t) * (size_t)n))) return kiln_gen_no_memory(NULL);
    for (int32_t i = 0; i < n; ++i) o->eos.ids[o->eos.n++] = eos[i];
  }
  if (!o->n_texts) return 0;
  if (o->chat) {
    int rc = kiln_gen_chat(session, o);
    if (rc) return rc;
  }
  o->prompts = calloc((size_t)o->n_texts, sizeof(kiln_gen_ids_t));
  if (!o->prompts) return kiln_gen_no_memory(NULL);
  for (int32_t r = 0; r < o->n_texts; ++r) {
    const size_t size = strlen(o->texts[r]);
    size_t n = 0;
    const int special = !o->chat; /* a chat template writes its own BOS */
    kiln_error_t* err = kiln_session_tokenize(session, o->texts[r], size, special, NULL, 0, &n);
    kiln_gen_ids_t* p = &o->prompts[o->n_prompts++];
    p->ids = err || n == 0 || n > INT32_MAX ? NULL : malloc(sizeof(int64_t) * n);
    if (p->ids) err = kiln_session_tokenize(session, o->texts[r], size, special, p->ids, n, &n);
    if (err) return kiln_gen_fail(err, "generate: --text");
    if (!p->ids) {
      fprintf(stderr, "kiln: generate: --text %d: %s\n", (int)r + 1, n ? "out of memory" : "the text has no tokens");
      return 1;
    }
    p->n = (int32_t)n;
  }
  return 0;
}

int kiln_cli_generate_main(int argc, char** argv) {
  kiln_gen_options_t o;
  memset(&o, 0, sizeof o);
  int rc = kiln_gen_parse(argc, argv, &o);
  if (rc) {
    kiln_gen_options_free(&o);
    return rc;
  }
  kiln_load_options_t lo;
  kiln_load_options_initialize(&lo);
  lo.num_threads = o.threads;
  kiln_gen_step_t s;
  memset(&s, 0, sizeof s);
  kiln_error_t* err = kiln_session_create_from_file(o.file, &lo, &s.session);
  if (err) {
    kiln_gen_options_free(&o);
    return kiln_gen_fail(err, "generate");
  }
  rc = kiln_gen_texts(s.session, &o);
  if (!rc) rc = kiln_gen_step_prepare(&s, o.file, o.n_prompts);
  if (!rc) rc = kiln_gen_run(&s, &o);
  kiln_gen_step_free(&s);
  kiln_gen_options_free(&o);
  return rc;
}
