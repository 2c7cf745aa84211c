/* Tests of the base layer: status values, the thread pool and the block
 * cache. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/kiln_block_cache.h"
#include "base/kiln_pool.h"
#include "base/kiln_status.h"
#include "kiln_test.h"

void kiln_test_suite_status(void) {
  KILN_EXPECT(kiln_ok() == NULL, "ok is NULL");
  kiln_status_t s = kiln_status_make(KILN_INVALID_ARGUMENT, "input %d is %s", 3, "bad");
  KILN_EXPECT(kiln_status_code(s) == KILN_INVALID_ARGUMENT, "code kept");
  KILN_EXPECT(!strcmp(kiln_status_message(s), "input 3 is bad"), "message: %s",
              kiln_status_message(s));
  s = kiln_status_annotate(s, "while loading %s", "x.kiln");
  KILN_EXPECT(!strcmp(kiln_status_message(s), "while loading x.kiln: input 3 is bad"),
              "annotated: %s", kiln_status_message(s));
  KILN_EXPECT(kiln_status_code(s) == KILN_INVALID_ARGUMENT, "code survives annotate");
  kiln_status_free(s);
  KILN_EXPECT(kiln_status_annotate(NULL, "x") == NULL, "annotating OK stays OK");
}

typedef struct {
  atomic_int hits[1000];
} pool_ctx_t;

static atomic_int pool_max_thread;

static void pool_task(void* ctx, size_t task, int thread) {
  int seen = atomic_load(&pool_max_thread);
  while (thread > seen && !atomic_compare_exchange_weak(&pool_max_thread, &seen, thread)) {
  }
  atomic_fetch_add(&((pool_ctx_t*)ctx)->hits[task], 1);
}

/* pool_task taking 100 us: every worker awake claims some of a job's. */
static void pool_task_slow(void* ctx, size_t task, int thread) {
  pool_task(ctx, task, thread);
  struct timespec ts = {0, 100 * 1000};
  nanosleep(&ts, NULL);
}

/* Stand-ins for a host runtime's parallel region (GOMP_parallel's
 * signature): a full team of pthreads, and a team of one (what a nested
 * region gets). */
typedef struct {
  void (*body)(void*);
  void* data;
} host_call_t;

static void* host_thread_main(void* p) {
  host_call_t* c = p;
  c->body(c->data);
  return NULL;
}

static void host_team(void (*body)(void*), void* data, unsigned n, unsigned flags) {
  (void)flags;
  pthread_t t[8];
  host_call_t call = {body, data};
  unsigned started = 0;
  for (unsigned i = 1; i < n && i < 8; ++i)
    started += pthread_create(&t[started], NULL, host_thread_main, &call) == 0;
  body(data);
  for (unsigned i = 0; i < started; ++i) pthread_join(t[i], NULL);
}

static void host_single(void (*body)(void*), void* data, unsigned n, unsigned flags) {
  (void)n;
  (void)flags;
  body(data);
}

/* Every task runs once, with a thread index inside the pool, in the host's
 * regions whatever size of team the host gives. */
static void pool_check_host(kiln_pool_host_parallel_fn host, const char* name) {
  kiln_pool_set_host_parallel(host, NULL);
  KILN_EXPECT(kiln_pool_host_parallel() == host, "%s: host region set", name);
  for (int threads = 2; threads <= 3; ++threads) {
    kiln_pool_t* pool = NULL;
    KILN_EXPECT_OK(kiln_pool_create(threads, &pool));
    static pool_ctx_t ctx;
    int bad_jobs = 0;
    atomic_store(&pool_max_thread, 0);
    for (int round = 0; pool && round < 200; ++round) {
      memset(&ctx, 0, sizeof(ctx));
      size_t n = (size_t)(round * 37 % 1000);
      kiln_pool_parallel_for(pool, n, pool_task, &ctx);
      int bad = 0;
      for (size_t i = 0; i < 1000; ++i) bad += atomic_load(&ctx.hits[i]) != (i < n);
      bad_jobs += bad != 0;
    }
    KILN_EXPECT(bad_jobs == 0, "%s, %d threads: %d jobs ran tasks wrongly", name, threads, bad_jobs);
    KILN_EXPECT(atomic_load(&pool_max_thread) < threads, "%s: thread index %d in a pool of %d",
                name, atomic_load(&pool_max_thread), threads);
    kiln_pool_release(pool);
  }
  kiln_pool_set_host_parallel(NULL, NULL);
}

