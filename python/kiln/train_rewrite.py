"""Graph rewrites for AOTAutograd's training graphs, before kiln lowers them.

These choose other ATen ops for the same values; they compute nothing.

stack_select_scatters: the backward of splitting a tensor by select (as
nn.MultiheadAttention splits its packed q/k/v projection) is, after Core
ATen decomposition, one select_scatter of each piece's gradient into a
zero tensor and a chain of adds summing them: for n pieces, n full-size
scatters and n - 1 full-size adds. When the pieces cover every index of the
dimension, the sum is their stack: one pass instead of 2n - 1. Each
element of the sum is one gradient plus zeros, and x + 0 == x exactly, but
for the sign of zero (-0 + +0 is +0 where the stack keeps -0); the two
compare equal and give the same results downstream.
"""

import operator

import torch

aten = torch.ops.aten


# Comparisons whose operands must be the very bits the forward made.
_EXACT_COMPARISONS = (aten.eq.Tensor, aten.ne.Tensor)


def save_compared_values(joint):
    """Marks the forward values an equality test reads as must-save, so the
    min-cut partitioner hands the backward the forward's own bits instead
    of recomputing them. Returns how many it marked.

    amax / max's backward finds the maxima by eq(result, input): correct
    only when that input is the one the forward reduced. The partitioner
    recomputes cheap chains (a norm over a short dim) in the backward,
    trusting the recomputation to give the same bits, as Inductor's one
    code generator does; kiln's does not: the forward ran x * rsqrt(mean(x^2)
    + eps) as one RMS_NORM kernel, the backward as separate ops rounding
    differently, and where no element equalled the saved max any more the
    gradient was 0 / 0 = NaN (fuzzer seed 8484, graph 320). Marking the
    operands (through views, to the value they show) keeps such chains in
    the forward. Values that depend on the tangents are the backward's own
    and stay as they are."""
    from torch.utils.checkpoint import CheckpointPolicy

    backward = set()
    for n in joint.graph.nodes:
        if (n.op == "placeholder" and n.name.startswith("tangents")) or any(
                a in backward for a in n.all_input_nodes):
            backward.add(n)
    marked = 0
    for n in joint.graph.nodes:
        if n.op != "call_function" or n.target not in _EXACT_COMPARISONS:
            continue
        for a in n.all_input_nodes:
            while (a.op == "call_function" and isinstance(a.target, torch._ops.OpOverload)
                   and a.target.is_view and a.args and isinstance(a.args[0], torch.fx.Node)):
                a = a.args[0]
            if a.op == "call_function" and a not in backward and a.meta.get("recompute") is None:
                a.meta["recompute"] = CheckpointPolicy.MUST_SAVE
                marked += 1
    return marked


# Norms whose CPU kernels keep the saved statistics (mean, rstd) in fp32 when
# x is bf16 or fp16 and a parameter is fp32 (ATen's mixed-type path), though
# their meta functions type them as x.
_MIXED_TYPE_NORMS = (aten.native_layer_norm.default, aten.native_group_norm.default,
                     aten.native_batch_norm.default, aten._native_batch_norm_legit_functional.default,
                     aten._native_batch_norm_legit.default, aten._native_batch_norm_legit.no_stats)


