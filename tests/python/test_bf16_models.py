"""Models already in bf16 (or fp16): model.to(torch.bfloat16) with bf16
inputs through kiln.trace and torch.compile, and models traced or compiled
under torch.autocast("cpu", dtype=torch.bfloat16), run natively (no eager
fallback; kiln/lowp.py says how).

The reference is float64: the same module with the same (bf16-valued)
parameters and inputs, evaluated in float64. Eager bf16 rounds every op's
output to bf16; kiln keeps intermediates in fp32 and rounds where a bf16
tensor is read (outputs, a matrix product's first operand, explicit casts).
So kiln's error is eager's kind of error or smaller, and the rule is

    max |kiln - ref| <= max |eager - ref| + u * max |ref|

per output, with u the unit roundoff of the dtype (2^-8 for bf16, 2^-11
for fp16): kiln may round an output one way where eager, from its own
rounded intermediates, went the other. A kiln that computed an op wrongly,
lost a rounding's worth on every op, or ran the wrong weights would exceed
it (the planted check below shows the bound has room for nothing more).
Under autocast the reference is the fp32 model in float64 (autocast decides
which ops see bf16), with the same rule against eager's autocast result.
"""

import warnings

import pytest
import torch
from torch import nn

import kiln
from conftest import cosine, minilm_encoder_and_batch

U = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def check_rule(got, eager, ref, dtype):
    assert got.dtype == eager.dtype and got.shape == eager.shape
    err_k = (got.double() - ref).abs().max().item()
    err_e = (eager.double() - ref).abs().max().item()
    bound = err_e + U[dtype] * ref.abs().max().item()
    assert err_k <= bound, f"kiln error {err_k:.3g} > eager's {err_e:.3g} + one rounding ({bound:.3g})"
    return err_k, err_e


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


class Mlp(nn.Module):
    """Linear + bias + gelu + residual, layer norm, softmax."""

    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(64, 160), nn.Linear(160, 64)
        self.ln = nn.LayerNorm(64)
        self.head = nn.Linear(64, 24, bias=False)

    def forward(self, x):
        h = self.ln(x + self.down(nn.functional.gelu(self.up(x))))
        return torch.softmax(self.head(h), -1), h.mean(-1)


class Attention(nn.Module):
    """Decomposed attention (bmm, scale, softmax, bmm), fused SDPA, rms_norm,
    a reduction, silu."""

    def forward(self, q, k, v):
        a = torch.softmax(q @ k.transpose(-1, -2) / 8, -1) @ v
        s = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return a + s, nn.functional.silu(a).sum(-1), nn.functional.rms_norm(s, (64,), eps=1e-6)


