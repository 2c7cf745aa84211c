"""Attention under compute_dtype=torch.bfloat16 (SDPA flag KILN_SDPA_BF16).

The rule (kiln.trace's docstring, src/ir/kiln_ops.h): q, k, v rounded to
bf16; s = (q' . k') * scale + mask, the products exact and summed in fp32;
weights p = e^(s - c) with c = ceil(max(s) log2 e) ln 2, rounded to bf16 for
P.V, divided by the fp32 sum of the rounded weights; fp32 sums. `rule`
below evaluates it in float64.

Tolerance against that float64 evaluation: the rounding points are the same,
so kiln differs by fp32 summation order (~1e-6 of the scores, which e^ turns
into ~1e-6 relative in the weights and outputs), except where such a
difference moves a weight across a bf16 rounding boundary (about 1 weight in
10^4): that weight is then one bf16 step (2^-8 of itself) off, which moves
its row's outputs by at most 2^-8 (p_j / l) max|v|. So each row gets
2e-5 + 2 * 2^-8 * (its largest p_j / l) * max|v| (two such flips), computed
from the float64 evaluation.

Against eager fp32 the difference is bf16's: q and k rounded (2^-9 relative
each) move the scores by ~2^-8 |s|, v and the weights add 2^-9 each: a few
1e-3 of max|v| for scores of a few units; atol 2e-2 * max|v| and cosine >=
0.9999 here, and more than fp32's tolerance (the rule is applied at all).
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import kiln
from kiln import _C
from conftest import cosine, minilm_encoder_and_batch


@pytest.fixture(autouse=True)
def _every_sdpa_in_bf16(monkeypatch):
    """The rule on every path: KILN_ATTN_BF16=on flags every SDPA, also
    where kiln would keep attention fp32 (a CPU without a bf16 engine, a
    decode step: test_which_attentions_compute_in_bf16 unsets it), so each
    test runs the same on any CPU."""
    monkeypatch.setenv("KILN_ATTN_BF16", "on")


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float64)


def rule(q, k, v, mask=None, causal=False, scale=None):
    """The bf16 rule in float64; also each row's largest weight share."""
    d = q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    s = (bf16(q) @ bf16(k).transpose(-1, -2)) * float(torch.tensor(scale, dtype=torch.float32))
    if mask is not None:
        s = s + mask.double()
    if causal:
        sq, skv = s.shape[-2:]
        hidden = torch.ones(sq, skv, dtype=torch.bool).triu(1)
        s = s.masked_fill(hidden, -math.inf)
    m = s.amax(-1, keepdim=True)
    c = torch.ceil(m * (1 / math.log(2))) * math.log(2)
    p = torch.exp(s - c)
    pr = bf16(p.float())
    l = pr.sum(-1, keepdim=True)
    out = (pr @ bf16(v)) / l
    return out, (pr.amax(-1, keepdim=True) / l)


def assert_rule(got, q, k, v, **kw):
    want, share = rule(q, k, v, **kw)
    tol = 2e-5 + 2 * 2.0 ** -8 * share * float(v.abs().max())
    err = (got.double() - want).abs()
    worst = float((err - tol).max())
    assert worst <= 0, f"beyond the rule's tolerance by {worst:.3g} (largest error {float(err.max()):.3g})"
    # Most rows are within fp32's own tolerance (flips are rare).
    rows_off = int((err > 2e-5 + 1e-4 * want.abs()).any(-1).sum())
    rows = err.numel() // err.shape[-1]
    assert rows_off <= 2 + rows // 20, f"{rows_off} of {rows} rows past fp32's tolerance"
    return want


