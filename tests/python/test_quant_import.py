"""Checkpoints quantized the PyTorch way (issue 18, item 3): a model whose
weights are stored as integers and dequantized in forward by torch's
quantized_decomposed ops (dequantize_per_channel, _per_channel_group,
_per_tensor), traced with no weights_dtype, runs its linear layers on
kiln's int8 / int4 kernels with the checkpoint's own integers and scales
(python/kiln/optable/quant.py, src/kernels/gemm/kiln_gemm_quant_import.c).

The reference is eager: the same module, dequantize then F.linear, in
fp32. kiln's blob holds exactly the checkpoint's integers (shifted by
whole zero points), so each dequantized weight is torch's bit for bit and
only fp32 summation order separates the two (the int8 GEMV sums a * q and
scales once; int4 applies the zero point once per group through A's group
sums): with K = 256 terms of ~1 x ~0.01 that is ~1e-6, so rtol = atol =
1e-4. Re-quantizing the fp32 weights instead moves some integer by one,
an output by a scale times an input (>= 1e-3 here), which the test would
see; `assert_checkpoint_integers` also compares the packed integers with
the checkpoint's directly through the reference target.

The native path is asserted through kiln.explain: each linear's weight
shows "[int8: the checkpoint's integers and scales]" (or int4); a
checkpoint kiln's blobs cannot hold exactly shows "[fp32: <why>]" and still
matches eager (dequantized at compile time); a dequantize kiln cannot hold
at all (along the input axis) runs in eager with the reason in explain.
"""

import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)
import torch.nn.functional as F
from torch import nn

import kiln

qd = torch.ops.quantized_decomposed
TOL = dict(rtol=1e-4, atol=1e-4)
NATIVE8 = "[int8: the checkpoint's integers and scales]"
NATIVE4 = "[int4: the checkpoint's integers and scales]"


def int8_checkpoint(w, qmin=-128, qmax=127, zero=None):
    """Per-output-channel integers of w (N, K), its scales and zero points,
    as a checkpoint would hold them (torch.ao's symmetric rule, and an
    extreme of each row pushed to qmin so -128 occurs)."""
    s = w.abs().amax(1) / 127
    q = torch.round(w / s[:, None]).clamp(-127, 127)
    q[:, 0] = qmin if qmin >= -128 else q[:, 0]
    z = torch.zeros(w.shape[0], dtype=torch.int64) if zero is None else zero
    q = (q + z[:, None]).clamp(qmin, qmax)
    return q.to(torch.uint8 if qmin >= 0 else torch.int8), s, z


class QLinear(nn.Module):
    """nn.Linear with its weight stored as a checkpoint's integers:
    dequantize_per_channel (axis 0, or `axis`) then F.linear."""

    def __init__(self, q, s, z, bias, qmin=-128, qmax=127, axis=0):
        super().__init__()
        self.register_buffer("wq", q)
        self.register_buffer("scales", s)
        self.register_buffer("zeros", z) if z is not None else setattr(self, "zeros", None)
        self.bias = nn.Parameter(bias)
        self.qmin, self.qmax, self.axis = qmin, qmax, axis

    def forward(self, x):
        w = qd.dequantize_per_channel(self.wq, self.scales, self.zeros, self.axis, self.qmin, self.qmax,
                                      self.wq.dtype)
        return F.linear(x, w, self.bias)


class QGroupLinear(nn.Module):
    """The same with group-wise scales (int4-range integers held in int8 or
    uint8): dequantize_per_channel_group then F.linear, no bias."""

    def __init__(self, q, s, z, group, qmin, qmax):
        super().__init__()
        self.register_buffer("wq", q)
        self.register_buffer("scales", s)
        self.register_buffer("zeros", z) if z is not None else setattr(self, "zeros", None)
        self.group, self.qmin, self.qmax = group, qmin, qmax

    def forward(self, x):
        w = qd.dequantize_per_channel_group(self.wq, self.scales, self.zeros, self.qmin, self.qmax,
                                            self.wq.dtype, self.group, torch.float32)
        return F.linear(x, w)


class TwoLayers(nn.Module):
    def __init__(self, first, second):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x):
        return self.second(F.relu(self.first(x)))


