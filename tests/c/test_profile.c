/* The roofline profile's arithmetic (runtime/kiln_cost.h, kiln_profile.h):
 * FLOPs and bytes of nodes of known shapes, and a report made from given
 * times and peaks, so every figure is checked exactly and nothing depends
 * on how fast this machine is. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln_test.h"
#include "runtime/kiln_cost.h"
#include "runtime/kiln_machine.h"
#include "runtime/kiln_profile.h"

enum { PM = 64, PK = 256, PN = 512 };

/* x (M, K) -> linear by a dense constant (K, N) -> softmax over N. */
static kiln_graph_t* test_profile_graph(void) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  static float w[PK * PN];
  int64_t sx[2] = {PM, PK}, sw[2] = {PK, PN};
  int32_t x, wid, y, z;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &x));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &wid));
  int32_t in[2] = {x, wid};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, in, 2, NULL, 0, NULL, 0, "the linear", &y));
  int64_t axis = 1;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SOFTMAX, &y, 1, &axis, 1, NULL, 0, NULL, &z));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &z, 1));
  return g;
}

static void test_profile_costs(void) {
  kiln_graph_t* g = test_profile_graph();
  if (!g) return;
  kiln_node_cost_t c;
  kiln_node_cost(g, &g->nodes[0], &c);
  KILN_EXPECT(c.flops == 2LL * PM * PK * PN, "linear flops %lld", (long long)c.flops);
  KILN_EXPECT(c.bytes == 4LL * (PM * PK + PK * PN + PM * PN), "linear bytes %lld", (long long)c.bytes);
  KILN_EXPECT(c.constant_bytes == 4LL * PK * PN, "linear weight bytes %lld", (long long)c.constant_bytes);
  kiln_node_cost(g, &g->nodes[1], &c);
  KILN_EXPECT(c.flops == 5LL * PM * PN && c.bytes == 8LL * PM * PN, "softmax %lld %lld",
              (long long)c.flops, (long long)c.bytes);

  /* A matmul whose a is stored (K, M) and read transposed; x + x reads x
   * once; a reshape is a view (no arithmetic). */
  int64_t sa[2] = {PK, PM}, sb[2] = {PK, PN}, flat[2] = {1, PM * PN};
  int32_t a, b, mm, sum, view;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "a", KILN_F32, 2, sa, &a));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "b", KILN_F32, 2, sb, &b));
  int32_t ab[2] = {a, b}, aa[2] = {b, b};
  int64_t ta = KILN_MATMUL_TRANSPOSE_A;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, ab, 2, &ta, 1, NULL, 0, NULL, &mm));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, aa, 2, NULL, 0, NULL, 0, NULL, &sum));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_RESHAPE, &mm, 1, flat, 2, NULL, 0, NULL, &view));
  kiln_node_cost(g, &g->nodes[2], &c);
  KILN_EXPECT(c.flops == 2LL * PM * PK * PN, "transposed matmul flops %lld", (long long)c.flops);
  kiln_node_cost(g, &g->nodes[3], &c);
  KILN_EXPECT(c.flops == (long long)PK * PN && c.bytes == 8LL * PK * PN, "x + x: %lld %lld",
              (long long)c.flops, (long long)c.bytes);
  kiln_node_cost(g, &g->nodes[4], &c);
  KILN_EXPECT(c.flops == 0, "a reshape does no arithmetic: %lld", (long long)c.flops);
  kiln_graph_release(g);
}

