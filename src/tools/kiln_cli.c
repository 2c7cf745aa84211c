/* The `kiln` command line: inspect, run, benchmark and profile a .kiln
 * artifact with the C runtime alone (no Python, no compiler passes).
 *
 *   kiln info [FILE] [--measure]   (no FILE: the machine and its peaks)
 *   kiln run FILE [--input NAME=PATH ...] [--shape NAME=DIMS ...] [--output-dir DIR]
 *                 [--threads N] [--seed S]
 *   kiln bench FILE [--shape NAME=DIMS ...] [--runs N] [--warmup N] [--threads N]
 *   kiln profile FILE [--shape NAME=DIMS ...] [--runs N] [--warmup N] [--threads N]
 *   kiln tokenize FILE (--text TEXT | --text-file PATH | --decode IDS) (kiln_cli_tokenize.c)
 *   kiln generate FILE (--text TEXT | --prompt IDS) [--max-new-tokens N] [--eos IDS] [--temperature T
 *                 [--top-k K] [--top-p P] [--seed S]] [--repetition-penalty R] [--threads N]
 *                 (kiln_cli_generate.c: through the public C API)
 *
 * An artifact with symbolic sizes (format 2.7) runs at the shapes --shape
 * gives ("--shape x=2x40": input x's symbolic dims take those values).
 *   kiln --version | help [COMMAND]
 *
 * Errors print "kiln: <message>" on stderr; the exit code is 2 for a bad
 * command line and 1 for everything else (unreadable or corrupt file,
 * wrong input file, a failed run). Internally every step returns a
 * kiln_status_t and main() alone turns it into an exit code, so nothing
 * exits half-way with memory still held (the CLI is checked under
 * valgrind). docs/cli.md is the user-facing description.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/kiln_alloc.h"
#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "base/kiln_status.h"
#include "ir/kiln_graph_print.h"
#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "runtime/kiln_plan_io.h"
#include "runtime/kiln_machine.h"
#include "runtime/kiln_model.h"
#include "runtime/kiln_profile.h"
#include "runtime/kiln_writes.h"
#include "tools/kiln_cli.h"
#include "tools/kiln_cli_generate.h"
#include "tools/kiln_cli_tokenize.h"
#include "runtime/kiln_tokenizer.h"

#ifndef KILN_VERSION
#define KILN_VERSION "unknown"
#endif

#define KILN_CLI_EXIT_ERROR 1
#define KILN_CLI_EXIT_USAGE 2
#define KILN_CLI_SHOW_VALUES 8 /* "first few values" per output */

typedef enum kiln_cli_command_e {
  KILN_CLI_INFO = 0,
  KILN_CLI_RUN,
  KILN_CLI_BENCH,
  KILN_CLI_PROFILE,
  KILN_CLI_COMMAND_COUNT
} kiln_cli_command_t;

static const char* const kiln_cli_command_names[] = {"info", "run", "bench", "profile"};
_Static_assert(sizeof(kiln_cli_command_names) / sizeof(kiln_cli_command_names[0]) ==
                   KILN_CLI_COMMAND_COUNT,
               "one name per command");

typedef struct kiln_cli_options_s {
  kiln_cli_command_t command;
  const char* file;
  const char** input_specs; /* "NAME=PATH", borrowed from argv */
  int n_input_specs;
  const char** shape_specs; /* "NAME=DIMS", borrowed from argv */
  int n_shape_specs;
  const char* output_dir;
  int threads; /* 0: KILN_NUM_THREADS, else one per online CPU */
  int runs;
  int warmup;
  uint64_t seed;
  int measure; /* info without FILE: re-measure the peaks */
} kiln_cli_options_t;

/* A loaded model and the pool it runs on (the model borrows the pool, so the
 * pool is released after it). */
typedef struct kiln_cli_session_s {
  kiln_pool_t* pool;
  kiln_model_t* model;
  kiln_writes_t writes; /* outputs that are new values of inputs ("writes" section) */
  kiln_tokenizer_t* tokenizer; /* the "tokenizer" section, or NULL */
  unsigned format_major, format_minor;
  size_t file_size;
} kiln_cli_session_t;

/* Caller-owned tensors for one side (inputs or outputs) of a run, with the
 * concrete shapes they have (a symbolic model's per --shape). */
typedef struct kiln_cli_tensors_s {
  kiln_tensor_t* t;
  int64_t* shapes; /* n x KILN_MAX_RANK */
  uint8_t* borrowed; /* per tensor: 1 when its data is another table's (not freed here) */
  int32_t n;
} kiln_cli_tensors_t;

/* ---- usage ------------------------------------------------------------- */

static const char kiln_cli_usage_text[] =
    "usage: kiln COMMAND FILE [options]\n"
    "\n"
    "Runs a .kiln artifact with the C runtime alone.\n"
    "\n"
    "commands:\n"
    "  info             this machine: CPU, caches, ISA, measured peaks (--measure: again)\n"
    "  info FILE        format version, inputs and outputs, nodes by op, constants,\n"
    "                   arena size and the node listing\n"
    "  run FILE         runs once and summarises each output\n"
    "      --input NAME=PATH  raw little-endian dense data for input NAME (its name,\n"
    "                         or its index); repeat per input. Inputs not given get\n"
    "                         pseudo-random data: floats uniform in [-1, 1), integers\n"
    "                         0, bools false\n"
    "      --output-dir DIR   writes output K to DIR/outputK.bin (raw, dense)\n"
    "      --seed S           seed of the pseudo-random inputs (default 0)\n"
    "  bench FILE       latency over repeated runs: median, min, p90\n"
    "      --runs N (default 50)  --warmup N (default 5)\n"
    "  profile FILE     per-node roofline table (time, FLOPs, bytes, % of peak), slowest first\n"
    "      --runs N (default 20)  --warmup N (default 2)\n"
    "  run, bench and profile take --shape NAME=DIMS (DIMS like 2x40x16): the\n"
    "                   shape input NAME (its name, or its index) runs at; a model\n"
    "                   with symbolic sizes needs one per input whose symbols the\n"
    "                   others do not give ('kiln info FILE' shows them and their\n"
    "                   ranges)\n"
    "  generate FILE    generation from a traced generation step (a KV cache passed\n"
    "                   in and updated in place: kiln.llm.StaticCacheStep); prints\n"
    "                   the new text (or token ids), a line per prompt, timing on stderr\n"
    "      --text TEXT        a prompt (again for each row of a step traced with\n"
    "                         batch > 1), read by the tokenizer saved with the step\n"
    "                         (kiln.save(..., tokenizer=tok))\n"
    "      --text-file PATH   the file's text as one prompt ('-': stdin)\n"
    "      --chat TEXT        a user message, put in the tokenizer's chat template\n"
    "                         (an instruct model's prompt, as apply_chat_template)\n"
    "      --prompt IDS       the prompt's token ids, like 5,17,9 (again for each\n"
    "                         row of a step traced with batch > 1)\n"
    "      --prompt-file PATH a prompt a line, ids separated by commas or spaces\n"
    "                         ('-': stdin)\n"
    "      --ids              print token ids even when the step has a tokenizer\n"
    "      --max-new-tokens N (default 32)  --eos IDS (a row stops after any of\n"
    "                         these tokens, like 2 or 128001,128009)\n"
    "      --temperature T    0 (default): greedy; above: sampled, after\n"
    "      --top-k K          keeping the K most likely (ties with the K-th too)\n"
    "      --top-p P          and the fewest most likely whose mass reaches P\n"
    "      --seed S           the draw's seed (default: from the clock, printed)\n"
    "      --repetition-penalty R  a seen token's logit divided by R if positive,\n"
    "                         times R if not, as generate() does (default 1: off)\n"
    "  tokenize FILE    the ids of --text TEXT or --text-file PATH by the file's\n"
    "                   tokenizer (--no-special: without its BOS), or the text of\n"
    "      --decode IDS       these ids\n"
    "  help [COMMAND]   this text\n"
    "  --version        kiln and .kiln format versions, CPU ISA\n"
    "\n"
    "common options:\n"
    "  --threads N      threads to run on (default: KILN_NUM_THREADS, else one\n"
    "                   per online CPU)\n"
    "\n"
    "Exit status: 0 on success, 2 for a bad command line, 1 for other errors.\n";

