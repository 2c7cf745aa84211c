"""kiln.trace of a model that updates its inputs in place: a decoder step
whose KV cache is passed in (kiln.llm.StaticCacheStep: transformers'
StaticCache layers over the caller's tensors, written with index_copy_), the
way an exported LLM step is run outside generate(). torch.export turns the
writes into user-input mutations; kiln compiles the whole step as one graph whose new cache values
are written straight into the caller's tensors (nothing else reads the old
values), not returned and copied back. Prefill (many tokens) and decode
(one) run from one artifact: the token count is symbolic from 1.
"""

import os
import pathlib
import subprocess

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import kiln
from kiln.module import KilnModule

CAP = 48
REPO = pathlib.Path(__file__).resolve().parents[2]


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, head_dim=16)
    return LlamaForCausalLM(cfg).eval()


def _trace_step():
    """kiln.llm.StaticCacheStep (transformers' StaticCache layers over the
    caller's tensors) over a tiny Llama, traced with the token count
    symbolic from 1, without fallback."""
    step = kiln.llm.StaticCacheStep(_tiny_llama(), CAP)
    ids = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(3))
    return step, step.trace(ids, fallback=False), ids


def _caches():
    return [torch.zeros(1, 2, CAP, 16) for _ in range(4)]


def _generate(f, ids, kv, n):
    """Greedy: the prompt, then n - 1 single tokens; the tokens and logits."""
    tokens, logits, past, tok = [], [], 0, ids
    with torch.no_grad():
        for _ in range(n):
            out = f(tok, torch.tensor(past), kv)
            logits.append(out)
            past += tok.shape[1]
            tok = out.argmax(-1, keepdim=True)
            tokens.append(int(tok))
    return tokens, logits


@pytest.fixture(scope="module")
def traced():
    return _trace_step()


def test_step_is_one_graph_writing_the_cache_in_place(traced, monkeypatch):
    step, compiled, ids = traced
    assert isinstance(compiled, KilnModule)
    assert compiled._writes == [(2 + i, True) for i in range(4)]  # the four cache inputs, in place
    given = []
    run_flat = KilnModule.run_flat

    def spy(self, args, given_outputs=None):
        given.append({k: t.data_ptr() for k, t in (given_outputs or {}).items()})
        return run_flat(self, args, given_outputs)

    monkeypatch.setattr(KilnModule, "run_flat", spy)
    want_kv, got_kv = _caches(), _caches()
    ptrs = [t.data_ptr() for t in got_kv]
    want_tokens, want_logits = _generate(step, ids, want_kv, 8)
    got_tokens, got_logits = _generate(compiled, ids, got_kv, 8)
    assert got_tokens == want_tokens
    for g, w in zip(got_logits, want_logits):
        assert_close(g, w, rtol=1e-4, atol=1e-5)  # fp32: another summation order than eager's
    for g, w in zip(got_kv, want_kv):
        assert_close(g, w, rtol=1e-4, atol=1e-5)
    # The rows past the 5 + 7 written positions are still the zeros they started as.
    assert torch.count_nonzero(got_kv[0][:, :, 12:]) == 0 and torch.count_nonzero(got_kv[0][:, :, :12]) > 0
    # Every call gave kiln the caller's cache tensors as the new values' memory.
    assert len(given) == 8 and all(sorted(g.values()) == sorted(ptrs) for g in given)


def test_saved_step_keeps_writing_in_place(traced, tmp_path):
    step, compiled, ids = traced
    path = os.path.join(tmp_path, "step.kiln")
    kiln.save(compiled, path)
    loaded = kiln.load(path)
    assert loaded._writes == compiled._writes
    want_kv, got_kv = _caches(), _caches()
    assert _generate(loaded, ids, got_kv, 6)[0] == _generate(step, ids, want_kv, 6)[0]
    assert_close(got_kv[3], want_kv[3], rtol=1e-4, atol=1e-5)


def test_torchscript_wrapper_refuses_a_writing_module(traced, tmp_path):
    with pytest.raises(kiln.KilnError, match="updates its inputs in place"):
        torch.jit.save(traced[1], os.path.join(tmp_path, "step.pt"))


class ReadsOldValue(torch.nn.Module):
    """The input's old value is read after the write would land: written
    in place it would be wrong, so kiln copies the new value in after."""

    def forward(self, x, y):
        old = x * 3.0
        x.add_(y)
        return old + x


