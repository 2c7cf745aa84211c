"""A DynamicCache's cat appends in place (issue 17, kiln/cache_append.py).

Each cache tensor lives in a buffer with room along the sequence; the graph
writes the new rows after the old ones and hands out a narrow view. Tokens
equal eager's; Dynamo compiles prefill and decode once each although the
views' strides change with the capacity; and two continuations of one past
never write the same rows (the aliasing rule)."""

import copy

import pytest
import torch
import transformers
from torch._dynamo.utils import counters

import kiln  # noqa: F401  (registers the backend)
from kiln import cache_append

from test_generate import _generate, _model, _prompt, assert_all_in_kiln, compiles

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.mark.parametrize("kind,batch", [("gpt2", 1), ("gpt2", 2), ("llama", 1), ("llama", 2)])
def test_generate_appends_in_place(kind, batch):
    """64 greedy tokens (batch 2 left padded) equal eager's; all but a few
    appends write in place (a copy only when the capacity doubles: 16, 32,
    64, 128 for 9 + 64 rows); the cache the generation returns is a view of
    a buffer with room; prefill and decode compile once each."""
    model = _model(kind)
    ids, mask = _prompt(batch)
    n = dict(max_new_tokens=64, min_new_tokens=64, return_dict_in_generate=True)
    ref = _generate(model, ids, mask, **n)
    model.forward = torch.compile(model.forward, backend="kiln")
    got = _generate(model, ids, mask, **n)
    assert torch.equal(got.sequences, ref.sequences)
    assert compiles() == 2 and counters["kiln"]["graphs"] == 2, (compiles(), dict(counters["kiln"]))
    assert_all_in_kiln()
    tensors = 2 * 2  # keys and values of 2 layers
    done = counters["kiln_cache"]
    assert done["in_place"] + done["copied"] == tensors * 63, dict(done)
    assert done["copied"] == tensors * 3, dict(done)  # 9 rows -> capacity 16; 16, 32, 64 rows double it
    for layer, want in zip(got.past_key_values.layers, ref.past_key_values.layers):
        for k, w in ((layer.keys, want.keys), (layer.values, want.values)):
            torch.testing.assert_close(k, w, atol=1e-5, rtol=1e-5)
            assert k._base is not None and k._base.shape[-2] == 128 and k.shape[-2] == 9 + 63


def _tiny_llama():
    return _model("llama")


def _step(f, cache, tok):
    with torch.no_grad():
        return f(input_ids=tok, past_key_values=cache, use_cache=True).logits


def _continue(f, cache, first, steps):
    """Greedy steps from `first`: the logits of each."""
    out, tok = [], first
    for _ in range(steps):
        logits = _step(f, cache, tok)
        out.append(logits)
        tok = logits[:, -1:].argmax(-1)
    return out


def _copy_cache(cache):
    """A second DynamicCache holding the same tensors (a kept cache; its
    constructor would copy them by its own cat)."""
    other = copy.copy(cache)
    other.layers = [copy.copy(layer) for layer in cache.layers]
    return other


