/* kiln.h: the public C API of the kiln runtime, for running a compiled .kiln
 * model from C (or anything that calls C) without Python.
 *
 * A .kiln file is made in Python (kiln.save(kiln.trace(model, x), path));
 * this API loads it, says what its inputs and outputs are, and runs it on
 * buffers the caller owns. It is the only header a user includes: every
 * object is an opaque handle, and nothing of kiln's internal headers shows
 * through. docs/c-api.md has a complete example.
 *
 *   kiln_session_t* s = NULL;
 *   kiln_error_t* err = kiln_session_create_from_file("model.kiln", NULL, &s);
 *   if (err) { fprintf(stderr, "%s\n", kiln_error_message(err)); kiln_error_free(err); }
 *   ...
 *   kiln_buffer_t in = {x, sizeof x, KILN_ELEMENT_FLOAT32, 2, x_shape};
 *   kiln_buffer_t out = {y, sizeof y, KILN_ELEMENT_FLOAT32, 2, y_shape};
 *   err = kiln_session_run(s, &in, 1, &out, 1);
 *   kiln_session_release(s);
 *
 * Conventions, for every function below:
 * - Errors: a fallible function returns kiln_error_t*: NULL on success,
 *   else an error the caller owns and frees with kiln_error_free. The
 *   library never aborts or exits on anything a caller passes (NULL
 *   pointers, wrong counts, a corrupt file): it returns an error whose
 *   message says what was wrong, naming the input or output concerned.
 * - Out parameters (out_...) are written on success; handle out parameters
 *   are set to NULL first, so they are NULL after a failure.
 * - Pointers: "borrowed" means kiln reads (or writes) through it during the
 *   call only and keeps nothing; "retained" means kiln keeps it after the
 *   call returns, for as long as is said. Pointers kiln returns are
 *   borrowed from kiln for as long as is said.
 * - Options structs are initialised by their _initialize function, which
 *   sets every field to its default; set the fields you need after it.
 *   Passing NULL for an options pointer means all defaults.
 * - Threads: see kiln_session_t.
 */
#ifndef KILN_H_
#define KILN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

/* ---- versions ------------------------------------------------------------ */

/* The version of kiln this header comes with. */
#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

/* The library's version ("0.1.0", a static string); any out pointer may be
 * NULL. A program built with this header runs with a library of the same
 * major version (and, while the major version is 0, the same minor). */
KILN_API const char* kiln_version(int32_t* out_major, int32_t* out_minor, int32_t* out_patch);

/* The newest .kiln format version the library reads: files of that major
 * version and any minor version are read (a newer minor's unknown sections
 * are ignored); other major versions are refused with a message. Any out
 * pointer may be NULL. */
KILN_API void kiln_format_version(int32_t* out_major, int32_t* out_minor);

/* ---- errors -------------------------------------------------------------- */

/* An error: a code and a message. Owned by whoever received it. */
typedef struct kiln_error_s kiln_error_t;

typedef enum kiln_error_code_e {
  KILN_ERROR_NONE = 0,          /* no error (the code of a NULL kiln_error_t*) */
  KILN_ERROR_INVALID_ARGUMENT,  /* the caller passed something malformed or mismatched */
  KILN_ERROR_UNSUPPORTED,       /* a valid request kiln cannot do */
  KILN_ERROR_OUT_OF_MEMORY,
  KILN_ERROR_CORRUPT_FILE,      /* a .kiln file (or buffer) failed a check while loading */
  KILN_ERROR_IO,                /* a file could not be read */
  KILN_ERROR_INTERNAL,          /* a broken invariant inside kiln: a bug to report */
  KILN_ERROR_CODE_COUNT
} kiln_error_code_t;

/* KILN_ERROR_NONE for NULL. */
KILN_API kiln_error_code_t kiln_error_code(const kiln_error_t* error);
/* The message, borrowed: valid until kiln_error_free(error). "OK" for NULL. */
KILN_API const char* kiln_error_message(const kiln_error_t* error);
/* "invalid argument", ...: a static string ("unknown" out of range). */
KILN_API const char* kiln_error_code_name(kiln_error_code_t code);
/* Frees an error; NULL is a no-op. */
KILN_API void kiln_error_free(kiln_error_t* error);

/* ---- element types ------------------------------------------------------- */

