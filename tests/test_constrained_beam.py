"""Lexically constrained beam search (dynamic beam allocation, Post & Vilar 2018).

Every returned hypothesis contains every phrase, on random tiny models; with a
beam wide enough to keep every candidate it finds the most probable constrained
sequence that brute-force enumeration finds; the bank allocation and the beams
it makes are pinned on hand-made examples; grammar constraints (a regex and a
Lark grammar over small vocabularies) compose, and a phrase the grammar cannot
place is refused before any model call; disjunctive alternatives; the default
model.

A tiny model here has ``V`` ids (the last one EOS) and normal random logits per
prefix, seeded by the prefix itself; after ``L - 1`` tokens it puts all its
mass on EOS.
"""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import constrain
import search
from byte_vocab import byte_vocabulary
from search.autoregressive.beam import beam_search
from search.autoregressive.constrained_beam import (MET, PhraseTracker, allocate_banks,
                                                    constrained_beam_search)
from search.lm.protocol import CallableLM


class TinyLM:
    """Random next-token log-probabilities per prefix; EOS (``V - 1``) forced
    after ``L - 1`` tokens."""

    def __init__(self, seed: int, V: int, L: int, sigma: float = 2.0):
        self.seed, self.V, self.L, self.sigma = seed, V, L, sigma

    def row(self, prefix) -> np.ndarray:
        prefix = tuple(prefix)
        if len(prefix) >= self.L - 1:
            out = np.full(self.V, -np.inf)
            out[self.V - 1] = 0.0
            return out
        logits = self.sigma * np.random.default_rng([self.seed, len(prefix), *prefix]).standard_normal(self.V)
        return logits - np.logaddexp.reduce(logits)

    def lm(self) -> CallableLM:
        return CallableLM(self.row, self.V, self.V - 1)


def _contains(tokens, alternatives) -> bool:
    return any(tuple(tokens[i:i + len(a)]) == tuple(a)
               for a in alternatives for i in range(len(tokens) - len(a) + 1))


def _as_alternatives(phrase):
    return phrase if isinstance(phrase[0], (list, tuple)) else [phrase]


def _brute_force(tiny: TinyLM, phrases, max_new_tokens: int, constraint=None):
    """The most probable finished sequence of at most ``max_new_tokens`` tokens
    (EOS included) containing every phrase (ties: the smaller token tuple), by
    enumerating every sequence of non-EOS tokens."""
    eos = tiny.V - 1
    rows: dict = {}

    def row(prefix):
        if prefix not in rows:
            rows[prefix] = tiny.row(prefix)
        return rows[prefix]

    best = None
    for n in range(min(max_new_tokens, tiny.L)):
        for body in itertools.product(range(eos), repeat=n):
            if not all(_contains(body, _as_alternatives(p)) for p in phrases):
                continue
            seq = body + (eos,)
            if constraint is not None and not constraint.accepts_tokens(seq):
                continue
            score = sum(float(row(seq[:i])[seq[i]]) for i in range(len(seq)))
            if score > -np.inf and (best is None or (-score, seq) < (-best[1], best[0])):
                best = (seq, score)
    return best


# -- the allocation --------------------------------------------------------------------


@pytest.mark.parametrize("beam, counts, expected", [
    (3, [5, 5, 5], [1, 1, 1]),
    (5, [5, 5, 5], [1, 1, 3]),        # the remainder goes to the top bank
    (4, [3, 1, 0], [3, 1, 0]),        # the top bank's slots pass down
    (4, [0, 0, 10], [0, 0, 4]),       # bank 0's unused slots go back up
    (5, [1, 3, 0], [1, 3, 0]),        # fewer candidates than slots
    (2, [5, 5, 5, 5], [0, 0, 0, 2]),  # more banks than slots: all to the top
    (2, [5, 0, 0, 1], [1, 0, 0, 1]),
    (6, [4, 1, 9, 0], [1, 1, 4, 0]),  # the top bank's 3 slots pass to the next one down
])
def test_allocate_banks_pinned(beam, counts, expected):
    assert allocate_banks(beam, counts) == expected


def test_allocate_banks_fills_the_beam_within_the_candidates():
    rng = random.Random(0)
    for _ in range(2000):
        counts = [rng.choice([0, 0, 1, 2, 5, 20]) for _ in range(rng.randint(1, 7))]
        k = rng.randint(1, 12)
        alloc = allocate_banks(k, counts)
        assert sum(alloc) == min(k, sum(counts))
        assert all(0 <= a <= c for a, c in zip(alloc, counts))


# -- the phrase tracker -------------------------------------------------------------------


