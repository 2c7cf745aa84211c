/* kiln._C: the CPython extension, written in C against the CPython API.
 *
 * It exposes the graph builder (Python's op table calls it node by node),
 * the compiler, and compiled models. Tensors cross as (data pointer, dtype,
 * shape) tuples taken from torch on the Python side: nothing here links
 * against torch. Every kiln status becomes a kiln.KilnError (a RuntimeError)
 * whose message is the status's; input mismatches raise ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_activation.h"
#include "base/kiln_cpu.h"
#include "compiler/kiln_compiler.h"
#include "ir/kiln_graph_print.h"
#include "ir/kiln_artifact.h"
#include "kernels/kiln_isa_variant.h"
#include "runtime/kiln_plan_io.h"
#include "kiln_ext_dlpack.h"
#include "kiln_ext_guard.h"
#include "kiln_ext_host.h"
#include "kiln_ext_profile.h"
#include "runtime/kiln_machine.h"
#include "runtime/kiln_model.h"
#include "runtime/kiln_writes.h"

static PyObject* kiln_py_error; /* kiln.KilnError */

/* Raises the status as a Python exception and frees it; returns NULL. */
static PyObject* kiln_py_raise(kiln_status_t s) {
  PyObject* type = kiln_py_error;
  if (kiln_status_code(s) == KILN_OUT_OF_MEMORY) type = PyExc_MemoryError;
  PyErr_SetString(type, kiln_status_message(s));
  kiln_status_free(s);
  return NULL;
}

/* As kiln_py_raise, but a caller's bad argument (a wrong size, a wrong
 * number of inputs) is a ValueError, as Python code expects. */
static PyObject* kiln_py_raise_call(kiln_status_t s) {
  if (kiln_status_code(s) != KILN_INVALID_ARGUMENT) return kiln_py_raise(s);
  PyErr_SetString(PyExc_ValueError, kiln_status_message(s));
  kiln_status_free(s);
  return NULL;
}

/* ---- shapes ------------------------------------------------------------- */

static int kiln_py_shape(PyObject* seq, int32_t* rank, int64_t* shape) {
  PyObject* fast = PySequence_Fast(seq, "shape must be a sequence of ints");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > KILN_MAX_RANK) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "rank %zd is over kiln's maximum of %d", n, KILN_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    shape[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (shape[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
  }
  *rank = (int32_t)n;
  Py_DECREF(fast);
  return 0;
}

static PyObject* kiln_py_shape_tuple(const kiln_value_t* v) {
  PyObject* t = PyTuple_New(v->rank);
  if (!t) return NULL;
  for (int32_t d = 0; d < v->rank; ++d) {
    PyObject* dim = PyLong_FromLongLong(v->shape[d]);
    if (!dim) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, d, dim);
  }
  return t;
}

/* ---- Graph -------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD kiln_graph_t* graph; /* NULL once compiled (consumed) */
  /* Constants' bytes lent until compile (add_constant(..., lend=True)):
   * what the compiled graph still reads of them is copied then. */
  kiln_lent_bytes_t* lent;
  int32_t n_lent, cap_lent;
} kiln_py_graph_t;

static void kiln_py_graph_forget_lent(kiln_py_graph_t* self) {
  free(self->lent);
  self->lent = NULL;
  self->n_lent = self->cap_lent = 0;
}

static int kiln_py_graph_init(kiln_py_graph_t* self, PyObject* args, PyObject* kw) {
  (void)args;
  (void)kw;
  kiln_graph_release(self->graph);
  self->graph = NULL;
  kiln_py_graph_forget_lent(self);
  kiln_status_t s = kiln_graph_create(kiln_allocator_system(), &self->graph);
  if (s) {
    kiln_py_raise(s);
    return -1;
  }
  return 0;
}