def test_a_write_read_around_is_copied_after_the_call():
    x, y = torch.randn(6), torch.randn(6)
    compiled = kiln.trace(ReadsOldValue(), (x.clone(), y), fallback=False)
    assert compiled._writes == [(0, False)]
    got_x, want_x = x.clone(), x.clone()
    assert_close(compiled(got_x, y), ReadsOldValue()(want_x, y), rtol=0, atol=0)
    assert_close(got_x, want_x, rtol=0, atol=0)


class Scale(torch.nn.Module):
    def forward(self, x):
        x.mul_(2.0)
        return x.sum(0)


def test_a_strided_input_is_written_back_through_its_view():
    """A non-contiguous tensor cannot be the output's memory: kiln runs on a
    contiguous copy and copies the new value into the view after."""
    compiled = kiln.trace(Scale(), (torch.randn(4, 3),), fallback=False)
    assert compiled._writes == [(0, True)]
    base = torch.randn(3, 4)
    got, want = base.clone(), base.clone()
    assert_close(compiled(got.t()), Scale()(want.t()), rtol=0, atol=0)
    assert_close(got, want, rtol=0, atol=0)


class CountsCalls(torch.nn.Module):
    """A buffer update (the partitioned path) and a .to() that converts
    nothing (export's metadata assert on an intermediate value)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        h = (x * 2.0).to(torch.float32)
        return h.cumsum(1) + self.calls


def test_buffer_updates_run_whole_in_kiln_and_at_size_one():
    """The partitioned path (state kiln keeps in the module) runs nothing in
    eager for export's metadata asserts, and honours the export's size
    range: Dim(min=1) runs at 1."""
    seq = torch.export.Dim("seq", min=1, max=16)
    model, ref = CountsCalls(), CountsCalls()
    compiled = kiln.trace(model, (torch.randn(2, 5),), dynamic_shapes=({1: seq},))
    assert compiled.unsupported == []
    for n in (1, 7, 1):
        x = torch.randn(2, n)
        assert_close(compiled(x), ref(x), rtol=1e-6, atol=1e-6)
    assert float(model.calls) == 3


def test_explain_names_the_inputs_written(traced):
    first = kiln.explain(traced[1]).splitlines()[0]
    assert first == ("writes its inputs: kv_0 (in place), kv_1 (in place), kv_2 (in place), kv_3 (in place); "
                     "outputs 0..3 are their new values"), first


KILN_BIN = REPO / "build" / "src" / "tools" / "kiln"
needs_cli = pytest.mark.skipif(not KILN_BIN.exists(), reason=f"kiln CLI not built at {KILN_BIN} (run `make build`)")


def _kiln_generate(path, *args):
    return subprocess.run([str(KILN_BIN), "generate", str(path), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


@needs_cli
def test_kiln_generate_runs_the_saved_step_from_c(traced, tmp_path):
    """`kiln generate` (the public C API alone) gives the tokens the Python
    loop gives, writing the cache in place (the section says so); the
    timing goes to stderr."""
    step, compiled, ids = traced
    path = tmp_path / "step.kiln"
    kiln.save(compiled, path)
    want = _generate(compiled, ids, _caches(), 12)[0]
    prompt = ",".join(str(t) for t in ids[0].tolist())
    p = _kiln_generate(path, "--prompt", prompt, "--max-new-tokens", 12, "--threads", 1)
    assert p.returncode == 0, p.stderr
    assert [int(t) for t in p.stdout.split()] == want
    assert "prompt 5 tokens" in p.stderr and "12 new tokens (stopped by --max-new-tokens)" in p.stderr
    # The cache holds CAP tokens: generation stops there.
    p = _kiln_generate(path, "--prompt", prompt, "--max-new-tokens", 1000)
    assert p.returncode == 0 and len(p.stdout.split()) == CAP - 5 + 1, p.stderr
    assert "stopped by the cache's length" in p.stderr
    # --eos: the first token generated stops it.
    p = _kiln_generate(path, "--prompt", prompt, "--eos", want[0])
    assert p.returncode == 0 and p.stdout.split() == [str(want[0])], p.stderr
    # Several: any of them stops it (a generation config's list).
    p = _kiln_generate(path, "--prompt", prompt, "--eos", f"100000,{want[2]}")
    assert p.returncode == 0 and [int(t) for t in p.stdout.split()] == want[:want.index(want[2]) + 1], p.stderr


@needs_cli
def test_kiln_generate_says_what_is_wrong(traced, tmp_path):
    step, compiled, ids = traced
    path = tmp_path / "step.kiln"
    kiln.save(compiled, path)
    p = _kiln_generate(path, "--prompt", "1,x,3")
    assert p.returncode == 2 and "--prompt wants token ids like 5,17,9, got 1,x,3" in p.stderr
    p = _kiln_generate(path)
    assert p.returncode == 2 and "no --prompt or --text given" in p.stderr
    p = _kiln_generate(path, "--prompt", ",".join(["1"] * (CAP + 1)))
    assert p.returncode == 1 and f"the prompt has {CAP + 1} tokens; the cache holds {CAP}" in p.stderr
    p = _kiln_generate(path, "--prompt", "3,999")  # vocabulary 256
    assert p.returncode == 1 and "out of range" in p.stderr, p.stderr
    # Models that are not generation steps.
    mlp = tmp_path / "mlp.kiln"
    kiln.save(kiln.trace(torch.nn.Linear(4, 2).eval(), (torch.randn(3, 4),)), mlp)
    p = _kiln_generate(mlp, "--prompt", "1")
    assert p.returncode == 1 and "takes 1 input(s); a generation step takes the new tokens" in p.stderr, p.stderr
    two = tmp_path / "two.kiln"
    kiln.save(kiln.trace(ReadsOldValue(), (torch.randn(3, 4), torch.randn(3, 4))), two)
    p = _kiln_generate(two, "--prompt", "1")
    assert p.returncode == 1 and "should be the new tokens, int64 [B, N] (B rows, N symbolic or 1), got float32 [3, 4]" \
        in p.stderr, p.stderr


def _eager_logits(step, tokens):
    """The eager model's logits for every position of `tokens` (1-D)."""
    with torch.no_grad():
        return step.model(torch.tensor([tokens])).logits[0].double()