def _walk(tracker, tokens):
    s = tracker.initial()
    for t in tokens:
        s = tracker.advance(s, t)
    return s


def test_tracker_falls_back_to_the_longest_open_match():
    tr = PhraseTracker([[(1, 1, 2)]])
    assert tr.done(_walk(tr, [1, 1, 1, 2]))          # KMP fallback: "1 1 | 1 2"
    assert not tr.done(_walk(tr, [1, 2, 1, 1]))
    assert tr.met_tokens(_walk(tr, [1, 1])) == 2
    assert tr.met_tokens(_walk(tr, [1, 1, 3])) == 0  # abandoned: progress resets
    assert tr.met_tokens(_walk(tr, [1, 1, 1])) == 2
    assert tr.advancing(_walk(tr, [1, 1])) == {1, 2}


def test_tracker_counts_met_phrases_and_alternatives():
    tr = PhraseTracker([[(5,)], [(1, 2, 3), (4, 4)]])
    assert tr.need == (1, 2) and tr.total == 3
    s = _walk(tr, [5])
    assert s[0] == MET and tr.met_tokens(s) == 1 and tr.tokens_needed(s) == 2
    s = _walk(tr, [5, 1, 2])        # the longer alternative: 1 of 2 left
    assert tr.met_tokens(s) == 2 and not tr.done(s)
    assert tr.done(_walk(tr, [4, 4, 0, 5]))
    assert tr.advancing(tr.initial()) == {5, 1, 4}


def test_tracker_needed_tokens_is_a_lower_bound_when_phrases_overlap():
    # "1 2" and "2 3" overlap in "1 2 3": 2 tokens meet both, so the bound is not the sum
    tr = PhraseTracker([[(1, 2)], [(2, 3)]])
    assert tr.tokens_needed(tr.initial()) == 2
    disjoint = PhraseTracker([[(1, 2)], [(3, 4)]])
    assert disjoint.tokens_needed(disjoint.initial()) == 4


# -- the search ------------------------------------------------------------------------


def _random_phrases(rng, V):
    eos = V - 1
    out = []
    for _ in range(rng.randint(1, 3)):
        alts = [[rng.randrange(eos) for _ in range(rng.randint(1, 2))] for _ in range(rng.choice([1, 1, 2]))]
        out.append(alts if len(alts) > 1 else alts[0])
    return out


def test_every_returned_hypothesis_contains_every_phrase():
    rng = random.Random(1)
    returned = 0
    for case in range(150):
        V = rng.randint(3, 6)
        tiny = TinyLM(case, V, L=rng.randint(4, 9))
        phrases = _random_phrases(rng, V)
        T = rng.randint(3, 10)
        out = constrained_beam_search(tiny.lm(), [0], phrases=phrases, beam_size=rng.randint(1, 5),
                                      max_new_tokens=T)
        returned += bool(out)
        for h in out:
            assert len(h.tokens) <= T
            assert all(_contains(h.token_ids, _as_alternatives(p)) for p in phrases), (phrases, h)
            assert h.finished == (h.tokens[-1:] == (V - 1,))
            assert V - 1 not in h.token_ids
    assert returned > 100


def test_a_wide_beam_finds_the_best_constrained_sequence():
    rng = random.Random(2)
    found = 0
    for case in range(60):
        V = rng.randint(3, 5)
        tiny = TinyLM(1000 + case, V, L=rng.randint(3, 7), sigma=rng.choice([0.5, 2.0, 4.0]))
        phrases = _random_phrases(rng, V)
        T = rng.randint(2, 8)
        lm = tiny.lm()
        out = constrained_beam_search(lm, [1], phrases=phrases, beam_size=10_000, max_new_tokens=T)
        ref = _brute_force(_Shifted(tiny, (1,)), phrases, T)  # scored after the prompt [1]
        if ref is None:
            assert out == [] or not out[0].finished
            continue
        found += 1
        assert out and out[0].finished
        assert out[0].tokens == ref[0] and out[0].score == pytest.approx(ref[1], abs=1e-9)
    assert found > 30


class _Shifted(TinyLM):
    """``tiny`` seen after a fixed prompt (for the brute force)."""

    def __init__(self, tiny: TinyLM, prompt: tuple[int, ...]):
        self.tiny, self.prompt, self.V = tiny, prompt, tiny.V
        self.L = tiny.L - len(prompt)

    def row(self, prefix):
        return self.tiny.row(self.prompt + tuple(prefix))


