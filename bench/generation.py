"""Generation rows (through ``model.generate()``) and varying-shape encoder
rows (one symbolic kiln artifact at many shapes): the workers behind the
``generate`` and ``shapes`` kinds of bench/models.py, run by bench/run.py in
their own processes like every other model.

Generation (one worker per model, every batch and thread count in it):

  * every call is ``model.generate(ids, attention_mask=mask, do_sample=False,
    max_new_tokens=N + 1, eos_token_id=<one past the vocabulary>)`` (greedy;
    no token can end the sequence, so the length is fixed) on a 128-token prompt of seeded random ids, with a
    streamer (``Clock``) that stamps the time each new token reaches it. One
    call gives both figures: time to first token = from calling generate()
    to the first new token (the prefill and generate()'s own setup), decode
    tokens/s = batch x N / (time from the first new token to the last), the
    N = 64 decode steps after the first token. Taking both from the same
    call avoids subtracting two noisy calls (t(65) - t(1)) and two cache
    sizes (a static cache is sized by max_new_tokens);
  * systems: eager with the default DynamicCache and with
    ``cache_implementation="static"`` (the table shows the better of the two),
    kiln as users run it (``model.forward = torch.compile(model.forward,
    backend="kiln")``) with the default cache and with the static cache, and
    Inductor with the static cache (``torch.compile(model.forward,
    mode="reduce-overhead", fullgraph=True)``, as transformers documents);
  * each system gets its own copy of the forward's code object (``_own_code``),
    so Dynamo's caches and its automatic-dynamic state (both kept per code
    object) are each system's alone, as in a fresh process: kiln's graphs
    are counted as a user would see them and no system's compiles change
    another's. The weights are shared;
  * before timing, every compiled system's tokens are compared with eager's
    (kiln and kiln static with eager's under the same cache, Inductor with
    eager static): a mismatch is reported in the row (first differing step),
    and timed anyway;
  * the graphs each system compiled at a batch (its first call) and during
    the timed calls (recompiles) come from torch._dynamo.utils.counters
    (counters["kiln"] for kiln, counters["stats"]["unique_graphs"] for
    Inductor);
  * the roofline: the weights a decode step reads once for the whole batch
    (every parameter, counted once when tied; input embedding tables only
    have a row read and are left out) over the machine's read bandwidth is
    the ceiling of steps/s; times the batch, of tokens/s. The KV cache's
    reads (under 3 % of the weights here) are left out. The bandwidth is
    sampled beside the timed calls, at the row's thread count: before each
    round, the best of 3 reads of kiln's 128 MiB probe buffer
    (kiln._C.machine_sample, the loop kiln.machine() caches); the row takes
    the median over its rounds. The bandwidth a shared VM gets moves with
    its neighbours (32 to 65 GB/s within an hour on one Zen 4 machine), so
    a figure cached hours earlier is no roof for these calls; it is kept
    beside (bandwidth_gbs_cached) when the sampling is unavailable.

Varying shapes (MiniLM): one ``kiln.trace(model, ex, dynamic_shapes=...)``
artifact (batch and length symbolic) runs at every shape; eager and Inductor
(``dynamic=True``, one compile) beside it. Replanning a new shape is shown two
ways: the C runtime's own count of the time from binding the sizes to a
ready plan (``stats()["instance_us_mean"]``), and the first call at a shape
minus a repeat call (the runtime keeps 4 shapes' plans: cycling through all 8
makes each call a new shape).
"""

from __future__ import annotations

import functools
import gc
import statistics
import sys
import time
import types

import torch

import peers


QUICK_GEN_SKIP = "skipped in QUICK: batch 1 at the first thread count only"
QUICK_SYS_SKIP = "skipped in QUICK: its compile and calls do not fit the 5-minute budget"


def _now():
    return time.perf_counter()


# --------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------

class Clock:
    """A transformers streamer that keeps the time each put() arrives: the
    prompt first, then one put per generated token (a batch's tokens
    together); cpu: the process's CPU time at each (bench/decode_lowp.py)."""

    def __init__(self):
        self.t = []
        self.cpu = []

    def put(self, value):
        self.t.append(_now())
        self.cpu.append(time.process_time())

    def end(self):
        pass


