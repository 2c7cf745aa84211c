"""Whole models at every ISA level this machine has, as the C tests run each
kernel at every level.

kiln's kernels pick their instruction set when they are called: every
dispatch in src/kernels reads kiln_cpu_isa() on each call, and nothing the
compiler stores (the plan, the pre-packed weights: one layout for every ISA,
kernels/gemm/kiln_gemm.h) depends on it. So kiln.isa(level) caps a model
that is already compiled from its next call on, and KILN_ISA in the
environment sets the level kiln starts at. kiln.isa caps at what the CPU
has, so a level is asked for and then checked (conftest.isa_levels): a level
this CPU lacks, or one above the KILN_ISA cap, is skipped with the reason,
never counted as a pass. The isa_level fixture restores the level the test
started at, also when it fails.

Each model runs at the capped level and is compared with the same model in
float64 eager (not float32 eager, whose GEMM summation order and
transcendental functions depend on the CPU torch runs on): rtol = atol =
2e-5. Measured on an AVX-512 Xeon, kiln's largest absolute error against
float64 is 1.4e-6 for the seed block (K = 768, outputs up to 2.4), 3.2e-7
for the encoder layer and 4.5e-8 for the CNN at every level, as is eager
float32's (1.5e-6, 3.1e-7, 2.3e-8): the tolerance is 15x the worst, and a
kernel that mishandles a tail, a panel or a vector width is off by far more.
At one level the results do not depend on the thread count (1 to 8 threads
give the same bits for these models: each output is summed in one order by
one task), so the margin holds on machines with more cores.
"""
import copy
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import isa_params
from kiln.module import KilnModule

LEVELS = isa_params()
TOL = dict(rtol=2e-5, atol=2e-5)  # against float64: see the docstring


def f64_eager(model, *x):
    """The model's outputs in float64 eager (a float64 copy of its weights)."""
    m64 = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        return m64(*[t.double() for t in x])


def check_at_level(compiled, model, level, *x):
    """compiled(*x) at the current cap against float64 eager; the plan says
    it runs at `level`."""
    assert f"ISA {level}," in compiled.explain().splitlines()[-1], compiled.explain()
    got = compiled(*x)
    want = f64_eager(model, *x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, **TOL)
    return got


class SeedBlock(nn.Module):
    """The seed block of examples/seed_block.py: Linear(768, 768) + GELU, one
    fused GEMM (its epilogue computes the GELU)."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(768, 768)
        self.activation = nn.GELU()

    def forward(self, x):
        return self.activation(self.linear(x))


class SmallCNN(nn.Module):
    """conv + batch norm + relu + max pool, a strided conv, a depthwise conv,
    average pooling and a linear head: the conv kernels (pixel- and
    channel-vector, depthwise planes), the pools and the GEMM."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(32)
        self.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.fc = nn.Linear(32 * 2 * 2, 10)  # 17 -> pool 8 -> stride 2: 4 -> pool 2
        with torch.no_grad():  # non-trivial running statistics to fold
            for bn in (self.bn1, self.bn2):
                bn.running_mean.uniform_(-0.5, 0.5)
                bn.running_var.uniform_(0.5, 2.0)
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.bn2(self.conv2(x)))
        x = F.avg_pool2d(torch.relu(self.dw(x)), 2)
        return self.fc(x.flatten(1))


def _encoder_layer():
    return nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=160, dropout=0.0,
                                      activation="gelu", batch_first=True, norm_first=True)


MODELS = {
    # (make the model, make its input); inputs keep odd sizes so every
    # kernel has a tail past its vector width.
    "seed_block": (SeedBlock, lambda: torch.randn(1, 128, 768)),
    "encoder_layer": (_encoder_layer, lambda: torch.randn(2, 13, 64)),
    "cnn": (SmallCNN, lambda: torch.randn(2, 3, 17, 17) * 2),
}


@pytest.mark.parametrize("isa_level", LEVELS, indirect=True)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_at_isa_level(name, isa_level):
    torch.manual_seed(0)
    make, make_x = MODELS[name]
    model, x = make().eval(), make_x()
    compiled = kiln.trace(model, (x,), fallback=False)
    check_at_level(compiled, model, isa_level, x)


