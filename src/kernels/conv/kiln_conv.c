/* The fast convolution: an implicit GEMM over a prepared copy of x (two
 * microkernel orientations), the depthwise special case, and the stores.
 *
 * Implicit GEMM. For each image and group the conv is the GEMM
 *     y(Og, pixels) = W(Og, K) . col(K, pixels),   K = Cg * kh * kw,
 * but the column matrix is never built. x is first copied into a "prepared"
 * buffer: zero-padded and, for stride s > 1, split into its s x s phases
 * (phase (a, b) holds the padded input's rows a, a + s, ... and columns
 * b, b + s, ...; only the phases some tap reads are kept), each phase plane
 * Hq x Wq with Hq = Ho + (kh - 1) dh / sh and Wq = Wo + (kw - 1) dw / sw.
 * In that buffer the input under tap (c, u, v) of output pixel (oy, ox) is
 *     src[off(c, u, v) + oy * Wq + ox]
 * for a constant off: stride-2 becomes a stride-1 read of the right phase.
 * No im2col buffer (9x the input for a 3x3, through memory twice): two
 * microkernels (kiln_conv_internal.h) read the prepared copy directly.
 *
 * Pixel-vector (weights in panels of 6 channels): a run of 16 consecutive
 * "virtual" pixels v = oy * Wq + ox reads 16 consecutive floats per tap; a
 * tile is 6 channels x 16 virtual pixels, one vector load per tap.
 * Virtual columns ox >= Wo are computed and dropped (Wq - Wo of every Wq:
 * 2 of 58 in ResNet's 56x56 layers, but 2 of 9 at 7x7). Tiles within one
 * output row are written straight into y.
 *
 * Channel-vector (weights in panels of 16 channels, the GEMM's packed-B
 * layout of W^T per group): a tile is any 6 output pixels x 16 channels,
 * the weights a vector per tap and each pixel's input broadcast from its
 * own place, so no lane is wasted on virtual columns; the tile is
 * transposed into NCHW when stored. kiln_conv2d_f32_panel_for picks the
 * kernel per shape (deep or narrow layers: channel-vector).
 *
 * Weights come packed, done once at compile time by the pack pass for the
 * kernel the shape picks, or here per call when the weight is given dense
 * (a computed weight, or the kernel tests).
 *
 * Work split: pixel tiles are grouped into blocks whose share of the
 * prepared input fits in L2 (~192 KiB); a task is a block x a range of
 * weight panels. K is cut into blocks sized for L1 with partial sums kept
 * per tile between blocks, in the GEMM's loop order (see the tasks).
 * Blocks x panel ranges give at least 4 tasks per thread, so the small
 * late layers (7x7 pixels, one block, 32 panels of 16) split evenly.
 *
 * Epilogue: the bias seeds the accumulators; relu and the residual are
 * applied as the tile is stored (other activations through the GEMM's
 * vectorised epilogue). Every element of y is written once, by the tile
 * that owns it, after it read its residual, so a residual aliasing y needs
 * no snapshot.
 *
 * Scratch (offsets, packed weights, prepared input, depthwise row buffers)
 * is one block kept in a one-slot cache between calls, so steady state does
 * not allocate. */
#include <stdlib.h>
#include <string.h>

#include "base/kiln_cpu.h"
#include "base/kiln_scratch.h"
#include "kernels/conv/kiln_conv.h"
#include "kernels/conv/kiln_conv_internal.h"
#include "kernels/conv/kiln_conv_planes.h"
#include "kernels/gemm/kiln_gemm_internal.h"

#define KILN_CONV_CACHE_CAP ((size_t)64 << 20)
/* Floats of prepared input a block of tiles should touch (192 KiB: half of
 * a 512 KiB L2, the rest for a weight panel). */
#ifndef KILN_CONV_BLOCK_FLOATS
#define KILN_CONV_BLOCK_FLOATS ((int64_t)48 << 10)
#endif
/* A tile's inputs for one K block should take at most this much of L1;
 * a panel range's weights for one K block, and a task's partial sums, this
 * much of L2. */
#ifndef KILN_CONV_L1_BYTES
#define KILN_CONV_L1_BYTES ((int64_t)20 << 10)
#endif
#define KILN_CONV_W_BYTES ((int64_t)192 << 10)
#define KILN_CONV_PART_BYTES ((int64_t)64 << 10)
/* Taps per K block of the channel-vector kernel: a kc x 16 weight block is
 * 64 kc bytes of L1. */
#ifndef KILN_CONV_CT_KC
#define KILN_CONV_CT_KC 256
#endif
/* Channel-vector blocks may touch this many times the block budget of
 * prepared input: every block streams all the weights (megabytes in the
 * late layers). */
#ifndef KILN_CONV_CT_BLOCKS
#define KILN_CONV_CT_BLOCKS 2
#endif
/* How much more of its multiply-adds the channel-vector kernel must put on
 * real outputs to be chosen (kiln_conv2d_f32_panel_for). */
