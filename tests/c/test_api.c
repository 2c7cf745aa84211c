/* Tests of the public C API (include/kiln.h, src/api/kiln_api.c): models
 * built here with the graph API and written with kiln_artifact_write, then
 * loaded through the public API only (from memory, copied and borrowed,
 * and from a file) and run; the descriptions of inputs and outputs,
 * symbolic dimensions with their symbols and ranges; and the error paths:
 * NULL arguments, wrong counts, types, ranks, shapes and sizes (each error
 * naming the input or output and saying what was expected), bad options,
 * missing and corrupt files, every truncation and random damage of a
 * buffer in memory (an error, never a crash). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/kiln_artifact.h"
#include "kiln.h"
#include "kiln_test.h"

/* Expects err to be an error of `code` whose message contains `needle`
 * (NULL: any message); frees it. */
#define EXPECT_API_ERROR(expr, code, needle)                                              \
  do {                                                                                    \
    kiln_error_t* e__ = (expr);                                                           \
    const char* n__ = (needle);                                                           \
    KILN_EXPECT(kiln_error_code(e__) == (code) &&                                         \
                    (!n__ || strstr(kiln_error_message(e__), n__) != NULL),               \
                "%s: got %s: %s (wanted %s%s%s)", #expr,                                  \
                kiln_error_code_name(kiln_error_code(e__)), kiln_error_message(e__),      \
                kiln_error_code_name(code), n__ ? " with " : "", n__ ? n__ : "");         \
    kiln_error_free(e__);                                                                 \
  } while (0)

#define EXPECT_API_OK(expr)                                                    \
  do {                                                                         \
    kiln_error_t* e__ = (expr);                                                \
    KILN_EXPECT(e__ == NULL, "%s: %s", #expr, kiln_error_message(e__));        \
    kiln_error_free(e__);                                                      \
  } while (0)

/* y = exp(x) + c, x (2, 3) float32 named "x", c a constant: one artifact. */
static void* concrete_artifact(size_t* out_size) {
  kiln_graph_t* g = NULL;
  void* bytes = NULL;
  *out_size = 0;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  const int64_t shape[2] = {2, 3};
  const float c[6] = {0, 1, 2, 3, 4, 5};
  int32_t x = -1, k = -1, e = -1, y = -1;
  kiln_status_t s = kiln_graph_add_input(g, "x", KILN_F32, 2, shape, &x);
  if (!s) s = kiln_graph_add_constant(g, "c", KILN_F32, 2, shape, KILN_LAYOUT_DENSE, c, sizeof c, &k);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_EXP, &x, 1, NULL, 0, NULL, 0, "exp", &e);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_ADD, (int32_t[]){e, k}, 2, NULL, 0, NULL, 0, "add", &y);
  if (!s) s = kiln_graph_set_outputs(g, &y, 1);
  if (!s) s = kiln_artifact_write(g, NULL, 0, &bytes, out_size);
  KILN_EXPECT_OK(s);
  kiln_graph_release(g);
  return bytes;
}

/* x (S) with S in 1..100 -> reshape (S // 2, 2) -> exp: a symbolic model. */
static void* symbolic_artifact(size_t* out_size) {
  kiln_graph_t* g = NULL;
  void* bytes = NULL;
  *out_size = 0;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  kiln_sym_table_t* t = NULL;
  int64_t S = 0, H = 0;
  int32_t x = -1, y = -1;
  kiln_status_t s = kiln_graph_syms(g, &t);
  if (!s) s = kiln_sym_var(t, "S", 1, 100, &S);
  if (!s) s = kiln_dim_floordiv(t, S, 2, &H);
  if (!s) s = kiln_graph_add_input(g, "x", KILN_F32, 1, (int64_t[]){S}, &x);
  if (!s)
    s = kiln_graph_add_node(g, KILN_OP_RESHAPE, &x, 1, (int64_t[]){2, H, 2}, 3, NULL, 0, "split",
                            &y);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_EXP, &y, 1, NULL, 0, NULL, 0, "exp", &y);
  if (!s) s = kiln_graph_set_outputs(g, &y, 1);
  if (!s) s = kiln_artifact_write(g, NULL, 0, &bytes, out_size);
  KILN_EXPECT_OK(s);
  kiln_graph_release(g);
  return bytes;
}

