/* What the GEMM driver and its per-ISA kernels share: the kernel table,
 * the packed layouts both sides assume, and the scalar activation that the
 * reference and the portable epilogue use.
 *
 * Packed B (ISA independent, produced by kiln_gemm_f32_pack_b): B is cut
 * into column panels of KILN_GEMM_PANEL (16) columns; panel q holds columns
 * [16q, 16q+16) as K rows of 16 floats (K-major inside a panel), so element
 * (p, j) sits at  out[(j / 16) * K * 16 + p * 16 + j % 16].  Columns past N
 * in the last panel are zero. A 16-wide panel row is one zmm, two ymm or four
 * xmm loads; a 32-wide AVX-512 kernel reads two neighbouring panels.
 *
 * Packed A (made per call by the driver): rows are cut into panels of MR
 * rows (the microkernel's height); panel r holds rows [MR r, MR r + MR) as K
 * columns of MR floats: a[r * K * MR + p * MR + i]. Rows past M are zero.
 *
 * Microkernels compute one full MR x NR tile:
 *   out = (cin ? cin : 0) + Apanel(MR, kc) . Bpanels(kc, NR)
 * Full tiles only: the driver routes tails through a small local tile.
 */
#ifndef KILN_GEMM_INTERNAL_H
#define KILN_GEMM_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "base/kiln_bf16.h"
#include "base/kiln_cpu.h"
#include "base/kiln_pool.h"
#include "base/kiln_activation.h"
#include "kernels/gemm/kiln_gemm.h" /* KILN_GEMM_PANEL */
#include "kernels/kiln_isa_variant.h"

/* The GEMV kernels handle at most this many rows of A. */
#define KILN_GEMM_GEMV_MAX_M 8
/* Panels per GEMV kernel call, at most. */
#define KILN_GEMM_GEMV_PANELS 4

/* a: packed A panel at column p0 (stride MR); b: packed B panel at row p0
 * (stride 16); b_next: the neighbouring panel at row p0 for 32-wide kernels
 * (the driver passes b again when only one panel is left). cin may equal
 * out (accumulate in place). */
typedef void (*kiln_gemm_ukernel_fn)(int64_t kc, const float* a, const float* b,
                                     const float* b_next, const float* cin, int64_t ldcin,
                                     float* out, int64_t ldout);

/* dst[i][j] = act(src[i][j] + bias[j]) + res[i][j] for i < m, j < n; bias and
 * res may be NULL. Reads each element before writing it, so dst may alias
 * src or res exactly. */
typedef void (*kiln_gemm_epilogue_fn)(int64_t m, int64_t n, const float* src, int64_t lds,
                                      float* dst, int64_t ldd, const float* bias,
                                      const float* res, int64_t ldr, kiln_activation_t act);
/* An epilogue's body: ROWS(act) (the rows loop, inlined with the given
 * activation as a constant) for each activation, so each compiles to its
 * own loop with no switch inside. */
#define KILN_GEMM_EPILOGUE_BY_ACT(act, ROWS)                  \
  switch (act) {                                              \
    case KILN_ACT_RELU: ROWS(KILN_ACT_RELU); break;           \
    case KILN_ACT_GELU: ROWS(KILN_ACT_GELU); break;           \
    case KILN_ACT_GELU_TANH: ROWS(KILN_ACT_GELU_TANH); break; \
    case KILN_ACT_SILU: ROWS(KILN_ACT_SILU); break;           \
    case KILN_ACT_SIGMOID: ROWS(KILN_ACT_SIGMOID); break;     \
    case KILN_ACT_TANH: ROWS(KILN_ACT_TANH); break;           \
    case KILN_ACT_RELU6: ROWS(KILN_ACT_RELU6); break;         \
    case KILN_ACT_HARDSWISH: ROWS(KILN_ACT_HARDSWISH); break; \
    default: ROWS(KILN_ACT_NONE);                             \
  }

