"""Models in bf16 or fp16 (``model.to(torch.bfloat16)``, bf16 inputs, or a
graph traced under ``torch.autocast``) on kiln's fp32 kernels.

Eager runs each op of a bf16 tensor in fp32 internally and rounds its result
to bf16. kiln lowers such an op (a "promoted" op) as its fp32 form: its
low-precision inputs are widened (exact) and its result is kept in fp32 for
the ops that read it, as Inductor does inside its fused kernels. Next to
that fp32 ("wide") value the lowering makes the bf16 value eager has (a
cast, rounding to nearest even); readers that need the bf16 tensor itself
get that one: graph outputs, explicit casts (``.float()``, autocast's
``_to_copy``), and ops kiln runs in bf16 natively. Casts nobody reads are
removed by dead-code elimination. So:

- norms, softmax, reductions, elementwise math, attention and convolutions
  compute in fp32 and their intermediates stay fp32 (kiln is at least as
  accurate as eager: it skips eager's rounding of each op's output);
  attention of bf16 q, k and v takes eager's own bf16 rule instead where
  that is faster (attention_in_bf16: the CPU has a bf16 engine and the
  call is not a decode step's): torch's CPU flash kernel for bf16, which
  kiln's KILN_SDPA_BF16 follows; a
  convolution whose x is bf16 is marked as eager's product of that bf16 x
  (CONV2D's ROUND_X): where its weight holds bf16 values and the CPU has a
  bf16 engine, the conv rounds x as it reads it and runs on the engine, its
  products then eager's (kiln_hal_cpu_constant.c); elsewhere it reads the
  fp32 x;
- a matrix product (linear, mm, bmm, matmul, addmm) reads its operands as
  the bf16 tensors eager reads (rounded: bf16 values) and sums in fp32: the
  GEMM runs on the bf16 engines (AMX, AVX512_BF16) where the CPU has one,
  B packed into bf16 pairs at run time, else widens them as it packs. A
  second operand computed from constants alone (a weight, or autocast's cast
  of one) is read widened instead: constant folding makes it a float32
  constant holding bf16 values, which the weight packer stores as bf16 for
  the bf16 engines once, at compile time, without changing a product;
- data movement (views, permutes, slices, cat, gathers) runs on the bf16
  bytes, unless its input is already wide (then on the fp32 ones);
- comparisons (eq, lt, ...) read the bf16 values eager compares, and the
  readers of a value the graph returns (itself or through views: a training
  forward returns what it saves for the backward) read the bf16 value it
  returns, so that a forward and its backward see one tensor
  (returned_values).

The compiler then folds the casts this places, exactly
(src/compiler/kiln_pass_casts.c): a GEMM reads an fp32 A rounding it as it
packs and a bf16 B widening it as it packs, and a round trip fp32 -> bf16 ->
fp32 becomes one fused rounding; a cast whose bf16 bytes nobody reads (a
backward's gradient read by two GEMMs and a bias sum) goes, each of its
readers served from the fp32 value (KILN_CASTS=keep turns that off).

The rule the tests hold kiln to: its error against a float64 evaluation of
the same model (bf16 weights and inputs) is at most eager bf16's own error
plus one bf16 rounding of each output (kiln rounds where eager rounds, or
not at all).
"""

import operator
import os

import torch

from kiln import _C
from kiln.optable.core import cast

aten = torch.ops.aten

LOW = (torch.bfloat16, torch.float16)

# Ops that only move elements: exact in any dtype, so they run on the bf16
# bytes when no input is wide.
_MOVEMENT = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.view_copy.default,
    aten.flatten.using_ints, aten.clone.default, aten.alias.default, aten.contiguous.default,
    aten.lift_fresh_copy.default, aten.detach.default, aten.permute.default, aten.transpose.int,
    aten.t.default, aten.expand.default, aten.slice.Tensor, aten.select.int,
    aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default,
    aten.unbind.int, aten.cat.default, aten.embedding.default, aten.index_select.default,
    aten.gather.default, aten.index.Tensor,
}

