"""Capture: a PyTorch program into kiln IR.

``torch.export`` captures the model, the default Core ATen decompositions
lower it (keeping scaled_dot_product_attention whole so kiln can run it as
one fused kernel), and every node goes through the op table into a kiln
graph built in C. Parameters and buffers become constants of the graph.
The same lowering serves torch.compile: it takes any FX graph of ATen ops.
"""

import functools
import os
import re
import sys
import warnings

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false
from torch.export.graph_signature import InputKind, OutputKind

from kiln import _C
from kiln.errors import KilnError, Unsupported, UnsupportedOpError, lowering_failure
from kiln.optable import DTYPES, OPS, TABLE, TORCH_DTYPES, keep_whole_targets
from kiln import fastpath
from kiln.complex_ops import lower_complex
from kiln.guards import hold_in_ranges, of_exported as exported_guards
from kiln.random_ops import RNG_SEED_INPUT
from kiln import lowp
from kiln import symbolic
from kiln import op_guards
from kiln import training_ir

aten = torch.ops.aten


def _linspace_as_eager(default):
    """torch's linspace decomposition, except for integer dtypes: there
    eager's kernel casts start and end to the dtype first and steps in
    double, truncating each value, while torch's decomposition steps from
    the uncast start in float32 (linspace(4.3, 0, 50, dtype=int64) differs in
    7 places). This form computes as eager does; its float64 values are a
    dtype kiln does not hold, so those ops fall back to eager."""

    def decompose(start, end, steps, *, dtype=None, layout=torch.strided, device=None, pin_memory=False):
        kw = dict(layout=layout, device=device, pin_memory=pin_memory)
        if dtype is None or dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
            return default(start, end, steps, dtype=dtype, **kw)

        def cast(v):
            return v.to(dtype).to(torch.float64) if isinstance(v, torch.Tensor) else float(int(v))

        return default(cast(start), cast(end), steps, dtype=torch.float64, **kw).to(dtype)

    return decompose


def decomposition_table():
    """A copy of kiln's decomposition table (built once per process: torch
    builds its default table from the registry in about 0.2 s, once per
    torch.compile graph before)."""
    return dict(_decomposition_table())


def _hardtanh_backward_as_eager(grad_output, self, min_val, max_val):
    """hardtanh's gradient as eager's CPU kernel computes it: its vectorized
    loop (all of a contiguous tensor but the last few elements) keeps the
    gradient where min < x < max and gives 0 elsewhere, NaN x included;
    torch's decomposition zeroes it only where x <= min or x >= max, so a
    NaN x passed a NaN gradient on (fuzz seed 20093 graph 3521: a NaN
    input outside the slice the loss reads, gradient 0 in eager)."""
    return torch.where((self > min_val) & (self < max_val), grad_output, 0.0)


def _roll_as_slices(original):
    """torch.roll as the concatenation of two slices per rolled dim (kiln's
    strided copies), where torch's decomposition gathers through a computed
    index: a roll of (8, 128, 768) along its last dim took 0.88 ms in
    kiln's gather against eager's 0.04 (Swin's shifted windows roll so).
    Sizes that are symbols keep torch's decomposition."""

    def decompose(self, shifts, dims=()):
        shifts, dims = list(shifts), list(dims)
        if not dims or len(shifts) != len(dims) or not all(isinstance(d, int) for d in self.shape):
            return original(self, shifts, dims)
        x = self
        for s, d in zip(shifts, dims):
            n = x.shape[d]
            s = s % n if n else 0
            if s:
                x = torch.cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)
        return x.clone() if x is self else x

    return decompose


@functools.lru_cache(maxsize=None)
def _decomposition_table():
    table = torch.export.default_decompositions()
    # Ops whose handlers lower them whole (registered keep_whole).
    for op in keep_whole_targets():
        table.pop(op, None)
    for op in (aten.linspace.default, aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar,
               aten.linspace.Scalar_Tensor):
        if op in table:
            table[op] = _linspace_as_eager(table[op])
    table[aten._transformer_encoder_layer_fwd.default] = fastpath.transformer_encoder_layer_fwd
    table[aten.hardtanh_backward.default] = _hardtanh_backward_as_eager
    if aten.roll.default in table:
        table[aten.roll.default] = _roll_as_slices(table[aten.roll.default])
    # Every attention variant stays whole: decomposing the fused CPU flash
    # forward while its backward stays fused mismatches what forward saves
    # for backward, and training gets wrong gradients (torch 2.13).
    for op in list(table):
        if "scaled_dot_product" in str(op):
            table.pop(op)
    return table


