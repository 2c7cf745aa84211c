"""kiln: an open PyTorch compiler and runtime with a C core.

    import kiln
    compiled = kiln.trace(model, example_inputs)   # ahead-of-time compile
    y = compiled(x)                                 # runs kiln's C runtime
    kiln.save(compiled, "model.kiln"); kiln.load("model.kiln")
    torch.compile(model, backend="kiln")            # the one-line change

Set KILN_LOG=1 to see each compiler pass; kiln.explain(compiled) prints the
compiled plan. KILN_NUM_THREADS sets the thread count; kernels run on torch's
OpenMP threads unless KILN_POOL=own or OMP_WAIT_POLICY=passive (_pool_choice).
"""

import os
import sys
import time
import warnings

import torch

from torch.export.graph_signature import InputKind, OutputKind
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.dropout import _DropoutNd

from kiln import _C
from kiln.errors import KilnError, UnsupportedOpError

__version__ = "0.1.0"


def _pool_choice(env):
    """Where kiln's parallel kernels run: "host", the OpenMP runtime torch's
    eager ops use, so both share one team of threads instead of two sets
    competing for the same cores (src/python/kiln_ext_host.c); or "own",
    kiln's own threads, still no more of them than torch.set_num_threads
    says. KILN_POOL=host|own chooses; by default "host", unless
    OMP_WAIT_POLICY=passive: then OpenMP's threads sleep after each region
    and are woken for each of kiln's kernels, which made a Llama int4 decode
    step 1.2-2.9x slower on Zen 3 (and sleeping, they compete with nothing)."""
    choice = env.get("KILN_POOL", "").strip().lower()
    if choice in ("host", "own"):
        return choice
    return "own" if env.get("OMP_WAIT_POLICY", "").strip().lower() == "passive" else "host"


POOL = _pool_choice(os.environ)
HOST_THREADS = _C.host_threads(POOL == "host", True)

from kiln import jit as _jit  # noqa: E402,F401  (registers torch.ops.kiln.run: torch.jit.load works after `import kiln`)
from kiln.analysis import analyze_model  # noqa: E402
from kiln.capture import export_program, log_enabled, lower_exported  # noqa: E402
from kiln.guards import SizeGuards  # noqa: E402
from kiln.compare import compare  # noqa: E402
from kiln.module import KilnModule, compile_graph  # noqa: E402
from kiln.options import as_tuple, weights_quant  # noqa: E402
from kiln import partition as _partition  # noqa: E402  (kiln.partition stays the module)
from kiln import tokenizer as kiln_tokenizer  # noqa: E402  (kiln.tokenizer stays the module)
from kiln import llm  # noqa: E402,F401  (kiln.llm.StaticCacheStep)
from kiln.profiler import profile as _profile  # noqa: E402
from kiln.progress import compile_progress, compile_stage  # noqa: E402
from kiln.support import unsupported_ops  # noqa: E402
from kiln.targets import compare_targets  # noqa: E402


