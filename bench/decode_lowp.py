"""Decode tokens/s through model.generate() with quantized weights (issue
18): the bench's 8-layer Llama (bench/models.py gen_llama: hidden 1024, GQA
16/4, vocab 32000, 594 MiB of fp32 weights read per token) as users run it,
``model.forward = torch.compile(model.forward, backend="kiln",
options={"weights_dtype": ...})``, for kiln fp32, int8, int8:a8 (int8
with int8 activations: every linear layer quantizes its input per row and
sums integers), int4 (groups of 32) and int4:a8 (int4 with int8
activations: decode's linear layers quantize their input per group and sum
integers; also "int4:g128" and "int4:g128:a8" with --g128) beside eager
(the default DynamicCache).

Each call is bench/generation.py's: greedy, a 128-token prompt, 65 new
tokens, a streamer stamping each token; decode tok/s counts the 64 steps
after the first token, in wall time and in the process's CPU time (at 1
thread the CPU time leaves out what other processes on a shared machine
took: the load-robust figure; at 2 threads it counts both threads, spinning
included, so only the wall figure is shown). Systems run in interleaved rounds (one generate()
each per round, the order rotating, a 20 ms pause before each), after a
first call per system that compiles and whose tokens are compared with
eager's (quantized weights change the logits: the report gives how many of
the 64 greedy tokens agree before the first difference). Reported per
system: fastest and median decode tok/s over the rounds, and the ratio to
kiln fp32's; the load average before and after, since on a shared machine
the figures move with it.

After the timed rounds, the accuracy of each mode against eager fp32 on a
text (issue 18 item 4): the prompt and eager's greedy continuation fed whole
(teacher forcing) to each system: top-1 next-token agreement, the text's
perplexity and its change, cosine and max relative error of the logits
(--no-accuracy skips it; it compiles one more graph per system).

With --cat, the systems are kiln fp32 and int4:a8 each twice: appending
to the DynamicCache in place (kiln's default) and with the copying cat
("... cat", compiled with kiln.dynamo._CACHE_APPEND off: each step's cat
copies the past, as eager's), interleaved in one process.

Usage: python bench/decode_lowp.py [rounds] [--threads N] [--g128] [--static] [--no-accuracy] [--cat]
"""
import os
import sys
import time

import torch
import torch._dynamo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


KINDS = (("kiln fp32", None), ("kiln int8", torch.int8), ("kiln int8:a8", "int8:a8"), ("kiln int4", "int4"),
         ("kiln int4:a8", "int4:a8"))


def kiln_systems(model, kinds, cache=None):
    """One GenSystem per (name, weights_dtype): the model's forward through
    torch.compile(backend="kiln") with that option, each on its own code
    object (generation._own_code), compared with eager's tokens. A name
    ending in " cat" compiles with the copying cat (see --cat)."""
    from generation import GenSystem, _own_code
    fwd = model.forward
    systems = []
    for name, wd in kinds:
        opts = {"weights_dtype": wd} if wd is not None else {}
        f = torch.compile(_own_code(fwd, name.replace(" ", "_").replace(":", "_")), backend="kiln",
                          options=opts)
        if name.endswith(" cat"):
            f = _copying_cat(f)
        systems.append(GenSystem(name, f, cache, "eager"))
    return systems


def llm_systems(model, kinds, max_length, suffix):
    """One GenSystem per (name, weights_dtype), named name + suffix: the
    model compiled by kiln.llm.compile (its traced StaticCacheStep as its
    forward: generate() without Dynamo) for up to max_length tokens."""
    import kiln
    from generation import GenSystem
    systems = []
    for name, wd in kinds:
        kiln.llm.compile(model, max_length, **({"weights_dtype": wd} if wd is not None else {}))
        # GenSystem installs the forward for its own generate() calls; the
        # input preparation kiln.llm.compile also installs stays (it passes
        # any other cache through unchanged).
        systems.append(GenSystem(name + suffix, model.__dict__.pop("forward"), None, "eager"))
    return systems


def _copying_cat(f):
    """f compiling its graphs with kiln's cache appends off."""
    import kiln.dynamo

    def forward(*args, **kwargs):
        kiln.dynamo._CACHE_APPEND = False
        try:
            return f(*args, **kwargs)
        finally:
            kiln.dynamo._CACHE_APPEND = True
    return forward


def first_calls(model, systems, ids, mask, new, prompt, log=print):
    """Each system's first generate() (the compiles), its tokens compared
    with the first system's (eager): {name: (seconds, metrics, check, tokens)}, or
    {name: the error} for a system that failed."""
    from generation import _generate, _tokens_check
    from peers import short
    ref, out_ = None, {}
    for s in systems:
        t0 = time.perf_counter()
        try:
            out, m = _generate(model, s, ids, mask, new)
        except Exception as e:
            out_[s.name] = short(e)
            log(f"  first call {s.name:15s} failed: {out_[s.name]}")
            continue
        if s.compare_with is None:
            ref = out
            check = ""
        else:
            check = _tokens_check(ref, out, prompt).get("tokens", "")
        out_[s.name] = (time.perf_counter() - t0, m, check, out)
        log(f"  first call {s.name:15s} {out_[s.name][0]:6.1f} s  "
            f"{m['decode_tps']:6.1f} tok/s  tokens vs eager: {check or '-'}")
    return out_