class Attn(nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


def engines():
    """Each path bf16 attention runs on: VDPBF16PS, then the fp32 kernels."""
    start_engine, start_isa = _C.bf16_engine(), kiln.isa()
    out = []
    if _C.bf16_engine("avx512_bf16") == "avx512_bf16":
        out.append(pytest.param("avx512_bf16", id="avx512_bf16"))
    else:
        out.append(pytest.param("avx512_bf16", id="avx512_bf16",
                                marks=pytest.mark.skip(reason="this CPU has no avx512_bf16")))
    _C.bf16_engine(start_engine)
    for level in ("avx512", "avx2", "generic"):
        ok = kiln.isa(level) == level
        kiln.isa(start_isa)
        out.append(pytest.param(level, id=f"fp32-{level}",
                                marks=() if ok else pytest.mark.skip(reason=f"no {level}")))
    return out


@pytest.fixture
def engine(request):
    start_engine, start_isa = _C.bf16_engine(), kiln.isa()
    name = request.param
    if name == "avx512_bf16":
        assert _C.bf16_engine(name) == name
    else:
        kiln.isa(name)
        _C.bf16_engine("none")
    yield name
    kiln.isa(start_isa)
    _C.bf16_engine(start_engine)


CASES = {
    # (B, H, S, D), causal, mask
    "minilm b2 d32": ((2, 12, 128, 32), False, False),
    "bert d64 mask": ((1, 12, 128, 64), False, True),
    "odd s37 d80 causal": ((2, 3, 37, 80), True, False),
    "d128 s130": ((1, 2, 130, 128), False, False),
    "decode-like s1": ((2, 4, 1, 64), False, False),
}


@pytest.mark.parametrize("engine", engines(), indirect=True)
@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_matches_the_rule_in_float64(engine, case):
    (b, h, s, d), causal, with_mask = CASES[case]
    torch.manual_seed(sum(map(ord, case)))
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    args = (q, k, v)
    mask = None
    if with_mask:
        # BERT's padding mask: the last 20 keys of every row hidden, one row all but one.
        mask = torch.zeros(b, 1, s, s)
        mask[..., -20:] = -math.inf
        args = (q, k, v, mask)
    model = Attn(causal).eval()
    compiled = kiln.trace(model, args, compute_dtype=torch.bfloat16)
    got = compiled(*args)
    assert got.dtype == torch.float32 and got.shape == (b, h, s, d)
    assert_rule(got, q, k, v, mask=mask, causal=causal)
    with torch.no_grad():
        eager = model(*args)
    err = float((got - eager).abs().max())
    assert err <= 2e-2 * float(v.abs().max()), err
    assert err > 1e-4, "the bf16 rule was not applied"
    assert cosine(got, eager) >= 0.9999


def test_explain_names_the_engine_and_the_file_keeps_the_flag(tmp_path):
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 40, 32) for _ in range(3))
    compiled = kiln.trace(Attn(), (q, k, v), compute_dtype=torch.bfloat16)
    text = kiln.explain(compiled)
    assert "compute=bf16" in text and "bf16 attention" in text
    if _C.bf16_engine() != "none" and kiln.isa() == "avx512":
        assert ("AMX tiles (TDPBF16PS)" if _C.bf16_engine() == "amx" else "VDPBF16PS") in text
    fp32 = kiln.trace(Attn(), (q, k, v))
    assert "compute=bf16" not in kiln.explain(fp32)
    # A decode step (one query per head) runs the rule on the fp32 kernels.
    q1 = q[:, :, :1].contiguous()
    dec = kiln.trace(Attn(), (q1, k, v), compute_dtype=torch.bfloat16)
    assert "decode steps: the fp32 kernels" in kiln.explain(dec)
    assert_rule(dec(q1, k, v), q1, k, v)
    path = tmp_path / "attn.kiln"
    kiln.save(compiled, str(path))
    data = bytearray(path.read_bytes())
    assert int.from_bytes(data[6:8], "little") == 18  # format 2.18: KILN_SDPA_BF16
    loaded = kiln.load(str(path))
    assert torch.equal(loaded(q, k, v), compiled(q, k, v))
    assert "compute=bf16" in kiln.explain(loaded)
    # A file stamped 2.17 cannot hold the flag: the reader refuses it.
    data[6:8] = (17).to_bytes(2, "little")
    old = tmp_path / "attn217.kiln"
    old.write_bytes(bytes(data))
    with pytest.raises(Exception, match="bf16 attention"):
        kiln.load(str(old))
    # An fp32 file is stamped as before (no bump for files without the flag).
    kiln.save(fp32, str(tmp_path / "fp32.kiln"))
    assert int.from_bytes((tmp_path / "fp32.kiln").read_bytes()[6:8], "little") < 18


