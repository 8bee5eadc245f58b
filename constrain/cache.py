"""The one cache type of :mod:`constrain`, and the registry of the caches no
:class:`~constrain.Compiler` owns.

:class:`BoundedCache` is an LRU bounded in bytes and in entries, safe to share
between threads. A cache that outlives one compile is either a compiler's
(terminal automata, terminal ids, lexer walks, JSON Schema exclusion ids and
``multipleOf`` tables: each a ``BoundedCache``) or registered in
:data:`registry`: the caches of no compile (bitmask row views, prepared
analysis grammars, the JSON Schema tables of translations outside a compile:
``BoundedCache`` s) and the memos of pure functions of text (character classes,
regex literals, JSON encodings: bounded ``functools.lru_cache`` functions,
whose hit costs a tenth of a ``BoundedCache``'s). ``constrain.clear_caches()``
empties the registry's caches and every live compiler's.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from collections import OrderedDict
from numbers import Integral, Real
from typing import Callable, NamedTuple

import numpy as np

from constrain.errors import InvalidLimitError

#: bytes charged per entry on top of its key and value: the LRU's node, the
#: (value, size) pair and the key's hash slot
ENTRY_OVERHEAD = 160


#: the largest count a budget may be: ``sys.maxsize`` as "no limit" overflowed
#: the kernels' int64 arithmetic (``max_items`` from 2**57 on made a silently
#: wrong constraint) or asked numpy for impossible arrays
MAX_BUDGET = 1 << 40
#: budgets that size an array per call: ``max_width`` ways to split a token at
#: each of its bytes (4,096 is 16 times the default)
_MAX_BUDGETS = {"max_width": 4096}


def check_budget(name: str, value, *, seconds: bool = False):
    """``value`` as a budget named ``name``: a positive ``int`` of at most
    :data:`MAX_BUDGET` (4,096 for ``max_width``), or with ``seconds`` a
    positive ``float`` (``inf`` allowed). Raises
    :class:`~constrain.errors.InvalidLimitError` naming ``name`` for zero, a
    negative number, NaN, a bool, a non-number or a count past its cap."""
    # the common case first: the ABC checks below cost ~10 us on a cold CPU
    # cache, as much as a small regex's trie walk
    if value.__class__ is int and 0 < value <= _MAX_BUDGETS.get(name, MAX_BUDGET) \
            and not seconds:
        return value
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidLimitError(f"{name} must be a positive number, not {value!r}", name)
    if not seconds:
        if not isinstance(value, Integral):
            raise InvalidLimitError(f"{name} must be a positive integer, not {value!r}", name)
        value = int(value)
    elif math.isnan(value):
        raise InvalidLimitError(f"{name} must be a positive number of seconds, not NaN", name)
    else:
        value = float(value)
    if not value > 0:
        raise InvalidLimitError(f"{name} must be positive, not {value!r}", name)
    cap = _MAX_BUDGETS.get(name, MAX_BUDGET)
    if not seconds and value > cap:
        raise InvalidLimitError(f"{name} must be at most {cap}, not {value!r}", name)
    return value


def nbytes(obj) -> int:
    """The bytes ``obj`` holds, roughly: numpy arrays and buffers by their data,
    strings by their length, tuples and lists by their items, anything else by
    ``sys.getsizeof`` (shallow)."""
    # exact types first, items of a tuple inline: every cache insert sizes its
    # key (terminal keys, walk keys: tuples of ints and strings), and the
    # isinstance chain per item was ~4% of a cold JSON Schema compile
    t = type(obj)
    if t is tuple or t is list:
        n = 8 * len(obj) + 56
        for x in obj:
            tx = type(x)
            if tx is int:
                n += sys.getsizeof(x)
            elif tx is str or tx is bytes:
                n += len(x) + 40
            else:
                n += nbytes(x)
        return n
    if t is str or t is bytes or t is bytearray:
        return len(obj) + 40
    if t is np.ndarray or t is memoryview:
        return obj.nbytes
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if isinstance(obj, (bytes, bytearray, str)):
        return len(obj) + 40
    if isinstance(obj, memoryview):
        return obj.nbytes
    if isinstance(obj, (tuple, list)):
        return 8 * len(obj) + 56 + sum(map(nbytes, obj))
    return sys.getsizeof(obj)


def _key_and_value_bytes(key, value) -> int:
    return nbytes(key) + nbytes(value)


def held_bytes(obj) -> int:
    """The bytes ``obj`` holds now: its own ``memory_bytes()`` where it has
    one (a compiled constraint, whose mask caches grow as it is used), else
    :func:`nbytes`."""
    measure = getattr(obj, "memory_bytes", None)
    return int(measure()) if measure is not None else nbytes(obj)


def _key_and_held_bytes(key, value) -> int:
    return nbytes(key) + held_bytes(value)


class CacheStats(NamedTuple):
    """A cache's contents and traffic. ``bytes`` and ``max_bytes`` are ``None``
    for an entry-bounded memo (an ``lru_cache``), whose values are small;
    ``hits``, ``misses`` and ``evictions`` count since the cache was made."""

    name: str
    entries: int
    bytes: int | None
    max_entries: int
    max_bytes: int | None
    hits: int
    misses: int
    evictions: int


_MISS = object()


class BoundedCache:
    """A least-recently-used cache bounded in bytes and in entries.

    Each entry is charged ``sizeof(key, value)`` bytes (default: :func:`nbytes`
    of both) plus :data:`ENTRY_OVERHEAD`; inserting evicts the least recently
    used entries until both bounds hold, and a value larger than the whole
    budget is returned but not kept.

    ``growing=True`` is for values that grow after they are stored (compiled
    constraints, whose mask caches fill as they are used): the default
    ``sizeof`` is then :func:`held_bytes` of the value, and a miss of
    :meth:`get_or_build` charges every entry again (:meth:`remeasure`)
    before evicting, so the bound holds at every miss for what the values
    hold then (a hit measures nothing). Changes take the cache's lock for their
    few dictionary steps, a hit does not; :meth:`get_or_build` builds outside
    the lock, and when two threads build the same key the first to store wins.
    Under concurrent use the hit and miss counts of :meth:`stats` may miss a
    few (they are not locked).
    """

    __slots__ = ("name", "max_bytes", "max_entries", "growing", "_sizeof", "_items", "_bytes",
                 "_lock", "_hits", "_misses", "_evictions", "__weakref__")

    def __init__(self, name: str, max_bytes: int, *, max_entries: int | None = None,
                 sizeof: Callable[[object, object], int] | None = None, growing: bool = False):
        self.name = name
        self.max_bytes = check_budget("max_bytes", max_bytes)
        self.max_entries = (sys.maxsize if max_entries is None
                            else check_budget("max_entries", max_entries))
        self.growing = bool(growing)
        self._sizeof = sizeof or (_key_and_held_bytes if growing else _key_and_value_bytes)
        self._items: OrderedDict = OrderedDict()  # key -> (value, bytes charged)
        self._bytes = 0
        self._lock = threading.Lock()
        self._hits = self._misses = self._evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return (f"BoundedCache({self.name!r}, entries={len(self._items)}, "
                f"bytes={self._bytes}/{self.max_bytes})")

    def get(self, key, default=None):
        """The value of ``key`` (now the most recently used), or ``default``."""
        # without the lock: a look-up and a move are each one atomic dict
        # operation, and the lock cost twice the rest of a hit
        items = self._items
        entry = items.get(key)
        if entry is None:
            self._misses += 1
            return default
        try:
            items.move_to_end(key)
        except KeyError:  # evicted since: what was read is still the value
            pass
        self._hits += 1
        return entry[0]

    def remeasure(self) -> None:
        """Charge every entry ``sizeof(key, value)`` again, then evict the
        least recently used entries until both bounds hold: for values that
        have grown since they were stored (a ``growing`` cache does this at
        every miss). The sizes are taken without the lock held."""
        with self._lock:
            entries = [(key, entry[0]) for key, entry in self._items.items()]
        self._charge(entries)

    def _charge(self, entries) -> None:
        # sized outside the lock (a constraint's memory_bytes reads its caches);
        # an entry replaced or dropped meanwhile keeps its own charge
        sizes = [(key, value, self._sizeof(key, value) + ENTRY_OVERHEAD)
                 for key, value in entries]
        with self._lock:
            items = self._items
            for key, value, size in sizes:
                entry = items.get(key)
                if entry is not None and entry[0] is value:
                    items[key] = (value, size)  # (an OrderedDict keeps its place)
                    self._bytes += size - entry[1]
            self._evict()

    def put(self, key, value):
        """Store ``value`` under ``key``, replacing what it held; returns ``value``."""
        size = self._sizeof(key, value) + ENTRY_OVERHEAD
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._store(key, value, size)
        return value

    def setdefault(self, key, value):
        """The value of ``key`` if it has one, else ``value``, stored: the first
        writer of a key wins."""
        size = self._sizeof(key, value) + ENTRY_OVERHEAD
        with self._lock:
            entry = self._items.get(key)
            if entry is not None:
                self._items.move_to_end(key)
                return entry[0]
            self._store(key, value, size)
        return value

    def get_or_build(self, key, build: Callable[[], object]):
        """The value of ``key``, made by ``build()`` (called without the lock
        held) and stored on a miss."""
        hit = self.get(key, _MISS)
        if hit is not _MISS:
            return hit
        value = self.setdefault(key, build())
        if self.growing:
            self.remeasure()
        return value

    def get_or_make_each(self, keys, make: Callable[[], object]) -> list:
        """The value of each of ``keys``; a key without one gets ``make()``,
        stored. One hold of the lock for all of them (``make`` runs under it:
        it must be cheap and must not use this cache): a grammar's terminal
        ids, each a get and a setdefault before, were ~1 us a terminal of a
        small schema's compile. Misses are stored in the loop and the bounds
        enforced once after it (a new entry may then be evicted at once; its
        value is still returned)."""
        items = self._items
        sizeof = self._sizeof
        out = []
        with self._lock:
            added = False
            misses = 0
            for key in keys:
                entry = items.get(key)
                if entry is None:
                    misses += 1
                    value = make()
                    added |= self._insert(key, value, sizeof(key, value) + ENTRY_OVERHEAD)
                else:
                    items.move_to_end(key)
                    value = entry[0]
                out.append(value)
            self._misses += misses
            self._hits += len(out) - misses
            if added:
                self._evict()
        return out

    def _store(self, key, value, size: int) -> None:
        # the lock is held
        if self._insert(key, value, size):
            self._evict()

    def _insert(self, key, value, size: int) -> bool:
        # the lock is held: the entry, unless it is larger than the whole
        # budget; the bounds are the caller's to enforce (_evict)
        if size > self.max_bytes:
            self._evictions += 1
            return False
        self._items[key] = (value, size)
        self._bytes += size
        return True

    def _evict(self) -> None:
        # the lock is held: the least recently used entries go until both
        # bounds hold
        items = self._items
        while self._bytes > self.max_bytes or len(items) > self.max_entries:
            _, (_, freed) = items.popitem(last=False)
            self._bytes -= freed
            self._evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counters of :meth:`stats` keep counting)."""
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def stats(self) -> CacheStats:
        """Entries, bytes, bounds and traffic."""
        with self._lock:
            return CacheStats(self.name, len(self._items), self._bytes, self.max_entries,
                              self.max_bytes, self._hits, self._misses, self._evictions)


