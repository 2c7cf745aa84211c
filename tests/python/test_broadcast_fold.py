"""An expand read only by a broadcasting elementwise op is not copied
(kiln_simplify_broadcast.c), and an elementwise group does not take a
producer of fewer elements than its result (kiln_pass_fuse_eltwise.c:
the producer would run once per element of the result).

F.normalize divides x by norm.clamp_min(eps).expand_as(x): the expand was
a copy of the whole tensor, and without the size rule the norm's square
root would then run once per element. Results: within float32 rounding of
float64 eager (a norm of 768 squares and a division: 1e-6 relative)."""
import torch
import torch.nn.functional as F

import kiln
from conftest import plan_ops


def test_normalize_reads_the_norm_broadcast():
    class M(torch.nn.Module):
        def forward(self, x):
            return F.normalize(x, dim=-1)

    x = torch.randn(4, 16, 768)
    x[0, 0] = 0.0  # the eps clamp
    m = kiln.trace(M(), (x,))
    ops = plan_ops(m)
    assert "strided_copy" not in ops, ops
    assert "div" in ops, ops  # the division reads the (4, 16, 1) norm as it is
    torch.testing.assert_close(m(x).double(), M()(x.double()), rtol=1e-6, atol=1e-7)


def test_expand_that_sizes_the_result_stays():
    """x (4, 1) times y.expand(4, 5) is (4, 5) only through the expand:
    reading y as (1, 5) would still broadcast to it, but (4, 1) * (1, 1)
    would not, so there the expand stays."""

    class M(torch.nn.Module):
        def forward(self, x, y, z):
            return x * y.expand(4, 5), x * z.expand(4, 5)

    x, y, z = torch.randn(4, 1), torch.randn(1, 5), torch.randn(1, 1)
    m = kiln.trace(M(), (x, y, z))
    for got, want in zip(m(x, y, z), M()(x, y, z)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert plan_ops(m).count("strided_copy") == 1, m.explain()


def test_small_producer_stays_out_of_the_group():
    """RoPE-style: cos of a (S, D) table times a (B, H, S, D) tensor: the
    cos runs on the table, the multiply-add program on the big tensor."""

    class M(torch.nn.Module):
        def forward(self, x, t):
            return x * torch.cos(t) + 1.0

    x, t = torch.randn(2, 4, 16, 32), torch.randn(16, 32)
    m = kiln.trace(M(), (x, t))
    ops = plan_ops(m)
    assert "cos" in ops, m.explain()
    torch.testing.assert_close(m(x, t).double(), M()(x.double(), t.double()), rtol=1e-6, atol=1e-6)


def test_expand_that_adds_a_leading_dim_stays():
    """(16, 3) + (16, 3).expand(1, 16, 3) is (1, 16, 3): without the
    expand the sum would be (16, 3) (fuzzer seed 16 graph 191)."""

    class M(torch.nn.Module):
        def forward(self, a, b):
            return a + b.expand(1, 16, 3)

    a, b = torch.randn(16, 3), torch.randn(16, 3)
    m = kiln.trace(M(), (a, b))
    got = m(a, b)
    assert got.shape == (1, 16, 3)
    torch.testing.assert_close(got, M()(a, b), rtol=0, atol=0)
