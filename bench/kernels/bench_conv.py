"""ResNet-18's convolutions (batch 1, 224x224) one layer at a time, kiln
against torch's F.conv2d, and the whole ResNet-18 against eager (and ONNX
Runtime when it is installed), at one thread count per process.

    KILN_NUM_THREADS=1 .venv/bin/python bench/kernels/bench_conv.py [--threads 1] [--model]

Times are medians of interleaved runs (kiln, torch, kiln, ...) so machine
load hits both alike; read the ratios, not the absolute times."""
import argparse
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--runs", type=int, default=30)
ap.add_argument("--model", action="store_true", help="also the whole ResNet-18")
ap.add_argument("--layers", action="store_true", help="per-layer convolutions")
ap.add_argument("--cpu", action="store_true",
                help="time process CPU time, not wall time (1 thread on a loaded machine: "
                     "time sliced away to other processes does not count)")
args = ap.parse_args()
os.environ["KILN_NUM_THREADS"] = str(args.threads)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kiln  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(0)

# (cin, cout, k, stride, pad, input size, count in ResNet-18)
LAYERS = [
    ("conv1 7x7/2", 3, 64, 7, 2, 3, 224, 1),
    ("l1 3x3 64", 64, 64, 3, 1, 1, 56, 4),
    ("l2 3x3/2 64-128", 64, 128, 3, 2, 1, 56, 1),
    ("l2 1x1/2 down", 64, 128, 1, 2, 0, 56, 1),
    ("l2 3x3 128", 128, 128, 3, 1, 1, 28, 3),
    ("l3 3x3/2 128-256", 128, 256, 3, 2, 1, 28, 1),
    ("l3 1x1/2 down", 128, 256, 1, 2, 0, 28, 1),
    ("l3 3x3 256", 256, 256, 3, 1, 1, 14, 3),
    ("l4 3x3/2 256-512", 256, 512, 3, 2, 1, 14, 1),
    ("l4 1x1/2 down", 256, 512, 1, 2, 0, 14, 1),
    ("l4 3x3 512", 512, 512, 3, 1, 1, 7, 3),
]


def timed(fns, runs):
    """Interleaved medians, in ms, after a warm-up of each."""
    for f in fns:
        for _ in range(3):
            f()
    ts = [[] for _ in fns]
    for _ in range(runs):
        for i, f in enumerate(fns):
            t0 = clock()
            f()
            ts[i].append(clock() - t0)
    return [statistics.median(t) * 1e3 for t in ts]


clock = time.process_time if args.cpu else time.perf_counter
print(f"clock={'cpu' if args.cpu else 'wall'} threads={args.threads} load={os.getloadavg()[0]:.1f}", flush=True)
if args.layers or not args.model:
    tot_k = tot_t = 0.0
    print(f"{'layer':20s} {'kiln ms':>8s} {'torch ms':>8s} {'torch/kiln':>10s}")
    for name, cin, cout, k, s, p, hw, count in LAYERS:
        conv = torch.nn.Conv2d(cin, cout, k, s, p, bias=True).eval()
        x = torch.randn(1, cin, hw, hw)
        km = kiln.trace(conv, x)
        with torch.no_grad():
            ref = F.conv2d(x, conv.weight, conv.bias, s, p)
            torch.testing.assert_close(km(x), ref, rtol=1e-4, atol=1e-4)
            tk, tt = timed([lambda: km(x), lambda: F.conv2d(x, conv.weight, conv.bias, s, p)],
                           args.runs)
        tot_k += tk * count
        tot_t += tt * count
        print(f"{name:20s} {tk:8.3f} {tt:8.3f} {tt / tk:10.2f}", flush=True)
    print(f"{'sum x count':20s} {tot_k:8.3f} {tot_t:8.3f} {tot_t / tot_k:10.2f}", flush=True)

if args.model:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from models import build_resnet18

    model, (x,) = build_resnet18()
    km = kiln.trace(model, x)
    fns = []
    names = ["kiln", "eager"]
    with torch.no_grad():
        torch.testing.assert_close(km(x), model(x), rtol=1e-3, atol=1e-3)
        fns = [lambda: km(x), lambda: model(x)]
        try:
            import io

            import numpy as np
            import onnxruntime as ort

            buf = io.BytesIO()
            torch.onnx.export(model, (x,), buf, dynamo=False)
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])
            xn = x.numpy()
            iname = sess.get_inputs()[0].name
            out = sess.run(None, {iname: xn})[0]
            np.testing.assert_allclose(out, model(x).numpy(), rtol=1e-3, atol=1e-3)
            fns.append(lambda: sess.run(None, {iname: xn}))
            names.append("ort")
        except ImportError:
            pass
        ts = timed(fns, args.runs)
    print("  ".join(f"{n} {t:.2f} ms" for n, t in zip(names, ts)))
    print("  ".join(f"{n}/kiln {t / ts[0]:.2f}" for n, t in zip(names[1:], ts[1:])), flush=True)