static void kiln_py_graph_dealloc(kiln_py_graph_t* self) {
  kiln_graph_release(self->graph);
  kiln_py_graph_forget_lent(self);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static kiln_graph_t* kiln_py_graph_get(kiln_py_graph_t* self) {
  if (!self->graph) PyErr_SetString(PyExc_RuntimeError, "this graph was already compiled");
  return self->graph;
}

static PyObject* kiln_py_graph_add_input(kiln_py_graph_t* self, PyObject* args) {
  const char* name;
  int dtype;
  PyObject* shape_obj;
  if (!PyArg_ParseTuple(args, "ziO", &name, &dtype, &shape_obj)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  int32_t rank, id;
  int64_t shape[KILN_MAX_RANK];
  if (!g || kiln_py_shape(shape_obj, &rank, shape)) return NULL;
  kiln_status_t s = kiln_graph_add_input(g, name, (kiln_dtype_t)dtype, rank, shape, &id);
  return s ? kiln_py_raise(s) : PyLong_FromLong(id);
}

/* add_constant(name, dtype, shape, data_ptr, nbytes, key=None, lend=False):
 * copies the bytes now; with a key borrows them for the graph's life; with
 * lend borrows them until compile, which copies what it still reads. */
static PyObject* kiln_py_graph_add_constant(kiln_py_graph_t* self, PyObject* args) {
  const char* name;
  int dtype, lend = 0;
  PyObject* shape_obj;
  unsigned long long ptr;
  Py_ssize_t nbytes;
  const char* key = NULL;
  if (!PyArg_ParseTuple(args, "ziOKn|zp", &name, &dtype, &shape_obj, &ptr, &nbytes, &key, &lend))
    return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  int32_t rank, id;
  int64_t shape[KILN_MAX_RANK];
  if (!g || kiln_py_shape(shape_obj, &rank, shape)) return NULL;
  if (nbytes < 0 || (!ptr && nbytes)) {
    PyErr_SetString(PyExc_ValueError, "constant data pointer is NULL");
    return NULL;
  }
  /* With a key the bytes are borrowed, not copied: the caller keeps them
   * alive and unchanged while any model made from this graph lives (the
   * key names them: kiln/dynamo.py's frozen parameters). */
  if (lend && !key && nbytes && self->n_lent == self->cap_lent) {
    int32_t cap = self->cap_lent ? 2 * self->cap_lent : 64;
    kiln_lent_bytes_t* grown = realloc(self->lent, (size_t)cap * sizeof *grown);
    if (!grown) return PyErr_NoMemory();
    self->lent = grown;
    self->cap_lent = cap;
  }
  int borrow = key || (lend && nbytes);
  kiln_status_t s =
      borrow ? kiln_graph_add_constant_borrowed(g, name, (kiln_dtype_t)dtype, rank, shape,
                                                KILN_LAYOUT_DENSE, (const void*)(uintptr_t)ptr,
                                                (size_t)nbytes, &id)
             : kiln_graph_add_constant(g, name, (kiln_dtype_t)dtype, rank, shape,
                                       KILN_LAYOUT_DENSE, (const void*)(uintptr_t)ptr,
                                       (size_t)nbytes, &id);
  if (!s && key) s = kiln_graph_set_constant_key(g, id, key);
  if (!s && borrow && !key)
    self->lent[self->n_lent++] = (kiln_lent_bytes_t){(const void*)(uintptr_t)ptr, (size_t)nbytes};
  return s ? kiln_py_raise(s) : PyLong_FromLong(id);
}

/* add_quant_constant(name, q, scales, zeros, group): a float32 constant held
 * as a checkpoint's integers (kiln_graph_add_constant_quant); q, scales and
 * zeros (-1: none) are constants' value ids. */
static PyObject* kiln_py_graph_add_quant_constant(kiln_py_graph_t* self, PyObject* args) {
  const char* name;
  int q, scales, zeros;
  long long group;
  if (!PyArg_ParseTuple(args, "ziiiL", &name, &q, &scales, &zeros, &group)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  int32_t id;
  kiln_status_t s = kiln_graph_add_constant_quant(g, name, q, scales, zeros, group, &id);
  return s ? kiln_py_raise(s) : PyLong_FromLong(id);
}

static int kiln_py_int_list(PyObject* seq, int64_t* out, int32_t max, int32_t* n) {
  PyObject* fast = PySequence_Fast(seq, "expected a sequence of ints");
  if (!fast) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  if (len > max) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "at most %d entries, got %zd", max, len);
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; ++i) {
    out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (out[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return -1;
    }
  }
  *n = (int32_t)len;
  Py_DECREF(fast);
  return 0;
}

/* add_node(op, inputs, params, fparams, origin) -> output value id. */
static PyObject* kiln_py_graph_add_node(kiln_py_graph_t* self, PyObject* args) {
  int op;
  PyObject *in_obj, *p_obj, *f_obj;
  const char* origin;
  if (!PyArg_ParseTuple(args, "iOOOz", &op, &in_obj, &p_obj, &f_obj, &origin)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  int64_t in64[KILN_MAX_NODE_INPUTS], params[KILN_MAX_PARAMS] = {0};
  float fparams[KILN_MAX_FPARAMS] = {0};
  int32_t n_in, n_p, n_f = 0;
  if (kiln_py_int_list(in_obj, in64, KILN_MAX_NODE_INPUTS, &n_in) ||
      kiln_py_int_list(p_obj, params, KILN_MAX_PARAMS, &n_p))
    return NULL;
  PyObject* fast = PySequence_Fast(f_obj, "fparams must be a sequence of floats");
  if (!fast) return NULL;
  n_f = (int32_t)PySequence_Fast_GET_SIZE(fast);
  if (n_f > KILN_MAX_FPARAMS) {
    Py_DECREF(fast);
    PyErr_SetString(PyExc_ValueError, "too many float parameters");
    return NULL;
  }
  for (int32_t i = 0; i < n_f; ++i) fparams[i] = (float)PyFloat_AsDouble(PySequence_Fast_GET_ITEM(fast, i));
  Py_DECREF(fast);
  if (PyErr_Occurred()) return NULL;
  int32_t ins[KILN_MAX_NODE_INPUTS];
  for (int32_t i = 0; i < n_in; ++i) ins[i] = (int32_t)in64[i];
  int32_t id;
  kiln_status_t s =
      kiln_graph_add_node(g, (kiln_op_t)op, ins, n_in, params, n_p, fparams, n_f, origin, &id);
  return s ? kiln_py_raise(s) : PyLong_FromLong(id);
}

static PyObject* kiln_py_graph_set_outputs(kiln_py_graph_t* self, PyObject* args) {
  PyObject* seq;
  if (!PyArg_ParseTuple(args, "O", &seq)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  PyObject* fast = PySequence_Fast(seq, "outputs must be a sequence of value ids");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  int32_t* ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
  if (!ids) {
    Py_DECREF(fast);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; ++i) ids[i] = (int32_t)PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
  Py_DECREF(fast);
  if (PyErr_Occurred()) {
    free(ids);
    return NULL;
  }
  kiln_status_t s = kiln_graph_set_outputs(g, ids, (int32_t)n);
  free(ids);
  if (s) return kiln_py_raise(s);
  Py_RETURN_NONE;
}

/* value(id) -> (dtype, shape) */
static PyObject* kiln_py_graph_value(kiln_py_graph_t* self, PyObject* args) {
  int id;
  if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  if (id < 0 || id >= g->n_values) {
    PyErr_Format(PyExc_IndexError, "no value %d", id);
    return NULL;
  }
  return Py_BuildValue("(iN)", (int)g->values[id].dtype, kiln_py_shape_tuple(&g->values[id]));
}

/* sym(name, lo, hi) -> an encoded symbolic size (kiln_sym.h) */
static PyObject* kiln_py_graph_sym(kiln_py_graph_t* self, PyObject* args) {
  const char* name;
  long long lo, hi, example = -1;
  if (!PyArg_ParseTuple(args, "zLL|L", &name, &lo, &hi, &example)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  kiln_sym_table_t* t;
  int64_t d;
  kiln_status_t s = kiln_graph_syms(g, &t);
  if (!s) s = kiln_sym_var(t, name, lo, hi, &d);
  if (!s && example >= 0) s = kiln_sym_set_example(t, d, example);
  return s ? kiln_py_raise(s) : PyLong_FromLongLong(d);
}

/* sym_guard(rel, a, b): the graph's sizes must satisfy `a rel b` at every
 * call (rel "==", "!=", "<" or "<="; kiln_sym_guard_add). */
static PyObject* kiln_py_graph_sym_guard(kiln_py_graph_t* self, PyObject* args) {
  const char* rel;
  long long a, b;
  if (!PyArg_ParseTuple(args, "sLL", &rel, &a, &b)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  static const char* const rels[KILN_SYM_REL_COUNT] = {"==", "!=", "<", "<="};
  int r = -1;
  for (int i = 0; i < KILN_SYM_REL_COUNT; ++i)
    if (!strcmp(rel, rels[i])) r = i;
  if (r < 0) return PyErr_Format(PyExc_ValueError, "unknown guard relation '%s'", rel);
  kiln_sym_table_t* t;
  kiln_status_t s = kiln_graph_syms(g, &t);
  if (!s) s = kiln_sym_guard_add(t, (kiln_sym_rel_t)r, a, b);
  if (s) return kiln_py_raise(s);
  Py_RETURN_NONE;
}

/* sym_fit_probes(): the probes moved where every guard holds
 * (kiln_sym_probes_fit); once the guards are in, before the nodes. */
static PyObject* kiln_py_graph_sym_fit_probes(kiln_py_graph_t* self, PyObject* unused) {
  (void)unused;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  kiln_sym_table_t* t;
  kiln_status_t s = kiln_graph_syms(g, &t);
  if (s) return kiln_py_raise(s);
  kiln_sym_probes_fit(t);
  Py_RETURN_NONE;
}

/* The names dim_op takes and sym_tree gives, by kiln_sym_kind_t. */
static const char* const kiln_py_sym_kinds[KILN_SYM_KIND_COUNT] = {"var", "add", "mul", "floordiv",
                                                                   "mod", "max", "min"};

/* dim_op(kind, a, b) -> a kind b for sizes that may be symbolic; kind is
 * "add", "mul", "floordiv", "mod", "max" or "min". */
static PyObject* kiln_py_graph_dim_op(kiln_py_graph_t* self, PyObject* args) {
  const char* kind;
  long long a, b;
  if (!PyArg_ParseTuple(args, "sLL", &kind, &a, &b)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  int k = 0;
  for (int i = 1; i < KILN_SYM_KIND_COUNT; ++i)
    if (!strcmp(kind, kiln_py_sym_kinds[i])) k = i;
  if (!k) return PyErr_Format(PyExc_ValueError, "unknown size op %s", kind);
  kiln_sym_table_t* t;
  int64_t d;
  kiln_status_t s = kiln_graph_syms(g, &t);
  if (!s) s = kiln_dim_op(t, (kiln_sym_kind_t)k, a, b, &d);
  return s ? kiln_py_raise(s) : PyLong_FromLongLong(d);
}

/* describe_dim(d) -> "s0*2 + 1" */
static PyObject* kiln_py_graph_describe_dim(kiln_py_graph_t* self, PyObject* args) {
  long long d;
  if (!PyArg_ParseTuple(args, "L", &d)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  char buf[256];
  return PyUnicode_FromString(kiln_sym_describe(g->syms, d, buf, sizeof buf));
}

static void kiln_py_sym_collect(const kiln_sym_table_t* t, int64_t d, PyObject* set) {
  if (!kiln_dim_is_sym(d) || !t || kiln_dim_sym_id(d) >= t->n_exprs) return;
  const kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(d)];
  if (x->kind == KILN_SYM_VAR) {
    PyObject* name = PyUnicode_FromString(t->vars[x->a].name);
    if (name) {
      PySet_Add(set, name);
      Py_DECREF(name);
    }
    return;
  }
  kiln_py_sym_collect(t, x->a, set);
  kiln_py_sym_collect(t, x->b, set);
}

static PyObject* kiln_py_sym_tree(const kiln_sym_table_t* t, int64_t d) {
  if (!kiln_dim_is_sym(d)) return PyLong_FromLongLong(d);
  if (!t || kiln_dim_sym_id(d) >= t->n_exprs)
    return PyErr_Format(PyExc_ValueError, "no symbolic size %lld in this graph", (long long)d);
  const kiln_sym_expr_t* x = &t->exprs[kiln_dim_sym_id(d)];
  if (x->kind == KILN_SYM_VAR) return Py_BuildValue("(ss)", "var", t->vars[x->a].name);
  if (Py_EnterRecursiveCall(" in sym_tree")) return NULL;
  PyObject* a = kiln_py_sym_tree(t, x->a);
  PyObject* b = a ? kiln_py_sym_tree(t, x->b) : NULL;
  Py_LeaveRecursiveCall();
  PyObject* out = b ? Py_BuildValue("(sOO)", kiln_py_sym_kinds[x->kind], a, b) : NULL;
  Py_XDECREF(a);
  Py_XDECREF(b);
  return out;
}

/* sym_tree(d) -> d's expression as nested tuples: a number, ("var", name),
 * or (kind, a, b) with kind a name dim_op takes: what rebuilds it in
 * another graph's table (symbolic.Symbols.rebuild). */
static PyObject* kiln_py_graph_sym_tree(kiln_py_graph_t* self, PyObject* args) {
  long long d;
  if (!PyArg_ParseTuple(args, "L", &d)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  return g ? kiln_py_sym_tree(g->syms, d) : NULL;
}

/* sym_vars(d) -> the set of symbol names size d depends on */
static PyObject* kiln_py_graph_sym_vars(kiln_py_graph_t* self, PyObject* args) {
  long long d;
  if (!PyArg_ParseTuple(args, "L", &d)) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  PyObject* set = PySet_New(NULL);
  if (set) kiln_py_sym_collect(g->syms, d, set);
  return set;
}

/* example_dims(dims) -> [int or None]: each size at the example binding
 * (graph.sym's example values), None where a symbol it reads has none. */
static PyObject* kiln_py_graph_example_dims(kiln_py_graph_t* self, PyObject* dims) {
  kiln_graph_t* g = kiln_py_graph_get(self);
  if (!g) return NULL;
  PyObject* seq = PySequence_Fast(dims, "example_dims: dims must be a sequence");
  if (!seq) return NULL;
  Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
  PyObject* out = PyList_New(k);
  for (Py_ssize_t i = 0; out && i < k; ++i) {
    long long d = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    PyObject* item = NULL;
    if (!(d == -1 && PyErr_Occurred())) {
      int64_t e = kiln_sym_dim_valid(g->syms, d) ? (g->syms ? kiln_sym_example(g->syms, d) : d)
                                                 : KILN_SYM_NO_EXAMPLE;
      item = e == KILN_SYM_NO_EXAMPLE ? Py_NewRef(Py_None) : PyLong_FromLongLong(e);
    }
    if (!item) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, i, item);
  }
  Py_DECREF(seq);
  return out;
}

static PyMethodDef kiln_py_graph_methods[] = {
    {"sym_vars", (PyCFunction)kiln_py_graph_sym_vars, METH_VARARGS, "sym_vars(size) -> {name}"},
    {"sym", (PyCFunction)kiln_py_graph_sym, METH_VARARGS, "sym(name, lo, hi, example=-1) -> size"},
    {"sym_guard", (PyCFunction)kiln_py_graph_sym_guard, METH_VARARGS,
     "sym_guard(rel, a, b): sizes a and b must satisfy a rel b at every call"},
    {"sym_fit_probes", (PyCFunction)kiln_py_graph_sym_fit_probes, METH_NOARGS,
     "sym_fit_probes(): move the probe bindings where every guard holds"},
    {"example_dims", (PyCFunction)kiln_py_graph_example_dims, METH_O,
     "example_dims(sizes) -> [int or None] (each at the symbols' example values)"},
    {"dim_op", (PyCFunction)kiln_py_graph_dim_op, METH_VARARGS, "dim_op(kind, a, b) -> size"},
    {"sym_tree", (PyCFunction)kiln_py_graph_sym_tree, METH_VARARGS, "sym_tree(size) -> nested tuples"},
    {"describe_dim", (PyCFunction)kiln_py_graph_describe_dim, METH_VARARGS,
     "describe_dim(size) -> str"},
    {"add_input", (PyCFunction)kiln_py_graph_add_input, METH_VARARGS,
     "add_input(name, dtype, shape) -> value id"},
    {"add_constant", (PyCFunction)kiln_py_graph_add_constant, METH_VARARGS,
     "add_constant(name, dtype, shape, data_ptr, nbytes) -> value id (bytes copied)"},
    {"add_quant_constant", (PyCFunction)kiln_py_graph_add_quant_constant, METH_VARARGS,
     "add_quant_constant(name, q, scales, zeros, group) -> value id (a checkpoint's integers)"},
    {"add_node", (PyCFunction)kiln_py_graph_add_node, METH_VARARGS,
     "add_node(op, inputs, params, fparams, origin) -> output value id"},
    {"set_outputs", (PyCFunction)kiln_py_graph_set_outputs, METH_VARARGS, "set_outputs(ids)"},
    {"value", (PyCFunction)kiln_py_graph_value, METH_VARARGS, "value(id) -> (dtype, shape)"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject kiln_py_graph_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._C.Graph",
    .tp_basicsize = sizeof(kiln_py_graph_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A kiln IR graph under construction.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)kiln_py_graph_init,
    .tp_dealloc = (destructor)kiln_py_graph_dealloc,
    .tp_methods = kiln_py_graph_methods,
};

/* ---- Model -------------------------------------------------------------- */

typedef struct {
  PyObject_HEAD kiln_model_t* model;
  double compile_ms;
} kiln_py_model_t;

static void kiln_py_model_dealloc(kiln_py_model_t* self) {
  kiln_model_release(self->model);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyTypeObject kiln_py_model_type;

static PyObject* kiln_py_model_wrap(kiln_model_t* model) {
  kiln_py_model_t* m = PyObject_New(kiln_py_model_t, &kiln_py_model_type);
  if (!m) {
    kiln_model_release(model);
    return NULL;
  }
  m->model = model;
  m->compile_ms = 0;
  return (PyObject*)m;
}

/* One (data_ptr, dtype, shape) descriptor. An exact 3-tuple (what
 * kiln.module builds, dozens per call) is read directly; anything else
 * through PyArg_ParseTuple, whose errors say what is wrong. */
static int kiln_py_tensor(PyObject* item, kiln_tensor_t* t, int64_t* shape) {
  unsigned long long ptr;
  int dtype;
  PyObject* shape_obj;
  if (PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 3 &&
      PyLong_CheckExact(PyTuple_GET_ITEM(item, 0)) && PyLong_CheckExact(PyTuple_GET_ITEM(item, 1))) {
    ptr = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(item, 0)); /* as "K" does */
    long d = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
    if ((ptr == (unsigned long long)-1 || d == -1) && PyErr_Occurred()) return -1;
    if (d < INT_MIN || d > INT_MAX) {
      PyErr_SetString(PyExc_OverflowError, "dtype id out of range");
      return -1;
    }
    dtype = (int)d;
    shape_obj = PyTuple_GET_ITEM(item, 2);
  } else if (!PyArg_ParseTuple(item, "KiO", &ptr, &dtype, &shape_obj)) {
    return -1;
  }
  if (kiln_py_shape(shape_obj, &t->rank, shape)) return -1;
  t->data = (void*)(uintptr_t)ptr;
  t->dtype = (kiln_dtype_t)dtype;
  t->shape = shape;
  return 0;
}

/* Parses a sequence of (data_ptr, dtype, shape) into tensors; shapes are
 * stored in `shapes` (n × KILN_MAX_RANK). With `missing`, an item may be
 * None (missing[i] = 1: an output the caller has not made yet). */
static int kiln_py_tensors(PyObject* seq, kiln_tensor_t* out, int64_t* shapes, int32_t max,
                           int32_t* n, unsigned char* missing) {
  PyObject* fast = PySequence_Fast(seq, "expected a sequence of (ptr, dtype, shape)");
  if (!fast) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
  if (len > max) {
    Py_DECREF(fast);
    PyErr_Format(PyExc_ValueError, "got %zd tensors, the model takes %d", len, max);
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(fast, i);
    if (missing) missing[i] = item == Py_None;
    if (missing && missing[i]) continue;
    if (kiln_py_tensor(item, &out[i], shapes + i * KILN_MAX_RANK)) {
      Py_DECREF(fast);
      return -1;
    }
  }
  *n = (int32_t)len;
  Py_DECREF(fast);
  return 0;
}

/* Outputs the caller left None (run's `make`): made by make(k, shape) once
 * the inputs' sizes give their shapes (one binding of a symbolic model's
 * sizes for the shapes and the run: kiln_model_select finds it again),
 * stored into outs[k], described by their data_ptr(). */
static int kiln_py_make_outputs(kiln_py_model_t* self, const kiln_tensor_t* ins, int32_t n_in,
                                kiln_tensor_t* outs, int64_t* shapes, int32_t n_out,
                                const unsigned char* missing, PyObject* outs_list,
                                PyObject* make) {
  const kiln_graph_t* g = kiln_model_graph(self->model);
  int32_t* ranks = malloc(sizeof(int32_t) * (size_t)(g->n_outputs + 1));
  int64_t* all = malloc(sizeof(int64_t) * KILN_MAX_RANK * (size_t)(g->n_outputs + 1));
  int rc = -1;
  kiln_status_t s = !ranks || !all ? kiln_status_make(KILN_OUT_OF_MEMORY, "shapes")
                    : n_out != g->n_outputs
                        ? kiln_status_make(KILN_INVALID_ARGUMENT, "the model has %d outputs, got %d",
                                           g->n_outputs, n_out)
                        : kiln_model_output_shapes(self->model, ins, n_in, all, ranks);
  if (s) {
    kiln_py_raise_call(s);
    goto done;
  }
  for (int32_t o = 0; o < n_out; ++o) {
    if (!missing[o]) continue;
    int64_t* shape = shapes + (size_t)o * KILN_MAX_RANK;
    memcpy(shape, all + (size_t)o * KILN_MAX_RANK, sizeof(int64_t) * (size_t)ranks[o]);
    PyObject* dims = PyTuple_New(ranks[o]);
    for (int32_t d = 0; dims && d < ranks[o]; ++d) {
      PyObject* v = PyLong_FromLongLong(shape[d]);
      if (!v) Py_CLEAR(dims);
      else PyTuple_SET_ITEM(dims, d, v);
    }
    PyObject* t = dims ? PyObject_CallFunction(make, "iO", (int)o, dims) : NULL;
    Py_XDECREF(dims);
    PyObject* ptr = t ? PyObject_CallMethod(t, "data_ptr", NULL) : NULL;
    unsigned long long p = ptr ? PyLong_AsUnsignedLongLongMask(ptr) : 0;
    int bad = !ptr || PyErr_Occurred();
    Py_XDECREF(ptr);
    if (bad) {
      Py_XDECREF(t);
      goto done;
    }
    if (PyList_SetItem(outs_list, o, t)) goto done; /* steals t, also on failure */
    outs[o].data = (void*)(uintptr_t)p;
    outs[o].dtype = g->values[g->outputs[o]].dtype;
    outs[o].rank = ranks[o];
    outs[o].shape = shape;
  }
  rc = 0;
done:
  free(ranks);
  free(all);
  return rc;
}

/* run(..., hook): hook(node, end) is called with the GIL around each kernel
 * node (torch.profiler events, module.py). An exception it raises is kept
 * and raised after the run; later calls are skipped. */
typedef struct {
  PyObject* hook;
  int failed;
} kiln_py_hook_t;

static void kiln_py_node_hook(void* ctx, int32_t node, int end) {
  kiln_py_hook_t* h = ctx;
  PyGILState_STATE gil = PyGILState_Ensure();
  if (!h->failed) {
    PyObject* r = PyObject_CallFunction(h->hook, "ii", (int)node, end);
    if (r)
      Py_DECREF(r);
    else
      h->failed = 1; /* the error stays set for the caller */
  }
  PyGILState_Release(gil);
}

static PyObject* kiln_py_model_run(kiln_py_model_t* self, PyObject* args) {
  PyObject *in_obj, *out_obj, *hook_obj = NULL, *outs_list = NULL, *make = NULL;
  if (!PyArg_ParseTuple(args, "OO|OO!O", &in_obj, &out_obj, &hook_obj, &PyList_Type, &outs_list,
                        &make))
    return NULL;
  if (make && (!outs_list || hook_obj != Py_None)) {
    PyErr_SetString(PyExc_TypeError, "run(inputs, outputs, None, outs, make): make needs outs and no hook");
    return NULL;
  }
  kiln_py_hook_t hook = {hook_obj != Py_None ? hook_obj : NULL, 0};
  const kiln_graph_t* g = kiln_model_graph(self->model);
  int32_t max = g->n_inputs > g->n_outputs ? g->n_inputs : g->n_outputs;
  kiln_tensor_t stack_t[16];
  int64_t stack_s[16 * KILN_MAX_RANK];
  kiln_tensor_t* ts = stack_t;
  int64_t* shapes = stack_s;
  if (2 * max > 16) {
    ts = malloc(sizeof(kiln_tensor_t) * (size_t)(2 * max));
    shapes = malloc(sizeof(int64_t) * KILN_MAX_RANK * (size_t)(2 * max));
    if (!ts || !shapes) {
      free(ts);
      free(shapes);
      return PyErr_NoMemory();
    }
  }
  int32_t n_in = 0, n_out = 0;
  PyObject* result = NULL;
  unsigned char* missing = make ? calloc((size_t)max + 1, 1) : NULL;
  int any_missing = 0;
  if (make && !missing) {
    PyErr_NoMemory();
    goto done;
  }
  if (!kiln_py_tensors(in_obj, ts, shapes, max, &n_in, NULL) &&
      !kiln_py_tensors(out_obj, ts + max, shapes + max * KILN_MAX_RANK, max, &n_out,
                       make ? missing : NULL)) {
    for (int32_t o = 0; make && o < n_out; ++o) any_missing |= missing[o];
    if (make && PyList_GET_SIZE(outs_list) != n_out) {
      PyErr_SetString(PyExc_ValueError, "run: outs must list every output");
      goto done;
    }
    if (any_missing && kiln_py_make_outputs(self, ts, n_in, ts + max,
                                            shapes + max * KILN_MAX_RANK, n_out, missing,
                                            outs_list, make))
      goto done;
    kiln_status_t s;
    Py_BEGIN_ALLOW_THREADS s = kiln_model_run_hooked(self->model, ts, n_in, ts + max, n_out,
                                                     hook.hook ? kiln_py_node_hook : NULL, &hook);
    Py_END_ALLOW_THREADS if (hook.failed) {
      kiln_status_free(s);
    }
    else if (s) {
      kiln_py_raise_call(s);
    }
    else {
      result = Py_None;
      Py_INCREF(result);
    }
  }
done:
  free(missing);
  if (ts != stack_t) {
    free(ts);
    free(shapes);
  }
  return result;
}

/* A value name as str; names come from files too, so bad UTF-8 is replaced
 * rather than trusted. */
static PyObject* kiln_py_name(const char* name) {
  if (!name) Py_RETURN_NONE;
  return PyUnicode_DecodeUTF8(name, (Py_ssize_t)strlen(name), "replace");
}

static PyObject* kiln_py_specs(const kiln_graph_t* g, const int32_t* ids, int32_t n) {
  PyObject* list = PyList_New(n);
  if (!list) return NULL;
  for (int32_t i = 0; i < n; ++i) {
    const kiln_value_t* v = &g->values[ids[i]];
    PyObject* name = kiln_py_name(v->name);
    PyObject* shape = name ? kiln_py_shape_tuple(v) : NULL;
    PyObject* item = shape ? Py_BuildValue("(NiN)", name, (int)v->dtype, shape) : NULL;
    if (!item) {
      if (!shape) Py_XDECREF(name);
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, item);
  }
  return list;
}

static PyObject* kiln_py_model_inputs(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  const kiln_graph_t* g = kiln_model_graph(self->model);
  return kiln_py_specs(g, g->inputs, g->n_inputs);
}

static PyObject* kiln_py_model_outputs(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  const kiln_graph_t* g = kiln_model_graph(self->model);
  return kiln_py_specs(g, g->outputs, g->n_outputs);
}

/* save(sections: dict[str, bytes]) -> bytes of a .kiln artifact */
static PyObject* kiln_py_model_save(kiln_py_model_t* self, PyObject* args) {
  PyObject* dict;
  if (!PyArg_ParseTuple(args, "O!", &PyDict_Type, &dict)) return NULL;
  Py_ssize_t n = PyDict_Size(dict), pos = 0, i = 0;
  kiln_artifact_section_t* secs = calloc((size_t)n + 1, sizeof(*secs));
  if (!secs) return PyErr_NoMemory();
  PyObject *k, *v;
  while (PyDict_Next(dict, &pos, &k, &v)) {
    Py_ssize_t len;
    char* data;
    secs[i].name = PyUnicode_AsUTF8(k);
    if (!secs[i].name || PyBytes_AsStringAndSize(v, &data, &len)) {
      free(secs);
      return NULL;
    }
    secs[i].data = data;
    secs[i].size = (size_t)len;
    ++i;
  }
  /* The memory plan goes along, unless the caller wrote one. A symbolic
   * model has none to store: it plans per binding of its symbols (the
   * file's "syms" section carries them). */
  void* plan = NULL;
  size_t plan_size = 0;
  kiln_status_t s = kiln_ok();
  if (!kiln_model_is_symbolic(self->model) && !PyDict_GetItemString(dict, KILN_PLAN_SECTION)) {
    s = kiln_plan_serialize(kiln_model_graph(self->model), kiln_model_plan(self->model), &plan,
                            &plan_size);
    secs[n].name = KILN_PLAN_SECTION;
    secs[n].data = plan;
    secs[n].size = plan_size;
  }
  void* bytes = NULL;
  size_t size = 0;
  if (!s)
    s = kiln_artifact_write(kiln_model_graph(self->model), secs, (int32_t)(n + (plan != NULL)),
                            &bytes, &size);
  free(secs);
  free(plan);
  if (s) return kiln_py_raise(s);
  PyObject* out = PyBytes_FromStringAndSize(bytes, (Py_ssize_t)size);
  free(bytes);
  return out;
}

static PyObject* kiln_py_model_explain(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return PyErr_NoMemory();
  /* A symbolic model shows its graph with the symbols' names (the shapes
   * of the latest call are one instance of it); its arena is per shape. */
  int symbolic = kiln_model_is_symbolic(self->model);
  const kiln_graph_t* g = symbolic ? kiln_model_graph(self->model) : kiln_model_last_graph(self->model);
  const kiln_plan_t* p = kiln_model_plan(self->model);
  kiln_graph_print(g, f);
  int32_t calls = 0;
  int64_t view_bytes;
  for (int32_t i = 0; i < g->n_nodes; ++i) calls += !kiln_node_is_view(g, &g->nodes[i], &view_bytes);
  const kiln_hal_target_t* target = kiln_hal_target_find(kiln_model_target_name(self->model));
  kiln_hal_describe_engines(target, g, "  ", f);
  if (symbolic) fprintf(f, "  arena planned per shape at run time (latest: ");
  else fprintf(f, "  arena ");
  fprintf(f, "%.2f MiB%s, %d kernel calls per run, ISA %s, %d threads%s\n",
          (double)(p ? p->arena_size : 0) / (1 << 20), symbolic ? ")" : "", calls,
          kiln_cpu_isa_name(kiln_cpu_isa()),
          kiln_pool_size(kiln_model_pool(self->model)),
          kiln_pool_host_parallel() ? " (in the host's OpenMP regions)" : "");
  fclose(f);
  PyObject* s = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
  free(text);
  return s;
}

/* stats() -> dict of plan figures */
static PyObject* kiln_py_model_stats(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  const kiln_graph_t* g = kiln_model_last_graph(self->model);
  const kiln_plan_t* p = kiln_model_plan(self->model);
  size_t const_bytes = 0;
  int32_t calls = 0;
  int64_t view_bytes;
  for (int32_t v = 0; v < g->n_values; ++v)
    if (g->values[v].kind == KILN_VALUE_CONSTANT) const_bytes += g->values[v].nbytes;
  for (int32_t i = 0; i < g->n_nodes; ++i) calls += !kiln_node_is_view(g, &g->nodes[i], &view_bytes);
  uint64_t inst_ns = 0;
  int64_t instances = kiln_model_instances(self->model, &inst_ns), rebinds, kept, shared;
  kiln_model_instance_counts(self->model, &rebinds, &kept, &shared);
  return Py_BuildValue("{s:n,s:n,s:i,s:i,s:d,s:O,s:L,s:d,s:L,s:L,s:L}", "arena_bytes",
                       (Py_ssize_t)(p ? p->arena_size : 0), "constant_bytes",
                       (Py_ssize_t)const_bytes, "kernel_calls", calls, "nodes", g->n_nodes,
                       "compile_ms", self->compile_ms, "symbolic",
                       kiln_model_is_symbolic(self->model) ? Py_True : Py_False, "instances",
                       (long long)instances, "instance_us_mean",
                       instances ? (double)inst_ns / 1e3 / (double)instances : 0.0,
                       "instance_rebinds", (long long)rebinds, "instance_plans_kept",
                       (long long)kept, "instance_plans_shared", (long long)shared);
}

/* profile(on) -> None; profile() -> [(op, origin, total_ns)], runs */
static PyObject* kiln_py_model_profile(kiln_py_model_t* self, PyObject* args) {
  int on = -1;
  if (!PyArg_ParseTuple(args, "|p", &on)) return NULL;
  if (on >= 0) {
    kiln_model_profile_reset(self->model);
    kiln_model_set_profiling(self->model, on);
    Py_RETURN_NONE;
  }
  const kiln_graph_t* g = kiln_model_graph(self->model);
  int64_t runs;
  const uint64_t* t = kiln_model_profile(self->model, &runs);
  PyObject* list = PyList_New(g->n_nodes);
  if (!list) return NULL;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    PyObject* origin = kiln_py_name(g->nodes[i].origin);
    PyObject* row = origin ? Py_BuildValue("(sNK)", kiln_op_name(g->nodes[i].op), origin,
                                           (unsigned long long)t[i])
                           : NULL;
    if (!row) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, row);
  }
  return Py_BuildValue("(NL)", list, (long long)runs);
}

/* profile_wait() -> [ns] per node: time at the host team's closing barrier
 * waiting for threads that ran none of the node's tasks (not in profile()). */
static PyObject* kiln_py_model_profile_wait(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  const kiln_graph_t* g = kiln_model_graph(self->model);
  const uint64_t* w = kiln_model_profile_wait(self->model);
  PyObject* list = PyList_New(g->n_nodes);
  for (int32_t i = 0; list && i < g->n_nodes; ++i) {
    PyObject* v = PyLong_FromUnsignedLongLong((unsigned long long)w[i]);
    if (!v) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, i, v);
  }
  return list;
}

/* A value as (shape, dtype, nbytes, kind): what a node reads or writes. */
static PyObject* kiln_py_value_info(const kiln_graph_t* g, int32_t id) {
  if (id < 0) Py_RETURN_NONE;
  const kiln_value_t* v = &g->values[id];
  size_t bytes = v->kind == KILN_VALUE_CONSTANT ? v->nbytes : kiln_value_dense_bytes(v);
  return Py_BuildValue("(Nini)", kiln_py_shape_tuple(v), (int)v->dtype, (Py_ssize_t)bytes,
                       (int)v->kind);
}

static PyObject* kiln_py_model_target(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  return PyUnicode_FromString(kiln_model_target_name(self->model));
}

/* node_output(i) -> (bytes, dtype id, shape): from a run's node hook at
 * node i's end (the model's lock is held, the output as the node left it),
 * a copy of its output in the run's concrete graph; None out of reach (no
 * such node, or a target whose memory the host does not address). */
static PyObject* kiln_py_model_node_output(kiln_py_model_t* self, PyObject* args) {
  int i;
  if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
  const kiln_graph_t* g = kiln_model_last_graph(self->model);
  if (i < 0 || i >= g->n_nodes) Py_RETURN_NONE;
  const kiln_value_t* y = &g->values[g->nodes[i].outputs[0]];
  const void* data = kiln_model_value_data(self->model, g->nodes[i].outputs[0]);
  if (!data) Py_RETURN_NONE;
  return Py_BuildValue("(y#iN)", (const char*)data, (Py_ssize_t)kiln_value_dense_bytes(y),
                       (int)y->dtype, kiln_py_shape_tuple(y));
}

/* nodes() -> [(op, origin, inputs, outputs, params, runs_kernel)], inputs
 * and outputs as kiln_py_value_info; runs_kernel 0 for pure views. Of the
 * graph the last call ran: a symbolic model's concrete instance (its
 * symbolic graph, with symbolic dims, before the first call). */
static PyObject* kiln_py_model_nodes(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  const kiln_graph_t* g = kiln_model_last_graph(self->model);
  PyObject* list = PyList_New(g->n_nodes);
  for (int32_t i = 0; list && i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    PyObject* ins = PyTuple_New(n->n_inputs);
    PyObject* outs = PyTuple_New(n->n_outputs);
    PyObject* params = PyTuple_New(KILN_MAX_PARAMS);
    int ok = ins && outs && params;
    for (int32_t k = 0; ok && k < n->n_inputs; ++k) {
      PyObject* v = kiln_py_value_info(g, n->inputs[k]);
      ok = v != NULL;
      if (ok) PyTuple_SET_ITEM(ins, k, v);
    }
    for (int32_t k = 0; ok && k < n->n_outputs; ++k) {
      PyObject* v = kiln_py_value_info(g, n->outputs[k]);
      ok = v != NULL;
      if (ok) PyTuple_SET_ITEM(outs, k, v);
    }
    for (int32_t k = 0; ok && k < KILN_MAX_PARAMS; ++k) {
      PyObject* v = PyLong_FromLongLong((long long)n->params[k]);
      ok = v != NULL;
      if (ok) PyTuple_SET_ITEM(params, k, v);
    }
    int64_t view_bytes;
    PyObject* row = ok ? Py_BuildValue("(sNNNNi)", kiln_op_name(n->op), kiln_py_name(n->origin),
                                       ins, outs, params, !kiln_node_is_view(g, n, &view_bytes))
                       : NULL;
    if (!row) {
      if (!ok) {
        Py_XDECREF(ins);
        Py_XDECREF(outs);
        Py_XDECREF(params);
      }
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, i, row);
  }
  return list;
}

/* node_costs() -> [(flops, bytes)] per node (kiln_cost.h), of the graph the
 * last call ran (a symbolic model's instance). */
static PyObject* kiln_py_model_node_costs(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  return kiln_py_node_costs(self->model);
}

/* profile_report(wall_ms) -> (rows, totals, header, footer): the profile
 * counters as kiln_profile.h's report (kiln_ext_profile.h). */
static PyObject* kiln_py_model_profile_report(kiln_py_model_t* self, PyObject* args) {
  double wall_ms;
  if (!PyArg_ParseTuple(args, "d", &wall_ms)) return NULL;
  kiln_status_t s;
  PyObject* r = kiln_py_profile_report(self->model, wall_ms, &s);
  return s ? kiln_py_raise(s) : r;
}

/* Pools made for set_threads, one per thread count, kept for the process's
 * life like the default pool: models share them and never own them. */
#define KILN_PY_MAX_POOL_THREADS 256
static kiln_pool_t* kiln_py_pools[KILN_PY_MAX_POOL_THREADS + 1];

/* set_threads(n): later runs use a pool of n threads (0: the default pool,
 * KILN_NUM_THREADS). Lets one process time one model at several thread counts. */
static PyObject* kiln_py_model_set_threads(kiln_py_model_t* self, PyObject* args) {
  int n;
  if (!PyArg_ParseTuple(args, "i", &n)) return NULL;
  if (n < 0 || n > KILN_PY_MAX_POOL_THREADS) {
    PyErr_Format(PyExc_ValueError, "thread count %d is out of range [0, %d]", n,
                 KILN_PY_MAX_POOL_THREADS);
    return NULL;
  }
  kiln_pool_t* pool = NULL;
  if (n > 0) {
    /* The GIL serializes creation. */
    if (!kiln_py_pools[n]) {
      kiln_status_t s = kiln_pool_create(n, &kiln_py_pools[n]);
      if (s) return kiln_py_raise(s);
    }
    pool = kiln_py_pools[n];
  }
  Py_BEGIN_ALLOW_THREADS kiln_model_set_pool(self->model, pool);
  Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* threads() -> the thread count runs use */
static PyObject* kiln_py_model_threads(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  return PyLong_FromLong(kiln_pool_size(kiln_model_pool(self->model)));
}

/* output_shapes(inputs) -> [shape] for these inputs (a symbolic model's
 * outputs depend on the call's sizes). */
static PyObject* kiln_py_model_output_shapes(kiln_py_model_t* self, PyObject* args) {
  PyObject* in_obj;
  if (!PyArg_ParseTuple(args, "O", &in_obj)) return NULL;
  const kiln_graph_t* g = kiln_model_graph(self->model);
  int32_t max = g->n_inputs > g->n_outputs ? g->n_inputs : g->n_outputs;
  kiln_tensor_t* ts = malloc(sizeof(kiln_tensor_t) * (size_t)(max + 1));
  int64_t* shapes = malloc(sizeof(int64_t) * KILN_MAX_RANK * (size_t)(max + 1));
  int32_t* ranks = malloc(sizeof(int32_t) * (size_t)(max + 1));
  PyObject* result = NULL;
  int32_t n_in = 0;
  if (!ts || !shapes || !ranks) {
    PyErr_NoMemory();
  } else if (!kiln_py_tensors(in_obj, ts, shapes, max, &n_in, NULL)) {
    int64_t* out_shapes = malloc(sizeof(int64_t) * KILN_MAX_RANK * (size_t)(g->n_outputs + 1));
    kiln_status_t s = out_shapes ? kiln_model_output_shapes(self->model, ts, n_in, out_shapes, ranks)
                                 : kiln_status_make(KILN_OUT_OF_MEMORY, "shapes");
    if (s) {
      kiln_py_raise_call(s);
    } else {
      result = PyList_New(g->n_outputs);
      for (int32_t o = 0; result && o < g->n_outputs; ++o) {
        PyObject* t = PyTuple_New(ranks[o]);
        for (int32_t d = 0; t && d < ranks[o]; ++d)
          PyTuple_SET_ITEM(t, d, PyLong_FromLongLong(out_shapes[o * KILN_MAX_RANK + d]));
        PyList_SET_ITEM(result, o, t);
      }
    }
    free(out_shapes);
  }
  free(ts);
  free(shapes);
  free(ranks);
  return result;
}

static PyObject* kiln_py_model_symbolic(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  return PyBool_FromLong(kiln_model_is_symbolic(self->model));
}

/* writes(section_bytes or None) -> [(output, input, in_place)]: the
 * outputs that are new values of inputs, from an artifact's "writes"
 * section checked against this model's graph (kiln_writes.h); a malformed
 * one raises KilnError. */
static PyObject* kiln_py_model_writes(kiln_py_model_t* self, PyObject* args) {
  PyObject* obj;
  if (!PyArg_ParseTuple(args, "O", &obj)) return NULL;
  Py_buffer view = {0};
  if (obj != Py_None && PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
  const kiln_graph_t* g = kiln_model_graph(self->model);
  kiln_writes_t w;
  kiln_status_t s = kiln_writes_load(g, obj != Py_None ? view.buf : NULL, (size_t)view.len, &w);
  if (obj != Py_None) PyBuffer_Release(&view);
  if (s) return kiln_py_raise(kiln_status_annotate(s, "corrupt artifact"));
  PyObject* out = PyList_New(0);
  for (int32_t o = 0; out && o < g->n_outputs; ++o) {
    if (w.input[o] < 0) continue;
    PyObject* t = Py_BuildValue("(iiO)", (int)o, (int)w.input[o], w.in_place[o] ? Py_True : Py_False);
    if (!t || PyList_Append(out, t) < 0) Py_CLEAR(out);
    Py_XDECREF(t);
  }
  kiln_writes_clear(&w);
  return out;
}

/* example_shapes() -> [shape] of the inputs, symbolic sizes at the table's
 * first probe binding (moderate values in every range, the ones shape
 * inference checked): sizes to trace or try a symbolic model at. */
static PyObject* kiln_py_model_example_shapes(kiln_py_model_t* self, PyObject* unused) {
  (void)unused;
  const kiln_graph_t* g = kiln_model_graph(self->model);
  PyObject* list = PyList_New(g->n_inputs);
  for (int32_t i = 0; list && i < g->n_inputs; ++i) {
    kiln_value_t v = g->values[g->inputs[i]];
    /* The sizes it was traced at where the table knows them (they satisfy
     * every guard); else a probe's, which an expression of the symbols (a
     * slice's length) may take below 0 at: then the other probe, or 0. */
    for (int32_t d = 0; d < v.rank; ++d) {
      if (!kiln_dim_is_sym(v.shape[d]) || !g->syms) continue;
      int64_t e = kiln_sym_example(g->syms, v.shape[d]);
      int64_t p0 = kiln_sym_probe(g->syms, v.shape[d], 0), p1 = kiln_sym_probe(g->syms, v.shape[d], 1);
      v.shape[d] = e != KILN_SYM_NO_EXAMPLE && e >= 0 ? e : p0 >= 0 ? p0 : p1 >= 0 ? p1 : 0;
    }
    PyObject* shape = kiln_py_shape_tuple(&v);
    if (!shape) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, shape);
  }
  return list;
}

static PyMethodDef kiln_py_model_methods[] = {
    {"output_shapes", (PyCFunction)kiln_py_model_output_shapes, METH_VARARGS,
     "output_shapes(inputs) -> [shape] for these inputs' sizes"},
    {"example_shapes", (PyCFunction)kiln_py_model_example_shapes, METH_NOARGS,
     "[shape] of the inputs, symbolic sizes at the example's (else a probe's) binding"},
    {"writes", (PyCFunction)kiln_py_model_writes, METH_VARARGS,
     "writes(section bytes or None) -> [(output, input, in_place)]"},
    {"symbolic", (PyCFunction)kiln_py_model_symbolic, METH_NOARGS,
     "True when sizes are symbolic (planned per call's sizes)"},
    {"run", (PyCFunction)kiln_py_model_run, METH_VARARGS,
     "run(inputs, outputs): each a sequence of (data_ptr, dtype, shape)"},
    {"inputs", (PyCFunction)kiln_py_model_inputs, METH_NOARGS, "[(name, dtype, shape)]"},
    {"outputs", (PyCFunction)kiln_py_model_outputs, METH_NOARGS, "[(name, dtype, shape)]"},
    {"save", (PyCFunction)kiln_py_model_save, METH_VARARGS, "save(sections) -> bytes"},
    {"explain", (PyCFunction)kiln_py_model_explain, METH_NOARGS, "the compiled plan as text"},
    {"stats", (PyCFunction)kiln_py_model_stats, METH_NOARGS, "plan figures"},
    {"profile", (PyCFunction)kiln_py_model_profile, METH_VARARGS,
     "profile(on) starts/stops; profile() returns per-node times"},
    {"profile_wait", (PyCFunction)kiln_py_model_profile_wait, METH_NOARGS,
     "per-node ns waited at the host team's barrier (not in profile())"},
    {"target", (PyCFunction)kiln_py_model_target, METH_NOARGS, "the target it runs on"},
    {"node_output", (PyCFunction)kiln_py_model_node_output, METH_VARARGS,
     "node_output(i): inside a run's hook at node i's end, (bytes, dtype, shape)"},
    {"nodes", (PyCFunction)kiln_py_model_nodes, METH_NOARGS,
     "[(op, origin, inputs, outputs, params, runs_kernel)]"},
    {"node_costs", (PyCFunction)kiln_py_model_node_costs, METH_NOARGS,
     "[(flops, bytes)] per node (kiln_cost.h)"},
    {"profile_report", (PyCFunction)kiln_py_model_profile_report, METH_VARARGS,
     "profile_report(wall_ms) -> (rows, totals, header, footer) against the machine's peaks"},
    {"set_threads", (PyCFunction)kiln_py_model_set_threads, METH_VARARGS,
     "set_threads(n): run on n threads (0: the default pool)"},
    {"threads", (PyCFunction)kiln_py_model_threads, METH_NOARGS, "threads runs use"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject kiln_py_model_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kiln._C.Model",
    .tp_basicsize = sizeof(kiln_py_model_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A compiled kiln model.",
    .tp_dealloc = (destructor)kiln_py_model_dealloc,
    .tp_methods = kiln_py_model_methods,
};

/* ---- module functions --------------------------------------------------- */

/* The target named (None: the default, $KILN_TARGET or the CPU); NULL with
 * ValueError set for an unknown name. */
static const kiln_hal_target_t* kiln_py_target(const char* name) {
  const kiln_hal_target_t* t = kiln_hal_target_find(name);
  if (!t)
    PyErr_Format(PyExc_ValueError, "kiln: no target %s (cpu, reference)",
                 name ? name : getenv("KILN_TARGET"));
  return t;
}

/* compile(graph, log=False, weights_bf16=False, compute_bf16=False, quant=0,
 * group=32, asym=False, a8=False, progress=None, target=None) -> Model.
 * The graph is consumed. weights_bf16: pack linear weights as bf16;
 * compute_bf16: pack them for bf16 compute (inputs rounded to bf16 too);
 * quant 8 / 4: quantize them to int8 per channel / int4 in groups of group;
 * a8: int8 activations (int8: more than 8 rows; int4: at most 8);
 * progress: None, or a callable given each pass's name as it starts;
 * target: "cpu", "reference" (None: $KILN_TARGET, else the CPU). */
/* The compiler's on_pass: calls the front end's progress callable with the
 * pass's name (compiles run with the GIL released: taken back here). A
 * progress bar never fails a compile: its errors are dropped. */
static void kiln_py_on_pass(void* ctx, const char* pass) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* r = PyObject_CallFunction((PyObject*)ctx, "s", pass);
  if (!r) PyErr_Clear();
  Py_XDECREF(r);
  PyGILState_Release(gil);
}

static PyObject* kiln_py_compile(PyObject* mod, PyObject* args) {
  (void)mod;
  kiln_py_graph_t* gobj;
  int log = 0, weights_bf16 = 0, compute_bf16 = 0, quant = 0, group = 32, asym = 0, a8 = 0;
  PyObject* progress = Py_None;
  const char* target_name = NULL;
  if (!PyArg_ParseTuple(args, "O!|pppiippOz", &kiln_py_graph_type, &gobj, &log, &weights_bf16,
                        &compute_bf16, &quant, &group, &asym, &a8, &progress, &target_name))
    return NULL;
  const kiln_hal_target_t* target = kiln_py_target(target_name);
  if (!target) return NULL;
  kiln_graph_t* g = kiln_py_graph_get(gobj);
  if (!g) return NULL;
  gobj->graph = NULL;
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  if (log) o.log = stderr;
  o.weights_bf16 = weights_bf16;
  o.compute_bf16 = compute_bf16;
  o.weights_quant = quant;
  o.weights_group = group;
  o.weights_asym = asym;
  o.weights_a8 = a8;
  if (progress != Py_None) {
    o.on_pass = kiln_py_on_pass;
    o.on_pass_ctx = progress;
  }
  o.target = target->name;
  kiln_graph_t* compiled = NULL;
  kiln_model_t* model = NULL;
  kiln_status_t s;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  Py_BEGIN_ALLOW_THREADS s = kiln_compile(g, &o, &compiled);
  /* The caller takes lent bytes back after this call: keep what is read. */
  if (!s) s = kiln_graph_own_lent(compiled, gobj->lent, gobj->n_lent);
  if (s) kiln_graph_release(compiled);
  if (!s && o.on_pass) o.on_pass(o.on_pass_ctx, "plan");
  if (!s) s = kiln_model_create_on(compiled, NULL, NULL, NULL, 0, target, &model);
  Py_END_ALLOW_THREADS kiln_py_graph_forget_lent(gobj);
  if (s) return kiln_py_raise(s);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  PyObject* m = kiln_py_model_wrap(model);
  if (m) ((kiln_py_model_t*)m)->compile_ms =
      (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  return m;
}

/* load(bytes) -> (Model, {section name: bytes}) for the requested names */
/* {name: bytes} for each of `names` present in the artifact's section table
 * (absent ones are left out); NULL with an exception set on error. */
static PyObject* kiln_py_sections_of(const void* blob, size_t size, PyObject* names) {
  PyObject* sections = PyDict_New();
  PyObject* fast = sections ? PySequence_Fast(names, "section names") : NULL;
  for (Py_ssize_t i = 0; fast && i < PySequence_Fast_GET_SIZE(fast); ++i) {
    const char* name = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fast, i));
    const void* data = NULL;
    size_t len = 0;
    if (!name) break;
    kiln_status_t fs = kiln_artifact_find_section(blob, size, name, &data, &len);
    if (fs) {
      kiln_status_free(fs);
      continue;
    }
    if (data) {
      PyObject* b = PyBytes_FromStringAndSize(data, (Py_ssize_t)len);
      if (!b || PyDict_SetItemString(sections, name, b)) {
        Py_XDECREF(b);
        break;
      }
      Py_DECREF(b);
    }
  }
  Py_XDECREF(fast);
  if (PyErr_Occurred()) {
    Py_XDECREF(sections);
    return NULL;
  }
  return sections;
}

/* sections(artifact_bytes, names) -> {name: bytes}: the front end's own
 * sections, read without building the model. */
static PyObject* kiln_py_sections(PyObject* mod, PyObject* args) {
  (void)mod;
  Py_buffer view;
  PyObject* names;
  if (!PyArg_ParseTuple(args, "y*O", &view, &names)) return NULL;
  PyObject* sections = kiln_py_sections_of(view.buf, (size_t)view.len, names);
  PyBuffer_Release(&view);
  return sections;
}

/* load(bytes or path, section_names, target=None) -> (Model, sections). A
 * path is read straight into the buffer the model keeps (its constants are
 * used in place), so a large model is in memory once, not twice. */
static PyObject* kiln_py_load(PyObject* mod, PyObject* args) {
  (void)mod;
  PyObject *source, *names;
  const char* target_name = NULL;
  if (!PyArg_ParseTuple(args, "OO|z", &source, &names, &target_name)) return NULL;
  const kiln_hal_target_t* target = kiln_py_target(target_name);
  if (!target) return NULL;
  void* blob = NULL;
  size_t size = 0;
  kiln_status_t s;
  if (PyUnicode_Check(source)) {
    const char* path = PyUnicode_AsUTF8(source);
    if (!path) return NULL;
    Py_BEGIN_ALLOW_THREADS s = kiln_artifact_load_file(path, &blob, &size);
    Py_END_ALLOW_THREADS
  } else {
    /* Copy into a 64-byte-aligned buffer the model owns. */
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_SIMPLE)) return NULL;
    s = kiln_allocator_malloc(kiln_allocator_system(), (size_t)view.len, &blob);
    if (!s) memcpy(blob, view.buf, (size_t)view.len);
    size = (size_t)view.len;
    PyBuffer_Release(&view);
  }
  if (s) return kiln_py_raise(s);
  kiln_graph_t* g = NULL;
  kiln_model_t* model = NULL;
  Py_BEGIN_ALLOW_THREADS s = kiln_artifact_read(blob, size, kiln_allocator_system(), &g);
  Py_END_ALLOW_THREADS if (s) {
    kiln_allocator_free(kiln_allocator_system(), blob);
    return kiln_py_raise(s);
  }
  PyObject* sections = kiln_py_sections_of(blob, size, names);
  if (!sections) {
    kiln_graph_release(g);
    kiln_allocator_free(kiln_allocator_system(), blob);
    return NULL;
  }
  /* The stored memory plan, when the file has one (checked before use). */
  const void* plan = NULL;
  size_t plan_size = 0;
  kiln_status_free(kiln_artifact_find_section(blob, size, KILN_PLAN_SECTION, &plan, &plan_size));
  s = kiln_model_create_on(g, blob, NULL, plan, plan_size, target, &model);
  if (s) {
    Py_DECREF(sections);
    return kiln_py_raise(kiln_status_annotate(s, "loading the artifact"));
  }
  PyObject* m = kiln_py_model_wrap(model);
  if (!m) {
    Py_DECREF(sections);
    return NULL;
  }
  return Py_BuildValue("(NN)", m, sections);
}

static PyObject* kiln_py_isa(PyObject* mod, PyObject* args) {
  (void)mod;
  const char* want = NULL;
  if (!PyArg_ParseTuple(args, "|z", &want)) return NULL;
  int level;
  if (want && (!kiln_cpu_isa_parse(want, &level) || level < 0))
    return PyErr_Format(PyExc_ValueError, "kiln.isa: %R is not an ISA level (generic, avx2, avx512)",
                        PyTuple_GET_ITEM(args, 0));
  if (want) kiln_cpu_isa_set((kiln_isa_t)level);
  return PyUnicode_FromString(kiln_cpu_isa_name(kiln_cpu_isa()));
}

static PyObject* kiln_py_isa_env_known(PyObject* mod, PyObject* unused) {
  (void)mod;
  (void)unused;
  return PyBool_FromLong(kiln_cpu_isa_env_known());
}

/* bf16_engine([name]) -> the bf16 engine bf16-compute GEMMs use: "amx",
 * "avx512_bf16" or "none" (then the fp32 kernels widen); name caps it (to
 * what the CPU has), for tests. */
static PyObject* kiln_py_bf16_engine(PyObject* mod, PyObject* args) {
  (void)mod;
  const char* want = NULL;
  if (!PyArg_ParseTuple(args, "|z", &want)) return NULL;
  if (want && strcmp(want, "amx") && strcmp(want, "avx512_bf16") && strcmp(want, "none"))
    return PyErr_Format(PyExc_ValueError, "bf16_engine: %R is not amx, avx512_bf16 or none",
                        PyTuple_GET_ITEM(args, 0));
  if (want) {
    unsigned all = KILN_CPU_BF16_AMX | KILN_CPU_BF16_AVX512;
    kiln_cpu_bf16_set(!strcmp(want, "amx")           ? all
                      : !strcmp(want, "avx512_bf16") ? KILN_CPU_BF16_AVX512
                                                     : 0u);
  }
  return PyUnicode_FromString(kiln_cpu_bf16_name(kiln_cpu_bf16()));
}

/* shared_constants() -> packed weights shared between graphs, alive now */
static PyObject* kiln_py_shared_constants(PyObject* mod, PyObject* unused) {
  (void)mod;
  (void)unused;
  return PyLong_FromLong(kiln_shared_count());
}

static PyObject* kiln_py_num_threads(PyObject* mod, PyObject* unused) {
  (void)mod;
  (void)unused;
  return PyLong_FromLong(kiln_pool_size(kiln_pool_default()));
}

/* host_threads(on, follow=False) -> path of the host OpenMP runtime kiln
 * now runs its parallel kernels in, or None (kiln's own threads; follow:
 * no more of them than the runtime's thread count). */
static PyObject* kiln_py_host_threads_set(PyObject* mod, PyObject* args) {
  (void)mod;
  int on, follow = 0;
  if (!PyArg_ParseTuple(args, "p|p", &on, &follow)) return NULL;
  const char* path = kiln_py_host_threads(on, follow);
  if (!path) Py_RETURN_NONE;
  return PyUnicode_DecodeFSDefault(path);
}

/* machine(measure=False) -> dict: the machine and its peaks (kiln_machine.h) */
static PyObject* kiln_py_machine(PyObject* mod, PyObject* args) {
  (void)mod;
  int measure = 0;
  if (!PyArg_ParseTuple(args, "|p", &measure)) return NULL;
  kiln_machine_t m;
  kiln_status_t s;
  Py_BEGIN_ALLOW_THREADS s = kiln_machine_get(kiln_pool_default(), measure, &m);
  Py_END_ALLOW_THREADS if (s) return kiln_py_raise(s);
  return Py_BuildValue(
      "{s:s,s:i,s:i,s:l,s:l,s:l,s:{s:O,s:O,s:O,s:O,s:O,s:O,s:O},s:s,s:s,s:d,s:d,s:d,s:d,s:d,s:d,s:d,"
      "s:d,s:O,s:O,s:L,s:s,s:i}",
      "cpu_model", m.cpu_model, "cores", m.cores, "threads", m.threads, "l1d_bytes", m.l1d_bytes,
      "l2_bytes", m.l2_bytes, "l3_bytes", m.l3_bytes, "features", "avx2",
      m.avx2 ? Py_True : Py_False, "avx512", m.avx512 ? Py_True : Py_False, "avx512_bf16",
      m.avx512_bf16 ? Py_True : Py_False, "avx512_vnni", m.avx512_vnni ? Py_True : Py_False,
      "avx512_vbmi", m.avx512_vbmi ? Py_True : Py_False, "amx_bf16", m.amx_bf16 ? Py_True : Py_False, "amx_int8", m.amx_int8 ? Py_True : Py_False,
      "isa", m.isa, "bf16_engine", m.bf16_engine, "fma_gflops_1", m.fma_gflops_1, "fma_gflops",
      m.fma_gflops, "bf16_gflops_1", m.bf16_gflops_1, "bf16_gflops", m.bf16_gflops, "int8_gops_1",
      m.int8_gops_1, "int8_gops", m.int8_gops, "bandwidth_gbs_1", m.bandwidth_gbs_1,
      "bandwidth_gbs", m.bandwidth_gbs, "measured", m.measured ? Py_True : Py_False,
      "busy", m.busy ? Py_True : Py_False, "measured_at", (long long)m.measured_at, "cache_path",
      m.cache_path, "physical_cores", m.physical_cores);
}

/* machine_sample(probe, threads) -> float: one sample of a peak probe
 * ("read": GB/s over the 128 MiB buffer; "fma": GFLOP/s) on `threads` of
 * the default pool's threads, for benchmarks that divide a row by a roof
 * taken beside it (kiln_machine_sample). */
static PyObject* kiln_py_machine_sample(PyObject* mod, PyObject* args) {
  (void)mod;
  const char* probe;
  int threads;
  if (!PyArg_ParseTuple(args, "si", &probe, &threads)) return NULL;
  kiln_machine_probe_t p;
  if (!strcmp(probe, "read")) {
    p = KILN_MACHINE_PROBE_READ;
  } else if (!strcmp(probe, "fma")) {
    p = KILN_MACHINE_PROBE_FMA;
  } else {
    PyErr_Format(PyExc_ValueError, "machine_sample: probe '%s' (\"read\" or \"fma\")", probe);
    return NULL;
  }
  kiln_pool_t* pool = kiln_pool_default();
  int size = pool ? kiln_pool_size(pool) : 1;
  if (threads < 1 || threads > size) {
    PyErr_Format(PyExc_ValueError, "machine_sample: %d threads (1..%d, kiln's pool)", threads, size);
    return NULL;
  }
  double v = 0;
  kiln_status_t s;
  Py_BEGIN_ALLOW_THREADS s = kiln_machine_sample(threads > 1 ? pool : NULL, threads, p, &v);
  Py_END_ALLOW_THREADS if (s) return kiln_py_raise(s);
  return PyFloat_FromDouble(v);
}

static PyMethodDef kiln_py_functions[] = {
    {"machine", kiln_py_machine, METH_VARARGS,
     "machine(measure=False) -> the machine and its measured peaks (cached)"},
    {"machine_sample", kiln_py_machine_sample, METH_VARARGS,
     "machine_sample(probe, threads) -> one sample of the read (GB/s) or fma (GFLOP/s) probe"},
    {"compile", kiln_py_compile, METH_VARARGS, "compile(graph, log=False) -> Model"},
    {"load", kiln_py_load, METH_VARARGS, "load(bytes or path, section_names) -> (Model, sections)"},
    {"sections", kiln_py_sections, METH_VARARGS, "sections(bytes, section_names) -> {name: bytes}"},
    {"isa", kiln_py_isa, METH_VARARGS, "isa([name]) -> the ISA level kernels use"},
    {"isa_env_known", kiln_py_isa_env_known, METH_NOARGS,
     "isa_env_known() -> False when KILN_ISA names no level kiln knows"},
    {"bf16_engine", kiln_py_bf16_engine, METH_VARARGS,
     "bf16_engine([name]) -> the bf16 engine bf16 compute uses (amx, avx512_bf16, none)"},
    {"num_threads", kiln_py_num_threads, METH_NOARGS, "threads in kiln's pool"},
    {"shared_constants", kiln_py_shared_constants, METH_NOARGS,
     "packed weights alive that graphs share (frozen torch.compile parameters)"},
    {"host_threads", kiln_py_host_threads_set, METH_VARARGS,
     "host_threads(on, follow=False) -> the OpenMP runtime kiln's kernels run in, or None"},
    {"frozen_unchanged", (PyCFunction)(void (*)(void))kiln_py_frozen_unchanged, METH_FASTCALL,
     "frozen_unchanged(args, positions, tensors, versions) -> each args[positions[k]] is "
     "tensors[k] at version versions[k]"},
    {"empty", kiln_py_empty, METH_VARARGS,
     "empty(shape, dlpack_code, bits) -> DLPack capsule over kiln-managed memory"},
    {"output_cache", kiln_py_output_cache, METH_VARARGS,
     "output_cache([idle_cap_bytes[, trim]]) -> (idle_bytes, idle_blocks, hits, misses)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kiln_py_module = {PyModuleDef_HEAD_INIT, "kiln._C",
                                            "kiln's C core.", -1, kiln_py_functions,
                                            NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__C(void) {
  if (PyType_Ready(&kiln_py_graph_type) < 0 || PyType_Ready(&kiln_py_model_type) < 0) return NULL;
  PyObject* m = PyModule_Create(&kiln_py_module);
  if (!m) return NULL;
  kiln_py_error = PyErr_NewExceptionWithDoc("kiln.KilnError", "An error from kiln's C core.",
                                            PyExc_RuntimeError, NULL);
  PyObject* ops = PyDict_New();
  PyObject* dtypes = PyDict_New();
  PyObject* acts = PyDict_New();
  if (!kiln_py_error || !ops || !dtypes || !acts) return NULL;
  for (int i = 0; i < KILN_OP_COUNT; ++i) {
    PyObject* v = PyLong_FromLong(i);
    PyDict_SetItemString(ops, kiln_op_name((kiln_op_t)i), v);
    Py_DECREF(v);
  }
  for (int i = 0; i < KILN_DTYPE_COUNT; ++i) {
    PyObject* v = PyLong_FromLong(i);
    PyDict_SetItemString(dtypes, kiln_dtype_name((kiln_dtype_t)i), v);
    Py_DECREF(v);
  }
  /* PARAMS: op name -> [(field name, index, count, is_float)], the named
   * parameter layouts of ir/kiln_op_params.h (lower case), from which the
   * op table builds params by name (capture.LoweringContext.node). */
  PyObject* params = PyDict_New();
  for (int i = 0; params && i < KILN_OP_COUNT; ++i) {
    PyObject* fields = PyList_New(0);
    for (int fl = 0; fields && fl < 2; ++fl) {
      kiln_op_param_t f;
      for (int k = 0; kiln_op_param((kiln_op_t)i, fl, k, &f); ++k) {
        char lower[64];
        size_t len = strlen(f.name);
        if (len >= sizeof lower) len = sizeof lower - 1;
        for (size_t c = 0; c < len; ++c) lower[c] = (char)tolower((unsigned char)f.name[c]);
        lower[len] = '\0';
        PyObject* t = Py_BuildValue("(siii)", lower, f.index, f.count, fl);
        if (t) PyList_Append(fields, t);
        Py_XDECREF(t);
      }
    }
    if (fields) PyDict_SetItemString(params, kiln_op_name((kiln_op_t)i), fields);
    Py_XDECREF(fields);
  }
  static const char* const act_names[] = {"none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh",
                                          "relu6", "hardswish"};
  _Static_assert(sizeof(act_names) / sizeof(act_names[0]) == KILN_ACT_COUNT, "one per activation");
  for (int i = 0; i < KILN_ACT_COUNT; ++i) {
    PyObject* v = PyLong_FromLong(i);
    PyDict_SetItemString(acts, act_names[i], v);
    Py_DECREF(v);
  }
  /* ISA_FAMILIES: kernel family -> its ISA levels, lowest first; ISA_LEVELS:
   * this architecture's levels. Expanded from the build's lists
   * (kernels/kiln_isa_lists.h), so the kernel bench's per-ISA rows follow
   * the lists the kernels were built from. */
  static const struct { const char* name; unsigned mask; } families[] = {
#define KILN_PY_FAMILY_(family, LIST) {#family, KILN_ISA_VARIANT_MASK(LIST)},
      KILN_ISA_FAMILIES(KILN_PY_FAMILY_)
#undef KILN_PY_FAMILY_
      {"levels", KILN_ISA_VARIANT_MASK(KILN_ISA_LEVELS)}};
  size_t n_families = sizeof families / sizeof families[0];
  PyObject* isa_families = PyDict_New();
  PyObject* isa_levels = NULL;
  for (size_t f = 0; isa_families && f < n_families; ++f) {
    PyObject* levels = PyList_New(0);
    for (int l = 0; levels && l < KILN_ISA_COUNT; ++l) /* enum order: ascending per architecture */
      if (families[f].mask >> l & 1u) {
        PyObject* name = PyUnicode_FromString(kiln_cpu_isa_name((kiln_isa_t)l));
        if (!name || PyList_Append(levels, name)) Py_CLEAR(levels);
        Py_XDECREF(name);
      }
    if (!levels) return NULL;
    if (f + 1 == n_families) {
      isa_levels = levels;
      break;
    }
    int bad = PyDict_SetItemString(isa_families, families[f].name, levels);
    Py_DECREF(levels);
    if (bad) return NULL;
  }
  if (!isa_families || !isa_levels) return NULL;
  Py_INCREF(&kiln_py_graph_type);
  PyModule_AddObject(m, "Graph", (PyObject*)&kiln_py_graph_type);
  Py_INCREF(&kiln_py_model_type);
  PyModule_AddObject(m, "Model", (PyObject*)&kiln_py_model_type);
  PyModule_AddObject(m, "KilnError", kiln_py_error);
  PyModule_AddObject(m, "OPS", ops);
  PyModule_AddObject(m, "PARAMS", params);
  PyModule_AddObject(m, "DTYPES", dtypes);
  PyModule_AddObject(m, "ACTIVATIONS", acts);
  PyModule_AddObject(m, "ISA_FAMILIES", isa_families);
  PyModule_AddObject(m, "ISA_LEVELS", isa_levels);
  PyModule_AddIntConstant(m, "MAX_RANK", KILN_MAX_RANK);
  return m;
}
