"""Symbolic sizes on the Python side of lowering (issue 17).

torch.export with Dim objects and Dynamo with dynamic shapes give FX graphs
whose sizes are SymInts (sympy expressions over symbols such as s27). kiln's
C graph holds such a size as an encoded int64 naming an entry of the graph's
expression table (src/ir/kiln_sym.h); here a size is a plain int or a
SymDim, which wraps that encoding and does arithmetic through the C table
(so equal expressions are equal SymDims, as they are equal ids in C).

A SymDim refuses to be used as a number (int(), comparisons): a handler
that needs a concrete size raises Unsupported and the node falls back,
rather than kiln guessing a value.
"""

import contextvars
import os
import sys

import sympy
import torch
from torch.utils._sympy import functions as F

from kiln.errors import KilnError, Unsupported

SYM_BASE = -(1 << 62)
# In the C core's error for a size the probes derived wrong at the example
# (src/ir/kiln_shape_infer_sym.c, check_example): the op is refused.
EXAMPLE_MISMATCH = "at the example's sizes"
SYM_MAX_EXPRS = 1 << 20
RANGE_MAX = 1 << 40

_current = contextvars.ContextVar("kiln_lowering_context", default=None)


def is_encoded(d):
    return isinstance(d, int) and SYM_BASE <= d < SYM_BASE + SYM_MAX_EXPRS


class SymDim:
    """A symbolic size of the graph being built."""

    __slots__ = ("graph", "d")

    def __init__(self, graph, d):
        self.graph, self.d = graph, d

    def _op(self, kind, a, b):
        if not isinstance(a, (int, SymDim)) or not isinstance(b, (int, SymDim)) or isinstance(a, bool) or isinstance(b, bool):
            raise Unsupported(f"size arithmetic with {a!r} and {b!r}")
        return wrap(self.graph, self.graph.dim_op(kind, encode(a), encode(b)))

    def __add__(self, o):
        return self._op("add", self, o)

    __radd__ = __add__

    def __sub__(self, o):
        return self._op("add", self, -o if isinstance(o, int) else self._op("mul", o, -1))

    def __rsub__(self, o):
        return self._op("add", o, self._op("mul", self, -1))

    def __mul__(self, o):
        return self._op("mul", self, o)

    __rmul__ = __mul__

    def __neg__(self):
        return self._op("mul", self, -1)

    def __floordiv__(self, o):
        return self._op("floordiv", self, o)

    def __rfloordiv__(self, o):
        return self._op("floordiv", o, self)

    def __mod__(self, o):
        return self._op("mod", self, o)

    def __rmod__(self, o):
        return self._op("mod", o, self)

    def __eq__(self, o):
        return isinstance(o, SymDim) and o.d == self.d

    def __ne__(self, o):
        return not self.__eq__(o)

    def __hash__(self):
        return hash(self.d)

    def _number(self, *_):
        raise Unsupported(f"a symbolic size ({self}) where kiln needs a number")

    __int__ = __index__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = _number

    def __repr__(self):
        return self.graph.describe_dim(self.d)


def minmax(kind, a, b):
    """max or min of two sizes."""
    if isinstance(a, SymDim):
        return a._op(kind, a, b)
    if isinstance(b, SymDim):
        return b._op(kind, a, b)
    return max(a, b) if kind == "max" else min(a, b)


def broadcast_shapes(*shapes):
    """torch.broadcast_shapes for kiln sizes: a SymDim counts as not 1 (a
    symbol whose range holds 1 broadcasts only where tracing proved it
    equal to the other size). Two different sizes, neither 1, are refused."""
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(out[i], int) and out[i] == 1:
                out[i] = d
            elif out[i] != d:
                raise Unsupported(f"shapes {', '.join(str(tuple(s)) for s in shapes)} do not broadcast")
    return out


def wrap(graph, d):
    return SymDim(graph, d) if is_encoded(d) else d


def encode(x):
    return x.d if isinstance(x, SymDim) else x


