"""The OpInfo coverage harness (tests/coverage/opinfo_coverage.py) on a fixed
list of ops kiln supports: every OpInfo sample that exports and that kiln
compiles must give eager's result, i.e. no "fail" sample (a wrong result or an
error inside kiln). Samples kiln reports as unsupported, or that torch.export
cannot capture, are allowed; each op must pass at least one sample.

All samples of an op run as one traced module, so this stays fast (~1 s an op
plus ~10 s to import op_db).
"""

import os
import sys

import pytest
import torch

pytest.importorskip("expecttest")  # op_db needs it

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "coverage"))
import opinfo_coverage as harness  # noqa: E402

F32, I64, BOOL = torch.float32, torch.int64, torch.bool

# (OpInfo name, dtypes)
SUBSET = [
    ("add", (F32, I64)),
    ("sub", (F32,)),
    ("mul", (F32, I64, BOOL)),
    ("div.no_rounding_mode", (F32,)),
    ("maximum", (F32,)),
    ("neg", (F32,)),
    ("exp", (F32,)),
    ("rsqrt", (F32,)),
    ("tanh", (F32,)),
    ("sigmoid", (F32,)),
    ("nn.functional.relu", (F32,)),
    ("nn.functional.gelu", (F32,)),
    ("nn.functional.silu", (F32,)),
    ("softmax", (F32,)),
    ("log_softmax", (F32,)),
    ("nn.functional.layer_norm", (F32,)),
    ("matmul", (F32,)),
    ("mm", (F32,)),
    ("bmm", (F32,)),
    ("sum", (F32, I64)),
    ("mean", (F32,)),
    ("amax", (F32,)),
    ("argmax", (F32,)),
    ("cat", (F32,)),
    ("permute", (F32,)),
    ("transpose", (F32,)),
    ("expand", (F32,)),
    ("reshape", (F32,)),
    ("view", (F32,)),
    ("where", (F32,)),
    ("index_select", (F32,)),
    ("unfold", (F32, I64)),
    ("linalg.vector_norm", (F32,)),
    ("linalg.solve_triangular", (F32,)),
    ("nn.functional.normalize", (F32,)),
    ("nn.functional.conv_transpose1d", (F32,)),
    ("nn.functional.conv_transpose2d", (F32,)),
    ("nn.functional.adaptive_max_pool2d", (F32,)),
    ("atan2", (F32,)),
    ("log1p", (F32,)),
    ("erfinv", (F32,)),
    ("remainder", (F32, I64)),
    ("bitwise_xor", (I64,)),
    ("clamp", (F32,)),
    ("nn.functional.elu", (F32,)),
    # Ties: kiln's stable sort picks other (valid) indices than eager's on
    # int64 and bool inputs; the harness accepts any valid choice.
    ("sort", (I64, BOOL)),
    ("topk", (I64,)),
]

# Ops with samples kiln does not run natively: each such sample must give
# eager's result when traced with fallback on (the "done when").
FALLBACK_SUBSET = [
    ("kthvalue", (F32,)),
]


@pytest.fixture(scope="module")
def op_db():
    return {harness.op_id(op): op for op in harness.load_op_db()}


@pytest.mark.parametrize("name,dtypes", SUBSET, ids=[s[0] for s in SUBSET])
def test_opinfo_samples_match_eager(op_db, name, dtypes):
    op = op_db[name]
    for dtype in dtypes:
        row = harness.run_op(op, dtype)
        counts = row["samples"]
        assert counts["fail"] == 0, f"{name} {dtype}: {row['details']}"
        assert counts["pass"] > 0, f"{name} {dtype}: no sample ran on kiln: {row}"


def test_core_aten_coverage_counts():
    core = harness.core_aten_coverage()
    assert core["total"] > 100  # torch's Core ATen opset has ~190 overloads
    assert 0 < core["handled"] <= core["total"]
    for op in ("aten.add.Tensor", "aten.mm.default", "aten.cat.default", "aten._softmax.default"):
        assert op in core["handled_ops"], op


@pytest.mark.parametrize("name,dtypes", FALLBACK_SUBSET, ids=[s[0] for s in FALLBACK_SUBSET])
def test_opinfo_unsupported_samples_pass_with_fallback(op_db, name, dtypes):
    op = op_db[name]
    for dtype in dtypes:
        row = harness.run_op(op, dtype, max_samples=4)
        unsupported = row["samples"]["unsupported"]
        assert unsupported > 0, f"{name} {dtype}: expected samples kiln runs only with fallback: {row}"
        assert row["fallback"]["pass"] == unsupported and row["fallback"]["fail"] == 0, row["fallback_details"]


def test_tie_aware_index_check():
    x = torch.tensor([[3, 1, 3, 2], [5, 5, 5, 0]])
    want = torch.tensor([[1, 3, 0, 2], [3, 0, 1, 2]])  # eager's ascending argsort
    ties = torch.tensor([[1, 3, 2, 0], [3, 2, 1, 0]])  # another order of the equal values
    assert harness._valid_index_choice(x, ties, want)
    wrong = torch.tensor([[1, 3, 0, 0], [3, 0, 1, 2]])  # picks the right values, index 0 twice
    assert not harness._valid_index_choice(x, wrong, want)
    swapped = torch.tensor([[3, 1, 0, 2], [3, 0, 1, 2]])  # values out of order
    assert not harness._valid_index_choice(x, swapped, want)
    # kthvalue: one index per row (the dim removed)
    assert harness._valid_index_choice(x, torch.tensor([2, 1]), torch.tensor([0, 0]))
    assert not harness._valid_index_choice(x, torch.tensor([1, 1]), torch.tensor([0, 0]))


def test_accuracy_against_float64_reference():
    # A long dot product whose result cancels to near zero: float32's
    # summation error is then far above FLOAT_TOL, for eager and for any other
    # summation order alike.
    torch.manual_seed(0)
    a, b = (torch.randn(4, 4096) * 8).double(), (torch.randn(4096, 3) * 8).double()
    b[:, 0] -= (a[0] @ b[:, 0]) / (a[0] @ a[0]) * a[0]  # out[0, 0] ~ 0
    a, b = a.float(), b.float()

    class MatMul(torch.nn.Module):
        def forward(self, x, y):
            return x @ y

    p = harness.Prepared(0, MatMul(), [a, b], a @ b)
    # Another summation order: off from eager by more than FLOAT_TOL allows,
    # about as far from float64 as eager is.
    other = (a.unsqueeze(2) * b.unsqueeze(0)).sum(1)
    assert harness.compare(other, p.want) is not None
    assert harness._as_accurate_as_eager(p, other)
    assert harness.check_sample(p, other, False) is None
    # A wrong element is not.
    wrong = p.want.clone()
    wrong[1, 2] *= 1.01
    assert harness.compare(wrong, p.want) is not None
    assert not harness._as_accurate_as_eager(p, wrong)
    assert harness.check_sample(p, wrong, False) is not None
    # NaN where eager has a number is never accepted.
    nan = p.want.clone()
    nan[0, 0] = float("nan")
    assert not harness._as_accurate_as_eager(p, nan)
