"""The C tokenizer `kiln generate --text` uses (src/runtime/kiln_tokenizer.c,
stored by kiln.save(..., tokenizer=) through python/kiln/tokenizer.py)
against Hugging Face's tokenizers library, which is the reference: the same
ids for the same text, and the same text back.

No tokenizer can be downloaded here, so each family is trained in the test
(tokenizers' BpeTrainer on a fixed corpus) in the configuration its models
ship: GPT-2 (ByteLevel's own pattern, with and without add_prefix_space),
Llama 3 (its Split pattern, ignore_merges, a BOS template), Qwen2 (its
1-digit pattern and NFC normalizer: text NFC would change is refused, the
rest encoded as Hugging Face does), Qwen3.5 (marks join words, NFC),
o200k (GPT-OSS: words split at case changes, contractions after them) and
Tekken (Mistral Nemo: o200k's words, 1-digit numbers), and SentencePiece-style BPE as Llama 2 / TinyLlama
(Prepend + Replace normalizer, <0xNN> byte fallback, <unk> fused, BOS), as
newer conversions write it (Metaspace, prepend_scheme "first") and as Gemma
(Replace alone, nothing prepended). The
texts: hand-picked edges (contractions in both cases and U+017F, which
folds to s, case changes inside words with letters of every case class
and combining marks, runs of spaces
before words and at the end, CR/LF runs, digits runs past 3, added tokens
inside words, non-Latin scripts, emoji, characters outside the alphabet)
and 40 random mixes per tokenizer, fixed seeds."""

import json
import pathlib
import random
import re
import unicodedata
import subprocess

import pytest
import torch

import kiln
from kiln.errors import KilnError

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
KILN_BIN = REPO / "build" / "src" / "tools" / "kiln"
needs_cli = pytest.mark.skipif(not KILN_BIN.exists(), reason=f"kiln CLI not built at {KILN_BIN}")

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k_base (GPT-OSS), and Mistral's Tekken as its tokenizer.json writes it
O200K = "|".join([r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                  r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
CORPUS_LINES = [
    "Hello world! It's 2026; we're testing 12345 tokens, and THEY'LL see.",
    "The quick brown fox jumps over the lazy dog. Don't stop: 3.14159 is pi.",
    "Привет, мир! Это тест токенизатора.", "你好，世界。这是一个测试。", "مرحبا بالعالم",
    "emoji 🙂🚀 and tabs\tand\nnewlines\r\n  double  spaces", "naïve café résumé Ωmega über",
    "def f(x):\n    return x * 2  # code\n", "    indented lines\n\n\nblank lines", "a-b_c.d/e\\f|g",
    "Numbers: 7 42 913 2026 31415 271828 1000000 65536 202 691 3",
    "camelCase XMLHttpRequest HelloWORLD नमस्ते दुनिया paths/to/files",
]
EDGES = ["Hello world! It's 2026; we're testing 12345 tokens.", "  leading spaces", "trailing   ", "a\n\nb\r\n c",
         "Привет, мир!", "你好，世界。", "emoji 🙂🚀!", "I'LL SAY 'Ve 'd 'M", "x  y   z\t\tw", "123456789 1 22 333",
         "<|endoftext|>after<|endoftext|>", "<|begin_of_text|>Hi", "<s>hi</s> there", "in<s>side", "naïve café",
         " ", "\n", "mixed123abc", "don't they'll", "a...b!!?", "  \n  x", "tab\there", "\u00a0nbsp", "ǅ title",
         "١٢٣ arabic digits", "e\u0301 combining", "🙂", "<0x41> is text", "\r\n\r\n", "end\n",
         "2026913 31415271828 1000000", "HelloWORLD camelCase XMLHttpRequest", "中A文b", "ab\u0301C\u0301",
         "\u02b0\u02b0A", "AB'S CD'sx x'\u017fx Y'\u017f", "a/\n/b //\r\n", "\u0301abc", "नमस्ते दुनिया",
         "\u01c5emal \u01c8 \u01c4", "!\u0301 \u0301\u0301", "!!\u0947 \u0947\u0947x ?\u093f"]
PIECES = ["hello", "World", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "123", "4567", ".", "!?", "(x)", "你好",
          "мир", "🙂", "é", "e\u0301", "\u00a0", "<s>", "</s>", "<|endoftext|>", "<|begin_of_text|>", "λ", "٣",
          "Ⅻ", "ﬁ", "\u200b", "😀😀", "the", " fox", "don't", "   \n", "Å", "\u212b", "A\u030a", "\u1100\u1161", "가",
          "ABC", "Def", "\u02b0", "\u0301", "\u01c5", "'\u017f", "/", "नम", "DE'S", "\u0e20\u0e32\u0e29\u0e32"]


def _corpus():
    return CORPUS_LINES * 20


def _byte_level(pattern=None, prefix_space=False, bos=False, nfc=False):
    ignore = pattern is not None
    tok = Tokenizer(models.BPE(ignore_merges=ignore))
    if nfc:
        tok.normalizer = normalizers.NFC()
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), "isolated"),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=prefix_space,
                                                                              use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] if bos else ["<|endoftext|>"]
    tok.train_from_iterator(_corpus(), trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                           show_progress=False))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                                           special_tokens=[("<|begin_of_text|>", 0)])
    return tok


