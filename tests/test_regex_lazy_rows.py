"""Regex token rows computed on first visit (constrain.regular.token_automaton):
every row and transition list equals the one a whole walk at compile time
computes, for every reachable state of many regexes over a real vocabulary;
the rows and transitions stay within ``max_mask_bytes``; threads filling one
constraint with a budget of a few rows see what a single thread sees; saving
and pickling keep the rows computed so far."""

from __future__ import annotations

import pickle
import random
import sys
import threading

import numpy as np
import pytest

import constrain
from constrain import GrammarTooComplexError, InvalidStateError, allocate_bitmask, compile_regex
from constrain.regular.token_automaton import TokenAutomaton

PATTERNS = [
    r"[0-9]{5}",
    r"\d{5}",                                   # Unicode digits: 112 states
    r"[a-z]{3,40}",
    r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
    r'"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"',
    r"(the|then|there|these|a|an|and|any|america)",
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T[0-2][0-9]:[0-5][0-9]",
    r"[a-z]*a[a-z]{5}",
    r"(?i)héllo wörld [α-ω]+",
    r"\w+ \w+",
]


def _reachable(auto: TokenAutomaton, limit: int = 400) -> list[int]:
    seen, todo = {1}, [1]
    while todo and len(seen) < limit:
        _, nexts = auto.transitions(todo.pop())
        for q in np.unique(nexts).tolist():
            if q not in seen:
                seen.add(q)
                todo.append(q)
    return sorted(seen)


def _pairs(toks, nexts) -> list:
    return sorted(zip(toks.tolist(), nexts.tolist()))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_lazy_rows_equal_eager_rows_on_every_reachable_state(smollm2_vocab, pattern):
    g = compile_regex(pattern, smollm2_vocab)
    eager = TokenAutomaton(g.dfa, smollm2_vocab, eager=True)
    lazy = TokenAutomaton(g.dfa, smollm2_vocab, eager=False)
    assert eager.eager and not lazy.eager
    states = _reachable(eager)
    random.Random(pattern).shuffle(states)  # visit order must not matter
    for s in states:
        assert not lazy.is_computed(s)
        assert np.array_equal(lazy.row(s), eager.row(s)), (pattern, s)
        assert lazy.is_computed(s)
        assert _pairs(*lazy.transitions(s)) == _pairs(*eager.transitions(s)), (pattern, s)
        assert lazy.is_live(s) == eager.is_live(s)
    # the whole table, built on demand from a lazy automaton
    indptr, toks, nexts = lazy.table()
    e_ptr, e_toks, e_nexts = eager.table()
    assert np.array_equal(indptr, e_ptr)
    for s in range(g.num_states):
        a, b = slice(indptr[s], indptr[s + 1]), slice(e_ptr[s], e_ptr[s + 1])
        assert _pairs(toks[a], nexts[a]) == _pairs(e_toks[b], e_nexts[b])


def test_short_narrow_patterns_walk_every_state_at_compile_time(smollm2_vocab):
    assert compile_regex(r"[0-9]{5}", smollm2_vocab).tokens.eager
    wide = compile_regex(r"[a-z]{3,40}", smollm2_vocab)
    assert not wide.tokens.eager
    assert not wide.has_cached_mask(wide.initial_state())
    assert not wide.fill_cached_bitmask(wide.initial_state(), allocate_bitmask(1, len(smollm2_vocab)))
    # 112 states, most after a UTF-8 lead byte: few tokens start with a
    # continuation byte, so walking them all is cheap
    assert compile_regex(r"\d{5}", smollm2_vocab).tokens.eager


def test_walk_fills_the_eager_masks(smollm2_vocab, smollm2_tokenizer):
    text = "2024-03-15T13:45"
    g = compile_regex(PATTERNS[6], smollm2_vocab)
    eager = TokenAutomaton(g.dfa, smollm2_vocab, eager=True)
    for backend in ("numpy", "torch"):
        bm = allocate_bitmask(2, len(smollm2_vocab), backend=backend)
        state = g.initial_state()
        for tok in smollm2_tokenizer.encode(text, add_special_tokens=False) + [None]:
            for row in (0, 1, 0):  # a new row view, then the cached path
                g.fill_bitmask(state, bm, row)
                got = np.asarray(bm[row]).view(np.uint32)
                assert np.array_equal(got, eager.row(state))
            assert g.has_cached_mask(state)
            if tok is not None:
                state = g.advance(state, tok)
        assert g.is_accepting(state)
        g.fill_bitmask(g.advance(state, smollm2_vocab.eos_token_ids[0]), bm, 0)
        assert not np.asarray(bm[0]).any()


