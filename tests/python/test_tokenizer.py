"""The C tokenizer `kiln generate --text` uses (src/runtime/kiln_tokenizer.c,
stored by kiln.save(..., tokenizer=) through python/kiln/tokenizer.py)
against Hugging Face's tokenizers library, which is the reference: the same
ids for the same text, and the same text back.

No tokenizer can be downloaded here, so each family is trained in the test
(tokenizers' BpeTrainer on a fixed corpus) in the configuration its models
ship: GPT-2 (ByteLevel's own pattern, with and without add_prefix_space),
Llama 3 (its Split pattern, ignore_merges, a BOS template), Qwen2 (its
1-digit pattern and NFC normalizer, which kiln applies as tokenizers does:
test_c_nfc_*), GPT-NeoX and Pythia (GPT-2's with NFC), Qwen3.5 (marks join
words, NFC),
o200k (GPT-OSS: words split at case changes, contractions after them),
Tekken (Mistral Nemo: o200k's words, 1-digit numbers), DeepSeek V3, LLM and
Coder (Sequences of several Splits, an empty Sequence normalizer), and SentencePiece-style BPE as Llama 2 / TinyLlama
(Prepend + Replace normalizer, <0xNN> byte fallback, <unk> fused, BOS), as
newer conversions write it (Metaspace, prepend_scheme "first") and as Gemma
(Replace alone, nothing prepended). The
texts: hand-picked edges (contractions in both cases and U+017F, which
folds to s, case changes inside words with letters of every case class
and combining marks, runs of spaces
before words and at the end, CR/LF runs, digits runs past 3, added tokens
inside words, non-Latin scripts, emoji, characters outside the alphabet;
for DeepSeek's splits CJK and kana by Latin, punctuation before letters and
before newlines, symbols, white space before digits, characters of no
class) and 40 random mixes per tokenizer, fixed seeds."""

