"""The fuzzer's vocabulary: every op kind, by name."""

from kilnfuzz import ops_index, ops_math, ops_nn, ops_views

KINDS = {k.name: k for k in ops_views.KINDS + ops_math.KINDS + ops_nn.KINDS + ops_index.KINDS}
