/* The one AMX tile configuration kiln's AMX kernels use (the bf16 GEMM,
 * kiln_gemm_bf16_ukernel_amx.c, and the bf16 NHWC conv,
 * kiln_conv_nhwc_bf16_amx.c): palette 1, eight tiles of 16 rows x 64
 * bytes (a 16 x 16 fp32 block, or 16 rows of 32 bf16, or 16 VNNI pair rows
 * of 16 columns). Include only from a file compiled with the AMX flags.
 *
 * The configuration is a static const object: its 64 bytes are in .rodata
 * from the start, so there is no store for a compiler to drop. (GCC 12's
 * _tile_loadconfig passes its argument as an "m" operand of pointer size,
 * so an on-stack config whose other 56 bytes look unused can lose its
 * stores: llama.cpp's AMX code faults that way.) ldtilecfg is issued
 * through an asm whose memory operand is the whole object. A kernel loads
 * it at the start of each call (a pool task may run on any thread) and
 * releases the tiles at its end (_tile_release), so no thread keeps the
 * 8 KiB tile state live between tasks. */
#ifndef KILN_AMX_TILES_H
#define KILN_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>

typedef struct kiln_amx_tilecfg_s {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} kiln_amx_tilecfg_t;

static const _Alignas(64) kiln_amx_tilecfg_t kiln_amx_cfg_16x64_ = {
    1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

static inline void kiln_amx_tiles_configure(void) {
  __asm__ volatile("ldtilecfg %0" : : "m"(kiln_amx_cfg_16x64_));
}

/* The same tiles with fewer rows in tmm0, tmm1, tmm4 (rows0) and tmm2,
 * tmm3, tmm5 (rows1), 1..16 each: C and A tiles of a block's first and
 * second 16 rows, so a block of fewer rows neither reads nor writes past
 * them. Loading a configuration zeroes every tile. The asm's memory
 * operand is the whole local object, so all its bytes are stored first. */
static inline void kiln_amx_tiles_configure_rows(int rows0, int rows1) {
  kiln_amx_tilecfg_t cfg = kiln_amx_cfg_16x64_;
  cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = (uint8_t)rows0;
  cfg.rows[2] = cfg.rows[3] = cfg.rows[5] = (uint8_t)rows1;
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

/* The C block of the kernels' 2 x 2 tiling: tmm0 and tmm1 the first 16
 * rows' two 16-column tiles (at c and c + 64 bytes), tmm2 and tmm3 the
 * second's (at c1), MT and NT (1, 2) of each in use; rows stride bytes
 * apart. Begin zeroes them (zero) or loads them; end stores them. */
static inline __attribute__((always_inline)) void kiln_amx_c_begin(const int MT, const int NT,
                                                                   int zero, const void* c,
                                                                   const void* c1,
                                                                   int64_t stride) {
  if (zero) {
    _tile_zero(0);
    if (NT > 1) _tile_zero(1);
    if (MT > 1) _tile_zero(2);
    if (MT > 1 && NT > 1) _tile_zero(3);
    return;
  }
  _tile_loadd(0, c, stride);
  if (NT > 1) _tile_loadd(1, (const char*)c + 64, stride);
  if (MT > 1) _tile_loadd(2, c1, stride);
  if (MT > 1 && NT > 1) _tile_loadd(3, (const char*)c1 + 64, stride);
}

static inline __attribute__((always_inline)) void kiln_amx_c_end(const int MT, const int NT,
                                                                 void* c, void* c1,
                                                                 int64_t stride) {
  _tile_stored(0, c, stride);
  if (NT > 1) _tile_stored(1, (char*)c + 64, stride);
  if (MT > 1) _tile_stored(2, c1, stride);
  if (MT > 1 && NT > 1) _tile_stored(3, (char*)c1 + 64, stride);
}

#endif /* KILN_AMX_TILES_H */
