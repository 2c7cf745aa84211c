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

pytestmark = [pytest.mark.skipif(
    not KILN_BIN.exists(), reason=f"kiln CLI not built at {KILN_BIN} (run `make build`)"),
    pytest.mark.usefixtures("machine_cache")]  # `kiln profile` reads the machine's peaks


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


def _table_row(text, op):
    """The columns of the first table line of `op`: node, op, ms, share,
    MFLOP, KiB, GFLOP/s, GB/s, %peak, bound (then the origin)."""
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 10 and cols[1] == op and cols[0].isdigit():
            return cols
    raise AssertionError(f"no {op} row in:\n{text}")


def test_profile_table_of_a_gemm_of_known_flops(tmp_path):
    """`kiln profile` prints kiln.profile's table: a (64, 256) x (256, 512)
    linear's row shows its 2 M K N FLOPs and the bytes Python reports, the
    figures per second follow from the row's own time, the bound and the
    roofs from the machine's peaks, and totals close the table."""
    m_, k, n = 64, 256, 512
    torch.manual_seed(0)
    c = kiln.trace(torch.nn.Linear(k, n, bias=False).eval(), torch.randn(m_, k))
    path = tmp_path / "gemm.kiln"
    kiln.save(c, path)
    out = cli("profile", path, "--runs", 3, "--warmup", 1).stdout
    cols = _table_row(out, "linear")
    flops = 2 * m_ * k * n
    assert cols[4] == f"{flops / 1e6:.3f}", out
    ms, mflop, kib, gflops, gbs = (float(cols[i]) for i in (2, 4, 5, 6, 7))
    assert gflops == pytest.approx(mflop / ms, rel=0.02, abs=0.1)
    assert gbs == pytest.approx(kib * 1024 / 1e6 / ms, rel=0.02, abs=0.1)
    assert kib * 1024 >= 4 * (m_ * k + k * n + m_ * n) - 512
    assert cols[9] in ("compute", "memory") and cols[8].endswith("%")
    assert "roofs:" in out and "ridge" in out and "total" in out
    # Python's report: the same C lines, the same FLOPs and bytes.
    rep = kiln.profile(kiln.load(path), torch.randn(m_, k), runs=2)
    (row,) = [r for r in rep.rows if r["op"] == "linear"]
    assert row["flops"] == flops and f"{row['bytes'] / 1024:.1f}" == cols[5]
    py = _table_row(str(rep), "linear")
    # The bound column compares the row with the machine's measured peaks,
    # which each process may measure anew (a loaded machine moves them): only
    # its vocabulary is checked, not that two processes agree.
    assert py[4:6] == cols[4:6] and py[9] in ("compute", "memory")


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


# ---- symbolic artifacts (format 2.7): run at a shape given by --shape ----


