"""Elementwise-chain fusion (ELTWISE_FUSED) on the graphs real models make:
RoPE (transformers' rotate_half), embedding sums, clamps, wheres and scalar chains,
compared with eager; and the fusion's limits (a shared intermediate stays)."""
import pytest
import torch

import kiln
from conftest import FP32_TOL, plan_ops


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def compile_and_check(model, *inputs, **tol):
    model.eval()
    compiled = kiln.trace(model, inputs)
    with torch.no_grad():
        want = model(*inputs)
    torch.testing.assert_close(compiled(*inputs), want, **(tol or FP32_TOL))
    return compiled


class Rope(torch.nn.Module):
    """Llama's apply_rotary_pos_emb on q and k, cos/sin (1, 1, S, D) buffers."""

    def __init__(self, seq, dim):
        super().__init__()
        t = torch.arange(seq, dtype=torch.float32)[:, None]
        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        emb = torch.cat([t * inv, t * inv], dim=-1)
        self.cos = torch.nn.Buffer(emb.cos()[None, None])
        self.sin = torch.nn.Buffer(emb.sin()[None, None])

    def forward(self, q, k):
        q2 = (q * self.cos) + (rotate_half(q) * self.sin)
        k2 = (k * self.cos) + (rotate_half(k) * self.sin)
        return q2, k2


@pytest.mark.parametrize("seq,dim", [(7, 64), (1, 128), (33, 16)])
def test_rope_is_one_kernel_per_tensor(seq, dim):
    q = torch.randn(2, 4, seq, dim)
    k = torch.randn(2, 2, seq, dim)
    compiled = compile_and_check(Rope(seq, dim), q, k)
    text = compiled.explain()
    assert compiled.stats()["kernel_calls"] == 2, text
    assert text.count("eltwise_fused") == 2, text
    # The fused group names the ATen ops it came from.
    assert "aten.cat.default" in text and "aten.neg.default" in text, text


class ProjectedRope(torch.nn.Module):
    """As Llama's attention: q comes out of a projection, is split into heads
    and transposed (a copy), and then rotated. The slices of the transposed q
    must stay slices of it (not be composed through the transpose into views
    of the projection), or rotate_half no longer fuses."""

    def __init__(self, seq, heads, dim):
        super().__init__()
        self.heads, self.dim = heads, dim
        self.proj = torch.nn.Linear(heads * dim, heads * dim)
        self.rope = Rope(seq, dim)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.proj(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        return self.rope(q, q)[0]


def test_rope_after_a_head_transpose_still_fuses():
    compiled = compile_and_check(ProjectedRope(5, 4, 16), torch.randn(1, 5, 64))
    ops = plan_ops(compiled)
    assert "neg" not in ops and "cat" not in ops, compiled.explain()
    assert ops.count("eltwise_fused") == 1, compiled.explain()


def test_rope_with_nan_and_inf_matches_eager():
    q = torch.randn(1, 2, 5, 8)
    q[0, 0, 0, 1] = float("nan")
    q[0, 1, 2, 6] = float("inf")
    k = torch.randn(1, 2, 5, 8)
    compile_and_check(Rope(5, 8), q, k, rtol=1e-5, atol=1e-6, equal_nan=True)


class EmbeddingSum(torch.nn.Module):
    """BERT's embeddings: word + position + token type, then a scale."""

    def __init__(self):
        super().__init__()
        self.word = torch.nn.Embedding(100, 32)
        self.pos = torch.nn.Embedding(16, 32)
        self.tok = torch.nn.Embedding(2, 32)

    def forward(self, ids, pos, tt):
        return (self.word(ids) + self.pos(pos) + self.tok(tt)) * 0.5


def test_embedding_sum_adds_fuse():
    ids = torch.randint(0, 100, (2, 16))
    pos = torch.arange(16)[None].expand(2, 16).contiguous()
    tt = torch.randint(0, 2, (2, 16))
    compiled = compile_and_check(EmbeddingSum(), ids, pos, tt)
    text = compiled.explain()
    # Three gathers, then the two adds and the scale in one loop.
    assert compiled.stats()["kernel_calls"] == 4, text
    assert text.count("eltwise_fused") == 1, text


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(40))

    def forward(self, x, col):
        y = torch.tanh(x * 1.5 + self.bias) * col          # a scalar, a bias, a column
        return torch.exp(-y.abs()) + torch.floor(y) / 3.0  # y has two users


