/* The public C API (include/kiln.h) over the runtime: a session is a
 * kiln_model_t made from a .kiln artifact (kiln_artifact_read and the file's
 * stored plan), the pool it runs on, and the descriptions of its inputs and
 * outputs worked out once at load (names, types, shapes, each symbolic
 * dimension's symbol or expression and range), so that the queries are
 * plain reads of immutable data.
 *
 * This file is the only one that sees both kiln.h and the internal headers:
 * a public kiln_error_t is the internal status object (the codes are the
 * same numbers, checked below), and a public kiln_buffer_t is checked and
 * turned into the runtime's kiln_tensor_t. Every argument is checked here
 * before the runtime sees it (NULL pointers, counts, ranks, element types,
 * negative sizes, buffers smaller than their shape), since the runtime's
 * own checks assume well-formed tensors.
 *
 * Calls that change or use the run state (run, output_shapes,
 * set_num_threads) hold the session's lock, which also guards the
 * session's tensor scratch (no allocation per run).
 */
#include "kiln.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kiln_alloc.h"
#include "base/kiln_pool.h"
#include "base/kiln_status.h"
#include "ir/kiln_artifact.h"
#include "runtime/kiln_tokenizer.h"
#include "ir/kiln_format.h"
#include "ir/kiln_graph.h"
#include "ir/kiln_sym.h"
#include "runtime/kiln_model.h"
#include "runtime/kiln_plan_io.h"
#include "runtime/kiln_writes.h"

#ifndef KILN_BUILD_VERSION
#error "meson passes KILN_BUILD_VERSION and its parts"
#endif

/* The header's version is the project's (meson.build's version). */
_Static_assert(KILN_VERSION_MAJOR == KILN_BUILD_VERSION_MAJOR &&
                   KILN_VERSION_MINOR == KILN_BUILD_VERSION_MINOR &&
                   KILN_VERSION_PATCH == KILN_BUILD_VERSION_PATCH,
               "include/kiln.h's KILN_VERSION_* must match meson.build's project version");

/* Public and internal numbers agree, so conversions are casts. */
_Static_assert((int)KILN_ERROR_NONE == (int)KILN_OK &&
                   (int)KILN_ERROR_INVALID_ARGUMENT == (int)KILN_INVALID_ARGUMENT &&
                   (int)KILN_ERROR_UNSUPPORTED == (int)KILN_UNSUPPORTED &&
                   (int)KILN_ERROR_OUT_OF_MEMORY == (int)KILN_OUT_OF_MEMORY &&
                   (int)KILN_ERROR_CORRUPT_FILE == (int)KILN_CORRUPT_ARTIFACT &&
                   (int)KILN_ERROR_IO == (int)KILN_IO_ERROR &&
                   (int)KILN_ERROR_INTERNAL == (int)KILN_INTERNAL &&
                   (int)KILN_ERROR_CODE_COUNT == (int)KILN_STATUS_CODE_COUNT,
               "kiln_error_code_t mirrors kiln_status_code_t");
_Static_assert((int)KILN_ELEMENT_FLOAT32 == (int)KILN_F32 &&
                   (int)KILN_ELEMENT_FLOAT16 == (int)KILN_F16 &&
                   (int)KILN_ELEMENT_BFLOAT16 == (int)KILN_BF16 &&
                   (int)KILN_ELEMENT_INT64 == (int)KILN_I64 &&
                   (int)KILN_ELEMENT_INT32 == (int)KILN_I32 &&
                   (int)KILN_ELEMENT_INT8 == (int)KILN_I8 &&
                   (int)KILN_ELEMENT_UINT8 == (int)KILN_U8 &&
                   (int)KILN_ELEMENT_BOOL == (int)KILN_BOOL &&
                   (int)KILN_ELEMENT_TYPE_COUNT == (int)KILN_DTYPE_COUNT,
               "kiln_element_type_t mirrors kiln_dtype_t (the format's numbering)");
_Static_assert(KILN_MAX_DIMS == KILN_MAX_RANK, "one rank limit");

#define KILN_API_MAX_THREADS 4096
#define KILN_API_SYMBOL_CHARS 256

static kiln_error_t* kiln_api_error(kiln_status_t status) { return (kiln_error_t*)status; }

/* ---- versions and errors ------------------------------------------------ */

const char* kiln_version(int32_t* out_major, int32_t* out_minor, int32_t* out_patch) {
  if (out_major) *out_major = KILN_VERSION_MAJOR;
  if (out_minor) *out_minor = KILN_VERSION_MINOR;
  if (out_patch) *out_patch = KILN_VERSION_PATCH;
  return KILN_BUILD_VERSION;
}

void kiln_format_version(int32_t* out_major, int32_t* out_minor) {
  if (out_major) *out_major = KILN_FORMAT_MAJOR;
  if (out_minor) *out_minor = KILN_FORMAT_MINOR;
}

kiln_error_code_t kiln_error_code(const kiln_error_t* error) {
  return (kiln_error_code_t)kiln_status_code((kiln_status_t)(uintptr_t)error);
}

const char* kiln_error_message(const kiln_error_t* error) {
  return kiln_status_message((kiln_status_t)(uintptr_t)error);
}

