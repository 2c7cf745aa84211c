/* Tests of the .kiln artifact: a round trip that compares every field of a
 * small graph (inputs interleaved with nodes, dense, scalar, empty and packed
 * constants, broadcast ADD, RESHAPE, MATMUL, SOFTMAX, LAYER_NORM with an
 * absent optional input, LINEAR, names and origins) plus caller sections;
 * then the hostile-input suite: every truncation, every single-byte flip,
 * random multi-byte damage, and targeted corruptions of versions, counts,
 * offsets and alignment. Damaged buffers are copied into heap blocks of their
 * exact length so that ASan/valgrind catch any read past the end.
 * Suite artifact_sym does the same for a graph with symbolic sizes (the
 * "syms" section, 2.7): the table's round trip, a compiled symbolic model
 * read back and run at two bindings, targeted corruptions of the section,
 * and the whole hostile-input suite over its file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "base/kiln_activation.h"
#include "kiln_test.h"

static const char kPlan[] = "memory plan: 37 bytes of opaque data!";
static const char kMeta[] = "{\"model\": \"tiny\", \"kiln\": 1}";

/* Builds the test graph; NULL (with failures recorded) if the API refuses. */
static kiln_graph_t* make_graph(void) {
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_graph_create(kiln_allocator_system(), &g);
  if (s) {
    KILN_EXPECT_OK(s);
    return NULL;
  }
  float bias[4], w[20], gamma[5], packed[25], scale = 0.5f;
  kiln_test_fill_f32(bias, 4, 1, -1, 1);
  kiln_test_fill_f32(w, 20, 2, -1, 1);
  kiln_test_fill_f32(gamma, 5, 3, 0.5f, 1.5f);
  kiln_test_fill_f32(packed, 25, 4, -1, 1);
  const int64_t s_x[] = {2, 3, 4}, s_bias[] = {4}, s_w[] = {4, 5}, s_y[] = {6, 5};
  const int64_t s_gamma[] = {5}, s_packed[] = {5, 3}, s_empty[] = {0, 3}, s_idx[] = {3};
  const int64_t idx[] = {2, 0, 1};
  int32_t x = -1, b = -1, add = -1, r = -1, wid = -1, mm = -1, y = -1, sm = -1, gm = -1;
  int32_t ln = -1, mul = -1, pk = -1, lin = -1, sc = -1, out = -1, e = -1, ix = -1;
  int ok = 1;
#define STEP(call)                        \
  do {                                    \
    if (ok && (s = (call)) != NULL) {     \
      ok = 0;                             \
      KILN_EXPECT_OK(s);                  \
    }                                     \
  } while (0)
  STEP(kiln_graph_add_input(g, "x", KILN_F32, 3, s_x, &x));
  STEP(kiln_graph_add_constant(g, "bias", KILN_F32, 1, s_bias, KILN_LAYOUT_DENSE, bias,
                               sizeof bias, &b));
  if (ok) {
    const int32_t in[] = {x, b};
    STEP(kiln_graph_add_node(g, KILN_OP_ADD, in, 2, NULL, 0, NULL, 0, "model.block.add", &add));
  }
  if (ok) {
    const int32_t in[] = {add};
    const int64_t p[] = {2, 6, 4};
    STEP(kiln_graph_add_node(g, KILN_OP_RESHAPE, in, 1, p, 3, NULL, 0, NULL, &r));
  }
  STEP(kiln_graph_add_constant(g, "w", KILN_F32, 2, s_w, KILN_LAYOUT_DENSE, w, sizeof w, &wid));
  if (ok) {
    const int32_t in[] = {r, wid};
    STEP(kiln_graph_add_node(g, KILN_OP_MATMUL, in, 2, NULL, 0, NULL, 0, "model.proj", &mm));
  }
  STEP(kiln_graph_add_input(g, "y", KILN_F32, 2, s_y, &y));
  if (ok) {
    const int32_t in[] = {mm};
    const int64_t p[] = {1};
    STEP(kiln_graph_add_node(g, KILN_OP_SOFTMAX, in, 1, p, 1, NULL, 0, "model.softmax", &sm));
  }
  STEP(kiln_graph_add_constant(g, "ln.gamma", KILN_F32, 1, s_gamma, KILN_LAYOUT_DENSE, gamma,
                               sizeof gamma, &gm));
  if (ok) {
    const int32_t in[] = {sm, gm, -1}; /* beta absent */
    const int64_t p[] = {1};
    const float f[] = {1e-5f};
    STEP(kiln_graph_add_node(g, KILN_OP_LAYER_NORM, in, 3, p, 1, f, 1, "model.ln", &ln));
  }
  if (ok) {
    const int32_t in[] = {ln, y};
    STEP(kiln_graph_add_node(g, KILN_OP_MUL, in, 2, NULL, 0, NULL, 0, NULL, &mul));
  }
  /* Packed bytes need not match the dense size. */
  STEP(kiln_graph_add_constant(g, "head.w", KILN_F32, 2, s_packed, KILN_LAYOUT_GEMM_PACKED_B,
                               packed, sizeof packed, &pk));
  if (ok) {
    const int32_t in[] = {mul, pk};
    const int64_t p[] = {KILN_ACT_NONE};
    STEP(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, p, 1, NULL, 0, "model.head", &lin));
  }
  STEP(kiln_graph_add_constant(g, NULL, KILN_F32, 0, NULL, KILN_LAYOUT_DENSE, &scale,
                               sizeof scale, &sc));
  if (ok) {
    const int32_t in[] = {lin, sc};
    STEP(kiln_graph_add_node(g, KILN_OP_MUL, in, 2, NULL, 0, NULL, 0, "model.scale", &out));
  }
  STEP(kiln_graph_add_constant(g, "empty", KILN_I64, 2, s_empty, KILN_LAYOUT_DENSE, NULL, 0, &e));
  STEP(kiln_graph_add_constant(g, "idx", KILN_I64, 1, s_idx, KILN_LAYOUT_DENSE, idx, sizeof idx,
                               &ix));
  int32_t perm = -1;
  if (ok) {
    /* x (2, 3, 4) permuted to (4, 3, 2): element strides 1, 4, 12. */
    const int32_t in[] = {x};
    int64_t p[KILN_MAX_PARAMS] = {3, 4, 3, 2};
    p[9] = 1, p[10] = 4, p[11] = 12, p[17] = 0;
    STEP(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, in, 1, p, KILN_MAX_PARAMS, NULL, 0,
                             "x.permute", &perm));
  }
  if (ok) {
    const int32_t outs[] = {out, mm, out, perm};
    STEP(kiln_graph_set_outputs(g, outs, 4));
  }
#undef STEP
  if (ok) {
    /* Intermediates get no name from the API; passes may set one. */
    g->values[add].name = malloc(7);
    if (g->values[add].name) memcpy(g->values[add].name, "hidden", 7);
  }
  if (!ok) {
    kiln_graph_release(g);
    return NULL;
  }
  return g;
}

static int same_str(const char* a, const char* b) {
  return (!a && !b) || (a && b && !strcmp(a, b));
}

/* NULL when a and b hold the same graph, else what differs (in buf). */
static const char* graph_diff(const kiln_graph_t* a, const kiln_graph_t* b, char* buf,
                              size_t size) {
#define DIFF(cond, ...)                    \
  if (cond) {                              \
    snprintf(buf, size, __VA_ARGS__);      \
    return buf;                            \
  }
  DIFF(a->n_values != b->n_values || a->n_nodes != b->n_nodes || a->n_inputs != b->n_inputs ||
           a->n_outputs != b->n_outputs,
       "counts differ");
  for (int32_t i = 0; i < a->n_values; ++i) {
    const kiln_value_t *u = &a->values[i], *v = &b->values[i];
    DIFF(u->kind != v->kind || u->dtype != v->dtype || u->rank != v->rank ||
             u->layout != v->layout || u->producer != v->producer || u->nbytes != v->nbytes,
         "value %d: header fields differ", i);
    DIFF(memcmp(u->shape, v->shape, sizeof u->shape), "value %d: shape differs", i);
    DIFF(!same_str(u->name, v->name), "value %d: name '%s' vs '%s'", i,
         u->name ? u->name : "(null)", v->name ? v->name : "(null)");
    DIFF(u->nbytes && memcmp(u->data, v->data, u->nbytes), "value %d: constant bytes differ", i);
  }
  for (int32_t i = 0; i < a->n_nodes; ++i) {
    const kiln_node_t *m = &a->nodes[i], *n = &b->nodes[i];
    DIFF(m->op != n->op || m->n_inputs != n->n_inputs || m->n_outputs != n->n_outputs,
         "node %d: op or arity differs", i);
    DIFF(memcmp(m->inputs, n->inputs, (size_t)m->n_inputs * sizeof(int32_t)) ||
             m->outputs[0] != n->outputs[0],
         "node %d: ids differ", i);
    DIFF(memcmp(m->params, n->params, sizeof m->params), "node %d: params differ", i);
    DIFF(memcmp(m->fparams, n->fparams, sizeof m->fparams), "node %d: fparams differ", i);
    DIFF(!same_str(m->origin, n->origin), "node %d: origin differs", i);
  }
  DIFF(memcmp(a->inputs, b->inputs, (size_t)a->n_inputs * sizeof(int32_t)), "inputs differ");
  DIFF(memcmp(a->outputs, b->outputs, (size_t)a->n_outputs * sizeof(int32_t)), "outputs differ");
#undef DIFF
  return NULL;
}

