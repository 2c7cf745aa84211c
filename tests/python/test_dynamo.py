"""torch.compile(model, backend="kiln")."""
import importlib.metadata

import pytest
import torch

import kiln
from conftest import FP32_TOL


def test_backend_is_registered_by_entry_point():
    names = [ep.name for ep in importlib.metadata.entry_points(group="torch_dynamo_backends")]
    assert "kiln" in names
    assert "kiln" in torch._dynamo.list_backends()


def test_torch_compile_inference_matches_eager():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)).eval()
    x = torch.randn(8, 64)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), **FP32_TOL)
        torch.testing.assert_close(compiled(x + 1), model(x + 1), **FP32_TOL)


def test_torch_compile_transformer_layer():
    torch._dynamo.reset()
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True).eval()
    x = torch.randn(2, 10, 32)
    compiled = torch.compile(layer, backend="kiln")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x), **FP32_TOL)


def test_unsupported_graph_falls_back_to_eager_with_a_warning():
    torch._dynamo.reset()
    import kiln.partition
    kiln.partition._warned.clear()  # the warning is once per process

    def f(x):
        return torch.special.bessel_j0(x) * 2

    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="kiln")(torch.ones(4))
    torch.testing.assert_close(out, torch.special.bessel_j0(torch.ones(4)) * 2)
    assert any("bessel_j0" in str(x.message) for x in w)


@pytest.mark.parametrize("guard_filter", [None, "skip_guard_on_all_nn_modules_unsafe"])
def test_inference_parameters_are_constants_and_never_stale(guard_filter):
    """Under no_grad the graph's parameters are kiln constants (packed once,
    as Inductor's freezing); a parameter written in place or replaced later
    (load_state_dict, an optimizer step) recompiles, never runs stale. kiln
    checks its frozen parameters itself on every call, so this holds also
    when torch's guard_filter_fn drops Dynamo's guards on the modules (the
    README's decode-step advice)."""
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()
    x = torch.randn(3, 8)
    options = {"guard_filter_fn": getattr(torch.compiler, guard_filter)} if guard_filter else None
    with torch.no_grad():
        f = torch.compile(m, backend="kiln", options=options)
        torch.testing.assert_close(f(x), m(x))
        m[0].weight.mul_(2)
        torch.testing.assert_close(f(x), m(x))
        m.load_state_dict({k: torch.randn_like(v) for k, v in m.state_dict().items()})
        torch.testing.assert_close(f(x), m(x))


def test_graphs_of_one_model_share_packed_weights():
    """Prefill and decode graphs (or any graphs compiled from the same frozen
    parameters) hold one packed copy of each weight, freed with the last."""
    import gc

    import torch._dynamo
    from kiln import _C

    torch._dynamo.reset()
    gc.collect()
    before = _C.shared_constants()
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).eval()
    with torch.no_grad():
        f = torch.compile(m, backend="kiln", dynamic=False)
        for n in (3, 5, 7):  # three static graphs
            x = torch.randn(n, 64)
            torch.testing.assert_close(f(x), m(x))
        assert _C.shared_constants() - before == 2  # one packed form per weight, not per graph
        m[0].weight.add_(1.0)  # a new version: packed again, never the stale form
        x = torch.randn(3, 64)
        torch.testing.assert_close(f(x), m(x))
    del f
    torch._dynamo.reset()
    gc.collect()
    assert _C.shared_constants() == before


def test_frozen_unchanged_checks_identity_and_version():
    """_C.frozen_unchanged, the per-call check of frozen parameters
    (_guard_frozen): the same objects at the same versions, else False."""
    from kiln import _C

    a, b, x = torch.zeros(3), torch.ones(2), torch.zeros(1)
    args = (x, a, x, b)
    seen = (a, b), (a._version, b._version)
    assert _C.frozen_unchanged(args, (1, 3), *seen)
    assert _C.frozen_unchanged(list(args), (1, 3), *seen)
    assert not _C.frozen_unchanged((x, a.clone(), x, b), (1, 3), *seen)  # another tensor
    assert not _C.frozen_unchanged((x, a), (1, 3), *seen)  # fewer arguments
    b.add_(1)
    assert not _C.frozen_unchanged(args, (1, 3), *seen)  # written in place
    with pytest.raises(TypeError, match="tuples of one length"):
        _C.frozen_unchanged(args, (1,), *seen)
