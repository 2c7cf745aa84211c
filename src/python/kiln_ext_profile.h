/* The roofline profile for Python (kiln.profile, the torch.profiler events'
 * arguments): kiln_profile.h's report and kiln_cost.h's node costs as Python
 * objects, so the Python front end counts nothing itself. */
#ifndef KILN_EXT_PROFILE_H
#define KILN_EXT_PROFILE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "runtime/kiln_model.h"

/* [(flops, bytes)] per node of the graph the model's last call ran. */
PyObject* kiln_py_node_costs(const kiln_model_t* model);

/* (rows, totals, header, footer) of the model's profile counters against
 * the machine's peaks (kiln_machine_get on the default pool): rows are
 * dicts in the report's order (slowest first), each with its table "line";
 * totals a dict; header and footer the table's other lines. On a kiln
 * error returns NULL with *out_status set (no Python exception). */
PyObject* kiln_py_profile_report(const kiln_model_t* model, double wall_ms,
                                 kiln_status_t* out_status);

#endif /* KILN_EXT_PROFILE_H */