#ifndef KILN_CONV_CT_MARGIN
#define KILN_CONV_CT_MARGIN 1.1
#endif
/* Floats per preparation / packing task, so hand-out stays cheap. */
#define KILN_CONV_PREP_FLOATS ((int64_t)16 << 10)

/* ---- scratch, cached between calls --------------------------------------- */

static kiln_scratch_cache_t kiln_conv_scratch_ = KILN_SCRATCH_CACHE_INIT(KILN_CONV_CACHE_CAP);

/* ---- kernels ----------------------------------------------------------------- */

void kiln_f32_conv_ukernel_6x16__generic(int64_t k, const float* w, const float* src,
                                         const int64_t* off, const float* bias6, const float* cin,
                                         const kiln_conv_store_t* st) {
  float acc[KILN_CONV_PANEL_O][KILN_CONV_TILE_W];
  for (int i = 0; i < KILN_CONV_PANEL_O; ++i)
    for (int l = 0; l < KILN_CONV_TILE_W; ++l)
      acc[i][l] = cin ? cin[i * KILN_CONV_TILE_W + l] : bias6[i];
  for (int64_t p = 0; p < k; ++p) {
    const float* b = src + off[p];
    for (int i = 0; i < KILN_CONV_PANEL_O; ++i) {
      const float wv = w[p * KILN_CONV_PANEL_O + i];
      for (int l = 0; l < KILN_CONV_TILE_W; ++l) acc[i][l] += wv * b[l];
    }
  }
  for (int i = 0; i < KILN_CONV_PANEL_O; ++i) {
    float* d = st->out + i * st->ldo;
    const float* r = st->res ? st->res + i * st->ldr : NULL;
    for (int l = 0; l < KILN_CONV_TILE_W; ++l) {
      float v = acc[i][l];
      if (r && st->res_first) v += r[l];
      if (st->relu) v = v < 0.0f ? 0.0f : v; /* NaN stays NaN */
      if (r && !st->res_first) v += r[l];
      d[l] = v;
    }
  }
}

void kiln_f32_conv_ct_ukernel_6x16__generic(int64_t k, const float* w, const float* const* px,
                                            const int64_t* off, const float* bias16,
                                            const float* cin, float* out) {
  float acc[6][KILN_CONV_PANEL_WIDE];
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < KILN_CONV_PANEL_WIDE; ++j)
      acc[i][j] = cin ? cin[i * KILN_CONV_PANEL_WIDE + j] : bias16[j];
  for (int64_t p = 0; p < k; ++p) {
    const float* wr = w + p * KILN_CONV_PANEL_WIDE;
    for (int i = 0; i < 6; ++i) {
      const float xv = px[i][off[p]];
      for (int j = 0; j < KILN_CONV_PANEL_WIDE; ++j) acc[i][j] += xv * wr[j];
    }
  }
  memcpy(out, acc, sizeof(acc));
}

void kiln_f32_conv_ct_store6__generic(const float* tmp, float* y, int64_t ldy, int64_t rows,
                                      const float* res, int res_first, int relu) {
  for (int64_t j = 0; j < rows; ++j) {
    float* d = y + j * ldy;
    const float* r = res ? res + j * ldy : NULL;
    for (int i = 0; i < 6; ++i) {
      float v = tmp[i * KILN_CONV_PANEL_WIDE + j];
      if (r && res_first) v += r[i];
      if (relu) v = v < 0.0f ? 0.0f : v; /* NaN stays NaN */
      if (r && !res_first) v += r[i];
      d[i] = v;
    }
  }
}

static kiln_isa_t kiln_conv_level(kiln_isa_t isa) {
  return kiln_isa_variant_level(KILN_ISA_VARIANT_MASK(KILN_CONV_ISAS), isa);
}

kiln_conv_ct_store6_fn kiln_conv_ct_store6_for(kiln_isa_t isa) {
  static const kiln_conv_ct_store6_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_conv_ct_store6);
  return v[kiln_conv_level(isa)];
}

kiln_conv_ukernel_ct_fn kiln_conv_ukernel_ct_for(kiln_isa_t isa) {
  static const kiln_conv_ukernel_ct_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_conv_ct_ukernel_6x16);
  return v[kiln_conv_level(isa)];
}

kiln_conv_ukernel_ct2_fn kiln_conv_ukernel_ct2_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_conv_level(isa) == KILN_ISA_AVX512) return kiln_f32_conv_ct_ukernel_6x32__avx512;
#endif
  (void)isa;
  return NULL;
}

kiln_conv_ukernel_ct_np_fn kiln_conv_ukernel_ct_np_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_conv_level(isa) == KILN_ISA_AVX512) return kiln_f32_conv_ct_ukernel_6x16_np__avx512;
#endif
  (void)isa;
  return NULL;
}