def trace(model, example_inputs, *, example_kwargs=None, fallback=True, weights_dtype=None,
          compute_dtype=None, dynamic_shapes=None, target=None):
    """Compiles `model` ahead of time for inputs shaped like `example_inputs`.

    Returns a kiln.KilnModule: call it like the model. Shapes are fixed to
    the example's unless dynamic_shapes says otherwise; a call with other
    shapes or dtypes raises ValueError naming the input.

    dynamic_shapes: torch.export's argument, unchanged (torch.export.Dim
    objects per input dimension, e.g. {"x": {0: Dim("batch", max=64), 1:
    Dim("seq", max=512)}}): one compile serves every size in range; each
    call binds the sizes, checks their ranges (an error names the input, the
    dimension and the range) and runs a plan made for them (kept for the
    last few sizes). When the model uses ops kiln does not support, kiln
    compiles the rest and runs those ops in eager PyTorch between the
    compiled pieces (a warning names them once); with fallback=False it
    raises UnsupportedOpError naming the op and the source line instead.

    weights_dtype: None or torch.float32 (the default) keeps weights in fp32.
    torch.bfloat16 stores every linear layer's weight (nn.Linear, and
    matmuls by a constant matrix; not one over a single input feature,
    which is a multiply) packed as bf16, rounded to nearest even as
    weight.to(torch.bfloat16) does: half the bytes, so memory-bound shapes
    (small batches, LLM decode) run up to twice as fast. Activations and
    accumulation stay fp32 and the output stays fp32, so the result matches
    the eager model with bf16-rounded linear weights (other parameters,
    such as biases, norms and convolutions, stay fp32) within fp32
    tolerance. The choice is stored in a saved artifact.
    torch.int8 (or "int8") quantizes those weights (and embedding tables:
    a gather of a constant table, each row as an output channel) to int8
    per output channel (symmetric: scale max|w| / 127, round half to even, clamp to
    +-127); "int4" to int4 in groups of 32 along the input dimension
    (llama.cpp q4_0's rule: d = the group's largest-magnitude element / -8,
    q = clamp(round(w / d), -8, 7)), "int4:g128" in groups of 128 (any
    multiple of 32 up to 4096), "int4:asym" (or "int4:g128:asym") with a
    zero point per group (scale (max - min) / 15 over the group and 0). The
    GEMM dequantizes in registers, so decode reads 4x / ~6-7x fewer weight
    bytes; activations and sums stay fp32, and the result matches the eager
    model with those linear weights replaced by their dequantized values
    (docs: kiln_gemm.h) within fp32 tolerance. "int8:a8" is int8 with int8
    activations: every linear layer also quantizes its input per row at run
    time (scale max|x| / 127, round half to even) and sums the integer
    products exactly, by one rule for prefill (more than 8 rows: 1.2-2.4x
    faster than int8 weight-only on an AVX2 core) and decode (a GEMV with
    about half the weight-only one's instructions); the result is eager's
    linear on the quantized input and the dequantized weight. "int4:a8"
    (also with ":g<group>" and ":asym") is int4 with int8 activations: a
    linear layer quantizes its input per row and per weight group of G at
    run time (scale max|x| / 127 over the group, round half to even) and
    sums nibble x int8 products exactly, so the decode GEMV is bound by
    reading the weights rather than by arithmetic, and prefill runs
    1.1-1.3x int4 weight-only;
    the result is eager's linear on the quantized input and the dequantized
    weight (each input within half a step, scale / 2, of its value), each
    row's the same whatever the row count.
    A model whose weights are already quantized the PyTorch way (stored as
    integers, dequantized in forward by quantized_decomposed's
    dequantize_per_channel, _per_channel_group or _per_tensor) needs no
    weights_dtype: its linear layers run on the checkpoint's own integers
    and scales where kiln's int8 / int4 layouts hold them exactly (see
    python/kiln/optable/quant.py and kiln.explain), whatever weights_dtype
    says.

    compute_dtype: None or torch.float32 (the default) computes in fp32.
    torch.bfloat16 makes every linear layer (nn.Linear, and matmuls by a
    constant matrix) compute in bf16: its weight is packed as bf16 (rounded
    to nearest even) in the layout of the bf16 engines, its input is rounded
    to bf16 the same way, and the products are summed in fp32, on AMX tiles
    where the CPU has them (Intel Xeon, Sapphire Rapids and later), else
    with AVX512_BF16 dot products, else (any other CPU) by the fp32 kernels
    on the same rounded numbers. So a linear computes what eager computes for
    linear(x.bfloat16(), W.bfloat16()) with an fp32 accumulator, but the
    result is kept in fp32. Attention (scaled_dot_product_attention, and the
    attention patterns kiln fuses into it) computes in bf16 too where the
    compiling CPU has a bf16 engine (not for a decode step's few queries,
    which reading K and V bounds: there, and on other CPUs, the rule would
    only cost, and attention stays fp32), by this rule: q, k and v are rounded to bf16; the scores are the fp32 sums of
    their (exact) products, times the scale in fp32 (the scale is applied
    after rounding, as torch's CPU flash attention does for bf16 inputs),
    plus the mask; the softmax runs in fp32, and its weights e^(s - c) are
    rounded to bf16 for the product with v, summed in fp32, and divided by
    the fp32 sum of the rounded weights (torch divides by the unrounded
    ones; kiln's output is a weighted mean of v whatever the rounding, so
    a key that dominates its row loses nothing to it). c, the point the weights are
    taken against, is K ln 2 for an integer K at or above the row's max
    score times log2 e (torch uses the max itself): moving it by a power of
    two does not change a rounding, so the result does not depend on how
    kiln tiles the keys or how many threads run it. The two products run
    on AMX tiles where the CPU has them, else as VDPBF16PS dot products with
    AVX512_BF16, elsewhere on the fp32 kernels over the same rounded numbers
    (kiln.explain says which). Channels-last convolutions compute in bf16
    where the compiling CPU has AVX512_BF16, on AMX tiles where it has
    those too (see the README). Everything else stays fp32: the bias, the
    fused activation and residual add, norms, softmax, the residual stream
    between layers, and the outputs (fp32 tensors). Implies bf16 weights
    (weights_dtype is then ignored). The choice is stored in a saved
    artifact, which computes the same on any CPU.

    A model already in bf16 (model.to(torch.bfloat16)) computes as eager
    does (see the README) and, with neither option set, its linear layers
    read their weights where the model keeps them: torch's (N, K) bf16
    rows, which the compiled module holds references to rather than copies,
    so compiling a bf16 LLM adds next to nothing to its memory (when a
    layer's input has 32 rows or more fixed by the trace, its weight is
    packed instead, which is faster there: a fixed-length prompt). Changing
    those parameters in place afterwards therefore changes what the
    compiled module computes for them; trace again after loading new
    weights. KILN_BF16_WEIGHTS=packed packs copies for the bf16 engines
    instead (faster for some prompt lengths, twice the memory).

    target: the target the model runs on: "cpu" (the fast kernels) or
    "reference" (the scalar reference kernels beside them, one thread: a
    yardstick, see kiln.compare_targets). None: $KILN_TARGET, else "cpu".

    kiln.trace compiles for inference, as if after model.eval(): dropout is
    off and batch norm uses its running statistics. A model passed in
    training mode is traced that way (and left in training mode), with a
    warning when that changes what it computes; train with
    torch.compile(model, backend="kiln").
    """
    quant = weights_quant(weights_dtype)
    if quant is None and weights_dtype not in (None, torch.float32, torch.bfloat16):
        raise ValueError(f"kiln.trace: weights_dtype must be None, torch.float32, torch.bfloat16, "
                         f"torch.int8 (or 'int8', 'int8:a8') or 'int4[:g<group>][:asym][:a8]' (group a multiple of "
                         f"32 up to 4096, default 32), not {weights_dtype!r}")
    if compute_dtype not in (None, torch.float32, torch.bfloat16):
        raise ValueError(f"kiln.trace: compute_dtype must be None, torch.float32 or torch.bfloat16, "
                         f"not {compute_dtype!r}")
    if quant is not None and compute_dtype == torch.bfloat16:
        raise ValueError("kiln.trace: quantized weights_dtype and compute_dtype=torch.bfloat16 "
                         "cannot be combined (quantized weights compute in fp32)")
    # weights_bf16 carries the weights' choice on: True (bf16) or a quant tuple.
    weights_bf16 = quant if quant is not None else weights_dtype == torch.bfloat16
    compute_bf16 = compute_dtype == torch.bfloat16
    args = as_tuple(example_inputs)
    t0 = time.perf_counter()
    with compile_progress(type(model).__name__):
        return _trace(model, args, example_kwargs, fallback, weights_bf16, compute_bf16,
                      dynamic_shapes, t0, target)