/* Prints "kiln: <message>" and a hint; returns the usage exit code. */
static int kiln_cli_usage_error(const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

static int kiln_cli_usage_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kiln: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputs("\n(run 'kiln help' for usage)\n", stderr);
  va_end(ap);
  return KILN_CLI_EXIT_USAGE;
}

/* ---- argument parsing ----------------------------------------------------- */

/* Matches "--name VALUE" and "--name=VALUE"; advances *i past what it used.
 * Returns 1 when matched (with *out_value set, or NULL if VALUE is
 * missing), 0 when argv[*i] is another option. */
static int kiln_cli_match_option(int argc, char** argv, int* i, const char* name,
                                 const char** out_value) {
  const char* arg = argv[*i];
  size_t len = strlen(name);
  if (strncmp(arg, name, len) != 0) return 0;
  if (arg[len] == '=') {
    *out_value = arg + len + 1;
    return 1;
  }
  if (arg[len] != '\0') return 0;
  *out_value = *i + 1 < argc ? argv[++*i] : NULL;
  return 1;
}

/* Fills *o from argv[2..]. Returns 0, or the exit code after printing. */
static int kiln_cli_parse(int argc, char** argv, kiln_cli_command_t command,
                          kiln_cli_options_t* o) {
  const char* cmd = kiln_cli_command_names[command];
  o->command = command;
  o->runs = command == KILN_CLI_PROFILE ? 20 : command == KILN_CLI_BENCH ? 50 : 1;
  o->warmup = command == KILN_CLI_PROFILE ? 2 : command == KILN_CLI_BENCH ? 5 : 0;
  for (int i = 2; i < argc; ++i) {
    const char* arg = argv[i];
    const char* value = NULL;
    long long n;
    if (arg[0] != '-' || arg[1] == '\0') {
      if (o->file) return kiln_cli_usage_error("%s: more than one FILE ('%s', '%s')", cmd,
                                               o->file, arg);
      o->file = arg;
    } else if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
      fputs(kiln_cli_usage_text, stdout);
      return -1; /* handled: exit 0 */
    } else if (kiln_cli_match_option(argc, argv, &i, "--threads", &value)) {
      if (!kiln_cli_parse_int(value, 1, 4096, &n))
        return kiln_cli_usage_error("--threads wants a whole number from 1 to 4096, got '%s'",
                                    value ? value : "");
      o->threads = (int)n;
    } else if (command == KILN_CLI_INFO && !strcmp(arg, "--measure")) {
      o->measure = 1;
    } else if (command == KILN_CLI_RUN &&
               kiln_cli_match_option(argc, argv, &i, "--input", &value)) {
      if (!value || !*value) return kiln_cli_usage_error("--input wants NAME=PATH");
      o->input_specs[o->n_input_specs++] = value;
    } else if (command != KILN_CLI_INFO &&
               kiln_cli_match_option(argc, argv, &i, "--shape", &value)) {
      if (!value || !*value) return kiln_cli_usage_error("--shape wants NAME=DIMS (like x=2x40)");
      o->shape_specs[o->n_shape_specs++] = value;
    } else if (command == KILN_CLI_RUN &&
               kiln_cli_match_option(argc, argv, &i, "--output-dir", &value)) {
      if (!value || !*value) return kiln_cli_usage_error("--output-dir wants a directory");
      o->output_dir = value;
    } else if (command == KILN_CLI_RUN &&
               kiln_cli_match_option(argc, argv, &i, "--seed", &value)) {
      if (!kiln_cli_parse_int(value, 0, INT64_MAX, &n))
        return kiln_cli_usage_error("--seed wants a non-negative whole number, got '%s'",
                                    value ? value : "");
      o->seed = (uint64_t)n;
    } else if ((command == KILN_CLI_BENCH || command == KILN_CLI_PROFILE) &&
               kiln_cli_match_option(argc, argv, &i, "--runs", &value)) {
      if (!kiln_cli_parse_int(value, 1, 1000000, &n))
        return kiln_cli_usage_error("--runs wants a whole number from 1 to 1000000, got '%s'",
                                    value ? value : "");
      o->runs = (int)n;
    } else if ((command == KILN_CLI_BENCH || command == KILN_CLI_PROFILE) &&
               kiln_cli_match_option(argc, argv, &i, "--warmup", &value)) {
      if (!kiln_cli_parse_int(value, 0, 1000000, &n))
        return kiln_cli_usage_error("--warmup wants a whole number from 0 to 1000000, got '%s'",
                                    value ? value : "");
      o->warmup = (int)n;
    } else {
      return kiln_cli_usage_error("%s: unknown option '%s'", cmd, arg);
    }
  }
  if (!o->file && command != KILN_CLI_INFO) return kiln_cli_usage_error("%s: no FILE given", cmd);
  if (o->file && o->measure) return kiln_cli_usage_error("info: --measure is for the machine (no FILE)");
  return 0;
}

/* ---- loading -------------------------------------------------------------- */

static uint16_t kiln_cli_u16le(const unsigned char* p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}

/* The thread count the default pool would pick, so that the CLI can own
 * (and release) its pool instead of the never-freed process-wide one. */
static int kiln_cli_default_threads(void) {
  const char* env = getenv("KILN_NUM_THREADS");
  int n = env ? atoi(env) : 0;
  if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? n : 1;
}

static void kiln_cli_session_deinitialize(kiln_cli_session_t* s) {
  kiln_model_release(s->model); /* before the pool it borrows */
  s->model = NULL;
  kiln_writes_clear(&s->writes);
  kiln_tokenizer_free(s->tokenizer);
  s->tokenizer = NULL;
  if (s->pool) kiln_pool_release(s->pool);
  s->pool = NULL;
}