def export_program(model, args, kwargs=None, dynamic_shapes=None, fast=False):
    """torch.export + Core ATen decomposition, with kiln's exceptions.
    fast: the program as torch.export gives it where single-node rewrites
    make it what kiln lowers (kiln/training_ir.py; ep.kiln_training_ir is
    then True), saving the decomposition's second trace."""
    deferred = False
    try:
        ep = torch.export.export(model, args, kwargs=kwargs or {}, dynamic_shapes=dynamic_shapes)
    except torch._dynamo.exc.UserError as e:
        ep, deferred = _export_past_unproven_guards(model, args, kwargs, dynamic_shapes, e), True
    except RuntimeError as e:
        _raise_unflattenable_output(e)
        raise
    if fast and not deferred:
        why = training_ir.functional_in_place(ep, TABLE)
        if why is None:
            if log_enabled():
                print("kiln: torch.export's program is lowered as exported (single-node rewrites, no "
                      "decomposition re-trace)", file=sys.stderr)
            ep.kiln_training_ir = True
            lower_complex(ep.graph_module)
            return ep
        if log_enabled():
            print(f"kiln: torch.export's program is decomposed: {why}", file=sys.stderr)
    with warnings.catch_warnings():
        # torch 2.13's run_decompositions deep-copies pytree specs and trips
        # its own LeafSpec deprecation warning on every call: not the user's.
        warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
        ep = ep.run_decompositions(decomposition_table())
    if deferred:  # decomposing traced the asserts again
        _drop_proven_asserts(ep)
    lower_complex(ep.graph_module)  # complex values (rotary embeddings) as pairs of reals
    return ep


def _raise_unflattenable_output(error):
    """A model that returns an object torch.export cannot flatten into
    tensors fails deep in torch ("Found <class ...> in output, which is not
    a known type"); a Hugging Face decoder with use_cache on returns its
    DynamicCache so. Says what it is and what to pass instead."""
    m = re.search(r"Found <class '([\w.]+)'> in output, which is not a known type", str(error))
    if not m:
        return
    cls = m.group(1)
    if cls.startswith("transformers.cache_utils."):
        raise KilnError(f"the model returns transformers' {cls.rsplit('.', 1)[1]} (its keys and values: use_cache is "
                        "on), which a compiled module does not return: trace it with use_cache off "
                        "(example_kwargs={'use_cache': False}, or model.config.use_cache = False); to generate "
                        "with the cache, kiln.llm.compile(model, max_length=...)") from None
    raise KilnError(f"the model returns a {cls}, which torch.export cannot flatten into tensors: return tensors, "
                    "or register the class with torch.utils._pytree.register_pytree_node") from None


# The most points of the Dims' ranges a guard torch could not prove is
# evaluated at (_export_past_unproven_guards): milliseconds.
_PROOF_POINTS = 1 << 16


def _export_past_unproven_guards(model, args, kwargs, dynamic_shapes, error):
    """torch.export of a program it refused over the Dims' ranges (a
    constraint violation) where each guard it raised holds at every size of
    the ranges: torch's solver does not simplify some. Llama 4's MoE layer
    under a Dim tokens in [1, 24] gives tokens*min(64, 64*tokens) ==
    64*tokens (transformers' reshape of the experts' output), true for every
    tokens >= 1. Exported again with the guards as runtime asserts, each
    assert on input sizes is evaluated at every point of the ranges (at most
    _PROOF_POINTS of them): where all hold they are dropped, as they can
    never fail; else torch's error stands, naming the Dim the program does
    not hold for."""
    from torch._dynamo.exc import UserErrorType

    if getattr(error, "error_type", None) is not UserErrorType.CONSTRAINT_VIOLATION or not dynamic_shapes:
        raise error
    try:
        ep = torch.export.export(model, args, kwargs=kwargs or {}, dynamic_shapes=dynamic_shapes,
                                 prefer_deferred_runtime_asserts_over_guards=True)
    except Exception:  # noqa: BLE001 -- any failure here: torch's first error is the one to show
        raise error from None
    shown = _drop_proven_asserts(ep)
    if shown is None:
        raise error
    if log_enabled():
        print(f"kiln: torch.export could not prove {shown} over the Dims' ranges; it holds at every size "
              "there (each checked): exported without it", file=sys.stderr)
    return ep