def _trace(model, args, example_kwargs, fallback, weights_bf16, compute_bf16, dynamic_shapes, t0,
           target):
    """kiln.trace's work, its arguments checked, under a compile progress bar."""
    modes = {}
    if isinstance(model, torch.nn.Module):
        was_training = model.training
        # Each module's own mode, restored as it was: model.train() would put
        # a submodule the user keeps in eval (a frozen norm, a backbone) in
        # training mode too.
        modes = {m: m.training for m in model.modules()}
        if was_training and _mode_dependent(model):
            warnings.warn(f"kiln.trace compiles for inference: {type(model).__name__} is in training mode "
                          f"and is traced as after model.eval() ({', '.join(_mode_dependent(model))} "
                          f"behave differently). Call model.eval() first to silence this; train with "
                          f"torch.compile(model, backend=\"kiln\").", UserWarning,
                          stacklevel=3)  # kiln.trace's caller (through trace and _trace)

    def export(fast):
        compile_stage("export")
        if modes:
            model.eval()
        try:
            with torch.no_grad():
                return export_program(model, args, example_kwargs, dynamic_shapes, fast=fast)
        finally:
            for m, training in modes.items():
                m.training = training

    # torch.export's program as it is where kiln lowers it so (no
    # decomposition re-trace: kiln/training_ir.py); if that lowering fails,
    # the decomposed program, as always.
    ep = export(True)
    if getattr(ep, "kiln_training_ir", False):
        try:
            return _compile_exported(ep, type(model).__name__, False, weights_bf16, compute_bf16, target, t0)
        except (UnsupportedOpError, KilnError) as e:
            if log_enabled():
                print(f"kiln: lowering torch.export's program as it is failed ({e}); decomposing it",
                      file=sys.stderr)
        ep = export(False)
    return _compile_exported(ep, type(model).__name__, fallback, weights_bf16, compute_bf16, target, t0)


