/* Kernel benchmark (the C half of `make bench-kernels`).
 *
 * Reads what this machine can do from kiln info (runtime/kiln_machine.h:
 * the FMA peak of a register-only loop and the streaming read bandwidth of
 * a loop summing a buffer far larger than the caches, per thread count;
 * cached, or measured now). Then times kiln's kernels (fp32 GEMM
 * with B packed, the M=1 decode GEMV, bf16-weight GEMM and GEMV, attention,
 * conv2d at ResNet-18 shapes, layer_norm, softmax, gelu) and, beside them,
 * OpenBLAS's sgemm/sgemv on the same operands. OpenBLAS is loaded with
 * dlopen at run time, so kiln never depends on it; when it is missing its
 * column says so.
 *
 * Each row is timed in rounds: every round takes one ~30 ms sample of each
 * contender (kiln, OpenBLAS, and a sample of the peak loop with the row's
 * thread count and unit), in an order that rotates round to round, and
 * each figure is the median of its samples. On a shared machine whose
 * capacity drifts over seconds, the contenders and the peak a row is
 * divided by then see the same machine.
 *
 * Usage: bench_gemm [--threads N (1 or 2; default 2)] [--quick]
 *                   [--only GROUPS] [--isa LEVEL] [--min N] [--serve]
 *   --quick  fewer rounds (a smoke test of the tool itself).
 *   --only   comma-separated groups to run: gemm, train, gemv, attention,
 *            conv, rowops (default: all).
 *   --isa    run the kernels at this ISA level (kiln.isa's names), the
 *            variants of it in each family's list (run.py --isa-variants).
 *            Set after the machine's peaks are read: KILN_ISA would change
 *            kiln info's cache key, and so remeasure them at every level.
 *            Fails when this CPU (or KILN_ISA) cannot run the level.
 *   --serve  for bench/kernels/run.py, which adds torch as a contender in
 *            the same rounds: for each row, print one JSON line
 *            {"row": {...}} and then answer commands on stdin, one per line,
 *            until "d": "k N" / "b N" run kiln / OpenBLAS N times and print
 *            the seconds taken; "p" runs one peak sample and prints its
 *            GFLOP/s or GB/s. At the end, one line {"end": {...}} with the
 *            machine's peaks (kiln info's) and where they came from.
 *   --min N  on a loaded machine: every figure the minimum over N single
 *            calls instead of a median of ~30 ms samples, in the calling
 *            thread's CPU time with one thread (time sliced away to other
 *            processes does not count), and the FMA peak the minimum over
 *            many ~0.3 ms runs per thread, also in CPU time. Compare the
 *            figures of one run with each other only. */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "runtime/kiln_machine.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/nn/kiln_nn.h"

/* Rounds per row (see the usage above). */
static int bench_rounds = 7;
/* --min N: N > 0 times each figure as a minimum (see the usage above). */
static int bench_min_reps;
/* Set by bench_row_add for the row being timed: CPU time of this thread. */
static int bench_clock_cpu;
/* --serve: run.py drives the rounds (see the usage above). */
static int bench_serve;
/* Where the machine's peaks came from (kiln info's cache or a measurement). */
static char bench_peaks_from[96];

typedef void (*bench_fn)(void*);

/* --min: the fastest of bench_min_reps single calls after a warm-up. */
static double bench_time_min(bench_fn fn, void* ctx) {
  fn(ctx);
  double best = 1e30;
  for (int r = 0; r < bench_min_reps; ++r) {
    double t0 = bench_clock_cpu ? bench_thread_cpu_now() : bench_now();
    fn(ctx);
    double d = (bench_clock_cpu ? bench_thread_cpu_now() : bench_now()) - t0;
    best = d < best ? d : best;
  }
  return best;
}

/* Seconds for `calls` back-to-back calls of fn(ctx). */
static double bench_time_calls(bench_fn fn, void* ctx, int calls) {
  double t0 = bench_now();
  for (int c = 0; c < calls; ++c) fn(ctx);
  return bench_now() - t0;
}

/* Calls in a ~30 ms sample, after a warm-up call (caches, scratch, page
 * faults) and one timed call. */
static int bench_calls_per_sample(bench_fn fn, void* ctx) {
  fn(ctx);
  double one = bench_time_calls(fn, ctx, 1);
  return one > 0.03 ? 1 : (int)(0.03 / (one > 1e-6 ? one : 1e-6)) + 1;
}

/* ---- peaks -------------------------------------------------------------------- */

/* The machine's peaks and the per-round peak samples come from kiln's own
 * probes (runtime/kiln_machine.h: the FMA loop, and four interleaved read
 * streams per thread over a 128 MiB buffer), the figures `kiln info` and
 * kiln.machine() give. --min alone keeps a CPU-time FMA peak of its own
 * (bench_timing.h): its timings are CPU-time minima too. */

/* --min: each thread's fastest of many short runs of the FMA loop, in its
 * own CPU time (GFLOP/s per thread, summed by the caller). */
