/* A fixed pthread pool for data-parallel kernels.
 *
 * kiln_pool_parallel_for splits [0, n_tasks) over the workers and the calling
 * thread, hands tasks out through an atomic counter (so uneven tasks balance)
 * and returns when all have run. Workers spin briefly before sleeping so that
 * back-to-back kernel calls in one model run do not pay a futex wake each.
 * One parallel_for runs at a time per pool: a second caller waits.
 */
#ifndef KILN_POOL_H
#define KILN_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_status.h"

typedef struct kiln_pool_s kiln_pool_t;

/* fn(ctx, task, thread): thread is in [0, kiln_pool_size(pool)). */
typedef void (*kiln_pool_task_fn)(void* ctx, size_t task, int thread);

/* n_threads counts the caller: 1 makes a pool with no worker threads. */
kiln_status_t kiln_pool_create(int n_threads, kiln_pool_t** out_pool);
void kiln_pool_release(kiln_pool_t* pool);
/* The threads a parallel_for called now from this thread would use. */
int kiln_pool_size(const kiln_pool_t* pool);

/* pool may be NULL: runs inline on the caller. */
void kiln_pool_parallel_for(kiln_pool_t* pool, size_t n_tasks, kiln_pool_task_fn fn,
                            void* ctx);

/* A host runtime's parallel region, with the signature of libgomp's
 * GOMP_parallel: runs body(data) on up to n_threads threads (the caller
 * among them) and returns when all have returned. */
typedef void (*kiln_pool_host_parallel_fn)(void (*body)(void*), void* data, unsigned n_threads,
                                           unsigned flags);

/* The host runtime's thread count for the calling thread (the signature
 * of omp_get_max_threads: what torch.set_num_threads sets). */
typedef int (*kiln_pool_host_threads_fn)(void);

/* Process-wide: every pool's parallel_for runs its tasks in the host's
 * parallel regions instead of on the pool's own workers (NULL: back to
 * them). Inside PyTorch this is the OpenMP runtime torch already runs, so
 * eager ops and kiln kernels share one set of threads: torch's workers,
 * still spinning after an eager op, pick up kiln's tasks instead of
 * competing with kiln's workers for the same cores. The pool's size still
 * sets the thread count, except that the default pool uses no more than
 * `threads()` (when not NULL) says, so that torch.set_num_threads(n) limits
 * kiln as it limits torch; a team smaller than asked (a nested region) just
 * runs more tasks per thread. threads applies with parallel NULL too: the
 * pool's own workers then follow the host's count (workers past it claim
 * nothing), for a host whose threads sleep between regions
 * (OMP_WAIT_POLICY=passive), where waking them for each kernel costs more
 * than the kernel. */
void kiln_pool_set_host_parallel(kiln_pool_host_parallel_fn parallel,
                                 kiln_pool_host_threads_fn threads);
kiln_pool_host_parallel_fn kiln_pool_host_parallel(void);

/* For the calling thread (NULL: off): each parallel_for it makes in the
 * host's regions adds to *wait_ns the time from the end of the job's last
 * task to the region's return, i.e. the wait at the host's closing barrier
 * for team threads that ran nothing. An OpenMP region returns only when
 * every thread of its team has arrived; on a shared machine a thread the OS
 * has not scheduled yet can hold it for milliseconds after the work is
 * done (kiln's own pool never waits for a thread that claimed no task).
 * The per-node profiler reports this wait apart from the kernel's time. */
void kiln_pool_set_wait_counter(uint64_t* wait_ns);

/* Busy machines (kiln_pool.c): after two jobs whose caller waited for a
 * descheduled thread, a pool runs its jobs on the caller alone for a
 * while (same tasks, same results). How many such spells it has had, and
 * whether it is in one now. */
int64_t kiln_pool_serial_spells(const kiln_pool_t* pool);
int kiln_pool_is_serial(const kiln_pool_t* pool);
/* Tests: take every long wait as a busy machine's (no /proc check), so the
 * rule can be exercised on an idle one. */
void kiln_pool_assume_busy_machine(kiln_pool_t* pool, int on);
/* The process-wide pool: KILN_NUM_THREADS threads, else one per online CPU.
 * Created on first use; never released. NULL if it could not be created.
 * In the host's regions it follows the host's thread count (see above):
 * its size is then the smaller of the two, call by call. */
kiln_pool_t* kiln_pool_default(void);

#endif /* KILN_POOL_H */