import json
import pathlib
import random
import re
import unicodedata
import subprocess
import sys

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
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
# tiktoken's o200k_base (GPT-OSS), and Mistral's Tekken as its tokenizer.json writes it
O200K = "|".join([r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                  r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
                  r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|"
          r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek's sequences of Splits (tokenizer.json writes CR and LF as the
# characters, as here), V3 (and R1), LLM (v1) and Coder.
DEEPSEEK3 = [r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
             "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
             " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"]
DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102"
    "\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943")
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_LLM = ["[\r\n]", r"\s?[" + DEEPSEEK_LETTERS + "]+",
                "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", r"\s+$", DEEPSEEK_CJK, r"\p{N}+"]
DEEPSEEK_CODER = ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"]
CORPUS_LINES = [
    "Hello world! It's 2026; we're testing 12345 tokens, and THEY'LL see.",
    "The quick brown fox jumps over the lazy dog. Don't stop: 3.14159 is pi.",
    "Привет, мир! Это тест токенизатора.", "你好，世界。这是一个测试。", "مرحبا بالعالم",
    "emoji 🙂🚀 and tabs\tand\nnewlines\r\n  double  spaces", "naïve café résumé Ωmega über",
    "def f(x):\n    return x * 2  # code\n", "    indented lines\n\n\nblank lines", "a-b_c.d/e\\f|g",
    "Numbers: 7 42 913 2026 31415 271828 1000000 65536 202 691 3",
    "camelCase XMLHttpRequest HelloWORLD नमस्ते दुनिया paths/to/files",
    "#include <stdio.h> // see www.example.com, it's 'quoted'!!\n\n日本語のテキストとカタカナ・ひらがなー",
    "价格：￥1234，约 $56.78。「引用」©®™ ≤≥ 1+1=2 한국어 ไทย Ωμέγα",
]
EDGES = ["Hello world! It's 2026; we're testing 12345 tokens.", "  leading spaces", "trailing   ", "a\n\nb\r\n c",
         "Привет, мир!", "你好，世界。", "emoji 🙂🚀!", "I'LL SAY 'Ve 'd 'M", "x  y   z\t\tw", "123456789 1 22 333",
         "<|endoftext|>after<|endoftext|>", "<|begin_of_text|>Hi", "<s>hi</s> there", "in<s>side", "naïve café",
         " ", "\n", "mixed123abc", "don't they'll", "a...b!!?", "  \n  x", "tab\there", "\u00a0nbsp", "ǅ title",
         "١٢٣ arabic digits", "e\u0301 combining", "🙂", "<0x41> is text", "\r\n\r\n", "end\n",
         "2026913 31415271828 1000000", "HelloWORLD camelCase XMLHttpRequest", "中A文b", "ab\u0301C\u0301",
         "\u02b0\u02b0A", "AB'S CD'sx x'\u017fx Y'\u017f", "a/\n/b //\r\n", "\u0301abc", "नमस्ते दुनिया",
         "\u01c5emal \u01c8 \u01c4", "!\u0301 \u0301\u0301", "!!\u0947 \u0947\u0947x ?\u093f",
         # DeepSeek's splits: CJK and kana by Latin, punctuation before
         # letters, punctuation runs before newlines, symbols, white space
         # before digits and CJK, characters no class takes
         "日本語abcテキスト123漢字", "カタカナ・ひらがなー。", "#include <stdio.h>\r\n.com 's x.y", "!!!\n\n?)\r\n\r\nok",
         "a  123   你好    ", "价格：￥1234，约$5.6。", "\u3000\u3000x\u3000「引用」", "1+1=2 ©®™ ≤≥ €5",
         "\u200b\u200bx\u200b", "\x01\x02a \x7f", "\t\u0301 \u0301a", "한국어 ไทย हिन्दी", "Ωμέγα \u2126 \u212a \u1f7d",
         " \n \n", "x \r\n \n  ", "'s'S.é\u0301é", "©  ok ≤≥   x ™  "]
PIECES = ["hello", "World", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "123", "4567", ".", "!?", "(x)", "你好",
          "мир", "🙂", "é", "e\u0301", "\u00a0", "<s>", "</s>", "<|endoftext|>", "<|begin_of_text|>", "λ", "٣",
          "Ⅻ", "ﬁ", "\u200b", "😀😀", "the", " fox", "don't", "   \n", "Å", "\u212b", "A\u030a", "\u1100\u1161", "가",
          "ABC", "Def", "\u02b0", "\u0301", "\u01c5", "'\u017f", "/", "नम", "DE'S", "\u0e20\u0e32\u0e29\u0e32",
          "日本", "カナ・", "#x", "!\n", "\u3000", "\u200b", "©", "$", "한", "#"]


def _corpus():
    return CORPUS_LINES * 20


def _byte_level(pattern=None, prefix_space=False, bos=False, nfc=False, deepseek=False):
    """pattern: a Split's regex, or a list of them (a Sequence, in order);
    deepseek: as DeepSeek's files have it, an empty Sequence normalizer and
    its BOS."""
    ignore = pattern is not None and not deepseek
    tok = Tokenizer(models.BPE(ignore_merges=ignore))
    if nfc:
        tok.normalizer = normalizers.NFC()
    if deepseek:
        tok.normalizer = normalizers.Sequence([])
    if pattern is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    else:
        splits = [pre_tokenizers.Split(Regex(p), "isolated") for p in ([pattern] if isinstance(pattern, str) else pattern)]
        tok.pre_tokenizer = pre_tokenizers.Sequence(splits + [pre_tokenizers.ByteLevel(add_prefix_space=prefix_space,
                                                                                       use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] if bos else ["<|endoftext|>"]
    if deepseek:
        specials, bos = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"], True
    tok.train_from_iterator(_corpus(), trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                                           initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                           show_progress=False))
    if bos:
        tok.post_processor = processors.TemplateProcessing(single=f"{specials[0]} $A",
                                                           special_tokens=[(specials[0], 0)])
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
    # ByteLevel's add_prefix_space after Splits: a space before every piece
    # the splits made (as transformers sets it for add_prefix_space=True)
    "gpt2-split-prefix-space": lambda: _byte_level(GPT2, prefix_space=True),
    "llama3-prefix-space": lambda: _byte_level(LLAMA3, prefix_space=True, bos=True),
    "deepseek-v3-prefix-space": lambda: _byte_level(DEEPSEEK3, prefix_space=True, deepseek=True),
    "qwen2": lambda: _byte_level(QWEN2, nfc=True),
    "gpt-neox": lambda: _byte_level(nfc=True),  # GPT-NeoX and Pythia: GPT-2's ByteLevel after NFC
    "qwen3.5": lambda: _byte_level(QWEN35, nfc=True),
    "o200k": lambda: _byte_level(O200K),
    "tekken": lambda: _byte_level(TEKKEN, bos=True),
    "deepseek-v3": lambda: _byte_level(DEEPSEEK3, deepseek=True),
    "deepseek-llm": lambda: _byte_level(DEEPSEEK_LLM, deepseek=True),
    "deepseek-coder": lambda: _byte_level(DEEPSEEK_CODER, deepseek=True),
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


def _pieces_tokenizer(ref, texts, tiny, tmp_path):
    """A tokenizer with ref's normalizer and pre-tokenizer whose vocabulary
    is the 256 bytes and every piece ref's pre-tokenizer makes of texts (no
    merges, ignore_merges), and a file of tiny carrying it: (tokenizer,
    path)."""
    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    for text in texts:
        for piece, _ in ref.pre_tokenizer.pre_tokenize_str(text):
            vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tok.normalizer, tok.pre_tokenizer, tok.decoder = ref.normalizer, ref.pre_tokenizer, ref.decoder
    path = tmp_path / "t.kiln"
    kiln.save(tiny, path, tokenizer=tok)
    return tok, path


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
    tok, path = _pieces_tokenizer(ref, texts, tiny, tmp_path)
    wrong = []
    for i, text in enumerate(texts):
        f = tmp_path / f"text{i}.txt"
        f.write_bytes(text.encode("utf-8"))
        p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f)], capture_output=True)
        assert p.returncode == 0, p.stderr
        got = [int(v) for v in p.stdout.split()]
        if got != tok.encode(text).ids:
            wrong.append((text, [tok.id_to_token(i) for i in tok.encode(text).ids], [tok.id_to_token(i) for i in got]))
    assert not wrong, f"{len(wrong)} of {len(texts)} texts split otherwise, first: {wrong[0]}"


