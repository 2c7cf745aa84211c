/* Tests of the base layer: status values and the thread pool. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

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
  kiln_pool_set_host_parallel(host);
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
  kiln_pool_set_host_parallel(NULL);
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
  KILN_EXPECT(kiln_pool_host_parallel() == NULL, "own threads again");
  kiln_pool_t* pool = NULL;
  KILN_EXPECT_ERROR(kiln_pool_create(0, &pool), KILN_INVALID_ARGUMENT);
  KILN_EXPECT(pool == NULL, "no pool on failure");
}
