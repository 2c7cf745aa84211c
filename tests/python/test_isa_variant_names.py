"""One ISA-variant mechanism for every kernel family (issue 19).

Kernel variants are named by one macro (KILN_ISA_VARIANT, or spelled out as
kiln_<dtype>_<op>_<tile>__<isa>), built by one meson loop
(src/kernels/meson.build, from each family's kiln_isa_families entry) and
picked by one rule (src/kernels/kiln_isa_variant.h). This test fails when a
family grows its own mechanism again: one of the retired suffix macros, a
*_SUFFIX macro defined in a source file, a per-ISA static_library or suffix
flag in a family's meson.build, or a variant symbol in the built library
that is not named <name>__<isa>.
"""

import pathlib
import re
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
KERNELS = REPO / "src" / "kernels"

# The four mechanisms this replaced.
RETIRED = ("KILN_NN_FN", "KILN_NN_SUFFIX", "KILN_MATH_FN", "KILN_MATH_SUFFIX",
           "KILN_CONV_PLANES_FN", "KILN_CONV_PLANES_SUFFIX", "KILN_ISA_FN",
           "KILN_ELTWISE_SUFFIX", "KILN_ELTWISE_ISA_VARIANT")
ISAS = ("generic", "avx2", "avx512", "avx512bf16", "amx", "neon")
RETIRED_RE = re.compile(r"\b(" + "|".join(RETIRED) + r")\b")
SUFFIX_DEFINE = re.compile(r"^\s*#\s*define\s+(\w*_SUFFIX)\b", re.M)
SUFFIX_FLAG = re.compile(r"-D(\w*SUFFIX)\b")


def sources():
    for root in ("src", "tests/c", "bench", "examples"):
        for p in sorted((REPO / root).rglob("*")):
            if p.is_file() and (p.suffix in (".c", ".h") or p.name == "meson.build"):
                yield p


def violations(rel, text):
    """(line, what) for each breach of the rules in one file's text."""
    out = []

    def line_of(m):
        return text.count("\n", 0, m.start()) + 1

    for m in RETIRED_RE.finditer(text):
        out.append((line_of(m), f"retired macro {m.group(1)}"))
    if rel.startswith("src/kernels/"):
        for m in SUFFIX_DEFINE.finditer(text):
            out.append((line_of(m), f"defines its own {m.group(1)} (use kiln_isa_variant.h)"))
        if rel.endswith("meson.build") and rel != "src/kernels/meson.build":
            for m in re.finditer(r"\bstatic_library\s*\(", text):
                out.append((line_of(m), "builds its own ISA library (add to kiln_isa_families)"))
    if rel.endswith("meson.build"):
        for m in SUFFIX_FLAG.finditer(text):
            if m.group(1) != "KILN_ISA_SUFFIX":
                out.append((line_of(m), f"suffix flag {m.group(1)}"))
    return out


def test_one_mechanism():
    found = []
    for p in sources():
        rel = p.relative_to(REPO).as_posix()
        for line, what in violations(rel, p.read_text(errors="replace")):
            found.append(f"{rel}:{line}: {what}")
    assert not found, "ISA-variant rules broken:\n" + "\n".join(found)


@pytest.mark.parametrize("rel, text, bad", [
    ("src/kernels/nn/kiln_x.c", "void KILN_NN_FN(kiln_nn_x)(void);\n", True),
    ("src/kernels/foo/kiln_x.c", "#ifndef KILN_FOO_SUFFIX\n#define KILN_FOO_SUFFIX _generic\n", True),
    ("src/kernels/foo/meson.build", "x = static_library('kiln_foo_avx2', f)\n", True),
    ("src/kernels/foo/meson.build", "c_args : ['-DKILN_FOO_SUFFIX=_avx2']\n", True),
    ("src/kernels/meson.build", "static_library('kiln_' + family, c_args : ['-DKILN_ISA_SUFFIX=__' + isa])\n",
     False),
    ("src/kernels/nn/kiln_x.c", "void KILN_ISA_VARIANT(kiln_nn_x)(void);\n", False),
])
def test_checker_sees_a_plant(rel, text, bad):
    assert bool(violations(rel, text)) == bad


def test_variant_symbols_named_by_isa():
    """Each external per-ISA function of the core ends in __<isa>: a kernel
    named the old way (kiln_f32_gemv__avx2) is one no list reaches. (Static
    helpers inside one ISA's file are that file's business.)"""
    archives = sorted((REPO / "build").glob("libkiln_runtime_core.a"))
    archives += sorted((REPO / "build" / "src" / "kernels").glob("libkiln_*.a"))
    if len(archives) < 2 or not shutil.which("nm"):
        pytest.skip("needs the build's static archives and nm")
    out = subprocess.run(["nm", "-g", "--defined-only"] + [str(a) for a in archives],
                         capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if len(line.split()) == 3]
    isa = "|".join(ISAS)
    old = sorted({n for n in names if re.search(r"[a-z0-9]_(" + isa + r")$", n)
                  and not re.search(r"__(" + isa + r")$", n)})
    assert not old, "variants not named <name>__<isa>: " + ", ".join(old)