@needs_cli
@pytest.mark.parametrize("kind", ["deepseek-v3", "deepseek-llm", "deepseek-coder", "llama3"])
def test_long_runs_take_linear_time(kind, tiny, tmp_path):
    """300000 spaces before a digit and 600000 digits: each matcher reads a
    run a bounded number of times, where reading it again from each of its
    characters (a \\s+$ failing, \\p{N}{1,3} measuring the whole run) would
    take minutes. The ids are Hugging Face's, except DeepSeek LLM's spaces,
    where the regex engine itself is quadratic (two minutes for 100000):
    there the pieces' ("a", the spaces, "1"; the engine's on the spaces alone
    is quick, $ being at their end)."""
    tok = KINDS[kind]()
    path = tmp_path / "t.kiln"
    kiln.save(tiny, path, tokenizer=tok)
    enc = lambda text: tok.encode(text, add_special_tokens=False).ids
    for text in ("a" + " " * 300000 + "1", "1" * 600000):
        f = tmp_path / "long.txt"
        f.write_text(text)
        p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f), "--no-special"],
                           capture_output=True, timeout=20)
        assert p.returncode == 0, p.stderr
        pieces = ["a", text[1:-1], "1"] if kind == "deepseek-llm" and text[0] == "a" else [text]
        assert [int(v) for v in p.stdout.split()] == [i for piece in pieces for i in enc(piece)], (kind, len(text))