static void bench_fma_min_task(void* ctx, size_t task, int thread) {
  (void)thread;
  ((double*)ctx)[task] = bench_fma_peak_cpu(400, 100000L);
}

/* One sample of kiln's peak probe: FMA GFLOP/s or read GB/s. */
static double bench_probe_sample(kiln_pool_t* pool, int threads, kiln_machine_probe_t probe) {
  double v = 0;
  kiln_status_t s = kiln_machine_sample(pool, threads, probe, &v);
  if (s) {
    fprintf(stderr, "bench_gemm: peak sample: %s\n", kiln_status_message(s));
    kiln_status_free(s);
    exit(1);
  }
  return v;
}

/* The median of 5 samples: the peak of a thread count kiln info does not
 * cache (it keeps 1 thread and all of the default pool's). */
static double bench_probe_median(kiln_pool_t* pool, int threads, kiln_machine_probe_t probe) {
  double g[5];
  for (int r = 0; r < 5; ++r) g[r] = bench_probe_sample(pool, threads, probe);
  return bench_median(g, 5);
}

/* ---- OpenBLAS through dlopen -------------------------------------------- */

enum { BLAS_ROW_MAJOR = 101, BLAS_NO_TRANS = 111 };
typedef void (*bench_sgemm_fn)(int, int, int, int, int, int, float, const float*, int,
                               const float*, int, float, float*, int);
typedef void (*bench_sgemv_fn)(int, int, int, int, float, const float*, int, const float*, int,
                               float, float*, int);
static struct {
  void* lib;
  char path[128];
  bench_sgemm_fn sgemm;
  bench_sgemv_fn sgemv;
  void (*set_threads)(int);
  char* (*get_config)(void);
} bench_blas;

static void bench_blas_open(void) {
  static const char* names[] = {"libopenblas.so.0", "libopenblas.so",
                                "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !bench_blas.lib; ++i) {
    bench_blas.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (bench_blas.lib) snprintf(bench_blas.path, sizeof(bench_blas.path), "%s", names[i]);
  }
  if (!bench_blas.lib) return;
  /* POSIX: dlsym's void* converts to a function pointer through memcpy. */
  void* f;
  f = dlsym(bench_blas.lib, "cblas_sgemm");
  memcpy(&bench_blas.sgemm, &f, sizeof(f));
  f = dlsym(bench_blas.lib, "cblas_sgemv");
  memcpy(&bench_blas.sgemv, &f, sizeof(f));
  f = dlsym(bench_blas.lib, "openblas_set_num_threads");
  memcpy(&bench_blas.set_threads, &f, sizeof(f));
  f = dlsym(bench_blas.lib, "openblas_get_config");
  memcpy(&bench_blas.get_config, &f, sizeof(f));
  if (!bench_blas.sgemm || !bench_blas.sgemv || !bench_blas.set_threads) {
    dlclose(bench_blas.lib);
    memset(&bench_blas, 0, sizeof(bench_blas));
  }
}

/* ---- data ---------------------------------------------------------------- */

