"""`make demo`: trace models with kiln, run them, and show speed and accuracy
against eager PyTorch on this machine (same thread count, median of runs).

    python examples/demo.py [--runs N] [--threads N]
"""
import argparse
import os
import statistics
import time

import torch

import kiln


class SimpleLLMBlock(torch.nn.Module):
    """The seed example: Linear(768, 768) then GELU."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(768, 768)
        self.activation = torch.nn.GELU()

    def forward(self, x):
        return self.activation(self.linear(x))


def encoder(layers=4, d=384, heads=6):
    layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, batch_first=True, activation="gelu")
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                               torch.nn.ReLU(), torch.nn.Linear(1024, 1024))


def median_ms(fn, x, runs):
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(x)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("KILN_NUM_THREADS", os.cpu_count())))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cases = [
        ("seed block: Linear(768,768)+GELU, x (1,128,768)", SimpleLLMBlock(), torch.randn(1, 128, 768)),
        ("MLP: 3 x Linear(1024) + ReLU, batch 64", mlp(), torch.randn(64, 1024)),
        ("Transformer encoder: 4 layers, d=384, seq 128", encoder(), torch.randn(1, 128, 384)),
    ]
    print(f"kiln {kiln.__version__} | torch {torch.__version__} | ISA {kiln.isa()} | "
          f"{kiln._C.num_threads()} kiln threads, {torch.get_num_threads()} torch threads")
    print(f"{'model':50s} {'compile':>8s} {'max err':>9s} {'eager ms':>9s} {'kiln ms':>8s} {'speed-up':>8s}")
    ok = True
    for name, model, x in cases:
        model.eval()
        t0 = time.perf_counter()
        compiled = kiln.trace(model, x)
        compile_s = time.perf_counter() - t0
        with torch.no_grad():
            want = model(x)
            err = (compiled(x) - want).abs().max().item()
            good = torch.allclose(compiled(x), want, rtol=1e-4, atol=1e-4)
            ok &= good
            eager = median_ms(model, x, args.runs)
        fast = median_ms(compiled, x, args.runs)
        print(f"{name:50s} {compile_s:7.2f}s {err:9.2e} {eager:9.3f} {fast:8.3f} {eager / fast:7.2f}x"
              + ("" if good else "  WRONG"))
    print("\nThe compiled plan of the seed block (kiln.explain):")
    kiln.explain(kiln.trace(cases[0][1], cases[0][2]))
    ok &= generation()
    if not ok:
        raise SystemExit("kiln's output differs from eager PyTorch")


def generation(new_tokens=32):
    """A Llama-style model from a transformers config (random weights: RoPE,
    GQA, SwiGLU, RMSNorm) generating through HF generate() unchanged, with
    kiln behind model.forward: one line, the default DynamicCache, one
    compile for every length (Dynamo's automatic dynamic hands kiln a
    symbolic graph after the first decode step); then kiln.llm.compile, the
    model's step traced whole as its forward."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=2)
    model = LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 64))

    def generate(calls=1):
        # An end-of-sequence id no token has: every call makes new_tokens
        # tokens (min_new_tokens would add vocabulary-wide masking per step).
        best = None
        for _ in range(calls):
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=new_tokens, eos_token_id=cfg.vocab_size,
                                 pad_token_id=0, do_sample=False)
            tps = new_tokens / (time.perf_counter() - t0)
            best = tps if best is None else max(best, tps)
        return out, best

    print(f"\nGeneration: Llama-style, 4 layers, hidden 512, GQA 8/2, prompt 64, {new_tokens} new tokens (greedy)")
    with torch.no_grad():
        generate()
        want, eager_tps = generate(3)
        eager_forward = model.forward
        model.forward = torch.compile(model.forward, backend="kiln")   # the one line
        t0 = time.perf_counter()
        generate()
        compile_s = time.perf_counter() - t0
        got, kiln_tps = generate(3)
        model.forward = eager_forward
        # Or the model's whole step traced once and run as its forward: no
        # Dynamo frame to enter each token.
        t0 = time.perf_counter()
        kiln.llm.compile(model, max_length=ids.shape[1] + new_tokens)
        trace_s = time.perf_counter() - t0
        got_llm, llm_tps = generate(3)
        kiln.llm.uncompile(model)
    same, same_llm = torch.equal(got, want), torch.equal(got_llm, want)
    print(f"  eager {eager_tps:6.1f} tokens/s | kiln {kiln_tps:6.1f} tokens/s ({kiln_tps / eager_tps:.2f}x) | "
          f"first generate() with compiles {compile_s:.1f} s | tokens equal eager's: {same}")
    print(f"  kiln.llm.compile {llm_tps:6.1f} tokens/s ({llm_tps / eager_tps:.2f}x eager) | "
          f"trace {trace_s:.1f} s | tokens equal eager's: {same_llm}")
    return same and same_llm


if __name__ == "__main__":
    main()
