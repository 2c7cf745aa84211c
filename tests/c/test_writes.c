/* The "writes" section (runtime/kiln_writes.c): which outputs are new
 * values of inputs. A well-formed section reads back; every truncation,
 * each targeted corruption and random byte damage is refused with a message
 * or, when accepted, passed every check (never a crash). Through the public
 * C API: kiln_session_output_updates reports the updates, an output given
 * its input's own buffer is written in place where the section allows it,
 * and any other output sharing an input's memory is refused. */
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_artifact.h"
#include "ir/kiln_graph.h"
#include "kiln.h"
#include "kiln_test.h"
#include "runtime/kiln_writes.h"

/* Inputs c (4) float32 (a "cache") and v (2) float32; outputs c + k (k a
 * constant: the new cache) and exp(v). */
static kiln_graph_t* writes_graph(void) {
  kiln_graph_t* g = NULL;
  if (kiln_graph_create(kiln_allocator_system(), &g)) return NULL;
  const float k[4] = {1, 2, 3, 4};
  int32_t c, v, kc, y0, y1;
  kiln_status_t s = kiln_graph_add_input(g, "c", KILN_F32, 1, (int64_t[]){4}, &c);
  if (!s) s = kiln_graph_add_input(g, "v", KILN_F32, 1, (int64_t[]){2}, &v);
  if (!s) s = kiln_graph_add_constant(g, "k", KILN_F32, 1, (int64_t[]){4}, KILN_LAYOUT_DENSE, k, sizeof k, &kc);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_ADD, (int32_t[]){c, kc}, 2, NULL, 0, NULL, 0, "add", &y0);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_EXP, &v, 1, NULL, 0, NULL, 0, "exp", &y1);
  if (!s) s = kiln_graph_set_outputs(g, (int32_t[]){y0, y1}, 2);
  if (s) {
    kiln_status_free(s);
    kiln_graph_release(g);
    return NULL;
  }
  return g;
}

static void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = (unsigned char)(v >> (8 * i));
}

/* A section of n records (output, input, flags). */
static size_t writes_section(unsigned char* b, int n, const uint32_t (*rec)[3]) {
  memcpy(b, "KILNWRIT", 8);
  put_u32(b + 8, 1);
  put_u32(b + 12, (uint32_t)n);
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < 3; ++j) put_u32(b + 16 + 12 * k + 4 * j, rec[k][j]);
  return 16 + 12 * (size_t)n;
}

static void expect_refused(const kiln_graph_t* g, const unsigned char* b, size_t size,
                           const char* needle, const char* what) {
  kiln_writes_t w;
  kiln_status_t s = kiln_writes_load(g, b, size, &w);
  KILN_EXPECT(s && kiln_status_code(s) == KILN_CORRUPT_ARTIFACT &&
                  strstr(kiln_status_message(s), needle) != NULL,
              "%s: got %s", what, s ? kiln_status_message(s) : "accepted");
  KILN_EXPECT(w.input == NULL && w.n == 0, "%s: the table is left empty", what);
  kiln_status_free(s);
}