def _sentencepiece(metaspace=False, prepend=True):
    """Llama 2's layout: <unk> <s> </s>, the 256 byte tokens, then the
    merged vocabulary; an alphabet too small for every character, so
    others fall back to bytes."""
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Replace(" ", "\u2581")
    base.train_from_iterator(_corpus(), trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"],
                                                            limit_alphabet=50, show_progress=False))
    spec = json.loads(base.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    for s, _ in sorted(spec["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(s, len(vocab))
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    if metaspace:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    elif prepend:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    else:  # Gemma's: spaces replaced, nothing prepended
        tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok


KINDS = {
    "gpt2": lambda: _byte_level(),
    "gpt2-prefix-space": lambda: _byte_level(prefix_space=True),
    "llama3": lambda: _byte_level(LLAMA3, bos=True),
    "qwen2": lambda: _byte_level(QWEN2, nfc=True),
    "qwen3.5": lambda: _byte_level(QWEN35, nfc=True),
    "o200k": lambda: _byte_level(O200K),
    "tekken": lambda: _byte_level(TEKKEN, bos=True),
    "llama2-sentencepiece": lambda: _sentencepiece(),
    "metaspace-first": lambda: _sentencepiece(metaspace=True),
    "gemma-replace": lambda: _sentencepiece(prepend=False),
}


class _Tiny(torch.nn.Module):
    def forward(self, x):
        return x + 1


@pytest.fixture(scope="module")
def tiny():
    return kiln.trace(_Tiny(), (torch.zeros(2),))


def _tokenize(path, *args):
    p = subprocess.run([str(KILN_BIN), "tokenize", str(path), *args], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout


def _texts(seed):
    rng = random.Random(seed)
    return EDGES + ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(40)]


@needs_cli
@pytest.mark.parametrize("kind", list(KINDS))
def test_c_tokenizer_gives_hugging_faces_ids_and_text(kind, tiny, tmp_path):
    tok = KINDS[kind]()
    path = tmp_path / "t.kiln"
    kiln.save(tiny, path, tokenizer=tok)
    anchor = tok.encode("x").ids
    wrong = []
    for i, text in enumerate(_texts(sum(map(ord, kind)))):
        want = tok.encode(text).ids
        f = tmp_path / f"text{i}.txt"
        f.write_bytes(text.encode("utf-8"))
        if kind in ("qwen2", "qwen3.5"):  # NFC: kiln refuses text NFC changes, never encodes it unchanged
            p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f)], capture_output=True)
            if unicodedata.normalize("NFC", text) != text:
                assert p.returncode == 1 and b"NFC" in p.stderr, (text, p.stderr)
                continue
            if p.returncode:  # the quick check's "maybe": a combining mark it cannot rule on
                assert b"NFC" in p.stderr and any(unicodedata.combining(c) for c in text), (text, p.stderr)
                continue
        got = [int(v) for v in _tokenize(path, "--text-file", str(f)).split()]
        if got != want:
            wrong.append((text, want, got))
            continue
        # Decoding: the text the ids add after others (special tokens
        # skipped), as a stream prints it.
        body = [t for t in want if t not in anchor[:1]]
        added = _tokenize(path, "--decode", ",".join(map(str, body)))[:-1].decode("utf-8", "replace")
        full = tok.decode(anchor + body, skip_special_tokens=True)
        assert tok.decode(anchor, skip_special_tokens=True) + added == full, (kind, text, body)
    assert not wrong, f"{len(wrong)} texts tokenized otherwise, first: {wrong[0]}"
    # no BOS with --no-special
    assert _tokenize(path, "--text", "hello", "--no-special").decode().split() == \
        [str(i) for i in tok.encode("hello", add_special_tokens=False).ids]


BYTE_LEVEL = [k for k in KINDS if "sentencepiece" not in k and k not in ("metaspace-first", "gemma-replace")]


