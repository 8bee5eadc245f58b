"""JSON string contents as regexes: character sets over the JSON encoding, the
``format`` regexes, and the translation of ``pattern`` regexes.

All regexes here describe the text *between* the quotes of a JSON string, in
Python ``re`` syntax, written so that they survive Lark's literal escaping (no
``\\x``-style escape ever stands for a regex metacharacter).

Soundness rule: ``jsonschema`` checks ``pattern`` with Python's ``re.search`` on the
decoded string, so every translation here accepts only encodings of strings that
Python's ``re.search`` accepts. Translations stay on the safe side where Python
and ECMA-262 differ (``\\d`` is ``[0-9]`` here, a subset of Python's Unicode
``\\d``).
"""

from __future__ import annotations

from functools import lru_cache

try:  # Python >= 3.11
    import re._constants as _sre_c
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c
    import sre_parse as _sre_parse
import re
import warnings

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


def iv_minus(a, b) -> Intervals:
    """Code points in ``a`` and not in ``b``."""
    return iv_intersect(a, iv_complement(b))


_SHORT_ESCAPES = {0x22: r'\\"', 0x5C: r"\\\\", 0x08: r"\\b", 0x0C: r"\\f", 0x0A: r"\\n",
                  0x0D: r"\\r", 0x09: r"\\t"}
# characters JSON must escape, and surrogates (which UTF-8 output cannot carry)
_NEEDS_ESCAPE = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]
_RAW_OK = iv_complement(_NEEDS_ESCAPE + [(0xD800, 0xDFFF)])


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
    raw = iv_intersect(ivs, _RAW_OK)
    if raw:
        alts.append(class_re(raw))
    controls = []
    for lo, hi in iv_intersect(ivs, _NEEDS_ESCAPE):
        for cp in range(lo, hi + 1):
            if cp in _SHORT_ESCAPES:
                alts.append(_SHORT_ESCAPES[cp])
            else:
                controls.append(cp)
    if controls:
        if len(controls) == 32 - 5:
            alts.append(r"\\u00(?:0[0-7bBeEfF]|1[0-9a-f])".replace("bBeEfF", "bef"))
        else:
            alts.append(r"\\u00(?:" + "|".join("%02x" % c for c in controls) + ")")
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


#: one character of a JSON string in any legal encoding (unbounded strings)
JSON_CHAR_ANY = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
#: one code point of a JSON string: \u escapes of surrogates are refused, so that
#: a length counted in these units is the length Python's ``json`` decodes
JSON_CODEPOINT = (r'(?:[^"\\\x00-\x1f\ud800-\udfff]|\\["\\/bfnrt]'
                  r'|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))')
#: any character, canonically encoded
CANON_ANY = encoded_class([(0, MAX_CP)])
#: a JSON integer, and any JSON number
JSON_INTEGER = r"-?(?:0|[1-9][0-9]*)"
JSON_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+\-]?[0-9]+)?"

# -- formats ------------------------------------------------------------------------

# February 29 only in leap years (Gregorian rule), as jsonschema's checker decides
_DATE = (r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
         r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
         r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)-02-29)")
# RFC 3339 full-time: the offset is required (as jsonschema's format checker, with
# its format extras installed, requires it); no leap second (the checker refuses
# 60): an enforced format must never let through what the checker rejects
_TIME = (r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?"
         r"(?:[zZ]|[+\-](?:[01][0-9]|2[0-3]):[0-5][0-9])")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H16 = r"[0-9a-fA-F]{1,4}"
_LS32 = rf"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "(?:" + "|".join([
    rf"(?:{_H16}:){{6}}{_LS32}",
    rf"::(?:{_H16}:){{5}}{_LS32}",
    rf"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    rf"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_SHORT_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,28}[A-Za-z0-9])?"
