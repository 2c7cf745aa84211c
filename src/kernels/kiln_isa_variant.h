/* ISA variants of kernels: one way to name them, one list per family, one
 * rule to pick them (the manner of XNNPACK's f32_gemm_ukernel_6x16__avx2).
 *
 * A kernel family's variant sources are compiled once per ISA, each build
 * in its own static library with only that ISA's flags and
 * -DKILN_ISA_SUFFIX=__<isa> (src/kernels/meson.build, the one loop that
 * builds every family). Inside such a file, KILN_ISA_VARIANT(kiln_nn_unary)
 * names this build's variant, kiln_nn_unary__avx2 in the avx2 build; files
 * written for one ISA (intrinsics) spell their names out instead:
 * kiln_<dtype>_<op>_<tile>__<isa>, e.g. kiln_f32_gemm_ukernel_6x16__avx2.
 * KILN_ISA_VARIANT is defined only in a variant build, so a file of the
 * core that uses it by mistake does not compile.
 *
 * The lists come from the same meson loop (kernels/kiln_isa_lists.h,
 * generated): KILN_<FAMILY>_ISAS(X, a) expands X(isa, LEVEL, a) for each
 * ISA level the family has a variant for on this architecture, e.g.
 * X(generic, GENERIC, a) X(avx2, AVX2, a); KILN_ISA_LEVELS(X, a) lists the
 * architecture's levels. Declarations, dispatch tables and the tests'
 * per-level loop are expanded from them, so adding an ISA to a family is
 * one word in its meson.build plus the kernels.
 *
 * The rule (kiln_isa_variant_level): a family runs the variant of the
 * highest level it has at or below kiln_cpu_isa() (itself capped by
 * KILN_ISA), so a family without an avx512 variant runs its avx2 one on an
 * AVX-512 CPU. Every family has a generic variant.
 */
#ifndef KILN_ISA_VARIANT_H
#define KILN_ISA_VARIANT_H

#include "base/kiln_cpu.h"
#include "kernels/kiln_isa_lists.h"

#define KILN_ISA_CAT2_(a, b) a##b
#define KILN_ISA_CAT_(a, b) KILN_ISA_CAT2_(a, b)
#ifdef KILN_ISA_SUFFIX
#define KILN_ISA_VARIANT(name) KILN_ISA_CAT_(name, KILN_ISA_SUFFIX)
#endif

/* The levels a family list names, as a mask of (1 << level). */
#define KILN_ISA_BIT_(isa, LEVEL, unused) | (1u << KILN_ISA_##LEVEL)
#define KILN_ISA_VARIANT_MASK(LIST) (0u LIST(KILN_ISA_BIT_, ~))

/* The initializer of a table indexed by level: { [KILN_ISA_AVX2] =
 * name__avx2, ... } for the levels of LIST (name may start with &). */
#define KILN_ISA_ENTRY_(isa, LEVEL, name) [KILN_ISA_##LEVEL] = name##__##isa,
#define KILN_ISA_VARIANT_TABLE(LIST, name) {LIST(KILN_ISA_ENTRY_, name)}

/* The level whose variant runs at `level`: the highest level of `mask` at
 * or below it. A list holds the levels of one architecture only, and each
 * architecture's levels ascend in enum order (kiln_cpu.h), so "below" is a
 * comparison of enum values here. */
static inline kiln_isa_t kiln_isa_variant_level(unsigned mask, kiln_isa_t level) {
  /* Another architecture's level (a caller naming one explicitly, as the
   * bf16 engines' driver names avx512) has no variant here. */
  if (!(KILN_ISA_VARIANT_MASK(KILN_ISA_LEVELS) >> level & 1u)) return KILN_ISA_GENERIC;
  unsigned m = mask & ((2u << level) - 1u);
  int l = 0;
  while (m >>= 1) ++l;
  return (kiln_isa_t)l;
}

#endif /* KILN_ISA_VARIANT_H */
