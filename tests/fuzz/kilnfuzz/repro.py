"""Reproducer scripts: a failing program as a standalone Python file.

The script holds an nn.Module whose forward makes the program's ATen calls,
its parameters' and inputs' values (exactly, with the inputs' memory
layouts), and a main that compiles it with kiln, runs eager in float32 and
float64 and applies the fuzzer's tolerance rule (check.compare, copied in).
It exits 1 when kiln fails. Only torch and kiln are needed to run it.

How kiln compiles it: "trace" is kiln.trace; "export" lowers torch.export's
graph without the Core ATen decompositions (the ATen calls as written, which
is what the fuzzer's fast path gives kiln); "reference" is "export" on the
reference target; "compile" is torch.compile(backend="kiln") with one
training step, gradients compared.
"""

import inspect
import subprocess
import sys
import textwrap

import torch

from kilnfuzz import check, data, quant
from kilnfuzz.bf16 import PATHS as BF16_PATHS
from kilnfuzz.paths import _loss_weights, env_for
from kilnfuzz.program import SourceBuilder, _map_dtype, interpret

_COMPILERS = {
    "trace": '''\
def kiln_compile(model, xs):
    return kiln.trace(model, xs)
''',
    "export": '''\
def kiln_compile(model, xs):
    """The ATen calls as written, straight into kiln (no decompositions)."""
    from kiln.capture import lower_exported
    from kiln.module import KilnModule, compile_graph

    ctx, names, spec = lower_exported(torch.export.export(model, xs))
    return KilnModule(compile_graph(ctx), names, spec)
''',
    "compute": '''\
def kiln_compile(model, xs):
    return kiln.trace(model, xs, compute_dtype=torch.bfloat16)
''',
    "reference": '''\
def kiln_compile(model, xs):
    """The ATen calls as written, into kiln on its reference target."""
    from kiln.capture import lower_exported
    from kiln.module import KilnModule, compile_graph

    ctx, names, spec = lower_exported(torch.export.export(model, xs))
    return KilnModule(compile_graph(ctx, target="reference"), names, spec)
''',
}

_MAIN_INFERENCE = '''\
def main():
    model = Repro().eval()
    xs = inputs()
    with torch.no_grad():
        eager = model(*xs)
        model64, xs64 = Repro().double(), inputs(torch.float64)
        ref = model64(*xs64)
        noisy = []
        for k in range(2):  # float64 with float32-sized rounding noise: the rule's E
            with RoundingNoise([SALT, 11, k]):
                noisy.append(model64(*xs64))
        got = kiln_compile(model, xs)(*xs)
    bad = [why for j, (k, e, r) in enumerate(zip(got, eager, ref))
           if (why := compare(k, e, r, ACC[j], f"output {j}", [n[j] for n in noisy], MAG[j]))]
    print("\\n".join(bad) or "kiln agrees with eager")
    return 1 if bad else 0
'''

_MAIN_BF16 = '''\
def main():
    """The bf16 mode (tests/fuzz/kilnfuzz/bf16.py): MODE "bf16", the model in
    bf16; "autocast", in float32 under autocast; "compute", in float32 traced
    with compute_dtype=bf16 (judged against the bf16 model, its outputs
    rounded to bf16). All from bf16 values; eager and float64 are the rule's
    e and r."""
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if MODE == "autocast" else contextlib.nullcontext()
    low = torch.bfloat16 if MODE == "bf16" else torch.float32
    model, xs = Repro(low).to(low).eval(), inputs(low)
    record = LowPrecisionCalls()  # which calls eager ran in bf16 (under autocast, more than AUTOCAST_LOW's)
    with torch.no_grad():
        with ctx, record:
            eager = Repro(torch.bfloat16).to(torch.bfloat16)(*inputs(torch.bfloat16)) if MODE == "compute" \\
                else model(*xs)
        model64, xs64 = Repro(torch.float64).double(), inputs(torch.float64)
        ref = model64(*xs64)
        noisy = []
        for k in range(2):  # float64 with bf16-sized rounding noise: the rule's E
            with RoundingNoise([SALT, 11, k], EPS_BF16, *((AUTOCAST_LOW, record.calls) if MODE == "autocast" else ())):
                noisy.append(model64(*xs64))
        with ctx:
            got = kiln_compile(model, xs)(*xs)
    if MODE == "compute":
        got = [k.to(torch.bfloat16) if k.is_floating_point() else k for k in got]
    bad = [why for j, (k, e, r) in enumerate(zip(got, eager, ref))
           if (why := compare(k, e, r, ACC[j], f"output {j}", [n[j] for n in noisy], MAG[j], lowp=True))]
    print("\\n".join(bad) or "kiln agrees with eager")
    return 1 if bad else 0
'''

