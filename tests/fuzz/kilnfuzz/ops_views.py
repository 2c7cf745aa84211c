"""Op kinds that make values (inputs, parameters) and that move data: views
(permute, slice, select, expand, reshape, as_strided, squeeze/unsqueeze),
copies to another layout, padding, flips, repeats, cat and split."""

import torch

from kilnfuzz.kinds import (INT64_MAX, Kind, Plan, any_rank, as_laid_out, aten, leaf, maybe_neg, prod, reshape,
                            viewable)


class Source(Kind):
    """A new float tensor of rank len(sizes): a runtime input, or (param=True)
    a constant the compiler may fold through."""

    source = True

    def __init__(self, name, role, weight):
        self.name, self.role, self.weight = name, role, weight

    def propose(self, g):
        rank = g.rng.choice((0, 1, 2, 2, 3, 3, 3, 4, 4, 4))
        return [], [g.size() for _ in range(rank)]

    def plan(self, rng, metas, sizes):
        init = "special" if rng.random() < 0.04 else "normal"
        return Plan(leaves=[leaf(rng, sizes, role=self.role, init=init)], acc=0)

    def emit(self, b, xs, ls, a):
        return ls[0]


class Permute(Kind):
    name, weight, arg_preds = "permute", 3.0, (any_rank(2),)

    def plan(self, rng, m, sizes):
        r = m[0].rank
        if r < 2:
            return None
        perm = list(range(r))
        if rng.random() < 0.6:  # a transpose of two dims
            i, j = rng.sample(range(r), 2)
            perm[i], perm[j] = perm[j], perm[i]
        else:
            rng.shuffle(perm)
            if perm == sorted(perm):
                perm[-1], perm[-2] = perm[-2], perm[-1]
        return Plan({"perm": perm})

    def emit(self, b, xs, ls, a):
        return b.call(aten.permute.default, xs[0], a["perm"])


class Slice(Kind):
    name, weight, arg_preds = "slice", 2.0, (any_rank(1),)

    def plan(self, rng, m, sizes):
        shape = m[0].shape
        cand = [d for d, n in enumerate(shape) if n >= 1]
        if not cand:
            return None
        d = rng.choice(cand)
        n = shape[d]
        step = rng.choice((1, 1, 2, 3))
        start = rng.randrange(n)
        end = rng.choice((n, INT64_MAX, rng.randint(start + 1, n)))
        if rng.random() < 0.25:
            start -= n  # negative indices count from the end
        if end != INT64_MAX and end < n and rng.random() < 0.25:
            end -= n
        return Plan({"dim": maybe_neg(rng, d, len(shape)), "start": start, "end": end, "step": step})

    def emit(self, b, xs, ls, a):
        return b.call(aten.slice.Tensor, xs[0], a["dim"], a["start"], a["end"], a["step"])


class Select(Kind):
    name, weight, arg_preds = "select", 1.0, (any_rank(1),)

    def plan(self, rng, m, sizes):
        shape = m[0].shape
        d = rng.randrange(len(shape))
        if shape[d] == 0:
            return None
        i = rng.randrange(-shape[d], shape[d])
        return Plan({"dim": maybe_neg(rng, d, len(shape)), "index": i})

    def emit(self, b, xs, ls, a):
        return b.call(aten.select.int, xs[0], a["dim"], a["index"])


class Unsqueeze(Kind):
    name, weight, arg_preds = "unsqueeze", 1.0, (any_rank(0, 5),)

    def plan(self, rng, m, sizes):
        r = m[0].rank
        return Plan({"dim": rng.randint(-(r + 1), r)})

    def emit(self, b, xs, ls, a):
        return b.call(aten.unsqueeze.default, xs[0], a["dim"])


class Squeeze(Kind):
    name, weight, arg_preds = "squeeze", 1.0, (any_rank(1),)

    def plan(self, rng, m, sizes):
        ones = [d for d, n in enumerate(m[0].shape) if n == 1]
        if not ones:
            return None
        dims = sorted(rng.sample(ones, rng.randint(1, len(ones))))
        return Plan({"dims": dims})

    def emit(self, b, xs, ls, a):
        return b.call(aten.squeeze.dims, xs[0], a["dims"])


