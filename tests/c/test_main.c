/* Runs every C test suite and prints the closing "N passed, N failed" line.
 * A suite is a function that makes KILN_EXPECT checks; add one line to the
 * table below for each. An optional argument runs only suites whose name
 * contains it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

#define KILN_TEST_SUITES(X) \
  X(status)                 \
  X(pool)                   \
  X(ir)                   \
  X(nn)                     \
  X(artifact)               \
  X(gemm)                   \
  X(conv)

#define KILN_TEST_DECLARE(name) void kiln_test_suite_##name(void);
KILN_TEST_SUITES(KILN_TEST_DECLARE)

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
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