_MAIN_BF16_TRAINING = '''\
def train(dtype, compiled):
    """One step under autocast (float64: without), from bf16 values."""
    model = Repro(dtype).to(dtype)
    for p in model.parameters():
        p.requires_grad_(True)
    xs = [x.requires_grad_() if x.is_floating_point() else x for x in inputs(dtype)]
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype != torch.float64 else contextlib.nullcontext()
    with ctx:
        outs = (torch.compile(model, backend="kiln") if compiled else model)(*xs)
    loss = sum((o.to(dtype) * w.to(dtype)).sum() for o, w in zip(outs, LOSS_WEIGHTS) if w is not None)
    loss.backward()
    ts = list(model.parameters()) + [x for x in xs if x.is_floating_point()]
    return [o.detach() for o in outs], [t.grad if t.grad is not None else torch.zeros_like(t) for t in ts]


def main():
    ko, kg = train(torch.float32, True)
    with ContiguousBatchNormGrad():  # eager as the math has it (torch's batch-norm backward misreads some layouts)
        ro, rg = train(torch.float64, False)
    with ContiguousBatchNormGrad(), LowPrecisionCalls() as record:  # which calls eager ran in bf16
        eo, eg = train(torch.float32, False)
    noisy = []
    for k in range(2):  # float64 with bf16-sized rounding noise: the rule's E
        with ContiguousBatchNormGrad(), RoundingNoise([SALT, 13, k], EPS_BF16, AUTOCAST_LOW, record.calls):
            noisy.append(train(torch.float64, False))
    bad = [why for j, (k, e, r) in enumerate(zip(ko, eo, ro))
           if (why := compare(k, e, r, ACC[j], f"output {j}", [n[0][j] for n in noisy], MAG[j], lowp=True))]
    bad += [why for j, (k, e, r) in enumerate(zip(kg, eg, rg))
            if (why := compare(k, e, r, 2 * max(ACC) + 1, f"gradient {j}", [n[1][j] for n in noisy], lowp=True))]
    print("\\n".join(bad) or "kiln agrees with eager")
    return 1 if bad else 0
'''

_MAIN_TRAINING = '''\
def train(dtype, compiled):
    model = Repro().to(dtype)
    for p in model.parameters():
        p.requires_grad_(True)
    xs = [x.requires_grad_() if x.is_floating_point() else x for x in inputs(dtype)]
    outs = (torch.compile(model, backend="kiln") if compiled else model)(*xs)
    loss = sum((o * w.to(dtype)).sum() for o, w in zip(outs, LOSS_WEIGHTS) if w is not None)
    loss.backward()
    ts = list(model.parameters()) + [x for x in xs if x.is_floating_point()]
    return [o.detach() for o in outs], [t.grad if t.grad is not None else torch.zeros_like(t) for t in ts]


def main():
    ko, kg = train(torch.float32, True)
    with ContiguousBatchNormGrad():  # eager as the math has it (torch's batch-norm backward misreads some layouts)
        (eo, eg), (ro, rg) = train(torch.float32, False), train(torch.float64, False)
    bad = [why for j, (k, e, r) in enumerate(zip(ko, eo, ro))
           if (why := compare(k, e, r, ACC[j], f"output {j}", (), MAG[j]))]
    bad += [why for j, (k, e, r) in enumerate(zip(kg, eg, rg))
            if (why := compare(k, e, r, 2 * max(ACC) + 1, f"gradient {j}"))]
    print("\\n".join(bad) or "kiln agrees with eager")
    return 1 if bad else 0
'''


