#!/usr/bin/env python3
"""Memory of one inference call: kiln against PyTorch eager (issue 4).

Each side runs in a fresh process and reports how much its resident set grew
from just after `import torch, kiln` to its peak during the first call:

  eager  build the model (its weights), run it once under no_grad
  kiln   kiln.load the saved .kiln artifact (its packed constants), run it once

so both include the weights they need and everything one call allocates.
kiln's own accounting (constants plus arena, from KilnModule.stats) is shown
beside its measured growth.

    python bench/memory.py [model ...]      (default: bert_base)
"""

import json
import os
import resource
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def _rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _child(mode, name, path):
    import torch

    import kiln

    sys.path.insert(0, HERE)
    import models

    torch.set_num_threads(2)
    base = _rss_kib()
    if mode == "save":
        m, x = models.MODELS[name].build()
        kiln.save(kiln.trace(m, x), path)
        return {}
    if mode == "eager":
        m, x = models.MODELS[name].build()
        with torch.no_grad():
            m(*x)
        out = {}
    else:
        k = kiln.load(path)
        x = torch.load(path + ".inputs")
        with torch.no_grad():
            k(*x)
        s = k.stats()
        out = {"constants_mib": s["constant_bytes"] / 2**20, "arena_mib": s["arena_bytes"] / 2**20}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out["growth_mib"] = (peak - base) / 1024
    return out


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        print(json.dumps(_child(*sys.argv[2:5])))
        return
    names = sys.argv[1:] or ["bert_base"]
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, name + ".kiln")
            # Inputs are saved beside the artifact so the kiln process never builds the model.
            code = ("import sys, torch; sys.path.insert(0, %r); import models; "
                    "torch.save(models.MODELS[%r].build()[1], %r)" % (HERE, name, path + ".inputs"))
            subprocess.run([sys.executable, "-c", code], check=True)
            res = {}
            for mode in ("save", "eager", "kiln"):
                out = subprocess.run([sys.executable, __file__, "--child", mode, name, path],
                                     check=True, capture_output=True, text=True).stdout
                res[mode] = json.loads(out.strip().splitlines()[-1])
        e, k = res["eager"], res["kiln"]
        print(f"{name}: eager grew {e['growth_mib']:.0f} MiB (weights + one call); "
              f"kiln grew {k['growth_mib']:.0f} MiB (load + one call; constants "
              f"{k['constants_mib']:.0f} MiB + arena {k['arena_mib']:.1f} MiB); "
              f"kiln/eager {k['growth_mib'] / e['growth_mib']:.2f}")


if __name__ == "__main__":
    main()
