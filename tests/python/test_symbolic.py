"""Symbolic sizes through torch.compile (issue 17): one compile serves every
size in range, with no eager fallback; HF generate() with the default
DynamicCache compiles a bounded number of graphs for any number of tokens."""

import torch
import torch.nn as nn
import pytest

import kiln  # noqa: F401  (registers the backend)


@pytest.fixture
def counters(fresh_dynamo):
    """torch's compile counters, cleared, with Dynamo reset (conftest)."""
    return fresh_dynamo


class _Block(nn.Module):
    """Linear, a head split, attention, an arange over the length, a norm:
    sizes flow through views (B*T), a permute's strides and an iota."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        B, T, _ = x.shape
        q = self.lin(x).view(B, T, 2, 8).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        pos = torch.arange(T, dtype=torch.float32)
        return self.norm(a.transpose(1, 2).reshape(B, T, 16)) + pos[None, :, None]


def test_dynamic_compile_serves_every_size(counters):
    torch.manual_seed(0)
    m = _Block().eval()
    f = torch.compile(m, backend="kiln", dynamic=True)
    with torch.no_grad():
        for B, T in [(2, 5), (3, 7), (2, 64), (5, 3), (4, 33)]:
            x = torch.randn(B, T, 16)
            torch.testing.assert_close(f(x), m(x), atol=1e-5, rtol=1e-5)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    # One symbolic graph for all five sizes.
    assert counters["kiln"]["graphs"] == 1, dict(counters["kiln"])


def test_symbolic_model_checks_sizes(counters):
    """Inputs whose sizes disagree about one symbol are refused with the
    input and the symbol named, not run."""
    m = nn.Sequential(nn.Linear(8, 8)).eval()

    def f(a, b):
        return m(a) + b

    g = torch.compile(f, backend="kiln", dynamic=True)
    with torch.no_grad():
        a, b = torch.randn(3, 8), torch.randn(3, 8)
        torch.testing.assert_close(g(a, b), f(a, b), atol=1e-5, rtol=1e-5)
        a, b = torch.randn(6, 8), torch.randn(6, 8)
        torch.testing.assert_close(g(a, b), f(a, b), atol=1e-5, rtol=1e-5)
    assert counters["kiln"]["graphs"] == 1


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(cfg).eval()


def test_generate_dynamic_cache_without_recompiles(counters):
    """The default DynamicCache: the cache length grows every token; after
    Dynamo's automatic dynamic the graph is symbolic and stays one compile.
    Greedy tokens equal eager's for 64 new tokens."""
    m = _tiny_llama()
    ids = torch.randint(0, 256, (1, 12))
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        m.forward = torch.compile(m.forward, backend="kiln")
        out = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
        graphs = counters["kiln"]["graphs"]
        out2 = m.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False)
    assert torch.equal(out, ref)
    assert torch.equal(out2, ref)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    # Prefill, and one decode graph symbolic in the cache length from the
    # first step (kiln marks the grown cache as varying): no compile per
    # token, none on a rerun.
    assert graphs == 2, dict(counters["kiln"])
    assert counters["kiln"]["graphs"] == graphs
    # Each new cache length rebound an old instance in place and, mostly,
    # kept its memory plan (the decode graph's arena items do not grow
    # with the cache: it is an input and an output).
    import gc
    from kiln.module import KilnModule
    decode = [o.stats() for o in gc.get_objects() if issubclass(type(o), KilnModule)]
    decode = [st for st in decode if st["symbolic"] and st["instances"] >= 100]
    assert len(decode) == 1, decode
    st = decode[0]
    assert st["instance_rebinds"] == st["instances"] - 4, st
    assert st["instance_plans_kept"] >= st["instance_rebinds"] // 2, st


def test_trace_dynamic_shapes_one_artifact():
    """kiln.trace takes torch.export's dynamic_shapes unchanged: one compile
    for every batch and length in range, size 1 included (torch.export's
    range_constraints, not its ShapeEnv's, which starts at 2); out of range,
    and size 0, is a clear error."""
    from torch.export import Dim

    torch.manual_seed(0)
    m = _Block().eval()
    k = kiln.trace(m, (torch.randn(2, 5, 16),),
                   dynamic_shapes={"x": {0: Dim("batch", max=16), 1: Dim("seq", max=512)}})
    with torch.no_grad():
        for b, t in [(2, 5), (2, 40), (4, 32), (3, 384), (8, 2), (1, 7), (1, 1), (5, 1), (2, 5)]:
            x = torch.randn(b, t, 16)
            torch.testing.assert_close(k(x), m(x), atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match=r"input 0 \('x'\): dimension 1 \(seq\) is 600, expected 1\.\.512"):
        k(torch.randn(2, 600, 16))
    with pytest.raises(ValueError, match=r"dimension 0 \(batch\) is 0, expected 1\.\.16"):
        k(torch.randn(0, 5, 16))


def test_symbols_carry_the_users_names(tmp_path, counters):
    """Errors, kiln.explain and .kiln files name a symbol as the user knows
    it: the Dim's name, or where Dynamo took the size from."""
    from torch.export import Dim

    m = _Block().eval()
    k = kiln.trace(m, (torch.randn(2, 5, 16),),
                   dynamic_shapes={"x": {0: Dim("batch", max=16), 1: Dim("seq", max=512)}})
    assert "input  %0 x (batch, seq, 16) float32" in k.explain()
    kiln.save(k, tmp_path / "m.kiln")
    loaded = kiln.load(tmp_path / "m.kiln")
    assert "(batch, seq, 16)" in loaded.explain()
    with pytest.raises(ValueError, match=r"dimension 0 \(batch\) is 17, expected 1\.\.16"):
        loaded(torch.randn(17, 5, 16))

    from kiln.module import KilnModule

    made = []
    orig = KilnModule.__init__

    def spy(self, *a, **kw):
        orig(self, *a, **kw)
        made.append(self)

    KilnModule.__init__ = spy
    try:
        f = torch.compile(lambda tokens, extra: tokens.view(-1) * 2 + extra.sum(), backend="kiln", dynamic=True)
        f(torch.randn(3, 5), torch.randn(4))
    finally:
        KilnModule.__init__ = orig
    text = made[-1].explain()
    assert "(tokens.size()[0], tokens.size()[1])" in text, text
    assert "tokens.size()[0]*tokens.size()[1]" in text, text


