/* The memory plan stored in an artifact (runtime/kiln_plan_io.c): a written
 * plan reads back equal to the planner's (it is deterministic), a model
 * built from it computes what a model with a fresh plan computes, and a
 * hostile plan section (every truncation, targeted corruptions of each
 * check, random byte flips) is refused with a message or, when accepted,
 * is a plan that passed every check (never a crash). */
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_artifact.h"
#include "ir/kiln_graph.h"
#include "runtime/kiln_model.h"
#include "runtime/kiln_plan_io.h"
#include "kiln_test.h"

/* x (4, 8): a = exp(x), b = a * x, c = reshape(b) (a view), d = b + a,
 * outputs c (a view of an intermediate) and d, and x again (an input:
 * copied). Live ranges overlap, so the plan has real constraints. */
static kiln_graph_t* kiln_test_plan_graph(void) {
  kiln_graph_t* g = NULL;
  if (kiln_graph_create(kiln_allocator_system(), &g)) return NULL;
  int64_t sx[2] = {4, 8};
  int32_t x, a, b, c, d, e;
  kiln_status_t s = kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &x);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_EXP, &x, 1, NULL, 0, NULL, 0, NULL, &a);
  int32_t ab[2] = {a, x};
  if (!s) s = kiln_graph_add_node(g, KILN_OP_MUL, ab, 2, NULL, 0, NULL, 0, NULL, &b);
  int64_t rs[3] = {2, 8, 4};
  if (!s) s = kiln_graph_add_node(g, KILN_OP_RESHAPE, &b, 1, rs, 3, NULL, 0, NULL, &c);
  int32_t ba[2] = {b, a};
  if (!s) s = kiln_graph_add_node(g, KILN_OP_ADD, ba, 2, NULL, 0, NULL, 0, NULL, &d);
  if (!s) s = kiln_graph_add_node(g, KILN_OP_TANH, &d, 1, NULL, 0, NULL, 0, NULL, &e);
  int32_t outs[3] = {c, e, x};
  if (!s) s = kiln_graph_set_outputs(g, outs, 3);
  if (s) {
    kiln_status_free(s);
    kiln_graph_release(g);
    return NULL;
  }
  return g;
}

static void kiln_test_plan_run(kiln_model_t* m, float* c, float* e, float* xo) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = (float)(i - 16) / 8.0f;
  int64_t sx[2] = {4, 8}, sc[2] = {8, 4};
  kiln_tensor_t in = {x, KILN_F32, 2, sx};
  kiln_tensor_t out[3] = {{c, KILN_F32, 2, sc}, {e, KILN_F32, 2, sx}, {xo, KILN_F32, 2, sx}};
  KILN_EXPECT_OK(kiln_model_run(m, &in, 1, out, 3));
}

