/* The kiln operator set: one record per op, from which the op enum, the
 * name table, the Python op table's names (kiln._C.OPS and kiln._C.PARAMS),
 * the shape-inference dispatch, the verifier's parameter checks and each
 * target's kernel table all follow. The numbering is part of the .kiln
 * format: append new ops at the end of the list, never reorder.
 *
 * A record: X(ENUM, "name", min_inputs, max_inputs, family, params,
 * fparams, shape, entry):
 *   family  a kiln_op_family_t (KILN_FAMILY_<family>);
 *   params  its int64 parameter layout, fparams its float one (the
 *           layouts below: KILN_P(params, NAME) indexes n->params);
 *   shape   its shape rule, kiln_shape_<shape>(graph, node, out)
 *           (ir/kiln_shape_rules.h);
 *   entry   its kernel entry, KILN_ENTRY_<entry> (KILN_OP_ENTRIES below):
 *           what a target (hal/kiln_hal.h) implements to run it; ops of
 *           one entry share a kernel.
 * docs/adding-an-op.md walks a new op through every file it touches.
 *
 * Conventions for every op: outputs are dense and row-major; broadcasting
 * follows NumPy/PyTorch (trailing-aligned, size-1 dims stretch); parameters
 * are named in their layout (the names below are layout fields).
 *
 *   RESHAPE        (x) -> y              RANK, DIMS: y's; same element count;
 *                                        y aliases x.
 *   STRIDED_COPY   (x) -> y              VIEW: y (RANK, DIMS) read from x at
 *                                        STRIDES and OFFSET. Covers permute,
 *                                        expand, slice, select.
 *   CAT            (x0..x7) -> y         AXIS.
 *   GATHER         (table, index) -> y   AXIS. y = table.shape[:axis]
 *                                        + index.shape + table.shape[axis+1:].
 *                                        Index int64/int32; out of range is an
 *                                        error at run time, never a read.
 *   WHERE          (cond, a, b) -> y     broadcast; cond bool.
 *   CAST           (x) -> y              DTYPE: the target dtype.
 *   ADD..LOGICAL_OR (a, b) -> y          broadcast, a and b of one dtype;
 *                                        comparisons and logical ops give bool.
 *   NEG..COS       (x) -> y              float unary math, in kiln_unary_t order.
 *   LOGICAL_NOT    (x) -> y              bool.
 *   SUM..ANY       (x) -> y              AXES: bitmask of reduced axes, KEEPDIM.
 *   ARGMAX         (x) -> y              AXIS, KEEPDIM; y int64.
 *   SOFTMAX, LOG_SOFTMAX (x) -> y        AXIS; SOFTMAX's SAFE: 1 makes a row of
 *                                        all -inf zeros, not NaN
 *                                        (aten._safe_softmax).
 *   LAYER_NORM     (x, gamma?, beta?)    DIMS: trailing dims normalised; EPS.
 *   RMS_NORM       (x, gamma?)           as LAYER_NORM.
 *   MATMUL         (a, b) -> y           a (..., M, K), b (..., K, N), batch
 *                                        dims broadcast; y (..., M, N) float32;
 *                                        a float32 or bfloat16 (widened,
 *                                        exact), b float32;
 *                                        FLAGS: KILN_MATMUL_TRANSPOSE_A: a is
 *                                        stored (..., K, M) and read
 *                                        transposed; KILN_MATMUL_TRANSPOSE_B:
 *                                        b is stored (..., N, K) (the compiler
 *                                        sets these to drop transpose copies);
 *                                        KILN_MATMUL_ROUND_A_BF16: a (float32)
 *                                        is read rounded to bf16, as a CAST to
 *                                        bf16 would give it;
 *                                        KILN_MATMUL_ROUND_B_BF16: b (float32,
 *                                        not a constant) likewise;
 *                                        KILN_MATMUL_ROUND_Y_BF16: y is
 *                                        rounded to bf16 and kept as float32,
 *                                        as a CAST to bf16 and back would.
 *   LINEAR         (x, w, bias?, residual?) -> y
 *                                        x (..., K) float32 or bfloat16 (widened,
 *                                        exact); w (K, N): a constant, packed
 *                                        for the GEMM when its layout says so,
 *                                        or a dense value (training: weights
 *                                        are graph inputs);
 *                                        y = act(x·w + bias) + residual;
 *                                        ACT: a kiln_activation_t;
 *                                        W_TRANSPOSED 1: w is a dense value
 *                                        stored (N, K), read transposed;
 *                                        ROUND_A 1: x (float32) is read
 *                                        rounded to bf16, as MATMUL's flag;
 *                                        ROUND_B 1: w (float32, not a
 *                                        constant) likewise;
 *                                        ROUND_Y 1: y (after the residual)
 *                                        rounded to bf16, as MATMUL's flag.
 *   SDPA           (q, k, v, mask?) -> y q (B, H, Sq, D), k (B, Hkv, Skv, D),
 *                                        v (B, Hkv, Skv, Dv); mask additive
 *                                        float, broadcast to (B, H, Sq, Skv);
 *                                        y (B, H, Sq, Dv); SCALE; CAUSAL;
 *                                        FLAGS: KILN_SDPA_VIEWS: q, k, v are
 *                                        read through views of any dense
 *                                        inputs, of BATCH..V_HEAD_DIM and each
 *                                        one's OFFSET and STRIDES (b, h, s, d)
 *                                        (the compiler sets these to drop
 *                                        permute copies); KILN_SDPA_OUT_BSHD:
 *                                        y is (B, Sq, H, Dv);
 *                                        KILN_SDPA_SCALE_HEAD_DIM: SCALE is
 *                                        ignored, the scale is 1 / sqrt(D)
 *                                        of the call's D (torch's default
 *                                        where D is symbolic; format 2.14);
 *                                        KILN_SDPA_BF16: computed in bf16
 *                                        with fp32 sums (compute_dtype=bf16,
 *                                        format 2.18): q, k, v rounded to
 *                                        bf16 (nearest even); scores the
 *                                        fp32 sums of the exact products,
 *                                        times the scale in fp32 (after
 *                                        rounding, as torch's CPU flash
 *                                        kernel for bf16), plus the mask;
 *                                        softmax in fp32, its weights
 *                                        e^(s - c) rounded to bf16 for P·V
 *                                        (c = K ln2, K an integer at or
 *                                        above max s log2 e: moving c by a
 *                                        power of two leaves the rounding
 *                                        alone, so tiling and threads do
 *                                        not change it), divided by the
 *                                        rounded weights' fp32 sum (a
 *                                        weighted mean of v); P·V summed
 *                                        in fp32; y float32
 *                                        (kernels/nn/kiln_attention_bf16.h);
 *                                        KILN_SDPA_EVERY_KEY: every key is
 *                                        read, as torch's math path does
 *                                        (format 2.22): the causal mask is
 *                                        added to each score (-inf), so a
 *                                        hidden key's NaN or +inf score
 *                                        makes its row NaN, and a hidden
 *                                        key's weight 0 multiplies its
 *                                        value (NaN for Inf or NaN in v).
 *   FMA_SCALAR     (x) -> y              y = x * SCALE + SHIFT (float).
 *   GATHER_ELEMENTS (x, index) -> y      torch.gather: y has index's shape;
 *                                        y[..i..] = x[..index[..i..]..] along
 *                                        AXIS; other dims of index no larger
 *                                        than x's.
 *   CONV2D         (x, w, bias?, residual?, scale?) -> y
 *                                        x (N, C, H, W) float32; w dense
 *                                        (O, C / groups, kh, kw), usually a
 *                                        constant; bias (O); residual of y's
 *                                        shape; y (N, O, Ho, Wo) =
 *                                        act(conv(x, w) + bias) + residual;
 *                                        scale (O, format 2.19): conv(x, w)
 *                                        is multiplied by it per channel
 *                                        first (a batch norm folded into a
 *                                        bf16 model's conv whose weight
 *                                        stays bf16: kiln_pass_fuse_conv);
 *                                        the CPU runs it only channels-last
 *                                        on the bf16 weight form;
 *                                        STRIDE_H/W, PAD_H/W, DILATION_H/W,
 *                                        GROUPS, ACT, RESIDUAL_BEFORE_ACT 1:
 *                                        y = act(conv(x, w) + bias + residual)
 *                                        (ResNet's blocks).
 *                                        Ho = (H + 2 ph - dh (kh - 1) - 1) / sh + 1.
 *   MAX_POOL2D, AVG_POOL2D (x) -> y      x (N, C, H, W) float32 -> (N, C, Ho, Wo);
 *                                        KERNEL, STRIDE, PAD (at most half the
 *                                        kernel), DILATION (1 for avg),
 *                                        CEIL_MODE, COUNT_INCLUDE_PAD (avg),
 *                                        DIVISOR_OVERRIDE (avg; 0: none, else
 *                                        the divisor of every window, negative
 *                                        too, as eager). Sizes as torch's
 *                                        pooling.
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
 *                                        W); CONV2D's STRIDE..GROUPS, then H, W
 *                                        (stride makes them ambiguous); Ho, Wo
 *                                        must be what CONV2D gives.
 *   CONV2D_GRAD_WEIGHT (dy, x) -> dw     the gradient with respect to w: dy
 *                                        (N, O, Ho, Wo), x (N, C, H, W); dw
 *                                        (O, C / groups, kh, kw); CONV2D's
 *                                        STRIDE..GROUPS, then KERNEL_H, KERNEL_W.
 *   MAX_POOL2D_INDICES (x) -> i          int64 (N, C, Ho, Wo): the flat index
 *                                        (h * W + w) within x's (n, c) plane
 *                                        of each window's maximum, torch's
 *                                        choice on ties and NaN; params as
 *                                        MAX_POOL2D.
 *   MAX_POOL2D_GRAD (dy, i) -> dx        dy (N, C, Ho, Wo) float32, i int64 of
 *                                        dy's shape; dx (N, C, H, W) with
 *                                        dx[n][c].flat[i] += dy; H, W. An
 *                                        index outside the plane is an error at
 *                                        run time, never a write.
 *   AVG_POOL2D_GRAD (dy) -> dx           dy (N, C, Ho, Wo) -> dx (N, C, H, W),
 *                                        each dy cell spread over its window
 *                                        by AVG_POOL2D's divisor; AVG_POOL2D's
 *                                        KERNEL..COUNT_INCLUDE_PAD, then H, W,
 *                                        DIVISOR_OVERRIDE (0: none).
 *   ADAPTIVE_AVG_POOL2D (x) -> y         x (N, C, H, W) float32 -> (N, C, Ho, Wo):
 *                                        cell (i, j) averages rows [floor(i H /
 *                                        Ho), ceil((i + 1) H / Ho)) and the
 *                                        columns likewise (torch's windows);
 *                                        H, W: Ho, Wo.
 *   ADAPTIVE_AVG_POOL2D_GRAD (dy) -> dx  its gradient: dy (N, C, Ho, Wo) ->
 *                                        dx (N, C, H, W); H, W.
 *   UPSAMPLE_BILINEAR2D (x) -> y         x (N, C, H, W) float32 -> (N, C, Ho, Wo),
 *                                        torch's bilinear rule; OUT_H, OUT_W,
 *                                        ALIGN_CORNERS; SCALE_H, SCALE_W:
 *                                        torch's scale factors (0: none, the
 *                                        sizes' ratio is used).
 *   PAD            (x) -> y              MODE (0 constant, 1 reflect, 2
 *                                        replicate), BEFORE and AFTER: the
 *                                        elements added per dim of x (negative
 *                                        crops; reflect: pad < size; replicate:
 *                                        size >= 1 where padded); INT_FILL
 *                                        for integer and bool x, FILL (float)
 *                                        for float x.
 *   STRIDED_SCATTER (base, src) -> y     y = base, then src written through the
 *                                        VIEW of y (STRIDED_COPY's layout; DIMS
 *                                        are src's). Writes in row-major src
 *                                        order: an overlapping view keeps the
 *                                        last.
 *   SCATTER        (x, index, src) -> y  torch.scatter / scatter_reduce along
 *                                        AXIS: y = x, then for each position
 *                                        p of index, y[p with p[axis] =
 *                                        index[p]] (op)= src[p]. index int64 or
 *                                        int32, x, index, src of one rank; index's
 *                                        dims no larger than src's, nor than x's
 *                                        off the axis. REDUCE (0 assign, 1 sum,
 *                                        2 prod, 3 mean, 4 amax, 5 amin; on
 *                                        bool sum, amax are or, prod, amin are
 *                                        and; no bool mean), INCLUDE_SELF
 *                                        (reductions: 0 = targets start from
 *                                        the reduction's identity),
 *                                        WRAP_NEGATIVE 1: negative indices
 *                                        count from the end (index_put), 0:
 *                                        they are out of range (torch.scatter).
 *                                        Out-of-range indices are an error at
 *                                        run time, never a write.
 *   SCAN           (x) -> y              inclusive scan along AXIS; KIND 0 sum,
 *                                        1 product. float32 accumulates in
 *                                        double (as torch's CPU cumsum).
 *   ARGSORT        (x) -> y              int64 indices that stably sort x along
 *                                        AXIS; DESCENDING; K: y keeps the first
 *                                        k along the axis (topk). NaN sorts as
 *                                        the largest value.
 *   GRID_SAMPLER_2D (x, grid) -> y       torch's grid_sample: x (N, C, H, W),
 *                                        grid (N, Ho, Wo, 2) float32 (x then y
 *                                        in [-1, 1]); y (N, C, Ho, Wo); MODE
 *                                        (0 bilinear, 1 nearest), PADDING (0
 *                                        zeros, 1 border, 2 reflection),
 *                                        ALIGN_CORNERS. Coordinates outside the
 *                                        image follow the padding mode (zeros:
 *                                        read as 0).
 *   COL2IM         (x) -> y              torch's fold: x (N, C kh kw, L) float32
 *                                        -> y (N, C, H, W), each column added
 *                                        back at its window; H, W, KERNEL,
 *                                        DILATION, PAD, STRIDE; L must be the
 *                                        number of windows.
 *   EMBEDDING_BAG  (weight, indices, offsets, per_sample_weights?) -> y
 *                                        weight (V, D) float32, indices and
 *                                        offsets 1-d int64/int32; y (B, D), B =
 *                                        len(offsets) - include_last_offset;
 *                                        bag b reduces rows indices[offsets[b]
 *                                        .. offsets[b + 1]); per_sample_weights
 *                                        float32 like indices (sum only); MODE
 *                                        (0 sum, 1 mean, 2 max),
 *                                        INCLUDE_LAST_OFFSET, PADDING_IDX (-1:
 *                                        none; those rows are skipped). An
 *                                        empty bag is 0. Indices out of range
 *                                        or bad offsets are an error at run
 *                                        time, never a read.
 *   ELTWISE_FUSED  (x0..x7) -> y         a chain of float32 elementwise ops
 *                                        as one kernel (the compiler makes
 *                                        it): N_SLOTS (1..46), PROGRAM: two
 *                                        32-bit slots per param, low half first
 *                                        (base/kiln_fused_program.h gives the
 *                                        instruction set: loads of input i
 *                                        broadcast, rotate_half'd or one
 *                                        half of its last dim, float
 *                                        immediates, float unary and binary
 *                                        ops, comparisons giving 1.0 / 0.0 and
 *                                        selects, over 16 registers); the last
 *                                        instruction's register is y. Inputs
 *                                        float32; y float32 of the inputs'
 *                                        broadcast shape (an input loaded by
 *                                        halves counts as its half).
 *   CONV2D_NHWC    (x, w, bias?, residual?, scale?) -> y
 *                                        CONV2D with channels-last
 *                                        activations: x (N, H, W, C), y and
 *                                        residual (N, Ho, Wo, O); w as
 *                                        CONV2D's, dense or packed in panels
 *                                        of 16 (KILN_LAYOUT_CONV2D_PACKED_16),
 *                                        or for bf16 compute (x rounded to
 *                                        bf16, fp32 sums: _16_BF16, 2.16);
 *                                        CONV2D's params, X_NCHW 1: x is (N, C,
 *                                        H, W) instead (gathered as it is
 *                                        read: a region's first conv needs no
 *                                        conversion of its input). The
 *                                        compiler's layout pass makes it (a
 *                                        new op, not a CONV2D param, so that
 *                                        no pass or older reader can take its
 *                                        x for (N, C, H, W)).
 *   MAX_POOL2D_NHWC (x) -> y             MAX_POOL2D with channels-last
 *                                        activations: x (N, H, W, C) float32
 *                                        -> (N, Ho, Wo, C); params as
 *                                        MAX_POOL2D's (DIVISOR_OVERRIDE 0).
 *   GELU_BACKWARD  (dy, x) -> dx         dy * gelu'(x), float32, dy and x of
 *                                        one shape; APPROXIMATE 0: gelu's
 *                                        erf form, 1: its tanh approximation
 *                                        (aten.gelu_backward's `approximate`).
 *                                        One pass where the decomposition
 *                                        took erf, exp and nine more ops.
 *   LAYER_NORM_BACKWARD (dy, x, mean, rstd, gamma?) -> dx
 *                                        layer_norm's input gradient over
 *                                        the last DIMS dims (cols):
 *                                        dx = rstd (g - mean(g) - xh
 *                                        mean(g xh)), g = dy gamma, xh =
 *                                        (x - mean) rstd. float32; dy and x
 *                                        of one shape; mean and rstd one
 *                                        value per row (numel = rows, dense),
 *                                        gamma cols values. The weight and
 *                                        bias gradients stay plain sums.
 *   IOTA           () -> y               y[i] = START + i * STEP for i <
 *                                        LENGTH, a 1-d tensor of DTYPE (int64,
 *                                        int32 or float32): torch.arange whose
 *                                        length or start is a symbolic size (a
 *                                        concrete one is folded to a constant).
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
 *                                        of y and start = offs[e].
 *                                        W_TRANSPOSED 1: w is stored (E, N, K),
 *                                        read transposed (a permuted parameter).
 *   RANDOM         (seed) -> y           y (RANK, DIMS) float32 random numbers
 *                                        (kernels/math/kiln_random.h): DIST 0
 *                                        uniform in [A, B), 1 normal of mean A
 *                                        and standard deviation B; element i a
 *                                        function of (seed, STREAM, i) only.
 *                                        seed: one int64 (a model input drawn
 *                                        per call from torch's generator);
 *                                        STREAM in [0, 2^32) tells a graph's
 *                                        random nodes apart. Dropout's mask is
 *                                        a uniform compared with 1 - p.
 *   SOLVE_TRIANGULAR (a, b) -> x         torch.linalg.solve_triangular with
 *                                        left=True: a (..., n, n), b and x
 *                                        (..., n, k) float32, the same batch
 *                                        dims; a x = b with a UPPER or lower
 *                                        triangular (only that triangle read),
 *                                        its diagonal ones when UNIT
 *                                        (kernels/gemm/kiln_solve_triangular.h).
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

/* ---- Parameter layouts ----
 * Each op's int64 params and float fparams follow one layout, named in its
 * record: a list of P(NAME, count) fields, packed in order from index 0.
 * KILN_P(L, NAME) is field NAME's index in layout L (ir/kiln_op_params.h),
 * so C reads n->params[KILN_P(CONV2D, GROUPS)]; the Python op table reads
 * the same names from kiln._C.PARAMS. The indices are part of the .kiln
 * format: append fields, never reorder. Fields past an op's layout must be
 * zero (shape inference checks). */

