"""bench/report.py's generation table: the kiln.llm.compile column beside
torch.compile's, its tokens checked like theirs."""

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
