"""Known kiln bugs the fuzzer can be told to step around.

While a bug found by the fuzzer is being fixed, every run would keep finding
it again; a known bug's predicate recognises the graphs that may trigger it,
and the runner counts them as "known" instead of running them. Keep this
list small and explicit, each entry pointing at its write-up in
tests/fuzz/FINDINGS.md, and remove an entry (and its name from ACTIVE) once
the bug is fixed: the committed pytest run skips ACTIVE's entries.
"""

import torch

aten = torch.ops.aten

# name -> (what it is, predicate on a program.Resolved)
KNOWN = {}

# Skipped by default (the CLI's --skip-known, and tests/python/test_fuzz.py).
ACTIVE = ()


def known_bug(res, names):
    """The first of `names` whose predicate matches res, or None."""
    for name in names:
        if KNOWN[name][1](res):
            return name
    return None