const char* kiln_error_code_name(kiln_error_code_t code) {
  return kiln_status_code_name((kiln_status_code_t)code);
}

void kiln_error_free(kiln_error_t* error) { kiln_status_free((kiln_status_t)error); }

size_t kiln_element_type_size(kiln_element_type_t type) {
  return kiln_dtype_size((kiln_dtype_t)type);
}

const char* kiln_element_type_name(kiln_element_type_t type) {
  return kiln_dtype_name((kiln_dtype_t)type);
}

/* ---- sessions ------------------------------------------------------------- */

typedef struct kiln_api_dim_s {
  char* symbol; /* owned; NULL for a fixed size */
  int32_t is_symbol;
  int64_t min, max;
} kiln_api_dim_t;

typedef struct kiln_api_io_s {
  kiln_tensor_info_t info;
  kiln_api_dim_t dims[KILN_MAX_DIMS];
} kiln_api_io_t;

struct kiln_session_s {
  atomic_int refs;
  atomic_int num_threads;
  pthread_mutex_t lock;
  kiln_model_t* model;
  kiln_pool_t* pool; /* the model borrows it: released after the model */
  int32_t n_inputs, n_outputs;
  kiln_api_io_t* io;       /* inputs, then outputs */
  kiln_tensor_t* tensors;  /* a run's inputs then outputs (under lock) */
  kiln_writes_t writes;    /* outputs that are new values of inputs */
  const void* artifact;    /* the file's bytes (the model's, or the caller's borrowed ones) */
  size_t artifact_size;
  kiln_tokenizer_t* tokenizer; /* the file's "tokenizer" section, or NULL */
};

void kiln_load_options_initialize(kiln_load_options_t* options) {
  if (!options) return;
  memset(options, 0, sizeof(*options));
  options->num_threads = 0;
}

/* 0 means the default: $KILN_NUM_THREADS, else one per online CPU (the
 * process-wide pool's rule), capped to what a pool takes. */
static int32_t kiln_api_resolve_threads(int32_t n) {
  if (n > 0) return n;
  const char* env = getenv("KILN_NUM_THREADS");
  long v = env ? strtol(env, NULL, 10) : 0;
  if (v <= 0) v = sysconf(_SC_NPROCESSORS_ONLN);
  if (v <= 0) v = 1;
  return v > KILN_API_MAX_THREADS ? KILN_API_MAX_THREADS : (int32_t)v;
}

static kiln_status_t kiln_api_check_threads(int32_t n) {
  KILN_CHECK_ARG(n >= 0 && n <= KILN_API_MAX_THREADS,
                 "num_threads must be 0 (the default) or 1..%d, got %d", KILN_API_MAX_THREADS,
                 (int)n);
  return kiln_ok();
}

