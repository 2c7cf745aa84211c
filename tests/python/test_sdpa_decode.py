"""Decode-shaped attention (one or a few new queries against a KV cache)
through kiln.trace, at every ISA level and at 1 and 2 threads, against
float64 eager.

These shapes take the paths of src/kernels/nn/kiln_attention.c that prefill
shapes do not: the 4-row register kernel (a GQA group of 4 or 8 rows per kv
head), scores straight from K's rows (AVX2, blocks of <= 8 rows) and the keys
split over threads with a merge of the parts (flash-decoding) when batch x kv
heads is below twice the threads. K and V are views of the first L rows of
a longer cache (capacity > L, as DynamicCache's appending buffers are), with
NaN in the rows past L: a kernel that reads past the view gives NaN.

Reference: the same function in float64 eager. Rows that no key may see
(a float mask of -inf, or a boolean mask of False, over every key) are zeros
in kiln, as torch's fused CPU kernel gives (its math path, which float64
takes, gives NaN): the expected rows are set to zero there.

Tolerance: each output is a convex combination of V's rows (|v| < 4.5 here)
with weights from fp32 dot products over D = 64 terms; kiln's worst error
against float64 over these cases is 4.4e-7 at both levels and both thread
counts (measured), eager float32's 3.5e-7; rtol = atol = 2e-5 (the float64
comparison of test_isa_levels.py) leaves a wide margin, and a wrong tail,
part or merge is off by far more (a dropped part moves outputs by ~0.1). The thread count
changes results only by the merge's fp32 rounding: 1 against 2 threads is
checked at 2e-6.
"""
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import isa_params

LEVELS = isa_params()
TOL = dict(rtol=2e-5, atol=2e-5)
THREADS_TOL = dict(rtol=2e-6, atol=2e-6)


class Decode(torch.nn.Module):
    """SDPA over the first `length` rows of the K and V caches."""

    def __init__(self, length, mask_kind):
        super().__init__()
        self.length = length
        self.mask_kind = mask_kind

    def forward(self, q, k_cache, v_cache, *mask):
        k = k_cache[:, :, :self.length]
        v = v_cache[:, :, :self.length]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None,
                                              enable_gqa=True)


# name: (batch, heads, kv heads, queries, keys, capacity, mask)
CASES = {
    "gqa16_4_kv192": (1, 16, 4, 1, 192, 256, None),
    "gqa16_4_batch2_tile_tail": (2, 16, 4, 1, 77, 100, None),
    "gqa32_4_kv1000": (1, 32, 4, 1, 1000, 1024, None),
    "mqa8_1_kv333_split": (1, 8, 1, 1, 333, 400, None),
    "gqa16_4_float_mask_inf_row": (3, 16, 4, 1, 150, 200, "float"),
    "gqa8_2_bool_mask_empty_row": (2, 8, 2, 1, 300, 300, "bool"),
    "gqa8_2_chunk_causal_offset": (1, 8, 2, 3, 200, 256, "causal"),
}


def _inputs(b, h, hkv, sq, skv, cap, mask_kind):
    g = torch.Generator().manual_seed(skv * 31 + h)
    q = torch.randn(b, h, sq, 64, generator=g)
    k = torch.randn(b, hkv, cap, 64, generator=g)
    v = torch.randn(b, hkv, cap, 64, generator=g)
    k[:, :, skv:] = float("nan")  # past the view: never read
    v[:, :, skv:] = float("nan")
    if mask_kind == "float":
        # (B, 1, 1, L) key padding; batch 2 sees no key at all.
        m = torch.randn(b, 1, 1, skv, generator=g)
        m[0, ..., :5] = float("-inf")
        m[1, ..., 100:] = float("-inf")
        m[2] = float("-inf")
        return q, k, v, (m,)
    if mask_kind == "bool":
        # (B, 1, Sq, L) with random holes; batch 1 sees no key at all.
        m = torch.rand(b, 1, sq, skv, generator=g) > 0.3
        m[1] = False
        return q, k, v, (m,)
    if mask_kind == "causal":
        # A chunk of sq new queries at the end of the cache: query i sees
        # keys j <= i + skv - sq (causal with offset, bottom-right aligned).
        m = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)
        return q, k, v, (m,)
    return q, k, v, ()


def _expected(model, q, k, v, mask):
    m64 = tuple(t.double() if t.is_floating_point() else t for t in mask)
    with torch.no_grad():
        want = model(q.double(), k.double(), v.double(), *m64)
    if mask:  # rows no key may see: zeros (see the docstring)
        m = mask[0]
        seen = m.any(-1) if m.dtype == torch.bool else (m != float("-inf")).any(-1)
        want = torch.where(seen.unsqueeze(-1).expand_as(want), want, torch.zeros_like(want))
    return want


@pytest.mark.parametrize("isa_level", LEVELS, indirect=True)
@pytest.mark.parametrize("case", list(CASES))
def test_sdpa_decode(case, isa_level):
    b, h, hkv, sq, skv, cap, mask_kind = CASES[case]
    q, k, v, mask = _inputs(b, h, hkv, sq, skv, cap, mask_kind)
    model = Decode(skv, mask_kind)
    want = _expected(model, q, k, v, mask)
    compiled = kiln.trace(model, (q, k, v, *mask))
    before = torch.get_num_threads()
    got = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got[threads] = compiled(q, k, v, *mask)
    finally:
        torch.set_num_threads(before)
    for threads, out in got.items():
        assert out.dtype == torch.float32 and not out.isnan().any(), threads
        torch.testing.assert_close(out.double(), want, **TOL, msg=lambda m: f"{threads} threads: {m}")
    torch.testing.assert_close(got[2], got[1], **THREADS_TOL)