def test_rows_and_transitions_stay_within_the_budget(smollm2_vocab):
    words = (len(smollm2_vocab) + 31) // 32
    budget = 40 * 4 * words
    g = compile_regex(r"[a-z]*a[a-z]{14}", smollm2_vocab, max_mask_bytes=budget)
    rng = random.Random(7)
    bm = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    for _ in range(30):
        state = g.initial_state()
        for _ in range(12):
            g.fill_bitmask(state, bm, 0)
            # past the budget only while the one row just computed is all
            assert g.tokens._bytes <= budget or len(g.tokens._entries) == 1
            toks, _ = g.token_transitions(state)
            if not len(toks):
                break
            state = g.advance(state, int(rng.choice(toks)))
    assert len(g.tokens._entries) < g.num_states
    # evicted rows come back equal
    reference = TokenAutomaton(g.dfa, smollm2_vocab, eager=False, max_mask_bytes=1 << 30)
    for s in _reachable(reference, 60):
        assert np.array_equal(g.tokens.row(s), reference.row(s))


def test_the_whole_table_refuses_past_the_budget(smollm2_vocab):
    g = compile_regex(r"[a-z]*a[a-z]{6}", smollm2_vocab, max_mask_bytes=100_000)
    with pytest.raises(GrammarTooComplexError, match="max_mask_bytes"):
        g.tokens.table()


def test_out_of_range_states_are_refused(smollm2_vocab):
    g = compile_regex(r"[a-z]{3,40}", smollm2_vocab, max_mask_bytes=1)
    bm = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    for bad in (g.num_states, 10 ** 9, -2, 1.0, "1"):
        for call in (lambda: g.fill_bitmask(bad, bm, 0), lambda: g.token_transitions(bad),
                     lambda: g.tokens.row(bad), lambda: g.tokens.is_computed(bad)):
            with pytest.raises(InvalidStateError):
                call()


def test_saving_and_pickling_keep_the_computed_rows(smollm2_vocab, tmp_path):
    g = compile_regex(r"[a-z]{3,40}", smollm2_vocab)
    bm = allocate_bitmask(1, len(smollm2_vocab), backend="numpy")
    state = g.initial_state()
    visited = []
    for tok in (b"hel", b"lo", b"world"):
        g.fill_bitmask(state, bm, 0)
        visited.append(state)
        state = g.advance(state, smollm2_vocab.tokens.index(tok))
    g.save(tmp_path / "r.trellis")
    for other in (constrain.load(tmp_path / "r.trellis", smollm2_vocab),
                  pickle.loads(pickle.dumps(g))):
        assert not other.tokens.eager
        for s in range(g.num_states):
            assert other.has_cached_mask(s) == (s in visited)
        for s in range(1, g.num_states):
            assert np.array_equal(other.tokens.row(s), g.tokens.row(s))
            assert _pairs(*other.token_transitions(s)) == _pairs(*g.token_transitions(s))


def test_eight_threads_fill_one_lazy_constraint_with_a_budget_of_three_rows(smollm2_vocab):
    """Each thread walks random paths, filling its own bitmask row at every
    step; every mask must equal the single-threaded eager row, while rows are
    evicted and computed again all the time."""
    vocab = smollm2_vocab
    words = (len(vocab) + 31) // 32
    g = compile_regex(PATTERNS[3], vocab, max_mask_bytes=3 * 4 * words)
    ref = TokenAutomaton(g.dfa, vocab, eager=True)
    ref_ids = {s: ref.transitions(s)[0] for s in _reachable(ref)}
    bm = allocate_bitmask(8, len(vocab), backend="numpy")
    errors: list = []
    start = threading.Barrier(8)

    def work(t):
        try:
            rng = random.Random(t)
            start.wait()
            for _ in range(12):
                state = g.initial_state()
                for _ in range(8):
                    g.fill_bitmask(state, bm, t)
                    assert np.array_equal(bm[t].view(np.uint32), ref.row(state)), state
                    toks, nexts = g.token_transitions(state)
                    # the same kernel, the same (trie) order
                    want = ref.transitions(state)
                    assert np.array_equal(toks, want[0]) and np.array_equal(nexts, want[1])
                    if not len(toks):
                        break
                    state = g.advance(state, int(rng.choice(ref_ids[state])))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=300)
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]
    assert len(g.tokens._entries) <= 4


