/* Shared pieces of the `kiln` command line: tensor data helpers (element
 * conversion for every kiln dtype, deterministic fill, summary statistics,
 * raw little-endian .bin files). kiln_cli.c holds the commands; this split
 * keeps byte-level code apart from argument handling and printing.
 *
 * The CLI only runs on little-endian hosts (the .kiln format and the raw
 * .bin files are little-endian and read with memcpy), which the build
 * machines all are.
 */
#ifndef KILN_CLI_H
#define KILN_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_status.h"
#include "base/kiln_dtype.h"

/* Element i of a dense buffer of `dtype`, widened to double (f16 and bf16
 * are decoded; bool is 0 or 1). */
double kiln_cli_elem_get(kiln_dtype_t dtype, const void* data, size_t i);

/* The next number of a splitmix64 stream: tiny, well mixed (it passes
 * BigCrush) and identical on every platform. */
uint64_t kiln_cli_splitmix64(uint64_t* state);

/* Fills `numel` elements: floats uniform in [-1, 1) from a splitmix64 stream
 * seeded by `seed` (same seed, same bytes on every machine), integers 0,
 * bool false. */
void kiln_cli_fill_random(kiln_dtype_t dtype, void* data, size_t numel, uint64_t seed);

typedef struct kiln_cli_stats_s {
  double min, max, mean;
  size_t nan_count; /* NaNs are counted, not folded into min/max/mean */
  size_t finite_count;
} kiln_cli_stats_t;

void kiln_cli_stats_compute(kiln_dtype_t dtype, const void* data, size_t numel,
                            kiln_cli_stats_t* out_stats);

/* Reads exactly `size` bytes from `path` into `data`; a file of any other
 * length is KILN_INVALID_ARGUMENT naming `what`, the path, the actual and
 * the expected size. */
kiln_status_t kiln_cli_read_exact(const char* what, const char* path, void* data, size_t size);

/* The whole of the file at `path` ("-": standard input) as a NUL-terminated
 * string (free()) of *out_size bytes, at most `max`; an error names `what`
 * (the option that gave the path) and the path. */
kiln_status_t kiln_cli_read_text(const char* what, const char* path, size_t max, char** out,
                                 size_t* out_size);

/* Writes `size` bytes to `path` (created or truncated). */
kiln_status_t kiln_cli_write_file(const char* path, const void* data, size_t size);

/* Creates directory `path` if it does not exist yet (one level). */
kiln_status_t kiln_cli_ensure_dir(const char* path);

/* Parses a whole decimal integer in [lo, hi] into *out; 0 on anything else
 * (empty, trailing characters, out of range). */
int kiln_cli_parse_int(const char* text, long long lo, long long hi, long long* out);

#endif /* KILN_CLI_H */
