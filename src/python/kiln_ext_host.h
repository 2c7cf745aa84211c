/* Which threads run kiln's parallel kernels inside a host process. */
#ifndef KILN_EXT_HOST_H
#define KILN_EXT_HOST_H

/* on: use the loaded OpenMP runtime's parallel regions; returns its path,
 * or NULL (none loaded: kiln's own pool stays). off: kiln's own pool. */
const char* kiln_py_host_threads(int on);

#endif /* KILN_EXT_HOST_H */