static void test_api_version_and_errors(void) {
  int32_t major = -1, minor = -1, patch = -1;
  const char* v = kiln_version(&major, &minor, &patch);
  char want[64];
  snprintf(want, sizeof want, "%d.%d.%d", (int)major, (int)minor, (int)patch);
  KILN_EXPECT(v && !strcmp(v, want) && major == KILN_VERSION_MAJOR &&
                  minor == KILN_VERSION_MINOR && patch == KILN_VERSION_PATCH,
              "version %s against %s", v ? v : "(null)", want);
  KILN_EXPECT(kiln_version(NULL, NULL, NULL) == v, "NULL out pointers are fine");
  int32_t fmaj = 0, fmin = -1;
  kiln_format_version(&fmaj, &fmin);
  KILN_EXPECT(fmaj >= 2 && fmin >= 0, "format %d.%d", (int)fmaj, (int)fmin);
  kiln_format_version(NULL, NULL);
  KILN_EXPECT(kiln_error_code(NULL) == KILN_ERROR_NONE && !strcmp(kiln_error_message(NULL), "OK"),
              "NULL is success");
  kiln_error_free(NULL);
  KILN_EXPECT(!strcmp(kiln_error_code_name(KILN_ERROR_CORRUPT_FILE), "corrupt artifact") &&
                  !strcmp(kiln_error_code_name((kiln_error_code_t)99), "unknown"),
              "code names");
  KILN_EXPECT(kiln_element_type_size(KILN_ELEMENT_INT64) == 8 &&
                  kiln_element_type_size(KILN_ELEMENT_BFLOAT16) == 2 &&
                  kiln_element_type_size((kiln_element_type_t)42) == 0 &&
                  !strcmp(kiln_element_type_name(KILN_ELEMENT_FLOAT32), "float32") &&
                  !strcmp(kiln_element_type_name((kiln_element_type_t)-1), "?"),
              "element types");
  /* NULL sessions: counts are 0, calls are errors. */
  KILN_EXPECT(kiln_session_input_count(NULL) == 0 && kiln_session_output_count(NULL) == 0 &&
                  kiln_session_num_threads(NULL) == 0 && kiln_session_retain(NULL) == NULL,
              "NULL session queries");
  kiln_session_release(NULL);
  kiln_tensor_info_t info;
  kiln_dim_info_t dim;
  int32_t index;
  EXPECT_API_ERROR(kiln_session_input_info(NULL, 0, &info), KILN_ERROR_INVALID_ARGUMENT,
                   "session is NULL");
  EXPECT_API_ERROR(kiln_session_output_dim(NULL, 0, 0, &dim), KILN_ERROR_INVALID_ARGUMENT,
                   "session is NULL");
  EXPECT_API_ERROR(kiln_session_input_index(NULL, "x", &index), KILN_ERROR_INVALID_ARGUMENT,
                   "session is NULL");
  EXPECT_API_ERROR(kiln_session_run(NULL, NULL, 0, NULL, 0), KILN_ERROR_INVALID_ARGUMENT,
                   "session is NULL");
  EXPECT_API_ERROR(kiln_session_output_shapes(NULL, NULL, 0, 0, NULL, NULL),
                   KILN_ERROR_INVALID_ARGUMENT, "session is NULL");
  EXPECT_API_ERROR(kiln_session_set_num_threads(NULL, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "session is NULL");
  kiln_load_options_initialize(NULL);
}

static void test_api_load_errors(void) {
  kiln_session_t* s = (kiln_session_t*)&s; /* must be set to NULL */
  EXPECT_API_ERROR(kiln_session_create_from_file(NULL, NULL, &s), KILN_ERROR_INVALID_ARGUMENT,
                   "path is NULL");
  KILN_EXPECT(s == NULL, "out_session is NULL after a failure");
  EXPECT_API_ERROR(kiln_session_create_from_file("x.kiln", NULL, NULL),
                   KILN_ERROR_INVALID_ARGUMENT, "out_session is NULL");
  EXPECT_API_ERROR(kiln_session_create_from_file("/nonexistent/dir/m.kiln", NULL, &s),
                   KILN_ERROR_IO, "/nonexistent/dir/m.kiln");
  EXPECT_API_ERROR(kiln_session_create_from_memory(NULL, 10, KILN_MEMORY_COPY, NULL, &s),
                   KILN_ERROR_INVALID_ARGUMENT, "NULL");
  EXPECT_API_ERROR(kiln_session_create_from_memory("KILN", 0, KILN_MEMORY_COPY, NULL, &s),
                   KILN_ERROR_INVALID_ARGUMENT, "empty");
  EXPECT_API_ERROR(kiln_session_create_from_memory("KILN", 4, (kiln_memory_mode_t)7, NULL, &s),
                   KILN_ERROR_INVALID_ARGUMENT, "KILN_MEMORY_BORROW");
  EXPECT_API_ERROR(kiln_session_create_from_memory("not a kiln file at all", 22,
                                                   KILN_MEMORY_COPY, NULL, &s),
                   KILN_ERROR_CORRUPT_FILE, "corrupt artifact in memory (22 bytes)");
  EXPECT_API_ERROR(kiln_session_create_from_memory("KILN", 4, KILN_MEMORY_BORROW, NULL, &s),
                   KILN_ERROR_CORRUPT_FILE, "corrupt artifact");
  size_t size = 0;
  void* bytes = concrete_artifact(&size);
  if (!bytes) return;
  kiln_load_options_t o;
  kiln_load_options_initialize(&o);
  KILN_EXPECT(o.num_threads == 0, "default threads");
  o.num_threads = -1;
  EXPECT_API_ERROR(kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, &o, &s),
                   KILN_ERROR_INVALID_ARGUMENT, "num_threads");
  o.num_threads = 100000;
  EXPECT_API_ERROR(kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, &o, &s),
                   KILN_ERROR_INVALID_ARGUMENT, "1..4096");
  KILN_EXPECT(s == NULL, "no session");
  /* Every truncation (in heap blocks of their exact length, so a read past
   * the end shows under ASan), then random damage: errors, never crashes. */
  int loaded = 0;
  for (size_t n = 1; n < size; n += (n < 256 ? 1 : 61)) {
    void* cut = malloc(n);
    memcpy(cut, bytes, n);
    kiln_error_t* e = kiln_session_create_from_memory(cut, n, KILN_MEMORY_BORROW, NULL, &s);
    KILN_EXPECT(e && kiln_error_code(e) == KILN_ERROR_CORRUPT_FILE && !s,
                "a file cut to %zu of %zu bytes is refused as corrupt: %s", n, size,
                kiln_error_message(e));
    kiln_error_free(e);
    kiln_session_release(s);
    s = NULL;
    free(cut);
  }
  uint64_t r = 12345;
  for (int k = 0; k < 300; ++k) {
    unsigned char* bad = malloc(size);
    memcpy(bad, bytes, size);
    for (int f = 0; f < 1 + k % 4; ++f) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      bad[r % size] ^= (unsigned char)(1u + (r >> 32) % 255u);
    }
    kiln_error_t* e = kiln_session_create_from_memory(bad, size, KILN_MEMORY_COPY, NULL, &s);
    KILN_EXPECT((e != NULL) == (s == NULL), "an error xor a session");
    if (s) {
      /* Damage the reader cannot see (a constant's bytes) still runs. */
      float x[6] = {0}, y[6];
      kiln_buffer_t in = {x, sizeof x, KILN_ELEMENT_FLOAT32, 2, (int64_t[]){2, 3}};
      kiln_buffer_t out = {y, sizeof y, KILN_ELEMENT_FLOAT32, 2, (int64_t[]){2, 3}};
      kiln_error_free(kiln_session_run(s, &in, 1, &out, 1));
      loaded++;
    }
    kiln_error_free(e);
    kiln_session_release(s);
    s = NULL;
    free(bad);
  }
  KILN_EXPECT(loaded < 300, "damage is mostly caught (%d of 300 loaded)", loaded);
  /* A bad file on disk names the path. */
  char path[] = "/tmp/kiln_test_api_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) {
    KILN_EXPECT(write(fd, bytes, size / 2) == (ssize_t)(size / 2), "wrote the file");
    close(fd);
    EXPECT_API_ERROR(kiln_session_create_from_file(path, NULL, &s), KILN_ERROR_CORRUPT_FILE,
                     path);
    unlink(path);
  }
  free(bytes);
}

