"""Operands that reach a kernel through a layout or a view: each case once
gave a silent wrong answer, or an error where eager runs.

- nn.Linear on a transposed activation: the fold pass stores W.t() as a
  transposed constant (KILN_LAYOUT_TRANSPOSED_2D) and the matmul that read
  the activation transposed (read=aT) did not turn into a LINEAR, so it read
  the constant as dense (K, N) memory (max error 2.6 on the issue's model).
  The verifier now refuses any node that reads a layout its kernel does not
  know (tests/c/test_ir.c), and MATMUL reads this one.
- as_strided addresses its input's storage: as_strided(x[1:], ...) reads
  from x's first element in eager.
- take on a 0-d index and masked_select with a mask that broadcasts the
  input: torch.export's decomposition or its own runtime asserts failed
  where eager runs; with fallback they run.

Tolerances: the GEMMs here have K <= 64 float32 products, so kiln's and
eager's sums differ by a few ulps of the result: rtol 1e-5 / atol 1e-5.
Views and gathers move values without arithmetic: compared exactly.
"""

import re
import warnings

import pytest
import torch

import kiln

GEMM_TOL = dict(rtol=1e-5, atol=1e-5)


class LinearOnTransposed(torch.nn.Module):
    def __init__(self, k, n, bias, how):
        super().__init__()
        self.l = torch.nn.Linear(k, n, bias=bias)
        self.how = how

    def forward(self, h):
        if self.how == "transpose":
            t = h.transpose(-1, -2)
        elif self.how == "permute":
            t = h.permute(0, 2, 1)
        else:
            t = h.transpose(-1, -2).contiguous()
        return self.l(t)


_SHAPES = [(2, 32, 8), (32, 8), (1, 32, 1), (3, 7, 5)]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape,how", [(s, h) for s in _SHAPES for h in ("transpose", "permute", "contiguous")
                                       if h != "permute" or len(s) == 3])  # permute(0, 2, 1): 3-d
def test_linear_on_transposed_activation(shape, bias, how):
    torch.manual_seed(0)
    m = LinearOnTransposed(shape[-2], 20, bias, how).eval()
    x = torch.randn(*shape)
    k = kiln.trace(m, (x,))
    torch.testing.assert_close(k(x), m(x), **GEMM_TOL)


def test_matmul_by_transposed_weight_on_transposed_activation():
    # h.transpose(-1, -2) @ W.t() with a 2-d h: no LINEAR, a MATMUL with both
    # reads transposed (one by flag, one by the constant's layout).
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(20, 32))

        def forward(self, h):
            return h.transpose(-1, -2) @ self.w.t()

    torch.manual_seed(1)
    m = M().eval()
    x = torch.randn(32, 8)
    torch.testing.assert_close(kiln.trace(m, (x,))(x), m(x), **GEMM_TOL)


class StateSpaceBlock(torch.nn.Module):
    """A Mamba-style projection: (B, D, L) features projected along D after a
    transpose, split into gates, mixed and projected back."""

    def __init__(self, d=16, e=24):
        super().__init__()
        self.in_proj = torch.nn.Linear(d, 2 * e)
        self.out_proj = torch.nn.Linear(e, d, bias=False)

    def forward(self, x):  # x: (B, D, L)
        u, z = self.in_proj(x.transpose(1, 2)).split(self.out_proj.in_features, dim=-1)
        return self.out_proj(u * torch.sigmoid(z)).transpose(1, 2) + x


def test_state_space_projection():
    torch.manual_seed(2)
    m = StateSpaceBlock().eval()
    x = torch.randn(2, 16, 9)
    torch.testing.assert_close(kiln.trace(m, (x,))(x), m(x), **GEMM_TOL)


