"""bench/report.py's generation table: the kiln.llm.compile column beside
torch.compile's, its tokens checked like theirs; the roofline from read
bandwidth sampled beside the row's timing (bench/generation.py)."""

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))

import report  # noqa: E402


def _row(llm):
    return {"model": "gen_llama", "kind": "generate", "batch": 1, "threads": 2, "roofline_tps": 100.0,
            "systems": {"eager": {"decode_tps": 20.0, "ttft_ms": 90.0},
                        "kiln": {"decode_tps": 50.0, "ttft_ms": 60.0, "tokens": "65/65 equal", "tokens_ok": True},
                        "kiln_llm": llm}}


def test_generation_rows_show_kiln_llm_and_its_tokens():
    notes = report.Notes()
    rows = report.gen_table_rows({"rows": [_row({"decode_tps": 61.5, "tokens": "65/65 equal",
                                                 "tokens_ok": True})]}, notes)
    cells = dict(zip(report.GEN_HEADER, rows[0]))
    assert cells["kiln.llm tok/s"] == "61.5" and cells["kiln tok/s"] == "50.0"
    assert cells["kiln tokens"] == "ok, kiln.llm ok"
    rows = report.gen_table_rows({"rows": [_row({"na": "kiln.llm.compile failed: no"})]}, notes)
    cell = dict(zip(report.GEN_HEADER, rows[0]))["kiln.llm tok/s"]
    assert cell.startswith("n/a [") and "kiln.llm.compile failed: no" in notes.items
    rows = report.gen_table_rows({"rows": [_row({"decode_tps": 40.0, "tokens": "differ from token 3",
                                                 "tokens_ok": False})]}, notes)
    assert "kiln.llm MISMATCH" in dict(zip(report.GEN_HEADER, rows[0]))["kiln tokens"]


def test_roofline_from_bandwidth_sampled_beside_the_row():
    import generation
    row = {"bandwidth_gbs": 70.0, "bandwidth_how": "cached", "roofline_tps": 140.0}
    generation._roofline(row, [None], 1, 500e6)     # no sample: the cached roof stays
    assert row["roofline_tps"] == 140.0 and row["bandwidth_how"] == "cached"
    generation._roofline(row, [30.0, None, 36.0, 33.0], 2, 500e6)
    assert row["bandwidth_gbs"] == 33.0 and row["bandwidth_how"] == "sampled"
    assert row["roofline_tps"] == 2 * 33.0e9 / 500e6 and row["bandwidth_gbs_samples"] == [30.0, 36.0, 33.0]
    rows = [dict(_row({"decode_tps": 61.5}), weight_bytes=500e6, bandwidth_gbs=g, bandwidth_how=h, threads=t)
            for g, h, t in ((33.0, "sampled", 2), (36.0, "sampled", 2), (31.0, "cached", 1))]
    foot = " ".join(report._gen_foot({"rows": rows}))
    assert "2 thr 33.0-36.0 GB/s (sampled beside the rows' timed calls)" in foot
    assert "1 thr 31.0 GB/s (cached by kiln.machine())" in foot


def test_lowp_rows_show_int4_a8_and_how_each_quantized_cell_was_held():
    notes = report.Notes()
    s = {"kiln": {"ms": 10.0}, "kiln_int4": {"ms": 2.5, "cos": 0.87286, "exact": True},
         "kiln_int4a8": {"ms": 2.0, "cos": 0.87229, "near": True}, "kiln_int8": {"ms": 4.0, "cos": 0.995}}
    rows = report.lowp_table_rows({"rows": [{"model": "llama_decode", "threads": 2, "systems": s}]}, notes)
    cells = dict(zip(report.LOWP_HEADER, rows[0]))
    assert len(rows[0]) == len(report.LOWP_HEADER)
    assert cells["kiln int4 ms"] == "2.50 (0.87286, =)" and cells["kiln int4:a8 ms"] == "2.00 (0.87229, ~)"
    assert cells["int4/fp32"] == "4.00x" and cells["int4:a8/fp32"] == "5.00x" and cells["int8/fp32"] == "2.50x"


def test_int8_activation_modes_are_held_near_their_dequantized_reference():
    import peers
    import torch
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4000, generator=g)
    deq = ref + 0.6 * torch.randn(4000, generator=g)      # the weights' own error: cosine ~0.86 to ref
    near = deq + 0.05 * torch.randn(4000, generator=g)    # activations' rounding on top: ~0.999 to deq
    far = deq + 0.3 * torch.randn(4000, generator=g)      # more than that: fails
    assert not peers.compare_lowp(ref, near)["ok"]
    res = peers.compare_lowp(ref, near, deq, near=True)
    assert res["ok"] and res.get("near") and not res.get("exact")
    res = peers.compare_lowp(ref, far, deq, near=True)
    assert not res["ok"] and "dequantized" in res["why"]
    # A weight-only mode is held exact, not near: near's output is no longer within fp32's tolerance.
    assert not peers.compare_lowp(ref, near, deq)["ok"]
    assert peers.compare_lowp(ref, deq, deq)["exact"]