# a hostname is at most 253 characters (jsonschema's checker enforces it); a regex
# cannot count across labels cheaply, so: a first label of up to 63 characters and
# up to six more of up to 30 (at most 249) — exact below those sizes, never longer
_HOSTNAME = rf"{_LABEL}(?:\.{_SHORT_LABEL}){{0,6}}"
_EMAIL_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"
_EMAIL = r"[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]+(?:\.[A-Za-z0-9!#$%&'*+\-/=?^_`{|}~]+)*@" + _EMAIL_DOMAIN
# RFC 3986 URI and URI-reference, exactly (checked against rfc3986-validator, which
# jsonschema's format checker uses, on 600k random strings)
_UNRESERVED = r"[A-Za-z0-9\-._~]"
_PCT = r"%[0-9A-Fa-f]{2}"
_SUBDELIM = r"[!$&'()*+,;=]"
_PCHAR = rf"(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM}|[:@])"
_AUTHORITY = (rf"(?:(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM}|:)*@)?"
              rf"(?:\[(?:{_IPV6}|v[0-9A-Fa-f]+\.(?:{_UNRESERVED}|{_SUBDELIM}|:)+)\]"
              rf"|(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM})*)(?::[0-9]*)?")
_PATH_ABEMPTY = rf"(?:/{_PCHAR}*)*"
_PATH_ABSOLUTE = rf"/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?"
_QUERY_FRAGMENT = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_URI = (rf"[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
        rf"|{_PCHAR}+(?:/{_PCHAR}*)*|){_QUERY_FRAGMENT}")
_URI_REFERENCE = (rf"(?:{_URI}|(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
                  rf"|(?:{_UNRESERVED}|{_PCT}|{_SUBDELIM}|@)+(?:/{_PCHAR}*)*|){_QUERY_FRAGMENT})")

#: content regexes of the formats enforced; every one uses only characters that
#: need no JSON escaping. Formats not listed are annotations and are not enforced.
FORMATS = {
    "date-time": rf"{_DATE}[Tt]{_TIME}",
    "date": _DATE,
    "time": _TIME,
    "email": _EMAIL,
    "uri": _URI,
    "uri-reference": _URI_REFERENCE,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "hostname": _HOSTNAME,
}


# plain ints: a RegexFlag operation goes through the enum module's Python code
# (~20 us cold in a compile)
_IGNORECASE, _DOTALL, _UNICODE, _MULTILINE = (int(f) for f in (re.IGNORECASE, re.DOTALL, re.UNICODE,
                                                                 re.MULTILINE))
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


# -- pattern translation -----------------------------------------------------------

class PatternUnsupported(Exception):
    """The pattern uses a construct that cannot be translated soundly."""


@lru_cache(maxsize=None)
def _python_category(name: str) -> tuple:
    """Every code point Python's ``re`` puts in a category (Unicode mode)."""
    rx = re.compile({"d": r"\d", "w": r"\w", "s": r"\s"}[name])
    ivs, start = [], None
    for cp in range(MAX_CP + 2):
        hit = cp <= MAX_CP and rx.match(chr(cp)) is not None
        if hit and start is None:
            start = cp
        elif not hit and start is not None:
            ivs.append((start, cp - 1))
            start = None
    return tuple(ivs)


_SMALL_CATS = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_CATS = {
    _sre_c.CATEGORY_DIGIT: ("d", False), _sre_c.CATEGORY_NOT_DIGIT: ("d", True),
    _sre_c.CATEGORY_WORD: ("w", False), _sre_c.CATEGORY_NOT_WORD: ("w", True),
    _sre_c.CATEGORY_SPACE: ("s", False), _sre_c.CATEGORY_NOT_SPACE: ("s", True),
}


def _category(cat, over: bool):
    """A category as intervals: a subset of Python's set (``over=False``) or a
    superset of it (``over=True``)."""
    name, negated = _CATS[cat]
    if not negated:
        return list(_python_category(name)) if over else _SMALL_CATS[name]
    return iv_complement(_SMALL_CATS[name] if over else list(_python_category(name)))