static void* bench_alloc(size_t bytes) {
  bytes = (bytes + 63) & ~(size_t)63;
  void* p = aligned_alloc(64, bytes ? bytes : 64);
  if (!p) {
    fprintf(stderr, "bench_gemm: out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  memset(p, 0, bytes);
  return p;
}

static float* bench_floats(size_t n, unsigned seed) {
  float* x = bench_alloc(n * sizeof(float));
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    x[i] = (float)(s >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
  return x;
}

/* ---- results --------------------------------------------------------------- */

typedef struct {
  char kernel[24], shape[48], unit[8], params[160];
  double work; /* flop or bytes per call */
  int threads;
  double kiln_s, blas_s; /* median seconds per call; blas_s 0: not measured */
  double peak;           /* median of the peak samples taken in its rounds (0: none) */
} bench_row_t;

static bench_row_t bench_rows[128];
static int bench_n_rows;

static bench_row_t* bench_row_add(const char* kernel, const char* shape, const char* unit,
                                  double work, int threads, const char* params) {
  if (bench_n_rows >= (int)(sizeof(bench_rows) / sizeof(bench_rows[0]))) {
    fprintf(stderr, "bench_gemm: too many rows\n");
    exit(1);
  }
  bench_row_t* r = &bench_rows[bench_n_rows++];
  memset(r, 0, sizeof(*r));
  snprintf(r->kernel, sizeof(r->kernel), "%s", kernel);
  snprintf(r->shape, sizeof(r->shape), "%s", shape);
  snprintf(r->unit, sizeof(r->unit), "%s", unit);
  snprintf(r->params, sizeof(r->params), "%s", params);
  r->work = work;
  r->threads = threads;
  /* With one thread every kernel runs on this one: its CPU time is the
   * kernel's. Two threads need the wall clock. */
  bench_clock_cpu = bench_min_reps > 0 && threads == 1;
  return r;
}

/* ---- the benchmarks ---------------------------------------------------------- */

typedef struct {
  kiln_gemm_f32_args_t g;
  kiln_pool_t* pool;
  /* OpenBLAS operands */
  const float *a, *b;
  float* c;
  int m, n, k;
} bench_gemm_t;

static void bench_kiln_gemm(void* p) {
  bench_gemm_t* b = p;
  kiln_gemm_f32(&b->g, b->pool);
}
static void bench_blas_sgemm(void* p) {
  bench_gemm_t* b = p;
  bench_blas.sgemm(BLAS_ROW_MAJOR, BLAS_NO_TRANS, BLAS_NO_TRANS, b->m, b->n, b->k, 1.0f, b->a,
                   b->k, b->b, b->n, 0.0f, b->c, b->n);
}
/* y(N) = W(N, K) x(K): nn.Linear's weight as it is stored. */
static void bench_blas_sgemv(void* p) {
  bench_gemm_t* b = p;
  bench_blas.sgemv(BLAS_ROW_MAJOR, BLAS_NO_TRANS, b->n, b->k, 1.0f, b->b, b->k, b->a, 1, 0.0f,
                   b->c, 1);
}

static void bench_gemm_args(kiln_gemm_f32_args_t* g, int64_t m, int64_t n, int64_t k,
                            const float* a, float* c) {
  memset(g, 0, sizeof(*g));
  g->batch = 1, g->m = m, g->n = n, g->k = k;
  g->a = a, g->a_row_stride = k, g->a_col_stride = 1;
  g->c = c, g->c_row_stride = n;
}

static void bench_blas_threads(int t) {
  if (bench_blas.lib) bench_blas.set_threads(t);
}

/* One peak sample for a row, taken in its rounds: FMA GFLOP/s, or read GB/s
 * for a GB/s row. */
static double bench_peak_sample(const bench_row_t* r, kiln_pool_t* pool) {
  return bench_probe_sample(pool, r->threads,
                            r->unit[1] == 'F' ? KILN_MACHINE_PROBE_FMA : KILN_MACHINE_PROBE_READ);
}

/* OpenBLAS's pthreads spin for a while (about 2^28 cycles) after each
 * call before they sleep: let them, so the next sample (kiln's, the
 * peak's, torch's in the serving process) has the cores to itself. */
static void bench_blas_settle(int threads) {
  if (threads < 2) return;
  struct timespec ts = {0, 150 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

static void bench_json_string(const char* s);

/* --serve: announce the row, then run the samples run.py asks for until it
 * says the row is done. */
static void bench_serve_row(bench_row_t* r, kiln_pool_t* pool, bench_fn kf, void* kc,
                            bench_fn bf, void* bc) {
  printf("{\"row\": {\"kernel\": ");
  bench_json_string(r->kernel);
  printf(", \"shape\": ");
  bench_json_string(r->shape);
  printf(", \"unit\": ");
  bench_json_string(r->unit);
  printf(", \"work\": %.9g, \"threads\": %d, \"params\": %s, \"openblas\": %s}}\n",
         r->work, r->threads, r->params, bf ? "true" : "false");
  fflush(stdout);
  char line[64];
  while (fgets(line, sizeof(line), stdin)) {
    if (line[0] == 'd') return;
    if (line[0] == 'p') {
      printf("%.9g\n", bench_peak_sample(r, pool));
    } else if ((line[0] == 'k' || (line[0] == 'b' && bf)) && line[1] == ' ') {
      int calls = atoi(line + 2);
      if (calls < 1) calls = 1;
      double t = line[0] == 'k' ? bench_time_calls(kf, kc, calls) : bench_time_calls(bf, bc, calls);
      if (line[0] == 'b') bench_blas_settle(r->threads);
      printf("%.9g\n", t);
    } else {
      printf("error\n");
    }
    fflush(stdout);
  }
  exit(1); /* the driver went away */
}

/* Times a row: kiln's fn(kc) and, when bf is not NULL, OpenBLAS's bf(bc),
 * in rounds with peak samples (see the comment at the top). */
static void bench_measure(bench_row_t* r, kiln_pool_t* pool, bench_fn kf, void* kc, bench_fn bf,
                          void* bc) {
  if (bf) bench_blas_threads(r->threads);
  if (bench_serve) {
    bench_serve_row(r, pool, kf, kc, bf, bc);
    return;
  }
  if (bench_min_reps > 0) {
    r->kiln_s = bench_time_min(kf, kc);
    if (bf) r->blas_s = bench_time_min(bf, bc);
    return;
  }
  int ck = bench_calls_per_sample(kf, kc), cb = bf ? bench_calls_per_sample(bf, bc) : 0;
  if (bf) bench_blas_settle(r->threads);
  double tk[32], tb[32], pk[32];
  int n = bench_rounds > 32 ? 32 : bench_rounds;
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < 3; ++j) {
      int who = (s + j) % 3;
      if (who == 0) {
        pk[s] = bench_peak_sample(r, pool);
      } else if (who == 1) {
        tk[s] = bench_time_calls(kf, kc, ck) / ck;
      } else if (bf) {
        tb[s] = bench_time_calls(bf, bc, cb) / cb;
        bench_blas_settle(r->threads);
      }
    }
  r->kiln_s = bench_median(tk, n);
  r->blas_s = bf ? bench_median(tb, n) : 0;
  r->peak = bench_median(pk, n);
}

static void bench_gemms(kiln_pool_t** pools, int max_t) {
  static const int64_t shapes[][3] = {
      {1024, 1024, 1024}, {128, 768, 768}, {128, 3072, 768}, {512, 768, 3072}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
    float* a = bench_floats((size_t)(m * k), 1);
    float* b = bench_floats((size_t)(k * n), 2);
    float* bp = bench_alloc(kiln_gemm_f32_packed_size(k, n));
    float* c = bench_alloc((size_t)(m * n) * sizeof(float));
    kiln_gemm_f32_pack_b(k, n, b, n, 1, bp);
    bench_gemm_t ctx = {.a = a, .b = b, .c = c, .m = (int)m, .n = (int)n, .k = (int)k};
    bench_gemm_args(&ctx.g, m, n, k, a, c);
    ctx.g.b_packed = bp;
    char shape[48], params[160];
    snprintf(shape, sizeof(shape), "%lldx%lldx%lld", (long long)m, (long long)n, (long long)k);
    snprintf(params, sizeof(params), "{\"m\": %lld, \"n\": %lld, \"k\": %lld}", (long long)m,
             (long long)n, (long long)k);
    for (int t = 1; t <= max_t; ++t) {
      bench_row_t* r = bench_row_add("gemm_f32", shape, "GFLOP/s", 2.0 * m * n * k, t, params);
      ctx.pool = pools[t - 1];
      bench_measure(r, ctx.pool, bench_kiln_gemm, &ctx, bench_blas.lib ? bench_blas_sgemm : NULL,
                    &ctx);
    }
    /* bf16 at 1024^3: bf16 activations and packed bf16 weights, fp32
     * accumulation and output. */
    if (s == 0) {
      uint16_t* bp16 = bench_alloc(kiln_gemm_bf16_packed_size(k, n));
      uint16_t* a16 = bench_alloc((size_t)(m * k) * 2);
      kiln_gemm_bf16_pack_b(k, n, b, n, 1, bp16);
      for (int64_t i = 0; i < m * k; ++i) a16[i] = kiln_gemm_bf16_from_f32(a[i]);
      ctx.g.a = NULL;
      ctx.g.a_bf16 = a16;
      ctx.g.b_packed = NULL;
      ctx.g.b_packed_bf16 = bp16;
      for (int t = 1; t <= max_t; ++t) {
        bench_row_t* r = bench_row_add("gemm_bf16", shape, "GFLOP/s", 2.0 * m * n * k, t, params);
        ctx.pool = pools[t - 1];
        bench_measure(r, ctx.pool, bench_kiln_gemm, &ctx, NULL, NULL);
      }
      free(bp16), free(a16);
    }
    free(a), free(b), free(bp), free(c);
  }
}

/* Training shapes: in a training graph the weights are graph inputs, so B
 * comes unpacked on every call, often transposed, and the weight gradient
 * reads A transposed with K = the batch (or token) count. The MLP row of
 * the model bench (3x Linear 1024, batch 64) and the transformer's
 * feed-forward (d 256, ff 1024, 8 x 128 tokens):
 *   fwd  y = x W^T       B stored (N, K): transposed
 *   dX   dX = dY W       B row-major
 *   dW   dW = dY^T X     A stored (K, M): transposed */
typedef struct {
  bench_gemm_t base;
  int ta, tb;
} bench_gemm_train_t;

enum { BLAS_TRANS = 112 };
static void bench_blas_sgemm_train(void* p) {
  bench_gemm_train_t* t = p;
  bench_gemm_t* b = &t->base;
  bench_blas.sgemm(BLAS_ROW_MAJOR, t->ta ? BLAS_TRANS : BLAS_NO_TRANS,
                   t->tb ? BLAS_TRANS : BLAS_NO_TRANS, b->m, b->n, b->k, 1.0f, b->a,
                   t->ta ? b->m : b->k, b->b, t->tb ? b->k : b->n, 0.0f, b->c, b->n);
}

static void bench_gemms_train(kiln_pool_t** pools, int max_t) {
  static const struct {
    int64_t m, n, k;
    int ta, tb;
    const char* what;
  } shapes[] = {
      {64, 1024, 1024, 0, 1, "mlp fwd"},   {64, 1024, 1024, 0, 0, "mlp dX"},
      {1024, 1024, 64, 1, 0, "mlp dW"},    {1024, 1024, 256, 0, 1, "tf ff1 fwd"},
      {1024, 256, 1024, 0, 1, "tf ff2 fwd"}, {1024, 256, 1024, 0, 0, "tf ff1 dX"},
      {1024, 256, 1024, 1, 0, "tf ff1 dW"}, {256, 1024, 1024, 1, 0, "tf ff2 dW"},
  };
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    int64_t m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
    int ta = shapes[s].ta, tb = shapes[s].tb;
    float* a = bench_floats((size_t)(m * k), 1);
    float* b = bench_floats((size_t)(k * n), 2);
    float* c = bench_alloc((size_t)(m * n) * sizeof(float));
    bench_gemm_train_t ctx = {.base = {.a = a, .b = b, .c = c, .m = (int)m, .n = (int)n,
                                       .k = (int)k},
                              .ta = ta, .tb = tb};
    bench_gemm_args(&ctx.base.g, m, n, k, a, c);
    ctx.base.g.a_row_stride = ta ? 1 : k; /* stored (K, M) when transposed */
    ctx.base.g.a_col_stride = ta ? m : 1;
    ctx.base.g.b = b;
    ctx.base.g.b_row_stride = tb ? 1 : n; /* stored (N, K) when transposed */
    ctx.base.g.b_col_stride = tb ? k : 1;
    char shape[48], params[160];
    snprintf(shape, sizeof(shape), "%lldx%lldx%lld %s%s", (long long)m, (long long)n,
             (long long)k, ta ? "At" : "A", tb ? "Bt" : "B");
    snprintf(params, sizeof(params),
             "{\"m\": %lld, \"n\": %lld, \"k\": %lld, \"ta\": %d, \"tb\": %d, \"what\": \"%s\"}",
             (long long)m, (long long)n, (long long)k, ta, tb, shapes[s].what);
    for (int t = 1; t <= max_t; ++t) {
      bench_row_t* r = bench_row_add("gemm_train", shape, "GFLOP/s", 2.0 * m * n * k, t, params);
      ctx.base.pool = pools[t - 1];
      bench_measure(r, ctx.base.pool, bench_kiln_gemm, &ctx.base,
                    bench_blas.lib ? bench_blas_sgemm_train : NULL, &ctx);
    }
    free(a), free(b), free(c);
  }
}

/* Decode: one token through a 14336 -> 4096 projection (235 MB of fp32
 * weights); figures are bytes of weights streamed per second. */
static void bench_gemvs(kiln_pool_t** pools, int max_t) {
  const int64_t m = 1, n = 4096, k = 14336;
  float* x = bench_floats((size_t)k, 3);
  float* w = bench_floats((size_t)(n * k), 4); /* W(N, K) row-major, as nn.Linear */
  float* y = bench_alloc((size_t)n * sizeof(float));
  size_t pbytes = kiln_gemm_f32_packed_size(k, n);
  float* bp = bench_alloc(pbytes);
  kiln_gemm_f32_pack_b(k, n, w, 1, k, bp); /* B = W^T */
  bench_gemm_t ctx = {.a = x, .b = w, .c = y, .m = 1, .n = (int)n, .k = (int)k};
  bench_gemm_args(&ctx.g, m, n, k, x, y);
  ctx.g.b_packed = bp;
  const char* shape = "1x14336->4096";
  const char* params = "{\"m\": 1, \"n\": 4096, \"k\": 14336}";
  for (int t = 1; t <= max_t; ++t) {
    bench_row_t* r = bench_row_add("gemv_f32", shape, "GB/s", (double)pbytes, t, params);
    ctx.pool = pools[t - 1];
    bench_measure(r, ctx.pool, bench_kiln_gemm, &ctx, bench_blas.lib ? bench_blas_sgemv : NULL,
                  &ctx);
  }
  free(bp);
  size_t pbytes16 = kiln_gemm_bf16_packed_size(k, n);
  uint16_t* bp16 = bench_alloc(pbytes16);
  kiln_gemm_bf16_pack_b(k, n, w, 1, k, bp16);
  free(w);
  ctx.g.b_packed = NULL;
  ctx.g.b_packed_bf16 = bp16;
  for (int t = 1; t <= max_t; ++t) {
    bench_row_t* r = bench_row_add("gemv_bf16w", shape, "GB/s", (double)pbytes16, t, params);
    ctx.pool = pools[t - 1];
    bench_measure(r, ctx.pool, bench_kiln_gemm, &ctx, NULL, NULL);
  }
  free(bp16), free(x), free(y);
}

typedef struct {
  kiln_attention_args_t a;
  kiln_pool_t* pool;
} bench_attn_t;
static void bench_kiln_attn(void* p) {
  bench_attn_t* b = p;
  kiln_attention_f32(&b->a, b->pool);
}

static void bench_attention(kiln_pool_t** pools, int max_t) {
  const int64_t B = 1, H = 12, S = 512, D = 64;
  size_t numel = (size_t)(B * H * S * D);
  float *q = bench_floats(numel, 5), *k = bench_floats(numel, 6), *v = bench_floats(numel, 7);
  float* o = bench_alloc(numel * sizeof(float));
  bench_attn_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  kiln_attention_args_t* a = &ctx.a;
  a->batch = B, a->heads = H, a->kv_heads = H, a->q_len = S, a->kv_len = S;
  a->head_dim = D, a->v_head_dim = D;
  int64_t st[4] = {H * S * D, S * D, D, 1};
  memcpy(a->q_strides, st, sizeof(st));
  memcpy(a->k_strides, st, sizeof(st));
  memcpy(a->v_strides, st, sizeof(st));
  a->q = q, a->k = k, a->v = v, a->out = o;
  a->scale = 1.0f / sqrtf((float)D);
  a->causal = 1;
  /* Causal: query i meets i + 1 keys; Q.K^T and P.V are 2 * D flop each. */
  double flop = 4.0 * B * H * D * (double)S * (S + 1) / 2.0;
  for (int t = 1; t <= max_t; ++t) {
    bench_row_t* r = bench_row_add("attention", "B1 H12 S512 D64 causal", "GFLOP/s", flop, t,
                                   "{\"b\": 1, \"h\": 12, \"s\": 512, \"d\": 64, \"causal\": 1}");
    ctx.pool = pools[t - 1];
    bench_measure(r, ctx.pool, bench_kiln_attn, &ctx, NULL, NULL);
  }
  free(q), free(k), free(v), free(o);
}

typedef struct {
  kiln_conv2d_f32_args_t a;
  kiln_pool_t* pool;
} bench_conv_t;
static void bench_kiln_conv(void* p) {
  bench_conv_t* b = p;
  kiln_conv2d_f32(&b->a, b->pool);
}

static void bench_convs(kiln_pool_t** pools, int max_t) {
  /* ResNet-18 at batch 1, 224 x 224: the stem, a layer1 conv, layer3's
   * strided conv and its 1x1 downsample, a layer4 conv. */
  static const int64_t shapes[][6] = {/* C, O, H (= W), kernel, stride, pad */
                                      {3, 64, 224, 7, 2, 3},
                                      {64, 64, 56, 3, 1, 1},
                                      {128, 256, 28, 3, 2, 1},
                                      {128, 256, 28, 1, 2, 0},
                                      {512, 512, 7, 3, 1, 1}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    int64_t C = shapes[s][0], O = shapes[s][1], H = shapes[s][2], K = shapes[s][3],
            st = shapes[s][4], pd = shapes[s][5];
    int64_t Ho = (H + 2 * pd - K) / st + 1;
    float* x = bench_floats((size_t)(C * H * H), 8);
    float* w = bench_floats((size_t)(O * C * K * K), 9);
    float* bias = bench_floats((size_t)O, 10);
    float* y = bench_alloc((size_t)(O * Ho * Ho) * sizeof(float));
    bench_conv_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    kiln_conv2d_f32_args_t* a = &ctx.a;
    a->n = 1, a->c = C, a->h = H, a->w = H, a->o = O, a->kh = K, a->kw = K, a->ho = Ho,
    a->wo = Ho;
    a->sh = a->sw = st, a->ph = a->pw = pd, a->dh = a->dw = 1, a->groups = 1;
    a->x = x, a->weight = w, a->bias = bias, a->y = y, a->act = KILN_ACT_NONE;
    /* The weight packed ahead in the panel width the kernel picks, as a
     * compiled model stores it (a dense weight would be packed on every
     * call: 9.4 MB at 512 -> 512, over a third of that layer's time). */
    int panel = kiln_conv2d_f32_panel_for(a);
    float* wp = bench_alloc(kiln_conv2d_f32_packed_size(O, C * K * K, 1, panel));
    kiln_conv2d_f32_pack_weight(O, C * K * K, 1, panel, w, wp);
    a->weight = wp, a->weight_packed = panel;
    char shape[48], params[160];
    snprintf(shape, sizeof(shape), "%lldx%lld s%lld %lld->%lld @%lld", (long long)K, (long long)K,
             (long long)st, (long long)C, (long long)O, (long long)H);
    snprintf(params, sizeof(params),
             "{\"c\": %lld, \"o\": %lld, \"h\": %lld, \"k\": %lld, \"stride\": %lld, \"pad\": %lld}",
             (long long)C, (long long)O, (long long)H, (long long)K, (long long)st, (long long)pd);
    double flop = 2.0 * O * Ho * Ho * C * K * K;
    for (int t = 1; t <= max_t; ++t) {
      bench_row_t* r = bench_row_add("conv2d", shape, "GFLOP/s", flop, t, params);
      ctx.pool = pools[t - 1];
      bench_measure(r, ctx.pool, bench_kiln_conv, &ctx, NULL, NULL);
    }
    free(x), free(w), free(wp), free(bias), free(y);
  }
}

typedef struct {
  int op; /* 0 layer_norm, 1 softmax, 2 gelu */
  size_t rows, cols;
  const float *x, *gamma, *beta;
  float* y;
  kiln_pool_t* pool;
} bench_row_op_t;
static void bench_kiln_rowop(void* p) {
  bench_row_op_t* b = p;
  if (b->op == 0)
    kiln_layer_norm_f32(b->rows, b->cols, b->x, b->gamma, b->beta, 1e-5f, b->y, b->pool);
  else if (b->op == 1)
    kiln_softmax_f32(b->rows, b->cols, b->x, b->y, 0, b->pool);
  else
    kiln_unary_f32(KILN_UNARY_GELU, b->rows * b->cols, b->x, b->y, b->pool);
}

/* Memory-bound row ops on a (4096, 4096) tensor (64 MiB in, 64 MiB out);
 * figures are bytes read and written per second. */
static void bench_rowops(kiln_pool_t** pools, int max_t) {
  const size_t rows = 4096, cols = 4096;
  float* x = bench_floats(rows * cols, 11);
  float* gamma = bench_floats(cols, 12);
  float* beta = bench_floats(cols, 13);
  float* y = bench_alloc(rows * cols * sizeof(float));
  static const char* names[] = {"layer_norm", "softmax", "gelu"};
  for (int op = 0; op < 3; ++op) {
    bench_row_op_t ctx = {op, rows, cols, x, gamma, beta, y, NULL};
    for (int t = 1; t <= max_t; ++t) {
      bench_row_t* r = bench_row_add(names[op], "4096x4096", "GB/s",
                                     2.0 * rows * cols * sizeof(float), t,
                                     "{\"rows\": 4096, \"cols\": 4096}");
      ctx.pool = pools[t - 1];
      bench_measure(r, ctx.pool, bench_kiln_rowop, &ctx, NULL, NULL);
    }
  }
  free(x), free(gamma), free(beta), free(y);
}

/* ---- output ----------------------------------------------------------------- */

static void bench_json_string(const char* s) {
  putchar('"');
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s >= 0x20) putchar(*s);
  }
  putchar('"');
}

/* --serve's last line: the machine's peaks, and OpenBLAS. */
static void bench_print_end(int max_t, const double* peak, const double* bw) {
  printf("{\"end\": {\"machine\": {\"isa\": \"%s\", \"peaks_from\": ",
         kiln_cpu_isa_name(kiln_cpu_isa()));
  bench_json_string(bench_peaks_from);
  printf(", \"threads\": [");
  for (int t = 1; t <= max_t; ++t) printf("%s%d", t > 1 ? ", " : "", t);
  printf("], \"fma_peak_gflops\": [");
  for (int t = 1; t <= max_t; ++t) printf("%s%.3f", t > 1 ? ", " : "", peak[t - 1]);
  printf("], \"read_bw_gbs\": [");
  for (int t = 1; t <= max_t; ++t) printf("%s%.3f", t > 1 ? ", " : "", bw[t - 1]);
  printf("]}, \"openblas\": ");
  if (bench_blas.lib) {
    printf("{\"library\": ");
    bench_json_string(bench_blas.path);
    printf(", \"config\": ");
    bench_json_string(bench_blas.get_config ? bench_blas.get_config() : "");
    printf("}");
  } else {
    printf("null");
  }
  printf("}}\n");
  fflush(stdout);
}

static void bench_print_table(int max_t, const double* peak, const double* bw) {
  printf("kiln kernel benchmark, ISA %s; OpenBLAS: %s\n", kiln_cpu_isa_name(kiln_cpu_isa()),
         bench_blas.lib ? bench_blas.path : "not found");
  if (bench_min_reps > 0)
    printf("timing: minimum of %d calls (1 thread: CPU time); FMA peak: minimum of short runs\n",
           bench_min_reps);
  printf("\n");
  printf("machine        ");
  for (int t = 1; t <= max_t; ++t) printf("%d thread%s  ", t, t > 1 ? "s" : " ");
  printf("  (%s)\nFMA peak       ", bench_peaks_from);
  for (int t = 1; t <= max_t; ++t) printf("%9.1f  ", peak[t - 1]);
  printf(" GFLOP/s\nread bandwidth ");
  for (int t = 1; t <= max_t; ++t) printf("%9.1f  ", bw[t - 1]);
  printf(" GB/s\n\n%% peak: against the peak samples taken in the row's own rounds (their median"
         " in the \"row peak\" column)%s\n\n",
         bench_min_reps > 0 ? "; with --min, against the peaks above" : "");
  printf("%-12s %-24s %3s %10s %7s %10s %8s %7s\n", "kernel", "shape", "thr", "kiln", "% peak",
         "OpenBLAS", "row peak", "unit");
  for (int i = 0; i < bench_n_rows; ++i) {
    const bench_row_t* r = &bench_rows[i];
    double rate = r->work / r->kiln_s * 1e-9;
    double pk = r->peak > 0 ? r->peak : r->unit[1] == 'F' ? peak[r->threads - 1] : bw[r->threads - 1];
    char blas[16] = "-";
    if (r->blas_s > 0) snprintf(blas, sizeof(blas), "%.1f", r->work / r->blas_s * 1e-9);
    printf("%-12s %-24s %3d %10.1f %6.1f%% %10s %8.1f %7s\n", r->kernel, r->shape, r->threads,
           rate, pk > 0 ? 100.0 * rate / pk : 0.0, blas, pk, r->unit);
  }
}

/* Whether `group` is in the comma-separated list (NULL: everything). */
static int bench_wanted(const char* only, const char* group) {
  if (!only) return 1;
  size_t n = strlen(group);
  for (const char* p = only; *p;) {
    const char* e = strchr(p, ',');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len == n && !strncmp(p, group, n)) return 1;
    p += len + (e ? 1 : 0);
  }
  return 0;
}

