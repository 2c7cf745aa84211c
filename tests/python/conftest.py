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
