#!/usr/bin/env python3
"""llama.cpp as an optional generation peer (issues 17 and 18): llama-bench
on the bench's Llama (bench/models.py gen_llama, the same seed, so the same
weights) at f32, q8_0 and q4_0, in interleaved rounds with kiln's own decode
of that model through model.generate() at fp32, int8 and int4 (and
"int4:a8" where kiln's options parser takes it).

    make bench-llamacpp                       # or:
    .venv/bin/python bench/llamacpp.py [--rounds 5] [--threads 2,1] [--cache DIR]
                                       [--model gen_llama|gen_llama_1b]

--model gen_llama_1b runs the same comparison on TinyLlama-1.1B's shapes
(bench/models.py build_gen_llama_1b, random weights; 4.4 GB in fp32, a
quarter of an hour a run): a decode step there is mostly the weights'
bytes, where on the 8-layer model a third of a quantized step is the
per-step Python around kiln.

Steps, each reused when its output is already there:

  1. llama.cpp: the llama-cpp-python sdist (it vendors llama.cpp) from PyPI
     with ``pip download --no-binary`` into the cache (default
     ~/.cache/kiln/peers, outside the repo), then cmake Release with
     GGML_NATIVE=ON, targets llama-bench and llama-quantize. On a CPU with
     AMX the build adds -mno-amx-* (with GCC 12 its AMX kernels fault on
     q8_0/q4_0: shared/peers/README.md), so the figures are without AMX;
  2. the model: gen_llama saved with save_pretrained beside a SentencePiece
     tokenizer trained here on made-up text (convert_hf_to_gguf.py needs
     one; it pads the vocabulary to the config's 32000 with unused pieces,
     and neither system ever decodes text), converted to GGUF f32 by the
     vendored convert_hf_to_gguf.py (its gguf-py is vendored too; it needs
     sentencepiece: bench/requirements-llamacpp.txt), quantized to q8_0 and
     q4_0 by llama-quantize;
  3. rounds: each round runs every system once, the order rotating:
     ``llama-bench -p 128 -n 64 -t N -r 1 -o json`` per GGUF (its prefill
     pp128 and its decode tg64, tokens/s), and one kiln generate() per kiln
     system as bench/decode_lowp.py runs them (greedy, 128-token prompt, 64
     decode steps after the first token: prefill tok/s = 128 / time to first
     token, decode tok/s from the streamer's stamps). Medians over rounds.

  4. kiln's C loop: each kiln system's model also traced as a generation
     step with its KV cache passed in (kiln.llm.StaticCacheStep, the same
     weights_dtype), saved, and run in the rounds by ``kiln generate``
     (build/src/tools/kiln: the C runtime alone, the same prompt, 64 new
     tokens after the first): rows "<kiln system> (C)", prefill tok/s =
     128 / its prompt call, decode tok/s = 1000 / its median step. These are
     a C loop like llama-bench's (kiln's prompt is 128 tokens in the cache,
     llama-bench's tg64 starts from an empty one).

Not the same measurement on both sides, and the table says so:
llama-bench's figures are its own C++ loop (tg64 decodes 64 tokens from an
empty context; pp128 is one batch of 128), while kiln's go through
transformers' generate(): the prefill includes generate()'s set-up, and each
decode step includes Python, Dynamo's guards and generate()'s sampling
loop. So, after the rounds, one generate() per kiln system with kiln's
per-node profiler on (bench/gen_profile.py's measurement) gives the time
kiln's kernels took per decode step: "kernels tok/s" = 1000 / that (an upper
bound on what a C loop around kiln would reach).

Writes bench/llamacpp_results.json (or --out) and prints a Markdown table.
A step that fails (no compiler, no network to PyPI, a conversion error)
puts its reason in the rows it affects; the kiln rows still run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LLAMA_CPP_PYTHON = "0.3.36"          # the sdist whose vendored llama.cpp is built
GGUF_TYPES = ("f32", "q8_0", "q4_0")
TARGETS = ("llama-bench", "llama-quantize", "llama-batched-bench")
# kiln's systems: (name, torch.compile options' weights_dtype); the ":a8"
# ones are run only where kiln.options.weights_quant accepts them.
# int4:g128:a8: groups of 128 (torchao's and NNCF's default), 4.25 bits a
# weight against q4_0's 4.5; held against q4_0, the nearest llama.cpp row.
KILN_KINDS = (("kiln fp32", None), ("kiln int8", "int8"), ("kiln int8:a8", "int8:a8"),
              ("kiln int4", "int4"), ("kiln int4:a8", "int4:a8"), ("kiln int4:g128:a8", "int4:g128:a8"))
# The models it can run: --model's name -> bench/models.py's builder.
MODEL_BUILDERS = {"gen_llama": "build_gen_llama", "gen_llama_1b": "build_gen_llama_1b"}
# Which llama.cpp row each kiln row is held against (issue 18's targets:
# int8 >= q8_0, int4 >= q4_0; issue 17: TTFT against f32 prefill).
PAIRS = {"kiln fp32": "llama.cpp f32", "kiln int8": "llama.cpp q8_0", "kiln int8:a8": "llama.cpp q8_0",
         "kiln int4": "llama.cpp q4_0", "kiln int4:a8": "llama.cpp q4_0", "kiln int4:g128:a8": "llama.cpp q4_0"}


C_SUFFIX = " (C)"  # a kiln system's row run by `kiln generate` instead of generate()
LLM_SUFFIX = " (kiln.llm)"  # its row with generate() running kiln.llm.compile's step instead of torch.compile


def base_system(name: str) -> str:
    """The generate() row a C-loop or kiln.llm row stands beside ("kiln int4 (C)" -> "kiln int4")."""
    for suffix in (C_SUFFIX, LLM_SUFFIX):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _suffix(name: str) -> str:
    return name[len(base_system(name)):]


class Unavailable(Exception):
    """A step cannot run here; the message is the reason the rows give."""


def default_cache() -> Path:
    return Path(os.environ.get("KILN_PEERS_CACHE", Path.home() / ".cache" / "kiln" / "peers"))


def _tail(text: str, n: int = 200) -> str:
    """The last non-empty line of a tool's output, shortened: the reason a
    row gives (the full log stays in the cache)."""
    lines = [l.strip() for l in (text or "").strip().splitlines() if l.strip()]
    s = lines[-1] if lines else "(no output)"
    return s if len(s) <= n else s[: n - 1] + "…"


def _run(cmd, log: Path, what: str, **kw):
    """Runs cmd with its output into log; Unavailable(what + its last
    line) when it fails or cannot start."""
    try:
        p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, **kw)
    except OSError as e:
        raise Unavailable(f"{what}: {e}") from None
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\n{p.stdout}\n")
    if p.returncode != 0:
        raise Unavailable(f"{what} failed ({p.returncode}): {_tail(p.stdout)} (log: {log})")
    return p.stdout


# --------------------------------------------------------------------------
# 1. Building llama.cpp
# --------------------------------------------------------------------------

def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cmake_args(flags: set[str]) -> tuple[list[str], str]:
    """cmake's configure arguments for this CPU, and a note for the report.
    With AMX, -mno-amx-*: GCC 12 drops the stores to the on-stack tile
    configuration before ldtilecfg in llama.cpp's AMX kernels (SIGILL on
    q8_0/q4_0, shared/peers/README.md)."""
    args = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_OPENSSL=OFF"]
    note = "GGML_NATIVE=ON"
    if "amx_tile" in flags:
        no_amx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
        args += [f"-DCMAKE_C_FLAGS={no_amx}", f"-DCMAKE_CXX_FLAGS={no_amx}"]
        note += ", AMX off (-mno-amx-*: its AMX kernels fault when built by GCC 12)"
    return args, note


def build_llamacpp(cache: Path, log=print) -> tuple[Path, str]:
    """(directory of llama-bench and llama-quantize, a note on the build).
    Reuses a build with the same cmake arguments."""
    cache.mkdir(parents=True, exist_ok=True)
    args, note = cmake_args(cpu_flags())
    key = hashlib.sha1(" ".join(args).encode()).hexdigest()[:8]
    src = cache / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"
    build = cache / f"llama.cpp-{LLAMA_CPP_PYTHON}-{key}"
    bindir = build / "bin"
    if all((bindir / t).exists() for t in TARGETS):
        return bindir, note
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise Unavailable(f"llama.cpp not built: no {tool} on PATH")
    buildlog = build.parent / f"{build.name}.log"
    if not (src / "CMakeLists.txt").exists():
        sdist = cache / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
        if not sdist.exists():
            log(f"llama.cpp: downloading the llama-cpp-python {LLAMA_CPP_PYTHON} sdist into {cache}")
            _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
                  f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", cache], buildlog, "pip download")
        with tarfile.open(sdist) as tf:
            tf.extractall(cache, filter="data")
    log(f"llama.cpp: building {', '.join(TARGETS)} in {build} (a few minutes; log {buildlog})")
    _run(["cmake", "-S", src, "-B", build, *args], buildlog, "cmake configure")
    _run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", *TARGETS],
         buildlog, "cmake build")
    if not all((bindir / t).exists() for t in TARGETS):
        raise Unavailable(f"cmake build finished but {bindir} lacks {', '.join(TARGETS)}")
    return bindir, note


def llamacpp_source(cache: Path) -> Path:
    return cache / f"llama_cpp_python-{LLAMA_CPP_PYTHON}" / "vendor" / "llama.cpp"


# --------------------------------------------------------------------------
# 2. The model as GGUF
# --------------------------------------------------------------------------

def made_up_text(n_lines: int = 2000, seed: int = 0) -> list[str]:
    """Lines of invented words (seeded): enough text for SentencePiece to
    learn a few hundred pieces from, with nothing fetched."""
    import random
    rng = random.Random(seed)
    cons, vows = "bcdfghjklmnprstvwz", "aeiou"
    words = ["".join(rng.choice(cons) + rng.choice(vows) for _ in range(rng.randint(1, 4)))
             for _ in range(800)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(4, 16))) for _ in range(n_lines)]


def train_tokenizer(path: Path, vocab_size: int = 600) -> int:
    """Writes a Llama-style SentencePiece model (BPE, byte fallback, <unk>
    <s> </s> at 0-2 as in LlamaConfig's defaults) trained on made-up text to
    path; returns its vocabulary size. The GGUF converter fills the rest of
    the model's vocabulary with unused pieces."""
    import io
    import sentencepiece as spm
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(made_up_text()), model_writer=buf,
                                   vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2,
                                   num_threads=1)
    path.write_bytes(buf.getvalue())
    return spm.SentencePieceProcessor(model_file=str(path)).vocab_size()