@pytest.fixture(scope="module")
def compiled_once():
    """The seed block compiled once, at the level the session started at."""
    torch.manual_seed(0)
    model = SeedBlock().eval()
    x = torch.randn(1, 37, 768)
    return model, kiln.trace(model, (x,), fallback=False), x


@pytest.mark.parametrize("isa_level", LEVELS, indirect=True)
def test_cap_applies_to_an_already_compiled_model(compiled_once, isa_level):
    # The cap is read at call time: a model compiled at another level runs
    # at this one (and the plan says so).
    model, compiled, x = compiled_once
    check_at_level(compiled, model, isa_level, x)


def _train(model, batches):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class TrainCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


@pytest.mark.parametrize("isa_level", LEVELS, indirect=True)
def test_training_steps_at_isa_level(isa_level, monkeypatch):
    """Two SGD steps of a CNN with batch norm in training mode through
    torch.compile(backend="kiln"), forward and backward in kiln, against the
    same steps in float64 eager: losses, parameters and running statistics
    within rtol 1e-4 / atol 1e-5 (test_training_cnn.py's: reductions in
    another order, compounded by momentum)."""
    calls = [0]
    run_flat = KilnModule.run_flat

    def counted(self, args, *rest):
        calls[0] += 1
        return run_flat(self, args, *rest)

    monkeypatch.setattr(KilnModule, "run_flat", counted)
    torch.manual_seed(0)
    model = TrainCNN().train()
    ref = copy.deepcopy(model).double()
    batches = [(torch.randn(4, 3, 12, 12), torch.randint(0, 10, (4,))) for _ in range(2)]
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = _train(torch.compile(model, backend="kiln"), batches)
    assert not [str(m.message) for m in w if "kiln" in str(m.message)]  # no CPU fallback
    assert calls[0] >= 4, "forward and backward ran in kiln each step"
    assert kiln.isa() == isa_level
    want = _train(ref, [(x.double(), y) for x, y in batches])
    torch.testing.assert_close(torch.tensor(got, dtype=torch.float64), torch.tensor(want, dtype=torch.float64),
                               rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.double(), q, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")
    for (name, b), r in zip(model.named_buffers(), ref.buffers()):
        if b.dtype == torch.int64:
            assert b.item() == r.item() == len(batches), name
        else:
            torch.testing.assert_close(b.double(), r, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("isa_level", LEVELS, indirect=True)
def test_kiln_isa_environment_sets_the_starting_level(isa_level):
    # KILN_ISA=<level> in a fresh process: kiln starts there, and a compiled
    # model runs (and says it runs) there.
    code = ("import torch, kiln\n"
            "m = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.GELU()).eval()\n"
            "x = torch.randn(5, 40)\n"
            "k = kiln.trace(m, (x,))\n"
            "with torch.no_grad():\n"
            "    torch.testing.assert_close(k(x).double(), m.double()(x.double()), rtol=1e-4, atol=1e-4)\n"
            "print(kiln.isa(), k.explain().splitlines()[-1])\n")
    env = {**os.environ, "KILN_ISA": isa_level}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    level, plan = p.stdout.strip().splitlines()[-1].split(" ", 1)
    assert level == isa_level and f"ISA {isa_level}," in plan, p.stdout


def _kiln_isa_run(value, code):
    env = {**os.environ, "KILN_ISA": value}
    p = subprocess.run([sys.executable, "-c", "import kiln\n" + code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p


def test_kiln_isa_is_a_hard_cap():
    # Under KILN_ISA=generic nothing set later raises the level: not
    # kiln.isa('avx512'), not the bf16 engines.
    p = _kiln_isa_run("generic", "print(kiln.isa('avx512'), kiln.isa('avx2'), kiln._C.bf16_engine('amx'))")
    assert p.stdout.split() == ["generic", "generic", "none"], p.stdout


def test_unknown_isa_names_are_refused():
    with pytest.raises(ValueError, match="not an ISA level"):
        kiln.isa("AVX2")
    with pytest.raises(ValueError, match="not amx"):
        kiln._C.bf16_engine("tiles")
    # In the environment: a warning at import, and no cap.
    p = _kiln_isa_run("avx9", "print(kiln.isa())")
    assert "KILN_ISA='avx9' is not one of" in p.stderr, p.stderr
