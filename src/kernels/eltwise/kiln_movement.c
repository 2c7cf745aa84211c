/* Data movement: strided copy (every view op materialised), where, cast and
 * gather. Copies move bytes by element size, so one loop serves every dtype. */
#include <math.h>
#include <string.h>

#include "base/kiln_bf16.h"
#include "kernels/eltwise/kiln_cast_bf16_variants.h"
#include "kernels/eltwise/kiln_nd.h"
#include "kernels/eltwise/kiln_transpose_variants.h"

typedef struct {
  char* out;
  const char* x;
  size_t size;
} kiln_copy_ctx_t;

static void kiln_copy_row(void* p, int64_t n, const int64_t* off, const int64_t* st) {
  const kiln_copy_ctx_t* c = p;
  char* out = c->out + off[0] * (int64_t)c->size;
  const char* x = c->x + off[1] * (int64_t)c->size;
  if (st[1] == 1 && st[0] == 1) {
    memcpy(out, x, (size_t)n * c->size);
    return;
  }
  int64_t so = st[0], sx = st[1];
  switch (c->size) {
    case 4: {
      float* o = (float*)out;
      const float* xi = (const float*)x;
      for (int64_t i = 0; i < n; ++i) o[i * so] = xi[i * sx];
      break;
    }
    case 8: {
      int64_t* o = (int64_t*)out;
      const int64_t* xi = (const int64_t*)x;
      for (int64_t i = 0; i < n; ++i) o[i * so] = xi[i * sx];
      break;
    }
    case 2: {
      uint16_t* o = (uint16_t*)out;
      const uint16_t* xi = (const uint16_t*)x;
      for (int64_t i = 0; i < n; ++i) o[i * so] = xi[i * sx];
      break;
    }
    default:
      for (int64_t i = 0; i < n; ++i) out[i * so] = x[i * sx];
  }
}

typedef struct {
  float* out;
  const float* x;
  int64_t f;
} kiln_copy_repeat_ctx_t;

/* out[i f + k] = x[i] for k < f (a row of a repeating strided copy). */
static void kiln_copy_repeat_row(void* p, int64_t n, const int64_t* off, const int64_t* st) {
  (void)st; /* f apart in the output, 1 in the input: kiln_strided_copy checked */
  const kiln_copy_repeat_ctx_t* c = p;
  float* o = c->out + off[0];
  const float* xi = c->x + off[1];
  const int64_t f = c->f;
  if (f == 2) {
    for (int64_t i = 0; i < n; ++i) o[2 * i] = o[2 * i + 1] = xi[i];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < f; ++k) o[i * f + k] = xi[i];
}

/* A transpose (the input's unit stride on an output dim other than the
 * last) moves 32×32 tiles: row by row it would touch a new cache line (and
 * often a new page) for every element read. The unit-stride dim is moved
 * second-last first, so that attention's (b h, d, s) -> (s, b h, d)
 * permutes tile like plain (d, s) -> (s, d) ones (row by row they ran at
 * 2 GB/s). */
#define KILN_TILE 32

typedef struct {
  const kiln_nd_t* nd; /* collapsed; the last two dims are the tiled ones */
  char* out;
  const char* x;
  size_t size;
  int64_t row_blocks;
} kiln_transpose_ctx_t;

/* Through an L1 buffer: contiguous reads along i into it, then contiguous
 * writes along j out of it. Writing straight from the reads would store a
 * column of the tile, lines orow elements apart; at a power-of-two row
 * (8 KiB in attention's permutes) those lines all fall in one L1 set. */
#define KILN_TRANSPOSE_READ(T)                                              \
  T* bt = (T*)buf;                                                          \
  for (int64_t j = j0; j < j1; ++j)                                         \
    for (int64_t i = i0; i < i1; ++i)                                       \
      bt[(j - j0) * KILN_TILE + (i - i0)] = ((const T*)xi)[i + j * xcol];
#define KILN_TRANSPOSE_TILE(T)                                              \
  do {                                                                      \
    KILN_TRANSPOSE_READ(T)                                                  \
    for (int64_t i = i0; i < i1; ++i)                                       \
      for (int64_t j = j0; j < j1; ++j)                                     \
        ((T*)o)[i * orow + j] = bt[(j - j0) * KILN_TILE + (i - i0)];        \
  } while (0)

