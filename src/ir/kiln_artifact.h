/* The .kiln artifact: one kiln_graph_t (values, nodes, constants' bytes,
 * graph inputs and outputs) plus any number of named caller sections (the
 * runtime's memory plan, the front end's JSON metadata), in one versioned,
 * little-endian byte buffer whose layout is fixed by ir/kiln_format.h and
 * docs/format.md.
 *
 * The reader treats its input as hostile: every offset, size, count, enum
 * and id is checked against the buffer before use, and a failure is a
 * KILN_CORRUPT_ARTIFACT status saying what was wrong and where (never a
 * crash, an out-of-bounds read or a leak). Graphs are rebuilt through the
 * public graph API, so shape inference re-validates every node, and then
 * verified with kiln_graph_verify.
 */
#ifndef KILN_ARTIFACT_H
#define KILN_ARTIFACT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_alloc.h"
#include "base/kiln_status.h"
#include "ir/kiln_graph.h"

/* A caller section: name is 1..31 printable ASCII characters (not "graph" or
 * "consts"), unique within one artifact; data (borrowed, may be NULL when
 * size is 0) is copied into the artifact as is. */
typedef struct kiln_artifact_section_s {
  const char* name;
  const void* data;
  size_t size;
} kiln_artifact_section_t;

/* Serialises `graph` (borrowed) and `n_extra` caller sections (borrowed;
 * `extra` may be NULL when n_extra is 0) into a new buffer. On success
 * *out_bytes is a 64-byte-aligned buffer of *out_size bytes that the caller
 * frees with free(); on failure it is NULL. The graph must verify and be in
 * the shape the public graph API builds (graph inputs in value id order, the
 * k-th intermediate made by node k), else KILN_INVALID_ARGUMENT. */
kiln_status_t kiln_artifact_write(const kiln_graph_t* graph, const kiln_artifact_section_t* extra,
                                  int32_t n_extra, void** out_bytes, size_t* out_size);

/* Parses `size` bytes (borrowed) into a new graph made with `allocator`.
 * Constants whose bytes sit 64-byte aligned in memory are borrowed from
 * `bytes` (the caller keeps `bytes` alive and unchanged as long as the
 * graph); otherwise they are copied into the graph. On failure *out_graph is
 * NULL and nothing is leaked. Files from a newer major version are refused;
 * newer minor versions are read (their unknown sections ignored). */
kiln_status_t kiln_artifact_read(const void* bytes, size_t size, kiln_allocator_t allocator,
                                 kiln_graph_t** out_graph);

/* Finds a section by name (caller sections, or "graph"/"consts") after
 * checking the header and section table (safe on any bytes). *out_data
 * points into `bytes` (borrowed), or is NULL with *out_size 0 when there is
 * no such section. */
kiln_status_t kiln_artifact_find_section(const void* bytes, size_t size, const char* name,
                                         const void** out_data, size_t* out_size);

/* Writes `size` bytes to `path` (created or truncated). KILN_IO_ERROR names
 * the path and the reason. */
kiln_status_t kiln_artifact_save_file(const char* path, const void* bytes, size_t size);

/* Reads the whole file at `path` into a new 64-byte-aligned buffer, so that
 * kiln_artifact_read can borrow its constants in place. Free *out_bytes with
 * free() (it comes from the system allocator, kiln_allocator_system()). */
kiln_status_t kiln_artifact_load_file(const char* path, void** out_bytes, size_t* out_size);

#endif /* KILN_ARTIFACT_H */