static void test_writes_section(void) {
  kiln_graph_t* g = writes_graph();
  KILN_EXPECT(g != NULL, "test graph");
  if (!g) return;
  unsigned char b[16 + 12 * 4];
  kiln_writes_t w;
  /* No section: no writes. */
  KILN_EXPECT_OK(kiln_writes_load(g, NULL, 0, &w));
  KILN_EXPECT(w.n == 0 && w.input[0] == -1 && w.input[1] == -1, "no section, no writes");
  kiln_writes_clear(&w);
  /* Output 0 updates input 0 in place. */
  size_t size = writes_section(b, 1, (const uint32_t[][3]){{0, 0, 1}});
  KILN_EXPECT_OK(kiln_writes_load(g, b, size, &w));
  KILN_EXPECT(w.n == 1 && w.input[0] == 0 && w.in_place[0] == 1 && w.input[1] == -1,
              "one write read back");
  kiln_writes_clear(&w);
  /* Every truncation and a byte too many. */
  for (size_t n = 0; n < size; ++n) expect_refused(g, b, n, "writes section", "truncated");
  unsigned char longer[sizeof b + 1] = {0};
  memcpy(longer, b, size);
  expect_refused(g, longer, size + 1, "bytes for 1 records", "a byte too many");
  /* Each check. */
  unsigned char c[sizeof b];
  memcpy(c, b, size), c[0] = 'X';
  expect_refused(g, c, size, "bad magic", "magic");
  memcpy(c, b, size), put_u32(c + 8, 2);
  expect_refused(g, c, size, "version 2", "version");
  size = writes_section(c, 3, (const uint32_t[][3]){{0, 0, 1}, {1, 1, 0}, {0, 1, 0}});
  expect_refused(g, c, size, "3 writes for a graph of 2 outputs", "count");
  size = writes_section(c, 1, (const uint32_t[][3]){{2, 0, 1}});
  expect_refused(g, c, size, "output 2 of 2", "output out of range");
  size = writes_section(c, 1, (const uint32_t[][3]){{0, 7, 1}});
  expect_refused(g, c, size, "input 7 of 2", "input out of range");
  size = writes_section(c, 1, (const uint32_t[][3]){{0, 0, 3}});
  expect_refused(g, c, size, "unknown flags", "flags");
  size = writes_section(c, 2, (const uint32_t[][3]){{0, 0, 1}, {0, 0, 1}});
  expect_refused(g, c, size, "output 0 is named twice", "output twice");
  size = writes_section(c, 1, (const uint32_t[][3]){{1, 0, 1}});
  expect_refused(g, c, size, "not of input 0's dtype and shape", "shape");
  size = writes_section(c, 2, (const uint32_t[][3]){{0, 0, 1}, {1, 0, 0}});
  expect_refused(g, c, size, "input 0 is named twice", "input twice");
  /* Random damage: refused, or every entry checked. */
  size = writes_section(b, 1, (const uint32_t[][3]){{0, 0, 1}});
  uint64_t seed = 12345;
  for (int trial = 0; trial < 2000; ++trial) {
    memcpy(c, b, size);
    for (int f = 0; f < 1 + trial % 3; ++f) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      c[(seed >> 33) % size] ^= (unsigned char)(1u << ((seed >> 20) % 8));
    }
    kiln_status_t s = kiln_writes_load(g, c, size, &w);
    if (!s) {
      for (int32_t o = 0; o < 2; ++o)
        KILN_EXPECT(w.input[o] == -1 || (w.input[o] == 0 && o == 0), "accepted damage is a valid write");
      kiln_writes_clear(&w);
    }
    kiln_status_free(s);
  }
  kiln_graph_release(g);
}

/* The artifact of writes_graph with a writes section (output 0 updates
 * input 0; in_place as given), or none (in_place < 0). */
static void* writes_artifact(int in_place, size_t* out_size) {
  kiln_graph_t* g = writes_graph();
  void* bytes = NULL;
  *out_size = 0;
  if (!g) return NULL;
  unsigned char b[28];
  size_t n = writes_section(b, 1, (const uint32_t[][3]){{0, 0, (uint32_t)(in_place > 0)}});
  kiln_artifact_section_t sec = {KILN_WRITES_SECTION, b, n};
  KILN_EXPECT_OK(kiln_artifact_write(g, &sec, in_place < 0 ? 0 : 1, &bytes, out_size));
  kiln_graph_release(g);
  return bytes;
}

