/* The channels-last convolution (kiln_conv_nhwc.h): the channel-vector
 * implicit GEMM of kiln_conv.c with x and y in NHWC.
 *
 * Source. A 1x1 conv with no padding reads x in place (cp = C); other
 * convs first copy each image into a zero-bordered buffer of hp x wp
 * pixels (the rows and columns the windows reach), cp >= C floats per
 * pixel (the pitch: see kiln_conv2d_f32_nhwc). Either way the input
 * under tap (c, u, v) of output pixel (oy, ox) in group g is
 *     src[vpos(oy, ox) + off(c, u, v)],
 *     vpos = (oy sh wp + ox sw) cp + g Cg,  off = (u dh wp + v dw) cp + c,
 * so the channel-vector microkernel (kiln_conv_internal.h: 6 pixels, each
 * at its own base, x 16 output channels, a broadcast per tap) runs on it
 * unchanged, taps in the packed weights' (c, u, v) order. Consecutive taps
 * c, c + 1 read neighbouring floats, where the NCHW kernel reads a plane
 * apart.
 *
 * Store. The 6 x 16 tile is pixel-major, which is y's own layout: rows
 * channels of 6 consecutive pixels go to y (O floats apart) through the
 * GEMM's epilogue (activation and residual), no transpose.
 *
 * Work split as the NCHW channel-vector path: a task is a block of 6-pixel
 * tiles x a range of 16-channel panels, panel outermost then K blocks of
 * at most 256 taps (a 16 KiB weight block stays in L1 across the block's
 * tiles), partial sums per tile between K blocks; enough panel ranges that
 * every thread gets about four tasks. */
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_scratch.h"
#include "kernels/conv/kiln_conv_internal.h"
#include "kernels/conv/kiln_conv_nhwc.h"
#include "kernels/eltwise/kiln_transpose_variants.h"
#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_CONV_NHWC_CACHE_CAP ((size_t)64 << 20)
#define KILN_CONV_NHWC_KC 256
/* Floats of source a block of tiles may touch (two 192 KiB halves of L2,
 * as the NCHW channel-vector path). */
#define KILN_CONV_NHWC_BLOCK_FLOATS ((int64_t)96 << 10)
#define KILN_CONV_NHWC_PART_BYTES ((int64_t)64 << 10)
#define KILN_CONV_NHWC_PREP_FLOATS ((int64_t)16 << 10)

static kiln_scratch_cache_t kiln_conv_nhwc_scratch_ =
    KILN_SCRATCH_CACHE_INIT(KILN_CONV_NHWC_CACHE_CAP);

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  kiln_gemm_epilogue_fn epilogue;
  kiln_conv_ukernel_ct_fn ukernel;
  kiln_conv_ukernel_ct2_fn ukernel2;
  kiln_conv_ukernel_ct_np_fn ukernel_np;
  kiln_conv_ukernel_ct2_np_fn ukernel2_np;
  kiln_conv_ukernel_ct_y_fn ukernel_y;
  kiln_conv_ukernel_ct2_y_fn ukernel2_y;
  int64_t cg, og, k, nq, howo;
  int64_t hp, wp;        /* source pixels: hp rows of wp */
  int64_t cp;            /* source floats per pixel (C, or more in the copy) */
  const int64_t* off;    /* k tap offsets */
  const int64_t* vpos;   /* howo pixel bases */
  const float* wpk;      /* packed weights (panels of 16), every group */
  int64_t nt, tb, nb, noc, kc; /* tiles, the largest block, blocks, panel ranges */
  float* part;           /* partial sums, part_fl floats per thread, or NULL */
  int64_t part_fl;
  float* pad;            /* the zero-bordered copy, or NULL (x read in place) */
  int x_nchw;            /* x is (N, C, H, W): the copy gathers it */
  int64_t pad_rows_per;  /* padded rows per preparation task */
  /* The current (image, group): */
  const float* xn;  /* the image in x */
  const float* src; /* its source, at the group's first channel */
  float* y;         /* its first pixel, at the group's first channel */
  const float* res; /* likewise, or NULL */
  const float* bias;
} kiln_conv_nhwc_ctx_t;

