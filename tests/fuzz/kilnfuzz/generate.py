"""The random program generator.

A program starts from one to three inputs and grows by steps: each step
draws an op kind by weight, the kind picks its arguments among the values so
far (mostly the newest, so chains of views and layers form, sometimes older
ones, so the graph branches and joins), and the step is kept when it resolves
(program.Resolver). The unconsumed values, and sometimes one intermediate,
are the outputs. Everything is drawn from the one `rng`, so a program is a
function of (seed, index).
"""

import random

from kilnfuzz.kinds import SIZES
from kilnfuzz.program import Invalid, Program, Resolver, Step

MAX_INPUT_NUMEL = 4096
MAX_OUTPUTS = 4


class Gen:
    """What a kind's propose() sees: the values so far, and random draws."""

    def __init__(self, rng, kinds):
        self.rng, self.kinds = rng, kinds
        self.res = Resolver(kinds)
        self.steps, self.order, self.consumed = [], [], set()
        self.n_ops = 0

    def meta(self, ref):
        return self.res.meta(ref)

    def size(self):
        return self.rng.choice(SIZES)

    def pick(self, pred, exclude=None):
        """A value satisfying pred: the newest with probability 0.55, one of
        the newest three with 0.2, else any."""
        cand = [r for r in self.order if r != exclude and pred(self.meta(r))]
        if not cand:
            return None
        u = self.rng.random()
        if u < 0.55:
            return cand[-1]
        if u < 0.75:
            return self.rng.choice(cand[-3:])
        return self.rng.choice(cand)

    def try_kind(self, kind):
        prop = kind.propose(self)
        if prop is None:
            return False
        args, sizes = prop
        if kind.source and sizes:
            # Inputs stay small: shrink the drawn sizes until the tensor does.
            sizes = list(sizes)
            while _prod(sizes) > MAX_INPUT_NUMEL:
                i = max(range(len(sizes)), key=lambda j: sizes[j])
                sizes[i] = max(1, sizes[i] // 2)
        step = Step(kind.name, tuple(args), tuple(sizes), self.rng.getrandbits(31))
        try:
            refs = self.res.add(step)
        except Invalid:
            return False
        self.steps.append(step)
        self.order += refs
        self.consumed.update(args)
        if not kind.source:
            self.n_ops += 1
        return True

    def outputs(self):
        computed = [r for r in self.order if not self.res.is_leaf(r)]
        sinks = [r for r in computed if r not in self.consumed]
        outs = sinks[-MAX_OUTPUTS:]
        extra = [r for r in computed if r not in outs]
        if extra and self.rng.random() < 0.25:
            outs.insert(0, self.rng.choice(extra))
        return outs


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def generate(rng, kinds, max_ops=15):
    """One random program, or None when the draw made nothing to output."""
    gen = Gen(rng, kinds)
    sources = [k for k in kinds.values() if k.source and k.name in ("input", "const")]
    for _ in range(rng.choice((1, 1, 2, 2, 3))):
        gen.try_kind(rng.choices(sources, [k.weight for k in sources])[0])
    target = rng.randint(1, 6) if rng.random() < 0.5 else rng.randint(2, max_ops)
    allk = list(kinds.values())
    weights = [k.weight for k in allk]
    tries = 0
    while gen.n_ops < target and tries < 10 * target:
        tries += 1
        gen.try_kind(rng.choices(allk, weights)[0])
    outs = gen.outputs()
    if not outs:
        return None
    return Program(gen.steps, outs)


def program_for(seed, index, kinds):
    """The program of graph `index` in run `seed` (the same on every machine)."""
    rng = random.Random(f"kiln-fuzz:{seed}:{index}")
    for _ in range(100):
        p = generate(rng, kinds)
        if p is not None:
            return p
    raise RuntimeError(f"no program for seed {seed} index {index}")