@pytest.mark.parametrize("pattern", [r"[0-9]{5}", r"(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}"])
def test_writers_made_at_compile_fill_each_states_row(smollm2_vocab, pattern):
    # a small eager automaton over SmolLM2 (rows of 6 KB, one contiguous pool)
    # has every state's writer from the compile on: each fills its state's row
    g = compile_regex(pattern, smollm2_vocab)
    assert g.tokens.eager
    n = g.num_states
    assert all(w is not None for w in g.tokens.writers[:n])
    lazy = TokenAutomaton(g.dfa, smollm2_vocab, eager=False)
    bitmask = allocate_bitmask(2, len(smollm2_vocab), backend="numpy")
    for s in list(range(1, n)) + [-1]:
        bitmask[:] = -1
        g.fill_bitmask(s, bitmask, 1)
        want = np.zeros(g.tokens.words, np.uint32) if s == -1 else lazy.row(s)
        assert np.array_equal(bitmask[1].view(np.uint32), want), s
        assert (bitmask[0] == -1).all()


def _read_only(row):
    row = row.copy()
    row.setflags(write=False)
    return row


def test_kernel_spans_give_row_writers_writer():
    # rows of 14 KB or more are written with pack_into over their non-zero
    # spans: the walk kernel's spans (token_kernels.row_spans) must give the
    # writer bitmask.row_writer's own scan gives, on every kind of row
    from constrain.regular.token_automaton import mask_writer
    from constrain.regular.token_kernels import row_spans
    from constrain.runtime.bitmask import _MAX_SPANS, _SPAN_GAP, row_writer

    rng = np.random.default_rng(5)
    words = 6251  # o200k's
    rows = [np.zeros(words, np.uint32)]
    for spans in [1, 3, 8, 9, 40, 3000]:
        for _ in range(4):
            row = np.zeros(words, np.uint32)
            for start in rng.integers(0, words, spans):
                part = row[start:start + int(rng.integers(1, 30))]
                part |= rng.integers(0, 1 << 32, len(part), dtype=np.uint32)
            rows.append(row)
    edge = np.zeros(words, np.uint32)
    edge[0], edge[-1] = 1, 1 << 31  # first and last byte; gaps of exactly 64 and 65 bytes
    edge[100], edge[116], edge[132] = 1, 1, 1 << 8  # bytes 400, 464 and 529
    rows.append(edge)
    # the scan goes 64 and 8 words at a time: runs of non-zero words across and
    # along those blocks, gaps at their edges, dense rows and half-dense ones
    for start, length in [(0, words), (0, words // 2 - 1), (0, words // 2 + 1), (64, 64), (63, 66),
                          (120, 8), (121, 8), (3000, 3251), (words - 70, 70)]:
        row = np.zeros(words, np.uint32)
        row[start:start + length] = 0x00FF0000
        rows.append(row)
        for extra in (start - 17, start - 16, start + length + 16, start + length + 17):
            if 0 <= extra < words:
                other = row.copy()
                other[extra] = 0x80
                rows.append(other)
    for row in rows:
        out = np.zeros(2 * _MAX_SPANS + 1, np.int64)
        row_spans(row, _SPAN_GAP, _MAX_SPANS, out)
        want = row_writer(memoryview(row).cast("B"))
        # the spans given, and found by mask_writer itself (a grammar's rows)
        for got in (mask_writer(row, out), mask_writer(row), mask_writer(_read_only(row))):
            if want.__class__ is tuple:
                assert got.__class__ is tuple
                assert got[0].__self__.format == want[0].__self__.format
                assert got[1] == want[1]
            else:
                assert got.__class__ is memoryview and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("eager", [True, False])
def test_o200k_fills_with_kernel_spans_equal_the_rows(o200k_vocab, eager):
    # o200k's 25 KB rows: each state's writer comes from the kernel's spans
    g = compile_regex(r"[0-9]{5}", o200k_vocab)
    auto = TokenAutomaton(g.dfa, o200k_vocab, eager=eager)
    assert auto.eager == eager and auto._max_spans > 0
    bitmask = allocate_bitmask(1, len(o200k_vocab), backend="numpy")
    for s in range(1, g.num_states):
        w = auto.writer(s)
        bitmask[:] = -1
        if w.__class__ is tuple:
            w[0](memoryview(bitmask[0]).cast("B"), 0, *w[1])
        else:
            memoryview(bitmask[0]).cast("B")[:] = w
        assert np.array_equal(bitmask[0].view(np.uint32), auto.row(s)), s
