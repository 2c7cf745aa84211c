#!/usr/bin/env python3
"""kiln against eager PyTorch op by op: each case a one-op (or few-op)
module traced alone, timed interleaved with eager on the same inputs, the
ratio sorted worst first. It finds the kernels a model would pay for where
kiln is far behind eager (a reduction walked element by element, a gather
copying 4 bytes a call); model benchmarks hide them when the model is made
of GEMMs. Inputs stay in the caches here, and one call of a small op is
mostly kiln's fixed cost (tens of microseconds), so ratios near 1 say
little; a ratio under 0.2 is a kernel to look at.

    .venv/bin/python bench/ops_vs_eager.py [--threads 2] [--only a,b] [--rounds 5]
"""
import argparse
import statistics
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln

warnings.filterwarnings("ignore")


def cases():
    g = torch.Generator().manual_seed(0)
    X4 = torch.randn(8, 64, 56, 56, generator=g)
    X3 = torch.randn(8, 128, 768, generator=g)
    X2 = torch.randn(1024, 1024, generator=g)
    I = torch.randint(0, 1000, (8, 128), generator=g)
    table = {
        "relu4": (lambda x: torch.relu(x), (X4,)),
        "gelu3": (lambda x: F.gelu(x), (X3,)),
        "silu3": (lambda x: F.silu(x), (X3,)),
        "softmax3": (lambda x: torch.softmax(x, -1), (X3,)),
        "softmax_dim1": (lambda x: torch.softmax(x, 1), (X3,)),
        "logsoftmax3": (lambda x: torch.log_softmax(x, -1), (X3,)),
        "layernorm3": (lambda x: F.layer_norm(x, (768,)), (X3,)),
        "sum_last": (lambda x: x.sum(-1), (X3,)),
        "sum_mid": (lambda x: x.sum(1), (X3,)),
        "mean_hw": (lambda x: x.mean((2, 3)), (X4,)),
        "amax_last": (lambda x: x.amax(-1), (X3,)),
        "argmax_last": (lambda x: x.argmax(-1), (X3,)),
        "var_last": (lambda x: x.var(-1), (X3,)),
        "cumsum_last": (lambda x: x.cumsum(-1), (X3,)),
        "transpose_copy": (lambda x: x.transpose(1, 2).contiguous(), (X3,)),
        "permute4": (lambda x: x.permute(0, 2, 3, 1).contiguous(), (X4,)),
        "cat": (lambda x: torch.cat([x, x * 2], 1), (X4,)),
        "add_bcast": (lambda x: x + x.mean(1, keepdim=True), (X4,)),
        "maxpool2": (lambda x: F.max_pool2d(x, 2), (X4,)),
        "maxpool3s2": (lambda x: F.max_pool2d(x, 3, 2, 1), (X4,)),
        "avgpool2": (lambda x: F.avg_pool2d(x, 2), (X4,)),
        "adaptive_avg": (lambda x: F.adaptive_avg_pool2d(x, 1), (X4,)),
        "upsample2": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (X4[:2],)),
        "bilinear2": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (X4[:2],)),
        "batchnorm_eval": (None, (X4,)),
        "groupnorm": (lambda x: F.group_norm(x, 8), (X4,)),
        "embedding": (None, (I,)),
        "topk": (lambda x: torch.topk(x, 5, -1).values, (X3,)),
        "sort": (lambda x: torch.sort(x, -1).values, (X3[:1],)),
        "where": (lambda x: torch.where(x > 0, x, x * 0.1), (X3,)),
        "exp": (lambda x: torch.exp(x), (X3,)),
        "tanh": (lambda x: torch.tanh(x), (X3,)),
        "pow2": (lambda x: x.pow(2), (X3,)),
        "rsqrt": (lambda x: torch.rsqrt(x.abs() + 1), (X3,)),
        "matmul_bmm": (lambda x: x @ x.transpose(-1, -2), (X3[:, :, :64].contiguous(),)),
        "index_select": (lambda x: x[:, ::2], (X3,)),
        "gather": (lambda x: torch.gather(x, -1, torch.zeros(8, 128, 4, dtype=torch.long)), (X3,)),
        "clamp": (lambda x: x.clamp(-1, 1), (X3,)),
        "dropout_eval": (lambda x: F.dropout(x, 0.1, training=False), (X3,)),
        "pad": (lambda x: F.pad(x, (1, 1, 1, 1)), (X4,)),
        "conv_dw": (None, (X4,)),
        "conv1x1": (None, (X4,)),
        "conv3x3": (None, (X4[:2],)),
        "convT": (None, (X4[:2],)),
        "linear": (None, (X3,)),
        "norm_l2": (lambda x: F.normalize(x, dim=-1), (X3,)),
        "flip": (lambda x: x.flip(-1), (X3,)),
        "roll": (lambda x: x.roll(3, -1), (X3,)),
        "tril": (lambda x: torch.tril(x), (X2,)),
        "masked_fill": (lambda x: x.masked_fill(x > 1, 0.0), (X3,)),
        "index_select0": (lambda x: x.index_select(1, torch.arange(0, 128, 2)), (X3,)),
        "scatter_add": (lambda x: torch.zeros(8, 16, 768).scatter_add(1, (torch.arange(128) % 16).view(1, 128, 1).expand(8, 128, 768), x), (X3,)),
        "index_add": (lambda x: torch.zeros(16, 128, 768).index_add(0, torch.arange(8) * 2, x), (X3,)),
        "einsum_bhqk": (lambda x: torch.einsum("bqd,bkd->bqk", x[:, :, :64], x[:, :, 64:128]), (X3,)),
        "conv1d": (None, (X3[:, :, :256].contiguous(),)),
        "instance_norm": (lambda x: F.instance_norm(x), (X4,)),
        "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), (X4,)),
        "unfold": (lambda x: F.unfold(x[:1], 3, padding=1), (X4,)),
        "reflect_pad": (lambda x: F.pad(x, (2, 2, 2, 2), mode="reflect"), (X4,)),
        "cumsum0": (lambda x: x.cumsum(0), (X3,)),
        "argmax1": (lambda x: x.argmax(1), (X3,)),
        "std_last": (lambda x: x.std(-1), (X3,)),
        "logsumexp": (lambda x: torch.logsumexp(x, -1), (X3,)),
        "max_dim": (lambda x: torch.max(x, 1).values, (X3,)),
        "min_dim_idx": (lambda x: torch.min(x, -1).indices, (X3,)),
        "sort1": (lambda x: torch.sort(x, 1).values, (X3[:1],)),
        "isnan_any": (lambda x: torch.isnan(x).any(), (X3,)),
        "nan_to_num": (lambda x: torch.nan_to_num(x), (X3,)),
        "round": (lambda x: torch.round(x), (X3,)),
        "remainder": (lambda x: torch.remainder(x, 0.7), (X3,)),
        "erf": (lambda x: torch.erf(x), (X3,)),
        "atan2": (lambda x: torch.atan2(x, x + 1), (X3,)),
        "lerp": (lambda x: torch.lerp(x, x * 2, 0.3), (X3,)),
        "repeat": (lambda x: x.repeat(1, 2, 1), (X3,)),
        "repeat_interleave": (lambda x: x.repeat_interleave(2, dim=1), (X3,)),
        "expand_copy": (lambda x: x[:, :1].expand(8, 128, 768).contiguous(), (X3,)),
        "triu": (lambda x: torch.triu(x, 1), (X2,)),
        "stack": (lambda x: torch.stack([x, x], 1), (X3,)),
        "chunk_cat": (lambda x: torch.cat(x.chunk(4, -1)[::-1], -1), (X3,)),
        "softplus": (lambda x: F.softplus(x), (X3,)),
        "mish": (lambda x: F.mish(x), (X3,)),
        "hardswish": (lambda x: F.hardswish(x), (X3,)),
        "hardtanh": (lambda x: F.hardtanh(x), (X3,)),
        "relu6": (lambda x: F.relu6(x), (X3,)),
        "elu": (lambda x: F.elu(x), (X3,)),
        "leaky": (lambda x: F.leaky_relu(x, 0.1), (X3,)),
        "logsigmoid": (lambda x: F.logsigmoid(x), (X3,)),
        "glu": (lambda x: F.glu(x, -1), (X3,)),
        "cos_sim": (lambda x: F.cosine_similarity(x, x.flip(1), -1), (X3,)),
        "cdist": (lambda x: torch.cdist(x[0], x[1]), (X3,)),
        "outer": (lambda x: torch.outer(x[0, 0], x[0, 1]), (X3,)),
        "layer_norm_w": (None, (X3,)),
        "rms_norm": (lambda x: F.rms_norm(x, (768,)), (X3,)),
        "gn32": (lambda x: F.group_norm(x, 32), (X4,)),
        "avgpool3s1": (lambda x: F.avg_pool2d(x, 3, 1, 1), (X4,)),
        "adaptive_max": (lambda x: F.adaptive_max_pool2d(x, 7), (X4,)),
        "mean_dim0": (lambda x: x.mean(0), (X3,)),
        "sum_01": (lambda x: x.sum((0, 2)), (X3,)),
        "amax_mid": (lambda x: x.amax(1), (X3,)),
        "prod_last": (lambda x: x.prod(-1), (X3[:, :, :16],)),
        "where_bcast": (lambda x: torch.where(x[:, :1] > 0, x, 0.0), (X3,)),
        "eq_sum": (lambda x: (x > 0).sum(-1), (X3,)),
        "bool_mask_mul": (lambda x: x * (x > 0).float(), (X3,)),
        "div_scalar": (lambda x: x / 3.0, (X3,)),
        "sigmoid_mul": (lambda x: x * torch.sigmoid(x), (X3,)),
        "matmul_vec": (lambda x: x @ x[0, 0], (X3,)),
    }
    modules = {"batchnorm_eval": nn.BatchNorm2d(64), "embedding": nn.Embedding(1000, 768),
               "conv_dw": nn.Conv2d(64, 64, 3, padding=1, groups=64), "conv1x1": nn.Conv2d(64, 128, 1),
               "conv3x3": nn.Conv2d(64, 64, 3, padding=1), "convT": nn.ConvTranspose2d(64, 32, 2, 2),
               "linear": nn.Linear(768, 768), "conv1d": nn.Conv1d(128, 128, 3, padding=1),
               "layer_norm_w": nn.LayerNorm(768)}
    return table, modules


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def median_call(f, args, n):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    only = set(filter(None, args.only.split(",")))
    table, modules = cases()
    rows = []
    for name, (fn, inputs) in table.items():
        if only and name not in only:
            continue
        model = (modules.get(name) or Fn(fn)).eval()
        try:
            with torch.no_grad():
                compiled = kiln.trace(model, inputs)
                for f in (model, compiled):
                    f(*inputs)
                te, tk = [], []
                for _ in range(args.rounds):  # interleaved: both see the same machine
                    te.append(median_call(model, inputs, 10))
                    tk.append(median_call(compiled, inputs, 10))
            e, k = statistics.median(te), statistics.median(tk)
            rows.append((e / k, name, f"{e * 1e3:.3f}", f"{k * 1e3:.3f}", f"{e / k:.2f}x", ""))
        except Exception as ex:  # a case kiln cannot trace: say so, go on
            rows.append((-1.0, name, "-", "-", "-", str(ex).splitlines()[0][:80]))
    print(f"| op | eager ms | kiln ms | eager / kiln | note |  ({args.threads} threads, medians)")
    print("|---|---:|---:|---:|---|")
    for _, name, e, k, r, note in sorted(rows):
        print(f"| {name} | {e} | {k} | {r} | {note} |")


if __name__ == "__main__":
    main()
