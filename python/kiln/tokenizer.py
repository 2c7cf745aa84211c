"""A Hugging Face tokenizer as the .kiln artifact's "tokenizer" section, so
that `kiln generate --text` reads and writes text with no Python:

    kiln.save(compiled, "step.kiln", tokenizer=AutoTokenizer.from_pretrained(path))

The C side (src/runtime/kiln_tokenizer.h, which documents the layout)
encodes as Hugging Face's tokenizers library does for BPE models of two
families: byte-level (GPT-2's pattern, Llama 3's, Qwen2's 1-digit form,
Qwen3.5's, o200k's as GPT-OSS, Tekken's as Mistral Nemo and later, and
DeepSeek's sequences of splits: V3 and R1, LLM, Coder) and
SentencePiece-style (U+2581 for spaces, byte fallback: Llama 2,
TinyLlama, Mistral v0.1). Anything else (a normalizer beyond those, another
model type, added tokens matched with lstrip/rstrip) is refused here by
name, never carried half-understood; an NFC normalizer (Qwen2's) is
carried as a flag: the C side normalizes as tokenizers does
(src/base/kiln_unicode_nfc.c). This is conversion only: the JSON
the tokenizer describes itself with, read into ids and bytes."""

import json
import struct

from kiln.errors import KilnError

SECTION = "tokenizer"
CHAT_SECTION = "chat"
_MARK_USER = "\x00kiln user message\x00"

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN35 = _QWEN2.replace(r"?\p{L}+", r"?[\p{L}\p{M}]+").replace(r"[^\s\p{L}\p{N}]", r"[^\s\p{L}\p{M}\p{N}]")
_O200K_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{c}|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{c}|")
_O200K_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_O200K = _O200K_WORDS.replace("{c}", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"\p{N}{1,3}" + _O200K_REST
_TEKKEN = _O200K_WORDS.replace("{c}", "") + r"\p{N}" + _O200K_REST
# DeepSeek's pre-tokenizers: Sequences of Splits, each splitting every
# piece the ones before made, as their tokenizer.json has them (and
# llama.cpp's llama-vocab.cpp). V3 (R1, V3.1, V3.2): numbers of 1 to 3
# digits, CJK ideographs and kana, then a cl100k-like pattern with \p{P}\p{S}
# for the "other" class. DeepSeek LLM (v1) spells its letters out (escaped
# here: NFC would change some of them, U+1F7D, U+2126, U+212A, in a copy;
# src/base/kiln_unicode_gen.py reads this string for the C side's table);
# its [\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff] is U+0800-U+9FA5 with Hangul.
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba"
    "\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45"
    "\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe"
    "\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc"
    "\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3"
    "\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06"
    "\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df"
    "\U0001e900-\U0001e943")
_DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK3 = (r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
              r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|"""
              r""" ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
_DEEPSEEK_LLM = (r"[\r\n]", r"\s?[" + _DEEPSEEK_LETTERS + "]+",
                 "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+", r"\s+$", _DEEPSEEK_CJK,
                 r"\p{N}+")
_DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _DEEPSEEK_CJK, r"\p{N}")
# kiln_tokenizer.c's pattern ids, by the Split regexes before ByteLevel:
# GPT-2; Llama 3 (cl100k); Qwen2 (1-digit numbers); o200k (GPT-OSS); Tekken
# (Mistral Nemo and later, Nemotron); Qwen3.5 (marks join words); DeepSeek
# V3, LLM and Coder (sequences).
_PATTERNS = {_GPT2: 1, _LLAMA3: 2, _QWEN2: 3, _O200K: 4, _TEKKEN: 5, _QWEN35: 6}
_SPLITS = {**{(regex,): i for regex, i in _PATTERNS.items()}, _DEEPSEEK3: 7, _DEEPSEEK_LLM: 8, _DEEPSEEK_CODER: 9}
_BYTE_LEVEL, _SENTENCEPIECE = 1, 2
_IGNORE_MERGES, _PREPEND, _PREPEND_UNLESS_THERE, _PREPEND_FIRST, _BYTE_FALLBACK, _FUSE_UNK, _NFC = 1, 2, 4, 8, 16, 32, 64
_PREPEND_EACH = 128  # ByteLevel after Splits: its space before every piece they made
_MARK = "\u2581"
_MAX_AFFIX = 16


