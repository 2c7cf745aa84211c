"""Weights quantized the PyTorch way: quantized_decomposed's dequantize ops
(torch/ao/quantization/fx/_decomposed.py) on constant integers, as a
checkpoint saved quantized, or torch.ao's PT2E convert, leaves them before
a linear or an embedding. The handlers only hand the checkpoint's
integers, scales and zero points to C as one constant
(kiln_graph_add_constant_quant); the CPU target then runs each linear on
those very integers where its int8 / int4 blobs hold them exactly
(kiln_gemm_quant_ints_form in src/kernels/gemm), else on the dequantized
values, and kiln.explain says which and why. Nothing is quantized again.

A dequantize kiln cannot hold this way runs in eager (the CPU fallback,
with the reason in kiln.explain): of a value that is not a constant
(PT2E's activations), along an axis other than 0 (the output channels of
an nn.Linear or embedding weight), or to a dtype other than float32.

The ops exist only once torch.ao.quantization.fx._decomposed is imported,
so they are registered by name.

torchao (0.18 with torch 2.13) quantizes through tensor subclasses, not
these ops: Int8WeightOnlyConfig exports as mm(x, int8_weight.t().float())
* scale + bias, which the compiler's constant folding maps in C
(kiln_fold_is_int_weight_cast in src/compiler/kiln_pass_fold.c: the cast
weight held as its integers with unit scales, on the int8 kernels).
"""

import torch

from kiln.errors import KilnError, Unsupported
from kiln.optable.registry import register_by_name


def _out_dtype(dtype):
    if dtype not in (None, torch.float32):
        raise Unsupported(f"dequantize to {dtype} (kiln holds quantized weights as float32 values)")


def _quant_constant(ctx, n, q, scales, zeros, group):
    try:
        return ctx.quant_constant(ctx.value(q), scales, zeros, group, name=getattr(q, "name", None))
    except KilnError as e:
        raise Unsupported(str(e)) from None


@register_by_name("quantized_decomposed.dequantize_per_channel.default")
def _dequantize_per_channel(ctx, n):
    q, scales, zeros, axis = n.args[:4]
    _out_dtype(n.kwargs.get("out_dtype"))
    rank = len(n.args[0].meta["val"].shape)
    if (axis + rank if axis < 0 else axis) != 0:
        raise Unsupported(f"dequantize_per_channel along axis {axis}: kiln holds a checkpoint's scales "
                          f"along axis 0 (a weight's output channels)")
    return _quant_constant(ctx, n, q, ctx.value(scales), -1 if zeros is None else ctx.value(zeros), 0)


@register_by_name("quantized_decomposed.dequantize_per_channel_group.default")
def _dequantize_per_channel_group(ctx, n):
    q, scales, zeros = n.args[:3]
    group = n.args[6] if len(n.args) > 6 else n.kwargs.get("group_size", 128)
    _out_dtype(n.args[7] if len(n.args) > 7 else n.kwargs.get("output_dtype", torch.float32))
    cols = n.args[0].meta["val"].shape[-1]
    if group > cols and scales.meta["val"].shape[-1] == 1:
        group = cols  # torch's rule: one group per row (GPTQ's single column)
    return _quant_constant(ctx, n, q, ctx.value(scales), -1 if zeros is None else ctx.value(zeros), group)


@register_by_name("quantized_decomposed.dequantize_per_tensor.default")
def _dequantize_per_tensor(ctx, n):
    q, scale, zero = n.args[:3]
    _out_dtype(n.kwargs.get("out_dtype"))
    # torch multiplies a float32 tensor by the Python float in float32.
    return _quant_constant(ctx, n, q, ctx.scalar(float(scale), torch.float32),
                           ctx.scalar(int(zero), torch.int64), 0)


@register_by_name("quantized_decomposed.dequantize_per_tensor.tensor")
def _dequantize_per_tensor_tensor(ctx, n):
    q, scale, zero = n.args[:3]
    _out_dtype(n.kwargs.get("out_dtype"))
    return _quant_constant(ctx, n, q, ctx.value(scale), ctx.value(zero), 0)