class Unify(Exception):
    """Lower the graph again with symbol b taken as symbol a (or as the
    number a, or as the expression a: Symbols.tree's nested tuples)."""

    def __init__(self, a, b):
        super().__init__(f"{b} is {a}")
        self.a, self.b = a, b


class Symbols:
    """The symbols of one lowering: sympy symbol name -> C symbol, with the
    range the ShapeEnv knows for it.

    Dynamo gives every input dimension its own symbol unless tracing proved
    two equal; an op may need equal what tracing never compared (attention
    over a DynamicCache's keys and values, each with its own length). When
    an op fails on two different bare symbols where it needs one size,
    unify_after_failure raises Unify and the lowering starts over with one
    symbol for both (aliases); the model then checks at each call that the
    inputs agree, naming both. A bare symbol an op needs equal to an
    expression of others (a linear's weight against a strided convolution's
    output: (7 - s74)//2 + 1) is taken as that expression the same way: the
    input it sizes is then checked against the expression's value."""

    def __init__(self, graph):
        self.graph = graph
        self.vars = {}
        self.aliases = {}
        self._keys = {}  # the C table's name of a symbol -> its sympy name
        self._sympy = {}  # sympy name -> the symbol, for rebuilding an alias
        self._shape_env = None
        # torch.export's range_constraints (sympy name -> ValueRanges), where
        # the graph came from an ExportedProgram: the range the program is
        # valid for. The ShapeEnv's own range starts backed sizes at 2 (its
        # 0/1 specialization) even for Dim(min=1), whose program runs at 1.
        # Size 0 stays refused (below).
        self.ranges = {}
        # The example's value of each symbol (the ShapeEnv's hint), where
        # known: two symbols the example gives different sizes are never
        # unified (the artifact would refuse the inputs it was traced with).
        self.hints = {}

    def _resolve(self, name):
        seen = set()
        while name in self.aliases and name not in seen:
            seen.add(name)
            name = self.aliases[name]
        return name

    def unify_after_failure(self, op, shapes):
        """Raises Unify for the first pair of different bare symbols at one
        position (right-aligned) of the inputs' shapes; for attention also
        the keys' length against the values' and the mask's last dim."""
        pairs = []
        if op == "matmul" and len(shapes) == 2 and min(len(shapes[0]), len(shapes[1])) >= 2:
            # (..., M, K) times (..., K, N), as the lowering emits it (no flags
            # yet): K against K, the batch dims right-aligned.
            (a, b), start = shapes, 3
            pairs.append((a[-1], b[-2]))
        else:
            start = 1
        for i in range(len(shapes)):
            for j in range(i + 1, len(shapes)):
                a, b = shapes[i], shapes[j]
                for k in range(start, min(len(a), len(b)) + 1):
                    pairs.append((a[-k], b[-k]))
        if op == "sdpa" and len(shapes) >= 3 and len(shapes[1]) == 4:
            lk = shapes[1][2]
            kv = [(lk, shapes[2][2])]
            # A key length Dynamo specialised (T5's cross-attention keys,
            # whose mask has the encoder's static length; a sliding-window
            # layer's key cache) and a value length it left symbolic, one
            # symbol plus a number: the symbol is the difference.
            for a, b in kv:
                if isinstance(a, SymDim) == isinstance(b, SymDim):
                    continue
                sym, n = (a, b) if isinstance(a, SymDim) else (b, a)
                names = [self._keys.get(v, v) for v in self.graph.sym_vars(sym.d)]
                name = names[0] if len(names) == 1 and names[0] in self.vars else None
                offset = sym - self.vars[name] if name is not None else None
                n = n - offset if isinstance(offset, int) else None
                if n is not None and self.hints.get(name) in (None, n):
                    _log(f"kiln: {op} needs {sym} equal to {n}: lowering again with it a number")
                    raise Unify(n, name)
            pairs += kv + ([(lk, shapes[3][-1])] if len(shapes) > 3 and shapes[3] else [])
        for a, b in pairs:
            if not (isinstance(a, SymDim) and isinstance(b, SymDim)) or a == b:
                continue
            ea, eb = self.graph.example_dims([a.d, b.d])
            if ea is not None and eb is not None and ea != eb:
                # Not an equality the op needs (the example differs): a
                # rule that failed at the probe sizes on an inequality
                # (gather's index no larger than its input). The op
                # stays refused rather than the artifact over-constrained.
                continue
            va, vb = self._names(a), self._names(b)
            if not (va | vb) <= self._sympy.keys():
                continue  # a symbol no input size names (a cache's capacity): not one to rebuild
            only_a, only_b = va - vb, vb - va
            # s1 + t against s2 + t: the one symbol each has that the other
            # lacks, where b with it taken as a's is a.
            if len(only_a) == 1 and len(only_b) == 1:
                sa, sb = next(iter(only_a)), next(iter(only_b))
                if self.rebuild(self.tree(b), {sb: self._sympy[sa]}) == a:
                    _log(f"kiln: {op} needs {a} and {b} equal: lowering again with one symbol for both")
                    raise Unify(sa, sb)
            # A bare symbol against an expression of other symbols.
            for x, y, vx in ((a, b, va), (b, a, vb)):
                (name,) = self._names(y) if len(self._names(y)) == 1 else (None,)
                if name is not None and y == self.vars.get(name) and name not in vx:
                    _log(f"kiln: {op} needs {y} equal to {x}: lowering again with it that expression")
                    raise Unify(self.tree(x), name)

    def _names(self, d):
        """The sympy names of the symbols size d reads."""
        return {self._keys.get(v, v) for v in self.graph.sym_vars(d.d)}

    def tree(self, d):
        """d as nested tuples that rebuild it in another lowering's graph:
        a number, ("var", sympy symbol) or (kind, a, b) (graph.sym_tree)."""
        def convert(t):
            if isinstance(t, int):
                return t
            if t[0] == "var":
                return ("var", self._sympy[self._keys.get(t[1], t[1])])
            return (t[0], convert(t[1]), convert(t[2]))
        return convert(self.graph.sym_tree(encode(d)))

    def rebuild(self, tree, subst=None):
        """The size a tree (Symbols.tree) names in this lowering's graph,
        symbols taken as subst says (sympy name -> sympy symbol)."""
        if isinstance(tree, int):
            return tree
        if tree[0] == "var":
            sym = (subst or {}).get(str(tree[1]), tree[1])
            return self.var(sym, self._shape_env)
        a, b = self.rebuild(tree[1], subst), self.rebuild(tree[2], subst)
        return wrap(self.graph, self.graph.dim_op(tree[0], encode(a), encode(b)))

    def known(self, sym):
        """True when symbol sym is one of this lowering's, or taken as a
        number or as an expression of its symbols."""
        name = self._resolve(str(sym))
        if isinstance(name, tuple):
            return all(self.known(v) for v in _tree_symbols(name))
        return isinstance(name, int) or name in self.vars

    def var(self, sym, shape_env=None):
        if shape_env is not None:
            self._shape_env = shape_env
        name = self._resolve(str(sym))
        if isinstance(name, int):  # a symbol an op needs to be this number (unify_after_failure)
            return name
        if isinstance(name, tuple):  # a symbol an op needs to be this expression of others
            return self.rebuild(name)
        if name not in self.vars:
            self._sympy[name] = sym if str(sym) == name else sympy.Symbol(name, integer=True, positive=True)
            lo, hi = 0, RANGE_MAX
            vr = self.ranges.get(str(sym))
            if vr is not None:
                lo = 1  # kiln's symbolic graphs do not take empty tensors: size 0 is refused
            elif shape_env is not None:
                vr = getattr(shape_env, "var_to_range", {}).get(sym)
            if vr is not None:
                try:
                    lo = max(lo, int(vr.lower))
                except Exception:  # int_oo and other unbounded ends
                    pass
                try:
                    hi = min(hi, int(vr.upper))
                except Exception:  # int_oo and other unbounded ends
                    pass
            hi = max(hi, 1, lo)
            shown = display_name(sym, shape_env)
            if shown in self._keys:  # two symbols, one name: keep them apart
                shown = f"{shown} ({name})"
            self._keys[shown] = name
            hints = getattr(shape_env, "backed_var_to_val", None) if shape_env is not None else None
            if hints is None and shape_env is not None:  # before torch renamed it
                hints = getattr(shape_env, "var_to_val", None)
            hint = hints.get(sym) if hints else None
            try:
                self.hints[name] = int(hint) if hint is not None else None
            except (TypeError, ValueError):  # a hint that is not a number
                self.hints[name] = None
            # The example's value checks every size derived over the symbol
            # (kiln_sym.h); one outside kiln's range is left out.
            example = self.hints[name] if self.hints[name] is not None and lo <= self.hints[name] <= hi else -1
            self.vars[name] = SymDim(self.graph, self.graph.sym(shown, lo, hi, example))
        return self.vars[name]

    def of_expr(self, expr, shape_env=None):
        """A sympy expression of sizes as an int or a SymDim."""
        if isinstance(expr, (int,)) or getattr(expr, "is_Integer", False):
            return int(expr)
        if isinstance(expr, sympy.Symbol):
            return self.var(expr, shape_env)
        args = [self.of_expr(a, shape_env) for a in expr.args]
        if isinstance(expr, sympy.Add):
            out = 0
            for a in args:
                out = out + a
            return out
        if isinstance(expr, sympy.Mul):
            out = 1
            for a in args:
                out = a * out
            return out
        if isinstance(expr, sympy.Pow) and getattr(expr.exp, "is_Integer", False) and 0 < int(expr.exp) <= 64:
            # s**2: sizes of equal symbols multiplied (a flatten of (s, s)).
            out = 1
            for _ in range(int(expr.exp)):
                out = args[0] * out
            return out
        if isinstance(expr, F.FloorDiv):
            return args[0] // args[1]
        if isinstance(expr, (F.PythonMod, F.Mod, sympy.Mod)):
            return args[0] % args[1]
        if isinstance(expr, (sympy.Max, F.Max, sympy.Min, F.Min)) and len(args) >= 2:
            kind = "max" if isinstance(expr, (sympy.Max, F.Max)) else "min"
            out = args[0]
            for a in args[1:]:
                out = minmax(kind, out, a)
            return out
        raise Unsupported(f"the symbolic size {expr} ({type(expr).__name__})")