/* A heap copy of exactly n bytes (n may be 0), so over-reads are caught. */
static uint8_t* exact_copy(const void* src, size_t n) {
  uint8_t* p = malloc(n ? n : 1);
  if (p && n) memcpy(p, src, n);
  return p;
}

/* Reads damaged bytes: they must fail with KILN_CORRUPT_ARTIFACT or give a
 * graph that verifies. Returns 1 when accepted, 0 when refused, -1 on a
 * wrong outcome (already reported). */
static int read_damaged(const uint8_t* bytes, size_t n, const char* what, size_t where) {
  uint8_t* copy = exact_copy(bytes, n);
  if (!copy) return -1;
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_artifact_read(copy, n, kiln_allocator_system(), &g);
  int result;
  if (s) {
    result = kiln_status_code(s) == KILN_CORRUPT_ARTIFACT && !g ? 0 : -1;
    if (result < 0)
      fprintf(stderr, "  %s at %zu: %s: %s\n", what, where,
              kiln_status_code_name(kiln_status_code(s)), kiln_status_message(s));
    kiln_status_free(s);
  } else {
    kiln_status_t v = kiln_graph_verify(g);
    result = v ? -1 : 1;
    if (v) fprintf(stderr, "  %s at %zu: accepted a graph that fails verify: %s\n", what, where,
                   kiln_status_message(v));
    kiln_status_free(v);
    kiln_graph_release(g);
  }
  /* Section lookup must be as safe as the reader on the same bytes. */
  const void* data;
  size_t dsize;
  kiln_status_free(kiln_artifact_find_section(copy, n, "plan", &data, &dsize));
  free(copy);
  return result;
}

/* Expects the reader to refuse bytes with KILN_CORRUPT_ARTIFACT whose
 * message contains `needle` (may be NULL). */
static void expect_corrupt(const uint8_t* bytes, size_t n, const char* what, const char* needle) {
  uint8_t* copy = exact_copy(bytes, n);
  if (!copy) return;
  kiln_graph_t* g = NULL;
  kiln_status_t s = kiln_artifact_read(copy, n, kiln_allocator_system(), &g);
  KILN_EXPECT(kiln_status_code(s) == KILN_CORRUPT_ARTIFACT && !g, "%s: got %s: %s", what,
              kiln_status_code_name(kiln_status_code(s)), kiln_status_message(s));
  if (s && needle)
    KILN_EXPECT(strstr(kiln_status_message(s), needle), "%s: message '%s' lacks '%s'", what,
                kiln_status_message(s), needle);
  kiln_status_free(s);
  kiln_graph_release(g);
  free(copy);
}

static size_t section_offset(const uint8_t* bytes, size_t size, const char* name) {
  const void* data = NULL;
  size_t n;
  kiln_status_free(kiln_artifact_find_section(bytes, size, name, &data, &n));
  return data ? (size_t)((const uint8_t*)data - bytes) : 0;
}

static void test_round_trip(const kiln_graph_t* g, const uint8_t* bytes, size_t size) {
  char diff[160];
  /* In place: the writer's buffer is 64-aligned, so constants are borrowed. */
  kiln_graph_t* h = NULL;
  KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h));
  if (h) {
    const char* d = graph_diff(g, h, diff, sizeof diff);
    KILN_EXPECT(!d, "round trip: %s", d);
    int borrowed = 1;
    for (int32_t i = 0; i < h->n_values; ++i) {
      const kiln_value_t* v = &h->values[i];
      if (v->kind != KILN_VALUE_CONSTANT) continue;
      const uint8_t* p = v->data;
      borrowed &= p >= bytes && p <= bytes + size && !v->owned_data &&
                  (uintptr_t)p % KILN_ALIGNMENT == 0;
    }
    KILN_EXPECT(borrowed, "constants of an aligned buffer are borrowed in place");
    KILN_EXPECT_OK(kiln_graph_verify(h));
    kiln_graph_release(h);
  }
  /* At a misaligned address: constants are copied into aligned storage. */
  uint8_t* raw = malloc(size + 64);
  if (raw) {
    uint8_t* mis = raw + (64 - (uintptr_t)raw % 64) % 64 + 8;
    memcpy(mis, bytes, size);
    h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(mis, size, kiln_allocator_system(), &h));
    if (h) {
      const char* d = graph_diff(g, h, diff, sizeof diff);
      KILN_EXPECT(!d, "misaligned round trip: %s", d);
      int copied = 1;
      for (int32_t i = 0; i < h->n_values; ++i) {
        const kiln_value_t* v = &h->values[i];
        if (v->kind != KILN_VALUE_CONSTANT) continue;
        const uint8_t* p = v->data;
        copied &= (p < mis || p > mis + size) && (uintptr_t)p % KILN_ALIGNMENT == 0;
      }
      KILN_EXPECT(copied, "constants of a misaligned buffer are copied and aligned");
      kiln_graph_release(h);
    }
    free(raw);
  }
  /* Caller sections. */
  const void* data;
  size_t n;
  KILN_EXPECT_OK(kiln_artifact_find_section(bytes, size, "plan", &data, &n));
  KILN_EXPECT(data && n == sizeof kPlan && !memcmp(data, kPlan, n), "plan section");
  KILN_EXPECT(data && (uintptr_t)data % 64 == 0, "sections are 64-aligned");
  KILN_EXPECT_OK(kiln_artifact_find_section(bytes, size, "meta.json", &data, &n));
  KILN_EXPECT(data && n == strlen(kMeta) && !memcmp(data, kMeta, n), "meta section");
  KILN_EXPECT_OK(kiln_artifact_find_section(bytes, size, "empty", &data, &n));
  KILN_EXPECT(data && n == 0, "empty section found with size 0");
  KILN_EXPECT_OK(kiln_artifact_find_section(bytes, size, "absent", &data, &n));
  KILN_EXPECT(!data && n == 0, "absent section gives NULL");
  /* Writing is deterministic. */
  void* again = NULL;
  size_t again_size = 0;
  const kiln_artifact_section_t extra[] = {
      {"plan", kPlan, sizeof kPlan}, {"meta.json", kMeta, strlen(kMeta)}, {"empty", NULL, 0}};
  KILN_EXPECT_OK(kiln_artifact_write(g, extra, 3, &again, &again_size));
  KILN_EXPECT(again && again_size == size && !memcmp(again, bytes, size),
              "writing twice gives the same bytes");
  free(again);
}

static void test_writer_refuses(const kiln_graph_t* g) {
  void* out = (void*)1;
  size_t n = 1;
  const kiln_artifact_section_t dup[] = {{"a", "x", 1}, {"a", "y", 1}};
  KILN_EXPECT_ERROR(kiln_artifact_write(g, dup, 2, &out, &n), KILN_INVALID_ARGUMENT);
  KILN_EXPECT(out == NULL && n == 0, "outputs cleared on failure");
  const kiln_artifact_section_t reserved[] = {{"graph", "x", 1}};
  KILN_EXPECT_ERROR(kiln_artifact_write(g, reserved, 1, &out, &n), KILN_INVALID_ARGUMENT);
  const kiln_artifact_section_t long_name[] = {{"0123456789abcdef0123456789abcdef", "x", 1}};
  KILN_EXPECT_ERROR(kiln_artifact_write(g, long_name, 1, &out, &n), KILN_INVALID_ARGUMENT);
  const kiln_artifact_section_t space[] = {{"a b", "x", 1}};
  KILN_EXPECT_ERROR(kiln_artifact_write(g, space, 1, &out, &n), KILN_INVALID_ARGUMENT);
  const kiln_artifact_section_t no_data[] = {{"a", NULL, 4}};
  KILN_EXPECT_ERROR(kiln_artifact_write(g, no_data, 1, &out, &n), KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_artifact_write(g, NULL, -1, &out, &n), KILN_INVALID_ARGUMENT);
  /* A graph without outputs does not verify. */
  kiln_graph_t* empty = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &empty));
  if (empty) KILN_EXPECT_ERROR(kiln_artifact_write(empty, NULL, 0, &out, &n), KILN_INVALID_ARGUMENT);
  kiln_graph_release(empty);
}