def _drop_proven_asserts(ep):
    """Removes ep's runtime asserts on input sizes, in place, when each
    holds at every point of the ranges (guards.hold_in_ranges): their text,
    or None (nothing removed) when there are none or one may fail."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    asserts = []
    for n in ep.graph.find_nodes(op="call_function", target=aten._assert_scalar.default):
        cond = n.args[0].meta.get("val") if isinstance(n.args[0], torch.fx.Node) else None
        expr = getattr(getattr(cond, "node", None), "expr", None)
        if expr is not None and not free_unbacked_symbols(expr):  # on input sizes, not on data
            asserts.append((n, expr))
    if not asserts or not hold_in_ranges([e for _, e in asserts], ep.range_constraints, _PROOF_POINTS):
        return None
    for n, _ in asserts:
        ep.graph.erase_node(n)
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    return "; ".join(sorted({str(e) for _, e in asserts}))


_TORCH_DIR = os.path.dirname(torch.__file__)


def source_location(node):
    """'file.py:12 (code)' for the user's frame that produced an FX node.

    The innermost frame outside torch's own package is the user's line (the
    innermost frame overall is usually inside torch.nn)."""
    return _source_location(node.meta.get("stack_trace") or "")


@functools.lru_cache(maxsize=4096)
def _source_location(trace):
    # Nodes of one source line share their trace: parsed once.
    lines = trace.strip().splitlines()
    frames = []
    for i, ln in enumerate(lines):
        ln = ln.strip()
        if ln.startswith("File "):
            parts = ln.split(",")
            path = parts[0][len("File "):].strip().strip('"')
            line = parts[1].strip().replace("line ", "") if len(parts) > 1 else "?"
            code = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].strip().startswith("File ") else ""
            frames.append((path, line, code))
    if not frames:
        return ""
    user = [f for f in frames if not f[0].startswith(_TORCH_DIR)]
    path, line, code = (user or frames)[-1]
    return f"{path}:{line} ({code})" if code else f"{path}:{line}"


def module_path(node):
    """'encoder.layers.0.linear1 (Linear)' for the innermost nn.Module."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, cls = list(stack.values())[-1]
    name = getattr(cls, "__name__", str(cls).rsplit(".", 1)[-1].strip("'>"))
    path = path.replace("L['self'].", "").replace("L['self']", "")
    return f"{path} ({name})" if path else name


def describe_node(node):
    """The op, the module and the source line an FX node came from."""
    where, mod = source_location(node), module_path(node)
    text = str(node.target)
    if mod:
        text += f" in {mod}"
    if where:
        text += f" at {where}"
    return text


class _Poison:
    """A value kiln cannot produce; using it raises with the reason."""

    def __init__(self, node, why):
        self.node, self.why = node, why


# op name -> ({field: (index, count)}, {float field: (index, count)}, n, n_float)
_LAYOUTS = {}
for _op, _fields in _C.PARAMS.items():
    _ints = {f: (i, c) for f, i, c, fl in _fields if not fl}
    _floats = {f: (i, c) for f, i, c, fl in _fields if fl}
    _LAYOUTS[_op] = (_ints, _floats, max((i + c for i, c in _ints.values()), default=0),
                     max((i + c for i, c in _floats.values()), default=0))


def _named_params(op, fields):
    """(params, fparams) lists of op's layouts with the named fields set."""
    ints, floats, n, nf = _LAYOUTS[op]
    params, fparams = [0] * n, [0.0] * nf
    for name, v in fields.items():
        where, out = (ints, params) if name in ints else (floats, fparams) if name in floats else (None, None)
        if where is None:
            raise TypeError(f"kiln op {op} has no parameter {name!r} (it has {', '.join(list(ints) + list(floats)) or 'none'})")
        i, c = where[name]
        if c == 1:
            out[i] = v
        else:
            v = list(v)
            if len(v) > c:
                raise ValueError(f"kiln op {op}: {name} takes at most {c} values, got {len(v)}")
            out[i:i + len(v)] = v
    return params, fparams


