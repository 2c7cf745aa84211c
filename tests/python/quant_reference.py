"""kiln's weight quantization rules (kiln_gemm.h) restated in torch,
independently of kiln: the reference the tests and the benchmark hold
weight-only quantized runs to (the eager model with each nn.Linear and
nn.Embedding weight replaced by its dequantized values).
  int8: per output channel, s = max|w| / 127 (1 if 0), q = clamp(round(w / s), -127, 127);
  int4 symmetric (llama.cpp q4_0's rule), per group of G input columns of
    one output row: m = the largest-magnitude element, d = bf16(m / -8),
    q = clamp(round(w / d), -8, 7) (0 if d == 0), weight q d;
  int4 asymmetric: lo = min(min w, 0), hi = max(max w, 0), s = bf16((hi - lo) / 15)
    (1 if 0), z = clamp(round(-lo / s), 0, 15), q = clamp(round(w / s) + z, 0, 15),
    weight (q - z) s;
  bf16() rounds to the nearest bfloat16 (ties to even), as .to(torch.bfloat16):
    int4 blobs keep their scales in 16 bits.
round() is half to even and every step is fp32, as in kiln's packer, so the
weights are the same bit for bit; a K that is not a multiple of G pads the
last group with zeros (which changes neither max nor min). kiln stores q as
an integer, whose zero has no sign: q + 0.0 makes round()'s -0.0 (a small
negative w) +0.0, so a zero weight is +0 times the scale, as kiln's (the
sign of a zero shows through 1 / w: seed 20072 graph 5517).
"""
import math

import torch
from torch import nn


def quantize_int8(w):
    s = w.abs().amax(dim=1, keepdim=True) / 127
    s = torch.where(s == 0, torch.ones_like(s), s)
    return (torch.round(w / s).clamp(-127, 127) + 0.0) * s


def quantize_int4(w, group, asym):
    n, k = w.shape
    kp = math.ceil(k / group) * group
    wp = torch.zeros(n, kp, dtype=torch.float32)
    wp[:, :k] = w
    g = wp.view(n, kp // group, group)
    if asym:
        lo = g.amin(-1, keepdim=True).clamp(max=0)
        hi = g.amax(-1, keepdim=True).clamp(min=0)
        s = ((hi - lo) / 15).to(torch.bfloat16).float()
        s = torch.where(s == 0, torch.ones_like(s), s)
        z = torch.round(-lo / s).clamp(0, 15)
        q = (torch.round(g / s) + z).clamp(0, 15)
        d = (q - z) * s
    else:
        m = g.gather(-1, g.abs().argmax(-1, keepdim=True))
        step = (m / -8).to(torch.bfloat16).float()
        safe = torch.where(step == 0, torch.ones_like(step), step)
        q = torch.where(step == 0, torch.zeros_like(g), torch.round(g / safe)).clamp(-8, 7) + 0.0
        d = q * step
    return d.reshape(n, kp)[:, :k].contiguous()


def dequantized(w, kind):
    if kind == "int8" or kind is torch.int8:
        return quantize_int8(w)
    parts = kind.split(":")
    group = next((int(p[1:]) for p in parts[1:] if p.startswith("g")), 32)
    return quantize_int4(w, group, "asym" in parts)


def with_dequantized_linears(model, kind):
    """A copy of model whose nn.Linear and nn.Embedding weights are their
    dequantized values (an embedding table's rows are quantized as a linear
    weight's output channels: the same rule; a tied weight once)."""
    import copy

    ref = copy.deepcopy(model)
    done = set()
    with torch.no_grad():
        for mod in ref.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)) and id(mod.weight) not in done:
                done.add(id(mod.weight))
                mod.weight.copy_(dequantized(mod.weight.detach().float(), kind))
    return ref


def quantize_activations(x, group=None):
    """kiln's int8-activation rule (weights_dtype "...:a8", kiln_gemm.h), in
    x's dtype: per row (group None: int8:a8) or per row and group of `group`
    along the last dimension (int4:a8; the last group zero-padded, which
    changes no maximum), scale s = max|x| / 127 (1 if 0), q = clamp(round(x
    / s), -127, 127), round half to even. Returns (q, s): q (..., K) and s
    (..., 1), or q (..., groups, group) and s (..., groups, 1); the
    activations kiln's GEMM reads are q * s."""
    if group is None:
        g = x
    else:
        k = x.shape[-1]
        kp = math.ceil(k / group) * group
        xp = torch.zeros(*x.shape[:-1], kp, dtype=x.dtype)
        xp[..., :k] = x
        g = xp.view(*x.shape[:-1], kp // group, group)
    s = g.abs().amax(-1, keepdim=True) / 127
    s = torch.where(s == 0, torch.ones_like(s), s)
    return torch.round(g / s).clamp(-127, 127), s
