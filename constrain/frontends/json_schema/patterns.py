"""``pattern`` regexes (Python ``re`` syntax) translated to regexes over canonical
JSON string content, and the questions about patterns the translator asks
(disjoint prefixes, one class repeated, matching everything).

Soundness rule: ``jsonschema`` checks ``pattern`` with Python's ``re.search`` on the
decoded string, so every translation here accepts only encodings of strings that
Python's ``re.search`` accepts. Translations stay on the safe side where Python
and ECMA-262 differ (``\\d`` is ``[0-9]`` here, a subset of Python's Unicode
``\\d``), and where Python and Rust's ``regex`` differ: Pydantic checks a field's
``pattern`` with the latter, whose ``\\w`` also holds the combining marks, the
connector punctuation, the joiners and the circled letters, so ``\\W`` here
leaves those out too (:func:`_word_union`).
"""

from __future__ import annotations

try:  # Python >= 3.11
    import re._constants as _sre_c
    import re._parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _sre_c
    import sre_parse as _sre_parse
import functools
import math
import re
import unicodedata
import warnings

from constrain.automata.charset import SRE_CATEGORY_SIGN, sre_category, sre_class_intervals
from constrain.cache import registry
from constrain.automata.json_encoding import CANON_ANY, MAX_CP, encoded_class, iv_complement, iv_norm

# plain ints: a RegexFlag operation goes through the enum module's Python code
# (~20 us cold in a compile)
_IGNORECASE, _DOTALL, _UNICODE, _MULTILINE = (int(f) for f in (re.IGNORECASE, re.DOTALL, re.UNICODE,
                                                                 re.MULTILINE))


class PatternUnsupported(Exception):
    """The pattern uses a construct that cannot be translated soundly."""


