"""In-place updates of buffers and inputs under kiln.trace with fallback on:
torch.export turns them into extra graph outputs (buffer and user-input
mutations); the partitioned module returns them from the graph and copies
them into the module's buffers or the caller's tensors after each call, so
state evolves as in eager. With fallback=False they stay a clear error.
Exact comparisons: the updates are the same float ops in the same order.
"""

import os

import pytest
import torch
from torch.testing import assert_close

import kiln


class Counter(torch.nn.Module):
    """A running sum in a buffer; `eager_op` adds an op kiln lacks (cummax)."""

    def __init__(self, eager_op):
        super().__init__()
        self.eager_op = eager_op
        self.register_buffer("total", torch.zeros(3))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.total.add_(x.sum(0))
        self.calls += 1
        y = torch.cummax(x, 0)[0] if self.eager_op else x
        return y * 2 + self.total / self.calls


@pytest.mark.filterwarnings("ignore:kiln")
@pytest.mark.parametrize("eager_op", [False, True])
def test_buffer_updates_follow_eager_over_calls(eager_op):
    model, ref = Counter(eager_op), Counter(eager_op)
    compiled = kiln.trace(model, (torch.randn(4, 3),))
    torch.manual_seed(0)
    for _ in range(3):
        x = torch.randn(4, 3)
        assert_close(compiled(x), ref(x), rtol=0, atol=0)
        assert_close(model.total, ref.total, rtol=0, atol=0)  # the module's own buffers
        assert_close(model.calls, ref.calls, rtol=0, atol=0)
    assert float(model.calls) == 3


def test_buffer_updates_without_fallback_are_refused():
    with pytest.raises(kiln.KilnError, match="mutates state"):
        kiln.trace(Counter(False), (torch.randn(4, 3),), fallback=False)


class AddToInput(torch.nn.Module):
    def forward(self, x, y):
        x.mul_(2.0).add_(1.0)
        return torch.cummax(y, 0)[0] + x


@pytest.mark.filterwarnings("ignore:kiln")
def test_input_updates_are_written_back_and_survive_save_load(tmp_path):
    x, y = torch.randn(5), torch.randn(5)
    compiled = kiln.trace(AddToInput(), (x.clone(), y))
    got_x, want_x = x.clone(), x.clone()
    assert_close(compiled(got_x, y), AddToInput()(want_x, y), rtol=0, atol=0)
    assert_close(got_x, want_x, rtol=0, atol=0)
    path = os.path.join(tmp_path, "m.kiln")
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    got_x = x.clone()
    assert_close(loaded(got_x, y), AddToInput()(x.clone(), y), rtol=0, atol=0)
    assert_close(got_x, want_x, rtol=0, atol=0)


class FunctionalBatchNorm(torch.nn.Module):
    """Training-mode batch norm on running statistics the caller owns (a
    module in train mode is traced in eval mode by kiln.trace; this is the
    same op with its running-stat update)."""

    def forward(self, x, running_mean, running_var):
        return torch.nn.functional.batch_norm(x, running_mean, running_var, training=True, momentum=0.1)


@pytest.mark.filterwarnings("ignore:kiln")
def test_batch_norm_running_stats_follow_eager_over_calls():
    torch.manual_seed(1)
    x = torch.randn(4, 3, 5, 5)
    compiled = kiln.trace(FunctionalBatchNorm(), (x, torch.zeros(3), torch.ones(3)))
    got_m, got_v, want_m, want_v = torch.zeros(3), torch.ones(3), torch.zeros(3), torch.ones(3)
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5) * 2 + 1
        # Normalisation and statistics reduce in another order than eager's.
        assert_close(compiled(x, got_m, got_v), FunctionalBatchNorm()(x, want_m, want_v), rtol=1e-5, atol=1e-5)
        assert_close(got_m, want_m, rtol=1e-5, atol=1e-6)
        assert_close(got_v, want_v, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got_m, torch.zeros(3))  # the statistics did move
