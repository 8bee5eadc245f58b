"""The narrow walk (``lexer_kernels.lexer_walk_narrow``, which
``LexerTables.walk`` tries first): where it answers, its row, boundary nodes
and their states are the general walk's (``lexer_walk_rows``, finding its
own way). Checked at every lexer state that random walks reach in grammars
with keys, enum values, literals beside wider terminals, numbers, strings with
and without length bounds, over SmolLM2's vocabulary and a multilingual one
with tokens that share their bytes, with lexers that expand one state at a
time (the narrow walk then meets states not expanded yet). And whole masks:
a grammar with the narrow walk gives the masks of one without it, over
o200k too, whose 25 KB rows are written by the spans the narrow walk finds
from the tokens it sets (``token_spans``, checked against ``row_spans`` on
random rows)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from constrain import allocate_bitmask
from constrain.cfg import lexer_kernels as gk
from constrain.cfg.lexer import _NO_ROUTE
from constrain.cfg import grammar as grammar_module
from constrain.regular.token_kernels import row_spans
from lexer_testing import compile_expanding, plain_walk

SCHEMAS = {
    "tool": {"type": "object",
             "properties": {"function_name": {"enum": ["get_weather", "get_time", "geocode"]},
                            "location": {"type": "string"},
                            "unit": {"enum": ["celsius", "fahrenheit"]},
                            "days": {"type": "integer", "minimum": 1},
                            "detailed": {"type": "boolean"}},
             "required": ["function_name", "location"], "additionalProperties": False},
    "open": {"type": "object", "properties": {"nickname": {"type": "string", "maxLength": 12},
                                              "name": {"type": "string", "minLength": 2}},
             "additionalProperties": {"type": "number"}},
    "array": {"type": "array", "items": {"anyOf": [{"const": "alpha beta"}, {"type": "null"},
                                                   {"type": "string", "pattern": "^[a-z]{2,5}$"}]}},
}
GRAMMARS = {
    # literals that are prefixes of each other and of a wider terminal
    "keywords": 'start: (KW | WORD | NUM) (" " (KW | WORD | NUM))*\n'
                'KW: "select" | "selection" | "from"\nWORD: /[a-z]{7,9}/\nNUM: /[0-9]+(\\.[0-9]+)?/\n',
    "tags": 'start: "<" NAME ">" TEXT "</" NAME ">"\nNAME: /[a-z]+/\nTEXT: /[^<]{1,20}/\n',
}


def _narrow(lex, s):
    # a row of garbage, as a slab's: the kernel clears it, and leaves it clear
    # where it declines (a string's body at its root bytes, a word's after
    # some of its tokens were set)
    row = np.full(lex.trie.row_words + 1, 0xFFFFFFFF, dtype=np.uint32)
    out = np.empty((2, 1024), dtype=np.int32)
    n = lex._narrow(s, row, out)
    if n == gk.NOT_NARROW:
        assert not row.any(), s
        return None
    return row[:lex.words32], out[0, :n].copy(), out[1, :n].copy()


def _random_states(g, vocab, seed, steps):
    rng = random.Random(seed)
    state = g.initial_state()
    for _ in range(steps):
        yield state
        ids = [t for t in g.allowed_token_ids(state).tolist() if t not in vocab.eos_token_set]
        if not ids:
            return
        # short tokens half the time: the walk stops inside the literals
        short = [t for t in ids if len(vocab.tokens[t]) <= 2]
        state = g.advance(state, rng.choice(short if short and rng.random() < 0.5 else ids))


def _walk_alike(fast, plain, vocab, seeds: int, steps: int) -> None:
    """Random walks of two grammars of one language in lockstep (short tokens
    half the time): at every state ``fast`` fills a bitmask of garbage and
    gives a mask equal to ``plain``'s, and accepts where it does."""
    bm = allocate_bitmask(1, len(vocab), backend="numpy")
    for seed in range(seeds):
        rng = random.Random(seed)
        a, b = fast.initial_state(), plain.initial_state()
        for _ in range(steps):
            want = plain.mask_row(b)
            bm[0] = -1  # every byte of the row written
            fast.fill_bitmask(a, bm, 0)
            assert np.array_equal(bm[0].view(np.uint32), want), a
            assert np.array_equal(fast.mask_row(a), want), a
            assert fast.is_accepting(a) == plain.is_accepting(b)
            ids = [t for t in plain.allowed_token_ids(b).tolist() if t not in vocab.eos_token_set]
            if not ids:
                break
            short = [t for t in ids if len(vocab.tokens[t]) <= 2]
            pick = rng.choice(short if short and rng.random() < 0.5 else ids)
            a, b = fast.advance(a, pick), plain.advance(b, pick)


