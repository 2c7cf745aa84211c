"""The base of every op kind, and helpers the kinds share.

An op kind is one thing a step can do: "permute", "linear", "softmax". It has
three methods:

  propose(g)   at generation: pick argument values from the generator `g`
               (generate.Gen) and the free sizes; None when it does not apply.
  plan(rng, metas, sizes)
               from the argument shapes and dtypes (metas) and the free
               sizes, decide everything else with `rng` (seeded by the
               step): the ATen arguments (attrs) and the leaves (parameters
               and inputs) it creates. None when the shapes do not fit:
               after shrinking, the same step may meet other shapes.
  emit(b, xs, ls, attrs)
               make the ATen calls through builder `b` (program.py) on the
               argument handles xs and leaf handles ls. Only attrs decide
               what is called, so the same emit serves the FX graph, the
               float64 reference, torch.export and the reproducer's source.

ATen calls are written as torch.export's Core ATen graphs have them (a
transpose is a permute, softmax is _softmax, reshape is view or clone+view),
so the fast path feeds kiln what kiln.trace would.
"""

import torch

from kilnfuzz.data import LeafSpec
from kilnfuzz.program import Plan

aten = torch.ops.aten
INT64_MAX = 9223372036854775807

# Sizes drawn for new dimensions: 1 and odd tails are what breaks kernels.
SIZES = (1, 1, 2, 3, 3, 4, 5, 7, 8, 8, 16, 17, 32, 33)


class Kind:
    name = ""
    weight = 1.0  # relative frequency at generation
    arg_preds = ()  # one predicate on Meta per argument
    n_sizes = 0
    source = False  # makes a value from nothing (a new input or parameter)

    def propose(self, g):
        args = []
        for pred in self.arg_preds:
            r = g.pick(pred)
            if r is None:
                return None
            args.append(r)
        return args, [g.size() for _ in range(self.n_sizes)]

    def plan(self, rng, metas, sizes):
        raise NotImplementedError

    def emit(self, b, xs, ls, attrs):
        raise NotImplementedError


# ---- predicates on Meta -------------------------------------------------------


def is_float(m):
    return m.is_float


def float_rank(lo, hi=8):
    return lambda m: m.is_float and lo <= m.rank <= hi


def any_rank(lo, hi=8):
    return lambda m: lo <= m.rank <= hi


def is_bool(m):
    return m.dtype == torch.bool


# ---- helpers for plans --------------------------------------------------------


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def leaf(rng, shape, role=None, init="normal", high=1, p_param=0.5, dtype=torch.float32):
    """A LeafSpec: role chosen at random unless given; a runtime input gets
    a random memory layout."""
    if role is None:
        role = "param" if rng.random() < p_param else "input"
    layout = "contig"
    if role == "input" and rng.random() < 0.4:
        layout = rng.choice(("transpose", "stride", "offset", "channels_last", "expand"))
    return LeafSpec(role, tuple(int(s) for s in shape), dtype, init, high, layout)


def bcast_shape(rng, shape):
    """A shape that broadcasts against `shape`: some leading dims dropped,
    some dims set to 1."""
    shape = list(shape)
    drop = rng.randrange(len(shape) + 1) if shape and rng.random() < 0.5 else 0
    out = shape[drop:]
    for i in range(len(out)):
        if rng.random() < 0.3:
            out[i] = 1
    return tuple(out)


def dims_subset(rng, rank, allow_negative=True):
    """A non-empty sorted list of distinct dims, sometimes given negatively."""
    k = rng.randint(1, rank)
    dims = sorted(rng.sample(range(rank), k))
    if allow_negative and rng.random() < 0.3:
        dims = [d - rank for d in dims]
    return dims


def viewable(val, shape):
    try:
        val.view(shape)
        return True
    except RuntimeError:
        return False


def reshape(b, x, shape, is_viewable):
    """Reshape as torch.export writes it: a view, or a contiguous clone then
    a view when the strides do not allow one.

    is_viewable was decided on the float32 value; the float64 replays (the
    reference, its noisy runs) clone where their own value's strides do not
    allow the view: torch's CPU convolution may lay out its float64 result
    channels-last where the float32 one is contiguous (a grouped conv of an
    input whose strides look channels-last: seed 19020 graph 18579). A
    clone changes no value, so the reference still computes the program."""
    if not is_viewable or (getattr(b, "float_dtype", None) is torch.float64 and isinstance(x, torch.Tensor)
                           and not viewable(x, shape)):
        x = b.call(aten.clone.default, x, memory_format=torch.contiguous_format)
    return b.call(aten.view.default, x, list(shape))


def as_laid_out(b, x):
    """x, or a contiguous clone of it where the builder's own value of x is
    not contiguous from offset 0 (a plan that relied on the float32 value's
    layout, as as_strided's does, replayed in another dtype: torch's CPU
    convolution may return its float64 result channels-last where the
    float32 one is contiguous). The builder's value: an FX node's meta
    value, a source name's value, or the tensor itself (eager, or torch's
    fake tensors under export: left alone when its sizes are symbolic)."""
    if not getattr(b, "at_plan_sizes", False) and not isinstance(x, torch.fx.Node):
        # (the dynamic path's eager at new sizes, torch.export's tracing, a
        # reproducer: as_strided reads the value as laid out, as torch does:
        # seed 8787 graph 793's finding)
        return x
    v = x
    if isinstance(x, torch.fx.Node):
        v = x.meta.get("val")
    elif isinstance(x, str):
        v = getattr(b, "vals", {}).get(x)
    if not isinstance(v, torch.Tensor):
        return x
    if not all(isinstance(d, int) for d in (*v.shape, *v.stride(), v.storage_offset())):
        return x
    if v.is_contiguous() and v.storage_offset() == 0:
        return x
    return b.call(aten.clone.default, x, memory_format=torch.contiguous_format)


def guard_positive(b, x):
    """|x| + 0.25: keeps log, sqrt, division and friends in their domain."""
    return b.call(aten.add.Tensor, b.call(aten.abs.default, x), 0.25)


def maybe_neg(rng, d, rank):
    return d - rank if rank and rng.random() < 0.3 else d


__all__ = ["Kind", "Plan", "LeafSpec", "aten", "INT64_MAX", "SIZES", "is_float", "float_rank", "any_rank",
           "is_bool", "prod", "leaf", "bcast_shape", "dims_subset", "viewable", "reshape", "as_laid_out",
           "guard_positive", "maybe_neg"]
