"""CPU fallback: run a graph kiln cannot fully compile.

The FX graph of ATen ops is split by torch's capability-based partitioner
into maximal pieces of ops kiln supports; each piece is compiled by kiln, and
the ops kiln lacks run in eager PyTorch between them. Tensors cross between
pieces as they are (kiln reads torch's memory in place and writes outputs
torch allocated), so nothing is copied at the seams beyond what a
non-contiguous tensor needs.
"""

import io
import json
import operator
import sys
import warnings

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.utils import _pytree as pytree

from kiln import _C
from kiln.capture import log_enabled, lower_graph
from kiln.errors import KilnError, UnsupportedOpError
from kiln.guards import SizeGuards, of_values as guards_of_values
from kiln.module import DTYPES, FORMAT_META, KilnModule, compile_graph, register_artifact_kind
from kiln.support import KilnSupport, per_node_support, unsupported_ops

_warned = set()


class _KilnPiece(torch.nn.Module):
    """One kiln-compiled partition: called with the partition's tensor inputs.

    made_outside: the indices (into runtime_positions) of the inputs the
    glue graph makes (eager ops, other pieces), not the graph's own inputs.
    Such a value whose floating dtype differs from the traced one is cast
    to it: the trace's dtypes are torch's meta functions', and an eager
    kernel may return another float dtype than its meta says (bf16
    native_group_norm's mean and rstd: float32 from the CPU kernel, bf16
    from the meta; FINDINGS.md, seed 6 graph 1319). Eager's result is the
    value; kiln's graph is typed, so it gets that value in the traced
    dtype, as the rest of the traced graph expects. Any other mismatch (a
    shape, a non-float dtype, a graph input's dtype: the caller's) is
    refused by the input check, which names the input."""

    def __init__(self, module, runtime_positions, tuple_output, made_outside=()):
        super().__init__()
        self.module = module
        self.runtime_positions = runtime_positions
        self.tuple_output = tuple_output
        self.made_outside = tuple(made_outside)

    def forward(self, *args):
        xs = [args[i] for i in self.runtime_positions]
        for k in self.made_outside:
            xs[k] = self.module.as_traced_float(k, xs[k])
        outs = self.module.run_flat(xs)
        return tuple(outs) if self.tuple_output else outs[0]


def _made_outside(args, runtime_positions):
    """_KilnPiece.made_outside for a piece called with these glue-graph args."""
    return [k for k, i in enumerate(runtime_positions)
            if isinstance(args[i], torch.fx.Node) and args[i].op != "placeholder"]


def drop_size_range_asserts(gm):
    """Removes the runtime asserts torch.export adds on the sizes of
    data-dependent results (masked_select's u0 <= bound, say), in place.

    Those are torch's own range facts from its meta functions, which eager
    never checks, and one is wrong in torch 2.13: masked_select's bound is
    the input's element count, ignoring a mask that broadcasts it larger, so
    the exported program fails where eager runs. An assert on anything but
    sizes (a torch._check on a value read with .item()) is kept. kiln pieces
    check their own input shapes at every call, so nothing relies on the
    dropped asserts."""
    def on_sizes_only(node, seen):
        if node in seen:
            return True
        seen.add(node)
        if node.op == "call_function" and node.target is torch.ops.aten.sym_size.int:
            return True
        if node.op != "call_function" or getattr(node.target, "__module__", None) not in ("_operator", "operator"):
            return False
        return all(on_sizes_only(a, seen) for a in node.all_input_nodes)

    dropped = 0
    for node in list(gm.graph.nodes):
        if (node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default
                and isinstance(node.args[0], torch.fx.Node) and on_sizes_only(node.args[0], set())):
            gm.graph.erase_node(node)
            dropped += 1
    if dropped:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return dropped