def _literal(t, dtype_src=None):
    """torch.tensor(...) source for a contiguous tensor's exact values
    (dtype_src: the dtype argument's source, for float tensors)."""
    vals = t.flatten().tolist()
    if t.dtype == torch.bool:
        body = ", ".join("1" if v else "0" for v in vals)
    elif t.is_floating_point():
        body = ", ".join(repr(v) if v == v and abs(v) != float("inf") else ("nan" if v != v else
                         ("inf" if v > 0 else "-inf")) for v in vals)
    else:
        body = ", ".join(str(v) for v in vals)
    body = "\n".join(textwrap.wrap(body, 100, initial_indent=" " * 8, subsequent_indent=" " * 8))
    dtype = dtype_src if dtype_src and t.is_floating_point() else t.dtype
    return f"torch.tensor([\n{body}], dtype={dtype}).reshape({tuple(t.shape)})"


def _leaf_source(leaf, dtype_src=None, bf16=False):
    """bf16: its values rounded to bf16 (the bf16 mode's leaves)."""
    values = leaf.values.to(torch.bfloat16).float() if bf16 and leaf.values.is_floating_point() else leaf.values
    src = _literal(values.contiguous(), dtype_src)
    if leaf.place is not None:
        fn, args = leaf.place
        src = f"{fn.__name__}({src}, {', '.join(map(repr, args))})"
    return src


class _FloatDtypeSource(SourceBuilder):
    """SourceBuilder writing the program's float32 dtype arguments (a cast's)
    as self.fdt, the float dtype the module computes in (bf16 mode)."""

    def __init__(self):
        super().__init__()
        self.fdt = self.bind("self.fdt", torch.float32)

    def call(self, op, *args, **kwargs):
        return super().call(op, *_map_dtype(args, self.fdt), **_map_dtype(kwargs, self.fdt))


class _QuantSourceBuilder(quant.QuantSource, SourceBuilder):
    pass