static void test_profile_report(void) {
  kiln_graph_t* g = test_profile_graph();
  if (!g) return;
  kiln_machine_t m;
  memset(&m, 0, sizeof m);
  m.fma_gflops_1 = 100, m.fma_gflops = 180, m.bandwidth_gbs_1 = 10, m.bandwidth_gbs = 15;
  snprintf(m.isa, sizeof m.isa, "avx2");
  /* Two runs: the linear 3 ms, the softmax 1 ms, in total. */
  uint64_t times[2] = {3000000, 1000000}, waits[2] = {0, 200000};
  kiln_profile_report_t r;
  KILN_EXPECT_OK(kiln_profile_report_make(g, times, waits, 2, 1, 2.5, &m, &r));
  if (!r.rows) {
    kiln_graph_release(g);
    return;
  }
  const double lf = 2.0 * PM * PK * PN, lb = 4.0 * (PM * PK + PK * PN + PM * PN);
  const double sf = 5.0 * PM * PN, sb = 8.0 * PM * PN;
  KILN_EXPECT(r.n_rows == 2 && r.rows[0].node == 0 && r.rows[1].node == 1, "rows slowest first");
  KILN_EXPECT(fabs(r.rows[0].ms - 1.5) < 1e-12 && fabs(r.rows[0].share - 0.75) < 1e-12,
              "linear %g ms, share %g", r.rows[0].ms, r.rows[0].share);
  KILN_EXPECT(fabs(r.rows[0].gflops - lf / 1.5e-3 / 1e9) < 1e-9 &&
                  fabs(r.rows[0].gbs - lb / 1.5e-3 / 1e9) < 1e-9,
              "linear %g GFLOP/s %g GB/s", r.rows[0].gflops, r.rows[0].gbs);
  /* One thread: the one-thread roofs, ridge 10 FLOP/byte. The linear does
   * 23 FLOP/byte (compute-bound), the softmax 0.625 (memory-bound). */
  KILN_EXPECT(r.peak_gflops == 100 && r.bandwidth_gbs == 10 && fabs(r.ridge - 10) < 1e-12, "roofs");
  KILN_EXPECT(r.rows[0].compute_bound && fabs(r.rows[0].peak_fraction - r.rows[0].gflops / 100) < 1e-12,
              "linear bound %d fraction %g", r.rows[0].compute_bound, r.rows[0].peak_fraction);
  KILN_EXPECT(!r.rows[1].compute_bound && fabs(r.rows[1].intensity - sf / sb) < 1e-12 &&
                  fabs(r.rows[1].peak_fraction - sb / 0.5e-3 / 1e9 / 10) < 1e-12,
              "softmax bound %d fraction %g", r.rows[1].compute_bound, r.rows[1].peak_fraction);
  KILN_EXPECT(fabs(r.rows[1].wait_ms - 0.1) < 1e-12 && fabs(r.wait_ms - 0.1) < 1e-12, "waits");
  KILN_EXPECT(r.flops == (int64_t)(lf + sf) && r.bytes == (int64_t)(lb + sb) &&
                  fabs(r.ms - 2.0) < 1e-12 && fabs(r.gflops - (lf + sf) / 2e-3 / 1e9) < 1e-9,
              "totals %lld %lld %g", (long long)r.flops, (long long)r.bytes, r.ms);
  /* All threads' roofs for a multi-thread run. */
  kiln_profile_report_t r2;
  KILN_EXPECT_OK(kiln_profile_report_make(g, times, NULL, 2, 2, 2.5, &m, &r2));
  KILN_EXPECT(r2.peak_gflops == 180 && r2.bandwidth_gbs == 15 && r2.wait_ms == 0, "2-thread roofs");
  kiln_profile_report_deinitialize(&r2);

  /* The table: the linear's line shows 16.777 MFLOP, the origin, the bound. */
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (f) {
    kiln_profile_report_print(&r, g, 1, f);
    fclose(f);
  }
  KILN_EXPECT(text && strstr(text, "linear") && strstr(text, "16.777") && strstr(text, "the linear") &&
                  strstr(text, "compute") && strstr(text, "1 more nodes") && strstr(text, "total"),
              "table:\n%s", text ? text : "");
  free(text);
  kiln_profile_report_deinitialize(&r);
  kiln_graph_release(g);
}

/* A decode step: a token's embedding row gathered from a (V, K) table,
 * then two linears by the same (K, K) weight (read twice, streamed once)
 * and one by a (K, N) weight, on R rows. */
static kiln_graph_t* test_profile_decode_graph(int64_t rows) {
  enum { V = 1000, K = 128, N = 256 };
  static float table[V * K], wkk[K * K], wkn[K * N];
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  int64_t si[1] = {rows}, st[2] = {V, K}, s1[2] = {K, K}, s2[2] = {K, N};
  int32_t ids, t, w1, w2, e, h1, h2, y;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "ids", KILN_I64, 1, si, &ids));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "table", KILN_F32, 2, st, KILN_LAYOUT_DENSE, table,
                                         sizeof table, &t));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w1", KILN_F32, 2, s1, KILN_LAYOUT_DENSE, wkk, sizeof wkk, &w1));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w2", KILN_F32, 2, s2, KILN_LAYOUT_DENSE, wkn, sizeof wkn, &w2));
  int32_t gi[2] = {t, ids};
  int64_t axis = 0;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GATHER, gi, 2, &axis, 1, NULL, 0, NULL, &e));
  int32_t l1[2] = {e, w1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, l1, 2, NULL, 0, NULL, 0, NULL, &h1));
  int32_t l2[2] = {h1, w1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, l2, 2, NULL, 0, NULL, 0, NULL, &h2));
  int32_t l3[2] = {h2, w2};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LINEAR, l3, 2, NULL, 0, NULL, 0, NULL, &y));
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, &y, 1));
  return g;
}

