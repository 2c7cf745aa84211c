"""Gated-linear-unit fusion (kiln_pass_fuse_glu): the gate and up projections
of a SwiGLU / GeGLU MLP run as one GEMM over their concatenated weights, and
one fused kernel reads its two halves. Checked against eager in float64, with
quantized weights against the same compile without the fusion (KILN_GLU=off),
through a .kiln file, with symbolic sizes, and where the pattern must not
fire."""
import struct

import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import f64_reference, ulps


class GatedMLP(torch.nn.Module):
    def __init__(self, hidden=64, inter=96, act=F.silu, gate_first=True, bias=False):
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden, inter, bias=bias)
        self.up_proj = torch.nn.Linear(hidden, inter, bias=bias)
        self.down_proj = torch.nn.Linear(inter, hidden, bias=False)
        self.act, self.gate_first = act, gate_first

    def forward(self, x):
        g, u = self.act(self.gate_proj(x)), self.up_proj(x)
        return self.down_proj(g * u if self.gate_first else u * g)


def _mlp(**kw):
    torch.manual_seed(0)
    return GatedMLP(**kw).eval()


def _check_f64(compiled, model, x):
    want = f64_reference(model.double(), x)[0].float()
    model.float()
    # Three GEMM / fused levels of float32 rounding over K = 64 and 96.
    torch.testing.assert_close(compiled(x), want, **ulps(512, atol=1e-5))


@pytest.mark.parametrize("act", [F.silu, F.gelu, torch.sigmoid])
@pytest.mark.parametrize("gate_first", [True, False])
def test_gated_mlp_is_one_gemm_and_one_fused_kernel(act, gate_first):
    model = _mlp(act=act, gate_first=gate_first)
    x = torch.randn(2, 5, 64)
    compiled = kiln.trace(model, (x,), fallback=False)
    text = compiled.explain()
    # GEMM over [Wg | Wu] (N = 192), the fused act * mul, the down GEMM.
    assert compiled.stats()["kernel_calls"] == 3, text
    assert "-> (2, 5, 192)" in text and text.count("eltwise_fused") == 1, text
    _check_f64(compiled, model, x)


def test_off_switch_keeps_the_pairs_apart(monkeypatch):
    monkeypatch.setenv("KILN_GLU", "off")
    model = _mlp()
    x = torch.randn(3, 64)
    compiled = kiln.trace(model, (x,), fallback=False)
    assert compiled.stats()["kernel_calls"] == 4, compiled.explain()
    _check_f64(compiled, model, x)


@pytest.mark.parametrize("weights", [torch.int8, "int4", "int4:a8"])
def test_quantized_weights_equal_the_unfused_pairs(weights, monkeypatch):
    """Quantization is per output column (int8) or per column group along K
    (int4): concatenating along N quantizes each weight exactly as alone, and
    the fused GEMM computes each column as the separate ones do."""
    model = _mlp(hidden=128, inter=160)
    x = torch.randn(1, 4, 128)
    fused = kiln.trace(model, (x,), fallback=False, weights_dtype=weights)
    monkeypatch.setenv("KILN_GLU", "off")
    apart = kiln.trace(model, (x,), fallback=False, weights_dtype=weights)
    assert fused.stats()["kernel_calls"] == 3 and apart.stats()["kernel_calls"] == 4
    # The activation is applied by the fused kernel instead of the GEMM's
    # epilogue: the two silu implementations may differ in the last bits.
    torch.testing.assert_close(fused(x), apart(x), **ulps(64, atol=1e-6))


def test_through_a_kiln_file(tmp_path):
    model = _mlp()
    x = torch.randn(4, 64)
    compiled = kiln.trace(model, (x,), fallback=False)
    path = tmp_path / "mlp.kiln"
    kiln.save(compiled, path)
    data = path.read_bytes()
    # Format 2.13: a program loading halves (an older reader refuses it).
    assert struct.unpack_from("<H", data, 6)[0] == 13
    loaded = kiln.load(path)
    assert loaded.stats()["kernel_calls"] == 3
    torch.testing.assert_close(loaded(x), compiled(x), rtol=0, atol=0)


def test_symbolic_rows():
    model = _mlp()
    compiled = torch.compile(model, backend="kiln", dynamic=True)
    with torch.no_grad():
        for rows in (1, 3, 8):
            x = torch.randn(1, rows, 64)
            _check_f64(compiled, model, x)


class NotGated(torch.nn.Module):
    """Shapes and uses the pass must leave alone."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.a = torch.nn.Linear(32, 48, bias=False)
        self.b = torch.nn.Linear(32, 48 if kind != "sizes" else 24, bias=False)
        self.c = torch.nn.Linear(32, 48, bias=False)

    def forward(self, x, y):
        if self.kind == "two_inputs":   # the GEMMs read different x
            return F.silu(self.a(x)) * self.c(y)
        if self.kind == "reused":       # the up projection is read twice
            u = self.c(x)
            return F.silu(self.a(x)) * u + u
        if self.kind == "no_act":       # a plain product of two projections
            return self.a(x) * self.c(x)
        return F.silu(self.a(x))[..., :24] * self.b(x)  # "sizes": different N


@pytest.mark.parametrize("kind", ["two_inputs", "reused", "no_act", "sizes"])
def test_patterns_that_are_not_gated_pairs(kind):
    torch.manual_seed(1)
    model = NotGated(kind).eval()
    x, y = torch.randn(3, 32), torch.randn(3, 32)
    compiled = kiln.trace(model, (x, y), fallback=False)
    text = compiled.explain()
    assert "-> (3, 96)" not in text and "-> (3, 72)" not in text, text
    want = f64_reference(model.double(), x, y)[0].float()
    model.float()
    torch.testing.assert_close(compiled(x, y), want, **ulps(512, atol=1e-5))