def _own_code(fn, tag):
    """A function calling ``fn`` whose code object is new (named for the
    system): Dynamo keys its caches and frame state by code object."""
    @functools.wraps(fn)
    def forward(*args, **kwargs):
        return fn(*args, **kwargs)
    forward.__code__ = forward.__code__.replace(co_name=f"forward_{tag}")
    return forward


def weight_bytes(model) -> int:
    """Bytes of weights one decode step reads: every parameter once (tied
    ones once), except input embedding tables not shared with the output
    projection (a lookup reads one row per token)."""
    seen = {}
    for p in model.parameters():
        seen[p.data_ptr()] = p.numel() * p.element_size()
    out_emb = model.get_output_embeddings()
    out_ptr = out_emb.weight.data_ptr() if out_emb is not None else None
    for mod in model.modules():
        if isinstance(mod, torch.nn.Embedding) and mod.weight.data_ptr() != out_ptr:
            seen.pop(mod.weight.data_ptr(), None)
    return sum(seen.values())


def _kiln_counts():
    from torch._dynamo.utils import counters
    k = counters["kiln"]
    return {"graphs": k.get("graphs", 0), "whole": k.get("whole", 0),
            "partitioned": k.get("partitioned", 0), "eager": k.get("eager", 0),
            "unique": counters["stats"].get("unique_graphs", 0),
            "breaks": sum(counters["graph_break"].values())}


def _delta(a, b):
    return {k: b[k] - a[k] for k in a}


def _kiln_modules():
    """Every live KilnModule (the torch.compile backend keeps them inside
    Dynamo's cache, out of reach otherwise)."""
    try:
        from kiln.module import KilnModule
    except Exception:
        return []
    # type(), not isinstance(): gc also lists dead weak proxies.
    return [o for o in gc.get_objects() if issubclass(type(o), KilnModule)]


def _instances():
    """(plans made for new shapes, their total time in us) over every kiln
    model alive."""
    n, us = 0, 0.0
    for m in _kiln_modules():
        try:
            s = m.stats()
        except Exception:
            continue
        n += s.get("instances", 0)
        us += s.get("instances", 0) * s.get("instance_us_mean", 0.0)
    return n, us


class GenSystem:
    def __init__(self, name, forward, cache, compare_with):
        self.name = name
        self.forward = forward          # None: the model's own forward (eager)
        self.cache = cache              # None (DynamicCache) or "static"
        self.compare_with = compare_with


def _never_generated(model):
    """An end-of-sequence id no token can have (one past the vocabulary), so
    that every call decodes exactly the tokens asked for while generate()
    still checks for the end of a sequence each step, as it does for a real
    one. (min_new_tokens would also fix the length, but it adds two logits
    processors that build and search a vocabulary-wide mask every step,
    ~1 ms here, which a user's generate() does not run.)"""
    return model.config.get_text_config().vocab_size


def _generate(model, system, ids, mask, new):
    if system.forward is None:
        model.__dict__.pop("forward", None)
    else:
        model.forward = system.forward
    kw = {"cache_implementation": system.cache} if system.cache else {}
    clock = Clock()
    t0 = _now()
    try:
        out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new + 1,
                             eos_token_id=_never_generated(model), pad_token_id=0, streamer=clock,
                             **kw)
    finally:
        model.__dict__.pop("forward", None)
    t1 = _now()
    ts = clock.t
    if len(ts) < 3:
        raise RuntimeError(f"the streamer saw {len(ts)} puts, expected {new + 2}")
    steps = len(ts) - 2
    gaps = [b - a for a, b in zip(ts[1:], ts[2:])]
    return out, {"total_ms": (t1 - t0) * 1e3, "ttft_ms": (ts[1] - t0) * 1e3,
                 "decode_tps": ids.shape[0] * steps / (ts[-1] - ts[1]), "steps": steps,
                 "decode_tps_cpu": ids.shape[0] * steps / max(clock.cpu[-1] - clock.cpu[1], 1e-9),
                 "step_median_ms": statistics.median(gaps) * 1e3}


def _tokens_check(ref, out, prompt):
    if ref is None:
        return {}
    if tuple(ref.shape) != tuple(out.shape):
        return {"tokens_ok": False, "tokens": f"shape {tuple(out.shape)}, eager {tuple(ref.shape)}"}
    a, b = ref[:, prompt:], out[:, prompt:]
    same = (a == b).all(dim=0)
    if bool(same.all()):
        return {"tokens_ok": True, "tokens": f"{a.shape[1]}/{a.shape[1]} equal"}
    first = int((~same).nonzero()[0])
    return {"tokens_ok": False,
            "tokens": f"differ from token {first + 1} of {a.shape[1]}"}


