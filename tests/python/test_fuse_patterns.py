"""Compiler patterns of the graph-compiler work: a hand-written layer norm
becomes one LAYER_NORM (kiln_simplify_patterns.c), and the GEMM fusion's
reshape look-through leaves no reshape of a reshape (kiln_pass_fuse_gemm.c);
outputs stay equal to eager's."""
import pytest
import torch
from torch import nn

import kiln
from conftest import plan_ops, trace_checked


class HandLayerNorm(nn.Module):
    """The BERT-era hand-written LayerNorm (as in the original BERT ports)."""

    def __init__(self, d, eps=1e-12, form="pow-sqrt", affine=True):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d)) if affine else None
        self.bias = nn.Parameter(torch.randn(d)) if affine else None
        self.eps = eps
        self.form = form

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        d = x - u
        if self.form == "pow-sqrt":
            s = d.pow(2).mean(-1, keepdim=True)
            y = d / torch.sqrt(s + self.eps)
        else:
            s = (d * d).mean(-1, keepdim=True)
            y = d * torch.rsqrt(s + self.eps)
        if self.weight is None:
            return y
        return self.weight * y + self.bias


@pytest.mark.parametrize("form", ["pow-sqrt", "mul-rsqrt"])
def test_hand_written_layer_norm_is_one_kernel(form):
    c = trace_checked(HandLayerNorm(48, 1e-5, form), torch.randn(3, 7, 48) * 4 + 1)
    assert plan_ops(c) == ["layer_norm"], c.explain()


def test_hand_written_layer_norm_without_affine():
    c = trace_checked(HandLayerNorm(33, 1e-6, affine=False), torch.randn(4, 33) * 2 - 1)
    assert plan_ops(c) == ["layer_norm"], c.explain()


def test_layer_norm_over_another_axis_is_left_alone():
    class Norm(nn.Module):
        def forward(self, x):
            u = x.mean(1, keepdim=True)
            d = x - u
            return d / torch.sqrt(d.pow(2).mean(1, keepdim=True) + 1e-5)

    c = trace_checked(Norm(), torch.randn(2, 5, 6))
    assert "layer_norm" not in plan_ops(c), c.explain()


class Conv1D(nn.Module):
    """transformers' Conv1D: view to rows, addmm, view back."""

    def __init__(self, nx, nf):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.randn(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def test_gemm_look_through_leaves_no_reshape_of_reshape():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = Conv1D(32, 64)
            self.b = Conv1D(64, 32)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    c = trace_checked(M(), torch.randn(1, 5, 32))
    lines = [l for l in c.explain().splitlines() if "= reshape" in l]
    ids = {l.split("=")[0].strip() for l in lines}
    for l in lines:
        src = l.split("(", 1)[1].split(")", 1)[0].strip()
        assert src not in ids, c.explain()
    assert c.stats()["kernel_calls"] == 2, c.explain()


class SummedProjections(nn.Module):
    """x + o(q(x) + k(x) + v(x)): the add of two linears is a residual for
    both chains. Both claimed it, and the second LINEAR read the first's
    skipped bias add ("value used before it was emitted")."""

    def __init__(self, d=16):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        return x + self.o(self.q(x) + self.k(x) + self.v(x))


def test_add_of_two_linears_fuses_into_one_of_them():
    torch.manual_seed(5)
    c = trace_checked(SummedProjections().eval(), torch.randn(2, 5, 16))
    # Each linear a LINEAR; the q + k add is one of them's residual, and the
    # outer x + o(...) o's.
    assert plan_ops(c).count("linear") == 4, c.explain()