CASES = [("schema", n) for n in sorted(SCHEMAS)] + [("grammar", n) for n in sorted(GRAMMARS)]


@pytest.mark.parametrize("vocab_name", ["smollm2", "multilingual"])
@pytest.mark.parametrize("chunk", [1, 10 ** 9])
@pytest.mark.parametrize("kind,name", CASES)
def test_narrow_walk_is_the_general_walk(kind, name, chunk, vocab_name, request, monkeypatch):
    vocab = request.getfixturevalue(vocab_name + "_vocab")
    source = SCHEMAS[name] if kind == "schema" else GRAMMARS[name]
    g = compile_expanding(kind, source, vocab, chunk, monkeypatch)
    lex = g.lexer
    seen, answered, with_nodes, declined = set(), 0, 0, 0
    for seed in range(3):
        for state in _random_states(g, vocab, seed, 60):
            for cfg in state[1]:
                s = cfg[1]
                if s in seen:
                    continue
                seen.add(s)
                lex.ensure(s)
                narrow = _narrow(lex, s)
                general = plain_walk(lex, s, _NO_ROUTE)
                if narrow is None:
                    declined += 1
                    continue
                answered += 1
                with_nodes += len(narrow[1]) > 0
                for got, want in zip(narrow, general):
                    assert np.array_equal(got, want), (state, s, got[:8], want[:8])
    # neither side vacuous: literal positions answered, broad states (a
    # string's body) declined, and boundaries (a literal's end) answered
    assert answered >= 2, answered
    if name in ("tool", "open"):
        assert declined >= 1 and with_nodes >= 1, (declined, with_nodes)


WIDE_CASES = [("schema", "tool"), ("grammar", "tags")]


@pytest.mark.parametrize("kind,name,vocab_name",
                         [(k, n, "smollm2") for k, n in CASES]
                         + [(k, n, "o200k") for k, n in WIDE_CASES])
def test_masks_with_and_without_narrow_walks(kind, name, vocab_name, request, monkeypatch):
    # over o200k, rows are written by their spans (25 KB rows), which a
    # narrow walk finds from the tokens it sets (LexerTables.walk_spans)
    vocab = request.getfixturevalue(vocab_name + "_vocab")
    source = SCHEMAS[name] if kind == "schema" else GRAMMARS[name]
    fast = compile_expanding(kind, source, vocab, 5, monkeypatch)
    plain = compile_expanding(kind, source, vocab, 5, monkeypatch)
    # (as the kernel's decline: the row left clear)
    plain.lexer._narrow = lambda s, row, out: (row.fill(0), gk.NOT_NARROW)[1]
    answered, spans_taken = [], []
    real = fast.lexer._narrow

    def counted(s, row, out):
        n = real(s, row, out)
        answered.append(n != gk.NOT_NARROW)
        return n

    fast.lexer._narrow = counted
    real_writer = grammar_module.mask_writer

    def writer(row, spans=None):
        spans_taken.append(spans is not None)
        return real_writer(row, spans)

    monkeypatch.setattr(grammar_module, "mask_writer", writer)
    # a wide row's span writer on its first fill, not its 16th (_fill_copying)
    monkeypatch.setattr(grammar_module, "SPAN_WRITER_AFTER", 1)
    _walk_alike(fast, plain, vocab, seeds=3, steps=80)
    if name in ("tool", "open", "tags"):  # keys, enum values, tag names
        assert any(answered), "no state took the narrow walk"
    # spans come with wide rows only (a tag grammar's narrow states are
    # accepting: their masks are unions, not walk rows)
    if vocab_name == "smollm2":
        assert not any(spans_taken)
    elif name == "tool":
        assert any(spans_taken)


@pytest.mark.parametrize("vocab_name", ["smollm2", "o200k"])
def test_broad_walks_lend_their_row_to_the_boundary_bits(vocab_name, request, monkeypatch):
    # a broad walk kept for other grammars is a copy of the walk's own row,
    # which the grammar then takes to add its boundary bits (LexerTables.
    # take_spare): masks as with a copy, the kept row untouched, and the
    # spare taken (a string's body)
    from constrain import Compiler
    from constrain.cfg.lexer import LexerTables

    vocab = request.getfixturevalue(vocab_name + "_vocab")
    schema = {"type": "object", "properties": {"a": {"type": "string"},
                                               "b": {"type": "array", "items": {"type": "string"}}},
              "additionalProperties": {"type": "integer"}}
    real = LexerTables.take_spare
    taken = []

    def take(self, row):
        spare = real(self, row)
        if spare is not None:
            assert spare is not row and np.array_equal(spare, row) and not row.flags.writeable
            taken.append((row, row.copy()))
        return spare

    monkeypatch.setattr(LexerTables, "take_spare", take)
    fast = Compiler(vocab).compile_json_schema(schema)
    plain = Compiler(vocab).compile_json_schema(schema)
    plain.lexer.take_spare = lambda row: None
    # (the fill first: over o200k a spare's row is written as dense)
    _walk_alike(fast, plain, vocab, seeds=4, steps=40)
    assert taken
    for row, before in taken:  # the kept rows, shared with other grammars
        assert np.array_equal(row, before)