def _gen_rounds(live, model, ids, mask, new, runs, budget_s, min_runs, deadline=0.0,
                bandwidth=None):
    """Interleaved rounds of one generate() per system (the order rotating),
    each after a 20 ms pause, until each has ``runs`` calls or ``budget_s``
    is spent (each has at least ``min_runs``; a system slower than
    budget_s / 3 per call, at least one). Medians of each figure. With
    ``bandwidth`` (a list), a read-bandwidth sample is appended to it before
    each round (_bandwidth_sample)."""
    got = {s.name: [] for s in live}
    res = {}
    est = {s.name: s.est_s for s in live}

    class _Need(dict):   # at least min_runs calls, or 1 for a call over a third of the budget
        def __missing__(self, n):
            return 1 if est[n] > budget_s / 3 else min_runs
    need_min = _Need()
    order = list(live)
    start = _now()
    r = 0
    while order:
        if bandwidth is not None:
            bandwidth.append(_bandwidth_sample(torch.get_num_threads()))
        k = r % len(order)
        ran = False
        for s in order[k:] + order[:k]:
            if len(got[s.name]) >= runs:
                continue
            if len(got[s.name]) >= need_min[s.name] and _now() - start + est[s.name] > budget_s:
                continue
            ran = True
            time.sleep(peers.PAUSE_S)
            c0 = _kiln_counts()
            i0 = _instances() if s.name.startswith("kiln") else (0, 0.0)
            try:
                _, m = _generate(model, s, ids, mask, new)
            except Exception as e:
                res[s.name] = {"na": peers.short(e)}
                order.remove(s)
                got.pop(s.name)
                break
            d = _delta(c0, _kiln_counts())
            m["new_graphs"] = d["graphs"] if s.name.startswith("kiln") else d["unique"]
            if s.name.startswith("kiln"):
                i1 = _instances()
                m["replans"], m["replan_us"] = i1[0] - i0[0], i1[1] - i0[1]
            got[s.name].append(m)
            est[s.name] = m["total_ms"] / 1e3
        r += 1
        if not ran:
            break
        done = all(len(v) >= runs or (len(v) >= need_min[n] and _now() - start > budget_s)
                   for n, v in got.items())
        if done or (deadline and time.time() > deadline
                    and all(len(v) >= 1 for v in got.values())):
            break
    for name, ms in got.items():
        if not ms:
            continue
        med = lambda key: statistics.median(m[key] for m in ms)
        cell = {"ttft_ms": med("ttft_ms"), "decode_tps": med("decode_tps"),
                "total_ms": med("total_ms"), "runs": len(ms), "rounds": r,
                "decode_tps_all": [round(m["decode_tps"], 2) for m in ms],
                "ttft_ms_all": [round(m["ttft_ms"], 1) for m in ms],
                "recompiles": sum(m["new_graphs"] for m in ms)}
        if "replans" in ms[0]:
            n = sum(m["replans"] for m in ms)
            cell["replans_per_call"] = n / len(ms)
            cell["replan_us_mean"] = sum(m["replan_us"] for m in ms) / n if n else 0.0
        res[name] = cell
    return res


def gen_timing(quick):
    if quick:
        return {"runs": 2, "min_runs": 1, "budget_s": 8.0}
    return {"runs": 5, "min_runs": 3, "budget_s": 60.0}


def _bandwidth():
    try:
        import kiln
        m = kiln.machine()
        return {"bw_all": m.get("bandwidth_gbs"), "bw_1": m.get("bandwidth_gbs_1"),
                "bw_threads": m.get("threads"), "measured_at": m.get("measured_at")}
    except Exception as e:
        return {"why": peers.short(e, 80)}


def _bandwidth_sample(threads):
    """The machine's read bandwidth now on `threads` threads, GB/s: the best
    of 3 passes of kiln's probe (what kiln.machine() caches as its peak), or
    None where kiln or that many threads are not there."""
    try:
        from kiln import _C
        return max(_C.machine_sample("read", threads) for _ in range(3))
    except Exception:
        return None


