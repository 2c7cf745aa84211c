/* The .kiln writer: lays a graph and the caller's sections out as
 * ir/kiln_format.h describes (header, section table, "graph", caller
 * sections, then the 64-byte-aligned "consts" blob; a graph with symbolic
 * sizes also "syms" after "graph") into one zero-filled
 * buffer, field by field with explicit little-endian stores, plus the file
 * helper that saves a buffer. It refuses graphs the reader could not replay
 * exactly, so that whatever it writes reads back. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_artifact.h"
#include "base/kiln_fused_program.h"
#include "ir/kiln_format.h"

#define BAD_ARG(...) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__)

/* Checks a section name: 1..31 printable ASCII bytes, not reserved. */
static kiln_status_t kiln_artifact_check_name(const char* name, int32_t index) {
  if (!name) BAD_ARG("extra section %d has no name", index);
  size_t n = strlen(name);
  if (n == 0 || n >= KILN_FORMAT_NAME_SIZE)
    BAD_ARG("extra section %d: name '%s' must have 1..%d characters", index, name,
            KILN_FORMAT_NAME_SIZE - 1);
  for (size_t i = 0; i < n; ++i)
    if (name[i] < 0x21 || name[i] > 0x7e)
      BAD_ARG("extra section %d: name has a non-printable character at %zu", index, i);
  if (!strcmp(name, KILN_FORMAT_SECTION_GRAPH) || !strcmp(name, KILN_FORMAT_SECTION_CONSTS) ||
      !strcmp(name, KILN_FORMAT_SECTION_SYMS) || !strcmp(name, KILN_FORMAT_SECTION_GUARDS))
    BAD_ARG("extra section %d: the name '%s' is reserved", index, name);
  return kiln_ok();
}

/* The reader replays values in id order, adding node k when the k-th
 * intermediate comes up; check the graph has that shape (it always does
 * when built with the public API) and that every string fits a u32 table. */
static kiln_status_t kiln_artifact_check_graph(const kiln_graph_t* g, size_t* out_strings,
                                               size_t* out_consts) {
  kiln_status_t s = kiln_graph_verify(g);
  if (s) return kiln_status_annotate(s, "graph does not verify, not writing it");
  size_t strings = 0, consts = 0;
  int32_t next_node = 0, next_input = 0;
  for (int32_t i = 0; i < g->n_values; ++i) {
    const kiln_value_t* v = &g->values[i];
    if (v->name) strings += strlen(v->name) + 1;
    if (v->kind == KILN_VALUE_CONSTANT && v->layout == KILN_LAYOUT_JOINED_COLS)
      BAD_ARG("constant %d is a joined weight (host pointers to its halves): only a graph the "
              "pack pass has run on can be written", i);
    if (v->kind == KILN_VALUE_CONSTANT && v->layout == KILN_LAYOUT_WIDENED_BF16)
      BAD_ARG("constant %d is a bf16 weight held narrow before packing: only a graph the pack "
              "pass has run on can be written", i);
    if (v->kind == KILN_VALUE_INTERMEDIATE) {
      if (v->producer != next_node || g->nodes[next_node].outputs[0] != i)
        BAD_ARG("value %d is made by node %d, but node %d comes next: the format needs the "
                "k-th intermediate to be node k's output", i, v->producer, next_node);
      ++next_node;
    } else if (v->kind == KILN_VALUE_INPUT) {
      if (next_input >= g->n_inputs || g->inputs[next_input] != i)
        BAD_ARG("graph inputs must list the input values in id order (value %d)", i);
      ++next_input;
    } else {
      if (v->nbytes && !v->data) BAD_ARG("constant %d has no data", i);
      if (!kiln_size_add(kiln_align_up(consts, KILN_FORMAT_ALIGN), v->nbytes, &consts))
        BAD_ARG("constants too large");
    }
  }
  if (next_node != g->n_nodes) BAD_ARG("%d nodes make no value", g->n_nodes - next_node);
  if (next_input != g->n_inputs) BAD_ARG("graph inputs list values that are not inputs");
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    if (n->origin) strings += strlen(n->origin) + 1;
    /* bf16 rows go to a file only as what a LINEAR reads in place. */
    for (int32_t k = 0; k < n->n_inputs; ++k)
      if (n->inputs[k] >= 0 && g->values[n->inputs[k]].kind == KILN_VALUE_CONSTANT &&
          g->values[n->inputs[k]].layout == KILN_LAYOUT_WIDENED_BF16_T &&
          !(n->op == KILN_OP_LINEAR && k == 1))
        BAD_ARG("constant %d is a bf16 weight held narrow that node %d (%s) reads before "
                "packing: only a graph the pack pass has run on can be written",
                n->inputs[k], i, kiln_op_name(n->op));
  }
  if (strings >= KILN_FORMAT_NO_STRING) BAD_ARG("names and origins exceed 4 GiB");
  *out_strings = strings;
  *out_consts = consts;
  return kiln_ok();
}