static void test_truncation(const uint8_t* bytes, size_t size) {
  int wrong = 0, fixed_wrong = 0;
  uint8_t* fixed = exact_copy(bytes, size);
  for (size_t len = 0; len < size; ++len) {
    if (read_damaged(bytes, len, "truncation", len) != 0) ++wrong;
    /* Also with the header's file size patched to match, so that the
     * section table and graph checks meet the short buffer too. */
    if (fixed && len >= KILN_FORMAT_HDR_FILE_SIZE + 8) {
      kiln_format_put_u64(fixed + KILN_FORMAT_HDR_FILE_SIZE, len);
      if (read_damaged(fixed, len, "patched truncation", len) != 0) ++fixed_wrong;
    }
  }
  free(fixed);
  KILN_EXPECT(wrong == 0, "%d of %zu truncations were not refused cleanly", wrong, size);
  KILN_EXPECT(fixed_wrong == 0, "%d patched truncations were not refused cleanly", fixed_wrong);
}

static void test_flips(const uint8_t* bytes, size_t size) {
  static const uint8_t masks[] = {0x01, 0x02, 0x10, 0x80, 0xff};
  size_t consts = section_offset(bytes, size, "consts");
  uint8_t* copy = exact_copy(bytes, size);
  if (!copy) return;
  int wrong = 0, consts_refused = 0, accepted = 0, refused = 0;
  for (size_t pos = 0; pos < size; ++pos) {
    for (size_t m = 0; m < sizeof masks; ++m) {
      copy[pos] ^= masks[m];
      int r = read_damaged(copy, size, "flip", pos);
      copy[pos] ^= masks[m];
      if (r < 0) ++wrong;
      else if (r) ++accepted;
      else ++refused;
      /* Constant data is not checked: flips there must be accepted. */
      if (consts && pos >= consts && r == 0) ++consts_refused;
    }
  }
  free(copy);
  KILN_EXPECT(wrong == 0, "%d single-byte flips gave a wrong outcome", wrong);
  KILN_EXPECT(consts_refused == 0, "%d flips in constant data were refused", consts_refused);
  KILN_EXPECT(refused > 0 && accepted > 0, "flips: %d refused, %d accepted", refused, accepted);
}

static void test_random_damage(const uint8_t* bytes, size_t size) {
  size_t consts = section_offset(bytes, size, "consts");
  size_t span = consts ? consts : size; /* header, table, graph, caller sections */
  uint8_t* copy = exact_copy(bytes, size);
  if (!copy) return;
  uint64_t s = 0x243F6A8885A308D3ull;
  int wrong = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    memcpy(copy, bytes, size);
    int hits = 1 + iter % 6;
    for (int h = 0; h < hits; ++h) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      size_t pos = (size_t)(s % span);
      static const uint8_t special[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0x40};
      copy[pos] = (s >> 32) & 1 ? special[(s >> 40) % sizeof special] : (uint8_t)(s >> 48);
    }
    if (read_damaged(copy, size, "random damage", (size_t)iter) < 0) ++wrong;
  }
  free(copy);
  KILN_EXPECT(wrong == 0, "%d random corruptions gave a wrong outcome", wrong);
}

/* Locates the first constant's value record and node k's record. */
static uint8_t* value_record(uint8_t* b, size_t graph, uint32_t i) {
  return b + graph + KILN_FORMAT_GRAPH_HEADER_SIZE + (size_t)i * KILN_FORMAT_VALUE_SIZE;
}
static uint8_t* node_record(uint8_t* b, size_t graph, uint32_t k) {
  uint32_t nv = kiln_format_get_u32(b + graph + KILN_FORMAT_GH_N_VALUES);
  return value_record(b, graph, nv) + (size_t)k * KILN_FORMAT_NODE_SIZE;
}

