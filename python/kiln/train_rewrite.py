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
