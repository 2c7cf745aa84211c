/* The bf16-compute channels-last convolution's driver
 * (kiln_conv_nhwc_bf16.h): the fp32 NHWC driver's plan (kiln_conv_nhwc.c)
 * with a bf16 source and VDPBF16PS tiles.
 *
 * Source. Each image is copied once into a zero-bordered buffer of hp x wp
 * pixels (the rows and columns the windows reach; for a 1x1 conv with no
 * padding only the pixels it reads, so a strided downsample copies a
 * quarter), x rounded to bf16 as it is copied (so also for 1x1 convs: the
 * kernel reads bf16 couples), cp2 bf16 per pixel: each group's Cg channels then a zero one when Cg is odd,
 * the pitch's spare channels zero. cp2 is an odd number of 64-byte lines
 * once a pixel fills two (C >= 128): with 128 or 256 channels the taps of a
 * window would otherwise fall in few L1 sets (the fp32 driver's rule). Not
 * for 64 channels (two lines): there the tiles ran as fast with pitch 64
 * as with 96 (ResNet-18's layer1 3x3, Zen 4), and pitch C makes a row of
 * the copy one rounded run instead of a call per pixel plus zero fill,
 * the copy 0.054 -> 0.016 ms and the conv 83 -> 88 % of the bf16 peak at
 * 2 threads.
 * Pair row r = (u kw + v) (Cg2 / 2) + c / 2 of output pixel (oy, ox) in
 * group g reads src[vpos + off[r]],
 *     vpos = (oy sh wp + ox sw) cp2 + g Cg2,  off[r] = (u dh wp + v dw) cp2 + c,
 * (c even), the weights' pair-row order.
 *
 * Work split as the fp32 driver: a task is a block of MR-pixel tiles x a
 * range of 32-channel strips, strip outermost then K blocks of at most 128
 * pair rows (a 16 KiB block of the two panels stays in L1 across the
 * block's tiles), partial sums per tile between K blocks; enough strip
 * ranges, then tile blocks, that every thread gets about four tasks, the
 * blocks of equal size (with 64 output channels there are two strips: the
 * stem had two tasks of 1132 tiles and two of 123, so a thread slowed by
 * another process could not be helped). Tiles go to y through
 * the GEMM's fp32 epilogue (bias, activation, residual).
 *
 * The stem (C = 3, x NCHW) pairs its taps along window rows instead
 * (kiln_conv_nhwc_bf16_internal.h): pitch C, weights reordered per call,
 * 77 pair rows instead of 98; an image whose copy holds an Inf or NaN
 * runs again with channel pairs. Its planes are interleaved into the copy
 * by an AVX-512 permute (kiln_conv_nhwc_bf16_copy_avx512bf16.c).
 *
 * With AMX (kiln_cpu_bf16() & KILN_CPU_BF16_AMX) every conv runs on AMX
 * tiles instead (kiln_conv_nhwc_bf16_internal.h, kiln_conv_nhwc_bf16_amx.c):
 * the same copy, a step's tile loaded from it when a group's Cg2 is a
 * multiple of 32, else from rows gathered per task; tiles of 16 pixels.
 *
 * Without a VDPBF16PS engine at run time, the portable path: x rounded to
 * bf16 into an fp32 copy, the weights widened to fp32 panels of 16 ((c, u,
 * v) order), then the fp32 NHWC kernels: the same products (bf16 x bf16 is
 * exact in fp32), summed in fp32 in another order. */
#include <stdatomic.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_scratch.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/conv/kiln_conv_nhwc_bf16.h"
#include "kernels/conv/kiln_conv_nhwc_bf16_internal.h"
#include "kernels/eltwise/kiln_cast_bf16_variants.h"
#include "kernels/eltwise/kiln_transpose_variants.h"
#include "kernels/gemm/kiln_gemm.h"
#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_CONV_BF16_CACHE_CAP ((size_t)64 << 20)
#define KILN_CONV_BF16_KC 128 /* pair rows per K block */
#define KILN_CONV_BF16_BLOCK_BYTES ((int64_t)384 << 10)
#define KILN_CONV_BF16_PART_BYTES ((int64_t)64 << 10)
#define KILN_CONV_BF16_PREP_BYTES ((int64_t)32 << 10)

#define KILN_CONV_BF16_STR2(x) #x
#define KILN_CONV_BF16_STR(x) KILN_CONV_BF16_STR2(x)

static _Thread_local const char* kiln_conv_bf16_path_ = "none";
static _Thread_local int kiln_conv_bf16_window_pairs_;

const char* kiln_conv2d_bf16_last_path(void) { return kiln_conv_bf16_path_; }
int kiln_conv2d_bf16_last_window_pairs(void) { return kiln_conv_bf16_window_pairs_; }

int kiln_conv2d_bf16_has_engine(void) {
#ifdef KILN_GEMM_HAVE_X86
  return (kiln_cpu_bf16() & KILN_CPU_BF16_AVX512) != 0;
#else
  return 0;
#endif
}