def script(res, outcome, header, how):
    lowp = outcome.path in BF16_PATHS
    sb = _FloatDtypeSource() if lowp else _QuantSourceBuilder() if how == "quant" else SourceBuilder()
    handles = [sb.bind(f"self.{leaf.name}" if leaf.role == "param" else leaf.name, leaf.tensor)
               for leaf in res.leaves]
    if how == "quant":
        sb.setup_quant([h for h, leaf in zip(handles, res.leaves) if leaf.role == "param"])
    outs = interpret(res, sb, handles)
    init = []
    for leaf in res.leaves:
        if leaf.role != "param":
            continue
        if leaf.tensor.is_floating_point() and leaf.spec.trainable:
            init.append(f"self.{leaf.name} = torch.nn.Parameter({_leaf_source(leaf, bf16=lowp)}, "
                        "requires_grad=False)")
        else:
            init.append(f"self.register_buffer({leaf.name!r}, {_leaf_source(leaf, bf16=lowp)})")
    inputs = [leaf for leaf in res.leaves if leaf.role == "input"]
    lines = [f'"""{header}', "", textwrap.fill(f"What fails: {outcome.detail}", 100), '"""', "",
             *(["import contextlib"] if lowp else []), *(["import math"] if how == "quant" else []),
             *(["import os"] if lowp or env_for(outcome.path) else []),
             "import sys", "", "import numpy as np",
             "import torch",
             "from torch.utils._python_dispatch import TorchDispatchMode", "from torch.utils._pytree import tree_map",
             "", *[f"os.environ[{k!r}] = {v!r}  # the path's test knob (tests/fuzz/kilnfuzz/paths.py: env_for)"
                   for k, v in env_for(outcome.path).items()],
             "import kiln", "", "aten = torch.ops.aten", "inf, nan = float('inf'), float('nan')", ""]
    lines += ["# The fuzzer's tolerance rule (tests/fuzz/kilnfuzz/check.py).",
              f"EPS32, FACTOR_E, FACTOR_L = {check.EPS32!r}, {check.FACTOR_E!r}, {check.FACTOR_L!r}",
              f"EPS_BF16 = {check.EPS_BF16!r}", f"AUTOCAST_LOW = {set(check.AUTOCAST_LOW)!r}",
              f"SALT = {res.program.salt}", ""]
    lines += [inspect.getsource(fn) + "\n" for fn in (check.RoundingNoise, check.LowPrecisionCalls,
                                                      check.ContiguousBatchNormGrad, check.spread, check.compare)]
    if how == "quant":
        import quant_reference as qr

        lines += ["# kiln's quantization rules (tests/python/quant_reference.py, tests/fuzz/kilnfuzz/quant.py)."]
        lines += [inspect.getsource(fn) + "\n" for fn in (qr.quantize_int8, qr.quantize_int4, qr.dequantized,
                                                           qr.quantize_activations, quant.qw, quant.qx)]
        mode = quant.mode_of(outcome.path)
        lines += [f"MODE = {'torch.int8' if mode is torch.int8 else repr(mode)}",
                  f"QUANT = {quant.parse(quant.mode_name(mode))!r}  # (weights' rule, int8 activations, their group)",
                  ""]
    used = {leaf.place[0] for leaf in inputs if leaf.place is not None}
    lines += [inspect.getsource(fn) + "\n" for fn in data.LAYOUT_FUNCTIONS if fn in used]
    if lowp:
        lines += ["class Repro(torch.nn.Module):", "    def __init__(self, fdt=torch.float32):",
                  "        super().__init__()", "        self.fdt = fdt  # the dtype of the program's casts to float"]
    elif how == "quant":
        lines += ["class Repro(torch.nn.Module):", "    def __init__(self, quant=None):", "        super().__init__()",
                  "        self.quant = quant  # None: the program; QUANT: with kiln's quantization rules"]
    else:
        lines += ["class Repro(torch.nn.Module):", "    def __init__(self):", "        super().__init__()"]
    lines += [textwrap.indent(s, " " * 8) for s in init] or []
    lines += ["", f"    def forward(self{''.join(', ' + leaf.name for leaf in inputs)}):"]
    lines += ["        " + ln for ln in sb.lines]
    lines += [f"        return ({', '.join(outs)},)", "", "",
              "def inputs(dtype=torch.float32):",
              '    """The inputs, float ones in `dtype`, with the fuzzer\'s memory layouts."""']
    lines += [textwrap.indent(f"{leaf.name} = {_leaf_source(leaf, 'dtype', lowp)}", " " * 4) for leaf in inputs]
    lines += [f"    return ({''.join(leaf.name + ', ' for leaf in inputs)})", ""]
    lines += [f"ACC = {[res.accs[r] for r in res.outputs]!r}  # accumulation lengths (the tolerance's L)",
              f"MAG = {[res.mags[r] for r in res.outputs]!r}  # largest values they come from (the rule's A)", ""]
    if how == "compile":
        weights = _loss_weights(res, [res.val(r) for r in res.outputs])
        lines += ["LOSS_WEIGHTS = [" + ", ".join("None" if w is None else _literal(w) for w in weights) + "]", ""]
        lines += [_MAIN_BF16_TRAINING if lowp else _MAIN_TRAINING]
    elif how == "quant":
        lines += [quant.MAIN_QUANT]
    elif lowp:
        mode = {"bf16-autocast": "autocast", "bf16-compute": "compute"}.get(outcome.path, "bf16")
        lines += [f"MODE = {mode!r}", "", _COMPILERS["compute" if mode == "compute" else how], "", _MAIN_BF16]
    else:
        lines += [_COMPILERS[how], "", _MAIN_INFERENCE]
    lines += ["", 'if __name__ == "__main__":', "    sys.exit(main())", ""]
    return "\n".join(lines)


def reproduces(path, timeout=300):
    """True when the script at `path` fails (non-zero exit) on its own."""
    try:
        p = subprocess.run([sys.executable, path], capture_output=True, timeout=timeout, text=True)
    except subprocess.TimeoutExpired:
        return True
    return p.returncode != 0