def drop_metadata_asserts(gm, user_inputs):
    """Removes torch.export's dtype/device/shape asserts
    (aten._assert_tensor_metadata, emitted where a .to() found nothing to
    convert) on anything but the caller's inputs (user_inputs: their
    placeholders' names), in place. Those hold by construction: a computed
    value's metadata is the traced graph's own, which the kiln piece making
    it was compiled for, and a parameter or buffer is the traced one. Left in,
    they have no tensor output, so each would run in eager between pieces. An
    assert on a user input checks what the caller passed: it stays."""
    dropped = 0
    for node in list(gm.graph.nodes):
        arg = node.args[0] if node.op == "call_function" and node.args else None
        if (node.target is torch.ops.aten._assert_tensor_metadata.default and isinstance(arg, torch.fx.Node)
                and not (arg.op == "placeholder" and arg.name in user_inputs)):
            gm.graph.erase_node(node)
            dropped += 1
    if dropped:
        gm.recompile()
    return dropped


def partition(gm, constant_of=None, warn=True, what="this model", weights_bf16=False, compute_bf16=False,
              target=None, ranges=None):
    """Returns (GraphModule running kiln pieces and eager ops, n_pieces).

    constant_of(node) -> tensor or None: values of placeholders that are
    parameters, embedded in the pieces as constants (so kiln packs them).
    weights_bf16: pack the pieces' linear weights as bf16 (kiln.trace).
    ranges: the ExportedProgram's range_constraints, where gm is its graph:
    the sizes the pieces are valid for (a Dim(min=1) runs at 1)."""
    aliases = {}
    status = per_node_support(gm, aliases)
    refused = {n for n, why in status.items() if why}
    support = KilnSupport(refused)
    missing = unsupported_ops(gm, refused)
    if warn and missing:
        key = tuple(missing)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"kiln: {what} runs these ops in eager PyTorch (CPU fallback): "
                          f"{', '.join(missing)}", stacklevel=3)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
    # What runs in eager PyTorch: the ops kiln refused, and pieces that then
    # failed to compile (kiln.dynamo counts them, see fallback counters).
    fused.kiln_eager = list(missing)
    # Why each refused node runs in eager (kiln.explain, KILN_LOG).
    fused.kiln_why = [f"{n.target} ({n.name}): {why}" for n, why in status.items() if why and n.op == "call_function"]
    if log_enabled():
        for line in fused.kiln_why:
            print(f"kiln: runs in eager: {line}", file=sys.stderr)
    n_pieces = 0
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        phs = [n for n in sub.graph.nodes if n.op == "placeholder"]
        placeholders, runtime_positions = [], []
        for i, (ph, arg) in enumerate(zip(phs, node.args)):
            const = constant_of(arg) if constant_of is not None and isinstance(arg, torch.fx.Node) else None
            if const is not None:
                placeholders.append(("constant", const))
            else:
                if "val" not in ph.meta and isinstance(arg, torch.fx.Node):
                    ph.meta["val"] = arg.meta.get("val")
                placeholders.append(("input", ph.name))  # a tensor, or a size (kiln/symbolic.py)
                runtime_positions.append(i)
        out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        try:
            # The guards fit the probes; SizeGuards or Dynamo check them per call.
            ctx = lower_graph(sub, placeholders, flat, ranges,
                              guards=guards_of_values([ph.meta.get("val") for ph in phs]), guards_checked=True,
                              aliases=dict(aliases))
            mod = KilnModule(compile_graph(ctx, weights_bf16, compute_bf16, target),
                             [placeholders[i][1] for i in runtime_positions], None, node.target,
                             layout_inputs=ctx.layout_inputs)
            _check_sizes_bind(mod)
        except (UnsupportedOpError, KilnError) as e:
            # A handler refused a particular use (a parameter kiln lacks):
            # this piece stays eager too.
            warnings.warn(f"kiln: a graph piece runs in eager PyTorch: {e}", stacklevel=3)
            fused.kiln_eager.append(f"a piece: {e}")
            _inline_piece(fused, node, sub)
            continue
        piece = _KilnPiece(mod, runtime_positions, isinstance(out, (tuple, list)),
                           _made_outside(node.args, runtime_positions))
        piece.node_names = {n.name for n in sub.graph.nodes if n.op == "call_function"}  # kiln.compare
        setattr(fused, node.target, piece)
        n_pieces += 1
    fused.recompile()
    return fused, n_pieces


