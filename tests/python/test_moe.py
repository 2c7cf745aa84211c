"""Mixture-of-experts layers as transformers writes them (issue 17):
tokens per expert by histc, the experts' matmuls by its custom op
transformers::grouped_mm_fallback, compiled by kiln as GROUPED_MM, whose
loop follows the op's exactly (any offsets eager accepts). A Mixtral-style
model generates through torch.compile(backend="kiln") whole in kiln, its
tokens equal to eager's."""

import pytest
import torch
import transformers
from torch._dynamo.utils import counters

import kiln  # noqa: F401  (registers the backend)
from transformers.integrations import moe  # noqa: F401  (defines the custom op)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


class _Experts(torch.nn.Module):
    """Two grouped matmuls over one parameter stored (E, N, K), as
    transformers' experts hand it over transposed, and one stored (E, K, N)."""

    def __init__(self, e=4, k=24, n=40):
        super().__init__()
        self.w_t = torch.nn.Parameter(torch.randn(e, n, k))
        self.w = torch.nn.Parameter(torch.randn(e, n, k))

    def forward(self, x, offs):
        gm = torch.ops.transformers.grouped_mm_fallback
        h = gm(x, self.w_t.transpose(-2, -1), offs=offs)
        return gm(h, self.w, offs=offs)


@pytest.mark.parametrize("offs", [[3, 3, 8, 12], [0, 5, 5, 5], [6, 2, 9, 12], [4, -3, 12, 40], [0, 0, 0, 0]])
def test_grouped_mm_follows_eager(offs):
    torch.manual_seed(0)
    m = _Experts().eval()
    f = torch.compile(m, backend="kiln")
    x = torch.randn(12, 24)
    o = torch.tensor(offs, dtype=torch.int32)
    with torch.no_grad():
        torch.testing.assert_close(f(x, o), m(x, o), rtol=1e-5, atol=1e-4)
    assert counters["kiln"]["whole"] == counters["kiln"]["graphs"] == 1, dict(counters["kiln_fallback"])


def test_mixtral_generates_in_kiln():
    """A tiny Mixtral (4 experts, top 2), batch 2 left padded, the default
    DynamicCache: the router's sort, histc and both grouped matmuls of each
    layer run in kiln; greedy tokens equal eager's; two compiles as for
    dense models (prefill and a decode graph symbolic in the cache length)."""
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                     num_local_experts=4, num_experts_per_tok=2, bos_token_id=None,
                                     eos_token_id=None, pad_token_id=0)
    model = transformers.MixtralForCausalLM(cfg).eval()
    ids = torch.randint(1, 256, (2, 9))
    mask = torch.ones_like(ids)
    ids[1, :3] = 0
    mask[1, :3] = 0
    kw = dict(attention_mask=mask, do_sample=False, pad_token_id=0, max_new_tokens=12, min_new_tokens=12)
    with torch.no_grad():
        ref = model.generate(ids, **kw)
        model.forward = torch.compile(model.forward, backend="kiln")
        got = model.generate(ids, **kw)
    assert torch.equal(got, ref)
    assert counters["kiln"]["graphs"] == counters["kiln"]["whole"] == 2, (
        dict(counters["kiln"]), dict(counters["kiln_fallback"]))


def _split_by_counts(x, idx, w):
    """JetMoE's experts (transformers' JetMoeParallelExperts): rows sorted
    by expert, split by each expert's count taken with .tolist() (a graph
    break), each piece through its expert's weight."""
    sizes = torch.bincount(idx, minlength=w.shape[0]).tolist()
    parts = x.split(sizes, dim=0)
    return torch.cat([p @ w[i] for i, p in enumerate(parts)], 0)


@pytest.mark.parametrize("rows", ["static", "symbolic"])
def test_split_by_counts_stays_whole(rows):
    """The graph after the break takes the counts as size arguments; Dynamo
    guards their sum equal to the rows split (a + b + c + d == 48, or == s
    for symbolic rows). kiln's probes fit that guard (kiln_sym_probes_fit's
    descent), so the split lowers at them and runs in kiln for every count
    the guards admit; it used to run in eager ("view reads elements
    2560..5119 of a tensor of 3072")."""
    torch.manual_seed(0)
    w = torch.randn(4, 32, 16)
    f = torch.compile(_split_by_counts, backend="kiln")
    counts = [[12, 12, 12, 12], [5, 20, 9, 14], [2, 3, 40, 3], [30, 6, 6, 6]]
    if rows == "symbolic":
        counts += [[3, 4, 5, 6], [9, 9, 2, 17], [25, 10, 11, 30]]
    for c in counts:
        idx = torch.repeat_interleave(torch.arange(4), torch.tensor(c))
        x = torch.randn(len(idx), 32)
        torch.testing.assert_close(f(x, idx, w), _split_by_counts(x, idx, w), rtol=1e-5, atol=1e-5)
    assert counters["kiln"]["graphs"] == counters["kiln"]["whole"] >= 2, (
        dict(counters["kiln"]), dict(counters["kiln_fallback"]))