def export_hf(model, out_dir: Path) -> Path:
    """save_pretrained with the tokenizer beside it: what
    convert_hf_to_gguf.py reads."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    train_tokenizer(out_dir / "tokenizer.model")
    return out_dir


def convert_env(src: Path) -> dict:
    """The converter's environment: the vendored gguf-py first on the path
    (the PyPI gguf may be older than its converter), hubs offline."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src / "gguf-py"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    return env


def make_ggufs(model, src: Path, bindir: Path | None, work: Path, logs: Path, log=print,
               name: str = "gen_llama") -> dict:
    """{type: path or Unavailable} for GGUF_TYPES in work: f32 by the
    vendored converter, the others by llama-quantize from it (the tools'
    output in logs/convert.log)."""
    out: dict = {}
    clog = logs / "convert.log"
    f32 = work / f"{name}-f32.gguf"
    try:
        try:
            import sentencepiece  # noqa: F401
        except ImportError:
            raise Unavailable("conversion needs sentencepiece: pip install -r "
                              "bench/requirements-llamacpp.txt") from None
        if not (src / "convert_hf_to_gguf.py").exists():
            raise Unavailable(f"no convert_hf_to_gguf.py under {src}")
        hf = export_hf(model, work / "hf")
        log(f"llama.cpp: converting {name} to GGUF f32")
        _run([sys.executable, src / "convert_hf_to_gguf.py", hf, "--outtype", "f32", "--outfile", f32],
             clog, "convert_hf_to_gguf.py", env=convert_env(src))
        out["f32"] = f32
    except Unavailable as e:
        return {t: e for t in GGUF_TYPES}
    for t in GGUF_TYPES[1:]:
        if bindir is None:
            out[t] = Unavailable("llama.cpp not built")
            continue
        q = work / f"{name}-{t}.gguf"
        try:
            _run([bindir / "llama-quantize", f32, q, t.upper()], clog, f"llama-quantize {t}")
            out[t] = q
        except Unavailable as e:
            out[t] = e
    return out


