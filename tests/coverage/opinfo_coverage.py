#!/usr/bin/env python3
"""OpInfo coverage of kiln: every op of PyTorch's op_db, through kiln.trace.

For each OpInfo in torch.testing._internal.common_methods_invocations.op_db
and each dtype of float32 / int64 / bool that the op supports on the CPU, the
op's sample inputs (``op.sample_inputs("cpu", dtype)``) become small modules
calling ``op.op(input, *args, **kwargs)`` with every tensor as a module input
(Python scalars are baked in). Each is compiled with kiln.trace and run; its
outputs are compared with eager's. A sample is

  pass            kiln's outputs equal eager's (shape, dtype and values)
  fail            a wrong result, or an error raised inside kiln (a bug)
  unsupported     kiln.UnsupportedOpError (the ATen op it names is recorded)
  not-exportable  torch.export (or its decomposition) failed, or the program
                  it captured, run by PyTorch itself, disagrees with eager:
                  not kiln's fault
  skipped         eager raised, an input dtype kiln does not take (float64,
                  complex), or a non-tensor output: not a kiln question

and an op (per dtype) is `fail` if any sample failed, else `unsupported` if
any sample was, else `pass` if any sample ran, else `not-exportable` (or
`skipped` when nothing was testable).

Fallback: every `unsupported` sample is then traced again with
kiln.trace(..., fallback=True) (the unsupported ops run in eager between
kiln pieces) and compared with eager: `fallback-pass` or `fallback-fail`
(a wrong result or any error: torch.export captured it, so it must run;
a sample that torch.export captured only as part of a batch and cannot
capture alone is `fallback-not-exportable`, not a failure).
These are extra columns; the native statuses above are unchanged.

Dynamic shapes (--dynamic): each sample instead runs through
torch.compile(sample, backend="kiln", dynamic=True) (Dynamo, every size a
SymInt; graph breaks allowed) and is compared with eager with the same
tolerances; then, where eager takes them, again on inputs with every dim
grown by 1 (a second size from the same compile). A sample is

  pass            kiln's outputs equal eager's, every op in kiln
  eager           equal to eager's, some op ran in eager PyTorch (kiln
                  refused it under symbolic sizes: the reasons are recorded)
  fail            a wrong result, or an error from kiln's backend
                  (BackendCompilerFailed, or a traceback through kiln)
  not-capturable  Dynamo itself (backend="eager") fails or disagrees with
                  eager, or no graph reached kiln: not kiln's fault
  skipped         as above

and an op is `fail` if any sample failed, else `eager` if any sample was,
else `pass` if any ran, else `not-capturable` (or `skipped`).

    python tests/coverage/opinfo_coverage.py --dynamic --quick --dtypes float32 --ops var,std

Speed: a trace costs ~0.3 s of fixed torch.export overhead, so all samples of
one op go into one module (a ModuleList, one output tuple per sample) and are
traced once; when that fails, the unsupported ops are attributed to samples
through the decomposed graph's nn_module_stack, and other errors send the
samples through one at a time.

    python tests/coverage/opinfo_coverage.py                 # everything
    python tests/coverage/opinfo_coverage.py --quick         # 2 samples/op
    python tests/coverage/opinfo_coverage.py --ops add,mul --out /tmp/c.json
    python tests/coverage/opinfo_coverage.py --resume        # go on where it stopped
    python tests/coverage/opinfo_coverage.py --shard 0/2 --out c0.json &   # one process per core
    python tests/coverage/opinfo_coverage.py --shard 1/2 --out c1.json
    python tests/coverage/opinfo_coverage.py --merge c0.json c1.json --out coverage.json

The JSON is rewritten after every row ("complete": false until the end), so
a full run (hours on two cores) can stop and be resumed.

It also prints how many Core ATen ops (tagged torch.Tag.core) kiln's op table
handles. The logic is importable (tests/python/test_opinfo_subset.py).
"""

import argparse
import io
import json
import math
import os
import sys
import time
import traceback
import warnings

import torch
from torch.utils import _pytree as pytree

import kiln
from kiln.optable import DTYPES, TABLE
from kiln.progress import Progress

DEFAULT_DTYPES = (torch.float32, torch.int64, torch.bool)

# Ops whose values are random or undefined: only shape and dtype are compared.
# (fractional_max_pool draws its pooling regions at random.)
NONDETERMINISTIC_WORDS = ("rand", "normal", "uniform", "bernoulli", "multinomial", "cauchy", "exponential",
                          "geometric", "dropout", "rrelu", "empty", "fractional_max_pool")

# fp32 tolerance: OpInfo inputs are O(1..10) and kiln's kernels are within a
# few ulp elementwise; reductions / GEMMs reorder sums. Loose enough for
# that, tight enough that any real bug (wrong element, wrong broadcast,
# wrong constant) shows.
FLOAT_TOL = dict(rtol=1e-4, atol=1e-5)


