"""The caches of the JSON Schema front end that outlive one translation.

:class:`SchemaCaches` holds the two that grow with the schemas seen: the
exclusion ids and the ``multipleOf`` tables. A :class:`~constrain.Compiler`
owns one (``compiler.schema_caches``: bounded in bytes, emptied by
``compiler.clear()``, listed in ``compiler.cache_stats()``) and puts it in use
around each of its compiles; a translation outside any compile
(``json_schema_to_lark``, ``json_schema_ir`` called directly) uses the
process's own, whose caches are in :data:`constrain.cache.registry`.

The memos of pure functions of one character or class (:func:`encoded_char`,
:func:`deviation_class`) are registered ``lru_cache`` functions, like the
character-class memos of :mod:`constrain.automata.charset`: their values are a
few bytes, and an ``lru_cache`` hit costs a tenth of a ``BoundedCache``'s.
"""

from __future__ import annotations

import functools
import itertools
from contextvars import ContextVar

from constrain.automata.json_encoding import RAW_OK, class_re, encoded_class, iv_complement, iv_intersect
from constrain.cache import BoundedCache, registry

_MAX_ENTRIES = 4096


class SchemaCaches:
    """Exclusion ids (``exclusion_ids``) and ``multipleOf`` tables
    (``tables``), two :class:`~constrain.cache.BoundedCache` of ``ids_bytes``
    and ``tables_bytes``; thread-safe as those are."""

    def __init__(self, ids_bytes: int, tables_bytes: int):
        self.exclusion_ids = BoundedCache("exclusion ids", ids_bytes, max_entries=_MAX_ENTRIES)
        self.tables = BoundedCache("multipleOf tables", tables_bytes)
        self._next_id = itertools.count().__next__

    def exclusion_id(self, base: str, prefixes: tuple) -> str:
        """An id of the language "``base`` less ``prefixes``": the stand-in
        terminal's pattern. Ids are never reused (forgetting a set only costs a
        miss), so no two sets share one in the grammars of one owner; a
        counter, not a digest of the set (hashlib's first call cost ~17 us of a
        cold compile). Grammars of two owners may share an id: nothing keys on
        the stand-in alone (terminal automata, lexer states and
        ``grammar_fingerprint`` read the exclusion itself)."""
        key = (base, prefixes)
        hit = self.exclusion_ids.get(key)
        if hit is None:
            hit = self.exclusion_ids.setdefault(key, str(self._next_id()))
        return hit

    def caches(self) -> tuple[BoundedCache, BoundedCache]:
        """The two caches."""
        return self.exclusion_ids, self.tables

    def run(self, build, *args, **kwargs):
        """``build(*args, **kwargs)`` with these caches in use (in this thread
        or task): the translations it makes use them. A ContextVar set and
        reset, not a context manager: a compile pays this once, on a cold cache
        (~30 us for the generator)."""
        token = _IN_USE.set(self)
        try:
            return build(*args, **kwargs)
        finally:
            _IN_USE.reset(token)


# not state shared between threads: each thread (and asyncio task) sees the
# value its own compile set, and None outside compiles
_IN_USE: ContextVar[SchemaCaches | None] = ContextVar("json_schema_caches", default=None)

#: the caches of translations outside any compile
_PROCESS = SchemaCaches(8 << 20, 64 << 20)
registry.register(_PROCESS.exclusion_ids)
registry.register(_PROCESS.tables)


def current() -> SchemaCaches:
    """The caches of the translation running in this thread: its compiler's,
    or the process's."""
    return _IN_USE.get() or _PROCESS


def exclusion_id(base: str, prefixes: tuple) -> str:
    """:meth:`SchemaCaches.exclusion_id` of the :func:`current` caches."""
    return current().exclusion_id(base, prefixes)


def table(fn):
    """``fn`` (a pure function of hashable arguments) memoised in the
    :func:`current` caches' ``tables``."""
    name = fn.__qualname__

    @functools.wraps(fn)
    def memoised(*args, **kwargs):
        key = (name, args, tuple(sorted(kwargs.items())))
        return current().tables.get_or_build(key, lambda: fn(*args, **kwargs))

    return memoised


@registry.register
@functools.lru_cache(maxsize=_MAX_ENTRIES)
def encoded_char(c: str) -> str:
    """The canonical JSON encoding of the character ``c``, as a regex."""
    return encoded_class([(ord(c), ord(c))])


@registry.register
@functools.lru_cache(maxsize=_MAX_ENTRIES)
def deviation_class(alphabet: tuple, kids: tuple, raw_only: bool) -> str | None:
    """The characters of ``alphabet`` but ``kids`` (code points), canonically
    encoded; ``raw_only``: only those written as themselves (no escape)."""
    rest = iv_intersect(list(alphabet), iv_complement([(k, k) for k in kids]))
    if not raw_only:
        return encoded_class(rest)
    raw = iv_intersect(rest, RAW_OK)
    return class_re(raw) if raw else None
