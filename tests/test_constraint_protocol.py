"""The constraint protocol on small vocabularies, checked by brute force, and the
bitmask utilities and ``Matcher``."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch

from constrain import (
    ConstraintError,
    Matcher,
    Vocabulary,
    allocate_bitmask,
    apply_bitmask,
    bitmask_to_ids,
    compile_regex,
    grammar_path,
)
from constrain.errors import InvalidStateError

# A vocabulary with gaps: no token for "c" alone, multi-byte pieces of "é" and "😀",
# a special token, an EOS, two padding ids.
TOKENS = [b"a", b"b", b"ab", b"bc", b"abc", b"1", b"12", b"-", b"\xc3", b"\xa9", b"\xc3\xa9",
          b"\xf0\x9f", b"\x98\x80", b"\xf0\x9f\x98\x80", b"<s>", b"</s>", None, None]
EOS = 15
SPECIAL = 14


@pytest.fixture(scope="module")
def tiny():
    return Vocabulary.from_tokens(TOKENS, eos_token_ids=[EOS], special_token_ids=[SPECIAL])


def token_strings(vocab, max_len):
    ids = [i for i in range(len(vocab)) if vocab.grammar_token_mask[i]]
    for n in range(max_len + 1):
        yield from itertools.product(ids, repeat=n)


@pytest.mark.parametrize("pattern", [r"(ab|c)*", r"a(bc)+", r"[ab]{2,3}", r"1-?2*", r"(é|😀)+", r"abc|abd",
                                     r"(a|b)*bc", r"\w{1,3}", r"x?"])
def test_brute_force_sound_and_complete(tiny, pattern):
    """advance(s, t) is not None iff some token continuation (bounded) reaches a
    full match, and the mask agrees with advance everywhere."""
    try:
        g = compile_regex(pattern, tiny)
    except ConstraintError:
        # only a language this vocabulary cannot spell may be refused
        assert not any(re.fullmatch(pattern, tiny.decode(seq).decode("utf-8", "replace"))
                       for seq in token_strings(tiny, 4))
        return
    rx = re.compile(pattern)
    max_len = 5

    def matches(seq):
        try:
            return rx.fullmatch(tiny.decode(seq).decode("utf-8")) is not None
        except UnicodeDecodeError:
            return False

    # every prefix of a bounded matching token sequence must be allowed
    live_prefixes = set()
    for seq in token_strings(tiny, max_len):
        if matches(seq):
            for k in range(len(seq) + 1):
                live_prefixes.add(seq[:k])
    bm = allocate_bitmask(1, len(tiny), backend="numpy")
    for seq in token_strings(tiny, max_len - 1):
        state = g.advance_many(g.initial_state(), seq)
        if seq in live_prefixes:
            assert state is not None, seq
        if state is None:
            continue
        g.fill_bitmask(state, bm)
        allowed = set(bitmask_to_ids(bm[0], len(tiny)).tolist())
        assert SPECIAL not in allowed and 16 not in allowed and 17 not in allowed
        assert (EOS in allowed) == g.is_accepting(state) == matches(seq)
        for t in range(len(tiny)):
            assert (t in allowed) == (g.advance(state, t) is not None)
        for t in allowed - {EOS}:
            if seq + (t,) not in live_prefixes:
                # allowed but no bounded completion: a longer one must exist
                nxt = g.advance(state, t)
                assert _completes(g, nxt, depth=8), (seq, t)


def _completes(g, state, depth):
    if g.is_accepting(state):
        return True
    if depth == 0:
        return False
    toks, nexts = g.token_transitions(state)
    return any(_completes(g, int(n), depth - 1) for n in set(nexts.tolist()))


def test_lazy_masks_equal_eager(smollm2_vocab):
    from constrain.regular.token_automaton import TokenAutomaton

    pattern = r"[a-z]{2,6}(-[0-9]{1,3})?"
    lazy = compile_regex(pattern, smollm2_vocab, max_mask_bytes=3 * 4 * 1536)
    eager = TokenAutomaton(lazy.dfa, smollm2_vocab, eager=True)
    assert eager.eager and not lazy.tokens.eager
    for s in range(1, lazy.num_states):
        for _ in range(2):  # second pass recomputes rows after evictions
            assert np.array_equal(eager.row(s), lazy.tokens.row(s))
            assert np.array_equal(np.sort(eager.transitions(s)[0]), np.sort(lazy.token_transitions(s)[0]))


def test_fill_bitmask_numpy_torch_and_wide(tiny):
    g = compile_regex(r"a(bc)+", tiny)
    s = g.initial_state()
    ids = g.allowed_token_ids(s)
    for bm in (allocate_bitmask(3, len(tiny), backend="numpy"), allocate_bitmask(3, len(tiny))):
        g.fill_bitmask(s, bm, row=1)
        assert bitmask_to_ids(bm[1], len(tiny)).tolist() == ids.tolist()
        assert bitmask_to_ids(bm[0], len(tiny)).tolist() == list(range(len(tiny)))  # untouched
    wide = np.full((1, 4), -1, dtype=np.int32)
    g.fill_bitmask(s, wide)
    assert wide[0, 1:].tolist() == [0, 0, 0]
    narrow = np.zeros((1, 0), dtype=np.int32)
    with pytest.raises(ConstraintError, match="words per row"):
        g.fill_bitmask(s, narrow)


def test_row_writer_writes_exactly_the_row():
    from constrain.runtime.bitmask import _PACK_MIN_BYTES, row_writer

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 3000)) + (_PACK_MIN_BYTES if trial % 2 else 0)
        row = np.zeros(n, dtype=np.uint8)
        density = [0.0, 0.001, 0.01, 0.2, 0.9][trial % 5]
        hits = rng.random(n) < density
        row[hits] = rng.integers(1, 256, int(hits.sum()))
        if trial % 7 == 0:  # a few runs far apart, or many (more than one call can take)
            for a in rng.integers(0, n, int(rng.integers(1, 20))):
                row[a:a + int(rng.integers(1, 40))] = 255
        w = row_writer(memoryview(row.tobytes()))
        dst = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())  # stale bits
        if isinstance(w, tuple):
            w[0](dst, 0, *w[1])
        else:
            memoryview(dst)[:] = w
        assert bytes(dst) == row.tobytes()


def test_span_writer_writes_exactly_the_row_for_any_spans():
    """Spans at either end, none, the most row_writer makes and more: the
    writer zeroes a stale row and writes each span's bytes, nothing else."""
    from constrain.runtime.bitmask import _MAX_SPANS, span_writer

    rng = np.random.default_rng(1)
    n = 20_000
    cases = [([], []), ([0], [5]), ([n - 3], [n]), ([0, n - 1], [1, n]),
             ([k * 100 for k in range(_MAX_SPANS)], [k * 100 + 7 for k in range(_MAX_SPANS)]),
             ([k * 90 for k in range(3 * _MAX_SPANS)], [k * 90 + 2 for k in range(3 * _MAX_SPANS)])]
    for starts, ends in cases:
        row = np.zeros(n, dtype=np.uint8)
        for a, b in zip(starts, ends):
            row[a:b] = rng.integers(1, 256, b - a)
        pack, spans = span_writer(memoryview(row.tobytes()), starts, ends)
        assert spans == tuple(row[a:b].tobytes() for a, b in zip(starts, ends))
        dst = bytearray(rng.integers(0, 256, n, dtype=np.uint8).tobytes())  # stale bits
        pack(dst, 0, *spans)
        assert bytes(dst) == row.tobytes()