kiln_conv_ukernel_ct2_np_fn kiln_conv_ukernel_ct2_np_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_conv_level(isa) == KILN_ISA_AVX512) return kiln_f32_conv_ct_ukernel_6x32_np__avx512;
#endif
  (void)isa;
  return NULL;
}

kiln_conv_ukernel_ct_y_fn kiln_conv_ukernel_ct_y_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_conv_level(isa) == KILN_ISA_AVX512) return kiln_f32_conv_ct_ukernel_6x16_y__avx512;
  if (kiln_conv_level(isa) == KILN_ISA_AVX2) return kiln_f32_conv_ct_ukernel_6x16_y__avx2;
#endif
  (void)isa;
  return NULL;
}

kiln_conv_ukernel_ct2_y_fn kiln_conv_ukernel_ct2_y_for(kiln_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  if (kiln_conv_level(isa) == KILN_ISA_AVX512) return kiln_f32_conv_ct_ukernel_6x32_y__avx512;
#endif
  (void)isa;
  return NULL;
}

kiln_conv_ukernel_fn kiln_conv_ukernel_for(kiln_isa_t isa) {
  static const kiln_conv_ukernel_fn v[KILN_ISA_COUNT] =
      KILN_ISA_VARIANT_TABLE(KILN_CONV_ISAS, kiln_f32_conv_ukernel_6x16);
  return v[kiln_conv_level(isa)];
}

/* ---- weight packing ---------------------------------------------------------- */

size_t kiln_conv2d_f32_packed_size(int64_t o, int64_t k, int64_t groups, int panel) {
  if (o < 0 || k < 0 || groups < 1 || o % groups) return 0;
  if (panel != KILN_CONV_PANEL_O && panel != KILN_CONV_PANEL_WIDE) return 0;
  const int64_t P = panel, nq = (o / groups + P - 1) / P;
  const int64_t lim = INT64_MAX / (int64_t)sizeof(float) / P;
  if (nq && groups > lim / nq) return 0;
  if (k && groups * nq > lim / k) return 0;
  return (size_t)(groups * nq * k * P) * sizeof(float);
}

static void kiln_conv_pack_panels(int64_t o, int64_t k, int64_t groups, int64_t P,
                                  const float* w, int64_t pan0, int64_t pan1, float* out) {
  const int64_t og = o / groups, nq = (og + P - 1) / P;
  for (int64_t pan = pan0; pan < pan1; ++pan) {
    const int64_t g = pan / nq, q = pan % nq;
    float* dst = out + pan * k * P;
    for (int64_t i = 0; i < P; ++i) {
      int64_t r = q * P + i;
      if (r >= og) {
        for (int64_t p = 0; p < k; ++p) dst[p * P + i] = 0.0f;
        continue;
      }
      const float* row = w + (g * og + r) * k;
      for (int64_t p = 0; p < k; ++p) dst[p * P + i] = row[p];
    }
  }
}

void kiln_conv2d_f32_pack_weight(int64_t o, int64_t k, int64_t groups, int panel,
                                 const float* w, float* out) {
  const int64_t nq = (o / groups + panel - 1) / panel;
  kiln_conv_pack_panels(o, k, groups, panel, w, 0, groups * nq, out);
}

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  int64_t k, p, per, panels;
  float* out;
} kiln_conv_pack_t;

static void kiln_conv_pack_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_pack_t* t = p;
  int64_t p0 = (int64_t)task * t->per, p1 = p0 + t->per < t->panels ? p0 + t->per : t->panels;
  kiln_conv_pack_panels(t->a->o, t->k, t->a->groups, t->p, t->a->weight, p0, p1, t->out);
}

/* ---- depthwise: one (n, c) plane per task (kiln_conv_planes.c) ---------- */

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  kiln_conv_dw_plane_fn plane;
  float* tmp; /* per thread, `per` floats (kiln_conv_dw_scratch_floats) */
  int64_t per;
} kiln_conv_dw_t;

static void kiln_conv_dw_task(void* p, size_t task, int thread) {
  const kiln_conv_dw_t* t = p;
  t->plane(t->a, (int64_t)task, t->tmp + (int64_t)thread * t->per);
}

static void kiln_conv_depthwise(const kiln_conv2d_f32_args_t* a, kiln_pool_t* pool) {
  void* blk = NULL;
  const int64_t per = (kiln_conv_dw_scratch_floats(a) + 15) & ~(int64_t)15;
  float* tmp = kiln_scratch_get(&kiln_conv_scratch_,
                                (size_t)(kiln_pool_size(pool) * per) * sizeof(float), &blk);
  if (!tmp) {
    kiln_conv2d_f32_reference(a);
    return;
  }
  kiln_conv_dw_t t = {a, kiln_conv_dw_plane_for(kiln_cpu_isa()), tmp, per};
  kiln_pool_parallel_for(pool, (size_t)(a->n * a->c), kiln_conv_dw_task, &t);
  kiln_scratch_put(&kiln_conv_scratch_, blk);
}