def test_generate_padded_batch_sizes_as_arguments(counters):
    """Batch 2 with left padding: the mask's length reaches a partition as a
    size argument (Dynamo's SymInt), which the kiln piece must be given, not
    guess (a guessed length once made a 3-long mask of a 12-long cache)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=256)).eval()
    ids = torch.randint(0, 256, (2, 10))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    with torch.no_grad():
        ref = m.generate(ids, attention_mask=mask, max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
        m.forward = torch.compile(m.forward, backend="kiln")
        out = m.generate(ids, attention_mask=mask, max_new_tokens=24, min_new_tokens=24, do_sample=False, pad_token_id=0)
    assert torch.equal(out, ref)
    assert counters["kiln"]["eager"] == 0
    assert counters["kiln"]["graphs"] == 2, dict(counters["kiln"])


def test_generate_static_cache_written_in_place(counters, monkeypatch):
    """cache_implementation="static": the decode graph's index_put into the
    cache is written straight into the cache's memory (an output kiln writes
    into the input), not a new cache copied back by AOTAutograd. Tokens equal
    eager's; prefill and decode compile once each."""
    from kiln.module import KilnModule

    written = []
    orig = KilnModule.run_flat

    def spy(self, args, given=None):
        if given:
            written.append(len(given))
        return orig(self, args, given)

    monkeypatch.setattr(KilnModule, "run_flat", spy)
    m = _tiny_llama()
    ids = torch.randint(0, 256, (2, 7))
    with torch.no_grad():
        ref = m.generate(ids, max_new_tokens=40, min_new_tokens=40, do_sample=False, cache_implementation="static")
        m.forward = torch.compile(m.forward, backend="kiln")
        out = m.generate(ids, max_new_tokens=40, min_new_tokens=40, do_sample=False, cache_implementation="static")
    assert torch.equal(out, ref)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    assert counters["kiln"]["graphs"] <= 2, dict(counters["kiln"])
    # Every decode step writes each layer's keys and values in place.
    assert len(written) >= 39 and min(written) >= 2 * 2, written[:5]


def test_index_with_symbolic_sizes(counters):
    """A padded batch's mask indexed by batch and position, both symbolic
    (transformers' padding mask): aten.index.Tensor with two index tensors
    whose linear index uses the symbolic sizes, one graph for all sizes,
    and an index out of range is still an error, never a read."""
    def f(mask, n):
        b = torch.arange(mask.shape[0])[:, None, None, None]
        kv = torch.arange(n.shape[0])[None, None, None, :]
        return mask[b, kv].float() * 2

    g = torch.compile(f, backend="kiln", dynamic=True)
    with torch.no_grad():
        for B, L, N in [(2, 7, 5), (3, 12, 12), (5, 20, 9)]:
            mask = torch.randint(0, 2, (B, L), dtype=torch.bool)
            n = torch.empty(N)
            torch.testing.assert_close(g(mask, n), f(mask, n), rtol=0, atol=0)
    assert counters["kiln"]["graphs"] == 1 and counters["kiln"]["whole"] == 1, dict(counters["kiln"])
    with pytest.raises(Exception, match="out of range"):
        g(torch.ones(2, 4, dtype=torch.bool), torch.empty(6))


def test_pad_by_a_symbolic_length(counters):
    """transformers pads an attention mask to the cache's length
    (masking_utils: F.pad(mask, (0, kv_length - mask_length))) when a caller
    passes a mask shorter than the keys: a pad whose amount is an expression
    of two symbols. One kiln graph for every pair of lengths, no eager."""
    def f(mask, keys):
        m = torch.nn.functional.pad(mask, (0, keys.shape[1] - mask.shape[1]), value=1.0)
        return keys * m[:, :, None]

    g = torch.compile(f, backend="kiln", dynamic=True)
    with torch.no_grad():
        for B, L, N in [(2, 5, 9), (3, 12, 15), (4, 7, 20)]:
            mask = torch.randint(0, 2, (B, L)).float()
            keys = torch.randn(B, N, 4)
            torch.testing.assert_close(g(mask, keys), f(mask, keys), rtol=0, atol=0)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])
    assert counters["kiln"]["graphs"] == 1, dict(counters["kiln"])


class _Scaled(nn.Module):
    """Python floats a dynamic=True graph receives as float64 0-d inputs:
    an attribute, math.pi, arithmetic on both before the tensor sees it."""

    def __init__(self):
        super().__init__()
        self.eps = 1e-5
        self.scale = 0.7

    def forward(self, x):
        import math

        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return y * math.sqrt(2.0 / math.pi) * self.scale


def test_float_scalars_run_in_a_prelude(counters):
    m = _Scaled().eval()
    g = torch.compile(m, backend="kiln", dynamic=True)
    with torch.no_grad():
        for shape in [(2, 5, 8), (3, 7, 8)]:
            x = torch.randn(shape)
            torch.testing.assert_close(g(x), m(x), rtol=1e-6, atol=1e-6)
    assert counters["kiln"]["whole"] == counters["kiln"]["graphs"] == 1, dict(counters["kiln"])
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])


class _NumpyScaled(nn.Module):
    """CTRL's embedding scale, x *= np.sqrt(d): numpy on a config value,
    which Dynamo traces as a 0-d int64 constant converted to float64 and
    square-rooted, multiplying a float32 tensor as it is; and a division by
    another such constant."""

    def __init__(self, d=48):
        super().__init__()
        self.d = d

    def forward(self, x):
        import numpy as np

        x = x * np.sqrt(self.d)
        return x / np.float64(self.d) ** 0.25