static void kiln_api_session_free(kiln_session_t* s) {
  if (!s) return;
  kiln_model_release(s->model); /* before the pool it borrows */
  if (s->pool) kiln_pool_release(s->pool);
  for (int32_t i = 0; s->io && i < s->n_inputs + s->n_outputs; ++i)
    for (int d = 0; d < KILN_MAX_DIMS; ++d) free(s->io[i].dims[d].symbol);
  free(s->io);
  free(s->tensors);
  kiln_writes_clear(&s->writes);
  kiln_tokenizer_free(s->tokenizer);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Saturating int64 arithmetic for the bounds of expressions. */
static int64_t kiln_api_sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return a > 0 ? INT64_MAX : INT64_MIN;
}
static int64_t kiln_api_sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return (a > 0) == (b > 0) ? INT64_MAX : INT64_MIN;
}
static int64_t kiln_api_floordiv(int64_t a, int64_t b) { /* b > 0 */
  int64_t q = a / b;
  return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* Bounds of every expression of t over its symbols' ranges, by interval
 * arithmetic in id order (operands have lower ids). lo/hi: n_exprs each. */
static void kiln_api_bounds(const kiln_sym_table_t* t, int64_t* lo, int64_t* hi) {
  for (int32_t i = 0; i < t->n_exprs; ++i) {
    const kiln_sym_expr_t* x = &t->exprs[i];
    int64_t al = x->a, ah = x->a, bl = x->b, bh = x->b;
    if (x->kind != KILN_SYM_VAR && kiln_dim_is_sym(x->a))
      al = lo[kiln_dim_sym_id(x->a)], ah = hi[kiln_dim_sym_id(x->a)];
    if (kiln_dim_is_sym(x->b)) bl = lo[kiln_dim_sym_id(x->b)], bh = hi[kiln_dim_sym_id(x->b)];
    int64_t l = INT64_MIN, h = INT64_MAX;
    switch ((kiln_sym_kind_t)x->kind) {
      case KILN_SYM_VAR:
        if (x->a >= 0 && x->a < t->n_vars) l = t->vars[x->a].lo, h = t->vars[x->a].hi;
        break;
      case KILN_SYM_ADD:
        l = kiln_api_sat_add(al, bl), h = kiln_api_sat_add(ah, bh);
        break;
      case KILN_SYM_MUL: {
        int64_t c[4] = {kiln_api_sat_mul(al, bl), kiln_api_sat_mul(al, bh),
                        kiln_api_sat_mul(ah, bl), kiln_api_sat_mul(ah, bh)};
        l = h = c[0];
        for (int k = 1; k < 4; ++k) l = c[k] < l ? c[k] : l, h = c[k] > h ? c[k] : h;
        break;
      }
      case KILN_SYM_FLOORDIV: { /* monotone in a; in b for a fixed sign of a */
        if (bl < 1) bl = 1;
        if (bh < bl) bh = bl;
        int64_t c[4] = {kiln_api_floordiv(al, bl), kiln_api_floordiv(al, bh),
                        kiln_api_floordiv(ah, bl), kiln_api_floordiv(ah, bh)};
        l = h = c[0];
        for (int k = 1; k < 4; ++k) l = c[k] < l ? c[k] : l, h = c[k] > h ? c[k] : h;
        break;
      }
      case KILN_SYM_MOD: /* Python's: in [0, b) for b > 0 */
        l = 0, h = bh > 1 ? bh - 1 : 0;
        if (al >= 0 && ah < bl) l = al, h = ah;
        else if (al >= 0 && ah < h) h = ah;
        break;
      case KILN_SYM_MAX:
        l = al > bl ? al : bl, h = ah > bh ? ah : bh;
        break;
      case KILN_SYM_MIN:
        l = al < bl ? al : bl, h = ah < bh ? ah : bh;
        break;
      case KILN_SYM_KIND_COUNT: break;
    }
    lo[i] = l, hi[i] = h;
  }
}

/* One input's or output's description, from the model's graph value. */
static kiln_status_t kiln_api_describe(const kiln_graph_t* g, const kiln_value_t* v,
                                       const int64_t* lo, const int64_t* hi, kiln_api_io_t* io) {
  io->info.name = v->name ? v->name : "";
  io->info.type = (kiln_element_type_t)v->dtype;
  io->info.rank = v->rank;
  for (int32_t d = 0; d < v->rank; ++d) {
    int64_t dim = v->shape[d];
    kiln_api_dim_t* di = &io->dims[d];
    if (!kiln_dim_is_sym(dim) || !g->syms) {
      io->info.shape[d] = dim;
      di->min = di->max = dim;
      continue;
    }
    const kiln_sym_table_t* t = g->syms;
    int32_t id = kiln_dim_sym_id(dim);
    io->info.shape[d] = KILN_DIM_SYMBOLIC;
    io->info.symbolic = 1;
    di->is_symbol = t->exprs[id].kind == KILN_SYM_VAR;
    di->min = lo[id] < 0 ? 0 : lo[id];
    di->max = hi[id];
    char buf[KILN_API_SYMBOL_CHARS];
    kiln_sym_describe(t, dim, buf, sizeof buf);
    if (!(di->symbol = strdup(buf)))
      return kiln_status_make(KILN_OUT_OF_MEMORY, "a symbol's name");
  }
  return kiln_ok();
}

static kiln_status_t kiln_api_describe_all(kiln_session_t* s) {
  const kiln_graph_t* g = kiln_model_graph(s->model);
  s->n_inputs = g->n_inputs;
  s->n_outputs = g->n_outputs;
  size_t n = (size_t)g->n_inputs + (size_t)g->n_outputs;
  s->io = calloc(n + 1, sizeof(*s->io));
  s->tensors = calloc(n + 1, sizeof(*s->tensors));
  if (!s->io || !s->tensors) return kiln_status_make(KILN_OUT_OF_MEMORY, "session tables");
  int64_t *lo = NULL, *hi = NULL;
  if (g->syms && g->syms->n_exprs > 0) {
    lo = malloc(sizeof(int64_t) * (size_t)g->syms->n_exprs);
    hi = malloc(sizeof(int64_t) * (size_t)g->syms->n_exprs);
    if (!lo || !hi) {
      free(lo), free(hi);
      return kiln_status_make(KILN_OUT_OF_MEMORY, "symbol bounds");
    }
    kiln_api_bounds(g->syms, lo, hi);
  }
  kiln_status_t st = kiln_ok();
  for (int32_t i = 0; !st && i < g->n_inputs; ++i)
    st = kiln_api_describe(g, &g->values[g->inputs[i]], lo, hi, &s->io[i]);
  for (int32_t o = 0; !st && o < g->n_outputs; ++o)
    st = kiln_api_describe(g, &g->values[g->outputs[o]], lo, hi, &s->io[g->n_inputs + o]);
  free(lo), free(hi);
  return st;
}

/* Makes a session from `size` bytes at `bytes`. `owned` (may be NULL) is
 * the buffer the bytes are in when the session is to own it (system
 * allocator, 64-byte aligned): taken on success and on failure. `what`
 * names the source in errors ("'model.kiln'", "the buffer"). */
static kiln_status_t kiln_api_load(const void* bytes, size_t size, void* owned, const char* what,
                                   const kiln_load_options_t* options,
                                   kiln_session_t** out_session) {
  kiln_allocator_t sys = kiln_allocator_system();
  kiln_load_options_t defaults;
  kiln_load_options_initialize(&defaults);
  if (!options) options = &defaults;
  kiln_status_t st = kiln_api_check_threads(options->num_threads);
  if (st) {
    kiln_allocator_free(sys, owned);
    return st;
  }
  kiln_graph_t* graph = NULL;
  st = kiln_artifact_read(bytes, size, sys, &graph);
  if (st) {
    kiln_allocator_free(sys, owned);
    if (kiln_status_code(st) == KILN_CORRUPT_ARTIFACT)
      return kiln_status_annotate(st, "corrupt artifact %s", what);
    return kiln_status_annotate(st, "loading %s", what);
  }
  /* A model saved with CPU fallback needs PyTorch for its eager ops: the
   * file's graph is only its first kiln piece. */
  const void* section = NULL;
  size_t section_len = 0;
  kiln_status_free(kiln_artifact_find_section(bytes, size, "py.partition", &section, &section_len));
  if (section) {
    kiln_graph_release(graph);
    kiln_allocator_free(sys, owned);
    return kiln_status_make(KILN_UNSUPPORTED,
                            "%s was saved from a model with CPU fallback: some of its ops run in "
                            "eager PyTorch, so it loads only with kiln.load in Python",
                            what);
  }
  kiln_session_t* s = calloc(1, sizeof(*s));
  int32_t threads = kiln_api_resolve_threads(options->num_threads);
  st = s ? kiln_pool_create(threads, &s->pool)
         : kiln_status_make(KILN_OUT_OF_MEMORY, "session");
  if (st) {
    kiln_graph_release(graph);
    kiln_allocator_free(sys, owned);
    free(s);
    return st;
  }
  atomic_init(&s->refs, 1);
  atomic_init(&s->num_threads, threads);
  pthread_mutex_init(&s->lock, NULL);
  /* The stored plan is borrowed for the call; the model takes the graph
   * and `owned` (which its constants may borrow), on failure too. */
  const void* plan = NULL;
  size_t plan_size = 0;
  kiln_status_free(kiln_artifact_find_section(bytes, size, KILN_PLAN_SECTION, &plan, &plan_size));
  st = kiln_model_create_with_plan(graph, owned, s->pool, plan, plan_size, &s->model);
  if (st) st = kiln_status_annotate(st, "loading %s", what);
  if (!st) st = kiln_api_describe_all(s);
  if (!st) {
    const void* writes = NULL;
    size_t writes_size = 0;
    kiln_status_free(
        kiln_artifact_find_section(bytes, size, KILN_WRITES_SECTION, &writes, &writes_size));
    st = kiln_writes_load(kiln_model_graph(s->model), writes, writes_size, &s->writes);
    if (st) st = kiln_status_annotate(st, "corrupt artifact %s", what);
  }
  if (!st) {
    const void* tok = NULL;
    size_t tok_size = 0;
    kiln_status_free(kiln_artifact_find_section(bytes, size, KILN_TOKENIZER_SECTION, &tok, &tok_size));
    if (tok) st = kiln_tokenizer_load(tok, tok_size, &s->tokenizer);
    if (st) st = kiln_status_annotate(st, "corrupt artifact %s", what);
  }
  if (st) {
    kiln_api_session_free(s);
    return st;
  }
  s->artifact = bytes, s->artifact_size = size;
  *out_session = s;
  return kiln_ok();
}

kiln_error_t* kiln_session_create_from_file(const char* path, const kiln_load_options_t* options,
                                            kiln_session_t** out_session) {
  if (!out_session)
    return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "out_session is NULL"));
  *out_session = NULL;
  if (!path) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "path is NULL"));
  void* bytes = NULL;
  size_t size = 0;
  kiln_status_t st = kiln_artifact_load_file(path, &bytes, &size);
  if (st) return kiln_api_error(st);
  size_t n = strlen(path);
  char* what = malloc(n + 3);
  if (!what) {
    free(bytes);
    return kiln_api_error(kiln_status_make(KILN_OUT_OF_MEMORY, "loading a file"));
  }
  what[0] = '\'';
  memcpy(what + 1, path, n);
  what[n + 1] = '\'';
  what[n + 2] = '\0';
  /* load_file's buffer is 64-byte aligned from the system allocator: the
   * model owns it and its constants are used in place. */
  st = kiln_api_load(bytes, size, bytes, what, options, out_session);
  free(what);
  return kiln_api_error(st);
}

