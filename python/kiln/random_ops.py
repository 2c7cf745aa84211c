"""Random numbers in kiln graphs: the seed each call draws.

A graph with random nodes (dropout in training, torch.rand / randn,
bernoulli; their handlers are kiln/optable/rng.py) reads one int64
model input, RNG_SEED_INPUT. KilnModule draws it from torch's default CPU
generator on every call, so torch.manual_seed makes a run repeat and each
call draws new numbers, as eager's would; the caller never passes it (a C
API user or the CLI gives it like any input). The numbers themselves are
kiln's counter-based Philox (src/kernels/math/kiln_random.h), not eager's
MT19937 stream: the same distributions, other draws (as with Inductor).
KILN_RANDOM=eager keeps every random op in eager PyTorch instead, for a
run that must match eager's draws bit for bit.
"""

import os

import torch

from kiln import _C

RNG_SEED_INPUT = "kiln.rng_seed"
_I64 = _C.DTYPES["int64"]


def eager_random():
    """Whether random ops stay in eager PyTorch (KILN_RANDOM=eager)."""
    return os.environ.get("KILN_RANDOM", "").lower() == "eager"


def with_seed(descs, at):
    """descs with a fresh seed's descriptor inserted at position at, and the
    seed tensor (the caller keeps it alive until the C call returns)."""
    seed = torch.empty((), dtype=torch.int64).random_()  # advances torch's generator
    descs = list(descs)
    descs.insert(at, (seed.data_ptr(), _I64, ()))
    return descs, seed
