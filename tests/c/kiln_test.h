/* A tiny C test harness: checks count and report, never abort, so one run
 * prints every failure and ends with "N passed, N failed". */
#ifndef KILN_TEST_H
#define KILN_TEST_H

#include <math.h>
#include <stdio.h>

extern int kiln_test_passed, kiln_test_failed;

#define KILN_EXPECT(cond, ...)                                   \
  do {                                                           \
    if (cond) {                                                  \
      ++kiln_test_passed;                                        \
    } else {                                                     \
      ++kiln_test_failed;                                        \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                              \
      fputc('\n', stderr);                                       \
    }                                                            \
  } while (0)

/* Expects a call returning kiln_status_t to succeed; frees the status. */
#define KILN_EXPECT_OK(expr)                                               \
  do {                                                                     \
    kiln_status_t kiln_test_s__ = (expr);                                  \
    KILN_EXPECT(kiln_test_s__ == NULL, "%s", kiln_status_message(kiln_test_s__)); \
    kiln_status_free(kiln_test_s__);                                       \
  } while (0)

/* Expects failure with the given code; frees the status. */
#define KILN_EXPECT_ERROR(expr, code)                                      \
  do {                                                                     \
    kiln_status_t kiln_test_s__ = (expr);                                  \
    KILN_EXPECT(kiln_status_code(kiln_test_s__) == (code), "got %s: %s",   \
                kiln_status_code_name(kiln_status_code(kiln_test_s__)),    \
                kiln_status_message(kiln_test_s__));                       \
    kiln_status_free(kiln_test_s__);                                       \
  } while (0)

/* Max abs error of got vs want, scaled: |g - w| <= atol + rtol * |w|.
 * NaN must match NaN and infinities must match exactly. Returns the number
 * of mismatching elements (and reports the first). */
int kiln_test_compare_f32(const char* what, const float* got, const float* want, size_t n,
                          float atol, float rtol);

/* Runs fn(pool, where) at every ISA level this CPU supports, each with a
 * 1-thread and a 2-thread pool; `where` names the level and thread count
 * for failure messages. Restores the ISA level afterwards. */
struct kiln_pool_s;
void kiln_test_each_isa_and_pool(void (*fn)(struct kiln_pool_s* pool, const char* where));

/* test_nn.c's attention cases (fast against the scalar reference, and
 * against itself cut for other thread counts) at the running ISA level;
 * bf16: the args' bf16 rule, checked by kiln_test_attn_bf16_compare. */
void kiln_test_nn_attention_cases(struct kiln_pool_s* pool, const char* isa, int bf16);
/* bf16 attention against its reference, rows of `row` outputs
 * (test_attention_bf16.c says why these bounds): 0 when within them. */
int kiln_test_attn_bf16_compare(const char* what, const float* got, const float* want, size_t n,
                                size_t row);

/* Deterministic pseudo-random fill in [lo, hi). */
void kiln_test_fill_f32(float* x, size_t n, unsigned seed, float lo, float hi);

#endif /* KILN_TEST_H */
