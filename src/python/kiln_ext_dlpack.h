/* Output tensors in kiln-managed memory, handed to PyTorch through DLPack. */
#ifndef KILN_EXT_DLPACK_H
#define KILN_EXT_DLPACK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* empty(shape, code, bits) -> a "dltensor" capsule over a contiguous CPU
 * block from the process's block cache (base/kiln_block_cache.h), which the
 * block returns to when the consumer's tensor dies. */
PyObject* kiln_py_empty(PyObject* mod, PyObject* args);
/* output_cache([idle_cap_bytes[, trim]]) -> (idle_bytes, idle_blocks, hits,
 * misses); a cap >= 0 is set first (0 frees every idle block), and trim
 * frees the idle blocks while keeping the cap. */
PyObject* kiln_py_output_cache(PyObject* mod, PyObject* args);

#endif /* KILN_EXT_DLPACK_H */
