"""Random ops in compiled graphs: dropout in training, attention dropout,
torch.rand / randn / bernoulli / uniform_ (kiln/optable/rng.py, the RANDOM
op, src/kernels/math/kiln_random.h).

kiln draws its own numbers (counter-based Philox seeded from torch's
generator per call), so they are not eager's: the tests check what must
hold of any correct draw. Dropout's output and gradient are eager's formula
applied to the mask kiln returns, bit for bit; the mask's rate, and the
moments of the numbers, are within 6 standard errors of what the
distribution gives (fixed seeds, so the tests are deterministic; a correct
generator fails such a bound about once in 10^8 draws); a run repeats under
torch.manual_seed and differs from call to call; the numbers do not depend
on the thread count. KILN_RANDOM=eager keeps eager's own draws."""
import math

import pytest
import torch
import torch.nn.functional as F

import kiln


def _whole(counters):
    kiln_counts = dict(counters["kiln"])
    return kiln_counts.get("graphs", 0) > 0 and kiln_counts.get("graphs") == kiln_counts.get("whole"), kiln_counts


def _rate_bound(p, n):
    return 6 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_output_and_gradient_follow_its_mask(p, fresh_dynamo):
    f = torch.compile(lambda t: F.dropout(t, p, training=True), backend="kiln")
    x = torch.randn(600, 500)
    x[0, :7] = float("nan")
    xg = x.clone().requires_grad_(True)
    y = f(xg)
    y.backward(torch.ones_like(y))
    whole, counts = _whole(fresh_dynamo)
    assert whole, counts
    kept = ~((y == 0) & (x != 0)) & ~x.isnan()  # the mask, read from y (x has no exact zeros)
    kept[0, :7] = xg.grad[0, :7] != 0
    n = x.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < _rate_bound(p, n)
    # eager's formula on this mask: x * mask * 1/(1-p), a dropped NaN stays NaN
    want = x * kept.to(x.dtype) * (1.0 / (1.0 - p))
    assert torch.equal(y.detach().nan_to_num(7.0), want.nan_to_num(7.0))
    assert y[0, :7].isnan().all()
    assert torch.equal(xg.grad, kept.to(x.dtype) * (1.0 / (1.0 - p)))


def test_dropout_of_everything_gives_zeros(fresh_dynamo):
    y = torch.compile(lambda t: F.dropout(t, 1.0, training=True), backend="kiln")(torch.randn(50, 40))
    assert torch.equal(y, torch.zeros(50, 40))


def test_draws_repeat_under_manual_seed_and_differ_per_call(fresh_dynamo):
    f = torch.compile(lambda t: F.dropout(t, 0.5, training=True), backend="kiln")
    x = torch.randn(64, 64)
    torch.manual_seed(5)
    a, b = f(x), f(x)
    after = torch.rand(4)
    torch.manual_seed(5)
    assert torch.equal(f(x), a) and torch.equal(f(x), b)
    assert not torch.equal(a, b)
    # The seed comes from torch's generator: it advanced it, as eager's draws do.
    torch.manual_seed(5)
    assert not torch.equal(torch.rand(4), after)


def test_numbers_do_not_depend_on_the_thread_count(fresh_dynamo):
    f = torch.compile(lambda t: (F.dropout(t, 0.3, training=True), torch.randn_like(t)), backend="kiln")
    x = torch.randn(300, 1000)  # enough elements to be split over threads
    before = torch.get_num_threads()
    got = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            torch.manual_seed(11)
            got.append(f(x))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(u, v) for u, v in zip(*got))