class _LruMemo:
    """A ``functools.lru_cache`` function seen as a cache of the registry."""

    __slots__ = ("fn", "name")

    def __init__(self, fn):
        self.fn = fn
        self.name = f"{fn.__module__}.{fn.__qualname__}"

    def clear(self) -> None:
        self.fn.cache_clear()

    def stats(self) -> CacheStats:
        info = self.fn.cache_info()
        return CacheStats(self.name, info.currsize, None, info.maxsize, None, info.hits,
                          info.misses, max(0, info.misses - info.currsize))


class Registry:
    """The process-wide caches that no compiler owns (memos of pure functions,
    registered where they are defined) and every live
    :class:`~constrain.Compiler` (held weakly)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._caches: list = []
        self._compilers = weakref.WeakSet()

    def register(self, cache):
        """Add a process-wide cache: a :class:`BoundedCache` or a bounded
        ``functools.lru_cache`` function (returned as given, so that this works
        as a decorator above ``@functools.lru_cache(maxsize=...)``)."""
        if isinstance(cache, BoundedCache):
            entry = cache
        elif getattr(cache, "cache_parameters", None) is not None:
            if cache.cache_parameters()["maxsize"] is None:
                raise ValueError(f"{cache.__qualname__}: an unbounded lru_cache")
            entry = _LruMemo(cache)
        else:
            raise TypeError(f"not a cache: {cache!r}")
        with self._lock:
            self._caches.append(entry)
        return cache

    def add_compiler(self, compiler) -> None:
        """Track ``compiler`` (weakly) so that :meth:`clear` empties it."""
        with self._lock:
            self._compilers.add(compiler)

    def compilers(self) -> list:
        """The live compilers."""
        with self._lock:
            return list(self._compilers)

    def clear(self) -> None:
        """Empty every live compiler and every registered cache."""
        with self._lock:
            caches = list(self._caches)
            compilers = list(self._compilers)
        for compiler in compilers:
            compiler.clear()
        for cache in caches:
            cache.clear()

    def stats(self) -> dict[str, CacheStats]:
        """The :class:`CacheStats` of each registered cache, by name (compilers
        report their own: ``Compiler.cache_stats``)."""
        with self._lock:
            caches = list(self._caches)
        return {c.name: c.stats() for c in caches}


#: the process's registry: the one module-level mutable object of ``constrain``
#: besides the memos it lists
registry = Registry()


__all__ = ["BoundedCache", "CacheStats", "Registry", "registry", "nbytes", "held_bytes",
           "check_budget", "ENTRY_OVERHEAD"]
