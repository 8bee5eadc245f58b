"""JSON text as regexes: code-point sets, their canonical JSON string encodings,
literals, and the lexemes every schema grammar shares.

All regexes here are in Python ``re`` syntax and written so that they survive
Lark's literal escaping (no ``\\x``-style escape ever stands for a regex
metacharacter): the grammar text and the ``GrammarIR`` carry the same patterns.
"""

from __future__ import annotations

import json.encoder
import re

MAX_CP = 0x10FFFF

# intervals of code points: sorted, disjoint, non-adjacent [(lo, hi), ...]
Intervals = list


def iv_norm(ivs) -> Intervals:
    """Sort and merge intervals."""
    out: list[list[int]] = []
    for lo, hi in sorted(ivs):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(a, b) for a, b in out]


def iv_complement(ivs) -> Intervals:
    """All code points not in ``ivs``."""
    out, prev = [], 0
    for lo, hi in iv_norm(ivs):
        if lo > prev:
            out.append((prev, lo - 1))
        prev = hi + 1
    if prev <= MAX_CP:
        out.append((prev, MAX_CP))
    return out


def iv_intersect(a, b) -> Intervals:
    """Code points in both."""
    return iv_complement(iv_complement(a) + iv_complement(b))


_SHORT_ESCAPES = {0x22: r'\\"', 0x5C: r"\\\\", 0x08: r"\\b", 0x0C: r"\\f", 0x0A: r"\\n",
                  0x0D: r"\\r", 0x09: r"\\t"}
#: characters JSON must escape
NEEDS_ESCAPE = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
#: characters written as themselves (surrogates excluded: UTF-8 output cannot carry them)
RAW_OK = iv_complement(NEEDS_ESCAPE + [(0xD800, 0xDFFF)])


def char_re(cp: int) -> str:
    """One code point as a regex atom that Lark's escaping leaves intact."""
    c = chr(cp)
    if c.isascii() and c.isalnum():
        return c
    if 0x20 < cp < 0x7F:
        return "\\" + c
    if cp == 0x20:
        return "\\x20"
    if cp < 0x100:
        return "\\x%02x" % cp
    if cp < 0x10000:
        return "\\u%04x" % cp
    return "\\U%08x" % cp


def class_re(ivs) -> str:
    """A character class for the intervals (which must not be empty)."""
    ivs = iv_norm(ivs)
    if len(ivs) == 1 and ivs[0][0] == ivs[0][1]:
        return char_re(ivs[0][0])
    body = []
    for lo, hi in ivs:
        if lo == hi:
            body.append(char_re(lo))
        elif hi == lo + 1:
            body.append(char_re(lo) + char_re(hi))
        else:
            body.append(char_re(lo) + "-" + char_re(hi))
    return "[" + "".join(body) + "]"


def encoded_class(ivs) -> str | None:
    """A regex for the canonical JSON encodings (as ``json.dumps(...,
    ensure_ascii=False)`` writes them) of one character from ``ivs``; ``None`` if
    no such character can be written."""
    ivs = iv_norm(ivs)
    alts = []
    raw = iv_intersect(ivs, RAW_OK)
    if raw:
        alts.append(class_re(raw))
    controls = []
    for lo, hi in iv_intersect(ivs, NEEDS_ESCAPE):
        for cp in range(lo, hi + 1):
            if cp in _SHORT_ESCAPES:
                alts.append(_SHORT_ESCAPES[cp])
            else:
                controls.append(cp)
    if controls:
        if len(controls) == 32 - 5:
            alts.append(r"\\u00(?:0[0-7bef]|1[0-9a-f])")
        else:
            alts.append(r"\\u00(?:" + "|".join("%02x" % c for c in controls) + ")")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


#: a ``\u`` escape of one code point: of a surrogate only as a pair, high then
#: low (a lone one, which RFC 8259 leaves legal, decodes to a Python ``str``
#: with no UTF-8 encoding, which Pydantic, serde_json and I-JSON (RFC 7493) refuse)
_U_ESCAPE = (r'\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}'
             r'|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})')
#: one character of a JSON string in any legal encoding (unbounded strings)
JSON_CHAR_ANY = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|' + _U_ESCAPE + ')'
#: one code point of a JSON string (a surrogate pair's two escapes are one), so
#: that a length counted in these units is the length Python's ``json`` decodes
JSON_CODEPOINT = r'(?:[^"\\\x00-\x1f\ud800-\udfff]|\\["\\/bfnrt]|' + _U_ESCAPE + ')'
#: any character, canonically encoded
CANON_ANY = encoded_class([(0, MAX_CP)])
#: a JSON integer, and any JSON number
JSON_INTEGER = r"-?(?:0|[1-9][0-9]*)"
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+\-]?[0-9]+)?"
#: any JSON string, quotes included
JSON_STRING = '"' + JSON_CHAR_ANY + '*"'

_LIT_ASCII = {o: char_re(o) for o in range(128)}


def lit(text: str) -> str:
    """A literal string as a regex that survives Lark's escaping."""
    if text.isascii():  # member names, mostly: one translate, not a loop
        return text.translate(_LIT_ASCII)
    return "".join(map(char_re, map(ord, text)))


#: ``json.dumps(s, ensure_ascii=False)`` for a string ``s``: the C encoder json.dumps
#: itself ends in, without building a JSONEncoder per call (a compile writes one
#: per member name; the cold first json.dumps cost ~25 us of a median compile)
json_str = json.encoder.encode_basestring


def json_bytes(name: str) -> bytes | None:
    """``name`` as a canonical JSON string with its quotes, in UTF-8 (the encoding
    ``encoded_class`` allows); ``None`` for a lone surrogate, which no canonical
    encoding spells."""
    try:
        return json_str(name).encode("utf-8")
    except UnicodeEncodeError:
        return None


def encodable(text: str) -> bool:
    """Whether ``text`` has a UTF-8 encoding (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_LARK_SPECIAL = re.compile(r'\\(.)|[/"]', re.S)


def _escape_one(m) -> str:
    c = m.group(1)
    if c is None:
        return "\\/" if m.group(0) == "/" else "\\x22"
    return "\\x22" if c == '"' else m.group(0)


def escape_lark_regex(rx: str) -> str:
    """``rx`` as the body of a Lark ``/.../`` literal.

    Lark evaluates the literal like a Python string and then turns every
    backslash-quote into a bare quote, so the regex ``\\\\"`` (an escaped backslash,
    then a quote) would lose a backslash; quotes are written ``\\x22`` instead,
    and slashes ``\\/``. (One regex substitution: a loop over the characters was
    the largest cost of translating schemas with long key regexes.)"""
    return _LARK_SPECIAL.sub(_escape_one, rx)