void kiln_transpose_f32(const void* x, int64_t ld, int64_t ni, int64_t nj, void* o, int64_t orow) {
  static void (*const variants[KILN_ISA_COUNT])(const int32_t*, int64_t, int64_t, int64_t, int32_t*,
                                                int64_t) =
      KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_transpose_tile_f32);
  variants[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_ELTWISE_ISAS), kiln_cpu_isa())](
      x, ld, ni, nj, o, orow);
}

static void kiln_transpose_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_transpose_ctx_t* c = p;
  const kiln_nd_t* nd = c->nd;
  int32_t r = nd->rank;
  int64_t rows = nd->shape[r - 2], cols = nd->shape[r - 1], xcol = nd->strides[1][r - 1];
  int64_t orow = nd->strides[0][r - 2]; /* the output is dense: its last stride is 1 */
  int64_t lead = (int64_t)task / c->row_blocks, i0 = (int64_t)task % c->row_blocks * KILN_TILE;
  int64_t i1 = i0 + KILN_TILE < rows ? i0 + KILN_TILE : rows;
  int64_t oo = 0, ox = 0;
  for (int32_t d = r - 3; d >= 0; --d) {
    int64_t idx = lead % nd->shape[d];
    lead /= nd->shape[d];
    oo += idx * nd->strides[0][d];
    ox += idx * nd->strides[1][d];
  }
  char* o = c->out + oo * (int64_t)c->size;
  const char* xi = c->x + ox * (int64_t)c->size;
  _Alignas(64) int64_t buf[KILN_TILE * KILN_TILE];
  for (int64_t j0 = 0; j0 < cols; j0 += KILN_TILE) {
    int64_t j1 = j0 + KILN_TILE < cols ? j0 + KILN_TILE : cols;
    switch (c->size) {
      case 8: KILN_TRANSPOSE_TILE(int64_t); break;
      case 4: {
        KILN_TRANSPOSE_READ(int32_t)
        /* The write half in registers (kiln_transpose.c: 8x8 blocks). */
        kiln_transpose_f32(bt, KILN_TILE, i1 - i0, j1 - j0, (int32_t*)(void*)o + i0 * orow + j0, orow);
        break;
      }
      case 2: KILN_TRANSPOSE_TILE(int16_t); break;
      default: KILN_TRANSPOSE_TILE(int8_t); break;
    }
  }
}

void kiln_strided_copy(kiln_dtype_t dtype, const kiln_nd_t* nd_in, void* out, const void* x,
                       kiln_pool_t* pool) {
  kiln_copy_ctx_t c = {out, x, kiln_dtype_size(dtype)};
  kiln_nd_t nd = *nd_in;
  kiln_nd_collapse(&nd, 2);
  int32_t r = nd.rank;
  int32_t unit = -1; /* an output dim before the last where the input is contiguous */
  for (int32_t d = 0; r >= 2 && d < r - 1; ++d)
    if (nd.strides[1][d] == 1 && nd.shape[d] >= 8) unit = d;
  if (unit >= 0 && nd.strides[1][r - 1] != 1 && nd.strides[0][r - 1] == 1 &&
      nd.shape[r - 1] >= 8) {
    /* Move the unit-stride dim to second-last (strides say where every
     * element goes, so the loop order of the others is free). */
    for (int k = 0; k < 2; ++k) {
      int64_t st = nd.strides[k][unit];
      for (int32_t d = unit; d < r - 2; ++d) nd.strides[k][d] = nd.strides[k][d + 1];
      nd.strides[k][r - 2] = st;
    }
    int64_t sh = nd.shape[unit];
    for (int32_t d = unit; d < r - 2; ++d) nd.shape[d] = nd.shape[d + 1];
    nd.shape[r - 2] = sh;
    int64_t lead = 1;
    for (int32_t d = 0; d < r - 2; ++d) lead *= nd.shape[d];
    kiln_transpose_ctx_t t = {&nd, out, x, c.size, (nd.shape[r - 2] + KILN_TILE - 1) / KILN_TILE};
    kiln_pool_parallel_for(pool, (size_t)(lead * t.row_blocks), kiln_transpose_task, &t);
    return;
  }
  if (r >= 2 && c.size == 4 && nd.strides[1][r - 1] == 0 && nd.strides[0][r - 1] == 1 &&
      nd.strides[1][r - 2] == 1 && nd.strides[0][r - 2] == nd.shape[r - 1] &&
      nd.shape[r - 1] <= 16) {
    /* Each element of a contiguous run repeated f times (nearest
     * upsampling by f, repeat_interleave): rows of the run, each element
     * written f times, where rows of f elements each cost a call. */
    kiln_copy_repeat_ctx_t rc = {out, x, nd.shape[r - 1]};
    nd.rank = r - 1;
    kiln_nd_for_rows(&nd, 2, kiln_copy_repeat_row, &rc, pool);
    return;
  }
  kiln_nd_for_rows(&nd, 2, kiln_copy_row, &c, pool);
}