def op_id(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def load_op_db():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def is_nondeterministic(op):
    name = op_id(op).lower()
    return any(w in name for w in NONDETERMINISTIC_WORDS)


# ---- samples as modules ---------------------------------------------------------------


class SampleCall(torch.nn.Module):
    """op.op(input, *args, **kwargs) with the sample's tensors as inputs."""

    def __init__(self, fn, leaves, spec, tensor_pos):
        super().__init__()
        self.fn = fn
        self.leaves, self.spec, self.tensor_pos = leaves, spec, tensor_pos

    def forward(self, *tensors):
        leaves = list(self.leaves)
        for i, t in zip(self.tensor_pos, tensors):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(inp, *args, **kwargs)


class Batch(torch.nn.Module):
    """Several samples in one module: forward returns one output per sample."""

    def __init__(self, calls, counts):
        super().__init__()
        self.samples = torch.nn.ModuleList(calls)
        self.counts = counts

    def forward(self, *tensors):
        outs, at = [], 0
        for m, c in zip(self.samples, self.counts):
            outs.append(m(*tensors[at:at + c]))
            at += c
        return tuple(outs)


class Prepared:
    """One sample ready to run: its module, its tensor inputs, eager's output."""

    def __init__(self, index, call, tensors, want, tie_input=None, sign_free=False):
        self.index, self.call, self.tensors, self.want = index, call, tensors, want
        self.tie_input = tie_input  # the input of a TIE_OPS op: indices checked by choice
        self.sign_free = sign_free  # a SIGN_FREE_OPS op: (U, S, V) compared up to signs


def prepare(op, sample, index):
    """A Prepared sample, or (status, reason) when it cannot be tested."""
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    tensor_pos = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i].detach().clone() for i in tensor_pos]
    for t in tensors:
        if t.dtype not in DTYPES:
            return "skipped", f"input dtype {t.dtype}"
        if t.is_sparse or t.layout != torch.strided:
            return "skipped", "non-strided input"
    call = SampleCall(op.op, leaves, spec, tensor_pos)
    try:
        with torch.no_grad():
            want = call(*[t.clone() for t in tensors])
    except Exception as e:  # eager rejects the sample (e.g. an error-input case)
        return "skipped", f"eager raised {type(e).__name__}"
    out_leaves = pytree.tree_leaves(want)
    if not out_leaves or not all(isinstance(x, torch.Tensor) for x in out_leaves):
        return "skipped", "non-tensor output"
    if any(x.dtype not in DTYPES for x in out_leaves):
        return "skipped", f"output dtype {next(x.dtype for x in out_leaves if x.dtype not in DTYPES)}"
    tie_input = None
    if op.name in TIE_OPS and isinstance(sample.input, torch.Tensor):
        tie_input = sample.input.detach().clone()
    return Prepared(index, call, tensors, want, tie_input, sign_free=op.name in SIGN_FREE_OPS)


# ---- running ----------------------------------------------------------------------------


def _from_export(exc):
    """True when exc was raised inside torch.export / its decomposition (kiln's
    export_program), not by kiln's lowering or compiler."""
    if isinstance(exc, kiln.KilnError):
        return False
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name == "export_program" and "kiln" in frame.f_code.co_filename:
            return True
    return False


# kiln's documented refusals (clear errors at trace time, not bugs): counted as
# unsupported, under a pseudo-op name.
REFUSALS = (("mutates state", "(state mutation)"), ("returns a non-tensor value", "(non-tensor output)"),
            ("which kiln does not support", "(dtype)"))


def _refusal(exc):
    if isinstance(exc, kiln.KilnError) and not isinstance(exc, kiln.UnsupportedOpError):
        for text, name in REFUSALS:
            if text in str(exc):
                return name
    return None


def _short(exc):
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg[:600]}"


def compare(got, want, nondeterministic=False):
    """None when kiln's output matches eager's, else the reason."""
    got_l, want_l = pytree.tree_leaves(got), pytree.tree_leaves(want)
    if len(got_l) != len(want_l):
        return f"{len(got_l)} outputs, eager has {len(want_l)}"
    for i, (g, w) in enumerate(zip(got_l, want_l)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, eager {w.dtype}{list(w.shape)}"
        if nondeterministic:
            continue
        try:
            tol = FLOAT_TOL if w.is_floating_point() else dict(rtol=0, atol=0)
            torch.testing.assert_close(g, w, equal_nan=True, **tol)
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if "difference" in ln or "Mismatched" in ln]
            return f"output {i}: " + "; ".join(lines)[:200]
    return None


# Ops whose index outputs may legitimately differ from eager's on ties
# (equal values): eager's sort is not stable unless asked, kiln's always is.
TIE_OPS = ("sort", "argsort", "topk", "msort", "kthvalue")


# Ops returning (U, S, V) whose singular vectors are defined up to sign: the
# sign comes out of a QR of a product with cancellation in it, so a 1-ulp
# difference in a matmul can flip a pair (OpInfo pca_lowrank sample 5).
SIGN_FREE_OPS = ("pca_lowrank", "svd_lowrank")


def _align_singular_signs(got, want):
    """kiln's (U, S, V) with each pair of columns U[:, j], V[:, j] negated
    where that brings U[:, j] to eager's side; U S V^T is unchanged."""
    u, sv, v = got
    sign = torch.sign((u * want[0]).sum(dim=-2, keepdim=True))
    sign[sign == 0] = 1
    return (u * sign, sv, v * sign)


