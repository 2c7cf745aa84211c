/* The roofline profile report (kiln_profile.h): node times joined with
 * their costs (kiln_cost.h) and the machine's measured roofs, and its text.
 * Both `kiln profile` and kiln.profile print these lines, so the command
 * line and Python show one table. */
#include "runtime/kiln_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "runtime/kiln_cost.h"

/* A LINEAR's or MATMUL's rows (M of each product). */
static int64_t kiln_profile_rows(const kiln_graph_t* g, const kiln_node_t* n) {
  const kiln_value_t* y = &g->values[n->outputs[0]];
  if (n->op == KILN_OP_MATMUL) return y->rank >= 2 ? y->shape[y->rank - 2] : 1;
  int64_t m = 1;
  for (int32_t d = 0; d + 1 < y->rank; ++d) m *= y->shape[d];
  return m;
}

/* The roof node n's arithmetic runs on: a linear (or matmul) whose weight is
 * packed for the bf16 engines, one whose operands are both bf16 graph values
 * (autocast's products, from 16 rows: kiln_gemm_bf16_compute_values), or a
 * channels-last conv whose weight has the bf16-compute layout, runs on that
 * engine where this machine has one; one whose int8 / int4 blob is flagged
 * for int8 activations runs integer dot products, on VPDPBUSD where the
 * machine measured it at the avx512 level (kiln_gemm_q8a8.c's int8 engine);
 * a bf16 SDPA on the bf16 engine; everything else on the fp32 FMA. */
static const char* kiln_profile_node_roof(const kiln_graph_t* g, const kiln_node_t* n,
                                          const kiln_profile_report_t* r) {
  /* bf16 attention runs its products on VDPBF16PS, except a decode step's
   * (at most 8 rows per kv head: the fp32 kernels, kiln_attention.c). */
  if (n->op == KILN_OP_SDPA)
    return r->bf16_gflops > 0 && kiln_node_is_bf16_attention_prefill(g, n) ? "bf16" : "fp32";
  if ((n->op != KILN_OP_LINEAR && n->op != KILN_OP_MATMUL && n->op != KILN_OP_CONV2D_NHWC) ||
      n->n_inputs < 2 || n->inputs[1] < 0)
    return "fp32";
  const kiln_value_t* w = &g->values[n->inputs[1]];
  if (kiln_node_is_bf16_product(g, n))
    return r->bf16_gflops > 0 && kiln_profile_rows(g, n) >= 16 ? "bf16" : "fp32";
  if (w->kind != KILN_VALUE_CONSTANT) return "fp32";
  if ((w->layout == KILN_LAYOUT_GEMM_PACKED_B_BF16_VNNI ||
       w->layout == KILN_LAYOUT_CONV2D_PACKED_16_BF16) &&
      r->bf16_gflops > 0)
    return "bf16";
  if (kiln_value_int8_activations(w) && r->int8_gops > 0) return "int8";
  return "fp32";
}

static int kiln_profile_cmp_rows(const void* a, const void* b) {
  const kiln_profile_row_t *x = a, *y = b;
  if (x->ms != y->ms) return x->ms < y->ms ? 1 : -1; /* slowest first */
  return x->node - y->node;
}

