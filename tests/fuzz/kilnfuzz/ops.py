"""The fuzzer's vocabulary: every op kind, by name."""

import copy

from kilnfuzz import ops_index, ops_math, ops_nn, ops_views

KINDS = {k.name: k for k in ops_views.KINDS + ops_math.KINDS + ops_nn.KINDS + ops_index.KINDS}
# Last, with weight 0: the float32 mode never draws it, and its draws are
# those of the kinds above (random.choices with a zero weight at the end).
KINDS["conv2d_wide"] = ops_nn.Conv2dWide()

# The bf16 mode's generator also draws wide convolutions, as often as the
# others (resolving and shrinking take KINDS: the kinds are the same).
BF16_KINDS = dict(KINDS)
BF16_KINDS["conv2d_wide"] = copy.copy(KINDS["conv2d_wide"])
BF16_KINDS["conv2d_wide"].weight = KINDS["conv2d"].weight


def kinds_for(path):
    """The kinds graphs of `path` are generated from."""
    return BF16_KINDS if path.startswith("bf16") else KINDS