static kiln_status_t kiln_cli_session_initialize(const char* path, int threads,
                                                 kiln_cli_session_t* s) {
  memset(s, 0, sizeof(*s));
  void* bytes = NULL;
  size_t size = 0;
  KILN_RETURN_IF_ERROR(kiln_artifact_load_file(path, &bytes, &size));
  kiln_graph_t* graph = NULL;
  kiln_status_t st = kiln_artifact_read(bytes, size, kiln_allocator_system(), &graph);
  if (st) {
    free(bytes); /* load_file's buffer comes from the system allocator: free() */
    /* Say plainly that the file is bad, then the reader's what and where. */
    if (kiln_status_code(st) == KILN_CORRUPT_ARTIFACT)
      return kiln_status_annotate(st, "corrupt artifact '%s'", path);
    return kiln_status_annotate(st, "loading '%s'", path);
  }
  /* A model saved with CPU fallback needs PyTorch for its eager ops: this
   * file's graph is only its first kiln piece. */
  const void* section = NULL;
  size_t section_len = 0;
  kiln_status_free(kiln_artifact_find_section(bytes, size, "py.partition", &section, &section_len));
  if (section) {
    kiln_graph_release(graph);
    free(bytes);
    return kiln_status_make(KILN_UNSUPPORTED,
                            "'%s' was saved from a model with CPU fallback: some of its ops run "
                            "in eager PyTorch, so it loads only with kiln.load in Python",
                            path);
  }
  /* Which outputs update inputs: checked against the graph now, so a bad
   * section is refused like any other corruption. */
  kiln_status_free(kiln_artifact_find_section(bytes, size, KILN_WRITES_SECTION, &section,
                                              &section_len));
  st = kiln_writes_load(graph, section, section_len, &s->writes);
  if (!st) {
    kiln_status_free(kiln_artifact_find_section(bytes, size, KILN_TOKENIZER_SECTION, &section, &section_len));
    if (section) st = kiln_tokenizer_load(section, section_len, &s->tokenizer);
  }
  if (st) {
    kiln_writes_clear(&s->writes);
    kiln_graph_release(graph);
    free(bytes);
    return kiln_status_annotate(st, "corrupt artifact '%s'", path);
  }
  /* The reader checked the header, so the version fields are in bounds. */
  s->format_major = kiln_cli_u16le((const unsigned char*)bytes + KILN_FORMAT_HDR_MAJOR);
  s->format_minor = kiln_cli_u16le((const unsigned char*)bytes + KILN_FORMAT_HDR_MINOR);
  s->file_size = size;
  st = kiln_pool_create(threads, &s->pool);
  if (st) {
    kiln_writes_clear(&s->writes);
    kiln_graph_release(graph);
    free(bytes);
    return st;
  }
  /* The model takes the graph and the buffer its constants borrow; it frees
   * the buffer with the system allocator, which is what load_file used. */
  const void* plan = NULL;
  size_t plan_size = 0;
  kiln_status_free(kiln_artifact_find_section(bytes, size, KILN_PLAN_SECTION, &plan, &plan_size));
  st = kiln_model_create_with_plan(graph, bytes, s->pool, plan, plan_size, &s->model);
  if (st) {
    kiln_cli_session_deinitialize(s);
    return kiln_status_annotate(st, "loading '%s'", path);
  }
  return kiln_ok();
}

/* ---- tensors ---------------------------------------------------------------- */

static void kiln_cli_tensors_deinitialize(kiln_cli_tensors_t* ts) {
  for (int32_t i = 0; ts->t && i < ts->n; ++i)
    if (!ts->borrowed[i]) kiln_allocator_free(kiln_allocator_system(), ts->t[i].data);
  free(ts->t);
  free(ts->shapes);
  free(ts->borrowed);
  ts->t = NULL;
  ts->shapes = NULL;
  ts->borrowed = NULL;
  ts->n = 0;
}

/* The value `v` at a concrete shape (its name and dtype kept). */
static kiln_value_t kiln_cli_value_at(const kiln_value_t* v, int32_t rank, const int64_t* shape) {
  kiln_value_t c = *v;
  c.rank = rank;
  memcpy(c.shape, shape, sizeof(int64_t) * (size_t)rank);
  return c;
}

/* One dense, 64-byte-aligned buffer per value id in ids[0..n), of shape
 * shapes[i] (n x KILN_MAX_RANK) with ranks[i] dims (NULL: the values' own,
 * which must be concrete). */
static kiln_status_t kiln_cli_tensors_initialize(const kiln_graph_t* g, const int32_t* ids,
                                                 int32_t n, const int64_t* shapes,
                                                 const int32_t* ranks, kiln_cli_tensors_t* ts) {
  ts->n = 0;
  ts->t = calloc((size_t)n + 1, sizeof(kiln_tensor_t));
  ts->shapes = calloc((size_t)n * KILN_MAX_RANK + 1, sizeof(int64_t));
  ts->borrowed = calloc((size_t)n + 1, 1);
  if (!ts->t || !ts->shapes || !ts->borrowed) {
    kiln_cli_tensors_deinitialize(ts);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "tensor table");
  }
  for (int32_t i = 0; i < n; ++i) {
    const kiln_value_t* v = &g->values[ids[i]];
    int64_t* shape = ts->shapes + (size_t)i * KILN_MAX_RANK;
    int32_t rank = ranks ? ranks[i] : v->rank;
    memcpy(shape, shapes ? shapes + (size_t)i * KILN_MAX_RANK : v->shape,
           sizeof(int64_t) * (size_t)rank);
    kiln_value_t at = kiln_cli_value_at(v, rank, shape);
    kiln_status_t s = kiln_allocator_calloc(kiln_allocator_system(), kiln_value_dense_bytes(&at),
                                            &ts->t[i].data);
    if (s) {
      kiln_cli_tensors_deinitialize(ts);
      return s;
    }
    ts->n = i + 1;
    ts->t[i].dtype = v->dtype;
    ts->t[i].rank = rank;
    ts->t[i].shape = shape;
  }
  return kiln_ok();
}

/* "input 0 ('x')" into buf. */
static const char* kiln_cli_input_label(const kiln_graph_t* g, int32_t i, char* buf,
                                        size_t size) {
  const char* name = g->values[g->inputs[i]].name;
  if (name) snprintf(buf, size, "input %d ('%s')", i, name);
  else snprintf(buf, size, "input %d", i);
  return buf;
}

/* Which graph input a --input (or --shape) NAME refers to: its name, else
 * its index. */
