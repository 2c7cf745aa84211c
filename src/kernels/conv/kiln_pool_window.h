/* The window geometry the pooling kernels share (kiln_pool2d.c forward,
 * kiln_pool_backward.c indices and gradients): which taps of an output
 * cell's window fall inside the input, and average pooling's divisor.
 * Both args structs (kiln_pool2d_f32_args_t, kiln_pool2d_grad_f32_args_t)
 * carry the same geometry fields; KILN_POOL_GEOM copies them out. */
#ifndef KILN_POOL_WINDOW_H
#define KILN_POOL_WINDOW_H

#include <stdint.h>

typedef struct {
  int64_t h, w;                           /* input plane */
  int64_t kh, kw, sh, sw, ph, pw, dh, dw; /* window, stride, padding, dilation */
  int count_include_pad;                  /* average only */
  int64_t divisor_override;               /* average only: nonzero replaces the count */
} kiln_pool_geom_t;

#define KILN_POOL_GEOM(a)                                                               \
  ((kiln_pool_geom_t){(a)->h, (a)->w, (a)->kh, (a)->kw, (a)->sh, (a)->sw, (a)->ph, (a)->pw, \
                      (a)->dh, (a)->dw, (a)->count_include_pad,      \
                      (a)->divisor_override})

/* [lo, hi) of window taps t (position base + t * step) inside [0, size). */
static inline void kiln_pool_tap_range(int64_t base, int64_t step, int64_t taps, int64_t size,
                                       int64_t* lo, int64_t* hi) {
  int64_t l = 0, h = taps;
  while (l < h && base + l * step < 0) ++l;
  while (h > l && base + (h - 1) * step >= size) --h;
  *lo = l;
  *hi = h;
}

/* Output row i: the window's first input row y0 (may be negative) and its
 * in-bounds row taps [u0, u1). */
static inline void kiln_pool_window_rows(const kiln_pool_geom_t* g, int64_t i, int64_t* y0,
                                         int64_t* u0, int64_t* u1) {
  *y0 = i * g->sh - g->ph;
  kiln_pool_tap_range(*y0, g->dh, g->kh, g->h, u0, u1);
}

/* Output column j: the same over columns (x0, [v0, v1)). */
static inline void kiln_pool_window_cols(const kiln_pool_geom_t* g, int64_t j, int64_t* x0,
                                         int64_t* v0, int64_t* v1) {
  *x0 = j * g->sw - g->pw;
  kiln_pool_tap_range(*x0, g->dw, g->kw, g->w, v0, v1);
}

/* Average pooling's divisor for the window at (y0, x0) with in-bounds taps
 * [u0, u1) x [v0, v1) (dilation 1): torch's, which with count_include_pad
 * is the window clipped to the padded input (ceil_mode windows can hang
 * past it) and otherwise the in-bounds taps; divisor_override replaces
 * either (any nonzero value: eager divides by a negative one too). */
static inline int64_t kiln_pool_avg_count(const kiln_pool_geom_t* g, int64_t y0, int64_t u0,
                                          int64_t u1, int64_t x0, int64_t v0, int64_t v1) {
  if (g->divisor_override) return g->divisor_override;
  if (!g->count_include_pad) return (u1 - u0) * (v1 - v0);
  int64_t pad_end_h = y0 + g->kh < g->h + g->ph ? y0 + g->kh : g->h + g->ph;
  int64_t pad_end_w = x0 + g->kw < g->w + g->pw ? x0 + g->kw : g->w + g->pw;
  return (pad_end_h - y0) * (pad_end_w - x0);
}

#endif /* KILN_POOL_WINDOW_H */