class Cnn(nn.Module):
    """conv + batch norm + relu, max pool, strided conv, global mean, linear."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.Conv2d(16, 8, 3, stride=2)
        self.fc = nn.Linear(8, 10)
        self.bn.running_mean.uniform_(-0.2, 0.2)
        self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        h = nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        return self.fc(self.c2(h).mean((2, 3)))


class Vgg(nn.Module):
    """Conv + bias + relu chains and max pools, no batch norm: one channels-
    last region whose convs read bf16 x and hold bf16 weights, so on a CPU
    with a bf16 engine they run on it (CONV2D's ROUND_X)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1)
        self.c3, self.c4 = nn.Conv2d(32, 32, 3, padding=1), nn.Conv2d(32, 16, 1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        h = nn.functional.max_pool2d(torch.relu(self.c2(torch.relu(self.c1(x)))), 2)
        h = self.c4(torch.relu(self.c3(h)) + h)
        return self.fc(h.mean((2, 3)))


class Res(nn.Module):
    """A ResNet block with its batch norms (running statistics off 0 and 1):
    each conv's folded norm becomes its scale input, the weight stays bf16."""

    def __init__(self):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c1, self.bn1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c2, self.bn2 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32)
        self.down, self.bnd = nn.Conv2d(16, 32, 1, stride=2, bias=False), nn.BatchNorm2d(32)
        for bn in (self.bn0, self.bn1, self.bn2, self.bnd):
            bn.running_mean.uniform_(-0.3, 0.3)
            bn.running_var.uniform_(0.3, 2.0)
            bn.weight.data.uniform_(0.5, 1.5)
            bn.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        h = torch.relu(self.bn0(self.stem(x)))
        h = torch.relu(self.bn1(self.c1(h)) + h)
        return torch.relu(self.bn2(self.c2(h)) + self.bnd(self.down(h)))


class Unet(nn.Module):
    """A UNet block: group norm and SiLU between the convs, a 1x1 skip conv:
    no two convs meet, so each bf16-engine conv is its own channels-last
    region (it gains more than its two layout conversions cost)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Conv2d(3, 16, 3, padding=1)
        self.n1, self.c1 = nn.GroupNorm(4, 16), nn.Conv2d(16, 32, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(4, 32), nn.Conv2d(32, 32, 3, padding=1)
        self.skip = nn.Conv2d(16, 32, 1)

    def forward(self, x):
        h = self.inp(x)
        y = self.c1(nn.functional.silu(self.n1(h)))
        y = self.c2(nn.functional.silu(self.n2(y)))
        return y + self.skip(h)


class Embed(nn.Module):
    """Embedding (a gather of bf16 rows), position add, layer norm, tied head."""

    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(100, 48), nn.Parameter(torch.randn(16, 48) * 0.1)
        self.ln = nn.LayerNorm(48)

    def forward(self, ids):
        h = self.ln(self.tok(ids) + self.pos)
        return h @ self.tok.weight.T


def cases():
    torch.manual_seed(0)
    return {
        "mlp": (Mlp, lambda: (torch.randn(3, 10, 64),)),
        "attention": (lambda: Attention(), lambda: tuple(torch.randn(2, 4, 16, 64) for _ in range(3))),
        "cnn": (Cnn, lambda: (torch.randn(2, 3, 20, 20),)),
        "vgg": (Vgg, lambda: (torch.randn(2, 3, 18, 18),)),
        "unet": (Unet, lambda: (torch.randn(1, 3, 12, 12),)),
        "res": (Res, lambda: (torch.randn(2, 3, 14, 14),)),
        "embed": (Embed, lambda: (torch.randint(0, 100, (2, 16)),)),
    }


def build(name, dtype):
    make_model, make_inputs = cases()[name]
    torch.manual_seed(1)
    model = make_model().eval().to(dtype)
    inputs = tuple(x.to(dtype) if x.is_floating_point() else x for x in make_inputs())
    ref_model = make_model().eval()
    ref_model.load_state_dict(model.state_dict())
    ref_model = ref_model.double()
    with torch.no_grad():
        eager = as_tuple(model(*inputs))
        ref = as_tuple(ref_model(*(x.double() if x.is_floating_point() else x for x in inputs)))
    return model, inputs, eager, ref


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", ["mlp", "attention", "cnn", "vgg", "unet", "res", "embed"])
def test_trace_low_precision_model(name, dtype):
    model, inputs, eager, ref = build(name, dtype)
    compiled = kiln.trace(model, inputs, fallback=False)  # every op native
    got = as_tuple(compiled(*inputs))
    for g, e, r in zip(got, eager, ref):
        check_rule(g, e, r, dtype)


@pytest.mark.parametrize("name", ["mlp", "attention", "cnn", "vgg", "res"])
def test_torch_compile_bf16_model(name):
    model, inputs, eager, ref = build(name, torch.bfloat16)
    torch._dynamo.reset()
    fn = torch.compile(model, backend="kiln")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # kiln warns when an op falls back to eager
        got = as_tuple(fn(*inputs))
    for g, e, r in zip(got, eager, ref):
        check_rule(g, e, r, torch.bfloat16)


@pytest.mark.parametrize("name", ["mlp", "cnn", "vgg", "unet", "res"])
def test_autocast(name):
    make_model, make_inputs = cases()[name]
    torch.manual_seed(1)
    model = make_model().eval()
    inputs = make_inputs()
    with torch.no_grad():
        ref = as_tuple(model.double()(*(x.double() for x in inputs)))
        model.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            eager = as_tuple(model(*inputs))
            traced = as_tuple(kiln.trace(model, inputs, fallback=False)(*inputs))
            torch._dynamo.reset()
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                compiled = as_tuple(torch.compile(model, backend="kiln")(*inputs))
    for got in (traced, compiled):
        for g, e, r in zip(got, eager, ref):
            check_rule(g, e, r, torch.bfloat16)


def test_rule_has_no_room_for_a_wrong_op():
    """The bound catches one wrong rounding step per output: a result
    perturbed by 2 bf16 ulps fails it where kiln's passes."""
    model, inputs, eager, ref = build("mlp", torch.bfloat16)
    got = as_tuple(kiln.trace(model, inputs)(*inputs))
    check_rule(got[0], eager[0], ref[0], torch.bfloat16)
    bad = (got[0].double() * (1 + 4 * U[torch.bfloat16])).to(torch.bfloat16)
    with pytest.raises(AssertionError):
        check_rule(bad, eager[0], ref[0], torch.bfloat16)


def test_bf16_weights_packed_for_bf16_engines(monkeypatch):
    """A bf16 model's linear weights are read where the model keeps them (by
    default) or packed for the bf16 engines (KILN_BF16_WEIGHTS=packed): its
    inputs and weights are bf16 values already; an fp32 model whose weights
    happen to be bf16 values is neither: its activations stay unrounded, so
    it stays within fp32 error of eager."""
    model, inputs, _, _ = build("mlp", torch.bfloat16)
    in_place = kiln.trace(model, inputs)
    text = kiln.explain(in_place)
    assert "bf16 weights read in place" in text and text.count("[bf16 held]") == 3, text
    monkeypatch.setenv("KILN_BF16_WEIGHTS", "packed")
    packed = kiln.trace(model, inputs)
    monkeypatch.delenv("KILN_BF16_WEIGHTS")
    assert "[bf16 compute]" in kiln.explain(packed)
    with torch.no_grad():
        torch.testing.assert_close(in_place(*inputs)[0].float(), packed(*inputs)[0].float(),
                                   rtol=2e-2, atol=2e-2)
    f32 = Mlp().eval()
    f32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    x = torch.randn(3, 10, 64)
    compiled = kiln.trace(f32, (x,))
    assert "[bf16 compute]" not in kiln.explain(compiled)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x)[0], f32(x)[0], rtol=1e-5, atol=1e-6)