/* For each of `panels` (1..KILN_GEMM_GEMV_PANELS) consecutive packed B
 * panels q: out[q](m, 16) = A(m, k) . Bpanel_q(k, 16), for m <=
 * KILN_GEMM_GEMV_MAX_M; A rows are unit-stride, lda apart; out[q] is m x 16
 * contiguous at out + q * m * 16. Several panels per call let a kernel read
 * them as parallel streams. */
typedef void (*kiln_gemm_gemv_fn)(int64_t m, int64_t k, const float* a, int64_t lda,
                                  const float* b_panel, int panels, float* out);

/* How the GEMV over B's columns (below) reads B's elements: float32,
 * bf16 widened (a bf16 weight read where torch keeps it, a bf16 graph
 * value), or float32 rounded to bf16 (b_round_bf16). Widening and rounding
 * happen in registers, so each kind's sums are the float32 kernel's over
 * the widened (rounded) copy, bit for bit. */
typedef enum {
  KILN_GEMM_NT_F32 = 0,
  KILN_GEMM_NT_BF16,
  KILN_GEMM_NT_F32_ROUNDED,
} kiln_gemm_nt_elem_t;

/* The small-M GEMV over an unpacked B whose columns are contiguous runs of
 * K elements: the (N, K) weight of nn.Linear read transposed where it lies
 * (torch.compile hands weights over as graph inputs, and a bf16 model's
 * weights may stay torch's, so nothing packed them; packing all of B per
 * call would read it, write it and read it again). out[i * 16 + j] =
 * sum_p a[i * lda + p] * B(j, p), B(j, p) element j * ldb + p of bt read
 * as `elem` says, for i < m (<= KILN_GEMM_GEMV_MAX_M) and j < n (1..16): a
 * block of up to 16 dot products per row of A, each column one sequential
 * stream. */
typedef void (*kiln_gemm_gemv_nt_fn)(int64_t m, int64_t n, int64_t k, const float* a,
                                     int64_t lda, const void* bt, int64_t ldb,
                                     kiln_gemm_nt_elem_t elem, float* out);
/* Such a kernel's body: CALL(kind) for elem, the kind a constant there, so
 * each compiles to its own loop. */
#define KILN_GEMM_NT_BY_ELEM(elem, CALL)                                 \
  switch (elem) {                                                        \
    case KILN_GEMM_NT_BF16: CALL(KILN_GEMM_NT_BF16); break;              \
    case KILN_GEMM_NT_F32_ROUNDED: CALL(KILN_GEMM_NT_F32_ROUNDED); break; \
    default: CALL(KILN_GEMM_NT_F32);                                     \
  }

/* The same over a bf16 panel (kiln_gemm_bf16_pack_b's layout). */
typedef void (*kiln_gemm_gemv_bf16_fn)(int64_t m, int64_t k, const float* a, int64_t lda,
                                       const uint16_t* b_panel, int panels, float* out);

/* Widens rows [0, kc) of `panels` consecutive bf16 panels (each `k` rows of
 * 16, the first starting at b) into fp32 panels of kc rows: out[q * kc * 16
 * + p * 16 + j] = b[q * k * 16 + p * 16 + j]. The blocked path runs the
 * fp32 microkernel on the widened micro-panel, which stays in L1 and is
 * reused by every row tile of the strip. */
typedef void (*kiln_gemm_widen_bf16_fn)(int64_t kc, int64_t k, int panels, const uint16_t* b,
                                        float* out);

/* bf16 compute weights (kiln_gemm_bf16_vnni_pack_b's layout) on the fp32
 * kernels: widen rows [pc, pc + kc) of `panels` consecutive VNNI panels
 * (each kp rows, the first at b) into fp32 panels of kc rows, as
 * kiln_gemm_widen_bf16_fn; and the GEMV over VNNI panels (kp = k rounded
 * up to even rows each), as kiln_gemm_gemv_bf16_fn. */
typedef void (*kiln_gemm_widen_vnni_fn)(int64_t kc, int64_t pc, int64_t kp, int panels,
                                        const uint16_t* b, float* out);

