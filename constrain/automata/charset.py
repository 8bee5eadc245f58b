"""Sets of Unicode scalar values as sorted, disjoint, inclusive intervals.

Surrogates (U+D800–U+DFFF) are never members: they have no UTF-8 encoding, so no
decoded text contains them.

:func:`oracle_charset` computes the exact set of characters a one-character Python
regex matches by running Python's own ``re`` engine over every scalar value. That
keeps case-insensitive matching and the Unicode classes ``\\d \\w \\s`` exactly as
``re`` defines them for this Python's Unicode database, with no tables of ours to
drift.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

import numpy as np

try:  # Python 3.11+
    import re._constants as sre_c
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore

from constrain.cache import registry

MAX_CODE_POINT = 0x10FFFF
SURROGATE_LO, SURROGATE_HI = 0xD800, 0xDFFF


class CharSet:
    """An immutable set of Unicode scalar values, stored as sorted disjoint
    ``(lo, hi)`` inclusive intervals."""

    __slots__ = ("intervals", "_hash")

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()):
        self.intervals: tuple[tuple[int, int], ...] = _normalize(intervals)
        self._hash = hash(self.intervals)

    @classmethod
    def of(cls, *code_points: int) -> "CharSet":
        """The set of the given code points."""
        if len(code_points) == 1:
            return _single(code_points[0])
        return cls((c, c) for c in code_points)

    @classmethod
    def full(cls) -> "CharSet":
        """Every Unicode scalar value."""
        return _FULL

    def __eq__(self, other) -> bool:
        return isinstance(other, CharSet) and self.intervals == other.intervals

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def __contains__(self, cp: int) -> bool:
        for lo, hi in self.intervals:
            if cp < lo:
                return False
            if cp <= hi:
                return True
        return False

    def __repr__(self) -> str:
        parts = []
        for lo, hi in self.intervals[:6]:
            parts.append(f"{lo:X}" if lo == hi else f"{lo:X}-{hi:X}")
        more = "…" if len(self.intervals) > 6 else ""
        return f"CharSet[{' '.join(parts)}{more}]"

    def size(self) -> int:
        """Number of members."""
        return sum(hi - lo + 1 for lo, hi in self.intervals)

    def union(self, other: "CharSet") -> "CharSet":
        """Members of either set."""
        return CharSet(self.intervals + other.intervals)

    def complement(self) -> "CharSet":
        """Every scalar value not in the set."""
        out = []
        nxt = 0
        for lo, hi in self.intervals:
            if lo > nxt:
                out.append((nxt, lo - 1))
            nxt = hi + 1
        if nxt <= MAX_CODE_POINT:
            out.append((nxt, MAX_CODE_POINT))
        return CharSet(out)

    def intersection(self, other: "CharSet") -> "CharSet":
        """Members of both sets."""
        out = []
        a, b = self.intervals, other.intervals
        i = j = 0
        while i < len(a) and j < len(b):
            lo = max(a[i][0], b[j][0])
            hi = min(a[i][1], b[j][1])
            if lo <= hi:
                out.append((lo, hi))
            if a[i][1] < b[j][1]:
                i += 1
            else:
                j += 1
        return CharSet(out)

    def difference(self, other: "CharSet") -> "CharSet":
        """Members of this set that are not in ``other``."""
        return self.intersection(other.complement())


def _normalize(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Sort, clip to scalar values, drop surrogates and merge adjacent intervals."""
    items = []
    for lo, hi in intervals:
        lo, hi = max(0, lo), min(MAX_CODE_POINT, hi)
        if lo > hi:
            continue
        if lo <= SURROGATE_HI and hi >= SURROGATE_LO:
            if lo < SURROGATE_LO:
                items.append((lo, SURROGATE_LO - 1))
            if hi > SURROGATE_HI:
                items.append((SURROGATE_HI + 1, hi))
        else:
            items.append((lo, hi))
    if not items:
        return ()
    items.sort()
    merged = [items[0]]
    for lo, hi in items[1:]:
        plo, phi = merged[-1]
        if lo <= phi + 1:
            if hi > phi:
                merged[-1] = (plo, hi)
        else:
            merged.append((lo, hi))
    return tuple(merged)


_FULL = CharSet([(0, MAX_CODE_POINT)])


@registry.register
@functools.lru_cache(maxsize=1 << 16)
def _single(cp: int) -> CharSet:
    return CharSet(((cp, cp),))


# a constant (the same string for every pattern, ~50 ms to make), so not a
# cache clear_caches() empties
@functools.lru_cache(maxsize=1)
def _all_scalars() -> str:
    """A string of every Unicode scalar value in order (surrogates left out)."""
    cps = np.concatenate([
        np.arange(0, SURROGATE_LO, dtype=np.uint32),
        np.arange(SURROGATE_HI + 1, MAX_CODE_POINT + 1, dtype=np.uint32),
    ])
    return cps.tobytes().decode("utf-32-le")


def _position_to_code_point(pos: int) -> int:
    return pos if pos < SURROGATE_LO else pos + (SURROGATE_HI - SURROGATE_LO + 1)


