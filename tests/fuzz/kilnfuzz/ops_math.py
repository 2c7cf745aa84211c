"""Elementwise op kinds: unary math and activations (also written out as
the decompositions kiln's pattern passes recognise), binary ops with
broadcasting against new leaves, Python scalars or other values,
comparisons, where, logical ops and casts."""

import math

import torch

from kilnfuzz.kinds import Kind, Plan, aten, bcast_shape, guard_positive, is_bool, is_float, leaf


def _p(**choices):
    """A sampler of keyword parameters: each value a tuple to choose from."""
    return lambda rng: {k: rng.choice(v) for k, v in choices.items()}


# name -> (parameter sampler, emit(b, x, params), needs a positive argument)
UNARY = {
    "relu": (None, lambda b, x, p: b.call(aten.relu.default, x), False),
    "gelu": (_p(approximate=("none", "tanh")), lambda b, x, p: b.call(aten.gelu.default, x, **p), False),
    "silu": (None, lambda b, x, p: b.call(aten.silu.default, x), False),
    "tanh": (None, lambda b, x, p: b.call(aten.tanh.default, x), False),
    "sigmoid": (None, lambda b, x, p: b.call(aten.sigmoid.default, x), False),
    "exp": (None, lambda b, x, p: b.call(aten.exp.default, x), False),
    "expm1": (None, lambda b, x, p: b.call(aten.expm1.default, x), False),
    "neg": (None, lambda b, x, p: b.call(aten.neg.default, x), False),
    "abs": (None, lambda b, x, p: b.call(aten.abs.default, x), False),
    "sin": (None, lambda b, x, p: b.call(aten.sin.default, x), False),
    "cos": (None, lambda b, x, p: b.call(aten.cos.default, x), False),
    "erf": (None, lambda b, x, p: b.call(aten.erf.default, x), False),
    "log": (None, lambda b, x, p: b.call(aten.log.default, x), True),
    "log1p": (None, lambda b, x, p: b.call(aten.log1p.default, x), True),
    "sqrt": (None, lambda b, x, p: b.call(aten.sqrt.default, x), True),
    "rsqrt": (None, lambda b, x, p: b.call(aten.rsqrt.default, x), True),
    "reciprocal": (None, lambda b, x, p: b.call(aten.reciprocal.default, x), True),
    "hardtanh": (_p(lo=(-1.0, -0.5), hi=(1.0, 2.0)),
                 lambda b, x, p: b.call(aten.hardtanh.default, x, p["lo"], p["hi"]), False),
    "leaky_relu": (_p(slope=(0.01, 0.2, -0.5)), lambda b, x, p: b.call(aten.leaky_relu.default, x, p["slope"]),
                   False),
    "elu": (_p(alpha=(1.0, 0.5)), lambda b, x, p: b.call(aten.elu.default, x, p["alpha"]), False),
    "clamp": (_p(bounds=((-0.5, 0.7), (None, 0.7), (0.0, None), (-1.0, 2.0))),
              lambda b, x, p: b.call(aten.clamp.default, x, *p["bounds"]), False),
    "pow": (_p(e=(2, 3, 2.0, -1.0)), lambda b, x, p: b.call(aten.pow.Tensor_Scalar, x, p["e"]), False),
    "pow_frac": (_p(e=(0.5, 1.5, -0.5)), lambda b, x, p: b.call(aten.pow.Tensor_Scalar, x, p["e"]), True),
    "scalar": (_p(op=("add", "sub", "mul", "div"), c=(0.5, 2.0, -3.0, 1e-3)),
               lambda b, x, p: b.call(getattr(aten, p["op"]).Tensor, x, p["c"]), False),
    "rsub": (_p(c=(1.0, -2.5)), lambda b, x, p: b.call(aten.rsub.Scalar, x, p["c"]), False),
    # The decompositions models write by hand, which kiln's passes fold back
    # into one GELU, SiLU or softplus-like op.
    "gelu_tanh_decomp": (None, lambda b, x, p: _gelu_tanh(b, x), False),
    "gelu_erf_decomp": (None, lambda b, x, p: _gelu_erf(b, x), False),
    "silu_decomp": (None, lambda b, x, p: b.call(aten.mul.Tensor, x, b.call(aten.sigmoid.default, x)), False),
}