static void test_targeted(const kiln_graph_t* g, const uint8_t* bytes, size_t size) {
  uint8_t* b = exact_copy(bytes, size);
  if (!b) return;
  size_t graph = section_offset(bytes, size, "graph");
  size_t consts = section_offset(bytes, size, "consts");
  const uint8_t* table = bytes + KILN_FORMAT_HEADER_SIZE;
  uint32_t n_sections = kiln_format_get_u32(bytes + KILN_FORMAT_HDR_SECTION_COUNT);
  size_t consts_entry = KILN_FORMAT_HEADER_SIZE + (size_t)(n_sections - 1) * KILN_FORMAT_ENTRY_SIZE;
  size_t graph_entry = KILN_FORMAT_HEADER_SIZE;
  KILN_EXPECT(graph && consts && !strcmp((const char*)table, "graph") &&
                  !strcmp((const char*)bytes + consts_entry, "consts"),
              "writer's layout as expected");
#define RESET() memcpy(b, bytes, size)

  RESET();
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MAJOR, KILN_FORMAT_MAJOR + 1);
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MINOR, 0);
  expect_corrupt(b, size, "newer major", "is newer than this reader's");
  RESET();
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MAJOR, 0);
  expect_corrupt(b, size, "older major", "older");
  RESET();
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MINOR, 9);
  {
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(b, size, kiln_allocator_system(), &h));
    char diff[160];
    const char* d = h ? graph_diff(g, h, diff, sizeof diff) : "no graph";
    KILN_EXPECT(!d, "a newer minor version reads: %s", d);
    kiln_graph_release(h);
  }
  RESET();
  memcpy(b, "KILM", 4);
  expect_corrupt(b, size, "bad magic", "magic");
  RESET();
  kiln_format_put_u32(b + KILN_FORMAT_HDR_FLAGS, 4);
  expect_corrupt(b, size, "unknown flag", "flags");
  RESET();
  kiln_format_put_u32(b + KILN_FORMAT_HDR_SECTION_COUNT, 0xffffffffu);
  expect_corrupt(b, size, "huge section count", "sections");
  RESET();
  kiln_format_put_u64(b + KILN_FORMAT_HDR_TABLE_OFFSET, UINT64_MAX - 8);
  expect_corrupt(b, size, "table offset at the end of u64", "section table");
  RESET();
  kiln_format_put_u64(b + KILN_FORMAT_HDR_FILE_SIZE, UINT64_MAX);
  expect_corrupt(b, size, "huge file size", "truncated");

  /* Huge counts: must fail before any allocation sized from them. */
  static const int count_fields[] = {KILN_FORMAT_GH_N_VALUES, KILN_FORMAT_GH_N_NODES,
                                     KILN_FORMAT_GH_N_INPUTS, KILN_FORMAT_GH_N_OUTPUTS};
  for (size_t f = 0; f < sizeof count_fields / sizeof count_fields[0]; ++f) {
    RESET();
    kiln_format_put_u32(b + graph + count_fields[f], 0xffffffffu);
    expect_corrupt(b, size, "huge count", "do not add up");
  }
  RESET();
  kiln_format_put_u64(b + graph + KILN_FORMAT_GH_STRINGS_SIZE, UINT64_MAX);
  expect_corrupt(b, size, "huge string table", "do not add up");

  /* Section offsets and sizes. */
  RESET();
  kiln_format_put_u64(b + graph_entry + KILN_FORMAT_ENTRY_OFFSET, (uint64_t)1 << 40);
  expect_corrupt(b, size, "offset past the end", "runs past the end");
  RESET();
  kiln_format_put_u64(b + consts_entry + KILN_FORMAT_ENTRY_SIZE_FIELD, UINT64_MAX - 63);
  expect_corrupt(b, size, "size wrapping around", "runs past the end");
  RESET();
  kiln_format_put_u64(b + consts_entry + KILN_FORMAT_ENTRY_OFFSET, graph);
  expect_corrupt(b, size, "overlapping sections", "overlaps");
  RESET();
  kiln_format_put_u64(b + consts_entry + KILN_FORMAT_ENTRY_OFFSET, consts + 8);
  kiln_format_put_u64(b + consts_entry + KILN_FORMAT_ENTRY_SIZE_FIELD, size - consts - 8);
  expect_corrupt(b, size, "misaligned blob", "aligned");
  RESET();
  memcpy(b + consts_entry, "graph", 6);
  expect_corrupt(b, size, "duplicate section names", "both named");
  RESET();
  b[consts_entry + 10] = 'x'; /* bytes after the name's NUL */
  expect_corrupt(b, size, "name padding", "after its name");

  /* Constants: value 1 ("bias") and value 4 ("w") are the first two. */
  RESET();
  kiln_format_put_u64(value_record(b, graph, 1) + KILN_FORMAT_V_CONST_OFFSET, 8);
  expect_corrupt(b, size, "misaligned constant", "aligned");
  RESET();
  kiln_format_put_u64(value_record(b, graph, 4) + KILN_FORMAT_V_CONST_OFFSET, 0);
  expect_corrupt(b, size, "overlapping constants", "overlaps");
  RESET();
  kiln_format_put_u64(value_record(b, graph, 4) + KILN_FORMAT_V_CONST_OFFSET, kiln_align_up(size, 64));
  expect_corrupt(b, size, "constant past the blob", "runs past");
  RESET();
  kiln_format_put_u64(value_record(b, graph, 1) + KILN_FORMAT_V_CONST_SIZE, 12);
  expect_corrupt(b, size, "constant size vs shape", "dense shape needs");
  /* A joined weight's bytes are host pointers (kiln_joined_const.h): a
   * file that claims one is refused before anything reads them. */
  RESET();
  kiln_format_put_u32(value_record(b, graph, 4) + KILN_FORMAT_V_LAYOUT, KILN_LAYOUT_JOINED_COLS);
  expect_corrupt(b, size, "a joined weight in a file", "joined weight");
  /* So is a bf16 weight held narrow: it exists only until the pack pass,
   * except as a LINEAR's (N, K) rows read in place (format 2.21), whose
   * bytes must then be its shape's in bf16. */
  RESET();
  kiln_format_put_u32(value_record(b, graph, 4) + KILN_FORMAT_V_LAYOUT, KILN_LAYOUT_WIDENED_BF16);
  expect_corrupt(b, size, "a held bf16 weight in a file", "before packing");
  RESET();
  kiln_format_put_u32(value_record(b, graph, 4) + KILN_FORMAT_V_LAYOUT, KILN_LAYOUT_WIDENED_BF16_T);
  expect_corrupt(b, size, "bf16 rows in a file stamped before 2.21", "format 2.21");
  RESET();
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MINOR, KILN_FORMAT_MINOR_BF16_ROWS);
  kiln_format_put_u32(value_record(b, graph, 4) + KILN_FORMAT_V_LAYOUT, KILN_LAYOUT_WIDENED_BF16_T);
  expect_corrupt(b, size, "bf16 rows of the wrong size", "held as bf16 needs");
  RESET();
  kiln_format_put_u64(value_record(b, graph, 0) + KILN_FORMAT_V_SHAPE, (uint64_t)1 << 41);
  expect_corrupt(b, size, "huge dimension", "dimension 0");
  RESET();
  kiln_format_put_u32(value_record(b, graph, 0) + KILN_FORMAT_V_NAME, 0xfffffff0u);
  expect_corrupt(b, size, "name outside the string table", "string table");

  /* Nodes: node 2 (matmul) input 1 is value 4. */
  RESET();
  kiln_format_put_u32(node_record(b, graph, 2) + KILN_FORMAT_N_INPUTS + 4, 900);
  expect_corrupt(b, size, "input id out of range", "node 2 (matmul) input 1 refers to value 900 of");
  RESET();
  kiln_format_put_u32(node_record(b, graph, 2) + KILN_FORMAT_N_INPUTS + 4, 7);
  expect_corrupt(b, size, "forward reference", "not made before");
  RESET();
  kiln_format_put_u32(node_record(b, graph, 2) + KILN_FORMAT_N_OP, 200);
  expect_corrupt(b, size, "unknown op", "op 200");
  RESET();
  kiln_format_put_u32(node_record(b, graph, 2) + KILN_FORMAT_N_OP, KILN_OP_ADD);
  expect_corrupt(b, size, "op changed to one that does not type-check", "node 2 (add)");
  RESET();
  /* Reshape to a huge rank-3 shape: refused before inference multiplies it. */
  kiln_format_put_u64(node_record(b, graph, 1) + KILN_FORMAT_N_PARAMS + 8, (uint64_t)1 << 62);
  expect_corrupt(b, size, "hostile reshape params", "params give dimension");
  RESET();
  /* Node 8 (strided_copy): a stride whose view arithmetic would overflow. */
  kiln_format_put_u64(node_record(b, graph, 8) + KILN_FORMAT_N_PARAMS + 8 * 9,
                      (uint64_t)1 << 60);
  expect_corrupt(b, size, "hostile strided_copy stride", "stride");
  RESET();
  kiln_format_put_u64(node_record(b, graph, 8) + KILN_FORMAT_N_PARAMS + 8 * 17,
                      (uint64_t)INT64_MAX);
  expect_corrupt(b, size, "hostile strided_copy offset", "offset");
  RESET();
  kiln_format_put_u64(node_record(b, graph, 8) + KILN_FORMAT_N_PARAMS + 8 * 17, 1);
  expect_corrupt(b, size, "strided_copy reading past its input", "view reads");
  RESET();
  /* Softmax stored with the wrong output shape. */
  kiln_format_put_u64(value_record(b, graph, 7) + KILN_FORMAT_V_SHAPE, 7);
  expect_corrupt(b, size, "stored output shape differs", "inputs give");
  RESET();
  kiln_format_put_u32(b + graph + KILN_FORMAT_GRAPH_HEADER_SIZE +
                          kiln_format_get_u32(b + graph) * (size_t)KILN_FORMAT_VALUE_SIZE +
                          kiln_format_get_u32(b + graph + 4) * (size_t)KILN_FORMAT_NODE_SIZE +
                          4 * (size_t)kiln_format_get_u32(b + graph + 8),
                      12345);
  expect_corrupt(b, size, "graph output out of range", "graph output 0 refers to value 12345");
#undef RESET
  free(b);
}

static void test_files(const kiln_graph_t* g, const uint8_t* bytes, size_t size) {
  char path[] = "/tmp/kiln_artifact_test_XXXXXX";
  int fd = mkstemp(path);
  KILN_EXPECT(fd >= 0, "mkstemp");
  if (fd < 0) return;
  close(fd);
  KILN_EXPECT_OK(kiln_artifact_save_file(path, bytes, size));
  void* loaded = NULL;
  size_t n = 0;
  KILN_EXPECT_OK(kiln_artifact_load_file(path, &loaded, &n));
  KILN_EXPECT(loaded && n == size && !memcmp(loaded, bytes, size), "file round trip");
  KILN_EXPECT((uintptr_t)loaded % 64 == 0, "loaded buffer is 64-aligned");
  if (loaded && n == size) {
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(loaded, n, kiln_allocator_system(), &h));
    char diff[160];
    const char* d = h ? graph_diff(g, h, diff, sizeof diff) : "no graph";
    KILN_EXPECT(!d, "graph from a file: %s", d);
    kiln_graph_release(h);
  }
  free(loaded);
  /* An empty file loads (as zero bytes) and is refused by the reader. */
  KILN_EXPECT_OK(kiln_artifact_save_file(path, NULL, 0));
  KILN_EXPECT_OK(kiln_artifact_load_file(path, &loaded, &n));
  KILN_EXPECT(n == 0, "empty file size");
  if (loaded) expect_corrupt(loaded, 0, "empty file", "header");
  free(loaded);
  unlink(path);
  KILN_EXPECT_ERROR(kiln_artifact_load_file(path, &loaded, &n), KILN_IO_ERROR);
  KILN_EXPECT(loaded == NULL, "no buffer on failure");
  KILN_EXPECT_ERROR(kiln_artifact_save_file("/nonexistent-dir/x.kiln", bytes, size),
                    KILN_IO_ERROR);
}

void kiln_test_suite_artifact(void) {
  kiln_graph_t* g = make_graph();
  if (!g) return;
  void* bytes = NULL;
  size_t size = 0;
  const kiln_artifact_section_t extra[] = {
      {"plan", kPlan, sizeof kPlan}, {"meta.json", kMeta, strlen(kMeta)}, {"empty", NULL, 0}};
  KILN_EXPECT_OK(kiln_artifact_write(g, extra, 3, &bytes, &size));
  if (bytes) {
    KILN_EXPECT((uintptr_t)bytes % 64 == 0, "writer's buffer is 64-aligned");
    test_round_trip(g, bytes, size);
    test_writer_refuses(g);
    test_truncation(bytes, size);
    test_flips(bytes, size);
    test_random_damage(bytes, size);
    test_targeted(g, bytes, size);
    test_files(g, bytes, size);
  }
  free(bytes);
  kiln_graph_release(g);
}

/* ---- symbolic sizes (the "syms" section, 2.7) ----------------------------- */

#include "compiler/kiln_compiler.h"
#include "runtime/kiln_model.h"

/* x (B, T, 16), x2 (B, T2, 8) -> [softmax over dim 1 of cat(gelu(x W + b)
 * as (B, T, 8), x2), that cat without its first row (a view whose strides
 * and sizes are expressions)]. With syms NULL the same graph at fixed sizes.
 * The table also holds expressions of every kind the graph does not use. */