class Expand(Kind):
    """Size-1 dims broadcast to the free sizes; maybe a new leading dim."""

    name, weight, arg_preds, n_sizes = "expand", 1.5, (any_rank(0, 4),), 2

    def plan(self, rng, m, sizes):
        shape = list(m[0].shape)
        target = list(shape)
        k = 0
        for d, n in enumerate(shape):
            if n == 1 and rng.random() < 0.7:
                target[d] = sizes[k % len(sizes)]
                k += 1
        if len(shape) < 4 and (target == shape or rng.random() < 0.3):
            target.insert(0, sizes[-1])
        if target == shape:
            return None
        lead = len(target) - len(shape)
        written = [-1 if d >= lead and target[d] == shape[d - lead] and rng.random() < 0.4 else target[d]
                   for d in range(len(target))]
        return Plan({"size": written})

    def emit(self, b, xs, ls, a):
        return b.call(aten.expand.default, xs[0], a["size"])


def _divisors(n):
    return [f for f in range(2, n) if n % f == 0]


class Reshape(Kind):
    name, weight, arg_preds = "reshape", 2.0, (any_rank(0),)

    def plan(self, rng, m, sizes):
        shape, numel = list(m[0].shape), m[0].numel
        mode = rng.choice(("flatten", "split", "all", "factor"))
        if mode == "flatten" and len(shape) >= 2:
            i = rng.randrange(len(shape) - 1)
            j = rng.randrange(i + 1, len(shape))
            target = shape[:i] + [prod(shape[i:j + 1])] + shape[j + 1:]
        elif mode == "split" and shape:
            d = rng.randrange(len(shape))
            fs = _divisors(shape[d])
            f = rng.choice(fs) if fs else 1
            target = shape[:d] + [f, shape[d] // f] + shape[d + 1:]
        elif mode == "all":
            target = [numel]
        else:
            target, rest = [], numel
            for _ in range(rng.randint(0, 3)):
                fs = _divisors(rest) + [1]
                f = rng.choice(fs)
                target.append(f)
                rest //= f
            target.append(rest)
            rng.shuffle(target)
        if target == shape:
            return None
        ok = viewable(m[0].val, target)
        if target and rng.random() < 0.4:
            target[rng.randrange(len(target))] = -1 if numel else target[0]
        return Plan({"shape": target, "viewable": ok})

    def emit(self, b, xs, ls, a):
        return reshape(b, xs[0], a["shape"], a["viewable"])


class AsStrided(Kind):
    """as_strided over a contiguous value: sizes, strides (0 and overlaps
    included) and an offset that stay inside the value's elements, so the
    result does not depend on memory beyond it.

    The plan sees the float32 value contiguous; a replay in another dtype
    (the float64 reference and its noisy runs, eager bf16) may hold it laid
    out otherwise (torch's CPU convolution returns a float64 result
    channels-last where the float32 one is contiguous: seed 19020 graph
    18579), and as_strided would then read its storage in another order.
    Such a replay reads a contiguous clone (kinds.as_laid_out): the same
    elements the program means."""

    name, weight, arg_preds = "as_strided", 0.7, (any_rank(0),)

    def plan(self, rng, m, sizes):
        v = m[0].val
        n = v.numel()
        if n < 1 or not v.is_contiguous() or v.storage_offset() != 0:
            return None
        for _ in range(20):
            r = rng.randint(1, 3)
            size = [rng.randint(1, max(1, min(8, n))) for _ in range(r)]
            stride = [rng.choice((0, 1, 2, 3, size[-1], n // max(size[0], 1))) for _ in range(r)]
            reach = sum((s - 1) * st for s, st in zip(size, stride))
            if reach < n:
                return Plan({"size": size, "stride": stride, "offset": rng.randint(0, n - 1 - reach)})
        return None

    def emit(self, b, xs, ls, a):
        return b.call(aten.as_strided.default, as_laid_out(b, xs[0]), a["size"], a["stride"], a["offset"])


class Contiguous(Kind):
    name, weight, arg_preds = "contiguous", 1.0, (any_rank(1),)

    def plan(self, rng, m, sizes):
        fmt = "channels_last" if m[0].rank == 4 and rng.random() < 0.5 else "contiguous"
        return Plan({"format": fmt, "how": rng.choice(("clone", "to_copy"))})

    def emit(self, b, xs, ls, a):
        fmt = torch.channels_last if a["format"] == "channels_last" else torch.contiguous_format
        if a["how"] == "clone":
            return b.call(aten.clone.default, xs[0], memory_format=fmt)
        return b.call(aten._to_copy.default, xs[0], memory_format=fmt)


class Pad(Kind):
    name, weight, arg_preds = "pad", 0.7, (any_rank(1),)

    def plan(self, rng, m, sizes):
        shape = m[0].shape
        k = rng.randint(1, min(3, len(shape)))
        pads = []
        for d in range(len(shape) - 1, len(shape) - 1 - k, -1):  # the last dim first, as torch lists them
            lo, hi = rng.choice((0, 1, 2, -1)), rng.choice((0, 1, 3, -1))
            if shape[d] + lo + hi < 1:
                lo = hi = 0
            pads += [lo, hi]
        if not any(pads):
            pads[0] = 1
        value = rng.choice((0.0, 0.0, 1.5, -2.0))
        return Plan({"pad": pads, "value": value})

    def emit(self, b, xs, ls, a):
        return b.call(aten.constant_pad_nd.default, xs[0], a["pad"], a["value"])


class Flip(Kind):
    name, weight, arg_preds = "flip", 0.5, (any_rank(1),)

    def plan(self, rng, m, sizes):
        r = m[0].rank
        return Plan({"dims": sorted(rng.sample(range(r), rng.randint(1, r)))})

    def emit(self, b, xs, ls, a):
        return b.call(aten.flip.default, xs[0], a["dims"])


class Repeat(Kind):
    name, weight, arg_preds = "repeat", 0.5, (any_rank(0, 3),)

    def plan(self, rng, m, sizes):
        r = m[0].rank
        reps = [rng.choice((1, 1, 2, 3)) for _ in range(r + rng.randint(0, 1))]
        if not reps:
            reps = [2]
        elif all(x == 1 for x in reps):
            reps[-1] = 2
        return Plan({"repeats": reps})

    def emit(self, b, xs, ls, a):
        return b.call(aten.repeat.default, xs[0], a["repeats"])


class Cat(Kind):
    """cat of the value with new leaves (their size along the dim free), with
    itself, or both."""

    name, weight, arg_preds, n_sizes = "cat", 1.5, (any_rank(1),), 2

    def plan(self, rng, m, sizes):
        x = m[0]
        d = rng.randrange(x.rank)
        parts, specs = [], []
        for s in sizes[:rng.randint(1, 2)]:
            if rng.random() < 0.3:
                parts.append("x")
            else:
                shape = list(x.shape)
                shape[d] = s
                init = "index" if x.dtype == torch.int64 else "bool" if x.dtype == torch.bool else "normal"
                parts.append(len(specs))
                specs.append(leaf(rng, shape, init=init, high=8, dtype=x.dtype))
        order = ["x"] + parts
        rng.shuffle(order)
        return Plan({"order": order, "dim": maybe_neg(rng, d, x.rank)}, specs)

    def emit(self, b, xs, ls, a):
        return b.call(aten.cat.default, [xs[0] if p == "x" else ls[p] for p in a["order"]], a["dim"])


class Split(Kind):
    name, weight, arg_preds = "split", 1.0, (any_rank(1),)

    def plan(self, rng, m, sizes):
        shape = m[0].shape
        cand = [d for d, n in enumerate(shape) if n >= 2]
        if not cand:
            return None
        d = rng.choice(cand)
        n, parts = shape[d], []
        while n > 0 and len(parts) < 3:
            k = rng.randint(1, n)
            parts.append(k)
            n -= k
        if n:
            parts.append(n)
        if len(parts) == 1:
            parts = [1, shape[d] - 1]
        return Plan({"sizes": parts, "dim": maybe_neg(rng, d, len(shape))})

    def emit(self, b, xs, ls, a):
        return b.call(aten.split_with_sizes.default, xs[0], a["sizes"], a["dim"])


KINDS = [Source("input", "input", 1.0), Source("const", "param", 0.25), Permute(), Slice(), Select(),
         Unsqueeze(), Squeeze(), Expand(), Reshape(), AsStrided(), Contiguous(), Pad(), Flip(), Repeat(),
         Cat(), Split()]
