"""The C core's layers (issue 19): which directory of src/ may include which.

The arrows point one way (docs: /work/shared/DESIGN.md, "Which way the arrows
point"): base <- ir <- compiler; base <- kernels <- hal <- runtime; the API,
the CLI and the Python extension on top. Kernels are leaves that never see
the graph; the IR never sees a kernel; the runtime never needs the compiler;
and only src/hal names a target (hal/cpu/...): everything else talks to
targets through hal/kiln_hal.h. A forbidden #include anywhere in src/,
tests/c, bench or examples fails this test with the file, line and rule.

The CLI is linked against the runtime alone: its binary must hold no
compiler symbol.
"""

import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SRC = REPO / "src"

# Directory of src/ -> the top-level directories its files must not include.
FORBIDDEN = {
    "base": {"ir", "kernels", "hal", "runtime", "compiler", "api", "tools", "python"},
    "kernels": {"ir", "hal", "runtime", "compiler", "api", "tools", "python"},
    "ir": {"kernels", "hal", "runtime", "compiler", "api", "tools", "python"},
    "hal": {"runtime", "compiler", "api", "tools", "python"},
    "compiler": {"kernels", "runtime", "api", "tools", "python"},
    "runtime": {"compiler", "api", "tools", "python"},
    "api": {"compiler", "tools", "python"},
    "tools": {"compiler", "api", "python"},
    "python": {"api", "tools"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def violations(rel_path, text):
    """(line, include, rule) for each forbidden include of one file, given
    its path relative to the repository and its text."""
    parts = pathlib.PurePosixPath(rel_path).parts
    layer = parts[1] if parts[0] == "src" and len(parts) > 2 else None
    out = []
    for m in INCLUDE.finditer(text):
        inc = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        top = inc.split("/", 1)[0]
        if inc.startswith("hal/cpu/") and layer != "hal":
            out.append((line, inc, "only src/hal names a target (hal/cpu)"))
        elif layer in FORBIDDEN and top in FORBIDDEN[layer]:
            out.append((line, inc, f"{layer} must not include {top}"))
    return out


def c_files():
    for root in ("src", "tests/c", "bench", "examples"):
        for p in sorted((REPO / root).rglob("*")):
            if p.suffix in (".c", ".h") and p.is_file():
                yield p


def test_no_forbidden_include():
    found = []
    for p in c_files():
        rel = p.relative_to(REPO).as_posix()
        for line, inc, rule in violations(rel, p.read_text(errors="replace")):
            found.append(f"{rel}:{line}: #include \"{inc}\": {rule}")
    assert not found, "layer crossings:\n" + "\n".join(found)


@pytest.mark.parametrize("path, inc, bad", [
    ("src/ir/kiln_x.c", "kernels/nn/kiln_nn.h", True),
    ("src/kernels/nn/kiln_x.c", "ir/kiln_graph.h", True),
    ("src/runtime/kiln_x.c", "compiler/kiln_compiler.h", True),
    ("src/compiler/kiln_x.c", "hal/cpu/kiln_hal_cpu_nn.h", True),
    ("tests/c/test_x.c", "hal/cpu/kiln_hal_cpu_nn.h", True),
    ("src/base/kiln_x.h", "ir/kiln_ops.h", True),
    ("src/tools/kiln_x.c", "compiler/kiln_compiler.h", True),
    ("src/hal/cpu/kiln_x.c", "hal/cpu/kiln_hal_cpu_nn.h", False),
    ("src/hal/cpu/kiln_x.c", "kernels/gemm/kiln_gemm.h", False),
    ("src/compiler/kiln_x.c", "hal/kiln_hal.h", False),
    ("src/ir/kiln_x.c", "base/kiln_dtype.h", False),
    ("tests/c/test_x.c", "kernels/gemm/kiln_gemm.h", False),
])
def test_checker_sees_a_crossing(path, inc, bad):
    """The rule itself: a planted include is caught (or allowed) as it should."""
    found = violations(path, f'/* x */\n#include <stdio.h>\n#include "{inc}"\n')
    assert bool(found) == bad, found
    if bad:
        assert found[0][0] == 3


def test_cli_links_no_compiler():
    cli = REPO / "build" / "src" / "tools" / "kiln"
    if not cli.exists():
        pytest.skip(f"the CLI is not built at {cli} (run `make build`)")
    if not shutil.which("nm"):
        pytest.skip("no nm to list the CLI's symbols")
    names = subprocess.run(["nm", str(cli)], capture_output=True, text=True,
                           check=True).stdout
    compiler = sorted(set(re.findall(r"\b(kiln_(?:compile|pass|rewriter|simplify)\w*)", names)))
    assert "kiln_model_run" in names, "nm shows no kiln symbols: the check would prove nothing"
    assert not compiler, f"the CLI links compiler code: {compiler[:10]}"