kiln_error_t* kiln_session_create_from_memory(const void* data, size_t size,
                                              kiln_memory_mode_t mode,
                                              const kiln_load_options_t* options,
                                              kiln_session_t** out_session) {
  if (!out_session)
    return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "out_session is NULL"));
  *out_session = NULL;
  if (!data || !size)
    return kiln_api_error(kiln_status_make(
        KILN_INVALID_ARGUMENT, "the buffer is %s", data ? "empty (size 0)" : "NULL"));
  if (mode != KILN_MEMORY_COPY && mode != KILN_MEMORY_BORROW)
    return kiln_api_error(kiln_status_make(
        KILN_INVALID_ARGUMENT, "mode must be KILN_MEMORY_COPY or KILN_MEMORY_BORROW, got %d",
        (int)mode));
  char what[64];
  snprintf(what, sizeof what, "in memory (%zu bytes)", size);
  if (mode == KILN_MEMORY_BORROW)
    return kiln_api_error(kiln_api_load(data, size, NULL, what, options, out_session));
  void* copy = NULL;
  kiln_status_t st = kiln_allocator_malloc(kiln_allocator_system(), size, &copy);
  if (st) return kiln_api_error(kiln_status_annotate(st, "copying a model of %zu bytes", size));
  memcpy(copy, data, size);
  return kiln_api_error(kiln_api_load(copy, size, copy, what, options, out_session));
}

