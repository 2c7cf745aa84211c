"""torch.linalg.solve_triangular in kiln (SOLVE_TRIANGULAR): gated
delta-rule linear attention (Qwen3-Next, Qwen3.5, OLMo hybrid) solves unit
lower systems of its chunk size in prefill under torch.compile, which ran
in eager between kiln's pieces.

Every flag (upper, left, unitriangular) and batch broadcasting, against
float64: kiln's error at most 4x eager's own plus 1e-6 of the answer's
scale (its sums are in double, so usually below eager's); symbolic sizes
through torch.compile; then transformers' own chunked gated delta rule
through torch.compile, whole in kiln, against eager."""

import itertools

import pytest
import torch
from torch._dynamo.utils import counters

import kiln


class _Solve(torch.nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.kw = kw

    def forward(self, a, b):
        return torch.linalg.solve_triangular(a, b, **self.kw)


SHAPES = [((5, 5), (5, 3)), ((2, 3, 7, 7), (2, 3, 7, 4)), ((3, 1, 6, 6), (1, 4, 6, 2)), ((64, 64), (64, 70))]


@pytest.mark.parametrize("upper,left,unit", list(itertools.product((False, True), repeat=3)))
def test_solve_triangular_against_float64(upper, left, unit):
    g = torch.Generator().manual_seed(int(upper) * 4 + int(left) * 2 + int(unit))
    kw = dict(upper=upper, left=left, unitriangular=unit)
    for ashape, bshape in SHAPES:
        if not left:
            bshape = bshape[:-2] + (bshape[-1], bshape[-2])
        a = torch.randn(ashape, generator=g) * 0.3 + 2 * torch.eye(ashape[-1])
        b = torch.randn(bshape, generator=g)
        ref = torch.linalg.solve_triangular(a.double(), b.double(), **kw)
        got = kiln.trace(_Solve(**kw), (a, b), fallback=False)(a, b)  # raises if it falls back
        eager = _Solve(**kw)(a, b)
        assert got.shape == eager.shape and got.dtype == torch.float32
        scale = ref.abs().max()
        err, eager_err = (got.double() - ref).abs().max(), (eager.double() - ref).abs().max()
        assert err <= 4 * eager_err + 1e-6 * scale, (kw, ashape, bshape, float(err), float(eager_err))


@pytest.mark.usefixtures("fresh_dynamo")
def test_symbolic_batch_and_sizes_through_torch_compile():
    """dynamic=True: the batch dims and the system's size symbolic, one
    graph for three shapes, whole in kiln."""
    compiled = torch.compile(_Solve(upper=False, unitriangular=True), backend="kiln", dynamic=True)
    g = torch.Generator().manual_seed(7)
    for batch, n, k in ((3, 5, 6), (5, 7, 3), (6, 9, 11)):
        a = torch.randn(batch, n, n, generator=g) * 0.3
        b = torch.randn(batch, n, k, generator=g)
        ref = torch.linalg.solve_triangular(a.double(), b.double(), upper=False, unitriangular=True)
        torch.testing.assert_close(compiled(a, b).double(), ref, rtol=1e-5, atol=1e-5)
    assert counters["kiln"]["graphs"] == counters["kiln"]["whole"] == 1, dict(counters["kiln"])
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])


@pytest.mark.usefixtures("fresh_dynamo")
def test_gated_delta_rule_prefill_compiles_whole():
    """transformers' torch_chunk_gated_delta_rule (Qwen3-Next's prefill path:
    chunks of 64, a UT system solved by solve_triangular) at 2 chunks (100
    tokens, padded to 128), whole in kiln, within 2e-5 of eager."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

    g = torch.Generator().manual_seed(0)

    def inputs(seq):
        q, k, v = (torch.randn(1, seq, 2, 16, generator=g) for _ in range(3))
        decay = -torch.rand(1, seq, 2, generator=g)
        beta = torch.rand(1, seq, 2, generator=g)
        return q, k, v, decay, beta

    def step(q, k, v, decay, beta):
        out, state = torch_chunk_gated_delta_rule(q, k, v, decay, beta, output_final_state=True,
                                                  use_qk_l2norm_in_kernel=True)
        return out, state

    compiled = torch.compile(step, backend="kiln")  # (dynamic=True: 20 s here, mostly Dynamo's own)
    args = inputs(100)
    for r, c in zip(step(*args), compiled(*args)):
        torch.testing.assert_close(c, r, rtol=1e-4, atol=2e-5)
    assert counters["kiln"]["graphs"] == counters["kiln"]["whole"] >= 1, dict(counters["kiln"])
    assert not counters["kiln_fallback"], dict(counters["kiln_fallback"])
