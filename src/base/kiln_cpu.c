/* cpuid/xgetbv probing (x86-64), getauxval(AT_HWCAP/AT_HWCAP2) on aarch64
 * Linux; other architectures report generic. */
#include "base/kiln_cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
static unsigned long long kiln_xgetbv0(void) {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
/* Linux's arch/arm64 hwcap bits (asm/hwcap.h), spelled out for older
 * headers. */
#define KILN_HWCAP_ASIMD (1ul << 1)
#define KILN_HWCAP_ASIMDDP (1ul << 20)
#define KILN_HWCAP_SVE (1ul << 22)
#define KILN_HWCAP2_I8MM (1ul << 13)
#define KILN_HWCAP2_BF16 (1ul << 14)
#endif

static kiln_cpu_features_t kiln_cpu_features_;
static kiln_isa_t kiln_cpu_max_isa_ = KILN_ISA_GENERIC;
static kiln_isa_t kiln_cpu_isa_ = KILN_ISA_GENERIC;
static unsigned kiln_cpu_max_bf16_ = 0, kiln_cpu_bf16_ = 0;
static pthread_once_t kiln_cpu_once_ = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
/* Linux (5.16+) keeps AMX's 8 KiB tile state off until a process asks for
 * it; a tile instruction before that faults (SIGILL). The request covers
 * every thread of the process, present and future. */
static int kiln_cpu_amx_permit(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
  const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
  return 0;
#endif
}
#endif

static void kiln_cpu_detect(void) {
  kiln_cpu_features_t* f = &kiln_cpu_features_;
  memset(f, 0, sizeof(*f));
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(0, &a, &b, &c, &d))
    f->intel = b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* "GenuineIntel" */
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    unsigned long long xcr0 = osxsave ? kiln_xgetbv0() : 0;
    int ymm_ok = (xcr0 & 0x6) == 0x6;
    int zmm_ok = (xcr0 & 0xe6) == 0xe6;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      int avx2 = (b >> 5) & 1;
      f->avx2_fma = ymm_ok && avx2 && fma && f16c;
      int avx512f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
      f->avx512 = zmm_ok && f->avx2_fma && avx512f && dq && bw && vl;
      f->avx512_vnni = f->avx512 && ((c >> 11) & 1);
      f->avx512_vbmi = f->avx512 && ((c >> 1) & 1);
      unsigned a1 = 0, b1, c1, d1;
      if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1))
        f->avx512_bf16 = f->avx512 && ((a1 >> 5) & 1);
      /* AMX: cpuid 7.0 EDX bits 24 (tile), 22 (bf16), 25 (int8); XCR0 bits
       * 17 (TILECFG) and 18 (TILEDATA) enabled by the OS; then permission. */
      int tile_ok = (xcr0 & 0x60000ull) == 0x60000ull;
      if (f->avx512 && tile_ok && ((d >> 24) & 1) && kiln_cpu_amx_permit()) {
        f->amx_tile = 1;
        f->amx_bf16 = (d >> 22) & 1;
        f->amx_int8 = (d >> 25) & 1;
      }
    }
  }
#endif
#if defined(__aarch64__)
#if defined(__linux__)
  unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
  f->neon = (hw & KILN_HWCAP_ASIMD) != 0;
  f->neon_dotprod = f->neon && (hw & KILN_HWCAP_ASIMDDP);
  f->sve = (hw & KILN_HWCAP_SVE) != 0;
  f->neon_i8mm = f->neon && (hw2 & KILN_HWCAP2_I8MM);
  f->neon_bf16 = f->neon && (hw2 & KILN_HWCAP2_BF16);
#elif defined(__ARM_NEON)
  f->neon = 1; /* the compiler's baseline */