def _assigned_since_python():
    """The code points whose general category differs between Python's own
    unicodedata (14.0 on Python 3.11) and Unicode 16.0 (unicodedata2, the
    data kiln's tables are generated from): those assigned in 15.0-16.0
    (CJK extensions H and I, Garay, Tulu-Tigalari, ...) and the few whose
    category changed."""
    import unicodedata2

    assert unicodedata2.unidata_version == "16.0.0", unicodedata2.unidata_version
    return [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF
            and unicodedata.category(chr(cp)) != unicodedata2.category(chr(cp))]


def test_unicode_tables_are_the_generators():
    """src/base/kiln_unicode_tables.c is what kiln_unicode_gen.py writes
    (Unicode 16.0, tokenizers 0.23's): nobody edited it by hand, and the
    generator and its data agree with what is committed."""
    gen = REPO / "src" / "base" / "kiln_unicode_gen.py"
    out = subprocess.run([sys.executable, str(gen)], capture_output=True, timeout=120, check=True).stdout
    assert out.decode() == (REPO / "src" / "base" / "kiln_unicode_tables.c").read_text()


def _unicode_table(name):
    """The code points of a range table of src/base/kiln_unicode_tables.c."""
    text = (REPO / "src" / "base" / "kiln_unicode_tables.c").read_text()
    body = text[text.index(f"kiln_unicode_range_t {name}[] = {{"):]
    body = body[:body.index("};")]
    return {cp for a, b in re.findall(r"\{0x([0-9A-F]+), 0x([0-9A-F]+)\}", body)
            for cp in range(int(a, 16), int(b, 16) + 1)}


def _nfc_bytes_tokenizer(tiny, tmp_path):
    """Qwen2's normalizer (NFC) and pre-tokenizer over a vocabulary of the
    256 bytes, no merges: the ids are the normalized text's bytes, so kiln's
    NFC is compared with tokenizers' byte for byte. (tokenizer, path)."""
    return _pieces_tokenizer(KINDS["qwen2"](), [], tiny, tmp_path)


def _nfc_differences(tok, path, texts, tmp_path):
    """The texts kiln encodes otherwise than tok (its normalizer then
    bytes), each a line of one file, kiln refusing none."""
    f = tmp_path / "nfc.txt"
    f.write_bytes("\n".join(texts).encode("utf-8"))
    got = [int(v) for v in _tokenize(path, "--text-file", str(f), "--no-special").split()]
    if got == tok.encode("\n".join(texts), add_special_tokens=False).ids:
        return []
    return [t for t in texts if _tokenize_ids(path, t, tmp_path) != tok.encode(t, add_special_tokens=False).ids]


def _tokenize_ids(path, text, tmp_path):
    f = tmp_path / "one.txt"
    f.write_bytes(text.encode("utf-8"))
    return [int(v) for v in _tokenize(path, "--text-file", str(f), "--no-special").split()]


@needs_cli
def test_c_nfc_normalizes_every_code_point_as_hugging_faces(tiny, tmp_path):
    """kiln's NFC (src/base/kiln_unicode_nfc.c) against tokenizers' (the
    normalizer Qwen2's tokenizers carry) on every code point NFC can touch
    (every mark, every character with a canonical decomposition or in a
    composition, Hangul's jamo and all 11,172 syllables), each alone, after
    a letter, before an acute accent (a composition across it, or blocked
    by it), between marks out of order, and every composing pair with and
    without a mark of each class between: byte for byte. Until session 32
    kiln refused all such text. Code points tokenizers' older Unicode data
    normalizes otherwise are left out (test_c_nfc_refuses_...)."""
    import unicodedata2

    tok, path = _nfc_bytes_tokenizer(tiny, tmp_path)
    unlike = _unicode_table("kiln_unicode_nfc_unlike")
    assert 50 < len(unlike) < 400, len(unlike)
    touched = set()
    for cp in range(0x110000):
        c = chr(cp)
        if 0xD800 <= cp <= 0xDFFF or cp in unlike:
            continue
        if unicodedata2.combining(c) or unicodedata2.decomposition(c) or unicodedata2.normalize("NFD", c) != c:
            touched.add(cp)
    touched |= set(range(0x1100, 0x1113)) | set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    assert len(touched) > 14000, len(touched)
    texts = []
    for cp in sorted(touched):
        c = chr(cp)
        texts += [c, "a" + c, c + "\u0301", "e" + c + "\u0301", "a\u0301" + c + "\u0316"]
    marks = sorted({unicodedata2.combining(chr(cp)): cp for cp in touched if unicodedata2.combining(chr(cp))}.values())
    for cp in range(0x110000):
        d = unicodedata2.decomposition(chr(cp)) if not 0xD800 <= cp <= 0xDFFF else ""
        parts = d.split() if d and not d.startswith("<") else []
        if len(parts) == 2 and cp not in unlike and not {int(x, 16) for x in parts} & unlike:
            a, b = (chr(int(x, 16)) for x in parts)
            texts += [a + b, a + b + b, a + "\u0316" + b] + [a + chr(m) + b for m in marks]
    wrong = []
    for i in range(0, len(texts), 20000):
        wrong += _nfc_differences(tok, path, texts[i:i + 20000], tmp_path)
    assert not wrong, f"{len(wrong)} of {len(texts)} texts normalized otherwise, first: " \
                      f"{[hex(ord(c)) for c in wrong[0]]} -> {[hex(ord(c)) for c in tok.normalizer.normalize_str(wrong[0])]}"