def int8_model(k=256, h=96, n=40, kind="sym", seed=0):
    g = torch.Generator().manual_seed(seed)
    layers = []
    for din, dout in ((k, h), (h, n)):
        w, b = torch.randn(dout, din, generator=g), torch.randn(dout, generator=g)
        if kind == "sym":
            layers.append(QLinear(*int8_checkpoint(w), b))
        elif kind == "none":  # no zero points at all
            q, s, _ = int8_checkpoint(w)
            layers.append(QLinear(q, s, None, b))
        elif kind == "uint8":  # PT2E's affine uint8: zero point 128
            q, s, z = int8_checkpoint(w, 0, 255, torch.full((dout,), 128, dtype=torch.int64))
            layers.append(QLinear(q, s, z, b, 0, 255))
        elif kind == "shifted":  # zero points pushing q - z out of int8's range
            z = torch.full((dout,), 20, dtype=torch.int64)
            q = torch.randint(-128, 128, (dout, din), generator=g).to(torch.int8)
            layers.append(QLinear(q, w.abs().amax(1) / 127, z, b))
    return TwoLayers(*layers).eval()


def int4_model(k=256, h=96, n=40, group=32, asym=False, seed=0, qlo=None, qhi=None):
    g = torch.Generator().manual_seed(seed)
    layers = []
    for din, dout in ((k, h), (h if group <= h else k, n)):
        ng = din // group
        s = torch.rand(dout, ng, generator=g) * 0.02 + 0.005
        if asym:  # uint8 in [0, 15] with zero points around 8: q - z spans past int4's [-8, 7]
            q = torch.randint(0, 16, (dout, din), generator=g).to(torch.uint8)
            z = torch.randint(4, 12, (dout, ng), generator=g).to(torch.int32)
            lo, hi = 0, 15
        else:
            lo, hi = (-8, 7) if qlo is None else (qlo, qhi)
            q = torch.randint(lo, hi + 1, (dout, din), generator=g).to(torch.int8)
            z = None
        layers.append(QGroupLinear(q, s, z, group, lo, hi))
    if group > h:
        return layers[0].eval()
    return TwoLayers(*layers).eval()


def explained(compiled):
    return compiled.explain()


@pytest.mark.parametrize("rows", [1, 3, 17])
@pytest.mark.parametrize("kind", ["sym", "none", "uint8"])
def test_int8_checkpoint_runs_native(rows, kind):
    torch.manual_seed(rows)
    model = int8_model(kind=kind)
    x = torch.randn(rows, 256)
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    got = compiled(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, **TOL)
    text = explained(compiled)
    assert text.count(NATIVE8) == 2, text
    assert "dequantize" not in text, text  # no eager piece


@pytest.mark.parametrize("rows", [1, 9])
@pytest.mark.parametrize("group,asym", [(32, False), (128, False), (32, True), (128, True)])
def test_int4_group_checkpoint_runs_native(rows, group, asym):
    torch.manual_seed(rows)
    model = int4_model(group=group, asym=asym)
    x = torch.randn(rows, 256)
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, **TOL)
    text = explained(compiled)
    assert text.count(NATIVE4) == (2 if group <= 96 else 1), text


@pytest.mark.parametrize("rows", [1, 9])
def test_int4_range_per_channel_checkpoint_runs_on_int4(rows):
    """PT2E's 4-bit per-channel weights (dequantize_per_channel with
    quant_min -8, quant_max 7: one scale per row, int4-range integers) are
    held as int4 with the row as its one group, half int8's bytes, torch's
    values exactly; a K that is no multiple of 32 (the second layer's 96 is,
    so the first has K 200 here) stays int8."""
    g = torch.Generator().manual_seed(rows)
    layers = []
    for din, dout in ((200, 96), (96, 40)):
        w, b = torch.randn(dout, din, generator=g), torch.randn(dout, generator=g)
        s = w.abs().amax(1) / 7
        q = torch.round(w / s[:, None]).clamp(-8, 7).to(torch.int8)
        layers.append(QLinear(q, s, None, b, -8, 7))
    model = TwoLayers(*layers).eval()
    x = torch.randn(rows, 200)
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, **TOL)
    text = explained(compiled)
    assert text.count(NATIVE4) == 1 and text.count(NATIVE8) == 1, text