static kiln_status_t kiln_cli_find_input(const kiln_graph_t* g, const char* option,
                                         const char* name, size_t len, int32_t* out_index) {
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const char* n = g->values[g->inputs[i]].name;
    if (n && strlen(n) == len && !strncmp(n, name, len)) {
      *out_index = i;
      return kiln_ok();
    }
  }
  char digits[24];
  long long idx;
  if (len < sizeof digits) {
    memcpy(digits, name, len);
    digits[len] = '\0';
    if (kiln_cli_parse_int(digits, 0, g->n_inputs - 1, &idx)) {
      *out_index = (int32_t)idx;
      return kiln_ok();
    }
  }
  /* List what the model does take, so the fix is obvious. */
  char names[512];
  size_t at = 0;
  names[0] = '\0';
  for (int32_t i = 0; i < g->n_inputs && at < sizeof names; ++i) {
    const char* n = g->values[g->inputs[i]].name;
    at += (size_t)snprintf(names + at, sizeof names - at, "%s%d%s%s", i ? ", " : "", i,
                           n ? "=" : "", n ? n : "");
  }
  return kiln_status_make(KILN_INVALID_ARGUMENT,
                          "%s: the model has no input '%.*s' (its inputs: %s)", option, (int)len,
                          name, g->n_inputs ? names : "none");
}

/* Reads each --input file (sizes checked exactly) and fills the rest with
 * pseudo-random data, saying so. */
static kiln_status_t kiln_cli_bind_inputs(const kiln_graph_t* g, const kiln_cli_options_t* o,
                                          kiln_cli_tensors_t* ins, int announce) {
  const char** given = calloc((size_t)g->n_inputs + 1, sizeof(char*));
  if (!given) return kiln_status_make(KILN_OUT_OF_MEMORY, "input table");
  kiln_status_t s = kiln_ok();
  char label[160];
  for (int k = 0; k < o->n_input_specs && !s; ++k) {
    const char* spec = o->input_specs[k];
    const char* eq = strchr(spec, '=');
    int32_t idx = 0;
    if (!eq) {
      /* A bare path is fine when there is only one input to give it to. */
      if (g->n_inputs != 1)
        s = kiln_status_make(KILN_INVALID_ARGUMENT,
                             "--input '%s': the model has %d inputs, say which (NAME=PATH)",
                             spec, g->n_inputs);
      else given[0] = spec;
      continue;
    }
    s = kiln_cli_find_input(g, "--input", spec, (size_t)(eq - spec), &idx);
    if (s) break;
    if (given[idx])
      s = kiln_status_make(KILN_INVALID_ARGUMENT, "--input: %s given twice",
                           kiln_cli_input_label(g, idx, label, sizeof label));
    else given[idx] = eq + 1;
  }
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    const kiln_value_t at = kiln_cli_value_at(&g->values[g->inputs[i]], ins->t[i].rank,
                                              ins->t[i].shape);
    const kiln_value_t* v = &at;
    char desc[160];
    kiln_cli_input_label(g, i, label, sizeof label);
    kiln_value_describe(v, desc, sizeof desc);
    if (given[i]) {
      char what[400];
      snprintf(what, sizeof what, "%s %s", label, desc);
      s = kiln_cli_read_exact(what, given[i], ins->t[i].data, kiln_value_dense_bytes(v));
      if (!s && announce) printf("%s %s: read from %s\n", label, desc, given[i]);
    } else {
      /* Each input gets its own stream so adding one does not shift another. */
      kiln_cli_fill_random(v->dtype, ins->t[i].data, (size_t)kiln_value_numel(v),
                           o->seed * 1000003u + (uint64_t)i);
      if (announce)
        printf("%s %s: no --input given, using %s\n", label, desc,
               kiln_dtype_is_float(v->dtype) ? "pseudo-random uniform [-1, 1)"
               : v->dtype == KILN_BOOL       ? "all false"
                                             : "all zeros");
    }
  }
  free(given);
  return s;
}

/* ---- shapes ----------------------------------------------------------------- */

/* "B in 1..16" for a dim that is a symbol, "B + 1" for an expression, into buf. */
static const char* kiln_cli_sym_dim_text(const kiln_graph_t* g, int64_t d, char* buf,
                                         size_t size) {
  char e[96];
  const kiln_sym_table_t* t = g->syms;
  const kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(d)];
  if (x->kind == KILN_SYM_VAR)
    snprintf(buf, size, "%s in %lld..%lld", t->vars[x->a].name, (long long)t->vars[x->a].lo,
             (long long)t->vars[x->a].hi);
  else
    snprintf(buf, size, "%s", kiln_sym_describe(t, d, e, sizeof e));
  return buf;
}

/* Parses DIMS ("2x40x16"; "" is a 0-d shape) into shape; returns the rank
 * or -1 (with *bad pointing at the bad part, *bad_len its length). */
static int32_t kiln_cli_parse_dims(const char* text, int64_t* shape, const char** bad,
                                   size_t* bad_len) {
  int32_t rank = 0;
  if (!*text) return 0;
  for (const char* p = text;;) {
    const char* end = strchr(p, 'x');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char digits[24];
    long long v;
    *bad = p;
    *bad_len = len;
    if (rank == KILN_MAX_RANK || len == 0 || len >= sizeof digits) return -1;
    memcpy(digits, p, len);
    digits[len] = '\0';
    if (!kiln_cli_parse_int(digits, 0, KILN_SYM_RANGE_MAX, &v)) return -1;
    shape[rank++] = v;
    if (!end) return rank;
    p = end + 1;
  }
}

/* The inputs' shapes (n_inputs x KILN_MAX_RANK): each input's own, its
 * symbolic dims given by --shape. Errors name the input and say what to
 * pass; a symbolic dim that is an expression is left to the model's
 * binding (which checks it against the symbols the other dims give). */
