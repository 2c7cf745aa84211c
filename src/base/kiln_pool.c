/* Thread pool: a generation counter announces work; workers take task
 * indices from an atomic counter; the caller waits for a done count. */
#include "base/kiln_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

struct kiln_pool_s {
  int n_threads; /* including the caller */
  pthread_t* workers;
  pthread_mutex_t mutex;
  pthread_cond_t wake;
  atomic_uint generation; /* bumped once per parallel_for */
  atomic_int stop;
  /* The current job. Written before `generation` is bumped. */
  kiln_pool_task_fn fn;
  void* ctx;
  size_t n_tasks;
  atomic_size_t next_task;
  atomic_int n_active; /* workers still inside the current job */
};

typedef struct {
  kiln_pool_t* pool;
  int index;
} kiln_pool_worker_arg_t;

static void kiln_pool_run_tasks(kiln_pool_t* pool, int thread) {
  for (;;) {
    size_t t = atomic_fetch_add_explicit(&pool->next_task, 1, memory_order_relaxed);
    if (t >= pool->n_tasks) break;
    pool->fn(pool->ctx, t, thread);
  }
}

static void* kiln_pool_worker_main(void* p) {
  kiln_pool_worker_arg_t arg = *(kiln_pool_worker_arg_t*)p;
  free(p);
  kiln_pool_t* pool = arg.pool;
  /* Workers start before any job: generation 0 is the one they have seen.
   * (Reading it here would race with a job posted before this thread ran.) */
  unsigned seen = 0;
  for (;;) {
    /* Spin a little: kernels in one model run follow each other closely. */
    unsigned gen = seen;
    for (int spin = 0; spin < 20000; ++spin) {
      gen = atomic_load_explicit(&pool->generation, memory_order_acquire);
      if (gen != seen || atomic_load(&pool->stop)) break;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (gen == seen && !atomic_load(&pool->stop)) {
      pthread_mutex_lock(&pool->mutex);
      while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
        pthread_cond_wait(&pool->wake, &pool->mutex);
      pthread_mutex_unlock(&pool->mutex);
    }
    if (atomic_load(&pool->stop)) return NULL;
    seen = gen;
    kiln_pool_run_tasks(pool, arg.index);
    atomic_fetch_sub_explicit(&pool->n_active, 1, memory_order_release);
  }
}

kiln_status_t kiln_pool_create(int n_threads, kiln_pool_t** out_pool) {
  *out_pool = NULL;
  KILN_CHECK_ARG(n_threads >= 1 && n_threads <= 1024, "thread count %d is out of range",
                 n_threads);
  kiln_pool_t* pool = calloc(1, sizeof(*pool));
  if (!pool) return kiln_status_make(KILN_OUT_OF_MEMORY, "thread pool");
  pool->n_threads = n_threads;
  pthread_mutex_init(&pool->mutex, NULL);
  pthread_cond_init(&pool->wake, NULL);
  if (n_threads > 1) {
    pool->workers = calloc((size_t)n_threads - 1, sizeof(pthread_t));
    if (!pool->workers) {
      kiln_pool_release(pool);
      return kiln_status_make(KILN_OUT_OF_MEMORY, "thread pool");
    }
  }
  for (int i = 1; i < n_threads; ++i) {
    kiln_pool_worker_arg_t* arg = malloc(sizeof(*arg));
    if (arg) {
      arg->pool = pool;
      arg->index = i;
    }
    if (!arg || pthread_create(&pool->workers[i - 1], NULL, kiln_pool_worker_main, arg)) {
      free(arg);
      pool->n_threads = i; /* only i-1 workers exist; release joins those */
      kiln_pool_release(pool);
      return kiln_status_make(KILN_INTERNAL, "could not start thread %d of the pool", i);
    }
  }
  *out_pool = pool;
  return kiln_ok();
}

void kiln_pool_release(kiln_pool_t* pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mutex);
  atomic_store(&pool->stop, 1);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  for (int i = 1; i < pool->n_threads; ++i) pthread_join(pool->workers[i - 1], NULL);
  free(pool->workers);
  pthread_cond_destroy(&pool->wake);
  pthread_mutex_destroy(&pool->mutex);
  free(pool);
}

int kiln_pool_size(const kiln_pool_t* pool) { return pool ? pool->n_threads : 1; }

void kiln_pool_parallel_for(kiln_pool_t* pool, size_t n_tasks, kiln_pool_task_fn fn,
                            void* ctx) {
  if (n_tasks == 0) return;
  if (!pool || pool->n_threads == 1 || n_tasks == 1) {
    for (size_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  pool->fn = fn;
  pool->ctx = ctx;
  pool->n_tasks = n_tasks;
  atomic_store_explicit(&pool->next_task, 0, memory_order_relaxed);
  atomic_store_explicit(&pool->n_active, pool->n_threads - 1, memory_order_relaxed);
  pthread_mutex_lock(&pool->mutex);
  atomic_fetch_add_explicit(&pool->generation, 1, memory_order_release);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  kiln_pool_run_tasks(pool, 0);
  while (atomic_load_explicit(&pool->n_active, memory_order_acquire) > 0) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

static kiln_pool_t* kiln_pool_default_;
static pthread_once_t kiln_pool_default_once_ = PTHREAD_ONCE_INIT;

static void kiln_pool_default_init(void) {
  int n = 0;
  const char* env = getenv("KILN_NUM_THREADS");
  if (env) n = atoi(env);
  if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (n <= 0) n = 1;
  kiln_status_t s = kiln_pool_create(n, &kiln_pool_default_);
  kiln_status_free(s);
}

kiln_pool_t* kiln_pool_default(void) {
  pthread_once(&kiln_pool_default_once_, kiln_pool_default_init);
  return kiln_pool_default_;
}
