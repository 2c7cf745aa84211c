/* The ISA variants of kiln_random_f32 (kiln_random.h): compiled once per ISA
 * of the math family's list as kiln_random_range__generic, __avx2, ...
 * A group of 32 elements is 8 Philox blocks run side by side, one lane per
 * block: with AVX2 in intrinsics (VPMULUDQ gives the 32 x 32 -> 64-bit
 * products of 4 lanes; GCC does not vectorise the portable loop), elsewhere
 * in the portable loop. Both do kiln_philox4x32_10's arithmetic, so every
 * variant gives the reference's bits. */
#include <math.h>
#include <string.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "kernels/math/kiln_random_internal.h"

enum { KILN_RANDOM_GROUP = 32 };

#if defined(__AVX2__)
/* hi and lo 32 bits of the 8 products c * m. */
static inline void mulhilo8(__m256i c, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(c, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

/* words[8 j + l] = word j of block 8 group + l. */
static void philox_group(uint64_t seed, uint32_t stream, uint64_t group, uint32_t* words) {
  const uint64_t b0 = group * 8;
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32((int)(uint32_t)b0),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  /* b0 is a multiple of 8, so the low words never carry into the high. */
  __m256i c1 = _mm256_set1_epi32((int)(uint32_t)(b0 >> 32));
  __m256i c2 = _mm256_set1_epi32((int)stream), c3 = _mm256_setzero_si256();
  const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    __m256i hi0, lo0, hi1, lo1;
    mulhilo8(c0, m0, &hi0, &lo0);
    mulhilo8(c2, m1, &hi1, &lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32((int)k0));
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32((int)k1));
    c1 = lo1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  _mm256_storeu_si256((__m256i*)words, c0);
  _mm256_storeu_si256((__m256i*)(words + 8), c1);
  _mm256_storeu_si256((__m256i*)(words + 16), c2);
  _mm256_storeu_si256((__m256i*)(words + 24), c3);
}

/* y[k] = a + span * u for the 32 words of a group. */
static void uniform_group(const uint32_t* w, float a, float span, float* y) {
  const __m256 scale = _mm256_set1_ps(0x1p-24f), va = _mm256_set1_ps(a), vs = _mm256_set1_ps(span);
  for (int k = 0; k < KILN_RANDOM_GROUP; k += 8) {
    __m256i v = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i*)(w + k)), 8);
    __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(v), scale);
    _mm256_storeu_ps(y + k, _mm256_add_ps(va, _mm256_mul_ps(vs, u))); /* no FMA: the reference's rounding */
  }
}
#else
static void philox_group(uint64_t seed, uint32_t stream, uint64_t group, uint32_t* words) {
  uint32_t c0[8], c1[8], c2[8], c3[8];
  for (int l = 0; l < 8; ++l) {
    uint64_t b = group * 8 + (uint64_t)l;
    c0[l] = (uint32_t)b, c1[l] = (uint32_t)(b >> 32), c2[l] = stream, c3[l] = 0;
  }
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    for (int l = 0; l < 8; ++l) {
      uint64_t p0 = (uint64_t)0xD2511F53u * c0[l], p1 = (uint64_t)0xCD9E8D57u * c2[l];
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = (uint32_t)p1;
      c3[l] = (uint32_t)p0;
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  memcpy(words, c0, sizeof c0);
  memcpy(words + 8, c1, sizeof c1);
  memcpy(words + 16, c2, sizeof c2);
  memcpy(words + 24, c3, sizeof c3);
}

static void uniform_group(const uint32_t* w, float a, float span, float* y) {
  for (int k = 0; k < KILN_RANDOM_GROUP; ++k) y[k] = a + span * kiln_random_unit(w[k]);
}
#endif

/* Element r of a group: word r / 8 of lane r % 8, at words[r] (the layout
 * philox_group writes); its normal pair is the same lane's words 0, 1 or 2, 3. */
static float normal_element(const uint32_t* words, int r) {
  const int word = r / 8, lane = r % 8;
  return kiln_random_normal_of(words[(word & 2) * 8 + lane], words[(word | 1) * 8 + lane], word & 1);
}

void KILN_ISA_VARIANT(kiln_random_range)(kiln_random_dist_t dist, uint64_t seed, uint32_t stream,
                                         float a, float b, uint64_t first, size_t n, float* y) {
  uint32_t words[KILN_RANDOM_GROUP];
  const float span = b - a;
  const uint64_t end = first + n;
  for (uint64_t i = first; i < end;) {
    const uint64_t group = i / KILN_RANDOM_GROUP, g0 = group * KILN_RANDOM_GROUP;
    const uint64_t hi = g0 + KILN_RANDOM_GROUP < end ? g0 + KILN_RANDOM_GROUP : end;
    philox_group(seed, stream, group, words);
    float* out = y + (i - first);
    if (dist == KILN_RANDOM_UNIFORM && i == g0 && hi == g0 + KILN_RANDOM_GROUP) {
      uniform_group(words, a, span, out);
    } else {
      for (uint64_t e = i; e < hi; ++e) {
        const int r = (int)(e - g0);
        out[e - i] = dist == KILN_RANDOM_UNIFORM ? a + span * kiln_random_unit(words[r])
                                                 : a + b * normal_element(words, r);
      }
    }
    i = hi;
  }
}
