"""Programs: what the fuzzer generates, shrinks and runs.

A Program is a list of Steps. A Step names an op kind (ops.KINDS), the values
it takes (refs (step index, output index) to earlier steps), the free sizes it
chose (the shrinker may reduce them) and a seed. Everything else -- the exact
ATen arguments, the parameters and inputs the step creates, their data -- is
derived from those by the kind's plan(), given the shapes it is applied to.
So a Program is small and picklable, and any edit of one (a step dropped, an
argument swapped, a size shrunk) is another program that either resolves to
a well-typed graph or is rejected as invalid.

resolve() turns a Program into a Resolved one: the concrete plans, the leaf
tensors, an FX graph of ATen ops with meta["val"] set (what
kiln.capture.lower_graph takes) and the float32 eager value of every node.
interpret() replays a Resolved program with any Builder: float64 eager (the
reference), torch.export's tracer (kiln.trace's path) or source text (the
reproducer).
"""

import operator
import random
from dataclasses import dataclass, field

import torch

from kilnfuzz.data import make_leaf_placed

# A value larger than this many elements is not generated: the fuzzer wants
# many small graphs, not a few big ones.
MAX_NUMEL = 1 << 14


class Invalid(Exception):
    """A program that does not resolve (a plan refused its argument shapes)."""


@dataclass(frozen=True)
class Step:
    kind: str
    args: tuple = ()  # refs (step index, output index)
    sizes: tuple = ()  # free sizes the shrinker may reduce
    seed: int = 0


@dataclass
class Program:
    steps: list
    outputs: list  # refs
    salt: int = 0  # mixed into every leaf's data seed; another salt draws other data

    def copy(self, **kw):
        p = Program(list(self.steps), list(self.outputs), self.salt)
        for k, v in kw.items():
            setattr(p, k, v)
        return p


@dataclass
class Plan:
    """What a kind's plan() decides: attributes for emit(), the leaves the
    step creates, and the step's accumulation length (how many rounded terms
    one output element sums: 1 for elementwise ops, K for a K-long dot
    product); check.py scales its tolerance by the sum along the path."""

    attrs: dict = field(default_factory=dict)
    leaves: list = field(default_factory=list)  # data.LeafSpec
    acc: int = 1


@dataclass
class Meta:
    """What a plan sees of an argument: its float32 eager value."""

    val: torch.Tensor

    @property
    def shape(self):
        return tuple(self.val.shape)

    @property
    def dtype(self):
        return self.val.dtype

    @property
    def rank(self):
        return self.val.dim()

    @property
    def numel(self):
        return self.val.numel()

    @property
    def is_float(self):
        return self.val.dtype == torch.float32


# ---- builders ---------------------------------------------------------------


def _map_dtype(x, dt):
    if x is torch.float32:
        return dt
    if isinstance(x, (list, tuple)):
        return type(x)(_map_dtype(i, dt) for i in x)
    if isinstance(x, dict):
        return {k: _map_dtype(v, dt) for k, v in x.items()}
    return x


class Eager:
    """Calls each op on its arguments (tensors, or proxies under a tracer).
    float_dtype=torch.float64 makes every float32 dtype argument float64, so
    the whole program runs in double. audit(op, args, kwargs, out), if set,
    sees every call (check.py's conditioning audit)."""

    def __init__(self, float_dtype=torch.float32, audit=None, at_plan_sizes=False):
        self.float_dtype = float_dtype
        self.audit = audit
        # a replay of the program at the sizes its plans saw (the static
        # references), where kinds.as_laid_out holds a value to the float32
        # value's layout the plan relied on; not at the dynamic path's new
        # sizes, where the float32 value itself may be laid out otherwise
        self.at_plan_sizes = at_plan_sizes

    def call(self, op, *args, **kwargs):
        if self.float_dtype is not torch.float32:
            args, kwargs = _map_dtype(args, self.float_dtype), _map_dtype(kwargs, self.float_dtype)
        out = op(*args, **kwargs)
        if self.audit is not None:
            self.audit(op, args, kwargs, out)
        return tuple(out) if isinstance(out, (list, tuple)) else out