#define KILN_PARAMS_NONE(P)

/* RESHAPE: the result's rank and dims. */
#define KILN_PARAMS_RESHAPE(P) P(RANK, 1) P(DIMS, 8)

/* STRIDED_COPY, STRIDED_SCATTER: a strided view of a dense tensor: the
 * view's rank and dims, the element stride of each view dim in the
 * tensor, and the element offset of the view's first element. */
#define KILN_PARAMS_VIEW(P) P(RANK, 1) P(DIMS, 8) P(STRIDES, 8) P(OFFSET, 1)

/* CAT, GATHER, GATHER_ELEMENTS: the axis. */
#define KILN_PARAMS_AXIS(P) P(AXIS, 1)

/* CAST: the target kiln_dtype_t. */
#define KILN_PARAMS_CAST(P) P(DTYPE, 1)

/* SUM..ANY: a bitmask of the reduced axes; keep them as size 1. */
#define KILN_PARAMS_REDUCE(P) P(AXES, 1) P(KEEPDIM, 1)

/* ARGMAX: one axis. */
#define KILN_PARAMS_ARGMAX(P) P(AXIS, 1) P(KEEPDIM, 1)

/* SOFTMAX, LOG_SOFTMAX: the axis; SAFE (SOFTMAX only): a row of all -inf
 * gives zeros, not NaN (aten._safe_softmax). */