def _ascii_case(ivs):
    """Add the other ASCII case of every ASCII letter in ``ivs``."""
    extra = []
    for lo, hi in ivs:
        for a, b, delta in ((0x41, 0x5A, 32), (0x61, 0x7A, -32)):
            x, y = max(lo, a), min(hi, b)
            if x <= y:
                extra.append((x + delta, y + delta))
    return iv_norm(list(ivs) + extra)


def _has_non_ascii_cased(ivs) -> bool:
    for lo, hi in ivs:
        if hi >= 0x80:
            for cp in range(max(lo, 0x80), min(hi, 0x2FFFF) + 1):
                c = chr(cp)
                if c.lower() != c or c.upper() != c:
                    return True
    return False


class _Piece:
    """A translated regex fragment: text, length bounds in code points (``hi=None``:
    unbounded), and, for a repetition of one character class, its unit and
    bounds (so that a length limit can be folded into it)."""

    __slots__ = ("text", "lo", "hi", "unit", "rlo", "rhi")

    def __init__(self, text, lo, hi, unit=None, rlo=0, rhi=None):
        self.text, self.lo, self.hi = text, lo, hi
        self.unit, self.rlo, self.rhi = unit, rlo, rhi

    def render(self) -> str:
        if self.unit is None:
            return self.text
        return _repeat(self.unit, self.rlo, self.rhi)


def _repeat(unit: str, lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, None):
        return unit + "*"
    if (lo, hi) == (1, None):
        return unit + "+"
    if (lo, hi) == (0, 1):
        return unit + "?"
    if hi is None:
        return unit + "{%d,}" % lo
    if lo == hi:
        return unit + "{%d}" % lo if lo != 1 else unit
    return unit + "{%d,%d}" % (lo, hi)


def _group(text: str) -> str:
    return text if _is_atom(text) else "(?:" + text + ")"


def _is_atom(text: str) -> bool:
    if len(text) == 1 or (len(text) == 2 and text[0] == "\\"):
        return True
    if text.startswith("[") and text.endswith("]") and text.count("]") == 1 + text.count("\\]"):
        return True
    if text.startswith("(?:") and text.endswith(")"):
        depth = 0
        i = 0
        while i < len(text):
            c = text[i]
            if c == "\\":
                i += 2
                continue
            if c == "[":
                j = i + 1
                while j < len(text) and text[j] != "]":
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0 and i != len(text) - 1:
                    return False
            i += 1
        return True
    return False


