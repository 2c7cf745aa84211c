"""The OpInfo coverage harness's dynamic mode (tests/coverage/opinfo_coverage.py
--dynamic) on a few ops: each sample through torch.compile(backend="kiln",
dynamic=True), at its sizes and with every dim grown by 1, must give eager's
result (no "fail": a wrong answer or a crash in kiln's backend). Ops marked
in_kiln must also run every sample in kiln (no op falls back to eager).

~10 s to import op_db, then ~1-2 s an op.
"""

import os
import sys

import pytest
import torch

pytest.importorskip("expecttest")  # op_db needs it

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "coverage"))
import opinfo_coverage as harness  # noqa: E402

# (OpInfo name, every sample runs in kiln). The ones the dynamic sweep found
# crashing or wrong, and a few the static subset has.
DYNAMIC_SUBSET = [
    ("add", True),
    ("softmax", True),
    ("nn.functional.layer_norm", True),
    ("sum", True),
    ("matmul", True),
    ("var", True),
    ("std_mean", True),
    ("chunk", True),
    ("split", True),
    ("nn.functional.group_norm", False),  # more groups than one over a symbolic C: eager
    ("nn.functional.adaptive_avg_pool2d", False),
    ("nn.functional.instance_norm", True),
    ("nn.functional.pad.circular", True),
    ("diagonal", True),
    ("trace", True),
    ("unfold", True),
]


@pytest.fixture(scope="module")
def op_db():
    return {harness.op_id(op): op for op in harness.load_op_db()}


@pytest.mark.parametrize("name,in_kiln", DYNAMIC_SUBSET, ids=[s[0] for s in DYNAMIC_SUBSET])
def test_opinfo_samples_match_eager_under_symbolic_sizes(op_db, name, in_kiln):
    row = harness.run_op_dynamic(op_db[name], torch.float32, max_samples=3, op_seconds=30)
    counts = row["samples"]
    assert counts["fail"] == 0, f"{name}: {row['details']}"
    assert counts["pass"] + counts["eager"] > 0, f"{name}: no sample reached kiln: {row}"
    if in_kiln:
        assert counts["eager"] == 0 and counts["pass"] > 0, f"{name}: {row['details']}"


def test_dynamic_harness_catches_a_wrong_result(monkeypatch):
    """A backend that answers wrong is a `fail`, one that raises through kiln
    is a `fail`, and one that refuses an op (eager) is `eager`."""

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1

    x = torch.randn(3, 4)
    p = harness.Prepared(0, Double(), [x], Double()(x))
    assert harness.run_dynamic_one(p, False) == ("pass", "")

    import kiln.dynamo as kd

    orig = kd._kiln_fw_compile

    def wrong(gm, example_inputs):
        fn = orig(gm, example_inputs)
        return lambda *a: [o + 1 for o in fn(*a)]

    monkeypatch.setattr(kd, "_kiln_fw_compile", wrong)
    status, detail = harness.run_dynamic_one(p, False)
    assert status == "fail" and "difference" in detail, (status, detail)

    def crash(gm, example_inputs):
        raise TypeError("a handler treated a size as a number")

    monkeypatch.setattr(kd, "_kiln_fw_compile", crash)
    status, detail = harness.run_dynamic_one(p, False)
    assert status == "fail" and "TypeError" in detail, (status, detail)

    monkeypatch.setattr(kd, "_kiln_fw_compile", orig)

    class Kth(torch.nn.Module):  # no kiln lowering: runs in eager
        def forward(self, x):
            return torch.kthvalue(x, 2, dim=1)[0] * 2

    q = harness.Prepared(0, Kth(), [x], Kth()(x))
    status, detail = harness.run_dynamic_one(q, False)
    assert status == "eager" and "kthvalue" in detail, (status, detail)