#define KILN_PARAMS_SOFTMAX(P) P(AXIS, 1) P(SAFE, 1)

/* LAYER_NORM, RMS_NORM, LAYER_NORM_BACKWARD: how many trailing dims are
 * normalised. */
#define KILN_PARAMS_NORM(P) P(DIMS, 1)

/* MATMUL: KILN_MATMUL_TRANSPOSE_A / _B flags. */
#define KILN_PARAMS_MATMUL(P) P(FLAGS, 1)

/* LINEAR: the kiln_activation_t of the epilogue; W_TRANSPOSED 1: w is a
 * dense value stored (N, K), read transposed. */
#define KILN_PARAMS_LINEAR(P) P(ACT, 1) P(W_TRANSPOSED, 1) P(ROUND_A, 1) P(ROUND_B, 1) P(ROUND_Y, 1)

/* SDPA: causal (top-left aligned); KILN_SDPA_VIEWS / _OUT_BSHD flags; with
 * KILN_SDPA_VIEWS, the sizes and each of q, k, v's element offset and
 * strides (b, h, s, d) in its input. */
#define KILN_PARAMS_SDPA(P)                                                            \
  P(CAUSAL, 1) P(FLAGS, 1) P(BATCH, 1) P(HEADS, 1) P(KV_HEADS, 1) P(Q_LEN, 1)          \
  P(KV_LEN, 1) P(HEAD_DIM, 1) P(V_HEAD_DIM, 1) P(Q_OFFSET, 1) P(Q_STRIDES, 4)          \
  P(K_OFFSET, 1) P(K_STRIDES, 4) P(V_OFFSET, 1) P(V_STRIDES, 4)