const char* kiln_conv2d_bf16_describe(void) {
#ifdef KILN_GEMM_HAVE_X86
  if (kiln_cpu_bf16() & KILN_CPU_BF16_AMX)
    return "bf16 compute: AMX tiles (TDPBF16PS), NHWC tiles of 16 pixels x 32 channels read "
           "from the bf16 copy (from gathered rows when a group's channels are not a multiple "
           "of 32)";
#endif
  if (kiln_conv2d_bf16_has_engine())
    return "bf16 compute: AVX512_BF16 dot products (VDPBF16PS), NHWC tiles of "
           KILN_CONV_BF16_STR(KILN_CONV_BF16_MR) " pixels x 32 channels";
  return "bf16 compute: no bf16 engine at run time, the fp32 NHWC kernels on bf16-rounded "
         "inputs and widened weights";
}

static int64_t kiln_conv_bf16_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* ---- the portable path ---- */

static kiln_scratch_cache_t kiln_conv_bf16_wide_scratch_ =
    KILN_SCRATCH_CACHE_INIT(KILN_CONV_BF16_CACHE_CAP);

static void kiln_conv_bf16_portable(const kiln_conv2d_f32_args_t* a, int x_nchw,
                                    kiln_pool_t* pool) {
  const int64_t G = a->groups, cg = a->c / G, og = a->o / G, nq = kiln_conv_bf16_cdiv(og, 16);
  const int64_t cg2 = cg + (cg & 1), hw = a->kh * a->kw, rows = hw * cg2 / 2, k = cg * hw;
  const int64_t nx = a->n * a->c * a->h * a->w, nw = G * nq * k * 16;
  const int64_t ny = a->y_bf16 ? a->n * a->ho * a->wo * a->o : 0; /* a bf16 y's fp32 first */
  void* blk = NULL;
  float* buf = kiln_scratch_get(&kiln_conv_bf16_wide_scratch_,
                                (size_t)(nx + nw + ny) * sizeof(float), &blk);
  kiln_conv_bf16_path_ = "fp32";
  kiln_conv_bf16_window_pairs_ = 0;
  if (!buf) {
    kiln_conv2d_bf16_nhwc_reference(a, x_nchw); /* no memory: correct, if slow */
    return;
  }
  float *xr = buf, *wf = buf + nx;
  if (a->x_bf16) { /* widened: exact, already rounded */
    const uint16_t* xb = (const uint16_t*)(const void*)a->x;
    for (int64_t i = 0; i < nx; ++i) xr[i] = kiln_gemm_bf16_to_f32(xb[i]);
  } else {
    memcpy(xr, a->x, (size_t)nx * sizeof(float));
    kiln_gemm_kernels_for(kiln_cpu_isa())->round_bf16(xr, nx);
  }
  /* Panel pan's tap (c, u, v) of channel i: pair row (uv, c / 2), lane 2 i + c % 2.
   * Sums scaled per channel (a folded batch norm) take the scale into the
   * widened weights: one fp32 rounding of each product's factor. */
  const uint16_t* w16 = (const uint16_t*)(const void*)a->weight;
  for (int64_t pan = 0; pan < G * nq; ++pan)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t uv = 0; uv < hw; ++uv) {
        const uint16_t* src = w16 + (pan * rows + uv * (cg2 / 2) + c / 2) * 32 + (c & 1);
        float* dst = wf + (pan * k + c * hw + uv) * 16;
        const int64_t o0 = pan / nq * og + pan % nq * 16;
        for (int64_t i = 0; i < 16; ++i) {
          const float s = a->scale && pan % nq * 16 + i < og ? a->scale[o0 + i] : 1.0f;
          dst[i] = kiln_gemm_bf16_to_f32(src[2 * i]) * s;
        }
      }
  kiln_conv2d_f32_args_t f = *a;
  f.x = xr, f.weight = wf, f.weight_packed = KILN_CONV_PANEL_WIDE, f.scale = NULL;
  f.x_bf16 = f.y_bf16 = 0;
  if (a->y_bf16) f.y = wf + nw;
  if (x_nchw) kiln_conv2d_f32_nhwc_from_nchw(&f, pool);
  else kiln_conv2d_f32_nhwc(&f, pool);
  if (a->y_bf16) kiln_cast_f32_to_bf16((size_t)ny, f.y, (uint16_t*)(void*)a->y);
  kiln_scratch_put(&kiln_conv_bf16_wide_scratch_, blk);
}

#ifdef KILN_GEMM_HAVE_X86
/* The engine's scratch (x86 only: elsewhere the portable path runs). */
static kiln_scratch_cache_t kiln_conv_bf16_scratch_ =
    KILN_SCRATCH_CACHE_INIT(KILN_CONV_BF16_CACHE_CAP);

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  kiln_gemm_epilogue_fn epilogue;
  int x_nchw;
  int sub;               /* 1x1 with no padding: the copy holds only the pixels read */
  int flat;              /* pairs along window rows (kiln_conv_nhwc_bf16_internal.h) */
  atomic_int* nonfinite; /* set when the copy rounded an Inf or NaN */
  int64_t esh, esw;      /* strides in the copy (1 and 1 when sub) */
  int64_t cg, cg2, og, rw, rows, howo, nstrips;
  int64_t hp, wp, cp2;
  int64_t nt, tb, noc, kc;
  /* AMX (amx_mode 1: tiles straight from the copy; 2: from rows gathered
   * per task, seg and nseg the gather's segments, gbuf its buffers, gbuf_el
   * bf16 a thread), else VDPBF16PS (0). */
  int amx_mode;
  kiln_conv_bf16_amx_t amx;
  const int64_t* seg;
  int64_t nseg;
  uint16_t* gbuf;
  int64_t gbuf_el;
  int64_t prow; /* pair rows a panel of the weights the kernels read */
  const int64_t* off;
  const int64_t* vpos;
  float* part;
  int64_t part_fl;
  uint16_t* pad;
  int64_t pad_rows_per;
  /* The current (image, group): */
  const float* xn;
  const uint16_t* xbn; /* the image when x holds bf16 (then xn is NULL) */
  uint16_t* yb;        /* y at the group when it holds bf16 (then y is NULL) */
  const uint16_t* src; /* the copy at the group's first channel */
  const uint16_t* wg;
  float* y;
  const float* res;
  const float* bias;
  const float* scale;
} kiln_conv_bf16_ctx_t;

