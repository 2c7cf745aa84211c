#!/usr/bin/env python3
"""Batched decode from C: tokens/s when B prompts decode together, kiln
beside llama.cpp, on one machine in one run.

    .venv/bin/python bench/batch_decode.py [--model gen_llama] [--batches 1,2,4]
        [--weights fp32,int8:a8,int4:g128:a8] [--threads 2] [--rounds 3]
        [--prompt 128] [--new 64] [--no-llamacpp] [--out FILE.json]

kiln: kiln.llm.StaticCacheStep(model, prompt + new + 16, batch=B) traced
once per weights and B, saved, and run by `kiln generate` (the C runtime
alone) with B random prompts of --prompt tokens, --new decode steps,
greedy; its decode figure is B / the median step. llama.cpp:
llama-batched-bench on the same model converted to GGUF (f32, q8_0, q4_0,
as bench/llamacpp.py makes them), -npp prompt -ntg new -npl the batches,
the same threads; its S_TG (decode tokens/s over the batch). Rounds
interleave every configuration; the table gives medians. Decode is bound
by reading the weights once per step, whatever B: tokens/s should grow
nearly B-fold until the GEMMs turn compute-bound."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KILN_CLI = HERE.parent / "build" / "src" / "tools" / "kiln"
# Each kiln weights setting and the llama.cpp type it is held against.
PAIRS = {"fp32": "f32", "int8:a8": "q8_0", "int4:g128:a8": "q4_0", "int4:a8": "q4_0", "int8": "q8_0",
         "int4": "q4_0"}


def kiln_step(model, wd, batch, prompt, new, work):
    import torch
    import kiln
    step = kiln.llm.StaticCacheStep(model, prompt + new + 16, batch=batch)
    ids = torch.randint(3, model.config.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(7))
    path = work / f"step-{wd}-b{batch}.kiln".replace(":", "-")
    kiln.save(step.trace(ids, **({} if wd == "fp32" else {"weights_dtype": wd})), path)
    return path, ids


def kiln_decode_tps(path, ids, new, threads):
    args = [a for row in ids.tolist() for a in ("--prompt", ",".join(map(str, row)))]
    r = subprocess.run([str(KILN_CLI), "generate", str(path), *args, "--max-new-tokens", str(new + 1),
                        "--threads", str(threads)], capture_output=True, text=True, check=True)
    m = re.search(r"decode ([\d.]+) ms per (?:token|step)", r.stderr)
    return ids.shape[0] * 1e3 / float(m.group(1))


def llamacpp_decode_tps(bindir, gguf, batches, prompt, new, threads):
    """{B: S_TG} from one llama-batched-bench run over every B."""
    ctx = max(batches) * (prompt + new) + 256
    r = subprocess.run([str(bindir / "llama-batched-bench"), "-m", str(gguf), "-c", str(ctx), "-b", "2048",
                        "-ub", "512", "-npp", str(prompt), "-ntg", str(new), "-npl", ",".join(map(str, batches)),
                        "-t", str(threads), "-tb", str(threads), "--output-format", "jsonl"],
                       capture_output=True, text=True)
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            if "speed_tg" in rec:
                out[int(rec["pl"])] = float(rec["speed_tg"])
    if not out:
        raise RuntimeError(f"llama-batched-bench printed no results: {r.stderr[-300:]}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gen_llama")
    ap.add_argument("--batches", default="1,2,4")
    ap.add_argument("--weights", default="fp32,int8:a8,int4:g128:a8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    torch.set_num_threads(args.threads)
    import llamacpp
    import models
    batches = [int(b) for b in args.batches.split(",")]
    weights = args.weights.split(",")
    model = getattr(models, llamacpp.MODEL_BUILDERS[args.model])()[0]
    work = Path(tempfile.mkdtemp(prefix="kiln-batch-"))
    res = {"machine": llamacpp.machine(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "params": vars(args), "kiln": {}, "llamacpp": {}}
    try:
        steps = {}
        for wd in weights:
            for b in batches:
                print(f"tracing {args.model} {wd} batch {b}", flush=True)
                steps[wd, b] = kiln_step(model, wd, b, args.prompt, args.new, work)
        ggufs, bindir = {}, None
        if not args.no_llamacpp:
            try:
                cache = llamacpp.default_cache()
                bindir, _ = llamacpp.build_llamacpp(cache)
                ggufs = llamacpp.make_ggufs(model, llamacpp.llamacpp_source(cache), bindir, work, cache / "logs",
                                            name=args.model)
            except llamacpp.Unavailable as e:
                res["llamacpp_na"] = str(e)
        kinds = sorted({PAIRS[w] for w in weights if isinstance(ggufs.get(PAIRS[w]), Path)})
        samples = {}
        for r in range(args.rounds):
            for (wd, b), (path, ids) in steps.items():
                samples.setdefault(f"kiln {wd}", {}).setdefault(b, []).append(
                    kiln_decode_tps(path, ids, args.new, args.threads))
            for t in kinds:
                for b, v in llamacpp_decode_tps(bindir, ggufs[t], batches, args.prompt, args.new,
                                                args.threads).items():
                    samples.setdefault(f"llama.cpp {t}", {}).setdefault(b, []).append(v)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {name: {b: statistics.median(v) for b, v in by.items()} for name, by in samples.items()}
    res["samples"], res["median_tps"] = samples, med
    head = "| system | " + " | ".join(f"batch {b} tok/s" for b in batches) + " | vs llama.cpp at the largest batch |"
    print(head + "\n|" + "---|" * (len(batches) + 2))
    for name, by in med.items():
        peer = med.get(f"llama.cpp {PAIRS.get(name[5:], '')}") if name.startswith("kiln") else None
        ratio = f"{by[batches[-1]] / peer[batches[-1]]:.2f}x" if peer and batches[-1] in peer else ""
        print(f"| {name} | " + " | ".join(f"{by.get(b, float('nan')):.1f}" for b in batches) + f" | {ratio} |")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