typedef struct {
  char* out;
  const uint8_t* cond;
  const char* a;
  const char* b;
  size_t size;
} kiln_where_ctx_t;

static void kiln_where_row(void* p, int64_t n, const int64_t* off, const int64_t* st) {
  const kiln_where_ctx_t* c = p;
  size_t size = c->size;
  char* out = c->out + off[0] * (int64_t)size;
  const uint8_t* cond = c->cond + off[1];
  const char* a = c->a + off[2] * (int64_t)size;
  const char* b = c->b + off[3] * (int64_t)size;
  if (size == 4) {
    /* Dense rows and a scalar arm (a mask's fill) get loops of their own
     * with both arms loaded, so they vectorise into blends; with the
     * strides as variables the select stayed a branch (tril over 1024 x
     * 1024 took 0.6 ms). */
    float* o = (float*)out;
    const float *fa = (const float*)a, *fb = (const float*)b;
    if (st[1] == 1 && st[2] == 1 && (st[3] == 1 || st[3] == 0)) {
      if (st[3] == 1) {
        for (int64_t i = 0; i < n; ++i) {
          float u = fa[i], v = fb[i];
          o[i] = cond[i] ? u : v;
        }
      } else {
        const float v = fb[0];
        for (int64_t i = 0; i < n; ++i) {
          float u = fa[i];
          o[i] = cond[i] ? u : v;
        }
      }
      return;
    }
    if (st[1] == 1 && st[2] == 0 && st[3] == 1) {
      const float u = fa[0];
      for (int64_t i = 0; i < n; ++i) {
        float v = fb[i];
        o[i] = cond[i] ? u : v;
      }
      return;
    }
    for (int64_t i = 0; i < n; ++i) o[i] = cond[i * st[1]] ? fa[i * st[2]] : fb[i * st[3]];
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    memcpy(out + i * (int64_t)size,
           cond[i * st[1]] ? a + i * st[2] * (int64_t)size : b + i * st[3] * (int64_t)size, size);
}

void kiln_where(kiln_dtype_t dtype, const kiln_nd_t* nd_in, void* out, const uint8_t* cond,
                const void* a, const void* b, kiln_pool_t* pool) {
  kiln_where_ctx_t c = {out, cond, a, b, kiln_dtype_size(dtype)};
  kiln_nd_t nd = *nd_in;
  kiln_nd_collapse(&nd, 4);
  kiln_nd_for_rows(&nd, 4, kiln_where_row, &c, pool);
}

/* Reads element i of x as double (exact for every type but large int64,
 * which converts through int64 directly below). */
static double kiln_load_f64(kiln_dtype_t t, const void* x, size_t i) {
  switch (t) {
    case KILN_F32: return ((const float*)x)[i];
    case KILN_I64: return (double)((const int64_t*)x)[i];
    case KILN_I32: return ((const int32_t*)x)[i];
    case KILN_I8: return ((const int8_t*)x)[i];
    case KILN_U8: return ((const uint8_t*)x)[i];
    case KILN_BOOL: return ((const uint8_t*)x)[i] != 0;
    case KILN_F16: {
      uint16_t h = ((const uint16_t*)x)[i];
      uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
      float f;
      if (exp == 0) {
        f = ldexpf((float)man, -24);
        if (sign) f = -f;
        return f;
      }
      uint32_t bits = sign | ((exp == 31 ? 255 : exp + 112) << 23) | (man << 13);
      memcpy(&f, &bits, 4);
      return f;
    }
    case KILN_BF16: {
      uint32_t bits = (uint32_t)((const uint16_t*)x)[i] << 16;
      float f;
      memcpy(&f, &bits, 4);
      return f;
    }
    default: return 0;
  }
}

static uint16_t kiln_f32_to_f16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000;
  float a = fabsf(f);
  if (a != a) return (uint16_t)(sign | 0x7e00);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
  if (a < 6.103515625e-05f) /* subnormal: round to a multiple of 2^-24 */
    return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
  uint32_t e = ((bits >> 23) & 0xff) - 112, m = bits & 0x7fffff;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rest = m & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

/* float32 -> bfloat16: the variant of kiln_cast_bf16.c for the running
 * ISA level (checked on every call, as kiln_binary's). */
void kiln_cast_f32_to_bf16(size_t n, const float* x, uint16_t* y) {
  static void (*const variants[KILN_ISA_COUNT])(size_t, const float*,
                                                uint16_t*) =
      KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_cast_f32_to_bf16);
  variants[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_ELTWISE_ISAS), kiln_cpu_isa())](n, x,
                                                                                          y);
}