# --------------------------------------------------------------------------
# 3. Timing
# --------------------------------------------------------------------------

def parse_llama_bench(text: str) -> dict:
    """llama-bench's JSON (-o json): {"prefill_tps", "decode_tps" (each
    test's mean over its repetitions), "samples": {...}, "info": {...}}."""
    try:
        tests = json.loads(text)
    except json.JSONDecodeError:
        raise Unavailable(f"llama-bench printed no JSON: {_tail(text)}") from None
    if isinstance(tests, dict):
        tests = [tests]
    out: dict = {"samples": {}}
    for t in tests:
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            key = "prefill_tps"
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            key = "decode_tps"
        else:
            continue
        out[key] = float(t["avg_ts"])
        out["samples"][key] = [float(v) for v in t.get("samples_ts", [t["avg_ts"]])]
        out["info"] = {k: t[k] for k in ("build_commit", "cpu_info", "backends", "type_k", "model_type",
                                         "model_size", "model_n_params", "n_threads") if k in t}
    if "prefill_tps" not in out and "decode_tps" not in out:
        raise Unavailable(f"llama-bench's JSON has no pp/tg test: {_tail(text)}")
    return out


def llama_bench(bindir: Path, gguf: Path, threads: int, prompt: int, new: int, reps: int = 1,
                log_path: Path | None = None) -> dict:
    cmd = [bindir / "llama-bench", "-m", gguf, "-p", str(prompt), "-n", str(new), "-t", str(threads),
           "-r", str(reps), "-o", "json"]
    try:
        p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise Unavailable(f"llama-bench: {e}") from None
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as f:
            f.write(f"$ {' '.join(map(str, cmd))}\n{p.stderr}\n")
    if p.returncode != 0:
        raise Unavailable(f"llama-bench failed ({p.returncode}): {_tail(p.stderr or p.stdout)}")
    return parse_llama_bench(p.stdout)


