/* Runs every C test suite and prints the closing "N passed, N failed" line.
 * A suite is a function that makes KILN_EXPECT checks; add one line to the
 * table below for each. An optional argument runs only suites whose name
 * contains it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "base/kiln_status.h"
#include "kernels/kiln_isa_variant.h"
#include "kiln_test.h"

int kiln_test_passed, kiln_test_failed;

int kiln_test_compare_f32(const char* what, const float* got, const float* want, size_t n,
                          float atol, float rtol) {
  int bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float g = got[i], w = want[i];
    int ok;
    if (isnan(w)) ok = isnan(g);
    else if (isinf(w)) ok = g == w;
    else ok = fabsf(g - w) <= atol + rtol * fabsf(w);
    if (!ok) {
      if (!bad)
        fprintf(stderr, "  %s: element %zu: got %.9g want %.9g\n", what, i, (double)g,
                (double)w);
      ++bad;
    }
  }
  KILN_EXPECT(bad == 0, "%s: %d of %zu elements differ", what, bad, n);
  return bad;
}

void kiln_test_fill_f32(float* x, size_t n, unsigned seed, float lo, float hi) {
  uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x[i] = lo + (hi - lo) * (float)((s >> 40) * (1.0 / 16777216.0));
  }
}

void kiln_test_each_isa_and_pool(void (*fn)(kiln_pool_t* pool, const char* where)) {
  kiln_isa_t start = kiln_cpu_isa();
  kiln_pool_t* pools[2] = {NULL, NULL};
  KILN_EXPECT_OK(kiln_pool_create(1, &pools[0]));
  KILN_EXPECT_OK(kiln_pool_create(2, &pools[1]));
  /* This architecture's levels (the list the kernel families' variants
   * come from, kernels/kiln_isa_variant.h) up to the starting one. */
#define KILN_TEST_LEVEL_(isa, LEVEL, unused) KILN_ISA_##LEVEL,
  static const kiln_isa_t levels[] = {KILN_ISA_LEVELS(KILN_TEST_LEVEL_, ~)};
  for (size_t li = 0; li < sizeof levels / sizeof levels[0]; ++li) {
    kiln_isa_t level = levels[li];
    if (kiln_cpu_isa_rank(level) > kiln_cpu_isa_rank(start)) continue;
    if (kiln_cpu_isa_set(level) != level) continue;
    for (int p = 0; p < 2; ++p) {
      if (!pools[p]) continue;
      char where[64];
      snprintf(where, sizeof(where), "[%s, %d thread%s]", kiln_cpu_isa_name(level),
               p + 1, p ? "s" : "");
      fn(pools[p], where);
    }
  }
  kiln_cpu_isa_set(start);
  kiln_pool_release(pools[0]);
  kiln_pool_release(pools[1]);
}

/* One line naming the ISA level the tests start at and the features found
 * (make test-arm64 reports it per emulated CPU). */
static void kiln_test_print_cpu(void) {
  const kiln_cpu_features_t* f = kiln_cpu_features();
  printf("cpu: isa %s;%s%s%s%s%s%s%s%s%s%s%s%s\n", kiln_cpu_isa_name(kiln_cpu_isa()),
         f->avx2_fma ? " avx2" : "", f->avx512 ? " avx512" : "", f->avx512_bf16 ? " avx512_bf16" : "",
         f->avx512_vnni ? " avx512_vnni" : "", f->avx512_vbmi ? " avx512_vbmi" : "",
         f->amx_bf16 ? " amx_bf16" : "", f->neon ? " asimd" : "", f->neon_dotprod ? " asimddp" : "",
         f->neon_bf16 ? " bf16" : "", f->neon_i8mm ? " i8mm" : "", f->sve ? " sve" : "",
         f->avx2_fma || f->neon ? "" : " (no SIMD features)");
}

#define KILN_TEST_SUITES(X) \
  X(status)                 \
  X(cpu)                    \
  X(pool)                   \
  X(block_cache)            \
  X(ir)                   \
  X(ops)                    \
  X(targets)                \
  X(nn)                     \
  X(attention_bf16)         \
  X(artifact)               \
  X(artifact_sym)           \
  X(gemm)                   \
  X(gemm_epilogue)          \
  X(gemm_bf16)              \
  X(gemm_bf16_compute)      \
  X(casts)                  \
  X(gemm_quant)             \
  X(gemm_q8a8)              \
  X(gemm_q4a8)              \
  X(gemm_quant_import)      \
  X(conv)                   \
  X(math)                   \
  X(random)                 \
  X(conv_grad)              \
  X(movement)               \
  X(sample)                 \
  X(fused)                  \
  X(artifact_plan)          \
  X(artifact_writes)        \
  X(token_sample)           \
  X(tokenizer)              \
  X(unicode_nfc)            \
  X(conv_planes)            \
  X(patterns)               \
  X(glu_joined)             \
  X(bf16_hold)              \
  X(gemm_bf16_rows)         \
  X(conv_nhwc)              \
  X(conv_nhwc_bf16)         \
  X(layout)                 \
  X(train_ops)              \
  X(sym)                    \
  X(api)                    \
  X(profile)                \
  X(gemm_grouped)                  \
  X(solve_triangular)

#define KILN_TEST_DECLARE(name) void kiln_test_suite_##name(void);
KILN_TEST_SUITES(KILN_TEST_DECLARE)

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
  kiln_test_print_cpu();
#define KILN_TEST_RUN(name)                                      \
  if (!filter || strstr(#name, filter)) {                        \
    int before = kiln_test_failed;                               \
    kiln_test_suite_##name();                                    \
    printf("suite %-16s %s\n", #name, kiln_test_failed == before ? "ok" : "FAILED"); \
  }
  KILN_TEST_SUITES(KILN_TEST_RUN)
  printf("%d passed, %d failed\n", kiln_test_passed, kiln_test_failed);
  return kiln_test_failed ? 1 : 0;
}
