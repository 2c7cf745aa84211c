"""Trains a small transformer language model on kiln and on eager PyTorch
from the same initial weights, and prints both loss curves and step times.

    python examples/train_lm.py [--steps 200] [--threads 2]

The data is a synthetic next-token task (a fixed random bigram table), so
nothing is downloaded and the loss has somewhere to go.
"""
import argparse
import copy
import statistics
import sys
import time
import warnings

import torch

import kiln  # noqa: F401  (registers backend="kiln")


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=256, d=128, layers=4, heads=4, seq=64):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(seq, d) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, ids):
        h = self.blocks(self.emb(ids) + self.pos, mask=self.mask, is_causal=True)
        return self.head(self.norm(h))


def batches(steps, batch, seq, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    table = torch.randint(0, vocab, (vocab, 4), generator=g)  # each token has 4 likely successors
    for _ in range(steps):
        ids = torch.empty(batch, seq + 1, dtype=torch.long)
        ids[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        for t in range(seq):
            pick = torch.randint(0, 4, (batch,), generator=g)
            ids[:, t + 1] = table[ids[:, t], pick]
        yield ids[:, :-1], ids[:, 1:]


def train(models, steps, args):
    """Trains every (name, model) on the same batches. Their steps alternate,
    so that both see the same machine load (a shared machine drifts by tens
    of percent over a minute: back-to-back runs would time the drift)."""
    opts = {name: torch.optim.AdamW(model.parameters(), lr=3e-3) for name, model in models}
    losses = {name: [] for name, _ in models}
    times = {name: [] for name, _ in models}
    for i, (x, y) in enumerate(batches(steps, args.batch, args.seq, args.vocab)):
        for name, model in models:
            t0 = time.perf_counter()
            opts[name].zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, args.vocab), y.reshape(-1))
            loss.backward()
            opts[name].step()
            times[name].append(time.perf_counter() - t0)
            losses[name].append(loss.item())
        done = (i + 1) / steps
        now = "  ".join(f"{name} {losses[name][-1]:.3f}" for name, _ in models)
        sys.stdout.write(f"\r[{'#' * int(30 * done):30s}] {i + 1}/{steps} loss {now}")
        sys.stdout.flush()
    print()
    return losses, times


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = TinyLM(vocab=args.vocab, seq=args.seq)
    eager_model = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        losses, times = train([("kiln", torch.compile(model, backend="kiln")), ("eager", eager_model)],
                              args.steps, args)
    kiln_losses, eager_losses = losses["kiln"], losses["eager"]
    kiln_times, eager_times = times["kiln"], times["eager"]
    print(f"\n{'step':>6s} {'kiln loss':>10s} {'eager loss':>11s}")
    for i in list(range(0, args.steps, max(args.steps // 10, 1))) + [args.steps - 1]:
        print(f"{i:6d} {kiln_losses[i]:10.4f} {eager_losses[i]:11.4f}")
    # The first step includes compilation: the step time is the median of the rest.
    k, e = statistics.median(kiln_times[1:]), statistics.median(eager_times[1:])
    print(f"\nstep time (median): kiln {k * 1e3:.1f} ms, eager {e * 1e3:.1f} ms ({e / k:.2f}x); "
          f"kiln's first step (compile) {kiln_times[0]:.1f} s")
    final = abs(kiln_losses[-1] - eager_losses[-1]) / eager_losses[-1]
    print(f"final loss: kiln {kiln_losses[-1]:.4f}, eager {eager_losses[-1]:.4f} ({100 * final:.2f}% apart)")


if __name__ == "__main__":
    main()