static kiln_graph_t* make_sym_graph(int symbolic, int64_t B, int64_t T, int64_t T2) {
  static float w[16 * 8], bias[8];
  kiln_test_fill_f32(w, 16 * 8, 3, -0.5f, 0.5f);
  kiln_test_fill_f32(bias, 8, 4, -0.5f, 0.5f);
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  kiln_sym_table_t* t = NULL;
  kiln_status_t s = kiln_ok();
#define SSTEP(call) \
  if (!s) s = (call)
  if (symbolic) {
    int64_t junk;
    SSTEP(kiln_graph_syms(g, &t));
    SSTEP(kiln_sym_var(t, "batch", 1, 8, &B));
    SSTEP(kiln_sym_var(t, "seq", 2, 512, &T));
    SSTEP(kiln_sym_var(t, "T2", 1, 512, &T2));
    SSTEP(kiln_dim_floordiv(t, T, 2, &junk));
    SSTEP(kiln_dim_mod(t, T, 3, &junk));
    SSTEP(kiln_dim_max(t, T, T2, &junk));
    SSTEP(kiln_dim_min(t, junk, 64, &junk));
    SSTEP(kiln_dim_floordiv(t, B, T2, &junk));
  }
  int32_t x = -1, x2 = -1, vw = -1, vb = -1, y = -1, z = -1, r = -1, c = -1, sm = -1, sl = -1;
  int64_t BT = 0, TT = 0, TT1 = 0, st0 = 0;
  SSTEP(kiln_graph_add_input(g, "x", KILN_F32, 3, (int64_t[]){B, T, 16}, &x));
  SSTEP(kiln_graph_add_input(g, "x2", KILN_F32, 3, (int64_t[]){B, T2, 8}, &x2));
  SSTEP(kiln_graph_add_constant(g, "w", KILN_F32, 2, (int64_t[]){16, 8}, KILN_LAYOUT_DENSE, w,
                                sizeof w, &vw));
  SSTEP(kiln_graph_add_constant(g, "b", KILN_F32, 1, (int64_t[]){8}, KILN_LAYOUT_DENSE, bias,
                                sizeof bias, &vb));
  SSTEP(kiln_dim_mul(t, B, T, &BT));
  SSTEP(kiln_dim_add(t, T, T2, &TT));
  SSTEP(kiln_dim_sub(t, TT, 1, &TT1));
  SSTEP(kiln_dim_mul(t, TT, 8, &st0));
  SSTEP(kiln_graph_add_node(g, KILN_OP_RESHAPE, &x, 1, (int64_t[]){2, BT, 16}, 3, NULL, 0,
                            "flatten", &y));
  SSTEP(kiln_graph_add_node(g, KILN_OP_MATMUL, (int32_t[]){y, vw}, 2, NULL, 0, NULL, 0, "mm", &z));
  SSTEP(kiln_graph_add_node(g, KILN_OP_ADD, (int32_t[]){z, vb}, 2, NULL, 0, NULL, 0, "bias", &z));
  SSTEP(kiln_graph_add_node(g, KILN_OP_GELU, &z, 1, NULL, 0, NULL, 0, "gelu", &z));
  SSTEP(kiln_graph_add_node(g, KILN_OP_RESHAPE, &z, 1, (int64_t[]){3, B, T, 8}, 4, NULL, 0,
                            "unflatten", &r));
  SSTEP(kiln_graph_add_node(g, KILN_OP_CAT, (int32_t[]){r, x2}, 2, (int64_t[]){1}, 1, NULL, 0,
                            "cat", &c));
  SSTEP(kiln_graph_add_node(g, KILN_OP_SOFTMAX, &c, 1, (int64_t[]){1, 0}, 2, NULL, 0, "softmax",
                            &sm));
  int64_t p[KILN_MAX_PARAMS] = {0};
  p[0] = 3, p[1] = B, p[2] = TT1, p[3] = 8, p[9] = st0, p[10] = 8, p[11] = 1, p[17] = 8;
  SSTEP(kiln_graph_add_node(g, KILN_OP_STRIDED_COPY, &c, 1, p, 18, NULL, 0, "slice", &sl));
  SSTEP(kiln_graph_set_outputs(g, (int32_t[]){sm, sl}, 2));
#undef SSTEP
  if (s) {
    KILN_EXPECT_OK(s);
    kiln_graph_release(g);
    return NULL;
  }
  return g;
}

/* NULL when the two tables hold the same symbols and expressions. */
static const char* syms_diff(const kiln_sym_table_t* a, const kiln_sym_table_t* b, char* buf,
                             size_t size) {
  if (!a || !b) return snprintf(buf, size, "a table is missing"), buf;
  if (a->n_vars != b->n_vars || a->n_exprs != b->n_exprs)
    return snprintf(buf, size, "%d/%d symbols, %d/%d expressions", a->n_vars, b->n_vars,
                    a->n_exprs, b->n_exprs), buf;
  for (int32_t i = 0; i < a->n_vars; ++i)
    if (strcmp(a->vars[i].name, b->vars[i].name) || a->vars[i].lo != b->vars[i].lo ||
        a->vars[i].hi != b->vars[i].hi || a->vars[i].dim != b->vars[i].dim)
      return snprintf(buf, size, "symbol %d differs", i), buf;
  for (int32_t e = 0; e < a->n_exprs; ++e) {
    const kiln_sym_expr_t *x = &a->exprs[e], *y = &b->exprs[e];
    if (x->kind != y->kind || x->a != y->a || x->b != y->b || x->probe[0] != y->probe[0] ||
        x->probe[1] != y->probe[1])
      return snprintf(buf, size, "expression %d differs", e), buf;
  }
  return NULL;
}

/* Runs m at one binding against the graph built at those sizes. */
static void run_sym_binding(kiln_model_t* m, int64_t B, int64_t T, int64_t T2) {
  size_t nx = (size_t)(B * T * 16), nx2 = (size_t)(B * T2 * 8), ny = (size_t)(B * (T + T2) * 8),
         nz = (size_t)(B * (T + T2 - 1) * 8);
  float *x = malloc(nx * 4), *x2 = malloc(nx2 * 4), *got = malloc(ny * 4), *want = malloc(ny * 4),
        *got2 = malloc(nz * 4), *want2 = malloc(nz * 4);
  kiln_test_fill_f32(x, nx, (unsigned)(B * 7 + T), -2, 2);
  kiln_test_fill_f32(x2, nx2, (unsigned)(T2 * 5 + 1), -2, 2);
  int64_t sx[3] = {B, T, 16}, sx2[3] = {B, T2, 8}, sy[3] = {B, T + T2, 8}, sz[3] = {B, T + T2 - 1, 8};
  kiln_tensor_t in[2] = {{x, KILN_F32, 3, sx}, {x2, KILN_F32, 3, sx2}};
  kiln_tensor_t outs[2] = {{got, KILN_F32, 3, sy}, {got2, KILN_F32, 3, sz}};
  KILN_EXPECT_OK(kiln_model_run(m, in, 2, outs, 2));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  kiln_graph_t* c = NULL;
  kiln_graph_t* ref_graph = make_sym_graph(0, B, T, T2);
  if (ref_graph) KILN_EXPECT_OK(kiln_compile(ref_graph, &o, &c));
  kiln_model_t* ref = NULL;
  if (c) KILN_EXPECT_OK(kiln_model_create(c, NULL, NULL, &ref));
  kiln_tensor_t routs[2] = {{want, KILN_F32, 3, sy}, {want2, KILN_F32, 3, sz}};
  if (ref) KILN_EXPECT_OK(kiln_model_run(ref, in, 2, routs, 2));
  char what[96];
  snprintf(what, sizeof what, "loaded symbolic model at batch=%lld seq=%lld T2=%lld",
           (long long)B, (long long)T, (long long)T2);
  kiln_test_compare_f32(what, got, want, ny, 0, 0);
  kiln_test_compare_f32(what, got2, want2, nz, 0, 0);
  kiln_model_release(ref);
  free(x), free(x2), free(got), free(want), free(got2), free(want2);
}

/* make_sym_graph's symbolic graph, compiled (NULL on a failure, reported). */
static kiln_graph_t* compiled_sym_graph(void) {
  kiln_graph_t* g = make_sym_graph(1, 0, 0, 0);
  if (!g) return NULL;
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  kiln_graph_t* c = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &c));
  return c;
}

/* A compiled symbolic graph written, read back (every field and the whole
 * table equal) and run at two bindings. */
