"""The guards torch.export traced a program under (finding 15 of
tests/fuzz/FINDINGS.md).

Beyond the ranges of its Dims, an exported program holds only where its
ShapeEnv's guards hold: a view to 40 columns of an (s0, s1, s2) input,
traced as (s0, s1*s2), only where s1*s2 == 40; a broadcast traced with
s != 1 is another program at s == 1. torch's own `ep.module()` refuses a
call that breaks one. A kiln model must too, or it runs the traced program
where it is wrong: a silent wrong shape.

A model that is one kiln graph checks them in C at every bind
(symbolic.add_guards puts them in the graph's table, and they travel in the
.kiln file's "guards" section). A model with CPU fallback runs several
pieces with eager ops between them, so it checks them here, on the flat
inputs' sizes, before anything runs (SizeGuards); the saved form is a small
expression tree of whitelisted operators, never code.
"""

import sympy
from torch.utils._sympy import functions as F

from kiln.errors import KilnError

try:  # the exported program's ShapeEnv
    from torch.export.exported_program import _get_shape_env
except ImportError:  # pragma: no cover - a torch without it: only the ranges are checked
    def _get_shape_env(gm):
        return None


def of_exported(ep):
    """The program's guards as sympy relations over the symbols of its
    inputs' sizes (replacements applied; those that are always true, or
    read sizes no input gives, left out), in the order torch recorded them."""
    return of_shape_env(_get_shape_env(ep.graph_module))


def of_values(values):
    """of_exported's guards, of the ShapeEnv symbolic fake values come from
    (a torch.compile graph's example inputs, a partitioned piece's
    placeholders); none when no value has a symbolic size. For the probes
    kiln checks shape rules at: a reshape(-1, 3) holds only where 3 divides
    the element count (kiln_sym_probes_fit)."""
    import torch
    # Size arguments count as inputs' sizes: a split's sizes a graph break
    # handed over from .tolist() sum to the dim split (s10 + s29 == s77, or
    # == 48 where the dim is static).
    args = {x.node.expr for x in values if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol}
    if not args and not any(isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape)
                            for x in values):
        return []
    from torch._guards import detect_fake_mode
    shape_env = getattr(detect_fake_mode(list(values)), "shape_env", None)
    if shape_env is None and args:
        shape_env = next(iter(x for x in values if isinstance(x, torch.SymInt))).node.shape_env
    return of_shape_env(shape_env, args)


def of_shape_env(shape_env, args=()):
    """of_exported's guards, of any ShapeEnv (Dynamo's, for torch.compile);
    args: symbols the program takes as size arguments."""
    if shape_env is None:
        return []
    # Symbols of the inputs' sizes. Guards on strides or storage offsets
    # (a strided input's stride != 3) are left out: kiln's program reads its
    # inputs by their strides, whatever they are.
    local = {v for v, sources in shape_env.var_to_sources.items()
             if any(_is_size(src) for src in sources)} | set(args)
    out = []
    for guard in getattr(shape_env, "guards", ()):
        try:
            expr = shape_env.replace(guard.expr)
        except Exception:  # an older ShapeEnv: the guard as recorded
            expr = guard.expr
        if expr is sympy.true or expr is True:
            continue
        if not set(getattr(expr, "free_symbols", ())) <= local:
            continue  # a parameter's size, say: nothing a call can change
        out.append(expr)
    return out


def _is_size(source):
    """True for an input's own size (not a stride, not a size of the base a
    view input was cut from, which no kiln input gives)."""
    name = getattr(source, "name", "")
    try:
        name = name() if callable(name) else str(name)
    except Exception:  # a source that cannot name itself
        name = ""
    prop = getattr(source, "prop", None)
    is_size = getattr(prop, "name", None) == "SIZE" if prop is not None else ".size()" in name
    return is_size and "._base" not in name


_BINARY = {"floordiv": "//", "mod": "%", "eq": "==", "ne": "!=", "lt": "<", "le": "<="}
_NARY = {"add": " + ", "mul": " * ", "and": " and ", "or": " or "}
_CALLS = {"max": "max", "min": "min"}