def test_clamp_bias_and_column_chain():
    x = torch.randn(3, 5, 40)
    col = torch.randn(3, 5, 1)
    compiled = compile_and_check(Chain(), x, col)
    text = compiled.explain()
    # y is read twice, both times inside the chain: still one loop.
    assert compiled.stats()["kernel_calls"] == 1, text
    assert text.count("eltwise_fused") == 1, text


class Clamp(torch.nn.Module):
    def forward(self, x, lo):
        y = torch.clamp(x * 1.5 - 0.25, -2.0, 2.0)        # lt/where, gt/where
        return torch.where(y > lo, y, lo * 2.0) + torch.clamp(x, min=0.5)


def test_clamp_and_where_fuse():
    x = torch.randn(3, 5, 40) * 3
    x[0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    lo = torch.randn(3, 5, 1)
    compiled = compile_and_check(Clamp(), x, lo, equal_nan=True, rtol=1e-5, atol=1e-6)
    text = compiled.explain()
    # One program over x's shape; lo * 2.0, of lo's smaller shape, runs
    # once per element of lo (kiln_fe_full_size), not once per element of x.
    assert compiled.stats()["kernel_calls"] == 2 and text.count("eltwise_fused") == 1, text
    assert "aten.clamp.default" in text and "aten.where.self" in text, text


def test_where_on_an_input_mask_stays_unfused():
    class M(torch.nn.Module):
        def forward(self, x, mask):
            return torch.where(mask, x.exp(), x * 2.0)

    x = torch.randn(4, 9)
    mask = torch.rand(4, 9) > 0.5
    compiled = compile_and_check(M(), x, mask)
    assert "where" in compiled.explain(), compiled.explain()


def test_shared_intermediate_is_not_recomputed():
    class M(torch.nn.Module):
        def forward(self, x):
            a = torch.sigmoid(x) * 2.0
            return a + 1.0, a.exp()

    x = torch.randn(4, 100)
    compiled = compile_and_check(M(), x)
    # `a` is a graph output's input twice over: it is computed once.
    text = compiled.explain()
    assert compiled.stats()["kernel_calls"] == 3, text
    assert text.count("fused[aten.sigmoid.default aten.mul.Tensor]") == 1, text


def test_fusion_keeps_gemm_epilogues():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(32, 64)

        def forward(self, x):
            return torch.relu(self.fc(x)) * 0.5 + 1.0

    compiled = compile_and_check(M(), torch.randn(8, 32))
    text = compiled.explain()
    assert "act=relu" in text, text
    assert compiled.stats()["kernel_calls"] == 2, text


def test_fused_artifact_round_trip(tmp_path):
    q = torch.randn(1, 2, 3, 16)
    k = torch.randn(1, 2, 3, 16)
    model = Rope(3, 16).eval()
    compiled = kiln.trace(model, (q, k))
    path = tmp_path / "rope.kiln"
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    assert "eltwise_fused" in loaded.explain(), loaded.explain()
    with torch.no_grad():
        want = model(q, k)
    torch.testing.assert_close(loaded(q, k), want, **FP32_TOL)


def test_where_of_a_constant_condition_is_its_branch():
    """torch.lerp with a scalar weight decomposes to where(weight < 0.5, a,
    b) over both formulas; the condition is a constant, so simplify keeps
    the branch it picks and only that one runs (one program, no where)."""
    x = torch.randn(4, 64)
    for w in (0.3, 0.7):
        class Lerp(torch.nn.Module):
            def forward(self, x):
                return torch.lerp(x, x * 2.0, w)

        compiled = compile_and_check(Lerp(), x, rtol=1e-6, atol=1e-6)
        text = compiled.explain()
        assert "where" not in text and compiled.stats()["kernel_calls"] == 1, text
