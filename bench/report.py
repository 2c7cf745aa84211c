"""Turns the benchmark's rows into the printed table, bench/results.json,
bench/results.png and bench/results.md (the README's performance section).

    .venv/bin/python bench/report.py [bench/results.json]

re-renders the table, the plot and the Markdown from a saved results.json.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from pathlib import Path

SYSTEMS = ("eager", "inductor", "onnxruntime", "openvino", "kiln")
PEERS = ("eager", "inductor", "onnxruntime", "openvino")
LABEL = {"eager": "eager", "inductor": "inductor", "onnxruntime": "onnxrt", "openvino": "openvino",
         "kiln": "kiln"}
LONG = {"eager": "PyTorch eager", "inductor": "torch.compile (Inductor)",
        "onnxruntime": "ONNX Runtime CPU", "openvino": "OpenVINO CPU (f32)", "kiln": "kiln"}


# --------------------------------------------------------------------------
# Machine description
# --------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_features() -> str:
    """The CPU's SIMD features that choose kiln's kernels (from /proc/cpuinfo's
    flags; family and model alone do not tell Zen 3 from Zen 4 under a
    hypervisor that names both "AMD EPYC")."""
    names = (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512_BF16"),
             ("avx512_vnni", "AVX512-VNNI"), ("amx_bf16", "AMX-BF16"), ("amx_int8", "AMX-INT8"),
             ("asimd", "ASIMD"), ("asimddp", "dotprod"), ("bf16", "BF16"), ("i8mm", "I8MM"))
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return ", ".join(n for f, n in names if f in have) or "no SIMD features"
    except OSError:
        pass
    return "features unknown"


def _version(mod):
    try:
        return __import__(mod).__version__
    except Exception:
        return None


def busy_cpu_seconds() -> float | None:
    """CPU seconds all processes on the machine have used (from /proc/stat)."""
    try:
        f = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, f[:8])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    except Exception:
        return None


def own_cpu_seconds() -> float:
    import resource
    a = resource.getrusage(resource.RUSAGE_SELF)
    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def machine_meta(threads, quick, total_s, other_load=None) -> dict:
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cpu_features": cpu_features(),
        "cores": os.cpu_count(),
        "threads": list(threads),
        "quick": bool(quick),
        "total_s": round(total_s, 1),
        "python": platform.python_version(),
        "other_load": other_load,
        "versions": {m: _version(m) for m in
                     ("torch", "onnxruntime", "onnx", "onnxscript", "transformers", "kiln")},
    }


# --------------------------------------------------------------------------
# Cells
# --------------------------------------------------------------------------

def _ms(c):
    return c.get("ms") if isinstance(c, dict) else None


def fmt_ms(v):
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


class Notes:
    """Long reasons become numbered footnotes; cells keep a short form."""

    def __init__(self, prefix: str = ""):
        self.items: list[str] = []
        self.prefix = prefix

    def ref(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        return f"[{self.prefix}{self.items.index(text) + 1}]"

    def lines(self, md: bool = False) -> list[str]:
        end = "  " if md else ""
        return [f"[{self.prefix}{i + 1}] " + (t.replace("|", "/") if md else t) + end
                for i, t in enumerate(self.items)]


def short_reason(text: str) -> str:
    t = text.lower()
    if t.startswith("n/a: kiln does not train yet"):
        return "n/a: no training"
    if t.startswith("n/a: onnx runtime cpu runs inference only"):
        return "n/a: inference only"
    if "kiln unavailable" in t:
        return "kiln unavailable"
    if t.startswith("kiln.trace failed"):
        return "trace failed"
    if "skipped in quick" in t:
        return "skipped (QUICK)"
    if "timed out" in t:
        return "timed out"
    if "onnx.export failed" in t:
        return "export failed"
    if "ort session failed" in t:
        return "ORT load failed"
    if "convert_model failed" in t:
        return "convert failed"
    if "openvino not installed" in t:
        return "not installed"
    return "n/a"


def time_cell(c: dict, notes: Notes) -> str:
    if not c:
        return "-"
    if "fail" in c:
        return "FAIL " + notes.ref(c["fail"])
    if "ms" in c:
        return fmt_ms(c["ms"])
    if "na" in c:
        return short_reason(c["na"]) + " " + notes.ref(c["na"])
    return "-"


def check_cell(row: dict, notes: Notes) -> str:
    k = row["systems"].get("kiln", {})
    if "err" in k and k.get("err") is not None:
        return ("ok " if k.get("ok") else "FAIL ") + f"{k['err']:.1e}"
    if "fail" in k:
        return "FAIL " + notes.ref(k["fail"])
    return "-"


def speedup_cell(row: dict, peer: str) -> str:
    k = _ms(row["systems"].get("kiln"))
    p = _ms(row["systems"].get(peer))
    if k is None or p is None:
        return "-"
    return f"{p / k:.2f}x"


def compile_cell(c: dict) -> str:
    if c and "prep_s" in c and ("ms" in c or "fail" in c):
        return f"{c['prep_s']:.1f}"
    return "-"


HEADER = ["model", "thr", "kiln check (max err)", "eager ms", "inductor ms", "onnxrt ms",
          "openvino ms", "kiln ms", "kiln/eager", "kiln/inductor", "kiln/onnxrt", "kiln/openvino",
          "kiln compile s", "inductor compile s"]


def main_rows(results: dict) -> list[dict]:
    """The rows of the main table: one call of a model (inference or a
    training step); generation and varying-shape rows have their own."""
    return [r for r in results["rows"] if r.get("kind", "infer") in ("infer", "train")]


def table_rows(results: dict, notes: Notes) -> list[list[str]]:
    out = []
    for row in main_rows(results):
        if row.get("skipped"):
            out.append([row["model"], str(row["threads"]), row["skipped"]] +
                       ["-"] * (len(HEADER) - 3))
            continue
        s = row["systems"]
        r = [row["model"], str(row["threads"]), check_cell(row, notes)]
        r += [time_cell(s.get(x, {}), notes) for x in SYSTEMS]
        r += [speedup_cell(row, p) for p in PEERS]
        r += [compile_cell(s.get("kiln", {})), compile_cell(s.get("inductor", {}))]
        out.append(r)
    return out


def text_table(results: dict) -> str:
    notes = Notes()
    rows = table_rows(results, notes)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(HEADER)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    lines = [line(HEADER), line(["-" * w for w in widths])]
    lines += [line(r) for r in rows]
    for title, head, body, gnotes, foot in extra_tables(results):
        lines += ["", title, ""]
        lines += _text_grid(head, body)
        lines += ([""] + foot) if foot else []
        lines += gnotes.lines()
    m = results["meta"]
    lines.append("")
    lines.append(f"{m['date']}; {m['cpu']} ({m['cores']} cores); threads "
                 f"{', '.join(map(str, m['threads']))}; times are medians in ms; "
                 f"kiln/X = X's time / kiln's time (>1: kiln faster)"
                 + ("; QUICK run" if m.get("quick") else ""))
    busy = busy_warning(m)
    if busy:
        lines.append(busy)
    if notes.items:
        lines.append("")
        lines += [f"[{i + 1}] {t}" for i, t in enumerate(notes.items)]
    return "\n".join(lines)


def busy_warning(m: dict) -> str:
    load = m.get("other_load")
    if load is not None and load > 0.25:
        return (f"WARNING: other processes kept {load:.1f} of the {m['cores']} cores busy "
                f"during the run: times are not reliable.")
    return ""


def markdown(results: dict, png_name: str = "results.png") -> str:
    notes = Notes()
    rows = table_rows(results, notes)
    m = results["meta"]
    v = m["versions"]
    vs = ", ".join(f"{k} {v[k]}" for k in ("torch", "onnxruntime", "transformers") if v.get(k))
    md = [
        f"Measured {m['date']} on {m['cpu']} ({m['cores']} cores"
        + (f"; {m['cpu_features']}" if m.get("cpu_features") else "") + "), "
        f"{' and '.join(str(t) for t in m['threads'])} thread(s), {vs}"
        + (" (QUICK run: fewer timed runs)" if m.get("quick") else "") + "."
        + (" " + m["rows_note"] if m.get("rows_note") else ""),
        "Each model runs in its own process, at every thread count; each system is warmed "
        "up, then timed in interleaved rounds (bench/README.md), and the median of several "
        "runs is shown in milliseconds. Before timing, kiln's output is checked "
        "against eager (largest absolute error shown; FAIL if it exceeds 1e-3 of the "
        "output's magnitude). OpenVINO: `openvino.convert_model` of the same module, compiled "
        "for the CPU at f32 (`INFERENCE_PRECISION_HINT`), one stream, the same thread count; "
        "its default precision and kiln's bf16/int8/int4 modes are in the low-precision table. "
        "`kiln/X` is X's time divided by kiln's (above 1: kiln is "
        "faster). Compile times: `kiln.trace` wall time and torch.compile's first call. "
        "Produced by `make bench` (bench/run.py).",
        "",
        ("**" + busy_warning(m) + "**") if busy_warning(m) else "",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join(["---"] * 3 + ["---:"] * (len(HEADER) - 3)) + "|",
    ]
    for r in rows:
        md.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    if notes.items:
        md.append("")
        md += [f"[{i + 1}] {t.replace('|', '/')}  " for i, t in enumerate(notes.items)]
    md += gen_markdown(results, notes_start=len(notes.items))
    md += ["", "Models:", ""]
    seen = set()
    for row in results["rows"]:
        if row["model"] not in seen and row.get("about"):
            seen.add(row["model"])
            md.append(f"- `{row['model']}`: {row['about']}")
    md += ["", f"![kiln benchmark](bench/{png_name})", ""]
    return "\n".join(md)


# --------------------------------------------------------------------------
# Generation and varying-shape tables (bench/generation.py)
# --------------------------------------------------------------------------

GEN_HEADER = ["model", "batch", "thr", "kiln tokens", "kiln graphs (recompiles)",
              "kiln replans/call (us each)",
              "eager TTFT ms", "inductor TTFT ms", "kiln TTFT ms", "TTFT kiln/eager",
              "eager tok/s", "inductor tok/s", "kiln tok/s", "kiln static tok/s", "kiln.llm tok/s",
              "roofline tok/s", "decode kiln/eager", "kiln % roofline", "eager % roofline"]

SHAPE_HEADER = ["model", "batch x len", "thr", "kiln check (max err)", "eager ms",
                "inductor ms", "kiln ms", "kiln/eager", "kiln/inductor",
                "kiln replan us", "kiln new-shape extra ms"]


def _gen_na(c: dict, notes: Notes) -> str:
    if not c:
        return "-"
    if "na" in c:
        return short_reason(c["na"]) + " " + notes.ref(c["na"])
    return "-"


def _tps(c):
    return c.get("decode_tps") if isinstance(c, dict) else None


def _ttft(c):
    return c.get("ttft_ms") if isinstance(c, dict) else None


def eager_best(s: dict) -> tuple:
    """(decode tok/s, which cache, TTFT ms, which cache): eager's better of
    the default DynamicCache and the static cache, each figure on its own."""
    d, st = s.get("eager", {}), s.get("eager_static", {})
    tps = [(v, k) for v, k in ((_tps(d), "dyn"), (_tps(st), "static")) if v is not None]
    tt = [(v, k) for v, k in ((_ttft(d), "dyn"), (_ttft(st), "static")) if v is not None]
    bt = max(tps) if tps else (None, "")
    bf = min(tt) if tt else (None, "")
    return bt[0], bt[1], bf[0], bf[1]


def _fmt_tps(v):
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def gen_table_rows(results: dict, notes: Notes) -> list[list[str]]:
    out = []
    for row in results["rows"]:
        if row.get("kind") != "generate":
            continue
        head = [row["model"], str(row.get("batch", "-")), str(row["threads"])]
        if row.get("skipped"):
            out.append(head + [row["skipped"] if "QUICK" not in row["skipped"]
                               else "skipped (QUICK) " + notes.ref(row["skipped"])]
                       + ["-"] * (len(GEN_HEADER) - 4))
            continue
        s = row["systems"]
        k, ks, ind = s.get("kiln", {}), s.get("kiln_static", {}), s.get("inductor", {})
        kl = s.get("kiln_llm", {})
        toks = []
        for name, c in (("", k), ("static ", ks), ("kiln.llm ", kl)):
            if "tokens" in c:
                toks.append(name + ("ok" if c.get("tokens_ok") else "MISMATCH ")
                            + ("" if c.get("tokens_ok") else notes.ref(f"{row['model']} batch "
                               f"{row.get('batch')}, kiln {name}cache: tokens {c['tokens']}")))
        graphs = "-"
        if "graphs" in k:
            how = k.get("graphs_how", {})
            extra = "".join(f", {v} {h}" for h, v in how.items() if h != "whole")
            graphs = f"{k['graphs']}{extra} ({k.get('recompiles', '-')})"
            if "graphs" in ks:
                graphs += f"; static {ks['graphs']} ({ks.get('recompiles', '-')})"
        replans = "-"
        if "replans_per_call" in k:
            replans = f"{k['replans_per_call']:.0f} ({k.get('replan_us_mean', 0):.0f})"
        e_tps, e_cache, e_ttft, e_tcache = eager_best(s)
        cell_t = lambda c: fmt_ms(_ttft(c)) if _ttft(c) is not None else _gen_na(c, notes)
        cell_d = lambda c: _fmt_tps(_tps(c)) if _tps(c) is not None else _gen_na(c, notes)
        roof = row.get("roofline_tps")
        pct = lambda v: f"{100 * v / roof:.0f} %" if v is not None and roof else "-"
        r = head + [", ".join(toks) or "-", graphs, replans,
                    f"{fmt_ms(e_ttft)} ({e_tcache})" if e_ttft is not None else "-",
                    cell_t(ind), cell_t(k),
                    f"{e_ttft / _ttft(k):.2f}x" if e_ttft and _ttft(k) else "-",
                    f"{_fmt_tps(e_tps)} ({e_cache})" if e_tps is not None else "-",
                    cell_d(ind), cell_d(k), cell_d(ks), cell_d(kl),
                    _fmt_tps(roof) if roof else "-",
                    f"{_tps(k) / e_tps:.2f}x" if e_tps and _tps(k) else "-",
                    pct(_tps(k)), pct(e_tps)]
        out.append(r)
    return out


def shape_table_rows(results: dict, notes: Notes) -> list[list[str]]:
    out = []
    for row in results["rows"]:
        if row.get("kind") != "shapes":
            continue
        shape = row.get("shape") or ["?", "?"]
        head = [row["model"], f"{shape[0]} x {shape[1]}", str(row["threads"])]
        if row.get("skipped"):
            out.append(head + ["skipped (QUICK) " + notes.ref(row["skipped"])
                               if "QUICK" in row["skipped"] else row["skipped"]]
                       + ["-"] * (len(SHAPE_HEADER) - 4))
            continue
        s = row["systems"]
        k = s.get("kiln", {})
        r = head + [check_cell(row, notes)]
        r += [time_cell(s.get(x, {}), notes) for x in ("eager", "inductor", "kiln")]
        r += [speedup_cell(row, "eager"), speedup_cell(row, "inductor")]
        r += [f"{k['replan_us']:.0f}" if "replan_us" in k else "-",
              f"{k['new_shape_extra_ms']:.2f}" if "new_shape_extra_ms" in k else "-"]
        out.append(r)
    return out


def _gen_foot(results: dict) -> list[str]:
    rows = [r for r in results["rows"] if r.get("kind") == "generate"]
    if not rows:
        return []
    foot = []
    wb = {r["model"]: r.get("weight_bytes") for r in rows if r.get("weight_bytes")}
    # Read bandwidth by thread count: sampled beside each row's timed calls
    # (a range over the rows), or kiln.machine()'s cached figure.
    bw = {}
    for r in rows:
        if r.get("bandwidth_gbs") and not r.get("skipped"):
            how = r.get("bandwidth_how", "cached")
            bw.setdefault((r["threads"], how), []).append(r["bandwidth_gbs"])
    if wb or bw:  # none when every row was skipped (QUICK)
        def span(v):
            lo, hi = min(v), max(v)
            return f"{lo:.1f}" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f}"
        parts = [f"{t} thr {span(v)} GB/s" + (" (cached by kiln.machine())" if how == "cached"
                                               else " (sampled beside the rows' timed calls)")
                 for (t, how), v in sorted(bw.items(), reverse=True)]
        foot.append("Weights read per decode step: " + ", ".join(
            f"{m} {v / 1e6:.0f} MB" for m, v in wb.items())
            + ("; read bandwidth: " + ", ".join(parts) if parts else "") + ".")
    agree = [r for r in rows if r.get("eager_caches_agree", {}).get("tokens_ok") is False]
    if agree:
        foot.append("Eager's tokens with the static cache differ from the dynamic cache's in: "
                    + ", ".join(f"{r['model']} b{r['batch']} {r['threads']}t "
                                f"({r['eager_caches_agree']['tokens']})" for r in agree) + ".")
    return foot


def _shape_foot(results: dict) -> list[str]:
    rows = [r for r in results["rows"] if r.get("kind") == "shapes" and r.get("artifact")]
    foot = []
    seen = set()
    for r in rows:
        a = r["artifact"]
        if r["model"] in seen or not a:
            continue
        seen.add(r["model"])
        bits = []
        if "kiln_compile_s" in a:
            bits.append(f"one kiln.trace(dynamic_shapes=...) artifact, compiled in "
                        f"{a['kiln_compile_s']:.1f} s ({a.get('kiln_pieces', 1)} piece(s), "
                        f"{'symbolic' if a.get('kiln_symbolic') else 'NOT symbolic'})")
        if a.get("inductor_compile_s"):
            bits.append("Inductor dynamic=True: first call " + ", ".join(
                f"{t} thr {v:.1f} s" for t, v in a["inductor_compile_s"].items())
                + ("; graphs " + ", ".join(f"{t} thr {v}" for t, v in
                                            a.get("inductor_graphs", {}).items())
                   if a.get("inductor_graphs") else ""))
        if bits:
            foot.append(f"{r['model']}: " + "; ".join(bits) + ".")
    return foot


LOWP_HEADER = ["model", "thr", "kiln fp32 ms", "kiln bf16 ms", "kiln int8 ms", "kiln int4 ms",
               "kiln int4:a8 ms", "eager bf16 ms", "kiln bf16 model ms", "openvino f32 ms",
               "openvino default ms", "bf16/fp32", "int8/fp32", "int4/fp32", "int4:a8/fp32",
               "kiln bf16 vs eager bf16", "kiln bf16 model vs eager bf16", "kiln bf16 vs ov default"]

LOWP_ABOUT = (
    "kiln with `compute_dtype=torch.bfloat16` (linear layers in bf16, fp32 sums), "
    "`weights_dtype=\"int8:a8\"` (int8 weights and activations quantized per row at run "
    "time), `weights_dtype=\"int4\"` (groups of 32) and `\"int4:a8\"` (int4 weights, int8 "
    "activations quantized per row and group at run time: llama.cpp's q4_0 arithmetic), beside "
    "eager PyTorch in bf16 "
    "(`model.to(torch.bfloat16)`, bf16 inputs) and kiln.trace of that same bf16 model "
    "(kiln bf16 model), OpenVINO at f32 and at the "
    "precision it picks by itself for this CPU (shown in parentheses: bf16 where the CPU has AMX "
    "or AVX512_BF16). In parentheses after a kiln or eager bf16 time: the cosine similarity of its "
    "outputs to eager fp32's, the accuracy figure (a cell fails below 0.9, a gross error, unless it "
    "is eager run with the same dequantized weights within fp32's tolerance: marked =; or, for "
    "int4:a8, within cosine 0.99 of that same run: marked ~). "
    "x/fp32: kiln fp32's time over the mode's (above 1: the mode is faster). kiln bf16 vs X: "
    "X's time over kiln bf16's; kiln bf16 model vs eager bf16: the same bf16 model in both.")

TRAIN_LOWP_HEADER = ["model", "thr", "eager fp32 ms", "kiln fp32 ms", "eager autocast ms",
                     "kiln autocast ms", "kiln/eager fp32", "kiln/eager autocast",
                     "kiln autocast/fp32"]

TRAIN_LOWP_ABOUT = (
    "One training step (zero_grad, forward, backward, SGD) with the forward under "
    "`torch.autocast(\"cpu\", dtype=torch.bfloat16)` (the weights stay fp32), eager and through "
    "`torch.compile(backend=\"kiln\")`, beside the fp32 step of each. In parentheses: the cosine "
    "similarity of the step's loss and gradients to eager fp32's. kiln/eager X: eager's time over "
    "kiln's in that mode; kiln autocast/fp32: kiln fp32's time over kiln autocast's.")


def _cos_cell(c: dict, notes: Notes) -> str:
    """A low-precision time with its cosine to eager fp32 (", =" when held
    exact to its dequantized reference, ", ~" when near it)."""
    mark = ", =" if c.get("exact") else ", ~" if c.get("near") else ""
    cos = f"{c['cos']:.5f}{mark}" if "cos" in c else ""
    return _lowp_cell(c, notes, cos)


def _ratio(num, den) -> str:
    return f"{num / den:.2f}x" if num and den else "-"


def _lowp_cell(c: dict, notes: Notes, extra: str = "") -> str:
    t = time_cell(c, notes)
    if "ms" in c and extra:
        return f"{t} ({extra})"
    return t


def lowp_table_rows(results: dict, notes: Notes) -> list[list[str]]:
    out = []
    for row in main_rows(results):
        s = row["systems"]
        if row.get("skipped") or row.get("train") or not any(
                k in s for k in ("kiln_bf16", "kiln_int8", "kiln_int4", "kiln_int4a8", "openvino_default")):
            continue
        r = [row["model"], str(row["threads"]), time_cell(s.get("kiln", {}), notes)]
        for k in ("kiln_bf16", "kiln_int8", "kiln_int4", "kiln_int4a8", "eager_bf16", "kiln_bf16_model"):
            r.append(_cos_cell(s.get(k, {}), notes))
        r.append(time_cell(s.get("openvino", {}), notes))
        d = s.get("openvino_default", {})
        r.append(_lowp_cell(d, notes, d.get("precision", "")))
        base = _ms(s.get("kiln"))
        for k in ("kiln_bf16", "kiln_int8", "kiln_int4", "kiln_int4a8"):
            r.append(_ratio(base, _ms(s.get(k))))
        b, eb = _ms(s.get("kiln_bf16")), _ms(s.get("eager_bf16"))
        r += [_ratio(eb, b), _ratio(eb, _ms(s.get("kiln_bf16_model"))), _ratio(_ms(d), b)]
        out.append(r)
    return out


def train_lowp_table_rows(results: dict, notes: Notes) -> list[list[str]]:
    out = []
    for row in main_rows(results):
        s = row["systems"]
        if row.get("skipped") or not row.get("train") or not any(
                k in s for k in ("kiln_bf16", "eager_bf16")):
            continue
        r = [row["model"], str(row["threads"]), time_cell(s.get("eager", {}), notes),
             time_cell(s.get("kiln", {}), notes), _cos_cell(s.get("eager_bf16", {}), notes),
             _cos_cell(s.get("kiln_bf16", {}), notes)]
        k, ka = _ms(s.get("kiln")), _ms(s.get("kiln_bf16"))
        r += [_ratio(_ms(s.get("eager")), k), _ratio(_ms(s.get("eager_bf16")), ka), _ratio(k, ka)]
        out.append(r)
    return out


def extra_tables(results: dict):
    """(title, header, rows, notes, footer lines) for the low-precision, the
    generation and the varying-shape tables that have rows."""
    out = []
    ln = Notes("p")
    lp = lowp_table_rows(results, ln)
    if lp:
        out.append(("Low precision (median ms per call)", LOWP_HEADER, lp, ln, []))
    tn = Notes("t")
    tl = train_lowp_table_rows(results, tn)
    if tl:
        out.append(("Training under bf16 autocast (median ms per step)", TRAIN_LOWP_HEADER, tl,
                    tn, []))
    gn = Notes("g")
    g = gen_table_rows(results, gn)
    if g:
        out.append(("Generation through model.generate() (fp32, greedy, prompt 128, "
                    "64 decode tokens timed; tok/s of the whole batch)", GEN_HEADER, g, gn,
                    _gen_foot(results)))
    sn = Notes("s")
    sh = shape_table_rows(results, sn)
    if sh:
        out.append(("Varying shapes from one artifact (median ms per call)", SHAPE_HEADER, sh,
                    sn, _shape_foot(results)))
    return out


def _text_grid(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h)
              for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 3 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(head), line(["-" * w for w in widths])] + [line(r) for r in body]


GEN_ABOUT = (
    "Generation rows call `model.generate()` as users do (greedy, max_new_tokens = 65 with an "
    "end-of-sequence id no token has, so every call decodes 65, a 128-token prompt, all-ones attention mask); a streamer stamps each "
    "token: TTFT is from the call to the first new token, tok/s counts the 64 decode steps after "
    "it (times the batch). eager: the better of the default DynamicCache (dyn) and "
    "`cache_implementation=\"static\"`; kiln: `model.forward = torch.compile(model.forward, "
    "backend=\"kiln\")` with the default cache (kiln static: the static cache; kiln.llm: "
    "`kiln.llm.compile(model, max_length, batch)`, the model's generation step traced once and run "
    "as its forward, no Dynamo); inductor: the "
    "static cache with `torch.compile(model.forward, mode=\"reduce-overhead\", fullgraph=True)`. "
    "kiln tokens: greedy tokens compared with eager's under the same cache before timing. "
    "kiln graphs: graphs kiln compiled during the first generate() at that batch (in "
    "parentheses: during the timed calls). Replans: plans the symbolic graphs made for new "
    "sizes per generate() call, and the C runtime's time for each. Roofline: batch x read "
    "bandwidth / weight bytes per step, the bandwidth sampled before each round of the row's "
    "timed calls (the median; bench/README.md).")

SHAPE_ABOUT = (
    "Varying-shape rows run one `kiln.trace(model, ex, dynamic_shapes=...)` artifact (batch and "
    "length symbolic) at every shape, beside eager and `torch.compile(model, dynamic=True)` "
    "(Inductor); outputs are checked at every shape. kiln replan us: the C runtime's time to "
    "bind a new shape's sizes and plan it; new-shape extra ms: a call at a shape the runtime has "
    "no plan for (4 calls at other shapes evicted it: it keeps 4) minus the repeat call right "
    "after it, median of 3.")


def gen_markdown(results: dict, notes_start: int = 0) -> list[str]:
    md = []
    for title, head, body, notes, foot in extra_tables(results):
        about = {id(GEN_HEADER): GEN_ABOUT, id(LOWP_HEADER): LOWP_ABOUT,
                 id(TRAIN_LOWP_HEADER): TRAIN_LOWP_ABOUT}.get(id(head), SHAPE_ABOUT)
        md += ["", f"**{title}.** {about}", "",
               "| " + " | ".join(head) + " |",
               "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|"]
        md += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in body]
        if foot or notes.items:
            md.append("")
        md += [f + "  " for f in foot]
        md += notes.lines(md=True)
    return md


# --------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------

COLORS = {"eager": "#7f7f7f", "inductor": "#1f77b4", "onnxruntime": "#2ca02c",
          "openvino": "#9467bd", "kiln": "#d62728"}


def plot(results: dict, path: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rows = main_rows(results)
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    if not models:
        return
    # Thread counts where every row was skipped (QUICK) get no bar group.
    threads = [t for t in results["meta"]["threads"]
               if any(r["threads"] == t and not r.get("skipped") for r in rows)]
    threads = threads or results["meta"]["threads"]
    ncol = min(4, len(models))
    nrow = (len(models) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol, 3.5 * nrow + 0.9),
                             squeeze=False)
    by = {(r["model"], r["threads"]): r for r in rows}
    width = 0.8 / len(SYSTEMS)
    for idx, name in enumerate(models):
        ax = axes[idx // ncol][idx % ncol]
        ymax = 0.0
        lines = []
        for ti, t in enumerate(threads):
            row = by.get((name, t))
            if not row:
                continue
            s = row.get("systems", {})
            for si, sysname in enumerate(SYSTEMS):
                x = ti + (si - (len(SYSTEMS) - 1) / 2) * width
                c = s.get(sysname, {})
                v = _ms(c)
                if v is not None:
                    ax.bar(x, v, width, color=COLORS[sysname])
                    ymax = max(ymax, v)
                else:
                    label = ("FAIL" if "fail" in c else
                             "skip" if row.get("skipped") or "skipped" in c.get("na", "")
                             else "n/a")
                    ax.text(x, 0, label, rotation=90, ha="center", va="bottom",
                            fontsize=7, color=COLORS[sysname])
            k = _ms(s.get("kiln"))
            if k is not None:
                sp = [f"{LABEL[p]} {_ms(s.get(p)) / k:.2f}x" for p in PEERS
                      if _ms(s.get(p)) is not None]
                lines.append(f"{t} thr: kiln vs " + ", ".join(sp))
            else:
                kc = s.get("kiln", {})
                why = ("FAIL" if "fail" in kc else
                       short_reason(kc.get("na", row.get("skipped", "n/a"))))
                if why.startswith("kiln "):
                    why = why[5:]
                lines.append(f"{t} thr: kiln {why}")
        ax.set_xlim(-0.5, len(threads) - 0.5)
        ax.set_xticks(range(len(threads)))
        ax.set_xticklabels([f"{t} thread{'s' if t != 1 else ''}" for t in threads])
        ax.set_ylabel("ms (median)")
        ax.set_ylim(0, ymax * 1.15 if ymax else 1)
        ax.set_title(name, fontsize=11, fontweight="bold")
        ax.text(0.02, 0.98, "\n".join(lines), transform=ax.transAxes, va="top",
                ha="left", fontsize=7,
                bbox=dict(boxstyle="round", fc="white", ec="#cccccc", alpha=0.85))
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    for idx in range(len(models), nrow * ncol):
        axes[idx // ncol][idx % ncol].axis("off")
    m = results["meta"]
    fig.suptitle(f"kiln vs peers: latency per model (lower is better); "
                 f"{m['cpu']}, {m['date']}" + (" (QUICK)" if m.get("quick") else ""),
                 fontsize=12)
    fig.legend(handles=[Patch(color=COLORS[s], label=LONG[s]) for s in SYSTEMS],
               loc="lower center", ncol=len(SYSTEMS), frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    fig.savefig(path, dpi=90)
    plt.close(fig)


README_BEGIN = "<!-- performance: generated by bench/report.py from bench/results.json -->"
README_END = "<!-- end of performance -->"


def update_readme(md: str, readme: Path = Path(__file__).resolve().parent.parent / "README.md"):
    """Replaces the README's performance section (between the markers) with
    the table and plot of this run; the section is never edited by hand."""
    if not readme.exists():
        return
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        return
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    body = md.replace("](results.png)", "](bench/results.png)")
    readme.write_text(f"{head}{README_BEGIN}\n{body}\n{README_END}{tail}")


def write_all(results: dict, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    print()
    print(text_table(results))
    (out_dir / "results.md").write_text(markdown(results))
    # The README shows the project's own results only, not a run written
    # elsewhere (--out-dir).
    if out_dir.resolve() == Path(__file__).resolve().parent:
        update_readme(markdown(results))
    try:
        plot(results, out_dir / "results.png")
    except Exception as e:
        print(f"(no plot: {type(e).__name__}: {e})")


if __name__ == "__main__":
    p = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results.json"
    res = json.loads(p.read_text())
    print(text_table(res))
    (p.parent / "results.md").write_text(markdown(res))
    update_readme(markdown(res))
    plot(res, p.parent / "results.png")