class _Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        out = self.model(ids, use_cache=False)
        return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _tiny_transformer(name):
    import transformers as T
    torch.manual_seed(0)
    if name == "llama":  # gated MLPs, the lm_head: 2 layers of 7 linear weights, and 1
        cfg = T.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
        return _Logits(T.LlamaForCausalLM(cfg)), 15
    # fused q/k/v with biases: 2 layers of 6 linear weights
    cfg = T.BertConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, vocab_size=128, attn_implementation="sdpa")
    return _Logits(T.BertModel(cfg, add_pooling_layer=False)), 12


@pytest.mark.parametrize(
    "options", [{}, {"compute_dtype": torch.bfloat16}, {"weights_dtype": torch.int8},
                {"weights_dtype": "int4"}], ids=["plain", "compute_bf16", "int8", "int4"])
@pytest.mark.parametrize("name", ["llama", "bert"])
def test_bf16_weights_are_packed_from_their_own_bytes(name, options, monkeypatch, capfd):
    """Constant folding keeps a bf16 model's linear weights as their bf16
    bytes (no float32 copy of the model while it compiles) and the packer
    packs each from them (KILN_BF16_WEIGHTS=packed: the default reads them
    in place, test_bf16_weights_are_read_in_place): tiny Llama and BERT
    models (gated MLPs joined from the bf16 halves, q/k/v concatenated as
    bf16, the lm_head) compile to the same outputs, bit for bit, as when the
    fold widens the weights to float32 first (KILN_FOLD_BF16=widen), under
    every weight form."""
    model, n_weights = _tiny_transformer(name)
    model = model.eval().to(torch.bfloat16)
    ids = torch.randint(0, 128, (2, 9))
    monkeypatch.setenv("KILN_LOG", "1")
    monkeypatch.setenv("KILN_BF16_WEIGHTS", "packed")
    runs = {}
    for mode in ("hold", "widen"):
        if mode == "widen":
            monkeypatch.setenv("KILN_FOLD_BF16", "widen")
        compiled = kiln.trace(model, (ids,), **options)
        log = capfd.readouterr().err
        assert (f"({n_weights} bf16 weights held as bf16" in log) == (mode == "hold"), log
        with torch.no_grad():
            runs[mode] = compiled(ids)
    assert runs["hold"].dtype == torch.bfloat16
    assert torch.equal(runs["hold"], runs["widen"])


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (2, 9), (4, 9)],
                         ids=["decode", "rows5", "prefill18", "prefill36"])