def _tree_symbols(tree):
    if isinstance(tree, int):
        return []
    if tree[0] == "var":
        return [tree[1]]
    return _tree_symbols(tree[1]) + _tree_symbols(tree[2])


def _log(message):
    if os.environ.get("KILN_LOG", "") not in ("", "0"):
        print(message, file=sys.stderr)


_RELATIONS = (
    (sympy.Eq, "==", False), (sympy.Ne, "!=", False),
    (sympy.StrictLessThan, "<", False), (sympy.LessThan, "<=", False),
    (sympy.StrictGreaterThan, "<", True), (sympy.GreaterThan, "<=", True),
)


def add_guards(ctx, guards, strict=True):
    """Puts torch.export's guards (kiln.guards.of_exported) in the graph's
    table: the model checks them in C at every bind (kiln_sym_guards_check),
    so an artifact run from the CLI refuses a call that breaks one, as the
    exported program does. A guard kiln cannot express is an error, never
    dropped; unless strict is False: Dynamo's guards, which Dynamo checks
    before every call, are there for the probes (kiln_sym_probes_fit), and
    one kiln cannot express is left to Dynamo."""
    for expr in guards:
        if all(ctx.symbols.known(v) for v in expr.free_symbols):
            try:
                _add_relation(ctx, expr, expr)
            except KilnError:
                if strict:
                    raise
        # else a size the graph never reads (an input kiln took as a
        # constant): nothing of kiln's program depends on it.