/* The numbering is the .kiln format's: it never changes. */
typedef enum kiln_element_type_e {
  KILN_ELEMENT_FLOAT32 = 0,
  KILN_ELEMENT_FLOAT16,
  KILN_ELEMENT_BFLOAT16,
  KILN_ELEMENT_INT64,
  KILN_ELEMENT_INT32,
  KILN_ELEMENT_INT8,
  KILN_ELEMENT_UINT8,
  KILN_ELEMENT_BOOL, /* one byte, 0 or 1 */
  KILN_ELEMENT_TYPE_COUNT
} kiln_element_type_t;

/* Bytes per element; 0 for a value out of range. */
KILN_API size_t kiln_element_type_size(kiln_element_type_t type);
/* PyTorch's name ("float32", "int64", ...), static; "?" out of range. */
KILN_API const char* kiln_element_type_name(kiln_element_type_t type);

/* ---- sessions: a loaded model ------------------------------------------- */

/* The most dimensions a tensor has. */
#define KILN_MAX_DIMS 8
/* A dimension whose size is symbolic: set at each run by the inputs' sizes
 * (a model traced with dynamic_shapes). */
#define KILN_DIM_SYMBOLIC (-1)

/* A loaded model, ready to run: its graph, memory plan, constants and the
 * threads it runs on. Reference counted (_retain/_release).
 *
 * Thread safety: every function may be called from any thread. The queries
 * (counts, infos, dims, indices) read data fixed at load and may run
 * concurrently with anything. kiln_session_run, kiln_session_output_shapes
 * and kiln_session_set_num_threads on one session are serialised by the
 * session's lock: a second caller waits for the first (calls never race; to
 * run one model on two threads at once, load it twice). Different sessions
 * are independent and run in parallel, each on its own threads. */
typedef struct kiln_session_s kiln_session_t;

/* How kiln_session_create_from_memory treats the caller's bytes. */
typedef enum kiln_memory_mode_e {
  /* The bytes are copied during the call; the caller may free or reuse
   * them as soon as it returns. */
  KILN_MEMORY_COPY = 0,
  /* The bytes are retained, not copied: the caller keeps them alive and
   * unchanged until the session's last kiln_session_release. Constants
   * whose bytes sit 64-byte aligned in memory are used in place (so a
   * buffer from mmap or aligned_alloc(64, ...) costs no copy of the
   * weights); any others are copied into the session. */
  KILN_MEMORY_BORROW,
  KILN_MEMORY_MODE_COUNT
} kiln_memory_mode_t;

/* Options for loading (kiln_session_create_from_*). */
typedef struct kiln_load_options_s {
  /* Threads the session runs on, the calling thread included (1: no worker
   * threads). 0 (the default): $KILN_NUM_THREADS when set, else one per
   * online CPU. At most 4096. kiln_session_set_num_threads changes it. */
  int32_t num_threads;
} kiln_load_options_t;

/* Sets every field to its default. */
KILN_API void kiln_load_options_initialize(kiln_load_options_t* options);

/* Loads the .kiln file at `path` (borrowed). options may be NULL (the
 * defaults). The file is read whole and closed; it is checked as hostile
 * input (every size and offset against the file's length), so a bad file
 * is an error saying what is wrong and where, never a crash. Models saved
 * with CPU fallback (some ops in eager PyTorch) are KILN_ERROR_UNSUPPORTED:
 * they load only from Python. On success *out_session holds one
 * reference. */
KILN_API kiln_error_t* kiln_session_create_from_file(const char* path,
                                                     const kiln_load_options_t* options,
                                                     kiln_session_t** out_session);

/* Loads a .kiln file's `size` bytes at `data`, copied or retained as `mode`
 * says (see kiln_memory_mode_t). Otherwise as kiln_session_create_from_file. */
KILN_API kiln_error_t* kiln_session_create_from_memory(const void* data, size_t size,
                                                       kiln_memory_mode_t mode,
                                                       const kiln_load_options_t* options,
                                                       kiln_session_t** out_session);

/* Adds a reference (session may be NULL); returns session. */
KILN_API kiln_session_t* kiln_session_retain(kiln_session_t* session);
/* Drops a reference; the last one frees the session, its threads and (for
 * KILN_MEMORY_BORROW) ends its use of the caller's bytes. NULL is a no-op.
 * Must not be called while another thread is inside a call on the session
 * with that reference. */
KILN_API void kiln_session_release(kiln_session_t* session);

/* ---- inputs and outputs --------------------------------------------------- */

/* 0 for NULL. */
KILN_API int32_t kiln_session_input_count(const kiln_session_t* session);
KILN_API int32_t kiln_session_output_count(const kiln_session_t* session);

