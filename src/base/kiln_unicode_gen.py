"""Writes kiln_unicode_tables.c: the code point ranges of Unicode's
letters (general category L*), numbers (N*), marks (M*), punctuation (P*),
symbols (S*) and the cased letters (Lu with Lt, Ll), from Unicode 16.0's
data (PyPI's unicodedata2 16.0.0: Python 3.11's own unicodedata is 14.0;
tokenizers 0.23's regular expressions, the reference, know 16.0's letters,
not 17.0's: test_tokenizer.py checks the code points assigned since 14.0), for the tokenizer's pre-tokenizing patterns (\\p{L}, \\p{N},
\\p{M}, DeepSeek's \\p{P} and \\p{S}, o200k's \\p{Lu}\\p{Lt} and \\p{Ll});
DeepSeek LLM's explicit letter class, read from its regular expression's
text; and for NFC (UAX #15): the quick check's canonical combining
classes and the code points NFC changes (NFC_Quick_Check=No) or may join
to the one before (Maybe: the second of a canonical composition that NFC
makes, and Hangul's vowel and trailing jamo), then the full canonical
decompositions and the pairs NFC composes (Hangul's are computed).

tokenizers 0.23 normalizes with older Unicode data than its regular
expressions' (before 13.0: marks added since are class 0 to it, and it
makes none of the compositions added since): the code points whose
normalization it does not share with 16.0 are found by asking it
(tokenizers.normalizers.NFC and NFD, in unlike_tokenizers) and listed, so
that kiln refuses text holding one rather than guess.

    pip install unicodedata2==16.0.0 tokenizers==0.23.3
    python3 src/base/kiln_unicode_gen.py > src/base/kiln_unicode_tables.c
"""
import ast
import pathlib

UNICODE = "16.0.0"
try:
    import unicodedata2 as unicodedata
except ImportError:
    raise SystemExit(f"kiln_unicode_gen.py needs Unicode {UNICODE}'s data: pip install unicodedata2=={UNICODE}")
if unicodedata.unidata_version != UNICODE:
    raise SystemExit(f"unicodedata2 has Unicode {unicodedata.unidata_version}, not {UNICODE}: "
                     f"pip install unicodedata2=={UNICODE}")


def ranges(categories):
    """Ranges of the code points whose general category starts with one of
    `categories` ("L": every letter; "Lu": upper case only)."""
    out, start = [], None
    for cp in range(0x110000):
        inside = unicodedata.category(chr(cp)).startswith(categories)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def table(name, rs):
    rows = [f"    {{0x{a:X}, 0x{b:X}}}," for a, b in rs]
    return (f"const kiln_unicode_range_t {name}[] = {{\n" + "\n".join(rows) + "\n};\n"
            f"const int {name}_count = {len(rs)};\n")


def deepseek_llm_letters():
    """DeepSeek LLM's letters: the bracket of its second Split,
    \\s?[A-Za-z\\u00b5...]+, as python/kiln/tokenizer.py's _DEEPSEEK_LETTERS
    spells it (the string kiln accepts, character for character as the
    model's tokenizer.json has it), read from that file's text."""
    path = pathlib.Path(__file__).resolve().parents[2] / "python" / "kiln" / "tokenizer.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["_DEEPSEEK_LETTERS"]:
            return ast.literal_eval(node.value)
    raise SystemExit(f"no _DEEPSEEK_LETTERS in {path}")


def class_ranges(text):
    """The code points of a regular expression's bracket of characters and
    a-b ranges (no escapes), merged into sorted ranges."""
    cps, i = set(), 0
    while i < len(text):
        if i + 2 < len(text) and text[i + 1] == "-":
            cps.update(range(ord(text[i]), ord(text[i + 2]) + 1))
            i += 3
        else:
            cps.add(ord(text[i]))
            i += 1
    return set_ranges(cps)


def nfc_sets():
    no, maybe = set(), set()
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        if unicodedata.normalize("NFC", c) != c:
            no.add(cp)
        d = unicodedata.decomposition(c)
        if d and not d.startswith("<"):
            parts = [int(x, 16) for x in d.split()]
            if len(parts) == 2 and unicodedata.normalize("NFC", "".join(map(chr, parts))) == c:
                maybe.add(parts[1])
    maybe |= set(range(0x1161, 0x1176)) | set(range(0x11A8, 0x11C3))
    return no, maybe - no


def set_ranges(s):
    out = []
    for cp in sorted(s):
        if out and out[-1][1] == cp - 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def ccc_ranges():
    out = []
    for cp in range(0x110000):
        k = unicodedata.combining(chr(cp))
        if k and out and out[-1][1] == cp - 1 and out[-1][2] == k:
            out[-1][1] = cp
        elif k:
            out.append([cp, cp, k])
    return out