/* ---- the implicit GEMM ------------------------------------------------------ */

typedef struct {
  const kiln_conv2d_f32_args_t* a;
  kiln_gemm_epilogue_fn epilogue;
  kiln_conv_ukernel_fn ukernel;
  kiln_conv_ukernel_ct_fn ukernel_ct;
  kiln_conv_ukernel_ct2_fn ukernel_ct2;
  kiln_conv_ct_store6_fn store6;
  int64_t P;                /* weight panel width: 6 pixel-vector, 16 channel-vector */
  const int64_t* vpos;      /* channel-vector: each output pixel's virtual index */
  int64_t cg, og, k, nq, howo;
  int64_t hq, wq, ps;       /* phase plane: hq x wq, ps = hq * wq floats */
  int64_t nra, nrb;         /* row / column phases kept */
  const int64_t *pra, *prb; /* the kept phases' row / column offsets in [0, s) */
  int64_t cstride;          /* prepared floats per channel: nra * nrb * ps */
  const int64_t* off;       /* K tap offsets */
  const float* wpk;         /* packed weights, every group */
  float* src;               /* the prepared input of the current (image, group) */
  int64_t prep_per;         /* channels per preparation task */
  int64_t nt, tb, noc;      /* tiles, tiles per block, panel ranges per block */
  int64_t kc;               /* taps per K block */
  float* part;              /* partial sums, part_fl floats per thread, or NULL */
  int64_t part_fl;
  /* The current (image, group): */
  int64_t g;
  const float* x;    /* its first input channel */
  float* y;          /* its first output channel */
  const float* res;  /* likewise, or NULL */
  const float* bias; /* its first bias, or NULL */
} kiln_conv_ctx_t;

/* Fills the prepared planes of channels [task * prep_per, ...): zero
 * padding by whole runs, the in-bounds part by row copies (stride 1) or a
 * strided gather of one phase (stride > 1). */
static void kiln_conv_prep_task(void* p, size_t task, int thread) {
  (void)thread;
  const kiln_conv_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t H = a->h, W = a->w, sh = a->sh, sw = a->sw, wq = t->wq;
  int64_t c0 = (int64_t)task * t->prep_per, c1 = c0 + t->prep_per < t->cg ? c0 + t->prep_per : t->cg;
  for (int64_t c = c0; c < c1; ++c) {
    const float* xc = t->x + c * H * W;
    for (int64_t ai = 0; ai < t->nra; ++ai) {
      for (int64_t bi = 0; bi < t->nrb; ++bi) {
        float* plane = t->src + c * t->cstride + (ai * t->nrb + bi) * t->ps;
        /* Columns q of this phase read input column q * sw + b - pw. */
        int64_t cb = t->prb[bi] - a->pw;
        int64_t qlo = cb >= 0 ? 0 : (-cb + sw - 1) / sw;
        int64_t qhi = W - 1 - cb < 0 ? 0 : (W - 1 - cb) / sw + 1;
        if (qhi > wq) qhi = wq;
        if (qlo > qhi) qlo = qhi;
        for (int64_t r = 0; r < t->hq; ++r) {
          float* dst = plane + r * wq;
          int64_t row = r * sh + t->pra[ai] - a->ph;
          if (row < 0 || row >= H) {
            memset(dst, 0, (size_t)wq * sizeof(float));
            continue;
          }
          const float* xr = xc + row * W + cb;
          if (qlo) memset(dst, 0, (size_t)qlo * sizeof(float));
          if (sw == 1) {
            memcpy(dst + qlo, xr + qlo, (size_t)(qhi - qlo) * sizeof(float));
          } else {
            for (int64_t q = qlo; q < qhi; ++q) dst[q] = xr[q * sw];
          }
          if (qhi < wq) memset(dst + qhi, 0, (size_t)(wq - qhi) * sizeof(float));
        }
      }
    }
  }
}

/* Writes a finished tile (rows output channels from o0, virtual pixels
 * [v0, v0 + 16)) to y: each run of valid pixels on one output row through
 * the epilogue. */
static void kiln_conv_store_tile(const kiln_conv_ctx_t* t, int64_t o0, int64_t rows, int64_t v0,
                                 float* tmp) {
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t wq = t->wq, wo = a->wo, howo = t->howo, T = KILN_CONV_TILE_W;
  int64_t v = v0, vend = v0 + T < a->ho * wq ? v0 + T : a->ho * wq;
  while (v < vend) {
    int64_t oy = v / wq, ox = v - oy * wq;
    if (ox >= wo) {
      v = (oy + 1) * wq;
      continue;
    }
    int64_t len = wo - ox < vend - v ? wo - ox : vend - v;
    int64_t pos = o0 * howo + oy * wo + ox;
    float* s = tmp + (v - v0);
    const float* r = t->res ? t->res + pos : NULL;
    if (r && a->residual_before_act) {
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < len; ++j) s[i * T + j] += r[i * howo + j];
      r = NULL;
    }
    t->epilogue(rows, len, s, T, t->y + pos, howo, NULL, r, howo, a->act);
    v += len;
  }
}