def kiln_names(accepts=None) -> list[tuple[str, object, str]]:
    """(name, weights_dtype, why not) per KILN_KINDS entry: why is "" when
    kiln's options parser takes the spelling."""
    if accepts is None:
        from kiln.options import weights_quant

        def accepts(wd):
            if wd is None:
                return True
            try:
                return weights_quant(wd) is not None
            except ValueError:
                return False
    return [(n, wd, "" if accepts(wd) else f"skipped: this kiln does not take weights_dtype={wd!r}")
            for n, wd in KILN_KINDS]


def _median(v):
    return statistics.median(v) if v else None


def summarize(samples: dict) -> dict:
    """{figure: [per-round values]} -> medians and the fastest decode."""
    out = {}
    for k in ("prefill_tps", "decode_tps"):
        if samples.get(k):
            out[k] = _median(samples[k])
    if samples.get("decode_tps"):
        out["decode_tps_fastest"] = max(samples["decode_tps"])
    return out


# --------------------------------------------------------------------------
# 4. The table
# --------------------------------------------------------------------------

def _f(v, fmt="{:.1f}"):
    return fmt.format(v) if isinstance(v, (int, float)) else "–"


def format_table(res: dict) -> str:
    """Markdown: one line per (threads, system); a row that could not run
    gives its reason in the last column."""
    rows = res.get("rows", [])
    by = {(r["threads"], r["system"]): r for r in rows}
    lines = ["| threads | system | prefill tok/s | decode tok/s (median) | fastest | kernels-only decode tok/s "
             "| decode vs llama.cpp | decode vs kiln fp32 | prefill vs llama.cpp f32 | note |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        note = r.get("na") or "; ".join(x for x in (r.get("note"), r.get("tokens_vs_eager") and
                                                  f"tokens vs eager: {r['tokens_vs_eager']}") if x)
        pair = PAIRS.get(base_system(r["system"]))
        dv = pv = fv = "–"
        p = by.get((r["threads"], pair)) if pair else None
        if p and r.get("decode_tps") and p.get("decode_tps"):
            dv = f"{r['decode_tps'] / p['decode_tps']:.2f}x ({pair.split()[-1]})"
        # Against kiln fp32 run the same way (generate() or the C loop).
        k32 = by.get((r["threads"], "kiln fp32" + _suffix(r["system"])))
        if r["system"].startswith("kiln") and k32 and r.get("decode_tps") and k32.get("decode_tps"):
            fv = f"{r['decode_tps'] / k32['decode_tps']:.2f}x"
        f32 = by.get((r["threads"], "llama.cpp f32"))
        if r["system"].startswith("kiln") and f32 and r.get("prefill_tps") and f32.get("prefill_tps"):
            pv = f"{r['prefill_tps'] / f32['prefill_tps']:.2f}x"
        lines.append(f"| {r['threads']} | {r['system']} | {_f(r.get('prefill_tps'), '{:.0f}')} | "
                     f"{_f(r.get('decode_tps'))} | {_f(r.get('decode_tps_fastest'))} | "
                     f"{_f(r.get('kernels_decode_tps'))} | {dv} | {fv} | {pv} | {note} |")
    notes = [
        "prefill: llama.cpp's pp128 (one batch of 128 tokens); kiln's and eager's 128 / time to first token "
        "of generate() (its set-up included).",
        "decode: llama.cpp's tg64 is its own C++ loop from an empty context; kiln's and eager's are the 64 "
        "steps after the first token of generate() on the 128-token prompt, each step including Python, "
        "Dynamo's guards and generate()'s loop. kernels-only: 1000 / the ms kiln's kernels took per decode "
        "step (kiln's profiler, one generate() after the rounds), what a loop without that overhead "
        "would approach.",
        "(kiln.llm): the same generate(), with the model compiled by kiln.llm.compile (its traced "
        "generation step as its forward, no Dynamo) instead of torch.compile.",
        "(C): the kiln system's model traced as a generation step (kiln.llm.StaticCacheStep) and run by "
        "`kiln generate`, the C runtime alone: prefill 128 / its prompt call, decode 1000 / its median "
        "step, the 64 steps after the first token: a C loop like llama-bench's.",
        f"medians over {res.get('params', {}).get('rounds', '?')} interleaved rounds; "
        f"load average before {res.get('load_before', '?')}, after {res.get('load_after', '?')}.",
    ]
    if res.get("llamacpp", {}).get("build"):
        notes.append(f"llama.cpp: {res['llamacpp']['build']}")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