@pytest.mark.parametrize("dynamic", [False, True])
def test_numpy_arithmetic_on_constants_is_computed_once(counters, dynamic):
    """Such a chain (until session 32 three ops in eager around kiln's
    piece) is computed when the graph is compiled and passed as a float32
    0-d input, as eager rounds it for the multiply: the graph is whole, the
    results eager's bits."""
    m = _NumpyScaled().eval()
    g = torch.compile(m, backend="kiln", dynamic=dynamic)
    with torch.no_grad():
        for shape in [(2, 5, 8), (3, 7, 8)]:
            x = torch.randn(shape)
            torch.testing.assert_close(g(x), m(x), rtol=0, atol=0)
    assert counters["kiln"]["whole"] == counters["kiln"]["graphs"] >= 1, dict(counters["kiln"])
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])


def test_ctrl_generates_whole_in_kiln(counters):
    """CTRL (transformers' CTRLLMHeadModel, a tiny random config) through
    generate() with its forward compiled: every graph whole in kiln (its
    np.sqrt(d_model) embedding scale ran in eager before), eager's
    tokens."""
    from transformers import CTRLConfig, CTRLLMHeadModel

    torch.manual_seed(0)
    cfg = CTRLConfig(n_embd=64, n_layer=2, n_head=4, dff=128, vocab_size=300, n_positions=256)
    m = CTRLLMHeadModel(cfg).eval()
    ids = torch.randint(0, 300, (1, 8))
    with torch.no_grad():
        want = m.generate(ids, max_new_tokens=6, do_sample=False)
        m.forward = torch.compile(m.forward, backend="kiln")
        got = m.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(got, want), (got, want)
    assert counters["kiln"]["eager"] == 0 and counters["kiln"]["partitioned"] == 0, dict(counters["kiln_fallback"])


def test_histc_counts_integer_ids(counters):
    """transformers' tokens per expert: histc of integer ids cast to float,
    one bin per id. Counted in kiln; ids outside the range are not counted.
    A histc kiln cannot prove exact (of float data) stays in eager."""
    def per_expert(ids):
        return torch.histc(torch.sort(ids.reshape(-1)).values.float(), bins=4, min=0, max=3)

    g = torch.compile(per_expert, backend="kiln", dynamic=True)
    with torch.no_grad():
        for shape in [(3, 2), (9, 2), (1, 7)]:
            ids = torch.randint(-1, 6, shape)
            torch.testing.assert_close(g(ids), per_expert(ids), rtol=0, atol=0)
    assert counters["kiln"]["whole"] == counters["kiln"]["graphs"], dict(counters["kiln"])
    counters.clear()
    h = torch.compile(lambda x: torch.histc(x, bins=4, min=0, max=3), backend="kiln")
    x = torch.rand(10) * 3
    torch.testing.assert_close(h(x), torch.histc(x, bins=4, min=0, max=3))
    assert "aten.histc.default" in counters["kiln_fallback"], dict(counters["kiln_fallback"])


def test_a_grown_output_comes_back_symbolic(counters):
    """A graph that concatenates what it was given with what it computes
    (a DynamicCache's keys) marks that dim of its output as varying, so the
    next graph the output enters is traced symbolic in it at once: one
    compile of `step` for every length instead of one at the first length
    and another at the second."""
    def prefill(x, empty):
        return torch.cat([empty, x.tanh()], dim=1)

    def step(cache, x):
        return torch.cat([cache, x * 2], dim=1)

    p = torch.compile(prefill, backend="kiln")
    s = torch.compile(step, backend="kiln")
    with torch.no_grad():
        cache = p(torch.randn(2, 5, 4), torch.zeros(2, 0, 4))
        for _ in range(4):
            x = torch.randn(2, 1, 4)
            new = s(cache, x)
            torch.testing.assert_close(new, torch.cat([cache, x * 2], dim=1))
            cache = new
    assert cache.shape == (2, 9, 4)
    assert counters["kiln"]["graphs"] == 2, dict(counters["kiln"])  # prefill, one step


def test_gather_with_its_own_index_sizes():
    """torch.gather's index may be smaller than its input (and any size along
    the gathered dim). Symbolic shape inference checks the rule at probe
    sizes where that inequality may not hold; the lowering used to answer by
    unifying the index's symbols with the input's, and the artifact then
    refused the very inputs it was traced with (found by the fuzzer's
    dynamic path, seed 11 graph 1065). Symbols the example gives different
    sizes are never unified: every size in range runs, against eager."""
    from torch.export import Dim

    class Gather(nn.Module):
        def forward(self, x, idx):
            return torch.gather(x, 1, idx).sum(0) * 2.0

    m = Gather().eval()
    x, idx = torch.randn(3, 5, 5), torch.randint(0, 5, (3, 17, 4))
    spec = {"x": {0: Dim.AUTO, 1: Dim.AUTO, 2: Dim.AUTO}, "idx": {0: Dim.AUTO, 1: Dim.AUTO, 2: Dim.AUTO}}
    k = kiln.trace(m, (x, idx), dynamic_shapes=spec)
    with torch.no_grad():
        for (b, n, c), (l, ci) in [((3, 5, 5), (17, 4)), ((4, 6, 6), (18, 5)), ((4, 9, 3), (2, 3))]:
            x, idx = torch.randn(b, n, c), torch.randint(0, n, (b, l, ci))
            torch.testing.assert_close(k(x, idx), m(x, idx), atol=1e-5, rtol=1e-5)


def test_upsample_with_symbolic_spatial_sizes_runs_in_eager():
    """Nearest upsampling computes its source indices as constants, so its
    sizes must be numbers: with symbolic H and W the op is refused cleanly
    (CPU fallback) instead of kiln.trace raising a TypeError from
    torch.arange (found by the fuzzer's dynamic path, seed 11 graph 2185)."""
    from torch.export import Dim

    class Up(nn.Module):
        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest") + 1.0

    m = Up().eval()
    # The fallback warning is given once per process for a set of ops, so the
    # test reads the module's record of them instead.
    k = kiln.trace(m, (torch.randn(1, 2, 5, 6),), dynamic_shapes={"x": {2: Dim.AUTO, 3: Dim.AUTO}})
    assert any("upsample_nearest2d" in op for op in k.unsupported), k.unsupported
    with torch.no_grad():
        for h, w in [(5, 6), (7, 3), (9, 9)]:
            x = torch.randn(1, 2, h, w)
            torch.testing.assert_close(k(x), m(x))


