/* Graph construction: growing arrays of values and nodes, constants'
 * ownership, and the bookkeeping every pass relies on. */
#include "ir/kiln_graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kiln_status_t kiln_graph_create(kiln_allocator_t allocator, kiln_graph_t** out_graph) {
  *out_graph = NULL;
  kiln_graph_t* g = calloc(1, sizeof(*g));
  if (!g) return kiln_status_make(KILN_OUT_OF_MEMORY, "graph");
  g->allocator = allocator;
  *out_graph = g;
  return kiln_ok();
}

void kiln_graph_release(kiln_graph_t* g) {
  if (!g) return;
  if (!g->borrowed) {
    for (int32_t i = 0; i < g->n_values; ++i) {
      kiln_allocator_free(g->allocator, g->values[i].owned_data);
      free(g->values[i].name);
      free(g->values[i].key);
      kiln_shared_release(g->values[i].shared);
    }
    for (int32_t i = 0; i < g->n_nodes; ++i) free(g->nodes[i].origin);
  }
  kiln_sym_table_release(g->syms);
  free(g->values);
  free(g->nodes);
  free(g->inputs);
  free(g->outputs);
  free(g);
}

int64_t kiln_value_numel(const kiln_value_t* v) {
  int64_t n = 1;
  for (int32_t d = 0; d < v->rank; ++d) {
    if (kiln_dim_is_sym(v->shape[d])) return -1;
    n *= v->shape[d];
  }
  return n;
}

int kiln_value_is_symbolic(const kiln_value_t* v) {
  for (int32_t d = 0; d < v->rank; ++d)
    if (kiln_dim_is_sym(v->shape[d])) return 1;
  return 0;
}

int kiln_graph_is_symbolic(const kiln_graph_t* g) {
  for (int32_t v = 0; v < g->n_values; ++v)
    if (kiln_value_is_symbolic(&g->values[v])) return 1;
  for (int32_t n = 0; n < g->n_nodes; ++n)
    for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i)
      if (kiln_dim_is_sym(g->nodes[n].params[i])) return 1;
  return 0;
}

int kiln_node_is_symbolic(const kiln_graph_t* g, const kiln_node_t* n) {
  for (int32_t i = 0; i < KILN_MAX_PARAMS; ++i)
    if (kiln_dim_is_sym(n->params[i])) return 1;
  for (int32_t i = 0; i < n->n_inputs; ++i)
    if (n->inputs[i] >= 0 && n->inputs[i] < g->n_values &&
        kiln_value_is_symbolic(&g->values[n->inputs[i]]))
      return 1;
  return 0;
}

static int64_t kiln_graph_dim_op(const kiln_graph_t* g, kiln_sym_kind_t kind, int64_t a,
                                 int64_t b) {
  if (a == KILN_DIM_INVALID || b == KILN_DIM_INVALID) return KILN_DIM_INVALID;
  if ((kiln_dim_is_sym(a) || kiln_dim_is_sym(b)) && !g->syms) return KILN_DIM_INVALID;
  int64_t out;
  kiln_status_t s = kiln_dim_op(g->syms, kind, a, b, &out);
  if (s) {
    kiln_status_free(s);
    return KILN_DIM_INVALID;
  }
  return out;
}

int64_t kiln_graph_dim_mul(const kiln_graph_t* g, int64_t a, int64_t b) {
  return kiln_graph_dim_op(g, KILN_SYM_MUL, a, b);
}
int64_t kiln_graph_dim_add(const kiln_graph_t* g, int64_t a, int64_t b) {
  return kiln_graph_dim_op(g, KILN_SYM_ADD, a, b);
}

kiln_status_t kiln_graph_syms(kiln_graph_t* g, kiln_sym_table_t** out) {
  if (!g->syms) KILN_RETURN_IF_ERROR(kiln_sym_table_create(&g->syms));
  *out = g->syms;
  return kiln_ok();
}