static void test_sym_round_trip(void) {
  kiln_graph_t* c = compiled_sym_graph();
  if (!c) return;
  void* bytes = NULL;
  size_t size = 0;
  const kiln_artifact_section_t meta[] = {{"meta.json", kMeta, strlen(kMeta)}};
  KILN_EXPECT_OK(kiln_artifact_write(c, meta, 1, &bytes, &size));
  if (bytes) {
    KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) == 7,
                "a file with symbolic sizes is version 2.7");
    const uint8_t* table = (const uint8_t*)bytes + KILN_FORMAT_HEADER_SIZE;
    KILN_EXPECT(!strcmp((const char*)table + KILN_FORMAT_ENTRY_SIZE, "syms"),
                "syms comes right after graph");
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h));
    if (h) {
      char diff[160];
      const char* d = graph_diff(c, h, diff, sizeof diff);
      KILN_EXPECT(!d, "symbolic round trip: %s", d);
      d = syms_diff(c->syms, h->syms, diff, sizeof diff);
      KILN_EXPECT(!d, "symbol table round trip: %s", d);
      char buf[128];
      KILN_EXPECT(!strcmp(kiln_graph_describe_value(h, &h->values[h->outputs[1]], buf, sizeof buf),
                          "(batch, seq + T2 - 1, 8) float32"),
                  "a read symbolic dim describes by name: %s", buf);
      /* Writing the read graph gives the same bytes. */
      void* again = NULL;
      size_t again_size = 0;
      KILN_EXPECT_OK(kiln_artifact_write(h, meta, 1, &again, &again_size));
      KILN_EXPECT(again && again_size == size && !memcmp(again, bytes, size),
                  "a read symbolic graph writes the same bytes");
      free(again);
      kiln_model_t* m = NULL;
      KILN_EXPECT_OK(kiln_model_create(h, NULL, NULL, &m));
      if (m) {
        KILN_EXPECT(kiln_model_is_symbolic(m), "the loaded model is symbolic");
        run_sym_binding(m, 2, 5, 3);
        run_sym_binding(m, 3, 40, 1);
        /* Out of range: the binding names the input, dimension and symbol. */
        float dummy[64] = {0};
        int64_t sx[3] = {9, 5, 16}, sx2[3] = {9, 3, 8}, sy[3] = {9, 8, 8}, sz[3] = {9, 7, 8};
        kiln_tensor_t in[2] = {{dummy, KILN_F32, 3, sx}, {dummy, KILN_F32, 3, sx2}};
        kiln_tensor_t outs[2] = {{dummy, KILN_F32, 3, sy}, {dummy, KILN_F32, 3, sz}};
        kiln_status_t s = kiln_model_run(m, in, 2, outs, 2);
        KILN_EXPECT(s && strstr(kiln_status_message(s), "input 0 ('x'): dimension 0 (batch) is 9, "
                                                         "expected 1..8"),
                    "out of range: %s", kiln_status_message(s));
        kiln_status_free(s);
        kiln_model_release(m);
      }
    }
  }
  /* A stored plan is for one binding: the writer refuses one for a
   * symbolic graph, the reader a file that has both. */
  void* out = NULL;
  size_t n = 0;
  const kiln_artifact_section_t plan[] = {{"plan", kPlan, sizeof kPlan}};
  kiln_status_t s = kiln_artifact_write(c, plan, 1, &out, &n);
  KILN_EXPECT(kiln_status_code(s) == KILN_INVALID_ARGUMENT && strstr(kiln_status_message(s), "plan"),
              "writer refuses a plan for a symbolic graph: %s", kiln_status_message(s));
  kiln_status_free(s);
  const kiln_artifact_section_t syms[] = {{"syms", kPlan, sizeof kPlan}};
  KILN_EXPECT_ERROR(kiln_artifact_write(c, syms, 1, &out, &n), KILN_INVALID_ARGUMENT);
  if (bytes) {
    /* Rename the caller section "meta.json" to "plan". */
    uint8_t* b = exact_copy(bytes, size);
    uint8_t* entry = b + KILN_FORMAT_HEADER_SIZE + 2 * KILN_FORMAT_ENTRY_SIZE;
    KILN_EXPECT(!strcmp((const char*)entry, "meta.json"), "meta is the third section");
    memset(entry, 0, KILN_FORMAT_NAME_SIZE);
    memcpy(entry, "plan", 4);
    expect_corrupt(b, size, "a plan in a symbolic file", "'plan' section in a file with symbolic");
    free(b);
  }
  free(bytes);
  kiln_graph_release(c);
}

/* Guards travel in a "guards" section after "syms" (2.10): read back equal,
 * checked by the loaded model; a hostile section is refused by name. */
static void test_sym_guards_round_trip(void) {
  kiln_graph_t* c = compiled_sym_graph();
  if (!c) return;
  /* batch != 7; seq < 64*T2 (the table is the compiled graph's). */
  int64_t B = c->syms->vars[0].dim, T = c->syms->vars[1].dim, T2 = c->syms->vars[2].dim, T64;
  KILN_EXPECT_OK(kiln_dim_mul(c->syms, T2, 64, &T64));
  KILN_EXPECT_OK(kiln_sym_guard_add(c->syms, KILN_SYM_NE, B, 7));
  KILN_EXPECT_OK(kiln_sym_guard_add(c->syms, KILN_SYM_LT, T, T64));
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(c, NULL, 0, &bytes, &size));
  if (!bytes) {
    kiln_graph_release(c);
    return;
  }
  KILN_EXPECT(kiln_format_get_u16((uint8_t*)bytes + KILN_FORMAT_HDR_MINOR) == KILN_FORMAT_MINOR_GUARDS,
              "a file with guards is version 2.10");
  const uint8_t* entry = (const uint8_t*)bytes + KILN_FORMAT_HEADER_SIZE + 2 * KILN_FORMAT_ENTRY_SIZE;
  KILN_EXPECT(!strcmp((const char*)entry, "guards"), "guards comes right after syms");
  size_t off = (size_t)kiln_format_get_u64(entry + KILN_FORMAT_ENTRY_OFFSET);
  kiln_graph_t* h = NULL;
  KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h));
  if (h) {
    int same = h->syms->n_guards == 2;
    for (int32_t i = 0; same && i < 2; ++i)
      same = h->syms->guards[i].rel == c->syms->guards[i].rel &&
             h->syms->guards[i].a == c->syms->guards[i].a &&
             h->syms->guards[i].b == c->syms->guards[i].b;
    KILN_EXPECT(same, "guards read back equal (%d)", h->syms->n_guards);
    kiln_model_t* m = NULL;
    KILN_EXPECT_OK(kiln_model_create(h, NULL, NULL, &m)); /* takes h */
    if (m) {
      run_sym_binding(m, 2, 5, 3);
      float dummy[7 * 8 * 16] = {0};
      int64_t sx[3] = {7, 5, 16}, sx2[3] = {7, 3, 8}, sy[3] = {7, 8, 8}, sz[3] = {7, 7, 8};
      kiln_tensor_t in[2] = {{dummy, KILN_F32, 3, sx}, {dummy, KILN_F32, 3, sx2}};
      kiln_tensor_t outs[2] = {{dummy, KILN_F32, 3, sy}, {dummy, KILN_F32, 3, sz}};
      kiln_status_t s = kiln_model_run(m, in, 2, outs, 2);
      KILN_EXPECT(s && strstr(kiln_status_message(s), "batch != 7 (here 7 != 7"),
                  "the loaded model checks the guards: %s", s ? kiln_status_message(s) : "ok");
      kiln_status_free(s);
      kiln_model_release(m);
    }
  }
  uint8_t* b = exact_copy(bytes, size);
  uint8_t* rec = b + off + KILN_FORMAT_GUARDS_HEADER_SIZE;
  kiln_format_put_u32(rec + KILN_FORMAT_G_REL, 99);
  expect_corrupt(b, size, "an unknown guard relation", "relation 99 is unknown");
  memcpy(b, bytes, size);
  kiln_format_put_u32(rec + KILN_FORMAT_G_RESERVED, 1);
  expect_corrupt(b, size, "guard reserved bytes", "reserved bytes are not zero");
  memcpy(b, bytes, size);
  kiln_format_put_u64(rec + KILN_FORMAT_G_A, (uint64_t)kiln_dim_of_sym(1 << 19));
  expect_corrupt(b, size, "a guard naming no expression", "neither a number nor one of");
  memcpy(b, bytes, size);
  kiln_format_put_u32(b + off + KILN_FORMAT_GDH_N_GUARDS, 3);
  expect_corrupt(b, size, "a guard count past the section", "do not fill");
  memcpy(b, bytes, size);
  kiln_format_put_u32(rec + KILN_FORMAT_G_REL, KILN_SYM_NE);
  kiln_format_put_u64(rec + KILN_FORMAT_G_B, kiln_format_get_u64(rec + KILN_FORMAT_G_A));
  expect_corrupt(b, size, "a guard that never holds", "can never hold");
  free(b);
  free(bytes);
  kiln_graph_release(c);
}

