"""bf16 compute on a BERT-base-sized stack of linear layers (issue 18):
12 layers of four 768 -> 768 projections in a chain and the FFN (768 -> 3072,
GELU, 3072 -> 768, residual), input (1, 128, 768): kiln fp32, kiln
compute_dtype=bf16, and eager PyTorch with model.to(torch.bfloat16).

Each figure is the fastest of many calls: at 1 thread in process CPU time
(time lost to other processes on a shared machine does not count), at 2
threads in wall time. Usage: python bench/bf16_linear_stack.py [reps]."""
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
        # A chain, not q(x) + k(x) + v(x): that sum trips fuse_gemm today
        # ("value used before it was emitted"), reported separately.
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


def best(fn, x, reps, threads):
    clock = time.process_time if threads == 1 else time.perf_counter
    for _ in range(3):
        fn(x)
    t = 1e30
    for _ in range(reps):
        t0 = clock()
        fn(x)
        t = min(t, clock() - t0)
    return t


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
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
            t = [best(fp32, x, reps, threads), best(bf16, x, reps, threads),
                 best(eager16, x16, reps, threads), best(model, x, reps, threads)]
            print(f"{threads:>3} {t[0]*1e3:13.2f} {t[1]*1e3:13.2f} {t[2]*1e3:14.2f} {t[3]*1e3:14.2f} "
                  f"| {t[0]/t[1]:8.2f}x {t[2]/t[1]:11.2f}x | {flop/t[0]*1e-9:.0f}, {flop/t[1]*1e-9:.0f}")


if __name__ == "__main__":
    main()