/* The microkernel over a VNNI panel at an even row (out = cin + A . B as
 * kiln_gemm_ukernel_fn, B read as kiln_gemm_bf16_vnni_pack_b lays it out:
 * pair t of the micro-panel at b + 32 t), NR = 16; NULL where the level
 * widens micro-panels instead. */
typedef void (*kiln_gemm_ukernel_vnni_fn)(int64_t kc, const float* a, const uint16_t* b,
                                          const float* cin, int64_t ldcin, float* out,
                                          int64_t ldout);

/* x[i] = x[i] rounded to bf16, nearest even (bf16 compute's A). */
typedef void (*kiln_gemm_round_bf16_fn)(float* x, int64_t n);

/* Packs A into MR-row panels (see kiln_gemm_pack_a below). */
typedef void (*kiln_gemm_pack_a_fn)(int mr, int64_t k, const float* a, int64_t rs, int64_t cs,
                                    int64_t row0, int64_t rows, int64_t m_total, float* out);

/* Packs one panel's rows [0, kc) of an unpacked B (element (p, j) at
 * b[p * rs + j * cs]) for its first w (1..16) columns: out[p * 16 + j] =
 * b[p * rs + j * cs] for j < w, 0 for w <= j < 16. Used for whole panels
 * (the shared pre-pack) and for kc x 16 micro-panels packed into L1 by the
 * compute tasks themselves (small M, see kiln_gemm.c). */
typedef void (*kiln_gemm_pack_b_block_fn)(int64_t kc, int64_t w, const float* b, int64_t rs,
                                          int64_t cs, float* out);

typedef struct kiln_gemm_kernels_s {
  const char* name;
  int mr, nr;     /* microkernel tile; nr is 16 or 32 */
  int kc, mc_max; /* K block (A and B micro-panels stay in L1) and M tile (A block in L2) */
  kiln_gemm_ukernel_fn ukernel;
  kiln_gemm_epilogue_fn epilogue;
  kiln_gemm_gemv_fn gemv;
  kiln_gemm_pack_a_fn pack_a;
  kiln_gemm_gemv_bf16_fn gemv_bf16;
  kiln_gemm_widen_bf16_fn widen_bf16;
  kiln_gemm_pack_b_block_fn pack_b_block;
  kiln_gemm_gemv_bf16_fn gemv_vnni;
  kiln_gemm_widen_vnni_fn widen_vnni;
  kiln_gemm_gemv_nt_fn gemv_nt;
  kiln_gemm_ukernel_vnni_fn ukernel_vnni;
  kiln_gemm_round_bf16_fn round_bf16;
} kiln_gemm_kernels_t;

/* bf16 compute on bf16 engines (kiln_gemm_bf16_compute.c): one task's
 * block. A is bf16, row-major, rows ka apart (ka: K rounded up to 32, the
 * columns past K zero), rows padded with zeros to a multiple of 16; B is
 * VNNI panels (kiln_gemm_bf16_vnni_pack_b), kp = K rounded up to even rows
 * each. A block function computes rows [i0, i1) x columns [j0, j1) (i0 a
 * multiple of 16, j0 of 32) over all of K and writes them through the
 * epilogue: C = act(AB + bias) + res (res may alias C exactly), then
 * rounds them with `round` when set. */
typedef struct kiln_gemm_bf16_block_s {
  int64_t k, kp, ka, n;
  const uint16_t* a;
  const uint16_t* b;
  float* c;
  int64_t ldc;
  const float* bias;
  const float* res;
  int64_t ldr;
  kiln_activation_t act;
  kiln_gemm_epilogue_fn epilogue;
  /* c_round_bf16: rounds each tile's rows of C after the epilogue, while
   * they are in L1 (NULL: no rounding). */
  kiln_gemm_round_bf16_fn round;
} kiln_gemm_bf16_block_t;
/* A finished tile of C (mr x nr at c, rows t->ldc apart) rounded when the
 * block says so: the block functions' last step per tile. */