def _valid_index_choice(x, got, want):
    """True when int64 indices `got` pick the same values of x as eager's
    `want` along some dim d, with no index repeated along d: a valid answer
    when x has ties. Indices with one dim fewer than x (kthvalue) are
    unsqueezed at d."""
    if got.dtype != torch.int64 or want.dtype != torch.int64 or got.shape != want.shape:
        return False
    if x.ndim == 0:
        return bool((got == 0).all())
    for d in range(x.ndim):
        if got.ndim == x.ndim:
            g, w = got, want
        elif got.ndim == x.ndim - 1:
            g, w = got.unsqueeze(d), want.unsqueeze(d)
        else:
            return False
        if g.numel() and (g.min() < 0 or g.max() >= x.shape[d]):
            continue
        try:
            picked, wanted = torch.gather(x, d, g), torch.gather(x, d, w)
        except RuntimeError:  # shapes do not fit along this dim
            continue
        if not torch.equal(picked.isnan(), wanted.isnan()):
            continue
        if not torch.equal(picked.nan_to_num(0.0) if picked.is_floating_point() else picked,
                           wanted.nan_to_num(0.0) if wanted.is_floating_point() else wanted):
            continue
        if g.shape[d] > 1 and (g.sort(dim=d).values.diff(dim=d) == 0).any():
            continue  # an index used twice in one row
        return True
    return False


def _eager_is_random(p):
    """Whether eager disagrees with itself on this sample under another RNG
    seed (dropout inside multi_head_attention_forward, say): then, as for
    NONDETERMINISTIC_WORDS, only shapes and dtypes can be compared."""
    state = torch.get_rng_state()
    try:
        torch.manual_seed(0x6B696C6E)
        with torch.no_grad():
            again = p.call(*[t.clone() for t in p.tensors])
        return compare(again, p.want) is not None
    except Exception:
        return False
    finally:
        torch.set_rng_state(state)


# A float output that misses FLOAT_TOL still passes when it is about as
# accurate as eager's own float32 result, both measured against the sample
# run in float64: composite ops (attention, a GEMM over a long K) reorder
# long sums, and their float32 error grows with the sum, not with the output.
ACCURACY_FACTOR = 4.0


def _as_accurate_as_eager(p, got):
    """True when every float output of `got` is within ACCURACY_FACTOR times
    eager's float32 error (max norm, against float64) of the float64 result."""
    try:
        with torch.no_grad():
            ref = p.call(*[t.double() if t.dtype == torch.float32 else t.clone() for t in p.tensors])
    except Exception:
        return False
    got_l, want_l, ref_l = pytree.tree_leaves(got), pytree.tree_leaves(p.want), pytree.tree_leaves(ref)
    if not (len(got_l) == len(want_l) == len(ref_l)):
        return False
    for g, w, r in zip(got_l, want_l, ref_l):
        if not w.is_floating_point():
            if not torch.equal(g, w):
                return False
            continue
        if r.dtype != torch.float64 or r.shape != w.shape:
            return False
        if not torch.equal(g.isnan(), w.isnan()):
            return False
        finite = r.isfinite() & w.isfinite()
        if not torch.equal(g.isfinite(), w.isfinite()) or not torch.equal(g[~finite].nan_to_num(), w[~finite].nan_to_num()):
            return False
        if finite.any():
            eager_err = (w.double() - r)[finite].abs().max().item()
            kiln_err = (g.double() - r)[finite].abs().max().item()
            if kiln_err > ACCURACY_FACTOR * eager_err + FLOAT_TOL["atol"]:
                return False
    return True


def check_sample(p, got, nondet):
    """compare() for a Prepared sample; for TIE_OPS, index outputs that
    differ from eager's are accepted when they are a valid choice among ties
    (values outputs must still equal eager's)."""
    why = compare(got, p.want, nondet)
    if why is not None and not nondet and _eager_is_random(p):
        return compare(got, p.want, True)
    if why is not None and not nondet and "difference" in why and _as_accurate_as_eager(p, got):
        return None
    if why is not None and p.sign_free and not nondet:
        return compare(_align_singular_signs(got, p.want), p.want)
    if why is None or p.tie_input is None:
        return why
    got_l, want_l = pytree.tree_leaves(got), pytree.tree_leaves(p.want)
    if len(got_l) != len(want_l):
        return why
    for i, (g, w) in enumerate(zip(got_l, want_l)):
        single = compare(g, w, nondet)
        if single is None:
            continue
        if not _valid_index_choice(p.tie_input, g, w):
            return f"output {i}: " + single.split(": ", 1)[-1] + " (not a valid choice among ties)"
    return None


def _trace_and_compare(module, args, prepared, nondet, fallback):
    """[reason or None per Prepared] for module traced with kiln (raises on errors)."""
    compiled = kiln.trace(module, tuple(args), fallback=fallback)
    outs = compiled(*[t.clone() for t in args])
    return [check_sample(p, got, nondet) for got, p in zip(outs, prepared)]


def run_fallback(prepared, nondet, deadline=math.inf):
    """{sample index: (fallback-pass | fallback-fail, detail)}: the samples
    kiln reported unsupported, traced again with fallback on."""
    results = {}
    if len(prepared) > 1:  # all at once, as run_batch
        batch = Batch([p.call for p in prepared], [len(p.tensors) for p in prepared])
        args = [t for p in prepared for t in p.tensors]
        try:
            whys = _trace_and_compare(batch, args, prepared, nondet, True)
        except Exception:
            whys = None  # one by one below, to name the sample that breaks
        if whys is not None:
            for p, why in zip(prepared, whys):
                results[p.index] = ("fallback-fail", why) if why else ("fallback-pass", "")
            return results
    for p in prepared:
        if time.monotonic() > deadline:
            results[p.index] = ("fallback-fail", "time budget")
            continue
        try:
            why = _trace_and_compare(_Single(p.call), p.tensors, [p], nondet, True)[0]
        except Exception as e:
            if _from_export(e):  # captured only inside a batch: not a sample export can capture
                results[p.index] = ("fallback-not-exportable", _short(e))
                continue
            why = _short(e)
        results[p.index] = ("fallback-fail", why) if why else ("fallback-pass", "")
    return results