static void test_profile_decode_ceiling(void) {
  kiln_machine_t m;
  memset(&m, 0, sizeof m);
  m.fma_gflops_1 = m.fma_gflops = 100, m.bandwidth_gbs_1 = m.bandwidth_gbs = 10; /* ridge 10 */
  uint64_t times[4] = {1000, 1000, 1000, 1000};
  /* 2 rows: weights 4 (K K + K N) bytes and the 2 rows gathered, K floats each. */
  kiln_graph_t* g = test_profile_decode_graph(2);
  if (!g) return;
  int64_t rows = -1, flops = -1;
  const int64_t wb = 4 * (128 * 128 + 128 * 256) + 2 * 128 * 4;
  KILN_EXPECT(kiln_graph_weight_bytes(g, &rows, &flops) == wb && rows == 2,
              "weight bytes %lld (want %lld), rows %lld",
              (long long)kiln_graph_weight_bytes(g, NULL, NULL), (long long)wb, (long long)rows);
  KILN_EXPECT(flops == 2 * (2LL * 2 * 128 * 128) + 2LL * 2 * 128 * 256, "flops %lld", (long long)flops);
  kiln_profile_report_t r;
  KILN_EXPECT_OK(kiln_profile_report_make(g, times, NULL, 1, 1, 0.01, &m, &r));
  KILN_EXPECT(r.weight_bytes == wb && r.weight_bound && r.weight_rows == 2 &&
                  fabs(r.calls_per_s - 10e9 / (double)wb) < 1e-6 &&
                  fabs(r.tokens_per_s - 2 * r.calls_per_s) < 1e-6,
              "decode: %lld bytes, bound %d, %g calls/s, %g tokens/s", (long long)r.weight_bytes,
              r.weight_bound, r.calls_per_s, r.tokens_per_s);
  kiln_profile_report_deinitialize(&r);
  kiln_graph_release(g);
  /* 64 rows: 32 FLOP per weight byte, above the ridge: no ceiling. */
  g = test_profile_decode_graph(64);
  if (!g) return;
  KILN_EXPECT_OK(kiln_profile_report_make(g, times, NULL, 1, 1, 0.01, &m, &r));
  KILN_EXPECT(!r.weight_bound && r.weight_rows == 64 && r.calls_per_s == 0 && r.tokens_per_s == 0,
              "prefill: bound %d rows %lld", r.weight_bound, (long long)r.weight_rows);
  kiln_profile_report_deinitialize(&r);
  kiln_graph_release(g);
}

/* One sample of each of kiln info's probes (what bench_gemm takes beside
 * each row): a positive rate; bad arguments are errors. */
static void test_profile_machine_sample(void) {
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(2, &pool));
  double v = 0;
  KILN_EXPECT_OK(kiln_machine_sample(NULL, 1, KILN_MACHINE_PROBE_FMA, &v));
  KILN_EXPECT(v > 0, "fma sample %g", v);
  v = 0;
  KILN_EXPECT_OK(kiln_machine_sample(pool, 2, KILN_MACHINE_PROBE_READ, &v));
  KILN_EXPECT(v > 0, "read sample %g", v);
  KILN_EXPECT_ERROR(kiln_machine_sample(NULL, 2, KILN_MACHINE_PROBE_FMA, &v), KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_machine_sample(pool, 0, KILN_MACHINE_PROBE_FMA, &v), KILN_INVALID_ARGUMENT);
  KILN_EXPECT_ERROR(kiln_machine_sample(pool, 1, (kiln_machine_probe_t)7, &v), KILN_INVALID_ARGUMENT);
  /* The profile's roof from the same minutes: the sampled thread count's
   * figure replaced (no machine reads 1e6 GB/s), the other kept. */
  kiln_machine_t m;
  memset(&m, 0, sizeof m);
  m.bandwidth_gbs_1 = m.bandwidth_gbs = 1e6;
  KILN_EXPECT_OK(kiln_profile_bandwidth_now(pool, 2, &m));
  KILN_EXPECT(m.bandwidth_gbs > 0 && m.bandwidth_gbs < 1e6 && m.bandwidth_gbs_1 == 1e6 && m.bandwidth_sampled,
              "sampled %g (1 thread %g, flag %d)", m.bandwidth_gbs, m.bandwidth_gbs_1, m.bandwidth_sampled);
  KILN_EXPECT_OK(kiln_profile_bandwidth_now(pool, 1, &m));
  KILN_EXPECT(m.bandwidth_gbs_1 > 0 && m.bandwidth_gbs_1 < 1e6, "1 thread sampled %g", m.bandwidth_gbs_1);
  KILN_EXPECT_ERROR(kiln_profile_bandwidth_now(pool, 0, &m), KILN_INVALID_ARGUMENT);
  kiln_pool_release(pool);
}

/* Busy peaks (kiln_machine.h): the rule on given figures, then the cache
 * in a process that has measured: a busy record and a consistent one are
 * both reused as written (the once-per-process re-measure of a busy record,
 * and its merge, need a fresh process: tests/python/test_profiler.py runs
 * `kiln info` on one). */
