/* Targets (hal/kiln_hal.h) behind the runtime: a model on the reference
 * target agrees with the CPU node by node (kiln_model_run_hooked and
 * kiln_model_value_data); an op a target lacks is refused when the model is
 * made, naming the op and the target; and a target with its own memory
 * (a test device: the CPU's kernels on buffers it allocates, copies counted)
 * gets the arena, constants, inputs and outputs in its memory, its kernels
 * see no host pointer, and it is synchronized once per call. */
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "hal/kiln_hal.h"
#include "ir/kiln_graph.h"
#include "kiln_test.h"
#include "runtime/kiln_model.h"

enum { TR = 4, TK = 16, TN = 32 };

/* x (4, 16) -> linear(+bias, gelu) -> layer_norm -> softmax -> + x2 (4, 32)
 * -> mean over the last axis (kept); outputs: the mean and the softmax. */
static kiln_graph_t* kiln_test_target_graph(const char* target) {
  kiln_graph_t* g = NULL;
  KILN_EXPECT_OK(kiln_graph_create(kiln_allocator_system(), &g));
  if (!g) return NULL;
  float w[TK * TN], b[TN], gamma[TN], beta[TN];
  kiln_test_fill_f32(w, TK * TN, 1, -0.5f, 0.5f);
  kiln_test_fill_f32(b, TN, 2, -0.1f, 0.1f);
  kiln_test_fill_f32(gamma, TN, 3, 0.5f, 1.5f);
  kiln_test_fill_f32(beta, TN, 4, -0.2f, 0.2f);
  int64_t sx[2] = {TR, TK}, sx2[2] = {TR, TN}, sw[2] = {TK, TN}, sb[1] = {TN};
  int32_t x, x2, vw, vb, vg, vbeta, lin, act, ln, sm, sum, mean;
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x", KILN_F32, 2, sx, &x));
  KILN_EXPECT_OK(kiln_graph_add_input(g, "x2", KILN_F32, 2, sx2, &x2));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "w", KILN_F32, 2, sw, KILN_LAYOUT_DENSE, w, sizeof w, &vw));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "b", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, b, sizeof b, &vb));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "g", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, gamma, sizeof gamma, &vg));
  KILN_EXPECT_OK(kiln_graph_add_constant(g, "be", KILN_F32, 1, sb, KILN_LAYOUT_DENSE, beta, sizeof beta, &vbeta));
  int32_t mm_in[2] = {x, vw};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MATMUL, mm_in, 2, NULL, 0, NULL, 0, "mm", &lin));
  int32_t add_in[2] = {lin, vb};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, add_in, 2, NULL, 0, NULL, 0, "bias", &lin));
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_GELU, &lin, 1, NULL, 0, NULL, 0, "gelu", &act));
  int32_t ln_in[3] = {act, vg, vbeta};
  int64_t ln_p[1] = {1};
  float eps = 1e-5f;
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_LAYER_NORM, ln_in, 3, ln_p, 1, &eps, 1, "ln", &ln));
  int64_t sm_p[1] = {1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_SOFTMAX, &ln, 1, sm_p, 1, NULL, 0, "softmax", &sm));
  int32_t s_in[2] = {sm, x2};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_ADD, s_in, 2, NULL, 0, NULL, 0, "add", &sum));
  int64_t mean_p[2] = {2, 1};
  KILN_EXPECT_OK(kiln_graph_add_node(g, KILN_OP_MEAN, &sum, 1, mean_p, 2, NULL, 0, "mean", &mean));
  int32_t outs[2] = {mean, sm};
  KILN_EXPECT_OK(kiln_graph_set_outputs(g, outs, 2));
  kiln_compile_options_t o;
  kiln_compile_options_initialize(&o);
  o.verify_each = 1;
  o.target = target;
  kiln_graph_t* c = NULL;
  KILN_EXPECT_OK(kiln_compile(g, &o, &c));
  return c;
}

/* Each node's output, kept by the hook as it is made. */
typedef struct {
  const kiln_model_t* m;
  float* out[64];
  int64_t numel[64];
} kiln_test_trace_t;