class LoweringContext:
    """What op-table handlers see: the graph being built and value helpers."""

    def __init__(self):
        self.graph = _C.Graph()
        self.symbols = symbolic.Symbols(self.graph)
        self.env = {}  # fx node -> kiln value id | python value | size | tuple
        self.kept = []  # tensors whose bytes the graph borrows (frozen_constant)
        self._lent = []  # tensors whose bytes the graph reads until compiled (constant)
        self.constants = set()  # value ids of constants (constant, frozen_constant)
        self._meta = {}  # kiln value id -> (torch dtype, shape)
        self._scalars = {}
        self._seed, self._streams = None, 0  # random_seed's
        self._input_names = {}  # graph input value id -> its name
        # Inputs whose memory layout eager's answer depends on (as_strided
        # reads storage), name -> "storage" or the example's stride order
        # and density (layout_read).
        self.layout_inputs = {}

    # value bookkeeping ------------------------------------------------------
    def _record(self, vid):
        dtype, shape = self.graph.value(vid)
        self._meta[vid] = (TORCH_DTYPES[dtype], tuple(symbolic.wrap(self.graph, d) for d in shape))
        return vid

    def value(self, arg):
        v = self.env[arg] if isinstance(arg, torch.fx.Node) else arg
        if isinstance(v, _Poison):
            raise UnsupportedOpError(str(v.node.target), source_location(v.node), v.why)
        if not isinstance(v, int) or isinstance(v, bool):
            raise Unsupported(f"a non-tensor argument {v!r} where a tensor was expected")
        return v

    def shape(self, vid):
        return self._meta[vid][1]

    def dtype(self, vid):
        return self._meta[vid][0]

    def unsupported_value(self, node, why):
        return _Poison(node, why)

    # building -----------------------------------------------------------------
    def input(self, name, tensor_meta):
        if tensor_meta.dtype not in DTYPES:
            raise KilnError(f"input {name!r} has dtype {tensor_meta.dtype}, which kiln does not support")
        try:
            shape = [symbolic.encode(symbolic.size(s)) for s in tensor_meta.shape]
        except Unsupported as e:
            raise KilnError(f"input {name!r} has a shape kiln cannot hold {tuple(tensor_meta.shape)}: {e}") from None
        vid = self._record(self.graph.add_input(name, DTYPES[tensor_meta.dtype], shape))
        self._input_names[vid] = name
        return vid

    def layout_read(self, node, storage):
        """Placeholder node's layout decides memory an as_strided reads
        (kiln/optable/movement.py): its own storage (storage True), else the
        layout eager gives a result computed from it. If it is a graph
        input, KilnModule refuses a call where it is not laid out as at
        trace time: row-major from offset 0 ("storage"), or with its
        strides in the example's order and as dense or not
        ({"order": dims from the largest stride, "dense": ...}): eager lays
        out a result computed from it by those two alone (an elementwise
        op follows the stride order; empty_like, a dense input's strides,
        else row-major), so the result is as row-major as it was traced."""
        vid = self.env.get(node)
        name = self._input_names.get(vid) if isinstance(vid, int) and not isinstance(vid, bool) else None
        if name is None or self.layout_inputs.get(name) == "storage":
            return
        order = None if storage else _layout_order(node.meta.get("val"))
        self.layout_inputs[name] = order or "storage"

    def size_input(self, name, value):
        """A size passed per call (Dynamo's SymInt arguments): a symbolic one
        becomes an input whose only dimension is that size (its bytes are
        never read), so the model binds the size from it; a concrete one is
        a number."""
        d = symbolic.size(value)
        if not isinstance(d, symbolic.SymDim):
            return d
        self._record(self.graph.add_input(name, DTYPES[torch.int8], [symbolic.encode(d)]))
        return d

    def random_seed(self):
        """(the graph's seed input, a new stream number) for a random node:
        the input (kiln/random_ops.py) is made at the first one."""
        if self._seed is None:
            self._seed = self._record(self.graph.add_input(RNG_SEED_INPUT, DTYPES[torch.int64], []))
        self._streams += 1
        return self._seed, self._streams - 1

    def constant(self, tensor, name=None):
        t = tensor.detach()
        if t.dtype not in DTYPES:
            raise KilnError(f"constant {name or ''} has dtype {t.dtype}, which kiln does not support")
        t = t.contiguous()
        # Lent, not copied: compiling packs most weights into new memory
        # anyway, and copies what it still reads as it is (kiln_graph_own_lent);
        # this context keeps t alive until then (compile_graph takes it).
        self._lent.append(t)
        vid = self._record(self.graph.add_constant(
            name, DTYPES[t.dtype], list(t.shape), t.data_ptr(), t.numel() * t.element_size(), None, True))
        self.constants.add(vid)
        return vid

    def frozen_constant(self, tensor, name=None):
        """A frozen parameter (kiln/dynamo.py): its bytes are borrowed, not
        copied, and keyed by the tensor's identity and version, so every
        graph compiled from this parameter shares one packed form of it.
        Whoever runs the graph keeps `self.kept` alive with it."""
        t = tensor.detach()
        if t.dtype not in DTYPES or not t.is_contiguous():
            return self.constant(t, name)
        key = (f"torch:{id(tensor)}:{tensor._version}:{t.data_ptr()}:{t.dtype}:{tuple(t.shape)}")
        self.kept.append(tensor)
        vid = self._record(self.graph.add_constant(
            name, DTYPES[t.dtype], list(t.shape), t.data_ptr(), t.numel() * t.element_size(), key))
        self.constants.add(vid)
        return vid

    def quant_constant(self, q, scales, zeros, group, name=None):
        """A float32 constant held as a checkpoint's integers: q, scales and
        zeros (-1: none) are constants' value ids (kiln_graph_add_constant_quant;
        KilnError when they are not such constants)."""
        return self._record(self.graph.add_quant_constant(name, q, scales, zeros, int(group)))

    def scalar(self, x, dtype):
        key = (repr(x), dtype)  # repr keeps -0.0, nan and inf distinct
        if key not in self._scalars:
            self._scalars[key] = self.constant(torch.tensor(x, dtype=dtype))
        return self._scalars[key]

    def node(self, op, inputs, origin=None, **fields):
        """Adds a kiln node of op (a name of _C.OPS) on inputs (value ids, -1
        for an absent optional one); its parameters by name (lower case, as
        _C.PARAMS lists them for op: stride_h=2, dims=[...]), each a size
        (int or SymDim) or float, or a sequence for a field of several."""
        params, fparams = _named_params(op, fields)
        params = [symbolic.encode(p) for p in params]
        try:
            return self._record(self.graph.add_node(OPS[op], list(inputs), params, list(fparams), origin))
        except KilnError as e:
            if symbolic.EXAMPLE_MISMATCH in str(e):
                # Sizes the probes derived wrong at the example (kiln_shape_infer_sym.c):
                # the op runs in eager; no symbols are taken as equal for it.
                raise Unsupported(str(e)) from None
            self.symbols.unify_after_failure(op, [self.shape(i) for i in inputs if i >= 0])
            raise

    def origin(self, node):
        return describe_node(node)


