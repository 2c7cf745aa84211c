"""Attention that torch runs on its math path reads every key, in kiln too.

torch 2.13's CPU dispatch (torch._fused_sdp_choice) takes the fused flash
kernel for most attention, which skips causally hidden keys, and its math
path for the rest (a value head dim unlike the query's, rank-3 inputs, one
key head shared without enable_gqa, ...), which adds the causal mask to
every score: a hidden key whose score is NaN (an infinite query against
keys of both signs) makes its row NaN, and a hidden key's zero weight times
an infinite value is NaN too. kiln marks such attention (KILN_SDPA_EVERY_KEY,
"every_key" in kiln.explain) and gives eager's answer: the tiled kernels
when q, k and v are finite (skipping is then exact), the reference
otherwise. Seed 20119 graph 20986 of the fuzzer found the divergence.

Comparison: NaN where eager has NaN, elsewhere fp32 attention's tolerance
(2e-5, as test_sdpa_decode.py: outputs are convex combinations of |v| < 4).
"""
import pytest
import torch
import torch.nn.functional as F

import kiln

TOL = dict(rtol=2e-5, atol=2e-5, equal_nan=True)


class Causal(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _inputs(ev=32, e=7, lq=5, s=4, heads=2, kv_heads=2, rank=4):
    g = torch.Generator().manual_seed(0)
    lead = (1, heads) if rank == 4 else (heads,)
    kv_lead = (1, kv_heads) if rank == 4 else (kv_heads,)
    return (torch.randn(*lead, lq, e, generator=g), torch.randn(*kv_lead, s, e, generator=g),
            torch.randn(*kv_lead, s, ev, generator=g))


def _poison(q, k, v, how):
    """Query 0 of head 0 sees only key 0; key 1 is hidden from it."""
    q, k, v = q.clone(), k.clone(), v.clone()
    if how == "nan score":  # score -inf at key 0 (positive), NaN at key 1 (mixed signs)
        q[..., 0, 0, :] = -float("inf")
        k[..., 0, 0, :] = 0.5
        k[..., 0, 1, :] = torch.tensor([(-1.0) ** i for i in range(k.shape[-1])])
    elif how == "inf value":  # a hidden key's weight 0 times Inf
        v[..., 0, 1, 3] = float("inf")
    elif how == "overflow":  # finite inputs, key 1's score past float's range
        q[..., 0, 0, :] = 1e20
        k[..., 0, 1, :] = 1e20
    return q, k, v


@pytest.mark.parametrize("how", ["finite", "nan score", "inf value", "overflow"])
def test_value_head_dim_unlike_query_reads_hidden_keys(how):
    q, k, v = _poison(*_inputs(), how)
    m = kiln.trace(Causal(), _inputs())
    assert "every_key" in kiln.explain(m)
    want, got = Causal()(q, k, v), m(q, k, v)
    if how != "finite":
        assert want[0, 0, 0].isnan().any(), "the case makes eager's row 0 NaN"
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("shape", ["rank 3", "shared key head"])
def test_other_math_path_attention_is_marked(shape):
    args = _inputs(ev=7, rank=3) if shape == "rank 3" else _inputs(ev=7, kv_heads=1)
    assert torch._fused_sdp_choice(*args, None, 0.0, True) == 0, "torch's math path"
    m = kiln.trace(Causal(), args)
    assert "every_key" in kiln.explain(m)
    q, k, v = _poison(*args, "nan score")
    torch.testing.assert_close(m(q, k, v), Causal()(q, k, v), **TOL)


def test_fused_path_attention_is_not_marked():
    """Equal head dims: torch's fused kernel, which skips hidden keys, as
    kiln's kernels do: a NaN score there does not reach the row."""
    args = _inputs(ev=7)
    assert torch._fused_sdp_choice(*args, None, 0.0, True) == 1, "torch's fused kernel"
    m = kiln.trace(Causal(), args)
    assert "every_key" not in kiln.explain(m)
    q, k, v = _poison(*args, "nan score")
    want = Causal()(q, k, v)
    assert not want[0, 0, 0].isnan().any()
    torch.testing.assert_close(m(q, k, v), want, **TOL)


def test_flag_survives_a_file(tmp_path):
    m = kiln.trace(Causal(), _inputs())
    path = tmp_path / "attention.kiln"
    kiln.save(m, path)
    back = kiln.load(path)
    q, k, v = _poison(*_inputs(), "nan score")
    torch.testing.assert_close(back(q, k, v), Causal()(q, k, v), **TOL)
