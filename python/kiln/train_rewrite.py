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

import torch

aten = torch.ops.aten


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


def unsave_transposes(fw, bw):
    """Saves x instead of x transposed for the backward.

    AOTAutograd's partitioner saves some tensors for the backward as a
    transpose of a forward value (attention's q, k and probabilities, which
    the backward's matmuls read transposed). kiln's outputs are dense, so
    each such saved transpose is a copy in the forward, while a transpose
    inside the backward costs nothing: MATMUL reads its operand transposed
    in place. So the forward returns x, and the backward transposes its
    input back. Returns the number of saved values changed."""
    out_node = next(n for n in fw.graph.nodes if n.op == "output")
    outs = list(out_node.args[0])
    fw_by_name = {n.name: n for n in fw.graph.nodes}
    placeholders = [n for n in bw.graph.nodes if n.op == "placeholder"]
    # The forward returns the user's outputs, then the values saved for the
    # backward, in the order of the backward's leading placeholders (named
    # as the forward's nodes). Only the saved positions change: the same
    # node may also be a user output (a permute returned and saved), which
    # must stay what it is.
    saved = [p for p in placeholders if p.name in fw_by_name]
    first_saved = len(outs) - len(saved)
    if first_saved < 0 or any(outs[first_saved + i] is not fw_by_name[p.name] for i, p in enumerate(saved)):
        return 0  # not the layout this rewrite knows: leave the graphs alone
    done = 0
    for i, p in enumerate(saved):
        n = fw_by_name[p.name]
        x = _last2_transpose_of(n)
        if x is None:
            continue
        val = x.meta.get("val")
        r = val.dim()
        outs[first_saved + i] = x
        with bw.graph.inserting_after(placeholders[-1]):
            t = bw.graph.call_function(aten.transpose.int, (p, r - 2, r - 1))
        t.meta = dict(p.meta)
        p.replace_all_uses_with(t, delete_user_cb=lambda u: u is not t)
        p.meta = dict(p.meta)
        p.meta["val"] = val
        p.meta.pop("tensor_meta", None)
        done += 1
    if done:
        out_node.args = (tuple(outs),) + tuple(out_node.args[1:])
        fw.graph.eliminate_dead_code()
        fw.recompile()
        bw.graph.lint()
        bw.recompile()
    return done