def widen_norm_statistics(joint):
    """Types a mixed-type norm's mean and rstd (outputs 1 and 2) float32, as
    eager holds them, before the partitioner saves them for the backward.
    Returns how many norms it retyped.

    Under autocast a norm reads a bf16 x with fp32 parameters; its meta says
    the statistics are bf16, so kiln's forward rounded rstd to bf16 where
    eager's is fp32, and the backward normalised x again with that rstd.
    The input gradient of a norm removes the part of dy along x-hat, which
    cancels to O(eps / var) over short rows; a 2^-9 error in rstd left it
    2.3x eager's (layer norm over 2 elements: fuzzer seed 20021, graph 5518).
    Retyped, the forward saves the fp32 statistics it computes and the
    backward reads them unrounded, as eager's kernels do."""
    retyped = 0
    for n in joint.graph.nodes:
        if n.op != "call_function" or n.target not in _MIXED_TYPE_NORMS:
            continue
        val = n.meta.get("val")
        x = n.args[0]
        if not isinstance(val, (tuple, list)) or len(val) < 3 or not isinstance(x, torch.fx.Node):
            continue
        x_val = x.meta.get("val")
        if not isinstance(x_val, torch.Tensor) or x_val.dtype not in (torch.bfloat16, torch.float16):
            continue
        params = [a.meta.get("val") for a in n.args[1:] if isinstance(a, torch.fx.Node)]
        if not any(isinstance(p, torch.Tensor) and p.dtype == torch.float32 for p in params):
            continue
        if all(not isinstance(val[i], torch.Tensor) or val[i].dtype == torch.float32 for i in (1, 2)):
            continue
        wide = list(val)
        for i in (1, 2):
            wide[i] = val[i].to(torch.float32)
        n.meta["val"] = type(val)(wide)
        # The statistics and the views of them (group norm's backward saves
        # an alias) are float32 wherever they are read.
        todo = [u for u in n.users if u.target is operator.getitem and u.args[1] in (1, 2)]
        while todo:
            u = todo.pop()
            u.meta["val"] = u.meta["val"].to(torch.float32)
            u.meta.pop("tensor_meta", None)
            todo.extend(v for v in u.users if v.op == "call_function" and v.args and v.args[0] is u
                        and _keeps_dtype(v) and v.meta["val"].dtype != torch.float32)
        retyped += 1
    return retyped


def _keeps_dtype(node):
    """True for an op whose result has its first argument's dtype: a view or a copy of it."""
    t = node.target
    return isinstance(t, torch._ops.OpOverload) and isinstance(node.meta.get("val"), torch.Tensor) and (
        t.is_view or t in (aten.clone.default, aten._unsafe_view.default, aten.contiguous.default,
                           aten.expand_copy.default, aten.view_copy.default))


def _is_zeros(node, shape):
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is aten.full.default:
        return list(node.args[0]) == list(shape) and node.args[1] == 0
    if node.target is aten.zeros.default:
        return list(node.args[0]) == list(shape)
    return False


def _add_leaves(node, root):
    """The leaves of a tree of aten.add.Tensor (alpha 1) whose inner adds
    have one user each, or None."""
    if node.op == "call_function" and node.target is aten.add.Tensor and not node.kwargs.get("alpha", 1) != 1:
        if node is not root and len(node.users) != 1:
            return None
        leaves = []
        for a in node.args[:2]:
            if not isinstance(a, torch.fx.Node):
                return None
            sub = _add_leaves(a, root)
            if sub is None:
                return None
            leaves += sub
        return leaves
    return [node]


def stack_select_scatters(gm):
    """Rewrites sums of select_scatters into zeros that cover a whole
    dimension as a stack (cat of unsqueezes). Returns the number of rewrites."""
    g = gm.graph
    done = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not aten.add.Tensor:
            continue
        # Only the root of an add tree: its user is not another add of the tree.
        if any(u.op == "call_function" and u.target is aten.add.Tensor and len(node.users) == 1
               for u in node.users):
            continue
        leaves = _add_leaves(node, node)
        if not leaves or len(leaves) < 2:
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        shape = list(val.shape)
        pieces, dim = {}, None
        for leaf in leaves:
            if (leaf.op != "call_function" or leaf.target is not aten.select_scatter.default
                    or len(leaf.users) != 1 or not _is_zeros(leaf.args[0], shape)):
                break
            d = leaf.args[2] % len(shape)
            i = leaf.args[3] % shape[d]
            if (dim is not None and d != dim) or i in pieces:
                break
            src = leaf.args[1]
            sv = src.meta.get("val") if isinstance(src, torch.fx.Node) else None
            if not isinstance(sv, torch.Tensor) or sv.dtype != val.dtype:
                break
            dim, pieces[i] = d, src
        else:
            if dim is None or sorted(pieces) != list(range(shape[dim])):
                continue
            # stack = cat of unsqueezed pieces (Core ATen has no stack).
            parts = []
            with g.inserting_before(node):
                for i in range(shape[dim]):
                    u = g.call_function(aten.unsqueeze.default, (pieces[i], dim))
                    u.meta = {"val": torch.empty(shape[:dim] + [1] + shape[dim + 1:], dtype=val.dtype,
                                                 device="meta"),
                              "stack_trace": node.meta.get("stack_trace")}
                    parts.append(u)
                st = g.call_function(aten.cat.default, (parts, dim))
            st.meta = dict(node.meta)
            node.replace_all_uses_with(st)
            done += 1
    if done:
        g.eliminate_dead_code()
        gm.recompile()
    return done