def _inline_piece(fused, node, sub):
    """Puts the ops of a piece kiln could not compile back into the outer
    graph, where they run in eager as the ops kiln lacks do: every
    call_module of a partitioned model is then a kiln piece, which is what
    kiln.save stores (the eager ops as their targets' names, never code)."""
    val_map = dict(zip([n for n in sub.graph.nodes if n.op == "placeholder"], node.args))
    for n in sub.graph.nodes:
        if n.op == "get_attr" and not hasattr(fused, n.target):
            setattr(fused, n.target, getattr(sub, n.target))
    with fused.graph.inserting_before(node):
        out = fused.graph.graph_copy(sub.graph, val_map)
    if isinstance(out, (tuple, list)):
        for user in list(node.users):
            # A tuple-returning piece is read by getitem nodes only.
            user.replace_all_uses_with(out[user.args[1]])
            fused.graph.erase_node(user)
    else:
        node.replace_all_uses_with(out)
    fused.graph.erase_node(node)
    delattr(fused, node.target)


def _check_sizes_bind(mod):
    """Raises KilnError when a symbolic piece cannot learn its sizes from its
    inputs: every symbol must be some input's size, and a piece cut where its
    inputs carry only products of symbols (s0*s1 after a flatten, the
    factors used inside) could not bind them at any call. Such a piece runs
    in eager (found by the fuzzer's dynamic path, seed 12 graph 105)."""
    if not mod._symbolic:
        return
    shapes = [(1, DTYPES[t.dtype], t.shape) for t in mod.example_inputs()]
    try:
        mod._kiln_model.output_shapes(shapes)
    except ValueError as e:
        raise KilnError(f"kiln does not support a piece whose sizes its inputs do not give ({e})") from None


