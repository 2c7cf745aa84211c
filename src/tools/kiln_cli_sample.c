/* The token picker of `kiln generate` (kiln_cli_sample.h has the rules).
 *
 * A token's weight is exp((logit - max) / T); the kept tokens' sum
 * normalises the draw (no division per token). top-k and top-p keep a
 * prefix of the tokens ordered most likely first (ties: the lower id
 * first, so the order, and a seeded draw, are the same everywhere), but
 * sorting 32-150 K tokens per step would cost milliseconds, as much as the
 * step. So the tokens are first spread over bands of log-weight
 * (KILN_SAMPLE_BANDS equal bands of the key (max - logit) / T, the last
 * one open-ended), each band's count and mass summed: the bands above the
 * one where the count reaches k (or the mass reaches p) are kept whole,
 * and only the tokens of that boundary band are sorted. Bands are
 * monotone in the logit, so this keeps exactly the prefix a full sort
 * would; a step costs O(vocabulary + boundary band log band), ~0.1 ms at
 * 32 K tokens (one expf each). The draw walks the kept tokens in any fixed
 * order: the probabilities, not the order, define it. */
#include "tools/kiln_cli_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tools/kiln_cli.h"

#define KILN_SAMPLE_BANDS 1024
/* Keys (natural-log weight below the most likely token's) per band: 64
 * covers weights down to e^-64 ~ 1.6e-28 in bands of 1/16. */
#define KILN_SAMPLE_RANGE 64.0

int kiln_cli_sampler_initialize(kiln_cli_sampler_t* s, int64_t vocab) {
  size_t n = vocab > 0 ? (size_t)vocab : 1;
  s->vocab = vocab;
  s->seen = calloc(n, 1);
  s->work = malloc(n * sizeof(float));
  s->weight = malloc(n * sizeof(float));
  s->bucket = malloc(n * sizeof(uint16_t));
  s->ids = malloc(n * sizeof(int32_t));
  if (s->seen && s->work && s->weight && s->bucket && s->ids) return 1;
  kiln_cli_sampler_deinitialize(s);
  return 0;
}

void kiln_cli_sampler_deinitialize(kiln_cli_sampler_t* s) {
  free(s->seen);
  free(s->work);
  free(s->weight);
  free(s->bucket);
  free(s->ids);
  s->seen = NULL;
  s->work = NULL;
  s->weight = NULL;
  s->bucket = NULL;
  s->ids = NULL;
}

void kiln_cli_sampler_see(kiln_cli_sampler_t* s, int64_t token) {
  if (token >= 0 && token < s->vocab) s->seen[token] = 1;
}

/* torch.argmax's choice: the first maximum, a NaN counting as the largest. */
static int64_t kiln_sample_argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (isnan(x[i])) return i;
    if (x[i] > x[best]) best = i;
  }
  return best;
}

/* Token a is more likely than b (ties: the lower id first). */
static int kiln_sample_before(const float* w, int32_t a, int32_t b) {
  return w[a] > w[b] || (w[a] == w[b] && a < b);
}

static void kiln_sample_sift(const float* w, int32_t* h, int64_t n, int64_t i) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && kiln_sample_before(w, h[c + 1], h[c])) ++c;
    if (!kiln_sample_before(w, h[c], h[i])) return;
    int32_t t = h[i];
    h[i] = h[c];
    h[c] = t;
    i = c;
  }
}

/* Heapsort of ids[0..n), least likely first: the most likely ends at
 * ids[n - 1] (read the order backwards). */
static void kiln_sample_sort(const float* w, int32_t* ids, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; --i) kiln_sample_sift(w, ids, n, i);
  for (int64_t k = n - 1; k > 0; --k) {
    int32_t t = ids[0];
    ids[0] = ids[k];
    ids[k] = t;
    kiln_sample_sift(w, ids, k, 0);
  }
}

/* Moves the ids whose band passes keep() to the front; returns how many. */
static int64_t kiln_sample_partition(const uint16_t* band, int32_t* ids, int64_t n, int below,
                                     int at) {
  int64_t front = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int b = band[ids[i]];
    if (below ? b < at : b == at) {
      int32_t t = ids[front];
      ids[front++] = ids[i];
      ids[i] = t;
    }
  }
  return front;
}

