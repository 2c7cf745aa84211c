/* The kiln operator set: one X-macro list from which the op enum, the name
 * table, the Python op table (kiln._C.OPS) and the shape-inference dispatch
 * all follow. The numbering is part of the .kiln format: append new ops at
 * the end of the list, never reorder.
 *
 * Conventions for every op: outputs are dense and row-major; broadcasting
 * follows NumPy/PyTorch (trailing-aligned, size-1 dims stretch); parameters
 * live in the node's params (int64) and fparams (float) as documented here.
 *
 *   RESHAPE        (x) -> y              params: [0] rank, [1..] dims. Same
 *                                        element count; y aliases x.
 *   STRIDED_COPY   (x) -> y              params: [0] rank, [1..8] y's dims,
 *                                        [9..16] x's element strides per y dim,
 *                                        [17] element offset into x. Covers
 *                                        permute, expand, slice, select.
 *   CAT            (x0..x7) -> y         params: [0] axis.
 *   GATHER         (table, index) -> y   params: [0] axis. y = table.shape[:axis]
 *                                        + index.shape + table.shape[axis+1:].
 *                                        Index int64/int32; out of range is an
 *                                        error at run time, never a read.
 *   WHERE          (cond, a, b) -> y     broadcast; cond bool.
 *   CAST           (x) -> y              params: [0] target dtype.
 *   ADD..LOGICAL_OR (a, b) -> y          broadcast, a and b of one dtype;
 *                                        comparisons and logical ops give bool.
 *   NEG..COS       (x) -> y              float unary math, in kiln_unary_t order.
 *   LOGICAL_NOT    (x) -> y              bool.
 *   SUM..ANY       (x) -> y              params: [0] bitmask of reduced axes,
 *                                        [1] keepdim.
 *   ARGMAX         (x) -> y              params: [0] axis, [1] keepdim; y int64.
 *   SOFTMAX, LOG_SOFTMAX (x) -> y        params: [0] axis; SOFTMAX [1] safe:
 *                                        1 makes a row of all -inf zeros, not
 *                                        NaN (aten._safe_softmax); 0 if absent.
 *   LAYER_NORM     (x, gamma?, beta?)    params: [0] number of trailing dims
 *                                        normalised; fparams: [0] eps.
 *   RMS_NORM       (x, gamma?)           as LAYER_NORM.
 *   MATMUL         (a, b) -> y           a (..., M, K), b (..., K, N), batch
 *                                        dims broadcast; y (..., M, N) float32;
 *                                        a float32 or bfloat16 (widened,
 *                                        exact), b float32;
 *                                        params: [0] flags:
 *                                        KILN_MATMUL_TRANSPOSE_A: a is stored
 *                                        (..., K, M) and read transposed;
 *                                        KILN_MATMUL_TRANSPOSE_B: b is stored
 *                                        (..., N, K) (the compiler sets these
 *                                        to drop transpose copies).
 *   LINEAR         (x, w, bias?, residual?) -> y
 *                                        x (..., K) float32 or bfloat16 (widened,
 *                                        exact); w (K, N): a constant, packed
 *                                        for the GEMM when its layout says so,
 *                                        or a dense value (training: weights
 *                                        are graph inputs);
 *                                        y = act(x·w + bias) + residual;
 *                                        params: [0] kiln_activation_t,
 *                                        [1] (optional) 1: w is a dense value
 *                                        stored (N, K), read transposed.
 *   SDPA           (q, k, v, mask?) -> y q (B, H, Sq, D), k (B, Hkv, Skv, D),
 *                                        v (B, Hkv, Skv, Dv); mask additive
 *                                        float, broadcast to (B, H, Sq, Skv);
 *                                        y (B, H, Sq, Dv); fparams: [0] scale;
 *                                        params: [0] causal, [1] flags:
 *                                        KILN_SDPA_VIEWS: q, k, v are read
 *                                        through views of any dense inputs:
 *                                        [2..8] B, H, Hkv, Sq, Skv, D, Dv,
 *                                        [9..13] q's element offset and
 *                                        strides (b, h, s, d), [14..18] k's,
 *                                        [19..23] v's (the compiler sets
 *                                        these to drop permute copies);
 *                                        KILN_SDPA_OUT_BSHD: y is (B, Sq, H, Dv).
 *   FMA_SCALAR     (x) -> y              y = x * fparams[0] + fparams[1] (float).
 *   GATHER_ELEMENTS (x, index) -> y      torch.gather: y has index's shape;
 *                                        y[..i..] = x[..index[..i..]..] along
 *                                        params[0]; other dims of index no
 *                                        larger than x's.
 *   CONV2D         (x, w, bias?, residual?) -> y
 *                                        x (N, C, H, W) float32; w dense
 *                                        (O, C / groups, kh, kw), usually a
 *                                        constant;
 *                                        bias (O); residual of y's shape;
 *                                        y (N, O, Ho, Wo) =
 *                                        act(conv(x, w) + bias) + residual;
 *                                        params: [0..1] stride h, w,
 *                                        [2..3] padding h, w, [4..5] dilation
 *                                        h, w, [6] groups, [7] kiln_activation_t,
 *                                        [8] 1: the residual is added before
 *                                        the activation, y = act(conv(x, w) +
 *                                        bias + residual) (ResNet's blocks).
 *                                        Ho = (H + 2 ph - dh (kh - 1) - 1) / sh + 1.
 *   MAX_POOL2D, AVG_POOL2D (x) -> y      x (N, C, H, W) float32 -> (N, C, Ho, Wo);
 *                                        params: [0..1] kernel h, w, [2..3]
 *                                        stride h, w, [4..5] padding h, w
 *                                        (at most half the kernel), [6..7]
 *                                        dilation h, w (1 for avg), [8]
 *                                        ceil_mode, [9] count_include_pad
 *                                        (avg), [10] divisor_override (avg;
 *                                        0: none, else the divisor of every
 *                                        window, negative too, as eager). Sizes as torch's pooling.
 *   ACOS..SIGN     (x) -> y              more unary math, in kiln_math_unary_t
 *                                        order: acos acosh asin asinh atan
 *                                        atanh cosh sinh tan expm1 log10 log1p
 *                                        log2 (float32), ceil floor round
 *                                        (half to even) trunc (float32), sign
 *                                        (float32, int64, int32; as torch, sign(NaN) =
 *                                        0 and sign(-0.0) = +0).
 *   ATAN2..DIV_FLOOR (a, b) -> y         broadcast, a and b of one dtype, y of
 *                                        that dtype: atan2 (float32);
 *                                        bitwise_and/or/xor (int64, int32,
 *                                        bool); fmod (C sign: the dividend's),
 *                                        remainder (Python sign: the
 *                                        divisor's), div_trunc, div_floor
 *                                        (float32, int64, int32). An integer
 *                                        division by zero is an error at run
 *                                        time (eager raises
 *                                        ZeroDivisionError), never a trap.
 *   CONV2D_GRAD_INPUT (dy, w) -> dx      the gradient of CONV2D with respect
 *                                        to x: dy (N, O, Ho, Wo), w (O, C /
 *                                        groups, kh, kw) float32; dx (N, C, H,
 *                                        W); params: [0..6] as CONV2D, [7..8]
 *                                        H, W (stride makes them ambiguous);
 *                                        Ho, Wo must be what CONV2D gives.
 *   CONV2D_GRAD_WEIGHT (dy, x) -> dw     the gradient with respect to w: dy
 *                                        (N, O, Ho, Wo), x (N, C, H, W); dw
 *                                        (O, C / groups, kh, kw); params:
 *                                        [0..6] as CONV2D, [7..8] kh, kw.
 *   MAX_POOL2D_INDICES (x) -> i          int64 (N, C, Ho, Wo): the flat index
 *                                        (h * W + w) within x's (n, c) plane
 *                                        of each window's maximum, torch's
 *                                        choice on ties and NaN; params as
 *                                        MAX_POOL2D.
 *   MAX_POOL2D_GRAD (dy, i) -> dx        dy (N, C, Ho, Wo) float32, i int64 of
 *                                        dy's shape; dx (N, C, H, W) with
 *                                        dx[n][c].flat[i] += dy; params: [0..1]
 *                                        H, W. An index outside the plane is
 *                                        an error at run time, never a write.
 *   AVG_POOL2D_GRAD (dy) -> dx           dy (N, C, Ho, Wo) -> dx (N, C, H, W),
 *                                        each dy cell spread over its window
 *                                        by AVG_POOL2D's divisor; params:
 *                                        [0..9] as AVG_POOL2D, [10..11] H, W,
 *                                        [12] divisor_override (0: none).
 *   ADAPTIVE_AVG_POOL2D (x) -> y         x (N, C, H, W) float32 -> (N, C, Ho, Wo):
 *                                        cell (i, j) averages rows [floor(i H /
 *                                        Ho), ceil((i + 1) H / Ho)) and the
 *                                        columns likewise (torch's windows);
 *                                        params: [0..1] Ho, Wo.
 *   ADAPTIVE_AVG_POOL2D_GRAD (dy) -> dx  its gradient: dy (N, C, Ho, Wo) ->
 *                                        dx (N, C, H, W); params: [0..1] H, W.
 *   UPSAMPLE_BILINEAR2D (x) -> y         x (N, C, H, W) float32 -> (N, C, Ho, Wo),
 *                                        torch's bilinear rule; params: [0..1]
 *                                        Ho, Wo, [2] align_corners; fparams:
 *                                        [0..1] torch's scale factors h, w (0:
 *                                        none, the sizes' ratio is used).
 *   PAD            (x) -> y              params: [0] mode (0 constant, 1
 *                                        reflect, 2 replicate), [1..8] elements
 *                                        added before, [9..16] after, per dim of
 *                                        x (negative crops; reflect: pad < size;
 *                                        replicate: size >= 1 where padded), [17]
 *                                        fill for integer and
 *                                        bool x; fparams: [0] fill for float x.
 *   STRIDED_SCATTER (base, src) -> y     y = base, then src written through the
 *                                        view of y params [0] rank, [1..8] src's
 *                                        dims, [9..16] y's element strides per src
 *                                        dim, [17] element offset (STRIDED_COPY's
 *                                        layout). Writes in row-major src order:
 *                                        an overlapping view keeps the last.
 *   SCATTER        (x, index, src) -> y  torch.scatter / scatter_reduce along
 *                                        params[0]: y = x, then for each position
 *                                        p of index, y[p with p[axis] =
 *                                        index[p]] (op)= src[p]. index int64 or
 *                                        int32, x, index, src of one rank; index's
 *                                        dims no larger than src's, nor than x's
 *                                        off the axis. params: [1] reduce (0
 *                                        assign, 1 sum, 2 prod, 3 mean, 4 amax,
 *                                        5 amin; on bool sum, amax are or, prod,
 *                                        amin are and; no bool mean), [2]
 *                                        include_self (reductions:
 *                                        0 = targets start from the reduction's
 *                                        identity), [3] 1: negative indices
 *                                        count from the end (index_put), 0: they
 *                                        are out of range (torch.scatter).
 *                                        Out-of-range indices are an error at
 *                                        run time, never a write.
 *   SCAN           (x) -> y              inclusive scan along params[0]; [1] 0 sum,
 *                                        1 product. float32 accumulates in double
 *                                        (as torch's CPU cumsum).
 *   ARGSORT        (x) -> y              int64 indices that stably sort x along
 *                                        params[0]; [1] descending; [2] k: y keeps
 *                                        the first k along the axis (topk). NaN
 *                                        sorts as the largest value.
 *   GRID_SAMPLER_2D (x, grid) -> y       torch's grid_sample: x (N, C, H, W),
 *                                        grid (N, Ho, Wo, 2) float32 (x then y
 *                                        in [-1, 1]); y (N, C, Ho, Wo); params:
 *                                        [0] mode (0 bilinear, 1 nearest), [1]
 *                                        padding (0 zeros, 1 border, 2
 *                                        reflection), [2] align_corners.
 *                                        Coordinates outside the image follow
 *                                        the padding mode (zeros: read as 0).
 *   COL2IM         (x) -> y              torch's fold: x (N, C kh kw, L) float32
 *                                        -> y (N, C, H, W), each column added
 *                                        back at its window; params: [0..1] H,
 *                                        W, [2..3] kh, kw, [4..5] dilation,
 *                                        [6..7] padding, [8..9] stride h, w; L
 *                                        must be the number of windows.
 *   EMBEDDING_BAG  (weight, indices, offsets, per_sample_weights?) -> y
 *                                        weight (V, D) float32, indices and
 *                                        offsets 1-d int64/int32; y (B, D), B =
 *                                        len(offsets) - include_last_offset;
 *                                        bag b reduces rows indices[offsets[b]
 *                                        .. offsets[b + 1]); per_sample_weights
 *                                        float32 like indices (sum only);
 *                                        params: [0] mode (0 sum, 1 mean, 2
 *                                        max), [1] include_last_offset, [2]
 *                                        padding_idx (-1: none; those rows are
 *                                        skipped). An empty bag is 0. Indices
 *                                        out of range or bad offsets are an
 *                                        error at run time, never a read.
 *   ELTWISE_FUSED  (x0..x7) -> y         a chain of float32 elementwise ops
 *                                        as one kernel (the compiler makes
 *                                        it): params [0] slot count (1..46),
 *                                        [1..23] the program, two 32-bit
 *                                        slots per param, low half first
 *                                        (base/kiln_fused_program.h
 *                                        gives the instruction set: loads of
 *                                        input i broadcast or rotate_half'd,
 *                                        float immediates, float unary and
 *                                        binary ops, comparisons giving 1.0 /
 *                                        0.0 and selects, over 16
 *                                        registers); the
 *                                        last instruction's register is y.
 *                                        Inputs float32; y float32 of the
 *                                        inputs' broadcast shape.
 *   CONV2D_NHWC    (x, w, bias?, residual?) -> y
 *                                        CONV2D with channels-last
 *                                        activations: x (N, H, W, C), y and
 *                                        residual (N, Ho, Wo, O); w as
 *                                        CONV2D's, dense or packed in panels
 *                                        of 16 (KILN_LAYOUT_CONV2D_PACKED_16);
 *                                        params [0..8] as CONV2D, [9] 1: x is
 *                                        (N, C, H, W) instead (gathered as it
 *                                        is read: a region's first conv needs
 *                                        no conversion of its input). The
 *                                        compiler's layout pass makes it (a
 *                                        new op, not a CONV2D param, so that
 *                                        no pass or older reader can take its
 *                                        x for (N, C, H, W)).
 *   MAX_POOL2D_NHWC (x) -> y             MAX_POOL2D with channels-last
 *                                        activations: x (N, H, W, C) float32
 *                                        -> (N, Ho, Wo, C); params as
 *                                        MAX_POOL2D's (param 10 must be 0).
 *   GELU_BACKWARD  (dy, x) -> dx         dy * gelu'(x), float32, dy and x of
 *                                        one shape; params [0] 0: gelu's
 *                                        erf form, 1: its tanh approximation
 *                                        (aten.gelu_backward's `approximate`).
 *                                        One pass where the decomposition
 *                                        took erf, exp and nine more ops.
 *   LAYER_NORM_BACKWARD (dy, x, mean, rstd, gamma?) -> dx
 *                                        layer_norm's input gradient over
 *                                        the last params[0] dims (cols):
 *                                        dx = rstd (g - mean(g) - xh
 *                                        mean(g xh)), g = dy gamma, xh =
 *                                        (x - mean) rstd. float32; dy and x
 *                                        of one shape; mean and rstd one
 *                                        value per row (numel = rows, dense),
 *                                        gamma cols values. The weight and
 *                                        bias gradients stay plain sums.
 *   IOTA           () -> y               y[i] = params[1] + i * params[2] for
 *                                        i < params[0], a 1-d tensor of
 *                                        dtype params[3] (int64, int32 or
 *                                        float32): torch.arange whose length
 *                                        or start is a symbolic size (a
 *                                        concrete one is folded to a
 *                                        constant).
 *   GROUPED_MM     (x, w, offs) -> y     a mixture of experts' expert layer
 *                                        (transformers' grouped_mm_fallback):
 *                                        x (S, K), w (E, K, N) float32, offs
 *                                        (E) int64/int32 cumulative row ends;
 *                                        y (S, N) float32 starts at 0, then for
 *                                        e = 0..E-1 with start the previous end
 *                                        (0 first), if offs[e] != start, rows
 *                                        x[start:offs[e]] (Python slicing:
 *                                        negative ends count from S, ends clamp
 *                                        to [0, S], an empty slice writes
 *                                        nothing) · w[e] overwrite those rows
 *                                        of y and start = offs[e]. params: [0]
 *                                        1: w is stored (E, N, K), read
 *                                        transposed (a permuted parameter).
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

/* X(ENUM_SUFFIX, "name", min_inputs, max_inputs) */
#define KILN_OP_LIST(X)              \
  X(RESHAPE, "reshape", 1, 1)        \
  X(STRIDED_COPY, "strided_copy", 1, 1) \
  X(CAT, "cat", 1, 8)                \
  X(GATHER, "gather", 2, 2)          \
  X(WHERE, "where", 3, 3)            \
  X(CAST, "cast", 1, 1)              \
  X(ADD, "add", 2, 2)                \
  X(SUB, "sub", 2, 2)                \
  X(MUL, "mul", 2, 2)                \
  X(DIV, "div", 2, 2)                \
  X(POW, "pow", 2, 2)                \
  X(MAXIMUM, "maximum", 2, 2)        \
  X(MINIMUM, "minimum", 2, 2)        \
  X(EQ, "eq", 2, 2)                  \
  X(NE, "ne", 2, 2)                  \
  X(LT, "lt", 2, 2)                  \
  X(LE, "le", 2, 2)                  \
  X(GT, "gt", 2, 2)                  \
  X(GE, "ge", 2, 2)                  \
  X(LOGICAL_AND, "logical_and", 2, 2) \
  X(LOGICAL_OR, "logical_or", 2, 2)  \
  X(NEG, "neg", 1, 1)                \
  X(ABS, "abs", 1, 1)                \
  X(EXP, "exp", 1, 1)                \
  X(LOG, "log", 1, 1)                \
  X(SQRT, "sqrt", 1, 1)              \
  X(RSQRT, "rsqrt", 1, 1)            \
  X(RECIPROCAL, "reciprocal", 1, 1)  \
  X(TANH, "tanh", 1, 1)              \
  X(SIGMOID, "sigmoid", 1, 1)        \
  X(RELU, "relu", 1, 1)              \
  X(GELU, "gelu", 1, 1)              \
  X(GELU_TANH, "gelu_tanh", 1, 1)    \
  X(SILU, "silu", 1, 1)              \
  X(ERF, "erf", 1, 1)                \
  X(SIN, "sin", 1, 1)                \
  X(COS, "cos", 1, 1)                \
  X(LOGICAL_NOT, "logical_not", 1, 1) \
  X(SUM, "sum", 1, 1)                \
  X(MEAN, "mean", 1, 1)              \
  X(MAX, "max", 1, 1)                \
  X(MIN, "min", 1, 1)                \
  X(ANY, "any", 1, 1)                \
  X(ARGMAX, "argmax", 1, 1)          \
  X(SOFTMAX, "softmax", 1, 1)        \
  X(LOG_SOFTMAX, "log_softmax", 1, 1) \
  X(LAYER_NORM, "layer_norm", 1, 3)  \
  X(RMS_NORM, "rms_norm", 1, 2)      \
  X(MATMUL, "matmul", 2, 2)          \
  X(LINEAR, "linear", 2, 4)          \
  X(SDPA, "sdpa", 3, 4)              \
  X(FMA_SCALAR, "fma_scalar", 1, 1)  \
  X(GATHER_ELEMENTS, "gather_elements", 2, 2) \
  X(CONV2D, "conv2d", 2, 4)          \
  X(MAX_POOL2D, "max_pool2d", 1, 1)  \
  X(AVG_POOL2D, "avg_pool2d", 1, 1)  \
  X(ACOS, "acos", 1, 1)              \
  X(ACOSH, "acosh", 1, 1)            \
  X(ASIN, "asin", 1, 1)              \
  X(ASINH, "asinh", 1, 1)            \
  X(ATAN, "atan", 1, 1)              \
  X(ATANH, "atanh", 1, 1)            \
  X(COSH, "cosh", 1, 1)              \
  X(SINH, "sinh", 1, 1)              \
  X(TAN, "tan", 1, 1)                \
  X(EXPM1, "expm1", 1, 1)            \
  X(LOG10, "log10", 1, 1)            \
  X(LOG1P, "log1p", 1, 1)            \
  X(LOG2, "log2", 1, 1)              \
  X(CEIL, "ceil", 1, 1)              \
  X(FLOOR, "floor", 1, 1)            \
  X(ROUND, "round", 1, 1)            \
  X(TRUNC, "trunc", 1, 1)            \
  X(SIGN, "sign", 1, 1)              \
  X(ATAN2, "atan2", 2, 2)            \
  X(BITWISE_AND, "bitwise_and", 2, 2) \
  X(BITWISE_OR, "bitwise_or", 2, 2)  \
  X(BITWISE_XOR, "bitwise_xor", 2, 2) \
  X(FMOD, "fmod", 2, 2)              \
  X(REMAINDER, "remainder", 2, 2)    \
  X(DIV_TRUNC, "div_trunc", 2, 2)    \
  X(DIV_FLOOR, "div_floor", 2, 2)    \
  X(CONV2D_GRAD_INPUT, "conv2d_grad_input", 2, 2) \
  X(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight", 2, 2) \
  X(MAX_POOL2D_INDICES, "max_pool2d_indices", 1, 1) \
  X(MAX_POOL2D_GRAD, "max_pool2d_grad", 2, 2) \
  X(AVG_POOL2D_GRAD, "avg_pool2d_grad", 1, 1) \
  X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d", 1, 1) \
  X(ADAPTIVE_AVG_POOL2D_GRAD, "adaptive_avg_pool2d_grad", 1, 1) \
  X(UPSAMPLE_BILINEAR2D, "upsample_bilinear2d", 1, 1) \
  X(PAD, "pad", 1, 1)                \
  X(STRIDED_SCATTER, "strided_scatter", 2, 2) \
  X(SCATTER, "scatter", 3, 3)        \
  X(SCAN, "scan", 1, 1)              \
  X(ARGSORT, "argsort", 1, 1)        \
  X(GRID_SAMPLER_2D, "grid_sampler_2d", 2, 2) \
  X(COL2IM, "col2im", 1, 1)          \
  X(EMBEDDING_BAG, "embedding_bag", 3, 4) \
  X(ELTWISE_FUSED, "eltwise_fused", 1, 8) \
  X(CONV2D_NHWC, "conv2d_nhwc", 2, 4) \
  X(MAX_POOL2D_NHWC, "max_pool2d_nhwc", 1, 1) \
  X(GELU_BACKWARD, "gelu_backward", 2, 2) \
  X(LAYER_NORM_BACKWARD, "layer_norm_backward", 4, 5) \
  X(IOTA, "iota", 0, 0)              \
  X(GROUPED_MM, "grouped_mm", 3, 3)