int kiln_value_same_type(const kiln_value_t* a, const kiln_value_t* b) {
  if (a->rank != b->rank || a->dtype != b->dtype) return 0;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

int kiln_node_is_bf16_product(const kiln_graph_t* g, const kiln_node_t* n) {
  int a, b;
  if (n->op == KILN_OP_MATMUL) {
    int64_t flags = n->params[KILN_P(MATMUL, FLAGS)];
    a = (flags & KILN_MATMUL_ROUND_A_BF16) != 0, b = (flags & KILN_MATMUL_ROUND_B_BF16) != 0;
  } else if (n->op == KILN_OP_LINEAR) {
    a = n->params[KILN_P(LINEAR, ROUND_A)] != 0, b = n->params[KILN_P(LINEAR, ROUND_B)] != 0;
  } else {
    return 0;
  }
  const kiln_value_t *x = &g->values[n->inputs[0]], *w = &g->values[n->inputs[1]];
  return (a || x->dtype == KILN_BF16) && w->kind != KILN_VALUE_CONSTANT &&
         (b || w->dtype == KILN_BF16);
}

/* An SDPA's rows per kv head (query heads of a group x queries), or -1
 * when a size is symbolic (a negative id here). */
static int64_t kiln_node_sdpa_rows(const kiln_graph_t* g, const kiln_node_t* n) {
  const int64_t* p = n->params;
  int64_t heads, kv_heads, q_len;
  if (p[KILN_P(SDPA, FLAGS)] & KILN_SDPA_VIEWS) {
    heads = p[KILN_P(SDPA, HEADS)], kv_heads = p[KILN_P(SDPA, KV_HEADS)];
    q_len = p[KILN_P(SDPA, Q_LEN)];
  } else {
    const kiln_value_t *q = &g->values[n->inputs[0]], *k = &g->values[n->inputs[1]];
    heads = q->shape[1], kv_heads = k->shape[1], q_len = q->shape[2];
  }
  return heads > 0 && kv_heads > 0 && q_len > 0 ? heads / kv_heads * q_len : -1;
}

int kiln_node_is_bf16_attention_prefill(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_SDPA || !(n->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16)) return 0;
  return kiln_node_sdpa_rows(g, n) > 8; /* symbolic: not known to be more than 8 */
}

int kiln_node_is_sdpa_decode(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op != KILN_OP_SDPA) return 0;
  int64_t rows = kiln_node_sdpa_rows(g, n);
  return rows > 0 && rows <= 8;
}

int kiln_node_is_view(const kiln_graph_t* g, const kiln_node_t* n, int64_t* out_bytes) {
  *out_bytes = 0;
  if (n->op == KILN_OP_RESHAPE) return 1;
  if (n->op != KILN_OP_STRIDED_COPY) return 0;
  /* Shape inference has checked that every element read lies inside x. */
  const kiln_value_t* y = &g->values[n->outputs[0]];
  if (kiln_value_numel(y) == 0) return 0;
  int64_t dense = 1;
  for (int32_t d = y->rank - 1; d >= 0; --d) {
    if (y->shape[d] != 1 && n->params[KILN_P(VIEW, STRIDES) + d] != dense) return 0;
    dense *= y->shape[d];
  }
  *out_bytes = n->params[KILN_P(VIEW, OFFSET)] * (int64_t)kiln_dtype_size(y->dtype);
  return 1;
}

size_t kiln_value_dense_bytes(const kiln_value_t* v) {
  return (size_t)kiln_value_numel(v) * kiln_dtype_size(v->dtype);
}

const char* kiln_graph_describe_value(const kiln_graph_t* g, const kiln_value_t* v, char* buf,
                                      size_t size) {
  size_t at = 0;
  at += (size_t)snprintf(buf + at, size - at, "(");
  for (int32_t d = 0; d < v->rank && at < size; ++d) {
    char e[96];
    if (kiln_dim_is_sym(v->shape[d]))
      at += (size_t)snprintf(buf + at, size - at, d ? ", %s" : "%s",
                             g && g->syms ? kiln_sym_describe(g->syms, v->shape[d], e, sizeof e)
                                          : "?");
    else
      at += (size_t)snprintf(buf + at, size - at, d ? ", %lld" : "%lld", (long long)v->shape[d]);
  }
  if (at < size) snprintf(buf + at, size - at, ") %s", kiln_dtype_name(v->dtype));
  return buf;
}

const char* kiln_value_describe(const kiln_value_t* v, char* buf, size_t size) {
  return kiln_graph_describe_value(NULL, v, buf, size);
}