class PartitionedModule(torch.nn.Module):
    """What kiln.trace returns when some ops fall back to eager PyTorch."""

    def __init__(self, gm, lifted, n_pieces, out_spec, unsupported, source, writes=(), guards=None):
        super().__init__()
        self.gm = gm
        # torch.export's guards (kiln.guards.SizeGuards), checked on the
        # inputs' sizes before any piece or eager op runs.
        self._guards = guards
        # The graph's leading outputs are effect tokens, dropped ("token"),
        # and new values of buffers or inputs (in-place updates), each
        # copied into ("lifted" | "input", i).
        self._writes = [(str(k), int(i)) for k, i in writes]
        self._lifted = lifted  # parameters/buffers fed to the graph ahead of user inputs
        self.n_pieces = n_pieces
        self._out_spec = out_spec
        self.unsupported = unsupported
        self._source = source
        self.why = list(getattr(gm, "kiln_why", []))

    def forward(self, *args):
        flat = pytree.tree_leaves(args)
        if self._guards is not None:
            self._guards.check(flat)
        with torch.no_grad():
            outs = self.gm(*self._lifted, *flat)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            for (kind, i), new in zip(self._writes, outs):
                if kind != "token":
                    (self._lifted[i] if kind == "lifted" else flat[i]).copy_(new)
        outs = outs[len(self._writes):]
        return pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs[0]

    def explain(self):
        lines = [f"{self._source}: {self.n_pieces} kiln pieces; eager ops between them: {', '.join(self.unsupported)}"]
        lines += [f"  eager: {why}" for why in self.why]
        for name, mod in self.gm.named_children():
            if isinstance(mod, _KilnPiece):
                lines.append(f"[{name}]")
                lines.append(mod.module.explain())
        lines.append(str(self.gm.graph))
        return "\n".join(lines)

    # ---- saving -------------------------------------------------------------
    # A partitioned model is one .kiln file: its first kiln piece is the
    # file's graph (so the format and its checks are the usual ones), and
    # sections carry the rest: PARTITION_META, the glue graph as JSON (nodes,
    # ATen targets by name, argument structure); "py.piece.<i>" for every
    # other piece, each a complete .kiln artifact; PARTITION_TENSORS, the
    # parameters the eager ops read, through torch.save (loaded with
    # weights_only=True: no code runs at load). Loading resolves each target
    # among torch.ops and operator.getitem only.

    def to_bytes(self, extra=None):
        pieces, nodes, names = [], [], {}
        eager_reads = set()
        for node in self.gm.graph.nodes:
            if node.op == "call_function":
                for a in node.all_input_nodes:
                    eager_reads.add(a.name)
        for i, node in enumerate(self.gm.graph.nodes):
            names[node.name] = i
            entry = {"op": node.op, "name": node.name, "args": _encode(node.args), "kwargs": _encode(node.kwargs)}
            if node.op == "call_function":
                entry["target"] = _target_name(node.target)
            elif node.op == "call_module":
                mod = getattr(self.gm, node.target)
                entry["piece"] = len(pieces)
                entry["runtime_positions"] = mod.runtime_positions
                entry["tuple_output"] = mod.tuple_output
                pieces.append(mod.module)
            nodes.append(entry)
        phs = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        # Parameters only kiln pieces read are embedded in them already;
        # buffers updated per call are inputs of the pieces, and kept.
        written = {i for k, i in self._writes if k == "lifted"}
        lifted = [t if ph.name in eager_reads or j in written else None
                  for j, (ph, t) in enumerate(zip(phs, self._lifted))]
        buf = io.BytesIO()
        torch.save(lifted, buf)
        meta = {"format": 1, "nodes": nodes, "n_lifted": len(self._lifted), "unsupported": self.unsupported,
                "source": self._source, "n_pieces": len(pieces), "writes": self._writes, "why": self.why,
                "guards": self._guards.to_json() if self._guards is not None else None,
                "out_spec": pytree.treespec_dumps(self._out_spec) if self._out_spec is not None else None}
        if not pieces:
            raise KilnError("nothing of this model runs in kiln: there is no artifact to save")
        sections = {PARTITION_META: json.dumps(meta).encode(), PARTITION_TENSORS: buf.getvalue(),
                    FORMAT_META: json.dumps(pieces[0]._meta()).encode(), **(extra or {})}
        for i, p in enumerate(pieces[1:], 1):
            sections[f"py.piece.{i}"] = p.to_bytes()
        return pieces[0]._kiln_model.save(sections)

    @classmethod
    def from_sections(cls, first, sections):
        """Rebuilds from a loaded first piece and the file's sections."""
        try:
            meta = json.loads(sections[PARTITION_META].decode())
            lifted = torch.load(io.BytesIO(sections[PARTITION_TENSORS]), weights_only=True)
            pieces = [first] + [KilnModule.from_bytes(sections[f"py.piece.{i}"]) for i in range(1, meta["n_pieces"])]
            graph = torch.fx.Graph()
            root = torch.nn.Module()
            env = {}
            for entry in meta["nodes"]:
                args, kwargs = _decode(entry["args"], env), _decode(entry["kwargs"], env)
                if entry["op"] == "placeholder":
                    node = graph.placeholder(entry["name"])
                elif entry["op"] == "output":
                    node = graph.output(args[0])
                elif entry["op"] == "call_module":
                    name = f"fused_{entry['piece']}"
                    positions = list(entry["runtime_positions"])
                    root.add_module(name, _KilnPiece(pieces[entry["piece"]], positions, bool(entry["tuple_output"]),
                                                     _made_outside(args, positions)))
                    node = graph.call_module(name, tuple(args), kwargs)
                elif entry["op"] == "call_function":
                    node = graph.call_function(_resolve_target(entry["target"]), tuple(args), kwargs)
                else:
                    raise ValueError(f"unknown node kind {entry['op']!r}")
                env[entry["name"]] = node
            gm = torch.fx.GraphModule(root, graph)
            spec = meta.get("out_spec")
            out_spec = pytree.treespec_loads(spec) if spec else None
            lifted = [t if t is not None else torch.empty(0) for t in lifted]
            if len(lifted) != meta["n_lifted"]:
                raise ValueError("the parameter count differs from the graph's")
            guards = SizeGuards.from_json(meta.get("guards"))
        except KilnError:
            raise
        except Exception as e:  # sections are the front end's: reject what does not parse
            raise KilnError(f"corrupt artifact: the fallback graph is unreadable ({type(e).__name__}: {e})") from None
        writes = [(str(k), int(i)) for k, i in meta.get("writes", [])]
        if any(k not in ("lifted", "input", "token") or not 0 <= i < (len(lifted) if k == "lifted" else 1 << 20)
               for k, i in writes):
            raise KilnError("corrupt artifact: a state write-back names no buffer or input")
        module = cls(gm, lifted, len(pieces), out_spec, list(meta.get("unsupported", [])), meta.get("source", ""),
                     writes, guards)
        module.why = [str(w) for w in meta.get("why", [])]
        return module

    def save(self, f, _extra_files=None):
        raise KilnError("torch.jit.save of a model with CPU fallback is not supported: use kiln.save "
                        f"(these ops run in eager PyTorch: {', '.join(self.unsupported)})")