def test_slice_with_a_negative_start_keeps_its_symbolic_size():
    """x[..., -10:33:2] over a symbolic s has (-s)//2 + 22 elements (torch's
    expression, valid for the s in [33, 43] torch guards). Over s in [33, 40]
    both of kiln's probe sizes (40 and 39) give 2, so the probes took the
    size for the number 2, and every call, the example's 5 too, was refused
    (fuzzer finding 14, seed 12 graph 2945). A view's sizes are now its
    params, as they stand: the slice runs in kiln at every size in range."""
    from torch.export import Dim

    class Slice(nn.Module):
        def forward(self, x):
            return x[..., -10:33:2] * 2.0

    m = Slice().eval()
    k = kiln.trace(m, (torch.randn(2, 33),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim("s", min=33, max=40)}})
    assert not getattr(k, "unsupported", None), k.unsupported
    with torch.no_grad():
        for b, s in [(2, 33), (3, 34), (2, 39), (4, 40)]:
            x = torch.randn(b, s)
            got = k(x)
            assert got.shape == m(x).shape
            torch.testing.assert_close(got, m(x))
        with pytest.raises(ValueError, match=r"is 12, expected 33\.\.40"):
            k(torch.randn(2, 12))  # outside the range torch.export was given


def test_slice_with_a_negative_start_under_dim_auto():
    """The same slice under Dim.AUTO (torch guards s in [33, 43]), beside an
    op that falls back, so that the slice is lowered in a piece, whose
    symbols take the ShapeEnv's narrower range [33, 40] (finding 14 as the
    fuzzer met it). Every size torch's guards accept runs, against eager;
    12 is outside them (torch.export specialized the program to s >= 33)."""
    from torch.export import Dim

    class SliceThenFallback(nn.Module):
        def forward(self, x):
            y = x[..., -10:33:2]
            return y * 2.0, torch.nn.functional.interpolate(x[None], scale_factor=2.0, mode="nearest")

    m = SliceThenFallback().eval()
    k = kiln.trace(m, (torch.randn(2, 3, 33),), dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO, 2: Dim.AUTO}})
    with torch.no_grad():
        for s in (33, 34, 40):
            x = torch.randn(2, 3, s)
            for got, want in zip(k(x), m(x)):
                torch.testing.assert_close(got, want)
        with pytest.raises(ValueError, match=r"x.shape\[2\] >= 33 \(with x.shape\[2\] = 12"):
            k(torch.randn(2, 3, 12))


def test_a_size_the_probes_get_wrong_at_the_example():
    """max_pool by 13 of s in [26, 50]: (s - 13)//13 + 1 is 3 at both of
    kiln's probe sizes (50, 42) and 2 at the example's 33. kiln once took
    the number 3 (refusing every call), then ran the pool in eager; a
    window's output size is now its own expression, and the pool runs in
    kiln, correct at every size. (A size kiln cannot express whose probes
    agree is checked against the op's rule at the example and refused:
    ceil-mode pooling, C test_sym.)"""
    from torch.export import Dim

    class Pool(nn.Module):
        def forward(self, x):
            return torch.nn.functional.max_pool2d(x, (1, 13), (1, 13)) + 1.0

    m = Pool().eval()
    k = kiln.trace(m, (torch.randn(1, 2, 4, 33),), dynamic_shapes={"x": {3: Dim("s", min=26, max=50)}})
    assert not getattr(k, "unsupported", None), k.unsupported
    with torch.no_grad():
        for s in (33, 26, 41, 50):
            x = torch.randn(1, 2, 4, s)
            torch.testing.assert_close(k(x), m(x))


class _GramBesideAView(nn.Module):
    def forward(self, x, index):
        # The view holds only where s1 * s2 == 48 (and s0 == 16), the
        # slice's 7 rows only where s1 >= 16: guards that leave s1 16 or 24,
        # and give it 24 at both of kiln's probes.
        v = x.softmax(1).softmax(-2)
        rows = torch.gather(v.unsqueeze(0).view(1, 16, 48), 2, index)
        return torch.bmm(x, x.permute(0, 2, 1)), rows, v[:, 2:16:2]


def test_a_transposed_operands_size_the_probes_agree_on():
    """bmm(x, x^T) of an x (s0, s1, s2) guarded to s0 == 16, s1 * s2 == 48,
    s1 >= 16 (fuzz seed 20117 graph 9486): the probes give s1 one number, the
    example another. The simplify pass absorbs the transpose into the
    matmul's flag, and its output's N, x's dim 1 now, is not aligned with
    the output's: kiln found no matching input dim, took the probes' number,
    and the trace failed in that pass (not even a fallback)."""
    from torch.export import Dim

    m = _GramBesideAView().eval()
    torch.manual_seed(0)
    xs = (torch.randn(16, 16, 3), torch.randint(0, 48, (1, 15, 3)))
    k = kiln.trace(m, xs, dynamic_shapes=tuple({d: Dim.AUTO for d in range(x.dim())} for x in xs))
    assert "eager: aten.bmm" not in kiln.explain(k)
    for shape in ((16, 16, 3), (16, 24, 2)):
        xs = (torch.randn(*shape), torch.randint(0, 48, (1, 15, 3)))
        for g, e in zip(k(*xs), m(xs[0].double(), xs[1])):
            torch.testing.assert_close(g, e.float(), rtol=1e-5, atol=1e-5)


def test_image_models_with_any_height_and_width():
    """Strided convolutions and poolings over symbolic sizes (an image of
    any height and width): each window's output size is its expression
    (size + 2 pad - dilation (kernel - 1) - 1)//stride + 1, also where the
    probes agree on a number (64 and 72 are both 3 after five halvings; an
    example of 224 gives 7), and the ops after it keep it. The graph runs
    whole in kiln (channels-last regions included) at sizes other than the
    example's, against float64."""
    from torch.export import Dim

    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(3, 16, 7, stride=2, padding=3), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
        nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=2, dilation=2), nn.ReLU(), nn.Conv2d(32, 32, 3, stride=2, padding=1),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 5)).eval()
    h, w = Dim("h", min=96, max=512), Dim("w", min=96, max=512)
    k = kiln.trace(m, (torch.randn(1, 3, 224, 224),), dynamic_shapes=({2: h, 3: w},))
    assert not getattr(k, "unsupported", None), k.unsupported
    with torch.no_grad():
        for size in ((224, 224), (97, 131), (300, 256), (512, 96)):
            x = torch.randn(1, 3, *size)
            want = m.double()(x.double()).float()
            m.float()
            torch.testing.assert_close(k(x), want, rtol=1e-4, atol=1e-5)


