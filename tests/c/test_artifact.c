/* Tests of the .kiln artifact: a round trip that compares every field of a
 * small graph (inputs interleaved with nodes, dense, scalar, empty and packed
 * constants, broadcast ADD, RESHAPE, MATMUL, SOFTMAX, LAYER_NORM with an
 * absent optional input, LINEAR, names and origins) plus caller sections;
 * then the hostile-input suite: every truncation, every single-byte flip,
 * random multi-byte damage, and targeted corruptions of versions, counts,
 * offsets and alignment. Damaged buffers are copied into heap blocks of their
 * exact length so that ASan/valgrind catch any read past the end. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"
#include "kernels/kiln_activation.h"
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
    const float f[] = {2.0f, -0.25f}; /* unused by mul: must survive anyway */
    STEP(kiln_graph_add_node(g, KILN_OP_MUL, in, 2, NULL, 0, f, 2, "model.scale", &out));
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
