"""CPU fallback for ops kiln lacks, and kiln.analyze."""
import warnings

import pytest
import torch

import kiln
from conftest import FP32_TOL


class Mixed(torch.nn.Module):
    """Supported ops around one kiln lacks (bessel_j0)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.special.bessel_j0(h)
        return {"probs": self.b(h).softmax(-1), "h": h}


def test_trace_falls_back_with_one_warning_naming_the_op():
    m, x = Mixed().eval(), torch.randn(3, 8)
    import kiln.partition
    kiln.partition._warned.clear()  # the warning is once per process
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiled = kiln.trace(m, x)
        kiln.trace(m, x)
    named = [str(i.message) for i in w if "bessel_j0" in str(i.message)]
    assert len(named) == 1, named
    assert compiled.n_pieces == 2
    with torch.no_grad():
        want = m(x)
    got = compiled(x)
    torch.testing.assert_close(got["probs"], want["probs"], **FP32_TOL)
    torch.testing.assert_close(got["h"], want["h"], **FP32_TOL)


def test_fallback_false_is_an_error():
    with pytest.raises(kiln.UnsupportedOpError, match="bessel_j0"):
        kiln.trace(Mixed().eval(), torch.randn(3, 8), fallback=False)


def test_saving_a_partitioned_model_says_why_not(tmp_path):
    compiled = kiln.trace(Mixed().eval(), torch.randn(3, 8))
    with pytest.raises(kiln.KilnError, match="bessel_j0"):
        kiln.save(compiled, tmp_path / "m.kiln")


def test_torch_compile_partitions_instead_of_giving_up():
    torch._dynamo.reset()
    m, x = Mixed().eval(), torch.randn(3, 8)
    with torch.no_grad():
        got = torch.compile(m, backend="kiln")(x)
        torch.testing.assert_close(got["probs"], m(x)["probs"], **FP32_TOL)


def test_analyze_reports_counts_reasons_and_pieces():
    report = kiln.analyze(Mixed(), torch.randn(3, 8), verbose=False)
    assert report["total_ops"] == 5 and report["supported_ops"] == 4
    assert report["fallback_pieces"] == 2
    (u,) = report["unsupported"]
    assert u["op"] == "aten.special_bessel_j0.default" and "test_fallback.py" in u["where"]
    assert "80.0%" in report["text"]


def test_analyze_of_a_fully_supported_model():
    report = kiln.analyze(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()),
                          torch.randn(2, 4), verbose=False)
    assert report["supported_percent"] == 100.0 and report["unsupported"] == []