def _add_relation(ctx, expr, shown):
    if expr is sympy.true or expr is True:
        return
    if isinstance(expr, sympy.And):
        for a in expr.args:
            _add_relation(ctx, a, shown)
        return
    if isinstance(expr, (sympy.Or, sympy.Not)):
        # One relation 0 <= E, E built with max (or) and min (and): a
        # convolution's "some output dim is positive" guard, say.
        try:
            e = encode(_nonnegative(ctx, expr))
        except (Unsupported, KilnError, ValueError, TypeError):
            e = None
        if e is not None:
            try:
                ctx.graph.sym_guard("<=", 0, e)
            except Exception as err:  # the C table's message: broken at the example, never holds
                raise KilnError(f"torch.export's guard {shown}: {err}") from None
            return
    for kind, rel, swap in _RELATIONS:
        if isinstance(expr, kind):
            try:
                a, b = (encode(ctx.symbols.of_expr(x)) for x in expr.args)
            except (Unsupported, KilnError, ValueError, TypeError):
                break  # a form the C table cannot build: refused below
            if swap:
                a, b = b, a
            try:
                ctx.graph.sym_guard(rel, a, b)
            except Exception as e:  # the C table's message: broken at the example, never holds
                raise KilnError(f"torch.export's guard {shown}: {e}") from None
            return
    # KilnError: kiln.trace then runs the program partitioned, whose Python
    # side checks every guard (kiln.guards.SizeGuards).
    raise KilnError(f"torch.export traced the program under the condition {shown}, which kiln's "
                    "C runtime cannot check")