@pytest.mark.parametrize("rows", [1, 5, 9, 40])
@pytest.mark.parametrize("kind", ["int8", "int4"])
def test_checkpoint_weights_take_int8_activations(rows, kind):
    """weights_dtype="int8:a8" / "int4:a8" on a checkpoint's weights: the
    checkpoint's own integers (not quantized again) and int8 activations by
    the a8 rule of kiln_gemm.h, per row (an int8 blob) or per row and group
    (an int4 blob's, here 32), at decode's and a prompt's row counts. The
    reference is eager's linear on the quantized input and torch's
    dequantized weight: only fp32 summation order separates them."""
    from test_quant_weights import quantize_rows_groups_int8, quantize_rows_int8

    torch.manual_seed(rows)
    if kind == "int8":
        g = torch.Generator().manual_seed(3)
        w, b = torch.randn(40, 256, generator=g), torch.randn(40, generator=g)
        layer = QLinear(*int8_checkpoint(w), b).eval()
    else:
        layer = int4_model(group=32).first
    x = torch.randn(rows, 256)
    compiled = kiln.trace(layer, x, weights_dtype=f"{kind}:a8")
    got = compiled(x)
    with torch.no_grad():
        wd = layer.forward.__self__  # the layer's own dequantize, torch's values
        if kind == "int8":
            xin = quantize_rows_int8(x)
            xin = xin[0] * xin[1]
        else:
            xin = quantize_rows_groups_int8(x, 32)
        want = wd(xin)
        weight_only = wd(x)
    torch.testing.assert_close(got, want, **TOL)
    assert (got - weight_only).abs().max() > 1e-4  # the activations really were quantized
    text = explained(compiled)
    assert f"[{kind}, int8 activations: the checkpoint's integers and scales]" in text, text


def test_packed_integers_are_the_checkpoints():
    """Through the reference target (the scalar rule reading each packed
    weight), a one-hot input row picks one column of W: kiln's weight must
    be torch's dequantized value exactly, for int8 (with -128) and both
    int4 forms."""
    for model in (int8_model(kind="sym").first, int8_model(kind="uint8").first,
                  int4_model(group=32).first, int4_model(group=32, asym=True).first):
        k = model.wq.shape[1]
        eye = torch.eye(k)
        compiled = kiln.trace(model, eye, target="reference")
        with torch.no_grad():
            want = model(eye) - (model.bias if hasattr(model, "bias") else 0)
            got = compiled(eye) - (model.bias if hasattr(model, "bias") else 0)
        assert "checkpoint's integers" in compiled.explain()
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_per_tensor_checkpoint_runs_native():
    class PerTensor(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("wq", torch.randint(-100, 100, (48, 64), dtype=torch.int8))

        def forward(self, x):
            return F.linear(x, qd.dequantize_per_tensor(self.wq, 0.0123, 3, -128, 127, torch.int8))

    model = PerTensor().eval()
    x = torch.randn(2, 64)
    compiled = kiln.trace(model, x)
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    assert NATIVE8 in compiled.explain()


@pytest.mark.parametrize("case,why", [
    ("shifted", "[fp32: integers minus zero points outside int8's range -128..127]"),
    ("group16", "[fp32: scales per group of a size kiln's int4 lacks"),
    ("group_int8", "[fp32: a group's integers spanning more than int4's 16 values"),
])
def test_unmappable_checkpoint_is_dequantized_and_explained(case, why):
    """A checkpoint no kiln blob holds exactly (int8 zero points that push
    q - z out of int8's range; groups of 16; int8-range integers with
    group-wise scales) is dequantized at compile time: still eager's
    result, and kiln.explain says why it is not run quantized."""
    if case == "shifted":
        model = int8_model(kind="shifted")
    elif case == "group16":
        model = int4_model(group=16)
    else:
        model = int4_model(group=32, qlo=-128, qhi=127)
    x = torch.randn(3, 256)
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, **TOL)
    text = compiled.explain()
    assert why in text, text
    assert "the checkpoint's integers" not in text, text


def test_dequantize_along_input_axis_falls_back_and_explains():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(40, 64, generator=g)
    s = w.abs().amax(0) / 127
    q = torch.round(w / s).clamp(-127, 127).to(torch.int8)
    model = QLinear(q, s, torch.zeros(64, dtype=torch.int64), torch.randn(40, generator=g), axis=1).eval()
    x = torch.randn(2, 64)
    with pytest.warns(UserWarning, match="dequantize_per_channel"):
        compiled = kiln.trace(model, x)
    torch.testing.assert_close(compiled(x), model(x), **TOL)
    text = compiled.explain()
    assert "dequantize_per_channel along axis 1" in text and "axis 0" in text, text


def test_dequantized_activation_falls_back():
    """PT2E's pattern on activations (dequantize of a value computed per
    call) stays in eager: only constant weights are held quantized."""

    class Act(nn.Module):
        def forward(self, x):
            q = qd.quantize_per_tensor(x, 0.05, 0, -128, 127, torch.int8)
            return qd.dequantize_per_tensor(q, 0.05, 0, -128, 127, torch.int8) * 2

    x = torch.randn(4, 8)
    with pytest.warns(UserWarning):
        compiled = kiln.trace(Act(), x)
    torch.testing.assert_close(compiled(x), Act()(x), rtol=0, atol=0)