static char* kiln_strdup_or_null(const char* s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char* d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Grows an array of `elem` bytes to hold at least `need` items. */
static kiln_status_t kiln_grow(void** items, int32_t* cap, int32_t need, size_t elem) {
  if (need <= *cap) return kiln_ok();
  if (need > (1 << 28)) return kiln_status_make(KILN_INVALID_ARGUMENT, "graph too large");
  int32_t new_cap = *cap ? *cap * 2 : 16;
  while (new_cap < need) new_cap *= 2;
  void* p = realloc(*items, (size_t)new_cap * elem);
  if (!p) return kiln_status_make(KILN_OUT_OF_MEMORY, "growing the graph");
  memset((char*)p + (size_t)*cap * elem, 0, (size_t)(new_cap - *cap) * elem);
  *items = p;
  *cap = new_cap;
  return kiln_ok();
}

static kiln_status_t kiln_check_shape(const kiln_graph_t* g, kiln_dtype_t dtype, int32_t rank,
                                      const int64_t* shape) {
  KILN_CHECK_ARG((unsigned)dtype < KILN_DTYPE_COUNT, "unknown dtype %d", (int)dtype);
  KILN_CHECK_ARG(rank >= 0 && rank <= KILN_MAX_RANK, "rank %d is outside 0..%d", rank,
                 KILN_MAX_RANK);
  /* Cap every tensor well below what overflows size computations (a
   * symbolic size is checked when an instance gives it a value). */
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; ++d) {
    if (kiln_dim_is_sym(shape[d])) {
      KILN_CHECK_ARG(kiln_sym_dim_valid(g->syms, shape[d]),
                     "dimension %d names symbolic size %d, which the graph does not have", d,
                     kiln_dim_sym_id(shape[d]));
      KILN_CHECK_ARG(kiln_sym_probed(g->syms, shape[d]),
                     "dimension %d is a symbolic size invalid at the probe sizes kiln derives "
                     "shapes at (a division by a size they make non-positive)", d);
      continue;
    }
    KILN_CHECK_ARG(shape[d] >= 0 && shape[d] <= ((int64_t)1 << 40),
                   "dimension %d has size %lld", d, (long long)shape[d]);
    if (shape[d] && numel > ((int64_t)1 << 44) / shape[d])
      return kiln_status_make(KILN_INVALID_ARGUMENT, "tensor of more than 2^44 elements");
    numel *= shape[d];
  }
  return kiln_ok();
}

static kiln_status_t kiln_graph_new_value(kiln_graph_t* g, const char* name, kiln_dtype_t dtype,
                                          int32_t rank, const int64_t* shape,
                                          kiln_value_kind_t kind, int32_t* out_id) {
  KILN_RETURN_IF_ERROR(kiln_check_shape(g, dtype, rank, shape));
  KILN_RETURN_IF_ERROR(
      kiln_grow((void**)&g->values, &g->cap_values, g->n_values + 1, sizeof(kiln_value_t)));
  kiln_value_t* v = &g->values[g->n_values];
  memset(v, 0, sizeof(*v));
  v->dtype = dtype;
  v->rank = rank;
  if (rank) memcpy(v->shape, shape, (size_t)rank * sizeof(int64_t));
  v->kind = kind;
  v->producer = -1;
  v->layout = KILN_LAYOUT_DENSE;
  if (name && !(v->name = kiln_strdup_or_null(name)))
    return kiln_status_make(KILN_OUT_OF_MEMORY, "value name");
  *out_id = g->n_values++;
  return kiln_ok();
}

kiln_status_t kiln_graph_add_input(kiln_graph_t* g, const char* name, kiln_dtype_t dtype,
                                   int32_t rank, const int64_t* shape, int32_t* out_id) {
  *out_id = -1;
  KILN_RETURN_IF_ERROR(
      kiln_grow((void**)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(int32_t)));
  int32_t id;
  KILN_RETURN_IF_ERROR(kiln_graph_new_value(g, name, dtype, rank, shape, KILN_VALUE_INPUT, &id));
  g->inputs[g->n_inputs++] = id;
  *out_id = id;
  return kiln_ok();
}