@needs_cli
def test_kiln_generate_samples_as_asked(traced, tmp_path):
    """--temperature draws (seeded: one seed, one answer; another seed,
    another); top-k 1 is greedy whatever the temperature; every drawn token
    is one that top-k keeps by the eager model's own logits at its position
    (checked with a margin for kiln's rounding); the stderr line says how
    the tokens were chosen."""
    step, compiled, ids = traced
    path = tmp_path / "step.kiln"
    kiln.save(compiled, path)
    prompt = ids[0].tolist()
    text = ",".join(map(str, prompt))
    greedy = _generate(compiled, ids, _caches(), 16)[0]

    def run(*args):
        p = _kiln_generate(path, "--prompt", text, "--max-new-tokens", 16, *args)
        assert p.returncode == 0, p.stderr
        return [int(t) for t in p.stdout.split()], p.stderr

    assert run("--temperature", 5, "--top-k", 1, "--seed", 1)[0] == greedy
    a, err = run("--temperature", 1.5, "--top-k", 5, "--seed", 3)
    assert "16 new tokens" in err and "sampled at temperature 1.5, top-k 5, seed 3" in err, err
    assert run("--temperature", 1.5, "--top-k", 5, "--seed", 3)[0] == a
    assert run("--temperature", 1.5, "--top-k", 5, "--seed", 4)[0] != a
    assert a != greedy  # at 1.5 over 5 tokens, 16 greedy draws in a row would be a bug
    logits = _eager_logits(step, prompt + a)
    for i, tok in enumerate(a):
        row = logits[len(prompt) - 1 + i]
        assert row[tok] >= row.topk(5).values[-1] - 1e-3, f"token {i} ({tok}) is not in eager's top 5"
    # top-p 0.5 at temperature 1: each token within the nucleus of eager's distribution.
    b, err = run("--temperature", 1, "--top-p", 0.5, "--seed", 9, "--repetition-penalty", 1.0)
    assert "top-p 0.5, seed 9" in err
    logits = _eager_logits(step, prompt + b)
    for i, tok in enumerate(b):
        p = torch.softmax(logits[len(prompt) - 1 + i], 0)
        assert p[p > p[tok] + 1e-4].sum() < 0.5 + 1e-4, f"token {i} ({tok}) is outside eager's nucleus"
    # Without --seed the seed is printed, and repeats the run.
    c, err = run("--temperature", 1)
    seed = err.split("seed ")[1].split(";")[0].split(",")[0].strip()
    assert run("--temperature", 1, "--seed", seed)[0] == c


