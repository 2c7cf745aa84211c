/* Which outputs of a model are new values of its inputs: the artifact's
 * "writes" section, for a model traced with in-place updates of its inputs
 * (a generation step whose KV cache is passed in). The Python front end
 * writes it (kiln.capture.input_writes_of finds the updates); the runtime's
 * callers (the C API, the CLI, the Python module) read it through
 * kiln_writes_load, which checks it against the graph.
 *
 * Layout (little-endian):
 *   0   8  "KILNWRIT"
 *   8   4  u32 version (1)
 *  12   4  u32 count N (at most the graph's outputs)
 *  16      N records of 12 bytes: u32 output index, u32 input index,
 *          u32 flags (bit 0: in place; the other bits zero)
 * The section is exactly 16 + 12 N bytes.
 *
 * "In place" means the output may be given the input's own memory: every
 * reader of the input's old value runs before the node that makes the new
 * one, so writing it there changes nothing they read. Otherwise the caller
 * passes other memory and copies the new value in after the run. */
#ifndef KILN_WRITES_H
#define KILN_WRITES_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_status.h"
#include "ir/kiln_graph.h"

#define KILN_WRITES_SECTION "writes"

typedef struct kiln_writes_s {
  int32_t n;
  int32_t* input;    /* per graph output: the input it updates, or -1 */
  uint8_t* in_place; /* per graph output: 1 when it may be written in place */
} kiln_writes_t;

/* Reads a "writes" section (bytes may be NULL: no section, no writes) for
 * graph g into *out, whose tables have one entry per graph output. Anything
 * malformed, an index out of range, an input or output named twice, or an
 * output whose dtype or shape is not its input's is KILN_CORRUPT_ARTIFACT
 * with a message; *out is then empty. */
kiln_status_t kiln_writes_load(const kiln_graph_t* g, const void* bytes, size_t size,
                               kiln_writes_t* out);

void kiln_writes_clear(kiln_writes_t* w);

#endif /* KILN_WRITES_H */