/* mode 0: copy, 1: borrow, 2: take ownership. */
static kiln_status_t kiln_graph_add_constant_mode(kiln_graph_t* g, const char* name,
                                                  kiln_dtype_t dtype, int32_t rank,
                                                  const int64_t* shape, kiln_layout_t layout,
                                                  const void* data, size_t nbytes, int mode,
                                                  int32_t* out_id) {
  *out_id = -1;
  KILN_CHECK_ARG((unsigned)layout < KILN_LAYOUT_COUNT, "unknown layout %d", (int)layout);
  int32_t id;
  kiln_status_t s = kiln_graph_new_value(g, name, dtype, rank, shape, KILN_VALUE_CONSTANT, &id);
  if (s) {
    if (mode == 2) kiln_allocator_free(g->allocator, (void*)data);
    return s;
  }
  kiln_value_t* v = &g->values[id];
  v->layout = layout;
  v->nbytes = nbytes;
  if (layout == KILN_LAYOUT_TRANSPOSED_2D && rank != 2) {
    if (mode == 2) kiln_allocator_free(g->allocator, (void*)data);
    g->n_values--;
    free(v->name);
    return kiln_status_make(KILN_INVALID_ARGUMENT, "a transposed constant must be 2-d");
  }
  if (kiln_layout_is_dense_sized(layout) && nbytes != kiln_value_dense_bytes(v)) {
    if (mode == 2) kiln_allocator_free(g->allocator, (void*)data);
    g->n_values--;
    free(v->name);
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "constant '%s' has %zu bytes, its shape needs %zu",
                            name ? name : "?", nbytes, kiln_value_dense_bytes(v));
  }
  if (mode == 0) {
    void* copy;
    s = kiln_allocator_malloc(g->allocator, nbytes, &copy);
    if (s) {
      g->n_values--;
      free(v->name);
      return s;
    }
    if (nbytes) memcpy(copy, data, nbytes);
    v->owned_data = copy;
    v->data = copy;
  } else if (mode == 2) {
    v->owned_data = (void*)data;
    v->data = data;
  } else {
    v->data = data;
  }
  *out_id = id;
  return kiln_ok();
}

kiln_status_t kiln_graph_add_constant(kiln_graph_t* g, const char* name, kiln_dtype_t dtype,
                                      int32_t rank, const int64_t* shape, kiln_layout_t layout,
                                      const void* data, size_t nbytes, int32_t* out_id) {
  return kiln_graph_add_constant_mode(g, name, dtype, rank, shape, layout, data, nbytes, 0,
                                      out_id);
}

kiln_status_t kiln_graph_add_constant_borrowed(kiln_graph_t* g, const char* name,
                                               kiln_dtype_t dtype, int32_t rank,
                                               const int64_t* shape, kiln_layout_t layout,
                                               const void* data, size_t nbytes,
                                               int32_t* out_id) {
  return kiln_graph_add_constant_mode(g, name, dtype, rank, shape, layout, data, nbytes, 1,
                                      out_id);
}

kiln_status_t kiln_graph_add_constant_owned(kiln_graph_t* g, const char* name,
                                            kiln_dtype_t dtype, int32_t rank,
                                            const int64_t* shape, kiln_layout_t layout,
                                            void* data, size_t nbytes, int32_t* out_id) {
  return kiln_graph_add_constant_mode(g, name, dtype, rank, shape, layout, data, nbytes, 2,
                                      out_id);
}

static int kiln_lent_contains(const kiln_lent_bytes_t* lent, int32_t n, const void* data) {
  uintptr_t p = (uintptr_t)data;
  for (int32_t i = 0; i < n; ++i) {
    uintptr_t start = (uintptr_t)lent[i].start;
    if (p >= start && p - start < lent[i].nbytes) return 1;
  }
  return 0;
}

kiln_status_t kiln_graph_own_lent(kiln_graph_t* g, const kiln_lent_bytes_t* lent, int32_t n) {
  KILN_CHECK_ARG(n >= 0 && (lent || n == 0), "lent ranges");
  for (int32_t i = 0; i < g->n_values; ++i) {
    kiln_value_t* v = &g->values[i];
    if (v->kind != KILN_VALUE_CONSTANT || v->owned_data || v->shared || v->key || !v->data ||
        !v->nbytes || !kiln_lent_contains(lent, n, v->data))
      continue;
    void* copy;
    KILN_RETURN_IF_ERROR(kiln_allocator_malloc(g->allocator, v->nbytes, &copy));
    memcpy(copy, v->data, v->nbytes);
    v->owned_data = copy;
    v->data = copy;
  }
  return kiln_ok();
}

kiln_status_t kiln_graph_set_constant_key(kiln_graph_t* g, int32_t id, const char* key) {
  KILN_CHECK_ARG(id >= 0 && id < g->n_values && g->values[id].kind == KILN_VALUE_CONSTANT,
                 "value %d is not a constant", id);
  char* k = key ? kiln_strdup_or_null(key) : NULL;
  if (key && !k) return kiln_status_make(KILN_OUT_OF_MEMORY, "constant key");
  free(g->values[id].key);
  g->values[id].key = k;
  return kiln_ok();
}