/* The "syms" section's size, checking what the reader will: every symbol
 * named, operands of lower id, nesting within KILN_FORMAT_SYM_MAX_DEPTH. */
static kiln_status_t kiln_artifact_check_syms(const kiln_sym_table_t* t, size_t* out_size) {
  if (!t || t->n_vars < 1 || t->n_exprs < t->n_vars)
    BAD_ARG("the graph has symbolic sizes but no symbols");
  size_t strings = 0;
  for (int32_t i = 0; i < t->n_vars; ++i) {
    if (!t->vars[i].name) BAD_ARG("symbol %d has no name", i);
    strings += strlen(t->vars[i].name) + 1;
  }
  if (strings >= KILN_FORMAT_NO_STRING) BAD_ARG("symbol names exceed 4 GiB");
  uint16_t* depth = malloc(sizeof(uint16_t) * (size_t)t->n_exprs);
  if (!depth) return kiln_status_make(KILN_OUT_OF_MEMORY, "expression depths");
  for (int32_t e = 0; e < t->n_exprs; ++e) {
    const kiln_sym_expr_t* x = &t->exprs[e];
    int32_t d = 1;
    if (x->kind != KILN_SYM_VAR)
      for (int k = 0; k < 2; ++k) {
        int64_t op = k ? x->b : x->a;
        if (!kiln_dim_is_sym(op)) continue;
        if (kiln_dim_sym_id(op) >= e) {
          free(depth);
          BAD_ARG("symbolic expression %d uses expression %d, not an earlier one", e,
                  kiln_dim_sym_id(op));
        }
        if (depth[kiln_dim_sym_id(op)] + 1 > d) d = depth[kiln_dim_sym_id(op)] + 1;
      }
    if (d > KILN_FORMAT_SYM_MAX_DEPTH) {
      free(depth);
      BAD_ARG("symbolic expression %d nests %d deep, more than the format's %d", e, d,
              KILN_FORMAT_SYM_MAX_DEPTH);
    }
    depth[e] = (uint16_t)d;
  }
  free(depth);
  *out_size = KILN_FORMAT_SYMS_HEADER_SIZE + (size_t)t->n_vars * KILN_FORMAT_SYM_VAR_SIZE +
              (size_t)t->n_exprs * KILN_FORMAT_SYM_EXPR_SIZE + strings;
  return kiln_ok();
}

/* Writes the "guards" section at `p` (zero-filled, KILN_FORMAT_GUARDS_HEADER_SIZE +
 * n_guards * KILN_FORMAT_GUARD_SIZE bytes). */