static void kiln_test_trace_hook(void* ctx, int32_t node, int end) {
  kiln_test_trace_t* t = ctx;
  if (!end || node >= 64) return;
  const kiln_graph_t* g = kiln_model_last_graph(t->m);
  const kiln_value_t* y = &g->values[g->nodes[node].outputs[0]];
  const void* data = kiln_model_value_data(t->m, g->nodes[node].outputs[0]);
  KILN_EXPECT(data != NULL, "node %d's output is readable in its hook", node);
  if (!data || y->dtype != KILN_F32) return;
  t->numel[node] = kiln_value_numel(y);
  t->out[node] = malloc(sizeof(float) * (size_t)t->numel[node] + 1);
  if (t->out[node]) memcpy(t->out[node], data, sizeof(float) * (size_t)t->numel[node]);
}

static void kiln_test_run_traced(kiln_model_t* m, const float* x, const float* x2,
                                 kiln_test_trace_t* t, float* mean, float* sm) {
  memset(t, 0, sizeof(*t));
  t->m = m;
  int64_t sx[2] = {TR, TK}, sx2[2] = {TR, TN}, sm_s[2] = {TR, TN}, mean_s[2] = {TR, 1};
  kiln_tensor_t in[2] = {{(void*)x, KILN_F32, 2, sx}, {(void*)x2, KILN_F32, 2, sx2}};
  kiln_tensor_t out[2] = {{mean, KILN_F32, 2, mean_s}, {sm, KILN_F32, 2, sm_s}};
  KILN_EXPECT_OK(kiln_model_run_hooked(m, in, 2, out, 2, kiln_test_trace_hook, t));
}

static void kiln_test_reference_node_by_node(void) {
  float x[TR * TK], x2[TR * TN];
  kiln_test_fill_f32(x, TR * TK, 5, -2.0f, 2.0f);
  kiln_test_fill_f32(x2, TR * TN, 6, -1.0f, 1.0f);
  kiln_model_t *cpu = NULL, *ref = NULL;
  kiln_graph_t *gc = kiln_test_target_graph("cpu"), *gr = kiln_test_target_graph("reference");
  if (!gc || !gr) {
    kiln_graph_release(gc);
    kiln_graph_release(gr);
    return;
  }
  KILN_EXPECT(gc->n_nodes == gr->n_nodes, "one graph for both targets (%d, %d nodes)", gc->n_nodes,
              gr->n_nodes);
  KILN_EXPECT_OK(kiln_model_create_on(gc, NULL, NULL, NULL, 0, kiln_hal_target_cpu(), &cpu));
  KILN_EXPECT_OK(kiln_model_create_on(gr, NULL, NULL, NULL, 0, kiln_hal_target_reference(), &ref));
  if (!cpu || !ref) {
    kiln_model_release(cpu);
    kiln_model_release(ref);
    return;
  }
  KILN_EXPECT(strcmp(kiln_model_target_name(ref), "reference") == 0, "the model's target");
  kiln_test_trace_t tc, tr;
  float mean_c[TR], mean_r[TR], sm_c[TR * TN], sm_r[TR * TN];
  kiln_test_run_traced(cpu, x, x2, &tc, mean_c, sm_c);
  kiln_test_run_traced(ref, x, x2, &tr, mean_r, sm_r);
  int compared = 0;
  for (int i = 0; i < 64; ++i) {
    if (!tc.out[i] || !tr.out[i]) continue;
    char what[64];
    snprintf(what, sizeof what, "node %d (%s)", i,
             kiln_op_name(kiln_model_last_graph(cpu)->nodes[i].op));
    KILN_EXPECT(tc.numel[i] == tr.numel[i], "%s: sizes", what);
    kiln_test_compare_f32(what, tc.out[i], tr.out[i], (size_t)tc.numel[i], 1e-5f, 1e-4f);
    ++compared;
  }
  KILN_EXPECT(compared >= 3, "%d nodes compared", compared);
  kiln_test_compare_f32("softmax output", sm_c, sm_r, TR * TN, 1e-6f, 1e-5f);
  kiln_test_compare_f32("mean output", mean_c, mean_r, TR, 1e-6f, 1e-5f);
  for (int i = 0; i < 64; ++i) {
    free(tc.out[i]);
    free(tr.out[i]);
  }
  kiln_model_release(cpu);
  kiln_model_release(ref);
}