static inline void kiln_gemm_bf16_block_round(const kiln_gemm_bf16_block_t* t, int64_t mr,
                                              int64_t nr, float* c) {
  if (t->round)
    for (int64_t r = 0; r < mr; ++r) t->round(c + r * t->ldc, nr);
}
typedef void (*kiln_gemm_bf16_block_fn)(const kiln_gemm_bf16_block_t* t, int64_t i0,
                                        int64_t i1, int64_t j0, int64_t j1);
/* Rows [0, rows) of A (fp32, element (i, p) at a[i * rs + p * cs], or bf16
 * a16 when set) into bf16 rows ka apart, rounded to nearest even, zero past
 * K and for rows [rows, rows_pad). */
typedef void (*kiln_gemm_bf16_pack_a_fn)(int64_t rows, int64_t rows_pad, int64_t k, int64_t ka,
                                         const float* a, const uint16_t* a16, int64_t rs,
                                         int64_t cs, uint16_t* out);

/* Kernels are named kiln_<dtype>_<op>[_<tile>]__<isa> (XNNPACK's manner,
 * kernels/kiln_isa_variant.h): dtype f32, bf16 (bf16 A and B: the bf16
 * engines), f32_bf16w (fp32 A, bf16 weights panels), f32_bf16vnni (fp32 A,
 * bf16 weights in VNNI pairs); tile MR x NR for microkernels. The tables in
 * kiln_gemm.c name them field by field, one table per level of the
 * family's list (KILN_GEMM_ISAS); a table may reuse a lower ISA's kernel.
 *
 * Portable kernels (kiln_gemm_ukernel_generic.c). */
void kiln_f32_gemm_ukernel_4x16__generic(int64_t kc, const float* a, const float* b,
                                         const float* b_next, const float* cin, int64_t ldcin,
                                         float* out, int64_t ldout);
void kiln_f32_gemm_epilogue__generic(int64_t m, int64_t n, const float* src, int64_t lds,
                                     float* dst, int64_t ldd, const float* bias, const float* res,
                                     int64_t ldr, kiln_activation_t act);
void kiln_f32_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda, const float* b_panel,
                            int panels, float* out);
void kiln_f32_gemv_nt__generic(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                               const void* bt, int64_t ldb, kiln_gemm_nt_elem_t elem, float* out);
/* Portable bf16 kernels (kiln_gemm_bf16.c). */
void kiln_f32_bf16w_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda,
                                  const uint16_t* b_panel, int panels, float* out);
void kiln_bf16w_gemm_widen__generic(int64_t kc, int64_t k, int panels, const uint16_t* b,
                                    float* out);
void kiln_bf16vnni_gemm_widen__generic(int64_t kc, int64_t pc, int64_t kp, int panels,
                                       const uint16_t* b, float* out);
void kiln_f32_bf16vnni_gemv__generic(int64_t m, int64_t k, const float* a, int64_t lda,
                                     const uint16_t* b_panel, int panels, float* out);
/* x[i] = bf16-rounded x[i] (nearest even), in place. */
void kiln_gemm_round_bf16_f32(float* x, int64_t n);
/* The bf16-engine driver: runs g (b_packed_bf16_vnni set) on AMX or
 * VDPBF16PS and returns 1, or returns 0 when kiln_cpu_bf16() allows
 * neither (the fp32 driver then widens). */
struct kiln_gemm_f32_args_s;
int kiln_gemm_bf16_compute(const struct kiln_gemm_f32_args_s* g, kiln_pool_t* pool);
/* The same for a GEMM of two bf16 graph values (A: a_bf16 or a_round_bf16;
 * B unpacked: b_bf16 or b_round_bf16): autocast's products in training and
 * a bf16 model's activation products. B is packed into VNNI pairs at run
 * time. Returns 0, and computes nothing, when no engine is allowed or the
 * GEMM is too small to repay packing B (the fp32 kernels then run it on
 * the same bf16 values). */