kiln_status_t kiln_profile_report_make(const kiln_graph_t* g, const uint64_t* times_ns,
                                       const uint64_t* wait_ns, int64_t runs, int threads,
                                       double wall_ms, const kiln_machine_t* m,
                                       kiln_profile_report_t* r) {
  memset(r, 0, sizeof(*r));
  KILN_CHECK_ARG(g && times_ns && m, "a profile report needs a graph, its times and the machine");
  r->rows = calloc((size_t)g->n_nodes + 1, sizeof(kiln_profile_row_t));
  if (!r->rows) return kiln_status_make(KILN_OUT_OF_MEMORY, "profile report rows");
  r->runs = runs > 0 ? runs : 0;
  double per = 1.0 / (double)(runs > 0 ? runs : 1);
  r->threads = threads;
  r->wall_ms = wall_ms;
  r->peak_gflops = threads == 1 && m->fma_gflops_1 > 0 ? m->fma_gflops_1 : m->fma_gflops;
  r->bandwidth_gbs = threads == 1 && m->bandwidth_gbs_1 > 0 ? m->bandwidth_gbs_1 : m->bandwidth_gbs;
  r->ridge = r->bandwidth_gbs > 0 ? r->peak_gflops / r->bandwidth_gbs : 0;
  r->bandwidth_sampled = m->bandwidth_sampled;
  int one = threads == 1;
  if (strcmp(m->bf16_engine, "none") && m->bf16_engine[0])
    r->bf16_gflops = one && m->bf16_gflops_1 > 0 ? m->bf16_gflops_1 : m->bf16_gflops;
  if (!strcmp(m->isa, "avx512"))
    r->int8_gops = one && m->int8_gops_1 > 0 ? m->int8_gops_1 : m->int8_gops;
  r->l3_bytes = m->l3_bytes > 0 ? m->l3_bytes : 0;
  snprintf(r->isa, sizeof r->isa, "%s", m->isa[0] ? m->isa : kiln_cpu_isa_name(kiln_cpu_isa()));
  uint64_t total_ns = 0, total_wait = 0;
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    total_ns += times_ns[i];
    total_wait += wait_ns ? wait_ns[i] : 0;
  }
  for (int32_t i = 0; i < g->n_nodes; ++i) {
    const kiln_node_t* n = &g->nodes[i];
    int64_t view_bytes;
    if (kiln_node_is_view(g, n, &view_bytes) && times_ns[i] == 0) continue;
    kiln_node_cost_t c;
    kiln_node_cost(g, n, &c);
    kiln_profile_row_t* row = &r->rows[r->n_rows++];
    double s = (double)times_ns[i] * per * 1e-9;
    row->node = i;
    row->ms = s * 1e3;
    row->wait_ms = wait_ns ? (double)wait_ns[i] * per * 1e-6 : 0;
    row->share = total_ns ? (double)times_ns[i] / (double)total_ns : 0;
    row->flops = c.flops;
    row->bytes = c.bytes;
    row->gflops = s > 0 ? (double)c.flops / s * 1e-9 : 0;
    row->gbs = s > 0 ? (double)c.bytes / s * 1e-9 : 0;
    row->intensity = c.bytes ? (double)c.flops / (double)c.bytes : HUGE_VAL;
    row->roof = kiln_profile_node_roof(g, n, r);
    row->roof_gflops = !strcmp(row->roof, "bf16")   ? r->bf16_gflops
                       : !strcmp(row->roof, "int8") ? r->int8_gops
                                                    : r->peak_gflops;
    double ridge = r->bandwidth_gbs > 0 ? row->roof_gflops / r->bandwidth_gbs : 0;
    row->compute_bound = row->intensity >= ridge;
    row->peak_fraction = row->compute_bound ? (row->roof_gflops > 0 ? row->gflops / row->roof_gflops : 0)
                                            : (r->bandwidth_gbs > 0 ? row->gbs / r->bandwidth_gbs : 0);
    r->flops += c.flops;
    r->bytes += c.bytes;
  }
  qsort(r->rows, (size_t)r->n_rows, sizeof(kiln_profile_row_t), kiln_profile_cmp_rows);
  double total_s = (double)total_ns * per * 1e-9;
  r->ms = total_s * 1e3;
  r->wait_ms = (double)total_wait * per * 1e-6;
  r->gflops = total_s > 0 ? (double)r->flops / total_s * 1e-9 : 0;
  r->gbs = total_s > 0 ? (double)r->bytes / total_s * 1e-9 : 0;
  int64_t weight_flops = 0;
  r->weight_bytes = kiln_graph_weight_bytes(g, &r->weight_rows, &weight_flops);
  if (r->weight_bytes < 0) {
    kiln_profile_report_deinitialize(r);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "profile report weights");
  }
  r->weight_bound = r->weight_bytes > 0 && r->weight_rows > 0 &&
                    (double)weight_flops < r->ridge * (double)r->weight_bytes;
  if (r->weight_bound && r->bandwidth_gbs > 0) {
    r->calls_per_s = r->bandwidth_gbs * 1e9 / (double)r->weight_bytes;
    r->tokens_per_s = r->calls_per_s * (double)r->weight_rows;
  }
  return kiln_ok();
}

kiln_status_t kiln_profile_bandwidth_now(kiln_pool_t* pool, int threads, kiln_machine_t* m) {
  KILN_CHECK_ARG(m && threads >= 1, "a machine and a thread count");
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    double gbs = 0;
    KILN_RETURN_IF_ERROR(kiln_machine_sample(threads > 1 ? pool : NULL, threads, KILN_MACHINE_PROBE_READ, &gbs));
    if (gbs > best) best = gbs;
  }
  if (best <= 0) return kiln_ok();
  if (threads == 1) m->bandwidth_gbs_1 = best;
  else m->bandwidth_gbs = best;
  m->bandwidth_sampled = 1;
  return kiln_ok();
}