void kiln_test_suite_artifact_plan(void) {
  kiln_graph_t* g = kiln_test_plan_graph();
  KILN_EXPECT(g != NULL, "test graph");
  if (!g) return;
  kiln_plan_t fresh;
  KILN_EXPECT_OK(kiln_plan_build(g, &fresh));
  void* bytes = NULL;
  size_t size = 0;
  KILN_EXPECT_OK(kiln_plan_serialize(g, &fresh, &bytes, &size));
  if (!bytes) {
    kiln_plan_deinitialize(&fresh);
    kiln_graph_release(g);
    return;
  }
  kiln_plan_t loaded;
  KILN_EXPECT_OK(kiln_plan_load(g, bytes, size, &loaded));
  KILN_EXPECT(kiln_plan_equal(&fresh, &loaded, g->n_outputs), "stored plan equals the planner's");
  kiln_plan_deinitialize(&loaded);

  /* Through an artifact: the section survives and a model built from it
   * computes the same as one with a fresh plan. */
  kiln_artifact_section_t sec = {KILN_PLAN_SECTION, bytes, size};
  void* art = NULL;
  size_t art_size = 0;
  KILN_EXPECT_OK(kiln_artifact_write(g, &sec, 1, &art, &art_size));
  const void* found = NULL;
  size_t found_size = 0;
  if (art) KILN_EXPECT_OK(kiln_artifact_find_section(art, art_size, KILN_PLAN_SECTION, &found, &found_size));
  KILN_EXPECT(found && found_size == size && !memcmp(found, bytes, size), "plan section round trip");
  free(art);
  kiln_graph_t* g2 = kiln_test_plan_graph();
  kiln_model_t *m1 = NULL, *m2 = NULL;
  KILN_EXPECT_OK(kiln_model_create(g, NULL, NULL, &m1));
  g = NULL; /* the model owns it */
  if (g2) KILN_EXPECT_OK(kiln_model_create_with_plan(g2, NULL, NULL, bytes, size, &m2));
  if (m1 && m2) {
    float c1[32], e1[32], x1[32], c2[32], e2[32], x2[32];
    kiln_test_plan_run(m1, c1, e1, x1);
    kiln_test_plan_run(m2, c2, e2, x2);
    KILN_EXPECT(!memcmp(c1, c2, sizeof c1) && !memcmp(e1, e2, sizeof e1) &&
                    !memcmp(x1, x2, sizeof x1),
                "a model on the stored plan computes the same");
  }
  const kiln_graph_t* gm = m1 ? kiln_model_graph(m1) : NULL;

  if (gm) {
    unsigned char* h = malloc(size);
    kiln_plan_t p;
    /* Every truncation. */
    int refused = 0;
    for (size_t n = 0; n < size; ++n) {
      kiln_status_t s = kiln_plan_load(gm, bytes, n, &p);
      refused += s != NULL;
      if (!s) kiln_plan_deinitialize(&p);
      kiln_status_free(s);
    }
    KILN_EXPECT(refused == (int)size, "every truncation refused (%d of %zu)", refused, size);
    /* Targeted corruptions: (byte offset, value as little-endian bytes). */
    const size_t rec = 32; /* first value record */
    struct {
      const char* what;
      size_t at;
      int width;
      uint64_t value;
    } bad[] = {
        {"magic", 0, 1, 'X'},
        {"version", 8, 4, 2},
        {"value count", 12, 4, 99},
        {"reserved", 20, 4, 1},
        {"arena beyond every intermediate", 24, 8, 1ull << 40},
        {"arena too small", 24, 8, 64},
        {"root out of range", rec + 1 * 24 + 16, 4, 1000},
        {"negative root", rec + 1 * 24 + 16, 4, 0xffffffffu},
        {"false view root", rec + 2 * 24 + 16, 4, 1},
        {"view offset", rec + 3 * 24 + 8, 8, 64},
        {"misaligned offset", rec + 1 * 24, 8, 8},
        {"offset past the arena", rec + 1 * 24, 8, 1ull << 20},
        {"bound output out of range", rec + 1 * 24 + 20, 4, 7},
        {"input in the arena", rec + 0 * 24, 8, 0},
        {"output copy flag", rec + 6 * 24 + 0, 4, 5},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
      memcpy(h, bytes, size);
      for (int k = 0; k < bad[i].width; ++k) h[bad[i].at + (size_t)k] = (unsigned char)(bad[i].value >> (8 * k));
      kiln_status_t s = kiln_plan_load(gm, h, size, &p);
      KILN_EXPECT(kiln_status_code(s) == KILN_CORRUPT_ARTIFACT, "%s: refused (got %s)", bad[i].what,
                  s ? kiln_status_message(s) : "accepted");
      if (!s) kiln_plan_deinitialize(&p);
      kiln_status_free(s);
    }
    /* Two values live together at one offset: a (value 1) and d (value 4)
     * meet at the ADD that reads a and makes d. */
    {
      const kiln_plan_t* fp = kiln_model_plan(m1);
      KILN_EXPECT(fp->offset[1] >= 0 && fp->offset[4] >= 0 && fp->offset[1] != fp->offset[4],
                  "a and d in the arena, apart");
      memcpy(h, bytes, size);
      int64_t off = fp->offset[1];
      for (int k = 0; k < 8; ++k) h[rec + 4 * 24 + (size_t)k] = (unsigned char)((uint64_t)off >> (8 * k));
      kiln_status_t s = kiln_plan_load(gm, h, size, &p);
      KILN_EXPECT(kiln_status_code(s) == KILN_CORRUPT_ARTIFACT,
                  "overlapping live values refused (got %s)", s ? kiln_status_message(s) : "accepted");
      if (!s) kiln_plan_deinitialize(&p);
      kiln_status_free(s);
    }
    /* Random flips: refused, or accepted only as a plan within bounds. */
    uint64_t seed = 0x243f6a8885a308d3ull;
    int accepted_ok = 1;
    for (int t = 0; t < 3000; ++t) {
      memcpy(h, bytes, size);
      for (int f = 0; f < 1 + t % 4; ++f) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        h[seed % size] ^= (unsigned char)(1u << ((seed >> 32) % 8));
      }
      kiln_status_t s = kiln_plan_load(gm, h, size, &p);
      if (!s) {
        for (int32_t v = 0; v < p.n_values; ++v)
          if (p.offset[v] >= 0 &&
              (size_t)p.offset[v] + kiln_value_dense_bytes(&gm->values[v]) > p.arena_size)
            accepted_ok = 0;
        kiln_plan_deinitialize(&p);
      }
      kiln_status_free(s);
    }
    KILN_EXPECT(accepted_ok, "every accepted corrupted plan keeps values inside the arena");
    free(h);
  }
  kiln_model_release(m1);
  kiln_model_release(m2);
  kiln_plan_deinitialize(&fresh);
  kiln_graph_release(g);
  free(bytes);
}