int main(int argc, char** argv) {
  int max_t = 2;
  const char* only = NULL;
  const char* isa = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--serve")) {
      bench_serve = 1;
    } else if (!strcmp(argv[i], "--quick")) {
      bench_rounds = 3;
    } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
      isa = argv[++i];
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      max_t = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--min") && i + 1 < argc) {
      bench_min_reps = atoi(argv[++i]);
      if (bench_min_reps < 1 || bench_min_reps > 100000) bench_min_reps = 30;
    } else {
      fprintf(stderr,
              "usage: bench_gemm [--quick] [--threads 1|2] [--only GROUPS] [--isa LEVEL] [--min N]"
              " [--serve]\n");
      return 2;
    }
  }
  if (max_t < 1) max_t = 1;
  if (max_t > 2) max_t = 2;
  kiln_pool_t* pools[2] = {NULL, NULL};
  for (int t = 1; t <= max_t; ++t) {
    kiln_status_t s = kiln_pool_create(t, &pools[t - 1]);
    if (s) {
      fprintf(stderr, "could not create a %d-thread pool: %s\n", t, kiln_status_message(s));
      kiln_status_free(s);
      return 1;
    }
  }
  bench_blas_open();

  /* The machine's peaks: kiln info's (cached, or measured now). */
  kiln_machine_t machine;
  kiln_pool_t* all = kiln_pool_default();
  kiln_status_t ms = all ? kiln_machine_get(all, 0, &machine)
                         : kiln_status_make(KILN_OUT_OF_MEMORY, "the default pool");
  if (ms) {
    fprintf(stderr, "bench_gemm: kiln info's peaks: %s\n", kiln_status_message(ms));
    kiln_status_free(ms);
    return 1;
  }
  double peak[2] = {0, 0}, bw[2] = {0, 0};
  for (int t = 1; t <= max_t; ++t) {
    if (t == 1) {
      peak[0] = machine.fma_gflops_1, bw[0] = machine.bandwidth_gbs_1;
    } else if (t == machine.threads) {
      peak[t - 1] = machine.fma_gflops, bw[t - 1] = machine.bandwidth_gbs;
    } else {
      peak[t - 1] = bench_probe_median(pools[t - 1], t, KILN_MACHINE_PROBE_FMA);
      bw[t - 1] = bench_probe_median(pools[t - 1], t, KILN_MACHINE_PROBE_READ);
    }
    if (bench_min_reps > 0 && t <= 2) { /* CPU-time peaks for CPU-time timings */
      double per[2] = {0, 0};
      kiln_pool_parallel_for(pools[t - 1], (size_t)t, bench_fma_min_task, per);
      peak[t - 1] = per[0] + per[1];
    }
  }
  char when[32] = "?";
  time_t at = (time_t)machine.measured_at;
  struct tm tm_at;
  if (gmtime_r(&at, &tm_at)) strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm_at);
  snprintf(bench_peaks_from, sizeof bench_peaks_from, "kiln info, %s %s",
           machine.measured ? "measured now," : "cached, measured", when);
  if (isa) {
    int level;
    if (!kiln_cpu_isa_parse(isa, &level) || level < 0 ||
        kiln_cpu_isa_set((kiln_isa_t)level) != (kiln_isa_t)level) {
      fprintf(stderr, "bench_gemm: --isa %s: not a level this CPU (or KILN_ISA) runs\n", isa);
      return 2;
    }
  }
  if (bench_wanted(only, "gemm")) bench_gemms(pools, max_t);
  if (bench_wanted(only, "train")) bench_gemms_train(pools, max_t);
  if (bench_wanted(only, "gemv")) bench_gemvs(pools, max_t);
  if (bench_wanted(only, "attention")) bench_attention(pools, max_t);
  if (bench_wanted(only, "conv")) bench_convs(pools, max_t);
  if (bench_wanted(only, "rowops")) bench_rowops(pools, max_t);

  if (bench_serve)
    bench_print_end(max_t, peak, bw);
  else
    bench_print_table(max_t, peak, bw);
  for (int t = 0; t < max_t; ++t) kiln_pool_release(pools[t]);
  if (bench_blas.lib) dlclose(bench_blas.lib);
  return 0;
}