#: ASCII subsets of the class escapes, by their positive form
_SMALL_CATS = {
    _sre_c.CATEGORY_DIGIT: [(0x30, 0x39)],
    _sre_c.CATEGORY_WORD: [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    _sre_c.CATEGORY_SPACE: [(0x09, 0x0D), (0x20, 0x20)],
}


def _category(cat, over: bool):
    """A category as intervals: a subset of Python's set and of Rust ``regex``'s
    (``over=False``) or a superset of both (``over=True``)."""
    positive, negated = SRE_CATEGORY_SIGN[cat]
    if not negated:
        return list(_word_union(cat)) if over else _SMALL_CATS[cat]
    return iv_complement(_SMALL_CATS[positive] if over else _word_union(positive))


#: Rust's ``\w`` beyond Python's: its Alphabetic property holds these letters,
#: which Unicode files as symbols (So): the circled and squared Latin letters
_CIRCLED_LETTERS = [(0x24B6, 0x24E9), (0x1F130, 0x1F149), (0x1F150, 0x1F169), (0x1F170, 0x1F189)]


@registry.register
@functools.lru_cache(maxsize=4)
def _word_union(positive) -> tuple:
    """The positive class escape ``positive`` as Python's ``re`` or Rust's
    ``regex`` (Pydantic's) reads it, whichever holds more: Rust's ``\\d`` is
    Python's (Nd) and its ``\\s`` (White_Space) lies inside Python's, but its
    ``\\w`` adds the marks (M), the connector punctuation (Pc), the joiners
    U+200C-U+200D and the circled letters to Python's letters and numbers.
    Marks lie in planes 0, 1 and 14 only (scanned once, ~30 ms)."""
    base = list(sre_category(positive).intervals)
    if positive != _sre_c.CATEGORY_WORD:
        return tuple(base)
    extra = [(0x200C, 0x200D)] + _CIRCLED_LETTERS
    for lo, hi in ((0, 0x1FFFF), (0xE0000, 0xE01FF)):
        start = None
        for cp in range(lo, hi + 1):
            c = unicodedata.category(chr(cp))
            if c[0] == "M" or c == "Pc":
                if start is None:
                    start = cp
            elif start is not None:
                extra.append((start, cp - 1))
                start = None
        if start is not None:
            extra.append((start, hi))
    return tuple(iv_norm(base + extra))


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
    """Python ``re`` syntax tree → regex over canonical JSON string content: a
    subset of what Python matches, or a superset (``over``: for a complement)."""

    def __init__(self, flags: int, over: bool = False):
        self.flags = flags
        self.over = over

    def charset(self, ivs, flags) -> _Piece:
        if flags & _IGNORECASE and self.over:
            # Python also folds some non-ASCII letters onto ASCII ones (the
            # Kelvin sign is a k): no superset is written here
            raise PatternUnsupported("the complement of a case-insensitive pattern")
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
        try:
            ivs, negate = sre_class_intervals(
                items, lambda cat, negated: _category(cat, over != negated))
        except ValueError as e:
            raise PatternUnsupported(str(e)) from None
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
            return self.charset(self.in_set(av, flags, over=self.over), flags & ~_IGNORECASE
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


def _quiet_parse(pattern: str):
    """``re``'s parse of ``pattern``, without Python's FutureWarning about
    ``[[`` and ``--`` (raises ``re.error``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _sre_parse.parse(pattern)


def _parse_or_none(pattern: str):
    """:func:`_quiet_parse`, or ``None`` for a pattern that is not a Python regex."""
    try:
        return _quiet_parse(pattern)
    except re.error:
        return None


def translate_pattern(pattern: str, min_len: int = 0, max_len: int | None = None,
                      over: bool = False) -> str | None:
    """A regex over canonical JSON string content accepting only (encodings of)
    strings ``s`` with ``re.search(pattern, s)`` and ``min_len <= len(s) <=
    max_len``. ``None`` when no string qualifies.

    ``over``: instead, a regex accepting (at least) the canonical encoding of
    every string ``s`` with ``re.search(pattern, s)`` (no length bounds), so
    that strings outside it surely do not match: the side a complement needs
    (Unicode classes in full, ``$`` also before a final newline; refused:
    case-insensitive and multi-line patterns).

    Raises:
        PatternUnsupported: lookaround, backreferences, anchors inside the pattern,
            or a length bound that cannot be folded into the pattern.
        re.error: the pattern is not a Python regex.
    """
    parsed = _quiet_parse(pattern)
    flags = parsed.state.flags
    if flags & ~(_IGNORECASE | _DOTALL | _UNICODE | _MULTILINE):
        raise PatternUnsupported("regex flags")
    if over and flags & _MULTILINE:
        raise PatternUnsupported("the complement of a multi-line pattern")
    alts = []
    for branch in _split_branches(list(parsed)):
        anchored_start = anchored_end = False
        newline_end = False  # "$" also matches before a final newline
        while branch and branch[0][0] is _sre_c.AT and branch[0][1] in _STARTS:
            branch = branch[1:]
            anchored_start = True
        while branch and branch[-1][0] is _sre_c.AT and branch[-1][1] in _ENDS:
            newline_end |= branch[-1][1] is _sre_c.AT_END
            branch = branch[:-1]
            anchored_end = True
        tr = _Translator(flags, over)
        pieces = tr.seq(branch, flags)
        if not anchored_start:
            pieces.insert(0, _Piece(CANON_ANY + "*", 0, None, CANON_ANY, 0, None))
        if not anchored_end:
            pieces.append(_Piece(CANON_ANY + "*", 0, None, CANON_ANY, 0, None))
        elif over and newline_end:
            pieces.append(_Piece(r"(?:\\n)?", 0, 1))
        text = _fit_length(pieces, min_len, max_len)
        if text is not None:
            alts.append(text)
    if not alts:
        return None
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


def anchored_prefix(pattern: str) -> str | None:
    """The literal text every match of ``re.search(pattern, s)`` puts at the start
    of ``s`` (``^abc...``), or ``None``."""
    parsed = _parse_or_none(pattern)
    if parsed is None:
        return None
    if parsed.state.flags & (_IGNORECASE | _MULTILINE):
        return None  # (?m)^ also matches after a newline
    items = list(parsed)
    if not items or items[0][0] is not _sre_c.AT or items[0][1] not in _STARTS:
        return None
    out = []
    for op, av in items[1:]:
        if op is not _sre_c.LITERAL:
            break
        out.append(chr(av))
    return "".join(out) if out else None


def required_text(pattern: str) -> str | None:
    """The longest run of literal characters that every string ``s`` with
    ``re.search(pattern, s)`` contains: consecutive literals of the pattern's
    top-level sequence (``netdir_`` of ``netdir_(projects|work)``), or
    ``None`` (none, or a case-insensitive pattern)."""
    parsed = _parse_or_none(pattern)
    if parsed is None:
        return None
    if parsed.state.flags & _IGNORECASE:
        return None
    best, run = "", []
    for op, av in list(parsed) + [(None, None)]:
        if op is _sre_c.LITERAL:
            run.append(chr(av))
            continue
        if len(run) > len(best):
            best = "".join(run)
        run = []
    return best or None


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
        parsed = _quiet_parse(pattern)
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
        parsed = _quiet_parse(pattern)
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


#: :func:`_at_least`'s answer when its exact regex would pass :data:`_MAX_AT_LEAST`
_TOO_LARGE = object()
#: characters of :func:`_at_least`'s regex (a minLength of d shared by m
#: repetitions spells up to C(d + m - 1, m - 1) alternatives)
_MAX_AT_LEAST = 8_000
#: alternatives :func:`_at_least` may spell, checked before it starts
_MAX_AT_LEAST_ALTERNATIVES = 256


def _at_least(pieces: list[_Piece], min_len: int):
    """The concatenation of ``pieces`` (each a repetition of one character
    class or of a fixed length) restricted to at least ``min_len`` characters,
    exactly: each repetition in turn takes ``j`` more characters than its
    least, for each ``j`` below what is still missing (and the rest make up
    the difference), or all that is missing at once (the rest are free).
    ``None`` when no string is long enough; :data:`_TOO_LARGE` past
    :data:`_MAX_AT_LEAST` characters. (``^.*@.*\\..*$`` with ``minLength:
    6`` gave its last ``.*`` all four missing characters: ``user@example.com``
    was refused.)"""
    need = min_len - sum(p.lo for p in pieces)
    free = sum(1 for p in pieces if p.unit is not None and p.rlo != p.rhi)
    # C(need + free - 1, free - 1) alternatives at most: bounded before any is
    # spelled (a minLength of a million must not loop a million times)
    if need > 0 and free > 1 and math.comb(need + free - 1, free - 1) > _MAX_AT_LEAST_ALTERNATIVES:
        return _TOO_LARGE
    tails = ["".join(p.render() for p in pieces[i:]) for i in range(len(pieces) + 1)]
    try:
        return _at_least_from(pieces, tails, {}, 0, need)
    except OverflowError:
        return _TOO_LARGE


def _at_least_from(pieces: list[_Piece], tails: list[str], memo: dict, i: int, d: int):
    """:func:`_at_least` of ``pieces[i:]`` with ``d`` characters missing
    (``tails[i]``: ``pieces[i:]`` unrestricted; ``memo`` by ``(i, d)``). A
    module function, not a closure: a recursive closure is a reference cycle,
    left to the cyclic collector (tests/test_reference_cycles.py)."""
    if d <= 0:
        return tails[i]
    if i == len(pieces):
        return None
    key = (i, d)
    if key in memo:
        return memo[key]
    p = pieces[i]
    if p.unit is None or p.rlo == p.rhi:
        rest = _at_least_from(pieces, tails, memo, i + 1, d)
        out = None if rest is None else p.render() + rest
    else:
        alts = []
        room = None if p.rhi is None else p.rhi - p.rlo
        size = 0
        # fewer than d here only if a later repetition can take the rest
        later = any(q.unit is not None and q.rlo != q.rhi for q in pieces[i + 1:])
        for j in range(0 if not later else d if room is None else min(d, room + 1)):
            rest = _at_least_from(pieces, tails, memo, i + 1, d - j)
            if rest is not None:
                n = p.rlo + j
                alts.append(("" if n == 0 else _repeat(p.unit, n, n)) + rest)
                size += len(alts[-1])
                if size > _MAX_AT_LEAST:
                    raise OverflowError
        if room is None or room >= d:
            alts.append(_repeat(p.unit, p.rlo + d, p.rhi) + tails[i + 1])
        out = None if not alts else alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
    if out is not None and len(out) > _MAX_AT_LEAST:
        raise OverflowError
    memo[key] = out
    return out


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
    if fits_max and all(p.unit is not None or p.lo == p.hi for p in pieces):
        exact = _at_least(pieces, min_len)
        if exact is not _TOO_LARGE:
            return exact
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

