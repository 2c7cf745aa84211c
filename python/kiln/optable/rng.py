"""Op-table handlers for random ops: dropout in training, torch.rand /
randn (and their _like forms), bernoulli, uniform_. Each is one kiln
RANDOM node (uniform or normal float32 numbers, src/ir/kiln_ops.h) reading
the graph's seed input (kiln/random_ops.py), plus ordinary elementwise
ops: a Bernoulli draw is a uniform compared with its probability, dropout
scales x by that mask as eager does (x * mask * 1/(1-p), so a dropped NaN
stays NaN). Under KILN_RANDOM=eager each raises Unsupported: the op runs
in eager PyTorch with eager's generator.
"""

import torch

from kiln.errors import Unsupported
from kiln.optable.core import _arg, _shape, _val, aten, cast
from kiln.optable.registry import register
from kiln.random_ops import eager_random

_UNIFORM, _NORMAL = 0, 1
_FLOATS = (torch.float32, torch.bfloat16)


def _random(ctx, n, shape, dist, a, b):
    if eager_random():
        raise Unsupported("random numbers (KILN_RANDOM=eager keeps them in eager PyTorch)")
    if n.kwargs.get("generator") is not None:
        raise Unsupported("random numbers from a generator of the caller's (kiln draws from torch's default one)")
    seed, stream = ctx.random_seed()
    shape = list(shape)
    return ctx.node("random", [seed], origin=ctx.origin(n), rank=len(shape), dims=shape, dist=dist,
                    stream=stream, a=float(a), b=float(b))


def _float_out(n):
    dtype = _val(n).dtype
    if dtype not in _FLOATS:
        raise Unsupported(f"random numbers of {dtype}")
    return dtype


@register(aten.rand.default, aten.rand_like.default, aten.randn.default, aten.randn_like.default)
def _rand(ctx, n):
    normal = n.target in (aten.randn.default, aten.randn_like.default)
    dtype = _float_out(n)
    return cast(ctx, _random(ctx, n, _shape(n), _NORMAL if normal else _UNIFORM, 0.0, 1.0), dtype)


@register(aten.uniform.default)
def _uniform(ctx, n):
    # The functional form of x.uniform_(from, to): x's shape and dtype.
    lo, hi = float(_arg(n, 1, "from", 0.0)), float(_arg(n, 2, "to", 1.0))
    dtype = _float_out(n)
    return cast(ctx, _random(ctx, n, _shape(n), _UNIFORM, lo, hi), dtype)


@register(aten.bernoulli.p, aten.bernoulli.default)
def _bernoulli(ctx, n):
    # 1 where a uniform in [0, 1) is below p (a number, or a tensor of
    # probabilities, torch.bernoulli(x)), in x's dtype.
    dtype = _float_out(n)
    origin = ctx.origin(n)
    u = _random(ctx, n, _shape(n), _UNIFORM, 0.0, 1.0)
    if n.target is aten.bernoulli.p:
        p = ctx.scalar(float(_arg(n, 1, "p", 0.5)), torch.float32)
    else:
        p = cast(ctx, ctx.value(n.args[0]), torch.float32)
    return cast(ctx, ctx.node("lt", [u, p], origin=origin), dtype)


def dropout(ctx, n, x, p):
    """aten.native_dropout in training: (x * keep * 1/(1-p), keep), keep a
    bool mask true with probability 1 - p (eager's formula and scale; a
    scale of 0 at p = 1)."""
    origin = ctx.origin(n)
    dtype = ctx.dtype(x)
    if dtype not in _FLOATS:
        raise Unsupported(f"dropout of {dtype}")
    keep = ctx.node("lt", [_random(ctx, n, ctx.shape(x), _UNIFORM, 0.0, 1.0),
                           ctx.scalar(1.0 - p, torch.float32)], origin=origin)
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    kept = ctx.node("mul", [x, cast(ctx, keep, dtype)], origin=origin)
    return ctx.node("mul", [kept, ctx.scalar(scale, dtype)], origin=origin), keep
