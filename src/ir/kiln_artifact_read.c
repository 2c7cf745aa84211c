/* The .kiln reader: checks a byte buffer against ir/kiln_format.h and
 * replays it into a graph through the public graph API, plus section lookup
 * and the file loader.
 *
 * Nothing in the buffer is trusted. Every field is read with explicit
 * little-endian loads from a position proven to lie inside the buffer;
 * offsets and sizes are compared with overflow-safe arithmetic; counts are
 * checked against the bytes that would have to hold them before anything is
 * allocated from them; enums, ids, string references and constant ranges
 * are checked before use. Graph-level rules (op arity, dtypes, shapes) are
 * left to the graph API and the verifier, whose errors come back re-coded as
 * KILN_CORRUPT_ARTIFACT with the failing node named. A failure anywhere
 * releases the partial graph, so no path leaks.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/kiln_artifact.h"
#include "ir/kiln_format.h"

#define CORRUPT(...) return kiln_status_make(KILN_CORRUPT_ARTIFACT, __VA_ARGS__)

/* Where the two required sections lie, once header and table are checked. */
typedef struct kiln_artifact_layout_s {
  const uint8_t* base;
  size_t size;
  size_t table_off;
  uint32_t n_sections;
  uint16_t major, minor;
  size_t graph_off, graph_size;
  size_t consts_off, consts_size;
  int have_syms, have_plan; /* "syms": minor >= KILN_FORMAT_MINOR_SYMS only */
  size_t syms_off, syms_size;
  int have_guards; /* minor >= KILN_FORMAT_MINOR_GUARDS only */
  size_t guards_off, guards_size;
} kiln_artifact_layout_t;

/* Re-codes a failure from the graph API (which says INVALID_ARGUMENT: for
 * the API the caller passed a bad node; here the file did) as a corrupt
 * artifact, with a location prefix. Out-of-memory stays what it is. */
static kiln_status_t kiln_artifact_recode(kiln_status_t s, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static kiln_status_t kiln_artifact_recode(kiln_status_t s, const char* fmt, ...) {
  if (!s) return s;
  char where[192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(where, sizeof where, fmt, ap);
  va_end(ap);
  kiln_status_code_t code =
      kiln_status_code(s) == KILN_OUT_OF_MEMORY ? KILN_OUT_OF_MEMORY : KILN_CORRUPT_ARTIFACT;
  kiln_status_t r = kiln_status_make(code, "%s: %s", where, kiln_status_message(s));
  kiln_status_free(s);
  return r;
}

static int kiln_artifact_all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i]) return 0;
  return 1;
}

/* ---- header and section table ---------------------------------------- */