class _ResidualBlock(nn.Module):
    """ResNet's basic block: the downsampling branch (a 1x1 stride-2 conv)
    and the main one (3x3 stride 2, then 3x3) meet at a residual add."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + idt)


def test_residual_network_compiles_as_when_static():
    """After several stride-2 windows, kiln's size expression is torch's:
    (h - 1)//8 + 1, not (h - 1)//4//2 + 1 (nested floor divisions by
    numbers collapse, src/ir/kiln_sym.c). Before, the two forms met at every
    residual add and batch norm: reshapes between them cut the conv
    fusions and the channels-last region (ResNet-18: 19 of 20 convs kept
    apart). The symbolic graph now has the static graph's nodes, and agrees
    with float64 at sizes other than the example's."""
    from torch.export import Dim

    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1), _ResidualBlock(8, 8, 1),
                      _ResidualBlock(8, 16, 2), _ResidualBlock(16, 32, 2)).eval()
    for mod in m.modules():   # batch norms that do something
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 96, 96)
    static = kiln.trace(m, (x,))
    h, w = Dim("h", min=64, max=512), Dim("w", min=64, max=512)
    k = kiln.trace(m, (x,), dynamic_shapes=({2: h, 3: w},))
    assert k.stats()["symbolic"] and k.stats()["nodes"] == static.stats()["nodes"], \
        (k.stats()["nodes"], static.stats()["nodes"])
    with torch.no_grad():
        for size in ((96, 96), (65, 131), (200, 77)):
            x = torch.randn(1, 3, *size)
            want = m.double()(x.double()).float()
            m.float()
            torch.testing.assert_close(k(x), want, rtol=1e-4, atol=1e-5)


def test_ceil_mode_pools_over_any_image_size():
    """A ceil-mode pool whose kernel spans stride + padding (3 by 2, padding
    0 or 1: torch's rule never drops its last window) rounds its window's
    expression up, (size + 2 pad - 3 + 1)//2 + 1; through torch.compile's
    dynamic=True (torch.export refuses such a pool over a Dim range), kiln
    runs the whole graph at every size, none of it in eager."""
    import warnings

    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
                      nn.ReLU(), nn.MaxPool2d(3, stride=2, ceil_mode=True)).eval()
    torch._dynamo.reset()
    f = torch.compile(m, backend="kiln", dynamic=True)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for size in ((32, 40), (33, 47), (61, 29)):
            x = torch.randn(1, 3, *size)
            torch.testing.assert_close(f(x), m(x))
    assert not [w for w in caught if "eager" in str(w.message)], [str(w.message) for w in caught]


class _ConvByInputWeight(nn.Module):
    def __init__(self, dilation):
        super().__init__()
        self.dilation = dilation

    def forward(self, x, w):
        return torch.nn.functional.conv2d(x, w, stride=2, padding=1, dilation=self.dilation)


@pytest.mark.parametrize("layout,dilation", [("nchw", 1), ("nhwc", 1), ("nchw", 2)])
def test_convolution_by_a_weight_of_symbolic_size(monkeypatch, layout, dilation):
    """A convolution whose weight is an input with a symbolic kernel height
    (fuzz seed 20088 graph 2022): its output height (h + 2 - kh)//2 + 1 is
    an expression of both sizes. Before, kiln's window rule took only the
    image's size as symbolic; the probes agreed on 17 and the graph held
    that number, refusing a call that gives 16."""
    from torch.export import Dim

    monkeypatch.setenv("KILN_LAYOUT", layout)
    torch.manual_seed(0)
    m = _ConvByInputWeight(dilation)
    x, w = torch.randn(2, 3, 33, 5), torch.randn(4, 3, 2, 1)
    k = kiln.trace(m, (x, w), dynamic_shapes=({2: Dim("h", min=12, max=64)}, {2: Dim("kh", min=1, max=6)}),
                   fallback=False)
    for h, kh in ((33, 2), (35, 6), (30, 3), (12, 1), (64, 5)):
        x, w = torch.randn(2, 3, h, 5), torch.randn(4, 3, kh, 1)
        want = m(x.double(), w.double()).float()
        got = k(x, w)
        assert got.shape == want.shape, (h, kh, got.shape, want.shape)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _LinearAfterConvByInputWeight(nn.Module):
    """Fuzz seed 20116 graph 5966: a linear layer whose weight is an input,
    after a stride-2 convolution of a constant by an input kernel, then a
    convolution whose result meets a constant's shape (torch guards its
    sizes to 6 x 2)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.img = nn.Parameter(torch.randn(1, 1, 15, 3, generator=g), requires_grad=False)
        self.b = nn.Parameter(torch.randn(16, generator=g), requires_grad=False)
        self.c = nn.Parameter(torch.randn(1, 1, 6, 2, generator=g), requires_grad=False)

    def forward(self, w1, w2, w3):
        y = torch.nn.functional.linear(torch.nn.functional.conv2d(self.img, w1, stride=2, padding=2), w2.t())
        return torch.nn.functional.conv2d(y, w3, self.b, stride=2, padding=2) - 2 * self.c


def test_a_symbol_an_op_needs_equal_to_an_expression_of_others():
    """The linear's in-features (w2's own symbol) must equal the first
    convolution's output width, (7 - kw)//2 + 1 of w1's symbol. kiln paired
    the matmul's sizes right-aligned, took two bare symbols whose example
    values happened to agree (in dims the op never compares) as one, and the
    linear ran in eager; now it pairs K with K and takes w2's symbol as that
    expression. The second convolution still runs in eager: its window
    against its input is an inequality under guards the probes cannot fit
    (said in its reason)."""
    from torch.export import Dim

    m = _LinearAfterConvByInputWeight().eval()
    xs = (torch.randn(1, 1, 3, 3), torch.randn(3, 2), torch.randn(16, 1, 3, 3))
    k = kiln.trace(m, xs, dynamic_shapes=tuple({d: Dim.AUTO for d in range(x.dim())} for x in xs))
    explained = kiln.explain(k)
    assert "eager: aten.linear" not in explained and "= matmul" in explained, explained
    torch.manual_seed(1)
    for kh, kw in ((3, 3), (2, 5), (3, 4), (2, 2)):  # where eager runs: 6 x 2 results
        xs = (torch.randn(1, 1, kh, kw), torch.randn((7 - kw) // 2 + 1, 2), torch.randn(16, 1, 3, 3))
        want = m.double()(*(x.double() for x in xs)).float()
        m.float()
        torch.testing.assert_close(k(*xs), want, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="break a condition"):
        k(torch.randn(1, 1, 3, 5), torch.randn(3, 2), torch.randn(16, 1, 3, 3))


class _ConvAfterViews(nn.Module):
    """Fuzz seed 20117 graph 1082: x (s0, s1, 1) viewed to 52 rows, then
    to (2, 26, 2, 4) (guards: s0 * s1 == 52), convolved by an input weight
    whose in-channels (its own symbol) must be (s0 * s1)//2."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(1, 8, generator=g), requires_grad=False)
        self.b = nn.Parameter(torch.randn(16, generator=g), requires_grad=False)

    def forward(self, x, weight):
        y = torch.mm(x.view(-1, 1), self.w).view(2, 26, 8).view(2, 26, -1, 4)
        return torch.nn.functional.conv2d(y, weight, self.b)