/* A target lacking one entry: the CPU's table without softmax. */
static kiln_hal_entry_t kiln_test_partial_entries[KILN_ENTRY_COUNT];

static void kiln_test_unsupported_op(void) {
  const kiln_hal_target_t* cpu = kiln_hal_target_cpu();
  memcpy(kiln_test_partial_entries, cpu->entries, sizeof(kiln_test_partial_entries));
  kiln_test_partial_entries[KILN_ENTRY_softmax].run = NULL;
  kiln_hal_target_t partial = *cpu;
  partial.name = "partial";
  partial.entries = kiln_test_partial_entries;
  kiln_graph_t* g = kiln_test_target_graph("cpu");
  if (!g) return;
  kiln_model_t* m = NULL;
  kiln_status_t s = kiln_model_create_on(g, NULL, NULL, NULL, 0, &partial, &m);
  KILN_EXPECT(kiln_status_code(s) == KILN_UNSUPPORTED &&
                  strstr(kiln_status_message(s), "partial target has no kernel for softmax") &&
                  strstr(kiln_status_message(s), "softmax"),
              "refused at creation, naming the op: %s", kiln_status_message(s));
  kiln_status_free(s);
  kiln_model_release(m);
}

/* The test device: buffers it allocates (a list), copies and syncs counted;
 * every kernel run checks that each buffer it is handed is its own. */
#define DEV_MAX 256
static struct {
  void* ptr[DEV_MAX];
  size_t bytes[DEV_MAX];
  int n, to_device, to_host, on_device, syncs, foreign;
} kiln_dev;
static kiln_hal_entry_t kiln_dev_entries[KILN_ENTRY_COUNT];

static int kiln_dev_owns(const void* p) {
  for (int i = 0; i < kiln_dev.n; ++i)
    if (kiln_dev.ptr[i] && (const char*)p >= (const char*)kiln_dev.ptr[i] &&
        (const char*)p <= (const char*)kiln_dev.ptr[i] + kiln_dev.bytes[i])
      return 1;
  return 0;
}

static kiln_status_t kiln_dev_alloc(size_t bytes, void** out) {
  if (kiln_dev.n == DEV_MAX) return kiln_status_make(KILN_OUT_OF_MEMORY, "test device");
  *out = malloc(bytes ? bytes : 1);
  if (!*out) return kiln_status_make(KILN_OUT_OF_MEMORY, "test device");
  kiln_dev.ptr[kiln_dev.n] = *out;
  kiln_dev.bytes[kiln_dev.n++] = bytes;
  return kiln_ok();
}

static void kiln_dev_free(void* p) {
  for (int i = 0; i < kiln_dev.n; ++i)
    if (kiln_dev.ptr[i] == p) kiln_dev.ptr[i] = NULL;
  free(p);
}

static kiln_status_t kiln_dev_copy(void* dst, const void* src, size_t bytes, kiln_hal_copy_t kind) {
  if (kind == KILN_HAL_COPY_TO_DEVICE) ++kiln_dev.to_device, kiln_dev.foreign += !kiln_dev_owns(dst);
  if (kind == KILN_HAL_COPY_TO_HOST) ++kiln_dev.to_host, kiln_dev.foreign += !kiln_dev_owns(src);
  if (kind == KILN_HAL_COPY_ON_DEVICE) ++kiln_dev.on_device;
  memmove(dst, src, bytes);
  return kiln_ok();
}

static kiln_status_t kiln_dev_synchronize(void) {
  ++kiln_dev.syncs;
  return kiln_ok();
}

static kiln_status_t kiln_dev_run(const kiln_graph_t* g, const kiln_node_t* n, const void* prep,
                                  void* const* bufs, kiln_pool_t* pool) {
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0 && g->values[n->inputs[i]].kind != KILN_VALUE_CONSTANT)
      kiln_dev.foreign += !kiln_dev_owns(bufs[n->inputs[i]]);
  kiln_dev.foreign += !kiln_dev_owns(bufs[n->outputs[0]]);
  return kiln_hal_target_cpu()->entries[kiln_op_entry(n->op)].run(g, n, prep, bufs, pool);
}