def test_rand_randn_bernoulli_and_uniform(fresh_dynamo):
    def draw(probs, x):
        return (torch.rand(400, 300), torch.randn_like(x), torch.bernoulli(probs),
                torch.bernoulli(x, 0.25), torch.empty(200, 300).uniform_(-2.0, 3.0))

    probs = torch.rand(400, 300) * 0.5
    x = torch.zeros(500, 400)
    u, z, b, b25, w = torch.compile(draw, backend="kiln")(probs, x)
    whole, counts = _whole(fresh_dynamo)
    assert whole, counts
    assert u.shape == (400, 300) and z.shape == x.shape and b.shape == probs.shape
    assert all(t.dtype == torch.float32 for t in (u, z, b, b25, w))
    n = u.numel()
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.double().mean().item() - 0.5) < 6 * math.sqrt(1 / 12 / n)
    assert abs(u.double().var().item() - 1 / 12) < 6 * math.sqrt(1 / 180 / n)
    n = z.numel()
    assert abs(z.double().mean().item()) < 6 / math.sqrt(n)
    assert abs(z.double().var().item() - 1) < 6 * math.sqrt(2 / n)
    assert set(b.unique().tolist()) <= {0.0, 1.0} and set(b25.unique().tolist()) <= {0.0, 1.0}
    # Each Bernoulli draw has its own probability: its sum's variance is sum p(1-p).
    assert abs((b - probs).sum().item()) < 6 * math.sqrt((probs * (1 - probs)).sum().item())
    assert abs(b25.mean().item() - 0.25) < _rate_bound(0.25, b25.numel())
    assert w.min() >= -2.0 and w.max() < 3.0
    assert abs(w.double().mean().item() - 0.5) < 6 * 5 * math.sqrt(1 / 12 / w.numel())
    # Five random nodes, five streams: no two draw the same numbers.
    assert not torch.equal(u[:200], w.add(2.0).div(5.0)[:200])


def test_dropout_over_symbolic_sizes(fresh_dynamo):
    f = torch.compile(lambda t: F.dropout(t, 0.25, training=True), backend="kiln", dynamic=True)
    for rows in (300, 517):
        x = torch.randn(rows, 400)
        y = f(x)
        assert y.shape == x.shape
        kept = y != 0
        assert abs(kept.float().mean().item() - 0.75) < _rate_bound(0.25, x.numel())
        assert torch.equal(y[kept], x[kept] * (1 / 0.75))
    whole, counts = _whole(fresh_dynamo)
    assert whole and counts["graphs"] == 1, counts


