/* Dead-code elimination and constant folding in one sweep.
 *
 * A node is dead when nothing reachable from the outputs reads it. A live
 * node whose inputs are all constants is run once now, through the CPU
 * target, and its output becomes a constant: weight transposes and
 * reshapes, constant masks, scalar arithmetic. Folding is skipped when the
 * result would be much larger than its inputs (an expand of a scalar to a
 * big mask costs memory and saves nothing).
 *
 * A weight's transpose read only as a matmul's right operand (nn.Linear's
 * W^T) is not copied at all: it becomes the same bytes tagged
 * KILN_LAYOUT_TRANSPOSED_2D, which the GEMM packer reads through strides.
 * Moving 400 MB of BERT weights twice was most of the compile time. A
 * checkpoint's quantized weight (KILN_LAYOUT_QUANT_ROWS) is transposed the
 * same way, into KILN_LAYOUT_QUANT_ROWS_T; nothing else reading one is
 * folded (the target refuses it until the pack pass). So is the int8
 * weight torchao's int8 weight-only linear casts to float32
 * (kiln_fold_is_int_weight_cast). A bf16 weight's widening CAST read only
 * as matmuls' right operand (directly or through such a transpose: a bf16
 * model's linear layer, python/kiln/lowp.py) keeps the bf16 bytes too,
 * as KILN_LAYOUT_WIDENED_BF16 (and _T once transposed): folding it used to
 * make a float32 copy of every weight, twice the model's bytes in memory
 * and most of a bf16 model's compile, for the packer to pack back to bf16
 * (kiln_fold_is_bf16_weight_widening). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler/kiln_compiler.h"
#include "compiler/kiln_rewrite.h"
#include "hal/kiln_hal.h"
#include "ir/kiln_quant_const.h"

static int kiln_fold_worth_it(const kiln_graph_t* g, const kiln_node_t* n) {
  size_t in_bytes = 0;
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0) in_bytes += g->values[n->inputs[i]].nbytes;
  size_t out_bytes = kiln_value_dense_bytes(&g->values[n->outputs[0]]);
  return out_bytes <= (1u << 20) || out_bytes <= 2 * in_bytes;
}

/* Is node n a CAST to float32 of an int8 / uint8 weight transposed by
 * kiln_fold_is_weight_transpose, whose result only feeds matmuls as the
 * right operand? torchao's int8 weight-only linear (0.18, a tensor
 * subclass) exports as mm(x, q.t().to(float32)) * scale: the cast becomes
 * a checkpoint-quantized constant with unit scales (exactly the cast's
 * values), which the target runs on its int8 kernels; the scale stays the
 * multiply after the matmul, as in eager. */
static int kiln_fold_is_int_weight_cast(const kiln_graph_t* g, const kiln_node_t* n,
                                        const int32_t* uses, const int32_t* mm_uses) {
  if (n->op != KILN_OP_CAST) return 0;
  const kiln_value_t *x = &g->values[n->inputs[0]], *y = &g->values[n->outputs[0]];
  return (x->dtype == KILN_I8 || x->dtype == KILN_U8) && x->rank == 2 && y->dtype == KILN_F32 &&
         uses[n->outputs[0]] > 0 && uses[n->outputs[0]] == mm_uses[n->outputs[0]];
}

/* Is node n a plain 2-d transpose of its input x: y (x1, x0) with strides
 * (1, x1), y[i][j] = x[j][i]? */
static int kiln_fold_transposes_2d(const kiln_graph_t* g, const kiln_node_t* n) {
  const int64_t* dims = n->params + KILN_P(VIEW, DIMS);
  const int64_t* strides = n->params + KILN_P(VIEW, STRIDES);
  if (n->op != KILN_OP_STRIDED_COPY || n->params[KILN_P(VIEW, RANK)] != 2 ||
      n->params[KILN_P(VIEW, OFFSET)] != 0)
    return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  return x->rank == 2 && dims[0] == x->shape[1] && dims[1] == x->shape[0] && strides[0] == 1 &&
         strides[1] == x->shape[1];
}

/* The layout of a stored-transposed weight made from one in `layout`, or
 * KILN_LAYOUT_COUNT when there is none. */
static kiln_layout_t kiln_fold_transposed_layout(kiln_layout_t layout) {
  return layout == KILN_LAYOUT_DENSE          ? KILN_LAYOUT_TRANSPOSED_2D
         : layout == KILN_LAYOUT_QUANT_ROWS   ? KILN_LAYOUT_QUANT_ROWS_T
         : layout == KILN_LAYOUT_WIDENED_BF16 ? KILN_LAYOUT_WIDENED_BF16_T
                                              : KILN_LAYOUT_COUNT;
}

/* Is node n a plain 2-d transpose of a constant (dense, a checkpoint's
 * quantized rows, or bf16 held narrow) whose result only feeds matmuls as
 * the right operand (or, for int8 / uint8 integers, only a CAST that
 * kiln_fold_is_int_weight_cast takes)? */
