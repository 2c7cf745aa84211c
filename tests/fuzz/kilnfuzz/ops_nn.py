"""Op kinds of neural-network layers: linear/matmul/bmm/addmm with constant
and runtime weights (also stored transposed and read through a permute, as
W.t() is), conv2d, batch norm, attention, norms (also written out as models
decompose them), softmax, reductions and pooling."""

import dataclasses

import torch

from kilnfuzz.kinds import Kind, Plan, aten, dims_subset, float_rank, leaf, maybe_neg, prod, reshape, viewable


def _weight(rng, shape, fan_in, p_param=0.75):
    return leaf(rng, shape, init="weight", high=fan_in, p_param=p_param)


class Linear(Kind):
    name, weight, arg_preds, n_sizes = "linear", 3.0, (float_rank(1, 4),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        k, n = x.shape[-1], sizes[0]
        stored_t = rng.random() < 0.35  # the weight kept as (K, N) and used as W.t()
        specs = [_weight(rng, (k, n) if stored_t else (n, k), k)]
        bias = rng.random() < 0.5
        if bias:
            specs.append(_weight(rng, (n,), k))
        return Plan({"t": stored_t, "bias": bias}, specs, acc=k)

    def emit(self, b, xs, ls, a):
        w = b.call(aten.permute.default, ls[0], [1, 0]) if a["t"] else ls[0]
        return b.call(aten.linear.default, xs[0], w, ls[1] if a["bias"] else None)


class Matmul(Kind):
    """x @ B with B a new (K, N) or batched (..., K, N) leaf, written as
    torch's matmul decomposes (mm or bmm between views), or as one
    aten.matmul; or W @ x with a constant on the left."""

    name, weight, arg_preds, n_sizes = "matmul", 2.5, (float_rank(1, 4),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        r, k, n = x.rank, x.shape[-1], sizes[0]
        form = rng.choice(("2d", "2d", "batched", "raw", "left"))
        if form == "left" and r == 2:
            return Plan({"form": "left", "t": False}, [_weight(rng, (n, x.shape[0]), x.shape[0])], acc=x.shape[0])
        if form == "batched" and r >= 3:
            bshape = tuple(1 if rng.random() < 0.3 else s for s in x.shape[:-2]) + (k, n)
            batch = tuple(torch.broadcast_shapes(x.shape[:-2], bshape[:-2]))
            attrs = {"form": "batched", "t": False, "batch": batch, "m": x.shape[-2], "k": k, "n": n,
                     "xv": viewable(x.val.expand(batch + x.shape[-2:]), (prod(batch), x.shape[-2], k))}
            return Plan(attrs, [_weight(rng, bshape, k, p_param=0.5)], acc=k)
        if r == 1:  # a vector times a matrix: as a (1, K) @ (K, N) mm
            return Plan({"form": "vec", "t": False, "k": k, "n": n}, [_weight(rng, (k, n), k)], acc=k)
        if form == "raw":
            return Plan({"form": "raw", "t": False}, [_weight(rng, (k, n), k)], acc=k)
        stored_t = rng.random() < 0.4
        spec = _weight(rng, (n, k) if stored_t else (k, n), k)
        if r == 2:
            return Plan({"form": "mm", "t": stored_t}, [spec], acc=k)
        return Plan({"form": "fold", "t": stored_t, "out": x.shape[:-1] + (n,),
                     "xv": viewable(x.val, (-1, k)), "k": k}, [spec], acc=k)

    def emit(self, b, xs, ls, a):
        x = xs[0]
        w = b.call(aten.permute.default, ls[0], [1, 0]) if a["t"] else ls[0]
        form = a["form"]
        if form == "left":
            return b.call(aten.mm.default, w, x)
        if form == "raw":
            return b.call(aten.matmul.default, x, w)
        if form == "vec":
            y = b.call(aten.mm.default, b.call(aten.unsqueeze.default, x, 0), w)
            return b.call(aten.squeeze.dims, y, [0])
        if form == "mm":
            return b.call(aten.mm.default, x, w)
        if form == "fold":
            y = b.call(aten.mm.default, reshape(b, x, [-1, a["k"]], a["xv"]), w)
            return b.call(aten.view.default, y, list(a["out"]))
        batch, mm, k, n = list(a["batch"]), a["m"], a["k"], a["n"]
        bsz = prod(batch)
        xe = reshape(b, b.call(aten.expand.default, x, batch + [mm, k]), [bsz, mm, k], a["xv"])
        we = b.call(aten.view.default, b.call(aten.clone.default, b.call(aten.expand.default, w, batch + [k, n]),
                                              memory_format=torch.contiguous_format), [bsz, k, n])
        return b.call(aten.view.default, b.call(aten.bmm.default, xe, we), batch + [mm, n])


class Bmm(Kind):
    name, weight, arg_preds, n_sizes = "bmm", 1.5, (float_rank(3, 3),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank != 3:
            return None
        bs, mm, k = x.shape
        form = rng.choice(("leaf", "leaf_t", "self_t", "left"))
        if form == "self_t":  # x @ x^T, as attention scores are
            return Plan({"form": form}, acc=k)
        if form == "left":
            return Plan({"form": form}, [_weight(rng, (bs, sizes[0], mm), mm, p_param=0.4)], acc=mm)
        shape = (bs, sizes[0], k) if form == "leaf_t" else (bs, k, sizes[0])
        return Plan({"form": form}, [_weight(rng, shape, k, p_param=0.4)], acc=k)

    def emit(self, b, xs, ls, a):
        x, form = xs[0], a["form"]
        if form == "self_t":
            return b.call(aten.bmm.default, x, b.call(aten.permute.default, x, [0, 2, 1]))
        if form == "left":
            return b.call(aten.bmm.default, ls[0], x)
        w = b.call(aten.permute.default, ls[0], [0, 2, 1]) if form == "leaf_t" else ls[0]
        return b.call(aten.bmm.default, x, w)


class Addmm(Kind):
    name, weight, arg_preds, n_sizes = "addmm", 1.0, (float_rank(2, 2),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank != 2:
            return None
        mm, k = x.shape
        n = sizes[0]
        stored_t = rng.random() < 0.5
        bias = rng.choice(((n,), (1, n), (mm, n)))
        specs = [_weight(rng, bias, k), _weight(rng, (n, k) if stored_t else (k, n), k)]
        return Plan({"t": stored_t, "beta": rng.choice((1, 1, 0.5)), "alpha": rng.choice((1, 1, 2.0))}, specs,
                    acc=k)

    def emit(self, b, xs, ls, a):
        w = b.call(aten.permute.default, ls[1], [1, 0]) if a["t"] else ls[1]
        kw = {k: a[k] for k in ("beta", "alpha") if a[k] != 1}
        return b.call(aten.addmm.default, ls[0], xs[0], w, **kw)


def _divisors_all(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def _conv_out(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


class Conv2d(Kind):
    name, weight, arg_preds, n_sizes = "conv2d", 2.5, (float_rank(4, 4),), 1

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank != 4:
            return None
        _, c, h, w = x.shape
        for _ in range(10):
            groups = rng.choice((1, 1, 1, c, rng.choice(_divisors_all(c))))
            kh = rng.choice((1, 3, 3, 2, 5))
            kw = kh if rng.random() < 0.8 else rng.choice((1, 3))
            stride = [rng.choice((1, 1, 2))] * 2
            pad = [rng.choice((0, 1, 2))] * 2
            dil = [rng.choice((1, 1, 2))] * 2
            if kh == kw == 1:
                # A 1x1 kernel's dilation changes nothing but the path eager
                # takes: torch 2.13's CPU convolution segfaults on a
                # channels-last (4, 16, 4, 1) input, 1x1 kernel with bias,
                # stride 2, padding 1, dilation 2 (seed 20081 graph 208).
                # Set after the draw, so the random stream is unchanged.
                dil = [1, 1]
            if pad[0] > kh // 2 + 1:
                continue
            if min(_conv_out(h, kh, stride[0], pad[0], dil[0]), _conv_out(w, kw, stride[1], pad[1], dil[1])) < 1:
                continue
            cout = groups * self._per_group(sizes[0])
            fan_in = (c // groups) * kh * kw
            specs = [_weight(rng, (cout, c // groups, kh, kw), fan_in, p_param=0.85)]
            bias = rng.random() < 0.6
            if bias:
                specs.append(_weight(rng, (cout,), fan_in))
            return Plan({"stride": stride, "pad": pad, "dil": dil, "groups": groups, "bias": bias}, specs,
                        acc=fan_in)
        return None

    def emit(self, b, xs, ls, a):
        return b.call(aten.convolution.default, xs[0], ls[0], ls[1] if a["bias"] else None, a["stride"], a["pad"],
                      a["dil"], False, [0, 0], a["groups"])


    @staticmethod
    def _per_group(size):
        return min(size, 8)


class Conv2dWide(Conv2d):
    """A convolution of 16 to 33 output channels per group: what kiln's
    channels-last kernels take (kiln_pass_layout.c; fp32 and bf16 NHWC
    convs). Both modes draw it as often as conv2d; until session 18 the
    float32 mode did not (ops.NARROW_KINDS), and no float32 graph reached
    the fp32 NHWC kernels."""

    name, weight = "conv2d_wide", Conv2d.weight

    @staticmethod
    def _per_group(size):
        return min(max(size, 16), 33)


class BatchNorm(Kind):
    """Inference batch norm (running statistics): after a conv kiln folds it
    into the conv's weights."""

    name, weight, arg_preds = "batch_norm", 0.8, (float_rank(2, 4),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 2:
            return None
        c = x.shape[1]
        stats = [leaf(rng, (c,), "param"), leaf(rng, (c,), "param", "positive")]  # running mean, variance
        specs = [leaf(rng, (c,), "param", "positive"), leaf(rng, (c,), "param")] + \
                [dataclasses.replace(s, trainable=False) for s in stats]
        return Plan({"eps": rng.choice((1e-5, 1e-3)), "affine": rng.random() < 0.8}, specs)

    def emit(self, b, xs, ls, a):
        w, bias = (ls[0], ls[1]) if a["affine"] else (None, None)
        return b.call(aten._native_batch_norm_legit_no_training.default, xs[0], w, bias, ls[2], ls[3], 0.1,
                      a["eps"])[0]


class Attention(Kind):
    """scaled_dot_product_attention on a (B, H, L, E) value: self-attention,
    or new K and V leaves of length S; causal, a bool mask (each row keeps
    one key) or an additive float mask; grouped-query heads; a scale."""

    name, weight, arg_preds, n_sizes = "attention", 2.5, (float_rank(4, 4),), 2

    def plan(self, rng, m, sizes):
        q = m[0]
        if not q.is_float or q.rank != 4:
            return None
        bs, h, ln, e = q.shape
        form = rng.choice(("self", "kv", "kv"))
        s, ev = (ln, e) if form == "self" else (sizes[0], sizes[1])
        hk = h
        if form == "kv" and rng.random() < 0.25:
            hk = rng.choice(_divisors_all(h))  # grouped-query: fewer K/V heads
        specs = []
        if form == "kv":
            specs = [leaf(rng, (bs, hk, s, e), p_param=0.2), leaf(rng, (bs, hk, s, ev), p_param=0.2)]
        mask = rng.choice(("none", "causal", "bool", "float"))
        if mask == "bool":
            specs.append(leaf(rng, rng.choice(((ln, s), (bs, 1, ln, s))), init="mask", dtype=torch.bool))
        elif mask == "float":
            specs.append(leaf(rng, rng.choice(((ln, s), (1, 1, ln, s), (bs, h, ln, s)))))
        scale = rng.choice((None, None, 0.3, 1.0))
        if hk == h and mask != "bool" and rng.random() < 0.35:
            # Written out, as models without F.scaled_dot_product_attention do
            # (kiln's attention pass fuses it back).
            dims = {"bh": bs * h, "l": ln, "s": s, "e": e, "ev": ev, "b": bs, "h": h,
                    "scale": scale if scale is not None else e ** -0.5}
            if mask == "causal":  # a registered tril buffer, as GPT-2-style code has
                specs.append(leaf(rng, (ln, s), role="param", init="tril", dtype=torch.bool))
            return Plan({"form": form, "mask": mask, "written": True, **dims}, specs, acc=s + e)
        return Plan({"form": form, "mask": mask, "scale": scale, "gqa": hk != h, "written": False}, specs,
                    acc=s + e)

    def emit(self, b, xs, ls, a):
        q = xs[0]
        k, v = (q, q) if a["form"] == "self" else (ls[0], ls[1])
        if a["written"]:
            return self._written(b, q, k, v, ls[-1] if a["mask"] in ("float", "causal") else None, a)
        mask = ls[-1] if a["mask"] in ("bool", "float") else None
        kw = {}
        if a["scale"] is not None:
            kw["scale"] = a["scale"]
        if a["gqa"]:
            kw["enable_gqa"] = True
        return b.call(aten.scaled_dot_product_attention.default, q, k, v, mask, 0.0, a["mask"] == "causal", **kw)

    @staticmethod
    def _written(b, q, k, v, mask, a):
        """softmax(q k^T * scale + mask) v through bmm, as torch.export has a
        hand-written attention (matmul decomposed into expand, view, bmm)."""
        bh, ln, s, e, ev = a["bh"], a["l"], a["s"], a["e"], a["ev"]
        four = [a["b"], a["h"]]

        def to3(t, rows, cols):
            t = b.call(aten.expand.default, t, four + [rows, cols])
            return b.call(aten.view.default, b.call(aten.clone.default, t, memory_format=torch.contiguous_format),
                          [bh, rows, cols])

        kt = b.call(aten.permute.default, k, [0, 1, 3, 2])
        scores = b.call(aten.view.default, b.call(aten.bmm.default, to3(q, ln, e), to3(kt, e, s)), four + [ln, s])
        scores = b.call(aten.mul.Tensor, scores, a["scale"])
        if a["mask"] == "float":
            scores = b.call(aten.add.Tensor, scores, mask)
        elif a["mask"] == "causal":
            scores = b.call(aten.where.self, mask, scores, b.call(aten.scalar_tensor.default, float("-inf")))
        p = b.call(aten._softmax.default, scores, -1, False)
        out = b.call(aten.bmm.default, to3(p, ln, s), to3(v, s, ev))
        return b.call(aten.view.default, out, four + [ln, ev])


REDUCE = ("sum", "mean", "amax", "amin", "var", "sum_all", "max_dim", "sum_nodims")


class Reduce(Kind):
    name, weight, arg_preds = "reduce", 3.0, (float_rank(1),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        op = rng.choice(REDUCE)
        dims = dims_subset(rng, x.rank)
        if op == "max_dim":
            dims = dims[:1]
        if op in ("sum_all", "sum_nodims"):
            dims = list(range(x.rank))
        acc = prod(x.shape[d] for d in dims)
        correction = rng.choice((0, 1)) if acc > 1 else 0  # var over one element with correction 1 is NaN
        return Plan({"op": op, "dims": dims, "keepdim": rng.random() < 0.5, "correction": correction},
                    acc=max(acc, 1))

    def emit(self, b, xs, ls, a):
        x, op, dims, keep = xs[0], a["op"], a["dims"], a["keepdim"]
        if op == "sum":
            return b.call(aten.sum.dim_IntList, x, dims, keep)
        if op == "sum_nodims":  # an empty dim list reduces over every dim
            return b.call(aten.sum.dim_IntList, x, [], keep)
        if op == "mean":
            return b.call(aten.mean.dim, x, dims, keep)
        if op in ("amax", "amin"):
            return b.call(getattr(aten, op).default, x, dims, keep)
        if op == "var":
            return b.call(aten.var.correction, x, dims, correction=a["correction"], keepdim=keep)
        if op == "max_dim":  # the values only: which index wins a tie is not fixed
            return b.call(aten.max.dim, x, dims[0], keep)[0]
        return b.call(aten.sum.default, x)


class Softmax(Kind):
    name, weight, arg_preds = "softmax", 2.0, (float_rank(1),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        d = rng.randrange(x.rank)
        return Plan({"dim": maybe_neg(rng, d, x.rank), "log": rng.random() < 0.3}, acc=x.shape[d])

    def emit(self, b, xs, ls, a):
        op = aten._log_softmax.default if a["log"] else aten._softmax.default
        return b.call(op, xs[0], a["dim"], False)


class Cumsum(Kind):
    name, weight, arg_preds = "cumsum", 0.5, (float_rank(1),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        d = rng.randrange(x.rank)
        return Plan({"dim": maybe_neg(rng, d, x.rank)}, acc=x.shape[d])

    def emit(self, b, xs, ls, a):
        return b.call(aten.cumsum.default, xs[0], a["dim"])


class Norm(Kind):
    """layer_norm and rms_norm, as ATen ops or written out (mean, rsqrt,
    mul) the way model code does."""

    name, weight, arg_preds = "norm", 2.5, (float_rank(1),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank < 1:
            return None
        form = rng.choice(("layer_norm", "rms_norm", "rms_decomp", "ln_decomp", "group_norm"))
        k = rng.randint(1, min(2, x.rank)) if form in ("layer_norm", "rms_norm") else 1
        shape = x.shape[-k:]
        if form == "group_norm":
            if x.rank < 3:
                return None
            c = x.shape[1]
            attrs = {"form": form, "groups": rng.choice(_divisors_all(c)), "eps": 1e-5,
                     "n": x.shape[0], "c": c, "hw": prod(x.shape[2:])}
            return Plan(attrs, [leaf(rng, (c,), "param", "positive"), leaf(rng, (c,), "param")],
                        acc=prod(x.shape[1:]))
        w = rng.random() < 0.7
        bias = form in ("layer_norm", "ln_decomp") and rng.random() < 0.6
        specs = ([leaf(rng, shape, init="positive", p_param=0.8)] if w else []) + \
                ([leaf(rng, shape, p_param=0.8)] if bias else [])
        eps = rng.choice((1e-5, 1e-6, None)) if form == "rms_norm" else rng.choice((1e-5, 1e-6))
        return Plan({"form": form, "shape": list(shape), "w": w, "b": bias, "eps": eps,
                     "pow": rng.random() < 0.5}, specs, acc=prod(shape))

    def emit(self, b, xs, ls, a):
        x, form = xs[0], a["form"]
        w = ls[0] if a.get("w") else None
        bias = ls[1 if a.get("w") else 0] if a.get("b") else None
        if form == "layer_norm":
            return b.call(aten.native_layer_norm.default, x, a["shape"], w, bias, a["eps"])[0]
        if form == "rms_norm":
            return b.call(aten.rms_norm.default, x, a["shape"], w, a["eps"])
        if form == "group_norm":
            return b.call(aten.native_group_norm.default, x, ls[0], ls[1], a["n"], a["c"], a["hw"], a["groups"],
                          a["eps"])[0]
        if form == "rms_decomp":  # x * rsqrt(mean(x^2) + eps) * w, as Llama's RMSNorm
            sq = b.call(aten.pow.Tensor_Scalar, x, 2) if a["pow"] else b.call(aten.mul.Tensor, x, x)
            ms = b.call(aten.add.Tensor, b.call(aten.mean.dim, sq, [-1], True), a["eps"])
            y = b.call(aten.mul.Tensor, x, b.call(aten.rsqrt.default, ms))
        else:  # (x - mean) * rsqrt(var + eps) * w + b
            xc = b.call(aten.sub.Tensor, x, b.call(aten.mean.dim, x, [-1], True))
            if a["pow"]:
                var = b.call(aten.var.correction, x, [-1], correction=0, keepdim=True)
            else:
                var = b.call(aten.mean.dim, b.call(aten.mul.Tensor, xc, xc), [-1], True)
            y = b.call(aten.mul.Tensor, xc, b.call(aten.rsqrt.default, b.call(aten.add.Tensor, var, a["eps"])))
        if w is not None:
            y = b.call(aten.mul.Tensor, w, y) if form == "rms_decomp" else b.call(aten.mul.Tensor, y, w)
        if bias is not None:
            y = b.call(aten.add.Tensor, y, bias)
        return y


class Pool(Kind):
    name, weight, arg_preds = "pool", 1.0, (float_rank(4, 4),)

    def plan(self, rng, m, sizes):
        x = m[0]
        if not x.is_float or x.rank != 4:
            return None
        h, w = x.shape[2:]
        form = rng.choice(("max", "avg", "adaptive", "upsample"))
        if form == "adaptive":
            return Plan({"form": form, "out": [rng.randint(1, h), rng.randint(1, w)]}, acc=h * w)
        if form == "upsample":
            return Plan({"form": form, "out": [h * rng.choice((1, 2)), w * rng.choice((2, 3))]})
        for _ in range(10):
            k = rng.choice((1, 2, 3))
            s = rng.choice((1, 2, k))
            p = rng.randint(0, k // 2)
            ceil = rng.random() < 0.3
            if _conv_out(h, k, s, p, 1) >= 1 and _conv_out(w, k, s, p, 1) >= 1:
                return Plan({"form": form, "k": k, "s": s, "p": p, "ceil": ceil,
                             "count_pad": rng.random() < 0.5}, acc=k * k)
        return None

    def emit(self, b, xs, ls, a):
        x, form = xs[0], a["form"]
        if form == "adaptive":
            return b.call(aten._adaptive_avg_pool2d.default, x, a["out"])
        if form == "upsample":
            return b.call(aten.upsample_nearest2d.vec, x, a["out"], None)
        k, s, p = [a["k"]] * 2, [a["s"]] * 2, [a["p"]] * 2
        if form == "max":
            return b.call(aten.max_pool2d_with_indices.default, x, k, s, p, [1, 1], a["ceil"])[0]
        return b.call(aten.avg_pool2d.default, x, k, s, p, a["ceil"], a["count_pad"])


KINDS = [Linear(), Matmul(), Bmm(), Addmm(), Conv2d(), BatchNorm(), Attention(), Reduce(), Softmax(), Cumsum(),
         Norm(), Pool()]
