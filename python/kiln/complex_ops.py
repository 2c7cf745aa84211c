"""Complex tensors inside a graph as pairs of reals, so that kiln compiles
them: the rotary embeddings of Llama 4 and DeepSeek V2 are written with
complex numbers (torch.polar, view_as_complex, a complex product,
view_as_real), which kiln has no dtype for; they ran in eager PyTorch
between kiln's pieces.

Each complex value becomes the real tensor view_as_real gives of it (one
more dim of 2 at the end: real, imaginary), and each op on it the real ops
that compute the same numbers: polar(r, a) = (r cos a, r sin a); a product
(ar br - ai bi, ar bi + ai br); view_as_complex and view_as_real become
aliases; shape ops take the extra dim along. The graph changes in place and
its nodes keep their identity (an FX node returned stays the node
returned), so it still runs in eager PyTorch with the same values, and
kiln lowers it as any real graph. This computes nothing itself: it is a
rewrite of the graph, as torch's decompositions are.

Only graphs whose complex values all stay inside (made from real inputs,
read back as real by view_as_real) and go only through the ops below are
rewritten; any other is left as it is (its complex ops then run in eager,
as before)."""

import torch

aten = torch.ops.aten
prims = torch.ops.prims
_COMPLEX = (torch.complex64,)


def _is_complex(x):
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dtype in _COMPLEX


def _dim(d, rank):
    """A dim of a complex tensor of `rank` dims as a dim of its pair form
    (the pair's dim stays last)."""
    return d if d >= 0 else d + rank


def _shape_rule(remap):
    """A shape op: the pair form through the same op, its args remapped
    (rank: the complex input's dims)."""
    def rule(rw, n):
        return n.target, remap(list(n.args), rw.rank[n.args[0]])
    return rule


def _with_dim(pos):
    def remap(args, rank):
        args[pos] = _dim(args[pos], rank)
        return args
    return remap


def _sizes(args, rank):
    args[1] = list(args[1]) + [2]
    return args


def _permute(args, rank):
    args[1] = [_dim(d, rank) for d in args[1]] + [rank]
    return args


def _transpose(args, rank):
    args[1], args[2] = _dim(args[1], rank), _dim(args[2], rank)
    return args


def _unsqueeze(args, rank):
    d = args[1]
    args[1] = d if d >= 0 else d + rank + 1  # within rank + 1 dims: never the pair's
    return args


def _cat(args, rank):
    if len(args) > 1:
        args[1] = _dim(args[1], rank)
    return args


_SHAPE_OPS = {
    aten.unsqueeze.default: _shape_rule(_unsqueeze),
    aten.squeeze.dim: _shape_rule(_with_dim(1)),
    aten.select.int: _shape_rule(_with_dim(1)),
    aten.slice.Tensor: _shape_rule(lambda a, r: _with_dim(1)(a, r) if len(a) > 1 else a),
    aten.view.default: _shape_rule(_sizes),
    aten._unsafe_view.default: _shape_rule(_sizes),
    aten.reshape.default: _shape_rule(_sizes),
    aten.expand.default: _shape_rule(_sizes),
    aten.permute.default: _shape_rule(_permute),
    aten.transpose.int: _shape_rule(_transpose),
    aten.index.Tensor: _shape_rule(lambda a, r: a),
    aten.clone.default: _shape_rule(lambda a, r: a),
    aten.alias.default: _shape_rule(lambda a, r: a),
    aten.detach.default: _shape_rule(lambda a, r: a),
}