def find_unsupported(gm):
    """[(op name, source location)] for call_function nodes the table lacks."""
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target not in TABLE:
            out.append((str(n.target), source_location(n)))
    return out


def _raise_unsupported(missing):
    op, where = missing[0]
    err = UnsupportedOpError(op, where)
    if len(missing) > 1:
        others = sorted({m[0] for m in missing[1:]} - {op})
        if others:
            err.args = (err.args[0] + f" (also unsupported: {', '.join(others)})",)
    raise err


def graph_attribute(ctx, gm, n):
    """The value of a get_attr node: a tensor the graph module holds.

    Dynamo lifts a tensor a model makes from Python data inside forward
    (torch.tensor([]) in transformers' DynamicCache, which starts each
    layer's keys and values empty) into an attribute of the graph module,
    read by get_attr and copied by lift_fresh_copy. It is a constant of the
    kiln graph; one kiln cannot hold (its dtype) poisons what reads it."""
    obj = gm
    for part in str(n.target).split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, torch.Tensor):
        return obj
    try:
        return ctx.constant(obj, str(n.target))
    except KilnError as e:
        return ctx.unsupported_value(n, str(e))


def _layout_order(t):
    """The example tensor t's layout as layout_read records it, or None
    where its strides have no hint (then the input must be row-major)."""
    def hint(v):
        return v if isinstance(v, int) else getattr(getattr(v, "node", None), "hint", None)

    if not isinstance(t, torch.Tensor):
        return None
    shape, strides = [hint(d) for d in t.shape], [hint(s) for s in t.stride()]
    if None in shape or None in strides:
        return None
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
    dense = is_non_overlapping_and_dense_or_false(torch.empty_strided(shape, strides, device="meta"))
    return {"order": order, "dense": bool(dense)}


