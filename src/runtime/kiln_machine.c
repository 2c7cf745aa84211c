/* The machine as kiln sees it (`kiln info`, kiln.machine()): CPU model,
 * cores, caches, ISA levels present and in use, and peaks measured once and
 * cached in a user file: FMA fp32, bf16 dot (VDPBF16PS) and int8 dot
 * (VPDPBUSD) where the CPU has them, and read bandwidth, each on 1 thread
 * and on all of the pool's threads.
 *
 * The peak loops are register-only: 12 independent accumulators (more than
 * latency x ports on any current x86 core), so they measure issue rate, not
 * latency. They are ISA code inside this file, enabled per function with
 * target attributes and called only when kiln_cpu_features() has the ISA:
 * they are measurement probes, not kernels, and none is on a model's path.
 * The bandwidth probe sums a 128 MiB buffer (larger than any per-core cache;
 * a server's shared L3 may still hold part of it), each thread its slice as
 * four interleaved streams. The whole measurement takes well under two
 * seconds. kiln_machine_sample runs one sample of the same probes for
 * benchmarks that divide by a peak taken beside each measurement. */
#include "runtime/kiln_machine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/kiln_cpu.h"

#if defined(KILN_HAVE_X86)
#include <immintrin.h>
#endif

/* The bandwidth probe's buffer: 128 MiB of floats, beyond any per-core cache. */
#define KILN_MACHINE_READ_FLOATS ((size_t)32 << 20)

static double kiln_machine_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- probes: each returns operations done (FLOPs or int ops) ---------- */

typedef double (*kiln_machine_probe_fn)(int64_t iters);

static volatile float kiln_machine_sink_;

static double kiln_machine_fma_generic(int64_t iters) {
  float a[12], m = 0.999999f, c = 1e-7f;
  for (int i = 0; i < 12; ++i) a[i] = (float)i;
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 12; ++i) a[i] = a[i] * m + c;
  float s = 0;
  for (int i = 0; i < 12; ++i) s += a[i];
  kiln_machine_sink_ = s;
  return (double)iters * 12 * 2;
}

#if defined(KILN_HAVE_X86) && defined(__GNUC__)
#define KILN_MACHINE_UNROLL12(S) S(0) S(1) S(2) S(3) S(4) S(5) S(6) S(7) S(8) S(9) S(10) S(11)