class _Rewriter:
    """Makes the real nodes a rewrite needs, before the node it rewrites."""

    def __init__(self, graph, complex_nodes):
        self.graph = graph
        # What each complex node was before the rewrite changed it.
        self.complex = set(complex_nodes)
        self.rank = {n: n.meta["val"].dim() for n in complex_nodes}

    def node(self, before, target, *args):
        """A new real node, its value computed on the fake tensors of its
        args (the graph's shapes, symbolic ones included)."""
        with self.graph.inserting_before(before):
            n = self.graph.call_function(target, args)
        vals = [a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args]
        with next(v.fake_mode for v in vals if hasattr(v, "fake_mode")):
            n.meta["val"] = target(*vals)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in before.meta:
                n.meta[key] = before.meta[key]
        return n

    def pair(self, n, re, im):
        """The pair form of re + i im: (target, args) for n."""
        return aten.cat.default, ([self.node(n, aten.unsqueeze.default, re, -1),
                                   self.node(n, aten.unsqueeze.default, im, -1)], -1)

    def polar(self, n):
        r, a = n.args
        re = self.node(n, aten.mul.Tensor, r, self.node(n, aten.cos.default, a))
        im = self.node(n, aten.mul.Tensor, r, self.node(n, aten.sin.default, a))
        return self.pair(n, re, im)

    def real(self, n):
        """A real tensor made complex (to(complex64)): (x, 0)."""
        x = n.args[0]
        if x.meta["val"].dtype != torch.float32:
            x = self.node(n, prims.convert_element_type.default, x, torch.float32)
        return self.pair(n, x, self.node(n, aten.full_like.default, x, 0))

    def mul(self, n):
        a, b = n.args
        if a not in self.complex:
            a, b = b, a
        if not isinstance(b, torch.fx.Node):  # a real number
            return aten.mul.Tensor, (a, b)
        if b not in self.complex:  # a real tensor scales both parts
            return aten.mul.Tensor, (a, self.node(n, aten.unsqueeze.default, b, -1))
        ar, ai = (self.node(n, aten.select.int, a, -1, i) for i in (0, 1))
        br, bi = (self.node(n, aten.select.int, b, -1, i) for i in (0, 1))
        m = lambda x, y: self.node(n, aten.mul.Tensor, x, y)  # noqa: E731
        re = self.node(n, aten.sub.Tensor, m(ar, br), m(ai, bi))
        im = self.node(n, aten.add.Tensor, m(ar, bi), m(ai, br))
        return self.pair(n, re, im)


def _rule(n):
    """fn(rewriter, n) -> (target, args) for complex-valued node n, or None
    when there is none. Kwargs stay as they are."""
    t, args = n.target, n.args
    if n.op != "call_function":
        return None
    if t is aten.view_as_complex.default:
        return lambda rw, n: (aten.alias.default, (args[0],))
    if t is aten.polar.default and not any(_is_complex(a) for a in args):
        return _Rewriter.polar
    if t in (aten.mul.Tensor, aten.mul.Scalar) and not n.kwargs:
        other = args[1] if _is_complex(args[0]) else args[0]
        return None if isinstance(other, complex) else _Rewriter.mul
    if t in (aten.add.Tensor, aten.sub.Tensor) and all(_is_complex(a) for a in args[:2]) and \
            not isinstance(n.kwargs.get("alpha", 1), complex):
        return lambda rw, n: (t, args)
    if t is aten.cat.default and all(_is_complex(a) for a in args[0]):
        return lambda rw, n: (t, tuple(_cat(list(args), rw.rank[n])))
    converts = t is prims.convert_element_type.default or (
        t is aten._to_copy.default and set(n.kwargs) <= {"dtype", "device", "layout"})
    if converts and isinstance(args[0], torch.fx.Node):  # to complex64, from complex64 or a real
        if _is_complex(args[0]):
            return lambda rw, n: (aten.alias.default, (args[0],))
        if not args[0].meta["val"].dtype.is_complex:  # (complex128 is no pair kiln makes)
            return _Rewriter.real
    if t in _SHAPE_OPS and _is_complex(args[0]) and not n.kwargs:
        return _SHAPE_OPS[t]
    return None


def _is_check_of_complex(n):
    """torch.export's dtype check of a complex value (it would fail on the
    pair form): dropped."""
    return n.op == "call_function" and n.target is aten._assert_tensor_metadata.default and _is_complex(n.args[0])


def lower_complex(gm):
    """Rewrites gm's complex values as pairs of reals (see the module's
    doc); True when it did. A graph with a complex input, output or
    constant, or an op on complex values not covered, is left as it is."""
    graph = gm.graph
    rules = {n: _rule(n) for n in graph.nodes if _is_complex(n)}
    if not rules or None in rules.values():
        return False
    for n in graph.nodes:
        reads_complex = any(_is_complex(a) for a in n.all_input_nodes)
        if reads_complex and n not in rules and not _is_check_of_complex(n) and \
                not (n.op == "call_function" and n.target is aten.view_as_real.default):
            return False  # the output, or a real result of complex values (abs, angle) not covered
    for n in [n for n in graph.nodes if _is_check_of_complex(n)]:
        graph.erase_node(n)
    rw = _Rewriter(graph, rules)
    for n in list(graph.nodes):
        if n in rules:
            val = n.meta["val"]
            target, args = rules[n](rw, n)
            n.target, n.args = target, tuple(args)
            n.kwargs = {k: v for k, v in n.kwargs.items() if k == "alpha"}
            with val.fake_mode:
                n.meta["val"] = torch.view_as_real(val)  # the pair form's shape
        elif n.op == "call_function" and n.target is aten.view_as_real.default:
            n.target = aten.alias.default  # its argument is the pair form already
    graph.lint()
    gm.recompile()
    return True