int64_t kiln_cli_sampler_pick(kiln_cli_sampler_t* s, const float* logits) {
  float* w = s->work;
  const int64_t vocab = s->vocab;
  /* Hugging Face's RepetitionPenaltyLogitsProcessor, in float32 as there. */
  const float pen = (float)s->repetition_penalty;
  if (!(s->temperature > 0)) {
    if (pen == 1.0f) return kiln_sample_argmax(logits, vocab);
    for (int64_t i = 0; i < vocab; ++i)
      w[i] = s->seen[i] ? (logits[i] < 0 ? logits[i] * pen : logits[i] / pen) : logits[i];
    return kiln_sample_argmax(w, vocab);
  }
  /* The processed logits, and the candidates (every token not at -inf)
   * in id order. */
  int32_t* ids = s->ids;
  int64_t n = 0;
  float m = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    float x = logits[i];
    if (pen != 1.0f && s->seen[i]) x = x < 0 ? x * pen : x / pen;
    w[i] = x;
    if (!(x > -INFINITY)) {
      if (x != x) return -1; /* NaN */
      continue;
    }
    if (x == INFINITY) return -1;
    ids[n++] = (int32_t)i;
    m = x > m ? x : m;
  }
  if (!n) return -1;
  const double inv_t = 1.0 / s->temperature, per_band = KILN_SAMPLE_BANDS / KILN_SAMPLE_RANGE;
  const int cut = s->top_k > 0 || s->top_p < 1;
  /* top-k needs only the counts: weights for the kept tokens, later. */
  const int all_weights = s->top_k <= 0;
  int64_t count[KILN_SAMPLE_BANDS];
  double mass[KILN_SAMPLE_BANDS], total = 0;
  if (cut) {
    memset(count, 0, sizeof count);
    memset(mass, 0, sizeof mass);
  }
  for (int64_t j = 0; j < n; ++j) {
    const int32_t t = ids[j];
    const double key = ((double)m - (double)w[t]) * inv_t; /* >= 0 */
    if (all_weights) {
      s->weight[t] = expf((float)-key);
      total += s->weight[t];
    }
    if (!cut) continue;
    const double b = key * per_band;
    const int band = b < KILN_SAMPLE_BANDS - 1 ? (int)b : KILN_SAMPLE_BANDS - 1;
    s->bucket[t] = (uint16_t)band;
    count[band]++;
    if (all_weights) mass[band] += s->weight[t];
  }
  /* The kept tokens: ids[0..whole) in any order, then ids[first..first +
   * kept) in order, most likely first read backwards from the end of the
   * sorted run (see kiln_sample_sort). */
  int64_t whole = 0, run = 0, kept = 0;
  int32_t* sorted = ids; /* the sorted run, ids[0..run) */
  double keep_mass = total;
  if (!cut) {
    whole = n;
  } else if (s->top_k > 0) {
    /* The band where the count reaches k; everything up to it, sorted,
     * gives the k-th token, and the ones tied with it. */
    int band = 0;
    for (int64_t c = 0; band < KILN_SAMPLE_BANDS - 1 && (c += count[band]) < s->top_k;) ++band;
    run = kiln_sample_partition(s->bucket, ids, n, 1, band + 1);
    kiln_sample_sort(w, ids, run);
    kept = s->top_k < run ? s->top_k : run;
    while (kept < run && w[ids[run - 1 - kept]] == w[ids[run - kept]]) ++kept;
    keep_mass = 0;
    for (int64_t j = 0; j < kept; ++j) {
      const int32_t t = ids[run - 1 - j];
      keep_mass += s->weight[t] = expf((float)(((double)w[t] - (double)m) * inv_t));
    }
    if (s->top_p < 1) {
      /* top-p over what top-k kept, renormalised as generate()'s chain
       * does: a token stays while the mass before it is below p. */
      const double limit = s->top_p * keep_mass;
      double before = 0;
      int64_t j = 0;
      while (j < kept && (j == 0 || before < limit)) before += s->weight[ids[run - 1 - j++]];
      kept = j;
      keep_mass = before;
    }
  } else {
    /* top-p alone: the bands above the one where the mass reaches p stay
     * whole; that band is sorted and cut. */
    const double limit = s->top_p * total;
    double above = 0;
    int band = 0;
    while (band < KILN_SAMPLE_BANDS - 1 && (!count[band] || above + mass[band] < limit))
      above += mass[band++];
    whole = kiln_sample_partition(s->bucket, ids, n, 1, band);
    sorted = ids + whole;
    run = kiln_sample_partition(s->bucket, sorted, n - whole, 0, band);
    kiln_sample_sort(w, sorted, run);
    double before = above;
    int64_t j = 0;
    while (j < run && ((whole == 0 && j == 0) || before < limit)) before += s->weight[sorted[run - 1 - j++]];
    kept = j;
    keep_mass = before;
  }
  const double u = (double)(kiln_cli_splitmix64(&s->rng) >> 11) * 0x1.0p-53; /* [0, 1) */
  double r = u * keep_mass, cum = 0;
  int32_t last = -1;
  for (int64_t j = 0; j < whole; ++j) {
    cum += s->weight[last = ids[j]];
    if (r < cum) return last;
  }
  for (int64_t j = 0; j < kept; ++j) {
    cum += s->weight[last = sorted[run - 1 - j]];
    if (r < cum) return last;
  }
  return last; /* r within rounding of the mass */
}
