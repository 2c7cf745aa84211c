/* Which threads run kiln's parallel kernels inside a host process. */
#ifndef KILN_EXT_HOST_H
#define KILN_EXT_HOST_H

/* on: use the loaded OpenMP runtime's parallel regions; returns its path,
 * or NULL (none loaded: kiln's own pool stays). off: kiln's own pool;
 * with follow, the default pool runs no more threads than the runtime's
 * thread count (torch.set_num_threads), when a runtime is loaded. */
const char* kiln_py_host_threads(int on, int follow);

#endif /* KILN_EXT_HOST_H */