static kiln_status_t kiln_cli_input_shapes(const kiln_graph_t* g, const kiln_cli_options_t* o,
                                           int64_t* shapes) {
  char label[160], desc[200], text[160];
  int* given = calloc((size_t)g->n_inputs + 1, sizeof(int));
  if (!given) return kiln_status_make(KILN_OUT_OF_MEMORY, "shape table");
  kiln_status_t s = kiln_ok();
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* v = &g->values[g->inputs[i]];
    memcpy(shapes + (size_t)i * KILN_MAX_RANK, v->shape, sizeof(int64_t) * (size_t)v->rank);
  }
  for (int k = 0; k < o->n_shape_specs && !s; ++k) {
    const char* spec = o->shape_specs[k];
    const char* eq = strchr(spec, '=');
    const char* dims = eq ? eq + 1 : spec;
    int32_t idx = 0;
    if (!eq && g->n_inputs != 1)
      s = kiln_status_make(KILN_INVALID_ARGUMENT,
                           "--shape '%s': the model has %d inputs, say which (NAME=DIMS)", spec,
                           g->n_inputs);
    if (!s && eq) s = kiln_cli_find_input(g, "--shape", spec, (size_t)(eq - spec), &idx);
    if (s) break;
    const kiln_value_t* v = &g->values[g->inputs[idx]];
    kiln_cli_input_label(g, idx, label, sizeof label);
    kiln_graph_describe_value(g, v, desc, sizeof desc);
    if (given[idx]) {
      s = kiln_status_make(KILN_INVALID_ARGUMENT, "--shape: %s given twice", label);
      break;
    }
    given[idx] = 1;
    int64_t shape[KILN_MAX_RANK];
    const char* bad = dims;
    size_t bad_len = 0;
    int32_t rank = kiln_cli_parse_dims(dims, shape, &bad, &bad_len);
    if (rank < 0) {
      s = kiln_status_make(KILN_INVALID_ARGUMENT,
                           "--shape '%s': '%.*s' is not a size (DIMS is sizes 0..2^40 joined by "
                           "'x', at most %d, like 2x40x16)", spec, (int)bad_len, bad,
                           KILN_MAX_RANK);
      break;
    }
    if (rank != v->rank) {
      s = kiln_status_make(KILN_INVALID_ARGUMENT,
                           "--shape '%s': %s is %s, %d dimension%s; '%s' gives %d", spec, label,
                           desc, v->rank, v->rank == 1 ? "" : "s", dims, rank);
      break;
    }
    int64_t numel = 1;
    for (int32_t d = 0; d < rank && !s; ++d) {
      int64_t want = v->shape[d];
      if (!kiln_dim_is_sym(want)) {
        if (shape[d] != want)
          s = kiln_status_make(KILN_INVALID_ARGUMENT,
                               "--shape '%s': %s is %s: dimension %d is fixed at %lld, not %lld",
                               spec, label, desc, d, (long long)want, (long long)shape[d]);
      } else {
        const kiln_sym_expr_t* x = &g->syms->exprs[kiln_dim_sym_id(want)];
        const kiln_sym_var_t* var = x->kind == KILN_SYM_VAR ? &g->syms->vars[x->a] : NULL;
        if (var && (shape[d] < var->lo || shape[d] > var->hi))
          s = kiln_status_make(KILN_INVALID_ARGUMENT,
                               "--shape '%s': %s is %s: dimension %d (%s) is %lld, outside its "
                               "range %lld..%lld", spec, label, desc, d, var->name,
                               (long long)shape[d], (long long)var->lo, (long long)var->hi);
      }
      if (!s && shape[d] && numel > ((int64_t)1 << 44) / shape[d])
        s = kiln_status_make(KILN_INVALID_ARGUMENT,
                             "--shape '%s': more than 2^44 elements", spec);
      numel *= shape[d];
    }
    if (!s) memcpy(shapes + (size_t)idx * KILN_MAX_RANK, shape, sizeof(int64_t) * (size_t)rank);
  }
  /* A symbolic input not given takes the values the given ones bound for
   * its symbols (a generation step's cache from its input ids' rows);
   * otherwise it needs its shape. */
  int64_t bound[KILN_SYM_MAX_VARS];
  for (int32_t k = 0; k < KILN_SYM_MAX_VARS; ++k) bound[k] = -1;
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    const kiln_value_t* v = &g->values[g->inputs[i]];
    for (int32_t d = 0; given[i] && d < v->rank; ++d) {
      if (!kiln_dim_is_sym(v->shape[d])) continue;
      const kiln_sym_expr_t* x = &g->syms->exprs[kiln_dim_sym_id(v->shape[d])];
      if (x->kind == KILN_SYM_VAR) bound[x->a] = shapes[(size_t)i * KILN_MAX_RANK + (size_t)d];
    }
  }
  for (int32_t i = 0; i < g->n_inputs && !s; ++i) {
    const kiln_value_t* v = &g->values[g->inputs[i]];
    if (given[i] || !kiln_value_is_symbolic(v)) continue;
    int known = 1;
    for (int32_t d = 0; d < v->rank && known; ++d) {
      if (!kiln_dim_is_sym(v->shape[d])) continue;
      const kiln_sym_expr_t* x = &g->syms->exprs[kiln_dim_sym_id(v->shape[d])];
      known = x->kind == KILN_SYM_VAR && bound[x->a] >= 0;
      if (known) shapes[(size_t)i * KILN_MAX_RANK + (size_t)d] = bound[x->a];
    }
    if (known) continue;
    kiln_cli_input_label(g, i, label, sizeof label);
    kiln_graph_describe_value(g, v, desc, sizeof desc);
    char dims_text[512], example[160];
    size_t at = 0, ex = 0;
    dims_text[0] = example[0] = '\0';
    for (int32_t d = 0; d < v->rank; ++d) {
      int64_t w = v->shape[d];
      /* The example: each symbol at its first probe value (in range). */
      int64_t probe = kiln_sym_probe(g->syms, w, 0);
      ex += (size_t)snprintf(example + ex, ex < sizeof example ? sizeof example - ex : 0,
                             "%s%lld", d ? "x" : "", (long long)probe);
      if (ex >= sizeof example) ex = sizeof example - 1;
      if (!kiln_dim_is_sym(w)) continue;
      at += (size_t)snprintf(dims_text + at, at < sizeof dims_text ? sizeof dims_text - at : 0,
                             "%sdimension %d is %s", at ? ", " : "", d,
                             kiln_cli_sym_dim_text(g, w, text, sizeof text));
      if (at >= sizeof dims_text) at = sizeof dims_text - 1;
    }
    const char* name = v->name ? v->name : NULL;
    char pass[64];
    if (name) snprintf(pass, sizeof pass, "%s", name);
    else snprintf(pass, sizeof pass, "%d", i);
    s = kiln_status_make(KILN_INVALID_ARGUMENT,
                         "%s is %s with symbolic sizes (%s): pass its shape with --shape "
                         "%s=DIMS, for example --shape %s=%s", label, desc, dims_text, pass, pass,
                         example);
  }
  free(given);
  return s;
}

/* The input tensors at their shapes (kiln_cli_input_shapes) and output
 * buffers of the shapes the model gives for them. */