def test_the_banks_make_the_beam_on_a_hand_made_model():
    # every row: p = .35 .3 .15 .12, EOS .08; the phrase "3 2", beam 3
    row = np.log([0.35, 0.3, 0.15, 0.12, 0.08])
    seen = []

    def fn(prefixes):
        seen.append(sorted(tuple(p) for p in prefixes))
        return np.tile(row, (len(prefixes), 1))

    lm = CallableLM(fn, 5, 4, batched=True)
    out = constrained_beam_search(lm, [], phrases=[[3, 2]], beam_size=3, max_new_tokens=10)
    # step 1: banks [0: "0" "1" "2", 1: "3", 2: -]; slots 1/1/1, the top bank's pass
    # down, bank 1 has one candidate, so bank 0 keeps two: "0" "1" and the forced "3"
    # (a plain beam keeps "0" "1" "2")
    assert seen[1] == [(0,), (1,), (3,)]
    # step 2: bank 0 "0 0" (best of 8), bank 1 "0 3" (best of 3), bank 2 "3 2" (met)
    assert seen[2] == [(0, 0), (0, 3), (3, 2)]
    assert all(_contains(h.token_ids, [(3, 2)]) for h in out) and out[0].finished
    assert out[0].score >= float(row[3] + row[2] + row[4]) - 1e-12
    seen.clear()
    beam_search(lm, [], beam_size=3, max_new_tokens=2)
    assert seen[1] == [(0,), (1,), (2,)]


def test_without_phrases_it_is_a_beam_search_that_collects_finished_hypotheses():
    tiny = TinyLM(7, 4, L=5)
    out = constrained_beam_search(tiny.lm(), [0], phrases=[], beam_size=10_000, max_new_tokens=5)
    ref = _brute_force(_Shifted(tiny, (0,)), [], 5)
    assert out[0].tokens == ref[0]


def test_model_calls_per_step_are_at_most_the_beam():
    rng = random.Random(3)
    for case in range(30):
        tiny = TinyLM(case, 6, L=12)
        calls = []

        def fn(prefixes, tiny=tiny):
            calls.append(len(prefixes))
            return np.stack([tiny.row(p) for p in prefixes])

        lm = CallableLM(fn, 6, 5, batched=True)
        k = rng.randint(1, 4)
        constrained_beam_search(lm, [], phrases=_random_phrases(rng, 6), beam_size=k, max_new_tokens=10)
        assert max(calls) <= k and len(calls) <= 10 and lm.calls == sum(calls)


def test_disjunctive_alternatives_any_one_suffices():
    # the model likes token 2 and dislikes 3: of the alternatives "3 3" and "2", "2" is met
    row = np.log([0.1, 0.1, 0.6, 0.05, 0.15])
    lm = CallableLM(lambda p: row, 5, 4)
    out = constrained_beam_search(lm, [], phrases=[[[3, 3], [2]], [0]], beam_size=4, max_new_tokens=6)
    assert out and all(h.finished for h in out)
    best = out[0]
    assert _contains(best.token_ids, [(2,)]) and not _contains(best.token_ids, [(3, 3)])
    assert best.tokens == (2, 0, 4) or best.tokens == (0, 2, 4)


def test_cut_off_outputs_are_returned_only_when_nothing_finished():
    # EOS is impossible: nothing finishes
    row = np.array([np.log(0.5), np.log(0.5), -np.inf])
    lm = CallableLM(lambda p: row, 3, 2)
    out = constrained_beam_search(lm, [], phrases=[[1, 1]], beam_size=3, max_new_tokens=4)
    assert out and all(not h.finished and len(h.tokens) == 4 and _contains(h.tokens, [(1, 1)]) for h in out)


# -- grammar constraints ----------------------------------------------------------------


def _small_vocab():
    return constrain.Vocabulary.from_tokens([b"a", b"b", b"c", b"</s>"], [3], name="abc")


def test_with_a_regex_it_finds_the_best_sequence_in_both_languages():
    vocab = _small_vocab()
    rng = random.Random(4)
    for case in range(20):
        regex = rng.choice([r"a[abc]*", r"(ab|c)+", r"[bc]{1,3}a?", r"c*b?a*"])
        grammar = constrain.compile_regex(regex, vocab)
        tiny = TinyLM(2000 + case, 4, L=7)
        phrase = rng.choice([[0], [1], [2], [1, 0], [2, 2]])
        try:
            out = constrained_beam_search(tiny.lm(), [], constraint=grammar, phrases=[phrase],
                                          beam_size=10_000, max_new_tokens=7)
        except ValueError:
            assert _brute_force(tiny, [phrase], 7, grammar) is None
            continue
        ref = _brute_force(tiny, [phrase], 7, grammar)
        if ref is None:
            assert not out or not out[0].finished
            continue
        assert out[0].tokens == ref[0] and out[0].score == pytest.approx(ref[1])
        for h in out:
            assert grammar.accepts_tokens(h.tokens) and _contains(h.token_ids, [phrase])