@needs_cli
@pytest.mark.parametrize("kind", BYTE_LEVEL)
def test_c_pretokenizer_splits_as_hugging_faces(kind, tiny, tmp_path):
    """The pattern alone, where merges cannot hide a wrong split: a
    vocabulary of the 256 bytes and every piece Hugging Face's
    pre-tokenizer makes of the texts, no merges, ignore_merges. A piece
    found whole is its one token, anything else falls apart into bytes, so
    a piece kiln splits finer or coarser than the reference (a word
    swallowing the next's first letter) gives other ids."""
    ref = KINDS[kind]()
    texts = [t for t in _texts(sum(map(ord, kind)) + 1) if unicodedata.normalize("NFC", t) == t]
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    for text in texts:
        for piece, _ in ref.pre_tokenizer.pre_tokenize_str(text):
            vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = ref.normalizer, ref.pre_tokenizer, ref.decoder
    path = tmp_path / "t.kiln"
    kiln.save(tiny, path, tokenizer=tok)
    wrong = []
    for i, text in enumerate(texts):
        f = tmp_path / f"text{i}.txt"
        f.write_bytes(text.encode("utf-8"))
        p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f)], capture_output=True)
        if p.returncode and kind in ("qwen2", "qwen3.5"):  # the NFC quick check's "maybe" (see above)
            assert b"NFC" in p.stderr, p.stderr
            continue
        assert p.returncode == 0, p.stderr
        got = [int(v) for v in p.stdout.split()]
        if got != tok.encode(text).ids:
            wrong.append((text, [tok.id_to_token(i) for i in tok.encode(text).ids], [tok.id_to_token(i) for i in got]))
    assert not wrong, f"{len(wrong)} of {len(texts)} texts split otherwise, first: {wrong[0]}"


