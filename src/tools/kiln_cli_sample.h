/* Picking the next token from a step's logits, for `kiln generate`: greedy
 * or sampled, with the logits processors Hugging Face's generate() applies
 * and in its order: the repetition penalty, then the temperature, top-k and
 * top-p. Sampling is reproducible: one seed gives the same tokens on every
 * machine (the same stream, the same arithmetic); it cannot give
 * torch.multinomial's draws, whose generator is PyTorch's. */
#ifndef KILN_CLI_SAMPLE_H
#define KILN_CLI_SAMPLE_H

#include <stdint.h>

typedef struct kiln_cli_sampler_s {
  double temperature;        /* 0: greedy (the first maximum, torch.argmax's rule) */
  int64_t top_k;             /* keep the k most likely (and ties with the k-th); 0: all */
  double top_p;              /* keep the fewest most likely whose mass reaches p; 1: all */
  double repetition_penalty; /* > 1 makes a token seen so far less likely; 1: off */
  uint64_t rng;              /* the splitmix64 state: the seed */
  int64_t vocab;
  uint8_t* seen;             /* per token: in the prompt or generated (penalty only) */
  float* work;               /* per token: the processed logits */
  float* weight;             /* per token: exp((logit - max) / T), unnormalised */
  uint16_t* bucket;          /* per token: its band of log-weight (kiln_cli_sample.c) */
  int32_t* ids;              /* the candidates (tokens not at -inf) */
} kiln_cli_sampler_t;

/* Sets the tables for `vocab` tokens (the options stay as the caller set
 * them: temperature, top_k, top_p, repetition_penalty and rng). Returns 0
 * when out of memory (*s is then empty). */
int kiln_cli_sampler_initialize(kiln_cli_sampler_t* s, int64_t vocab);
void kiln_cli_sampler_deinitialize(kiln_cli_sampler_t* s);

/* Marks a token as seen (for the repetition penalty); ids outside the
 * vocabulary are ignored. */
void kiln_cli_sampler_see(kiln_cli_sampler_t* s, int64_t token);

/* The next token from logits[0..vocab). Greedy picks the first maximum,
 * a NaN counting as the largest (torch.argmax). Sampling returns -1 when
 * no token can be drawn: a NaN or +inf logit, or every one -inf (eager's
 * torch.multinomial refuses those too). */
int64_t kiln_cli_sampler_pick(kiln_cli_sampler_t* s, const float* logits);

#endif /* KILN_CLI_SAMPLE_H */