def _compile_exported(ep, name, fallback, weights_bf16, compute_bf16, target, t0):
    mutations = _mutations(ep)
    input_writes = bool(mutations) and all(kind == "USER_INPUT_MUTATION" for kind, _ in mutations)
    if fallback and mutations and not input_writes:
        # In-place updates of buffers (or effect tokens): the partitioned
        # module writes the new values back after each call, as eager does.
        return _trace_with_fallback(ep, name, weights_bf16, compute_bf16, target)
    compile_stage("lowering")
    try:
        # In-place updates of inputs only (a KV cache passed in): one kiln
        # graph, which writes the new values into the inputs' memory.
        ctx, names, out_spec = lower_exported(ep, input_writes=input_writes)
    except (UnsupportedOpError, KilnError):
        # KilnError too: a value kiln cannot hold (a float64 constant, say)
        # is refused while lowering; the partitioner leaves it to eager.
        if not fallback:
            raise
        return _trace_with_fallback(ep, name, weights_bf16, compute_bf16, target)
    compiled = compile_graph(ctx, weights_bf16, compute_bf16, target)
    if ctx.input_writes and log_enabled():
        n_in_place = sum(in_place for _, in_place in ctx.input_writes)
        print(f"kiln: the model writes {len(ctx.input_writes)} of its inputs: {n_in_place} in place (their memory "
              f"is the new value's), {len(ctx.input_writes) - n_in_place} copied in after the run", file=sys.stderr)
    mod = KilnModule(compiled, names, out_spec, name, time.perf_counter() - t0, writes=ctx.input_writes,
                     layout_inputs=ctx.layout_inputs, python_inputs=ctx.python_inputs)
    mod._kiln_keep = ctx.kept  # the bf16 matrices the model's constants borrow (lower_exported)
    return mod