static int64_t kiln_conv_nhwc_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t kiln_conv_nhwc_align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* Rows [task * per, ...) of the zero-bordered copy of the current image. */
static void kiln_conv_nhwc_pad_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_nhwc_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t C = a->c, cp = t->cp, wp = t->wp;
  int64_t r0 = (int64_t)task * t->pad_rows_per;
  int64_t r1 = r0 + t->pad_rows_per < t->hp ? r0 + t->pad_rows_per : t->hp;
  int64_t lo = a->pw < wp ? a->pw : wp, hi = a->w + a->pw < wp ? a->w + a->pw : wp;
  if (hi < lo) hi = lo;
  for (int64_t r = r0; r < r1; ++r) {
    float* d = t->pad + r * wp * cp;
    int64_t row = r - a->ph;
    if (row < 0 || row >= a->h) {
      memset(d, 0, (size_t)(wp * cp) * sizeof(float));
      continue;
    }
    if (lo) memset(d, 0, (size_t)(lo * cp) * sizeof(float));
    const float* xr = t->xn + (row * a->w + lo - a->pw) * C;
    if (t->x_nchw) {
      /* The row of every plane transposed into pixels cp apart, 8 x 8
       * blocks in registers (kiln_transpose_f32; the scalar loop, plane by
       * plane, took 100 us of a 112x112, 32-channel 1x1 conv's 154). */
      kiln_transpose_f32(t->xn + row * a->w + lo - a->pw, a->h * a->w, hi - lo, C, d + lo * cp,
                         cp);
    } else if (cp == C) {
      memcpy(d + lo * C, xr, (size_t)((hi - lo) * C) * sizeof(float));
    } else {
      /* The pitch's spare floats are never read (taps read channels < C). */
      for (int64_t q = lo; q < hi; ++q) memcpy(d + q * cp, xr + (q - lo) * C, (size_t)C * sizeof(float));
    }
    if (hi < wp) memset(d + hi * cp, 0, (size_t)((wp - hi) * cp) * sizeof(float));
  }
}

/* A finished tile (np pixels from the tile's first, rows channels; tmp
 * pixel-major, 16 apart) to y at `at`: the residual first when it goes
 * before the activation (y may be the residual: each element is read
 * before it is written). */
static void kiln_conv_nhwc_store(const kiln_conv_nhwc_ctx_t* t, float* tmp, int64_t np,
                                 int64_t rows, int64_t at) {
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t O = a->o, W = KILN_CONV_PANEL_WIDE;
  const float* r = t->res ? t->res + at : NULL;
  if (r && a->residual_before_act) {
    for (int64_t i = 0; i < np; ++i)
      for (int64_t j = 0; j < rows; ++j) tmp[i * W + j] += r[i * O + j];
    r = NULL;
  }
  t->epilogue(np, rows, tmp, W, t->y + at, O, NULL, r, O, a->act);
}

/* kiln_conv_ct_loop_t's store: tile ti's pixels are consecutive in y. */
static void kiln_conv_nhwc_store_tile(const void* p, int64_t q, int64_t rows, int64_t ti,
                                      int64_t np, float* tmp) {
  const kiln_conv_nhwc_ctx_t* t = p;
  kiln_conv_nhwc_store(t, tmp, np, rows, ti * 6 * t->a->o + q * KILN_CONV_PANEL_WIDE);
}

/* A block of tiles x a range of 16-channel panels, through the loop the
 * NCHW driver shares (kiln_conv_ct.c). */
static void kiln_conv_nhwc_task(void* p, size_t task, int thread) {
  const kiln_conv_nhwc_ctx_t* t = p;
  /* Tile blocks and panel ranges as even as whole tiles and pairs allow. */
  int64_t bi = (int64_t)task / t->noc, oc = (int64_t)task % t->noc;
  int64_t t0 = bi * t->nt / t->nb, t1 = (bi + 1) * t->nt / t->nb;
  kiln_conv_ct_loop_t l = {t->ukernel, t->ukernel2, t->wpk,    t->bias, t->src,
                           t->vpos,    t->off,    t->k,    t->kc,
                           t->og,      t->howo,   t->part, t->part_fl,
                           kiln_conv_nhwc_store_tile, t, t->ukernel_np, t->ukernel2_np, NULL, NULL,
                           {NULL, NULL, 0, 0, KILN_ACT_NONE, 0, 0}};
  /* Whole tiles go straight to y where the level has the kernels
   * (kiln_conv_ct_y_t). */
  if (t->ukernel_y && (t->ukernel2_y || !t->ukernel2)) {
    l.ukernel_y = t->ukernel_y, l.ukernel2_y = t->ukernel2_y;
    l.y_direct = (kiln_conv_ct_y_t){t->y, t->res, t->a->o, t->a->residual_before_act, t->a->act,
                                    KILN_CONV_PANEL_WIDE, 6};
  }
  /* Panel ranges in whole pairs where panels go in pairs. */
  const int64_t step = t->ukernel2 ? 2 : 1, units = kiln_conv_nhwc_cdiv(t->nq, step);
  int64_t q0 = step * (oc * units / t->noc), q1 = step * ((oc + 1) * units / t->noc);
  kiln_conv_ct_run(&l, t0, t1, q0 < t->nq ? q0 : t->nq, q1 < t->nq ? q1 : t->nq, thread);
}