def test_token_spans_are_row_spans():
    rng = np.random.default_rng(0)
    counts = set()
    for trial in range(3000):
        words = int(rng.integers(1, 800))
        m = int(rng.integers(0, 40))
        if trial % 3 == 0:  # anywhere, the scratch word past the row too
            toks = rng.integers(0, 32 * words + 32, m)
        elif trial % 3 == 1:  # close together: few spans
            toks = np.minimum(int(rng.integers(0, 32 * words)) + rng.integers(0, 600, m),
                              32 * words + 31)
        else:
            toks = rng.integers(0, 32 * words, m)
        toks = toks.astype(np.int32)
        row = np.zeros(words + 1, np.uint32)
        for t in toks.tolist():
            row[t >> 5] |= np.uint32(1 << (t & 31))
        want = np.zeros(17, np.int64)
        row_spans(row[:words], 64, 8, want)
        got = np.zeros(17, np.int64)
        gk.token_spans(toks, m, 4 * words, 64, got)
        k = int(want[0])
        counts.add(k)
        assert int(got[0]) == k and np.array_equal(got[1:1 + 2 * max(k, 0)],
                                                    want[1:1 + 2 * max(k, 0)]), (words, toks)
    assert counts >= set(range(-1, 9))  # none, 1-8 spans, one span past 8, dense


def test_pairs_sort_as_numpy_does():
    # the narrow walk's boundary nodes and span tokens: by insertion when few,
    # by argsort past 32 (both branches), values kept with their keys
    rng = np.random.default_rng(1)
    for n in (0, 1, 2, 5, 32, 33, 100, 640):
        keys = rng.permutation(10 * n + 1)[:n].astype(np.int32)
        values = keys * 7 + 1
        k2, v2 = np.concatenate([keys, [-5]]).astype(np.int32), np.concatenate([values, [-9]])
        gk._sort_pairs(k2, v2, n)
        assert k2[:n].tolist() == sorted(keys.tolist()) and (v2[:n] == k2[:n] * 7 + 1).all()
        assert k2[n] == -5 and v2[n] == -9  # past n untouched
        same = keys.copy()
        gk._sort_pairs(same, same, n)
        assert same.tolist() == sorted(keys.tolist())


def test_a_wide_rows_writer_copies_until_it_buys_its_spans(o200k_vocab, monkeypatch):
    # a wide row's first fills copy it; on its SPAN_WRITER_AFTER-th fill the
    # span writer takes its place, and every fill, through every entry point,
    # writes the state's mask (a state of another grammar's writers cleared
    # meanwhile is not put back)
    monkeypatch.setattr(grammar_module, "SPAN_WRITER_AFTER", 3)
    g = compile_expanding("schema", SCHEMAS["tool"], o200k_vocab, 5, monkeypatch)
    states = list(_random_states(g, o200k_vocab, seed=1, steps=12))
    bm = allocate_bitmask(2, len(o200k_vocab), backend="numpy")
    other = allocate_bitmask(1, len(o200k_vocab), backend="numpy")
    bought = 0
    for st in states:
        want = g.mask_row(st).view(np.int32)
        for k in range(5):
            if k == 3:  # the slow path (another bitmask), then the fast ones
                g.fill_bitmask(st, other, 0)
                assert np.array_equal(other[0], want)
            elif k % 2:
                assert g.fill_cached_bitmask(st, bm, 1)
            else:
                g.fill_bitmask(st, bm, 1)
            got = (other if k == 3 else bm)[0 if k == 3 else 1]
            assert np.array_equal(got, want), (st, k)
            w = g._writers.get(st)
            if g.mask_row(st).nbytes >= 14 * 1024 and w.__class__ is not list:
                bought += 1
                assert k >= 2
    assert bought
    st = states[-1]
    g._writers.clear()
    g.fill_bitmask(st, bm, 0)
    w = g._writers[st]
    g._writers.clear()
    for _ in range(4):
        g._fill_copying(w, memoryview(bm[0]).cast("B"))
    assert st not in g._writers
    assert np.array_equal(bm[0], g.mask_row(st).view(np.int32))
