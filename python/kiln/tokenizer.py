"""A Hugging Face tokenizer as the .kiln artifact's "tokenizer" section, so
that `kiln generate --text` reads and writes text with no Python:

    kiln.save(compiled, "step.kiln", tokenizer=AutoTokenizer.from_pretrained(path))

The C side (src/runtime/kiln_tokenizer.h, which documents the layout)
encodes as Hugging Face's tokenizers library does for BPE models of two
families: byte-level (GPT-2's pattern, Llama 3's, Qwen2's 1-digit form,
Qwen3.5's, o200k's as GPT-OSS, Tekken's as Mistral Nemo and later) and
SentencePiece-style (U+2581 for spaces, byte fallback: Llama 2,
TinyLlama, Mistral v0.1). Anything else (a normalizer beyond those, another
model type, added tokens matched with lstrip/rstrip) is refused here by
name, never carried half-understood; an NFC normalizer (Qwen2's) is
carried as a check: kiln encodes text NFC leaves as it is and refuses the
rest by name (it does not normalize). This is conversion only: the JSON
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
# kiln_tokenizer.c's pattern ids: GPT-2; Llama 3 (cl100k); Qwen2 (1-digit
# numbers); o200k (GPT-OSS); Tekken (Mistral Nemo and later, Nemotron);
# Qwen3.5 (marks join words).
_PATTERNS = {_GPT2: 1, _LLAMA3: 2, _QWEN2: 3, _O200K: 4, _TEKKEN: 5, _QWEN35: 6}
_BYTE_LEVEL, _SENTENCEPIECE = 1, 2
_IGNORE_MERGES, _PREPEND, _PREPEND_UNLESS_THERE, _PREPEND_FIRST, _BYTE_FALLBACK, _FUSE_UNK, _NFC = 1, 2, 4, 8, 16, 32, 64
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
                    "Llama 3, Qwen2, Qwen3.5, o200k and Tekken patterns) and SentencePiece-style BPE "
                    "(Llama 2, Mistral v0.1)")


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
    if pre and pre.get("type") == "ByteLevel" or pre and pre.get("type") == "Sequence":
        if norm is not None and norm.get("type") == "NFC":
            flags |= _NFC  # (the C side refuses text NFC would change)
        elif norm is not None:
            _refuse(f"a {norm.get('type')} normalizer before a byte-level pre-tokenizer")
        parts = pre["pretokenizers"] if pre["type"] == "Sequence" else [pre]
        pattern = None
        if len(parts) == 1 and parts[0].get("type") == "ByteLevel" and parts[0].get("use_regex", True):
            pattern, level = 1, parts[0]
        elif (len(parts) == 2 and parts[0].get("type") == "Split" and parts[1].get("type") == "ByteLevel"
              and not parts[1].get("use_regex", True) and parts[0].get("behavior") == "Isolated"
              and not parts[0].get("invert")):
            regex = (parts[0].get("pattern") or {}).get("Regex")
            if regex not in _PATTERNS:
                _refuse(f"the pre-tokenizing pattern {regex!r} is not one kiln knows")
            pattern, level = _PATTERNS[regex], parts[1]
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
        if a.get("normalized") and spec.get("normalizer") is not None:
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