def test_a_moe_model_traces_as_exported():
    """kiln.trace of a Qwen3-MoE model: torch.export's program counts tokens
    per expert by histc of ids converted with to.dtype (the decomposition
    makes it _to_copy); the histc rule takes both, so the program lowers
    without the decomposition re-trace, to eager's values (sums of a few
    dozen fp32 products: rtol 1e-5)."""
    from kiln.capture import export_program, lower_exported
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=8, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
                                      num_experts_per_tok=2, vocab_size=100, use_cache=False)
    model = transformers.Qwen3MoeModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 10))
    with torch.no_grad():
        ep = export_program(model, (ids,), fast=True)
        assert getattr(ep, "kiln_training_ir", False)
        lower_exported(ep)  # histc refused the ids before: "values not known to be integers"
        want = model(ids).last_hidden_state
    compiled = kiln.trace(model, (ids,))
    assert isinstance(compiled, kiln.module.KilnModule)
    torch.testing.assert_close(compiled(ids).last_hidden_state, want, rtol=1e-5, atol=1e-5)


def test_deepseek_v3_traces_as_exported():
    """DeepSeek-V3 builds each layer's keys in a new_empty filled through
    two slices (and its group-limited routing scatters into a zeros_like):
    writes into fresh buffers read afterwards, which the exported program
    now takes as slice_scatters (kiln/training_ir.py), to eager's values."""
    from kiln.capture import export_program
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(
        hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=128, n_routed_experts=4,
        num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=32,
        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, use_cache=False)
    model = transformers.DeepseekV3Model(cfg).eval()
    ids = torch.randint(0, 128, (2, 9))
    with torch.no_grad():
        ep = export_program(model, (ids,), fast=True)
        assert getattr(ep, "kiln_training_ir", False)
        want = model(ids).last_hidden_state
    compiled = kiln.trace(model, (ids,))
    torch.testing.assert_close(compiled(ids).last_hidden_state, want, rtol=1e-5, atol=1e-5)


class _TorchGroupedMM(torch.nn.Module):
    """torch._grouped_mm, as transformers calls it for bf16 experts, by a
    weight handed over transposed."""

    def __init__(self, e=4, k=24, n=40):
        super().__init__()
        self.w_t = torch.nn.Parameter(torch.randn(e, n, k))

    def forward(self, x, offs):
        return torch._grouped_mm(x, self.w_t.transpose(-2, -1), offs=offs)


@pytest.mark.parametrize("offs", [[3, 3, 8, 12], [0, 5, 5, 12], [12, 12, 12, 12], [2, 5, 7, 12]])
def test_torch_grouped_mm_follows_eager(offs):
    """torch._grouped_mm (bf16 only under torch.export: its meta function
    refuses float32) on segments that cover the rows, empty ones included,
    as a MoE layer's offsets do (rows past the last offset are torch.empty
    in eager: no answer to match). kiln sums the bf16 products in fp32 and
    rounds once, as eager: within a bf16 rounding (rtol 2^-7)."""
    torch.manual_seed(0)
    m = _TorchGroupedMM().eval().to(torch.bfloat16)
    x, o = torch.randn(12, 24, dtype=torch.bfloat16), torch.tensor(offs, dtype=torch.int32)
    with torch.no_grad():
        want = m(x, o)
    compiled = kiln.trace(m, (x, o))
    assert isinstance(compiled, kiln.module.KilnModule)
    got = compiled(x, o)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=2 ** -7)


def test_a_bf16_moe_model_runs_whole_in_kiln():
    """A Qwen3-MoE model in bf16: transformers calls torch._grouped_mm for
    its experts, which ran in eager (the model partitioned around it). Now
    whole in kiln: its error against the fp32 model is at most eager bf16's
    plus one bf16 rounding of the output (lowp.py's rule; float64 has no
    grouped matmul kernel to be the reference)."""
    import copy
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=8, intermediate_size=64, moe_intermediate_size=16, num_experts=4,
                                      num_experts_per_tok=2, vocab_size=100, use_cache=False)
    model = transformers.Qwen3MoeModel(cfg).eval()
    low = copy.deepcopy(model).to(torch.bfloat16)
    ids = torch.randint(0, 100, (2, 10))
    with torch.no_grad():
        ref = model(ids).last_hidden_state.double()
        eager = low(ids).last_hidden_state
    compiled = kiln.trace(low, (ids,))
    assert isinstance(compiled, kiln.module.KilnModule), compiled.explain()
    got = compiled(ids).last_hidden_state
    assert got.dtype == torch.bfloat16
    err = lambda y: float((y.double() - ref).abs().max())
    assert err(got) <= err(eager) + 2 ** -8 * float(ref.abs().max()), (err(got), err(eager))