def test_which_attentions_compute_in_bf16(monkeypatch):
    """By default compute_dtype=bf16 flags an SDPA only where the rule pays:
    the compiling CPU has a bf16 engine, and the SDPA is not a decode step's
    (at most 8 rows per kv head), which reads K and V on the fp32 kernels
    either way; elsewhere attention stays fp32 (bf16 never slower than
    fp32). KILN_ATTN_BF16=off keeps every one fp32, =on flags every one."""
    monkeypatch.delenv("KILN_ATTN_BF16", raising=False)
    torch.manual_seed(4)
    q, k, v = (torch.randn(1, 4, 40, 32) for _ in range(3))
    q1 = q[:, :, :1].contiguous()
    start = _C.bf16_engine()
    try:
        for engine in dict.fromkeys([start, "none"]):
            _C.bf16_engine(engine)
            prefill = kiln.explain(kiln.trace(Attn(), (q, k, v), compute_dtype=torch.bfloat16))
            decode = kiln.explain(kiln.trace(Attn(), (q1, k, v), compute_dtype=torch.bfloat16))
            assert ("compute=bf16" in prefill) == (_C.bf16_engine() != "none"), (engine, prefill)
            assert "compute=bf16" not in decode, (engine, decode)
    finally:
        _C.bf16_engine(start)
    for knob, want in (("off", False), ("on", True)):
        monkeypatch.setenv("KILN_ATTN_BF16", knob)
        for x in (q, q1):
            text = kiln.explain(kiln.trace(Attn(), (x, k, v), compute_dtype=torch.bfloat16))
            assert ("compute=bf16" in text) == want, (knob, text)


def test_reference_target_computes_the_same_rule():
    torch.manual_seed(3)
    q, k, v = (torch.randn(2, 3, 50, 32) for _ in range(3))
    ref = kiln.trace(Attn(True), (q, k, v), compute_dtype=torch.bfloat16, target="reference")
    assert_rule(ref(q, k, v), q, k, v, causal=True)
    assert "the scalar reference" in kiln.explain(ref)