int kiln_gemm_bf16_compute_values(const struct kiln_gemm_f32_args_s* g, kiln_pool_t* pool);
/* A bf16 model's linear layer reading its weight's rows in place
 * (b_bf16_weight, B's columns contiguous, one batch) with bf16 A rows of
 * unit stride, on VDPBF16PS over the rows of both
 * (kiln_gemm_bf16_rows_avx512bf16.c): returns 1 having run g (C rounded
 * when g says so), or 0, having done nothing, when the CPU lacks
 * AVX512_BF16 or g is not such a product. */
int kiln_gemm_bf16_rows(const struct kiln_gemm_f32_args_s* g, kiln_pool_t* pool);
/* Element `at` of an fp32 source rounded to bf16, or of a bf16 source (h
 * set) as it is: what every bf16 packer reads. */
static inline uint16_t kiln_gemm_bf16_elem(const float* f, const uint16_t* h, int64_t at) {
  return h ? h[at] : kiln_bf16_from_f32(f[at]);
}
/* The portable VNNI-layout packer (kiln_gemm_bf16_vnni_pack_b_panels's,
 * and the reference its ISA forms are held to). */
void kiln_bf16_gemm_pack_b_vnni__generic(int64_t k, int64_t n, int64_t q0, int64_t q1,
                                         const float* b, const uint16_t* b16, int64_t rs,
                                         int64_t cs, uint16_t* out);
/* Records the engine a bf16-compute GEMM ran on (kiln_gemm_bf16_last_engine). */
void kiln_gemm_bf16_note_engine(const char* name);

#if defined(__x86_64__) || defined(__i386__)
#define KILN_GEMM_HAVE_X86 1
/* AVX2 + FMA (kiln_gemm_ukernel_avx2.c, kiln_gemm_epilogue_avx2.c,
 * kiln_gemm_pack_avx2.c). */
void kiln_f32_gemm_ukernel_6x16__avx2(int64_t kc, const float* a, const float* b,
                                      const float* b_next, const float* cin, int64_t ldcin,
                                      float* out, int64_t ldout);
void kiln_f32_gemm_epilogue__avx2(int64_t m, int64_t n, const float* src, int64_t lds, float* dst,
                                  int64_t ldd, const float* bias, const float* res, int64_t ldr,
                                  kiln_activation_t act);
void kiln_f32_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda, const float* b_panel,
                         int panels, float* out);
void kiln_f32_gemv_nt__avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                            const void* bt, int64_t ldb, kiln_gemm_nt_elem_t elem, float* out);
void kiln_f32_gemm_pack_a__avx2(int mr, int64_t k, const float* a, int64_t rs, int64_t cs,
                                int64_t row0, int64_t rows, int64_t m_total, float* out);
void kiln_f32_gemm_pack_b_block__avx2(int64_t kc, int64_t w, const float* b, int64_t rs, int64_t cs,
                                      float* out);
/* bf16 weights on AVX2 (kiln_gemm_bf16_avx2.c). */
void kiln_f32_bf16w_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                               const uint16_t* b_panel, int panels, float* out);
void kiln_bf16w_gemm_widen__avx2(int64_t kc, int64_t k, int panels, const uint16_t* b, float* out);
void kiln_bf16vnni_gemm_widen__avx2(int64_t kc, int64_t pc, int64_t kp, int panels,
                                    const uint16_t* b, float* out);
void kiln_f32_bf16vnni_gemv__avx2(int64_t m, int64_t k, const float* a, int64_t lda,
                                  const uint16_t* b_panel, int panels, float* out);
void kiln_f32_bf16vnni_gemm_ukernel_6x16__avx2(int64_t kc, const float* a, const uint16_t* b,
                                               const float* cin, int64_t ldcin, float* out,
                                               int64_t ldout);
