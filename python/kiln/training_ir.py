"""kiln.trace without torch's decomposition re-trace, where it is not needed.

torch.export.export gives the "training IR": ATen ops as the model called
them, with in-place ops (a KV cache's index_copy_, a counter's add_) and a
few composite ones (to.device). kiln.trace ran ExportedProgram.run_decompositions
on it, which functionalizes and decomposes by tracing the whole program a
second time: 2.5 s of an 8-layer Llama's 6 s compile, though nearly every op
it emits is one kiln's op table takes as it was.

functional_in_place(ep) makes the training IR what run_decompositions would
have made of it, in place, when that is a rewrite of single nodes:

- every op has an op-table handler, after these rewrites;
- an in-place op writes storage nothing else reads afterwards: every other
  reader of the written tensor's base and of every view of that base comes
  before the write (a write through a view changes its base, and a later
  reader of the base would need functionalization's scatter back). Then the
  write is its op's functional variant (add_ -> add), and the readers of
  the new value already read the write's node (torch.export tracks the
  tensor to its latest node). index_copy_ becomes index_put, as torch's
  decomposition of index_copy makes it;
- or the written tensor is a fresh buffer (new_empty, zeros, clone, ...:
  its storage is no one else's; or such a buffer's value after writes of
  it whole, fill_ and the like) written whole or through slices and
  selects of it, and read after the write only as itself, not through a
  view taken before (DeepSeek-V3 builds its keys so:
  k = kv.new_empty(...); k[..., :d].copy_(a); k[..., d:].copy_(b)). Then the write is
  its functional op on the view, scattered back view by view into the
  buffer's latest value (slice_scatter, select_scatter), and the readers
  after it read that (fresh_buffer_writes);
- a user input so written is a mutation output, first among the outputs,
  as run_decompositions lists them (USER_INPUT_MUTATION): kiln.trace then
  writes it into the caller's tensor (a KV cache in place). A parameter or
  buffer written is not rewritten (the slow path handles it);
- to.device and to.dtype_layout on the CPU are _to_copy, __and__ is
  bitwise_and (and __or__, __xor__), conv2d (1d, 3d) of a batched input
  is convolution;
- autocast is off, and no op makes a bf16 or fp16 result from operands
  of another floating dtype: the training IR is recorded above autocast,
  so under it an op holds fp32 operands and a bf16 result with none of
  autocast's casts between (decomposing re-traces and records them). A
  model in bf16 (model.to(torch.bfloat16)) is lowered as exported: lowp's
  rules read its ops as they read the decomposed ones.

Anything else leaves ep untouched and says why: kiln.trace then runs
run_decompositions as before. A lowering of the rewritten program that
fails is retried the same way (kiln/__init__.py), so this path only ever
takes programs kiln lowers.
"""

import operator

import torch
from torch.export.graph_signature import InputKind, OutputKind, OutputSpec, TensorArgument

from kiln.optable.movement import _is_view_op as _is_view

aten = torch.ops.aten


def _writes_first_argument(op):
    """Does op write its first argument in place (and nothing else)?"""
    schema = getattr(op, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    first = schema.arguments[0].alias_info
    return bool(first is not None and first.is_write
                and not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments[1:]))


def _functional(op):
    """add_.Tensor -> add.Tensor: the same overload of the op's name without
    its trailing underscore, or None."""
    name = op._overloadpacket.__name__
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(aten, name[:-1], None)
    f = getattr(packet, op._overloadname, None) if packet is not None else None
    return f if f is not None and not _writes_first_argument(f) else None


# The arguments whose dtype an in-place op's functional variant promotes
# with the written tensor's (all others: index tensors, copy_'s source,
# which copy casts; scatter's result has its input's dtype whatever it
# scatters).
_PROMOTED_ARGS = {aten.index_copy_.default: (3,), aten.copy_.default: (),
                  aten.scatter_.value: (), aten.scatter_.src: ()}