class Block(nn.Module):
    """A self-attention block as BERT's: one QKV projection, heads, SDPA."""

    def __init__(self, e=128, h=4):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(e, 3 * e)

    def forward(self, x):
        b, s, e = x.shape
        q, k, v = self.qkv(x).split(e, dim=-1)
        q, k, v = (t.reshape(b, s, self.h, e // self.h).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, e)


def test_torch_compile_option_computes_attention_in_bf16():
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 33, 128)
    traced = kiln.trace(model, x, compute_dtype=torch.bfloat16)
    assert "compute=bf16" in kiln.explain(traced)
    with torch.no_grad():
        got = torch.compile(model, backend="kiln", options={"compute_dtype": torch.bfloat16})(x)
        fp32 = model(x)
    # The same compile as kiln.trace's (the same rule in every node).
    torch.testing.assert_close(got, traced(x), rtol=0, atol=2e-5)
    assert float((got - fp32).abs().max()) > 1e-4
    torch._dynamo.reset()


def test_minilm_real_weights_cosine_with_bf16_attention():
    """MiniLM with its real weights (batch 8 as the bench runs it): bf16
    linears and bf16 attention stay at cosine >= 0.999 of fp32 (the issue's
    target), per token too."""
    model, ids, mask = minilm_encoder_and_batch(batch=8, seq=128)
    with torch.no_grad():
        want = model(ids, mask)
    compiled = kiln.trace(model, (ids, mask), compute_dtype=torch.bfloat16)
    assert "compute=bf16" in kiln.explain(compiled)
    got = compiled(ids, mask)
    per_token = F.cosine_similarity(got.double(), want.double(), dim=-1)
    print(f"MiniLM b8 bf16 (attention too) vs fp32: cosine {cosine(got, want):.6f}, "
          f"worst token {float(per_token.min()):.6f}")
    assert cosine(got, want) >= 0.999
    assert float(per_token.min()) >= 0.99


def test_bf16_model_attention_takes_the_rule_where_it_pays(monkeypatch):
    """A bf16 model's SDPA (bf16 q, k, v: eager runs torch's flash kernel
    for bf16, the rule above) takes the rule where compute_dtype=bf16 would
    flag it: a bf16 engine, not a decode step (lowp.attention_in_bf16);
    elsewhere it computes in fp32 on the values kiln holds. The BERT-style
    block's SDPA still reads q, k and v as views of its QKV projection
    (fuse_attn carries the flag)."""
    monkeypatch.delenv("KILN_ATTN_BF16", raising=False)
    torch.manual_seed(5)
    q, k, v = (torch.randn(1, 4, 40, 32, dtype=torch.bfloat16) for _ in range(3))
    q1 = q[:, :, :1].contiguous()
    block = Block().eval().to(torch.bfloat16)
    x = torch.randn(2, 33, 128, dtype=torch.bfloat16)
    start = _C.bf16_engine()
    try:
        for engine in dict.fromkeys([start, "none"]):
            _C.bf16_engine(engine)
            has = _C.bf16_engine() != "none"
            prefill = kiln.explain(kiln.trace(Attn(), (q, k, v)))
            decode = kiln.explain(kiln.trace(Attn(), (q1, k, v)))
            fused = kiln.explain(kiln.trace(block, (x,)))
            assert ("compute=bf16" in prefill) == has, (engine, prefill)
            assert "compute=bf16" not in decode, (engine, decode)
            # q, k and v read as views of the projection's output.
            assert ("compute=bf16" in fused) == has and re.search(r"sdpa +\((%\d+), \1, \1\)", fused), fused
    finally:
        _C.bf16_engine(start)
    for knob, want in (("off", False), ("on", True)):
        monkeypatch.setenv("KILN_ATTN_BF16", knob)
        for t in (q, q1):
            text = kiln.explain(kiln.trace(Attn(), (t, k, v)))
            assert ("compute=bf16" in text) == want, (knob, text)
    # fp32 attention is never flagged by a bf16 neighbour.
    monkeypatch.delenv("KILN_ATTN_BF16")
    assert "compute=bf16" not in kiln.explain(kiln.trace(Attn(), (q.float(), k.float(), v.float())))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("engine", engines(), indirect=True)
def test_bf16_model_attention_matches_the_rule(engine, causal):
    """With the rule (KILN_ATTN_BF16=on, every path): the bf16 model's
    output is the rule's result on its bf16 q, k, v, rounded once to bf16:
    the rule's tolerance plus half a bf16 step of the output."""
    torch.manual_seed(6 + causal)
    q, k, v = (torch.randn(2, 4, 70, 32).to(torch.bfloat16) for _ in range(3))
    got = kiln.trace(Attn(causal), (q, k, v))(q, k, v)
    assert got.dtype == torch.bfloat16
    want, share = rule(q.float(), k.float(), v.float(), causal=causal)
    tol = 2e-5 + 2 * 2.0 ** -8 * share * float(v.float().abs().max()) + 2.0 ** -9 * want.abs()
    worst = float(((got.double() - want).abs() - tol).max())
    assert worst <= 0, f"beyond the rule's tolerance by {worst:.3g}"
    # The rule is applied: fp32 attention of the same bf16 values differs.
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    assert float((want - exact).abs().max()) > 1e-4