__attribute__((target("avx2,fma"))) static double kiln_machine_fma_avx2(int64_t iters) {
  __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define D(i) __m256 a##i = _mm256_set1_ps((float)i);
  KILN_MACHINE_UNROLL12(D)
#undef D
  for (int64_t it = 0; it < iters; ++it) {
#define F(i) a##i = _mm256_fmadd_ps(a##i, m, c);
    KILN_MACHINE_UNROLL12(F)
#undef F
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  kiln_machine_sink_ = _mm256_cvtss_f32(s);
  return (double)iters * 12 * 8 * 2;
}

__attribute__((target("avx512f"))) static double kiln_machine_fma_avx512(int64_t iters) {
  __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define D(i) __m512 a##i = _mm512_set1_ps((float)i);
  KILN_MACHINE_UNROLL12(D)
#undef D
  for (int64_t it = 0; it < iters; ++it) {
#define F(i) a##i = _mm512_fmadd_ps(a##i, m, c);
    KILN_MACHINE_UNROLL12(F)
#undef F
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  kiln_machine_sink_ = _mm512_reduce_add_ps(s);
  return (double)iters * 12 * 16 * 2;
}

/* VDPBF16PS: 16 lanes x 2 products, each a multiply and an add. */
__attribute__((target("avx512f,avx512bf16"))) static double kiln_machine_bf16(int64_t iters) {
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
#define D(i) __m512 a##i = _mm512_set1_ps((float)i);
  KILN_MACHINE_UNROLL12(D)
#undef D
  for (int64_t it = 0; it < iters; ++it) {
#define F(i) a##i = _mm512_dpbf16_ps(a##i, x, y);
    KILN_MACHINE_UNROLL12(F)
#undef F
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  kiln_machine_sink_ = _mm512_reduce_add_ps(s);
  return (double)iters * 12 * 16 * 2 * 2;
}

/* VPDPBUSD: 16 lanes x 4 u8*s8 products, each a multiply and an add. */
__attribute__((target("avx512f,avx512vnni"))) static double kiln_machine_int8(int64_t iters) {
  __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(-1);
#define D(i) __m512i a##i = _mm512_set1_epi32(i);
  KILN_MACHINE_UNROLL12(D)
#undef D
  for (int64_t it = 0; it < iters; ++it) {
#define F(i) a##i = _mm512_dpbusd_epi32(a##i, x, y);
    KILN_MACHINE_UNROLL12(F)
#undef F
  }
  __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                               _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  /* Summed as unsigned: the lanes wrap by design (their value is only a
   * sink), and GCC's _mm512_reduce_add_epi32 adds them as int, whose
   * overflow UBSan reports (a VNNI machine, test_profile). */
  uint32_t lanes[16], sum = 0;
  _mm512_storeu_si512(lanes, s);
  for (int i = 0; i < 16; ++i) sum += lanes[i];
  kiln_machine_sink_ = (float)sum;
  return (double)iters * 12 * 16 * 4 * 2;
}

/* A thread's slice is read as four interleaved sequential streams (its
 * quarters, in lockstep): several streams draw more bandwidth than one (the
 * hardware prefetchers run ahead of each stream by a bounded distance), and
 * the roof should be the most a read loop gets, not what one stream gets.
 * Eight independent sums: the add latency never limits the loads. */
__attribute__((target("avx2"))) static double kiln_machine_read_avx2(const float* p, size_t n) {
  __m256 s[8];
  for (int j = 0; j < 8; ++j) s[j] = _mm256_setzero_ps();
  size_t q = n / 4 / 16 * 16;
  for (size_t i = 0; i < q; i += 16)
    for (int j = 0; j < 4; ++j) {
      s[2 * j] = _mm256_add_ps(s[2 * j], _mm256_load_ps(p + j * q + i));
      s[2 * j + 1] = _mm256_add_ps(s[2 * j + 1], _mm256_load_ps(p + j * q + i + 8));
    }
  for (int j = 1; j < 8; ++j) s[0] = _mm256_add_ps(s[0], s[j]);
  float out[8];
  _mm256_storeu_ps(out, s[0]);
  double t = 0;
  for (int k = 0; k < 8; ++k) t += out[k];
  return t;
}
#endif

static double kiln_machine_read_generic(const float* p, size_t n) {
  float s[4][8] = {{0}};
  size_t q = n / 4 / 16 * 16; /* as the AVX2 loop: (n / 64) * 64 floats read */
  for (size_t i = 0; i < q; i += 8)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 8; ++k) s[j][k] += p[j * q + i + k];
  double t = 0;
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 8; ++k) t += s[j][k];
  return t;
}

/* ---- running a probe on 1 and all threads --------------------------------- */

typedef struct {
  kiln_machine_probe_fn fn;
  int64_t iters;
  double ops[256];
} kiln_machine_job_t;

static void kiln_machine_probe_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_machine_job_t* j = ctx;
  j->ops[task] = j->fn(j->iters);
}

/* Iterations of fn that take about 30 ms on one thread. */
static int64_t kiln_machine_calibrate(kiln_machine_probe_fn fn) {
  int64_t iters = 1000;
  for (;;) {
    double t0 = kiln_machine_now();
    fn(iters);
    double dt = kiln_machine_now() - t0;
    if (dt > 0.01 || iters > ((int64_t)1 << 40))
      return (int64_t)((double)iters * 0.03 / (dt > 0 ? dt : 1e-9)) + 1;
    iters *= 4;
  }
}

/* Operations per second, best of 3 repetitions of about 30 ms. */
static double kiln_machine_rate(kiln_pool_t* pool, int threads, kiln_machine_probe_fn fn) {
  kiln_machine_job_t j;
  j.fn = fn;
  j.iters = kiln_machine_calibrate(fn);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = kiln_machine_now();
    if (threads > 1)
      kiln_pool_parallel_for(pool, (size_t)threads, kiln_machine_probe_task, &j);
    else
      kiln_machine_probe_task(&j, 0, 0);
    double dt = kiln_machine_now() - t0, ops = 0;
    for (int t = 0; t < (threads > 1 ? threads : 1); ++t) ops += j.ops[t];
    if (dt > 0 && ops / dt > best) best = ops / dt;
  }
  return best;
}

typedef struct {
  const float* p;
  size_t n, chunk;
  double sum[256];
  int avx2;
} kiln_machine_read_t;

