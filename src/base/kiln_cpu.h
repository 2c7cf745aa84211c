/* CPU feature detection and the ISA level kernels dispatch on.
 *
 * Detected once per process (cpuid plus xgetbv, so that an OS that does not
 * save the wide registers rules the ISA out). KILN_ISA=generic|avx2|avx512
 * caps the level for testing; it can lower, never raise, what the CPU has.
 */
#ifndef KILN_CPU_H
#define KILN_CPU_H

typedef enum kiln_isa_e {
  KILN_ISA_GENERIC = 0, /* portable C */
  KILN_ISA_AVX2,        /* AVX2 + FMA + F16C */
  KILN_ISA_AVX512,      /* AVX-512 F/BW/DQ/VL */
  KILN_ISA_COUNT
} kiln_isa_t;

typedef struct kiln_cpu_features_s {
  int avx2_fma;
  int avx512;      /* F, BW, DQ, VL */
  int avx512_bf16;
  int avx512_vnni;
} kiln_cpu_features_t;

const kiln_cpu_features_t* kiln_cpu_features(void);
/* The level kernels use: the best the CPU has, capped by KILN_ISA. */
kiln_isa_t kiln_cpu_isa(void);
/* Overrides the level (tests); returns the level actually set, which is
 * capped at what the CPU supports. */
kiln_isa_t kiln_cpu_isa_set(kiln_isa_t isa);
const char* kiln_cpu_isa_name(kiln_isa_t isa);

#endif /* KILN_CPU_H */