class _Single(torch.nn.Module):
    """A sample's module with its output wrapped in a 1-tuple (one per sample,
    as Batch gives)."""

    def __init__(self, call):
        super().__init__()
        self.call = call

    def forward(self, *tensors):
        return (self.call(*tensors),)


def run_one(p, nondet):
    """(status, detail) for one sample traced alone."""
    try:
        compiled = kiln.trace(p.call, tuple(p.tensors), fallback=False)
    except kiln.UnsupportedOpError as e:
        return "unsupported", e.op
    except Exception as e:
        if _refusal(e):
            return "unsupported", _refusal(e)
        return ("not-exportable" if _from_export(e) else "fail"), _short(e)
    try:
        got = compiled(*[t.clone() for t in p.tensors])
    except Exception as e:
        return "fail", "run: " + _short(e)
    why = check_sample(p, got, nondet)
    return ("fail", why) if why else ("pass", "")


def _missing_by_sample(batch, args):
    """{sample index in batch: [unsupported ATen ops]} from the decomposed graph."""
    from kiln.capture import export_program

    ep = export_program(batch, args)
    out = {}
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target not in TABLE:
            stack = n.meta.get("nn_module_stack") or {}
            for path, _ in stack.values():
                if path.startswith("samples."):
                    out.setdefault(int(path.split(".")[1]), set()).add(str(n.target))
                    break
    return out


def run_batch(prepared, nondet, deadline):
    """{sample index: (status, detail)} for a list of Prepared samples."""
    results = {}
    if not prepared:
        return results
    if len(prepared) == 1:
        p = prepared[0]
        results[p.index] = run_one(p, nondet)
        return results
    batch = Batch([p.call for p in prepared], [len(p.tensors) for p in prepared])
    args = tuple(t for p in prepared for t in p.tensors)
    try:
        compiled = kiln.trace(batch, args, fallback=False)
    except kiln.UnsupportedOpError:
        try:
            missing = _missing_by_sample(batch, args)
        except Exception:
            missing = None
        if missing is None:
            return _one_by_one(prepared, nondet, deadline)
        rest = []
        for i, p in enumerate(prepared):
            if i in missing:
                results[p.index] = ("unsupported", ", ".join(sorted(missing[i])))
            else:
                rest.append(p)
        if len(rest) == len(prepared):  # attribution failed: go one by one
            return _one_by_one(prepared, nondet, deadline)
        results.update(run_batch(rest, nondet, deadline))
        return results
    except Exception:
        return _one_by_one(prepared, nondet, deadline)
    try:
        outs = compiled(*[t.clone() for t in args])
    except Exception:
        return _one_by_one(prepared, nondet, deadline)
    for p, got in zip(prepared, outs):
        why = check_sample(p, got, nondet)
        results[p.index] = ("fail", why) if why else ("pass", "")
    return results


def _one_by_one(prepared, nondet, deadline):
    results = {}
    for p in prepared:
        if time.monotonic() > deadline:
            results[p.index] = ("skipped", "time budget")
            continue
        results[p.index] = run_one(p, nondet)
    return results


def classify(statuses):
    if "fail" in statuses:
        return "fail"
    if "unsupported" in statuses:
        return "unsupported"
    if "pass" in statuses:
        return "pass"
    if "not-exportable" in statuses:
        return "not-exportable"
    return "skipped"


def export_disagrees(p, nondet):
    """Why torch.export's own program for sample p (run by PyTorch, no kiln)
    disagrees with eager, or None. kiln compiles what torch.export captured:
    when that program already gives another answer (an op whose export
    drops a Python-side branch, say), a kiln result that differs from eager
    is not kiln's to fix, and the sample counts as not-exportable."""
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            ep = torch.export.export(_Single(p.call), tuple(p.tensors))
    except Exception:
        return None  # export failed alone: run_one/run_fallback already say so
    # A few runs under different seeds: a program that draws random numbers
    # eager does not (multi_head_attention_forward with training=True
    # exports a dropout eager skips) agrees with eager by chance on some
    # draws, and kiln with fallback runs that same random op.
    state = torch.get_rng_state()
    try:
        for seed in (0, 1, 2):
            torch.manual_seed(seed)
            try:
                with warnings.catch_warnings(), torch.no_grad():
                    warnings.simplefilter("ignore")
                    got = ep.module()(*[t.clone() for t in p.tensors])[0]
            except Exception as e:
                # The captured program itself fails where eager runs
                # (masked_select with a broadcast mask: export asserts the
                # output is no longer than the input, eager's is as long as
                # the broadcast).
                return "it raises " + _short(e)
            why = check_sample(p, got, nondet)
            if why:
                return why
    finally:
        torch.set_rng_state(state)
    return None


def _reclassify_export_disagreements(prepared, samples, fb, nondet):
    """Turn fail / fallback-fail into not-exportable where torch.export's
    program disagrees with eager (the detail says so)."""
    by_index = {p.index: p for p in prepared}
    for results, fail, other in ((samples, "fail", "not-exportable"),
                                 (fb, "fallback-fail", "fallback-not-exportable")):
        for i, (status, detail) in list(results.items()):
            if status == fail and i in by_index:
                why = export_disagrees(by_index[i], nondet)
                if why:
                    results[i] = (other, "torch.export's program disagrees with eager: " + why)