/* The job's tasks: noc panel ranges (of `units` pairs, or panels where
 * they go one at a time) x nb tile blocks (at least nb_min: the blocks the
 * caches allow), each split evenly. A job lasts as long as its busiest
 * thread: ceil(tasks / threads) tasks of the largest size, a task's cost
 * its pairs x tiles plus half a tile per pair (the pair's weights, read
 * again by each block: K x 32 floats against a tile's K x 12 FMAs). Among
 * at least four tasks a thread (the pool hands them out as threads free
 * up, evening out one the machine slows: two a thread ran ResNet-18's
 * stride-2 3x3 convs 5 % slower), the cheapest; ties to the count nearest
 * four a thread. The former rule (at least four tasks a thread, ranges
 * first, cut unevenly) made MobileNetV2's 7x7 960->320 at two threads 8
 * ranges of 1 or 2 pairs (one thread ran 6 pairs' columns, the other 4). */
static void kiln_conv_nhwc_split(int64_t units, int64_t nt, int64_t nb_min, int threads,
                                 int64_t* noc, int64_t* nb) {
  const int64_t b0 = nb_min < nt ? nb_min : nt;
  *noc = 1, *nb = b0;
  if (threads <= 1 || units * nt <= 1) return;
  const int64_t want = 4 * threads < units * nt ? 4 * threads : units * nt;
  int64_t best = -1, best_miss = 0;
  /* Per range (block) size, only the fewest ranges (blocks) that give it:
   * more of the same size only add tasks. A few dozen candidates a call. */
  for (int64_t o = 1; o <= units; ++o) {
    if (o > 1 && kiln_conv_nhwc_cdiv(units, o) == kiln_conv_nhwc_cdiv(units, o - 1)) continue;
    for (int64_t b = b0; b <= nt && b <= b0 + 2 * want; ++b) {
      if (b > b0 && kiln_conv_nhwc_cdiv(nt, b) == kiln_conv_nhwc_cdiv(nt, b - 1)) continue;
      const int64_t tasks = o * b;
      if (tasks < want) continue;
      const int64_t cost = kiln_conv_nhwc_cdiv(tasks, threads) * kiln_conv_nhwc_cdiv(units, o) *
                           (2 * kiln_conv_nhwc_cdiv(nt, b) + 1);
      const int64_t miss = tasks > 4 * threads ? tasks - 4 * threads : 4 * threads - tasks;
      if (best < 0 || cost < best || (cost == best && miss < best_miss))
        best = cost, best_miss = miss, *noc = o, *nb = b;
    }
  }
}

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  int64_t k, per, panels;
  float* out;
} kiln_conv_nhwc_pack_t;

/* Packs panels [task * per, ...) of a dense weight in 16s (panels of all
 * groups are numbered together, as kiln_conv2d_f32_pack_weight lays them). */
static void kiln_conv_nhwc_pack_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_nhwc_pack_t* t = p;
  const int64_t P = KILN_CONV_PANEL_WIDE, og = t->a->o / t->a->groups, nq = (og + P - 1) / P;
  int64_t p0 = (int64_t)task * t->per, p1 = p0 + t->per < t->panels ? p0 + t->per : t->panels;
  for (int64_t pan = p0; pan < p1; ++pan) {
    const int64_t g = pan / nq, q = pan % nq;
    float* dst = t->out + pan * t->k * P;
    for (int64_t i = 0; i < P; ++i) {
      int64_t r = q * P + i;
      const float* row = r < og ? t->a->weight + (g * og + r) * t->k : NULL;
      for (int64_t k = 0; k < t->k; ++k) dst[k * P + i] = row ? row[k] : 0.0f;
    }
  }
}

static void kiln_conv2d_f32_nhwc_run(const kiln_conv2d_f32_args_t* a, int x_nchw,
                                     kiln_pool_t* pool);

void kiln_conv2d_f32_nhwc(const kiln_conv2d_f32_args_t* a, kiln_pool_t* pool) {
  kiln_conv2d_f32_nhwc_run(a, 0, pool);
}