/* The host's thread count (torch.set_num_threads) limits the default pool,
 * in the host's regions or on its own workers (a host whose threads sleep
 * between regions: workers past the count claim nothing), never an
 * explicitly sized pool, and never raises the default pool past its own
 * size. */
static atomic_int host_threads_now;
static int host_threads(void) { return atomic_load(&host_threads_now); }

static void pool_check_host_threads(void) {
  kiln_pool_t* def = kiln_pool_default();
  kiln_pool_t* three = NULL;
  KILN_EXPECT_OK(kiln_pool_create(3, &three));
  if (!def || !three) {
    kiln_pool_release(three);
    return;
  }
  int own = kiln_pool_size(def);
  static pool_ctx_t ctx;
  for (int mode = 0; mode < 2; ++mode) {
  kiln_pool_set_host_parallel(mode ? NULL : host_team, host_threads);
  for (int h = 1; h <= own + 1; ++h) {
    atomic_store(&host_threads_now, h);
    int want = h < own ? h : own;
    KILN_EXPECT(kiln_pool_size(def) == want, "host at %d threads: default pool size %d, want %d",
                h, kiln_pool_size(def), want);
    KILN_EXPECT(kiln_pool_size(three) == 3, "an explicit pool keeps its size: %d",
                kiln_pool_size(three));
    memset(&ctx, 0, sizeof(ctx));
    atomic_store(&pool_max_thread, 0);
    kiln_pool_parallel_for(def, 100, mode ? pool_task_slow : pool_task, &ctx);
    int bad = 0;
    for (size_t i = 0; i < 1000; ++i) bad += atomic_load(&ctx.hits[i]) != (i < 100);
    KILN_EXPECT(bad == 0, "host at %d threads (%s): %d tasks ran wrongly", h,
                mode ? "own workers" : "host team", bad);
    KILN_EXPECT(atomic_load(&pool_max_thread) < want, "host at %d threads (%s): thread index %d",
                h, mode ? "own workers" : "host team", atomic_load(&pool_max_thread));
  }
  atomic_store(&host_threads_now, 0); /* a nonsense count is ignored */
  KILN_EXPECT(kiln_pool_size(def) == own, "host count 0: size %d", kiln_pool_size(def));
  }
  kiln_pool_set_host_parallel(NULL, NULL);
  atomic_store(&host_threads_now, 1);
  KILN_EXPECT(kiln_pool_size(def) == own, "own threads: the host's count does not apply");
  kiln_pool_release(three);
}

/* A host team whose second thread arrives 50 ms late, when the caller has
 * run every task: the region returns only then (an OpenMP closing barrier).
 * The wait counter must see that wait; the profiler reports it apart from
 * the kernel's time (Model.profile in host-OpenMP mode had put such waits
 * into the node's time). */
static void* host_late_main(void* p) {
  struct timespec ts = {0, 50 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return host_thread_main(p);
}

static void host_late(void (*body)(void*), void* data, unsigned n, unsigned flags) {
  (void)flags;
  pthread_t t;
  host_call_t call = {body, data};
  int started = n > 1 && pthread_create(&t, NULL, host_late_main, &call) == 0;
  body(data);
  if (started) pthread_join(t, NULL);
}

static void pool_check_host_wait(void) {
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(2, &pool));
  if (!pool) return;
  static pool_ctx_t ctx;
  memset(&ctx, 0, sizeof(ctx));
  kiln_pool_set_host_parallel(host_late, NULL);
  uint64_t wait = 0;
  kiln_pool_set_wait_counter(&wait);
  kiln_pool_parallel_for(pool, 4, pool_task, &ctx);
  kiln_pool_set_wait_counter(NULL);
  int bad = 0;
  for (size_t i = 0; i < 8; ++i) bad += atomic_load(&ctx.hits[i]) != (i < 4);
  KILN_EXPECT(bad == 0, "late host team: %d tasks ran wrongly", bad);
  /* 50 ms of sleep; the tasks take microseconds: a bound of 25 ms leaves the
   * caller 25 ms of being descheduled before this could fail. */
  KILN_EXPECT(wait >= 25000000u && wait < 5000000000u, "late host team: wait %.3f ms, want ~50",
              (double)wait / 1e6);
  /* Off: nothing is counted. */
  uint64_t before = wait;
  kiln_pool_parallel_for(pool, 4, pool_task, &ctx);
  KILN_EXPECT(wait == before, "no counter set: the wait is not counted");
  kiln_pool_set_host_parallel(NULL, NULL);
  kiln_pool_release(pool);
}

