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


def _patchify(res):
    """A convolution kiln lowers to one GEMM (python/kiln/optable/core.py,
    _is_patchify: groups 1, kernel = stride > 1, no padding, dilation 1)."""
    for n in res.graph.nodes:
        if n.op == "call_function" and n.target is aten.convolution.default:
            x, w, bias, stride, padding, dilation, transposed, _, groups = n.args[:9]
            kernel = list(w.meta["val"].shape[2:])
            if (not transposed and groups == 1 and list(stride) == kernel and all(k > 1 for k in kernel)
                    and not any(padding) and all(d == 1 for d in dilation)):
                return True
    return False


# name -> (what it is, predicate on a program.Resolved). Names starting
# "quant-" apply to the quant mode's paths only (evaluate.py).
KNOWN = {
    "quant-patchify": ("a patch-embedding convolution (kernel = stride) becomes a LINEAR and weights_dtype "
                       "quantizes its weight (FINDINGS.md, the quant mode: patch embeddings)", _patchify),
}

# Skipped by default (the CLI's --skip-known, and tests/python/test_fuzz.py).
ACTIVE = ("quant-patchify",)


def known_bug(res, names):
    """The first of `names` whose predicate matches res, or None."""
    for name in names:
        if KNOWN[name][1](res):
            return name
    return None