kiln_status_t kiln_graph_add_constant_shared(kiln_graph_t* g, const char* name, kiln_dtype_t dtype,
                                             int32_t rank, const int64_t* shape,
                                             kiln_layout_t layout, kiln_shared_t* entry,
                                             int32_t* out_id) {
  KILN_RETURN_IF_ERROR(kiln_graph_add_constant_borrowed(g, name, dtype, rank, shape, layout,
                                                        kiln_shared_data(entry),
                                                        kiln_shared_size(entry), out_id));
  g->values[*out_id].shared = kiln_shared_retain(entry);
  return kiln_ok();
}

kiln_status_t kiln_graph_add_node(kiln_graph_t* g, kiln_op_t op, const int32_t* inputs,
                                  int32_t n_inputs, const int64_t* params, int32_t n_params,
                                  const float* fparams, int32_t n_fparams, const char* origin,
                                  int32_t* out_id) {
  /* *out_id is set only at the end: callers may pass a pointer into
   * `inputs` (v = op(v)). */
  KILN_CHECK_ARG((unsigned)op < KILN_OP_COUNT, "unknown op %d", (int)op);
  KILN_CHECK_ARG(n_inputs >= kiln_op_min_inputs(op) && n_inputs <= kiln_op_max_inputs(op),
                 "%s takes %d to %d inputs, got %d", kiln_op_name(op), kiln_op_min_inputs(op),
                 kiln_op_max_inputs(op), n_inputs);
  KILN_CHECK_ARG(n_params >= 0 && n_params <= KILN_MAX_PARAMS && n_fparams >= 0 &&
                     n_fparams <= KILN_MAX_FPARAMS,
                 "%s: too many parameters", kiln_op_name(op));
  kiln_node_t node;
  memset(&node, 0, sizeof(node));
  node.op = op;
  node.n_inputs = n_inputs;
  node.n_outputs = 1;
  for (int32_t i = 0; i < n_inputs; ++i) {
    KILN_CHECK_ARG(inputs[i] >= -1 && inputs[i] < g->n_values,
                   "%s: input %d refers to value %d, which does not exist", kiln_op_name(op), i,
                   inputs[i]);
    node.inputs[i] = inputs[i];
  }
  if (n_params) memcpy(node.params, params, (size_t)n_params * sizeof(int64_t));
  if (n_fparams) memcpy(node.fparams, fparams, (size_t)n_fparams * sizeof(float));

  kiln_value_t out;
  kiln_status_t s = kiln_graph_infer_node(g, &node, &out);
  if (s) return kiln_status_annotate(s, "%s%s%s", kiln_op_name(op), origin ? " from " : "",
                                     origin ? origin : "");

  KILN_RETURN_IF_ERROR(
      kiln_grow((void**)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(kiln_node_t)));
  int32_t id;
  KILN_RETURN_IF_ERROR(kiln_graph_new_value(g, NULL, out.dtype, out.rank, out.shape,
                                            KILN_VALUE_INTERMEDIATE, &id));
  g->values[id].producer = g->n_nodes;
  node.outputs[0] = id;
  if (origin && !(node.origin = kiln_strdup_or_null(origin)))
    return kiln_status_make(KILN_OUT_OF_MEMORY, "node origin");
  g->nodes[g->n_nodes++] = node;
  *out_id = id;
  return kiln_ok();
}

kiln_status_t kiln_graph_set_outputs(kiln_graph_t* g, const int32_t* ids, int32_t n) {
  KILN_CHECK_ARG(n >= 1, "a graph needs at least one output");
  for (int32_t i = 0; i < n; ++i)
    KILN_CHECK_ARG(ids[i] >= 0 && ids[i] < g->n_values, "output %d: no value %d", i, ids[i]);
  int32_t* copy = malloc((size_t)n * sizeof(int32_t));
  if (!copy) return kiln_status_make(KILN_OUT_OF_MEMORY, "graph outputs");
  memcpy(copy, ids, (size_t)n * sizeof(int32_t));
  free(g->outputs);
  g->outputs = copy;
  g->n_outputs = n;
  return kiln_ok();
}