kiln_session_t* kiln_session_retain(kiln_session_t* session) {
  if (session) atomic_fetch_add_explicit(&session->refs, 1, memory_order_relaxed);
  return session;
}

void kiln_session_release(kiln_session_t* session) {
  if (!session) return;
  if (atomic_fetch_sub_explicit(&session->refs, 1, memory_order_acq_rel) == 1)
    kiln_api_session_free(session);
}

/* ---- inputs and outputs ---------------------------------------------------- */

int32_t kiln_session_input_count(const kiln_session_t* session) {
  return session ? session->n_inputs : 0;
}

int32_t kiln_session_output_count(const kiln_session_t* session) {
  return session ? session->n_outputs : 0;
}

/* The io entry of input (side 0) or output (side 1) `index`. */
static kiln_status_t kiln_api_io(const kiln_session_t* s, int side, int32_t index,
                                 const kiln_api_io_t** out) {
  KILN_CHECK_ARG(s, "session is NULL");
  int32_t n = side ? s->n_outputs : s->n_inputs;
  KILN_CHECK_ARG(index >= 0 && index < n, "%s index %d is out of range: the model has %d %s%s",
                 side ? "output" : "input", (int)index, (int)n, side ? "output" : "input",
                 n == 1 ? "" : "s");
  *out = &s->io[side ? s->n_inputs + index : index];
  return kiln_ok();
}

static kiln_error_t* kiln_api_info(const kiln_session_t* s, int side, int32_t index,
                                   kiln_tensor_info_t* out_info) {
  if (!out_info) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "out_info is NULL"));
  const kiln_api_io_t* io = NULL;
  kiln_status_t st = kiln_api_io(s, side, index, &io);
  if (!st) *out_info = io->info;
  return kiln_api_error(st);
}

kiln_error_t* kiln_session_output_updates(const kiln_session_t* session, int32_t index,
                                         int32_t* out_input, int32_t* out_in_place) {
  if (!out_input || !out_in_place)
    return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "%s is NULL",
                                           out_input ? "out_in_place" : "out_input"));
  const kiln_api_io_t* io = NULL;
  kiln_status_t st = kiln_api_io(session, 1, index, &io);
  if (st) return kiln_api_error(st);
  *out_input = session->writes.input[index];
  *out_in_place = session->writes.in_place[index];
  return NULL;
}

kiln_error_t* kiln_session_section(const kiln_session_t* session, const char* name,
                                   const void** out_data, size_t* out_size) {
  if (!session || !name || !out_data || !out_size)
    return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "%s is NULL",
                                           !session ? "session" : !name ? "name" : !out_data ? "out_data" : "out_size"));
  *out_data = NULL;
  *out_size = 0;
  /* The table was checked when the session was made; this finds the name. */
  return kiln_api_error(kiln_artifact_find_section(session->artifact, session->artifact_size, name,
                                                   out_data, out_size));
}

static kiln_status_t kiln_api_tokenizer(const kiln_session_t* session) {
  if (!session) return kiln_status_make(KILN_INVALID_ARGUMENT, "session is NULL");
  if (!session->tokenizer)
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "the model has no tokenizer (save it with kiln.save(module, path, tokenizer=...))");
  return kiln_ok();
}

int32_t kiln_session_has_tokenizer(const kiln_session_t* session) {
  return session && session->tokenizer ? 1 : 0;
}

kiln_error_t* kiln_session_tokenize(const kiln_session_t* session, const char* text, size_t size,
                                    int32_t add_special, int64_t* out_ids, size_t capacity,
                                    size_t* out_count) {
  kiln_status_t st = kiln_api_tokenizer(session);
  if (!st && !out_count) st = kiln_status_make(KILN_INVALID_ARGUMENT, "out_count is NULL");
  if (!st && !text && size) st = kiln_status_make(KILN_INVALID_ARGUMENT, "text is NULL");
  if (!st && !out_ids && capacity) st = kiln_status_make(KILN_INVALID_ARGUMENT, "out_ids is NULL");
  if (st) return kiln_api_error(st);
  int32_t* ids = NULL;
  size_t n = 0;
  st = kiln_tokenizer_encode(session->tokenizer, text ? text : "", size, add_special != 0, &ids, &n);
  for (size_t i = 0; !st && i < n && i < capacity; ++i) out_ids[i] = ids[i];
  free(ids);
  if (!st) *out_count = n;
  return kiln_api_error(st);
}