def _byte_decoder():
    """GPT-2's printable stand-in for each byte, reversed: char -> byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _refuse(why):
    raise KilnError(f"kiln.save(tokenizer=...): {why}; kiln's C tokenizer reads byte-level BPE (GPT-2, "
                    "Llama 3, Qwen2, Qwen3.5, o200k, Tekken and DeepSeek V3, LLM and Coder patterns) and "
                    "SentencePiece-style BPE (Llama 2, Mistral v0.1)")


def _regex(split):
    """A Split's regex with CR and LF as the escapes \\r and \\n: tokenizer.json
    files write them either way (DeepSeek's as the characters, Llama 3's as
    escapes), which the regex engine reads alike."""
    regex = (split.get("pattern") or {}).get("Regex")
    return regex.replace("\r", r"\r").replace("\n", r"\n") if isinstance(regex, str) else regex


def _isolated_split(part):
    return part.get("type") == "Split" and part.get("behavior") == "Isolated" and not part.get("invert")


def _backend(tok):
    """(tokenizers.Tokenizer, encode(text, add_special) -> ids, eos id or None)."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:  # transformers' fast tokenizer
        return backend, (lambda text, special: tok(text, add_special_tokens=special)["input_ids"]), \
            getattr(tok, "eos_token_id", None)
    if hasattr(tok, "to_str") and hasattr(tok, "encode"):  # tokenizers.Tokenizer
        return tok, (lambda text, special: tok.encode(text, add_special_tokens=special).ids), None
    _refuse(f"{type(tok).__name__} is not a fast Hugging Face tokenizer (one with a tokenizer.json)")


def _kind(spec):
    """(kind, pattern, flags) from the normalizer, pre-tokenizer and model."""
    norm, pre, model = spec.get("normalizer"), spec.get("pre_tokenizer"), spec["model"]
    flags = 0
    if norm == {"type": "Sequence", "normalizers": []}:  # DeepSeek's: none
        norm = None
    if pre and pre.get("type") == "ByteLevel" or pre and pre.get("type") == "Sequence":
        if norm is not None and norm.get("type") == "NFC":
            flags |= _NFC  # (the C side normalizes: kiln_unicode_nfc)
        elif norm is not None:
            _refuse(f"a {norm.get('type')} normalizer before a byte-level pre-tokenizer")
        parts = pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]
        pattern = None
        if len(parts) == 1 and parts[0].get("type") == "ByteLevel" and parts[0].get("use_regex", True):
            pattern, level = 1, parts[0]
        elif (len(parts) >= 2 and all(map(_isolated_split, parts[:-1])) and parts[-1].get("type") == "ByteLevel"
              and not parts[-1].get("use_regex", True)):
            regexes = tuple(map(_regex, parts[:-1]))
            if regexes not in _SPLITS:
                _refuse(f"the pre-tokenizing pattern{'s' if len(regexes) > 1 else ''} "
                        f"{', '.join(map(repr, regexes))[:300]} is not one kiln knows")
            pattern, level = _SPLITS[regexes], parts[-1]
            if level.get("add_prefix_space"):  # tokenizers prepends it to every piece the splits make
                flags |= _PREPEND_EACH
        else:
            _refuse(f"the pre-tokenizer {json.dumps(pre)[:200]}")
        if level.get("add_prefix_space"):
            flags |= _PREPEND
        return _BYTE_LEVEL, pattern, flags
    if pre is None and norm is not None and norm.get("type") in ("Sequence", "Replace"):
        steps = [(n.get("type"), n.get("prepend"), (n.get("pattern") or {}).get("String"), n.get("content"))
                 for n in (norm["normalizers"] if norm["type"] == "Sequence" else [norm])]
        if steps == [("Prepend", _MARK, None, None), ("Replace", None, " ", _MARK)]:
            return _SENTENCEPIECE, 0, _PREPEND
        if steps == [("Replace", None, " ", _MARK)]:
            return _SENTENCEPIECE, 0, 0
        _refuse(f"the normalizer {json.dumps(norm)[:200]}")
    if norm is None and pre is not None and pre.get("type") == "Metaspace":
        if pre.get("replacement") != _MARK or pre.get("split"):
            _refuse(f"a Metaspace pre-tokenizer replacing with {pre.get('replacement')!r}, split {pre.get('split')}")
        scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True) else "never")
        flags = {"always": _PREPEND | _PREPEND_UNLESS_THERE, "first": _PREPEND | _PREPEND_UNLESS_THERE | _PREPEND_FIRST,
                 "never": 0}.get(scheme)
        if flags is None:
            _refuse(f"Metaspace's prepend_scheme {scheme!r}")
        return _SENTENCEPIECE, 0, flags
    _refuse(f"normalizer {json.dumps(norm)[:120]} with pre-tokenizer {json.dumps(pre)[:120]}")