def prepared_samples(op, dtype, max_samples=None):
    """({sample index: status} for the samples that cannot run, [Prepared])
    of op's first max_samples OpInfo samples at dtype (all when None)."""
    samples, prepared = {}, []
    try:
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i, s in enumerate(op.sample_inputs("cpu", dtype, requires_grad=False)):
                if max_samples is not None and i >= max_samples:
                    break
                r = prepare(op, s, i)
                if isinstance(r, Prepared):
                    prepared.append(r)
                else:
                    samples[i] = r
    except Exception as e:
        samples[-1] = ("skipped", "sample_inputs raised " + _short(e))
    return samples, prepared


def run_op(op, dtype, max_samples=None, op_seconds=None, fallback=True):
    """The result row of one op at one dtype (fallback: also re-run the
    unsupported samples with kiln's fallback on)."""
    t0 = time.monotonic()
    deadline = t0 + op_seconds if op_seconds else math.inf
    nondet = is_nondeterministic(op)
    samples, prepared = prepared_samples(op, dtype, max_samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples.update(run_batch(prepared, nondet, deadline))
        unsupported = [p for p in prepared if samples[p.index][0] == "unsupported"]
        fb = run_fallback(unsupported, nondet, deadline + 60) if fallback else {}
        _reclassify_export_disagreements(prepared, samples, fb, nondet)
    fb_counts = {k: sum(1 for s, _ in fb.values() if s == "fallback-" + k)
                 for k in ("pass", "fail", "not-exportable")}
    fb_details = [{"sample": i, "status": s, "detail": d} for i, (s, d) in sorted(fb.items())
                  if s == "fallback-fail"]
    statuses = [s for s, _ in samples.values()]
    counts = {k: statuses.count(k) for k in ("pass", "fail", "unsupported", "not-exportable", "skipped")}
    unsupported_ops = sorted({o.strip() for s, d in samples.values() if s == "unsupported" for o in d.split(",")})
    details = [{"sample": i, "status": s, "detail": d} for i, (s, d) in sorted(samples.items())
               if s in ("fail", "not-exportable")]
    return {"op": op_id(op), "dtype": str(dtype).replace("torch.", ""), "status": classify(statuses),
            "samples": counts, "unsupported_aten": unsupported_ops, "details": details[:5],
            "fallback": fb_counts, "fallback_details": fb_details[:5],
            "seconds": round(time.monotonic() - t0, 2), "nondeterministic": nondet}


def dtypes_for(op, wanted):
    try:
        ok = op.supported_dtypes("cpu")
    except Exception:
        ok = set()
    return [d for d in wanted if d in ok]


# ---- dynamic shapes: torch.compile(dynamic=True) -----------------------------------------

DYNAMIC_STATUSES = ("pass", "fail", "eager", "not-capturable", "skipped")


class _EagerReasons:
    """Records why kiln's partitioner sent nodes to eager (partition's
    kiln_why, what KILN_LOG=1 prints) while torch.compile runs."""

    def __init__(self):
        self.why = []

    def __enter__(self):
        import kiln.dynamo as kd

        self._kd, self._orig = kd, kd.partition

        def spy(*a, **kw):
            fused, n = self._orig(*a, **kw)
            self.why.extend(getattr(fused, "kiln_why", []))
            self.why.extend(w for w in getattr(fused, "kiln_eager", []) if w.startswith("a piece:"))
            return fused, n

        kd.partition = spy
        return self

    def __exit__(self, *exc):
        self._kd.partition = self._orig


def _through_kiln(exc):
    """True when exc is the backend's failure, or its traceback (or a cause's)
    runs through kiln's Python package."""
    from torch._dynamo.exc import BackendCompilerFailed

    kiln_dir = os.path.dirname(os.path.abspath(kiln.__file__))
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (BackendCompilerFailed, kiln.KilnError)):
            return True
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            if os.path.abspath(frame.f_code.co_filename).startswith(kiln_dir + os.sep):
                return True
        exc = exc.__cause__ or exc.__context__
    return False


