"""kiln's kernels run in the OpenMP runtime torch loaded (one team of
threads for eager ops and kiln kernels), or on kiln's own threads with
KILN_POOL=own or OMP_WAIT_POLICY=passive; both give the same results, from
any calling thread, and both follow torch.set_num_threads."""
import os
import subprocess
import sys
import threading

import pytest
import torch

import kiln
from kiln import _C


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 256)

    def forward(self, x):
        return torch.softmax(self.fc2(torch.nn.functional.gelu(self.fc1(x))), -1) * x


def _traced():
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(64, 256)
    k = kiln.trace(model, (x,))
    k._kiln_model.set_threads(2)  # parallel kernels even on a one-core machine
    return model, k, x


@pytest.mark.skipif(not torch.backends.openmp.is_available(), reason="torch built without OpenMP")
def test_torch_openmp_runtime_is_used():
    assert kiln.HOST_THREADS is not None
    assert os.path.basename(kiln.HOST_THREADS).startswith(("libgomp", "libiomp5", "libomp"))
    _, k, _ = _traced()
    assert "in the host's OpenMP regions" in k.explain().splitlines()[-1]


def test_host_and_own_threads_agree_bitwise():
    model, k, x = _traced()
    try:
        _C.host_threads(False)
        own = k(x)
        assert "OpenMP" not in k.explain().splitlines()[-1]
    finally:
        _C.host_threads(kiln.POOL == "host", True)
    host = k(x)
    # Same tasks over the same data: which thread ran a task cannot change a bit.
    assert torch.equal(own, host)
    with torch.no_grad():
        torch.testing.assert_close(host, model(x), rtol=1e-5, atol=1e-5)


def test_calls_from_other_threads():
    """Each calling thread gets its own OpenMP team; results are unchanged."""
    _, k, x = _traced()
    want = k(x)
    got = [None] * 3

    def run(i):
        got[i] = k(x)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for g in got:
        assert torch.equal(g, want)


def test_kiln_pool_own_switch():
    code = "import kiln; print(kiln.HOST_THREADS)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "KILN_POOL": "own"}).stdout.strip()
    assert out == "None"


@pytest.mark.skipif(not torch.backends.openmp.is_available(), reason="torch built without OpenMP")
def test_torch_set_num_threads_limits_kiln():
    """torch.set_num_threads(n) limits kiln's default pool as it limits torch
    (never past kiln's own size); a model given set_threads keeps its count."""
    own = _C.num_threads()
    before = torch.get_num_threads()
    model = Block().eval()
    x = torch.randn(64, 256)
    k = kiln.trace(model, (x,))
    want = k(x)
    try:
        torch.set_num_threads(1)
        assert _C.num_threads() == 1
        assert k._kiln_model.threads() == 1
        assert torch.equal(k(x), want)  # same tasks, one thread: the same bits
        torch.set_num_threads(own + 1)
        assert _C.num_threads() == own
        k._kiln_model.set_threads(2)
        torch.set_num_threads(1)
        assert k._kiln_model.threads() == 2
    finally:
        torch.set_num_threads(before)
        k._kiln_model.set_threads(0)
    assert _C.num_threads() == min(own, before)


@pytest.mark.parametrize("env, pool", [
    ({}, "host"),
    ({"OMP_WAIT_POLICY": "PASSIVE"}, "own"),
    ({"OMP_WAIT_POLICY": "passive", "KILN_POOL": "host"}, "host"),
    ({"OMP_WAIT_POLICY": "active"}, "host"),
    ({"KILN_POOL": "own"}, "own"),
])
def test_pool_choice(env, pool):
    """OMP_WAIT_POLICY=passive: OpenMP's threads sleep after each region, so
    kiln keeps its own (waking a team for each kernel made a decode step
    1.2-2.9x slower); KILN_POOL says otherwise explicitly."""
    assert kiln._pool_choice(env) == pool


_OWN_FOLLOWS = """
import torch, kiln
from kiln import _C
assert kiln.POOL == "own" and kiln.HOST_THREADS is None, (kiln.POOL, kiln.HOST_THREADS)
torch.manual_seed(0)
lin = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).eval()
x = torch.randn(64, 256)
k = kiln.trace(lin, (x,))
torch.set_num_threads(4)
want = k(x)
print(_C.num_threads())
torch.set_num_threads(2)
print(_C.num_threads(), torch.equal(k(x), want))
torch.set_num_threads(1)
print(_C.num_threads(), torch.equal(k(x), want))
"""


@pytest.mark.skipif(not torch.backends.openmp.is_available(), reason="torch built without OpenMP")
def test_own_threads_follow_torch_set_num_threads():
    """kiln's own pool of 4 threads (OMP_WAIT_POLICY=passive) runs no more
    than torch.set_num_threads allows; the workers past that claim no task
    (their per-thread scratch was not sized for them) and every count gives
    the same bits."""
    env = {**os.environ, "OMP_WAIT_POLICY": "passive", "KILN_NUM_THREADS": "4"}
    env.pop("KILN_POOL", None)
    out = subprocess.run([sys.executable, "-c", _OWN_FOLLOWS], capture_output=True, text=True,
                         check=True, env=env).stdout.split()
    assert out == ["4", "2", "True", "1", "True"], out