def _keeps_its_dtype(n, x):
    """Does n's functional variant give x's dtype, as the in-place op
    does? (int32_x.add_(int64_y) stays int32; add promotes to int64.) Only
    when the values it promotes with have x's dtype, or are Python numbers
    of x's kind."""
    dtype = x.meta["val"].dtype
    which = _PROMOTED_ARGS.get(n.target, range(1, len(n.args)))
    for i in which:
        a = n.args[i] if i < len(n.args) else None
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
        if isinstance(val, torch.Tensor) and val.dtype != dtype:
            return False
        if isinstance(val, float) and not dtype.is_floating_point:
            return False
        if isinstance(val, (int, float)) and not isinstance(val, bool) and dtype == torch.bool:
            return False
    return True


def _index_copy_as_index_put(n):
    """index_copy(x, dim, index, source) is x[(:,) * dim + (index,)] = source."""
    x, dim, index, source = n.args[:4]
    rank = x.meta["val"].dim()
    dim = dim % rank if rank else 0
    return aten.index_put.default, (x, [None] * dim + [index], source)


# Composite ops that are another op under another name.
_SAME_AS = {aten.__and__.Tensor: aten.bitwise_and.Tensor, aten.__or__.Tensor: aten.bitwise_or.Tensor,
            aten.__xor__.Tensor: aten.bitwise_xor.Tensor}


_CONVS = {aten.conv1d.default: 1, aten.conv2d.default: 2, aten.conv3d.default: 3}


def _conv_as_convolution(n):
    """conv1d/2d/3d of a batched input is convolution, not transposed, no
    output padding (an unbatched one, which torch's decomposition gives a
    batch dim, is left to it)."""
    k = _CONVS[n.target]
    x = n.args[0]
    if not isinstance(x, torch.fx.Node) or x.meta["val"].dim() != k + 2:
        return None

    def arg(i, name, default):
        return n.args[i] if len(n.args) > i else n.kwargs.get(name, default)

    def per_dim(i, name, default):
        v = arg(i, name, default)
        return list(v) if isinstance(v, (list, tuple)) else [v] * k

    args = (x, n.args[1], arg(2, "bias", None), per_dim(3, "stride", 1), per_dim(4, "padding", 0),
            per_dim(5, "dilation", 1), False, [0] * k, arg(6, "groups", 1))
    return aten.convolution.default, args, {}


def _to_copy_args(n):
    """to.device / to.dtype_layout on the CPU: a copy in the dtype asked."""
    if n.target is aten.to.device:
        x, device, dtype = n.args[:3]
        if torch.device(device).type != "cpu":
            return None
        return aten._to_copy.default, (x,), {"dtype": dtype}
    x = n.args[0]
    device = n.kwargs.get("device")
    if device is not None and torch.device(device).type != "cpu":
        return None
    if n.kwargs.get("layout") not in (None, torch.strided):
        return None
    return aten._to_copy.default, (x,), {"dtype": n.kwargs.get("dtype")}


# Ops whose result is storage of its own, aliased by nothing else.
_FRESH_BUFFERS = {aten.new_empty.default, aten.new_zeros.default, aten.new_ones.default,
                  aten.new_full.default, aten.empty.memory_format, aten.zeros.default,
                  aten.ones.default, aten.full.default, aten.empty_like.default,
                  aten.zeros_like.default, aten.ones_like.default, aten.full_like.default,
                  aten.clone.default}
# Views a write into a fresh buffer may go through, and the scatter that
# puts the written view back (the same arguments after the tensor); an
# alias (torch.export's slice of a whole dim) is the whole of its input.
_SCATTER_OF = {aten.slice.Tensor: aten.slice_scatter.default,
               aten.select.int: aten.select_scatter.default,
               aten.alias.default: None}