/* A busy machine: a thread that holds its task for milliseconds while the
 * caller waits (as a descheduled worker does) makes the pool run its jobs
 * on the caller alone for a while, every task still run once; later it
 * uses its threads again. Own threads and a host team alike. */
static pthread_t stall_main;

static void spin_task(void* ctx, size_t task, int thread) {
  volatile unsigned x = 0;
  for (unsigned i = 0; i < 100000; ++i) x += i;
  pool_task(ctx, task, thread);
}

/* The caller's first task waits (up to 5 s) for another thread to start
 * one; the others' tasks sleep stall_ns plus twice how late they started
 * after the job did. So the caller waits for them longer than it worked
 * however late the OS runs them (pool_check_stall sets stall_ns from how
 * long spin_task takes here, at least 5 ms, so an emulated run's caller
 * also waits longer than it worked). Before, the caller spun and the
 * others slept a fixed stall_ns: on a loaded machine the late start made
 * the caller's spins the longer part, no strike came, and 200 jobs ran
 * without a spell (4 of 40 runs beside two busy loops). */
static long stall_ns;
static atomic_llong stall_job_start;
static atomic_int stall_others;

static long long stall_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void stall_task(void* ctx, size_t task, int thread) {
  if (!pthread_equal(pthread_self(), stall_main)) {
    atomic_store(&stall_others, 1);
    long long ns = stall_ns + 2 * (stall_now_ns() - atomic_load(&stall_job_start));
    struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    nanosleep(&ts, NULL);
    pool_task(ctx, task, thread);
  } else {
    pool_task(ctx, task, thread);
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 5000 && !atomic_load(&stall_others); ++i) nanosleep(&ms, NULL);
  }
}

/* pool_task; task 0 then waits (up to 5 s) until a task has run on a
 * thread of index > 0: a pool that dispatches to its threads gets there
 * however late the OS runs them; one that runs the job serially does not. */
static void meet_task(void* ctx, size_t task, int thread) {
  pool_task(ctx, task, thread);
  struct timespec ms = {0, 1000000};
  for (int i = 0; task == 0 && i < 5000 && atomic_load(&pool_max_thread) == 0; ++i)
    nanosleep(&ms, NULL);
}

static void pool_check_stall(kiln_pool_host_parallel_fn host, const char* name) {
  kiln_pool_set_host_parallel(host, NULL);
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(2, &pool));
  if (!pool) return;
  kiln_pool_assume_busy_machine(pool, 1); /* the sleeping thread stands in for a busy machine */
  stall_main = pthread_self();
  static pool_ctx_t ctx;
  /* A job's 8 spins on the caller alone, times 4 (at least 5 ms). */
  {
    struct timespec t0, t1;
    memset(&ctx, 0, sizeof(ctx));
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < 8; ++i) spin_task(&ctx, i, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ns = (t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec);
    stall_ns = 4 * ns > 5000000L ? 4 * ns : 5000000L;
  }
  int bad = 0, jobs = 0;
  for (; jobs < 200 && !kiln_pool_is_serial(pool); ++jobs) {
    memset(&ctx, 0, sizeof(ctx));
    atomic_store(&stall_others, 0);
    atomic_store(&stall_job_start, stall_now_ns());
    kiln_pool_parallel_for(pool, 8, stall_task, &ctx);
    for (size_t i = 0; i < 8; ++i) bad += atomic_load(&ctx.hits[i]) != 1;
  }
  KILN_EXPECT(kiln_pool_is_serial(pool) && kiln_pool_serial_spells(pool) == 1,
              "%s: serial after %d stalled jobs (spells %lld)", name, jobs,
              (long long)kiln_pool_serial_spells(pool));
  /* In the spell (100 ms): every task on the caller, thread index 0. Held
   * only when the pool is still serial after the job (so it was at its
   * start: a serial job starts no spell): on a loaded machine the caller
   * can lose the spell's 100 ms before the job begins. */
  atomic_store(&pool_max_thread, 0);
  memset(&ctx, 0, sizeof(ctx));
  kiln_pool_parallel_for(pool, 8, spin_task, &ctx);
  for (size_t i = 0; i < 8; ++i) bad += atomic_load(&ctx.hits[i]) != 1;
  KILN_EXPECT(!kiln_pool_is_serial(pool) || atomic_load(&pool_max_thread) == 0,
              "%s: a serial spell ran on thread %d", name, atomic_load(&pool_max_thread));
  /* After it (100 ms for a first spell): the threads work again. The job's
   * first task waits for another thread to run one (meet_task), so the
   * check does not depend on the other thread being scheduled within a
   * job's few microseconds: on a loaded machine it often was not, the
   * caller's waits made new spells, and 200 jobs ran serial (13 of 30 runs
   * failed beside two busy loops). */
  struct timespec ts = {0, 150000000};
  nanosleep(&ts, NULL);
  KILN_EXPECT(!kiln_pool_is_serial(pool), "%s: the spell ended", name);
  atomic_store(&pool_max_thread, 0);
  memset(&ctx, 0, sizeof(ctx));
  kiln_pool_parallel_for(pool, 64, meet_task, &ctx);
  for (size_t i = 0; i < 64; ++i) bad += atomic_load(&ctx.hits[i]) != 1;
  int used = atomic_load(&pool_max_thread) > 0;
  KILN_EXPECT(used, "%s: threads used again after the spell", name);
  KILN_EXPECT(bad == 0, "%s: %d tasks ran a wrong number of times", name, bad);
  kiln_pool_release(pool);
  kiln_pool_set_host_parallel(NULL, NULL);
}

