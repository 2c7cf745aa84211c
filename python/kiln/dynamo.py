"""The torch.compile backend: torch.compile(model, backend="kiln").

Registered through the ``torch_dynamo_backends`` entry point, so installing
kiln is enough. Dynamo hands over an FX graph of torch ops; AOTAutograd
lowers it to Core ATen (the same decompositions kiln.trace uses) and splits
forward from backward when training; kiln compiles both, symbolic sizes
included. Graphs kiln cannot compile run in eager PyTorch instead, with a
warning naming why.

What happened to each graph is counted in torch's own counters (as
Inductor does), torch._dynamo.utils.counters:
  counters["kiln"]["graphs"]       graphs handed to kiln (forward and backward)
  counters["kiln"]["whole"]        compiled whole: every op runs in kiln
  counters["kiln"]["partitioned"]  kiln pieces with some ops in eager between them
  counters["kiln"]["eager"]        the whole graph runs in eager PyTorch
  counters["kiln_fallback"][what]  each op (or reason) that ran in eager, once per graph
Clear them with counters.clear() before a run to see what it compiled.
"""

import contextvars
import operator
import os
import sys
import warnings

import torch
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import optimization_hint

from kiln import _C, cache_append
from kiln.capture import decomposition_table, log_enabled, lower_graph, writable_in_place
from kiln.complex_ops import lower_complex
from kiln.guards import of_values as guards_of_values
from kiln.errors import KilnError, UnsupportedOpError
from kiln.module import _SIZE_DTYPE, KilnModule, compile_graph
from kiln.optable.train import register_compile_prims
from kiln.options import weights_quant
from kiln.partition import partition
from kiln.progress import compile_progress, compile_stage
from kiln.random_ops import eager_random
from kiln.train_rewrite import (save_compared_values, saved_slots, stack_select_scatters, unsave_casts,
                                unsave_transposes, widen_norm_statistics)

# The real tensors Dynamo handed the backend, while AOTAutograd compiles
# them (kiln_backend): where an inference graph's parameters come from.
_REAL_INPUTS = contextvars.ContextVar("kiln_real_inputs", default=None)
# torch.compile(..., options={...}) of this compile: (weights_bf16, compute_bf16)
# as compile_graph takes them (kiln.trace's weights_dtype and compute_dtype).
# KILN_CACHE_APPEND=0: a DynamicCache's cat copies the past every step, as
# eager's (for comparison; kiln/cache_append.py).
_CACHE_APPEND = os.environ.get("KILN_CACHE_APPEND", "1") != "0"
_PRECISION = contextvars.ContextVar("kiln_precision", default=(False, False))

OPTIONS = ("weights_dtype", "compute_dtype")


