"""CPU fallback: run a graph kiln cannot fully compile.

The FX graph of ATen ops is split by torch's capability-based partitioner
into maximal pieces of ops kiln supports; each piece is compiled by kiln, and
the ops kiln lacks run in eager PyTorch between them. Tensors cross between
pieces as they are (kiln reads torch's memory in place and writes outputs
torch allocated), so nothing is copied at the seams beyond what a
non-contiguous tensor needs.
"""

import warnings

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from kiln.errors import KilnError, UnsupportedOpError
from kiln.optable import DTYPES, TABLE

_warned = set()


class _KilnSupport(OperatorSupportBase):
    """Ops kiln lowers. `refused` holds nodes whose handler declined this
    particular use (an op kiln has, with arguments it lacks)."""

    def __init__(self, refused=()):
        super().__init__()
        self.refused = set(refused)

    def is_node_supported(self, submodules, node):
        if node.op != "call_function" or node.target not in TABLE or node in self.refused:
            return False
        val = node.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        # Symbolic shapes and dtypes kiln lacks stay in eager.
        for v in vals:
            if isinstance(v, torch.Tensor):
                if v.dtype not in DTYPES or any(not isinstance(s, int) for s in v.shape):
                    return False
        return True


class _KilnPiece(torch.nn.Module):
    """One kiln-compiled partition: called with the partition's tensor inputs."""

    def __init__(self, module, runtime_positions, tuple_output):
        super().__init__()
        self.module = module
        self.runtime_positions = runtime_positions
        self.tuple_output = tuple_output

    def forward(self, *args):
        outs = self.module.run_flat([args[i] for i in self.runtime_positions])
        return tuple(outs) if self.tuple_output else outs[0]


def refused_nodes(gm):
    """Nodes kiln's op table would refuse, found by lowering node by node."""
    from kiln.analysis import per_node_support

    return {n for n, why in per_node_support(gm).items() if why}


def unsupported_ops(gm, refused=None):
    support = _KilnSupport(refused_nodes(gm) if refused is None else refused)
    return sorted({str(n.target) for n in gm.graph.nodes
                   if n.op == "call_function" and not support.is_node_supported({}, n)})


def partition(gm, constant_of=None, warn=True, what="this model", weights_bf16=False):
    """Returns (GraphModule running kiln pieces and eager ops, n_pieces).

    constant_of(node) -> tensor or None: values of placeholders that are
    parameters, embedded in the pieces as constants (so kiln packs them).
    weights_bf16: pack the pieces' linear weights as bf16 (kiln.trace)."""
    from kiln.capture import lower_graph
    from kiln.module import KilnModule, compile_graph

    refused = refused_nodes(gm)
    support = _KilnSupport(refused)
    missing = unsupported_ops(gm, refused)
    if warn and missing:
        key = tuple(missing)
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"kiln: {what} runs these ops in eager PyTorch (CPU fallback): "
                          f"{', '.join(missing)}", stacklevel=3)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    fused = partitioner.fuse_partitions(partitioner.propose_partitions())
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
                placeholders.append(("input", ph.name))
                runtime_positions.append(i)
        out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        try:
            ctx = lower_graph(sub, placeholders, flat)
            mod = KilnModule(compile_graph(ctx, weights_bf16), [placeholders[i][1] for i in runtime_positions], None, node.target)
        except (UnsupportedOpError, KilnError) as e:
            # A handler refused a particular use (a parameter kiln lacks):
            # this piece stays eager too.
            warnings.warn(f"kiln: a graph piece runs in eager PyTorch: {e}", stacklevel=3)
            continue
        setattr(fused, node.target, _KilnPiece(mod, runtime_positions, isinstance(out, (tuple, list))))
        n_pieces += 1
    fused.recompile()
    return fused, n_pieces


class PartitionedModule(torch.nn.Module):
    """What kiln.trace returns when some ops fall back to eager PyTorch."""

    def __init__(self, gm, lifted, n_pieces, out_spec, unsupported, source):
        super().__init__()
        self.gm = gm
        self._lifted = lifted  # parameters/buffers fed to the graph ahead of user inputs
        self.n_pieces = n_pieces
        self._out_spec = out_spec
        self.unsupported = unsupported
        self._source = source

    def forward(self, *args):
        from torch.utils import _pytree as pytree

        flat = pytree.tree_leaves(args)
        with torch.no_grad():
            outs = self.gm(*self._lifted, *flat)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        return pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs[0]

    def explain(self):
        lines = [f"{self._source}: {self.n_pieces} kiln pieces; eager ops between them: {', '.join(self.unsupported)}"]
        for name, mod in self.gm.named_children():
            if isinstance(mod, _KilnPiece):
                lines.append(f"[{name}]")
                lines.append(mod.module.explain())
        lines.append(str(self.gm.graph))
        return "\n".join(lines)

    def to_bytes(self):
        raise KilnError("saving a model with CPU fallback is not supported yet: "
                        f"these ops run in eager PyTorch: {', '.join(self.unsupported)}")

    def save(self, f, _extra_files=None):
        self.to_bytes()