static void kiln_conv_compute_task(void* p, size_t task, int thread) {
  const kiln_conv_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t P = KILN_CONV_PANEL_O, T = KILN_CONV_TILE_W, TP = P * T, K = t->k;
  int64_t bi = (int64_t)task / t->noc, oc = (int64_t)task % t->noc;
  int64_t t0 = bi * t->tb, t1 = t0 + t->tb < t->nt ? t0 + t->tb : t->nt;
  int64_t q0 = oc * t->nq / t->noc, q1 = (oc + 1) * t->nq / t->noc, nqc = q1 - q0;
  _Alignas(64) float tmp[KILN_CONV_PANEL_O * KILN_CONV_TILE_W];
  float bias6[KILN_CONV_PANEL_O];
  /* Tiles that the microkernel can write straight into y: relu or no
   * activation, and 16 valid pixels on one output row. */
  const int direct_act = a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU;
  /* K blocks outermost: a tile's inputs for kc taps stay in L1 while every
   * panel of the range passes over them, and the range's weights for the
   * block stay in L2 across the tiles. Partial sums wait in part (per
   * thread, tile x panel) between blocks. */
  float* part = t->part ? t->part + (int64_t)thread * t->part_fl : NULL;
  for (int64_t kb = 0; kb < K; kb += t->kc) {
    int64_t kcur = K - kb < t->kc ? K - kb : t->kc;
    int first = kb == 0, last = kb + kcur == K;
    for (int64_t ti = t0; ti < t1; ++ti) {
      int64_t oy = ti * T / t->wq, ox = ti * T - oy * t->wq;
      int row_tile = direct_act && ox + T <= a->wo;
      for (int64_t q = q0; q < q1; ++q) {
        const float* wp = t->wpk + ((t->g * t->nq + q) * K + kb) * P;
        int64_t rows = t->og - q * P < P ? t->og - q * P : P;
        float* acc = part ? part + ((ti - t0) * nqc + (q - q0)) * TP : NULL;
        if (first)
          for (int64_t i = 0; i < P; ++i) bias6[i] = t->bias && i < rows ? t->bias[q * P + i] : 0.0f;
        kiln_conv_store_t st = {last ? tmp : acc, T, NULL, 0, 0, 0};
        int direct = last && row_tile && rows == P;
        if (direct) {
          int64_t pos = q * P * t->howo + oy * a->wo + ox;
          st.out = t->y + pos, st.ldo = t->howo;
          st.res = t->res ? t->res + pos : NULL, st.ldr = t->howo;
          st.relu = a->act == KILN_ACT_RELU, st.res_first = a->residual_before_act;
        }
        t->ukernel(kcur, wp, t->src + ti * T, t->off + kb, bias6, first ? NULL : acc, &st);
        if (last && !direct) kiln_conv_store_tile(t, q * P, rows, ti * T, tmp);
      }
    }
  }
}

/* Writes a finished channel-vector tile (np pixels at pos[], rows channels
 * from o0; tmp is pixel-major) to y: the residual gathered first (y may be
 * the residual), then the epilogue over the tile, then the scatter. */
static void kiln_conv_ct_store(const kiln_conv_ctx_t* t, int64_t o0, int64_t rows,
                               const int64_t* pos, int64_t np, float* tmp, float* rt) {
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t W = KILN_CONV_PANEL_WIDE, howo = t->howo;
  const float* r = NULL;
  if (t->res) {
    for (int64_t j = 0; j < rows; ++j) {
      const float* rj = t->res + (o0 + j) * howo;
      for (int64_t i = 0; i < np; ++i) rt[i * W + j] = rj[pos[i]];
    }
    if (a->residual_before_act) {
      for (int64_t i = 0; i < np; ++i)
        for (int64_t j = 0; j < rows; ++j) tmp[i * W + j] += rt[i * W + j];
    } else {
      r = rt;
    }
  }
  if (r || a->act != KILN_ACT_NONE) t->epilogue(np, rows, tmp, W, tmp, W, NULL, r, W, a->act);
  for (int64_t j = 0; j < rows; ++j) {
    float* yj = t->y + (o0 + j) * howo;
    for (int64_t i = 0; i < np; ++i) yj[pos[i]] = tmp[i * W + j];
  }
}

/* Stores a finished channel-vector tile (kiln_conv_ct_loop_t's store):
 * six pixels (consecutive in y, across rows too) with relu or no
 * activation are transposed and stored in registers; the last tile and
 * other activations go through the general scatter. */