#endif
#endif
  kiln_cpu_max_isa_ = f->avx512 ? KILN_ISA_AVX512 : f->avx2_fma ? KILN_ISA_AVX2
                    : f->neon ? KILN_ISA_NEON : KILN_ISA_GENERIC;
  kiln_cpu_max_bf16_ = (f->avx512_bf16 ? KILN_CPU_BF16_AVX512 : 0u) |
                       (f->amx_bf16 ? KILN_CPU_BF16_AMX : 0u);
  unsigned use = kiln_cpu_bf16_default(f);
  /* KILN_ISA lowers the maxima themselves, so nothing set later (a test's
   * kiln.isa("avx512")) can run past it. An unknown name caps nothing
   * (kiln_cpu_isa_env_known says so; Python warns). */
  int level;
  const char* env = getenv("KILN_ISA");
  if (env && kiln_cpu_isa_parse(env, &level)) {
    kiln_isa_t cap = level < 0 ? KILN_ISA_AVX512 : (kiln_isa_t)level;
    if (kiln_cpu_isa_rank(cap) < 0) cap = KILN_ISA_GENERIC; /* another architecture's */
    if (kiln_cpu_isa_rank(cap) < kiln_cpu_isa_rank(kiln_cpu_max_isa_)) kiln_cpu_max_isa_ = cap;
    kiln_cpu_max_bf16_ &= level == -2 ? ~0u : level == -1 ? (unsigned)KILN_CPU_BF16_AVX512 : 0u;
    if (level == -1) use = kiln_cpu_max_bf16_; /* asked for by name */
  }
  kiln_cpu_isa_ = kiln_cpu_max_isa_;
  /* The engines detected stay settable (kiln_cpu_bf16_set: the tests run
   * each); the default uses those worth using. */
  kiln_cpu_bf16_ = use & kiln_cpu_max_bf16_;
}

unsigned kiln_cpu_bf16_default(const kiln_cpu_features_t* f) {
  if (f->amx_bf16) return KILN_CPU_BF16_AMX | (f->avx512_bf16 ? KILN_CPU_BF16_AVX512 : 0u);
  return f->avx512_bf16 && !f->intel ? KILN_CPU_BF16_AVX512 : 0u;
}

int kiln_cpu_isa_parse(const char* name, int* out_level) {
  for (int i = 0; i < KILN_ISA_COUNT; ++i)
    if (!strcmp(name, kiln_cpu_isa_name((kiln_isa_t)i))) {
      *out_level = i;
      return 1;
    }
  if (!strcmp(name, "avx512_bf16") || !strcmp(name, "amx")) {
    *out_level = name[0] == 'a' && name[1] == 'm' ? -2 : -1;
    return 1;
  }
  return 0;
}

int kiln_cpu_isa_env_known(void) {
  const char* env = getenv("KILN_ISA");
  int level;
  return !env || !*env || kiln_cpu_isa_parse(env, &level);
}

unsigned kiln_cpu_bf16(void) {
  pthread_once(&kiln_cpu_once_, kiln_cpu_detect);
  return kiln_cpu_isa_ == KILN_ISA_AVX512 ? kiln_cpu_bf16_ : 0u;
}

unsigned kiln_cpu_bf16_set(unsigned mask) {
  pthread_once(&kiln_cpu_once_, kiln_cpu_detect);
  kiln_cpu_bf16_ = mask & kiln_cpu_max_bf16_;
  return kiln_cpu_bf16_;
}

const char* kiln_cpu_bf16_name(unsigned mask) {
  return (mask & KILN_CPU_BF16_AMX) ? "amx" : (mask & KILN_CPU_BF16_AVX512) ? "avx512_bf16" : "none";
}

const kiln_cpu_features_t* kiln_cpu_features(void) {
  pthread_once(&kiln_cpu_once_, kiln_cpu_detect);
  return &kiln_cpu_features_;
}

kiln_isa_t kiln_cpu_isa(void) {
  pthread_once(&kiln_cpu_once_, kiln_cpu_detect);
  return kiln_cpu_isa_;
}

kiln_isa_t kiln_cpu_isa_set(kiln_isa_t isa) {
  pthread_once(&kiln_cpu_once_, kiln_cpu_detect);
  if ((unsigned)isa >= KILN_ISA_COUNT || kiln_cpu_isa_rank(isa) < 0) isa = KILN_ISA_GENERIC;
  kiln_cpu_isa_ = kiln_cpu_isa_rank(isa) < kiln_cpu_isa_rank(kiln_cpu_max_isa_) ? isa
                                                                                 : kiln_cpu_max_isa_;
  return kiln_cpu_isa_;
}

const char* kiln_cpu_isa_name(kiln_isa_t isa) {
  static const char* const names[] = {"generic", "avx2", "avx512", "neon"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == KILN_ISA_COUNT, "one name per ISA");
  return (unsigned)isa < KILN_ISA_COUNT ? names[isa] : "unknown";
}

int kiln_cpu_isa_rank(kiln_isa_t isa) {
  switch (isa) {
    case KILN_ISA_GENERIC: return 0;
#if defined(__x86_64__) || defined(__i386__)
    case KILN_ISA_AVX2: return 1;
    case KILN_ISA_AVX512: return 2;
#elif defined(__aarch64__)
    case KILN_ISA_NEON: return 1;
#endif
    default: return -1;
  }
}
