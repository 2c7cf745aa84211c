"""CPU fallback for ops kiln lacks, and kiln.analyze."""
import re
import warnings

import pytest
import torch

import kiln
from conftest import FP32_TOL
from kiln.module import KilnModule


class Mixed(torch.nn.Module):
    """Supported ops around one kiln lacks (polygamma)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.a(x))
        h = torch.special.polygamma(1, h + 1)
        return {"probs": self.b(h).softmax(-1), "h": h}


def test_trace_falls_back_with_one_warning_naming_the_op():
    m, x = Mixed().eval(), torch.randn(3, 8)
    import kiln.partition
    kiln.partition._warned.clear()  # the warning is once per process
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiled = kiln.trace(m, x)
        kiln.trace(m, x)
    named = [str(i.message) for i in w if "polygamma" in str(i.message)]
    assert len(named) == 1, named
    assert compiled.n_pieces == 2
    with torch.no_grad():
        want = m(x)
    got = compiled(x)
    torch.testing.assert_close(got["probs"], want["probs"], **FP32_TOL)
    torch.testing.assert_close(got["h"], want["h"], **FP32_TOL)


def test_fallback_false_is_an_error():
    with pytest.raises(kiln.UnsupportedOpError, match="polygamma"):
        kiln.trace(Mixed().eval(), torch.randn(3, 8), fallback=False)


def test_a_partitioned_model_saves_and_loads(tmp_path):
    m, x = Mixed().eval(), torch.randn(3, 8)
    compiled = kiln.trace(m, x)
    path = tmp_path / "m.kiln"
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    assert loaded.n_pieces == 2 and loaded.unsupported == ["aten.polygamma.default"]
    with torch.no_grad():
        want = m(x)
    got = loaded(x)
    torch.testing.assert_close(got["probs"], want["probs"], **FP32_TOL)
    torch.testing.assert_close(got["h"], want["h"], **FP32_TOL)
    # The standalone runtime says why it can't run it (no PyTorch there).
    from test_cli import KILN_BIN
    import subprocess
    if KILN_BIN.exists():
        p = subprocess.run([str(KILN_BIN), "info", str(path)], capture_output=True, text=True)
        assert p.returncode != 0 and "CPU fallback" in p.stderr, p.stderr
    # torch.jit.save can't hold the eager ops: a clear error, not a broken archive.
    with pytest.raises(kiln.KilnError, match="kiln.save"):
        torch.jit.save(compiled, str(tmp_path / "m.pt"))


def test_a_corrupt_fallback_graph_is_rejected(tmp_path):
    compiled = kiln.trace(Mixed().eval(), torch.randn(3, 8))
    data = bytearray(compiled.to_bytes())
    good = b'"torch.ops.aten.polygamma.default"'
    at = data.find(good)
    assert at > 0
    # Same length, so only the section's meaning changes: an unknown op, and
    # a target outside torch.ops (never resolved, never called).
    for evil in (b'"torch.ops.aten.polygamma.defaulX"', b'"builtins.eval.os.system.xxxxxxxx"'):
        assert len(evil) == len(good)
        bad = bytes(data[:at] + evil + data[at + len(good):])
        with pytest.raises(kiln.KilnError, match="corrupt artifact"):
            KilnModule.from_bytes(bad)


def test_torch_compile_partitions_instead_of_giving_up():
    torch._dynamo.reset()
    m, x = Mixed().eval(), torch.randn(3, 8)
    with torch.no_grad():
        got = torch.compile(m, backend="kiln")(x)
        torch.testing.assert_close(got["probs"], m(x)["probs"], **FP32_TOL)


def test_analyze_reports_counts_reasons_and_pieces():
    report = kiln.analyze(Mixed(), torch.randn(3, 8), verbose=False)
    assert report["total_ops"] == 6 and report["supported_ops"] == 5
    assert report["fallback_pieces"] == 2
    (u,) = report["unsupported"]
    assert u["op"] == "aten.polygamma.default" and "test_fallback.py" in u["where"]
    assert "83.3%" in report["text"]


def test_analyze_of_a_fully_supported_model():
    report = kiln.analyze(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.GELU()),
                          torch.randn(2, 4), verbose=False)
    assert report["supported_percent"] == 100.0 and report["unsupported"] == []


class Float64Inside(torch.nn.Module):
    """A float64 intermediate (logspace computes in double before the cast):
    a dtype kiln lacks, inside an otherwise supported graph."""

    def forward(self, a):
        return torch.logspace(0, 3, 5, dtype=torch.int64) + a


def test_a_float64_intermediate_falls_back_instead_of_failing():
    a = torch.ones(5, dtype=torch.int64)
    with pytest.warns(UserWarning, match="CPU fallback"):
        m = kiln.trace(Float64Inside(), (a,))
    assert torch.equal(m(a), Float64Inside()(a))
    with pytest.raises(kiln.UnsupportedOpError, match="float64"):
        kiln.trace(Float64Inside(), (a,), fallback=False)


class Linspace(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x):
        return torch.linspace(4.3, -2.7, 50, dtype=self.dtype) + x


def test_integer_linspace_is_eager_s():
    # Eager's integer linspace casts start and end first and steps in double;
    # torch's own decomposition does neither (7 of these 50 values differ).
    # kiln decomposes it as eager computes, in float64, which falls back.
    x = torch.zeros(50, dtype=torch.int64)
    with pytest.warns(UserWarning, match="CPU fallback"):
        m = kiln.trace(Linspace(torch.int64), (x,))
    assert torch.equal(m(x), Linspace(torch.int64)(x))
    # float32 linspace stays native (torch's decomposition: within an ulp or
    # two of eager's vectorised kernel).
    xf = torch.zeros(50)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mf = kiln.trace(Linspace(torch.float32), (xf,), fallback=False)
    torch.testing.assert_close(mf(xf), Linspace(torch.float32)(xf), **FP32_TOL)


class Inverse(torch.nn.Module):
    """linalg.inv exports with an effect token (its error check is an
    ordered side effect): the check runs in eager, the rest in kiln."""

    def forward(self, a):
        return torch.linalg.inv(a @ a.mT + torch.eye(3)) * 2 + 1


def test_effect_tokens_run_in_eager_and_save(tmp_path):
    a = torch.randn(3, 3)
    with pytest.warns(UserWarning, match="CPU fallback"):
        m = kiln.trace(Inverse(), (a,))
    assert m.n_pieces >= 1
    torch.testing.assert_close(m(a), Inverse()(a), **FP32_TOL)
    kiln.save(m, tmp_path / "inv.kiln")
    torch.testing.assert_close(kiln.load(tmp_path / "inv.kiln")(a), Inverse()(a), **FP32_TOL)


class BroadcastAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_with_broadcast_batch_dims_falls_back():
    """A rank-3 q against rank-4 k and v (torch broadcasts the batch dims,
    an OpInfo sample): kiln's SDPA takes one batch, so the op falls back
    and gives eager's result; fallback=False names it."""
    torch.manual_seed(0)
    q, k, v = torch.randn(4, 3, 8), torch.randn(4, 4, 6, 8), torch.randn(4, 4, 6, 8)
    model = BroadcastAttention()
    with pytest.raises(kiln.UnsupportedOpError, match="scaled_dot_product_attention"):
        kiln.trace(model, (q, k, v), fallback=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = kiln.trace(model, (q, k, v))
    torch.testing.assert_close(compiled(q, k, v), model(q, k, v), rtol=1e-5, atol=1e-6)


class _Sine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.a(torch.sin(self.a(x)))


def _crashing_sin(monkeypatch):
    """aten.sin's handler made to crash as a kiln bug would (a TypeError, not
    one of the op table's refusals)."""
    from kiln.optable import TABLE

    def crash(ctx, n):
        raise TypeError("'<' not supported between instances of 'Node' and 'int'")
    monkeypatch.setitem(TABLE, torch.ops.aten.sin.default, crash)


def test_a_crashing_lowering_runs_the_op_in_eager_with_a_warning(monkeypatch):
    """A handler bug must not take the user's program down: the op runs in
    eager, the rest in kiln, and a warning names the op, the line and the
    error (before: the TypeError itself from kiln.trace, and torch.compile's
    BackendCompilerFailed)."""
    import kiln.errors
    _crashing_sin(monkeypatch)
    monkeypatch.setenv("KILN_STRICT", "0")
    m, x = _Sine().eval(), torch.randn(3, 8)
    with torch.no_grad():
        want = m(x)
    kiln.errors._warned_failures.clear()  # once per process and place
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        compiled = kiln.trace(m, x)
    named = [str(i.message) for i in w if i.category is RuntimeWarning]
    assert len(named) == 1, named
    assert re.search(r"aten\.sin\.default at .*test_fallback\.py.*TypeError: '<' not", named[0]), named
    assert compiled.n_pieces == 2 and compiled.unsupported == ["aten.sin.default"]
    torch.testing.assert_close(compiled(x), want, **FP32_TOL)
    with pytest.raises(kiln.UnsupportedOpError, match=r"aten\.sin\.default.*a kiln bug"):
        kiln.trace(m, x, fallback=False)
    torch._dynamo.reset()
    kiln.errors._warned_failures.clear()
    with pytest.warns(RuntimeWarning, match=r"aten\.sin\.default.*TypeError"):
        got = torch.compile(m, backend="kiln")(x)
    torch.testing.assert_close(got, want, **FP32_TOL)
    torch._dynamo.reset()


def test_kiln_strict_lets_a_crashing_lowering_raise(monkeypatch):
    """kiln's own tests and fuzzer run with KILN_STRICT=1 (conftest), where
    such a bug fails loudly instead of hiding behind the fallback."""
    _crashing_sin(monkeypatch)
    monkeypatch.setenv("KILN_STRICT", "1")
    with pytest.raises(TypeError, match="not supported between"):
        kiln.trace(_Sine().eval(), torch.randn(3, 8))


def test_a_symbol_unification_is_no_crash_outside_strict_mode(monkeypatch, fresh_dynamo):
    """kiln's lowering starts over when an op needs two symbols equal
    (symbolic.Unify: attention over a DynamicCache's keys and values, each
    with its own length). The catch-all for crashing lowerings took that
    restart for a crash outside KILN_STRICT (users' default): the attention
    ran in eager with a 'kiln bug' warning (make demo: 2.3x -> 2.0x)."""
    import torch.nn.functional as F
    monkeypatch.setenv("KILN_STRICT", "0")

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)
    q, k, v = torch.randn(2, 4, 3, 16), torch.randn(2, 4, 9, 16), torch.randn(2, 4, 9, 16)
    torch._dynamo.mark_dynamic(k, 2)
    torch._dynamo.mark_dynamic(v, 2)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with torch.no_grad():
            got = torch.compile(f, backend="kiln")(q, k, v)
    assert not [str(i.message) for i in w if "kiln" in str(i.message)]
    assert dict(fresh_dynamo["kiln"]) == {"graphs": 1, "whole": 1}, dict(fresh_dynamo["kiln"])
    torch.testing.assert_close(got, f(q, k, v), **FP32_TOL)