static void kiln_conv_ct_store_tile(const void* p, int64_t q, int64_t rows, int64_t ti,
                                    int64_t np, float* tmp) {
  const kiln_conv_ctx_t* t = p;
  const kiln_conv2d_f32_args_t* a = t->a;
  const int64_t W = KILN_CONV_PANEL_WIDE, M = 6;
  if (np == M && (a->act == KILN_ACT_NONE || a->act == KILN_ACT_RELU)) {
    int64_t at = q * W * t->howo + ti * M;
    t->store6(tmp, t->y + at, t->howo, rows, t->res ? t->res + at : NULL,
              a->residual_before_act, a->act == KILN_ACT_RELU);
    return;
  }
  _Alignas(64) float rt[6 * KILN_CONV_PANEL_WIDE];
  int64_t pos[6];
  for (int64_t i = 0; i < np; ++i) pos[i] = ti * M + i;
  kiln_conv_ct_store(t, q * W, rows, pos, np, tmp, rt);
}

/* Channel-vector tasks: a block of tiles x a range of 16-channel panels,
 * through the loop the NHWC driver shares (kiln_conv_ct.c). */
static void kiln_conv_ct_task(void* p, size_t task, int thread) {
  const kiln_conv_ctx_t* t = p;
  int64_t bi = (int64_t)task / t->noc, oc = (int64_t)task % t->noc;
  int64_t t0 = bi * t->tb, t1 = t0 + t->tb < t->nt ? t0 + t->tb : t->nt;
  kiln_conv_ct_loop_t l = {t->ukernel_ct, t->ukernel_ct2, t->wpk + t->g * t->nq * t->k * KILN_CONV_PANEL_WIDE,
                           t->bias, t->src, t->vpos, t->off, t->k, t->kc, t->og, t->howo,
                           t->part, t->part_fl, kiln_conv_ct_store_tile, t, NULL, NULL, NULL, NULL,
                           {NULL, NULL, 0, 0, KILN_ACT_NONE, 0, 0}};
  kiln_conv_ct_run(&l, t0, t1, oc * t->nq / t->noc, (oc + 1) * t->nq / t->noc, thread);
}

/* Index of `val` in list[0, *n), appending it when absent. */
static int64_t kiln_conv_phase_index(int64_t* list, int64_t* n, int64_t val) {
  for (int64_t i = 0; i < *n; ++i)
    if (list[i] == val) return i;
  list[*n] = val;
  return (*n)++;
}

/* How many distinct phases (i * d) % s, i < k, the taps read. */
static int64_t kiln_conv_phase_count(int64_t k, int64_t d, int64_t s) {
  int64_t n = 0;
  for (int64_t i = 0; i < k; ++i) {
    int seen = 0;
    for (int64_t j = 0; j < i && !seen; ++j) seen = j * d % s == i * d % s;
    n += !seen;
  }
  return n;
}

static int64_t kiln_conv_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t kiln_conv_align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

/* The channel-vector kernel is the GEMM's loop with the weights as its
 * packed B: measured on ResNet-18's layers (bench/kernels/bench_conv) it
 * matches or beats the pixel-vector one from K = 256 taps up, and on
 * outputs at most 16 wide, where pixel-vector tiles straddle rows (no
 * direct row stores, and Wq - Wo wasted columns in every Wq). Below that
 * its per-tile scatter (96 scalar stores against 12 K multiply-adds)
 * shows: ResNet's 7x7 stem (K = 147, 112 wide) is 1.3x faster pixel-vector.
 * Otherwise the kernel that wastes clearly fewer lanes: pixel-vector tiles
 * cover Ho x Wq virtual pixels in 16s and channels in 6s, channel-vector
 * tiles the Ho x Wo pixels in 6s and channels in 16s. */
int kiln_conv2d_f32_panel_for(const kiln_conv2d_f32_args_t* a) {
  if (a->groups < 1 || a->o < a->groups || a->ho < 1 || a->wo < 1 || a->sw < 1 || a->dw < 1)
    return KILN_CONV_PANEL_O;
  const int64_t og = a->o / a->groups, howo = a->ho * a->wo;
  const int64_t wq = a->wo + (a->kw - 1) * a->dw / a->sw;
  double pv = (double)howo / (double)(kiln_conv_cdiv(a->ho * wq, KILN_CONV_TILE_W) *
                                      KILN_CONV_TILE_W) *
              (double)og / (double)(kiln_conv_cdiv(og, KILN_CONV_PANEL_O) * KILN_CONV_PANEL_O);
  double ct = (double)howo / (double)(kiln_conv_cdiv(howo, 6) * 6) * (double)og /
              (double)(kiln_conv_cdiv(og, KILN_CONV_PANEL_WIDE) * KILN_CONV_PANEL_WIDE);
  const int64_t k = a->c / a->groups * a->kh * a->kw;
  return k >= 256 || a->wo <= 16 || ct > pv * KILN_CONV_CT_MARGIN ? KILN_CONV_PANEL_WIDE
                                                                   : KILN_CONV_PANEL_O;
}

