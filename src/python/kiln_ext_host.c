/* kiln._C.host_threads(on, follow): run kiln's parallel kernels in the
 * OpenMP runtime the host process has loaded (PyTorch's libgomp), or on
 * kiln's own pool threads (follow: as many as the runtime's thread count,
 * torch.set_num_threads's, at most).
 *
 * Why: eager PyTorch ops run on libgomp's team, whose workers spin for a
 * while after each parallel region before they sleep. On a machine with as
 * many cores as threads, a kiln kernel that follows an eager op (training:
 * the optimizer step, autograd glue) had its own workers compete with those
 * spinning threads for the same cores, and lost a third of its speed. Run
 * in libgomp's region instead, the spinning workers take kiln's tasks.
 *
 * The runtime is found among the objects already loaded (dl_iterate_phdr),
 * never loaded by kiln: without torch (the C CLI, a process that never
 * imported it) kiln keeps its own pool. GNU libgomp is what the PyPI wheels
 * ship; Intel's libiomp5 and LLVM's libomp (other builds of torch) export
 * the same GOMP_parallel entry point for GNU-compiled code. Elsewhere than
 * Linux (no dl_iterate_phdr) kiln keeps its own pool. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>

#include "kiln_ext_host.h"

#include "base/kiln_pool.h"

#if defined(__linux__)
#include <dlfcn.h>
#include <link.h>

typedef struct {
  char path[4096];
} kiln_py_host_find_t;

static int kiln_py_host_visit(struct dl_phdr_info* info, size_t size, void* p) {
  (void)size;
  kiln_py_host_find_t* f = p;
  const char* name = info->dlpi_name;
  if (!name || !*name) return 0;
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  int omp = !strncmp(base, "libgomp", 7) || !strncmp(base, "libiomp5", 8) ||
            !strncmp(base, "libomp.", 7) || !strncmp(base, "libomp-", 7);
  if (!omp || strlen(name) >= sizeof(f->path)) return 0;
  /* Prefer the copy PyTorch ships (torch/lib/libgomp*.so): it is the one its ops use. */
  if (!f->path[0] || strstr(name, "torch")) strcpy(f->path, name);
  return 0;
}

#endif

const char* kiln_py_host_threads(int on, int follow) {
  static char found[4096];
  if (!on && !follow) {
    kiln_pool_set_host_parallel(NULL, NULL);
    return NULL;
  }
#if !defined(__linux__)
  (void)found;
  kiln_pool_set_host_parallel(NULL, NULL);
  return NULL;
#else
  kiln_py_host_find_t f;
  f.path[0] = 0;
  dl_iterate_phdr(kiln_py_host_visit, &f);
  kiln_pool_set_host_parallel(NULL, NULL);
  if (!f.path[0]) return NULL;
  /* RTLD_NOLOAD: a handle to the loaded copy, or nothing; the reference it
   * takes is kept for the life of the process, as the pointer is. */
  void* lib = dlopen(f.path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return NULL;
  /* torch.set_num_threads(n) sets OpenMP's thread count: the default pool
   * follows it (without the symbol, it keeps its own size). */
  kiln_pool_host_threads_fn threads = NULL;
  void* tsym = dlsym(lib, "omp_get_max_threads");
  if (tsym) memcpy(&threads, &tsym, sizeof(threads));
  void* sym = on ? dlsym(lib, "GOMP_parallel") : NULL;
  if (!sym) { /* kiln's own threads, sized as the host's */
    kiln_pool_set_host_parallel(NULL, threads);
    return NULL;
  }
  kiln_pool_host_parallel_fn fn;
  memcpy(&fn, &sym, sizeof(fn)); /* object to function pointer, as POSIX allows */
  kiln_pool_set_host_parallel(fn, threads);
  strcpy(found, f.path);
  return found;
#endif
}