void kiln_test_suite_pool(void) {
  for (int threads = 1; threads <= 3; ++threads) {
    kiln_pool_t* pool = NULL;
    KILN_EXPECT_OK(kiln_pool_create(threads, &pool));
    if (!pool) continue;
    static pool_ctx_t ctx;
    for (int round = 0; round < 50; ++round) {
      memset(&ctx, 0, sizeof(ctx));
      size_t n = (size_t)(round * 20 % 1000);
      kiln_pool_parallel_for(pool, n, pool_task, &ctx);
      int bad = 0;
      for (size_t i = 0; i < 1000; ++i) bad += atomic_load(&ctx.hits[i]) != (i < n);
      KILN_EXPECT(bad == 0, "%d threads, %zu tasks: %d tasks ran a wrong number of times",
                  threads, n, bad);
    }
    kiln_pool_release(pool);
  }
  /* Oversubscribed (more threads than cores), back-to-back small jobs that
   * alternate between two contexts: a worker waking late must never run a
   * task of a finished job or with another job's context. */
  {
    kiln_pool_t* busy = NULL;
    KILN_EXPECT_OK(kiln_pool_create(6, &busy));
    static pool_ctx_t pair[2];
    int bad_jobs = 0;
    for (int job = 0; busy && job < 5000; ++job) {
      pool_ctx_t* c = &pair[job & 1];
      size_t n = (size_t)(job % 7) + 1;
      for (size_t i = 0; i < 8; ++i) atomic_store(&c->hits[i], 0);
      kiln_pool_parallel_for(busy, n, pool_task, c);
      int bad = 0;
      for (size_t i = 0; i < 8; ++i) bad += atomic_load(&c->hits[i]) != (i < n);
      bad_jobs += bad != 0;
    }
    KILN_EXPECT(bad_jobs == 0, "oversubscribed pool: %d of 5000 jobs ran tasks wrongly", bad_jobs);
    kiln_pool_release(busy);
  }
  pool_check_host(host_team, "host team");
  pool_check_host(host_single, "host team of one");
  pool_check_host_threads();
  pool_check_host_wait();
  pool_check_stall(NULL, "own threads");
  pool_check_stall(host_team, "host team");
  KILN_EXPECT(kiln_pool_host_parallel() == NULL, "own threads again");
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_ERROR(kiln_pool_create(0, &pool), KILN_INVALID_ARGUMENT);
  KILN_EXPECT(pool == NULL, "no pool on failure");
}

/* ---- block cache ---------------------------------------------------------- */

typedef struct {
  kiln_block_cache_t* cache;
  atomic_int bad;
} kiln_test_bc_ctx_t;

/* Each task takes and gives back blocks of a few sizes, writing its mark
 * into every page it holds and checking it is still there before the block
 * goes back: two holders of one block would overwrite each other's mark. */
static void kiln_test_bc_task(void* p, size_t task, int thread) {
  (void)thread;
  kiln_test_bc_ctx_t* c = p;
  for (int r = 0; r < 200; ++r) {
    size_t bytes = (size_t)(1 + (task + (size_t)r) % 3) * 10000;
    void* b = NULL;
    kiln_status_t s = kiln_block_cache_get(c->cache, bytes, &b);
    if (s || !b) {
      kiln_status_free(s);
      atomic_fetch_add(&c->bad, 1);
      continue;
    }
    unsigned char* u = b;
    for (size_t i = 0; i < bytes; i += 4096) u[i] = (unsigned char)task;
    for (size_t i = 0; i < bytes; i += 4096)
      if (u[i] != (unsigned char)task) atomic_fetch_add(&c->bad, 1);
    kiln_block_cache_put(c->cache, b, bytes);
  }
}

