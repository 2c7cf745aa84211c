"""Single ops under torch.compile(dynamic=True): sizes are SymInts, and a
handler that needs a number must refuse (the op runs in eager) rather than
crash the compile or give a wrong answer. Each test compiles once and runs
two sizes against eager in float64, and checks where the op ran (found by
tests/coverage/opinfo_coverage.py --dynamic)."""

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

import kiln  # (kiln.trace; importing it registers the backend)


@pytest.fixture
def counters(fresh_dynamo):
    """torch's compile counters, cleared, with Dynamo reset (conftest)."""
    return fresh_dynamo


def _run(fn, shapes, counters, in_kiln=True, exact=False, make=None, one_graph=True):
    """fn compiled once with dynamic=True, at each input shape in shapes
    (a list of tuples of shapes, one per input), against fn in float64.
    in_kiln: every op runs in kiln (else: some op falls back to eager)."""
    f = torch.compile(fn, backend="kiln", dynamic=True)
    for shape in shapes:
        args = [make(s) if make else torch.randn(*s) for s in shape]
        with torch.no_grad():
            got = f(*[a.clone() for a in args])
            want = fn(*[a.double() if a.is_floating_point() else a for a in args])
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        want = list(want) if isinstance(want, (tuple, list)) else [want]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (g.shape, w.shape)
            w = w.float() if w.dtype == torch.float64 else w
            if exact:
                assert torch.equal(g, w)
            else:
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    graphs = counters["kiln"]["graphs"]
    assert graphs == 1 or (not one_graph and graphs > 0), dict(counters["kiln"])  # one compile for both sizes
    if in_kiln:
        assert counters["kiln"]["whole"] == graphs, (dict(counters["kiln"]), dict(counters["kiln_fallback"]))
    else:
        assert counters["kiln"]["partitioned"] + counters["kiln"]["eager"] == graphs, dict(counters["kiln"])


def test_group_norm_takes_its_sizes_from_the_input(counters):
    """native_group_norm's N, C, HxW arguments are FX nodes under symbolic
    sizes: `C % group` once crashed the compile (BackendCompilerFailed,
    TypeError: unsupported operand type(s) for %: 'Node' and 'int'). They
    now come from the input's kiln shape; one group needs no number."""
    _run(lambda x: F.group_norm(x[None], 1) + 1, [((3, 5),), ((4, 6),)], counters)


def test_group_norm_over_a_symbolic_channel_count_falls_back(counters):
    """Two groups over a symbolic C: the group's width C / 2 must be a
    number, so the op runs in eager, right, instead of crashing."""
    _run(lambda x, w: F.group_norm(x, 2, w) * 2, [((2, 4, 5, 3), (4,)), ((3, 6, 6, 7), (6,))], counters,
         in_kiln=False)
    assert "aten.native_group_norm.default" in counters["kiln_fallback"], dict(counters["kiln_fallback"])