def decompositions():
    """(code point, its full canonical decomposition): NFD of each code
    point NFD changes, Hangul's syllables left out (computed)."""
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or 0xAC00 <= cp <= 0xD7A3:
            continue
        d = unicodedata.normalize("NFD", chr(cp))
        if d != chr(cp):
            out.append((cp, [ord(x) for x in d]))
    return out


def compositions():
    """(first, second, composite) of every pair NFC composes (the primary
    composites: a canonical decomposition of two, not excluded), sorted,
    Hangul's left out (computed)."""
    out = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF or 0xAC00 <= cp <= 0xD7A3:
            continue
        d = unicodedata.decomposition(chr(cp))
        if d and not d.startswith("<"):
            parts = [int(x, 16) for x in d.split()]
            if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp):
                out.append((parts[0], parts[1], cp))
    return sorted(out)


def unlike_tokenizers():
    """The code points whose normalization tokenizers' NFC does not share
    with Unicode 16.0's, found by asking it: one whose NFD or NFC alone
    differs (a composite it does not know); a mark whose order among marks
    of every class, or whose blocking of a composition across it, differs
    (a class it does not know: 0 to it); the first of a pair 16.0 composes
    and it does not (each such first is of a script it does not know)."""
    from tokenizers.normalizers import NFC, NFD

    nfc, nfd = NFC(), NFD()

    def same(s):
        return (nfd.normalize_str(s) == unicodedata.normalize("NFD", s)
                and nfc.normalize_str(s) == unicodedata.normalize("NFC", s))

    out = set()
    for cp in range(0x110000):
        if not 0xD800 <= cp <= 0xDFFF and not same(chr(cp)):
            out.add(cp)
    marks = [cp for cp in range(0x110000) if unicodedata.combining(chr(cp))]
    refs = {}
    for m in marks:  # one mark of each class: the lowest, the oldest
        refs.setdefault(unicodedata.combining(chr(m)), m)

    def pair_same(a, b):
        return same("a" + chr(a) + chr(b)) and same("a" + chr(b) + chr(a))

    while True:  # drop the marks of classes tokenizers does not know, the worst first
        bad = {k: sum(not pair_same(r, q) for q in refs.values()) for k, r in refs.items()}
        worst = max(bad, key=bad.get)
        if not bad[worst]:
            break
        del refs[worst]
    for m in marks:
        if not same("a" + chr(m) + "\u0301") or any(not pair_same(m, r) for r in refs.values()):
            out.add(m)
    for a, b, c in compositions():
        if nfc.normalize_str(chr(a) + chr(b)) != chr(c):
            out.add(a)
    return out


print(f"""/* Generated by kiln_unicode_gen.py from unicodedata2 (Unicode {unicodedata.unidata_version}):
 * do not edit. Sorted, disjoint, inclusive ranges. */
#include "base/kiln_unicode.h"
""")
print(table("kiln_unicode_letters", ranges("L")))
print(table("kiln_unicode_numbers", ranges("N")))
print(table("kiln_unicode_marks", ranges("M")))
print(table("kiln_unicode_punctuation", ranges("P")))
print(table("kiln_unicode_symbols", ranges("S")))
print(table("kiln_unicode_deepseek_letters", class_ranges(deepseek_llm_letters())))
print(table("kiln_unicode_upper", ranges(("Lu", "Lt"))))
print(table("kiln_unicode_lower", ranges("Ll")))
NO, MAYBE = nfc_sets()
print(table("kiln_unicode_nfc_no", set_ranges(NO)))
print(table("kiln_unicode_nfc_maybe", set_ranges(MAYBE)))
rows = [f"    {{0x{a:X}, 0x{b:X}, {k}}}," for a, b, k in ccc_ranges()]
print("const kiln_unicode_class_range_t kiln_unicode_combining[] = {\n" + "\n".join(rows) + "\n};\n"
      f"const int kiln_unicode_combining_count = {len(rows)};")
DECOMP = decompositions()
parts, rows = [], []
for cp, d in DECOMP:
    rows.append(f"    {{0x{cp:X}, {len(parts)}, {len(d)}}},")
    parts.extend(d)
print("\nconst kiln_unicode_decomposition_t kiln_unicode_decompositions[] = {\n" + "\n".join(rows) + "\n};\n"
      f"const int kiln_unicode_decompositions_count = {len(rows)};")
print("const uint32_t kiln_unicode_decomposition_parts[] = {\n" +
      "\n".join("    " + " ".join(f"0x{p:X}," for p in parts[i:i + 8]) for i in range(0, len(parts), 8)) + "\n};")
rows = [f"    {{0x{a:X}, 0x{b:X}, 0x{c:X}}}," for a, b, c in compositions()]
print("\nconst kiln_unicode_composition_t kiln_unicode_compositions[] = {\n" + "\n".join(rows) + "\n};\n"
      f"const int kiln_unicode_compositions_count = {len(rows)};\n")
print(table("kiln_unicode_nfc_unlike", set_ranges(unlike_tokenizers())), end="")