void kiln_conv2d_f32(const kiln_conv2d_f32_args_t* a, kiln_pool_t* pool) {
  if (a->n <= 0 || a->o <= 0 || a->ho <= 0 || a->wo <= 0) return;
  const int64_t G = a->groups, T = KILN_CONV_TILE_W;
  if (G == a->c && G == a->o) {
    kiln_conv_depthwise(a, pool);
    return;
  }
  kiln_conv_ctx_t t;
  memset(&t, 0, sizeof(t));
  t.a = a;
  t.epilogue = kiln_gemm_kernels_for(kiln_cpu_isa())->epilogue;
  t.ukernel = kiln_conv_ukernel_for(kiln_cpu_isa());
  t.ukernel_ct = kiln_conv_ukernel_ct_for(kiln_cpu_isa());
  t.ukernel_ct2 = kiln_conv_ukernel_ct2_for(kiln_cpu_isa());
  t.store6 = kiln_conv_ct_store6_for(kiln_cpu_isa());
  const int64_t P = a->weight_packed ? a->weight_packed : kiln_conv2d_f32_panel_for(a);
  const int ct = P == KILN_CONV_PANEL_WIDE;
  t.P = P;
  t.cg = a->c / G, t.og = a->o / G, t.k = t.cg * a->kh * a->kw, t.howo = a->ho * a->wo;
  t.nq = kiln_conv_cdiv(t.og, P);
  t.hq = a->ho + (a->kh - 1) * a->dh / a->sh;
  t.wq = a->wo + (a->kw - 1) * a->dw / a->sw;
  t.ps = t.hq * t.wq;
  t.nra = kiln_conv_phase_count(a->kh, a->dh, a->sh);
  t.nrb = kiln_conv_phase_count(a->kw, a->dw, a->sw);
  t.cstride = t.nra * t.nrb * t.ps;
  const int threads = kiln_pool_size(pool);

  /* Blocking (see the top of the file). */
  int64_t per_row = t.cg * t.nra * t.nrb * t.wq; /* prepared floats per output row */
  int64_t rows = KILN_CONV_BLOCK_FLOATS / (per_row > 0 ? per_row : 1) - (t.hq - a->ho);
  if (rows < 1) rows = 1;
  int multi;
  if (ct) {
    /* Channel-vector: K blocks of the GEMM's 256 (a kc x 16 weight block
     * is 16 KiB of L1); tiles of 6 pixels, a block's rows of prepared input
     * within the budget, partial sums per tile. */
    t.kc = t.k <= KILN_CONV_CT_KC ? t.k : kiln_conv_cdiv(t.k, kiln_conv_cdiv(t.k, KILN_CONV_CT_KC));
    multi = t.kc < t.k;
    t.noc = 1;
    t.nt = kiln_conv_cdiv(t.howo, 6);
    int64_t rows_ct = KILN_CONV_CT_BLOCKS * KILN_CONV_BLOCK_FLOATS / (per_row > 0 ? per_row : 1) - (t.hq - a->ho);
    t.tb = kiln_conv_cdiv((rows_ct > 1 ? rows_ct : 1) * a->wo, 6);
    if (multi && t.tb > KILN_CONV_PART_BYTES / (6 * KILN_CONV_PANEL_WIDE * 4))
      t.tb = KILN_CONV_PART_BYTES / (6 * KILN_CONV_PANEL_WIDE * 4);
  } else {
    /* Pixel-vector. K blocks: a tile reads, per input channel, kh rows of
     * each column phase, each a run of 16 pixels plus the column taps'
     * spread: keep kc taps' worth within the L1 budget. */
    int64_t ch_bytes = a->kh * t.nrb * (2 * T + (a->kw - 1) * a->dw / a->sw) * 4;
    int64_t kch = KILN_CONV_L1_BYTES / ch_bytes > 1 ? KILN_CONV_L1_BYTES / ch_bytes : 1;
    t.kc = kch * a->kh * a->kw;
    if (t.kc >= t.k) t.kc = t.k;
    else t.kc = kiln_conv_cdiv(t.k, kiln_conv_cdiv(t.k, t.kc)); /* even blocks */
    multi = t.kc < t.k;
    /* Panel ranges: a range's weights for one K block within the L2 budget. */
    int64_t nqc = KILN_CONV_W_BYTES / (t.kc * P * 4);
    if (nqc < 1) nqc = 1;
    t.noc = kiln_conv_cdiv(t.nq, nqc);
    /* Tile blocks: the block's rows of prepared input within the budget,
     * and with several K blocks its partial sums too. */
    t.nt = kiln_conv_cdiv(a->ho * t.wq, T);
    t.tb = kiln_conv_cdiv(rows * t.wq, T);
    if (multi) {
      int64_t tb = KILN_CONV_PART_BYTES / (kiln_conv_cdiv(t.nq, t.noc) * P * T * 4);
      if (t.tb > tb) t.tb = tb > 1 ? tb : 1;
    }
  }
  if (t.tb > t.nt) t.tb = t.nt;
  int64_t nb = kiln_conv_cdiv(t.nt, t.tb);
  /* Enough tasks that the threads' shares come out even (the late layers
   * have one block of tiles and many panels). */
  while (threads > 1 && nb * t.noc < 4 * threads && t.noc < t.nq) t.noc++;
  if (ct) t.part_fl = multi ? kiln_conv_align16(t.tb * kiln_conv_ct_part_tile(t.ukernel_ct2)) : 0;
  else t.part_fl = multi ? kiln_conv_align16(t.tb * kiln_conv_cdiv(t.nq, t.noc) * P * T) : 0;

  /* Scratch: tap offsets, phase tables and (channel-vector) pixel places
   * (int64), packed weights when given dense, partial sums, the prepared
   * input and its tail slack: the last pixel-vector tile's garbage lanes
   * read up to wq - wo + 15 floats past the last plane. */
  const int64_t n_int = t.k + 2 * (a->kh + a->kw) + (ct ? t.howo : 0);
  const int64_t int_fl = kiln_conv_align16(2 * n_int);
  const int64_t w_fl = a->weight_packed ? 0 : kiln_conv_align16(G * t.nq * t.k * P);
  const int64_t part_all = t.part_fl * threads;
  const int64_t src_fl = t.cg * t.cstride + t.wq + 2 * T;
  void* blk = NULL;
  float* scratch = kiln_scratch_get(
      &kiln_conv_scratch_, (size_t)(int_fl + w_fl + part_all + src_fl) * sizeof(float), &blk);
  if (!scratch) {
    /* No memory for the fast path: stay correct, if slow. */
    kiln_conv2d_f32_reference(a);
    return;
  }
  int64_t* ints = (int64_t*)(void*)scratch;
  int64_t *off = ints, *pra = off + t.k, *prb = pra + a->kh, *pu = prb + a->kw, *pv = pu + a->kh;
  int64_t nra = 0, nrb = 0;
  for (int64_t u = 0; u < a->kh; ++u) pu[u] = kiln_conv_phase_index(pra, &nra, u * a->dh % a->sh);
  for (int64_t v = 0; v < a->kw; ++v) pv[v] = kiln_conv_phase_index(prb, &nrb, v * a->dw % a->sw);
  t.pra = pra, t.prb = prb;
  for (int64_t c = 0, p = 0; c < t.cg; ++c)
    for (int64_t u = 0; u < a->kh; ++u)
      for (int64_t v = 0; v < a->kw; ++v, ++p)
        off[p] = c * t.cstride + (pu[u] * t.nrb + pv[v]) * t.ps + u * a->dh / a->sh * t.wq +
                 v * a->dw / a->sw;
  t.off = off;
  if (ct) {
    int64_t* vpos = pv + a->kw;
    for (int64_t oy = 0, i = 0; oy < a->ho; ++oy)
      for (int64_t ox = 0; ox < a->wo; ++ox, ++i) vpos[i] = oy * t.wq + ox;
    t.vpos = vpos;
  }
  float* wbuf = scratch + int_fl;
  t.part = part_all ? wbuf + w_fl : NULL;
  t.src = wbuf + w_fl + part_all;
  memset(t.src + t.cg * t.cstride, 0, (size_t)(t.wq + 2 * T) * sizeof(float));
  if (a->weight_packed) {
    t.wpk = a->weight;
  } else {
    kiln_conv_pack_t pk = {a, t.k, P, 1, G * t.nq, wbuf};
    pk.per = KILN_CONV_PREP_FLOATS / (t.k * P) > 1 ? KILN_CONV_PREP_FLOATS / (t.k * P) : 1;
    kiln_pool_parallel_for(pool, (size_t)kiln_conv_cdiv(pk.panels, pk.per), kiln_conv_pack_task,
                           &pk);
    t.wpk = wbuf;
  }
  t.prep_per = KILN_CONV_PREP_FLOATS / (t.cstride > 0 ? t.cstride : 1);
  if (t.prep_per < 1) t.prep_per = 1;

  for (int64_t n = 0; n < a->n; ++n) {
    for (int64_t g = 0; g < G; ++g) {
      t.g = g;
      t.x = a->x + (n * a->c + g * t.cg) * a->h * a->w;
      t.y = a->y + (n * a->o + g * t.og) * t.howo;
      t.res = a->residual ? a->residual + (n * a->o + g * t.og) * t.howo : NULL;
      t.bias = a->bias ? a->bias + g * t.og : NULL;
      kiln_pool_parallel_for(pool, (size_t)kiln_conv_cdiv(t.cg, t.prep_per), kiln_conv_prep_task,
                             &t);
      kiln_pool_parallel_for(pool, (size_t)(nb * t.noc), ct ? kiln_conv_ct_task
                                                            : kiln_conv_compute_task, &t);
    }
  }
  kiln_scratch_put(&kiln_conv_scratch_, blk);
}