/* n consecutive floats rounded to bf16 (AVX-512F integer arithmetic,
 * kiln_gemm_bf16_from_f32's rounding to the bit). */
static void kiln_conv_bf16_round_run(const float* x, int64_t n, uint16_t* d) {
  kiln_bf16_gemm_pack_a__avx512(1, 1, n, n, x, NULL, n, 1, d);
}

/* n consecutive values of the image from element e to d: rounded from
 * fp32, or copied when x holds bf16 already (the same bits: its producer
 * rounded as kiln_conv_bf16_round_run does). */
static void kiln_conv_bf16_image_run(const kiln_conv_bf16_ctx_t* t, int64_t e, int64_t n,
                                     uint16_t* d) {
  if (t->xbn) memcpy(d, t->xbn + e, (size_t)n * sizeof(uint16_t));
  else kiln_conv_bf16_round_run(t->xn + e, n, d);
}

/* n consecutive pixels of one row of x's NCHW planes (x0: channel 0 at the
 * first) to d, pixel q's C channels rounded at d + q * cp2 (one group):
 * blocks of up to 32 pixels x 64 channels (8 KiB, and 8 KiB of source
 * lines: both stay in L1) transposed into pixel-major fp32
 * (kiln_transpose_f32, 8x8 blocks in registers), then each pixel's
 * channels rounded as one run. Channel by channel, a rounded run spread
 * cp2 apart by 2-byte stores made a 256-channel 32x32 conv's copy 0.75 ms,
 * 13 % of the conv; now 0.14 ms (one Zen 4 core; 256-channel blocks, whose
 * lines left L1, 0.35 ms). */
static void kiln_conv_bf16_planes_to_pixels(const float* x0, int64_t plane, int64_t C, int64_t n,
                                            int64_t cp2, uint16_t* d) {
  enum { PX = 32, CH = 64 };
  _Alignas(64) float blk[PX * CH];
  for (int64_t c0 = 0; c0 < C; c0 += CH) {
    const int64_t cb = C - c0 < CH ? C - c0 : CH;
    for (int64_t q0 = 0; q0 < n; q0 += PX) {
      const int64_t len = n - q0 < PX ? n - q0 : PX;
      kiln_transpose_f32(x0 + c0 * plane + q0, plane, len, cb, blk, cb);
      for (int64_t i = 0; i < len; ++i)
        kiln_conv_bf16_round_run(blk + i * cb, cb, d + (q0 + i) * cp2 + c0);
    }
  }
}

/* Rows [task * per, ...) of the bordered bf16 copy of the current image. */
static void kiln_conv_bf16_pad_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_bf16_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t C = a->c, G = a->groups, cg = t->cg, cg2 = t->cg2, cp2 = t->cp2, wp = t->wp;
  int64_t r0 = (int64_t)task * t->pad_rows_per;
  int64_t r1 = r0 + t->pad_rows_per < t->hp ? r0 + t->pad_rows_per : t->hp;
  int64_t lo = a->pw < wp ? a->pw : wp, hi = a->w + a->pw < wp ? a->w + a->pw : wp;
  if (hi < lo) hi = lo;
  const int dense = G * cg2 == cp2 && cg2 == cg && !t->x_nchw; /* pixels back to back */
  const int planes = t->x_nchw && G == 1 && cp2 <= 4;            /* few planes: interleaved */
  for (int64_t r = r0; r < r1; ++r) {
    uint16_t* d = t->pad + r * wp * cp2;
    int64_t row = r - a->ph;
    if (row < 0 || row >= a->h) {
      memset(d, 0, (size_t)(wp * cp2) * sizeof(uint16_t));
      continue;
    }
    if (lo) memset(d, 0, (size_t)(lo * cp2) * sizeof(uint16_t));
    if (dense) {
      kiln_conv_bf16_image_run(t, (row * a->w + lo - a->pw) * C, (hi - lo) * C, d + lo * cp2);
    } else if (planes) {
      if (kiln_bf16_conv_interleave__avx512bf16(t->xn + row * a->w + lo - a->pw, a->h * a->w, C,
                                                hi - lo, cp2, d + lo * cp2))
        atomic_store_explicit(t->nonfinite, 1, memory_order_relaxed);
    } else {
      for (int64_t q = lo; q < hi; ++q) {
        uint16_t* dp = d + q * cp2;
        for (int64_t g = 0; g < G; ++g) {
          if (!t->x_nchw)
            kiln_conv_bf16_image_run(t, (row * a->w + q - a->pw) * C + g * cg, cg, dp + g * cg2);
          if (cg2 > cg) dp[g * cg2 + cg] = 0;
        }
        if (cp2 > G * cg2) memset(dp + G * cg2, 0, (size_t)(cp2 - G * cg2) * sizeof(uint16_t));
      }
      if (t->x_nchw && G == 1) {
        kiln_conv_bf16_planes_to_pixels(t->xn + row * a->w + lo - a->pw, a->h * a->w, C, hi - lo, cp2,
                                        d + lo * cp2);
      } else if (t->x_nchw) {
        /* Plane by plane (grouped convs): each channel's row rounded as
         * one run, then spread cp2 apart within the padded row (in cache). */
        uint16_t run[256];
        for (int64_t c = 0; c < C; ++c) {
          uint16_t* dc = d + c / cg * cg2 + c % cg;
          const float* xp = t->xn + (c * a->h + row) * a->w + lo - a->pw;
          for (int64_t q0 = lo; q0 < hi; q0 += 256) {
            int64_t len = hi - q0 < 256 ? hi - q0 : 256;
            kiln_conv_bf16_round_run(xp + (q0 - lo), len, run);
            for (int64_t i = 0; i < len; ++i) dc[(q0 + i) * cp2] = run[i];
          }
        }
      }
    }
    if (hi < wp) memset(d + hi * cp2, 0, (size_t)((wp - hi) * cp2) * sizeof(uint16_t));
  }
}