class _Translator:
    """Python ``re`` syntax tree → regex over canonical JSON string content."""

    def __init__(self, flags: int):
        self.flags = flags

    def charset(self, ivs, flags) -> _Piece:
        if flags & _IGNORECASE:
            if _has_non_ascii_cased(ivs):
                raise PatternUnsupported("case-insensitive matching of non-ASCII letters")
            ivs = _ascii_case(ivs)
        text = encoded_class(ivs)
        if text is None:
            raise PatternUnsupported("a character class that matches nothing writable")
        return _Piece(text, 1, 1)

    def in_set(self, items, flags, over: bool):
        """The intervals of an ``IN`` node: a subset of what Python matches, or a
        superset (``over``)."""
        negate = False
        ivs = []
        for op, av in items:
            if op is _sre_c.NEGATE:
                negate = True
            elif op is _sre_c.LITERAL:
                ivs.append((av, av))
            elif op is _sre_c.RANGE:
                ivs.append(av)
            elif op is _sre_c.CATEGORY:
                ivs.extend(_category(av, over != negate))
            else:
                raise PatternUnsupported(f"class item {op}")
        if negate:
            if flags & _IGNORECASE:
                raise PatternUnsupported("case-insensitive negated class")
            return iv_complement(ivs)
        return iv_norm(ivs)

    def seq(self, items, flags) -> list[_Piece]:
        return [self.node(op, av, flags) for op, av in items]

    def node(self, op, av, flags) -> _Piece:
        c = _sre_c
        if op is c.LITERAL:
            return self.charset([(av, av)], flags)
        if op is c.NOT_LITERAL:
            if flags & _IGNORECASE:
                raise PatternUnsupported("case-insensitive negated literal")
            return self.charset(iv_complement([(av, av)]), flags)
        if op is c.ANY:
            ivs = [(0, MAX_CP)] if flags & _DOTALL else iv_complement([(10, 10)])
            return self.charset(ivs, 0)
        if op is c.IN:
            return self.charset(self.in_set(av, flags, over=False), flags & ~_IGNORECASE
                                if not (flags & _IGNORECASE) else flags)
        if op is c.BRANCH:
            alts = [self.concat(self.seq(b, flags)) for b in av[1]]
            los = [a.lo for a in alts]
            his = [a.hi for a in alts]
            hi = None if None in his else max(his)
            return _Piece("(?:" + "|".join(a.render() for a in alts) + ")", min(los), hi)
        if op is c.SUBPATTERN:
            _group_id, add, delete, sub = av
            if (add | delete) & ~(_IGNORECASE | _DOTALL | _UNICODE):
                raise PatternUnsupported("inline flags other than i and s")
            inner = self.concat(self.seq(sub, (flags | add) & ~delete))
            return inner
        if op in (c.MAX_REPEAT, c.MIN_REPEAT):
            lo, hi, sub = av
            hi = None if hi is _sre_c.MAXREPEAT else hi
            inner = self.concat(self.seq(sub, flags))
            if inner.hi == 0:
                return _Piece("", 0, 0)
            ilo = inner.lo * lo
            ihi = None if (hi is None or inner.hi is None) else inner.hi * hi
            if inner.unit is not None and inner.rhi is None and inner.rlo <= 1 and hi != 0:
                # (u+)? is u*, (u*){m,n} is u*, (u+){m,n} (m >= 1) is u{m,}
                rlo = lo * inner.rlo
                return _Piece(_repeat(inner.unit, rlo, None), rlo, None, inner.unit, rlo, None)
            text = _group(inner.render())
            unit = text if (inner.lo, inner.hi, inner.unit) == (1, 1, None) else None
            if unit is not None:
                return _Piece(_repeat(text, lo, hi), ilo, ihi, unit, lo, hi)
            return _Piece(_repeat(text, lo, hi), ilo, ihi)
        if op is c.AT:
            raise PatternUnsupported("an anchor or word boundary inside the pattern")
        raise PatternUnsupported(f"the regex construct {op}")

    @staticmethod
    def concat(pieces: list[_Piece]) -> _Piece:
        if len(pieces) == 1:
            return pieces[0]
        lo = sum(p.lo for p in pieces)
        his = [p.hi for p in pieces]
        hi = None if None in his else sum(his)
        return _Piece("".join(_group(p.render()) if p.unit is None and "|" in p.render()
                              and not _is_atom(p.render()) else p.render() for p in pieces),
                      lo, hi)


def _split_branches(items):
    """Top-level alternatives of a parsed pattern (unwrapping plain groups)."""
    while len(items) == 1 and items[0][0] is _sre_c.SUBPATTERN and not (items[0][1][1] | items[0][1][2]):
        items = list(items[0][1][3])
    if len(items) == 1 and items[0][0] is _sre_c.BRANCH:
        out = []
        for b in items[0][1][1]:
            out.extend(_split_branches(list(b)))
        return out
    # Python factors a common prefix out of alternatives ("^a|^b" is "^(?:a|b)"):
    # anchors around one alternation are distributed into it
    inner = [i for i, (op, _) in enumerate(items) if op is not _sre_c.AT]
    if len(inner) == 1 and len(items) > 1 and items[inner[0]][0] is _sre_c.SUBPATTERN \
            and not (items[inner[0]][1][1] | items[inner[0]][1][2]):
        k = inner[0]
        return _split_branches(list(items[:k]) + list(items[k][1][3]) + list(items[k + 1:]))
    branches = [i for i, (op, _) in enumerate(items) if op is _sre_c.BRANCH]
    if len(branches) == 1 and all(op is _sre_c.AT for i, (op, _) in enumerate(items)
                                  if i != branches[0]):
        k = branches[0]
        out = []
        for b in items[k][1][1]:
            out.extend(_split_branches(list(items[:k]) + list(b) + list(items[k + 1:])))
        return out
    return [list(items)]