def _mode_dependent(model):
    """Sorted names of the module types in `model` that compute differently
    in training mode: batch norm (batch statistics, running-stat updates)
    and dropout with p > 0."""
    kinds = set()
    for m in model.modules():
        if isinstance(m, _BatchNorm) or (isinstance(m, _DropoutNd) and m.p > 0):
            kinds.add(type(m).__name__)
    return sorted(kinds)


def _mutations(ep):
    """The exported program's leading outputs that update state in place:
    [(OutputKind name, target)] for buffer and user-input mutations."""
    return [(s.kind.name, s.target) for s in ep.graph_signature.output_specs if s.kind != OutputKind.USER_OUTPUT]


def _trace_with_fallback(ep, name, weights_bf16=False, compute_bf16=False, target=None):
    compile_stage("partitioning (eager fallback)")
    state, consts = ep.state_dict, getattr(ep, "constants", {}) or {}
    phs = [n for n in ep.graph.nodes if n.op == "placeholder"]
    specs = ep.graph_signature.output_specs
    mutated = {s.target for s in specs if s.kind == OutputKind.BUFFER_MUTATION}
    lifted, const_of, lifted_pos, user_pos = [], {}, {}, {}
    for spec, n in zip(ep.graph_signature.input_specs, phs):
        if spec.kind == InputKind.TOKEN:
            # Effect tokens order side-effecting ops (with_effects: linalg's
            # error checks, prints), which stay in eager; a token is a
            # placeholder value threaded through them.
            lifted.append(torch.empty(0))
            continue
        if spec.kind == InputKind.USER_INPUT:
            user_pos[spec.arg.name] = len(user_pos)
        else:
            t = state[spec.target] if spec.target in state else consts[spec.target]
            lifted_pos[spec.target] = len(lifted)
            lifted.append(t)
            if spec.target not in mutated:  # a buffer updated per call is an input, not a constant
                const_of[n.name] = t  # by name: partitioning copies the nodes
    # Where each mutation output is written back: ("lifted" | "input", position).
    writes = []
    for s in specs:
        if s.kind == OutputKind.BUFFER_MUTATION:
            writes.append(("lifted", lifted_pos[s.target]))
        elif s.kind == OutputKind.USER_INPUT_MUTATION:
            writes.append(("input", user_pos[s.target]))
        elif s.kind == OutputKind.TOKEN:
            writes.append(("token", 0))  # the final token: nothing to write
        elif s.kind != OutputKind.USER_OUTPUT:
            raise KilnError(f"the model mutates state kiln cannot write back ({s.kind.name.lower()} {s.target})")
    gm = ep.graph_module
    _partition.drop_size_range_asserts(gm)
    _partition.drop_metadata_asserts(gm, {n.name for spec, n in zip(ep.graph_signature.input_specs, phs)
                                          if spec.kind == InputKind.USER_INPUT})
    missing = unsupported_ops(gm)  # before partition(), which rewrites gm in place
    fused, pieces = _partition.partition(gm, lambda node: const_of.get(node.name) if node.op == "placeholder" else None,
                              what=name, weights_bf16=weights_bf16, compute_bf16=compute_bf16,
                              target=target, ranges=ep.range_constraints)
    guards = SizeGuards.of_exported(ep, [n for spec, n in zip(ep.graph_signature.input_specs, phs)
                                         if spec.kind == InputKind.USER_INPUT])
    return _partition.PartitionedModule(fused, lifted, pieces, ep.call_spec.out_spec, missing, name, writes,
                                        guards)


def analyze(model, example_inputs, *, example_kwargs=None, verbose=True):
    """Reports which of the model's ops kiln supports, in the spirit of
    torch_neuronx.analyze: ops by count, the supported share, each
    unsupported op with its reason and source line, and what CPU fallback
    would cost (the number of kiln pieces). Returns the report as a dict
    and prints it unless verbose=False."""
    report = analyze_model(model, as_tuple(example_inputs), example_kwargs)
    if verbose:
        print(report["text"])
    return report