static kiln_status_t kiln_cli_make_tensors(const kiln_cli_options_t* o, kiln_cli_session_t* s,
                                           kiln_cli_tensors_t* ins, kiln_cli_tensors_t* outs) {
  const kiln_graph_t* g = kiln_model_graph(s->model);
  int64_t* shapes = calloc((size_t)(g->n_inputs + g->n_outputs) * KILN_MAX_RANK + 1,
                           sizeof(int64_t));
  int32_t* ranks = calloc((size_t)(g->n_inputs + g->n_outputs) + 1, sizeof(int32_t));
  kiln_status_t st = shapes && ranks ? kiln_ok()
                                     : kiln_status_make(KILN_OUT_OF_MEMORY, "shape table");
  if (!st) st = kiln_cli_input_shapes(g, o, shapes);
  for (int32_t i = 0; !st && i < g->n_inputs; ++i) ranks[i] = g->values[g->inputs[i]].rank;
  if (!st) st = kiln_cli_tensors_initialize(g, g->inputs, g->n_inputs, shapes, ranks, ins);
  int64_t* out_shapes = shapes ? shapes + (size_t)g->n_inputs * KILN_MAX_RANK : NULL;
  int32_t* out_ranks = ranks ? ranks + g->n_inputs : NULL;
  /* A symbolic model's outputs are sized by binding its symbols, which
   * checks the inputs' sizes against each other (errors name them). */
  if (!st && kiln_model_is_symbolic(s->model))
    st = kiln_model_output_shapes(s->model, ins->t, ins->n, out_shapes, out_ranks);
  if (!st)
    st = kiln_cli_tensors_initialize(g, g->outputs, g->n_outputs,
                                     kiln_model_is_symbolic(s->model) ? out_shapes : NULL,
                                     kiln_model_is_symbolic(s->model) ? out_ranks : NULL, outs);
  free(shapes);
  free(ranks);
  /* An output that updates its input in place gets the input's memory, as
   * a caller that runs the model in a loop gives it (kiln generate): a
   * separate buffer would time a copy of the whole input that such a run
   * never makes (for a KV cache, all of it, every step). */
  for (int32_t k = 0; !st && k < outs->n; ++k) {
    const int32_t i = s->writes.input ? s->writes.input[k] : -1;
    if (i < 0 || !s->writes.in_place[k]) continue;
    kiln_allocator_free(kiln_allocator_system(), outs->t[k].data);
    outs->t[k].data = ins->t[i].data;
    outs->borrowed[k] = 1;
  }
  return st;
}

/* "symbols: batch = 2, seq = 40" for a symbolic model: the values the
 * inputs' bare-symbol dims give. */
static void kiln_cli_print_binding(const kiln_graph_t* g, const kiln_cli_tensors_t* ins) {
  const kiln_sym_table_t* t = g->syms;
  int64_t vals[KILN_SYM_MAX_VARS];
  for (int32_t k = 0; k < t->n_vars; ++k) vals[k] = -1;
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* v = &g->values[g->inputs[i]];
    for (int32_t d = 0; d < v->rank; ++d) {
      if (!kiln_dim_is_sym(v->shape[d])) continue;
      const kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(v->shape[d])];
      if (x->kind == KILN_SYM_VAR && vals[x->a] < 0) vals[x->a] = ins->t[i].shape[d];
    }
  }
  printf("symbols:");
  for (int32_t k = 0; k < t->n_vars; ++k) {
    if (vals[k] >= 0) printf("%s %s = %lld", k ? "," : "", t->vars[k].name, (long long)vals[k]);
    else printf("%s %s (from the inputs' sizes)", k ? "," : "", t->vars[k].name);
  }
  printf("\n");
}

/* ---- timing ----------------------------------------------------------------- */

static double kiln_cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int kiln_cli_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* ---- commands ------------------------------------------------------------------ */

static void kiln_cli_print_bytes(FILE* out, size_t n) {
  fprintf(out, "%zu bytes", n);
  if (n >= ((size_t)1 << 20)) fprintf(out, " (%.2f MiB)", (double)n / (1 << 20));
  else if (n >= 1024) fprintf(out, " (%.1f KiB)", (double)n / 1024);
}

static kiln_status_t kiln_cli_info(const kiln_cli_options_t* o, kiln_cli_session_t* s) {
  const kiln_graph_t* g = kiln_model_graph(s->model);
  const kiln_plan_t* plan = kiln_model_plan(s->model);
  char buf[160];
  printf("file:       %s, ", o->file);
  kiln_cli_print_bytes(stdout, s->file_size);
  printf("\nformat:     %u.%u\n", s->format_major, s->format_minor);
  printf("inputs:     %d\n", g->n_inputs);
  for (int32_t i = 0; i < g->n_inputs; ++i) {
    const kiln_value_t* v = &g->values[g->inputs[i]];
    printf("  %d  %-16s %s\n", i, v->name ? v->name : "-",
           kiln_graph_describe_value(g, v, buf, sizeof buf));
  }
  printf("outputs:    %d\n", g->n_outputs);
  for (int32_t i = 0; i < g->n_outputs; ++i) {
    const kiln_value_t* v = &g->values[g->outputs[i]];
    printf("  %d  %-16s %s", i, v->name ? v->name : "-",
           kiln_graph_describe_value(g, v, buf, sizeof buf));
    const int32_t in = s->writes.input ? s->writes.input[i] : -1;
    if (in >= 0) {
      const char* name = g->values[g->inputs[in]].name;
      printf("  updates input %d%s%s%s%s", in, name ? " ('" : "", name ? name : "",
             name ? "')" : "", s->writes.in_place[i] ? " in place" : " (copied in after a run)");
    }
    printf("\n");
  }
  if (s->tokenizer)
    printf("tokenizer:  %s (kiln generate --text, kiln tokenize)\n",
           kiln_tokenizer_describe(s->tokenizer, buf, sizeof buf));
  if (kiln_model_is_symbolic(s->model)) {
    /* The symbols and their ranges; --shape gives them values. */
    const kiln_sym_table_t* t = g->syms;
    printf("symbols:    %d (run, bench and profile take the inputs' shapes with --shape)\n",
           t->n_vars);
    for (int32_t k = 0; k < t->n_vars; ++k)
      printf("  %-18s %lld..%lld\n", t->vars[k].name, (long long)t->vars[k].lo,
             (long long)t->vars[k].hi);
    /* Conditions beyond the ranges, checked at every call (kiln_sym_guard_add). */
    if (t->n_guards) printf("guards:     %d (a call that breaks one is refused)\n", t->n_guards);
    for (int32_t k = 0; k < t->n_guards; ++k)
      printf("  %s\n", kiln_sym_guard_describe(t, &t->guards[k], buf, sizeof buf));
  }
  int32_t by_op[KILN_OP_COUNT];
  memset(by_op, 0, sizeof by_op);
  for (int32_t n = 0; n < g->n_nodes; ++n)
    if ((unsigned)g->nodes[n].op < (unsigned)KILN_OP_COUNT) by_op[g->nodes[n].op]++;
  printf("nodes:      %d\n", g->n_nodes);
  for (int op = 0; op < KILN_OP_COUNT; ++op)
    if (by_op[op]) printf("  %-16s %d\n", kiln_op_name((kiln_op_t)op), by_op[op]);
  size_t const_bytes = 0;
  int32_t n_const = 0;
  for (int32_t v = 0; v < g->n_values; ++v)
    if (g->values[v].kind == KILN_VALUE_CONSTANT) {
      const_bytes += g->values[v].nbytes;
      n_const++;
    }
  printf("constants:  %d tensors, ", n_const);
  kiln_cli_print_bytes(stdout, const_bytes);
  printf("\narena:      ");
  if (plan) {
    kiln_cli_print_bytes(stdout, plan->arena_size);
    printf(" (static memory plan)\nlisting:\n");
  } else {
    printf("planned per shape at run time (symbolic sizes)\nlisting:\n");
  }
  fflush(stdout);
  kiln_graph_print(g, stdout);
  return kiln_ok();
}