def test_a_partition_lowers_its_pieces_with_the_symbols_its_support_pass_unified():
    """The support pass found the convolution needs the weight's symbol to
    be (s0 * s1)//2, and lowered again with it so, where the probes then fit
    the views' guards; the piece's own lowering started without it, failed
    at the first view (before the convolution that would have unified), and
    the whole graph ran in eager. The pieces now start from the support
    pass's symbols."""
    from torch.export import Dim

    m = _ConvAfterViews().eval()
    xs = (torch.randn(2, 26, 1), torch.randn(16, 26, 1, 1))
    k = kiln.trace(m, xs, dynamic_shapes=tuple({d: Dim.AUTO for d in range(x.dim())} for x in xs))
    explained = kiln.explain(k)
    assert "1 kiln pieces; eager ops between them: \n" in explained, explained
    for x0 in ((2, 26, 1), (4, 13, 1), (13, 4, 1)):
        xs = (torch.randn(*x0), torch.randn(16, 26, 1, 1))
        torch.testing.assert_close(k(*xs), m.double()(*(x.double() for x in xs)).float(), rtol=1e-5, atol=1e-5)
        m.float()


class _ViewTo40(nn.Module):
    """view(-1, 1, 40) of (s0, 1, s1, s2): torch.export traces it as
    (s0, 1, s1*s2) under guards s1*s2 == 40 (FINDINGS.md 15)."""

    def __init__(self, eager_op=False):
        super().__init__()
        self.eager_op = eager_op

    def forward(self, x):
        y = x.view(-1, 1, 40) * 2 + 1
        if self.eager_op:  # an op kiln runs in eager: the partitioned path
            y = torch.ops.aten.cummax(y, 2)[0]
        return y


_GUARD_DIMS = {"x": {0: torch.export.Dim.AUTO, 2: torch.export.Dim.AUTO, 3: torch.export.Dim.AUTO}}