static void test_api_run(void) {
  size_t size = 0;
  void* bytes = concrete_artifact(&size);
  if (!bytes) return;
  kiln_session_t* borrowed = NULL;
  kiln_load_options_t o;
  kiln_load_options_initialize(&o);
  o.num_threads = 1;
  EXPECT_API_OK(kiln_session_create_from_memory(bytes, size, KILN_MEMORY_BORROW, &o, &borrowed));
  /* A copy outlives the caller's bytes. */
  void* scratch = malloc(size);
  memcpy(scratch, bytes, size);
  kiln_session_t* s = NULL;
  EXPECT_API_OK(kiln_session_create_from_memory(scratch, size, KILN_MEMORY_COPY, &o, &s));
  memset(scratch, 0xAB, size);
  free(scratch);
  if (!s || !borrowed) {
    kiln_session_release(s);
    kiln_session_release(borrowed);
    free(bytes);
    return;
  }
  KILN_EXPECT(kiln_session_input_count(s) == 1 && kiln_session_output_count(s) == 1, "counts");
  KILN_EXPECT(kiln_session_num_threads(s) == 1, "threads %d", (int)kiln_session_num_threads(s));
  kiln_tensor_info_t info;
  EXPECT_API_OK(kiln_session_input_info(s, 0, &info));
  KILN_EXPECT(!strcmp(info.name, "x") && info.type == KILN_ELEMENT_FLOAT32 && info.rank == 2 &&
                  info.shape[0] == 2 && info.shape[1] == 3 && info.shape[2] == 0 &&
                  !info.symbolic,
              "input info: '%s' rank %d", info.name, (int)info.rank);
  EXPECT_API_OK(kiln_session_output_info(s, 0, &info));
  KILN_EXPECT(info.rank == 2 && info.shape[1] == 3 && info.name != NULL, "output info");
  EXPECT_API_ERROR(kiln_session_input_info(s, 1, &info), KILN_ERROR_INVALID_ARGUMENT,
                   "input index 1 is out of range: the model has 1 input");
  EXPECT_API_ERROR(kiln_session_output_info(s, -1, &info), KILN_ERROR_INVALID_ARGUMENT,
                   "output index -1");
  EXPECT_API_ERROR(kiln_session_input_info(s, 0, NULL), KILN_ERROR_INVALID_ARGUMENT, "out_info");
  kiln_dim_info_t dim;
  EXPECT_API_OK(kiln_session_input_dim(s, 0, 1, &dim));
  KILN_EXPECT(dim.size == 3 && dim.symbol == NULL && !dim.is_symbol && dim.min == 3 &&
                  dim.max == 3,
              "fixed dim");
  EXPECT_API_ERROR(kiln_session_input_dim(s, 0, 2, &dim), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 has rank 2: no dimension 2");
  int32_t index = -1;
  EXPECT_API_OK(kiln_session_input_index(s, "x", &index));
  KILN_EXPECT(index == 0, "index of x");
  EXPECT_API_ERROR(kiln_session_input_index(s, "y", &index), KILN_ERROR_INVALID_ARGUMENT,
                   "no input named 'y' (the inputs: 'x')");
  EXPECT_API_ERROR(kiln_session_input_index(s, NULL, &index), KILN_ERROR_INVALID_ARGUMENT,
                   "name is NULL");
  EXPECT_API_ERROR(kiln_session_input_index(s, "x", NULL), KILN_ERROR_INVALID_ARGUMENT,
                   "out_index is NULL");

  float x[6], y[6], y2[6];
  kiln_test_fill_f32(x, 6, 7, -2, 2);
  int64_t shape[2] = {2, 3};
  kiln_buffer_t in = {x, sizeof x, KILN_ELEMENT_FLOAT32, 2, shape};
  kiln_buffer_t out = {y, sizeof y, KILN_ELEMENT_FLOAT32, 2, shape};
  EXPECT_API_OK(kiln_session_run(s, &in, 1, &out, 1));
  float want[6];
  for (int i = 0; i < 6; ++i) want[i] = expf(x[i]) + (float)i;
  kiln_test_compare_f32("exp(x) + c through the C API", y, want, 6, 1e-6f, 1e-6f);
  kiln_buffer_t out2 = {y2, sizeof y2, KILN_ELEMENT_FLOAT32, 2, shape};
  EXPECT_API_OK(kiln_session_run(borrowed, &in, 1, &out2, 1));
  KILN_EXPECT(!memcmp(y, y2, sizeof y), "borrowed and copied sessions agree");
  int64_t shapes[KILN_MAX_DIMS];
  int32_t rank = 0;
  EXPECT_API_OK(kiln_session_output_shapes(s, &in, 1, 1, shapes, &rank));
  KILN_EXPECT(rank == 2 && shapes[0] == 2 && shapes[1] == 3 && shapes[2] == 0, "output shape");

  /* Threads: changed, queried, refused out of range; runs still agree. */
  EXPECT_API_OK(kiln_session_set_num_threads(s, 2));
  KILN_EXPECT(kiln_session_num_threads(s) == 2, "2 threads");
  EXPECT_API_ERROR(kiln_session_set_num_threads(s, -3), KILN_ERROR_INVALID_ARGUMENT, "-3");
  EXPECT_API_ERROR(kiln_session_set_num_threads(s, 5000), KILN_ERROR_INVALID_ARGUMENT, "5000");
  memset(y, 0, sizeof y);
  EXPECT_API_OK(kiln_session_run(s, &in, 1, &out, 1));
  KILN_EXPECT(!memcmp(y, y2, sizeof y), "same result on 2 threads");
  EXPECT_API_OK(kiln_session_set_num_threads(s, 0));
  KILN_EXPECT(kiln_session_num_threads(s) >= 1, "default threads");

  /* Every kind of bad buffer is an error naming the input or output, and
   * writes nothing. */
  memset(y, 0x7f, sizeof y);
  EXPECT_API_ERROR(kiln_session_run(s, &in, 2, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "the model takes 1 input, got 2");
  EXPECT_API_ERROR(kiln_session_run(s, &in, 0, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "the model takes 1 input, got 0");
  EXPECT_API_ERROR(kiln_session_run(s, NULL, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "inputs is NULL");
  EXPECT_API_ERROR(kiln_session_run(s, &in, 1, &out, 3), KILN_ERROR_INVALID_ARGUMENT,
                   "the model has 1 output, got 3 buffers");
  EXPECT_API_ERROR(kiln_session_run(s, &in, 1, NULL, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "outputs is NULL");
  kiln_buffer_t bad = in;
  bad.type = KILN_ELEMENT_INT32;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): expected (2, 3) float32, got (2, 3) int32");
  bad = in;
  bad.type = (kiln_element_type_t)77;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): element type 77");
  int64_t other[2] = {3, 2};
  bad = in;
  bad.shape = other;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): expected (2, 3) float32, got (3, 2) float32");
  EXPECT_API_ERROR(kiln_session_output_shapes(s, &bad, 1, 1, shapes, &rank),
                   KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): expected (2, 3) float32, got (3, 2) float32");
  bad = in;
  bad.rank = 1;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): expected (2, 3) float32, got (2) float32");
  bad.rank = 9;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "rank 9 is outside 0..8");
  bad.rank = -1;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "rank -1");
  bad = in;
  bad.shape = NULL;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): shape is NULL");
  int64_t negative[2] = {2, -3};
  bad = in;
  bad.shape = negative;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "dimension 1 is -3 (negative)");
  int64_t huge[2] = {INT64_C(1) << 62, 8};
  bad = in;
  bad.shape = huge;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "does not fit in memory");
  bad = in;
  bad.data = NULL;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): data is NULL");
  bad = in;
  bad.size = 20;
  EXPECT_API_ERROR(kiln_session_run(s, &bad, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "input 0 ('x'): the buffer has 20 bytes, but (2, 3) float32 needs 24");
  bad = out;
  bad.size = 23;
  EXPECT_API_ERROR(kiln_session_run(s, &in, 1, &bad, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "output 0: the buffer has 23 bytes");
  bad = out;
  bad.shape = other;
  EXPECT_API_ERROR(kiln_session_run(s, &in, 1, &bad, 1), KILN_ERROR_INVALID_ARGUMENT,
                   "output 0");
  uint32_t pattern;
  memcpy(&pattern, y, 4);
  KILN_EXPECT(pattern == 0x7f7f7f7fu, "a refused run wrote nothing");
  EXPECT_API_ERROR(kiln_session_output_shapes(s, &in, 1, 2, shapes, &rank),
                   KILN_ERROR_INVALID_ARGUMENT, "got n_outputs 2");
  EXPECT_API_ERROR(kiln_session_output_shapes(s, &in, 1, 1, NULL, &rank),
                   KILN_ERROR_INVALID_ARGUMENT, "out_shapes is NULL");

  /* References: the session lives until its last release. */
  KILN_EXPECT(kiln_session_retain(s) == s, "retain returns the session");
  kiln_session_release(s);
  EXPECT_API_OK(kiln_session_run(s, &in, 1, &out, 1));
  kiln_session_release(s);
  kiln_session_release(borrowed);

  /* From a file. */
  char path[] = "/tmp/kiln_test_api_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) {
    KILN_EXPECT(write(fd, bytes, size) == (ssize_t)size, "wrote the file");
    close(fd);
    s = NULL;
    EXPECT_API_OK(kiln_session_create_from_file(path, NULL, &s));
    memset(y2, 0, sizeof y2);
    if (s) EXPECT_API_OK(kiln_session_run(s, &in, 1, &out2, 1));
    KILN_EXPECT(!memcmp(y, y2, sizeof y), "the file's session agrees");
    kiln_session_release(s);
    unlink(path);
  }
  free(bytes);
}