@pytest.mark.parametrize("name", ["llama", "bert"])
def test_bf16_weights_are_read_in_place(name, shape, monkeypatch, tmp_path):
    """By default a bf16 model's linear weights stay where the model keeps
    them: every LINEAR reads torch's (N, K) bf16 rows (kiln borrows the
    parameters, no packed copy; the gated MLP and q/k/v weights stay apart
    rather than be copied side by side), at one row of x (decode), a few
    and up to 31 (VDPBF16PS over the rows where the CPU has it, else the
    fp32 kernels), and the outputs are the packed compile's within bf16
    rounding of the logits; from 32 rows known when compiling, where the
    packed engine is faster, they are packed as before. A .kiln file holds
    the rows as they are and loads to the same bits."""
    model, n_weights = _tiny_transformer(name)
    model = model.eval().to(torch.bfloat16)
    torch.manual_seed(3)
    ids = torch.randint(0, 128, shape)
    compiled = kiln.trace(model, (ids,))
    text = kiln.explain(compiled)
    in_place = shape[0] * shape[1] < 32
    assert ("bf16 weights read in place" in text) == in_place, text
    assert text.count("[bf16 held]") == (n_weights if in_place else 0), text
    params = {p.data_ptr() for p in model.parameters() if p.dim() == 2}
    kept = {t.data_ptr() for t in compiled._kiln_keep}
    assert len(params & kept) >= n_weights
    monkeypatch.setenv("KILN_BF16_WEIGHTS", "packed")
    packed = kiln.trace(model, (ids,))
    monkeypatch.delenv("KILN_BF16_WEIGHTS")
    assert "[bf16 held]" not in kiln.explain(packed)
    path = tmp_path / "model.kiln"
    kiln.save(compiled, str(path))
    loaded = kiln.load(str(path))
    with torch.no_grad():
        got, want, eager = compiled(ids), packed(ids), model(ids)
        assert torch.equal(loaded(ids), got)
    # Both are sums of the same exact bf16 products in float32, rounded to
    # bf16 at each layer's output: a bf16 ulp here and there (packed against
    # in place measured below 1e-3 of the logits' scale; eager, whose
    # kernels round differently, below 1e-2).
    scale = eager.float().abs().max().item()
    assert (got.float() - want.float()).abs().max().item() <= 0.005 * scale
    assert (got.float() - eager.float()).abs().max().item() <= 0.05 * scale


def test_bf16_weights_read_in_place_at_any_length(monkeypatch):
    """With the sequence length dynamic (rows not known when compiling), a
    bf16 model's linear weights are read in place whatever the length: one
    row, a few, and 40 (the 4 x 4 tiles over the rows of x and W where the
    CPU has VDPBF16PS), each call the packed compile's within bf16
    rounding of the logits."""
    from torch.export import Dim
    model, n_weights = _tiny_transformer("llama")
    model = model.eval().to(torch.bfloat16)
    torch.manual_seed(4)
    ids = torch.randint(0, 128, (1, 6))
    dyn = {"ids": {1: Dim("seq", min=2, max=64)}}
    compiled = kiln.trace(model, (ids,), dynamic_shapes=dyn)
    assert kiln.explain(compiled).count("[bf16 held]") == n_weights
    monkeypatch.setenv("KILN_BF16_WEIGHTS", "packed")
    packed = kiln.trace(model, (ids,), dynamic_shapes=dyn)
    monkeypatch.delenv("KILN_BF16_WEIGHTS")
    with torch.no_grad():
        for seq in (2, 5, 40):
            x = torch.randint(0, 128, (1, seq))
            got, want, eager = compiled(x), packed(x), model(x)
            scale = eager.float().abs().max().item()
            # the same sums in another order: measured 0 to 2e-4 of the scale
            assert (got.float() - want.float()).abs().max().item() <= 0.005 * scale, seq
            assert (got.float() - eager.float()).abs().max().item() <= 0.05 * scale, seq


def has_bf16_engine():
    return kiln.machine().get("bf16_engine", "none") not in (None, "", "none")


BF16_CONV = "a bf16 model's conv"


