"""kiln's random-graph differential fuzzer: the command line.

    python tests/fuzz/kiln_fuzz.py --seed S --n N [--time-budget SEC] [--jobs J]
    python tests/fuzz/kiln_fuzz.py --seed S --only I [--show]

Generates N random programs of ATen ops (graphs S:0 .. S:N-1), runs each
through kiln and through eager PyTorch in float32 and float64, and reports
every disagreement with a shrunk, standalone reproducer script. The last
line reads "P passed, F failed (...)"; the exit status is 1 when any graph
failed. The package kilnfuzz beside this file holds the parts (its
__init__ lists them); `make fuzz N=...` runs this.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# A crashing lowering is a kiln bug to report, not an op to count as
# unsupported (kiln/errors.py: lowering_failure).
os.environ.setdefault("KILN_STRICT", "1")

from kilnfuzz.runner import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
