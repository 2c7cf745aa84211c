/* DLPack export of kiln-managed output memory.
 *
 * A compiled module's large outputs (activations saved for backward,
 * gradients) are allocated here rather than by torch.empty, so that their
 * memory comes back to kiln's block cache when PyTorch frees them and is
 * reused without page faults next step (see base/kiln_block_cache.h for
 * the cost this removes). PyTorch takes the block with torch.from_dlpack
 * and calls the deleter when the last tensor viewing it dies, from
 * whichever thread that happens on, with or without the GIL: the deleter
 * only touches the cache's own mutex.
 *
 * The structs below are DLPack's stable (pre-1.0, "dltensor" capsule) ABI,
 * written out from the specification (dmlc/dlpack, include/dlpack.h). */
#include "kiln_ext_dlpack.h"

#include <stdint.h>
#include <stdlib.h>

#include "base/kiln_block_cache.h"
#include "ir/kiln_graph.h"

typedef struct {
  int32_t device_type; /* 1: kDLCPU */
  int32_t device_id;
} kiln_dl_device_t;

typedef struct {
  uint8_t code; /* 0 int, 1 uint, 2 float, 4 bfloat, 6 bool */
  uint8_t bits;
  uint16_t lanes;
} kiln_dl_dtype_t;

typedef struct {
  void* data;
  kiln_dl_device_t device;
  int32_t ndim;
  kiln_dl_dtype_t dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} kiln_dl_tensor_t;

typedef struct kiln_dl_managed_s {
  kiln_dl_tensor_t dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct kiln_dl_managed_s* self);
} kiln_dl_managed_t;

/* One allocation per exported tensor: the managed struct, the block's byte
 * count (the cache's key) and the shape and strides DLPack points at. */
typedef struct {
  kiln_dl_managed_t m;
  size_t bytes;
  int64_t dims[2 * KILN_MAX_RANK];
} kiln_dl_export_t;

static void kiln_dl_deleter(kiln_dl_managed_t* self) {
  kiln_dl_export_t* e = (kiln_dl_export_t*)self;
  kiln_block_cache_put(kiln_block_cache_default(), e->m.dl_tensor.data, e->bytes);
  free(e);
}

/* A capsule nobody consumed still owns its tensor. */
static void kiln_dl_capsule_destructor(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed: now "used_dltensor" */
  kiln_dl_managed_t* m = PyCapsule_GetPointer(cap, "dltensor");
  if (m && m->deleter) m->deleter(m);
}

PyObject* kiln_py_empty(PyObject* mod, PyObject* args) {
  (void)mod;
  PyObject* shape;
  int code, bits;
  if (!PyArg_ParseTuple(args, "Oii", &shape, &code, &bits)) return NULL;
  PyObject* fast = PySequence_Fast(shape, "shape must be a sequence of ints");
  if (!fast) return NULL;
  Py_ssize_t nd = PySequence_Fast_GET_SIZE(fast);
  if (nd > KILN_MAX_RANK || bits <= 0 || bits % 8 || code < 0 || code > 255) {
    Py_DECREF(fast);
    PyErr_SetString(PyExc_ValueError, "empty: bad rank or dtype");
    return NULL;
  }
  kiln_dl_export_t* e = calloc(1, sizeof(*e));
  if (!e) {
    Py_DECREF(fast);
    return PyErr_NoMemory();
  }
  size_t elems = 1;
  for (Py_ssize_t i = 0; i < nd; ++i) {
    long long d = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (d < 0 || (d > 0 && elems > SIZE_MAX / 16 / (size_t)d)) {
      Py_DECREF(fast);
      free(e);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "empty: bad dimension");
      return NULL;
    }
    e->dims[i] = d;
    elems *= (size_t)d;
  }
  Py_DECREF(fast);
  for (Py_ssize_t i = nd, st = 1; i-- > 0;) { /* contiguous strides, in elements */
    e->dims[KILN_MAX_RANK + i] = st;
    st *= e->dims[i] > 1 ? e->dims[i] : 1;
  }
  e->bytes = elems * (size_t)(bits / 8);
  void* data;
  kiln_status_t s = kiln_block_cache_get(kiln_block_cache_default(), e->bytes, &data);
  if (s) {
    kiln_status_free(s);
    free(e);
    return PyErr_NoMemory();
  }
  e->m.dl_tensor = (kiln_dl_tensor_t){data, {1, 0}, (int32_t)nd, {(uint8_t)code, (uint8_t)bits, 1},
                                      e->dims, e->dims + KILN_MAX_RANK, 0};
  e->m.manager_ctx = e;
  e->m.deleter = kiln_dl_deleter;
  PyObject* cap = PyCapsule_New(&e->m, "dltensor", kiln_dl_capsule_destructor);
  if (!cap) kiln_dl_deleter(&e->m);
  return cap;
}

PyObject* kiln_py_output_cache(PyObject* mod, PyObject* args) {
  (void)mod;
  long long cap = -1;
  int trim = 0;
  if (!PyArg_ParseTuple(args, "|Lp", &cap, &trim)) return NULL;
  kiln_block_cache_t* c = kiln_block_cache_default();
  if (cap >= 0) kiln_block_cache_set_cap(c, (size_t)cap);
  if (trim) kiln_block_cache_trim(c);
  kiln_block_cache_stats_t st = kiln_block_cache_stats(c);
  return Py_BuildValue("(nnnn)", (Py_ssize_t)st.idle_bytes, (Py_ssize_t)st.idle_blocks,
                       (Py_ssize_t)st.hits, (Py_ssize_t)st.misses);
}
