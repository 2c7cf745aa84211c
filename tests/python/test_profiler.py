"""Seeing what kiln did (issue 20): kiln's nodes on torch.profiler's timeline,
kiln.profile's report against the machine's peaks, kiln.machine() and
`kiln info` without a file, and Module.profile's accounting.

No assertion here compares two timings of different runs: figures are
checked by structure (nesting, counts, exact FLOPs and bytes) and by
identities that hold on any machine load (a node's time inside the run
that contains it)."""

import json
import os
import pathlib
import subprocess
import time

import pytest
import torch

import kiln

REPO = pathlib.Path(__file__).resolve().parents[2]
KILN_BIN = REPO / "build" / "src" / "tools" / "kiln"
pytestmark = pytest.mark.usefixtures("machine_cache")


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 128)
        self.b = torch.nn.Linear(128, 32)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x))).softmax(-1)


def _compiled():
    torch.manual_seed(0)
    x = torch.randn(16, 64)
    return kiln.trace(MLP().eval(), x), x


def test_torch_profiler_events_nested_in_the_call(tmp_path):
    c, x = _compiled()
    c(x)
    with torch.profiler.profile(record_shapes=True) as prof:
        y0 = x * 2.0                     # eager before
        y = c(y0)
        z = y + 1.0                      # eager after
    assert torch.equal(y, c(y0)) and z.shape == y.shape
    names = {e.key for e in prof.key_averages()}
    assert {"kiln::forward", "kiln::linear", "aten::mul", "aten::add"} <= names, names
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ev = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    fwd = [e for e in ev if e["name"] == "kiln::forward"]
    assert len(fwd) == 1
    lo, hi = fwd[0]["ts"], fwd[0]["ts"] + fwd[0]["dur"]
    kiln_ev = [e for e in ev if e["name"].startswith("kiln::") and e["name"] != "kiln::forward"]
    # One event per kernel node: linear, linear, softmax (gelu fuses into the first).
    assert [e["name"] for e in sorted(kiln_ev, key=lambda e: e["ts"])] == \
        ["kiln::linear", "kiln::linear", "kiln::softmax"], [e["name"] for e in kiln_ev]
    for e in kiln_ev:
        assert lo <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-3, (e, fwd[0])
        assert e["tid"] == fwd[0]["tid"]
    first = min((e for e in kiln_ev if e["name"] == "kiln::linear"), key=lambda e: e["ts"])
    assert first["args"]["Input Dims"][0] == [16, 64]
    assert first["args"]["flops"] == 2 * 16 * 64 * 128
    assert "Linear" in first["args"]["origin"] or "linear" in first["args"]["origin"]
    # The eager ops around the call are on the same timeline, outside it.
    mul = [e for e in ev if e["name"] == "aten::mul"]
    add = [e for e in ev if e["name"] == "aten::add"]
    assert mul and add and mul[0]["ts"] + mul[0]["dur"] <= lo + 1e-3 and add[-1]["ts"] >= hi - 1e-3


def test_no_hook_outside_a_profiler(monkeypatch):
    """Outside torch.profiler the C call takes no hook (its cost is one check)."""
    c, x = _compiled()
    calls = []
    real = c._kiln_model

    class Spy:
        def __getattr__(self, name):
            return getattr(real, name)

        def run(self, *args):
            calls.append(len(args))
            return real.run(*args)

    monkeypatch.setattr(c, "_kiln_model", Spy())
    c(x)
    with torch.profiler.profile():
        c(x)
    assert calls == [2, 3]


def test_module_profile_is_inside_the_run():
    """Module.profile's node times are the kernel's own: their sum fits in
    the wall time of the same runs, and the barrier wait is reported apart."""
    c, x = _compiled()
    m = c._kiln_model
    c(x)
    m.profile(True)
    t0 = time.perf_counter_ns()
    for _ in range(20):
        c(x)
    wall = time.perf_counter_ns() - t0
    rows, n = m.profile()
    waits = m.profile_wait()
    m.profile(False)
    assert n == 20 and len(waits) == len(rows)
    assert sum(r[2] for r in rows) + sum(waits) <= wall
    prof = c.profile(x, runs=5)
    assert all("wait_ms" in r and r["wait_ms"] >= 0 for r in prof)


def test_report_against_a_gemm_of_known_flops(tmp_path):
    m_, k, n = 64, 256, 512
    lin = torch.nn.Linear(k, n, bias=False).eval()
    x = torch.randn(m_, k)
    c = kiln.trace(lin, x)
    rep = kiln.profile(c, x, runs=5)
    (row,) = [r for r in rep.rows if r["op"] == "linear"]
    assert row["flops"] == 2 * m_ * k * n
    # x and y dense fp32, the weight as packed (at least its K x N floats).
    assert row["bytes"] >= 4 * (m_ * k + m_ * n + k * n)
    assert row["gflops"] == pytest.approx(row["flops"] / (row["ms"] * 1e-3) / 1e9, rel=1e-6)
    assert row["input_shapes"][0] == (m_, k) and row["output_shapes"] == [(m_, n)]
    assert row["bound"] in ("compute", "memory") and row["peak_fraction"] > 0
    assert rep.totals["flops"] == row["flops"] and rep.totals["runs"] == 5
    assert abs(sum(r["share"] for r in rep.rows) - 1) < 1e-6
    assert "linear" in str(rep) and "GFLOP/s" in str(rep) and row["line"] in str(rep)
    t = json.loads(pathlib.Path(rep.export_chrome_trace(tmp_path / "k.json")).read_text())
    assert [e["name"] for e in t["traceEvents"]] == ["kiln::linear"]
    png = rep.plot_roofline(tmp_path / "roof.png")
    assert pathlib.Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("mode", ["fp32", "bf16", "int8:a8"])