/* CONV2D: stride, padding, dilation, groups, the activation, and 1 when the
 * residual is added before the activation (ResNet's blocks); X_NCHW is
 * CONV2D_NHWC's (0 in a CONV2D). ROUND_X 1: the model convolves x rounded
 * to bf16 (a bf16 model's or autocast's conv: eager reads the bf16 tensor).
 * A target may then round x as it reads it and compute the products in
 * bf16 with fp32 sums, where the weight holds bf16 values (so rounding it
 * changes nothing: kiln_hal_cpu_constant.c), or read x as it is: kiln rounds
 * where eager rounds, or not at all (python/kiln/lowp.py). Format 2.19. */
#define KILN_PARAMS_CONV2D_COMMON(P)                                                   \
  P(STRIDE_H, 1) P(STRIDE_W, 1) P(PAD_H, 1) P(PAD_W, 1) P(DILATION_H, 1)               \
  P(DILATION_W, 1) P(GROUPS, 1)
#define KILN_PARAMS_CONV2D(P)                                                          \
  KILN_PARAMS_CONV2D_COMMON(P) P(ACT, 1) P(RESIDUAL_BEFORE_ACT, 1) P(X_NCHW, 1) P(ROUND_X, 1)
/* CONV2D_NHWC: as CONV2D; X_NCHW 1: x is (N, C, H, W), gathered as read.
 * PAD_H_END, PAD_W_END: zeros added past the input's end beyond PAD_H /
 * PAD_W (a TF-style "same" pad at stride 2 pads one more at the end:
 * kiln_pass_layout.c folds such a PAD into a depthwise conv), with x of
 * concrete H and W; format 2.22. Y_BF16 1: y is stored in bf16, each
 * element rounded to nearest even from the fp32 result (a conv whose every
 * reader is a bf16-compute conv, which rounds its x so anyway:
 * kiln_pass_conv_bf16_io.c); x may be bf16 when the weight is in the
 * bf16-compute form. Format 2.23. */