#define API_OK(expr)                                                      \
  do {                                                                    \
    kiln_error_t* e__ = (expr);                                           \
    KILN_EXPECT(e__ == NULL, "%s: %s", #expr, kiln_error_message(e__));   \
    kiln_error_free(e__);                                                 \
  } while (0)

/* Runs once with the cache buffer also given as output 0 (or output 1 when
 * `wrong` is set); the error's message, NULL when the run succeeded. */
static char* run_aliased(kiln_session_t* s, float* cache, float* v, float* ev, int wrong) {
  const int64_t s4[1] = {4}, s2[1] = {2};
  float other[4];
  kiln_buffer_t in[2] = {{cache, sizeof(float) * 4, KILN_ELEMENT_FLOAT32, 1, s4},
                         {v, sizeof(float) * 2, KILN_ELEMENT_FLOAT32, 1, s2}};
  kiln_buffer_t out[2] = {{wrong ? other : cache, sizeof(float) * 4, KILN_ELEMENT_FLOAT32, 1, s4},
                          {wrong ? (void*)v : ev, sizeof(float) * 2, KILN_ELEMENT_FLOAT32, 1, s2}};
  kiln_error_t* e = kiln_session_run(s, in, 2, out, 2);
  char* msg = e ? strdup(kiln_error_message(e)) : NULL;
  kiln_error_free(e);
  return msg;
}

static void test_writes_api(void) {
  for (int mode = -1; mode <= 1; ++mode) { /* no section, a copy, in place */
    size_t size = 0;
    void* bytes = writes_artifact(mode, &size);
    kiln_session_t* s = NULL;
    API_OK(kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, NULL, &s));
    free(bytes);
    if (!s) continue;
    int32_t input = 9, in_place = 9;
    API_OK(kiln_session_output_updates(s, 0, &input, &in_place));
    KILN_EXPECT(input == (mode < 0 ? -1 : 0) && in_place == (mode > 0), "mode %d: output 0 updates %d (%d)",
                mode, (int)input, (int)in_place);
    API_OK(kiln_session_output_updates(s, 1, &input, &in_place));
    KILN_EXPECT(input == -1 && in_place == 0, "output 1 updates nothing");
    kiln_error_t* e = kiln_session_output_updates(s, 2, &input, &in_place);
    KILN_EXPECT(e && kiln_error_code(e) == KILN_ERROR_INVALID_ARGUMENT, "output 2 is out of range");
    kiln_error_free(e);
    e = kiln_session_output_updates(s, 0, NULL, &in_place);
    KILN_EXPECT(e && kiln_error_code(e) == KILN_ERROR_INVALID_ARGUMENT, "NULL out_input");
    kiln_error_free(e);
    float cache[4] = {10, 20, 30, 40}, v[2] = {0, 1}, ev[2] = {0, 0};
    char* msg = run_aliased(s, cache, v, ev, 0);
    if (mode > 0) {
      KILN_EXPECT(msg == NULL, "in place: %s", msg ? msg : "");
      KILN_EXPECT(cache[0] == 11 && cache[3] == 44 && ev[1] > 2.718f && ev[1] < 2.719f,
                  "the cache updated in place: %g %g", cache[0], cache[3]);
    } else {
      KILN_EXPECT(msg && strstr(msg, "output 0 shares memory with input 0 ('c')"),
                  "mode %d: refused: %s", mode, msg ? msg : "accepted");
      KILN_EXPECT(cache[0] == 10, "nothing written");
    }
    free(msg);
    msg = run_aliased(s, cache, v, ev, 1);
    KILN_EXPECT(msg && strstr(msg, "output 1 shares memory with input 1 ('v')"), "exp into v: %s",
                msg ? msg : "accepted");
    free(msg);
    kiln_session_release(s);
  }
  /* A damaged section fails the load, naming it. */
  size_t size = 0;
  unsigned char* bytes = writes_artifact(1, &size);
  if (!bytes) return;
  const void* sec = NULL;
  size_t sec_size = 0;
  KILN_EXPECT_OK(kiln_artifact_find_section(bytes, size, KILN_WRITES_SECTION, &sec, &sec_size));
  if (sec) put_u32((unsigned char*)sec + 16 + 4, 1); /* output 0 updates input 1, of another shape */
  kiln_session_t* s = NULL;
  kiln_error_t* e = kiln_session_create_from_memory(bytes, size, KILN_MEMORY_COPY, NULL, &s);
  KILN_EXPECT(e && kiln_error_code(e) == KILN_ERROR_CORRUPT_FILE &&
                  strstr(kiln_error_message(e), "writes section: output 0 is not of input 1's"),
              "damaged writes section: %s", e ? kiln_error_message(e) : "loaded");
  kiln_error_free(e);
  kiln_session_release(s);
  free(bytes);
}

void kiln_test_suite_artifact_writes(void) {
  test_writes_section();
  test_writes_api();
}