static void kiln_artifact_put_guards(const kiln_sym_table_t* t, uint8_t* p) {
  kiln_format_put_u32(p + KILN_FORMAT_GDH_N_GUARDS, (uint32_t)t->n_guards);
  for (int32_t i = 0; i < t->n_guards; ++i) {
    uint8_t* r = p + KILN_FORMAT_GUARDS_HEADER_SIZE + (size_t)i * KILN_FORMAT_GUARD_SIZE;
    kiln_format_put_u32(r + KILN_FORMAT_G_REL, (uint32_t)t->guards[i].rel);
    kiln_format_put_u64(r + KILN_FORMAT_G_A, (uint64_t)t->guards[i].a);
    kiln_format_put_u64(r + KILN_FORMAT_G_B, (uint64_t)t->guards[i].b);
  }
}

/* Writes the "syms" section at `p` (zero-filled, as sized above). */
static void kiln_artifact_put_syms(const kiln_sym_table_t* t, uint8_t* p) {
  uint8_t* vars = p + KILN_FORMAT_SYMS_HEADER_SIZE;
  uint8_t* exprs = vars + (size_t)t->n_vars * KILN_FORMAT_SYM_VAR_SIZE;
  uint8_t* strings = exprs + (size_t)t->n_exprs * KILN_FORMAT_SYM_EXPR_SIZE;
  size_t at = 0;
  for (int32_t i = 0; i < t->n_vars; ++i) {
    const kiln_sym_var_t* v = &t->vars[i];
    uint8_t* r = vars + (size_t)i * KILN_FORMAT_SYM_VAR_SIZE;
    size_t n = strlen(v->name) + 1;
    kiln_format_put_u32(r + KILN_FORMAT_SV_NAME, (uint32_t)at);
    memcpy(strings + at, v->name, n);
    at += n;
    kiln_format_put_u64(r + KILN_FORMAT_SV_LO, (uint64_t)v->lo);
    kiln_format_put_u64(r + KILN_FORMAT_SV_HI, (uint64_t)v->hi);
  }
  for (int32_t e = 0; e < t->n_exprs; ++e) {
    const kiln_sym_expr_t* x = &t->exprs[e];
    uint8_t* r = exprs + (size_t)e * KILN_FORMAT_SYM_EXPR_SIZE;
    kiln_format_put_u32(r + KILN_FORMAT_SE_KIND, (uint32_t)x->kind);
    kiln_format_put_u64(r + KILN_FORMAT_SE_A, (uint64_t)x->a);
    kiln_format_put_u64(r + KILN_FORMAT_SE_B, (uint64_t)x->b);
  }
  kiln_format_put_u32(p + KILN_FORMAT_SH_N_EXPRS, (uint32_t)t->n_exprs);
  kiln_format_put_u32(p + KILN_FORMAT_SH_N_VARS, (uint32_t)t->n_vars);
  kiln_format_put_u64(p + KILN_FORMAT_SH_STRINGS_SIZE, at);
}

/* Appends a NUL-terminated string to the table; returns its offset. */
static uint32_t kiln_artifact_put_string(uint8_t* table, size_t* at, const char* s) {
  if (!s) return KILN_FORMAT_NO_STRING;
  size_t n = strlen(s) + 1;
  uint32_t off = (uint32_t)*at;
  memcpy(table + *at, s, n);
  *at += n;
  return off;
}

static void kiln_artifact_put_section(uint8_t* entry, const char* name, uint64_t offset,
                                      uint64_t size) {
  memcpy(entry + KILN_FORMAT_ENTRY_NAME, name, strlen(name)); /* rest stays zero */
  kiln_format_put_u64(entry + KILN_FORMAT_ENTRY_OFFSET, offset);
  kiln_format_put_u64(entry + KILN_FORMAT_ENTRY_SIZE_FIELD, size);
}

/* Writes the graph section at `p` (graph_size bytes, zero-filled) and copies
 * the constants into the blob at `consts`. */