class FxBuilder:
    """Builds an FX graph of ATen calls while running them in float32 eager:
    handles are fx Nodes whose meta["val"] is the eager value."""

    def __init__(self):
        self.graph = torch.fx.Graph()
        self._first_op = None

    def placeholder(self, name, val):
        if self._first_op is None:
            node = self.graph.placeholder(name)
        else:
            with self.graph.inserting_before(self._first_op):
                node = self.graph.placeholder(name)
        node.meta["val"] = val
        return node

    def call(self, op, *args, **kwargs):
        vargs, vkw = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
        out = op(*vargs, **vkw)
        node = self.graph.call_function(op, tuple(args), dict(kwargs))
        if self._first_op is None:
            self._first_op = node
        node.meta["val"] = out
        if isinstance(out, (list, tuple)):
            items = []
            for i, o in enumerate(out):
                item = self.graph.call_function(operator.getitem, (node, i))
                item.meta["val"] = o
                items.append(item)
            return tuple(items)
        return node


class Name(str):
    """A value's name in generated source."""


def render(a):
    if isinstance(a, Name):
        return str(a)
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(render(x) for x in a) + "]"
    if isinstance(a, torch.dtype):
        return str(a)
    if isinstance(a, torch.memory_format):
        return "torch." + str(a).split(".")[-1]
    if isinstance(a, float) and (a != a or a in (float("inf"), float("-inf"))):
        return f"float('{a}')"
    return repr(a)


class SourceBuilder:
    """Writes each ATen call as a line of Python (for reproducers), running it
    in float32 eager alongside to know shapes for the comments."""

    def __init__(self):
        self.lines = []
        self.vals = {}
        self._n = 0

    def bind(self, name, val):
        self.vals[name] = val
        return Name(name)

    def call(self, op, *args, **kwargs):
        def val(a):
            if isinstance(a, Name):
                return self.vals[a]
            if isinstance(a, (list, tuple)):
                return type(a)(val(x) for x in a)
            return a

        out = op(*val(args), **{k: val(v) for k, v in kwargs.items()})
        name = f"v{self._n}"
        self._n += 1
        text = ", ".join([render(a) for a in args] + [f"{k}={render(v)}" for k, v in kwargs.items()])
        shown = out[0] if isinstance(out, (list, tuple)) else out
        note = f"  # {tuple(shown.shape)} {str(shown.dtype).replace('torch.', '')}" if isinstance(shown, torch.Tensor) else ""
        if isinstance(out, (list, tuple)) and len(out) > 1:
            note = f"  # {len(out)} results"
        self.lines.append(f"{name} = {op}({text}){note}")
        if isinstance(out, (list, tuple)):
            return tuple(self.bind(f"{name}[{i}]", o) for i, o in enumerate(out))
        return self.bind(name, out)


# ---- resolving and replaying ------------------------------------------------


@dataclass
class Leaf:
    role: str  # "input" | "param"
    name: str
    tensor: torch.Tensor  # as handed to kiln (an input may be a non-contiguous view)
    spec: object
    values: torch.Tensor = None  # contiguous values the layout is built from
    place: tuple = None  # (data layout function, its arguments) or None


@dataclass
class RStep:
    kind: object
    args: tuple
    attrs: dict
    leaves: list  # indices into Resolved.leaves
    n_out: int


@dataclass
class Resolved:
    program: Program
    steps: list
    leaves: list
    graph: torch.fx.Graph
    nodes: dict  # ref -> fx node
    accs: dict  # ref -> accumulation length along the path to it
    outputs: list  # refs
    mags: dict = None  # ref -> largest finite |value| it was computed from (itself included)

    def val(self, ref):
        return self.nodes[ref].meta["val"]

    @property
    def inputs(self):
        return [leaf for leaf in self.leaves if leaf.role == "input"]


def _amax(t):
    """The largest finite |element| of a float tensor (0 for others)."""
    if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()):
        return 0.0
    a = t.detach().abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


