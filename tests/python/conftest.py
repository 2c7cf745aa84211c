"""Shared pytest set-up: deterministic seeds, and tolerances used across tests.

fp32 tolerances: kiln accumulates GEMMs in a different order from torch's
(packed panels, FMA), so each output of a K-long dot product may differ by
about K * eps * |terms|; rtol/atol 1e-4 covers K up to a few thousand at the
magnitudes these tests use (inputs ~N(0, 1), weights ~U(-1/sqrt(K), 1/sqrt(K)))."""
import os
import sys

import pytest
import torch

FP32_TOL = dict(rtol=1e-4, atol=1e-4)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


class Fn(torch.nn.Module):
    """A module whose forward is `fn(*inputs)`: one op under test."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def trace_checked(model, *x):
    """kiln.trace without fallback, its output checked against eager's."""
    import kiln

    compiled = kiln.trace(model.eval(), x, fallback=False)
    with torch.no_grad():
        torch.testing.assert_close(compiled(*x), model(*x), equal_nan=True, **FP32_TOL)
    return compiled


def plan_ops(compiled):
    """Kiln ops of the compiled plan, one per line of kiln.explain."""
    ops = []
    for line in compiled.explain().splitlines():
        if "= " in line and "(" in line:
            ops.append(line.split("= ", 1)[1].split("(", 1)[0].strip())
    return ops