class CatNet(torch.nn.Module):
    """x (B, T, 16), y (B, U, 8) -> cat(linear(x), y) along dim 1: (B, T + U, 8)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x, y):
        return torch.cat([self.lin(x), y], dim=1)


@pytest.fixture(scope="module")
def sym_artifact(tmp_path_factory):
    """(path to a symbolic .kiln, the eager model)."""
    from torch.export import Dim

    torch.manual_seed(0)
    model = CatNet().eval()
    b = Dim("b", max=8)
    compiled = kiln.trace(model, (torch.randn(2, 5, 16), torch.randn(2, 3, 8)),
                          dynamic_shapes={"x": {0: b, 1: Dim("t", max=128)}, "y": {0: b, 1: Dim("u", max=32)}})
    path = tmp_path_factory.mktemp("cli_sym") / "sym.kiln"
    kiln.save(compiled, path)
    return path, model


def _bins(tmp_path, *tensors):
    paths = []
    for i, t in enumerate(tensors):
        p = tmp_path / f"in{i}.bin"
        t.numpy().astype("<f4").tofile(p)
        paths.append(p)
    return paths


def test_info_names_symbolic_dims_and_ranges(sym_artifact):
    path, _ = sym_artifact
    out = cli("info", path).stdout
    assert "format:     2.7" in out
    assert "symbols:    3" in out
    for rng in ("1..8", "1..128", "1..32"):
        assert rng in out, out
    # The inputs and the output print their symbolic dims by name.
    assert " + " in out and ", 16) float32" in out and "?" not in out
    assert "planned per shape" in out


@pytest.mark.parametrize("b,t,u", [(2, 40, 3), (3, 7, 32)])
def test_run_symbolic_at_given_shapes_matches_eager(sym_artifact, tmp_path, b, t, u):
    path, model = sym_artifact
    x, y = torch.randn(b, t, 16), torch.randn(b, u, 8)
    xbin, ybin = _bins(tmp_path, x, y)
    p = cli("run", path, "--shape", f"x={b}x{t}x16", "--shape", f"y={b}x{u}x8",
            "--input", f"x={xbin}", "--input", f"y={ybin}", "--output-dir", tmp_path / "out")
    assert f"({b}, {t + u}, 8) float32" in p.stdout, p.stdout
    assert f"= {b}" in p.stdout  # the symbols' values
    got = np.fromfile(tmp_path / "out" / "output0.bin", dtype="<f4").reshape(b, t + u, 8)
    with torch.no_grad():
        assert_close(torch.from_numpy(got), model(x, y), rtol=1e-5, atol=1e-5)


def test_bench_and_profile_symbolic(sym_artifact):
    path, _ = sym_artifact
    shapes = ["--shape", "x=4x64x16", "--shape", "1=4x2x8"]
    assert "median" in cli("bench", path, *shapes, "--runs", 3, "--warmup", 1).stdout
    assert "linear" in cli("profile", path, *shapes, "--runs", 2).stdout


def test_symbolic_without_shape_says_what_to_pass(sym_artifact):
    path, _ = sym_artifact
    for cmd in ("run", "bench", "profile"):
        p = cli(cmd, path, check=False)
        assert p.returncode == 1, p.stderr
        err = p.stderr
        assert err.startswith("kiln: input 0 ('x')") and "symbolic sizes" in err, err
        assert "dimension 0 is" in err and "in 1..8" in err and "in 1..128" in err, err
        assert "--shape x=" in err, err
    # x given, y not: the message is about y.
    p = cli("run", path, "--shape", "x=2x4x16", check=False)
    assert p.returncode == 1 and "input 1 ('y')" in p.stderr and "--shape y=" in p.stderr, p.stderr


class RowNet(torch.nn.Module):
    def forward(self, x, y):
        return x.mean(1) + y


def test_an_input_whose_symbols_others_give_needs_no_shape(tmp_path):
    """y (b, 16) shares x's b: --shape x=3x5x16 sizes it (as a generation
    step's cache takes its rows from the input ids'); an expression or a
    symbol no given input has still needs its own --shape."""
    from torch.export import Dim

    b = Dim("b", max=8)
    compiled = kiln.trace(RowNet(), (torch.randn(2, 5, 16), torch.randn(2, 16)),
                          dynamic_shapes={"x": {0: b, 1: Dim("t", max=64)}, "y": {0: b}})
    path = tmp_path / "rows.kiln"
    kiln.save(compiled, path)
    assert "(3, 16) float32" in cli("run", path, "--shape", "x=3x5x16").stdout
    assert "median" in cli("bench", path, "--shape", "x=3x5x16", "--runs", 2, "--warmup", 1).stdout
    p = cli("run", path, "--shape", "y=3x16", check=False)
    assert p.returncode == 1 and "input 0 ('x')" in p.stderr and "--shape x=" in p.stderr, p.stderr


@pytest.mark.parametrize("shapes,needle", [
    (["x=2x4"], "3 dimensions; '2x4' gives 2"),
    (["x=2x4x15", "y=2x3x8"], "dimension 2 is fixed at 16, not 15"),
    (["x=2x200x16", "y=2x3x8"], "is 200, outside its range 1..128"),
    (["x=9x4x16", "y=9x3x8"], "is 9, outside its range 1..8"),
    (["x=2x4x16", "y=3x3x8"], "but input 0 gave"),
    (["x=2x4x16", "x=2x4x16"], "given twice"),
    (["z=2x4x16"], "no input 'z'"),
    (["x=2x-4x16"], "'-4' is not a size"),
    (["2x4x16"], "say which (NAME=DIMS)"),
])
def test_bad_shapes_are_clear_errors(sym_artifact, shapes, needle):
    path, _ = sym_artifact
    args = [a for s in shapes for a in ("--shape", s)]
    p = cli("run", path, *args, check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith("kiln: ") and needle in p.stderr, p.stderr


def test_shape_on_a_concrete_artifact(artifact):
    path, _, _, _ = artifact
    assert "(5, 4) float32" in cli("run", path, "--shape", "x=5x16").stdout
    p = cli("run", path, "--shape", "x=6x16", check=False)
    assert p.returncode == 1 and "fixed at 5, not 6" in p.stderr, p.stderr


def test_corrupted_symbolic_artifact_never_crashes(sym_artifact, tmp_path):
    path, _ = sym_artifact
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(1)
    for trial in range(20):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad) // 2, size=3):
            bad[pos] ^= 0xFF
        f = tmp_path / f"flip{trial}.kiln"
        f.write_bytes(bytes(bad))
        p = cli("info", f, check=False)
        assert p.returncode in (0, 1), p.stderr
        if p.returncode:
            assert p.stderr.startswith("kiln: ")


def test_profile_states_the_decode_ceiling(tmp_path):
    """`kiln profile` of a decode step (one token through a 256 -> 1024
    linear) prints the weights it streams per call and the tokens/s
    ceiling, the same figures as kiln.profile."""
    torch.manual_seed(0)
    x = torch.randn(1, 256)
    c = kiln.trace(torch.nn.Linear(256, 1024, bias=False).eval(), x)
    path = tmp_path / "decode.kiln"
    kiln.save(c, path)
    out = cli("profile", path, "--runs", 2, "--warmup", 1).stdout
    line = [l for l in out.splitlines() if l.startswith("weights:")]
    assert line and "1.00 MiB of constants read per call" in line[0], out
    assert "decode-shaped, 1 row per call" in line[0] and "tokens/s" in line[0]
    # The ceiling is the read bandwidth (1 thread: KILN_NUM_THREADS=1) over
    # 1 MiB; the roofs line rounds the bandwidth to 0.05 GB/s.
    roofs = [l for l in out.splitlines() if l.startswith("roofs:")][0]
    assert "sampled beside the runs" in roofs, roofs
    gbs = float(roofs.split("GFLOP/s fp32 FMA, ")[1].split(" GB/s")[0])
    calls = float(line[0].split("at most ")[1].split(" calls/s")[0])
    assert abs(calls - gbs * 1e9 / 2**20) <= 0.05e9 / 2**20 + 0.1, (calls, gbs)


def test_guards_listed_and_checked(tmp_path):
    """torch.export's guards beyond the ranges travel in the artifact
    (format 2.10): `kiln info` lists them and `kiln run` refuses a shape that
    breaks one (view(-1, 1, 40) traced as (s0, 1, s2*s3) needs s2*s3 == 40),
    naming it, instead of running the traced program at a wrong shape."""
    from torch.export import Dim

    class ViewTo40(torch.nn.Module):
        def forward(self, x):
            return x.view(-1, 1, 40) * 2

    path = tmp_path / "v.kiln"
    kiln.save(kiln.trace(ViewTo40().eval(), (torch.randn(3, 1, 5, 8),),
                         dynamic_shapes={"x": {0: Dim.AUTO, 2: Dim.AUTO, 3: Dim.AUTO}}), path)
    info = cli("info", path).stdout
    assert "format:     2.10" in info and "guards:" in info and "== 40" in info, info
    assert cli("run", path, "--shape", "x=2x1x4x10").returncode == 0
    p = cli("run", path, "--shape", "x=36x1x20x11", check=False)
    assert p.returncode == 1, p.stderr
    assert "a condition the program was traced under" in p.stderr and "198 == 36" in p.stderr, p.stderr
