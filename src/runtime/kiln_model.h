/* A compiled model ready to run: a verified graph, its memory plan, its
 * arena, and the pool it runs on. Made from a compiled graph (the compiler's
 * output) or from a .kiln artifact; runs need neither the compiler nor
 * Python.
 *
 * Calls on one model are serialised by a lock (safe from any thread, one at
 * a time). Inputs and outputs are borrowed for the call only.
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "hal/kiln_hal.h"
#include "ir/kiln_graph.h"
#include "runtime/kiln_plan.h"

typedef struct kiln_model_s kiln_model_t;

/* A caller's tensor: dense row-major bytes. */
typedef struct kiln_tensor_s {
  void* data;
  kiln_dtype_t dtype;
  int32_t rank;
  const int64_t* shape;
} kiln_tensor_t;

/* Takes ownership of graph (released on failure too) and of `blob` (the
 * artifact buffer the graph's constants may borrow from; may be NULL; freed
 * with the system allocator). Verifies the graph, checks the default target
 * (kiln_hal_target_find(NULL): $KILN_TARGET, else the CPU) supports every
 * node (KILN_UNSUPPORTED naming the first op it lacks) and prepares each.
 * pool may be NULL for the default pool. */
kiln_status_t kiln_model_create(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                kiln_model_t** out_model);
/* As kiln_model_create, with the memory plan read from `plan` (an
 * artifact's "plan" section, borrowed for the call) instead of built; a plan
 * that fails its checks against the graph is KILN_CORRUPT_ARTIFACT. */
kiln_status_t kiln_model_create_with_plan(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                          const void* plan, size_t plan_size,
                                          kiln_model_t** out_model);
/* As kiln_model_create_with_plan (plan may be NULL), on target (NULL: the
 * default target). */
kiln_status_t kiln_model_create_on(kiln_graph_t* graph, void* blob, kiln_pool_t* pool,
                                   const void* plan, size_t plan_size,
                                   const kiln_hal_target_t* target, kiln_model_t** out_model);
void kiln_model_release(kiln_model_t* model);
/* "cpu", "reference", ... */
const char* kiln_model_target_name(const kiln_model_t* model);

/* Runs later calls on `pool` (NULL: the default pool); the pool must outlive
 * the model. The plan does not depend on the thread count, so this is how
 * one process runs one compiled model at several thread counts (the model
 * benchmark's 2- and 1-thread passes). Waits for a run in progress. */
void kiln_model_set_pool(kiln_model_t* model, kiln_pool_t* pool);
kiln_pool_t* kiln_model_pool(const kiln_model_t* model);

/* Borrowed views of the model's parts. kiln_model_graph is the graph the
 * model was made from (symbolic sizes and all). A symbolic model plans per
 * binding of its symbols at the call that first needs it (a few are kept);
 * kiln_model_last_graph and kiln_model_plan are the concrete graph and plan
 * of the latest call (the model's graph, and NULL, before the first call of
 * a symbolic model). */
const kiln_graph_t* kiln_model_graph(const kiln_model_t* model);
const kiln_graph_t* kiln_model_last_graph(const kiln_model_t* model);
const kiln_plan_t* kiln_model_plan(const kiln_model_t* model);
int kiln_model_is_symbolic(const kiln_model_t* model);

/* A symbolic model's instances made so far (each a binding of its symbols
 * no cached plan had) and, in *out_ns, the time they took from binding to a
 * ready plan: what a new shape costs. 0 for a concrete model. */
int64_t kiln_model_instances(const kiln_model_t* model, uint64_t* out_ns);
/* Of those instances, how many were an older instance bound again to the
 * new sizes in place (the rest were made anew); of the rebinds, how many
 * kept the instance's memory plan as it was (every arena item fit,
 * kiln_plan_fits), and how many took a copy of another instance's plan
 * that fit, instead of planning again. */
void kiln_model_instance_counts(const kiln_model_t* model, int64_t* out_rebinds,
                                int64_t* out_plans_kept, int64_t* out_plans_shared);

/* The outputs' shapes for these inputs (shapes: n_outputs x KILN_MAX_RANK,
 * ranks: n_outputs), binding the symbols as a run would (errors alike):
 * how a caller sizes the output buffers of a symbolic model. */
kiln_status_t kiln_model_output_shapes(kiln_model_t* model, const kiln_tensor_t* inputs,
                                       int32_t n_inputs, int64_t* shapes, int32_t* ranks);

/* Checks inputs against the graph's inputs (count, dtype, shape; the error
 * names the input, what was expected and what came) and outputs likewise,
 * then runs every node. */
kiln_status_t kiln_model_run(kiln_model_t* model, const kiln_tensor_t* inputs, int32_t n_inputs,
                             const kiln_tensor_t* outputs, int32_t n_outputs);

/* As kiln_model_run, calling hook(hook_ctx, node, 0) before and
 * hook(hook_ctx, node, 1) after each node that runs a kernel (views the plan
 * realised are skipped), on the calling thread, with the model's lock held
 * (the hook must not run this model). hook may be NULL. This is how the
 * Python module puts kiln's nodes on torch.profiler's timeline. */
typedef void (*kiln_model_node_hook_fn)(void* ctx, int32_t node, int end);
/* Inside a hooked run on a target with host memory: value's bytes (of
 * kiln_model_last_graph's value; a node's output is complete at its end
 * hook), borrowed until the hook returns. NULL otherwise. This is how two
 * targets are compared node by node. */
const void* kiln_model_value_data(const kiln_model_t* model, int32_t value);
kiln_status_t kiln_model_run_hooked(kiln_model_t* model, const kiln_tensor_t* inputs,
                                    int32_t n_inputs, const kiln_tensor_t* outputs,
                                    int32_t n_outputs, kiln_model_node_hook_fn hook,
                                    void* hook_ctx);

/* Per-node profiling: when on, each run adds each node's time (ns) into
 * times_ns (length graph->n_nodes, owned by the model). Time a node's
 * kernel spent at the closing barrier of the host's parallel regions,
 * waiting for team threads that ran none of its tasks (see
 * kiln_pool_set_wait_counter), goes to kiln_model_profile_wait instead. */
void kiln_model_set_profiling(kiln_model_t* model, int on);
const uint64_t* kiln_model_profile(const kiln_model_t* model, int64_t* out_runs);
const uint64_t* kiln_model_profile_wait(const kiln_model_t* model);
void kiln_model_profile_reset(kiln_model_t* model);

#endif /* KILN_MODEL_H */