/* Rows [task * per, ...) of the copy of a 1x1 conv with no padding: only
 * the pixels it reads, (r sh, q sw) at (r, q), wo a row; pitch cp2 = G Cg2
 * (one tap: no set aliasing to avoid), so with even C and stride 1 a row is
 * one run. */
static void kiln_conv_bf16_sub_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_bf16_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t C = a->c, G = a->groups, cg = t->cg, cg2 = t->cg2, cp2 = t->cp2, wp = t->wp;
  int64_t r0 = (int64_t)task * t->pad_rows_per;
  int64_t r1 = r0 + t->pad_rows_per < t->hp ? r0 + t->pad_rows_per : t->hp;
  for (int64_t r = r0; r < r1; ++r) {
    uint16_t* d = t->pad + r * wp * cp2;
    const int64_t row = r * a->sh;
    if (!t->x_nchw && a->sw == 1 && cg2 == cg) {
      kiln_conv_bf16_image_run(t, row * a->w * C, wp * C, d);
      continue;
    }
    for (int64_t q = 0; q < wp; ++q) {
      uint16_t* dp = d + q * cp2;
      for (int64_t g = 0; g < G; ++g) {
        if (!t->x_nchw)
          kiln_conv_bf16_image_run(t, (row * a->w + q * a->sw) * C + g * cg, cg, dp + g * cg2);
        if (cg2 > cg) dp[g * cg2 + cg] = 0;
      }
    }
    if (t->x_nchw && G == 1 && a->sw == 1) {
      kiln_conv_bf16_planes_to_pixels(t->xn + row * a->w, a->h * a->w, C, wp, cp2, d);
    } else if (t->x_nchw) { /* plane by plane, strided reads gathered into a run */
      float gath[256];
      uint16_t run[256];
      for (int64_t c = 0; c < C; ++c) {
        uint16_t* dc = d + c / cg * cg2 + c % cg;
        const float* xp = t->xn + (c * a->h + row) * a->w;
        for (int64_t q0 = 0; q0 < wp; q0 += 256) {
          int64_t len = wp - q0 < 256 ? wp - q0 : 256;
          for (int64_t i = 0; i < len; ++i) gath[i] = xp[(q0 + i) * a->sw];
          kiln_conv_bf16_round_run(gath, len, run);
          for (int64_t i = 0; i < len; ++i) dc[(q0 + i) * cp2] = run[i];
        }
      }
    }
  }
}

/* A finished run of pixels to y: its np pixels are consecutive there, O
 * apart; the residual first when it goes before the activation (y may be
 * the residual: each element is read before it is written). */
static void kiln_conv_bf16_store(const void* p, int64_t j0, int64_t cols, int64_t p0, int64_t np,
                                 float* tmp) {
  const kiln_conv_bf16_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t O = a->o, at = p0 * O + j0;
  const float* r = t->res ? t->res + at : NULL;
  if (t->scale)
    for (int64_t i = 0; i < np; ++i)
      for (int64_t j = 0; j < cols; ++j) tmp[i * 32 + j] *= t->scale[j0 + j];
  if (r && a->residual_before_act) {
    for (int64_t i = 0; i < np; ++i)
      for (int64_t j = 0; j < cols; ++j) tmp[i * 32 + j] += r[i * O + j];
    r = NULL;
  }
  if (t->yb) { /* bf16 y (no residual): the epilogue in place, each pixel rounded */
    t->epilogue(np, cols, tmp, 32, tmp, 32, t->bias ? t->bias + j0 : NULL, NULL, 0, a->act);
    for (int64_t i = 0; i < np; ++i) kiln_conv_bf16_round_run(tmp + i * 32, cols, t->yb + at + i * O);
    return;
  }
  t->epilogue(np, cols, tmp, 32, t->y + at, O, t->bias ? t->bias + j0 : NULL, r, O, a->act);
}