def test_fill_bitmask_switching_bitmasks(smollm2_vocab):
    """Fills alternate between bitmasks of different widths and kinds, rows start
    with stale bits; every row must be exactly the state's mask."""
    g = compile_regex(r"[0-9]{4}-(0[1-9]|1[0-2])(T[a-z]+)?", smollm2_vocab)
    v = len(smollm2_vocab)
    words = (v + 31) // 32
    masks = [allocate_bitmask(2, v), allocate_bitmask(1, v, backend="numpy"),
             np.full((2, words + 3), -1, dtype=np.int32)]
    state, text = g.initial_state(), "2024-11Tabc"
    states = [state]
    for ch in text:
        (tok,) = [t for t in g.allowed_token_ids(states[-1]) if smollm2_vocab.token_bytes(int(t)) == ch.encode()]
        states.append(g.advance(states[-1], int(tok)))
    states.append(g.advance(states[-1], smollm2_vocab.eos_token_ids[0]))
    for rep in range(2):
        for s in states:
            want = g.allowed_token_ids(s).tolist()
            for bm in masks:
                row = len(bm) - 1
                bm[row] = -1  # stale bits everywhere
                g.fill_bitmask(s, bm, row)
                got = np.asarray(bm[row])
                assert bitmask_to_ids(got[:words], v).tolist() == want
                assert not got[words:].any()