def _nonnegative(ctx, expr):
    """A size E (int or SymDim) with expr true exactly where 0 <= E (sizes
    are integers: a < b is a + 1 <= b)."""
    if isinstance(expr, (sympy.Or, sympy.And)):
        parts = [_nonnegative(ctx, a) for a in expr.args]
        out = parts[0]
        for p in parts[1:]:
            out = minmax("max" if isinstance(expr, sympy.Or) else "min", out, p)
        return out
    if isinstance(expr, sympy.Not):
        return -_nonnegative(ctx, expr.args[0]) - 1
    for kind, rel, swap in _RELATIONS:
        if isinstance(expr, kind):
            a, b = (ctx.symbols.of_expr(x) for x in expr.args)
            if swap:
                a, b = b, a
            if rel == "==":
                return minmax("min", a - b, b - a)
            if rel == "!=":
                return minmax("max", a - b, b - a) - 1
            return b - a - (1 if rel == "<" else 0)
    raise Unsupported(f"the condition {expr}")


def check_at_example(ctx, node, result):
    """Raises Unsupported when a kiln value lowered for FX node `node` has,
    at the example's symbol values, other sizes than torch's for the node.

    kiln derives a symbolic size from two probe bindings of the symbols
    (src/ir/kiln_shape_infer_sym.c), which may agree on a number an
    expression is not, or map back to the wrong expression (fuzzer finding
    14: a slice [-10:33:2] of s in [33, 40] is 2 at both probes, 5 at 33).
    Such a node would refuse every call, the example's too; refused here it
    runs in eager (CPU fallback). Checked at the example, which satisfies
    every guard, rather than against torch's expression: that may be
    symbolic yet constant under the guards, and kiln's number then right."""
    if not ctx.symbols.vars:
        return  # nothing symbolic in this lowering
    val = node.meta.get("val")
    vals = list(val) if isinstance(val, (tuple, list)) else [val]
    outs = list(result) if isinstance(result, tuple) else [result]
    if len(vals) != len(outs):
        return
    for v, vid in zip(vals, outs):
        if not isinstance(v, torch.Tensor) or not isinstance(vid, int) or isinstance(vid, bool):
            continue
        if vid not in ctx._meta:
            continue
        ours = ctx.shape(vid)
        if not is_symbolic(ours) and not any(isinstance(d, torch.SymInt) for d in v.shape):
            continue
        theirs = _example_sizes(v.shape)
        mine = ctx.graph.example_dims([encode(d) for d in ours])
        if theirs is None:
            continue  # a size without an example value (unbacked): not checked
        if len(theirs) != len(mine) or any(a is not None and a != b for a, b in zip(mine, theirs)):
            why = (f"kiln's sizes {tuple(ours)} for its result are {tuple(mine)} at the example, torch's "
                   f"{tuple(theirs)}: kiln cannot express this size over symbolic dimensions yet")
            raise Unsupported(why)  # the partition's reasons show it (kiln.explain, KILN_LOG)