@needs_cli
def test_kiln_generate_repetition_penalty_and_prompt_file(traced, tmp_path):
    """--repetition-penalty as generate() applies it (greedy: the same tokens
    as transformers' own processor on eager logits); --prompt-file reads ids
    separated by commas or white space, '-' from stdin."""
    from transformers import RepetitionPenaltyLogitsProcessor
    step, compiled, ids = traced
    path = tmp_path / "step.kiln"
    kiln.save(compiled, path)
    prompt = ids[0].tolist()
    p = _kiln_generate(path, "--prompt", ",".join(map(str, prompt)), "--max-new-tokens", 12,
                       "--repetition-penalty", 1.8)
    assert p.returncode == 0 and "greedy, repetition penalty 1.8" in p.stderr, p.stderr
    got = [int(t) for t in p.stdout.split()]
    seq, proc = list(prompt), RepetitionPenaltyLogitsProcessor(1.8)
    for tok in got:  # each token the processed eager logits' argmax (or within rounding of it)
        scores = proc(torch.tensor([seq]), _eager_logits(step, seq)[-1:].float())[0]
        assert scores[tok] >= scores.max() - 1e-4, f"{tok} is not the penalised argmax"
        seq.append(tok)
    assert got != _generate(compiled, ids, _caches(), 12)[0]  # the penalty changed something
    f = tmp_path / "prompt.txt"
    f.write_text("\n " + " ".join(map(str, prompt[:2])) + ",\t" + ", ".join(map(str, prompt[2:])) + "\n\n")
    q = _kiln_generate(path, "--prompt-file", f, "--max-new-tokens", 12, "--repetition-penalty", 1.8)
    assert q.returncode == 0 and q.stdout == p.stdout, q.stderr
    r = subprocess.run([str(KILN_BIN), "generate", str(path), "--prompt-file", "-", "--max-new-tokens", "12",
                        "--repetition-penalty", "1.8"], input=f.read_text(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout == p.stdout, r.stderr


@needs_cli
def test_kiln_generate_sampling_options_say_what_is_wrong(traced, tmp_path):
    path = tmp_path / "step.kiln"
    kiln.save(traced[1], path)
    for args, code, msg in [
        (("--prompt", "1,2", "--top-k", 5), 2, "sampling options need --temperature above 0 (0 is greedy): --top-k"),
        (("--prompt", "1,2", "--seed", 5), 2, "sampling options need --temperature above 0 (0 is greedy): --seed"),
        (("--prompt", "1,2", "--temperature", 1, "--top-p", 0), 2, "--top-p wants a number in (0, 1], got 0"),
        (("--prompt", "1,2", "--temperature", 1, "--top-p", 1.5), 2, "--top-p wants a number in (0, 1], got 1.5"),
        (("--prompt", "1,2", "--temperature", -1), 2, "--temperature wants a number from 0 (greedy), got -1"),
        (("--prompt", "1,2", "--temperature", "nan"), 2, "--temperature wants a number from 0 (greedy), got nan"),
        (("--prompt", "1,2", "--repetition-penalty", 0), 2, "--repetition-penalty wants a positive number"),
        (("--prompt", "1,2", "--prompt-file", path), 2, "give --prompt or --prompt-file, not both"),
        (("--prompt-file", tmp_path / "none.txt"), 1, "cannot open --prompt-file"),
        (("--prompt", " , "), 2, "--prompt wants token ids like 5,17,9, got  , "),
    ]:
        p = _kiln_generate(path, *args)
        assert p.returncode == code and msg in p.stderr, (args, p.stderr)
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 x")
    p = _kiln_generate(path, "--prompt-file", bad)
    assert p.returncode == 2 and "--prompt-file wants a prompt a line, token ids separated by commas or spaces:" \
        in p.stderr
    lines = tmp_path / "two.txt"
    lines.write_text("1 2\n3 4\n")
    p = _kiln_generate(path, "--prompt-file", lines)
    assert p.returncode == 1 and "2 prompts for a step of batch 1 (kiln.llm.StaticCacheStep(model, max_length, " \
        "batch=2) makes one for them)" in p.stderr, p.stderr


class CopiedCacheStep(torch.nn.Module):
    """A toy generation step (kiln generate's signature) whose cache is read
    beside its write, so the new value cannot go in place: kiln generate
    gives that output a second buffer and copies it back after each call."""

    def __init__(self, vocab=32, dim=8):
        super().__init__()
        torch.manual_seed(4)
        self.emb, self.head = torch.nn.Embedding(vocab, dim), torch.nn.Linear(dim, vocab)

    def forward(self, ids, past, kv):
        pos = torch.arange(ids.shape[1]) + past
        before = kv[0].sum(1)  # reads the old cache, not on the new value's path
        kv[0].index_copy_(1, pos, self.emb(ids))
        return self.head(kv[0].mean(1) + 0.1 * before)


@needs_cli
def test_kiln_generate_copies_back_an_update_not_in_place(tmp_path):
    step = CopiedCacheStep().eval()
    ids = torch.tensor([[3, 1, 4]])
    t = torch.export.Dim("t", min=1, max=16)
    compiled = kiln.trace(step, (ids, torch.tensor(0), [torch.zeros(1, 16, 8)]),
                          dynamic_shapes=({1: t}, None, [None]), fallback=False)
    assert compiled._writes == [(2, False)]
    want, kv, past, tok = [], [torch.zeros(1, 16, 8)], 0, ids
    with torch.no_grad():
        for _ in range(8):
            tok = step(tok, torch.tensor(past), kv).argmax(-1, keepdim=True)
            past += 3 if past == 0 else 1
            want.append(int(tok))
    path = tmp_path / "copied.kiln"
    kiln.save(compiled, path)
    info = subprocess.run([str(KILN_BIN), "info", str(path)], capture_output=True, text=True, timeout=300)
    assert "updates input 2 ('kv_0') (copied in after a run)" in info.stdout, info.stdout
    p = _kiln_generate(path, "--prompt", "3,1,4", "--max-new-tokens", 8)
    assert p.returncode == 0 and [int(x) for x in p.stdout.split()] == want, p.stderr
    assert len(set(want)) > 1  # the cache's contents steer the tokens


@needs_cli
def test_kiln_cli_runs_a_step_with_the_cache_in_place(traced, tmp_path):
    """`kiln info` says which outputs update which inputs; `kiln run` (and
    bench, profile) give such an output its input's memory, as a generation
    loop does, so they time the step that loop runs (no cache copy) and the
    output is the new cache: the Python step's, for the same inputs."""
    step, compiled, ids = traced
    path = tmp_path / "step.kiln"
    kiln.save(compiled, path)
    info = subprocess.run([str(KILN_BIN), "info", str(path)], capture_output=True, text=True, timeout=300)
    assert info.returncode == 0, info.stderr
    assert "updates input 2 ('kv_0') in place" in info.stdout, info.stdout
    assert "updates input 5 ('kv_3') in place" in info.stdout
    g = torch.Generator().manual_seed(5)
    kv = [torch.randn(1, 2, CAP, 16, generator=g) for _ in range(4)]
    inputs = [ids, torch.tensor(7), *kv]
    args = []
    for i, t in enumerate(inputs):
        f = tmp_path / f"in{i}.bin"
        f.write_bytes(t.contiguous().numpy().tobytes())
        args += ["--input", f"{i}={f}"]
    out_dir = tmp_path / "out"
    p = subprocess.run([str(KILN_BIN), "run", str(path), *args, "--shape", "input_ids=1x5",
                        "--output-dir", str(out_dir)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    mine = [t.clone() for t in kv]
    with torch.no_grad():
        logits = compiled(ids, torch.tensor(7), mine)
    for k, want in enumerate([*mine, logits]):
        got = torch.from_numpy(np.fromfile(out_dir / f"output{k}.bin", dtype=np.float32)).reshape(want.shape)
        # fp32 sums split over another thread count (the CLI's default, not
        # this process's) may round differently in the last bit.
        assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"output {k}")
    assert not torch.equal(mine[0], kv[0])  # the step did write the cache
    for cmd in ("bench", "profile"):
        p = subprocess.run([str(KILN_BIN), cmd, str(path), "--shape", "input_ids=1x1", "--runs", "3",
                            "--threads", "1"], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr


@needs_cli
def test_kiln_cli_refuses_a_damaged_writes_section(traced, tmp_path):
    data = bytearray(traced[1].to_bytes())
    at = data.find(b"KILNWRIT")
    data[at + 16 + 4] = 1  # output 0 now updates input 1 (a scalar)
    path = tmp_path / "bad.kiln"
    path.write_bytes(bytes(data))
    for cmd in ("info", "bench"):
        p = subprocess.run([str(KILN_BIN), cmd, str(path)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 1 and "corrupt artifact" in p.stderr and "output 0 is not of input 1's" in p.stderr, \
            p.stderr


def test_a_damaged_writes_section_is_refused(traced, tmp_path):
    data = bytearray(traced[1].to_bytes())
    at = data.find(b"KILNWRIT")
    assert at > 0
    data[at + 16 + 4] = 1  # output 0 now updates input 1 (a scalar)
    with pytest.raises(kiln.KilnError, match="writes section: output 0 is not of input 1's dtype and shape"):
        KilnModule.from_bytes(bytes(data))


def _tiny(kind):
    import transformers as T
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256)
    config, model = {
        "qwen2": (lambda: T.Qwen2Config(**small), T.Qwen2ForCausalLM),
        "gemma": (lambda: T.GemmaConfig(**small, head_dim=16), T.GemmaForCausalLM),
        "gpt2": (lambda: T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=256), T.GPT2LMHeadModel),
        "gpt_neox": (lambda: T.GPTNeoXConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                             num_attention_heads=4, vocab_size=256), T.GPTNeoXForCausalLM),
    }[kind]
    torch.manual_seed(0)
    return model(config()).eval()


@pytest.mark.parametrize("kind", ["qwen2", "gemma", "gpt2", "gpt_neox"])
def test_other_architectures_step_as_eager_does(kind):
    """Beyond Llama: grouped and full multi-head attention, learned and
    rotary positions, a model without num_key_value_heads in its config."""
    step = kiln.llm.StaticCacheStep(_tiny(kind), 24)
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(1))
    compiled = step.trace(ids, fallback=False)
    assert len(compiled._writes) == 4 and all(in_place for _, in_place in compiled._writes)
    assert _generate(compiled, ids, step.empty_cache(), 10)[0] == _generate(step, ids, step.empty_cache(), 10)[0]


def _left_padded(prompts):
    width = max(map(len, prompts))
    pad = torch.tensor([width - len(p) for p in prompts])
    return torch.tensor([[0] * (width - len(p)) + p for p in prompts]), torch.arange(width)[None] >= pad[:, None]


@pytest.fixture(scope="module")
def batched():
    """A batch-3 step of the tiny Llama, with three prompts of 5, 3 and 7
    tokens, and generate()'s greedy tokens for them, left-padded."""
    model = _tiny_llama()
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(1, 256, (n,), generator=g).tolist() for n in (5, 3, 7)]
    ids, mask = _left_padded(prompts)
    with torch.no_grad():
        want = model.generate(ids, attention_mask=mask.long(), do_sample=False, max_new_tokens=10,
                              pad_token_id=0)[:, ids.shape[1]:]
    step = kiln.llm.StaticCacheStep(model, CAP, batch=3)
    return step, step.trace(ids, fallback=False), prompts, ids, want


def test_a_batch_of_prompts_of_different_lengths_steps_as_generate_does(batched):
    """batch=3: the rows' left padding is an input; the step masks the slots
    before each prompt and counts positions from its first token, as
    generate() does for a left-padded batch: the same greedy tokens. The
    row count is symbolic: the compiled step runs 3 rows, and 1."""
    step, compiled, prompts, ids, want = batched
    assert all(in_place for _, in_place in compiled._writes), compiled._writes
    pad = torch.tensor([ids.shape[1] - len(p) for p in prompts])
    for f, rows in ((step, 3), (compiled, 3), (compiled, 1)):
        kv, past, tok, got = step.empty_cache(rows), 0, ids[:rows], []
        with torch.no_grad():
            for _ in range(10):
                logits = f(tok, torch.tensor(past), kv, pad[:rows])
                past += tok.shape[1]
                tok = logits.argmax(-1, keepdim=True)
                got.append(tok)
        if rows == 3:
            assert torch.equal(torch.cat(got, 1), want)
        else:  # row 0 alone, still padded as in the batch: the batch's tokens for it
            assert torch.equal(torch.cat(got, 1), want[:1])


def test_a_batch_of_two_is_one_symbol_written_in_place():
    """batch=2 traces 1..3 rows: at the range's maximum, torch.export would
    give each cache its own symbol for the rows, and kiln would write them
    out of place."""
    step = kiln.llm.StaticCacheStep(_tiny_llama(), CAP, batch=2)
    compiled = step.trace(torch.tensor([[5, 6, 7]]), fallback=False)
    assert all(in_place for _, in_place in compiled._writes), compiled._writes
    assert "(rows, 2, 48, 16)" in kiln.explain(compiled)


@needs_cli
def test_kiln_generate_runs_a_batch_from_c(batched, tmp_path):
    """kiln generate with a step of up to 3 rows: a --prompt per row (or a
    line per row of --prompt-file), a line of tokens per row, generate()'s;
    fewer prompts make a smaller batch; --eos ends a row, the run when all
    have; a step traced at a fixed batch of 3 runs its rows too."""
    step, compiled, prompts, ids, want = batched
    path = tmp_path / "batch.kiln"
    kiln.save(compiled, path)
    args = [a for p in prompts for a in ("--prompt", ",".join(map(str, p)))]
    p = _kiln_generate(path, *args, "--max-new-tokens", 10)
    assert p.returncode == 0, p.stderr
    assert [[int(t) for t in line.split()] for line in p.stdout.splitlines()] == want.tolist()
    assert "3 prompts (5, 3, 7 tokens) in one batch of 3" in p.stderr and "tokens/s over 3 prompts" in p.stderr
    # The row count is symbolic (1..3): two prompts make a batch of two, one of one.
    f = tmp_path / "prompts.txt"
    f.write_text("\n".join(" ".join(map(str, q)) for q in prompts[:2]) + "\n")
    q = _kiln_generate(path, "--prompt-file", f, "--max-new-tokens", 10)
    assert q.returncode == 0 and q.stdout.splitlines() == p.stdout.splitlines()[:2], q.stderr
    assert "in one batch of 2" in q.stderr
    q = _kiln_generate(path, "--prompt", ",".join(map(str, prompts[2])), "--max-new-tokens", 10)
    assert q.returncode == 0 and q.stdout.split() == p.stdout.splitlines()[2].split(), q.stderr
    q = _kiln_generate(path, *args, "--prompt", "1,2", "--max-new-tokens", 10)
    assert q.returncode == 1 and "4 prompts for a step of 1..3 rows" in q.stderr, q.stderr
    # --eos: row 1 stops after its first token; the others run on.
    eos = int(want[1, 0])
    r = _kiln_generate(path, *args, "--max-new-tokens", 10, "--eos", eos)
    rows = [[int(t) for t in line.split()] for line in r.stdout.splitlines()]
    assert r.returncode == 0 and rows[1] == [eos], r.stderr
    for row, w in zip(rows, want.tolist()):
        assert row == (w[:w.index(eos) + 1] if eos in w else w)
    # A step traced at one token a call takes the prompts a column a call.
    pad = torch.tensor([ids.shape[1] - len(q) for q in prompts])
    one = tmp_path / "one.kiln"
    kiln.save(kiln.trace(step, (ids[:, :1], torch.tensor(0), step.empty_cache(), pad), fallback=False), one)
    o = _kiln_generate(one, *args, "--max-new-tokens", 10)
    assert o.returncode == 0 and o.stdout == p.stdout, o.stderr


def _windowed(kind, window):
    """A tiny model of `kind` whose sliding layers see `window` tokens (None:
    the same model with full attention everywhere)."""
    import transformers as T
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256)
    full = ["full_attention"] * 2
    config, model = {
        "mistral": (lambda: T.MistralConfig(**small, sliding_window=window), T.MistralForCausalLM),
        "phi3": (lambda: T.Phi3Config(**small, sliding_window=window, pad_token_id=0), T.Phi3ForCausalLM),
        "qwen2": (lambda: T.Qwen2Config(**small, use_sliding_window=window is not None, sliding_window=window or 4,
                                        max_window_layers=1), T.Qwen2ForCausalLM),
        "gemma2": (lambda: T.Gemma2Config(**small, head_dim=16, sliding_window=window or 4,
                                          **({} if window else {"layer_types": full})), T.Gemma2ForCausalLM),
        "gemma3": (lambda: T.Gemma3TextConfig(**small, head_dim=16, sliding_window=window or 4,
                                              **({} if window else {"layer_types": full})), T.Gemma3ForCausalLM),
    }[kind]
    torch.manual_seed(0)
    return model(config()).eval()