void kiln_f32_round_bf16__avx2(float* x, int64_t n);
/* bf16 engines: AMX tiles (kiln_gemm_bf16_ukernel_amx.c) and VDPBF16PS
 * (kiln_gemm_bf16_ukernel_avx512bf16.c); the A packer is AVX-512F. */
void kiln_bf16_gemm_block__amx(const kiln_gemm_bf16_block_t* t, int64_t i0, int64_t i1, int64_t j0,
                               int64_t j1);
/* A bf16 weight's (N, K) rows at small M on VDPBF16PS, A's rows bf16
 * (kiln_gemm_bf16_rows_avx512bf16.c): out[i * 16 + j] = A row i . W row j
 * for i < m (<= KILN_GEMM_GEMV_MAX_M), j < n (<= 16). */
void kiln_bf16_rows_gemv__avx512bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                     int64_t lda, const uint16_t* w, int64_t ldw, float* out);
/* The same for any m and n in tiles of 4 x 4: out[i * ldo + j] = A row i .
 * W row j for i < m, j < n. */
void kiln_bf16_rows_gemm__avx512bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a,
                                     int64_t lda, const uint16_t* w, int64_t ldw, float* out,
                                     int64_t ldo);
void kiln_bf16_gemm_block__avx512bf16(const kiln_gemm_bf16_block_t* t, int64_t i0, int64_t i1,
                                      int64_t j0, int64_t j1);
void kiln_bf16_gemm_pack_a__avx512(int64_t rows, int64_t rows_pad, int64_t k, int64_t ka,
                                   const float* a, const uint16_t* a16, int64_t rs, int64_t cs,
                                   uint16_t* out);
/* Columns [p0, p1) (multiples of 32, p1 <= ka) of every row of a
 * transposed A (unit row stride: element (i, p) at [i + p * cs]), as
 * kiln_bf16_gemm_pack_a__avx512 packs them: the packing of such an A split
 * across tasks by columns, which read A's contiguous columns front to
 * back. */
void kiln_bf16_gemm_pack_a_t__avx512(int64_t rows, int64_t rows_pad, int64_t k, int64_t ka,
                                     int64_t p0, int64_t p1, const float* a, const uint16_t* a16,
                                     int64_t cs, uint16_t* out);
/* Panels [q0, q1) of a (K, N) B (fp32 b rounded to bf16, or bf16 b16 when
 * set; element (p, j) at [p * rs + j * cs]) in kiln_gemm_bf16_vnni_pack_b's
 * layout, at out (the whole matrix's). */
void kiln_bf16_gemm_pack_b_vnni__avx512(int64_t k, int64_t n, int64_t q0, int64_t q1,
                                        const float* b, const uint16_t* b16, int64_t rs,
                                        int64_t cs, uint16_t* out);
/* AVX-512 (kiln_gemm_ukernel_avx512.c). */
void kiln_f32_gemm_ukernel_8x32__avx512(int64_t kc, const float* a, const float* b,
                                        const float* b_next, const float* cin, int64_t ldcin,
                                        float* out, int64_t ldout);
/* kiln_gemm_epilogue_avx512.c: the epilogue of kiln_gemm_epilogue_fn. */
void kiln_f32_gemm_epilogue__avx512(int64_t m, int64_t n, const float* src, int64_t lds,
                                    float* dst, int64_t ldd, const float* bias, const float* res,
                                    int64_t ldr, kiln_activation_t act);
#endif

#if defined(__aarch64__)
#define KILN_GEMM_HAVE_NEON 1
/* aarch64 ASIMD (kiln_gemm_ukernel_neon.c). */
void kiln_f32_gemm_ukernel_6x16__neon(int64_t kc, const float* a, const float* b,
                                      const float* b_next, const float* cin, int64_t ldcin,
                                      float* out, int64_t ldout);
void kiln_f32_gemv__neon(int64_t m, int64_t k, const float* a, int64_t lda, const float* b_panel,
                         int panels, float* out);
void kiln_f32_bf16w_gemv__neon(int64_t m, int64_t k, const float* a, int64_t lda,
                               const uint16_t* b_panel, int panels, float* out);