def _tree(expr, index):
    """expr as ["int", v] | ["sym", k] | [op, operands...]; index(symbol) -> k."""
    if getattr(expr, "is_Integer", False) or isinstance(expr, int):
        return ["int", int(expr)]
    if isinstance(expr, sympy.Symbol):
        return ["sym", index(expr)]
    args = [_tree(a, index) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return ["add", *args]
    if isinstance(expr, sympy.Mul):
        return ["mul", *args]
    if isinstance(expr, sympy.Pow) and args[1][0] == "int" and 0 <= args[1][1] <= 8:
        return ["mul", *([args[0]] * args[1][1])] if args[1][1] else ["int", 1]
    if isinstance(expr, F.FloorDiv):
        return ["floordiv", *args]
    if isinstance(expr, (F.PythonMod, F.Mod, sympy.Mod)):
        return ["mod", *args]
    if isinstance(expr, (sympy.Max, F.Max)):
        return ["max", *args]
    if isinstance(expr, (sympy.Min, F.Min)):
        return ["min", *args]
    if isinstance(expr, sympy.Eq):
        return ["eq", *args]
    if isinstance(expr, sympy.Ne):
        return ["ne", *args]
    if isinstance(expr, sympy.StrictLessThan):
        return ["lt", *args]
    if isinstance(expr, sympy.LessThan):
        return ["le", *args]
    if isinstance(expr, sympy.StrictGreaterThan):
        return ["lt", args[1], args[0]]
    if isinstance(expr, sympy.GreaterThan):
        return ["le", args[1], args[0]]
    if isinstance(expr, sympy.And):
        return ["and", *args]
    if isinstance(expr, sympy.Or):
        return ["or", *args]
    if isinstance(expr, sympy.Not):
        return ["not", *args]
    raise KilnError(f"torch.export traced the program under the condition {expr}, which kiln cannot "
                    f"check at run time ({type(expr).__name__}); export with sizes that avoid it")


def _code(tree, n_sizes):
    """Python source for a validated tree over S (the sizes); raises
    ValueError on anything but the whitelisted forms (a hostile file)."""
    if not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        raise ValueError("a guard node is not [op, ...]")
    op, args = tree[0], tree[1:]
    if op == "int":
        if len(args) != 1 or type(args[0]) is not int or abs(args[0]) > 1 << 62:
            raise ValueError("a guard number is not an integer")
        return f"({args[0]})"
    if op == "sym":
        if len(args) != 1 or type(args[0]) is not int or not 0 <= args[0] < n_sizes:
            raise ValueError("a guard names no size")
        return f"S[{args[0]}]"
    parts = [_code(a, n_sizes) for a in args]
    if op in _NARY and parts:
        return "(" + _NARY[op].join(parts) + ")"
    if op in _BINARY and len(parts) == 2:
        return f"({parts[0]} {_BINARY[op]} {parts[1]})"
    if op in _CALLS and len(parts) >= 2:
        return f"{_CALLS[op]}({', '.join(parts)})"
    if op == "not" and len(parts) == 1:
        return f"(not {parts[0]})"
    raise ValueError(f"unknown guard operator {op!r}")


def hold_in_ranges(exprs, ranges, limit):
    """True when every sympy relation in exprs holds at each point of the
    box its symbols' ranges make (ranges: symbol -> ValueRanges, as an
    exported program's range_constraints), evaluated point by point; False
    where one fails, a range is unbounded, the box has more than limit
    points, or an expression is not of the forms guards take."""
    import itertools

    if any(e is sympy.false or e is False for e in exprs):
        return False
    exprs = [e for e in exprs if e is not sympy.true and e is not True]
    if not exprs:
        return True
    syms = sorted({v for e in exprs for v in e.free_symbols}, key=str)
    box = []
    for v in syms:
        vr = ranges.get(v)
        try:
            lo, hi = int(vr.lower), int(vr.upper)
        except (AttributeError, TypeError, ValueError, OverflowError):  # unknown or unbounded
            return False
        box.append(range(lo, hi + 1))
    points = 1
    for r in box:
        points *= len(r)
        if points > limit:
            return False
    order = {v: k for k, v in enumerate(syms)}
    try:
        body = ", ".join(_code(_tree(e, order.__getitem__), len(syms)) for e in exprs)
    except (KilnError, ValueError, KeyError):
        return False
    # Built from whitelisted operators, integers and S[k] only (_code).
    fn = eval(f"lambda S: ({body},)", {"__builtins__": {"max": max, "min": min}})  # noqa: S307
    try:
        return all(all(fn(S)) for S in itertools.product(*box))
    except (ZeroDivisionError, ArithmeticError):
        return False


def _size_name(user_inputs, i, d):
    return user_inputs[i].name if d is None else f"{user_inputs[i].name}.shape[{d}]"


def _bare_sizes(user_inputs):
    """{symbol: (input position, dim)} for each symbol that is some input's
    size as it is (dim None: the input is a size itself), first one wins."""
    where = {}
    for i, node in enumerate(user_inputs):
        val = node.meta.get("val")
        dims = [(None, val)] if not hasattr(val, "shape") else list(enumerate(val.shape))
        for d, s in dims:
            e = getattr(getattr(s, "node", None), "expr", None)
            if isinstance(e, sympy.Symbol) and e not in where:
                where[e] = (i, d)
    return where


def readable(expr, user_inputs):
    """The guard with each symbol named by the input size it is
    ("x.shape[2]*x.shape[3] == 40"), for messages."""
    names = {e: sympy.Symbol(_size_name(user_inputs, i, d), integer=True)
             for e, (i, d) in _bare_sizes(user_inputs).items()}
    try:
        return str(expr.xreplace(names))
    except Exception:  # a form xreplace cannot rebuild: torch's names
        return str(expr)


class SizeGuards:
    """Checks an exported program's guards on the flat inputs' sizes.

    sizes: [(input position, dim)] whose values the guards read (dim None:
    the input is a size itself); guards: [(tree, text)]."""

    def __init__(self, sizes, guards, names=None):
        self.sizes = [(int(i), None if d is None else int(d)) for i, d in sizes]
        self.names = [str(x) for x in names] if names and len(names) == len(self.sizes) else [
            f"input {i}" + ("" if d is None else f" dim {d}") for i, d in self.sizes]
        self.guards = [(tree, str(text)) for tree, text in guards]
        n = len(self.sizes)
        body = ", ".join(_code(tree, n) for tree, _ in self.guards)
        # Built from whitelisted operators, integers and S[k] only (_code).
        self._fn = eval(f"lambda S: ({body},)", {"__builtins__": {"max": max, "min": min}})  # noqa: S307

    @classmethod
    def of_exported(cls, ep, user_inputs):
        """user_inputs: the program's user-input placeholder nodes, in the
        flat order the model is called with."""
        where = _bare_sizes(user_inputs)
        sizes, order, guards = [], {}, []

        def index(sym):
            if sym not in where:
                raise KilnError(f"torch.export traced the program under a condition on {sym}, a size no "
                                "input gives as it is; kiln cannot check it at run time")
            if sym not in order:
                order[sym] = len(sizes)
                sizes.append(where[sym])
            return order[sym]

        for expr in of_exported(ep):
            guards.append((_tree(expr, index), readable(expr, user_inputs)))
        return cls(sizes, guards, [_size_name(user_inputs, i, d) for i, d in sizes]) if guards else None

    def check(self, flat):
        try:
            S = [flat[i].shape[d] if d is not None else int(flat[i]) for i, d in self.sizes]
        except (IndexError, AttributeError, TypeError):
            return  # the wrong number or rank of inputs: the pieces name what is wrong
        for ok, (_, text) in zip(self._fn(S), self.guards):
            if not ok:
                given = ", ".join(f"{name} = {v}" for name, v in zip(self.names, S))
                raise ValueError(f"the input sizes break a condition the program was traced under: "
                                 f"{text} (with {given}); trace again at sizes like these for a "
                                 "program that runs there")

    def to_json(self):
        return {"sizes": [list(s) for s in self.sizes], "guards": [[t, x] for t, x in self.guards],
                "names": self.names}

    @classmethod
    def from_json(cls, obj):
        if obj is None:
            return None
        try:
            return cls([tuple(s) for s in obj["sizes"]], [tuple(g) for g in obj["guards"]], obj.get("names"))
        except (KeyError, TypeError, ValueError, SyntaxError, RecursionError) as e:
            raise KilnError(f"corrupt artifact: the fallback graph's size guards are unreadable ({e})") from None