def _example_sizes(torch_shape):
    """torch's sizes at the example (each SymInt's hint), or None."""
    from torch.fx.experimental.symbolic_shapes import guarding_hint_or_throw

    try:
        return [int(guarding_hint_or_throw(d)) for d in torch_shape]
    except Exception:  # noqa: BLE001 -- an unbacked size has no example value
        return None


def display_name(sym, shape_env=None):
    """The name a user knows a symbol by: the torch.export Dim's ("seq"),
    else where Dynamo took the size from, shortened
    (L['kwargs']['input_ids'].size()[1] -> input_ids.size()[1]), else
    torch's own (s27). kiln's errors, kiln.explain and .kiln files show it."""
    import re

    sources = list(getattr(shape_env, "var_to_sources", {}).get(sym, ())) if shape_env is not None else []
    if not sources:
        return str(sym)
    source = sources[0].name
    source = source() if callable(source) else source
    dim_name = getattr(shape_env, "source_name_to_debug_name", {}).get(source)
    if dim_name:
        return str(dim_name)
    short = re.sub(r"\['([A-Za-z_]\w*)'\]", r".\1", source)
    for prefix in ("L.kwargs.", "L.args.", "L."):
        if short.startswith(prefix):
            short = short[len(prefix):]
            break
    return short or str(sym)


def lowering(make_ctx, fn, ranges=None, aliases=None):
    """fn(ctx) with ctx the current lowering context, started over with one
    symbol for two whenever an op needs them equal (Symbols.unify_after_failure).
    ranges: torch.export's range_constraints, when lowering an ExportedProgram.
    aliases: the symbols taken as others to start from (a partition's pieces
    start from those its support pass found: an alias can make the probes
    fit the program's guards, and a node before the op that needs it then
    lowers only with it); updated with those found here."""
    aliases = {} if aliases is None else aliases
    for _ in range(SYM_MAX_UNIFY):
        ctx = make_ctx()
        ctx.symbols.aliases = aliases
        ctx.symbols.ranges = {str(k): v for k, v in (ranges or {}).items()}
        token = _current.set(ctx)
        try:
            return fn(ctx)
        except Unify as u:
            aliases[u.b] = u.a
        finally:
            _current.reset(token)
    raise KilnError(f"more than {SYM_MAX_UNIFY} symbolic sizes taken as equal")


SYM_MAX_UNIFY = 256


def current():
    return _current.get()


def size(x):
    """A size as kiln holds it: int, or SymDim for a SymInt of the graph
    being lowered (an FX node resolves through the lowering's values)."""
    if isinstance(x, SymDim) or (isinstance(x, int) and not isinstance(x, bool)):
        return x
    ctx = current()
    if isinstance(x, torch.fx.Node) and ctx is not None:
        v = ctx.env.get(x)
        if isinstance(v, (SymDim, int)) and not isinstance(v, bool):
            return v
        raise Unsupported(f"a size computed by {x.target} that kiln does not hold as a size")
    if isinstance(x, torch.SymInt):
        node = x.node
        if node.is_constant() if hasattr(node, "is_constant") else False:
            return int(node.constant)
        expr = node.expr
        if getattr(expr, "is_Integer", False):
            return int(expr)
        if ctx is None:
                raise Unsupported(f"a symbolic size {expr} outside a lowering")
        return ctx.symbols.of_expr(expr, node.shape_env)
    return x


def shape(t):
    """A tensor's (or FakeTensor's) shape as kiln sizes."""
    return tuple(size(s) for s in t.shape)


def is_symbolic(shape_):
    return any(isinstance(s, SymDim) for s in shape_)