def test_terminated_state(tiny):
    g = compile_regex(r"ab", tiny)
    s = g.advance(g.initial_state(), 2)
    assert g.is_accepting(s) and not g.is_terminated(s)
    end = g.advance(s, EOS)
    assert g.is_terminated(end) and not g.is_accepting(end)
    assert g.advance(end, 0) is None and g.advance(end, EOS) is None
    bm = allocate_bitmask(1, len(tiny), backend="numpy")
    g.fill_bitmask(end, bm)
    assert not bm.any()
    assert g.advance(g.initial_state(), EOS) is None  # EOS only once accepting
    # every constraint answers the protocol's question (a regex raised AttributeError)
    assert g.allows_token_reference(g.initial_state()) is False
    assert g.allows_token_reference(end) is False
    with pytest.raises(InvalidStateError):
        g.allows_token_reference(99)


def test_several_eos_ids():
    v = Vocabulary.from_tokens([b"a", b"b", b"<e1>", b"<e2>"], eos_token_ids=[2, 3])
    g = compile_regex("a+", v)
    s = g.advance(g.initial_state(), 0)
    assert set(g.allowed_token_ids(s).tolist()) == {0, 2, 3}
    assert g.is_terminated(g.advance(s, 3))


def test_states_are_hashable_and_shared(tiny):
    g = compile_regex(r"(ab)*", tiny)
    s1 = g.advance_many(g.initial_state(), [0, 1])
    s2 = g.advance(g.initial_state(), 2)
    assert s1 == s2 and hash(s1) == hash(s2)
    assert len({s1, s2, g.initial_state()}) == 1  # "" and "ab" are the same state


def test_apply_bitmask_numpy_and_torch():
    v = 70
    bm = np.zeros((2, 3), dtype=np.int32)
    allowed = [[0, 31, 33, 63], [5, 64]]
    for row, ids in enumerate(allowed):
        for t in ids:
            bm[row, t >> 5] |= np.int32(np.uint32(1 << (t & 31)).view(np.int32))
    for make in (lambda x: x, torch.from_numpy):
        logits = make(np.zeros((2, v + 30), dtype=np.float32))  # wider than the bitmask
        apply_bitmask(logits, make(bm.copy()) if make is not None else bm)
        arr = np.asarray(logits)
        for row, ids in enumerate(allowed):
            finite = np.flatnonzero(np.isfinite(arr[row])).tolist()
            assert finite == ids
    half = torch.zeros((2, v), dtype=torch.float16)
    apply_bitmask(half, torch.from_numpy(bm))
    assert torch.isfinite(half[0]).nonzero().flatten().tolist() == allowed[0]
    one = torch.zeros(v)
    apply_bitmask(one, torch.from_numpy(bm[1]))
    assert torch.isfinite(one).nonzero().flatten().tolist() == allowed[1]
    with pytest.raises(ConstraintError, match="rows"):
        apply_bitmask(torch.zeros((3, v)), torch.from_numpy(bm))


def test_allocate_bitmask_layout():
    bm = allocate_bitmask(2, 49152)
    assert tuple(bm.shape) == (2, 1536) and bm.dtype == torch.int32 and bool((bm == -1).all())
    assert allocate_bitmask(1, 33, backend="numpy").shape == (1, 2)
    with pytest.raises(ConstraintError):
        allocate_bitmask(1, 10, backend="jax")


def test_matcher_accept_rollback_reset(tiny):
    g = compile_regex(r"a(bc)+", tiny)
    m = Matcher(g)
    assert m.accept_token(0) and m.accept_token(3)
    assert m.is_accepting() and not m.is_terminated()
    assert not m.accept_token(0)  # refused, state unchanged
    assert m.accept_token(3)
    m.rollback(1)
    assert m.state == g.advance_many(g.initial_state(), [0, 3])
    bm = allocate_bitmask(2, len(tiny))
    m.fill_next_token_bitmask(bm, 1)
    assert bitmask_to_ids(bm[1], len(tiny)).tolist() == g.allowed_token_ids(m.state).tolist()
    assert m.accept_token(EOS) and m.is_terminated()
    with pytest.raises(ConstraintError):
        m.rollback(10)
    assert not m.accept_tokens([0, 3, 0])  # all or nothing
    m.reset()
    assert m.state == g.initial_state()
    assert m.accept_tokens([0, 3, 3])


def test_grammar_path():
    path = grammar_path("json.lark")
    assert path.endswith("json.lark") and open(path).read().startswith("//")
    with pytest.raises(ConstraintError):
        grammar_path("nope.lark")
