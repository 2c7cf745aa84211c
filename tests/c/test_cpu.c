/* ISA levels across architectures (base/kiln_cpu.h): each architecture's
 * ladder, names that parse back to their level, a level of the other
 * architecture refused by kiln_cpu_isa_set, and features that belong to the
 * architecture the tests run on. Also the kernel families' variant lists
 * (kernels/kiln_isa_variant.h) and the rule that picks from them. */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "kernels/kiln_isa_variant.h"
#include "kiln_test.h"

void kiln_test_suite_cpu(void) {
  const kiln_cpu_features_t* f = kiln_cpu_features();
  kiln_isa_t start = kiln_cpu_isa();
  KILN_EXPECT(kiln_cpu_isa_rank(KILN_ISA_GENERIC) == 0, "generic is every ladder's first step");
  KILN_EXPECT(kiln_cpu_isa_rank(start) >= 0, "the level in use (%s) is this architecture's",
              kiln_cpu_isa_name(start));
  for (int level = 0; level < KILN_ISA_COUNT; ++level) {
    int got = -9;
    KILN_EXPECT(kiln_cpu_isa_parse(kiln_cpu_isa_name((kiln_isa_t)level), &got) && got == level,
                "%s parses back", kiln_cpu_isa_name((kiln_isa_t)level));
  }
#if defined(__x86_64__) || defined(__i386__)
  KILN_EXPECT(kiln_cpu_isa_rank(KILN_ISA_AVX2) == 1 && kiln_cpu_isa_rank(KILN_ISA_AVX512) == 2 &&
                  kiln_cpu_isa_rank(KILN_ISA_NEON) == -1,
              "x86 ladder: generic < avx2 < avx512; neon is not a step");
  KILN_EXPECT(!f->neon && !f->neon_dotprod && !f->neon_bf16 && !f->neon_i8mm && !f->sve,
              "no aarch64 features on x86");
#elif defined(__aarch64__)
  KILN_EXPECT(kiln_cpu_isa_rank(KILN_ISA_NEON) == 1 && kiln_cpu_isa_rank(KILN_ISA_AVX2) == -1 &&
                  kiln_cpu_isa_rank(KILN_ISA_AVX512) == -1,
              "aarch64 ladder: generic < neon; avx2 and avx512 are not steps");
  KILN_EXPECT(!f->avx2_fma && !f->avx512 && !f->avx512_bf16 && !f->amx_tile,
              "no x86 features on aarch64");
  /* ASIMD is baseline on aarch64 Linux: without a KILN_ISA cap, neon. */
  const char* env = getenv("KILN_ISA");
  if (!env || !*env) KILN_EXPECT(f->neon && start == KILN_ISA_NEON, "neon detected and in use");
  KILN_EXPECT(!f->neon_dotprod || f->neon, "dotprod implies asimd");
#endif
  for (int level = 0; level < KILN_ISA_COUNT; ++level) {
    kiln_isa_t isa = (kiln_isa_t)level, got = kiln_cpu_isa_set(isa);
    int rank = kiln_cpu_isa_rank(isa);
    if (rank < 0)
      KILN_EXPECT(got == KILN_ISA_GENERIC, "%s (another architecture's) sets generic, got %s",
                  kiln_cpu_isa_name(isa), kiln_cpu_isa_name(got));
    else if (rank <= kiln_cpu_isa_rank(start))
      KILN_EXPECT(got == isa, "%s can be set, got %s", kiln_cpu_isa_name(isa),
                  kiln_cpu_isa_name(got));
    else
      KILN_EXPECT(kiln_cpu_isa_rank(got) <= kiln_cpu_isa_rank(start) &&
                      kiln_cpu_isa_rank(got) >= 0,
                  "%s above the start is capped, got %s", kiln_cpu_isa_name(isa),
                  kiln_cpu_isa_name(got));
    KILN_EXPECT(got == KILN_ISA_AVX512 || kiln_cpu_bf16() == 0,
                "bf16 engines only at avx512 (at %s)", kiln_cpu_isa_name(got));
  }
  KILN_EXPECT(kiln_cpu_isa_set(start) == start, "the starting level restores");

  /* The default bf16 engines: AMX with VDPBF16PS beside it; VDPBF16PS alone
   * only off Intel (half the FMA rate there: slower than widening). */
  {
    kiln_cpu_features_t t;
    memset(&t, 0, sizeof t);
    KILN_EXPECT(kiln_cpu_bf16_default(&t) == 0, "no bf16 feature: no engine");
    t.avx512_bf16 = 1;
    KILN_EXPECT(kiln_cpu_bf16_default(&t) == KILN_CPU_BF16_AVX512, "AMD's VDPBF16PS is used");
    t.intel = 1;
    KILN_EXPECT(kiln_cpu_bf16_default(&t) == 0, "Intel's VDPBF16PS alone is not");
    t.amx_tile = t.amx_bf16 = 1;
    KILN_EXPECT(kiln_cpu_bf16_default(&t) == (KILN_CPU_BF16_AMX | KILN_CPU_BF16_AVX512),
                "Intel with AMX granted: both");
    const char* env = getenv("KILN_ISA");
    unsigned detected = (f->avx512_bf16 ? KILN_CPU_BF16_AVX512 : 0u) |
                        (f->amx_bf16 ? KILN_CPU_BF16_AMX : 0u);
    if ((!env || !*env) && start == KILN_ISA_AVX512)
      KILN_EXPECT(kiln_cpu_bf16() == kiln_cpu_bf16_default(f), "this CPU's default engines (%s)",
                  kiln_cpu_bf16_name(kiln_cpu_bf16()));
    /* Every engine detected can still be chosen (the kernels' tests run each). */
    unsigned was = kiln_cpu_bf16();
    KILN_EXPECT(env && *env ? 1 : kiln_cpu_bf16_set(~0u) == detected,
                "the detected engines can be set");
    kiln_cpu_bf16_set(was);
  }

  /* Every family has a generic variant and only this architecture's
   * levels; each level runs the family's highest variant at or below it. */
  const unsigned arch = KILN_ISA_VARIANT_MASK(KILN_ISA_LEVELS);
  const struct {
    const char* name;
    unsigned mask;
  } families[] = {
#define KILN_TEST_FAMILY_(LIST) {#LIST, KILN_ISA_VARIANT_MASK(LIST)},
      KILN_TEST_FAMILY_(KILN_NN_ISAS) KILN_TEST_FAMILY_(KILN_MATH_ISAS)
          KILN_TEST_FAMILY_(KILN_CONV_ISAS) KILN_TEST_FAMILY_(KILN_ELTWISE_ISAS)
              KILN_TEST_FAMILY_(KILN_GEMM_ISAS) KILN_TEST_FAMILY_(KILN_GEMM_QUANT_ISAS)
                  KILN_TEST_FAMILY_(KILN_GEMM_Q8A8_ISAS)};
  for (size_t fi = 0; fi < sizeof families / sizeof families[0]; ++fi) {
    unsigned m = families[fi].mask;
    KILN_EXPECT((m & 1u) && (m & ~arch) == 0, "%s: generic and this architecture's levels only",
                families[fi].name);
    for (int level = 0; level < KILN_ISA_COUNT; ++level) {
      if (!(arch >> level & 1u)) continue;
      kiln_isa_t got = kiln_isa_variant_level(m, (kiln_isa_t)level);
      int best = 0;
      for (int l = 0; l <= level; ++l)
        if (m >> l & 1u) best = l;
      KILN_EXPECT((int)got == best, "%s at %s runs %s", families[fi].name,
                  kiln_cpu_isa_name((kiln_isa_t)level), kiln_cpu_isa_name(got));
    }
  }
#if defined(__x86_64__) || defined(__i386__)
  /* The rule itself, on a list of generic and avx2 (as gemm_q8a8's). */
  KILN_EXPECT(kiln_isa_variant_level((1u << KILN_ISA_GENERIC) | (1u << KILN_ISA_AVX2),
                                     KILN_ISA_AVX512) == KILN_ISA_AVX2,
              "a family without avx512 runs its avx2 variant at avx512");
#endif
}
