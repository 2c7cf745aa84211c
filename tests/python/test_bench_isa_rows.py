"""The kernel bench's per-ISA rows follow the family lists (issue 19).

bench/kernels/run.py --isa-variants runs each bench_gemm group once per
level of its kernel family's list; the lists are the ones the library was
built from (kiln._C.ISA_FAMILIES, expanded from kernels/kiln_isa_lists.h).
These tests time nothing: they check the enumeration, and that the export
says what the generated header says.
"""

import importlib.util
import pathlib
import re

import pytest

from kiln import _C

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run():
    spec = importlib.util.spec_from_file_location("bench_kernels_run", REPO / "bench/kernels/run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_export_matches_generated_header():
    header = REPO / "build/src/kernels/kiln_isa_lists.h"
    if not header.exists():
        pytest.skip("needs the build's kiln_isa_lists.h")
    text = header.read_text()
    lists = {m.group(1).lower(): re.findall(r"X\((\w+), \w+, a\)", m.group(2))
             for m in re.finditer(r"#define KILN_(\w+)_ISAS\(X, a\) (.*)", text)}
    levels = re.search(r"#define KILN_ISA_LEVELS\(X, a\) (.*)", text).group(1)
    assert _C.ISA_LEVELS == re.findall(r"X\((\w+), \w+, a\)", levels)
    assert _C.ISA_FAMILIES == lists


def test_groups_are_bench_gemms(run):
    """Every group bench_gemm runs has a family, and no other group."""
    src = (REPO / "bench/kernels/bench_gemm.c").read_text()
    assert set(run.GROUP_FAMILY) == set(re.findall(r'bench_wanted\(only, "(\w+)"\)', src))
    assert set(run.GROUP_FAMILY.values()) <= set(_C.ISA_FAMILIES)


def test_every_level_of_each_family(run):
    """At the architecture's top level, --isa-variants runs exactly the
    (group, level) pairs of the lists; at the current level, the rest are
    listed as not run, none dropped."""
    groups = list(run.GROUP_FAMILY)
    want = [(g, run.GROUP_FAMILY[g], lv) for g in groups for lv in _C.ISA_FAMILIES[run.GROUP_FAMILY[g]]]
    todo, skipped = run.isa_rows(groups, True, current=_C.ISA_LEVELS[-1])
    assert todo == want and skipped == []
    todo, skipped = run.isa_rows(groups, True)
    assert sorted(todo + [s[:3] for s in skipped]) == sorted(want)
    top = _C.ISA_LEVELS.index(_C.isa())
    assert all(_C.ISA_LEVELS.index(lv) <= top for _, _, lv in todo)
    assert all(_C.ISA_LEVELS.index(lv) > top and lv in why for _, _, lv, why in skipped)


def test_default_is_the_variant_that_runs(run):
    """Without --isa-variants, each group runs once, at the highest level of
    its family's list at or below the current one (kiln_isa_variant.h)."""
    lists = {"gemm": ["generic", "avx2", "avx512"], "nn": ["generic", "avx2"],
             "conv": ["generic"]}
    levels = ["generic", "avx2", "avx512"]
    todo, skipped = run.isa_rows(["gemm", "rowops", "conv"], False, lists, levels, "avx512")
    assert todo == [("gemm", "gemm", "avx512"), ("rowops", "nn", "avx2"), ("conv", "conv", "generic")]
    assert skipped == []
    todo, skipped = run.isa_rows(["gemm"], True, lists, levels, "avx2")
    assert [t[2] for t in todo] == ["generic", "avx2"]
    assert [s[2] for s in skipped] == ["avx512"]