def test_transformers_tokenizer_and_its_eos(tiny, tmp_path):
    """A transformers fast tokenizer converts the same way; its
    eos_token_id is the section's end id unless eos= says otherwise."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=_sentencepiece(), bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    section = kiln.tokenizer.section_of(tok)
    assert section[:8] == b"KILNTOKN"
    assert int.from_bytes(section[48:52], "little") == 1  # one end id
    assert int.from_bytes(section[52 + 4:56 + 4], "little") == 2  # after the BOS prefix id: </s>
    both = kiln.tokenizer.section_of(tok, eos=[2, 5])
    assert int.from_bytes(both[48:52], "little") == 2
    with pytest.raises(KilnError, match="eos ids"):
        kiln.tokenizer.section_of(tok, eos=[10 ** 6])


def test_unsupported_tokenizers_are_refused_by_name():
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    with pytest.raises(KilnError, match="WordPiece"):
        kiln.tokenizer.section_of(wp)
    nfkc = _byte_level()
    nfkc.normalizer = normalizers.NFKC()
    with pytest.raises(KilnError, match="NFKC"):
        kiln.tokenizer.section_of(nfkc)
    other = _byte_level()
    other.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\w+|\W"), "isolated"),
                                                   pre_tokenizers.ByteLevel(use_regex=False)])
    with pytest.raises(KilnError, match="pattern"):
        kiln.tokenizer.section_of(other)
    with pytest.raises(KilnError, match="not a fast Hugging Face tokenizer"):
        kiln.tokenizer.section_of(object())


@needs_cli
def test_a_damaged_tokenizer_section_is_refused(tiny, tmp_path):
    """Every single-byte change of the section's header and a truncation:
    refused with a message or still a working tokenizer (a changed token
    byte), never a crash (the CLI runs under ASan in the sanitizer build)."""
    section = kiln.tokenizer.section_of(_byte_level(LLAMA3, bos=True))
    for i in list(range(0, 64)) + [len(section) // 2, len(section) - 1]:
        bad = bytearray(section)
        bad[i] ^= 0xA5
        path = tmp_path / f"bad{i}.kiln"
        path.write_bytes(tiny.to_bytes({"tokenizer": bytes(bad)}))
        p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text", "Hello 123 world"], capture_output=True,
                           timeout=60)
        assert p.returncode in (0, 1), (i, p.returncode, p.stderr)
        if p.returncode:
            assert b"tokenizer section" in p.stderr, p.stderr
    path = tmp_path / "short.kiln"
    path.write_bytes(tiny.to_bytes({"tokenizer": section[:-3]}))
    for cmd in (["tokenize", str(path), "--text", "x"], ["info", str(path)]):  # the model's own commands too
        p = subprocess.run([str(KILN_BIN), *cmd], capture_output=True, timeout=60)
        assert p.returncode == 1 and b"tokenizer section" in p.stderr, (cmd, p.stderr)
    p = subprocess.run([str(KILN_BIN), "tokenize", str(tmp_path / "bad0.kiln"), "--decode", "1,x"],
                       capture_output=True, timeout=60)
    assert p.returncode == 1


def _greedy(compiled, ids, cache, n, eos):
    """The step's greedy tokens in Python: the prompt, then a token a call,
    stopping after an end id."""
    out, past, tok = [], 0, ids
    with torch.no_grad():
        for _ in range(n):
            logits = compiled(tok, torch.tensor(past), cache)
            past += tok.shape[1]
            tok = logits.argmax(-1, keepdim=True)
            out.append(int(tok))
            if out[-1] in eos:
                break
    return out


@needs_cli
def test_kiln_generate_reads_and_writes_text(tmp_path):
    """`kiln generate --text` with a step saved with its tokenizer: the
    prompt's ids are the tokenizer's (with BOS), the new tokens the Python
    loop's (stopping at the tokenizer's end id by default), printed as the
    text they add; --ids prints the ids instead; --chat puts the message in
    the tokenizer's chat template as apply_chat_template does; a step saved
    without a tokenizer says --text needs one."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=_sentencepiece(), bos_token="<s>", eos_token="</s>",
                                  unk_token="<unk>")
    tok.chat_template = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] "
                         "{{ m['content'] }} [/INST]{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=len(tok), head_dim=16)
    model = LlamaForCausalLM(cfg).eval()
    cap = 64
    step = kiln.llm.StaticCacheStep(model, cap)
    text = "Hello world! It's 2026 — 你好"
    ids = torch.tensor([tok(text)["input_ids"]])
    compiled = step.trace(ids, fallback=False)
    path = tmp_path / "step.kiln"
    kiln.save(compiled, path, tokenizer=tok)
    new = _greedy(compiled, ids, step.empty_cache(), 16, {tok.eos_token_id})
    run = lambda *a: subprocess.run([str(KILN_BIN), "generate", str(path), *a, "--max-new-tokens", "16",
                                     "--threads", "1"], capture_output=True, timeout=300)
    p = run("--text", text, "--ids")
    assert p.returncode == 0, p.stderr
    assert [int(t) for t in p.stdout.split()] == new
    assert f"prompt {ids.shape[1]} tokens" in p.stderr.decode()
    p = run("--text", text)
    assert p.returncode == 0, p.stderr
    prompt = ids[0].tolist()
    # The bytes each token adds (the random model makes byte tokens that
    # form no UTF-8 character, which Hugging Face's decoder turns into
    # U+FFFD per byte of the run, ASCII ones too; kiln prints the bytes as
    # they come, as a stream must); where they do form text, it is
    # Hugging Face's.
    pieces = [b"" if t in tok.all_special_ids else bytes([int(s[3:5], 16)]) if re.fullmatch("<0x[0-9A-F]{2}>", s)
              else s.replace("\u2581", " ").encode() for t, s in zip(new, tok.convert_ids_to_tokens(new))]
    assert p.stdout == b"".join(pieces) + b"\n"
    made = b"".join(pieces).decode("utf-8", "replace")
    if "\ufffd" not in made:
        assert made == tok.decode(prompt + new, skip_special_tokens=True)[len(tok.decode(prompt, skip_special_tokens=True)):]
    f = tmp_path / "prompt.txt"
    f.write_text(text)
    q = run("--text-file", str(f))
    assert q.returncode == 0 and q.stdout == p.stdout, q.stderr
    # examples/c/generate_text.c, the smallest such loop on the public API: the same text
    example = REPO / "build" / "examples" / "c" / "generate_text"
    if example.exists():
        g = subprocess.run([str(example), str(path), text, "16"], capture_output=True, timeout=300)
        assert g.returncode == 0 and g.stdout == p.stdout, g.stderr
    info = subprocess.run([str(KILN_BIN), "info", str(path)], capture_output=True, text=True, timeout=60)
    assert f"tokenizer:  SentencePiece-style BPE, {len(tok)} tokens" in info.stdout and "BOS 1, end 2" in info.stdout
    # --chat: the message in the tokenizer's chat template, as apply_chat_template renders it
    message = "Hello there, 你好"
    chat_ids = tok.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True)
    chat_ids = chat_ids["input_ids"] if isinstance(chat_ids, dict) or hasattr(chat_ids, "keys") else chat_ids
    c = run("--chat", message, "--ids")
    assert c.returncode == 0 and f"prompt {len(chat_ids)} tokens" in c.stderr.decode(), c.stderr
    assert c.stdout == run("--prompt", ",".join(map(str, chat_ids)), "--ids").stdout
    plain = tmp_path / "plain.kiln"
    tok.chat_template = None
    kiln.save(compiled, plain, tokenizer=tok)
    r = subprocess.run([str(KILN_BIN), "generate", str(plain), "--chat", "hi"], capture_output=True, timeout=300)
    assert r.returncode == 1 and b"no chat template" in r.stderr, r.stderr
    bare = tmp_path / "bare.kiln"
    kiln.save(compiled, bare)
    r = subprocess.run([str(KILN_BIN), "generate", str(bare), "--text", text], capture_output=True, timeout=300)
    assert r.returncode == 1 and b"has no tokenizer" in r.stderr
    r = run("--text", text, "--prompt", "1,2")
    assert r.returncode == 2 and b"not both" in r.stderr
