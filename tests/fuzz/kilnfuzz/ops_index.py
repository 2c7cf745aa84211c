"""Op kinds with int64 indices: gather, index_select, advanced indexing and
embedding lookups. Indices are new leaves (runtime inputs or constants)
drawn inside the indexed dimension, so every program is well defined."""

import torch

from kilnfuzz.kinds import Kind, Plan, any_rank, aten, leaf, maybe_neg


def _index(rng, shape, high, p_param=0.4):
    return leaf(rng, shape, init="index", high=high, p_param=p_param, dtype=torch.int64)


class Gather(Kind):
    name, weight, arg_preds, n_sizes = "gather", 1.0, (any_rank(1),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        d = rng.randrange(x.rank)
        if x.shape[d] < 1 or 0 in x.shape:
            return None
        shape = [sizes[0] if i == d else rng.randint(1, s) for i, s in enumerate(x.shape)]
        return Plan({"dim": maybe_neg(rng, d, x.rank)}, [_index(rng, shape, x.shape[d])])

    def emit(self, b, xs, ls, a):
        return b.call(aten.gather.default, xs[0], a["dim"], ls[0])


class IndexSelect(Kind):
    name, weight, arg_preds, n_sizes = "index_select", 1.0, (any_rank(1),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        d = rng.randrange(x.rank)
        if x.shape[d] < 1:
            return None
        return Plan({"dim": maybe_neg(rng, d, x.rank)}, [_index(rng, (sizes[0],), x.shape[d])])

    def emit(self, b, xs, ls, a):
        return b.call(aten.index_select.default, xs[0], a["dim"], ls[0])


class Index(Kind):
    """x[idx] or x[:, idx] (aten.index.Tensor with one index tensor)."""

    name, weight, arg_preds, n_sizes = "index", 0.5, (any_rank(1),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        d = rng.randrange(min(x.rank, 2))
        if x.shape[d] < 1:
            return None
        shape = (sizes[0],) if rng.random() < 0.7 else (2, sizes[0])
        return Plan({"dim": d}, [_index(rng, shape, x.shape[d])])

    def emit(self, b, xs, ls, a):
        return b.call(aten.index.Tensor, xs[0], [None] * a["dim"] + [ls[0]])


class Embedding(Kind):
    """A lookup table (V, D), usually a parameter, read at new indices."""

    name, weight, n_sizes, source = "embedding", 0.8, 3, True

    def plan(self, rng, m, sizes):
        v, d, n = sizes
        idx_shape = (n,) if rng.random() < 0.5 else (rng.choice((1, 2, 3)), n)
        return Plan({}, [leaf(rng, (v, d), p_param=0.8), _index(rng, idx_shape, v, p_param=0.2)], acc=0)

    def emit(self, b, xs, ls, a):
        return b.call(aten.embedding.default, ls[0], ls[1])


class IndexSource(Kind):
    """A runtime int64 input (values 0..7): views, comparisons and casts of
    integers."""

    name, weight, source = "int_input", 0.2, True

    def propose(self, g):
        return [], [g.size() for _ in range(g.rng.randint(1, 3))]

    def plan(self, rng, m, sizes):
        return Plan({}, [_index(rng, sizes, 8, p_param=0.0)], acc=0)

    def emit(self, b, xs, ls, a):
        return ls[0]


KINDS = [Gather(), IndexSelect(), Index(), Embedding(), IndexSource()]
