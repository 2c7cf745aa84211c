"""The compiled module: a torch.nn.Module whose forward runs kiln's C runtime.

Inputs cross to C as (data pointer, dtype, shape); outputs are new tensors
every call, written by C, so nothing returned points into kiln's arena.
Small outputs come from ``torch.empty``; large ones (activations saved for
backward, gradients) from kiln's block cache through DLPack, so that their
memory is reused step after step without page faults (see
src/base/kiln_block_cache.h; ``KILN_OUTPUT_CACHE=0`` turns this off). The
module saves to a ``.kiln`` artifact and, for code written for
torch_neuronx, through ``torch.jit.save``.
"""

import json
import os
import struct

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.utils import _pytree as pytree

from kiln import _C
from kiln.capture import log_enabled
from kiln.errors import KilnError
from kiln.optable import DTYPES, TORCH_DTYPES
from kiln.profiler import run_with_events
from kiln.random_ops import RNG_SEED_INPUT, with_seed
from kiln.progress import compile_pass_callback, compile_stage

_profiler_enabled = torch._C._autograd._profiler_enabled

FORMAT_META = "py.meta"
WRITES_SECTION = "writes"  # runtime/kiln_writes.h

# Artifacts that hold more than one kiln graph (CPU fallback's pieces): the
# front-end section that marks them -> load(first_piece, sections, source)
# giving the whole module. kiln.partition registers its kind.
_ARTIFACT_KINDS = {}


def register_artifact_kind(section, load):
    _ARTIFACT_KINDS[section] = load

# Outputs of at least this many bytes come from kiln's block cache: below it
# glibc's heap serves torch.empty without faults, and torch.empty is as fast.
CACHED_OUTPUT_BYTES = 256 << 10
# torch dtype -> (DLPack type code, bits)
_DLPACK = {torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16),
           torch.int64: (0, 64), torch.int32: (0, 32), torch.int8: (0, 8), torch.uint8: (1, 8),
           torch.bool: (6, 8)}


def _output_maker(dtype, shape, cache):
    """A zero-argument function that makes one new output tensor."""
    code, bits = _DLPACK[dtype]
    nbytes = bits // 8
    for d in shape:
        nbytes *= d
    if cache and nbytes >= CACHED_OUTPUT_BYTES:
        empty, from_dlpack = _C.empty, torch._C._from_dlpack
        return lambda: from_dlpack(empty(shape, code, bits))
    # torch.empty_like of an expanded 1-element template is about 3x cheaper
    # than torch.empty(shape, dtype=...) and, when it is contiguous (checked:
    # the C side writes dense row-major outputs), as good.
    tmpl = torch.empty((1,) * len(shape), dtype=dtype).expand(shape)
    probe = torch.empty_like(tmpl)
    if probe.is_contiguous() and tuple(probe.shape) == shape:
        return lambda: torch.empty_like(tmpl)
    return lambda: torch.empty(shape, dtype=dtype)


_SIZE_DTYPE = DTYPES[torch.int8]
_CHECKED = object()  # _fast_in's dtype of an input no tensor passes unchecked


def _layout_rule_ok(rule):
    return rule == "storage" or (isinstance(rule, dict) and set(rule) == {"order", "dense"}
                                 and isinstance(rule["order"], list)
                                 and all(type(d) is int for d in rule["order"])
                                 and sorted(rule["order"]) == list(range(len(rule["order"])))
                                 and isinstance(rule["dense"], bool))


def _laid_out_as_traced(t, rule):
    """Is t laid out as a layout-checked input was at trace time? "storage":
    row-major from its storage's start (as_strided reads that storage).
    {"order": dims, "dense": d}: its strides, over the dims with more than
    one element that are not broadcast, in that order from the largest,
    and dense (no gaps, no overlap) as the example was: eager lays out an
    elementwise op's result by the stride order, an empty_like's by the
    strides when dense, so results come out as they were traced, whatever
    t's offset (LoweringContext.layout_read)."""
    if rule == "storage":
        return t.is_contiguous() and t.storage_offset() == 0
    order = rule["order"]
    if sorted(order) != list(range(t.dim())):
        return False
    strides = [t.stride(d) for d in order if t.shape[d] > 1 and t.stride(d) != 0]
    return (all(a >= b for a, b in zip(strides, strides[1:]))
            and bool(is_non_overlapping_and_dense_or_false(t)) == bool(rule["dense"]))