static void kiln_conv_bf16_task(void* p, size_t task, int thread) {
  const kiln_conv_bf16_ctx_t* t = p;
  int64_t bi = (int64_t)task / t->noc, oc = (int64_t)task % t->noc;
  int64_t t0 = bi * t->tb, t1 = t0 + t->tb < t->nt ? t0 + t->tb : t->nt;
  const kiln_conv2d_f32_args_t* a = t->a;
  /* Straight to y where the activation is none, relu or relu6. */
  const int direct =
      a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU || a->act == KILN_ACT_RELU6;
  kiln_conv_bf16_loop_t l = {t->wg,   t->src,  t->vpos,    t->off,
                             t->rows, t->kc,   t->og,      t->howo,
                             t->part, t->part_fl, kiln_conv_bf16_store, t,
                             {direct ? t->y : NULL, direct ? t->yb : NULL, t->res, t->bias,
                              t->scale, a->o, direct ? a->act : KILN_ACT_NONE,
                              a->residual_before_act}};
  kiln_bf16_conv_nhwc_run__avx512bf16(&l, t0, t1, oc * t->nstrips / t->noc,
                                      (oc + 1) * t->nstrips / t->noc, thread);
}

static void kiln_conv_bf16_amx_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_bf16_ctx_t* t = p;
  int64_t bi = (int64_t)task / t->noc, oc = (int64_t)task % t->noc;
  int64_t t0 = bi * t->tb, t1 = t0 + t->tb < t->nt ? t0 + t->tb : t->nt;
  const int64_t s0 = oc * t->nstrips / t->noc, s1 = (oc + 1) * t->nstrips / t->noc;
  kiln_conv_bf16_amx_t l = t->amx;
  const kiln_conv2d_f32_args_t* a = t->a;
  l.w = t->wg, l.src = t->src;
  if (!a->y_bf16 && (a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU)) { /* straight to y */
    const kiln_conv_bf16_to_y_t out = {t->y,    NULL,  t->res, t->bias, t->scale, a->o,
                                       a->act == KILN_ACT_RELU, a->residual_before_act};
    l.out = out;
  }
  if (t->amx_mode == 1) {
    kiln_bf16_conv_nhwc_run__amx(&l, t0, t1, s0, s1);
    return;
  }
  /* Gathered: tiles of 16 output pixels, 16 tiles at a time; each batch
   * of rows is one run of its own pixels. */
  uint16_t* buf = t->gbuf + (int64_t)thread * t->gbuf_el;
  for (int64_t c0 = t0; c0 < t1; c0 += 16) {
    const int64_t px0 = c0 * 16, px1 = (t1 - c0 < 16 ? t1 : c0 + 16) * 16;
    const int64_t np = (px1 < t->howo ? px1 : t->howo) - px0;
    kiln_bf16_conv_nhwc_gather__amx(t->src, t->vpos + px0, np, t->seg, t->nseg, 2 * t->prow, buf);
    l.src = buf, l.p0 = px0, l.rl = l.ww = l.wo = np, l.tpr = kiln_conv_bf16_cdiv(np, 16);
    kiln_bf16_conv_nhwc_run__amx(&l, 0, l.tpr, s0, s1);
  }
}

/* Whether window-row pairs apply (kiln_conv_nhwc_bf16_internal.h): an odd
 * C <= 3 (so the pad channel wastes a product a tap) read from NCHW planes
 * (the copy that checks for Inf and NaN), one group, consecutive columns,
 * and kw > 1 (fewer pair rows: ceil(kw C / 2) < kw (C + 1) / 2). */
static int kiln_conv_bf16_window_pairs_fit(const kiln_conv2d_f32_args_t* a, int x_nchw) {
  return x_nchw && a->groups == 1 && a->c <= 3 && (a->c & 1) && a->dw == 1 && a->kw > 1;
}

/* The layout's weight (kiln_conv_nhwc_bf16.h; one group, odd C) in
 * window-row pair order: value e = v C + c of window row u in pair row
 * u rw + e / 2, lane 2 i + e % 2; a row's last lane zero when kw C is odd;
 * panels `rows` pair rows apart (at least kh rw; the rest zero). */
static void kiln_conv_bf16_window_weights(const kiln_conv2d_f32_args_t* a, int64_t rw,
                                          int64_t rows, uint16_t* out) {
  const int64_t C = a->c, half = (C + 1) / 2, nq = kiln_conv_bf16_cdiv(a->o, 16);
  const int64_t R = a->kh * a->kw * half;
  const uint16_t* w = (const uint16_t*)(const void*)a->weight;
  memset(out, 0, (size_t)(nq * rows * 32) * sizeof(uint16_t));
  for (int64_t q = 0; q < nq; ++q)
    for (int64_t u = 0; u < a->kh; ++u)
      for (int64_t v = 0; v < a->kw; ++v)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t e = v * C + c;
          const uint16_t* src = w + (q * R + (u * a->kw + v) * half + c / 2) * 32 + (c & 1);
          uint16_t* dst = out + (q * rows + u * rw + e / 2) * 32 + (e & 1);
          for (int64_t i = 0; i < 16; ++i) dst[2 * i] = src[2 * i];
        }
}

/* Task blocks of t->tb tiles (at most, shrunk to equal blocks) x t->noc
 * strip ranges: enough strip ranges, then blocks, that every thread gets
 * about four tasks. Returns the number of blocks. */