def _fresh_buffer_write(n, x, base, root, aliases, order, table):
    """For an in-place write n into x whose storage (base: the buffer's
    value n writes, root itself or an earlier write of it whole) is read
    after it: (base, views) when the write can be a functional op
    scattered back into the buffer (module docstring: x is base, views (),
    or x is slices and selects of base, views those from base's down to
    x), else None."""
    if root.op != "call_function" or root.target not in _FRESH_BUFFERS:
        return None
    views = []
    v = x
    while v is not base:
        if not (v.op == "call_function" and v.target in _SCATTER_OF and len(views) < 8
                and _SCATTER_OF[v.target] in (None, *table)):
            return None
        views.append(v)
        v = v.args[0]
    # Only the buffer itself, or views made after the write (of it), may be
    # read after the write: a view made before would hold the old value.
    for a in aliases:
        if a is not base and order[a] < order[n] and any(u is not n and order[u] > order[n] for u in a.users):
            return None
    # The views were made after the buffer's previous write (then they read
    # its result): the check above on that write holds it too, since such
    # a view read by this write would be an older alias read after it.
    return base, tuple(reversed(views))


def _plan(ep, table):
    """[(node, new target, new args or None, new kwargs or None)], the
    writes into fresh buffers to scatter back [(write node, buffer, the
    views from the buffer down to what it writes)] and the mutated user inputs [(placeholder, final value
    node)], or a string saying why ep is not a rewrite of single nodes
    away from what kiln lowers."""
    sig = ep.graph_signature
    phs = [n for n in ep.graph.nodes if n.op == "placeholder"]
    kind = {n: spec.kind for n, spec in zip(phs, sig.input_specs)}
    if any(spec.kind != OutputKind.USER_OUTPUT for spec in sig.output_specs):
        return "it updates state"
    order = {n: i for i, n in enumerate(ep.graph.nodes)}
    root = {}  # a written value -> the placeholder it is the new value of
    latest = {}  # placeholder -> its latest value
    whole = {}  # a write of a whole tensor -> the storage's first value (torch.export's next reads read it)
    edits, scatters = [], []
    for n in ep.graph.nodes:
        val = n.meta.get("val")
        if n.op in ("placeholder", "output", "get_attr"):
            continue
        if n.op != "call_function":
            return f"a {n.op} node"
        if _lowered_by_autocast(n):
            return f"{n.target} makes a {val.dtype} result of {_operand_dtypes(n)} operands (autocast)"
        if n.target is operator.getitem:
            continue
        if _writes_first_argument(n.target):
            x = n.args[0] if n.args else None
            if not isinstance(x, torch.fx.Node):
                return f"{n.target} of a non-tensor"
            base = x
            while base.op == "call_function" and _is_view(base.target) and isinstance(base.args[0], torch.fx.Node):
                base = base.args[0]
            if base.op == "placeholder" and (base is not x or kind.get(x) != InputKind.USER_INPUT):
                return f"{n.target} writes an input through a view, or a parameter"
            # No other reader of the written storage (its base, or any view
            # of it) after the write: the write's node is then the only way
            # to its new value, and its functional op computes that value.
            aliases, todo = set(), [base]
            while todo:
                a = todo.pop()
                if a not in aliases:
                    aliases.add(a)
                    # views of it, and the pieces of a view that is a list (split's)
                    todo.extend(u for u in a.users if u.op == "call_function"
                                and (_is_view(u.target) or u.target is operator.getitem))
            scatter = None
            if any(u is not n and order[u] > order[n] for a in aliases for u in a.users):
                scatter = _fresh_buffer_write(n, x, base, whole.get(base, base), aliases, order, table)
                if scatter is None:
                    return f"{n.target}'s storage is read after it"
            if not _keeps_its_dtype(n, x):
                return f"{n.target} writes a {x.meta['val'].dtype} tensor from values of another dtype"
            if n.target is aten.index_copy_.default:
                target, args = _index_copy_as_index_put(n)
            else:
                target, args = _functional(n.target), None
            if target is None or target not in table:
                return f"{n.target} has no functional op kiln lowers"
            edits.append((n, target, args, None))
            if x is base:
                whole[n] = whole.get(base, base)
            if scatter is not None:
                scatters.append((n, *scatter))
                continue
            base = root.get(x, x if x.op == "placeholder" else None)
            if base is not None:
                root[n] = base
                latest[base] = n
            continue
        if n.target in _SAME_AS and _SAME_AS[n.target] in table:
            edits.append((n, _SAME_AS[n.target], None, None))
            continue
        if n.target in _CONVS:
            new = _conv_as_convolution(n)
            if new is None:
                return f"{n.target} of an unbatched input"
            edits.append((n, *new))
            continue
        if n.target in (aten.to.device, aten.to.dtype_layout):
            new = _to_copy_args(n)
            if new is None:
                return f"{n.target} off the CPU"
            edits.append((n, *new))
            continue
        if n.target not in table:
            return f"{n.target} is not in kiln's op table"
    return edits, scatters, [(p, latest[p]) for p in phs if p in latest]