static void test_api_symbolic(void) {
  size_t size = 0;
  void* bytes = symbolic_artifact(&size);
  if (!bytes) return;
  kiln_session_t* s = NULL;
  kiln_load_options_t o;
  kiln_load_options_initialize(&o);
  o.num_threads = 1;
  EXPECT_API_OK(kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, &o, &s));
  free(bytes);
  if (!s) return;
  kiln_tensor_info_t info;
  EXPECT_API_OK(kiln_session_input_info(s, 0, &info));
  KILN_EXPECT(info.rank == 1 && info.shape[0] == KILN_DIM_SYMBOLIC && info.symbolic,
              "a symbolic input");
  kiln_dim_info_t dim;
  EXPECT_API_OK(kiln_session_input_dim(s, 0, 0, &dim));
  KILN_EXPECT(dim.size == KILN_DIM_SYMBOLIC && dim.symbol && !strcmp(dim.symbol, "S") &&
                  dim.is_symbol && dim.min == 1 && dim.max == 100,
              "input dim: %s in %lld..%lld", dim.symbol ? dim.symbol : "(null)",
              (long long)dim.min, (long long)dim.max);
  EXPECT_API_OK(kiln_session_output_info(s, 0, &info));
  KILN_EXPECT(info.rank == 2 && info.shape[0] == KILN_DIM_SYMBOLIC && info.shape[1] == 2,
              "a symbolic output");
  EXPECT_API_OK(kiln_session_output_dim(s, 0, 0, &dim));
  KILN_EXPECT(dim.symbol && strstr(dim.symbol, "S") && !dim.is_symbol && dim.min == 0 &&
                  dim.max == 50,
              "output dim: %s in %lld..%lld", dim.symbol ? dim.symbol : "(null)",
              (long long)dim.min, (long long)dim.max);
  EXPECT_API_OK(kiln_session_output_dim(s, 0, 1, &dim));
  KILN_EXPECT(dim.size == 2 && !dim.symbol, "fixed dim of a symbolic output");

  float x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, y[8];
  int64_t s8[1] = {8}, s7[1] = {7}, s200[1] = {200};
  kiln_buffer_t in = {x, sizeof x, KILN_ELEMENT_FLOAT32, 1, s8};
  int64_t shapes[KILN_MAX_DIMS];
  int32_t rank = 0;
  kiln_buffer_t shape_only = {NULL, 0, KILN_ELEMENT_FLOAT32, 1, s8};
  EXPECT_API_OK(kiln_session_output_shapes(s, &shape_only, 1, 1, shapes, &rank));
  KILN_EXPECT(rank == 2 && shapes[0] == 4 && shapes[1] == 2, "output shape at S=8");
  kiln_buffer_t out = {y, sizeof y, KILN_ELEMENT_FLOAT32, 2, shapes};
  EXPECT_API_OK(kiln_session_run(s, &in, 1, &out, 1));
  KILN_EXPECT(fabsf(y[7] - expf(7.0f)) <= 1e-6f * expf(7.0f), "ran at S=8");
  shape_only.shape = s200;
  EXPECT_API_ERROR(kiln_session_output_shapes(s, &shape_only, 1, 1, shapes, &rank),
                   KILN_ERROR_INVALID_ARGUMENT, "input 0 ('x'): dimension 0 (S) is 200, expected 1..100");
  in.shape = s7;
  in.size = 7 * sizeof(float);
  int64_t o7[2] = {3, 2};
  out.shape = o7;
  EXPECT_API_ERROR(kiln_session_run(s, &in, 1, &out, 1), KILN_ERROR_INVALID_ARGUMENT, "split");
  kiln_session_release(s);
}