/* One input or output as the model declares it. */
typedef struct kiln_tensor_info_s {
  /* Borrowed from the session (valid until its last release); "" when the
   * file gives no name. Inputs are named after the traced forward()'s
   * arguments. */
  const char* name;
  kiln_element_type_t type;
  int32_t rank;
  /* shape[0..rank): a size, or KILN_DIM_SYMBOLIC (kiln_session_input_dim
   * gives its symbol and range). Entries past rank are 0. */
  int64_t shape[KILN_MAX_DIMS];
  /* 1 when some dimension is KILN_DIM_SYMBOLIC. */
  int32_t symbolic;
} kiln_tensor_info_t;

/* The index-th input's (output's) description into *out_info.
 * KILN_ERROR_INVALID_ARGUMENT for an index out of range (the message gives
 * the count). */
KILN_API kiln_error_t* kiln_session_input_info(const kiln_session_t* session, int32_t index,
                                               kiln_tensor_info_t* out_info);
KILN_API kiln_error_t* kiln_session_output_info(const kiln_session_t* session, int32_t index,
                                                kiln_tensor_info_t* out_info);

/* The index of the input (output) named `name` (borrowed). An unknown name
 * is KILN_ERROR_INVALID_ARGUMENT, the message listing the names there are. */
KILN_API kiln_error_t* kiln_session_input_index(const kiln_session_t* session, const char* name,
                                                int32_t* out_index);
KILN_API kiln_error_t* kiln_session_output_index(const kiln_session_t* session, const char* name,
                                                 int32_t* out_index);

/* One dimension of an input or output. */
typedef struct kiln_dim_info_s {
  /* The size, or KILN_DIM_SYMBOLIC. */
  int64_t size;
  /* NULL for a fixed size. For a symbolic one, borrowed from the session
   * (valid until its last release): the symbol's name ("seq", or "s0" when
   * the trace named none) or, for a size derived from symbols, its
   * expression ("2*seq", "L + T"). */
  const char* symbol;
  /* 1 when symbol names one symbol (a size the inputs set freely within
   * its range), 0 for a fixed size or an expression. */
  int32_t is_symbol;
  /* The values the dimension can take: size..size when fixed; the symbol's
   * range (inclusive, as traced: torch.export.Dim("seq", min=, max=)); for
   * an expression, bounds over its symbols' ranges (not every value
   * between need occur). */
  int64_t min, max;
} kiln_dim_info_t;

/* Dimension `dim` (0..rank-1) of input (output) `index` into *out_info. */
KILN_API kiln_error_t* kiln_session_input_dim(const kiln_session_t* session, int32_t index,
                                              int32_t dim, kiln_dim_info_t* out_info);
KILN_API kiln_error_t* kiln_session_output_dim(const kiln_session_t* session, int32_t index,
                                               int32_t dim, kiln_dim_info_t* out_info);

/* ---- threads -------------------------------------------------------------- */

/* Runs later calls on n threads (the caller counts as one; 0: the default
 * of kiln_load_options_t.num_threads; 1..4096). Waits for a run in
 * progress. The result does not depend on the thread count beyond
 * floating-point summation order. */
KILN_API kiln_error_t* kiln_session_set_num_threads(kiln_session_t* session, int32_t n);
/* The threads runs use; 0 for NULL. */
KILN_API int32_t kiln_session_num_threads(const kiln_session_t* session);

/* Whether output `index` is the new value of one of the model's inputs: a
 * model traced with in-place updates of its inputs (a generation step whose
 * KV cache is passed in) returns each input's new value as an output.
 * *out_input is that input's index (the output has its type and shape), or
 * -1 for an ordinary output. *out_in_place is 1 when the output may be given
 * the input's own buffer (the same data and size): the run then writes the
 * new value there, nothing else read from it changing (the model reads the
 * old value only before it writes); else pass other memory and copy it in. */
KILN_API kiln_error_t* kiln_session_output_updates(const kiln_session_t* session, int32_t index,
                                                   int32_t* out_input, int32_t* out_in_place);

/* A section of the .kiln file the session was made from, by name: the
 * front end's own data beside the graph, such as the tokenizer that
 * kiln.save(..., tokenizer=) stores as "tokenizer" (docs/format.md lists
 * them). *out_data points into the session's copy of the file (for
 * KILN_MEMORY_BORROW, the caller's buffer), valid as long as the session; it
 * is NULL, with *out_size 0, when the file has no such section. */
KILN_API kiln_error_t* kiln_session_section(const kiln_session_t* session, const char* name,
                                           const void** out_data, size_t* out_size);

/* ---- text ------------------------------------------------------------------ */

