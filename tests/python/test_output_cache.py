"""Large outputs of a compiled module live in kiln's block cache, handed to
PyTorch through DLPack (kiln.module, src/base/kiln_block_cache.h): a freed
output's memory comes back and is reused without page faults. These tests
check the results stay eager's, a block is never handed out while a tensor
still uses it, and memory comes back from any thread."""

import gc
import threading

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import kiln
from kiln.module import CACHED_OUTPUT_BYTES


class Two(nn.Module):
    """One output of 512 KiB (cached), one of 512 bytes (torch.empty)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 1024)

    def forward(self, x):
        y = self.lin(x)
        return y, y[:1, :128].sum(0)


def _traced(seed):
    """(the compiled Two, its input, eager's first output)."""
    torch.manual_seed(seed)
    m = Two().eval()
    x = torch.randn(128, 256)
    with torch.no_grad():
        return kiln.trace(m, (x,)), x, m(x)[0]


@pytest.fixture(scope="module")
def compiled():
    k, x, _ = _traced(0)
    return k, x


def test_results_and_reuse():
    torch.manual_seed(0)
    m = Two().eval()
    x = torch.randn(128, 256)
    with torch.no_grad():
        k = kiln.trace(m, (x,))
        ey, es = m(x)
    assert 128 * 1024 * 4 >= CACHED_OUTPUT_BYTES > 128 * 4
    before = kiln.output_cache()
    y, s = k(x)
    assert_close(y, ey, rtol=256e-6, atol=256e-6)
    assert_close(s, es, rtol=256e-6, atol=256e-6)
    assert y.is_contiguous() and y.dtype == torch.float32 and y.shape == (128, 1024)
    ptr = y.data_ptr()
    del y, s
    assert kiln.output_cache()["idle_blocks"] >= 1
    y2, _ = k(x)
    after = kiln.output_cache()
    assert y2.data_ptr() == ptr, "the freed block is handed out again"
    assert after["hits"] > before["hits"]
    assert_close(y2, ey, rtol=256e-6, atol=256e-6)


def test_live_outputs_never_share(compiled):
    k, x = compiled
    ys = [k(x)[0] for _ in range(4)]
    assert len({y.data_ptr() for y in ys}) == 4
    ys[0].fill_(1.0)
    for y in ys[1:]:
        assert not torch.equal(y, ys[0])
    # A view keeps the block: the next call must not get it.
    view = ys[1][3:5]
    ptr = ys[1].data_ptr()
    del ys
    fresh = [k(x)[0] for _ in range(3)]
    assert all(f.data_ptr() != ptr for f in fresh)
    assert view.shape == (2, 1024) and torch.isfinite(view).all()


def test_output_outlives_module():
    k, x, want = _traced(1)
    y = k(x)[0]
    del k
    gc.collect()
    assert_close(y, want, rtol=256e-6, atol=256e-6)


def test_freed_on_another_thread(compiled):
    k, x = compiled
    kiln.empty_cache()
    assert kiln.output_cache()["idle_bytes"] == 0
    box = [k(x)[0]]
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert kiln.output_cache()["idle_bytes"] >= 128 * 1024 * 4


def test_cap_and_empty_cache(compiled):
    k, x = compiled
    try:
        kiln.output_cache(0)  # keep nothing: every output is a fresh block
        y = k(x)[0]
        del y
        assert kiln.output_cache()["idle_bytes"] == 0
    finally:
        kiln.output_cache(1 << 30)
    y = k(x)[0]
    del y
    assert kiln.output_cache()["idle_bytes"] > 0
    kiln.empty_cache()
    assert kiln.output_cache()["idle_bytes"] == 0


def test_switched_off(monkeypatch):
    monkeypatch.setenv("KILN_OUTPUT_CACHE", "0")
    k, x, want = _traced(2)
    before = kiln.output_cache()
    y = k(x)[0]
    assert_close(y, want, rtol=256e-6, atol=256e-6)
    after = kiln.output_cache()
    assert (after["hits"], after["misses"]) == (before["hits"], before["misses"])


def test_training_grads_come_from_the_cache():
    # Earlier tests compile nn.Sequential too: past Dynamo's recompile limit
    # its forward would run eager, and nothing here would come from kiln.
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    ref = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512))
    ref.load_state_dict(model.state_dict())
    cm = torch.compile(model, backend="kiln")
    x = torch.randn(256, 512)
    start = kiln.output_cache()
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        cm(x).square().mean().backward()
        ref(x).square().mean().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    ran = kiln.output_cache()
    assert ran["hits"] + ran["misses"] > start["hits"] + start["misses"], "kiln ran the steps"
    before = ran["hits"]
    model.zero_grad(set_to_none=True)
    cm(x).square().mean().backward()
    assert kiln.output_cache()["hits"] > before, "the step's large outputs reuse blocks"
