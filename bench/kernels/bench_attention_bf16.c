/* bf16 attention against fp32 attention, the kernel alone (issue: bf16
 * attention under compute_dtype=bf16).
 *
 * Shapes of the models that motivated it: MiniLM (H 12, D 32) and BERT-base
 * (H 12, D 64) at S = 128, batch 8 and 1, laid out as the compiled models
 * run them: q, k, v views into one (B, S, 3 H D) QKV projection, the output
 * written (B, S, H, D). Three contenders per row, timed in interleaved
 * rounds, each figure the fastest call of all rounds (the machine is
 * shared: the fastest call is the one nobody interrupted): fp32, the bf16
 * rule on VDPBF16PS (when the CPU has AVX512_BF16), and the bf16 rule on
 * the fp32 kernels (kiln_cpu_bf16_set(0)).
 *
 * Usage: bench_attention_bf16 [rounds (default 30)] [calls per round (default 20)]
 *   BENCH_ONLY=0|1|2 times one contender only (fp32, engine, fallback), for perf.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "bench_timing.h"
#include "kernels/nn/kiln_nn.h"

static double bench_attn_best(const kiln_attention_args_t* a, kiln_pool_t* pool, int calls) {
  double best = 1e30;
  for (int c = 0; c < calls; ++c) {
    double t0 = bench_now();
    kiln_attention_f32(a, pool);
    double t = bench_now() - t0;
    best = t < best ? t : best;
  }
  return best;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 30, calls = argc > 2 ? atoi(argv[2]) : 20;
  /* BENCH_ONLY=0|1|2: time only fp32, bf16 on the engine, or bf16 on the
   * fp32 kernels (for a profiler). */
  const char* only_env = getenv("BENCH_ONLY");
  int only = only_env ? atoi(only_env) : -1;
  const unsigned engines = kiln_cpu_bf16();
  kiln_pool_t* pools[2] = {NULL, NULL};
  if (kiln_pool_create(1, &pools[0]) || kiln_pool_create(2, &pools[1])) return 1;
  static const struct { int64_t b, h, s, d; } shapes[] = {
      {8, 12, 128, 32}, {1, 12, 128, 32}, {8, 12, 128, 64}, {1, 12, 128, 64}};
  printf("isa %s, bf16 engine %s; fastest call of %d rounds x %d calls\n",
         kiln_cpu_isa_name(kiln_cpu_isa()), kiln_cpu_bf16_name(engines), rounds, calls);
  /* bf16 us: the rule on VDPBF16PS; fp32k us: the rule on the fp32 kernels
   * (a CPU without the engine); GFLOP/s: bf16's. */
  printf("%-22s %3s %10s %10s %10s %9s %8s\n", "shape", "thr", "fp32 us", "bf16 us",
         "fp32k us", "fp32/bf16", "GFLOP/s");
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; ++si) {
    int64_t B = shapes[si].b, H = shapes[si].h, S = shapes[si].s, D = shapes[si].d;
    int64_t N = H * D;
    size_t nqkv = (size_t)(B * S * 3 * N), no = (size_t)(B * S * N);
    float* qkv = malloc(nqkv * sizeof(float));
    float* out = malloc(no * sizeof(float));
    if (!qkv || !out) return 1;
    for (size_t i = 0; i < nqkv; ++i) qkv[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    kiln_attention_args_t a;
    memset(&a, 0, sizeof a);
    a.batch = B, a.heads = a.kv_heads = H, a.q_len = a.kv_len = S;
    a.head_dim = a.v_head_dim = D;
    /* (B, S, 3N) viewed as (B, H, S, D): strides b, h, s, d. */
    int64_t st[4] = {S * 3 * N, D, 3 * N, 1};
    memcpy(a.q_strides, st, sizeof st);
    memcpy(a.k_strides, st, sizeof st);
    memcpy(a.v_strides, st, sizeof st);
    a.q = qkv, a.k = qkv + N, a.v = qkv + 2 * N, a.out = out;
    a.out_strides[0] = S * N, a.out_strides[1] = D, a.out_strides[2] = N;
    a.scale = 1.0f / sqrtf((float)D);
    double flop = 4.0 * (double)(B * H * S * S * D);
    for (int t = 1; t <= 2; ++t) {
      double best[3] = {1e30, 1e30, 1e30};
      for (int r = 0; r < rounds; ++r)
        for (int k = 0; k < 3; ++k) {
          int c = (k + r) % 3; /* rotate the order round to round */
          if (only >= 0 && c != only) continue;
          a.bf16 = c > 0;
          kiln_cpu_bf16_set(c == 2 ? 0u : engines);
          double x = bench_attn_best(&a, pools[t - 1], calls);
          best[c] = x < best[c] ? x : best[c];
        }
      kiln_cpu_bf16_set(engines);
      char name[64];
      snprintf(name, sizeof name, "B%lld H%lld S%lld D%lld", (long long)B, (long long)H,
               (long long)S, (long long)D);
      printf("%-22s %3d %10.1f %10.1f %10.1f %7.2fx %8.1f\n", name, t, best[0] * 1e6,
             best[1] * 1e6, best[2] * 1e6, best[0] / best[1], flop / best[1] * 1e-9);
    }
    free(qkv);
    free(out);
  }
  kiln_pool_release(pools[0]);
  kiln_pool_release(pools[1]);
  return 0;
}