class KilnModule(torch.nn.Module):
    """A model compiled by kiln. Call it like the original module."""

    def __init__(self, model, input_names, out_spec, source="", compile_seconds=0.0, writes=(), layout_inputs=(),
                 python_inputs=()):
        super().__init__()
        self._kiln_model = model
        self._input_names = list(input_names)
        self._out_spec = out_spec
        # The graph's leading outputs are new values of inputs the model
        # updates in place (a KV cache passed in): (input position, in
        # place) each; written into the input's memory by the run itself,
        # else copied in after it (kiln.capture.input_writes_of).
        self._writes = [(int(pos), bool(in_place)) for pos, in_place in writes]
        self._source = source
        self.compile_seconds = compile_seconds
        # Inputs whose layout decides memory an as_strided reads, name ->
        # "storage" (row-major from offset 0) or the example's stride order
        # and density (LoweringContext.layout_read): laid out otherwise than
        # at trace time, eager's answer is not the model's; _check_input
        # refuses them.
        self._layout_inputs = dict(layout_inputs)
        # The non-tensor arguments torch.export took as constants (a
        # transformers model's use_cache=False): (position among the call's
        # flat arguments, name, traced value). A call may pass them again,
        # with the traced values (_without_python_inputs), or leave them out.
        self._python_inputs = [(int(pos), str(name), value) for pos, name, value in python_inputs]
        ins = model.inputs()
        # A graph with random nodes (dropout, torch.rand) reads a seed input
        # the module draws per call (kiln/random_ops.py): not the caller's.
        seeds = [i for i, (name, _, _) in enumerate(ins) if name == RNG_SEED_INPUT]
        self._seed_at = seeds[0] if seeds else None
        self._in_specs = [(dtype, tuple(shape)) for name, dtype, shape in ins if name != RNG_SEED_INPUT]
        if self._seed_at is not None and RNG_SEED_INPUT in self._input_names:
            self._input_names.remove(RNG_SEED_INPUT)
        self._out_specs = [(TORCH_DTYPES[dtype], tuple(shape)) for _, dtype, shape in model.outputs()]
        self._out_ids = [(dtype, tuple(shape)) for _, dtype, shape in model.outputs()]
        if len(self._input_names) != len(self._in_specs):
            raise KilnError(f"the artifact names {len(self._input_names)} inputs but its graph has {len(self._in_specs)}")
        unknown = [n for n, rule in self._layout_inputs.items()
                   if n not in self._input_names or not _layout_rule_ok(rule)]
        if unknown:
            raise KilnError(f"the artifact's layout-checked inputs {self._layout_inputs} are not among its inputs "
                            f"{self._input_names}, each with a rule (\"storage\", or an order and density)")
        positions = [pos for pos, _, _ in self._python_inputs]
        n_args = len(self._in_specs) + len(positions)
        if (positions != sorted(set(positions)) or any(p < 0 or p >= n_args for p in positions)
                or not all(type(v) in _PYTHON_INPUT_TYPES for _, _, v in self._python_inputs)):
            raise KilnError(f"the artifact's constant arguments {self._python_inputs} are not distinct positions "
                            f"among the call's {n_args} arguments, each with a bool, int, float, string or None")
        self._prepare_fast_path()

    def _prepare_fast_path(self):
        """Per-call work done once: what a well-formed input looks like (exact
        torch dtype object, its kiln id) and how each output is made."""
        # A layout-checked input never takes the fast case (no dtype is
        # _CHECKED): describe sends it through _check_input.
        self._fast_in = [(_CHECKED if name in self._layout_inputs else TORCH_DTYPES[dtype], dtype)
                         for name, (dtype, _) in zip(self._input_names, self._in_specs)]
        cache = os.environ.get("KILN_OUTPUT_CACHE", "1") != "0"
        # A symbolic model's output shapes depend on each call's sizes
        # (kiln_model_output_shapes): its outputs are made per call.
        self._symbolic = self._kiln_model.symbolic()
        self._out_makers = None if self._symbolic else [
            _output_maker(dtype, shape, cache) for dtype, shape in self._out_specs]
        # How forward packs the outputs: "one" tensor, a flat "tuple", else
        # through the pytree spec (tree_unflatten costs microseconds).
        spec = self._out_spec
        n = len(self._out_specs) - len(self._writes)
        if spec is None:
            self._out_kind = "one" if n == 1 else "tuple"
        elif spec.is_leaf() and n == 1:
            self._out_kind = "one"
        elif (spec.type is tuple and spec.num_leaves == n and spec.num_children == n
              and all(spec.child(i).is_leaf() for i in range(n))):
            self._out_kind = "tuple"
        else:
            self._out_kind = "tree"

    # ---- running -----------------------------------------------------------
    def _check_input(self, i, t):
        """Input i as the C side takes it (made contiguous), or an error
        naming it and saying what is wrong."""
        dtype, shape = self._in_specs[i]
        if isinstance(t, int) and not isinstance(t, bool) and dtype == _SIZE_DTYPE and len(shape) == 1:
            return t  # a symbolic size passed by value
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"input {i} ('{self._input_names[i]}'): expected a tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"input {i} ('{self._input_names[i]}'): kiln runs on the CPU, got a tensor on {t.device}")
        if t.dtype not in DTYPES:
            want = f"({', '.join(map(str, shape))}) {str(TORCH_DTYPES[dtype]).replace('torch.', '')}"
            got = f"({', '.join(map(str, t.shape))}) {str(t.dtype).replace('torch.', '')}"
            raise ValueError(f"input {i} ('{self._input_names[i]}'): expected {want}, got {got}")
        rule = self._layout_inputs.get(self._input_names[i]) if self._layout_inputs else None
        if rule is not None and not _laid_out_as_traced(t, rule):
            what = ("(as_strided addresses its storage), row-major from the storage's start" if rule == "storage" else
                    f"(as_strided reads a result eager lays out as this input), with strides in the order of dims "
                    f"{tuple(rule['order'])} and {'' if rule['dense'] else 'not '}dense")
            fix = ("pass .contiguous() of it, or a fresh tensor" if rule == "storage" else
                   "pass it laid out as the traced example was, or trace with a contiguous example")
            raise KilnError(f"input {i} ('{self._input_names[i]}'): the model reads its memory as laid out at trace "
                            f"time {what}; got strides {tuple(t.stride())} at offset {t.storage_offset()} for "
                            f"shape {tuple(t.shape)}: {fix}")
        return t if t.is_contiguous() else t.contiguous()

    def as_traced_float(self, i, t):
        """t, a value for input i made outside this module (an eager op of
        a partitioned graph, kiln/partition.py), cast to the input's traced
        dtype when only its floating dtype differs; anything else as it is
        (the input check then says what is wrong)."""
        want = TORCH_DTYPES[self._in_specs[i][0]]
        if (type(t) is not torch.Tensor or t.dtype is want or not t.is_floating_point()
                or not want.is_floating_point):
            return t
        shape = self._in_specs[i][1]
        if not self._symbolic and tuple(t.shape) != shape:
            return t
        return t.to(want)

    def _check_inputs(self, args):
        if len(args) != len(self._in_specs):
            names = ", ".join(self._input_names)
            raise ValueError(f"this kiln module takes {len(self._in_specs)} tensor inputs ({names}), got {len(args)}")
        return [self._check_input(i, t) for i, t in enumerate(args)]

    def describe(self, i, t, keep):
        """Input i's descriptor for the C call: (data pointer, dtype id,
        shape). Fast for a plain contiguous CPU tensor of the expected dtype;
        anything else goes through _check_input, which explains what is wrong
        or makes a contiguous copy (appended to keep: the pointer must stay
        valid until the C call returns). Shapes are checked in C
        (kiln_model_run), which names the input, what it expected and what
        it got."""
        tdtype, dtype_id = self._fast_in[i]
        if type(t) is torch.Tensor and t.dtype is tdtype and t.is_cpu and t.is_contiguous():
            return (t.data_ptr(), dtype_id, t.shape)
        if type(t) is int and dtype_id == _SIZE_DTYPE:
            return (1, _SIZE_DTYPE, (t,))
        t = self._check_input(i, t)
        if isinstance(t, int):  # a size argument: its bytes are never read (1: a pointer no kernel dereferences)
            return (1, _SIZE_DTYPE, (t,))
        keep.append(t)
        return (t.data_ptr(), DTYPES[t.dtype], t.shape)

    def run_flat(self, args, given=None):
        """Runs on a flat list of tensors; returns the flat list of outputs.

        given: {output index: tensor} to write those outputs into (a dense
        tensor of the output's shape and dtype, possibly an input's own
        memory: how kiln.dynamo updates a KV cache in place)."""
        if len(args) != len(self._fast_in):
            self._check_inputs(args)  # raises: the count is wrong
        keep, descs = [], []
        for i, (t, (tdtype, dtype_id)) in enumerate(zip(args, self._fast_in)):
            if type(t) is torch.Tensor and t.dtype is tdtype and t.is_cpu and t.is_contiguous():
                descs.append((t.data_ptr(), dtype_id, t.shape))  # describe's fast case, inline
            else:
                descs.append(self.describe(i, t, keep))
        n = len(self._out_ids)
        outs, out_descs = [None] * n, [None] * n
        for k, t in (given or {}).items():
            self.give(k, t, outs, out_descs)
        return self.run_described(descs, outs, out_descs, args)

    def give(self, k, t, outs, out_descs):
        """Makes tensor t output k (written into, not made). Only what C
        cannot see is checked here: the descriptor carries the model's dtype
        id, and C writes dense rows. The shape goes as t has it: C checks it
        (kiln_model_run names the output, what it expected and what came)."""
        dtype = self._out_specs[k][0]
        if t.dtype != dtype or not t.is_contiguous():
            raise KilnError(f"output {k}: the tensor to write into is a {'' if t.is_contiguous() else 'non-'}"
                            f"contiguous {tuple(t.shape)} {t.dtype}, the model makes dense {dtype}")
        outs[k] = t
        out_descs[k] = (t.data_ptr(), self._out_ids[k][0], t.shape)

    def _make(self, k, shape):
        return torch.empty(shape, dtype=self._out_specs[k][0])

    def _make_outputs(self, descs, outs, out_descs):
        """Makes the outputs out_descs leaves None, as run's make would."""
        if None not in out_descs:
            return
        shapes = self._kiln_model.output_shapes(descs) if self._symbolic else None
        for k, d in enumerate(out_descs):
            if d is None:
                outs[k] = o = self._make(k, shapes[k]) if shapes else self._out_makers[k]()
                out_descs[k] = (o.data_ptr(), self._out_ids[k][0], shapes[k] if shapes else self._out_ids[k][1])

    def run_described(self, descs, outs, out_descs, args=()):
        """The C call on input descriptors (describe's) and outputs: outs and
        out_descs list every output, None where this makes it (a new tensor
        every call: the caller owns it); the given ones are dense tensors of
        the output's dtype and shape (C checks the shapes). Returns outs.
        args: the inputs, shown in torch.profiler's kiln::forward event."""
        seed = None
        if self._seed_at is not None:
            descs, seed = with_seed(descs, self._seed_at)  # seed: alive until C returns
        if _profiler_enabled():  # inside torch.profiler: kiln::<op> events (kiln/profiler.py)
            self._make_outputs(descs, outs, out_descs)
            run_with_events(self, args, descs, out_descs)
        elif self._symbolic:
            # C makes the missing outputs (self._make) once the sizes give
            # their shapes: one binding, one parse of the descriptors.
            self._kiln_model.run(descs, out_descs, None, outs, self._make)
        else:
            self._make_outputs(descs, outs, out_descs)
            self._kiln_model.run(descs, out_descs)
        return outs

    def run_nodes(self, *args):
        """Runs on args keeping every node's output: (outputs, {node index:
        tensor}) for each node that ran a kernel, in the order they ran (a
        copy of each, as the node left it). How two targets are compared
        node by node (kiln.compare_targets)."""
        kept = {}
        km = self._kiln_model

        def hook(node, end):
            if end:
                out = km.node_output(node)
                if out is not None:
                    data, dtype, shape = out
                    t = torch.frombuffer(bytearray(data), dtype=TORCH_DTYPES[dtype]) if data else \
                        torch.empty(0, dtype=TORCH_DTYPES[dtype])
                    kept[node] = t.reshape(shape)

        ins = self._check_inputs(list(args))
        descs = [(1, _SIZE_DTYPE, (t,)) if isinstance(t, int) else (t.data_ptr(), DTYPES[t.dtype], t.shape)
                 for t in ins]
        seed = None
        if self._seed_at is not None:
            descs, seed = with_seed(descs, self._seed_at)  # seed: alive until C returns
        if self._symbolic:
            shapes = km.output_shapes(descs)
        else:
            shapes = [shape for _, shape in self._out_ids]
        outs = [torch.empty(shape, dtype=dtype) for shape, (dtype, _) in zip(shapes, self._out_specs)]
        km.run(descs, [(o.data_ptr(), dtype_id, shape) for o, shape, (dtype_id, _)
                       in zip(outs, shapes, self._out_ids)], hook)
        return outs, kept

    def forward(self, *args, **kwargs):
        if kwargs:
            args = tuple(args) + tuple(kwargs.values())
        flat = _flat_args(args)
        if self._python_inputs and len(flat) != len(self._in_specs):
            flat = self._without_python_inputs(flat)
        outs = self._run_writing(flat) if self._writes else self.run_flat(flat)
        kind = self._out_kind
        if kind == "one":
            return outs[0]
        if kind == "tuple":
            return tuple(outs)
        return pytree.tree_unflatten(outs, self._out_spec)

    def _without_python_inputs(self, flat):
        """flat without the constant arguments the model was traced with,
        each checked: torch.export specialized the program to its value."""
        if len(flat) != len(self._in_specs) + len(self._python_inputs):
            return flat  # the input check says what is wrong
        for pos, name, value in self._python_inputs:
            got = flat[pos]
            if type(got) is not type(value) or got != value:
                raise ValueError(f"argument '{name}': the module was traced with {name}={value!r} (torch.export "
                                 f"takes a non-tensor argument as a constant), got {got!r}: trace again with it")
        skip = {pos for pos, _, _ in self._python_inputs}
        return [t for i, t in enumerate(flat) if i not in skip]

    def _run_writing(self, flat):
        """run_flat for a model that updates inputs in place: the new values
        go into the inputs' memory (given as those outputs) where the graph
        allows it and the input is a dense tensor of its dtype, else are
        copied in after the call; returns the model's own outputs."""
        if len(flat) != len(self._fast_in):
            self._check_inputs(flat)  # raises: the count is wrong
        given, copied = {}, []
        for k, (pos, in_place) in enumerate(self._writes):
            t = flat[pos]
            if not isinstance(t, torch.Tensor):
                self._check_input(pos, t)  # raises: says what came
            if in_place and type(t) is torch.Tensor and t.dtype is self._fast_in[pos][0] and t.is_contiguous():
                given[k] = t
            else:
                copied.append((k, t))
        outs = self.run_flat(flat, given)
        for k, t in copied:
            t.copy_(outs[k])
        return outs[len(self._writes):]

    # ---- visibility ----------------------------------------------------------
    def explain(self):
        """The compiled plan as text: nodes, fused groups, arena, constants;
        first, the inputs the model updates in place, if any."""
        text = self._kiln_model.explain()
        if self._writes:
            how = ", ".join(f"{self._input_names[pos]} ({'in place' if in_place else 'copied in after the run'})"
                            for pos, in_place in self._writes)
            text = f"writes its inputs: {how}; outputs 0..{len(self._writes) - 1} are their new values\n" + text
        return text

    def stats(self):
        return self._kiln_model.stats()

    def profile(self, *args, runs=10):
        """Runs `runs` times with per-node timing (after one untimed call);
        returns rows sorted by time. "ms" is the node's own time; "wait_ms"
        the time it then waited at the host OpenMP team's closing barrier
        for threads that ran none of its tasks (the scheduler's, not the
        kernel's: kiln_pool_set_wait_counter)."""
        self(*args)
        self._kiln_model.profile(True)
        try:
            for _ in range(runs):
                self(*args)
            rows, n = self._kiln_model.profile()
            waits = self._kiln_model.profile_wait()
        finally:
            self._kiln_model.profile(False)
        total = sum(r[2] for r in rows) or 1
        out = [{"op": op, "origin": origin or "", "ms": ns / max(n, 1) / 1e6, "share": ns / total,
                "wait_ms": w / max(n, 1) / 1e6}
               for (op, origin, ns), w in zip(rows, waits)]
        return sorted(out, key=lambda r: -r["ms"])

    # ---- saving ---------------------------------------------------------------
    def _meta(self):
        spec = pytree.treespec_dumps(self._out_spec) if self._out_spec is not None else None
        meta = {"format": 1, "input_names": self._input_names, "out_spec": spec, "source": self._source}
        if self._layout_inputs:
            meta["layout_inputs"] = self._layout_inputs
        if self._python_inputs:
            meta["python_inputs"] = [list(p) for p in self._python_inputs]
        return meta

    def _graph_input(self, pos):
        """The graph's input index of the caller's input pos (the graph may
        also take the random ops' seed, which the module draws itself)."""
        return pos + (self._seed_at is not None and pos >= self._seed_at)

    def to_bytes(self, extra=None):
        """The .kiln artifact as bytes; extra: more sections ({name: bytes},
        such as kiln.tokenizer's)."""
        sections = {FORMAT_META: json.dumps(self._meta()).encode(), **(extra or {})}
        if self._writes:  # the layout is runtime/kiln_writes.h's
            sections[WRITES_SECTION] = b"KILNWRIT" + struct.pack("<II", 1, len(self._writes)) + b"".join(
                struct.pack("<III", k, self._graph_input(pos), int(in_place))
                for k, (pos, in_place) in enumerate(self._writes))
        return self._kiln_model.save(sections)

    @classmethod
    def from_bytes(cls, data, target=None):
        """A KilnModule, or a PartitionedModule when the artifact was saved
        from a model with CPU fallback; on target ("cpu", "reference"; None:
        $KILN_TARGET, else the CPU)."""
        return cls._load(bytes(data), target)

    @classmethod
    def from_file(cls, path, target=None):
        """As from_bytes, reading the file straight into the model's buffer."""
        return cls._load(os.fspath(path), target)

    @property
    def target(self):
        """The target the model runs on: "cpu" or "reference"."""
        return self._kiln_model.target()

    @classmethod
    def _load(cls, source, target=None):
        model, sections = _C.load(source, [FORMAT_META, WRITES_SECTION, *_ARTIFACT_KINDS], target)
        first = cls._from_model(model, sections)
        for section, load in _ARTIFACT_KINDS.items():
            if section in sections:
                return load(first, sections, source)
        return first

    @classmethod
    def _from_model(cls, model, sections):
        try:
            meta = json.loads(sections[FORMAT_META].decode()) if FORMAT_META in sections else {}
            spec = meta.get("out_spec")
            out_spec = pytree.treespec_loads(spec) if spec else None
        except Exception as e:  # the section is the front end's: check it as the C loader checks its own
            raise KilnError(f"corrupt artifact: the {FORMAT_META} section is unreadable ({e})") from None
        # Checked against the graph in C (kiln_writes_load): indices in
        # range, each output of its input's dtype and shape.
        writes = model.writes(sections.get(WRITES_SECTION))
        if [o for o, _, _ in writes] != list(range(len(writes))):
            raise KilnError(f"corrupt artifact: the outputs that update inputs are {[o for o, _, _ in writes]}, "
                            "not the first ones")
        seeds = [i for i, (name, _, _) in enumerate(model.inputs()) if name == RNG_SEED_INPUT]
        if any(i in seeds for _, i, _ in writes):
            raise KilnError("corrupt artifact: an output updates the random ops' seed input")
        writes = [(i - (bool(seeds) and i > seeds[0]), in_place) for _, i, in_place in writes]
        n_out = len(model.outputs())
        if out_spec is not None and out_spec.num_leaves != n_out - len(writes):
            raise KilnError(f"corrupt artifact: {FORMAT_META} describes {out_spec.num_leaves} outputs, "
                            f"the graph has {n_out - len(writes)}")
        names = meta.get("input_names") or [n or f"input{i}" for i, (n, _, _) in enumerate(model.inputs())]
        layout = meta.get("layout_inputs", {})
        if not isinstance(layout, dict) or not all(isinstance(n, str) for n in layout):
            raise KilnError(f"corrupt artifact: the {FORMAT_META} section's layout_inputs is {layout!r}, "
                            "not a map of input names")
        python = meta.get("python_inputs", [])
        if not isinstance(python, list) or not all(isinstance(p, list) and len(p) == 3 and type(p[0]) is int
                                                   and isinstance(p[1], str) for p in python):
            raise KilnError(f"corrupt artifact: the {FORMAT_META} section's python_inputs is {python!r}, "
                            "not a list of [position, name, value]")
        return cls(model, names, out_spec, meta.get("source", ""), writes=writes, layout_inputs=layout,
                   python_inputs=python)

    def example_inputs(self):
        """Zero tensors of the input shapes (used to trace the jit wrapper); a
        symbolic model's at sizes inside every symbol's range."""
        shapes = self._kiln_model.example_shapes() if self._symbolic else [s for _, s in self._in_specs]
        return tuple(torch.zeros(shape, dtype=TORCH_DTYPES[dtype]) for (dtype, _), shape in zip(self._in_specs, shapes))

    def save(self, f, _extra_files=None):
        """torch.jit.save(module, f) support: writes a TorchScript archive whose
        forward calls torch.ops.kiln.run on the embedded .kiln artifact.
        Load it with torch.jit.load after `import kiln`."""
        _script_module(self).save(f, _extra_files=_extra_files or {})

    def save_to_buffer(self, _extra_files=None):
        return _script_module(self).save_to_buffer(_extra_files=_extra_files or {})

    def __repr__(self):
        s = self.stats()
        return (f"KilnModule({self._source or 'model'}: {s['nodes']} nodes, {s['kernel_calls']} kernel calls, "
                f"arena {s['arena_bytes'] / 2**20:.2f} MiB, constants {s['constant_bytes'] / 2**20:.2f} MiB)")

    # Copying a compiled module shares its C model (immutable after compile).
    def __deepcopy__(self, memo):
        return self


