"""kiln's two targets (src/hal): "cpu", the fast kernels, and "reference",
the scalar reference kernels beside them. The same compiled model runs on
both and agrees node by node (kiln.compare_targets) on a few models that
cover the kernel families (GEMM with fused epilogues, attention, layer
norm, convolutions with fused batch norm and residuals, channels-last
regions, pooling, fused elementwise chains, softmax, reductions, gathers),
and on what issues 17 and 18 added (a bf16 model's products read from bf16,
int8 weights with int8 activations, int4 weights and quantized embedding
tables, the experts' grouped matmul);
kiln.trace(target="reference") and KILN_TARGET match eager; an unknown
target is refused with its name; and the comparison can fail (it is not
vacuous: with no tolerance, GEMM sums in another order differ)."""

import os
import subprocess
import sys

import pytest
import torch

import kiln
from conftest import FP32_TOL
from test_moe import _Experts  # both weight layouts of transformers' grouped_mm_fallback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.emb = torch.nn.Embedding(50, 32)

    def forward(self, ids, x):
        return self.layer(x + self.emb(ids)).softmax(-1).sum(1)


class _Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1)
        self.c3 = torch.nn.Conv2d(16, 16, 3, padding=1, groups=4)
        self.pool = torch.nn.MaxPool2d(2)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        y = self.pool(torch.relu(self.b1(self.c1(x))))
        y = torch.relu(self.c2(y) + y)
        y = torch.nn.functional.avg_pool2d(self.c3(y) * torch.sigmoid(y), 2)
        return self.fc(y.mean((2, 3)))


class _Elementwise(torch.nn.Module):
    def forward(self, x, y):
        z = torch.where(x > 0, torch.exp(-x * 0.5) + y, torch.tanh(y) * x)
        return (torch.atan2(z, y + 2.0) + 3.5).log1p().cumsum(-1), (z * 3).round().to(torch.int64).argmax(-1)


MODELS = {
    "mlp": lambda: (torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                                        torch.nn.Linear(48, 8), torch.nn.Softmax(-1)),
                    (torch.randn(5, 24),)),
    "encoder": lambda: (_Encoder(), (torch.randint(0, 50, (2, 7)), torch.randn(2, 7, 32))),
    "cnn": lambda: (_Cnn(), (torch.randn(2, 3, 16, 16),)),
    "elementwise": lambda: (_Elementwise(), (torch.randn(4, 33), torch.randn(4, 33))),
}


@pytest.fixture(params=sorted(MODELS))
def traced(request):
    torch.manual_seed(0)
    model, inputs = MODELS[request.param]()
    model.eval()
    with torch.no_grad():
        return request.param, model, inputs, kiln.trace(model, inputs, fallback=False)


def test_cpu_and_reference_agree_node_by_node(traced):
    name, model, inputs, compiled = traced
    assert compiled.target == "cpu"
    with torch.no_grad():
        report = kiln.compare_targets(compiled, *inputs)
    assert len(report.rows) >= 2, report
    assert report.ok, f"{name}:\n{report}"


def test_reference_target_matches_eager(traced):
    name, model, inputs, _ = traced
    with torch.no_grad():
        ref = kiln.trace(model, inputs, fallback=False, target="reference")
        got, want = ref(*inputs), model(*inputs)
    assert ref.target == "reference"
    for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, **FP32_TOL)


def test_the_comparison_can_fail():
    torch.manual_seed(0)
    model, inputs = MODELS["mlp"]()
    with torch.no_grad():
        compiled = kiln.trace(model.eval(), inputs)
        strict = kiln.compare_targets(compiled, *inputs, rtol=0.0, atol=0.0)
    # The fast GEMM sums in another order than the reference's float64
    # accumulator: bit equality does not hold, and the report says where.
    assert not strict.ok and strict.first_off is not None and strict.first_off["op"] == "linear", strict


def test_saved_model_loads_on_either_target(tmp_path):
    torch.manual_seed(0)
    model, inputs = MODELS["cnn"]()
    with torch.no_grad():
        compiled = kiln.trace(model.eval(), inputs)
        path = tmp_path / "m.kiln"
        kiln.save(compiled, path)
        on_ref = kiln.load(path, target="reference")
        assert on_ref.target == "reference"
        torch.testing.assert_close(on_ref(*inputs), compiled(*inputs), **FP32_TOL)


def test_unknown_target_is_refused():
    model, inputs = MODELS["mlp"]()
    with pytest.raises(ValueError, match="no target gpu"):
        kiln.trace(model.eval(), inputs, target="gpu")


def test_kiln_target_environment_variable():
    code = ("import torch, kiln\n"
            "m = torch.nn.Linear(4, 3).eval()\n"
            "x = torch.randn(2, 4)\n"
            "c = kiln.trace(m, x)\n"
            "print(c.target, float((c(x) - m(x)).abs().max()))\n")
    env = dict(os.environ, KILN_TARGET="reference")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    target, err = p.stdout.split()
    assert target == "reference" and float(err) < 1e-5


class _Lm(torch.nn.Module):
    """Embedding, two linears and a head: int8/int4 quantize the table too."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 64)
        self.l1 = torch.nn.Linear(64, 96)
        self.l2 = torch.nn.Linear(96, 64)
        self.head = torch.nn.Linear(64, 40)

    def forward(self, ids):
        return self.head(self.l2(torch.nn.functional.gelu(self.l1(self.emb(ids)))))


@pytest.mark.parametrize("kind", ["int8", "int8:a8", "int4", "int4:g64:asym"])
def test_quantized_weights_agree_on_both_targets(kind):
    # 2 x 7 = 14 rows: int8:a8 takes the blocked int8 x int8 path on the CPU
    # (the GEMV at 8 rows or fewer) and its reference on the reference target.
    torch.manual_seed(0)
    model, ids = _Lm().eval(), torch.randint(-40, 40, (2, 7))
    with torch.no_grad():
        compiled = kiln.trace(model, ids, weights_dtype=kind, fallback=False)
        report = kiln.compare_targets(compiled, ids)
        ref = kiln.trace(model, ids, weights_dtype=kind, fallback=False, target="reference")
        torch.testing.assert_close(ref(ids), compiled(ids), **FP32_TOL)
    ops = [r["op"] for r in report.rows]
    assert "gather" in ops and "linear" in ops, report
    assert report.ok, f"{kind}:\n{report}"


def test_bf16_model_agrees_on_both_targets():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                                torch.nn.Linear(48, 16)).eval().to(torch.bfloat16)
    x = torch.randn(10, 32).to(torch.bfloat16)
    with torch.no_grad():
        compiled = kiln.trace(model, x, fallback=False)
        report = kiln.compare_targets(compiled, x)
        ref = kiln.trace(model, x, fallback=False, target="reference")
        got, want = ref(x), compiled(x)
    assert got.dtype == want.dtype == torch.bfloat16
    # Both round one fp32 result to bf16: at most one bf16 step apart.
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=1e-3)
    assert report.ok, report


def test_grouped_mm_agrees_on_both_targets():
    torch.manual_seed(0)
    model, x, offs = _Experts().eval(), torch.randn(12, 24), torch.tensor([3, 3, 8, 12], dtype=torch.int32)
    with torch.no_grad():
        compiled = kiln.trace(model, (x, offs), fallback=False)
        report = kiln.compare_targets(compiled, x, offs)
        ref = kiln.trace(model, (x, offs), fallback=False, target="reference")
        torch.testing.assert_close(ref(x, offs), model(x, offs), rtol=1e-5, atol=1e-4)
    assert [r["op"] for r in report.rows].count("grouped_mm") == 2, report
    assert report.ok, report