static void kiln_machine_read_task(void* ctx, size_t task, int thread) {
  (void)thread;
  kiln_machine_read_t* r = ctx;
  size_t lo = task * r->chunk, hi = lo + r->chunk > r->n ? r->n : lo + r->chunk;
#if defined(KILN_HAVE_X86) && defined(__GNUC__)
  if (r->avx2) {
    r->sum[task] = kiln_machine_read_avx2(r->p + lo, hi - lo);
    return;
  }
#endif
  r->sum[task] = kiln_machine_read_generic(r->p + lo, hi - lo);
}

/* One pass of `threads` threads over p[0, n), each a contiguous slice:
 * bytes per second (0 when the clock did not move). */
static double kiln_machine_read_once(kiln_pool_t* pool, int threads, const float* p, size_t n) {
  kiln_machine_read_t r;
  r.p = p;
  r.n = n;
  r.avx2 = kiln_cpu_features()->avx2_fma;
  double t0 = kiln_machine_now();
  if (threads > 1) {
    r.chunk = (n / (size_t)threads + 63) & ~(size_t)63;
    kiln_pool_parallel_for(pool, (size_t)threads, kiln_machine_read_task, &r);
  } else {
    r.chunk = n;
    kiln_machine_read_task(&r, 0, 0);
  }
  double dt = kiln_machine_now() - t0;
  kiln_machine_sink_ = (float)r.sum[0];
  /* Each slice reads (its length / 64) * 64 floats (four streams of a
   * multiple of 16). */
  size_t floats = 0;
  for (size_t lo = 0; lo < n; lo += r.chunk) floats += ((lo + r.chunk > n ? n - lo : r.chunk) / 64) * 64;
  return dt > 0 ? (double)floats * 4 / dt : 0;
}

static double kiln_machine_bandwidth(kiln_pool_t* pool, int threads, const float* p, size_t n) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    double b = kiln_machine_read_once(pool, threads, p, n);
    if (b > best) best = b;
  }
  return best;
}

/* The fp32 FMA probe for this CPU: the widest vectors it has. */
static kiln_machine_probe_fn kiln_machine_fma_probe(void) {
#if defined(KILN_HAVE_X86) && defined(__GNUC__)
  const kiln_cpu_features_t* c = kiln_cpu_features();
  if (c->avx512) return kiln_machine_fma_avx512;
  if (c->avx2_fma) return kiln_machine_fma_avx2;
#endif
  return kiln_machine_fma_generic;
}

/* ---- samples for benchmarks -------------------------------------------- */

/* The bandwidth buffer of kiln_machine_sample: made on first use, kept. */
static float* kiln_machine_sample_buf;
static pthread_once_t kiln_machine_sample_once = PTHREAD_ONCE_INIT;

static void kiln_machine_sample_init(void) {
  float* buf = NULL;
  if (posix_memalign((void**)&buf, 64, KILN_MACHINE_READ_FLOATS * sizeof(float)) || !buf) return;
  for (size_t i = 0; i < KILN_MACHINE_READ_FLOATS; ++i) buf[i] = 1.0f;
  kiln_machine_sample_buf = buf;
}

kiln_status_t kiln_machine_sample(kiln_pool_t* pool, int threads, kiln_machine_probe_t probe,
                                  double* out) {
  *out = 0;
  KILN_CHECK_ARG(threads >= 1 && threads <= 256 && (threads == 1 || pool),
                 "kiln_machine_sample: %d threads (1..256, a pool for more than 1)", threads);
  if (probe == KILN_MACHINE_PROBE_READ) {
    pthread_once(&kiln_machine_sample_once, kiln_machine_sample_init);
    if (!kiln_machine_sample_buf) return kiln_status_make(KILN_OUT_OF_MEMORY, "bandwidth buffer");
    *out = kiln_machine_read_once(pool, threads, kiln_machine_sample_buf, KILN_MACHINE_READ_FLOATS) / 1e9;
    return kiln_ok();
  }
  KILN_CHECK_ARG(probe == KILN_MACHINE_PROBE_FMA, "kiln_machine_sample: unknown probe %d", (int)probe);
  kiln_machine_job_t j;
  j.fn = kiln_machine_fma_probe();
  j.iters = kiln_machine_calibrate(j.fn);
  double t0 = kiln_machine_now(), ops = 0;
  if (threads > 1)
    kiln_pool_parallel_for(pool, (size_t)threads, kiln_machine_probe_task, &j);
  else
    kiln_machine_probe_task(&j, 0, 0);
  double dt = kiln_machine_now() - t0;
  for (int t = 0; t < threads; ++t) ops += j.ops[t];
  *out = dt > 0 ? ops / dt / 1e9 : 0;
  return kiln_ok();
}