def test_quantized_embedding_runs_native():
    """Bonus: an embedding table stored as int8 rows (dequantize_per_channel
    along the vocabulary) gathers from the int8 blob."""

    class QEmbed(nn.Module):
        def __init__(self):
            super().__init__()
            q, s, z = int8_checkpoint(torch.randn(100, 48))
            self.register_buffer("tq", q)
            self.register_buffer("ts", s)
            self.register_buffer("tz", z)

        def forward(self, idx):
            t = qd.dequantize_per_channel(self.tq, self.ts, self.tz, 0, -128, 127, torch.int8)
            return F.embedding(idx, t)

    model = QEmbed().eval()
    idx = torch.tensor([[0, 5, 99, 42]])
    compiled = kiln.trace(model, idx)
    torch.testing.assert_close(compiled(idx), model(idx), rtol=0, atol=0)
    assert NATIVE8 in compiled.explain()


def test_artifact_round_trip_keeps_native_form(tmp_path):
    torch.manual_seed(0)
    for model in (int8_model(kind="uint8"), int4_model(group=32, asym=True)):
        x = torch.randn(1, 256)
        compiled = kiln.trace(model, x)
        path = tmp_path / "q.kiln"
        kiln.save(compiled, path)
        loaded = kiln.load(path)
        assert torch.equal(loaded(x), compiled(x))  # the same packed bytes, the same kernels
        text = loaded.explain()
        tag = "[int8]" if isinstance(model.first, QLinear) else "[int4]"
        assert text.count(tag) == 2, text  # the note is the compiler's; the form is in the file
        with torch.no_grad():
            torch.testing.assert_close(loaded(x), model(x), **TOL)


def test_torch_compile_runs_native(monkeypatch, capfd):
    import torch._dynamo

    torch._dynamo.reset()
    monkeypatch.setenv("KILN_LOG", "1")
    model = int8_model(kind="sym")
    x = torch.randn(1, 256)
    with torch.no_grad():
        got = torch.compile(model, backend="kiln")(x)
        want = model(x)
    torch.testing.assert_close(got, want, **TOL)
    err = capfd.readouterr().err
    assert err.count(": the checkpoint's integers and scales") == 2, err
    torch._dynamo.reset()


class TorchaoStyleLinear(nn.Module):
    """What torchao's Int8WeightOnlyConfig (0.18, a tensor subclass) exports
    to: mm(x, q.t().to(float32)) * scale + bias, scale per output channel
    applied after the matmul."""

    def __init__(self, q, s, bias):
        super().__init__()
        self.register_buffer("wq", q)
        self.register_buffer("scale", s)
        self.bias = nn.Parameter(bias)

    def forward(self, x):
        return (x @ self.wq.t().to(torch.float32)) * self.scale + self.bias


@pytest.mark.parametrize("rows", [1, 12])
def test_int8_weight_cast_then_scale_runs_native(rows):
    """The cast of a transposed int8 weight read only by a matmul is held as
    its integers with unit scales (kiln_pass_fold.c): the linear runs on the
    int8 kernels and the scale stays the multiply after it, as in eager."""
    g = torch.Generator().manual_seed(rows)
    q, s, _ = int8_checkpoint(torch.randn(96, 256, generator=g))
    model = TwoLayers(TorchaoStyleLinear(q, s, torch.randn(96, generator=g)),
                      TorchaoStyleLinear(*int8_checkpoint(torch.randn(40, 96, generator=g))[:2],
                                         torch.randn(40, generator=g))).eval()
    x = torch.randn(rows, 256)
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, **TOL)
    assert compiled.explain().count(NATIVE8) == 2, compiled.explain()


def test_torchao_int8_weight_only_runs_native():
    """torchao itself, where installed (not a kiln dependency)."""
    torchao_quant = pytest.importorskip("torchao.quantization")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 96), nn.ReLU(), nn.Linear(96, 40)).eval()
    torchao_quant.quantize_(model, torchao_quant.Int8WeightOnlyConfig())
    x = torch.randn(1, 256)
    compiled = kiln.trace(model, x)
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(compiled(x), want, **TOL)
    assert compiled.explain().count(NATIVE8) == 2, compiled.explain()