def lower_graph(gm, placeholders, outputs, ranges=None, overrides=None, guards=(), guards_checked=False,
                aliases=None):
    """Builds a kiln graph from an FX graph of ATen ops.

    placeholders: for each placeholder node, in order, either ("input", name)
    or ("constant", tensor) or ("python", value), or ("custom", fn): fn(ctx, node)
    gives the node's value (kiln/cache_append.py's cache inputs).
    outputs: the FX nodes (or values) to return, flat; or functions of the
    lowering context giving a value id (a value no FX node has).
    overrides: {FX node: fn(ctx)} lowered by fn instead of the op table.
    ranges: an ExportedProgram's range_constraints (the sizes it is valid for).
    guards: its ShapeEnv's guards (kiln.guards.of_exported): put in the graph
    once the inputs are, before any node, so the probes the shape rules run at
    satisfy them (kiln_sym_probes_fit). guards_checked: torch checks them
    before every call (Dynamo's): one kiln cannot express is left out.
    aliases: symbols taken as others from the start (symbolic.lowering).
    Returns the LoweringContext (its .graph is ready to compile).
    """
    missing = find_unsupported(gm)
    if missing:
        _raise_unsupported(missing)
    return symbolic.lowering(LoweringContext, lambda ctx: _lower_graph_into(ctx, gm, placeholders, outputs,
                                                                               overrides or {}, guards,
                                                                               guards_checked),
                             ranges, aliases)


def _lower_graph_into(ctx, gm, placeholders, outputs, overrides, guards, guards_checked):
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for n, (kind, what) in zip(phs, placeholders):
        if kind == "input" and isinstance(n.meta.get("val"), (torch.SymInt, int)):
            ctx.env[n] = ctx.size_input(what, n.meta["val"])
        elif kind == "input":
            ctx.env[n] = ctx.input(what, n.meta["val"])
        elif kind == "constant":
            ctx.env[n] = ctx.constant(what, n.name)
        elif kind == "frozen":
            ctx.env[n] = ctx.frozen_constant(what, n.name)
        elif kind == "custom":
            ctx.env[n] = what(ctx, n)
        elif isinstance(what, torch.SymInt):
            ctx.env[n] = symbolic.size(what)  # a size Dynamo passes as an argument
        else:
            ctx.env[n] = what
    ctx.returned = lowp.returned_values(outputs)
    guards = list(guards) + op_guards.of_program(gm)
    if guards:
        # A view to (s0*s1)//3 rows holds only where 3 divides s0*s1: the
        # probes must be such sizes, or its rule fails there (fuzzer seed
        # 9494, graph 1028).
        symbolic.add_guards(ctx, guards, strict=not guards_checked)
        ctx.graph.sym_fit_probes()
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            ctx.env[n] = graph_attribute(ctx, gm, n)
            continue
        if n.op != "call_function":
            continue
        try:
            if n in overrides:
                ctx.env[n] = overrides[n](ctx)
                continue
            ctx.env[n] = lowp.lower_node(ctx, n, TABLE[n.target])
            symbolic.check_at_example(ctx, n, ctx.env[n])
        except Unsupported as e:
            raise UnsupportedOpError(str(n.target), source_location(n), str(e)) from None
        except UnsupportedOpError:
            raise
        except KilnError as e:
            where = source_location(n)
            raise KilnError(f"while lowering {n.target}{' at ' + where if where else ''}: {e}") from None
        except symbolic.Unify:
            raise  # not a failure: the lowering starts over with two symbols as one
        except Exception as e:
            raise lowering_failure(str(n.target), source_location(n), e) from e
    out_ids = []
    for o in outputs:
        if callable(o) and not isinstance(o, torch.fx.Node):
            out_ids.append(o(ctx))
            continue
        if not isinstance(o, torch.fx.Node):
            raise KilnError(f"the model returns a non-tensor value {o!r}; kiln returns tensors only")
        out_ids.append(ctx.value(o))
    ctx.graph.set_outputs(out_ids)
    return ctx