def _short_backend(exc):
    """_short for an error through kiln's backend: the error kiln raised
    (BackendCompilerFailed's inner one) and the innermost kiln frame."""
    inner = getattr(exc, "inner_exception", None) or exc
    where = ""
    kiln_dir = os.path.dirname(os.path.abspath(kiln.__file__))
    for frame, line in traceback.walk_tb(inner.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(kiln_dir + os.sep):
            where = f" (at {os.path.relpath(path, os.path.dirname(kiln_dir))}:{line} {frame.f_code.co_name})"
    return _short(inner) + where


def _grown(tensors):
    """The inputs with every dim grown by 1 (new values random, for an
    integer tensor a copy of its first row along that dim, so that indices
    stay in range), or None when there is nothing to grow."""
    g = torch.Generator().manual_seed(1)
    out, any_grown = [], False
    for t in tensors:
        t = t.clone()
        for d in range(t.ndim):
            if t.shape[d] == 0:
                continue
            if t.is_floating_point():
                extra = torch.randn(*t.shape[:d], 1, *t.shape[d + 1:], generator=g).to(t.dtype)
            else:
                extra = t.narrow(d, 0, 1).clone()
            t = torch.cat([t, extra], d)
            any_grown = True
        out.append(t)
    return out if any_grown else None


def _dynamo_disagrees(p, tensors, want, nondet):
    """Why torch.compile(backend="eager", dynamic=True), no kiln, fails on or
    disagrees with eager for these inputs, or None."""
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            got = torch.compile(p.call, backend="eager", dynamic=True)(*[t.clone() for t in tensors])
    except Exception as e:
        return "Dynamo alone raises " + _short(e)
    finally:
        torch._dynamo.reset()
    why = check_sample(p, got, nondet)
    return ("Dynamo alone disagrees with eager: " + why) if why else None


def run_dynamic_one(p, nondet, grow=True):
    """(status, detail) for one sample through torch.compile(dynamic=True)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    calls = [(p.tensors, p.want, p)]
    big = _grown(p.tensors) if grow else None
    if big is not None:
        try:
            with torch.no_grad():
                big_want = p.call(*[t.clone() for t in big])
            if all(isinstance(x, torch.Tensor) for x in pytree.tree_leaves(big_want)):
                tie = big[0].clone() if p.tie_input is not None and big else None
                calls.append((big, big_want, Prepared(p.index, p.call, big, big_want, tie, p.sign_free)))
        except Exception:  # eager refuses the grown inputs (a baked size): one size only
            pass
    reasons = _EagerReasons()
    try:
        fn = torch.compile(p.call, backend="kiln", dynamic=True, fullgraph=False)
        for k, (tensors, want, q) in enumerate(calls):
            size = "" if k == 0 else "grown inputs: "
            try:
                with reasons, torch.no_grad():
                    got = fn(*[t.clone() for t in tensors])
            except Exception as e:
                if _through_kiln(e):
                    return "fail", size + _short_backend(e)
                why = _dynamo_disagrees(q, tensors, want, nondet)
                return ("not-capturable", size + why) if why else ("fail", size + "run: " + _short(e))
            why = check_sample(q, got, nondet)
            if why:
                other = _dynamo_disagrees(q, tensors, want, nondet)
                if other:
                    return "not-capturable", size + other
                return "fail", size + why
        graphs = counters["kiln"]["graphs"]
        if not graphs:
            return "not-capturable", "no graph reached kiln"
        eager = counters["kiln"]["eager"] or counters["kiln"]["partitioned"] or counters["kiln_fallback"]
        if eager:
            why = reasons.why or sorted(counters["kiln_fallback"])
            return "eager", "; ".join(dict.fromkeys(why))[:600]
        return "pass", "" if len(calls) > 1 else "one size only"
    finally:
        torch._dynamo.reset()


def run_op_dynamic(op, dtype, max_samples=None, op_seconds=None, grow=True):
    """The result row of one op at one dtype under torch.compile(dynamic=True)."""
    t0 = time.monotonic()
    deadline = t0 + op_seconds if op_seconds else math.inf
    nondet = is_nondeterministic(op)
    samples, prepared = prepared_samples(op, dtype, max_samples)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for p in prepared:
            if time.monotonic() > deadline:
                samples[p.index] = ("skipped", "time budget")
                continue
            samples[p.index] = run_dynamic_one(p, nondet, grow)
    statuses = [s for s, _ in samples.values()]
    counts = {k: statuses.count(k) for k in DYNAMIC_STATUSES}
    status = next((k for k in ("fail", "eager", "pass", "not-capturable") if k in statuses), "skipped")
    details = [{"sample": i, "status": s, "detail": d} for i, (s, d) in sorted(samples.items())
               if s in ("fail", "eager", "not-capturable")]
    eager_ops = sorted({d.split(" ", 1)[0] for s, d in samples.values() if s == "eager" and d})
    return {"op": op_id(op), "dtype": str(dtype).replace("torch.", ""), "mode": "dynamic", "status": status,
            "samples": counts, "unsupported_aten": eager_ops, "details": details[:5],
            "fallback": {}, "fallback_details": [],
            "seconds": round(time.monotonic() - t0, 2), "nondeterministic": nondet}


# ---- Core ATen ---------------------------------------------------------------------------


def core_aten_ops():
    """Every aten OpOverload tagged torch.Tag.core."""
    ops = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        name = schema.name[len("aten::"):]
        try:
            packet = getattr(torch.ops.aten, name)
            overload = getattr(packet, schema.overload_name or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in overload.tags:
            ops.add(overload)
    return ops


def core_aten_coverage():
    core = core_aten_ops()
    handled = sorted(str(o) for o in core if o in TABLE)
    missing = sorted(str(o) for o in core if o not in TABLE)
    return {"handled": len(handled), "total": len(core), "handled_ops": handled, "missing_ops": missing}


# ---- the script --------------------------------------------------------------------------


def select_ops(op_db, names):
    if not names:
        return list(op_db)
    want = {n.strip() for n in names.split(",") if n.strip()}
    picked = [op for op in op_db if op.name in want or op_id(op) in want]
    unknown = want - {op.name for op in picked} - {op_id(op) for op in picked}
    if unknown:
        print(f"warning: no OpInfo named {', '.join(sorted(unknown))}", file=sys.stderr)
    return picked


def _statuses(rows):
    if any(r.get("mode") == "dynamic" for r in rows):
        return list(DYNAMIC_STATUSES)
    return ["pass", "fail", "unsupported", "not-exportable", "skipped"]


def summarise(rows):
    totals = {k: 0 for k in _statuses(rows)}
    for r in rows:
        totals[r["status"]] = totals.get(r["status"], 0) + 1
    return totals


def summarise_fallback(rows):
    """Samples re-run with fallback on, over all rows, and the rows with a
    fallback-fail."""
    fb = {"fallback-pass": 0, "fallback-fail": 0, "fallback-not-exportable": 0}
    for r in rows:
        c = r.get("fallback") or {}
        for k in ("pass", "fail", "not-exportable"):
            fb["fallback-" + k] += c.get(k, 0)
    fb["rows with fallback-fail"] = sum(1 for r in rows if (r.get("fallback") or {}).get("fail"))
    return fb


def print_row(r, file=sys.stdout):
    c = r["samples"]
    fb = r.get("fallback") or {"pass": 0, "fail": 0}
    extra = ""
    if r.get("mode") == "dynamic":
        extra = r["details"][0]["detail"][:150] if r["details"] else ""
        print(f"{r['op']:<40} {r['dtype']:<8} {r['status']:<15} "
              f"{c['pass']:>3}/{c['fail']:>2}/{c['eager']:>2}/{c['not-capturable']:>2}/{c['skipped']:>2} "
              f"{r['seconds']:>6.1f}s  {extra}", file=file, flush=True)
        return
    if r["status"] == "unsupported":
        extra = ", ".join(r["unsupported_aten"])[:90]
    elif r["details"]:
        extra = r["details"][0]["detail"][:90]
    if r.get("fallback_details"):
        extra += "  fallback-fail: " + r["fallback_details"][0]["detail"][:90]
    print(f"{r['op']:<40} {r['dtype']:<8} {r['status']:<15} "
          f"{c['pass']:>3}/{c['fail']:>2}/{c['unsupported']:>2}/{c['not-exportable']:>2}/{c['skipped']:>2} "
          f"{fb['pass']:>3}/{fb['fail']:>2} "
          f"{r['seconds']:>6.1f}s  {extra}", file=file, flush=True)


def _op_totals(rows):
    """Per op (over its dtypes), its worst status, counted."""
    order = ["fail", "unsupported", "eager", "pass", "not-exportable", "not-capturable", "skipped"]
    per_op = {}
    for r in rows:
        cur = per_op.get(r["op"])
        per_op[r["op"]] = r["status"] if cur is None else min(cur, r["status"], key=order.index)
    return {k: sum(1 for s in per_op.values() if s == k) for k in order if k in _statuses(rows)}


def _unsupported_frequency(rows):
    freq = {}
    for r in rows:
        for o in r["unsupported_aten"]:
            freq[o] = freq.get(o, 0) + 1
    return freq


def _write_result(path, rows, not_run, args, seconds, complete):
    """coverage.json; written after every row (complete False) so that a long
    run that stops part way keeps what it measured and --resume goes on."""
    dynamic = getattr(args, "dynamic", False)
    result = {"torch": torch.__version__, "kiln": kiln.__version__, "isa": kiln.isa(), "complete": complete,
              "totals": summarise(rows), "op_totals": _op_totals(rows), "fallback_totals": summarise_fallback(rows),
              "rows": rows, "not_run": not_run, "core_aten": core_aten_coverage() if complete and not dynamic else None,
              "unsupported_aten_frequency": _unsupported_frequency(rows),
              "args": {k: v for k, v in vars(args).items() if k != "resume"}, "seconds": round(seconds, 1)}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, path)
    return result


def _resumed_rows(args):
    """The rows of a previous run of the same kind in args.out (--resume)."""
    if not args.resume or not os.path.exists(args.out):
        return [], 0.0
    with open(args.out) as f:
        old = json.load(f)
    same = {k: old.get("args", {}).get(k) for k in ("quick", "dtypes", "op_seconds", "no_fallback", "dynamic")}
    if same != {k: getattr(args, k) for k in same}:
        raise SystemExit(f"--resume: {args.out} was made with other options ({same}); start afresh")
    return old.get("rows", []), float(old.get("seconds", 0.0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names to restrict to")
    ap.add_argument("--quick", action="store_true", help="first 2 samples per op, a time budget per op")
    ap.add_argument("--max-samples", type=int, default=None, help="first N samples per op (--quick: 2)")
    ap.add_argument("--limit-seconds", type=float, default=None, help="stop starting new ops after this long")
    ap.add_argument("--op-seconds", type=float, default=None,
                    help="time budget per op and dtype (default: none, 20 with --quick)")
    ap.add_argument("--dtypes", default="float32,int64,bool")
    ap.add_argument("--out", default="coverage.json")
    ap.add_argument("--no-fallback", action="store_true",
                    help="do not re-run unsupported samples with fallback on")
    ap.add_argument("--dynamic", action="store_true",
                    help="run each sample through torch.compile(backend='kiln', dynamic=True) instead")
    ap.add_argument("--no-grow", action="store_true",
                    help="--dynamic: do not call again with every dim grown by 1")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows already in --out (a run that stopped part way) and run the rest")
    ap.add_argument("--shard", default=None, metavar="K/N",
                    help="run only every N-th op starting at K (one process per core; join with --merge)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                    help="join the rows of shard runs into --out (complete when every op/dtype is there)")
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    op_db = load_op_db()
    ops = select_ops(op_db, args.ops)
    if args.merge:
        return merge_shards(args, ops, [getattr(torch, d.strip()) for d in args.dtypes.split(",") if d.strip()])
    if args.shard:
        k, n = (int(v) for v in args.shard.split("/"))
        ops = ops[k::n]
    wanted = [getattr(torch, d.strip()) for d in args.dtypes.split(",") if d.strip()]
    max_samples = args.max_samples if args.max_samples is not None else (2 if args.quick else None)
    op_seconds = args.op_seconds if args.op_seconds is not None else (20.0 if args.quick else None)

    rows, earlier_seconds = _resumed_rows(args)
    done = {(r["op"], r["dtype"]) for r in rows}
    if rows:
        print(f"resuming: {len(rows)} rows from {args.out}")
    not_run = []
    if args.dynamic:
        print(f"{'op':<40} {'dtype':<8} {'status':<15} pass/fail/eager/nocapt/skip")
    else:
        print(f"{'op':<40} {'dtype':<8} {'status':<15} pass/fail/unsup/noexp/skip fallback pass/fail")
    todo = [(op, dtype) for op in ops for dtype in dtypes_for(op, wanted)
            if (op_id(op), str(dtype).replace("torch.", "")) not in done]
    bar = Progress(len(todo), "coverage", ticker=True, interval=0.5)
    try:
        _run_rows(todo, rows, not_run, args, t0, earlier_seconds, max_samples, op_seconds, bar)
    finally:
        bar.close()

    result = _write_result(args.out, rows, not_run, args, earlier_seconds + time.monotonic() - t0, True)
    print_summary(result, not_run)
    print(f"wrote {os.path.abspath(args.out)}")
    return result


def _run_rows(todo, rows, not_run, args, t0, earlier_seconds, max_samples, op_seconds, bar):
    """Runs each (op, dtype) of todo into rows, printing each row above the
    progress bar and rewriting --out after each."""
    for op, dtype in todo:
        bar.stage(f"{op_id(op)} {str(dtype).replace('torch.', '')}")
        if args.limit_seconds is not None and time.monotonic() - t0 > args.limit_seconds:
            not_run.append(f"{op_id(op)}:{dtype}")
            bar.update()
            continue
        try:
            if getattr(args, "dynamic", False):
                row = run_op_dynamic(op, dtype, max_samples, op_seconds, grow=not args.no_grow)
            else:
                row = run_op(op, dtype, max_samples, op_seconds, fallback=not args.no_fallback)
        except Exception as e:  # a harness bug must not lose the whole run
            row = {"op": op_id(op), "dtype": str(dtype).replace("torch.", ""), "status": "fail",
                   "samples": {"pass": 0, "fail": 1, "unsupported": 0, "not-exportable": 0, "skipped": 0},
                   "unsupported_aten": [], "details": [{"sample": -1, "status": "fail",
                                                        "detail": "harness: " + _short(e)}],
                   "fallback": {"pass": 0, "fail": 0, "not-exportable": 0}, "fallback_details": [],
                   "seconds": 0.0, "nondeterministic": False}
        rows.append(row)
        with io.StringIO() as line:
            print_row(row, file=line)
            bar.write(line.getvalue().rstrip("\n"))
        bar.update()
        _write_result(args.out, rows, not_run, args, earlier_seconds + time.monotonic() - t0, False)


def merge_shards(args, ops, wanted):
    """Join shard runs' rows into args.out; "complete" only when every
    op/dtype of the selection has its row."""
    rows, seen = [], set()
    for path in args.merge:
        with open(path) as f:
            part = json.load(f)
        for r in part["rows"]:
            if (r["op"], r["dtype"]) not in seen:
                seen.add((r["op"], r["dtype"]))
                rows.append(r)
    missing = [f"{op_id(op)}:{d}" for op in ops for d in dtypes_for(op, wanted)
               if (op_id(op), str(d).replace("torch.", "")) not in seen]
    args.shard = None
    seconds = sum(r["seconds"] for r in rows)  # the shards ran side by side: their op time, summed
    result = _write_result(args.out, rows, missing, args, seconds, not missing)
    print(f"merged {len(args.merge)} file(s): {len(rows)} rows, {len(missing)} op/dtype pairs missing")
    print_summary(result, missing)
    print(f"wrote {os.path.abspath(args.out)}")
    return result


def print_summary(result, not_run):
    print()
    print("rows (op x dtype): " + ", ".join(f"{k} {v}" for k, v in result["totals"].items()))
    print("ops (worst over dtypes): " + ", ".join(f"{k} {v}" for k, v in result["op_totals"].items()))
    if not (result.get("args") or {}).get("dynamic"):
        print("unsupported samples re-run with fallback on: " +
              ", ".join(f"{k} {v}" for k, v in result["fallback_totals"].items()))
    if not_run:
        print(f"not run (time limit, or missing from the merged shards): {len(not_run)} op/dtype pairs")
    top = sorted(result["unsupported_aten_frequency"].items(), key=lambda kv: -kv[1])[:15]
    if top:
        print(("most frequent ops in eager: " if (result.get("args") or {}).get("dynamic")
               else "most frequent unsupported ATen ops: ") + ", ".join(f"{o} ({n})" for o, n in top))
    core = result["core_aten"]
    if core:
        print(f"core ATen ops handled: {core['handled']}/{core['total']}")
    print(f"{result['seconds']:.0f} s")


if __name__ == "__main__":
    main()
