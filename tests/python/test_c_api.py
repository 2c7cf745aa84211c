"""The public C API (include/kiln.h) through its example program,
examples/c/run_model.c, built by the project's meson build against
libkiln_runtime.so alone: models saved here with kiln.save are loaded and run
from C and the outputs compared with PyTorch eager's; a bad file or a bad
input must end with a clear message and exit status 1, never a crash.

The binary is build/examples/c/run_model (built by `make build` / `make test`).
"""

import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import kiln

REPO = pathlib.Path(__file__).resolve().parents[2]
RUN_MODEL = REPO / "build" / "examples" / "c" / "run_model"
RUNTIME_LIB = REPO / "build" / "libkiln_runtime.so"
DOC = REPO / "docs" / "c-api.md"

pytestmark = pytest.mark.skipif(
    not RUN_MODEL.exists(), reason=f"C API example not built at {RUN_MODEL} (run `make build`)")


def run_model(*args, check=True, threads=1):
    env = dict(os.environ, KILN_NUM_THREADS=str(threads))
    p = subprocess.run([str(RUN_MODEL), *map(str, args)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode >= 0, f"run_model {args} died from signal {-p.returncode}: {p.stderr}"
    if check:
        assert p.returncode == 0, f"run_model {args} failed ({p.returncode}): {p.stderr}"
    return p


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class TwoInputs(torch.nn.Module):
    """x (3, 8) float32 and ids (3,) int64 -> (x + emb(ids), softmax(x))."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)

    def forward(self, x, ids):
        return x + self.emb(ids), torch.softmax(x, dim=-1)


class CatNet(torch.nn.Module):
    """x (B, T, 16), y (B, U, 8) -> cat(linear(x), y) along dim 1: (B, T + U, 8)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)

    def forward(self, x, y):
        return torch.cat([self.lin(x), y], dim=1)


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP().eval()
    x = torch.randn(5, 16)
    d = tmp_path_factory.mktemp("c_api")
    path = d / "mlp.kiln"
    kiln.save(kiln.trace(model, x), path)
    return path, model


def _bin(tmp_path, name, t, dtype="<f4"):
    p = tmp_path / f"{name}.bin"
    t.numpy().astype(dtype).tofile(p)
    return p


def _out(tmp_path, k, shape, dtype="<f4"):
    return torch.from_numpy(np.fromfile(tmp_path / f"output{k}.bin", dtype=dtype).reshape(shape))


def test_example_links_the_runtime_library_only():
    # The example is a deployment: the public header and libkiln_runtime.so
    # (no compiler) are all it needs.
    dyn = subprocess.run(["readelf", "-d", str(RUN_MODEL)], capture_output=True, text=True)
    if dyn.returncode != 0:
        pytest.skip("readelf not available")
    assert "libkiln_runtime.so" in dyn.stdout and "[libkiln.so]" not in dyn.stdout, dyn.stdout
    syms = subprocess.run(["nm", "-D", "--defined-only", str(RUNTIME_LIB)], capture_output=True,
                          text=True)
    if syms.returncode == 0:
        names = [line.split()[-1] for line in syms.stdout.splitlines() if line.strip()]
        assert names and all(n.startswith("kiln_") for n in names), names
        assert "kiln_session_run" in names and "kiln_compile" not in names
        assert "kiln_model_run" not in names  # internals stay hidden


def test_run_from_file_matches_eager(mlp, tmp_path):
    path, model = mlp
    x = torch.randn(5, 16)
    p = run_model(path, "--input", f"x={_bin(tmp_path, 'x', x)}", "--output-dir", tmp_path)
    assert "input 0 'x': (5, 16) float32" in p.stdout, p.stdout
    assert "output 0 (5, 4) float32:" in p.stdout, p.stdout
    with torch.no_grad():
        assert_close(_out(tmp_path, 0, (5, 4)), model(x), rtol=1e-5, atol=1e-5)


def test_same_result_as_python_kiln_on_two_threads(mlp, tmp_path):
    path, _ = mlp
    x = torch.randn(5, 16)
    run_model(path, "--input", _bin(tmp_path, "x", x), "--output-dir", tmp_path,
              "--threads", 2)
    # kiln in Python runs the same artifact: the C API gives its result.
    assert_close(_out(tmp_path, 0, (5, 4)), kiln.load(path)(x), rtol=1e-6, atol=1e-6)


def test_seeded_inputs_are_deterministic(mlp, tmp_path):
    path, _ = mlp
    a = run_model(path, "--seed", 3).stdout
    b = run_model(path, "--seed", 3).stdout
    c = run_model(path, "--seed", 4).stdout
    assert a == b and a != c


def test_two_inputs_by_name_with_int64(tmp_path):
    torch.manual_seed(1)
    model = TwoInputs().eval()
    x, ids = torch.randn(3, 8), torch.tensor([1, 7, 3])
    path = tmp_path / "two.kiln"
    kiln.save(kiln.trace(model, (x, ids)), path)
    p = run_model(path, "--input", f"ids={_bin(tmp_path, 'ids', ids, '<i8')}",
                  "--input", f"0={_bin(tmp_path, 'x', x)}", "--output-dir", tmp_path)
    assert "input 1 'ids': (3) int64" in p.stdout, p.stdout
    with torch.no_grad():
        want0, want1 = model(x, ids)
    assert_close(_out(tmp_path, 0, (3, 8)), want0, rtol=1e-6, atol=1e-6)
    assert_close(_out(tmp_path, 1, (3, 8)), want1, rtol=1e-6, atol=1e-6)
    p = run_model(path, "--input", f"idz={tmp_path / 'ids.bin'}", check=False)
    assert p.returncode == 1 and "no input named 'idz' (the inputs: 'x', 'ids')" in p.stderr, \
        p.stderr


@pytest.fixture(scope="module")
def sym_path(tmp_path_factory):
    from torch.export import Dim

    torch.manual_seed(0)
    model = CatNet().eval()
    b = Dim("b", max=8)
    compiled = kiln.trace(model, (torch.randn(2, 5, 16), torch.randn(2, 3, 8)),
                          dynamic_shapes={"x": {0: b, 1: Dim("t", max=128)},
                                          "y": {0: b, 1: Dim("u", max=32)}})
    path = tmp_path_factory.mktemp("c_api_sym") / "sym.kiln"
    kiln.save(compiled, path)
    return path, model


@pytest.mark.parametrize("b,t,u", [(2, 40, 3), (3, 7, 32)])
def test_symbolic_model_at_given_shapes(sym_path, tmp_path, b, t, u):
    path, model = sym_path
    x, y = torch.randn(b, t, 16), torch.randn(b, u, 8)
    p = run_model(path, "--shape", f"x={b}x{t}x16", "--shape", f"y={b}x{u}x8",
                  "--input", f"x={_bin(tmp_path, 'x', x)}", "--input", f"y={_bin(tmp_path, 'y', y)}",
                  "--output-dir", tmp_path)
    # The declared shapes name the symbols and their ranges; the output's
    # size along dim 1 is an expression of two of them.
    # (torch names them s<N> in the exported program, which kiln keeps.)
    m = re.search(r"input 0 'x': \((\w+) in 1\.\.8, (\w+) in 1\.\.128, 16\) float32", p.stdout)
    assert m, p.stdout
    bsym, tsym = m.groups()
    m = re.search(r"input 1 'y': \((\w+) in 1\.\.8, (\w+) in 1\.\.32, 8\) float32", p.stdout)
    assert m and m.group(1) == bsym, p.stdout
    usym = m.group(2)
    assert f"output 0: ({bsym} in 1..8, {tsym} + {usym} in 2..160, 8) float32" in p.stdout, \
        p.stdout
    assert f"output 0 ({b}, {t + u}, 8) float32:" in p.stdout, p.stdout
    with torch.no_grad():
        assert_close(_out(tmp_path, 0, (b, t + u, 8)), model(x, y), rtol=1e-5, atol=1e-5)


def test_symbolic_errors_name_the_input_and_symbol(sym_path):
    path, _ = sym_path
    p = run_model(path, check=False)
    assert p.returncode == 1 and re.search(
        r"input 0 has symbolic sizes \(dimension 0 is \w+ in 1\.\.8\)", p.stderr), p.stderr
    p = run_model(path, "--shape", "x=9x4x16", "--shape", "y=9x3x8", check=False)
    assert p.returncode == 1 and re.search(
        r"input 0 \('x'\): dimension 0 \(\w+\) is 9, expected 1\.\.8", p.stderr), p.stderr
    p = run_model(path, "--shape", "x=2x4x16", "--shape", "y=3x3x8", check=False)
    assert p.returncode == 1 and re.search(r"but input 0 gave \w+ = 2", p.stderr), p.stderr


def test_bad_files_are_clear_errors(mlp, tmp_path):
    path, _ = mlp
    data = path.read_bytes()
    cut = tmp_path / "cut.kiln"
    cut.write_bytes(data[: len(data) // 2])
    p = run_model(cut, check=False)
    assert p.returncode == 1, p.stderr
    assert p.stderr.startswith(f"run_model: corrupt artifact '{cut}'"), p.stderr
    junk = tmp_path / "junk.kiln"
    junk.write_bytes(b"this is not a kiln file, just some text\n" * 4)
    p = run_model(junk, check=False)
    assert p.returncode == 1 and "corrupt artifact" in p.stderr, p.stderr
    p = run_model(tmp_path / "missing.kiln", check=False)
    assert p.returncode == 1 and "missing.kiln" in p.stderr, p.stderr
    p = run_model(check=False)
    assert p.returncode == 2 and "usage" in p.stderr


def test_corrupted_bytes_never_crash(mlp, tmp_path):
    path, _ = mlp
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(0)
    bad = tmp_path / "bad.kiln"
    for _ in range(12):
        damaged = bytearray(data)
        for i in rng.integers(0, len(data), size=4):
            damaged[i] ^= int(rng.integers(1, 256))
        bad.write_bytes(bytes(damaged))
        p = run_model(bad, check=False)  # asserts no signal
        assert p.returncode in (0, 1), p.stderr
        if p.returncode:
            assert p.stderr.startswith("run_model: "), p.stderr


def test_wrong_size_input_file_is_refused(mlp, tmp_path):
    path, _ = mlp
    small = _bin(tmp_path, "small", torch.randn(4, 16))
    p = run_model(path, "--input", f"x={small}", check=False)
    assert p.returncode == 1 and "fewer bytes than the 320" in p.stderr, p.stderr


def test_the_documented_example_compiles_and_runs(mlp, tmp_path):
    """docs/c-api.md's complete example, as written there, built against the
    public header and libkiln_runtime.so with warnings as errors."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    text = DOC.read_text()
    code = re.search(r"```c\n(.*?)```", text[text.index("## A complete example"):], re.S).group(1)
    src = tmp_path / "kiln_hello.c"
    src.write_text(code)
    exe = tmp_path / "kiln_hello"
    build = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                            f"-I{REPO / 'include'}", str(src), f"-L{RUNTIME_LIB.parent}",
                            "-lkiln_runtime", f"-Wl,-rpath,{RUNTIME_LIB.parent}", "-o", str(exe)],
                           capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stderr
    path, model = mlp
    p = subprocess.run([str(exe), str(path)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "input 0 'x': (5, 16) float32" in p.stdout, p.stdout
    with torch.no_grad():
        want = model(torch.full((5, 16), 0.5))[0, :4]
    got = torch.tensor([float(v) for v in p.stdout.split("output 0:")[1].split()])
    assert_close(got, want, rtol=1e-4, atol=1e-5)  # printed with %g: 6 digits
    cut = tmp_path / "cut.kiln"
    cut.write_bytes(path.read_bytes()[:100])
    p = subprocess.run([str(exe), str(cut)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "error (corrupt artifact): corrupt artifact" in p.stderr, p.stderr