static void kiln_artifact_put_graph(const kiln_graph_t* g, uint8_t* p, size_t strings_size,
                                    uint8_t* consts) {
  kiln_format_put_u32(p + KILN_FORMAT_GH_N_VALUES, (uint32_t)g->n_values);
  kiln_format_put_u32(p + KILN_FORMAT_GH_N_NODES, (uint32_t)g->n_nodes);
  kiln_format_put_u32(p + KILN_FORMAT_GH_N_INPUTS, (uint32_t)g->n_inputs);
  kiln_format_put_u32(p + KILN_FORMAT_GH_N_OUTPUTS, (uint32_t)g->n_outputs);
  kiln_format_put_u64(p + KILN_FORMAT_GH_STRINGS_SIZE, strings_size);

  uint8_t* values = p + KILN_FORMAT_GRAPH_HEADER_SIZE;
  uint8_t* nodes = values + (size_t)g->n_values * KILN_FORMAT_VALUE_SIZE;
  uint8_t* inputs = nodes + (size_t)g->n_nodes * KILN_FORMAT_NODE_SIZE;
  uint8_t* outputs = inputs + (size_t)g->n_inputs * 4;
  uint8_t* strings = outputs + (size_t)g->n_outputs * 4;
  size_t str_at = 0, const_at = 0;

  for (int32_t i = 0; i < g->n_values; ++i) {
    const kiln_value_t* v = &g->values[i];
    uint8_t* r = values + (size_t)i * KILN_FORMAT_VALUE_SIZE;
    kiln_format_put_u32(r + KILN_FORMAT_V_KIND, (uint32_t)v->kind);
    kiln_format_put_u32(r + KILN_FORMAT_V_DTYPE, (uint32_t)v->dtype);
    kiln_format_put_u32(r + KILN_FORMAT_V_LAYOUT, (uint32_t)v->layout);
    kiln_format_put_u32(r + KILN_FORMAT_V_RANK, (uint32_t)v->rank);
    for (int32_t d = 0; d < v->rank; ++d)
      kiln_format_put_u64(r + KILN_FORMAT_V_SHAPE + 8 * d, (uint64_t)v->shape[d]);
    kiln_format_put_u32(r + KILN_FORMAT_V_NAME, kiln_artifact_put_string(strings, &str_at, v->name));
    if (v->kind == KILN_VALUE_CONSTANT) {
      const_at = kiln_align_up(const_at, KILN_FORMAT_ALIGN);
      kiln_format_put_u64(r + KILN_FORMAT_V_CONST_OFFSET, const_at);
      kiln_format_put_u64(r + KILN_FORMAT_V_CONST_SIZE, v->nbytes);
      if (v->nbytes) memcpy(consts + const_at, v->data, v->nbytes);
      const_at += v->nbytes;
    }
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    uint8_t* r = nodes + (size_t)i * KILN_FORMAT_NODE_SIZE;
    kiln_format_put_u32(r + KILN_FORMAT_N_OP, (uint32_t)n->op);
    kiln_format_put_u32(r + KILN_FORMAT_N_N_INPUTS, (uint32_t)n->n_inputs);
    kiln_format_put_u32(r + KILN_FORMAT_N_N_OUTPUTS, (uint32_t)n->n_outputs);
    kiln_format_put_u32(r + KILN_FORMAT_N_ORIGIN,
                        kiln_artifact_put_string(strings, &str_at, n->origin));
    /* Slots past n_inputs stay zero whatever the IR holds there. */
    for (int32_t k = 0; k < n->n_inputs; ++k)
      kiln_format_put_u32(r + KILN_FORMAT_N_INPUTS + 4 * k, (uint32_t)n->inputs[k]);
    kiln_format_put_u32(r + KILN_FORMAT_N_OUTPUT, (uint32_t)n->outputs[0]);
    for (int32_t k = 0; k < KILN_FORMAT_PARAMS; ++k)
      kiln_format_put_u64(r + KILN_FORMAT_N_PARAMS + 8 * k, (uint64_t)n->params[k]);
    for (int32_t k = 0; k < KILN_FORMAT_FPARAMS; ++k) {
      uint32_t bits;
      memcpy(&bits, &n->fparams[k], 4);
      kiln_format_put_u32(r + KILN_FORMAT_N_FPARAMS + 4 * k, bits);
    }
  }
  for (int32_t i = 0; i < g->n_inputs; ++i)
    kiln_format_put_u32(inputs + 4 * (size_t)i, (uint32_t)g->inputs[i]);
  for (int32_t i = 0; i < g->n_outputs; ++i)
    kiln_format_put_u32(outputs + 4 * (size_t)i, (uint32_t)g->outputs[i]);
}