void kiln_test_suite_block_cache(void) {
  kiln_block_cache_t* c = kiln_block_cache_create((size_t)64 << 10);
  KILN_EXPECT(c != NULL, "create");
  if (!c) return;
  void *a = NULL, *b = NULL, *d = NULL;
  KILN_EXPECT_OK(kiln_block_cache_get(c, 5000, &a));
  KILN_EXPECT(a && (uintptr_t)a % 64 == 0, "aligned block");
  memset(a, 1, 5000);
  kiln_block_cache_put(c, a, 5000);
  kiln_block_cache_stats_t st = kiln_block_cache_stats(c);
  KILN_EXPECT(st.idle_blocks == 1 && st.idle_bytes == 8192, "one idle block of 2 pages: %zu %zu",
              st.idle_blocks, st.idle_bytes);
  /* Same page count: the same block comes back. Another size: a new one. */
  KILN_EXPECT_OK(kiln_block_cache_get(c, 8000, &b));
  KILN_EXPECT(b == a, "reused");
  KILN_EXPECT_OK(kiln_block_cache_get(c, 5000, &d));
  KILN_EXPECT(d && d != b, "a block out is not handed out twice");
  st = kiln_block_cache_stats(c);
  KILN_EXPECT(st.hits == 1 && st.misses == 2 && st.idle_blocks == 0, "hits %zu misses %zu",
              st.hits, st.misses);
  kiln_block_cache_put(c, b, 8000);
  kiln_block_cache_put(c, d, 5000);
  /* The cap (64 KiB) holds: a second 40 KiB block pushes the older ones
   * out, a block over the cap is freed at once. */
  void *e = NULL, *e2 = NULL, *f = NULL;
  KILN_EXPECT_OK(kiln_block_cache_get(c, 40 << 10, &e));
  KILN_EXPECT_OK(kiln_block_cache_get(c, 40 << 10, &e2));
  KILN_EXPECT_OK(kiln_block_cache_get(c, 100 << 10, &f));
  kiln_block_cache_put(c, e, 40 << 10);
  st = kiln_block_cache_stats(c);
  KILN_EXPECT(st.idle_bytes == 57344 && st.idle_blocks == 3, "%zu bytes in %zu blocks",
              st.idle_bytes, st.idle_blocks);
  kiln_block_cache_put(c, e2, 40 << 10);
  kiln_block_cache_put(c, f, 100 << 10);
  st = kiln_block_cache_stats(c);
  KILN_EXPECT(st.idle_bytes == (40 << 10) && st.idle_blocks == 1,
              "capped: %zu bytes in %zu blocks", st.idle_bytes, st.idle_blocks);
  void* h = NULL;
  KILN_EXPECT_OK(kiln_block_cache_get(c, 40 << 10, &h));
  KILN_EXPECT(h == e2, "the newest block stayed");
  kiln_block_cache_put(c, h, 40 << 10);
  kiln_block_cache_set_cap(c, 0);
  st = kiln_block_cache_stats(c);
  KILN_EXPECT(st.idle_bytes == 0 && st.idle_blocks == 0, "cap 0 frees everything");
  /* A size no allocator can give fails cleanly. */
  void* g = (void*)1;
  KILN_EXPECT_ERROR(kiln_block_cache_get(c, (size_t)-1, &g), KILN_OUT_OF_MEMORY);
  KILN_EXPECT(g == NULL, "no block on failure");
  KILN_EXPECT_ERROR(kiln_block_cache_get(c, (size_t)1 << 62, &g), KILN_OUT_OF_MEMORY);

  /* Concurrent use from two threads. */
  kiln_block_cache_set_cap(c, (size_t)1 << 20);
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_OK(kiln_pool_create(2, &pool));
  if (pool) {
    kiln_test_bc_ctx_t ctx = {c, 0};
    kiln_pool_parallel_for(pool, 8, kiln_test_bc_task, &ctx);
    KILN_EXPECT(atomic_load(&ctx.bad) == 0, "%d blocks shared or lost", atomic_load(&ctx.bad));
    st = kiln_block_cache_stats(c);
    KILN_EXPECT(st.hits > 0 && st.idle_bytes <= ((size_t)1 << 20), "hits %zu idle %zu", st.hits,
                st.idle_bytes);
    kiln_pool_release(pool);
  }
  kiln_block_cache_destroy(c);
}