def test_regex_over_bytes_composes_and_bad_phrases_fail_before_any_call():
    vocab = byte_vocabulary()
    grammar = constrain.compile_regex(r"[a-d ]{2,10}", vocab)
    tiny = TinyLM(5, len(vocab), L=14)
    lm = tiny.lm()
    out = constrained_beam_search(lm, [], constraint=grammar, phrases=[list(b"cab"), [list(b"dd"), list(b" a")]],
                                  beam_size=3, max_new_tokens=12)
    assert out
    for h in out:
        assert h.finished and grammar.accepts_tokens(h.tokens)
        text = bytes(h.token_ids)
        assert b"cab" in text and (b"dd" in text or b" a" in text)
    lm = tiny.lm()
    with pytest.raises(ValueError, match=r"phrase 1 .*cannot occur"):
        constrained_beam_search(lm, [], constraint=grammar, phrases=[list(b"ab"), list(b"CAT")],
                                beam_size=3, max_new_tokens=12)
    assert lm.calls == 0


def test_lark_grammar_composes_and_an_impossible_phrase_fails_before_any_call():
    vocab = byte_vocabulary()
    grammar = constrain.compile_grammar('start: "(" WORD ")"\nWORD: /[a-c]+/\n', vocab)
    lm = TinyLM(6, len(vocab), L=12).lm()
    out = constrained_beam_search(lm, [], constraint=grammar, phrases=[list(b"ba")], beam_size=3,
                                  max_new_tokens=10)
    assert out and all(grammar.accepts_tokens(h.tokens) and b"ba" in bytes(h.token_ids) for h in out)
    for bad in (list(b")("), list(b"d"), [[list(b"a("), list(b"x")]]):
        lm = TinyLM(6, len(vocab), L=12).lm()
        with pytest.raises(ValueError, match="phrase 0"):
            constrained_beam_search(lm, [], constraint=grammar, phrases=bad, beam_size=3, max_new_tokens=10)
        assert lm.calls == 0


def test_outputs_close_the_grammar_in_time_even_when_the_model_would_not():
    # ")" is never among the model's top continuations: only the closing candidate
    # (the grammar's shortest completion) proposes it, when the budget demands it
    vocab = byte_vocabulary()
    grammar = constrain.compile_grammar('start: "(" WORD ")"\nWORD: /[a-c]+/\n', vocab)
    tiny = TinyLM(8, len(vocab), L=40)

    def row(prefix):
        out = tiny.row(prefix)
        out[ord(")")] -= 40.0
        return out

    for T in (5, 8, 12):
        out = constrained_beam_search(CallableLM(row, len(vocab), 256), [], constraint=grammar,
                                      phrases=[list(b"ba")], beam_size=3, max_new_tokens=T)
        assert out and all(h.finished and grammar.accepts_tokens(h.tokens) for h in out)
        assert all(b"ba" in bytes(h.token_ids) and len(h.tokens) <= T for h in out)


@pytest.mark.parametrize("phrases, error", [
    ("abc", TypeError),           # a bare text, not a list of phrases
    ([[]], ValueError),
    ([[0, 9]], ValueError),       # outside the vocabulary
    ([[0, 4]], ValueError),       # EOS
    ([["x"]], TypeError),         # a text for a model without encode()
    ([[b"ab"]], ValueError),
])
def test_bad_phrases_are_refused(phrases, error):
    lm = TinyLM(0, 5, L=4).lm()
    with pytest.raises(error):
        constrained_beam_search(lm, [], phrases=phrases, beam_size=2, max_new_tokens=3)
    assert lm.calls == 0


def test_bad_arguments_are_refused():
    lm = TinyLM(0, 5, L=4).lm()
    for kw in (dict(beam_size=0, max_new_tokens=3), dict(beam_size=2, max_new_tokens=-1),
               dict(beam_size=1.5, max_new_tokens=3)):
        with pytest.raises(ValueError):
            constrained_beam_search(lm, [], phrases=[[0]], **kw)


# -- the default model ------------------------------------------------------------------


def test_default_model_puts_the_phrase_in(lm):
    out = search.constrained_beam_search(lm, "Name a big city in France.", phrases=["Lyon"],
                                         beam_size=2, max_new_tokens=4)
    assert out and all("Lyon" in h.text for h in out)
