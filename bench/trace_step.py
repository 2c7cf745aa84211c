#!/usr/bin/env python3
"""Decode speed of a traced generation step beside generate() (one process).

    .venv/bin/python bench/trace_step.py [--model gen_llama] [--weights int4:a8]
                                         [--threads 2] [--rounds 5] [--tokens 64]

A step of a Hugging Face causal LM with its KV cache passed in
(kiln.llm.StaticCacheStep: transformers' StaticCache layers over the
caller's tensors) is traced once with kiln.trace, the token count symbolic from 1,
and run as a C or ExecuTorch-style runner would: the 128-token prompt, then
one token at a time, greedy, in a plain Python loop; kiln writes the cache
in place. Beside it, in interleaved rounds, the same model through
model.generate() with model.forward = torch.compile(model.forward,
backend="kiln") (default cache), as bench/generation.py times it, and
the traced step saved and run by the C runtime alone (`kiln generate`,
the public C API; build/src/tools/kiln). Each decodes --tokens steps after
the first token; printed: the median ms per decode step over the rounds,
tokens/s, the prompt's time, and whether they produced the same greedy
tokens.

The difference between the two is the work around kiln's kernels in each
step: Dynamo's guards, generate()'s own loop and kiln's per-call Python in
one, the loop's argmax and kiln's call in the other."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KILN_CLI = HERE.parent / "build" / "src" / "tools" / "kiln"


def run_steps(step, f, ids, new):
    """Greedy generation through step function f: (tokens, prompt seconds,
    [seconds of each of the `new` decode steps after the first token])."""
    kv = step.empty_cache()
    tokens, times, past, tok = [], [], 0, ids
    with torch.no_grad():
        for _ in range(new + 1):
            t0 = time.perf_counter()
            tok_next = f(tok, torch.tensor(past), kv).argmax(-1, keepdim=True)
            times.append(time.perf_counter() - t0)
            past += tok.shape[1]
            tok = tok_next
            tokens.append(int(tok))
    return tokens, times[0], times[1:]


def run_cli(path, ids, new, threads):
    """`kiln generate` on a saved step: (tokens, prompt ms, median decode ms
    per token), from its stdout and its timing line."""
    r = subprocess.run([str(KILN_CLI), "generate", str(path), "--prompt", ",".join(map(str, ids[0].tolist())),
                        "--max-new-tokens", str(new + 1), "--threads", str(threads)],
                       capture_output=True, text=True, check=True)
    m = re.search(r"prompt \d+ tokens in ([\d.]+) ms.*decode ([\d.]+) ms per token", r.stderr)
    return [int(t) for t in r.stdout.split()], float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gen_llama")
    ap.add_argument("--weights", default=None, help="kiln's weights_dtype (int8, int8:a8, int4, int4:g128:a8, ...)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64, help="decode steps timed after the first token")
    args = ap.parse_args()

    import warnings
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    import transformers
    transformers.logging.set_verbosity_error()
    import generation
    from models import MODELS
    import kiln  # noqa: F401

    model = MODELS[args.model].build()[0]
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(3, vocab, (1, 128), generator=torch.Generator().manual_seed(1001))
    mask = torch.ones_like(ids)
    wd = {"int8": torch.int8, "fp32": None}.get(args.weights, args.weights)
    opts = {"weights_dtype": wd} if wd is not None else {}

    from kiln.llm import StaticCacheStep
    step = StaticCacheStep(model, max_length=ids.shape[1] + args.tokens + 16)
    t0 = time.perf_counter()
    traced = step.trace(ids, **opts)
    trace_s = time.perf_counter() - t0
    fwd = torch.compile(model.forward, backend="kiln", options=opts or None)
    gen = generation.GenSystem("kiln", fwd, None, "eager")
    t0 = time.perf_counter()
    gen_tokens, _ = generation._generate(model, gen, ids, mask, args.tokens)
    compile_s = time.perf_counter() - t0

    tmp = tempfile.TemporaryDirectory()
    path = Path(tmp.name) / "step.kiln"
    kiln.save(traced, path)
    cli = KILN_CLI.exists()
    step_ms, gen_ms, cli_ms, prompt_ms, ttft_ms, cli_prompt_ms = [], [], [], [], [], []
    for _ in range(args.rounds):
        tokens, prompt_s, steps = run_steps(step, traced, ids, args.tokens)
        step_ms.append(1e3 * statistics.median(steps))
        prompt_ms.append(1e3 * prompt_s)
        out, m = generation._generate(model, gen, ids, mask, args.tokens)
        gen_ms.append(m["step_median_ms"])
        ttft_ms.append(m["ttft_ms"])
        if cli:
            cli_tokens, p_ms, d_ms = run_cli(path, ids, args.tokens, args.threads)
            cli_ms.append(d_ms)
            cli_prompt_ms.append(p_ms)
    same = tokens == [int(t) for t in out[0, ids.shape[1]:ids.shape[1] + len(tokens)]]
    s, g = statistics.median(step_ms), statistics.median(gen_ms)
    print(f"{args.model}, weights {args.weights or 'fp32'}, {args.threads} thread(s), {args.rounds} interleaved rounds "
          f"(medians): kiln.trace {trace_s:.1f} s, first generate() {compile_s:.1f} s")
    print(f"  traced step loop:  decode {s:.2f} ms/step ({1e3 / s:.1f} tok/s), prompt {statistics.median(prompt_ms):.0f} ms")
    print(f"  generate() kiln:   decode {g:.2f} ms/step ({1e3 / g:.1f} tok/s), first token {statistics.median(ttft_ms):.0f} ms")
    if cli:
        c = statistics.median(cli_ms)
        print(f"  kiln generate (C): decode {c:.2f} ms/step ({1e3 / c:.1f} tok/s), "
              f"prompt {statistics.median(cli_prompt_ms):.0f} ms")
    print(f"  step loop / generate(): {g / s:.2f}x; same greedy tokens: {same}")
    if cli:
        print(f"  C loop / generate(): {g / c:.2f}x; C tokens the step loop's: {cli_tokens == tokens}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