void kiln_round_bf16_f32(size_t n, const float* x, float* y) {
  static void (*const variants[KILN_ISA_COUNT])(size_t, const float*,
                                                float*) =
      KILN_ISA_VARIANT_TABLE(KILN_ELTWISE_ISAS, kiln_round_bf16_f32);
  variants[kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_ELTWISE_ISAS), kiln_cpu_isa())](n, x,
                                                                                          y);
}

/* bfloat16 -> float32: a shift, which GCC vectorises in the core. */
static void kiln_cast_bf16_to_f32(size_t n, const uint16_t* x, float* y) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = (uint32_t)x[i] << 16;
    memcpy(&y[i], &bits, 4);
  }
}

typedef struct {
  kiln_dtype_t from, to;
  size_t n, per_task;
  const char* x;
  char* y;
} kiln_cast_ctx_t;

static void kiln_cast_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_cast_ctx_t* c = p;
  size_t i0 = task * c->per_task, len = c->n - i0 < c->per_task ? c->n - i0 : c->per_task;
  kiln_cast(c->from, c->to, len, c->x + i0 * kiln_dtype_size(c->from),
            c->y + i0 * kiln_dtype_size(c->to));
}

void kiln_cast_parallel(kiln_dtype_t from, kiln_dtype_t to, size_t n, const void* x, void* y,
                        kiln_pool_t* pool) {
  const size_t chunk = (size_t)1 << 15;
  if (n <= chunk || !pool) {
    kiln_cast(from, to, n, x, y);
    return;
  }
  kiln_cast_ctx_t c = {from, to, n, chunk, x, y};
  kiln_pool_parallel_for(pool, (n + chunk - 1) / chunk, kiln_cast_task, &c);
}