def test_attention_dropout_in_training_is_unbiased(fresh_dynamo):
    """scaled_dot_product_attention(dropout_p=0.5) in a training graph runs
    whole in kiln (the math formulation, dropping attention weights); the
    mean of many draws approaches attention without dropout, as it must:
    each output's mean over N calls lies within 6 standard errors (the
    draws' own spread) of the exact value."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 16, requires_grad=True) for _ in range(3))
    f = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5), backend="kiln")
    draws = []
    for _ in range(300):
        out = f(q, k, v)
        draws.append(out.detach())
    out.sum().backward()
    assert all(t.grad is not None and t.grad.isfinite().all() for t in (q, k, v))
    whole, counts = _whole(fresh_dynamo)
    assert whole, counts
    d = torch.stack(draws).double()
    exact = F.scaled_dot_product_attention(q.double(), k.double(), v.double()).detach()
    err = (d.mean(0) - exact).abs()
    se = d.std(0) / math.sqrt(len(draws))
    assert (err < 6 * se + 1e-6).all(), (err / se).max()
    assert not torch.equal(draws[0], draws[1])


def test_training_step_with_dropout_is_whole_in_kiln(fresh_dynamo):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, batch_first=True).train()
    before = [p.detach().clone() for p in layer.parameters()]
    f = torch.compile(layer, backend="kiln")
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        loss = f(torch.randn(4, 10, 32)).square().mean()
        loss.backward()
        opt.step()
    assert loss.isfinite()
    assert all(p.grad.isfinite().all() for p in layer.parameters())
    assert all(not torch.equal(p, b) for p, b in zip(layer.parameters(), before))
    whole, counts = _whole(fresh_dynamo)
    assert whole, counts


def test_kiln_random_eager_keeps_eagers_own_draws(fresh_dynamo, monkeypatch):
    monkeypatch.setenv("KILN_RANDOM", "eager")
    fn = lambda t: F.dropout(t.sin(), 0.4, training=True).cos()  # noqa: E731
    x = torch.randn(30, 20)
    torch.manual_seed(3)
    want = fn(x)
    torch.manual_seed(3)
    with pytest.warns(UserWarning, match="native_dropout"):
        got = torch.compile(fn, backend="kiln")(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_a_traced_module_draws_its_seed_and_saves_it_as_an_input():
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return x + 0.5 * torch.randn_like(x)

    x = torch.zeros(64, 32)
    mod = kiln.trace(Noisy(), (x,))
    data = mod.to_bytes()
    assert int.from_bytes(data[6:8], "little") == 15  # format 2.15: a 2.14 reader refuses the op
    loaded = kiln.KilnModule.from_bytes(data)
    names = [name for name, _, _ in loaded._kiln_model.inputs()]
    assert names[-1] == "kiln.rng_seed" and loaded._input_names == mod._input_names == ["x"]
    torch.manual_seed(9)
    a = mod(x)
    torch.manual_seed(9)
    b = loaded(x)
    assert torch.equal(a, b) and not torch.equal(a, loaded(x))
    assert abs(a.std().item() - 0.5) < 6 * 0.5 / math.sqrt(2 * a.numel())


@pytest.mark.parametrize("eager_random", [False, True])
def test_compare_replays_kilns_draws_in_eager(eager_random, monkeypatch):
    """kiln.compare feeds kiln's random numbers to its eager runs, so the
    ops after a random node are compared on the same numbers (not flagged
    off because the draws differ); KILN_RANDOM=eager: the draw eager made
    between kiln's pieces, likewise."""
    if eager_random:
        monkeypatch.setenv("KILN_RANDOM", "eager")

    class Noisy(torch.nn.Module):
        def forward(self, x):
            return (x + 0.5 * torch.randn_like(x)).relu().sum(-1) + F.dropout(x.exp(), 0.5, True).sum(-1)

    report = kiln.compare(Noisy(), (torch.randn(16, 32),))
    assert report.ok, str(report)
    engines = {r["node"]: r["engine"] for r in report.rows}
    assert engines["randn_like"] == ("eager" if eager_random else "random")
    assert engines["relu"] == "kiln" and len(report.rows) >= 8


def test_hugging_face_training_with_dropout_is_whole_in_kiln(fresh_dynamo):
    """BERT's hidden and attention dropout (SDPA's dropout_p in training)
    and BART's activation dropout: whole in kiln, and training moves."""
    transformers = pytest.importorskip("transformers")
    cases = [
        (transformers.BertForMaskedLM, transformers.BertConfig(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, vocab_size=300,
            attn_implementation="sdpa")),
        (transformers.BartForConditionalGeneration, transformers.BartConfig(
            d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
            encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=300, dropout=0.1, attention_dropout=0.1,
            activation_dropout=0.1)),
    ]
    for cls, cfg in cases:
        torch.manual_seed(0)
        model = cls(cfg).train()
        ids = torch.randint(3, 300, (2, 16))
        f = torch.compile(model, backend="kiln")
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = f(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0], (cls.__name__, losses)
    whole, counts = _whole(fresh_dynamo)
    assert whole, counts


def test_compare_targets_draws_one_seed_for_both():
    """kiln.compare_targets runs the CPU kernels and the scalar references
    from one generator state: the random nodes agree bit for bit (the AVX2
    Philox and Box-Muller against the reference), and so does all after."""
    class Noisy(torch.nn.Module):
        def forward(self, x):
            return (x + torch.randn_like(x)).relu() + F.dropout(x, 0.3, True)

    x = torch.randn(64, 300)
    report = kiln.compare_targets(kiln.trace(Noisy(), (x,)), x)
    assert report.ok and report.outputs_match, str(report)
    assert [r["max_abs"] for r in report.rows if r["op"] == "random"] == [0.0, 0.0]
