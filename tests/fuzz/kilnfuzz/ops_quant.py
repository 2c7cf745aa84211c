"""The quant mode's op kinds (quant.py): linear layers and inputs sized for
the quantized GEMMs' edges. K (the input features) not a multiple of 16 or
32 or of an int4 group (32, 128: a partial last group), N (the output
features) with tails of the 8- and 16-column panels, and row counts either
side of the a8 GEMV's 8 (1, 2, 3, 8, 9, 17, ...).

They are in ops.KINDS at weight 0, which changes no draw of the other modes
(random.choices never picks a last kind of weight 0), and drawn by
ops.QUANT_KINDS; the quant mode's "input" draws its sizes from these lists
(a step stores its sizes, so the plain Source resolves it)."""

from kilnfuzz.kinds import Kind, Plan, aten, float_rank, leaf
from kilnfuzz.ops_views import Source

ROWS = (1, 1, 2, 3, 5, 8, 8, 9, 16, 17, 33)
FEATURES = (1, 3, 8, 16, 17, 31, 32, 33, 40, 47, 64, 65, 100, 127, 128, 129, 160, 200, 257)


class QSource(Source):
    """An input (rows..., K) of ranks 1 to 3, K from FEATURES."""

    def propose(self, g):
        rank = g.rng.choice((1, 2, 2, 2, 3))
        lead = [g.rng.choice(ROWS) for _ in range(rank - 1)]
        if rank == 3:
            lead[0] = g.rng.choice((1, 2, 3))
        return [], lead + [g.rng.choice(FEATURES)]


class QLinear(Kind):
    """A linear layer of N output features from FEATURES: nn.Linear's
    aten.linear (weight (N, K), or stored (K, N) and read through a
    permute), or for a 2-d input mm / addmm by a (K, N) weight."""

    name, weight, arg_preds, n_sizes = "qlinear", 0.0, (float_rank(1, 4),), 1

    def propose(self, g):
        x = g.pick(self.arg_preds[0])
        if x is None:
            return None
        return [x], [g.rng.choice(FEATURES)]

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        k, n = x.shape[-1], sizes[0]
        form = rng.choice(("linear", "linear", "linear", "linear_t", "mm", "addmm"))
        if x.rank != 2 and form in ("mm", "addmm"):
            form = "linear"
        wshape = (n, k) if form == "linear" else (k, n)
        specs = [leaf(rng, wshape, role="param", init="weight", high=k)]
        bias = form == "addmm" or (form != "mm" and rng.random() < 0.6)
        if bias:
            specs.append(leaf(rng, (n,), role="param", init="weight", high=k))
        return Plan({"form": form, "bias": bias}, specs, acc=k)

    def emit(self, b, xs, ls, a):
        form, x = a["form"], xs[0]
        if form == "mm":
            return b.call(aten.mm.default, x, ls[0])
        if form == "addmm":
            return b.call(aten.addmm.default, ls[1], x, ls[0])
        w = b.call(aten.permute.default, ls[0], [1, 0]) if form == "linear_t" else ls[0]
        return b.call(aten.linear.default, x, w, ls[1] if a["bias"] else None)


KINDS = [QLinear()]