_LOW = (torch.bfloat16, torch.float16)


def _operand_dtypes(n):
    return [a.meta["val"].dtype for a in n.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)]


def _lowered_by_autocast(n):
    """An op whose bf16 / fp16 result neither a low-precision operand nor
    a dtype argument explains: autocast's work (a program exported under an
    autocast the rest of the check does not see), whose casts are not in
    the training IR. Decomposing records them."""
    val = n.meta.get("val")
    if not (isinstance(val, torch.Tensor) and val.dtype in _LOW) or not isinstance(n.target, torch._ops.OpOverload):
        return False
    operands = _operand_dtypes(n)
    if not operands or any(a.name == "dtype" for a in n.target._schema.arguments):
        return False
    # (type_as(x, y) of an fp32 x and a bf16 y: y explains it.)
    return val.dtype not in operands


def _fresh_buffer_writes(graph, scatters, order):
    """Each write into a fresh buffer (now its functional op, the new value
    of the view it wrote) scattered back into the buffer's latest value,
    view by view up to the buffer; the readers of that value after the
    write read the new one (module docstring). In graph order: a write's
    views were made after the buffer's previous write (_plan checks), so
    by then they read its result."""
    current = {}  # buffer -> its latest value
    made = set()  # the scatters made here
    for n, base, views in sorted(scatters, key=lambda s: order[s[0]]):
        prev = current.get(base, base)
        new = n
        for v in reversed(views):  # views[0] reads prev
            parent = v.args[0]
            if _SCATTER_OF[v.target] is None:  # an alias: its new value is its input's
                continue
            with graph.inserting_after(new):
                new = graph.call_function(_SCATTER_OF[v.target], (parent, new, *v.args[1:]), dict(v.kwargs))
            new.meta.update({k: m for k, m in n.meta.items() if k != "val"})
            new.meta["val"] = parent.meta["val"]
            made.add(new)
        for u in list(prev.users):
            if u is not n and u not in made and order.get(u, -1) > order[n]:
                u.replace_input_with(prev, new)
        current[base] = new


def functional_in_place(ep, table):
    """Rewrites ep (torch.export's training IR) in place into the program
    run_decompositions would give kiln, when single-node rewrites do it
    (module docstring); returns None when it did, else why not (ep is then
    untouched)."""
    if any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda")):
        # The training IR is recorded above autocast: its ops hold the
        # fp32 operands and bf16 results with no cast between them, and
        # only run_decompositions' re-trace (under the same autocast)
        # records the casts.
        return "torch.autocast is on (torch.export records its casts only when decomposing)"
    planned = _plan(ep, table)
    if isinstance(planned, str):
        return planned
    edits, scatters, mutated = planned
    order = {n: i for i, n in enumerate(ep.graph.nodes)}
    for n, target, args, kwargs in edits:
        n.target = target
        if args is not None:
            n.args = tuple(args)
        if kwargs is not None:
            n.kwargs = kwargs
    _fresh_buffer_writes(ep.graph, scatters, order)
    if mutated:
        out = next(n for n in ep.graph.nodes if n.op == "output")
        flat = list(out.args[0])
        out.args = (tuple([value for _, value in mutated] + flat),)
        sig = ep.graph_signature
        specs = [OutputSpec(kind=OutputKind.USER_INPUT_MUTATION, arg=TensorArgument(name=value.name),
                            target=p.name) for p, value in mutated]
        sig.output_specs[:0] = specs
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return None
