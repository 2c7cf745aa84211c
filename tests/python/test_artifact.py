"""Saving and loading: the .kiln artifact and torch.jit.save/load."""
import subprocess
import sys

import pytest
import torch

import kiln
from conftest import FP32_TOL


def small_model():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()


def test_kiln_save_load_round_trip(tmp_path):
    model, x = small_model(), torch.randn(5, 32)
    compiled = kiln.trace(model, x)
    path = tmp_path / "m.kiln"
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    torch.testing.assert_close(loaded(x), compiled(x), rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), **FP32_TOL)
    assert loaded.explain().count("linear") >= 2


def test_structured_outputs_survive_save(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            return {"a": x + 1, "b": [x * 2, x.sum(-1)]}

    x = torch.randn(3, 4)
    path = tmp_path / "m.kiln"
    kiln.save(kiln.trace(M(), x), path)
    out = kiln.load(path)(x)
    assert set(out) == {"a", "b"}
    torch.testing.assert_close(out["b"][1], x.sum(-1))


def test_truncated_and_corrupt_files_are_rejected(tmp_path):
    compiled = kiln.trace(small_model(), torch.randn(5, 32))
    data = compiled.to_bytes()
    for cut in (0, 3, 63, 64, len(data) // 2, len(data) - 1):
        p = tmp_path / f"cut{cut}.kiln"
        p.write_bytes(data[:cut])
        with pytest.raises(kiln.KilnError):
            kiln.load(p)
    bad = bytearray(data)
    bad[0:4] = b"NOPE"
    (tmp_path / "magic.kiln").write_bytes(bytes(bad))
    with pytest.raises(kiln.KilnError, match="magic"):
        kiln.load(tmp_path / "magic.kiln")
    # Flipping bytes of the header and graph never crashes: it loads or fails cleanly.
    for i in range(0, min(len(data), 4096), 7):
        flipped = bytearray(data)
        flipped[i] ^= 0xFF
        p = tmp_path / "flip.kiln"
        p.write_bytes(bytes(flipped))
        try:
            kiln.load(p)
        except kiln.KilnError:
            pass


def test_torch_jit_save_and_load(tmp_path):
    model, x = small_model(), torch.randn(5, 32)
    traced = kiln.trace(model, x)
    path = str(tmp_path / "m.pt")
    torch.jit.save(traced, path)
    loaded = torch.jit.load(path)
    torch.testing.assert_close(loaded(x), traced(x), rtol=0, atol=0)
    # A second call reuses the loaded model.
    torch.testing.assert_close(loaded(x), traced(x), rtol=0, atol=0)


def test_torch_jit_load_in_a_fresh_process(tmp_path):
    model, x = small_model(), torch.randn(5, 32)
    path = tmp_path / "m.pt"
    torch.jit.save(kiln.trace(model, x), str(path))
    torch.save({"x": x, "y": model(x).detach()}, tmp_path / "io.pt")
    code = (
        "import torch, kiln\n"
        f"m = torch.jit.load({str(path)!r})\n"
        f"io = torch.load({str(tmp_path / 'io.pt')!r})\n"
        "torch.testing.assert_close(m(io['x']), io['y'], rtol=1e-4, atol=1e-4)\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