void kiln_cast(kiln_dtype_t from, kiln_dtype_t to, size_t n, const void* x, void* y) {
  if (from == to) {
    memcpy(y, x, n * kiln_dtype_size(from));
    return;
  }
  if (from == KILN_F32 && to == KILN_BF16) {
    kiln_cast_f32_to_bf16(n, x, y);
    return;
  }
  if (from == KILN_BF16 && to == KILN_F32) {
    kiln_cast_bf16_to_f32(n, x, y);
    return;
  }
  if ((from == KILN_BOOL || from == KILN_U8) && to == KILN_F32) {
    /* A mask made a multiplier (dropout's, in both passes): a loop the
     * compiler vectorises, not the general path's per-element switch. */
    const uint8_t* b = x;
    float* f = y;
    if (from == KILN_BOOL)
      for (size_t i = 0; i < n; ++i) f[i] = b[i] ? 1.0f : 0.0f;
    else
      for (size_t i = 0; i < n; ++i) f[i] = (float)b[i];
    return;
  }
  if ((from == KILN_BOOL || from == KILN_U8 || from == KILN_I8 || from == KILN_I32) &&
      (to == KILN_I64 || (to == KILN_I32 && from != KILN_I32))) {
    /* Integer widenings (a mask's count: bool -> int64 before a sum), exact:
     * typed loops, where the per-element switch through double took 2 ms
     * for 786 K bools. A bool is 1 when its byte is not 0, as the
     * general path reads it. */
#define KILN_CAST_WIDEN(TF, TT)                                      \
  for (size_t i = 0; i < n; ++i) ((TT*)y)[i] = (TT)((const TF*)x)[i]; \
  return
    if (from == KILN_BOOL) {
      const uint8_t* b = x;
      if (to == KILN_I64)
        for (size_t i = 0; i < n; ++i) ((int64_t*)y)[i] = b[i] != 0;
      else
        for (size_t i = 0; i < n; ++i) ((int32_t*)y)[i] = b[i] != 0;
      return;
    }
    if (to == KILN_I64) {
      if (from == KILN_I32) { KILN_CAST_WIDEN(int32_t, int64_t); }
      if (from == KILN_I8) { KILN_CAST_WIDEN(int8_t, int64_t); }
      KILN_CAST_WIDEN(uint8_t, int64_t);
    }
    if (from == KILN_I8) { KILN_CAST_WIDEN(int8_t, int32_t); }
    KILN_CAST_WIDEN(uint8_t, int32_t);
#undef KILN_CAST_WIDEN
  }
  for (size_t i = 0; i < n; ++i) {
    /* int64 -> int64-ish targets keep all bits. */
    if (from == KILN_I64 && to != KILN_F32 && to != KILN_F16 && to != KILN_BF16) {
      int64_t v = ((const int64_t*)x)[i];
      switch (to) {
        case KILN_I32: ((int32_t*)y)[i] = (int32_t)v; break;
        case KILN_I8: ((int8_t*)y)[i] = (int8_t)v; break;
        case KILN_U8: ((uint8_t*)y)[i] = (uint8_t)v; break;
        case KILN_BOOL: ((uint8_t*)y)[i] = v != 0; break;
        default: break;
      }
      continue;
    }
    double v = kiln_load_f64(from, x, i);
    switch (to) {
      case KILN_F32: ((float*)y)[i] = (float)v; break;
      case KILN_F16: ((uint16_t*)y)[i] = kiln_f32_to_f16((float)v); break;
      case KILN_BF16: ((uint16_t*)y)[i] = kiln_bf16_from_f32((float)v); break;
      /* Float to int truncates toward zero, as torch; out-of-range and NaN
       * are undefined in torch too, so clamp them rather than invoke C UB. */
      case KILN_I64: ((int64_t*)y)[i] = v != v ? 0 : v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v; break;
      case KILN_I32: ((int32_t*)y)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v; break;
      case KILN_I8: ((int8_t*)y)[i] = (int8_t)(int32_t)(v != v ? 0 : v > 1e9 ? 0 : v < -1e9 ? 0 : v); break;
      case KILN_U8: ((uint8_t*)y)[i] = (uint8_t)(int32_t)(v != v ? 0 : v > 1e9 ? 0 : v < -1e9 ? 0 : v); break;
      case KILN_BOOL: ((uint8_t*)y)[i] = v != 0; break;
      default: break;
    }
  }
}

typedef struct {
  size_t elem;
  const char* table;
  int64_t axis_len, inner, n_index;
  const void* index;
  kiln_dtype_t index_dtype;
  char* out;
  int64_t rows_per; /* outer rows a task copies */
  int64_t outer;
  int64_t bad[64]; /* per thread; threads beyond 64 fold into slot 63 */
} kiln_gather_ctx_t;

/* Single elements (the gathered axis is the last: nearest upsampling's
 * columns, an index_select along the last dim), typed: a memcpy call per
 * 4-byte element had made an upsample of (2, 64, 56, 56) by 2 take 4 ms. */
#define KILN_GATHER_SCALARS(T)                                                     \
  do {                                                                            \
    const T* src = (const T*)c->table + o * c->axis_len;                          \
    T* dst = (T*)c->out + o * c->n_index;                                         \
    int64_t bad = 0;                                                              \
    for (int64_t j = 0; j < c->n_index; ++j) {                                    \
      int64_t idx = i64 ? ((const int64_t*)c->index)[j] : ((const int32_t*)c->index)[j]; \
      if (idx < 0) idx += c->axis_len;                                            \
      const int in = idx >= 0 && idx < c->axis_len;                               \
      dst[j] = in ? src[in ? idx : 0] : (T)0;                                     \
      bad += !in;                                                                 \
    }                                                                             \
    c->bad[thread < 64 ? thread : 63] += bad;                                     \
  } while (0)

