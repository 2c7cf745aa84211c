/* Private to kernels/math's random numbers: the per-ISA range functions
 * (kiln_random.c, compiled once per ISA of KILN_MATH_ISAS) and the one
 * Box-Muller step the variants and the reference share. */
#ifndef KILN_RANDOM_INTERNAL_H
#define KILN_RANDOM_INTERNAL_H

#include <math.h>

#include "kernels/kiln_isa_variant.h"
#include "kernels/math/kiln_random.h"

/* The normal number of words w0, w1 (a block's pair): its cos (second 0)
 * or sin (second 1) element. */
static inline float kiln_random_normal_of(uint32_t w0, uint32_t w1, int second) {
  const float u1 = (float)((w0 >> 8) + 1u) * 0x1p-24f; /* (0, 1]: log is finite */
  const float u2 = kiln_random_unit(w1);
  const float r = sqrtf(-2.0f * logf(u1));
  const float t = 6.2831853071795864769f * u2;
  return r * (second ? sinf(t) : cosf(t));
}

#define KILN_RANDOM_DECLARE_(isa, LEVEL, unused)                                             \
  void kiln_random_range__##isa(kiln_random_dist_t dist, uint64_t seed, uint32_t stream,     \
                                float a, float b, uint64_t first, size_t n, float* y);
KILN_MATH_ISAS(KILN_RANDOM_DECLARE_, ~)

#endif /* KILN_RANDOM_INTERNAL_H */