def _roofline(row, samples, b, wbytes):
    """Sets the row's bandwidth and roofline from the samples taken beside
    its timing (the median), or leaves the cached figure there."""
    got = [g for g in samples if g]
    if not got:
        return
    gbs = statistics.median(got)
    row["bandwidth_gbs"] = gbs
    row["bandwidth_how"] = "sampled"
    row["bandwidth_gbs_samples"] = [round(g, 1) for g in got]
    row["roofline_tps"] = b * gbs * 1e9 / wbytes


def gen_worker(spec, args, threads, rows_out, ph, save):
    """Fills rows_out (a list) with one row per (thread count, batch)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    # Each system's graphs live under its own code object (_own_code); the
    # limit is per code object, so this only lifts the cap for batch changes.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 1024
    quick = args.quick
    P = dict(spec.params)
    prompt, new = P.get("prompt", 128), P.get("new_tokens", 64)
    batches = list(P.get("batches", (1, 4)))
    tp = gen_timing(quick)
    t0 = _now()
    model = spec.build()[0]
    ph.add("build", _now() - t0)
    wbytes = weight_bytes(model)
    bw = _bandwidth()
    vocab = model.config.get_text_config().vocab_size
    kiln_ok, kiln_why = True, ""
    try:
        import kiln  # noqa: F401  (registers the backend)
    except Exception as e:
        kiln_ok, kiln_why = False, f"kiln unavailable: {peers.short(e, 80)}"
    first = threads[0]

    def row_for(n, b):
        for r in rows_out:
            if r["threads"] == n and r["batch"] == b:
                return r
        r = {"model": spec.name, "about": spec.about, "kind": "generate", "threads": n,
             "batch": b, "prompt": prompt, "new_tokens": new, "quick": quick, "timing": tp,
             "weight_bytes": wbytes, "systems": {}, "system_names": list(GEN_SYSTEMS)}
        if bw.get("bw_all"):
            gbs = bw["bw_1"] if n == 1 else bw["bw_all"] if n == bw.get("bw_threads") else None
            if gbs:
                r["bandwidth_gbs"] = r["bandwidth_gbs_cached"] = gbs
                r["bandwidth_how"] = "cached"
                r["roofline_tps"] = b * gbs * 1e9 / wbytes
        rows_out.append(r)
        return r

    # Forwards per system. Dynamo guards on torch's thread count, so every
    # torch.compile'd forward compiles again at the next thread count (kiln's
    # graphs count it); Inductor's second compile costs minutes and is
    # skipped (its own code object per thread count, were it run).
    fwd = model.forward
    kiln_fwd = torch.compile(_own_code(fwd, "kiln"), backend="kiln") if kiln_ok else None
    kiln_st_fwd = torch.compile(_own_code(fwd, "kiln_static"), backend="kiln") if kiln_ok else None
    # kiln.llm.compile: the model's step traced once (prefill and decode, 1
    # to max(batches) rows, any thread count) and run as its forward.
    llm_fwd, llm_why = None, kiln_why
    if kiln_ok and not quick:
        t_s = _now()
        try:
            kiln.llm.compile(model, prompt + new + 16, batch=max(batches))
            llm_fwd = model.__dict__.pop("forward")
        except Exception as e:
            llm_why = f"kiln.llm.compile failed: {peers.short(e, 80)}"
        ph.add("kiln.llm trace", _now() - t_s)
    for n in threads:
        torch.set_num_threads(n)
        ind_fwd = None
        ind_skip = ""
        if quick:
            ind_skip = QUICK_SYS_SKIP
        elif n != first and P.get("inductor_first_threads_only", True):
            ind_skip = ("skipped: Inductor compiles again for each thread count (a few minutes "
                        "per model here); timed at the first thread count only")
        else:
            ind_fwd = torch.compile(_own_code(fwd, f"inductor_{n}"), mode="reduce-overhead",
                                    fullgraph=True)
        for b in batches:
            row = row_for(n, b)
            if quick and (n != first or b != batches[0]):
                row["skipped"] = QUICK_GEN_SKIP
                save()
                continue
            if args.deadline and time.time() > args.deadline:
                row["skipped"] = "skipped in QUICK (time budget)"
                save()
                continue
            g = torch.Generator().manual_seed(1000 + b)
            ids = torch.randint(3, vocab, (b, prompt), generator=g)
            mask = torch.ones_like(ids)
            systems = [GenSystem("eager", None, None, None),
                       GenSystem("eager_static", None, "static", None),
                       GenSystem("kiln", kiln_fwd, None, "eager"),
                       GenSystem("kiln_static", kiln_st_fwd, "static", "eager_static"),
                       GenSystem("kiln_llm", llm_fwd, None, "eager"),
                       GenSystem("inductor", ind_fwd, "static", "eager_static")]
            refs = {}
            live = []
            for s in systems:
                cell = row["systems"].setdefault(s.name, {})
                if s.name.startswith("kiln") and not kiln_ok:
                    cell["na"] = kiln_why
                    continue
                if s.name == "inductor" and ind_fwd is None:
                    cell["na"] = ind_skip
                    continue
                if s.name in ("kiln_static", "kiln_llm") and quick:
                    cell["na"] = QUICK_SYS_SKIP
                    continue
                if s.name == "kiln_llm" and llm_fwd is None:
                    cell["na"] = llm_why
                    continue
                slow = _slow_static(rows_out, n, b, batches[0])
                if s.name == "kiln_static" and slow:
                    cell["na"] = slow
                    continue
                c0 = _kiln_counts()
                i0 = _instances()
                t_s = _now()
                try:
                    out, m = _generate(model, s, ids, mask, new)
                except Exception as e:
                    cell["na"] = peers.short(e)
                    ph.add(_phase(s.name), _now() - t_s)
                    save()
                    continue
                wall = _now() - t_s
                ph.add(_phase(s.name), wall)
                d = _delta(c0, _kiln_counts())
                cell["first_call_s"] = wall
                if s.name.startswith("kiln"):
                    cell["graphs"] = d["graphs"]
                    cell["graphs_how"] = {k: d[k] for k in ("whole", "partitioned", "eager") if d[k]}
                    cell["instances_first"] = _instances()[0] - i0[0]
                    if d["partitioned"] or d["eager"]:
                        cell["fallback"] = dict(counters["kiln_fallback"])
                elif s.name == "inductor":
                    cell["graphs"] = d["unique"]
                if d["breaks"]:
                    cell["graph_breaks"] = d["breaks"]
                if s.compare_with is None:
                    refs[s.name] = out
                else:
                    cell.update(_tokens_check(refs.get(s.compare_with), out, prompt))
                s.est_s = max(m["total_ms"] / 1e3, 0.05) if s.name.startswith("eager") else wall
                # What a call costs once compiled: the median step (the
                # first steps include compiles) times the steps, and a prefill.
                s.first_est = new * m["step_median_ms"] / 1e3 + 0.5
                live.append(s)
                save()
            if refs.get("eager") is not None and refs.get("eager_static") is not None:
                row["eager_caches_agree"] = _tokens_check(refs["eager"], refs["eager_static"], prompt)
            # A compiled system's first call includes its compile: estimate
            # its call from the streamer's figures instead (TTFT + decode).
            for s in live:
                if s.name in ("kiln", "kiln_static", "inductor"):
                    s.est_s = min(s.est_s, s.first_est)
            t_t = _now()
            samples = []
            timed = _gen_rounds(live, model, ids, mask, new, deadline=args.deadline,
                                bandwidth=samples, **tp)
            _roofline(row, samples, b, wbytes)
            ph.add(f"timing {n}t", _now() - t_t)
            for name, res in timed.items():
                row["systems"][name].update(res)
            row["done"] = True
            save()
    return 0


GEN_SYSTEMS = ("eager", "eager_static", "kiln", "kiln_static", "kiln_llm", "inductor")


def _slow_static(rows, n, b, b0):
    """Why kiln with the static cache is not run at batch b (larger than
    the first), or "": where at batch b0 its decode was under half of kiln's
    with the default cache, a larger batch would cost minutes for a figure
    already known to be low."""
    if b == b0:
        return ""
    for r in rows:
        if r["threads"] == n and r["batch"] == b0:
            st, dy = r["systems"].get("kiln_static", {}), r["systems"].get("kiln", {})
            if "decode_tps" in st and "decode_tps" in dy and st["decode_tps"] < dy["decode_tps"] / 2:
                return (f"skipped: at batch {b0} kiln's decode with the static cache was "
                        f"{st['decode_tps']:.1f} tok/s, under half of the default cache's "
                        f"({dy['decode_tps']:.1f}); larger batches cost minutes of budget")
    return ""


def _phase(system):
    return {"eager": "eager ref", "eager_static": "eager ref", "kiln": "kiln",
            "kiln_static": "kiln", "kiln_llm": "kiln", "inductor": "inductor"}[system]


# --------------------------------------------------------------------------
# Varying shapes: one symbolic artifact at many shapes
# --------------------------------------------------------------------------

SHAPE_SYSTEMS = ("eager", "inductor", "kiln")


def shapes_timing(quick):
    if quick:
        return {"warmup": 1, "runs": 5, "budget_s": 0.8}
    return {"warmup": 3, "runs": 30, "budget_s": 8.0}


def _encoder_inputs(b, L, vocab_lo=1000, vocab_hi=30000):
    g = torch.Generator().manual_seed(7 * b + L)
    ids = torch.randint(vocab_lo, vocab_hi, (b, L), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, torch.ones(b, L, dtype=torch.long)


def shapes_worker(spec, args, threads, rows_out, ph, save):
    from torch._dynamo.utils import counters
    from torch.export import Dim

    quick = args.quick
    P = dict(spec.params)
    shapes = [tuple(s) for s in P["shapes"]]
    tp = shapes_timing(quick)
    t0 = _now()
    model = spec.build()[0]
    ph.add("build", _now() - t0)
    first = threads[0]
    meta = {}

    def row_for(n, shape):
        for r in rows_out:
            if r["threads"] == n and tuple(r["shape"]) == shape:
                return r
        r = {"model": spec.name, "about": spec.about, "kind": "shapes", "threads": n,
             "shape": list(shape), "quick": quick, "timing": tp, "systems": {},
             "system_names": list(SHAPE_SYSTEMS), "artifact": meta}
        rows_out.append(r)
        return r

    for n in threads:
        for s in shapes:
            row_for(n, s)
    save()

    # kiln: one trace for every shape.
    kmod, kiln_na = None, ""
    t_k = _now()
    try:
        import kiln
        ex = _encoder_inputs(*P.get("example", (2, 64)))
        batch = Dim("batch", min=1, max=P.get("max_batch", 64))
        seq = Dim("seq", min=2, max=P.get("max_seq", 512))
        ds = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
        with torch.no_grad():
            kmod = kiln.trace(model, ex, dynamic_shapes=ds)
        meta["kiln_compile_s"] = _now() - t_k
        mods = peers._kiln_models(kmod)
        meta["kiln_pieces"] = len(mods)
        meta["kiln_symbolic"] = all(m.symbolic() for m in mods)
    except Exception as e:
        kiln_na = f"kiln.trace failed: {peers.short(e, 120)}" if "kiln" in sys.modules else \
            f"kiln unavailable: {peers.short(e, 100)}"
    ph.add("kiln", _now() - t_k)
    save()

    def kiln_stats():
        n, us = 0, 0.0
        for m in (peers._kiln_models(kmod) if kmod is not None else []):
            st = m.stats()
            n += st.get("instances", 0)
            us += st.get("instances", 0) * st.get("instance_us_mean", 0.0)
        return n, us

    def run_eager(ids, mask):
        with torch.inference_mode():
            return model(ids, mask)

    def run_kiln(ids, mask):
        with torch.no_grad():
            return kmod(ids, mask)

    ind = None
    for n in threads:
        torch.set_num_threads(n)
        for m in (peers._kiln_models(kmod) if kmod is not None else []):
            m.set_threads(n)
        ind_na = ""
        if quick:
            ind_na = QUICK_SYS_SKIP
        elif n == first or not P.get("inductor_first_threads_only", False):
            t_i = _now()
            torch._dynamo.reset()
            counters.clear()
            compiled = torch.compile(model, dynamic=True)

            def ind(ids, mask, compiled=compiled):
                with torch.no_grad():
                    return compiled(ids, mask)
            try:
                ind(*_encoder_inputs(*shapes[0]))
                meta.setdefault("inductor_compile_s", {})[str(n)] = _now() - t_i
            except Exception as e:
                ind, ind_na = None, peers.short(e)
            ph.add("inductor", _now() - t_i)
        else:
            ind, ind_na = None, "skipped: compiled at the first thread count only"
        if args.deadline and time.time() > args.deadline and n != first:
            for s in shapes:
                row_for(n, s)["skipped"] = "skipped in QUICK (time budget)"
            save()
            continue
        # Replanning: the runtime keeps the plans of 4 shapes. Before each
        # measured call at a shape, 4 calls at small other shapes (batch 2,
        # lengths 8-11) evict it, so the call plans it again: its time minus
        # that of the repeat call right after it (the median of 3, after one
        # pass that grows the arena to each shape) is what a new shape costs.
        firsts = {s: [] for s in shapes}
        inst = {s: [] for s in shapes}
        kiln_err = {}
        inputs = {s: _encoder_inputs(*s) for s in shapes}
        evict = [_encoder_inputs(2, L) for L in (8, 9, 10, 11)]
        if kmod is not None:
            t_r = _now()
            for rep in range(3 if quick else 4):
                for s in shapes:
                    if s in kiln_err:
                        continue
                    try:
                        for e_in in evict:
                            run_kiln(*e_in)
                        i0 = kiln_stats()
                        c0 = _now()
                        run_kiln(*inputs[s])
                        c1 = _now()
                        i1 = kiln_stats()
                        run_kiln(*inputs[s])   # the repeat, right after: same load
                        c2 = _now()
                    except Exception as e:   # reported in the shape's row
                        kiln_err[s] = peers.short(e)
                        continue
                    if rep and i1[0] > i0[0]:   # a miss, after the arena's growth
                        firsts[s].append(((c1 - c0) - (c2 - c1)) * 1e3)
                        inst[s].append((i1[1] - i0[1]) / (i1[0] - i0[0]))
            ph.add("kiln", _now() - t_r)
        for s in shapes:
            row = row_for(n, s)
            if args.deadline and time.time() > args.deadline and (n != first or s != shapes[0]):
                row["skipped"] = "skipped in QUICK (time budget)"
                save()
                continue
            ids, mask = inputs[s]
            t_c = _now()
            ref = run_eager(ids, mask)
            calls = {"eager": lambda ids=ids, mask=mask: run_eager(ids, mask)}
            row["systems"]["eager"] = {}
            kc = row["systems"].setdefault("kiln", {})
            if kmod is None:
                kc["na"] = kiln_na
            elif s in kiln_err:
                kc["na"] = kiln_err[s]
            else:
                try:
                    kc.update(peers.compare(ref, run_kiln(ids, mask)))
                    if not kc.get("ok", True):
                        kc["fail"] = kc.get("why") or "wrong output"
                    else:
                        calls["kiln"] = lambda ids=ids, mask=mask: run_kiln(ids, mask)
                    kc["prep_s"] = meta.get("kiln_compile_s", 0.0)
                except Exception as e:
                    kc["na"] = peers.short(e)
            ic = row["systems"].setdefault("inductor", {})
            if ind is None:
                ic["na"] = ind_na
            else:
                try:
                    ic.update(peers.compare(ref, ind(ids, mask)))
                    if not ic.get("ok", True):
                        ic["fail"] = ic.get("why") or "wrong output"
                    else:
                        calls["inductor"] = lambda ids=ids, mask=mask: ind(ids, mask)
                    ic["prep_s"] = meta.get("inductor_compile_s", {}).get(str(n), 0.0)
                except Exception as e:
                    ic["na"] = peers.short(e)
            ph.add("switch+check", _now() - t_c)
            t_t = _now()
            timed = peers.time_rounds(calls, **tp)
            ph.add(f"timing {n}t", _now() - t_t)
            for name, res in timed.items():
                row["systems"][name].update(res)
            if "ms" in row["systems"].get("kiln", {}) and firsts[s]:
                row["systems"]["kiln"]["new_shape_extra_ms"] = statistics.median(firsts[s])
                row["systems"]["kiln"]["new_shape_extra_ms_all"] = [round(v, 3) for v in firsts[s]]
                row["systems"]["kiln"]["replan_us"] = statistics.median(inst[s])
            row["done"] = True
            save()
        if ind is not None:   # counters were cleared just before its compile
            meta.setdefault("inductor_graphs", {})[str(n)] = counters["stats"].get("unique_graphs", 0)
        save()
    return 0