@pytest.mark.parametrize("fn", [
    lambda x: x[:, x.shape[1] // 2:],
    lambda x: x[x.shape[0] // 2:],
    lambda x: x.narrow(1, x.shape[1] - 2, 2),
    lambda x: torch.chunk(x, 2, dim=1)[1],
], ids=["slice-cols", "slice-rows", "narrow", "chunk-item"])
def test_a_view_of_an_input_with_a_symbolic_offset(counters, fn):
    """A graph output that is a view of an input at a symbolic offset:
    AOTAutograd cannot replay such views and rebuilt the output as
    input.as_strided(...) of kiln's dense copy's layout (offset 0): the
    wrong elements (x[:, n // 2:] gave x's first elements). Such outputs
    are now the graph's own views, made in eager PyTorch."""
    _run(fn, [((4, 5),), ((6, 7),)], counters, exact=True, make=lambda s: torch.arange(s[0] * s[1]).float().view(s))


@pytest.mark.parametrize("fn", [
    lambda x: torch.chunk(x, 3, dim=1),
    lambda x: [t * 2 for t in torch.chunk(x, 3, dim=1)],
    lambda x: [t + 1 for t in torch.split(x, [2, x.shape[0] - 2], dim=0)],
], ids=["chunk", "chunk-used", "split-sizes"])
def test_split_into_symbolic_sizes(counters, fn):
    """split_with_sizes with SymInt sizes (torch.chunk of a symbolic dim)
    once crashed the compile ('Node' object cannot be interpreted as an
    integer): each piece now takes its size from torch's result."""
    _run(fn, [((5, 5),), ((7, 7),)], counters, exact=True)


@pytest.mark.parametrize("fn", [
    lambda x: F.adaptive_avg_pool2d(x, (None, 3)),
    lambda x: F.adaptive_avg_pool2d(x, (None, None)),
    lambda x: F.adaptive_avg_pool2d(x, (1, 1)),
], ids=["none-3", "none-none", "global"])
def test_adaptive_avg_pool_to_its_own_symbolic_size(counters, fn):
    """An adaptive pool's output size None is the input's (a SymInt node):
    _ints once called int() on it (TypeError). A size pooled to itself is
    an even split; other splits of a symbolic size run as before. (The
    sizes are literals: dynamic=True makes a closure's int a SymInt, and a
    symbolic output size is refused: eager.)"""
    _run(fn, [((2, 3, 5, 6),), ((2, 3, 7, 9),)], counters)


def test_adaptive_avg_pool_to_a_symbolic_output_size_falls_back(counters):
    out = (None, 3)  # out[1] is a SymInt under dynamic=True: a size kiln needs as a number
    _run(lambda x: F.adaptive_avg_pool2d(x, out), [((2, 3, 5, 6),), ((2, 3, 7, 9),)], counters, in_kiln=False)
    assert "aten._adaptive_avg_pool2d.default" in counters["kiln_fallback"], dict(counters["kiln_fallback"])


def test_repeat_by_a_symbolic_count(counters):
    """repeat with a SymInt count (instance_norm repeats its stats by the
    batch) once raised TypeError from int(Node); the repeat runs in kiln."""
    _run(lambda x, y: x.repeat(y.shape[0], 1) + 1, [((2, 3), (4,)), ((3, 5), (6,))], counters)


def test_instance_norm_does_not_crash(counters):
    """instance_norm: its repeats and its batch norm with batch statistics
    run in kiln; the result is eager's."""
    _run(lambda x: F.instance_norm(x), [((2, 3, 5),), ((3, 4, 7),)], counters)


def test_an_item_of_an_op_kiln_cannot_hold_falls_back(counters):
    """instance_norm with running stats over N == C (one symbol s): batch
    norm's statistics are (s**2,). kiln held no such size (sympy Pow), so
    the op's stand-in failed, and getitem of it raised TypeError ('_Poison'
    object is not subscriptable) through the compile. s**2 is a size now
    (a product), and an item of a value kiln cannot hold is refused (eager,
    below); the running stats are updated as eager's (the whole graph now
    runs in kiln: symbolic batch norm training)."""
    g = lambda x, rm, rv: F.instance_norm(x, rm, rv, use_input_stats=True)  # noqa: E731
    f = torch.compile(g, backend="kiln", dynamic=True)
    for s in [(3, 3, 5), (4, 4, 6)]:
        x, rm, rv = torch.randn(*s), torch.zeros(s[1]), torch.ones(s[1])
        rm2, rv2 = rm.clone(), rv.clone()
        torch.testing.assert_close(f(x, rm, rv), g(x, rm2, rv2))
        torch.testing.assert_close((rm, rv), (rm2, rv2))
    assert counters["kiln"]["graphs"] == 1, dict(counters["kiln"])


def test_getitem_of_a_value_kiln_cannot_hold_is_refused():
    import operator

    from kiln.capture import _Poison
    from kiln.errors import Unsupported
    from kiln.optable import TABLE

    g = torch.fx.Graph()
    x = g.placeholder("x")
    node = g.call_function(torch.ops.aten.var_mean.correction, (x,))
    item = g.call_function(operator.getitem, (node, 0))

    class Ctx:
        env = {node: _Poison(node, "a size kiln cannot hold")}

    with pytest.raises(Unsupported, match="a size kiln cannot hold"):
        TABLE[operator.getitem](Ctx(), item)


def test_sizes_of_one_symbol_multiplied(counters):
    """(s, s, s) flattened is s**3 in torch's expression (a sympy Pow),
    which kiln refused ('the symbolic size s**3 (Pow)': eager); it is a
    product of sizes now, and the view runs in kiln."""
    _run(lambda x: x.flatten() * 2, [((3, 3, 3),), ((4, 4, 4),)], counters)
    torch._dynamo.reset()
    counters.clear()
    _run(lambda x: x.reshape(x.shape[0] * x.shape[1], -1).sum(1), [((3, 3, 2),), ((5, 5, 2),)], counters)


def test_circular_pad_scatters_at_a_symbolic_start(counters):
    """pad(mode='circular') decomposes to slice_scatter at a start that is
    a SymInt node; `start < 0` once raised TypeError."""
    _run(lambda x: F.pad(x, (1, 2), mode="circular"), [((2, 3, 5),), ((3, 4, 7),)], counters)


@pytest.mark.parametrize("fn", [
    lambda x: torch.var(x, dim=1),
    lambda x: torch.var(x, correction=0),
    lambda x: torch.std(x, dim=(0, 2), keepdim=True),
    lambda x: torch.var(x, dim=-1, correction=0.5),
    lambda x: torch.var_mean(x, dim=0),
    lambda x: torch.std_mean(x, dim=1, correction=2),
], ids=["var-dim", "var-all-biased", "std-keepdim", "var-float-correction", "var_mean", "std_mean"])
def test_variance_over_a_symbolic_count(counters, fn):
    """var / std / var_mean with a symbolic number of elements N: the
    divisor max(N - correction, 0) is a size computed per call (once: the
    op ran in eager, 'a symbolic size ... where kiln needs a number')."""
    _run(fn, [((3, 5, 4),), ((4, 7, 6),)], counters)


def test_variance_of_too_few_elements(counters):
    """N - correction <= 0 at one of the sizes: torch's divisor is 0 (inf or
    nan), kiln's the same."""
    f = torch.compile(lambda x: torch.var(x, dim=1, correction=3), backend="kiln", dynamic=True)
    for shape in ((3, 5), (3, 3), (4, 2)):
        x = torch.randn(*shape)
        torch.testing.assert_close(f(x), torch.var(x.double(), dim=1, correction=3).float(), equal_nan=True)


@pytest.mark.parametrize("shapes", [[(4, 3, 5), (6, 3, 7)], [(4, 3), (7, 3)], [(2, 3, 4, 5), (3, 3, 6, 2)]],
                         ids=["1d", "flat", "2d"])
def test_batch_norm_training_over_a_symbolic_batch(counters, shapes):
    """Batch norm with batch statistics over a symbolic element count n per
    channel: the running variance's n / (n - 1) is computed per call (once:
    eager, 'a symbolic size ... where kiln needs a number'). Outputs and
    running statistics equal eager's at two sizes."""
    import torch.nn as nn

    torch.manual_seed(0)
    m = nn.BatchNorm2d(3) if len(shapes[0]) == 4 else nn.BatchNorm1d(3)
    ref = type(m)(3)
    ref.load_state_dict(m.state_dict())
    f = torch.compile(m, backend="kiln", dynamic=True)
    for s in shapes:
        x = torch.randn(*s)
        torch.testing.assert_close(f(x), ref(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close((m.running_mean, m.running_var), (ref.running_mean, ref.running_var))
    assert counters["kiln"]["graphs"] == counters["kiln"]["whole"] > 0, (dict(counters["kiln"]),
                                                                         dict(counters["kiln_fallback"]))


@pytest.mark.parametrize("fn", [
    lambda x: x.flip(0),
    lambda x: x.flip(1) * 2,
    lambda x: x.flip(0, 2) + 1,
    lambda x: torch.fliplr(x) - 1,
], ids=["dim0", "dim1", "dims", "fliplr"])
def test_flip_of_a_symbolic_dim(counters, fn):
    """flip reads a symbolic dim backwards from its last element (it asked
    'size > 1' of a symbolic size: eager)."""
    _run(fn, [((3, 4, 5),), ((5, 6, 7),)], counters, exact=True)


@pytest.mark.parametrize("fn", [
    lambda x: x.sum(1) > x.shape[1],
    lambda x: torch.arange(x.shape[0]) == x.shape[0] - 1,
    lambda x: x.argmax(1) == x.shape[1] - 1,
], ids=["float-gt-size", "arange-eq-size", "argmax-eq-size"])
def test_a_comparison_with_a_size(counters, fn):
    """A tensor compared with a size (a SymInt node): the comparison's
    dtype promotion called .dim() on the SymInt (AttributeError crashed the
    compile; OpInfo isin). The size is a Python int operand there."""
    _run(fn, [((3, 4),), ((5, 6),)], counters, exact=True)


@pytest.mark.parametrize("fn", [
    lambda x: x.clone().fill_diagonal_(0),
    lambda x: torch.as_strided(x, (x.shape[0] - 1, 2), (x.shape[1], 1), x.shape[1] - 2) * 2,
], ids=["fill_diagonal_", "as_strided"])
def test_as_strided_by_symbolic_sizes(counters, fn):
    """as_strided whose sizes, strides or offset are SymInts (FX nodes):
    strided_copy got the nodes as params (TypeError: 'Node' object cannot
    be interpreted as an integer crashed torch.compile); they are kiln
    sizes now. (Dynamo guards fill_diagonal_'s sizes: a compile per size.)"""
    _run(fn, [((4, 5),), ((6, 7),)], counters, exact=True, one_graph=False)


@pytest.mark.parametrize("fn", [
    lambda x: torch.diagonal(x, 0, -2, -1) * 2,
    lambda x: torch.diagonal(x, 2, 0, 2) + 1,
    lambda x: torch.diagonal(x, -1, 1, 2) - 1,
    lambda x: torch.diagonal(x, 0, 2, 1) * 3,
    lambda x: torch.trace(x[0]) + x.sum(),
    lambda x: torch.diagonal_scatter(x, torch.diagonal(x, 1, 1, 2) * 0 + 7, 1, 1, 2),
], ids=["square", "offset-rows", "negative-offset", "swapped-dims", "trace", "scatter"])
def test_diagonal_of_symbolic_sizes(counters, fn):
    """A diagonal's length is the max/min of symbolic sizes and its
    stride their sum: torch.diagonal (and trace, diagonal_scatter) asked
    min() of SymDims and ran in eager ("a symbolic size where kiln needs a
    number"). Non-square sizes, both offsets' signs, and dims in either
    order; the values are copies, so exact."""
    _run(fn, [((3, 4, 6),), ((4, 7, 5),)], counters, exact=True)


@pytest.mark.parametrize("fn", [
    lambda x: F.conv_transpose2d(x, x.new_ones(x.shape[1], 3, 4, 4) / 16, stride=2, padding=1),
    lambda x: F.conv_transpose2d(x, x.new_ones(x.shape[1], 2, 3, 3) / 9, x.new_ones(2), stride=2,
                                 padding=1, output_padding=1),
    lambda x: F.conv_transpose1d(x.flatten(2), x.new_ones(x.shape[1], 2, 3) / 3, stride=3),
], ids=["2d", "2d-output-padding-bias", "1d"])
def test_transposed_convolution_over_symbolic_sizes(counters, fn):
    """A transposed convolution (a decoder's upsampling) is the input
    gradient of the convolution it transposes: its output size, (H - 1)
    stride - 2 pad + dilation (k - 1) + output_padding + 1, is an
    expression of the symbolic H and W, and the graph stays whole."""
    _run(fn, [((2, 3, 5, 6),), ((3, 4, 7, 4),)], counters)


def _attention_inputs(shape):
    b, h, s, t, d = shape
    return torch.randn(b, h, s, d), torch.randn(b, h, t, d), torch.randn(b, h, t, d), torch.randn(b, 1, s, t)


@pytest.mark.parametrize("fn,in_kiln", [
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, scale=0.3), True),
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.25), True),
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m > 0, scale=0.5), True),
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k[:, :, :q.shape[2]], v[:, :, :q.shape[2]],
                                                       is_causal=True, scale=0.3), True),
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v), True),
    (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), True),
], ids=["scale", "float-mask", "bool-mask", "causal", "default-scale", "default-scale-mask"])
def test_attention_over_symbolic_heads(counters, fn, in_kiln):
    """Attention on (B, H, S, D) inputs with every size symbolic: the
    heads check asked q's heads % k's heads of one symbol (s % s) for a
    number and ran the attention in eager; equal head counts need no
    division. The default scale 1/sqrt(D) of a symbolic D is taken from
    the call's D (KILN_SDPA_SCALE_HEAD_DIM; it ran in eager before)."""
    f = torch.compile(fn, backend="kiln", dynamic=True)
    for shape in ((2, 3, 5, 7, 8), (3, 4, 9, 11, 6)):
        args = _attention_inputs(shape)
        with torch.no_grad():
            got = f(*args)
            want = fn(*[a.double() for a in args]).float()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    kiln_counts = counters["kiln"]
    assert kiln_counts["graphs"] == 1, dict(kiln_counts)
    assert (kiln_counts["whole"] == 1) == in_kiln, (dict(kiln_counts), dict(counters["kiln_fallback"]))


