/* CPU feature detection and the ISA level kernels dispatch on.
 *
 * Detected once per process (cpuid plus xgetbv, so that an OS that does not
 * save the wide registers rules the ISA out). KILN_ISA=generic|avx2|avx512
 * caps the level for testing; it can lower, never raise, what the CPU has,
 * and is a hard cap: kiln_cpu_isa_set and kiln_cpu_bf16_set cannot go past
 * it. An unknown name caps nothing (kiln_cpu_isa_env_known() is then 0).
 *
 * bf16 compute engines are a separate mask beside the level (they are not a
 * step up in one ladder: Zen 4 has avx512_bf16 without AMX, and the fp32
 * kernels never use them): KILN_CPU_BF16_AVX512 (VDPBF16PS) and
 * KILN_CPU_BF16_AMX (AMX-BF16 tiles, only once Linux granted this process
 * the tile state with arch_prctl(ARCH_REQ_XCOMP_PERM); refused: no AMX).
 * kiln_cpu_bf16() is the mask in use: by default kiln_cpu_bf16_default()'s
 * choice among the engines detected, capped by KILN_ISA, and 0 whenever the
 * level is below avx512. KILN_ISA accepts two more names: "avx512_bf16"
 * (level avx512, VDPBF16PS and no AMX, even where the default would not
 * use it) and "amx" (everything the default uses); plain "avx512" turns
 * both bf16 engines off.
 *
 * Each architecture has its own ladder of levels: x86 generic < avx2 <
 * avx512, aarch64 generic < neon (from getauxval(AT_HWCAP/AT_HWCAP2)). A
 * level of the other architecture is never detected, kiln_cpu_isa_set
 * refuses it (it sets generic), and as KILN_ISA it caps at generic; so an
 * x86 dispatch (== KILN_ISA_AVX512, >= KILN_ISA_AVX2) can never see neon
 * on x86, and aarch64 builds compile the x86 dispatches out (KILN_HAVE_X86).
 * Compare levels with kiln_cpu_isa_rank, not their enum values, when both
 * ladders matter.
 */
#ifndef KILN_CPU_H
#define KILN_CPU_H

typedef enum kiln_isa_e {
  KILN_ISA_GENERIC = 0, /* portable C */
  KILN_ISA_AVX2,        /* AVX2 + FMA + F16C */
  KILN_ISA_AVX512,      /* AVX-512 F/BW/DQ/VL */
  KILN_ISA_NEON,        /* aarch64 ASIMD (Advanced SIMD, baseline on aarch64) */
  KILN_ISA_COUNT
} kiln_isa_t;

typedef struct kiln_cpu_features_s {
  int avx2_fma;
  int avx512;      /* F, BW, DQ, VL */
  int avx512_bf16;
  int avx512_vnni;
  int avx512_vbmi; /* VPERMB: any byte of a zmm from any (the int8 kernels' transposes) */
  int amx_tile, amx_bf16, amx_int8; /* cpuid, XCR0 bits 17/18, and the OS's permission */
  int intel;                        /* cpuid's vendor is GenuineIntel */
  /* aarch64 (getauxval): ASIMD, SDOT/UDOT, BFDOT/BFMMLA, SMMLA/UMMLA, SVE. */
  int neon, neon_dotprod, neon_bf16, neon_i8mm, sve;
} kiln_cpu_features_t;

#define KILN_CPU_BF16_AVX512 1u /* avx512_bf16: VDPBF16PS */
#define KILN_CPU_BF16_AMX 2u    /* AMX-BF16: TDPBF16PS on tiles */

const kiln_cpu_features_t* kiln_cpu_features(void);
/* The level kernels use: the best the CPU has, capped by KILN_ISA. */
kiln_isa_t kiln_cpu_isa(void);
/* Overrides the level (tests); returns the level actually set, which is
 * capped at what the CPU supports and KILN_ISA allows. */
kiln_isa_t kiln_cpu_isa_set(kiln_isa_t isa);
const char* kiln_cpu_isa_name(kiln_isa_t isa);
/* The level's step in this architecture's ladder (generic 0, avx2 1,
 * avx512 2 on x86; generic 0, neon 1 on aarch64), -1 for a level of
 * another architecture. */
int kiln_cpu_isa_rank(kiln_isa_t isa);

/* The bf16 engines kernels may use (KILN_CPU_BF16_* bits). */
unsigned kiln_cpu_bf16(void);
/* The engines of features f that kiln uses unless told otherwise: AMX where
 * it is granted, with VDPBF16PS beside it; VDPBF16PS alone only off Intel.
 * An Intel core runs VDPBF16PS at half its fp32 FMA rate (a Xeon with AMX
 * here: 114-118 against 228-236 GFLOP/s a core), so where its AMX is absent
 * or refused (a VM that hides the tile state, a kernel before 5.16) bf16
 * products widened to fp32 are the faster engine; AMD's Zen 4 and Zen 5 run
 * it at about twice their FMA rate (Zen 5: 474 against 261). Pure: any
 * features may be asked about. */
unsigned kiln_cpu_bf16_default(const kiln_cpu_features_t* f);
/* Overrides the mask (tests); returns the mask actually set, which is
 * capped at what the CPU (and OS) support and KILN_ISA allows. */
unsigned kiln_cpu_bf16_set(unsigned mask);
/* "amx", "avx512_bf16", or "none": the best engine in a mask. */
const char* kiln_cpu_bf16_name(unsigned mask);

/* Parses a KILN_ISA name: 1 and *out_level = the kiln_isa_t for a level's
 * name, -1 for "avx512_bf16", -2 for "amx"; 0 for an unknown name. */
int kiln_cpu_isa_parse(const char* name, int* out_level);
/* 0 when KILN_ISA is set to a name kiln_cpu_isa_parse does not know. */
int kiln_cpu_isa_env_known(void);

#endif /* KILN_CPU_H */