def _precision_of(options):
    """(weights_bf16, compute_bf16) for torch.compile's options dict, checked
    as kiln.trace checks its arguments."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"kiln: unknown torch.compile option(s) {', '.join(map(repr, unknown))}; "
                         f"kiln takes {', '.join(OPTIONS)}")
    weights, compute = options.get("weights_dtype"), options.get("compute_dtype")
    quant = weights_quant(weights)
    if quant is None and weights not in (None, torch.float32, torch.bfloat16):
        raise ValueError(f"kiln: options['weights_dtype'] must be None, torch.float32, torch.bfloat16, "
                         f"torch.int8 (or 'int8', 'int8:a8') or 'int4[:g<group>][:asym][:a8]', not {weights!r}")
    if compute not in (None, torch.float32, torch.bfloat16):
        raise ValueError(f"kiln: options['compute_dtype'] must be None, torch.float32 or torch.bfloat16, "
                         f"not {compute!r}")
    if quant is not None and compute == torch.bfloat16:
        raise ValueError("kiln: a quantized weights_dtype and compute_dtype=torch.bfloat16 cannot be combined")
    return (quant if quant is not None else weights == torch.bfloat16, compute == torch.bfloat16)


def _frozen_parameters(example_inputs):
    """{input index: real tensor} for an inference graph's parameters and
    buffers that it does not mutate (AOTAutograd's static inputs): kiln
    compiles them as constants, packed once, as Inductor's freezing does.
    Empty when training or when the inputs cannot be matched."""
    if torch.is_grad_enabled():
        return {}
    real = _REAL_INPUTS.get()
    tc = torch._guards.TracingContext.try_get()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    if real is None or meta is None or len(real) != len(example_inputs):
        return {}
    mutated = {i for i, info in enumerate(meta.input_info) if getattr(info, "mutates_data", False)
               or getattr(info, "mutates_metadata", False)}
    aliased = {o.base_idx for o in meta.output_info if getattr(o, "base_idx", None) is not None}
    frozen = {}
    for i in meta.static_input_indices:
        t, ex = real[i], example_inputs[i]
        if i in mutated or i in aliased or not isinstance(t, torch.Tensor) or not isinstance(ex, torch.Tensor):
            continue
        if t.dtype != ex.dtype or tuple(t.shape) != tuple(ex.shape) or t.requires_grad and torch.is_grad_enabled():
            continue
        frozen[i] = t
    return frozen


def _guard_frozen(frozen, build):
    """fn(*args) that runs build(frozen)'s function, compiled again with the
    new values when a frozen parameter is another tensor or was written in
    place since (load_state_dict, an optimizer step): never stale weights.
    The check (identity and version counter of each, every call) is C's
    frozen_unchanged: one pass over the ~75 weights of a decode step."""
    positions = tuple(frozen)
    state = {"fn": build(frozen)}

    def see(values):
        state["tensors"] = tuple(values[i] for i in positions)
        state["versions"] = tuple(t._version for t in state["tensors"])

    see(frozen)

    def run(*args):
        if not _C.frozen_unchanged(args, positions, state["tensors"], state["versions"]):
            new = {j: args[j] for j in positions}
            see(new)
            state["fn"] = build(new)
        return state["fn"](*args)

    run._kiln_state = state
    return run


def _compile_fx(gm, example_inputs, frozen=None, appending=True):
    frozen = frozen or {}
    placeholders = []
    names = []
    for i, (n, ex) in enumerate(zip([n for n in gm.graph.nodes if n.op == "placeholder"], example_inputs)):
        if i in frozen:
            placeholders.append(("frozen", frozen[i]))
        elif not n.users:  # read by nothing (a float64 scalar the prelude took over)
            placeholders.append(("python", None))
        elif isinstance(ex, torch.Tensor):
            # Symbolic sizes (dynamic=True, mark_dynamic, automatic dynamic)
            # compile once: the C model binds them per call (kiln/symbolic.py).
            placeholders.append(("input", n.name))
            names.append(n.name)
        elif isinstance(ex, torch.SymInt) and not ex.node.expr.is_number:
            # A symbolic size passed as an argument: an input of the kiln
            # model that carries the size (kiln/symbolic.py).
            placeholders.append(("input", n.name))
            names.append(n.name)
        elif isinstance(ex, torch.SymInt):  # a size Dynamo specialized (Sym(1))
            placeholders.append(("python", int(ex.node.expr)))
        else:
            placeholders.append(("python", ex))
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    flat = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    writes = _input_writes(gm)
    # A DynamicCache's cat([past, new]) returned by the graph: appended in
    # place into a buffer with room (kiln/cache_append.py).
    appends = cache_append.find(gm, example_inputs, placeholders, flat) if _CACHE_APPEND and appending else []
    by_cat = {a.cat: a for a in appends}
    lowering = cache_append.Lowering(appends)
    for a in appends:
        if a.pos is not None:
            placeholders[a.pos] = ("custom", lowering.past(a))
    # Where each output comes from: ("none",) for backward graphs' None
    # gradients; ("input", i) for an input returned as it is (AOTAutograd's
    # forward returns the parameters it saves for backward): handed back
    # without a copy; ("kiln", j) for kiln's j-th output, each distinct node
    # computed and written once even when returned twice; ("append", j) for
    # the view of the j-th append's buffer.
    ph_pos = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    kiln_nodes, source = [], []
    for o in flat:
        size = _size_output(o, ph_pos)
        if o is None:
            source.append(("none", None))
        elif size is not None:
            source.append(("size", size))
        elif isinstance(o, torch.fx.Node) and o in ph_pos and isinstance(example_inputs[ph_pos[o]], torch.Tensor):
            source.append(("input", ph_pos[o]))
        elif o in by_cat:
            source.append(("append", by_cat[o].index))
        else:
            if o not in kiln_nodes:
                kiln_nodes.append(o)
            source.append(("kiln", kiln_nodes.index(o)))
    if not kiln_nodes and not writes and not appends:
        return gm.forward  # nothing to compute: the graph only forwards its inputs
    n_user = len(kiln_nodes)
    n_writes = len(writes)
    kiln_nodes = kiln_nodes + [src for _, src, _ in writes] + [lowering.output(a) for a in appends]
    compile_stage("lowering")
    try:
        ctx = lower_graph(gm, placeholders, kiln_nodes, overrides={a.cat: lowering.cat(a) for a in appends},
                          guards=guards_of_values(example_inputs), guards_checked=True)
        # A size argument the lowering took as a number (an attention's value
        # length pinned to its keys': Symbols.unify_after_failure) is no input.
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i, (kind, what) in enumerate(placeholders):
            if kind == "input" and isinstance(example_inputs[i], torch.SymInt) and isinstance(ctx.env.get(phs[i]), int):
                placeholders[i] = ("python", None)
                names.remove(what)
        # The model's inputs, in the order lowering added them: each tensor (or
        # symbolic size) argument; an append's past gives its length (when
        # symbolic) and its buffer comes after all of them.
        roles = []
        if appends:
            phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
            names = []
            for i, (kind, what) in enumerate(placeholders):
                a = next((a for a in appends if a.pos == i), None)
                if kind == "input":
                    roles.append(("arg", i))
                    names.append(what)
                elif a is not None and a.sized:
                    roles.append(("rows", a.index))
                    names.append(f"{phs[i].name}.rows")
            for j in ctx._kiln_buffers:
                roles.append(("buffer", j))
                names.append(f"{appends[j].cat.name}.buffer")
        # Low-precision weights apply where they are constants: frozen (inference) graphs.
        weights_bf16, compute_bf16 = _PRECISION.get() if frozen else (False, False)
        mod = KilnModule(compile_graph(ctx, weights_bf16, compute_bf16), names, None, "torch.compile",
                         layout_inputs=ctx.layout_inputs)
    except KilnError as e:
        if not appends:
            raise
        # What kiln cannot lower or compile with its appends it compiles
        # with the copying cat, as before.
        if log_enabled():
            print(f"kiln: cache appends not in place in this graph: {e}", file=sys.stderr)
        return _compile_fx(gm, example_inputs, frozen, appending=False)
    mod._kiln_keep = ctx.kept  # the frozen parameters the model's constants borrow
    tensor_positions = [i for i, (kind, _) in enumerate(placeholders) if kind == "input"]
    direct = all(kind == "kiln" for kind, _ in source) and len(kiln_nodes) == len(flat)

    # An input the graph writes (a StaticCache's keys and values): its new
    # value is a kiln output written straight into the input's memory when
    # nothing reads the old value after the write (scatters then update only
    # the new rows); otherwise copied into it after the run.
    in_place = {n_user + k: pos for k, (pos, _, safe) in enumerate(writes) if safe}
    copied = [(n_user + k, pos) for k, (pos, _, safe) in enumerate(writes) if not safe]
    if writes and log_enabled():
        print(f"kiln: the graph writes {len(writes)} of its inputs: {len(in_place)} in place "
              f"(their memory is the output's), {len(copied)} copied after the run", file=sys.stderr)
    if appends and log_enabled():
        print(f"kiln: {len(appends)} cache appends in place (a buffer with room per cache tensor)", file=sys.stderr)

    grown = _grown_outputs(flat, source)

    # Per call, the appending path builds the model's arguments from a plan
    # fixed here: (model input, role, what) in the model's input order.
    # Kiln's own buffers need no checks (kiln made them: their descriptors
    # are kept with them); the graph's arguments go through describe's.
    plan = [(j, kind, i) for j, (kind, i) in enumerate(roles)]
    append_outs = [n_user + n_writes + a.index for a in appends]
    n_outs = n_user + n_writes + len(appends)

    def run_appending(args):
        bufs = cache_append.buffers(appends, args)
        keep = []
        descs = [mod.describe(j, args[i], keep) if kind == "arg" else (1, _SIZE_DTYPE, (bufs[i][1],))
                 if kind == "rows" else bufs[i][0].desc for j, kind, i in plan]
        outs, out_descs = [None] * n_outs, [None] * n_outs
        for k, pos in in_place.items():
            mod.give(k, args[pos], outs, out_descs)
        for k, (b, _, _) in zip(append_outs, bufs):
            outs[k], out_descs[k] = b.tensor, b.desc
        got = mod.run_described(descs, outs, out_descs, args)
        return got, [cache_append.commit(b, n) for b, _, n in bufs]

    # Outputs that are all kiln's or appends' views (a decode step's logits
    # and cache) are picked from got + views by one itemgetter call.
    picks = [i if kind == "kiln" else n_user + i for kind, i in source if kind in ("kiln", "append")]
    pick = operator.itemgetter(*picks) if len(picks) == len(source) > 1 else None

    def run(*args):
        views = []
        if appends:
            got, views = run_appending(args)
        else:
            ins = [args[i] for i in tensor_positions]
            got = mod.run_flat(ins, {k: args[pos] for k, pos in in_place.items()}) if in_place else mod.run_flat(ins)
        for k, pos in copied:
            args[pos].copy_(got[k])
        if writes or appends:
            got = got[:n_user]
        for k, dims in grown:
            _mark_propagated_dynamic(got[k], dims)
        if direct:
            return got
        if pick is not None:
            return list(pick(got + views))
        return [None if kind == "none" else args[i] if kind == "input" else i(args) if kind == "size"
                else views[i] if kind == "append" else got[i] for kind, i in source]

    run._kiln_module = mod
    return run


_SIZE_OPS = {
    operator.add: operator.add, operator.sub: operator.sub, operator.mul: operator.mul,
    operator.floordiv: operator.floordiv, operator.mod: operator.mod, operator.neg: operator.neg,
    torch.sym_max: max, torch.sym_min: min,
}


def _size_output(o, ph_pos):
    """For an output that is a size (a Python int, or a SymInt node computed
    from the inputs' sizes alone: a StaticCache's generate() returns the batch
    Dynamo made symbolic), a function of the call's arguments giving it; None
    for anything else. kiln's graphs return tensors, so such outputs are
    worked out here, from the same arguments, at each call."""
    if isinstance(o, int) and not isinstance(o, bool):
        return lambda args: o
    if not isinstance(o, torch.fx.Node) or not isinstance(o.meta.get("val"), torch.SymInt):
        return None

    def build(n):
        if not isinstance(n, torch.fx.Node):
            return (lambda args: n) if isinstance(n, int) and not isinstance(n, bool) else None
        if n.op == "placeholder" and n in ph_pos:
            i = ph_pos[n]
            return lambda args: int(args[i])
        if n.op != "call_function":
            return None
        if n.target is torch.ops.aten.sym_size.int and isinstance(n.args[0], torch.fx.Node) \
                and n.args[0].op == "placeholder" and n.args[0] in ph_pos:
            i, d = ph_pos[n.args[0]], n.args[1]
            return lambda args: int(args[i].shape[d])
        fn = _SIZE_OPS.get(n.target)
        parts = [build(a) for a in n.args] if fn is not None and not n.kwargs else [None]
        if any(p is None for p in parts):
            return None
        return lambda args: fn(*(p(args) for p in parts))

    return build(o)


def _grown_outputs(flat, source):
    """[(kiln output index, {dim})] for outputs that concatenate something
    the graph was given (an input, or a constant it lifted) with what it
    computed: a buffer carried from call to call and grown along that dim,
    as a DynamicCache's keys and values are by torch.cat every token."""
    aten = torch.ops.aten
    grown = []
    for o, (kind, k) in zip(flat, source):
        if kind != "kiln" or not isinstance(o, torch.fx.Node) or o.target is not aten.cat.default:
            continue
        parts = o.args[0]
        carried = any(isinstance(p, torch.fx.Node) and (
            p.op in ("placeholder", "get_attr") or p.target is aten.lift_fresh_copy.default) for p in parts)
        val = o.meta.get("val")
        if carried and isinstance(val, torch.Tensor) and val.dim():
            dim = o.args[1] if len(o.args) > 1 else o.kwargs.get("dim", 0)
            grown.append((k, {dim % val.dim()}))
    return grown


def _mark_propagated_dynamic(t, dims):
    """Tells Dynamo that t's dims vary from call to call when t comes back
    as an input (the grown cache of the next decode step): the next graph
    is traced with those sizes symbolic at once, instead of specialized to
    the first length and traced again at the second. This is AOTAutograd's
    own guardless hint for outputs it knows are dynamic
    (_dynamo_propagated_dynamic_indices): it changes which sizes Dynamo
    makes symbolic, never what is computed (Dynamo still guards what it
    relies on)."""
    old = getattr(t, "_dynamo_propagated_dynamic_indices", None)
    t._dynamo_propagated_dynamic_indices = (old | dims) if old else set(dims)


def _input_writes(gm):
    """[(placeholder position, new value node, safe)] for each copy_ into a
    graph input (an inference graph's mutated input, kept in the graph by
    keep_inference_input_mutations). safe: the new value may be written
    into the input's memory (kiln.capture.writable_in_place)."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    pos = {n: i for i, n in enumerate(phs)}
    writes = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not torch.ops.aten.copy_.default:
            continue
        dst, src = n.args[0], n.args[1]
        if dst not in pos or not isinstance(src, torch.fx.Node):
            raise KilnError("an in-place copy into a value that is not a graph input")
        writes.append((pos[dst], src, writable_in_place(dst, src, writer=n)))
    return writes


def _is_f64_scalar(node):
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor) and v.dtype == torch.float64 and v.dim() == 0


_SCALAR_OPERAND_OPS = (torch.ops.aten.mul.Tensor, torch.ops.aten.add.Tensor, torch.ops.aten.sub.Tensor,
                       torch.ops.aten.div.Tensor)


_ROUNDINGS = (torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default,
              torch.ops.aten.scalar_tensor.default)


def _takes_float_operand(user, node):
    """Whether `user` is a float32 elementwise op taking `node` (a Python
    float of the graph, a SymFloat, or a 0-d float64 tensor) as a plain
    operand, which eager rounds to float32 (a 0-d tensor does not promote a
    dimensioned one): it may take a float32 0-d tensor of that value
    instead."""
    v = user.meta.get("val")
    return (user.op == "call_function" and user.target in _SCALAR_OPERAND_OPS and not user.kwargs
            and isinstance(v, torch.Tensor) and v.dtype == torch.float32
            and node in user.args[:2] and all(a is node or isinstance(a, torch.fx.Node) for a in user.args[:2]))


def _input_symbols(gm):
    """{sympy symbol: (placeholder, dim or None)}: where each of the graph's
    input symbols can be read at run time (a SymInt argument, or a size of a
    tensor argument)."""
    src = {}
    for n in gm.graph.find_nodes(op="placeholder"):
        v = n.meta.get("val")
        dims = [(None, v)] if isinstance(v, torch.SymInt) else (
            list(enumerate(v.shape)) if isinstance(v, torch.Tensor) else [])
        for d, size in dims:
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                src.setdefault(size.node.expr, (n, d))
    return src


def _size_expr_emitter(expr, src):
    """A function emit(graph, env, cache) adding nodes to graph that compute
    the integer sympy expression expr (torch's size arithmetic: sums,
    products, small powers, FloorDiv, Mod) from the input symbols in src
    (_input_symbols; env maps placeholders to graph's, cache keeps each
    symbol's read for the next expression), or None when expr reads another
    symbol (a data-dependent size) or an operation this does not know."""
    import operator

    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

    def plan(e):
        if e.is_Integer:
            return lambda g, env, c: int(e)
        if e.is_Symbol:
            if e not in src:
                return None
            ph, d = src[e]

            def read(g, env, c):
                if (ph, d) not in c:
                    c[(ph, d)] = env[ph] if d is None else g.call_function(
                        torch.ops.aten.sym_size.int, (env[ph], d))
                return c[(ph, d)]
            return read
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and 1 <= int(e.exp) <= 4:
            base = plan(e.base)
            if base is None:
                return None

            def power(g, env, c):
                b = base(g, env, c)
                out = b
                for _ in range(int(e.exp) - 1):
                    out = g.call_function(operator.mul, (out, b))
                return out
            return power
        ops = {sympy.Add: operator.add, sympy.Mul: operator.mul, FloorDiv: operator.floordiv,
               Mod: operator.mod, PythonMod: operator.mod}
        op = ops.get(type(e))
        if op is None:
            return None
        parts = [plan(a) for a in e.args]
        if any(p_ is None for p_ in parts):
            return None

        def combine(g, env, c):
            out = parts[0](g, env, c)
            for p_ in parts[1:]:
                out = g.call_function(op, (out, p_(g, env, c)))
            return out
        return combine

    return plan(expr)


def _split_float_scalars(gm, example_inputs):
    """Moves the graph's float64 scalar arithmetic into a prelude run in
    eager PyTorch before the kiln model: returns (prelude, new inputs) or
    None when the graph has none, rewriting gm in place.

    torch.compile(dynamic=True) passes a module's Python floats (an RMSNorm's
    eps, RoPE's attention scaling, even math.pi in GPT-2's GELU) as 0-d
    float64 tensors; the graph computes with them in float64 (sqrt(2 / pi))
    and rounds the result to float32 before it meets a tensor. kiln holds no
    float64: the 0-d float64 nodes (the part that would have been constant
    folded had Dynamo specialized the floats) are computed by the prelude,
    and each rounding to float32 becomes a new float32 input of the graph,
    appended after the others. Nothing is refused silently: a float64 value
    used any other way is left in the graph (and falls back).

    Numpy arithmetic on constants comes the same way: CTRL's
    `x *= np.sqrt(d)` is a 0-d int64 constant (get_attr), converted to
    float64 and square-rooted, that multiplies the float32 embeddings as it
    is. A chain that reads no input is computed once, here, not per call."""
    # Sizes feed it too (SymInt placeholders, and sizes the graph computes
    # from them or from its tensors): nearest upsampling's decomposition
    # computes its scale as float64(size) / (2.0 * size) from a scalar_tensor
    # of a size (with the size itself computed in 0-d int64 tensors in a
    # training graph), or, given an output size, as a Python float in_size /
    # out_size (a SymFloat) that multiplies a float32 tensor.
    # A size of an intermediate tensor (an upsampling to a skip connection's
    # size) is computed from its expression over the input symbols.
    nodes = list(gm.graph.nodes)
    symbols = _input_symbols(gm)
    sizes, from_expr = set(), {}
    for n in nodes:
        v = n.meta.get("val")
        if not isinstance(v, torch.SymInt):
            continue
        if n.op == "placeholder" or (
                n.op == "call_function" and all(a.op == "placeholder" or a in sizes for a in n.all_input_nodes)):
            sizes.add(n)
        elif n.op == "call_function":
            emit = _size_expr_emitter(v.node.expr, symbols)
            if emit is not None:
                sizes.add(n)
                from_expr[n] = emit

    def kind(n):
        v = n.meta.get("val")
        if isinstance(v, torch.SymFloat):
            return "float"
        if isinstance(v, torch.Tensor) and v.dim() == 0:
            return "f64" if v.dtype == torch.float64 else "other"
        return None

    def rounding(u, cand):  # a float64 scalar or a Python float rounded to float32
        v = u.meta.get("val")
        return (u.op == "call_function" and u.target in _ROUNDINGS and bool(u.args) and u.args[0] in cand
                and kind(u.args[0]) in ("f64", "float") and isinstance(v, torch.Tensor)
                and v.dtype == torch.float32 and v.dim() == 0)

    def from_scalars(n, cand):
        return n.op == "call_function" and all(a in cand or a in sizes for a in n.all_input_nodes)

    cand = set()
    for n in nodes:
        k = kind(n)
        if k is None or rounding(n, cand):
            continue
        if (n.op == "placeholder" and k == "f64") or n.op == "get_attr" or from_scalars(n, cand):
            cand.add(n)
    # Only float64 arithmetic is the prelude's own; the other scalars (0-d
    # int64 / float32 tensors, Python floats) go with it only where all they
    # feed does (a Python float also where a float32 op takes it as an operand).
    changed = True
    while changed:
        changed = False
        for n in [n for n in nodes if n in cand]:
            k = kind(n)
            ok = n.op in ("placeholder", "get_attr") or from_scalars(n, cand)
            if ok and k != "f64":
                ok = bool(n.users) and all(u in cand or rounding(u, cand) or (k == "float" and _takes_float_operand(u, n))
                                           for u in n.users)
            if not ok:
                cand.discard(n)
                changed = True
    scalar = cand
    rounded = [u for u in nodes if u not in scalar and rounding(u, scalar)]
    operand_of = {n: [u for u in n.users if _takes_float_operand(u, n)]
                  for n in scalar if kind(n) in ("float", "f64")}
    if not (rounded or any(operand_of.values())) or any(
            u not in scalar and u not in rounded and u not in operand_of.get(n, ())
            for n in scalar for u in n.users):
        return None
    # Where a Python float meets a float32 tensor, eager rounds it to float32:
    # so does the prelude (scalar_tensor(x, dtype=float32)), and the op takes
    # it as a 0-d float32 tensor.
    for n, users in operand_of.items():
        if not users:
            continue
        with gm.graph.inserting_after(n):
            r = gm.graph.call_function(torch.ops.aten.scalar_tensor.default, (n,), {"dtype": torch.float32}) \
                if kind(n) == "float" else \
                gm.graph.call_function(torch.ops.aten._to_copy.default, (n,), {"dtype": torch.float32})
        r.meta["val"] = torch.empty((), dtype=torch.float32)
        for u in users:
            u.replace_input_with(n, r)
        rounded.append(r)
    rounded = [u for u in gm.graph.nodes if u in rounded]   # in graph order
    # The prelude: gm's placeholders, the scalar nodes, the roundings as
    # outputs, and the sizes they read, computed again (only those: it runs
    # at every call).
    read = set()
    todo = [a for n in list(scalar) + rounded for a in n.all_input_nodes if a in sizes]
    while todo:
        a = todo.pop()
        if a not in read:
            read.add(a)
            if a not in from_expr:
                todo += [b for b in a.all_input_nodes if b in sizes]
    pg = torch.fx.Graph()
    env, symbol_nodes = {}, {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = pg.placeholder(n.name)
        elif n in read and n in from_expr:
            env[n] = from_expr[n](pg, env, symbol_nodes)
        elif n in scalar or n in rounded or (n in read and n.op != "placeholder"):
            env[n] = pg.node_copy(n, lambda a: env[a])
    pg.output(tuple(env[u] for u in rounded))
    prelude = torch.fx.GraphModule(gm, pg)
    if not read and not any(n.op == "placeholder" for n in scalar):
        # Constants alone (numpy on a config value): the same values every call.
        fixed = tuple(prelude(*[None] * len(gm.graph.find_nodes(op="placeholder"))))
        prelude = lambda *args: fixed  # noqa: E731
    last = gm.graph.find_nodes(op="placeholder")[-1]
    new_inputs = []
    for k, u in enumerate(rounded):
        with gm.graph.inserting_after(last):
            ph = gm.graph.placeholder(f"kiln_scalar{k}")
        ph.meta["val"] = torch.empty((), dtype=torch.float32)
        u.replace_all_uses_with(ph)
        last = ph
        new_inputs.append(ph.meta["val"])
    for n in reversed(list(gm.graph.nodes)):
        if n in rounded or (n in scalar and n.op != "placeholder"):
            gm.graph.erase_node(n)
    gm.recompile()
    return prelude, new_inputs


def _is_view_of_input(node, seen=None):
    """Whether FX node `node` is a placeholder, or a view (an op whose result
    aliases its first argument, or an item of such a result) of one."""
    seen = set() if seen is None else seen
    if node in seen:
        return False
    seen.add(node)
    if node.op == "placeholder":
        return isinstance(node.meta.get("val"), torch.Tensor)
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    if node.target is operator.getitem:
        return _is_view_of_input(node.args[0], seen)
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    out, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    if out is None or out.is_write or first is None or first.is_write:
        return False
    if out.before_set and not set(out.before_set) & set(first.before_set):
        return False  # aliases another argument (a list's, Tensor(a)[], names none)
    return _is_view_of_input(node.args[0], seen)


def _symbolic_inputs(example_inputs):
    return any(isinstance(t, torch.SymInt) or (isinstance(t, torch.Tensor) and any(
        isinstance(d, torch.SymInt) for d in t.shape)) for t in example_inputs)


def _views_of_inputs(gm, example_inputs):
    """(positions, GraphModule computing them) for the outputs of gm that are
    views of its inputs, under symbolic sizes; else None.

    AOTAutograd gives the caller such an output as a view of the real input,
    regenerated from the compiled output: by replaying the view ops, except
    where they take symbolic sizes (x[:, n // 2:], a chunk): then by
    input.as_strided(out.size(), out.stride(), out.storage_offset()) of the
    compiled output, whose layout is kiln's dense copy (offset 0), not the
    view's: the wrong elements. These outputs are made by the graph's own
    view ops in eager PyTorch instead (real views, as Inductor returns)."""
    if not _symbolic_inputs(example_inputs):
        return None
    out = next(n for n in gm.graph.nodes if n.op == "output")
    flat = list(out.args[0]) if isinstance(out.args[0], (tuple, list)) else [out.args[0]]
    pos = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node) and a.op != "placeholder"
           and _is_view_of_input(a)]
    if not pos:
        return None
    g = torch.fx.Graph()
    env = {}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = g.placeholder(n.name)
            env[n].meta = dict(n.meta)
    needed = set()

    def need(n):
        if n in needed or n.op == "placeholder":
            return
        needed.add(n)
        for a in n.all_input_nodes:
            need(a)

    for i in pos:
        need(flat[i])
    for n in gm.graph.nodes:
        if n in needed:
            env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[flat[i]] for i in pos))
    return pos, torch.fx.GraphModule(gm, g)


def kiln_fw_compiler(gm, example_inputs):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    views = _views_of_inputs(gm, example_inputs)
    # Dynamo compiles under a fake-tensor mode; kiln builds real constants.
    with unset_fake_temporarily():
        fn = _kiln_fw_compile(gm, example_inputs)
    if views is None:
        return fn
    pos, view_gm = views

    def run(*args):
        outs = fn(*args)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        for i, v in zip(pos, view_gm(*args)):
            outs[i] = v
        return outs

    run._kiln_module = getattr(fn, "_kiln_module", None)
    return run


def _laid_out_as_eager(gm, fn):

    """fn, with the forward graph's intermediate bases in eager's memory
    order. AOTAutograd returns a view of an intermediate (x.permute(...)
    returned beside a view of it) as that intermediate, the graph's output,
    and replays the views on it after the call: the replay assumes the
    strides eager gives the intermediate (an elementwise result follows its
    inputs' layout), where kiln's outputs are row-major, and a view() that
    needs eager's order raises (fuzzer seed 8787, graph 335). Nor may a base
    keep spare room: a cat kiln appends in place (kiln.cache_append) comes
    back as a narrow view of a larger buffer, and view(-1) of it raises
    where eager's dense cat does not (seed 8989, graph 1991). A base not
    dense in eager's order is copied into it; the rest pass as they are."""
    tc = torch._guards.TracingContext.try_get()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    n_bases = getattr(meta, "num_intermediate_bases", 0) if meta is not None else 0
    if not n_bases:
        return fn
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    flat = list(out) if isinstance(out, (tuple, list)) else [out]
    start = meta.num_mutated_inp_runtime_indices + meta.num_outputs
    orders = []
    for i in range(start, min(start + n_bases, len(flat))):
        val = flat[i].meta.get("val") if isinstance(flat[i], torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dim() < 2:
            continue
        strides = [optimization_hint(s) for s in val.stride()]  # the example's, no guard
        orders.append((i, sorted(range(val.dim()), key=lambda d: -strides[d])))  # outermost first
    if not orders:
        return fn

    def run(*args):
        outs = fn(*args)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        for i, order in orders:
            held = outs[i].permute(order)
            if not held.is_contiguous():
                inverse = sorted(range(len(order)), key=order.__getitem__)
                outs[i] = held.contiguous().permute(inverse)
        return outs

    run._kiln_module = getattr(fn, "_kiln_module", None)
    return run


def _kiln_fw_compile(gm, example_inputs):
    from torch._dynamo.utils import counters

    counters["kiln"]["graphs"] += 1
    lower_complex(gm)  # complex values (rotary embeddings) as pairs of reals
    frozen = _frozen_parameters(example_inputs)
    split = _split_float_scalars(gm, example_inputs)
    if split is not None:
        prelude, extra = split
        fn = _compile_or_partition(gm, list(example_inputs) + extra, frozen)

        def run(*args):
            return fn(*args, *prelude(*args))

        run._kiln_module = getattr(fn, "_kiln_module", None)
        return run
    return _compile_or_partition(gm, example_inputs, frozen)


def _compile_or_partition(gm, example_inputs, frozen):
    from torch._dynamo.utils import counters

    try:
        if not frozen:
            fn = _compile_fx(gm, example_inputs)
        else:
            fn = _guard_frozen(frozen, lambda values: _compile_fx(gm, example_inputs, values))
            fn._kiln_module = getattr(fn._kiln_state["fn"], "_kiln_module", None)
        counters["kiln"]["whole"] += 1
        return fn
    except UnsupportedOpError:
        # Compile what kiln can; the rest runs eagerly between the pieces.
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]

        def build(values):
            pos = {phs[i]: t for i, t in values.items()}
            wb, cb = _PRECISION.get() if values else (False, False)
            fused, _ = partition(gm, constant_of=lambda node: pos.get(node), what="torch.compile graph",
                                 weights_bf16=wb, compute_bf16=cb)
            build.fused = fused
            return fused.forward

        fn = _guard_frozen(frozen, build) if frozen else build({})
        fused = build.fused
        counters["kiln"]["partitioned"] += 1
        for what in fused.kiln_eager:
            counters["kiln_fallback"][what] += 1
        return fn
    except KilnError as e:
        warnings.warn(f"kiln: running this graph in eager PyTorch: {e}", stacklevel=2)
        counters["kiln"]["eager"] += 1
        counters["kiln_fallback"][str(e)] += 1
        return gm.forward


def _attention_as_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    """scaled_dot_product_attention as torch's own math formulation
    (matmuls and a softmax, CompositeImplicitAutograd): the backward
    AOTAutograd derives from it is ops kiln compiles."""
    if dropout_p and eager_random():
        # KILN_RANDOM=eager: the mask must be eager's own draw.
        return _SDPA(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # The public entry point turns a boolean mask (True = may attend)
        # into an additive one before it reaches the math kernel, which
        # would otherwise add the bools as 0/1. Traced into the graph: this
        # builds ops, it computes nothing here.
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf"))
    # With dropout_p > 0 the math version drops attention weights by
    # aten.native_dropout: kiln's random mask (kiln/random_ops.py).
    return torch.ops.aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]


_SDPA = torch._C._nn.scaled_dot_product_attention


class _AttentionAsMath(torch.overrides.TorchFunctionMode):
    """Active while AOTAutograd traces a training graph: attention becomes
    _attention_as_math. Inference keeps attention whole for kiln's fused
    attention; in training the fused CPU flash attention's backward has no
    kiln kernel, and decomposing only its forward mismatches what it saves
    for backward (see capture.decomposition_table).

    Dynamo leaves torch.nn.functional.multi_head_attention_forward whole in
    its graph and it calls attention inside, where a torch-function mode is
    not active; so the module's global is swapped for the trace as well."""

    def __enter__(self):
        self._saved = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = _attention_as_math
        return super().__enter__()

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self._saved
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is _SDPA:
            return _attention_as_math(*args, **kwargs)
        return func(*args, **kwargs)


def _needs_grad(example_inputs):
    return torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                           for x in example_inputs)


def kiln_backend(gm, example_inputs, options=None, **kwargs):
    """The torch.compile backend entry point.

    options (torch.compile(model, backend="kiln", options={...})):
      weights_dtype: as kiln.trace's: torch.bfloat16, torch.int8 / "int8",
        "int8:a8", "int4[:g<group>][:asym][:a8]" stores the linear layers' weights packed so
        (decode reads 2x / 4x / ~7x fewer bytes); compute_dtype=torch.bfloat16
        computes them in bf16 (AMX / AVX512_BF16). Inference graphs only
        (under no_grad, where the weights are frozen constants); training
        graphs stay fp32."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    register_compile_prims()


    def fw(gm_, ex_):
        return make_boxed_func(_laid_out_as_eager(gm_, kiln_fw_compiler(gm_, ex_)))

    def bw(gm_, ex_):
        # Backward graphs are plain ATen graphs too; ops kiln lacks fall back.
        stack_select_scatters(gm_)
        return make_boxed_func(kiln_fw_compiler(gm_, ex_))

    training = _needs_grad(example_inputs)
    # The min-cut partitioner (Inductor's) recomputes cheap ops in the
    # backward instead of saving their results: the forward then saves W, not
    # a materialised t(W), and the backward reads W through MATMUL's
    # transpose flags. Under autocast, a saved bf16 cast of a value the
    # forward keeps anyway (a weight) is made again in the backward, where
    # kiln folds it into the GEMM's packing (unsave_casts). Values an
    # equality test reads (amax's backward) are never recomputed: kiln's
    # kernels may round a recomputation differently (save_compared_values).
    def partition(joint, joint_inputs, **kw):
        save_compared_values(joint)
        widen_norm_statistics(joint)
        fw_, bw_ = min_cut_rematerialization_partition(joint, joint_inputs, **kw)
        slots = saved_slots(fw_, bw_)
        if slots is not None:
            unsave_transposes(fw_, bw_, slots)
            unsave_casts(fw_, bw_, slots)
        return fw_, bw_

    # keep_inference_input_mutations: an inference graph's writes into its
    # inputs stay in it (copy_), so kiln writes a StaticCache's new keys and
    # values into the cache's own memory rather than AOTAutograd copying
    # the whole cache back after each step (_input_writes).
    compile_ = aot_autograd(fw_compiler=fw, bw_compiler=bw, partition_fn=partition,
                            decompositions=decomposition_table(), keep_inference_input_mutations=True)
    # Inference graphs freeze their parameters (_frozen_parameters); training
    # graphs keep them as inputs (an optimizer changes them every step).
    precision = _precision_of(options)
    if training and precision != (False, False):
        warnings.warn("kiln: torch.compile options weights_dtype/compute_dtype apply to inference "
                      "(no_grad) graphs; this training graph computes in fp32", stacklevel=2)
    real_token = _REAL_INPUTS.set(None if training else list(example_inputs))
    precision_token = _PRECISION.set(precision)
    try:
        with compile_progress("a torch.compile graph"):
            compile_stage("AOTAutograd")
            if not training:
                return compile_(gm, example_inputs)
            with _AttentionAsMath():
                return compile_(gm, example_inputs)
    finally:
        _REAL_INPUTS.reset(real_token)
        _PRECISION.reset(precision_token)