void kiln_conv2d_f32_nhwc_from_nchw(const kiln_conv2d_f32_args_t* a, kiln_pool_t* pool) {
  kiln_conv2d_f32_nhwc_run(a, 1, pool);
}

static void kiln_conv2d_f32_nhwc_run(const kiln_conv2d_f32_args_t* a, int x_nchw,
                                     kiln_pool_t* pool) {
  if (a->n <= 0 || a->o <= 0 || a->ho <= 0 || a->wo <= 0) return;
  if (!x_nchw && kiln_conv2d_f32_nhwc_depthwise(a, pool)) return;
  if (a->x_bf16 || a->y_bf16) {
    /* bf16 storage: the depthwise kernel writes a bf16 y (shape inference
     * allows no other fp32-weight conv one); anything it declined stays
     * correct through the reference. */
    if (x_nchw) kiln_conv2d_f32_nhwc_reference_from_nchw(a);
    else kiln_conv2d_f32_nhwc_reference(a);
    return;
  }
  if (a->weight_packed && a->weight_packed != KILN_CONV_PANEL_WIDE) {
    /* Panels of 6: not this kernel's layout (shape inference refuses
     * them on CONV2D_NHWC); stay correct through the reference. */
    if (x_nchw) kiln_conv2d_f32_nhwc_reference_from_nchw(a);
    else kiln_conv2d_f32_nhwc_reference(a);
    return;
  }
  const int64_t G = a->groups, W = KILN_CONV_PANEL_WIDE, C = a->c;
  kiln_conv_nhwc_ctx_t t;
  memset(&t, 0, sizeof(t));
  t.a = a;
  t.epilogue = kiln_gemm_kernels_for(kiln_cpu_isa())->epilogue;
  t.ukernel = kiln_conv_ukernel_ct_for(kiln_cpu_isa());
  t.ukernel2 = kiln_conv_ukernel_ct2_for(kiln_cpu_isa());
  t.ukernel_np = kiln_conv_ukernel_ct_np_for(kiln_cpu_isa());
  t.ukernel2_np = kiln_conv_ukernel_ct2_np_for(kiln_cpu_isa());
  t.ukernel_y = kiln_conv_ukernel_ct_y_for(kiln_cpu_isa());
  t.ukernel2_y = kiln_conv_ukernel_ct2_y_for(kiln_cpu_isa());
  t.cg = C / G, t.og = a->o / G, t.k = t.cg * a->kh * a->kw, t.howo = a->ho * a->wo;
  t.nq = kiln_conv_nhwc_cdiv(t.og, W);
  /* x is read in place only by 1x1 convs with no padding (all their taps
   * are one pixel's channels); otherwise through the bordered copy, whose
   * pixel pitch is an odd number of 64-byte lines (C >= 16): with C a
   * multiple of 256 (ResNet's 256 and 512) the (c, u, v) taps of a tile,
   * 1 or 2 KiB apart, would otherwise all fall in two L1 sets. */
  const int padded = a->ph > 0 || a->pw > 0 || a->kh > 1 || a->kw > 1 || x_nchw;
  t.x_nchw = x_nchw;
  t.cp = C;
  if (padded && C >= 16) {
    t.cp = (C + 15) & ~(int64_t)15;
    if ((t.cp / 16) % 2 == 0) t.cp += 16;
  }
  t.hp = padded ? (a->ho - 1) * a->sh + (a->kh - 1) * a->dh + 1 : a->h;
  t.wp = padded ? (a->wo - 1) * a->sw + (a->kw - 1) * a->dw + 1 : a->w;
  const int threads = kiln_pool_size(pool);

  t.kc = t.k <= KILN_CONV_NHWC_KC ? t.k
                                  : kiln_conv_nhwc_cdiv(t.k, kiln_conv_nhwc_cdiv(t.k, KILN_CONV_NHWC_KC));
  const int multi = t.kc < t.k;
  t.noc = 1;
  t.nt = kiln_conv_nhwc_cdiv(t.howo, 6);
  /* A block's output rows: each reads sh fresh source rows of wp pixels,
   * plus the window's extra rows once. */
  int64_t per_row = a->sh * t.wp * t.cg;
  int64_t rows = KILN_CONV_NHWC_BLOCK_FLOATS / (per_row > 0 ? per_row : 1) - (a->kh - 1) * a->dh;
  t.tb = kiln_conv_nhwc_cdiv((rows > 1 ? rows : 1) * a->wo, 6);
  if (multi && t.tb > KILN_CONV_NHWC_PART_BYTES / (6 * W * 4))
    t.tb = KILN_CONV_NHWC_PART_BYTES / (6 * W * 4);
  if (t.tb > t.nt) t.tb = t.nt;
  const int64_t step = t.ukernel2 ? 2 : 1;
  kiln_conv_nhwc_split(kiln_conv_nhwc_cdiv(t.nq, step), t.nt, kiln_conv_nhwc_cdiv(t.nt, t.tb),
                       threads, &t.noc, &t.nb);
  t.tb = kiln_conv_nhwc_cdiv(t.nt, t.nb);
  t.part_fl = multi ? kiln_conv_nhwc_align16(t.tb * kiln_conv_ct_part_tile(t.ukernel2)) : 0;

  /* Scratch: tap offsets and pixel bases (int64), packed weights when
   * given dense, partial sums, the padded copy. */
  const int64_t int_fl = kiln_conv_nhwc_align16(2 * (t.k + t.howo));
  const int64_t w_fl = a->weight_packed ? 0 : kiln_conv_nhwc_align16(G * t.nq * t.k * W);
  const int64_t part_all = t.part_fl * threads;
  const int64_t pad_fl = padded ? t.hp * t.wp * t.cp : 0;
  void* blk = NULL;
  float* scratch = kiln_scratch_get(&kiln_conv_nhwc_scratch_,
                                    (size_t)(int_fl + w_fl + part_all + pad_fl) * sizeof(float), &blk);
  if (!scratch) {
    /* No memory for the fast path: stay correct, if slow. */
    if (x_nchw) kiln_conv2d_f32_nhwc_reference_from_nchw(a);
    else kiln_conv2d_f32_nhwc_reference(a);
    return;
  }
  int64_t* off = (int64_t*)(void*)scratch;
  int64_t* vpos = off + t.k;
  for (int64_t c = 0, p = 0; c < t.cg; ++c)
    for (int64_t u = 0; u < a->kh; ++u)
      for (int64_t v = 0; v < a->kw; ++v, ++p)
        off[p] = (u * a->dh * t.wp + v * a->dw) * t.cp + c;
  for (int64_t oy = 0, i = 0; oy < a->ho; ++oy)
    for (int64_t ox = 0; ox < a->wo; ++ox, ++i) vpos[i] = (oy * a->sh * t.wp + ox * a->sw) * t.cp;
  t.off = off, t.vpos = vpos;
  float* wbuf = scratch + int_fl;
  t.part = part_all ? wbuf + w_fl : NULL;
  t.pad = padded ? wbuf + w_fl + part_all : NULL;
  if (a->weight_packed) {
    t.wpk = a->weight;
  } else {
    kiln_conv_nhwc_pack_t pk = {a, t.k, 1, G * t.nq, wbuf};
    pk.per = KILN_CONV_NHWC_PREP_FLOATS / (t.k * W) > 1 ? KILN_CONV_NHWC_PREP_FLOATS / (t.k * W) : 1;
    kiln_pool_parallel_for(pool, (size_t)kiln_conv_nhwc_cdiv(pk.panels, pk.per),
                           kiln_conv_nhwc_pack_task, &pk);
    t.wpk = wbuf;
  }
  const int64_t row_fl = t.wp * t.cp;
  t.pad_rows_per = KILN_CONV_NHWC_PREP_FLOATS / (row_fl > 0 ? row_fl : 1);
  if (t.pad_rows_per < 1) t.pad_rows_per = 1;

  const float* wall = t.wpk;
  for (int64_t n = 0; n < a->n; ++n) {
    t.xn = a->x + n * a->h * a->w * C;
    if (padded)
      kiln_pool_parallel_for(pool, (size_t)kiln_conv_nhwc_cdiv(t.hp, t.pad_rows_per),
                             kiln_conv_nhwc_pad_task, &t);
    for (int64_t g = 0; g < G; ++g) {
      t.src = (padded ? t.pad : t.xn) + g * t.cg;
      t.y = a->y + n * t.howo * a->o + g * t.og;
      t.res = a->residual ? a->residual + n * t.howo * a->o + g * t.og : NULL;
      t.bias = a->bias ? a->bias + g * t.og : NULL;
      t.wpk = wall + g * t.nq * t.k * W;
      kiln_pool_parallel_for(pool, (size_t)(t.nb * t.noc), kiln_conv_nhwc_task, &t);
    }
  }
  kiln_scratch_put(&kiln_conv_nhwc_scratch_, blk);
}
