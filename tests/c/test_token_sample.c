/* Tests of `kiln generate`'s token picker (src/tools/kiln_cli_sample.c):
 * greedy as torch.argmax, the repetition penalty as Hugging Face applies
 * it, and seeded draws whose frequencies match the distribution the
 * temperature, top-k and top-p define, worked out here in double from the
 * rules (HF's: top-k keeps ties with the k-th, top-p applies to what top-k
 * kept, renormalised). A fixed seed makes every count the same on every run
 * and machine; the bounds (5 standard deviations) say the stream is not
 * merely repeatable but right. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kiln_test.h"
#include "tools/kiln_cli_sample.h"

#define DRAWS 200000

/* Draws DRAWS tokens and checks each frequency against want[] (the exact
 * probabilities; 0 means never). */
static void expect_frequencies(kiln_cli_sampler_t* s, const float* logits, const double* want,
                               const char* what) {
  int64_t count[64] = {0}, bad = 0;
  for (int i = 0; i < DRAWS; ++i) {
    int64_t t = kiln_cli_sampler_pick(s, logits);
    if (t < 0 || t >= s->vocab) ++bad;
    else ++count[t];
  }
  KILN_EXPECT(bad == 0, "%s: %lld draws out of the vocabulary", what, (long long)bad);
  for (int64_t t = 0; t < s->vocab; ++t) {
    const double f = (double)count[t] / DRAWS, p = want[t];
    const double tol = 5 * sqrt(p * (1 - p) / DRAWS) + 1e-9;
    if (p == 0)
      KILN_EXPECT(count[t] == 0, "%s: token %lld drawn %lld times, should never be", what,
                  (long long)t, (long long)count[t]);
    else
      KILN_EXPECT(fabs(f - p) <= tol, "%s: token %lld drawn at %.5f, want %.5f +- %.5f", what,
                  (long long)t, f, p, tol);
  }
}

/* softmax(logits / t) over the tokens in keep (all when NULL), in double. */
static void softmax_ref(const float* logits, int n, double t, const int* keep, double* p) {
  double m = -INFINITY, z = 0;
  for (int i = 0; i < n; ++i)
    if ((!keep || keep[i]) && logits[i] > m) m = logits[i];
  for (int i = 0; i < n; ++i) {
    p[i] = (!keep || keep[i]) && logits[i] > -INFINITY ? exp((logits[i] - m) / t) : 0;
    z += p[i];
  }
  for (int i = 0; i < n; ++i) p[i] /= z;
}

static void make(kiln_cli_sampler_t* s, int64_t vocab, double t, int64_t k, double p,
                 uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->temperature = t;
  s->top_k = k;
  s->top_p = p;
  s->repetition_penalty = 1;
  s->rng = seed;
  KILN_EXPECT(kiln_cli_sampler_initialize(s, vocab), "sampler tables for %lld tokens",
              (long long)vocab);
}

static void test_greedy_and_penalty(void) {
  kiln_cli_sampler_t s;
  make(&s, 4, 0, 0, 1, 0);
  const float a[4] = {1, 3, 3, 2};
  KILN_EXPECT(kiln_cli_sampler_pick(&s, a) == 1, "greedy: the first maximum");
  const float b[4] = {1, 3, NAN, NAN};
  KILN_EXPECT(kiln_cli_sampler_pick(&s, b) == 2, "greedy: the first NaN (torch.argmax)");
  /* HF's penalty: a seen token's positive logit divided, a negative one
   * multiplied; greedy sees it too. */
  s.repetition_penalty = 1.2;
  const float c[4] = {2.0f, 1.9f, -5, -5};
  kiln_cli_sampler_see(&s, 0);
  kiln_cli_sampler_see(&s, 99); /* outside the vocabulary: ignored */
  KILN_EXPECT(kiln_cli_sampler_pick(&s, c) == 1, "penalty: 2.0 / 1.2 < 1.9");
  const float d[4] = {-1.0f, -1.1f, -5, -5};
  KILN_EXPECT(kiln_cli_sampler_pick(&s, d) == 1, "penalty: -1.0 * 1.2 < -1.1");
  kiln_cli_sampler_deinitialize(&s);
  /* A temperature near 0 samples the maximum. */
  make(&s, 4, 1e-4, 0, 1, 3);
  int64_t other = 0;
  for (int i = 0; i < 1000; ++i) other += kiln_cli_sampler_pick(&s, c) != 0;
  KILN_EXPECT(other == 0, "temperature 1e-4: %lld draws were not the maximum", (long long)other);
  kiln_cli_sampler_deinitialize(&s);
}

