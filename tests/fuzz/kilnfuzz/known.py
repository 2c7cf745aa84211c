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


_PRODUCTS = {aten.mm.default: 0, aten.bmm.default: 0, aten.matmul.default: 0, aten.linear.default: 0,
             aten.addmm.default: 1, aten.baddbmm.default: 1}


# Ops whose result a zero's sign changes (an infinity's sign, an angle).
_SIGN_OF_ZERO = {aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.reciprocal.default, aten.div.Tensor,
                 aten.atan2.default, aten.copysign.Tensor, aten.signbit.default, aten.log.default,
                 aten.rsqrt.default}


def _one_term_product(res):
    """A matrix product over K = 1 (an outer product) that an op a zero's
    sign changes reads, directly or through others: eager's product over
    K = 1 is each single product, -0 where +0 meets a negative; kiln's GEMM
    sums from a +0 accumulator, so every zero is +0 (FINDINGS.md, seed
    20097 graph 3688). Only such graphs: products over K = 1 are common in
    the fuzzer's small shapes, and elsewhere a zero's sign does not show."""
    seen, todo = set(), []
    for n in res.graph.nodes:
        if n.op == "call_function" and n.target in _PRODUCTS:
            a = n.args[_PRODUCTS[n.target]]
            val = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
            if val is not None and val.dim() >= 1 and val.shape[-1] == 1:
                todo.append(n)
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in seen:
                continue
            seen.add(u)
            if u.op == "call_function" and u.target in _SIGN_OF_ZERO:
                return True
            todo.append(u)
    return False


# name -> (what it is, predicate on a program.Resolved). Names starting
# "quant-" apply to the quant mode's paths only (evaluate.py).
KNOWN = {
    "quant-patchify": ("a patch-embedding convolution (kernel = stride) becomes a LINEAR and weights_dtype "
                       "quantizes its weight (FINDINGS.md, the quant mode: patch embeddings)", _patchify),
    "one-term-product": ("a matrix product over K = 1 gives +0 where eager's single product is -0 "
                         "(FINDINGS.md, seed 20097 graph 3688)", _one_term_product),
}

# Skipped by default (the CLI's --skip-known, and tests/python/test_fuzz.py).
ACTIVE = ("quant-patchify", "one-term-product")


def known_bug(res, names):
    """The first of `names` whose predicate matches res, or None."""
    for name in names:
        if KNOWN[name][1](res):
            return name
    return None
