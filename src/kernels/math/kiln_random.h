/* Random numbers for dropout and torch.rand / randn inside compiled graphs.
 *
 * A counter-based generator, Philox4x32-10 (Salmon, Moraes, Dror and Shaw,
 * "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the generator of
 * cuRAND, JAX and PyTorch's CUDA kernels): element i of a tensor is a pure
 * function of (seed, stream, i), so the result does not depend on the
 * thread count, the ISA variant or how the work is split, and any range of
 * elements can be made without the ones before it.
 *
 * Elements come in groups of 32 made from 8 blocks, so that a vector of 8
 * lanes holds 8 consecutive elements (kiln_random_block, _word): element i
 * (group g = i / 32, r = i % 32) takes word r / 8 of block 8 g + r % 8,
 * philox(counter = (lo32(block), hi32(block), stream, 0), key =
 * (lo32(seed), hi32(seed))), and becomes
 *   UNIFORM  a + (b - a) * u with u = (word >> 8) * 2^-24, in [0, 1) on a
 *            grid of 2^-24 as torch's float32 uniform;
 *   NORMAL   a + b * z, z from Box-Muller on its block's word pair (words
 *            0, 1 or 2, 3): u1 = ((w0 >> 8) + 1) * 2^-24 in (0, 1], u2 =
 *            (w1 >> 8) * 2^-24, r = sqrt(-2 ln u1), z = r cos(2 pi u2) for
 *            the even word's element, r sin(2 pi u2) for the odd one's.
 * The numbers are kiln's own: eager PyTorch's CPU generator (MT19937) draws
 * others from the same torch.manual_seed (as Inductor's do).
 */
#ifndef KILN_RANDOM_H
#define KILN_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"

typedef enum kiln_random_dist_e {
  KILN_RANDOM_UNIFORM = 0,
  KILN_RANDOM_NORMAL = 1,
  KILN_RANDOM_DIST_COUNT
} kiln_random_dist_t;

/* One Philox4x32-10 block: out = philox(ctr, key). */
static inline void kiln_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                      uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* The block and word element i is made from (see above). */
static inline uint64_t kiln_random_block(uint64_t i) { return i / 32 * 8 + i % 8; }
static inline int kiln_random_word(uint64_t i) { return (int)(i % 32 / 8); }

/* A word's uniform in [0, 1) (24 bits, exact in float32). */
static inline float kiln_random_unit(uint32_t w) { return (float)(w >> 8) * 0x1p-24f; }

/* y[i] for i < n: the float32 numbers of dist (parameters a, b as above)
 * for elements first .. first + n - 1 of (seed, stream). Shared over the
 * pool in whole blocks; the running ISA's variant. */
void kiln_random_f32(kiln_random_dist_t dist, uint64_t seed, uint32_t stream, float a, float b,
                     size_t n, float* y, kiln_pool_t* pool);

/* The scalar reference: each element's block through kiln_philox4x32_10. */
void kiln_random_f32_reference(kiln_random_dist_t dist, uint64_t seed, uint32_t stream, float a,
                               float b, size_t n, float* y);

#endif /* KILN_RANDOM_H */