@needs_cli
def test_c_nfc_normalizes_random_mixes_as_hugging_faces(tiny, tmp_path):
    """Strings of up to 12 characters drawn from marks of every class,
    composing letters, Hangul's jamo, Indic and Hebrew signs, text before
    and after (the stretches NFC rewrites inside unchanged text), then the
    tokenizer's own texts: kiln's ids are tokenizers'."""
    import unicodedata2

    tok, path = _nfc_bytes_tokenizer(tiny, tmp_path)
    unlike = _unicode_table("kiln_unicode_nfc_unlike")
    marks = [chr(cp) for cp in range(0x300, 0x20000) if unicodedata2.combining(chr(cp)) and cp not in unlike]
    pool = marks[::7] + list("aeiouAEOUcnszwy \n") + ["\u0915", "\u093c", "\u0b47", "\u0b3e", "\u0b57",
                                                      "\u05d0", "\u05b7", "\u05bc", "\u304b", "\u3099", "\u212b",
                                                      "\u1e9b", "\u0344", "\u0f73", "가", "한"]
    pool += [chr(c) for c in (*range(0x1100, 0x1106), *range(0x1161, 0x1166), *range(0x11A8, 0x11AC))]
    rng = random.Random(32)
    texts = ["".join(rng.choice(pool) for _ in range(rng.randint(1, 12))) for _ in range(4000)]
    texts += ["ज़्यादा फ़िल्म", "Vie\u0323\u0302t Nam", "\u1112\u1161\u11ab\u1100\u1173\u11af", "e\u0301" * 3000]
    texts += [t for t in _texts(7) if "<" not in t]
    wrong = _nfc_differences(tok, path, texts, tmp_path)
    assert not wrong, f"{len(wrong)} of {len(texts)} texts normalized otherwise, first: {wrong[0]!r}"


@needs_cli
def test_c_nfc_refuses_code_points_hugging_faces_data_predates(tiny, tmp_path):
    """tokenizers normalizes with Unicode data older than 13.0: marks added
    since are starters to it and it makes none of the compositions added
    since. kiln's tables are 16.0's, so text that needs normalizing and
    holds such a code point is refused, naming it, where kiln cannot know
    tokenizers' answer (for each of them, the answers do differ in some
    context, which the generator found by asking it); text the quick check
    finds NFC encodes, whatever it holds (it is NFC to tokenizers too)."""
    tok, path = _nfc_bytes_tokenizer(tiny, tmp_path)
    unlike = sorted(_unicode_table("kiln_unicode_nfc_unlike"))
    unsure = _unicode_table("kiln_unicode_nfc_no") | _unicode_table("kiln_unicode_nfc_maybe")
    assert len([cp for cp in unlike if cp not in unsure]) > 40
    for cp in unlike[::3]:
        f = tmp_path / "u.txt"
        f.write_bytes(("e\u0301 x" + chr(cp)).encode("utf-8"))
        p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f)], capture_output=True)
        assert p.returncode == 1 and f"U+{cp:04X}".encode() in p.stderr and b"older Unicode" in p.stderr, \
            (hex(cp), p.stderr)
        text = "\u00e9 x" + chr(cp)  # NFC already, unless cp is NFC_Quick_Check No or Maybe
        if cp not in unsure:
            assert _tokenize_ids(path, text, tmp_path) == tok.encode(text, add_special_tokens=False).ids, hex(cp)