# --------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------

def machine() -> dict:
    name = ""
    try:
        with open("/proc/cpuinfo") as f:
            name = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    except OSError:
        pass
    fl = cpu_flags()
    isa = [x for x in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_int8")
           if x in fl]
    return {"cpu": name, "isa": isa, "cores": os.cpu_count(), "platform": platform.platform()}


def _load():
    return [round(x, 2) for x in os.getloadavg()]


def run(args, log=print) -> dict:
    """Everything but the printing: the results dict (saved to args.out
    after each thread count)."""
    cache = Path(args.cache)
    threads = [int(t) for t in str(args.threads).split(",")]
    prompt, new = 128, 64
    name = getattr(args, "model", None) or "gen_llama"
    if name not in MODEL_BUILDERS:
        raise ValueError(f"--model {name}: one of {', '.join(MODEL_BUILDERS)}")
    res = {"machine": machine(), "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "params": {"model": name, "prompt": prompt, "new_tokens": new, "rounds": args.rounds,
                      "threads": threads},
           "llamacpp": {"version": f"llama-cpp-python {LLAMA_CPP_PYTHON} sdist (vendored llama.cpp)"},
           "load_before": _load(), "rows": []}

    def save():
        if args.out:
            Path(args.out).write_text(json.dumps(res, indent=1, default=str) + "\n")

    bindir, llama_na = None, ""
    if args.no_llamacpp:
        llama_na = "skipped (--no-llamacpp)"
    else:
        try:
            bindir, res["llamacpp"]["build"] = build_llamacpp(cache, log)
        except Unavailable as e:
            llama_na = f"llama.cpp unavailable: {e}"
    if llama_na:
        res["llamacpp"]["na"] = llama_na
        log(llama_na)

    import models
    log(f"building {name}")
    model = getattr(models, MODEL_BUILDERS[name])()[0]
    work = Path(tempfile.mkdtemp(prefix="kiln-llamacpp-"))
    try:
        if bindir is not None:
            ggufs = make_ggufs(model, llamacpp_source(cache), bindir, work, cache / "logs", log, name)
        else:
            ggufs = {t: Unavailable(llama_na) for t in GGUF_TYPES}
        for t, g in ggufs.items():
            if not isinstance(g, Unavailable):
                res["llamacpp"].setdefault("gguf_mib", {})[t] = round(g.stat().st_size / 2**20)
        _timed(args, res, model, ggufs, bindir, threads, prompt, new, cache / "logs", save, log, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["load_after"] = _load()
    save()
    return res


def _timed(args, res, model, ggufs, bindir, threads, prompt, new, logs, save, log, work):
    import torch
    import torch._dynamo
    from peers import short

    kiln_na, systems, kinds = "", [], []
    if args.no_kiln:
        kiln_na = "skipped (--no-kiln)"
    else:
        try:
            import kiln  # noqa: F401  (registers the backend)
            from decode_lowp import kiln_systems, llm_systems
            from generation import GenSystem
            kinds = kiln_names()
            torch._dynamo.config.recompile_limit = 64
            live = [(n, wd) for n, wd, why in kinds if not why]
            systems = ([GenSystem("eager", None, None, None)] + kiln_systems(model, live)
                       + llm_systems(model, live, prompt + new + 16, LLM_SUFFIX))
        except Exception as e:
            kiln_na = f"kiln unavailable: {short(e)}"
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(1001)          # bench/decode_lowp.py's prompt
    ids = torch.randint(3, vocab, (1, prompt), generator=g)
    mask = torch.ones_like(ids)
    blog = logs / "llama-bench.log"

    c_steps = {}  # kiln system -> its traced step's file, or why there is none
    for t in threads:
        torch.set_num_threads(t)
        rows = {}
        for ty in GGUF_TYPES:
            rows[f"llama.cpp {ty}"] = r = {"system": f"llama.cpp {ty}", "threads": t}
            if isinstance(ggufs[ty], Unavailable):
                r["na"] = str(ggufs[ty])
        named = kinds or [(n, wd, "") for n, wd in KILN_KINDS]
        for name, _, why in [("eager", None, "")] + named + [(n + LLM_SUFFIX, wd, why) for n, wd, why in named]:
            rows[name] = {"system": name, "threads": t}
            if kiln_na or why:
                rows[name]["na"] = kiln_na or why
        res["rows"] += list(rows.values())
        items = []
        for ty in GGUF_TYPES:
            if "na" not in rows[f"llama.cpp {ty}"]:
                items.append((f"llama.cpp {ty}", lambda ty=ty, t=t: llama_bench(
                    bindir, ggufs[ty], t, prompt, new, log_path=blog)))
        live = []
        if systems:
            from decode_lowp import first_calls
            from generation import _generate
            log(f"{t} thread(s): first generate() of each system (kiln compiles)")
            first = first_calls(model, systems, ids, mask, new, prompt, log=log)
            for s in systems:
                f = first[s.name]
                if isinstance(f, str):
                    rows[s.name]["na"] = f
                    continue
                if f[2]:
                    rows[s.name]["tokens_vs_eager"] = f[2]
                if s.name != "eager":
                    rows[s.name]["first_call_s"] = round(f[0], 1)
                live.append(s)

                def call(s=s):
                    _, m = _generate(model, s, ids, mask, new)
                    return {"prefill_tps": prompt * 1e3 / m["ttft_ms"], "decode_tps": m["decode_tps"],
                            "ttft_ms": m["ttft_ms"]}
                items.append((s.name, call))
        if systems:
            items += _c_loop_items(model, kinds, ids, prompt, new, t, rows, res, log, work, c_steps)
        samples = {n: {} for n, _ in items}
        log(f"{t} thread(s): {args.rounds} interleaved rounds of {', '.join(n for n, _ in items)}")
        failed = set()
        for rnd in range(args.rounds):
            k = rnd % max(len(items), 1)
            for name, fn in items[k:] + items[:k]:
                if name in failed:
                    continue
                time.sleep(0.02)
                try:
                    m = fn()
                except Exception as e:   # the row says why; the others go on
                    rows[name]["na"] = str(e) if isinstance(e, Unavailable) else short(e)
                    failed.add(name)
                    continue
                for key in ("prefill_tps", "decode_tps", "ttft_ms"):
                    if key in m:
                        samples[name].setdefault(key, []).append(m[key])
                if "info" in m:
                    rows[name]["llama_bench"] = m["info"]
            log(f"  round {rnd + 1}: " + ", ".join(
                f"{n} {samples[n]['decode_tps'][-1]:.1f}" for n, _ in items
                if n not in failed and samples[n].get("decode_tps")))
        for name, _ in items:
            if name not in failed:
                rows[name].update(summarize(samples[name]))
                rows[name]["samples"] = {k: [round(v, 2) for v in vs] for k, vs in samples[name].items()}
                if samples[name].get("ttft_ms"):
                    rows[name]["ttft_ms"] = _median(samples[name]["ttft_ms"])
        # Kernels only: one profiled generate() per kiln system, after the rounds.
        from gen_profile import decode_kernel_ms, profiled_generate
        for s in live:
            if s.name == "eager" or s.name in failed or s.name.endswith(LLM_SUFFIX):  # (C)'s kernels
                continue
            try:
                _, graphs = profiled_generate(model, s, ids, mask, new)
                ms = decode_kernel_ms(graphs)
                if ms:
                    rows[s.name]["kernel_ms_per_step"] = round(ms, 3)
                    rows[s.name]["kernels_decode_tps"] = 1e3 / ms
            except Exception as e:
                rows[s.name]["note"] = f"kernel profile failed: {short(e)}"
        save()


def _c_loop_items(model, kinds, ids, prompt, new, threads, rows, res, log, work, c_steps):
    """[(row name, call)] for `kiln generate` on each live kiln system's
    traced step, saved in work once (c_steps keeps the files, or why a
    system has none, across thread counts); a system without one gets its
    row with the reason."""
    from peers import short
    from trace_step import KILN_CLI, run_cli
    import kiln
    from kiln.llm import StaticCacheStep
    step = StaticCacheStep(model, max_length=prompt + new + 16)
    items = []
    for name, wd, why in kinds:
        cname = name + C_SUFFIX
        rows[cname] = r = {"system": cname, "threads": threads}
        res["rows"].append(r)
        if name not in c_steps:
            if why or not KILN_CLI.exists():
                c_steps[name] = why or f"kiln CLI not built at {KILN_CLI}"
            else:
                try:
                    log(f"tracing the generation step for {cname}")
                    t0 = time.perf_counter()
                    path = work / f"{name.replace(' ', '_').replace(':', '-')}.kiln"
                    kiln.save(step.trace(ids, **({"weights_dtype": wd} if wd is not None else {})), path)
                    c_steps[name] = (path, round(time.perf_counter() - t0, 1))
                except Exception as e:
                    c_steps[name] = f"trace failed: {short(e)}"
        if isinstance(c_steps[name], str):
            r["na"] = c_steps[name]
            continue
        path, r["first_call_s"] = c_steps[name]

        def call(path=path):
            _, prompt_ms, step_ms = run_cli(path, ids, new, threads)
            return {"prefill_tps": prompt * 1e3 / prompt_ms, "decode_tps": 1e3 / step_ms, "ttft_ms": prompt_ms}
        items.append((cname, call))
    return items


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="2", help="comma-separated thread counts, e.g. 2,1")
    ap.add_argument("--cache", default=str(default_cache()),
                    help="where the sdist and the llama.cpp build live (default %(default)s)")
    ap.add_argument("--model", default="gen_llama", choices=tuple(MODEL_BUILDERS),
                    help="gen_llama (the bench's 8-layer Llama) or gen_llama_1b (TinyLlama-1.1B's shapes)")
    ap.add_argument("--out", default=None,
                    help="the results' JSON (default bench/llamacpp_results.json, "
                         "bench/llamacpp_results_<model>.json for another model)")
    ap.add_argument("--no-kiln", action="store_true", help="llama.cpp's rows only")
    ap.add_argument("--no-llamacpp", action="store_true", help="kiln's rows only")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = str(HERE / ("llamacpp_results.json" if args.model == "gen_llama"
                               else f"llamacpp_results_{args.model}.json"))
    import warnings
    warnings.filterwarnings("ignore")
    import logging
    logging.disable(logging.WARNING)
    res = run(args, log=lambda s: print(s, flush=True))
    print()
    print(format_table(res))
    print(f"(written to {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
