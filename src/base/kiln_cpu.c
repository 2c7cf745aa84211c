/* cpuid/xgetbv probing (x86-64); other architectures report generic. */
#include "base/kiln_cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static unsigned long long kiln_xgetbv0(void) {
  unsigned eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return ((unsigned long long)edx << 32) | eax;
}
#endif

static kiln_cpu_features_t kiln_cpu_features_;
static kiln_isa_t kiln_cpu_max_isa_ = KILN_ISA_GENERIC;
static kiln_isa_t kiln_cpu_isa_ = KILN_ISA_GENERIC;
static pthread_once_t kiln_cpu_once_ = PTHREAD_ONCE_INIT;

static void kiln_cpu_detect(void) {
  kiln_cpu_features_t* f = &kiln_cpu_features_;
  memset(f, 0, sizeof(*f));
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
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
      unsigned a1 = 0, b1, c1, d1;
      if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1))
        f->avx512_bf16 = f->avx512 && ((a1 >> 5) & 1);
    }
  }
#endif
  kiln_cpu_max_isa_ = f->avx512 ? KILN_ISA_AVX512 : f->avx2_fma ? KILN_ISA_AVX2 : KILN_ISA_GENERIC;
  kiln_cpu_isa_ = kiln_cpu_max_isa_;
  const char* env = getenv("KILN_ISA");
  if (env) {
    for (int i = 0; i < KILN_ISA_COUNT; ++i)
      if (!strcmp(env, kiln_cpu_isa_name((kiln_isa_t)i)) && i < (int)kiln_cpu_isa_)
        kiln_cpu_isa_ = (kiln_isa_t)i;
  }
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
  if ((unsigned)isa >= KILN_ISA_COUNT) isa = KILN_ISA_GENERIC;
  kiln_cpu_isa_ = isa < kiln_cpu_max_isa_ ? isa : kiln_cpu_max_isa_;
  return kiln_cpu_isa_;
}

const char* kiln_cpu_isa_name(kiln_isa_t isa) {
  static const char* const names[] = {"generic", "avx2", "avx512"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == KILN_ISA_COUNT, "one name per ISA");
  return (unsigned)isa < KILN_ISA_COUNT ? names[isa] : "unknown";
}