class Resolver:
    """Resolves a program step by step (the generator adds steps one at a
    time and keeps those that resolve)."""

    def __init__(self, kinds, salt=0):
        self.kinds, self.salt = kinds, salt
        self.b = FxBuilder()
        self.nodes, self.accs, self.mags, self.steps, self.leaves = {}, {}, {}, [], []

    def meta(self, ref):
        return Meta(self.nodes[ref].meta["val"])

    def add(self, step):
        """Plans and emits one step; returns its refs. Raises Invalid (the
        graph may then hold dead nodes: the generator's resolver is thrown
        away, and the final program is resolved again from scratch)."""
        si = len(self.steps)
        kind = self.kinds.get(step.kind)
        if kind is None:
            raise Invalid(f"unknown kind {step.kind}")
        if any(r not in self.nodes for r in step.args):
            raise Invalid(f"step {si} refers to a value that does not exist")
        metas = [self.meta(r) for r in step.args]
        try:
            plan = kind.plan(random.Random(step.seed), metas, list(step.sizes))
        except ValueError as e:  # an argument the shrinker changed (rank 0: randrange(0))
            raise Invalid(f"step {si} ({step.kind}) cannot plan for {[m.shape for m in metas]}: {e}") from None
        if plan is None:
            raise Invalid(f"step {si} ({step.kind}) refuses its arguments {[m.shape for m in metas]}")
        handles, idx, new_leaves = [], [], []
        for j, spec in enumerate(plan.leaves):
            t, values, place = make_leaf_placed(spec, (self.salt, step.seed, j))
            name = f"{'x' if spec.role == 'input' else 'p'}{len(self.leaves) + j}"
            idx.append(len(self.leaves) + j)
            new_leaves.append(Leaf(spec.role, name, t, spec, values, place))
            handles.append(self.b.placeholder(name, t))
        try:
            outs = kind.emit(self.b, [self.nodes[r] for r in step.args], handles, plan.attrs)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            raise Invalid(f"step {si} ({step.kind}): eager refused it: {e}") from None
        outs = outs if isinstance(outs, tuple) else (outs,)
        for node in outs:
            v = node.meta["val"]
            if not isinstance(v, torch.Tensor) or v.numel() > MAX_NUMEL or v.numel() == 0:
                raise Invalid(f"step {si} ({step.kind}) makes an empty or too large value")
        acc = max([self.accs[r] for r in step.args], default=0) + plan.acc
        mag = max([self.mags[r] for r in step.args] + [_amax(leaf.tensor) for leaf in new_leaves] +
                  [_amax(node.meta["val"]) for node in outs])
        refs = [(si, k) for k in range(len(outs))]
        for r, node in zip(refs, outs):
            self.nodes[r], self.accs[r], self.mags[r] = node, acc, mag
        self.leaves += new_leaves
        self.steps.append(RStep(kind, tuple(step.args), plan.attrs, idx, len(outs)))
        return refs

    def is_leaf(self, ref):
        return self.nodes[ref].op == "placeholder"

    def finish(self, program):
        outputs = list(program.outputs)
        if not outputs or len(set(outputs)) != len(outputs):
            raise Invalid("no outputs, or one output twice")
        for r in outputs:
            if r not in self.nodes or self.is_leaf(r):
                raise Invalid(f"output {r} is not a computed value")
        self.b.graph.output(tuple(self.nodes[r] for r in outputs))
        return Resolved(program, self.steps, self.leaves, self.b.graph, self.nodes, self.accs, outputs, self.mags)


def resolve(program, kinds):
    """Plans every step and builds the FX graph; raises Invalid."""
    r = Resolver(kinds, program.salt)
    for step in program.steps:
        r.add(step)
    return r.finish(program)


def interpret(res, builder, leaf_handles):
    """Replays res with `builder`; leaf_handles: one per res.leaves.
    Returns the handles of res.outputs."""
    vals = {}
    for si, st in enumerate(res.steps):
        outs = st.kind.emit(builder, [vals[r] for r in st.args], [leaf_handles[i] for i in st.leaves], st.attrs)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for k, h in enumerate(outs):
            vals[(si, k)] = h
    return [vals[r] for r in res.outputs]