# Ops that are never promoted: explicit casts (eager's rounding is the
# point of them) and checks.
_NATIVE = {aten._to_copy.default, aten.to.dtype, aten._assert_tensor_metadata.default}

# Matrix products: the operand indices of the GEMM's A and B, read as bf16 tensors.
_PRODUCT_AB = {aten.mm.default: (0, 1), aten.bmm.default: (0, 1), aten.matmul.default: (0, 1),
               aten.linear.default: (0, 1), aten.addmm.default: (1, 2)}


# Comparisons: they read the bf16 values eager compares, never kiln's fp32
# twins. eq(amin(x), x) (amin's backward) is true in eager; with amin's
# result returned by the graph (read rounded, returned_values) against x's
# unrounded twin it was false, and the gradient NaN (fuzzer seed 20060,
# graph 4979). Rounding is monotonic, so orderings agree with the fp32
# values' wherever those are apart by more than a rounding.
_COMPARISONS = {
    aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor, aten.ge.Tensor,
    aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar,
}


def _from_constants(ctx, node):
    """True when FX node's value is computed from kiln constants alone (a
    weight, its views and casts): constant folding will make it a constant."""
    memo = ctx.__dict__.setdefault("from_constants", {})
    stack = [node]
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if n.op == "placeholder" or not n.all_input_nodes:
            v = ctx.env.get(n)
            memo[n] = n.op == "get_attr" or (isinstance(v, int) and v in ctx.constants)
            stack.pop()
            continue
        todo = [a for a in n.all_input_nodes if a not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[n] = all(memo[a] for a in n.all_input_nodes)
        stack.pop()
    return memo[node]


def _low_dtype(v):
    return v.dtype if isinstance(v, torch.Tensor) and v.dtype in LOW else None


def _widened(v):
    """A node's meta value as eager would hold it in fp32."""
    if isinstance(v, torch.Tensor):
        return v.to(torch.float32) if v.dtype in LOW else v
    if isinstance(v, (tuple, list)):
        return type(v)(_widened(x) for x in v)
    return v


def _tensor_value(ctx, node):
    return isinstance(ctx.env.get(node), int) and not isinstance(ctx.env.get(node), bool)


def lower_node(ctx, n, handler):
    """ctx.env's value for FX node n, lowered by handler (the op table's),
    promoted to fp32 when it computes on bf16/fp16 tensors."""
    wide = ctx.__dict__.setdefault("wide", {})
    if n.target is operator.getitem:
        out = handler(ctx, n)
        w = wide.get(n.args[0])
        if isinstance(w, tuple) and w[n.args[1]] is not None:
            wide[n] = w[n.args[1]]
        return out
    if n.target in _NATIVE:
        return handler(ctx, n)
    low_in = [a for a in n.all_input_nodes if _tensor_value(ctx, a) and _low_dtype(a.meta.get("val"))]
    outs = n.meta.get("val")
    low_out = [_low_dtype(v) for v in outs] if isinstance(outs, (tuple, list)) else [_low_dtype(outs)]
    if not low_in and not any(low_out):
        return handler(ctx, n)
    if n.target in _MOVEMENT and not any(a in wide for a in low_in):
        return handler(ctx, n)  # on the bf16 bytes
    out = _promoted(ctx, n, handler, low_in, low_out, wide)
    if n in getattr(ctx, "returned", ()):
        wide.pop(n, None)  # its readers read the bf16 value the graph returns
    return out


def returned_values(outputs):
    """The FX nodes whose bf16 value the graph returns, itself or through
    views: their readers in the graph read that rounded value, not the fp32
    one kiln could keep (lower_node). A training forward returns the values
    it saves for the backward; a norm that read the fp32 x while the
    backward gets the rounded x normalises two different tensors, and the
    input gradient of a norm over a short row magnifies that difference
    (a layer norm over 2 elements under autocast: 2.3x eager's gradient,
    fuzzer seed 20021, graph 5518). Eager's readers read the returned value
    too, so this only takes back an accuracy kiln had beyond eager's."""
    seen = set()
    stack = [o for o in outputs if isinstance(o, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "call_function" and n.target in _MOVEMENT:
            stack.extend(n.all_input_nodes)
    return seen


def attention_in_bf16(n, low_in):
    """Whether SDPA node n, of bf16 q, k and v, takes eager's bf16 rule
    (KILN_SDPA_BF16: q, k, v rounded as read, so from their fp32 twins too,
    and the softmax weights rounded for P·V) rather than fp32 on the
    twins: where compute_dtype=bf16 would (kiln_pass_sdpa_bf16.c), that is
    where the CPU has a bf16 engine and the call is not a decode step's (at
    most 8 rows per kv head, known at compile time), whose K and V reads
    the rule's rounding only slows. KILN_ATTN_BF16=off / on: never / always
    (A/B runs, tests)."""
    qkv = n.args[:3]
    if len(qkv) < 3 or not all(isinstance(a, torch.fx.Node) and a in low_in
                               and a.meta["val"].dtype == torch.bfloat16 for a in qkv):
        return False
    mode = os.environ.get("KILN_ATTN_BF16")
    if mode in ("off", "on"):
        return mode == "on"
    if _C.bf16_engine() == "none":
        return False
    q, k = (a.meta["val"].shape for a in qkv[:2])
    heads, kv_heads = (q[1], k[1]) if len(q) == 4 else (1, 1)
    if all(isinstance(d, int) for d in (q[-2], heads, kv_heads)) and kv_heads > 0:
        return q[-2] * (heads // kv_heads) > 8
    return True  # symbolic: not known to be a decode step


def _promoted(ctx, n, handler, low_in, low_out, wide):
    if n.target is aten.scaled_dot_product_attention.default:
        ctx.sdpa_bf16, before = attention_in_bf16(n, low_in), getattr(ctx, "sdpa_bf16", False)
        try:
            return _promoted_op(ctx, n, handler, low_in, low_out, wide)
        finally:
            ctx.sdpa_bf16 = before
    if n.target is aten.convolution.default:
        x = n.args[0]
        round_x = x in low_in and x.meta["val"].dtype == torch.bfloat16
        ctx.conv_round_x, before = round_x, getattr(ctx, "conv_round_x", False)
        try:
            return _promoted_op(ctx, n, handler, low_in, low_out, wide)
        finally:
            ctx.conv_round_x = before
    return _promoted_op(ctx, n, handler, low_in, low_out, wide)


def _promoted_op(ctx, n, handler, low_in, low_out, wide):
    ab = _PRODUCT_AB.get(n.target, ())
    a_node = n.args[ab[0]] if ab and len(n.args) > ab[0] else None
    b_node = n.args[ab[1]] if ab and len(n.args) > ab[1] else None
    if isinstance(b_node, torch.fx.Node) and _from_constants(ctx, b_node):
        b_node = None  # a weight: widened, folded into a constant, packed once
    saved = []
    try:
        for a in low_in:
            saved.append((a, ctx.env[a], a.meta["val"]))
            if (a is a_node or a is b_node) and a.meta["val"].dtype == torch.bfloat16:
                continue  # the product's A or B: the bf16 tensor, read as bf16 by the GEMM
            read_wide = a in wide and n.target not in _COMPARISONS
            ctx.env[a] = wide[a] if read_wide else cast(ctx, ctx.env[a], torch.float32)
            a.meta["val"] = _widened(a.meta["val"])
        saved.append((n, None, n.meta["val"]))
        n.meta["val"] = _widened(n.meta["val"])
        result = handler(ctx, n)
    finally:
        for node, env, val in reversed(saved):
            if env is not None:
                ctx.env[node] = env
            node.meta["val"] = val
    single = not isinstance(result, tuple)
    results = (result,) if single else result
    real, wides = [], []
    for r, dtype in zip(results, low_out + [None] * (len(results) - len(low_out))):
        if dtype is None or not isinstance(r, int) or isinstance(r, bool) or ctx.dtype(r) != torch.float32:
            real.append(r)  # not low, or already made in its own dtype
            wides.append(None)
            continue
        real.append(cast(ctx, r, dtype))
        wides.append(r)
    if any(w is not None for w in wides):
        wide[n] = wides[0] if single else tuple(wides)
    return real[0] if single else tuple(real)
