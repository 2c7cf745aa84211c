"""bench/llamacpp.py (llama.cpp as an optional generation peer, issue 18)
without llama.cpp: its build flags, llama-bench's JSON, the tokenizer the
GGUF converter needs, the table, and the rows when llama.cpp cannot be
built. Nothing is built, downloaded or timed here."""

import importlib.util
import json
import pathlib
import types

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lc():
    # The module puts bench/ on sys.path itself (it imports models, peers,
    # generation from there), as bench/run.py's workers do.
    spec = importlib.util.spec_from_file_location("bench_llamacpp", REPO / "bench/llamacpp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cmake_args_turn_amx_off_only_with_amx(lc):
    args, note = lc.cmake_args({"avx2", "fma"})
    assert "-DGGML_NATIVE=ON" in args and not any("amx" in a for a in args)
    args, note = lc.cmake_args({"avx512f", "amx_tile", "amx_int8"})
    assert "-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in args
    assert "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" in args
    assert "AMX off" in note


def test_build_without_cmake_is_unavailable(lc, tmp_path, monkeypatch):
    monkeypatch.setattr(lc.shutil, "which", lambda tool: None)
    with pytest.raises(lc.Unavailable, match="no cmake on PATH"):
        lc.build_llamacpp(tmp_path)
    assert not any(tmp_path.iterdir())   # nothing downloaded


def test_parse_llama_bench(lc):
    common = {"build_commit": "abc", "cpu_info": "AMD", "n_threads": 2, "model_size": 1, "backends": "CPU"}
    text = json.dumps([dict(common, n_prompt=128, n_gen=0, avg_ts=1000.5, samples_ts=[1000.5]),
                       dict(common, n_prompt=0, n_gen=64, avg_ts=50.0, samples_ts=[49.0, 51.0])])
    out = lc.parse_llama_bench(text)
    assert out["prefill_tps"] == 1000.5 and out["decode_tps"] == 50.0
    assert out["samples"]["decode_tps"] == [49.0, 51.0]
    assert out["info"]["build_commit"] == "abc"
    with pytest.raises(lc.Unavailable, match="no JSON"):
        lc.parse_llama_bench("error: failed to load model\n")
    with pytest.raises(lc.Unavailable, match="no pp/tg"):
        lc.parse_llama_bench("[]")


def test_kiln_names_skip_what_kiln_does_not_take(lc):
    names = lc.kiln_names(accepts=lambda wd: wd != "int4:a8")
    why = {n: w for n, _, w in names}
    assert why["kiln fp32"] == why["kiln int8"] == why["kiln int4"] == ""
    assert why["kiln int4:a8"].startswith("skipped: this kiln does not take")
    # With kiln's own parser: every spelling either runs or says why.
    assert all(w == "" or w.startswith("skipped") for _, _, w in lc.kiln_names())


def test_tokenizer_from_made_up_text(lc, tmp_path):
    spm = pytest.importorskip("sentencepiece", reason="bench/requirements-llamacpp.txt")
    n = lc.train_tokenizer(tmp_path / "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "tokenizer.model"))
    assert n == sp.vocab_size() == 600
    assert (sp.id_to_piece(0), sp.id_to_piece(1), sp.id_to_piece(2)) == ("<unk>", "<s>", "</s>")
    assert lc.made_up_text(5) == lc.made_up_text(5)   # seeded


def test_table_says_why_and_pairs_rows(lc):
    res = {"params": {"rounds": 3}, "load_before": [1, 1, 1], "load_after": [1, 1, 1],
           "llamacpp": {"build": "GGML_NATIVE=ON"},
           "rows": [{"system": "llama.cpp f32", "threads": 2, "prefill_tps": 400.0, "decode_tps": 20.0},
                    {"system": "llama.cpp q8_0", "threads": 2, "na": "llama-quantize q8_0 failed (1): boom"},
                    {"system": "llama.cpp q4_0", "threads": 2, "prefill_tps": 300.0, "decode_tps": 40.0},
                    {"system": "kiln fp32", "threads": 2, "prefill_tps": 200.0, "decode_tps": 30.0,
                     "decode_tps_fastest": 31.0, "kernels_decode_tps": 35.0},
                    {"system": "kiln int4", "threads": 2, "prefill_tps": 100.0, "decode_tps": 60.0},
                    {"system": "kiln int4:a8", "threads": 2, "na": "skipped: this kiln does not take it"}]}
    table = lc.format_table(res)
    lines = {l.split("|")[2].strip(): l for l in table.splitlines() if l.startswith("| 2 ")}
    assert "llama-quantize q8_0 failed (1): boom" in lines["llama.cpp q8_0"]
    assert "1.50x (f32)" in lines["kiln fp32"] and "| 0.50x |" in lines["kiln fp32"]
    assert "1.50x (q4_0)" in lines["kiln int4"] and "| 0.25x |" in lines["kiln int4"]
    assert "| 1.50x (q4_0) | 2.00x |" in lines["kiln int4"]   # decode against kiln fp32's
    assert "skipped: this kiln does not take it" in lines["kiln int4:a8"]
    assert "Python" in table   # the note on what kiln's decode includes


def test_c_loop_rows_pair_with_their_generate_rows(lc):
    """A kiln system run by `kiln generate` stands against the same llama.cpp
    row as its generate() row, and against kiln fp32 run the same way."""
    res = {"params": {"rounds": 3}, "load_before": [1, 1, 1], "load_after": [1, 1, 1], "llamacpp": {},
           "rows": [{"system": "llama.cpp q4_0", "threads": 1, "prefill_tps": 300.0, "decode_tps": 40.0},
                    {"system": "kiln fp32", "threads": 1, "decode_tps": 10.0},
                    {"system": "kiln fp32 (C)", "threads": 1, "decode_tps": 20.0},
                    {"system": "kiln int4:a8 (C)", "threads": 1, "prefill_tps": 600.0, "decode_tps": 50.0},
                    {"system": "kiln fp32 (kiln.llm)", "threads": 1, "decode_tps": 16.0},
                    {"system": "kiln int4:a8 (kiln.llm)", "threads": 1, "decode_tps": 48.0}]}
    assert lc.base_system("kiln int4:a8 (C)") == "kiln int4:a8" and lc.base_system("kiln fp32") == "kiln fp32"
    assert lc.base_system("kiln int4:a8 (kiln.llm)") == "kiln int4:a8"
    table = lc.format_table(res)
    line = next(l for l in table.splitlines() if "| kiln int4:a8 (C) |" in l)
    assert "| 1.25x (q4_0) | 2.50x |" in line   # against q4_0, and against kiln fp32 (C), not generate()'s
    line = next(l for l in table.splitlines() if "| kiln int4:a8 (kiln.llm) |" in l)
    assert "| 1.20x (q4_0) | 3.00x |" in line   # and kiln.llm's against kiln fp32 (kiln.llm)
    assert "`kiln generate`" in table and "kiln.llm.compile" in table


def test_unavailable_rows_say_why(lc, tmp_path, monkeypatch):
    """llama.cpp cannot be built and kiln is skipped: every row gives a
    reason, and the run writes its JSON rather than raising."""
    monkeypatch.setattr(lc, "build_llamacpp", lambda cache, log: (_ for _ in ()).throw(
        lc.Unavailable("no cmake on PATH")))
    import models   # bench/models.py: a stand-in for gen_llama, nothing runs it
    stub = types.SimpleNamespace(config=types.SimpleNamespace(vocab_size=512))
    monkeypatch.setattr(models, "build_gen_llama", lambda: (stub, None))

    class Args:
        cache, threads, rounds, out = str(tmp_path), "2", 1, str(tmp_path / "r.json")
        no_kiln, no_llamacpp = True, False
    res = lc.run(Args, log=lambda s: None)
    saved = json.loads((tmp_path / "r.json").read_text())
    assert [r["system"] for r in saved["rows"]][:3] == ["llama.cpp f32", "llama.cpp q8_0", "llama.cpp q4_0"]
    assert all(r.get("na") for r in res["rows"])
    assert "no cmake on PATH" in res["rows"][0]["na"]
    assert "skipped (--no-kiln)" in res["rows"][-1]["na"]
    assert "no cmake on PATH" in lc.format_table(res)