/* 1 when node n rounds its b (format 2.12). */
static int kiln_artifact_rounds_b(const kiln_node_t* n) {
  return (n->op == KILN_OP_MATMUL && (n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_B_BF16)) ||
         (n->op == KILN_OP_LINEAR && n->params[KILN_P(LINEAR, ROUND_B)]);
}

/* 1 when node n rounds its y (format 2.17). */
static int kiln_artifact_rounds_y(const kiln_node_t* n) {
  return (n->op == KILN_OP_MATMUL && (n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_Y_BF16)) ||
         (n->op == KILN_OP_LINEAR && n->params[KILN_P(LINEAR, ROUND_Y)]);
}

/* 1 when node n uses what kiln_pass_casts makes (format 2.9): a GEMM
 * rounding its a, a bf16 b or w, the fused ROUND_BF16 instruction. */
static int kiln_artifact_uses_folded_casts(const kiln_graph_t* g, const kiln_node_t* n) {
  if (n->op == KILN_OP_MATMUL)
    return (n->params[KILN_P(MATMUL, FLAGS)] & KILN_MATMUL_ROUND_A_BF16) ||
           g->values[n->inputs[1]].dtype == KILN_BF16;
  if (n->op == KILN_OP_LINEAR)
    return n->params[KILN_P(LINEAR, ROUND_A)] || g->values[n->inputs[1]].dtype == KILN_BF16;
  if (n->op == KILN_OP_ELTWISE_FUSED)
    for (int32_t k = 0; k < n->params[KILN_P(FUSED, N_SLOTS)] && k < KILN_FUSED_MAX_SLOTS; ++k)
      if ((kiln_fused_slot(n->params, k) & 255u) == KILN_FUSED_ROUND_BF16) return 1;
  return 0;
}

/* 1 when node n is a fused program loading an input by halves (format 2.13). */
static int kiln_artifact_loads_halves(const kiln_node_t* n) {
  if (n->op != KILN_OP_ELTWISE_FUSED) return 0;
  for (int32_t k = 0; k < n->params[KILN_P(FUSED, N_SLOTS)] && k < KILN_FUSED_MAX_SLOTS; ++k) {
    uint32_t opc = kiln_fused_slot(n->params, k) & 255u;
    if (opc == KILN_FUSED_IMM) ++k; /* its data slot: any bits */
    else if (opc == KILN_FUSED_LOAD_LOW_HALF || opc == KILN_FUSED_LOAD_HIGH_HALF) return 1;
  }
  return 0;
}

