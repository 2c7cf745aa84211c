"""The standalone `kiln` command line (src/tools): info, run, bench, profile
on an artifact saved from Python, checked against PyTorch eager; corrupt
artifacts and bad input files must fail with a message, never a crash.

The binary is the one the project build makes (build/src/tools/kiln, built
by `make test` / `make build`).
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import kiln

REPO = pathlib.Path(__file__).resolve().parents[2]
KILN_BIN = REPO / "build" / "src" / "tools" / "kiln"

pytestmark = pytest.mark.skipif(
    not KILN_BIN.exists(), reason=f"kiln CLI not built at {KILN_BIN} (run `make build`)")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


def cli(*args, check=True):
    """Runs the CLI; returns the CompletedProcess (text mode)."""
    env = dict(os.environ, KILN_NUM_THREADS="1")
    p = subprocess.run([str(KILN_BIN), *map(str, args)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode >= 0, f"kiln {args} died from signal {-p.returncode}: {p.stderr}"
    if check:
        assert p.returncode == 0, f"kiln {args} failed ({p.returncode}): {p.stderr}"
    return p


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    """(path to m.kiln, input tensor, path to its .bin, eager output)."""
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(5, 16)
    compiled = kiln.trace(model, x)
    d = tmp_path_factory.mktemp("cli")
    path = d / "m.kiln"
    kiln.save(compiled, path)
    xbin = d / "x.bin"
    x.numpy().astype("<f4").tofile(xbin)
    with torch.no_grad():
        expected = model(x)
    # The compiled module and eager agree (the CLI is compared with both).
    assert_close(compiled(x), expected, rtol=1e-5, atol=1e-6)
    return path, x, xbin, expected


def test_version_and_help():
    assert "kiln" in cli("--version").stdout
    assert "usage" in cli("help").stdout


def test_info_lists_inputs_outputs_and_plan(artifact):
    path, _, _, _ = artifact
    out = cli("info", path).stdout
    assert "format:     2." in out
    assert "(5, 16) float32" in out     # the input
    assert "(5, 4) float32" in out      # the output
    assert "linear" in out
    assert "arena:" in out and "constants:" in out


def test_run_with_input_file_matches_eager(artifact, tmp_path):
    path, x, xbin, expected = artifact
    outdir = tmp_path / "out"
    p = cli("run", path, "--input", f"x={xbin}", "--output-dir", outdir)
    assert "read from" in p.stdout and "mean" in p.stdout
    got = np.fromfile(outdir / "output0.bin", dtype="<f4").reshape(5, 4)
    assert_close(torch.from_numpy(got), expected, rtol=1e-5, atol=1e-6)


def test_run_by_index_with_threads(artifact, tmp_path):
    path, _, xbin, expected = artifact
    p = cli("run", path, "--input", f"0={xbin}", "--threads", 2, "--output-dir", tmp_path)
    got = np.fromfile(tmp_path / "output0.bin", dtype="<f4").reshape(5, 4)
    assert_close(torch.from_numpy(got), expected, rtol=1e-5, atol=1e-6)
    assert "2 threads" in p.stdout


def test_run_without_inputs_says_random_and_is_deterministic(artifact, tmp_path):
    path, _, _, _ = artifact
    a = cli("run", path, "--output-dir", tmp_path / "a")
    assert "pseudo-random" in a.stdout
    cli("run", path, "--output-dir", tmp_path / "b")
    ya = np.fromfile(tmp_path / "a" / "output0.bin", dtype="<f4")
    yb = np.fromfile(tmp_path / "b" / "output0.bin", dtype="<f4")
    assert ya.size == 20 and np.array_equal(ya, yb)


def test_bench_prints_median(artifact):
    path, _, _, _ = artifact
    out = cli("bench", path, "--runs", 5, "--warmup", 1).stdout
    assert "median" in out and "p90" in out and "min" in out


def test_profile_lists_linear(artifact):
    path, _, _, _ = artifact
    out = cli("profile", path, "--runs", 3).stdout
    assert "linear" in out and "share" in out


def test_truncated_artifact_is_rejected(artifact, tmp_path):
    path, _, _, _ = artifact
    data = path.read_bytes()
    for cut in (0, 10, 64, 200, len(data) // 2, len(data) - 1):
        bad = tmp_path / f"cut{cut}.kiln"
        bad.write_bytes(data[:cut])
        p = cli("info", bad, check=False)
        assert p.returncode == 1, (cut, p.stderr)
        assert p.stderr.startswith("kiln: ")
        assert "corrupt" in p.stderr or "truncated" in p.stderr, p.stderr


def test_corrupted_bytes_never_crash(artifact, tmp_path):
    path, _, _, _ = artifact
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(0)
    for trial in range(20):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=4):
            bad[pos] ^= 0xFF
        f = tmp_path / f"flip{trial}.kiln"
        f.write_bytes(bytes(bad))
        # Flipped bytes may land in weights (a valid file): either outcome
        # is fine as long as it is an orderly exit.
        p = cli("run", f, check=False)
        assert p.returncode in (0, 1), p.stderr
        if p.returncode:
            assert p.stderr.startswith("kiln: ")


def test_wrong_size_input_is_rejected(artifact, tmp_path):
    path, _, xbin, _ = artifact
    short = tmp_path / "short.bin"
    short.write_bytes(xbin.read_bytes()[:-4])
    p = cli("run", path, "--input", f"x={short}", check=False)
    assert p.returncode == 1
    assert "kiln: " in p.stderr and "'x'" in p.stderr and "expected 320" in p.stderr


def test_unknown_input_name_is_rejected(artifact):
    path, _, xbin, _ = artifact
    p = cli("run", path, "--input", f"nope={xbin}", check=False)
    assert p.returncode == 1 and "nope" in p.stderr and "x" in p.stderr


@pytest.mark.parametrize("args", [
    [],
    ["frobnicate"],
    ["run"],
    ["info", "m.kiln", "--measure"],
    ["run", "m.kiln", "--threads", "0"],
    ["bench", "m.kiln", "--runs", "many"],
    ["run", "m.kiln", "--bogus"],
])
def test_usage_errors_exit_2(args):
    p = cli(*args, check=False)
    assert p.returncode == 2, p.stderr
    assert "kiln" in p.stderr


def test_missing_file_exits_1(tmp_path):
    p = cli("info", tmp_path / "nope.kiln", check=False)
    assert p.returncode == 1 and "kiln: " in p.stderr and "nope.kiln" in p.stderr
