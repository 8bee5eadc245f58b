"""Every process-wide cache of the JSON Schema front end, in one place, with
:func:`clear`.

Each is bounded. They are module state only until ``constrain.Compiler`` owns
its caches; keeping them together makes that hand-over one module's work.
"""

from __future__ import annotations

import functools
import itertools

from constrain.automata.json_encoding import RAW_OK, class_re, encoded_class, iv_complement, iv_intersect

_MAX_ENTRIES = 4096

_EXCLUSION_IDS: dict[tuple, str] = {}
_EXCLUSION_COUNTER = itertools.count()


def exclusion_id(base: str, prefixes: tuple) -> str:
    """A process-wide id of the language "``base`` less ``prefixes``": the stand-in
    terminal's pattern, which keys the terminal automata cached across grammars.
    Ids are never reused (forgetting a set only costs a cache miss), so no two
    sets share one; a dict, not a digest of the set (hashlib's first call cost
    ~17 us of a cold compile)."""
    key = (base, prefixes)
    hit = _EXCLUSION_IDS.get(key)
    if hit is None:
        if len(_EXCLUSION_IDS) >= _MAX_ENTRIES:
            _EXCLUSION_IDS.clear()
        hit = _EXCLUSION_IDS[key] = str(next(_EXCLUSION_COUNTER))
    return hit


@functools.lru_cache(maxsize=_MAX_ENTRIES)
def encoded_char(c: str) -> str:
    """The canonical JSON encoding of the character ``c``, as a regex."""
    return encoded_class([(ord(c), ord(c))])


@functools.lru_cache(maxsize=_MAX_ENTRIES)
def deviation_class(alphabet: tuple, kids: tuple, raw_only: bool) -> str | None:
    """The characters of ``alphabet`` but ``kids`` (code points), canonically
    encoded; ``raw_only``: only those written as themselves (no escape)."""
    rest = iv_intersect(list(alphabet), iv_complement([(k, k) for k in kids]))
    if not raw_only:
        return encoded_class(rest)
    raw = iv_intersect(rest, RAW_OK)
    return class_re(raw) if raw else None


def clear() -> None:
    """Drop the exclusion ids and the memoised encodings."""
    _EXCLUSION_IDS.clear()  # ids are never reused: forgetting is safe
    encoded_char.cache_clear()
    deviation_class.cache_clear()