/* A guard's expression invalid at the first probes (1 % (10 - a), a's
 * probes 64 and 72), which the guard a <= 8 makes valid once the reader
 * fits the probes, naming an input's size: the file reads back. With the
 * guard turned into one the first probes keep (a != 8), the size stays
 * invalid there and the value is refused, never derived at a division by
 * a negative size. */
#define SSTEP(call) \
  if (!s) s = (call)
static void test_sym_invalid_at_probes(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  kiln_sym_table_t* t = NULL;
  int64_t a = 0, h = 0, m = 0;
  int32_t x = -1, y = -1;
  kiln_status_t s = kiln_graph_syms(g, &t);
  SSTEP(kiln_sym_var(t, "a", 2, (int64_t)1 << 40, &a));
  SSTEP(kiln_dim_sub(t, 10, a, &h));
  SSTEP(kiln_dim_mod(t, 1, h, &m));
  SSTEP(kiln_sym_guard_add(t, KILN_SYM_LE, a, 8));
  if (!s) kiln_sym_probes_fit(t);
  SSTEP(kiln_graph_add_input(g, "x", KILN_F32, 2, (int64_t[]){a, m}, &x));
  SSTEP(kiln_graph_add_node(g, KILN_OP_RELU, &x, 1, NULL, 0, NULL, 0, "relu", &y));
  SSTEP(kiln_graph_set_outputs(g, &y, 1));
  KILN_EXPECT_OK(s);
  void* bytes = NULL;
  size_t size = 0;
  if (!s) KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
  if (bytes) {
    kiln_graph_t* h2 = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h2));
    kiln_graph_release(h2);
    size_t guards = section_offset(bytes, size, "guards");
    KILN_EXPECT(guards, "the file has its guard");
    uint8_t* b = exact_copy(bytes, size);
    if (b && guards) {
      kiln_format_put_u32(b + guards + KILN_FORMAT_GUARDS_HEADER_SIZE + KILN_FORMAT_G_REL, KILN_SYM_NE);
      expect_corrupt(b, size, "a size invalid at the probes", "invalid at the probe sizes");
    }
    free(b);
  }
  free(bytes);
  kiln_graph_release(g);
}
#undef SSTEP

/* A graph without symbols writes exactly the 2.6 layout: no syms section,
 * minor version 6 (so its bytes are those of the writer before 2.7). */
static void test_sym_concrete_unchanged(const uint8_t* bytes, size_t size) {
  KILN_EXPECT(kiln_format_get_u16(bytes + KILN_FORMAT_HDR_MINOR) == KILN_FORMAT_MINOR_CONCRETE,
              "a concrete graph's file says minor 6");
  KILN_EXPECT(section_offset(bytes, size, "syms") == 0, "no syms section without symbols");
  kiln_graph_t* g = make_sym_graph(0, 2, 5, 3);
  if (!g) return;
  /* A table the graph does not use is not written either. */
  kiln_sym_table_t* t;
  int64_t unused;
  KILN_EXPECT_OK(kiln_graph_syms(g, &t));
  KILN_EXPECT_OK(kiln_sym_var(t, "unused", 1, 9, &unused));
  void* out = NULL;
  size_t n = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &out, &n));
  if (out) {
    KILN_EXPECT(section_offset(out, n, "syms") == 0 &&
                    kiln_format_get_u16((uint8_t*)out + KILN_FORMAT_HDR_MINOR) == 6,
                "an unused table writes nothing");
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(out, n, kiln_allocator_system(), &h));
    KILN_EXPECT(h && !h->syms, "and reads back without one");
    kiln_graph_release(h);
  }
  free(out);
  kiln_graph_release(g);
}

/* Where the syms section's records are. */
static uint8_t* sym_expr_record(uint8_t* b, size_t syms, uint32_t e) {
  uint32_t nv = kiln_format_get_u32(b + syms + KILN_FORMAT_SH_N_VARS);
  return b + syms + KILN_FORMAT_SYMS_HEADER_SIZE + (size_t)nv * KILN_FORMAT_SYM_VAR_SIZE +
         (size_t)e * KILN_FORMAT_SYM_EXPR_SIZE;
}
static uint8_t* sym_var_record(uint8_t* b, size_t syms, uint32_t i) {
  return b + syms + KILN_FORMAT_SYMS_HEADER_SIZE + (size_t)i * KILN_FORMAT_SYM_VAR_SIZE;
}
static void put_i64(uint8_t* p, int64_t v) { kiln_format_put_u64(p, (uint64_t)v); }