static kiln_status_t kiln_artifact_parse_layout(const void* bytes, size_t size,
                                                kiln_artifact_layout_t* out) {
  memset(out, 0, sizeof(*out));
  if (!bytes && size) CORRUPT("no bytes");
  const uint8_t* b = bytes;
  out->base = b;
  out->size = size;
  if (size < KILN_FORMAT_HEADER_SIZE)
    CORRUPT("header: the buffer has %zu bytes, fewer than the %d-byte header", size,
            KILN_FORMAT_HEADER_SIZE);
  if (memcmp(b + KILN_FORMAT_HDR_MAGIC, KILN_FORMAT_MAGIC, 4))
    CORRUPT("header: bad magic %02x %02x %02x %02x, not a .kiln file", b[0], b[1], b[2], b[3]);
  out->major = kiln_format_get_u16(b + KILN_FORMAT_HDR_MAJOR);
  out->minor = kiln_format_get_u16(b + KILN_FORMAT_HDR_MINOR);
  if (out->major > KILN_FORMAT_MAJOR)
    CORRUPT("header: file format version %u.%u is newer than this reader's %d.%d; "
            "upgrade kiln to read it", out->major, out->minor, KILN_FORMAT_MAJOR,
            KILN_FORMAT_MINOR);
  if (out->major < KILN_FORMAT_MAJOR)
    CORRUPT("header: file format version %u.%u is older than this reader's %d.%d and no "
            "longer supported", out->major, out->minor, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
  uint32_t flags = kiln_format_get_u32(b + KILN_FORMAT_HDR_FLAGS);
  if (flags)
    CORRUPT("header: flags 0x%08x name features this reader (format %d.%d) does not know",
            flags, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
  uint32_t header_size = kiln_format_get_u32(b + KILN_FORMAT_HDR_HEADER_SIZE);
  if (header_size != KILN_FORMAT_HEADER_SIZE)
    CORRUPT("header: header size %u, expected %d", header_size, KILN_FORMAT_HEADER_SIZE);
  uint64_t file_size = kiln_format_get_u64(b + KILN_FORMAT_HDR_FILE_SIZE);
  if (file_size != (uint64_t)size)
    CORRUPT("header: the file should have %" PRIu64 " bytes, the buffer has %zu (truncated?)",
            file_size, size);
  uint64_t table_off = kiln_format_get_u64(b + KILN_FORMAT_HDR_TABLE_OFFSET);
  uint32_t count = kiln_format_get_u32(b + KILN_FORMAT_HDR_SECTION_COUNT);
  uint32_t entry_size = kiln_format_get_u32(b + KILN_FORMAT_HDR_ENTRY_SIZE);
  if (!kiln_artifact_all_zero(b + KILN_FORMAT_HDR_RESERVED,
                              KILN_FORMAT_HEADER_SIZE - KILN_FORMAT_HDR_RESERVED))
    CORRUPT("header: reserved bytes 40..63 are not zero");
  if (entry_size != KILN_FORMAT_ENTRY_SIZE)
    CORRUPT("header: section table entry size %u, expected %d", entry_size,
            KILN_FORMAT_ENTRY_SIZE);
  if (count < 2 || count > KILN_FORMAT_MAX_SECTIONS)
    CORRUPT("header: %u sections, expected 2..%d", count, KILN_FORMAT_MAX_SECTIONS);
  size_t table_bytes = (size_t)count * KILN_FORMAT_ENTRY_SIZE, table_end;
  if (table_off < KILN_FORMAT_HEADER_SIZE || table_off > (uint64_t)size ||
      !kiln_size_add((size_t)table_off, table_bytes, &table_end) || table_end > size)
    CORRUPT("header: section table of %u entries at offset %" PRIu64
            " does not fit between the header and the end of the %zu-byte file",
            count, table_off, size);
  out->table_off = (size_t)table_off;
  out->n_sections = count;

  /* Sections must come in offset order, after the table, without overlap:
   * one pass then proves that no two of them share a byte. */
  size_t prev_end = table_end;
  int have_graph = 0, have_consts = 0;
  for (uint32_t k = 0; k < count; ++k) {
    const uint8_t* e = b + out->table_off + (size_t)k * KILN_FORMAT_ENTRY_SIZE;
    const uint8_t* name = e + KILN_FORMAT_ENTRY_NAME;
    size_t len = 0;
    while (len < KILN_FORMAT_NAME_SIZE && name[len]) ++len;
    if (len == 0 || len == KILN_FORMAT_NAME_SIZE)
      CORRUPT("section table: entry %u's name is empty or not NUL-terminated", k);
    for (size_t i = 0; i < len; ++i)
      if (name[i] < 0x21 || name[i] > 0x7e)
        CORRUPT("section table: entry %u's name has a non-printable byte 0x%02x at %zu", k,
                name[i], i);
    if (!kiln_artifact_all_zero(name + len, KILN_FORMAT_NAME_SIZE - len))
      CORRUPT("section table: entry %u ('%s') has bytes after its name's NUL", k,
              (const char*)name);
    for (uint32_t j = 0; j < k; ++j)
      if (!memcmp(name, b + out->table_off + (size_t)j * KILN_FORMAT_ENTRY_SIZE,
                  KILN_FORMAT_NAME_SIZE))
        CORRUPT("section table: entries %u and %u are both named '%s'", j, k,
                (const char*)name);
    uint64_t off = kiln_format_get_u64(e + KILN_FORMAT_ENTRY_OFFSET);
    uint64_t sz = kiln_format_get_u64(e + KILN_FORMAT_ENTRY_SIZE_FIELD);
    if (off % KILN_FORMAT_ALIGN)
      CORRUPT("section table: section '%s' at offset %" PRIu64 " is not %d-byte aligned",
              (const char*)name, off, KILN_FORMAT_ALIGN);
    if (off > (uint64_t)size || sz > (uint64_t)size - off)
      CORRUPT("section table: section '%s' (offset %" PRIu64 ", %" PRIu64
              " bytes) runs past the end of the %zu-byte file",
              (const char*)name, off, sz, size);
    if (off < (uint64_t)prev_end)
      CORRUPT("section table: section '%s' at offset %" PRIu64
              " overlaps the table or the section before it (which ends at %zu)",
              (const char*)name, off, prev_end);
    prev_end = (size_t)(off + sz);
    if (!strcmp((const char*)name, KILN_FORMAT_SECTION_GRAPH)) {
      have_graph = 1;
      out->graph_off = (size_t)off;
      out->graph_size = (size_t)sz;
    } else if (!strcmp((const char*)name, KILN_FORMAT_SECTION_CONSTS)) {
      have_consts = 1;
      out->consts_off = (size_t)off;
      out->consts_size = (size_t)sz;
    } else if (!strcmp((const char*)name, KILN_FORMAT_SECTION_SYMS) &&
               out->minor >= KILN_FORMAT_MINOR_SYMS) {
      out->have_syms = 1;
      out->syms_off = (size_t)off;
      out->syms_size = (size_t)sz;
    } else if (!strcmp((const char*)name, KILN_FORMAT_SECTION_GUARDS) &&
               out->minor >= KILN_FORMAT_MINOR_GUARDS) {
      out->have_guards = 1;
      out->guards_off = (size_t)off;
      out->guards_size = (size_t)sz;
    } else if (!strcmp((const char*)name, KILN_FORMAT_SECTION_PLAN)) {
      out->have_plan = 1;
    }
  }
  if (!have_graph) CORRUPT("section table: no '%s' section", KILN_FORMAT_SECTION_GRAPH);
  if (!have_consts) CORRUPT("section table: no '%s' section", KILN_FORMAT_SECTION_CONSTS);
  return kiln_ok();
}

kiln_status_t kiln_artifact_find_section(const void* bytes, size_t size, const char* name,
                                         const void** out_data, size_t* out_size) {
  *out_data = NULL;
  *out_size = 0;
  KILN_CHECK_ARG(name, "no section name");
  kiln_artifact_layout_t L;
  KILN_RETURN_IF_ERROR(kiln_artifact_parse_layout(bytes, size, &L));
  for (uint32_t k = 0; k < L.n_sections; ++k) {
    const uint8_t* e = L.base + L.table_off + (size_t)k * KILN_FORMAT_ENTRY_SIZE;
    /* Names were proven NUL-terminated inside their field. */
    if (strcmp((const char*)(e + KILN_FORMAT_ENTRY_NAME), name)) continue;
    *out_data = L.base + (size_t)kiln_format_get_u64(e + KILN_FORMAT_ENTRY_OFFSET);
    *out_size = (size_t)kiln_format_get_u64(e + KILN_FORMAT_ENTRY_SIZE_FIELD);
    return kiln_ok();
  }
  return kiln_ok();
}

/* ---- graph section ---------------------------------------------------- */

/* The graph section, its parts located and sized. */
typedef struct kiln_artifact_graph_s {
  const uint8_t* values;
  const uint8_t* nodes;
  const uint8_t* inputs;
  const uint8_t* outputs;
  const uint8_t* strings;
  size_t strings_size;
  uint32_t n_values, n_nodes, n_inputs, n_outputs;
  const uint8_t* consts;
  size_t consts_size;
  const kiln_sym_table_t* syms; /* rebuilt from "syms" before the values; NULL if none */
  uint16_t minor;               /* the file's minor version */
} kiln_artifact_graph_t;

/* A value record, decoded and range-checked. */
typedef struct kiln_artifact_value_s {
  uint32_t kind, dtype, layout;
  int32_t rank;
  int64_t shape[KILN_FORMAT_RANK];
  const char* name;
  uint64_t const_offset, const_size;
} kiln_artifact_value_t;

static int32_t kiln_artifact_i32(uint32_t u) {
  /* Two's complement without relying on implementation-defined casts. */
  return u <= INT32_MAX ? (int32_t)u : -(int32_t)(~u) - 1;
}
static int64_t kiln_artifact_i64(uint64_t u) {
  return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1;
}

static kiln_status_t kiln_artifact_parse_graph(const kiln_artifact_layout_t* L,
                                               kiln_artifact_graph_t* G) {
  memset(G, 0, sizeof(*G));
  const uint8_t* p = L->base + L->graph_off;
  size_t size = L->graph_size;
  G->consts = L->base + L->consts_off;
  G->consts_size = L->consts_size;
  if (size < KILN_FORMAT_GRAPH_HEADER_SIZE)
    CORRUPT("graph section: %zu bytes, fewer than its %d-byte header", size,
            KILN_FORMAT_GRAPH_HEADER_SIZE);
  G->n_values = kiln_format_get_u32(p + KILN_FORMAT_GH_N_VALUES);
  G->n_nodes = kiln_format_get_u32(p + KILN_FORMAT_GH_N_NODES);
  G->n_inputs = kiln_format_get_u32(p + KILN_FORMAT_GH_N_INPUTS);
  G->n_outputs = kiln_format_get_u32(p + KILN_FORMAT_GH_N_OUTPUTS);
  uint64_t strings_size = kiln_format_get_u64(p + KILN_FORMAT_GH_STRINGS_SIZE);
  if (!kiln_artifact_all_zero(p + KILN_FORMAT_GH_RESERVED, 8))
    CORRUPT("graph section: reserved header bytes are not zero");
  /* Bound every count by the section's size before anything is sized from
   * it: the records must all be present, so a hostile count fails here. */
  size_t need = KILN_FORMAT_GRAPH_HEADER_SIZE, part;
  int ok = kiln_size_mul(G->n_values, KILN_FORMAT_VALUE_SIZE, &part) &&
           kiln_size_add(need, part, &need) &&
           kiln_size_mul(G->n_nodes, KILN_FORMAT_NODE_SIZE, &part) &&
           kiln_size_add(need, part, &need) && kiln_size_mul(G->n_inputs, 4, &part) &&
           kiln_size_add(need, part, &need) && kiln_size_mul(G->n_outputs, 4, &part) &&
           kiln_size_add(need, part, &need);
  if (!ok || need > size || strings_size != (uint64_t)(size - need))
    CORRUPT("graph section: %u values, %u nodes, %u inputs, %u outputs and %" PRIu64
            " bytes of strings do not add up to the section's %zu bytes",
            G->n_values, G->n_nodes, G->n_inputs, G->n_outputs, strings_size, size);
  /* The graph's own growth limit, and every node makes one value. */
  if (G->n_values > (1u << 28)) CORRUPT("graph section: %u values is too many", G->n_values);
  if (G->n_nodes > G->n_values)
    CORRUPT("graph section: %u nodes but only %u values for their outputs", G->n_nodes,
            G->n_values);
  if (G->n_outputs < 1) CORRUPT("graph section: the graph has no outputs");
  G->values = p + KILN_FORMAT_GRAPH_HEADER_SIZE;
  G->nodes = G->values + (size_t)G->n_values * KILN_FORMAT_VALUE_SIZE;
  G->inputs = G->nodes + (size_t)G->n_nodes * KILN_FORMAT_NODE_SIZE;
  G->outputs = G->inputs + (size_t)G->n_inputs * 4;
  G->strings = G->outputs + (size_t)G->n_outputs * 4;
  G->strings_size = (size_t)strings_size;
  return kiln_ok();
}

/* Resolves a string reference: NULL for none, else a pointer into the table
 * proven to reach a NUL inside it. */
static kiln_status_t kiln_artifact_get_string(const kiln_artifact_graph_t* G, uint32_t ref,
                                              const char* what, uint32_t index,
                                              const char** out) {
  *out = NULL;
  if (ref == KILN_FORMAT_NO_STRING) return kiln_ok();
  if (ref >= G->strings_size)
    CORRUPT("graph section: %s %u's string at %u is outside the %zu-byte string table", what,
            index, ref, G->strings_size);
  if (!memchr(G->strings + ref, 0, G->strings_size - ref))
    CORRUPT("graph section: %s %u's string at %u is not NUL-terminated", what, index, ref);
  *out = (const char*)G->strings + ref;
  return kiln_ok();
}

static kiln_status_t kiln_artifact_decode_value(const kiln_artifact_graph_t* G, uint32_t i,
                                                kiln_artifact_value_t* v) {
  const uint8_t* r = G->values + (size_t)i * KILN_FORMAT_VALUE_SIZE;
  v->kind = kiln_format_get_u32(r + KILN_FORMAT_V_KIND);
  v->dtype = kiln_format_get_u32(r + KILN_FORMAT_V_DTYPE);
  v->layout = kiln_format_get_u32(r + KILN_FORMAT_V_LAYOUT);
  v->rank = kiln_artifact_i32(kiln_format_get_u32(r + KILN_FORMAT_V_RANK));
  v->const_offset = kiln_format_get_u64(r + KILN_FORMAT_V_CONST_OFFSET);
  v->const_size = kiln_format_get_u64(r + KILN_FORMAT_V_CONST_SIZE);
  if (v->kind >= KILN_VALUE_KIND_COUNT) CORRUPT("graph section: value %u: kind %u", i, v->kind);
  if (v->dtype >= KILN_DTYPE_COUNT)
    CORRUPT("graph section: value %u: dtype %u is unknown to this reader (format %d.%d)", i,
            v->dtype, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
  if (v->layout >= KILN_LAYOUT_COUNT)
    CORRUPT("graph section: value %u: layout %u is unknown to this reader (format %d.%d)", i,
            v->layout, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
  if (v->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16 && G->minor < KILN_FORMAT_MINOR_CONV_BF16)
    CORRUPT("graph section: value %u: layout %u (a bf16-compute conv weight, format %d.%d) in a "
            "file of format %d.%d", i, v->layout, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR_CONV_BF16,
            KILN_FORMAT_MAJOR, (int)G->minor);
  if (v->layout == KILN_LAYOUT_JOINED_COLS) /* host pointers: never in a file */
    CORRUPT("graph section: value %u: layout %u (a joined weight) cannot be in a file", i,
            v->layout);
  if (v->layout == KILN_LAYOUT_WIDENED_BF16)
    CORRUPT("graph section: value %u: layout %u (a bf16 weight before packing) cannot be in a "
            "file", i, v->layout);
  if (v->layout == KILN_LAYOUT_WIDENED_BF16_T && G->minor < KILN_FORMAT_MINOR_BF16_ROWS)
    CORRUPT("graph section: value %u: layout %u (a bf16 weight read in place, format %d.%d) in "
            "a file of format %d.%d", i, v->layout, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR_BF16_ROWS,
            KILN_FORMAT_MAJOR, (int)G->minor);
  if (v->kind != KILN_VALUE_CONSTANT &&
      (v->layout != KILN_LAYOUT_DENSE || v->const_offset || v->const_size))
    CORRUPT("graph section: value %u is not a constant but has a layout or constant data", i);
  if (v->rank < 0 || v->rank > KILN_FORMAT_RANK)
    CORRUPT("graph section: value %u: rank %d is outside 0..%d", i, v->rank, KILN_FORMAT_RANK);
  int64_t numel = 1;
  for (int32_t d = 0; d < KILN_FORMAT_RANK; ++d) {
    int64_t dim = kiln_artifact_i64(kiln_format_get_u64(r + KILN_FORMAT_V_SHAPE + 8 * d));
    v->shape[d] = dim;
    if (d >= v->rank) {
      if (dim) CORRUPT("graph section: value %u: shape entry %d past rank %d is not zero", i, d,
                       v->rank);
      continue;
    }
    if (kiln_dim_is_sym(dim)) {
      /* An expression of the rebuilt table; its size is checked when an
       * instance gives it a value. Constants have real sizes. */
      if (!G->syms)
        CORRUPT("graph section: value %u: dimension %d is symbolic size %d, but the file has "
                "no syms section", i, d, kiln_dim_sym_id(dim));
      if (!kiln_sym_dim_valid(G->syms, dim))
        CORRUPT("graph section: value %u: dimension %d names symbolic size %d, which the "
                "syms section (%d expressions) does not have", i, d, kiln_dim_sym_id(dim),
                G->syms->n_exprs);
      if (!kiln_sym_probed(G->syms, dim))
        CORRUPT("graph section: value %u: dimension %d is symbolic size %d, which is invalid at "
                "the probe sizes the guards give (a division by a size they make non-positive)",
                i, d, kiln_dim_sym_id(dim));
      if (v->kind == KILN_VALUE_CONSTANT)
        CORRUPT("graph section: value %u is a constant with a symbolic dimension %d", i, d);
      continue;
    }
    if (dim < 0 || dim > KILN_FORMAT_MAX_DIM)
      CORRUPT("graph section: value %u: dimension %d has size %" PRId64, i, d, dim);
    if (dim && numel > KILN_FORMAT_MAX_NUMEL / dim)
      CORRUPT("graph section: value %u has more than 2^44 elements", i);
    numel *= dim;
  }
  if (!kiln_artifact_all_zero(r + KILN_FORMAT_V_RESERVED, 4))
    CORRUPT("graph section: value %u: reserved bytes are not zero", i);
  return kiln_artifact_get_string(G, kiln_format_get_u32(r + KILN_FORMAT_V_NAME), "value", i,
                                  &v->name);
}

/* Checks a constant's data range and returns where its bytes are. */
static kiln_status_t kiln_artifact_locate_constant(const kiln_artifact_graph_t* G, uint32_t i,
                                                   const kiln_artifact_value_t* v,
                                                   uint64_t* inout_end, const void** out_data) {
  *out_data = NULL;
  uint64_t off = v->const_offset, sz = v->const_size;
  if (off % KILN_FORMAT_ALIGN)
    CORRUPT("graph section: constant %u's data offset %" PRIu64 " is not %d-byte aligned", i,
            off, KILN_FORMAT_ALIGN);
  if (off > (uint64_t)G->consts_size || sz > (uint64_t)G->consts_size - off)
    CORRUPT("graph section: constant %u's data (offset %" PRIu64 ", %" PRIu64
            " bytes) runs past the %zu-byte consts section", i, off, sz, G->consts_size);
  if (off < *inout_end)
    CORRUPT("graph section: constant %u's data at %" PRIu64
            " overlaps the constant before it (which ends at %" PRIu64 ")", i, off, *inout_end);
  if (kiln_layout_is_dense_sized((kiln_layout_t)v->layout)) {
    /* The shape was bounded to 2^44 elements, so this cannot overflow. */
    uint64_t numel = 1;
    for (int32_t d = 0; d < v->rank; ++d) numel *= (uint64_t)v->shape[d];
    uint64_t dense = numel * kiln_dtype_size((kiln_dtype_t)v->dtype);
    if (sz != dense)
      CORRUPT("graph section: constant %u holds %" PRIu64 " bytes, its dense shape needs %"
              PRIu64, i, sz, dense);
  }
  if (v->layout == KILN_LAYOUT_WIDENED_BF16_T) { /* (N, K) bf16 rows of a float32 (K, N) */
    uint64_t numel = 1;
    for (int32_t d = 0; d < v->rank; ++d) numel *= (uint64_t)v->shape[d];
    if (v->rank != 2 || v->dtype != KILN_F32 || sz != numel * 2)
      CORRUPT("graph section: constant %u (bf16 rows read in place) holds %" PRIu64
              " bytes, a float32 matrix of its shape held as bf16 needs %" PRIu64, i, sz,
              numel * 2);
  }
  *inout_end = off + sz;
  *out_data = G->consts + (size_t)off;
  return kiln_ok();
}

/* Decodes node k into `node` (origin left NULL: returned separately,
 * borrowed from the string table) and checks what the graph API does not:
 * record fields, unused slots, ids relative to the output being made. */
static kiln_status_t kiln_artifact_decode_node(const kiln_artifact_graph_t* G, uint32_t k,
                                               uint32_t out_id, kiln_node_t* node,
                                               const char** out_origin) {
  const uint8_t* r = G->nodes + (size_t)k * KILN_FORMAT_NODE_SIZE;
  memset(node, 0, sizeof(*node));
  uint32_t op = kiln_format_get_u32(r + KILN_FORMAT_N_OP);
  uint32_t n_in = kiln_format_get_u32(r + KILN_FORMAT_N_N_INPUTS);
  uint32_t n_out = kiln_format_get_u32(r + KILN_FORMAT_N_N_OUTPUTS);
  if (op >= KILN_OP_COUNT)
    CORRUPT("graph section: node %u: op %u is unknown to this reader (format %d.%d)", k, op,
            KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
  const char* name = kiln_op_name((kiln_op_t)op);
  if (n_in < (uint32_t)kiln_op_min_inputs((kiln_op_t)op) ||
      n_in > (uint32_t)kiln_op_max_inputs((kiln_op_t)op))
    CORRUPT("graph section: node %u (%s) has %u inputs, the op takes %d..%d", k, name, n_in,
            kiln_op_min_inputs((kiln_op_t)op), kiln_op_max_inputs((kiln_op_t)op));
  if (n_out != 1) CORRUPT("graph section: node %u (%s) has %u outputs, expected 1", k, name, n_out);
  node->op = (kiln_op_t)op;
  node->n_inputs = (int32_t)n_in;
  node->n_outputs = 1;
  for (uint32_t j = 0; j < KILN_FORMAT_NODE_INPUTS; ++j) {
    int32_t id = kiln_artifact_i32(kiln_format_get_u32(r + KILN_FORMAT_N_INPUTS + 4 * j));
    if (j >= n_in) {
      if (id) CORRUPT("graph section: node %u (%s): unused input slot %u is not zero", k, name, j);
      continue;
    }
    if (id < -1 || id >= (int64_t)G->n_values)
      CORRUPT("graph section: node %u (%s) input %u refers to value %d of %u", k, name, j, id,
              G->n_values);
    if (id >= (int64_t)out_id)
      CORRUPT("graph section: node %u (%s) input %u refers to value %d, which is not made "
              "before the node's output %u", k, name, j, id, out_id);
    node->inputs[j] = id;
  }
  int32_t out = kiln_artifact_i32(kiln_format_get_u32(r + KILN_FORMAT_N_OUTPUT));
  if (out < 0 || (uint32_t)out != out_id)
    CORRUPT("graph section: node %u (%s) says it makes value %d, but value %u is the "
            "intermediate that comes next", k, name, out, out_id);
  node->outputs[0] = out;
  if (!kiln_artifact_all_zero(r + KILN_FORMAT_N_RESERVED, 4))
    CORRUPT("graph section: node %u (%s): reserved bytes are not zero", k, name);
  for (int32_t j = 0; j < KILN_FORMAT_PARAMS; ++j) {
    node->params[j] = kiln_artifact_i64(kiln_format_get_u64(r + KILN_FORMAT_N_PARAMS + 8 * j));
    if (kiln_dim_is_sym(node->params[j]) && !kiln_sym_dim_valid(G->syms, node->params[j]))
      CORRUPT("graph section: node %u (%s): param %d names symbolic size %d, which the file "
              "does not define (%d expressions)", k, name, j, kiln_dim_sym_id(node->params[j]),
              G->syms ? G->syms->n_exprs : 0);
  }
  for (int32_t j = 0; j < KILN_FORMAT_FPARAMS; ++j) {
    uint32_t bits = kiln_format_get_u32(r + KILN_FORMAT_N_FPARAMS + 4 * j);
    memcpy(&node->fparams[j], &bits, 4);
  }
  if (kiln_artifact_conv_rounds_x(node) && G->minor < KILN_FORMAT_MINOR_CONV_ROUND_X)
    CORRUPT("graph section: node %u (%s): a conv that reads x as bf16 or scales its sums (format %d.%d) "
            "in a file of format %d.%d", k, name, KILN_FORMAT_MAJOR,
            KILN_FORMAT_MINOR_CONV_ROUND_X, KILN_FORMAT_MAJOR, (int)G->minor);
  if (node->op == KILN_OP_SDPA && (node->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_BF16) &&
      G->minor < KILN_FORMAT_MINOR_SDPA_BF16)
    CORRUPT("graph section: node %u (%s): bf16 attention (flag %d, format %d.%d) in a file of "
            "format %d.%d", k, name, KILN_SDPA_BF16, KILN_FORMAT_MAJOR,
            KILN_FORMAT_MINOR_SDPA_BF16, KILN_FORMAT_MAJOR, (int)G->minor);
  if (kiln_artifact_conv_pads_end(node) && G->minor < KILN_FORMAT_MINOR_CONV_PAD_END)
    CORRUPT("graph section: node %u (%s): a conv's end padding (format %d.%d) in a file of format "
            "%d.%d", k, name, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR_CONV_PAD_END, KILN_FORMAT_MAJOR,
            (int)G->minor);
  if (kiln_artifact_conv_y_bf16(node) && G->minor < KILN_FORMAT_MINOR_CONV_BF16_IO)
    CORRUPT("graph section: node %u (%s): a conv storing y in bf16 (format %d.%d) in a file of "
            "format %d.%d", k, name, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR_CONV_BF16_IO,
            KILN_FORMAT_MAJOR, (int)G->minor);
  if (kiln_artifact_node_act(node) == KILN_ACT_HARDSWISH && G->minor < KILN_FORMAT_MINOR_HARDSWISH)
    CORRUPT("graph section: node %u (%s): the hardswish activation (format %d.%d) in a file of "
            "format %d.%d", k, name, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR_HARDSWISH,
            KILN_FORMAT_MAJOR, (int)G->minor);
  if (kiln_artifact_node_act(node) == KILN_ACT_RELU6 && G->minor < KILN_FORMAT_MINOR_RELU6)
    CORRUPT("graph section: node %u (%s): the relu6 activation (format %d.%d) in a file of format "
            "%d.%d", k, name, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR_RELU6, KILN_FORMAT_MAJOR,
            (int)G->minor);
  if (node->op == KILN_OP_SDPA && (node->params[KILN_P(SDPA, FLAGS)] & KILN_SDPA_EVERY_KEY) &&
      G->minor < KILN_FORMAT_MINOR_SDPA_EVERY_KEY)
    CORRUPT("graph section: node %u (%s): attention reading every key (flag %d, format %d.%d) in a "
            "file of format %d.%d", k, name, KILN_SDPA_EVERY_KEY, KILN_FORMAT_MAJOR,
            KILN_FORMAT_MINOR_SDPA_EVERY_KEY, KILN_FORMAT_MAJOR, (int)G->minor);
  return kiln_artifact_get_string(G, kiln_format_get_u32(r + KILN_FORMAT_N_ORIGIN), "node", k,
                                  out_origin);
}

/* Ops whose params spell the output's shape: check the params against the
 * stored output (already bounded) before shape inference multiplies them,
 * so hostile dims or strides never reach overflowing arithmetic. Valid
 * graphs always pass: these params are the output shape by definition, and
 * a view term beyond 2^56 could never stay inside a 2^44-element input. */
static kiln_status_t kiln_artifact_check_shape_params(const kiln_artifact_graph_t* G, uint32_t k,
                                                      const kiln_node_t* n,
                                                      const kiln_artifact_value_t* out) {
  if (n->op != KILN_OP_RESHAPE && n->op != KILN_OP_STRIDED_COPY) return kiln_ok();
  /* RESHAPE's layout is VIEW's head: RANK then DIMS. */
  _Static_assert(KILN_P(RESHAPE, RANK) == KILN_P(VIEW, RANK) &&
                     KILN_P(RESHAPE, DIMS) == KILN_P(VIEW, DIMS),
                 "reshape and view layouts share rank and dims");
  const int64_t* p = n->params;
  const int64_t* dims = p + KILN_P(VIEW, DIMS);
  const char* name = kiln_op_name(n->op);
  if (p[KILN_P(VIEW, RANK)] != out->rank)
    CORRUPT("graph section: node %u (%s): params give rank %" PRId64 ", its output has %d", k,
            name, p[KILN_P(VIEW, RANK)], out->rank);
  for (int32_t d = 0; d < out->rank; ++d)
    if (dims[d] != out->shape[d])
      CORRUPT("graph section: node %u (%s): params give dimension %d as %" PRId64
              ", its output has %" PRId64, k, name, d, dims[d], out->shape[d]);
  /* Symbolic sizes are checked at both probe bindings, where shape
   * inference evaluates them (an instance's real sizes are checked by the
   * concrete rules again). Params were checked to name expressions. */
  for (int probe = 0; n->op == KILN_OP_STRIDED_COPY && probe < 1 + (G->syms != NULL); ++probe) {
    const int64_t lim = (int64_t)1 << 56;
    const int64_t offset = p[KILN_P(VIEW, OFFSET)];
    int64_t off = G->syms ? kiln_sym_probe(G->syms, offset, probe) : offset;
    if (off < -lim || off > lim)
      CORRUPT("graph section: node %u (%s): element offset %" PRId64 " is out of range", k,
              name, off);
    for (int32_t d = 0; d < out->rank; ++d) {
      int64_t dim = G->syms ? kiln_sym_probe(G->syms, out->shape[d], probe) : out->shape[d];
      const int64_t st = p[KILN_P(VIEW, STRIDES) + d];
      int64_t stride = G->syms ? kiln_sym_probe(G->syms, st, probe) : st;
      if (dim > 1 && (stride > lim / (dim - 1) || stride < -(lim / (dim - 1))))
        CORRUPT("graph section: node %u (%s): stride %" PRId64 " of dimension %d is out of "
                "range", k, name, stride, d);
    }
  }
  return kiln_ok();
}

/* ---- syms section ------------------------------------------------------ */

static const char* const kiln_artifact_sym_kinds[] = {"symbol", "add", "mul", "floordiv",
                                                       "mod", "max", "min"};
_Static_assert(sizeof(kiln_artifact_sym_kinds) / sizeof(kiln_artifact_sym_kinds[0]) ==
                   KILN_SYM_KIND_COUNT, "one name per kind");

/* "kind(a, b)" with operands as "e<id>" or numbers, for messages. */
static const char* kiln_artifact_expr_text(int32_t kind, int64_t a, int64_t b, char* buf,
                                           size_t size) {
  if (kind == KILN_SYM_VAR) {
    snprintf(buf, size, "symbol %" PRId64, a);
    return buf;
  }
  char sa[32], sb[32];
  if (kiln_dim_is_sym(a)) snprintf(sa, sizeof sa, "e%d", kiln_dim_sym_id(a));
  else snprintf(sa, sizeof sa, "%" PRId64, a);
  if (kiln_dim_is_sym(b)) snprintf(sb, sizeof sb, "e%d", kiln_dim_sym_id(b));
  else snprintf(sb, sizeof sb, "%" PRId64, b);
  snprintf(buf, size, "%s(%s, %s)", kiln_artifact_sym_kinds[kind], sa, sb);
  return buf;
}

/* Rebuilds the graph's expression table from the "syms" section: every
 * count bounded by the section's size first, then each entry re-created
 * through the table's own constructors, which must give back exactly the
 * stored id as a new entry (so the table is canonical and hash-consed as
 * one built in memory, and every later lookup of an id is in range). */
static kiln_status_t kiln_artifact_read_syms(const kiln_artifact_layout_t* L, kiln_graph_t* g) {
  const uint8_t* p = L->base + L->syms_off;
  size_t size = L->syms_size;
  if (size < KILN_FORMAT_SYMS_HEADER_SIZE)
    CORRUPT("syms section: %zu bytes, fewer than its %d-byte header", size,
            KILN_FORMAT_SYMS_HEADER_SIZE);
  uint32_t n_exprs = kiln_format_get_u32(p + KILN_FORMAT_SH_N_EXPRS);
  uint32_t n_vars = kiln_format_get_u32(p + KILN_FORMAT_SH_N_VARS);
  uint64_t strings_size = kiln_format_get_u64(p + KILN_FORMAT_SH_STRINGS_SIZE);
  size_t need = KILN_FORMAT_SYMS_HEADER_SIZE, part;
  int ok = kiln_size_mul(n_vars, KILN_FORMAT_SYM_VAR_SIZE, &part) &&
           kiln_size_add(need, part, &need) &&
           kiln_size_mul(n_exprs, KILN_FORMAT_SYM_EXPR_SIZE, &part) &&
           kiln_size_add(need, part, &need);
  if (!ok || need > size || strings_size != (uint64_t)(size - need))
    CORRUPT("syms section: %u symbols, %u expressions and %" PRIu64
            " bytes of strings do not add up to the section's %zu bytes", n_vars, n_exprs,
            strings_size, size);
  if (n_vars < 1 || n_vars > KILN_SYM_MAX_VARS)
    CORRUPT("syms section: %u symbols, expected 1..%d", n_vars, KILN_SYM_MAX_VARS);
  if (n_exprs < n_vars || n_exprs > KILN_SYM_MAX_EXPRS)
    CORRUPT("syms section: %u expressions for %u symbols (at most %d)", n_exprs, n_vars,
            KILN_SYM_MAX_EXPRS);
  const uint8_t* vars = p + KILN_FORMAT_SYMS_HEADER_SIZE;
  const uint8_t* exprs = vars + (size_t)n_vars * KILN_FORMAT_SYM_VAR_SIZE;
  const char* strings = (const char*)(exprs + (size_t)n_exprs * KILN_FORMAT_SYM_EXPR_SIZE);
  kiln_sym_table_t* t;
  KILN_RETURN_IF_ERROR(kiln_graph_syms(g, &t));
  /* Bounded by the section's size, like every count above. */
  uint16_t* depth = malloc(sizeof(uint16_t) * n_exprs);
  if (!depth) return kiln_status_make(KILN_OUT_OF_MEMORY, "syms section");
  kiln_status_t s = kiln_ok();
  uint32_t next_var = 0;
#define SYMS_FAIL(...)                                                \
  do {                                                                \
    s = kiln_status_make(KILN_CORRUPT_ARTIFACT, __VA_ARGS__);         \
    goto done;                                                        \
  } while (0)
  for (uint32_t e = 0; e < n_exprs; ++e) {
    const uint8_t* r = exprs + (size_t)e * KILN_FORMAT_SYM_EXPR_SIZE;
    uint32_t kind = kiln_format_get_u32(r + KILN_FORMAT_SE_KIND);
    int64_t a = kiln_artifact_i64(kiln_format_get_u64(r + KILN_FORMAT_SE_A));
    int64_t b = kiln_artifact_i64(kiln_format_get_u64(r + KILN_FORMAT_SE_B));
    if (kind >= KILN_SYM_KIND_COUNT)
      SYMS_FAIL("syms section: expression %u: kind %u is unknown to this reader (format %d.%d)",
                e, kind, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
    if (!kiln_artifact_all_zero(r + KILN_FORMAT_SE_RESERVED, 4))
      SYMS_FAIL("syms section: expression %u: reserved bytes are not zero", e);
    int64_t made;
    int d = 1;
    if (kind == KILN_SYM_VAR) {
      if (a != (int64_t)next_var || b != 0 || next_var >= n_vars)
        SYMS_FAIL("syms section: expression %u is symbol %" PRId64 " (b %" PRId64
                  "), expected symbol %u of %u: symbols come in order, once each, with b 0",
                  e, a, b, next_var, n_vars);
      const uint8_t* v = vars + (size_t)next_var * KILN_FORMAT_SYM_VAR_SIZE;
      uint32_t ref = kiln_format_get_u32(v + KILN_FORMAT_SV_NAME);
      int64_t lo = kiln_artifact_i64(kiln_format_get_u64(v + KILN_FORMAT_SV_LO));
      int64_t hi = kiln_artifact_i64(kiln_format_get_u64(v + KILN_FORMAT_SV_HI));
      if (!kiln_artifact_all_zero(v + KILN_FORMAT_SV_RESERVED, 4))
        SYMS_FAIL("syms section: symbol %u: reserved bytes are not zero", next_var);
      if (ref >= strings_size || !memchr(strings + ref, 0, (size_t)strings_size - ref))
        SYMS_FAIL("syms section: symbol %u's name at %u is not a NUL-terminated string of the "
                  "%" PRIu64 "-byte string table", next_var, ref, strings_size);
      s = kiln_artifact_recode(kiln_sym_var(t, strings + ref, lo, hi, &made), "syms section");
      if (s) goto done;
      ++next_var;
    } else {
      for (int k = 0; k < 2; ++k) {
        int64_t op = k ? b : a;
        if (kiln_dim_is_sym(op)) {
          if ((uint32_t)kiln_dim_sym_id(op) >= e)
            SYMS_FAIL("syms section: expression %u (%s): operand %c names expression %d, not "
                      "an earlier one", e, kiln_artifact_sym_kinds[kind], k ? 'b' : 'a',
                      kiln_dim_sym_id(op));
          if (depth[kiln_dim_sym_id(op)] + 1 > d) d = depth[kiln_dim_sym_id(op)] + 1;
        } else if (op <= KILN_SYM_BASE) {
          SYMS_FAIL("syms section: expression %u (%s): operand %c is %" PRId64
                    ", neither a number nor an expression", e, kiln_artifact_sym_kinds[kind],
                    k ? 'b' : 'a', op);
        }
      }
      if (d > KILN_FORMAT_SYM_MAX_DEPTH)
        SYMS_FAIL("syms section: expression %u (%s) nests more than %d deep", e,
                  kiln_artifact_sym_kinds[kind], KILN_FORMAT_SYM_MAX_DEPTH);
      s = kiln_artifact_recode(kiln_dim_op(t, (kiln_sym_kind_t)kind, a, b, &made),
                               "syms section: expression %u (%s)", e,
                               kiln_artifact_sym_kinds[kind]);
      if (s) goto done;
    }
    /* The constructors must have appended exactly the stored entry. */
    const kiln_sym_expr_t* x = kiln_dim_is_sym(made) ? &t->exprs[kiln_dim_sym_id(made)] : NULL;
    if (made != kiln_dim_of_sym((int32_t)e) || (uint32_t)t->n_exprs != e + 1 ||
        x->kind != (int32_t)kind || x->a != a || x->b != b) {
      char have[96], want[96];
      kiln_artifact_expr_text((int32_t)kind, a, b, have, sizeof have);
      if (!x)
        SYMS_FAIL("syms section: expression %u, %s, is not canonical: it is the number %" PRId64,
                  e, have, made);
      if ((uint32_t)kiln_dim_sym_id(made) < e && x->kind == (int32_t)kind && x->a == a &&
          x->b == b)
        SYMS_FAIL("syms section: expression %u, %s, duplicates expression %d", e, have,
                  kiln_dim_sym_id(made));
      SYMS_FAIL("syms section: expression %u, %s, is not in the canonical form kiln builds "
                "(that is expression %d, %s)", e, have, kiln_dim_sym_id(made),
                kiln_artifact_expr_text(x->kind, x->a, x->b, want, sizeof want));
    }
    depth[e] = (uint16_t)d;
  }
  if (next_var != n_vars)
    SYMS_FAIL("syms section: %u symbols, but only %u symbol expressions", n_vars, next_var);
#undef SYMS_FAIL
done:
  free(depth);
  return s;
}

/* Adds the "guards" section's guards to the table read from "syms": the
 * count bounded by the section's size, each record's relation known and its
 * two sizes numbers or expressions of the table (so checking them at a bind
 * reads only the table). */
static kiln_status_t kiln_artifact_read_guards(const kiln_artifact_layout_t* L, kiln_graph_t* g) {
  const uint8_t* p = L->base + L->guards_off;
  size_t size = L->guards_size;
  if (size < KILN_FORMAT_GUARDS_HEADER_SIZE)
    CORRUPT("guards section: %zu bytes, fewer than its %d-byte header", size,
            KILN_FORMAT_GUARDS_HEADER_SIZE);
  uint32_t n = kiln_format_get_u32(p + KILN_FORMAT_GDH_N_GUARDS);
  if (!kiln_artifact_all_zero(p + KILN_FORMAT_GDH_RESERVED, 4))
    CORRUPT("guards section: reserved bytes are not zero");
  if (n > KILN_SYM_MAX_GUARDS ||
      (size - KILN_FORMAT_GUARDS_HEADER_SIZE) / KILN_FORMAT_GUARD_SIZE != n ||
      (size - KILN_FORMAT_GUARDS_HEADER_SIZE) % KILN_FORMAT_GUARD_SIZE)
    CORRUPT("guards section: %u guards (at most %d) do not fill its %zu bytes", n,
            KILN_SYM_MAX_GUARDS, size);
  if (!g->syms) CORRUPT("guards section in a file without a syms section");
  for (uint32_t i = 0; i < n; ++i) {
    const uint8_t* r = p + KILN_FORMAT_GUARDS_HEADER_SIZE + (size_t)i * KILN_FORMAT_GUARD_SIZE;
    uint32_t rel = kiln_format_get_u32(r + KILN_FORMAT_G_REL);
    int64_t a = kiln_artifact_i64(kiln_format_get_u64(r + KILN_FORMAT_G_A));
    int64_t b = kiln_artifact_i64(kiln_format_get_u64(r + KILN_FORMAT_G_B));
    if (rel >= KILN_SYM_REL_COUNT)
      CORRUPT("guards section: guard %u: relation %u is unknown to this reader (format %d.%d)", i,
              rel, KILN_FORMAT_MAJOR, KILN_FORMAT_MINOR);
    if (!kiln_artifact_all_zero(r + KILN_FORMAT_G_RESERVED, 4))
      CORRUPT("guards section: guard %u: reserved bytes are not zero", i);
    if (!kiln_sym_dim_valid(g->syms, a) || !kiln_sym_dim_valid(g->syms, b))
      CORRUPT("guards section: guard %u: a side is neither a number nor one of the syms "
              "section's %d expressions", i, g->syms->n_exprs);
    KILN_RETURN_IF_ERROR(kiln_artifact_recode(
        kiln_sym_guard_add(g->syms, (kiln_sym_rel_t)rel, a, b), "guards section: guard %u", i));
  }
  return kiln_ok();
}

static int kiln_artifact_same_type(const kiln_value_t* a, const kiln_artifact_value_t* b) {
  if ((uint32_t)a->dtype != b->dtype || a->rank != b->rank) return 0;
  for (int32_t d = 0; d < a->rank; ++d)
    if (a->shape[d] != b->shape[d]) return 0;
  return 1;
}

static char* kiln_artifact_strdup(const char* s) {
  size_t n = strlen(s) + 1;
  char* d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* Replays values in id order into g: inputs and constants directly, the
 * k-th intermediate by adding node k, so every id comes out as stored. */
static kiln_status_t kiln_artifact_replay(const kiln_artifact_graph_t* G, kiln_graph_t* g) {
  uint32_t next_node = 0;
  uint64_t consts_end = 0;
  for (uint32_t i = 0; i < G->n_values; ++i) {
    kiln_artifact_value_t v;
    KILN_RETURN_IF_ERROR(kiln_artifact_decode_value(G, i, &v));
    int32_t id = -1;
    if (v.kind == KILN_VALUE_INPUT) {
      KILN_RETURN_IF_ERROR(kiln_artifact_recode(
          kiln_graph_add_input(g, v.name, (kiln_dtype_t)v.dtype, v.rank, v.shape, &id),
          "graph section: input value %u", i));
    } else if (v.kind == KILN_VALUE_CONSTANT) {
      const void* data;
      KILN_RETURN_IF_ERROR(kiln_artifact_locate_constant(G, i, &v, &consts_end, &data));
      /* Borrow bytes that sit aligned in memory; copy (into aligned
       * storage) the others, so every constant the kernels see is aligned. */
      int aligned = ((uintptr_t)data % KILN_ALIGNMENT) == 0;
      kiln_status_t s =
          aligned ? kiln_graph_add_constant_borrowed(g, v.name, (kiln_dtype_t)v.dtype, v.rank,
                                                     v.shape, (kiln_layout_t)v.layout, data,
                                                     (size_t)v.const_size, &id)
                  : kiln_graph_add_constant(g, v.name, (kiln_dtype_t)v.dtype, v.rank, v.shape,
                                            (kiln_layout_t)v.layout, data,
                                            (size_t)v.const_size, &id);
      KILN_RETURN_IF_ERROR(kiln_artifact_recode(s, "graph section: constant value %u", i));
    } else {
      if (next_node >= G->n_nodes)
        CORRUPT("graph section: value %u is an intermediate, but all %u nodes already made "
                "one", i, G->n_nodes);
      uint32_t k = next_node++;
      kiln_node_t node;
      const char* origin;
      KILN_RETURN_IF_ERROR(kiln_artifact_decode_node(G, k, i, &node, &origin));
      KILN_RETURN_IF_ERROR(kiln_artifact_check_shape_params(G, k, &node, &v));
      KILN_RETURN_IF_ERROR(kiln_artifact_recode(
          kiln_graph_add_node(g, node.op, node.inputs, node.n_inputs, node.params,
                              KILN_FORMAT_PARAMS, node.fparams, KILN_FORMAT_FPARAMS, origin,
                              &id),
          "graph section: node %u (%s)", k, kiln_op_name(node.op)));
      if (id >= 0 && !kiln_artifact_same_type(&g->values[id], &v)) {
        char got[96];
        CORRUPT("graph section: node %u (%s): its inputs give %s, but value %u is stored with "
                "another dtype or shape", k, kiln_op_name(node.op),
                kiln_value_describe(&g->values[id], got, sizeof got), i);
      }
      /* Intermediates have no name parameter in the API; keep a stored one. */
      if (id >= 0 && v.name && !(g->values[id].name = kiln_artifact_strdup(v.name)))
        return kiln_status_make(KILN_OUT_OF_MEMORY, "value name");
    }
    if (id < 0 || (uint32_t)id != i)
      return kiln_status_make(KILN_INTERNAL, "graph section: value %u was recreated as %d", i,
                              id);
  }
  if (next_node != G->n_nodes)
    CORRUPT("graph section: nodes %u..%u make no value", next_node, G->n_nodes - 1);

  /* The API lists inputs in creation order; the stored list must agree. */
  if (G->n_inputs != (uint32_t)g->n_inputs)
    CORRUPT("graph section: %u graph inputs listed, %d input values stored", G->n_inputs,
            g->n_inputs);
  for (uint32_t i = 0; i < G->n_inputs; ++i) {
    int32_t id = kiln_artifact_i32(kiln_format_get_u32(G->inputs + 4 * (size_t)i));
    if (id != g->inputs[i])
      CORRUPT("graph section: graph input %u is value %d, expected input value %d", i, id,
              g->inputs[i]);
  }
  int32_t* outs = malloc((size_t)G->n_outputs * sizeof(int32_t));
  if (!outs) return kiln_status_make(KILN_OUT_OF_MEMORY, "graph outputs");
  for (uint32_t i = 0; i < G->n_outputs; ++i) {
    outs[i] = kiln_artifact_i32(kiln_format_get_u32(G->outputs + 4 * (size_t)i));
    if (outs[i] < 0 || outs[i] >= (int64_t)G->n_values) {
      kiln_status_t s = kiln_status_make(KILN_CORRUPT_ARTIFACT,
                                         "graph section: graph output %u refers to value %d "
                                         "of %u", i, outs[i], G->n_values);
      free(outs);
      return s;
    }
  }
  kiln_status_t s = kiln_graph_set_outputs(g, outs, (int32_t)G->n_outputs);
  free(outs);
  KILN_RETURN_IF_ERROR(kiln_artifact_recode(s, "graph section: outputs"));
  return kiln_artifact_recode(kiln_graph_verify(g), "graph section: the graph does not verify");
}

kiln_status_t kiln_artifact_read(const void* bytes, size_t size, kiln_allocator_t allocator,
                                 kiln_graph_t** out_graph) {
  *out_graph = NULL;
  kiln_artifact_layout_t L;
  KILN_RETURN_IF_ERROR(kiln_artifact_parse_layout(bytes, size, &L));
  kiln_artifact_graph_t G;
  KILN_RETURN_IF_ERROR(kiln_artifact_parse_graph(&L, &G));
  if (L.have_syms && L.have_plan)
    CORRUPT("section table: a '%s' section in a file with symbolic sizes (plans are made per "
            "binding of the symbols)", KILN_FORMAT_SECTION_PLAN);
  kiln_graph_t* g;
  KILN_RETURN_IF_ERROR(kiln_graph_create(allocator, &g));
  /* The symbols first: value dims and params may name their expressions. */
  kiln_status_t s = L.have_syms ? kiln_artifact_read_syms(&L, g) : kiln_ok();
  if (!s && L.have_guards) s = kiln_artifact_read_guards(&L, g);
  /* As the front end did before it lowered the nodes: the same table and
   * guards give the same probes. */
  if (!s && L.have_guards) kiln_sym_probes_fit(g->syms);
  G.syms = g->syms;
  G.minor = L.minor;
  if (!s) s = kiln_artifact_replay(&G, g);
  if (s) {
    kiln_graph_release(g);
    return s;
  }
  *out_graph = g;
  return kiln_ok();
}

/* ---- files ------------------------------------------------------------ */

kiln_status_t kiln_artifact_load_file(const char* path, void** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  KILN_CHECK_ARG(path, "no path");
  FILE* f = fopen(path, "rb");
  if (!f) return kiln_status_make(KILN_IO_ERROR, "cannot open '%s': %s", path, strerror(errno));
  long end = -1;
  if (fseek(f, 0, SEEK_END) == 0) end = ftell(f);
  if (end < 0 || fseek(f, 0, SEEK_SET) != 0) {
    kiln_status_t s = kiln_status_make(KILN_IO_ERROR, "cannot size '%s': %s", path,
                                       strerror(errno));
    fclose(f);
    return s;
  }
  size_t size = (size_t)end;
  void* buf;
  kiln_status_t s = kiln_allocator_malloc(kiln_allocator_system(), size, &buf);
  if (s) {
    fclose(f);
    return kiln_status_annotate(s, "reading '%s'", path);
  }
  size_t got = size ? fread(buf, 1, size, f) : 0;
  /* A file that shrank or grew while being read is an I/O error, not a
   * short artifact that the reader would misreport as truncated. */
  int more = fgetc(f) != EOF;
  int err = ferror(f);
  fclose(f);
  if (got != size || more || err) {
    free(buf);
    return kiln_status_make(KILN_IO_ERROR, "reading '%s': got %zu of %zu bytes%s", path, got,
                            size, more ? " (the file grew)" : "");
  }
  *out_bytes = buf;
  *out_size = size;
  return kiln_ok();
}
