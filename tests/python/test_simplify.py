"""The simplify pass (src/compiler/kiln_pass_simplify.c): hand-written
activations and norms become fused ops, repeated work runs once, identities
disappear, contiguous slices are views; outputs stay equal to eager's."""

import math

import torch
from torch import nn

import kiln
from conftest import plan_ops, trace_checked


class NewGELU(nn.Module):
    """transformers' gelu_new, as GPT-2 writes it."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class ErfGELU(nn.Module):
    def forward(self, x):
        return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class RMSNorm(nn.Module):
    """transformers' LlamaRMSNorm."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d))
        self.eps = eps

    def forward(self, h):
        variance = h.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(torch.float32)


class MLPBlock(nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc = nn.Linear(64, 128)
        self.act = act

    def forward(self, x):
        # Conv1D-style: matmul on 2-d rows, then a view back, then the act.
        y = self.fc(x.view(-1, 64)).view(x.shape[0], x.shape[1], 128)
        return self.act(y)


def test_hand_written_gelu_tanh_fuses_into_the_gemm():
    torch.manual_seed(0)
    c = trace_checked(MLPBlock(NewGELU()), torch.randn(2, 5, 64) * 3)
    assert "act=gelu_tanh" in c.explain() and c.stats()["kernel_calls"] == 1, c.explain()


def test_hand_written_erf_gelu_and_silu_fuse():
    torch.manual_seed(0)
    c = trace_checked(MLPBlock(ErfGELU()), torch.randn(2, 5, 64) * 3)
    assert "act=gelu" in c.explain() and c.stats()["kernel_calls"] == 1, c.explain()

    class Silu(nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(x)

    c = trace_checked(MLPBlock(Silu()), torch.randn(2, 5, 64))
    assert "act=silu" in c.explain() and c.stats()["kernel_calls"] == 1, c.explain()


def test_hand_written_rms_norm_is_one_kernel():
    torch.manual_seed(0)
    c = trace_checked(RMSNorm(48), torch.randn(3, 7, 48) * 4 + 1)
    assert plan_ops(c) == ["rms_norm"], c.explain()


def test_rms_norm_without_weight_and_with_division():
    class Norm(nn.Module):
        def forward(self, x):
            return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)

    c = trace_checked(Norm(), torch.randn(4, 33))
    assert plan_ops(c) == ["rms_norm"], c.explain()


def test_norm_over_another_axis_is_left_alone():
    class Norm(nn.Module):
        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6)

    c = trace_checked(Norm(), torch.randn(4, 33))
    assert "rms_norm" not in plan_ops(c), c.explain()


def test_a_partial_pattern_still_computes_its_shared_intermediates():
    class Shared(nn.Module):
        def forward(self, x):
            s = torch.sigmoid(x)
            return x * s, s + 1  # s is read twice: silu fuses, s stays

    c = trace_checked(Shared(), torch.randn(10))
    # sigmoid and the add then fuse into one loop (fuse_eltwise).
    assert sorted(plan_ops(c)) == ["eltwise_fused", "silu"], c.explain()
    assert "fused[aten.sigmoid.default aten.add.Tensor]" in c.explain(), c.explain()


def test_common_subexpressions_run_once():
    class Twice(nn.Module):
        def forward(self, x):
            return torch.sin(x) * 2 + torch.sin(x) * 2

    c = trace_checked(Twice(), torch.randn(5, 6))
    # One sin·2, added to itself, all in one loop (fuse_eltwise): the fused
    # group lists each op it came from once.
    assert plan_ops(c) == ["eltwise_fused"], c.explain()
    assert "fused[aten.sin.default aten.mul.Tensor aten.add.Tensor]" in c.explain(), c.explain()


def test_identities_disappear_and_keep_zero_signs():
    class Ids(nn.Module):
        def forward(self, x, i):
            return x * 1 / 1 - 0, (i + 0) * 1, x + 0.0

    x = torch.tensor([-0.0, 0.0, 1.5, -2.0, float("nan"), float("inf")])
    i = torch.arange(6)
    c = trace_checked(Ids(), x, i)
    assert plan_ops(c) == ["add"], c.explain()  # only x + 0.0 (-0 + 0 is +0) stays
    out = c(x, i)
    assert torch.equal(out[2].signbit(), (x + 0.0).signbit())


def test_contiguous_slices_are_views_not_copies():
    class Cache(nn.Module):
        def forward(self, past, new):
            layers = [torch.cat([past[i], new], dim=1) for i in range(past.shape[0])]
            return torch.stack(layers).sum(), layers[1]

    past, new = torch.randn(3, 2, 16, 8), torch.randn(2, 1, 8)
    c = trace_checked(Cache(), past, new)
    assert "strided_copy" not in plan_ops(c) or c.stats()["kernel_calls"] < len(plan_ops(c)), c.explain()
    assert c.stats()["kernel_calls"] == 3 + 1 + 1, c.explain()  # 3 cats, stack, sum


def test_transposed_matmul_operands_are_read_in_place_and_shown():
    class Grads(nn.Module):
        def forward(self, dy, x, w):
            return dy.t() @ x, x @ w.t()

    c = trace_checked(Grads(), torch.randn(8, 4), torch.randn(8, 5), torch.randn(3, 5))
    # No copy for either transpose: each matmul reads its operand transposed,
    # and explain says which.
    assert plan_ops(c) == ["matmul", "matmul"], c.explain()
    lines = [ln for ln in c.explain().splitlines() if "= matmul" in ln]
    assert "read=aT" in lines[0] and "read=bT" in lines[1], c.explain()


def test_a_bf16_value_widened_and_narrowed_again_is_itself():
    """bf16 -> fp32 is exact and fp32 -> bf16 of a value bf16 holds rounds to
    it, so casting back is the bf16 value (autocast's graphs widen a rounded
    tensor for one reader and narrow it again for another): the narrowing
    and the widening stay, the third cast goes, and the results are eager's bit for bit, NaN, infinities and -0 included."""
    class Round(nn.Module):
        def forward(self, x):
            h = x.to(torch.bfloat16)
            w = h.float()
            return w * 2.0, w.to(torch.bfloat16)

    x = torch.tensor([1.0 + 2 ** -10, -0.0, float("nan"), float("inf"), -3.3e38, 1e-40, 0.1] * 3)
    c = kiln.trace(Round().eval(), (x,), fallback=False)
    got, want = c(x), Round()(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g.isnan(), w.isnan())
        assert torch.equal(g[~w.isnan()].view(torch.int16 if g.dtype == torch.bfloat16 else torch.int32),
                           w[~w.isnan()].view(torch.int16 if w.dtype == torch.bfloat16 else torch.int32))
    assert plan_ops(c).count("cast") == 2, c.explain()
