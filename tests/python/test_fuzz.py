"""A seeded run of kiln's random-graph differential fuzzer (tests/fuzz).

N random programs of ATen ops (views and layouts, GEMMs with constant and
runtime weights, conv, attention, norms, reductions, elementwise ops,
indexing), each compiled by kiln and compared with eager PyTorch in float32
and float64 under the fuzzer's tolerance rule (tests/fuzz/kilnfuzz/check.py);
one graph in 20 goes through kiln.trace end to end and one in 200 through
torch.compile(backend="kiln") with a training step. Deterministic: graph i of
SEED is the same program, with the same data and path, on every machine (no
time budget, nothing drawn from the ISA, the thread count or the clock).

A failure names the graph and the shrunk reproducer script written under
build/fuzz/; `python tests/fuzz/kiln_fuzz.py --seed SEED --only I` reruns one.
"""

import os
import sys
import warnings

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "fuzz"))

from kilnfuzz.known import ACTIVE  # noqa: E402
from kilnfuzz.runner import Config, Tally, describe, run_one  # noqa: E402

SEED = 16
N = 2000  # about 80 s on this 2-core machine


def test_fuzz_seeded_run():
    cfg = Config(seed=SEED, skip_known=ACTIVE, out=os.path.join(REPO, "build", "fuzz"), verify=False,
                 shrink_seconds=60.0)
    tally = Tally()
    threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in range(N):
                tally.add(run_one(i, cfg))
    finally:
        torch.set_num_threads(threads)
    assert not tally.failures, f"{len(tally.failures)} of {N} graphs failed:\n" + "\n".join(
        describe(r) for r in tally.failures)
    # The run tested something: most graphs ran and passed, every path was taken.
    assert tally.status["pass"] >= 0.9 * N, tally.summary(1.0)
    assert set(tally.paths) == {"fast", "trace", "compile"}, tally.paths