static void kiln_cli_print_output(const kiln_graph_t* g, int32_t k, const kiln_tensor_t* t) {
  const kiln_value_t* sym = &g->values[g->outputs[k]];
  const kiln_value_t at = kiln_cli_value_at(sym, t->rank, t->shape);
  const kiln_value_t* v = &at;
  char desc[160], sym_desc[200];
  size_t numel = (size_t)kiln_value_numel(v);
  kiln_cli_stats_t st;
  kiln_cli_stats_compute(v->dtype, t->data, numel, &st);
  printf("output %d%s%s%s %s", k, v->name ? " ('" : "", v->name ? v->name : "",
         v->name ? "')" : "", kiln_value_describe(v, desc, sizeof desc));
  if (kiln_value_is_symbolic(sym))
    printf(" = %s", kiln_graph_describe_value(g, sym, sym_desc, sizeof sym_desc));
  printf("\n");
  if (numel == 0) {
    printf("  (empty)\n");
    return;
  }
  printf("  min %.6g  max %.6g  mean %.6g", st.min, st.max, st.mean);
  if (st.nan_count) printf("  NaN %zu", st.nan_count);
  printf("\n  first:");
  size_t show = numel < KILN_CLI_SHOW_VALUES ? numel : KILN_CLI_SHOW_VALUES;
  for (size_t i = 0; i < show; ++i) printf(" %.6g", kiln_cli_elem_get(v->dtype, t->data, i));
  printf("%s\n", numel > show ? " ..." : "");
}

static kiln_status_t kiln_cli_run(const kiln_cli_options_t* o, kiln_cli_session_t* s) {
  const kiln_graph_t* g = kiln_model_graph(s->model);
  kiln_cli_tensors_t ins = {0}, outs = {0};
  kiln_status_t st = kiln_cli_make_tensors(o, s, &ins, &outs);
  /* Check the output directory before running, not after a long run. */
  if (!st && o->output_dir) st = kiln_cli_ensure_dir(o->output_dir);
  if (!st && kiln_model_is_symbolic(s->model)) kiln_cli_print_binding(g, &ins);
  if (!st) st = kiln_cli_bind_inputs(g, o, &ins, 1);
  double t0 = kiln_cli_now_ms();
  if (!st) st = kiln_model_run(s->model, ins.t, ins.n, outs.t, outs.n);
  double ms = kiln_cli_now_ms() - t0;
  if (!st) {
    printf("ran in %.3f ms on %d thread%s (%s)\n", ms, kiln_pool_size(s->pool),
           kiln_pool_size(s->pool) == 1 ? "" : "s", kiln_cpu_isa_name(kiln_cpu_isa()));
    for (int32_t k = 0; k < outs.n; ++k) kiln_cli_print_output(g, k, &outs.t[k]);
  }
  for (int32_t k = 0; !st && o->output_dir && k < outs.n; ++k) {
    size_t len = strlen(o->output_dir) + 32;
    char* path = malloc(len);
    if (!path) {
      st = kiln_status_make(KILN_OUT_OF_MEMORY, "output path");
      break;
    }
    snprintf(path, len, "%s/output%d.bin", o->output_dir, k);
    const kiln_value_t at = kiln_cli_value_at(&g->values[g->outputs[k]], outs.t[k].rank,
                                              outs.t[k].shape);
    st = kiln_cli_write_file(path, outs.t[k].data, kiln_value_dense_bytes(&at));
    if (!st) printf("wrote %s\n", path);
    free(path);
  }
  kiln_cli_tensors_deinitialize(&ins);
  kiln_cli_tensors_deinitialize(&outs);
  return st;
}

/* Shared by bench and profile: inputs are pseudo-random (their values do
 * not change the work any kernel does). */
static kiln_status_t kiln_cli_prepare(const kiln_cli_options_t* o, kiln_cli_session_t* s,
                                      kiln_cli_tensors_t* ins, kiln_cli_tensors_t* outs) {
  const kiln_graph_t* g = kiln_model_graph(s->model);
  kiln_status_t st = kiln_cli_make_tensors(o, s, ins, outs);
  if (!st) st = kiln_cli_bind_inputs(g, o, ins, 0);
  for (int i = 0; i < o->warmup && !st; ++i)
    st = kiln_model_run(s->model, ins->t, ins->n, outs->t, outs->n);
  return st;
}

static kiln_status_t kiln_cli_bench(const kiln_cli_options_t* o, kiln_cli_session_t* s) {
  kiln_cli_tensors_t ins = {0}, outs = {0};
  double* ms = calloc((size_t)o->runs, sizeof(double));
  if (!ms) return kiln_status_make(KILN_OUT_OF_MEMORY, "timing table");
  kiln_status_t st = kiln_cli_prepare(o, s, &ins, &outs);
  for (int i = 0; i < o->runs && !st; ++i) {
    double t0 = kiln_cli_now_ms();
    st = kiln_model_run(s->model, ins.t, ins.n, outs.t, outs.n);
    ms[i] = kiln_cli_now_ms() - t0;
  }
  if (!st) {
    int n = o->runs;
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += ms[i];
    qsort(ms, (size_t)n, sizeof(double), kiln_cli_cmp_double);
    double median = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
    /* Nearest-rank p90: the smallest time at least 90 % of runs do not exceed. */
    int p90_rank = (int)ceil(0.9 * n);
    double p90 = ms[(p90_rank > 0 ? p90_rank : 1) - 1];
    printf("%s: %d runs after %d warm-up, %d thread%s, %s\n", o->file, n, o->warmup,
           kiln_pool_size(s->pool), kiln_pool_size(s->pool) == 1 ? "" : "s",
           kiln_cpu_isa_name(kiln_cpu_isa()));
    printf("  median %11.5f ms\n  min    %11.5f ms\n  p90    %11.5f ms\n  mean   %11.5f ms\n"
           "  max    %11.5f ms\n",
           median, ms[0], p90, sum / n, ms[n - 1]);
  }
  free(ms);
  kiln_cli_tensors_deinitialize(&ins);
  kiln_cli_tensors_deinitialize(&outs);
  return st;
}

/* The roofline table (kiln_profile.h): the same lines kiln.profile prints,
 * against the peaks `kiln info` measured (measured now when not cached),
 * which are cached for the default thread count: a --threads 1 run reads
 * their one-thread figures. */
