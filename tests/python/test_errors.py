"""Bad input gets a clear error: unsupported ops name the op and the user's
line; wrong shapes and dtypes name the input, what was expected, what came."""
import pytest
import torch

import kiln


class UsesBessel(torch.nn.Module):
    def forward(self, x):
        return torch.special.bessel_j0(x)  # kiln has no Bessel functions


def test_unsupported_op_names_op_and_source_line():
    with pytest.raises(kiln.UnsupportedOpError) as info:
        kiln.trace(UsesBessel(), torch.randn(4, 4), fallback=False)
    msg = str(info.value)
    assert "bessel_j0" in msg
    assert "test_errors.py" in msg and "torch.special.bessel_j0(x)" in msg
    assert info.value.op.startswith("aten.special_bessel_j0")


def test_wrong_shape_names_input_expected_and_got():
    m = kiln.trace(torch.nn.Linear(8, 4).eval(), torch.randn(2, 8))
    with pytest.raises(ValueError) as info:
        m(torch.randn(3, 8))
    msg = str(info.value)
    assert "input 0" in msg and "(2, 8) float32" in msg and "(3, 8) float32" in msg


def test_wrong_dtype_names_input():
    m = kiln.trace(torch.nn.Linear(8, 4).eval(), torch.randn(2, 8))
    with pytest.raises(ValueError, match=r"expected \(2, 8\) float32, got \(2, 8\) float64"):
        m(torch.randn(2, 8, dtype=torch.float64))


def test_wrong_input_count():
    m = kiln.trace(torch.nn.Linear(8, 4).eval(), torch.randn(2, 8))
    with pytest.raises(ValueError, match="takes 1 tensor inputs"):
        m(torch.randn(2, 8), torch.randn(2, 8))


def test_non_contiguous_input_is_handled():
    m = kiln.trace(torch.nn.Linear(8, 4).eval(), torch.randn(2, 8))
    x = torch.randn(8, 2).t()
    torch.testing.assert_close(m(x), m(x.contiguous()))


def test_embedding_index_out_of_range_is_an_error_not_a_read():
    emb = torch.nn.Embedding(10, 4).eval()
    m = kiln.trace(emb, torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="out of range"):
        m(torch.tensor([1, 2, 99]))
    torch.testing.assert_close(m(torch.tensor([1, 2, -1])), emb(torch.tensor([1, 2, 9])))


def test_training_mode_model_is_traced_for_inference_with_a_warning():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Dropout(0.5))
    net[1].running_mean.uniform_(-1, 1)  # eval-mode output differs from train-mode's
    x = torch.randn(2, 3, 8, 8)
    with pytest.warns(UserWarning, match=r"compiles for inference.*BatchNorm2d, Dropout"):
        m = kiln.trace(net, x)
    assert net.training  # the user's module is left as it was
    with torch.no_grad():
        want = net.eval()(x)
    torch.testing.assert_close(m(x), want)


def test_trace_leaves_each_submodules_mode_as_it_was():
    """A model in training mode whose norm the user froze in eval mode: after
    kiln.trace, the norm is still in eval mode (model.train() would have
    flipped it), the rest still training."""
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.5))
    net[1].eval()
    with pytest.warns(UserWarning, match="compiles for inference"):
        kiln.trace(net, (torch.randn(2, 4),))
    assert [m.training for m in net] == [True, False, True] and net.training


def test_eval_mode_model_traces_without_a_mode_warning():
    import warnings

    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        kiln.trace(net, torch.randn(2, 4))