@needs_cli
@pytest.mark.parametrize("kind", ["gpt2", "llama3", "o200k", "deepseek-v3", "deepseek-llm"])
def test_code_points_assigned_after_unicode_14_split_as_hugging_faces(kind, tiny, tmp_path):
    """Every code point Unicode 15.0-16.0 assigned (about 10,000), in
    contexts that tell letters, marks, numbers, punctuation and symbols
    and upper from lower case apart, split by kiln as by tokenizers 0.23
    (whose regular expressions know Unicode 16.0): until session 31 kiln's
    tables were Python 3.11's Unicode 14.0, and these characters were no
    letters to it, a silent difference in the ids. Pieces as in
    test_c_pretokenizer_splits_as_hugging_faces. (Not the NFC kinds:
    tokenizers normalizes with older data, test_c_nfc_*.)"""
    ref = KINDS[kind]()
    cps = _assigned_since_python()
    assert len(cps) > 9000, len(cps)
    texts = [" ".join(f"{chr(c)}a{chr(c)}1 {chr(c)}{chr(c)}.A{chr(c)}" for c in cps[i:i + 400])
             for i in range(0, len(cps), 400)]
    tok, path = _pieces_tokenizer(ref, texts, tiny, tmp_path)
    wrong = []
    for i, text in enumerate(texts):
        f = tmp_path / f"text{i}.txt"
        f.write_bytes(text.encode("utf-8"))
        p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f), "--no-special"],
                           capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr
        got, want = [int(v) for v in p.stdout.split()], tok.encode(text, add_special_tokens=False).ids
        if got != want:
            j = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            wrong.append([tok.id_to_token(ids[j]) if j < len(ids) else None for ids in (want, got)])
    assert not wrong, f"{len(wrong)} of {len(texts)} texts split otherwise; first (tokenizers, kiln): {wrong[0]}"