/* ---- static facts ---------------------------------------------------------- */

/* Online CPUs counting SMT siblings once: each core by its first sibling in
 * sysfs (cpuN/topology/thread_siblings_list starts with N). `cpus` (and so
 * no change) where sysfs does not say. */
static int kiln_machine_physical_cores(int cpus) {
  int cores = 0, known = 0;
  for (int c = 0; c < cpus && c < 4096; ++c) {
    char path[128];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    int first = -1;
    if (fscanf(f, "%d", &first) == 1) {
      ++known;
      cores += first == c;
    }
    fclose(f);
  }
  return known == cpus && cores > 0 ? cores : cpus;
}

static void kiln_machine_static(kiln_pool_t* pool, kiln_machine_t* m) {
  memset(m, 0, sizeof(*m));
  snprintf(m->cpu_model, sizeof m->cpu_model, "unknown");
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) && strncmp(line, "Model name", 10)) continue;
      char* c = strchr(line, ':');
      if (!c) continue;
      c += 1 + (c[1] == ' ');
      c[strcspn(c, "\n")] = 0;
      snprintf(m->cpu_model, sizeof m->cpu_model, "%s", c);
      break;
    }
    fclose(f);
  }
  m->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
  m->physical_cores = kiln_machine_physical_cores(m->cores);
  m->threads = kiln_pool_size(pool);
#ifdef _SC_LEVEL1_DCACHE_SIZE
  m->l1d_bytes = sysconf(_SC_LEVEL1_DCACHE_SIZE);
  m->l2_bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  m->l3_bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  const kiln_cpu_features_t* c = kiln_cpu_features();
  m->avx2 = c->avx2_fma;
  m->avx512 = c->avx512;
  m->avx512_bf16 = c->avx512_bf16;
  m->avx512_vnni = c->avx512_vnni;
  m->avx512_vbmi = c->avx512_vbmi;
  m->amx_bf16 = c->amx_bf16;
  m->amx_int8 = c->amx_int8;
  snprintf(m->isa, sizeof m->isa, "%s", kiln_cpu_isa_name(kiln_cpu_isa()));
  snprintf(m->bf16_engine, sizeof m->bf16_engine, "%s", kiln_cpu_bf16_name(kiln_cpu_bf16()));
}

/* The measured figures, as the cache file stores them. */
#define KILN_MACHINE_NUMBERS(X)                                                     \
  X(fma_gflops_1) X(fma_gflops) X(bf16_gflops_1) X(bf16_gflops) X(int8_gops_1) \
  X(int8_gops) X(bandwidth_gbs_1) X(bandwidth_gbs)

/* 1 once this process has measured (kiln_machine_get). */
static atomic_int kiln_machine_measured_here;

int kiln_machine_busy(const kiln_machine_t* m) {
  int usable = m->threads < m->physical_cores ? m->threads : m->physical_cores;
  if (usable < 1) usable = 1;
  double fma = m->fma_gflops_1 * usable;
  return m->others_load > 0.15 || m->fma_gflops < 0.5 * fma || m->fma_gflops > 1.3 * fma ||
         m->bandwidth_gbs < 0.8 * m->bandwidth_gbs_1;
}

/* Seconds of CPU time the whole machine has spent busy (/proc/stat's
 * first line: all but idle and iowait), or -1 where there is no such file. */