def _gelu_tanh(b, x):
    inner = b.call(aten.mul.Tensor, b.call(aten.pow.Tensor_Scalar, x, 3), 0.044715)
    inner = b.call(aten.mul.Tensor, b.call(aten.add.Tensor, x, inner), math.sqrt(2.0 / math.pi))
    one = b.call(aten.add.Tensor, b.call(aten.tanh.default, inner), 1.0)
    return b.call(aten.mul.Tensor, b.call(aten.mul.Tensor, x, 0.5), one)


def _gelu_erf(b, x):
    e = b.call(aten.erf.default, b.call(aten.mul.Tensor, x, 0.7071067811865476))
    return b.call(aten.mul.Tensor, b.call(aten.mul.Tensor, x, 0.5), b.call(aten.add.Tensor, e, 1.0))


class Unary(Kind):
    name, weight, arg_preds = "unary", 6.0, (is_float,)

    def plan(self, rng, m, sizes):
        if not m[0].is_float:
            return None
        op = rng.choice(sorted(UNARY))
        sampler, _, positive = UNARY[op]
        # Mostly kept in the domain; else NaNs and infinities arise, whose
        # positions must agree too.
        guard = positive and rng.random() < 0.85
        return Plan({"op": op, "p": sampler(rng) if sampler else {}, "guard": guard})

    def emit(self, b, xs, ls, a):
        x = guard_positive(b, xs[0]) if a["guard"] else xs[0]
        return UNARY[a["op"]][1](b, x, a["p"])


BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "pow", "atan2")


def _partner(rng, shape, dtype_init="normal"):
    """What the other operand is: ("leaf", i), ("scalar", c) or ("self",)."""
    r = rng.random()
    if r < 0.2:
        return ("scalar", rng.choice((0.5, -1.5, 2.0, 3.0))), []
    if r < 0.3:
        return ("self",), []
    if r < 0.45 and any(s == 1 for s in shape):  # the value broadcasts up against a bigger leaf
        grown = tuple(rng.choice((2, 3, 5)) if s == 1 else s for s in shape)
        return ("leaf", 0), [leaf(rng, grown, init=dtype_init)]
    return ("leaf", 0), [leaf(rng, bcast_shape(rng, shape), init=dtype_init)]


def _binary_emit(b, op, x, y, a):
    if a.get("swap"):
        x, y = y, x
    if op == "pow":
        x = guard_positive(b, x)
    if op == "div" and a.get("guard") and not isinstance(y, float):
        y = guard_positive(b, y)
    if op in ("add", "sub"):
        target = aten.add.Tensor if op == "add" else aten.sub.Tensor
        return b.call(target, x, y, alpha=a["alpha"]) if a.get("alpha", 1) != 1 else b.call(target, x, y)
    if op in ("maximum", "minimum", "atan2") and isinstance(y, float):
        op = "mul"  # these take no scalar operand in ATen
    if op in ("maximum", "minimum", "atan2", "pow"):
        over = {"maximum": aten.maximum.default, "minimum": aten.minimum.default, "atan2": aten.atan2.default,
                "pow": aten.pow.Tensor_Tensor if not isinstance(y, float) else aten.pow.Tensor_Scalar}
        return b.call(over[op], x, y)
    return b.call(getattr(aten, op).Tensor, x, y)


class Binary(Kind):
    """x op partner, the partner a new leaf, a scalar or x itself."""

    name, weight, arg_preds = "binary", 5.0, (is_float,)

    def plan(self, rng, m, sizes):
        if not m[0].is_float:
            return None
        partner, specs = _partner(rng, m[0].shape)
        op = rng.choice(BINARY)
        return Plan({"op": op, "partner": partner, "swap": partner[0] == "leaf" and rng.random() < 0.4,
                     "alpha": rng.choice((1, 1, 2, -0.5)), "guard": rng.random() < 0.8}, specs)

    def emit(self, b, xs, ls, a):
        kind = a["partner"][0]
        y = ls[0] if kind == "leaf" else xs[0] if kind == "self" else a["partner"][1]
        return _binary_emit(b, a["op"], xs[0], y, dict(a, swap=a["swap"] and kind == "leaf"))


def _broadcasts(a, b):
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False


class Binary2(Kind):
    """x op y for two values of the program that broadcast together."""

    name, weight = "binary2", 3.0

    def propose(self, g):
        x = g.pick(is_float)
        if x is None:
            return None
        xs = g.meta(x).shape
        y = g.pick(lambda m: m.is_float and _broadcasts(xs, m.shape), exclude=x)
        return ([x, y], []) if y is not None else None

    def plan(self, rng, m, sizes):
        if not (m[0].is_float and m[1].is_float and _broadcasts(m[0].shape, m[1].shape)):
            return None
        return Plan({"op": rng.choice(BINARY), "alpha": rng.choice((1, 1, 0.5)), "guard": rng.random() < 0.8})

    def emit(self, b, xs, ls, a):
        return _binary_emit(b, a["op"], xs[0], xs[1], a)


