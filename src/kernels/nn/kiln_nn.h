/* Row-wise neural-network kernels: unary math, softmax, norms, attention.
 *
 * All operate on fp32. "rows × cols" kernels treat the input as a contiguous
 * (rows, cols) matrix and work along cols; the runtime arranges for the axis
 * to be last and contiguous. Each has a scalar reference (the *_reference
 * functions) that the tests hold the fast paths to. Pointers are borrowed.
 */
#ifndef KILN_NN_H
#define KILN_NN_H

#include <stddef.h>
#include <stdint.h>

#include "base/kiln_pool.h"
#include "base/kiln_activation.h"

typedef enum kiln_unary_e {
  KILN_UNARY_NEG = 0,
  KILN_UNARY_ABS,
  KILN_UNARY_EXP,
  KILN_UNARY_LOG,
  KILN_UNARY_SQRT,
  KILN_UNARY_RSQRT,
  KILN_UNARY_RECIPROCAL,
  KILN_UNARY_TANH,
  KILN_UNARY_SIGMOID,
  KILN_UNARY_RELU,
  KILN_UNARY_GELU,
  KILN_UNARY_GELU_TANH,
  KILN_UNARY_SILU,
  KILN_UNARY_ERF,
  KILN_UNARY_SIN,
  KILN_UNARY_COS,
  KILN_UNARY_COUNT
} kiln_unary_t;

/* y[i] = f(x[i]) for i < n; x and y may alias exactly. */
void kiln_unary_f32(kiln_unary_t op, size_t n, const float* x, float* y, kiln_pool_t* pool);
void kiln_unary_f32_reference(kiln_unary_t op, size_t n, const float* x, float* y);

/* dx[i] = dy[i] * gelu'(x[i]) for i < n: gelu's gradient, exact (erf) form
 * or, with tanh_form, that of its tanh approximation (the op behind
 * aten.gelu_backward). dx may alias dy or x exactly. */
void kiln_gelu_backward_f32(int tanh_form, size_t n, const float* dy, const float* x, float* dx,
                            kiln_pool_t* pool);
void kiln_gelu_backward_f32_reference(int tanh_form, size_t n, const float* dy, const float* x,
                                      float* dx);

/* In-place activation over a contiguous span (used by GEMM epilogues too). */
void kiln_activation_f32(kiln_activation_t act, size_t n, float* x);

/* Softmax (or log-softmax) along cols of a (rows, cols) matrix. */
void kiln_softmax_f32(size_t rows, size_t cols, const float* x, float* y, int log,
                      kiln_pool_t* pool);
void kiln_softmax_f32_reference(size_t rows, size_t cols, const float* x, float* y, int log);
/* Softmax along the middle axis of a dense (outer, len, inner) tensor (an
 * axis that is not last): blocks of columns gathered into rows, the row
 * kernel, scattered back. The reference walks each column as it lies. */
void kiln_softmax_strided_f32(int64_t outer, int64_t len, int64_t inner, const float* x,
                              float* y, int log, kiln_pool_t* pool);
void kiln_softmax_strided_f32_reference(int64_t outer, int64_t len, int64_t inner,
                                        const float* x, float* y, int log);

/* y = (x - mean) / sqrt(var + eps) * gamma + beta along cols; gamma and beta
 * (cols) may each be NULL. Biased variance, as torch. */
void kiln_layer_norm_f32(size_t rows, size_t cols, const float* x, const float* gamma,
                         const float* beta, float eps, float* y, kiln_pool_t* pool);
void kiln_layer_norm_f32_reference(size_t rows, size_t cols, const float* x,
                                   const float* gamma, const float* beta, float eps, float* y);

/* layer_norm's input gradient along cols: with xh = (x - mean) * rstd and
 * g = dy * gamma, dx = rstd * (g - mean(g) - xh * mean(g * xh)); mean and
 * rstd hold one value per row (what the forward saved); gamma (cols) may be
 * NULL. dx may alias dy or x exactly. xh is centred on the row's mean, not
 * on the saved one (its float rounding): xh sums to zero and so does dx,
 * however large |mean| / std is (kiln_norm.c). */
void kiln_layer_norm_backward_f32(size_t rows, size_t cols, const float* dy, const float* x,
                                  const float* mean, const float* rstd, const float* gamma,
                                  float* dx, kiln_pool_t* pool);
void kiln_layer_norm_backward_f32_reference(size_t rows, size_t cols, const float* dy,
                                            const float* x, const float* mean, const float* rstd,
                                            const float* gamma, float* dx);