def test_bf16_convs_run_on_the_bf16_engine():
    """A bf16 model's channels-last convs whose weights hold bf16 values read
    x rounded to bf16 (as eager) and run on the bf16 engine where the CPU
    has one when compiling, else on the fp32 panels (x unrounded); the
    rule holds either way (test_trace_low_precision_model). Under autocast
    the weights' bf16 casts fold into such constants: the same form. A
    batch norm after such a conv folds into its bias and a scale of its
    sums, not into its weight (which would leave bf16: the res case, four
    convs, each with its norm). An fp32 model with bf16-valued weights is
    not touched: its x is fp32."""
    model, inputs, _, _ = build("vgg", torch.bfloat16)
    text = kiln.explain(kiln.trace(model, inputs))
    assert text.count(BF16_CONV) == (4 if has_bf16_engine() else 0), text
    f32 = Vgg().eval()
    f32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    x = inputs[0].float()
    with torch.no_grad():
        assert BF16_CONV not in kiln.explain(kiln.trace(f32, (x,)))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = kiln.explain(kiln.trace(f32, (x,)))
    assert auto.count(BF16_CONV) == (4 if has_bf16_engine() else 0), auto
    res, res_inputs, _, _ = build("res", torch.bfloat16)
    text = kiln.explain(kiln.trace(res, res_inputs))
    assert text.count(BF16_CONV) == (4 if has_bf16_engine() else 0), text


def test_lone_bf16_convs_go_channels_last():
    """The layout pass asks the target what form a conv would get channels-
    last: a bf16-engine conv pays for its two conversions alone (the UNet
    block: four convs, none reading another, four regions); without an
    engine at compile time the fp32 rule keeps them NCHW. The same for
    compute_dtype=bf16 on the fp32 block."""
    model, inputs, _, _ = build("unet", torch.bfloat16)
    engine = has_bf16_engine()

    def nhwc_bf16_convs(m):
        return sum("conv2d_nhwc" in line and "[bf16 compute" in line for line in kiln.explain(m).splitlines())
    assert nhwc_bf16_convs(kiln.trace(model, inputs)) == (4 if engine else 0)
    f32 = Unet().eval()
    x = torch.randn(1, 3, 12, 12)
    assert nhwc_bf16_convs(kiln.trace(f32, (x,), compute_dtype=torch.bfloat16)) == (4 if engine else 0)
    assert "conv2d_nhwc" not in kiln.explain(kiln.trace(f32, (x,)))  # fp32: lone convs stay NCHW
    start = kiln.isa()
    try:
        kiln.isa("avx2" if kiln.isa("avx2") == "avx2" else "generic")
        text = kiln.explain(kiln.trace(model, inputs))
    finally:
        kiln.isa(start)
    assert "conv2d_nhwc" not in text


def test_bf16_conv_artifact_round_trip():
    """The saved model (format 2.19 where a conv reads x as bf16) loads and
    gives the same outputs; its convs keep their form (a file keeps no
    notes: the layout shows)."""
    model, inputs, _, _ = build("vgg", torch.bfloat16)
    compiled = kiln.trace(model, inputs)
    again = type(compiled).from_bytes(compiled.to_bytes())

    def bf16_convs(m):
        return sum("conv2d_nhwc" in line and "[bf16 compute" in line for line in kiln.explain(m).splitlines())
    assert bf16_convs(again) == bf16_convs(compiled) == (4 if has_bf16_engine() else 0)
    assert torch.equal(again(*inputs), compiled(*inputs))


def test_bf16_outputs_and_inputs_keep_their_dtypes():
    """bf16 in and fp32 out (an explicit .float()), fp32 in and bf16 out."""

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32).to(torch.bfloat16)

        def forward(self, a, b):
            return self.fc(a).float() + b, (b * 2).to(torch.bfloat16)

    m = Mixed().eval()
    a, b = torch.randn(4, 32).to(torch.bfloat16), torch.randn(4, 32)
    got = kiln.trace(m, (a, b), fallback=False)(a, b)
    want = m(a, b)
    assert [t.dtype for t in got] == [torch.float32, torch.bfloat16]
    # .float() of the bf16 linear output: eager rounds it first, so does kiln.
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=2 ** -8 * want[0].abs().max().item())
    assert torch.equal(got[1], want[1])


@pytest.fixture(scope="module")
def minilm():
    return minilm_encoder_and_batch()


def test_minilm_bf16_trace(minilm):
    """all-MiniLM-L6-v2 (real weights) as model.to(torch.bfloat16): cosine
    >= 0.999 to its fp32 output (issue 18's bf16 target), every op native."""
    model, ids, mask = minilm
    with torch.no_grad():
        ref = model(ids, mask)
        mb = model.to(torch.bfloat16)
        try:
            got = kiln.trace(mb, (ids, mask), fallback=False)(ids, mask)
        finally:
            model.float()
    assert got.dtype == torch.bfloat16
    assert cosine(got, ref) >= 0.999