static double kiln_machine_cpu_busy_s(void) {
  FILE* f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[8] = {0};
  int got = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (got < 4 || hz <= 0) return -1;
  /* user nice system idle iowait irq softirq steal */
  return (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / (double)hz;
}

static double kiln_machine_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Each figure of m raised to b's where b's is higher. */
static void kiln_machine_merge(kiln_machine_t* m, const kiln_machine_t* b) {
#define K(name) \
  if (b->name > m->name) m->name = b->name;
  KILN_MACHINE_NUMBERS(K)
#undef K
}

/* One measurement of every figure into m (the static facts already there);
 * buf is the bandwidth probe's buffer of n floats. Also m->others_load: the
 * share of all cores' time that other processes were busy meanwhile. */
static void kiln_machine_figures(kiln_pool_t* pool, const float* buf, size_t n, kiln_machine_t* m);

static void kiln_machine_measure_once(kiln_pool_t* pool, const float* buf, size_t n,
                                      kiln_machine_t* m) {
  double busy0 = kiln_machine_cpu_busy_s(), own0 = kiln_machine_clock(CLOCK_PROCESS_CPUTIME_ID);
  double wall0 = kiln_machine_now();
  kiln_machine_figures(pool, buf, n, m);
  double busy1 = kiln_machine_cpu_busy_s(), own1 = kiln_machine_clock(CLOCK_PROCESS_CPUTIME_ID);
  double wall = kiln_machine_now() - wall0;
  m->others_load = 0;
  if (busy0 >= 0 && busy1 >= 0 && wall > 0 && m->cores > 0) {
    double others = (busy1 - busy0) - (own1 - own0);
    m->others_load = others > 0 ? others / (wall * m->cores) : 0;
  }
}

static void kiln_machine_figures(kiln_pool_t* pool, const float* buf, size_t n, kiln_machine_t* m) {
  int all = m->threads > 256 ? 256 : m->threads;
  const kiln_cpu_features_t* c = kiln_cpu_features();
  kiln_machine_probe_fn fma = kiln_machine_fma_probe();
#if defined(KILN_HAVE_X86) && defined(__GNUC__)
  if (c->avx512 && c->avx512_bf16) {
    m->bf16_gflops_1 = kiln_machine_rate(pool, 1, kiln_machine_bf16) / 1e9;
    m->bf16_gflops = kiln_machine_rate(pool, all, kiln_machine_bf16) / 1e9;
  }
  if (c->avx512 && c->avx512_vnni) {
    m->int8_gops_1 = kiln_machine_rate(pool, 1, kiln_machine_int8) / 1e9;
    m->int8_gops = kiln_machine_rate(pool, all, kiln_machine_int8) / 1e9;
  }
#else
  (void)c;
#endif
  m->fma_gflops_1 = kiln_machine_rate(pool, 1, fma) / 1e9;
  m->fma_gflops = kiln_machine_rate(pool, all, fma) / 1e9;
  m->bandwidth_gbs_1 = kiln_machine_bandwidth(pool, 1, buf, n) / 1e9;
  m->bandwidth_gbs = kiln_machine_bandwidth(pool, all, buf, n) / 1e9;
}

kiln_status_t kiln_machine_measure(kiln_pool_t* pool, kiln_machine_t* m) {
  kiln_machine_static(pool, m);
  size_t n = KILN_MACHINE_READ_FLOATS;
  float* buf = NULL;
  if (posix_memalign((void**)&buf, 64, n * sizeof(float)) || !buf)
    return kiln_status_make(KILN_OUT_OF_MEMORY, "bandwidth buffer");
  for (size_t i = 0; i < n; ++i) buf[i] = 1.0f;
  kiln_machine_measure_once(pool, buf, n, m);
  /* A busy reading is taken again, up to twice, and the attempts merged
   * (kiln_machine.h): a neighbour that held a core for one attempt rarely
   * holds it for all three. */
  for (int attempt = 1; attempt < 3 && kiln_machine_busy(m); ++attempt) {
    kiln_machine_t again = *m;
    kiln_machine_measure_once(pool, buf, n, &again);
    kiln_machine_merge(m, &again);
    /* The merged figures are as clean as the quietest attempt. */
    if (again.others_load < m->others_load) m->others_load = again.others_load;
  }
  free(buf);
  /* To the cache file's precision (kiln_machine_write_cache: 3 decimals),
   * so that a process that measured sees the figures every later one reads
   * back: a report and kiln.machine() agree whichever of them measured. */
#define K(name) m->name = round(m->name * 1000.0) / 1000.0;
  KILN_MACHINE_NUMBERS(K)
#undef K
  m->busy = kiln_machine_busy(m);
  atomic_store(&kiln_machine_measured_here, 1);
  m->measured = 1;
  m->measured_at = (int64_t)time(NULL);
  return kiln_ok();
}

/* ---- the cache file ------------------------------------------------------------ */

int kiln_machine_cache_path(char* out, size_t size) {
  const char* x = getenv("KILN_MACHINE_CACHE");
  if (x && *x) return snprintf(out, size, "%s", x) < (int)size;
  const char* xdg = getenv("XDG_CACHE_HOME");
  const char* home = getenv("HOME");
  if (xdg && *xdg) return snprintf(out, size, "%s/kiln/machine.json", xdg) < (int)size;
  if (home && *home) return snprintf(out, size, "%s/.cache/kiln/machine.json", home) < (int)size;
  return 0;
}

/* The file is kiln's own JSON: one "key": value per line. It is reused only
 * when it was measured on this CPU model, ISA level and thread count. */
static int kiln_machine_read_cache(const char* path, kiln_machine_t* m) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  char line[512], model[128] = "", isa[32] = "";
  int threads = -1, numbers = 0, busy = -1;
  long long at = 0;
  while (fgets(line, sizeof line, f)) {
    char key[64];
    double v;
    if (sscanf(line, " \"cpu_model\": \"%127[^\"]\"", model) == 1) continue;
    if (sscanf(line, " \"isa\": \"%31[^\"]\"", isa) == 1) continue;
    if (sscanf(line, " \"threads\": %d", &threads) == 1) continue;
    if (sscanf(line, " \"measured_at\": %lld", &at) == 1) continue;
    if (sscanf(line, " \"busy\": %d", &busy) == 1) continue;
    if (sscanf(line, " \"%63[^\"]\": %lf", key, &v) != 2) continue;
#define K(name)                   \
  if (!strcmp(key, #name)) {      \
    m->name = v;                  \
    ++numbers;                    \
  }
    KILN_MACHINE_NUMBERS(K)
#undef K
  }
  fclose(f);
  if (strcmp(model, m->cpu_model) || strcmp(isa, m->isa) || threads != m->threads || numbers < 8 ||
      m->fma_gflops <= 0 || m->bandwidth_gbs <= 0)
    return 0;
  m->measured_at = at;
  /* A file without the mark (kiln before it checked for load) counts as
   * busy: measured once more and merged. */
  m->busy = busy != 0 || kiln_machine_busy(m);
  return 1;
}

static void kiln_machine_write_cache(const char* path, const kiln_machine_t* m) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  for (char* s = dir + 1; *s; ++s) /* mkdir -p of the file's directory */
    if (*s == '/') {
      *s = 0;
      mkdir(dir, 0755);
      *s = '/';
    }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "{\n  \"cpu_model\": \"%s\",\n  \"isa\": \"%s\",\n  \"threads\": %d,\n", m->cpu_model,
          m->isa, m->threads);
  fprintf(f, "  \"measured_at\": %lld,\n", (long long)m->measured_at);
  fprintf(f, "  \"busy\": %d,\n", m->busy);
