"""CPU fallback around ops whose output size depends on the data
(masked_select): kiln compiles static shapes, so the op and everything that
reads its data-dependent result run in eager; the static parts around them
still compile. Found by the coverage harness's fallback re-run
(masked_select's OpInfo samples). Reductions in another order than eager's:
1e-5 relative / 1e-6 absolute.
"""

import pytest
import torch
from torch.testing import assert_close

import kiln

TOL = dict(rtol=1e-5, atol=1e-6)


class SumOfSelected(torch.nn.Module):
    def forward(self, x, m):
        return torch.masked_select(x * 2, m).sum() + x.exp().sum()


class CatSelected(torch.nn.Module):
    """cat's handler reads its output's size, which depends on the data:
    kiln must leave it to eager without asking (combinations' samples)."""

    def forward(self, x):
        return torch.cat([torch.masked_select(x, x > 0), x.flatten() * 2])


class ScaleSelected(torch.nn.Module):
    def forward(self, x):
        return torch.masked_select(x, x > 0) * 3 + 1


@pytest.mark.filterwarnings("ignore:kiln")
def test_data_dependent_shapes_fall_back_with_static_parts_in_kiln():
    torch.manual_seed(3)
    x = torch.randn(4, 5)
    compiled = kiln.trace(SumOfSelected(), (x, x > 0))
    assert compiled.n_pieces >= 1
    for _ in range(2):
        x = torch.randn(4, 5)
        assert_close(compiled(x, x > 0.5), SumOfSelected()(x, x > 0.5), **TOL)
    compiled = kiln.trace(ScaleSelected(), (x,))
    x = torch.randn(4, 5) + 0.7
    assert_close(compiled(x), ScaleSelected()(x), **TOL)  # another count of selected elements
    compiled = kiln.trace(CatSelected(), (x,))
    x = torch.randn(4, 5)
    assert_close(compiled(x), CatSelected()(x), rtol=0, atol=0)


def test_data_dependent_shapes_without_fallback_name_the_op():
    x = torch.randn(4, 5)
    with pytest.raises(kiln.UnsupportedOpError, match="masked_select"):
        kiln.trace(ScaleSelected(), (x,), fallback=False)
