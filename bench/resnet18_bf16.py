"""ResNet-18 (batch 1, 3x224x224, bench/models.py) with bf16-compute
convolutions: kiln fp32, kiln compute_dtype=bf16 and eager fp32 (and
OpenVINO at f32 and at its default precision when it is installed), timed
in one process, interleaved (one call of each, round after round) so that
machine load hits all alike; medians of --runs rounds. Also prints each
mode's cosine similarity to eager fp32.

    .venv/bin/python bench/resnet18_bf16.py [--threads 2] [--runs 60]

Then, with --layers, each ResNet-18 conv of the bf16 model alone on one
thread (kiln.profile's per-node times: GFLOP/s against the machine's
measured bf16 dot peak, kiln.machine()['bf16_gflops_1']). Read ratios, not
absolute times: the VM is shared."""
import argparse
import os
import statistics
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--runs", type=int, default=60)
ap.add_argument("--layers", action="store_true", help="per-conv GFLOP/s, 1 thread, bf16 model")
ap.add_argument("--openvino", choices=("no", "also", "only"), default="no",
                help="OpenVINO rows: its CPU threads keep spinning after a call and slow whatever runs "
                     "next in the process (eager most), so by default it is left out; 'only' times it "
                     "with kiln fp32 and bf16 (no eager) in a process of its own")
args = ap.parse_args()
os.environ["KILN_NUM_THREADS"] = str(1 if args.layers else args.threads)

import torch  # noqa: E402

import kiln  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from models import build_resnet18  # noqa: E402

torch.set_num_threads(1 if args.layers else args.threads)
model, (x,) = build_resnet18()


def cosine(a, b):
    a, b = a.double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


if args.layers:
    m = kiln.machine()
    peak = m.get("bf16_gflops_1") or 0
    k = kiln.trace(model, x, compute_dtype=torch.bfloat16)
    rep = kiln.profile(k, x, runs=args.runs)
    print(f"bf16 dot peak (kiln.machine, 1 thread): {peak:.0f} GFLOP/s; fp32 FMA {m.get('fp32_gflops_1', 0):.0f}")
    print(rep)
    sys.exit(0)

calls = {}
with torch.no_grad():
    eager_out = model(x)
    if args.openvino != "only":
        calls["eager fp32"] = lambda: model(x)
    kf = kiln.trace(model, x)
    calls["kiln fp32"] = lambda: kf(x)
    kb = kiln.trace(model, x, compute_dtype=torch.bfloat16)
    calls["kiln bf16"] = lambda: kb(x)
try:
    if args.openvino == "no":
        raise ImportError
    import openvino as ov

    conv = ov.convert_model(model, example_input=(x,))
    core = ov.Core()
    arr = [x.numpy()]
    for name, hint in (("openvino f32", "f32"), ("openvino default", None)):
        cfg = {"INFERENCE_NUM_THREADS": args.threads, "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY"}
        if hint:
            cfg["INFERENCE_PRECISION_HINT"] = hint
        cm = core.compile_model(conv, "CPU", cfg)
        req = cm.create_infer_request()
        prec = cm.get_property("INFERENCE_PRECISION_HINT")
        name = f"{name} ({prec})"

        def call(req=req):
            return torch.from_numpy(next(iter(req.infer(arr).values())).copy())
        calls[name] = call
except ImportError:
    if args.openvino != "no":
        print("openvino not installed: its rows are skipped")

times = {k: [] for k in calls}
with torch.no_grad():
    for k, f in calls.items():  # warm up, and the accuracy figure
        out = f()
        print(f"{k:28s} cosine to eager fp32 {cosine(out, eager_out):.6f}")
        for _ in range(3):
            f()
    for _ in range(args.runs):
        for k, f in calls.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
print(f"ResNet-18 batch 1 224x224, {args.threads} threads, median of {args.runs} interleaved runs:")
base = statistics.median(times["kiln fp32"])
for k, ts in times.items():
    med = statistics.median(ts)
    print(f"  {k:28s} {med * 1e3:8.2f} ms   kiln fp32 / this {base / med:5.2f}x")