_STARTS = {_sre_c.AT_BEGINNING, _sre_c.AT_BEGINNING_STRING}
_ENDS = {_sre_c.AT_END, _sre_c.AT_END_STRING}


def translate_pattern(pattern: str, min_len: int = 0, max_len: int | None = None) -> str | None:
    """A regex over canonical JSON string content accepting only (encodings of)
    strings ``s`` with ``re.search(pattern, s)`` and ``min_len <= len(s) <=
    max_len``. ``None`` when no string qualifies.

    Raises:
        PatternUnsupported: lookaround, backreferences, anchors inside the pattern,
            or a length bound that cannot be folded into the pattern.
        re.error: the pattern is not a Python regex.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Python's FutureWarning about [[ and --
        parsed = _sre_parse.parse(pattern)
    flags = parsed.state.flags
    if flags & ~(_IGNORECASE | _DOTALL | _UNICODE | _MULTILINE):
        raise PatternUnsupported("regex flags")
    alts = []
    for branch in _split_branches(list(parsed)):
        anchored_start = anchored_end = False
        while branch and branch[0][0] is _sre_c.AT and branch[0][1] in _STARTS:
            branch = branch[1:]
            anchored_start = True
        while branch and branch[-1][0] is _sre_c.AT and branch[-1][1] in _ENDS:
            branch = branch[:-1]
            anchored_end = True
        tr = _Translator(flags)
        pieces = tr.seq(branch, flags)
        if not anchored_start:
            pieces.insert(0, _Piece(CANON_ANY + "*", 0, None, CANON_ANY, 0, None))
        if not anchored_end:
            pieces.append(_Piece(CANON_ANY + "*", 0, None, CANON_ANY, 0, None))
        text = _fit_length(pieces, min_len, max_len)
        if text is not None:
            alts.append(text)
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def anchored_prefix(pattern: str) -> str | None:
    """The literal text every match of ``re.search(pattern, s)`` puts at the start
    of ``s`` (``^abc...``), or ``None``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = _sre_parse.parse(pattern)
    except re.error:
        return None
    if parsed.state.flags & _IGNORECASE:
        return None
    items = list(parsed)
    if not items or items[0][0] is not _sre_c.AT or items[0][1] not in _STARTS:
        return None
    out = []
    for op, av in items[1:]:
        if op is not _sre_c.LITERAL:
            break
        out.append(chr(av))
    return "".join(out) if out else None


def patterns_disjoint(a: str, b: str) -> bool:
    """Whether no string matches both patterns (decided by anchored literal
    prefixes; ``False`` when unsure)."""
    pa, pb = anchored_prefix(a), anchored_prefix(b)
    return pa is not None and pb is not None and not pa.startswith(pb) and not pb.startswith(pa)