def test_rows_judged_against_the_roof_their_arithmetic_runs_on(mode):
    """A bf16-compute linear is judged against the bf16 engine's measured peak
    where the machine has an engine (its dot products can pass the fp32 FMA
    peak, which would read above 100 %); an int8:a8 linear against
    VPDPBUSD's where kiln runs at the avx512 level of a CPU that has it;
    everything else, and those elsewhere, against the fp32 FMA peak."""
    lin = torch.nn.Linear(512, 512, bias=False).eval()
    x = torch.randn(64, 512)
    opts = {"fp32": {}, "bf16": {"compute_dtype": torch.bfloat16},
            "int8:a8": {"weights_dtype": "int8:a8"}}[mode]
    rep = kiln.profile(kiln.trace(lin, x, **opts), x, runs=3)
    (row,) = [r for r in rep.rows if r["op"] == "linear"]
    mach = kiln.machine()
    engine = mach["bf16_engine"] != "none" and mach["bf16_gflops"] > 0
    vnni = mach["isa"] == "avx512" and mach["int8_gops"] > 0
    want = {"fp32": "fp32", "bf16": "bf16" if engine else "fp32",
            "int8:a8": "int8" if vnni else "fp32"}[mode]
    assert row["roof"] == want
    peak = {"fp32": rep.totals["peak_gflops"], "bf16": mach["bf16_gflops"],
            "int8": mach["int8_gops"]}[want]
    assert row["roof_gflops"] == pytest.approx(peak)
    if row["bound"] == "compute":
        assert row["peak_fraction"] == pytest.approx(row["gflops"] / peak, rel=1e-9)
        assert (want != "fp32") == (f"  {want}  " in row["line"])


def test_symbolic_model_profiled_at_the_call_sizes():
    """A model with symbolic sizes: its torch.profiler events and its report
    count the FLOPs of the sizes each call ran (its dims were symbolic ids,
    which made torch.profiler fail)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 32).eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    c = kiln.trace(lin, torch.randn(4, 16), dynamic_shapes={"input": {0: batch}})
    for rows in (8, 3):
        x = torch.randn(rows, 16)
        with torch.profiler.profile(record_shapes=True) as prof:
            y = c(x)
        assert y.shape == (rows, 32)
        (ev,) = [e for e in prof.events() if e.name == "kiln::linear"]
        assert ev.input_shapes[0] == [rows, 16]
        rep = kiln.profile(c, x, runs=2)
        (row,) = [r for r in rep.rows if r["op"] == "linear"]
        assert row["flops"] == 2 * rows * 16 * 32 and row["input_shapes"][0] == (rows, 16)


class Decoder(torch.nn.Module):
    """A decode step's shape: an embedding row, then two linears."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(1000, 256)
        self.a = torch.nn.Linear(256, 512, bias=False)
        self.b = torch.nn.Linear(512, 256, bias=False)

    def forward(self, ids):
        return self.b(torch.relu(self.a(self.emb(ids))))


def test_decode_ceiling_from_known_weight_bytes():
    """A decode-shaped call (2 tokens, one row each) streams its weights:
    2 x 256 x 512 fp32 linear weights and the 2 embedding rows it gathers
    (not the 1000-row table). The report states bandwidth / those bytes as
    the calls/s ceiling, times 2 rows as tokens/s; a prefill-shaped call of
    the same model is compute-bound on its weights and states none."""
    torch.manual_seed(0)
    m = Decoder().eval()
    ids = torch.tensor([[7], [11]])
    rep = kiln.profile(kiln.trace(m, ids), ids, runs=2)
    t = rep.totals
    assert t["weight_bytes"] == 4 * (2 * 256 * 512) + 2 * 256 * 4
    assert t["weight_rows"] == 2 and t["weight_bound"] is True
    assert t["calls_per_s"] == pytest.approx(t["bandwidth_gbs"] * 1e9 / t["weight_bytes"], rel=1e-12)
    assert t["tokens_per_s"] == pytest.approx(2 * t["calls_per_s"], rel=1e-12)
    assert f"{t['tokens_per_s']:.1f} tokens/s" in str(rep) and "decode-shaped, 2 rows" in str(rep)
    # The bandwidth is the machine's beside these runs, not kiln.machine()'s
    # figure cached at some other hour (a shared VM's moves 2x in one).
    assert t["bandwidth_how"] == "sampled" and "sampled beside the runs" in str(rep)
    assert t["bandwidth_gbs"] > 0
    prefill = torch.randint(0, 1000, (1, 256))
    rep = kiln.profile(kiln.trace(m, prefill), prefill, runs=1)
    assert rep.totals["weight_rows"] == 256 and rep.totals["weight_bound"] is False
    assert rep.totals["tokens_per_s"] == 0 and "tokens/s" not in str(rep)


