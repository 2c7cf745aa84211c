/* Tensor data for the `kiln` command line: reading any kiln dtype as double
 * for statistics, writing deterministic pseudo-random inputs, and raw .bin
 * file I/O with exact size checks.
 *
 * f16 and bf16 are converted here in plain C rather than through the
 * kernels: the CLI touches a handful of values per tensor and must not
 * depend on kernel internals.
 */
#include "tools/kiln_cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

static float kiln_cli_f32_from_bits(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint32_t kiln_cli_f32_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* IEEE half to float, subnormals and Inf/NaN included. */
static float kiln_cli_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return kiln_cli_f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    /* Zero or subnormal: man × 2^-24, exact in float. */
    float v = (float)man * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return kiln_cli_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* Float to IEEE half, round to nearest even. Only used for values in
 * [-1, 1), but correct for the whole range so that nobody trips on it later. */
static uint16_t kiln_cli_f32_to_f16(float f) {
  uint32_t x = kiln_cli_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return sign;
    man |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++; /* may carry into Inf: right */
  return (uint16_t)(sign | half);
}

static uint16_t kiln_cli_f32_to_bf16(float f) {
  uint32_t x = kiln_cli_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

double kiln_cli_elem_get(kiln_dtype_t dtype, const void* data, size_t i) {
  const unsigned char* p = (const unsigned char*)data;
  switch (dtype) {
    case KILN_F32: {
      float v;
      memcpy(&v, p + i * 4, 4);
      return v;
    }
    case KILN_F16: {
      uint16_t v;
      memcpy(&v, p + i * 2, 2);
      return kiln_cli_f16_to_f32(v);
    }
    case KILN_BF16: {
      uint16_t v;
      memcpy(&v, p + i * 2, 2);
      return kiln_cli_f32_from_bits((uint32_t)v << 16);
    }
    case KILN_I64: {
      int64_t v;
      memcpy(&v, p + i * 8, 8);
      return (double)v;
    }
    case KILN_I32: {
      int32_t v;
      memcpy(&v, p + i * 4, 4);
      return v;
    }
    case KILN_I8: return (signed char)p[i];
    case KILN_U8: return p[i];
    case KILN_BOOL: return p[i] != 0;
    case KILN_DTYPE_COUNT: break;
  }
  return NAN;
}

uint64_t kiln_cli_splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void kiln_cli_fill_random(kiln_dtype_t dtype, void* data, size_t numel, uint64_t seed) {
  size_t esize = kiln_dtype_size(dtype);
  if (!kiln_dtype_is_float(dtype)) {
    memset(data, 0, numel * esize);
    return;
  }
  uint64_t state = seed;
  unsigned char* p = (unsigned char*)data;
  for (size_t i = 0; i < numel; ++i) {
    /* 24 random bits: every value exactly representable in f32, and the
     * grid is fine enough for the 16-bit types to round onto. */
    float v = (float)(kiln_cli_splitmix64(&state) >> 40) * (1.0f / 8388608.0f) - 1.0f;
    if (dtype == KILN_F32) {
      memcpy(p + i * 4, &v, 4);
    } else {
      uint16_t h = dtype == KILN_F16 ? kiln_cli_f32_to_f16(v) : kiln_cli_f32_to_bf16(v);
      /* Values just below 1 can round up to 1.0 in 16 bits: step back one
       * ulp so the documented half-open range [-1, 1) holds. */
      if (dtype == KILN_F16 && h == 0x3c00u) h = 0x3bffu;
      if (dtype == KILN_BF16 && h == 0x3f80u) h = 0x3f7fu;
      memcpy(p + i * 2, &h, 2);
    }
  }
}

void kiln_cli_stats_compute(kiln_dtype_t dtype, const void* data, size_t numel,
                            kiln_cli_stats_t* out) {
  memset(out, 0, sizeof(*out));
  double sum = 0.0;
  out->min = INFINITY;
  out->max = -INFINITY;
  for (size_t i = 0; i < numel; ++i) {
    double v = kiln_cli_elem_get(dtype, data, i);
    if (isnan(v)) {
      out->nan_count++;
      continue;
    }
    if (v < out->min) out->min = v;
    if (v > out->max) out->max = v;
    sum += v;
    out->finite_count++;
  }
  if (out->finite_count) {
    out->mean = sum / (double)out->finite_count;
  } else {
    out->min = out->max = out->mean = NAN;
  }
}

kiln_status_t kiln_cli_read_exact(const char* what, const char* path, void* data, size_t size) {
  FILE* f = fopen(path, "rb");
  if (!f)
    return kiln_status_make(KILN_IO_ERROR, "%s: cannot open '%s': %s", what, path,
                            strerror(errno));
  long end = -1;
  if (fseek(f, 0, SEEK_END) == 0) end = ftell(f);
  if (end < 0 || fseek(f, 0, SEEK_SET) != 0) {
    kiln_status_t s = kiln_status_make(KILN_IO_ERROR, "%s: cannot size '%s': %s", what, path,
                                       strerror(errno));
    fclose(f);
    return s;
  }
  if ((unsigned long)end != size) {
    fclose(f);
    return kiln_status_make(KILN_INVALID_ARGUMENT,
                            "%s: '%s' has %ld bytes, expected %zu (raw little-endian, dense)",
                            what, path, end, size);
  }
  size_t got = size ? fread(data, 1, size, f) : 0;
  int err = ferror(f);
  fclose(f);
  if (got != size || err)
    return kiln_status_make(KILN_IO_ERROR, "%s: reading '%s': got %zu of %zu bytes", what, path,
                            got, size);
  return kiln_ok();
}

kiln_status_t kiln_cli_write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return kiln_status_make(KILN_IO_ERROR, "cannot create '%s': %s", path, strerror(errno));
  size_t put = size ? fwrite(data, 1, size, f) : 0;
  /* fclose flushes: its failure (disk full) is a failed write too. */
  int bad = put != size || ferror(f);
  if (fclose(f) != 0) bad = 1;
  if (bad) return kiln_status_make(KILN_IO_ERROR, "writing '%s' failed", path);
  return kiln_ok();
}

kiln_status_t kiln_cli_ensure_dir(const char* path) {
  if (mkdir(path, 0777) == 0) return kiln_ok();
  int err = errno;
  struct stat st;
  if (err == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return kiln_ok();
  return kiln_status_make(KILN_IO_ERROR, "cannot create directory '%s': %s", path,
                          err == EEXIST ? "a file of that name exists" : strerror(err));
}

int kiln_cli_parse_int(const char* text, long long lo, long long hi, long long* out) {
  if (!text || !*text) return 0;
  char* end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (errno || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

kiln_status_t kiln_cli_read_text(const char* what, const char* path, size_t max, char** out,
                                 size_t* out_size) {
  *out = NULL;
  *out_size = 0;
  FILE* f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
  if (!f) return kiln_status_make(KILN_IO_ERROR, "cannot open %s '%s'", what, path);
  size_t size = 0, have = 4096;
  char* text = malloc(have + 1);
  kiln_status_t st = text ? NULL : kiln_status_make(KILN_OUT_OF_MEMORY, "reading %s '%s'", what, path);
  for (size_t got = 1; !st && got;) {
    if (size == have) {
      char* more = have < max ? realloc(text, 2 * have + 1) : NULL;
      if (!more) {
        st = have < max ? kiln_status_make(KILN_OUT_OF_MEMORY, "%s '%s' is too large for memory", what, path)
                        : kiln_status_make(KILN_INVALID_ARGUMENT, "%s '%s' is over %zu MiB", what, path, max >> 20);
        break;
      }
      text = more;
      have *= 2;
    }
    got = fread(text + size, 1, have - size, f);
    size += got;
  }
  if (!st && ferror(f)) st = kiln_status_make(KILN_IO_ERROR, "reading %s '%s' failed", what, path);
  if (f != stdin) fclose(f);
  if (st) {
    free(text);
    return st;
  }
  text[size] = '\0';
  *out = text;
  *out_size = size;
  return NULL;
}