def _last2_transpose_of(node):
    """x when node is a transpose of x's last two dims (permute, transpose
    or t), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    x = node.args[0] if node.args else None
    xv = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(xv, torch.Tensor) or xv.dim() < 2:
        return None
    r = xv.dim()
    if node.target is aten.permute.default:
        dims = [d % r for d in node.args[1]]
        want = list(range(r - 2)) + [r - 1, r - 2]
        return x if dims == want else None
    if node.target is aten.transpose.int:
        return x if sorted((node.args[1] % r, node.args[2] % r)) == [r - 2, r - 1] else None
    if node.target is aten.t.default:
        return x if r == 2 else None
    return None


def _recompile_pair(fw, bw, out_node, outs):
    """After saved values changed: the forward returns `outs`, drops what
    nothing reads any more, and both graphs are made again."""
    out_node.args = (tuple(outs),) + tuple(out_node.args[1:])
    fw.graph.eliminate_dead_code()
    fw.recompile()
    bw.graph.lint()
    bw.recompile()


def saved_slots(fw, bw):
    """[(forward output index, backward placeholder)] of the values the
    forward saves for the backward, or None when the graphs are not laid out
    as this module knows.

    AOTAutograd's forward returns the user's outputs, then the saved values,
    in the order of the backward's leading placeholders (named as the
    forward's nodes). Only the saved positions may change: the same node may
    also be a user output (a permute returned and saved), which must stay
    what it is. Taken once, before any rewrite renames what a slot holds."""
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    fw_by_name = {n.name: n for n in fw.graph.nodes}
    placeholders = [n for n in bw.graph.nodes if n.op == "placeholder"]
    saved = [p for p in placeholders if p.name in fw_by_name]
    first_saved = len(outs) - len(saved)
    if first_saved < 0 or any(outs[first_saved + i] is not fw_by_name[p.name] for i, p in enumerate(saved)):
        return None
    return [(first_saved + i, p) for i, p in enumerate(saved)]


def unsave_transposes(fw, bw, slots=None):
    """Saves x instead of x transposed for the backward.

    AOTAutograd's partitioner saves some tensors for the backward as a
    transpose of a forward value (attention's q, k and probabilities, which
    the backward's matmuls read transposed). kiln's outputs are dense, so
    each such saved transpose is a copy in the forward, while a transpose
    inside the backward costs nothing: MATMUL reads its operand transposed
    in place. So the forward returns x, and the backward transposes its
    input back. Returns the number of saved values changed."""
    slots = saved_slots(fw, bw) if slots is None else slots
    if slots is None:
        return 0  # not the layout this rewrite knows: leave the graphs alone
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    placeholders = [n for n in bw.graph.nodes if n.op == "placeholder"]
    done = 0
    for pos, p in slots:
        x = _last2_transpose_of(outs[pos])
        if x is None:
            continue
        val = x.meta.get("val")
        r = val.dim()
        outs[pos] = x
        with bw.graph.inserting_after(placeholders[-1]):
            t = bw.graph.call_function(aten.transpose.int, (p, r - 2, r - 1))
        t.meta = dict(p.meta)
        p.replace_all_uses_with(t, delete_user_cb=lambda u: u is not t)
        p.meta = dict(p.meta)
        p.meta["val"] = val
        p.meta.pop("tensor_meta", None)
        done += 1
    if done:
        _recompile_pair(fw, bw, out_node, outs)
    return done


# Ops that give the same values in another shape or layout (or a copy of
# them): a saved value reached from a cast through these is that cast's
# values, and the backward can make it again from the cast's source.
_VIEW_OPS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
             aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default,
             aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.alias.default,
             aten.clone.default, aten.select.int, aten.slice.Tensor}
_NARROW = (torch.bfloat16, torch.float16)


def _narrowing_cast_of(node):
    """x when node casts a float32 x to bf16 or fp16 (nothing else), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or not node.args:
        return None
    x = node.args[0]
    if node.target is aten._to_copy.default:
        if set(node.kwargs) - {"dtype", "layout", "device"} or len(node.args) != 1:
            return None
    elif node.target is not torch.ops.prims.convert_element_type.default:
        return None
    xv, v = (x.meta.get("val") if isinstance(x, torch.fx.Node) else None), node.meta.get("val")
    if not isinstance(xv, torch.Tensor) or not isinstance(v, torch.Tensor):
        return None
    return x if xv.dtype == torch.float32 and v.dtype in _NARROW and xv.device == v.device else None


def _view_step(node):
    """node's source when node is one of _VIEW_OPS of one tensor (its other
    arguments plain values: a symbolic size is a forward node the backward
    does not have), else None."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or node.target not in _VIEW_OPS:
        return None
    src = node.args[0] if node.args else None
    if not isinstance(src, torch.fx.Node) or node.all_input_nodes != [src]:
        return None
    return src


def _cast_chain(node):
    """(base, chain) when node is a narrowing cast of a float32 value, seen
    through views on either side: chain lists the nodes from node back to
    the cast's source's base (views, the cast, views), base is the first
    node that is none of them. None otherwise."""
    chain = []
    while _narrowing_cast_of(node) is None:
        src = _view_step(node)
        if src is None:
            return None
        chain.append(node)
        node = src
    chain.append(node)
    if node.all_input_nodes != [node.args[0]]:
        return None
    base = node.args[0]
    while (src := _view_step(base)) is not None:
        chain.append(base)
        base = src
    return base, chain


def save_casts_mode():
    """KILN_SAVE_CASTS: "free" (the default: the source when keeping it
    costs no memory), "all" (every cast's source) or "keep" (the casts,
    as AOTAutograd chose), read when a graph is compiled (A/B runs)."""
    import os

    mode = os.environ.get("KILN_SAVE_CASTS", "free")
    if mode not in ("free", "all", "keep"):
        raise ValueError(f"KILN_SAVE_CASTS must be free, all or keep, not {mode!r}")
    return mode


def unsave_casts(fw, bw, slots=None, mode=None):
    """Saves x instead of a bf16 (or fp16) cast of x for the backward, and
    casts again in the backward.

    Under torch.autocast the forward saves bf16 copies of float32 values:
    the weights (cast for each matrix product), the normalised activations.
    kiln folds a cast its readers can take from the float32 source (a GEMM
    rounds as it packs: kiln_pass_casts.c), but a saved cast is a graph
    output, so the forward writes it as a separate pass over the source.
    Made again in the backward, the cast has GEMM readers only and folds
    there too; the bits are the same (the same cast of the same value).

    Which saves change (mode, save_casts_mode()): "free" when x costs
    nothing more to keep: a graph input (a parameter, alive anyway; the
    bf16 copy it no longer keeps is memory saved) or a value the forward
    returns or saves already; "all" for every such cast (an activation x
    kept in float32 is twice the bytes of its bf16 copy). Measured on
    bench/models.py's training transformer: "free" saves 40.1 MiB of
    activations where "keep" saved 46.2 (the weights' bf16 copies go),
    "all" 50.6 for no measurable gain in step time; hence the default.

    One difference from eager autocast: a parameter written in place
    between the forward and the backward now fails the backward with
    PyTorch's "modified by an inplace operation" error, as it does without
    autocast, where eager autocast's saved copy hides the write.
    Returns the number of saved values changed."""
    mode = save_casts_mode() if mode is None else mode
    slots = saved_slots(fw, bw) if slots is None else slots
    if slots is None or mode == "keep":
        return 0
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    placeholders = [n for n in bw.graph.nodes if n.op == "placeholder"]
    done = 0
    for pos, p in slots:
        found = _cast_chain(outs[pos])
        if found is None:
            continue
        base, chain = found
        if mode == "free" and base.op != "placeholder" and base not in outs:
            continue
        outs[pos] = base
        # The chain again in the backward, from p (now base's value) up.
        env, made = {base: p}, []
        anchor = placeholders[-1]
        for node in reversed(chain):
            with bw.graph.inserting_after(anchor):
                new = bw.graph.node_copy(node, lambda a: env[a])
            env[node] = anchor = new
            made.append(new)
        last = made[-1]
        keep = set(made)
        p.replace_all_uses_with(last, delete_user_cb=lambda u: u not in keep)
        p.meta = dict(p.meta)
        p.meta["val"] = base.meta["val"]
        p.meta.pop("tensor_meta", None)
        done += 1
    if done:
        _recompile_pair(fw, bw, out_node, outs)
    return done
