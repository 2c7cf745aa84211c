"""Symbolic models in .kiln files (issue 17, format 2.7): kiln.save of a
model traced with dynamic_shapes and kiln.load give back a symbolic model
that runs at every size in range (against eager), with the same clear error
out of range; the file carries a "syms" section and no stored plan; the
TorchScript wrapper (KilnModule.save) runs at other sizes too."""

import pytest
import torch
import torch.nn as nn
from torch.export import Dim

import kiln
from kiln import _C
from kiln.errors import KilnError
from kiln.module import KilnModule


class _Block(nn.Module):
    """Sizes through views (B*T), a permute's strides, attention, an iota over
    the length, a concatenation along the length, a norm."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x, prefix):
        B, T, _ = x.shape
        q = self.lin(x).view(B, T, 2, 8).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        pos = torch.arange(T, dtype=torch.float32)
        y = self.norm(a.transpose(1, 2).reshape(B, T, 16)) + pos[None, :, None]
        return torch.cat([prefix, y], dim=1), y.sum(dim=1)


@pytest.fixture(scope="module")
def traced():
    torch.manual_seed(0)
    m = _Block().eval()
    batch, seq, pre = Dim("batch", max=16), Dim("seq", max=512), Dim("pre", max=64)
    k = kiln.trace(m, (torch.randn(2, 5, 16), torch.randn(2, 3, 16)),
                   dynamic_shapes={"x": {0: batch, 1: seq}, "prefix": {0: batch, 1: pre}})
    assert k._kiln_model.symbolic()
    return m, k


SHAPES = [(2, 5, 3), (3, 40, 2), (16, 2, 64), (2, 512, 7), (5, 17, 2), (2, 5, 3)]


def _check(model, ref, b, t, p):
    x, prefix = torch.randn(b, t, 16), torch.randn(b, p, 16)
    with torch.no_grad():
        got, want = model(x, prefix), ref(x, prefix)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-5)


def test_save_load_round_trip_runs_every_shape(traced, tmp_path):
    m, k = traced
    path = tmp_path / "block.kiln"
    kiln.save(k, path)
    data = path.read_bytes()
    secs = _C.sections(data, ["syms", "plan", "py.meta"])
    assert "syms" in secs and "py.meta" in secs and "plan" not in secs
    assert data[6] == 7 and data[7] == 0  # format minor version 7
    loaded = kiln.load(path)
    assert loaded._kiln_model.symbolic()
    for b, t, p in SHAPES:
        _check(loaded, m, b, t, p)
    # An instance per binding, not per call: a repeated shape reuses its plan.
    n = loaded.stats()["instances"]
    _check(loaded, m, *SHAPES[-1])
    assert loaded.stats()["instances"] == n
    # Saving what was loaded gives the same bytes; from_bytes works alike.
    assert loaded.to_bytes() == data
    again = KilnModule.from_bytes(data)
    _check(again, m, 4, 9, 2)


def test_loaded_model_out_of_range_is_a_clear_error(traced, tmp_path):
    m, k = traced
    path = tmp_path / "block.kiln"
    kiln.save(k, path)
    loaded = kiln.load(path)
    pattern = r"input 0 \('x'\): dimension 1 \(\w+\) is 600, expected 1\.\.512"
    with pytest.raises(ValueError, match=pattern):
        k(torch.randn(2, 600, 16), torch.randn(2, 3, 16))
    with pytest.raises(ValueError, match=pattern):
        loaded(torch.randn(2, 600, 16), torch.randn(2, 3, 16))
    # Inputs that disagree about a symbol name both.
    with pytest.raises(ValueError, match=r"input 1 \('prefix'\): dimension 0 \(\w+\) is 3, but input 0 gave"):
        loaded(torch.randn(2, 5, 16), torch.randn(3, 3, 16))


def test_corrupt_syms_section_is_refused(traced):
    _, k = traced
    data = bytearray(k.to_bytes())
    # The section table's second entry is "syms"; its first expression's kind.
    entry = 64 + 48
    assert bytes(data[entry:entry + 5]) == b"syms\0"
    off = int.from_bytes(data[entry + 32:entry + 40], "little")
    n_vars = int.from_bytes(data[off + 4:off + 8], "little")
    kind = off + 16 + 24 * n_vars
    data[kind] = 9
    with pytest.raises(KilnError, match="syms section: expression 0: kind 9 is unknown"):
        KilnModule.from_bytes(bytes(data))


def test_torchscript_wrapper_runs_other_shapes(traced, tmp_path):
    m, k = traced
    path = tmp_path / "block.pt"
    torch.jit.save(k, str(path))
    j = torch.jit.load(str(path))
    for b, t, p in [(2, 5, 3), (4, 33, 2)]:
        _check(lambda x, pre: j(x, pre), m, b, t, p)


class _Attention(nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v) * 2


def test_default_attention_scale_of_a_symbolic_head_dim(tmp_path):
    """torch's default scale 1/sqrt(D) with D symbolic is taken from each
    call's D (KILN_SDPA_SCALE_HEAD_DIM; format 2.14, which a 2.13 reader
    refuses as an unknown SDPA flag): saved, loaded and run at several D,
    against eager."""
    torch.manual_seed(0)
    d, s = Dim("d", min=2, max=128), Dim("s", min=2, max=64)
    spec = ({2: s, 3: d}, {2: s, 3: d}, {2: s, 3: d})
    k = kiln.trace(_Attention().eval(), tuple(torch.randn(2, 3, 5, 8) for _ in range(3)),
                   dynamic_shapes=spec)
    path = tmp_path / "attention.kiln"
    kiln.save(k, path)
    assert int.from_bytes(path.read_bytes()[6:8], "little") == 14
    loaded = kiln.load(path)
    for seq, dim in ((5, 8), (7, 3), (4, 64), (9, 17)):
        q, kk, v = (torch.randn(2, 3, seq, dim) for _ in range(3))
        with torch.no_grad():
            want = _Attention()(q.double(), kk.double(), v.double()).float()
        for m in (k, loaded):
            torch.testing.assert_close(m(q, kk, v), want, atol=1e-5, rtol=1e-4)


def _auto_traced_and_loaded(model, xs, tmp_path):
    """kiln.trace of model with every input dimension Dim.AUTO, whole in
    kiln (fallback=False), and the same saved and loaded (whose reader fits
    the probes again from the table alone): (traced, loaded)."""
    spec = tuple({d: Dim.AUTO for d in range(x.dim())} for x in xs)
    k = kiln.trace(model, xs, dynamic_shapes=spec, fallback=False)
    path = tmp_path / "auto.kiln"
    kiln.save(k, path)
    return k, kiln.load(path)


class _ViewToThirds(torch.nn.Module):
    def forward(self, x):
        return x.view(3, -1, 80) * 2


def test_guards_of_divisibility_by_several_sizes(tmp_path):
    """x.view(3, -1, 80) of an (a, b, c) input under Dim.AUTO: torch guards
    a*b*c % 240 == 0 and, from the example (32, 5, 3), a % 3 != 0 and
    a*b % 3 != 0. The probes must hold every guard (else the view's
    element count differs there and the graph ran in eager; fuzz seed
    20089 graph 1226): two symbols must move at once, c to a multiple of 3
    and 240 as a leaves one (kiln_sym_fit_multiples). The loaded file
    fits the same probes from the table alone and runs the same sizes."""
    k, loaded = _auto_traced_and_loaded(_ViewToThirds(), (torch.randn(32, 5, 3),), tmp_path)
    for shape in ((32, 5, 3), (16, 10, 3), (64, 5, 3), (8, 10, 6), (4, 4, 30)):
        x = torch.randn(*shape)
        for m in (k, loaded):
            torch.testing.assert_close(m(x), x.view(3, -1, 80) * 2)
    with pytest.raises(ValueError, match="condition the program was traced under"):
        k(torch.randn(3, 5, 16))  # 240 elements, but a % 3 == 0: a guard torch's program was traced under


class _ViewThenCat(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Parameter(torch.randn(3, 2, 5), requires_grad=False)

    def forward(self, x):
        return torch.cat([self.c, x.view(3, -1, 80)[:, :, :5]], 2)


def test_guards_that_pin_three_sizes(tmp_path):
    """The same view, then a cat with a (3, 2, 5) constant: the guards pin
    a*b*c to 480 (fuzz seed 20089 graph 1226, through a bmm): three
    symbols at small sizes, which the scan of three finds
    (kiln_sym_fit_scan3). Whole in kiln, at each size the guards allow,
    saved and loaded."""
    torch.manual_seed(0)
    m = _ViewThenCat()
    k, loaded = _auto_traced_and_loaded(m, (torch.randn(32, 5, 3),), tmp_path)
    for shape in ((32, 5, 3), (16, 10, 3), (8, 20, 3), (4, 8, 15)):
        x = torch.randn(*shape)
        for c in (k, loaded):
            torch.testing.assert_close(c(x), m(x))


class _ViewConvLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(1, 2), requires_grad=False)

    def forward(self, x, w, b):
        y = torch.nn.functional.conv2d(x.view(3, 1, 2, 1), w, b, stride=2, padding=2)
        return torch.nn.functional.linear(y, self.p)


def test_guards_in_blocks_of_symbols(tmp_path):
    """Fuzz seed 20090 graph 4482, shrunk: under Dim.AUTO a view pins the
    input's (a, b) to (2, 3) (a*b == 6, a % 3 != 0), the linear after a
    convolution by an input weight pins the kernel width to 2 or 3 and the
    kernel height to 2, 3 or 4: four symbols the broken guards read, no
    binding of them all apart. Fitted block by block, the pinned pair
    sharing its sizes, the kernel height sharing one at one probe only
    (kiln_sym_fit_blocks): whole in kiln, saved, loaded, at each size."""
    torch.manual_seed(0)
    m = _ViewConvLinear()
    k, loaded = _auto_traced_and_loaded(m, (torch.randn(2, 3), torch.randn(1, 1, 2, 2), torch.randn(1)), tmp_path)
    for kh, kw in ((2, 2), (3, 3), (4, 2), (2, 3)):
        args = (torch.randn(2, 3), torch.randn(1, 1, kh, kw), torch.randn(1))
        for c in (k, loaded):
            torch.testing.assert_close(c(*args), m(*args))


class _ViewConvMaxLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.p = torch.nn.Parameter(torch.randn(1, 2), requires_grad=False)

    def forward(self, x, w, b):
        v = x.view(1, 352, 3, 1)
        y = torch.ops.aten.convolution(v, w, b, [2, 2], [2, 2], [1, 1], False, [0, 0], 1)
        return v.view(1056), y.max(-4)[0], torch.nn.functional.linear(y, self.p)


def test_guards_in_blocks_that_share_symbols(tmp_path):
    """Fuzz seed 20090 graph 4482 in full: the view pins a*b == 1056, the
    kernel height h must leave an output height (3 + 4 - h)//2 + 1 of 2 or
    3, the kernel width 2 or 3, and torch's guards read a modulo by
    channels * output height (1 % (c * H) != 0), invalid where the first
    probes make the kernel taller than the input. The pair (a, b) fitted
    first keeps its sizes while h is scanned, h taken at the second probe
    where the output height differs from the first's, and the modulo's
    expression built invalid at the probes until they are fitted
    (kiln_sym_fit_blocks' settling pass, KILN_SYM_NO_PROBE): whole in
    kiln, saved, loaded, at output heights 3 and 2."""
    torch.manual_seed(0)
    m = _ViewConvMaxLinear()
    k, loaded = _auto_traced_and_loaded(m, (torch.randn(32, 33), torch.randn(8, 352, 2, 2), torch.randn(8)), tmp_path)
    for (a, b), c, kh, kw in (((32, 33), 8, 2, 2), ((48, 22), 5, 3, 3), ((11, 96), 8, 4, 2), ((33, 32), 3, 5, 3)):
        args = (torch.randn(a, b), torch.randn(c, 352, kh, kw), torch.randn(c))
        for model in (k, loaded):
            for got, want in zip(model(*args), m(*args)):
                torch.testing.assert_close(got, want)


class _ViewMmBroadcast(torch.nn.Module):
    def forward(self, x, w, y):
        v = (x.reshape(-1, 7) @ w).view(4, 3, 32, 8)
        return torch.atan2(y, v)


def test_guard_of_a_fitted_block_and_one_more_symbol(tmp_path):
    """Fuzz seed 20091 graph 394: a view to (4, 3, 32, 8) pins the input's
    a*b*c to 384, and a broadcast against its (a*b*c)//12 rows pins y's
    rows too: a guard of four symbols, which no block of at most three
    held, so the probes kept y's rows far from 32 and the broadcast failed
    there. Settling, a guard counts only the symbols no block fitted yet:
    y's rows alone once the product is fitted. Whole in kiln, saved, loaded,
    at each split of 384."""
    torch.manual_seed(0)
    m = _ViewMmBroadcast()
    k, loaded = _auto_traced_and_loaded(m, (torch.randn(4, 3, 32, 7), torch.randn(7, 8), torch.randn(32, 1)),
                                        tmp_path)
    for a, b, c in ((4, 3, 32), (8, 6, 8), (2, 12, 16), (3, 4, 32)):
        args = (torch.randn(a, b, c, 7), torch.randn(7, 8), torch.randn(32, 1))
        for model in (k, loaded):
            torch.testing.assert_close(model(*args), m(*args))

