"""What a compiled constraint holds (``memory_bytes``) and the caches of
compiled constraints that charge it: ``BoundedCache(growing=True)`` (behind
``compile_type``) and the serving engines' ``ConstraintSource``. A
constraint's mask caches fill as it is used, after it was stored: these
caches measure it again so that their byte bound holds for what it holds."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import constrain
from constrain.cache import BoundedCache, held_bytes, nbytes
from constrain.engines.requests import ConstraintSource

from byte_vocab import byte_vocabulary

OBJECT = {"type": "object", "properties": {"name": {"type": "string"},
                                           "tags": {"type": "array", "items": {"type": "string"}}}}
TEXT = b'{"name":"Ada Lovelace","tags":["math","engines","poetry"]}'


def _walk(constraint, data: bytes) -> None:
    """Fill every mask along ``data`` (byte tokens), as a request does."""
    mask = constrain.allocate_bitmask(1, len(constraint.vocab), backend="numpy")
    state = constraint.initial_state()
    for b in data:
        constraint.fill_bitmask(state, mask, 0)
        state = constraint.advance(state, b)
        assert state is not None


def test_a_grammar_holds_more_once_walked():
    vocab = byte_vocabulary()
    g = constrain.Compiler(vocab).compile_json_schema(OBJECT)
    before = g.memory_bytes()
    assert before > 0 and held_bytes(g) == before
    _walk(g, TEXT)
    after = g.memory_bytes()
    rows = len(g._masks)
    assert rows > 10
    # at least the rows it keeps (each a row of the vocabulary's words)
    assert after - before >= rows * 4 * g.words
    # and no more than its own budget for them, with its tables
    assert after < before + 2 * constrain.Limits().mask_cache_bytes


def test_a_lazy_regex_holds_more_once_walked():
    vocab = byte_vocabulary()
    r = constrain.Compiler(vocab, limits=constrain.Limits(max_mask_bytes=1 << 20)) \
        .compile_regex("[a-z]{1,40}@(?:[a-z]+\\.){1,3}com")
    before = r.memory_bytes()
    _walk(r, b"ada@maths.example.com")
    assert r.memory_bytes() >= before


class Growing:
    """A value that holds ``size`` bytes, which the test changes."""

    def __init__(self, size: int):
        self.size = size

    def memory_bytes(self) -> int:
        return self.size


def test_held_bytes_prefers_memory_bytes():
    assert held_bytes(Growing(12345)) == 12345
    arr = np.zeros(100, dtype=np.int64)
    assert held_bytes(arr) == nbytes(arr) == 800


def test_a_growing_cache_charges_values_again_at_each_miss():
    cache = BoundedCache("t", 10_000, growing=True)
    a, b, c = Growing(1000), Growing(1000), Growing(1000)
    for key, value in (("a", a), ("b", b), ("c", c)):
        assert cache.get_or_build(key, lambda value=value: value) is value
    assert len(cache) == 3 and cache.stats().bytes < 4000
    a.size = 6000  # a was used
    charged = cache.stats().bytes
    assert cache.get("a") is a and cache.stats().bytes == charged  # a hit measures nothing
    b.size = 3000  # b grows while nobody asks for it
    d = Growing(10)
    cache.get_or_build("d", lambda: d)  # a miss charges every entry again
    # a (6000) + b (3000) + c + d > 10,000: the least recently used (b, then c) go
    assert "b" not in cache._items and "a" in cache._items
    assert cache.stats().bytes <= 10_000
    assert cache.get("a") is a and cache.get("d") is d
    # a value larger than the whole budget is returned, not kept
    big = Growing(50_000)
    assert cache.get_or_build("big", lambda: big) is big and cache.get("big") is None
    # an entry that outgrows the budget is dropped at the next miss
    a.size = 20_000
    e = Growing(10)
    cache.get_or_build("e", lambda: e)
    assert cache.get("a") is None and cache.get("e") is e
    cache.remeasure()  # the same, asked for
    assert cache.stats().bytes <= 10_000


def test_a_plain_cache_charges_once():
    cache = BoundedCache("t", 10_000)
    a = Growing(1000)
    cache.put("a", a)
    charged = cache.stats().bytes
    a.size = 9000
    assert cache.get("a") is a and cache.stats().bytes == charged


def test_the_constraint_source_is_bounded_in_bytes():
    vocab = byte_vocabulary()
    probe = ConstraintSource(vocab).compile({"json_schema": OBJECT})
    fresh = probe.memory_bytes()
    _walk(probe, TEXT)
    walked = probe.memory_bytes()
    assert walked > fresh
    # room for a walked constraint and a fresh one, not for a second fresh one
    limit = walked + fresh + (walked - fresh) // 2 + 1000
    assert limit < walked + 2 * fresh
    source = ConstraintSource(vocab, max_bytes=limit)
    specs = [{"json_schema": {**OBJECT, "title": f"t{i}"}} for i in range(3)]
    first = source.compile(specs[0])
    assert 0 < source.bytes < fresh + 1000
    _walk(first, TEXT)
    second = source.compile(specs[1])  # measures the first again: both fit
    assert len(source) == 2 and walked + fresh <= source.bytes <= limit
    source.compile(specs[2])  # three do not: the least recently used goes
    assert len(source) == 2 and source.bytes <= limit
    assert source.compile(specs[1]) is second
    again = source.compile(specs[0])  # compiled again
    assert again is not first and again.matches(TEXT.decode())
    assert source.bytes <= limit


def test_a_constraint_larger_than_the_budget_is_returned_not_kept():
    vocab = byte_vocabulary()
    source = ConstraintSource(vocab, max_bytes=1)
    c = source.compile({"regex": "[0-9]{3}"})
    assert c.matches("123") and len(source) == 0 and source.bytes == 0


def test_the_source_is_bounded_under_concurrent_use():
    """Eight threads compile, use and ask again for twelve schemas through a
    source whose byte bound evicts all the time: every constraint still
    accepts its text, and the charge never passes the bound after a
    compile."""
    vocab = byte_vocabulary()
    probe = ConstraintSource(vocab).compile({"json_schema": OBJECT})
    source = ConstraintSource(vocab, max_bytes=3 * probe.memory_bytes())
    specs = [{"json_schema": {**OBJECT, "title": f"t{i}"}} for i in range(12)]
    errors = []

    def work(k: int) -> None:
        try:
            for r in range(6):
                c = source.compile(specs[(k + 5 * r) % len(specs)])
                _walk(c, TEXT)
        except Exception as e:  # pragma: no cover - the assertion says what
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # a walk between two compiles may grow a constraint past the bound; the
    # next compile brings it back
    source.compile({"regex": "x"})
    assert source.bytes <= source.max_bytes


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_the_source_bounds_are_checked(bad):
    with pytest.raises(constrain.InvalidLimitError):
        ConstraintSource(byte_vocabulary(), max_bytes=bad)
    with pytest.raises(constrain.InvalidLimitError):
        ConstraintSource(byte_vocabulary(), max_entries=bad)


def test_a_reasoning_section_counts_what_it_wraps():
    vocab = byte_vocabulary()
    g = constrain.Compiler(vocab).compile_json_schema(OBJECT)
    r = constrain.with_reasoning(g, end="</think>")
    assert r.memory_bytes() > g.memory_bytes()
    before = r.memory_bytes()
    _walk(r, r.start.encode() + b"hmm</think>" + TEXT)
    assert r.memory_bytes() > before and r.memory_bytes() > g.memory_bytes()