static int kiln_fold_is_weight_transpose(const kiln_graph_t* g, const kiln_node_t* n,
                                         const int32_t* uses, const int32_t* mm_uses) {
  if (!kiln_fold_transposes_2d(g, n)) return 0;
  const kiln_value_t* x = &g->values[n->inputs[0]];
  if (x->kind != KILN_VALUE_CONSTANT || kiln_fold_transposed_layout(x->layout) == KILN_LAYOUT_COUNT)
    return 0;
  int32_t y = n->outputs[0];
  if (uses[y] > 0 && uses[y] == mm_uses[y]) return 1;
  if ((x->dtype != KILN_I8 && x->dtype != KILN_U8) || x->layout != KILN_LAYOUT_DENSE || uses[y] != 1)
    return 0;
  for (const kiln_node_t* u = n + 1; u < g->nodes + g->n_nodes; ++u)
    if (u->n_inputs > 0 && u->inputs[0] == y) return kiln_fold_is_int_weight_cast(g, u, uses, mm_uses);
  return 0;
}

/* Is node n a CAST to float32 of a dense 2-d bf16 constant whose result
 * is read only as matmuls' right operand, directly or through 2-d
 * transposes read only so? */
static int kiln_fold_is_bf16_weight_widening(const kiln_graph_t* g, const kiln_node_t* n,
                                             const int32_t* uses, const int32_t* mm_uses) {
  if (n->op != KILN_OP_CAST) return 0;
  const kiln_value_t *x = &g->values[n->inputs[0]], *yv = &g->values[n->outputs[0]];
  int32_t y = n->outputs[0];
  if (x->kind != KILN_VALUE_CONSTANT || x->dtype != KILN_BF16 || x->layout != KILN_LAYOUT_DENSE ||
      x->rank != 2 || yv->dtype != KILN_F32 || uses[y] == 0)
    return 0;
  int32_t transposes = 0;
  for (const kiln_node_t* u = n + 1; u < g->nodes + g->n_nodes; ++u) {
    if (u->n_inputs < 1 || u->inputs[0] != y || u->op != KILN_OP_STRIDED_COPY) continue;
    int32_t t = u->outputs[0];
    if (!kiln_fold_transposes_2d(g, u) || uses[t] == 0 || uses[t] != mm_uses[t]) return 0;
    ++transposes;
  }
  return mm_uses[y] + transposes == uses[y];
}

/* Value y, made by node n from constant x, becomes a constant holding x's
 * bytes in `layout` (the same bytes read another way): moved when x has no
 * other reader and owns them, borrowed when x borrows them (a frozen
 * parameter, a shared entry: they outlive the graph; y's key is x's with
 * `suffix`), else copied. */
static kiln_status_t kiln_fold_reuse_bytes(kiln_graph_t* g, const kiln_node_t* n,
                                           const int32_t* uses, kiln_layout_t layout,
                                           const char* suffix, void** data) {
  kiln_value_t *x = &g->values[n->inputs[0]], *yv = &g->values[n->outputs[0]];
  void* bytes = x->owned_data;
  int y_owns = 1;
  if (bytes && uses[n->inputs[0]] == 1) {
    x->owned_data = NULL; /* moved: x has no other reader */
  } else if (!bytes) {
    y_owns = 0;
    bytes = (void*)x->data;
    yv->shared = kiln_shared_retain(x->shared);
    if (x->key) {
      size_t len = strlen(x->key) + strlen(suffix) + 1;
      yv->key = malloc(len);
      if (yv->key) snprintf(yv->key, len, "%s%s", x->key, suffix);
    }
  } else {
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, x->nbytes, &bytes));
    memcpy(bytes, x->data, x->nbytes);
  }
  yv->kind = KILN_VALUE_CONSTANT;
  yv->producer = -1;
  yv->layout = layout;
  yv->data = bytes;
  yv->owned_data = y_owns ? bytes : NULL;
  yv->nbytes = x->nbytes;
  data[n->outputs[0]] = bytes;
  return kiln_ok();
}

