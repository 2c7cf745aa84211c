/* Thread pool: a generation counter announces each job; threads claim task
 * indices from a counter tagged with the job's generation; the caller
 * returns when every task of its job has run.
 *
 * Completion counts tasks, not threads: a worker the OS has descheduled (the
 * machine is shared, or another runtime's threads spin on the same cores)
 * never holds up a job it has not claimed a task of; the caller simply runs
 * the remaining tasks itself. A worker that wakes late may see a later job's
 * fields; the generation tag in the claim counter makes it claim nothing
 * then (see kiln_pool_claim).
 *
 * Busy machines: a job still waits for a task a descheduled thread has
 * claimed (own pool), or for every team thread to arrive (the host's
 * OpenMP region), and the OS may not run that thread for a timeslice
 * (milliseconds). A model run is a hundred short jobs in a row, so on a
 * machine with more runnable threads than cores each job can pay that: a
 * decode step measured 30x slower at 2 threads than at 1 beside one busy
 * process. So the caller times its own part of each job: when it waits
 * longer than it worked and longer than KILN_POOL_STALL_NS while the
 * machine has more runnable threads than cores (a job's tasks can also be
 * uneven: a long wait on an idle machine is that, not a descheduled
 * thread), twice within KILN_POOL_STRIKE_WINDOW_NS, the pool runs its jobs
 * on the caller alone
 * for KILN_POOL_SERIAL_NS, then tries its threads again; a spell that
 * follows the last one within a second lasts twice as long (up to 16x), as
 * the machine is still busy. Tasks and their
 * count do not change (kiln_pool_size still says the pool's size), so the
 * results are the parallel run's. */
#include "base/kiln_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Task indices live in the low 32 bits of the claim word: at most this many
 * tasks per parallel job (larger counts run inline, which no kernel needs). */
#define KILN_POOL_MAX_TASKS 0xFFFFFFFEu
#define KILN_POOL_CLOSED 0xFFFFFFFFu

struct kiln_pool_s {
  int n_threads;   /* including the caller */
  int follow_host; /* the default pool: at most the host's thread count */
  pthread_t* workers;
  pthread_mutex_t mutex;
  pthread_mutex_t job; /* held by the caller of a parallel_for: one job at a time */
  pthread_cond_t wake;
  atomic_uint generation; /* bumped once per parallel_for */
  atomic_int stop;
  /* The current job. All accesses are sequentially consistent: the caller
   * closes the claim word before rewriting these, so a claim that succeeds
   * saw this job's fields (a torn read implies a failed claim). */
  _Atomic(kiln_pool_task_fn) fn;
  _Atomic(void*) ctx;
  atomic_size_t n_tasks;
  /* Workers of index >= this claim nothing from the current job: its
   * caller sized per-thread scratch for that many (kiln_pool_size, which
   * the default pool lowers to the host's thread count). */
  atomic_int job_threads;
  _Atomic uint64_t claim; /* generation << 32 | next task index */
  atomic_size_t done;     /* tasks of the current job finished */
  /* Contention (see the top): jobs run on the caller until serial_until
   * (ns, CLOCK_MONOTONIC); strikes counted since first_strike. */
  _Atomic uint64_t serial_until, first_strike;
  atomic_int strikes, serial_level;
  atomic_int assume_busy; /* tests: count long waits as the machine's */
  _Atomic int64_t serial_spells;
};

/* A wait that only a descheduled thread explains (a kernel task is tens of
 * microseconds to a few milliseconds, and the caller waited longer than it
 * worked), twice within the window, makes the pool serial for a while. */
#define KILN_POOL_STALL_NS 2000000ull
#define KILN_POOL_STRIKE_WINDOW_NS 100000000ull
#define KILN_POOL_SERIAL_NS 100000000ull

typedef struct {
  kiln_pool_t* pool;
  int index;
} kiln_pool_worker_arg_t;

