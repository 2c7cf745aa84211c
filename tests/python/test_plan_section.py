"""The memory plan stored in a .kiln file (the "plan" section): written at
save, equal to the planner's, used at load; a corrupted plan is refused with
a message, never run."""
import struct

import pytest
import torch

import kiln
from kiln import _C
from conftest import FP32_TOL


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.tanh(self.fc1(x)) * 0.5 + 1.0
        return self.fc2(h) + x, h.sum(-1)


def _saved(tmp_path):
    model = Net().eval()
    x = torch.randn(4, 16)
    compiled = kiln.trace(model, (x,))
    path = tmp_path / "net.kiln"
    kiln.save(compiled, path)
    return model, x, compiled, path


def test_plan_is_stored_and_used(tmp_path):
    model, x, compiled, path = _saved(tmp_path)
    data = path.read_bytes()
    plan = _C.sections(data, ["plan"])["plan"]
    assert plan[:8] == b"KILNPLAN"
    loaded = kiln.load(path)
    with torch.no_grad():
        want = model(x)
    got = loaded(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **FP32_TOL)
    # Same arena as the freshly compiled model (the planner is deterministic).
    arena = [l for l in compiled.explain().splitlines() if "arena" in l]
    assert arena == [l for l in loaded.explain().splitlines() if "arena" in l]


@pytest.mark.parametrize("field,value", [(16, 10 ** 6), (0, 8)])
def test_corrupt_plan_is_refused(tmp_path, field, value):
    _, _, _, path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    plan = _C.sections(bytes(data), ["plan"])["plan"]
    at = bytes(data).find(plan)
    assert at > 0
    n_values = struct.unpack_from("<I", plan, 12)[0]
    # Corrupt the last value's record (an intermediate): its root, or its
    # arena offset to a misaligned one.
    rec = at + 32 + 24 * (n_values - 1)
    fmt = "<I" if field == 16 else "<q"
    struct.pack_into(fmt, data, rec + field, value)
    bad = tmp_path / "bad.kiln"
    bad.write_bytes(bytes(data))
    with pytest.raises(kiln.KilnError, match="plan section"):
        kiln.load(bad)