#define KILN_PARAMS_CONV2D_NHWC(P) \
  KILN_PARAMS_CONV2D(P) P(PAD_H_END, 1) P(PAD_W_END, 1) P(Y_BF16, 1)
/* A depthwise CONV2D_NHWC reads or stores bf16 with at most this many taps
 * (the channels-last depthwise kernel's reach: the CPU target asserts it). */
#define KILN_CONV2D_NHWC_BF16_DW_TAPS 49
/* CONV2D_GRAD_INPUT: as CONV2D's first seven, then the input's H and W. */
#define KILN_PARAMS_CONV2D_GRAD_INPUT(P) KILN_PARAMS_CONV2D_COMMON(P) P(H, 1) P(W, 1)
/* CONV2D_GRAD_WEIGHT: as CONV2D's first seven, then the kernel's size. */
#define KILN_PARAMS_CONV2D_GRAD_WEIGHT(P) KILN_PARAMS_CONV2D_COMMON(P) P(KERNEL_H, 1) P(KERNEL_W, 1)

/* MAX_POOL2D, AVG_POOL2D, MAX_POOL2D_INDICES, MAX_POOL2D_NHWC: kernel,
 * stride, padding (at most half the kernel), dilation (1 for avg),
 * ceil_mode, count_include_pad (avg), divisor_override (avg; 0: none). */
#define KILN_PARAMS_POOL2D_COMMON(P)                                                   \
  P(KERNEL_H, 1) P(KERNEL_W, 1) P(STRIDE_H, 1) P(STRIDE_W, 1) P(PAD_H, 1) P(PAD_W, 1)  \
  P(DILATION_H, 1) P(DILATION_W, 1) P(CEIL_MODE, 1) P(COUNT_INCLUDE_PAD, 1)
#define KILN_PARAMS_POOL2D(P) KILN_PARAMS_POOL2D_COMMON(P) P(DIVISOR_OVERRIDE, 1)
/* AVG_POOL2D_GRAD: AVG_POOL2D's first ten, the input's H and W, then
 * divisor_override. */
#define KILN_PARAMS_AVG_POOL2D_GRAD(P) KILN_PARAMS_POOL2D_COMMON(P) P(H, 1) P(W, 1) P(DIVISOR_OVERRIDE, 1)

/* MAX_POOL2D_GRAD, ADAPTIVE_AVG_POOL2D_GRAD: the input's H and W;
 * ADAPTIVE_AVG_POOL2D: the output's. */
#define KILN_PARAMS_SIZE2D(P) P(H, 1) P(W, 1)

/* UPSAMPLE_BILINEAR2D: the output's size and align_corners. */
#define KILN_PARAMS_UPSAMPLE(P) P(OUT_H, 1) P(OUT_W, 1) P(ALIGN_CORNERS, 1)

/* PAD: mode (0 constant, 1 reflect, 2 replicate), the elements added
 * before and after each dim of x, the fill of integer and bool x (the
 * float FILL for float x). */
#define KILN_PARAMS_PAD(P) P(MODE, 1) P(BEFORE, 8) P(AFTER, 8) P(INT_FILL, 1)

/* SCATTER: axis; reduce (0 assign, 1 sum, 2 prod, 3 mean, 4 amax, 5 amin);
 * include_self; 1: negative indices count from the end (index_put). */
#define KILN_PARAMS_SCATTER(P) P(AXIS, 1) P(REDUCE, 1) P(INCLUDE_SELF, 1) P(WRAP_NEGATIVE, 1)

/* SCAN: axis; 0 sum, 1 product. */
#define KILN_PARAMS_SCAN(P) P(AXIS, 1) P(KIND, 1)

/* ARGSORT: axis, descending, how many to keep (topk). */
#define KILN_PARAMS_ARGSORT(P) P(AXIS, 1) P(DESCENDING, 1) P(K, 1)

/* GRID_SAMPLER_2D: mode (0 bilinear, 1 nearest), padding (0 zeros, 1
 * border, 2 reflection), align_corners. */
#define KILN_PARAMS_GRID_SAMPLER(P) P(MODE, 1) P(PADDING, 1) P(ALIGN_CORNERS, 1)

/* COL2IM: the output's H and W, kernel, dilation, padding, stride. */
#define KILN_PARAMS_COL2IM(P)                                                          \
  P(H, 1) P(W, 1) P(KERNEL_H, 1) P(KERNEL_W, 1) P(DILATION_H, 1) P(DILATION_W, 1)      \
  P(PAD_H, 1) P(PAD_W, 1) P(STRIDE_H, 1) P(STRIDE_W, 1)

/* EMBEDDING_BAG: mode (0 sum, 1 mean, 2 max), include_last_offset,
 * padding_idx (-1: none). */
#define KILN_PARAMS_EMBEDDING_BAG(P) P(MODE, 1) P(INCLUDE_LAST_OFFSET, 1) P(PADDING_IDX, 1)

/* ELTWISE_FUSED: the program's slot count, then two 32-bit slots per param
 * (base/kiln_fused_program.h). */
#define KILN_PARAMS_FUSED(P) P(N_SLOTS, 1) P(PROGRAM, 23)

/* GELU_BACKWARD: 0 gelu's erf form, 1 its tanh approximation. */
#define KILN_PARAMS_GELU_BACKWARD(P) P(APPROXIMATE, 1)