@pytest.mark.parametrize("eager_op", [False, True], ids=["one-graph", "partitioned"])
def test_torch_export_guards_are_checked_at_every_call(tmp_path, eager_op):
    """At sizes that break a guard, torch's exported program refuses the call
    and eager's module gives another shape; kiln ran the traced program and
    returned (36, 1, 220) where eager gives (198, 1, 40). Now it refuses them
    naming the guard and the sizes, after a save and load as well (the C
    runtime checks them from the file's guards section; a partitioned model
    from its glue's), and still runs every size the guards hold for."""
    import warnings
    model = _ViewTo40(eager_op).eval()
    x = torch.randn(3, 1, 5, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = kiln.trace(model, (x,), dynamic_shapes=_GUARD_DIMS)
        kiln.save(traced, tmp_path / "g.kiln")
        loaded = kiln.load(tmp_path / "g.kiln")
    assert (type(traced).__name__ == "PartitionedModule") == eager_op
    exported = torch.export.export(model, (x,), dynamic_shapes=_GUARD_DIMS).module()
    for m in (traced, loaded):
        for shape in [(3, 1, 5, 8), (2, 1, 4, 10), (7, 1, 2, 20)]:
            xs = torch.randn(*shape)
            torch.testing.assert_close(m(xs), model(xs), rtol=0, atol=0)
        for shape in [(36, 1, 20, 11), (2, 1, 4, 11)]:
            xs = torch.randn(*shape)
            with pytest.raises(Exception, match="Guard failed"):
                exported(xs)  # torch's own program refuses them too
            with pytest.raises(ValueError, match="a condition the program was traced under") as e:
                m(xs)
            # The guard (its 40) and the sizes given (3 = 11).
            assert "40" in str(e.value) and "= 11" in str(e.value), str(e.value)


class _RowsOfThree(nn.Module):
    """reshape(-1, 3) of (s0, s1): torch.export writes the rows as
    (s0*s1)//3 under its guard that 3 divides s0*s1."""

    def __init__(self, eager_op=False):
        super().__init__()
        self.eager_op = eager_op

    def forward(self, x):
        y = (x.reshape(-1, 3) * 2).sum(1)
        if self.eager_op:  # an op kiln runs in eager: the partitioned path
            y = torch.ops.aten.cummax(y, 0)[0] + 1
        return y


@pytest.mark.parametrize("eager_op", [False, True], ids=["one-graph", "partitioned"])
def test_a_view_valid_only_under_a_divisibility_guard_compiles(tmp_path, eager_op):
    """kiln checked the view's element count at probe sizes where 3 does not
    divide s0*s1 (5120 against 5118) and ran the whole program in eager
    (fuzzer seed 9494, graph 1028). The probes now satisfy the guards: one
    kiln graph (or, beside an op kiln lacks, a kiln piece), after a save and
    load as well (the reader fits the probes the same way), every size the
    guards hold for against eager, and a size that breaks them refused
    naming the condition."""
    import warnings
    model = _RowsOfThree(eager_op).eval()
    x = torch.randn(6, 4)
    dims = {"x": (torch.export.Dim.AUTO, torch.export.Dim.AUTO)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the partitioned model names its eager op
        traced = kiln.trace(model, (x,), dynamic_shapes=dims)
    if eager_op:
        assert "0 kiln pieces" not in kiln.explain(traced) and "a piece:" not in kiln.explain(traced), \
            kiln.explain(traced)
    else:
        assert type(traced).__name__ == "KilnModule", kiln.explain(traced)
    kiln.save(traced, tmp_path / "rows.kiln")
    loaded = kiln.load(tmp_path / "rows.kiln")
    for m in (traced, loaded):
        for shape in [(6, 4), (9, 5), (3, 2), (7, 12)]:
            xs = torch.randn(*shape)
            torch.testing.assert_close(m(xs), model(xs))
        with pytest.raises(ValueError, match="a condition the program was traced under"):
            m(torch.randn(5, 5))


def test_dynamo_view_valid_only_under_a_divisibility_guard_runs_in_kiln():
    """The same view through torch.compile(dynamic=True): Dynamo's guards
    fit the probes as torch.export's do; it ran the whole graph in eager
    ("reshape changes the element count from 5120 to 5118")."""
    import warnings
    model = _RowsOfThree()
    compiled = torch.compile(model, backend="kiln", dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kiln warns when a graph runs in eager
        for shape in [(6, 4), (9, 5), (3, 2), (7, 12)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(compiled(x), model(x))


class _ViewToThreeByThree(nn.Module):
    """view(-1, 5) of x (s0, s1, 5), a matmul, a view to (3, 3, 4) and an
    rms_norm over its last two dims: torch.export keeps s0 and s1 symbolic
    under its guard 4*s0*s1 == 36, which (both at least 2) pins them to
    (3, 3)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(5, 4, generator=g), requires_grad=False)
        self.g = nn.Parameter(torch.rand(3, 4, generator=g) + 0.5, requires_grad=False)

    def forward(self, x):
        y = (x.reshape(-1, 5) @ self.w).view(3, 3, 4)
        return torch.rms_norm(y, [3, 4], self.g, 1e-6)


def test_guards_that_pin_two_symbols_to_one_size_compile(tmp_path):
    """Fuzzer seed 19019 graph 1945 (and seed 19020 graph 16345: s40 // 5 == 1
    and s6 == 5): the guards hold at one binding only, both symbols 3. The
    probe fitting scanned small sizes but kept every symbol apart from every
    other, so it never tried (3, 3); the probes stayed where the guards
    fail, the view's element count check refused it at them ("reshape
    changes the element count from 20480 to 20472") and the graph ran in
    eager. Now one kiln graph, after a save and load too, equal to eager at
    the example, and a size the guards refuse is refused."""
    import warnings
    model = _ViewToThreeByThree().eval()
    x = torch.randn(3, 3, 5)
    dims = {"x": (torch.export.Dim.AUTO,) * 3}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # kiln warns when anything runs in eager
        traced = kiln.trace(model, (x,), dynamic_shapes=dims)
    assert type(traced).__name__ == "KilnModule", kiln.explain(traced)
    kiln.save(traced, tmp_path / "pinned.kiln")
    loaded = kiln.load(tmp_path / "pinned.kiln")
    for m in (traced, loaded):
        for _ in range(2):
            xs = torch.randn(3, 3, 5)
            torch.testing.assert_close(m(xs), model(xs))
        with pytest.raises(ValueError, match="a condition the program was traced under"):
            m(torch.randn(2, 5, 5))


def test_partitioned_guards_from_a_hostile_file_are_refused():
    """The partitioned model's guards are stored as expression trees of
    whitelisted operators, never code: anything else is a corrupt artifact."""
    from kiln.errors import KilnError
    from kiln.guards import SizeGuards
    ok = SizeGuards.from_json({"sizes": [[0, 1]], "guards": [[["lt", ["sym", 0], ["int", 9]], "x < 9"]]})
    ok.check([torch.zeros(2, 3)])
    with pytest.raises(ValueError, match="x < 9"):
        ok.check([torch.zeros(2, 9)])
    for bad in ({"sizes": [[0, 1]], "guards": [[["__import__", ["int", 1]], "x"]]},
                {"sizes": [[0, 1]], "guards": [[["sym", 3], "x"]]},
                {"sizes": [[0, 1]], "guards": [[["int", "os.system('x')"], "x"]]},
                {"sizes": [[0, 1]], "guards": [[["int", True], "x"]]},
                {"sizes": "x", "guards": []},
                {"sizes": [[0, 1]], "guards": [[["add"] * 100000, "x"]]}):
        with pytest.raises(KilnError, match="corrupt artifact"):
            SizeGuards.from_json(bad)


class _DecodeStep(nn.Module):
    """One decode step of attention over a cache that grows by one row a
    call: the cache's sizes, the scores' and a cache-sized intermediate all
    follow its length L."""

    def forward(self, q, kc, vc, kn, vn):
        k = torch.cat([kc, kn], 2)
        v = torch.cat([vc, vn], 2)
        att = torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1)
        return att @ v + torch.tanh(k).mean(2, keepdim=True), k, v


def test_new_lengths_reuse_the_plan():
    """A new cache length binds an old instance again in place and keeps its
    memory plan while every arena item fits what the plan reserved (25 %
    headroom), or takes another instance's plan that fits: L growing by one
    mostly keeps it; a jump past the headroom plans again (the fallback);
    shorter lengths fit a longer one's plan. Every step equals eager."""
    from torch.export import Dim

    torch.manual_seed(0)
    m = _DecodeStep().eval()
    H, D = 2, 16
    L = Dim("L", min=1, max=1024)

    def args(n):
        g = torch.Generator().manual_seed(n)
        return (torch.randn(1, H, 1, D, generator=g), torch.randn(1, H, n, D, generator=g),
                torch.randn(1, H, n, D, generator=g), torch.randn(1, H, 1, D, generator=g),
                torch.randn(1, H, 1, D, generator=g))

    k = kiln.trace(m, args(8), dynamic_shapes=({}, {2: L}, {2: L}, {}, {}))
    assert k.stats()["symbolic"]

    def step(n):
        a = args(n)
        with torch.no_grad():
            got, want = k(*a), m(*a)
        for x, y in zip(got, want):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)
        st = k.stats()
        return st["instance_rebinds"], st["instance_plans_kept"], st["instance_plans_shared"]

    for n in range(100, 104):  # four instances made anew (the model keeps four)
        rebinds, kept, shared = step(n)
    assert k.stats()["instances"] == 4 and rebinds == 0
    for n in range(104, 164):  # every later length rebinds the oldest instance
        rebinds, kept, shared = step(n)
    assert k.stats()["instances"] == 64 and rebinds == 60
    # Growing by one: most steps keep the plan; when one outgrows its
    # headroom, one instance places anew and the others take its plan.
    assert kept >= 40 and kept + shared >= 56, (kept, shared)
    assert step(900) == (61, kept, shared)  # far past every plan: planned again
    # The instances planned for 161..163 take 900's plan, as its own serves 896 ...
    assert [step(n) for n in (899, 898, 897, 896)] == [
        (62, kept, shared + 1), (63, kept, shared + 2), (64, kept, shared + 3),
        (65, kept + 1, shared + 3)]
    assert step(30) == (66, kept + 2, shared + 3)  # ... and 899's (copied from 900's) serves 30
    step(30)  # a cached binding: no new instance
    assert k.stats()["instances"] == 70


def test_a_guard_torch_cannot_prove_over_the_dims_range_is_checked_and_dropped(capfd, monkeypatch):
    """transformers' Llama 4 MoE layer under Dim("tokens", min=1, max=24):
    torch.export raises a constraint violation on its own guard
    tokens*min(64, 64*tokens) == 64*tokens, true at every tokens >= 1 (its
    solver does not simplify the min). kiln exports again with the guard as
    a runtime assert, evaluates it at each of the 24 sizes and drops it
    (KILN_LOG says so): one kiln graph, eager's values at 1, 2, 7 and 24
    tokens, and 25 refused by the range."""
    import transformers as T
    from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

    cfg = T.Llama4TextConfig(hidden_size=64, intermediate_size=128, intermediate_size_mlp=128,
                             num_local_experts=4, num_experts_per_tok=1)
    torch.manual_seed(0)
    moe = Llama4TextMoe(cfg).eval()
    with torch.no_grad():  # its experts' weights are torch.empty until a PreTrainedModel initialises them
        for p in moe.parameters():
            p.normal_(0.0, 0.05)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.moe = moe

        def forward(self, x):
            return self.moe(x)[0]

    dims = ({1: torch.export.Dim("tokens", min=1, max=24)},)
    x = torch.randn(1, 6, 64)
    with pytest.raises(torch._dynamo.exc.UserError, match="Constraints violated"):
        torch.export.export(Layer(), (x,), dynamic_shapes=dims)  # torch alone refuses the Dim
    monkeypatch.setenv("KILN_LOG", "1")
    traced = kiln.trace(Layer(), (x,), dynamic_shapes=dims, fallback=False)
    assert "could not prove Eq(" in capfd.readouterr().err
    with torch.no_grad():
        for t in (1, 2, 7, 24):
            xs = torch.randn(1, t, 64)
            torch.testing.assert_close(traced(xs), Layer()(xs), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"dimension 1 \(tokens\) is 25, expected 1..24"):
        traced(torch.randn(1, 25, 64))


def test_a_guard_that_fails_inside_the_dims_range_is_torchs_error():
    """A view to pairs holds only for even lengths: over Dim("n", 1..24)
    torch's constraint violation reaches the user as torch raised it."""

    class Pairs(nn.Module):
        def forward(self, x):
            return x.reshape(-1, 2).sum(1)

    with pytest.raises(torch._dynamo.exc.UserError, match="Constraints violated"):
        kiln.trace(Pairs(), (torch.randn(8),), dynamic_shapes=({0: torch.export.Dim("n", min=1, max=24)},))


def test_guards_hold_in_ranges_point_by_point():
    """kiln.guards.hold_in_ranges, which lets kiln drop a guard torch could
    not prove: true only where the guard holds at every point of the box."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod
    from torch.utils._sympy.value_ranges import ValueRanges

    from kiln.guards import hold_in_ranges

    s, t = sympy.symbols("s t", integer=True)  # not positive: sympy would settle the min itself
    r = {s: ValueRanges(1, 24), t: ValueRanges(1, 3)}
    assert hold_in_ranges([sympy.Eq(s * sympy.Min(64, 64 * s), 64 * s)], r, 1 << 16)
    assert hold_in_ranges([sympy.Eq(FloorDiv(2 * s * t, 2), s * t), sympy.Le(s + t, 27)], r, 1 << 16)
    assert not hold_in_ranges([sympy.Eq(Mod(s, 2), 0)], r, 1 << 16)  # odd sizes break it
    assert not hold_in_ranges([sympy.Le(s + t, 26)], r, 1 << 16)  # only at the corner (24, 3)
    assert not hold_in_ranges([sympy.Le(s, 24)], r, 23)  # 24 points: more than the limit
    assert not hold_in_ranges([sympy.Le(s, 24)], {s: ValueRanges(1, sympy.oo)}, 1 << 16)  # unbounded
    assert hold_in_ranges([sympy.true], r, 1 << 16) and not hold_in_ranges([sympy.false], r, 1 << 16)