static uint64_t kiln_pool_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 1 when the machine has more runnable threads than online CPUs now
 * (Linux: /proc/loadavg's fourth field, "running/total"); read only after
 * a long wait, so its cost (a few microseconds) is rare. Where it cannot be
 * read, 1: the wait alone decides. */
static int kiln_pool_machine_oversubscribed(void) {
  FILE* f = fopen("/proc/loadavg", "r");
  if (!f) return 1;
  double a1, a5, a15;
  long running = 0, total = 0;
  int got = fscanf(f, "%lf %lf %lf %ld/%ld", &a1, &a5, &a15, &running, &total);
  fclose(f);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return got != 5 || cpus < 1 || running > cpus;
}

/* The caller worked `busy` ns on a job and then waited `wait` ns for the
 * other threads. */
static void kiln_pool_note_wait(kiln_pool_t* pool, uint64_t busy, uint64_t wait, uint64_t now) {
  if (wait < KILN_POOL_STALL_NS || wait < busy) return;
  if (!atomic_load(&pool->assume_busy) && !kiln_pool_machine_oversubscribed()) return;
  if (now - atomic_load(&pool->first_strike) > KILN_POOL_STRIKE_WINDOW_NS) {
    atomic_store(&pool->first_strike, now);
    atomic_store(&pool->strikes, 1);
    return;
  }
  if (atomic_fetch_add(&pool->strikes, 1) + 1 >= 2) {
    atomic_store(&pool->strikes, 0);
    atomic_store(&pool->first_strike, 0);
    uint64_t last = atomic_load(&pool->serial_until);
    int level = atomic_load(&pool->serial_level);
    level = last && now - last < 1000000000ull ? (level < 4 ? level + 1 : 4) : 0;
    atomic_store(&pool->serial_level, level);
    atomic_store(&pool->serial_until, now + (KILN_POOL_SERIAL_NS << level));
    atomic_fetch_add(&pool->serial_spells, 1);
  }
}

int64_t kiln_pool_serial_spells(const kiln_pool_t* pool) {
  return pool ? atomic_load(&((kiln_pool_t*)pool)->serial_spells) : 0;
}

void kiln_pool_assume_busy_machine(kiln_pool_t* pool, int on) {
  if (pool) atomic_store(&pool->assume_busy, on);
}

int kiln_pool_is_serial(const kiln_pool_t* pool) {
  return pool && kiln_pool_now_ns() < atomic_load(&((kiln_pool_t*)pool)->serial_until);
}

static inline void kiln_pool_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Claims the next task of job `gen`; 0 when the job is done, closed or gone. */
static int kiln_pool_claim(kiln_pool_t* pool, unsigned gen, size_t n_tasks, size_t* task) {
  uint64_t v = atomic_load(&pool->claim);
  for (;;) {
    if ((unsigned)(v >> 32) != gen) return 0;
    uint32_t index = (uint32_t)v;
    if (index >= n_tasks) return 0;
    if (atomic_compare_exchange_weak(&pool->claim, &v, v + 1)) {
      *task = index;
      return 1;
    }
  }
}

static void kiln_pool_run_tasks(kiln_pool_t* pool, unsigned gen, int thread) {
  kiln_pool_task_fn fn = atomic_load(&pool->fn);
  void* ctx = atomic_load(&pool->ctx);
  size_t n_tasks = atomic_load(&pool->n_tasks);
  size_t t;
  while (kiln_pool_claim(pool, gen, n_tasks, &t)) {
    fn(ctx, t, thread);
    atomic_fetch_add_explicit(&pool->done, 1, memory_order_release);
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
      kiln_pool_pause();
    }
    if (gen == seen && !atomic_load(&pool->stop)) {
      pthread_mutex_lock(&pool->mutex);
      while ((gen = atomic_load(&pool->generation)) == seen && !atomic_load(&pool->stop))
        pthread_cond_wait(&pool->wake, &pool->mutex);
      pthread_mutex_unlock(&pool->mutex);
    }
    if (atomic_load(&pool->stop)) return NULL;
    seen = gen;
    /* A job posted after gen may have rewritten job_threads: its claims
     * then fail on the generation tag anyway. */
    if (arg.index < atomic_load(&pool->job_threads)) kiln_pool_run_tasks(pool, gen, arg.index);
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
  pthread_mutex_init(&pool->job, NULL);
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
  pthread_mutex_destroy(&pool->job);
  pthread_mutex_destroy(&pool->mutex);
  free(pool);
}

static _Atomic(kiln_pool_host_parallel_fn) kiln_pool_host_;
static _Atomic(kiln_pool_host_threads_fn) kiln_pool_host_threads_;

void kiln_pool_set_host_parallel(kiln_pool_host_parallel_fn parallel,
                                 kiln_pool_host_threads_fn threads) {
  atomic_store(&kiln_pool_host_threads_, threads);
  atomic_store(&kiln_pool_host_, parallel);
}

/* The host's thread count is the calling thread's (OpenMP keeps it per
 * thread), so it is read on every call rather than cached; kernels size
 * per-thread scratch from kiln_pool_size and then call parallel_for from
 * the same thread, so both see the same value. */
int kiln_pool_size(const kiln_pool_t* pool) {
  if (!pool) return 1;
  int n = pool->n_threads;
  kiln_pool_host_threads_fn threads = atomic_load(&kiln_pool_host_threads_);
  if (pool->follow_host && threads) {
    int h = threads();
    if (h >= 1 && h < n) n = h;
  }
  return n;
}

kiln_pool_host_parallel_fn kiln_pool_host_parallel(void) { return atomic_load(&kiln_pool_host_); }

/* One parallel_for in the host's region: each thread of the team takes the
 * next thread index, then claims tasks until none are left. */
typedef struct {
  kiln_pool_task_fn fn;
  void* ctx;
  size_t n_tasks;
  int n_threads;
  atomic_size_t next_task;
  atomic_int next_thread;
  int timed;                 /* a wait counter is set: record when the last task ended */
  _Atomic uint64_t last_end; /* ns, the latest end of any thread's last task */
  pthread_t caller;
  uint64_t caller_end; /* ns, when the calling thread ran out of tasks */
} kiln_pool_host_job_t;

static void kiln_pool_host_body(void* p) {
  kiln_pool_host_job_t* job = p;
  int thread = atomic_fetch_add(&job->next_thread, 1);
  if (thread >= job->n_threads) return; /* a team larger than asked: never, but stay in range */
  int ran = 0;
  for (size_t t; (t = atomic_fetch_add(&job->next_task, 1)) < job->n_tasks; ran = 1)
    job->fn(job->ctx, t, thread);
  /* A thread that arrives after the work is done ran nothing: its arrival
   * is what the caller waited for, not work. */
  if (pthread_equal(pthread_self(), job->caller)) job->caller_end = kiln_pool_now_ns();
  if (job->timed && ran) {
    uint64_t now = kiln_pool_now_ns(), seen = atomic_load(&job->last_end);
    while (now > seen && !atomic_compare_exchange_weak(&job->last_end, &seen, now)) {
    }
  }
}

static _Thread_local uint64_t* kiln_pool_wait_;

void kiln_pool_set_wait_counter(uint64_t* wait_ns) { kiln_pool_wait_ = wait_ns; }

void kiln_pool_parallel_for(kiln_pool_t* pool, size_t n_tasks, kiln_pool_task_fn fn,
                            void* ctx) {
  if (n_tasks == 0) return;
  int threads = kiln_pool_size(pool);
  uint64_t start = threads > 1 ? kiln_pool_now_ns() : 0;
  if (threads == 1 || n_tasks == 1 || n_tasks > KILN_POOL_MAX_TASKS ||
      start < atomic_load_explicit(&pool->serial_until, memory_order_relaxed)) {
    for (size_t t = 0; t < n_tasks; ++t) fn(ctx, t, 0);
    return;
  }
  kiln_pool_host_parallel_fn host = atomic_load_explicit(&kiln_pool_host_, memory_order_acquire);
  if (host) {
    uint64_t* wait = kiln_pool_wait_;
    kiln_pool_host_job_t job = {fn, ctx, n_tasks, threads, 0, 0, wait != NULL, 0, pthread_self(), 0};
    unsigned team = n_tasks < (size_t)threads ? (unsigned)n_tasks : (unsigned)threads;
    host(kiln_pool_host_body, &job, team, 0);
    uint64_t end = kiln_pool_now_ns();
    if (wait) {
      uint64_t last = atomic_load(&job.last_end);
      if (last && end > last) *wait += end - last;
    }
    if (job.caller_end >= start && end > job.caller_end)
      kiln_pool_note_wait(pool, job.caller_end - start, end - job.caller_end, end);
    return;
  }
  /* Two models sharing a pool may be run from two threads at once. */
  pthread_mutex_lock(&pool->job);
  unsigned gen = atomic_load(&pool->generation) + 1;
  /* Close the previous job before rewriting its fields (see the struct). */
  atomic_store(&pool->claim, (uint64_t)(gen - 1) << 32 | KILN_POOL_CLOSED);
  atomic_store(&pool->fn, fn);
  atomic_store(&pool->ctx, ctx);
  atomic_store(&pool->n_tasks, n_tasks);
  atomic_store(&pool->job_threads, threads);
  atomic_store(&pool->done, 0);
  atomic_store(&pool->claim, (uint64_t)gen << 32);
  pthread_mutex_lock(&pool->mutex);
  atomic_store_explicit(&pool->generation, gen, memory_order_release);
  pthread_cond_broadcast(&pool->wake);
  pthread_mutex_unlock(&pool->mutex);
  kiln_pool_run_tasks(pool, gen, 0);
  /* Wait only for tasks other threads claimed and are still running; yield
   * now and then in case the thread running one shares this core. */
  uint64_t mine = 0;
  for (unsigned spin = 1; atomic_load_explicit(&pool->done, memory_order_acquire) < n_tasks; ++spin) {
    if (!mine) mine = kiln_pool_now_ns();
    if (spin % 4096 == 0)
      sched_yield();
    else
      kiln_pool_pause();
  }
  if (mine) {
    uint64_t end = kiln_pool_now_ns();
    kiln_pool_note_wait(pool, mine - start, end - mine, end);
  }
  pthread_mutex_unlock(&pool->job);
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
  if (kiln_pool_default_) kiln_pool_default_->follow_host = 1;
}

kiln_pool_t* kiln_pool_default(void) {
  pthread_once(&kiln_pool_default_once_, kiln_pool_default_init);
  return kiln_pool_default_;
}