static void kiln_test_device_target(void) {
  const kiln_hal_target_t* cpu = kiln_hal_target_cpu();
  memset(&kiln_dev, 0, sizeof(kiln_dev));
  memcpy(kiln_dev_entries, cpu->entries, sizeof(kiln_dev_entries));
  for (int e = 0; e < KILN_ENTRY_COUNT; ++e) kiln_dev_entries[e].run = kiln_dev_run;
  kiln_hal_target_t dev = *cpu;
  dev.name = "test-device";
  dev.entries = kiln_dev_entries;
  dev.host_memory = 0;
  dev.alloc = kiln_dev_alloc;
  dev.free = kiln_dev_free;
  dev.copy = kiln_dev_copy;
  dev.synchronize = kiln_dev_synchronize;
  float x[TR * TK], x2[TR * TN];
  kiln_test_fill_f32(x, TR * TK, 7, -2.0f, 2.0f);
  kiln_test_fill_f32(x2, TR * TN, 8, -1.0f, 1.0f);
  kiln_graph_t *gc = kiln_test_target_graph("cpu"), *gd = kiln_test_target_graph("cpu");
  kiln_model_t *mc = NULL, *md = NULL;
  KILN_EXPECT_OK(kiln_model_create_on(gc, NULL, NULL, NULL, 0, cpu, &mc));
  KILN_EXPECT_OK(kiln_model_create_on(gd, NULL, NULL, NULL, 0, &dev, &md));
  if (!mc || !md) {
    kiln_model_release(mc);
    kiln_model_release(md);
    return;
  }
  const int consts_in = kiln_dev.to_device;
  KILN_EXPECT(consts_in >= 2, "constants copied in once, when the model is made (%d)", consts_in);
  int64_t sx[2] = {TR, TK}, sx2[2] = {TR, TN}, sm_s[2] = {TR, TN}, mean_s[2] = {TR, 1};
  float mean_c[TR], mean_d[TR], sm_c[TR * TN], sm_d[TR * TN];
  kiln_tensor_t in[2] = {{x, KILN_F32, 2, sx}, {x2, KILN_F32, 2, sx2}};
  kiln_tensor_t oc[2] = {{mean_c, KILN_F32, 2, mean_s}, {sm_c, KILN_F32, 2, sm_s}};
  kiln_tensor_t od[2] = {{mean_d, KILN_F32, 2, mean_s}, {sm_d, KILN_F32, 2, sm_s}};
  KILN_EXPECT_OK(kiln_model_run(mc, in, 2, oc, 2));
  for (int call = 0; call < 3; ++call) {
    memset(mean_d, 0, sizeof mean_d);
    memset(sm_d, 0, sizeof sm_d);
    KILN_EXPECT_OK(kiln_model_run(md, in, 2, od, 2));
    KILN_EXPECT(memcmp(mean_c, mean_d, sizeof mean_c) == 0 && memcmp(sm_c, sm_d, sizeof sm_c) == 0,
                "the device's results are the CPU's, bit for bit (call %d)", call);
  }
  KILN_EXPECT(kiln_dev.to_device == consts_in + 3 * 2, "2 inputs copied in per call: %d",
              kiln_dev.to_device - consts_in);
  KILN_EXPECT(kiln_dev.to_host == 3 * 2, "2 outputs copied out per call: %d", kiln_dev.to_host);
  KILN_EXPECT(kiln_dev.syncs == 3, "one synchronize per call: %d", kiln_dev.syncs);
  KILN_EXPECT(kiln_dev.foreign == 0, "%d buffers handed to the device were not its own",
              kiln_dev.foreign);
  KILN_EXPECT(kiln_model_value_data(md, 0) == NULL, "no host view of device memory");
  kiln_model_release(mc);
  kiln_model_release(md);
  int live = 0;
  for (int i = 0; i < kiln_dev.n; ++i) live += kiln_dev.ptr[i] != NULL;
  KILN_EXPECT(live == 0, "%d device buffers not freed", live);
}

void kiln_test_suite_targets(void) {
  kiln_test_reference_node_by_node();
  kiln_test_unsupported_op();
  kiln_test_device_target();
}
