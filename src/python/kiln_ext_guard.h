/* The per-call check of a torch.compile graph's frozen parameters. */
#ifndef KILN_EXT_GUARD_H
#define KILN_EXT_GUARD_H

#include <Python.h>

/* frozen_unchanged(args, positions, tensors, versions) -> bool (METH_FASTCALL) */
PyObject* kiln_py_frozen_unchanged(PyObject* mod, PyObject* const* argv, Py_ssize_t argc);

#endif /* KILN_EXT_GUARD_H */