static void test_profile_machine_busy(void) {
  kiln_machine_t m;
  memset(&m, 0, sizeof m);
  m.threads = 2, m.physical_cores = 2;
  m.fma_gflops_1 = 37, m.fma_gflops = 74, m.bandwidth_gbs_1 = 12, m.bandwidth_gbs = 18;
  KILN_EXPECT(!kiln_machine_busy(&m), "an idle machine's figures");
  m.others_load = 0.3; /* make test on the other core */
  KILN_EXPECT(kiln_machine_busy(&m), "others used 30 %% of the cores");
  m.others_load = 0.05, m.fma_gflops = 45; /* all-core clocks, a hybrid CPU's slower cores */
  KILN_EXPECT(!kiln_machine_busy(&m), "all threads' FMA at 0.61x two, the machine quiet");
  m.fma_gflops = 30;
  KILN_EXPECT(kiln_machine_busy(&m), "all threads' FMA at 0.41x two");
  m.fma_gflops = 100; /* the one-thread run taken */
  KILN_EXPECT(kiln_machine_busy(&m), "all threads' FMA at 1.35x two");
  m.fma_gflops = 74, m.bandwidth_gbs = 9;
  KILN_EXPECT(kiln_machine_busy(&m), "all threads read 0.75x one");
  m.bandwidth_gbs = 18, m.threads = 4; /* 4 threads on 2 cores' SMT siblings */
  KILN_EXPECT(!kiln_machine_busy(&m), "SMT siblings share the FMA units");

  char path[] = "/tmp/kiln_test_machine_XXXXXX";
  int fd = mkstemp(path);
  KILN_EXPECT(fd >= 0, "mkstemp");
  if (fd < 0) return;
  close(fd);
  const char* old = getenv("KILN_MACHINE_CACHE");
  char* saved = old ? strdup(old) : NULL;
  setenv("KILN_MACHINE_CACHE", path, 1);
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(2, &pool));
  kiln_machine_t got;
  for (int pass = 0; pool && pass < 2; ++pass) {
    /* pass 0: this machine's record, marked busy; pass 1: consistent
     * figures. The record's CPU, ISA and threads come from a first
     * (measuring) get. */
    if (pass == 0) KILN_EXPECT_OK(kiln_machine_get(pool, 1, &got));
    FILE* f = fopen(path, "w");
    KILN_EXPECT(f != NULL, "cache file");
    if (!f) break;
    fprintf(f, "{\n  \"cpu_model\": \"%s\",\n  \"isa\": \"%s\",\n  \"threads\": %d,\n",
            got.cpu_model, got.isa, got.threads);
    fprintf(f, "  \"measured_at\": 1,\n  \"busy\": %d,\n", pass == 0);
    fprintf(f, "  \"fma_gflops_1\": %s,\n  \"fma_gflops\": %s,\n", pass ? "10.5" : "1.0",
            pass ? "21.0" : "1.0");
    fprintf(f, "  \"bf16_gflops_1\": 0.0,\n  \"bf16_gflops\": 0.0,\n  \"int8_gops_1\": 0.0,\n"
               "  \"int8_gops\": 0.0,\n");
    fprintf(f, "  \"bandwidth_gbs_1\": %s,\n  \"bandwidth_gbs\": %s,\n  \"format\": 1\n}\n",
            pass ? "5.25" : "1000000.0", pass ? "6.5" : "1.0");
    fclose(f);
    KILN_EXPECT_OK(kiln_machine_get(pool, 0, &got));
    if (pass == 0)
      KILN_EXPECT(!got.measured && got.bandwidth_gbs_1 == 1e6 && got.fma_gflops == 1.0 && got.busy,
                  "busy record: measured %d, read %g GB/s one thread, FMA %g, busy %d",
                  got.measured, got.bandwidth_gbs_1, got.fma_gflops, got.busy);
    else
      KILN_EXPECT(!got.measured && got.fma_gflops_1 == 10.5 && got.fma_gflops == 21.0 &&
                      got.bandwidth_gbs_1 == 5.25 && got.bandwidth_gbs == 6.5 && !got.busy,
                  "consistent record: measured %d, FMA %g / %g, busy %d", got.measured,
                  got.fma_gflops_1, got.fma_gflops, got.busy);
  }
  kiln_pool_release(pool);
  if (saved) {
    setenv("KILN_MACHINE_CACHE", saved, 1);
    free(saved);
  } else {
    unsetenv("KILN_MACHINE_CACHE");
  }
  remove(path);
}

void kiln_test_suite_profile(void) {
  test_profile_machine_sample();
  test_profile_machine_busy();
  test_profile_costs();
  test_profile_report();
  test_profile_decode_ceiling();
}