class AsStrided(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


@pytest.mark.parametrize("name,f", [
    # The case (OpInfo as_strided, partial_views): from the storage's start.
    ("slice_offset0", lambda x: torch.as_strided(x[1:], (2, 2), (1, 2), 0)),
    # storage_offset omitted: the view keeps its own offset (1).
    ("slice_default_offset", lambda x: torch.as_strided(x[1:], (2, 2), (1, 2))),
    # Through a fresh result and two views.
    ("fresh_then_views", lambda x: torch.as_strided((x * 2).view(2, 5)[:, 1:], (3, 2), (2, 3), 1)),
    # Eager keeps exp's output in its input's transposed layout: storage order
    # is not row-major order, so eager computes it.
    ("noncontiguous_result", lambda x: torch.as_strided(x.view(2, 5).t().exp(), (2, 2), (1, 2), 3)),
])
def test_as_strided_reads_storage(name, f):
    m = AsStrided(f)
    x = torch.arange(10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning for the last case
        k = kiln.trace(m, (x,))
    torch.testing.assert_close(k(x), m(x), rtol=0, atol=0)
    # Another input: the answer follows the data, not the traced example.
    y = torch.randn(10)
    torch.testing.assert_close(k(y), m(y), rtol=0, atol=0)


@pytest.mark.parametrize("name,f", [
    ("input", lambda x: torch.as_strided(x, (2, 3), (1, 2), 1)),
    # A product's result follows its operand's strides in eager: the input's layout decides its storage
    # (times 2: exact, so compared exactly).
    ("fresh_result", lambda x: torch.as_strided(x * 2.0, (2, 3), (1, 2), 1)),
])
def test_as_strided_refuses_an_input_laid_out_otherwise(name, f, tmp_path):
    """An input as_strided reads through its storage must come as it came at
    trace time: row-major from the storage's start when as_strided reads
    the input itself; with strides in row-major order when it reads a
    result computed from it (eager's result is then row-major, whatever
    the input's offset). kiln's values are dense, so otherwise eager reads
    memory kiln never sees: the call is refused, naming the input (fuzzer
    seed 20099, graph 1078: a silent wrong answer before)."""
    m = AsStrided(f)
    x = torch.randn(3, 4)
    k = kiln.trace(m, (x,))
    torch.testing.assert_close(k(x), m(x), rtol=0, atol=0)
    moved = torch.randn(4, 3).t()  # the same shape, transposed in memory: eager's answer differs
    assert not torch.equal(m(moved), m(moved.contiguous()))
    offset = torch.randn(13)[1:].view(3, 4)  # row-major, from element 1 of its storage
    refused = [(moved, "strides (1, 3)")] + ([(offset, "at offset 1")] if name == "input" else [])
    for bad, what in refused:
        with pytest.raises(kiln.KilnError, match=rf"input 0 \('x'\): the model reads its memory.*{re.escape(what)}"):
            k(bad)
    if name != "input":  # x * 2 of an offset input is a fresh row-major tensor in eager too
        torch.testing.assert_close(k(offset), m(offset), rtol=0, atol=0)
    fresh = moved.contiguous()
    torch.testing.assert_close(k(fresh), m(fresh), rtol=0, atol=0)
    # The requirement is kept in the artifact.
    kiln.save(k, tmp_path / "m.kiln")
    loaded = kiln.load(tmp_path / "m.kiln")
    with pytest.raises(kiln.KilnError, match="reads its memory"):
        loaded(moved)
    torch.testing.assert_close(loaded(fresh), m(fresh), rtol=0, atol=0)


def test_as_strided_of_a_result_follows_the_examples_layout():
    """An input traced transposed (fuzzer seed 20101, graph 560): a result
    computed from it is laid out by eager after the input's stride order,
    so a call must bring that order (and density) again, not row-major."""
    m = AsStrided(lambda x: torch.as_strided(x * 2.0, (2, 3), (1, 2), 1))
    x = torch.randn(4, 3).t()  # (3, 4), transposed: x * 2 is transposed too, as_strided refused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning
        k = kiln.trace(m, (x,))
    torch.testing.assert_close(k(x), m(x), rtol=0, atol=0)
    # x.t() * 2 of that example is row-major: traced, and the example's
    # order is what a call must bring again.
    t = AsStrided(lambda x: torch.as_strided(x.t() * 2.0, (2, 3), (1, 2), 1))
    k = kiln.trace(t, (x,))
    y = torch.randn(4, 3).t()
    torch.testing.assert_close(k(y), t(y), rtol=0, atol=0)
    z = torch.randn(3, 4)  # row-major: eager's x.t() * 2 is then transposed, and its as_strided differs
    assert not torch.equal(t(z), t(z.t().contiguous().t()))
    with pytest.raises(kiln.KilnError, match=r"order of dims \(1, 0\) and dense.*laid out as the traced example"):
        k(z)
    # softmax makes a row-major result whatever its input: no order asked.
    s = AsStrided(lambda x: torch.as_strided(torch.softmax(x, 1), (2, 3), (1, 2), 1))
    k = kiln.trace(s, (x,))
    for a in (y, z):
        torch.testing.assert_close(k(a), s(a), rtol=1e-6, atol=1e-7)


def test_as_strided_input_under_symbolic_sizes():
    """The fuzzer's case: traced under Dim.AUTO from an input whose dims 1
    and 2 are transposed in memory, row-major at the example only because
    dim 1 has size 1; at another size it is not."""
    m = AsStrided(lambda x: torch.as_strided(x, (1, 2), (2, 2), 1) * 1.0)
    x = torch.randn(2, 2, 1).transpose(1, 2)  # (2, 1, 2), row-major as a size-1 dim's stride is free
    assert x.is_contiguous()
    dyn = ({0: torch.export.Dim.AUTO, 2: torch.export.Dim.AUTO},)
    k = kiln.trace(m, (x,), dynamic_shapes=dyn)
    torch.testing.assert_close(k(x), m(x), rtol=0, atol=0)
    y = torch.randn(5, 3, 4).transpose(1, 2)  # (5, 4, 3) with dim 1 of size 4: not row-major
    with pytest.raises(kiln.KilnError, match=r"input 0 .*reads its memory"):
        k(y[:, :1])
    z = torch.randn(5, 1, 3)
    torch.testing.assert_close(k(z), m(z), rtol=0, atol=0)


def test_as_strided_extent_is_a_guard_under_symbolic_sizes():
    """torch.export checks an as_strided's extent at the example only:
    under Dim.AUTO the dim it reads may shrink below the view's last
    element (eager fails there). kiln refused the symbolic lowering at
    such a probe and ran the whole graph in eager (fuzzer seed 20104,
    graph 5914); the extent is now one of the graph's guards: calls in
    range run in kiln, one out of range is refused by name."""
    m = AsStrided(lambda x: torch.as_strided(x + 1, (2, 3), (1, 2), 3) * 2)  # last element: 3 + 1 + 4 = 8
    x = torch.randn(3, 4)  # 12 elements; at 2 rows, 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a graph run in eager warns
        k = kiln.trace(m, (x,), dynamic_shapes=({0: torch.export.Dim.AUTO},))
    for rows in (3, 4, 9):
        a = torch.randn(rows, 4)
        torch.testing.assert_close(k(a), m(a), rtol=0, atol=0)
    with pytest.raises(RuntimeError):
        m(torch.randn(2, 4))  # eager's own refusal
    with pytest.raises(ValueError, match=r"traced under: 8 < x\.size\(\)\[0\]\*4"):
        k(torch.randn(2, 4))


@pytest.mark.parametrize("offset", [None, 2, 3, 4])
def test_as_strided_scatter_into_an_offset_view(offset):
    """as_strided_scatter writes into a clone of its input through storage
    offsets counted from the storage's start: into x[2:], offset 2 is the
    view's element 0."""
    src = torch.tensor([100.0, 200.0])

    def f(x):
        v = x[2:8] * 1.0 if offset is None else x[2:8]
        return torch.as_strided_scatter(v, src, (2,), (1,), offset)

    m = AsStrided(f)
    x = torch.randn(10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = kiln.trace(m, (x,))
    torch.testing.assert_close(k(x), m(x), rtol=0, atol=0)


@pytest.mark.parametrize("xshape,ishape", [((), ()), ((1,), ()), ((3, 3), (3,)), ((3, 2), (2, 2))])
def test_take(xshape, ishape):
    torch.manual_seed(4)
    x = torch.randn(xshape)
    idx = torch.randint(-x.numel(), x.numel(), ishape)  # negative ones count from the end
    m = AsStrided(lambda a: torch.take(a, idx))
    k = kiln.trace(m, (x,))
    torch.testing.assert_close(k(x), m(x), rtol=0, atol=0)


@pytest.mark.parametrize("xshape,mshape", [((10,), (10, 10)), ((10, 1, 10), (10, 10)), ((4, 4), (4, 4))])
def test_masked_select_broadcast_mask(xshape, mshape):
    class M(torch.nn.Module):
        def forward(self, x, mask):
            return torch.masked_select(x * 2, mask)

    torch.manual_seed(3)
    x, mask = torch.randn(*xshape), torch.rand(*mshape) > 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # masked_select falls back
        k = kiln.trace(M(), (x, mask))
    torch.testing.assert_close(k(x, mask), M()(x, mask), rtol=0, atol=0)
    # A mask with another count of True elements: eager's shape, not the example's.
    mask2 = torch.rand(*mshape) > 0.2
    torch.testing.assert_close(k(x, mask2), M()(x, mask2), rtol=0, atol=0)


class _Products(torch.nn.Module):
    def __init__(self, kind, w):
        super().__init__()
        self.kind = kind
        self.w = torch.nn.Parameter(w, requires_grad=False)

    def forward(self, x, y):
        if self.kind == "mm_weight":
            return x @ self.w
        if self.kind == "linear":
            return torch.nn.functional.linear(x, self.w.t())
        if self.kind == "addmm":
            return torch.addmm(torch.full((x.shape[0], y.shape[-1]), -0.0, dtype=x.dtype), x, y)
        if self.kind == "bmm":
            return torch.bmm(x.expand(2, -1, -1), y.expand(2, -1, -1))
        if self.kind == "matmul_3d":
            return torch.matmul(x.reshape(2, 2, 1), y)  # eager's mm over the folded batch
        # Batch and rows not one block in memory: eager's matmul cannot fold
        # them, and calls bmm (seed 20116 graph 13498).
        if self.kind == "matmul_3d_unfolded":
            return torch.matmul(x.reshape(2, 2, 1).transpose(0, 1), y)
        if self.kind == "linear_3d_unfolded":
            return torch.nn.functional.linear(x.reshape(2, 2, 1).transpose(0, 1), self.w.t())
        return torch.matmul(x, y)  # two values: an outer product


@pytest.mark.parametrize("kind", ["mm_weight", "linear", "addmm", "bmm", "matmul", "matmul_3d", "matmul_3d_unfolded",
                                  "linear_3d_unfolded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_products_over_one_term_keep_the_sign_of_zero(kind, dtype):
    """Over K = 1 each element of eager's product is a single product, so +0
    times a negative is -0, which 1/x shows as -inf (fuzzer seed 20097,
    graph 3688); a GEMM summing from a +0 accumulator gives +0, as eager's
    bmm (also a matmul whose batch it cannot fold) and its bf16 products do
    (kept GEMMs). Values are single products:
    compared exactly, zero signs included."""
    torch.manual_seed(5)
    x = torch.randn(4, 1)
    x[1] = 0.0
    y = torch.randn(1, 6)
    y[0, 2] = -1.5
    m = _Products(kind, y.clone()).eval().to(dtype)
    x, y = x.to(dtype), y.to(dtype)
    want = m(x, y)
    got = kiln.trace(m, (x, y))(x, y)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got), torch.signbit(want)), (got, want)
    if kind in ("mm_weight", "linear", "addmm", "matmul", "matmul_3d") and dtype == torch.float32:
        # the case is there: -0 in eager's
        assert bool((torch.signbit(want) & (want == 0)).any())
    assert torch.equal(1 / got, 1 / want)
