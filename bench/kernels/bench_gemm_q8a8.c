/* int8 x int8 prefill figures (issue 18): C(M, N) = A(M, K) . B(K, N) for
 * the Llama-style shapes (K x N) 1024 x 1024, 1024 x 4096 and 4096 x 1024
 * at M = 32 .. 512: fp32 packed weights, int8 weights dequantized a strip at
 * a time into the fp32 GEMM (weight-only, kiln's path for M > 8), and int8
 * weights with int8 activations (kiln_gemm_q8a8: A quantized per row each
 * call, integer sums), at 1 and 2 threads.
 *
 * Each figure is the fastest of `reps` calls, the three kinds called in
 * turn (interleaved, so a burst of load on a shared machine hits all of
 * them): at 1 thread in the calling thread's CPU time, at 2 threads in wall
 * time. Usage: bench_gemm_q8a8 [reps] [M N K ...]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_timing.h"
#include "kernels/gemm/kiln_gemm.h"

int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  int64_t shapes[64][3];
  int n_shapes = 0;
  if (argc > 4) {
    for (int i = 2; i + 2 < argc && n_shapes < 64; i += 3, ++n_shapes)
      for (int d = 0; d < 3; ++d) shapes[n_shapes][d] = atoll(argv[i + d]);
  } else {
    static const int64_t kn[3][2] = {{1024, 1024}, {1024, 4096}, {4096, 1024}};
    static const int64_t ms[5] = {32, 64, 128, 256, 512};
    for (int s = 0; s < 3; ++s)
      for (int m = 0; m < 5; ++m, ++n_shapes) {
        shapes[n_shapes][0] = ms[m];
        shapes[n_shapes][1] = kn[s][1];
        shapes[n_shapes][2] = kn[s][0];
      }
  }
  printf("isa %s; fastest of %d interleaved calls; GOP/s = 2 M N K / time\n",
         kiln_cpu_isa_name(kiln_cpu_isa()), reps);
  printf("%-16s %3s | %9s %9s %9s | %10s %10s\n", "M x N x K", "thr", "fp32", "int8 w", "int8 a8",
         "a8/int8w", "a8/fp32");
  for (int s = 0; s < n_shapes; ++s) {
    int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    float* a = aligned_alloc(64, (size_t)(M * K * 4 + 64) & ~(size_t)63);
    float* w = aligned_alloc(64, (size_t)(N * K * 4 + 64) & ~(size_t)63);
    float* c = aligned_alloc(64, (size_t)(M * N * 4 + 64) & ~(size_t)63);
    for (int64_t i = 0; i < M * K; ++i) a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (int64_t i = 0; i < N * K; ++i) w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    size_t qbytes = kiln_gemm_quant_packed_size(K, N, 8, 0, 0);
    float* bp = aligned_alloc(64, kiln_gemm_f32_packed_size(K, N) + 64);
    void* q8 = aligned_alloc(64, (qbytes + 64) & ~(size_t)63);
    void* q8a8 = aligned_alloc(64, (qbytes + 64) & ~(size_t)63);
    kiln_gemm_f32_pack_b(K, N, w, 1, K, bp);
    kiln_gemm_quant_pack_b(K, N, w, 1, K, 8, 0, 0, q8);
    memcpy(q8a8, q8, qbytes);
    kiln_gemm_quant_set_a8(q8a8);
    double flop = 2.0 * (double)M * (double)N * (double)K;
    for (int threads = 1; threads <= 2; ++threads) {
      kiln_pool_t* pool = NULL;
      if (kiln_pool_create(threads, &pool)) return 1;
      kiln_gemm_f32_args_t g[3];
      for (int v = 0; v < 3; ++v) {
        memset(&g[v], 0, sizeof(g[v]));
        g[v].batch = 1, g[v].m = M, g[v].n = N, g[v].k = K;
        g[v].a = a, g[v].a_row_stride = K, g[v].a_col_stride = 1;
        g[v].c = c, g[v].c_row_stride = N;
      }
      g[0].b_packed = bp, g[1].b_packed_q = q8, g[2].b_packed_q = q8a8;
      double best[3] = {1e30, 1e30, 1e30};
      for (int v = 0; v < 3; ++v) kiln_gemm_f32(&g[v], pool); /* warm */
      for (int r = 0; r < reps; ++r)
        for (int v = 0; v < 3; ++v) {
          double t0 = threads == 1 ? bench_thread_cpu_now() : bench_now();
          kiln_gemm_f32(&g[v], pool);
          double t = (threads == 1 ? bench_thread_cpu_now() : bench_now()) - t0;
          if (t < best[v]) best[v] = t;
        }
      char name[64];
      snprintf(name, sizeof(name), "%lldx%lldx%lld", (long long)M, (long long)N, (long long)K);
      printf("%-16s %3d | %9.1f %9.1f %9.1f | %9.2fx %9.2fx\n", name, threads, flop / best[0] * 1e-9,
             flop / best[1] * 1e-9, flop / best[2] * 1e-9, best[1] / best[2], best[0] / best[2]);
      fflush(stdout);
      kiln_pool_release(pool);
    }
    free(a), free(w), free(c), free(bp), free(q8), free(q8a8);
  }
  return 0;
}
