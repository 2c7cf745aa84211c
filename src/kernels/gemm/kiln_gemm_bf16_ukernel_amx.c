/* bf16 compute on AMX tiles (TDPBF16PS): C(fp32) += A(bf16) . B(bf16).
 *
 * Eight tile registers of 16 rows x 64 bytes, one fixed configuration:
 * tmm0-3 hold a 32 x 32 fp32 C block (2 x 2 tiles of 16 x 16), tmm4-5 two
 * 16-row A tiles (16 rows x 32 bf16 of K), tmm6-7 two B tiles (16 pair rows
 * x 16 columns: one 32-K step of a VNNI panel, 1 KiB contiguous, exactly
 * kiln_gemm_bf16_vnni_pack_b's layout). Each K step of 32 is 4 tile loads
 * and 4 TDPBF16PS (16 x 16 x 32 multiply-adds each). K goes in blocks of
 * KILN_AMX_KSTEPS steps, the C block parked in an fp32 buffer between
 * them; after the last, it goes through the fp32 epilogue once.
 *
 * The tile configuration (kiln_amx_tiles.h) is loaded at the start of
 * every block (each task may run on any thread) and the tiles released at
 * its end.
 *
 * K tails: A rows are zero past K up to ka (a multiple of 32); B's last
 * partial step (kp % 32 rows) is copied into a zeroed 1 KiB tile per panel
 * once per column strip, so no tile load reads past the panel, and
 * 0 x (whatever followed) cannot make a NaN. M and N tails use 1 of the 2
 * A or B tiles; rows/columns past the block are computed on zero padding
 * and dropped by the epilogue.
 *
 * Compiled only with the AMX flags (meson: isa_amx_args) and called only
 * when kiln_cpu_bf16() has KILN_CPU_BF16_AMX (the OS granted the tile
 * state). Executed and tested on a Sapphire Rapids Xeon. */
#include <immintrin.h>
#include <string.h>

#include "kernels/gemm/kiln_gemm_internal.h"
#include "kernels/kiln_amx_tiles.h"

#define KILN_AMX_AI static inline __attribute__((always_inline))

/* One MT x NT (1..2 each) block of 16 x 16 tiles over `steps` full 32-K
 * steps plus, when bt0 is set, one tail step from bt0/bt1. a: A row 0 at
 * the block's first K, rows lda elements apart; b0/b1: the strip's two
 * panels at that K. C starts from c (32 wide, rows 32 floats apart) unless
 * first, and is stored back there. */
