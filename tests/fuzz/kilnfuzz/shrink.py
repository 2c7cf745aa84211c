"""Shrinking a failing program to a minimal one that fails the same way.

Greedy, in the manner of delta debugging: try the edits below in order, keep
the first that still fails with the same signature (evaluate.Outcome), and
start again from the smaller program; stop when no edit helps or the budget
is spent. The edits, cheapest and most effective first:
  1. drop an output;
  2. drop a step, its uses taking one of its own arguments instead
     (a view, an activation or a whole layer disappears);
  3. replace an argument of a step by an earlier value of the same dtype;
  4. shrink a free size towards 1 and 2 (then its half, and one less).
After each edit, steps no output depends on are removed. Every edit yields
a program that resolves or is rejected as invalid (program.py), so the
shrinker needs no knowledge of the op kinds.
"""

import time

from kilnfuzz.ops import KINDS
from kilnfuzz.program import Invalid, Program, Step, resolve


def prune(program):
    """The program without steps no output depends on (refs renumbered)."""
    need = set()
    stack = [r[0] for r in program.outputs]
    while stack:
        i = stack.pop()
        if i in need:
            continue
        need.add(i)
        stack += [a[0] for a in program.steps[i].args]
    keep = sorted(need)
    new_index = {old: new for new, old in enumerate(keep)}

    def ref(r):
        return (new_index[r[0]], r[1])

    steps = [Step(s.kind, tuple(ref(a) for a in s.args), s.sizes, s.seed) for s in (program.steps[i] for i in keep)]
    return Program(steps, [ref(r) for r in program.outputs], program.salt)


def _replace_uses(program, i, sub):
    """Every use of step i's values (as arguments or outputs) becomes `sub`."""
    def fix(r):
        return sub if r[0] == i else r

    steps = [s if j <= i else Step(s.kind, tuple(fix(a) for a in s.args), s.sizes, s.seed)
             for j, s in enumerate(program.steps)]
    outs = []
    for r in program.outputs:
        r = fix(r)
        if r not in outs:
            outs.append(r)
    return Program(steps, outs, program.salt)


def candidates(program):
    """Smaller programs to try, in order."""
    try:
        res = resolve(program, KINDS)
    except Invalid:
        return
    dtype = {r: res.val(r).dtype for r in res.nodes}
    if len(program.outputs) > 1:
        for j in range(len(program.outputs)):
            yield program.copy(outputs=program.outputs[:j] + program.outputs[j + 1:])
    for i in range(len(program.steps) - 1, -1, -1):
        step = program.steps[i]
        outs_i = [r for r in dtype if r[0] == i]
        for a in step.args:
            if all(dtype[a] == dtype[r] for r in outs_i):
                yield _replace_uses(program, i, a)
    refs = sorted(dtype)
    for i, step in enumerate(program.steps):
        for j, a in enumerate(step.args):
            for r in refs:
                if r[0] >= i or r == a or dtype[r] != dtype[a]:
                    continue
                args = step.args[:j] + (r,) + step.args[j + 1:]
                steps = list(program.steps)
                steps[i] = Step(step.kind, args, step.sizes, step.seed)
                yield program.copy(steps=steps)
    for i, step in enumerate(program.steps):
        for k, s in enumerate(step.sizes):
            for v in sorted({1, 2, s // 2, s - 1}):
                if 1 <= v < s:
                    steps = list(program.steps)
                    steps[i] = Step(step.kind, step.args, step.sizes[:k] + (v,) + step.sizes[k + 1:], step.seed)
                    yield program.copy(steps=steps)


def size_of(program):
    """What shrinking minimises: steps first, then the sum of free sizes."""
    return (len(program.steps), len(program.outputs), sum(sum(s.sizes) for s in program.steps))


def shrink(program, fails_the_same, budget=400, seconds=120.0, log=None):
    """The smallest program found for which fails_the_same(program) holds.
    Returns (program, number of evaluations)."""
    current = prune(program)
    if not fails_the_same(current):
        current = program
    evals, deadline = 0, time.monotonic() + seconds
    improved = True
    while improved and evals < budget and time.monotonic() < deadline:
        improved = False
        for cand in candidates(current):
            cand = prune(cand)
            if size_of(cand) >= size_of(current):
                continue
            evals += 1
            if fails_the_same(cand):
                current, improved = cand, True
                if log:
                    log(f"  shrunk to {len(current.steps)} steps, sizes {sum(sum(s.sizes) for s in current.steps)}")
                break
            if evals >= budget or time.monotonic() >= deadline:
                break
    return current, evals