kiln_status_t kiln_pass_fold(kiln_graph_t* g, const kiln_hal_target_t* target, kiln_pool_t* pool,
                             int fold, kiln_graph_t** out_graph, int32_t* out_folded,
                             int32_t* out_dead) {
  *out_graph = NULL;
  /* Folding computes host bytes: on the target when its memory is the
   * host's, else on the host target. */
  if (!target->host_memory) target = kiln_hal_target_host();
  *out_folded = *out_dead = 0;
  int32_t nv = g->n_values;
  char* live = calloc((size_t)nv + 1, 1);
  void** data = calloc((size_t)nv + 1, sizeof(void*)); /* const/folded bytes per value */
  kiln_rewriter_t rw;
  kiln_status_t s = (!live || !data) ? kiln_status_make(KILN_OUT_OF_MEMORY, "fold pass")
                                     : kiln_rewriter_initialize(&rw, g);
  if (s) {
    free(live);
    free(data);
    return s;
  }
  for (int32_t o = 0; o < g->n_outputs; ++o) live[g->outputs[o]] = 1;
  for (int32_t ni = g->n_nodes - 1; ni >= 0; --ni) {
    const kiln_node_t* n = &g->nodes[ni];
    if (!live[n->outputs[0]]) continue;
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0) live[n->inputs[i]] = 1;
  }
  for (int32_t v = 0; v < nv; ++v)
    if (g->values[v].kind == KILN_VALUE_CONSTANT) data[v] = (void*)g->values[v].data;
  int32_t* uses = malloc(sizeof(int32_t) * (size_t)(nv + 1));
  int32_t* mm_uses = calloc((size_t)nv + 1, sizeof(int32_t));
  if (!uses || !mm_uses) s = kiln_status_make(KILN_OUT_OF_MEMORY, "fold pass");
  if (!s) {
    kiln_graph_count_uses(g, uses);
    for (int32_t ni = 0; ni < g->n_nodes; ++ni)
      if (g->nodes[ni].op == KILN_OP_MATMUL) mm_uses[g->nodes[ni].inputs[1]]++;
  }

  for (int32_t ni = 0; ni < g->n_nodes && !s; ++ni) {
    const kiln_node_t* n = &g->nodes[ni];
    int32_t y = n->outputs[0];
    if (!live[y]) {
      ++*out_dead;
      continue;
    }
    /* A node with symbolic sizes (an expand of a constant to the sequence
     * length) runs per call: its result has no one size to keep. */
    int all_const = fold && !kiln_node_is_symbolic(g, n);
    for (int32_t i = 0; i < n->n_inputs; ++i)
      if (n->inputs[i] >= 0 && !data[n->inputs[i]]) all_const = 0;
    if (all_const && kiln_fold_is_weight_transpose(g, n, uses, mm_uses)) {
      /* A checkpoint's quantized rows stay its integers, bf16 numbers stay
       * bf16, read transposed. */
      s = kiln_fold_reuse_bytes(g, n, uses, kiln_fold_transposed_layout(g->values[n->inputs[0]].layout),
                                "|T", data);
      if (s) break;
      ++*out_folded;
      continue;
    }
    if (all_const && fold == 2 && kiln_fold_is_bf16_weight_widening(g, n, uses, mm_uses)) {
      s = kiln_fold_reuse_bytes(g, n, uses, KILN_LAYOUT_WIDENED_BF16, "|f32", data);
      if (s) break;
      ++*out_folded;
      continue;
    }
    if (all_const && kiln_fold_is_int_weight_cast(g, n, uses, mm_uses) &&
        g->values[n->inputs[0]].layout == KILN_LAYOUT_TRANSPOSED_2D) {
      /* The transposed integers (stored (N, K)) as N rows of K with scale 1. */
      const kiln_value_t* x = &g->values[n->inputs[0]];
      kiln_value_t* yv = &g->values[y];
      const float one = 1.0f;
      void* bytes;
      size_t size;
      s = kiln_quant_const_make(g->allocator, x, x->shape[1], x->shape[0], 0, &one, 1, NULL,
                                x->name ? x->name : "an integer weight", &bytes, &size);
      if (s) break;
      yv->kind = KILN_VALUE_CONSTANT;
      yv->producer = -1;
      yv->layout = KILN_LAYOUT_QUANT_ROWS_T;
      yv->data = bytes;
      yv->owned_data = bytes;
      yv->nbytes = size;
      data[y] = bytes;
      ++*out_folded;
      continue;
    }
    if (all_const && kiln_fold_worth_it(g, n)) {
      kiln_status_t unsupported = kiln_hal_supports(target, g, n);
      all_const = unsupported == NULL;
      kiln_status_free(unsupported);
    }
    if (all_const && kiln_fold_worth_it(g, n)) {
      kiln_value_t* yv = &g->values[y];
      void* bytes;
      s = kiln_allocator_malloc(g->allocator, kiln_value_dense_bytes(yv), &bytes);
      if (s) break;
      data[y] = bytes;
      s = kiln_hal_run_node_once(target, g, n, data, pool);
      if (s) {
        kiln_allocator_free(g->allocator, bytes);
        data[y] = NULL;
        break;
      }
      /* The folded value becomes a constant of the source graph so the
       * rewriter emits it on first use (and later folds can read it). */
      yv->kind = KILN_VALUE_CONSTANT;
      yv->producer = -1;
      yv->data = bytes;
      yv->owned_data = bytes;
      yv->nbytes = kiln_value_dense_bytes(yv);
      ++*out_folded;
      continue;
    }
    s = kiln_rewriter_copy_node(&rw, n);
  }
  if (!s) s = kiln_rewriter_finish(&rw, out_graph);
  kiln_rewriter_deinitialize(&rw);
  free(live);
  free(data);
  free(uses);
  free(mm_uses);
  return s;
}
