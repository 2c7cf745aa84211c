"""One program, one path: resolve it, draw its references, run kiln, judge.

An Outcome's status is one of
  pass         kiln agreed with eager (check.py's rule)
  fail         kiln disagreed, or raised something other than a clean
               "unsupported" error (signature tells failures apart, so the
               shrinker keeps the same one)
  unsupported  kiln refused an op cleanly (UnsupportedOpError, or in the
               trace path a fallback to eager for some ops): not a failure
  ill          three data draws were all ill-conditioned (check.py)
  known        the graph may trigger a known bug (known.py) and was skipped
  skipped      torch itself cannot run the program this way (training an op
               without a derivative; torch.export or AOTAutograd failing on it
               without kiln), or torch disagrees with itself where kiln
               failed the rule (torch.compile(backend="aot_eager") fails it
               at the same output: paths.run_compile)
  invalid      the program does not resolve (only while shrinking)
and, from runner.py's worker supervision, crash and hang.
"""

import re
import warnings
from dataclasses import dataclass

from kilnfuzz import bf16, quant
from kilnfuzz.known import known_bug
from kilnfuzz.ops import KINDS
from kilnfuzz.paths import (NotApplicable, compare_all, path_env, reference, run_compile, run_dynamic, run_fast,
                            run_trace)
from kilnfuzz.program import Invalid, resolve

REDRAWS = 3
_FALLBACK = re.compile(r"runs these ops in eager PyTorch \(CPU fallback\): (.*)")
_EAGER_GRAPH = re.compile(r"kiln: (running this graph|a graph piece runs) in eager PyTorch: (.*)")


@dataclass
class Outcome:
    status: str
    detail: str = ""
    path: str = "fast"
    unsupported: tuple = ()
    signature: str = ""
    program: object = None  # the program as run (its salt may have been redrawn)


def _signature(e):
    """A failure's class: the exception type and its message without numbers
    (shapes change as the shrinker works; the kind of failure must not)."""
    text = re.sub(r"\d+", "#", str(e).splitlines()[0] if str(e) else "")[:80]
    return f"error:{type(e).__name__}:{text}"


def evaluate(program, path="fast", skip_known=(), redraws=REDRAWS, kinds=KINDS, stage=None):
    """stage(name), if given, is told when eager work ("eager") and kiln's
    ("kiln") begin."""
    stage = stage or (lambda name: None)
    stage("eager")
    for _ in range(redraws):
        try:
            res = resolve(program, kinds)
        except Invalid as e:
            return Outcome("invalid", str(e), path, program=program)
        known = known_bug(res, skip_known if quant.is_quant(path) else
                          tuple(k for k in skip_known if not k.startswith("quant-")))
        if known:
            return Outcome("known", known, path, program=program)
        try:
            if path in bf16.PATHS:
                ref = bf16.reference_bf16(res, path)
            elif quant.is_quant(path):
                ref = quant.reference_quant(res, path)
            else:
                ref = reference(res)
        except NotApplicable as e:
            return Outcome("skipped", str(e), path, program=program)
        if not ref.ill:
            break
        program = program.copy(salt=program.salt + 1)
    else:
        return Outcome("ill", ref.ill, path, program=program)
    stage("kiln")
    return _run(res, path, ref, program)


def _run(res, path, ref, program):
    from kiln.errors import UnsupportedOpError

    accs = [res.accs[r] for r in res.outputs]
    mags = [res.mags[r] for r in res.outputs]
    with warnings.catch_warnings(record=True) as caught, path_env(path):
        warnings.simplefilter("always")
        try:
            if path in ("fast", "fast-nhwc"):
                why = compare_all(run_fast(res), ref, accs, mags=mags)
            elif path == "reference":
                why = compare_all(run_fast(res, "reference"), ref, accs, mags=mags, who="kiln (reference target)")
            elif path == "trace":
                why = compare_all(run_trace(res), ref, accs, mags=mags)
            elif path == "bf16-compile":
                why = bf16.run_bf16_compile(res, ref, accs, mags)
            elif path in bf16.PATHS:
                why = compare_all(bf16.run_bf16(res, path), ref, accs, mags=mags, lowp=True)
            elif quant.is_quant(path):
                why = compare_all(quant.run_quant(res, path), ref, accs, mags=mags)
            elif path == "dynamic":
                why = run_dynamic(res, accs, mags)
            else:
                why = run_compile(res, accs)
        except NotApplicable as e:
            return Outcome("skipped", str(e), path, program=program)
        except UnsupportedOpError as e:
            return Outcome("unsupported", str(e), path, (e.op,), program=program)
        except Exception as e:  # noqa: BLE001 -- anything else kiln raises is a failure
            return Outcome("fail", f"{type(e).__name__}: {e}", path, signature=_signature(e), program=program)
    fallback, eager_graphs = [], []
    for w in caught:
        text = str(w.message)
        m = _FALLBACK.search(text)
        if m:
            fallback += [op.strip() for op in m.group(1).split(",")]
        m = _EAGER_GRAPH.search(text)
        if m and "does not support" not in m.group(2):
            eager_graphs.append(m.group(2))
    if why and quant.is_quant(path) and any(quant.runs_a_layer(op) for op in fallback):
        # kiln's CPU fallback runs a linear layer or lookup in eager PyTorch,
        # on the float32 weight: unquantized, as kiln.trace warns
        return Outcome("unsupported", "fallback runs a quantized layer in eager, unquantized: " +
                       ", ".join(sorted(set(fallback))), path, tuple(fallback), program=program)
    if why:
        return Outcome("fail", why, path, tuple(fallback), signature="mismatch", program=program)
    if eager_graphs:  # kiln gave up on a graph with an error that is not "unsupported"
        return Outcome("fail", f"kiln ran a graph in eager: {eager_graphs[0]}", path, tuple(fallback),
                       signature="eager:" + re.sub(r"\d+", "#", eager_graphs[0])[:80], program=program)
    if fallback:
        return Outcome("unsupported", "fallback: " + ", ".join(sorted(set(fallback))), path, tuple(fallback),
                       program=program)
    return Outcome("pass", "", path, program=program)