@registry.register
@functools.lru_cache(maxsize=4096)
def oracle_charset(one_char_pattern: str, flags: int) -> CharSet:
    """The exact set of scalar values ``re.fullmatch(one_char_pattern, ch, flags)``
    accepts, for a pattern that matches exactly one character."""
    rx = re.compile(f"(?:{one_char_pattern})+", flags)
    # a run across the removed surrogate gap maps onto surrogates, which CharSet
    # cuts out again
    return CharSet(
        (_position_to_code_point(m.start()), _position_to_code_point(m.end() - 1))
        for m in rx.finditer(_all_scalars())
    )


#: the class escapes of Python's parse tree (``re._parser``'s ``CATEGORY`` items):
#: the one-character pattern each stands for
SRE_CATEGORY_PATTERNS = {
    sre_c.CATEGORY_DIGIT: r"\d", sre_c.CATEGORY_NOT_DIGIT: r"\D",
    sre_c.CATEGORY_SPACE: r"\s", sre_c.CATEGORY_NOT_SPACE: r"\S",
    sre_c.CATEGORY_WORD: r"\w", sre_c.CATEGORY_NOT_WORD: r"\W",
}

#: each class escape's positive form, and whether it is that form's complement
SRE_CATEGORY_SIGN = {
    sre_c.CATEGORY_DIGIT: (sre_c.CATEGORY_DIGIT, False),
    sre_c.CATEGORY_NOT_DIGIT: (sre_c.CATEGORY_DIGIT, True),
    sre_c.CATEGORY_SPACE: (sre_c.CATEGORY_SPACE, False),
    sre_c.CATEGORY_NOT_SPACE: (sre_c.CATEGORY_SPACE, True),
    sre_c.CATEGORY_WORD: (sre_c.CATEGORY_WORD, False),
    sre_c.CATEGORY_NOT_WORD: (sre_c.CATEGORY_WORD, True),
}


def sre_category(category, ascii_only: bool = False) -> CharSet:
    """Exactly the scalar values ``re`` puts in the class escape ``category``
    (a ``CATEGORY`` item of ``re._parser``'s tree: ``\\d``, ``\\W`` ...),
    Unicode-wide or, with ``ascii_only``, under ``re.ASCII``.

    A negated escape (``\\D``) is the complement of its positive form, as
    ``re`` defines it, not a second scan of every scalar value (4-5 ms each);
    under ``re.ASCII`` the positive forms hold ASCII characters only (``re``
    tests ``ch < 128`` first), so only those 128 are scanned, not 1.1 million
    (6.5 ms: the ``trellis`` command puts ``(?a)`` before every regex).
    ``tests/test_charset.py`` checks both against :func:`oracle_charset`."""
    positive, negated = SRE_CATEGORY_SIGN[category]
    if ascii_only:
        base = _ascii_category(positive)
    else:
        base = _UNICODE_CATEGORIES[positive]()
    return _complement(base) if negated else base


# The three Unicode classes are constants of this Python's Unicode database, as
# _all_scalars is: kept for the process, not memos clear_caches() empties. Each
# is a scan of every scalar value (\d 13 ms, \w 21, \s 14), which every compile
# with the class paid again after a clear (a JSON Schema pattern with \S, \D or
# \W: its complement is Unicode's).
@functools.lru_cache(maxsize=1)
def _unicode_digit() -> CharSet:
    return oracle_charset(r"\d", 0)


@functools.lru_cache(maxsize=1)
def _unicode_space() -> CharSet:
    return oracle_charset(r"\s", 0)


@functools.lru_cache(maxsize=1)
def _unicode_word() -> CharSet:
    return oracle_charset(r"\w", 0)


_UNICODE_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: _unicode_digit, sre_c.CATEGORY_SPACE: _unicode_space,
    sre_c.CATEGORY_WORD: _unicode_word,
}


@registry.register
@functools.lru_cache(maxsize=8)
def _ascii_category(positive) -> CharSet:
    rx = re.compile(f"(?:{SRE_CATEGORY_PATTERNS[positive]})", re.ASCII)
    return CharSet((c, c) for c in range(128) if rx.fullmatch(chr(c)))


@registry.register
@functools.lru_cache(maxsize=16)
def _complement(base: CharSet) -> CharSet:
    return base.complement()


def sre_class_intervals(items, category) -> tuple[list, bool]:
    """The intervals of the items of a class of ``re._parser``'s tree (an ``IN``
    node: literals, ranges, class escapes), before any negation, and whether
    the class is negated. ``category(item, negated)`` gives the intervals of a
    class escape (the caller decides: exact, or an under- or over-approximation
    of a negated class's part). Raises ``ValueError`` on an item the parser
    does not put in a class."""
    intervals: list = []
    negate = False
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True  # always the first item
        elif op is sre_c.LITERAL:
            intervals.append((av, av))
        elif op is sre_c.RANGE:
            intervals.append(av)
        elif op is sre_c.CATEGORY:
            intervals.extend(category(av, negate))
        else:
            raise ValueError(f"class item {op}")
    return intervals, negate