CMP = ("gt", "lt", "ge", "le")


class Compare(Kind):
    """A float comparison giving a bool mask; eq/ne only on exact (integer
    or bool) values, where float rounding cannot flip them."""

    name, weight, arg_preds = "compare", 1.5, (lambda m: m.dtype in (torch.float32, torch.int64, torch.bool),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if x.is_float:
            op = rng.choice(CMP)
            if rng.random() < 0.4:
                return Plan({"op": op, "scalar": rng.choice((0.0, 0.5, -0.25))})
            return Plan({"op": op, "scalar": None}, [leaf(rng, bcast_shape(rng, x.shape))])
        op = rng.choice(("eq", "ne"))
        init = "bool" if x.dtype == torch.bool else "index"
        return Plan({"op": op, "scalar": None}, [leaf(rng, bcast_shape(rng, x.shape), init=init, high=4,
                                                      dtype=x.dtype)])

    def emit(self, b, xs, ls, a):
        op = getattr(aten, a["op"])
        if a["scalar"] is not None:
            return b.call(op.Scalar, xs[0], a["scalar"])
        return b.call(op.Tensor, xs[0], ls[0])


class Where(Kind):
    """where(cond, x, other): cond an existing mask when one broadcasts,
    else a new bool leaf or x > 0; other a leaf, x's negation or a value."""

    name, weight = "where", 1.5

    def propose(self, g):
        x = g.pick(is_float)
        if x is None:
            return None
        xs = g.meta(x).shape
        c = g.pick(lambda m: is_bool(m) and _broadcasts(xs, m.shape)) if g.rng.random() < 0.7 else None
        return ([x, c] if c is not None else [x]), []

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or (len(m) > 1 and not (is_bool(m[1]) and _broadcasts(x.shape, m[1].shape))):
            return None
        specs, cond = [], "arg"
        if len(m) == 1:
            cond = rng.choice(("leaf", "gt"))
            if cond == "leaf":
                specs.append(leaf(rng, bcast_shape(rng, x.shape), init="bool", dtype=torch.bool))
        other = rng.choice(("leaf", "neg", "zero"))
        if other == "leaf":
            specs.append(leaf(rng, bcast_shape(rng, x.shape)))
        return Plan({"cond": cond, "other": other, "swap": rng.random() < 0.3}, specs)

    def emit(self, b, xs, ls, a):
        x, k = xs[0], 0
        if a["cond"] == "arg":
            c = xs[1]
        elif a["cond"] == "leaf":
            c, k = ls[0], 1
        else:
            c = b.call(aten.gt.Scalar, x, 0.0)
        if a["other"] == "leaf":
            y = ls[k]
        elif a["other"] == "neg":
            y = b.call(aten.neg.default, x)
        else:
            y = b.call(aten.mul.Tensor, x, 0.0)
        if a["swap"]:
            x, y = y, x
        return b.call(aten.where.self, c, x, y)


class Logical(Kind):
    name, weight, arg_preds = "logical", 0.7, (is_bool,)

    def plan(self, rng, m, sizes):
        if not is_bool(m[0]):
            return None
        op = rng.choice(("and", "or", "xor", "not"))
        specs = [] if op == "not" else [leaf(rng, bcast_shape(rng, m[0].shape), init="bool", dtype=torch.bool)]
        return Plan({"op": op}, specs)

    def emit(self, b, xs, ls, a):
        if a["op"] == "not":
            return b.call(aten.logical_not.default, xs[0])
        return b.call(getattr(aten, f"logical_{a['op']}").default, xs[0], ls[0])


class Cast(Kind):
    """A mask or an index made float (exact: no rounding to worry about)."""

    name, weight, arg_preds = "cast", 1.0, (lambda m: m.dtype in (torch.bool, torch.int64),)

    def plan(self, rng, m, sizes):
        if m[0].dtype not in (torch.bool, torch.int64):
            return None
        return Plan()

    def emit(self, b, xs, ls, a):
        return b.call(aten._to_copy.default, xs[0], dtype=torch.float32)


KINDS = [Unary(), Binary(), Binary2(), Compare(), Where(), Logical(), Cast()]