static void kiln_gather_row(kiln_gather_ctx_t* c, int64_t o, int thread) {
  const int i64 = c->index_dtype == KILN_I64;
  if (c->inner == 1 && c->elem == 4) {
    KILN_GATHER_SCALARS(uint32_t);
    return;
  }
  if (c->inner == 1 && c->elem == 8) {
    KILN_GATHER_SCALARS(uint64_t);
    return;
  }
  size_t row_bytes = (size_t)c->inner * c->elem;
  for (int64_t j = 0; j < c->n_index; ++j) {
    int64_t idx = c->index_dtype == KILN_I64 ? ((const int64_t*)c->index)[j]
                                             : ((const int32_t*)c->index)[j];
    if (idx < 0) idx += c->axis_len;
    char* dst = c->out + ((size_t)(o * c->n_index + j)) * row_bytes;
    if (idx < 0 || idx >= c->axis_len) {
      memset(dst, 0, row_bytes);
      c->bad[thread < 64 ? thread : 63]++;
      continue;
    }
    memcpy(dst, c->table + ((size_t)(o * c->axis_len + idx)) * row_bytes, row_bytes);
  }
}

/* A task copies rows_per outer rows: one row a task had cost the pool's
 * hand-out per row of a few hundred bytes. */
static void kiln_gather_task(void* p, size_t task, int thread) {
  kiln_gather_ctx_t* c = p;
  const int64_t o0 = (int64_t)task * c->rows_per;
  const int64_t o1 = o0 + c->rows_per < c->outer ? o0 + c->rows_per : c->outer;
  for (int64_t o = o0; o < o1; ++o) kiln_gather_row(c, o, thread);
}

int64_t kiln_gather(size_t elem_size, const void* table, int64_t outer, int64_t axis_len,
                    int64_t inner, const void* index, kiln_dtype_t index_dtype, int64_t n_index,
                    void* out, kiln_pool_t* pool) {
  kiln_gather_ctx_t c;
  memset(&c, 0, sizeof(c));
  c.elem = elem_size;
  c.table = table;
  c.axis_len = axis_len;
  c.inner = inner;
  c.n_index = n_index;
  c.index = index;
  c.index_dtype = index_dtype;
  c.out = out;
  c.outer = outer;
  /* About 16 KiB of output a task, at least 4 tasks a thread when there
   * are enough rows. */
  const int64_t row_bytes = n_index * inner * (int64_t)elem_size;
  c.rows_per = row_bytes > 0 ? (16384 + row_bytes - 1) / row_bytes : outer;
  const int64_t want = 4 * (int64_t)kiln_pool_size(pool);
  if (c.rows_per > (outer + want - 1) / want) c.rows_per = (outer + want - 1) / want;
  if (c.rows_per < 1) c.rows_per = 1;
  const int64_t tasks = (outer + c.rows_per - 1) / c.rows_per;
  kiln_pool_parallel_for(tasks > 1 ? pool : NULL, (size_t)tasks, kiln_gather_task, &c);
  int64_t bad = 0;
  for (int i = 0; i < 64; ++i) bad += c.bad[i];
  return bad;
}

int64_t kiln_gather_elements(size_t elem_size, const void* x, int32_t rank, const int64_t* shape,
                             int32_t axis, const void* index, kiln_dtype_t index_dtype,
                             const int64_t* index_shape, void* out) {
  int64_t xstride[KILN_ND_MAX_RANK], s = 1, numel = 1, bad = 0;
  for (int32_t d = rank - 1; d >= 0; --d) {
    xstride[d] = s;
    s *= shape[d];
    numel *= index_shape[d];
  }
  int64_t pos[KILN_ND_MAX_RANK] = {0};
  for (int64_t i = 0; i < numel; ++i) {
    int64_t j = index_dtype == KILN_I64 ? ((const int64_t*)index)[i] : ((const int32_t*)index)[i];
    if (j < 0) j += shape[axis];
    char* dst = (char*)out + (size_t)i * elem_size;
    if (j < 0 || j >= shape[axis]) {
      memset(dst, 0, elem_size);
      ++bad;
    } else {
      int64_t off = 0;
      for (int32_t d = 0; d < rank; ++d) off += (d == axis ? j : pos[d]) * xstride[d];
      memcpy(dst, (const char*)x + (size_t)off * elem_size, elem_size);
    }
    for (int32_t d = rank - 1; d >= 0; --d) { /* odometer over index's shape */
      if (++pos[d] < index_shape[d]) break;
      pos[d] = 0;
    }
  }
  return bad;
}
