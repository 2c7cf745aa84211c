"""Training beyond forward/backward: compiled optimizer steps, attention's
backward in kiln, and memory that stays flat over many steps.

Tolerances: fp32 parameters after 5 optimizer steps, rtol 1e-5 / atol 1e-6
(the optimizer's own arithmetic is elementwise; kiln computes a * b + c as a
mul and an add where torch may fuse them, an ulp per step at most). Attention
gradients: rtol 1e-4 / atol 1e-5 — the math formulation sums the softmax and
matmuls in another order than torch's fused flash attention.
"""
import copy
import warnings

import pytest
import torch

import kiln  # noqa: F401  (registers the backend)
from kiln.module import KilnModule


@pytest.fixture
def kiln_calls(monkeypatch):
    """Counts runs of kiln-compiled graphs (so a test can tell kiln ran)."""
    calls = [0]
    orig = KilnModule.run_flat

    def counted(self, args, *rest):
        calls[0] += 1
        return orig(self, args, *rest)

    monkeypatch.setattr(KilnModule, "run_flat", counted)
    return calls


def _kiln_warnings(w):
    return [str(x.message) for x in w if "kiln" in str(x.message)]


@pytest.mark.parametrize("opt", ["sgd_momentum", "adamw"])
def test_compiled_optimizer_step_matches_eager(opt, kiln_calls):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ref = copy.deepcopy(model)
    make = {"sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2),
            "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=1e-2)}[opt]
    o, ro = make(model.parameters()), make(ref.parameters())
    torch._dynamo.reset()

    @torch.compile(backend="kiln")
    def step():
        o.step()

    batches = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(5)]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for x, y in batches:
            for m, opt_, do_step in ((model, o, step), (ref, ro, ro.step)):
                opt_.zero_grad()
                torch.nn.functional.mse_loss(m(x), y).backward()
                do_step()
    assert kiln_calls[0] >= 5, "the optimizer step did not run in kiln"
    assert not _kiln_warnings(w), _kiln_warnings(w)  # no op fell back to eager
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    # The optimizer state (momentum buffers, Adam moments) advanced as eager's.
    for p, q in zip(model.parameters(), ref.parameters()):
        for k, v in o.state[p].items():
            if isinstance(v, torch.Tensor):
                torch.testing.assert_close(v, ro.state[q][k], rtol=1e-5, atol=1e-6, msg=lambda m: f"{k}: {m}")


class Attn(torch.nn.Module):
    """Attention called directly, with a float mask, and through
    nn.TransformerEncoderLayer (multi_head_attention_forward) with a causal mask."""

    def __init__(self, d=32, heads=4, seq=16):
        super().__init__()
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.heads = heads
        self.layer = torch.nn.TransformerEncoderLayer(d, heads, 64, dropout=0.0, batch_first=True,
                                                      norm_first=True, activation="gelu")
        self.register_buffer("bias", torch.randn(seq, seq) * 0.5)
        self.register_buffer("causal", torch.nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=self.bias)
        h = x + a.transpose(1, 2).reshape(b, s, d)
        c = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + c.transpose(1, 2).reshape(b, s, d)
        return self.layer(h, src_mask=self.causal, is_causal=True)


def test_attention_backward_runs_in_kiln(kiln_calls):
    torch.manual_seed(0)
    model = Attn()
    ref = copy.deepcopy(model)
    x = torch.randn(2, 16, 32)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch._dynamo.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = torch.compile(model, backend="kiln")(x1)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    # The fused CPU flash attention (forward or backward) would fall back
    # to eager with a warning naming it.
    assert not _kiln_warnings(w), _kiln_warnings(w)
    assert kiln_calls[0] >= 2  # the forward and the backward graph
    want = ref(x2)
    (want * torch.linspace(-1, 1, want.numel()).view_as(want)).sum().backward()
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{name}: {m}")


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096  # resident pages (4 KiB on x86-64 Linux)


def test_resident_memory_flat_over_1000_steps(kiln_calls):
    """A leak of one activation per step (32 x 128 fp32 = 16 KiB, the
    smallest tensor kiln hands to autograd here) would grow the resident set
    by 14 MiB over the 900 steps measured; 8 MiB leaves room for allocator
    noise (glibc keeps freed blocks) and none for a leak of any per-step
    tensor or kiln buffer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    torch._dynamo.reset()
    cm = torch.compile(model, backend="kiln")
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    rss = {}
    # One torch thread: these tensors are tiny, and on a loaded machine
    # torch's OpenMP threads spend longer waking than computing.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for i in range(1, 1001):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(cm(x), y)
            loss.backward()
            opt.step()
            if i in (100, 1000):
                rss[i] = _rss_bytes()
    finally:
        torch.set_num_threads(threads)
    assert kiln_calls[0] >= 2000  # forward and backward in kiln every step
    assert torch.isfinite(loss)
    growth = rss[1000] - rss[100]
    assert growth < 8 << 20, f"resident set grew by {growth / 2**20:.1f} MiB from step 100 to 1000"


def _select_scatter_sum(n_pieces, dim_size=3):
    def f(*pieces):
        z = torch.zeros(dim_size, 4, 5)
        out = None
        for i, p in enumerate(pieces[:n_pieces]):
            s = torch.select_scatter(z, p, 0, 2 - i)
            out = s if out is None else out + s
        return out * 2
    return f


@pytest.mark.parametrize("n_pieces,rewritten", [(3, 1), (2, 0)])
def test_select_scatter_sum_becomes_stack(n_pieces, rewritten):
    """The rewrite fires only when the pieces cover the whole dimension
    (with two of three, the zeros of the third index must stay)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from kiln.train_rewrite import stack_select_scatters

    f = _select_scatter_sum(n_pieces)
    pieces = [torch.randn(4, 5) for _ in range(3)]
    gm = make_fx(f, tracing_mode="fake")(*pieces)
    assert stack_select_scatters(gm) == rewritten
    ops = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert ("aten.select_scatter.default" in ops) == (not rewritten)
    torch.testing.assert_close(gm(*pieces), f(*pieces), rtol=0, atol=0)


def test_max_backward_sees_the_forwards_own_values():
    """amax's backward finds the maxima by eq(saved max, input). The min-cut
    partitioner recomputed the input (an RMS norm over a short dim) in the
    backward, where kiln ran it as separate ops rather than the forward's
    RMS_NORM kernel: one ulp apart, no element equalled the max any more,
    and the gradient was NaN (0 / 0) in 2 of these 40 draws (fuzzer seed
    8484, graph 320). train_rewrite.save_compared_values keeps the
    compared values the forward's."""
    def f(x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return y.amax((0, 1))

    torch._dynamo.reset()
    g = torch.compile(f, backend="kiln")
    torch.manual_seed(0)
    for draw in range(40):
        x = torch.randn(64, 5, 3, requires_grad=True)
        g(x).sum().backward()
        got, x.grad = x.grad, None
        f(x).sum().backward()
        assert not got.isnan().any(), f"draw {draw}: NaN in the gradient"
        torch.testing.assert_close(got, x.grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"draw {draw}: {m}")