#define K(name) fprintf(f, "  \"%s\": %.3f,\n", #name, m->name);
  KILN_MACHINE_NUMBERS(K)
#undef K
  fprintf(f, "  \"format\": 1\n}\n");
  int bad = fclose(f) != 0;
  if (bad || rename(tmp, path)) remove(tmp);
}

kiln_status_t kiln_machine_get(kiln_pool_t* pool, int remeasure, kiln_machine_t* out) {
  kiln_machine_static(pool, out);
  char path[4096];
  int have_path = kiln_machine_cache_path(path, sizeof path);
  if (have_path) snprintf(out->cache_path, sizeof out->cache_path, "%s", path);
  kiln_machine_t cached = *out;
  int have_cache = !remeasure && have_path && kiln_machine_read_cache(path, &cached);
  /* A busy record is measured again once per process: after that every
   * call sees the same figures (a report and kiln.machine() agree). */
  if (have_cache && (!cached.busy || atomic_load(&kiln_machine_measured_here))) {
    *out = cached;
    out->measured = 0;
    return kiln_ok();
  }
  char keep[sizeof out->cache_path];
  memcpy(keep, out->cache_path, sizeof keep);
  KILN_RETURN_IF_ERROR(kiln_machine_measure(pool, out));
  memcpy(out->cache_path, keep, sizeof keep);
  /* A busy cache: this measurement and the cached one merged (kiln_machine.h). */
  if (have_cache) {
    kiln_machine_merge(out, &cached);
    out->busy = kiln_machine_busy(out);
  }
  if (have_path) kiln_machine_write_cache(path, out);
  return kiln_ok();
}
