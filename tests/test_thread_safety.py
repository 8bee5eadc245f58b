"""Compiled constraints shared by serving threads.

Eight threads share one compiler and the constraints it compiled, with caches
so small that nearly every fill evicts (masks, lexer walks, lazy regex rows),
and run hundreds of rounds of mixed work on them: compile, fill, advance,
roll back, fork. Every mask they saw must be the one a single thread sees when
it replays the same tokens on freshly compiled constraints.
"""

from __future__ import annotations

import hashlib
import sys
import threading

import numpy as np
import pytest

from constrain import Compiler, Matcher, allocate_bitmask, bitmask_to_ids
from lexer_testing import greedy_token_ids

THREADS = 8
ROUNDS = 40  # per thread; each round is a walk of up to WALK tokens
WALK = 10

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0},
                    "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}},
                    "address": {"type": "object",
                                "properties": {"street": {"type": "string"},
                                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                "required": ["street"]}},
     "required": ["name", "age"]},
    {"type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "boolean"},
                                          {"type": "null"}]}},
    {"type": "object", "additionalProperties": {"type": "integer"},
     "properties": {"id": {"type": "string", "format": "uuid"}}},
]

LARK = r"""
start: stmt+
stmt: NAME "=" expr ";"
expr: expr ("+" | "-" | "*") expr | "(" expr ")" | NAME | NUMBER | STRING
NAME: /[a-z_][a-z0-9_]*/
NUMBER: /[0-9]+(\.[0-9]+)?/
STRING: /"[^"\n]*"/
%ignore /[ \t\n]+/
"""

REGEX = r"(\+1 )?\(?[0-9]{3}\)?[ -][0-9]{3}-[0-9]{4}( ext\. [0-9]{1,5})?"


def _compile(compiler: Compiler, kind: int):
    """Constraint ``kind``: 0-2 the schemas, 3 the Lark grammar, 4 the regex
    (with lazy rows: an LRU of 3 rows)."""
    if kind < 3:
        return compiler.compile_json_schema(SCHEMAS[kind], mask_cache_bytes=1)
    if kind == 3:
        return compiler.compile_grammar(LARK, mask_cache_bytes=1)
    return compiler.compile_regex(REGEX, max_mask_bytes=3 * 4 * 1536)


def _digest(row) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(row).tobytes(), digest_size=12).digest()


def _script(thread: int, vocab_size: int, shared: list, compiler: Compiler, bitmask, row: int):
    """One thread's work: per round, a walk on a shared constraint (or on one it
    compiles itself), with rollbacks and forks on the way. Returns what it saw:
    per round ``(kind, compiled here, [(event, argument, mask digest), ...])``."""
    rng = np.random.default_rng(1000 + thread)
    out = []
    for _ in range(ROUNDS):
        kind = int(rng.integers(len(shared)))
        fresh = rng.random() < 0.15
        constraint = _compile(compiler, kind) if fresh else shared[kind]
        m = Matcher(constraint)
        events = []

        def fill(event, arg, matcher):
            matcher.fill_next_token_bitmask(bitmask, row)
            events.append((event, arg, _digest(bitmask[row])))

        for _step in range(WALK):
            fill("fill", None, m)
            ids = bitmask_to_ids(bitmask[row], vocab_size)
            ids = ids[~np.isin(ids, constraint.vocab.eos_token_ids)]
            if not len(ids):
                break
            tok = int(rng.choice(ids))
            assert m.accept_token(tok)
            events.append(("accept", tok, b""))
            r = rng.random()
            if r < 0.15 and m.num_accepted:
                k = int(rng.integers(1, m.num_accepted + 1))
                m.rollback(k)
                events.append(("rollback", k, b""))
            elif r < 0.25:
                f = m.fork()
                fill("fork", None, f)
                events.append(("accepting", f.is_accepting(), b""))
        out.append((kind, fresh, events))
    return out


def _replay(record, compiler: Compiler, vocab_size: int) -> list:
    """The same rounds on one thread, on constraints compiled afresh: the
    masks it sees for the tokens the threads chose."""
    constraints = {}
    bitmask = allocate_bitmask(1, vocab_size, backend="numpy")
    out = []
    for kind, fresh, events in record:
        if kind not in constraints:
            constraints[kind] = _compile(compiler, kind)
        m = Matcher(constraints[kind])
        got, fork = [], None
        for event, arg, _ in events:
            if event == "fill":
                m.fill_next_token_bitmask(bitmask, 0)
                got.append((event, arg, _digest(bitmask[0])))
            elif event == "accept":
                assert m.accept_token(arg)
                got.append((event, arg, b""))
            elif event == "rollback":
                m.rollback(arg)
                got.append((event, arg, b""))
            elif event == "fork":
                fork = m.fork()
                fork.fill_next_token_bitmask(bitmask, 0)
                got.append((event, arg, _digest(bitmask[0])))
            else:
                got.append((event, fork.is_accepting(), b""))
        out.append((kind, fresh, got))
    return out


def _run_threads(work) -> None:
    """``work(t)`` on ``THREADS`` threads started together, switching often
    (inside cache operations too); fails if one hangs, raises the first error
    one of them met."""
    errors: list = []
    start = threading.Barrier(THREADS)

    def run(t):
        try:
            start.wait()
            work(t)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=600)
        assert not any(th.is_alive() for th in threads), "a thread hung"
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]