#endif

/* Columns of B a compute task of the blocked driver packs at a time when B
 * is packed on the fly (kiln_gemm.c's b_fly): with kc 256, 256 KiB that
 * stay in L2 beside the A block while the row tiles of every strip use
 * them. A multiple of every NR. */
#define KILN_GEMM_FLY_NB 256

/* A B that the blocked driver's compute tasks make themselves, a block at
 * a time, instead of reading packed panels (the quantized weights: each
 * block dequantized into L2 right before its row tiles use it). pack
 * writes rows [p0, p0 + kc) of columns [j0, j1) (j0 a multiple of 16, j1 -
 * j0 <= KILN_GEMM_FLY_NB) as whole fp32 panels kc * 16 floats apart at
 * out (kiln_gemm_f32_pack_b's layout cut to the block; columns past N
 * finite: the kernels compute them and the driver drops them). Called by
 * several threads at once. */
typedef void (*kiln_gemm_fly_fn)(const void* ctx, int64_t p0, int64_t kc, int64_t j0, int64_t j1,
                                 float* out);
/* Where the bytes pack reads for a block lie: `runs` runs of `bytes`
 * bytes, `stride` bytes apart from base. A task prefetches the next
 * block's while the current block's row tiles run: the source comes from
 * memory once per call, and without the prefetch each block's packing
 * waited on it (quantized weights on Zen 3: 1-3% of a GEMM at M 128-512). */
typedef struct {
  const void* base;
  int64_t stride, bytes, runs;
} kiln_gemm_fly_region_t;
typedef void (*kiln_gemm_fly_where_fn)(const void* ctx, int64_t p0, int64_t kc, int64_t j0,
                                       int64_t j1, kiln_gemm_fly_region_t* out);
typedef struct {
  kiln_gemm_fly_fn pack;
  kiln_gemm_fly_where_fn where;
  const void* ctx;
} kiln_gemm_fly_src_t;
/* Runs g on the blocked path (never the GEMV: M > KILN_GEMM_GEMV_MAX_M is
 * the caller's choice) with B from src, the same for every batch: the fp32
 * GEMM's blocking, threads and epilogue. g's own B is read only by the
 * scalar reference the driver falls back to without scratch memory. */
void kiln_gemm_f32_fly(const struct kiln_gemm_f32_args_s* g, kiln_pool_t* pool,
                       const kiln_gemm_fly_src_t* src);

/* The kernels for an ISA level (never NULL; falls back to generic). */
const kiln_gemm_kernels_t* kiln_gemm_kernels_for(kiln_isa_t isa);

/* Packs rows [row0, row0 + rows) of A(M, K) (element (i, p) at
 * a[i * rs + p * cs]) into MR-row panels over all K columns; rows at or past
 * m_total are zero. out receives ceil(rows / mr) panels of K * mr floats. */
void kiln_gemm_pack_a(int mr, int64_t k, const float* a, int64_t rs, int64_t cs, int64_t row0,
                      int64_t rows, int64_t m_total, float* out);

/* The portable kiln_gemm_pack_b_block_fn (kiln_gemm_pack.c). */
void kiln_gemm_pack_b_block(int64_t kc, int64_t w, const float* b, int64_t rs, int64_t cs,
                            float* out);

/* kiln_gemm_pack_b_block for an unpacked bf16 B, widening each element
 * (kiln_gemm_bf16.c). */
void kiln_gemm_pack_b_block_bf16(int64_t kc, int64_t w, const uint16_t* b, int64_t rs, int64_t cs,
                                 float* out);

/* kiln_gemm_pack_a for bf16 A, widening each element (kiln_gemm_bf16.c). */
void kiln_gemm_pack_a_bf16(int mr, int64_t k, const uint16_t* a, int64_t rs, int64_t cs,
                           int64_t row0, int64_t rows, int64_t m_total, float* out);

#endif /* KILN_GEMM_INTERNAL_H */