/* Two threads run one session while a third changes its thread count:
 * calls are serialised, so every run gives the right result. */
typedef struct api_thread_s {
  kiln_session_t* s;
  int worker; /* 0: runs; 1: changes threads */
  int bad;
} api_thread_t;

static void* api_thread(void* arg) {
  api_thread_t* t = arg;
  float x[6], y[6];
  for (int i = 0; i < 6; ++i) x[i] = (float)i * 0.25f;
  int64_t shape[2] = {2, 3};
  kiln_buffer_t in = {x, sizeof x, KILN_ELEMENT_FLOAT32, 2, shape};
  kiln_buffer_t out = {y, sizeof y, KILN_ELEMENT_FLOAT32, 2, shape};
  for (int k = 0; k < 100; ++k) {
    kiln_error_t* e = t->worker ? kiln_session_set_num_threads(t->s, 1 + k % 2)
                                : kiln_session_run(t->s, &in, 1, &out, 1);
    if (e) t->bad++;
    kiln_error_free(e);
    for (int i = 0; !t->worker && i < 6; ++i)
      if (fabsf(y[i] - (expf(x[i]) + (float)i)) > 1e-5f * (1 + fabsf(y[i]))) t->bad++;
  }
  return NULL;
}

static void test_api_threads(void) {
  size_t size = 0;
  void* bytes = concrete_artifact(&size);
  kiln_session_t* s = NULL;
  if (bytes) EXPECT_API_OK(kiln_session_create_from_memory(bytes, size, KILN_MEMORY_BORROW, NULL, &s));
  if (!s) {
    free(bytes);
    return;
  }
  api_thread_t t[3] = {{s, 0, 0}, {s, 0, 0}, {s, 1, 0}};
  pthread_t th[3];
  for (int i = 0; i < 3; ++i) pthread_create(&th[i], NULL, api_thread, &t[i]);
  for (int i = 0; i < 3; ++i) pthread_join(th[i], NULL);
  KILN_EXPECT(t[0].bad + t[1].bad + t[2].bad == 0, "concurrent calls: %d, %d, %d bad", t[0].bad,
              t[1].bad, t[2].bad);
  kiln_session_release(s);
  free(bytes);
}

void kiln_test_suite_api(void) {
  test_api_version_and_errors();
  test_api_load_errors();
  test_api_run();
  test_api_symbolic();
  test_api_threads();
}