def lm_accuracy(model, systems, text):
    """Each system's next-token predictions over one token sequence (the
    text, fed whole: teacher forcing, no cache) against eager fp32's:
    {name: (top-1 agreement, perplexity, cosine, max relative error)}.
    top-1 agreement: the share of positions whose most likely next token is
    fp32's; perplexity: exp of the mean negative log-likelihood of the
    text's next tokens under the system; cosine and max relative error
    (max |d| / max |fp32|) over all logits."""
    out = {}
    ref = None
    for s in systems:
        if s.forward is None:
            model.__dict__.pop("forward", None)
        else:
            model.forward = s.forward
        try:
            with torch.no_grad():
                logits = model(text, attention_mask=torch.ones_like(text), use_cache=False).logits[0].float()
        except Exception as e:  # noqa: BLE001 -- the row says why
            out[s.name] = str(e).splitlines()[0][:80]
            continue
        finally:
            model.__dict__.pop("forward", None)
        nll = torch.nn.functional.cross_entropy(logits[:-1].double(), text[0, 1:])
        if ref is None:
            ref = logits
        agree = float((logits[:-1].argmax(-1) == ref[:-1].argmax(-1)).double().mean())
        cos = float(torch.nn.functional.cosine_similarity(logits.flatten().double(), ref.flatten().double(), dim=0))
        rel = float((logits - ref).abs().max() / ref.abs().max())
        out[s.name] = (agree, float(torch.exp(nll)), cos, rel)
    return out


def main():
    args = sys.argv[1:]
    nums = [a for a in args if a.isdigit()]
    rounds = int(nums[0]) if nums else 5
    threads = int(args[args.index("--threads") + 1]) if "--threads" in args else 2
    cache = "static" if "--static" in args else None
    torch.set_num_threads(threads)
    import kiln  # noqa: F401  (registers the backend)
    from generation import GenSystem, _generate, weight_bytes
    from models import build_gen_llama

    torch._dynamo.config.recompile_limit = 64
    model = build_gen_llama()[0]
    vocab, prompt, new = model.config.vocab_size, 128, 64
    g = torch.Generator().manual_seed(1001)
    ids = torch.randint(3, vocab, (1, prompt), generator=g)
    mask = torch.ones_like(ids)
    kinds = list(KINDS)
    if "--cat" in args:
        kinds = [("kiln fp32", None), ("kiln fp32 cat", None), ("kiln int4:a8", "int4:a8"),
                 ("kiln int4:a8 cat", "int4:a8")]
    if "--g128" in args:
        kinds += [("kiln int4:g128", "int4:g128"), ("kiln int4:g128:a8", "int4:g128:a8")]
    systems = [GenSystem("eager", None, cache, None)] + kiln_systems(model, kinds, cache)
    load0 = os.getloadavg()
    print(f"gen_llama, {weight_bytes(model) / 2**20:.0f} MiB of fp32 weights per token, "
          f"{threads} threads, cache {cache or 'dynamic'}, load average {load0[0]:.1f} "
          f"{load0[1]:.1f} {load0[2]:.1f}", flush=True)
    first = first_calls(model, systems, ids, mask, new, prompt, log=lambda s: print(s, flush=True))
    systems = [s for s in systems if not isinstance(first[s.name], str)]
    figs = ("decode_tps", "decode_tps_cpu") if threads == 1 else ("decode_tps",)
    tps = {f: {s.name: [] for s in systems} for f in figs}
    for r in range(rounds):
        k = r % len(systems)
        for s in systems[k:] + systems[:k]:
            time.sleep(0.02)
            _, m = _generate(model, s, ids, mask, new)
            for f in figs:
                tps[f][s.name].append(m[f])
    load1 = os.getloadavg()
    # Accuracy on a text: the prompt and eager's greedy continuation (first
    # calls), fed whole to each system. The weights are random (nothing is
    # downloaded), so fp32's distributions are flat and a small change can
    # flip a top-1 choice: read the figures as quantization noise against
    # fp32 on this model, not as a real checkpoint's quality.
    text = first["eager"][3] if len(first["eager"]) > 3 else None
    if text is not None and "--no-accuracy" not in args:
        acc = lm_accuracy(model, [s for s in systems if s.cache is None or s.name == "eager"], text)
        print(f"accuracy against eager fp32 on a text of {text.shape[1]} tokens (the prompt and eager's greedy "
              f"continuation, teacher-forced, no cache)")
        print(f"  {'system':15s} {'top-1 agree':>11s} {'perplexity':>11s} {'change':>8s} {'cosine':>9s} "
              f"{'max rel err':>11s}")
        base_ppl = acc["eager"][1] if isinstance(acc.get("eager"), tuple) else float("nan")
        for name, a in acc.items():
            if isinstance(a, str):
                print(f"  {name:15s} failed: {a}")
                continue
            print(f"  {name:15s} {a[0]:11.4f} {a[1]:11.1f} {100 * (a[1] / base_ppl - 1):7.2f}% {a[2]:9.6f} "
                  f"{a[3]:11.2e}")
    for f in figs:
        base = sorted(tps[f]["kiln fp32"])
        print(f"decode tok/s ({'CPU' if f.endswith('cpu') else 'wall'} time) over {rounds} interleaved "
              f"rounds (load average after: {load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f})")
        print(f"  {'system':17s} {'fastest':>8s} {'median':>8s} | {'vs kiln fp32: fastest':>22s} {'median':>8s}")
        for name, v in tps[f].items():
            v = sorted(v)
            med = v[len(v) // 2]
            print(f"  {name:17s} {v[-1]:8.1f} {med:8.1f} | {v[-1] / base[-1]:21.2f}x "
                  f"{med / base[len(base) // 2]:7.2f}x")


if __name__ == "__main__":
    main()