kiln_status_t kiln_profile_report_of_model(const kiln_model_t* model, double wall_ms,
                                           const kiln_machine_t* m, kiln_profile_report_t* out) {
  int64_t runs = 0;
  const uint64_t* times = kiln_model_profile(model, &runs);
  return kiln_profile_report_make(kiln_model_last_graph(model), times,
                                  kiln_model_profile_wait(model), runs,
                                  kiln_pool_size(kiln_model_pool(model)), wall_ms, m, out);
}

void kiln_profile_report_deinitialize(kiln_profile_report_t* r) {
  free(r->rows);
  r->rows = NULL;
  r->n_rows = 0;
}

void kiln_profile_report_print_header(const kiln_profile_report_t* r, FILE* out) {
  fprintf(out,
          "%lld runs, %d thread%s, %s; per run %.4f ms in nodes (%.4f ms more waiting for the "
          "host team), wall %.4f ms; %.1f GFLOP/s, %.1f GB/s\n",
          (long long)r->runs, r->threads, r->threads == 1 ? "" : "s", r->isa, r->ms, r->wait_ms,
          r->wall_ms, r->gflops, r->gbs);
  int bf16 = 0, int8 = 0;
  for (int32_t i = 0; i < r->n_rows; ++i) {
    bf16 |= !strcmp(r->rows[i].roof, "bf16");
    int8 |= !strcmp(r->rows[i].roof, "int8");
  }
  fprintf(out, "roofs: %.1f GFLOP/s fp32 FMA", r->peak_gflops);
  if (bf16) fprintf(out, ", %.1f GFLOP/s bf16 dot (its rows: bound bf16)", r->bf16_gflops);
  if (int8) fprintf(out, ", %.1f GOP/s int8 dot (its rows: bound int8)", r->int8_gops);
  fprintf(out, ", %.1f GB/s read (%s, %s; ridge %.1f FLOP/byte)\n", r->bandwidth_gbs,
          r->threads == 1 ? "1 thread" : "all threads",
          r->bandwidth_sampled ? "sampled beside the runs" : "the cached peak", r->ridge);
  fprintf(out, "%5s  %-18s%10s%7s%11s%10s%9s%7s%7s  %-8s%s\n", "node", "op", "ms", "share",
          "MFLOP", "KiB", "GFLOP/s", "GB/s", "%peak", "bound", "origin");
}

void kiln_profile_report_print_row(const kiln_profile_report_t* r, const kiln_graph_t* g,
                                   int32_t k, FILE* out) {
  const kiln_profile_row_t* row = &r->rows[k];
  const kiln_node_t* n = &g->nodes[row->node];
  fprintf(out, "%5d  %-18s%10.4f%6.1f%%%11.3f%10.1f%9.1f%7.1f%6.0f%%  %-8s%s\n", row->node,
          kiln_op_name(n->op), row->ms, 100 * row->share, (double)row->flops * 1e-6,
          (double)row->bytes / 1024, row->gflops, row->gbs, 100 * row->peak_fraction,
          !row->compute_bound ? "memory" : strcmp(row->roof, "fp32") ? row->roof : "compute",
          n->origin ? n->origin : "-");
}

void kiln_profile_report_print_footer(const kiln_profile_report_t* r, FILE* out) {
  fprintf(out, "%5s  %-18s%10.4f%6.1f%%%11.3f%10.1f%9.1f%7.1f\n", "", "total", r->ms,
          r->n_rows ? 100.0 : 0.0, (double)r->flops * 1e-6, (double)r->bytes / 1024, r->gflops,
          r->gbs);
  fprintf(out, "weights: %.2f MiB of constants read per call", (double)r->weight_bytes / 1048576.0);
  if (r->weight_bound && r->calls_per_s > 0)
    fprintf(out,
            "; they bound the call (decode-shaped, %lld row%s per call): at %.1f GB/s read, at "
            "most %.1f calls/s, %.1f tokens/s%s\n",
            (long long)r->weight_rows, r->weight_rows == 1 ? "" : "s", r->bandwidth_gbs,
            r->calls_per_s, r->tokens_per_s,
            r->weight_bytes <= r->l3_bytes ? " (the L3 holds them: a run may beat this memory "
                                             "ceiling)"
                                           : "");
  else
    fputs("\n", out);
}

void kiln_profile_report_print(const kiln_profile_report_t* r, const kiln_graph_t* g,
                               int32_t limit, FILE* out) {
  kiln_profile_report_print_header(r, out);
  int32_t shown = limit < 0 || limit > r->n_rows ? r->n_rows : limit;
  for (int32_t k = 0; k < shown; ++k) kiln_profile_report_print_row(r, g, k, out);
  if (shown < r->n_rows) fprintf(out, "  ... %d more nodes\n", r->n_rows - shown);
  kiln_profile_report_print_footer(r, out);
}