def test_two_continuations_of_one_past():
    """One prefilled cache continued twice with different tokens (a user
    keeping the cache and generating again, beam search's hypotheses): the
    first continuation appends in place after the past's rows; the second
    starts from the same past, which is no longer its buffer's latest view,
    so it is copied into a new buffer instead of writing over the first
    continuation's rows. Both continuations' logits and caches equal
    eager's, the first's read after the second ran. Then a crop (the cache
    cut back to an earlier length, a view of the same buffer) continues
    correctly too."""
    torch.manual_seed(0)
    model = _tiny_llama()
    ids, _ = _prompt(1)
    f = torch.compile(model.forward, backend="kiln")
    eager, kiln_ = transformers.DynamicCache(), transformers.DynamicCache()
    _step(model.forward, eager, ids)
    _step(f, kiln_, ids)
    eager_b, kiln_b = _copy_cache(eager), _copy_cache(kiln_)
    a, b = torch.tensor([[5]]), torch.tensor([[77]])
    want_a = _continue(model.forward, eager, a, 6)
    got_a = _continue(f, kiln_, a, 6)
    assert counters["kiln_cache"]["in_place"] > 0, dict(counters["kiln_cache"])
    copied = counters["kiln_cache"]["copied"]
    want_b = _continue(model.forward, eager_b, b, 6)
    got_b = _continue(f, kiln_b, b, 6)
    for g, w in zip(got_a + got_b, want_a + want_b):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    for cache, ref in ((kiln_, eager), (kiln_b, eager_b)):
        for layer, want in zip(cache.layers, ref.layers):
            torch.testing.assert_close(layer.keys, want.keys, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(layer.values, want.values, atol=1e-5, rtol=1e-5)
    assert counters["kiln_cache"]["copied"] >= copied + 4, dict(counters["kiln_cache"])  # b's first step
    # A crop by 4 rows: a shorter view of the first continuation's buffer.
    eager.crop(-4)
    kiln_.crop(-4)
    assert kiln_.layers[0].keys.shape[-2] == 9 + 6 - 4
    c = torch.tensor([[9]])
    for g, w in zip(_continue(f, kiln_, c, 4), _continue(model.forward, eager, c, 4)):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
    for layer, want in zip(kiln_b.layers, eager_b.layers):  # b's cache untouched by all of it
        torch.testing.assert_close(layer.keys, want.keys, atol=1e-5, rtol=1e-5)


def test_the_same_past_twice():
    """The compiled forward called twice on one past with different
    tokens: the second call's past is not the latest view any more (the
    first call appended after it), so its append is a copy and the first
    call's returned cache keeps its rows. Also a past written in place by
    torch (its version counter moved) is copied rather than trusted."""
    torch.manual_seed(0)
    model = _tiny_llama()
    ids, _ = _prompt(1)
    f = torch.compile(model.forward, backend="kiln")
    cache = transformers.DynamicCache()
    _step(f, cache, ids)
    _step(f, cache, torch.tensor([[3]]))  # the decode graph is compiled and the cache a view
    past = [(l.keys, l.values) for l in cache.layers]
    ref = transformers.DynamicCache([(k.clone(), v.clone()) for k, v in past])
    one, two = _copy_cache(cache), _copy_cache(cache)
    r1 = _step(f, one, torch.tensor([[5]]))
    r2 = _step(f, two, torch.tensor([[6]]))
    e1 = _step(model.forward, transformers.DynamicCache([(k.clone(), v.clone()) for k, v in past]),
               torch.tensor([[5]]))
    e2 = _step(model.forward, transformers.DynamicCache([(k.clone(), v.clone()) for k, v in past]),
               torch.tensor([[6]]))
    torch.testing.assert_close(r1, e1, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(r2, e2, atol=1e-5, rtol=1e-5)
    for l1, l2, l0 in zip(one.layers, two.layers, ref.layers):
        torch.testing.assert_close(l1.keys[..., :-1, :], l0.keys)
        torch.testing.assert_close(l2.keys[..., :-1, :], l0.keys)
        assert not torch.equal(l1.keys[..., -1, :], l2.keys[..., -1, :])  # each kept its own new row
    # The latest view, modified through torch: its version moved, so copied.
    latest = one.layers[0].keys
    assert cache_append.latest_buffer(latest, 2) is not None
    latest.mul_(1.0)
    assert cache_append.latest_buffer(latest, 2) is None


def test_append_kiln_cannot_lower_copies(monkeypatch):
    """A graph whose appends kiln cannot lower in place (here: made to
    fail) compiles with the copying cat, whole in kiln, tokens unchanged."""
    from kiln.errors import Unsupported

    def refuse(self, a):
        def lower(ctx):
            raise Unsupported("no room today")
        return lower

    monkeypatch.setattr(cache_append.Lowering, "cat", refuse)
    model = _model("llama")
    ids, mask = _prompt(1)
    n = dict(max_new_tokens=8, min_new_tokens=8)
    ref = _generate(model, ids, mask, **n)
    model.forward = torch.compile(model.forward, backend="kiln")
    assert torch.equal(_generate(model, ids, mask, **n), ref)
    assert_all_in_kiln()
    assert not counters["kiln_cache"], dict(counters["kiln_cache"])


def test_a_cat_of_an_input_with_itself_is_no_append():
    """cat([x, x]) of a graph input looks like an append of x to x, but the
    past is lowered as its length alone: kiln must compute it as a cat (it
    raised KeyError before; fuzzer finding 20), forward and backward."""
    def f(x):  # the forward saves the cat for gelu's backward: a graph output
        y = torch.nn.functional.gelu(torch.cat([x, x], -4), approximate="tanh").clamp(-1.0, 2.0)
        return y, y.sum()

    x = torch.randn(33, 1, 5, 17)
    xe, xk = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref = f(xe)
    got = torch.compile(f, backend="kiln")(xk)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r)
    (ref[0].sum() + ref[1]).backward()
    (got[0].sum() + got[1]).backward()
    torch.testing.assert_close(xk.grad, xe.grad)
    assert not counters["kiln_cache"], dict(counters["kiln_cache"])


def test_latest_view_changed_behind_kilns_back_is_copied():
    """What the append-in-place check relies on, shown: every in-place
    change of the latest view's metadata moves the version counter it
    shares with its buffer (unsqueeze_, transpose_, as_strided_, resize_),
    and `.data =` (which moves no counter) moves its pointer; either way the
    view is no longer trusted as the latest."""
    from kiln.cache_append import Buffer, commit, latest_buffer

    changes = [lambda v: v.unsqueeze_(0), lambda v: v.transpose_(0, 1), lambda v: v.as_strided_(v.shape, v.stride()),
               lambda v: v.resize_(1, 2, 3, 4), lambda v: v.mul_(1.0),
               lambda v: setattr(v, "data", torch.zeros_like(v))]
    for change in changes:
        b = Buffer(torch.zeros(1, 2, 16, 4), 2)
        v = commit(b, 5)
        assert latest_buffer(v, 2) is b and v._base is b.tensor and v.shape == (1, 2, 5, 4)
        change(v)
        assert latest_buffer(v, 2) is None
    # An older view of the buffer is not the latest once a newer one is out.
    b = Buffer(torch.zeros(1, 2, 16, 4), 2)
    old = commit(b, 5)
    new = commit(b, 6)
    assert latest_buffer(old, 2) is None and latest_buffer(new, 2) is b


def test_decode_fallbacks_give_eagers_answer():
    """The appending call path's checked cases: a non-contiguous token
    tensor (made contiguous for the C call, kept alive through it) and a
    weight written in place mid-generation (the graph is compiled again with
    the new value, never run stale) both give eager's logits."""
    torch.manual_seed(0)
    model = _tiny_llama()
    ids, _ = _prompt(2)
    f = torch.compile(model.forward, backend="kiln")
    eager, kiln_ = transformers.DynamicCache(), transformers.DynamicCache()
    torch.testing.assert_close(_step(f, kiln_, ids), _step(model.forward, eager, ids), atol=1e-5, rtol=1e-5)
    for k in range(4):
        tok = torch.tensor([[3 + k, 0], [7 + k, 0]])[:, :1]  # (2, 1) with strides (2, 1)
        assert not tok.is_contiguous()
        if k == 2:
            with torch.no_grad():
                model.model.layers[0].mlp.up_proj.weight.mul_(1.5)
        torch.testing.assert_close(_step(f, kiln_, tok), _step(model.forward, eager, tok.contiguous()),
                                   atol=1e-5, rtol=1e-5)
    assert counters["kiln_cache"]["in_place"] > 0, dict(counters["kiln_cache"])


def test_only_a_cache_shaped_cat_is_appended_in_place():
    """An appended cat's result is a narrow view of kiln's buffer, which is
    not dense (its .view(-1) raises where eager's cat's works). So only a
    cache's growth is appended: 4-d (batch, heads, length, head dim) along
    the length. A returned cat of an input along another dim, or of another
    rank, is a dense copy, as eager's (fuzzer seed 8989, graph 1991, in
    inference)."""
    def f(past, new):
        return torch.cat([past, new], dim)

    for shape, dim in (((2, 8), 1), ((2, 3, 8), 1), ((1, 2, 8, 4), 1), ((1, 2, 8, 4), 3)):
        torch._dynamo.reset()
        counters.clear()
        past = torch.randn(shape)
        new_shape = list(shape)
        new_shape[dim] = 1
        new = torch.randn(new_shape)
        with torch.no_grad():
            got = torch.compile(f, backend="kiln")(past, new)
        assert got.is_contiguous() and torch.equal(got.view(-1), f(past, new).view(-1)), (shape, dim)
        assert not counters["kiln_cache"], (shape, dim, dict(counters["kiln_cache"]))
    # The cache's own shape still is (and its result is the narrow view).
    torch._dynamo.reset()
    counters.clear()
    dim = 2
    past, new = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 1, 4)
    with torch.no_grad():
        got = torch.compile(f, backend="kiln")(past, new)
    torch.testing.assert_close(got, f(past, new), rtol=0, atol=0)
    assert counters["kiln_cache"]["copied"] + counters["kiln_cache"]["in_place"] > 0, \
        dict(counters["kiln_cache"])