static void test_distributions(void) {
  const float logits[8] = {0.5f, -1.0f, 2.0f, 1.25f, -INFINITY, 0.0f, 2.0f, -3.0f};
  double p[8];
  kiln_cli_sampler_t s;
  /* The whole distribution, at two temperatures; -inf is never drawn. */
  const double temps[2] = {1.0, 0.6};
  for (int k = 0; k < 2; ++k) {
    make(&s, 8, temps[k], 0, 1, 11 + (uint64_t)k);
    softmax_ref(logits, 8, temps[k], NULL, p);
    expect_frequencies(&s, logits, p, k ? "temperature 0.6" : "temperature 1");
    kiln_cli_sampler_deinitialize(&s);
  }
  /* top-k 2: the two tied at 2.0; top-k 3 adds 1.25. */
  int keep2[8] = {0, 0, 1, 0, 0, 0, 1, 0}, keep3[8] = {0, 0, 1, 1, 0, 0, 1, 0};
  make(&s, 8, 0.8, 2, 1, 5);
  softmax_ref(logits, 8, 0.8, keep2, p);
  expect_frequencies(&s, logits, p, "top-k 2");
  kiln_cli_sampler_deinitialize(&s);
  make(&s, 8, 0.8, 3, 1, 6);
  softmax_ref(logits, 8, 0.8, keep3, p);
  expect_frequencies(&s, logits, p, "top-k 3");
  kiln_cli_sampler_deinitialize(&s);
  /* top-k 1 with ties keeps both (HF removes only scores below the k-th). */
  make(&s, 8, 1, 1, 1, 7);
  softmax_ref(logits, 8, 1, keep2, p);
  expect_frequencies(&s, logits, p, "top-k 1, tied");
  kiln_cli_sampler_deinitialize(&s);
}

static void test_top_p(void) {
  /* Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1. */
  const float logits[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
  kiln_cli_sampler_t s;
  struct {
    int64_t k;
    double top_p;
    int kept; /* the most likely `kept` tokens stay */
    const char* what;
  } cases[] = {
      {0, 0.75, 2, "top-p 0.75: 0.5 + 0.3 reach it"},
      {0, 0.81, 3, "top-p 0.81: 0.8 falls short, 0.15 joins"},
      {0, 0.3, 1, "top-p 0.3: the first alone"},
      {0, 1e-9, 1, "top-p tiny: at least one token"},
      /* top-k 3 then top-p: the mass before the third is 0.8 / 0.95 =
       * 0.842 once renormalised, above 0.82: two stay (three without the
       * renormalisation). */
      {3, 0.82, 2, "top-k 3, top-p 0.82 (renormalised)"},
      {3, 0.85, 3, "top-k 3, top-p 0.85"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int keep[4];
    double p[4];
    for (int i = 0; i < 4; ++i) keep[i] = i < cases[c].kept;
    make(&s, 4, 1, cases[c].k, cases[c].top_p, 100 + c);
    softmax_ref(logits, 4, 1, keep, p);
    expect_frequencies(&s, logits, p, cases[c].what);
    kiln_cli_sampler_deinitialize(&s);
  }
}

static void test_repeatable_and_refusals(void) {
  enum { V = 50000 };
  static float logits[V];
  uint64_t x = 12345;
  for (int i = 0; i < V; ++i) { /* a deterministic spread of logits */
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    logits[i] = (float)((double)(x >> 40) / (double)(1 << 24) * 8.0 - 4.0);
  }
  /* The 40 largest, by a plain count. */
  kiln_cli_sampler_t a, b;
  make(&a, V, 1.0, 40, 0.9, 42);
  make(&b, V, 1.0, 40, 0.9, 42);
  int64_t differ = 0, outside = 0;
  for (int i = 0; i < 300; ++i) {
    int64_t ta = kiln_cli_sampler_pick(&a, logits), tb = kiln_cli_sampler_pick(&b, logits);
    differ += ta != tb;
    if (ta < 0) {
      ++outside;
      continue;
    }
    int64_t above = 0;
    for (int j = 0; j < V; ++j) above += logits[j] > logits[ta];
    outside += above >= 40;
  }
  KILN_EXPECT(differ == 0, "one seed, one stream: %lld draws differ", (long long)differ);
  KILN_EXPECT(outside == 0, "top-k 40 over 50000 tokens: %lld draws outside the 40", (long long)outside);
  kiln_cli_sampler_deinitialize(&b);
  make(&b, V, 1.0, 40, 0.9, 43);
  differ = 0;
  for (int i = 0; i < 200; ++i) differ += kiln_cli_sampler_pick(&a, logits) != kiln_cli_sampler_pick(&b, logits);
  KILN_EXPECT(differ > 0, "seeds 42 and 43 drew the same 200 tokens");
  kiln_cli_sampler_deinitialize(&a);
  kiln_cli_sampler_deinitialize(&b);
  /* Nothing to draw from: NaN, +inf, all -inf (torch.multinomial refuses these). */
  kiln_cli_sampler_t s;
  make(&s, 3, 1, 0, 1, 0);
  const float nan_[3] = {0, NAN, 1}, inf_[3] = {0, INFINITY, 1},
              none[3] = {-INFINITY, -INFINITY, -INFINITY};
  KILN_EXPECT(kiln_cli_sampler_pick(&s, nan_) == -1, "a NaN logit");
  KILN_EXPECT(kiln_cli_sampler_pick(&s, inf_) == -1, "a +inf logit");
  KILN_EXPECT(kiln_cli_sampler_pick(&s, none) == -1, "every logit -inf");
  s.top_k = 2;
  KILN_EXPECT(kiln_cli_sampler_pick(&s, none) == -1, "every logit -inf, top-k");
  kiln_cli_sampler_deinitialize(&s);
}

void kiln_test_suite_token_sample(void) {
  test_greedy_and_penalty();
  test_distributions();
  test_top_p();
  test_repeatable_and_refusals();
}
