"""bf16 compute on a BERT-base-sized stack of linear layers (issue 18):
12 layers of four 768 -> 768 projections in a chain and the FFN (768 -> 3072,
GELU, 3072 -> 768, residual), input (1, 128, 768): kiln fp32, kiln
compute_dtype=bf16, and eager PyTorch with model.to(torch.bfloat16).

Each figure is the fastest of many calls, the candidates called in turn
(interleaved, so a burst of load hits all of them): at 1 thread in process
CPU time (time lost to other processes on a shared machine does not count),
at 2 threads in wall time. --minilm adds all-MiniLM-L6-v2 (real weights,
batch 2 x 128 tokens); --no-eager leaves eager bf16 out (on a CPU without
bf16 arithmetic it is ~10x slower than kiln and dominates the run).
Usage: python bench/bf16_linear_stack.py [reps] [--minilm] [--no-eager]."""
import sys
import time

import torch
from torch import nn

import kiln


class Layer(nn.Module):
    def __init__(self, d=768, f=3072):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.up, self.down = nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x):
        x = x + self.o(self.v(self.k(self.q(x))))
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


class Stack(nn.Module):
    def __init__(self, n=12):
        super().__init__()
        self.layers = nn.ModuleList(Layer() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def best_interleaved(fns, args, reps, threads):
    """Fastest call of each fn(*args[i]), the fns called in turn."""
    clock = time.process_time if threads == 1 else time.perf_counter
    for fn, a in zip(fns, args):
        for _ in range(2):
            fn(*a)
    t = [1e30] * len(fns)
    for r in range(reps):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t0 = clock()
            fns[i](*args[i])
            t[i] = min(t[i], clock() - t0)
    return t


def minilm_rows(reps):
    sys.path.insert(0, __file__.rsplit("/bench/", 1)[0] + "/tests/python")
    from conftest import minilm_encoder_and_batch

    model, ids, mask = minilm_encoder_and_batch(batch=2, seq=128)
    fp32 = kiln.trace(model, (ids, mask))
    bf16 = kiln.trace(model, (ids, mask), compute_dtype=torch.bfloat16)
    print(f"MiniLM (2, 128): {'thr':>3} {'kiln fp32 ms':>13} {'kiln bf16 ms':>13} | {'bf16/fp32':>9}")
    with torch.no_grad():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            t = best_interleaved([fp32, bf16], [(ids, mask)] * 2, reps, threads)
            print(f"{'':16} {threads:>3} {t[0]*1e3:13.2f} {t[1]*1e3:13.2f} | {t[0]/t[1]:8.3f}x")


def main():
    nums = [a for a in sys.argv[1:] if not a.startswith("--")]
    reps = int(nums[0]) if nums else 30
    eager = "--no-eager" not in sys.argv
    torch.manual_seed(0)
    model = Stack().eval()
    x = torch.randn(1, 128, 768) * 0.5
    flop = 2 * 128 * 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    fp32 = kiln.trace(model, x)
    bf16 = kiln.trace(model, x, compute_dtype=torch.bfloat16)
    eager16 = Stack().eval()
    eager16.load_state_dict(model.state_dict())
    eager16 = eager16.to(torch.bfloat16)
    x16 = x.to(torch.bfloat16)
    with torch.no_grad():
        ref = model(x)
        cos = torch.nn.functional.cosine_similarity(bf16(x).flatten(), ref.flatten(), dim=0)
        cos_e = torch.nn.functional.cosine_similarity(eager16(x16).float().flatten(), ref.flatten(), dim=0)
    print(f"engine {kiln._C.bf16_engine()}, cosine to fp32: kiln bf16 {float(cos):.6f}, eager bf16 {float(cos_e):.6f}")
    print(f"{'thr':>3} {'kiln fp32 ms':>13} {'kiln bf16 ms':>13} {'eager bf16 ms':>14} {'eager fp32 ms':>14} "
          f"| {'bf16/fp32':>9} {'bf16/eager16':>12} | GFLOP/s fp32, bf16")
    with torch.no_grad():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            fns, args = [fp32, bf16], [(x,), (x,)]
            if eager:
                fns, args = fns + [eager16, model], args + [(x16,), (x,)]
            t = best_interleaved(fns, args, reps, threads) + [float("nan")] * (0 if eager else 2)
            print(f"{threads:>3} {t[0]*1e3:13.2f} {t[1]*1e3:13.2f} {t[2]*1e3:14.2f} {t[3]*1e3:14.2f} "
                  f"| {t[0]/t[1]:8.3f}x {t[2]/t[1]:11.2f}x | {flop/t[0]*1e-9:.0f}, {flop/t[1]*1e-9:.0f}")
    if "--minilm" in sys.argv:
        minilm_rows(reps)


if __name__ == "__main__":
    main()