const char* kiln_session_token_bytes(const kiln_session_t* session, int64_t id, size_t* out_size) {
  size_t n = 0;
  const char* bytes = "";
  if (session && session->tokenizer && id >= 0 && id < kiln_tokenizer_size(session->tokenizer))
    bytes = kiln_tokenizer_piece(session->tokenizer, (int32_t)id, &n);
  if (out_size) *out_size = n;
  return bytes;
}

kiln_error_t* kiln_session_eos_ids(const kiln_session_t* session, const int32_t** out_ids,
                                   int32_t* out_count) {
  kiln_status_t st = kiln_api_tokenizer(session);
  if (!st && (!out_ids || !out_count))
    st = kiln_status_make(KILN_INVALID_ARGUMENT, "%s is NULL", out_ids ? "out_count" : "out_ids");
  if (!st) *out_ids = kiln_tokenizer_eos(session->tokenizer, out_count);
  return kiln_api_error(st);
}

kiln_error_t* kiln_session_input_info(const kiln_session_t* session, int32_t index,
                                      kiln_tensor_info_t* out_info) {
  return kiln_api_info(session, 0, index, out_info);
}

kiln_error_t* kiln_session_output_info(const kiln_session_t* session, int32_t index,
                                       kiln_tensor_info_t* out_info) {
  return kiln_api_info(session, 1, index, out_info);
}

static kiln_error_t* kiln_api_index(const kiln_session_t* s, int side, const char* name,
                                    int32_t* out_index) {
  const char* what = side ? "output" : "input";
  if (!s) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "session is NULL"));
  if (!name || !out_index)
    return kiln_api_error(
        kiln_status_make(KILN_INVALID_ARGUMENT, "%s is NULL", name ? "out_index" : "name"));
  int32_t n = side ? s->n_outputs : s->n_inputs;
  const kiln_api_io_t* io = s->io + (side ? s->n_inputs : 0);
  for (int32_t i = 0; i < n; ++i)
    if (io[i].info.name[0] && !strcmp(io[i].info.name, name)) {
      *out_index = i;
      return NULL;
    }
  /* Say which names there are. */
  char names[256];
  size_t used = 0;
  names[0] = '\0';
  for (int32_t i = 0; i < n && used + 8 < sizeof names; ++i) {
    if (!io[i].info.name[0]) continue;
    int w = snprintf(names + used, sizeof names - used, "%s'%s'", used ? ", " : "",
                     io[i].info.name);
    if (w < 0 || (size_t)w >= sizeof names - used) {
      snprintf(names + used, sizeof names - used, "%s...", used ? ", " : "");
      break;
    }
    used += (size_t)w;
  }
  return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "no %s named '%s' (the %ss: %s)",
                                         what, name, what, used ? names : "none named"));
}

kiln_error_t* kiln_session_input_index(const kiln_session_t* session, const char* name,
                                       int32_t* out_index) {
  return kiln_api_index(session, 0, name, out_index);
}

kiln_error_t* kiln_session_output_index(const kiln_session_t* session, const char* name,
                                        int32_t* out_index) {
  return kiln_api_index(session, 1, name, out_index);
}

static kiln_error_t* kiln_api_dim(const kiln_session_t* s, int side, int32_t index, int32_t dim,
                                  kiln_dim_info_t* out_info) {
  if (!out_info) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "out_info is NULL"));
  const kiln_api_io_t* io = NULL;
  kiln_status_t st = kiln_api_io(s, side, index, &io);
  if (st) return kiln_api_error(st);
  if (dim < 0 || dim >= io->info.rank)
    return kiln_api_error(kiln_status_make(
        KILN_INVALID_ARGUMENT, "%s %d has rank %d: no dimension %d", side ? "output" : "input",
        (int)index, (int)io->info.rank, (int)dim));
  const kiln_api_dim_t* d = &io->dims[dim];
  out_info->size = io->info.shape[dim];
  out_info->symbol = d->symbol;
  out_info->is_symbol = d->is_symbol;
  out_info->min = d->min;
  out_info->max = d->max;
  return NULL;
}

kiln_error_t* kiln_session_input_dim(const kiln_session_t* session, int32_t index, int32_t dim,
                                     kiln_dim_info_t* out_info) {
  return kiln_api_dim(session, 0, index, dim, out_info);
}

kiln_error_t* kiln_session_output_dim(const kiln_session_t* session, int32_t index, int32_t dim,
                                      kiln_dim_info_t* out_info) {
  return kiln_api_dim(session, 1, index, dim, out_info);
}

/* ---- threads ------------------------------------------------------------------ */

kiln_error_t* kiln_session_set_num_threads(kiln_session_t* session, int32_t n) {
  if (!session) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "session is NULL"));
  kiln_status_t st = kiln_api_check_threads(n);
  if (st) return kiln_api_error(st);
  int32_t threads = kiln_api_resolve_threads(n);
  pthread_mutex_lock(&session->lock);
  if (threads != atomic_load(&session->num_threads)) {
    kiln_pool_t* pool = NULL;
    st = kiln_pool_create(threads, &pool);
    if (!st) {
      kiln_model_set_pool(session->model, pool); /* waits for a run in progress */
      kiln_pool_release(session->pool);
      session->pool = pool;
      atomic_store(&session->num_threads, threads);
    }
  }
  pthread_mutex_unlock(&session->lock);
  return kiln_api_error(st);
}