@pytest.mark.parametrize("kind", ["mistral", "phi3", "qwen2", "gemma2", "gemma3"])
def test_sliding_window_models_step_as_generate_does(kind):
    """Sliding-window layers (window 4, the prompt 6 tokens, 12 more): the
    compiled step keeps every position and lets the model's own mask limit
    attention to the window. Its tokens are generate()'s (whose cache drops
    what leaves the window), its logits the model's over the whole sequence,
    and those differ from full attention's: the window mattered."""
    _steps_as_generate_does(_windowed(kind, 4), _windowed(kind, None))


def _steps_as_generate_does(model, unlimited):
    """The traced step of `model` (a prompt of 6 tokens, 12 more): its tokens
    are generate()'s, its logits the model's over the whole sequence, and
    those differ from `unlimited`'s (the same weights, attention not limited
    to a window or chunk): the limit mattered."""
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, do_sample=False, max_new_tokens=12, pad_token_id=0)[0, 6:].tolist()
    step = kiln.llm.StaticCacheStep(model, 24)
    tokens, logits = _generate(step.trace(ids, fallback=False), ids, step.empty_cache(), 12)
    assert tokens == want
    seq = torch.tensor([ids[0].tolist() + tokens[:-1]])
    unlimited.load_state_dict(model.state_dict())
    with torch.no_grad():
        ref, ref_unlimited = model(seq).logits[0, 5:], unlimited(seq).logits[0, 5:]
    assert_close(torch.cat(logits), ref, atol=2e-5, rtol=1e-4)
    assert (ref - ref_unlimited).abs().max() > 1e-2