@pytest.mark.parametrize("bitmask_kind", ["shared", "own"])
def test_eight_threads_share_constraints_with_tiny_caches(smollm2_vocab, bitmask_kind):
    """8 threads, one compiler with a 64 kB budget (lexer walks evicted on
    nearly every fill), constraints whose mask caches hold two rows, a regex
    with three lazy rows: compile, fill, advance, roll back and fork for 40
    rounds each, into one bitmask (a row per thread) or one bitmask each.
    Every mask equals a single-threaded replay's, and nothing raises."""
    vocab = smollm2_vocab
    compiler = Compiler(vocab, cache_bytes=64 * 1024)
    shared = [_compile(compiler, k) for k in range(5)]
    common = allocate_bitmask(THREADS, len(vocab), backend="numpy")
    records: dict = {}
    bitmasks = [(common, t) if bitmask_kind == "shared"
                else (allocate_bitmask(1, len(vocab), backend="numpy"), 0) for t in range(THREADS)]

    def work(t):
        records[t] = _script(t, len(vocab), shared, compiler, *bitmasks[t])

    _run_threads(work)
    replay_compiler = Compiler(vocab)
    fills = 0
    for t in range(THREADS):
        want = _replay(records[t], replay_compiler, len(vocab))
        assert records[t] == want, f"thread {t} saw other masks than a single thread"
        fills += sum(e[0] != "accept" for _, _, ev in want for e in ev)
    assert fills > THREADS * ROUNDS
    stats = compiler.cache_stats()
    assert stats["lexer walks"].evictions > 0
    assert all(s.bytes <= s.max_bytes for s in stats.values())


def test_the_tries_memos_under_eight_threads(smollm2_vocab, monkeypatch):
    """``TokenTrie.loop_exits`` and ``TokenTrie.text_needs`` (kept with the
    trie, shared by every grammar of the vocabulary, at most ``MAX_LOOP_SETS``
    sets each) asked by eight threads for more loop sets than they keep, so
    that they evict while others read: every answer equals the one thread's."""
    from constrain.vocab import trie as trie_module
    from constrain.vocab.trie import TokenTrie

    monkeypatch.setattr(trie_module, "MAX_LOOP_SETS", 4)
    trie = TokenTrie.of(smollm2_vocab)
    text = np.zeros(4, dtype=np.uint64)
    for b in range(32, 127):
        if b not in (34, 92):
            text[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    rare = [ord(c) for c in "~^|`@"]
    sets = []
    for k in range(1 << len(rare)):
        loops = text.copy()
        for j, b in enumerate(rare):
            if k >> j & 1:
                loops[b >> 6] &= ~(np.uint64(1) << np.uint64(b & 63))
        sets.append(loops)

    def answer(loops):
        exits = trie.loop_exits(loops)
        needs = trie.text_needs(loops, np.int16)
        if exits is None:
            return None, needs
        return hashlib.sha256(exits.tobytes()).hexdigest(), \
            hashlib.sha256(needs[0].tobytes() + needs[1].tobytes()).hexdigest()

    want = [answer(loops) for loops in sets]
    assert sum(w[0] is not None for w in want) >= 8
    errors, got = [], {}

    def work(seed):
        try:
            order = np.random.default_rng(seed).permutation(len(sets) * 3) % len(sets)
            got[seed] = [(int(k), answer(sets[k])) for k in order]
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for seed in range(8):
        for k, a in got[seed]:
            assert a == want[k], (seed, k)


def test_wide_rows_writers_bought_while_eight_threads_fill(o200k_vocab, monkeypatch):
    """Over o200k (25 KB rows: a state's first fills copy its row, a later fill
    puts its span writer in the copier's place) 8 threads fill the states of one
    shared grammar into one bitmask, a row each, through ``fill_bitmask`` and
    ``fill_cached_bitmask``, while its writers are bought and now and then
    cleared (as a full mask cache clears them): every fill writes the state's
    mask."""
    from constrain.cfg import grammar as grammar_module

    monkeypatch.setattr(grammar_module, "SPAN_WRITER_AFTER", 3)
    compiler = Compiler(o200k_vocab)
    g = compiler.compile_json_schema(SCHEMAS[0])
    text = b'{"name":"Ada Lovelace","age":36,"tags":["red","blue"],"address":{"street":"x","zip":"12345"}}'
    states, state = [], g.initial_state()
    for t in greedy_token_ids(o200k_vocab, text):
        states.append(state)
        state = g.advance(state, t)
        assert state is not None
    want = [g.mask_row(s).view(np.int32).copy() for s in states]
    bought = []
    real_writer = grammar_module.mask_writer

    def counted(row, spans=None):
        bought.append(row.nbytes)
        return real_writer(row, spans)

    monkeypatch.setattr(grammar_module, "mask_writer", counted)
    bm = allocate_bitmask(THREADS, len(o200k_vocab), backend="numpy")

    def work(t):
        rng = np.random.default_rng(t)
        for _ in range(12):
            for k in rng.permutation(len(states)):
                r = rng.random()
                if r < 0.02:
                    g._writers.clear()
                if r < 0.5 or not g.fill_cached_bitmask(states[k], bm, t):
                    g.fill_bitmask(states[k], bm, t)
                assert np.array_equal(bm[t], want[k]), (t, int(k))

    _run_threads(work)
    assert sum(n >= 14 * 1024 for n in bought) >= len(states)  # span writers were bought

