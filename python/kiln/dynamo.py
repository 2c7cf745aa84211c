"""The torch.compile backend: torch.compile(model, backend="kiln").

Registered through the ``torch_dynamo_backends`` entry point, so installing
kiln is enough. Dynamo hands over an FX graph of torch ops; AOTAutograd
lowers it to Core ATen (the same decompositions kiln.trace uses) and splits
forward from backward when training; kiln compiles both. Graphs kiln cannot compile (an unsupported op,
symbolic shapes) run in eager PyTorch instead, with a warning naming why.
"""

import warnings

import torch

from kiln.errors import KilnError


def _compile_fx(gm, example_inputs):
    from kiln.capture import lower_graph
    from kiln.module import KilnModule, compile_graph

    placeholders = []
    names = []
    for i, (n, ex) in enumerate(zip([n for n in gm.graph.nodes if n.op == "placeholder"], example_inputs)):
        if isinstance(ex, torch.Tensor):
            if any(not isinstance(s, int) for s in ex.shape):
                raise KilnError("symbolic shapes are not supported yet")
            placeholders.append(("input", n.name))
            names.append(n.name)
        else:
            placeholders.append(("python", ex))
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    flat = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    # Backward graphs return None for inputs that need no gradient.
    tensor_outs = [i for i, o in enumerate(flat) if o is not None]
    ctx = lower_graph(gm, placeholders, [flat[i] for i in tensor_outs])
    mod = KilnModule(compile_graph(ctx), names, None, "torch.compile")
    tensor_positions = [i for i, ex in enumerate(example_inputs) if isinstance(ex, torch.Tensor)]
    n_out = len(flat)

    def run(*args):
        got = mod.run_flat([args[i] for i in tensor_positions])
        if len(tensor_outs) == n_out:
            return got
        result = [None] * n_out
        for i, t in zip(tensor_outs, got):
            result[i] = t
        return result

    run._kiln_module = mod
    return run


def kiln_fw_compiler(gm, example_inputs):
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    # Dynamo compiles under a fake-tensor mode; kiln builds real constants.
    with unset_fake_temporarily():
        return _kiln_fw_compile(gm, example_inputs)


def _kiln_fw_compile(gm, example_inputs):
    from kiln.errors import UnsupportedOpError
    from kiln.partition import partition

    try:
        return _compile_fx(gm, example_inputs)
    except UnsupportedOpError:
        # Compile what kiln can; the rest runs eagerly between the pieces.
        fused, _ = partition(gm, what="torch.compile graph")
        return fused.forward
    except KilnError as e:
        warnings.warn(f"kiln: running this graph in eager PyTorch: {e}", stacklevel=2)
        return gm.forward


def kiln_backend(gm, example_inputs, **kwargs):
    """The torch.compile backend entry point."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    from kiln.capture import decomposition_table

    def fw(gm_, ex_):
        return make_boxed_func(kiln_fw_compiler(gm_, ex_))

    def bw(gm_, ex_):
        # Backward graphs are plain ATen graphs too; ops kiln lacks fall back.
        return make_boxed_func(kiln_fw_compiler(gm_, ex_))

    # Attention stays whole (see capture.decomposition_table); in training
    # its fused forward/backward ops run in eager through the fallback until
    # kiln has an attention backward kernel.
    return aot_autograd(fw_compiler=fw, bw_compiler=bw, decompositions=decomposition_table())(gm, example_inputs)