def test_other_layer_kinds_are_refused_by_name():
    import transformers as T
    cfg = T.Lfm2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=256, layer_types=["conv", "full_attention"])
    step = kiln.llm.StaticCacheStep(T.Lfm2ForCausalLM(cfg).eval(), 24)
    with pytest.raises(kiln.KilnError, match=r"layers of kinds other than full or sliding-window attention "
                                             r"\(\['conv'\]\)"):
        step(torch.tensor([[1, 2, 3]]), torch.tensor(0), step.empty_cache())


def _llama4(chunk, moe_layers=()):
    """Llama 4: three chunked-attention layers with rotary positions written
    as complex numbers, a full NoPE one; dense but for moe_layers."""
    import transformers as T
    cfg = T.Llama4TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, intermediate_size_mlp=128,
                             num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                             num_local_experts=4, moe_layers=list(moe_layers), max_position_embeddings=256,
                             attention_chunk_size=chunk, pad_token_id=0)
    torch.manual_seed(0)
    return T.Llama4ForCausalLM(cfg).eval()


def test_chunked_attention_steps_as_generate_does():
    """Llama 4's chunked layers (chunks of 4, 6 prompt tokens and 12 more:
    five chunks): as a sliding window, the step keeps every position and the
    model's chunk mask limits attention. generate()'s tokens, the model's
    logits over the whole sequence, and those differ from one chunk's: the
    chunks mattered. The complex rotary embedding is rewritten
    (kiln/complex_ops.py). Layers 1 and 3 are MoE: torch.export cannot prove
    their guard tokens*min(64, 64*tokens) == 64*tokens (the experts' output
    reshaped) over tokens in 1..24 and refuses the Dim; kiln checks it at
    each of the 24 sizes and exports without it
    (capture._export_past_unproven_guards). The step traces whole."""
    _steps_as_generate_does(_llama4(4, [1, 3]), _llama4(64, [1, 3]))