def save(module, path, tokenizer=None, eos=None):
    """Writes a compiled module to a .kiln artifact. tokenizer: a Hugging
    Face fast tokenizer to store beside it (kiln.tokenizer), so that
    `kiln generate --text` takes and prints text (and, with its chat
    template, `--chat` prompts an instruct model); eos: the ids that end a
    generation there (default the tokenizer's eos_token_id)."""
    extra = {}
    if tokenizer is not None:
        extra[kiln_tokenizer.SECTION] = kiln_tokenizer.section_of(tokenizer, eos)
        chat = kiln_tokenizer.chat_section_of(tokenizer)
        if chat is not None:  # its chat template around one user message: kiln generate --chat
            extra[kiln_tokenizer.CHAT_SECTION] = chat
    data = module.to_bytes(extra or None)
    with open(os.fspath(path), "wb") as f:
        f.write(data)


def load(path, target=None):
    """Loads a .kiln artifact into a KilnModule (on target: "cpu",
    "reference"; None: $KILN_TARGET, else "cpu"). A corrupt or truncated
    file raises KilnError saying what is wrong."""
    return KilnModule.from_file(path, target)


def explain(module):
    """Prints and returns the compiled plan of a KilnModule."""
    text = module.explain()
    print(text)
    return text


if not _C.isa_env_known():
    warnings.warn(f"kiln: KILN_ISA={os.environ.get('KILN_ISA')!r} is not one of generic, avx2, avx512, "
                  "avx512_bf16, amx; it is ignored", RuntimeWarning)


def isa(level=None):
    """The instruction set kiln's kernels use; pass 'generic', 'avx2' or
    'avx512' to set it (for testing). KILN_ISA is a hard cap: a level above
    it (or above the CPU's) gives the highest allowed. An unknown name
    raises ValueError."""
    return _C.isa(level)


def machine(measure=False):
    """The machine as kiln sees it: CPU model, cores, caches, ISA levels
    present and in use, and peaks measured once by the C core and cached in
    a user file (``kiln info`` prints the same; ``measure=True`` measures
    again): fp32 FMA, bf16 and int8 dots where present (GFLOP/s, GOP/s) and
    read bandwidth (GB/s), each for 1 thread (``_1``) and all threads.
    ``busy`` is True when the figures look taken while the machine was busy
    (other processes used over 15 % of the cores meanwhile, or the figures
    contradict each other; docs/cli.md): such a cache is measured again, and
    merged, by the next process that reads it."""
    return _C.machine(bool(measure))


def profile(module, *inputs, runs=10):
    """Profiles a kiln-compiled module on ``inputs``: a report with, per
    node, its op, origin, time and share, FLOPs and bytes, GFLOP/s and GB/s
    against this machine's peaks (kiln.machine()), and whether it is compute-
    or memory-bound; ``export_chrome_trace(path)``, ``plot_roofline(path)``."""
    return _profile(module, *inputs, runs=runs)


def output_cache(idle_cap_bytes=None):
    """The cache large kiln outputs come from (see kiln.module): a dict of
    idle_bytes, idle_blocks, hits and misses. With an argument, first sets
    how many idle bytes it may keep (default 1 GiB); 0 frees them all."""
    stats = _C.output_cache(-1 if idle_cap_bytes is None else int(idle_cap_bytes))
    return dict(zip(("idle_bytes", "idle_blocks", "hits", "misses"), stats))


def empty_cache():
    """Frees the idle blocks of kiln's output cache, keeping its cap."""
    _C.output_cache(-1, True)

__all__ = ["trace", "analyze", "save", "load", "explain", "isa", "output_cache", "empty_cache",
           "machine", "profile", "compare", "compare_targets",
           "KilnModule", "KilnError", "UnsupportedOpError"]