def pattern_class_star(pattern: str):
    """``(intervals, min)`` when the pattern is ``^C*$`` or ``^C+$`` for one
    character class ``C`` (intervals: a subset of what Python matches), else
    ``None``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = _sre_parse.parse(pattern)
        flags = parsed.state.flags
        if flags & _IGNORECASE:
            return None
        branches = _split_branches(list(parsed))
        if len(branches) != 1:
            return None
        b = branches[0]
        if len(b) != 3 or b[0][0] is not _sre_c.AT or b[0][1] not in _STARTS \
                or b[2][0] is not _sre_c.AT or b[2][1] not in _ENDS:
            return None
        op, av = b[1]
        if op is not _sre_c.MAX_REPEAT and op is not _sre_c.MIN_REPEAT:
            return None
        lo, hi, sub = av
        if hi is not _sre_c.MAXREPEAT or lo > 1:
            return None
        sub = list(sub)
        while len(sub) == 1 and sub[0][0] is _sre_c.SUBPATTERN and not (sub[0][1][1] | sub[0][1][2]):
            sub = list(sub[0][1][3])
        if len(sub) != 1:
            return None
        op, av = sub[0]
        tr = _Translator(flags)
        if op is _sre_c.IN:
            return tr.in_set(av, flags, over=False), lo
        if op is _sre_c.LITERAL:
            return [(av, av)], lo
        return None
    except (PatternUnsupported, re.error, RecursionError):
        return None


def matches_everything(pattern: str) -> bool:
    """Whether ``re.search(pattern, s)`` holds for every string ``s`` (decided for
    patterns with an alternative that can match empty and is not anchored at
    both ends, e.g. ``.*`` or ``^[a-z]*``); ``False`` when unsure."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parsed = _sre_parse.parse(pattern)
        for branch in _split_branches(list(parsed)):
            start = bool(branch) and branch[0][0] is _sre_c.AT and branch[0][1] in _STARTS
            end = bool(branch) and branch[-1][0] is _sre_c.AT and branch[-1][1] in _ENDS
            body = [x for x in branch if x[0] is not _sre_c.AT]
            if len(body) != len(branch) - start - end:
                continue
            if start and end:
                continue
            tr = _Translator(parsed.state.flags)
            if tr.concat(tr.seq(body, parsed.state.flags) or [_Piece("", 0, 0)]).lo == 0:
                return True
    except (PatternUnsupported, re.error, RecursionError):
        return False
    return False


def _fit_length(pieces: list[_Piece], min_len: int, max_len: int | None) -> str | None:
    """The concatenation restricted to lengths in ``[min_len, max_len]``."""
    lo = sum(p.lo for p in pieces)
    his = [p.hi for p in pieces]
    hi = None if None in his else sum(his)
    if lo >= min_len and (max_len is None or (hi is not None and hi <= max_len)):
        return "".join(p.render() for p in pieces)
    if max_len is not None and lo > max_len:
        return None
    if hi is not None and hi < min_len:
        return None
    fits_max = max_len is None or (hi is not None and hi <= max_len)
    if min_len == 1 and lo == 0 and fits_max and all(p.unit is not None or p.hi == 0 for p in pieces):
        # non-empty: some repetition is the first to take a character (exact)
        alts = []
        for i, p in enumerate(pieces):
            if p.unit is None or p.rhi == 0:
                continue
            parts = [_Piece("", 0, 0, q.unit, 0, 0).render() if q.unit is not None else q.render()
                     for q in pieces[:i]]
            parts = [x for x in parts if not x.endswith("{0}")]
            parts.append(_repeat(p.unit, max(1, p.rlo), p.rhi))
            parts.extend(q.render() for q in pieces[i + 1:])
            alts.append("".join(parts))
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    # share the bounds out over the repetitions of one character class: each may
    # take a part of the slack, so the total stays within the bounds (sound; a
    # string that puts all its slack in one place may be refused)
    units = [i for i, p in enumerate(pieces) if p.lo != p.hi and p.unit is not None]
    others = [p for i, p in enumerate(pieces) if i not in units]
    if not units or any(p.hi is None for p in others):
        raise PatternUnsupported("a length bound together with this pattern")
    reserved_max = sum(p.hi for p in others)
    reserved_min = sum(p.lo for p in others)
    los = {i: pieces[i].rlo for i in units}
    his = {i: pieces[i].rhi for i in units}
    if max_len is not None:
        slack = max_len - reserved_max - sum(los.values())
        if slack < 0:
            raise PatternUnsupported("a length bound together with this pattern")
        share, extra = divmod(slack, len(units))
        for k, i in enumerate(units):
            cap = los[i] + share + (extra if k == len(units) - 1 else 0)
            his[i] = cap if his[i] is None else min(his[i], cap)
    deficit = min_len - reserved_min - sum(los.values())
    for i in reversed(units):
        if deficit <= 0:
            break
        room = deficit if his[i] is None else min(deficit, his[i] - los[i])
        los[i] += room
        deficit -= room
    if deficit > 0:
        return None
    for i in units:
        pieces[i] = _Piece("", los[i], his[i], pieces[i].unit, los[i], his[i])
    return "".join(p.render() for p in pieces)