kiln_status_t kiln_artifact_write(const kiln_graph_t* g, const kiln_artifact_section_t* extra,
                                  int32_t n_extra, void** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  KILN_CHECK_ARG(g, "no graph");
  /* Symbolic sizes go in a "syms" section; a graph without them is written
   * exactly as before (no section, minor version 6). */
  int symbolic = kiln_graph_is_symbolic(g);
  size_t syms_size = 0;
  if (symbolic) KILN_RETURN_IF_ERROR(kiln_artifact_check_syms(g->syms, &syms_size));
  /* Guards go in their own section, after "syms" (a 2.9 reader skips it). */
  int guarded = symbolic && g->syms->n_guards > 0;
  size_t guards_size = KILN_FORMAT_GUARDS_HEADER_SIZE +
                       (size_t)(guarded ? g->syms->n_guards : 0) * KILN_FORMAT_GUARD_SIZE;
  int32_t n_own = 2 + symbolic + guarded;
  KILN_CHECK_ARG(n_extra >= 0 && n_extra <= KILN_FORMAT_MAX_SECTIONS - n_own &&
                     (extra || !n_extra),
                 "bad extra sections (%d)", (int)n_extra);
  for (int32_t i = 0; i < n_extra; ++i) {
    KILN_RETURN_IF_ERROR(kiln_artifact_check_name(extra[i].name, i));
    KILN_CHECK_ARG(extra[i].data || !extra[i].size, "extra section '%s' has no data",
                   extra[i].name);
    KILN_CHECK_ARG(!symbolic || strcmp(extra[i].name, KILN_FORMAT_SECTION_PLAN),
                   "a graph with symbolic sizes has no stored '%s' section (plans are made "
                   "per binding of its symbols)", KILN_FORMAT_SECTION_PLAN);
    for (int32_t j = 0; j < i; ++j)
      KILN_CHECK_ARG(strcmp(extra[i].name, extra[j].name), "two extra sections named '%s'",
                     extra[i].name);
  }
  size_t strings_size = 0, consts_size = 0;
  KILN_RETURN_IF_ERROR(kiln_artifact_check_graph(g, &strings_size, &consts_size));

  /* Layout: header | table | graph | extra... | consts, each section
   * 64-aligned. Sizes from the graph are bounded by what already sits in
   * memory, but add with overflow checks anyway (extra sizes are the
   * caller's). */
  int32_t n_sections = n_own + n_extra;
  size_t at = KILN_FORMAT_HEADER_SIZE + (size_t)n_sections * KILN_FORMAT_ENTRY_SIZE;
  size_t graph_size = KILN_FORMAT_GRAPH_HEADER_SIZE +
                      (size_t)g->n_values * KILN_FORMAT_VALUE_SIZE +
                      (size_t)g->n_nodes * KILN_FORMAT_NODE_SIZE +
                      4 * ((size_t)g->n_inputs + (size_t)g->n_outputs);
  int ok = kiln_size_add(graph_size, strings_size, &graph_size);
  size_t graph_off = kiln_align_up(at, KILN_FORMAT_ALIGN);
  ok = ok && kiln_size_add(graph_off, graph_size, &at);
  size_t syms_off = 0;
  if (symbolic) {
    ok = ok && kiln_size_add(at, KILN_FORMAT_ALIGN - 1, &at);
    syms_off = at & ~(size_t)(KILN_FORMAT_ALIGN - 1);
    ok = ok && kiln_size_add(syms_off, syms_size, &at);
  }
  size_t guards_off = 0;
  if (guarded) {
    ok = ok && kiln_size_add(at, KILN_FORMAT_ALIGN - 1, &at);
    guards_off = at & ~(size_t)(KILN_FORMAT_ALIGN - 1);
    ok = ok && kiln_size_add(guards_off, guards_size, &at);
  }
  size_t extra_off[KILN_FORMAT_MAX_SECTIONS];
  for (int32_t i = 0; i < n_extra && ok; ++i) {
    ok = kiln_size_add(at, KILN_FORMAT_ALIGN - 1, &at);
    extra_off[i] = at & ~(size_t)(KILN_FORMAT_ALIGN - 1);
    ok = ok && kiln_size_add(extra_off[i], extra[i].size, &at);
  }
  ok = ok && kiln_size_add(at, KILN_FORMAT_ALIGN - 1, &at);
  size_t consts_off = at & ~(size_t)(KILN_FORMAT_ALIGN - 1);
  size_t total;
  ok = ok && kiln_size_add(consts_off, consts_size, &total);
  if (!ok) BAD_ARG("artifact size overflows");

  void* buf;
  KILN_RETURN_IF_ERROR(kiln_allocator_calloc(kiln_allocator_system(), total, &buf));
  uint8_t* b = buf;
  memcpy(b + KILN_FORMAT_HDR_MAGIC, KILN_FORMAT_MAGIC, 4);
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MAJOR, KILN_FORMAT_MAJOR);
  int grouped = 0, casts = 0, bf16_scales = 0, round_b = 0, halves = 0, sdpa_scale = 0, random = 0;
  int conv_bf16 = 0, round_y = 0, sdpa_bf16 = 0, conv_round_x = 0, solve = 0, bf16_rows = 0;
  int every_key = 0; /* or RELU6, or a conv's end padding: all 2.22 */
  int conv_bf16_io = 0, hardswish = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    hardswish |= kiln_artifact_node_act(&g->nodes[i]) == KILN_ACT_HARDSWISH;
    conv_bf16_io |= kiln_artifact_conv_y_bf16(&g->nodes[i]);
    conv_round_x |= kiln_artifact_conv_rounds_x(&g->nodes[i]);
    round_y |= kiln_artifact_rounds_y(&g->nodes[i]);
    sdpa_bf16 |= g->nodes[i].op == KILN_OP_SDPA &&
                 (g->nodes[i].params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16);
    every_key |= kiln_artifact_node_act(&g->nodes[i]) == KILN_ACT_RELU6 ||
                 kiln_artifact_conv_pads_end(&g->nodes[i]);
    every_key |= g->nodes[i].op == KILN_OP_SDPA &&
                 (g->nodes[i].params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_EVERY_KEY);
    random |= g->nodes[i].op == KILN_OP_RANDOM;
    solve |= g->nodes[i].op == KILN_OP_SOLVE_TRIANGULAR;
    sdpa_scale |= g->nodes[i].op == KILN_OP_SDPA &&
                  (g->nodes[i].params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_SCALE_HEAD_DIM);
    halves |= kiln_artifact_loads_halves(&g->nodes[i]);
    grouped |= g->nodes[i].op == KILN_OP_GROUPED_MM;
    casts |= kiln_artifact_uses_folded_casts(g, &g->nodes[i]);
    round_b |= kiln_artifact_rounds_b(&g->nodes[i]);
  }
  for (int32_t i = 0; i < g->n_values; ++i) {
    const kiln_value_t* v = &g->values[i];
    /* an int4 blob's header flags (byte 6) bit 2: bf16 scales (kiln_gemm.h) */
    conv_bf16 |= v->kind == KILN_VALUE_CONSTANT && v->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16;
    bf16_rows |= v->kind == KILN_VALUE_CONSTANT && v->layout == KILN_LAYOUT_WIDENED_BF16_T;
    bf16_scales |= v->kind == KILN_VALUE_CONSTANT && v->layout == KILN_LAYOUT_GEMM_PACKED_B_Q4 &&
                   v->data && v->nbytes > 6 && (((const uint8_t*)v->data)[6] & 4u);
  }
  kiln_format_put_u16(b + KILN_FORMAT_HDR_MINOR, hardswish ? KILN_FORMAT_MINOR_HARDSWISH
                                                 : conv_bf16_io ? KILN_FORMAT_MINOR_CONV_BF16_IO
                                                 : every_key ? KILN_FORMAT_MINOR_SDPA_EVERY_KEY
                                                 : bf16_rows  ? KILN_FORMAT_MINOR_BF16_ROWS
                                                 : solve      ? KILN_FORMAT_MINOR_SOLVE_TRIANGULAR
                                                 : conv_round_x ? KILN_FORMAT_MINOR_CONV_ROUND_X
                                                 : sdpa_bf16   ? KILN_FORMAT_MINOR_SDPA_BF16
                                                 : round_y     ? KILN_FORMAT_MINOR_ROUND_Y
                                                 : conv_bf16   ? KILN_FORMAT_MINOR_CONV_BF16
                                                 : random      ? KILN_FORMAT_MINOR_RANDOM
                                                 : sdpa_scale  ? KILN_FORMAT_MINOR_SDPA_SCALE
                                                 : halves      ? KILN_FORMAT_MINOR_HALVES
                                                 : round_b     ? KILN_FORMAT_MINOR_ROUND_B
                                                 : bf16_scales ? KILN_FORMAT_MINOR_BF16_SCALES
                                                 : guarded  ? KILN_FORMAT_MINOR_GUARDS
                                                 : casts    ? KILN_FORMAT_MINOR_CASTS
                                                 : grouped  ? KILN_FORMAT_MINOR_GROUPED_MM
                                                 : symbolic ? KILN_FORMAT_MINOR_SYMS
                                                            : KILN_FORMAT_MINOR_CONCRETE);
  kiln_format_put_u32(b + KILN_FORMAT_HDR_FLAGS, 0);
  kiln_format_put_u32(b + KILN_FORMAT_HDR_HEADER_SIZE, KILN_FORMAT_HEADER_SIZE);
  kiln_format_put_u64(b + KILN_FORMAT_HDR_FILE_SIZE, total);
  kiln_format_put_u64(b + KILN_FORMAT_HDR_TABLE_OFFSET, KILN_FORMAT_HEADER_SIZE);
  kiln_format_put_u32(b + KILN_FORMAT_HDR_SECTION_COUNT, (uint32_t)n_sections);
  kiln_format_put_u32(b + KILN_FORMAT_HDR_ENTRY_SIZE, KILN_FORMAT_ENTRY_SIZE);

  /* Table entries in offset order, as the reader requires. */
  uint8_t* table = b + KILN_FORMAT_HEADER_SIZE;
  kiln_artifact_put_section(table, KILN_FORMAT_SECTION_GRAPH, graph_off, graph_size);
  if (symbolic) {
    kiln_artifact_put_section(table + KILN_FORMAT_ENTRY_SIZE, KILN_FORMAT_SECTION_SYMS, syms_off,
                              syms_size);
    kiln_artifact_put_syms(g->syms, b + syms_off);
  }
  if (guarded) {
    kiln_artifact_put_section(table + 2 * KILN_FORMAT_ENTRY_SIZE, KILN_FORMAT_SECTION_GUARDS,
                              guards_off, guards_size);
    kiln_artifact_put_guards(g->syms, b + guards_off);
  }
  for (int32_t i = 0; i < n_extra; ++i) {
    kiln_artifact_put_section(table + (size_t)(n_own - 1 + i) * KILN_FORMAT_ENTRY_SIZE,
                              extra[i].name, extra_off[i], extra[i].size);
    if (extra[i].size) memcpy(b + extra_off[i], extra[i].data, extra[i].size);
  }
  kiln_artifact_put_section(table + (size_t)(n_own - 1 + n_extra) * KILN_FORMAT_ENTRY_SIZE,
                            KILN_FORMAT_SECTION_CONSTS, consts_off, consts_size);
  kiln_artifact_put_graph(g, b + graph_off, strings_size, b + consts_off);
  *out_bytes = buf;
  *out_size = total;
  return kiln_ok();
}

kiln_status_t kiln_artifact_save_file(const char* path, const void* bytes, size_t size) {
  KILN_CHECK_ARG(path && (bytes || !size), "no path or no bytes");
  FILE* f = fopen(path, "wb");
  if (!f) return kiln_status_make(KILN_IO_ERROR, "cannot create '%s': %s", path, strerror(errno));
  size_t wrote = size ? fwrite(bytes, 1, size, f) : 0;
  int write_errno = errno;
  /* fclose flushes: its failure is a failed write too. */
  if (fclose(f) != 0 || wrote != size)
    return kiln_status_make(KILN_IO_ERROR, "writing %zu bytes to '%s' failed: %s", size, path,
                            strerror(wrote != size ? write_errno : errno));
  return kiln_ok();
}