static kiln_status_t kiln_cli_profile(const kiln_cli_options_t* o, kiln_cli_session_t* s) {
  kiln_cli_tensors_t ins = {0}, outs = {0};
  kiln_machine_t machine;
  kiln_pool_t* all = kiln_pool_default();
  kiln_status_t st = all ? kiln_machine_get(all, 0, &machine)
                         : kiln_status_make(KILN_OUT_OF_MEMORY, "the default thread pool");
  if (!st) st = kiln_cli_prepare(o, s, &ins, &outs);
  double wall = 0;
  if (!st) {
    kiln_model_profile_reset(s->model);
    kiln_model_set_profiling(s->model, 1);
    double t0 = kiln_cli_now_ms();
    for (int i = 0; i < o->runs && !st; ++i)
      st = kiln_model_run(s->model, ins.t, ins.n, outs.t, outs.n);
    wall = kiln_cli_now_ms() - t0;
    kiln_model_set_profiling(s->model, 0);
    /* The roof the memory-bound rows are divided by, from the same minutes. */
    kiln_pool_t* pool = kiln_model_pool(s->model);
    if (!st) st = kiln_profile_bandwidth_now(pool, kiln_pool_size(pool), &machine);
  }
  kiln_profile_report_t report;
  if (!st) st = kiln_profile_report_of_model(s->model, wall / (o->runs > 0 ? o->runs : 1), &machine,
                                             &report);
  if (!st) {
    printf("%s: ", o->file);
    kiln_profile_report_print(&report, kiln_model_last_graph(s->model), -1, stdout);
    kiln_profile_report_deinitialize(&report);
  }
  kiln_cli_tensors_deinitialize(&ins);
  kiln_cli_tensors_deinitialize(&outs);
  return st;
}

/* ---- main ------------------------------------------------------------------------ */

static int kiln_cli_find_command(const char* name, kiln_cli_command_t* out) {
  for (int c = 0; c < KILN_CLI_COMMAND_COUNT; ++c)
    if (!strcmp(name, kiln_cli_command_names[c])) {
      *out = (kiln_cli_command_t)c;
      return 1;
    }
  return 0;
}

/* `kiln info` without FILE: the machine as kiln sees it (kiln_machine.h). */
static int kiln_cli_machine(int measure, int threads) {
  kiln_pool_t* pool = NULL;
  kiln_status_t st = kiln_pool_create(threads, &pool);
  kiln_machine_t m;
  if (!st) st = kiln_machine_get(pool, measure, &m);
  kiln_pool_release(pool);
  if (st) {
    fprintf(stderr, "kiln: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return KILN_CLI_EXIT_ERROR;
  }
  printf("cpu:        %s\n", m.cpu_model);
  printf("cores:      %d online (%d physical), kiln uses %d threads\n", m.cores, m.physical_cores,
         m.threads);
  printf("caches:     L1d %ld KiB, L2 %ld KiB, L3 %ld KiB\n", m.l1d_bytes >> 10, m.l2_bytes >> 10,
         m.l3_bytes >> 10);
  printf("isa:        present:%s%s%s%s%s%s%s; in use: %s, bf16 engine: %s\n", m.avx2 ? " avx2" : "",
         m.avx512 ? " avx512" : "", m.avx512_bf16 ? " avx512_bf16" : "",
         m.avx512_vnni ? " avx512_vnni" : "", m.avx512_vbmi ? " avx512_vbmi" : "",
         m.amx_bf16 ? " amx_bf16" : "",
         m.amx_int8 ? " amx_int8" : "", m.isa, m.bf16_engine);
  printf("peaks:      (%s%s%s)\n", m.measured ? "measured now" : "cached in ",
         m.measured ? "" : m.cache_path, m.measured ? "" : "; --measure to measure again");
  printf("  fp32 FMA       %8.1f GFLOP/s 1 thread, %8.1f all\n", m.fma_gflops_1, m.fma_gflops);
  if (m.bf16_gflops > 0)
    printf("  bf16 dot       %8.1f GFLOP/s 1 thread, %8.1f all\n", m.bf16_gflops_1, m.bf16_gflops);
  if (m.int8_gops > 0)
    printf("  int8 dot       %8.1f GOP/s   1 thread, %8.1f all\n", m.int8_gops_1, m.int8_gops);
  printf("  read bandwidth %8.1f GB/s    1 thread, %8.1f all (128 MiB buffer)\n",
         m.bandwidth_gbs_1, m.bandwidth_gbs);
  if (m.busy)
    printf("note:       these figures look taken while the machine was busy (other processes\n"
           "            used %.0f %% of the cores meanwhile, or the figures contradict each other);\n"
           "            kiln measures again when it next needs them, or run `kiln info --measure`\n"
           "            on an idle machine\n",
           100.0 * m.others_load);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fputs(kiln_cli_usage_text, stderr);
    return KILN_CLI_EXIT_USAGE;
  }
  const char* cmd = argv[1];
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("kiln %s (.kiln format %d.%d, CPU ISA %s)\n", KILN_VERSION, KILN_FORMAT_MAJOR,
           KILN_FORMAT_MINOR, kiln_cpu_isa_name(kiln_cpu_isa()));
    return 0;
  }
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    fputs(kiln_cli_usage_text, stdout);
    return 0;
  }
  if (!strcmp(cmd, "generate")) return kiln_cli_generate_main(argc, argv);
  if (!strcmp(cmd, "tokenize")) return kiln_cli_tokenize_main(argc, argv);
  kiln_cli_command_t command;
  if (!kiln_cli_find_command(cmd, &command))
    return kiln_cli_usage_error("unknown command '%s'", cmd);

  kiln_cli_options_t o;
  memset(&o, 0, sizeof o);
  o.input_specs = calloc((size_t)argc, sizeof(char*));
  o.shape_specs = calloc((size_t)argc, sizeof(char*));
  if (!o.input_specs || !o.shape_specs) {
    free(o.input_specs);
    free(o.shape_specs);
    fputs("kiln: out of memory\n", stderr);
    return KILN_CLI_EXIT_ERROR;
  }
  int rc = kiln_cli_parse(argc, argv, command, &o);
  if (rc) {
    free(o.input_specs);
    free(o.shape_specs);
    return rc < 0 ? 0 : rc;
  }

  if (command == KILN_CLI_INFO && !o.file) {
    free(o.input_specs);
    free(o.shape_specs);
    return kiln_cli_machine(o.measure, o.threads ? o.threads : kiln_cli_default_threads());
  }
  /* info never runs a node: one thread (no workers to start). */
  int threads = command == KILN_CLI_INFO ? 1 : o.threads ? o.threads : kiln_cli_default_threads();
  kiln_cli_session_t session;
  kiln_status_t st = kiln_cli_session_initialize(o.file, threads, &session);
  if (!st) {
    switch (command) {
      case KILN_CLI_INFO: st = kiln_cli_info(&o, &session); break;
      case KILN_CLI_RUN: st = kiln_cli_run(&o, &session); break;
      case KILN_CLI_BENCH: st = kiln_cli_bench(&o, &session); break;
      case KILN_CLI_PROFILE: st = kiln_cli_profile(&o, &session); break;
      case KILN_CLI_COMMAND_COUNT: break;
    }
    kiln_cli_session_deinitialize(&session);
  }
  free(o.input_specs);
  free(o.shape_specs);
  fflush(stdout);
  if (st) {
    fprintf(stderr, "kiln: %s\n", kiln_status_message(st));
    kiln_status_free(st);
    return KILN_CLI_EXIT_ERROR;
  }
  return 0;
}