static void test_sym_corrupt(const kiln_graph_t* g, const uint8_t* bytes, size_t size) {
  uint8_t* b = exact_copy(bytes, size);
  if (!b) return;
  size_t graph = section_offset(bytes, size, "graph");
  size_t syms = section_offset(bytes, size, "syms");
  KILN_EXPECT(graph && syms, "a symbolic file has graph and syms");
  if (!syms) {
    free(b);
    return;
  }
  size_t syms_entry = KILN_FORMAT_HEADER_SIZE + KILN_FORMAT_ENTRY_SIZE;
  uint64_t syms_size = kiln_format_get_u64(bytes + syms_entry + KILN_FORMAT_ENTRY_SIZE_FIELD);
  const kiln_sym_table_t* t = g->syms;
  /* Expressions 0..2 are the symbols batch, seq, T2; 3 is seq//2, 4 seq mod 3. */
#define RESET() memcpy(b, bytes, size)
  RESET();
  kiln_format_put_u64(b + syms_entry + KILN_FORMAT_ENTRY_SIZE_FIELD, syms_size - 1);
  expect_corrupt(b, size, "syms truncated by one byte", "do not add up");
  RESET();
  kiln_format_put_u64(b + syms_entry + KILN_FORMAT_ENTRY_SIZE_FIELD, 8);
  expect_corrupt(b, size, "syms shorter than its header", "header");
  RESET();
  kiln_format_put_u32(b + syms + KILN_FORMAT_SH_N_EXPRS, 0xffffffffu);
  expect_corrupt(b, size, "huge expression count", "do not add up");
  RESET();
  kiln_format_put_u32(b + syms + KILN_FORMAT_SH_N_VARS, 0x40000000u);
  expect_corrupt(b, size, "huge symbol count", "do not add up");
  RESET();
  kiln_format_put_u64(b + syms + KILN_FORMAT_SH_STRINGS_SIZE, UINT64_MAX);
  expect_corrupt(b, size, "huge syms string table", "do not add up");
  RESET();
  kiln_format_put_u32(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_KIND, 7);
  expect_corrupt(b, size, "bad expression kind", "expression 3: kind 7 is unknown");
  RESET();
  kiln_format_put_u32(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_KIND, 0xffffffffu);
  expect_corrupt(b, size, "huge expression kind", "is unknown");
  RESET();
  sym_expr_record(b, syms, 3)[KILN_FORMAT_SE_RESERVED] = 1;
  expect_corrupt(b, size, "expression reserved bytes", "reserved");
  RESET();
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_A, kiln_dim_of_sym(3));
  expect_corrupt(b, size, "expression naming itself", "not an earlier one");
  RESET();
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_A, kiln_dim_of_sym(9));
  expect_corrupt(b, size, "forward reference", "expression 3 (floordiv): operand a names expression 9, not an earlier one");
  RESET();
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_A, KILN_SYM_BASE - 5);
  expect_corrupt(b, size, "operand below the symbolic range", "neither a number");
  RESET();
  /* seq mod 3 stored as seq // 2: the table makes that as expression 3. */
  memcpy(sym_expr_record(b, syms, 4), sym_expr_record(b, syms, 3), KILN_FORMAT_SYM_EXPR_SIZE);
  expect_corrupt(b, size, "duplicate expression", "expression 4, floordiv(e1, 2), duplicates expression 3");
  RESET();
  /* seq // 1 is seq: not canonical. */
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_B, 1);
  expect_corrupt(b, size, "non-canonical expression", "expression 3, floordiv(e1, 1), is not in the canonical form kiln builds (that is expression 1, symbol 1)");
  RESET();
  /* max(T2, seq): kiln orders max's operands, so it would build max(seq, T2). */
  put_i64(sym_expr_record(b, syms, 5) + KILN_FORMAT_SE_A, kiln_dim_of_sym(2));
  put_i64(sym_expr_record(b, syms, 5) + KILN_FORMAT_SE_B, kiln_dim_of_sym(1));
  expect_corrupt(b, size, "max with swapped operands", "is not in the canonical form");
  RESET();
  /* (2*x) stored as a product of two numbers: folds to a number. */
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_A, 6);
  expect_corrupt(b, size, "an expression of numbers", "is the number 3");
  RESET();
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_B, 0);
  expect_corrupt(b, size, "division by zero", "divide");
  RESET();
  /* A symbol expression out of order, or a symbol expression too many. */
  put_i64(sym_expr_record(b, syms, 1) + KILN_FORMAT_SE_A, 2);
  expect_corrupt(b, size, "symbols out of order", "expected symbol 1 of 3");
  RESET();
  kiln_format_put_u32(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_KIND, KILN_SYM_VAR);
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_A, 3);
  put_i64(sym_expr_record(b, syms, 3) + KILN_FORMAT_SE_B, 0);
  expect_corrupt(b, size, "a fourth symbol expression", "expected symbol 3 of 3");
  RESET();
  kiln_format_put_u32(sym_expr_record(b, syms, 2) + KILN_FORMAT_SE_KIND, KILN_SYM_ADD);
  put_i64(sym_expr_record(b, syms, 2) + KILN_FORMAT_SE_A, kiln_dim_of_sym(1));
  put_i64(sym_expr_record(b, syms, 2) + KILN_FORMAT_SE_B, 1);
  expect_corrupt(b, size, "a symbol without its expression", "syms section: expression");
  RESET();
  /* Ranges: kiln_sym_var's rules. */
  put_i64(sym_var_record(b, syms, 1) + KILN_FORMAT_SV_LO, 600);
  expect_corrupt(b, size, "lo above hi", "syms section: symbol seq: range [600, 512]");
  RESET();
  put_i64(sym_var_record(b, syms, 1) + KILN_FORMAT_SV_LO, -1);
  expect_corrupt(b, size, "negative lo", "range");
  RESET();
  put_i64(sym_var_record(b, syms, 1) + KILN_FORMAT_SV_HI, ((int64_t)1 << 40) + 1);
  expect_corrupt(b, size, "hi above 2^40", "range");
  RESET();
  put_i64(sym_var_record(b, syms, 1) + KILN_FORMAT_SV_HI, 0);
  expect_corrupt(b, size, "hi 0", "range");
  RESET();
  kiln_format_put_u32(sym_var_record(b, syms, 0) + KILN_FORMAT_SV_NAME, 0xffffffffu);
  expect_corrupt(b, size, "symbol without a name", "name");
  RESET();
  sym_var_record(b, syms, 0)[KILN_FORMAT_SV_RESERVED] = 1;
  expect_corrupt(b, size, "symbol reserved bytes", "reserved");
  RESET();
  /* The string table's last NUL gone. */
  b[syms + syms_size - 1] = 'x';
  expect_corrupt(b, size, "name without its NUL", "NUL-terminated");
  /* Value dims and params naming expressions the table does not have. */
  RESET();
  put_i64(value_record(b, graph, 0) + KILN_FORMAT_V_SHAPE, kiln_dim_of_sym(t->n_exprs));
  expect_corrupt(b, size, "dim naming a missing expression",
                 "value 0: dimension 0 names symbolic size");
  RESET();
  put_i64(value_record(b, graph, 0) + KILN_FORMAT_V_SHAPE, kiln_dim_of_sym(KILN_SYM_MAX_EXPRS - 1));
  expect_corrupt(b, size, "dim naming the last id", "does not have");
  RESET();
  put_i64(value_record(b, graph, 2) + KILN_FORMAT_V_SHAPE, kiln_dim_of_sym(1));
  expect_corrupt(b, size, "a constant with a symbolic dim", "constant with a symbolic dimension");
  RESET();
  put_i64(node_record(b, graph, 0) + KILN_FORMAT_N_PARAMS + 8 * 1, kiln_dim_of_sym(t->n_exprs + 3));
  expect_corrupt(b, size, "param naming a missing expression", "param 1 names symbolic size");
  RESET();
  /* A symbolic dim that names another expression than inference gives. */
  put_i64(value_record(b, graph, 0) + KILN_FORMAT_V_SHAPE + 8, kiln_dim_of_sym(2));
  expect_corrupt(b, size, "dim naming another expression", NULL);
  RESET();
  /* Without its syms section (renamed), or in a file of minor version 6
   * (where "syms" was a caller section), the dims name nothing. */
  memcpy(b + syms_entry, "symz", 4);
  expect_corrupt(b, size, "syms section renamed", "no syms section");
  RESET();
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MINOR, 6);
  expect_corrupt(b, size, "symbolic file stamped 2.6", "no syms section");
  RESET();
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MINOR, 12);
  {
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(b, size, kiln_allocator_system(), &h));
    char diff[160];
    const char* d = h ? syms_diff(t, h->syms, diff, sizeof diff) : "no graph";
    KILN_EXPECT(!d, "a newer minor version reads its syms: %s", d);
    kiln_graph_release(h);
  }
#undef RESET
  free(b);
}

/* A table nesting deeper than the format allows: the writer refuses it;
 * the reader refuses a file patched to nest one level too deep. */
static void test_sym_depth(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return;
  kiln_sym_table_t* t;
  int64_t S, d, m;
  int32_t x = -1;
  KILN_EXPECT_OK(kiln_graph_syms(g, &t));
  KILN_EXPECT_OK(kiln_sym_var(t, "S", 1, 100, &S));
  d = S;
  /* Divided by S each time: nested divisions by numbers collapse into one. */
  for (int i = 1; i < KILN_FORMAT_SYM_MAX_DEPTH; ++i) KILN_EXPECT_OK(kiln_dim_floordiv(t, d, S, &d));
  KILN_EXPECT_OK(kiln_dim_max(t, S, 5, &m)); /* the last expression: max(S, 5) */
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 1, (int64_t[]){S}, &x));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &x, 1));
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
  if (bytes) {
    size_t syms = section_offset(bytes, size, "syms");
    uint8_t* b = exact_copy(bytes, size);
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(b, size, kiln_allocator_system(), &h));
    if (h) {
      char buf[96];
      kiln_sym_describe(h->syms, d, buf, sizeof buf);
      KILN_EXPECT(strlen(buf) < sizeof buf, "a deep expression describes within its buffer");
    }
    kiln_graph_release(h);
    uint8_t* r = sym_expr_record(b, syms, (uint32_t)kiln_dim_sym_id(m));
    KILN_EXPECT(kiln_format_get_u32(r) == KILN_SYM_MAX, "max is last");
    put_i64(r + KILN_FORMAT_SE_A, d); /* max(S//2//2..., 5): one level deeper */
    expect_corrupt(b, size, "expressions nested too deep", "nests more than 256 deep");
    free(b);
  }
  free(bytes);
  KILN_EXPECT_OK(kiln_dim_floordiv(t, d, 2, &d));
  int32_t y = -1;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "y", KILN_F32, 1, (int64_t[]){d}, &y));
  kiln_status_t s = kiln_artifact_write(g, NULL, 0, &bytes, &size);
  KILN_EXPECT(kiln_status_code(s) == KILN_INVALID_ARGUMENT && strstr(kiln_status_message(s), "deep"),
              "the writer refuses a table nesting too deep: %s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_graph_release(g);
}

void kiln_test_suite_artifact_sym(void) {
  test_sym_round_trip();
  test_sym_guards_round_trip();
  test_sym_invalid_at_probes();
  {
    /* The concrete test graph's file (as kiln_test_suite_artifact writes it). */
    kiln_graph_t* g = make_graph();
    void* bytes = NULL;
    size_t size = 0;
    if (g) KILN_EXPECT_OK(kiln_artifact_write(g, NULL, 0, &bytes, &size));
    if (bytes) test_sym_concrete_unchanged(bytes, size);
    free(bytes);
    kiln_graph_release(g);
  }
  kiln_graph_t* g = make_sym_graph(1, 0, 0, 0);
  if (!g) return;
  void* bytes = NULL;
  size_t size = 0;
  const kiln_artifact_section_t extra[] = {{"meta.json", kMeta, strlen(kMeta)}};
  KILN_EXPECT_OK(kiln_artifact_write(g, extra, 1, &bytes, &size));
  if (bytes) {
    kiln_graph_t* h = NULL;
    KILN_EXPECT_OK(kiln_artifact_read(bytes, size, kiln_allocator_system(), &h));
    char diff[160];
    const char* d = h ? graph_diff(g, h, diff, sizeof diff) : "no graph";
    KILN_EXPECT(!d, "uncompiled symbolic round trip: %s", d);
    d = h ? syms_diff(g->syms, h->syms, diff, sizeof diff) : "no graph";
    KILN_EXPECT(!d, "uncompiled symbol table: %s", d);
    kiln_graph_release(h);
    test_sym_corrupt(g, bytes, size);
    /* The hostile-file suite over the symbolic file too. */
    test_truncation(bytes, size);
    test_flips(bytes, size);
    test_random_damage(bytes, size);
  }
  free(bytes);
  kiln_graph_release(g);
  test_sym_depth();
}