def test_attention_whose_value_length_dynamo_left_symbolic(counters):
    """Keys of a static length and values whose length Dynamo kept symbolic
    (T5's cross-attention in generate(): the keys' mask has the encoder's
    static length): kiln's attention takes one key length, so the graph ran
    in eager; the value length's symbol is now that number, checked at
    every call (a call with other lengths fails, as in eager)."""
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    q, k, m = torch.randn(2, 4, 1, 16), torch.randn(2, 4, 12, 16), torch.randn(2, 4, 1, 12)
    v = torch.randn(2, 4, 12, 16)
    torch._dynamo.mark_dynamic(v, 2)
    g = torch.compile(f, backend="kiln")
    with torch.no_grad():
        got = g(q, k, v, m)
        want = f(q.double(), k.double(), v.double(), m.double()).float()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert dict(counters["kiln"]) == {"graphs": 1, "whole": 1}, (dict(counters["kiln"]),
                                                                 dict(counters["kiln_fallback"]))
    with pytest.raises(ValueError, match=r"expected \(2, 4, 12, 16\) float32, got \(2, 4, 13, 16\)"):
        with torch.no_grad():
            g(q, k, torch.randn(2, 4, 13, 16), m)


@pytest.mark.parametrize("fn", [
    lambda x: x[x.shape[0] - 1] * 2,
    lambda x: x.select(1, x.shape[1] // 2) + 1,
    lambda x: x.select(1, -(x.shape[1] // 2)) + 1,
    lambda x: torch.select_scatter(x, x[:, 0] + 1, 1, x.shape[1] - 1),
    lambda x: torch.select_scatter(x, x[0] * 2, 0, -(x.shape[0] // 2)),
], ids=["last-row", "middle-column", "negative", "scatter", "scatter-negative"])
def test_select_at_a_symbolic_index(counters, fn):
    """select.int (and select_scatter) at a SymInt index: 'index < 0' on an
    FX node crashed torch.compile (TypeError; select_scatter until session
    12). The index is a kiln size; its sign is the one torch guarded at
    tracing (a negative index counts from the end)."""
    _run(fn, [((4, 5),), ((6, 7),)], counters, exact=True)


def test_select_index_changing_sign_recompiles(counters):
    g = lambda x: x.select(1, x.shape[1] - 3) + 1  # noqa: E731
    f = torch.compile(g, backend="kiln", dynamic=True)
    for s in [(4, 5), (4, 7), (4, 2), (3, 2)]:
        x = torch.randn(*s)
        torch.testing.assert_close(f(x), g(x))
    assert counters["kiln"]["whole"] == counters["kiln"]["graphs"] == 2, dict(counters["kiln"])


@pytest.mark.parametrize("fn", [
    lambda x: torch.topk(x, x.shape[1] // 2, dim=1).values,
    lambda x: torch.topk(x, x.shape[1] - 1, dim=1, largest=False),
], ids=["values", "both"])
def test_topk_of_a_symbolic_count(counters, fn):
    """topk with k a SymInt: int() of its FX node crashed torch.compile."""
    _run(fn, [((4, 5),), ((6, 7),)], counters, exact=True)


# Literal scale factors: a scale held in a variable is a size Dynamo makes
# symbolic too, and its decomposition then computes in SymFloats instead.
_UPSAMPLINGS = {
    "2": lambda x: F.interpolate(x, scale_factor=2, mode="nearest") + 1,
    "3": lambda x: F.interpolate(x, scale_factor=3, mode="nearest") + 1,
    "2x4": lambda x: F.interpolate(x, scale_factor=(2, 4), mode="nearest") + 1,
}


@pytest.mark.parametrize("scale", sorted(_UPSAMPLINGS))
def test_nearest_upsampling_by_a_scale_runs_in_kiln(counters, scale):
    """F.interpolate(x, scale_factor=k) under symbolic sizes: torch's
    decomposition computes the scale as float64(size) / (k * size), a float64
    scalar from a scalar_tensor of the size. That arithmetic now goes to the
    prelude that computes the graph's float64 scalars in eager before the
    kiln model (dynamo._split_float_scalars), so the gathers run in kiln: it
    ran in eager ('constant has dtype torch.float64'). The indices are
    torch's: the result equals eager's exactly. Called with autograd on, as
    a model is called without no_grad (under no_grad the op reaches kiln
    undecomposed)."""
    fn = _UPSAMPLINGS[scale]
    f = torch.compile(fn, backend="kiln", dynamic=True)
    for s in ((2, 3, 5, 7), (3, 3, 9, 4)):
        x = torch.randn(*s)
        assert torch.equal(f(x), fn(x))
    assert dict(counters["kiln"]) == {"graphs": 1, "whole": 1}, (dict(counters["kiln"]),
                                                                  dict(counters["kiln_fallback"]))


def test_a_size_as_a_tensor_outside_float64_arithmetic_stays_put(counters):
    """A scalar_tensor of a size that meets a tensor directly (not on its
    way to float64) is not moved to the prelude: the graph's own float64
    scalars still are (an eps), and the result is eager's."""
    def fn(x):
        return x * torch.ops.aten.scalar_tensor.default(x.shape[0]) + 1e-6
    f = torch.compile(fn, backend="kiln", dynamic=True)
    for s in ((3, 4), (5, 6)):
        x = torch.randn(*s)
        torch.testing.assert_close(f(x), fn(x))


def _upsample_to_size(x, y):
    return F.interpolate(x, size=y.shape[-2:], mode="nearest") + 1


def test_nearest_upsampling_to_an_inputs_size_runs_in_kiln(counters):
    """F.interpolate(x, size=y.shape[-2:]) with both inputs' sizes symbolic:
    the decomposition's scale is a Python float, in_size / out_size (a
    SymFloat of two input sizes), multiplying a float32 ramp. The prelude
    computes it and rounds it to float32 as eager's multiply does, so the
    gathers run in kiln (it ran in eager: 'no kiln lowering for truediv');
    the result equals eager's exactly."""
    f = torch.compile(_upsample_to_size, backend="kiln", dynamic=True)
    for s, t in (((2, 3, 5, 7), (2, 1, 11, 21)), ((3, 3, 9, 4), (2, 1, 19, 12))):
        x, y = torch.randn(*s), torch.randn(*t)
        assert torch.equal(f(x, y), _upsample_to_size(x, y))
    # (Dynamo may compile the second size again: its guards on the sizes.)
    k = dict(counters["kiln"])
    assert k.get("graphs") and k.get("whole") == k["graphs"] and not counters["kiln_fallback"], \
        (k, dict(counters["kiln_fallback"]))


_SKIPS = {   # a U-Net's skip: the coarse map upsampled to the finer one's size
    "pool2": lambda x: F.max_pool2d(x, 2),                     # size s // 2
    "pool3s2p1": lambda x: F.max_pool2d(x, 3, 2, padding=1),   # (s - 1) // 2 + 1, a strided conv's
}


@pytest.mark.parametrize("down", sorted(_SKIPS))
def test_nearest_upsampling_to_an_intermediates_size_runs_in_kiln(counters, down):
    """F.interpolate(coarse, size=fine.shape[-2:]) where fine is computed in
    the graph: the scale's in_size / out_size reads sizes of intermediate
    tensors, which the prelude computes from their expressions over the
    input's sizes (dynamo._size_expr_emitter). It ran those two ops in eager
    and the rest in pieces ('a piece whose sizes its inputs do not give').
    Pooling, nearest upsampling and the sum are exact: the result equals
    eager's bit for bit, at sizes that round differently."""
    d = _SKIPS[down]

    def fn(x):
        fine = d(x)
        coarse = d(fine)
        return F.interpolate(coarse, size=fine.shape[-2:], mode="nearest") + fine

    f = torch.compile(fn, backend="kiln", dynamic=True)
    for s in ((2, 3, 16, 24), (3, 3, 21, 13), (2, 3, 30, 9)):
        x = torch.randn(*s)
        assert torch.equal(f(x), fn(x)), s
    k = dict(counters["kiln"])
    assert k.get("graphs") and k.get("whole") == k["graphs"] and not counters["kiln_fallback"], \
        (k, dict(counters["kiln_fallback"]))


class _ToSize(torch.nn.Module):
    def forward(self, x):
        return F.interpolate(x, size=(14, 5), mode="nearest")


class _ToSkip(torch.nn.Module):
    def forward(self, x, skip):
        return F.interpolate(x, size=skip.shape[-2:], mode="nearest") + skip


def test_nearest_upsampling_of_symbolic_sizes_undecomposed(counters):
    """upsample_nearest2d as kiln.trace (torch.export) and torch.compile
    under no_grad hand it over, undecomposed, with symbolic input or output
    sizes (an image of any size brought to a fixed size, a coarse map to its
    skip connection's): the source indices are computed per call as ATen's
    nearest_idx does (float32 in / out, floor of i times it, clamped), where
    kiln refused the op ('a symbolic size where kiln needs a number', fuzz
    seed 20091 graph 366). Gathers are exact: eager's bits at ratios that
    round every way (13 to 9, 100 to 13, equal, doubled)."""
    h, w = Dim("h", min=2, max=64), Dim("w", min=2, max=64)
    k = kiln.trace(_ToSize(), (torch.randn(2, 3, 7, 4),), dynamic_shapes=({2: h, 3: w},), fallback=False)
    for s in ((7, 4), (3, 2), (14, 5), (28, 10), (13, 9), (64, 3), (5, 7)):
        x = torch.randn(2, 3, *s)
        assert torch.equal(k(x), _ToSize()(x)), s
    hs, ws = Dim("hs", min=2, max=128), Dim("ws", min=2, max=128)
    k = kiln.trace(_ToSkip(), (torch.randn(1, 4, 8, 8), torch.randn(1, 4, 16, 16)),
                   dynamic_shapes=({2: h, 3: w}, {2: hs, 3: ws}), fallback=False)
    f = torch.compile(_ToSkip(), backend="kiln", dynamic=True)
    for (a, b), (c, d) in (((8, 8), (16, 16)), ((5, 7), (11, 13)), ((9, 3), (17, 3)), ((13, 13), (100, 37)),
                           ((6, 6), (6, 6)), ((6, 9), (12, 18))):
        x, skip = torch.randn(1, 4, a, b), torch.randn(1, 4, c, d)
        with torch.no_grad():
            want = _ToSkip()(x, skip)
            assert torch.equal(k(x, skip), want), (a, b, c, d)
            assert torch.equal(f(x, skip), want), (a, b, c, d)
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])