/* IOTA: y[i] = start + i * step for i < length, of dtype. */
#define KILN_PARAMS_IOTA(P) P(LENGTH, 1) P(START, 1) P(STEP, 1) P(DTYPE, 1)

/* GROUPED_MM: W_TRANSPOSED 1: w is stored (E, N, K), read transposed. */
#define KILN_PARAMS_GROUPED_MM(P) P(W_TRANSPOSED, 1)

/* SOLVE_TRIANGULAR: 1: A is upper triangular (else lower); 1: its
 * diagonal is taken as ones (unitriangular). */
#define KILN_PARAMS_SOLVE_TRIANGULAR(P) P(UPPER, 1) P(UNIT, 1)

/* RANDOM: y's shape, the distribution (kiln_random_dist_t), the stream. */
#define KILN_PARAMS_RANDOM(P) P(RANK, 1) P(DIMS, 8) P(DIST, 1) P(STREAM, 1)

/* ---- float layouts (fparams) ---- */

#define KILN_FPARAMS_NONE(P)
#define KILN_FPARAMS_NORM(P) P(EPS, 1)
#define KILN_FPARAMS_SDPA(P) P(SCALE, 1)
#define KILN_FPARAMS_FMA(P) P(SCALE, 1) P(SHIFT, 1)
/* torch's scale factors (0: none, the sizes' ratio is used). */
#define KILN_FPARAMS_UPSAMPLE(P) P(SCALE_H, 1) P(SCALE_W, 1)
#define KILN_FPARAMS_PAD(P) P(FILL, 1)
/* RANDOM: uniform's [A, B); normal's mean A and standard deviation B. */
#define KILN_FPARAMS_RANDOM(P) P(A, 1) P(B, 1)

/* Every int64 layout, then every float one: X(LAYOUT). */
#define KILN_PARAM_LAYOUTS(X)                                                          \
  X(NONE) X(RESHAPE) X(VIEW) X(AXIS) X(CAST) X(REDUCE) X(ARGMAX) X(SOFTMAX) X(NORM)    \
  X(MATMUL) X(LINEAR) X(SDPA) X(CONV2D) X(CONV2D_NHWC) X(CONV2D_GRAD_INPUT)            \
  X(CONV2D_GRAD_WEIGHT) X(POOL2D) X(AVG_POOL2D_GRAD) X(SIZE2D) X(UPSAMPLE) X(PAD)      \
  X(SCATTER) X(SCAN) X(ARGSORT) X(GRID_SAMPLER) X(COL2IM) X(EMBEDDING_BAG) X(FUSED)    \
  X(GELU_BACKWARD) X(IOTA) X(GROUPED_MM) X(RANDOM) X(SOLVE_TRIANGULAR)
#define KILN_FPARAM_LAYOUTS(X) X(NONE) X(NORM) X(SDPA) X(FMA) X(UPSAMPLE) X(PAD) X(RANDOM)

#include "ir/kiln_op_params.h"

/* ---- The op records ---- */