int32_t kiln_session_num_threads(const kiln_session_t* session) {
  return session ? atomic_load(&((kiln_session_t*)session)->num_threads) : 0;
}

/* ---- running -------------------------------------------------------------------- */

/* "(5, 16) float32" of a caller's shape, into buf. */
static const char* kiln_api_shape_text(int32_t rank, const int64_t* shape, kiln_dtype_t dtype,
                                       char* buf, size_t size) {
  size_t used = 0;
  int w = snprintf(buf, size, "(");
  used = w > 0 ? (size_t)w : 0;
  for (int32_t d = 0; d < rank && used < size; ++d) {
    w = snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (w > 0) used += (size_t)w;
  }
  if (used < size)
    snprintf(buf + used, size - used, ") %s", kiln_dtype_name(dtype));
  return buf;
}

/* " ('x')" or "" for an io's name in messages. */
static void kiln_api_io_label(const kiln_api_io_t* io, char* buf, size_t size) {
  if (io->info.name[0]) snprintf(buf, size, " ('%s')", io->info.name);
  else buf[0] = '\0';
}

/* Checks one caller buffer and turns it into the runtime's tensor. With
 * need_data 0 (output_shapes), data and size are not looked at. */
static kiln_status_t kiln_api_buffer(const kiln_session_t* s, int side, int32_t index,
                                     const kiln_buffer_t* b, int need_data, kiln_tensor_t* out) {
  const char* what = side ? "output" : "input";
  char label[96];
  kiln_api_io_label(&s->io[side ? s->n_inputs + index : index], label, sizeof label);
  KILN_CHECK_ARG((unsigned)b->type < KILN_ELEMENT_TYPE_COUNT,
                 "%s %d%s: element type %d is not a kiln_element_type_t", what, (int)index, label,
                 (int)b->type);
  KILN_CHECK_ARG(b->rank >= 0 && b->rank <= KILN_MAX_DIMS,
                 "%s %d%s: rank %d is outside 0..%d", what, (int)index, label, (int)b->rank,
                 KILN_MAX_DIMS);
  KILN_CHECK_ARG(b->shape || b->rank == 0, "%s %d%s: shape is NULL with rank %d", what,
                 (int)index, label, (int)b->rank);
  size_t bytes = kiln_dtype_size((kiln_dtype_t)b->type);
  int overflow = 0;
  for (int32_t d = 0; d < b->rank; ++d) {
    KILN_CHECK_ARG(b->shape[d] >= 0, "%s %d%s: dimension %d is %lld (negative)", what,
                   (int)index, label, (int)d, (long long)b->shape[d]);
    if ((uint64_t)(size_t)b->shape[d] != (uint64_t)b->shape[d] ||
        !kiln_size_mul(bytes, (size_t)b->shape[d], &bytes))
      overflow = 1;
  }
  char text[160];
  if (need_data) {
    KILN_CHECK_ARG(!overflow, "%s %d%s: %s does not fit in memory", what, (int)index, label,
                   kiln_api_shape_text(b->rank, b->shape, (kiln_dtype_t)b->type, text,
                                       sizeof text));
    KILN_CHECK_ARG(b->data || bytes == 0, "%s %d%s: data is NULL", what, (int)index, label);
    KILN_CHECK_ARG(b->size >= bytes, "%s %d%s: the buffer has %zu bytes, but %s needs %zu", what,
                   (int)index, label, b->size,
                   kiln_api_shape_text(b->rank, b->shape, (kiln_dtype_t)b->type, text,
                                       sizeof text),
                   bytes);
  }
  out->data = b->data;
  out->dtype = (kiln_dtype_t)b->type;
  out->rank = b->rank;
  out->shape = b->shape;
  return kiln_ok();
}

/* The bytes tensor t spans (its shape was checked to fit in memory). */
static size_t kiln_api_tensor_bytes(const kiln_tensor_t* t) {
  size_t n = kiln_dtype_size(t->dtype);
  for (int32_t d = 0; d < t->rank; ++d) n *= (size_t)t->shape[d];
  return n;
}

/* An output may share memory with an input only as the very buffer of the
 * input it updates in place; any other overlap with an input would let the
 * run change what it reads, so it is refused. */
static kiln_status_t kiln_api_check_aliases(const kiln_session_t* s) {
  for (int32_t o = 0; o < s->n_outputs; ++o) {
    const kiln_tensor_t* y = &s->tensors[s->n_inputs + o];
    size_t yn = kiln_api_tensor_bytes(y);
    if (!yn) continue;
    for (int32_t i = 0; i < s->n_inputs; ++i) {
      const kiln_tensor_t* x = &s->tensors[i];
      size_t xn = kiln_api_tensor_bytes(x);
      uintptr_t xp = (uintptr_t)x->data, yp = (uintptr_t)y->data;
      if (!xn || xp + xn <= yp || yp + yn <= xp) continue;
      if (s->writes.input[o] == i && s->writes.in_place[o] && xp == yp && xn == yn) continue;
      char ol[96], il[96];
      kiln_api_io_label(&s->io[s->n_inputs + o], ol, sizeof ol);
      kiln_api_io_label(&s->io[i], il, sizeof il);
      return kiln_status_make(KILN_INVALID_ARGUMENT,
                              "output %d%s shares memory with input %d%s: only the output that "
                              "updates an input in place may be given that input's buffer",
                              (int)o, ol, (int)i, il);
    }
  }
  return kiln_ok();
}

