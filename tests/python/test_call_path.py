"""The compiled module's call path: the fast path for well-formed inputs and
the checked path for everything else give the same results and the same
errors; outputs are fresh tensors each call; Model.set_threads switches the
pool a model runs on (the model benchmark times 2 and 1 threads in one
process with it)."""
import pytest
import torch

import kiln
from conftest import FP32_TOL


class TwoOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x, y):
        h = self.fc(x)
        return torch.nn.functional.gelu(h), h * y


class DictOut(torch.nn.Module):
    def forward(self, x):
        return {"a": x.relu(), "b": x + 1}


def _traced():
    model = TwoOut().eval()
    x, y = torch.randn(16, 64), torch.randn(16, 32)
    return model, kiln.trace(model, (x, y)), x, y


def test_fast_and_checked_paths_agree_with_eager():
    model, k, x, y = _traced()
    with torch.no_grad():
        want = model(x, y)
    got = k(x, y)   # fast path: contiguous float32 CPU tensors
    assert isinstance(got, tuple) and len(got) == 2
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **FP32_TOL)
    # Non-contiguous inputs take the checked path, which makes them contiguous.
    xt = x.t().contiguous().t()
    assert not xt.is_contiguous()
    for g, w in zip(k(xt, y), want):
        torch.testing.assert_close(g, w, **FP32_TOL)
    # A Parameter (a Tensor subclass) takes the checked path too.
    for g, w in zip(k(torch.nn.Parameter(x, requires_grad=False), y), want):
        torch.testing.assert_close(g, w, **FP32_TOL)


def test_outputs_are_fresh_contiguous_tensors():
    _, k, x, y = _traced()
    a, b = k(x, y), k(x, y)
    for o1, o2 in zip(a, b):
        assert o1.is_contiguous() and o1.dtype == torch.float32
        assert o1.data_ptr() != o2.data_ptr()
        torch.testing.assert_close(o1, o2, rtol=0, atol=0)
    a[0].add_(1.0)   # writing one call's output does not touch the next's
    torch.testing.assert_close(k(x, y)[0], b[0], rtol=0, atol=0)


def test_pytree_outputs_keep_their_structure():
    x = torch.randn(3, 5)
    got = kiln.trace(DictOut(), (x,))(x)
    assert set(got) == {"a", "b"}
    torch.testing.assert_close(got["a"], x.relu())
    torch.testing.assert_close(got["b"], x + 1)


def test_fast_path_errors_name_input_expected_and_got():
    _, k, x, y = _traced()
    with pytest.raises(ValueError) as info:
        k(torch.randn(16, 63), y)
    msg = str(info.value)
    assert "input 0" in msg and "(16, 64) float32" in msg and "(16, 63) float32" in msg
    with pytest.raises(ValueError) as info:
        k(x, y.double())
    msg = str(info.value)
    assert "input 1" in msg and "(16, 32) float32" in msg and "(16, 32) float64" in msg
    with pytest.raises(ValueError) as info:
        k(x)
    assert "takes 2 tensor inputs" in str(info.value)
    with pytest.raises(TypeError) as info:
        k(x, 3.0)
    assert "input 1" in str(info.value) and "float" in str(info.value)


def test_set_threads_switches_the_pool_and_keeps_results():
    _, k, x, y = _traced()
    cm = k._kiln_model
    default = cm.threads()
    assert default == kiln._C.num_threads()
    ref = k(x, y)
    for n in (1, 2, 3):
        cm.set_threads(n)
        assert cm.threads() == n
        for g, w in zip(k(x, y), ref):
            torch.testing.assert_close(g, w, **FP32_TOL)
    cm.set_threads(0)
    assert cm.threads() == default
    for bad in (-1, 100000):
        with pytest.raises(ValueError) as info:
            cm.set_threads(bad)
        assert str(bad) in str(info.value)
    assert cm.threads() == default


def test_given_outputs_are_checked():
    """run_flat's given outputs (how kiln.dynamo writes a cache in place):
    written into when well formed; a wrong dtype or a non-contiguous tensor
    is refused in Python (the descriptor carries the model's dtype, C writes
    dense rows), a wrong shape by C, naming the output, expected and got."""
    from kiln.errors import KilnError

    model, k, x, y = _traced()
    with torch.no_grad():
        want = model(x, y)
    into = torch.empty(16, 32)
    got = k.run_flat([x, y], {1: into})
    assert got[1] is into
    torch.testing.assert_close(into, want[1], **FP32_TOL)
    with pytest.raises(KilnError, match="output 1.*float64"):
        k.run_flat([x, y], {1: torch.empty(16, 32, dtype=torch.float64)})
    with pytest.raises(KilnError, match="output 1.*non-contiguous"):
        k.run_flat([x, y], {1: torch.empty(32, 16).t()})
    with pytest.raises(ValueError) as info:
        k.run_flat([x, y], {1: torch.empty(16, 31)})
    msg = str(info.value)
    assert "output 1" in msg and "(16, 32) float32" in msg and "(16, 31) float32" in msg


def test_symbolic_outputs_made_by_the_run():
    """A symbolic model's outputs are made inside the C call once the sizes
    give their shapes (Model.run's make): right shapes and values at two
    sizes, a given output beside a made one, and a wrong size named."""
    from torch.export import Dim

    model = TwoOut().eval()
    x, y = torch.randn(16, 64), torch.randn(16, 32)
    k = kiln.trace(model, (x, y), dynamic_shapes={"x": {0: Dim("batch", max=64)}, "y": {0: Dim("batch", max=64)}})
    assert k._symbolic
    for n in (5, 33):
        xs, ys = torch.randn(n, 64), torch.randn(n, 32)
        with torch.no_grad():
            want = model(xs, ys)
        for g, w in zip(k(xs, ys), want):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w, **FP32_TOL)
        into = torch.empty(n, 32)
        got = k.run_flat([xs, ys], {1: into})
        assert got[1] is into and got[0].shape == (n, 32)
        torch.testing.assert_close(into, want[1], **FP32_TOL)
    with pytest.raises(ValueError, match="input 1"):
        k(torch.randn(5, 64), torch.randn(6, 32))
