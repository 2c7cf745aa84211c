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