/* Checks the counts and every buffer into s->tensors (called with the lock
 * held). n_outputs < 0: no outputs (output_shapes). */
static kiln_status_t kiln_api_buffers(kiln_session_t* s, const kiln_buffer_t* inputs,
                                      int32_t n_inputs, const kiln_buffer_t* outputs,
                                      int32_t n_outputs, int need_data) {
  KILN_CHECK_ARG(n_inputs == s->n_inputs, "the model takes %d input%s, got %d", (int)s->n_inputs,
                 s->n_inputs == 1 ? "" : "s", (int)n_inputs);
  KILN_CHECK_ARG(inputs || n_inputs == 0, "inputs is NULL");
  for (int32_t i = 0; i < n_inputs; ++i)
    KILN_RETURN_IF_ERROR(kiln_api_buffer(s, 0, i, &inputs[i], need_data, &s->tensors[i]));
  if (n_outputs < 0) return kiln_ok();
  KILN_CHECK_ARG(n_outputs == s->n_outputs, "the model has %d output%s, got %d buffers",
                 (int)s->n_outputs, s->n_outputs == 1 ? "" : "s", (int)n_outputs);
  KILN_CHECK_ARG(outputs || n_outputs == 0, "outputs is NULL");
  for (int32_t o = 0; o < n_outputs; ++o)
    KILN_RETURN_IF_ERROR(
        kiln_api_buffer(s, 1, o, &outputs[o], need_data, &s->tensors[s->n_inputs + o]));
  return kiln_api_check_aliases(s);
}

/* A concrete model's inputs must have its inputs' types and shapes (a
 * symbolic model's binding checks them). */
static kiln_status_t kiln_api_check_concrete(const kiln_session_t* s) {
  for (int32_t i = 0; i < s->n_inputs; ++i) {
    const kiln_tensor_info_t* want = &s->io[i].info;
    const kiln_tensor_t* got = &s->tensors[i];
    int same = (int)got->dtype == (int)want->type && got->rank == want->rank;
    for (int32_t d = 0; same && d < want->rank; ++d) same = got->shape[d] == want->shape[d];
    if (same) continue;
    char label[96], wbuf[160], gbuf[160];
    kiln_api_io_label(&s->io[i], label, sizeof label);
    return kiln_status_make(
        KILN_INVALID_ARGUMENT, "input %d%s: expected %s, got %s", (int)i, label,
        kiln_api_shape_text(want->rank, want->shape, (kiln_dtype_t)want->type, wbuf, sizeof wbuf),
        kiln_api_shape_text(got->rank, got->shape, got->dtype, gbuf, sizeof gbuf));
  }
  return kiln_ok();
}

kiln_error_t* kiln_session_output_shapes(kiln_session_t* session, const kiln_buffer_t* inputs,
                                         int32_t n_inputs, int32_t n_outputs,
                                         int64_t* out_shapes, int32_t* out_ranks) {
  if (!session) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "session is NULL"));
  if (n_outputs != session->n_outputs)
    return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT,
                                           "the model has %d output%s, got n_outputs %d",
                                           (int)session->n_outputs,
                                           session->n_outputs == 1 ? "" : "s", (int)n_outputs));
  if ((!out_shapes || !out_ranks) && n_outputs > 0)
    return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "%s is NULL",
                                           out_shapes ? "out_ranks" : "out_shapes"));
  pthread_mutex_lock(&session->lock);
  kiln_status_t st = kiln_api_buffers(session, inputs, n_inputs, NULL, -1, 0);
  if (!st && !kiln_model_is_symbolic(session->model)) st = kiln_api_check_concrete(session);
  if (!st) {
    memset(out_shapes, 0, sizeof(int64_t) * KILN_MAX_DIMS * (size_t)n_outputs);
    st = kiln_model_output_shapes(session->model, session->tensors, n_inputs, out_shapes,
                                  out_ranks);
  }
  pthread_mutex_unlock(&session->lock);
  return kiln_api_error(st);
}

kiln_error_t* kiln_session_run(kiln_session_t* session, const kiln_buffer_t* inputs,
                               int32_t n_inputs, const kiln_buffer_t* outputs,
                               int32_t n_outputs) {
  if (!session) return kiln_api_error(kiln_status_make(KILN_INVALID_ARGUMENT, "session is NULL"));
  pthread_mutex_lock(&session->lock);
  kiln_status_t st = kiln_api_buffers(session, inputs, n_inputs, outputs, n_outputs, 1);
  if (!st)
    st = kiln_model_run(session->model, session->tensors, n_inputs,
                        session->tensors + session->n_inputs, n_outputs);
  pthread_mutex_unlock(&session->lock);
  return kiln_api_error(st);
}
