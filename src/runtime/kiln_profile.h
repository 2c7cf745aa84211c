/* The roofline profile of a model's runs: per kernel node its time and
 * share, FLOPs and bytes (kiln_cost.h), achieved GFLOP/s and GB/s, whether
 * it is compute- or memory-bound on this machine (its arithmetic intensity
 * against the ridge of the measured peaks, kiln_machine.h) and the fraction
 * of that roof it reached; totals; and, for a model whose weights bound the
 * call (a decode step), the calls/s and tokens/s ceiling: the measured read
 * bandwidth over the weight bytes one call must stream.
 *
 * `kiln profile FILE` prints it; kiln.profile (Python) reads the same rows
 * and lines through the extension, so both show one table. The report is
 * made from the times alone (kiln_profile_report_make), so a test can give
 * it times and peaks and check every figure. */
#ifndef KILN_PROFILE_H
#define KILN_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "ir/kiln_graph.h"
#include "runtime/kiln_machine.h"
#include "runtime/kiln_model.h"

typedef struct kiln_profile_row_s {
  int32_t node;
  double ms, wait_ms; /* per run: the node's own time, and its wait at the host team's barrier */
  double share;       /* of the summed node time */
  int64_t flops, bytes;
  double gflops, gbs, intensity; /* intensity: FLOP/byte (HUGE_VAL with no bytes) */
  int compute_bound;             /* intensity at or above the row's ridge */
  double peak_fraction;          /* of the row's compute roof (compute-bound) or read bandwidth */
  /* The compute roof the node's arithmetic runs on: "fp32" (the FMA peak),
   * "bf16" (a linear on the bf16 engine: its dot-product peak) or "int8" (a
   * linear with int8 activations on the int8 engine: VPDPBUSD's peak), and
   * that roof in GFLOP/s (GOP/s). */
  const char* roof;
  double roof_gflops;
} kiln_profile_row_t;

typedef struct kiln_profile_report_s {
  kiln_profile_row_t* rows; /* kernel nodes (and nodes that took time), slowest first */
  int32_t n_rows;
  int64_t runs;
  int threads;
  double ms, wait_ms, wall_ms; /* per run: summed node time, summed waits, wall time */
  int64_t flops, bytes;
  double gflops, gbs;
  /* The roofs used: one thread's peaks when the model runs on one thread,
   * else all threads'. ridge = peak_gflops / bandwidth_gbs (FLOP/byte), the
   * fp32 roof's; rows on the bf16 or int8 engine use theirs (0: not
   * measured, or no row used it). */
  double peak_gflops, bandwidth_gbs, ridge;
  double bf16_gflops, int8_gops;
  int bandwidth_sampled; /* bandwidth_gbs was sampled beside the runs (else the cached peak) */
  char isa[32];
  /* The weights: bytes of constants one call reads (kiln_graph_weight_bytes),
   * the rows per call (M of the largest linear) and whether the weights bound
   * the call: the FLOPs of the nodes reading them per weight byte are below
   * the ridge, so streaming the weights takes longer than their arithmetic
   * (a decode step). Then calls_per_s = bandwidth / weight_bytes and
   * tokens_per_s = calls_per_s * weight_rows are the ceilings, else 0. */
  int64_t weight_bytes, weight_rows;
  int weight_bound;
  double calls_per_s, tokens_per_s;
  int64_t l3_bytes; /* the machine's L3 (0: unknown): weights it holds may beat the ceiling */
} kiln_profile_report_t;

/* Sets m's read bandwidth for `threads` (bandwidth_gbs_1 for one, else
 * bandwidth_gbs) to one taken now on `pool`: the best of three reads of
 * kiln_machine_sample's buffer, and marks it sampled. A shared machine's
 * bandwidth moves by 2x within an hour (the neighbours' traffic), so a
 * memory-bound node's percentage means something only against the
 * bandwidth of the same minutes; the cached figure is kept if the probe
 * fails. `kiln profile` and kiln.profile call it right after their runs. */
kiln_status_t kiln_profile_bandwidth_now(kiln_pool_t* pool, int threads, kiln_machine_t* m);

/* From per-node totals over `runs` runs (times_ns and wait_ns: graph->n_nodes
 * each; wait_ns may be NULL), for a concrete graph. */
kiln_status_t kiln_profile_report_make(const kiln_graph_t* graph, const uint64_t* times_ns,
                                       const uint64_t* wait_ns, int64_t runs, int threads,
                                       double wall_ms, const kiln_machine_t* machine,
                                       kiln_profile_report_t* out);
/* The same from a model's profile counters (kiln_model_profile) and the
 * graph its last call ran (a symbolic model's instance). */
kiln_status_t kiln_profile_report_of_model(const kiln_model_t* model, double wall_ms,
                                           const kiln_machine_t* machine,
                                           kiln_profile_report_t* out);
void kiln_profile_report_deinitialize(kiln_profile_report_t* report);

/* The table: header lines, one line per row (row index r, in the report's
 * order; the origin, the PyTorch op and source line, comes last in full),
 * then the footer (the totals and the weights line). kiln_profile_report_print writes all
 * three, at most `limit` rows (< 0: all) and a line counting the others. */
void kiln_profile_report_print_header(const kiln_profile_report_t* report, FILE* out);
void kiln_profile_report_print_row(const kiln_profile_report_t* report, const kiln_graph_t* graph,
                                   int32_t r, FILE* out);
void kiln_profile_report_print_footer(const kiln_profile_report_t* report, FILE* out);
void kiln_profile_report_print(const kiln_profile_report_t* report, const kiln_graph_t* graph,
                               int32_t limit, FILE* out);

#endif /* KILN_PROFILE_H */