/* A model saved with kiln.save(module, path, tokenizer=tok) carries the
 * Hugging Face tokenizer it was trained with (BPE: byte-level as GPT-2,
 * Llama 3 and Qwen2, or SentencePiece-style as Llama 2 and Mistral); the
 * session reads it when it is made (a damaged one is a corrupt artifact)
 * and encodes text as the tokenizers library does. 1 when it has one. */
KILN_API int32_t kiln_session_has_tokenizer(const kiln_session_t* session);

/* The token ids of `size` bytes of UTF-8 text, with the tokenizer's own
 * prefix (BOS) and suffix ids when add_special is nonzero, as
 * tokenizer(text) gives them in Python. Up to `capacity` ids go to out_ids
 * (which may be NULL when capacity is 0); *out_count is how many there are
 * (call again with a larger buffer when it is more than capacity). A
 * session without a tokenizer is KILN_INVALID_ARGUMENT. */
KILN_API kiln_error_t* kiln_session_tokenize(const kiln_session_t* session, const char* text,
                                            size_t size, int32_t add_special, int64_t* out_ids,
                                            size_t capacity, size_t* out_count);

/* The bytes token `id` adds to a text after others (*out_size of them;
 * borrowed from the session): none for a special token (BOS, EOS) or an id
 * outside the tokenizer's vocabulary. Print them as they come: a token may
 * end inside a UTF-8 character that the next ones finish. */
KILN_API const char* kiln_session_token_bytes(const kiln_session_t* session, int64_t id,
                                             size_t* out_size);

/* The ids that end a generation (the tokenizer's eos_token_id, or the list
 * kiln.save(..., eos=[...]) gave): borrowed, *out_count of them. */
KILN_API kiln_error_t* kiln_session_eos_ids(const kiln_session_t* session, const int32_t** out_ids,
                                           int32_t* out_count);

/* ---- running --------------------------------------------------------------- */

/* A caller-owned tensor: dense, row-major (C order), native-endian bytes.
 * Everything it points to is borrowed for the call only. */
typedef struct kiln_buffer_s {
  /* The elements: read for an input, written for an output. May be NULL
   * only when the tensor has no elements. An input is only read, unless
   * it is also given as the output that updates it in place
   * (kiln_session_output_updates). */
  void* data;
  /* Bytes available at data: at least the tensor's size (elements x
   * kiln_element_type_size), else KILN_ERROR_INVALID_ARGUMENT. */
  size_t size;
  kiln_element_type_t type;
  int32_t rank;
  /* shape[0..rank), each >= 0; may be NULL when rank is 0. */
  const int64_t* shape;
} kiln_buffer_t;

/* The outputs' shapes for inputs of the shapes `inputs` gives (only their
 * type, rank and shape are read; data may be NULL): how a caller sizes the
 * output buffers of a model with symbolic sizes (for a concrete model they
 * are the output infos' shapes). n_inputs must be the input count and
 * n_outputs the output count; out_shapes has n_outputs x KILN_MAX_DIMS
 * entries (output k's shape at out_shapes[k * KILN_MAX_DIMS]) and
 * out_ranks n_outputs. Inputs whose sizes leave a symbol's range or
 * disagree about it are errors naming the input, the dimension and the
 * symbol, as kiln_session_run's are. */
KILN_API kiln_error_t* kiln_session_output_shapes(kiln_session_t* session,
                                                  const kiln_buffer_t* inputs, int32_t n_inputs,
                                                  int32_t n_outputs, int64_t* out_shapes,
                                                  int32_t* out_ranks);

/* Runs the model once: reads inputs[0..n_inputs), in the model's input
 * order, and writes outputs[0..n_outputs), in its output order (all
 * borrowed for the call). Every buffer is checked first (count, type, rank,
 * shape, size, NULL data; the message names the input or output and says
 * what was expected and what came), and nothing is written when one fails.
 * Output buffers must not overlap each other or the inputs, except an
 * output given the very buffer of the input it updates in place
 * (kiln_session_output_updates); an output overlapping an input otherwise
 * is an error. A model with
 * symbolic sizes runs at the sizes its inputs have (its first run at a new
 * binding of the symbols plans memory for it; a few bindings are kept). */
KILN_API kiln_error_t* kiln_session_run(kiln_session_t* session, const kiln_buffer_t* inputs,
                                        int32_t n_inputs, const kiln_buffer_t* outputs,
                                        int32_t n_outputs);

#ifdef __cplusplus
}
#endif

#endif /* KILN_H_ */