/* y = x / sqrt(mean(x^2) + eps) * gamma; gamma may be NULL. */
void kiln_rms_norm_f32(size_t rows, size_t cols, const float* x, const float* gamma,
                       float eps, float* y, kiln_pool_t* pool);
void kiln_rms_norm_f32_reference(size_t rows, size_t cols, const float* x,
                                 const float* gamma, float eps, float* y);

/* Scaled dot-product attention, flash-style (online softmax over key tiles;
 * the (Sq, Skv) score matrix is never materialised).
 *   q: (B, H, Sq, D)   k, v: (B, Hkv, Skv, D) with H % Hkv == 0 (grouped-query)
 *   out: (B, H, Sq, Dv) contiguous. Element strides let permuted q/k/v be read
 *   in place. mask, if set, is added to the scores (float, -inf to drop) and
 *   broadcast through its strides (stride 0 on broadcast dims). With causal,
 *   query i sees key j only when j <= i + causal_offset. Keys hidden from
 *   every row of a key tile (-inf or causal) are not read, so NaN or Inf in
 *   k or v there does not reach the output (kiln_attention.c). */
typedef struct kiln_attention_args_s {
  int64_t batch, heads, kv_heads, q_len, kv_len, head_dim, v_head_dim;
  const float* q;
  int64_t q_strides[4]; /* b, h, s, d */
  const float* k;
  int64_t k_strides[4];
  const float* v;
  int64_t v_strides[4];
  const float* mask; /* additive, or NULL */
  int64_t mask_strides[4];
  float* out; /* contiguous (B, H, Sq, Dv) */
  float scale;
  int causal;
  /* torch's is_causal=True is top-left aligned: causal_offset = 0; a decode
   * step against a KV cache uses kv_len - q_len. */
  int64_t causal_offset;
  /* Element strides of out over (b, h, s); its head-dim stride is 1. All
   * zero means contiguous (B, H, Sq, Dv). The compiler sets (B, Sq, H, Dv)
   * order here so the usual transpose after attention costs nothing. */
  int64_t out_strides[3];
  /* 1: compute by the bf16 rule (q, k, v and the softmax weights rounded to
   * bf16, fp32 sums; kiln_attention_bf16.h states it): the SDPA flag
   * KILN_SDPA_BF16, which compute_dtype=bf16 sets. */
  int bf16;
  /* 1: every key counts, as torch's math path computes attention (the SDPA
   * flag KILN_SDPA_EVERY_KEY): the causal mask is added to each score, so a
   * hidden key's NaN or +Inf score makes the row NaN, and each hidden key's
   * weight 0 multiplies its value (NaN where v is Inf or NaN). The tiled
   * kernels skip hidden keys, which is exact when q, k and v are finite and
   * no score can overflow: kiln_attention_f32 checks that first and takes
   * the reference otherwise. */
  int every_key;
} kiln_attention_args_t;

/* out's element offset for (b, h, s) under args->out_strides. */
static inline int64_t kiln_attention_out_offset(const kiln_attention_args_t* a, int64_t b,
                                                int64_t h, int64_t s) {
  if (!a->out_strides[0] && !a->out_strides[1] && !a->out_strides[2])
    return ((b * a->heads + h) * a->q_len + s) * a->v_head_dim;
  return b * a->out_strides[0] + h * a->out_strides[1] + s * a->out_strides[2];
}

/* Head dims (D and Dv) up to this take the tiled fast path, whose tiles
 * live in an 80 KiB stack buffer per call of a task (so pool threads need
 * the usual >= 256 KiB stacks). Larger dims are still computed exactly, by a
 * row-at-a-time path several times slower. A query row that no key may see
 * (all -inf mask, or causal with i + causal_offset < 0) gets zeros, as
 * torch's CPU SDPA kernel returns. */
#define KILN_ATTENTION_MAX_HEAD_DIM 256

void kiln_attention_f32(const kiln_attention_args_t* args, kiln_pool_t* pool);
/* The same with the work cut as for plan_threads threads (run on pool):
 * tests use it to split the keys of a decode step into many parts on any
 * machine. Results differ from kiln_attention_f32's by fp32 rounding only. */
void kiln_attention_f32_as_threads(const kiln_attention_args_t* args, kiln_pool_t* pool,
                                   int plan_threads);
void kiln_attention_f32_reference(const kiln_attention_args_t* args);

#endif /* KILN_NN_H */
