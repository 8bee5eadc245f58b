"""Beam search drivers: breadth-first vs best-first on random tiny LMs, exact MAP
search against brute force, regex constraints, the LM protocol, the default model.

A tiny LM has a vocabulary of 2-6 ids (one of them EOS) and a random table of
next-token log-probabilities per prefix, computed (vectorised) from a hash of the
prefix and a seed; after ``L - 1`` tokens it puts all its mass on EOS, so every
hypothesis ends within ``L`` tokens.
"""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pytest

import constrain
import search
from search.autoregressive.beam import Hypothesis, beam_search, best_first_beam_search
from search.lm.protocol import CallableLM, TransformersLMAdapter, as_lm

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, on uint64 arrays (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class TinyLM:
    """A random tiny LM: ``V`` ids, EOS ``eos``, EOS forced after ``L - 1`` tokens.

    A prefix ``(t_0, ..., t_{n-1})`` has the code ``sum((t_i + 1) * (V + 1) ** i)``
    (unique); its row of logits is ``sigma * (2u - 1)`` for ``V`` uniform numbers
    ``u`` hashed from (seed, code, column)."""

    def __init__(self, seed: int, V: int, eos: int, L: int, sigma: float, quantize: bool = False):
        self.seed, self.V, self.eos, self.L, self.sigma = seed, V, eos, L, sigma
        self.quantize = quantize
        self._cols = np.arange(V, dtype=np.uint64)

    def code(self, prefix) -> int:
        c, m = 0, 1
        for t in prefix:
            c += (t + 1) * m
            m *= self.V + 1
        return c

    def rows(self, codes: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Log-probabilities ``(n, V)`` for prefixes given by code and length."""
        codes = np.asarray(codes, dtype=np.uint64)
        base = _mix(codes * np.uint64(1_000_003) ^ np.uint64(self.seed * 7919 + 17))
        x = _mix(base[:, None] + self._cols[None, :])
        u = (x >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        logits = self.sigma * (2 * u - 1)
        logits -= logits.max(axis=1, keepdims=True)
        lp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        if self.quantize:  # integer scores (not normalised): many exact ties
            lp = np.floor(lp)
        forced = np.asarray(length) >= self.L - 1
        if forced.any():
            lp[forced] = -np.inf
            lp[forced, self.eos] = 0.0
        return lp

    def __call__(self, prefixes) -> np.ndarray:
        codes = np.array([self.code(p) for p in prefixes], dtype=np.uint64)
        return self.rows(codes, np.array([len(p) for p in prefixes]))

    def lm(self) -> CallableLM:
        return CallableLM(self, self.V, self.eos, batched=True)


def _random_case(rng: random.Random, V=None, L=None) -> tuple[TinyLM, int]:
    V = V or rng.randint(2, 6)
    L = L or rng.randint(1, 8)
    tiny = TinyLM(rng.getrandbits(40), V, rng.randrange(V), L, rng.choice([0.3, 1.0, 2.0, 4.0, 8.0]))
    return tiny, rng.randint(1, 8)


def _brute_force(tiny: TinyLM, constraint=None, reward: float = 0.0) -> tuple[tuple[int, ...], float] | None:
    """The most probable complete sequence (with a ``reward``: the best by
    ``score + reward * len``; ties: smaller token tuple), by enumerating every
    prefix level by level (vectorised when unconstrained)."""
    V, eos, L = tiny.V, tiny.eos, tiny.L
    best = None

    def offer(tokens, score):
        nonlocal best
        adj = score + reward * len(tokens) if reward else score
        if best is None or (-adj, tokens) < (-best[2], best[0]):
            best = (tokens, score, adj)

    if constraint is None:
        codes = np.zeros(1, dtype=np.uint64)
        scores = np.zeros(1)
        toks = np.zeros((1, 0), dtype=np.int64)
        mult = 1
        for n in range(L):
            lp = tiny.rows(codes, np.full(len(codes), n))
            total = scores[:, None] + lp
            ends = total[:, eos]
            if not len(ends):
                break
            i = int(np.argmax(ends))
            if ends[i] > -np.inf:
                # ties within a level: the smallest token tuple among the maxima
                cand = np.flatnonzero(ends == ends[i])
                seqs = sorted(tuple(toks[j].tolist()) + (eos,) for j in cand)
                offer(seqs[0], float(ends[i]))
            others = [t for t in range(V) if t != eos]
            if not others or n == L - 1:
                break
            cols = np.array(others)
            sub = total[:, cols]
            keep = sub > -np.inf
            pi, ci = np.nonzero(keep)
            codes = codes[pi] + np.uint64(mult) * (cols[ci] + 1).astype(np.uint64)
            scores = sub[pi, ci]
            toks = np.concatenate([toks[pi], cols[ci][:, None]], axis=1)
            mult *= V + 1
        return best

    level = [((), 0.0, constraint.initial_state())]
    for n in range(L):
        if not level:
            break
        lp = tiny([p for p, _, _ in level])
        nxt = []
        for (p, s, st), row in zip(level, lp):
            for t in range(V):
                if row[t] == -np.inf:
                    continue
                st2 = constraint.advance(st, t)
                if st2 is None:
                    continue
                if t == eos:
                    offer(p + (t,), s + row[t])
                else:
                    nxt.append((p + (t,), s + row[t], st2))
        level = nxt
    return best


def _check_pair(tiny: TinyLM, k, constraint=None, batch_size=1, ratios=None):
    lm_b, lm_f = tiny.lm(), tiny.lm()
    T = tiny.L
    rb = beam_search(lm_b, (), beam_size=k, max_new_tokens=T, constraint=constraint)
    rf = best_first_beam_search(lm_f, (), beam_size=k, max_new_tokens=T, constraint=constraint,
                                batch_size=batch_size)
    assert len(rf) == 1
    if not rb:
        assert not rf
        return
    b, f = rb[0], rf[0]
    assert f.tokens == b.tokens, (tiny.__dict__, k, b, f)
    assert abs(f.score - b.score) <= 1e-9
    assert f.finished == b.finished
    assert lm_f.calls <= lm_b.calls, (tiny.__dict__, k, lm_f.calls, lm_b.calls)
    # results are best first, scores are what the model says
    assert [h.score for h in rb] == sorted((h.score for h in rb), reverse=True)
    assert abs(_rescore(tiny, b.tokens) - b.score) <= 1e-9
    if ratios is not None:
        ratios[k].append((lm_b.calls, lm_f.calls))


def _rescore(tiny: TinyLM, tokens) -> float:
    return float(sum(tiny([tokens[:i]])[0][t] for i, t in enumerate(tokens)))


# -- the LM protocol --------------------------------------------------------------


def test_callable_lm_counts_every_prefix():
    table = np.log(np.array([0.5, 0.25, 0.25]))
    lm = CallableLM(lambda p: table, vocab_size=3, eos_token_id=2)
    assert isinstance(lm, search.LM) and as_lm(lm) is lm
    assert lm.eos_token_ids == (2,) and lm.eos_token_id == 2 and lm.vocab_size == 3
    out = lm.logprobs([(0,), (0, 1), (0,)])
    assert out.shape == (3, 3) and lm.calls == 3  # no caching: a repeat counts again
    assert lm.logprobs([]).shape == (0, 3) and lm.calls == 3
    bad = CallableLM(lambda p: table[:2], vocab_size=3, eos_token_id=[2, 1])
    assert bad.eos_token_ids == (1, 2)
    with pytest.raises(ValueError):
        bad.logprobs([()])
    with pytest.raises(ValueError):
        CallableLM(lambda p: table, vocab_size=3, eos_token_id=3)
    with pytest.raises(TypeError):
        as_lm(object())


def test_as_lm_wraps_transformers_lms_by_type_not_by_name():
    """A subclass of TransformersLM is wrapped; a class that is only named
    TransformersLM is a plain protocol object, returned as it is."""
    from search.lm.transformers import TransformersLM

    class Tuned(TransformersLM):
        def __init__(self):  # no model: only what the adapter reads
            self.vocab_size, self.eos_token_ids, self.calls = 5, (4,), 0

    adapted = as_lm(Tuned())
    assert isinstance(adapted, TransformersLMAdapter) and adapted.eos_token_ids == (4,)
    impostor = type("TransformersLM", (), {"vocab_size": 5, "eos_token_ids": (4,), "calls": 0,
                                           "logprobs": lambda self, prefixes: None})()
    assert as_lm(impostor) is impostor


def test_argument_checks():
    lm = TinyLM(1, 3, 0, 4, 1.0).lm()
    for kw in ({"beam_size": 0}, {"beam_size": 1.5}, {"max_new_tokens": -1}, {"patience": 0}):
        args = {"beam_size": 2, "max_new_tokens": 3, **kw}
        with pytest.raises(ValueError):
            beam_search(lm, (), **args)
        with pytest.raises(ValueError):
            best_first_beam_search(lm, (), **args)
    with pytest.raises(NotImplementedError):
        best_first_beam_search(lm, (), beam_size=2, max_new_tokens=3, length_penalty=1.0)
    assert beam_search(lm, (), beam_size=2, max_new_tokens=0) == [Hypothesis((), 0.0, False)]
    assert best_first_beam_search(lm, (), beam_size=2, max_new_tokens=0) == [Hypothesis((), 0.0, False)]
    assert lm.calls == 0


# -- hand-made cases ----------------------------------------------------------------


def _table_lm(table: dict, V: int, eos: int) -> CallableLM:
    """An LM given as {prefix: {token: prob}} (missing tokens: probability 0)."""

    def fn(prefix):
        row = np.full(V, -np.inf)
        for t, p in table[prefix].items():
            row[t] = np.log(p)
        return row

    return CallableLM(fn, V, eos)


def test_finished_hypothesis_is_not_returned_when_not_first_at_its_length():
    """The field guide's subtle point. Beam 2: B_1 = [A (.7), E (.25)], B_2 = [AA
    (.35), AB (.35)] (E is pushed out), B_3 = [AAE (.21), ABE (.2)]: the answer is
    AAE. Best-first pops A, AA, AB, then E as the second pop of length 1: returning
    it there would be wrong; padded to length 2, where both slots are taken, it is
    dropped, and AAE is the first pop of length 3."""
    E, A, B = 0, 1, 2
    table = {
        (): {A: 0.7, E: 0.25, B: 0.05}, (B,): {E: 1.0},
        (A,): {A: 0.5, B: 0.5},
        (A, A): {E: 0.6, A: 0.4}, (A, B): {E: 0.2 / 0.35, A: 0.15 / 0.35},
        (A, A, A): {E: 1.0}, (A, B, A): {E: 1.0},
    }
    results = []
    for driver in (beam_search, best_first_beam_search):
        lm = _table_lm(table, 3, E)
        best = driver(lm, (), beam_size=2, max_new_tokens=4)[0]
        assert best.tokens == (A, A, E) and best.score == pytest.approx(np.log(0.21))
        results.append(lm.calls)
    assert results == [4, 4]  # both score (), A, AA and AB
    # with beam 3, E keeps its slot at length 2 (B_2 = [AA, AB, E]) and wins at length 3
    for driver in (beam_search, best_first_beam_search):
        best = driver(_table_lm(table, 3, E), (), beam_size=3, max_new_tokens=4)[0]
        assert best.tokens == (E,)


def test_finished_hypothesis_keeps_its_slot():
    """EOS (0.3) at step 1 is the second pop of its length; it keeps a slot at
    length 2, where it beats everything, so both drivers return it."""
    E, A, B = 0, 1, 2
    table = {
        (): {A: 0.6, E: 0.3, B: 0.1},
        (A,): {A: 0.45, B: 0.45, E: 0.1},
        (A, A): {E: 1.0}, (A, B): {E: 1.0},
        (B,): {E: 1.0},
    }
    for driver in (beam_search, best_first_beam_search):
        lm = _table_lm(table, 3, E)
        best = driver(lm, (), beam_size=2, max_new_tokens=3)[0]
        assert best.tokens == (E,) and best.finished and best.score == pytest.approx(np.log(0.3))
    # with beam 1 the EOS never enters a beam: A A E (0.27) wins
    for driver in (beam_search, best_first_beam_search):
        best = driver(_table_lm(table, 3, E), (), beam_size=1, max_new_tokens=3)[0]
        assert best.tokens == (A, A, E)


def test_length_penalty_and_patience_in_beam_search():
    E, A = 0, 1
    # EOS now (0.4) or A then EOS (0.6 * 0.6 = 0.36): per-token, the longer one wins
    table = {(): {A: 0.6, E: 0.4}, (A,): {E: 0.6, A: 0.4}, (A, A): {E: 1.0}}
    plain = beam_search(_table_lm(table, 2, E), (), beam_size=2, max_new_tokens=3)
    assert plain[0].tokens == (E,)
    pen = beam_search(_table_lm(table, 2, E), (), beam_size=2, max_new_tokens=3, length_penalty=1.0)
    assert pen[0].tokens == (A, E)
    assert pen[0].normalized_score(1.0) == pytest.approx(np.log(0.36) / 2)
    # patience 2 (n = 4 ended) searches on until (A, A, E) has ended too
    lm = _table_lm(table, 2, E)
    long = beam_search(lm, (), beam_size=2, max_new_tokens=5, patience=2.0)
    assert {h.tokens for h in long} == {(E,), (A, E)}
    assert lm.calls == 2  # nothing left to expand after step 3
    # patience 0.5 (n = 1): stop as soon as one hypothesis has ended
    lm = _table_lm(table, 2, E)
    beam_search(lm, (), beam_size=2, max_new_tokens=5, patience=0.5)
    assert lm.calls == 1


# -- random tiny LMs ------------------------------------------------------------------


_RATIOS: dict = defaultdict(list)


def _tiny_cases(n=2000):
    """The same ``n`` random (tiny LM, beam size) pairs on every call."""
    rng = random.Random(20201)
    return [_random_case(rng) for _ in range(n)]


def test_best_first_equals_beam_on_2000_tiny_lms():
    for case, (tiny, k) in enumerate(_tiny_cases()):
        _check_pair(tiny, k, batch_size=1 if case % 4 else k, ratios=None if case % 4 == 0 else _RATIOS)


def test_call_ratio_grows_with_beam_size():
    """Best-first saves calls, more so for wide beams (informative, loose bounds)."""
    rng = random.Random(7)
    for _ in range(400):
        tiny, _ = _random_case(rng, V=6, L=8)
        for k in (1, 2, 4, 8):
            _check_pair(tiny, k, ratios=_RATIOS)
    ratio = {k: sum(b for b, _ in v) / sum(f for _, f in v) for k, v in _RATIOS.items()}
    print("calls(beam) / calls(best-first) by beam size:", {k: round(r, 2) for k, r in sorted(ratio.items())})
    assert ratio[1] >= 1.0 and ratio[8] > ratio[2] > 1.0


def test_ties_are_broken_alike():
    """Integer log-probabilities make equal scores common; both drivers must still
    agree, and exact search must still find a most probable sequence."""
    rng = random.Random(99)
    for case in range(1000):
        tiny, k = _random_case(rng)
        tiny.quantize = True
        _check_pair(tiny, k, batch_size=1 if case % 2 else k)
        if case < 200:
            got = best_first_beam_search(tiny.lm(), (), beam_size=None, max_new_tokens=tiny.L)[0]
            want = _brute_force(tiny)
            assert got.finished and got.score == want[1] == _rescore(tiny, got.tokens)


def test_exact_map_search_on_300_tiny_lms():
    for tiny, _ in _tiny_cases()[:300]:
        lm = tiny.lm()
        got = best_first_beam_search(lm, (), beam_size=None, max_new_tokens=tiny.L)[0]
        want = _brute_force(tiny)
        assert got.finished and got.tokens == want[0], (tiny.__dict__, got, want)
        assert abs(got.score - want[1]) <= 1e-9


def test_length_reward_is_monotone_and_exact():
    """Meister et al.'s stand-in for length normalisation, score + r * len with an
    admissible bonus for unfinished hypotheses: both drivers agree on it, and with
    beam_size=None best-first search finds the brute-force optimum."""
    rng = random.Random(5)
    for case in range(600):
        tiny, k = _random_case(rng)
        r = rng.choice([-0.5, 0.25, 1.0, 3.0])
        lm_b, lm_f = tiny.lm(), tiny.lm()
        b = beam_search(lm_b, (), beam_size=k, max_new_tokens=tiny.L, length_reward=r)[0]
        f = best_first_beam_search(lm_f, (), beam_size=k, max_new_tokens=tiny.L, length_reward=r,
                                   batch_size=1 if case % 2 else k)[0]
        assert f.tokens == b.tokens and abs(f.score - b.score) <= 1e-9 and lm_f.calls <= lm_b.calls
        if case < 200:
            got = best_first_beam_search(tiny.lm(), (), beam_size=None, max_new_tokens=tiny.L, length_reward=r)[0]
            want = _brute_force(tiny, reward=r)
            assert got.finished and got.tokens == want[0], (r, tiny.__dict__, got, want)
    # a reward lets the longer answer win: A E (0.36 = 0.6 * 0.6) over E (0.4)
    E, A = 0, 1
    table = {(): {A: 0.6, E: 0.4}, (A,): {E: 0.6, A: 0.4}, (A, A): {E: 1.0}}
    for driver in (beam_search, best_first_beam_search):
        assert driver(_table_lm(table, 2, E), (), beam_size=2, max_new_tokens=3)[0].tokens == (E,)
        assert driver(_table_lm(table, 2, E), (), beam_size=2, max_new_tokens=3,
                      length_reward=0.2)[0].tokens == (A, E)


REGEXES = [r"(ab|c)*", r"a+b?c*", r"[abc]{1,3}", r"(a|b)*c", r"c|ab*", r"(aa|b)+", r"a(b|c)?", r"[ab]*d?"]


@pytest.fixture(scope="module")
def regex_constraints():
    """Every pattern of REGEXES compiled against byte vocabularies of 1-5 letters
    plus an EOS (at a random position), keyed by (number of letters, EOS id)."""
    out = {}
    for n in range(1, 6):
        for eos in range(n + 1):
            letters = [bytes([c]) for c in b"abcde"[:n]]
            tokens = letters[:eos] + [b"<eos>"] + letters[eos:]
            vocab = constrain.Vocabulary.from_tokens(tokens, [eos], name=f"tiny{n}e{eos}")
            for pattern in REGEXES:
                try:
                    out[n, eos, pattern] = constrain.compile_regex(pattern, vocab)
                except constrain.EmptyLanguageError:
                    pass
    return out


def test_regex_constrained_search_on_tiny_lms(regex_constraints):
    rng = random.Random(4)
    keys = sorted(regex_constraints)
    n_map = 0
    for case in range(2000):
        n, eos, pattern = keys[rng.randrange(len(keys))]
        c = regex_constraints[n, eos, pattern]
        tiny = TinyLM(rng.getrandbits(40), n + 1, eos, rng.randint(2, 8), rng.choice([0.3, 1.0, 2.0, 4.0]))
        k = rng.randint(1, 8)
        _check_pair(tiny, k, constraint=c, batch_size=1 if case % 3 else k)
        res = beam_search(tiny.lm(), (), beam_size=k, max_new_tokens=tiny.L, constraint=c)
        for h in res:
            if h.finished:
                assert c.accepts_tokens(h.tokens)
                assert c.is_terminated(h.state)
            else:
                assert c.advance_many(c.initial_state(), h.tokens) == h.state
        if case < 300:
            want = _brute_force(tiny, c)
            got = best_first_beam_search(tiny.lm(), (), beam_size=None, max_new_tokens=tiny.L, constraint=c)
            if want is None:  # no valid string within L - 1 letters
                assert not got or not got[0].finished
                continue
            n_map += 1
            assert got[0].finished and got[0].tokens == want[0], (pattern, tiny.__dict__, got, want)
            assert abs(got[0].score - want[1]) <= 1e-9
            assert c.accepts_tokens(got[0].tokens)
    assert n_map >= 200


def test_memory_reduced_variant_stays_close():
    """With a queue of c * k entries the answer is valid and, for c large enough to
    hold every candidate, the same."""
    rng = random.Random(11)
    for _ in range(200):
        tiny, k = _random_case(rng)
        want = beam_search(tiny.lm(), (), beam_size=k, max_new_tokens=tiny.L)[0]
        big = best_first_beam_search(tiny.lm(), (), beam_size=k, max_new_tokens=tiny.L,
                                     queue_factor=tiny.V * tiny.L + 1)[0]
        assert big.tokens == want.tokens
        small = best_first_beam_search(tiny.lm(), (), beam_size=k, max_new_tokens=tiny.L, queue_factor=1)[0]
        assert abs(_rescore(tiny, small.tokens) - small.score) <= 1e-9


def test_results_and_the_old_keyword():
    """Hypotheses are search results (``token_ids`` without the EOS; no text from a
    model without a decoder); ``prompt_ids=``, the old keyword, still works with a
    DeprecationWarning; a text prompt needs a model with ``prompt_ids``."""
    tiny = TinyLM(5, 4, 0, 4, 2.0)
    want = beam_search(tiny.lm(), (1,), beam_size=2, max_new_tokens=4)
    h = want[0]
    assert isinstance(h, search.SearchResult) and h.text is None
    assert h.token_ids == (h.tokens[:-1] if h.finished else h.tokens)
    for fn in (beam_search, best_first_beam_search):
        with pytest.warns(DeprecationWarning, match=r"write prompt= for prompt_ids="):
            got = fn(tiny.lm(), prompt_ids=(1,), beam_size=2, max_new_tokens=4)
        assert got[0] == h
        with pytest.raises(TypeError, match="prompt_ids"):
            fn(tiny.lm(), "a text", beam_size=2, max_new_tokens=4)


# -- the default model -------------------------------------------------------------




def test_default_model_smoke(default_lm):
    lm = as_lm(default_lm)
    assert isinstance(lm, TransformersLMAdapter) and lm.eos_token_ids == tuple(default_lm.eos_token_ids)
    ids = default_lm.apply_chat_template("Name a colour.")
    c0 = lm.calls
    rb = beam_search(default_lm, ids, beam_size=3, max_new_tokens=4)
    c1 = lm.calls
    rf = best_first_beam_search(default_lm, ids, beam_size=3, max_new_tokens=4)
    c2 = lm.calls
    assert len(rb) == 3 and rf[0].tokens == rb[0].tokens
    # beam search scores its hypotheses in batches, best-first one at a time: the
    # same prefixes through float32 matrix products of different shapes
    assert abs(rf[0].score - rb[0].score) <= 1e-5
    assert c2 - c1 <= c1 - c0
    digits = constrain.compile_regex(r"[0-9]{1,2}", default_lm.vocab)
    rb = beam_search(default_lm, default_lm.apply_chat_template("A number?"), beam_size=3,
                     max_new_tokens=3, constraint=digits)
    assert rb[0].finished and digits.accepts_tokens(rb[0].tokens)
    assert default_lm.decode(rb[0].tokens[:-1]).isdigit()
    # a text prompt goes through the chat template; the results carry their text
    by_text = beam_search(default_lm, "A number?", beam_size=3, max_new_tokens=3, constraint=digits)
    assert [h.tokens for h in by_text] == [h.tokens for h in rb]
    assert by_text[0].text == default_lm.decode(rb[0].token_ids) and by_text[0].text.isdigit()
