/* kiln_ext_profile.h: the C profile report and node costs as Python objects. */
#include "kiln_ext_profile.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/kiln_pool.h"
#include "runtime/kiln_cost.h"
#include "runtime/kiln_profile.h"

PyObject* kiln_py_node_costs(const kiln_model_t* model) {
  const kiln_graph_t* g = kiln_model_last_graph(model);
  PyObject* list = PyList_New(g->n_nodes);
  for (int32_t i = 0; list && i < g->n_nodes; ++i) {
    kiln_node_cost_t c;
    kiln_node_cost(g, &g->nodes[i], &c);
    PyObject* row = Py_BuildValue("(LL)", (long long)c.flops, (long long)c.bytes);
    if (!row) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, i, row);
  }
  return list;
}

/* What one of the report's print functions writes, as a str (without the
 * last newline). */
typedef void (*kiln_py_print_fn)(const kiln_profile_report_t* r, const kiln_graph_t* g, int32_t k,
                                 FILE* out);

static void kiln_py_print_header(const kiln_profile_report_t* r, const kiln_graph_t* g,
                                 int32_t k, FILE* out) {
  (void)g, (void)k;
  kiln_profile_report_print_header(r, out);
}
static void kiln_py_print_footer(const kiln_profile_report_t* r, const kiln_graph_t* g,
                                 int32_t k, FILE* out) {
  (void)g, (void)k;
  kiln_profile_report_print_footer(r, out);
}

static PyObject* kiln_py_printed(kiln_py_print_fn fn, const kiln_profile_report_t* r,
                                 const kiln_graph_t* g, int32_t k) {
  char* text = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return PyErr_NoMemory();
  fn(r, g, k, f);
  if (fclose(f) || !text) {
    free(text);
    return PyErr_NoMemory();
  }
  if (len && text[len - 1] == '\n') --len;
  PyObject* s = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
  free(text);
  return s;
}

static PyObject* kiln_py_report_row(const kiln_profile_report_t* r, const kiln_graph_t* g,
                                    int32_t k) {
  const kiln_profile_row_t* row = &r->rows[k];
  PyObject* line = kiln_py_printed(kiln_profile_report_print_row, r, g, k);
  if (!line) return NULL;
  return Py_BuildValue("{s:i,s:d,s:d,s:d,s:L,s:L,s:d,s:d,s:d,s:s,s:d,s:s,s:d,s:N}", "node",
                       row->node, "ms", row->ms, "wait_ms", row->wait_ms, "share", row->share,
                       "flops", (long long)row->flops, "bytes", (long long)row->bytes, "gflops",
                       row->gflops, "gbs", row->gbs, "intensity", row->intensity, "bound",
                       row->compute_bound ? "compute" : "memory", "peak_fraction",
                       row->peak_fraction, "roof", row->roof, "roof_gflops", row->roof_gflops,
                       "line", line);
}

static PyObject* kiln_py_report_totals(const kiln_profile_report_t* r) {
  PyObject* t = Py_BuildValue("{s:L,s:i,s:d,s:d,s:d,s:L,s:L,s:d,s:d,s:d,s:d,s:d,s:s}", "runs",
                              (long long)r->runs, "threads", r->threads, "ms", r->ms, "wait_ms",
                              r->wait_ms, "wall_ms", r->wall_ms, "flops", (long long)r->flops,
                              "bytes", (long long)r->bytes, "gflops", r->gflops, "gbs", r->gbs,
                              "peak_gflops", r->peak_gflops, "bandwidth_gbs", r->bandwidth_gbs,
                              "ridge", r->ridge, "isa", r->isa);
  PyObject* w = t ? Py_BuildValue("{s:L,s:L,s:O,s:d,s:d,s:s}", "weight_bytes", (long long)r->weight_bytes,
                                  "weight_rows", (long long)r->weight_rows, "weight_bound",
                                  r->weight_bound ? Py_True : Py_False, "calls_per_s",
                                  r->calls_per_s, "tokens_per_s", r->tokens_per_s, "bandwidth_how",
                                  r->bandwidth_sampled ? "sampled" : "cached")
                  : NULL;
  if (!w || PyDict_Update(t, w)) Py_CLEAR(t);
  Py_XDECREF(w);
  return t;
}

PyObject* kiln_py_profile_report(const kiln_model_t* model, double wall_ms,
                                 kiln_status_t* out_status) {
  *out_status = NULL;
  kiln_machine_t machine;
  kiln_profile_report_t r;
  kiln_pool_t* all = kiln_pool_default();
  kiln_status_t s;
  Py_BEGIN_ALLOW_THREADS s = all ? kiln_machine_get(all, 0, &machine)
                                 : kiln_status_make(KILN_OUT_OF_MEMORY, "the default thread pool");
  if (!s) s = kiln_profile_bandwidth_now(kiln_model_pool(model), kiln_pool_size(kiln_model_pool(model)), &machine);
  Py_END_ALLOW_THREADS if (!s) s = kiln_profile_report_of_model(model, wall_ms, &machine, &r);
  if (s) {
    *out_status = s;
    return NULL;
  }
  const kiln_graph_t* g = kiln_model_last_graph(model);
  PyObject* rows = PyList_New(r.n_rows);
  for (int32_t k = 0; rows && k < r.n_rows; ++k) {
    PyObject* row = kiln_py_report_row(&r, g, k);
    if (!row) Py_CLEAR(rows);
    else PyList_SET_ITEM(rows, k, row);
  }
  PyObject* out = NULL;
  if (rows)
    out = Py_BuildValue("(NNNN)", rows, kiln_py_report_totals(&r),
                        kiln_py_printed(kiln_py_print_header, &r, g, 0),
                        kiln_py_printed(kiln_py_print_footer, &r, g, 0));
  kiln_profile_report_deinitialize(&r);
  return out;
}
