"""Leaf tensors (inputs and parameters): their specs and deterministic data.

Data come from numpy's PCG64 generator seeded by (program salt, step seed,
leaf index), never from torch's RNG: torch's CPU normal_ has vectorised
variants whose output depends on the ISA, and a reproducer must give the same
tensors on every machine. A leaf's layout says how an input is handed over:
the same values, in memory that is contiguous, transposed, strided, offset,
channels-last or expanded (stride 0), so kiln's input seam sees real views.
"""

from dataclasses import dataclass

import numpy as np
import torch

INPUT_LAYOUTS = ("contig", "transpose", "stride", "offset", "channels_last", "expand")


@dataclass(frozen=True)
class LeafSpec:
    role: str  # "input" (runtime) or "param" (a constant of the compiled graph)
    shape: tuple
    dtype: torch.dtype = torch.float32
    init: str = "normal"  # normal | weight | positive | special | index | bool | mask | tril
    high: int = 1  # index: values in [0, high); weight: the fan-in
    layout: str = "contig"  # see INPUT_LAYOUTS; params are always contiguous
    trainable: bool = True  # False: a buffer (batch norm's running statistics), never given a gradient


def _values(spec, rng):
    shape = spec.shape
    if spec.init == "index":
        return torch.from_numpy(np.asarray(rng.integers(0, max(spec.high, 1), size=shape, dtype=np.int64)))
    if spec.init == "bool":
        return torch.from_numpy(np.asarray(rng.random(size=shape) < 0.5))
    if spec.init == "tril":  # a causal mask buffer: query i sees keys 0..i
        return torch.from_numpy(np.tril(np.ones(shape, dtype=bool)))
    if spec.init == "mask":  # an attention mask: each query row keeps at least its first key
        m = np.asarray(rng.random(size=shape) < 0.6)
        if len(shape) >= 1 and shape[-1] > 0:
            m[..., 0] = True
        return torch.from_numpy(m)
    if spec.init == "weight":  # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        bound = 1.0 / np.sqrt(max(spec.high, 1))
        a = rng.uniform(-bound, bound, size=shape)
    elif spec.init == "positive":
        a = rng.uniform(0.5, 2.0, size=shape)
    else:
        a = rng.standard_normal(size=shape)
        if spec.init == "special":  # a few exact zeros, infinities and NaNs
            pick = rng.random(size=shape) < 0.08
            specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
            a = np.where(pick, specials[rng.integers(0, len(specials), size=shape)], a)
    return torch.from_numpy(np.asarray(a, dtype=np.float32).reshape(shape))


# How an input's values are laid out in memory. Reproducer scripts include
# these functions' source, so they rebuild the very same views.
def transposed(t, a, b):
    return t.transpose(a, b).contiguous().transpose(a, b)


def strided(t, d):
    shape = list(t.shape)
    shape[d] *= 2
    view = torch.zeros(shape, dtype=t.dtype)[(slice(None),) * d + (slice(None, None, 2),)]
    view.copy_(t)
    return view


def offset(t, d):
    shape = list(t.shape)
    shape[d] += 1
    view = torch.zeros(shape, dtype=t.dtype).narrow(d, 1, t.shape[d])
    view.copy_(t)
    return view


def channels_last(t):
    return t.contiguous(memory_format=torch.channels_last)


def expanded(t, d):
    return t.narrow(d, 0, 1).clone().expand(t.shape)


LAYOUT_FUNCTIONS = (transposed, strided, offset, channels_last, expanded)


def _place(t, layout, rng):
    """(the layout's function, its extra arguments) for t, or None."""
    r = t.dim()
    if layout == "transpose" and r >= 2:
        a, b = sorted(rng.choice(r, size=2, replace=False).tolist())
        return transposed, (a, b)
    if layout in ("stride", "offset") and r >= 1:
        return (strided if layout == "stride" else offset), (int(rng.integers(0, r)),)
    if layout == "channels_last" and r == 4:
        return channels_last, ()
    if layout == "expand":
        big = [d for d in range(r) if t.shape[d] > 1]
        if big:  # stride 0 along one dim: its values repeat along it
            return expanded, (int(rng.choice(big)),)
    return None


def make_leaf(spec, seed):
    """The leaf tensor for `spec`; seed: (salt, step seed, leaf index)."""
    return make_leaf_placed(spec, seed)[0]


def make_leaf_placed(spec, seed):
    """(tensor, values, placement): the leaf, its values as a contiguous
    tensor, and (function, args) rebuilding its layout from them, or None."""
    t = _values(spec, np.random.default_rng(list(seed))).to(spec.dtype)
    # The layout does not depend on the salt (seed[0]): redrawing the data
    # keeps the program's strides, which its plans may have relied on.
    place_rng = np.random.default_rng([7, *seed[1:]])
    place = _place(t, spec.layout, place_rng) if spec.role == "input" and spec.layout != "contig" else None
    if place is None:
        return t, t, None
    fn, args = place
    return fn(t, *args), t, place