@needs_cli
def test_vocabulary_without_the_bytes_utf8_never_uses(tiny, tmp_path):
    """DeepSeek LLM's and Coder's vocabularies have no token for the 13
    bytes UTF-8 never uses (0xC0, 0xC1, 0xF5-0xFF): their stand-ins (\u00c0,
    \u00f5 ... \u00ff) are added tokens instead, which match those
    characters in the text. Such a vocabulary is kiln's as Hugging Face's;
    text that is not UTF-8 (what would need the bytes) is refused by name."""
    spec = json.loads(_byte_level(DEEPSEEK_CODER, deepseek=True).to_str())
    never = [0xC0, 0xC1, *range(0xF5, 0x100)]
    chars = [c for c, b in kiln.tokenizer._byte_decoder().items() if b in never]
    kept = sorted((i, t) for t, i in spec["model"]["vocab"].items() if t not in chars)
    spec["model"]["vocab"] = {t: k for k, (_, t) in enumerate(kept)}  # (the special tokens stay 0 and 1)
    for k, c in enumerate(chars):  # after the vocabulary, as DeepSeek's
        spec["added_tokens"].append({"id": len(kept) + k, "content": c, "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": True, "special": False})
    assert not any(c in m for m in map(str, spec["model"]["merges"]) for c in chars)
    tok = Tokenizer.from_str(json.dumps(spec))
    assert tok.token_to_id("\u00ff") == len(kept) + 12 and tok.encode("\u00ff", add_special_tokens=False).ids == [len(kept) + 12]
    path = tmp_path / "t.kiln"
    kiln.save(tiny, path, tokenizer=tok)
    texts = ["Äpfel über öl ÿ", "\u00c0\u00c1 x\u00f5\u00f7\u00f8\u00ff", "naïve ø", *EDGES]
    for text in texts:
        got = [int(v) for v in _tokenize(path, "--text", text).split()]
        assert got == tok.encode(text).ids, text
    f = tmp_path / "latin1.txt"
    f.write_bytes("café ÿ".encode("latin-1"))
    p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text-file", str(f)], capture_output=True)
    assert p.returncode == 1 and b"not UTF-8 at byte 5 (0xff)" in p.stderr, p.stderr


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
    # DeepSeek's sequences: only whole, in order, each split isolated
    for splits in (DEEPSEEK3[:2], DEEPSEEK3[::-1], DEEPSEEK3 + [r"\p{N}"], [DEEPSEEK3[0], DEEPSEEK3[1] + "x", DEEPSEEK3[2]]):
        with pytest.raises(KilnError, match="pattern"):
            kiln.tokenizer.section_of(_byte_level(splits, deepseek=True))
    removed = _byte_level(DEEPSEEK3, deepseek=True)
    removed.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(DEEPSEEK3[0]), "removed")] +
                                                    [pre_tokenizers.Split(Regex(r), "isolated") for r in DEEPSEEK3[1:]] +
                                                    [pre_tokenizers.ByteLevel(use_regex=False)])
    with pytest.raises(KilnError, match="pre-tokenizer"):
        kiln.tokenizer.section_of(removed)
    # a normalizer in the Sequence is still refused
    lower = _byte_level(DEEPSEEK3, deepseek=True)
    lower.normalizer = normalizers.Sequence([normalizers.Lowercase()])
    with pytest.raises(KilnError, match="normalizer"):
        kiln.tokenizer.section_of(lower)
    with pytest.raises(KilnError, match="not a fast Hugging Face tokenizer"):
        kiln.tokenizer.section_of(object())


@needs_cli
def test_prefix_space_after_splits_in_files_saved_before_its_flag(tiny, tmp_path):
    """Before session 31 kiln refused to save ByteLevel's add_prefix_space
    after Splits, but files saved earlier carry patterns 2-6 with the
    prepend flag alone and were encoded with one space before the text:
    Hugging Face puts one before every piece. Those patterns come only
    from Splits, so the flag alone now means every piece, and such a file
    gives Hugging Face's ids. GPT-2's pattern is also ByteLevel's own
    regex (one space), so its Split form says so (flag 128); that flag
    without a space to prepend is refused."""
    import struct

    flags_at = 8 + 3 * 4  # magic, version, kind, pattern
    tok = _byte_level(LLAMA3, prefix_space=True, bos=True)
    section = bytearray(kiln.tokenizer.section_of(tok))
    flags = struct.unpack_from("<I", section, flags_at)[0]
    assert flags & 128 and flags & 2, flags
    struct.pack_into("<I", section, flags_at, flags & ~128)
    path = tmp_path / "old.kiln"
    path.write_bytes(tiny.to_bytes({"tokenizer": bytes(section)}))
    for text in ("Hello world 12345, it's here!", "a\n\nb  c", "x"):
        assert [int(v) for v in _tokenize(path, "--text", text).split()] == tok.encode(text).ids, text
    gpt2 = bytearray(kiln.tokenizer.section_of(_byte_level(GPT2, prefix_space=True)))
    assert struct.unpack_from("<I", gpt2, flags_at)[0] & 128
    plain = bytearray(kiln.tokenizer.section_of(_byte_level()))
    struct.pack_into("<I", plain, flags_at, struct.unpack_from("<I", plain, flags_at)[0] | 128)
    path = tmp_path / "bad.kiln"
    path.write_bytes(tiny.to_bytes({"tokenizer": bytes(plain)}))
    p = subprocess.run([str(KILN_BIN), "tokenize", str(path), "--text", "x"], capture_output=True, timeout=60)
    assert p.returncode == 1 and b"tokenizer section" in p.stderr and b"each piece" in p.stderr, p.stderr


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
