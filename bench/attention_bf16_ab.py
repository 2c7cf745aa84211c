"""A/B of bf16 attention in whole models: kiln.trace(..., compute_dtype=bf16)
with attention in fp32 (KILN_ATTN_BF16=off, the compile before bf16
attention) against attention in bf16, and kiln fp32 beside them, on the
bench's MiniLM batch 8 and BERT-base (bench/models.py). Both compiles live in
one process and are timed in interleaved rounds; each figure is the fastest
call (the machine is shared: the fastest call is the one nobody interrupted),
and the cosine of each output to eager fp32's.

Usage: .venv/bin/python bench/attention_bf16_ab.py [--threads 1,2] [--rounds 12] [--calls 5]
       [--models minilm_b8,bert_base]
"""

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln  # noqa: E402
import models  # noqa: E402


def fastest(fn, args, calls):
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--models", default="minilm_b8,bert_base")
    opt = ap.parse_args()
    for name in opt.models.split(","):
        model, args = models.MODELS[name].build()
        with torch.no_grad():
            want = model(*args)
        os.environ["KILN_ATTN_BF16"] = "off"
        before = kiln.trace(model, args, compute_dtype=torch.bfloat16)
        os.environ.pop("KILN_ATTN_BF16")
        after = kiln.trace(model, args, compute_dtype=torch.bfloat16)
        fp32 = kiln.trace(model, args)
        assert "compute=bf16" in after.explain() and "compute=bf16" not in before.explain()
        cos = {k: cosine(m(*args), want) for k, m in (("fp32", fp32), ("bf16 attn fp32", before),
                                                      ("bf16 attn bf16", after))}
        for t in (int(x) for x in opt.threads.split(",")):
            torch.set_num_threads(t)  # kiln's kernels run on torch's threads (kiln.__init__)
            best = {"fp32": float("inf"), "bf16 attn fp32": float("inf"), "bf16 attn bf16": float("inf")}
            mods = {"fp32": fp32, "bf16 attn fp32": before, "bf16 attn bf16": after}
            for m in mods.values():
                m(*args)
            for r in range(opt.rounds):
                keys = list(mods)
                keys = keys[r % 3:] + keys[:r % 3]
                for k in keys:
                    best[k] = min(best[k], fastest(mods[k], args, opt.calls))
            print(f"{name} threads {t}: " + ", ".join(
                f"{k} {best[k] * 1e3:.2f} ms (cos {cos[k]:.6f})" for k in best) +
                f"; bf16 attention {best['bf16 attn fp32'] / best['bf16 attn bf16']:.3f}x the fp32-attention bf16 compile",
                flush=True)


if __name__ == "__main__":
    main()