PEAK_KEYS = ("fma_gflops_1", "fma_gflops", "bf16_gflops_1", "bf16_gflops", "int8_gops_1",
             "int8_gops", "bandwidth_gbs_1", "bandwidth_gbs")


def test_machine_is_measured_once_and_cached(machine_cache):
    m = kiln.machine()
    assert m["cores"] >= 1 and m["threads"] >= 1 and m["cpu_model"]
    assert m["fma_gflops_1"] > 0 and m["fma_gflops"] > 0 and m["bandwidth_gbs_1"] > 0
    assert m["isa"] == kiln.isa()
    assert (m["bf16_gflops"] > 0) == m["features"]["avx512_bf16"]
    again = kiln.machine()
    # The figures a measuring process sees are the ones the file gives every
    # later reader (3 decimals), exactly: a report made with either agrees.
    # (They differed in the fourth decimal, and a profile's roof failed to
    # equal kiln.machine()'s peak when the digits fell that way.)
    # (A busy record, too: this process has measured, so it reads the file
    # as it is; a fresh process measures it again, next test.)
    saved = json.loads(machine_cache.read_text())
    for key in PEAK_KEYS:
        assert again[key] == m[key] == saved[key] == round(m[key], 3), key
    assert again["measured"] is False and again["busy"] == m["busy"] == bool(saved["busy"])
    assert 1 <= m["physical_cores"] <= m["cores"]


def test_machine_sample_reads_the_probe_on_the_pools_threads():
    """kiln._C.machine_sample: one sample of the read or FMA probe now (what
    the generation bench divides its rows by), on 1..pool-size threads; a
    wrong probe or thread count is a ValueError naming it."""
    from kiln import _C
    threads = kiln.machine()["threads"]
    for n in sorted({1, threads}):
        assert _C.machine_sample("read", n) > 0 and _C.machine_sample("fma", n) > 0
    with pytest.raises(ValueError, match="probe 'write'"):
        _C.machine_sample("write", 1)
    for n in (0, threads + 1):
        with pytest.raises(ValueError, match=f"{n} threads"):
            _C.machine_sample("read", n)


@pytest.mark.skipif(not KILN_BIN.exists(), reason="kiln CLI not built")
def test_busy_peaks_are_measured_again_and_merged(machine_cache, tmp_path):
    """Peaks read while the machine was busy (all threads' FMA rate far
    from one thread's times the cores) are not kept as they are: a process
    that finds such a record measures again and keeps, figure by figure, the
    higher of the two (peaks are maxima); a consistent record is reused."""
    m = kiln.machine()
    path = tmp_path / "busy.json"
    record = {"cpu_model": m["cpu_model"], "isa": m["isa"], "threads": m["threads"],
              "measured_at": 1, **{k: 0.0 for k in PEAK_KEYS}}
    # Written before the busy mark existed (no "busy"): measured once more.
    # One figure no machine reaches must survive the merge (and keeps the
    # record busy: all threads then read far less than one).
    record.update(fma_gflops_1=1.0, fma_gflops=1.0 if m["threads"] > 1 else 0.5,
                  bandwidth_gbs_1=1.0e6, bandwidth_gbs=1.0)
    path.write_text(json.dumps(record, indent=2))
    env = dict(os.environ, KILN_MACHINE_CACHE=str(path))
    p = subprocess.run([str(KILN_BIN), "info"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert "(measured now)" in p.stdout and "note:" in p.stdout, p.stdout
    after = json.loads(path.read_text())
    assert after["bandwidth_gbs_1"] == 1.0e6 and after["busy"] == 1
    assert after["fma_gflops_1"] > 1.0 and after["fma_gflops"] > 1.0
    # A consistent record, marked not busy, is reused as written.
    record.update(busy=0, fma_gflops_1=10.5,
                  fma_gflops=10.5 * min(m["threads"], m["physical_cores"]),
                  bandwidth_gbs_1=5.25, bandwidth_gbs=6.5)
    path.write_text(json.dumps(record, indent=2))
    p = subprocess.run([str(KILN_BIN), "info"], capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode == 0, p.stderr
    assert "(cached in" in p.stdout and "note:" not in p.stdout and "10.5" in p.stdout, p.stdout
    assert json.loads(path.read_text()) == record


@pytest.mark.skipif(not KILN_BIN.exists(), reason="kiln CLI not built")
def test_cli_info_without_a_file(machine_cache):
    kiln.machine()  # the cache the CLI reads (same thread count: KILN_NUM_THREADS unset here)
    env = dict(os.environ, KILN_MACHINE_CACHE=str(machine_cache))
    p = subprocess.run([str(KILN_BIN), "info"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    for word in ("cpu:", "caches:", "isa:", "fp32 FMA", "read bandwidth"):
        assert word in p.stdout, p.stdout
    bad = subprocess.run([str(KILN_BIN), "run", "--measure"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2