KILN_AMX_AI void kiln_gemm_amx_tile(const int MT, const int NT, int first, int64_t steps,
                                    const uint16_t* a, int64_t lda, const uint16_t* b0,
                                    const uint16_t* b1, const uint16_t* bt0,
                                    const uint16_t* bt1, float* c) {
  const int64_t sa = lda * 2; /* bytes between A rows */
  const uint16_t* a1 = a + 16 * lda;
  kiln_amx_c_begin(MT, NT, first, c, c + 16 * 32, 128);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(6, b0 + s * 512, 64);
    _tile_loadd(4, a + s * 32, sa);
    if (NT > 1) _tile_loadd(7, b1 + s * 512, 64);
    if (MT > 1) _tile_loadd(5, a1 + s * 32, sa);
    _tile_dpbf16ps(0, 4, 6);
    if (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if (MT > 1) _tile_dpbf16ps(2, 5, 6);
    if (MT > 1 && NT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  if (bt0) {
    _tile_loadd(6, bt0, 64);
    _tile_loadd(4, a + steps * 32, sa);
    if (NT > 1) _tile_loadd(7, bt1, 64);
    if (MT > 1) _tile_loadd(5, a1 + steps * 32, sa);
    _tile_dpbf16ps(0, 4, 6);
    if (NT > 1) _tile_dpbf16ps(1, 4, 7);
    if (MT > 1) _tile_dpbf16ps(2, 5, 6);
    if (MT > 1 && NT > 1) _tile_dpbf16ps(3, 5, 7);
  }
  kiln_amx_c_end(MT, NT, c, c + 16 * 32, 128);
}

/* K blocks of this many 32-K steps: the strip's B micro-panel (8 KiB per
 * step) stays in L1 while every row tile of the block reuses it, and A's
 * tiles come from L2. (Over all of K at once, B's 32 x K strip outgrew L1
 * at K = 768: 1.05 against 1.16 TFLOP/s at 128 x 768 x 768, one core;
 * blocks of 4 steps measured the same as 8.) */
#define KILN_AMX_KSTEPS 8
/* Rows per call at most (the driver's M block): the C block in cbuf. */
#define KILN_AMX_MAX_ROWS 256

void kiln_bf16_gemm_block__amx(const kiln_gemm_bf16_block_t* t, int64_t i0, int64_t i1, int64_t j0,
                               int64_t j1) {
  const int P = KILN_GEMM_PANEL;
  const int64_t kp = t->kp, steps = kp / 32, rem = kp % 32; /* rem: even, rows of the tail */
  _Alignas(64) float cbuf[KILN_AMX_MAX_ROWS * 32];
  _Alignas(64) uint16_t tail[2][512];
  kiln_amx_tiles_configure();
  for (int64_t j = j0; j < j1; j += 32) {
    int64_t nr = j1 - j < 32 ? j1 - j : 32;
    int nt = nr > P ? 2 : 1;
    const uint16_t* b0 = t->b + (j / P) * kp * P;
    const uint16_t* b1 = nt > 1 ? b0 + kp * P : b0;
    const uint16_t *bt0 = NULL, *bt1 = NULL;
    if (rem) {
      memset(tail, 0, sizeof(tail));
      memcpy(tail[0], b0 + steps * 512, (size_t)rem * P * sizeof(uint16_t));
      if (nt > 1) memcpy(tail[1], b1 + steps * 512, (size_t)rem * P * sizeof(uint16_t));
      bt0 = tail[0];
      bt1 = tail[1];
    }
    for (int64_t ib = i0; ib < i1; ib += KILN_AMX_MAX_ROWS) {
      int64_t ib1 = i1 - ib < KILN_AMX_MAX_ROWS ? i1 : ib + KILN_AMX_MAX_ROWS;
      for (int64_t s0 = 0;; s0 += KILN_AMX_KSTEPS) { /* the last block ends it */
        int64_t ns = steps - s0 < KILN_AMX_KSTEPS ? steps - s0 : KILN_AMX_KSTEPS;
        int last = s0 + ns >= steps;
        const uint16_t *t0 = last ? bt0 : NULL, *t1 = last ? bt1 : NULL;
        for (int64_t i = ib; i < ib1; i += 32) {
          int64_t mr = ib1 - i < 32 ? ib1 - i : 32;
          int mt = mr > 16 ? 2 : 1, first = s0 == 0;
          const uint16_t* a = t->a + i * t->ka + s0 * 32;
          const uint16_t *p0 = b0 + s0 * 512, *p1 = b1 + s0 * 512;
          float* c = cbuf + (i - ib) * 32;
          switch (mt * 2 + nt) {
            case 2 + 1: kiln_gemm_amx_tile(1, 1, first, ns, a, t->ka, p0, p1, t0, t1, c); break;
            case 2 + 2: kiln_gemm_amx_tile(1, 2, first, ns, a, t->ka, p0, p1, t0, t1, c); break;
            case 4 + 1: kiln_gemm_amx_tile(2, 1, first, ns, a, t->ka, p0, p1, t0, t1, c); break;
            default: kiln_gemm_amx_tile(2, 2, first, ns, a, t->ka, p0, p1, t0, t1, c); break;
          }
        }
        if (last) break;
      }
      for (int64_t i = ib; i < ib1; i += 32) {
        int64_t mr = ib1 - i < 32 ? ib1 - i : 32;
        t->epilogue(mr, nr, cbuf + (i - ib) * 32, 32, t->c + i * t->ldc + j, t->ldc,
                    t->bias ? t->bias + j : NULL, t->res ? t->res + i * t->ldr + j : NULL,
                    t->ldr, t->act);
        kiln_gemm_bf16_block_round(t, mr, nr, t->c + i * t->ldc + j);
      }
    }
  }
  _tile_release();
}