def section_of(tok, eos=None):
    """The "tokenizer" section's bytes for `tok` (a transformers fast
    tokenizer or a tokenizers.Tokenizer); eos: the ids that end a
    generation (int or list; default the tokenizer's eos_token_id)."""
    backend, encode, eos_default = _backend(tok)
    spec = json.loads(backend.to_str())
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        _refuse(f"a {model.get('type')} model")
    for key in ("continuing_subword_prefix", "end_of_word_suffix", "dropout"):
        if model.get(key):
            _refuse(f"BPE with {key}={model[key]!r}")
    kind, pattern, flags = _kind(spec)
    if model.get("ignore_merges"):
        flags |= _IGNORE_MERGES
    if model.get("byte_fallback"):
        if kind != _SENTENCEPIECE:
            _refuse("byte fallback in a byte-level model")
        flags |= _BYTE_FALLBACK
    if model.get("fuse_unk"):
        flags |= _FUSE_UNK
    vocab = model["vocab"]
    added = spec.get("added_tokens") or []
    for a in added:
        if a.get("lstrip") or a.get("rstrip") or a.get("single_word"):
            _refuse(f"the added token {a['content']!r} matches with lstrip/rstrip/single_word")
        if a.get("normalized") and spec.get("normalizer") not in (None, {"type": "Sequence", "normalizers": []}):
            _refuse(f"the added token {a['content']!r} is matched after the normalizer")
    by_id = {i: s for s, i in vocab.items()}
    content = {a["id"]: a["content"] for a in added}
    n = max([*by_id, *content]) + 1
    missing = [i for i in range(n) if i not in by_id and i not in content]
    if missing:
        _refuse(f"ids {missing[:5]} have no token")
    decoder = _byte_decoder() if kind == _BYTE_LEVEL else None

    def token_bytes(i):
        if i in content:
            return content[i].encode("utf-8")
        s = by_id[i]
        if decoder is None:
            return s.encode("utf-8")
        try:
            return bytes(map(decoder.__getitem__, s))
        except KeyError:
            _refuse(f"token {i} ({s!r}) has characters outside the byte-level alphabet")

    tokens = [token_bytes(i) for i in range(n)]
    if any(not t or len(t) > 1024 for t in tokens):
        _refuse("a token is empty or longer than 1024 bytes")
    merges = []
    for m in model.get("merges") or []:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a not in vocab or b not in vocab or a + b not in vocab:
            _refuse(f"the merge {a!r} + {b!r} is not of tokens into a token")
        merges.append((vocab[a], vocab[b]))
    unk = vocab.get(model.get("unk_token"), -1) if model.get("unk_token") is not None else -1
    with_special, without = list(encode("a", True)), list(encode("a", False))
    at = next((k for k in range(len(with_special) - len(without) + 1)
               if with_special[k:k + len(without)] == without), None)
    if at is None:
        _refuse("its special tokens are not a prefix and a suffix of the text's")
    prefix, suffix = with_special[:at], with_special[at + len(without):]
    eos = eos if eos is not None else eos_default
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    if len(prefix) > _MAX_AFFIX or len(suffix) > _MAX_AFFIX or len(eos) > _MAX_AFFIX:
        _refuse("more than 16 prefix, suffix or end-of-sequence ids")
    if any(not 0 <= i < n for i in eos):
        raise KilnError(f"kiln.save(tokenizer=...): eos ids {eos} are not all tokens of its {n}")
    out = [b"KILNTOKN", struct.pack("<IIIIIIIiIII", 1, kind, pattern, flags, n, len(merges), len(added), unk,
                                    len(prefix), len(suffix), len(eos))]
    out.append(struct.pack(f"<{len(prefix) + len(suffix) + len(eos)}I", *prefix, *suffix, *eos))
    out.append(struct.pack(f"<{n}I", *map(len, tokens)))
    out.extend(tokens)
    out.append(struct.pack(f"<{2 * len(merges)}I", *(i for pair in merges for i in pair)))
    out.append(b"".join(struct.pack("<II", a["id"], int(bool(a.get("special")))) for a in added))
    return b"".join(out)


def chat_section_of(tok):
    """The "chat" section for `tok`'s chat template, or None when it has
    none: the text the template puts before and after one user message
    with the generation prompt (`apply_chat_template([{"role": "user",
    "content": ...}], add_generation_prompt=True)`), so `kiln generate
    --chat TEXT` prompts an instruct model as Python would. Layout:
    "KILNCHAT", u32 version (1), u32 bytes before B, u32 bytes after A,
    then the B and A bytes (UTF-8). A template that does not place the
    message once, verbatim, gives none."""
    if not getattr(tok, "chat_template", None) or not hasattr(tok, "apply_chat_template"):
        return None
    try:
        text = tok.apply_chat_template([{"role": "user", "content": _MARK_USER}], add_generation_prompt=True,
                                       tokenize=False)
    except Exception:  # a template that needs more (a system message, tools): none
        return None
    if not isinstance(text, str) or text.count(_MARK_USER) != 1:
        return None
    before, after = (part.encode("utf-8") for part in text.split(_MARK_USER))
    return b"KILNCHAT" + struct.pack("<III", 1, len(before), len(after)) + before + after