PARTITION_META = "py.partition"
PARTITION_TENSORS = "py.partition.tensors"


def _load_partitioned(first, sections, source):
    """KilnModule.from_bytes / from_file of a partitioned artifact: the
    first piece is loaded; the glue graph, the eager ops' tensors and the
    other pieces are in sections."""
    try:
        n = int(json.loads(sections[PARTITION_META].decode())["n_pieces"])
    except Exception as e:
        raise KilnError(f"corrupt artifact: the {PARTITION_META} section is unreadable ({e})") from None
    if isinstance(source, str):
        with open(source, "rb") as f:
            source = f.read()
    sections.update(_C.sections(source, [PARTITION_TENSORS] + [f"py.piece.{i}" for i in range(1, max(n, 1))]))
    return PartitionedModule.from_sections(first, sections)


register_artifact_kind(PARTITION_META, _load_partitioned)


def _target_name(target):
    if target is operator.getitem:
        return "operator.getitem"
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target.namespace}.{target._opname}.{target._overloadname}"
    if target is torch.ops.higher_order.with_effects:
        return WITH_EFFECTS
    raise KilnError(f"cannot save a model whose fallback calls {target!r}")


# The one higher-order op a glue graph may call: with_effects, which runs a
# side-effecting op in order (its op argument is saved as {"op": name}).
WITH_EFFECTS = "torch.ops.higher_order.with_effects"


def _resolve_target(name):
    if name == "operator.getitem":
        return operator.getitem
    if name == WITH_EFFECTS:
        return torch.ops.higher_order.with_effects
    parts = name.split(".")
    if len(parts) != 5 or parts[:2] != ["torch", "ops"]:
        raise ValueError(f"unknown target {name!r}")
    return getattr(getattr(getattr(torch.ops, parts[2]), parts[3]), parts[4])


def _encode(a):
    if isinstance(a, torch.fx.Node):
        return {"node": a.name}
    if isinstance(a, (list, tuple)):
        return {"list" if isinstance(a, list) else "tuple": [_encode(x) for x in a]}
    if isinstance(a, dict):
        return {"dict": {k: _encode(v) for k, v in a.items()}}
    if isinstance(a, torch.dtype):
        return {"dtype": str(a).split(".")[-1]}
    if isinstance(a, torch._ops.OpOverload):
        return {"op": _target_name(a)}
    if isinstance(a, torch.device):
        return {"device": str(a)}
    if isinstance(a, torch.memory_format):
        return {"memory_format": str(a).split(".")[-1]}
    if isinstance(a, float) and a != a or a in (float("inf"), float("-inf")):
        return {"float": repr(a)}
    if a is None or isinstance(a, (bool, int, float, str)):
        return {"value": a}
    raise KilnError(f"cannot save a fallback argument of type {type(a).__name__}")


def _torch_attr(name, kind, what):
    """torch.<name>, which a saved file claims is a `kind` (checked: the file
    may be hostile, and getattr alone would hand back any torch attribute)."""
    v = getattr(torch, name, None)
    if not isinstance(v, kind):
        raise ValueError(f"unknown {what} {name!r}")
    return v


def _decode(e, env):
    (kind, v), = e.items()
    if kind == "node":
        return env[v]
    if kind in ("list", "tuple"):
        items = [_decode(x, env) for x in v]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: _decode(x, env) for k, x in v.items()}
    if kind == "dtype":
        return _torch_attr(v, torch.dtype, "dtype")
    if kind == "op":
        op = _resolve_target(v)
        if not isinstance(op, torch._ops.OpOverload):
            raise ValueError(f"{v!r} is not an op")
        return op
    if kind == "device":
        return torch.device(v)
    if kind == "memory_format":
        return _torch_attr(v, torch.memory_format, "memory format")
    if kind == "float":
        return float(v)
    if kind == "value":
        return v
    raise ValueError(f"unknown argument kind {kind!r}")