def compile_graph(ctx, weights_bf16=False, compute_bf16=False, target=None):
    """Compiles a LoweringContext's graph; logs passes when KILN_LOG=1.
    weights_bf16: store linear weights packed as bf16 (see kiln.trace).
    compute_bf16: linear layers compute in bf16 (see kiln.trace's compute_dtype).
    target: "cpu" or "reference" (None: $KILN_TARGET, else the CPU)."""
    compile_stage("compile")
    quant = weights_bf16 if isinstance(weights_bf16, tuple) else (0, 32, False, False)  # (bits, group, asym, a8)
    bf16 = not isinstance(weights_bf16, tuple) and bool(weights_bf16)
    return _C.compile(ctx.graph, log_enabled(), bf16, bool(compute_bf16), *quant, compile_pass_callback(),
                      target)


class _KilnJitWrapper(torch.nn.Module):
    """What torch.jit.save writes: the artifact as a uint8 buffer and a
    forward calling torch.ops.kiln.run on it (kiln/jit.py defines the op)."""

    def __init__(self, artifact, out_spec):
        super().__init__()
        self.register_buffer("kiln_artifact", artifact)
        self._out_spec = out_spec

    def forward(self, *inputs):
        outs = torch.ops.kiln.run(self.kiln_artifact, list(inputs))
        if self._out_spec is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return pytree.tree_unflatten(list(outs), self._out_spec)


_PYTHON_INPUT_TYPES = (bool, int, float, str, type(None))


def _flat_args(args):
    """pytree.tree_leaves(args), without its walk for the common cases:
    plain tensors, and lists or tuples of them (a generation step's KV
    cache: ~20 us a call for the walk)."""
    flat = []
    for a in args:
        if type(a) is torch.Tensor:
            flat.append(a)
        elif type(a) in (list, tuple) and all(type(x) is torch.Tensor for x in a):
            flat.extend(a)
        else:
            return pytree.tree_leaves(args)
    return flat


def _script_module(kiln_module):
    """A torch.jit.ScriptModule running the kiln module's artifact."""
    if kiln_module._writes:
        raise KilnError("torch.jit.save: this kiln module updates its inputs in place (a KV cache passed in), "
                        "which the TorchScript wrapper cannot do; save it with kiln.save")
    data = kiln_module.to_bytes()
    artifact = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    wrapper = _KilnJitWrapper(artifact, kiln_module._out_spec)
    with torch.no_grad():
        return torch.jit.trace(wrapper, kiln_module.example_inputs(), check_trace=False)