def lower_exported(ep, extra_outputs=(), input_writes=False):
    """Lowers an ExportedProgram; returns (ctx, input names, out_spec).
    extra_outputs: FX nodes also made graph outputs, after the program's own
    (kiln.compare reads every intermediate so).
    input_writes: the program may update its inputs in place (a KV cache
    passed in, written with index_copy_): each new value is a leading graph
    output, and ctx.input_writes lists (input position, in place) for them
    (input_writes_of)."""
    sig = ep.graph_signature
    state = ep.state_dict
    consts = getattr(ep, "constants", {}) or {}
    placeholders, names, python = [], [], []
    phs = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user = 0  # the position among the call's flat arguments
    for spec, n in zip(sig.input_specs, phs):
        if spec.kind == InputKind.USER_INPUT:
            if isinstance(n.meta.get("val"), torch.Tensor):
                placeholders.append(("input", spec.arg.name))
                names.append(spec.arg.name)
            else:
                value = getattr(spec.arg, "value", n.meta.get("val"))
                placeholders.append(("python", value))
                python.append((user, spec.arg.name, value))
            user += 1
        elif spec.kind == InputKind.TOKEN:
            # Effect tokens order side effects (prints, in-place ops on
            # globals): nothing kiln can compile ahead of time.
            raise UnsupportedOpError("side effects (an effect token)", "",
                                     "the exported program orders side-effecting ops")
        else:
            t = state.get(spec.target) if spec.target in state else consts.get(spec.target)
            if t is None:
                raise KilnError(f"cannot find the value of {spec.kind.name.lower()} {spec.target}")
            # A bf16 model's matrices are borrowed for good, not copied: its
            # linear layers read their weights where the model keeps them
            # (kiln_hal_weights_t.bf16_in_place), so a bf16 LLM is not held
            # twice; the module keeps them alive (ctx.kept).
            placeholders.append(("frozen" if t.dtype == torch.bfloat16 and t.dim() == 2 else "constant", t))
    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    flat_out = list(out_node.args[0])
    for spec in sig.output_specs:
        if spec.kind != OutputKind.USER_OUTPUT and not (input_writes and spec.kind == OutputKind.USER_INPUT_MUTATION):
            raise KilnError(f"the model mutates state ({spec.kind.name.lower()} {spec.target}); "
                            "kiln.trace compiles inference graphs: call model.eval() first")
    ctx = lower_graph(ep.graph_module, placeholders, flat_out + list(extra_outputs), ep.range_constraints,
                      guards=exported_guards(ep))
    ctx.input_writes = input_writes_of(ep, flat_out) if input_writes else []
    # Constant arguments a call may repeat (KilnModule's python_inputs):
    # the values a module can check and save.
    ctx.python_inputs = [p for p in python if type(p[2]) in (bool, int, float, str, type(None))]
    return ctx, names, ep.call_spec.out_spec


def input_writes_of(ep, flat_out):
    """[(user input position, in place)] for the program's leading outputs
    that are new values of its inputs. In place: the new value may be
    written straight into the input's memory, because it has the input's
    dtype and shape and every other reader of the input is computed before
    it (an ancestor of it), so the write cannot change what they read (a
    static KV cache: attention reads the new value). Otherwise the caller
    copies it in after the call."""
    sig = ep.graph_signature
    phs = [n for n in ep.graph.nodes if n.op == "placeholder"]
    user = [n for spec, n in zip(sig.input_specs, phs)
            if spec.kind == InputKind.USER_INPUT and isinstance(n.meta.get("val"), torch.Tensor)]
    pos = {n.name: i for i, n in enumerate(user)}
    writes = []
    for spec, src in zip(sig.output_specs, flat_out):
        if spec.kind != OutputKind.USER_INPUT_MUTATION:
            continue
        writes.append((pos[spec.target], writable_in_place(user[pos[spec.target]], src)))
    return writes


def writable_in_place(dst, src, writer=None):
    """Whether FX value src, the new value of graph input dst, may be
    written straight into dst's memory: it has dst's dtype and shape (dst
    dense), and every other reader of dst (writer excepted: the copy_ that
    writes it back, where the graph has one) is an ancestor of src, so it
    runs before the write and reads the old value."""
    before, todo = set(), [src]
    while todo:
        a = todo.pop()
        if a not in before:
            before.add(a)
            todo.extend(a.all_input_nodes)
    dv, sv = dst.meta.get("val"), src.meta.get("val")
    same = (isinstance(dv, torch.Tensor) and isinstance(sv, torch.Tensor) and dv.dtype == sv.dtype
            and len(dv.shape) == len(sv.shape) and all(str(a) == str(b) for a, b in zip(dv.shape, sv.shape))
            and dv.is_contiguous())
    return bool(same and all(u is writer or u in before for u in dst.users))


def log_enabled():
    return os.environ.get("KILN_LOG", "") not in ("", "0")