#define KILN_OP_LIST(X) \
  X(RESHAPE, "reshape", 1, 1, MOVEMENT, RESHAPE, NONE, reshape, reshape) \
  X(STRIDED_COPY, "strided_copy", 1, 1, MOVEMENT, VIEW, NONE, strided_copy, strided_copy) \
  X(CAT, "cat", 1, 8, MOVEMENT, AXIS, NONE, cat, cat) \
  X(GATHER, "gather", 2, 2, MOVEMENT, AXIS, NONE, gather, gather) \
  X(WHERE, "where", 3, 3, ELTWISE, NONE, NONE, where, where) \
  X(CAST, "cast", 1, 1, ELTWISE, CAST, NONE, cast, cast) \
  X(ADD, "add", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(SUB, "sub", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(MUL, "mul", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(DIV, "div", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(POW, "pow", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(MAXIMUM, "maximum", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(MINIMUM, "minimum", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(EQ, "eq", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(NE, "ne", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(LT, "lt", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(LE, "le", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(GT, "gt", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(GE, "ge", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(LOGICAL_AND, "logical_and", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(LOGICAL_OR, "logical_or", 2, 2, ELTWISE, NONE, NONE, binary, binary) \
  X(NEG, "neg", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(ABS, "abs", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(EXP, "exp", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(LOG, "log", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(SQRT, "sqrt", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(RSQRT, "rsqrt", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(RECIPROCAL, "reciprocal", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(TANH, "tanh", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(SIGMOID, "sigmoid", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(RELU, "relu", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(GELU, "gelu", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(GELU_TANH, "gelu_tanh", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(SILU, "silu", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(ERF, "erf", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(SIN, "sin", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(COS, "cos", 1, 1, ELTWISE, NONE, NONE, unary, unary) \
  X(LOGICAL_NOT, "logical_not", 1, 1, ELTWISE, NONE, NONE, logical_not, logical_not) \
  X(SUM, "sum", 1, 1, REDUCE, REDUCE, NONE, reduce, reduce) \
  X(MEAN, "mean", 1, 1, REDUCE, REDUCE, NONE, reduce, reduce) \
  X(MAX, "max", 1, 1, REDUCE, REDUCE, NONE, reduce, reduce) \
  X(MIN, "min", 1, 1, REDUCE, REDUCE, NONE, reduce, reduce) \
  X(ANY, "any", 1, 1, REDUCE, REDUCE, NONE, reduce, reduce) \
  X(ARGMAX, "argmax", 1, 1, REDUCE, ARGMAX, NONE, argmax, argmax) \
  X(SOFTMAX, "softmax", 1, 1, NORM, SOFTMAX, NONE, softmax, softmax) \
  X(LOG_SOFTMAX, "log_softmax", 1, 1, NORM, SOFTMAX, NONE, softmax, softmax) \
  X(LAYER_NORM, "layer_norm", 1, 3, NORM, NORM, NORM, norm, norm) \
  X(RMS_NORM, "rms_norm", 1, 2, NORM, NORM, NORM, norm, norm) \
  X(MATMUL, "matmul", 2, 2, GEMM, MATMUL, NONE, matmul, matmul) \
  X(LINEAR, "linear", 2, 4, GEMM, LINEAR, NONE, linear, linear) \
  X(SDPA, "sdpa", 3, 4, ATTENTION, SDPA, SDPA, sdpa, sdpa) \
  X(FMA_SCALAR, "fma_scalar", 1, 1, ELTWISE, NONE, FMA, fma_scalar, fma_scalar) \
  X(GATHER_ELEMENTS, "gather_elements", 2, 2, MOVEMENT, AXIS, NONE, gather_elements, gather_elements) \
  X(CONV2D, "conv2d", 2, 5, CONV, CONV2D, NONE, conv2d, conv2d) \
  X(MAX_POOL2D, "max_pool2d", 1, 1, POOL, POOL2D, NONE, pool2d, pool2d) \
  X(AVG_POOL2D, "avg_pool2d", 1, 1, POOL, POOL2D, NONE, pool2d, pool2d) \
  X(ACOS, "acos", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ACOSH, "acosh", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ASIN, "asin", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ASINH, "asinh", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ATAN, "atan", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ATANH, "atanh", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(COSH, "cosh", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(SINH, "sinh", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(TAN, "tan", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(EXPM1, "expm1", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(LOG10, "log10", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(LOG1P, "log1p", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(LOG2, "log2", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(CEIL, "ceil", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(FLOOR, "floor", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ROUND, "round", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(TRUNC, "trunc", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(SIGN, "sign", 1, 1, ELTWISE, NONE, NONE, math_unary, math) \
  X(ATAN2, "atan2", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(BITWISE_AND, "bitwise_and", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(BITWISE_OR, "bitwise_or", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(BITWISE_XOR, "bitwise_xor", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(FMOD, "fmod", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(REMAINDER, "remainder", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(DIV_TRUNC, "div_trunc", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(DIV_FLOOR, "div_floor", 2, 2, ELTWISE, NONE, NONE, math_binary, math) \
  X(CONV2D_GRAD_INPUT, "conv2d_grad_input", 2, 2, CONV, CONV2D_GRAD_INPUT, NONE, conv2d_grad, conv2d_grad) \
  X(CONV2D_GRAD_WEIGHT, "conv2d_grad_weight", 2, 2, CONV, CONV2D_GRAD_WEIGHT, NONE, conv2d_grad, conv2d_grad) \
  X(MAX_POOL2D_INDICES, "max_pool2d_indices", 1, 1, POOL, POOL2D, NONE, max_pool2d_indices, max_pool2d_indices) \
  X(MAX_POOL2D_GRAD, "max_pool2d_grad", 2, 2, POOL, SIZE2D, NONE, max_pool2d_grad, max_pool2d_grad) \
  X(AVG_POOL2D_GRAD, "avg_pool2d_grad", 1, 1, POOL, AVG_POOL2D_GRAD, NONE, avg_pool2d_grad, avg_pool2d_grad) \
  X(ADAPTIVE_AVG_POOL2D, "adaptive_avg_pool2d", 1, 1, POOL, SIZE2D, NONE, adaptive_pool2d, adaptive_avg_pool2d) \
  X(ADAPTIVE_AVG_POOL2D_GRAD, "adaptive_avg_pool2d_grad", 1, 1, POOL, SIZE2D, NONE, adaptive_pool2d, adaptive_avg_pool2d_grad) \
  X(UPSAMPLE_BILINEAR2D, "upsample_bilinear2d", 1, 1, SAMPLE, UPSAMPLE, UPSAMPLE, upsample_bilinear2d, upsample_bilinear2d) \
  X(PAD, "pad", 1, 1, MOVEMENT, PAD, PAD, pad, pad) \
  X(STRIDED_SCATTER, "strided_scatter", 2, 2, MOVEMENT, VIEW, NONE, strided_scatter, strided_scatter) \
  X(SCATTER, "scatter", 3, 3, MOVEMENT, SCATTER, NONE, scatter, scatter) \
  X(SCAN, "scan", 1, 1, REDUCE, SCAN, NONE, scan, scan) \
  X(ARGSORT, "argsort", 1, 1, MOVEMENT, ARGSORT, NONE, argsort, argsort) \
  X(GRID_SAMPLER_2D, "grid_sampler_2d", 2, 2, SAMPLE, GRID_SAMPLER, NONE, grid_sampler, grid_sampler) \
  X(COL2IM, "col2im", 1, 1, CONV, COL2IM, NONE, col2im, col2im) \
  X(EMBEDDING_BAG, "embedding_bag", 3, 4, SAMPLE, EMBEDDING_BAG, NONE, embedding_bag, embedding_bag) \
  X(ELTWISE_FUSED, "eltwise_fused", 1, 8, ELTWISE, FUSED, NONE, eltwise_fused, eltwise_fused) \
  X(CONV2D_NHWC, "conv2d_nhwc", 2, 5, CONV, CONV2D_NHWC, NONE, conv2d_nhwc, conv2d_nhwc) \
  X(MAX_POOL2D_NHWC, "max_pool2d_nhwc", 1, 1, POOL, POOL2D, NONE, max_pool2d_nhwc, max_pool2d_nhwc) \
  X(GELU_BACKWARD, "gelu_backward", 2, 2, ELTWISE, GELU_BACKWARD, NONE, gelu_backward, gelu_backward) \
  X(LAYER_NORM_BACKWARD, "layer_norm_backward", 4, 5, NORM, NORM, NONE, layer_norm_backward, layer_norm_backward) \
  X(IOTA, "iota", 0, 0, MOVEMENT, IOTA, NONE, iota, iota) \
  X(GROUPED_MM, "grouped_mm", 3, 3, GEMM, GROUPED_MM, NONE, grouped_mm, grouped_mm) \
  X(RANDOM, "random", 1, 1, ELTWISE, RANDOM, RANDOM, random, random) \
  X(SOLVE_TRIANGULAR, "solve_triangular", 2, 2, GEMM, SOLVE_TRIANGULAR, NONE, solve_triangular, \
    solve_triangular)

typedef enum kiln_op_e {
#define KILN_OP_ENUM(e, ...) KILN_OP_##e,
  KILN_OP_LIST(KILN_OP_ENUM)
#undef KILN_OP_ENUM
  KILN_OP_COUNT
} kiln_op_t;

/* Op families: what kind of work an op is (profiles and docs group by it). */
#define KILN_OP_FAMILIES(F) \
  F(MOVEMENT) F(ELTWISE) F(REDUCE) F(NORM) F(GEMM) F(ATTENTION) F(CONV) F(POOL) F(SAMPLE)
typedef enum kiln_op_family_e {
#define KILN_OP_FAMILY_ENUM(f) KILN_FAMILY_##f,
  KILN_OP_FAMILIES(KILN_OP_FAMILY_ENUM)
#undef KILN_OP_FAMILY_ENUM
  KILN_FAMILY_COUNT
} kiln_op_family_t;

/* Kernel entries: what a target implements (hal/kiln_hal.h); each op names
 * one. */
#define KILN_OP_ENTRIES(E)                                                              \
  E(reshape) E(strided_copy) E(cat) E(gather) E(where) E(cast) E(binary) E(unary)      \
  E(logical_not) E(reduce) E(argmax) E(softmax) E(norm) E(matmul) E(linear) E(sdpa)    \
  E(fma_scalar) E(gather_elements) E(conv2d) E(pool2d) E(math) E(conv2d_grad)          \
  E(max_pool2d_indices) E(max_pool2d_grad) E(avg_pool2d_grad) E(adaptive_avg_pool2d)   \
  E(adaptive_avg_pool2d_grad) E(upsample_bilinear2d) E(pad) E(strided_scatter)         \
  E(scatter) E(scan) E(argsort) E(grid_sampler) E(col2im) E(embedding_bag)             \
  E(eltwise_fused) E(conv2d_nhwc) E(max_pool2d_nhwc) E(gelu_backward)                 \
  E(layer_norm_backward) E(iota) E(grouped_mm) E(random) E(solve_triangular)
typedef enum kiln_op_entry_e {
#define KILN_OP_ENTRY_ENUM(e) KILN_ENTRY_##e,
  KILN_OP_ENTRIES(KILN_OP_ENTRY_ENUM)
#undef KILN_OP_ENTRY_ENUM
  KILN_ENTRY_COUNT
} kiln_op_entry_t;

/* Op categories: contiguous enum ranges the kernels and passes test for
 * (kiln_ops.c checks each against its records). */
#define KILN_OP_IS_BINARY(op) ((op) >= KILN_OP_ADD && (op) <= KILN_OP_LOGICAL_OR)
#define KILN_OP_IS_COMPARE(op) ((op) >= KILN_OP_EQ && (op) <= KILN_OP_LOGICAL_OR)
#define KILN_OP_IS_UNARY_MATH(op) ((op) >= KILN_OP_NEG && (op) <= KILN_OP_COS)
/* Appended later than the ranges above, so in ranges of their own (same
 * order as kiln_math_unary_t / kiln_math_binary_t in kernels/math). */
#define KILN_OP_IS_UNARY_EXT(op) ((op) >= KILN_OP_ACOS && (op) <= KILN_OP_SIGN)
#define KILN_OP_IS_BINARY_EXT(op) ((op) >= KILN_OP_ATAN2 && (op) <= KILN_OP_DIV_FLOOR)
#define KILN_OP_IS_REDUCE(op) ((op) >= KILN_OP_SUM && (op) <= KILN_OP_ANY)

/* MATMUL flags (KILN_P(MATMUL, FLAGS)). */
#define KILN_MATMUL_TRANSPOSE_A 1
#define KILN_MATMUL_TRANSPOSE_B 2
/* a is float32 and read rounded to bf16 (nearest even), as if through a
 * CAST to bf16: the compiler folds such casts into the GEMM's packing
 * (kiln_pass_casts.c); LINEAR's ROUND_A 1 is the same. */
#define KILN_MATMUL_ROUND_A_BF16 4
/* b likewise (a float32 graph value, never a constant: those are packed
 * once); LINEAR's ROUND_B 1 is the same (format 2.12). */
#define KILN_MATMUL_ROUND_B_BF16 8
/* y is rounded to bf16 (nearest even, NaN quiet) and stored as float32:
 * what a CAST to bf16 and a CAST back give, the pair autocast leaves after
 * a bf16 product whose result is read in float32 (a weight's gradient, the
 * scores before softmax). kiln_pass_fuse_gemm folds the pair; LINEAR's
 * ROUND_Y 1 is the same, after the epilogue (format 2.17). */
#define KILN_MATMUL_ROUND_Y_BF16 16

/* SDPA flags (KILN_P(SDPA, FLAGS)). */
#define KILN_SDPA_VIEWS 1
#define KILN_SDPA_OUT_BSHD 2
#define KILN_SDPA_SCALE_HEAD_DIM 4
#define KILN_SDPA_BF16 8
#define KILN_SDPA_EVERY_KEY 16

/* "?" for an out-of-range value. */
const char* kiln_op_name(kiln_op_t op);
int kiln_op_min_inputs(kiln_op_t op);
int kiln_op_max_inputs(kiln_op_t op);
kiln_op_family_t kiln_op_family(kiln_op_t op);
const char* kiln_op_family_name(kiln_op_family_t family);
kiln_op_entry_t kiln_op_entry(kiln_op_t op);
const char* kiln_op_entry_name(kiln_op_entry_t entry);
/* The lengths of the op's params and fparams layouts. */
int kiln_op_n_params(kiln_op_t op);
int kiln_op_n_fparams(kiln_op_t op);

/* One field of an op's parameter layouts, for the Python op table
 * (kiln._C.PARAMS) and error messages: the i-th of op's int64 fields
 * (float: 0) or float fields (float: 1); 0 past the last. */
typedef struct kiln_op_param_s {
  const char* name; /* "stride_h" */
  int index, count;
} kiln_op_param_t;
int kiln_op_param(kiln_op_t op, int is_float, int i, kiln_op_param_t* out);

#endif /* KILN_OPS_H */