static int64_t kiln_conv_bf16_split(kiln_conv_bf16_ctx_t* t, int threads) {
  int64_t nb = kiln_conv_bf16_cdiv(t->nt, t->tb);
  while (threads > 1 && nb * t->noc < 4 * threads && t->noc < t->nstrips) t->noc++;
  if (threads > 1 && nb * t->noc < 4 * threads) nb = kiln_conv_bf16_cdiv(4 * threads, t->noc);
  if (nb > t->nt) nb = t->nt;
  t->tb = kiln_conv_bf16_cdiv(t->nt, nb); /* blocks of equal size */
  return kiln_conv_bf16_cdiv(t->nt, t->tb);
}

/* How the AMX tiles run this conv (0: they are not allowed): straight from
 * the copy (1) when every 32-K step is one tap's contiguous channels (Cg2
 * a multiple of 32; not window-row pairs), else from gathered rows (2).
 * AMX whenever allowed: on a Sapphire Rapids-class Xeon core, whose
 * VDPBF16PS peak is half its fp32 FMA's (114 against 228 GFLOP/s),
 * ResNet-18's convs in kiln.profile (one thread) went from 96-115 GFLOP/s
 * on VDPBF16PS to 660-1120 (3x3), 146-326 (1x1/2) and 352 (the stem,
 * gathered: 2.46 -> 0.67 ms; its 3.2 MB fp32 output is much of that). */
static int kiln_conv_bf16_amx_mode(const kiln_conv_bf16_ctx_t* t) {
  if (!(kiln_cpu_bf16() & KILN_CPU_BF16_AMX)) return 0;
  return !t->flat && t->cg2 % 32 == 0 ? 1 : 2;
}

/* The AMX plan (kiln_conv_nhwc_bf16_internal.h): runs and tiles of 16
 * virtual pixels; task blocks of at most 16 tiles (the kernel's C chunk),
 * an even number where possible (tiles go in pairs). Returns the blocks. */
static int64_t kiln_conv_bf16_amx_plan(kiln_conv_bf16_ctx_t* t, int threads) {
  const kiln_conv2d_f32_args_t* a = t->a;
  kiln_conv_bf16_amx_t* l = &t->amx;
  l->rows = t->prow, l->steps = t->prow / 16, l->og = t->og, l->wo = a->wo;
  l->store = kiln_conv_bf16_store, l->store_ctx = t;
  int64_t nrun;
  if (t->amx_mode == 2) { /* tiles of 16 output pixels (runs made per task) */
    nrun = 1, l->rl = t->howo, l->ww = a->wo;
    l->run_pitch = 0, l->px_stride = t->prow * 2;
  } else if (t->esh == 1 && t->esw == 1) { /* the copy's rows back to back, one run */
    nrun = 1, l->rl = (a->ho - 1) * t->wp + a->wo, l->ww = t->wp;
    l->run_pitch = 0, l->px_stride = t->cp2;
  } else { /* a run per output row */
    nrun = a->ho, l->rl = a->wo, l->ww = a->wo;
    l->run_pitch = t->esh * t->wp * t->cp2, l->px_stride = t->esw * t->cp2;
  }
  l->tpr = kiln_conv_bf16_cdiv(l->rl, 16);
  t->nt = nrun * l->tpr;
  t->tb = t->nt < 16 ? t->nt : 16;
  int64_t nb = kiln_conv_bf16_split(t, threads);
  if (t->tb > 1 && t->tb % 2 && kiln_conv_bf16_cdiv(t->nt, t->tb + 1) == nb) {
    t->tb += 1;
    nb = kiln_conv_bf16_cdiv(t->nt, t->tb);
  }
  return nb;
}