def test_latent_attention_caches_what_the_model_writes():
    """DeepSeek V2's multi-head latent attention caches its compressed
    latent (one head of kv_lora_rank) and the rotary part of the keys (one
    head of qk_rope_head_dim), not head_dim-wide keys and values: the step
    lays its cache out as one step of the model writes it, and its rotary
    embedding is complex (rewritten). Tokens as the uncompiled step's."""
    import transformers as T
    cfg = T.DeepseekV2Config(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32,
                             kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=8,
                             n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
                             first_k_dense_replace=1, pad_token_id=0)
    torch.manual_seed(0)
    step = kiln.llm.StaticCacheStep(T.DeepseekV2ForCausalLM(cfg).eval(), 24)
    assert step.cache_layout() == [(1, 16), (1, 8)] * 2
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(1))
    compiled = step.trace(ids, fallback=False)
    tokens, logits = _generate(compiled, ids, step.empty_cache(), 10)
    want, ref = _generate(step, ids, step.empty_cache(), 10)
    assert tokens == want
    assert_close(torch.cat(logits), torch.cat(ref), atol=2e-5, rtol=1e-4)


def test_per_layer_head_dims_step_as_generate_does():
    """Gemma 4: sliding layers (window 4) and a full layer whose keys and
    values are twice as wide (its own head_dim), per-layer token inputs: the
    cache is laid out per layer as the model writes it, and the step's
    tokens are generate()'s."""
    import transformers as T
    cfg = T.Gemma4TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             layer_types=["sliding_attention", "full_attention"], num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, max_position_embeddings=256, sliding_window=4,
                             vocab_size_per_layer_input=256, hidden_size_per_layer_input=16,
                             per_layer_config={"01": {"head_dim": 32}}, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(cfg).eval()
    step = kiln.llm.StaticCacheStep(model, 24)
    assert step.cache_layout() == [(2, 16)] * 2 + [(2, 32)] * 2
    ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, do_sample=False, max_new_tokens=12, pad_token_id=0)[0, 6:].tolist()
    tokens, _ = _generate(step.trace(ids, fallback=False), ids, step.empty_cache(), 12)
    assert tokens == want
