/* kiln._C.frozen_unchanged(args, positions, tensors, versions): whether
 * each args[positions[k]] is still tensors[k] (the same object) with the
 * version counter versions[k]. kiln.dynamo._guard_frozen asks it before
 * every call of a graph whose parameters kiln compiled as constants, so
 * that a parameter replaced (load_state_dict) or written in place (an
 * optimizer step) since is never run stale. In C because a decode step's
 * graph has one per weight (~75 for an 8-layer Llama) and the Python loop
 * cost ~10 us a token; here each is a pointer compare and one read of the
 * tensor's `_version` attribute (torch's, through Python: no torch
 * headers). */
#include "kiln_ext_guard.h"

PyObject* kiln_py_frozen_unchanged(PyObject* mod, PyObject* const* argv, Py_ssize_t argc) {
  (void)mod;
  static PyObject* version_name = NULL;
  if (!version_name && !(version_name = PyUnicode_InternFromString("_version"))) return NULL;
  if (argc != 4) {
    PyErr_Format(PyExc_TypeError, "frozen_unchanged takes 4 arguments, got %zd", argc);
    return NULL;
  }
  PyObject *positions = argv[1], *tensors = argv[2], *versions = argv[3];
  if (!PyTuple_Check(positions) || !PyTuple_Check(tensors) || !PyTuple_Check(versions) ||
      PyTuple_GET_SIZE(tensors) != PyTuple_GET_SIZE(positions) ||
      PyTuple_GET_SIZE(versions) != PyTuple_GET_SIZE(positions)) {
    PyErr_SetString(PyExc_TypeError,
                    "frozen_unchanged: positions, tensors and versions must be tuples of one length");
    return NULL;
  }
  PyObject* args = PySequence_Fast(argv[0], "frozen_unchanged: args must be a sequence");
  if (!args) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(args);
  int same = 1;
  for (Py_ssize_t k = 0; same == 1 && k < PyTuple_GET_SIZE(positions); ++k) {
    Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, k));
    if (i == -1 && PyErr_Occurred()) {
      same = -1;
      break;
    }
    PyObject* t = PyTuple_GET_ITEM(tensors, k);
    if (i < 0 || i >= n || PySequence_Fast_GET_ITEM(args, i) != t) {
      same = 0; /* another object (or fewer arguments): not the frozen one */
      break;
    }
    PyObject* v = PyObject_GetAttr(t, version_name);
    same = v ? PyObject_RichCompareBool(v, PyTuple_GET_ITEM(versions, k), Py_EQ) : -1;
    Py_XDECREF(v);
  }
  Py_DECREF(args);
  if (same < 0) return NULL;
  return PyBool_FromLong(same);
}