static void kiln_conv_bf16_engine(const kiln_conv2d_f32_args_t* a, int x_nchw, int window_pairs,
                                  kiln_pool_t* pool) {
  const int64_t G = a->groups, MR = KILN_CONV_BF16_MR;
  kiln_conv_bf16_ctx_t t;
  memset(&t, 0, sizeof(t));
  t.a = a;
  t.x_nchw = x_nchw;
  t.epilogue = kiln_gemm_kernels_for(KILN_ISA_AVX512)->epilogue;
  t.flat = window_pairs && kiln_conv_bf16_window_pairs_fit(a, x_nchw);
  t.cg = a->c / G, t.og = a->o / G, t.howo = a->ho * a->wo;
  t.cg2 = t.flat ? t.cg : t.cg + (t.cg & 1); /* flat: no pad channel */
  t.rw = t.flat ? kiln_conv_bf16_cdiv(a->kw * t.cg, 2) : a->kw * t.cg2 / 2;
  t.rows = a->kh * t.rw;
  t.nstrips = kiln_conv_bf16_cdiv(t.og, 32);
  t.sub = a->kh == 1 && a->kw == 1 && a->ph == 0 && a->pw == 0;
  t.esh = t.sub ? 1 : a->sh, t.esw = t.sub ? 1 : a->sw;
  t.cp2 = G * t.cg2;
  if (t.cp2 >= 128 && !t.sub) {
    t.cp2 = (t.cp2 + 31) & ~(int64_t)31;
    if ((t.cp2 / 32) % 2 == 0) t.cp2 += 32;
  }
  t.hp = t.sub ? a->ho : (a->ho - 1) * a->sh + (a->kh - 1) * a->dh + 1;
  t.wp = t.sub ? a->wo : (a->wo - 1) * a->sw + (a->kw - 1) * a->dw + 1;
  const int threads = kiln_pool_size(pool);
  const int amx = t.amx_mode = kiln_conv_bf16_amx_mode(&t);
  /* Gathered rows: ka = 2 prow bf16 a pixel, a multiple of 32. */
  t.prow = amx == 2 ? (t.rows + 15) / 16 * 16 : t.rows;
  int64_t nb;
  t.noc = 1;
  if (amx) {
    nb = kiln_conv_bf16_amx_plan(&t, threads);
  } else {
    t.kc = t.rows <= KILN_CONV_BF16_KC
               ? t.rows
               : kiln_conv_bf16_cdiv(t.rows, kiln_conv_bf16_cdiv(t.rows, KILN_CONV_BF16_KC));
    const int multi = t.kc < t.rows;
    t.nt = kiln_conv_bf16_cdiv(t.howo, MR);
    /* A block's output rows: each reads sh fresh source rows of wp pixels,
     * plus the window's extra rows once. */
    int64_t per_row = t.esh * t.wp * t.cg2 * 2;
    int64_t brows = KILN_CONV_BF16_BLOCK_BYTES / (per_row > 0 ? per_row : 1) - (a->kh - 1) * a->dh;
    t.tb = kiln_conv_bf16_cdiv((brows > 1 ? brows : 1) * a->wo, MR);
    if (multi && t.tb > KILN_CONV_BF16_PART_BYTES / (MR * 32 * 4))
      t.tb = KILN_CONV_BF16_PART_BYTES / (MR * 32 * 4);
    if (t.tb > t.nt) t.tb = t.nt;
    nb = kiln_conv_bf16_split(&t, threads);
    t.part_fl = multi ? t.tb * MR * 32 : 0;
  }

  /* Scratch (bytes, each piece 64-aligned): offsets, pixel bases, the
   * AMX steps' offsets and the gather's segments (int64), partial sums,
   * the bordered copy and zero bytes past it (64: window-row pairs read
   * one value past the last window; AMX: a last tile's 16 rows), the
   * weights reordered (window-row pairs) or padded (gathered rows), the
   * gathered rows (256 pixels a thread). */
  const int64_t nq = kiln_conv_bf16_cdiv(t.og, 16);
  t.nseg = amx == 2 ? (t.flat ? a->kh : a->kh * a->kw) : 0;
  const size_t int_b =
      ((size_t)(t.rows + t.howo + t.amx.steps + 3 * t.nseg) * 8 + 63) & ~(size_t)63;
  const size_t part_b = (size_t)(t.part_fl * threads) * sizeof(float);
  const size_t copy_b = (size_t)(t.hp * t.wp * t.cp2) * 2;
  const size_t slack_b = amx == 1 ? (size_t)(16 * t.amx.px_stride + 32) * 2 : 0;
  const size_t pad_b = ((copy_b + 63) & ~(size_t)63) + 64 + slack_b;
  const size_t wf_b = t.flat || amx == 2 ? (size_t)(G * nq * t.prow * 32) * sizeof(uint16_t) : 0;
  t.gbuf_el = amx == 2 ? 256 * 2 * t.prow : 0;
  const size_t g_b = (size_t)(t.gbuf_el * threads) * sizeof(uint16_t);
  void* blk = NULL;
  char* scratch =
      kiln_scratch_get(&kiln_conv_bf16_scratch_, int_b + part_b + pad_b + wf_b + g_b, &blk);
  if (!scratch) {
    kiln_conv_bf16_portable(a, x_nchw, pool);
    return;
  }
  int64_t* off = (int64_t*)(void*)scratch;
  int64_t* vpos = off + t.rows;
  if (t.flat) /* pair j of window row u: values 2j, 2j + 1 of the row */
    for (int64_t u = 0, r = 0; u < a->kh; ++u)
      for (int64_t j = 0; j < t.rw; ++j, ++r) off[r] = u * a->dh * t.wp * t.cp2 + 2 * j;
  else
    for (int64_t u = 0, r = 0; u < a->kh; ++u)
      for (int64_t v = 0; v < a->kw; ++v)
        for (int64_t c = 0; c < t.cg2; c += 2, ++r)
          off[r] = (u * a->dh * t.wp + v * a->dw) * t.cp2 + c;
  for (int64_t oy = 0, i = 0; oy < a->ho; ++oy)
    for (int64_t ox = 0; ox < a->wo; ++ox, ++i) vpos[i] = (oy * t.esh * t.wp + ox * t.esw) * t.cp2;
  t.off = off, t.vpos = vpos;
  if (amx) { /* a step's 16 pair rows: one tap's 32 contiguous channels, or a gathered row's */
    int64_t* koff = vpos + t.howo;
    for (int64_t st = 0; st < t.amx.steps; ++st) koff[st] = amx == 1 ? off[16 * st] : 32 * st;
    t.amx.koff = koff;
  }
  if (amx == 2) { /* a window row (window-row pairs) or a tap's Cg2 channels */
    int64_t* seg = vpos + t.howo + t.amx.steps;
    for (int64_t i = 0; i < t.nseg; ++i) {
      const int64_t u = t.flat ? i : i / a->kw, v = t.flat ? 0 : i % a->kw;
      seg[3 * i] = (u * a->dh * t.wp + v * a->dw) * t.cp2;
      seg[3 * i + 1] = t.flat ? 2 * u * t.rw : i * t.cg2;
      seg[3 * i + 2] = t.flat ? a->kw * t.cg : t.cg2;
    }
    t.seg = seg;
    t.gbuf = (uint16_t*)(void*)(scratch + int_b + part_b + pad_b + wf_b);
  }
  t.part = part_b ? (float*)(void*)(scratch + int_b) : NULL;
  t.pad = (uint16_t*)(void*)(scratch + int_b + part_b);
  memset((char*)t.pad + copy_b, 0, pad_b - copy_b);
  atomic_int nonfinite;
  atomic_init(&nonfinite, 0);
  t.nonfinite = &nonfinite;
  const int64_t row_b = t.wp * t.cp2 * 2;
  t.pad_rows_per = KILN_CONV_BF16_PREP_BYTES / (row_b > 0 ? row_b : 1);
  if (t.pad_rows_per < 1) t.pad_rows_per = 1;

  const uint16_t* wall = (const uint16_t*)(const void*)a->weight;
  if (wf_b) {
    uint16_t* wf = (uint16_t*)(void*)(scratch + int_b + part_b + pad_b);
    if (t.flat) {
      kiln_conv_bf16_window_weights(a, t.rw, t.prow, wf);
    } else { /* each panel's rows, then zero rows up to prow */
      for (int64_t q = 0; q < G * nq; ++q) {
        memcpy(wf + q * t.prow * 32, wall + q * t.rows * 32, (size_t)(t.rows * 32) * 2);
        memset(wf + (q * t.prow + t.rows) * 32, 0, (size_t)((t.prow - t.rows) * 32) * 2);
      }
    }
    wall = wf;
  }
  int all_window_pairs = t.flat;
  /* A bf16 x of a 1x1 conv at stride 1 with even channels a group is
   * already the copy (pixels back to back, no pad channel): read in place.
   * Not by AMX, whose last tile reads past the copy into its slack. */
  const int in_place = t.sub && a->x_bf16 && !amx && a->sh == 1 && a->sw == 1 &&
                       t.cg2 == t.cg && t.cp2 == G * t.cg;
  const uint16_t* xb = a->x_bf16 ? (const uint16_t*)(const void*)a->x : NULL;
  for (int64_t n = 0; n < a->n; ++n) {
    const int64_t xe = n * a->h * a->w * a->c, ye = n * t.howo * a->o; /* elements */
    t.xn = xb ? NULL : a->x + xe;
    t.xbn = xb ? xb + xe : NULL;
    atomic_store_explicit(&nonfinite, 0, memory_order_relaxed);
    if (!in_place)
      kiln_pool_parallel_for(pool, (size_t)kiln_conv_bf16_cdiv(t.hp, t.pad_rows_per),
                             t.sub ? kiln_conv_bf16_sub_task : kiln_conv_bf16_pad_task, &t);
    if (t.flat && amx != 2 && atomic_load_explicit(&nonfinite, memory_order_relaxed)) {
      /* An Inf or NaN in this image: a zero weight times the value past a
       * window row would be NaN. Channel pairs read a zero pad channel.
       * (Gathered rows hold a zero there instead.) */
      kiln_conv2d_f32_args_t one = *a; /* x is fp32 here: window-row pairs read NCHW planes */
      one.n = 1, one.x = t.xn;
      one.y = a->y_bf16 ? (float*)(void*)((uint16_t*)(void*)a->y + ye) : a->y + ye;
      one.residual = a->residual ? a->residual + n * t.howo * a->o : NULL;
      kiln_conv_bf16_engine(&one, x_nchw, 0, pool);
      all_window_pairs = 0;
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      t.y = a->y_bf16 ? NULL : a->y + ye + g * t.og;
      t.yb = a->y_bf16 ? (uint16_t*)(void*)a->y + ye + g * t.og : NULL;
      t.res = a->residual ? a->residual + n * t.howo * a->o + g * t.og : NULL;
      t.bias = a->bias ? a->bias + g * t.og : NULL;
      t.scale = a->scale ? a->scale + g * t.og : NULL;
      t.src = (in_place ? t.xbn : t.pad) + g * t.cg2;
      t.wg = wall + g * nq * t.prow * 32;
      kiln_pool_parallel_for(pool, (size_t)(nb * t.noc),
                             amx ? kiln_conv_bf16_amx_task : kiln_conv_bf16_task, &t);
    }
  }
  kiln_scratch_put(&kiln_conv_bf16_scratch_, blk);
  kiln_conv_bf16_path_ = amx ? "amx" : "avx512_bf16";
  kiln_conv_bf16_window_pairs_ = all_window_pairs;
}

#endif

void kiln_conv2d_bf16_nhwc(const kiln_conv2d_f32_args_t* a, int x_nchw, kiln_pool_t* pool) {
  if (a->n <= 0 || a->o <= 0 || a->ho <= 0 || a->wo <= 0) return;
  if (a->c <= 0 || a->kh <= 0 || a->kw <= 0) { /* no taps: bias, activation, residual */
    kiln_conv2d_bf16_nhwc_reference(a, x_nchw);
    return;
  }
#ifdef KILN_GEMM_HAVE_X86
  if (kiln_conv2d_bf16_has_engine()) {
    kiln_conv_bf16_engine(a, x_nchw, 1, pool);
    return;
  }
#endif
  kiln_conv_bf16_portable(a, x_nchw, pool);
}