typedef enum kiln_op_e {
#define KILN_OP_ENUM(e, name, lo, hi) KILN_OP_##e,
  KILN_OP_LIST(KILN_OP_ENUM)
#undef KILN_OP_ENUM
  KILN_OP_COUNT
} kiln_op_t;

/* Op categories: contiguous enum ranges the kernels and passes test for. */
#define KILN_OP_IS_BINARY(op) ((op) >= KILN_OP_ADD && (op) <= KILN_OP_LOGICAL_OR)
#define KILN_OP_IS_COMPARE(op) ((op) >= KILN_OP_EQ && (op) <= KILN_OP_LOGICAL_OR)
#define KILN_OP_IS_UNARY_MATH(op) ((op) >= KILN_OP_NEG && (op) <= KILN_OP_COS)
/* Appended later than the ranges above, so in ranges of their own (same
 * order as kiln_math_unary_t / kiln_math_binary_t in kernels/math). */
#define KILN_OP_IS_UNARY_EXT(op) ((op) >= KILN_OP_ACOS && (op) <= KILN_OP_SIGN)
#define KILN_OP_IS_BINARY_EXT(op) ((op) >= KILN_OP_ATAN2 && (op) <= KILN_OP_DIV_FLOOR)
#define KILN_OP_IS_REDUCE(op) ((op) >= KILN_OP_SUM && (op) <= KILN_OP_ANY)

/* MATMUL flags (params[0]). */
#define KILN_MATMUL_TRANSPOSE_A 1
#define KILN_MATMUL_TRANSPOSE_B 2

/* SDPA flags (params[1]). */
#define KILN_SDPA_VIEWS 1
#define KILN_SDPA_OUT_BSHD 2

/* "?" for an out-of-range value. */
const char* kiln_op_name(kiln_op_t op);
int kiln_op_min_inputs(kiln_op_t op);
int kiln_op_max_inputs(kiln_op_t op);

#endif /* KILN_OPS_H */
