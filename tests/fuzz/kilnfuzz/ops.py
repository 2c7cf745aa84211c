"""The fuzzer's vocabulary: every op kind, by name."""

import copy

from kilnfuzz import ops_index, ops_math, ops_nn, ops_quant, ops_views

KINDS = {k.name: k for k in ops_views.KINDS + ops_math.KINDS + ops_nn.KINDS + ops_index.KINDS}
# Wide convolutions (16 output channels a group and more: kiln's NHWC conv
# kernels), drawn as often as conv2d by both modes.
KINDS["conv2d_wide"] = ops_nn.Conv2dWide()
# The quant mode's kinds (ops_quant.py), last and at weight 0 here: no
# other mode's draw changes.
for _k in ops_quant.KINDS:
    KINDS[_k.name] = _k
BF16_KINDS = KINDS

# The float32 mode's kinds before it drew wide convolutions (session 18):
# conv2d_wide last with weight 0 changes no draw (random.choices), so these
# give the programs of every float32 run FINDINGS.md records before then
# (`kiln_fuzz.py --narrow --only I` reruns one; the tests replaying such
# graphs generate them from these). Resolving and shrinking take KINDS:
# the kinds are the same.
NARROW_KINDS = dict(KINDS)
NARROW_KINDS["conv2d_wide"] = copy.copy(KINDS["conv2d_wide"])
NARROW_KINDS["conv2d_wide"].weight = 0.0


# The quant mode's (quant.py): linear layers with the quantized GEMMs' edge
# sizes drawn often (qlinear), inputs of those sizes, embeddings a little
# more often; everything else as in KINDS, so that elementwise ops and
# activations follow the linears (kiln fuses them into the GEMM's epilogue).
QUANT_KINDS = dict(KINDS)
QUANT_KINDS["input"] = ops_quant.QSource("input", "input", KINDS["input"].weight)
for _name, _weight in (("qlinear", 6.0), ("embedding", 1.5)):
    QUANT_KINDS[_name] = copy.copy(KINDS[_name])
    QUANT_KINDS[_name].weight = _weight


def kinds_for(path, wide=True):
    """The kinds graphs of `path` are generated from (wide=False: a float32
    path's as before session 18; the bf16 mode always drew wide convs; the
    quant mode's QUANT_KINDS)."""
    if path.startswith("quant:"):
        return QUANT_KINDS
    return KINDS if wide or path.startswith("bf16") else NARROW_KINDS
